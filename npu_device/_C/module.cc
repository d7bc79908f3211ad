#include "bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "npu_device's bridge to the native NPU runtime";
  RegisterRuntime(m);
  RegisterModel(m);
  RegisterCompiler(m);
}
