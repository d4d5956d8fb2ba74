// openfia internal: the bf16 dot-product tiles of the generic loop (AVX512-BF16 VDPBF16PS).
//
// Included by attend-inl.h inside a target namespace whose V is the AVX-512 vector (W == 16) and
// whose pragma enables avx512bf16, only when OPENFIA_ATTEND_BF16DOT is defined. The tile loop is
// that of attend-inl.h; what changes on a "dot tile" is the arithmetic of its two products:
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

// Whether item rows can take dot tiles: a bf16 query, every packed K / V / rope value a bf16
// value (bf16 storage, or antiquant, which rounds to the query dtype), and query rows (fp32 in
// q, rows x D at stride ldq) free of subnormal and non-finite values.
inline bool DotOperandOk(const Operand& o, const Dequant& dq) {
  return !o.present() || o.elem == Elem::kBF16 || dq.kind != Dequant::Kind::kNone;
}
inline bool DotKvOk(const KvOperand& kv) {
  return DotOperandOk(kv.cache, kv.dequant) && DotOperandOk(kv.prefix, kv.prefix_dequant);
}
inline bool DotItemOk(const Problem& p, const float* q, int64_t rows, int64_t ldq, int64_t D) {
  if (p.q.elem != Elem::kBF16 || (p.d_rope > 0 && p.q_rope.elem != Elem::kBF16)) return false;
  if (!DotKvOk(p.k) || !DotKvOk(p.v)) return false;
  if (p.d_rope > 0 && !DotKvOk(p.k_rope)) return false;
  if (p.k2.cache.present() && (!DotKvOk(p.k2) || !DotKvOk(p.v2))) return false;
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

// qp[r * ldqp + k] for k < ldqp (ldqp >= ceil(D / 2)): pairs of channels, zero past D.
inline void QueryPairs(const float* q, int64_t rows, int64_t ldq, int64_t D, uint32_t* qp,
                       int64_t ldqp) {
  alignas(64) float t[2][16];
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * ldq;
    uint32_t* dst = qp + r * ldqp;
    for (int64_t k0 = 0; k0 < ldqp; k0 += 16) {  // channels [2 k0, 2 k0 + 32)
      for (int i = 0; i < 32; ++i) {
        const int64_t d = 2 * k0 + i;
        (i % 2 == 0 ? t[0] : t[1])[i / 2] = d < D ? qr[d] : 0.f;
      }
      _mm512_storeu_si512(dst + k0, PairWords(_mm512_load_ps(t[0]), _mm512_load_ps(t[1])));
    }
  }
}

// kp[k * TN + n] for k < ceil(D / 2), n < npad, from kt[d * TN + n] (d < D; zeros past D).
inline void KeyPairs(const float* kt, int64_t D, int64_t npad, uint32_t* kp) {
  for (int64_t k = 0; 2 * k < D; ++k) {
    const float* a = kt + 2 * k * TN;
    const float* b = a + TN;
    const bool hb = 2 * k + 1 < D;
    for (int64_t n = 0; n < npad; n += 16)
      _mm512_storeu_si512(kp + k * TN + n,
                          PairWords(_mm512_loadu_ps(a + n),
                                    hb ? _mm512_loadu_ps(b + n) : _mm512_setzero_ps()));
  }
}

// vp[j * vps + d] for j < ceil(nk / 2), d < ldv, from v[n * vs + d] (n < nk; zeros past nk).
inline void ValuePairs(const float* v, int64_t vs, int64_t nk, int64_t ldv, uint32_t* vp,
                       int64_t vps) {
  for (int64_t j = 0; 2 * j < nk; ++j) {
    const float* a = v + 2 * j * vs;
    const float* b = a + vs;
    const bool hb = 2 * j + 1 < nk;
    for (int64_t d = 0; d < ldv; d += 16)
      _mm512_storeu_si512(vp + j * vps + d,
                          PairWords(_mm512_loadu_ps(a + d),
                                    hb ? _mm512_loadu_ps(b + d) : _mm512_setzero_ps()));
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

// Rows [0, rows) of a product in register blocks of kRB rows x kCB vectors: c (rows x ncol at
// stride ldc) (+)= a (rows x K2 words at stride lda) * b (K2 x ncol words at stride ldb).
template <bool ACC, int R>
inline void DotRows(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t K2,
                    int64_t ncol, float* c, int64_t ldc, __m512 scale) {
  int64_t c0 = 0;
  for (; c0 + kCB * 16 <= ncol; c0 += kCB * 16)
    DotBlock<R, kCB, ACC>(a, lda, b + c0, ldb, K2, c + c0, ldc, scale);
  for (; c0 < ncol; c0 += 16) DotBlock<R, 1, ACC>(a, lda, b + c0, ldb, K2, c + c0, ldc, scale);
}

template <bool ACC, int R>
inline void DotTail(int64_t rem, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                    int64_t K2, int64_t ncol, float* c, int64_t ldc, __m512 scale) {
  if constexpr (R > 0) {
    if (rem == R) return DotRows<ACC, R>(a, lda, b, ldb, K2, ncol, c, ldc, scale);
    DotTail<ACC, R - 1>(rem, a, lda, b, ldb, K2, ncol, c, ldc, scale);
  }
}

template <bool ACC>
inline void DotProduct(const uint32_t* a, int64_t lda, int64_t rows, const uint32_t* b,
                       int64_t ldb, int64_t K2, int64_t ncol, float* c, int64_t ldc,
                       __m512 scale = _mm512_set1_ps(1.f)) {
  int64_t r0 = 0;
  for (; r0 + kRB <= rows; r0 += kRB)
    DotRows<ACC, kRB>(a + r0 * lda, lda, b, ldb, K2, ncol, c + r0 * ldc, ldc, scale);
  DotTail<ACC, kRB - 1>(rows - r0, a + r0 * lda, lda, b, ldb, K2, ncol, c + r0 * ldc, ldc,
                        scale);
}

// s[r * TN + n] = scale * (q_r . k_n) for n < npad (kp from KeyPairs over D channels).
inline void ScoresDot(const uint32_t* qp, int64_t ldqp, int64_t rows, const uint32_t* kp,
                      int64_t D, int64_t npad, float scale, float* s) {
  DotProduct<false>(qp, ldqp, rows, kp, TN, (D + 1) / 2, npad, s, TN, _mm512_set1_ps(scale));
}

// 16 probabilities (bf16 values already, never subnormal: ExpP) stored as bf16: VCVTNEPS2BF16,
// bitwise V::StoreBF16 for them (a NaN stays a NaN).
inline void StoreP(uint16_t* p, __m512 e) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
}

// acc[r * lda + d] += sum_n P[r][n] V[n][d] for d < ldv, P as bf16 rows over sc.s (row stride
// TN floats = TN words), vp from ValuePairs over nk keys.
inline void PvDot(const float* s, int64_t rows, const uint32_t* vp, int64_t vps, int64_t ldv,
                  int64_t nk, float* acc, int64_t lda) {
  DotProduct<true>(reinterpret_cast<const uint32_t*>(s), TN, rows, vp, vps, (nk + 1) / 2, ldv,
                   acc, lda);
}
