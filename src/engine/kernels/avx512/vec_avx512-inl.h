// openfia internal: AVX-512 vector traits shared by the avx512* targets. Included (no include
// guard) inside each target's own namespace, so every target has its own copy of the inline
// functions, compiled with its flags (no ODR mixing across ISAs), after <immintrin.h>.

struct Avx512Vec {
  static constexpr int kW = 16;
  using T = __m512;
  static T Zero() { return _mm512_setzero_ps(); }
  static T Set1(float x) { return _mm512_set1_ps(x); }
  static T Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, T x) { _mm512_storeu_ps(p, x); }
  static T Fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T Mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T Add(T a, T b) { return _mm512_add_ps(a, b); }
  static T Sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T Max(T a, T b) { return _mm512_max_ps(a, b); }
  static T Min(T a, T b) { return _mm512_min_ps(a, b); }
  static T Div(T a, T b) { return _mm512_div_ps(a, b); }
  static float ReduceMax(T a) { return _mm512_reduce_max_ps(a); }
  static float ReduceMin(T a) { return _mm512_reduce_min_ps(a); }
  static float ReduceSum(T a) { return _mm512_reduce_add_ps(a); }

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
    const T magic = _mm512_set1_ps(expp::kMagic);
    __mmask16 keep = 0xFFFF;
    if constexpr (kProb) {
      const T lo = _mm512_set1_ps(expp::kLo);
      keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // x >= kLo or NaN
      x = _mm512_max_ps(lo, x);                        // the second operand wins: NaN kept
    } else {
      x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.f), x));
    }
    const T v = _mm512_fmadd_ps(x, _mm512_set1_ps(expp::kLog2e), magic);  // n + 127 in low bits
    const T n = _mm512_sub_ps(v, magic);
    T r = _mm512_fnmadd_ps(n, _mm512_set1_ps(expp::kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(expp::kLn2Lo), r);
    T p = _mm512_set1_ps(expp::kC[0]);
    _Pragma("GCC unroll 8") for (int k = 1; k < 5; ++k)
      p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(expp::kC[k]));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    if constexpr (kProb) {
      const T pow2n = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(v), 23));
      return _mm512_maskz_mul_ps(keep, p, pow2n);
    } else {
      const __m512i ni = _mm512_cvtps_epi32(n);
      const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
      const __m512i bias = _mm512_set1_epi32(127);
      const T s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
      const T s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
      return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    }
  }

  static T RoundBF16(T a) {
    const __m512i u = _mm512_castps_si512(a);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    // NaN stays NaN: keep the input where it is NaN.
    const __mmask16 nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, _mm512_castsi512_ps(r), a);
  }
  static T RoundF16(T a) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // 16 values stored as bf16 / f16, bitwise cvt::F32ToBF16 / cvt::F32ToF16: round to nearest
  // even; a NaN becomes a quiet NaN with its top payload bits (VCVTPS2PH does so for f16).
  static void StoreBF16(uint16_t* p, T a) {
    const __m512i u = _mm512_castps_si512(a), hi = _mm512_srli_epi32(u, 16);
    const __m512i rne = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                         _mm512_and_si512(hi, _mm512_set1_epi32(1))),
        16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __m512i r = _mm512_mask_or_epi32(rne, nan, hi, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static void StoreF16(uint16_t* p, T a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static T LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // 16 int8 / 16 int4 (8 bytes, low nibble first, two's complement) as f32 (antiquant).
  static T LoadI8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static T LoadI4(const uint8_t* p) {
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i lo = _mm_srai_epi16(_mm_slli_epi16(w, 12), 12);
    const __m128i hi = _mm_srai_epi16(_mm_slli_epi16(w, 8), 12);
    const __m256i x = _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi));
    return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(x));
  }
  static T LoadBF16(const uint16_t* p) {
    const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
  }

  // Lane r: op over the 16 lanes of v[r], for 16 rows at once (v is overwritten): a transposed
  // reduction tree, 15 shuffle pairs instead of 16 serial in-register reductions. Each row's
  // lanes are paired as _mm512_reduce_*_ps pairs them (i with i + 8, then + 4, + 2, + 1).
  template <typename Op>
  __attribute__((always_inline)) static inline T ReduceRows(T* v, Op op) {
    T w[8], x[4], y[2];
    for (int i = 0; i < 8; ++i)  // lanes 0-1: row 2i (8 partials), lanes 2-3: row 2i + 1
      w[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; ++i)  // lane k: row 4i + k (4 partials)
      x[i] = op(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; ++i)  // lane k: rows 8i + k, 8i + 4 + k (2 partials each)
      y[i] = op(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Element 4k + j holds row 4j + k.
    const T z = op(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                   _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, z);
  }

  // Lane r < 4: op over the 16 lanes of v[r], for 4 rows (v[0..3]; lanes 4-15 unspecified):
  // the lanes paired as ReduceRows pairs them, so each row's result is bitwise ReduceRows'.
  template <typename Op>
  __attribute__((always_inline)) static inline T ReduceRows4(const T* v, Op op) {
    const T t0 = op(_mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const T t1 = op(_mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(3, 2, 3, 2)));
    // 128-bit lane k: row k's four partials (lanes i, i + 4, i + 8, i + 12 combined).
    const T u = op(_mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                   _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    const T x = op(u, _mm512_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
    const T y = op(x, _mm512_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i idx = _mm512_set_epi32(15, 14, 13, 11, 10, 9, 7, 6, 5, 3, 2, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, y);  // lanes 0, 4, 8, 12 to 0-3
  }

  // 16x16 transpose: unpack ps, unpack pd, then two rounds of 128-bit lane shuffles.
  __attribute__((always_inline)) static inline void Transpose(T* r) {
    T t[16], u[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Group g (rows 4g..4g+3): u[4g + k] holds, in 128-bit lane L, rows 4g..4g+3 of column 4L+k.
    for (int g = 0; g < 4; ++g) {
      const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
      const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
      u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
      u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
      u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
      u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int k = 0; k < 4; ++k) {
      const T v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44);
      const T w0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
      const T v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
      const T w1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
      r[k] = _mm512_shuffle_f32x4(v0, w0, 0x88);
      r[4 + k] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
      r[8 + k] = _mm512_shuffle_f32x4(v1, w1, 0x88);
      r[12 + k] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
    }
  }
};

// The dot-product accumulations (VPDPBUSD, VPDPWSSD, VDPBF16PS: acc += a . b) with the
// accumulator tied to its register. Through the intrinsics GCC 12 kept the decode's
// loop-carried accumulators in second registers, copied back and forth around every product
// (two moves per product in the integer score loop, stack spills in the integer P V loop).
__attribute__((always_inline)) inline __m512i DpBusd(__m512i acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}
__attribute__((always_inline)) inline __m512i DpWssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
__attribute__((always_inline)) inline __m512 DpBf16(__m512 acc, __m512bh a, __m512bh b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
