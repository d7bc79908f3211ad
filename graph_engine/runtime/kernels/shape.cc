#include "kernels/shape.h"

#include <cstring>

#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {

int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string ShapeString(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

Dims RowMajorStrides(const Dims& dims) {
  Dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

Status NormalizeAxis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank)
    return Error("axis ", axis, " is out of range for rank ", rank, " (allowed: [", -rank, ", ",
                 rank, "))");
  *out = axis < 0 ? axis + rank : axis;
  return Status::Ok();
}

Status BroadcastStrides(const Dims& in, const Dims& out, Dims* strides) {
  if (in.size() > out.size())
    return Error("shape ", ShapeString(in), " does not broadcast to ", ShapeString(out));
  strides->assign(out.size(), 0);
  const size_t lead = out.size() - in.size();
  const Dims in_strides = RowMajorStrides(in);
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == out[lead + i]) (*strides)[lead + i] = in[i] == 1 ? 0 : in_strides[i];
    else if (in[i] != 1)
      return Error("shape ", ShapeString(in), " does not broadcast to ", ShapeString(out));
  }
  return Status::Ok();
}

StridedPlan StridedPlan::Make(const Dims& dims, const std::vector<Dims>& strides,
                              const std::vector<int64_t>& offsets) {
  StridedPlan p;
  p.operands = static_cast<int>(strides.size());
  p.strides.resize(p.operands);
  for (int op = 0; op < p.operands && op < static_cast<int>(offsets.size()); ++op)
    p.offsets[op] = offsets[op];
  for (size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 1) continue;
    // Axis a continues the previous kept axis for every operand: merge them.
    bool merge = !p.dims.empty();
    for (int op = 0; merge && op < p.operands; ++op)
      merge = p.strides[op].back() == strides[op][a] * dims[a];
    if (merge) {
      p.dims.back() *= dims[a];
      for (int op = 0; op < p.operands; ++op) p.strides[op].back() = strides[op][a];
    } else {
      p.dims.push_back(dims[a]);
      for (int op = 0; op < p.operands; ++op) p.strides[op].push_back(strides[op][a]);
    }
  }
  if (p.dims.empty() || NumElements(dims) == 0) {
    // A single element, or nothing at all.
    p.dims.assign(1, NumElements(dims));
    for (int op = 0; op < p.operands; ++op) p.strides[op].assign(1, 1);
  }
  return p;
}

namespace {

template <class T>
void CopyRuns(const StridedPlan& plan, int64_t begin, int64_t end, const char* src, char* dst) {
  const int64_t ds = plan.inner_stride(0), ss = plan.inner_stride(1);
  plan.ForEachRun(begin, end, [&](const int64_t* off, int64_t n) {
    T* d = reinterpret_cast<T*>(dst) + off[0];
    const T* s = reinterpret_cast<const T*>(src) + off[1];
    if (ds == 1 && ss == 1) std::memcpy(d, s, n * sizeof(T));
    else if (ds == 1 && ss == 0) std::fill(d, d + n, *s);
    else for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
  });
}

// A transpose writes along the innermost axis while reading along another axis `a`: copying
// in kTile x kTile tiles of (a, innermost) keeps both sides in cache.
constexpr int64_t kTile = 32;

template <class T>
void CopyTiles(const StridedPlan& plan, int a, const StridedPlan& outer, int64_t begin, int64_t end,
               const char* src, char* dst) {
  const int inner = static_cast<int>(plan.dims.size()) - 1;
  const int64_t na = plan.dims[a], nb = plan.dims[inner];
  const int64_t ta = (na + kTile - 1) / kTile, tb = (nb + kTile - 1) / kTile;
  const int64_t da = plan.strides[0][a], sa = plan.strides[1][a], sb = plan.strides[1][inner];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t o = item / (ta * tb), i0 = item / tb % ta * kTile, j0 = item % tb * kTile;
    outer.ForEachRun(o, o + 1, [&](const int64_t* off, int64_t) {
      T* d = reinterpret_cast<T*>(dst) + off[0];
      const T* s = reinterpret_cast<const T*>(src) + off[1];
      for (int64_t i = i0; i < std::min(na, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(nb, j0 + kTile); ++j) d[i * da + j] = s[i * sa + j * sb];
    });
  }
}

template <class T>
void CopyPlan(const StridedPlan& plan, const char* src, char* dst) {
  const int inner = static_cast<int>(plan.dims.size()) - 1;
  int a = -1;   // the axis the source is contiguous along, for a transpose
  if (inner > 0 && plan.inner_stride(0) == 1 && plan.inner_stride(1) != 1 && plan.inner() >= kTile)
    for (int k = 0; k < inner; ++k)
      if (plan.strides[1][k] == 1 && plan.dims[k] >= kTile) a = k;
  if (a < 0) {
    ParallelFor(plan.size(), sizeof(T), [&](int64_t b, int64_t e) { CopyRuns<T>(plan, b, e, src, dst); });
    return;
  }
  Dims dims;
  std::vector<Dims> strides(2);
  for (int k = 0; k < inner; ++k) {
    if (k == a) continue;
    dims.push_back(plan.dims[k]);
    for (int op = 0; op < 2; ++op) strides[op].push_back(plan.strides[op][k]);
  }
  const StridedPlan outer = StridedPlan::Make(dims, strides, {plan.offsets[0], plan.offsets[1]});
  const int64_t tiles = ((plan.dims[a] + kTile - 1) / kTile) * ((plan.inner() + kTile - 1) / kTile);
  ParallelFor(outer.size() * tiles, kTile * kTile * sizeof(T), [&](int64_t b, int64_t e) {
    CopyTiles<T>(plan, a, outer, b, e, src, dst);
  });
}

}  // namespace

void CopyStrided(const StridedPlan& plan, int elem_size, const void* src, void* dst) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  switch (elem_size) {
    case 1: return CopyPlan<uint8_t>(plan, s, d);
    case 2: return CopyPlan<uint16_t>(plan, s, d);
    case 4: return CopyPlan<uint32_t>(plan, s, d);
    case 8: return CopyPlan<uint64_t>(plan, s, d);
  }
}

}  // namespace kernels
}  // namespace npu
