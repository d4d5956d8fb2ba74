// openfia internal: the integer products of the decode kernel (generic/decode-inl.h) on the avx2
// target, for int8 / int4 K and V under bf16 / f16 queries. Included by kernels_avx2.cc inside the
// target's namespace, between generic/decode_base-inl.h and generic/decode-inl.h.
//
// AVX2 has no accumulating dot instruction; VPMADDWD multiplies 16 int16 pairs and sums each
// pair into an int32 lane (16 exact products per instruction, twice an fp32 FMA's 8), and int8 /
// int4 elements widen to int16 in one or two operations where the fp32 products need three.
//   S = Q K^T  each query row q (fp32, per-channel key scales folded in) is sigma qi with 16-bit
//              integers qi of the row's largest magnitude (finer than the query dtype: bf16
//              keeps 8 bits, f16 11); int8 keys sign-extended (VPMOVSXBW), int4 keys' bytes
//              sign-extended to words, each word's low nibble (shifted up 12, arithmetically
//              down 12) an even channel, its high nibble (arithmetically down 4) an odd one (qi
//              packed in the same order), so q . x = sigma (qi . x): an exact integer sum, then
//              one fp32 rounding and the multiply. 4 rows x 2 keys (2 x 4, 1 x 4) of int32
//              partial sums per block, summed across lanes by VPHADDD.
//   P V        each row's probabilities of a tile as 15-bit integers p (DecIntQuantP), against
//              the value pairs (x[n][c], x[n + 1][c]) made from two rows in registers (int8:
//              VPUNPCK{L,H}WD of the widened rows; int4: the rows' bytes interleaved, each
//              nibble sign-extended in place); 4 rows per block, so each pair serves 4 rows; the
//              int32 sums stay in registers for the tile and join the fp32 accumulators in
//              channel order.

// 16-bit query integers: |qi| <= kDecQMax(D) keeps a score's sum of D products with |x| <= 128
// inside int32 (and every VPMADDWD pair too).
inline int32_t DecQMax(int64_t D) {
  return static_cast<int32_t>(std::min<int64_t>(32767, ((int64_t{1} << 31) - 1) / (128 * D)));
}

// Int16 per query row: D rounded up to 32 (an int4 chunk of 32 channels packs its even channels,
// then its odd ones).
inline int64_t DecIntLd(int64_t D) { return (D + 31) / 32 * 32; }

// The integer products' hooks of decode-inl.h.
inline bool DecIntScoresFit(const DecItem& it) {
  return it.qe == Elem::kBF16 || it.qe == Elem::kF16;
}
inline bool DecIntValuesFit(const DecItem& it) {
  return it.qe == Elem::kBF16 || it.qe == Elem::kF16;
}
inline int64_t DecIntQueryBytes(int64_t Rp, int64_t D) { return 2 * Rp * DecIntLd(D); }

// The integer query rows of one head (fp32 qf [Rp][D]) for keys of format kf: qp int16 [Rp][ld]
// (int8: channel order; int4: per 32 channels the 16 even, then the 16 odd, zero past D) and
// sigma[r]; corr stays unwritten (the keys enter the products signed, with no bias to correct).
// False where a row holds a value that is not finite or its scale is not a normal number (the
// caller keeps the fp32 products, which give the reference's NaN / Inf positions).
inline bool DecIntQuery(DecFmt kf, const float* qf, int64_t Rp, int64_t D, void* qpv,
                        float* sigma, int32_t* /*corr*/) {
  int16_t* qp = static_cast<int16_t*>(qpv);
  const int64_t ld = DecIntLd(D);
  const float qmax = static_cast<float>(DecQMax(D));
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < Rp; ++r) {
    const float* q = qf + r * D;
    if (!DecFinite(q, D)) return false;
    __m256 m = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 8)
      m = _mm256_max_ps(m, _mm256_and_ps(abs, _mm256_loadu_ps(q + d)));
    const float mx = Avx2Vec::ReduceMax(m);
    const float inv = mx > 0.f ? qmax / mx : 0.f;
    sigma[r] = mx > 0.f ? mx / qmax : 0.f;
    if (!std::isfinite(inv) || (mx > 0.f && sigma[r] < std::numeric_limits<float>::min()))
      return false;
    int16_t* row = qp + r * ld;
    std::fill(row, row + ld, int16_t{0});
    // 16 channels at a time: v = round(q inv) (VCVTPS2DQ: to nearest even, as nearbyint), int8
    // keys' rows in channel order (VPACKSSDW works per 128-bit lane: VPERMQ puts them in order),
    // int4 keys' even / odd channels placed one by one.
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int64_t d = 0; d < D; d += 16) {  // D is a multiple of 16
      const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(q + d), vinv));
      const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(q + d + 8), vinv));
      if (kf == DecFmt::kI8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + d),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
        continue;
      }
      alignas(32) int32_t v[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v), a);
      _mm256_store_si256(reinterpret_cast<__m256i*>(v + 8), b);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t c = d + i;
        row[c / 32 * 32 + (c % 2) * 16 + (c % 32) / 2] = static_cast<int16_t>(v[i]);
      }
    }
  }
  return true;
}

// The 16 words (int8) or two 16-word halves (int4: even, odd channels) of one key row's chunk of
// 16 / 32 channels from d on; half: an int4 chunk of 16 channels (8 bytes).
__attribute__((always_inline)) inline __m256i DecI8Words(const char* row, int64_t d) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
}
template <bool kHalf>
__attribute__((always_inline)) inline void DecI4Words(const char* row, int64_t d, __m256i* ev,
                                                      __m256i* od) {
  const __m128i b = kHalf ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d / 2))
                          : _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d / 2));
  const __m256i w = _mm256_cvtepi8_epi16(b);
  *ev = _mm256_srai_epi16(_mm256_slli_epi16(w, 12), 12);
  *od = _mm256_srai_epi16(w, 4);
}

// Lane i of the result = the sum of the 8 lanes of a[i], i < N (N = 4: the low 128 bits).
template <int N>
__attribute__((always_inline)) inline __m256i DecHsum(const __m256i* a) {
  if constexpr (N == 8) {
    const __m256i t0 = _mm256_hadd_epi32(a[0], a[1]), t1 = _mm256_hadd_epi32(a[2], a[3]);
    const __m256i t2 = _mm256_hadd_epi32(a[4], a[5]), t3 = _mm256_hadd_epi32(a[6], a[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
  } else {
    const __m256i t0 = _mm256_hadd_epi32(a[0], a[1]), t1 = _mm256_hadd_epi32(a[2], a[3]);
    const __m256i u = _mm256_hadd_epi32(t0, t1);
    return _mm256_castsi128_si256(
        _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
  }
}

// Each row's sigma in the lanes of a block of RB rows x KB keys (lane r KB + k: row r's).
template <int RB, int KB>
inline __m256 DecIntRowSigma(const float* sg) {
  alignas(32) float si[8] = {};
  for (int r = 0; r < RB; ++r)
    for (int k = 0; k < KB; ++k) si[r * KB + k] = sg[r];
  return _mm256_load_ps(si);
}

// s[r * lds + k] = sigma_r (qi_r . x_k) for RB rows (query rows q at stride ldq) and KB
// key rows kr[k] of format F: the accumulators in row order (lane r KB + k), so each row's KB
// scores leave as one store.
template <DecFmt F, int RB, int KB>
__attribute__((always_inline)) inline void DecIntQkBlock(const int16_t* q, int64_t ldq, int64_t D,
                                                         const char* const* kr,
                                                         __m256 sigma,
                                                         float* s, int64_t lds) {
  static_assert(RB * KB == 8 || RB * KB == 4);
  __m256i a[RB * KB];
  OPENFIA_UNROLL
  for (int i = 0; i < RB * KB; ++i) a[i] = _mm256_setzero_si256();
  const auto qv = [&](int r, int64_t d) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + r * ldq + d));
  };
  if constexpr (F == DecFmt::kI8) {
    for (int64_t d = 0; d < D; d += 16) {
      __m256i kv[KB];
      OPENFIA_UNROLL
      for (int k = 0; k < KB; ++k) kv[k] = DecI8Words(kr[k], d);
      OPENFIA_UNROLL
      for (int r = 0; r < RB; ++r) {
        const __m256i x = qv(r, d);
        OPENFIA_UNROLL
        for (int k = 0; k < KB; ++k)
          a[r * KB + k] = _mm256_add_epi32(a[r * KB + k], _mm256_madd_epi16(kv[k], x));
      }
    }
  } else {
    const auto chunk = [&](int64_t d, auto half) {
      __m256i ev[KB], od[KB];
      OPENFIA_UNROLL
      for (int k = 0; k < KB; ++k) DecI4Words<decltype(half)::value>(kr[k], d, &ev[k], &od[k]);
      OPENFIA_UNROLL
      for (int r = 0; r < RB; ++r) {
        const __m256i xe = qv(r, d), xo = qv(r, d + 16);
        OPENFIA_UNROLL
        for (int k = 0; k < KB; ++k)
          a[r * KB + k] = _mm256_add_epi32(
              a[r * KB + k],
              _mm256_add_epi32(_mm256_madd_epi16(ev[k], xe), _mm256_madd_epi16(od[k], xo)));
      }
    };
    int64_t d = 0;
    for (; d + 32 <= D; d += 32) chunk(d, std::false_type{});
    if (d < D) chunk(d, std::true_type{});
  }
  const __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(DecHsum<RB * KB>(a)), sigma);
  const __m128 lo = _mm256_castps256_ps128(sc), hi = _mm256_extractf128_ps(sc, 1);
  if constexpr (KB == 4) {  // RB = 1 or 2: a row per 128 bits
    _mm_storeu_ps(s, lo);
    if constexpr (RB == 2) _mm_storeu_ps(s + lds, hi);
  } else {  // RB = 4, KB = 2: a row per 64 bits
    _mm_storel_pi(reinterpret_cast<__m64*>(s), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + lds), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * lds), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * lds), hi);
  }
}

template <DecFmt F, int RB, int KB>
inline void DecIntQkRows(const DecItem& it, const int16_t* q, const float* sigma,
                         const DecTileRows& t, int64_t x, int64_t r0, float* S, DecPrefetch& pf) {
  const int64_t ld = DecIntLd(it.D);
  const __m256 sg = DecIntRowSigma<RB, KB>(sigma + r0);
  const char* kr[KB];
  for (int64_t n0 = 0; n0 < t.nk; n0 += KB) {
    pf.Tick();
    OPENFIA_UNROLL
    for (int k = 0; k < KB; ++k) {
      const int64_t n = std::min(n0 + k, t.nk - 1);
      kr[k] = t.k[n] + x * t.kstep[n];
    }
    DecIntQkBlock<F, RB, KB>(q + r0 * ld, ld, it.D, kr, sg, S + r0 * kTileKeys + n0, kTileKeys);
  }
}

// S[r][n] = q_r . x_n for the R rows of head x and the tile's keys n < nk (keys past nk read
// key nk - 1; the caller sets their scores): the integer query rows qp of DecIntQuery with sigma;
// the key rows straight from the cache.
template <DecFmt F>
inline void DecIntQkFmt(const DecItem& it, const int16_t* qp, const float* sigma,
                        const DecTileRows& t, int64_t x, float* S, DecPrefetch& pf) {
  if (it.R == 1) return DecIntQkRows<F, 1, 4>(it, qp, sigma, t, x, 0, S, pf);
  if (it.R == 2) return DecIntQkRows<F, 2, 4>(it, qp, sigma, t, x, 0, S, pf);
  // Rows past R in the last group of 4 are zero queries (DecRowsPad).
  for (int64_t r0 = 0; r0 < it.R; r0 += 4)
    DecIntQkRows<F, 4, 2>(it, qp, sigma, t, x, r0, S, pf);
}
inline void DecIntQk(const DecItem& it, const void* qp, const float* sigma,
                     const int32_t* /*corr*/, const DecTileRows& t, int64_t x, float* S,
                     DecPrefetch& pf) {
  const int16_t* q = static_cast<const int16_t*>(qp);
  if (it.ks.fmt == DecFmt::kI8) DecIntQkFmt<DecFmt::kI8>(it, q, sigma, t, x, S, pf);
  else DecIntQkFmt<DecFmt::kI4>(it, q, sigma, t, x, S, pf);
}

// ---- P V ------------------------------------------------------------------------------------

// p[n] = round(P'[n] / sigma) for n < npad (P' = P s, or P when s is null; 0 past the live keys),
// *sigma = max |P'| / 32767 (a value scale may be negative), *sum = sum_n P'[n] o[n] (o null:
// sum_n P'[n]). False, with nothing written, where some P' is not finite or the largest |P'| is
// in (0, kDecPMin): the caller multiplies in fp32. Each p is within sigma / 2 = max |P'| / 65534
// of P': a tile's error is at most 2^-10 max |P'| max |x|, below the rounding of its largest
// probability to bf16 alone.
inline bool DecIntQuantP(const float* P, const float* s, const float* o, int64_t npad, int16_t* p,
                         float* sigma, float* sum) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 mx = _mm256_setzero_ps(), total = _mm256_setzero_ps(), osum = _mm256_setzero_ps();
  for (int64_t n = 0; n < npad; n += 8) {
    __m256 x = _mm256_loadu_ps(P + n);
    if (s != nullptr) x = _mm256_mul_ps(x, _mm256_loadu_ps(s + n));
    mx = _mm256_max_ps(mx, _mm256_and_ps(abs, x));
    total = _mm256_add_ps(total, x);
    osum = o != nullptr ? _mm256_fmadd_ps(x, _mm256_loadu_ps(o + n), osum) : total;
  }
  const float m = Avx2Vec::ReduceMax(mx), t = Avx2Vec::ReduceSum(total);
  const float os = Avx2Vec::ReduceSum(osum);
  if (!std::isfinite(t) || !std::isfinite(os) || (m > 0.f && m < kDecPMin)) return false;
  const __m256 inv = _mm256_set1_ps(m > 0.f ? 32767.f / m : 0.f);
  for (int64_t n = 0; n < npad; n += 8) {
    __m256 x = _mm256_loadu_ps(P + n);
    if (s != nullptr) x = _mm256_mul_ps(x, _mm256_loadu_ps(s + n));
    const __m256i i = _mm256_cvtps_epi32(_mm256_mul_ps(x, inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + n),
                     _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
  }
  *sigma = m / 32767.f;
  *sum = os;
  return true;
}

// acc rows [r0, r0 + RB) += sigma_r sum_n p[r][n] x[n] for NC channels from c0 over the keys
// [0, nk) of a tile: p int16 [R][TN] (0 past nk), value rows vr[0, nk] of format F (vr[nk]: a
// zero row). In registers, the pairs (x[n][c], x[n + 1][c]) VPMADDWD takes against (p[n],
// p[n + 1]): int8 (NC = 32 or 16), per 16 channels VPUNPCKLWD / VPUNPCKHWD of two widened rows
// (channels 0-3 and 8-11 / 4-7 and 12-15); int4 (NC = 16), the two rows' 8 bytes interleaved
// (VPUNPCKLBW) and sign-extended to words, each word's low nibble (shifted up 12, then
// arithmetically down) the even channels' pairs and its high one (down 4) the odd ones'.
template <DecFmt F, int RB, int NC>
__attribute__((always_inline)) inline void DecIntPvBlock(const int16_t* p, int64_t r0,
                                                         const char* const* vr, int64_t nk,
                                                         int64_t c0, const float* sigma,
                                                         float* acc, int64_t lda, DecPrefetch& pf) {
  static_assert(F == DecFmt::kI8 || NC == 16);
  constexpr int NA = NC / 8;  // int32 vectors per row
  constexpr int64_t kRun = 16;
  __m256i a[RB][NA];
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j) a[r][j] = _mm256_setzero_si256();
  for (int64_t n = 0; n < nk; n += 2) {
    if (n % kRun == 0) pf.Tick();
    __m256i pv[NA];
    if constexpr (F == DecFmt::kI8) {
      OPENFIA_UNROLL
      for (int j = 0; j < NC / 16; ++j) {
        const __m256i v0 = DecI8Words(vr[n], c0 + 16 * j), v1 = DecI8Words(vr[n + 1], c0 + 16 * j);
        pv[2 * j] = _mm256_unpacklo_epi16(v0, v1);
        pv[2 * j + 1] = _mm256_unpackhi_epi16(v0, v1);
      }
    } else {
      const __m128i b0 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(vr[n] + c0 / 2));
      const __m128i b1 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(vr[n + 1] + c0 / 2));
      const __m256i w = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(b0, b1));
      pv[0] = _mm256_srai_epi16(_mm256_slli_epi16(w, 12), 12);  // channels 0, 2, ..., 14
      pv[1] = _mm256_srai_epi16(w, 4);                          // channels 1, 3, ..., 15
    }
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) {
      using aint = int __attribute__((may_alias));
      const __m256i pw =
          _mm256_set1_epi32(*reinterpret_cast<const aint*>(p + (r0 + r) * kTileKeys + n));
      OPENFIA_UNROLL
      for (int j = 0; j < NA; ++j)
        a[r][j] = _mm256_add_epi32(a[r][j], _mm256_madd_epi16(pv[j], pw));
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r) {
    const __m256 sg = _mm256_set1_ps(sigma[r0 + r]);
    float* at = acc + (r0 + r) * lda + c0;
    __m256i v[NA];
    if constexpr (F == DecFmt::kI8) {
      OPENFIA_UNROLL
      for (int j = 0; j < NC / 16; ++j) {
        v[2 * j] = _mm256_permute2x128_si256(a[r][2 * j], a[r][2 * j + 1], 0x20);
        v[2 * j + 1] = _mm256_permute2x128_si256(a[r][2 * j], a[r][2 * j + 1], 0x31);
      }
    } else {  // even / odd channels back in order
      const __m256i x0 = _mm256_unpacklo_epi32(a[r][0], a[r][1]);  // 0-3, 8-11
      const __m256i x1 = _mm256_unpackhi_epi32(a[r][0], a[r][1]);  // 4-7, 12-15
      v[0] = _mm256_permute2x128_si256(x0, x1, 0x20);
      v[1] = _mm256_permute2x128_si256(x0, x1, 0x31);
    }
    OPENFIA_UNROLL
    for (int j = 0; j < NA; ++j)
      _mm256_storeu_ps(at + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v[j]), sg,
                                                   _mm256_loadu_ps(at + 8 * j)));
  }
}

// Rows [r0, r0 + RB) over every channel: int8, blocks of 32 channels (with 4 rows: 16, so that
// 8 accumulators hold the block), then a last 16; int4, blocks of 16.
template <DecFmt F, int RB>
inline void DecIntPvRows(const int16_t* p, int64_t r0, const char* const* vr, int64_t nk,
                         int64_t Dv, const float* sigma, float* acc, int64_t lda,
                         DecPrefetch& pf) {
  int64_t c0 = 0;
  if constexpr (F == DecFmt::kI8 && RB <= 2)
    for (; c0 + 32 <= Dv; c0 += 32)
      DecIntPvBlock<F, RB, 32>(p, r0, vr, nk, c0, sigma, acc, lda, pf);
  for (; c0 < Dv; c0 += 16) DecIntPvBlock<F, RB, 16>(p, r0, vr, nk, c0, sigma, acc, lda, pf);
}

template <DecFmt F>
inline void DecIntPvFmt(const DecItem& it, const int16_t* p, const float* sigma,
                        const char* const* vr, int64_t nk, float* acc, int64_t lda,
                        DecPrefetch& pf) {
  int64_t r0 = 0;
  for (; r0 + 4 <= it.R; r0 += 4) DecIntPvRows<F, 4>(p, r0, vr, nk, it.Dv, sigma, acc, lda, pf);
  for (; r0 + 2 <= it.R; r0 += 2) DecIntPvRows<F, 2>(p, r0, vr, nk, it.Dv, sigma, acc, lda, pf);
  if (r0 < it.R) DecIntPvRows<F, 1>(p, r0, vr, nk, it.Dv, sigma, acc, lda, pf);
}

// acc (the R rows of head x, channel order) += sigma P V over the tile's keys: p int16 [R][TN]
// (DecIntQuantP), the value rows straight from the cache.
inline void DecIntPv(const DecItem& it, const int16_t* p, const float* sigma, const DecTileRows& t,
                     int64_t x, float* acc, int64_t lda, DecPrefetch& pf) {
  const char* vr[kTileKeys + 1];
  for (int64_t n = 0; n < t.nk; ++n) vr[n] = t.v[n] + x * t.vstep[n];
  vr[t.nk] = reinterpret_cast<const char*>(kDecZeroRow);
  if (it.vs.fmt == DecFmt::kI4) DecIntPvFmt<DecFmt::kI4>(it, p, sigma, vr, t.nk, acc, lda, pf);
  else DecIntPvFmt<DecFmt::kI8>(it, p, sigma, vr, t.nk, acc, lda, pf);
}
