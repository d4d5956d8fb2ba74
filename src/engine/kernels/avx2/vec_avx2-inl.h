// openfia internal: the AVX2 (+ FMA + F16C) vector traits: 8 f32 lanes. Included (no include
// guard) inside the target's namespace after <immintrin.h>, so its inline functions are compiled
// with the target's instructions only there.

struct Avx2Vec {
  static constexpr int kW = 8;
  using T = __m256;
  static T Zero() { return _mm256_setzero_ps(); }
  static T Set1(float x) { return _mm256_set1_ps(x); }
  static T Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, T x) { _mm256_storeu_ps(p, x); }
  static T Fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T Mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T Add(T a, T b) { return _mm256_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T Max(T a, T b) { return _mm256_max_ps(a, b); }
  static T Min(T a, T b) { return _mm256_min_ps(a, b); }
  static T Div(T a, T b) { return _mm256_div_ps(a, b); }
  static float ReduceMax(T a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static float ReduceMin(T a) {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static float ReduceSum(T a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // exp(x) in every lane, NaN kept: x = n ln2 + r with n the nearest integer to x log2e (from
  // the rounding constant expp::kMagic) and r in two steps, e^r by the degree-6 fit of expp::kC
  // with p(0) = 1, so exp(0) is exactly 1 (the softmax skips exp(m_old - m_new) when m is
  // unchanged). kProb: a softmax probability's exp (x <= 0): 0 below expp::kLo, so no step and
  // no result is subnormal (a subnormal result costs a microcode assist per instruction on some
  // CPUs: the exp of a masked key's -inf ran 2.3x slower per vector), and 2^n is the rounding
  // constant's low bits moved into the exponent. Otherwise any x: 2^n applied in two halves so
  // results down to the subnormal range stay exact, +inf from 88.8 on.
  template <bool kProb = false>
  __attribute__((always_inline)) static inline T Exp(T x) {
    const T magic = _mm256_set1_ps(expp::kMagic);
    T keep = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    if constexpr (kProb) {
      const T lo = _mm256_set1_ps(expp::kLo);
      keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);  // x >= kLo or NaN
      x = _mm256_max_ps(lo, x);                   // the second operand wins: NaN kept
    } else {
      x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.f), x));
    }
    const T v = _mm256_fmadd_ps(x, _mm256_set1_ps(expp::kLog2e), magic);  // n + 127 in low bits
    const T n = _mm256_sub_ps(v, magic);
    T r = _mm256_fnmadd_ps(n, _mm256_set1_ps(expp::kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(expp::kLn2Lo), r);
    T p = _mm256_set1_ps(expp::kC[0]);
    _Pragma("GCC unroll 8") for (int k = 1; k < 5; ++k)
      p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(expp::kC[k]));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    if constexpr (kProb) {
      const T pow2n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(v), 23));
      return _mm256_and_ps(_mm256_mul_ps(p, pow2n), keep);
    } else {
      const __m256i ni = _mm256_cvtps_epi32(n);
      const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
      const __m256i bias = _mm256_set1_epi32(127);
      const T s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
      const T s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
      return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    }
  }
  static T RoundBF16(T a) {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    r = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const T nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), a, nan);
  }
  static T RoundF16(T a) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // 8 values stored as bf16 / f16, bitwise cvt::F32ToBF16 / cvt::F32ToF16: round to nearest
  // even; a NaN becomes a quiet NaN with its top payload bits (VCVTPS2PH does so for f16).
  static void StoreBF16(uint16_t* p, T a) {
    const __m256i u = _mm256_castps_si256(a), hi = _mm256_srli_epi32(u, 16);
    const __m256i rne = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)),
                         _mm256_and_si256(hi, _mm256_set1_epi32(1))),
        16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    const __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    // 32-bit lanes holding 16-bit values -> 16 bits each (no saturation can occur).
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  static void StoreF16(uint16_t* p, T a) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static T LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // 8 int8 / 8 int4 (4 bytes, low nibble first, two's complement) as f32 (antiquant).
  static T LoadI8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // Channel 2i is the low nibble of byte i, 2i + 1 the high one. The 4 bytes broadcast to every
  // lane, lane c shifted right by 4c (VPSRLVD) holds channel c's nibble in its low bits, then
  // sign-extended from 4 bits: 5 operations instead of 9 (zero-extend to 16 bits, two shift
  // pairs, unpack, sign-extend to 32).
  static __m256i NibbleLanes(const uint8_t* p) {
    int32_t b;
    std::memcpy(&b, p, 4);
    return _mm256_srlv_epi32(_mm256_set1_epi32(b), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  }
  static T LoadI4(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(NibbleLanes(p), 28), 28));
  }
  static T LoadBF16(const uint16_t* p) {
    const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  }
  __attribute__((always_inline)) static inline void Transpose(T* r) {
    T t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {
      const __m256d t0 = _mm256_castps_pd(t[4 * g]), t1 = _mm256_castps_pd(t[4 * g + 1]);
      const __m256d t2 = _mm256_castps_pd(t[4 * g + 2]), t3 = _mm256_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
      u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
      u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
      u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
    }
    for (int k = 0; k < 4; ++k) {
      r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
      r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
  }
};
