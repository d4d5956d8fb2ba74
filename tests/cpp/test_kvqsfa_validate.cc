// KvQuantSparseFlashAttention validation: one test per documented constraint; each asserts that
// the error names the offending argument (and nothing is computed).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "openfia/openfia.h"
#include "common/npu_strict.h"
#include "settings_scope.h"
#include "test_arena.h"
#include "strict_check.h"
#include "test_kvqsfa_util.h"

namespace openfia {
namespace {

using kvqtest::Build;
using kvqtest::Built;
using kvqtest::Case;

// Runs the op on B's arguments after `mutate`, expects an Error naming `arg`.
void ExpectError(Built& B, const std::function<void(KvqsfaArgs&)>& mutate, const std::string& arg,
                 ErrorCode code = ErrorCode::kInvalidArgument) {
  KvqsfaArgs a = B.Args();
  // Sanity: the unmutated call is valid, so the error below comes from the mutation.
  ASSERT_NO_THROW(KvQuantSparseFlashAttentionOutputSpec(a));
  testutil::Regrow regrow({&a.sparse_indices, &a.block_table, &a.actual_seq_lengths_query,
                           &a.actual_seq_lengths_kv});
  mutate(a);
  regrow.Back();
  std::vector<uint16_t> out(1 << 20);
  try {
    KvQuantSparseFlashAttentionOutputSpec(a);
    FAIL() << "no error for " << arg;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("npu_kv_quant_sparse_flash_attention"),
              std::string::npos)
        << e.what();
  }
}

Case Small() {
  Case c;
  c.batch = 2, c.s1 = 2, c.heads = 2, c.s2 = 32, c.topk = 4;
  return c;
}
Case SmallPa() {
  Case c = Small();
  c.layout_kv = "PA_BSND";
  c.act_kv = {32, 20};
  return c;
}
Case SmallTnd() {
  Case c = Small();
  c.layout_q = c.layout_kv = "TND";
  c.act_q = {2, 1};
  c.act_kv = {20, 9};
  return c;
}

// ---- presence and reserved inputs ----
TEST(KvqsfaValidate, RequiredTensors) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query = TensorView(); }, "query");
  ExpectError(B, [](KvqsfaArgs& a) { a.key = TensorView(); }, "key");
  ExpectError(B, [](KvqsfaArgs& a) { a.value = TensorView(); }, "value");
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices = TensorView(); }, "sparse_indices");
}
TEST(KvqsfaValidate, ReservedDequantScalesMustBeAbsent) {
  Built B = Build(Small());
  static float s[1];
  ExpectError(B, [](KvqsfaArgs& a) { a.key_dequant_scale = TensorView(s, DType::kFloat32, {1}); },
              "key_dequant_scale", ErrorCode::kUnsupported);
  ExpectError(B,
              [](KvqsfaArgs& a) { a.value_dequant_scale = TensorView(s, DType::kFloat32, {1}); },
              "value_dequant_scale", ErrorCode::kUnsupported);
}

// ---- attributes ----
TEST(KvqsfaValidate, QuantModesOnlyPerTile) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key_quant_mode = 0; }, "key_quant_mode",
              ErrorCode::kUnsupported);
  ExpectError(B, [](KvqsfaArgs& a) { a.value_quant_mode = 1; }, "value_quant_mode",
              ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, AttentionModeDefaultZeroIsRejected) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.attention_mode = KvqsfaArgs().attention_mode; },
              "attention_mode", ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, QuantScaleRepoModeOnlyCombine) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.quant_scale_repo_mode = 0; }, "quant_scale_repo_mode",
              ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, TileSizeOnly128) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.tile_size = 64; }, "tile_size", ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, RopeHeadDimOnly64) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.rope_head_dim = 128; }, "rope_head_dim",
              ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, PreNextTokensOnlyMax) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.pre_tokens = 2147483647; }, "pre_tokens",
              ErrorCode::kUnsupported);
  ExpectError(B, [](KvqsfaArgs& a) { a.next_tokens = 0; }, "next_tokens",
              ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, SparseModeOnly0And3) {
  Built B = Build(Small());
  for (int64_t m : {1, 2, 4, -1})
    ExpectError(B, [m](KvqsfaArgs& a) { a.sparse_mode = m; }, "sparse_mode",
                ErrorCode::kUnsupported);
}
TEST(KvqsfaValidate, SparseBlockSizePowerOfTwoUpTo128) {
  Built B = Build(Small());
  for (int64_t s : {0, 3, 12, 256, -4})
    ExpectError(B, [s](KvqsfaArgs& a) { a.sparse_block_size = s; }, "sparse_block_size");
}
TEST(KvqsfaValidate, Layouts) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.layout_query = "BNSD"; }, "layout_query");
  ExpectError(B, [](KvqsfaArgs& a) { a.layout_query = "PA_BSND"; }, "layout_query");
  ExpectError(B, [](KvqsfaArgs& a) { a.layout_kv = "BSH"; }, "layout_kv");
  Built T = Build(SmallTnd());
  // Non-paged: layout_kv must equal layout_query.
  ExpectError(T, [](KvqsfaArgs& a) { a.layout_kv = "BSND"; }, "layout_kv");
}

// ---- query ----
TEST(KvqsfaValidate, QueryDType) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query.dtype = DType::kFloat32; }, "query");
  ExpectError(B, [](KvqsfaArgs& a) { a.query.dtype = DType::kInt8; }, "query");
}
TEST(KvqsfaValidate, QueryRankForLayout) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query = TensorView(a.query.data, a.query.dtype, {4, 2, 576}); },
              "query");
}
TEST(KvqsfaValidate, QueryNotEmpty) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query.sizes[1] = 0; a.query.strides = TensorView::ContiguousStrides(a.query.sizes); },
              "query");
}
TEST(KvqsfaValidate, QueryHeadDim576) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query = TensorView(a.query.data, a.query.dtype, {2, 2, 2, 512}); },
              "query");
}
TEST(KvqsfaValidate, QueryHeadsInDocumentedSet) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.query = TensorView(a.query.data, a.query.dtype, {2, 1, 3, 576}); },
              "query");
}

// ---- key / value ----
TEST(KvqsfaValidate, KeyDType) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key.dtype = DType::kBFloat16; }, "key");
  ExpectError(B, [](KvqsfaArgs& a) { a.key.dtype = DType::kInt32; }, "key");
}
TEST(KvqsfaValidate, KeyRankForLayout) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key = TensorView(a.key.data, a.key.dtype, {2 * 32, 1, 656}); },
              "key");
}
TEST(KvqsfaValidate, KeyRowIs656Bytes) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key = TensorView(a.key.data, a.key.dtype, {2, 32, 1, 576}); },
              "key");
}
TEST(KvqsfaValidate, KeyHeadsOne) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key = TensorView(a.key.data, a.key.dtype, {2, 16, 2, 656}); },
              "key");
}
TEST(KvqsfaValidate, KeyRowsContiguousAndAligned) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key.strides = {32 * 656 * 2, 656 * 2, 656, 2}; }, "key");
  ExpectError(B, [](KvqsfaArgs& a) { a.key.strides = {32 * 658, 658, 658, 1}; }, "key");
  ExpectError(B, [](KvqsfaArgs& a) { a.key.data = static_cast<uint8_t*>(a.key.data) + 2; },
              "key");
  ExpectError(B, [](KvqsfaArgs& a) { a.key.strides[0] = -a.key.strides[0]; }, "key");
}
TEST(KvqsfaValidate, TensorsAddressable) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.key.strides[0] = int64_t{1} << 60; }, "key");
  ExpectError(B, [](KvqsfaArgs& a) {
    a.query.sizes[1] = int64_t{1} << 50;
    a.query.strides = TensorView::ContiguousStrides(a.query.sizes);
  }, "query");
}
TEST(KvqsfaValidate, KeyBatchMatchesQuery) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) {
    a.key = TensorView(a.key.data, a.key.dtype, {1, 32, 1, 656});
    a.value = TensorView(a.value.data, a.value.dtype, {1, 32, 1, 512});
  }, "key");
}
TEST(KvqsfaValidate, ValueDTypeMatchesKey) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.value.dtype = DType::kFloat8E4M3; }, "value");
  ExpectError(B, [](KvqsfaArgs& a) { a.value.dtype = DType::kFloat16; }, "value");
}
TEST(KvqsfaValidate, ValueShapeMatchesKey) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.value.sizes[1] = 31; }, "value");
  ExpectError(B, [](KvqsfaArgs& a) { a.value.sizes[3] = 576; }, "value");
  ExpectError(B, [](KvqsfaArgs& a) { a.value.sizes.pop_back(); a.value.strides.pop_back(); },
              "value");
}

// ---- sparse_indices shape ----
TEST(KvqsfaValidate, SparseIndicesDType) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices.dtype = DType::kInt64; }, "sparse_indices");
}
TEST(KvqsfaValidate, SparseIndicesShape) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices.sizes = {2, 2, 4}; a.sparse_indices.strides = {8, 4, 1}; },
              "sparse_indices");
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices.sizes = {2, 2, 2, 2}; }, "sparse_indices");
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices.sizes = {2, 1, 1, 4}; }, "sparse_indices");
}
TEST(KvqsfaValidate, SparseSizePositive) {
  Built B = Build(Small());
  ExpectError(B, [](KvqsfaArgs& a) { a.sparse_indices.sizes = {2, 2, 1, 0}; }, "sparse_indices");
}

// ---- lengths ----
TEST(KvqsfaValidate, TndNeedsQueryLengths) {
  Built T = Build(SmallTnd());
  ExpectError(T, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(); },
              "actual_seq_lengths_query");
}
TEST(KvqsfaValidate, TndQueryLengthsCumulativeWithinT) {
  Built T = Build(SmallTnd());
  ExpectError(T, [&T](KvqsfaArgs&) { T.act_q[0] = 2; T.act_q[1] = 1; }, "actual_seq_lengths_query");
  T = Build(SmallTnd());
  ExpectError(T, [&T](KvqsfaArgs&) { T.act_q[1] = 99; }, "actual_seq_lengths_query");
}
TEST(KvqsfaValidate, QueryLengthsDTypeRankAndCount) {
  Built B = Build(Small());
  static int32_t two[2] = {1, 2};
  static float f2[2] = {1, 2};
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(f2, DType::kFloat32, {2}); },
              "actual_seq_lengths_query");
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(two, DType::kInt32, {1}); },
              "actual_seq_lengths_query");
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(two, DType::kInt32, {1, 2}); },
              "actual_seq_lengths_query");
}
TEST(KvqsfaValidate, BsndQueryLengthsWithinS1) {
  Built B = Build(Small());
  static int32_t bad[2] = {3, 1};
  static int32_t neg[2] = {1, -1};
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(bad, DType::kInt32, {2}); },
              "actual_seq_lengths_query");
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_query = TensorView(neg, DType::kInt32, {2}); },
              "actual_seq_lengths_query");
}
TEST(KvqsfaValidate, BsndKvLengthsWithinS2) {
  Built B = Build(Small());
  static int64_t bad[2] = {33, 1};
  ExpectError(B, [](KvqsfaArgs& a) { a.actual_seq_lengths_kv = TensorView(bad, DType::kInt64, {2}); },
              "actual_seq_lengths_kv");
}
TEST(KvqsfaValidate, TndNeedsKvLengthsCumulativeWithinT) {
  Built T = Build(SmallTnd());
  ExpectError(T, [](KvqsfaArgs& a) { a.actual_seq_lengths_kv = TensorView(); },
              "actual_seq_lengths_kv");
  ExpectError(T, [&T](KvqsfaArgs&) { T.act_kv[0] = 20; T.act_kv[1] = 19; }, "actual_seq_lengths_kv");
  T = Build(SmallTnd());
  ExpectError(T, [&T](KvqsfaArgs&) { T.act_kv[1] = 1000; }, "actual_seq_lengths_kv");
}

// ---- paging ----
TEST(KvqsfaValidate, PagedNeedsBlockTableAndKvLengths) {
  Built P = Build(SmallPa());
  ExpectError(P, [](KvqsfaArgs& a) { a.block_table = TensorView(); }, "block_table");
  ExpectError(P, [](KvqsfaArgs& a) { a.actual_seq_lengths_kv = TensorView(); },
              "actual_seq_lengths_kv");
}
TEST(KvqsfaValidate, BlockTableDTypeAndShape) {
  Built P = Build(SmallPa());
  ExpectError(P, [](KvqsfaArgs& a) { a.block_table.dtype = DType::kInt64; }, "block_table");
  ExpectError(P, [](KvqsfaArgs& a) { a.block_table.sizes[0] = 1; }, "block_table");
  ExpectError(P, [](KvqsfaArgs& a) {
    a.block_table.sizes = {a.block_table.sizes[0] * a.block_table.sizes[1]};
    a.block_table.strides = {1};
  }, "block_table");
}
TEST(KvqsfaValidate, BlockTableEntriesAreBlockIds) {
  Built P = Build(SmallPa());
  const int64_t cols = static_cast<int64_t>(P.block_table.size()) / 2;
  ExpectError(P, [&P](KvqsfaArgs&) { P.block_table[0] = -1; }, "block_table");
  P = Build(SmallPa());
  // Batch 1 uses ceil(20/16) = 2 blocks: its second entry is checked too.
  ExpectError(P, [&P, cols](KvqsfaArgs& a) { P.block_table[cols + 1] = static_cast<int32_t>(a.key.sizes[0]); },
              "block_table");
}
TEST(KvqsfaValidate, PagedKvLengthsAddressableByBlockTable) {
  Built P = Build(SmallPa());
  ExpectError(P, [&P](KvqsfaArgs&) { P.act_kv[1] = 33; }, "actual_seq_lengths_kv");
}
TEST(KvqsfaValidate, BlockTableWithoutPagedCacheHasNoEffect) {
  // Without PA_BSND a block_table addresses nothing: the call ignores it (even out-of-range ids).
  Built B = Build(Small());
  const int64_t n = B.out_sizes[0] * B.out_sizes[1] * B.out_sizes[2] * B.out_sizes[3];
  std::vector<uint16_t> o0(n), o1(n, 0xFFFF);
  KvQuantSparseFlashAttention(B.Args(), TensorView(o0.data(), DType::kBFloat16, B.out_sizes));
  KvqsfaArgs a = B.Args();
  static int32_t bt[2] = {-7, 1 << 30};
  a.block_table = TensorView(bt, DType::kInt32, {2, 1});
  KvQuantSparseFlashAttention(a, TensorView(o1.data(), DType::kBFloat16, B.out_sizes));
  EXPECT_EQ(o0, o1);
}

// ---- sparse_indices contents ----
TEST(KvqsfaValidate, SparseIndicesOnlyMinusOneIsNegative) {
  Built B = Build(Small());
  ExpectError(B, [&B](KvqsfaArgs&) { B.indices[0] = -2; }, "sparse_indices");
}
TEST(KvqsfaValidate, SparseIndicesValidEntriesFirst) {
  Built B = Build(Small());
  ExpectError(B, [&B](KvqsfaArgs&) { B.indices[0] = -1; B.indices[1] = 3; }, "sparse_indices");
}
TEST(KvqsfaValidate, SparseIndicesInsideTheCache) {
  // BSND: the cache holds S2 = 32 tokens per batch.
  Built B = Build(Small());
  ExpectError(B, [&B](KvqsfaArgs&) { B.indices[0] = 32; }, "sparse_indices");
  // Blocks: entry 8 with sparse_block_size 4 starts at token 32.
  B = Build(Small());
  ExpectError(B, [&B](KvqsfaArgs& a) { a.sparse_block_size = 4; B.indices[0] = 8; },
              "sparse_indices");
  // PA: block_table columns x block_size tokens.
  Built P = Build(SmallPa());
  const int32_t cap = static_cast<int32_t>(P.block_table.size() / 2 * 16);
  ExpectError(P, [&P, cap](KvqsfaArgs&) { P.indices[0] = cap; }, "sparse_indices");
  // TND: rows from the batch's start to the end of the key tensor.
  Built T = Build(SmallTnd());
  const int32_t tcap = static_cast<int32_t>(T.key_sizes[0] - T.kv_begin[1]);
  ExpectError(T, [&T, tcap](KvqsfaArgs&) { T.indices[2 * 4] = tcap; }, "sparse_indices");
}
TEST(KvqsfaValidate, UnreadEntriesAreNotChecked) {
  // sparse_mode 3, S1 = 2, S2 = 32: row 0 has threshold 31, so all 4 entries are read; but a row
  // past actual_seq_lengths_query is never read, and entries after ceil(threshold/block) neither.
  Case c = Small();
  c.act_q = {1, 2};
  Built B = Build(c);
  B.indices[1 * 4 + 0] = 1 << 30;  // batch 0, row 1: padding row
  EXPECT_NO_THROW(KvQuantSparseFlashAttentionOutputSpec(B.Args()));
  Case d = Small();
  d.act_kv = {1, 32};  // batch 0: S2 = 1 -> row 1 threshold 1: one entry read
  Built D = Build(d);
  D.indices[1 * 4 + 0] = 0;
  D.indices[1 * 4 + 1] = 1 << 30;
  D.indices[1 * 4 + 2] = -5;
  EXPECT_NO_THROW(KvQuantSparseFlashAttentionOutputSpec(D.Args()));
}

// ---- sinks ----
TEST(KvqsfaValidate, SinksFloat32PerHead) {
  Case c = Small();
  c.sinks = true;
  Built B = Build(c);
  ExpectError(B, [](KvqsfaArgs& a) { a.sinks.dtype = DType::kFloat16; }, "sinks");
  ExpectError(B, [](KvqsfaArgs& a) { a.sinks.sizes = {1}; }, "sinks");
}

// ---- output ----
TEST(KvqsfaValidate, OutputShapeDTypeContiguity) {
  Built B = Build(Small());
  std::vector<uint16_t> out(2 * 2 * 2 * 512 * 2);
  const auto expect = [&](TensorView o) {
    try {
      KvQuantSparseFlashAttention(B.Args(), o);
      FAIL() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "attention_out") << e.what();
    }
  };
  expect(TensorView(out.data(), DType::kBFloat16, {2, 2, 2, 576}));
  expect(TensorView(out.data(), DType::kFloat16, {2, 2, 2, 512}));
  expect(TensorView(out.data(), DType::kBFloat16, {2, 2, 2, 512}, {2048, 1024, 1, 2}));
  expect(TensorView());
}

// ---- NPU-strict mode: one call per relaxed NPU limit (kvqsfa_strict.cc) ----
struct StrictCase {
  std::string id;  // the row of kvqsfa_strict.cc
  std::function<Built()> make;
  std::string argument, actual_has;
};

// The product lines each row's rule names.
std::string Products(const std::string& id) {
  if (id == "kvqsfa.sparse-block-size") return "Atlas A2/A3: [1, 16]; Ascend 950: 1";
  if (id == "kvqsfa.hifloat8-sparse-size") return "Ascend 950";
  return "Atlas A2/A3 and Ascend 950";
}

Built Strided(Case c) {
  Built B = Build(c);
  B.query_wide.assign(B.query.size() * 2, 0);
  return B;
}

std::vector<StrictCase> StrictCases() {
  auto with = [](Case c, const std::function<void(Case&)>& f) {
    f(c);
    return c;
  };
  return {
      {"kvqsfa.sparse-block-size",
       [=] { return Build(with(Small(), [](Case& c) { c.sparse_block_size = 32; })); },
       "sparse_block_size", "32"},
      {"kvqsfa.sparse-block-size",
       [=] {
         return Build(with(SmallPa(), [](Case& c) { c.sparse_block_size = 16, c.block_size = 40; }));
       },
       "sparse_block_size", "16 with block_size 40"},
      {"kvqsfa.product",
       [=] {
         return Build(with(Small(), [](Case& c) {
           c.kvdt = DType::kFloat8E4M3, c.sparse_block_size = 2;
         }));
       },
       "sparse_block_size", "2 with float8_e4m3fn key"},
      {"kvqsfa.product",
       [=] { return Build(with(Small(), [](Case& c) { c.heads = 48, c.sparse_block_size = 4; })); },
       "sparse_block_size", "4 with Q_N = 48"},
      {"kvqsfa.product",
       [=] { return Build(with(Small(), [](Case& c) { c.sinks = true, c.sparse_block_size = 2; })); },
       "sparse_block_size", "2 with sinks"},
      {"kvqsfa.block-size", [=] { return Build(with(SmallPa(), [](Case& c) { c.block_size = 24; })); },
       "key", "block_size = 24"},
      {"kvqsfa.hifloat8-sparse-size",
       [=] { return Build(with(Small(), [](Case& c) { c.kvdt = DType::kHiFloat8; })); },
       "sparse_indices", "sparse_size = 4"},
      {"kvqsfa.contiguous", [=] { return Strided(Small()); }, "query", "strides"},
  };
}

TEST(KvqsfaStrict, DefaultAcceptsStrictRejectsWithTheNpuRule) {
  std::set<std::string> cased;
  for (const StrictCase& sc : StrictCases()) {
    SCOPED_TRACE(sc.id);
    cased.insert(sc.id);
    Built B = sc.make();
    const KvqsfaArgs a = B.Args();
    testutil::ExpectStrictRejects([&] { KvQuantSparseFlashAttentionOutputSpec(a); }, sc.id,
                                  Products(sc.id), sc.argument, sc.actual_has);
  }
  const std::vector<std::string> ids = internal::KvqsfaNpuLimitIds();
  EXPECT_EQ(cased, std::set<std::string>(ids.begin(), ids.end()));
}

TEST(KvqsfaStrict, AcceptsCallsTheNpuTakes) {
  testutil::NpuStrictScope on(true);
  Case blockwise = SmallPa();  // A2/A3: int8, sparse_block_size dividing block_size
  blockwise.sparse_block_size = 4;
  Case fp8 = Small();  // 950: float8 with sinks and 48 heads, token-wise
  fp8.kvdt = DType::kFloat8E4M3, fp8.sinks = true, fp8.heads = 48;
  Case hif8 = SmallTnd();  // 950: hifloat8 with sparse_size 2048
  hif8.kvdt = DType::kHiFloat8, hif8.topk = 2048;
  for (const Case& c : {Small(), blockwise, fp8, hif8}) {
    Built B = Build(c);
    EXPECT_NO_THROW(KvQuantSparseFlashAttentionOutputSpec(B.Args())) << c.layout_kv;
  }
}

}  // namespace
}  // namespace openfia
