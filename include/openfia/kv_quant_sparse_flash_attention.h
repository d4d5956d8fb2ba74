// openfia: KvQuantSparseFlashAttention (torch_npu.npu_kv_quant_sparse_flash_attention) on the CPU:
// DeepSeek-V3.2 top-k sparse MLA attention over a tile-quantized KV cache.
//
// Semantics: docs/semantics.md section 2 (the arguments and every constraint:
// docs/kv_quant_sparse_flash_attention.md). Argument names, order and defaults follow the
// torch_npu schema (Ascend/op-plugin op_plugin_functions.yaml,
// `npu_kv_quant_sparse_flash_attention`).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "openfia/export.h"
#include "openfia/tensor_view.h"

namespace openfia {

// Every argument of the torch_npu signature. Optional tensors are absent when their TensorView is
// default-constructed (defined() == false).
//
// KV row format (656 bytes per token, KV_N = 1):
//   bytes   0..511  k_nope: 512 values, int8 / float8_e4m3fn / hifloat8 (dtype of `key`)
//   bytes 512..639  k_rope: 64 values of the query dtype (float16 or bfloat16), little-endian
//   bytes 640..655  4 float32 dequant scales, scale t for nope channels [128t, 128t+128)
// K = concat(round_to_query_dtype(float(nope) * scale[tile]), rope) (576 wide); V = the
// dequantized nope part of the same rows (512 wide). The output is 512 wide.
struct KvqsfaArgs {
  // Required. query: [B, S1, Q_N, 576] (BSND) or [T, Q_N, 576] (TND); float16 or bfloat16;
  // Q_N in {1, 2, 4, 8, 16, 32, 48, 64, 128}. q_nope = query[..., :512], q_rope = query[..., 512:].
  TensorView query;
  // key: [B, S2, 1, 656] (BSND), [KV_T, 1, 656] (TND) or [block_num, block_size, 1, 656]
  // (PA_BSND); int8, float8_e4m3fn or hifloat8 (uint8 is read as hifloat8, the way torch carries
  // it). Any strides with a unit last-dimension stride, byte strides multiple of 4 and a 4-byte
  // aligned base (the rope and scale fields are addressed inside the rows).
  TensorView key;
  // value: same dtype as key and same leading dimensions; last dimension 656 or 512. Its content
  // is not read: V is the dequantized nope part of `key` (attention_mode 2, "KV shared").
  TensorView value;
  // sparse_indices: [B, S1, 1, K] (BSND query) or [T, 1, K] (TND query), int32, K > 0. Entry e of
  // row (b, s1) selects tokens [e*sparse_block_size, (e+1)*sparse_block_size) of batch b;
  // -1 ends the list (every later entry must be -1 too). See the header of the docs for the
  // causal threshold that skips blocks.
  TensorView sparse_indices;
  double scale_value = 1.0;  // required in torch_npu (no default): multiplies Q K^T; finite
  int64_t key_quant_mode = 2;    // required in torch_npu; only 2 (per-tile) is supported
  int64_t value_quant_mode = 2;  // required in torch_npu; only 2 (per-tile) is supported

  TensorView key_dequant_scale;    // reserved by the source; must be absent
  TensorView value_dequant_scale;  // reserved by the source; must be absent
  TensorView block_table;          // PA_BSND: [B, max_blocks] int32
  // [B] int32 or int64. BSND: per-batch lengths (absent: the tensor's S). TND: cumulative
  // lengths without a leading 0 (required). actual_seq_lengths_kv is required for TND and PA_BSND.
  TensorView actual_seq_lengths_query;
  TensorView actual_seq_lengths_kv;
  int64_t sparse_block_size = 1;  // 1 (token-wise) or a power of two up to 128 (block-wise)
  std::string layout_query = "BSND";  // BSND or TND
  std::string layout_kv = "BSND";     // BSND, TND or PA_BSND (non-paged: must equal layout_query)
  int64_t sparse_mode = 3;            // 0: no causal limit; 3: right-down causal
  int64_t pre_tokens = std::numeric_limits<int64_t>::max();   // only 2^63-1
  int64_t next_tokens = std::numeric_limits<int64_t>::max();  // only 2^63-1
  // Only 2 (MLA-absorb) is supported. torch_npu's default is 0, which it rejects too: pass 2.
  int64_t attention_mode = 0;
  int64_t quant_scale_repo_mode = 1;  // only 1 (scales stored inside the rows)
  int64_t tile_size = 128;            // only 128
  int64_t rope_head_dim = 64;         // only 64
  // [Q_N] float32 or absent: per-head attention-sink logit added to the softmax denominator
  // (newer torch_npu; an absent sink means no sink term). Any float: NaN makes the head's rows
  // NaN, +inf makes them 0 (the formula's limit), -inf is no sink.
  TensorView sinks;
};

// Shape and dtype of the output of a valid call (what the caller must allocate).
struct KvqsfaOutputSpec {
  std::vector<int64_t> attention_out_sizes;  // [B, S1, Q_N, 512] or [T, Q_N, 512]
  DType attention_out_dtype = DType::kBFloat16;  // the query dtype
};

// Validates `args` (throws openfia::Error naming the argument, the rule and the value) and
// returns the output shape. Reads the host-side index tensors (sequence lengths, block_table,
// sparse_indices) to prove every memory access in range, but never the KV data. Both functions
// copy the index tensors once and use only the copy, so a caller changing them during the call
// cannot make openfia read out of bounds.
OPENFIA_API KvqsfaOutputSpec KvQuantSparseFlashAttentionOutputSpec(const KvqsfaArgs& args);

// Computes attention_out, a contiguous tensor of the shape and dtype the spec function returns,
// overlapping no input.
// Rows that attend no key (every index -1 or skipped, rows i < S1 - S2 in sparse_mode 3, rows
// past actual_seq_lengths_query) are 0.
OPENFIA_API void KvQuantSparseFlashAttention(const KvqsfaArgs& args,
                                             const TensorView& attention_out);

}  // namespace openfia
