#include "kernels/kernel.h"

#include <algorithm>

#include "kernels/format.h"
#include <mutex>
#include <unordered_map>

namespace npu {
namespace kernels {
namespace {

const char* TypeName(AttrValue::Type t) {
  static const char* kNames[] = {"int", "float", "bool", "string", "int list", "float list"};
  return kNames[t];
}

Status Lookup(const Attrs& attrs, const std::string& name, const AttrValue** out) {
  auto it = attrs.values.find(name);
  if (it == attrs.values.end()) return Error("missing attribute '", name, "'");
  *out = &it->second;
  return Status::Ok();
}

Status WrongType(const std::string& name, const AttrValue& v, const char* want) {
  return Error("attribute '", name, "' is a ", TypeName(v.type), "; expected ", want);
}

// Kernels for ND values (RegisterKernel) and for values in padded NPU formats
// (RegisterFormatKernel) share a name; FindKernel returns a dispatcher that picks one by the
// node's formats, so the executor needs to know nothing about formats.
struct Registry {
  std::mutex mu;
  std::unordered_map<std::string, KernelFactory> nd, formatted, dispatch;
};
Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

const KernelFactory* Find(const std::unordered_map<std::string, KernelFactory>& table,
                          const std::string& name) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;   // entries are never removed
}

// Called with r.mu held.
void EnsureDispatcher(Registry& r, const std::string& name) {
  if (r.dispatch.count(name)) return;
  r.dispatch[name] = [name](const KernelDef& def, std::unique_ptr<Kernel>* out) -> Status {
    Registry& reg = GetRegistry();
    if (HasPaddedFormat(def)) {
      const KernelFactory* f = Find(reg.formatted, name);
      if (f == nullptr) return CheckNdLayouts(def);   // the error naming the format
      return (*f)(def, out);
    }
    const KernelFactory* f = Find(reg.nd, name);
    if (f == nullptr)
      return Error("has no kernel for ND values; it reads or writes NC1HWC0/FRACTAL_Z/FILTER_KN only");
    return (*f)(def, out);
  };
}

}  // namespace

Status Attrs::Int(const std::string& name, int64_t* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type != AttrValue::kInt) return WrongType(name, *v, "an int");
  *out = v->i;
  return Status::Ok();
}

Status Attrs::Float(const std::string& name, double* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type == AttrValue::kInt) *out = static_cast<double>(v->i);
  else if (v->type == AttrValue::kFloat) *out = v->f;
  else return WrongType(name, *v, "a float");
  return Status::Ok();
}

Status Attrs::Bool(const std::string& name, bool* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type != AttrValue::kBool) return WrongType(name, *v, "a bool");
  *out = v->b;
  return Status::Ok();
}

Status Attrs::String(const std::string& name, std::string* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type != AttrValue::kString) return WrongType(name, *v, "a string");
  *out = v->s;
  return Status::Ok();
}

Status Attrs::IntList(const std::string& name, std::vector<int64_t>* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type == AttrValue::kIntList) *out = v->ints;
  else if (v->type == AttrValue::kFloatList && v->floats.empty()) out->clear();
  else return WrongType(name, *v, "an int list");
  return Status::Ok();
}

Status Attrs::Scalar(const std::string& name, int64_t* out) const {
  const AttrValue* v = nullptr;
  NPU_RETURN_IF_ERROR(Lookup(*this, name, &v));
  if (v->type == AttrValue::kInt) *out = v->i;
  else if (v->type == AttrValue::kIntList && v->ints.size() == 1) *out = v->ints[0];
  else return WrongType(name, *v, "an int or a one-element int list");
  return Status::Ok();
}

Status Attrs::Int(const std::string& name, int64_t dflt, int64_t* out) const {
  if (!Has(name)) { *out = dflt; return Status::Ok(); }
  return Int(name, out);
}
Status Attrs::Bool(const std::string& name, bool dflt, bool* out) const {
  if (!Has(name)) { *out = dflt; return Status::Ok(); }
  return Bool(name, out);
}
Status Attrs::Float(const std::string& name, double dflt, double* out) const {
  if (!Has(name)) { *out = dflt; return Status::Ok(); }
  return Float(name, out);
}
Status Attrs::String(const std::string& name, const std::string& dflt, std::string* out) const {
  if (!Has(name)) { *out = dflt; return Status::Ok(); }
  return String(name, out);
}
Status Attrs::IntList(const std::string& name, const std::vector<int64_t>& dflt,
                      std::vector<int64_t>* out) const {
  if (!Has(name)) { *out = dflt; return Status::Ok(); }
  return IntList(name, out);
}

void RegisterKernel(const std::string& name, KernelFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.nd[name] = std::move(factory);
  EnsureDispatcher(r, name);
}

void RegisterFormatKernel(const std::string& name, KernelFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.formatted[name] = std::move(factory);
  EnsureDispatcher(r, name);
}

const KernelFactory* FindKernel(const std::string& name) { return Find(GetRegistry().dispatch, name); }
const KernelFactory* FindNdKernel(const std::string& name) { return Find(GetRegistry().nd, name); }

std::vector<std::string> RegisteredKernels() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& kv : r.dispatch) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return names;
}

Status CheckArity(const KernelDef& def, int n_in, int n_out) {
  if (n_in >= 0 && static_cast<int>(def.inputs.size()) != n_in)
    return Error("expects ", n_in, " inputs, got ", def.inputs.size());
  if (n_out >= 0 && static_cast<int>(def.outputs.size()) != n_out)
    return Error("expects ", n_out, " outputs, got ", def.outputs.size());
  return Status::Ok();
}

Status CheckNdLayouts(const KernelDef& def) {
  // Formats 0-2 (ND, NCHW, NHWC) only name the logical layout; 3-5 are padded NPU layouts
  // that only kernels registered with RegisterFormatKernel read or write (they check the
  // formats themselves).
  if (HasPaddedFormat(def) && Find(GetRegistry().formatted, def.kernel) != nullptr)
    return Status::Ok();
  auto check = [](const std::vector<TensorDesc>& descs, const char* what) -> Status {
    for (size_t i = 0; i < descs.size(); ++i)
      if (descs[i].format > 2)
        return Error(what, " ", i, " has storage format ", descs[i].format,
                     "; this kernel reads and writes ND/NCHW/NHWC storage only");
    return Status::Ok();
  };
  NPU_RETURN_IF_ERROR(check(def.inputs, "input"));
  return check(def.outputs, "output");
}

}  // namespace kernels
}  // namespace npu
