// openfia internal: the AVX2 operations of the int8 full-quantization kernel
// (attend_fullquant-inl.h FqRun; layouts and the exactness argument are there).
//
// Included by kernels_avx2.cc inside namespace openfia::internal::avx2_target, after
// attend_fullquant-inl.h (V, FqScalarRows, FqPack*Scalar). The AVX-512 tables run full-quant
// items through this kernel too (Avx2FullQuantRun): every AVX-512 CPU has AVX2, and the products
// are integer VPMADDWD either way.
//
//   products  VPMADDWD: 16 int16 products summed pairwise into 8 int32 lanes. Scores: a query
//             word (2 channels) broadcast against 8 keys' words of the same 2 channels (kp),
//             6 rows x 16 keys per block; P8.V: a P8 word (2 keys) broadcast against 8 channels'
//             words of the same 2 keys (vp), 6 rows x 16 channels per block. 12 accumulators.
//   packing   int8 rows widened by VPMOVSXBW, 16 channels at a time; K transposed 8 keys x 8
//             words at once; V's key pairs interleaved by VPUNPCK{L,H}WD.
//   rows      8 keys at a time through F16C conversions (VCVTPS2PH rounds to nearest even, like
//             cvt::F32ToF16, subnormals and overflow included), so every S, E and P8 is bitwise
//             the scalar steps'. exp: FqExpF16 below.

// fp16 of the float lanes (round to nearest even), as floats.
__attribute__((always_inline)) inline __m256 FqF16(__m256 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Bit distance from V::ExpP to glibc's expf that FqExpF16 allows. Measured over every float in
// [-86.5, 0] whose expf is a normal float: at most 1 (below, ExpP is 0 and expf under 2^-126,
// whose fp16 is 0 either way); 4 leaves room for a libm whose expf is off by a few more ulps.
constexpr int kFqExpUlps = 4;

// fp16(expf(x)) in every lane, bitwise: V::ExpP's result y is used where every float within
// kFqExpUlps of y (bit patterns, so across binades too) has the same fp16 as y, which then is
// also expf's; the other lanes (near an fp16 rounding boundary: about 2 x 4 / 8192 of them, and
// NaN) call std::exp. Lanes must hold x <= 0, -inf or NaN (the probabilities' exponents).
__attribute__((always_inline)) inline __m256 FqExpF16(__m256 x) {
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 y = V::template Exp<true>(x);
  const __m256i yb = _mm256_castps_si256(y), w = _mm256_set1_epi32(kFqExpUlps);
  const __m128i h = _mm256_cvtps_ph(y, kRne);
  const __m128i hl = _mm256_cvtps_ph(
      _mm256_castsi256_ps(_mm256_max_epi32(_mm256_sub_epi32(yb, w), _mm256_setzero_si256())), kRne);
  const __m128i hh = _mm256_cvtps_ph(_mm256_castsi256_ps(_mm256_add_epi32(yb, w)), kRne);
  const int same = _mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi16(hl, h), _mm_cmpeq_epi16(hh, h)));
  const __m256 e = _mm256_cvtph_ps(h);
  if (same == 0xFFFF) return e;
  alignas(32) float xs[8], es[8];
  _mm256_store_ps(xs, x);
  _mm256_store_ps(es, e);
  for (int i = 0; i < 8; ++i)
    if ((same >> (2 * i) & 3) != 3) es[i] = F16Round(std::exp(xs[i]));
  return _mm256_load_ps(es);
}

// Lane masks (all ones / zero) of the visible keys n0 .. n0 + 7 of a row: vis (nullptr: all)
// and n < nk.
__attribute__((always_inline)) inline __m256 FqLive(const uint8_t* vis, int64_t n0, int64_t nk) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nk - n0)), lane);
  if (vis != nullptr) {
    int64_t v8;
    std::memcpy(&v8, vis + n0, 8);  // (vis rows are kTileKeys bytes long: n0 + 8 <= TN)
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v8));
    live = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, _mm256_setzero_si256()), live);
  }
  return _mm256_castsi256_ps(live);
}

// S of keys n0 .. n0 + 7 (FqScore's steps, lane by lane).
__attribute__((always_inline)) inline __m256 FqScores8(const int32_t* s, int64_t n0,
                                                       const float* pse, const FqConst& c) {
  __m256 x = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n0)));
  x = _mm256_mul_ps(x, _mm256_set1_ps(c.ds1));
  // std::clamp keeps a NaN: max / min return their second operand when one is NaN.
  x = _mm256_min_ps(_mm256_set1_ps(kFqF16Max), _mm256_max_ps(_mm256_set1_ps(-kFqF16Max), x));
  x = FqF16(_mm256_mul_ps(FqF16(x), _mm256_set1_ps(c.scale16)));
  if (pse != nullptr) x = FqF16(_mm256_add_ps(x, _mm256_loadu_ps(pse + n0)));
  return x;
}

struct FqAvx2Rows {
  // (keep: every lane of each 8 keys is stored, so the kept row is defined up to round_up(nk, 8))
  static float RowMax(const int32_t* s, int64_t nk, const uint8_t* vis, const float* pse,
                      const FqConst& c, float m, uint16_t* keep) {
    const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 vm = ninf, nan = _mm256_setzero_ps();
    for (int64_t n0 = 0; n0 < nk; n0 += 8) {
      const __m256 live = FqLive(vis, n0, nk);
      const __m256 x = FqScores8(s, n0, pse, c);
      if (keep != nullptr)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(keep + n0),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      nan = _mm256_or_ps(nan, _mm256_and_ps(live, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
      vm = _mm256_max_ps(vm, _mm256_blendv_ps(ninf, x, live));
    }
    if (std::isnan(m) || _mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
    return std::max(m, V::ReduceMax(vm));
  }
  static bool RowProbs(const int32_t* s, const uint16_t* sv, int64_t nk, int64_t npad,
                       const uint8_t* vis, const float* pse, const FqConst& c, float m,
                       int64_t* l24, int16_t* p) {
    const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    const __m256 vm = _mm256_set1_ps(m), qs = _mm256_set1_ps(c.qs1_16);
    const __m256 lo = _mm256_set1_ps(-128.f), hi = _mm256_set1_ps(127.f);
    __m256i lsum = _mm256_setzero_si256();  // <= 64 / 8 x 2^24 per lane
    __m256 nan = _mm256_setzero_ps();
    for (int64_t n0 = 0; n0 < npad; n0 += 8) {
      const __m256 live = FqLive(vis, n0, nk);
      const __m256 x = s != nullptr ? FqScores8(s, n0, pse, c)
                                    : _mm256_cvtph_ps(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(sv + n0)));
      // Hidden lanes take exp(-inf) = 0 (and so never the std::exp path).
      const __m256 e = _mm256_and_ps(live, FqExpF16(_mm256_blendv_ps(ninf, _mm256_sub_ps(x, vm), live)));
      const __m256 pq = FqF16(_mm256_mul_ps(e, qs));
      // (A NaN e, only in a live lane, makes pq NaN too.)
      nan = _mm256_or_ps(nan, _mm256_and_ps(live, _mm256_cmp_ps(pq, pq, _CMP_UNORD_Q)));
      // e in [0, 1] a multiple of 2^-24 (NaN lanes: the row is dropped below, lsum unused).
      lsum = _mm256_add_epi32(lsum, _mm256_cvttps_epi32(_mm256_mul_ps(e, _mm256_set1_ps(16777216.f))));
      __m256 r = _mm256_round_ps(pq, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm256_and_ps(live, _mm256_min_ps(hi, _mm256_max_ps(lo, r)));  // (NaN lanes: row dropped)
      const __m256i r32 = _mm256_cvttps_epi32(r);
      const __m128i r16 = _mm_packs_epi32(_mm256_castsi256_si128(r32), _mm256_extracti128_si256(r32, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + n0), r16);
    }
    if (_mm256_movemask_ps(nan) != 0) return false;
    alignas(32) int32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), lsum);
    for (int i = 0; i < 8; ++i) *l24 += t[i];
    return true;
  }
};

// kp from int8 rows of unit channel stride, D a multiple of 16: 8 keys x 16 channels widened,
// then their 8 x 8 words transposed (V::Transpose moves bits only).
inline void FqPackKAvx2(const int8_t* const* rows, int64_t nk, int64_t D, int16_t* kp) {
  const int64_t npad = (nk + 7) / 8 * 8;
  for (int64_t n0 = 0; n0 < npad; n0 += 8)
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = n0 + i < nk ? _mm256_castsi256_ps(_mm256_cvtepi8_epi16(_mm_loadu_si128(
                                 reinterpret_cast<const __m128i*>(rows[n0 + i] + d0))))
                           : _mm256_setzero_ps();
      V::Transpose(r);
      for (int c2 = 0; c2 < 8; ++c2) _mm256_storeu_ps(reinterpret_cast<float*>(kp + ((d0 / 2 + c2) * TN + n0) * 2), r[c2]);
    }
}

// vp from int8 rows of unit channel stride, Dv a multiple of 16 (so dvq == Dv).
inline void FqPackVAvx2(const int8_t* const* rows, int64_t nk, int64_t Dv, int16_t* vp) {
  for (int64_t n2 = 0; n2 < (nk + 1) / 2; ++n2) {
    const int8_t* a = rows[2 * n2];
    const int8_t* b = 2 * n2 + 1 < nk ? rows[2 * n2 + 1] : nullptr;
    int16_t* dst = vp + n2 * Dv * 2;
    for (int64_t d0 = 0; d0 < Dv; d0 += 16) {
      const __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + d0)));
      const __m256i y = b != nullptr ? _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + d0)))
                                     : _mm256_setzero_si256();
      const __m256i lo = _mm256_unpacklo_epi16(x, y), hi = _mm256_unpackhi_epi16(x, y);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * d0), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * d0 + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

// The 32-bit word at p (an int16 pair), broadcast.
__attribute__((always_inline)) inline __m256i FqWord(const int16_t* p) {
  int32_t w;
  std::memcpy(&w, p, 4);
  return _mm256_set1_epi32(w);
}

// The one register block of both products: c[r][8 j + i] (+)= sum over steps k < nk of the
// int16 pair a[r][2 k], a[r][2 k + 1] times the pair in word i of b[k][8 j ..] (VPMADDWD), for
// r < RB, j < NB; a at stride lda int16, b at stride ldb 32-bit words, c at stride ldc. Scores:
// a = query rows, b = kp (steps: channel pairs), c = s; P8.V: a = P8 rows, b = vp (steps: key
// pairs), c = the int32 sums (ACC: added to).
template <int RB, int NB, bool ACC>
__attribute__((always_inline)) inline void FqBlock(const int16_t* a, int64_t lda, const int16_t* b,
                                                   int64_t ldb, int64_t nk, int32_t* c,
                                                   int64_t ldc) {
  __m256i acc[RB][NB];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = ACC ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * ldc + 8 * j))
                      : _mm256_setzero_si256();
  for (int64_t k = 0; k < nk; ++k) {
    __m256i bv[NB];
    for (int j = 0; j < NB; ++j)
      bv[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (k * ldb + 8 * j) * 2));
    for (int r = 0; r < RB; ++r) {
      const __m256i aw = FqWord(a + r * lda + 2 * k);
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(aw, bv[j]));
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NB; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + 8 * j), acc[r][j]);
}

struct FqAvx2Ops : FqAvx2Rows {
  static bool UnitStride(const int64_t* sd, int64_t nk) {
    for (int64_t n = 0; n < nk; ++n)
      if (sd[n] != 1) return false;
    return true;
  }
  static void PackK(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t D,
                    int16_t* kp) {
    if (D % 16 == 0 && UnitStride(sd, nk)) return FqPackKAvx2(rows, nk, D, kp);
    FqPackKScalar(rows, sd, nk, D, kp);
  }
  static void PackV(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t Dv,
                    int64_t dvq, int16_t* vp) {
    if (Dv == dvq && UnitStride(sd, nk)) return FqPackVAvx2(rows, nk, Dv, vp);
    FqPackVScalar(rows, sd, nk, Dv, dvq, vp);
  }
  // Rows in blocks of kRB (12 accumulators: 6 x 2 ran 2.26 VPMADDWD per ns against 1.76-1.97
  // for 4 x 2 and 0.84-1.09 for 3 x 4 / 4 x 4 in a microbenchmark on Zen 4, data in L1), the
  // remainder in one smaller block.
  static constexpr int kRB = 6;
  template <class F>
  static void RowBlocks(int64_t nr, const F& f) {
    int64_t r0 = 0;
    for (; r0 + kRB <= nr; r0 += kRB) f.template operator()<kRB>(r0);
    switch (nr - r0) {
      case 5: f.template operator()<5>(r0); break;
      case 4: f.template operator()<4>(r0); break;
      case 3: f.template operator()<3>(r0); break;
      case 2: f.template operator()<2>(r0); break;
      case 1: f.template operator()<1>(r0); break;
      default: break;
    }
  }
  static void Scores(const int16_t* q, int64_t ldq, int64_t nr, const int16_t* kp, int64_t dq,
                     int64_t npad, int32_t* s) {
    RowBlocks(nr, [&]<int RB>(int64_t r0) {
      int64_t n0 = 0;
      for (; n0 + 16 <= npad; n0 += 16)
        FqBlock<RB, 2, false>(q + r0 * ldq, ldq, kp + 2 * n0, TN, dq / 2, s + r0 * TN + n0, TN);
      if (n0 < npad)
        FqBlock<RB, 1, false>(q + r0 * ldq, ldq, kp + 2 * n0, TN, dq / 2, s + r0 * TN + n0, TN);
    });
  }
  static void Pv(const int16_t* p, int64_t nr, const int16_t* vp, int64_t dvq, int64_t np2,
                 int32_t* acc) {
    RowBlocks(nr, [&]<int RB>(int64_t r0) {
      for (int64_t d0 = 0; d0 < dvq; d0 += 16)  // dvq: a multiple of 16
        FqBlock<RB, 2, true>(p + r0 * TN, TN, vp + 2 * d0, dvq, np2, acc + r0 * dvq + d0, dvq);
    });
  }
};

inline void FqExpF16Array(const float* x, float* y, int64_t n) {
  MapArray(x, y, n, [](__m256 v) { return FqExpF16(v); });
}

inline void FullQuantRun(const Problem& p, const WorkItem& w, TileScratch& sc,
                         const RowStates& out) {
  FqRun<FqAvx2Ops>(p, w, sc, out);
}
