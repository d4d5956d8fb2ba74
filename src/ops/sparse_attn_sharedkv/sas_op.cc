// openfia: SparseAttnSharedkv entry points: validate (metadata included) -> pre-fill ->
// canonicalize -> the engine where EngineSupports says yes (kAuto, kEngine), else the reference.
//
// The plan (the caller's metadata, or one made here for the thread count) is executed: each
// compute record is one engine task whose items are its pieces' (query token, S2 chunk) slices of
// the key lists; the split units' partial states are merged by the reduce records, chunk by chunk
// in order. The S2 grid depends on the configuration only (metadata_plan.cc), each item on its
// piece only, so output and lse are bitwise the same for every plan and every thread count. The
// reference computes whole units (rows are independent there): each record the units whose first
// piece it holds.
#include <algorithm>
#include <map>
#include <atomic>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/outputs.h"
#include "common/views.h"
#include "engine/engine.h"
#include "openfia/runtime.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"
#include "reference/reference.h"

namespace openfia {
namespace {

constexpr const char* kOp = "npu_sparse_attn_sharedkv";

// The rows of units [u0, u1) as a Problem over the same storage: per batch the query rows
// [lo, hi) of the overlapping M blocks (q_begin/q_row_base shifted, so out/lse rows and key
// lists address the same places), q_len 0 elsewhere.
internal::Problem Slice(const internal::Problem& full, const internal::SasUnits& u, int64_t u0,
                        int64_t u1) {
  internal::Problem p = full;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t first = std::max(u0, u.begin[b]) - u.begin[b];
    const int64_t last = std::min(u1, u.begin[b + 1]) - u.begin[b];
    if (last <= first) {
      p.q_len[b] = 0;
      continue;
    }
    const int64_t lo = first * u.tokens_per_block;
    const int64_t hi = std::min(full.q_len[b], last * u.tokens_per_block);
    p.q_begin[b] += lo;
    p.q_row_base[b] += lo;
    p.q_len[b] = hi - lo;
  }
  return p;
}

// Runs the reference once per compute record on up to GetNumThreads() threads: the units whose
// first piece the record holds.
void RunReferenceByPlan(const internal::Problem& p, const internal::SasUnits& u,
                        const std::vector<internal::SasWorkerRange>& ranges) {
  std::vector<std::pair<int64_t, int64_t>> unit_ranges;
  for (const internal::SasWorkerRange& r : ranges) {
    const auto first = [&](int64_t piece) {
      return std::lower_bound(u.piece_begin.begin(), u.piece_begin.end() - 1, piece) -
             u.piece_begin.begin();
    };
    const int64_t u0 = first(r.piece_begin), u1 = first(r.piece_end);
    if (u0 < u1) unit_ranges.push_back({u0, u1});
  }
  const int64_t threads = std::min<int64_t>(std::max(1, GetNumThreads()),
                                            static_cast<int64_t>(unit_ranges.size()));
  if (threads <= 1) {
    for (const auto& r : unit_ranges) internal::RunReference(Slice(p, u, r.first, r.second));
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    try {
      for (size_t k = next++; k < unit_ranges.size(); k = next++)
        internal::RunReference(Slice(p, u, unit_ranges[k].first, unit_ranges[k].second));
    } catch (...) {  // e.g. std::bad_alloc: rethrown on the calling thread
      std::lock_guard<std::mutex> lk(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // The system refused a thread: the ones started and this one share the work (the ranges
    // are claimed dynamically, so the result is the same).
  }
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

namespace internal {

Schedule SasSchedule(const Problem& p, const SasConfig& c, const SasUnits& u,
                     const std::vector<SasWorkerRange>& ranges, const int32_t* words) {
  Schedule s;
  s.state_rows = u.state_rows;
  s.task_begin.push_back(0);
  // At most kItemRows heads per item: MaxItemRows sizes the engine's scratch and row states by it
  // for sparse problems (kMaxRows here overran them from 129 query heads on).
  const int64_t G = c.group(), g_chunk = std::min<int64_t>(G, kItemRows);
  for (const SasWorkerRange& r : ranges) {
    for (int64_t piece = r.piece_begin; piece < r.piece_end; ++piece) {
      const int64_t x = u.UnitOfPiece(piece), chunk = piece - u.piece_begin[x];
      const int64_t b = u.batch_of[x], t0 = (x - u.begin[b]) * u.tokens_per_block;
      const bool split = u.chunks[x] > 1, last = chunk + 1 == u.chunks[x];
      // CFA / SWA units (no index lists) of whole groups: items of several consecutive tokens
      // (up to kItemRows rows) where a kernel of the selection takes them, so that the window
      // rows the tokens share are gathered and packed once. Which tokens share an item depends
      // on the unit only, so the result is the same for every plan.
      const int64_t multi = !split && c.cmp_topk == 0 && p.h_kv == 1 && G <= kItemRows
                                ? std::min<int64_t>(kItemRows / G, u.tokens[x])
                                : 1;
      int64_t t_single = 0;  // tokens before it are in multi-token items
      for (int64_t t = 0; multi > 1 && t < u.tokens[x]; t += multi) {
        WorkItem w = internal::SparseRowItem(p, b, t0 + t, 0, 0, G);
        w.i1 = t0 + std::min(t + multi, u.tokens[x]);
        w.j0 = 0;
        w.j1 = 1;  // the kernel takes the union of the tokens' lists
        if (w.i1 - w.i0 < 2 || !EngineRunsItem(p, w)) break;
        s.items.push_back(w);
        t_single = w.i1 - t0;
      }
      for (int64_t t = t_single; t < u.tokens[x]; ++t) {
        const int64_t i = t0 + t;
        for (int64_t hk = 0; hk < p.h_kv; ++hk) {
          for (int64_t g0 = 0; g0 < G; g0 += g_chunk) {
            WorkItem w = internal::SparseRowItem(p, b, i, hk, g0, g_chunk);
            const int64_t len = w.j1;
            // The chunk's list positions; the planner counted capacities, so a shorter list
            // (SCFA indices ending early) leaves later chunks empty, and the last chunk takes
            // whatever remains.
            w.j0 = std::min(len, chunk * u.chunk_keys[x]);
            w.j1 = last ? len : std::min(len, (chunk + 1) * u.chunk_keys[x]);
            if (split) {
              w.split = chunk;
              w.n_split = u.chunks[x];
              // Unit row (query-major, head-minor as the NPU's M axis): t * G + head.
              w.state0 = u.slot_row0[x] + chunk * u.rows(x) + t * G + g0;
            }
            s.items.push_back(w);
          }
        }
      }
    }
    s.task_begin.push_back(static_cast<int64_t>(s.items.size()));
  }
  // The merges, one per reduce record (in the metadata, already checked against the grid).
  for (int64_t v = 0; v < kSasReduceRecords; ++v) {
    const int32_t* rec = words + kSasReduceBase + v * kSasRecordWords;
    if (rec[kFdEnable] == 0) continue;
    const int64_t b = rec[kFdBn2] / c.n2, x = u.begin[b] + rec[kFdM];
    MergeTask t;
    t.b = b;
    t.h0 = (rec[kFdBn2] % c.n2) * G;
    t.heads = G;
    t.i0 = rec[kFdM] * u.tokens_per_block;
    t.r0 = rec[kFdMStart];
    t.r1 = rec[kFdMStart] + rec[kFdMNum];
    t.n_split = rec[kFdWorkspaceNum];
    t.state0 = u.slot_row0[x];
    t.split_stride = u.rows(x);
    s.merges.push_back(t);
  }
  return s;
}

void RunSas(const SasArgs& caller_args, const TensorView& attention_out,
            const TensorView& softmax_lse, EngineStats* stats) {
  OpScope scope(kOp);
  try {
    Snapshot snap;
    const SasArgs args = SnapshotSas(caller_args, &snap);
    SasConfig config;
    const SasOutputSpec spec = ValidateSas(args, &config);  // verifies metadata
    CheckOutput(attention_out, "attention_out", spec.attention_out_sizes,
                spec.attention_out_dtype);
    if (args.return_softmax_lse || softmax_lse.defined())
      CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);
    const SasArgs& a = caller_args;
    CheckOutputsDisjoint(
        {{"attention_out", &attention_out}, {"softmax_lse", &softmax_lse}},
        {{"q", &a.q}, {"ori_kv", &a.ori_kv}, {"cmp_kv", &a.cmp_kv},
         {"ori_sparse_indices", &a.ori_sparse_indices},
         {"cmp_sparse_indices", &a.cmp_sparse_indices}, {"ori_block_table", &a.ori_block_table},
         {"cmp_block_table", &a.cmp_block_table}, {"cu_seqlens_q", &a.cu_seqlens_q},
         {"cu_seqlens_ori_kv", &a.cu_seqlens_ori_kv}, {"cu_seqlens_cmp_kv", &a.cu_seqlens_cmp_kv},
         {"seqused_kv", &a.seqused_kv}, {"sinks", &a.sinks}, {"metadata", &a.metadata}});

    // The plan: the caller's (its snapshot, already verified against this call) or one made
    // here.
    const std::vector<int32_t> words =
        args.metadata.defined()
            ? std::vector<int32_t>(static_cast<const int32_t*>(args.metadata.data),
                                   static_cast<const int32_t*>(args.metadata.data) +
                                       kSasMetadataWords)
            : PlanSas(config, SasDefaultWorkers());
    const std::vector<SasWorkerRange> ranges = VerifySasPlan(config, words.data());
    const SasUnits units = SasWorkUnits(config);

    const Problem p = CanonicalizeSas(args, config, attention_out,
                                      args.return_softmax_lse ? softmax_lse : TensorView());
    // As RunSelectedImpl (common/dispatch.h) decides, with the plan's schedule for the engine.
    const Impl impl = GetImpl();
    std::string why;
    if (impl != Impl::kReference && EngineSupports(p, &why)) {
      // The schedule writes every row of out (and of lse when requested): rows without keys get
      // 0 / +inf from the epilogue, and q has no padding rows (BSND rows are all S1 tokens). So
      // only the placeholder lse of return_softmax_lse=False is pre-filled: a prefill output is
      // hundreds of MB that would otherwise be written twice.
      if (!args.return_softmax_lse && softmax_lse.defined() && softmax_lse.numel() > 0)
        *static_cast<float*>(softmax_lse.data) = 0.f;  // the one-element placeholder
      AdviseHugePages(attention_out.data,
                      attention_out.numel() * ElementSize(attention_out.dtype));
      RunSchedule(p, SasSchedule(p, config, units, ranges, words.data()), stats);
    } else if (impl == Impl::kEngine) {
      Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call", why);
    } else {
      // Pre-fill: rows without keys keep 0 and lse +inf; return_softmax_lse=False gives a 0.
      PrefillOutputs(attention_out, softmax_lse, args.return_softmax_lse);
      RunReferenceByPlan(p, units, ranges);
    }
  } catch (const std::bad_alloc&) {
    FailAlloc("the call's working buffers", -1);
  }
}

std::map<std::string, std::vector<double>> SparseAttnSharedkvBusy(
    const SasArgs& args, const TensorView& attention_out, const TensorView& softmax_lse) {
  EngineStats st;
  st.compute_wall_s = -1;  // stays negative when the reference runs (no engine timing)
  RunSas(args, attention_out, softmax_lse, &st);
  if (st.compute_wall_s < 0) return {};
  return {{"workers", st.task_busy_s},
          {"workers_cpu", st.task_cpu_s},
          {"threads", st.thread_busy_s},
          {"merge", {st.merge_busy_s}},
          {"merge_cpu", {st.merge_cpu_s}},
          {"compute_wall", {st.compute_wall_s}},
          {"merge_wall", {st.merge_wall_s}}};
}

}  // namespace internal

SasOutputSpec SparseAttnSharedkvOutputSpec(const SasArgs& args) {
  internal::OpScope scope(kOp);
  try {
    internal::Snapshot snap;
    internal::SasConfig config;
    return internal::ValidateSas(internal::SnapshotSas(args, &snap), &config);
  } catch (const std::bad_alloc&) {
    internal::FailAlloc("the call's index tensors", -1);
  }
}

void SparseAttnSharedkv(const SasArgs& args, const TensorView& attention_out,
                        const TensorView& softmax_lse) {
  internal::RunSas(args, attention_out, softmax_lse, nullptr);
}

}  // namespace openfia
