// openfia: SparseAttnSharedkv entry points: validate (metadata included) -> pre-fill ->
// canonicalize -> dispatch like FIA: the engine where EngineSupports says yes, else the reference.
//
// The plan (the caller's metadata, or one made here for the thread count) distributes the
// reference's work: each compute record's units, i.e. contiguous runs of whole query tokens, are
// computed by one task. Rows are independent in the reference, so the result is bitwise the same
// for every plan and every thread count.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/dispatch.h"
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

// Runs the reference once per compute range on up to GetNumThreads() threads.
void RunReferenceByPlan(const internal::Problem& p, const internal::SasConfig& c,
                        const std::vector<internal::SasWorkerRange>& ranges) {
  const internal::SasUnits u = internal::SasWorkUnits(c);
  const int64_t threads =
      std::min<int64_t>(std::max(1, GetNumThreads()), static_cast<int64_t>(ranges.size()));
  if (threads <= 1) {
    for (const internal::SasWorkerRange& r : ranges)
      internal::RunReference(Slice(p, u, r.unit_begin, r.unit_end));
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    try {
      for (size_t k = next++; k < ranges.size(); k = next++)
        internal::RunReference(Slice(p, u, ranges[k].unit_begin, ranges[k].unit_end));
    } catch (...) {  // e.g. std::bad_alloc: rethrown on the calling thread
      std::lock_guard<std::mutex> lk(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

SasOutputSpec SparseAttnSharedkvOutputSpec(const SasArgs& args) {
  internal::OpScope scope(kOp);
  internal::SasConfig config;
  return internal::ValidateSas(args, &config);
}

void SparseAttnSharedkv(const SasArgs& args, const TensorView& attention_out,
                        const TensorView& softmax_lse) {
  internal::OpScope scope(kOp);
  internal::SasConfig config;
  const SasOutputSpec spec = internal::ValidateSas(args, &config);  // verifies metadata
  internal::CheckOutput(attention_out, "attention_out", spec.attention_out_sizes,
                        spec.attention_out_dtype);
  if (args.return_softmax_lse || softmax_lse.defined())
    internal::CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);

  // The plan: the caller's (already verified against this call) or one made here.
  const std::vector<int32_t> words =
      args.metadata.defined()
          ? std::vector<int32_t>(static_cast<const int32_t*>(args.metadata.data),
                                 static_cast<const int32_t*>(args.metadata.data) +
                                     kSasMetadataWords)
          : internal::PlanSas(config, internal::SasDefaultWorkers());
  const std::vector<internal::SasWorkerRange> ranges =
      internal::VerifySasPlan(config, words.data());

  // Pre-fill: rows without keys keep 0 and lse +inf; return_softmax_lse=False gives a 0.
  internal::PrefillOutputs(attention_out, softmax_lse, args.return_softmax_lse);

  const internal::Problem p = internal::CanonicalizeSas(
      args, config, attention_out, args.return_softmax_lse ? softmax_lse : TensorView());

  internal::RunSelectedImpl(
      p, [&](const internal::Problem& q) { RunReferenceByPlan(q, config, ranges); });
}

}  // namespace openfia
