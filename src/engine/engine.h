// openfia internal: the engine as the ops see it: run a canonical Problem on the implementation
// the settings select (the fast engine or the fp64 reference), pre-fill outputs, and run a
// caller's schedule (SparseAttnSharedkv executes its metadata this way).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/problem.h"
#include "engine/kernel.h"
#include "openfia/tensor_view.h"

namespace openfia::internal {

// True when the engine computes `p` (else *why says which feature it lacks).
bool EngineSupports(const Problem& p, std::string* why);
// Same contract as RunReference; results are bitwise independent of the thread count.
void RunEngine(const Problem& p);

// Runs `p` on the implementation GetImpl() selects: kReference -> run_reference; kEngine -> the
// engine, or an ErrorCode::kUnsupported Error on argument "impl" carrying the engine's reason;
// kAuto -> the engine where it supports `p`, else run_reference. A forced kernel (SetKernel) that
// cannot run `p` is an error under kAuto too. SparseAttnSharedkv passes its plan-driven
// reference; the other ops use RunReference.
void RunSelectedImpl(const Problem& p, const std::function<void(const Problem&)>& run_reference);
void RunSelectedImpl(const Problem& p);

// Asks the OS for transparent huge pages over the 2 MiB-aligned interior of [data, data + bytes)
// when it spans at least 8 MiB (Linux MADV_HUGEPAGE; a no-op elsewhere, and where THP is off).
// The first write of a fresh output faults in one page per 4 KiB otherwise: a 134 MB output took
// 60 ms to write the first time in 4 KiB pages and 23-30 ms in 2 MiB pages. Contents and
// semantics are unchanged; it only changes how memory is mapped.
void AdviseHugePages(void* data, int64_t bytes);

// Pre-fill, before any row is computed: every element of `out` is 0 (rows no implementation
// writes: no keys, padding, past the actual lengths), and every entry of `lse` (when defined)
// is +inf when `lse_real`, else 0 (the one-element placeholder of a call without lse). Large
// outputs get AdviseHugePages and are cleared by all workers.
void PrefillOutputs(const TensorView& out, const TensorView& lse, bool lse_real);

// ---- running a caller's schedule ----------------------------------------------------------------

// The merge of split partial states of some rows: rows r0 <= r < r1, row r being query head
// h0 + r % heads of logical query i0 + r / heads of batch b (query-major), or with head_major
// head h0 + r / nq of query i0 + r % nq (a work item's own row order); its partial state of split
// s lives at workspace row state0 + s * split_stride + r. The states are merged with weights
// exp(m_s - max_s m_s), summed in split order 0, 1, ... (empty splits skipped), then normalized
// and written like an unsplit row: a function of the states alone.
struct MergeTask {
  int64_t b = 0, h0 = 0, heads = 1, i0 = 0;
  int64_t r0 = 0, r1 = 0;
  int64_t n_split = 1;
  int64_t state0 = 0, split_stride = 0;
  bool head_major = false;
  int64_t nq = 1;  // queries per head (head_major only)
};

// Items grouped into tasks: task t runs items [task_begin[t], task_begin[t + 1]) in order on one
// thread (a compute worker of a plan). An item with n_split > 1 writes its partial state to
// workspace rows [state0, state0 + rows()) for a MergeTask to combine; others are finished in
// place. The tasks only decide who runs what: every item's result depends on the item alone, and
// every merge order is fixed by its MergeTask, so results are bitwise independent of the tasks.
struct Schedule {
  std::vector<WorkItem> items;
  std::vector<int64_t> task_begin;  // [tasks + 1], task_begin[0] = 0, last = items.size()
  int64_t state_rows = 0;           // workspace rows the split items and merges address
  std::vector<MergeTask> merges;    // run after every task, in parallel with each other
};

// Whether the kernels the settings select for `p` run item `w` (a planner asks before it makes
// items of a shape only some kernels take, e.g. SparseAttnSharedkv's multi-token items).
bool EngineRunsItem(const Problem& p, const WorkItem& w);

// Optional timing of RunSchedule (pass nullptr for none: then nothing is timed). Busy time is the
// wall time a thread spends inside a task's items (or a merge task), summed.
// CPU times (CLOCK_THREAD_CPUTIME_ID) exclude what other processes of a shared machine take.
struct EngineStats {
  std::vector<double> task_busy_s;    // [tasks]: per compute worker of the schedule (wall)
  std::vector<double> task_cpu_s;     // [tasks]: the same in thread CPU time
  std::vector<double> thread_busy_s;  // [threads]: per pool thread, compute and merge phases
  double merge_busy_s = 0, merge_cpu_s = 0;  // all merge tasks, summed (wall, CPU)
  double compute_wall_s = 0;          // wall time of the compute phase
  double merge_wall_s = 0;            // wall time of the merge phase
};

// Runs `s` on `p` (which EngineSupports must accept) with up to NumWorkers() threads; tasks are
// claimed dynamically, so any thread count works and gives bitwise the same result.
void RunSchedule(const Problem& p, const Schedule& s, EngineStats* stats);

}  // namespace openfia::internal
