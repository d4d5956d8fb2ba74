// openfia: FusedInferAttentionScore (torch_npu.npu_fused_infer_attention_score) on the CPU.
//
// Semantics: docs/fused_infer_attention_score.md. Argument names, order and defaults follow
// torch_npu.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "openfia/export.h"
#include "openfia/tensor_view.h"

namespace openfia {

// Every argument of the torch_npu signature. Optional tensors are absent when their TensorView is
// default-constructed (defined() == false); optional integer lists are std::nullopt for None.
struct FiaArgs {
  // Required. query: [B,S,H] (BSH), [B,S,N,D] (BSND), [B,N,S,D] (BNSD), [T,N,D] (TND) or
  // [N,T,D] (NTD), the part of input_layout before "_" (after it: the output's layout);
  // float16, bfloat16, float32 or int8.
  TensorView query;
  // key/value: same layout as query (KV_S instead of S, KV_N instead of N), or a paged cache
  // [blocknum, block_size, KV_N*D], [blocknum, KV_N, block_size, D] or NZ
  // [blocknum, KV_N, D/16 (D/32 for int8), block_size, 16 (32)] when block_table is given.
  // float16, bfloat16, float32, int8 or int32 (packed int4, last dimension in int32 units).
  // A tensor list (one [1, S_b, ...] tensor per batch) is given by key_list/value_list instead.
  TensorView key;
  TensorView value;
  std::vector<TensorView> key_list;    // tensorlist form of key (non-empty replaces `key`)
  std::vector<TensorView> value_list;  // tensorlist form of value

  TensorView pse_shift;                          // [B|1, N, Q_S', KV_S'] float16/bfloat16(/float32)
  TensorView atten_mask;                         // bool/int8/uint8, 1 = masked out
  std::optional<std::vector<int64_t>> actual_seq_lengths;     // per batch (TND: cumulative)
  std::optional<std::vector<int64_t>> actual_seq_lengths_kv;  // per batch (TND non-paged: cumulative)
  TensorView dequant_scale1;                     // [1] float32 or uint64 (fp32 bits in low word)
  TensorView quant_scale1;                       // [1] float32
  TensorView dequant_scale2;                     // [1] float32 or uint64
  TensorView quant_scale2;                       // per-tensor [1] or per-channel; float32/bfloat16
  TensorView quant_offset2;                      // same dtype and shape as quant_scale2
  TensorView antiquant_scale;                    // legacy joint K/V antiquant params (index 0 K, 1 V)
  TensorView antiquant_offset;
  TensorView block_table;                        // [B, max_blocks] int32
  TensorView query_padding_size;                 // [1] int64
  TensorView kv_padding_size;                    // [1] int64
  TensorView key_antiquant_scale;
  TensorView key_antiquant_offset;
  TensorView value_antiquant_scale;
  TensorView value_antiquant_offset;
  TensorView key_shared_prefix;                  // [1, ...] same layout as key
  TensorView value_shared_prefix;
  TensorView actual_shared_prefix_len;           // [1] int64
  TensorView query_rope;                         // MLA: query's rope part, D = 64
  TensorView key_rope;                           // MLA: key's rope part, D = 64
  TensorView key_rope_antiquant_scale;           // reserved by the source; must be absent
  // Learnable sinks (the current aclnn interface's learnableSink): [num_heads] bfloat16 (float16,
  // float32 accepted); sinks[h] joins query head h's softmax denominator as exp(sinks[h] - max).
  TensorView sinks;

  int64_t num_heads = 1;
  double scale = 1.0;
  int64_t pre_tokens = 2147483647;
  int64_t next_tokens = 2147483647;
  std::string input_layout = "BSH";
  int64_t num_key_value_heads = 0;
  int64_t sparse_mode = 0;
  int64_t inner_precise = 0;
  int64_t block_size = 0;
  int64_t antiquant_mode = 0;
  bool softmax_lse_flag = false;
  int64_t key_antiquant_mode = 0;
  int64_t value_antiquant_mode = 0;
};

// Shapes and dtypes of the two outputs of a valid call (what the caller must allocate).
struct FiaOutputSpec {
  std::vector<int64_t> attention_out_sizes;
  DType attention_out_dtype = DType::kFloat16;
  std::vector<int64_t> softmax_lse_sizes;  // (B,N,Q_S,1), (T,N,1), or [1] when not requested
};

namespace internal {
struct FiaCallState;
}

// One validated call: the constructor checks every rule once (throws openfia::Error naming the
// argument, the rule and the value); output_spec() and Run() then use that analysis without
// checking again. Copies the small host-side tensors whose values address memory (padding
// sizes, prefix length, block_table) once, so that a caller changing them meanwhile cannot make
// the call read out of bounds; never reads the bulk data. `args`, and every tensor it names, must
// outlive the call.
//   FiaCall call(args);
//   ... allocate outputs of call.output_spec() ...
//   call.Run(attention_out, softmax_lse);
class OPENFIA_API FiaCall {
 public:
  explicit FiaCall(const FiaArgs& args);
  ~FiaCall();
  FiaCall(FiaCall&&) noexcept;
  FiaCall& operator=(FiaCall&&) noexcept;

  // Shapes and dtypes of the outputs.
  const FiaOutputSpec& output_spec() const;

  // Computes attention_out (and softmax_lse when softmax_lse_flag), as FusedInferAttentionScore.
  void Run(const TensorView& attention_out, const TensorView& softmax_lse) const;

 private:
  const FiaArgs* args_;
  std::unique_ptr<internal::FiaCallState> s_;
};

// Validates `args` and returns the output shapes: FiaCall(args).output_spec().
OPENFIA_API FiaOutputSpec FusedInferAttentionScoreOutputSpec(const FiaArgs& args);

// Validates `args` and computes attention_out (and softmax_lse when softmax_lse_flag):
// FiaCall(args).Run(attention_out, softmax_lse). Both outputs must be contiguous tensors of the
// shapes and dtypes FusedInferAttentionScoreOutputSpec returns.
// softmax_lse may be absent when softmax_lse_flag is false (otherwise it is filled with 0).
// Rows with no attendable key are 0 with lse +inf (see docs for the exact rules).
OPENFIA_API void FusedInferAttentionScore(const FiaArgs& args, const TensorView& attention_out,
                                          const TensorView& softmax_lse);

}  // namespace openfia
