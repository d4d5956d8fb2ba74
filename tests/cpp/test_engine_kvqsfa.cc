// KvQuantSparseFlashAttention on the fast engine: the AMX tile-dequant path (bf16 query,
// amx_tile_dequant-inl.h) and the generic path's vectorized per-tile dequant (float16 query, or
// any query on targets without AMX), each against the fp64 reference and the independent oracle
// of test_kvqsfa_util.h. Every bf16 case first proves that its work items take the AMX path
// (internal::testing::AmxRunsItem) when the CPU has AMX; results must not depend on the thread count.
//
// Tolerance: the oracle's bound E.tol (query-dtype unit roundoff on the output and on the
// unnormalized probabilities, fp32 accumulation over the tokens + 576 score channels); engine
// and reference each lie within it of the exact value, so they differ by at most twice it.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/problem.h"
#include "engine/engine.h"
#include "engine/plan.h"
#include "openfia/openfia.h"
#include "openfia/runtime.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"
#include "kernel_util.h"
#include "test_kvqsfa_util.h"

namespace openfia {
namespace {

using kvqtest::Build;
using kvqtest::Built;
using kvqtest::Case;

struct SettingsGuard {
  Impl impl = GetImpl();
  ~SettingsGuard() {
    SetImpl(impl);
    SetSimdCap("");
    SetNumThreads(2);
  }
};

std::vector<uint16_t> RunOp(Built& B, Impl impl) {
  SetImpl(impl);
  KvqsfaArgs a = B.Args();
  int64_t n = 1;
  for (int64_t s : B.out_sizes) n *= s;
  std::vector<uint16_t> out(n, 0x7E00);  // garbage the op must overwrite
  KvQuantSparseFlashAttention(a, TensorView(out.data(), B.c.qdt, B.out_sizes));
  return out;
}

internal::Plan PlanOf(Built& B, internal::Problem* p) {
  KvqsfaArgs a = B.Args();
  const internal::KvqsfaShape sh = internal::ValidateKvqsfa(a);
  std::vector<uint16_t> out(1);
  *p = internal::CanonicalizeKvqsfa(a, sh, TensorView(out.data(), B.c.qdt, B.out_sizes));
  return internal::MakePlan(*p);
}

// Whether every work item of B's problem runs on the AMX tile-dequant path (the table is picked
// by the default cap, i.e. the best target of the CPU).
bool AllItemsOnAmx(Built& B) {
  internal::Problem p;
  const internal::Plan plan = PlanOf(B, &p);
  if (plan.items.empty()) return false;
  for (const internal::WorkItem& w : plan.items)
    if (!internal::testing::AmxRunsItem(p, w)) return false;
  return true;
}

bool Amx() { return internal::testing::TargetOps("amx") != nullptr; }

void ExpectWithin(const std::vector<uint16_t>& got, const std::vector<double>& want,
                  const std::vector<double>& tol, double k, DType qdt, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = kvqtest::FromQ(got[i], qdt);
    const bool ok = std::isnan(want[i]) ? std::isnan(g) : std::fabs(g - want[i]) <= k * tol[i];
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " (row " << i / 512 << ", d " << i % 512
                    << ") = " << g << ", want " << want[i] << " +- " << k * tol[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// Engine (default target, then generic AVX-512 when AMX is there; 1 and 3 threads) vs the
// oracle and the reference. `edit` may rewrite the built call (e.g. its indices).
void Check(const Case& c, void (*edit)(Built&) = nullptr) {
  SettingsGuard guard;
  Built B = Build(c);
  if (edit) edit(B);
  if (c.qdt == DType::kBFloat16 && Amx() && c.heads % 16 == 0) {
    ASSERT_EQ(SimdTarget(), "amx");
    ASSERT_TRUE(AllItemsOnAmx(B)) << "some work item misses the AMX tile-dequant path";
  }
  const kvqtest::Expected E = kvqtest::Expect(B);
  int64_t attended = 0;
  for (double t : E.tol) attended += t > 0;
  ASSERT_GT(attended, 0) << "vacuous case: no row attends a key";

  const std::vector<uint16_t> ref = RunOp(B, Impl::kReference);
  ExpectWithin(ref, E.out, E.tol, 1, c.qdt, "reference vs oracle");
  std::vector<double> ref_d(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ref_d[i] = kvqtest::FromQ(ref[i], c.qdt);

  SetNumThreads(1);
  const std::vector<uint16_t> eng = RunOp(B, Impl::kEngine);
  ExpectWithin(eng, E.out, E.tol, 1, c.qdt, std::string("engine ") + SimdTarget() + " vs oracle");
  ExpectWithin(eng, ref_d, E.tol, 2, c.qdt, "engine vs reference");
  SetNumThreads(3);
  EXPECT_EQ(RunOp(B, Impl::kEngine), eng) << "3 threads differ from 1";

  if (Amx()) {  // the generic path on the same case (what float16 queries always take)
    SetSimdCap("avx512");
    SetNumThreads(1);
    const std::vector<uint16_t> gen = RunOp(B, Impl::kEngine);
    ExpectWithin(gen, E.out, E.tol, 1, c.qdt, "engine avx512 vs oracle");
    ExpectWithin(gen, ref_d, E.tol, 2, c.qdt, "engine avx512 vs reference");
  }
}

Case Decode(DType kv, DType q) {
  Case c;
  c.kvdt = kv;
  c.qdt = q;
  c.layout_kv = "PA_BSND";
  c.batch = 2, c.s1 = 1, c.heads = 32, c.s2 = 300, c.topk = 150, c.block_size = 32;
  c.seed = 11;
  return c;
}

TEST(EngineKvqsfa, PagedDecodeEveryFormatBothQueries) {
  // Several key tiles per row (up to 150 tokens: 64 + 64 + a partial tile).
  for (DType q : {DType::kBFloat16, DType::kFloat16})
    for (DType kv : {DType::kInt8, DType::kFloat8E4M3, DType::kHiFloat8}) {
      SCOPED_TRACE(std::string("q ") + (q == DType::kBFloat16 ? "bf16" : "f16") + " kv " +
                   std::to_string(static_cast<int>(kv)));
      Check(Decode(kv, q));
    }
}

TEST(EngineKvqsfa, StridedQueryIsPackedFirst) {
  // The C++ API accepts a strided query. Channels that are not adjacent (last-dimension stride
  // 2) cannot feed the AMX path's Q tiles directly: it packs the rows first (PackQueryRows).
  // NaN in the gaps makes a read of one visible.
  for (DType q : {DType::kBFloat16, DType::kFloat16})
    Check(Decode(DType::kInt8, q), [](Built& B) {
      B.query_wide.assign(B.query.size() * 2, 0x7FC0);
      for (size_t i = 0; i < B.query.size(); ++i) B.query_wide[2 * i] = B.query[i];
    });
}

TEST(EngineKvqsfa, BsndMultiTokenBlockSparse) {
  // S1 = 4 (MTP): causal thresholds differ per row; 16-token blocks, 128 query heads (one
  // 128-row item per query row).
  for (DType q : {DType::kBFloat16, DType::kFloat16}) {
    Case c;
    c.qdt = q;
    c.batch = 2, c.s1 = 4, c.heads = 128, c.s2 = 200, c.topk = 9, c.sparse_block_size = 16;
    c.act_kv = {200, 90};
    c.seed = 5;
    Check(c);
  }
}

TEST(EngineKvqsfa, TndFp8WithSinksAndModeZero) {
  for (DType q : {DType::kBFloat16, DType::kFloat16}) {
    Case c;
    c.qdt = q;
    c.layout_q = c.layout_kv = "TND";
    c.kvdt = DType::kFloat8E4M3;
    c.sparse_mode = 0;
    c.batch = 3, c.heads = 16, c.topk = 40, c.sparse_block_size = 2;
    c.act_q = {2, 3, 1};
    c.act_kv = {97, 2, 130};
    c.s2 = 130;
    c.sinks = true;
    c.seed = 9;
    Check(c);
  }
}

TEST(EngineKvqsfa, PagedHiF8TndQueryLongList) {
  // Lists longer than one split (plan.cc splits long key ranges across items) and duplicates.
  Case c;
  c.layout_q = "TND";
  c.layout_kv = "PA_BSND";
  c.kvdt = DType::kHiFloat8;
  c.batch = 1, c.heads = 64, c.s2 = 900, c.topk = 40, c.block_size = 64;
  c.sparse_block_size = 16;
  c.act_q = {2};
  c.act_kv = {900};
  c.seed = 3;
  Check(c);
}

TEST(EngineKvqsfa, SplitKeyListsMerge) {
  // A 2100-token list: plan.cc cuts it into split-KV items (partial row states, then a merge),
  // each starting on its own tile; duplicates included.
  Case c;
  c.batch = 1, c.s1 = 1, c.heads = 16, c.s2 = 4200, c.topk = 2100, c.sparse_mode = 0;
  c.seed = 13;
  Check(c, [](Built& B) {
    std::mt19937 rng(2);
    std::vector<int32_t> perm(4200);
    for (int32_t i = 0; i < 4200; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < 2100; ++e) B.indices[e] = perm[e % 2000];  // 100 duplicates
    internal::Problem p;
    const internal::Plan plan = PlanOf(B, &p);
    ASSERT_TRUE(std::any_of(plan.items.begin(), plan.items.end(),
                            [](const internal::WorkItem& w) { return w.n_split > 1; }))
        << "the list was not split";
  });
}

TEST(EngineKvqsfa, FewHeadsStayOnTheGenericPath) {
  // 8 heads: fewer rows than an AMX block; the generic path runs it (and must be right).
  Case c = Decode(DType::kInt8, DType::kBFloat16);
  c.heads = 8;
  Built B = Build(c);
  EXPECT_FALSE(AllItemsOnAmx(B));
  Check(c);
}

// One key per row: P = 1 exactly, so the output IS the dequantized value row rounded to the
// query dtype, bit for bit on every path (the dequant's fp32 product and its round to nearest
// even must be those of the reference).
TEST(EngineKvqsfa, SingleKeyOutputIsTheDequantizedRowExactly) {
  for (DType q : {DType::kBFloat16, DType::kFloat16})
    for (DType kv : {DType::kInt8, DType::kFloat8E4M3, DType::kHiFloat8}) {
      SettingsGuard guard;
      Case c;
      c.qdt = q;
      c.kvdt = kv;
      c.batch = 3, c.s1 = 2, c.heads = 16, c.s2 = 50, c.topk = 1;
      c.seed = 21;
      Built B = Build(c);
      // Every row selects one token below its threshold.
      for (size_t i = 0; i < B.indices.size(); ++i) B.indices[i] = static_cast<int32_t>(3 * i % 40);
      if (q == DType::kBFloat16 && Amx()) ASSERT_TRUE(AllItemsOnAmx(B));
      const kvqtest::Expected E = kvqtest::Expect(B);
      std::vector<std::string> caps = {""};
      if (Amx()) caps.push_back("avx512");
      for (const std::string& cap : caps) {
        SetSimdCap(cap);
        const std::vector<uint16_t> out = RunOp(B, Impl::kEngine);
        int bad = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          const double got = kvqtest::FromQ(out[i], q);
          if (got != E.out[i] && bad++ < 5)
            ADD_FAILURE() << SimdTarget() << " kv " << static_cast<int>(kv) << " element " << i
                          << " = " << got << ", want exactly " << E.out[i];
        }
        EXPECT_EQ(bad, 0);
      }
    }
}

// Row 0 attends token 3 (ordinary) and token 7, whose keys are made huge: query 1 on every
// channel, token 7's nope bytes +127 on channels [0, pos), -127 on [pos, neg_end), 0 elsewhere,
// rope 0, every tile scale 1.5e36 (K = +-1.905e38 in bf16).
void HugeKey(Built& B, int64_t pos, int64_t neg_end) {
  B.indices = {3, 7};
  for (int64_t h = 0; h < B.c.heads; ++h)
    for (int64_t d = 0; d < 576; ++d)
      B.query[B.QOffset(0, 0, h) + d] = kvqtest::ToQ(1.f, B.c.qdt);
  uint8_t* row = B.key_bytes() + B.RowOffset(0, 7);
  for (int64_t d = 0; d < 512; ++d)
    row[d] = static_cast<uint8_t>(static_cast<int8_t>(d < pos ? 127 : d < neg_end ? -127 : 0));
  std::memset(row + 512, 0, 128);
  const float big = 1.5e36f;
  for (int64_t t = 0; t < 4; ++t) std::memcpy(row + 640 + 4 * t, &big, 4);
}

// Scores that are ordinary fp32 numbers although their fp32 partial sums are not. 256 channels
// of +K and 255 of -K: q . K = K exactly, while every channel-ordered fp32 sum passes FLT_MAX
// after two terms. 40 channels of +K with scale 0.02: q . K = 7.6e39 is past FLT_MAX itself,
// the scaled score 1.5e38 is not. Either way the big key's score dominates and the output is its
// value row, finite, as the reference and the oracle compute it (the overflowed sum made the
// score inf and the row NaN). Two heads: the generic tile loop on every target.
TEST(EngineKvqsfa, ScoreWhoseFp32PartialSumsOverflowStaysFinite) {
  Case c;
  c.qdt = DType::kBFloat16;
  c.kvdt = DType::kInt8;
  c.batch = 1, c.s1 = 1, c.heads = 2, c.s2 = 24, c.topk = 2;
  c.seed = 31;
  {
    SCOPED_TRACE("partial sums past FLT_MAX");
    Check(c, [](Built& B) { HugeKey(B, 256, 511); });
  }
  c.scale = 0.02;
  {
    SCOPED_TRACE("unscaled sum past FLT_MAX");
    Check(c, [](Built& B) { HugeKey(B, 40, 40); });
  }
}

// Tokens 3 and 7 selected, both holding 127 x 1.5e36 = 1.905e38 on channels [0, 64), and the
// same score: a zero query, or with `huge` a query 1 on rope channel 0 against rope 1e37 in both
// tokens (a score so large that no offset added to it in fp32 would change it).
void HugeValues(Built& B, bool huge) {
  B.indices = {3, 7};
  for (int64_t h = 0; h < B.c.heads; ++h)
    for (int64_t d = 0; d < 576; ++d)
      B.query[B.QOffset(0, 0, h) + d] = kvqtest::ToQ(huge && d == 512 ? 1.f : 0.f, B.c.qdt);
  for (int64_t t : {3, 7}) {
    uint8_t* row = B.key_bytes() + B.RowOffset(0, t);
    for (int64_t d = 0; d < 64; ++d) row[d] = 127;
    const float big = 1.5e36f;
    std::memcpy(row + 640, &big, 4);  // the scale of channels [0, 128)
    const uint16_t rope0 = kvqtest::ToQ(huge ? 1e37f : 0.f, B.c.qdt);
    std::memcpy(row + 512, &rope0, 2);
  }
}

// Values whose fp32 P V sums pass FLT_MAX while their mean does not (HugeValues): the output is
// 1.905e38 on those channels, as the reference and the oracle compute it in double (the
// overflowed accumulator gave inf). Two heads: the generic tile loop on every target.
TEST(EngineKvqsfa, ValueSumsPastFltMaxStayFinite) {
  Case c;
  c.qdt = DType::kBFloat16;
  c.kvdt = DType::kInt8;
  c.batch = 1, c.s1 = 1, c.heads = 2, c.s2 = 24, c.topk = 2;
  c.seed = 37;
  {
    SCOPED_TRACE("equal scores 0");
    Check(c, [](Built& B) { HugeValues(B, false); });
  }
  {
    SCOPED_TRACE("equal scores 1e37 x scale");
    Check(c, [](Built& B) { HugeValues(B, true); });
  }
}

// Random calls (OPENFIA_RANDOM_CASES, default 12; OPENFIA_RANDOM_SEED, default 1): KV format,
// query dtype, layouts (BSND, TND, paged with odd block sizes, TND query over a paged cache),
// batch and lengths, heads, top-k, sparse block size, sparse mode, sinks and scale, through Check
// (oracle, reference, 1 / 3 threads bitwise). Under ASan in CI: every index and block id read.
TEST(EngineKvqsfa, RandomCalls) {
  const char* n_env = std::getenv("OPENFIA_RANDOM_CASES");
  const char* s_env = std::getenv("OPENFIA_RANDOM_SEED");
  const int n = n_env && *n_env ? std::atoi(n_env) : 12;
  std::mt19937_64 rng((s_env && *s_env ? std::atoll(s_env) : 1) * 0x9E3779B97F4A7C15ull + 29);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  int ran = 0;
  for (int it = 0; ran < n && it < 20 * n; ++it) {
    Case c;
    c.kvdt = std::vector<DType>{DType::kInt8, DType::kFloat8E4M3, DType::kHiFloat8}[pick(0, 2)];
    c.qdt = pick(0, 1) ? DType::kBFloat16 : DType::kFloat16;
    const int64_t layout = pick(0, 3);  // BSND, TND, PA with BSND query, PA with TND query
    c.layout_q = layout == 1 || layout == 3 ? "TND" : "BSND";
    c.layout_kv = layout == 1 ? "TND" : layout >= 2 ? "PA_BSND" : "BSND";
    c.batch = pick(1, 3);
    c.s1 = pick(0, 2) == 0 ? pick(2, 5) : 1;
    c.s2 = pick(0, 1) ? pick(1, 40) : pick(41, 300);
    c.heads = std::vector<int64_t>{1, 2, 8, 16, 48, 64, 128}[pick(0, 6)];
    c.topk = std::vector<int64_t>{1, 2, 8, 32, 100}[pick(0, 4)];
    c.sparse_block_size = std::vector<int64_t>{1, 2, 4, 16, 128}[pick(0, 4)];
    c.sparse_mode = pick(0, 1) ? 3 : 0;
    c.block_size = std::vector<int64_t>{7, 16, 32, 128}[pick(0, 3)];
    c.sinks = pick(0, 1) == 1;
    c.scale = std::vector<double>{1.0 / std::sqrt(576.0), 0.02, 0.1}[pick(0, 2)];
    c.act_q.clear(), c.act_kv.clear();
    if (pick(0, 1)) {  // per-batch lengths, empty rows and batches included
      for (int64_t b = 0; b < c.batch; ++b) {
        c.act_q.push_back(pick(0, c.s1));
        c.act_kv.push_back(pick(0, 2) ? pick(1, c.s2) : 0);
      }
      c.pass_act_q = c.pass_act_kv = true;
    }
    c.seed = static_cast<uint32_t>(1000 + it);
    // Calls the builder or the operator rejects, and calls in which no row attends a key
    // (Check insists on a non-vacuous case), are drawn again.
    try {
      Built B = Build(c);
      KvqsfaArgs a = B.Args();
      (void)KvQuantSparseFlashAttentionOutputSpec(a);
      const kvqtest::Expected E = kvqtest::Expect(B);
      if (std::none_of(E.tol.begin(), E.tol.end(), [](double t) { return t > 0; })) continue;
    } catch (const std::exception&) {
      continue;
    }
    SCOPED_TRACE("random call " + std::to_string(it) + ": " + c.layout_q + "/" + c.layout_kv +
                 " B " + std::to_string(c.batch) + " s1 " + std::to_string(c.s1) + " s2 " +
                 std::to_string(c.s2) + " heads " + std::to_string(c.heads) + " topk " +
                 std::to_string(c.topk) + " sbs " + std::to_string(c.sparse_block_size));
    Check(c);
    ++ran;
  }
  EXPECT_EQ(ran, n) << "valid random calls found";
}

}  // namespace
}  // namespace openfia
