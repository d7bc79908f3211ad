// The NPU PluggableDevice: TensorFlow's StreamExecutor C API implemented on the npurt device API.
//
// Every callback is a thin translation: TF's streams and events are npurt streams and events,
// device memory is npurtMalloc'ed (no BFC on top, so the runtime's statistics describe TF's
// tensors exactly), copies are npurt memcpys. The runtime initializes lazily on the first
// create_device, so npu_device.set_npu_config can still size it after the plugin is loaded.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "npurt/npurt.h"
#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/tf_status.h"

// TF declares the timer type opaque; the plugin defines it. Start and stop run on the stream.
struct SP_Timer_st {
  uint64_t start_ns = 0, stop_ns = 0;
};

namespace {

constexpr char kPlatformName[] = "NPU_SIM";
constexpr char kDeviceType[] = "NPU";
constexpr char kVendor[] = "npu_device (simulated NPU)";

npurtStream Npu(SP_Stream s) { return reinterpret_cast<npurtStream>(s); }
npurtEvent Npu(SP_Event e) { return reinterpret_cast<npurtEvent>(e); }

TF_Code CodeOf(npurtError err) {
  switch (err) {
    case NPURT_SUCCESS: return TF_OK;
    case NPURT_ERROR_OUT_OF_MEMORY: return TF_RESOURCE_EXHAUSTED;
    case NPURT_ERROR_INVALID_PARAM:
    case NPURT_ERROR_INVALID_DEVICE: return TF_INVALID_ARGUMENT;
    case NPURT_ERROR_NOT_INITIALIZED: return TF_FAILED_PRECONDITION;
    default: return TF_INTERNAL;
  }
}

// Sets `status` from a runtime call (its message on failure); true on success.
bool Ok(npurtError err, TF_Status* status) {
  if (err == NPURT_SUCCESS || err == NPURT_NOT_READY) {
    TF_SetStatus(status, TF_OK, "");
    return true;
  }
  std::string message = std::string("npu_device: ") + npurtGetLastErrorMessage();
  TF_SetStatus(status, CodeOf(err), message.c_str());
  return false;
}

void LogFailure(npurtError err) {
  if (err != NPURT_SUCCESS) fprintf(stderr, "npu_device: %s\n", npurtGetLastErrorMessage());
}

uint64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --- memory -------------------------------------------------------------------------------

void Allocate(const SP_Device* device, uint64_t size, int64_t /*memory_space*/,
              SP_DeviceMemoryBase* mem) {
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = nullptr;
  mem->size = 0;
  mem->payload = 0;
  void* ptr = nullptr;
  npurtError err = npurtMalloc(device->ordinal, &ptr, size);
  // TF turns the null result into ResourceExhaustedError without saying how much was free.
  LogFailure(err);
  if (err != NPURT_SUCCESS) return;
  mem->opaque = ptr;
  mem->size = size;
}

void Deallocate(const SP_Device* device, SP_DeviceMemoryBase* mem) {
  LogFailure(npurtFree(device->ordinal, mem->opaque));
  mem->opaque = nullptr;
  mem->size = 0;
}

// Pinned host memory has no meaning on the simulator: any 64-byte-aligned host block will do.
void* HostAllocate(const SP_Device*, uint64_t size) {
  const uint64_t align = NPURT_MEMORY_ALIGNMENT;
  return std::aligned_alloc(align, (std::max<uint64_t>(size, 1) + align - 1) / align * align);
}

void HostDeallocate(const SP_Device*, void* mem) { std::free(mem); }

TF_Bool GetAllocatorStats(const SP_Device* device, SP_AllocatorStats* stats) {
  npurtMemStats s;
  if (npurtGetMemStats(device->ordinal, &s) != NPURT_SUCCESS) return false;
  stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  stats->num_allocs = static_cast<int64_t>(s.total_allocs);
  stats->bytes_in_use = static_cast<int64_t>(s.in_use);
  stats->peak_bytes_in_use = static_cast<int64_t>(s.peak);
  stats->largest_alloc_size = 0;  // not tracked by the pool
  stats->has_bytes_limit = true;
  stats->bytes_limit = static_cast<int64_t>(s.limit);
  stats->bytes_reserved = static_cast<int64_t>(s.in_use);  // blocks are reserved on demand
  stats->peak_bytes_reserved = static_cast<int64_t>(s.peak);
  stats->has_bytes_reservable_limit = false;
  stats->largest_free_block_bytes = static_cast<int64_t>(s.limit - s.in_use);
  return true;
}

TF_Bool DeviceMemoryUsage(const SP_Device* device, int64_t* free, int64_t* total) {
  npurtMemStats s;
  if (npurtGetMemStats(device->ordinal, &s) != NPURT_SUCCESS) return false;
  *free = static_cast<int64_t>(s.limit - s.in_use);
  *total = static_cast<int64_t>(s.limit);
  return true;
}

// --- streams, events, timers --------------------------------------------------------------

void CreateStream(const SP_Device* device, SP_Stream* stream, TF_Status* status) {
  npurtStream s = nullptr;
  if (Ok(npurtStreamCreate(device->ordinal, &s), status)) *stream = reinterpret_cast<SP_Stream>(s);
}

void DestroyStream(const SP_Device*, SP_Stream stream) { LogFailure(npurtStreamDestroy(Npu(stream))); }

void CreateStreamDependency(const SP_Device*, SP_Stream dependent, SP_Stream other,
                            TF_Status* status) {
  npurtEvent event = nullptr;
  if (!Ok(npurtEventCreate(&event), status)) return;
  // The event's state outlives the handle for as long as queued work refers to it.
  if (Ok(npurtEventRecord(event, Npu(other)), status)) {
    Ok(npurtStreamWaitEvent(Npu(dependent), event), status);
  }
  npurtEventDestroy(event);
}

void GetStreamStatus(const SP_Device*, SP_Stream stream, TF_Status* status) {
  Ok(npurtStreamQuery(Npu(stream)), status);  // busy is not an error
}

void CreateEvent(const SP_Device*, SP_Event* event, TF_Status* status) {
  npurtEvent e = nullptr;
  if (Ok(npurtEventCreate(&e), status)) *event = reinterpret_cast<SP_Event>(e);
}

void DestroyEvent(const SP_Device*, SP_Event event) { npurtEventDestroy(Npu(event)); }

SE_EventStatus GetEventStatus(const SP_Device*, SP_Event event) {
  int done = 0;
  if (npurtEventQuery(Npu(event), &done) != NPURT_SUCCESS) return SE_EVENT_ERROR;
  return done ? SE_EVENT_COMPLETE : SE_EVENT_PENDING;
}

void RecordEvent(const SP_Device*, SP_Stream stream, SP_Event event, TF_Status* status) {
  Ok(npurtEventRecord(Npu(event), Npu(stream)), status);
}

void WaitForEvent(const SP_Device* const, SP_Stream stream, SP_Event event,
                  TF_Status* const status) {
  Ok(npurtStreamWaitEvent(Npu(stream), Npu(event)), status);
}

void BlockHostForEvent(const SP_Device*, SP_Event event, TF_Status* status) {
  Ok(npurtEventSynchronize(Npu(event)), status);
}

void BlockHostUntilDone(const SP_Device*, SP_Stream stream, TF_Status* status) {
  Ok(npurtStreamSynchronize(Npu(stream)), status);
}

void SynchronizeAllActivity(const SP_Device* device, TF_Status* status) {
  Ok(npurtSynchronizeDevice(device->ordinal), status);
}

void CreateTimer(const SP_Device*, SP_Timer* timer, TF_Status* status) {
  *timer = new SP_Timer_st();
  TF_SetStatus(status, TF_OK, "");
}

void DestroyTimer(const SP_Device*, SP_Timer timer) { delete timer; }

void StartTimer(const SP_Device*, SP_Stream stream, SP_Timer timer, TF_Status* status) {
  auto mark = [](void* t) { static_cast<SP_Timer>(t)->start_ns = NowNs(); };
  Ok(npurtLaunchHostFunc(Npu(stream), mark, timer), status);
}

void StopTimer(const SP_Device*, SP_Stream stream, SP_Timer timer, TF_Status* status) {
  auto mark = [](void* t) { static_cast<SP_Timer>(t)->stop_ns = NowNs(); };
  Ok(npurtLaunchHostFunc(Npu(stream), mark, timer), status);
}

uint64_t TimerNanoseconds(SP_Timer timer) {
  return timer->stop_ns > timer->start_ns ? timer->stop_ns - timer->start_ns : 0;
}

// TF's callback reports a TF_Status; a failure becomes the stream's sticky error.
struct HostCallbackData {
  SE_StatusCallbackFn fn;
  void* arg;
};

npurtError RunHostCallback(void* data, char* message, size_t message_size) {
  std::unique_ptr<HostCallbackData> callback(static_cast<HostCallbackData*>(data));
  TF_Status* status = TF_NewStatus();
  callback->fn(callback->arg, status);
  npurtError err = NPURT_SUCCESS;
  if (TF_GetCode(status) != TF_OK) {
    snprintf(message, message_size, "host callback failed: %s", TF_Message(status));
    err = NPURT_ERROR_INTERNAL;
  }
  TF_DeleteStatus(status);
  return err;
}

TF_Bool HostCallback(const SP_Device*, SP_Stream stream, SE_StatusCallbackFn fn, void* arg) {
  auto* data = new HostCallbackData{fn, arg};
  npurtError err = npurtLaunchHostStatusFunc(Npu(stream), &RunHostCallback, data);
  if (err == NPURT_SUCCESS) return true;
  LogFailure(err);
  delete data;
  return false;
}

// --- copies and fills ---------------------------------------------------------------------

void MemcpyDtoH(const SP_Device*, SP_Stream stream, void* host_dst,
                const SP_DeviceMemoryBase* device_src, uint64_t size, TF_Status* status) {
  Ok(npurtMemcpyAsync(host_dst, device_src->opaque, size, NPURT_MEMCPY_DEVICE_TO_HOST,
                      Npu(stream)), status);
}

void MemcpyHtoD(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* device_dst,
                const void* host_src, uint64_t size, TF_Status* status) {
  Ok(npurtMemcpyAsync(device_dst->opaque, host_src, size, NPURT_MEMCPY_HOST_TO_DEVICE,
                      Npu(stream)), status);
}

void MemcpyDtoD(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* device_dst,
                const SP_DeviceMemoryBase* device_src, uint64_t size, TF_Status* status) {
  Ok(npurtMemcpyAsync(device_dst->opaque, device_src->opaque, size,
                      NPURT_MEMCPY_DEVICE_TO_DEVICE, Npu(stream)), status);
}

void SyncMemcpyDtoH(const SP_Device*, void* host_dst, const SP_DeviceMemoryBase* device_src,
                    uint64_t size, TF_Status* status) {
  Ok(npurtMemcpy(host_dst, device_src->opaque, size, NPURT_MEMCPY_DEVICE_TO_HOST), status);
}

void SyncMemcpyHtoD(const SP_Device*, SP_DeviceMemoryBase* device_dst, const void* host_src,
                    uint64_t size, TF_Status* status) {
  Ok(npurtMemcpy(device_dst->opaque, host_src, size, NPURT_MEMCPY_HOST_TO_DEVICE), status);
}

void SyncMemcpyDtoD(const SP_Device*, SP_DeviceMemoryBase* device_dst,
                    const SP_DeviceMemoryBase* device_src, uint64_t size, TF_Status* status) {
  Ok(npurtMemcpy(device_dst->opaque, device_src->opaque, size, NPURT_MEMCPY_DEVICE_TO_DEVICE),
     status);
}

void MemZero(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location, uint64_t size,
             TF_Status* status) {
  Ok(npurtMemsetAsync(location->opaque, 0, size, Npu(stream)), status);
}

void Memset(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location, uint8_t pattern,
            uint64_t size, TF_Status* status) {
  Ok(npurtMemsetAsync(location->opaque, pattern, size, Npu(stream)), status);
}

void Memset32(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location,
              uint32_t pattern, uint64_t size, TF_Status* status) {
  if (size % 4 != 0) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "npu_device: memset32 size must be a multiple of 4");
    return;
  }
  Ok(npurtMemsetD32Async(location->opaque, pattern, size / 4, Npu(stream)), status);
}

// --- platform -----------------------------------------------------------------------------

void GetDeviceCount(const SP_Platform*, int* count, TF_Status* status) {
  uint32_t n = 0;  // reads the configuration only: listing devices must not freeze it
  if (Ok(npurtGetDeviceCount(&n), status)) *count = static_cast<int>(n);
}

// Names outlive create_device: TF keeps the pointers.
std::array<npurtDeviceInfo, NPURT_MAX_DEVICES> device_infos;

void CreateDevice(const SP_Platform*, SE_CreateDeviceParams* params, TF_Status* status) {
  const int32_t ordinal = params->ordinal;
  if (!Ok(npurtInit(), status)) return;
  if (ordinal < 0 || ordinal >= NPURT_MAX_DEVICES) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "npu_device: NPU device ordinal out of range");
    return;
  }
  if (!Ok(npurtGetDeviceInfo(ordinal, &device_infos[ordinal]), status)) return;
  SP_Device* device = params->device;
  device->struct_size = SP_DEVICE_STRUCT_SIZE;
  device->ext = nullptr;
  device->ordinal = ordinal;
  device->device_handle = nullptr;  // the ordinal is all npurt needs
  device->hardware_name = device_infos[ordinal].soc_version;
  device->device_vendor = kVendor;
  device->pci_bus_id = nullptr;
}

void DestroyDevice(const SP_Platform*, SP_Device*) {}

void CreateDeviceFns(const SP_Platform*, SE_CreateDeviceFnsParams* params, TF_Status* status) {
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;  // the optional fns stay unset
  TF_SetStatus(status, TF_OK, "");
}

void DestroyDeviceFns(const SP_Platform*, SP_DeviceFns*) {}

void CreateStreamExecutor(const SP_Platform*, SE_CreateStreamExecutorParams* params,
                          TF_Status* status) {
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = Allocate;
  se->deallocate = Deallocate;
  se->host_memory_allocate = HostAllocate;
  se->host_memory_deallocate = HostDeallocate;
  se->get_allocator_stats = GetAllocatorStats;
  se->device_memory_usage = DeviceMemoryUsage;
  se->create_stream = CreateStream;
  se->destroy_stream = DestroyStream;
  se->create_stream_dependency = CreateStreamDependency;
  se->get_stream_status = GetStreamStatus;
  se->create_event = CreateEvent;
  se->destroy_event = DestroyEvent;
  se->get_event_status = GetEventStatus;
  se->record_event = RecordEvent;
  se->wait_for_event = WaitForEvent;
  se->create_timer = CreateTimer;
  se->destroy_timer = DestroyTimer;
  se->start_timer = StartTimer;
  se->stop_timer = StopTimer;
  se->memcpy_dtoh = MemcpyDtoH;
  se->memcpy_htod = MemcpyHtoD;
  se->memcpy_dtod = MemcpyDtoD;
  se->sync_memcpy_dtoh = SyncMemcpyDtoH;
  se->sync_memcpy_htod = SyncMemcpyHtoD;
  se->sync_memcpy_dtod = SyncMemcpyDtoD;
  se->block_host_for_event = BlockHostForEvent;
  se->block_host_until_done = BlockHostUntilDone;
  se->synchronize_all_activity = SynchronizeAllActivity;
  se->mem_zero = MemZero;
  se->memset = Memset;
  se->memset32 = Memset32;
  se->host_callback = HostCallback;
  TF_SetStatus(status, TF_OK, "");
}

void DestroyStreamExecutor(const SP_Platform*, SP_StreamExecutor*) {}

void CreateTimerFns(const SP_Platform*, SP_TimerFns* timer_fns, TF_Status* status) {
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = TimerNanoseconds;
  TF_SetStatus(status, TF_OK, "");
}

void DestroyTimerFns(const SP_Platform*, SP_TimerFns*) {}
void DestroyPlatform(SP_Platform*) {}
void DestroyPlatformFns(SP_PlatformFns*) {}

}  // namespace

extern "C" __attribute__((visibility("default"))) void SE_InitPlugin(
    SE_PlatformRegistrationParams* params, TF_Status* status) {
  if (npurtMarkPluginRegistered()) {
    // A second registration would abort the process: TF wraps this call in TF_CHECK_OK, so
    // an error status aborts too. An exception unwinds to TF's Python binding instead, which
    // raises it as RuntimeError. (TF's plugin-loading lock stays held afterwards, so a further
    // plugin load in this process would block; refusing the load is still the lesser harm.)
    throw std::runtime_error(
        "npu_device: the NPU plugin is already loaded in this process; not loading it twice");
  }
  params->struct_size = SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE;
  SP_Platform* platform = params->platform;
  platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  platform->ext = nullptr;
  platform->name = kPlatformName;
  platform->type = kDeviceType;
  platform->supports_unified_memory = false;
  platform->use_bfc_allocator = false;  // one npurtMalloc per tensor: exact memory statistics
  platform->force_memory_growth = false;

  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->ext = nullptr;
  fns->get_device_count = GetDeviceCount;
  fns->create_device = CreateDevice;
  fns->destroy_device = DestroyDevice;
  fns->create_device_fns = CreateDeviceFns;
  fns->destroy_device_fns = DestroyDeviceFns;
  fns->create_stream_executor = CreateStreamExecutor;
  fns->destroy_stream_executor = DestroyStreamExecutor;
  fns->create_timer_fns = CreateTimerFns;
  fns->destroy_timer_fns = DestroyTimerFns;
  params->destroy_platform = DestroyPlatform;
  params->destroy_platform_fns = DestroyPlatformFns;
  TF_SetStatus(status, TF_OK, "");
}
