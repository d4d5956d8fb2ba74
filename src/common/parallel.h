// openfia internal: a fixed-size thread pool with a deterministic parallel-for.
//
// Determinism does not come from the schedule (which worker runs an item varies) but from the
// contract: every item writes only its own outputs and computes them with a fixed order of
// operations, so any thread count gives bitwise the same results. Callers plan their items from
// the problem only, never from NumWorkers().
#pragma once

#include <cstdint>
#include <functional>

namespace openfia::internal {

// Number of workers ParallelFor may use (openfia::GetNumThreads(), at least 1). Use it only to
// size per-worker scratch, never to decide how work is split.
int NumWorkers();

// Calls fn(item, worker) once for every item in [0, n), worker in [0, workers) (workers <= 0:
// NumWorkers()); each worker runs one item at a time, so per-worker scratch indexed by `worker`
// is private. Each worker runs a contiguous share of the items in order, then the back half of
// another worker's rest, so consecutive items tend to run on one thread. A caller that sized
// per-worker scratch passes the count it sized it for: the thread count may change (another
// thread's SetNumThreads) between the sizing and the call. Returns when all items are done. Runs
// serially on the calling thread when n <= 1, when called from inside a worker, or when another
// thread is using the pool. When a call of fn throws, no further item starts and the first
// exception is rethrown on the calling thread once the running items are done. Throws
// Error(kResourceExhausted) when the system cannot start the worker threads. A child of fork()
// gets a fresh pool (the parent's threads do not exist there).
void ParallelFor(int64_t n, const std::function<void(int64_t item, int worker)>& fn,
                 int workers = 0);

}  // namespace openfia::internal
