#include "kernels/thread_pool.h"

#include "kernels/float_status.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <xmmintrin.h>

namespace npu {
namespace kernels {
namespace {

// Below this many operations a loop is not worth handing to other threads.
constexpr int64_t kMinParallelCost = 1 << 15;

// How long an idle worker polls for the next job before it sleeps. A model runs its kernels
// back to back, and a training step its models a few hundred microseconds apart: a worker that
// is still awake takes the next job at once, where a sleeper is woken by a futex call and, on
// a VM whose idle vCPU has halted, often only after the caller has run every chunk itself (a
// small CNN's steps ran at one thread's speed, 2x slower, until the guest kept that vCPU
// awake; with 100 us here, for its first ~20 steps and again after any pause). Polling yields
// the core to anything else that is runnable.
constexpr auto kIdleSpin = std::chrono::milliseconds(2);
// How long a caller that ran out of chunks polls for the stragglers before it sleeps: they are
// usually a few microseconds away.
constexpr auto kStragglerSpin = std::chrono::microseconds(100);

thread_local bool t_in_parallel_range = false;   // nested ParallelFor calls run inline
thread_local bool t_in_task = false;   // a RunConcurrently task a pool thread took
thread_local bool t_deterministic = false;

// What a range of a job is: a ParallelFor range (nested calls run inline), or a RunConcurrently
// task on a pool thread (its ParallelFor calls cut their ranges as on the caller and run them
// in turn, so results never depend on which thread took the task) or on the caller (which
// goes on as before the call).
enum class RangeKind { kRange, kWorkerTask, kCallerTask };

// Marks the calling thread as running one range of a job in the job's mode, and restores the
// marks afterwards.
class InRange {
 public:
  explicit InRange(bool deterministic, RangeKind kind = RangeKind::kRange)
      : saved_range_(t_in_parallel_range), saved_task_(t_in_task), saved_det_(t_deterministic) {
    if (kind != RangeKind::kCallerTask) {
      t_in_parallel_range = kind == RangeKind::kRange;
      t_in_task = kind == RangeKind::kWorkerTask;
    }
    t_deterministic = deterministic;
  }
  ~InRange() {
    t_in_parallel_range = saved_range_;
    t_in_task = saved_task_;
    t_deterministic = saved_det_;
  }

 private:
  bool saved_range_, saved_task_, saved_det_;
};

// One ParallelFor call: its ranges are claimed by workers and by the caller.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n, chunks, next = 0;   // next: guarded by the pool's mutex
  bool deterministic = false;    // the caller's mode, for the ranges run on workers
  bool tasks = false;            // a RunConcurrently job: each range is a task
  std::atomic<uint32_t>* status_sink = FloatStatusSink();   // the caller's (float_status.h)
  std::mutex mu;
  std::condition_variable done_cv;
  std::atomic<int64_t> done{0};  // changed under mu only; read without it while polling
  std::exception_ptr error;

  void Run(int64_t chunk, bool on_caller) {
    const int64_t begin = n * chunk / chunks, end = n * (chunk + 1) / chunks;
    std::exception_ptr e;
    {
      InRange in_range(deterministic, !tasks ? RangeKind::kRange
                                      : on_caller ? RangeKind::kCallerTask : RangeKind::kWorkerTask);
      std::atomic<uint32_t>* previous_sink = SetFloatStatusSink(status_sink);
      try {
        (*fn)(begin, end);
      } catch (...) {
        e = std::current_exception();
      }
      SetFloatStatusSink(previous_sink);
    }
    // Under the lock: the caller destroys the job once it holds mu and sees the last chunk.
    std::lock_guard<std::mutex> lock(mu);
    if (e && !error) error = e;
    if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_cv.notify_all();
  }
};

class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool();   // never destroyed: workers may outlive static teardown
    return *pool;
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void Run(Job* job) {
    bool sleepers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
      queued_.store(queue_.size(), std::memory_order_relaxed);
      sleepers = sleeping_ > 0;
    }
    if (sleepers) cv_.notify_all();
    // The caller works on its own job until no chunk is left, then waits for the stragglers.
    for (;;) {
      int64_t chunk;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (job->next == job->chunks) break;
        chunk = Claim(job);
      }
      job->Run(chunk, true);
    }
    // Stragglers are usually a few microseconds away: poll before sleeping, since a futex
    // wake-up costs more than that. Taking mu afterwards waits out the last worker's unlock.
    const auto until = std::chrono::steady_clock::now() + kStragglerSpin;
    while (job->done.load(std::memory_order_acquire) < job->chunks &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    std::unique_lock<std::mutex> lock(job->mu);
    job->done_cv.wait(lock, [job] { return job->done.load(std::memory_order_acquire) == job->chunks; });
  }

 private:
  Pool() {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    // npu_device checks the value at import (configuration/environment.py); empty means unset.
    if (const char* env = std::getenv("NPU_NUM_THREADS"); env != nullptr && *env != '\0')
      n = std::atoi(env);
    n = std::max(1, std::min(n, 256));
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { Work(); });
    for (auto& t : workers_) t.detach();
  }

  // Takes the job's next chunk; drops the job from the queue once all are claimed.
  int64_t Claim(Job* job) {
    const int64_t chunk = job->next++;
    if (job->next == job->chunks) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), job));
      queued_.store(queue_.size(), std::memory_order_relaxed);
    }
    return chunk;
  }

  void Work() {
    FlushDenormalsScope flush;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kIdleSpin;
      while (queued_.load(std::memory_order_relaxed) == 0 &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      Job* job;
      int64_t chunk;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleeping_;
        cv_.wait(lock, [this] { return !queue_.empty(); });
        --sleeping_;
        job = queue_.front();
        chunk = Claim(job);
      }
      job->Run(chunk, false);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  std::atomic<size_t> queued_{0};   // queue_.size(), readable without the lock (polling)
  int sleeping_ = 0;                // workers waiting on cv_ (guarded by mu_)
  std::vector<std::thread> workers_;
};

}  // namespace

constexpr unsigned kDenormalsAreZero = 0x0040, kFlushToZero = 0x8000;   // MXCSR bits

FlushDenormalsScope::FlushDenormalsScope() : saved_(_mm_getcsr()) {
  _mm_setcsr(saved_ | kDenormalsAreZero | kFlushToZero);
}

FlushDenormalsScope::~FlushDenormalsScope() { _mm_setcsr(saved_); }

int NumThreads() { return Pool::Get().threads(); }

int PlanThreads() { return t_deterministic ? kDeterministicThreads : NumThreads(); }

bool Deterministic() { return t_deterministic; }

DeterministicScope::DeterministicScope(bool on) : saved_(t_deterministic) {
  if (on) t_deterministic = true;
}

DeterministicScope::~DeterministicScope() { t_deterministic = saved_; }

void ParallelFor(int64_t n, int64_t cost_per_item,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t cost = n * std::max<int64_t>(cost_per_item, 1);
  Pool& pool = Pool::Get();
  const bool deterministic = t_deterministic;
  if (t_in_parallel_range || cost < 2 * kMinParallelCost || n == 1 ||
      (pool.threads() == 1 && !deterministic)) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balance uneven ranges; each keeps at least kMinParallelCost work.
  // Deterministic: as many chunks as kDeterministicThreads would get, whatever the pool has.
  const int64_t planned = deterministic ? kDeterministicThreads : pool.threads();
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunks = std::min<int64_t>({n, 4 * planned, cost / kMinParallelCost});
  job.deterministic = deterministic;
  if (pool.threads() == 1 || t_in_task) {
    // The same ranges in turn on the caller (an exception propagates as from the pool): with one
    // thread, and in a task a pool thread took, whose results so match the caller's.
    for (int64_t chunk = 0; chunk < job.chunks; ++chunk) {
      InRange in_range(deterministic);
      fn(n * chunk / job.chunks, n * (chunk + 1) / job.chunks);
    }
    return;
  }
  pool.Run(&job);
  if (job.error) std::rethrow_exception(job.error);
}

void RunConcurrently(int64_t n, const std::function<void(int64_t)>& task) {
  Pool& pool = Pool::Get();
  if (n <= 1 || t_in_parallel_range || t_in_task || pool.threads() == 1) {
    for (int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  const std::function<void(int64_t, int64_t)> each = [&task](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) task(i);
  };
  Job job;
  job.fn = &each;
  job.n = job.chunks = n;
  job.deterministic = t_deterministic;
  job.tasks = true;
  pool.Run(&job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kernels
}  // namespace npu
