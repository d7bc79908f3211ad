// Parses and validates a compiled model (docs/compiled_model_format.md). Every read is
// bounds-checked and every reference checked, so a truncated, corrupt or inconsistent file
// is an error message, never a crash.
#ifndef NPU_EXECUTOR_MODEL_READER_H_
#define NPU_EXECUTOR_MODEL_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "npurt/model.h"

namespace npu {

// kCached: a conversion of inputs kept between runs, at an offset in the model's cached region.
enum class ValueKind : uint8_t { kInput = 0, kConst = 1, kArena = 2, kOutput = 3, kCached = 4 };

struct ValueDef {
  TensorDesc desc;
  ValueKind kind;
  uint64_t where;   // input index, offset in the const blob, arena or cached region, or output index
};

struct NodeDef {
  std::string kernel, node;
  std::vector<uint32_t> inputs, outputs;   // value ids
  kernels::Attrs attrs;
};

struct ModelDef {
  std::string name, metadata;
  uint64_t arena_bytes = 0;
  std::vector<uint32_t> inputs, outputs;   // value ids
  std::vector<uint32_t> in_place;          // output, input index pairs (outputs over inputs)
  std::vector<ValueDef> values;
  std::vector<NodeDef> nodes;
  const uint8_t* const_blob = nullptr;      // points into the parsed buffer
  uint64_t const_len = 0;
  uint64_t cached_bytes = 0;                // derived: the end of the last kCached value
};

uint32_t Crc32(const uint8_t* data, size_t size);   // zlib's CRC-32
Status ParseModel(const void* data, size_t size, ModelDef* model);

}  // namespace npu

#endif  // NPU_EXECUTOR_MODEL_READER_H_
