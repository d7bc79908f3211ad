// Error reporting of the sim backend: a failing call records a per-thread message that
// npurtGetLastErrorMessage returns, so callers see e.g. the requested and free bytes of an OOM.
#ifndef NPURT_SIM_ERRORS_H_
#define NPURT_SIM_ERRORS_H_

#include <string>

#include "npurt/npurt.h"

namespace npurt_sim {

// Records `message` as this thread's last error and returns `err`: `return Fail(...)`.
npurtError Fail(npurtError err, std::string message);

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace npurt_sim

#endif  // NPURT_SIM_ERRORS_H_
