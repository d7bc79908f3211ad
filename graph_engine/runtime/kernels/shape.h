// Shapes, axes and strided iteration shared by the kernels.
//
// A StridedPlan walks the row-major index space of `dims` for up to four operands at once,
// each with its own element strides (0 on a broadcast axis, permuted for a transpose, scaled
// for a strided slice). Elementwise kernels and every data-movement kernel are built on it.
#ifndef NPU_KERNELS_SHAPE_H_
#define NPU_KERNELS_SHAPE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace npu {
namespace kernels {

using Dims = std::vector<int64_t>;

int64_t NumElements(const Dims& dims);
std::string ShapeString(const Dims& dims);          // "[2,3]"
Dims RowMajorStrides(const Dims& dims);              // in elements
Status NormalizeAxis(int64_t axis, int64_t rank, int64_t* out);  // negative counts from the end

// Strides (in elements) of `in` read at every index of `out`, right-aligned as numpy
// broadcasting does: 0 where `in` has size 1 (or no axis). An error if not broadcastable.
Status BroadcastStrides(const Dims& in, const Dims& out, Dims* strides);

// Values have at most kMaxRank axes (the model reader checks); plans at most twice that.
constexpr int kMaxRank = 32;
constexpr int kMaxPlanRank = 2 * kMaxRank;

struct StridedPlan {
  static constexpr int kMaxOperands = 4;
  int operands = 0;
  Dims dims;                                   // never empty; the last axis is the innermost
  std::vector<Dims> strides;                   // [operand][axis]
  int64_t offsets[kMaxOperands] = {0, 0, 0, 0};  // element offset of each operand's origin

  // Merges axes that every operand walks contiguously and drops size-1 axes.
  static StridedPlan Make(const Dims& dims, const std::vector<Dims>& strides,
                          const std::vector<int64_t>& offsets = {});
  int64_t size() const { return NumElements(dims); }
  int64_t inner() const { return dims.back(); }
  int64_t inner_stride(int op) const { return strides[op].back(); }

  // Calls fn(const int64_t* offsets, int64_t n) for each run of consecutive innermost indices
  // in the flat index range [begin, end); offsets are the operands' element offsets of the
  // run's first index.
  template <class Fn>
  void ForEachRun(int64_t begin, int64_t end, Fn&& fn) const;
};

// Copies the view `plan` describes, operand 0 the destination and operand 1 the source, with
// elements of `elem_size` (1, 2, 4 or 8) bytes; parallel for large copies.
void CopyStrided(const StridedPlan& plan, int elem_size, const void* src, void* dst);

template <class Fn>
void StridedPlan::ForEachRun(int64_t begin, int64_t end, Fn&& fn) const {
  if (begin >= end) return;
  const int rank = static_cast<int>(dims.size());
  int64_t index[kMaxPlanRank];
  int64_t off[kMaxOperands];
  int64_t rest = begin;
  for (int op = 0; op < operands; ++op) off[op] = offsets[op];
  for (int a = rank - 1; a >= 0; --a) {
    index[a] = rest % dims[a];
    rest /= dims[a];
    for (int op = 0; op < operands; ++op) off[op] += index[a] * strides[op][a];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(dims[rank - 1] - index[rank - 1], end - pos);
    fn(static_cast<const int64_t*>(off), n);
    pos += n;
    if (pos >= end) break;
    // Advance to the next run: carry into the outer axes.
    for (int op = 0; op < operands; ++op) off[op] += n * strides[op][rank - 1];
    index[rank - 1] += n;
    for (int a = rank - 1; a > 0 && index[a] == dims[a]; --a) {
      for (int op = 0; op < operands; ++op)
        off[op] += strides[op][a - 1] - dims[a] * strides[op][a];
      index[a] = 0;
      ++index[a - 1];
    }
  }
}

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_SHAPE_H_
