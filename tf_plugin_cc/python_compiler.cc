#include "python_compiler.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace npu_tf {
namespace {

// The Python C API, looked up at run time: the plugin must stay loadable by processes without
// Python (C++ serving), so it cannot link libpython.
struct PythonApi {
  using PyObj = void*;
  int (*is_initialized)();
  int (*is_finalizing)();
  int (*gil_ensure)();
  void (*gil_release)(int);
  PyObj (*import_module)(const char*);
  void (*dec_ref)(PyObj);
  void (*err_fetch)(PyObj*, PyObj*, PyObj*);
  PyObj (*object_str)(PyObj);
  const char* (*unicode_as_utf8)(PyObj);

  static const PythonApi* Get() {
    static const PythonApi api = [] {
      PythonApi a{};
      auto sym = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
      a.is_initialized = reinterpret_cast<int (*)()>(sym("Py_IsInitialized"));
      a.is_finalizing = reinterpret_cast<int (*)()>(sym("Py_IsFinalizing"));
      if (!a.is_finalizing) a.is_finalizing = reinterpret_cast<int (*)()>(sym("_Py_IsFinalizing"));
      a.gil_ensure = reinterpret_cast<int (*)()>(sym("PyGILState_Ensure"));
      a.gil_release = reinterpret_cast<void (*)(int)>(sym("PyGILState_Release"));
      a.import_module = reinterpret_cast<PyObj (*)(const char*)>(sym("PyImport_ImportModule"));
      a.dec_ref = reinterpret_cast<void (*)(PyObj)>(sym("Py_DecRef"));
      a.err_fetch = reinterpret_cast<void (*)(PyObj*, PyObj*, PyObj*)>(sym("PyErr_Fetch"));
      a.object_str = reinterpret_cast<PyObj (*)(PyObj)>(sym("PyObject_Str"));
      a.unicode_as_utf8 = reinterpret_cast<const char* (*)(PyObj)>(sym("PyUnicode_AsUTF8"));
      return a;
    }();
    bool complete = api.is_initialized && api.gil_ensure && api.gil_release &&
                    api.import_module && api.dec_ref && api.err_fetch && api.object_str &&
                    api.unicode_as_utf8;
    return complete ? &api : nullptr;
  }
};

// Imports the module that registers the compiler hook. No lock of ours is held around the GIL:
// a Python thread that holds the GIL may be waiting on this very kernel or optimizer.
absl::Status ImportCompilerModule() {
  static constexpr char kModule[] = "npu_device.compiler_bridge";
  const PythonApi* py = PythonApi::Get();
  if (py == nullptr || !py->is_initialized()) {
    return absl::FailedPreconditionError(
        "the NPU graph compiler is written in Python, and this process has no Python "
        "interpreter: run the program from Python (import npu_device) or use a model "
        "compiled ahead of time");
  }
  if (py->is_finalizing && py->is_finalizing()) {
    return absl::UnavailableError("the Python interpreter is shutting down; cannot compile");
  }
  int gil = py->gil_ensure();
  absl::Status result;
  if (void* module = py->import_module(kModule)) {
    py->dec_ref(module);
  } else {
    void *type = nullptr, *value = nullptr, *trace = nullptr;
    py->err_fetch(&type, &value, &trace);
    std::string why = "unknown error";
    if (value != nullptr) {
      if (void* text = py->object_str(value)) {
        if (const char* utf8 = py->unicode_as_utf8(text)) why = utf8;
        py->dec_ref(text);
      }
    }
    for (void* o : {type, value, trace}) {
      if (o != nullptr) py->dec_ref(o);
    }
    result = absl::FailedPreconditionError(
        absl::StrCat("importing ", kModule, " (which connects the NPU graph compiler) failed: ",
                     why));
  }
  py->gil_release(gil);
  return result;
}

}  // namespace

absl::Status Compile(npurtCompileKind kind, const std::string& request, std::string* response) {
  npurtCompileFn compile = npurtGetCompiler();
  if (compile == nullptr) {
    absl::Status imported = ImportCompilerModule();
    if (!imported.ok()) return imported;
    compile = npurtGetCompiler();
    if (compile == nullptr) {
      return absl::InternalError(
          "npu_device.compiler_bridge was imported but registered no NPU graph compiler");
    }
  }
  char* out = nullptr;
  size_t out_len = 0;
  int rc = compile(kind, request.data(), request.size(), &out, &out_len);
  if (rc != 0) {
    std::string message = out != nullptr ? std::string(out) : "no message";
    std::free(out);
    bool is_code = rc > 0 && rc <= static_cast<int>(absl::StatusCode::kUnauthenticated);
    return absl::Status(is_code ? static_cast<absl::StatusCode>(rc) : absl::StatusCode::kInternal,
                        message);
  }
  response->assign(out != nullptr ? out : "", out_len);
  std::free(out);
  return absl::OkStatus();
}

}  // namespace npu_tf
