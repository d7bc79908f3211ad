// npurt: the device API the graph-engine runtime and the TF plugin program against.
//
// Modelled on Ascend's ACL runtime (aclInit / aclrtSetDevice / aclrtMalloc / aclrtMemcpy /
// streams / events) so a CANN backend can implement the same calls later. The default backend
// ("sim") is a software NPU: device memory is a host pool with a fixed capacity, streams are
// in-order worker threads. Plain C so it can be loaded by any process (no TF, no Python).
#ifndef NPURT_NPURT_H_
#define NPURT_NPURT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPURT_API __attribute__((visibility("default")))

typedef enum {
  NPURT_SUCCESS = 0,
  NPURT_ERROR_INVALID_PARAM = 1,
  NPURT_ERROR_INVALID_DEVICE = 2,
  NPURT_ERROR_OUT_OF_MEMORY = 3,
  NPURT_ERROR_NOT_INITIALIZED = 4,
  NPURT_ERROR_ALREADY_INITIALIZED = 5,
  NPURT_ERROR_BAD_ADDRESS = 6,   // pointer not owned by this device
  NPURT_ERROR_INTERNAL = 7,
  NPURT_NOT_READY = 8,           // npurtStreamQuery: work is still pending (not a failure)
} npurtError;

typedef enum {
  NPURT_MEMCPY_HOST_TO_DEVICE = 0,
  NPURT_MEMCPY_DEVICE_TO_HOST = 1,
  NPURT_MEMCPY_DEVICE_TO_DEVICE = 2,
  NPURT_MEMCPY_HOST_TO_HOST = 3,
} npurtMemcpyKind;

typedef struct npurtStream_st* npurtStream;
typedef struct npurtEvent_st* npurtEvent;
typedef void (*npurtHostFn)(void* user_data);

typedef struct {
  uint32_t device_count;   // 1..NPURT_MAX_DEVICES
  uint64_t hbm_bytes;      // capacity of each device's memory pool
} npurtConfig;

#define NPURT_MAX_DEVICES 8
#define NPURT_DEFAULT_HBM_BYTES (16ull << 30)
#define NPURT_MEMORY_ALIGNMENT 64  // bytes; every allocation is aligned and sized to this

typedef struct {
  uint64_t in_use;        // bytes currently allocated (after alignment rounding)
  uint64_t peak;          // high-water mark of in_use since init or npurtResetPeakMemory
  uint64_t limit;         // pool capacity
  uint64_t num_allocs;    // live allocations
  uint64_t total_allocs;  // allocations ever made
  uint64_t cached_bytes;  // freed host memory kept for reuse (not counted in in_use)
  uint64_t variable_bytes;  // live allocations that hold variables (npurtMarkVariableMemory)
} npurtMemStats;

typedef struct {
  char name[64];          // "NPU:0"
  char backend[16];       // "sim"
  char soc_version[32];   // what the backend emulates
  uint64_t hbm_bytes;
  uint32_t core_count;    // worker threads the backend computes with
} npurtDeviceInfo;

// --- process lifecycle ----------------------------------------------------------------------
// Configure before first use. Returns NPURT_ERROR_ALREADY_INITIALIZED once devices exist.
// Without a call, the runtime initializes lazily from NPU_DEVICE_COUNT / NPU_HBM_SIZE
// (environment) or the defaults (1 device, 16 GiB).
// Devices come into existence on the first call that needs one (memory, streams, device
// synchronization). npurtGetConfig, npurtGetDeviceCount and npurtGetDeviceInfo only report the
// configuration that is or will be in effect, so TensorFlow can list devices while the user can
// still configure them.
NPURT_API npurtError npurtConfigure(const npurtConfig* config);
NPURT_API npurtError npurtInit(void);
NPURT_API int npurtIsInitialized(void);
NPURT_API npurtError npurtGetConfig(npurtConfig* config);
// The last error's message on this thread, e.g. the requested and free bytes of an OOM.
NPURT_API const char* npurtGetLastErrorMessage(void);
NPURT_API const char* npurtErrorName(npurtError err);

// --- devices --------------------------------------------------------------------------------
NPURT_API npurtError npurtGetDeviceCount(uint32_t* count);
NPURT_API npurtError npurtGetDeviceInfo(int32_t device, npurtDeviceInfo* info);
NPURT_API npurtError npurtSetDevice(int32_t device);  // current device of the calling thread
NPURT_API npurtError npurtGetDevice(int32_t* device);
NPURT_API npurtError npurtSynchronizeDevice(int32_t device);  // waits for all its streams

// --- memory ---------------------------------------------------------------------------------
NPURT_API npurtError npurtMalloc(int32_t device, void** ptr, uint64_t size);
NPURT_API npurtError npurtFree(int32_t device, void* ptr);
NPURT_API npurtError npurtGetMemStats(int32_t device, npurtMemStats* stats);
NPURT_API npurtError npurtResetPeakMemory(int32_t device);
NPURT_API npurtError npurtMemcpy(void* dst, const void* src, uint64_t size, npurtMemcpyKind kind);
// Variable memory (option variable_memory_max_size): each time a variable takes a new value,
// the TF plugin marks the allocation holding `ptr` as variable memory in place of the one
// holding `replaced` (the variable's previous value, or null), which the variable lets go. A
// freed allocation leaves the count by itself, and one that several variables hold counts once.
// Fails with NPURT_ERROR_OUT_OF_MEMORY, changing nothing, when the device's variable bytes would
// exceed the limit; `block_bytes` gets the allocation's size either way. The limit (bytes, 0 =
// none) applies to each device from the next mark on.
NPURT_API npurtError npurtMarkVariableMemory(int32_t device, const void* ptr, const void* replaced,
                                             uint64_t* block_bytes);
NPURT_API void npurtSetVariableMemoryLimit(uint64_t bytes);
NPURT_API uint64_t npurtGetVariableMemoryLimit(void);
NPURT_API npurtError npurtMemset(void* dst, int value, uint64_t size);

// --- streams: work runs in submission order on the stream's worker thread (or, for
// npurtRunHostFunc on an idle stream, on the caller) ------------------------------------------
NPURT_API npurtError npurtStreamCreate(int32_t device, npurtStream* stream);
NPURT_API npurtError npurtStreamDestroy(npurtStream stream);  // drains first
NPURT_API npurtError npurtStreamSynchronize(npurtStream stream);
NPURT_API npurtError npurtMemcpyAsync(void* dst, const void* src, uint64_t size,
                                      npurtMemcpyKind kind, npurtStream stream);
NPURT_API npurtError npurtMemsetAsync(void* dst, int value, uint64_t size, npurtStream stream);
NPURT_API npurtError npurtLaunchHostFunc(npurtStream stream, npurtHostFn fn, void* user_data);
// Runs `fn` after the stream's earlier work and returns once it has run, with what
// npurtStreamSynchronize would return: a launch and a synchronize in one call. The sim runs it on
// the calling thread when the stream is idle, which saves two thread hand-offs per call.
NPURT_API npurtError npurtRunHostFunc(npurtStream stream, npurtHostFn fn, void* user_data);
// Status of work done on the stream: the first failure of an enqueued task is sticky and is
// returned by the next npurtStreamSynchronize.
NPURT_API npurtError npurtStreamQuery(npurtStream stream);  // SUCCESS when idle
// A host function that can fail: it returns non-SUCCESS and writes a NUL-terminated reason into
// `message` (capacity `message_size`); that becomes the stream's sticky error. Later work on the
// stream still runs, so completion callbacks queued behind it are never lost.
typedef npurtError (*npurtHostStatusFn)(void* user_data, char* message, size_t message_size);
NPURT_API npurtError npurtLaunchHostStatusFunc(npurtStream stream, npurtHostStatusFn fn,
                                               void* user_data);
// Fills `count` 32-bit words at `dst` with `value`.
NPURT_API npurtError npurtMemsetD32Async(void* dst, uint32_t value, uint64_t count,
                                         npurtStream stream);

// --- events ---------------------------------------------------------------------------------
NPURT_API npurtError npurtEventCreate(npurtEvent* event);
NPURT_API npurtError npurtEventDestroy(npurtEvent event);
NPURT_API npurtError npurtEventRecord(npurtEvent event, npurtStream stream);
NPURT_API npurtError npurtEventQuery(npurtEvent event, int* completed);
NPURT_API npurtError npurtEventSynchronize(npurtEvent event);
NPURT_API npurtError npurtStreamWaitEvent(npurtStream stream, npurtEvent event);

// --- plugin bookkeeping (one process-wide copy, shared by the TF plugin and Python) ----------
// Set by the TF plugin's SE_InitPlugin; lets a second load be refused instead of aborting TF.
NPURT_API int npurtMarkPluginRegistered(void);  // returns 1 if it was already marked
NPURT_API int npurtPluginRegistered(void);

// --- execution counters (what the executor really ran) --------------------------------------
typedef struct {
  uint64_t models_loaded;
  uint64_t models_run;
  uint64_t kernels_executed;
  uint64_t conversions_reused;   // conversions into cached values skipped: already converted
  uint64_t kernels_run_concurrently;   // of kernels_executed, those run beside others of their model
  uint64_t weights_kept;   // kernel reads of an unchanged input weight it keeps its own form of (packed)
} npurtCounters;
NPURT_API void npurtGetCounters(npurtCounters* counters);
NPURT_API void npurtResetCounters(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // NPURT_NPURT_H_
