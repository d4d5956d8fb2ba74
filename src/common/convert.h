// openfia internal: inline scalar conversions for the kernels' packing and epilogue loops.
// Bit-exact with common/numeric.h (tests/cpp/test_simd.cc checks them against it); inlined here
// because the tile loops call them per element and the baseline ISA has no F16C.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/problem.h"

namespace openfia::internal::cvt {

// Decoded values of all 256 codes (numeric.cc builds them once from the exhaustively tested
// decoders), so the kernels read fp8 e4m3 / hifloat8 storage with one table lookup.
const float* Fp8E4M3Table();
const float* HiF8Table();

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float BF16ToF32(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }
inline uint16_t F32ToBF16(float f) {
  uint32_t u = Bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return FromBits(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in f32
    const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return FromBits(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest even; overflow -> inf; NaN stays NaN.
inline uint16_t F32ToF16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((a >> 13) & 0x1FFu);
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to inf (and inf itself)
  if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal result, units of 2^-24
    const float v = FromBits(a) * 16777216.f;  // exact scaling by 2^24
    // nearbyint with the default rounding mode (nearest even).
    const float r = std::nearbyint(v);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t m = a + 0xFFFu + ((a >> 13) & 1u);  // round mantissa at bit 13, ties to even
  return sign | static_cast<uint16_t>((m - 0x38000000u) >> 13);
}

inline float RoundToElem(float x, Elem e) {
  switch (e) {
    case Elem::kF16: return F16ToF32(F32ToF16(x));
    case Elem::kBF16: return BF16ToF32(F32ToBF16(x));
    default: return x;
  }
}

// Element idx of storage `base` (f32, f16, bf16, i8, u8, i4, fp8 e4m3, hifloat8) as float.
inline float Load(const void* base, Elem e, int64_t idx) {
  switch (e) {
    case Elem::kF32: return static_cast<const float*>(base)[idx];
    case Elem::kF16: return F16ToF32(static_cast<const uint16_t*>(base)[idx]);
    case Elem::kBF16: return BF16ToF32(static_cast<const uint16_t*>(base)[idx]);
    case Elem::kI8: return static_cast<float>(static_cast<const int8_t*>(base)[idx]);
    case Elem::kU8: return static_cast<float>(static_cast<const uint8_t*>(base)[idx]);
    case Elem::kFP8E4M3: return Fp8E4M3Table()[static_cast<const uint8_t*>(base)[idx]];
    case Elem::kHiF8: return HiF8Table()[static_cast<const uint8_t*>(base)[idx]];
    case Elem::kI4: {
      const uint8_t byte = static_cast<const uint8_t*>(base)[idx >> 1];
      const int nib = (idx & 1) ? (byte >> 4) : (byte & 0xF);
      return static_cast<float>(nib >= 8 ? nib - 16 : nib);
    }
    default: return std::nanf("");
  }
}

// int8 post-quantization: half away from zero, saturate, NaN -> 0.
inline int8_t F32ToI8RoundAwaySat(float f) {
  if (std::isnan(f)) return 0;
  const float r = std::round(f);
  if (r >= 127.f) return 127;
  if (r <= -128.f) return -128;
  return static_cast<int8_t>(r);
}

// Stores v as e (f32/f16/bf16 nearest even; i8 half away from zero, saturated).
inline void Store(void* base, Elem e, int64_t idx, float v) {
  switch (e) {
    case Elem::kF32: static_cast<float*>(base)[idx] = v; break;
    case Elem::kF16: static_cast<uint16_t*>(base)[idx] = F32ToF16(v); break;
    case Elem::kBF16: static_cast<uint16_t*>(base)[idx] = F32ToBF16(v); break;
    case Elem::kI8: static_cast<int8_t*>(base)[idx] = F32ToI8RoundAwaySat(v); break;
    default: break;
  }
}

}  // namespace openfia::internal::cvt
