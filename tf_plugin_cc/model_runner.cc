#include "model_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "python_compiler.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/framework/types.h"

namespace npu_tf {
namespace {

using tensorflow::Tensor;

std::atomic<uint64_t> g_options_generation{0};
std::atomic<bool> g_cpu_fallback{true};
// Set by the compiler hook (NpuPluginCompileFromDiskCache, on the thread that called it) when
// the model it returns came from its disk cache rather than a compile.
thread_local bool t_from_disk_cache = false;

struct CacheEntry {
  std::mutex mu;  // held while this key compiles, so concurrent first calls compile once
  std::shared_ptr<npu::CompiledModel> model;
  absl::Status failure;  // a compile that failed fails the same way again: not retried
};

// A runtime error keeps the TF class the runtime gave it (device memory exhausted:
// ResourceExhaustedError; integer division by zero: InvalidArgumentError); INTERNAL otherwise.
absl::Status ErrorStatus(const std::string& what, const npu::Status& s) {
  const absl::StatusCode code = s.code == npu::kCodeResourceExhausted ? absl::StatusCode::kResourceExhausted
                                : s.code == npu::kCodeInvalidArgument ? absl::StatusCode::kInvalidArgument
                                : s.code == npu::kCodeOutOfRange      ? absl::StatusCode::kOutOfRange
                                                                      : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", s.message));
}

// TF's compute stream of the kernel's device. device.cc makes every SP_Stream an npurtStream,
// so a model runs in order with the copies and kernels TF queued before it.
absl::Status ComputeStream(tensorflow::OpKernelContext* ctx, npurtStream* stream) {
  TF_Status* status = TF_NewStatus();
  SP_Stream sp = TF_GetStream(reinterpret_cast<TF_OpKernelContext*>(ctx), status);
  absl::Status result = TF_GetCode(status) == TF_OK
                            ? absl::OkStatus()
                            : absl::InternalError(absl::StrCat("no NPU stream for the kernel: ",
                                                               TF_Message(status)));
  TF_DeleteStatus(status);
  *stream = reinterpret_cast<npurtStream>(sp);
  return result;
}

}  // namespace

absl::Status SyncComputeStream(tensorflow::OpKernelContext* ctx) {
  npurtStream stream = nullptr;
  absl::Status s = ComputeStream(ctx, &stream);
  if (!s.ok() || stream == nullptr) return s;
  if (npurtStreamSynchronize(stream) != NPURT_SUCCESS) {
    return absl::InternalError(absl::StrCat("NPU stream failed before ", ctx->op_kernel().name(),
                                            ": ", npurtGetLastErrorMessage()));
  }
  return absl::OkStatus();
}

namespace {

// Compiled models, least recently used last. Each holds its constants in device memory, so the
// cache is bounded (option compile_cache_size, pushed by Python through NpuPluginSetCacheSize).
struct ModelCache {
  std::mutex mu;
  std::list<std::string> lru;
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<CacheEntry>, std::list<std::string>::iterator>>
      entries;
  size_t capacity = 1024;
  CompileStats stats;

  void EvictLocked() {
    while (entries.size() > capacity && !lru.empty()) {
      entries.erase(lru.back());  // a caller still running the model keeps it alive
      lru.pop_back();
      ++stats.evictions;
    }
  }
};

ModelCache& Cache() {
  static auto* cache = new ModelCache();
  return *cache;
}

}  // namespace

absl::Status GetModel(const std::string& key, int device,
                      const std::function<tensorflow::NodeDef()>& request,
                      std::shared_ptr<npu::CompiledModel>* model) {
  ModelCache& cache = Cache();
  std::shared_ptr<CacheEntry> entry;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    std::string full = absl::StrCat(device, "|", key);
    auto it = cache.entries.find(full);
    if (it != cache.entries.end()) {
      cache.lru.splice(cache.lru.begin(), cache.lru, it->second.second);
      entry = it->second.first;
    } else {
      entry = std::make_shared<CacheEntry>();
      cache.lru.push_front(full);
      cache.entries.emplace(full, std::make_pair(entry, cache.lru.begin()));
      cache.EvictLocked();
    }
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->model != nullptr || !entry->failure.ok()) {
    std::lock_guard<std::mutex> stats_lock(cache.mu);
    ++cache.stats.cache_hits;
    if (!entry->failure.ok()) return entry->failure;
  } else {
    std::string compiled;
    tensorflow::NodeDef node = request();
    auto start = std::chrono::steady_clock::now();
    t_from_disk_cache = false;
    absl::Status s = Compile(NPURT_COMPILE_MODEL, node.SerializeAsString(), &compiled);
    const bool from_disk = s.ok() && t_from_disk_cache;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> stats_lock(cache.mu);
      if (from_disk) {
        ++cache.stats.disk_cache_hits;  // loaded, not compiled: no compile seconds either
      } else {
        ++(s.ok() ? cache.stats.compiles : cache.stats.compile_failures);
        cache.stats.compile_seconds += seconds;
      }
    }
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat("compiling for the NPU: ", s.message()));
      // Remembered (bounded by the cache), except a compiler that was momentarily unavailable.
      if (s.code() != absl::StatusCode::kUnavailable) entry->failure = s;
      return s;
    }
    start = std::chrono::steady_clock::now();
    npu::Status loaded =
        npu::CompiledModel::Load(compiled.data(), compiled.size(), device, &entry->model);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> stats_lock(cache.mu);
      cache.stats.load_seconds += seconds;
    }
    if (!loaded.ok()) return ErrorStatus("loading the compiled model onto the NPU", loaded);
  }
  *model = entry->model;
  return absl::OkStatus();
}

bool FindModel(const std::string& key, int device, bool count_hit, absl::Status* status,
               std::shared_ptr<npu::CompiledModel>* model) {
  ModelCache& cache = Cache();
  std::shared_ptr<CacheEntry> entry;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(absl::StrCat(device, "|", key));
    if (it == cache.entries.end()) return false;
    cache.lru.splice(cache.lru.begin(), cache.lru, it->second.second);
    entry = it->second.first;
  }
  std::unique_lock<std::mutex> lock(entry->mu, std::try_to_lock);
  if (!lock.owns_lock() || (entry->model == nullptr && entry->failure.ok())) return false;
  if (count_hit) {
    std::lock_guard<std::mutex> stats_lock(cache.mu);
    ++cache.stats.cache_hits;
  }
  *status = entry->failure;
  *model = entry->model;
  return true;
}

bool FallsBackToCpu(const absl::Status& s) {
  return !s.ok() && s.code() != absl::StatusCode::kInvalidArgument &&
         s.code() != absl::StatusCode::kUnavailable && g_cpu_fallback.load();
}

void CountFallbackRun() {
  std::lock_guard<std::mutex> lock(Cache().mu);
  ++Cache().stats.fallback_runs;
}

uint64_t OptionsGeneration() { return g_options_generation.load(std::memory_order_relaxed); }

void SetInputShapes(const std::vector<const Tensor*>& inputs, tensorflow::NodeDef* node) {
  auto* shapes = (*node->mutable_attr())["_input_shapes"].mutable_list();
  shapes->clear_shape();
  for (const Tensor* t : inputs) t->shape().AsProto(shapes->add_shape());
}

std::string AttrKey(const tensorflow::NodeDef& node) {
  std::map<std::string, std::string> attrs;  // sorted: the proto map has no fixed order
  for (const auto& [name, value] : node.attr()) {
    if (name.empty() || name[0] != '_') attrs[name] = value.SerializeAsString();
  }
  std::string key = node.op();
  for (const auto& [name, value] : attrs) absl::StrAppend(&key, "|", name, "=", value);
  return key;
}

void AppendSignature(const std::vector<const Tensor*>& tensors, std::string* key) {
  for (const Tensor* t : tensors) {
    absl::StrAppend(key, ";", static_cast<int>(t->dtype()), ":");
    for (int64_t d : t->shape().dim_sizes()) absl::StrAppend(key, d, ",");
  }
}

bool InputInHostMemory(tensorflow::OpKernelContext* ctx, int i) {
  return ctx->input_memory_type(i) == tensorflow::HOST_MEMORY &&
         ctx->input_dtype(i) != tensorflow::DT_RESOURCE;
}

absl::Status RunModel(tensorflow::OpKernelContext* ctx, npu::CompiledModel& model,
                      const std::vector<const Tensor*>& inputs,
                      const std::vector<int>* write_over, bool packed) {
  const auto& in_desc = model.inputs();
  const auto& out_desc = model.outputs();
  if (in_desc.size() != inputs.size() || out_desc.size() != static_cast<size_t>(ctx->num_outputs())) {
    return absl::InternalError(absl::StrCat(
        "compiled model '", model.name(), "' has ", in_desc.size(), " inputs and ",
        out_desc.size(), " outputs; the op has ", inputs.size(), " and ", ctx->num_outputs()));
  }
  std::vector<const void*> in_ptrs;
  std::vector<Tensor> staged_inputs;   // device copies of inputs that live in host memory
  staged_inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(inputs[i]->dtype()) != in_desc[i].dtype ||
        inputs[i]->TotalBytes() != in_desc[i].nbytes) {
      return absl::InternalError(absl::StrCat(
          "compiled model '", model.name(), "' input ", i, " expects dtype ", in_desc[i].dtype,
          " with ", in_desc[i].nbytes, " bytes; got ", inputs[i]->DebugString()));
    }
    if (InputInHostMemory(ctx, static_cast<int>(i))) {
      staged_inputs.emplace_back();
      absl::Status s = ctx->allocate_temp(inputs[i]->dtype(), inputs[i]->shape(), &staged_inputs.back());
      if (!s.ok()) return s;
      if (npurtMemcpy(staged_inputs.back().data(), inputs[i]->data(), inputs[i]->TotalBytes(),
                      NPURT_MEMCPY_HOST_TO_DEVICE) != NPURT_SUCCESS) {
        return absl::InternalError(absl::StrCat("copying input ", i, " of '", model.name(),
                                                "' to the NPU: ", npurtGetLastErrorMessage()));
      }
      in_ptrs.push_back(staged_inputs.back().data());
    } else {
      in_ptrs.push_back(inputs[i]->data());
    }
  }
  std::vector<void*> out_ptrs;
  struct Staged {
    Tensor* out;          // the kernel's output
    Tensor staging;       // where the model writes it
    npurtMemcpyKind kind;
  };
  std::vector<Staged> staged;
  for (size_t i = 0; i < out_desc.size(); ++i) {
    const npu::TensorDesc& d = out_desc[i];
    if (d.dtype != static_cast<int>(ctx->expected_output_dtype(i))) {
      return absl::InternalError(absl::StrCat(
          "compiled model '", model.name(), "' output ", i, " has dtype ", d.dtype, ", the op "
          "declares ", tensorflow::DataTypeString(ctx->expected_output_dtype(i))));
    }
    tensorflow::TensorShape shape;
    absl::Status s = tensorflow::TensorShape::BuildTensorShape(d.dims, &shape);
    if (!s.ok()) return s;
    const int over = write_over != nullptr ? (*write_over)[i] : -1;
    if (over >= 0) {
      // Written over an input the caller owns alone (a variable updated in place), as the
      // model allows (output_over_input: same dtype and size, checked at load): no staging.
      ctx->set_output(static_cast<int>(i), *inputs[over]);
      out_ptrs.push_back(const_cast<void*>(in_ptrs[over]));
      continue;
    }
    Tensor* out = nullptr;
    if (ctx->output_expects_forwarding(i)) {
      // A collective's merge op (CollectiveReduceV2 runs Add on the device) requires its
      // output in the buffer of an input: TF reserves which one.
      std::vector<int> candidates(ctx->num_inputs());
      std::iota(candidates.begin(), candidates.end(), 0);
      s = ctx->forward_input_or_allocate_output(candidates, i, shape, &out);
    } else {
      s = ctx->allocate_output(i, shape, &out);
    }
    if (!s.ok()) return s;
    if (out->TotalBytes() != d.nbytes) {
      return absl::InternalError(absl::StrCat("compiled model '", model.name(), "' output ", i,
                                              " has ", d.nbytes, " bytes, expected ",
                                              out->TotalBytes()));
    }
    // The model writes into a staging buffer when the output lives in host memory, or when it
    // is a forwarded input (a compiled model may read its inputs after writing an output).
    const bool host = ctx->output_memory_type(i) == tensorflow::HOST_MEMORY;
    const bool aliased = std::find(in_ptrs.begin(), in_ptrs.end(), out->data()) != in_ptrs.end();
    if (host || aliased) {
      staged.push_back({out, Tensor(), host ? NPURT_MEMCPY_DEVICE_TO_HOST : NPURT_MEMCPY_DEVICE_TO_DEVICE});
      s = ctx->allocate_temp(out->dtype(), shape, &staged.back().staging);
      if (!s.ok()) return s;
      out_ptrs.push_back(staged.back().staging.data());
    } else {
      out_ptrs.push_back(out->data());
    }
  }
  npurtStream stream = nullptr;
  absl::Status s = ComputeStream(ctx, &stream);
  if (!s.ok()) return s;
  // Inputs the model converts into cached values, or keeps packed (`packed`), get an owner: a
  // reference to the tensor. While the model holds it, TF's writers (variable updates copy a
  // buffer a reader shares; kernels forward only unshared buffers) leave these bytes alone and
  // nothing reallocates them, so the same buffer on the next run means the same weights.
  std::vector<npu::CompiledModel::InputOwner> owners;
  auto vouch = [&](const std::vector<uint32_t>& list) {
    if (!list.empty()) owners.resize(inputs.size());
    for (uint32_t i : list)
      if (!owners[i]) owners[i] = std::make_shared<const Tensor>(*inputs[i]);
  };
  vouch(model.cached_inputs());
  if (packed) vouch(model.packed_inputs());
  npu::Status ran = model.Run(stream, in_ptrs, out_ptrs, owners.empty() ? nullptr : &owners);
  if (!ran.ok()) return ErrorStatus(absl::StrCat("running '", model.name(), "' on the NPU"), ran);
  for (Staged& o : staged) {
    npurtError e = npurtMemcpy(o.out->data(), o.staging.data(), o.out->TotalBytes(), o.kind);
    if (e != NPURT_SUCCESS) {
      return absl::InternalError(absl::StrCat("copying an output of '", model.name(),
                                              "' into place: ", npurtGetLastErrorMessage()));
    }
  }
  return absl::OkStatus();
}

int DeviceIndex(tensorflow::DeviceBase* device) {
  const auto& name = device->parsed_name();
  return name.has_id ? name.id : 0;
}

}  // namespace npu_tf

// Called by npu_device.compiler_bridge (through ctypes) after the compile
// options changed: later eager compiles must not reuse models built with the old ones.
extern "C" __attribute__((visibility("default"))) void NpuPluginOptionsChanged() {
  npu_tf::g_options_generation.fetch_add(1, std::memory_order_relaxed);
}

// Option compile_cache_size (npu_device.compiler_bridge pushes it through ctypes).
extern "C" __attribute__((visibility("default"))) void NpuPluginSetCacheSize(uint64_t models) {
  npu_tf::ModelCache& cache = npu_tf::Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.capacity = models > 0 ? models : 1;
  cache.EvictLocked();
}

// Option cpu_fallback.
extern "C" __attribute__((visibility("default"))) void NpuPluginSetCpuFallback(int enabled) {
  npu_tf::g_cpu_fallback.store(enabled != 0);
}

// Called by the compiler hook (npu_device.compiler_bridge, through ctypes, on the calling
// thread) when the model it is about to return came from the disk compile cache: the plugin
// counts it as a disk cache hit, not a compile.
extern "C" __attribute__((visibility("default"))) void NpuPluginCompileFromDiskCache() {
  npu_tf::t_from_disk_cache = true;
}

// npu_device.compile_stats(): fills `out` with NpuCompileStatsFields() values, in that order.
extern "C" __attribute__((visibility("default"))) const char* NpuCompileStatsFields() {
  return "compiles,compile_failures,cache_hits,evictions,fallback_runs,cached_models,"
         "compile_seconds,disk_cache_hits,load_seconds";
}

extern "C" __attribute__((visibility("default"))) void NpuCompileStats(double* out, int reset) {
  npu_tf::ModelCache& cache = npu_tf::Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  npu_tf::CompileStats& s = cache.stats;
  double values[] = {static_cast<double>(s.compiles), static_cast<double>(s.compile_failures),
                     static_cast<double>(s.cache_hits), static_cast<double>(s.evictions),
                     static_cast<double>(s.fallback_runs),
                     static_cast<double>(cache.entries.size()), s.compile_seconds,
                     static_cast<double>(s.disk_cache_hits), s.load_seconds};
  std::copy(std::begin(values), std::end(values), out);
  if (reset) s = npu_tf::CompileStats();
}
