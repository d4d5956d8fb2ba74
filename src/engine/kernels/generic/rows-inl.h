// openfia internal: the epilogue's row helpers on a target's vectors (VectorOps::scale_row and
// ::axpy). Included inside a target's namespace after its V (V::Div, V::StoreBF16, V::StoreF16).
//
// The same IEEE operations per element as the engine's scalar loops (a product, then a
// quotient; a product, then a sum; no contraction) and the rounding of cvt::Store, so a row is
// bitwise the one the scalar loop writes. A 512-channel row costs ~700 cycles in 4-wide baseline
// code (divides and bf16 rounding): a quarter of a 2048-row SparseAttnSharedkv prefill.

// out[d] = acc[d] * factor / denom for d < n, stored as e (float32, bfloat16 or float16);
// false (nothing written) for another dtype.
inline bool ScaleRow(const float* acc, int64_t n, float factor, float denom, Elem e, void* out) {
  constexpr int64_t W = V::kW;
  const typename V::T f = V::Set1(factor), dn = V::Set1(denom);
  const auto at = [&](int64_t d) { return V::Div(V::Mul(V::Load(acc + d), f), dn); };
  int64_t d = 0;
  switch (e) {
    case Elem::kF32: {
      float* dst = static_cast<float*>(out);
      for (; d + W <= n; d += W) V::Store(dst + d, at(d));
      for (; d < n; ++d) dst[d] = acc[d] * factor / denom;
      return true;
    }
    case Elem::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      for (; d + W <= n; d += W) V::StoreBF16(dst + d, at(d));
      for (; d < n; ++d) dst[d] = cvt::F32ToBF16(acc[d] * factor / denom);
      return true;
    }
    case Elem::kF16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      for (; d + W <= n; d += W) V::StoreF16(dst + d, at(d));
      for (; d < n; ++d) dst[d] = cvt::F32ToF16(acc[d] * factor / denom);
      return true;
    }
    default:
      return false;
  }
}

#if defined(__aarch64__)
#define OPENFIA_VREG "+w"  // an FP / SIMD register
#else
#define OPENFIA_VREG "+v"
#endif
// dst[d] += ws * src[d] for d < n (the split merge's weighted sum). The empty asm statements
// keep the compiler from fusing the product and the sum into one FMA (GCC contracts across
// intrinsics and scalar code alike where the target has FMA), which rounds once instead of twice.
inline void Axpy(float ws, const float* src, float* dst, int64_t n) {
  constexpr int64_t W = V::kW;
  const typename V::T w = V::Set1(ws);
  int64_t d = 0;
  for (; d + W <= n; d += W) {
    typename V::T prod = V::Mul(w, V::Load(src + d));
    asm("" : OPENFIA_VREG(prod));
    V::Store(dst + d, V::Add(V::Load(dst + d), prod));
  }
  for (; d < n; ++d) {
    float prod = ws * src[d];
    asm("" : OPENFIA_VREG(prod));
    dst[d] += prod;
  }
}
#undef OPENFIA_VREG
