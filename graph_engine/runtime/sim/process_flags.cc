// Process-wide registrations shared by every user of libnpu_runtime (TF plugin, Python bridge):
// one copy of this library per process keeps them consistent even when the plugin is loaded
// from two paths.
#include <atomic>

#include "npurt/compiler_hook.h"
#include "npurt/npurt.h"

namespace {
std::atomic<npurtCompileFn> compiler{nullptr};
std::atomic<int> plugin_registered{0};
}  // namespace

extern "C" {

void npurtSetCompiler(npurtCompileFn fn) { compiler.store(fn); }
npurtCompileFn npurtGetCompiler(void) { return compiler.load(); }

int npurtMarkPluginRegistered(void) { return plugin_registered.exchange(1); }
int npurtPluginRegistered(void) { return plugin_registered.load(); }

}  // extern "C"
