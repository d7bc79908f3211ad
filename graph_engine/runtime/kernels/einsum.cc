// Einsum (one or two operands): every output element is a sum over the contracted labels of
// the product of the operands' elements; a label repeated in the output writes a diagonal
// (zeros elsewhere; TF's gradient of "ii->i" is "i->ii"). The equation is resolved at load time into one
// stride per label and operand (a label repeated within an operand adds its strides, which
// reads the diagonal; a size-1 dimension broadcast against a larger one has stride 0), so
// Compute is a plain loop nest. Multi-head attention's einsums are small batched products;
// this keeps one general kernel instead of a transpose/matmul lowering per equation.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

constexpr int kEllipsisBase = 256;   // labels of "..." dims: 256 + k (letters use their code)

// One operand's labels with "..." expanded to `ellipsis_rank` labels, right-aligned.
Status ExpandTerm(const std::string& term, int rank, int ellipsis_rank, std::vector<int>* out) {
  size_t dots = term.find("...");
  std::string letters = term;
  if (dots != std::string::npos) letters.erase(dots, 3);
  for (char c : letters)
    if (!std::isalpha(static_cast<unsigned char>(c)))
      return Error("Einsum: invalid label '", c, "' in \"", term, "\" (labels are letters and \"...\")");
  int own = rank < 0 ? ellipsis_rank : rank - static_cast<int>(letters.size());
  if (dots == std::string::npos) {
    if (rank >= 0 && own != 0)
      return Error("Einsum: term \"", term, "\" has ", letters.size(), " labels for a rank-", rank, " operand");
    own = 0;
  } else if (own < 0 || own > ellipsis_rank) {
    return Error("Einsum: term \"", term, "\" does not fit a rank-", rank, " operand");
  }
  out->clear();
  for (size_t i = 0; i < term.size();) {
    if (term.compare(i, 3, "...") == 0) {
      for (int k = ellipsis_rank - own; k < ellipsis_rank; ++k) out->push_back(kEllipsisBase + k);
      i += 3;
    } else {
      out->push_back(static_cast<unsigned char>(term[i++]));
    }
  }
  return Status::Ok();
}

class EinsumKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    if (def.inputs.empty() || def.inputs.size() > 2 || def.outputs.size() != 1)
      return Error("Einsum takes 1 or 2 inputs and 1 output, got ", def.inputs.size(), " and ",
                   def.outputs.size());
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    for (const auto& t : def.inputs)
      if (ComputeTypeOf(t.dtype) != ComputeType::kFloat || t.dtype != def.outputs[0].dtype)
        return Error("Einsum: dtype ", DTypeName(t.dtype), " not supported (allowed: float32, "
                     "float16, bfloat16, one dtype for inputs and output)");
    std::string eq;
    NPU_RETURN_IF_ERROR(def.attrs.String("equation", &eq));
    eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
    const size_t arrow = eq.find("->");
    if (arrow == std::string::npos || eq.find("->", arrow + 1) != std::string::npos)
      return Error("Einsum: equation \"", eq, "\" must contain exactly one \"->\"");
    const std::string lhs = eq.substr(0, arrow);
    std::vector<std::string> terms;
    for (size_t b = 0;;) {
      size_t c = lhs.find(',', b);
      terms.push_back(lhs.substr(b, c == std::string::npos ? std::string::npos : c - b));
      if (c == std::string::npos) break;
      b = c + 1;
    }
    if (terms.size() != def.inputs.size())
      return Error("Einsum: equation \"", eq, "\" has ", terms.size(), " operands, the node has ",
                   def.inputs.size(), " inputs");
    auto k = std::make_unique<EinsumKernel>();
    int ellipsis_rank = 0;
    for (size_t i = 0; i < terms.size(); ++i) {
      std::string t = terms[i];
      if (t.find("...") != std::string::npos) {
        t.erase(t.find("..."), 3);
        ellipsis_rank = std::max(ellipsis_rank, static_cast<int>(def.inputs[i].dims.size() - t.size()));
      }
    }
    std::vector<std::vector<int>> in_labels(terms.size());
    std::map<int, int64_t> size;
    for (size_t i = 0; i < terms.size(); ++i) {
      const auto& dims = def.inputs[i].dims;
      NPU_RETURN_IF_ERROR(ExpandTerm(terms[i], static_cast<int>(dims.size()), ellipsis_rank, &in_labels[i]));
      for (size_t d = 0; d < dims.size(); ++d) {
        int l = in_labels[i][d];
        int64_t& s = size.emplace(l, dims[d]).first->second;
        if (s == 1) s = dims[d];
        else if (dims[d] != 1 && dims[d] != s)
          return Error("Einsum: label sizes differ (", s, " vs ", dims[d], ") in \"", eq, "\"");
      }
    }
    std::vector<int> out_labels;
    NPU_RETURN_IF_ERROR(ExpandTerm(eq.substr(arrow + 2), -1, ellipsis_rank, &out_labels));
    Dims out_dims;
    for (int l : out_labels) {
      if (!size.count(l)) return Error("Einsum: output label '", char(l), "' is not in any input of \"", eq, "\"");
      out_dims.push_back(size[l]);
    }
    if (out_dims != def.outputs[0].dims)
      return Error("Einsum: output shape ", ShapeString(def.outputs[0].dims), " does not match \"",
                   eq, "\" (expected ", ShapeString(out_dims), ")");
    // Loop labels: the distinct output labels (outer), then the contracted ones.
    std::vector<int> loop;
    for (int l : out_labels)
      if (std::find(loop.begin(), loop.end(), l) == loop.end()) loop.push_back(l);
    k->n_out_ = static_cast<int>(loop.size());
    for (auto& [l, s] : size)
      if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) loop.push_back(l);
    for (int l : loop) k->sizes_.push_back(size[l]);
    k->out_strides_.assign(k->n_out_, 0);
    for (int64_t d = static_cast<int64_t>(out_labels.size()) - 1, st = 1; d >= 0; st *= out_dims[d--])
      k->out_strides_[std::find(loop.begin(), loop.end(), out_labels[d]) - loop.begin()] += st;
    k->strides_.assign(terms.size(), std::vector<int64_t>(loop.size(), 0));
    for (size_t i = 0; i < terms.size(); ++i) {
      const auto& dims = def.inputs[i].dims;
      int64_t st = 1;
      for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
        const size_t pos = std::find(loop.begin(), loop.end(), in_labels[i][d]) - loop.begin();
        if (dims[d] != 1) k->strides_[i][pos] += st;
        st *= dims[d];
      }
      k->in_dtypes_.push_back(def.inputs[i].dtype);
      k->in_sizes_.push_back(NumElements(dims));
    }
    k->out_dtype_ = def.outputs[0].dtype;
    k->out_size_ = NumElements(def.outputs[0].dims);
    k->inner_ = 1;
    k->outer_ = 1;
    for (int j = 0; j < k->n_out_; ++j) k->outer_ *= k->sizes_[j];
    for (size_t j = k->n_out_; j < loop.size(); ++j) k->inner_ *= k->sizes_[j];
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int n = static_cast<int>(in_dtypes_.size());
    std::vector<float> in[2];
    for (int i = 0; i < n; ++i) {
      in[i].resize(in_sizes_[i]);
      Load<float>(in_dtypes_[i], args.in(i), in_sizes_[i], in[i].data());
    }
    std::vector<float> out(out_size_, 0.f);   // off-diagonal outputs stay 0
    const int rank = static_cast<int>(sizes_.size());
    ParallelFor(outer_, 2 * inner_ * n, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> idx(rank);
      for (int64_t o = begin; o < end; ++o) {
        int64_t rest = o;                       // -> the outer loop indices
        for (int j = n_out_ - 1; j >= 0; --j) { idx[j] = rest % sizes_[j]; rest /= sizes_[j]; }
        std::fill(idx.begin() + n_out_, idx.end(), 0);
        int64_t off[2] = {0, 0}, out_off = 0;
        for (int j = 0; j < n_out_; ++j) out_off += idx[j] * out_strides_[j];
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n_out_; ++j) off[i] += idx[j] * strides_[i][j];
        double acc = 0;
        for (int64_t c = 0; c < inner_; ++c) {
          acc += n == 1 ? in[0][off[0]] : double(in[0][off[0]]) * in[1][off[1]];
          for (int j = rank - 1; j >= n_out_; --j) {   // odometer over the contracted labels
            for (int i = 0; i < n; ++i) off[i] += strides_[i][j];
            if (++idx[j] < sizes_[j]) break;
            for (int i = 0; i < n; ++i) off[i] -= sizes_[j] * strides_[i][j];
            idx[j] = 0;
          }
        }
        out[out_off] = static_cast<float>(acc);
      }
    });
    Store<float>(out_dtype_, out.data(), out_size_, args.out(0));
    return Status::Ok();
  }

 private:
  int n_out_ = 0;
  std::vector<int64_t> sizes_;                 // per loop label
  std::vector<std::vector<int64_t>> strides_;  // per input, per loop label
  std::vector<int64_t> out_strides_;           // per distinct output label
  std::vector<int> in_dtypes_;
  std::vector<int64_t> in_sizes_;
  int out_dtype_ = 0;
  int64_t out_size_ = 0, outer_ = 1, inner_ = 1;
};

NPU_REGISTER_KERNEL("Einsum", EinsumKernel::Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
