// openfia: the AMX-BF16 decode kernel amx_decode (few query rows per KV head).
//
// Decode reads every K/V byte for only G (GQA group x query rows, <= 16) rows, so the kernel
// must be bound by the loads of the cache, not by math. Per KV head and 64-key tile:
//   S^T = K Q^T    on AMX: A = 16 keys x 32 channels loaded straight from the cache rows (tile
//                  loads take any row stride; paged or contiguous rows of one block are equally
//                  spaced), B = the item's query rows as bf16 pairs (packed once per item),
//                  C = 16 x R f32;
//   softmax        fp32, the same operations as attend-inl.h (scale, running max, exp, sum,
//                  P rounded to bf16 per SPEC 2.6 before P.V);
//   acc += P V     fp32 FMAs on the vector units (PvFma): each value row is widened in registers
//                  and FMAed into up to 4 rows x 64 channels of accumulators; no repacking of V
//                  and no tile loads of it (with R = 4 rows an AMX P.V step pays a full V tile
//                  load for 4 rows of work, and packing V pairs for it is a store -> tile load
//                  round trip, which does not forward).
// The score steps of head x + 1 are issued before head x's P V, so the tile unit works on them
// while the vector units run the FMAs.
// bf16 x bf16 products are exact in fp32; only the summation order differs from the FMA path.
// AMX-BF16 treats bf16 subnormal inputs as zero and flushes subnormal results (see
// kernels_amx.cc): far inside the bf16 tolerance. int8 / int4 keys are dequantized on the way
// into the tiles: (x + offset) * scale in fp32 as attend-inl.h's DqAt computes it, rounded to
// bf16 (the query dtype) by VCVTNE2PS2BF16. int8 / int4 values widen to fp32 in registers
// (exact integers); a per-token scale is folded into P (p * scale, one fp32 rounding instead of
// the reference's bf16 rounding of x * scale: within the bf16 output tolerance) and a per-token
// offset into one per-row term; per-channel parameters are applied to the widened row.
//
// Items it runs: dense (no sparse lists, no second source), bf16 query, no rope, no pse, no
// mask, no band cutting into the item's keys (every tile fully visible), <= 16 rows per KV head,
// d_qk and d_v multiples of 32 (<= 512), K and V each bf16 row-contiguous or int8/int4 with a
// vector-antiquant Dequant (no shared prefix then). Everything else returns false.
//
// Memory: the item's tiles are read head by head; the next tile's rows are prefetched into L2
// while the current one is computed (one tile ahead; token by token in address order, spread
// over the P V key loops of the heads), the first tile at the start of the item.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/convert.h"
#include "common/problem.h"
#include "engine/kernel.h"
#include "engine/kernels/generic/common.h"
#include "engine/kernels/generic/support.h"
#include "engine/kernels/generic/tile_scratch.h"
#include "engine/kernels/registry.h"

#if defined(OPENFIA_HAVE_AMX)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Lambdas taking vector arguments inside templates get this ABI note although they are inlined.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
// The target's instructions apply from here on only (not through compiler flags on the whole
// file): inline functions of the shared headers and std templates included above stay
// baseline code, so the linker can never hand a baseline caller this file's copy of them.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,amx-tile,amx-bf16,fma,f16c")

namespace openfia::internal::amx_decode {

#include "engine/kernels/avx512/vec_avx512-inl.h"

struct V : Avx512Vec {};

// The generic loop's helpers (ResolveKey, MakeDqRows, DqAt, ExpScalar) for this target.
#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS

static_assert(TN == 64, "the decode kernel tiles 64 keys as 4 groups of 16 / 2 steps of 32");

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// tmm0-1: score accumulators (16 keys x R f32), tmm2-3: K (16 keys x 32 channels bf16),
// tmm4: Q^T pairs (16 channel pairs x R).
inline void LoadConfig(int64_t R) {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette_id = 1;
  const auto set = [&](int t, int rows, int colsb) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = static_cast<uint16_t>(colsb);
  };
  set(0, 16, 4 * R);
  set(1, 16, 4 * R);
  set(2, 16, 64);
  set(3, 16, 64);
  set(4, 16, 4 * R);
  // Not _tile_loadconfig: GCC 12's version declares only the first 8 bytes of the config as its
  // input, so the compiler may drop or sink the stores of the rest (seen: garbage rows/colsb and
  // SIGILL on the first tile op in a -O3 build). Here the whole struct is the operand.
  __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

// Compiler barrier: GCC's tile load intrinsics do not declare that they read memory, so vector
// stores into a buffer (packed K / V rows, P) could legally be moved after the tile load that
// reads it. Every tile step starts with one.
inline void MemoryBarrier() { __asm__ volatile("" ::: "memory"); }

enum class Kind : uint8_t { kBf16, kDq };

// How one of K / V is read, or false when the kernel does not run it.
inline bool OperandKind(const KvOperand& kv, Kind* kind) {
  const Operand& o = kv.cache;
  if (o.sd != 1 || o.d_split != 0) return false;
  if (kv.dequant.kind == Dequant::Kind::kNone) {
    if (o.elem != Elem::kBF16) return false;
    if (kv.prefix.present()) {
      const Operand& x = kv.prefix;
      if (kv.prefix_dequant.kind != Dequant::Kind::kNone || x.elem != Elem::kBF16 || x.sd != 1 ||
          x.d_split != 0)
        return false;
    }
    *kind = Kind::kBf16;
    return true;
  }
  // Vector antiquant exactly as MakeDqRows accepts it, decided once for the item: no shared
  // prefix, byte-aligned int4 rows, scales one per row or one vector shared by every row.
  const Dequant& dq = kv.dequant;
  if (kv.prefix.present() || !DqVecOk(o, &dq)) return false;
  if (dq.sd != 0 && (dq.sb != 0 || dq.ss != 0)) return false;
  if (o.elem == Elem::kI4 && ((o.sb | o.sh | o.ss) & 1) != 0) return false;
  *kind = Kind::kDq;
  return true;
}

inline bool Can(const Problem& p, const WorkItem& w, Kind* kk, Kind* vk) {
  if (p.q.elem != Elem::kBF16 || p.d_rope > 0 || p.full_quant) return false;
  if (!p.key_offset.empty() || p.k2.cache.present() || p.pse != nullptr || p.mask != nullptr)
    return false;
  const int64_t R = w.head_rows();
  if (R < 1 || R > 16 || w.j0 >= w.j1) return false;
  if (p.d_qk % 32 != 0 || p.d_v % 32 != 0 || p.d_qk > 512 || p.d_v > 512) return false;
  if (!OperandKind(p.k, kk) || !OperandKind(p.v, vk)) return false;
  // Every tile fully visible: the band lets each row see every key of the item.
  const auto at = [&](const std::vector<int64_t>& v) {
    return v.empty() ? Problem::kNoBand : v[w.b];
  };
  const int64_t pre = at(p.band_pre), next = at(p.band_next);
  return (w.i1 - 1) - pre <= w.j0 && w.j1 - 1 <= w.i0 + next;
}

// Storage rows of the keys of one tile, for KV head w.hk (head hk + x is x * sh further).
struct TileRows {
  const void* kb[TN];
  int64_t ko[TN];
  const void* vb[TN];
  int64_t vo[TN];
  uint8_t pre[TN];
  int64_t kc[2 * TN];
  int64_t vc[2 * TN];
  // Byte address of head w.hk's row of key n, and the bytes from one KV head to the next.
  const char* k0[TN];
  const char* v0[TN];
  int64_t kstep[TN], vstep[TN];
  int64_t jt0 = 0, nk = 0;
};

inline int64_t ElemBits(Elem e) {
  switch (e) {
    case Elem::kF32: return 32;
    case Elem::kF16: case Elem::kBF16: return 16;
    case Elem::kI4: return 4;
    default: return 8;
  }
}

// Byte address of (row at element offset `off` of `base`) of head x of the operand.
inline const char* RowPtr(const KvOperand& kv, const void* base, int64_t off, bool pre,
                          int64_t x) {
  const Operand& o = pre ? kv.prefix : kv.cache;
  return static_cast<const char*>(base) + (off + x * o.sh) * ElemBits(o.elem) / 8;
}

inline void Resolve(const Problem& p, const WorkItem& w, int64_t t0, TileRows* t) {
  t->jt0 = std::max(t0, w.j0);
  t->nk = std::min(t0 + TN, w.j1) - t->jt0;
  for (int64_t n = 0; n < t->nk; ++n) {
    ResolveKey(p, p.k, w.b, w.hk, t->jt0 + n, &t->kb[n], &t->ko[n], &t->pre[n], t->kc + 2 * n);
    ResolveKey(p, p.v, w.b, w.hk, t->jt0 + n, &t->vb[n], &t->vo[n], &t->pre[n], t->vc + 2 * n);
    const bool pre = t->pre[n] != 0;
    t->k0[n] = RowPtr(p.k, t->kb[n], t->ko[n], pre, 0);
    t->v0[n] = RowPtr(p.v, t->vb[n], t->vo[n], pre, 0);
    // Head steps are whole bytes: int4 operands have even strides (OperandKind).
    const Operand& ko = pre ? p.k.prefix : p.k.cache;
    const Operand& vo = pre ? p.v.prefix : p.v.cache;
    t->kstep[n] = ko.Sh(w.b) * ElemBits(ko.elem) / 8;
    t->vstep[n] = vo.Sh(w.b) * ElemBits(vo.elem) / 8;
  }
}

// Prefetches (into L2) head x's K rows (v: V rows) of keys [n0, n1) of tile t. Issued a little
// at a time between the current tile's work (a burst would hold every fill buffer and stall the
// demand loads behind it).
inline void Prefetch(const Problem& p, const TileRows& t, int64_t x, bool v, int64_t n0,
                     int64_t n1) {
  const KvOperand& kv = v ? p.v : p.k;
  const int64_t bytes = (v ? p.d_v : p.d_qk) * ElemBits(kv.cache.elem) / 8;
  for (int64_t n = n0; n < std::min(n1, t.nk); ++n) {
    const char* r = v ? t.v0[n] + x * t.vstep[n] : t.k0[n] + x * t.kstep[n];
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(r + o, _MM_HINT_T1);
  }
}

// Slice i (of 8) of the next tile's share of head x (of n_hk) of the current tile: its tokens'
// K and V rows of every head, token by token in address order (a token's rows of all heads are
// usually one contiguous run: BSH / paged caches), so the accesses stream.
inline void PrefetchSlice(const Problem& p, const TileRows& t, int64_t n_hk, int64_t x,
                          int64_t i) {
  const int64_t s = x * 8 + i, ns = n_hk * 8;
  const int64_t n0 = s * t.nk / ns, n1 = (s + 1) * t.nk / ns;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t h = 0; h < n_hk; ++h) {
      Prefetch(p, t, h, false, n, n + 1);
      Prefetch(p, t, h, true, n, n + 1);
    }
}

// Keys [16 k, 16 k + 16) of a tile of nk keys that exist.
inline __mmask16 LiveMask(int64_t nk, int k) {
  return static_cast<__mmask16>(nk >= 16 * (k + 1) ? 0xFFFF
                                : nk <= 16 * k    ? 0
                                                  : (1u << (nk - 16 * k)) - 1);
}

// Antiquant of one operand (OperandKind accepted it): the scale / offset of each row of the
// tile (Dequant::sd == 0: per token, token-head, tensor or head) or one vector over the channels
// (per channel: depends on the head only), as attend-inl.h's DqRows but filled once per tile when
// the row values do not depend on the head, with typed loads.
struct DqOp {
  const char* row[TN];  // channel 0 of key n of the current head (int4: its byte)
  float s[TN], o[TN];
  alignas(64) float sc[512], oc[512];
  bool per_row = true, has_off = false;
};

inline float LoadParam1(const void* p, Elem e, int64_t i) {
  switch (e) {
    case Elem::kF32: return static_cast<const float*>(p)[i];
    case Elem::kBF16: return cvt::BF16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return cvt::Load(p, e, i);
  }
}

inline __m512 LoadParam16(const void* p, Elem e, int64_t i) {
  switch (e) {
    case Elem::kF32: return _mm512_loadu_ps(static_cast<const float*>(p) + i);
    case Elem::kBF16: return V::LoadBF16(static_cast<const uint16_t*>(p) + i);
    case Elem::kF16: return V::LoadF16(static_cast<const uint16_t*>(p) + i);
    default: {
      alignas(64) float t[16];
      for (int c = 0; c < 16; ++c) t[c] = cvt::Load(p, e, i + c);
      return _mm512_load_ps(t);
    }
  }
}

// Fills `r` for head x (KV head hk) of tile t; `coord` the tile's dequant coordinates.
inline void FillDq(const KvOperand& kv, const char* const* row, const int64_t* coord, int64_t nk,
                   int64_t D, int64_t x, int64_t hk, DqOp* r) {
  const Dequant& dq = kv.dequant;
  for (int64_t n = 0; n < nk; ++n) r->row[n] = row[n];
  r->has_off = dq.offset != nullptr;
  r->per_row = dq.sd == 0;
  if (r->per_row) {
    if (x > 0 && dq.sh == 0) return;  // the same values for every head
    for (int64_t n = 0; n < nk; ++n) {
      const int64_t i = dq.Index(coord[2 * n], hk, coord[2 * n + 1], 0);
      r->s[n] = LoadParam1(dq.scale, dq.scale_elem, i);
      r->o[n] = r->has_off ? LoadParam1(dq.offset, dq.offset_elem, i) : 0.f;
    }
  } else {
    const int64_t i = dq.Index(0, hk, 0, 0);
    for (int64_t d = 0; d < D; d += 16) {
      _mm512_store_ps(r->sc + d, LoadParam16(dq.scale, dq.scale_elem, i + d));
      _mm512_store_ps(r->oc + d, r->has_off ? LoadParam16(dq.offset, dq.offset_elem, i + d)
                                            : _mm512_setzero_ps());
    }
    // int4 rows widen as [16 even | 16 odd] channels per 32 (LoadQ32): the parameters too.
    if (kv.cache.elem == Elem::kI4) {
      const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
      const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
      for (float* a : {r->sc, r->oc})
        for (int64_t d = 0; d < D; d += 32) {
          const __m512 lo = _mm512_load_ps(a + d), hi = _mm512_load_ps(a + d + 16);
          _mm512_store_ps(a + d, _mm512_permutex2var_ps(lo, ev, hi));
          _mm512_store_ps(a + d + 16, _mm512_permutex2var_ps(lo, od, hi));
        }
    }
  }
}

// Channels [d0, d0 + 32) of an int8 / int4 row as f32 (exact small integers). int8: in channel
// order. int4 (16 bytes, low nibble first): each byte widened to a 32-bit lane and looked up in a
// 16-entry table of the signed nibble values (VPERMPS reads only the low 4 bits of an index), so
// *lo gets the even channels d0 + 2i and *hi the odd ones: [16 even | 16 odd] (FillDq stores
// per-channel parameters in that order too).
template <Elem E>
inline void LoadQ32(const char* row, int64_t d0, __m512* lo, __m512* hi) {
  if constexpr (E == Elem::kI8) {
    *lo = V::LoadI8(reinterpret_cast<const int8_t*>(row) + d0);
    *hi = V::LoadI8(reinterpret_cast<const int8_t*>(row) + d0 + 16);
  } else {
    const __m512 table = _mm512_set_ps(-1, -2, -3, -4, -5, -6, -7, -8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i w =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d0 / 2)));
    *lo = _mm512_permutexvar_ps(w, table);
    *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), table);
  }
}

// 32 channels [d0, d0 + 32) of a dequantized row as bf16 pairs: (x + offset) * scale in fp32 as
// DqAt computes it, rounded to bf16 (the query dtype) by VCVTNE2PS2BF16 (round to nearest even
// like RoundBF16, except that subnormal results become zero: TDPBF16PS reads bf16 subnormals as
// zero anyway). int4's [even | odd] halves are interleaved back to channel order by one VPERMW.
template <Elem E, int M>  // M: bit 0 an offset, bit 1 per-channel (else per-row) parameters
inline __m512i DqPair(const DqOp& r, int64_t n, int64_t d0) {
  constexpr bool kOff = (M & 1) != 0, kChan = (M & 2) != 0;
  __m512 lo, hi;
  LoadQ32<E>(r.row[n], d0, &lo, &hi);
  if constexpr (kChan) {
    if constexpr (kOff) {
      lo = _mm512_add_ps(lo, _mm512_load_ps(r.oc + d0));
      hi = _mm512_add_ps(hi, _mm512_load_ps(r.oc + d0 + 16));
    }
    lo = _mm512_mul_ps(lo, _mm512_load_ps(r.sc + d0));
    hi = _mm512_mul_ps(hi, _mm512_load_ps(r.sc + d0 + 16));
  } else {
    if constexpr (kOff) {
      const __m512 o = _mm512_set1_ps(r.o[n]);
      lo = _mm512_add_ps(lo, o);
      hi = _mm512_add_ps(hi, o);
    }
    const __m512 sc = _mm512_set1_ps(r.s[n]);
    lo = _mm512_mul_ps(lo, sc);
    hi = _mm512_mul_ps(hi, sc);
  }
  const __m512i x = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  if constexpr (E == Elem::kI8) {
    return x;
  } else {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                         16, 0);
    return _mm512_permutexvar_epi16(idx, x);
  }
}

inline int DqMode(const DqOp& r) { return (r.has_off ? 1 : 0) | (r.per_row ? 0 : 2); }

// Rows [n0, n0 + 16) of the tile (zero past nk) as bf16 rows of D channels at dst.
template <Elem E, int M>
inline void DqRowsBf16(const DqOp& r, int64_t n0, int64_t nk, int64_t D, uint16_t* dst) {
  for (int64_t i = 0; i < 16; ++i, dst += D) {
    if (n0 + i >= nk) {
      std::memset(dst, 0, D * 2);
      continue;
    }
    for (int64_t d0 = 0; d0 < D; d0 += 32)
      _mm512_storeu_si512(dst + d0, DqPair<E, M>(r, n0 + i, d0));
  }
}

template <Elem E>
inline void DqRowsBf16(const DqOp& r, int64_t n0, int64_t nk, int64_t D, uint16_t* dst) {
  switch (DqMode(r)) {
    case 0: return DqRowsBf16<E, 0>(r, n0, nk, D, dst);
    case 1: return DqRowsBf16<E, 1>(r, n0, nk, D, dst);
    case 2: return DqRowsBf16<E, 2>(r, n0, nk, D, dst);
    default: return DqRowsBf16<E, 3>(r, n0, nk, D, dst);
  }
}

// ---- acc += P V on the vector units ----
// Per key, the value row is widened to fp32 in registers and every row of the block FMAs it with
// its P broadcast: no stores, no tile loads of V (an R = 4 row A tile still costs a full tile
// load of V per TDPBF16PS, and packing V for it is a store -> tile load round trip). P comes in
// fp32 (the bf16-rounded softmax values, times the token's scale for per-token antiquant V).
// bf16 rows: each 32-bit lane holds channels 2i (low half) and 2i + 1 (high half); a shift gives
// the even channels, a mask the odd ones, so the row states hold every 32-channel chunk as
// [16 even | 16 odd] while the item runs and Unpermute restores the order at the end; int4 rows
// widen in that order too (LoadQ32), int8 rows in channel order.
template <Kind K, Elem E, int M>
inline void VLoad32(const char* row, const DqOp& r, int64_t c0, __m512* a, __m512* b) {
  if constexpr (K == Kind::kBf16) {
    const __m512i x = _mm512_loadu_si512(row + 2 * c0);
    *a = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *b = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    LoadQ32<E>(row, c0, a, b);
    if constexpr ((M & 2) != 0) {  // per-channel parameters: (x + offset) * scale
      if constexpr ((M & 1) != 0) {
        *a = _mm512_add_ps(*a, _mm512_load_ps(r.oc + c0));
        *b = _mm512_add_ps(*b, _mm512_load_ps(r.oc + c0 + 16));
      }
      *a = _mm512_mul_ps(*a, _mm512_load_ps(r.sc + c0));
      *b = _mm512_mul_ps(*b, _mm512_load_ps(r.sc + c0 + 16));
    }
  }
}

// Rows [0, RB) x channels [c0, c0 + 32 NV) of acc (row stride lda) += P (row stride TN) V over
// keys [0, nk); t[i] (per-token offsets: sum_n P[i][n] offset[n]) is added to every channel.
// pre(n) is called at every 8th key (prefetch of the next tile's rows) when pre_on.
// Accumulator block (16 registers): bf16 2 rows x 128 channels (one pass over the keys reads
// whole value rows, all 128 channels of a Llama head; the next row block reads them again from
// L1: measured 1.1x over 4 rows x 64 channels); int8 / int4, whose widening costs more ALU work
// than a bf16 shift / mask, 4 rows x 64 channels (each chunk widened once per row block:
// measured 1.1x over 2 x 128).
constexpr int PvRb(Kind k) { return k == Kind::kBf16 ? 2 : 4; }
constexpr int PvNv(Kind k) { return k == Kind::kBf16 ? 4 : 2; }

template <Kind K, Elem E, int M, int RB, int NV, typename F>
inline void PvBlock(const float* pf, const char* const* vrow, const DqOp& r, int64_t nk,
                    int64_t c0, float* acc, int64_t lda, const float* t, bool pre_on, F&& pre) {
  __m512 a[RB][2 * NV];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < 2 * NV; ++j) a[i][j] = _mm512_loadu_ps(acc + i * lda + c0 + 16 * j);
  for (int64_t n = 0; n < nk; ++n) {
    if (pre_on && (n & 7) == 0) pre(n);
    __m512 v[2 * NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) VLoad32<K, E, M>(vrow[n], r, c0 + 32 * j, &v[2 * j], &v[2 * j + 1]);
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const __m512 pb = _mm512_set1_ps(pf[i * TN + n]);
#pragma GCC unroll 8
      for (int j = 0; j < 2 * NV; ++j) a[i][j] = _mm512_fmadd_ps(pb, v[j], a[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    const __m512 ti = _mm512_set1_ps((M & 3) == 1 ? t[i] : 0.f);
#pragma GCC unroll 8
    for (int j = 0; j < 2 * NV; ++j) {
      if constexpr ((M & 3) == 1) a[i][j] = _mm512_add_ps(a[i][j], ti);
      _mm512_storeu_ps(acc + i * lda + c0 + 16 * j, a[i][j]);
    }
  }
}

template <Kind K, Elem E, int M, int RB, typename F>
inline void PvRows(const float* pf, const char* const* vrow, const DqOp& r, int64_t nk,
                   int64_t Dv, float* acc, int64_t lda, const float* t, bool pre_on, F&& pre) {
  if (pre_on)  // slices the key loop of a short tile does not reach
    for (int64_t n = (nk + 7) / 8 * 8; n < TN; n += 8) pre(n);
  constexpr int kNv = PvNv(K);
  for (int64_t c0 = 0; c0 < Dv; c0 += 32 * kNv, pre_on = false) {
    // The last block of Dv / 32 % kNv chunks: 1 .. kNv - 1.
    const int64_t nv = std::min<int64_t>(kNv, (Dv - c0) / 32);
    if (nv == kNv) {
      PvBlock<K, E, M, RB, kNv>(pf, vrow, r, nk, c0, acc, lda, t, pre_on, pre);
    } else if (nv == 1) {
      PvBlock<K, E, M, RB, 1>(pf, vrow, r, nk, c0, acc, lda, t, pre_on, pre);
    } else if constexpr (kNv > 2) {
      if (nv == 2) PvBlock<K, E, M, RB, 2>(pf, vrow, r, nk, c0, acc, lda, t, pre_on, pre);
      if constexpr (kNv > 3)
        if (nv == 3) PvBlock<K, E, M, RB, 3>(pf, vrow, r, nk, c0, acc, lda, t, pre_on, pre);
    }
  }
}

// acc (R rows) += P V for one head: blocks of up to 4 rows x 64 channels (16 accumulators).
template <Kind K, Elem E, int M, typename F>
inline void PvFma(const float* pf, int64_t R, const char* const* vrow, const DqOp& r, int64_t nk,
                  int64_t Dv, float* acc, int64_t lda, const float* t, F&& pre) {
  constexpr int kRb = PvRb(K);
  for (int64_t r0 = 0; r0 < R; r0 += kRb) {
    const float* p0 = pf + r0 * TN;
    float* a0 = acc + r0 * lda;
    const float* t0 = t + r0;
    const bool first = r0 == 0;
    // The last block of R % kRb rows: 1 .. kRb - 1.
    const int64_t rb = std::min<int64_t>(kRb, R - r0);
    if (rb == kRb) {
      PvRows<K, E, M, kRb>(p0, vrow, r, nk, Dv, a0, lda, t0, first, pre);
    } else if (rb == 1) {
      PvRows<K, E, M, 1>(p0, vrow, r, nk, Dv, a0, lda, t0, first, pre);
    } else if constexpr (kRb > 2) {
      if (rb == 2) PvRows<K, E, M, 2>(p0, vrow, r, nk, Dv, a0, lda, t0, first, pre);
      if constexpr (kRb > 3)
        if (rb == 3) PvRows<K, E, M, 3>(p0, vrow, r, nk, Dv, a0, lda, t0, first, pre);
    }
  }
}

template <Kind K, Elem E, typename F>
inline void PvFma(const float* pf, int64_t R, const char* const* vrow, const DqOp& r, int64_t nk,
                  int64_t Dv, float* acc, int64_t lda, const float* t, F&& pre) {
  if constexpr (K == Kind::kBf16) {
    PvFma<K, E, 0>(pf, R, vrow, r, nk, Dv, acc, lda, t, pre);
  } else {
    switch (DqMode(r)) {
      case 0: return PvFma<K, E, 0>(pf, R, vrow, r, nk, Dv, acc, lda, t, pre);
      case 1: return PvFma<K, E, 1>(pf, R, vrow, r, nk, Dv, acc, lda, t, pre);
      case 2: return PvFma<K, E, 2>(pf, R, vrow, r, nk, Dv, acc, lda, t, pre);
      default: return PvFma<K, E, 3>(pf, R, vrow, r, nk, Dv, acc, lda, t, pre);
    }
  }
}

// The bf16-V accumulator order ([16 even | 16 odd] per 32 channels) back to channel order.
inline void Unpermute(float* acc, int64_t rows, int64_t lda, int64_t Dv) {
  alignas(64) float t[32];
  for (int64_t r = 0; r < rows; ++r) {
    float* a = acc + r * lda;
    for (int64_t c0 = 0; c0 < Dv; c0 += 32) {
      std::memcpy(t, a + c0, sizeof(t));
      for (int64_t i = 0; i < 16; ++i) {
        a[c0 + 2 * i] = t[i];
        a[c0 + 2 * i + 1] = t[16 + i];
      }
    }
  }
}

template <Kind KK, Elem KE, Kind VK, Elem VE>
void Run(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group(), R = w.head_rows();
  const int64_t D = p.d_qk, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);

  ResetRowStates(out, w.rows(), ldv);

  // Scratch (sizes from ScratchBuffer): sc.q the Q^T pairs of every head [n_hk][D/2][R][2];
  // sc.s the scores [TN][R], the scaled rows [R][TN] and P [R][TN] fp32; sc.kt the gathered or
  // dequantized K rows [TN][D] bf16.
  uint16_t* qt = reinterpret_cast<uint16_t*>(sc.q);
  float* st = sc.s;
  float* srow = sc.s + TN * 16;
  float* pf = sc.s + 2 * TN * 16;  // [R][TN]
  uint16_t* kbuf = reinterpret_cast<uint16_t*>(sc.kt);  // [2 heads][TN][D]

  const uint16_t* q16 = static_cast<const uint16_t*>(p.q.Base(b));
  for (int64_t x = 0; x < w.n_hk; ++x) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t h = (w.hk + x) * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
      const int64_t qo = p.q.Offset(b, h, row, 0);
      uint16_t* dst = qt + x * D * R + 2 * r;  // pair d / 2 of row r at (d / 2) * 2R + 2r
      if (p.q.sd == 1 && p.q.d_split == 0) {  // channel pairs are adjacent: copy them whole
        for (int64_t d = 0; d < D; d += 2) std::memcpy(dst + d * R, q16 + qo + d, 4);
      } else {
        for (int64_t d = 0; d < D; ++d) dst[(d / 2) * 2 * R + (d & 1)] = q16[qo + DOff(p.q, d)];
      }
    }
  }

  TileRows rows[2];
  DqOp kdq, vdq;
  float toff[16];
  const char* krow[TN];
  const char* vrow[TN];
  const int64_t tile0 = w.j0 / TN * TN;
  Resolve(p, w, tile0, &rows[0]);
  for (int64_t x = 0; x < w.n_hk; ++x) {
    Prefetch(p, rows[0], x, false, 0, TN);
    Prefetch(p, rows[0], x, true, 0, TN);
  }
  LoadConfig(R);
  int cur = 0;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN, cur ^= 1) {
    const TileRows& t = rows[cur];
    TileRows& nt = rows[cur ^ 1];
    const bool has_next = t0 + TN < w.j1;
    if (has_next) Resolve(p, w, t0 + TN, &nt);
    const int64_t nk = t.nk, ng = (nk + 15) / 16;
    // Equal spacing of each group of 16 keys (then K tiles load straight from the cache).
    int64_t kstride[TN / 16];
    for (int64_t g = 0; g < ng; ++g) {
      kstride[g] = 0;
      if constexpr (KK == Kind::kBf16) {
        const int64_t n0 = 16 * g;
        if (n0 + 16 > nk) continue;
        const char* r0 = t.k0[n0];
        const int64_t s = t.k0[n0 + 1] - r0;
        bool eq = s > 0;
        for (int64_t n = 1; n < 16 && eq; ++n)
          eq = t.k0[n0 + n] == r0 + n * s && t.kstep[n0 + n] == t.kstep[n0];
        if (eq) kstride[g] = s;
      }
    }

    // Per head: S^T (tile steps), softmax, V packing, P V (tile steps). The P V steps of head x
    // are issued interleaved with the score steps of head x + 1: two independent tile chains,
    // so each one's latency hides behind the other's.
    // K of head x and V of head x + 1 are staged (gathered / dequantized / packed) one head
    // ahead into buffers of the head's parity, so their stores have drained before the tile
    // loads read them.
    const char* kg[2][TN / 16];
    int64_t ks[2][TN / 16];
    const int64_t nc = D / 32, nsteps = (ng + 1) / 2 * nc;
    // Group g's K rows: straight from the cache when equally spaced, else gathered or
    // dequantized into the head's buffer.
    const auto stage_k = [&](int64_t x) {
      for (int64_t n = 0; n < nk; ++n) krow[n] = t.k0[n] + x * t.kstep[n];
      if constexpr (KK == Kind::kDq) FillDq(p.k, krow, t.kc, nk, D, x, w.hk + x, &kdq);
      for (int64_t g = 0; g < ng; ++g) {
        if (kstride[g] != 0) {
          kg[x % 2][g] = krow[16 * g];
          ks[x % 2][g] = kstride[g];
          continue;
        }
        uint16_t* dst = kbuf + ((x % 2) * TN + 16 * g) * D;
        if constexpr (KK == Kind::kBf16) {
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t n = 16 * g + i;
            if (n >= nk) std::memset(dst + i * D, 0, D * 2);
            else std::memcpy(dst + i * D, krow[n], D * 2);
          }
        } else {
          DqRowsBf16<KE>(kdq, 16 * g, nk, D, dst);
        }
        kg[x % 2][g] = reinterpret_cast<const char*>(dst);
        ks[x % 2][g] = D * 2;
      }
    };
    const auto stage_v = [&](int64_t x) {
      for (int64_t n = 0; n < nk; ++n) vrow[n] = t.v0[n] + x * t.vstep[n];
      if constexpr (VK == Kind::kDq) FillDq(p.v, vrow, t.vc, nk, Dv, x, w.hk + x, &vdq);
    };
    // ---- S^T = K Q^T: step i of head x (group pair i / nc, channels 32 (i % nc)) ----
    const auto score_step = [&](int64_t x, int64_t i) {
      MemoryBarrier();
      const int64_t g = 2 * (i / nc), c = 32 * (i % nc);
      const bool two = g + 1 < ng;
      const char* const* kgx = kg[x % 2];
      const int64_t* ksx = ks[x % 2];
      if (c == 0) {
        _tile_zero(0);
        if (two) _tile_zero(1);
      }
      _tile_loadd(4, qt + x * D * R + c * R, 4 * R);
      _tile_loadd(2, kgx[g] + 2 * c, ksx[g]);
      _tile_dpbf16ps(0, 2, 4);
      if (two) {
        _tile_loadd(3, kgx[g + 1] + 2 * c, ksx[g + 1]);
        _tile_dpbf16ps(1, 3, 4);
      }
      if (c + 32 == D) {
        _tile_stored(0, st + 16 * g * R, 4 * R);
        if (two) _tile_stored(1, st + 16 * (g + 1) * R, 4 * R);
      }
    };
    stage_k(0);
    stage_v(0);
    if (w.n_hk > 1) stage_k(1);
    for (int64_t i = 0; i < nsteps; ++i) score_step(0, i);
    for (int64_t x = 0; x < w.n_hk; ++x) {
      float* m = out.m + x * R;
      float* l = out.l + x * R;
      float* acc = out.acc + x * R * out.acc_stride;

      // ---- online softmax: attend-inl.h's operations, P rounded to bf16 ----
      for (int64_t r = 0; r < R; ++r) {
        // Row r's scores out of the [key][R] tile store: for R = 4 (the Llama GQA group) and a
        // full tile, lanes r, r + 4, ... of four vectors per 16 keys by two word permutes and
        // one lane shuffle; else element by element.
        __m512 sr[TN / 16];
        if (R == 4 && nk == TN) {
          const __m512i idx = _mm512_add_epi32(
              _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0),
              _mm512_set1_epi32(static_cast<int>(r)));
          for (int k = 0; k < TN / 16; ++k) {
            const float* z = st + 64 * k;
            const __m512 lo =
                _mm512_permutex2var_ps(_mm512_loadu_ps(z), idx, _mm512_loadu_ps(z + 16));
            const __m512 hi =
                _mm512_permutex2var_ps(_mm512_loadu_ps(z + 32), idx, _mm512_loadu_ps(z + 48));
            sr[k] = _mm512_shuffle_f32x4(lo, hi, 0x44);
          }
        } else {
          float* s = srow + r * TN;
          for (int64_t n = 0; n < nk; ++n) s[n] = st[n * R + r];
          for (int k = 0; k < TN / 16; ++k) sr[k] = _mm512_loadu_ps(s + 16 * k);
        }
        const __m512 vscale = _mm512_set1_ps(scale);
        __m512 xs[TN / 16];
        __m512 vm = _mm512_set1_ps(kNegInf);
        for (int k = 0; k < TN / 16; ++k) {
          const __mmask16 live = LiveMask(nk, k);
          xs[k] = _mm512_mask_mul_ps(_mm512_set1_ps(kNegInf), live, sr[k], vscale);
          vm = _mm512_max_ps(vm, xs[k]);
        }
        const float m_old = m[r];
        float m_new = std::max(m_old, _mm512_reduce_max_ps(vm));
        float* pr = pf + r * TN;
        toff[r] = 0.f;
        if (m_new == kNegInf) {
          // Nothing finite yet; a NaN score makes the row NaN (the reference's result), which the
          // max above cannot show (std::max(-inf, NaN) is -inf), so look for one.
          __mmask16 nan = 0;
          for (int k = 0; k < TN / 16; ++k) nan |= _mm512_cmp_ps_mask(xs[k], xs[k], _CMP_UNORD_Q);
          if (nan == 0) {  // P = 0
            std::memset(pr, 0, TN * 4);
            continue;
          }
          m_new = std::numeric_limits<float>::quiet_NaN();
        }
        const __m512 vmn = _mm512_set1_ps(m_new);
        __m512 vsum = _mm512_setzero_ps();
        __m512 vo = _mm512_setzero_ps();
        for (int k = 0; k < TN / 16; ++k) {
          const __m512 e = V::Exp(_mm512_sub_ps(xs[k], vmn));
          vsum = _mm512_add_ps(vsum, e);
          __m512 pe = V::RoundBF16(e);
          if constexpr (VK == Kind::kDq) {
            // Per-token V antiquant: the token's scale goes into P (p s (x + o) = (p s) x +
            // (p s) o; the offset part is the same for every channel: toff).
            if (vdq.per_row) {
              const __mmask16 live = LiveMask(nk, k);
              pe = _mm512_maskz_mul_ps(live, pe, _mm512_maskz_loadu_ps(live, vdq.s + 16 * k));
              if (vdq.has_off)
                vo = _mm512_fmadd_ps(pe, _mm512_maskz_loadu_ps(live, vdq.o + 16 * k), vo);
            }
          }
          _mm512_storeu_ps(pr + 16 * k, pe);
        }
        if constexpr (VK == Kind::kDq) toff[r] = _mm512_reduce_add_ps(vo);
        const float alpha = m_old == kNegInf ? 0.f : ExpScalar(m_old - m_new);
        l[r] = l[r] * alpha + _mm512_reduce_add_ps(vsum);
        m[r] = m_new;
        if (alpha != 1.f) {
          float* a = acc + r * out.acc_stride;
          const __m512 va = _mm512_set1_ps(alpha);
          for (int64_t d = 0; d < ldv; d += 16)
            _mm512_storeu_ps(a + d, _mm512_mul_ps(_mm512_loadu_ps(a + d), va));
        }
      }

      // The score steps of head x + 1 go first: the tile unit works through them while the
      // vector units run this head's P V.
      const bool more = x + 1 < w.n_hk;
      // This head's value rows into L1 now, so the fills overlap the score steps below (the
      // P V key loop otherwise stalls on each row's first load; measured D1 1.2x, D3 1.4x).
      // The same for the key rows of head x + 2 measured no gain.
      // Issued a slice at a time between the score steps of head x + 1 (a burst of 4 lines x
      // 64 rows holds every fill buffer while the tile loads wait behind it).
      const int64_t vbytes = Dv * ElemBits(p.v.cache.elem) / 8;
      const auto prefetch_v = [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t o = 0; o < vbytes; o += 64) _mm_prefetch(vrow[n] + o, _MM_HINT_T0);
      };
      if (more) {
        for (int64_t i = 0; i < nsteps; ++i) {
          prefetch_v(i * nk / nsteps, (i + 1) * nk / nsteps);
          score_step(x + 1, i);
        }
      } else {
        prefetch_v(0, nk);
      }
      PvFma<VK, VE>(pf, R, vrow, vdq, nk, Dv, acc, out.acc_stride, toff, [&](int64_t n) {
        if (has_next) PrefetchSlice(p, nt, w.n_hk, x, n / 8);
      });
      if (more) stage_v(x + 1);
      if (x + 2 < w.n_hk) stage_k(x + 2);
    }
  }
  _tile_release();
  if constexpr (VK == Kind::kBf16 || VE == Elem::kI4)
    Unpermute(out.acc, w.rows(), out.acc_stride, Dv);
}

using RunFn = void (*)(const Problem&, const WorkItem&, TileScratch&, const RowStates&);

template <Kind KK, Elem KE>
RunFn PickV(Kind vk, Elem ve) {
  if (vk == Kind::kBf16) return &Run<KK, KE, Kind::kBf16, Elem::kBF16>;
  if (ve == Elem::kI8) return &Run<KK, KE, Kind::kDq, Elem::kI8>;
  return &Run<KK, KE, Kind::kDq, Elem::kI4>;
}

RunFn Pick(const Problem& p, Kind kk, Kind vk) {
  const Elem ke = p.k.cache.elem, ve = p.v.cache.elem;
  if (kk == Kind::kBf16) return PickV<Kind::kBf16, Elem::kBF16>(vk, ve);
  if (ke == Elem::kI8) return PickV<Kind::kDq, Elem::kI8>(vk, ve);
  return PickV<Kind::kDq, Elem::kI4>(vk, ve);
}

const char* Supports(const Problem& p, const WorkItem* w) {
  if (w == nullptr) {
    if (p.q.elem != Elem::kBF16) return "a query dtype other than bfloat16";
    return nullptr;
  }
  Kind kk, vk;
  return Can(p, *w, &kk, &vk) ? nullptr : "not a decode item of the kernel's shapes and formats";
}

void RunItem(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out) {
  Kind kk, vk;
  Can(p, w, &kk, &vk);
  Pick(p, kk, vk)(p, w, TileOf(scratch), out);
}

const Kernel kDecode = {"amx_decode", Isa::kAmx, &Supports, &TileScratchSize, &PrepareTileScratch,
                        &RunItem};

}  // namespace openfia::internal::amx_decode
#pragma GCC pop_options

namespace openfia::internal {
const Kernel* AmxDecodeKernel() { return &amx_decode::kDecode; }
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* AmxDecodeKernel() { return nullptr; }
}  // namespace openfia::internal
#endif
