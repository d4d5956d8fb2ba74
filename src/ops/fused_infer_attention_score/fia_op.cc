// openfia: FusedInferAttentionScore entry points: validate -> canonicalize -> dispatch.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"
#include "engine/engine.h"
#include "openfia/fused_infer_attention_score.h"
#include "openfia/runtime.h"
#include "ops/fused_infer_attention_score/fia_internal.h"
#include "reference/reference.h"

namespace openfia {
namespace {
using internal::Str;

void CheckOutput(const TensorView& t, const char* name, const std::vector<int64_t>& sizes,
                 DType dtype) {
  OPENFIA_CHECK(t.defined(), name, "must be provided", "None");
  OPENFIA_CHECK(t.sizes == sizes, name, Str("must have shape ", sizes), t.shape_string());
  OPENFIA_CHECK(t.dtype == dtype, name, Str("must have dtype ", DTypeName(dtype)),
                DTypeName(t.dtype));
  OPENFIA_CHECK(t.is_contiguous(), name, "must be contiguous", "strides ", t.strides);
  OPENFIA_CHECK(t.numel() == 0 || t.data != nullptr, name, "must not be a null pointer", "null");
}

}  // namespace

FiaOutputSpec FusedInferAttentionScoreOutputSpec(const FiaArgs& args) {
  internal::OpScope scope("npu_fused_infer_attention_score");
  return internal::ValidateFia(args);
}

void FusedInferAttentionScore(const FiaArgs& args, const TensorView& attention_out,
                              const TensorView& softmax_lse) {
  using internal::Str;
  internal::OpScope scope("npu_fused_infer_attention_score");
  const FiaOutputSpec spec = internal::ValidateFia(args);
  CheckOutput(attention_out, "attention_out", spec.attention_out_sizes, spec.attention_out_dtype);
  if (args.softmax_lse_flag || softmax_lse.defined())
    CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);

  // Pre-fill: every output element not written by a valid row is 0, every lse entry +inf
  // (softmax_lse_flag=False: a one-element 0).
  if (attention_out.numel() > 0)
    std::memset(attention_out.data, 0, attention_out.numel() * ElementSize(attention_out.dtype));
  if (softmax_lse.defined() && softmax_lse.numel() > 0) {
    float* lse = static_cast<float*>(softmax_lse.data);
    const float fill = args.softmax_lse_flag ? std::numeric_limits<float>::infinity() : 0.f;
    for (int64_t i = 0; i < softmax_lse.numel(); ++i) lse[i] = fill;
  }
  if (attention_out.numel() == 0) return;

  const internal::Problem p = internal::CanonicalizeFia(
      args, spec, attention_out, args.softmax_lse_flag ? softmax_lse : TensorView());
  if (p.batch == 0) return;

  const Impl impl = GetImpl();
  std::string why;
  if (impl == Impl::kReference) {
    internal::RunReference(p);
  } else if (internal::EngineSupports(p, &why)) {
    internal::RunEngine(p);
  } else if (impl == Impl::kEngine) {
    internal::Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call", why);
  } else {
    internal::RunReference(p);
  }
}

}  // namespace openfia
