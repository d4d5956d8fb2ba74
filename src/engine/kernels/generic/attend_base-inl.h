// openfia internal: the pieces below the generic flash-attention tile loop (generic/attend-inl.h),
// compiled once per SIMD target: loading and packing of query rows and K / V tiles (every storage
// format, antiquant as the reference rounds it, rope, the shared prefix, paging, sparse key lists)
// and the register-blocked fp32 products.
//
// Included (without include guard, on purpose) inside namespace openfia::internal::<target> by
// each per-ISA file after it defines `struct V`, the target's vector traits:
//   kW lanes; T the register type; Zero, Set1, Load, Store (unaligned f32); Fma(a, b, c) = a*b+c,
//   Mul, Add, Sub, Max; ReduceMax, ReduceSum; Exp; ExpP (exp of x <= 0, 0 below -86.5,
//   never subnormal); RoundBF16, RoundF16 (round each lane to the
//   format, result as f32); LoadF16, LoadBF16, LoadI8 (kW elements -> f32); LoadI4 (kW / 2
//   bytes, two's complement nibbles low first -> f32; unused when kW == 1); Transpose(T r[kW]).
// The includer has already included <algorithm>, <cmath>, <cstring>, <limits>, common/convert.h,
// engine/kernel.h, engine/kernels/generic/common.h and engine/kernels/generic/tile_scratch.h.
// A target with bf16 dot tiles includes its dot file and generic/attend_dot_common-inl.h after
// this one, before generic/attend-inl.h.

#ifndef OPENFIA_ATTEND_ROWS
#define OPENFIA_ATTEND_ROWS 4
#define OPENFIA_ATTEND_COLS 4
#endif
// Register blocks live in registers only if the loops over R and C are fully unrolled.
#define OPENFIA_UNROLL _Pragma("GCC unroll 32")
constexpr int kRB = OPENFIA_ATTEND_ROWS;  // register block: rows
constexpr int kCB = OPENFIA_ATTEND_COLS;  // register block: vectors of columns

#ifndef OPENFIA_PREFETCH_TILES
#define OPENFIA_PREFETCH_TILES 1
#endif
constexpr int W = V::kW;
constexpr int64_t TN = kTileKeys;

static_assert(TN % W == 0, "tile width must be a multiple of the vector width");

// ---------------------------------------------------------------------------------------------
// Loading

inline int64_t DOff(const Operand& o, int64_t d) {
  return o.d_split > 0 ? (d / o.d_split) * o.sd_outer + (d % o.d_split) * o.sd : d * o.sd;
}

// True when W consecutive channels starting at a multiple of W are W consecutive elements.
inline bool VecContiguous(const Operand& o) {
  if (o.elem != Elem::kF32 && o.elem != Elem::kF16 && o.elem != Elem::kBF16) return false;
  return o.sd == 1 && (o.d_split == 0 || o.d_split % W == 0);
}

// Channels [d0, d0 + W) of the row at element offset `off` of `base`, as f32.
inline typename V::T LoadRow(const Operand& o, bool contig, const void* base, int64_t off,
                             int64_t d0) {
  if (contig) {
    const int64_t e = off + DOff(o, d0);
    switch (o.elem) {
      case Elem::kF32: return V::Load(static_cast<const float*>(base) + e);
      case Elem::kF16: return V::LoadF16(static_cast<const uint16_t*>(base) + e);
      default: return V::LoadBF16(static_cast<const uint16_t*>(base) + e);
    }
  }
  alignas(64) float t[W];
  for (int i = 0; i < W; ++i) t[i] = cvt::Load(base, o.elem, off + DOff(o, d0 + i));
  return V::Load(t);
}

// dst[d] = channel d of the row at element offset `off` of `base` (operand o), d < n, as f32:
// whole vectors where the channels are contiguous (a scalar conversion per element cost a
// quarter of a SparseAttnSharedkv prefill, whose items attend each query row to ~145 keys).
inline void LoadRowF32(const Operand& o, const void* base, int64_t off, int64_t n, float* dst) {
  const bool contig = VecContiguous(o);
  int64_t d = 0;
  if (contig)
    for (; d + W <= n; d += W) V::Store(dst + d, LoadRow(o, true, base, off, d));
  for (; d < n; ++d) dst[d] = cvt::Load(base, o.elem, off + DOff(o, d));
}

#include "engine/kernels/generic/kv_rows-inl.h"

// Antiquant of the keys of one tile (docs/semantics.md 1.9): (x + offset) * scale in fp32, rounded
// to Problem::kv_round_elem (the query dtype, or fp32 for high-precision antiquant), exactly as the
// reference; null Dequant pointers mean the operand is not quantized.
struct TileDq {
  const Dequant* cache = nullptr;
  const Dequant* prefix = nullptr;
  const int64_t* coord = nullptr;  // [key * 2]: storage (b, s) of each key of the tile
  int64_t h = 0;
  Elem qe = Elem::kF32;  // the rounding of a dequantized element
  bool any() const { return cache != nullptr || prefix != nullptr; }
};

inline TileDq MakeTileDq(const KvOperand& kv, const int64_t* coord, int64_t hk, Elem qe) {
  TileDq t;
  if (kv.dequant.kind != Dequant::Kind::kNone) t.cache = &kv.dequant;
  if (kv.prefix_dequant.kind != Dequant::Kind::kNone) t.prefix = &kv.prefix_dequant;
  t.coord = coord;
  t.h = hk;
  t.qe = qe;
  return t;
}

// Channel d of key n (at element offset `off` of `base` in operand o), dequantized if needed.
inline float LoadElem(const Operand& o, const TileDq& q, int64_t n, bool pre, const void* base,
                      int64_t off, int64_t d) {
  const float x = cvt::Load(base, o.elem, off + DOff(o, d));
  const Dequant* dq = pre ? q.prefix : q.cache;
  if (dq == nullptr) return x;
  const int64_t idx = dq->Index(q.coord[2 * n], q.h, q.coord[2 * n + 1], d);
  const float scale = cvt::Load(dq->scale, dq->scale_elem, idx);
  const float offset = dq->offset != nullptr ? cvt::Load(dq->offset, dq->offset_elem, idx) : 0.f;
  const float sum = x + offset;
  const float deq = sum * scale;
  return cvt::RoundToElem(deq, q.qe);
}

// Vectorized antiquant of whole vectors of channels: int8 / int4 storage with unit channel
// stride and a Dequant whose channel term is d * sd (storage coordinates), or tile-quantized rows
// (kPerTile: int8, fp8 e4m3 or hifloat8, d_group a multiple of W so that a vector of channels
// shares one scale). Same fp32 operations in the same order as LoadElem ((x + offset) * scale,
// the absent offset being 0.f, then the query-dtype rounding), so the result is bitwise that of
// the scalar path.
inline bool DqFloatElem(Elem e) { return e == Elem::kFP8E4M3 || e == Elem::kHiF8; }

inline bool DqVecOk(const Operand& o, const Dequant* dq) {
  if (dq == nullptr || o.sd != 1 || o.d_split != 0) return false;
  if (dq->kind == Dequant::Kind::kPerTile)
    return (o.elem == Elem::kI8 || DqFloatElem(o.elem)) && dq->d_group > 0 &&
           dq->d_group % W == 0;
  return (o.elem == Elem::kI8 || o.elem == Elem::kI4) && dq->d_group == 0 &&
         dq->kind != Dequant::Kind::kNone;
}

// W scale (or offset) values at idx, idx + sd, ...: a broadcast for sd == 0 (per token / head /
// tensor), a vector load for sd == 1 (per channel).
inline typename V::T LoadParam(const void* p, Elem e, int64_t idx, int64_t sd) {
  if (sd == 0) return V::Set1(cvt::Load(p, e, idx));
  if (sd == 1) {
    switch (e) {
      case Elem::kF32: return V::Load(static_cast<const float*>(p) + idx);
      case Elem::kF16: return V::LoadF16(static_cast<const uint16_t*>(p) + idx);
      case Elem::kBF16: return V::LoadBF16(static_cast<const uint16_t*>(p) + idx);
      default: break;
    }
  }
  alignas(64) float t[W];
  for (int c = 0; c < W; ++c) t[c] = cvt::Load(p, e, idx + c * sd);
  return V::Load(t);
}

// W quantized channels at element index e of `base`, as f32 (exact: small integers).
inline typename V::T LoadQuant(const void* base, Elem elem, int64_t e) {
  alignas(64) float t[W];
  if (elem == Elem::kI8) {
    const int8_t* src = static_cast<const int8_t*>(base) + e;
    for (int c = 0; c < W; ++c) t[c] = static_cast<float>(src[c]);
  } else if (DqFloatElem(elem)) {
    for (int c = 0; c < W; ++c) t[c] = cvt::Load(base, elem, e + c);
  } else if (W % 2 == 0 && (e & 1) == 0) {  // int4, byte aligned: low nibble first
    const uint8_t* src = static_cast<const uint8_t*>(base) + (e >> 1);
    for (int c = 0; c < W / 2; ++c) {
      const uint8_t byte = src[c];
      t[2 * c] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(byte << 4)) >> 4);
      t[2 * c + 1] = static_cast<float>(static_cast<int8_t>(byte) >> 4);
    }
  } else {
    for (int c = 0; c < W; ++c) t[c] = cvt::Load(base, elem, e + c);
  }
  return V::Load(t);
}

// Channels [d0, d0 + W) of key n, dequantized (DqVecOk(o, dq) holds).
inline typename V::T LoadRowDq(const Operand& o, const Dequant& dq, const TileDq& q, int64_t n,
                               const void* base, int64_t off, int64_t d0) {
  typename V::T x = LoadQuant(base, o.elem, off + d0);
  const int64_t idx = dq.Index(q.coord[2 * n], q.h, q.coord[2 * n + 1], d0);
  const int64_t sd = dq.d_group > 0 ? 0 : dq.sd;  // a tile's W channels share one parameter
  if (dq.offset != nullptr) x = V::Add(x, LoadParam(dq.offset, dq.offset_elem, idx, sd));
  else if (DqFloatElem(o.elem)) x = V::Add(x, V::Zero());  // LoadElem's x + 0.f: -0 -> +0
  x = V::Mul(x, LoadParam(dq.scale, dq.scale_elem, idx, sd));
  if (q.qe == Elem::kBF16) return V::RoundBF16(x);
  if (q.qe == Elem::kF16) return V::RoundF16(x);
  return x;
}

// The tile's rows prepared for the vectorized antiquant: every key in one operand with
// DqVecOk, int4 rows byte aligned, and the scale / offset either one value per row (sd == 0:
// per token / head / tensor), one vector over the channels shared by all rows (per channel), or
// one value per row and channel tile (kPerTile, at most kDqGroups tiles).
constexpr int64_t kDqGroups = 16;
struct DqRows {
  const void* row[TN];  // int8, fp8, hifloat8: channel 0 of key n; int4: its byte
  float s[TN], o[TN];   // per row
  alignas(64) float sc[1024], oc[1024];  // per channel
  float sg[TN][kDqGroups], og[TN][kDqGroups];  // per row and channel tile
  uint8_t group[1024 / W];  // d_group > 0: the channel tile of channels [W v, W v + W)
  Elem elem = Elem::kI8;
  bool per_row = true, has_off = false;
  // int8 / int4 without offset, rounded to bf16, every scale 0 or a normal number small enough
  // that no product x * scale reaches bf16's overflow: each dequantized element is then 0 or a
  // finite normal fp32 number, whose bf16 conversion (VCVTNE2PS2BF16, round to nearest even)
  // is the reference's rounding, and no value is Inf or NaN (DqPlain).
  bool plain = false;
  int64_t d_group = 0;  // > 0: per row and channel tile (sg / og)
  Elem qe = Elem::kF32;
};

// Whether |x| * s stays plain (DqRows::plain) for every integer |x| <= xmax.
inline bool PlainScale(float s, float xmax) {
  const float a = std::fabs(s);
  return a == 0.f || (a >= std::numeric_limits<float>::min() && a * xmax <= 3.38e38f);
}
inline bool DqPlain(const DqRows& r, int64_t nk, int64_t D) {
  if ((r.elem != Elem::kI8 && r.elem != Elem::kI4) || r.has_off || r.qe != Elem::kBF16)
    return false;
  const float xmax = r.elem == Elem::kI8 ? 128.f : 8.f;
  bool ok = true;
  if (r.d_group > 0) {
    const int64_t groups = (D + r.d_group - 1) / r.d_group;
    for (int64_t n = 0; n < nk; ++n)
      for (int64_t g = 0; g < groups; ++g) ok &= PlainScale(r.sg[n][g], xmax);
  } else if (r.per_row) {
    for (int64_t n = 0; n < nk; ++n) ok &= PlainScale(r.s[n], xmax);
  } else {
    for (int64_t d = 0; d < D; ++d) ok &= PlainScale(r.sc[d], xmax);
  }
  return ok;
}

inline bool MakeDqRows(const KvOperand& kv, const void* const* base, const int64_t* off,
                       const uint8_t* pre, int64_t nk, int64_t D, const TileDq& q, DqRows* r) {
  const Operand& o = pre[0] ? kv.prefix : kv.cache;
  const Dequant* dq = pre[0] ? q.prefix : q.cache;
  if (!DqVecOk(o, dq) || D > 1024) return false;
  for (int64_t n = 0; n < nk; ++n) {
    if (pre[n] != pre[0]) return false;
    if (o.elem == Elem::kI4 && (off[n] & 1) != 0) return false;
  }
  r->elem = o.elem;
  r->qe = q.qe;
  r->has_off = dq->offset != nullptr;
  r->d_group = dq->kind == Dequant::Kind::kPerTile ? dq->d_group : 0;
  if (r->d_group > 0) {
    const int64_t groups = (D + r->d_group - 1) / r->d_group;
    if (groups > kDqGroups) return false;
    r->per_row = false;
    for (int64_t v = 0; v * W < D; ++v) r->group[v] = static_cast<uint8_t>(v * W / r->d_group);
    for (int64_t n = 0; n < nk; ++n) {
      r->row[n] = static_cast<const char*>(base[n]) + off[n];
      const int64_t idx0 = dq->RowIndex(q.coord[2 * n], q.h, q.coord[2 * n + 1]);
      for (int64_t g = 0; g < groups; ++g) {  // Index of channel g * d_group
        const int64_t idx = idx0 + g * dq->sd;
        r->sg[n][g] = cvt::Load(dq->scale, dq->scale_elem, idx);
        r->og[n][g] = r->has_off ? cvt::Load(dq->offset, dq->offset_elem, idx) : 0.f;
      }
    }
    r->plain = DqPlain(*r, nk, D);
    return true;
  }
  r->per_row = dq->sd == 0;
  if (!r->per_row && (dq->sb != 0 || dq->ss != 0)) return false;  // per-row vectors: general path
  for (int64_t n = 0; n < nk; ++n) {
    r->row[n] = static_cast<const char*>(base[n]) + (o.elem == Elem::kI4 ? off[n] >> 1 : off[n]);
    if (r->per_row) {
      const int64_t idx = dq->RowIndex(q.coord[2 * n], q.h, q.coord[2 * n + 1]);
      r->s[n] = cvt::Load(dq->scale, dq->scale_elem, idx);
      r->o[n] = r->has_off ? cvt::Load(dq->offset, dq->offset_elem, idx) : 0.f;
    }
  }
  if (!r->per_row) {
    const int64_t idx = dq->Index(0, q.h, 0, 0);
    for (int64_t d = 0; d < D; ++d) {
      r->sc[d] = cvt::Load(dq->scale, dq->scale_elem, idx + d * dq->sd);
      r->oc[d] = r->has_off ? cvt::Load(dq->offset, dq->offset_elem, idx + d * dq->sd) : 0.f;
    }
  }
  r->plain = DqPlain(*r, nk, D);
  return true;
}

// W quantized channels starting at channel d0 (a multiple of W) of a prepared row, as f32. The
// float formats decode through their 256-entry tables.
template <Elem E>
inline typename V::T LoadQ(const void* row, int64_t d0) {
  if constexpr (E == Elem::kI8) {
    return V::LoadI8(static_cast<const int8_t*>(row) + d0);
  } else if constexpr (E == Elem::kFP8E4M3 || E == Elem::kHiF8) {
    const float* table = E == Elem::kFP8E4M3 ? cvt::Fp8E4M3Table() : cvt::HiF8Table();
    const uint8_t* src = static_cast<const uint8_t*>(row) + d0;
    alignas(64) float t[W];
    for (int c = 0; c < W; ++c) t[c] = table[src[c]];
    return V::Load(t);
  } else if constexpr (W == 1) {
    return V::Set1(cvt::Load(row, Elem::kI4, d0));
  } else {
    return V::LoadI4(static_cast<const uint8_t*>(row) + d0 / 2);
  }
}

// kRound false: the fp32 value before the query-dtype rounding (for a bf16 conversion that
// rounds it the same way, DqRows::plain).
template <Elem E, bool kRound = true>
__attribute__((always_inline)) inline typename V::T DqAt(const DqRows& r, int64_t n, int64_t d0) {
  typename V::T x = LoadQ<E>(r.row[n], d0);
  if (r.d_group > 0) {
    const int64_t g = r.group[d0 / W];
    if (r.has_off) x = V::Add(x, V::Set1(r.og[n][g]));
    else if constexpr (E == Elem::kFP8E4M3 || E == Elem::kHiF8) x = V::Add(x, V::Zero());  // -0
    x = V::Mul(x, V::Set1(r.sg[n][g]));
  } else if (r.per_row) {
    if (r.has_off) x = V::Add(x, V::Set1(r.o[n]));
    x = V::Mul(x, V::Set1(r.s[n]));
  } else {
    if (r.has_off) x = V::Add(x, V::Load(r.oc + d0));
    x = V::Mul(x, V::Load(r.sc + d0));
  }
  if constexpr (!kRound) return x;
  if (r.qe == Elem::kBF16) return V::RoundBF16(x);
  if (r.qe == Elem::kF16) return V::RoundF16(x);
  return x;
}

template <Elem E>
inline void PackKTDq(const DqRows& f, int64_t nk, int64_t dfull, int64_t row0, float* kt) {
  const int64_t npad = (nk + W - 1) / W * W;
  for (int64_t n0 = 0; n0 < npad; n0 += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, nk - n0));
    for (int64_t d0 = 0; d0 < dfull; d0 += W) {
      typename V::T r[W];
      if (m == W) {
        OPENFIA_UNROLL
        for (int i = 0; i < W; ++i) r[i] = DqAt<E>(f, n0 + i, d0);
      } else {
        for (int i = 0; i < W; ++i) r[i] = i < m ? DqAt<E>(f, n0 + i, d0) : V::Zero();
      }
      V::Transpose(r);
      OPENFIA_UNROLL
      for (int i = 0; i < W; ++i) V::Store(kt + (row0 + d0 + i) * TN + n0, r[i]);
    }
  }
}

template <Elem E>
inline void PackVDq(const DqRows& f, int64_t nk, int64_t dfull, int64_t ld, float* v) {
  for (int64_t n = 0; n < nk; ++n)
    for (int64_t d0 = 0; d0 < dfull; d0 += W) V::Store(v + n * ld + d0, DqAt<E>(f, n, d0));
}

// f(std::integral_constant<Elem, E>()) for the storage format E of prepared rows (DqRows::elem).
template <class F>
inline decltype(auto) WithDqElem(Elem e, F&& f) {
  switch (e) {
    case Elem::kI8: return f(std::integral_constant<Elem, Elem::kI8>());
    case Elem::kFP8E4M3: return f(std::integral_constant<Elem, Elem::kFP8E4M3>());
    case Elem::kHiF8: return f(std::integral_constant<Elem, Elem::kHiF8>());
    default: return f(std::integral_constant<Elem, Elem::kI4>());
  }
}

// PackKTDq / PackVDq for the storage format of f.
inline void PackKTDqAny(const DqRows& f, int64_t nk, int64_t dfull, int64_t row0, float* kt) {
  WithDqElem(f.elem, [&](auto e) { PackKTDq<decltype(e)::value>(f, nk, dfull, row0, kt); });
}

inline void PackVDqAny(const DqRows& f, int64_t nk, int64_t dfull, int64_t ld, float* v) {
  WithDqElem(f.elem, [&](auto e) { PackVDq<decltype(e)::value>(f, nk, dfull, ld, v); });
}

// Prefetches the rows of keys [j0, j1) into L2 (row-contiguous storage only): gathered and paged
// rows of a few hundred bytes at large strides, which the hardware prefetchers do not follow
// across pages; one tile ahead keeps enough misses in flight (a sparse MLA tile is ~75 us of
// products), further ahead the rows only crowd the tile's working set out of L2.
// Always inlined: a function whose only effects are prefetches counts as pure to GCC, which then
// drops its calls as dead code.
constexpr int64_t kPrefetchTiles = OPENFIA_PREFETCH_TILES;
__attribute__((always_inline)) inline void PrefetchKeys(const Problem& p, const KvOperand& kv,
                                                        const KvOperand& kv2, const WorkItem& w,
                                                        int64_t hk, int64_t n_hk, int64_t j0,
                                                        int64_t j1, int64_t D) {
  const Elem e = kv.cache.elem;
  if (kv.cache.sd != 1 || kv.cache.d_split != 0) return;
  const int64_t size = e == Elem::kF32 ? 4 : (e == Elem::kF16 || e == Elem::kBF16) ? 2 : 1;
  const bool i4 = e == Elem::kI4;  // two elements a byte
  const int64_t bytes = i4 ? (D + 1) / 2 : D * size;
  if (bytes <= 0) return;  // no channels (a value head size of 0): no rows to touch
  const int64_t sh = kv.cache.Sh(w.b);
  const int64_t head_bytes = i4 ? sh / 2 : sh * size;
  // A key's own antiquant parameters (per token, or tile-quantized rows, whose scales sit beside
  // the row's values) are a miss of their own when the packing first reads them.
  const Dequant& dq = kv.dequant;
  const bool per_key = dq.kind == Dequant::Kind::kPerToken ||
                       dq.kind == Dequant::Kind::kPerTokenHead ||
                       dq.kind == Dequant::Kind::kPerTile;
  auto param_bytes = [](Elem pe) { return pe == Elem::kF32 ? 4 : pe == Elem::kI8 ? 1 : 2; };
  for (int64_t j = std::max(j0, p.prefix_len); j < j1; ++j) {
    const void* base;
    int64_t off, coord[2];
    uint8_t pre;
    ResolveItemKey(p, kv, kv2, w, hk, j, &base, &off, &pre, per_key ? coord : nullptr);
    const char* row = static_cast<const char*>(base) + (i4 ? off / 2 : off * size);
    for (int64_t h = 0; h < n_hk; ++h, row += head_bytes) {  // heads: a linear stride (sh)
      for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o, 0, 2);
      __builtin_prefetch(row + bytes - 1, 0, 2);
      if (per_key && !pre) {
        const int64_t idx = dq.RowIndex(coord[0], hk + h, coord[1]);
        __builtin_prefetch(static_cast<const char*>(dq.scale) + idx * param_bytes(dq.scale_elem),
                           0, 2);
        if (dq.offset != nullptr)
          __builtin_prefetch(
              static_cast<const char*>(dq.offset) + idx * param_bytes(dq.offset_elem), 0, 2);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Packing

// Typed loads of W elements at element index e of row pointer `row`.
template <Elem E>
inline typename V::T LoadAt(const void* row, int64_t e) {
  if constexpr (E == Elem::kF32) return V::Load(static_cast<const float*>(row) + e);
  else if constexpr (E == Elem::kF16) return V::LoadF16(static_cast<const uint16_t*>(row) + e);
  else return V::LoadBF16(static_cast<const uint16_t*>(row) + e);
}

// The tile's keys all live in one vector-contiguous operand: row[n] points at channel 0 of key n
// (typed element pointer) and doff[k] is the element offset of channel k * W.
struct FastRows {
  const void* row[TN];
  int64_t doff[1024 / W + 1];
  bool ok = false;
  bool linear = false;  // doff[k] == k * W
};

inline bool MakeFastRows(const KvOperand& kv, const void* const* base, const int64_t* off,
                         const uint8_t* pre, int64_t nk, int64_t D, FastRows* f) {
  const Operand& o = pre[0] ? kv.prefix : kv.cache;
  if (!VecContiguous(o) || D / W > 1024 / W) return false;
  for (int64_t n = 0; n < nk; ++n)
    if (pre[n] != pre[0]) return false;
  const int64_t size = o.elem == Elem::kF32 ? 4 : 2;
  for (int64_t n = 0; n < nk; ++n) f->row[n] = static_cast<const char*>(base[n]) + off[n] * size;
  f->linear = true;
  for (int64_t k = 0; k * W < D; ++k) {
    f->doff[k] = DOff(o, k * W);
    f->linear = f->linear && f->doff[k] == k * W;
  }
  return true;
}

// kAlsoV: the rows are the values too (K = V, SparseAttnSharedkv): each W x W block is also
// stored untransposed into v (row stride ld), so the rows are read and converted once.
template <Elem E, bool kAlsoV = false>
inline void PackKTFast(const FastRows& f, int64_t nk, int64_t D, int64_t row0, float* kt,
                       float* v = nullptr, int64_t ld = 0) {
  const int64_t npad = (nk + W - 1) / W * W, dfull = D / W * W;
  for (int64_t n0 = 0; n0 < npad; n0 += W) {
    const int m = static_cast<int>(std::min<int64_t>(W, nk - n0));
    const void* rows[W];  // local copies: the stores below could alias f as far as GCC knows
    for (int i = 0; i < W; ++i) rows[i] = i < m ? f.row[n0 + i] : nullptr;
    for (int64_t d0 = 0; d0 < dfull; d0 += W) {
      typename V::T r[W];
      const int64_t e = f.doff[d0 / W];
      if (m == W) {
        OPENFIA_UNROLL
        for (int i = 0; i < W; ++i) r[i] = LoadAt<E>(rows[i], e);
      } else {
        for (int i = 0; i < W; ++i) r[i] = i < m ? LoadAt<E>(rows[i], e) : V::Zero();
      }
      if constexpr (kAlsoV)
        for (int i = 0; i < m; ++i) V::Store(v + (n0 + i) * ld + d0, r[i]);
      V::Transpose(r);
      OPENFIA_UNROLL
      for (int i = 0; i < W; ++i) V::Store(kt + (row0 + d0 + i) * TN + n0, r[i]);
    }
  }
}

// kt[(row0 + d) * TN + n] = channel d of key n, for d < D, n < round_up(nk, W) (zeros past nk).
inline void PackKT(const KvOperand& kv, const void* const* base, const int64_t* off,
                   const uint8_t* pre, int64_t nk, int64_t D, int64_t row0, float* kt,
                   FastRows* fast, const TileDq& dq, DqRows* dq_rows = nullptr) {
  const int64_t npad = (nk + W - 1) / W * W;
  const int64_t dfull = D / W * W;
  if (dq.any() && dq_rows != nullptr && MakeDqRows(kv, base, off, pre, nk, D, dq, dq_rows)) {
    PackKTDqAny(*dq_rows, nk, dfull, row0, kt);
  } else if (!dq.any() && MakeFastRows(kv, base, off, pre, nk, D, fast)) {
    switch ((pre[0] ? kv.prefix : kv.cache).elem) {
      case Elem::kF32: PackKTFast<Elem::kF32>(*fast, nk, D, row0, kt); break;
      case Elem::kF16: PackKTFast<Elem::kF16>(*fast, nk, D, row0, kt); break;
      default: PackKTFast<Elem::kBF16>(*fast, nk, D, row0, kt); break;
    }
  } else {
    const bool cc = VecContiguous(kv.cache), pc = VecContiguous(kv.prefix);
    for (int64_t n0 = 0; n0 < npad; n0 += W) {
      for (int64_t d0 = 0; d0 < dfull; d0 += W) {
        typename V::T r[W];
        for (int i = 0; i < W; ++i) {
          const int64_t n = n0 + i;
          if (n < nk) {
            const Operand& o = pre[n] ? kv.prefix : kv.cache;
            if (dq.any()) {
              const Dequant* d = pre[n] ? dq.prefix : dq.cache;
              if (DqVecOk(o, d)) {
                r[i] = LoadRowDq(o, *d, dq, n, base[n], off[n], d0);
              } else {
                alignas(64) float t[W];
                for (int c = 0; c < W; ++c)
                  t[c] = LoadElem(o, dq, n, pre[n], base[n], off[n], d0 + c);
                r[i] = V::Load(t);
              }
            } else {
              r[i] = LoadRow(o, pre[n] ? pc : cc, base[n], off[n], d0);
            }
          } else {
            r[i] = V::Zero();
          }
        }
        V::Transpose(r);
        for (int i = 0; i < W; ++i) V::Store(kt + (row0 + d0 + i) * TN + n0, r[i]);
      }
    }
  }
  for (int64_t n0 = 0; n0 < npad; n0 += W) {
    for (int64_t d = dfull; d < D; ++d) {
      for (int64_t n = n0; n < n0 + W; ++n) {
        float x = 0.f;
        if (n < nk) {
          const Operand& o = pre[n] ? kv.prefix : kv.cache;
          x = LoadElem(o, dq, n, pre[n], base[n], off[n], d);
        }
        kt[(row0 + d) * TN + n] = x;
      }
    }
  }
}

// dst[d] = 0 for D <= d < ld (a packed row's padding).
inline void ZeroPad(float* dst, int64_t D, int64_t ld) {
  int64_t d = D;
  if (D % W == 0)
    for (; d + W <= ld; d += W) V::Store(dst + d, V::Zero());
  for (; d < ld; ++d) dst[d] = 0.f;
}

template <Elem E>
inline void PackVFast(const FastRows& f, int64_t nk, int64_t dfull, int64_t ld, float* v) {
  for (int64_t n = 0; n < nk; ++n) {
    float* const dst = v + n * ld;
    const void* const src = f.row[n];
    if (f.linear) {
      for (int64_t d0 = 0; d0 < dfull; d0 += W) V::Store(dst + d0, LoadAt<E>(src, d0));
    } else {
      for (int64_t d0 = 0; d0 < dfull; d0 += W) V::Store(dst + d0, LoadAt<E>(src, f.doff[d0 / W]));
    }
  }
}

// v[n * ld + d] = channel d of value n for n < nk, d < ld (zeros past D).
inline void PackV(const KvOperand& kv, const void* const* base, const int64_t* off,
                  const uint8_t* pre, int64_t nk, int64_t D, int64_t ld, float* v,
                  FastRows* fast, const TileDq& dq, DqRows* dq_rows = nullptr) {
  const int64_t dfull = D / W * W;
  if (dq.any() && dq_rows != nullptr && MakeDqRows(kv, base, off, pre, nk, D, dq, dq_rows)) {
    PackVDqAny(*dq_rows, nk, dfull, ld, v);
  } else if (!dq.any() && MakeFastRows(kv, base, off, pre, nk, D, fast)) {
    switch ((pre[0] ? kv.prefix : kv.cache).elem) {
      case Elem::kF32: PackVFast<Elem::kF32>(*fast, nk, dfull, ld, v); break;
      case Elem::kF16: PackVFast<Elem::kF16>(*fast, nk, dfull, ld, v); break;
      default: PackVFast<Elem::kBF16>(*fast, nk, dfull, ld, v); break;
    }
  } else {
    const bool cc = VecContiguous(kv.cache), pc = VecContiguous(kv.prefix);
    for (int64_t n = 0; n < nk; ++n) {
      const Operand& o = pre[n] ? kv.prefix : kv.cache;
      const Dequant* d = dq.any() ? (pre[n] ? dq.prefix : dq.cache) : nullptr;
      if (DqVecOk(o, d)) {
        for (int64_t d0 = 0; d0 < dfull; d0 += W)
          V::Store(v + n * ld + d0, LoadRowDq(o, *d, dq, n, base[n], off[n], d0));
        continue;
      }
      for (int64_t d0 = 0; d0 < dfull; d0 += W) {
        if (dq.any()) {
          for (int c = 0; c < W; ++c)
            v[n * ld + d0 + c] = LoadElem(o, dq, n, pre[n], base[n], off[n], d0 + c);
        } else {
          V::Store(v + n * ld + d0, LoadRow(o, pre[n] ? pc : cc, base[n], off[n], d0));
        }
      }
    }
  }
  for (int64_t n = 0; n < nk; ++n) {
    const Operand& o = pre[n] ? kv.prefix : kv.cache;
    float* dst = v + n * ld;
    for (int64_t d = dfull; d < D; ++d) dst[d] = LoadElem(o, dq, n, pre[n], base[n], off[n], d);
    ZeroPad(dst, D, ld);
  }
}

// Operands whose rows at the same offsets hold the same values, channel for channel.
inline bool SameLayout(const Operand& a, const Operand& b) {
  return a.data == b.data && a.batch_data == b.batch_data && a.elem == b.elem && a.sd == b.sd &&
         a.d_split == b.d_split && a.sd_outer == b.sd_outer;
}

// Whether two operands address the same elements.
inline bool SameOperand(const Operand& a, const Operand& b) {
  return SameLayout(a, b) && a.sb == b.sb && a.sh == b.sh && a.ss == b.ss &&
         a.batch_sh == b.batch_sh;
}

inline bool SameDequant(const Dequant& a, const Dequant& b) {
  return a.kind == b.kind && a.scale == b.scale && a.scale_elem == b.scale_elem &&
         a.offset == b.offset && a.offset_elem == b.offset_elem && a.sb == b.sb &&
         a.sh == b.sh && a.ss == b.ss && a.sd == b.sd && a.d_group == b.d_group &&
         a.logical == b.logical;
}

// Whether b's rows are a's rows (the same bytes from each row's start, and b's antiquant
// parameters, if any, a's): MLA's values are its keys' first channels.
inline bool SameRows(const KvOperand& a, const KvOperand& b) {
  const auto params = [](const Dequant& x, const Dequant& y) {
    return y.kind == Dequant::Kind::kNone || SameDequant(x, y);
  };
  return SameOperand(a.cache, b.cache) && SameOperand(a.prefix, b.prefix) &&
         params(a.dequant, b.dequant) && params(a.prefix_dequant, b.prefix_dequant);
}

// K = V (SparseAttnSharedkv; any FIA call given the same tensor twice): the same unquantized
// operands, whole vectors of channels, no rope (checked once per item).
inline bool KvShared(const Problem& p, const KvOperand& kx, const KvOperand& vx, int64_t D) {
  return p.d_rope == 0 && p.d_v == p.d_qk && D % W == 0 &&
         kx.dequant.kind == Dequant::Kind::kNone && vx.dequant.kind == Dequant::Kind::kNone &&
         kx.prefix_dequant.kind == Dequant::Kind::kNone &&
         vx.prefix_dequant.kind == Dequant::Kind::kNone && SameLayout(kx.cache, vx.cache) &&
         SameLayout(kx.prefix, vx.prefix);
}

// With KvShared: when every key of the tile has the same storage row as its value, packs kt
// (as PackKT) and v (as PackV) in one pass over the rows; with_kt false: v only (the scores
// then come from v: ScoresFromRows).
inline bool PackKVShared(const KvOperand& kx, const TileScratch& sc, int64_t nk, int64_t D,
                         int64_t ld, FastRows* fast, bool with_kt = true) {
  for (int64_t n = 0; n < nk; ++n)
    if (sc.kbase[n] != sc.vbase[n] || sc.koff[n] != sc.voff[n]) return false;
  if (!MakeFastRows(kx, sc.kbase, sc.koff, sc.kpre, nk, D, fast)) return false;
  const Elem e = (sc.kpre[0] ? kx.prefix : kx.cache).elem;
  if (!with_kt) {
    switch (e) {
      case Elem::kF32: PackVFast<Elem::kF32>(*fast, nk, D, ld, sc.v); break;
      case Elem::kF16: PackVFast<Elem::kF16>(*fast, nk, D, ld, sc.v); break;
      default: PackVFast<Elem::kBF16>(*fast, nk, D, ld, sc.v); break;
    }
  } else {
    switch (e) {
      case Elem::kF32: PackKTFast<Elem::kF32, true>(*fast, nk, D, 0, sc.kt, sc.v, ld); break;
      case Elem::kF16: PackKTFast<Elem::kF16, true>(*fast, nk, D, 0, sc.kt, sc.v, ld); break;
      default: PackKTFast<Elem::kBF16, true>(*fast, nk, D, 0, sc.kt, sc.v, ld); break;
    }
  }
  for (int64_t n = 0; n < nk; ++n) ZeroPad(sc.v + n * ld, D, ld);
  return true;
}

// True when a packed value is not finite. Then a boundary tile's masked cells must be skipped,
// not multiplied by P = 0 (PvMasked), and every tile keeps the exact exp (a tiny P times inf is
// inf; ExpP would make it 0 x inf = NaN). Full tiles need no mask: every cell is visible and a
// NaN must propagate.
inline bool AnyNonFinite(const float* v, int64_t nk, int64_t ld) {
  // x - x is 0 for finite x and NaN otherwise; four sums, so that the pass is not one chain of
  // dependent additions (every tile of the packed path runs it).
  typename V::T bad[4] = {V::Zero(), V::Zero(), V::Zero(), V::Zero()};
  const int64_t n = nk * ld;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int k = 0; k < 4; ++k) {
      const typename V::T x = V::Load(v + i + k * W);
      bad[k] = V::Add(bad[k], V::Sub(x, x));
    }
  for (; i < n; i += W) {
    const typename V::T x = V::Load(v + i);
    bad[0] = V::Add(bad[0], V::Sub(x, x));
  }
  return V::ReduceSum(V::Add(V::Add(bad[0], bad[1]), V::Add(bad[2], bad[3]))) != 0.f;
}

// s[n] *= scale for n < npad: the fp32 product the softmax step applies to raw scores.
inline void ScaleScores(float* s, int64_t npad, float scale) {
  const typename V::T vscale = V::Set1(scale);
  for (int64_t n = 0; n < npad; n += W) V::Store(s + n, V::Mul(V::Load(s + n), vscale));
}

// Scores the fp32 products could not represent, computed again as the reference computes them.
// A score of finite q and K rows is finite, but its fp32 partial sums can pass FLT_MAX on the
// way (dequantized keys near the bf16 maximum, whose terms cancel): the tile's sum order then
// makes it inf or NaN, and the row NaN, where the formula's score is an ordinary number. Each
// non-finite score among keys [0, nk) of the rows is recomputed from the query row (f32, rope
// appended) and the key's values as packed (LoadElem: the same dequantized, rounded values):
// products and sum in double in channel order, times the scale in double, rounded once to
// fp32. A NaN or infinity in q or K keeps its NaN / inf, as the formula gives it. Returns
// false when every score was finite; otherwise the tile's scores leave scaled (the others by
// the fp32 product the softmax step would apply), and the caller must not scale them again.
inline bool RescoreNonFinite(const Problem& p, const TileScratch& sc, const KvOperand& kx,
                             const KvOperand& rx, const TileDq& kdq, const TileDq& rdq,
                             const float* q, int64_t ldq, int64_t rows, int64_t nk, int64_t npad,
                             bool scaled, float* s) {
  bool any = false;
  for (int64_t r = 0; r < rows && !any; ++r)
    if (AnyNonFinite(s + r * TN, 1, npad))  // (the padding's cells too: keys [0, nk) decide)
      for (int64_t n = 0; n < nk && !any; ++n) any = !std::isfinite(s[r * TN + n]);
  if (!any) return false;
  if (!scaled)
    for (int64_t r = 0; r < rows; ++r) ScaleScores(s + r * TN, npad, static_cast<float>(p.scale));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * ldq;
    for (int64_t n = 0; n < nk; ++n) {
      float& cell = s[r * TN + n];
      if (std::isfinite(cell)) continue;
      const bool pre = sc.kpre[n] != 0;
      const Operand& ko = pre ? kx.prefix : kx.cache;
      double dot = 0.0;
      for (int64_t d = 0; d < p.d_qk; ++d)
        dot += static_cast<double>(qr[d]) * LoadElem(ko, kdq, n, pre, sc.kbase[n], sc.koff[n], d);
      const Operand& ro = pre ? rx.prefix : rx.cache;
      for (int64_t d = 0; d < p.d_rope; ++d)
        dot += static_cast<double>(qr[p.d_qk + d]) *
               LoadElem(ro, rdq, n, pre, sc.rbase[n], sc.roff[n], d);
      cell = static_cast<float>(dot * p.scale);
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels


// c[r * ldc + j] (+)= sum_{k < K} a[r * lda + k] * b[k * ldb + j] for R rows and C vectors of
// columns j: broadcast a, FMA into R x C register accumulators, which start at zero (scores) or
// at c (ACC: the P V accumulators).
template <int R, int C, bool ACC>
inline void GemmBlock(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t K,
                      float* c, int64_t ldc) {
  typename V::T acc[R][C];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) acc[r][j] = ACC ? V::Load(c + r * ldc + j * W) : V::Zero();
  for (int64_t k = 0; k < K; ++k) {
    typename V::T x[C];
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) x[j] = V::Load(b + k * ldb + j * W);
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) {
      const typename V::T ab = V::Set1(a[r * lda + k]);
      OPENFIA_UNROLL
      for (int j = 0; j < C; ++j) acc[r][j] = V::Fma(ab, x[j], acc[r][j]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) V::Store(c + r * ldc + j * W, acc[r][j]);
}

// c[r * ldc + j] (+)= sum_{k < K} a[r * lda + k] * b[k * ldb + j] for r < m and j < ncols (a
// multiple of W), from zero (scores) or c (ACC: the P V accumulators): register blocks of kRB
// rows x kCB vectors, narrower at the edges.
template <bool ACC, int R>
inline void GemmRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t ncols,
                     int64_t K, float* c, int64_t ldc) {
  int64_t c0 = 0;
  for (; c0 + kCB * W <= ncols; c0 += kCB * W)
    GemmBlock<R, kCB, ACC>(a, lda, b + c0, ldb, K, c + c0, ldc);
  for (; c0 < ncols; c0 += W) GemmBlock<R, 1, ACC>(a, lda, b + c0, ldb, K, c + c0, ldc);
}

template <bool ACC, int R>
inline void GemmTail(int64_t rem, const float* a, int64_t lda, const float* b, int64_t ldb,
                     int64_t ncols, int64_t K, float* c, int64_t ldc) {
  if constexpr (R > 0) {
    if (rem == R) return GemmRows<ACC, R>(a, lda, b, ldb, ncols, K, c, ldc);
    GemmTail<ACC, R - 1>(rem, a, lda, b, ldb, ncols, K, c, ldc);
  }
}

template <bool ACC>
inline void Gemm(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb,
                 int64_t ncols, int64_t K, float* c, int64_t ldc) {
  int64_t r0 = 0;
  for (; r0 + kRB <= m; r0 += kRB)
    GemmRows<ACC, kRB>(a + r0 * lda, lda, b, ldb, ncols, K, c + r0 * ldc, ldc);
  GemmTail<ACC, kRB - 1>(m - r0, a + r0 * lda, lda, b, ldb, ncols, K, c + r0 * ldc, ldc);
}

// s[r * TN + c] = sum_d q[r * ldq + d] * kt[d * TN + c] for r < rows, c < npad.
inline void Scores(const float* q, int64_t ldq, int64_t rows, const float* kt, int64_t D,
                   int64_t npad, float* s) {
  Gemm<false>(q, ldq, rows, kt, TN, npad, D, s, TN);
}

// dst[i * ldd + j] = src[j * lds + i] for i, j < W: source rows j >= src_rows read as zeros,
// destination rows i >= dst_rows not written.
inline void TransposeBlock(const float* src, int64_t lds, int64_t src_rows, float* dst,
                           int64_t ldd, int64_t dst_rows) {
  typename V::T x[W];
  for (int j = 0; j < W; ++j) x[j] = j < src_rows ? V::Load(src + j * lds) : V::Zero();
  V::Transpose(x);
  const int m = static_cast<int>(std::min<int64_t>(W, dst_rows));
  for (int i = 0; i < m; ++i) V::Store(dst + i * ldd, x[i]);
}

// Scores of a K = V tile from its packed row-major values, without a transposed K (its packing
// is a transpose per W x W block: a third of a SparseAttnSharedkv decode's packing work, and
// kt's 128 KB at D = 512 beside Q, V and the accumulators overflow a 512 KB L2). The roles of
// the operands swap: st[n * ldt + r] = sum_d v[n * vs + d] * qt[d * ldt + r] for keys n < nk and
// the ldt (a multiple of W) columns of the transposed query rows qt, then s[r * TN + n] =
// st[n * ldt + r] for r < rows, zeros for the padding keys [nk, npad). Each score is the same
// FMAs in the same order as Scores computes it (an FMA's product does not depend on the order
// of its factors), so the result is bitwise that of Scores.
inline void ScoresFromRows(const float* v, int64_t vs, int64_t nk, const float* qt, int64_t ldt,
                           int64_t rows, int64_t D, int64_t npad, float* st, float* s) {
  Gemm<false>(v, vs, nk, qt, ldt, ldt, D, st, ldt);
  for (int64_t n0 = 0; n0 < npad; n0 += W)
    for (int64_t r0 = 0; r0 < rows; r0 += W)
      TransposeBlock(st + n0 * ldt + r0, ldt, nk - n0, s + r0 * TN + n0, TN, rows - r0);
}

// qt[d * ldt + r] = q[r * ldq + d] for d < D (a multiple of W), r < ldt (a multiple of W; zeros
// past rows).
inline void TransposeQuery(const float* q, int64_t ldq, int64_t rows, int64_t D, int64_t ldt,
                           float* qt) {
  for (int64_t r0 = 0; r0 < ldt; r0 += W)
    for (int64_t d0 = 0; d0 < D; d0 += W)
      TransposeBlock(q + r0 * ldq + d0, ldq, rows - r0, qt + d0 * ldt + r0, ldt, W);
}

// acc[r * lda + c] += sum_{n < nk} p[r * TN + n] * v[n * vs + c] for r < rows, c < ldv: v rows
// at stride vs.
inline void Pv(const float* p, int64_t rows, const float* v, int64_t vs, int64_t ldv, int64_t nk,
               float* acc, int64_t lda) {
  Gemm<true>(p, TN, rows, v, vs, ldv, nk, acc, lda);
}

// Boundary tile with non-finite values: a masked cell must contribute nothing (not 0 * NaN).
inline void PvMasked(const float* p, int64_t rows, const uint8_t* vis, int64_t nq, const float* v,
                     int64_t vs, int64_t ldv, int64_t nk, float* acc, int64_t lda) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* vr = vis + (r % nq) * TN;
    for (int64_t n = 0; n < nk; ++n) {
      if (!vr[n]) continue;
      const typename V::T pb = V::Set1(p[r * TN + n]);
      for (int64_t c = 0; c < ldv; c += W)
        V::Store(acc + r * lda + c,
                 V::Fma(pb, V::Load(v + n * vs + c), V::Load(acc + r * lda + c)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Streaming (no-pack) kernels for few rows per work item (decode: the GQA heads of one KV head).
// With so few rows every K/V byte is used by only a handful of FMAs, so packing the tile costs
// more than it saves: each K row (D contiguous channels) is converted in registers and dotted
// with the rows' queries; each V row is converted and accumulated into the rows' outputs.
// P * V performs exactly the FMAs of Pv in the same order (bitwise equal to the packed path); a
// score is the same dot product with the channel sum taken in W lane-wise partial sums first.

constexpr int64_t kStreamRows = 16;  // at most this many rows per item take the streaming path

// s[r * TN + n] = q[r] . K[n] for R rows, keys n < nk.
template <Elem E, int R>
inline void StreamScoreRows(const FastRows& f, int64_t nk, const float* q, int64_t ldq,
                            int64_t D, float* s) {
  const int64_t nd = D / W;
  for (int64_t n = 0; n < nk; ++n) {
    typename V::T acc[R];
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) acc[r] = V::Zero();
    const void* row = f.row[n];
    for (int64_t k = 0; k < nd; ++k) {
      const typename V::T x = LoadAt<E>(row, f.doff[k]);
      OPENFIA_UNROLL
      for (int r = 0; r < R; ++r) acc[r] = V::Fma(V::Load(q + r * ldq + k * W), x, acc[r]);
    }
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) s[r * TN + n] = V::ReduceSum(acc[r]);
  }
}

template <Elem E, int R>
inline void StreamScoreTail(int64_t rem, const FastRows& f, int64_t nk, const float* q,
                            int64_t ldq, int64_t D, float* s) {
  if constexpr (R > 0) {
    if (rem == R) return StreamScoreRows<E, R>(f, nk, q, ldq, D, s);
    StreamScoreTail<E, R - 1>(rem, f, nk, q, ldq, D, s);
  }
}

template <Elem E>
inline void StreamScores(const FastRows& f, int64_t nk, const float* q, int64_t ldq,
                         int64_t rows, int64_t D, float* s) {
  constexpr int kR = 8;
  int64_t r0 = 0;
  for (; r0 + kR <= rows; r0 += kR)
    StreamScoreRows<E, kR>(f, nk, q + r0 * ldq, ldq, D, s + r0 * TN);
  StreamScoreTail<E, kR - 1>(rows - r0, f, nk, q + r0 * ldq, ldq, D, s + r0 * TN);
}

// acc[r * lda + c] += sum_{n < nk} p[r * TN + n] * V[n][c], R rows, C vectors of channels.
template <Elem E, int R, int C>
inline void StreamPvBlock(const float* p, const FastRows& f, int64_t k0, int64_t nk, float* acc,
                          int64_t lda) {
  typename V::T a[R][C];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int c = 0; c < C; ++c) a[r][c] = V::Load(acc + r * lda + c * W);
  for (int64_t n = 0; n < nk; ++n) {
    typename V::T x[C];
    OPENFIA_UNROLL
    for (int c = 0; c < C; ++c) x[c] = LoadAt<E>(f.row[n], f.doff[k0 + c]);
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) {
      const typename V::T pb = V::Set1(p[r * TN + n]);
      OPENFIA_UNROLL
      for (int c = 0; c < C; ++c) a[r][c] = V::Fma(pb, x[c], a[r][c]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int c = 0; c < C; ++c) V::Store(acc + r * lda + c * W, a[r][c]);
}

template <Elem E, int R>
inline void StreamPvRows(const float* p, const FastRows& f, int64_t Dv, int64_t nk, float* acc,
                         int64_t lda) {
  int64_t c0 = 0;
  for (; c0 + kCB * W <= Dv; c0 += kCB * W)
    StreamPvBlock<E, R, kCB>(p, f, c0 / W, nk, acc + c0, lda);
  for (; c0 < Dv; c0 += W) StreamPvBlock<E, R, 1>(p, f, c0 / W, nk, acc + c0, lda);
}

template <Elem E, int R>
inline void StreamPvTail(int64_t rem, const float* p, const FastRows& f, int64_t Dv, int64_t nk,
                         float* acc, int64_t lda) {
  if constexpr (R > 0) {
    if (rem == R) return StreamPvRows<E, R>(p, f, Dv, nk, acc, lda);
    StreamPvTail<E, R - 1>(rem, p, f, Dv, nk, acc, lda);
  }
}

template <Elem E>
inline void StreamPv(const float* p, int64_t rows, const FastRows& f, int64_t Dv, int64_t nk,
                     float* acc, int64_t lda) {
  int64_t r0 = 0;
  for (; r0 + kRB <= rows; r0 += kRB)
    StreamPvRows<E, kRB>(p + r0 * TN, f, Dv, nk, acc + r0 * lda, lda);
  StreamPvTail<E, kRB - 1>(rows - r0, p + r0 * TN, f, Dv, nk, acc + r0 * lda, lda);
}

inline Elem FastElem(const KvOperand& kv, const uint8_t* pre) {
  return (pre[0] ? kv.prefix : kv.cache).elem;
}
