// Tensor dumps of compiled-model runs (options enable_dump, dump_path, dump_step, dump_mode;
// docs/debugging.md).
//
// An observer (npurt/observer.h) writes, for every run whose step dump_step selects, the model's
// inputs and each kernel's inputs (before it computes: outputs may overwrite them in place) and/or
// outputs as .npy files named after the kernel's graph node, in the value's logical TF shape
// (padded storage converted back with the TransData kernel; bfloat16 as float32),
// plus a manifest.json per step. Independently of dump_step, a kernel whose float16 store
// overflowed or produced NaN (the float-status flag, kernels/float_status.h) gets its inputs (as
// they were before it ran) and outputs written under overflow/step<N>/.
//
//   <dump_path>/<YYYYmmdd-HHMMSS>-<pid>/<model>.<uid>/model.json
//                                                    step<N>/manifest.json, <node>.output0.npy ...
//                                                    overflow/step<N>/...
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "executor/observe_util.h"
#include "kernels/dtype.h"
#include "kernels/float_status.h"
#include "kernels/format.h"
#include "kernels/shape.h"
#include "npurt/observer.h"

namespace npu {
namespace observe {

bool MakeDirs(const std::string& path, std::string* error) {
  std::string prefix;
  std::stringstream parts(path);
  std::string part;
  if (!path.empty() && path[0] == '/') prefix = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    prefix += part;
    if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      *error = "cannot create directory " + prefix + ": " + strerror(errno);
      return false;
    }
    prefix += "/";
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + " is not a directory";
    return false;
  }
  return true;
}

bool WriteFile(const std::string& path, const std::string& data, std::string* error) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.close();
    if (!f) {
      *error = "cannot write " + path + ": " + strerror(errno);
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace observe

namespace {

using observe::Json;
using observe::JsonInts;

enum DumpMode : int { kDumpInput = 1, kDumpOutput = 2, kDumpAll = 3 };

std::string ModeName(int mode) { return mode == kDumpInput ? "input" : mode == kDumpOutput ? "output" : "all"; }

// A file-name-safe form of a graph name ('/' and anything unusual become '_').
std::string SafeName(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.') out = "_" + out;
  if (out.size() > 160) out = out.substr(0, 160);
  return out;
}

// numpy's descr for a dtype as dumped (bfloat16 is written as float32).
const char* NpyDescr(int dtype) {
  switch (dtype) {
    case kernels::kFloat: case kernels::kBFloat16: return "<f4";
    case kernels::kDouble: return "<f8";
    case kernels::kHalf: return "<f2";
    case kernels::kInt32: return "<i4";
    case kernels::kInt64: return "<i8";
    case kernels::kInt16: return "<i2";
    case kernels::kInt8: return "|i1";
    case kernels::kUInt8: return "|u1";
    case kernels::kUInt64: return "<u8";
    case kernels::kComplex64: return "<c8";
    case kernels::kBool: return "|b1";
    default: return nullptr;
  }
}

std::string NpyHeader(const char* descr, const std::vector<int64_t>& dims) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) shape += std::to_string(dims[i]) + (dims.size() == 1 ? "," : i + 1 < dims.size() ? ", " : "");
  shape += ")";
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

// Host copy of `n` bytes at `src`: device memory, or host memory (TF keeps int32 tensors there).
void ReadBytes(const void* src, uint64_t n, std::string* out) {
  out->resize(n);
  if (n == 0) return;
  if (npurtMemcpy(out->data(), src, n, NPURT_MEMCPY_DEVICE_TO_HOST) != NPURT_SUCCESS)
    std::memcpy(out->data(), src, n);
}

// The .npy bytes of a value whose storage bytes are `raw`; "" and *why set when impossible.
std::string NpyOf(const TensorDesc& d, const std::string& raw, std::string* why) {
  const char* descr = NpyDescr(d.dtype);
  if (descr == nullptr) {
    *why = "dtype " + kernels::DTypeName(d.dtype) + " has no .npy form";
    return "";
  }
  const int64_t n = kernels::NumElements(d.dims);
  const int elem = kernels::DTypeSize(d.dtype);
  std::string logical;
  if (kernels::IsPaddedFormat(d.format)) {
    // The TransData kernel converts storage back to the logical layout, as the model would (a
    // format it cannot convert is its error, below).
    kernels::KernelDef kd;
    kd.kernel = "TransData";
    kd.node = "dump";
    TensorDesc out = d;
    out.format = kernels::kND;
    out.nbytes = static_cast<uint64_t>(n) * elem;
    kd.inputs = {d};
    kd.outputs = {out};
    kernels::AttrValue src, dst;
    src.i = d.format;
    dst.i = kernels::kND;
    kd.attrs.values["src_format"] = src;
    kd.attrs.values["dst_format"] = dst;
    std::unique_ptr<kernels::Kernel> k;
    const kernels::KernelFactory* factory = kernels::FindKernel("TransData");
    Status st = factory ? (*factory)(kd, &k) : Status::Error("no TransData kernel");
    logical.resize(out.nbytes);
    if (st.ok() && raw.size() >= d.nbytes) {
      const void* in_ptr = raw.data();
      void* out_ptr = logical.data();
      kernels::KernelArgs args{&in_ptr, &out_ptr};
      st = k->Compute(args);
    } else if (st.ok()) {
      st = Status::Error("short read");
    }
    if (!st.ok()) {
      *why = "converting from " + kernels::FormatName(d.format) + ": " + st.message;
      return "";
    }
  } else {
    logical = raw.substr(0, static_cast<size_t>(n) * elem);
  }
  if (d.dtype == kernels::kBFloat16) {
    std::string wide(static_cast<size_t>(n) * 4, '\0');
    const uint16_t* s = reinterpret_cast<const uint16_t*>(logical.data());
    float* w = reinterpret_cast<float*>(wide.data());
    for (int64_t i = 0; i < n; ++i) w[i] = kernels::BFloat16ToFloat(s[i]);
    logical.swap(wide);
  }
  return NpyHeader(descr, d.dims) + logical;
}

struct Config {
  std::string root;                                     // <dump_path>/<time>-<pid>
  std::vector<std::pair<uint64_t, uint64_t>> ranges;    // empty: every step
  int mode = kDumpOutput;

  bool operator==(const Config& o) const { return root == o.root && ranges == o.ranges && mode == o.mode; }

  bool Selects(uint64_t step) const {
    if (ranges.empty()) return true;
    for (const auto& [lo, hi] : ranges)
      if (step >= lo && step <= hi) return true;
    return false;
  }
};

// File stems of a model's kernels, and its directory, decided once per loaded model.
struct ModelFiles {
  std::string dir;
  std::vector<std::string> stems;   // per kernel step
};

class Dumper;

class DumpRun : public RunObserver {
 public:
  DumpRun(std::shared_ptr<Dumper> dumper, std::shared_ptr<const ModelFiles> files, const RunInfo& run, bool selected);
  bool WatchFloatStatus() const override { return true; }
  void BeforeKernel(const KernelView& k) override;
  void AfterKernel(const KernelView& k, const KernelResult& r) override;
  void EndRun(const RunInfo& run, int64_t end_ns, const Status& status) override;

 private:
  std::string Write(const std::string& dir, const std::string& file, const TensorDesc& d, const std::string& raw,
                    int kernel_index, const std::string& kind, size_t index, uint32_t value,
                    const std::string& extra);
  std::string StepDir() const { return files_->dir + "/step" + std::to_string(run_.step); }
  std::string OverflowDir() const { return files_->dir + "/overflow/step" + std::to_string(run_.step); }

  std::shared_ptr<Dumper> dumper_;
  std::shared_ptr<const ModelFiles> files_;
  const RunInfo run_;
  const bool selected_;
  bool step_dir_made_ = false, overflow_dir_made_ = false;
  std::vector<std::string> entries_, overflow_entries_;
  std::vector<std::string> saved_inputs_;    // inputs an in-place float16 kernel may overwrite
  std::vector<bool> saved_;
};

class Dumper : public Observer, public std::enable_shared_from_this<Dumper> {
 public:
  explicit Dumper(Config config) : config_(std::move(config)) {}
  const Config& config() const { return config_; }

  std::unique_ptr<RunObserver> BeginRun(const RunInfo& run) override {
    std::shared_ptr<const ModelFiles> files = FilesOf(*run.model);
    if (!files) return nullptr;
    return std::make_unique<DumpRun>(shared_from_this(), std::move(files), run, config_.Selects(run.step));
  }

  // Says why a write failed, once per dumper (dumps never fail a run).
  void Warn(const std::string& what) {
    if (!warned_.exchange(true))
      fprintf(stderr, "npu_device: tensor dump: %s (further dump errors are not reported)\n", what.c_str());
  }

 private:
  std::shared_ptr<const ModelFiles> FilesOf(const ModelInfo& m) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(m.uid);
    if (it != models_.end()) return it->second;
    auto files = std::make_shared<ModelFiles>();
    files->dir = config_.root + "/" + SafeName(m.name) + "." + std::to_string(m.uid);
    std::set<std::string> used = {"model_input"};
    for (size_t i = 0; i < m.steps.size(); ++i) {
      std::string stem = SafeName(m.steps[i].node.empty() ? m.steps[i].kernel : m.steps[i].node);
      if (!used.insert(stem).second) stem += ".k" + std::to_string(i);   // '/' vs '_' clash
      used.insert(stem);
      files->stems.push_back(stem);
    }
    std::string error;
    if (!observe::MakeDirs(files->dir, &error) || !observe::WriteFile(files->dir + "/model.json", ModelJson(m), &error)) {
      Warn(error);
    }
    models_[m.uid] = files;
    return files;
  }

  static std::string ModelJson(const ModelInfo& m) {
    std::ostringstream os;
    os << "{\n  \"name\": " << Json(m.name) << ",\n  \"uid\": " << m.uid << ",\n  \"device\": " << m.device
       << ",\n  \"pid\": " << getpid() << ",\n  \"inputs\": [";
    for (size_t i = 0; i < m.inputs.size(); ++i) os << (i ? ", " : "") << m.inputs[i];
    os << "],\n  \"outputs\": [";
    for (size_t i = 0; i < m.outputs.size(); ++i) os << (i ? ", " : "") << m.outputs[i];
    os << "],\n  \"values\": [";
    for (size_t i = 0; i < m.values.size(); ++i) {
      const TensorDesc& d = m.values[i];
      os << (i ? ",\n    " : "\n    ") << "{\"dtype\": " << Json(kernels::DTypeName(d.dtype))
         << ", \"shape\": " << JsonInts(d.dims) << ", \"format\": " << Json(kernels::FormatName(d.format)) << "}";
    }
    os << "],\n  \"kernels\": [";
    for (size_t i = 0; i < m.steps.size(); ++i) {
      const ObservedStep& s = m.steps[i];
      std::vector<int64_t> in(s.inputs.begin(), s.inputs.end()), out(s.outputs.begin(), s.outputs.end());
      os << (i ? ",\n    " : "\n    ") << "{\"kernel\": " << Json(s.kernel) << ", \"node\": " << Json(s.node)
         << ", \"inputs\": " << JsonInts(in) << ", \"outputs\": " << JsonInts(out) << "}";
    }
    os << "],\n  \"metadata\": " << Json(m.metadata) << "\n}\n";
    return os.str();
  }

  const Config config_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<const ModelFiles>> models_;
  std::atomic<bool> warned_{false};
};

DumpRun::DumpRun(std::shared_ptr<Dumper> dumper, std::shared_ptr<const ModelFiles> files, const RunInfo& run,
                 bool selected)
    : dumper_(std::move(dumper)), files_(std::move(files)), run_(run), selected_(selected) {
  if (!selected_) return;
  const ModelInfo& m = *run.model;
  std::string raw;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const uint32_t id = m.inputs[i];
    ReadBytes((*run.values)[id], m.values[id].nbytes, &raw);
    entries_.push_back(Write(StepDir(), "model_input" + std::to_string(i) + ".npy", m.values[id], raw, -1,
                             "model_input", i, id, ""));
  }
}

std::string DumpRun::Write(const std::string& dir, const std::string& file, const TensorDesc& d,
                           const std::string& raw, int kernel_index, const std::string& kind, size_t index,
                           uint32_t value, const std::string& extra) {
  bool& made = dir == StepDir() ? step_dir_made_ : overflow_dir_made_;
  std::string error;
  if (!made) {
    made = observe::MakeDirs(dir, &error);
    if (!made) dumper_->Warn(error);
  }
  const ModelInfo& m = *run_.model;
  std::ostringstream e;
  e << "{\"model\": " << Json(m.name) << ", \"model_uid\": " << m.uid << ", \"step\": " << run_.step
    << ", \"kernel_index\": " << kernel_index << ", \"node\": "
    << Json(kernel_index >= 0 ? m.steps[kernel_index].node : std::string())
    << ", \"kernel\": " << Json(kernel_index >= 0 ? m.steps[kernel_index].kernel : std::string())
    << ", \"kind\": " << Json(kind) << ", \"index\": " << index << ", \"value\": " << value
    << ", \"dtype\": " << Json(kernels::DTypeName(d.dtype)) << ", \"shape\": " << JsonInts(d.dims)
    << ", \"format\": " << Json(kernels::FormatName(d.format));
  if (d.dtype == kernels::kBFloat16) e << ", \"stored_as\": \"float32\"";
  std::string why;
  std::string npy = NpyOf(d, raw, &why);
  if (npy.empty()) {
    e << ", \"file\": null, \"skipped\": " << Json(why);
  } else if (made && observe::WriteFile(dir + "/" + file, npy, &error)) {
    e << ", \"file\": " << Json(file);
  } else {
    if (made) dumper_->Warn(error);
    e << ", \"file\": null, \"skipped\": " << Json(error.empty() ? "cannot write" : error);
  }
  e << extra << "}";
  return e.str();
}

void DumpRun::BeforeKernel(const KernelView& k) {
  const int mode = dumper_->config().mode;
  std::string raw;
  if (selected_ && (mode & kDumpInput)) {
    for (size_t i = 0; i < k.step->inputs.size(); ++i) {
      ReadBytes(k.inputs[i], k.input_desc(i).nbytes, &raw);
      entries_.push_back(Write(StepDir(), files_->stems[k.index] + ".input" + std::to_string(i) + ".npy",
                               k.input_desc(i), raw, k.index, "input", i, k.step->inputs[i], ""));
    }
  }
  // Only float16 stores raise the flag: keep what an in-place float16 kernel would overwrite.
  saved_.assign(k.step->inputs.size(), false);
  saved_inputs_.resize(k.step->inputs.size());
  bool half_out = false;
  for (size_t j = 0; j < k.step->outputs.size(); ++j) half_out |= k.output_desc(j).dtype == kernels::kHalf;
  if (!half_out) return;
  for (size_t i = 0; i < k.step->inputs.size(); ++i) {
    const char* a = static_cast<const char*>(k.inputs[i]);
    const uint64_t an = k.input_desc(i).nbytes;
    for (size_t j = 0; j < k.step->outputs.size() && !saved_[i]; ++j) {
      const char* b = static_cast<const char*>(k.outputs[j]);
      const uint64_t bn = k.output_desc(j).nbytes;
      if (an && bn && a < b + bn && b < a + an) {
        ReadBytes(a, an, &saved_inputs_[i]);
        saved_[i] = true;
      }
    }
  }
}

void DumpRun::AfterKernel(const KernelView& k, const KernelResult& r) {
  const int mode = dumper_->config().mode;
  std::string raw;
  if (selected_ && (mode & kDumpOutput) && r.status->ok()) {
    for (size_t i = 0; i < k.step->outputs.size(); ++i) {
      ReadBytes(k.outputs[i], k.output_desc(i).nbytes, &raw);
      entries_.push_back(Write(StepDir(), files_->stems[k.index] + ".output" + std::to_string(i) + ".npy",
                               k.output_desc(i), raw, k.index, "output", i, k.step->outputs[i], ""));
    }
  }
  if (r.float_status == 0) return;
  std::string flags = ", \"float_status\": [";
  if (r.float_status & NPU_STATUS_OVERFLOW) flags += "\"overflow\"";
  if (r.float_status & NPU_STATUS_NAN) flags += std::string(r.float_status & NPU_STATUS_OVERFLOW ? ", " : "") + "\"nan\"";
  flags += "]";
  for (size_t i = 0; i < k.step->inputs.size(); ++i) {
    if (saved_[i]) raw = saved_inputs_[i];
    else ReadBytes(k.inputs[i], k.input_desc(i).nbytes, &raw);
    overflow_entries_.push_back(Write(OverflowDir(), files_->stems[k.index] + ".input" + std::to_string(i) + ".npy",
                                      k.input_desc(i), raw, k.index, "input", i, k.step->inputs[i], flags));
  }
  for (size_t i = 0; i < k.step->outputs.size(); ++i) {
    ReadBytes(k.outputs[i], k.output_desc(i).nbytes, &raw);
    overflow_entries_.push_back(Write(OverflowDir(), files_->stems[k.index] + ".output" + std::to_string(i) + ".npy",
                                      k.output_desc(i), raw, k.index, "output", i, k.step->outputs[i], flags));
  }
}

void DumpRun::EndRun(const RunInfo& run, int64_t, const Status& status) {
  const ModelInfo& m = *run.model;
  auto manifest = [&](const std::string& dir, bool made, const std::vector<std::string>& entries) {
    if (!made) return;
    std::ostringstream os;
    os << "{\n  \"model\": " << Json(m.name) << ",\n  \"model_uid\": " << m.uid << ",\n  \"device\": " << m.device
       << ",\n  \"step\": " << run.step << ",\n  \"dump_mode\": " << Json(ModeName(dumper_->config().mode))
       << ",\n  \"status\": " << Json(status.ok() ? "ok" : status.message) << ",\n  \"tensors\": [";
    for (size_t i = 0; i < entries.size(); ++i) os << (i ? ",\n    " : "\n    ") << entries[i];
    os << "\n  ]\n}\n";
    std::string error;
    if (!observe::WriteFile(dir + "/manifest.json", os.str(), &error)) dumper_->Warn(error);
  };
  if (selected_) manifest(StepDir(), step_dir_made_, entries_);
  if (!overflow_entries_.empty()) manifest(OverflowDir(), overflow_dir_made_, overflow_entries_);
}

std::mutex g_dump_mu;
std::shared_ptr<Dumper> g_dumper;   // the registered one, if any

// Where this process's dumps go under dump_path: fixed at the first dump of the process.
std::string ProcessDir() {
  static const std::string name = [] {
    char stamp[32];
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    return std::string(stamp) + "-" + std::to_string(getpid());
  }();
  return name;
}

int Fail(char* error, size_t size, const std::string& message) {
  if (error != nullptr && size > 0) snprintf(error, size, "%s", message.c_str());
  return -1;
}

bool ParseSteps(const std::string& spec, std::vector<std::pair<uint64_t, uint64_t>>* out, std::string* why) {
  std::stringstream parts(spec);
  std::string part;
  while (std::getline(parts, part, '|')) {
    unsigned long long lo = 0, hi = 0;
    char extra = 0;
    const int n = sscanf(part.c_str(), " %llu - %llu %c", &lo, &hi, &extra);
    if (n == 1) hi = lo;
    if ((n != 1 && n != 2) || lo > hi || part.find_first_not_of(" 0123456789-") != std::string::npos) {
      *why = "'" + part + "' in '" + spec + "' is neither a step nor a range a-b";
      return false;
    }
    out->emplace_back(lo, hi);
  }
  return true;
}

}  // namespace
}  // namespace npu

extern "C" int npurtSetDump(const char* path, const char* steps, const char* mode, char* error, size_t error_size) {
  using namespace npu;
  try {
    std::shared_ptr<Dumper> next;
    if (path != nullptr && *path) {
      Config c;
      const std::string m = mode ? mode : "output";
      if (m == "input") c.mode = kDumpInput;
      else if (m == "output") c.mode = kDumpOutput;
      else if (m == "all") c.mode = kDumpAll;
      else return Fail(error, error_size, "dump mode '" + m + "' is not one of input, output, all");
      std::string why;
      if (steps != nullptr && *steps && !ParseSteps(steps, &c.ranges, &why)) return Fail(error, error_size, why);
      c.root = std::string(path) + "/" + ProcessDir();
      if (!observe::MakeDirs(c.root, &why)) return Fail(error, error_size, why);
      std::lock_guard<std::mutex> lock(g_dump_mu);
      if (g_dumper && g_dumper->config() == c) return 0;   // unchanged: keep its state
      next = std::make_shared<Dumper>(std::move(c));
    }
    std::lock_guard<std::mutex> lock(g_dump_mu);
    if (g_dumper) RemoveObserver(g_dumper.get());
    g_dumper = next;
    if (g_dumper) AddObserver(g_dumper);
    return 0;
  } catch (const std::exception& e) {
    return Fail(error, error_size, e.what());
  }
}
