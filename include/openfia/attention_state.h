// openfia: merging attention results over disjoint key sets through their softmax_lse.
//
// Attention of a query row over keys K1 u K2 (disjoint) follows from the two partial results
// alone: with lse_i = log(sum over K_i of exp(score)) and out_i the softmax-weighted values of
// K_i, lse = log(exp(lse_1) + exp(lse_2)) and out = (exp(lse_1) out_1 + exp(lse_2) out_2) /
// exp(lse). This is how split-KV work, a shared prefix computed apart from the cache, or a
// sequence split across machines (ring attention, docs/ring_attention.md) compose, from the
// (attention_out, softmax_lse) pairs FusedInferAttentionScore returns with softmax_lse_flag.
#pragma once

#include "openfia/export.h"
#include "openfia/tensor_view.h"

namespace openfia {

// One attention result, in the canonical [B, N, S, D] order whatever the operator's layout (any
// strides: a BSND output is the same memory viewed with its S and N axes swapped).
//   out: [B, N, S, D] float32, float16 or bfloat16;
//   lse: [B, N, S] or [B, N, S, 1] float32. +inf marks a row with no key (FusedInferAttention-
//        Score's rule: its out row is 0 and is not read); -inf (a zero sum) counts the same.
struct AttentionState {
  TensorView out;
  TensorView lse;
};

// dst = merge of a and b, row by row, in double, rounded once to dst's dtypes:
//   a row empty in both: out 0, lse +inf;  empty in one: the other's row;
//   a NaN lse in either: out NaN, lse NaN;
//   otherwise, with m = max(lse_a, lse_b), w_a = exp(lse_a - m), w_b = exp(lse_b - m):
//   lse = m + log(w_a + w_b), out = (w_a out_a + w_b out_b) / (w_a + w_b).
// b may be absent (both views default-constructed): dst = a in dst's dtypes.
// Every tensor has the same B, N, S (and out the same D). dst's tensors must not overlap
// themselves; dst.out may be a.out or b.out exactly (same data, dtype and strides), and
// otherwise must not overlap them (likewise lse). Throws openfia::Error (operator name
// "merge_attention_states", arguments out_a, lse_a, out_b, lse_b, out, lse) for a bad call.
// Deterministic: the same inputs give bitwise the same dst for any thread count.
OPENFIA_API void MergeAttentionStates(const AttentionState& a, const AttentionState& b,
                                      const AttentionState& dst);

}  // namespace openfia
