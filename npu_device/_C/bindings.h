// Each area of the Python bridge registers its functions on the one `npu_device._C` module.
#pragma once
#include <pybind11/pybind11.h>

void RegisterRuntime(pybind11::module_& m);   // runtime_bindings.cc: devices, memory, config
void RegisterModel(pybind11::module_& m);     // model_bindings.cc: load and run compiled models
void RegisterCompiler(pybind11::module_& m);  // compiler_bindings.cc: the GE compiler hook
