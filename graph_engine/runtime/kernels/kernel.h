// The interface between the executor and the simulated-NPU kernels.
//
// A kernel is instantiated once per model node at load time, from the node's input/output
// descriptions and attributes (docs/compiled_model_format.md, "Kernel contract"). Shapes are
// static, so a factory validates everything and precomputes its plan; Compute only reads
// and writes memory and may run concurrently for different runs of the same model.
#ifndef NPU_KERNELS_KERNEL_H_
#define NPU_KERNELS_KERNEL_H_

#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "npurt/model.h"

namespace npu {

#define NPU_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::npu::Status _npu_status = (expr);    \
    if (!_npu_status.ok()) return _npu_status; \
  } while (0)

namespace kernels {

// One attribute of a kernel, as the compiled model stores it.
struct AttrValue {
  enum Type { kInt = 0, kFloat = 1, kBool = 2, kString = 3, kIntList = 4, kFloatList = 5 };
  Type type = kInt;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

class Attrs {
 public:
  std::map<std::string, AttrValue> values;

  bool Has(const std::string& name) const { return values.count(name) != 0; }
  // Required attributes: a missing one or one of the wrong type is an error naming it.
  Status Int(const std::string& name, int64_t* out) const;
  Status Float(const std::string& name, double* out) const;   // an int attribute converts
  Status Bool(const std::string& name, bool* out) const;
  Status String(const std::string& name, std::string* out) const;
  Status IntList(const std::string& name, std::vector<int64_t>* out) const;
  // An int list of exactly one element, or a plain int (a folded scalar constant input).
  Status Scalar(const std::string& name, int64_t* out) const;
  // Optional attributes: the default when absent, an error when present with the wrong type.
  Status Int(const std::string& name, int64_t dflt, int64_t* out) const;
  Status Bool(const std::string& name, bool dflt, bool* out) const;
  Status Float(const std::string& name, double dflt, double* out) const;
  Status String(const std::string& name, const std::string& dflt, std::string* out) const;
  Status IntList(const std::string& name, const std::vector<int64_t>& dflt,
                 std::vector<int64_t>* out) const;
};

// What a factory sees of a model node.
struct KernelDef {
  std::string kernel;   // the op type, e.g. "Conv2D"
  std::string node;     // the originating graph node, for messages
  std::vector<TensorDesc> inputs, outputs;
  Attrs attrs;
};

// Device pointers of one execution of a kernel, in the node's input/output order.
struct KernelArgs {
  const void* const* inputs;
  void* const* outputs;
  // Per input, when known: a number that changes whenever its contents may have (model
  // constants and cached values, e.g. converted weights); 0 = unknown, may differ every run.
  // A kernel may keep what it derives from such an input (a repacked filter) while it holds.
  const uint64_t* versions = nullptr;
  template <class T = void> const T* in(int i) const { return static_cast<const T*>(inputs[i]); }
  template <class T = void> T* out(int i) const { return static_cast<T*>(outputs[i]); }
  uint64_t version(int i) const { return versions ? versions[i] : 0; }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Runs one execution; must not modify the kernel (it may run on several threads at once).
  virtual Status Compute(const KernelArgs& args) const = 0;
  // True when Compute rejects bad input values (an index out of range) even for an empty
  // result: the executor runs it then instead of skipping it (its outputs may be null).
  virtual bool ChecksValues() const { return false; }
  // True when Compute keeps what it derives from input `i` while the input's version holds
  // (KernelArgs::versions): the executor then versions a graph input read there.
  virtual bool KeepsFromInput(int /*i*/) const { return false; }
};

using KernelFactory = std::function<Status(const KernelDef&, std::unique_ptr<Kernel>*)>;

// The registry maps kernel names (TF op types, GE kernel names) to factories.
void RegisterKernel(const std::string& name, KernelFactory factory);
const KernelFactory* FindKernel(const std::string& name);   // nullptr when unknown
std::vector<std::string> RegisteredKernels();                // sorted

// Registers at library load: NPU_REGISTER_KERNEL("Relu", factory);
struct KernelRegistrar {
  KernelRegistrar(const char* name, KernelFactory factory) {
    RegisterKernel(name, std::move(factory));
  }
};
#define NPU_KERNEL_CONCAT_(a, b) a##b
#define NPU_KERNEL_CONCAT(a, b) NPU_KERNEL_CONCAT_(a, b)
#define NPU_REGISTER_KERNEL(name, factory)                                        \
  static ::npu::kernels::KernelRegistrar NPU_KERNEL_CONCAT(npu_kernel_registrar_, \
                                                           __COUNTER__)(name, factory)

// Runs `fn` at library load; for files that register a table of kernels.
struct StaticInit {
  explicit StaticInit(void (*fn)()) { fn(); }
};

// Builds a message from streamable parts: Error("input ", 1, " has shape ", ShapeString(d)).
template <class... Parts>
Status Error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return Status::Error(os.str());
}

// An error in the data a kernel was given (an index out of range ...): TF's InvalidArgumentError.
template <class... Parts>
Status InvalidArgument(const Parts&... parts) {
  Status s = Error(parts...);
  s.code = kCodeInvalidArgument;
  return s;
}

// An index outside what it indexes where TF's kernel says so with OutOfRangeError.
template <class... Parts>
Status OutOfRange(const Parts&... parts) {
  Status s = Error(parts...);
  s.code = kCodeOutOfRange;
  return s;
}

// Checks of a node's arity and types shared by all factories.
Status CheckArity(const KernelDef& def, int n_in, int n_out);   // -1: any number
Status CheckNdLayouts(const KernelDef& def);   // storage must be the logical (row-major) layout

}  // namespace kernels
}  // namespace npu

#endif  // NPU_KERNELS_KERNEL_H_
