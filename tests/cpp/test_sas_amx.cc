// SparseAttnSharedkv on the AMX bf16 path (engine/kernels/amx/amx_sas-inl.h): bf16 with head counts that are
// multiples of 16 and head dims that are multiples of 32, so that the engine's items take it where
// the CPU has AMX (elsewhere the same checks run on the AVX-512 / scalar kernels). CFA and SWA
// units then hold items of several query tokens (the union of their key lists, per-row masks):
// the results must match the fp64 oracle and stay bitwise the same for every plan and thread
// count, and a non-finite value in a key one row masks must not reach that row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/sparse_attn_sharedkv/sas_internal.h"
#include "test_sas_fixture.h"

namespace openfia::sas_test {
namespace {

constexpr double kEpsBF16 = 0x1p-8;

class SasAmxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    impl_ = GetImpl();
    threads_ = GetNumThreads();
    SetImpl(Impl::kEngine);
  }
  void TearDown() override {
    SetImpl(impl_);
    SetNumThreads(threads_);
  }
  Impl impl_ = Impl::kAuto;
  int threads_ = 1;
};

// The oracle at bf16 tolerance, then the same bytes for plans made for 1..3 threads and for
// metadata of 1, 3 and 36 workers run on 1 and 3 threads.
void ExpectOracleAndInvariance(SasFixture& f) {
  SasArgs a = f.Build();
  SetNumThreads(1);
  f.Run(a);
  f.ExpectMatchesOracle(kEpsBF16);
  const std::vector<uint8_t> base = Bytes(f);
  for (int threads : {2, 3}) {
    SetNumThreads(threads);
    f.Run(a);
    ASSERT_EQ(Bytes(f), base) << "no metadata, threads " << threads;
  }
  std::vector<int32_t> meta(kSasMetadataWords);
  for (int64_t workers : {1, 3, 36}) {
    SparseAttnSharedkvMetadata(f.MetaArgs(workers),
                               TensorView(meta.data(), DType::kInt32, {kSasMetadataWords}));
    a.metadata = TensorView(meta.data(), DType::kInt32, {kSasMetadataWords});
    for (int threads : {1, 3}) {
      SetNumThreads(threads);
      f.Run(a);
      ASSERT_EQ(Bytes(f), base) << "workers " << workers << " threads " << threads;
    }
  }
}

SasFixture Bf16(int64_t n1, int64_t d) {
  SasFixture f;
  f.dtype = DType::kBFloat16;
  f.n1 = n1;
  f.d = d;
  f.bs1 = 32;
  f.bs2 = 8;
  return f;
}

TEST_F(SasAmxTest, CfaPrefillMultiTokenItems) {
  // N1 = 16: 16-token units, items of 8 tokens; N1 = 64: 4-token units, items of 2 tokens. The
  // prefill crosses the window start (300 > 128) and the compressed thresholds; the short batch
  // has rows before the sequence (S1 > S2) and an odd token count.
  for (int64_t n1 : {16, 64}) {
    for (int64_t ratio : {4, 128}) {
      SasFixture f = Bf16(n1, 64);
      f.tnd = true;
      f.q_len = {45, 7};
      f.kv_len = {300, 5};
      f.ratio = ratio;
      f.seed = static_cast<uint32_t>(n1 + ratio);
      SCOPED_TRACE(testing::Message() << "n1 " << n1 << " ratio " << ratio);
      ExpectOracleAndInvariance(f);
    }
  }
}

TEST_F(SasAmxTest, SlidingWindowOnlyAndOtherMaskModes) {
  for (int64_t mode : {4, 3, 0}) {
    SasFixture f = Bf16(16, 32);
    f.q_len = {20};
    f.kv_len = {150};
    f.ori_mask_mode = mode;
    f.seed = static_cast<uint32_t>(10 + mode);
    SCOPED_TRACE(testing::Message() << "mode " << mode);
    ExpectOracleAndInvariance(f);
  }
}

TEST_F(SasAmxTest, ScfaDecodeSplitAndBatch) {
  {  // B = 1: the key list cut into one-tile chunks, merged
    SasFixture f = Bf16(16, 64);
    f.q_len = {1};
    f.kv_len = {3000};
    f.ratio = 4;
    f.k2 = 400;
    ExpectOracleAndInvariance(f);
  }
  {  // 5 decode tokens (no split), lists of 128 + up to 300 keys: several 256-key steps
    SasFixture f = Bf16(32, 96);
    f.tnd = true;
    f.q_len = {1, 1, 1, 1, 1};
    f.kv_len = {1500, 700, 40, 1, 1300};
    f.ratio = 4;
    f.k2 = 300;
    f.seed = 11;
    ExpectOracleAndInvariance(f);
  }
}

TEST_F(SasAmxTest, MoreThan128Heads) {
  // 256 query heads: engine items hold at most 128 of them (the scratch and row states' size).
  for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
    SasFixture f = Bf16(256, 32);
    f.dtype = dt;
    f.q_len = {1, 1};
    f.kv_len = {700, 90};
    f.ratio = 4;
    f.k2 = 40;
    SasArgs a = f.Build();
    SetNumThreads(2);
    f.Run(a);
    f.ExpectMatchesOracle(dt == DType::kBFloat16 ? kEpsBF16 : 0x1p-24);
  }
}

TEST_F(SasAmxTest, NonFiniteValueInAMaskedKeyStaysOut) {
  // N1 = 64, CFA: tokens 2k and 2k + 1 share an item. Original token p + 1 is the newest key of
  // query p + 1 and masked for query p; an Inf there must leave query p finite and exact.
  SasFixture f = Bf16(64, 32);
  f.q_len = {8};
  f.kv_len = {200};
  f.ratio = 4;
  SasArgs a = f.Build();
  const int64_t b = 0, s1 = 8, s2 = 200;
  const int64_t i = 4, t = s2 - s1 + i + 1;  // query i (even: first of its item) masks token t
  for (int64_t c = 0; c < f.d; ++c) {
    const float inf = std::numeric_limits<float>::infinity();
    f.ori[b][t * f.d + c] = inf;
    internal::StoreFloat(f.oribuf.data(), f.elem(),
                         (f.ori_bt[b * f.bt1_w + t / f.bs1] * f.bs1 + t % f.bs1) * f.d + c, inf);
  }
  f.Run(a);
  for (int64_t h = 0; h < f.n1; ++h) {
    std::vector<double> o;
    double lse;
    f.Oracle(b, i, h, &o, &lse);
    for (int64_t c = 0; c < f.d; ++c) {
      ASSERT_TRUE(std::isfinite(f.Out(b, i, h, c))) << "h=" << h << " c=" << c;
      ASSERT_NEAR(f.Out(b, i, h, c), o[c], 4 * kEpsBF16 * std::max(1.0, std::fabs(o[c])))
          << "h=" << h << " c=" << c;
    }
  }
  // (Query i + 1 reads the Inf in its scores: no check here. Every engine path gives it a
  // finite output where the fp64 oracle has NaN; that predates this path.)
}

}  // namespace
}  // namespace openfia::sas_test
