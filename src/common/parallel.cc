// openfia: the engine's thread pool. One process-wide pool, re-sized when GetNumThreads()
// changes; the calling thread is worker 0 and the pool threads are workers 1..n-1.
#include "common/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/check.h"
#include "openfia/runtime.h"

namespace openfia::internal {
namespace {

thread_local bool t_in_worker = false;

// Before sleeping on a condition variable, a pool thread (waiting for work) and the caller
// (waiting for the pool to finish) spin for up to kSpin: a decode call or a SparseAttnSharedkv
// decode split lasts a few hundred microseconds, about what a futex wake-up of an idle vCPU
// costs, so without the spin the caller ends up running every item itself. 200 us covers the
// Python and validation time between two calls of a model's decode step (so the next call finds
// its workers awake) and is far below OpenMP runtimes' defaults (libgomp spins ~300k
// iterations, Intel's KMP_BLOCKTIME is 200 ms). Measured on V3 (B = 1 decode, ~0.2 ms of
// compute per worker): a 40 us spin left the second worker asleep in most calls.
constexpr std::chrono::microseconds kSpin{200};
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}
// Spins (CpuRelax) while `busy()` holds, for at most kSpin.
template <typename Busy>
inline void SpinWhile(const Busy& busy) {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  while (busy()) {
    for (int i = 0; i < 32; ++i) CpuRelax();
    if (std::chrono::steady_clock::now() >= end) return;
  }
}

class Pool {
 public:
  ~Pool() { Stop(); }

  // Caller holds run_mu. Throws Error(kResourceExhausted) when the system refuses a thread; the
  // pool then has no threads and the next call tries again.
  void Resize(int n) {
    if (n == static_cast<int>(threads_.size()) + 1) return;
    Stop();
    // Each thread starts from the current generation, so a Run() issued right after creation is
    // seen as new work even if the thread has not started yet.
    const uint64_t gen = generation_;
    try {
      for (int w = 1; w < n; ++w) threads_.emplace_back([this, w, gen] { Loop(w, gen); });
    } catch (const std::system_error& e) {
      const int started = static_cast<int>(threads_.size());
      Stop();
      Fail(ErrorCode::kResourceExhausted, "num_threads",
           "the system refused to start the engine's worker threads (lower the thread count: "
           "openfia::SetNumThreads / OPENFIA_NUM_THREADS)",
           Str(n, " threads asked for, ", started + 1, " running when thread ", started + 1,
               " failed: ", e.what()));
    }
  }

  // Runs fn over [0, n) (n < 2^32) on the pool and the calling thread. The first exception any
  // call of fn throws stops the hand-out of further items and is rethrown here once every worker
  // is done.
  void Run(int64_t n, const std::function<void(int64_t, int)>& fn, int workers) {
    Resize(workers);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      error_ = nullptr;
      stop_items_.store(false);
      n_workers_ = static_cast<int>(threads_.size()) + 1;
      if (n_ranges_ < n_workers_) {
        ranges_ = std::make_unique<Range[]>(static_cast<size_t>(n_workers_));
        n_ranges_ = n_workers_;
      }
      for (int w = 0; w < n_workers_; ++w)
        ranges_[w].fb.store(Pack(static_cast<uint32_t>(n * w / n_workers_),
                                 static_cast<uint32_t>(n * (w + 1) / n_workers_)));
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    Work(0);
    SpinWhile([this] { return pending_.load() != 0; });
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  std::mutex run_mu;  // one ParallelFor at a time uses the pool

 private:
  // Joins every thread (caller holds run_mu).
  void Stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
  }

  // Items are claimed from per-worker ranges: each worker starts with a contiguous share of
  // [0, n) and runs it front to back, then takes the back half of another worker's rest. A worker
  // thus runs consecutive items (a decode's consecutive key pieces, whose next one its kernel
  // prefetches) while the load still balances to one item.
  struct alignas(64) Range {
    std::atomic<uint64_t> fb{0};  // front (low 32 bits) and back of the unclaimed items
  };
  static uint64_t Pack(uint32_t front, uint32_t back) {
    return static_cast<uint64_t>(back) << 32 | front;
  }
  // The front item of r, or -1 when r is empty.
  static int64_t TakeFront(Range& r) {
    uint64_t v = r.fb.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t f = static_cast<uint32_t>(v), b = static_cast<uint32_t>(v >> 32);
      if (f >= b) return -1;
      if (r.fb.compare_exchange_weak(v, Pack(f + 1, b), std::memory_order_relaxed)) return f;
    }
  }
  // Moves the back half (at least one item) of `from` into the empty range `to` of the calling
  // worker; false when `from` is empty. Only a range's owner stores into it, and only when empty.
  static bool StealHalf(Range& from, Range& to) {
    uint64_t v = from.fb.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t f = static_cast<uint32_t>(v), b = static_cast<uint32_t>(v >> 32);
      if (f >= b) return false;
      const uint32_t mid = f + (b - f) / 2;
      if (from.fb.compare_exchange_weak(v, Pack(f, mid), std::memory_order_relaxed)) {
        to.fb.store(Pack(mid, b), std::memory_order_relaxed);
        return true;
      }
    }
  }

  void Work(int worker) {
    t_in_worker = true;
    Range& own = ranges_[worker];
    for (bool more = true; more;) {
      for (int64_t i; !stop_items_.load(std::memory_order_relaxed) && (i = TakeFront(own)) >= 0;) {
        try {
          (*fn_)(i, worker);
        } catch (...) {
          std::lock_guard<std::mutex> lk(mu_);
          if (!error_) error_ = std::current_exception();
          stop_items_.store(true, std::memory_order_relaxed);  // no new items
        }
      }
      more = false;
      for (int k = 1; k < n_workers_ && !more && !stop_items_.load(std::memory_order_relaxed); ++k)
        more = StealHalf(ranges_[(worker + k) % n_workers_], own);
    }
    t_in_worker = false;
  }

  void Loop(int worker, uint64_t seen) {
    for (;;) {
      SpinWhile([&] { return generation_.load() == seen && !stop_.load(); });
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      Work(worker);
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  // Written under mu_; atomic so that the spins above may read them without it.
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int n_workers_ = 1;  // of the current Run
  std::unique_ptr<Range[]> ranges_;  // [n_ranges_], the first n_workers_ in use
  int n_ranges_ = 0;
  std::atomic<bool> stop_items_{false};
  std::exception_ptr error_;  // guarded by mu_
};

// The pool of this process. A child of fork() inherits the parent's pool object but none of its
// threads (and maybe a mutex held by one of them): it gets a new pool, as PyTorch resets its
// intra-op pool, and the old one is leaked, since neither its threads nor its locks can be used.
// Pools are never destroyed: no join during static destruction.
std::atomic<Pool*> g_pool{nullptr};
std::once_flag g_pool_once;

void ResetPoolInChild() {
  g_pool.store(new Pool(), std::memory_order_release);
  t_in_worker = false;
}

Pool& GetPool() {
  std::call_once(g_pool_once, [] {
    g_pool.store(new Pool(), std::memory_order_release);
    pthread_atfork(nullptr, nullptr, ResetPoolInChild);
  });
  return *g_pool.load(std::memory_order_acquire);
}

}  // namespace

int NumWorkers() { return std::max(1, GetNumThreads()); }

void ParallelFor(int64_t n, const std::function<void(int64_t, int)>& fn, int workers) {
  if (n <= 0) return;
  if (workers <= 0) workers = NumWorkers();
  if (n == 1 || workers == 1 || t_in_worker) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  Pool& pool = GetPool();
  std::unique_lock<std::mutex> lk(pool.run_mu, std::try_to_lock);
  if (!lk.owns_lock()) {  // another thread's call is running: stay correct, run here
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  // A range holds 32-bit item numbers: larger counts run in slices.
  constexpr int64_t kSlice = int64_t{1} << 31;
  for (int64_t i0 = 0; i0 < n; i0 += kSlice) {
    const int64_t m = std::min(kSlice, n - i0);
    if (i0 == 0 && m == n) {
      pool.Run(n, fn, workers);
    } else {
      pool.Run(m, [&](int64_t i, int worker) { fn(i0 + i, worker); }, workers);
    }
  }
}

}  // namespace openfia::internal
