// KvQuantSparseFlashAttention end to end: every layout, KV format, sparse mode and block size
// against an independent float64 computation (test_kvqsfa_util.h), with poisoned (NaN) storage
// wherever the documented semantics say nothing is read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/problem.h"
#include "engine/engine.h"
#include "openfia/openfia.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"
#include "test_kvqsfa_util.h"

namespace openfia {
namespace {

using kvqtest::Build;
using kvqtest::Built;
using kvqtest::Case;

std::vector<uint16_t> RunOp(Built& B) {
  KvqsfaArgs a = B.Args();
  const KvqsfaOutputSpec spec = KvQuantSparseFlashAttentionOutputSpec(a);
  EXPECT_EQ(spec.attention_out_sizes, B.out_sizes);
  EXPECT_EQ(spec.attention_out_dtype, B.c.qdt);
  int64_t n = 1;
  for (int64_t s : B.out_sizes) n *= s;
  std::vector<uint16_t> out(n, 0x7E00);  // garbage the op must overwrite
  KvQuantSparseFlashAttention(a, TensorView(out.data(), B.c.qdt, B.out_sizes));
  return out;
}

// Runs the case on the fp64 reference and on the engine; both must meet the oracle's bound.
void CheckOn(const Case& c, Impl impl) {
  SCOPED_TRACE(impl == Impl::kReference ? "impl ref" : "impl engine");
  const Impl prev = GetImpl();
  SetImpl(impl);  // kEngine throws kUnsupported if the engine stopped taking a case
  Built B = Build(c);
  std::vector<uint16_t> out;
  try {
    out = RunOp(B);
  } catch (...) {
    SetImpl(prev);
    throw;
  }
  SetImpl(prev);
  const kvqtest::Expected E = kvqtest::Expect(B);
  ASSERT_EQ(out.size(), E.out.size());
  int64_t nonzero_rows = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = kvqtest::FromQ(out[i], c.qdt);
    ASSERT_TRUE(std::isfinite(got)) << "element " << i;
    ASSERT_LE(std::fabs(got - E.out[i]), E.tol[i])
        << "element " << i << " got " << got << " want " << E.out[i];
    if (i % 512 == 0 && E.tol[i] > 0) ++nonzero_rows;
  }
  // Guard against a vacuous case: some rows attend keys.
  EXPECT_GT(nonzero_rows, 0);
}

void Check(const Case& c) {
  CheckOn(c, Impl::kReference);
  CheckOn(c, Impl::kEngine);
}

TEST(Kvqsfa, BsndInt8CausalBf16) {
  Case c;
  c.batch = 2, c.s1 = 3, c.heads = 2, c.s2 = 37, c.topk = 12;
  Check(c);
}

TEST(Kvqsfa, BsndInt8Mode0F16WithLengths) {
  Case c;
  c.qdt = DType::kFloat16;
  c.sparse_mode = 0;
  c.batch = 3, c.s1 = 4, c.heads = 4, c.s2 = 29, c.topk = 9;
  c.act_q = {4, 0, 2};
  c.act_kv = {29, 5, 0};  // batch 2: no KV at all -> zero rows
  Check(c);
}

TEST(Kvqsfa, TndFp8BlockSparse) {
  Case c;
  c.layout_q = c.layout_kv = "TND";
  c.kvdt = DType::kFloat8E4M3;
  c.batch = 3, c.heads = 8, c.topk = 6, c.sparse_block_size = 4;
  c.act_q = {2, 3, 1};
  c.act_kv = {17, 2, 30};  // batch 1: S1 > S2, so rows i < S1 - S2 are 0 in mode 3
  c.s2 = 30;
  Check(c);
}

TEST(Kvqsfa, PagedHiFloat8WithPoisonedPages) {
  Case c;
  c.layout_kv = "PA_BSND";
  c.kvdt = DType::kHiFloat8;
  c.batch = 2, c.s1 = 3, c.heads = 1, c.s2 = 70, c.topk = 10, c.block_size = 16;
  c.sparse_block_size = 8;
  c.act_kv = {70, 33};
  Check(c);
}

TEST(Kvqsfa, PagedUint8CarriesHiFloat8AndNonContiguousPool) {
  Case c;
  c.layout_kv = "PA_BSND";
  c.kvdt = DType::kUInt8;
  c.qdt = DType::kFloat16;
  c.batch = 1, c.s1 = 2, c.heads = 2, c.s2 = 40, c.topk = 7, c.block_size = 24;
  c.key_dim0_pad = 5;  // pool dim 0 strided (torch_npu allows dim-0 non-contiguous PA caches)
  Check(c);
}

TEST(Kvqsfa, TndQueryWithPagedKvAndSinks) {
  Case c;
  c.layout_q = "TND";
  c.layout_kv = "PA_BSND";
  c.batch = 2, c.heads = 16, c.s2 = 48, c.topk = 16, c.block_size = 16;
  c.act_q = {3, 2};
  c.act_kv = {48, 20};
  c.sinks = true;
  Check(c);
}

TEST(Kvqsfa, LargeSparseBlockAndManyHeads) {
  Case c;
  c.batch = 1, c.s1 = 2, c.heads = 128, c.s2 = 300, c.topk = 4, c.sparse_block_size = 128;
  c.sparse_mode = 0;
  c.seed = 7;
  Check(c);
}

// Hand-written selection: duplicates count twice, a block starting at the causal threshold is
// skipped, entries after the readable count are not read, a row of -1 is 0.
TEST(Kvqsfa, SelectionRulesExactly) {
  Case c;
  c.batch = 1, c.s1 = 3, c.heads = 1, c.s2 = 8, c.topk = 4, c.sparse_mode = 3;
  Built B = Build(c);
  // S1 = 3, S2 = 8: thresholds 6, 7, 8 for rows 0, 1, 2.
  const int32_t rows[3][4] = {
      {6, 1, 1, -1},   // 6 is at the threshold: skipped; token 1 twice
      {-1, -1, -1, -1},  // nothing: row is 0
      {7, 0, 5, 2},    // all read (ceil(8/1) = 8 >= 4)
  };
  for (int r = 0; r < 3; ++r)
    for (int e = 0; e < 4; ++e) B.indices[r * 4 + e] = rows[r][e];
  const std::vector<uint16_t> out = RunOp(B);
  const kvqtest::Expected E = kvqtest::Expect(B);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_LE(std::fabs(kvqtest::FromQ(out[i], c.qdt) - E.out[i]), E.tol[i]) << i;
  for (int d = 0; d < 512; ++d) EXPECT_EQ(out[512 + d], 0) << d;  // row 1 is exactly 0

  // Duplicates are attended as often as they appear: row 2 with {7, 0, 5, -1} and with
  // {7, 0, 5, 0} differ, and each matches the expectation that counts multiplicity.
  B.indices[8 + 3] = -1;
  const std::vector<uint16_t> once = RunOp(B);
  B.indices[8 + 3] = 0;
  const std::vector<uint16_t> twice = RunOp(B);
  const kvqtest::Expected E1 = kvqtest::Expect(B);
  bool differs = false;
  for (int d = 0; d < 512; ++d) {
    const size_t i = 2 * 512 + d;
    ASSERT_LE(std::fabs(kvqtest::FromQ(twice[i], c.qdt) - E1.out[i]), E1.tol[i]) << d;
    differs |= once[i] != twice[i];
  }
  EXPECT_TRUE(differs);
}

// The canonical problem carries the selection as per-row token lists.
TEST(Kvqsfa, CanonicalTokenLists) {
  Case c;
  c.batch = 2, c.s1 = 2, c.heads = 2, c.s2 = 10, c.topk = 3, c.sparse_block_size = 4;
  c.act_kv = {10, 3};
  Built B = Build(c);
  const int32_t idx[2][2][3] = {{{0, 2, -1}, {1, 0, -1}}, {{0, 0, 5}, {-1, -1, -1}}};
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int e = 0; e < 3; ++e) B.indices[(b * 2 + i) * 3 + e] = idx[b][i][e];
  const KvqsfaArgs a = B.Args();
  const internal::KvqsfaShape sh = internal::ValidateKvqsfa(a);
  std::vector<uint16_t> out(2 * 2 * 2 * 512);
  const internal::Problem p =
      internal::CanonicalizeKvqsfa(a, sh, TensorView(out.data(), c.qdt, B.out_sizes));
  // batch 0 (S1 2, S2 10): thresholds 9, 10. row 0: block 0 -> 0..3, block 2 -> 8 (8 < 9).
  // row 1: block 1 -> 4..7, block 0 -> 0..3. batch 1 (S2 3): thresholds 2, 3; readable
  // ceil(2/4) = 1 entry: block 0 -> 0..1; row 1: -1 -> nothing.
  const std::vector<int32_t> want = {0, 1, 2, 3, 8, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1};
  EXPECT_EQ(p.key_index, want);
  EXPECT_EQ(p.key_offset, (std::vector<int64_t>{0, 5, 13, 15, 15}));
  EXPECT_EQ(p.q_row_base, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(p.k.dequant.kind, internal::Dequant::Kind::kPerTile);
  EXPECT_EQ(p.k.dequant.d_group, 128);
  EXPECT_EQ(p.d_qk, 512);
  EXPECT_EQ(p.d_rope, 64);
  EXPECT_EQ(p.d_v, 512);
  // The engine runs sparse selections over per-tile quantized rows (kv_rows-inl.h ResolveEntry).
  std::string why;
  EXPECT_TRUE(internal::EngineSupports(p, &why)) << why;
}

}  // namespace
}  // namespace openfia
