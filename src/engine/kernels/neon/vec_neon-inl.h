// openfia internal: AArch64 Advanced SIMD vector traits shared by the neon and neonbf16 targets.
// Included (no include guard) inside each target's own namespace after <arm_neon.h>.
//
// The same operations as the x86 targets per element (the exp, bf16 / f16 rounding bitwise
// cvt::F32ToBF16 / cvt::F32ToF16). Max propagates a NaN of either operand (as
// the scalar target's), which every use tolerates: a NaN score makes its row NaN either way.

struct NeonVec {
  static constexpr int kW = 4;
  using T = float32x4_t;
  static T Zero() { return vdupq_n_f32(0.f); }
  static T Set1(float x) { return vdupq_n_f32(x); }
  static T Load(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, T x) { vst1q_f32(p, x); }
  static T Fma(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static T Mul(T a, T b) { return vmulq_f32(a, b); }
  static T Add(T a, T b) { return vaddq_f32(a, b); }
  static T Sub(T a, T b) { return vsubq_f32(a, b); }
  static T Max(T a, T b) { return vmaxq_f32(a, b); }
  static T Min(T a, T b) { return vminq_f32(a, b); }
  static T Div(T a, T b) { return vdivq_f32(a, b); }
  static float ReduceMax(T a) { return vmaxvq_f32(a); }
  static float ReduceMin(T a) { return vminvq_f32(a); }
  static float ReduceSum(T a) { return vaddvq_f32(a); }

  // exp(x) in every lane, NaN kept: x = n ln2 + r with n the nearest integer to x log2e (from
  // the rounding constant expp::kMagic) and r in two steps, e^r by the degree-6 fit of expp::kC
  // with p(0) = 1, so exp(0) is exactly 1 (the softmax skips exp(m_old - m_new) when m is
  // unchanged). kProb: a softmax probability's exp (x <= 0): 0 below expp::kLo, so no step and
  // no result is subnormal (a subnormal result costs a microcode assist per instruction on some
  // CPUs: the exp of a masked key's -inf ran 2.3x slower per vector), and 2^n is the rounding
  // constant's low bits moved into the exponent. Otherwise any x: 2^n applied in two halves so
  // results down to the subnormal range stay exact, +inf from 88.8 on.
  template <bool kProb = false>
  static inline T Exp(T x) {
    const T magic = vdupq_n_f32(expp::kMagic);
    uint32x4_t keep = vdupq_n_u32(~0u);
    if constexpr (kProb) {
      const T lo = vdupq_n_f32(expp::kLo);
      keep = vmvnq_u32(vcltq_f32(x, lo));  // x >= kLo or NaN
      x = vmaxq_f32(lo, x);                 // NaN kept
    } else {
      x = vminq_f32(vdupq_n_f32(88.8f), vmaxq_f32(vdupq_n_f32(-104.f), x));  // NaN kept
    }
    const T v = vfmaq_f32(magic, x, vdupq_n_f32(expp::kLog2e));  // n + 127 in its low bits
    const T n = vsubq_f32(v, magic);
    T r = vfmsq_f32(x, n, vdupq_n_f32(expp::kLn2Hi));
    r = vfmsq_f32(r, n, vdupq_n_f32(expp::kLn2Lo));
    T p = vdupq_n_f32(expp::kC[0]);
    for (int k = 1; k < 5; ++k) p = vfmaq_f32(vdupq_n_f32(expp::kC[k]), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.f), p, r);
    if constexpr (kProb) {
      const T pow2n = vreinterpretq_f32_s32(vshlq_n_s32(vreinterpretq_s32_f32(v), 23));
      return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(vmulq_f32(p, pow2n)), keep));
    } else {
      const int32x4_t ni = vcvtq_s32_f32(n);  // an integer (a NaN gives 0: p is NaN)
      const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
      const int32x4_t bias = vdupq_n_s32(127);
      const T s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
      const T s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
      return vmulq_f32(vmulq_f32(p, s1), s2);
    }
  }

  static T RoundBF16(T a) {
    const uint32x4_t u = vreinterpretq_u32_f32(a);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFF)), lsb);
    r = vandq_u32(r, vdupq_n_u32(0xFFFF0000u));
    const uint32x4_t nan = vmvnq_u32(vceqq_f32(a, a));  // NaN stays NaN
    return vbslq_f32(nan, a, vreinterpretq_f32_u32(r));
  }
  static T RoundF16(T a) { return vcvt_f32_f16(vcvt_f16_f32(a)); }
  // 4 values stored as bf16 / f16, bitwise cvt::F32ToBF16 / cvt::F32ToF16: round to nearest
  // even; a NaN becomes a quiet NaN with its top payload bits (FCVTN does so for f16).
  static void StoreBF16(uint16_t* p, T a) {
    const uint32x4_t u = vreinterpretq_u32_f32(a), hi = vshrq_n_u32(u, 16);
    const uint32x4_t rne = vshrq_n_u32(
        vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFF)), vandq_u32(hi, vdupq_n_u32(1))), 16);
    const uint32x4_t nan =
        vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7FFFFFFF)), vdupq_n_u32(0x7F800000));
    const uint32x4_t r = vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), rne);
    vst1_u16(p, vmovn_u32(r));
  }
  static void StoreF16(uint16_t* p, T a) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(a))); }
  static T LoadF16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  // 4 int8 / 4 int4 (2 bytes, low nibble first, two's complement) as f32 (antiquant).
  static T LoadI8(const int8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_u32(vdup_n_u32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
  }
  static T LoadI4(const uint8_t* p) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    // Nibble k of w to the top of lane k, then an arithmetic shift back: sign-extended.
    const int32x4_t sh = {28, 24, 20, 16};
    const int32x4_t x = vshlq_s32(vdupq_n_s32(static_cast<int32_t>(w)), sh);
    return vcvtq_f32_s32(vshrq_n_s32(x, 28));
  }
  static T LoadBF16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static inline void Transpose(T* r) {
    const float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    r[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    r[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    r[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
  }
};
