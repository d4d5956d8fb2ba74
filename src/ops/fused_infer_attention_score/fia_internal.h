// openfia internal: the stages of one FusedInferAttentionScore call: AnalyzeFia (fia_validate.cc,
// declared in fia_geometry.h) once, then CanonicalizeFia, then the engine or the reference.
#pragma once

#include "common/problem.h"
#include "openfia/fused_infer_attention_score.h"
#include "ops/fused_infer_attention_score/fia_geometry.h"

namespace openfia::internal {

// fia_canonicalize.cc: lowers an analysed call into the canonical Problem (layouts as strides,
// sparse_mode/pre/next as per-batch bands, antiquant modes as Dequant strides, paging, prefix,
// padding and tensor lists as KvOperand + per-batch ranges). `out`/`lse` are the caller's
// contiguous outputs (lse absent unless softmax_lse_flag). The Problem points into `args` and `g`.
Problem CanonicalizeFia(const FiaArgs& args, const FiaGeometry& g, const TensorView& out,
                        const TensorView& lse);

}  // namespace openfia::internal
