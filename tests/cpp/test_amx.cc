// The AMX table on bf16 prefill problems: vs the fp64 reference (tolerance from bf16 epsilon and
// the reduction lengths), vs the AVX-512 table (the same tolerance, twice), 1/2/3 threads
// bitwise equal; each case first proves that some work item really takes the tile path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/plan.h"
#include "engine_case.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "kernel_util.h"

namespace openfia::internal::testing {
namespace {

struct SettingsGuard {
  ~SettingsGuard() {
    SetSimdCap("");
    SetNumThreads(2);
  }
};

// Output and lse of `c` vs (want_out, want_lse); `k` scales the tolerance (2: two fast paths).
void Compare(Case& c, const std::vector<uint8_t>& want_out, const std::vector<float>& want_lse,
             double k, const std::string& what) {
  const Problem& p = c.problem();
  const CaseSpec& s = c.spec();
  const double u32 = std::ldexp(1.0, -24), eps_bf16 = std::ldexp(1.0, -7);
  const int64_t D = p.d_qk + p.d_rope;  // MLA: the score also sums the rope channels
  int64_t kvmax = 0;
  for (int64_t b = 0; b < p.batch; ++b) kvmax = std::max(kvmax, p.kv_total(b));
  // Score error of an fp32 dot product of length D (|q|, |k| <= amp); P rounding; the sum of P V.
  const double ds = D * u32 * D * s.amp * s.amp * s.scale;
  const double atol = k * c.max_abs_v() * (eps_bf16 + 2.5 * ds + 2 * (kvmax + 16) * u32);
  const double lse_tol = k * (ds + 2 * (kvmax + 16) * u32);
  int bad = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.h_q; ++h) {
      for (int64_t row = 0; row < p.s_q; ++row) {
        for (int64_t d = 0; d < p.d_v; ++d) {
          const int64_t o = b * p.out_sb + h * p.out_sh + row * p.out_ss + d * p.out_sd;
          const double got = cvt::Load(c.out(), p.out_elem, o);
          const double want = cvt::Load(want_out.data(), p.out_elem, o);
          const bool ok = std::isnan(want) || std::isnan(got)
                              ? std::isnan(want) && std::isnan(got)
                              : std::fabs(got - want) <= atol + eps_bf16 * std::fabs(want);
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": out(b=" << b << ", h=" << h << ", row=" << row
                          << ", d=" << d << ") = " << got << ", want " << want << " (atol "
                          << atol << ")";
        }
        if (p.lse) {
          const int64_t li = b * p.lse_sb + h * p.lse_sh + row * p.lse_ss;
          const double got = c.lse()[li], want = want_lse[li];
          const bool ok = std::isnan(want) || std::isinf(want)
                              ? (std::isnan(want) ? std::isnan(got) : got == want)
                              : std::fabs(got - want) <= lse_tol + 2 * u32 * std::fabs(want);
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": lse(b=" << b << ", h=" << h << ", row=" << row
                          << ") = " << got << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

void RunAmx(const CaseSpec& spec) {
  if (!TargetOps("amx")) GTEST_SKIP() << "AMX-BF16 not compiled, not on this CPU, or refused by the OS";
  SettingsGuard guard;
  Case c(spec);
  std::string why;
  ASSERT_TRUE(EngineSupports(c.problem(), &why)) << why;
  const Plan plan = MakePlan(c.problem());
  const bool tiles = std::any_of(plan.items.begin(), plan.items.end(), [&](const WorkItem& w) {
    return AmxRunsItem(c.problem(), w);
  });
  ASSERT_TRUE(tiles) << "no work item of this case takes the AMX tile path";

  c.ResetOutputs();
  RunReference(c.problem());
  const std::vector<uint8_t> ref_out(c.out(), c.out() + c.out_bytes());
  const std::vector<float> ref_lse = c.lse();

  SetNumThreads(1);
  SetSimdCap("avx512");
  ASSERT_EQ(SimdTarget(), "avx512");
  c.ResetOutputs();
  RunEngine(c.problem());
  const std::vector<uint8_t> avx_out(c.out(), c.out() + c.out_bytes());
  const std::vector<float> avx_lse = c.lse();

  SetSimdCap("amx");
  ASSERT_EQ(SimdTarget(), "amx");
  std::vector<uint8_t> first_out;
  std::vector<float> first_lse;
  for (int threads : {1, 2, 3}) {
    SetNumThreads(threads);
    c.ResetOutputs();
    RunEngine(c.problem());
    if (threads == 1) {
      Compare(c, ref_out, ref_lse, 1, "amx vs reference");
      Compare(c, avx_out, avx_lse, 2, "amx vs avx512");
      first_out.assign(c.out(), c.out() + c.out_bytes());
      first_lse = c.lse();
    } else {
      EXPECT_EQ(0, std::memcmp(first_out.data(), c.out(), c.out_bytes())) << threads;
      EXPECT_EQ(0, std::memcmp(first_lse.data(), c.lse().data(), first_lse.size() * 4))
          << threads;
    }
  }
}

CaseSpec Prefill(int64_t d_qk, int64_t d_v, std::vector<int64_t> q_len,
                 std::vector<int64_t> kv_len) {
  CaseSpec s;
  s.batch = static_cast<int64_t>(q_len.size());
  s.h_q = 4;
  s.h_kv = 2;
  s.d_qk = d_qk;
  s.d_v = d_v;
  s.q_len = std::move(q_len);
  s.kv_len = std::move(kv_len);
  return s;
}

TEST(Amx, OddSizesGqa) {
  RunAmx(Prefill(64, 64, {37}, {150}));       // partial row blocks, partial key tile
  RunAmx(Prefill(32, 48, {16, 9}, {64, 65}));  // d_v % 32 == 16; a batch with < 16 rows
  CaseSpec s = Prefill(128, 128, {40}, {129});
  s.h_q = 8;
  s.h_kv = 1;  // group of 8: rows of several heads in one item
  RunAmx(s);
}

TEST(Amx, CausalBands) {
  CaseSpec s = Prefill(64, 64, {70, 33}, {200, 33});
  s.causal_br = true;
  RunAmx(s);
  s.causal_br = false;
  s.pre = 20;  // sliding window: first rows see nothing to the right, later tiles skipped
  s.next = -3;
  RunAmx(s);
}

TEST(Amx, MaskWithNaNColumns) {
  CaseSpec s = Prefill(64, 32, {33, 20}, {130, 70});
  s.mask = true;  // masked columns hold NaN in K and V: they must never leak
  s.pre = 60;
  s.next = 12;
  RunAmx(s);
}

TEST(Amx, PseSinksLseAndPrefix) {
  for (Elem pe : {Elem::kF32, Elem::kBF16}) {
    CaseSpec s = Prefill(64, 64, {24, 17}, {90, 20});
    s.pse = pe;
    s.sinks = true;
    s.causal_br = true;
    RunAmx(s);
  }
  CaseSpec s = Prefill(32, 32, {20}, {50});
  s.prefix = 19;
  s.block = 16;  // paged cache behind a shared prefix: rows resolved one by one
  RunAmx(s);
}

TEST(Amx, LargeScores) {
  CaseSpec s = Prefill(64, 64, {32}, {100});
  s.amp = 8.f;  // scores of hundreds: the running max moves between tiles
  s.scale = 1.0;
  RunAmx(s);
}

TEST(Amx, FullTilesRowBlocks) {
  // Many full key tiles for whole 16-row blocks (the vectorized softmax) next to a partial
  // block (the row-by-row path); amp 4: maxima move in some rows of a block and not in others.
  CaseSpec s = Prefill(128, 128, {40}, {600});
  s.h_q = 8;
  s.h_kv = 2;
  s.amp = 4.f;
  s.scale = 0.25;
  RunAmx(s);
}

TEST(Amx, MlaRopeDecode) {
  // The MLA decode shape scaled down: one KV head for 32 query heads, nope 512 + rope 64 (K-rope
  // its own operand, paged through the same block table), d_v 512; S = 1 and S = 3 (rows of one
  // item: 32 and 96), ragged KV lengths with a partial last block and a partial key tile.
  for (int64_t s_q : {1, 3}) {
    CaseSpec s = Prefill(512, 512, {s_q, s_q}, {200, 77});
    s.h_q = 32;
    s.h_kv = 1;
    s.d_rope = 64;
    s.block = 16;
    RunAmx(s);
  }
  // Rope not a multiple of 32 channels (zero-padded pairs) and larger scores.
  CaseSpec s = Prefill(64, 32, {2}, {70});
  s.h_q = 16;
  s.h_kv = 1;
  s.d_rope = 18;
  s.block = 16;
  s.amp = 3.f;
  RunAmx(s);
}

TEST(Amx, RowPairsAndValueWidths) {
  // The general tile path (MLA rope keeps it off the prefill kernel) with ScoreRows / PvRows:
  // 48 rows (a row-block pair, then a single block), 40 rows (a pair, then a partial block run
  // on the 16-row copy), d_v 256 (packed V and accumulator rows one cache line longer), 96, and
  // 80 (not a multiple of 32: PvTile per row block).
  for (int64_t h_q : {48, 40}) {
    for (int64_t d_v : {256, 96, 80}) {
      CaseSpec s = Prefill(128, d_v, {1, 1}, {150, 64});
      s.h_q = h_q;
      s.h_kv = 1;
      s.d_rope = 64;
      s.block = 16;
      s.amp = 3.f;
      SCOPED_TRACE("h_q " + std::to_string(h_q) + " d_v " + std::to_string(d_v));
      RunAmx(s);
    }
  }
}

// The prefill kernel (amx_prefill-inl.h) on items of more than kItemRows rows (plan.cc gives dense
// prefill up to kMaxRows rows per item): proves such an item exists and takes the kernel, that
// the plan did not split it, then runs RunAmx (reference, AVX-512, 1/2/3 threads bitwise).
void RunPrefill(const CaseSpec& spec) {
  if (!TargetOps("amx")) GTEST_SKIP() << "AMX-BF16 not compiled, not on this CPU, or refused by the OS";
  Case c(spec);
  const Plan plan = MakePlan(c.problem());
  const bool big = std::any_of(plan.items.begin(), plan.items.end(), [&](const WorkItem& w) {
    return w.rows() > kItemRows && w.n_split == 1 && AmxPrefillRunsItem(c.problem(), w);
  });
  ASSERT_TRUE(big) << "no item of more than kItemRows rows takes the AMX prefill kernel";
  RunAmx(spec);
}

TEST(Amx, PrefillBigItemsCausal) {
  // Group of 4: items of 128 queries x 4 heads = 512 rows (32 blocks of 16 queries of one head),
  // then a remainder of 22 queries (blocks straddling heads). Bottom-right causal: each block
  // skips the tiles right of its diagonal and masks its diagonal tile.
  CaseSpec s = Prefill(128, 128, {150}, {300});
  s.h_q = 8;
  s.h_kv = 2;
  s.causal_br = true;
  s.amp = 2.f;
  RunPrefill(s);
  s.causal_br = false;  // every tile whole except the last, partial one (300 = 4 * 64 + 44)
  s.seed = 2;
  RunPrefill(s);
}

TEST(Amx, PrefillBigItemsMaskPseBand) {
  // Bit mask with NaN in the masked columns of K and V (the visible-cells P V path), fully masked
  // rows, a two-sided band, pse in bf16 and fp32 (vector loads) on every tile.
  for (Elem pe : {Elem::kU8, Elem::kBF16, Elem::kF32}) {
    CaseSpec s = Prefill(64, 64, {140, 70}, {200, 90});
    s.h_q = 8;
    s.h_kv = 2;
    s.mask = pe == Elem::kU8;
    s.pse = pe;
    s.pre = 100;
    s.next = 30;
    s.seed = 3;
    RunPrefill(s);
  }
}

TEST(Amx, PrefillGroupShapes) {
  // Group of 3: 160 queries per item (480 rows), a 40-query remainder (blocks wrap heads);
  // group of 1: one head, 512 queries per item; d_v % 32 == 16 (last P V chunk of 16 columns).
  CaseSpec s = Prefill(64, 48, {200}, {260});
  s.h_q = 6;
  s.h_kv = 2;
  s.causal_br = true;
  RunPrefill(s);
  s = Prefill(32, 32, {530}, {600});
  s.h_q = 1;
  s.h_kv = 1;
  s.causal_br = true;
  s.sinks = true;
  RunPrefill(s);
}

TEST(Amx, PrefillWideScores) {
  // Scores spread over hundreds of units: many exp arguments below -125 (base 2), where the
  // kernel's exp returns 0 instead of a value that would underflow (amx_prefill-inl.h,
  // Exp2NonPositive), next to the causal diagonal's masked cells (-inf).
  CaseSpec s = Prefill(64, 64, {150}, {300});
  s.h_q = 8;
  s.h_kv = 2;
  s.causal_br = true;
  s.amp = 12.f;
  s.seed = 5;
  RunPrefill(s);
}

TEST(Amx, PrefillPrefixContiguous) {
  // Contiguous caches (one tensor, then a tensor list) behind a shared prefix of 70 rows, in big
  // prefill items: the tile holding keys 64-127 mixes prefix and cache rows, batch 1 reads its
  // own base.
  for (bool tl : {false, true}) {
    CaseSpec s = Prefill(64, 64, {140, 70}, {200, 90});
    s.h_q = 8;
    s.h_kv = 2;
    s.prefix = 70;
    s.tensor_list = tl;
    s.causal_br = true;
    s.seed = 6;
    RunPrefill(s);
  }
}

}  // namespace
}  // namespace openfia::internal::testing
