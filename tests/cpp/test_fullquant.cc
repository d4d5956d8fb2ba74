// int8 full quantization on the engine (attend_fullquant-inl.h, fullquant_avx2-inl.h): every
// step is exact or the reference's rounding, so every target's output must be bitwise the
// reference's, for any thread count; and the AVX2 kernel's vector exp must round to fp16
// exactly as expf does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine_check.h"
#include "openfia/openfia.h"
#include "common/convert.h"
#include "kernel_util.h"
#include "test_arena.h"

namespace openfia::internal {
namespace {
using testing::TargetOps;

float F16(float x) { return cvt::RoundToElem(x, Elem::kF16); }

uint32_t Bits(float x) { return cvt::Bits(x); }

// Inputs around every fp16 rounding boundary of exp's results in [2^-25, 1] (the exponents of
// those midpoints, +-6 ulps), a dense sweep of [-30, 0] and the special values.
std::vector<float> ExpInputs() {
  std::vector<float> x;
  for (uint32_t h = 1; h < 0x3C00u; ++h) {  // fp16 values 2^-24 .. 1 - 2^-11
    const double lo = cvt::F16ToF32(static_cast<uint16_t>(h - 1));
    const double hi = cvt::F16ToF32(static_cast<uint16_t>(h));
    const float x0 = static_cast<float>(std::log(0.5 * (lo + hi)));
    for (int k = -6; k <= 6; ++k) x.push_back(cvt::FromBits(Bits(x0) + k));  // x0 < 0
  }
  for (uint32_t u = 0x80000000u; u <= Bits(-30.f); u += 61) x.push_back(cvt::FromBits(u));
  for (float v : {0.f, -0.f, -1e-30f, -1e-7f, -86.5f, -87.4f, -103.9f, -104.f, -105.f, -1e30f,
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  return x;
}

TEST(FullQuant, VectorExpRoundsToF16LikeExpf) {
  const std::vector<float> x = ExpInputs();
  std::vector<float> y(x.size());
  if (!Avx2FullQuantExpF16(x.data(), y.data(), static_cast<int64_t>(x.size())))
    GTEST_SKIP() << "no AVX2 on this CPU";
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = F16(std::exp(x[i]));
    const bool ok = std::isnan(want) ? std::isnan(y[i]) : Bits(y[i]) == Bits(want);
    if (!ok && bad++ < 8)
      ADD_FAILURE() << "x = " << x[i] << " (0x" << std::hex << Bits(x[i]) << std::dec
                    << "): " << y[i] << ", fp16(expf) = " << want;
  }
  EXPECT_EQ(bad, 0);
  // The vector exp itself (V::ExpP, the AVX2 table's exp_p entry) stays within 1 ulp of expf
  // where expf is a normal float: FqExpF16 relies on a margin of kFqExpUlps = 4 around it.
  std::vector<float> e(x.size());
  TargetOps("avx2")->exp_p(x.data(), e.data(), static_cast<int64_t>(x.size()));
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::isnan(want) || want < std::numeric_limits<float>::min()) continue;
    worst = std::max<int64_t>(worst, std::abs(static_cast<int64_t>(Bits(e[i])) - Bits(want)));
  }
  EXPECT_LE(worst, 1);
}

// ---- whole calls through the public API: engine (every target, 1 and 2 threads) vs reference

using testutil::Arena;

struct FqSpec {
  int64_t B = 1, N = 4, KVN = 2, S = 19, KVS = 150, D = 32;
  int qamp = 64, kamp = 64;   // |q|, |k| <= amp (int8)
  float ds1 = 0x1.3p-9f, qs1 = 127.f, ds2 = 0x1p-13f;
  double scale = 0.0;         // 0: 1 / sqrt(D)
  int64_t sparse = 0, pre = 2147483647, next = 2147483647;
  bool mask = false;          // random bool mask [B, S, KVS] (sparse 0)
  bool pse = false;           // fp16 pse [B, N, S, KVS], some -inf cells
  bool pse_nan = false;       // one NaN pse cell (its row becomes NaN)
  bool lse = true;
  uint32_t seed = 1;
};

struct FqCall {
  Arena ar;
  FiaArgs a;
  TensorView out, lse;
};

void Build(const FqSpec& s, FqCall* c) {
  std::mt19937 rng(s.seed);
  const auto fill8 = [&](TensorView t, int amp) {
    std::uniform_int_distribution<int> u(-amp, std::min(amp, 127));
    auto* p = static_cast<int8_t*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int8_t>(u(rng));
  };
  FiaArgs& a = c->a;
  a.input_layout = "BNSD";
  a.num_heads = s.N;
  a.num_key_value_heads = s.KVN;
  a.query = c->ar.T(DType::kInt8, {s.B, s.N, s.S, s.D});
  a.key = c->ar.T(DType::kInt8, {s.B, s.KVN, s.KVS, s.D});
  a.value = c->ar.T(DType::kInt8, {s.B, s.KVN, s.KVS, s.D});
  fill8(a.query, s.qamp);
  fill8(a.key, s.kamp);
  fill8(a.value, 128);
  a.dequant_scale1 = c->ar.F32({1}, s.ds1);
  a.quant_scale1 = c->ar.F32({1}, s.qs1);
  a.dequant_scale2 = c->ar.F32({1}, s.ds2);
  a.scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
  a.sparse_mode = s.sparse;
  a.pre_tokens = s.pre;
  a.next_tokens = s.next;
  a.softmax_lse_flag = s.lse;
  if (s.sparse == 2 || s.sparse == 3) {
    a.atten_mask = c->ar.CausalMask();
  } else if (s.mask) {
    a.atten_mask = c->ar.T(DType::kBool, {s.B, s.S, s.KVS});
    auto* m = static_cast<uint8_t*>(a.atten_mask.data);
    std::bernoulli_distribution hide(0.3);
    for (int64_t i = 0; i < a.atten_mask.numel(); ++i) m[i] = hide(rng);
    for (int64_t j = 0; j < s.KVS; ++j) m[(s.S / 2) * s.KVS + j] = 1;  // one row sees nothing
  }
  if (s.pse) {
    a.pse_shift = c->ar.T(DType::kFloat16, {s.B, s.N, s.S, s.KVS});
    auto* p = static_cast<uint16_t*>(a.pse_shift.data);
    std::uniform_real_distribution<float> u(-3.f, 3.f);
    std::bernoulli_distribution ninf(0.05);
    for (int64_t i = 0; i < a.pse_shift.numel(); ++i)
      p[i] = cvt::F32ToF16(ninf(rng) ? -std::numeric_limits<float>::infinity() : u(rng));
    // One row whose every key is -inf: m = -inf, so its E are NaN (the reference's result too).
    for (int64_t j = 0; j < s.KVS; ++j) p[(s.S - 1) * s.KVS + j] = 0xFC00;
    if (s.pse_nan) p[3 * s.KVS + 7] = 0x7E00;
  }
  const FiaOutputSpec o = FusedInferAttentionScoreOutputSpec(a);
  c->out = c->ar.T(o.attention_out_dtype, o.attention_out_sizes);
  c->lse = c->ar.T(DType::kFloat32, o.softmax_lse_sizes);
}

std::vector<uint8_t> Bytes(const TensorView& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + t.numel() * ElementSize(t.dtype));
}

void Call(FqCall* c) {
  std::memset(c->out.data, 0xA5, c->out.numel() * ElementSize(c->out.dtype));
  std::memset(c->lse.data, 0xA5, c->lse.numel() * 4);
  FusedInferAttentionScore(c->a, c->out, c->lse);
}

void ExpectBitwise(const FqSpec& s, const std::string& what) {
  SCOPED_TRACE(what);
  FqCall c;
  Build(s, &c);
  const Impl impl = GetImpl();
  const int threads = GetNumThreads();
  SetImpl(Impl::kReference);
  Call(&c);
  const std::vector<uint8_t> ref = Bytes(c.out);
  const std::vector<float> ref_lse(static_cast<const float*>(c.lse.data),
                                   static_cast<const float*>(c.lse.data) + c.lse.numel());
  // The call must mean something: some rows finite and nonzero.
  int64_t nonzero = 0;
  for (int64_t i = 0; i < c.out.numel(); ++i) {
    const float v = cvt::F16ToF32(static_cast<const uint16_t*>(c.out.data)[i]);
    nonzero += std::isfinite(v) && v != 0.f;
  }
  EXPECT_GT(nonzero, c.out.numel() / 4);
  SetImpl(Impl::kEngine);
  for (const std::string& target : testing::Targets()) {
    SetSimdCap(target);
    for (int t : {1, 2}) {
      SetNumThreads(t);
      Call(&c);
      const std::vector<uint8_t> got = Bytes(c.out);
      int64_t diff = 0, first = -1;
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != ref[i] && diff++ == 0) first = static_cast<int64_t>(i);
      EXPECT_EQ(diff, 0) << target << " x" << t << ": " << diff << " output bytes differ, first "
                         << first;
      const auto* l = static_cast<const float*>(c.lse.data);
      for (int64_t i = 0; i < c.lse.numel(); ++i) {
        const float w = ref_lse[i], g = l[i];
        const bool ok = std::isnan(w) ? std::isnan(g)
                        : std::isinf(w) ? g == w
                                        : std::fabs(g - w) <= 1e-6f * (1 + std::fabs(w));
        if (!ok) {
          ADD_FAILURE() << target << " x" << t << ": lse[" << i << "] = " << g << ", reference "
                        << w;
          break;
        }
      }
    }
  }
  SetSimdCap("");
  SetImpl(impl);
  SetNumThreads(threads);
}

TEST(FullQuant, EngineBitwiseEqualsReference) {
  {
    FqSpec s;  // dense, GQA 2
    ExpectBitwise(s, "dense");
  }
  {
    FqSpec s;  // causal prefill (sparse 3), rows across several tiles and the diagonal
    s.S = 70;
    s.KVS = 200;
    s.D = 64;
    s.sparse = 3;
    s.seed = 2;
    ExpectBitwise(s, "causal");
  }
  {
    FqSpec s;  // bool mask (a fully masked row), pse with -inf cells and an all -inf row
    s.mask = true;
    s.pse = true;
    s.seed = 3;
    ExpectBitwise(s, "mask + pse");
  }
  {
    FqSpec s;  // a NaN pse cell: its row is NaN
    s.pse = true;
    s.pse_nan = true;
    s.seed = 4;
    ExpectBitwise(s, "pse NaN");
  }
  {
    FqSpec s;  // odd D (no vector packing), band, saturating P8 (qs1 large), small scores
    s.D = 21;
    s.KVS = 97;
    s.pre = 30;
    s.next = 5;
    s.qs1 = 3000.f;
    s.qamp = 127;
    s.kamp = 127;
    s.seed = 5;
    ExpectBitwise(s, "odd D, band, saturated P8");
  }
  {
    FqSpec s;  // few rows per KV head: multi-head items (decode-like prompt of 2 queries)
    s.N = 8;
    s.KVN = 4;
    s.S = 2;
    s.KVS = 333;
    s.D = 48;
    s.seed = 6;
    ExpectBitwise(s, "multi-head items");
  }
  {
    // More keys than the kept scores hold (128 rows x 16384 keys, kFqScoreBytes): the second
    // pass recomputes the products; with a mask, pse and odd D.
    FqSpec s;
    s.N = 2;
    s.KVN = 1;
    s.S = 3;
    s.KVS = 17000;
    s.D = 15;
    s.mask = true;
    s.pse = true;
    s.seed = 8;
    ExpectBitwise(s, "scores recomputed");
  }
  {
    FqSpec s;  // scores beyond fp16: clipped to +-65504 (many keys tie at the max)
    s.ds1 = 4.f;
    s.scale = 1.0;
    s.KVS = 40;
    s.seed = 7;
    ExpectBitwise(s, "fp16 overflow");
  }
}

// A P8.V sum beyond int32: 140000 keys whose P8 saturates at 127 against V = -128 sum to
// -2.3e9. The kernel's int32 tile sums move into int64 every kFqFlushTiles tiles; without that
// the sum wraps and the output differs from the reference's.
TEST(FullQuant, LongRowsKeepExactSums) {
  FqCall c;
  FiaArgs& a = c.a;
  const int64_t kvs = 140000, D = 16, S = 2;
  a.input_layout = "BNSD";
  a.num_heads = 1;
  a.query = c.ar.T(DType::kInt8, {1, 1, S, D});
  a.key = c.ar.T(DType::kInt8, {1, 1, kvs, D});
  a.value = c.ar.T(DType::kInt8, {1, 1, kvs, D});
  auto* q = static_cast<int8_t*>(a.query.data);
  auto* k = static_cast<int8_t*>(a.key.data);
  auto* v = static_cast<int8_t*>(a.value.data);
  q[0] = 1;  // row 0: channel 0 only; row 1 stays 0 (every score equal)
  for (int64_t j = 0; j < kvs; ++j) {
    k[j * D] = j == 0 ? 127 : 100;  // S - m = (100 - 127) / 32: E ~ 0.43, l ~ 60000 < 65504
    for (int64_t d = 0; d < D; ++d) v[j * D + d] = -128;
  }
  a.dequant_scale1 = c.ar.F32({1}, 0x1p-5f);
  a.quant_scale1 = c.ar.F32({1}, 300.f);  // P8 = 127 for both rows
  a.dequant_scale2 = c.ar.F32({1}, 0x1p-10f);
  a.scale = 1.0;
  const FiaOutputSpec o = FusedInferAttentionScoreOutputSpec(a);
  c.out = c.ar.T(o.attention_out_dtype, o.attention_out_sizes);
  c.lse = c.ar.T(DType::kFloat32, {1});
  const Impl impl = GetImpl();
  SetImpl(Impl::kReference);
  Call(&c);
  const std::vector<uint8_t> ref = Bytes(c.out);
  const float r0 = cvt::F16ToF32(static_cast<const uint16_t*>(c.out.data)[0]);
  EXPECT_TRUE(std::isfinite(r0) && r0 < -10.f) << r0;  // -127 * 128 * 140000 / 1024 / l
  SetImpl(Impl::kEngine);
  for (const std::string& target : testing::Targets()) {
    SetSimdCap(target);
    Call(&c);
    EXPECT_TRUE(Bytes(c.out) == ref)
        << target << ": " << cvt::F16ToF32(static_cast<const uint16_t*>(c.out.data)[0])
        << ", reference " << r0;
  }
  SetSimdCap("");
  SetImpl(impl);
}

}  // namespace
}  // namespace openfia::internal
