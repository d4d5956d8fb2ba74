// openfia: FusedInferAttentionScore entry points: snapshot the index tensors -> analyse once ->
// canonicalize -> dispatch.
#include <new>
#include <vector>

#include "common/check.h"
#include "common/outputs.h"
#include "common/views.h"
#include "engine/engine.h"
#include "openfia/fused_infer_attention_score.h"
#include "ops/fused_infer_attention_score/fia_geometry.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia {
namespace internal {

// What one call owns: copies of the tensors whose values address memory (block_table, the
// padding sizes, the prefix length), the arguments with those copies in their place, and the
// analysis of those arguments. Validation and compute read one set of values, whatever the
// caller does to its tensors meanwhile.
struct FiaCallState {
  Snapshot snap;
  FiaArgs args;
  FiaGeometry g;

  explicit FiaCallState(const FiaArgs& a) : args(a) {
    args.block_table = snap.Take(a.block_table, "block_table");
    args.query_padding_size = snap.Take(a.query_padding_size, "query_padding_size");
    args.kv_padding_size = snap.Take(a.kv_padding_size, "kv_padding_size");
    args.actual_shared_prefix_len = snap.Take(a.actual_shared_prefix_len, "actual_shared_prefix_len");
    g = AnalyzeFia(args);
  }
};

}  // namespace internal

namespace {

constexpr const char* kOp = "npu_fused_infer_attention_score";

// Every tensor argument of a call, named.
std::vector<internal::NamedView> Inputs(const FiaArgs& a) {
  std::vector<internal::NamedView> v = {
      {"query", &a.query}, {"key", &a.key}, {"value", &a.value}, {"pse_shift", &a.pse_shift},
      {"atten_mask", &a.atten_mask}, {"dequant_scale1", &a.dequant_scale1},
      {"quant_scale1", &a.quant_scale1}, {"dequant_scale2", &a.dequant_scale2},
      {"quant_scale2", &a.quant_scale2}, {"quant_offset2", &a.quant_offset2},
      {"antiquant_scale", &a.antiquant_scale}, {"antiquant_offset", &a.antiquant_offset},
      {"block_table", &a.block_table}, {"query_padding_size", &a.query_padding_size},
      {"kv_padding_size", &a.kv_padding_size}, {"key_antiquant_scale", &a.key_antiquant_scale},
      {"key_antiquant_offset", &a.key_antiquant_offset},
      {"value_antiquant_scale", &a.value_antiquant_scale},
      {"value_antiquant_offset", &a.value_antiquant_offset},
      {"key_shared_prefix", &a.key_shared_prefix},
      {"value_shared_prefix", &a.value_shared_prefix},
      {"actual_shared_prefix_len", &a.actual_shared_prefix_len}, {"query_rope", &a.query_rope},
      {"key_rope", &a.key_rope}, {"key_rope_antiquant_scale", &a.key_rope_antiquant_scale}};
  for (const TensorView& t : a.key_list) v.push_back({"key", &t});
  for (const TensorView& t : a.value_list) v.push_back({"value", &t});
  return v;
}

}  // namespace

FiaCall::FiaCall(const FiaArgs& args) : args_(&args) {
  internal::OpScope scope(kOp);
  try {
    s_ = std::make_unique<internal::FiaCallState>(args);
  } catch (const std::bad_alloc&) {
    internal::FailAlloc("the call's bookkeeping", -1);
  }
}

FiaCall::~FiaCall() = default;
FiaCall::FiaCall(FiaCall&&) noexcept = default;
FiaCall& FiaCall::operator=(FiaCall&&) noexcept = default;

const FiaOutputSpec& FiaCall::output_spec() const { return s_->g.spec; }

void FiaCall::Run(const TensorView& attention_out, const TensorView& softmax_lse) const {
  internal::OpScope scope(kOp);
  const FiaArgs& args = s_->args;
  const FiaOutputSpec& spec = s_->g.spec;
  const bool lse_flag = args.softmax_lse_flag;
  try {
    internal::CheckOutput(attention_out, "attention_out", spec.attention_out_sizes,
                          spec.attention_out_dtype);
    if (lse_flag || softmax_lse.defined())
      internal::CheckOutput(softmax_lse, "softmax_lse", spec.softmax_lse_sizes, DType::kFloat32);
    internal::CheckOutputsDisjoint(
        {{"attention_out", &attention_out}, {"softmax_lse", &softmax_lse}}, Inputs(*args_));

    // Pre-fill: every output element not written by a valid row is 0, every lse entry +inf
    // (softmax_lse_flag=False: a one-element 0).
    internal::PrefillOutputs(attention_out, softmax_lse, lse_flag);
    // An empty output still has its lse rows when they were asked for (a value head size of 0:
    // the lse does not depend on V).
    if (attention_out.numel() == 0 && (!lse_flag || softmax_lse.numel() == 0)) return;

    const internal::Problem p =
        internal::CanonicalizeFia(args, s_->g, attention_out, lse_flag ? softmax_lse : TensorView());
    if (p.batch == 0) return;

    internal::RunSelectedImpl(p);
  } catch (const std::bad_alloc&) {
    internal::FailAlloc("the call's working buffers", -1);
  }
}

FiaOutputSpec FusedInferAttentionScoreOutputSpec(const FiaArgs& args) {
  return FiaCall(args).output_spec();
}

void FusedInferAttentionScore(const FiaArgs& args, const TensorView& attention_out,
                              const TensorView& softmax_lse) {
  FiaCall(args).Run(attention_out, softmax_lse);
}

}  // namespace openfia
