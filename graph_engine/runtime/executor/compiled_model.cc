// CompiledModel: loads a compiled model onto a device and runs its kernel sequence on a stream.
//
// Load parses the file, instantiates one kernel per node (each validates its shapes, dtypes
// and attributes then) and uploads the constant blob to device memory. Everything built at
// load is read-only afterwards; each Run allocates its own arena, so runs may overlap.
//
// Cached values (conversions of inputs into the NPU's weight formats, compiled as kCached) live
// in a region of the model that outlasts a run: the steps that write them are skipped while the
// inputs they read are the buffers of the last successful run and the caller holds an owner of
// each (a promise the bytes did not change). Runs of such a model take turns on that region.
// An input a kernel keeps its own form of (Kernel::KeepsFromInput: a MatMul's packed weight)
// is vouched for the same way and gets a version (KernelArgs::versions) once its buffer comes
// back unchanged: a weight written between every two runs (training) is never repacked per run.
//
// Observers (npurt/observer.h: tensor dumps, profilers) see every kernel step of the runs they
// watch, in sequence; with none registered, Execute is the plain loop after one relaxed atomic
// load.
//
// Small independent kernels run at once. A step may start before an earlier one when neither
// writes bytes the other reads or writes (Span: the memory plan's offsets, so buffers it reuses
// count as well as data dependencies). The first kTimedRuns runs after the first time every
// step; the run that completes them groups the steps (Schedule): each group is a step taking
// more than kSmallNs alone, or steps within a window of kWindow that are mutually independent
// and independent of the steps they pass, each taking at most kSmallNs, run by
// kernels::RunConcurrently. Kernels that small barely use a second thread themselves, so two of
// them side by side finish sooner than one after the other (an LSTM gradient's four products).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <iterator>
#include <mutex>
#include <new>

#include "executor/counters.h"
#include "executor/model_reader.h"
#include "executor/observer_registry.h"
#include "kernels/float_status.h"
#include "kernels/kernel.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace {

std::string RuntimeError(const char* call, npurtError err) {
  const char* msg = npurtGetLastErrorMessage();
  return std::string(call) + " failed: " + npurtErrorName(err) + (msg && *msg ? std::string(" (") + msg + ")" : "");
}

// A node all of whose outputs are empty (a dimension of size 0) computes nothing: once its
// factory has validated it, it runs as this, so no kernel's Compute ever sees an empty result
// (TF returns empty results for them; nothing is read or written).
class EmptyOutputs : public kernels::Kernel {
 public:
  Status Compute(const kernels::KernelArgs&) const override { return Status::Ok(); }
};

bool AllEmpty(const std::vector<TensorDesc>& outputs) {
  if (outputs.empty()) return false;
  for (const TensorDesc& d : outputs) {
    bool empty = false;
    for (int64_t dim : d.dims) empty |= dim == 0;
    if (!empty) return false;
  }
  return true;
}

std::atomic<uint64_t> g_next_model_uid{0};

// Bytes a step reads or writes: a range of the arena or the cached region, or one of the
// caller's buffers (an output computed in place is its input's). Constants are never written
// and take no span. A run whose buffers overlap otherwise runs in sequence (BuffersAsPlanned).
struct Span {
  uint64_t space, begin, end;
  bool Overlaps(const Span& o) const { return space == o.space && begin < o.end && o.begin < end; }
};
enum : uint64_t { kArenaSpace, kCachedSpace, kInputsSpace, kFirstOutputSpace };

bool AnyOverlap(const std::vector<Span>& a, const std::vector<Span>& b) {
  for (const Span& x : a)
    for (const Span& y : b)
      if (x.Overlaps(y)) return true;
  return false;
}

constexpr uint64_t kTimedRuns = 3;          // runs timed per step, after the first
constexpr int64_t kSmallNs = 20000;         // steps run beside others take at most this
constexpr int64_t kMinOverlapNs = 2000;     // a group's work beside its longest step, at least
constexpr size_t kWindow = 8;               // steps looked ahead for independent ones

// Steps in the order they run; a group of several runs at once.
struct Schedule {
  std::vector<std::vector<uint32_t>> groups;
};

struct Step {
  std::string kernel, node;
  std::unique_ptr<kernels::Kernel> impl;
  size_t in_begin, out_begin;   // into the run's flat operand arrays
  size_t n_in, n_out;
  bool deterministic = false;   // attr _deterministic: partitions independent of the threads
  bool cached = false;          // writes cached values: skipped while its inputs are unchanged
  std::vector<uint32_t> cached_from;   // the graph inputs those values are computed from
  std::vector<Span> reads, writes;
  bool Independent(const Step& o) const {
    return !AnyOverlap(writes, o.reads) && !AnyOverlap(writes, o.writes) && !AnyOverlap(reads, o.writes);
  }
};

class Model : public CompiledModel {
 public:
  ~Model() override {
    if (const_dev_ != nullptr) npurtFree(device_, const_dev_);
    if (cached_dev_ != nullptr) npurtFree(device_, cached_dev_);
  }

  Status Init(const ModelDef& def, int32_t device);

  const std::string& name() const override { return name_; }
  const std::vector<TensorDesc>& inputs() const override { return inputs_; }
  const std::vector<TensorDesc>& outputs() const override { return outputs_; }
  const std::string& metadata() const override { return metadata_; }
  uint64_t arena_bytes() const override { return arena_bytes_; }
  const std::vector<uint32_t>& cached_inputs() const override { return cached_inputs_; }
  const std::vector<uint32_t>& packed_inputs() const override { return packed_inputs_; }
  const std::vector<int32_t>& output_over_input() const override { return output_over_input_; }
  std::vector<std::vector<uint32_t>> concurrent_groups() const override {
    std::vector<std::vector<uint32_t>> groups;
    if (std::shared_ptr<const Schedule> schedule = std::atomic_load(&schedule_))
      for (const std::vector<uint32_t>& g : schedule->groups)
        if (g.size() > 1) groups.push_back(g);
    return groups;
  }
  std::vector<std::string> kernel_names() const override {
    std::vector<std::string> names;
    for (const Step& s : steps_) names.push_back(s.kernel);
    return names;
  }

  Status Run(npurtStream stream, const std::vector<const void*>& inputs,
             const std::vector<void*>& outputs, const std::vector<InputOwner>* owners) override;

 private:
  // One Run's state, shared with its host function on the stream.
  struct RunState {
    const Model* model;
    std::vector<void*> values;             // device address of every value
    std::vector<const void*> in_operands;  // per step, from Step::in_begin
    std::vector<void*> out_operands;
    uint64_t executed = 0;
    uint64_t concurrent = 0;               // of executed, steps of concurrent groups
    uint64_t step = 0;                     // runs of this model before this one
    npurtStream stream = nullptr;
    std::vector<char> skip;                // per step: its cached values are still valid
    uint64_t versions_held = 0;            // versioned operands whose input came back unchanged
    const uint64_t* versions = nullptr;    // KernelArgs::versions per flat input operand
    const std::vector<void*>* outputs = nullptr;   // the caller's output buffers
    // The schedule of the timed runs if it runs steps at once and the buffers allow that.
    std::shared_ptr<const Schedule> schedule;
    Status status;
  };
  // Which cached steps this run may skip, and the versions of versioned inputs (cache_mu_ held).
  void PlanCachedSteps(const std::vector<const void*>& inputs,
                       const std::vector<InputOwner>* owners, RunState& s);
  // After the run (cache_mu_ held): what the cached region now holds is valid for these inputs
  // only if the run succeeded and the caller vouched for them.
  void KeepCachedInputs(const std::vector<const void*>& inputs,
                        const std::vector<InputOwner>* owners, bool ok);
  static void Execute(void* state);
  // Computes one kernel step; a failure also becomes s.status, naming the node.
  static Status RunStep(const Step& step, RunState& s);
  static Status ComputeStep(const Step& step, const RunState& s);
  // Runs the schedule's groups; false after a failed step (s.status says which).
  static bool ExecuteScheduled(const Schedule& schedule, RunState& s);
  // Whether the caller's buffers are as the spans assume: outputs apart from each other and
  // from the inputs, except an output over the input output_over_input() names, which no other
  // input shares. (TF may hand an output an input's buffer: a collective's merge op.)
  bool BuffersAsPlanned(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) const;
  // Runs the steps in sequence, timing them when `timed`; false after a failed step.
  static bool ExecuteInSequence(RunState& s, bool timed);
  void FindSpans(const ModelDef& def);
  // The schedule from the timed runs; nullptr when no group runs steps at once.
  std::shared_ptr<const Schedule> MakeSchedule() const;
  static void ExecuteObserved(RunState& s);
  // Copies the outputs the kernels did not write in place from where they live.
  static void CopyOutputs(RunState& s);
  void FindCachedInputs(const ModelDef& def);
  void FindVersionedInputs();
  // Whether a run plans with the cached region and the versions (and so takes turns).
  bool TracksInputs(const std::vector<InputOwner>* owners) const {
    return has_cached_steps_ || (owners != nullptr && !versioned_operands_.empty());
  }

  std::string name_, metadata_;
  std::vector<TensorDesc> inputs_, outputs_;
  uint64_t arena_bytes_ = 0;
  int32_t device_ = 0;
  std::vector<ValueDef> values_;
  std::vector<uint32_t> output_ids_;
  std::vector<uint32_t> in_ids_, out_ids_;   // flat kernel operand lists
  std::vector<Step> steps_;
  void* const_dev_ = nullptr;
  // Cached values: their region, the steps' inputs, and the owners and buffers of the last run.
  uint64_t cached_bytes_ = 0;
  bool has_cached_steps_ = false;
  std::vector<uint32_t> cached_inputs_, packed_inputs_;
  std::vector<uint32_t> vouched_inputs_;   // both, ascending: the owners a run may hand over
  std::vector<int32_t> output_over_input_;
  std::mutex cache_mu_;
  void* cached_dev_ = nullptr;
  bool cached_valid_ = false;
  std::vector<InputOwner> held_;
  std::vector<const void*> held_buffers_;
  // KernelArgs::versions per flat input operand: 1 for constants, 0 for per-run values; a
  // cached value's is renumbered in each run that computes it (Run, cache_mu_ held).
  std::vector<uint64_t> operand_versions_;
  std::vector<uint64_t> load_versions_;   // the same at load (constants only): runs without owners
  uint64_t last_version_ = 1;
  // Operands (flat index, graph input) that read a versioned input; each input's version, 0
  // until its buffer came back unchanged (cache_mu_ held).
  std::vector<std::pair<size_t, uint32_t>> versioned_operands_;
  std::vector<uint64_t> input_versions_;
  // Per step the shortest time of a timed run (ns); the schedule, once kTimedRuns are timed.
  std::unique_ptr<std::atomic<int64_t>[]> step_ns_;
  mutable std::atomic<uint64_t> timed_runs_{0};
  mutable std::shared_ptr<const Schedule> schedule_;   // std::atomic_load/store
  ModelInfo info_;                          // what observers see of this model
  mutable std::atomic<uint64_t> runs_{0};   // Run calls so far: the step number of the next
};

Status Model::Init(const ModelDef& def, int32_t device) {
  npurtDeviceInfo info;
  if (npurtError err = npurtGetDeviceInfo(device, &info); err != NPURT_SUCCESS)
    return Status::Error("cannot load a model on device " + std::to_string(device) + ": " +
                         RuntimeError("npurtGetDeviceInfo", err));
  name_ = def.name;
  metadata_ = def.metadata;
  arena_bytes_ = def.arena_bytes;
  device_ = device;
  values_ = def.values;
  output_ids_ = def.outputs;
  for (uint32_t id : def.inputs) inputs_.push_back(def.values[id].desc);
  for (uint32_t id : def.outputs) outputs_.push_back(def.values[id].desc);
  output_over_input_.assign(def.outputs.size(), -1);
  for (size_t p = 0; p + 1 < def.in_place.size(); p += 2)
    output_over_input_[def.in_place[p]] = static_cast<int32_t>(def.in_place[p + 1]);
  info_.uid = g_next_model_uid.fetch_add(1, std::memory_order_relaxed);
  info_.name = def.name;
  info_.device = device;
  info_.metadata = def.metadata;
  for (const ValueDef& v : def.values) info_.values.push_back(v.desc);
  info_.inputs = def.inputs;
  info_.outputs = def.outputs;

  for (const NodeDef& n : def.nodes) {
    const std::string where = "node '" + n.node + "' (kernel " + n.kernel + "): ";
    const kernels::KernelFactory* factory = kernels::FindKernel(n.kernel);
    if (factory == nullptr)
      return Status::Error("node '" + n.node + "': unknown kernel '" + n.kernel + "' (this runtime has " +
                           std::to_string(kernels::RegisteredKernels().size()) + " kernels)");
    kernels::KernelDef kd;
    kd.kernel = n.kernel;
    kd.node = n.node;
    kd.attrs = n.attrs;
    for (uint32_t id : n.inputs) kd.inputs.push_back(def.values[id].desc);
    for (uint32_t id : n.outputs) kd.outputs.push_back(def.values[id].desc);
    Step step{n.kernel, n.node, nullptr, in_ids_.size(), out_ids_.size(), n.inputs.size(), n.outputs.size()};
    Status st = kd.attrs.Bool("_deterministic", false, &step.deterministic);
    if (st.ok()) st = kernels::CheckNdLayouts(kd);
    if (st.ok()) {
      try {
        st = (*factory)(kd, &step.impl);
      } catch (const std::exception& e) {
        st = Status::Error(e.what());
      }
    }
    if (!st.ok()) return Status::Error(where + st.message, st.code);
    if (!step.impl) return Status::Error(where + "the factory built no kernel");
    if (AllEmpty(kd.outputs) && !step.impl->ChecksValues())
      step.impl = std::make_unique<EmptyOutputs>();   // validated, never run
    step.cached = std::any_of(n.outputs.begin(), n.outputs.end(),
                              [&](uint32_t id) { return def.values[id].kind == ValueKind::kCached; });
    in_ids_.insert(in_ids_.end(), n.inputs.begin(), n.inputs.end());
    out_ids_.insert(out_ids_.end(), n.outputs.begin(), n.outputs.end());
    steps_.push_back(std::move(step));
    info_.steps.push_back(ObservedStep{n.kernel, n.node, n.inputs, n.outputs});
  }

  FindCachedInputs(def);
  FindVersionedInputs();
  FindSpans(def);
  for (uint32_t id : in_ids_) operand_versions_.push_back(values_[id].kind == ValueKind::kConst ? 1 : 0);
  load_versions_ = operand_versions_;
  if (cached_bytes_ > 0) {
    // Not cleared: the reader checked that every cached value is written before it is read, and
    // the first run's conversions fault the pages in on the pool's threads (clearing 100 MB
    // first cost a ResNet50 inference 40 ms of its first call, on one thread).
    npurtError err = npurtMalloc(device, &cached_dev_, cached_bytes_);
    if (err != NPURT_SUCCESS) {
      cached_dev_ = nullptr;
      return Status::Error("cannot allocate the " + std::to_string(cached_bytes_) +
                               "-byte region of cached values (converted weights): " +
                               RuntimeError("npurtMalloc", err),
                           err == NPURT_ERROR_OUT_OF_MEMORY ? kCodeResourceExhausted : 0);
    }
  }

  if (def.const_len > 0) {
    if (npurtError err = npurtMalloc(device, &const_dev_, def.const_len); err != NPURT_SUCCESS) {
      const_dev_ = nullptr;
      return Status::Error("cannot allocate " + std::to_string(def.const_len) + " bytes of constants: " +
                               RuntimeError("npurtMalloc", err),
                           err == NPURT_ERROR_OUT_OF_MEMORY ? kCodeResourceExhausted : 0);
    }
    if (npurtError err = npurtMemcpy(const_dev_, def.const_blob, def.const_len, NPURT_MEMCPY_HOST_TO_DEVICE);
        err != NPURT_SUCCESS)
      return Status::Error("cannot upload constants: " + RuntimeError("npurtMemcpy", err));
  }
  return Status::Ok();
}

// The graph inputs each cached step computes from, through earlier cached steps (the model
// reader checked that cached steps read only inputs, constants and cached values). A cached
// value no earlier step wrote (a name sharing another's bytes) counts as computed from every
// input seen so far.
void Model::FindCachedInputs(const ModelDef& def) {
  cached_bytes_ = def.cached_bytes;
  std::vector<std::vector<uint32_t>> from(def.values.size());
  std::vector<char> written(def.values.size(), 0);   // by an earlier cached step
  std::vector<uint32_t> seen;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    if (!step.cached) continue;
    has_cached_steps_ = true;
    for (uint32_t id : def.nodes[i].inputs) {
      const ValueDef& v = def.values[id];
      if (v.kind == ValueKind::kInput) step.cached_from.push_back(static_cast<uint32_t>(v.where));
      if (v.kind != ValueKind::kCached) continue;
      const std::vector<uint32_t>& more = written[id] ? from[id] : seen;
      step.cached_from.insert(step.cached_from.end(), more.begin(), more.end());
    }
    std::sort(step.cached_from.begin(), step.cached_from.end());
    step.cached_from.erase(std::unique(step.cached_from.begin(), step.cached_from.end()),
                           step.cached_from.end());
    for (uint32_t id : def.nodes[i].outputs) {
      from[id] = step.cached_from;
      written[id] = 1;
    }
    seen.insert(seen.end(), step.cached_from.begin(), step.cached_from.end());
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  cached_inputs_ = std::move(seen);
}

void Model::FindSpans(const ModelDef& def) {
  auto span = [&](uint32_t id, std::vector<Span>* out) {
    const ValueDef& v = def.values[id];
    const uint64_t end = v.where + v.desc.nbytes;
    switch (v.kind) {
      case ValueKind::kConst: return;
      case ValueKind::kArena: out->push_back({kArenaSpace, v.where, end}); return;
      case ValueKind::kCached: out->push_back({kCachedSpace, v.where, end}); return;
      case ValueKind::kInput: out->push_back({kInputsSpace, v.where, v.where + 1}); return;
      case ValueKind::kOutput:
        if (const int64_t over = output_over_input_[v.where]; over >= 0)
          out->push_back({kInputsSpace, static_cast<uint64_t>(over), static_cast<uint64_t>(over) + 1});
        else
          out->push_back({kFirstOutputSpace + v.where, 0, UINT64_MAX});
        return;
    }
  };
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (uint32_t id : def.nodes[i].inputs) span(id, &steps_[i].reads);
    for (uint32_t id : def.nodes[i].outputs) span(id, &steps_[i].writes);
  }
  step_ns_.reset(new std::atomic<int64_t>[steps_.size()]);
  for (size_t i = 0; i < steps_.size(); ++i) step_ns_[i].store(INT64_MAX, std::memory_order_relaxed);
}

std::shared_ptr<const Schedule> Model::MakeSchedule() const {
  auto schedule = std::make_shared<Schedule>();
  bool concurrent = false;   // some group runs steps at once
  const size_t n = steps_.size();
  auto small = [&](size_t i) {
    const Step& step = steps_[i];
    return !step.deterministic && !step.cached && step_ns_[i].load(std::memory_order_relaxed) <= kSmallNs;
  };
  std::vector<char> placed(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (placed[i]) continue;
    placed[i] = 1;
    std::vector<uint32_t> group{static_cast<uint32_t>(i)}, passed;
    for (size_t j = i + 1; small(i) && j < n && j <= i + kWindow; ++j) {
      if (placed[j]) continue;
      auto independent = [&](uint32_t k) { return steps_[j].Independent(steps_[k]); };
      if (small(j) && std::all_of(group.begin(), group.end(), independent) &&
          std::all_of(passed.begin(), passed.end(), independent)) {
        group.push_back(static_cast<uint32_t>(j));
        placed[j] = 1;
      } else {
        passed.push_back(static_cast<uint32_t>(j));
      }
    }
    int64_t total = 0, longest = 0;
    for (uint32_t k : group) {
      total += step_ns_[k].load(std::memory_order_relaxed);
      longest = std::max(longest, step_ns_[k].load(std::memory_order_relaxed));
    }
    if (group.size() > 1 && total - longest >= kMinOverlapNs) {
      // Longest first: threads take the steps in this order, so the shortest fill in at the end.
      std::stable_sort(group.begin(), group.end(), [&](uint32_t a, uint32_t b) {
        return step_ns_[a].load(std::memory_order_relaxed) > step_ns_[b].load(std::memory_order_relaxed);
      });
      schedule->groups.push_back(std::move(group));
      concurrent = true;
    } else {
      for (uint32_t k : group) schedule->groups.push_back({k});   // mutually independent: any order
    }
  }
  return concurrent ? schedule : nullptr;
}

bool Model::BuffersAsPlanned(const std::vector<const void*>& inputs,
                             const std::vector<void*>& outputs) const {
  struct Buffer {
    uintptr_t begin, end;
    int64_t output;   // -1: input `index`
    size_t index;
  };
  std::vector<Buffer> buffers;
  auto add = [&](const void* p, uint64_t nbytes, int64_t output, size_t index) {
    const auto begin = reinterpret_cast<uintptr_t>(p);
    if (nbytes > 0) buffers.push_back({begin, begin + nbytes, output, index});
  };
  for (size_t i = 0; i < inputs.size(); ++i) add(inputs[i], inputs_[i].nbytes, -1, i);
  for (size_t j = 0; j < outputs.size(); ++j)
    add(outputs[j], outputs_[j].nbytes, static_cast<int64_t>(j), j);
  std::sort(buffers.begin(), buffers.end(),
            [](const Buffer& a, const Buffer& b) { return a.begin < b.begin; });
  auto allowed = [&](const Buffer& a, const Buffer& b) {
    if (a.output < 0 && b.output < 0) return true;   // inputs are only read
    if (a.output >= 0 && b.output >= 0) return false;
    const Buffer& out = a.output >= 0 ? a : b;
    const Buffer& in = a.output >= 0 ? b : a;
    return output_over_input_[out.index] == static_cast<int32_t>(in.index);
  };
  std::vector<const Buffer*> open;   // buffers reaching past the current one's start
  for (const Buffer& b : buffers) {
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](const Buffer* o) { return o->end <= b.begin; }),
               open.end());
    for (const Buffer* o : open)
      if (!allowed(*o, b)) return false;
    open.push_back(&b);
  }
  return true;
}

// An input the model updates (an output over it) changes every run, and an owner the model
// kept would stop the caller from writing it in place: never versioned.
void Model::FindVersionedInputs() {
  std::vector<char> updated(inputs_.size(), 0);
  for (int32_t in : output_over_input_)
    if (in >= 0) updated[in] = 1;
  for (const Step& step : steps_)
    for (size_t j = 0; j < step.n_in; ++j) {
      const ValueDef& v = values_[in_ids_[step.in_begin + j]];
      if (v.kind == ValueKind::kInput && !updated[v.where] && step.impl->KeepsFromInput(static_cast<int>(j)))
        versioned_operands_.emplace_back(step.in_begin + j, static_cast<uint32_t>(v.where));
    }
  for (const auto& operand : versioned_operands_) packed_inputs_.push_back(operand.second);
  std::sort(packed_inputs_.begin(), packed_inputs_.end());
  packed_inputs_.erase(std::unique(packed_inputs_.begin(), packed_inputs_.end()), packed_inputs_.end());
  std::set_union(cached_inputs_.begin(), cached_inputs_.end(), packed_inputs_.begin(), packed_inputs_.end(),
                 std::back_inserter(vouched_inputs_));
  input_versions_.assign(inputs_.size(), 0);
}

void Model::PlanCachedSteps(const std::vector<const void*>& inputs,
                            const std::vector<InputOwner>* owners, RunState& s) {
  s.skip.assign(steps_.size(), 0);
  const bool vouched = cached_valid_ && owners != nullptr && owners->size() == inputs.size();
  std::vector<char> unchanged(inputs.size(), 0);
  for (uint32_t i : vouched_inputs_)
    unchanged[i] = vouched && (*owners)[i] != nullptr && held_[i] != nullptr && inputs[i] == held_buffers_[i];
  for (const auto& [operand, in] : versioned_operands_) {
    uint64_t& version = input_versions_[in];
    version = !unchanged[in] ? 0 : version != 0 ? version : ++last_version_;
    operand_versions_[operand] = version;
    s.versions_held += version != 0;
  }
  if (!vouched) return;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    if (!step.cached) continue;
    s.skip[i] = std::all_of(step.cached_from.begin(), step.cached_from.end(),
                            [&](uint32_t in) { return unchanged[in] != 0; });
  }
}

void Model::KeepCachedInputs(const std::vector<const void*>& inputs,
                             const std::vector<InputOwner>* owners, bool ok) {
  cached_valid_ = ok;
  held_.assign(inputs.size(), nullptr);
  held_buffers_.assign(inputs.size(), nullptr);
  if (!ok || owners == nullptr || owners->size() != inputs.size()) return;
  for (uint32_t i : vouched_inputs_) {
    held_[i] = (*owners)[i];
    held_buffers_[i] = inputs[i];
  }
}

// A step's failure as the run reports it, naming the node.
Status StepError(const Step& step, const Status& st) {
  return Status::Error("node '" + step.node + "' (kernel " + step.kernel + "): " + st.message, st.code);
}

Status Model::RunStep(const Step& step, RunState& s) {
  const Status st = ComputeStep(step, s);
  if (!st.ok()) s.status = StepError(step, st);
  else ++s.executed;
  return st;
}

Status Model::ComputeStep(const Step& step, const RunState& s) {
  kernels::KernelArgs args{s.in_operands.data() + step.in_begin, s.out_operands.data() + step.out_begin,
                           s.versions + step.in_begin};
  kernels::DeterministicScope deterministic(step.deterministic);
  try {
    return step.impl->Compute(args);
  } catch (const std::bad_alloc&) {
    return Status::Error("out of host memory", kCodeResourceExhausted);
  } catch (const std::exception& e) {
    return Status::Error(e.what());
  }
}

void Model::Execute(void* p) {
  RunState& s = *static_cast<RunState*>(p);
  const Model& m = *s.model;
  kernels::FlushDenormalsScope flush;   // as TF's CPU kernels compute
  bool ok;
  if (ObserversActive()) {
    ExecuteObserved(s);
    ok = s.status.ok();
  } else if (s.schedule) {
    ok = ExecuteScheduled(*s.schedule, s);
  } else {
    // Timed until there is a schedule; not the first run, which pays for first touches.
    const bool timed = s.step > 0 && m.timed_runs_.load(std::memory_order_acquire) < kTimedRuns;
    ok = ExecuteInSequence(s, timed);
    if (ok && timed && m.timed_runs_.fetch_add(1, std::memory_order_acq_rel) + 1 == kTimedRuns)
      std::atomic_store(&m.schedule_, m.MakeSchedule());
  }
  if (ok) CopyOutputs(s);
}

bool Model::ExecuteInSequence(RunState& s, bool timed) {
  const Model& m = *s.model;
  for (size_t i = 0; i < m.steps_.size(); ++i) {
    if (!s.skip.empty() && s.skip[i]) continue;
    const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    if (!RunStep(m.steps_[i], s).ok()) return false;
    if (!timed) continue;
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    std::atomic<int64_t>& best = m.step_ns_[i];
    for (int64_t seen = best.load(std::memory_order_relaxed);
         ns < seen && !best.compare_exchange_weak(seen, ns, std::memory_order_relaxed);) {
    }
  }
  return true;
}

bool Model::ExecuteScheduled(const Schedule& schedule, RunState& s) {
  const Model& m = *s.model;
  std::vector<Status> status;
  for (const std::vector<uint32_t>& group : schedule.groups) {
    if (group.size() == 1) {
      if ((s.skip.empty() || !s.skip[group[0]]) && !RunStep(m.steps_[group[0]], s).ok()) return false;
      continue;
    }
    status.assign(group.size(), Status::Ok());
    kernels::RunConcurrently(static_cast<int64_t>(group.size()), [&](int64_t k) {
      if (s.skip.empty() || !s.skip[group[k]]) status[k] = ComputeStep(m.steps_[group[k]], s);
    });
    // A failure is reported as the sequence would have: the first failed step's.
    size_t failed = group.size();
    for (size_t k = 0; k < group.size(); ++k) {
      if (status[k].ok()) {
        ++s.executed;
        ++s.concurrent;
      } else if (failed == group.size() || group[k] < group[failed]) {
        failed = k;
      }
    }
    if (failed < group.size()) {
      s.status = StepError(m.steps_[group[failed]], status[failed]);
      return false;
    }
  }
  return true;
}

void Model::CopyOutputs(RunState& s) {
  const Model& m = *s.model;
  for (size_t i = 0; i < m.output_ids_.size(); ++i) {
    const ValueDef& v = m.values_[m.output_ids_[i]];
    if ((v.kind == ValueKind::kOutput && v.where == i) || v.desc.nbytes == 0) continue;
    std::memmove((*s.outputs)[i], s.values[m.output_ids_[i]], v.desc.nbytes);
  }
}

// The same loop with the hooks of every observer that watches this run around each kernel. An
// observer that throws is reported once and skipped; it never changes the run's result.
void Model::ExecuteObserved(RunState& s) {
  const Model& m = *s.model;
  RunInfo run{&m.info_, s.step, s.stream, ObserverClockNs(), &s.values};
  std::vector<std::unique_ptr<RunObserver>> watchers;
  bool watch_status = false;
  {
    std::shared_ptr<const ObserverList> observers = CurrentObservers();
    for (const auto& o : *observers) {
      try {
        if (auto w = o->BeginRun(run)) {
          watch_status |= w->WatchFloatStatus();
          watchers.push_back(std::move(w));
        }
      } catch (const std::exception& e) {
        ReportObserverFailure(e.what());
      } catch (...) {
        ReportObserverFailure("unknown exception");
      }
    }
  }
  const auto skipped = [&s](size_t i) { return !s.skip.empty() && s.skip[i]; };
  if (watchers.empty()) {
    for (size_t i = 0; i < m.steps_.size(); ++i)
      if (!skipped(i) && !RunStep(m.steps_[i], s).ok()) return;
    return;
  }
  auto each = [&watchers](auto&& hook) {
    for (auto& w : watchers) {
      try {
        hook(*w);
      } catch (const std::exception& e) {
        ReportObserverFailure(e.what());
      } catch (...) {
        ReportObserverFailure("unknown exception");
      }
    }
  };
  for (size_t i = 0; i < m.steps_.size(); ++i) {
    if (skipped(i)) continue;   // its cached values are already in place
    const Step& step = m.steps_[i];
    const KernelView view{&run, static_cast<uint32_t>(i), &m.info_.steps[i],
                          s.in_operands.data() + step.in_begin, s.out_operands.data() + step.out_begin};
    each([&](RunObserver& w) { w.BeforeKernel(view); });
    std::atomic<uint32_t> sink{0};
    std::atomic<uint32_t>* previous = watch_status ? kernels::SetFloatStatusSink(&sink) : nullptr;
    const int64_t start = ObserverClockNs();
    const Status st = RunStep(step, s);
    const int64_t end = ObserverClockNs();
    if (watch_status) kernels::SetFloatStatusSink(previous);
    const KernelResult result{start, end, sink.load(std::memory_order_relaxed), &st};
    each([&](RunObserver& w) { w.AfterKernel(view, result); });
    if (!st.ok()) break;
  }
  const int64_t end = ObserverClockNs();
  each([&](RunObserver& w) { w.EndRun(run, end, s.status); });
}

Status Model::Run(npurtStream stream, const std::vector<const void*>& inputs,
                  const std::vector<void*>& outputs, const std::vector<InputOwner>* owners) {
  if (stream == nullptr) return Status::Error("Run: stream is null");
  if (inputs.size() != inputs_.size() || outputs.size() != outputs_.size())
    return Status::Error("model '" + name_ + "' takes " + std::to_string(inputs_.size()) + " inputs and " +
                         std::to_string(outputs_.size()) + " outputs; got " + std::to_string(inputs.size()) +
                         " and " + std::to_string(outputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] == nullptr && inputs_[i].nbytes) return Status::Error("input " + std::to_string(i) + " is null");
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i] == nullptr && outputs_[i].nbytes) return Status::Error("output " + std::to_string(i) + " is null");

  std::unique_lock<std::mutex> cache_lock(cache_mu_, std::defer_lock);
  RunState state;
  const bool tracks = TracksInputs(owners);
  if (tracks) {
    cache_lock.lock();
    PlanCachedSteps(inputs, owners, state);
  }
  void* arena = nullptr;
  if (arena_bytes_ > 0) {
    if (npurtError err = npurtMalloc(device_, &arena, arena_bytes_); err != NPURT_SUCCESS)
      return Status::Error("cannot allocate the " + std::to_string(arena_bytes_) + "-byte arena of model '" +
                               name_ + "': " + RuntimeError("npurtMalloc", err),
                           err == NPURT_ERROR_OUT_OF_MEMORY ? kCodeResourceExhausted : 0);
  }
  state.model = this;
  state.step = runs_.fetch_add(1, std::memory_order_relaxed);
  state.stream = stream;
  state.values.resize(values_.size());
  for (size_t id = 0; id < values_.size(); ++id) {
    const ValueDef& v = values_[id];
    switch (v.kind) {
      case ValueKind::kInput: state.values[id] = const_cast<void*>(inputs[v.where]); break;
      case ValueKind::kOutput: state.values[id] = outputs[v.where]; break;
      case ValueKind::kConst: state.values[id] = static_cast<char*>(const_dev_) + v.where; break;
      case ValueKind::kArena: state.values[id] = static_cast<char*>(arena) + v.where; break;
      case ValueKind::kCached: state.values[id] = static_cast<char*>(cached_dev_) + v.where; break;
    }
  }
  for (uint32_t id : in_ids_) state.in_operands.push_back(state.values[id]);
  if (has_cached_steps_) {
    // The cached values this run computes get new versions (the plan is made, cache_mu_ held);
    // their readers come later in the run.
    std::vector<uint64_t> version(values_.size(), 0);
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (!steps_[i].cached || state.skip[i]) continue;
      for (size_t o = 0; o < steps_[i].n_out; ++o) version[out_ids_[steps_[i].out_begin + o]] = ++last_version_;
    }
    for (size_t k = 0; k < in_ids_.size(); ++k)
      if (values_[in_ids_[k]].kind == ValueKind::kCached && version[in_ids_[k]] != 0)
        operand_versions_[k] = version[in_ids_[k]];
  }
  for (uint32_t id : out_ids_) state.out_operands.push_back(state.values[id]);
  state.versions = tracks ? operand_versions_.data() : load_versions_.data();

  state.outputs = &outputs;
  state.schedule = std::atomic_load(&schedule_);
  if (state.schedule && !BuffersAsPlanned(inputs, outputs)) state.schedule = nullptr;
  // The kernels run as one host function in the stream's order; the call returns once it ran.
  Status status;
  if (npurtError err = npurtRunHostFunc(stream, &Model::Execute, &state); err != NPURT_SUCCESS)
    status = Status::Error(RuntimeError("npurtRunHostFunc", err));
  if (arena != nullptr) npurtFree(device_, arena);
  CountKernelsExecuted(state.executed);
  CountKernelsConcurrent(state.concurrent);
  if (status.ok()) status = state.status;
  if (tracks) {
    KeepCachedInputs(inputs, owners, status.ok());
    if (status.ok()) {
      CountConversionsReused(std::count(state.skip.begin(), state.skip.end(), 1));
      CountWeightsKept(state.versions_held);
    }
  }
  if (status.ok()) CountModelRun();
  return status;
}

}  // namespace

Status CompiledModel::Load(const void* data, size_t size, int32_t device,
                           std::shared_ptr<CompiledModel>* out) {
  if (out == nullptr) return Status::Error("CompiledModel::Load: out is null");
  ModelDef def;
  NPU_RETURN_IF_ERROR(ParseModel(data, size, &def));
  auto model = std::make_shared<Model>();
  Status st;
  try {
    st = model->Init(def, device);
  } catch (const std::bad_alloc&) {
    st = Status::Error("out of host memory while loading the model", kCodeResourceExhausted);
  }
  if (!st.ok()) return Status::Error("model '" + def.name + "': " + st.message, st.code);
  CountModelLoaded();
  *out = std::move(model);
  return Status::Ok();
}

std::vector<std::string> RegisteredKernels() { return kernels::RegisteredKernels(); }

}  // namespace npu
