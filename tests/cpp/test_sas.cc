// SparseAttnSharedkv end to end: against an independent double oracle of docs/semantics.md 3.3
// (SWA, CFA, SCFA; BSND and TND; sinks; mask modes), and bitwise invariance under metadata, worker
// counts and thread counts. Every test runs on the fp64 reference and on the engine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "ops/sparse_attn_sharedkv/sas_internal.h"
#include "test_sas_fixture.h"

namespace openfia::sas_test {
namespace {

constexpr double kEpsF32 = 0x1p-24;
constexpr double kEpsBF16 = 0x1p-8;
constexpr double kEpsF16 = 0x1p-11;

class SasTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    impl_ = GetImpl();
    threads_ = GetNumThreads();
    SetImpl(GetParam());  // kEngine throws kUnsupported if the engine ever stopped taking a case
  }
  void TearDown() override {
    SetImpl(impl_);
    SetNumThreads(threads_);
  }
  Impl impl_ = Impl::kAuto;
  int threads_ = 1;
};

TEST_P(SasTest, SlidingWindowBsndMatchesOracle) {
  // S2 = 300 > 128: the window start moves; S2 = 2 < S1 = 3: row 0 precedes the sequence.
  SasFixture f;
  f.kv_len = {300, 2};
  f.Run(f.Build());
  f.ExpectMatchesOracle(kEpsF32);
  for (int64_t h = 0; h < f.n1; ++h) {
    EXPECT_EQ(f.Lse(1, 0, h), float(kInf));
    for (int64_t c = 0; c < f.d; ++c) EXPECT_EQ(f.Out(1, 0, h, c), 0.f);
  }
}

TEST_P(SasTest, CompressedAllEntriesTndMatchesOracle) {
  for (int64_t ratio : {4, 128}) {
    SasFixture f;
    f.tnd = true;
    f.q_len = {5, 2, 140};  // a prefill batch (S1 = S2) crosses the window and the cmp thresholds
    f.kv_len = {300, 1, 140};
    f.ratio = ratio;
    f.Run(f.Build());
    f.ExpectMatchesOracle(kEpsF32);
  }
}

TEST_P(SasTest, SparseCompressedMatchesOracle) {
  for (bool tnd : {false, true}) {
    SasFixture f;
    f.tnd = tnd;
    f.q_len = {6, 6, 6};
    f.kv_len = {300, 40, 3};
    f.ratio = 4;
    f.k2 = 9;
    f.bs2 = 4;
    f.seed = tnd ? 3 : 4;
    f.Run(f.Build());
    f.ExpectMatchesOracle(kEpsF32);
  }
}

TEST_P(SasTest, HalfPrecisionWithinDtypeTolerance) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    SasFixture f;
    f.dtype = dt;
    f.q_len = {4, 4};
    f.kv_len = {200, 60};
    f.ratio = 4;
    f.k2 = 16;
    f.Run(f.Build());
    f.ExpectMatchesOracle(dt == DType::kBFloat16 ? kEpsBF16 : kEpsF16);
  }
}

TEST_P(SasTest, NoSinksAndDefaultScale) {
  SasFixture f;
  f.with_sinks = false;
  f.scale.reset();  // 1/sqrt(D)
  f.ratio = 128;
  f.kv_len = {300, 260};
  f.Run(f.Build());
  f.ExpectMatchesOracle(kEpsF32);
}

TEST_P(SasTest, CausalAndUnmaskedOriModesMatchOracle) {
  for (int64_t mode : {0, 3}) {
    SasFixture f;
    f.ori_mask_mode = mode;
    f.kv_len = {150, 5};
    f.ratio = 4;
    f.Run(f.Build());
    f.ExpectMatchesOracle(kEpsF32);
  }
}

TEST_P(SasTest, SingleKeyRowIsItsValueRowWithSinkWeight) {
  // Position 0 sees exactly ori token 0 (thr = 0): out = v0 / (1 + e^(sink - s)).
  SasFixture f;
  f.q_len = {1};
  f.kv_len = {1};
  f.ratio = 4;
  f.Run(f.Build());
  for (int64_t h = 0; h < f.n1; ++h) {
    double s = 0;
    for (int64_t c = 0; c < f.d; ++c) s += double(f.qv[h * f.d + c]) * f.ori[0][c];
    s *= 0.3;
    const double w = 1 / (1 + std::exp(f.sinks[h] - s));
    for (int64_t c = 0; c < f.d; ++c)
      EXPECT_NEAR(f.Out(0, 0, h, c), w * f.ori[0][c], 2 * kEpsF32);
    EXPECT_NEAR(f.Lse(0, 0, h), std::log(std::exp(s) + std::exp(f.sinks[h])), 4 * kEpsF32);
  }
}

TEST_P(SasTest, LseNotRequestedGivesOneZeroAndTheSameOutput) {
  SasFixture f;
  f.ratio = 4;
  f.k2 = 5;
  f.Run(f.Build());
  const std::vector<uint8_t> with_lse = f.outbuf;
  f.lse = false;
  f.Run(f.Build());
  ASSERT_EQ(f.lsebuf.size(), 1u);
  EXPECT_EQ(f.lsebuf[0], 0.f);
  EXPECT_EQ(f.outbuf, with_lse);
}

// Plans without metadata (made here for the thread count) and with metadata for 1..36 workers,
// each run on 1..8 threads: bitwise the same output and lse. The split cases (fewer than 4 M
// blocks) cut the key lists into S2 chunks whose partial states the reduce records merge.
void ExpectBitwiseInvariant(SasFixture& f) {
  SasArgs a = f.Build();
  SetNumThreads(1);
  f.Run(a);
  const std::vector<uint8_t> base = Bytes(f);
  f.ExpectMatchesOracle(kEpsF32);
  for (int threads : {2, 3, 8}) {  // no metadata: the plan is made for the thread count
    SetNumThreads(threads);
    f.Run(a);
    ASSERT_EQ(Bytes(f), base) << "no metadata, threads " << threads;
  }
  std::vector<int32_t> meta(kSasMetadataWords);
  for (int64_t workers : {1, 2, 5, 36}) {
    SasMetadataArgs m = f.MetaArgs(workers);
    SparseAttnSharedkvMetadata(m, TensorView(meta.data(), DType::kInt32, {kSasMetadataWords}));
    a.metadata = TensorView(meta.data(), DType::kInt32, {kSasMetadataWords});
    for (int threads : {1, 3, 8}) {
      SetNumThreads(threads);
      f.Run(a);
      ASSERT_EQ(Bytes(f), base) << "workers " << workers << " threads " << threads;
    }
  }
}

TEST_P(SasTest, BitwiseIdenticalForAnyMetadataWorkersAndThreads) {
  for (int64_t k2 : {0, 7}) {  // 9 or more M blocks: no S2 split
    SasFixture f;
    f.tnd = true;
    f.q_len = {9, 0, 30, 4};
    f.kv_len = {100, 0, 160, 300};
    f.ratio = 4;
    f.k2 = k2;
    f.n1 = 64;  // CFA: 4 tokens per M block
    f.d = 4;
    ExpectBitwiseInvariant(f);
  }
  {  // B = 1 decode, SCFA: 128 + 300 keys = 7 one-tile chunks (lists may end early at a -1)
    SasFixture f;
    f.q_len = {1};
    f.kv_len = {2000};
    f.ratio = 4;
    f.k2 = 300;
    f.n1 = 64;
    f.d = 8;
    ExpectBitwiseInvariant(f);
  }
  {  // 3 decode tokens, SCFA, of different lengths (chunk counts 5, 3, 1 tile)
    SasFixture f;
    f.tnd = true;
    f.q_len = {1, 1, 1};
    f.kv_len = {1100, 400, 30};
    f.ratio = 4;
    f.k2 = 200;
    f.n1 = 16;
    f.d = 8;
    f.seed = 7;
    ExpectBitwiseInvariant(f);
  }
  {  // CFA with 2 M blocks of several tokens each (query-major unit rows), one batch empty
    SasFixture f;
    f.tnd = true;
    f.q_len = {3, 0, 2};
    f.kv_len = {900, 0, 700};
    f.ratio = 4;
    f.n1 = 64;
    f.d = 4;
    f.seed = 9;
    ExpectBitwiseInvariant(f);
  }
}

// Random calls (OPENFIA_RANDOM_CASES, default 12; OPENFIA_RANDOM_SEED, default 1): layouts,
// empty and short batches, the three scenarios with either ratio, the three ori mask modes, heads,
// head size, dtypes, page sizes, sinks and scales, against the oracle; float32 calls also
// bitwise for any metadata, worker and thread count. Under ASan in CI: every index and block id
// read of odd geometries.
TEST_P(SasTest, RandomCallsMatchOracle) {
  const char* n_env = std::getenv("OPENFIA_RANDOM_CASES");
  const char* s_env = std::getenv("OPENFIA_RANDOM_SEED");
  const int n = n_env && *n_env ? std::atoi(n_env) : 12;
  std::mt19937_64 rng((s_env && *s_env ? std::atoll(s_env) : 1) * 0x9E3779B97F4A7C15ull + 17);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  for (int it = 0; it < n; ++it) {
    SasFixture f;
    f.tnd = pick(0, 2) > 0;
    const int64_t B = pick(1, 3);
    f.q_len.assign(B, 0);
    f.kv_len.assign(B, 0);
    const int64_t s1 = pick(0, 3) == 0 ? pick(3, 9) : pick(1, 2);
    for (int64_t b = 0; b < B; ++b) {
      f.q_len[b] = f.tnd ? (pick(0, 4) == 0 ? 0 : pick(1, 6)) : s1;
      const int64_t r = pick(0, 5);
      f.kv_len[b] = r == 0 ? 0 : r <= 2 ? pick(1, 40) : pick(41, 700);
    }
    if (f.T() == 0) f.q_len[0] = 1;
    const int64_t scenario = pick(0, 2);  // SWA, CFA, SCFA
    f.ratio = scenario == 0 ? 0 : (pick(0, 1) ? 4 : 128);
    f.k2 = scenario == 2 ? std::vector<int64_t>{1, 5, 16, 64, 300}[pick(0, 4)] : 0;
    f.ori_mask_mode = std::vector<int64_t>{4, 4, 3, 0}[pick(0, 3)];
    f.n1 = std::vector<int64_t>{1, 2, 8, 16, 64}[pick(0, 4)];
    f.d = std::vector<int64_t>{4, 8, 16, 64}[pick(0, 3)];
    f.dtype = std::vector<DType>{DType::kFloat32, DType::kBFloat16, DType::kFloat16}[pick(0, 2)];
    f.bs1 = std::vector<int64_t>{1, 16, 64, 128}[pick(0, 3)];
    f.bs2 = std::vector<int64_t>{1, 8, 128}[pick(0, 2)];
    f.with_sinks = pick(0, 3) > 0;
    f.lse = pick(0, 3) > 0;
    if (pick(0, 2) == 0) f.scale.reset();
    f.seed = static_cast<uint32_t>(100 + it);
    SCOPED_TRACE("random call " + std::to_string(it) + ": tnd " + std::to_string(f.tnd) +
                 " B " + std::to_string(B) + " ratio " + std::to_string(f.ratio) + " k2 " +
                 std::to_string(f.k2) + " mode " + std::to_string(f.ori_mask_mode) + " n1 " +
                 std::to_string(f.n1) + " d " + std::to_string(f.d));
    if (f.dtype == DType::kFloat32) {
      ExpectBitwiseInvariant(f);
    } else {
      f.Run(f.Build());
      f.ExpectMatchesOracle(f.dtype == DType::kBFloat16 ? kEpsBF16 : kEpsF16);
    }
  }
}

TEST_P(SasTest, BusyStatsHookTimesEveryPlannedWorkerAndChangesNothing) {
  // B = 1 decode split over 3 workers (128 + 700 keys: four chunks of 3, 3, 3 and 4 tiles): one
  // busy time per compute record, the merge timed, the same bytes as the untimed call; on the
  // reference no engine timing.
  SasFixture f;
  f.q_len = {1};
  f.kv_len = {4000};
  f.ratio = 4;
  f.k2 = 700;
  f.n1 = 64;
  f.d = 8;
  SasArgs a = f.Build();
  std::vector<int32_t> meta(kSasMetadataWords);
  SparseAttnSharedkvMetadata(f.MetaArgs(3),
                             TensorView(meta.data(), DType::kInt32, {kSasMetadataWords}));
  a.metadata = TensorView(meta.data(), DType::kInt32, {kSasMetadataWords});
  SetNumThreads(2);
  f.Run(a);
  const std::vector<uint8_t> plain = Bytes(f);
  const auto busy = internal::SparseAttnSharedkvBusy(
      a, TensorView(f.outbuf.data(), f.dtype, {1, 1, f.n1, f.d}),
      TensorView(f.lsebuf.data(), DType::kFloat32, {1, 1, 1, f.n1}));
  EXPECT_EQ(Bytes(f), plain);
  if (GetParam() == Impl::kReference) {
    EXPECT_TRUE(busy.empty());
    return;
  }
  ASSERT_EQ(busy.at("workers").size(), 3u);
  ASSERT_EQ(busy.at("workers_cpu").size(), 3u);
  for (double t : busy.at("workers")) EXPECT_GT(t, 0.0);
  EXPECT_EQ(busy.at("threads").size(), 2u);
  EXPECT_GT(busy.at("merge")[0], 0.0);  // the split rows were merged
  EXPECT_GE(busy.at("compute_wall")[0], *std::max_element(busy.at("workers").begin(),
                                                          busy.at("workers").end()));
}

TEST_P(SasTest, AutoRunsTheEngine) {
  // The default implementation choice takes the engine for every SparseAttnSharedkv call.
  SasFixture f;
  f.ratio = 4;
  f.k2 = 6;
  SasArgs a = f.Build();
  SetImpl(Impl::kEngine);
  f.Run(a);
  const std::vector<uint8_t> engine = Bytes(f);
  SetImpl(Impl::kAuto);
  f.Run(a);
  EXPECT_EQ(Bytes(f), engine);
}

TEST_P(SasTest, MetadataForAnotherConfigurationIsRejected) {
  SasFixture f;
  f.tnd = true;
  f.q_len = {3, 5};
  f.kv_len = {100, 40};
  f.ratio = 4;
  f.k2 = 4;
  SasArgs a = f.Build();
  std::vector<int32_t> meta(kSasMetadataWords);
  const TensorView mv(meta.data(), DType::kInt32, {kSasMetadataWords});
  auto expect_rejected = [&](SasMetadataArgs m, const char* what) {
    SparseAttnSharedkvMetadata(m, mv);
    a.metadata = mv;
    try {
      f.Run(a);
      ADD_FAILURE() << what << ": expected openfia::Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "metadata") << what;
      EXPECT_NE(std::string(e.what()).find("another configuration"), std::string::npos)
          << e.what();
    }
  };
  std::vector<int32_t> other_kv = {100, 41};
  SasMetadataArgs m = f.MetaArgs(3);
  m.seqused_kv = TensorView(other_kv.data(), DType::kInt32, {2});
  expect_rejected(m, "seqused_kv");
  m = f.MetaArgs(3);
  m.cmp_topk = 0;
  expect_rejected(m, "cmp_topk");
  m = f.MetaArgs(3);
  m.cmp_ratio = 128;
  expect_rejected(m, "cmp_ratio");
  m = f.MetaArgs(3);
  m.num_heads_q = 8;
  expect_rejected(m, "num_heads_q");
  m = f.MetaArgs(3);
  m.head_dim = 16;
  expect_rejected(m, "head_dim");
  std::vector<int32_t> other_cu = {0, 4, 8};
  m = f.MetaArgs(3);
  m.cu_seqlens_q = TensorView(other_cu.data(), DType::kInt32, {3});
  expect_rejected(m, "cu_seqlens_q");
  // The matching one is accepted.
  SparseAttnSharedkvMetadata(f.MetaArgs(3), mv);
  a.metadata = mv;
  EXPECT_NO_THROW(f.Run(a));
}

INSTANTIATE_TEST_SUITE_P(Impl, SasTest, ::testing::Values(Impl::kReference, Impl::kEngine),
                         [](const ::testing::TestParamInfo<Impl>& i) {
                           return i.param == Impl::kReference ? "Reference" : "Engine";
                         });

}  // namespace
}  // namespace openfia::sas_test
