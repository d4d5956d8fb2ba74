// openfia internal: what validation learns about one FusedInferAttentionScore call.
//
// AnalyzeFia (fia_validate.cc) checks every documented constraint and returns the resolved
// geometry: sizes, per-batch ranges, KV storage form, which antiquant/quant features apply and
// the output spec. It runs once per call; CanonicalizeFia takes its result, so canonicalization
// never sees an unvalidated argument and only turns this description into strides.
#pragma once

#include <cstdint>
#include <vector>

#include "openfia/fused_infer_attention_score.h"

namespace openfia::internal {

// input_layout is "<query layout>" or "<query layout>_<output layout>". Key and value follow the
// query layout; TND and NTD pack the batches' rows into one T axis.
enum class FiaLayout : uint8_t { kBSH, kBSND, kBNSD, kTND, kNTD };
enum class FiaOutLayout : uint8_t { kBSH, kBSND, kBNSD, kNBSD, kTND, kNTD };

// How key/value are stored.
enum class FiaKvForm : uint8_t {
  kDense,    // same layout as the query (KV_S, KV_N instead of S, N)
  kList,     // key_list/value_list: one [1, S_b, ...] tensor per batch, query layout
  kPaged3,   // [blocknum, block_size, KV_N*D]
  kPaged4,   // [blocknum, KV_N, block_size, D]
  kPagedNZ,  // [blocknum, KV_N, D/16, block_size, 16] (D/32 and 32 for int8)
};

// One resolved antiquant parameter set (for K or for V).
struct FiaAntiquant {
  enum class Form : uint8_t {
    kNone,
    kPerTensor,        // one value
    kPerChannel,       // (h, d)
    kPerTensorHead,    // (h)                      key/value_antiquant_mode 2
    kPerToken,         // (b, s)                   mode 1, legacy antiquant_mode 1
    kPerTokenHead,     // (b, h, s)                mode 3
    kPagedToken,       // (block, row)             mode 4
    kPagedTokenHead,   // (block, h, row)          mode 5
  };
  Form form = Form::kNone;
  const TensorView* scale = nullptr;
  const TensorView* offset = nullptr;  // may be null (symmetric)
  int64_t index = -1;                  // legacy joint tensors: 0 = K, 1 = V; -1 = separate tensor
  int64_t token_s = 0;                 // per-token forms: size of the S dimension of the scale
};

struct FiaGeometry {
  FiaLayout layout = FiaLayout::kBSH;           // of query, key and value
  FiaOutLayout out_layout = FiaOutLayout::kBSH;  // of attention_out
  bool packed = false;                           // TND or NTD: batches share one T axis
  FiaKvForm kv_form = FiaKvForm::kDense;
  bool incremental = false;  // Q_S == 1: the IncreFlashAttention branch

  int64_t batch = 0;
  int64_t q_s = 0;  // rows per batch of the query tensor (T for TND)
  int64_t h_q = 0, h_kv = 0, d_qk = 0, d_v = 0, d_rope = 0;
  bool mla = false;

  DType q_dtype = DType::kFloat16;
  DType kv_dtype = DType::kFloat16;  // kInt32 means packed int4
  bool kv_int4 = false;
  bool full_quant = false;  // int8 query, key, value
  bool antiquant = false;   // int8/int4 key/value with a floating-point query
  bool post_quant = false;  // quant_scale2 given: int8 output
  bool post_quant_per_channel = false;

  // Storage sequence length per batch of a dense/list cache (TND: the total T_kv for every b).
  std::vector<int64_t> kv_storage_s;
  // Paging.
  int64_t block_num = 0, block_size = 0, bt_cols = 0;
  // KV_S as the documented mask/pse size rules use it: the key's S (the largest S_b for lists;
  // maxBlockNumPerSeq * block_size when paged), without the prefix.
  int64_t kv_s_for_masks = 0;

  // Per batch, as in Problem (see common/problem.h).
  std::vector<int64_t> q_begin, q_len, kv_begin, kv_len;
  int64_t prefix_len = 0;  // P = actual_shared_prefix_len or the prefix tensors' S
  int64_t prefix_s = 0;    // S of key_shared_prefix
  bool left_padding = false;  // query or kv left padding is in effect

  // Masking: sparse_mode as it applies (incremental calls ignore it), the clipped pre/next.
  int64_t sparse_mode = 0;
  int64_t pre_tokens = 0, next_tokens = 0;
  bool user_mask = false;      // atten_mask is a bit mask read cell by cell (modes 0/1, Q_S == 1)
  bool causal_mask = false;    // atten_mask is the 2048x2048 constant (modes 2/3/4)

  FiaAntiquant k_aq, v_aq;
  // Dequantized K/V stay fp32 (inner_precise high precision with a float16 query); otherwise they
  // are rounded to the query dtype.
  bool antiquant_f32 = false;
  // Learnable sinks, one per query head (empty when not given).
  std::vector<float> sinks;

  // Full quantization scalars (already decoded, dequant_scale1 truncated as the golden does).
  float dequant_scale1 = 1.f, quant_scale1 = 1.f, dequant_scale2 = 1.f;
  // Post-quantization, expanded: one entry each (per-tensor) or h_q * d_v entries (per-channel).
  std::vector<float> quant_scale2, quant_offset2;

  FiaOutputSpec spec;
};

// Checks every constraint (throws openfia::Error) and returns the resolved description. Reads
// small host-side tensors (padding sizes, prefix length, block_table ids, scalar scales) to prove
// every memory index in range; the result points into `args`, which must outlive it.
FiaGeometry AnalyzeFia(const FiaArgs& args);

// fia_strict.cc: NPU-strict mode's rows (the NPU limits openfia relaxes); throws
// Error(kUnsupported) for the first one an analysed call breaks. AnalyzeFia calls it last when
// GetNpuStrict().
void EnforceFiaNpuLimits(const FiaArgs& args, const FiaGeometry& g);

}  // namespace openfia::internal
