// openfia: KvQuantSparseFlashAttention -> canonical Problem. The 656-byte rows become three views
// of the same memory: the nope bytes (K and V, Dequant::kPerTile), the rope values (k_rope, query
// dtype) and the fp32 scales (the dequant's scale operand), all expressed as strides from a base
// pointer at the field's byte offset in row 0. sparse_indices become per-row token lists.
#include <cstdint>
#include <new>
#include <vector>

#include "common/check.h"
#include "common/numeric.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"

namespace openfia::internal {
namespace {

const void* ByteOffset(const void* p, int64_t bytes) {
  return static_cast<const uint8_t*>(p) + bytes;
}

// Strides (in bytes) of the key tensor as (sb, sh, ss) of the storage coordinates (b, h, s):
// BSND [B, S2, 1, 656] and PA_BSND [block, row, 1, 656] share them; TND [KV_T, 1, 656] has no
// batch term (batch b starts at cache token kv_begin[b]).
struct RowStrides {
  int64_t sb = 0, sh = 0, ss = 0;
};
RowStrides KeyRowStrides(const TensorView& k, KvqLayout layout) {
  if (layout == KvqLayout::kTND) return {0, k.stride(1), k.stride(0)};
  return {k.stride(0), k.stride(2), k.stride(1)};
}

// A view of one field of the rows: elements of `elem_bytes` bytes starting at byte `byte0`.
Operand RowField(const TensorView& k, const RowStrides& rs, int64_t byte0, int64_t elem_bytes,
                 Elem elem) {
  Operand o;
  o.data = ByteOffset(k.data, byte0);
  o.elem = elem;
  o.sb = rs.sb / elem_bytes;  // validation proved every stride a multiple of 4 bytes
  o.sh = rs.sh / elem_bytes;
  o.ss = rs.ss / elem_bytes;
  o.sd = 1;
  return o;
}

}  // namespace

Problem CanonicalizeKvqsfa(const KvqsfaArgs& a, const KvqsfaShape& sh, const TensorView& out) {
  Problem p;
  p.batch = sh.batch;
  p.h_q = sh.h_q;
  p.h_kv = 1;
  p.d_qk = kKvqNope;
  p.d_rope = kKvqRope;
  p.d_v = kKvqNope;
  p.incremental = false;
  p.q_begin = sh.q_begin;
  p.q_len = sh.q_len;
  p.kv_begin = sh.kv_begin;
  p.kv_len = sh.kv_len;
  p.prefix_len = 0;
  p.s_q = sh.s_q;

  // ---- query: [B, S1, N, 576] or [T, N, 576]; q_rope is the same tensor from channel 512 ----
  const TensorView& q = a.query;
  const Elem qe = ElemOf(q.dtype);
  const bool q_tnd = sh.layout_q == KvqLayout::kTND;
  p.q.data = q.data;
  p.q.elem = qe;
  p.q.sb = q_tnd ? 0 : q.stride(0);
  p.q.ss = q_tnd ? q.stride(0) : q.stride(1);
  p.q.sh = q.stride(-2);
  p.q.sd = q.stride(-1);
  p.q_rope = p.q;
  p.q_rope.data = ByteOffset(q.data, kKvqNope * q.stride(-1) * 2);

  // ---- key rows ----
  const TensorView& k = a.key;
  const Elem kve = k.dtype == DType::kUInt8 ? Elem::kHiF8 : ElemOf(k.dtype);
  const RowStrides rs = KeyRowStrides(k, sh.layout_kv);
  p.k.cache = RowField(k, rs, 0, 1, kve);
  p.k.dequant.kind = Dequant::Kind::kPerTile;
  p.k.dequant.scale = ByteOffset(k.data, kKvqScaleByte);
  p.k.dequant.scale_elem = Elem::kF32;
  p.k.dequant.sb = rs.sb / 4;
  p.k.dequant.sh = rs.sh / 4;
  p.k.dequant.ss = rs.ss / 4;
  p.k.dequant.sd = 1;
  p.k.dequant.d_group = kKvqTile;
  // attention_mode 2 (KV shared): V is the dequantized nope part of the same rows; the `value`
  // tensor is never read (the kernel's second matmul reads the dequantized key,
  // docs/semantics.md 2.2).
  p.v = p.k;
  p.k_rope.cache = RowField(k, rs, kKvqRopeByte, 2, qe);

  if (sh.layout_kv == KvqLayout::kPaBSND) {
    p.paged = true;
    p.block_table = static_cast<const int32_t*>(a.block_table.data);
    p.bt_stride = a.block_table.stride(0);
    p.block_size = sh.block_size;
  }

  p.scale = a.scale_value;
  p.band_pre.assign(sh.batch, Problem::kNoBand);
  p.band_next.assign(sh.batch, Problem::kNoBand);

  // ---- per-row key lists (rows compacted in batch order, h_kv = 1) ----
  const TensorView& si = a.sparse_indices;
  const int32_t* idx = static_cast<const int32_t*>(si.data);
  p.q_row_base.assign(sh.batch, 0);
  int64_t rows = 0;
  for (int64_t b = 0; b < sh.batch; ++b) {
    p.q_row_base[b] = rows;
    rows += sh.q_len[b];
  }
  // Two passes over the rows (the indices are openfia's snapshot, so both see the same values):
  // the list lengths, then the lists in memory allocated once.
  const auto for_each_row = [&](auto&& row_fn) {
    for (int64_t b = 0; b < sh.batch; ++b) {
      for (int64_t i = 0; i < sh.q_len[b]; ++i) {
        const int64_t row = sh.q_begin[b] + i;
        const int32_t* r =
            q_tnd ? idx + row * si.stride(0) : idx + b * si.stride(0) + row * si.stride(1);
        row_fn(b, i, r,
               RowWindow(a.sparse_mode, a.sparse_block_size, sh.q_len[b], sh.kv_len[b], i,
                         sh.topk));
      }
    }
  };
  p.key_offset.assign(rows + 1, 0);
  for_each_row([&](int64_t b, int64_t i, const int32_t* r, const SelectionWindow& w) {
    int64_t n = 0;
    ForEachSelectedToken(r, si.stride(-1), w, a.sparse_block_size, [&](int64_t) { ++n; });
    const int64_t x = p.q_row_base[b] + i;
    p.key_offset[x + 1] = p.key_offset[x] + n;
  });
  try {
    p.key_index.reserve(static_cast<size_t>(p.key_offset[rows]));
  } catch (const std::bad_alloc&) {
    FailAlloc("the per-row key lists", p.key_offset[rows] * int64_t{sizeof(int32_t)});
  }
  for_each_row([&](int64_t, int64_t, const int32_t* r, const SelectionWindow& w) {
    ForEachSelectedToken(r, si.stride(-1), w, a.sparse_block_size, [&](int64_t t) {
      p.key_index.push_back(static_cast<int32_t>(t));
    });
  });

  if (a.sinks.defined()) p.sinks = static_cast<const float*>(a.sinks.data);

  // ---- output: [B, S1, N, 512] or [T, N, 512], query dtype ----
  p.out = out.data;
  p.out_elem = qe;
  p.out_sb = q_tnd ? 0 : out.stride(0);
  p.out_ss = q_tnd ? out.stride(0) : out.stride(1);
  p.out_sh = out.stride(-2);
  p.out_sd = out.stride(-1);
  return p;
}

}  // namespace openfia::internal
