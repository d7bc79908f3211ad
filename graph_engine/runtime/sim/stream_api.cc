// The stream and event calls of the sim backend.
#include <algorithm>
#include <cstring>

#include "sim/errors.h"
#include "sim/runtime.h"

using namespace npurt_sim;

namespace {

npurtError NullHandle(const char* what) {
  return Fail(NPURT_ERROR_INVALID_PARAM, Format("%s is null", what));
}

// Device operands are checked when work is enqueued. They stay valid until it runs even if
// freed meanwhile: frees are stream-ordered (ReleaseBlock).
npurtError EnqueueCopy(npurtStream stream, void* dst, const void* src, uint64_t size,
                       npurtMemcpyKind kind) {
  if (stream == nullptr) return NullHandle("stream");
  if (npurtError err = CheckCopy(dst, src, size, kind); err != NPURT_SUCCESS) return err;
  stream->stream->Submit([=](std::string*) {
    if (size != 0) std::memmove(dst, src, size);
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

}  // namespace

extern "C" {

npurtError npurtStreamCreate(int32_t device, npurtStream* stream) {
  if (stream == nullptr) return NullHandle("npurtStreamCreate: stream");
  npurtError err;
  Device* d = GetDevice(device, &err);
  if (d == nullptr) return err;
  auto s = std::make_shared<Stream>(device);
  {
    std::lock_guard<std::mutex> lock(d->streams_mu);
    auto& list = d->streams;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const auto& ref) { return ref.stream.expired(); }),
               list.end());
    list.push_back({s, s->progress()});
  }
  *stream = new npurtStream_st{std::move(s)};
  return NPURT_SUCCESS;
}

npurtError npurtStreamDestroy(npurtStream stream) {
  if (stream == nullptr) return NullHandle("stream");
  if (stream->stream->OnWorker()) {
    return Fail(NPURT_ERROR_INVALID_PARAM, "a stream cannot be destroyed by its own host function");
  }
  delete stream;  // the last owner's ~Stream drains the queue
  return NPURT_SUCCESS;
}

npurtError npurtStreamSynchronize(npurtStream stream) {
  return stream == nullptr ? NullHandle("stream") : stream->stream->Synchronize();
}

npurtError npurtStreamQuery(npurtStream stream) {
  return stream == nullptr ? NullHandle("stream") : stream->stream->Query();
}

npurtError npurtMemcpyAsync(void* dst, const void* src, uint64_t size, npurtMemcpyKind kind,
                            npurtStream stream) {
  return EnqueueCopy(stream, dst, src, size, kind);
}

npurtError npurtMemsetAsync(void* dst, int value, uint64_t size, npurtStream stream) {
  if (stream == nullptr) return NullHandle("stream");
  if (npurtError err = CheckDeviceRange(dst, size, "memset destination"); err != NPURT_SUCCESS) {
    return err;
  }
  stream->stream->Submit([=](std::string*) {
    if (size != 0) std::memset(dst, value, size);
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

npurtError npurtMemsetD32Async(void* dst, uint32_t value, uint64_t count, npurtStream stream) {
  if (stream == nullptr) return NullHandle("stream");
  if (count > UINT64_MAX / 4) return Fail(NPURT_ERROR_INVALID_PARAM, "memset32: count too large");
  if (npurtError err = CheckDeviceRange(dst, count * 4, "memset32 destination");
      err != NPURT_SUCCESS) {
    return err;
  }
  stream->stream->Submit([=](std::string*) {
    auto* words = static_cast<unsigned char*>(dst);  // dst need not be 4-byte aligned
    for (uint64_t i = 0; i < count; ++i) std::memcpy(words + 4 * i, &value, 4);
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

npurtError npurtLaunchHostFunc(npurtStream stream, npurtHostFn fn, void* user_data) {
  if (stream == nullptr) return NullHandle("stream");
  if (fn == nullptr) return NullHandle("host function");
  stream->stream->Enqueue([=](std::string*) {
    fn(user_data);
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

npurtError npurtRunHostFunc(npurtStream stream, npurtHostFn fn, void* user_data) {
  if (stream == nullptr) return NullHandle("stream");
  if (fn == nullptr) return NullHandle("host function");
  return stream->stream->RunNow([=](std::string*) {
    fn(user_data);
    return NPURT_SUCCESS;
  });
}

npurtError npurtLaunchHostStatusFunc(npurtStream stream, npurtHostStatusFn fn, void* user_data) {
  if (stream == nullptr) return NullHandle("stream");
  if (fn == nullptr) return NullHandle("host function");
  stream->stream->Enqueue([=](std::string* message) {
    char buf[1024] = "";
    npurtError err = fn(user_data, buf, sizeof(buf));
    buf[sizeof(buf) - 1] = '\0';
    if (err != NPURT_SUCCESS) *message = *buf != '\0' ? buf : "a host function failed";
    return err;
  });
  return NPURT_SUCCESS;
}

npurtError npurtEventCreate(npurtEvent* event) {
  if (event == nullptr) return NullHandle("npurtEventCreate: event");
  *event = new npurtEvent_st();
  return NPURT_SUCCESS;
}

npurtError npurtEventDestroy(npurtEvent event) {
  delete event;  // queued records and waits keep the shared state alive
  return NPURT_SUCCESS;
}

npurtError npurtEventRecord(npurtEvent event, npurtStream stream) {
  if (event == nullptr) return NullHandle("event");
  if (stream == nullptr) return NullHandle("stream");
  std::shared_ptr<EventState> state = event->state;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    target = ++state->recorded;
  }
  stream->stream->Submit([state, target](std::string*) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->completed = std::max(state->completed, target);
    }
    state->cv.notify_all();
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

npurtError npurtEventQuery(npurtEvent event, int* completed) {
  if (event == nullptr) return NullHandle("event");
  if (completed == nullptr) return NullHandle("npurtEventQuery: completed");
  std::lock_guard<std::mutex> lock(event->state->mu);
  *completed = event->state->completed >= event->state->recorded ? 1 : 0;
  return NPURT_SUCCESS;
}

npurtError npurtEventSynchronize(npurtEvent event) {
  if (event == nullptr) return NullHandle("event");
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->state->mu);
    target = event->state->recorded;
  }
  event->state->Wait(target);
  return NPURT_SUCCESS;
}

npurtError npurtStreamWaitEvent(npurtStream stream, npurtEvent event) {
  if (stream == nullptr) return NullHandle("stream");
  if (event == nullptr) return NullHandle("event");
  std::shared_ptr<EventState> state = event->state;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    target = state->recorded;  // the records enqueued so far; later ones don't count
    if (state->completed >= target) return NPURT_SUCCESS;   // nothing left to wait for
  }
  stream->stream->Enqueue([state, target](std::string*) {
    state->Wait(target);
    return NPURT_SUCCESS;
  });
  return NPURT_SUCCESS;
}

}  // extern "C"
