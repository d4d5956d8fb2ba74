// openfia internal: the VDPBF16PS products of the decode kernel (generic/decode-inl.h), for bf16
// queries on the avx512bf16 target where Bf16DotTiles. Included by kernels_avx512bf16.cc inside
// the target's namespace, between generic/decode_base-inl.h and generic/decode-inl.h.
//
//   S = Q K^T  rows in passes of 4: a query vector holds 2 rows x 8 channel pairs (16
//              channels), and each key's same 16 channels are broadcast to both 256-bit halves
//              (one 32-byte broadcast load, two VDPBF16PS of 32 useful products: rows 0-1 and
//              2-3); 4 keys x 2 row pairs = 8 accumulators, summed over their 8 pair lanes by a
//              shuffle tree and a 4 x 4 block transpose into the rows' scores. 1 or 2 rows: the
//              key row against the query row, 16 keys, summed by V::ReduceRows.
//   P V        two value rows interleaved into bf16 pairs (V[n][c], V[n + 1][c]) by VPUNPCK{L,H}WD
//              (the accumulators keep the order they give; DotPermuteRows), against the
//              broadcast pair (P[r][n], P[r][n + 1]) of each row; int8 / int4 values the same
//              way as int16 pairs against integer probabilities (VPDPWSSD, DotPvInt).
// bf16 x bf16 products are exact in fp32 (VDPBF16PS reads a subnormal bf16 as zero: the kernel
// keeps subnormal queries and probabilities off this path, decode-inl.h).

__attribute__((always_inline)) inline __m512bh DotBh(__m512i x) {
  return reinterpret_cast<__m512bh>(x);
}

// The bf16 query rows of one head (fp32 rows qf [R padded][D]) as the score products read them:
// R <= 2, rows of D / 2 pairs; else groups of 4 rows, each D / 16 chunks of two vectors of 16
// words (rows 0-1, then rows 2-3), word 8 h + j of vector p of chunk c = channels (16 c + 2 j,
// 16 c + 2 j + 1) of row 2 p + h. residual: the rounding residuals bf16(q - bf16(q)) instead, so
// that hi + lo carries a fp32 query to 16 bits.
inline void DotPackQuery(const float* qf, int64_t R, int64_t D, uint32_t* qp, bool residual) {
  const auto word = [residual](float v) {
    const uint16_t hi = cvt::F32ToBF16(v);
    return residual ? cvt::F32ToBF16(v - cvt::BF16ToF32(hi)) : hi;
  };
  const auto pair = [&](float lo, float hi) {
    return static_cast<uint32_t>(word(lo)) | (static_cast<uint32_t>(word(hi)) << 16);
  };
  if (R <= 2) {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < D / 2; ++i)
        qp[r * D / 2 + i] = pair(qf[r * D + 2 * i], qf[r * D + 2 * i + 1]);
    return;
  }
  for (int64_t g = 0; 4 * g < R; ++g)
    for (int64_t c = 0; c < D / 16; ++c)
      for (int r = 0; r < 4; ++r) {
        const float* row = qf + (4 * g + r) * D + 16 * c;
        uint32_t* v = qp + g * 2 * D + (2 * c + r / 2) * 16 + (r % 2) * 8;
        for (int j = 0; j < 8; ++j) v[j] = pair(row[2 * j], row[2 * j + 1]);
      }
}

// bf16 rows stage[n * ld] of the int8 / int4 key rows rows[n] + x * step[n], n < nk: the integers,
// int4 plus kDecI4Bias (0x4300 | (nibble ^ 8) is the bf16 of 128 + (x + 8) for the two's
// complement nibble x: no conversion).
inline void DotStageRows(DecFmt f, const char* const* rows, const int64_t* step, int64_t x,
                         int64_t nk, int64_t D, uint16_t* stage, int64_t ld) {
  const __m512i lo4 = _mm512_set1_epi32(0x000F000F), enc = _mm512_set1_epi32(0x43084308);
  for (int64_t n = 0; n < nk; ++n) {
    const char* src = rows[n] + x * step[n];
    uint16_t* dst = stage + n * ld;
    int64_t d = 0;
    if (f == DecFmt::kI4) {
      for (; d + 32 <= D; d += 32) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d / 2)));
        const __m512i t = _mm512_and_si512(_mm512_or_si512(b, _mm512_slli_epi32(b, 12)), lo4);
        _mm512_storeu_si512(dst + d, _mm512_xor_si512(t, enc));
      }
      if (d < D) {  // a last 16 channels
        const __m512 x0 = _mm512_add_ps(DecLoad<DecFmt::kI4>(src, d), _mm512_set1_ps(kDecI4Bias));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x0)));
      }
    } else {
      for (; d + 32 <= D; d += 32) {
        const __m512 x0 = DecLoad<DecFmt::kI8>(src, d), x1 = DecLoad<DecFmt::kI8>(src, d + 16);
        _mm512_storeu_si512(dst + d, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0)));
      }
      if (d < D)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(DecLoad<DecFmt::kI8>(src, d))));
    }
  }
}

// Whether every query value qf[0, n) (n a multiple of 16) is zero or a normal float that stays
// finite in bf16: VDPBF16PS reads a subnormal bf16 as zero, and an infinite or NaN query takes
// the fp32 products, as the reference computes. On the magnitudes' bits: 0, or from FLT_MIN up
// to the last value that rounds to bf16's largest finite.
inline bool DotQueryOk(const float* qf, int64_t n) {
  const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), lo = _mm512_set1_epi32(0x00800000);
  const __m512i span = _mm512_set1_epi32(0x7F7F8000 - 0x00800000);
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(qf + i), abs);
    const __mmask16 normal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(a, lo), span);
    bad |= static_cast<__mmask16>(~normal & _mm512_test_epi32_mask(a, a));
  }
  return bad == 0;
}

// out[i] holds keys 4i..4i+3 as 128-bit lanes of query rows 0..3; row[r] gets row r's 16
// scores in key order (a 4 x 4 transpose of 128-bit lanes).
inline void DotRowsOfFours(const __m512 out[4], __m512 row[4]) {
  const __m512 t0 = _mm512_shuffle_f32x4(out[0], out[1], 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(out[0], out[1], 0xEE);
  const __m512 t2 = _mm512_shuffle_f32x4(out[2], out[3], 0x44);
  const __m512 t3 = _mm512_shuffle_f32x4(out[2], out[3], 0xEE);
  row[0] = _mm512_shuffle_f32x4(t0, t2, 0x88);
  row[1] = _mm512_shuffle_f32x4(t0, t2, 0xDD);
  row[2] = _mm512_shuffle_f32x4(t1, t3, 0x88);
  row[3] = _mm512_shuffle_f32x4(t1, t3, 0xDD);
}

// Four keys k4 against a group of 4 packed query rows q (and with kLo their residuals ql): each
// key's 16 channels broadcast to both 256-bit halves (one 32-byte load), against rows 0-1 and
// rows 2-3 of the same channels: two VDPBF16PS per broadcast, 32 useful products each (a
// 16-byte broadcast against 4 rows fed one product per load and ran ~1.25x slower on Zen 4).
// Returns block r = row r's scores of the 4 keys.
template <bool kLo>
__attribute__((always_inline)) inline __m512 DotQk4(const uint32_t* q, const uint32_t* ql,
                                                    const char* const* k4, int64_t D) {
  __m512 a[4][2];
  OPENFIA_UNROLL
  for (int k = 0; k < 4; ++k) a[k][0] = a[k][1] = _mm512_setzero_ps();
  for (int64_t c = 0; c < D / 16; ++c) {  // D is a multiple of 16
    const __m512bh q0 = DotBh(_mm512_loadu_si512(q + 2 * c * 16));
    const __m512bh q1 = DotBh(_mm512_loadu_si512(q + (2 * c + 1) * 16));
    __m512bh l0 = q0, l1 = q1;
    if constexpr (kLo) {
      l0 = DotBh(_mm512_loadu_si512(ql + 2 * c * 16));
      l1 = DotBh(_mm512_loadu_si512(ql + (2 * c + 1) * 16));
    }
    OPENFIA_UNROLL
    for (int k = 0; k < 4; ++k) {
      const __m512bh kb = DotBh(_mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k4[k] + 32 * c))));
      a[k][0] = DpBf16(a[k][0], kb, q0);
      a[k][1] = DpBf16(a[k][1], kb, q1);
      if constexpr (kLo) {
        a[k][0] = DpBf16(a[k][0], kb, l0);
        a[k][1] = DpBf16(a[k][1], kb, l1);
      }
    }
  }
  // a[k][p] lane 8 h + j: row 2 p + h's partial sum over pair lane j. Sum j with j + 4 (128-bit
  // lane r: row r's 4 partials), then pairs, then the last two: lane 4 r + k = row r, key k.
  __m512 w[4];
  OPENFIA_UNROLL
  for (int k = 0; k < 4; ++k)
    w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[k][0], a[k][1], 0x88),
                         _mm512_shuffle_f32x4(a[k][0], a[k][1], 0xDD));
  const __m512 x0 = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xEE));
  const __m512 x1 = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], 0x44), _mm512_shuffle_ps(w[2], w[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x88), _mm512_shuffle_ps(x0, x1, 0xDD));
}

// S[r][n] = q_r . K_n for the R rows of a head and keys n < nk (bf16 key rows kr): packed query
// qp, and with kLo its residual pack ql (each loaded key against both).
template <bool kLo>
inline void DotQkRows(const DecItem& it, const uint32_t* qp, const uint32_t* ql,
                      const char* const* kr, int64_t nk, float* S, DecPrefetch& pf) {
  const int64_t D = it.D, R = it.R, TNk = kTileKeys;
  const char* k16[16];
  if (R <= 2) {
    for (int64_t r = 0; r < R; ++r) {
      const uint32_t* q = qp + r * D / 2;
      const uint32_t* qq = kLo ? ql + r * D / 2 : nullptr;
      for (int64_t n0 = 0; n0 < nk; n0 += 16) {
        pf.Tick();
        for (int k = 0; k < 16; ++k) k16[k] = kr[std::min<int64_t>(n0 + k, nk - 1)];
        __m512 acc[16];
        OPENFIA_UNROLL
        for (int k = 0; k < 16; ++k) acc[k] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 32) {
          // D is a multiple of 16: a last half chunk reads 16 channels (zero pairs past them).
          const __mmask32 m = d + 32 <= D ? 0xFFFFFFFFu : 0xFFFFu;
          const __m512bh qv = DotBh(_mm512_maskz_loadu_epi16(m, q + d / 2));
          __m512bh qw = qv;
          if constexpr (kLo) qw = DotBh(_mm512_maskz_loadu_epi16(m, qq + d / 2));
          OPENFIA_UNROLL
          for (int k = 0; k < 16; ++k) {
            const __m512bh kv = DotBh(_mm512_maskz_loadu_epi16(m, k16[k] + 2 * d));
            acc[k] = DpBf16(acc[k], kv, qv);
            if constexpr (kLo) acc[k] = DpBf16(acc[k], kv, qw);
          }
        }
        _mm512_storeu_ps(S + r * TNk + n0,
                         V::ReduceRows(acc, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); }));
      }
    }
    return;
  }
  for (int64_t g = 0; 4 * g < R; ++g) {
    const uint32_t* q = qp + g * 2 * D;
    const uint32_t* qq = kLo ? ql + g * 2 * D : nullptr;
    const int64_t rows = std::min<int64_t>(4, R - 4 * g);
    for (int64_t n0 = 0; n0 < nk; n0 += 16) {
      // out[i], block r: row r's scores of keys n0 + 4 i .. n0 + 4 i + 3.
      __m512 out[4];
      OPENFIA_UNROLL
      for (int i = 0; i < 4; ++i) {
        pf.Tick();
        const char* k4[4];
        for (int k = 0; k < 4; ++k) k4[k] = kr[std::min<int64_t>(n0 + 4 * i + k, nk - 1)];
        out[i] = DotQk4<kLo>(q, qq, k4, D);
      }
      __m512 row[4];
      DotRowsOfFours(out, row);
      for (int64_t r = 0; r < rows; ++r) _mm512_storeu_ps(S + (4 * g + r) * TNk + n0, row[r]);
    }
  }
}

// S[r][n0 + k] = q_r . K of k4[k] for k < 4 and the R rows of a head (R > 2): one 4-key step of
// the memory-order walk (DotQkRows computes the same scores 16 keys at a time).
inline void DotQkFour(const DecItem& it, const uint32_t* qp, const char* const* k4, float* S,
                      int64_t n0) {
  for (int64_t g = 0; 4 * g < it.R; ++g) {
    alignas(64) float blk[16];  // row r's scores of the 4 keys at blk[4 r]
    _mm512_store_ps(blk, DotQk4<false>(qp + g * 2 * it.D, nullptr, k4, it.D));
    for (int64_t r = 0; r < std::min<int64_t>(4, it.R - 4 * g); ++r)
      std::memcpy(S + (4 * g + r) * kTileKeys + n0, blk + 4 * r, 4 * sizeof(float));
  }
}

inline void DotQk(const DecItem& it, const uint32_t* qp, const uint32_t* ql,
                  const char* const* kr, int64_t nk, float* S, DecPrefetch& pf) {
  if (ql != nullptr) DotQkRows<true>(it, qp, ql, kr, nk, S, pf);
  else DotQkRows<false>(it, qp, nullptr, kr, nk, S, pf);
}

// ---- int8 / int4 keys: VPDPBUSD ----------------------------------------------------------------
//
// Rows of 3 or more per KV head over int8 / int4 keys: S = Q K^T with integer products, four
// query rows x 16 channels against a 128-bit broadcast of each key's 16 channels (64 byte
// products per instruction, twice VDPBF16PS's). The keys enter as unsigned bytes u = x + c (int8:
// x ^ 0x80, c = 128; int4: the nibble ^ 8 = x + 8, c = 8), made in registers after the broadcast
// load from the cache row (a copy pass through a staging buffer ran ~8% slower in cache); each
// query row q (fp32, per-channel scales folded in) is sigma (256 qh + ql) with signed bytes qh, ql
// (15 bits of the row's largest magnitude, as fine as the two bf16 terms it replaces), so
//   q . x = sigma (256 (sum(qh u) - c sum(qh)) + (sum(ql u) - c sum(ql))),
// each bracket an exact integer, the sum one fp32 rounding.

constexpr float kDotQMax = 32639.f;  // |256 qh + ql| <= 32639 keeps qh = (q + 128) >> 8 in int8

// Channels covered by the integer query pieces: int4 keys come as 16 packed bytes per 32 channels.
inline int64_t DotIntChannels(DecFmt kf, int64_t D) {
  return kf == DecFmt::kI4 ? (D + 31) / 32 * 32 : D;
}

// The pieces of a head's query rows (fp32 qf [Rp][D], Rp a multiple of 4) for keys of format kf
// entering with bias c: qp [Rp / 4][Dc / 16][2][64] bytes (Dc = DotIntChannels), byte 4 (4 r + j)
// + i of piece p at chunk k = piece p of row r's channel at position 4 j + i of chunk k: int8,
// channel 16 k + 4 j + i; int4, per 32 channels 32 m the even ones (chunk 2 m: channel 32 m +
// 2 (4 j + i)), then the odd ones (chunk 2 m + 1), as the packed nibbles split (zeros past D).
// sigma[r], and corr[2 r + p] = c sum of piece p of the row. False where a row's scale is not a
// finite normal number (the caller keeps the bf16 products).
template <DecFmt kf>
inline bool DotPackQueryInt(const float* qf, int64_t Rp, int64_t D, int32_t c, int8_t* qp,
                            float* sigma, int32_t* corr) {
  const int64_t Dc = DotIntChannels(kf, D);
  // Channels 0, 2, ..., 30 / 1, 3, ..., 31 of two vectors of 16.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t r = 0; r < Rp; ++r) {
    const float* q = qf + r * D;
    __m512 m = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(q + d)));
    const float mx = _mm512_reduce_max_ps(m);
    const float inv = mx > 0.f ? kDotQMax / mx : 0.f;
    if (!(std::isfinite(inv) && (inv == 0.f || inv >= std::numeric_limits<float>::min())))
      return false;
    sigma[r] = mx > 0.f ? mx / kDotQMax : 0.f;
    int8_t* g = qp + (r / 4) * Dc * 8 + (r % 4) * 16;
    const __m512 vinv = _mm512_set1_ps(inv);
    __m512i vh = _mm512_setzero_si512(), vl = _mm512_setzero_si512();
    // 16 channels into positions 0..15 of a chunk (lane 4 r + j, byte i: position 4 j + i): v =
    // round(q inv) (to nearest even, the MXCSR default), hi = (v + 128) >> 8, lo = v - 256 hi.
    const auto put = [&](__m512 x, int64_t chunk) {
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(x, vinv));
      const __m512i hi = _mm512_srai_epi32(_mm512_add_epi32(v, _mm512_set1_epi32(128)), 8);
      const __m512i lo = _mm512_sub_epi32(v, _mm512_slli_epi32(hi, 8));
      vh = _mm512_add_epi32(vh, hi);
      vl = _mm512_add_epi32(vl, lo);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(g + chunk * 128), _mm512_cvtepi32_epi8(hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(g + chunk * 128 + 64), _mm512_cvtepi32_epi8(lo));
    };
    if constexpr (kf == DecFmt::kI4) {  // a last 16 channels: zeros in the odd half
      for (int64_t d = 0; d < D; d += 32) {
        const __m512 a = _mm512_loadu_ps(q + d);
        const __m512 b = d + 32 <= D ? _mm512_loadu_ps(q + d + 16) : _mm512_setzero_ps();
        put(_mm512_permutex2var_ps(a, even, b), 2 * (d / 32));
        put(_mm512_permutex2var_ps(a, odd, b), 2 * (d / 32) + 1);
      }
    } else {
      for (int64_t d = 0; d < D; d += 16) put(_mm512_loadu_ps(q + d), d / 16);
    }
    const int32_t sh = _mm512_reduce_add_epi32(vh), sl = _mm512_reduce_add_epi32(vl);
    corr[2 * r] = c * sh;
    corr[2 * r + 1] = c * sl;
  }
  return true;
}

// Four key rows k4 (format F, straight from the cache) against a group of 4 rows' pieces qg:
// block r of the result = row r's 256 (sum(qh u) - ch) + (sum(ql u) - cl) for the 4 keys (ch, cl:
// lanes 4 r + k the row's corr). int8: each 16 channels broadcast and flipped to u = x ^ 0x80;
// int4: each 16 bytes (32 channels; 8 for a last 16) broadcast and split into the even and the
// odd channels' u = nibble ^ 8 (one VPTERNLOGD each).
template <DecFmt F, bool kJoin>
__attribute__((always_inline)) inline __m512 DotQkInt4(const int8_t* qg, const char* const* k4,
                                                       int64_t D, __m512i ch, __m512i cl) {
  __m512i h[4], l[4];
  OPENFIA_UNROLL
  for (int k = 0; k < 4; ++k) h[k] = l[k] = _mm512_setzero_si512();
  const auto q = [qg](int64_t chunk, int p) {
    return _mm512_loadu_si512(qg + chunk * 128 + 64 * p);
  };
  if constexpr (F == DecFmt::kI8) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t c = 0; c < D / 16; ++c) {
      const __m512i qh = q(c, 0), ql = q(c, 1);
      OPENFIA_UNROLL
      for (int k = 0; k < 4; ++k) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(k4[k] + 16 * c));
        const __m512i kb = _mm512_xor_si512(_mm512_broadcast_i32x4(b), flip);
        h[k] = DpBusd(h[k], kb, qh);
        l[k] = DpBusd(l[k], kb, ql);
      }
    }
  } else {
    const __m512i x8 = _mm512_set1_epi8(0x08), lo4 = _mm512_set1_epi8(0x0F);
    for (int64_t m = 0; 32 * m < D; ++m) {
      const __m512i qh0 = q(2 * m, 0), ql0 = q(2 * m, 1);
      const __m512i qh1 = q(2 * m + 1, 0), ql1 = q(2 * m + 1, 1);
      const bool whole = 32 * m + 32 <= D;
      OPENFIA_UNROLL
      for (int k = 0; k < 4; ++k) {
        const char* at = k4[k] + 16 * m;
        const __m128i b = whole ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(at))
                                : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at));
        const __m512i kb = _mm512_broadcast_i32x4(b);
        // (a ^ 8) & 15 per byte (VPTERNLOGD 0x28: (A ^ B) & C); the odd channels after a shift
        // by 4 within each 16-bit word (the neighbour's bits it brings in are masked off).
        const __m512i ev = _mm512_ternarylogic_epi32(kb, x8, lo4, 0x28);
        const __m512i od = _mm512_ternarylogic_epi32(_mm512_srli_epi16(kb, 4), x8, lo4, 0x28);
        h[k] = DpBusd(h[k], ev, qh0);
        l[k] = DpBusd(l[k], ev, ql0);
        h[k] = DpBusd(h[k], od, qh1);
        l[k] = DpBusd(l[k], od, ql1);
      }
    }
  }
  // Lane 4 r + j: row r's partial sum over quad j; sum the quads (integers, exact).
  const auto reduce = [](const __m512i* a) {
    const auto sh = [](__m512i x, __m512i y, int imm) {
      return imm == 0x88 ? _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), 0x88))
                         : _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(y), 0xDD));
    };
    const __m512i ab = _mm512_add_epi32(sh(a[0], a[1], 0x88), sh(a[0], a[1], 0xDD));
    const __m512i cd = _mm512_add_epi32(sh(a[2], a[3], 0x88), sh(a[2], a[3], 0xDD));
    return _mm512_add_epi32(sh(ab, cd, 0x88), sh(ab, cd, 0xDD));
  };
  if constexpr (kJoin) {
    // 256 h + l per lane before the sums (one tree instead of two; ch = 256 ch + cl here): the
    // int32 lanes wrap, but the result q . x is within int32 for D <= kDotJoinD, so it is exact.
    OPENFIA_UNROLL
    for (int k = 0; k < 4; ++k) h[k] = _mm512_add_epi32(_mm512_slli_epi32(h[k], 8), l[k]);
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(reduce(h), ch));
  }
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(reduce(h), ch)),
                         _mm512_set1_ps(256.f), _mm512_cvtepi32_ps(_mm512_sub_epi32(reduce(l), cl)));
}

// |q . x| <= D 32639 128 < 2^31 for the rows' integer scores up to this D (DotQkInt4's kJoin).
constexpr int64_t kDotJoinD = 512;

// S[r][n] = q_r . x_n for the R (>= 3) rows of a head and keys n < nk (kr: the rows of format F
// in the cache): the pieces qp, sigma and corr of DotPackQueryInt.
template <DecFmt F>
inline void DotQkInt(const DecItem& it, const int8_t* qp, const float* sigma, const int32_t* corr,
                     const char* const* kr, int64_t nk, float* S, DecPrefetch& pf) {
  const int64_t D = it.D, R = it.R, TNk = kTileKeys;
  for (int64_t g = 0; 4 * g < R; ++g) {
    const int8_t* qg = qp + g * DotIntChannels(F, D) * 8;
    const int64_t rows = std::min<int64_t>(4, R - 4 * g);
    const int32_t* cg = corr + 8 * g;  // rows 4 g .. 4 g + 3 (pad rows: 0)
    const __m512i ch = _mm512_set_epi32(cg[6], cg[6], cg[6], cg[6], cg[4], cg[4], cg[4], cg[4],
                                        cg[2], cg[2], cg[2], cg[2], cg[0], cg[0], cg[0], cg[0]);
    const __m512i cl = _mm512_set_epi32(cg[7], cg[7], cg[7], cg[7], cg[5], cg[5], cg[5], cg[5],
                                        cg[3], cg[3], cg[3], cg[3], cg[1], cg[1], cg[1], cg[1]);
    const bool join = D <= kDotJoinD;
    const __m512i cj = _mm512_add_epi32(_mm512_slli_epi32(ch, 8), cl);
    for (int64_t n0 = 0; n0 < nk; n0 += 16) {
      __m512 out[4];
      OPENFIA_UNROLL
      for (int i = 0; i < 4; ++i) {
        pf.Tick();
        const char* k4[4];
        for (int k = 0; k < 4; ++k) k4[k] = kr[std::min<int64_t>(n0 + 4 * i + k, nk - 1)];
        out[i] = join ? DotQkInt4<F, true>(qg, k4, D, cj, cl) : DotQkInt4<F, false>(qg, k4, D, ch, cl);
      }
      __m512 row[4];
      DotRowsOfFours(out, row);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t rr = 4 * g + r;
        _mm512_storeu_ps(S + rr * TNk + n0, _mm512_mul_ps(row[r], _mm512_set1_ps(sigma[rr])));
      }
    }
  }
}

// P V keeps each 32 channels [c, c + 32) of an accumulator row as [16 lanes lo | 16 lanes hi]
// with lane i of lo channel c + 8 (i / 4) + i % 4 and of hi channel c + 8 (i / 4) + 4 + i % 4:
// the order VPUNPCK{L,H}WD give the value pairs (an in-lane interleave, cheaper than a
// cross-lane one). A last 16 channels (d_v % 32 == 16) stay in channel order. DotPermuteRows
// switches rows between the two orders.
__attribute__((always_inline)) inline void DotPermute32(float* a, bool to_pv) {
  const __m512 x = _mm512_loadu_ps(a), y = _mm512_loadu_ps(a + 16);
  if (to_pv) {  // x = [c0-3, c4-7, c8-11, c12-15], y = [c16-19, ..., c28-31] -> lo, hi
    _mm512_storeu_ps(a, _mm512_shuffle_f32x4(x, y, 0x88));       // [c0-3, c8-11, c16-19, c24-27]
    _mm512_storeu_ps(a + 16, _mm512_shuffle_f32x4(x, y, 0xDD));  // [c4-7, c12-15, c20-23, c28-31]
  } else {  // lo = [c0-3, c8-11, c16-19, c24-27], hi = [c4-7, c12-15, c20-23, c28-31]
    const __m512 t = _mm512_shuffle_f32x4(x, y, 0x44), u = _mm512_shuffle_f32x4(x, y, 0xEE);
    // t = [c0-3, c8-11, c4-7, c12-15], u = [c16-19, c24-27, c20-23, c28-31]
    _mm512_storeu_ps(a, _mm512_shuffle_f32x4(t, t, 0xD8));
    _mm512_storeu_ps(a + 16, _mm512_shuffle_f32x4(u, u, 0xD8));
  }
}
inline void DotPermuteRows(float* acc, int64_t rows, int64_t lda, int64_t Dv, bool to_pv) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c + 32 <= Dv; c += 32) DotPermute32(acc + r * lda + c, to_pv);
}

// acc rows [r0, r0 + RB) += P V for NC channels from c0 (NC = 32 or 64, the P V order above; 16:
// a last 16 channels in channel order): P bf16 [R][TN], value rows vr (one more zero row when nk
// is odd).
template <int RB, int NC>
__attribute__((always_inline)) inline void DotPvBlock(const uint16_t* P, int64_t r0,
                                                      const char* const* vr, int64_t n0,
                                                      int64_t nk, int64_t c0, float* acc,
                                                      int64_t lda) {
  constexpr int NA = NC == 16 ? 1 : NC / 16;  // accumulators per row
  __m512 a[RB][NA];
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j) a[r][j] = _mm512_loadu_ps(acc + (r0 + r) * lda + c0 + 16 * j);
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                       8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for (int64_t n = n0; n < nk; n += 2) {
    __m512bh pv[NA];
    if constexpr (NC == 16) {
      const __m512i v0 = _mm512_maskz_loadu_epi16(0xFFFFu, vr[n] + 2 * c0);
      const __m512i v1 = _mm512_maskz_loadu_epi16(0xFFFFu, vr[n + 1] + 2 * c0);
      pv[0] = DotBh(_mm512_permutex2var_epi16(v0, idx, v1));
    } else {
      OPENFIA_UNROLL
      for (int j = 0; j < NA; j += 2) {
        const __m512i v0 = _mm512_loadu_si512(vr[n] + 2 * (c0 + 16 * j));
        const __m512i v1 = _mm512_loadu_si512(vr[n + 1] + 2 * (c0 + 16 * j));
        pv[j] = DotBh(_mm512_unpacklo_epi16(v0, v1));
        pv[j + 1] = DotBh(_mm512_unpackhi_epi16(v0, v1));
      }
    }
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) {
      using aint = int __attribute__((may_alias));
      const __m512bh pw = DotBh(_mm512_set1_epi32(
          *reinterpret_cast<const aint*>(P + (r0 + r) * kTileKeys + n)));
      OPENFIA_UNROLL
      for (int j = 0; j < NA; ++j) a[r][j] = DpBf16(a[r][j], pv[j], pw);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j) _mm512_storeu_ps(acc + (r0 + r) * lda + c0 + 16 * j, a[r][j]);
}

// Rows [r0, r0 + RB) over every channel: blocks of 64 (RB <= 4) or 32 channels, then a last 16.
template <int RB>
inline void DotPvRows(const uint16_t* P, int64_t r0, const char* const* vr, int64_t nk,
                      int64_t Dv, float* acc, int64_t lda, DecPrefetch& pf) {
  // Runs of kDotPvRun keys, a prefetch tick before each (a few lines at a time keep the fill
  // buffers free for the products' own loads).
  constexpr int64_t kDotPvRun = 16;
  int64_t c0 = 0;
  if constexpr (RB <= 4) {
    for (; c0 + 64 <= Dv; c0 += 64)
      for (int64_t n0 = 0; n0 < nk; n0 += kDotPvRun) {
        pf.Tick();
        DotPvBlock<RB, 64>(P, r0, vr, n0, std::min(nk, n0 + kDotPvRun), c0, acc, lda);
      }
  }
  for (; c0 + 32 <= Dv; c0 += 32)
    for (int64_t n0 = 0; n0 < nk; n0 += kDotPvRun) {
      pf.Tick();
      DotPvBlock<RB, 32>(P, r0, vr, n0, std::min(nk, n0 + kDotPvRun), c0, acc, lda);
    }
  if (c0 < Dv) DotPvBlock<RB, 16>(P, r0, vr, 0, nk, c0, acc, lda);
}

// acc (the R rows of a head, in the P V order) += P V over keys [0, nk); P bf16 [R][TN] (0 past
// nk), bf16 value rows vr[0, nk] (vr[nk]: a zero row).
inline void DotPv(const DecItem& it, const uint16_t* P, const char* const* vr, int64_t nk,
                  float* acc, int64_t lda, DecPrefetch& pf) {
  int64_t r0 = 0;
  for (; r0 + 8 <= it.R; r0 += 8) DotPvRows<8>(P, r0, vr, nk, it.Dv, acc, lda, pf);
  switch (it.R - r0) {
    case 1: DotPvRows<1>(P, r0, vr, nk, it.Dv, acc, lda, pf); break;
    case 2: DotPvRows<2>(P, r0, vr, nk, it.Dv, acc, lda, pf); break;
    case 3: DotPvRows<3>(P, r0, vr, nk, it.Dv, acc, lda, pf); break;
    case 4: DotPvRows<4>(P, r0, vr, nk, it.Dv, acc, lda, pf); break;
    case 5: DotPvRows<4>(P, r0, vr, nk, it.Dv, acc, lda, pf);
            DotPvRows<1>(P, r0 + 4, vr, nk, it.Dv, acc, lda, pf); break;
    case 6: DotPvRows<4>(P, r0, vr, nk, it.Dv, acc, lda, pf);
            DotPvRows<2>(P, r0 + 4, vr, nk, it.Dv, acc, lda, pf); break;
    case 7: DotPvRows<4>(P, r0, vr, nk, it.Dv, acc, lda, pf);
            DotPvRows<3>(P, r0 + 4, vr, nk, it.Dv, acc, lda, pf); break;
    default: break;
  }
}

// ---- int8 / int4 values: VPDPWSSD ---------------------------------------------------------------
//
// P V over integer values multiplies integers: each row's probabilities of a tile become 15-bit
// integers p = round(P' / sigma) with sigma = max |P'| / 32767 (P' = P, or P s with per-key value
// scales s), and the values enter as int16 made in registers from the cache rows, so one
// VPDPWSSD takes the pairs (p[n], p[n + 1]) x (x[n][c], x[n + 1][c]) exactly into int32 lanes (a
// 64-key tile sums to at most 64 x 32767 x 128 < 2^31 in magnitude) and the tile's sums join the
// fp32 accumulators as sigma x sum, one rounding each. Each p is within sigma / 2 = max |P'| /
// 65534 of P': a tile's error is at most 2^-10 max |P'| x max |x|, below the rounding of its
// largest probability to bf16 alone (2^-9 max |P'| |x|) that the VDPBF16PS form pays on top of
// the others'. No staging of int8 values to bf16 (about as many instructions as the products).

// p[n] = round(P'[n] / sigma) for n < npad (P' = P s, or P when s is null; 0 past the live keys),
// *sigma = max |P'| / 32767 (a value scale may be negative), *sum = sum_n P'[n] o[n] (o null:
// sum_n P'[n]). False, with nothing written, where some P' is not finite or the largest |P'| is
// in (0, kDecPMin): the caller multiplies in fp32.
inline bool DecIntQuantP(const float* P, const float* s, const float* o, int64_t npad, int16_t* p,
                         float* sigma, float* sum) {
  __m512 mx = _mm512_setzero_ps(), total = _mm512_setzero_ps(), osum = _mm512_setzero_ps();
  for (int64_t n = 0; n < npad; n += 16) {
    __m512 x = _mm512_loadu_ps(P + n);
    if (s != nullptr) x = _mm512_mul_ps(x, _mm512_loadu_ps(s + n));
    mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
    total = _mm512_add_ps(total, x);
    osum = o != nullptr ? _mm512_fmadd_ps(x, _mm512_loadu_ps(o + n), osum) : total;
  }
  const float m = _mm512_reduce_max_ps(mx), t = _mm512_reduce_add_ps(total);
  const float os = _mm512_reduce_add_ps(osum);
  if (!std::isfinite(t) || !std::isfinite(os) || (m > 0.f && m < kDecPMin)) return false;
  const __m512 inv = _mm512_set1_ps(m > 0.f ? 32767.f / m : 0.f);
  for (int64_t n = 0; n < npad; n += 16) {
    __m512 x = _mm512_loadu_ps(P + n);
    if (s != nullptr) x = _mm512_mul_ps(x, _mm512_loadu_ps(s + n));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + n),
                        _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv))));
  }
  *sigma = m / 32767.f;
  *sum = os;
  return true;
}

// The value pairs (x[n][c], x[n + 1][c]) of int4 rows r0 = x[n], r1 = x[n + 1]: the rows' bytes
// interleaved and sign-extended to words, each word's low nibble (up 12, arithmetically down 12)
// gives an even channel's pair, its high one (down 4) an odd channel's. 32 channels from c: the
// even ones' pairs in *ev, the odd ones' in *od; 16 channels: the even ones' in the low 256 bits,
// the odd ones' above.
__attribute__((always_inline)) inline void DotI4Pairs32(const int8_t* r0, const int8_t* r1,
                                                        int64_t c, __m512i* ev, __m512i* od) {
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + c / 2));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + c / 2));
  const __m512i w = _mm512_cvtepi8_epi16(
      _mm256_set_m128i(_mm_unpackhi_epi8(b0, b1), _mm_unpacklo_epi8(b0, b1)));
  *ev = _mm512_srai_epi16(_mm512_slli_epi16(w, 12), 12);
  *od = _mm512_srai_epi16(w, 4);
}
__attribute__((always_inline)) inline __m512i DotI4Pairs16(const int8_t* r0, const int8_t* r1,
                                                           int64_t c) {
  const __m128i b0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + c / 2));
  const __m128i b1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1 + c / 2));
  const __m256i w = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(b0, b1));
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_srai_epi16(_mm256_slli_epi16(w, 12), 12)),
      _mm256_srai_epi16(w, 4), 1);
}

// acc rows [r0, r0 + RB) += sigma_r sum_n p[r][n] x[n] for NC channels from c0 over the keys
// [0, nk) of a tile, in the P V order of DotPvBlock (NC = 16: channel order): p int16 [R][TN] (0
// past nk), int8 value rows vr[0, nk] (kNib: packed int4 rows; vr[nk]: a zero row).
// The int32 sums stay in registers for the whole tile; a prefetch tick every kDotPvRun keys.
template <int RB, int NC, bool kNib>
__attribute__((always_inline)) inline void DotPvIntBlock(const int16_t* p, int64_t r0,
                                                         const int8_t* const* vr, int64_t nk,
                                                         int64_t c0, const float* sigma,
                                                         float* acc, int64_t lda,
                                                         DecPrefetch& pf) {
  constexpr int NA = NC == 16 ? 1 : NC / 16;
  constexpr int64_t kDotPvRun = 16;
  __m512i a[RB][NA];
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j) a[r][j] = _mm512_setzero_si512();
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                       8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for (int64_t n = 0; n < nk; n += 2) {
    if (n % kDotPvRun == 0) pf.Tick();
    __m512i pv[NA];
    // 32 channels from c of int8 value row v as int16 (NC = 16: 16, zeros after).
    const auto words = [](const int8_t* v, int64_t c) {
      if constexpr (NC == 16)
        return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(0xFFFFu, v + c));
      else
        return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c)));
    };
    // int4: the accumulators take the even channels' pairs, then the odd ones' (put in the P V
    // order below).
    if constexpr (kNib && NC == 16) {
      pv[0] = DotI4Pairs16(vr[n], vr[n + 1], c0);
    } else if constexpr (kNib) {
      OPENFIA_UNROLL
      for (int j = 0; j < NA; j += 2)
        DotI4Pairs32(vr[n], vr[n + 1], c0 + 16 * j, &pv[j], &pv[j + 1]);
    } else if constexpr (NC == 16) {
      pv[0] = _mm512_permutex2var_epi16(words(vr[n], c0), idx, words(vr[n + 1], c0));
    } else {
      OPENFIA_UNROLL
      for (int j = 0; j < NA; j += 2) {
        const __m512i v0 = words(vr[n], c0 + 16 * j), v1 = words(vr[n + 1], c0 + 16 * j);
        pv[j] = _mm512_unpacklo_epi16(v0, v1);
        pv[j + 1] = _mm512_unpackhi_epi16(v0, v1);
      }
    }
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) {
      using aint = int __attribute__((may_alias));
      const __m512i pw =
          _mm512_set1_epi32(*reinterpret_cast<const aint*>(p + (r0 + r) * kTileKeys + n));
      OPENFIA_UNROLL
      for (int j = 0; j < NA; ++j) a[r][j] = DpWssd(a[r][j], pv[j], pw);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r) {
    if constexpr (kNib && NC == 16) {
      // Lanes 0-7: channels 0, 2, .., 14; lanes 8-15: 1, 3, .., 15; to channel order.
      a[r][0] = _mm512_permutexvar_epi32(
          _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0), a[r][0]);
    } else if constexpr (kNib) {
      // Even / odd channels (lane i: channel 2 i / 2 i + 1 of the 32) to the P V order: the
      // in-lane interleave of the two gives channels 8 k .. 8 k + 3 / 8 k + 4 .. 8 k + 7.
      OPENFIA_UNROLL
      for (int j = 0; j < NA; j += 2) {
        const __m512i e = a[r][j], o = a[r][j + 1];
        a[r][j] = _mm512_unpacklo_epi32(e, o);
        a[r][j + 1] = _mm512_unpackhi_epi32(e, o);
      }
    }
    const __m512 sg = _mm512_set1_ps(sigma[r0 + r]);
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j) {
      float* at = acc + (r0 + r) * lda + c0 + 16 * j;
      _mm512_storeu_ps(at, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[r][j]), sg, _mm512_loadu_ps(at)));
    }
  }
}

template <int RB, bool kNib>
inline void DotPvIntRows(const int16_t* p, int64_t r0, const int8_t* const* vr, int64_t nk,
                         int64_t Dv, const float* sigma, float* acc, int64_t lda,
                         DecPrefetch& pf) {
  int64_t c0 = 0;
  if constexpr (RB <= 4)
    for (; c0 + 64 <= Dv; c0 += 64)
      DotPvIntBlock<RB, 64, kNib>(p, r0, vr, nk, c0, sigma, acc, lda, pf);
  for (; c0 + 32 <= Dv; c0 += 32)
    DotPvIntBlock<RB, 32, kNib>(p, r0, vr, nk, c0, sigma, acc, lda, pf);
  if (c0 < Dv) DotPvIntBlock<RB, 16, kNib>(p, r0, vr, nk, c0, sigma, acc, lda, pf);
}

// acc (the R rows of a head, in the P V order) += sigma P V over keys [0, nk): p int16 [R][TN]
// (DecIntQuantP), int8 value rows vr[0, nk] (vr[nk]: a zero row).
template <bool kNib>
inline void DotPvInt(const DecItem& it, const int16_t* p, const float* sigma,
                     const int8_t* const* vr, int64_t nk, float* acc, int64_t lda,
                     DecPrefetch& pf) {
  int64_t r0 = 0;
  const int64_t Dv = it.Dv;
  for (; r0 + 8 <= it.R; r0 += 8) DotPvIntRows<8, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf);
  switch (it.R - r0) {
    case 1: DotPvIntRows<1, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 2: DotPvIntRows<2, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 3: DotPvIntRows<3, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 4: DotPvIntRows<4, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 5: DotPvIntRows<4, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf);
            DotPvIntRows<1, kNib>(p, r0 + 4, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 6: DotPvIntRows<4, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf);
            DotPvIntRows<2, kNib>(p, r0 + 4, vr, nk, Dv, sigma, acc, lda, pf); break;
    case 7: DotPvIntRows<4, kNib>(p, r0, vr, nk, Dv, sigma, acc, lda, pf);
            DotPvIntRows<3, kNib>(p, r0 + 4, vr, nk, Dv, sigma, acc, lda, pf); break;
    default: break;
  }
}

// ---- the integer products' hooks (decode-inl.h) ------------------------------------------------

// Three or more rows fill the integer scores' 4-row groups well enough.
inline bool DecIntScoresFit(const DecItem& it) { return it.dot_qk && it.R >= 3; }
inline bool DecIntValuesFit(const DecItem& it) { return it.dot_pv; }
inline int64_t DecIntQueryBytes(int64_t Rp, int64_t D) {
  return 2 * Rp * DotIntChannels(DecFmt::kI4, D);  // the larger of the two formats' packs
}
inline bool DecIntQuery(DecFmt kf, const float* qf, int64_t Rp, int64_t D, void* qp,
                        float* sigma, int32_t* corr) {
  int8_t* q = static_cast<int8_t*>(qp);  // the keys' bias as they enter the products: 128, 8
  return kf == DecFmt::kI8 ? DotPackQueryInt<DecFmt::kI8>(qf, Rp, D, 128, q, sigma, corr)
                           : DotPackQueryInt<DecFmt::kI4>(qf, Rp, D, 8, q, sigma, corr);
}
// The key rows straight from the cache into VPDPBUSD (DotQkInt4 brings them to u in registers).
inline void DecIntQk(const DecItem& it, const void* qp, const float* sigma, const int32_t* corr,
                     const DecTileRows& t, int64_t x, float* S, DecPrefetch& pf) {
  const char* kr[kTileKeys];
  for (int64_t n = 0; n < t.nk; ++n) kr[n] = t.k[n] + x * t.kstep[n];
  const int8_t* q = static_cast<const int8_t*>(qp);
  if (it.ks.fmt == DecFmt::kI8) DotQkInt<DecFmt::kI8>(it, q, sigma, corr, kr, t.nk, S, pf);
  else DotQkInt<DecFmt::kI4>(it, q, sigma, corr, kr, t.nk, S, pf);
}
// The value rows straight from the cache (int4 widened in registers), then
// VPDPWSSD; the accumulators in the P V order.
inline void DecIntPv(const DecItem& it, const int16_t* p, const float* sigma, const DecTileRows& t,
                     int64_t x, float* acc, int64_t lda, DecPrefetch& pf) {
  const int8_t* vr[kTileKeys + 1];
  for (int64_t n = 0; n < t.nk; ++n)
    vr[n] = reinterpret_cast<const int8_t*>(t.v[n] + x * t.vstep[n]);
  vr[t.nk] = reinterpret_cast<const int8_t*>(kDecZeroRow);
  if (it.vs.fmt == DecFmt::kI4) DotPvInt<true>(it, p, sigma, vr, t.nk, acc, lda, pf);
  else DotPvInt<false>(it, p, sigma, vr, t.nk, acc, lda, pf);
}
