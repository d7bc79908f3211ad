// Python bindings of the device API (npurt/npurt.h): configuration, devices and memory
// statistics for npu_device.runtime, plus thin wrappers of memory, streams and events through
// which tests drive the runtime directly. Device pointers cross as Python ints; the runtime
// checks every device range, so a wrong pointer raises instead of crashing.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "bindings.h"
#include "npurt/npurt.h"

namespace py = pybind11;

namespace {

// Raises a failed call's runtime message: MemoryError for out-of-memory, ValueError for bad
// arguments (device ids, pointers, sizes), RuntimeError otherwise.
void Check(npurtError err) {
  if (err == NPURT_SUCCESS) return;
  std::string message = npurtGetLastErrorMessage();
  if (message.empty()) message = npurtErrorName(err);
  switch (err) {
    case NPURT_ERROR_OUT_OF_MEMORY:
      PyErr_SetString(PyExc_MemoryError, message.c_str());
      throw py::error_already_set();
    case NPURT_ERROR_INVALID_PARAM:
    case NPURT_ERROR_INVALID_DEVICE:
    case NPURT_ERROR_BAD_ADDRESS:
      throw py::value_error(message);
    default:
      throw std::runtime_error(message);
  }
}

// Python ints are unbounded: refuse what the C types cannot hold instead of wrapping around.
uint64_t ToUnsigned(const char* name, long long value, uint64_t max) {
  if (value < 0 || static_cast<unsigned long long>(value) > max) {
    throw py::value_error(std::string(name) + "=" + std::to_string(value) +
                          " is out of range: expected 0 to " + std::to_string(max));
  }
  return static_cast<uint64_t>(value);
}

void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

// A C-contiguous view of a Python buffer (bytes, bytearray, numpy array).
std::shared_ptr<py::buffer_info> View(const py::buffer& buffer, bool writable) {
  auto info = std::make_shared<py::buffer_info>(buffer.request(writable));
  if (PyBuffer_IsContiguous(info->view(), 'C') == 0) {
    throw py::value_error("the host buffer must be C-contiguous");
  }
  return info;
}

uint64_t Bytes(const py::buffer_info& info) {
  return static_cast<uint64_t>(info.size) * static_cast<uint64_t>(info.itemsize);
}

py::dict Config() {
  npurtConfig c;
  Check(npurtGetConfig(&c));
  py::dict d;
  d["device_count"] = c.device_count;
  d["hbm_bytes"] = c.hbm_bytes;
  return d;
}

py::dict DeviceInfo(int device) {
  npurtDeviceInfo info;
  Check(npurtGetDeviceInfo(device, &info));
  py::dict d;
  d["name"] = info.name;
  d["backend"] = info.backend;
  d["soc_version"] = info.soc_version;
  d["hbm_bytes"] = info.hbm_bytes;
  d["core_count"] = info.core_count;
  return d;
}

py::dict MemoryStats(int device) {
  npurtMemStats s;
  Check(npurtGetMemStats(device, &s));
  py::dict d;
  d["in_use"] = s.in_use;
  d["peak"] = s.peak;
  d["limit"] = s.limit;
  d["num_allocs"] = s.num_allocs;
  d["total_allocs"] = s.total_allocs;
  d["cached_bytes"] = s.cached_bytes;
  d["variable_bytes"] = s.variable_bytes;
  d["variable_limit"] = npurtGetVariableMemoryLimit();
  return d;
}

// Runs a Python callable as a stream's host function; an exception becomes the stream's error.
npurtError CallPython(void* user_data, char* message, size_t message_size) {
  py::gil_scoped_acquire gil;
  std::unique_ptr<py::object> fn(static_cast<py::object*>(user_data));
  try {
    (*fn)();
  } catch (py::error_already_set& e) {
    std::string reason = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
                         py::str(e.value()).cast<std::string>();
    snprintf(message, message_size, "host function raised %s", reason.c_str());
    return NPURT_ERROR_INTERNAL;
  }
  return NPURT_SUCCESS;
}

// A stream plus the host buffers its queued copies read or write: they stay referenced until
// the stream has been synchronized, so Python cannot free memory a copy still uses.
class Stream {
 public:
  explicit Stream(int device) : device_(device) { Check(npurtStreamCreate(device, &stream_)); }
  ~Stream() {
    py::gil_scoped_release release;  // draining may run Python host functions
    npurtStreamDestroy(stream_);
  }

  int device() const { return device_; }
  npurtStream handle() const { return stream_; }

  void Synchronize() {
    npurtError err;
    {
      py::gil_scoped_release release;
      err = npurtStreamSynchronize(stream_);
    }
    pinned_.clear();
    Check(err);
  }
  bool Query() {
    npurtError err = npurtStreamQuery(stream_);
    if (err == NPURT_NOT_READY) return false;
    Check(err);
    return true;
  }
  void CopyToDevice(uintptr_t dst, const py::buffer& src) {
    auto view = View(src, false);
    Check(npurtMemcpyAsync(Ptr(dst), view->ptr, Bytes(*view), NPURT_MEMCPY_HOST_TO_DEVICE, stream_));
    pinned_.push_back(std::move(view));
  }
  void CopyToHost(const py::buffer& dst, uintptr_t src) {
    auto view = View(dst, true);
    Check(npurtMemcpyAsync(view->ptr, Ptr(src), Bytes(*view), NPURT_MEMCPY_DEVICE_TO_HOST, stream_));
    pinned_.push_back(std::move(view));
  }
  void CopyOnDevice(uintptr_t dst, uintptr_t src, long long size) {
    Check(npurtMemcpyAsync(Ptr(dst), Ptr(src), ToUnsigned("size", size, UINT64_MAX),
                           NPURT_MEMCPY_DEVICE_TO_DEVICE, stream_));
  }
  void Memset(uintptr_t dst, int value, long long size) {
    Check(npurtMemsetAsync(Ptr(dst), value, ToUnsigned("size", size, UINT64_MAX), stream_));
  }
  void Memset32(uintptr_t dst, long long value, long long count) {
    Check(npurtMemsetD32Async(Ptr(dst), static_cast<uint32_t>(ToUnsigned("value", value, UINT32_MAX)),
                              ToUnsigned("count", count, UINT64_MAX), stream_));
  }
  void LaunchHostFunc(py::function fn) {
    auto* owned = new py::object(std::move(fn));
    npurtError err = npurtLaunchHostStatusFunc(stream_, &CallPython, owned);
    if (err != NPURT_SUCCESS) delete owned;
    Check(err);
  }
  // npurtRunHostFunc: fn() after the queued work; returns once it ran (on this thread when the
  // stream was idle). Its exception is raised here, not kept as the stream's error.
  void RunHostFunc(py::function fn) {
    struct Call {
      py::object fn;
      std::string error;
    } call{std::move(fn), {}};
    npurtError err;
    {
      py::gil_scoped_release release;
      err = npurtRunHostFunc(stream_, [](void* p) {
        auto* c = static_cast<Call*>(p);
        py::gil_scoped_acquire gil;
        try {
          c->fn();
        } catch (py::error_already_set& e) {
          c->error = py::str(e.value()).cast<std::string>();
        }
      }, &call);
    }
    Check(err);
    if (!call.error.empty()) throw std::runtime_error("host function raised: " + call.error);
  }

 private:
  int device_;
  npurtStream stream_ = nullptr;
  std::vector<std::shared_ptr<py::buffer_info>> pinned_;
};

class Event {
 public:
  Event() { Check(npurtEventCreate(&event_)); }
  ~Event() { npurtEventDestroy(event_); }
  void Record(const Stream& stream) { Check(npurtEventRecord(event_, stream.handle())); }
  bool Query() const {
    int done = 0;
    Check(npurtEventQuery(event_, &done));
    return done != 0;
  }
  void Synchronize() const {
    py::gil_scoped_release release;
    Check(npurtEventSynchronize(event_));
  }
  npurtEvent handle() const { return event_; }

 private:
  npurtEvent event_ = nullptr;
};

}  // namespace

void RegisterRuntime(py::module_& m) {
  m.def("configure",
        [](long long device_count, long long hbm_bytes) {
          npurtConfig c{static_cast<uint32_t>(ToUnsigned("device_count", device_count, UINT32_MAX)),
                        ToUnsigned("hbm_bytes", hbm_bytes, UINT64_MAX)};
          npurtError err = npurtConfigure(&c);
          if (err == NPURT_ERROR_ALREADY_INITIALIZED) throw std::runtime_error(npurtGetLastErrorMessage());
          Check(err);
        },
        py::arg("device_count"), py::arg("hbm_bytes"),
        "Sets the device count and per-device memory before the runtime initializes.");
  m.def("is_initialized", [] { return npurtIsInitialized() != 0; });
  m.def("get_config", &Config, "The configuration in effect, or that will be at initialization.");
  m.def("device_count", [] {
    uint32_t n = 0;
    Check(npurtGetDeviceCount(&n));
    return n;
  });
  m.def("device_info", &DeviceInfo, py::arg("device_id"));
  m.def("memory_stats", &MemoryStats, py::arg("device_id"));
  m.def("reset_peak_memory", [](int device) { Check(npurtResetPeakMemory(device)); },
        py::arg("device_id"));
  m.def("set_variable_memory_limit",
        [](long long bytes) { npurtSetVariableMemoryLimit(ToUnsigned("bytes", bytes, UINT64_MAX)); },
        py::arg("bytes"),
        "Largest device memory the variables of each device may hold (0: no limit).");
  m.def("synchronize_device", [](int device) {
    py::gil_scoped_release release;
    Check(npurtSynchronizeDevice(device));
  }, py::arg("device_id"));
  m.def("plugin_registered", [] { return npurtPluginRegistered() != 0; },
        "Whether the TensorFlow plugin registered the NPU platform in this process.");

  // Memory. Frees are stream-ordered: queued copies may still use a block freed after them.
  m.def("malloc", [](int device, long long size) {
    void* p = nullptr;
    Check(npurtMalloc(device, &p, ToUnsigned("size", size, UINT64_MAX)));
    return reinterpret_cast<uintptr_t>(p);
  }, py::arg("device_id"), py::arg("size"));
  m.def("free", [](int device, uintptr_t ptr) { Check(npurtFree(device, Ptr(ptr))); },
        py::arg("device_id"), py::arg("ptr"));
  m.def("memcpy_htod", [](uintptr_t dst, const py::buffer& src) {
    auto view = View(src, false);
    Check(npurtMemcpy(Ptr(dst), view->ptr, Bytes(*view), NPURT_MEMCPY_HOST_TO_DEVICE));
  }, py::arg("dst"), py::arg("src"));
  m.def("memcpy_dtoh", [](const py::buffer& dst, uintptr_t src) {
    auto view = View(dst, true);
    Check(npurtMemcpy(view->ptr, Ptr(src), Bytes(*view), NPURT_MEMCPY_DEVICE_TO_HOST));
  }, py::arg("dst"), py::arg("src"));
  m.def("memcpy_dtod", [](uintptr_t dst, uintptr_t src, long long size) {
    Check(npurtMemcpy(Ptr(dst), Ptr(src), ToUnsigned("size", size, UINT64_MAX),
                      NPURT_MEMCPY_DEVICE_TO_DEVICE));
  }, py::arg("dst"), py::arg("src"), py::arg("size"));
  m.def("memset", [](uintptr_t dst, int value, long long size) {
    Check(npurtMemset(Ptr(dst), value, ToUnsigned("size", size, UINT64_MAX)));
  }, py::arg("dst"), py::arg("value"), py::arg("size"));

  py::class_<Stream>(m, "Stream", "An in-order NPU work queue (npurtStream).")
      .def(py::init<int>(), py::arg("device_id") = 0)
      .def_property_readonly("device", &Stream::device)
      .def("synchronize", &Stream::Synchronize, "Waits for queued work; raises its first error.")
      .def("query", &Stream::Query, "True when idle; raises the stream's error if it has one.")
      .def("memcpy_htod_async", &Stream::CopyToDevice, py::arg("dst"), py::arg("src"))
      .def("memcpy_dtoh_async", &Stream::CopyToHost, py::arg("dst"), py::arg("src"))
      .def("memcpy_dtod_async", &Stream::CopyOnDevice, py::arg("dst"), py::arg("src"), py::arg("size"))
      .def("memset_async", &Stream::Memset, py::arg("dst"), py::arg("value"), py::arg("size"))
      .def("memset32_async", &Stream::Memset32, py::arg("dst"), py::arg("value"), py::arg("count"))
      .def("launch_host_func", &Stream::LaunchHostFunc, py::arg("fn"),
           "Runs fn() on the stream's thread, in order; an exception becomes the stream's error.")
      .def("run_host_func", &Stream::RunHostFunc, py::arg("fn"),
           "Runs fn() after the queued work and waits for it (on the calling thread when the "
           "stream is idle); returns the stream's sticky error like synchronize().")
      .def("wait_event", [](Stream& s, const Event& e) {
        Check(npurtStreamWaitEvent(s.handle(), e.handle()));
      }, py::arg("event"), "Later work on this stream waits until the event's last record ran.");

  py::class_<Event>(m, "Event", "A marker recorded on a stream (npurtEvent).")
      .def(py::init<>())
      .def("record", &Event::Record, py::arg("stream"))
      .def("query", &Event::Query, "True when the last record has run (or it was never recorded).")
      .def("synchronize", &Event::Synchronize);
}
