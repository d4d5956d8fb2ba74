// Exhaustive tests of the scalar format conversions in common/numeric.h.
//
// Every decoder is checked on all of its codes against an independent decoding (ldexp of the
// fields, gcc's _Float16 where available, hand tables). Every encoder is checked on all codes
// (round trip), on the exact midpoint between every pair of value-adjacent codes and one binary32
// ulp either side of it, on its overflow/underflow edges, and on a strided sweep over all binary32
// bit patterns against a reference that picks the nearest value from a sorted table in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "common/numeric.h"
#include "native_half.h"
#include "openfia/error.h"

namespace openfia::internal {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// Same float, bit for bit (distinguishes -0 from +0); NaNs compare equal to any NaN.
::testing::AssertionResult SameFloat(float got, float want) {
  if (std::isnan(want) && std::isnan(got)) return ::testing::AssertionSuccess();
  if (Bits(got) == Bits(want)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " (0x" << std::hex << Bits(got)
                                       << "), want " << want << " (0x" << Bits(want) << ")";
}

// (value, code) of every non-negative finite value of a format, sorted by value.
struct Entry {
  double v;
  uint32_t code;
};
using Table = std::vector<Entry>;

Table SortedTable(int ncodes, const std::function<double(uint32_t)>& decode,
                  const std::function<bool(uint32_t)>& include) {
  Table t;
  for (int c = 0; c < ncodes; ++c) {
    const auto code = static_cast<uint32_t>(c);
    if (!include(code)) continue;
    const double v = decode(code);
    if (std::isfinite(v) && v >= 0 && !std::signbit(v)) t.push_back({v, code});
  }
  std::sort(t.begin(), t.end(), [](const Entry& a, const Entry& b) { return a.v < b.v; });
  return t;
}

enum class Tie { kEvenCode, kAway };

// Code of the table value nearest to a >= 0 (a at most half an ulp past the top is the top).
uint32_t Nearest(const Table& t, double a, Tie tie) {
  const auto it = std::lower_bound(t.begin(), t.end(), a,
                                   [](const Entry& e, double v) { return e.v < v; });
  if (it == t.end()) return t.back().code;
  if (it->v == a || it == t.begin()) return it->code;
  const Entry& lo = *(it - 1);
  const Entry& hi = *it;
  const double dlo = a - lo.v, dhi = hi.v - a;  // exact: all values are short dyadics
  if (dlo < dhi) return lo.code;
  if (dhi < dlo) return hi.code;
  if (tie == Tie::kAway) return hi.code;
  return (lo.code & 1) == 0 ? lo.code : hi.code;
}

// Calls fn(f) for ~4.3M binary32 patterns spread over the whole space (both signs, all
// exponents, NaNs and infinities included), plus the exact neighbours of a few edges.
template <typename Fn>
void SweepFloats(Fn fn) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 997) fn(FromBits(static_cast<uint32_t>(u)));
  for (float f : {0.f, -0.f, kInf, -kInf, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min()}) {
    fn(f);
    fn(-f);
  }
}

// The exact midpoint of two floats whose midpoint is representable (asserted).
float Midpoint(float lo, float hi) {
  const double m = (static_cast<double>(lo) + static_cast<double>(hi)) / 2;
  const float mf = static_cast<float>(m);
  EXPECT_EQ(static_cast<double>(mf), m) << lo << " " << hi;
  return mf;
}

// Checks an encoder at the midpoint of every pair of value-adjacent table entries and one
// binary32 ulp either side, for both signs. want_tie(lo, hi) is the code the tie must give.
// neg(code) is the code of the negated value.
void CheckMidpoints(const Table& t, const std::function<uint32_t(float)>& enc,
                    const std::function<float(uint32_t)>& dec,
                    const std::function<uint32_t(uint32_t, uint32_t)>& want_tie,
                    const std::function<uint32_t(uint32_t)>& neg) {
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    const uint32_t lo = t[i].code, hi = t[i + 1].code;
    const float flo = dec(lo), fhi = dec(hi);
    const float mid = Midpoint(flo, fhi);
    const uint32_t tie = want_tie(lo, hi);
    const float below = std::nextafter(mid, 0.f), above = std::nextafter(mid, kInf);
    ASSERT_EQ(enc(mid), tie) << "midpoint " << mid << " between codes " << lo << " and " << hi;
    ASSERT_EQ(enc(below), lo) << below;
    ASSERT_EQ(enc(above), hi) << above;
    ASSERT_EQ(enc(-mid), neg(tie)) << -mid;
    ASSERT_EQ(enc(-below), neg(lo)) << -below;
    ASSERT_EQ(enc(-above), neg(hi)) << -above;
  }
}

// ------------------------------------------------------------------------------------ float16

double RefF16(uint32_t h) {  // fields -> value, by the IEEE definition
  const int exp = static_cast<int>((h >> 10) & 0x1F);
  const int mant = static_cast<int>(h & 0x3FF);
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
  if (exp == 0) return s * std::ldexp(mant, -24);
  return s * std::ldexp(1024 + mant, exp - 25);
}

const Table& F16Table() {
  static const Table t = SortedTable(
      0x8000, RefF16, [](uint32_t) { return true; });
  return t;
}

uint32_t RefF32ToF16(float f, Tie tie) {
  if (std::isnan(f)) return 0x7E00;  // any NaN: callers compare NaN-ness only
  const uint32_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;  // 65504 + half its ulp: ties up (away / even 0x7C00)
  return sign | Nearest(F16Table(), a, tie);
}

TEST(NumericF16, DecodesAllPatterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = F16ToF32(static_cast<uint16_t>(h));
    const double want = RefF16(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
      ASSERT_NE(Bits(got) & 0x400000u, 0u) << "NaN not quiet: " << h;
      continue;
    }
    ASSERT_TRUE(SameFloat(got, static_cast<float>(want))) << "h=0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
#ifdef __FLT16_MAX__
    const NativeHalf native = std::bit_cast<NativeHalf>(static_cast<uint16_t>(h));
    ASSERT_TRUE(SameFloat(got, static_cast<float>(native))) << h;
#endif
  }
}

TEST(NumericF16, RoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto h16 = static_cast<uint16_t>(h);
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    for (uint16_t back : {F32ToF16(F16ToF32(h16)), F32ToF16RoundAway(F16ToF32(h16))}) {
      if (nan) {
        ASSERT_EQ(back & 0x7C00, 0x7C00) << h;
        ASSERT_NE(back & 0x3FF, 0) << "NaN became inf: " << h;
        ASSERT_EQ(back & 0x8000, h & 0x8000) << h;
      } else {
        ASSERT_EQ(back, h16) << h;
      }
    }
  }
}

TEST(NumericF16, NaNStaysNaN) {
  // Payloads only in the low binary32 mantissa bits must not truncate to infinity.
  for (uint32_t payload : {1u, 2u, 0x1FFFu, 0x2000u, 0x3FFFFFu, 0x400000u, 0x7FFFFFu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float nan = FromBits(sign | 0x7F800000u | payload);
      ASSERT_TRUE(std::isnan(nan));
      for (uint16_t h : {F32ToF16(nan), F32ToF16RoundAway(nan)}) {
        EXPECT_EQ(h & 0x7E00, 0x7E00) << "not a quiet NaN: " << payload;  // exp 31 + quiet bit
        EXPECT_EQ((h & 0x8000) << 16, sign);
      }
    }
  }
}

TEST(NumericF16, MidpointsTieToEven) {
  const Table& t = F16Table();
  ASSERT_EQ(t.size(), 0x7C00u);  // 0 .. 65504
  CheckMidpoints(
      t, [](float f) { return static_cast<uint32_t>(F32ToF16(f)); },
      [](uint32_t c) { return F16ToF32(static_cast<uint16_t>(c)); },
      [](uint32_t lo, uint32_t hi) { return (lo & 1) == 0 ? lo : hi; },
      [](uint32_t c) { return c | 0x8000; });
}

TEST(NumericF16, RoundAwayTiesAwayFromZeroElsewhereNearest) {
  CheckMidpoints(
      F16Table(), [](float f) { return static_cast<uint32_t>(F32ToF16RoundAway(f)); },
      [](uint32_t c) { return F16ToF32(static_cast<uint16_t>(c)); },
      [](uint32_t, uint32_t hi) { return hi; }, [](uint32_t c) { return c | 0x8000; });
  // Off the midpoints the two modes agree: SweepMatchesNearestTableAndNative checks both.
}

TEST(NumericF16, OverflowUnderflowAndSignedZero) {
  EXPECT_EQ(F32ToF16(65504.f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.f), 0x7C00);  // midpoint 65504 | 65536: even code is infinity
  EXPECT_EQ(F32ToF16(std::nextafter(65520.f, 0.f)), 0x7BFF);
  EXPECT_EQ(F32ToF16(65536.f), 0x7C00);
  EXPECT_EQ(F32ToF16(-65520.f), 0xFC00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(F32ToF16(kInf), 0x7C00);
  EXPECT_EQ(F32ToF16(-kInf), 0xFC00);
  EXPECT_EQ(F32ToF16RoundAway(65520.f), 0x7C00);
  EXPECT_EQ(F32ToF16RoundAway(std::nextafter(65520.f, 0.f)), 0x7BFF);
  EXPECT_EQ(F32ToF16RoundAway(-kInf), 0xFC00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even) or away to 2^-24.
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);
  EXPECT_EQ(F32ToF16(-0x1p-25f), 0x8000);
  EXPECT_EQ(F32ToF16(std::nextafter(0x1p-25f, 1.f)), 0x0001);
  EXPECT_EQ(F32ToF16RoundAway(0x1p-25f), 0x0001);
  EXPECT_EQ(F32ToF16RoundAway(-0x1p-25f), 0x8001);
  EXPECT_EQ(F32ToF16(0x1p-14f), 0x0400);                   // smallest normal
  EXPECT_EQ(F32ToF16(0x1p-14f - 0x1p-25f), 0x0400);        // tie 0x3FF|0x400 -> even 0x400
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::min()), 0x8000);
  EXPECT_EQ(F32ToF16(0.f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.f), 0x8000);
  EXPECT_EQ(F32ToF16RoundAway(-0.f), 0x8000);
  EXPECT_TRUE(SameFloat(F16ToF32(0x8000), -0.f));
  EXPECT_EQ(F32ToF16(1.f), 0x3C00);
  EXPECT_EQ(F32ToF16(1.f + 0x1p-11f), 0x3C00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(F32ToF16RoundAway(1.f + 0x1p-11f), 0x3C01);
}

TEST(NumericF16, SweepMatchesNearestTableAndNative) {
  SweepFloats([](float f) {
    const uint16_t got = F32ToF16(f), got_away = F32ToF16RoundAway(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(F16ToF32(got)));
      ASSERT_TRUE(std::isnan(F16ToF32(got_away)));
      return;
    }
    ASSERT_EQ(got, RefF32ToF16(f, Tie::kEvenCode)) << f;
    ASSERT_EQ(got_away, RefF32ToF16(f, Tie::kAway)) << f;
#ifdef __FLT16_MAX__
    ASSERT_EQ(got, std::bit_cast<uint16_t>(static_cast<NativeHalf>(f))) << f;
#endif
  });
}

// ----------------------------------------------------------------------------------- bfloat16

double RefBF16(uint32_t b) {
  const int exp = static_cast<int>((b >> 7) & 0xFF);
  const int mant = static_cast<int>(b & 0x7F);
  const double s = (b & 0x8000) ? -1.0 : 1.0;
  if (exp == 255) return mant ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
  if (exp == 0) return s * std::ldexp(mant, -133);
  return s * std::ldexp(128 + mant, exp - 134);
}

const Table& BF16Table() {
  static const Table t = SortedTable(0x8000, RefBF16, [](uint32_t) { return true; });
  return t;
}

TEST(NumericBF16, DecodesAllPatterns) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float got = BF16ToF32(static_cast<uint16_t>(b));
    const double want = RefBF16(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << b;
      continue;
    }
    ASSERT_TRUE(SameFloat(got, static_cast<float>(want))) << b;
    ASSERT_EQ(std::signbit(got), (b & 0x8000) != 0) << b;
  }
}

TEST(NumericBF16, RoundTripsAndNaNQuietness) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto b16 = static_cast<uint16_t>(b);
    const uint16_t back = F32ToBF16(BF16ToF32(b16));
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0) {
      ASSERT_TRUE(std::isnan(BF16ToF32(back))) << b;
      ASSERT_NE(back & 0x40, 0) << "not quiet: " << b;
      ASSERT_EQ(back & 0x8000, b & 0x8000);
    } else {
      ASSERT_EQ(back, b16) << b;
    }
  }
  // Signalling NaNs whose payload lies entirely in the dropped half must stay NaN, not inf.
  for (uint32_t payload : {1u, 0x7FFFu, 0x8000u, 0xFFFFu, 0x3FFFFFu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint16_t b = F32ToBF16(FromBits(sign | 0x7F800000u | payload));
      EXPECT_EQ(b & 0x7FC0, 0x7FC0) << payload;
      EXPECT_EQ(static_cast<uint32_t>(b & 0x8000) << 16, sign);
    }
  }
}

// The AVX2 decode kernel rounds dequantized values to bf16 by Veltkamp's split, c - (c - x) with
// c = x * (2^16 + 1), where it has proved every value is zero or a normal float below 2^111
// (decode_avx2-inl.h, DecFastRange). Over that range the split is F32ToBF16 bit for bit (an
// exhaustive run over all 2^32 patterns found no difference); here every exponent of the range,
// both signs, each of the 128 values of the kept mantissa bits and the dropped bits that decide
// the rounding (0, 1, just below / at / above the midpoint, all ones, and a few others). Below
// it (subnormals) the split rounds to 8 significant bits, not at bf16's fixed bit, and differs;
// above it c overflows.
float VeltkampBf16(float x) {
  volatile float c = x * 65537.f;  // volatile: each operation rounded on its own, no FMA
  volatile float d = c - x;
  return c - d;
}

TEST(NumericBF16, VeltkampSplitRoundsLikeBf16InItsRange) {
  const uint32_t low[] = {0x0000, 0x0001, 0x00FF, 0x1234, 0x7FFF, 0x8000, 0x8001, 0xABCD, 0xFFFF};
  int64_t checked = 0;
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t e = 1; e <= 127 + 110; ++e)  // 2^-126 .. just below 2^111
      for (uint32_t hi = 0; hi < 128; ++hi)
        for (uint32_t lo : low) {
          const float x = FromBits(sign | e << 23 | hi << 16 | lo);
          ASSERT_EQ(std::bit_cast<uint32_t>(VeltkampBf16(x)),
                    static_cast<uint32_t>(F32ToBF16(x)) << 16)
              << std::hex << std::bit_cast<uint32_t>(x);
          ++checked;
        }
  EXPECT_EQ(std::bit_cast<uint32_t>(VeltkampBf16(0.f)), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(VeltkampBf16(-0.f)), 0x80000000u);
  // Outside the range it is not the bf16 rounding: why the kernel checks the range.
  EXPECT_TRUE(std::isnan(VeltkampBf16(0x1p120f)));  // c = inf, inf - inf
  bool subnormal_differs = false;
  for (uint32_t m = 1; m < 0x800000u && !subnormal_differs; m += 0x1001)
    subnormal_differs = std::bit_cast<uint32_t>(VeltkampBf16(FromBits(m))) !=
                        static_cast<uint32_t>(F32ToBF16(FromBits(m))) << 16;
  EXPECT_TRUE(subnormal_differs);
  EXPECT_GT(checked, 500000);
}

TEST(NumericBF16, MidpointsTieToEvenAndOverflow) {
  const Table& t = BF16Table();
  ASSERT_EQ(t.size(), 0x7F80u);
  CheckMidpoints(
      t, [](float f) { return static_cast<uint32_t>(F32ToBF16(f)); },
      [](uint32_t c) { return BF16ToF32(static_cast<uint16_t>(c)); },
      [](uint32_t lo, uint32_t hi) { return (lo & 1) == 0 ? lo : hi; },
      [](uint32_t c) { return c | 0x8000; });
  // Largest bf16 0x7F7F; the midpoint to 2^128 (binary32 bits 0x7F7F8000) carries into inf.
  EXPECT_EQ(F32ToBF16(FromBits(0x7F7F8000u)), 0x7F80);
  EXPECT_EQ(F32ToBF16(FromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(F32ToBF16(FromBits(0xFF7F8000u)), 0xFF80);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(F32ToBF16(kInf), 0x7F80);
  EXPECT_EQ(F32ToBF16(-kInf), 0xFF80);
  EXPECT_EQ(F32ToBF16(-0.f), 0x8000);
  EXPECT_EQ(F32ToBF16(FromBits(0x00008000u)), 0x0000);  // subnormal tie -> even 0
  EXPECT_EQ(F32ToBF16(FromBits(0x00018000u)), 0x0002);  // tie 1|2 -> even 2
  EXPECT_EQ(F32ToBF16(FromBits(0x007FFFFFu)), 0x0080);  // subnormal carries into normal
  EXPECT_EQ(F32ToBF16(1.f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(F32ToBF16(1.f + 3 * 0x1p-8f), 0x3F82);
}

TEST(NumericBF16, SweepMatchesNearestTable) {
  const double inf_threshold = std::ldexp(255.5, 120);  // max bf16 + half its ulp
  SweepFloats([&](float f) {
    const uint16_t got = F32ToBF16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(BF16ToF32(got)));
      return;
    }
    const uint32_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    const uint32_t want = a >= inf_threshold ? (sign | 0x7F80)
                                             : (sign | Nearest(BF16Table(), a, Tie::kEvenCode));
    ASSERT_EQ(got, want) << f;
  });
}

// ------------------------------------------------------------------------------ float8 e4m3fn

double RefE4M3(uint32_t x) {
  const int exp = static_cast<int>((x >> 3) & 0xF);
  const int mant = static_cast<int>(x & 7);
  const double s = (x & 0x80) ? -1.0 : 1.0;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return s * std::ldexp(mant / 8.0, -6);  // 2^-6 * m/8
  return s * std::ldexp(1 + mant / 8.0, exp - 7);
}

const Table& E4M3Table() {
  static const Table t = SortedTable(0x80, RefE4M3, [](uint32_t) { return true; });
  return t;
}

TEST(NumericFP8E4M3, DecodesAllCodes) {
  for (uint32_t x = 0; x < 256; ++x) {
    const float got = FP8E4M3ToF32(static_cast<uint8_t>(x));
    const double want = RefE4M3(x);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << x;
      ASSERT_TRUE((x & 0x7F) == 0x7F) << x;
      continue;
    }
    ASSERT_TRUE(SameFloat(got, static_cast<float>(want))) << x;
  }
  // Hand table.
  EXPECT_EQ(FP8E4M3ToF32(0x7E), 448.f);
  EXPECT_EQ(FP8E4M3ToF32(0xFE), -448.f);
  EXPECT_EQ(FP8E4M3ToF32(0x38), 1.f);
  EXPECT_EQ(FP8E4M3ToF32(0x08), 0x1p-6f);
  EXPECT_EQ(FP8E4M3ToF32(0x07), 0.875f * 0x1p-6f);
  EXPECT_EQ(FP8E4M3ToF32(0x01), 0x1p-9f);
  EXPECT_EQ(FP8E4M3ToF32(0x77), 240.f);  // exp 14, no infinity below 0x7F
  EXPECT_EQ(FP8E4M3ToF32(0x78), 256.f);
  EXPECT_EQ(FP8E4M3ToF32(0x53), 11.f);  // exp 10: 8 * 1.375
  EXPECT_TRUE(SameFloat(FP8E4M3ToF32(0x80), -0.f));
  EXPECT_TRUE(std::isnan(FP8E4M3ToF32(0x7F)));
  EXPECT_TRUE(std::isnan(FP8E4M3ToF32(0xFF)));
  int nans = 0;
  for (int x = 0; x < 256; ++x) nans += std::isnan(FP8E4M3ToF32(static_cast<uint8_t>(x)));
  EXPECT_EQ(nans, 2);
}

TEST(NumericFP8E4M3, RoundTripMidpointsSaturationNaN) {
  for (uint32_t x = 0; x < 256; ++x) {
    if ((x & 0x7F) == 0x7F) continue;
    ASSERT_EQ(F32ToFP8E4M3(FP8E4M3ToF32(static_cast<uint8_t>(x))), x) << x;
  }
  const Table& t = E4M3Table();
  ASSERT_EQ(t.size(), 127u);
  CheckMidpoints(
      t, [](float f) { return static_cast<uint32_t>(F32ToFP8E4M3(f)); },
      [](uint32_t c) { return FP8E4M3ToF32(static_cast<uint8_t>(c)); },
      [](uint32_t lo, uint32_t hi) { return (lo & 1) == 0 ? lo : hi; },
      [](uint32_t c) { return c | 0x80; });
  for (float f : {448.f, std::nextafter(448.f, kInf), 449.f, 464.f, 480.f, 1e6f,
                  std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(F32ToFP8E4M3(f), 0x7E) << f;
    EXPECT_EQ(F32ToFP8E4M3(-f), 0xFE) << f;
  }
  EXPECT_EQ(F32ToFP8E4M3(std::nextafter(448.f, 0.f)), 0x7E);
  EXPECT_EQ(F32ToFP8E4M3(432.f), 0x7E);  // tie 416 (0x7D, odd) | 448 (0x7E)
  EXPECT_EQ(F32ToFP8E4M3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(F32ToFP8E4M3(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(F32ToFP8E4M3(FromBits(0x7F800001u)), 0x7F);
  EXPECT_EQ(F32ToFP8E4M3(0x1p-10f), 0x00);  // tie 0 | 2^-9 -> even 0
  EXPECT_EQ(F32ToFP8E4M3(-0x1p-10f), 0x80);
  EXPECT_EQ(F32ToFP8E4M3(-0.f), 0x80);
  EXPECT_EQ(F32ToFP8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(NumericFP8E4M3, SweepMatchesNearestTable) {
  SweepFloats([](float f) {
    const uint8_t got = F32ToFP8E4M3(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got, 0x7F);
      return;
    }
    const uint32_t sign = std::signbit(f) ? 0x80 : 0;
    ASSERT_EQ(got, sign | Nearest(E4M3Table(), std::fabs(static_cast<double>(f)),
                                  Tie::kEvenCode))
        << f;
  });
}

// ---------------------------------------------------------------------------------- HiFloat8

// Independent decoding of docs/semantics.md 2.5, written from the bit-string view: count the dot
// prefix, then read the exponent field as sign bit + magnitude bits below an implicit one.
double RefHiF8(uint32_t x) {
  if (x == 0x00) return 0.0;
  if (x == 0x80) return std::numeric_limits<double>::quiet_NaN();
  const double s = (x & 0x80) ? -1.0 : 1.0;
  if ((x & 0x7F) == 0x6F) return s * HUGE_VAL;
  const uint32_t r = x & 0x7F;  // 7 bits after the sign
  int w = 0, prefix_len = 0;
  if ((r >> 5) == 3) {
    w = 4, prefix_len = 2;
  } else if ((r >> 5) == 2) {
    w = 3, prefix_len = 2;
  } else if ((r >> 5) == 1) {
    w = 2, prefix_len = 2;
  } else if ((r >> 4) == 1) {
    w = 1, prefix_len = 3;
  } else if ((r >> 3) == 1) {
    w = 0, prefix_len = 4;
  } else {
    return s * std::pow(2.0, static_cast<int>(r & 7) - 23);
  }
  const int mbits = 7 - prefix_len - w;
  const int mant = static_cast<int>(r % (1u << mbits));
  int e = 0;
  if (w > 0) {
    const int field = static_cast<int>((r >> mbits) % (1u << w));
    const bool neg = (field >> (w - 1)) & 1;
    const int mag = (1 << (w - 1)) + field % (1 << (w - 1));
    e = neg ? -mag : mag;
  }
  return s * std::pow(2.0, e) * (1 + static_cast<double>(mant) / (1 << mbits));
}

const Table& HiF8Table() {
  static const Table t = SortedTable(0x80, RefHiF8, [](uint32_t) { return true; });
  return t;
}

TEST(NumericHiF8, DecodesAllCodes) {
  for (uint32_t x = 0; x < 256; ++x) {
    const float got = HiF8ToF32(static_cast<uint8_t>(x));
    const double want = RefHiF8(x);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << x;
      continue;
    }
    ASSERT_TRUE(SameFloat(got, static_cast<float>(want))) << x;
    ASSERT_EQ(static_cast<double>(got), want) << x;  // every value is exact in binary32
  }
  EXPECT_TRUE(SameFloat(HiF8ToF32(0x00), 0.f));
  EXPECT_TRUE(std::isnan(HiF8ToF32(0x80)));
  EXPECT_EQ(HiF8ToF32(0x6F), kInf);
  EXPECT_EQ(HiF8ToF32(0xEF), -kInf);
}

TEST(NumericHiF8, HandComputedCodes) {
  struct Case {
    uint8_t code;
    float value;
  };
  const Case cases[] = {
      {0x01, 0x1p-22f},         // denormal 2^(1-23)
      {0x07, 0x1p-16f},         // denormal 2^(7-23)
      {0x08, 1.f},              // D0 0001 000
      {0x0F, 1.875f},           // D0 0001 111
      {0x10, 2.f},              // D1 001 0 000: E=+1
      {0x18, 0.5f},             // D1 001 1 000: E=-1
      {0x1F, 0.9375f},          // D1 001 1 111: 0.5 * 1.875
      {0x20, 4.f},              // D2 01 00 000: E=+2
      {0x2B, 11.f},             // D2 01 01 011: 8 * 1.375
      {0x38, 0.125f},           // D2 01 11 000: E=-3
      {0x40, 16.f},             // D3 10 000 00: E=+4
      {0x45, 40.f},             // D3 10 001 01: 32 * 1.25
      {0x5F, 1.75f * 0x1p-7f},  // D3 10 111 11: E=-7
      {0x60, 256.f},            // D4 11 0000 0: E=+8
      {0x61, 384.f},            // D4 11 0000 1: 256 * 1.5
      {0x6D, 24576.f},          // D4 11 0110 1: 16384 * 1.5
      {0x6E, 32768.f},          // D4 11 0111 0: E=+15, the largest finite value
      {0x70, 0x1p-8f},          // D4 11 1000 0: E=-8
      {0x7E, 0x1p-15f},         // D4 11 1111 0: E=-15
      {0x7F, 1.5f * 0x1p-15f},  // D4 11 1111 1
      {0xC5, -40.f},
      {0x81, -0x1p-22f},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HiF8ToF32(c.code), c.value) << "code 0x" << std::hex << int{c.code};
    EXPECT_EQ(F32ToHiF8(c.value), c.code) << c.value;
  }
}

TEST(NumericHiF8, RangeCountAndSymmetry) {
  std::set<float> positive;
  float max_finite = 0, min_positive = kInf;
  uint8_t max_code = 0, min_code = 0;
  for (uint32_t x = 1; x < 0x80; ++x) {
    const float v = HiF8ToF32(static_cast<uint8_t>(x));
    const float nv = HiF8ToF32(static_cast<uint8_t>(x | 0x80));
    ASSERT_TRUE(SameFloat(nv, -v)) << x;  // symmetric negatives
    ASSERT_GT(v, 0.f) << x;
    if (!std::isfinite(v)) continue;
    positive.insert(v);
    if (v > max_finite) max_finite = v, max_code = static_cast<uint8_t>(x);
    if (v < min_positive) min_positive = v, min_code = static_cast<uint8_t>(x);
  }
  EXPECT_EQ(positive.size(), 126u);  // all distinct: 127 codes minus +inf
  EXPECT_EQ(max_finite, 32768.f);
  EXPECT_EQ(max_code, 0x6E);
  EXPECT_EQ(min_positive, 0x1p-22f);
  EXPECT_EQ(min_code, 0x01);
}

TEST(NumericHiF8, EncoderRoundTripsMidpointsSaturation) {
  for (uint32_t x = 0; x < 256; ++x) {
    const float v = HiF8ToF32(static_cast<uint8_t>(x));
    if (std::isnan(v)) continue;
    ASSERT_EQ(F32ToHiF8(v), x) << x;  // includes +-inf -> 0x6F/0xEF
  }
  const Table& t = HiF8Table();
  ASSERT_EQ(t.size(), 127u);  // 0 and the 126 positive finite values
  // The tie rule is well defined: value-adjacent codes always differ in bit 0.
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    ASSERT_NE(t[i].code & 1, t[i + 1].code & 1) << t[i].code << " " << t[i + 1].code;
  }
  CheckMidpoints(
      t, [](float f) { return static_cast<uint32_t>(F32ToHiF8(f)); },
      [](uint32_t c) { return HiF8ToF32(static_cast<uint8_t>(c)); },
      [](uint32_t lo, uint32_t hi) { return (lo & 1) == 0 ? lo : hi; },
      [](uint32_t c) { return c == 0 ? 0u : (c | 0x80); });  // no -0: 0x80 is NaN
  // Denormal ties: 1.5 * 2^-22 between 0x01 and 0x02 -> 0x02; 1.5 * 2^-16 -> 0x7E (2^-15).
  EXPECT_EQ(F32ToHiF8(1.5f * 0x1p-22f), 0x02);
  EXPECT_EQ(F32ToHiF8(1.5f * 0x1p-21f), 0x02);
  EXPECT_EQ(F32ToHiF8(1.5f * 0x1p-16f), 0x7E);
  EXPECT_EQ(F32ToHiF8(0x1p-23f), 0x00);
  EXPECT_EQ(F32ToHiF8(std::nextafter(0x1p-23f, 1.f)), 0x01);
  EXPECT_EQ(F32ToHiF8(-0x1p-23f), 0x00);
  EXPECT_EQ(F32ToHiF8(-0.f), 0x00);
  EXPECT_EQ(F32ToHiF8(std::numeric_limits<float>::denorm_min()), 0x00);
  // Normal ties: 1 + 1/16 between 0x08 (1.0) and 0x09 -> 0x08; 1.9375 -> 2.0 (0x10).
  EXPECT_EQ(F32ToHiF8(1.0625f), 0x08);
  EXPECT_EQ(F32ToHiF8(1.9375f), 0x10);
  EXPECT_EQ(F32ToHiF8(0.96875f), 0x08);  // 0.9375 (0x1F) | 1.0 (0x08)
  // Saturation of finite overflow; infinities stay infinite; NaN -> 0x80.
  for (float f : {32768.f, std::nextafter(32768.f, kInf), 40960.f, 49152.f, 65536.f, 1e30f,
                  std::numeric_limits<float>::max()}) {
    EXPECT_EQ(F32ToHiF8(f), 0x6E) << f;
    EXPECT_EQ(F32ToHiF8(-f), 0xEE) << f;
  }
  EXPECT_EQ(F32ToHiF8(28672.f), 0x6E);  // tie 24576 (0x6D) | 32768 (0x6E)
  EXPECT_EQ(F32ToHiF8(kInf), 0x6F);
  EXPECT_EQ(F32ToHiF8(-kInf), 0xEF);
  EXPECT_EQ(F32ToHiF8(std::numeric_limits<float>::quiet_NaN()), 0x80);
  EXPECT_EQ(F32ToHiF8(-std::numeric_limits<float>::quiet_NaN()), 0x80);
  EXPECT_EQ(F32ToHiF8(FromBits(0x7F800001u)), 0x80);
}

TEST(NumericHiF8, SweepMatchesNearestTable) {
  SweepFloats([](float f) {
    const uint8_t got = F32ToHiF8(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got, 0x80);
      return;
    }
    if (std::isinf(f)) {
      ASSERT_EQ(got, f > 0 ? 0x6F : 0xEF);
      return;
    }
    const uint32_t mag = Nearest(HiF8Table(), std::fabs(static_cast<double>(f)), Tie::kEvenCode);
    ASSERT_EQ(got, mag == 0 ? 0u : ((std::signbit(f) ? 0x80u : 0u) | mag)) << f;
  });
}

// The NPU's float -> hifloat8 rule transcribed step by step from the asc-devkit pseudo-code
// ("float转hifloat8_t转换规则", Half To Away Round): a third, structurally different encoder.
// Its denormal branch reads "M_tmp = Ev + 23, Ev = Ev + 1, M = (Ev == -15) ? 0 : M_tmp"; taken
// literally M would keep the old code, so it is read as M = (new Ev) + 23, the next power of two.
uint8_t NpuHiF8(float f, bool saturate) {
  const uint32_t t = Bits(f);
  const uint8_t sign = (t >> 31) ? 0x80 : 0x00;
  const uint32_t mant = t & 0x7FFFFF;
  int ev = static_cast<int>((t >> 23) & 0xFF) - 127;
  const uint8_t overflow = saturate ? 0x6E : 0x6F;
  if (ev == 128 && mant != 0) return 0x80;
  if (ev == 128 || ev > 15) return sign | overflow;
  if (ev < -23) return 0x00;
  if (ev == -23) return sign | 0x01;
  static const std::map<double, uint8_t> code_of = [] {
    std::map<double, uint8_t> m;
    for (int c = 1; c < 0x80; ++c) m[RefHiF8(static_cast<uint32_t>(c))] = static_cast<uint8_t>(c);
    return m;
  }();
  double value = 0;
  if (ev <= -16) {
    const bool ta = (mant >> 22) & 1;
    if (ta) ++ev;
    value = std::ldexp(1.0, ev);
  } else {
    const int a = ev < 0 ? -ev : ev;
    const int mbits = a <= 3 ? 3 : a <= 7 ? 2 : 1;
    uint32_t m = mant >> (23 - mbits);
    const bool ta = (mant >> (22 - mbits)) & 1;
    if (ta && ++m == (1u << mbits)) ++ev, m = 0;
    if (ev == 16 || (ev == 15 && m == 1)) return sign | overflow;  // {15, 1} encodes 0x6F
    value = std::ldexp(1.0 + static_cast<double>(m) / (1 << mbits), ev);
  }
  return sign | code_of.at(value);
}

TEST(NumericHiF8, RoundAwayIsTheNpuRule) {
  for (uint32_t x = 0; x < 256; ++x) {
    const float v = HiF8ToF32(static_cast<uint8_t>(x));
    if (std::isnan(v)) continue;
    ASSERT_EQ(F32ToHiF8RoundAway(v, false), x) << x;
    const uint32_t sat = (x & 0x7F) == 0x6F ? (x & 0x80) | 0x6E : x;
    ASSERT_EQ(F32ToHiF8RoundAway(v, true), sat) << x;
  }
  for (bool saturate : {false, true}) {
    CheckMidpoints(
        HiF8Table(),
        [&](float f) { return static_cast<uint32_t>(F32ToHiF8RoundAway(f, saturate)); },
        [](uint32_t c) { return HiF8ToF32(static_cast<uint8_t>(c)); },
        [](uint32_t, uint32_t hi) { return hi; },
        [](uint32_t c) { return c == 0 ? 0u : (c | 0x80); });
  }
  // Where the two HiFloat8 encoders differ: ties at even-coded lower neighbours.
  EXPECT_EQ(F32ToHiF8RoundAway(1.0625f, true), 0x09);
  EXPECT_EQ(F32ToHiF8(1.0625f), 0x08);
  EXPECT_EQ(F32ToHiF8RoundAway(1.5f * 0x1p-21f, true), 0x03);
  EXPECT_EQ(F32ToHiF8(1.5f * 0x1p-21f), 0x02);
  EXPECT_EQ(F32ToHiF8RoundAway(0x1p-23f, true), 0x01);
  EXPECT_EQ(F32ToHiF8RoundAway(-0x1p-23f, true), 0x81);
  EXPECT_EQ(F32ToHiF8RoundAway(std::nextafter(0x1p-23f, 0.f), true), 0x00);
  EXPECT_EQ(F32ToHiF8RoundAway(-0.f, false), 0x00);
  EXPECT_EQ(F32ToHiF8RoundAway(28672.f, false), 0x6E);  // tie 24576 | 32768
  // Overflow at 40960, halfway from 32768 to the code 0x6F.
  EXPECT_EQ(F32ToHiF8RoundAway(std::nextafter(40960.f, 0.f), false), 0x6E);
  for (float f : {40960.f, 49152.f, 65536.f, 1e30f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(F32ToHiF8RoundAway(f, false), 0x6F) << f;
    EXPECT_EQ(F32ToHiF8RoundAway(-f, false), 0xEF) << f;
    EXPECT_EQ(F32ToHiF8RoundAway(f, true), 0x6E) << f;
    EXPECT_EQ(F32ToHiF8RoundAway(-f, true), 0xEE) << f;
  }
  EXPECT_EQ(F32ToHiF8RoundAway(std::numeric_limits<float>::quiet_NaN(), true), 0x80);
  EXPECT_EQ(F32ToHiF8RoundAway(FromBits(0xFF800001u), false), 0x80);
}

TEST(NumericHiF8, RoundAwaySweepMatchesNearestTableAndNpuRule) {
  SweepFloats([](float f) {
    for (bool saturate : {false, true}) {
      const uint8_t got = F32ToHiF8RoundAway(f, saturate);
      ASSERT_EQ(got, NpuHiF8(f, saturate)) << f << " " << saturate;
      if (std::isnan(f)) continue;
      const uint32_t sign = std::signbit(f) ? 0x80u : 0u;
      const double a = std::fabs(static_cast<double>(f));
      uint32_t want = 0;
      if (a >= 40960.0) {
        want = sign | (saturate ? 0x6Eu : 0x6Fu);
      } else {
        const uint32_t mag = Nearest(HiF8Table(), a, Tie::kAway);
        want = mag == 0 ? 0u : (sign | mag);
      }
      ASSERT_EQ(got, want) << f;
    }
  });
}

// --------------------------------------------------------------------------- int4, int8, misc

TEST(NumericInt4, AllBytesBothNibbles) {
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    const int lo = b % 16, hi = b / 16;
    EXPECT_EQ(Int4Get(&byte, 0), lo < 8 ? lo : lo - 16) << b;
    EXPECT_EQ(Int4Get(&byte, 1), hi < 8 ? hi : hi - 16) << b;
  }
  const uint8_t buf[3] = {0x7F, 0x80, 0xE1};
  const int want[6] = {-1, 7, 0, -8, 1, -2};
  for (int e = 0; e < 6; ++e) {
    EXPECT_EQ(Int4Get(buf, e), want[e]) << e;
    EXPECT_EQ(LoadFloat(buf, Elem::kI4, e), static_cast<float>(want[e])) << e;
  }
}

TEST(NumericInt8, RoundHalfAwayAndSaturate) {
  const struct {
    float in;
    int out;
  } cases[] = {{0.f, 0},       {-0.f, 0},      {0.5f, 1},       {-0.5f, -1},    {1.5f, 2},
               {2.5f, 3},      {-2.5f, -3},    {-1.5f, -2},     {126.5f, 127},  {127.5f, 127},
               {-127.5f, -128}, {-128.5f, -128}, {127.f, 127},   {-128.f, -128}, {128.f, 127},
               {-129.f, -128}, {1e10f, 127},   {-1e10f, -128},  {kInf, 127},    {-kInf, -128},
               {0.49999997f, 0}, {-0.49999997f, 0}, {2.4999998f, 2}, {0.7f, 1}, {-126.4f, -126}};
  for (const auto& c : cases) EXPECT_EQ(F32ToI8RoundAwaySat(c.in), c.out) << c.in;
  EXPECT_EQ(F32ToI8RoundAwaySat(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(F32ToI8RoundAwaySat(-std::numeric_limits<float>::quiet_NaN()), 0);
  // Every quarter step over [-200, 200] against floor(|x| + 1/2), signed and clamped.
  for (int q = -800; q <= 800; ++q) {
    const double x = q / 4.0;
    const double r = std::copysign(std::floor(std::fabs(x) + 0.5), x);
    EXPECT_EQ(F32ToI8RoundAwaySat(static_cast<float>(x)),
              static_cast<int>(std::clamp(r, -128.0, 127.0)))
        << x;
  }
}

TEST(NumericElem, ElemOfAndBits) {
  EXPECT_EQ(ElemOf(DType::kFloat32), Elem::kF32);
  EXPECT_EQ(ElemOf(DType::kFloat16), Elem::kF16);
  EXPECT_EQ(ElemOf(DType::kBFloat16), Elem::kBF16);
  EXPECT_EQ(ElemOf(DType::kInt8), Elem::kI8);
  EXPECT_EQ(ElemOf(DType::kUInt8), Elem::kU8);
  EXPECT_EQ(ElemOf(DType::kInt32), Elem::kI4);
  EXPECT_EQ(ElemOf(DType::kFloat8E4M3), Elem::kFP8E4M3);
  EXPECT_EQ(ElemOf(DType::kHiFloat8), Elem::kHiF8);
  for (DType t : {DType::kBool, DType::kInt64, DType::kUInt64}) {
    EXPECT_THROW(ElemOf(t), Error) << DTypeName(t);
  }
  EXPECT_EQ(ElemBits(Elem::kF32), 32);
  EXPECT_EQ(ElemBits(Elem::kF16), 16);
  EXPECT_EQ(ElemBits(Elem::kBF16), 16);
  EXPECT_EQ(ElemBits(Elem::kI8), 8);
  EXPECT_EQ(ElemBits(Elem::kI4), 4);
  EXPECT_EQ(ElemBits(Elem::kU8), 8);
  EXPECT_EQ(ElemBits(Elem::kFP8E4M3), 8);
  EXPECT_EQ(ElemBits(Elem::kHiF8), 8);
}

TEST(NumericElem, RoundToEveryElem) {
  const float x = 1.f + 0x1p-11f + 0x1p-20f;  // just above an f16 tie
  EXPECT_EQ(RoundTo(x, Elem::kF32), x);
  EXPECT_EQ(RoundTo(x, Elem::kF16), F16ToF32(0x3C01));
  EXPECT_EQ(RoundTo(1.f + 0x1p-11f, Elem::kF16), 1.f);
  EXPECT_EQ(RoundTo(1.f + 0x1p-8f, Elem::kBF16), 1.f);
  EXPECT_EQ(RoundTo(1.f + 0x1p-8f + 0x1p-20f, Elem::kBF16), 1.f + 0x1p-7f);
  EXPECT_EQ(RoundTo(70000.f, Elem::kF16), kInf);
  EXPECT_EQ(RoundTo(2.5f, Elem::kI8), 3.f);
  EXPECT_EQ(RoundTo(-300.f, Elem::kI8), -128.f);
  EXPECT_EQ(RoundTo(7.5f, Elem::kI4), 7.f);
  EXPECT_EQ(RoundTo(-8.5f, Elem::kI4), -8.f);
  EXPECT_EQ(RoundTo(-2.5f, Elem::kI4), -3.f);
  EXPECT_EQ(RoundTo(254.5f, Elem::kU8), 255.f);
  EXPECT_EQ(RoundTo(-1.f, Elem::kU8), 0.f);
  EXPECT_EQ(RoundTo(500.f, Elem::kFP8E4M3), 448.f);
  EXPECT_EQ(RoundTo(17.f, Elem::kFP8E4M3), 16.f);   // tie 16 (even) | 18
  EXPECT_EQ(RoundTo(1e5f, Elem::kHiF8), 32768.f);
  EXPECT_EQ(RoundTo(1.0625f, Elem::kHiF8), 1.f);
  for (Elem e : {Elem::kF32, Elem::kF16, Elem::kBF16, Elem::kFP8E4M3, Elem::kHiF8}) {
    EXPECT_TRUE(std::isnan(RoundTo(std::numeric_limits<float>::quiet_NaN(), e)));
  }
  for (Elem e : {Elem::kI8, Elem::kI4, Elem::kU8}) {
    EXPECT_EQ(RoundTo(std::numeric_limits<float>::quiet_NaN(), e), 0.f);
  }
}

TEST(NumericElem, LoadStoreEveryElem) {
  const float values[] = {0.f, 1.f, -2.5f, 3.25f, 100.f, -0.001f, 7.f, -8.f};
  const Elem elems[] = {Elem::kF32, Elem::kF16, Elem::kBF16, Elem::kI8,
                        Elem::kI4,  Elem::kU8,  Elem::kFP8E4M3, Elem::kHiF8};
  for (Elem e : elems) {
    alignas(8) unsigned char buf[64];
    std::fill(std::begin(buf), std::end(buf), 0xA5);  // stores must not depend on old bytes
    for (int i = 0; i < 8; ++i) StoreFloat(buf, e, i, values[i]);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(LoadFloat(buf, e, i), RoundTo(values[i], e)) << static_cast<int>(e) << " " << i;
      EXPECT_EQ(LoadDouble(buf, e, i), static_cast<double>(RoundTo(values[i], e)));
    }
    // Nothing past the 8 elements was touched.
    const int64_t used = 8 * ElemBits(e) / 8;
    for (int64_t b = used; b < 64; ++b) ASSERT_EQ(buf[b], 0xA5) << static_cast<int>(e);
  }
  // Byte-exact storage layouts.
  unsigned char buf[8] = {};
  StoreFloat(buf, Elem::kF16, 1, 1.f);
  EXPECT_EQ(buf[2], 0x00);
  EXPECT_EQ(buf[3], 0x3C);  // little-endian 0x3C00
  StoreFloat(buf, Elem::kBF16, 0, -2.f);
  EXPECT_EQ(buf[0], 0x00);
  EXPECT_EQ(buf[1], 0xC0);  // 0xC000
  StoreFloat(buf, Elem::kI4, 9, -1.f);  // high nibble of byte 4
  StoreFloat(buf, Elem::kI4, 8, 3.f);   // low nibble of byte 4
  EXPECT_EQ(buf[4], 0xF3);
  StoreFloat(buf, Elem::kI8, 5, -3.f);
  EXPECT_EQ(buf[5], 0xFD);
  EXPECT_EQ(LoadFloat(buf, Elem::kI8, 5), -3.f);
  StoreFloat(buf, Elem::kU8, 6, 200.f);
  EXPECT_EQ(LoadFloat(buf, Elem::kU8, 6), 200.f);
  // Every code of the byte formats loads as its decoder says.
  for (int c = 0; c < 256; ++c) {
    const unsigned char byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(SameFloat(LoadFloat(&byte, Elem::kFP8E4M3, 0), FP8E4M3ToF32(byte)));
    EXPECT_TRUE(SameFloat(LoadFloat(&byte, Elem::kHiF8, 0), HiF8ToF32(byte)));
    EXPECT_EQ(LoadFloat(&byte, Elem::kI8, 0), static_cast<float>(static_cast<int8_t>(byte)));
    EXPECT_EQ(LoadFloat(&byte, Elem::kU8, 0), static_cast<float>(c));
  }
}

}  // namespace
}  // namespace openfia::internal
