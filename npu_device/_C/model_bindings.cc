// Python access to compiled models: load one onto a device, describe it, run it on numpy
// arrays, and read the executor's counters.
//
//   m = _C.load_model(data, device_id=0)
//   m.inputs[0].dtype, m.inputs[0].shape, m.kernel_names, m.metadata, m.arena_bytes
//   outputs = m.run([x, ...])      # numpy arrays in, numpy arrays out
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"
#include "npurt/model.h"
#include "npurt/npurt.h"

namespace py = pybind11;

namespace {

// TF DataType enum -> numpy dtype name (bfloat16 comes from ml_dtypes) and element size.
struct DTypeInfo {
  int dtype;
  const char* name;
  int size;
};
constexpr DTypeInfo kDTypes[] = {
    {1, "float32", 4}, {2, "float64", 8}, {3, "int32", 4}, {4, "uint8", 1},     {5, "int16", 2},
    {6, "int8", 1},    {9, "int64", 8},   {10, "bool", 1}, {14, "bfloat16", 2}, {19, "float16", 2},
};

const DTypeInfo* Find(int dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

const char* NumpyName(int dtype) {
  const DTypeInfo* d = Find(dtype);
  return d ? d->name : nullptr;
}

py::dtype NumpyDType(int dtype) {
  const char* name = NumpyName(dtype);
  if (name == nullptr) throw py::value_error("DataType " + std::to_string(dtype) + " has no numpy dtype");
  if (dtype == 14) return py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
  return py::dtype(name);
}

std::string ShapeRepr(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::string DescRepr(const npu::TensorDesc& d) {
  const char* name = NumpyName(d.dtype);
  return std::string(name ? name : ("DataType(" + std::to_string(d.dtype) + ")").c_str()) + ShapeRepr(d.dims);
}

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

[[noreturn]] void ThrowRuntime(const char* call, npurtError err) {
  const char* msg = npurtGetLastErrorMessage();
  throw std::runtime_error(std::string(call) + " failed: " + npurtErrorName(err) +
                           (msg && *msg ? std::string(" (") + msg + ")" : ""));
}

// Device buffers of one run(), freed on every path.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(int32_t device) : device_(device) {}
  ~DeviceBuffers() {
    for (void* p : ptrs_) npurtFree(device_, p);
  }
  void* Alloc(uint64_t size) {
    if (size == 0) return nullptr;
    void* p = nullptr;
    if (npurtError err = npurtMalloc(device_, &p, size); err != NPURT_SUCCESS) ThrowRuntime("npurtMalloc", err);
    ptrs_.push_back(p);
    return p;
  }

 private:
  int32_t device_;
  std::vector<void*> ptrs_;
};

class PyModel {
 public:
  PyModel(std::shared_ptr<npu::CompiledModel> model, int32_t device) : model_(std::move(model)), device_(device) {}
  ~PyModel() {
    for (npurtStream s : streams_) npurtStreamDestroy(s);
  }

  const npu::CompiledModel& model() const { return *model_; }

  // `over`: {output: input} outputs written into their input's buffer, as the TF plugin passes a
  // variable updated in place (or TF forwards an input to an output).
  py::list Run(const py::sequence& args, const std::map<size_t, size_t>& over) {
    const auto& ins = model_->inputs();
    const auto& outs = model_->outputs();
    if (args.size() != ins.size())
      throw py::value_error("model '" + model_->name() + "' takes " + std::to_string(ins.size()) +
                            " inputs, got " + std::to_string(args.size()));
    DeviceBuffers buffers(device_);
    std::vector<const void*> in_ptrs;
    for (size_t i = 0; i < ins.size(); ++i) {
      CheckNd(ins[i], "input", i);
      py::array a = py::array::ensure(args[i], py::array::c_style);
      if (!a) throw py::error_already_set();
      std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
      if (!a.dtype().equal(NumpyDType(ins[i].dtype)) || shape != ins[i].dims)
        throw py::value_error("input " + std::to_string(i) + " is " + py::str(a.dtype()).cast<std::string>() +
                              ShapeRepr(shape) + "; the model expects " + DescRepr(ins[i]));
      void* p = buffers.Alloc(a.nbytes());
      if (p != nullptr) {
        if (npurtError err = npurtMemcpy(p, a.data(), a.nbytes(), NPURT_MEMCPY_HOST_TO_DEVICE); err != NPURT_SUCCESS)
          ThrowRuntime("npurtMemcpy", err);
      }
      in_ptrs.push_back(p);
    }
    std::vector<void*> out_ptrs;
    for (size_t i = 0; i < outs.size(); ++i) {
      CheckNd(outs[i], "output", i);
      const auto it = over.find(i);
      if (it == over.end()) {
        out_ptrs.push_back(buffers.Alloc(outs[i].nbytes));
        continue;
      }
      if (it->second >= ins.size() || ins[it->second].nbytes != outs[i].nbytes)
        throw py::value_error("output " + std::to_string(i) + " cannot be written over input " +
                              std::to_string(it->second) + ": it needs an input of " + std::to_string(outs[i].nbytes) + " bytes");
      out_ptrs.push_back(const_cast<void*>(in_ptrs[it->second]));
    }
    npu::Status status;
    {
      py::gil_scoped_release release;
      npurtStream stream = AcquireStream();
      status = model_->Run(stream, in_ptrs, out_ptrs);
      ReleaseStream(stream);
    }
    if (!status.ok()) throw std::runtime_error(status.message);
    py::list results;
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<py::ssize_t> shape(outs[i].dims.begin(), outs[i].dims.end());
      py::array a(NumpyDType(outs[i].dtype), shape);
      if (a.nbytes() > 0) {
        if (npurtError err = npurtMemcpy(a.mutable_data(), out_ptrs[i], a.nbytes(), NPURT_MEMCPY_DEVICE_TO_HOST);
            err != NPURT_SUCCESS)
          ThrowRuntime("npurtMemcpy", err);
      }
      results.append(a);
    }
    return results;
  }

 private:
  // run() moves dense arrays; values in padded NPU layouts would need a TransData first.
  static void CheckNd(const npu::TensorDesc& d, const char* what, size_t i) {
    const DTypeInfo* info = Find(d.dtype);
    if (info == nullptr || d.format > 2 || d.nbytes != static_cast<uint64_t>(NumElements(d.dims)) * info->size)
      throw py::value_error(std::string(what) + " " + std::to_string(i) + " (" + DescRepr(d) + ", format " +
                            std::to_string(d.format) + ", " + std::to_string(d.nbytes) +
                            " bytes) is not a dense ND array; run() supports dense inputs and outputs only");
  }

  // Each concurrent run() gets a stream of its own, reused afterwards.
  npurtStream AcquireStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        npurtStream s = idle_.back();
        idle_.pop_back();
        return s;
      }
    }
    npurtStream s = nullptr;
    if (npurtError err = npurtStreamCreate(device_, &s); err != NPURT_SUCCESS) ThrowRuntime("npurtStreamCreate", err);
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(s);
    return s;
  }
  void ReleaseStream(npurtStream s) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(s);
  }

  std::shared_ptr<npu::CompiledModel> model_;
  int32_t device_;
  std::mutex mu_;
  std::vector<npurtStream> streams_, idle_;
};

py::tuple Shape(const npu::TensorDesc& d) {
  py::tuple t(d.dims.size());
  for (size_t i = 0; i < d.dims.size(); ++i) t[i] = d.dims[i];
  return t;
}

}  // namespace

void RegisterModel(py::module_& m) {
  py::class_<npu::TensorDesc>(m, "TensorDesc", "dtype (TF DataType enum), shape, storage format, nbytes")
      .def_readonly("dtype", &npu::TensorDesc::dtype)
      .def_property_readonly("shape", &Shape)
      .def_readonly("format", &npu::TensorDesc::format)
      .def_readonly("nbytes", &npu::TensorDesc::nbytes)
      .def("__repr__", [](const npu::TensorDesc& d) {
        return "TensorDesc(" + DescRepr(d) + ", format=" + std::to_string(d.format) + ", nbytes=" +
               std::to_string(d.nbytes) + ")";
      });

  py::class_<PyModel>(m, "CompiledModel", "A compiled model loaded onto an NPU device")
      .def_property_readonly("name", [](const PyModel& p) { return p.model().name(); })
      .def_property_readonly("inputs", [](const PyModel& p) { return p.model().inputs(); })
      .def_property_readonly("outputs", [](const PyModel& p) { return p.model().outputs(); })
      .def_property_readonly("kernel_names", [](const PyModel& p) { return p.model().kernel_names(); })
      .def_property_readonly("metadata", [](const PyModel& p) { return p.model().metadata(); })
      .def_property_readonly("arena_bytes", [](const PyModel& p) { return p.model().arena_bytes(); })
      .def_property_readonly("concurrent_groups", [](const PyModel& p) { return p.model().concurrent_groups(); },
                             "Groups of kernel steps runs execute at once (empty until the first runs timed them)")
      .def("run", &PyModel::Run, py::arg("inputs"), py::arg("outputs_over_inputs") = std::map<size_t, size_t>{},
           "Runs the model on numpy arrays (one per input, exact dtype and shape); returns the outputs. "
           "outputs_over_inputs: {output: input} outputs written into that input's buffer");

  m.def(
      "load_model",
      [](py::bytes data, int32_t device_id) {
        std::string_view view = data;
        std::shared_ptr<npu::CompiledModel> model;
        npu::Status st;
        {
          py::gil_scoped_release release;
          st = npu::CompiledModel::Load(view.data(), view.size(), device_id, &model);
        }
        if (!st.ok()) throw py::value_error(st.message);
        return std::make_unique<PyModel>(std::move(model), device_id);
      },
      py::arg("data"), py::arg("device_id") = 0, "Loads a compiled model (.om bytes) onto an NPU device");

  m.def("registered_kernels", &npu::RegisteredKernels, "Kernel names the runtime implements");

  m.def("counters", [] {
    npurtCounters c{};
    npurtGetCounters(&c);
    py::dict d;
    d["models_loaded"] = c.models_loaded;
    d["models_run"] = c.models_run;
    d["kernels_executed"] = c.kernels_executed;
    d["conversions_reused"] = c.conversions_reused;
    d["kernels_run_concurrently"] = c.kernels_run_concurrently;
    d["weights_kept"] = c.weights_kept;
    return d;
  }, "Executor counters: models_loaded, models_run, kernels_executed, conversions_reused, kernels_run_concurrently, weights_kept");
  m.def("reset_counters", &npurtResetCounters, "Sets the executor counters to zero");
}
