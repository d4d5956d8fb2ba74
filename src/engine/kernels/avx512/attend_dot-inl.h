// openfia internal: the bf16 dot-product tiles of the generic loop (AVX512-BF16 VDPBF16PS).
//
// Included by kernels_avx512bf16.cc inside a target namespace whose V is the AVX-512 vector
// (W == 16) and whose pragma enables avx512bf16, between generic/attend_base-inl.h and
// generic/attend_dot_common-inl.h (then attend-inl.h, with OPENFIA_ATTEND_BF16DOT defined). The
// tile loop is that of attend-inl.h; what changes on a "dot tile" is the arithmetic of its two
// products:
//   S = Q K^T and acc += P V as VDPBF16PS over bf16 pairs (each product of two bf16 values is
//   exact in fp32, the pair sums and the accumulation are fp32: only the order and the rounding
//   of the fp32 sums differ from the FMA path), at twice the FMA path's multiply-adds per
//   instruction.
// Operands in pair form (32-bit words holding two bf16 values, the low one first):
//   qp[r * ldqp + k]  = (q[r][2k], q[r][2k+1])            query rows, once per item
//   kp[k * TN + n]    = (K[n][2k], K[n][2k+1])            the packed key tile
//   vp[j * vps + d]   = (V[2j][d], V[2j+1][d])             the packed value tile
//   P row r           = bf16 P[r][0 .. npad) in place over the row's first half of sc.s
// The pair forms are built from the generic loop's fp32 packing (every storage format, antiquant,
// rope, the shared prefix and the second key source pack there), so they are exact only when
// every packed value is a bf16 value: DotItemOk checks that for the item.
//
// Like AMX-BF16, VDPBF16PS reads bf16 subnormal inputs as zero and flushes subnormal fp32
// results. What that changes, and why it stays inside the bf16 tolerance or is excluded:
//   - P: the probability's ExpP is 0 below exp(-86.5), never subnormal; a tile whose V holds a
//     non-finite value (where the exact exp and a masked cell's P = 0 matter) is not a dot tile.
//   - Q: an item whose query holds a subnormal or non-finite value is not a dot item (an infinite
//     q meeting a subnormal k must give inf, not 0 x inf = NaN).
//   - K / V subnormals (< 2^-126) and fp32 partial sums below 2^-126 contribute 0 instead of
//     < 2^-126 x |other operand|.

// Whether the query rows (fp32 in q, rows x D at stride ldq) are free of subnormal and
// non-finite values (DotItemOk).
inline bool QueryDotSafe(const float* q, int64_t rows, int64_t ldq, int64_t D) {
  // |x| in (0, 2^-126) or not finite: exponent field 0 with a nonzero mantissa, or 255.
  const __m512i expo = _mm512_set1_epi32(0x7F800000), mant = _mm512_set1_epi32(0x007FFFFF);
  __mmask16 bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * ldq;
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 in = d + 16 <= D ? 0xFFFF : static_cast<__mmask16>((1u << (D - d)) - 1);
      const __m512i u = _mm512_maskz_loadu_epi32(in, qr + d);
      const __m512i e = _mm512_and_si512(u, expo);
      bad |= _mm512_cmpeq_epi32_mask(e, expo);
      bad |= _mm512_mask_cmpeq_epi32_mask(_mm512_test_epi32_mask(u, mant), e,
                                          _mm512_setzero_si512());
    }
  }
  return bad == 0;
}

// 16 words (a[i], b[i]) as bf16 pairs, a in the low half: a and b hold bf16 values, so the
// conversion is exact (RNE of an exact value; a NaN stays NaN).
inline __m512i PairWords(__m512 a, __m512 b) {
  // cvtne2ps_pbh(b, a): bf16 of a in elements 0..15, of b in 16..31; interleave them.
  const __m512i ab = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                       8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, ab);
}

// 16 words of 32 channels in order, lo = channels [0, 16), hi = [16, 32) (bf16 values): word k
// is the pair (channel 2k, channel 2k + 1).
inline __m512 ChannelWords(__m512 lo, __m512 hi) {
  return _mm512_castsi512_ps(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// qp[r * ldqp + k] for k < ldqp (ldqp >= ceil(D / 2)): pairs of channels, zero past D. The 32
// channels [2 k0, 2 k0 + 32) in order are the 16 words [k0, k0 + 16) (ChannelWords).
inline void QueryPairs(const float* q, int64_t rows, int64_t ldq, int64_t D, uint32_t* qp,
                       int64_t ldqp) {
  auto lanes = [](int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                   : static_cast<__mmask16>((1u << std::max<int64_t>(n, 0)) - 1);
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * ldq;
    uint32_t* dst = qp + r * ldqp;
    for (int64_t k0 = 0; k0 < ldqp; k0 += 16) {
      const int64_t d = 2 * k0;
      const __m512 lo = _mm512_maskz_loadu_ps(lanes(D - d), qr + d);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes(D - d - 16), qr + d + 16);
      _mm512_mask_storeu_epi32(dst + k0, lanes(ldqp - k0),
                               _mm512_castps_si512(ChannelWords(lo, hi)));
    }
  }
}

// dst[j * lds + c] = (src[2j][c], src[2j+1][c]) for j < ceil(nrows / 2), c < ncol (a multiple of
// 16): rows of src (stride ls) paired two by two, a zero row past nrows.
inline void PairRows(const float* src, int64_t ls, int64_t nrows, int64_t ncol, uint32_t* dst,
                     int64_t lds) {
  for (int64_t j = 0; 2 * j < nrows; ++j) {
    const float* a = src + 2 * j * ls;
    const float* b = a + ls;
    const bool hb = 2 * j + 1 < nrows;
    for (int64_t c = 0; c < ncol; c += 16)
      _mm512_storeu_si512(dst + j * lds + c,
                          PairWords(_mm512_loadu_ps(a + c),
                                    hb ? _mm512_loadu_ps(b + c) : _mm512_setzero_ps()));
  }
}

// c[r * ldc + 16 j + i] (+)= sum_{k < K2} pair a[r * lda + k] . pair b[k * ldb + 16 j + i], for R
// rows and C vectors of columns: broadcast a's word, VDPBF16PS into R x C accumulators starting
// at zero (scores, stored times `scale`: the generic loop's scaling pass, the same product) or at
// c (ACC: the P V accumulators).
template <int R, int C, bool ACC>
inline void DotBlock(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t K2,
                     float* c, int64_t ldc, __m512 scale) {
  __m512 acc[R][C];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) acc[r][j] = ACC ? _mm512_loadu_ps(c + r * ldc + j * 16)
                                                : _mm512_setzero_ps();
  for (int64_t k = 0; k < K2; ++k) {
    __m512bh x[C];
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j)
      x[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + k * ldb + j * 16));
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512bh ab = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(a[r * lda + k])));
      OPENFIA_UNROLL
      for (int j = 0; j < C; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], ab, x[j]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j)
      _mm512_storeu_ps(c + r * ldc + j * 16, ACC ? acc[r][j] : _mm512_mul_ps(acc[r][j], scale));
}

// 16 probabilities (bf16 values already, never subnormal: ExpP) stored as bf16: VCVTNEPS2BF16,
// bitwise V::StoreBF16 for them (a NaN stays a NaN).
inline void StoreP(uint16_t* p, __m512 e) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
}

// ---- Direct pair packing: bf16 rows straight into pair form, without the fp32 staging ------
// For tiles whose K (and rope) and V rows are bf16 rows of vector-contiguous operands
// (MakeFastRows) with channel counts that are multiples of 32.

// Channels [e0, e0 + 16) and [e1, e1 + 16) of a bf16 row (two vectors of channels) as 16 words.
inline __m512i Load32Channels(const uint16_t* row, int64_t e0, int64_t e1) {
  if (e1 == e0 + 16) return _mm512_loadu_si512(row + e0);
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + e0))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + e1)), 1);
}

// kp[(w0 + k) * TN + n] = word k of key n's row (its channels 2k, 2k + 1) for k < D / 2,
// n < npad (zero past nk): a 16 x 16 transpose of 32-bit words per 16 keys and 32 channels.
inline void KeyPairsBf16(const FastRows& f, int64_t nk, int64_t D, int64_t w0, uint32_t* kp) {
  const int64_t npad = (nk + 15) / 16 * 16;
  for (int64_t n0 = 0; n0 < npad; n0 += 16) {
    const int m = static_cast<int>(std::min<int64_t>(16, nk - n0));
    const uint16_t* rows[16];  // local copies: the stores below could alias f as far as GCC knows
    for (int i = 0; i < 16; ++i)
      rows[i] = i < m ? static_cast<const uint16_t*>(f.row[n0 + i]) : nullptr;
    for (int64_t c = 0; c < D / 32; ++c) {
      const int64_t e0 = f.doff[2 * c], e1 = f.doff[2 * c + 1];
      __m512 r[16];
      if (m == 16) {
        OPENFIA_UNROLL
        for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(Load32Channels(rows[i], e0, e1));
      } else {
        for (int i = 0; i < 16; ++i)
          r[i] = i < m ? _mm512_castsi512_ps(Load32Channels(rows[i], e0, e1)) : _mm512_setzero_ps();
      }
      V::Transpose(r);
      OPENFIA_UNROLL
      for (int i = 0; i < 16; ++i)
        _mm512_storeu_ps(reinterpret_cast<float*>(kp + (w0 + 16 * c + i) * TN + n0), r[i]);
    }
  }
}

// vp[j * vps + d] = (V[2j][d], V[2j+1][d]) for d < Dv, zero past nk; returns whether a value is
// Inf or NaN (exponent field all ones).
inline bool ValuePairsBf16(const FastRows& f, int64_t nk, int64_t Dv, uint32_t* vp, int64_t vps) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                      39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  const __m512i ex = _mm512_set1_epi16(0x7F80);
  __mmask32 bad = 0;
  for (int64_t j = 0; 2 * j < nk; ++j) {
    const uint16_t* a = static_cast<const uint16_t*>(f.row[2 * j]);
    const uint16_t* b = 2 * j + 1 < nk ? static_cast<const uint16_t*>(f.row[2 * j + 1]) : nullptr;
    uint32_t* dst = vp + j * vps;
    for (int64_t c = 0; c < Dv / 32; ++c) {
      const int64_t e0 = f.doff[2 * c], e1 = f.doff[2 * c + 1];
      const __m512i x = Load32Channels(a, e0, e1);
      const __m512i y = b ? Load32Channels(b, e0, e1) : _mm512_setzero_si512();
      bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, ex), ex) |
             _mm512_cmpeq_epi16_mask(_mm512_and_si512(y, ex), ex);
      _mm512_storeu_si512(dst + 32 * c, _mm512_permutex2var_epi16(x, lo, y));
      _mm512_storeu_si512(dst + 32 * c + 16, _mm512_permutex2var_epi16(x, hi, y));
    }
  }
  return bad != 0;
}

constexpr int kDotLanes = 16;           // fp32 lanes of a DotBlock column vector
// ChannelWords / PairWords round any fp32 value to nearest even (VCVTNE2PS2BF16), so plain
// dequantized rows need no rounding to bf16 first (DqRows::plain).
constexpr bool kPairsRoundFp32 = true;
constexpr int64_t kDirectChannels = 32;  // channel multiple of the direct pair packing
using DotScale = __m512;
inline DotScale DotSet1(float x) { return _mm512_set1_ps(x); }
