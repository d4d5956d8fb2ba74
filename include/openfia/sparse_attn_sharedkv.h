// openfia: SparseAttnSharedkv (custom.npu_sparse_attn_sharedkv, DeepSeek-V4 attention) and its
// planner SparseAttnSharedkvMetadata (custom.npu_sparse_attn_sharedkv_metadata) on the CPU.
//
// Semantics: docs/semantics.md section 3 (the arguments and every constraint:
// docs/sparse_attn_sharedkv.md). Argument names, order and defaults follow the custom-op
// signatures. For a query at absolute position p = S2 - S1 + i of batch b the keys are the
// original tokens of the window (ori_mask_mode 4: max(p-127, 0)..p) followed by the compressed
// entries j < floor((p+1)/cmp_ratio): all of them (cmp_kv without indices, "CFA") or those named
// by cmp_sparse_indices ("SCFA": -1 ends the list, entries >= that threshold are skipped), in one
// softmax whose denominator also holds exp(sinks[h]). K = V. Rows with p < 0 are 0 (lse +inf).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "openfia/export.h"
#include "openfia/tensor_view.h"

namespace openfia {

// The metadata tensor: int32[1024]. Words [0, 288): 36 compute-worker records of 8 words
// (CORE_ENABLE, BN2/M/S2 start, BN2/M/S2 end (exclusive), FIRST_FD_DATA_WORKSPACE_IDX); words
// [288, 864): 72 reduce records of 8 words (all disabled: work is never split along S2); words
// [864, 1024): openfia's snapshot of the configuration the plan was made for.
inline constexpr int64_t kSasMetadataWords = 1024;
inline constexpr int64_t kSasMaxWorkers = 36;

// Every argument of npu_sparse_attn_sharedkv_metadata. Optional tensors are absent when their
// TensorView is default-constructed.
struct SasMetadataArgs {
  int64_t num_heads_q = 0;   // N1 >= 1 (the NPU supports only 64; relaxed)
  int64_t num_heads_kv = 0;  // N2; only 1
  int64_t head_dim = 0;      // D >= 1 (the NPU supports only 512; relaxed)
  TensorView cu_seqlens_q;       // [B+1] int32, starts at 0, non-decreasing; required for TND
  TensorView cu_seqlens_ori_kv;  // int32; no effect (layout_kv PA_ND)
  TensorView cu_seqlens_cmp_kv;  // int32; no effect (layout_kv PA_ND)
  TensorView seqused_q;          // not supported: must be absent
  TensorView seqused_kv;         // [B] int32: ori tokens per batch (absent: max_seqlen_kv each)
  int64_t batch_size = 0;        // B; 0: taken from cu_seqlens_q (TND) or seqused_kv
  // BSND: S1 (required); TND: an upper bound when > 0. A plan covers at most 2^22 query tokens
  // (B x S1, or T): its memory would otherwise follow these two scalars alone.
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_kv = 0;     // upper bound of seqused_kv when > 0
  int64_t ori_topk = 0;          // not supported: must be 0
  int64_t cmp_topk = 0;          // SCFA: entries per row of cmp_sparse_indices; 0: CFA
  int64_t cmp_ratio = -1;        // 4 or 128 when has_cmp_kv
  int64_t ori_mask_mode = 4;     // 4 (window), also 3 (causal) and 0 (whole ori range)
  int64_t cmp_mask_mode = 3;     // only 3
  int64_t ori_win_left = 127;    // only 127
  int64_t ori_win_right = 0;     // only 0
  std::string layout_q = "BSND";   // "BSND" or "TND"
  std::string layout_kv = "PA_ND";  // only "PA_ND"
  bool has_ori_kv = true;          // must be true (every documented scenario has ori_kv)
  bool has_cmp_kv = true;
  std::string device;  // ignored
  // openfia extension: compute workers to plan for, 1..36; 0 = min(GetNumThreads(), 36).
  int64_t num_workers = 0;
};

// Validates `args` and writes the plan into `metadata` (int32, [1024], contiguous). Deterministic:
// the same arguments and worker count give the same words. Unused words are 0.
OPENFIA_API void SparseAttnSharedkvMetadata(const SasMetadataArgs& args,
                                            const TensorView& metadata);

// Checks that `metadata` was made for the configuration `args` describes and that its compute
// compute records cover every piece (a work unit = batch x M block, or one S2 chunk of a unit
// when small-batch decode splits its key lists) exactly once and that its reduce records are the
// ones the configuration needs, whatever worker count it was planned for. Throws
// openfia::Error naming `metadata` otherwise.
OPENFIA_API void VerifySasMetadata(const SasMetadataArgs& args, const TensorView& metadata);

// Every argument of npu_sparse_attn_sharedkv.
struct SasArgs {
  TensorView q;  // [B, S1, N1, D] (BSND) or [T, N1, D] (TND); float16, bfloat16 or float32
  TensorView ori_kv;              // [blocks1, block_size1, 1, D], dtype of q; required
  TensorView cmp_kv;              // [blocks2, block_size2, 1, D], dtype of q; may be absent (SWA)
  TensorView ori_sparse_indices;  // int32; no effect (the NPU ignores it too)
  TensorView cmp_sparse_indices;  // [T, 1, K2] / [B, S1, 1, K2] int32, -1 terminated; SCFA
  TensorView ori_block_table;     // [B, >= ceil(max S2 / block_size1)] int32; required
  TensorView cmp_block_table;     // [B, >= ceil(max S3 / block_size2)] int32; with cmp_kv
  TensorView cu_seqlens_q;        // [B+1] int32 (TND; ignored for BSND)
  TensorView cu_seqlens_ori_kv;   // int32; no effect
  TensorView cu_seqlens_cmp_kv;   // int32; no effect
  TensorView seqused_q;           // not supported: must be absent
  TensorView seqused_kv;          // [B] int32: S2 per batch; required. S3 = floor(S2/cmp_ratio)
  // [N1] float32, contiguous; absent: no sink term. Any float: NaN makes the head's rows NaN,
  // +inf gives output 0 and lse +inf (the formula's limit), -inf is no sink.
  TensorView sinks;
  TensorView metadata;            // [1024] int32 from SparseAttnSharedkvMetadata; absent: planned here
  std::optional<double> softmax_scale;  // nullopt: 1/sqrt(D)
  std::optional<int64_t> cmp_ratio;     // 4 or 128; required with cmp_kv
  int64_t ori_mask_mode = 4;
  int64_t cmp_mask_mode = 3;
  int64_t ori_win_left = 127;
  int64_t ori_win_right = 0;
  std::string layout_q = "BSND";
  std::string layout_kv = "PA_ND";
  bool return_softmax_lse = false;
};

struct SasOutputSpec {
  std::vector<int64_t> attention_out_sizes;  // the shape of q
  DType attention_out_dtype = DType::kBFloat16;
  // return_softmax_lse: [B, 1, S1, N1] (BSND) or [1, T, N1] (TND), float32; else [1] (0).
  std::vector<int64_t> softmax_lse_sizes;
};

// Validates `args` (throws openfia::Error naming the argument, the rule and the value) and returns
// the output shapes. Reads seqused_kv, cu_seqlens_q, the block tables, the sparse indices and the
// metadata, never q or the caches.
OPENFIA_API SasOutputSpec SparseAttnSharedkvOutputSpec(const SasArgs& args);

// Computes attention_out (and softmax_lse when return_softmax_lse: log of the softmax
// denominator, sink included; +inf for rows without keys). Outputs are contiguous tensors of the
// SparseAttnSharedkvOutputSpec shapes, overlapping no input nor each other; softmax_lse may be
// absent when return_softmax_lse is false. The index tensors (lengths, block tables, indices,
// metadata) are copied once and only the copies are read.
// Bitwise identical with or without metadata and for every thread count.
OPENFIA_API void SparseAttnSharedkv(const SasArgs& args, const TensorView& attention_out,
                                    const TensorView& softmax_lse);

}  // namespace openfia
