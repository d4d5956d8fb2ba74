// openfia internal: the stages of one FusedInferAttentionScore call (see ARCHITECTURE.md).
#pragma once

#include "common/problem.h"
#include "openfia/fused_infer_attention_score.h"

namespace openfia::internal {

// fia_validate.cc: every documented constraint, in a fixed order; throws openfia::Error naming the
// argument, the rule and the value. Reads small host-side tensors (padding sizes, prefix length,
// block_table ids) to prove every memory index in range. Returns the output shapes/dtypes.
FiaOutputSpec ValidateFia(const FiaArgs& args);

// fia_canonicalize.cc: lowers validated arguments into the canonical Problem (layouts as strides,
// sparse_mode/pre/next as per-batch bands, antiquant modes as Dequant strides, paging, prefix,
// padding and tensor lists as KvOperand + per-batch ranges). `out`/`lse` are the caller's
// contiguous outputs (lse absent unless softmax_lse_flag).
Problem CanonicalizeFia(const FiaArgs& args, const FiaOutputSpec& spec, const TensorView& out,
                        const TensorView& lse);

}  // namespace openfia::internal
