#include "executor/model_reader.h"

#include <algorithm>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/format.h"
#include "kernels/shape.h"

namespace npu {
namespace {

constexpr char kMagic[8] = {'N', 'P', 'U', 'O', 'M', 0, 0, 0};
constexpr uint32_t kVersion = 3;   // 2: value kind kCached; 3: outputs over inputs
constexpr size_t kHeaderSize = 24;

// Little-endian reads from the payload. The first failure sticks: later reads return zeros
// and the caller checks ok() where it matters (before using a count or an index).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  void Fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at payload offset " + std::to_string(pos_);
  }

  template <class T>
  T Read(const char* what) {
    T v{};
    if (!ok()) return v;
    if (remaining() < sizeof(T)) {
      Fail(std::string("truncated ") + what);
      return v;
    }
    std::memcpy(&v, data_ + pos_, sizeof(T));   // the format and the hosts are little-endian
    pos_ += sizeof(T);
    return v;
  }

  std::string String(const char* what) {
    const uint32_t n = Read<uint32_t>(what);
    if (!ok()) return {};
    if (n > remaining()) {
      Fail(std::string("truncated ") + what);
      return {};
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

  // A count of entries that each take at least `min_entry` bytes: more than could fit in the
  // rest of the payload is corruption (and would otherwise drive huge allocations).
  uint32_t Count(const char* what, size_t min_entry) {
    const uint32_t n = Read<uint32_t>(what);
    if (ok() && static_cast<uint64_t>(n) * min_entry > remaining())
      Fail(std::string("count of ") + what + " (" + std::to_string(n) + ") exceeds the payload");
    return ok() ? n : 0;
  }

  std::vector<uint32_t> Ids(const char* what) {
    std::vector<uint32_t> ids(Count(what, 4));
    for (auto& id : ids) id = Read<uint32_t>(what);
    return ids;
  }

  const uint8_t* Take(uint64_t n, const char* what) {
    if (!ok()) return nullptr;
    if (n > remaining()) {
      Fail(std::string("truncated ") + what);
      return nullptr;
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
  std::string error_;
};

void ReadAttr(Reader& r, kernels::Attrs* attrs) {
  using kernels::AttrValue;
  const std::string name = r.String("attribute name");
  AttrValue v;
  const uint8_t type = r.Read<uint8_t>("attribute type");
  v.type = static_cast<AttrValue::Type>(type);
  switch (type) {
    case AttrValue::kInt: v.i = r.Read<int64_t>("int attribute"); break;
    case AttrValue::kFloat: v.f = r.Read<double>("float attribute"); break;
    case AttrValue::kBool: v.b = r.Read<uint8_t>("bool attribute") != 0; break;
    case AttrValue::kString: v.s = r.String("string attribute"); break;
    case AttrValue::kIntList:
      v.ints.resize(r.Count("int list attribute", 8));
      for (auto& x : v.ints) x = r.Read<int64_t>("int list attribute");
      break;
    case AttrValue::kFloatList:
      v.floats.resize(r.Count("float list attribute", 8));
      for (auto& x : v.floats) x = r.Read<double>("float list attribute");
      break;
    default:
      if (r.ok()) r.Fail("attribute '" + name + "' has unknown type " + std::to_string(type));
  }
  attrs->values[name] = std::move(v);
}

Status Corrupt(const std::string& what) {
  return Status::Error("compiled model is corrupt: " + what);
}

std::string ValueName(size_t id) { return "value " + std::to_string(id); }

// Product of sizes, saturating at 2^62 (dims are at most 2^48 each, so no step overflows).
uint64_t SatMul(uint64_t a, uint64_t b) {
  constexpr uint64_t kCap = uint64_t{1} << 62;
  if (a == 0 || b == 0) return 0;
  return a > kCap / b ? kCap : a * b;
}

// Bytes of storage a value's format needs for its logical dims (docs/compiled_model_format.md,
// "Storage formats"). Dims a padded format cannot hold (NC1HWC0 of rank > 4, FRACTAL_Z or
// FILTER_KN not 4-D, FRACTAL_NZ below rank 2) need their logical size: every kernel reading
// that format refuses such a value at load (Nc1hwc0::Of, TransData), and the rest refuse
// padded formats.
uint64_t StorageBytes(const TensorDesc& d) {
  using namespace kernels;
  const uint64_t item = DTypeSize(d.dtype);
  const uint64_t c0 = C0Of(d.dtype);
  auto ceil_to = [](uint64_t x, uint64_t m) { return (x + m - 1) / m * m; };
  uint64_t bytes = item;
  switch (d.format) {
    case kNC1HWC0: {
      if (d.dims.size() > 4) break;
      // [N, H, W, C] right-aligned: storage N * C1 * H * W * C0.
      for (size_t i = 0; i + 1 < d.dims.size(); ++i) bytes = SatMul(bytes, d.dims[i]);
      const uint64_t c = d.dims.empty() ? 1 : d.dims.back();
      return SatMul(bytes, ceil_to(c, c0));
    }
    case kFractalZ: {
      if (d.dims.size() != 4) break;
      bytes = SatMul(SatMul(bytes, d.dims[0]), d.dims[1]);
      bytes = SatMul(bytes, ceil_to(d.dims[2], c0));
      return SatMul(bytes, ceil_to(d.dims[3], kN0));
    }
    case kFilterKN: {
      if (d.dims.size() != 4) break;
      bytes = SatMul(SatMul(SatMul(bytes, d.dims[0]), d.dims[1]), d.dims[2]);
      return SatMul(bytes, ceil_to(d.dims[3], kN0));
    }
    case kFractalNZ: {
      // [..., M, N] stored [..., ceil(N/C0), ceil(M/16), 16, C0].
      if (d.dims.size() < 2) break;
      for (size_t i = 0; i + 2 < d.dims.size(); ++i) bytes = SatMul(bytes, d.dims[i]);
      bytes = SatMul(bytes, ceil_to(d.dims[d.dims.size() - 2], kN0));
      return SatMul(bytes, ceil_to(d.dims.back(), c0));
    }
    default:
      break;
  }
  for (int64_t dim : d.dims) bytes = SatMul(bytes, dim);
  return bytes;
}

// Cross-references: value kinds and locations, graph inputs/outputs and kernel operands.
Status Validate(const ModelDef& m) {
  const size_t n_values = m.values.size();
  for (size_t id = 0; id < n_values; ++id) {
    const ValueDef& v = m.values[id];
    const TensorDesc& d = v.desc;
    if (!kernels::IsSupportedDType(d.dtype))
      return Corrupt(ValueName(id) + " has DataType " + std::to_string(d.dtype) +
                     "; supported: " + kernels::SupportedDTypeNames());
    if (d.format < 0 || d.format > kernels::kLastFormat)
      return Corrupt(ValueName(id) + " has unknown format " + std::to_string(d.format) + " (allowed 0-" +
                     std::to_string(kernels::kLastFormat) + ")");
    if (d.dims.size() > static_cast<size_t>(kernels::kMaxRank))
      return Corrupt(ValueName(id) + " has rank " + std::to_string(d.dims.size()) + " (at most " +
                     std::to_string(kernels::kMaxRank) + ")");
    for (int64_t dim : d.dims)
      if (dim < 0 || dim > (int64_t{1} << 48))
        return Corrupt(ValueName(id) + " has invalid dimension " + std::to_string(dim));
    // Kernels address a value through its storage dims (padded for NC1HWC0, FRACTAL_Z and
    // FRACTAL_NZ): nbytes must cover them, or the first run writes past the value's buffer.
    const uint64_t bytes = StorageBytes(d);
    if (bytes > (uint64_t{1} << 48) || d.nbytes > (uint64_t{1} << 48))
      return Corrupt(ValueName(id) + " is implausibly large");
    if (d.nbytes < bytes)
      return Corrupt(ValueName(id) + " " + kernels::DTypeName(d.dtype) + kernels::ShapeString(d.dims) +
                     " in format " + kernels::FormatName(d.format) + " needs " + std::to_string(bytes) +
                     " bytes of storage but has nbytes " + std::to_string(d.nbytes));
    if ((v.kind == ValueKind::kConst || v.kind == ValueKind::kArena || v.kind == ValueKind::kCached) &&
        v.where % kernels::DTypeSize(d.dtype) != 0)
      return Corrupt(ValueName(id) + " at offset " + std::to_string(v.where) +
                     " is not aligned to its element size");
    switch (v.kind) {
      // Several values may name one input's or output's buffer (aliases share storage); each
      // must fit in it.
      case ValueKind::kInput:
        if (v.where >= m.inputs.size() || m.inputs[v.where] >= n_values ||
            d.nbytes > m.values[m.inputs[v.where]].desc.nbytes)
          return Corrupt(ValueName(id) + " claims to be input " + std::to_string(v.where) +
                         ", which does not exist or is smaller");
        break;
      case ValueKind::kOutput:
        if (v.where >= m.outputs.size() || m.outputs[v.where] >= n_values ||
            d.nbytes > m.values[m.outputs[v.where]].desc.nbytes)
          return Corrupt(ValueName(id) + " claims to be output " + std::to_string(v.where) +
                         ", which does not exist or is smaller");
        break;
      case ValueKind::kConst:
        if (v.where > m.const_len || d.nbytes > m.const_len - v.where)
          return Corrupt(ValueName(id) + " lies outside the constant blob (" + std::to_string(m.const_len) +
                         " bytes)");
        break;
      case ValueKind::kArena:
        if (v.where > m.arena_bytes || d.nbytes > m.arena_bytes - v.where)
          return Corrupt(ValueName(id) + " lies outside the arena (" + std::to_string(m.arena_bytes) +
                         " bytes)");
        break;
      case ValueKind::kCached:   // the region is as large as its values (ParseModel)
        if (v.where > (uint64_t{1} << 48))
          return Corrupt(ValueName(id) + " lies implausibly far into the cached region");
        break;
      default:
        return Corrupt(ValueName(id) + " has unknown kind " + std::to_string(static_cast<int>(v.kind)));
    }
  }
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const uint32_t id = m.inputs[i];
    if (id >= n_values || m.values[id].kind != ValueKind::kInput || m.values[id].where != i)
      return Corrupt("graph input " + std::to_string(i) + " names " + ValueName(id) +
                     ", which is not an INPUT value with that index");
  }
  for (size_t i = 0; i < m.outputs.size(); ++i) {
    if (m.outputs[i] >= n_values)
      return Corrupt("graph output " + std::to_string(i) + " names missing " + ValueName(m.outputs[i]));
    if (m.values[m.outputs[i]].kind == ValueKind::kCached)
      return Corrupt("graph output " + std::to_string(i) + " names " + ValueName(m.outputs[i]) +
                     ", a cached value (the model keeps those)");
  }
  // Outputs over inputs: pairs, each output and input once, the same dtype and size, and the
  // output written by a kernel (a caller passes the input's buffer for it).
  if (m.in_place.size() % 2 != 0) return Corrupt("the outputs over inputs are not pairs");
  std::vector<char> over_out(m.outputs.size()), over_in(m.inputs.size());
  for (size_t p = 0; p < m.in_place.size(); p += 2) {
    const uint32_t o = m.in_place[p], i = m.in_place[p + 1];
    if (o >= m.outputs.size() || i >= m.inputs.size() || over_out[o]++ || over_in[i]++)
      return Corrupt("output over input (" + std::to_string(o) + ", " + std::to_string(i) +
                     ") names a missing or repeated output or input");
    const ValueDef& out = m.values[m.outputs[o]];
    const TensorDesc& in = m.values[m.inputs[i]].desc;
    if (out.kind != ValueKind::kOutput || out.where != o || out.desc.dtype != in.dtype ||
        out.desc.nbytes != in.nbytes)
      return Corrupt("output " + std::to_string(o) + " cannot be written over input " +
                     std::to_string(i) + " (not an output a kernel writes, or not its size)");
  }
  // The cached region is not cleared at load (its first writers fault its pages in, in
  // parallel): no node may read cached bytes that no earlier node wrote (an alias, e.g. a
  // Reshape, reads bytes its root's writer wrote).
  std::vector<std::pair<uint64_t, uint64_t>> cached_written;   // [where, end) of written values
  const auto written = [&](const ValueDef& v) {
    return std::any_of(cached_written.begin(), cached_written.end(), [&](const auto& w) {
      return w.first <= v.where && v.where + v.desc.nbytes <= w.second;
    });
  };
  for (const NodeDef& k : m.nodes) {
    for (uint32_t id : k.inputs) {
      if (id >= n_values)
        return Corrupt("node '" + k.node + "' reads missing " + ValueName(id));
      if (m.values[id].kind == ValueKind::kCached && !written(m.values[id]))
        return Corrupt("node '" + k.node + "' reads " + ValueName(id) +
                       ", a cached value no earlier node writes");
    }
    for (uint32_t id : k.outputs) {
      if (id >= n_values)
        return Corrupt("node '" + k.node + "' writes missing " + ValueName(id));
      const ValueKind kind = m.values[id].kind;
      if (kind == ValueKind::kInput || kind == ValueKind::kConst)
        return Corrupt("node '" + k.node + "' writes " + ValueName(id) + ", which is a graph " +
                       (kind == ValueKind::kInput ? "input" : "constant"));
    }
    // A cached value is computed from inputs and constants alone, by a node that writes nothing
    // else: the executor may skip that node while its inputs are unchanged.
    const auto cached = [&](uint32_t id) { return m.values[id].kind == ValueKind::kCached; };
    const bool writes_cached = std::any_of(k.outputs.begin(), k.outputs.end(), cached);
    if (writes_cached && !std::all_of(k.outputs.begin(), k.outputs.end(), cached))
      return Corrupt("node '" + k.node + "' writes cached and per-run values together");
    if (writes_cached)
      for (uint32_t id : k.outputs)
        cached_written.emplace_back(m.values[id].where, m.values[id].where + m.values[id].desc.nbytes);
    for (uint32_t id : k.inputs) {
      const ValueKind kind = m.values[id].kind;
      if (writes_cached && kind != ValueKind::kInput && kind != ValueKind::kConst && !cached(id))
        return Corrupt("node '" + k.node + "' writes a cached value from " + ValueName(id) +
                       ", which is neither an input, a constant nor a cached value");
    }
  }
  return Status::Ok();
}

}  // namespace

uint32_t Crc32(const uint8_t* data, size_t size) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

Status ParseModel(const void* data, size_t size, ModelDef* m) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  if (data == nullptr || size < kHeaderSize)
    return Status::Error("compiled model is truncated: " + std::to_string(size) +
                         " bytes, the header alone is " + std::to_string(kHeaderSize));
  if (std::memcmp(bytes, kMagic, 8) != 0) return Status::Error("not a compiled NPU model (bad magic)");
  uint32_t version, crc;
  uint64_t payload_len;
  std::memcpy(&version, bytes + 8, 4);
  std::memcpy(&crc, bytes + 12, 4);
  std::memcpy(&payload_len, bytes + 16, 8);
  if (version != kVersion)
    return Status::Error("compiled model format version " + std::to_string(version) +
                         "; this runtime reads version " + std::to_string(kVersion));
  if (payload_len != size - kHeaderSize)
    return Status::Error("compiled model is truncated or corrupt: the header announces " +
                         std::to_string(payload_len) + " payload bytes, " +
                         std::to_string(size - kHeaderSize) + " follow");
  const uint8_t* payload = bytes + kHeaderSize;
  if (Crc32(payload, payload_len) != crc)
    return Status::Error("compiled model is truncated or corrupt (checksum mismatch)");

  Reader r(payload, payload_len);
  m->name = r.String("model name");
  m->metadata = r.String("metadata");
  m->arena_bytes = r.Read<uint64_t>("arena size");
  m->inputs = r.Ids("inputs");
  m->values.resize(r.Count("values", 26));
  for (ValueDef& v : m->values) {
    v.desc.dtype = static_cast<int>(r.Read<uint32_t>("value dtype"));
    v.desc.format = r.Read<uint8_t>("value format");
    v.desc.dims.resize(r.Count("value dims", 8));
    for (auto& d : v.desc.dims) d = r.Read<int64_t>("value dims");
    v.desc.nbytes = r.Read<uint64_t>("value nbytes");
    v.kind = static_cast<ValueKind>(r.Read<uint8_t>("value kind"));
    v.where = r.Read<uint64_t>("value location");
  }
  m->nodes.resize(r.Count("kernels", 20));
  for (NodeDef& k : m->nodes) {
    k.kernel = r.String("kernel name");
    k.node = r.String("node name");
    k.inputs = r.Ids("kernel inputs");
    k.outputs = r.Ids("kernel outputs");
    const uint32_t n_attrs = r.Count("attributes", 6);
    for (uint32_t i = 0; i < n_attrs && r.ok(); ++i) ReadAttr(r, &k.attrs);
  }
  m->outputs = r.Ids("outputs");
  m->in_place = r.Ids("outputs over inputs");
  m->const_len = r.Read<uint64_t>("constant blob size");
  m->const_blob = r.Take(m->const_len, "constant blob");
  if (r.ok() && r.remaining() != 0)
    r.Fail(std::to_string(r.remaining()) + " unexpected trailing bytes");
  if (!r.ok()) return Corrupt(r.error());
  NPU_RETURN_IF_ERROR(Validate(*m));
  for (const ValueDef& v : m->values)
    if (v.kind == ValueKind::kCached) m->cached_bytes = std::max(m->cached_bytes, v.where + v.desc.nbytes);
  return Status::Ok();
}

}  // namespace npu
