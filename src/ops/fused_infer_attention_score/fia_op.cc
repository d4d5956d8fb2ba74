// openfia: FusedInferAttentionScore entry points: analyse once -> canonicalize -> dispatch.
#include "common/check.h"
#include "common/outputs.h"
#include "engine/engine.h"
#include "openfia/fused_infer_attention_score.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia {
namespace {
constexpr const char* kOp = "npu_fused_infer_attention_score";
}

FiaCall::FiaCall(const FiaArgs& args) : args_(&args) {
  internal::OpScope scope(kOp);
  g_ = std::make_unique<internal::FiaGeometry>(internal::AnalyzeFia(args));
}

FiaCall::~FiaCall() = default;
FiaCall::FiaCall(FiaCall&&) noexcept = default;
FiaCall& FiaCall::operator=(FiaCall&&) noexcept = default;

const FiaOutputSpec& FiaCall::output_spec() const { return g_->spec; }

void FiaCall::Run(const TensorView& attention_out, const TensorView& softmax_lse) const {
  internal::OpScope scope(kOp);
  const FiaOutputSpec& spec = g_->spec;
  const bool lse_flag = args_->softmax_lse_flag;
  internal::CheckOutput(attention_out, "attention_out", spec.attention_out_sizes,
                        spec.attention_out_dtype);
  if (lse_flag || softmax_lse.defined())
    internal::CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);

  // Pre-fill: every output element not written by a valid row is 0, every lse entry +inf
  // (softmax_lse_flag=False: a one-element 0).
  internal::PrefillOutputs(attention_out, softmax_lse, lse_flag);
  if (attention_out.numel() == 0) return;

  const internal::Problem p =
      internal::CanonicalizeFia(*args_, *g_, attention_out, lse_flag ? softmax_lse : TensorView());
  if (p.batch == 0) return;

  internal::RunSelectedImpl(p);
}

FiaOutputSpec FusedInferAttentionScoreOutputSpec(const FiaArgs& args) {
  return FiaCall(args).output_spec();
}

void FusedInferAttentionScore(const FiaArgs& args, const TensorView& attention_out,
                              const TensorView& softmax_lse) {
  FiaCall(args).Run(attention_out, softmax_lse);
}

}  // namespace openfia
