// openfia: engine entry points: support check, plan, parallel tile loop, split-KV merge and the
// epilogue (normalization, sinks, output rounding, int8 post-quantization, lse).
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/online_softmax.h"
#include "common/parallel.h"
#include "engine/plan.h"
#include "simd/scalar_convert.h"
#include "simd/simd.h"

namespace openfia::internal {
namespace {

bool IsFloat(Elem e) { return e == Elem::kF32 || e == Elem::kF16 || e == Elem::kBF16; }

// Why the engine cannot run a KV operand (empty when it can).
std::string KvWhy(const char* name, const KvOperand& kv, Elem q) {
  // Antiquant (int8 / int4 storage with a Dequant) is dequantized in the kernel's packing; a
  // float operand must match the query dtype (the NPU has no mixed float matmul).
  const auto why = [&](const Operand& o, const Dequant& dq, const char* what) -> std::string {
    if (dq.kind != Dequant::Kind::kNone) {
      // Per-tile scales (KvQuantSparseFlashAttention rows) read int8 / fp8 e4m3 / hifloat8.
      const bool tile8 = dq.kind == Dequant::Kind::kPerTile &&
                         (o.elem == Elem::kFP8E4M3 || o.elem == Elem::kHiF8);
      if (o.elem != Elem::kI8 && o.elem != Elem::kI4 && !tile8)
        return std::string(name) + what + " antiquant of a storage other than int8/int4/fp8";
      if (!IsFloat(dq.scale_elem) || (dq.offset != nullptr && !IsFloat(dq.offset_elem)))
        return std::string(name) + what + " antiquant scale/offset dtype";
      return "";
    }
    if (o.elem != q) return std::string(name) + what + " dtype differs from the query";
    return "";
  };
  std::string w = why(kv.cache, kv.dequant, "");
  if (w.empty() && kv.prefix.present()) w = why(kv.prefix, kv.prefix_dequant, " shared prefix");
  return w;
}

// Writes the final output row (b, h, query i) from its merged state.
void Epilogue(const Problem& p, int64_t b, int64_t h, int64_t i, const SoftmaxRow& st,
              const float* acc, const KernelTable& k) {
  const float sink = p.sinks ? p.sinks[h] : std::numeric_limits<float>::quiet_NaN();
  RowFinal f;
  const bool any = FinalizeSoftmax(st, sink, &f);
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
    if (quant) {  // SPEC 2.7: y = x * qs2 + qo2 in fp32, half away from zero, saturated
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

bool EngineSupports(const Problem& p, std::string* why) {
  std::string w;
  const Elem q = p.q.elem;
  if (p.full_quant) {
    // attend_fullquant-inl.h: int8 rows reachable with one channel stride, no rope, no sinks.
    const auto plain8 = [](const Operand& o) {
      return !o.present() || (o.elem == Elem::kI8 && o.d_split == 0);
    };
    if (q != Elem::kI8 || !plain8(p.q) || !plain8(p.k.cache) || !plain8(p.k.prefix) ||
        !plain8(p.v.cache) || !plain8(p.v.prefix) || p.k.dequant.kind != Dequant::Kind::kNone ||
        p.v.dequant.kind != Dequant::Kind::kNone || p.d_rope > 0 || p.sinks != nullptr ||
        !p.key_offset.empty() || p.k2.cache.present() || (p.pse && !IsFloat(p.pse_elem)))
      w = "int8 full quantization with rope, sinks, antiquant, NZ or sparse keys";
    else if (!IsFloat(p.out_elem) && p.out_elem != Elem::kI8)
      w = "output dtype";
    else if (p.out_elem == Elem::kI8 && p.quant_scale2.empty())
      w = "int8 output without quant_scale2";
  }
  // The second key source is read through the packing's prefix slot (attend-inl.h WithSecond),
  // so it needs sparse key lists and a problem without a shared prefix.
  else if ((!p.key_source.empty() || p.k2.cache.present()) &&
           (p.key_offset.empty() || p.prefix_len != 0 || p.k.prefix.present()))
    w = "a second key source without sparse key lists, or with a shared prefix";
  else if (!p.key_offset.empty() && p.d_rope > 0 && p.k2.cache.present())
    w = "MLA rope with a second key source";
  else if (!IsFloat(q)) w = "query dtype other than float32/float16/bfloat16";
  else if (p.d_rope > 0 && p.q_rope.elem != q) w = "query_rope dtype differs from the query";
  else if (!(w = KvWhy("key", p.k, q)).empty()) {
  } else if (!(w = KvWhy("value", p.v, q)).empty()) {
  } else if (p.k2.cache.present() && !(w = KvWhy("second key", p.k2, q)).empty()) {
  } else if (p.k2.cache.present() && !(w = KvWhy("second value", p.v2, q)).empty()) {
  } else if (p.d_rope > 0 && !(w = KvWhy("key_rope", p.k_rope, q)).empty()) {
  } else if (!IsFloat(p.out_elem) && p.out_elem != Elem::kI8) w = "output dtype";
  else if (p.pse && !IsFloat(p.pse_elem)) w = "pse_shift dtype";
  else if (p.out_elem == Elem::kI8 && p.quant_scale2.empty()) w = "int8 output without quant_scale2";
  if (why) *why = w;
  return w.empty();
}

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

// Per-thread scratch kept from one call to the next: a fresh ScratchBuffer and row states per
// worker per call cost page faults on up to ~1.3 MB of new memory each time (a quarter of a
// 0.4 ms SparseAttnSharedkv decode); a kept one is cleared (ScratchBuffer::Clear: exactly the
// state a fresh one has) instead. The row states need no clearing: every kernel resets its
// item's states before reading them.
struct ThreadScratch {
  std::vector<int64_t> key;
  std::unique_ptr<ScratchBuffer> scratch;
  std::vector<float> states;
  bool busy = false;  // held by a runner of this thread (a nested call makes its own)
};
ThreadScratch& LocalScratch() {
  thread_local ThreadScratch t;
  return t;
}

// The split workspace, kept by the calling thread from one call to the next (grown, never
// shrunk): a fresh one per call took page faults on its first writes, in the workers (V3, a
// 2-chunk SparseAttnSharedkv decode: 270 KB, 66 fresh pages per call). Not cleared (Uninit).
struct SplitSpace {
  std::unique_ptr<float[]> buf;
  int64_t size = 0;
  bool busy = false;  // held by a runner of this thread (a nested call makes its own)
};
SplitSpace& LocalSplitSpace() {
  thread_local SplitSpace s;
  return s;
}

// What the items of one RunEngine / RunSchedule call share: kernels, per-worker scratch (made on
// first use by that worker) and the split workspace.
class ItemRunner {
 public:
  ItemRunner(const Problem& p, int64_t state_rows)
      : p_(p), k_(ActiveKernels()), dv_pad_(AccStride(p.d_v)),
        max_rows_(MaxItemRows(p)),
        scratch_(NumWorkers(), nullptr), states_(NumWorkers(), nullptr),
        own_scratch_(NumWorkers()), own_states_(NumWorkers()) {
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

  // Gives back the kept per-thread scratch and split workspace this runner held.
  ~ItemRunner() {
    for (ThreadScratch* t : held_) t->busy = false;
    if (split_kept_) split_kept_->busy = false;
  }

  // Attends item w on `worker`; an unsplit item's rows are finished (epilogue), a split item's
  // partial states stay in the workspace.
  void Run(const WorkItem& w, int worker) {
    if (!scratch_[worker]) {
      // This thread's kept scratch when it is free and made for the same sizes, else its own.
      ThreadScratch& t = LocalScratch();
      std::vector<int64_t> key = ScratchBuffer::Key(p_);
      if (!t.busy) {
        if (t.scratch && t.key == key) {
          t.scratch->Clear();
        } else {
          t.scratch = std::make_unique<ScratchBuffer>(p_);
          t.key = std::move(key);
        }
        t.busy = true;
        {
          std::lock_guard<std::mutex> lk(held_mu_);
          held_.push_back(&t);
        }
        scratch_[worker] = t.scratch.get();
        // Sized by the largest item of this plan (a 512-row prefill item only where one exists).
        if (t.states.size() < static_cast<size_t>(max_rows_ * (2 + dv_pad_)))
          t.states.resize(max_rows_ * (2 + dv_pad_));
        states_[worker] = t.states.data();
      } else {
        own_scratch_[worker] = std::make_unique<ScratchBuffer>(p_);
        own_states_[worker].resize(max_rows_ * (2 + dv_pad_));
        scratch_[worker] = own_scratch_[worker].get();
        states_[worker] = own_states_[worker].data();
      }
    }
    const int64_t rows = w.rows(), nq = w.i1 - w.i0;
    RowStates rs;
    if (w.n_split > 1) {
      rs = {split_m_ + w.state0, split_l_ + w.state0, split_acc_ + w.state0 * dv_pad_, dv_pad_};
    } else {
      float* st = states_[worker];
      rs = {st, st + max_rows_, st + 2 * max_rows_, dv_pad_};
    }
    k_.attend(p_, w, scratch_[worker]->get(), rs);
    if (w.n_split > 1) return;
    for (int64_t r = 0; r < rows; ++r) {
      const SoftmaxRow st{rs.m[r], rs.l[r]};
      Epilogue(p_, w.b, w.hk * p_.group() + w.g0 + r / nq, w.i0 + r % nq, st,
               rs.acc + r * dv_pad_, k_);
    }
  }

  // Merges the partial states of the rows of `t` and finishes them. Two passes per row: the
  // common max M over the non-empty splits, then l = sum w_s l_s and acc = sum w_s acc_s with
  // w_s = exp(m_s - M), both in split order 0, 1, ... (a fixed order of operations, so the result
  // depends on the states only, never on who computed them). Cheaper than a left fold of
  // MergeSoftmax: one exp per split and one multiply-add per element.
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
          if (k_.axpy != nullptr) k_.axpy(ws, src, dst, n);
          else for (int64_t d = 0; d < n; ++d) dst[d] += ws * src[d];
        }
      }
      Epilogue(p_, t.b, t.h0 + r % t.heads, t.i0 + r / t.heads, st, acc.data(), k_);
    }
  }

  const float* split_m() const { return split_m_; }
  const float* split_l() const { return split_l_; }
  const float* split_acc() const { return split_acc_; }
  int64_t dv_pad() const { return dv_pad_; }

 private:
  const Problem& p_;
  const KernelTable& k_;
  const int64_t dv_pad_;  // row stride of the accumulators (AccStride)
  const int64_t max_rows_;  // MaxItemRows(p): rows of the per-worker row states
  std::vector<ScratchBuffer*> scratch_;  // per worker: a thread's kept one or own_scratch_
  std::vector<float*> states_;
  std::vector<std::unique_ptr<ScratchBuffer>> own_scratch_;
  std::vector<std::vector<float>> own_states_;
  std::mutex held_mu_;
  std::vector<ThreadScratch*> held_;  // kept scratch this runner holds (released at the end)
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

}  // namespace

void RunEngine(const Problem& p) {
  const Plan plan = MakePlan(p);
  ItemRunner run(p, plan.state_rows);
  ParallelFor(static_cast<int64_t>(plan.items.size()),
              [&](int64_t idx, int worker) { run.Run(plan.items[idx], worker); });

  if (plan.state_rows == 0) return;
  // Merge the splits of each row group in split order (fixed, so bitwise reproducible).
  std::vector<int64_t> firsts;
  for (int64_t i = 0; i < static_cast<int64_t>(plan.items.size()); ++i)
    if (plan.items[i].n_split > 1 && plan.items[i].split == 0) firsts.push_back(i);
  const int64_t dv_pad = run.dv_pad();
  const KernelTable& k = ActiveKernels();
  ParallelFor(static_cast<int64_t>(firsts.size()), [&](int64_t gi, int) {
    const int64_t first = firsts[gi];
    const WorkItem& w0 = plan.items[first];
    const int64_t rows = w0.rows(), nq = w0.i1 - w0.i0;
    std::vector<float> acc(dv_pad);
    for (int64_t r = 0; r < rows; ++r) {
      SoftmaxRow st;
      for (int64_t s = 0; s < w0.n_split; ++s) {
        const int64_t sr = plan.items[first + s].state0 + r;
        MergeSoftmax(st, acc.data(), SoftmaxRow{run.split_m()[sr], run.split_l()[sr]},
                     run.split_acc() + sr * dv_pad, p.d_v);
      }
      Epilogue(p, w0.b, w0.hk * p.group() + w0.g0 + r / nq, w0.i0 + r % nq, st, acc.data(), k);
    }
  });
}

void RunSchedule(const Problem& p, const Schedule& s, EngineStats* stats) {
  using Clock = std::chrono::steady_clock;
  ItemRunner run(p, s.state_rows);
  const int64_t tasks = static_cast<int64_t>(s.task_begin.size()) - 1;
  std::mutex merge_mu;  // merge totals are shared by the merge tasks
  if (stats) {
    *stats = EngineStats();
    stats->task_busy_s.assign(std::max<int64_t>(tasks, 0), 0.0);
    stats->task_cpu_s.assign(std::max<int64_t>(tasks, 0), 0.0);
    stats->thread_busy_s.assign(NumWorkers(), 0.0);
  }
  const Clock::time_point c0 = stats ? Clock::now() : Clock::time_point();
  ParallelFor(tasks, [&](int64_t t, int worker) {
    const Clock::time_point t0 = stats ? Clock::now() : Clock::time_point();
    const double cpu0 = stats ? ThreadCpuSeconds() : 0;
    for (int64_t i = s.task_begin[t]; i < s.task_begin[t + 1]; ++i) run.Run(s.items[i], worker);
    if (stats) {  // each task and each worker slot is written by one thread at a time
      const double busy = Seconds(t0, Clock::now());
      stats->task_busy_s[t] += busy;
      stats->task_cpu_s[t] += ThreadCpuSeconds() - cpu0;
      stats->thread_busy_s[worker] += busy;
    }
  });
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
  });
  if (stats) {
    stats->compute_wall_s = Seconds(c0, c1);
    stats->merge_wall_s = Seconds(c1, Clock::now());
  }
}

}  // namespace openfia::internal
