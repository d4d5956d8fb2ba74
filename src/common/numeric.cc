// openfia internal: scalar format conversions (see numeric.h). Plain portable C++: all bit work is
// on unsigned integers obtained with std::bit_cast, so no shift or overflow here is UB.
#include "common/numeric.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace openfia::internal {
namespace {

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32InfBits = 0x7F800000u;

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// m / 2^shift rounded to an integer, ties to even (or away from zero). shift may be any
// non-negative count; m < 2^24 so a shift of 32 or more always gives 0 (m / 2^shift < 1/2^8).
uint32_t RoundShift(uint32_t m, int shift, bool ties_away) {
  if (shift == 0) return m;
  if (shift >= 32) return 0;
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((uint32_t{1} << shift) - 1);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rem > half || (rem == half && (ties_away || (q & 1)))) return q + 1;
  return q;
}

// Rounds the finite magnitude with binary32 bits `ax` (sign cleared) to a binary format with
// `mbits` stored mantissa bits and minimum normal exponent `emin`, gradual underflow and an
// unbounded exponent range above. Returns the magnitude code (biased exponent << mbits | mantissa,
// where biased exponent 0 is the subnormal range). Exponent overflow is left to the caller: a
// code at or past the format's infinity/NaN encoding means the value is too large.
//
// The rounded significand includes the implicit bit, so adding it to (exponent - emin) << mbits
// yields the code directly, and a round-up carry into the next binade is handled for free.
uint32_t RoundMagnitude(uint32_t ax, int mbits, int emin, bool ties_away) {
  if (ax == 0) return 0;
  const int biased = static_cast<int>(ax >> 23);
  uint32_t m = ax & 0x7FFFFFu;
  int e = -126;  // unbiased exponent of binary32 subnormals
  if (biased != 0) {
    m |= 0x800000u;
    e = biased - 127;
  }
  // value = m * 2^(e - 23).
  if (e >= emin) {
    const uint32_t q = RoundShift(m, 23 - mbits, ties_away);  // in [2^mbits, 2^(mbits+1)]
    return q + (static_cast<uint32_t>(e - emin) << mbits);
  }
  // Below the normal range the quantum is 2^(emin - mbits).
  return RoundShift(m, 23 - mbits + (emin - e), ties_away);
}

uint16_t F32ToF16Impl(float f, bool ties_away) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x & kF32SignMask) >> 16);
  const uint32_t ax = x & kF32AbsMask;
  if (ax > kF32InfBits) {
    // Quiet NaN; keep the top payload bits as hardware conversions do.
    return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 2^16 (or inf)
  const uint32_t code = RoundMagnitude(ax, 10, -14, ties_away);
  // [65520, 65536) rounds up into exponent 31: exactly the infinity code.
  return static_cast<uint16_t>(sign | (code >= 0x7C00u ? 0x7C00u : code));
}

// HiFloat8 exponent sub-formats. The dot prefix selects the exponent field width w; the exponent
// field is sign-magnitude with an implicit leading one (|E| = 2^(w-1) + low bits), so each width
// covers |E| in [2^(w-1), 2^w - 1] and the mantissa gets the bits the prefix and exponent leave.
struct HiF8Fmt {
  uint8_t prefix;  // code bits of the dot prefix (already in place)
  int w;           // exponent field width (0 for D0)
  int mbits;       // mantissa width
};
HiF8Fmt HiF8FmtForExponent(int abs_e) {
  if (abs_e >= 8) return {0x60, 4, 1};  // D4: 11 eeee m
  if (abs_e >= 4) return {0x40, 3, 2};  // D3: 10 eee mm
  if (abs_e >= 2) return {0x20, 2, 3};  // D2: 01 ee mmm
  if (abs_e == 1) return {0x10, 1, 3};  // D1: 001 e mmm
  return {0x08, 0, 3};                  // D0: 0001 mmm
}

// Magnitude code of 2^e * (1 + mant / 2^mbits) for e in [-15, 15].
uint8_t HiF8NormalCode(int e, uint32_t mant) {
  const int abs_e = e < 0 ? -e : e;
  const HiF8Fmt fmt = HiF8FmtForExponent(abs_e);
  uint32_t field = 0;
  if (fmt.w > 0) {
    // Positive E stores E - 2^(w-1) (top bit 0); negative E stores |E| (top bit 1).
    field = e > 0 ? static_cast<uint32_t>(e - (1 << (fmt.w - 1))) : static_cast<uint32_t>(abs_e);
  }
  return static_cast<uint8_t>(fmt.prefix | (field << fmt.mbits) | mant);
}

constexpr uint8_t kHiF8Max = 0x6E;      // 2^15 = 32768
constexpr uint8_t kHiF8PosInf = 0x6F;
constexpr uint8_t kHiF8NaN = 0x80;

}  // namespace

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {
    // Inf, or NaN made quiet (as F16C and the NPU's vector conversion do).
    return FromBits(sign | kF32InfBits | (mant != 0 ? 0x400000u : 0u) | (mant << 13));
  }
  if (exp == 0) {
    // Subnormal or zero: mant * 2^-24 is exact in binary32.
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return FromBits(sign | Bits(mag));
  }
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t F32ToF16(float f) { return F32ToF16Impl(f, false); }
uint16_t F32ToF16RoundAway(float f) { return F32ToF16Impl(f, true); }

float BF16ToF32(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

uint16_t F32ToBF16(float f) {
  const uint32_t x = Bits(f);
  const uint32_t ax = x & kF32AbsMask;
  if (ax > kF32InfBits) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  // bfloat16 has binary32's exponent range, so rounding the low 16 bits is the whole job; a
  // carry out of the mantissa bumps the exponent, up to the infinity code for the top binade.
  const uint32_t q = RoundShift(ax, 16, false);
  return static_cast<uint16_t>(((x & kF32SignMask) >> 16) | q);
}

float FP8E4M3ToF32(uint8_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t exp = (x >> 3) & 0xFu;
  const uint32_t mant = x & 0x7u;
  if (exp == 0xF && mant == 0x7) return FromBits(sign | 0x7FC00000u);  // S.1111.111: NaN
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 0x1p-9f;  // 2^-6 * m/8
    return FromBits(sign | Bits(mag));
  }
  return FromBits(sign | ((exp + 120u) << 23) | (mant << 20));
}

uint8_t F32ToFP8E4M3(float f) {
  const uint32_t x = Bits(f);
  const uint8_t sign = static_cast<uint8_t>((x & kF32SignMask) >> 24);
  const uint32_t ax = x & kF32AbsMask;
  if (ax > kF32InfBits) return 0x7F;
  // Saturating conversion (the NPU's and CUDA's satfinite): everything past 448, infinity
  // included, becomes +-448. Values below 448 never round past it (448 = code 0x7E is reached
  // before the NaN code 0x7F).
  if (ax >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // |f| >= 448
  return static_cast<uint8_t>(sign | RoundMagnitude(ax, 3, -6, false));
}

float HiF8ToF32(uint8_t x) {
  if (x == 0x00) return 0.f;
  if (x == kHiF8NaN) return std::bit_cast<float>(0x7FC00000u);
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  if ((x & 0x7Fu) == kHiF8PosInf) return FromBits(sign | kF32InfBits);
  const uint32_t dot = (x >> 3) & 0xFu;
  int w = 0;
  int mbits = 3;
  if (dot >= 12) {
    w = 4, mbits = 1;
  } else if (dot >= 8) {
    w = 3, mbits = 2;
  } else if (dot >= 4) {
    w = 2, mbits = 3;
  } else if (dot >= 2) {
    w = 1, mbits = 3;
  } else if (dot == 1) {
    w = 0, mbits = 3;
  } else {
    // Denormal: 2^((x & 7) - 23), x & 7 in [1, 7] (0 is the zero / NaN special).
    const int e = static_cast<int>(x & 7u) - 23;
    return FromBits(sign | (static_cast<uint32_t>(e + 127) << 23));
  }
  const uint32_t mant = x & ((1u << mbits) - 1u);
  int e = 0;
  if (w > 0) {
    const uint32_t field = (static_cast<uint32_t>(x) >> mbits) & ((1u << w) - 1u);
    const int top = 1 << (w - 1);
    const int f = static_cast<int>(field);
    e = f >= top ? -f : f + top;
  }
  // 2^e * (1 + mant / 2^mbits) with e in [-15, 15]: a normal binary32.
  return FromBits(sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << (23 - mbits)));
}

namespace {

// Nearest HiFloat8 value of f (see F32ToHiF8 / F32ToHiF8RoundAway for ties and overflow).
// `overflow` is the magnitude code for |f| >= the overflow threshold and for +-inf.
uint8_t F32ToHiF8Impl(float f, bool ties_away, uint8_t overflow) {
  const uint32_t x = Bits(f);
  const uint8_t sign = static_cast<uint8_t>((x & kF32SignMask) >> 24);
  const uint32_t ax = x & kF32AbsMask;
  if (ax > kF32InfBits) return kHiF8NaN;
  if (ax == kF32InfBits) return static_cast<uint8_t>(sign | overflow);
  if (ax >= 0x47000000u) {  // |f| >= 32768 = 2^15
    // Ties to even: the next code up (0x6F) is infinity, so the format saturates. Ties away
    // (the NPU): 0x6F is 49152 as far as rounding goes, so from the midpoint 40960 on the result
    // is the overflow code.
    if (ties_away && ax >= 0x47200000u) return static_cast<uint8_t>(sign | overflow);
    return static_cast<uint8_t>(sign | kHiF8Max);
  }
  // 2^-23 is halfway from 0 to the smallest value 2^-22; there is no -0 (0x80 is NaN).
  constexpr uint32_t kTwoPowMinus23 = 0x34000000u;
  if (ax < kTwoPowMinus23 || (ax == kTwoPowMinus23 && !ties_away)) return 0x00;
  const int e = static_cast<int>(ax >> 23) - 127;  // |f| >= 2^-23 is a binary32 normal
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
  uint8_t mag = 0;
  if (e >= -15) {
    const int mbits = HiF8FmtForExponent(e < 0 ? -e : e).mbits;
    const uint32_t q = RoundShift(m, 23 - mbits, ties_away);  // in [2^mbits, 2^(mbits+1)]
    // A carry into the next binade (e + 1 <= 15 since |f| < 2^15) gives mantissa 0 there, which
    // every sub-format can hold, whatever its mantissa width.
    mag = (q >> (mbits + 1)) != 0 ? HiF8NormalCode(e + 1, 0)
                                  : HiF8NormalCode(e, q - (uint32_t{1} << mbits));
  } else if (e == -23) {
    mag = 0x01;  // [2^-23, 2^-22): nearer to 2^-22 than to 0 (or the tie, rounded away)
  } else {
    // e in [-22, -16]: between the powers of two 2^e (code e + 23) and 2^(e+1) (code e + 24, or
    // 0x7E for 2^-15); the midpoint is 1.5 * 2^e.
    const uint8_t lo = static_cast<uint8_t>(e + 23);
    const uint8_t hi = e == -16 ? HiF8NormalCode(-15, 0) : static_cast<uint8_t>(e + 24);
    constexpr uint32_t kOneAndHalf = 0xC00000u;
    if (m > kOneAndHalf) {
      mag = hi;
    } else if (m < kOneAndHalf) {
      mag = lo;
    } else {
      mag = (ties_away || (lo & 1u) != 0) ? hi : lo;
    }
  }
  return static_cast<uint8_t>(sign | mag);
}

}  // namespace

// Nearest HiFloat8 value; a tie goes to the EVEN CODE, i.e. the candidate whose code has bit 0
// clear. Bit 0 is the last mantissa bit in every sub-format (and the last bit of the denormal
// exponent), and any two value-adjacent codes differ in it: inside a binade they are consecutive
// mantissas; across a binade boundary the lower one has an all-ones mantissa (odd) and the upper
// one mantissa 0 (even); 0 (0x00) neighbours 2^-22 (0x01); 2^-16 (0x07) neighbours 2^-15 (0x7E).
// So for the normal range this is ordinary round-half-even on the mantissa, and in the denormal
// range (powers of two 2^-22..2^-16) it picks the even (x & 7). Finite overflow saturates to
// +-32768; +-inf stays +-inf; NaN -> 0x80; both zeros and everything that rounds to zero -> 0x00
// (the format has no -0: 0x80 is NaN).
uint8_t F32ToHiF8(float f) { return F32ToHiF8Impl(f, false, kHiF8PosInf); }

// The NPU's rule (asc-devkit docs, Reg Cast.md, "float转hifloat8_t转换规则", Half To Away Round):
// values below 2^-23 -> 0; [2^-23, 2^-22) -> 2^-22; in the denormal range round up when the top
// mantissa bit is set (>= 1.5 * 2^e); elsewhere add the first dropped mantissa bit, carrying
// into the exponent; exponent > 15 (or the code 0x6F) is infinity, then optionally saturated.
// That is exactly nearest-ties-away over the values, with 0x6F weighing 49152.
uint8_t F32ToHiF8RoundAway(float f, bool saturate) {
  return F32ToHiF8Impl(f, true, saturate ? kHiF8Max : kHiF8PosInf);
}

int8_t F32ToI8RoundAwaySat(float f) {
  if (std::isnan(f)) return 0;
  if (f >= 127.f) return 127;
  if (f <= -128.f) return -128;
  return static_cast<int8_t>(std::round(f));  // std::round: half away from zero, exact
}

namespace {

// Integer formats that are not outputs still get a defined rounding (half away from zero,
// saturating, NaN -> 0) so that RoundTo/StoreFloat are total over Elem.
int RoundAwaySat(float f, int lo, int hi) {
  if (std::isnan(f)) return 0;
  if (f >= static_cast<float>(hi)) return hi;
  if (f <= static_cast<float>(lo)) return lo;
  return static_cast<int>(std::round(f));
}

}  // namespace

float RoundTo(float x, Elem e) {
  switch (e) {
    case Elem::kF32: return x;
    case Elem::kF16: return F16ToF32(F32ToF16(x));
    case Elem::kBF16: return BF16ToF32(F32ToBF16(x));
    case Elem::kI8: return static_cast<float>(F32ToI8RoundAwaySat(x));
    case Elem::kI4: return static_cast<float>(RoundAwaySat(x, -8, 7));
    case Elem::kU8: return static_cast<float>(RoundAwaySat(x, 0, 255));
    case Elem::kFP8E4M3: return FP8E4M3ToF32(F32ToFP8E4M3(x));
    case Elem::kHiF8: return HiF8ToF32(F32ToHiF8(x));
  }
  Fail(ErrorCode::kInternal, "elem", "unknown storage format", Str(static_cast<int>(e)));
}

float LoadFloat(const void* base, Elem e, int64_t index) {
  const auto* p = static_cast<const unsigned char*>(base);
  switch (e) {
    case Elem::kF32: {
      float v;
      std::memcpy(&v, p + index * 4, sizeof v);
      return v;
    }
    case Elem::kF16:
    case Elem::kBF16: {
      uint16_t v;
      std::memcpy(&v, p + index * 2, sizeof v);
      return e == Elem::kF16 ? F16ToF32(v) : BF16ToF32(v);
    }
    case Elem::kI8: return static_cast<float>(static_cast<int8_t>(p[index]));
    case Elem::kI4: return static_cast<float>(Int4Get(base, index));
    case Elem::kU8: return static_cast<float>(p[index]);
    case Elem::kFP8E4M3: return FP8E4M3ToF32(p[index]);
    case Elem::kHiF8: return HiF8ToF32(p[index]);
  }
  Fail(ErrorCode::kInternal, "elem", "unknown storage format", Str(static_cast<int>(e)));
}

void StoreFloat(void* base, Elem e, int64_t index, float v) {
  auto* p = static_cast<unsigned char*>(base);
  switch (e) {
    case Elem::kF32:
      std::memcpy(p + index * 4, &v, sizeof v);
      return;
    case Elem::kF16:
    case Elem::kBF16: {
      const uint16_t h = e == Elem::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(p + index * 2, &h, sizeof h);
      return;
    }
    case Elem::kI8:
      p[index] = static_cast<unsigned char>(F32ToI8RoundAwaySat(v));
      return;
    case Elem::kI4: {
      // Read-modify-write of one nibble: the other element of the byte is kept.
      const auto nib = static_cast<unsigned>(RoundAwaySat(v, -8, 7)) & 0xFu;
      unsigned char& byte = p[index >> 1];
      byte = (index & 1) ? static_cast<unsigned char>((byte & 0x0Fu) | (nib << 4))
                         : static_cast<unsigned char>((byte & 0xF0u) | nib);
      return;
    }
    case Elem::kU8:
      p[index] = static_cast<unsigned char>(RoundAwaySat(v, 0, 255));
      return;
    case Elem::kFP8E4M3:
      p[index] = F32ToFP8E4M3(v);
      return;
    case Elem::kHiF8:
      p[index] = F32ToHiF8(v);
      return;
  }
  Fail(ErrorCode::kInternal, "elem", "unknown storage format", Str(static_cast<int>(e)));
}

Elem ElemOf(DType t) {
  switch (t) {
    case DType::kFloat32: return Elem::kF32;
    case DType::kFloat16: return Elem::kF16;
    case DType::kBFloat16: return Elem::kBF16;
    case DType::kInt8: return Elem::kI8;
    case DType::kUInt8: return Elem::kU8;
    case DType::kInt32: return Elem::kI4;
    case DType::kFloat8E4M3: return Elem::kFP8E4M3;
    case DType::kHiFloat8: return Elem::kHiF8;
    case DType::kBool:
    case DType::kInt64:
    case DType::kUInt64:
      break;
  }
  Fail(ErrorCode::kInternal, "dtype", "has no element storage format",
       std::string(DTypeName(t)));
}

int64_t ElemBits(Elem e) {
  switch (e) {
    case Elem::kF32: return 32;
    case Elem::kF16:
    case Elem::kBF16: return 16;
    case Elem::kI4: return 4;
    case Elem::kI8:
    case Elem::kU8:
    case Elem::kFP8E4M3:
    case Elem::kHiF8: return 8;
  }
  Fail(ErrorCode::kInternal, "elem", "unknown storage format", Str(static_cast<int>(e)));
}

}  // namespace openfia::internal

namespace openfia::internal::cvt {

// Tables for common/convert.h (built on first use; static initialization is thread-safe).
template <float (*Decode)(uint8_t)>
const float* DecodeTable() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = Decode(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

const float* Fp8E4M3Table() { return DecodeTable<FP8E4M3ToF32>(); }
const float* HiF8Table() { return DecodeTable<HiF8ToF32>(); }

}  // namespace openfia::internal::cvt
