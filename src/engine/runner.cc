// openfia: the runner: a schedule's items on the worker threads, each on the kernel the selection
// picks (engine/select.h), the split-KV merge and the epilogue (normalization, sinks, output
// rounding, int8 post-quantization, lse).
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "common/check.h"
#include "common/convert.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "common/online_softmax.h"
#include "common/parallel.h"
#include "engine/plan.h"
#include "engine/select.h"

namespace openfia::internal {
namespace {

// Writes the final output row (b, h, query i) from its merged state.
void Epilogue(const Problem& p, int64_t b, int64_t h, int64_t i, const SoftmaxRow& st,
              const float* acc, const VectorOps& k) {
  RowFinal f;
  const bool any = p.sinks ? FinalizeSoftmax(st, p.sinks[h], &f) : FinalizeSoftmax(st, &f);
  const int64_t row = p.q_begin[b] + i;
  const int64_t o = b * p.out_sb + h * p.out_sh + row * p.out_ss;
  const bool quant = p.out_elem == Elem::kI8;
  // Contiguous float rows: the same operations per element as the generic loop below, in the
  // table's vector loop, or for float32 / bfloat16 in loops the compiler vectorizes (a row is
  // hundreds of elements; the generic loop converts one at a time). (Full quantization writes
  // acc as it is: the kernel already divided by fp16(l).)
  if (!quant && !p.full_quant && p.out_sd == 1) {
    const float factor = f.factor, denom = f.denom;
    void* dst = static_cast<char*>(p.out) + o * (p.out_elem == Elem::kF32 ? 4 : 2);
    if (any && k.scale_row != nullptr && k.scale_row(acc, p.d_v, factor, denom, p.out_elem, dst)) {
      if (p.lse) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = f.lse;
      return;
    }
    if (p.out_elem == Elem::kF32) {
      float* out = static_cast<float*>(dst);
      for (int64_t d = 0; d < p.d_v; ++d) out[d] = any ? acc[d] * factor / denom : 0.f;
      if (p.lse) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = f.lse;
      return;
    }
    if (p.out_elem == Elem::kBF16) {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (int64_t d = 0; d < p.d_v; ++d) {
        const float x = any ? acc[d] * factor / denom : 0.f;
        uint32_t u;
        std::memcpy(&u, &x, 4);
        // cvt::F32ToBF16 without branches: round to nearest even, NaN stays a quiet NaN.
        const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        const uint32_t qnan = (u >> 16) | 0x40u;
        out[d] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? qnan : rne);
      }
      if (p.lse) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = f.lse;
      return;
    }
  }
  for (int64_t d = 0; d < p.d_v; ++d) {
    // Full quantization: the kernel already divided by fp16(l) (attend_fullquant-inl.h).
    float x = !any ? 0.f : p.full_quant ? acc[d] : acc[d] * f.factor / f.denom;
    if (quant) {  // docs/semantics.md 1.8: x * qs2 + qo2 in fp32, half away from zero, saturated
      const int64_t c = h * p.d_v + d;
      const float qs = p.quant_scale2.size() == 1 ? p.quant_scale2[0] : p.quant_scale2[c];
      const float qo = p.quant_offset2.empty() ? 0.f
                       : p.quant_offset2.size() == 1 ? p.quant_offset2[0]
                                                     : p.quant_offset2[c];
      x = x * qs + qo;
    }
    cvt::Store(p.out, p.out_elem, o + d * p.out_sd, x);
  }
  if (p.lse) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = f.lse;
}

}  // namespace

namespace {

// Row stride (floats) of the row states' accumulators: d_v rounded up to 16, plus 16 when that
// is a multiple of 256. A stride of a multiple of 1 KiB maps the 16 rows of an AMX tile load
// onto one or two L1 sets (12 ways): d_v = 512 accumulators then thrash L1 on every P V step.
int64_t AccStride(int64_t d_v) {
  const int64_t pad = (d_v + 15) / 16 * 16;
  return pad % 256 == 0 ? pad + 16 : pad;
}

// Split workspace without a clearing pass: every kernel resets the row states of its item
// (ResetRowStates, or the full-quant kernel's own reset) before anything reads them, and merges
// read only the d_v columns of the rows of split items. Clearing it cost a page-faulting memset
// of up to megabytes per call (2 MiB for KvQuantSparseFlashAttention S1: 8 items x 128 rows).
std::unique_ptr<float[]> Uninit(int64_t n) {
  return std::make_unique_for_overwrite<float[]>(static_cast<size_t>(std::max<int64_t>(n, 1)));
}

// A kernel family's scratch kept by a thread from one call to the next: a fresh buffer per worker
// per call cost page faults on up to ~1.3 MB of new memory each time (a quarter of a 0.4 ms
// SparseAttnSharedkv decode); a kept one has its zeroed part cleared instead (the state a fresh
// one has). Row states need no clearing: every kernel resets its item's states before reading
// them.
struct KeptScratch {
  ScratchSize (*family)(const Problem&) = nullptr;
  std::unique_ptr<char[]> mem;  // bytes + 64 (aligned inside)
  int64_t bytes = 0;
  // Held by a runner (a nested call makes its own). Atomic: a runner releases the pool threads'
  // scratch from the calling thread while those threads may already serve the next call.
  std::atomic<bool> busy{false};
  char* aligned() const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(mem.get());
    return mem.get() + (64 - a % 64) % 64;
  }
};
// Shared, not owned by the thread alone: a runner holds what it uses until it ends, and a pool
// thread may exit before that (the pool is re-sized when the thread count changes).
struct ThreadKept {
  std::vector<std::shared_ptr<KeptScratch>> scratch;
  std::vector<float> states;
  std::atomic<bool> states_busy{false};  // as KeptScratch::busy
};
const std::shared_ptr<ThreadKept>& LocalKept() {
  thread_local const std::shared_ptr<ThreadKept> t = std::make_shared<ThreadKept>();
  return t;
}

// The split workspace, kept by the calling thread from one call to the next (grown, never
// shrunk): a fresh one per call took page faults on its first writes, in the workers (a 2-chunk
// SparseAttnSharedkv decode: 270 KB, 66 fresh pages per call). Not cleared (Uninit).
struct SplitSpace {
  std::unique_ptr<float[]> buf;
  int64_t size = 0;
  bool busy = false;  // held by a runner of this thread (a nested call makes its own)
};
SplitSpace& LocalSplitSpace() {
  thread_local SplitSpace s;
  return s;
}

// What the items of one RunSchedule call share: the kernel of each item (chosen before the
// parallel part, so that a forced kernel's refusal is an error of the calling thread), each
// worker's scratch per kernel family (made on first use by that worker), and the split workspace.
class ItemRunner {
 public:
  ItemRunner(const Problem& p, const std::vector<WorkItem>& items, int64_t state_rows)
      : p_(p), ops_(ActiveVectorOps()), dv_pad_(AccStride(p.d_v)), max_rows_(MaxItemRows(p)),
        workers_(NumWorkers()) {
    const KernelChoice choice(p);
    if (choice.why_not() != nullptr)
      Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call",
           choice.why_not());
    kernels_.reserve(items.size());
    for (const WorkItem& w : items) {
      const Kernel* k = &choice.For(w);
      kernels_.push_back(k);
      if (std::find(families_.begin(), families_.end(), k->scratch) == families_.end()) {
        families_.push_back(k->scratch);
        sizes_.push_back(k->scratch(p));
      }
    }
    scratch_.assign(workers_ * families_.size(), nullptr);
    states_.assign(workers_, nullptr);
    // Accumulators first, on a cache line (16 floats of slack), then the maxima and the sums.
    const int64_t n = state_rows > 0 ? state_rows * (2 + dv_pad_) + 16 : 0;
    float* f = nullptr;
    if (n > 0) {
      SplitSpace& k = LocalSplitSpace();
      if (!k.busy) {
        if (k.size < n) {
          k.buf = Uninit(n);
          k.size = n;
        }
        k.busy = true;
        split_kept_ = &k;
        f = k.buf.get();
      } else {
        own_split_ = Uninit(n);
        f = own_split_.get();
      }
    }
    if (f) {
      split_acc_ = f + (16 - reinterpret_cast<uintptr_t>(f) / 4 % 16) % 16;
      split_m_ = split_acc_ + state_rows * dv_pad_;
      split_l_ = split_m_ + state_rows;
    }
  }

  // The worker count its per-worker scratch is sized for: what its ParallelFor calls use.
  int workers() const { return workers_; }

  // Gives back the kept scratch and split workspace this runner held.
  ~ItemRunner() {
    for (const auto& k : held_) k->busy = false;
    for (const auto& t : held_states_) t->states_busy = false;
    if (split_kept_) split_kept_->busy = false;
  }

  // Attends item `idx` on `worker`; an unsplit item's rows are finished (epilogue), a split
  // item's partial states stay in the workspace.
  void Run(const WorkItem& w, int64_t idx, int worker) {
    const Kernel& k = *kernels_[idx];
    const size_t f = std::find(families_.begin(), families_.end(), k.scratch) - families_.begin();
    void*& scratch = scratch_[worker * families_.size() + f];
    if (scratch == nullptr) scratch = MakeScratch(k, sizes_[f]);
    float*& st = states_[worker];
    if (st == nullptr) st = MakeStates(worker);
    const int64_t rows = w.rows();
    RowStates rs;
    if (w.n_split > 1) {
      rs = {split_m_ + w.state0, split_l_ + w.state0, split_acc_ + w.state0 * dv_pad_, dv_pad_};
    } else {
      rs = {st, st + max_rows_, st + 2 * max_rows_, dv_pad_};
    }
    k.run(p_, w, scratch, rs);
    if (w.n_split > 1) return;
    const int64_t nq = w.i1 - w.i0;
    for (int64_t r = 0; r < rows; ++r) {
      const SoftmaxRow row{rs.m[r], rs.l[r]};
      Epilogue(p_, w.b, w.hk * p_.group() + w.g0 + r / nq, w.i0 + r % nq, row,
               rs.acc + r * dv_pad_, ops_);
    }
  }

  // Row r of `t` once more where its fp32 merge is not finite although every split's state is:
  // the splits' sums near FLT_MAX (values near the fp32 / bf16 maximum) added past it. Then in
  // double and normalized (acc / l, l = 1, m + log l: the same output and lse), as the kernels
  // leave such a row of their own (RunRerunningOverflow).
  void MergeOverflowed(const MergeTask& t, int64_t r, SoftmaxRow* st, float* acc) const {
    const int64_t n = p_.d_v;
    bool bad = false;
    for (int64_t d = 0; d < n && !bad; ++d) bad = !std::isfinite(acc[d]);
    if (!bad || !std::isfinite(st->m)) return;
    for (int64_t s = 0; s < t.n_split; ++s) {
      const int64_t sr = t.state0 + s * t.split_stride + r;
      if (split_m_[sr] == -std::numeric_limits<float>::infinity()) continue;
      if (!std::isfinite(split_l_[sr])) return;
      const float* src = split_acc_ + sr * dv_pad_;
      for (int64_t d = 0; d < n; ++d)
        if (!std::isfinite(src[d])) return;
    }
    double l = 0.0;
    std::vector<double> sum(static_cast<size_t>(n), 0.0);
    for (int64_t s = 0; s < t.n_split; ++s) {
      const int64_t sr = t.state0 + s * t.split_stride + r;
      if (split_m_[sr] == -std::numeric_limits<float>::infinity()) continue;
      const double ws = std::exp(static_cast<double>(split_m_[sr]) - st->m);
      l += ws * split_l_[sr];
      const float* src = split_acc_ + sr * dv_pad_;
      for (int64_t d = 0; d < n; ++d) sum[d] += ws * src[d];
    }
    if (l > 0.0) NormalizeRowState(sum.data(), l, st->m + std::log(l), n, acc, &st->m, &st->l);
  }

  // Merges the partial states of the rows of `t` and finishes them. Two passes per row: the
  // common max M over the non-empty splits, then l = sum w_s l_s and acc = sum w_s acc_s with
  // w_s = exp(m_s - M), both in split order 0, 1, ... (a fixed order of operations, so the result
  // depends on the states only, never on who computed them): one exp per split and one
  // multiply-add per element.
  void Merge(const MergeTask& t) {
    std::vector<float> acc(dv_pad_);
    const int64_t n = p_.d_v;
    for (int64_t r = t.r0; r < t.r1; ++r) {
      SoftmaxRow st;
      bool nan = false;  // a split met a NaN score: the row is NaN (fmax would drop it)
      for (int64_t s = 0; s < t.n_split; ++s) {
        const float ms = split_m_[t.state0 + s * t.split_stride + r];
        nan = nan || std::isnan(ms);
        st.m = std::fmax(st.m, ms);
      }
      if (nan) st.m = std::numeric_limits<float>::quiet_NaN();
      if (!st.empty()) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t s = 0; s < t.n_split; ++s) {
          const int64_t sr = t.state0 + s * t.split_stride + r;
          // An empty split (m = -inf, l = 0, acc = 0) contributes nothing: skip it (its weight
          // would be exp(-inf) = 0 anyway, but 0 * acc must not meet a non-finite value).
          if (split_m_[sr] == -std::numeric_limits<float>::infinity()) continue;
          const float ws = std::exp(split_m_[sr] - st.m);
          st.l += ws * split_l_[sr];
          const float* src = split_acc_ + sr * dv_pad_;
          float* dst = acc.data();
          if (ops_.axpy != nullptr) ops_.axpy(ws, src, dst, n);
          else for (int64_t d = 0; d < n; ++d) dst[d] += ws * src[d];
        }
        MergeOverflowed(t, r, &st, acc.data());
      }
      const int64_t h = t.head_major ? t.h0 + r / t.nq : t.h0 + r % t.heads;
      const int64_t i = t.head_major ? t.i0 + r % t.nq : t.i0 + r / t.heads;
      Epilogue(p_, t.b, h, i, st, acc.data(), ops_);
    }
  }

 private:
  // A scratch of kernel k's family for this worker: this thread's kept one when it is free, else
  // a new one (kept by the thread when it holds none of the family, else owned by the runner).
  void* MakeScratch(const Kernel& k, const ScratchSize& size) {
    ThreadKept& t = *LocalKept();
    std::shared_ptr<KeptScratch> use;
    bool family_kept = false;
    for (auto& s : t.scratch) {
      if (s->family != k.scratch) continue;
      family_kept = true;
      if (!s->busy) use = s;
    }
    if (use != nullptr) {
      if (use->bytes < size.bytes) {  // grown, never shrunk
        use->mem = std::make_unique_for_overwrite<char[]>(size.bytes + 64);
        use->bytes = size.bytes;
      }
      use->busy = true;
      std::lock_guard<std::mutex> lk(held_mu_);
      held_.push_back(use);
    } else {
      use = std::make_shared<KeptScratch>();
      use->family = k.scratch;
      use->bytes = size.bytes;
      use->mem = std::make_unique_for_overwrite<char[]>(size.bytes + 64);
      if (!family_kept) {  // kept by the thread from now on
        use->busy = true;
        t.scratch.push_back(use);
      }  // else: the thread's one is held by an outer call on this thread; this runner's only
      std::lock_guard<std::mutex> lk(held_mu_);
      held_.push_back(use);
    }
    std::memset(use->aligned(), 0, size.zeroed);
    if (k.prepare != nullptr) k.prepare(p_, use->aligned());
    return use->aligned();
  }

  // The row states of unsplit items on this worker, sized by the largest item of the call.
  float* MakeStates(int worker) {
    const std::shared_ptr<ThreadKept>& kept = LocalKept();
    ThreadKept& t = *kept;
    const size_t n = static_cast<size_t>(max_rows_ * (2 + dv_pad_));
    if (!t.states_busy) {
      if (t.states.size() < n) t.states.resize(n);
      t.states_busy = true;
      std::lock_guard<std::mutex> lk(held_mu_);
      held_states_.push_back(kept);
      return t.states.data();
    }
    std::lock_guard<std::mutex> lk(held_mu_);
    own_states_.emplace_back(n);
    return own_states_.back().data();
  }

  const Problem& p_;
  const VectorOps& ops_;
  const int64_t dv_pad_;    // row stride of the accumulators (AccStride)
  const int64_t max_rows_;  // MaxItemRows(p): rows of the per-worker row states
  const int workers_;
  std::vector<const Kernel*> kernels_;  // the kernel of each item
  std::vector<ScratchSize (*)(const Problem&)> families_;  // the scratch families in use
  std::vector<ScratchSize> sizes_;                         // their sizes for p
  std::vector<void*> scratch_;  // [worker][family]
  std::vector<float*> states_;  // [worker]
  std::mutex held_mu_;
  // Scratch and row states this runner uses (kept ones marked busy), alive until it ends.
  std::vector<std::shared_ptr<KeptScratch>> held_;
  std::vector<std::shared_ptr<ThreadKept>> held_states_;
  std::vector<std::vector<float>> own_states_;
  SplitSpace* split_kept_ = nullptr;   // the calling thread's kept split workspace, or
  std::unique_ptr<float[]> own_split_;  // this runner's own (a nested call)
  float* split_m_ = nullptr;  // [state_rows] partial maxima of split items' rows
  float* split_l_ = nullptr;  // [state_rows] partial sums
  float* split_acc_ = nullptr;  // [state_rows][dv_pad] partial accumulators
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The plan as a schedule: one item per task (tasks are claimed dynamically), one merge task per
// group of split items (head-major rows: the items' own order).
Schedule PlanSchedule(const Problem& p) {
  Plan plan = MakePlan(p);
  Schedule s;
  s.state_rows = plan.state_rows;
  s.task_begin.resize(plan.items.size() + 1);
  for (size_t i = 0; i <= plan.items.size(); ++i) s.task_begin[i] = static_cast<int64_t>(i);
  for (const WorkItem& w : plan.items) {
    if (w.n_split <= 1 || w.split != 0) continue;
    MergeTask t;
    t.b = w.b;
    t.h0 = w.hk * p.group() + w.g0;
    t.i0 = w.i0;
    t.nq = w.i1 - w.i0;
    t.head_major = true;
    t.r0 = 0;
    t.r1 = w.rows();
    t.n_split = w.n_split;
    t.state0 = w.state0;
    t.split_stride = w.rows();
    s.merges.push_back(t);
  }
  s.items = std::move(plan.items);
  return s;
}

}  // namespace

bool EngineSupports(const Problem& p, std::string* why) {
  const KernelChoice choice(p);
  if (why) *why = choice.why_not() ? choice.why_not() : "";
  return choice.why_not() == nullptr;
}

bool EngineRunsItem(const Problem& p, const WorkItem& w) {
  const KernelChoice choice(p);
  if (choice.why_not() != nullptr) return false;
  if (choice.forced() != nullptr) return choice.forced()->supports(p, &w) == nullptr;
  try {
    (void)choice.For(w);
    return true;
  } catch (const Error&) {
    return false;
  }
}

void RunEngine(const Problem& p) { RunSchedule(p, PlanSchedule(p), nullptr); }

void RunSchedule(const Problem& p, const Schedule& s, EngineStats* stats) {
  using Clock = std::chrono::steady_clock;
  ItemRunner run(p, s.items, s.state_rows);
  const int64_t tasks = static_cast<int64_t>(s.task_begin.size()) - 1;
  std::mutex merge_mu;  // merge totals are shared by the merge tasks
  if (stats) {
    *stats = EngineStats();
    stats->task_busy_s.assign(std::max<int64_t>(tasks, 0), 0.0);
    stats->task_cpu_s.assign(std::max<int64_t>(tasks, 0), 0.0);
    stats->thread_busy_s.assign(run.workers(), 0.0);
  }
  const Clock::time_point c0 = stats ? Clock::now() : Clock::time_point();
  ParallelFor(tasks, [&](int64_t t, int worker) {
    const Clock::time_point t0 = stats ? Clock::now() : Clock::time_point();
    const double cpu0 = stats ? ThreadCpuSeconds() : 0;
    for (int64_t i = s.task_begin[t]; i < s.task_begin[t + 1]; ++i) run.Run(s.items[i], i, worker);
    if (stats) {  // each task and each worker slot is written by one thread at a time
      const double busy = Seconds(t0, Clock::now());
      stats->task_busy_s[t] += busy;
      stats->task_cpu_s[t] += ThreadCpuSeconds() - cpu0;
      stats->thread_busy_s[worker] += busy;
    }
  }, run.workers());
  const Clock::time_point c1 = stats ? Clock::now() : Clock::time_point();
  ParallelFor(static_cast<int64_t>(s.merges.size()), [&](int64_t m, int worker) {
    const Clock::time_point t0 = stats ? Clock::now() : Clock::time_point();
    const double cpu0 = stats ? ThreadCpuSeconds() : 0;
    run.Merge(s.merges[m]);
    if (stats) {
      const double busy = Seconds(t0, Clock::now()), cpu = ThreadCpuSeconds() - cpu0;
      stats->thread_busy_s[worker] += busy;
      std::lock_guard<std::mutex> lk(merge_mu);
      stats->merge_busy_s += busy;
      stats->merge_cpu_s += cpu;
    }
  }, run.workers());
  if (stats) {
    stats->compute_wall_s = Seconds(c0, c1);
    stats->merge_wall_s = Seconds(c1, Clock::now());
  }
}

void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (data == nullptr || bytes < 4 * static_cast<int64_t>(kHuge)) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1), hi = (a + bytes) & ~(kHuge - 1);
  // A hint only: memory that cannot take huge pages (file-backed, THP off) keeps its pages.
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

void PrefillOutputs(const TensorView& out, const TensorView& lse, bool lse_real) {
  // An empty output may have a null pointer (CheckOutput allows it): never hand it to memset.
  if (out.numel() > 0) {
    const int64_t bytes = out.numel() * ElementSize(out.dtype);
    AdviseHugePages(out.data, bytes);
    // Large outputs are cleared by all workers (the first write of fresh memory is page faults
    // as much as stores).
    constexpr int64_t kPart = int64_t{1} << 22;
    char* base = static_cast<char*>(out.data);
    ParallelFor((bytes + kPart - 1) / kPart, [&](int64_t i, int) {
      std::memset(base + i * kPart, 0, std::min(kPart, bytes - i * kPart));
    });
  }
  if (lse.defined() && lse.numel() > 0) {
    float* p = static_cast<float*>(lse.data);
    std::fill(p, p + lse.numel(), lse_real ? std::numeric_limits<float>::infinity() : 0.f);
  }
}

void RunSelectedImpl(const Problem& p, const std::function<void(const Problem&)>& run_reference) {
  const Impl impl = GetImpl();
  if (impl == Impl::kReference) return run_reference(p);
  const KernelChoice choice(p);
  if (choice.why_not() == nullptr) return RunSchedule(p, PlanSchedule(p), nullptr);
  if (impl == Impl::kEngine)
    Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call",
         choice.why_not());
  // A forced kernel is a request to run that kernel: never a silent switch to the reference.
  if (choice.forced() != nullptr)
    Fail(ErrorCode::kUnsupported, "kernel",
         Str("the forced kernel ", choice.forced()->name, " cannot run this call"),
         choice.why_not());
  run_reference(p);
}

void RunSelectedImpl(const Problem& p) { RunSelectedImpl(p, RunReference); }

}  // namespace openfia::internal
