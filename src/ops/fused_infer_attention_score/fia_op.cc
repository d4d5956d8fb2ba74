// openfia: FusedInferAttentionScore entry points: validate -> canonicalize -> dispatch.
#include "common/check.h"
#include "common/outputs.h"
#include "engine/engine.h"
#include "openfia/fused_infer_attention_score.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia {

FiaOutputSpec FusedInferAttentionScoreOutputSpec(const FiaArgs& args) {
  internal::OpScope scope("npu_fused_infer_attention_score");
  return internal::ValidateFia(args);
}

void FusedInferAttentionScore(const FiaArgs& args, const TensorView& attention_out,
                              const TensorView& softmax_lse) {
  internal::OpScope scope("npu_fused_infer_attention_score");
  const FiaOutputSpec spec = internal::ValidateFia(args);
  internal::CheckOutput(attention_out, "attention_out", spec.attention_out_sizes,
                        spec.attention_out_dtype);
  if (args.softmax_lse_flag || softmax_lse.defined())
    internal::CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);

  // Pre-fill: every output element not written by a valid row is 0, every lse entry +inf
  // (softmax_lse_flag=False: a one-element 0).
  internal::PrefillOutputs(attention_out, softmax_lse, args.softmax_lse_flag);
  if (attention_out.numel() == 0) return;

  const internal::Problem p = internal::CanonicalizeFia(
      args, spec, attention_out, args.softmax_lse_flag ? softmax_lse : TensorView());
  if (p.batch == 0) return;

  internal::RunSelectedImpl(p);
}

}  // namespace openfia
