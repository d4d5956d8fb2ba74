// openfia: KvQuantSparseFlashAttention entry points: snapshot the index tensors -> validate ->
// canonicalize -> dispatch (the same reference/engine dispatch as FusedInferAttentionScore).
#include <new>

#include "common/check.h"
#include "common/outputs.h"
#include "common/views.h"
#include "engine/engine.h"
#include "openfia/kv_quant_sparse_flash_attention.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"

namespace openfia {
namespace {

constexpr const char* kOpName = "npu_kv_quant_sparse_flash_attention";

// `a` with its index tensors (the values that address memory) replaced by copies `snap` owns. A
// block_table without a paged cache has no effect, so the call does not take it at all.
KvqsfaArgs WithSnapshot(const KvqsfaArgs& a, internal::Snapshot* snap) {
  KvqsfaArgs c = a;
  c.sparse_indices = snap->Take(a.sparse_indices, "sparse_indices");
  c.block_table =
      a.layout_kv == "PA_BSND" ? snap->Take(a.block_table, "block_table") : TensorView();
  c.actual_seq_lengths_query = snap->Take(a.actual_seq_lengths_query, "actual_seq_lengths_query");
  c.actual_seq_lengths_kv = snap->Take(a.actual_seq_lengths_kv, "actual_seq_lengths_kv");
  return c;
}

}  // namespace

KvqsfaOutputSpec KvQuantSparseFlashAttentionOutputSpec(const KvqsfaArgs& args) {
  internal::OpScope scope(kOpName);
  try {
    internal::Snapshot snap;
    return internal::ValidateKvqsfa(WithSnapshot(args, &snap)).spec;
  } catch (const std::bad_alloc&) {
    internal::FailAlloc("the call's index tensors", -1);
  }
}

void KvQuantSparseFlashAttention(const KvqsfaArgs& caller_args, const TensorView& attention_out) {
  internal::OpScope scope(kOpName);
  try {
    internal::Snapshot snap;
    const KvqsfaArgs args = WithSnapshot(caller_args, &snap);
    const internal::KvqsfaShape shape = internal::ValidateKvqsfa(args);
    internal::CheckOutput(attention_out, "attention_out", shape.spec.attention_out_sizes,
                          shape.spec.attention_out_dtype);
    internal::CheckOutputsDisjoint(
        {{"attention_out", &attention_out}},
        {{"query", &caller_args.query}, {"key", &caller_args.key}, {"value", &caller_args.value},
         {"sparse_indices", &caller_args.sparse_indices},
         {"block_table", &caller_args.block_table},
         {"actual_seq_lengths_query", &caller_args.actual_seq_lengths_query},
         {"actual_seq_lengths_kv", &caller_args.actual_seq_lengths_kv},
         {"sinks", &caller_args.sinks}});

    // Pre-fill: rows that attend nothing, padding rows and rows past the actual lengths are 0.
    internal::PrefillOutputs(attention_out, TensorView(), false);

    const internal::Problem p = internal::CanonicalizeKvqsfa(args, shape, attention_out);
    if (p.batch == 0) return;

    internal::RunSelectedImpl(p);
  } catch (const std::bad_alloc&) {
    internal::FailAlloc("the call's working buffers", -1);
  }
}

}  // namespace openfia
