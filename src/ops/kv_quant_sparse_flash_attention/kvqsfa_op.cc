// openfia: KvQuantSparseFlashAttention entry points: validate -> canonicalize -> dispatch (the
// same reference/engine dispatch as FusedInferAttentionScore).
#include "common/check.h"
#include "common/outputs.h"
#include "engine/engine.h"
#include "openfia/kv_quant_sparse_flash_attention.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"

namespace openfia {
namespace {

constexpr const char* kOpName = "npu_kv_quant_sparse_flash_attention";

}  // namespace

KvqsfaOutputSpec KvQuantSparseFlashAttentionOutputSpec(const KvqsfaArgs& args) {
  internal::OpScope scope(kOpName);
  return internal::ValidateKvqsfa(args).spec;
}

void KvQuantSparseFlashAttention(const KvqsfaArgs& args, const TensorView& attention_out) {
  internal::OpScope scope(kOpName);
  const internal::KvqsfaShape shape = internal::ValidateKvqsfa(args);
  internal::CheckOutput(attention_out, "attention_out", shape.spec.attention_out_sizes,
                        shape.spec.attention_out_dtype);

  // Pre-fill: rows that attend nothing, padding rows and rows past the actual lengths are 0.
  internal::PrefillOutputs(attention_out, TensorView(), false);

  const internal::Problem p = internal::CanonicalizeKvqsfa(args, shape, attention_out);
  if (p.batch == 0) return;

  internal::RunSelectedImpl(p);
}

}  // namespace openfia
