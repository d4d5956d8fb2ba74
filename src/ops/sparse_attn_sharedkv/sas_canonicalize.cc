// openfia: a validated SparseAttnSharedkv call as the canonical Problem.
//
// ori_kv is the paged first key source (k = v: K equals V), cmp_kv the paged second source
// (k2 = v2). Every valid query row gets an explicit key list (problem.h key_offset/key_index/
// key_source): its window of original tokens in ascending order, then its compressed entries
// (docs/semantics.md 3.3), so one softmax covers both, with the sinks in the denominator.
#include <cmath>
#include <new>

#include "common/check.h"
#include "common/numeric.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {
namespace {

// A paged cache [blocks, block_size, 1, D] as (block, head, row, d) strides.
Operand PagedOperand(const TensorView& kv) {
  Operand o;
  o.data = kv.data;
  o.elem = ElemOf(kv.dtype);
  o.sb = kv.stride(0);
  o.ss = kv.stride(1);
  o.sh = kv.stride(2);
  o.sd = kv.stride(3);
  return o;
}

}  // namespace

Problem CanonicalizeSas(const SasArgs& a, const SasConfig& c, const TensorView& out,
                        const TensorView& lse) {
  const bool tnd = c.layout_q == 1;
  const TensorView& q = a.q;
  Problem p;
  p.batch = c.batch;
  p.h_q = c.n1;
  p.h_kv = c.n2;
  p.d_qk = c.d;
  p.d_v = c.d;

  // ---- query rows ----
  p.q.data = q.data;
  p.q.elem = ElemOf(q.dtype);
  p.q_len = c.q_len;
  p.q_begin.assign(c.batch, 0);
  if (tnd) {  // [T, N1, D]: batch b owns rows [cu[b], cu[b+1])
    p.q.sb = 0, p.q.ss = q.stride(0), p.q.sh = q.stride(1), p.q.sd = q.stride(2);
    for (int64_t b = 1; b < c.batch; ++b) p.q_begin[b] = p.q_begin[b - 1] + c.q_len[b - 1];
    p.s_q = q.size(0);
  } else {  // [B, S1, N1, D]
    p.q.sb = q.stride(0), p.q.ss = q.stride(1), p.q.sh = q.stride(2), p.q.sd = q.stride(3);
    p.s_q = q.size(1);
  }

  // ---- key sources ----
  p.kv_begin.assign(c.batch, 0);
  p.kv_len = c.kv_len;
  p.k.cache = PagedOperand(a.ori_kv);
  p.v = p.k;  // K = V
  p.paged = true;
  p.block_table = static_cast<const int32_t*>(a.ori_block_table.data);
  p.bt_stride = a.ori_block_table.stride(0);
  p.block_size = a.ori_kv.size(1);
  if (c.has_cmp) {
    p.k2.cache = PagedOperand(a.cmp_kv);
    p.v2 = p.k2;
    p.block_table2 = static_cast<const int32_t*>(a.cmp_block_table.data);
    p.bt_stride2 = a.cmp_block_table.stride(0);
    p.block_size2 = a.cmp_kv.size(1);
    p.kv2_len.resize(c.batch);
    for (int64_t b = 0; b < c.batch; ++b) p.kv2_len[b] = c.kv_len[b] / c.cmp_ratio;
  }

  // ---- per-row key lists ----
  const TensorView& idx = a.cmp_sparse_indices;
  const auto* idx_data = static_cast<const int32_t*>(idx.data);
  // ori_mask_mode 4: band [pos - win_left, pos + win_right]; 3: causal; 0: everything.
  const auto window = [&](int64_t pos, int64_t s2, int64_t* lo, int64_t* hi) {
    *lo = c.ori_mask_mode == 4 ? std::max<int64_t>(0, pos - c.ori_win_left) : 0;
    *hi = c.ori_mask_mode == 0 ? s2 - 1 : std::min(s2 - 1, pos + c.ori_win_right);
  };
  // The lists' capacity (exact without indices, an upper bound with them), allocated once: a
  // refusal then names the size.
  int64_t capacity = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.q_len[b]; ++i) {
      const int64_t pos = c.kv_len[b] - c.q_len[b] + i;
      if (pos < 0) continue;
      int64_t lo = 0, hi = 0;
      window(pos, c.kv_len[b], &lo, &hi);
      const int64_t thr = c.has_cmp ? (pos + 1) / c.cmp_ratio : 0;
      capacity += std::max<int64_t>(0, hi - lo + 1) +
                  (idx.defined() ? std::min(idx.size(-1), thr) : thr);
    }
  }
  try {
    p.key_index.reserve(static_cast<size_t>(capacity));
    p.key_source.reserve(static_cast<size_t>(capacity));
  } catch (const std::bad_alloc&) {
    FailAlloc("the per-row key lists", capacity * int64_t{sizeof(int32_t) + sizeof(uint8_t)});
  }
  p.key_offset = {0};
  p.q_row_base.assign(c.batch, 0);
  int64_t row0 = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    p.q_row_base[b] = row0;
    const int64_t s1 = c.q_len[b], s2 = c.kv_len[b];
    for (int64_t i = 0; i < s1; ++i) {
      const int64_t pos = s2 - s1 + i;  // absolute position of the query token
      if (pos >= 0) {                   // else: the row precedes the KV sequence, no keys
        int64_t lo = 0, hi = 0;
        window(pos, s2, &lo, &hi);
        for (int64_t t = lo; t <= hi; ++t) {
          p.key_index.push_back(static_cast<int32_t>(t));
          p.key_source.push_back(0);
        }
        if (c.has_cmp) {
          const int64_t thr = (pos + 1) / c.cmp_ratio;  // compressed entry j visible iff j < thr
          if (!idx.defined()) {
            for (int64_t j = 0; j < thr; ++j) {
              p.key_index.push_back(static_cast<int32_t>(j));
              p.key_source.push_back(1);
            }
          } else {
            const int64_t k2 = idx.size(-1);
            const int64_t base = tnd ? (row0 + i) * idx.stride(0)
                                     : b * idx.stride(0) + i * idx.stride(1);
            const int64_t step = idx.stride(-1);
            // The first min(K2, thr) entries, up to the first -1, skipping entries >= thr;
            // duplicates are attended as often as they appear.
            for (int64_t n = 0; n < std::min(k2, thr); ++n) {
              const int32_t j = idx_data[base + n * step];
              if (j == -1) break;
              if (j >= thr) continue;
              p.key_index.push_back(j);
              p.key_source.push_back(1);
            }
          }
        }
      }
      p.key_offset.push_back(static_cast<int64_t>(p.key_index.size()));
    }
    row0 += s1;
  }

  // ---- scores ----
  p.scale = a.softmax_scale.has_value() ? *a.softmax_scale
                                        : 1.0 / std::sqrt(static_cast<double>(c.d));
  p.sinks = a.sinks.defined() ? static_cast<const float*>(a.sinks.data) : nullptr;

  // ---- outputs (contiguous, the shape of q) ----
  p.out = out.data;
  p.out_elem = ElemOf(out.dtype);
  if (tnd) {
    p.out_sb = 0, p.out_ss = c.n1 * c.d, p.out_sh = c.d, p.out_sd = 1;
  } else {
    p.out_sb = p.s_q * c.n1 * c.d, p.out_ss = c.n1 * c.d, p.out_sh = c.d, p.out_sd = 1;
  }
  if (lse.defined()) {  // [N2 = 1, T, G] or [B, N2 = 1, S1, G]: head h = n2 * G + g
    p.lse = static_cast<float*>(lse.data);
    p.lse_sh = 1;
    p.lse_ss = c.group();
    p.lse_sb = tnd ? 0 : p.s_q * c.group();
  }
  return p;
}

}  // namespace openfia::internal
