// openfia internal: the canonical attention problem every op is lowered to.
//
// Validation proves every index below in range; canonicalization turns user spellings (layouts,
// sparse modes, antiquant modes, paging, prefix, padding, tensor lists) into strides and per-batch
// ranges. The reference (fp64) and the engine (fast) both consume only this struct, so they can be
// tested against each other on every feature. Vocabulary: b, h_q, h_kv, s_q, s_kv, d_qk, d_v.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "openfia/dtype.h"

namespace openfia::internal {

// Element formats as stored in memory (int4 is a nibble: element e lives at byte e/2, low nibble
// first, two's complement; strides of an int4 operand count nibbles).
enum class Elem : uint8_t { kF32, kF16, kBF16, kI8, kI4, kU8, kFP8E4M3, kHiF8 };

// Element (b, h, s, d) of a 4-D logical operand is at
//   base(b) + b_term + h*sh + s*ss + (d / d_split)*sd_outer + (d % d_split)*sd
// where base(b) = batch_data[b] (tensor lists) or data, and b_term = b*sb when batch_data is empty.
// d_split/sd_outer express the NZ cache layout; for all other layouts d_split = 0 (no split).
struct Operand {
  const void* data = nullptr;
  Elem elem = Elem::kF32;
  int64_t sb = 0, sh = 0, ss = 0, sd = 1;
  int64_t d_split = 0, sd_outer = 0;
  std::vector<const void*> batch_data;  // tensor list: per-batch base pointers (sb ignored)
  // Tensor list in BNSD: the head stride S_b * D of each batch's tensor (sh ignored); empty
  // everywhere else. Code that steps from one KV head to the next uses Sh(b).
  std::vector<int64_t> batch_sh;

  bool present() const { return data != nullptr || !batch_data.empty(); }
  int64_t Sh(int64_t b) const { return batch_sh.empty() ? sh : batch_sh[b]; }
  // Offset in elements of (b, h, s, d) from base(b).
  int64_t Offset(int64_t b, int64_t h, int64_t s, int64_t d) const {
    int64_t off = (batch_data.empty() ? b * sb : 0) + h * Sh(b) + s * ss;
    if (d_split > 0) return off + (d / d_split) * sd_outer + (d % d_split) * sd;
    return off + d * sd;
  }
  const void* Base(int64_t b) const { return batch_data.empty() ? data : batch_data[b]; }
};

// Scale/offset of an antiquant (x + offset) * scale. The coordinates are those of the KV storage
// row (b, h, s) and channel d: for a paged cache b is the physical block id and s the row in it.
// Zero strides broadcast, so every granularity (per-tensor, per-channel, per-head, per-token,
// per-token-head, page-managed) is just a choice of strides; `kind` tells fast paths which.
struct Dequant {
  enum class Kind : uint8_t {
    kNone,
    kPerTensor,
    kPerChannel,      // (h, d)
    kPerTensorHead,   // (h)
    kPerToken,        // (b, s)
    kPerTokenHead,    // (b, h, s)
    kPerTile,         // (b, h, s, d / d_group): tile-quantized rows (KvQuantSparseFlashAttention)
  };
  Kind kind = Kind::kNone;
  const void* scale = nullptr;  // never null unless kind == kNone
  Elem scale_elem = Elem::kF32;
  const void* offset = nullptr;  // may be null (symmetric)
  Elem offset_elem = Elem::kF32;
  int64_t sb = 0, sh = 0, ss = 0, sd = 0;  // shared by scale and offset
  int64_t d_group = 0;  // > 0: the channel term is (d / d_group) * sd instead of d * sd
  // true: (b, s) are the batch and the token's position in the batch's KV sequence even when
  // the cache is paged (per-token (B, S) scales with page attention, Q_S == 1), or, for a shared
  // prefix's parameters, the batch and the prefix row (per-token scales of a prefix are per
  // batch); false: storage coordinates as described above.
  bool logical = false;

  int64_t Index(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return RowIndex(b, h, s) + (d_group > 0 ? d / d_group : d) * sd;
  }
  // Index(b, h, s, 0), without the channel term's division.
  int64_t RowIndex(int64_t b, int64_t h, int64_t s) const { return b * sb + h * sh + s * ss; }
};

// One of K, V or K-rope: where logical key j of batch b (0 <= j < prefix_len + kv_len[b]) lives.
//   j <  prefix_len: prefix row j, head h, of `prefix` (b = 0).
//   j >= prefix_len: t = kv_begin[b] + j - prefix_len is the token index in the batch's sequence;
//     contiguous: storage (b, h, t);
//     paged: storage (block_table[b*bt_stride + t / block_size], h, t % block_size).
struct KvOperand {
  Operand cache;
  Operand prefix;  // absent when no shared prefix
  Dequant dequant;
  Dequant prefix_dequant;
};

struct Problem {
  // ---- geometry ----
  int64_t batch = 0;
  int64_t h_q = 0, h_kv = 0;  // h_q % h_kv == 0; query head h uses KV head h / (h_q / h_kv)
  int64_t d_qk = 0;           // without rope
  int64_t d_rope = 0;         // 0 unless MLA
  int64_t d_v = 0;
  bool incremental = false;   // the NPU's Q_S == 1 branch (IncreFlashAttention)

  // Per batch: valid query rows are tensor rows [q_begin[b], q_begin[b] + q_len[b]) and their
  // logical index is i = row - q_begin[b]. Logical keys are j in [0, prefix_len + kv_len[b]).
  std::vector<int64_t> q_begin, q_len, kv_begin, kv_len;
  int64_t prefix_len = 0;
  int64_t s_q = 0;  // rows per batch in the query tensor (T for TND; every q row < s_q)

  // ---- inputs ----
  Operand q;       // (b, h_q, row, d), d < d_qk
  Operand q_rope;  // (b, h_q, row, d), d < d_rope; absent unless MLA
  KvOperand k, v, k_rope;  // k_rope absent unless MLA
  bool paged = false;
  const int32_t* block_table = nullptr;  // [batch, bt_stride]
  int64_t bt_stride = 0;
  int64_t block_size = 0;

  // ---- scores ----
  double scale = 1.0;
  // pse element for (b, h, i, j): pse + b*sb + h*sh + (pse_row0[b] + i)*ss + (pse_col0[b] + j)*sk
  const void* pse = nullptr;
  Elem pse_elem = Elem::kF32;
  int64_t pse_sb = 0, pse_sh = 0, pse_ss = 0, pse_sk = 0;
  std::vector<int64_t> pse_row0, pse_col0;

  // Band: key j is visible from query i of batch b iff i - band_pre[b] <= j <= i + band_next[b].
  // Unbounded sides hold kNoBand. Applied on top of the bit mask (a cell is masked if either says so).
  static constexpr int64_t kNoBand = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> band_pre, band_next;
  // Bit mask (one byte per cell, nonzero = masked), element for (b, i, j):
  // mask + b*mask_sb + (mask_row0[b] + i)*mask_ss + (mask_col0[b] + j)*mask_sk; null if none.
  const uint8_t* mask = nullptr;
  int64_t mask_sb = 0, mask_ss = 0, mask_sk = 0;
  std::vector<int64_t> mask_row0, mask_col0;

  // Sparse key selection (KvQuantSparseFlashAttention): when key_offset is non-empty, valid query
  // row i of batch b and KV head hk attends exactly the tokens
  //   key_index[key_offset[r] .. key_offset[r + 1]),  r = (q_row_base[b] + i) * h_kv + hk,
  // q_row_base[b] = q_len[0] + ... + q_len[b-1] (valid rows compacted in batch order). A token t is
  // a position in the batch's KV sequence (cache token kv_begin[b] + t, prefix_len is 0); duplicates
  // are attended as often as they appear. Bands and masks do not apply (selection already did).
  std::vector<int64_t> key_offset, q_row_base;
  std::vector<int32_t> key_index;

  // Second key source (SparseAttnSharedkv: the compressed cache beside the original one). Used only
  // with sparse selection: when key_source is non-empty (parallel to key_index), an entry n with
  // key_source[n] != 0 names token t = key_index[n] of k2/v2 instead of k/v, 0 <= t < kv2_len[b];
  // it lives at storage (block_table2[b*bt_stride2 + t / block_size2], h, t % block_size2) when
  // block_table2 is set, else at (b, h, t) (no prefix, no kv_begin offset). Both sources enter one
  // softmax, in list order. Same head geometry and d_qk/d_v as k/v; no rope.
  KvOperand k2, v2;
  const int32_t* block_table2 = nullptr;  // [batch, bt_stride2], may be null (contiguous k2/v2)
  int64_t bt_stride2 = 0;
  int64_t block_size2 = 0;
  std::vector<int64_t> kv2_len;     // [batch]: tokens of k2/v2 per batch; empty: none
  std::vector<uint8_t> key_source;  // [key_index.size()] or empty (every entry names k/v)

  const float* sinks = nullptr;  // [h_q] or null: a per-head logit added to the softmax denominator

  // Antiquant K/V (Dequant kind != kNone) keep their fp32 value (x + offset) * scale; false: it is
  // rounded to the query dtype before the products, as the low-precision path does.
  bool kv_dequant_f32 = false;

  // ---- int8 full quantization (query/key/value int8) ----
  bool full_quant = false;
  float dequant_scale1 = 1.f, quant_scale1 = 1.f, dequant_scale2 = 1.f;

  // ---- outputs ----
  // Output element (b, h, row, d) of the valid rows; every other element of the output tensor is
  // written 0 (and lse +inf) by the driver before compute.
  void* out = nullptr;
  Elem out_elem = Elem::kF32;
  int64_t out_sb = 0, out_sh = 0, out_ss = 0, out_sd = 1;
  // Post-quantization to int8: y = x * qs2[h*d_v + d] + qo2[h*d_v + d] (expanded per channel; one
  // entry each when per-tensor), rounded half away from zero, saturated.
  std::vector<float> quant_scale2, quant_offset2;
  // lse (b, h, row) at lse + b*lse_sb + h*lse_sh + row*lse_ss; null when not requested.
  float* lse = nullptr;
  int64_t lse_sb = 0, lse_sh = 0, lse_ss = 0;

  int64_t group() const { return h_q / h_kv; }
  int64_t kv_total(int64_t b) const { return prefix_len + kv_len[b]; }
  // The dtype a dequantized K / V element is rounded to before the products: fp32 (kept as
  // computed) for high-precision antiquant and for full quantization's raw integers, else the
  // query's.
  Elem kv_round_elem() const { return full_quant || kv_dequant_f32 ? Elem::kF32 : q.elem; }
};

}  // namespace openfia::internal
