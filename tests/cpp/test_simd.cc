// SIMD layer: vector exp accuracy, inline conversions, target selection, the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/online_softmax.h"
#include "common/parallel.h"
#include "openfia/error.h"
#include "openfia/runtime.h"
#include "common/convert.h"
#include "kernel_util.h"

namespace openfia::internal {
namespace {
using testing::TargetOps;

// Distance in units in the last place between a float and the exact value.
double UlpError(float got, double exact) {
  if (exact == 0) return got == 0 ? 0 : 1e9;
  int e;
  std::frexp(exact, &e);
  // ulp of the float binade holding `exact` (subnormals: fixed 2^-149).
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(got - exact) / ulp;
}

TEST(SimdExp, FewUlpOverTheSoftmaxRange) {
  for (const char* t : {"scalar", "avx2", "avx512", "avx512bf16", "neon", "neonbf16"}) {
    const VectorOps* k = TargetOps(t);
    if (!k) continue;
    std::vector<float> x, y;
    for (float v = -110.f; v < 89.f; v += 0.0137f) x.push_back(v);
    for (float v = -1.f; v < 1.f; v += 1e-4f) x.push_back(v);
    y.resize(x.size());
    k->exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ex = std::exp(static_cast<double>(x[i]));
      if (ex > std::numeric_limits<float>::max()) {
        EXPECT_TRUE(std::isinf(y[i])) << t << " x=" << x[i];
        continue;
      }
      worst = std::max(worst, UlpError(y[i], ex));
    }
    EXPECT_LE(worst, 3.0) << t;
  }
}

TEST(SimdExp, SpecialValues) {
  for (const char* t : {"scalar", "avx2", "avx512", "avx512bf16", "neon", "neonbf16"}) {
    const VectorOps* k = TargetOps(t);
    if (!k) continue;
    const float inf = std::numeric_limits<float>::infinity();
    float x[5] = {-inf, inf, std::nanf(""), 0.f, -200.f}, y[5];
    k->exp(x, y, 5);
    EXPECT_EQ(y[0], 0.f) << t;
    EXPECT_EQ(y[1], inf) << t;
    EXPECT_TRUE(std::isnan(y[2])) << t;
    EXPECT_EQ(y[3], 1.f) << t;  // exactly: the softmax skips exp(m_old - m_new) when m is unchanged
    EXPECT_EQ(y[4], 0.f) << t;
  }
}

// The softmax probability's exp (x = s - m <= 0): a few ulp where exp(x) >= exp(-86.5), exactly
// 0 below, never a subnormal (a subnormal result costs a microcode assist on some CPUs), NaN
// kept, exp(0) exactly 1.
TEST(SimdExp, ProbabilityExpFewUlpAndNeverSubnormal) {
  for (const char* t : {"scalar", "avx2", "avx512", "avx512bf16", "neon", "neonbf16"}) {
    const VectorOps* k = TargetOps(t);
    if (!k) continue;
    std::vector<float> x, y;
    for (float v = -110.f; v <= 0.f; v += 0.00731f) x.push_back(v);
    for (float v = -1e-3f; v <= 0.f; v += 1e-7f) x.push_back(v);
    for (float v = -86.6f; v <= -86.4f; v += 1e-5f) x.push_back(v);
    x.push_back(-86.5f);
    x.push_back(std::nextafter(-86.5f, 0.f));
    x.push_back(std::nextafter(-86.5f, -100.f));
    y.resize(x.size());
    k->exp_p(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] < -86.5f) {
        EXPECT_EQ(y[i], 0.f) << t << " x=" << x[i];
        continue;
      }
      EXPECT_GE(y[i], std::numeric_limits<float>::min()) << t << " x=" << x[i];
      worst = std::max(worst, UlpError(y[i], std::exp(static_cast<double>(x[i]))));
    }
    EXPECT_LE(worst, 3.0) << t;
    const float inf = std::numeric_limits<float>::infinity();
    float sx[4] = {-inf, std::nanf(""), 0.f, -200.f}, sy[4];
    k->exp_p(sx, sy, 4);
    EXPECT_EQ(sy[0], 0.f) << t;
    EXPECT_TRUE(std::isnan(sy[1])) << t;
    EXPECT_EQ(sy[2], 1.f) << t;
    EXPECT_EQ(sy[3], 0.f) << t;
  }
}

TEST(ScalarConvert, HalfRoundTripsAndRounding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = cvt::F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(cvt::F16ToF32(cvt::F32ToF16(f))));
      continue;
    }
    EXPECT_EQ(cvt::F32ToF16(f), h) << h;
  }
  EXPECT_EQ(cvt::F32ToF16(65519.f), 0x7BFF);
  EXPECT_EQ(cvt::F32ToF16(65520.f), 0x7C00);
  EXPECT_EQ(cvt::F32ToF16(1.f + std::ldexp(1.f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(cvt::F32ToF16(1.f + 3 * std::ldexp(1.f, -11)), 0x3C02);
  EXPECT_EQ(cvt::F32ToF16(std::ldexp(1.f, -25)), 0x0000);       // tie -> even (0)
  EXPECT_EQ(cvt::F32ToF16(std::ldexp(3.f, -25)), 0x0002);
  EXPECT_EQ(cvt::F32ToBF16(1.f + std::ldexp(1.f, -8)), 0x3F80);
  EXPECT_EQ(cvt::F32ToBF16(1.f + 3 * std::ldexp(1.f, -8)), 0x3F82);
  EXPECT_EQ(cvt::F32ToI8RoundAwaySat(2.5f), 3);
  EXPECT_EQ(cvt::F32ToI8RoundAwaySat(-2.5f), -3);
  EXPECT_EQ(cvt::F32ToI8RoundAwaySat(300.f), 127);
  EXPECT_EQ(cvt::F32ToI8RoundAwaySat(-300.f), -128);
  EXPECT_EQ(cvt::F32ToI8RoundAwaySat(std::nanf("")), 0);
  uint8_t i4[2] = {0x8F, 0x71};  // elements: -1, -8, 1, 7
  EXPECT_EQ(cvt::Load(i4, Elem::kI4, 0), -1.f);
  EXPECT_EQ(cvt::Load(i4, Elem::kI4, 1), -8.f);
  EXPECT_EQ(cvt::Load(i4, Elem::kI4, 2), 1.f);
  EXPECT_EQ(cvt::Load(i4, Elem::kI4, 3), 7.f);
}

// The epilogue's vector rows (VectorOps::scale_row / axpy) write bitwise what the engine's
// scalar loops write: acc * factor / denom rounded by cvt::Store, dst += ws * src, for every
// length (the vector body and the tail) and for the values rounding meets: ties, overflow to
// inf, subnormal results, NaNs with payloads, signed zeros.
TEST(SimdRows, ScaleRowAndAxpyMatchTheScalarLoops) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> acc;
  for (float v : {1.f, -1.f, 0.f, -0.f, inf, -inf, 3.4e38f, -3.4e38f, 65504.f, 65520.f, 1e-30f,
                  -1e-40f, 6e-8f, 3e-8f, 1.00390625f, 1.01171875f, 0.333333f, 7.5e-5f})
    acc.push_back(v);
  uint32_t nan_bits[3] = {0x7FC00001u, 0xFFA12345u, 0x7F800001u};  // quiet, signalling payloads
  for (uint32_t b : nan_bits) {
    float f;
    std::memcpy(&f, &b, 4);
    acc.push_back(f);
  }
  uint32_t seed = 12345;
  while (acc.size() < 77) {  // random magnitudes over the float range
    seed = seed * 1664525u + 1013904223u;
    uint32_t b = (seed & 0x807FFFFFu) | (((seed >> 23) % 254 + 1) << 23);
    float f;
    std::memcpy(&f, &b, 4);
    acc.push_back(f);
  }
  const int64_t n_all = static_cast<int64_t>(acc.size());
  int tables = 0;
  for (const char* t : {"scalar", "avx2", "avx512", "avx512bf16", "amx", "neon", "neonbf16"}) {
    const VectorOps* k = TargetOps(t);
    if (!k) continue;
    if (!k->scale_row) {
      EXPECT_EQ(k->axpy, nullptr) << t;
      continue;
    }
    ++tables;
    for (Elem e : {Elem::kF32, Elem::kBF16, Elem::kF16}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{16}, int64_t{33}, n_all}) {
        for (float factor : {1.f, 0.7f, 3.f}) {
          for (float denom : {1.f, 3.f, 1e-3f}) {
            std::vector<uint32_t> got(n, 0xDEADBEEFu), want(n, 0xDEADBEEFu);
            ASSERT_TRUE(k->scale_row(acc.data(), n, factor, denom, e, got.data())) << t;
            for (int64_t d = 0; d < n; ++d) cvt::Store(want.data(), e, d, acc[d] * factor / denom);
            const size_t bytes = static_cast<size_t>(n) * (e == Elem::kF32 ? 4 : 2);
            EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
                << t << " dtype " << static_cast<int>(e) << " n " << n << " factor " << factor
                << " denom " << denom;
            // Nothing past the row is written.
            EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(got.data()) + bytes,
                                  reinterpret_cast<const char*>(want.data()) + bytes,
                                  n * 4 - bytes),
                      0)
                << t;
          }
        }
      }
    }
    int8_t i8[4];
    EXPECT_FALSE(k->scale_row(acc.data(), 4, 1.f, 1.f, Elem::kI8, i8)) << t;
    for (int64_t n : {int64_t{5}, int64_t{16}, n_all}) {
      std::vector<float> got(acc.rbegin(), acc.rbegin() + n), want = got;
      k->axpy(0.37f, acc.data(), got.data(), n);
      for (int64_t d = 0; d < n; ++d) want[d] += 0.37f * acc[d];
      for (int64_t d = 0; d < n; ++d) {
        uint32_t g, w;
        std::memcpy(&g, &got[d], 4);
        std::memcpy(&w, &want[d], 4);
        EXPECT_EQ(g, w) << t << " axpy n " << n << " d " << d << " " << acc[d];
      }
    }
  }
  // The AVX2 target needs AVX2 + FMA + F16C; any x86-64 CPU of the last decade has it.
  if (TargetOps("avx2")) EXPECT_GT(tables, 0);
}

TEST(SimdTarget, CapSelectsAndValidates) {
  const std::string best = SimdTarget();
  SetSimdCap("scalar");
  EXPECT_EQ(SimdTarget(), "scalar");
#if defined(__aarch64__)
  SetSimdCap("avx512");  // another architecture's name caps to the portable target
  EXPECT_EQ(SimdTarget(), "scalar");
  SetSimdCap("neon");
  EXPECT_EQ(SimdTarget(), "neon");
  SetSimdCap("sve");  // no table of its own: the best below it
  EXPECT_EQ(SimdTarget(), TargetOps("neonbf16") ? "neonbf16" : "neon");
#else
  for (const char* arm : {"neon", "neonbf16", "sve"}) {  // another architecture's names cap to
    SetSimdCap(arm);                                       // the portable target
    EXPECT_EQ(SimdTarget(), "scalar") << arm;
  }
#endif
  const std::string before = SimdTarget();
  EXPECT_THROW(SetSimdCap("avx9000"), Error);  // rejected where it is set
  EXPECT_EQ(SimdTarget(), before);               // the cap in effect stays
  SetSimdCap("");
  EXPECT_EQ(SimdTarget(), best);
#if defined(__aarch64__)
  // Every AArch64 CPU has Advanced SIMD; BFDOT where the CPU reports BF16.
  EXPECT_EQ(best, TargetOps("neonbf16") ? "neonbf16" : "neon");
#endif
  if (TargetOps("amx")) EXPECT_EQ(best, "amx");
  else if (TargetOps("avx512bf16")) EXPECT_EQ(best, "avx512bf16");
  else if (TargetOps("avx512")) EXPECT_EQ(best, "avx512");
}

// The avx512bf16 table's dot tiles: on by default only on AMD CPUs (where VDPBF16PS is twice
// the FMA's rate; on the Intel CPUs measured it is half), always when the cap names the target.
TEST(SimdTarget, Bf16DotTilesFollowTheVendorAndTheCap) {
#if defined(__x86_64__)
  SetSimdCap("");
  EXPECT_EQ(Bf16DotTiles(), __builtin_cpu_is("amd") != 0);
  SetSimdCap("avx512bf16");
  EXPECT_TRUE(Bf16DotTiles());
  SetSimdCap("avx512");
  EXPECT_EQ(Bf16DotTiles(), __builtin_cpu_is("amd") != 0);
  SetSimdCap("");
#elif defined(__aarch64__)
  EXPECT_TRUE(Bf16DotTiles());  // BFDOT wherever the neonbf16 target runs (engine/select.cc)
#else
  EXPECT_FALSE(Bf16DotTiles());
#endif
}

TEST(OnlineSoftmax, FinalizeWithAndWithoutSink) {
  RowFinal f;
  EXPECT_FALSE(FinalizeSoftmax(SoftmaxRow{}, 5.f, &f));
  EXPECT_TRUE(std::isinf(f.lse));
  // A huge sink must not overflow: lse = log(e^0 * 1 + e^200) = 200.
  EXPECT_TRUE(FinalizeSoftmax(SoftmaxRow{0.f, 1.f}, 200.f, &f));
  EXPECT_FLOAT_EQ(f.lse, 200.f);
  EXPECT_EQ(f.factor, 0.f);
  // Without a sink: out = acc / l, lse = m + log(l); an empty row is 0 / +inf.
  EXPECT_TRUE(FinalizeSoftmax(SoftmaxRow{2.f, 4.f}, &f));
  EXPECT_EQ(f.factor, 1.f);
  EXPECT_EQ(f.denom, 4.f);
  EXPECT_FLOAT_EQ(f.lse, 2.f + std::log(4.f));
  EXPECT_FALSE(FinalizeSoftmax(SoftmaxRow{}, &f));
  EXPECT_EQ(f.factor, 0.f);
  EXPECT_TRUE(std::isinf(f.lse));
  // A -inf sink is no sink; a NaN sink makes the row NaN.
  EXPECT_TRUE(FinalizeSoftmax(SoftmaxRow{2.f, 4.f}, -INFINITY, &f));
  EXPECT_FLOAT_EQ(f.lse, 2.f + std::log(4.f));
  EXPECT_TRUE(FinalizeSoftmax(SoftmaxRow{2.f, 4.f}, NAN, &f));
  EXPECT_TRUE(std::isnan(f.factor) && std::isnan(f.lse));
}

TEST(Parallel, EveryItemOnceAnyThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    SetNumThreads(threads);
    std::vector<std::atomic<int>> hits(1000);
    std::atomic<int> max_worker{0};
    ParallelFor(1000, [&](int64_t i, int w) {
      hits[i].fetch_add(1);
      int m = max_worker.load();
      while (w > m && !max_worker.compare_exchange_weak(m, w)) {
      }
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    EXPECT_LT(max_worker.load(), threads);
    // Nested calls run inline instead of deadlocking.
    std::atomic<int> inner{0};
    ParallelFor(4, [&](int64_t, int) { ParallelFor(3, [&](int64_t, int) { inner++; }); });
    EXPECT_EQ(inner.load(), 12);
  }
  SetNumThreads(2);
}

}  // namespace
}  // namespace openfia::internal
