#include "sim/stream.h"

#include "sim/errors.h"

namespace npurt_sim {

Stream::Stream(int32_t device) : device_(device), worker_([this] { Run(); }) {}

Stream::~Stream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
    stop_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

void Stream::Enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    progress_->submitted.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_one();
}

void Stream::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return (stop_ || !queue_.empty()) && !busy_; });
    if (queue_.empty()) return;  // stop_ and drained
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::string message;
    npurtError err = task(&message);
    task = nullptr;  // release captured state outside the lock
    lock.lock();
    Finished(err, message);
  }
}

void Stream::Finished(npurtError err, const std::string& message) {
  busy_ = false;
  progress_->finished.fetch_add(1, std::memory_order_release);
  if (err != NPURT_SUCCESS && error_ == NPURT_SUCCESS) {
    error_ = err;
    error_message_ = Format("NPU:%d stream: ", device_) + message;
  }
  if (queue_.empty()) idle_cv_.notify_all();
}

bool Stream::RunIfIdle(Task& task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!queue_.empty() || busy_) return false;
  busy_ = true;
  progress_->submitted.fetch_add(1, std::memory_order_release);
  lock.unlock();
  inline_runner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  std::string message;
  npurtError err = task(&message);
  task = nullptr;
  inline_runner_.store(std::thread::id(), std::memory_order_relaxed);
  lock.lock();
  Finished(err, message);
  const bool more = !queue_.empty();   // enqueued by other threads meanwhile
  lock.unlock();
  if (more) work_cv_.notify_one();
  return true;
}

void Stream::Submit(Task task) {
  if (!RunIfIdle(task)) Enqueue(std::move(task));   // busy while a task of ours runs, so queued
}

npurtError Stream::RunNow(Task task) {
  if (OnWorker()) {  // it would wait for itself forever
    return Fail(NPURT_ERROR_INVALID_PARAM, "a stream cannot be synchronized by its own host function");
  }
  if (!RunIfIdle(task)) Enqueue(std::move(task));
  return Synchronize();
}

npurtError Stream::StickyError() {
  return error_ == NPURT_SUCCESS ? NPURT_SUCCESS : Fail(error_, error_message_);
}

npurtError Stream::Synchronize() {
  if (OnWorker()) {  // it would wait for itself forever
    return Fail(NPURT_ERROR_INVALID_PARAM, "a stream cannot be synchronized by its own host function");
  }
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  return StickyError();
}

npurtError Stream::Query() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_ != NPURT_SUCCESS) return StickyError();
  return queue_.empty() && !busy_ ? NPURT_SUCCESS : NPURT_NOT_READY;
}

void EventState::Wait(uint64_t target) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return completed >= target; });
}

}  // namespace npurt_sim
