// openfia internal: the AVX-512 decode kernel for bf16 queries (few query rows per KV head,
// bf16 / int8 / int4 K and V).
//
// Included by kernels_avx512bf16.cc (with OPENFIA_DECODE_BF16DOT) and kernels_avx512.cc (without)
// inside their target namespaces, after attend-inl.h and decode_tile-inl.h (DecodeCan, DecTile,
// DecPrefetcher). The table's attend entry offers every item to Bf16DecodeRun first; it returns
// false for an item it does not run (the AVX2 decode kernel or the generic loop runs it), so
// semantics never depend on it.
//
// Two kinds of products, the rest shared: VDPBF16PS (BdRun<R, true>: the avx512bf16 table where
// Bf16DotTiles, i.e. AMD CPUs or a cap naming avx512bf16) or fp32 FMAs (BdRun<R, false>: the
// avx512 table, and the avx512bf16 table on Intel, where VDPBF16PS runs at half the FMA's rate).
// The FMA products split every 32 bf16 channels into even / odd fp32 lanes by one shift and one
// mask (queries once per item, keys and values per chunk): the scores take 2 FMAs per 32
// channels, key and row; P V keeps its accumulators as [16 even | 16 odd] per 32 channels until
// the item ends (BdUnpermute32), reads the fp32 P (bf16 values) and needs no Inf / NaN scan.
// D2's shape (int8) one thread on the Intel VM of session 12: 9.6-11.7 ms with VDPBF16PS,
// 7.4 ms with FMAs; bf16 (D1) alike within this VM's noise (8.6-9.5 ms).
//
// The AVX2 decode kernel spends ~137 cycles per key and KV head on fp32 FMAs (each bf16 row split
// into even / odd channels, two FMAs per 16 channels and row): compute-bound at half the DRAM
// rate. VDPBF16PS multiplies 32 bf16 pairs per instruction, so per 64-key tile:
//   scores   a bf16 key row is D / 32 zmm, each VDPBF16PSed with the same channels of every query
//            row (stored bf16 as given): 16 / R keys x R rows = 16 accumulators per block (16
//            independent chains), reduced by one transposing add tree (BdSum16) to one vector
//            of the 16 scores, stored row-major st[r][key] by R masked stores.
//   softmax  per row on its 64 scores: the operations of the AVX2 decode kernel (scale, running
//            max, the exact V::Exp, sum, P rounded to bf16), P kept as fp32 and as bf16 pairs.
//   P V      per head in chunks of kBdChunk keys: two value rows interleaved into bf16 pairs
//            (V[n][c], V[n + 1][c]) by VPERMT2W, VDPBF16PSed with the broadcast word
//            (P[r][n], P[r][n + 1]) into R x 16 / R accumulators of 16 channels (channel order).
// bf16 x bf16 products are exact in fp32; the order of the fp32 sums differs from the other
// targets (within the fp32-accumulation tolerance of the fp64 reference). VDPBF16PS reads bf16
// subnormals as zero and flushes subnormal results, which attend_dot-inl.h explains; here:
//   - Q: an item whose query holds a subnormal or non-finite value is declined (BdQueryOk: an
//     infinite q meeting a subnormal k must give inf, not 0 x inf = NaN).
//   - P: a subnormal P (exp below 2^-126) reads as 0 against finite values, which vanishes
//     against l >= 1; the channels of a P V block whose value rows hold a non-finite value run
//     fp32 FMAs instead (BdPvExact: a tiny P times inf must stay inf, and 0 x inf NaN).
//   - K / V subnormals (< 2^-126) contribute 0 instead of < 2^-126 x |other operand|.
//
// Memory order as in the AVX2 kernel: token after token across the item's KV heads (score
// blocks of all heads for each 16 / R keys, P V chunks for all heads) with the same prefetch
// stream (DecPrefetcher), but kBdAhead = 32 tokens ahead and into L2 (T1): at this kernel's rate
// the AVX2 kernel's NTA stream 8 tokens ahead left it waiting on DRAM (7.8 GB/s, T1: 10-13).
//
// int8 / int4 K or V (the vector antiquants of DecOperandKind): each score block's keys and each
// P V chunk's values are dequantized into a few bf16 rows in L1 (BdStageRows: (x + offset) *
// scale in fp32 as the reference computes it, rounded to bf16 by VCVTNE2PS2BF16), which the
// same blocks then read; the P V blocks' Inf / NaN scan reads the dequantized rows. D2's shape
// (int8, per-token scale + offset) one thread 14.7 -> 9.6 ms on the Intel VM of session 12
// (the AVX2 kernel had run it), where VDPBF16PS, at half the FMA's rate, bounds it.
//
// Items it runs: those of the AVX2 decode kernel (DecodeCan) with a bf16 query (K and V bf16,
// with a bf16 shared prefix allowed, or int8 / int4), query rows free of subnormal and
// non-finite values.

constexpr int64_t kBdChunk = 16;  // keys per P V chunk and head (its value rows stay in L1)
constexpr int64_t kBdAhead = 32;  // tokens of prefetch distance (a score block is up to 16)

inline bool Bf16DecodeCan(const Problem& p, const WorkItem& w, DecKind* kk = nullptr,
                          DecKind* vk = nullptr) {
  return p.q.elem == Elem::kBF16 && DecodeCan(p, w, kk, vk);
}

// bf16 words of a staged row of d channels (a multiple of 32: whole zmm loads).
inline int64_t BdStageWords(int64_t d) { return (d + 31) / 32 * 32; }

// Scratch (from sc.kt on) of an item: fp32 scores / P [n_hk][R][TN], bf16 P [n_hk][R][TN]; for
// an int8 / int4 K its per-channel antiquant vectors [n_hk][2][d_qk] and one score block's keys
// dequantized to bf16 [16][BdStageWords(d_qk)]; for an int8 / int4 V the same with one P V
// chunk's values [kBdChunk][BdStageWords(d_v)]. Sizes in floats.
// The FMA products (dot false) also keep the query rows as fp32 [rows][BdStageWords(d_qk)].
inline int64_t BdScratchFloats(const Problem& p, const WorkItem& w, DecKind kk, DecKind vk,
                               bool dot) {
  int64_t n = w.rows() * (TN + TN / 2);
  if (!dot) n += w.rows() * BdStageWords(p.d_qk);
  if (kk != DecKind::kBf16)
    n += 2 * w.n_hk * (p.d_qk + TN) + 16 * BdStageWords(p.d_qk) / 2;
  if (vk != DecKind::kBf16)
    n += 2 * w.n_hk * (p.d_v + TN) + kBdChunk * BdStageWords(p.d_v) / 2;
  return n;
}

#if defined(OPENFIA_DECODE_BF16DOT)
__attribute__((always_inline)) inline __m512bh BdBh(__m512i x) {
  return reinterpret_cast<__m512bh>(x);
}
#endif

// 32 bf16 channels [d, d + 32) of a row; past D (D % 32 == 16) zeros.
__attribute__((always_inline)) inline __m512i BdLoad32(const char* row, int64_t d, int64_t D) {
  if (d + 32 <= D) return _mm512_loadu_si512(row + 2 * d);
  return _mm512_maskz_loadu_epi16(0xFFFF, row + 2 * d);
}

// The 16 lane sums of x[0..16) in one vector: lane 4b + j holds the sum of x[4j + b] (an add tree
// of 128-bit block shuffles, then in-block shuffles: 15 adds, 30 shuffles).
__attribute__((always_inline)) inline __m512 BdSum16(const __m512* x) {
  __m512 c[8], e[4], g[2];
  OPENFIA_UNROLL
  for (int i = 0; i < 8; ++i)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xEE));
  OPENFIA_UNROLL
  for (int i = 0; i < 4; ++i)
    e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  OPENFIA_UNROLL
  for (int i = 0; i < 2; ++i)
    g[i] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
}

// st[r * TN + n0 + k] = q_r . K[n0 + k] for r < R, k < 16 / R: bf16 q rows at stride ldq
// (zero past D), bf16 key rows kr[k] (the cache's, or staged by BdDequantRow).
// DOT: VDPBF16PS with the bf16 query rows q (uint16_t); else fp32 FMAs with the query rows qf
// split per 32 channels into [16 even | 16 odd] (BdSplitQuery), each key chunk split alike by
// one shift and one mask (every bf16 x bf16 product is exact in fp32 either way).
template <int R, bool DOT>
__attribute__((always_inline)) inline void BdScoreBlock(const void* q, int64_t ldq, int64_t D,
                                                        const char* const* kr, int64_t n0,
                                                        float* st) {
  constexpr int KB = 16 / R;
  __m512 acc[16];  // acc[r * KB + k]: the lane order of the stored vector
  OPENFIA_UNROLL
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 32) {
    OPENFIA_UNROLL
    for (int k = 0; k < KB; ++k) {
      const __m512i x = BdLoad32(kr[k], d, D);
#if defined(OPENFIA_DECODE_BF16DOT)
      if constexpr (DOT) {
        const uint16_t* qb = static_cast<const uint16_t*>(q);
        OPENFIA_UNROLL
        for (int r = 0; r < R; ++r)
          acc[r * KB + k] = _mm512_dpbf16_ps(acc[r * KB + k], BdBh(x),
                                             BdBh(_mm512_loadu_si512(qb + r * ldq + d)));
        continue;
      }
#endif
      const float* qf = static_cast<const float*>(q);
      const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      const __m512 o = _mm512_castsi512_ps(
          _mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
      OPENFIA_UNROLL
      for (int r = 0; r < R; ++r) {
        acc[r * KB + k] = _mm512_fmadd_ps(_mm512_loadu_ps(qf + r * ldq + d), e, acc[r * KB + k]);
        acc[r * KB + k] =
            _mm512_fmadd_ps(_mm512_loadu_ps(qf + r * ldq + d + 16), o, acc[r * KB + k]);
      }
    }
  }
  // BdSum16 puts x[4j + b] in lane 4b + j: feed acc[L] as x[4 (L % 4) + L / 4].
  __m512 in[16];
  OPENFIA_UNROLL
  for (int L = 0; L < 16; ++L) in[4 * (L % 4) + L / 4] = acc[L];
  const __m512 s = BdSum16(in);
  // Lanes [r KB, r KB + KB) are row r's: stored at st + r TN + n0.
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(st + r * (TN - KB) + n0,
                          static_cast<__mmask16>(((1u << KB) - 1) << (r * KB)), s);
}

// Online softmax of one head's tile on its row-major scores st[r][TN] (in place: P rounded to
// bf16; its bf16 bits also in ph[r][TN], the pair words of P V); updates m / l of the R rows and
// rescales their accumulators. The operations of the AVX2 decode kernel's DecSoftmax.
inline void BdSoftmax(float* st, uint16_t* ph, int64_t R, int64_t nk, float scale, float* m,
                      float* l, float* acc, int64_t acc_stride, int64_t ldv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t nvec = (nk + 15) / 16;  // P V reads no key past these (chunks end at nk + 1)
  const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  for (int64_t r = 0; r < R; ++r) {
    float* s = st + r * TN;
    __m512 vm = ninf;
    for (int64_t i = 0; i < nvec; ++i) {
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * i), vscale);
      if ((i + 1) * 16 > nk)  // keys past nk: -inf
        x = _mm512_mask_blend_ps(static_cast<__mmask16>((1u << (nk - 16 * i)) - 1), ninf, x);
      _mm512_storeu_ps(s + 16 * i, x);
      vm = _mm512_max_ps(vm, x);
    }
    const float m_old = m[r];
    const float m_new = std::max(m_old, _mm512_reduce_max_ps(vm));
    // A row that has seen nothing finite yet subtracts 0: its P is exp(-inf) = 0.
    const __m512 vmn = _mm512_set1_ps(m_new == kNegInf ? 0.f : m_new);
    const float alpha = m_old == kNegInf ? 0.f : ExpScalar(m_old - m_new);
    m[r] = m_new;
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t i = 0; i < nvec; ++i) {
      __m512 e = V::Exp(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * i), vmn));
      vsum = _mm512_add_ps(vsum, e);
      e = V::RoundBF16(e);
      _mm512_storeu_ps(s + 16 * i, e);
      // e is a bf16 value (a NaN from arithmetic is quiet: its top half is a NaN too).
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ph + r * TN + 16 * i),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(e), 16)));
    }
    const float tsum = _mm512_reduce_add_ps(vsum);
    // A row with no finite score yet whose sum is NaN met a NaN score: the row is NaN, as in the
    // reference (m = NaN spreads to every later tile; the epilogue would read m = -inf as empty).
    if (m[r] == kNegInf && std::isnan(tsum)) m[r] = std::numeric_limits<float>::quiet_NaN();
    l[r] = l[r] * alpha + tsum;
    if (alpha != 1.f) {
      float* a = acc + r * acc_stride;
      const __m512 va = _mm512_set1_ps(alpha);
      for (int64_t d = 0; d < ldv; d += 16)
        _mm512_storeu_ps(a + d, _mm512_mul_ps(_mm512_loadu_ps(a + d), va));
    }
  }
}

// acc (R rows) channels [c0, c1) += P V over keys [n0, n1) as fp32 FMAs of the fp32 P, key after
// key (value rows with a non-finite value: a subnormal P must still meet it).
inline void BdPvExact(const float* st, int64_t R, const char* const* vr, int64_t n0, int64_t n1,
                      int64_t c0, int64_t c1, float* acc, int64_t lda) {
  for (int64_t r = 0; r < R; ++r) {
    float* a = acc + r * lda;
    for (int64_t n = n0; n < n1; ++n) {
      const __m512 pb = _mm512_set1_ps(st[r * TN + n]);
      const uint16_t* v = reinterpret_cast<const uint16_t*>(vr[n]);
      for (int64_t d = c0; d < c1; d += 16)
        _mm512_storeu_ps(a + d, _mm512_fmadd_ps(pb, V::LoadBF16(v + d), _mm512_loadu_ps(a + d)));
    }
  }
}

#if defined(OPENFIA_DECODE_BF16DOT)
// acc rows [0, R) x channel groups [g0, g0 + NC) (16 channels each) += P V over the key pairs
// (n, n + 1), n = n0, n0 + 2, .. < n1: value rows vr[n], P pair words of row r at pw + r TN / 2.
// The Inf / NaN scan of the values rides on the loads (a bf16 u is not finite when u | 0x807F
// is 0xFFFF, the unsigned maximum): false, and acc untouched, when one of the block's values is not
// finite (the caller runs BdPvExact on its channels). A separate scan before the products took
// 16% of D1's time in cache on Zen 4 (it paid the rows' first-touch misses).
template <int R, int NC>
__attribute__((always_inline)) inline bool BdPvBlock(const uint32_t* pw, const char* const* vr,
                                                     int64_t n0, int64_t n1, int64_t g0,
                                                     float* acc, int64_t lda) {
  const __m512i fill = _mm512_set1_epi16(static_cast<int16_t>(0x807F));
  __m512i top = _mm512_setzero_si512();
  // Word i of the result: (a[i], b[i]) (lo: channels 0..15 of a 32-channel load; hi: 16..31).
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                      8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  __m512 a[R][NC];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NC; ++j) a[r][j] = _mm512_loadu_ps(acc + r * lda + 16 * (g0 + j));
  for (int64_t n = n0; n < n1; n += 2) {
    __m512i pp[R];
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r)
      pp[r] = _mm512_set1_epi32(static_cast<int>(pw[r * TN / 2 + n / 2]));
    const char* v0 = vr[n] + 32 * g0;
    const char* v1 = vr[n + 1] + 32 * g0;
    if constexpr (NC == 1) {
      // One group: both rows' 16 channels in one vector, (a[i], a[16 + i]) per word.
      const __m512i x = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1)), 1);
      const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                           24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                           16, 0);
      const __m512i pv = _mm512_permutexvar_epi16(idx, x);
      top = _mm512_max_epu16(top, _mm512_or_si512(x, fill));
      OPENFIA_UNROLL
      for (int r = 0; r < R; ++r) a[r][0] = _mm512_dpbf16_ps(a[r][0], BdBh(pv), BdBh(pp[r]));
    } else {
      static_assert(NC % 2 == 0, "groups go two at a time");
      OPENFIA_UNROLL
      for (int j = 0; j < NC; j += 2) {
        const __m512i x0 = _mm512_loadu_si512(v0 + 32 * j), x1 = _mm512_loadu_si512(v1 + 32 * j);
        const __m512i pl = _mm512_permutex2var_epi16(x0, lo, x1);
        const __m512i ph = _mm512_permutex2var_epi16(x0, hi, x1);
        top = _mm512_max_epu16(top, _mm512_max_epu16(_mm512_or_si512(x0, fill),
                                                     _mm512_or_si512(x1, fill)));
        OPENFIA_UNROLL
        for (int r = 0; r < R; ++r) {
          a[r][j] = _mm512_dpbf16_ps(a[r][j], BdBh(pl), BdBh(pp[r]));
          a[r][j + 1] = _mm512_dpbf16_ps(a[r][j + 1], BdBh(ph), BdBh(pp[r]));
        }
      }
    }
  }
  if (_mm512_cmpeq_epi16_mask(top, _mm512_set1_epi16(-1)) != 0) return false;
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NC; ++j) _mm512_storeu_ps(acc + r * lda + 16 * (g0 + j), a[r][j]);
  return true;
}

// acc (R rows of one head) += P V over keys [n0, n1) (n1 - n0 even; rows past the tile's keys
// are zero rows with P = 0): 16 accumulators per block; a block whose values hold an Inf or NaN
// runs BdPvExact on its channels over the chunk's keys [n0, ne) with the fp32 P st.
template <int R>
inline void BdPv(const uint32_t* pw, const float* st, const char* const* vr, int64_t n0,
                 int64_t ne, int64_t n1, int64_t Dv, float* acc, int64_t lda) {
  constexpr int NC = 16 / R;
  const int64_t ng = Dv / 16;
  int64_t g = 0;
  for (; g + NC <= ng; g += NC)
    if (!BdPvBlock<R, NC>(pw, vr, n0, n1, g, acc, lda))
      BdPvExact(st, R, vr, n0, ne, 16 * g, 16 * (g + NC), acc, lda);
  if constexpr (NC > 2)
    for (; g + 2 <= ng; g += 2)
      if (!BdPvBlock<R, 2>(pw, vr, n0, n1, g, acc, lda))
        BdPvExact(st, R, vr, n0, ne, 16 * g, 16 * (g + 2), acc, lda);
  if (g < ng && !BdPvBlock<R, 1>(pw, vr, n0, n1, g, acc, lda))
    BdPvExact(st, R, vr, n0, ne, 16 * g, 16 * (g + 1), acc, lda);
}

#endif

// acc rows [0, R) x 32-channel groups [c0, c0 + NC) += P V over keys [n0, n1) as fp32 FMAs of
// the fp32 P st[r][n] (bf16 values): each value chunk split into even / odd channels, so the
// accumulators hold every 32 channels as [16 even | 16 odd] while the item runs (BdUnpermute32).
// No Inf / NaN scan: fp32 products of a subnormal P and an infinite value stay infinite.
template <int R, int NC>
__attribute__((always_inline)) inline void BdPvFmaBlock(const float* st, const char* const* vr,
                                                        int64_t n0, int64_t n1, int64_t c0,
                                                        float* acc, int64_t lda) {
  __m512 a[R][2 * NC];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < 2 * NC; ++j) a[r][j] = _mm512_loadu_ps(acc + r * lda + 32 * c0 + 16 * j);
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t n = n0; n < n1; ++n) {
    __m512 pb[R];
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) pb[r] = _mm512_set1_ps(st[r * TN + n]);
    const char* v = vr[n] + 64 * c0;
    OPENFIA_UNROLL
    for (int j = 0; j < NC; ++j) {
      const __m512i x = _mm512_loadu_si512(v + 64 * j);
      const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      const __m512 o = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
      OPENFIA_UNROLL
      for (int r = 0; r < R; ++r) {
        a[r][2 * j] = _mm512_fmadd_ps(pb[r], e, a[r][2 * j]);
        a[r][2 * j + 1] = _mm512_fmadd_ps(pb[r], o, a[r][2 * j + 1]);
      }
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < 2 * NC; ++j) _mm512_storeu_ps(acc + r * lda + 32 * c0 + 16 * j, a[r][j]);
}

// acc (R rows of one head) += P V over keys [n0, n1) by FMAs; a last 16 channels (Dv % 32 ==
// 16) as [8 even | 8 odd].
template <int R>
inline void BdPvFma(const float* st, const char* const* vr, int64_t n0, int64_t n1, int64_t Dv,
                    float* acc, int64_t lda) {
  constexpr int NC = 8 / R;  // 16 accumulators
  const int64_t nc = Dv / 32;
  int64_t c = 0;
  for (; c + NC <= nc; c += NC) BdPvFmaBlock<R, NC>(st, vr, n0, n1, c, acc, lda);
  for (; c < nc; ++c) BdPvFmaBlock<R, 1>(st, vr, n0, n1, c, acc, lda);
  if (Dv % 32 == 0) return;
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t r = 0; r < R; ++r) {
    float* a = acc + r * lda + 32 * nc;
    __m256 ae = _mm256_loadu_ps(a), ao = _mm256_loadu_ps(a + 8);
    for (int64_t n = n0; n < n1; ++n) {
      const __m256 pb = _mm256_set1_ps(st[r * TN + n]);
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr[n] + 64 * nc));
      ae = _mm256_fmadd_ps(pb, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), ae);
      ao = _mm256_fmadd_ps(pb, _mm256_castsi256_ps(_mm256_and_si256(x, hi)), ao);
    }
    _mm256_storeu_ps(a, ae);
    _mm256_storeu_ps(a + 8, ao);
  }
}

// Row states of the FMA products back to channel order (the inverse of their even / odd split).
inline void BdUnpermute32(float* acc, int64_t rows, int64_t lda, int64_t Dv) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(8));
  for (int64_t r = 0; r < rows; ++r) {
    float* a = acc + r * lda;
    int64_t c = 0;
    for (; c + 32 <= Dv; c += 32) {
      const __m512 e = _mm512_loadu_ps(a + c), o = _mm512_loadu_ps(a + c + 16);
      // Per 128-bit block: lo = (e0 o0 e1 o1), hi = (e2 o2 e3 o3).
      const __m512 lo = _mm512_unpacklo_ps(e, o), hi = _mm512_unpackhi_ps(e, o);
      _mm512_storeu_ps(a + c, _mm512_permutex2var_ps(lo, i0, hi));
      _mm512_storeu_ps(a + c + 16, _mm512_permutex2var_ps(lo, i1, hi));
    }
    if (c < Dv) {
      const __m256 e = _mm256_loadu_ps(a + c), o = _mm256_loadu_ps(a + c + 8);
      const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
      _mm256_storeu_ps(a + c, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(a + c + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
}

// One int8 / int4 row of D channels dequantized to bf16 words dst[0, BdStageWords(D)) (+0 past
// D). VCVTNE2PS2BF16 rounds to nearest even as cvt::F32ToBF16 does, keeps NaN a NaN and an
// infinity infinite, and flushes a subnormal result to 0 (VDPBF16PS reads one as 0 anyway).
// CHAN: per-channel scale / offset vectors cs / co (D floats each); else the row's s / o.
// The bf16 words of x1 (high 16) and x0 (low 16), rounded as the staging rounds.
__attribute__((always_inline)) inline __m512i BdWords(__m512 x1, __m512 x0) {
#if defined(OPENFIA_DECODE_BF16DOT)
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
#else  // the same rounding in integer operations (subnormal results kept)
  const auto words = [](__m512 x) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(V::RoundBF16(x)), 16));
  };
  return _mm512_inserti64x4(_mm512_castsi256_si512(words(x0)), words(x1), 1);
#endif
}

// The 32 nibbles of int4 channels [d, d + 32) (16 bytes; 8 past D when D % 32 == 16), one byte
// each in channel order (low nibble first), unsigned 0..15.
__attribute__((always_inline)) inline __m256i BdNibbleBytes(const char* row, int64_t d,
                                                            int64_t D) {
  const __m128i* src = reinterpret_cast<const __m128i*>(row + d / 2);
  const __m256i b = _mm256_cvtepu8_epi16(d + 32 <= D ? _mm_loadu_si128(src) : _mm_loadl_epi64(src));
  return _mm256_and_si256(_mm256_or_si256(b, _mm256_slli_epi16(b, 4)), _mm256_set1_epi16(0x0F0F));
}
// The same as signed bytes -8..7 (two's complement nibbles), in the low 256 bits.
__attribute__((always_inline)) inline __m512i BdNibbles(const char* row, int64_t d, int64_t D) {
  const __m256i n = BdNibbleBytes(row, d, D), eight = _mm256_set1_epi8(8);
  return _mm512_castsi256_si512(_mm256_sub_epi8(_mm256_xor_si256(n, eight), eight));
}

// The codes of channels [d, d + 16) and [d + 16, d + 32) of an int8 / int4 row as fp32 (exact
// small integers); the second +0 past D. int4: 32 nibbles widened to signed bytes at once (~11
// operations per 32 channels; V::LoadI4 takes ~10 per 16).
template <DecKind K>
__attribute__((always_inline)) inline void BdCodes32(const char* row, int64_t d, int64_t D,
                                                     __m512* x0, __m512* x1) {
  const bool two = d + 32 <= D;
  if constexpr (K == DecKind::kI8) {
    const int8_t* r = reinterpret_cast<const int8_t*>(row) + d;
    *x0 = V::LoadI8(r);
    *x1 = two ? V::LoadI8(r + 16) : _mm512_setzero_ps();
  } else {
    const __m256i nb = _mm512_castsi512_si256(BdNibbles(row, d, D));
    *x0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(nb)));
    *x1 = two ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(nb, 1)))
              : _mm512_setzero_ps();
  }
}

template <DecKind K, bool CHAN>
inline void BdDequantRow(const char* row, int64_t D, const float* cs, const float* co, float s,
                         float o, bool off, uint16_t* dst) {
  const __m512 vs = _mm512_set1_ps(s), vo = _mm512_set1_ps(o);
  if constexpr (K == DecKind::kI4 && !CHAN) {
    // One scale and offset for the row: its 16 possible values (x + o) * s, x = -8..7, computed
    // and rounded once as the per-element path would, then looked up by nibble (VPERMW): the
    // same words at ~6 operations per 32 channels instead of ~17.
    __m512 x = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    if (off) x = _mm512_add_ps(x, vo);
    const __m512i table = BdWords(_mm512_setzero_ps(), _mm512_mul_ps(x, vs));  // words 0..15
    for (int64_t d = 0; d < D; d += 32) {
      // 16 bytes (32 channels, low nibble first) -> one byte per nibble, in channel order.
      __m512i w = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(BdNibbleBytes(row, d, D)),
                                           table);
      if (d + 32 > D) w = _mm512_maskz_mov_epi16(0xFFFF, w);  // +0 past D
      _mm512_storeu_si512(dst + d, w);
    }
    return;
  }
  // (x + offset) * scale: the fp32 operations of attend-inl.h's DqAt in its order, so the
  // values are the reference's before the rounding to the query dtype (bf16).
  const auto dq = [&](__m512 x, int64_t c) {
    if (off) x = _mm512_add_ps(x, CHAN ? _mm512_loadu_ps(co + c) : vo);
    return _mm512_mul_ps(x, CHAN ? _mm512_loadu_ps(cs + c) : vs);
  };
  for (int64_t d = 0; d < D; d += 32) {
    __m512 x0, x1;
    BdCodes32<K>(row, d, D, &x0, &x1);
    x0 = dq(x0, d);
    if (d + 32 <= D) x1 = dq(x1, d + 16);  // else +0
    _mm512_storeu_si512(dst + d, BdWords(x1, x0));
  }
}

// The per-row antiquant parameters of a tile's keys [0, nk) (not per channel): scale and offset
// of key n of head x at par[2 x TN + n] and par[(2 x + 1) TN + n], looked up once per tile; when
// they do not depend on the head (per tensor, per token) only head 0's, which every head reads
// (BdParams). The lookups had cost ~30 scalar instructions per row, head and operand.
inline void BdTileParams(const DecDq& dq, const int64_t* coord, int64_t nk, int64_t hk,
                         int64_t nh, float* par) {
  if (dq.per_chan) return;
  const int64_t heads = dq.dq->sh == 0 ? 1 : nh;
  for (int64_t x = 0; x < heads; ++x)
    for (int64_t n = 0; n < nk; ++n)
      dq.Row(coord + 2 * n, hk + x, par + 2 * x * TN + n, par + (2 * x + 1) * TN + n);
}
inline const float* BdParams(const DecDq& dq, const float* par, int64_t x) {
  return par + (dq.dq->sh == 0 ? 0 : 2 * x * TN);
}

// Rows n of [n0, n1) of head x of an int8 / int4 operand dequantized into dst + (n - n0) ldd
// words, their pointers in rows[n]; keys past the tile's nk read the zero row. par: the head's
// per-row parameters (BdParams), unused per channel.
inline void BdStageRows(DecKind kind, const DecDq& dq, const char* const* src,
                        const int64_t* step, const float* par, int64_t nk, int64_t x,
                        int64_t n0, int64_t n1, int64_t D, uint16_t* dst, int64_t ldd,
                        const char** rows) {
  const float* cs = dq.per_chan ? dq.chan + 2 * x * D : nullptr;
  const float* co = dq.per_chan ? cs + D : nullptr;
  for (int64_t n = n0; n < n1; ++n) {
    if (n >= nk) {
      rows[n] = reinterpret_cast<const char*>(kDecZeroRow);
      continue;
    }
    const char* row = src[n] + x * step[n];
    uint16_t* out = dst + (n - n0) * ldd;
    const float s = dq.per_chan ? 0.f : par[n], o = dq.per_chan ? 0.f : par[TN + n];
    if (kind == DecKind::kI8) {
      if (dq.per_chan) BdDequantRow<DecKind::kI8, true>(row, D, cs, co, s, o, dq.has_off, out);
      else BdDequantRow<DecKind::kI8, false>(row, D, cs, co, s, o, dq.has_off, out);
    } else {
      if (dq.per_chan) BdDequantRow<DecKind::kI4, true>(row, D, cs, co, s, o, dq.has_off, out);
      else BdDequantRow<DecKind::kI4, false>(row, D, cs, co, s, o, dq.has_off, out);
    }
    rows[n] = reinterpret_cast<const char*>(out);
  }
}

// The item's query rows as bf16 into qb [n_hk][R][ldq] (zero past D); false when one holds a
// subnormal or non-finite value (see the top of the file).
inline bool BdPackQuery(const Problem& p, const WorkItem& w, int64_t ldq, uint16_t* qb) {
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group(), R = w.head_rows(), D = p.d_qk;
  const void* base = p.q.Base(b);
  uint32_t bad = 0;
  for (int64_t x = 0; x < w.n_hk; ++x) {
    for (int64_t r = 0; r < R; ++r) {
      uint16_t* dst = qb + (x * R + r) * ldq;
      const int64_t h = (w.hk + x) * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
      const int64_t qo = p.q.Offset(b, h, row, 0);
      if (p.q.sd == 1 && p.q.d_split == 0)
        std::memcpy(dst, static_cast<const uint16_t*>(base) + qo, 2 * D);
      else
        for (int64_t d = 0; d < D; ++d)
          dst[d] = cvt::F32ToBF16(cvt::Load(base, p.q.elem, qo + DOff(p.q, d)));
      for (int64_t d = D; d < ldq; ++d) dst[d] = 0;
      for (int64_t d = 0; d < D; ++d) {
        const uint32_t e = dst[d] & 0x7F80u;
        bad |= e == 0x7F80u || (e == 0 && (dst[d] & 0x7Fu) != 0);
      }
    }
  }
  return bad == 0;
}

// The bf16 query rows qb [rows][ldq] as fp32 for the FMA scores: per 32 channels [16 even |
// 16 odd] (zero past D as qb).
inline void BdSplitQuery(const uint16_t* qb, int64_t rows, int64_t ldq, float* qf) {
  for (int64_t i = 0; i < rows * ldq; i += 32) {
    const __m512i x = _mm512_loadu_si512(qb + i);
    _mm512_storeu_ps(qf + i, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)));
    _mm512_storeu_ps(qf + i + 16, _mm512_castsi512_ps(_mm512_and_si512(
                                      x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))));
  }
}

template <int R, bool DOT>
void BdRun(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out,
           const uint16_t* qb, int64_t ldq, DecKind kk, DecKind vk) {
  constexpr int KB = 16 / R;  // keys per score block
  const int64_t nh = w.n_hk, D = p.d_qk, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);
  ResetRowStates(out, w.rows(), ldv);
  float* st = sc.kt;                                              // [nh][R][TN] scores, then P
  uint16_t* ph = reinterpret_cast<uint16_t*>(st + nh * R * TN);  // [nh][R][TN] bf16 P
  [[maybe_unused]] const uint32_t* pw = reinterpret_cast<const uint32_t*>(ph);
  // int8 / int4 operands: antiquant vectors, then rows dequantized to bf16 (BdScratchFloats).
  float* next = st + nh * R * (TN + TN / 2);
  const void* q = qb;  // the query rows as the products read them
  if constexpr (!DOT) {
    BdSplitQuery(qb, nh * R, ldq, next);
    q = next;
    next += nh * R * ldq;
  }
  const int64_t qstep = DOT ? ldq / 2 : ldq;  // floats per query row
  DecDq kdq, vdq;
  uint16_t *kst = nullptr, *vst = nullptr;
  float *kpar = nullptr, *vpar = nullptr;  // per tile: [nh][2][TN] (BdTileParams)
  const int64_t ldvs = BdStageWords(Dv);
  if (kk != DecKind::kBf16) {
    kdq.Init(p.k.dequant, D, w.hk, nh, next);
    kst = reinterpret_cast<uint16_t*>(next + 2 * nh * D);
    kpar = next + 2 * nh * D + 16 * ldq / 2;
    next = kpar + 2 * nh * TN;
  }
  if (vk != DecKind::kBf16) {
    vdq.Init(p.v.dequant, Dv, w.hk, nh, next);
    vst = reinterpret_cast<uint16_t*>(next + 2 * nh * Dv);
    vpar = next + 2 * nh * Dv + kBdChunk * ldvs / 2;
  }

  // Per tile, token-major (as in the AVX2 kernel): the score blocks of all heads for each KB
  // keys, the softmax of each head, then P V in chunks of kBdChunk keys for all heads.
  const int64_t kbytes = DecBytes(p.k.cache.elem, D), vbytes = DecBytes(p.v.cache.elem, Dv);
  DecTile tiles[2];
  const int64_t tile0 = w.j0 / TN * TN;
  DecResolve(p, w, tile0, &tiles[0]);
  const int64_t klines = nh * ((kbytes + 63) / 64), vlines = nh * ((vbytes + 63) / 64);
  DecPrefetcher pf;  // K of the tile's scores, then its V, then the next tile's K
  pf.hint = DecPrefetcher::Hint::kT1;
  pf.Start(&tiles[0], false, nh, kbytes, 0);
  pf.Issue(kBdAhead * klines, kBdAhead);
  int cur = 0;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN, cur ^= 1) {
    const DecTile& t = tiles[cur];
    DecTile* nt = t0 + TN < w.j1 ? &tiles[cur ^ 1] : nullptr;
    if (nt != nullptr) DecResolve(p, w, t0 + TN, nt);
    const int64_t nk = t.nk;
    if (kk != DecKind::kBf16) BdTileParams(kdq, t.kc, nk, w.hk, nh, kpar);
    if (vk != DecKind::kBf16) BdTileParams(vdq, t.vc, nk, w.hk, nh, vpar);
    // Scores; the key rows kBdAhead tokens ahead, then this tile's first value rows.
    const int64_t kper = (KB * klines + nh - 1) / nh;  // lines per head and score block
    for (int64_t n0 = 0; n0 < nk; n0 += KB) {
      for (int64_t x = 0; x < nh; ++x) {
        if (pf.Done() && !pf.v) pf.Start(&t, true, nh, vbytes, 0);
        pf.Issue(kper, pf.v ? kBdAhead : n0 + KB + kBdAhead);
        const char* kr[kDecMaxKeys];
        if (kk == DecKind::kBf16) {
          for (int64_t n = n0; n < n0 + KB; ++n) kr[n] = t.k[n] + x * t.kstep[n];
        } else {
          BdStageRows(kk, kdq, t.k, t.kstep, BdParams(kdq, kpar, x), nk, x, n0, n0 + KB, D, kst,
                      ldq, kr);
        }
        BdScoreBlock<R, DOT>(static_cast<const float*>(q) + x * R * qstep, ldq, D, kr + n0, n0,
                             st + x * R * TN);
      }
    }
    for (int64_t x = 0; x < nh; ++x)
      BdSoftmax(st + x * R * TN, ph + x * R * TN, R, nk, scale, out.m + x * R, out.l + x * R,
                out.acc + x * R * out.acc_stride, out.acc_stride, ldv);
    // P V; the value rows kBdAhead tokens ahead, then the next tile's first key rows.
    if (pf.t != &t || !pf.v) pf.Start(&t, true, nh, vbytes, 0);
    const int64_t vper = (kBdChunk * vlines + nh - 1) / nh;  // lines per head and chunk
    for (int64_t n0 = 0; n0 < nk; n0 += kBdChunk) {
      const int64_t n1 = std::min(nk, n0 + kBdChunk), n2 = n1 + (n1 - n0) % 2;
      for (int64_t x = 0; x < nh; ++x) {
        if (pf.Done() && pf.v && nt != nullptr) pf.Start(nt, false, nh, kbytes, 0);
        pf.Issue(vper, pf.v ? n1 + kBdAhead : kBdAhead);
        float* acc = out.acc + x * R * out.acc_stride;
        const char* vr[kDecMaxKeys];
        if (vk == DecKind::kBf16) {
          for (int64_t n = n0; n < n2; ++n) vr[n] = t.v[n] + x * t.vstep[n];
        } else {
          BdStageRows(vk, vdq, t.v, t.vstep, BdParams(vdq, vpar, x), nk, x, n0, n2, Dv, vst,
                      ldvs, vr);
        }
#if defined(OPENFIA_DECODE_BF16DOT)
        if constexpr (DOT) {
          BdPv<R>(pw + x * R * TN / 2, st + x * R * TN, vr, n0, n1, n2, Dv, acc,
                  out.acc_stride);
          continue;
        }
#endif
        BdPvFma<R>(st + x * R * TN, vr, n0, n1, Dv, acc, out.acc_stride);
      }
    }
    if (nt != nullptr && (pf.t != nt || pf.v)) {  // a short tile: start the next one's keys
      pf.Start(nt, false, nh, kbytes, 0);
      pf.Issue(kBdAhead * klines, kBdAhead);
    }
  }
  if constexpr (!DOT) BdUnpermute32(out.acc, w.rows(), out.acc_stride, Dv);
}

template <bool DOT>
inline void BdRunRows(const Problem& p, const WorkItem& w, TileScratch& sc,
                      const RowStates& out, const uint16_t* qb, int64_t ldq, DecKind kk,
                      DecKind vk) {
  switch (w.head_rows()) {
    case 1: return BdRun<1, DOT>(p, w, sc, out, qb, ldq, kk, vk);
    case 2: return BdRun<2, DOT>(p, w, sc, out, qb, ldq, kk, vk);
    case 4: return BdRun<4, DOT>(p, w, sc, out, qb, ldq, kk, vk);
    default: return BdRun<8, DOT>(p, w, sc, out, qb, ldq, kk, vk);
  }
}

// Whether every query value of item w is a normal bf16 number or zero (VDPBF16PS would read a
// subnormal as zero; an infinite or NaN query element takes the generic loop's rules).
inline bool BdQueryOk(const Problem& p, const WorkItem& w) {
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group(), R = w.head_rows(), D = p.d_qk;
  const void* base = p.q.Base(b);
  uint32_t bad = 0;
  for (int64_t x = 0; x < w.n_hk; ++x) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t h = (w.hk + x) * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
      const int64_t qo = p.q.Offset(b, h, row, 0);
      for (int64_t d = 0; d < D; ++d) {
        const uint16_t u = cvt::F32ToBF16(cvt::Load(base, p.q.elem, qo + DOff(p.q, d)));
        const uint32_t e = u & 0x7F80u;
        bad |= e == 0x7F80u || (e == 0 && (u & 0x7Fu) != 0);
      }
    }
  }
  return bad == 0;
}

inline bool Bf16DecodeDot() {
#if defined(OPENFIA_DECODE_BF16DOT)
  return Bf16DotTiles();  // VDPBF16PS where it is the faster product (engine/select.cc)
#else
  return false;
#endif
}

// Item-level support of the bf16 decode kernel (nullptr: it runs w).
inline const char* Bf16DecodeItemWhy(const Problem& p, const WorkItem& w) {
  DecKind kk, vk;
  if (!Bf16DecodeCan(p, w, &kk, &vk)) return "not a decode item of the kernel's shapes";
  if (BdScratchFloats(p, w, kk, vk, Bf16DecodeDot()) > TileStageFloats(p))
    return "the item does not fit the scratch";
  if (!BdQueryOk(p, w)) return "a query value that is subnormal, infinite or NaN";
  return nullptr;
}

// Runs item w (Bf16DecodeItemWhy accepted it).
inline void Bf16DecodeRunItem(const Problem& p, const WorkItem& w, TileScratch& sc,
                              const RowStates& out) {
  DecKind kk, vk;
  Bf16DecodeCan(p, w, &kk, &vk);
  const int64_t ldq = BdStageWords(p.d_qk);
  uint16_t* qb = reinterpret_cast<uint16_t*>(sc.q);
  BdPackQuery(p, w, ldq, qb);
#if defined(OPENFIA_DECODE_BF16DOT)
  if (Bf16DecodeDot()) {
    BdRunRows<true>(p, w, sc, out, qb, ldq, kk, vk);
    return;
  }
#endif
  BdRunRows<false>(p, w, sc, out, qb, ldq, kk, vk);
}
