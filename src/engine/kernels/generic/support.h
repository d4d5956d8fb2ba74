// openfia internal: the problems the engine's kernel families compute (the problem-level part of
// Kernel::supports). Baseline code, asked on any CPU.
#pragma once

#include "common/problem.h"
#include "engine/kernel.h"

namespace openfia::internal {

inline bool IsFloatElem(Elem e) { return e == Elem::kF32 || e == Elem::kF16 || e == Elem::kBF16; }

// Why the tile loop cannot read a KV operand (nullptr when it can). Antiquant (int8 / int4
// storage with a Dequant; per-tile scales also over fp8 e4m3 / hifloat8) is dequantized in the
// packing; a float operand must match the query dtype (the NPU has no mixed float matmul).
inline const char* KvOperandWhy(const KvOperand& kv, Elem q) {
  const auto why = [q](const Operand& o, const Dequant& dq) -> const char* {
    if (dq.kind != Dequant::Kind::kNone) {
      const bool tile8 = dq.kind == Dequant::Kind::kPerTile &&
                         (o.elem == Elem::kFP8E4M3 || o.elem == Elem::kHiF8);
      if (o.elem != Elem::kI8 && o.elem != Elem::kI4 && !tile8)
        return "a key / value antiquant over a storage other than int8, int4, fp8 e4m3 or "
               "hifloat8";
      if (!IsFloatElem(dq.scale_elem) || (dq.offset != nullptr && !IsFloatElem(dq.offset_elem)))
        return "a key / value antiquant scale or offset that is not float32, float16 or bfloat16";
      return nullptr;
    }
    if (o.elem != q) return "a float key / value operand whose dtype differs from the query's";
    return nullptr;
  };
  const char* w = why(kv.cache, kv.dequant);
  if (w == nullptr && kv.prefix.present()) w = why(kv.prefix, kv.prefix_dequant);
  return w;
}

// The problems of the generic tile loop (every feature but int8 full quantization).
inline const char* TileLoopSupports(const Problem& p) {
  const Elem q = p.q.elem;
  if (p.full_quant) return "int8 full quantization (the two-pass kernel runs it)";
  // The second key source is read through the packing's prefix slot (kv_rows-inl.h WithSecond),
  // so it needs sparse key lists and a problem without a shared prefix.
  if ((!p.key_source.empty() || p.k2.cache.present()) &&
      (p.key_offset.empty() || p.prefix_len != 0 || p.k.prefix.present()))
    return "a second key source without sparse key lists, or with a shared prefix";
  if (!p.key_offset.empty() && p.d_rope > 0 && p.k2.cache.present())
    return "MLA rope with a second key source";
  if (!IsFloatElem(q)) return "a query dtype other than float32, float16 or bfloat16";
  if (p.d_rope > 0 && p.q_rope.elem != q) return "a query_rope dtype that differs from the query's";
  for (const KvOperand* kv : {&p.k, &p.v}) {
    if (const char* w = KvOperandWhy(*kv, q)) return w;
  }
  if (p.k2.cache.present()) {
    for (const KvOperand* kv : {&p.k2, &p.v2}) {
      if (const char* w = KvOperandWhy(*kv, q)) return w;
    }
  }
  if (p.d_rope > 0) {
    if (const char* w = KvOperandWhy(p.k_rope, q)) return w;
  }
  if (!IsFloatElem(p.out_elem) && p.out_elem != Elem::kI8) return "the output dtype";
  if (p.pse && !IsFloatElem(p.pse_elem)) return "the pse_shift dtype";
  if (p.out_elem == Elem::kI8 && p.quant_scale2.empty()) return "an int8 output without quant_scale2";
  return nullptr;
}

// The problems of the two-pass int8 full-quantization kernel (attend_fullquant-inl.h): int8 rows
// reachable with one channel stride, no rope, no sinks, no antiquant, dense keys.
inline const char* FullQuantSupports(const Problem& p) {
  if (!p.full_quant) return "not an int8 full-quantization problem";
  const auto plain8 = [](const Operand& o) {
    return !o.present() || (o.elem == Elem::kI8 && o.d_split == 0);
  };
  if (p.q.elem != Elem::kI8 || !plain8(p.q) || !plain8(p.k.cache) || !plain8(p.k.prefix) ||
      !plain8(p.v.cache) || !plain8(p.v.prefix) || p.k.dequant.kind != Dequant::Kind::kNone ||
      p.v.dequant.kind != Dequant::Kind::kNone || p.d_rope > 0 || p.sinks != nullptr ||
      !p.key_offset.empty() || p.k2.cache.present() || (p.pse && !IsFloatElem(p.pse_elem)))
    return "int8 full quantization with rope, sinks, antiquant, NZ or sparse keys";
  if (!IsFloatElem(p.out_elem) && p.out_elem != Elem::kI8) return "the output dtype";
  if (p.out_elem == Elem::kI8 && p.quant_scale2.empty()) return "an int8 output without quant_scale2";
  return nullptr;
}

// Item-level: a sparse item (key lists) holds exactly one query row; only kernels that say so
// take items of several tokens (SparseAttnSharedkv's multi-token items).
inline const char* OneTokenPerSparseItem(const Problem& p, const WorkItem& w) {
  if (!p.key_offset.empty() && w.i1 - w.i0 != 1)
    return "a sparse item of several query tokens";
  return nullptr;
}

}  // namespace openfia::internal
