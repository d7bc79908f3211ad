#include "sim/errors.h"

#include <cstdarg>
#include <cstdio>

namespace npurt_sim {
namespace {
thread_local std::string last_error;
}  // namespace

npurtError Fail(npurtError err, std::string message) {
  last_error = std::move(message);
  return err;
}

std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return buf;
}

}  // namespace npurt_sim

extern "C" {

const char* npurtGetLastErrorMessage(void) { return npurt_sim::last_error.c_str(); }

const char* npurtErrorName(npurtError err) {
  switch (err) {
    case NPURT_SUCCESS: return "NPURT_SUCCESS";
    case NPURT_ERROR_INVALID_PARAM: return "NPURT_ERROR_INVALID_PARAM";
    case NPURT_ERROR_INVALID_DEVICE: return "NPURT_ERROR_INVALID_DEVICE";
    case NPURT_ERROR_OUT_OF_MEMORY: return "NPURT_ERROR_OUT_OF_MEMORY";
    case NPURT_ERROR_NOT_INITIALIZED: return "NPURT_ERROR_NOT_INITIALIZED";
    case NPURT_ERROR_ALREADY_INITIALIZED: return "NPURT_ERROR_ALREADY_INITIALIZED";
    case NPURT_ERROR_BAD_ADDRESS: return "NPURT_ERROR_BAD_ADDRESS";
    case NPURT_ERROR_INTERNAL: return "NPURT_ERROR_INTERNAL";
    case NPURT_NOT_READY: return "NPURT_NOT_READY";
  }
  return "NPURT_UNKNOWN_ERROR";
}

}  // extern "C"
