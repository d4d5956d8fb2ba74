// openfia internal: scalar conversions between storage formats and float, with the rounding
// modes the NPU uses. Exhaustively tested (tests/cpp/test_numeric.cc). Hot loops use the inline
// and vector versions (common/convert.h, the kernels' vector traits); these are the definition
// they are tested against.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "openfia/dtype.h"

namespace openfia::internal {

// IEEE binary16. F32ToF16 rounds to nearest even, overflows to +-inf, keeps NaN a (quiet) NaN.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);
// binary16 with ties rounded away from zero (the NPU's CAST_ROUND).
uint16_t F32ToF16RoundAway(float f);

// bfloat16 (upper half of binary32). F32ToBF16 rounds to nearest even; NaN stays NaN.
float BF16ToF32(uint16_t b);
uint16_t F32ToBF16(float f);

// OCP float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN, max finite 448.
// F32ToFP8E4M3 rounds to nearest even and saturates finite overflow to +-448; NaN -> 0x7F.
float FP8E4M3ToF32(uint8_t x);
uint8_t F32ToFP8E4M3(float f);

// Ascend HiFloat8 (docs/semantics.md 2.5): 0x00 = 0, 0x80 = NaN, 0x6F/0xEF = +-inf, tapered
// precision. F32ToHiF8 picks the nearest representable value (ties to the even code: the one whose
// bit 0 is clear), saturating finite overflow to +-32768; +-inf stays +-inf, NaN -> 0x80, and there
// is no -0 (tiny negatives -> 0x00).
float HiF8ToF32(uint8_t x);
uint8_t F32ToHiF8(float f);
// HiFloat8 as the NPU itself converts (Cast to hifloat8_t with CAST_ROUND, "Half To Away Round";
// the NPU offers no ties-to-even mode for HiFloat8, only this and a stochastic "hybrid" mode):
// nearest value, ties away from zero. |f| >= 40960 (halfway from 32768 to the code 0x6F) and
// +-inf become +-inf, or +-32768 when `saturate`. NaN -> 0x80; magnitudes below 2^-23 -> 0x00.
uint8_t F32ToHiF8RoundAway(float f, bool saturate);

// Element e of packed int4 storage: byte e/2, low nibble for even e, two's complement.
inline int Int4Get(const void* base, int64_t e) {
  const uint8_t byte = static_cast<const uint8_t*>(base)[e >> 1];
  const int nib = (e & 1) ? (byte >> 4) : (byte & 0xF);
  return nib >= 8 ? nib - 16 : nib;
}

// int8 output quantization: round half away from zero, saturate to [-128, 127]; NaN -> 0.
int8_t F32ToI8RoundAwaySat(float f);

// The value x becomes when stored as `e` (f16/bf16: round to nearest even; f32: x).
float RoundTo(float x, Elem e);

// Element `index` of storage `base` of format `e` as float/double (any Elem, int4 included).
float LoadFloat(const void* base, Elem e, int64_t index);
inline double LoadDouble(const void* base, Elem e, int64_t index) {
  return static_cast<double>(LoadFloat(base, e, index));
}
// Stores v as format e at `index`: f32/f16/bf16 round to nearest even, i8 rounds half away
// from zero and saturates. Other formats are not output formats.
void StoreFloat(void* base, Elem e, int64_t index, float v);

// Storage format of a public dtype (kInt32 maps to kI4: the only int32 payload is packed int4).
Elem ElemOf(DType t);
int64_t ElemBits(Elem e);  // 4 for kI4, 8/16/32 otherwise

}  // namespace openfia::internal
