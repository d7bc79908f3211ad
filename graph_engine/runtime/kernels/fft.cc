// Fourier transforms of the innermost 1-3 dimensions: FFT/IFFT (complex to complex), RFFT (real
// to the non-negative half of the spectrum) and IRFFT (its inverse), as tf.signal computes them.
//
// The transforms are DUCC's (ducc0/fft, header-only, from the TF wheel's headers), the library
// TF's own CPU kernels call, the same way they call it: the input cropped to fft_length (its
// strides kept), the transformed axes in order, inverse transforms scaled by 1/N in the last
// pass. So the results are TF's not only up to rounding but also where non-finite values go: an
// FFT's NaN and inf reach exactly the outputs that DUCC's butterflies carry them to (a NaN real
// part stays out of the imaginary parts where the twiddle factors are exact ±1, ±i), which
// depends on the algorithm (kissfft multiplies every term by a complex twiddle). DUCC's thread
// pool lives in a .cc the wheel does not ship: the three entry points its headers call are
// defined below, serially (nthreads 1); the kernel splits the batch over our pool instead.
// CMakeLists.txt compiles this file with DUCC's include root and without multiply-add
// contraction (the TF wheel is built without FMA; a fused butterfly overflows differently).
#include <ducc0/fft/fftnd_impl.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace ducc0 {
namespace detail_threading {
namespace {

// One thread that takes all the work at once.
class SerialScheduler : public Scheduler {
 public:
  explicit SerialScheduler(size_t nwork) : left_(nwork) {}
  size_t num_threads() const override { return 1; }
  size_t thread_num() const override { return 0; }
  Range getNext() override {
    Range r(0, left_);
    left_ = 0;
    return r;
  }

 private:
  size_t left_;
};

}  // namespace

size_t adjust_nthreads(size_t /*nthreads*/) { return 1; }

void execStatic(size_t nwork, size_t /*nthreads*/, size_t /*chunksize*/,
                std::function<void(Scheduler&)> func) {
  SerialScheduler s(nwork);
  func(s);
}

void execParallel(size_t /*nthreads*/, std::function<void(Scheduler&)> func) {
  SerialScheduler s(0);
  func(s);
}

}  // namespace detail_threading
}  // namespace ducc0

namespace npu {
namespace kernels {
namespace {

using Cf = std::complex<float>;

enum class Kind { kC2C, kR2C, kC2R };

// DUCC's view of `batch` consecutive arrays of shape `dims` (row-major), read through `region`
// (the leading block of each, at most `dims`): [batch, region...] with dims' strides.
ducc0::fmav_info::shape_t ViewShape(int64_t batch, const Dims& region) {
  ducc0::fmav_info::shape_t shape{static_cast<size_t>(batch)};
  for (int64_t d : region) shape.push_back(static_cast<size_t>(d));
  return shape;
}

ducc0::fmav_info::stride_t ViewStrides(const Dims& dims) {
  ducc0::fmav_info::stride_t strides{static_cast<ptrdiff_t>(NumElements(dims))};
  for (int64_t st : RowMajorStrides(dims)) strides.push_back(static_cast<ptrdiff_t>(st));
  return strides;
}

class FftKernel : public Kernel {
 public:
  static Status Make(const KernelDef& def, int rank, Kind kind, bool inverse,
                     std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    NPU_RETURN_IF_ERROR(CheckNdLayouts(def));
    const int want_in = kind == Kind::kR2C ? kFloat : kComplex64;
    const int want_out = kind == Kind::kC2R ? kFloat : kComplex64;
    if (def.inputs[0].dtype != want_in || def.outputs[0].dtype != want_out)
      return Error(def.kernel, ": dtypes ", DTypeName(def.inputs[0].dtype), " -> ",
                   DTypeName(def.outputs[0].dtype), " not supported (allowed: ",
                   DTypeName(want_in), " -> ", DTypeName(want_out), ")");
    const Dims& in = def.inputs[0].dims;
    const int in_rank = static_cast<int>(in.size());
    if (in_rank < rank)
      return InvalidArgument("Input must have rank of at least ", rank, " but got: ", in_rank);
    auto k = std::make_unique<FftKernel>();
    k->kind_ = kind;
    k->inverse_ = inverse;
    k->in_inner_.assign(in.end() - rank, in.end());
    if (kind == Kind::kC2C) {
      k->n_ = k->in_inner_;
    } else {
      NPU_RETURN_IF_ERROR(def.attrs.IntList("fft_length", &k->n_));
      if (static_cast<int>(k->n_.size()) != rank)
        return InvalidArgument("fft_length must length ", rank, " desc, got ", k->n_.size());
      for (int64_t v : k->n_)
        if (v < 0) return InvalidArgument("fft_length must be non-negative, got ", ShapeString(k->n_));
    }
    // TF crops the transformed dimensions to fft_length (IRFFT's last to the n/2+1 terms it
    // reads) but never pads them (tf.signal pads with a Pad op first); an empty dimension passes.
    for (int a = 0; a < rank; ++a) {
      const int64_t need = kind == Kind::kC2R && a == rank - 1 ? k->n_[a] / 2 + 1 : k->n_[a];
      if (k->in_inner_[a] != 0 && k->in_inner_[a] < need)
        return InvalidArgument("Input dimension ", in_rank - rank + a, " must have length of at least ",
                               need, " but got: ", k->in_inner_[a]);
    }
    k->batch_ = 1;
    Dims expected(in.begin(), in.end() - rank);
    for (int64_t d : expected) k->batch_ *= d;
    expected.insert(expected.end(), k->n_.begin(), k->n_.end());
    // RFFT keeps n/2+1 terms of its last axis, none of an empty transform (TF's shape).
    if (kind == Kind::kR2C && k->n_.back() != 0) expected.back() = k->n_.back() / 2 + 1;
    if (def.outputs[0].dims != expected)
      return Error(def.kernel, ": output shape ", ShapeString(def.outputs[0].dims), ", expected ",
                   ShapeString(expected));
    k->out_inner_.assign(expected.end() - rank, expected.end());
    *out = std::move(k);
    return Status::Ok();
  }

  Status Compute(const KernelArgs& args) const override {
    const int64_t out_per_batch = NumElements(out_inner_);
    if (batch_ * out_per_batch == 0) return Status::Ok();
    if (NumElements(in_inner_) == 0) {
      // TF passes an empty input through unwritten (uninitialized memory where fft_length asks
      // for a non-empty output): the transform of nothing, zero-padded, is zeros.
      std::memset(args.out(0), 0, batch_ * out_per_batch * (kind_ == Kind::kC2R ? sizeof(float) : sizeof(Cf)));
      return Status::Ok();
    }
    // What reaches the transform: the input cropped to fft_length (IRFFT's last axis to the
    // n/2+1 terms it reads), as TF hands it to DUCC.
    Dims region = n_;
    if (kind_ == Kind::kC2R) region.back() = n_.back() / 2 + 1;
    const int rank = static_cast<int>(n_.size());
    ducc0::fmav_info::shape_t axes;
    for (int a = 1; a <= rank; ++a) axes.push_back(static_cast<size_t>(a));
    // TF's scale: 1/N of the output's transformed sizes, in double, applied as a float.
    const float scale = inverse_ ? static_cast<float>(1.0 / static_cast<double>(NumElements(n_))) : 1.0f;
    const int64_t in_per_batch = NumElements(in_inner_);
    const int64_t cost = 5 * NumElements(n_) * static_cast<int64_t>(std::log2(static_cast<double>(NumElements(n_))) + 1);
    ParallelFor(batch_, cost, [&](int64_t begin, int64_t end) {
      const auto in_shape = ViewShape(end - begin, region), out_shape = ViewShape(end - begin, out_inner_);
      const auto in_strides = ViewStrides(in_inner_), out_strides = ViewStrides(out_inner_);
      switch (kind_) {
        case Kind::kC2C:
          ducc0::c2c(ducc0::cfmav<Cf>(args.in<Cf>(0) + begin * in_per_batch, in_shape, in_strides),
                     ducc0::vfmav<Cf>(args.out<Cf>(0) + begin * out_per_batch, out_shape, out_strides),
                     axes, !inverse_, scale, 1);
          break;
        case Kind::kR2C:
          ducc0::r2c(ducc0::cfmav<float>(args.in<float>(0) + begin * in_per_batch, in_shape, in_strides),
                     ducc0::vfmav<Cf>(args.out<Cf>(0) + begin * out_per_batch, out_shape, out_strides),
                     axes, true, scale, 1);
          break;
        case Kind::kC2R:
          ducc0::c2r(ducc0::cfmav<Cf>(args.in<Cf>(0) + begin * in_per_batch, in_shape, in_strides),
                     ducc0::vfmav<float>(args.out<float>(0) + begin * out_per_batch, out_shape, out_strides),
                     axes, false, scale, 1);
          break;
      }
    });
    return Status::Ok();
  }

 private:
  Kind kind_ = Kind::kC2C;
  bool inverse_ = false;
  int64_t batch_ = 1;          // product of the untransformed leading dimensions
  Dims n_;                     // transform sizes (fft_length)
  Dims in_inner_, out_inner_;  // the transformed dimensions of the input and the output
};

template <int Rank, Kind K, bool Inverse>
Status MakeFft(const KernelDef& def, std::unique_ptr<Kernel>* out) {
  return FftKernel::Make(def, Rank, K, Inverse, out);
}

NPU_REGISTER_KERNEL("FFT", (MakeFft<1, Kind::kC2C, false>));
NPU_REGISTER_KERNEL("IFFT", (MakeFft<1, Kind::kC2C, true>));
NPU_REGISTER_KERNEL("FFT2D", (MakeFft<2, Kind::kC2C, false>));
NPU_REGISTER_KERNEL("IFFT2D", (MakeFft<2, Kind::kC2C, true>));
NPU_REGISTER_KERNEL("FFT3D", (MakeFft<3, Kind::kC2C, false>));
NPU_REGISTER_KERNEL("IFFT3D", (MakeFft<3, Kind::kC2C, true>));
NPU_REGISTER_KERNEL("RFFT", (MakeFft<1, Kind::kR2C, false>));
NPU_REGISTER_KERNEL("IRFFT", (MakeFft<1, Kind::kC2R, true>));
NPU_REGISTER_KERNEL("RFFT2D", (MakeFft<2, Kind::kR2C, false>));
NPU_REGISTER_KERNEL("IRFFT2D", (MakeFft<2, Kind::kC2R, true>));
NPU_REGISTER_KERNEL("RFFT3D", (MakeFft<3, Kind::kR2C, false>));
NPU_REGISTER_KERNEL("IRFFT3D", (MakeFft<3, Kind::kC2R, true>));

}  // namespace
}  // namespace kernels
}  // namespace npu
