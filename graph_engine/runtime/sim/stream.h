// Streams and events of the sim backend.
//
// A stream is a FIFO of host tasks run by its own worker thread, so work on one stream runs in
// submission order and concurrently with other streams. An event counts records and completions:
// it is complete once the last record enqueued before a query has run.
#ifndef NPURT_SIM_STREAM_H_
#define NPURT_SIM_STREAM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "npurt/npurt.h"

namespace npurt_sim {

// How far a stream has come: work enqueued before some moment has run once `finished` reaches
// what `submitted` was then. Shared, so freed memory can wait for a stream without keeping the
// stream itself alive.
struct StreamProgress {
  std::atomic<uint64_t> submitted{0}, finished{0};
};

class Stream {
 public:
  // A task returns SUCCESS, or an error and its reason in *message.
  using Task = std::function<npurtError(std::string* message)>;

  explicit Stream(int32_t device);
  ~Stream();  // drains, then stops the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int32_t device() const { return device_; }
  // On the thread running this stream's tasks: its worker, or a RunNow caller running one.
  bool OnWorker() const {
    const std::thread::id me = std::this_thread::get_id();
    return me == worker_.get_id() || me == inline_runner_.load(std::memory_order_relaxed);
  }
  void Enqueue(Task task);
  // Work that calls no user code and never blocks (copies, memsets, event records): run at
  // once on the calling thread when the stream is idle, else enqueued. An asynchronous call may
  // complete before it returns; then an event recorded after it is complete at once, and
  // TensorFlow's event manager, which polls a new event once right away, needs no poll later.
  void Submit(Task task);
  // Runs `task` after everything enqueued before it and waits for it, then returns the sticky
  // error. When the stream is idle the calling thread runs it (the worker waits meanwhile).
  npurtError RunNow(Task task);
  npurtError Synchronize();  // waits until idle; returns the sticky error
  npurtError Query();        // the sticky error, else NOT_READY while busy, else SUCCESS
  const std::shared_ptr<StreamProgress>& progress() const { return progress_; }

 private:
  void Run();
  void Finished(npurtError err, const std::string& message);  // call with mu_ held
  // Runs `task` here if the stream is idle (returns true), marking it busy meanwhile.
  bool RunIfIdle(Task& task);
  npurtError StickyError();  // call with mu_ held; sets this thread's last error message

  const int32_t device_;
  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Task> queue_;
  bool busy_ = false;  // a task is running, on the worker or on a RunNow caller
  std::atomic<std::thread::id> inline_runner_{};  // the RunNow caller running a task
  bool stop_ = false;
  npurtError error_ = NPURT_SUCCESS;  // first failure of a task, sticky
  std::string error_message_;
  const std::shared_ptr<StreamProgress> progress_ = std::make_shared<StreamProgress>();
  std::thread worker_;  // last: starts after everything it uses exists
};

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // records enqueued
  uint64_t completed = 0;  // highest record that has run
  void Wait(uint64_t target);
};

}  // namespace npurt_sim

// The C handles own shared state: tasks hold it too, so destroying a handle while its work is
// still queued elsewhere is safe.
struct npurtStream_st {
  std::shared_ptr<npurt_sim::Stream> stream;
};
struct npurtEvent_st {
  std::shared_ptr<npurt_sim::EventState> state = std::make_shared<npurt_sim::EventState>();
};

#endif  // NPURT_SIM_STREAM_H_
