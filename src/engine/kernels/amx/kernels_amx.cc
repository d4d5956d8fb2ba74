// openfia: the AMX target (AMX-TILE + AMX-BF16 on top of AVX-512): bf16 prefill on tile matmuls.
//
// Work items it runs fast: bf16 query, bf16 K and V stored row-contiguous (sd == 1, no NZ split,
// cache and shared prefix alike), no antiquant, at least 16 rows, d_qk % 32 == 0 and
// d_v % 16 == 0. MLA rope (bf16 q_rope, bf16 row-contiguous k_rope) is appended after the nope
// channels of the packed Q rows and K tiles, zero-padded to the next multiple of 32 channels: the
// score is Q.K + Q_rope.K_rope like attend-inl.h (zero pairs add exact zeros). Every other item
// goes to the AVX-512 table, so semantics never depend on it. Items of per-tile quantized rows
// (KvQuantSparseFlashAttention) take amx_tile_dequant-inl.h: each gathered row is dequantized to
// bf16 once per tile and feeds both the K and the V tile.
//
// Per tile of kTileKeys keys (the same tiles, band skipping and boundary logic as attend-inl.h):
//   S = Q K^T   TDPBF16PS: bf16 x bf16 products are exact in fp32, only the summation order
//               differs from the FMA path;
//   online softmax in fp32 exactly as attend-inl.h (same exp, same order of the row reductions);
//   P = round_bf16(exp(s - m)) (docs/semantics.md 1.2), stored as bf16 in place over the scores;
//   acc += P V  TDPBF16PS on the fp32 row states.
// AMX-BF16 treats bf16 subnormal inputs as zero and flushes fp32 subnormal results: a P below
// 2^-126 (its row already holds P = 1 at the maximum) or a subnormal Q/K/V element then
// contributes 0 instead of < 2^-126 * |x|, far inside the bf16 tolerance of the output.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "common/convert.h"
#include "common/problem.h"
#include "engine/kernel.h"
#include "engine/kernels/generic/common.h"
#include "engine/kernels/generic/support.h"
#include "engine/kernels/generic/tile_scratch.h"
#include "engine/kernels/registry.h"

#if defined(OPENFIA_HAVE_AMX)
#include <sys/syscall.h>
#include <unistd.h>
// GCC 12 flags the _mm512_undefined_* idiom inside its own intrinsic headers.
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

namespace openfia::internal::amx_target {

#include "engine/kernels/avx512/vec_avx512-inl.h"

struct V : Avx512Vec {
  // bf16 of 16 values that are zero or normal floats (VCVTNEPS2BF16 rounds to nearest even like
  // StoreBF16, and flushes only subnormal inputs).
  static void StoreBF16Normal(uint16_t* p, __m512 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(a)));
  }
};

// The generic loop's helpers (ResolveKey, ExpScalar, ExpArray) compiled for this target.
#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS

static_assert(TN == 64, "the AMX kernel tiles 64 keys as 4 score tiles / 2 bf16 K-chunks");

// Tile palette 1, every tile 16 rows x 64 bytes: tmm0-3 fp32 accumulators (16 x 16),
// tmm4-5 bf16 A operands (16 x 32), tmm6-7 bf16 B operands in pair-interleaved form (16 x 16x2).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

inline void LoadTileConfig() {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12's version declares only the first 8 bytes of the config as its
  // input, so the compiler may drop the stores of the rest (an AMX kernel saw SIGILL at -O3).
  __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

// Whether the item's operands are what the tile path reads directly.
inline bool RowContiguousBf16(const Operand& o) {
  return o.elem == Elem::kBF16 && o.sd == 1 && o.d_split == 0;
}

inline bool AmxCan(const Problem& p, const WorkItem& w) {
  if (p.q.elem != Elem::kBF16 || w.rows() < 16) return false;
  // Multi-head decode items (plan.h n_hk > 1) stream several KV heads per item: generic path.
  if (w.n_hk != 1) return false;
  if (p.d_qk % 32 != 0 || p.d_v % 16 != 0 || p.d_qk + p.d_rope > 1024 || p.d_v > 1024)
    return false;
  if (p.d_rope > 0 && p.q_rope.elem != Elem::kBF16) return false;
  for (const KvOperand* kv : {&p.k, &p.v, &p.k_rope, &p.k2, &p.v2}) {
    if (kv == &p.k_rope && p.d_rope == 0) continue;
    if ((kv == &p.k2 || kv == &p.v2) && !p.k2.cache.present()) continue;
    if (kv->dequant.kind != Dequant::Kind::kNone || !RowContiguousBf16(kv->cache)) return false;
    if (kv->prefix.present() &&
        (kv->prefix_dequant.kind != Dequant::Kind::kNone || !RowContiguousBf16(kv->prefix)))
      return false;
  }
  return true;
}

// The bf16 query rows of item w as the A operand of the score tiles: row r (head-major, query
// fastest, as attend-inl.h orders them) holds the d_qk nope channels, then the d_rope rope
// channels, zero up to D (a multiple of 32); rows [rows, rows_pad) are zero.
inline void PackQueryRows(const Problem& p, const WorkItem& w, int64_t rows, int64_t rows_pad,
                          int64_t D, uint16_t* qb) {
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group();
  for (int64_t r = 0; r < rows_pad; ++r) {
    uint16_t* dst = qb + r * D;
    if (r >= rows) {
      std::memset(dst, 0, D * 2);
      continue;
    }
    const int64_t h = w.hk * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
    const uint16_t* src = static_cast<const uint16_t*>(p.q.Base(b)) + p.q.Offset(b, h, row, 0);
    if (p.q.sd == 1 && p.q.d_split == 0) {
      std::memcpy(dst, src, p.d_qk * 2);
    } else {
      for (int64_t d = 0; d < p.d_qk; ++d) dst[d] = src[DOff(p.q, d)];
    }
    if (p.d_rope > 0) {  // rope appended after the nope channels, as attend-inl.h packs it
      const uint16_t* rsrc =
          static_cast<const uint16_t*>(p.q_rope.Base(b)) + p.q_rope.Offset(b, h, row, 0);
      for (int64_t d = 0; d < p.d_rope; ++d) dst[p.d_qk + d] = rsrc[DOff(p.q_rope, d)];
    }
    for (int64_t d = p.d_qk + p.d_rope; d < D; ++d) dst[d] = 0;
  }
}

// kp[kk * TN + n] = bf16 pair (2kk, 2kk + 1) of key n (zero for n >= nk): the B operand of
// S = Q K^T, whose row kk holds the pairs of channel pair kk for 16 keys. D channels are read,
// rows are written up to D rounded up to 32 channels (zero past D).
inline void PackK(const uint16_t* const* row, int64_t nk, int64_t D, uint32_t* kp) {
  const int64_t pairs = (D + 31) / 32 * 16;
  for (int64_t n0 = 0; n0 < TN; n0 += 16) {
    for (int64_t k0 = 0; k0 < pairs; k0 += 16) {
      const int64_t left = D - 2 * k0;
      const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : (1u << left) - 1;
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = n0 + i < nk ? _mm512_maskz_loadu_epi16(m, row[n0 + i] + 2 * k0)
                           : _mm512_setzero_si512();
      // 16 x 16 transpose of 32-bit pairs: reuse the f32 transpose.
      __m512 f[16];
      for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(r[i]);
      V::Transpose(f);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kp + (k0 + i) * TN + n0, f[i]);
    }
  }
}

// vp[kk * ldvp + c] = (V[2kk][c], V[2kk + 1][c]) (zero rows past nk): the B operand of P V
// (ldvp: the row stride in pairs, Dv unless given).
inline void PackV(const uint16_t* const* row, int64_t nk, int64_t Dv, uint32_t* vp,
                  int64_t ldvp = 0) {
  if (ldvp == 0) ldvp = Dv;
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                      8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int64_t kk = 0; kk < TN / 2; ++kk) {
    const int64_t n = 2 * kk;
    uint32_t* dst = vp + kk * ldvp;
    for (int64_t c = 0; c < Dv; c += 32) {
      const __mmask32 m = c + 32 <= Dv ? 0xFFFFFFFFu : 0xFFFFu;  // Dv % 16 == 0
      const __m512i a = n < nk ? _mm512_maskz_loadu_epi16(m, row[n] + c) : _mm512_setzero_si512();
      const __m512i b =
          n + 1 < nk ? _mm512_maskz_loadu_epi16(m, row[n + 1] + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(a, lo, b));
      if (c + 32 <= Dv) _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(a, hi, b));
    }
  }
}

// True when some element of the tile's values is not finite (bf16 exponent all ones).
inline bool AnyNonFiniteBf16(const uint16_t* const* row, int64_t nk, int64_t Dv) {
  const __m512i e = _mm512_set1_epi16(0x7F80);
  for (int64_t n = 0; n < nk; ++n) {
    for (int64_t c = 0; c < Dv; c += 32) {
      const __mmask32 m = c + 32 <= Dv ? 0xFFFFFFFFu : 0xFFFFu;
      const __m512i x = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, row[n] + c), e);
      if (_mm512_mask_cmpeq_epi16_mask(m, x, e)) return true;
    }
  }
  return false;
}

// GCC's tile load/store intrinsics are asm statements without a memory operand: a fence before a
// tile load keeps the vector stores it reads (packed tiles, P, rescaled accumulators) before it,
// and a fence after a tile store keeps later vector loads of that memory after it.
inline void CompilerFence() { asm volatile("" ::: "memory"); }

// S = Q K^T for one block in pieces, so that vector work can be placed between them:
// ScoreBegin, ScoreChunk for d0 = 0, 32, ... < D, ScoreEnd (tmm0-3 accumulate, tmm4 Q, tmm6-7 K).
inline void ScoreBegin() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}
inline void ScoreChunk(const uint16_t* q, int64_t ldq, const uint32_t* kp, int64_t d0) {
  _tile_loadd(4, q + d0, ldq * 2);
  const uint32_t* b = kp + (d0 / 2) * TN;
  _tile_loadd(6, b, TN * 4);
  _tile_loadd(7, b + 16, TN * 4);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(6, b + 32, TN * 4);
  _tile_loadd(7, b + 48, TN * 4);
  _tile_dpbf16ps(2, 4, 6);
  _tile_dpbf16ps(3, 4, 7);
}
inline void ScoreEnd(float* s) {
  _tile_stored(0, s, TN * 4);
  _tile_stored(1, s + 16, TN * 4);
  _tile_stored(2, s + 32, TN * 4);
  _tile_stored(3, s + 48, TN * 4);
}

// acc += P V for one block in pieces: PvBegin (P into tmm4-5), then PvChunk for c = 0, 32, ...
// < Dv (32 columns, or the last 16 when Dv % 32 == 16; tmm0-1 accumulate, tmm6-7 V).
inline void PvBegin(const uint16_t* p, int64_t ldp) {
  _tile_loadd(4, p, ldp * 2);
  _tile_loadd(5, p + 32, ldp * 2);
}
inline void PvChunk(const uint32_t* vp, int64_t Dv, float* acc, int64_t lda, int64_t c) {
  if (c + 32 <= Dv) {
    _tile_loadd(0, acc + c, lda * 4);
    _tile_loadd(1, acc + c + 16, lda * 4);
    _tile_loadd(6, vp + c, Dv * 4);
    _tile_loadd(7, vp + c + 16, Dv * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(6, vp + 16 * Dv + c, Dv * 4);
    _tile_loadd(7, vp + 16 * Dv + c + 16, Dv * 4);
    _tile_dpbf16ps(0, 5, 6);
    _tile_dpbf16ps(1, 5, 7);
    _tile_stored(0, acc + c, lda * 4);
    _tile_stored(1, acc + c + 16, lda * 4);
  } else {
    _tile_loadd(0, acc + c, lda * 4);
    _tile_loadd(6, vp + c, Dv * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, vp + 16 * Dv + c, Dv * 4);
    _tile_dpbf16ps(0, 5, 7);
    _tile_stored(0, acc + c, lda * 4);
  }
}

// acc[r][c] += sum_n P[r][n] V[n][c] for 16 rows; P is bf16 at p (row stride ldp elements).
inline void PvTile(const uint16_t* p, int64_t ldp, const uint32_t* vp, int64_t Dv, float* acc,
                   int64_t lda) {
  CompilerFence();
  PvBegin(p, ldp);
  for (int64_t c = 0; c < Dv; c += 32) PvChunk(vp, Dv, acc, lda, c);
  CompilerFence();
}

// The online softmax of 16 rows over npad keys (softmax-inl.h), P written as bf16 over the first
// half of each score row (s: 16 rows of raw scores Q.K at stride lds; the scale multiplies them
// as they are read). acc_live false: the accumulators are not written yet (the caller's P V
// initializes them), so nothing is rescaled; only valid when every row is without history.
inline void Softmax16(float* s, int64_t lds, int64_t npad, float scale, float* m, float* l,
                      float* acc, int64_t lda, int64_t ldv, bool acc_live) {
  SoftmaxStep st;
  st.s = s;
  st.lds = lds;
  st.rows = 16;
  st.nk = npad;
  st.npad = npad;
  st.scale = scale;
  st.store.kind = SoftmaxStore::Kind::kBf16;
  st.m = m;
  st.l = l;
  st.acc = acc_live ? acc : nullptr;
  st.acc_stride = lda;
  st.ldv = ldv;
  RunSoftmaxStep(st);
}

// S = Q K^T for `rows` rows (a multiple of 16) against one packed K tile, with the channels in
// groups of kScoreGroup: each group's part of the K tile (kScoreGroup / 2 x TN pairs, 24 KiB)
// stays in L1 while every row block passes over it; the partial scores go through s (row stride
// lds floats). A K tile of D = 576 channels (74 KiB) does not fit L1, and tile loads from L2 run
// far below the TMUL rate. Per score the channel chunks are summed in ascending order into one
// accumulator. (Blocking 2x2 over all channels, one tile load per product but K from L2, is
// slower on both dense prefill and sparse shapes.)
constexpr int64_t kScoreGroup = 192;
// The first NT (1-3) of the 4 score tiles of ScoreChunk: keys past 16 * NT are padding.
template <int NT>
inline void ScoreChunkFirst(const uint16_t* q, int64_t ldq, const uint32_t* kp, int64_t d0) {
  _tile_loadd(4, q + d0, ldq * 2);
  const uint32_t* b = kp + (d0 / 2) * TN;
  _tile_loadd(6, b, TN * 4);
  _tile_dpbf16ps(0, 4, 6);
  if constexpr (NT >= 2) {
    _tile_loadd(7, b + 16, TN * 4);
    _tile_dpbf16ps(1, 4, 7);
  }
  if constexpr (NT >= 3) {
    _tile_loadd(6, b + 32, TN * 4);
    _tile_dpbf16ps(2, 4, 6);
  }
}
// NT < 4: the tile's keys past 16 * NT are padding, their score columns are left as they are
// (the caller overwrites them).
template <int NT = 4>
inline void ScoreRows(const uint16_t* q, int64_t ldq, const uint32_t* kp, int64_t D,
                      int64_t rows, float* s, int64_t lds) {
  static_assert(NT >= 1 && NT <= 4, "a K tile has 4 score tiles");
  for (int64_t g0 = 0; g0 < D; g0 += kScoreGroup) {
    const int64_t g1 = std::min(D, g0 + kScoreGroup);
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      float* c = s + r0 * lds;
      CompilerFence();
      if (g0 == 0) {
        _tile_zero(0);
        if constexpr (NT >= 2) _tile_zero(1);
        if constexpr (NT >= 3) _tile_zero(2);
        if constexpr (NT >= 4) _tile_zero(3);
      } else {
        _tile_loadd(0, c, lds * 4);
        if constexpr (NT >= 2) _tile_loadd(1, c + 16, lds * 4);
        if constexpr (NT >= 3) _tile_loadd(2, c + 32, lds * 4);
        if constexpr (NT >= 4) _tile_loadd(3, c + 48, lds * 4);
      }
      for (int64_t d0 = g0; d0 < g1; d0 += 32) {
        if constexpr (NT == 4) {
          ScoreChunk(q + r0 * ldq, ldq, kp, d0);
        } else {
          ScoreChunkFirst<NT>(q + r0 * ldq, ldq, kp, d0);
        }
      }
      _tile_stored(0, c, lds * 4);
      if constexpr (NT >= 2) _tile_stored(1, c + 16, lds * 4);
      if constexpr (NT >= 3) _tile_stored(2, c + 32, lds * 4);
      if constexpr (NT >= 4) _tile_stored(3, c + 48, lds * 4);
      CompilerFence();
    }
  }
}

// acc[r][c] += sum_n P[r][n] V[n][c] for `rows` rows (a multiple of 16) over nkk chunks of 32
// keys: P bf16 at p (row stride ldp elements), vp the packed values ([nkk * 16][Dv] pairs, row
// stride ldvp, Dv % 32 == 0). Column chunks outside, row blocks inside, so one column chunk of V
// (nkk x 2 KiB) stays in L1 while every row block uses it; two row blocks x 32 columns per
// accumulator set (tmm0-3), so each P tile and each V tile feeds two products. The accumulator
// passes through the tiles once per call: one call for several 64-key tiles (nkk = 4: 128 keys)
// divides its L2 traffic. Per element the key chunks are summed in ascending order, like PvTile.
// acc_init: the accumulators are written, not read (acc = P V).
inline void PvRows(const uint16_t* p, int64_t ldp, const uint32_t* vp, int64_t ldvp, int64_t Dv,
                   int64_t nkk, int64_t rows, float* acc, int64_t lda, bool acc_init = false) {
  for (int64_t c = 0; c < Dv; c += 32) {
    for (int64_t r0 = 0; r0 < rows; r0 += 32) {
      const bool two = r0 + 16 < rows;
      float* a0 = acc + r0 * lda + c;
      float* a1 = a0 + 16 * lda;
      const uint16_t* p0 = p + r0 * ldp;
      CompilerFence();
      if (acc_init) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      } else {
        _tile_loadd(0, a0, lda * 4);
        _tile_loadd(1, a0 + 16, lda * 4);
        if (two) {
          _tile_loadd(2, a1, lda * 4);
          _tile_loadd(3, a1 + 16, lda * 4);
        }
      }
      for (int64_t kk = 0; kk < nkk; ++kk) {
        const uint32_t* v = vp + kk * 16 * ldvp + c;
        _tile_loadd(4, p0 + 32 * kk, ldp * 2);
        _tile_loadd(6, v, ldvp * 4);
        _tile_loadd(7, v + 16, ldvp * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, p0 + 16 * ldp + 32 * kk, ldp * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, a0, lda * 4);
      _tile_stored(1, a0 + 16, lda * 4);
      if (two) {
        _tile_stored(2, a1, lda * 4);
        _tile_stored(3, a1 + 16, lda * 4);
      }
      CompilerFence();
    }
  }
}

#include "engine/kernels/amx/amx_prefill-inl.h"
// Sparse items over tile-quantized rows (KvQuantSparseFlashAttention): AmxTileDqCan.
#include "engine/kernels/amx/amx_tile_dequant-inl.h"
// SparseAttnSharedkv items (bf16 K = V rows, one or several query tokens): AmxSasCan.
#include "engine/kernels/amx/amx_sas-inl.h"

// The generic AMX tile loop: the items AmxCan accepts (the kernel list offers them to the
// per-tile dequant, SparseAttnSharedkv and dense-prefill AMX kernels first).
void AmxAttend(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows();
  const int64_t rows_pad = (rows + 15) / 16 * 16;
  // D: the channels of a packed Q row / K tile, nope then rope, zero-padded to a multiple of 32.
  const int64_t D = p.d_qk + (p.d_rope + 31) / 32 * 32, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);
  const ItemOrigins org = OriginsOf(p, b);
  const int64_t pre = org.pre, next = org.next;

  ResetRowStates(out, rows, ldv);
  if (w.j0 >= w.j1) return;

  // Scratch reuse (sizes from ScratchBuffer, whose dk = d_qk + d_rope >= 32 so that
  // D <= dk + 31 fits): sc.q holds the bf16 query rows [rows_pad][D] (zero rows past `rows`),
  // sc.kt the packed K tile [D/2][TN] pairs, sc.v the packed V tile
  // [TN/2][Dv] pairs followed by a 16-row accumulator for the last, partial row block; P is
  // written as bf16 over the first half of each fp32 score row of sc.s.
  uint16_t* qb = reinterpret_cast<uint16_t*>(sc.q);
  uint32_t* kp = reinterpret_cast<uint32_t*>(sc.kt);
  uint32_t* vp = reinterpret_cast<uint32_t*>(sc.v);
  // P V by PvRows when it can (32 columns at a time), with the packed V rows one cache line
  // longer when Dv pairs are a multiple of 1 KiB (as AccStride); else PvTile per row block.
  const bool pv_rows = Dv % 32 == 0;
  const int64_t ldvp = pv_rows && Dv % 256 == 0 ? Dv + 16 : Dv;
  float* acc_tail = sc.v + 32 * ldvp;  // 32 * ldvp + 16 * ldv <= TN * dv_pad
  const int64_t ldp = 2 * TN;  // bf16 elements per P row (one fp32 score row)
  PackQueryRows(p, w, rows, rows_pad, D, qb);

  const uint16_t* krow[TN];
  const uint16_t* vrow[TN];
  const uint16_t* rrow[TN];
  LoadTileConfig();
  const int64_t tile0 = w.j0 / TN * TN;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN) {
    const int64_t jt0 = std::max(t0, w.j0), jt1 = std::min(t0 + TN, w.j1), nk = jt1 - jt0;
    if (std::max(w.i0, jt0 - next) > std::min(w.i1 - 1, jt1 - 1 + pre)) continue;
    const bool full = p.mask == nullptr && (w.i1 - 1) - pre <= jt0 && jt1 - 1 <= w.i0 + next;
    for (int64_t n = 0; n < nk; ++n) {
      const void* base;
      int64_t off;
      uint8_t from_prefix;
      ResolveItemKey(p, p.k, p.k2, w, w.hk, jt0 + n, &base, &off, &from_prefix);
      krow[n] = static_cast<const uint16_t*>(base) + off;
      ResolveItemKey(p, p.v, p.v2, w, w.hk, jt0 + n, &base, &off, &from_prefix);
      vrow[n] = static_cast<const uint16_t*>(base) + off;
      if (p.d_rope > 0) {
        ResolveItemKey(p, p.k_rope, p.k2, w, w.hk, jt0 + n, &base, &off, &from_prefix);
        rrow[n] = static_cast<const uint16_t*>(base) + off;
      }
    }
    PackK(krow, nk, p.d_qk, kp);
    if (p.d_rope > 0) PackK(rrow, nk, p.d_rope, kp + p.d_qk / 2 * TN);
    PackV(vrow, nk, Dv, vp, ldvp);
    const bool v_bad = !full && AnyNonFiniteBf16(vrow, nk, Dv);
    ScoreRows(qb, D, kp, D, rows_pad, sc.s, TN);
    for (int64_t r = rows; r < rows_pad; ++r)  // padded rows: P = 0
      std::memset(sc.s + r * TN, 0, TN * 2);

    if (!full) TileVisibility(p, b, org, w.i0, nq, jt0, nk, sc.vis, TN);

    // The softmax of attend-inl.h (softmax-inl.h), P out as bf16 (it is bf16-exact already).
    const bool plain = full && p.pse == nullptr && nk == TN;
    if (!plain) {
      const __m512 vscale = _mm512_set1_ps(scale);
      for (int64_t r = 0; r < rows; ++r) {
        float* s = sc.s + r * TN;
        for (int64_t n = 0; n < TN; n += 16)
          _mm512_storeu_ps(s + n, _mm512_mul_ps(_mm512_loadu_ps(s + n), vscale));
        BiasAndMaskRow(p, w, org, w.hk, r, jt0, nk, TN, full, sc.vis, s);
      }
    }
    SoftmaxStep step;
    step.s = sc.s;
    step.lds = TN;
    step.rows = rows;
    step.nk = nk;
    step.npad = TN;
    step.scale = plain ? scale : 1.f;
    step.store.kind = SoftmaxStore::Kind::kBf16;
    // The non-finite-V path multiplies P in fp32 (a subnormal P times Inf is Inf, as in the
    // reference): the exact exp there.
    step.exact = v_bad;
    step.State(out, ldv);
    RunSoftmaxStep(step);

    if (v_bad) {
      // A masked cell must not meet a non-finite value (P = 0 times Inf is NaN): visible cells
      // only, in fp32 (bf16 P times bf16 V is exact, like the tile product).
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* pr = reinterpret_cast<const uint16_t*>(sc.s + r * TN);
        const uint8_t* vr = sc.vis + (r % nq) * TN;
        float* a = out.acc + r * out.acc_stride;
        for (int64_t n = 0; n < nk; ++n) {
          if (!vr[n]) continue;
          const float pn = cvt::Load(pr, Elem::kBF16, n);
          for (int64_t d = 0; d < Dv; ++d) a[d] += pn * cvt::Load(vrow[n], Elem::kBF16, d);
        }
      }
      continue;
    }
    const int64_t rows_full = rows / 16 * 16;
    if (pv_rows)
      PvRows(reinterpret_cast<const uint16_t*>(sc.s), ldp, vp, ldvp, Dv, TN / 32, rows_full,
             out.acc, out.acc_stride);
    for (int64_t r0 = pv_rows ? rows_full : 0; r0 < rows_pad; r0 += 16) {
      const uint16_t* pr = reinterpret_cast<const uint16_t*>(sc.s + r0 * TN);
      if (r0 + 16 <= rows) {
        PvTile(pr, ldp, vp, Dv, out.acc + r0 * out.acc_stride, out.acc_stride);
      } else {  // the row states end at `rows`: run the partial block on a 16-row copy
        const int64_t m = rows - r0;
        for (int64_t r = 0; r < 16; ++r) {
          float* dst = acc_tail + r * ldv;
          if (r < m) std::memcpy(dst, out.acc + (r0 + r) * out.acc_stride, Dv * 4);
          else std::memset(dst, 0, Dv * 4);
        }
        if (pv_rows) PvRows(pr, ldp, vp, ldvp, Dv, TN / 32, 16, acc_tail, ldv);
        else PvTile(pr, ldp, vp, Dv, acc_tail, ldv);
        for (int64_t r = 0; r < m; ++r)
          std::memcpy(out.acc + (r0 + r) * out.acc_stride, acc_tail + r * ldv, Dv * 4);
      }
    }
  }
  _tile_release();
}

// The problem-level part shared by the AMX kernels: bf16 queries over what the tile loop reads.
const char* AmxProblemWhy(const Problem& p) {
  if (p.q.elem != Elem::kBF16) return "a query dtype other than bfloat16";
  return TileLoopSupports(p);
}
template <bool (*Can)(const Problem&, const WorkItem&)>
const char* AmxSupports(const Problem& p, const WorkItem* w) {
  if (w == nullptr) return AmxProblemWhy(p);
  return Can(p, *w) ? nullptr : "not an item of the kernel's shapes and formats";
}
bool PrefillItem(const Problem& p, const WorkItem& w) { return AmxCan(p, w) && PrefillCan(p, w); }

template <void (*Body)(const Problem&, const WorkItem&, TileScratch&, const RowStates&)>
void AmxRun(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out) {
  Body(p, w, TileOf(scratch), out);
}

const Kernel kTileDq = {"amx_tile_dequant", Isa::kAmx, &AmxSupports<&AmxTileDqCan>,
                        &TileScratchSize, &PrepareTileScratch, &AmxRun<&AmxAttendTileDq>};
const Kernel kSas = {"amx_sas", Isa::kAmx, &AmxSupports<&AmxSasCan>, &TileScratchSize,
                     &PrepareTileScratch, &AmxRun<&AmxAttendSas>};
const Kernel kPrefill = {"amx_prefill", Isa::kAmx, &AmxSupports<&PrefillItem>,
                         &TileScratchSize, &PrepareTileScratch, &AmxRun<&AmxPrefill>};
const Kernel kTile = {"amx_tile", Isa::kAmx, &AmxSupports<&AmxCan>, &TileScratchSize,
                      &PrepareTileScratch, &AmxRun<&AmxAttend>};

}  // namespace openfia::internal::amx_target
#pragma GCC pop_options

// Baseline code from here on: the registry asks for the kernels on every CPU, and enters the AMX
// code only where select.cc found that the CPU runs it.
namespace openfia::internal {
bool AmxTileDataGranted() {
  // Linux keeps AMX tile data off until the process asks for it (ARCH_REQ_XCOMP_PERM with
  // XFEATURE_XTILEDATA); without that permission the first tile instruction faults.
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
           syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}
const Kernel* AmxTileDequantKernel() { return &amx_target::kTileDq; }
const Kernel* AmxSasKernel() { return &amx_target::kSas; }
const Kernel* AmxPrefillKernel() { return &amx_target::kPrefill; }
const Kernel* AmxTileKernel() { return &amx_target::kTile; }
}  // namespace openfia::internal
#else
namespace openfia::internal {
bool AmxTileDataGranted() { return false; }
const Kernel* AmxTileDequantKernel() { return nullptr; }
const Kernel* AmxSasKernel() { return nullptr; }
const Kernel* AmxPrefillKernel() { return nullptr; }
const Kernel* AmxTileKernel() { return nullptr; }
}  // namespace openfia::internal
#endif
