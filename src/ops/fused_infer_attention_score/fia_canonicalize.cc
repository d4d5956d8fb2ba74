// openfia: lowers a validated FusedInferAttentionScore call into the canonical Problem
// (common/problem.h): layouts become strides, sparse_mode/pre/next become per-batch bands,
// antiquant modes become Dequant strides, paging/prefix/padding/tensor lists become KvOperands
// and per-batch ranges. Everything here is arithmetic on sizes AnalyzeFia has proven in range.
#include <algorithm>

#include "common/check.h"
#include "common/numeric.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia::internal {
namespace {

constexpr int64_t kInt32Max = 2147483647;

// Operand of a contiguous tensor in query layout `layout` with `heads` heads of `d` elements.
// Strides count stored elements: nibbles for int4 (the int32 last axis times 8).
Operand DenseOperand(const TensorView& t, FiaLayout layout, int64_t heads, int64_t d) {
  Operand o;
  o.data = t.data;
  o.elem = ElemOf(t.dtype);
  std::vector<int64_t> sizes = t.sizes;
  if (o.elem == Elem::kI4) sizes.back() *= 8;
  const std::vector<int64_t> st = TensorView::ContiguousStrides(sizes);
  switch (layout) {
    case FiaLayout::kBSH:
      o.sb = st[0], o.ss = st[1], o.sh = d, o.sd = 1;
      break;
    case FiaLayout::kBSND:
      o.sb = st[0], o.ss = st[1], o.sh = st[2], o.sd = st[3];
      break;
    case FiaLayout::kBNSD:
      o.sb = st[0], o.sh = st[1], o.ss = st[2], o.sd = st[3];
      break;
    case FiaLayout::kTND:
      // Rows of every batch live in one [T, N, D] tensor: the batch offset is q_begin/kv_begin.
      o.sb = 0, o.ss = st[0], o.sh = st[1], o.sd = st[2];
      break;
    case FiaLayout::kNTD:  // [N, T, D]
      o.sb = 0, o.sh = st[0], o.ss = st[1], o.sd = st[2];
      break;
  }
  (void)heads;
  return o;
}

// Operand of a paged cache; logical coordinates (physical block, head, row in block, d).
Operand PagedOperand(const TensorView& t, FiaKvForm form, int64_t heads, int64_t d,
                     int64_t block_size) {
  Operand o;
  o.data = t.data;
  o.elem = ElemOf(t.dtype);
  switch (form) {
    case FiaKvForm::kPaged3:  // [blocknum, block_size, KV_N * D]
      o.sb = block_size * heads * d, o.ss = heads * d, o.sh = d, o.sd = 1;
      break;
    case FiaKvForm::kPaged4:  // [blocknum, KV_N, block_size, D]
      o.sb = heads * block_size * d, o.sh = block_size * d, o.ss = d, o.sd = 1;
      break;
    case FiaKvForm::kPagedNZ: {  // [blocknum, KV_N, D / base, block_size, base]
      const int64_t base = t.size(4);
      o.sb = heads * d * block_size, o.sh = d * block_size, o.ss = base, o.sd = 1;
      o.d_split = base;
      o.sd_outer = block_size * base;
      break;
    }
    default:
      break;
  }
  return o;
}

const void* ElemPtr(const TensorView& t, int64_t index) {
  return static_cast<const char*>(t.data) + index * ElementSize(t.dtype);
}

bool IsPerToken(const FiaAntiquant& aq) {
  return aq.form == FiaAntiquant::Form::kPerToken || aq.form == FiaAntiquant::Form::kPerTokenHead;
}

// Antiquant strides in storage-row coordinates (b, h, s, d): for a paged cache b is the
// physical block and s the row in it. Per-token scales cover the shared prefix first: the cache's
// token t reads position prefix_len + t (`skip` elements further along S).
Dequant MakeDequant(const FiaAntiquant& aq, const FiaGeometry& g, int64_t d, int64_t skip = 0) {
  using F = FiaAntiquant::Form;
  Dequant q;
  if (aq.form == F::kNone) return q;
  const bool paged = g.kv_form != FiaKvForm::kDense && g.kv_form != FiaKvForm::kList;
  // Legacy joint tensors hold K at index 0 and V at index 1 of their leading axis.
  const int64_t part = (aq.index < 0 ? 0 : aq.index * (aq.scale->numel() / 2)) + skip;
  q.scale = ElemPtr(*aq.scale, part);
  q.scale_elem = ElemOf(aq.scale->dtype);
  if (aq.offset) {
    q.offset = ElemPtr(*aq.offset, part);
    q.offset_elem = ElemOf(aq.offset->dtype);
  }
  switch (aq.form) {
    case F::kPerTensor:
      q.kind = Dequant::Kind::kPerTensor;
      break;
    case F::kPerChannel:
      q.kind = Dequant::Kind::kPerChannel;
      q.sh = d, q.sd = 1;
      break;
    case F::kPerTensorHead:
      q.kind = Dequant::Kind::kPerTensorHead;
      q.sh = 1;
      break;
    case F::kPerToken:
      q.kind = Dequant::Kind::kPerToken;
      q.sb = aq.token_s, q.ss = 1;
      q.logical = paged;  // (batch, token position), not (block, row)
      break;
    case F::kPerTokenHead:
      q.kind = Dequant::Kind::kPerTokenHead;
      q.sb = g.h_kv * aq.token_s, q.sh = aq.token_s, q.ss = 1;
      q.logical = paged;
      break;
    case F::kPagedToken:
      q.kind = Dequant::Kind::kPerToken;
      q.sb = g.block_size, q.ss = 1;
      break;
    case F::kPagedTokenHead:
      q.kind = Dequant::Kind::kPerTokenHead;
      q.sb = g.h_kv * g.block_size, q.sh = g.block_size, q.ss = 1;
      break;
    case F::kNone:
      break;
  }
  return q;
}

Operand KvCacheOperand(const FiaArgs& a, const FiaGeometry& g, const TensorView& dense,
                       const std::vector<TensorView>& list, int64_t d) {
  switch (g.kv_form) {
    case FiaKvForm::kDense:
      return DenseOperand(dense, g.layout, g.h_kv, d);
    case FiaKvForm::kList: {
      // Every tensor of the list has the same strides except sb, and in BNSD the head stride
      // S_b * D (S sits between the head and D axes): per-batch head strides there.
      Operand o = DenseOperand(list[0], g.layout, g.h_kv, d);
      o.data = nullptr;
      o.batch_data.reserve(list.size());
      for (const TensorView& t : list) o.batch_data.push_back(t.data);
      if (g.layout == FiaLayout::kBNSD)
        for (const TensorView& t : list)
          o.batch_sh.push_back(DenseOperand(t, g.layout, g.h_kv, d).sh);
      return o;
    }
    default:
      return PagedOperand(dense, g.kv_form, g.h_kv, d, g.block_size);
  }
}

int64_t ClipBand(int64_t v) {
  return std::clamp<int64_t>(v, -Problem::kNoBand, Problem::kNoBand);
}

}  // namespace

Problem CanonicalizeFia(const FiaArgs& a, const FiaGeometry& g, const TensorView& out,
                        const TensorView& lse) {
  Problem p;
  p.batch = g.batch;
  p.h_q = g.h_q;
  p.h_kv = g.h_kv;
  p.d_qk = g.d_qk;
  p.d_rope = g.mla ? g.d_rope : 0;
  p.d_v = g.d_v;
  p.incremental = g.incremental;
  p.q_begin = g.q_begin;
  p.q_len = g.q_len;
  p.kv_begin = g.kv_begin;
  p.kv_len = g.kv_len;
  p.prefix_len = g.prefix_len;
  p.s_q = g.q_s;

  // ---- inputs ----
  p.q = DenseOperand(a.query, g.layout, g.h_q, g.d_qk);
  p.k.cache = KvCacheOperand(a, g, a.key, a.key_list, g.d_qk);
  p.v.cache = KvCacheOperand(a, g, a.value, a.value_list, g.d_v);
  const int64_t k_skip = IsPerToken(g.k_aq) ? g.prefix_len : 0;
  const int64_t v_skip = IsPerToken(g.v_aq) ? g.prefix_len : 0;
  p.k.dequant = MakeDequant(g.k_aq, g, g.d_qk, k_skip);
  p.v.dequant = MakeDequant(g.v_aq, g, g.d_v, v_skip);
  p.kv_dequant_f32 = g.antiquant_f32;
  if (a.key_shared_prefix.defined()) {
    p.k.prefix = DenseOperand(a.key_shared_prefix, g.layout, g.h_kv, g.d_qk);
    p.v.prefix = DenseOperand(a.value_shared_prefix, g.layout, g.h_kv, g.d_v);
    // Token-independent parameters apply to the prefix rows as they are; per-token ones are
    // read at (batch, prefix row): positions [0, prefix_len) of the batch's scales.
    p.k.prefix_dequant = MakeDequant(g.k_aq, g, g.d_qk);
    p.v.prefix_dequant = MakeDequant(g.v_aq, g, g.d_v);
    p.k.prefix_dequant.logical = IsPerToken(g.k_aq);
    p.v.prefix_dequant.logical = IsPerToken(g.v_aq);
  }
  if (g.mla) {
    p.q_rope = DenseOperand(a.query_rope, g.layout, g.h_q, g.d_rope);
    p.k_rope.cache = KvCacheOperand(a, g, a.key_rope, {}, g.d_rope);
  }
  if (g.kv_form == FiaKvForm::kPaged3 || g.kv_form == FiaKvForm::kPaged4 ||
      g.kv_form == FiaKvForm::kPagedNZ) {
    p.paged = true;
    p.block_table = static_cast<const int32_t*>(a.block_table.data);
    p.bt_stride = a.block_table.stride(0);
    p.block_size = g.block_size;
  }

  // ---- scores ----
  p.scale = a.scale;
  p.sinks = g.sinks.empty() ? nullptr : g.sinks.data();
  if (a.pse_shift.defined()) {
    const TensorView& t = a.pse_shift;  // (B|1, N, Q_S', KV_S'), contiguous
    p.pse = t.data;
    p.pse_elem = ElemOf(t.dtype);
    p.pse_sk = 1;
    p.pse_ss = t.size(3);
    p.pse_sh = t.size(2) * t.size(3);
    p.pse_sb = t.size(0) == 1 ? 0 : g.h_q * p.pse_sh;
    p.pse_row0 = g.q_begin;  // absolute (padded) coordinates, as the golden indexes pse
    p.pse_col0 = g.kv_begin;
  }

  // Band (docs/semantics.md 1.3), per batch with S1 = act_q and S2 = act_kv + prefix_len. A side
  // that is INT_MAX after clipping is unbounded and stored as kNoBand.
  p.band_pre.assign(g.batch, Problem::kNoBand);
  p.band_next.assign(g.batch, Problem::kNoBand);
  if (!g.incremental) {
    const bool pre_inf = g.pre_tokens >= kInt32Max, next_inf = g.next_tokens >= kInt32Max;
    for (int64_t b = 0; b < g.batch; ++b) {
      const int64_t s1 = g.q_len[b], s2 = g.kv_len[b] + g.prefix_len;
      switch (g.sparse_mode) {
        case 0:
          // Without a mask, or with left padding, pre/next are forced to INT_MAX.
          if (a.atten_mask.defined() && !g.left_padding) {
            if (!pre_inf) p.band_pre[b] = g.pre_tokens;
            if (!next_inf) p.band_next[b] = g.next_tokens;
          }
          break;
        case 1:
          break;
        case 2:  // leftUpCausal: j <= i
          p.band_next[b] = 0;
          break;
        case 3:  // rightDownCausal: j <= i + S2 - S1
          p.band_next[b] = ClipBand(s2 - s1);
          break;
        case 4:  // band, origin bottom-right
          if (!pre_inf) p.band_pre[b] = ClipBand(g.pre_tokens + s1 - s2);
          if (!next_inf) p.band_next[b] = ClipBand(g.next_tokens + s2 - s1);
          break;
        default:
          break;
      }
    }
  }
  if (g.user_mask) {
    const TensorView& m = a.atten_mask;  // contiguous; see AnalyzeFia for the accepted shapes
    const int64_t dim = m.dim();
    const int64_t cols = m.size(dim - 1);
    p.mask = static_cast<const uint8_t*>(m.data);
    p.mask_sk = 1;
    if (g.incremental && dim == 2) {  // (B|1, KV_S)
      p.mask_ss = 0;
      p.mask_sb = m.size(0) == 1 ? 0 : cols;
    } else {
      p.mask_ss = cols;
      const int64_t rows = m.size(dim - 2);
      p.mask_sb = (dim == 2 || m.size(0) == 1) ? 0 : rows * cols;
    }
    p.mask_row0 = g.q_begin;
    p.mask_col0 = g.kv_begin;
  }

  // ---- int8 full quantization ----
  p.full_quant = g.full_quant;
  p.dequant_scale1 = g.dequant_scale1;
  p.quant_scale1 = g.quant_scale1;
  p.dequant_scale2 = g.dequant_scale2;

  // ---- outputs (contiguous, shapes from the spec) ----
  p.out = out.data;
  p.out_elem = ElemOf(g.spec.attention_out_dtype);
  const int64_t n = g.h_q, dv = g.d_v, s = g.q_s;
  const int64_t B = g.batch;
  switch (g.out_layout) {
    case FiaOutLayout::kBSH:
    case FiaOutLayout::kBSND:
      p.out_sb = s * n * dv, p.out_ss = n * dv, p.out_sh = dv, p.out_sd = 1;
      break;
    case FiaOutLayout::kBNSD:
      p.out_sb = n * s * dv, p.out_sh = s * dv, p.out_ss = dv, p.out_sd = 1;
      break;
    case FiaOutLayout::kNBSD:
      p.out_sh = B * s * dv, p.out_sb = s * dv, p.out_ss = dv, p.out_sd = 1;
      break;
    case FiaOutLayout::kTND:  // s is T: rows of every batch, at q_begin
      p.out_sb = 0, p.out_ss = n * dv, p.out_sh = dv, p.out_sd = 1;
      break;
    case FiaOutLayout::kNTD:
      p.out_sb = 0, p.out_sh = s * dv, p.out_ss = dv, p.out_sd = 1;
      break;
  }
  p.quant_scale2 = g.quant_scale2;
  p.quant_offset2 = g.quant_offset2;
  if (a.softmax_lse_flag && lse.defined()) {
    p.lse = static_cast<float*>(lse.data);
    if (g.packed) {  // (T, N, 1)
      p.lse_sb = 0, p.lse_sh = 1, p.lse_ss = n;
    } else {  // (B, N, Q_S, 1)
      p.lse_sb = n * s, p.lse_sh = s, p.lse_ss = 1;
    }
  }
  return p;
}

}  // namespace openfia::internal
