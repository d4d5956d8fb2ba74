// SparseAttnSharedkv argument validation: one test per documented rule, each naming its argument;
// every index that addresses memory is rejected when out of range (never read).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "common/npu_strict.h"
#include "settings_scope.h"
#include "strict_check.h"
#include "test_arena.h"
#include "test_sas_fixture.h"

namespace openfia::sas_test {
namespace {

// A valid SCFA call in TND (or BSND) that each test breaks in exactly one way.
struct Call {
  SasFixture f;
  SasArgs a;
  std::vector<int32_t> i32 = std::vector<int32_t>(4096, 0);
  std::vector<int64_t> i64 = std::vector<int64_t>(16, 0);
  std::vector<float> f32 = std::vector<float>(4096, 0.f);
  explicit Call(bool tnd = true) {
    f.tnd = tnd;
    f.q_len = tnd ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4, 4};
    f.kv_len = {40, 9};
    f.ratio = 4;
    f.k2 = 5;
    f.poison = false;
    a = f.Build();
  }
};

void ExpectError(const std::function<void(Call&)>& mutate, const char* argument,
                 ErrorCode code = ErrorCode::kInvalidArgument, bool tnd = true) {
  SCOPED_TRACE(argument);
  Call c(tnd);
  ASSERT_NO_THROW(SparseAttnSharedkvOutputSpec(c.a));
  testutil::Regrow regrow({&c.a.cu_seqlens_q, &c.a.seqused_kv, &c.a.ori_block_table,
                           &c.a.cmp_block_table, &c.a.cmp_sparse_indices, &c.a.metadata});
  mutate(c);
  regrow.Back();
  try {
    SparseAttnSharedkvOutputSpec(c.a);
    ADD_FAILURE() << "expected an error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("npu_sparse_attn_sharedkv:"), std::string::npos)
        << e.what();
  }
}

const ErrorCode kU = ErrorCode::kUnsupported;

TEST(SasValidate, Layouts) {
  ExpectError([](Call& c) { c.a.layout_q = "BNSD"; }, "layout_q", kU);
  ExpectError([](Call& c) { c.a.layout_kv = "BSND"; }, "layout_kv", kU);
}

TEST(SasValidate, Query) {
  ExpectError([](Call& c) { c.a.q = TensorView(); }, "q");
  ExpectError([](Call& c) { c.a.q.dtype = DType::kInt8; }, "q");
  ExpectError([](Call& c) { c.a.q = TensorView(c.a.q.data, c.a.q.dtype, {7, 4, 2, 4}); }, "q");
  ExpectError([](Call& c) { c.a.q = TensorView(c.a.q.data, c.a.q.dtype, {7, 0, 8}); }, "q");
  ExpectError([](Call& c) { c.a.q.data = nullptr; }, "q");
}

TEST(SasValidate, OriCache) {
  ExpectError([](Call& c) { c.a.ori_kv = TensorView(); }, "ori_kv");
  ExpectError([](Call& c) { c.a.ori_kv.sizes.pop_back(), c.a.ori_kv.strides.pop_back(); },
              "ori_kv");
  ExpectError([](Call& c) { c.a.ori_kv.dtype = DType::kBFloat16; }, "ori_kv");
  ExpectError([](Call& c) { c.a.ori_kv.sizes[2] = 2; }, "ori_kv", kU);
  ExpectError([](Call& c) { c.a.ori_kv.sizes[3] = 16; }, "ori_kv");
  ExpectError([](Call& c) { c.a.ori_kv.sizes[0] = 0; }, "ori_kv");
}

TEST(SasValidate, CmpCacheAndRatio) {
  ExpectError([](Call& c) { c.a.cmp_kv.sizes[3] = 4; }, "cmp_kv");
  ExpectError([](Call& c) { c.a.cmp_kv.dtype = DType::kFloat16; }, "cmp_kv");
  ExpectError([](Call& c) { c.a.cmp_ratio.reset(); }, "cmp_ratio");
  ExpectError([](Call& c) { c.a.cmp_ratio = 8; }, "cmp_ratio", kU);
}

TEST(SasValidate, ModesAndUnsupportedArguments) {
  ExpectError([](Call& c) { c.a.ori_mask_mode = 1; }, "ori_mask_mode", kU);
  ExpectError([](Call& c) { c.a.cmp_mask_mode = 4; }, "cmp_mask_mode", kU);
  ExpectError([](Call& c) { c.a.ori_win_left = 63; }, "ori_win_left", kU);
  ExpectError([](Call& c) { c.a.ori_win_right = 1; }, "ori_win_right", kU);
  ExpectError([](Call& c) { c.a.seqused_q = TensorView(c.i32.data(), DType::kInt32, {2}); },
              "seqused_q", kU);
  ExpectError(
      [](Call& c) { c.a.ori_sparse_indices = TensorView(c.f32.data(), DType::kFloat32, {7, 1, 4}); },
      "ori_sparse_indices");
  ExpectError([](Call& c) { c.a.cu_seqlens_ori_kv = TensorView(c.i64.data(), DType::kInt64, {3}); },
              "cu_seqlens_ori_kv");
  ExpectError([](Call& c) { c.a.cu_seqlens_cmp_kv = TensorView(c.i64.data(), DType::kInt64, {3}); },
              "cu_seqlens_cmp_kv");
}

TEST(SasValidate, ArgumentsWithoutEffectAreAccepted) {
  Call c;
  // ori_sparse_indices has no effect (any int32 values); without cmp_kv, cmp_ratio (any value),
  // cmp_block_table and cmp_sparse_indices have none either.
  std::vector<int32_t> junk(7 * 4, -12345);
  c.a.ori_sparse_indices = TensorView(junk.data(), DType::kInt32, {7, 1, 4});
  c.a.cu_seqlens_ori_kv = TensorView(junk.data(), DType::kInt32, {3});
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(c.a));
  c.a.cmp_kv = TensorView();
  c.a.cmp_ratio = 8;
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(c.a));
  // BSND ignores cu_seqlens_q.
  Call b(false);
  b.a.cu_seqlens_q = TensorView(junk.data(), DType::kInt32, {9});
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(b.a));
}

TEST(SasValidate, CuSeqlensQ) {
  ExpectError([](Call& c) { c.a.cu_seqlens_q = TensorView(); }, "cu_seqlens_q");
  ExpectError([](Call& c) { c.a.cu_seqlens_q.dtype = DType::kInt64; }, "cu_seqlens_q");
  ExpectError([](Call& c) { c.a.cu_seqlens_q.sizes = {1}; }, "cu_seqlens_q");
  ExpectError([](Call& c) { c.f.cu[0] = 1; }, "cu_seqlens_q");
  ExpectError([](Call& c) { c.f.cu[1] = 8; }, "cu_seqlens_q");  // 8 > cu[2] = 7
  ExpectError([](Call& c) { c.f.cu[2] = 6; }, "cu_seqlens_q");  // != T
}

TEST(SasValidate, SequsedKv) {
  ExpectError([](Call& c) { c.a.seqused_kv = TensorView(); }, "seqused_kv");
  ExpectError([](Call& c) { c.a.seqused_kv.sizes = {3}; }, "seqused_kv");
  ExpectError([](Call& c) { c.a.seqused_kv.dtype = DType::kInt64; }, "seqused_kv");
  ExpectError([](Call& c) { c.f.seqused[1] = -1; }, "seqused_kv");
}

TEST(SasValidate, OriBlockTable) {
  ExpectError([](Call& c) { c.a.ori_block_table = TensorView(); }, "ori_block_table");
  ExpectError([](Call& c) { c.a.ori_block_table.dtype = DType::kInt64; }, "ori_block_table");
  ExpectError([](Call& c) { c.a.ori_block_table.sizes = {c.f.bt1_w * 2}; }, "ori_block_table");
  ExpectError([](Call& c) { c.a.ori_block_table.sizes[0] = 1; }, "ori_block_table");
  // Too short for ceil(max S2 / block_size): S2 = 40 needs 3 blocks of 16.
  ExpectError([](Call& c) { c.f.seqused[0] = int32_t(c.f.bt1_w * c.f.bs1 + 1); },
              "ori_block_table");
  ExpectError([](Call& c) { c.f.ori_bt[2] = -1; }, "ori_block_table");  // token 32..39's block
  ExpectError([](Call& c) { c.f.ori_bt[0] = int32_t(c.f.ori_blocks); }, "ori_block_table");
  ExpectError([](Call& c) { c.a.ori_block_table.strides = {-1, 1}; }, "ori_block_table");
  ExpectError([](Call& c) { c.a.ori_block_table.strides = {1}; }, "ori_block_table");
}

TEST(SasValidate, CmpBlockTable) {
  ExpectError([](Call& c) { c.a.cmp_block_table = TensorView(); }, "cmp_block_table");
  ExpectError([](Call& c) { c.f.cmp_bt[c.f.bt2_w] = int32_t(c.f.cmp_blocks); }, "cmp_block_table");
  ExpectError([](Call& c) { c.f.cmp_bt[0] = -1; }, "cmp_block_table");
}

TEST(SasValidate, CmpSparseIndices) {
  ExpectError([](Call& c) { c.a.cmp_sparse_indices.dtype = DType::kInt64; }, "cmp_sparse_indices");
  ExpectError([](Call& c) { c.a.cmp_sparse_indices.sizes[1] = 2; }, "cmp_sparse_indices");
  ExpectError([](Call& c) { c.a.cmp_sparse_indices.sizes[0] = 6; }, "cmp_sparse_indices");
  ExpectError(
      [](Call& c) {
        c.a.cmp_sparse_indices = TensorView(c.a.cmp_sparse_indices.data, DType::kInt32, {7, 1, 0});
      },
      "cmp_sparse_indices");
  ExpectError([](Call& c) { c.a.cmp_sparse_indices.sizes.pop_back(); }, "cmp_sparse_indices");
  // Batch 0 row 2: p = 39, thr = 10, S3 = 10: the first entry is read. 10 is out of range (a
  // read past the compressed sequence), -2 is not an index.
  ExpectError([](Call& c) { c.f.idx[2 * 5] = 10; }, "cmp_sparse_indices");
  ExpectError([](Call& c) { c.f.idx[2 * 5] = -2; }, "cmp_sparse_indices");
  ExpectError([](Call& c) { c.a.cmp_sparse_indices.sizes = {2, 3, 1, 5}; }, "cmp_sparse_indices",
              ErrorCode::kInvalidArgument, /*tnd=*/false);
}

TEST(SasValidate, UnreadIndicesAreNotChecked) {
  // Entries after a -1, at positions >= thr, or of rows before the KV sequence are never read.
  Call c;
  c.f.idx[2 * 5] = -1;  // batch 0 row 2 ends at once
  for (int n = 1; n < 5; ++n) c.f.idx[2 * 5 + n] = 1 << 30;
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(c.a));
  // Batch 1 (S2 = 9, S1 = 4): row 0 is p = 5, thr = 1: only entry 0 is read.
  c.f.idx[3 * 5 + 0] = 0;
  for (int n = 1; n < 5; ++n) c.f.idx[3 * 5 + n] = -7;
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(c.a));
}

TEST(SasValidate, SinksScaleMetadata) {
  ExpectError([](Call& c) { c.a.sinks.dtype = DType::kFloat16; }, "sinks");
  ExpectError([](Call& c) { c.a.sinks.sizes = {3}; }, "sinks");
  ExpectError([](Call& c) { c.a.sinks.strides = {2}; }, "sinks");
  ExpectError([](Call& c) { c.a.softmax_scale = std::nan(""); }, "softmax_scale");
  ExpectError([](Call& c) { c.a.metadata = TensorView(c.f32.data(), DType::kFloat32, {1024}); },
              "metadata");
  ExpectError([](Call& c) { c.a.metadata = TensorView(c.i32.data(), DType::kInt32, {512}); },
              "metadata");
  ExpectError([](Call& c) { c.a.metadata = TensorView(c.i32.data(), DType::kInt32, {1024}, {2}); },
              "metadata");
  // All zeros: no snapshot.
  ExpectError([](Call& c) { c.a.metadata = TensorView(c.i32.data(), DType::kInt32, {1024}); },
              "metadata");
}

TEST(SasValidate, Outputs) {
  Call c;
  const SasOutputSpec spec = SparseAttnSharedkvOutputSpec(c.a);
  EXPECT_EQ(spec.attention_out_sizes, (std::vector<int64_t>{7, 4, 8}));
  EXPECT_EQ(spec.softmax_lse_sizes, (std::vector<int64_t>{1, 7, 4}));
  std::vector<float> out(7 * 4 * 8), lse(7 * 4);
  auto expect = [&](const TensorView& o, const TensorView& l, const char* argument) {
    try {
      SparseAttnSharedkv(c.a, o, l);
      ADD_FAILURE() << "expected an error naming " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  const TensorView good_out(out.data(), DType::kFloat32, {7, 4, 8});
  const TensorView good_lse(lse.data(), DType::kFloat32, {1, 7, 4});
  expect(TensorView(out.data(), DType::kFloat32, {7, 4, 4}), good_lse, "attention_out");
  expect(TensorView(out.data(), DType::kFloat16, {7, 4, 8}), good_lse, "attention_out");
  expect(TensorView(out.data(), DType::kFloat32, {7, 4, 8}, {64, 1, 4}), good_lse,
         "attention_out");
  expect(good_out, TensorView(), "softmax_lse");
  expect(good_out, TensorView(lse.data(), DType::kFloat32, {7, 4, 1}), "softmax_lse");
  EXPECT_NO_THROW(SparseAttnSharedkv(c.a, good_out, good_lse));
  Call b(false);
  const SasOutputSpec bs = SparseAttnSharedkvOutputSpec(b.a);
  EXPECT_EQ(bs.softmax_lse_sizes, (std::vector<int64_t>{2, 1, 4, 4}));
  b.a.return_softmax_lse = false;
  EXPECT_EQ(SparseAttnSharedkvOutputSpec(b.a).softmax_lse_sizes, (std::vector<int64_t>{1}));
}

// ---- NPU-strict mode: one call per relaxed NPU limit (sas_strict.cc) ----
// An SCFA call the NPU takes: bfloat16, N1 64, D 512, block sizes 16, K2 512.
SasFixture NpuShaped() {
  SasFixture f;
  f.tnd = true;
  f.dtype = DType::kBFloat16;
  f.n1 = 64, f.d = 512;
  f.q_len = {3, 4};
  f.kv_len = {40, 9};
  f.bs1 = f.bs2 = 16;
  f.ratio = 4, f.k2 = 512;
  f.poison = false;
  return f;
}

struct StrictCase {
  std::string id;  // the row of sas_strict.cc
  std::function<void(SasFixture&)> change;
  std::string argument, actual_has;
};

std::vector<StrictCase> StrictCases() {
  return {
      {"sas.heads", [](SasFixture& f) { f.n1 = 4; }, "q", "N1 = 4"},
      {"sas.head-dim", [](SasFixture& f) { f.d = 64; }, "q", "D = 64"},
      {"sas.block-size", [](SasFixture& f) { f.bs1 = 8; }, "ori_kv", "block_size = 8"},
      {"sas.block-size", [](SasFixture& f) { f.bs2 = 24; }, "cmp_kv", "block_size = 24"},
      {"sas.topk", [](SasFixture& f) { f.k2 = 5; }, "cmp_sparse_indices", "K2 = 5"},
      {"sas.dtype", [](SasFixture& f) { f.dtype = DType::kFloat32; }, "q", "float32"},
      {"sas.contiguous", nullptr, "q", "strides"},
  };
}

TEST(SasStrict, DefaultAcceptsStrictRejectsWithTheNpuRule) {
  std::set<std::string> cased;
  for (const StrictCase& sc : StrictCases()) {
    SCOPED_TRACE(sc.id + " " + sc.argument);
    cased.insert(sc.id);
    SasFixture f = NpuShaped();
    if (sc.change) sc.change(f);
    SasArgs a = f.Build();
    std::vector<uint16_t> wide;
    if (!sc.change) {  // q's tokens twice as far apart as its rows need (bfloat16 elements)
      wide.assign(f.qbuf.size(), 0);
      a.q = TensorView(wide.data(), a.q.dtype, {f.T(), f.n1, f.d}, {2 * f.n1 * f.d, f.d, 1});
    }
    testutil::ExpectStrictRejects([&] { SparseAttnSharedkvOutputSpec(a); }, sc.id, "Atlas A3",
                                  sc.argument, sc.actual_has);
  }
  const std::vector<std::string> ids = internal::SasNpuLimitIds();
  EXPECT_EQ(cased, std::set<std::string>(ids.begin(), ids.end()));
}

TEST(SasStrict, AcceptsTheNpuShapedCallAndItsMetadata) {
  testutil::NpuStrictScope on(true);
  SasFixture f = NpuShaped();
  const SasArgs a = f.Build();
  EXPECT_NO_THROW(SparseAttnSharedkvOutputSpec(a));
  std::vector<int32_t> meta(1024);
  EXPECT_NO_THROW(SparseAttnSharedkvMetadata(f.MetaArgs(2),
                                             TensorView(meta.data(), DType::kInt32, {1024})));
}

TEST(SasStrict, MetadataOpNamesItsScalars) {
  SasFixture f = NpuShaped();
  f.Build();
  std::vector<int32_t> meta(1024);
  const TensorView m(meta.data(), DType::kInt32, {1024});
  const std::pair<std::function<void(SasMetadataArgs&)>, const char*> cases[] = {
      {[](SasMetadataArgs& a) { a.num_heads_q = 4; }, "num_heads_q"},
      {[](SasMetadataArgs& a) { a.head_dim = 64; }, "head_dim"},
      {[](SasMetadataArgs& a) { a.cmp_topk = 5; }, "cmp_topk"},
  };
  for (const auto& [change, argument] : cases) {
    SasMetadataArgs a = f.MetaArgs(2);
    change(a);
    {
      testutil::NpuStrictScope off(false);
      EXPECT_NO_THROW(SparseAttnSharedkvMetadata(a, m)) << argument;
    }
    testutil::NpuStrictScope on(true);
    try {
      SparseAttnSharedkvMetadata(a, m);
      ADD_FAILURE() << "strict mode accepted " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    }
  }
}

}  // namespace
}  // namespace openfia::sas_test
