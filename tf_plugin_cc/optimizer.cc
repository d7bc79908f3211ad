// TF_InitGraph: the Grappler plugin that hands every graph touching the NPU to the graph engine
// (and, through jit_compile.cc, the tf.function(jit_compile=True) graphs placed there).
//
// The graph engine partitions the graph: maximal groups of NPU-supported ops become NpuGraphOp
// nodes, the rest stay TF ops. Any failure leaves the graph as it was (TF then runs it op by op,
// NPU-placed ops through the per-op kernels of eager_op.cc) and is logged once, never silent.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "jit_compile.h"
#include "python_compiler.h"
#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/platform/logging.h"

namespace npu_tf {
namespace {

constexpr char kPreserveAttr[] = "_npu_preserve";

using NameLister = void (*)(const TF_GrapplerItem*, char**, size_t*, int, void*, size_t,
                            TF_Status*);
using NameCounter = void (*)(const TF_GrapplerItem*, int*, size_t*, TF_Status*);

// Reads one of Grappler's name lists (nodes to preserve, fetch nodes).
absl::Status ReadNames(const TF_GrapplerItem* item, NameCounter count, NameLister list,
                       std::set<std::string>* names) {
  TF_Status* status = TF_NewStatus();
  int n = 0;
  size_t storage_size = 0;
  count(item, &n, &storage_size, status);
  std::vector<char*> values(n);
  std::vector<size_t> lengths(n);
  std::string storage(storage_size, '\0');
  if (TF_GetCode(status) == TF_OK) {
    list(item, values.data(), lengths.data(), n, storage.data(), storage_size, status);
  }
  absl::Status result = TF_GetCode(status) == TF_OK
                            ? absl::OkStatus()
                            : absl::InternalError(absl::StrCat("Grappler name list: ",
                                                               TF_Message(status)));
  TF_DeleteStatus(status);
  if (!result.ok()) return result;
  for (int i = 0; i < n; ++i) {
    std::string name(values[i], lengths[i]);
    // Fetches may be tensor names ("node:1") or control inputs ("^node").
    if (!name.empty() && name[0] == '^') name.erase(0, 1);
    names->insert(name.substr(0, name.find(':')));
  }
  return absl::OkStatus();
}

// Every node the partitioner added must be placed: TF silently drops a rewrite that has an
// unplaced node, and that must not go unnoticed.
absl::Status CheckPlaced(const tensorflow::GraphDef& before, const tensorflow::GraphDef& after) {
  std::set<std::string> known;
  for (const auto& node : before.node()) known.insert(node.name());
  for (const auto& node : after.node()) {
    if (node.device().empty() && !known.count(node.name())) {
      return absl::InternalError(absl::StrCat("the graph engine created node '", node.name(),
                                              "' (", node.op(), ") without a device"));
    }
  }
  return absl::OkStatus();
}

uint64_t Mix(uint64_t x) {   // splitmix64's finalizer: sums of mixed hashes do not cancel
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Hash(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return Mix(std::hash<std::string>()(bytes));
}

// The graph's content regardless of the order of its nodes: TF's own passes between Grappler's
// two calls reorder them.
uint64_t Fingerprint(const tensorflow::GraphDef& graph) {
  uint64_t sum = Mix(Hash(graph.library()) + 1) + Mix(Hash(graph.versions()) + 2);
  for (const auto& node : graph.node()) sum += Hash(node);
  return sum;
}

// Grappler runs its optimizers twice over each graph, and TF's passes in between rarely change
// anything: a graph equal to one the partitioner returned has nothing left to partition (the
// second call cost 0.04-0.3 s of the zoo's first steps). The graphs it returned last.
class Partitioned {
 public:
  bool Contains(uint64_t fingerprint) {
    std::lock_guard<std::mutex> lock(mu_);
    return set_.count(fingerprint) > 0;
  }
  void Add(uint64_t fingerprint) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!set_.insert(fingerprint).second) return;
    order_.push_back(fingerprint);
    if (order_.size() > kKept) {
      set_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  static constexpr size_t kKept = 1024;
  std::mutex mu_;
  std::unordered_set<uint64_t> set_;
  std::deque<uint64_t> order_;
};

Partitioned& AlreadyPartitioned() {
  static auto* graphs = new Partitioned();
  return *graphs;
}

absl::Status Partition(const TF_Buffer* in, const TF_GrapplerItem* item, std::string* out) {
  tensorflow::GraphDef graph;
  if (!graph.ParseFromArray(in->data, static_cast<int>(in->length))) {
    return absl::InvalidArgumentError("Grappler passed a GraphDef that does not parse");
  }
  const uint64_t given = Fingerprint(graph);
  if (AlreadyPartitioned().Contains(given)) {
    VLOG(1) << "NPU graph engine: graph already partitioned, returned unchanged";
    out->assign(static_cast<const char*>(in->data), in->length);
    return absl::OkStatus();
  }
  std::set<std::string> keep;
  absl::Status listed = ReadNames(item, TF_GetNodesToPreserveListSize, TF_GetNodesToPreserveList,
                                  &keep);
  if (listed.ok()) {
    listed = ReadNames(item, TF_GetFetchNodesListSize, TF_GetFetchNodesList, &keep);
  }
  if (!listed.ok()) return listed;
  for (auto& node : *graph.mutable_node()) {
    if (keep.count(node.name())) (*node.mutable_attr())[kPreserveAttr].set_b(true);
  }
  std::string request;
  graph.SerializeToString(&request);
  absl::Status compiled = Compile(NPURT_COMPILE_PARTITION, request, out);
  if (!compiled.ok()) return compiled;
  tensorflow::GraphDef result;
  if (!result.ParseFromString(*out)) {
    return absl::InternalError("the graph engine returned a GraphDef that does not parse");
  }
  absl::Status placed = CheckPlaced(graph, result);
  if (!placed.ok()) return placed;
  // A graph the partitioner left as it was is not remembered: the same graph may partition
  // differently under another configuration.
  const uint64_t partitioned = Fingerprint(result);
  if (partitioned != given) AlreadyPartitioned().Add(partitioned);
  return absl::OkStatus();
}

// One warning per distinct reason: Grappler calls us twice per graph, and a training loop
// retraces the same functions.
void WarnOnce(const std::string& message) {
  static std::mutex mu;
  static auto* seen = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (seen->insert(message).second) {
    LOG(WARNING) << "NPU graph engine: could not partition a graph, TensorFlow runs it "
                    "unchanged (NPU-placed ops one by one, the rest on CPU). Reason: "
                 << message;
  }
}

void Optimize(void*, const TF_Buffer* graph, const TF_GrapplerItem* item, TF_Buffer* optimized,
              TF_Status* status) {
  std::string out;
  absl::Status s = Partition(graph, item, &out);
  if (!s.ok()) {
    WarnOnce(std::string(s.message()));
    TF_SetStatus(status, TF_INTERNAL, std::string(s.message()).c_str());
    return;
  }
  void* data = std::malloc(out.size());
  if (data == nullptr && !out.empty()) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no memory for the partitioned graph");
    return;
  }
  std::copy(out.begin(), out.end(), static_cast<char*>(data));
  optimized->data = data;
  optimized->length = out.size();
  optimized->data_deallocator = [](void* d, size_t) { std::free(d); };
  TF_SetStatus(status, TF_OK, "");
}

}  // namespace
}  // namespace npu_tf

extern "C" __attribute__((visibility("default"))) void TF_InitGraph(
    TP_OptimizerRegistrationParams* params, TF_Status* status) {
  params->device_type = "NPU";
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer->optimize_func = npu_tf::Optimize;
  // TF's rewrites that invent ops the graph engine does its own way (fusions, AddN, layout
  // transposes, mixed precision casts) are off for NPU graphs.
  //
  // TF prints a "User's config has been changed based on plugin's config" table for every graph
  // in which the user's config has an optimizer ON that the plugin turns OFF
  // (PluginGraphOptimizerRegistry::IsConfigsConflict). The optimizers below are DEFAULT in a
  // user's config, which does not count as ON, so turning them off prints nothing unless the
  // user switched one on explicitly (then the table is right to say so). memory_optimization is
  // the exception: TF reports it ON by default, so it is not turned off here but in the
  // tf.functions' ConfigProto (npu_device/grappler_defaults.py).
  TP_OptimizerConfigs* configs = params->optimizer_configs;
  configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  configs->remapping = TF_TriState_Off;
  configs->arithmetic_optimization = TF_TriState_Off;
  configs->layout_optimizer = TF_TriState_Off;
  configs->auto_mixed_precision = TF_TriState_Off;
  configs->auto_mixed_precision_onednn_bfloat16 = TF_TriState_Off;
  configs->auto_mixed_precision_mkl = TF_TriState_Off;
  configs->scoped_allocator_optimization = TF_TriState_Off;
  configs->auto_parallel = TF_TriState_Off;
  // Graphs that must be XLA-compiled (tf.function(jit_compile=True)) and are placed on the NPU
  // reach this optimizer too instead of failing for want of an XLA device (jit_compile.cc).
  npu_tf::InstallJitCompileRedirect();
  TF_SetStatus(status, TF_OK, "");
}
