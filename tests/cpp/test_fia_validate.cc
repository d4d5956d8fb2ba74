// FusedInferAttentionScore validation and canonicalization: a table with one row per rule (an
// otherwise valid call with one thing broken -> the argument, the code, the rule word for word
// and a part of the offending value the Error must carry), positive tests for every
// layout/feature with the documented output shapes, and checks of the canonical Problem
// (strides, ranges, bands, masks, dequant, NZ addressing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/problem.h"
#include "openfia/openfia.h"
#include "ops/fused_infer_attention_score/fia_geometry.h"
#include "ops/fused_infer_attention_score/fia_internal.h"
#include "common/npu_strict.h"
#include "settings_scope.h"
#include "strict_check.h"
#include "test_arena.h"

namespace openfia::internal {
namespace {

using testutil::Arena;

struct Call {
  Arena ar;
  FiaArgs a;
};
using CallPtr = std::unique_ptr<Call>;

// Shape of query / key / value in input_layout `layout` (the part before "_").
std::vector<int64_t> QShape(const std::string& layout, int64_t b, int64_t s, int64_t n,
                            int64_t d) {
  const std::string l = layout.substr(0, layout.find('_'));
  if (l == "BSH") return {b, s, n * d};
  if (l == "BSND") return {b, s, n, d};
  if (l == "TND") return {b * s, n, d};
  if (l == "NTD") return {n, b * s, d};
  return {b, n, s, d};  // BNSD
}

// TND, NTD, TND_NTD, NTD_TND: the batches share one T axis.
bool Packed(const std::string& layout) {
  const std::string in = layout.substr(0, layout.find('_'));
  return in == "TND" || in == "NTD";
}

// A valid dense call: B batches of q_s query rows and kv_s key rows (TND: uniform lengths).
CallPtr Dense(const std::string& layout = "BSH", int64_t b = 3, int64_t q_s = 17, int64_t n = 3,
              int64_t kvn = 3, int64_t d = 17, int64_t kv_s = 17, DType dt = DType::kFloat16,
              int64_t dv = -1) {
  if (dv < 0) dv = d;
  auto c = std::make_unique<Call>();
  FiaArgs& a = c->a;
  a.input_layout = layout;
  a.num_heads = n;
  a.num_key_value_heads = kvn == n ? 0 : kvn;
  a.query = c->ar.T(dt, QShape(layout, b, q_s, n, d));
  a.key = c->ar.T(dt, QShape(layout, b, kv_s, kvn, d));
  a.value = c->ar.T(dt, QShape(layout, b, kv_s, kvn, dv));
  if (Packed(layout)) {
    std::vector<int64_t> q, kv;
    for (int64_t i = 1; i <= b; ++i) q.push_back(i * q_s), kv.push_back(i * kv_s);
    a.actual_seq_lengths = q;
    a.actual_seq_lengths_kv = kv;
  }
  return c;
}

// A valid paged call: form 3 ([bn, bs, H]), 4 ([bn, N, bs, D]) or 5 (NZ). Batch b uses blocks
// b*per, b*per+1, ...; unused table entries hold -1.
CallPtr Paged(int form, int64_t b = 3, int64_t q_s = 1, int64_t n = 3, int64_t kvn = 1,
              int64_t d = 32, int64_t bs = 3, std::vector<int64_t> act = {7, 1, 5},
              DType dt = DType::kFloat16, const std::string& layout = "BSH") {
  auto c = std::make_unique<Call>();
  FiaArgs& a = c->a;
  a.input_layout = layout;
  a.num_heads = n;
  a.num_key_value_heads = kvn;
  a.query = c->ar.T(dt == DType::kInt8 || dt == DType::kInt32 ? DType::kFloat16 : dt,
                    QShape(layout, b, q_s, n, d));
  int64_t per = 0;
  for (int64_t x : act) per = std::max(per, (x + bs - 1) / bs);
  const int64_t cols = per + 1;  // one spare column
  const int64_t bn = b * per + 2;
  const int64_t base = dt == DType::kInt8 ? 32 : 16;
  std::vector<int64_t> ks;
  if (form == 3) ks = {bn, bs, kvn * d};
  if (form == 4) ks = {bn, kvn, bs, d};
  if (form == 5) ks = {bn, kvn, d / base, bs, base};
  a.key = c->ar.T(dt, ks);
  a.value = c->ar.T(dt, ks);
  a.block_size = bs;
  a.block_table = c->ar.T(DType::kInt32, {b, cols});
  auto* bt = static_cast<int32_t*>(a.block_table.data);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < cols; ++j)
      bt[i * cols + j] = j < (act[i] + bs - 1) / bs ? static_cast<int32_t>(i * per + j) : -1;
  a.actual_seq_lengths_kv = act;
  return c;
}

// int8 KV with a float16 query and per-channel legacy antiquant (Q_S = 1 unless told).
CallPtr Antiquant(int64_t q_s = 1, const std::string& layout = "BSH") {
  auto c = Dense(layout, 3, q_s, 3, 3, 17, 17, DType::kFloat16);
  FiaArgs& a = c->a;
  a.key = c->ar.T(DType::kInt8, a.key.sizes);
  a.value = c->ar.T(DType::kInt8, a.value.sizes);
  a.antiquant_scale = c->ar.T(DType::kFloat16, {2, 3 * 17});
  return c;
}

// int8 Q/K/V full quantization (Q_S > 1).
CallPtr FullQuant() {
  auto c = Dense("BSH", 3, 17, 3, 3, 17, 17, DType::kInt8);
  c->a.dequant_scale1 = c->ar.F32({1}, 0.5f);
  c->a.quant_scale1 = c->ar.F32({1}, 2.f);
  c->a.dequant_scale2 = c->ar.F32({1}, 0.25f);
  return c;
}

// Separate K/V antiquant (key_/value_antiquant_mode) on an int8 Q_S = 1 dense or paged call.
CallPtr SepAq(int mode, bool paged = false) {
  CallPtr c = paged ? Paged(4, 3, 1, 3, 1, 32, 3, {7, 1, 5}, DType::kInt8) : Antiquant(1);
  FiaArgs& a = c->a;
  a.antiquant_scale = TensorView();
  const int64_t B = 3, N = a.num_key_value_heads ? a.num_key_value_heads : 3;
  const int64_t D = paged ? 32 : 17, S = 17;
  const int64_t bn = paged ? a.key.size(0) : 0, bs = paged ? a.block_size : 0;
  std::vector<int64_t> shape;
  DType dt = DType::kFloat32;
  switch (mode) {
    case 0: shape = {1, N, 1, D}; dt = DType::kFloat16; break;
    case 1: shape = {1, B, S}; break;
    case 2: shape = {N}; dt = DType::kFloat16; break;
    case 3: shape = {B, N, S}; break;
    case 4: shape = {bn, bs}; break;
    case 5: shape = {bn, N, bs}; break;
  }
  a.key_antiquant_scale = c->ar.T(dt, shape);
  a.value_antiquant_scale = c->ar.T(dt, shape);
  a.key_antiquant_mode = a.value_antiquant_mode = mode;
  return c;
}

FiaOutputSpec Validate(const FiaArgs& a) { return AnalyzeFia(a).spec; }
// A Problem may point into its call's analysis: the analyses of a test binary are kept alive.
Problem Canon(const FiaArgs& a) {
  static std::deque<FiaGeometry> analyses;
  analyses.push_back(AnalyzeFia(a));
  return CanonicalizeFia(a, analyses.back(), TensorView(), TensorView());
}

// ------------------------------------------------------------------------------------------
// Negative tests: one per rule.
// ------------------------------------------------------------------------------------------
struct BadCase {
  std::string name;
  std::function<CallPtr()> make;
  std::string argument;
  ErrorCode code;
  std::string actual_has;  // a substring the "got ..." part must contain
  std::string rule;        // the rule, word for word
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

class FiaRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(FiaRejects, NamesArgumentRuleAndValue) {
  const BadCase& bc = GetParam();
  CallPtr c = bc.make();
  try {
    Validate(c->a);
    FAIL() << "no error for " << bc.name;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), bc.argument) << e.what();
    EXPECT_EQ(e.code(), bc.code) << e.what();
    EXPECT_EQ(e.rule(), bc.rule) << e.what();
    EXPECT_NE(e.actual().find(bc.actual_has), std::string::npos)
        << "actual '" << e.actual() << "' lacks '" << bc.actual_has << "'; " << e.what();
  }
}

constexpr ErrorCode kBad = ErrorCode::kInvalidArgument;
constexpr ErrorCode kUns = ErrorCode::kUnsupported;

// Helpers for the table: start from a maker, apply a mutation.
std::function<CallPtr()> With(std::function<CallPtr()> make, std::function<void(Call&)> f) {
  return [make, f] {
    CallPtr c = make();
    f(*c);
    return c;
  };
}
CallPtr D0() { return Dense(); }
CallPtr Inc() { return Dense("BSH", 3, 1); }

std::vector<BadCase> BadCases() {
  using C = Call&;
  std::vector<BadCase> v = {
      // ---- existence and well-formedness ----
      {"QueryMissing", With(D0, [](C c) { c.a.query = TensorView(); }), "query", kBad, "None",
       "is required"},
      {"KeyMissing", With(D0, [](C c) { c.a.key = TensorView(); }), "key", kBad, "None",
       "is required"},
      {"ValueMissing", With(D0, [](C c) { c.a.value = TensorView(); }), "value", kBad, "None",
       "is required"},
      {"KeyListWithoutValueList",
       With(D0, [](C c) { c.a.key_list = {c.ar.T(DType::kFloat16, {1, 17, 51})}; }),
       "value_list", kBad, "empty value_list",
       "key_list and value_list must be given together"},
      {"StridesWrongLength", With(D0, [](C c) { c.a.query.strides = {1, 2}; }), "query", kBad,
       "strides [1, 2]",
       "strides must have one entry per dimension"},
      {"NegativeSize", With(D0, [](C c) { c.a.key.sizes[1] = -4; }), "key", kBad, "-4",
       "sizes must be non-negative"},
      {"NullDataWithElements", With(D0, [](C c) { c.a.value.data = nullptr; }), "value", kBad,
       "null",
       "data must not be a null pointer when the tensor has elements"},
      {"NumelOverflow",
       With(D0,
            [](C c) {
              c.a.query.sizes = {1 << 30, 1 << 30, 1 << 30};
              c.a.query.strides = {1, 1, 1};  // (ContiguousStrides itself would overflow)
            }),
       "query", kBad, "1073741824",
       "the number of elements must not exceed 72057594037927936"},
      {"QueryRopeWithoutKeyRope",
       With(D0, [](C c) { c.a.query_rope = c.ar.T(DType::kFloat16, {3, 17, 3}); }), "key_rope",
       kBad, "only one",
       "query_rope and key_rope must be given together (要求同时配置或同时不配置)"},
      {"KeyPrefixWithoutValuePrefix",
       With(D0, [](C c) { c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51}); }),
       "value_shared_prefix", kBad, "only one",
       "key_shared_prefix and value_shared_prefix must both be None or both be given"},
      {"KeyAqScaleWithoutValue",
       With([] { return Antiquant(); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 51}); }),
       "value_antiquant_scale", kBad, "only one",
       "key_antiquant_scale and value_antiquant_scale must both be None or both be given"},
      {"AntiquantOffsetWithoutScale",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_offset = c.a.antiquant_scale;
              c.a.antiquant_scale = TensorView();
            }),
       "antiquant_offset", kBad, "None",
       "requires antiquant_scale (非对称量化模式下需同时存在)"},
      {"QuantOffset2WithoutScale2",
       With(D0, [](C c) { c.a.quant_offset2 = c.ar.F32({1}, 0.f); }), "quant_offset2", kBad,
       "None",
       "requires quant_scale2"},
      {"KeyRopeAntiquantScaleReserved",
       With(D0, [](C c) { c.a.key_rope_antiquant_scale = c.ar.F32({1}, 1.f); }),
       "key_rope_antiquant_scale", kUns, "[1]",
       "is a reserved parameter (预留参数，暂未使用) and must be None"},
      // ---- attributes ----
      {"BadLayout", With(D0, [](C c) { c.a.input_layout = "SBH"; }), "input_layout", kBad,
       "SBH",
       "must be one of BSH, BSND, BNSD, TND, NTD, BNSD_BSND, BSH_BNSD, BSND_BNSD, BSH_NBSD, "
       "BSND_NBSD, BNSD_NBSD, TND_NTD, NTD_TND"},
      {"NumHeadsZero", With(D0, [](C c) { c.a.num_heads = 0; }), "num_heads", kBad, "0",
       "must be >= 1"},
      {"NumKvHeadsNegative", With(D0, [](C c) { c.a.num_key_value_heads = -1; }),
       "num_key_value_heads", kBad, "-1",
       "must be >= 0 (0 means equal to num_heads)"},
      {"NumHeadsNotDivisible", With(D0, [](C c) { c.a.num_key_value_heads = 2; }),
       "num_key_value_heads", kBad, "num_key_value_heads = 2",
       "num_heads must be divisible by num_key_value_heads (需要满足num_heads整除num_key_value_heads)"},
      {"ScaleNaN", With(D0, [](C c) { c.a.scale = std::nan(""); }), "scale", kBad, "nan",
       "must be a finite number"},
      {"ScaleInf",
       With(D0, [](C c) { c.a.scale = std::numeric_limits<double>::infinity(); }), "scale", kBad,
       "inf",
       "must be a finite number"},
      {"InnerPrecise4", With(D0, [](C c) { c.a.inner_precise = 4; }), "inner_precise", kBad,
       "4",
       "must be 0, 1, 2 or 3"},
      {"InnerPrecise2WhenQs1", With(Inc, [](C c) { c.a.inner_precise = 2; }), "inner_precise",
       kBad, "2",
       "must be 0 or 1 when Q_S is 1 (Q_S为1时该参数仅支持0和1)"},
      // ---- query ----
      {"QueryDtypeInt32", With(D0, [](C c) { c.a.query.dtype = DType::kInt32; }), "query", kBad,
       "int32",
       "dtype must be float16, bfloat16, float32 or int8"},
      {"QueryNonContiguous",
       With(D0, [](C c) { c.a.query.strides = {17 * 51, 1, 17}; }), "query", kBad, "strides",
       "does not support non-contiguous tensors (不支持非连续)"},
      {"QueryRank", With(D0, [](C c) { c.a.query = c.ar.T(DType::kFloat16, {3, 17}); }), "query",
       kBad, "[3, 17]",
       "must be 3-D [B, S, H] for input_layout BSH"},
      {"BshHNotDivisible", With(D0, [](C c) { c.a.num_heads = 4; c.a.num_key_value_heads = 1; }),
       "query", kBad, "H = 51",
       "H must be divisible by num_heads"},
      {"BsndHeadsMismatch",
       With([] { return Dense("BSND"); }, [](C c) { c.a.num_heads = 1; }), "query", kBad,
       "N = 3",
       "the N axis must equal num_heads"},
      {"BnsdBsndWithQs1", With([] { return Dense("BNSD_BSND", 3, 1); }, [](C) {}),
       "input_layout", kUns, "BNSD_BSND",
       "BNSD_BSND is only supported when Q_S > 1 (仅支持Q_S大于1)"},
      {"TndWithoutActualSeqLengths",
       With([] { return Dense("TND"); }, [](C c) { c.a.actual_seq_lengths.reset(); }),
       "actual_seq_lengths", kBad, "None",
       "must be given for input_layout TND (该入参必须传入)"},
      {"SparseMode9", With(D0, [](C c) { c.a.sparse_mode = 9; }), "sparse_mode", kBad, "9",
       "must be 0, 1, 2, 3 or 4"},
      {"SparseModeNegative", With(D0, [](C c) { c.a.sparse_mode = -1; }), "sparse_mode", kBad,
       "-1",
       "must be 0, 1, 2, 3 or 4"},
      {"SparseMode5Unsupported", With(D0, [](C c) { c.a.sparse_mode = 5; }), "sparse_mode", kUns,
       "5",
       "5, 6, 7, 8 (prefix, global, dilated, block_local) are not supported (均暂不支持)"},
      {"SparseMode8Unsupported", With(D0, [](C c) { c.a.sparse_mode = 8; }), "sparse_mode", kUns,
       "8",
       "5, 6, 7, 8 (prefix, global, dilated, block_local) are not supported (均暂不支持)"},
      // ---- key / value ----
      {"KeyDtypeUint8",
       With(D0, [](C c) { c.a.key.dtype = c.a.value.dtype = DType::kUInt8; }), "key", kBad,
       "uint8",
       "dtype must be float16, bfloat16, float32, int8 or int4 (int32)"},
      {"ValueDtypeDiffers", With(D0, [](C c) { c.a.value.dtype = DType::kBFloat16; }), "value",
       kBad, "bfloat16",
       "dtype must equal the key dtype"},
      {"KeyFloatDtypeDiffersFromQuery",
       With(D0,
            [](C c) { c.a.key.dtype = c.a.value.dtype = DType::kBFloat16; }),
       "key", kBad, "bfloat16",
       "dtype must equal the query dtype, or be int8/int4 (int32) for antiquant"},
      {"Int8QueryFloatKey", With(D0, [](C c) { c.a.query.dtype = DType::kInt8; }), "key", kBad,
       "float16",
       "must be int8 when query is int8"},
      {"Int8AllWhenQs1",
       With([] { return Dense("BSH", 3, 1, 3, 3, 17, 17, DType::kInt8); }, [](C) {}), "query",
       kUns, "Q_S = 1",
       "int8 query, key and value are not supported when Q_S is 1 (query、key、value输入类型均为int8的场景暂不支持)"},
      {"KeyNonContiguous", With(D0, [](C c) { c.a.key.strides = {1, 3, 51}; }), "key", kBad,
       "strides",
       "does not support non-contiguous tensors (不支持非连续)"},
      {"KeyBatchMismatch",
       With(D0, [](C c) { c.a.key = c.ar.T(DType::kFloat16, {2, 17, 51}); }), "key", kBad, "2",
       "the batch axis must equal the query batch"},
      {"KeyDMismatch",
       With(D0,
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {3, 17, 48});
              c.a.value = c.ar.T(DType::kFloat16, {3, 17, 48});
            }),
       "key", kBad, "16 vs 17",
       "D must equal the query D"},
      {"ValueSeqMismatch",
       With(D0, [](C c) { c.a.value = c.ar.T(DType::kFloat16, {3, 16, 51}); }), "value", kBad,
       "[3, 16, 51]",
       "shape must equal the key shape (except the head dim D)"},
      {"KeyListCount",
       With(D0,
            [](C c) {
              c.a.key_list = {c.ar.T(DType::kFloat16, {1, 17, 51})};
              c.a.value_list = {c.ar.T(DType::kFloat16, {1, 17, 51})};
            }),
       "key_list", kBad, "1 tensors for batch 3",
       "must hold one tensor per batch (个数等于query的B)"},
      {"KeyListBatchNot1",
       With(D0,
            [](C c) {
              for (int i = 0; i < 3; ++i) {
                c.a.key_list.push_back(c.ar.T(DType::kFloat16, {2, 17, 51}));
                c.a.value_list.push_back(c.ar.T(DType::kFloat16, {2, 17, 51}));
              }
            }),
       "key_list", kBad, "[2, 17, 51]",
       "every tensor must have batch 1 (batch只能为1)"},
      // ---- paging ----
      {"PagedWithKeyList",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key_list = {c.a.key};
              c.a.value_list = {c.a.value};
            }),
       "block_table", kUns, "1 key tensors",
       "page attention does not support tensorlist key/value (page attention不支持tensorlist场景)"},
      {"PagedKey2D",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "[8, 32]",
       "with block_table must be [blocknum, block_size, H], [blocknum, KV_N, block_size, D] or NZ [blocknum, KV_N, D/16, block_size, 16]"},
      {"Paged3DMismatch",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 3, 16});
              c.a.value = c.a.key;
            }),
       "key", kBad, "16 vs 32",
       "D = H / KV_N must equal the query D"},
      {"Paged4HeadsMismatch",
       With([] { return Paged(4); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 2, 3, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "2 vs 1",
       "KV_N of [blocknum, KV_N, block_size, D] must equal num_key_value_heads"},
      {"PagedNzLastAxis",
       With([] { return Paged(5); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 1, 1, 3, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "[8, 1, 1, 3, 32]",
       "the last axis of an NZ cache must be 16 for float16"},
      {"BlockSizeZero", With([] { return Paged(3); }, [](C c) { c.a.block_size = 0; }),
       "block_size", kBad, "0",
       "must be >= 1 with page attention (openfia accepts any block size)"},
      {"BlockSizeMismatch", With([] { return Paged(3); }, [](C c) { c.a.block_size = 4; }),
       "block_size", kBad, "4 vs key",
       "must equal the block size axis of the key cache"},
      {"BlockTableDtype",
       With([] { return Paged(3); }, [](C c) { c.a.block_table.dtype = DType::kInt64; }),
       "block_table", kBad, "int64",
       "dtype must be int32"},
      {"BlockTable1D",
       With([] { return Paged(3); }, [](C c) { c.a.block_table = c.ar.T(DType::kInt32, {9}); }),
       "block_table", kBad, "[9]",
       "must be 2-D [B, maxBlockNumPerSeq] (block_table必须为二维)"},
      {"BlockTableRows",
       With([] { return Paged(3); },
            [](C c) { c.a.block_table = c.ar.T(DType::kInt32, {2, 4}); }),
       "block_table", kBad, "B = 3",
       "the first axis must equal the batch B"},
      {"BlockTableColumnStride",
       With([] { return Paged(3); }, [](C c) { c.a.block_table.strides = {1, 3}; }),
       "block_table", kBad, "strides",
       "rows must be contiguous (column stride 1, row stride >= 0)"},
      {"BlockTableTooFewColumns",
       With([] { return Paged(3); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{7, 1, 13}; }),
       "block_table", kBad, "batch 2 needs 5 blocks",
       "the second axis must not be smaller than maxBlockNumPerSeq = ceil(actual_seq_lengths_kv / block_size)"},
      {"BlockIdPastBlocknum",
       With([] { return Paged(3); },
            [](C c) { static_cast<int32_t*>(c.a.block_table.data)[1] = 11; }),
       "block_table", kBad, "block_table[0][1] = 11",
       "every block id a batch uses must be in [0, blocknum = 11)"},
      {"BlockIdNegativeInUse",
       With([] { return Paged(3); },
            [](C c) { static_cast<int32_t*>(c.a.block_table.data)[4] = -1; }),
       "block_table", kBad, "block_table[1][0] = -1",
       "every block id a batch uses must be in [0, blocknum = 11)"},
      {"BlocknumTooSmall",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {4, 3, 32});
              c.a.value = c.a.key;
              static_cast<int32_t*>(c.a.block_table.data)[1] = 0;
              static_cast<int32_t*>(c.a.block_table.data)[2] = 1;
              static_cast<int32_t*>(c.a.block_table.data)[4] = 2;
              static_cast<int32_t*>(c.a.block_table.data)[8] = 3;
              static_cast<int32_t*>(c.a.block_table.data)[9] = 3;
            }),
       "key", kBad, "needed 6",
       "blocknum must not be smaller than the sum of the blocks every batch needs (blocknum不能小于每个batch的block数量之和)"},
      {"PagedWithoutActualSeqLengthsKv",
       With([] { return Paged(3); }, [](C c) { c.a.actual_seq_lengths_kv.reset(); }),
       "actual_seq_lengths_kv", kBad, "None",
       "must be given with page attention (page attention场景下，必须传入)"},
      {"PagedActualKvHuge",
       With([] { return Paged(3); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{INT64_MAX}; }),
       "actual_seq_lengths_kv", kBad, "9223372036854775807",
       "values must be in [0, 72057594037927936]"},
      {"BlockTableExtentOverflow",
       With([] { return Paged(3); },
            [](C c) { c.a.block_table.strides = {int64_t{1} << 62, 1}; }),
       "block_table", kBad, "strides",
       "row stride times rows must stay addressable"},
      // ---- actual lengths ----
      {"ActualSeqLengthsBadLength",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{3, 4}; }),
       "actual_seq_lengths", kBad, "length 2",
       "length must be 1 or at least the batch size 3"},
      {"ActualSeqLengthsEmpty",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{}; }),
       "actual_seq_lengths", kBad, "length 0",
       "length must be 1 or at least the batch size 3"},
      {"ActualSeqLengthsTooLong",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{3, 18, 1}; }),
       "actual_seq_lengths", kBad, "batch 1: 18",
       "each value must be in [0, Q_S = 17] (不大于query中对应batch的seqlen)"},
      {"ActualSeqLengthsNegative",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{-1}; }),
       "actual_seq_lengths", kBad, "-1",
       "each value must be in [0, Q_S = 17] (不大于query中对应batch的seqlen)"},
      {"ActualSeqLengthsKvTooLong",
       With(D0, [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{1, 2, 18, 99}; }),
       "actual_seq_lengths_kv", kBad, "batch 2: 18",
       "each value must be in [0, KV_S = 17] (不大于key/value中对应batch的seqlenKv)"},
      {"TndDecreasing",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{17, 10, 51}; }),
       "actual_seq_lengths", kBad, "10 after 17",
       "TND: each value is the cumulative length and must be >= the previous one"},
      {"TndLastPastT",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{17, 34, 52}; }),
       "actual_seq_lengths", kBad, "52 > 51",
       "TND: the last value must not exceed T of query"},
      {"TndNegative",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{-1, 34, 51}; }),
       "actual_seq_lengths", kBad, "-1",
       "values must be non-negative (不能出现负值)"},
      {"TndKvCount",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 34}; }),
       "actual_seq_lengths_kv", kBad, "2 vs 3",
       "with TND its length must equal the batch (元素的数量等于Batch值)"},
      {"TndKvLastPastT",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 34, 60}; }),
       "actual_seq_lengths_kv", kBad, "60 > 51",
       "TND: the last value must not exceed T of key"},
      // ---- left padding ----
      {"QueryPaddingStartNegative",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.I64(8);
            }),
       "query_padding_size", kBad, "query_padding_size = 8",
       "query left padding start Q_S - query_padding_size - actual_seq_lengths must be >= 0 (搬运起点不能小于0)"},
      {"QueryPaddingDtype",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.T(DType::kInt32, {1});
            }),
       "query_padding_size", kBad, "int32",
       "dtype must be int64"},
      {"QueryPaddingShape",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.T(DType::kInt64, {2});
            }),
       "query_padding_size", kBad, "[2]",
       "shape must be [1]"},
      {"KvPaddingStartNegative",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{10};
              c.a.kv_padding_size = c.ar.I64(30);
            }),
       "kv_padding_size", kBad, "kv_padding_size = 30",
       "kv left padding start KV_S - kv_padding_size - actual_seq_lengths_kv must be >= 0 (搬运起点不能小于0)"},
      {"TndPaddingUnsupported",
       With([] { return Dense("TND"); },
            [](C c) { c.a.kv_padding_size = c.ar.I64(0); }),
       "kv_padding_size", kUns, "given",
       "input_layout TND does not support left padding (TND不支持左padding)"},
      {"QueryPaddingWithPaged",
       With([] { return Paged(3, 3, 4); },
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{4};
              c.a.query_padding_size = c.ar.I64(0);
            }),
       "query_padding_size", kUns, "block_table",
       "left padding does not support page attention (不支持PageAttention)"},
      {"KvPaddingWithPaged",
       With([] { return Paged(3); }, [](C c) { c.a.kv_padding_size = c.ar.I64(0); }),
       "kv_padding_size", kUns, "block_table",
       "left padding does not support page attention (不支持PageAttention)"},
      // ---- shared prefix ----
      {"PrefixWithPaged",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 32});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 32});
            }),
       "key_shared_prefix", kUns, "block_table",
       "prefix does not support page attention (prefix不支持PageAttention)"},
      {"PrefixBatch2",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {2, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {2, 4, 51});
            }),
       "key_shared_prefix", kBad, "[2, 4, 51]",
       "the batch axis must be 1 (第一维batch必须为1)"},
      {"PrefixHMismatch",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 48});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
            }),
       "key_shared_prefix", kBad, "[1, 4, 48]",
       "N and D (H) must equal the key's"},
      {"PrefixDtype",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kBFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
            }),
       "key_shared_prefix", kBad, "bfloat16",
       "dtype must equal the key dtype"},
      {"PrefixSMismatch",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 5, 51});
            }),
       "value_shared_prefix", kBad, "5 vs 4",
       "S must equal key_shared_prefix's S (S应相等)"},
      {"PrefixLenTooLarge",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.actual_shared_prefix_len = c.ar.I64(5);
            }),
       "actual_shared_prefix_len", kBad, "5 with prefix S 4",
       "must be in [0, S of key_shared_prefix] (值不能大于key_shared_prefix的S)"},
      {"PrefixWithFullQuant",
       With(FullQuant,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_shared_prefix", kUns, "int8",
       "prefix does not support int8 query, key and value (不支持输入qkv全部为int8的场景)"},
      {"PrefixWithPadding",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.kv_padding_size = c.ar.I64(0);
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{17};
            }),
       "key_shared_prefix", kUns, "kv_padding_size with actual_seq_lengths_kv",
       "prefix does not support left padding (不支持左padding场景)"},
      // ---- atten_mask / sparse_mode ----
      {"TndMode0WithMask",
       With([] { return Dense("TND"); },
            [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {17, 17}); }),
       "sparse_mode", kUns, "sparse_mode 0 with",
       "input_layout TND supports only sparse_mode 0 without atten_mask or sparse_mode 3 or 4 with atten_mask"},
      {"TndMode2", With([] { return Dense("TND"); },
                        [](C c) {
                          c.a.sparse_mode = 2;
                          c.a.atten_mask = c.ar.CausalMask();
                        }),
       "sparse_mode", kUns, "sparse_mode 2",
       "input_layout TND supports only sparse_mode 0 without atten_mask or sparse_mode 3 or 4 with atten_mask"},
      {"Mode1WithoutMask", With(D0, [](C c) { c.a.sparse_mode = 1; }), "atten_mask", kBad,
       "None",
       "is required by sparse_mode 1"},
      {"Mode3WithoutMask", With(D0, [](C c) { c.a.sparse_mode = 3; }), "atten_mask", kBad,
       "None",
       "is required by sparse_mode 3"},
      {"MaskDtypeFloat",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kFloat16, {17, 17}); }), "atten_mask",
       kBad, "float16",
       "dtype must be bool, int8 or uint8"},
      {"MaskNonContiguous",
       With(D0,
            [](C c) {
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
              c.a.atten_mask.strides = {1, 17};
            }),
       "atten_mask", kBad, "strides",
       "does not support non-contiguous tensors (不支持非连续)"},
      {"Mode3MaskShape",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
            }),
       "atten_mask", kBad, "[17, 17]",
       "sparse_mode 3 needs the optimized mask of shape (2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048)"},
      {"Mode3MaskBatched",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.T(DType::kBool, {3, 2048, 2048});
            }),
       "atten_mask", kBad, "[3, 2048, 2048]",
       "sparse_mode 3 needs the optimized mask of shape (2048, 2048), (1, 2048, 2048) or (1, 1, 2048, 2048)"},
      {"Mask1D", With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {17}); }),
       "atten_mask", kBad, "[17]",
       "shape must be (Q_S, KV_S), (B, Q_S, KV_S), (1, Q_S, KV_S), (B, 1, Q_S, KV_S) or (1, 1, Q_S, KV_S)"},
      {"MaskBatchAxis",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {2, 17, 17}); }), "atten_mask",
       kBad, "[2, 17, 17]",
       "the batch axis must be B = 3 or 1"},
      {"Mask4DHeadAxis",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {3, 3, 17, 17}); }),
       "atten_mask", kBad, "[3, 3, 17, 17]",
       "the second axis of a 4-D mask must be 1 (masks are shared by heads)"},
      {"MaskTooFewRows",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {16, 32}); }), "atten_mask",
       kBad, "[16, 32]",
       "the Q_S axis must be >= 17 (Q_S may be padded up)"},
      {"MaskTooFewCols",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {1, 17, 16}); }), "atten_mask",
       kBad, "[1, 17, 16]",
       "the KV_S axis must be >= KV_S = 17"},
      {"MaskColsMissPrefix",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.actual_shared_prefix_len = c.ar.I64(3);
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 19});
            }),
       "atten_mask", kBad, "[17, 19]",
       "the KV_S axis must be >= actual_shared_prefix_len + KV_S = 20"},
      {"MaskPagedColsTooFew",  // maxBlockNumPerSeq * block_size = 9
       With([] { return Paged(3); },
            [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {3, 8}); }),
       "atten_mask", kBad, "[3, 8]",
       "the KV_S axis must be >= maxBlockNumPerSeq * block_size = 9"},
      {"IncMask2DBatch",
       With(Inc, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {2, 17}); }), "atten_mask",
       kBad, "[2, 17]",
       "the batch axis must be B = 3 or 1"},
      // ---- pse_shift ----
      {"PseWithTnd",
       With([] { return Dense("TND"); },
            [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 17, 17}); }),
       "pse_shift", kUns, "[1, 3, 17, 17]",
       "input_layout TND does not support pse (TND不支持pse)"},
      {"PseDtypeInt8",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kInt8, {1, 3, 17, 17}); }), "pse_shift",
       kBad, "int8",
       "dtype must be float16 or bfloat16 (float32 with a float32 query)"},
      {"PseBf16WithF16Query",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kBFloat16, {1, 3, 17, 17}); }),
       "pse_shift", kBad, "bfloat16 with query float16",
       "float16 pse needs a float16 or int8 query, bfloat16 pse a bfloat16 query"},
      {"IncPseDtypeMismatch",
       With([] { return Dense("BSH", 3, 1, 3, 3, 17, 17, DType::kBFloat16); },
            [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 1, 17}); }),
       "pse_shift", kBad, "float16 vs bfloat16",
       "dtype must equal the query dtype when Q_S is 1"},
      {"Pse3D", With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 17, 17}); }),
       "pse_shift", kBad, "[3, 17, 17]",
       "must be 4-D (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S)"},
      {"PseHeads",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 1, 17, 17}); }),
       "pse_shift", kBad, "[1, 1, 17, 17]",
       "shape must be (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S) with B = 3, N = 3"},
      {"PseQsTooSmall",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 3, 16, 17}); }),
       "pse_shift", kBad, "[3, 3, 16, 17]",
       "the Q_S axis must be >= the query's S (Q_S需大于等于query的S长度)"},
      {"PseKvTooSmall",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 3, 17, 16}); }),
       "pse_shift", kBad, "[3, 3, 17, 16]",
       "the KV_S axis must be >= the key's S = 17"},
      {"PseNonContiguous",
       With(D0,
            [](C c) {
              c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 17, 17});
              c.a.pse_shift.strides = {867, 289, 1, 17};
            }),
       "pse_shift", kBad, "strides",
       "does not support non-contiguous tensors (不支持非连续)"},
      // ---- antiquant ----
      {"AntiquantWithFloatKv",
       With(D0, [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2}); }),
       "antiquant_scale", kBad, "float16 key",
       "is only valid with int8/int4 (int32) key and value and a floating-point query"},
      {"Int8KvWithoutAntiquant",
       With([] { return Antiquant(); }, [](C c) { c.a.antiquant_scale = TensorView(); }),
       "antiquant_scale", kBad, "None",
       "int8/int4 key and value with a floating-point query need antiquant_scale or key_antiquant_scale/value_antiquant_scale"},
      {"LegacyAntiquantMode2",
       With([] { return Antiquant(); }, [](C c) { c.a.antiquant_mode = 2; }), "antiquant_mode",
       kBad, "2",
       "must be 0 (per-channel/per-tensor) or 1 (per-token)"},
      {"LegacyPerTensorShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {3}); }),
       "antiquant_scale", kBad, "[3]",
       "per-tensor needs shape (2,)"},
      {"LegacyPerChannelShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2, 50}); }),
       "antiquant_scale", kBad, "[2, 50]",
       "per-channel needs shape (2, N, 1, D), (2, N, D) or (2, H) with N = 3, D = 17"},
      {"LegacyPerTokenShape",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_mode = 1;
              c.a.antiquant_scale = c.ar.T(DType::kFloat32, {2, 3, 16});
            }),
       "antiquant_scale", kBad, "[2, 3, 16]",
       "per-token (antiquant_mode 1) needs shape (2, B, S) with B = 3, S >= 17"},
      {"LegacyPerTokenDtype",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_mode = 1;
              c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2, 3, 17});
            }),
       "antiquant_scale", kBad, "float16",
       "per-token scale/offset dtype is fixed to float32 (数据类型固定为float32)"},
      {"LegacyPerChannelDtype",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat32, {2, 51}); }),
       "antiquant_scale", kBad, "float32 vs query float16",
       "per-channel/per-tensor/per-head scale/offset dtype must equal the query dtype"},
      {"LegacyOffsetShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_offset = c.ar.T(DType::kFloat16, {2, 3, 17}); }),
       "antiquant_offset", kBad, "[2, 3, 17]",
       "must have the same shape as antiquant_scale"},
      {"LegacyOffsetDtype",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_offset = c.ar.T(DType::kBFloat16, {2, 51}); }),
       "antiquant_offset", kBad, "bfloat16",
       "must have the same dtype as antiquant_scale"},
      {"KeyAntiquantMode6",
       With([] { return SepAq(0); }, [](C c) { c.a.key_antiquant_mode = 6; }),
       "key_antiquant_mode", kBad, "6",
       "must be 0, 1, 2, 3, 4 or 5"},
      {"AntiquantModesDiffer",
       With([] { return SepAq(1); }, [](C c) { c.a.value_antiquant_mode = 0; }),
       "value_antiquant_mode", kBad, "value_antiquant_mode = 0",
       "must equal key_antiquant_mode, except key mode 0 with value mode 1"},
      {"SepMode0Shape",
       With([] { return SepAq(0); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 3, 2, 17}); }),
       "key_antiquant_scale", kBad, "[1, 3, 2, 17]",
       "key_antiquant_mode 0 (per-channel) needs shape (1, N, 1, D), (1, N, D) or (1, H) with N = 3, D = 17, or (1,) per-tensor"},
      {"SepMode1Batch",
       With([] { return SepAq(1); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {1, 2, 17}); }),
       "value_antiquant_scale", kBad, "[1, 2, 17]",
       "value_antiquant_mode 1 (per-token) needs shape (1, B, S) or (B, S) with B = 3, S >= 17"},
      {"SepMode1Dtype",
       With([] { return SepAq(1); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 3, 17}); }),
       "key_antiquant_scale", kBad, "float16",
       "per-token scale/offset dtype is fixed to float32 (数据类型固定为float32)"},
      {"SepMode2Shape",
       With([] { return SepAq(2); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1}); }),
       "key_antiquant_scale", kBad, "[1]",
       "key_antiquant_mode 2 (per-tensor + per-head) needs shape (N,) with N = 3"},
      {"SepMode3Shape",
       With([] { return SepAq(3); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {3, 1, 17}); }),
       "key_antiquant_scale", kBad, "[3, 1, 17]",
       "key_antiquant_mode 3 (per-token + per-head) needs shape (B, N, S) with B = 3, N = 3, S >= 17"},
      {"SepMode4Shape",
       With([] { return SepAq(4, true); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {8, 4}); }),
       "key_antiquant_scale", kBad, "[8, 4]",
       "key_antiquant_mode 4 (per-token, page attention managed) needs shape (blocknum, blocksize) = (11, 3)"},
      {"SepMode5Shape",
       With([] { return SepAq(5, true); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {8, 3}); }),
       "value_antiquant_scale", kBad, "[8, 3]",
       "value_antiquant_mode 5 (per-token + per-head, page attention managed) needs shape (blocknum, N, blocksize) = (11, 1, 3)"},
      {"SepOffsetShape",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_antiquant_offset = c.ar.T(DType::kFloat32, {3, 17});
              c.a.value_antiquant_offset = c.ar.T(DType::kFloat32, {1, 3, 17});
            }),
       "key_antiquant_offset", kBad, "[3, 17]",
       "must have the same shape as key_antiquant_scale"},
      {"SepValueShapeDiffers",
       With([] { return SepAq(0); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat16, {1, 51}); }),
       "value_antiquant_scale", kBad, "[1, 51]",
       "must have the key_antiquant_scale shape (shape需要保持一致)"},
      {"SepQs17Mode0Unsupported",
       With([] { return SepAq(0); },
            [](C c) {
              c.a.query = c.ar.T(DType::kFloat16, {3, 17, 51});
            }),
       "key_antiquant_mode", kUns, "key_antiquant_mode = 0",
       "only per-token mode 1 is supported when Q_S > 1 (Q_S大于等于2时仅支持传入值为1)"},
      {"SepQs17WithPrefixUnsupported",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.query = c.ar.T(DType::kFloat16, {3, 17, 51});
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_antiquant_scale", kUns, "prefix",
       "KV-separated antiquant with Q_S > 1 does not support tensorlist, left padding, page attention or prefix"},
      {"PagedAntiquantQs17",
       With([] { return Paged(3, 3, 17, 3, 1, 32, 3, {7, 1, 5}, DType::kInt8); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2}); }),
       "block_table", kUns, "int8 key",
       "page attention does not support antiquant when Q_S > 1 (page attention不支持伪量化场景)"},
      {"PagedPerTokenMode1",
       With([] { return SepAq(4, true); },
            [](C c) {
              c.a.key_antiquant_mode = c.a.value_antiquant_mode = 1;
              c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {1, 3, 1});
              c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {1, 3, 1});
            }),
       "key_antiquant_scale", kBad, "[1, 3, 1]",
       "key_antiquant_mode 1 (per-token) needs shape (1, B, S) or (B, S) with B = 3, S >= 7"},
      {"Mode4WithoutPaging",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_antiquant_mode = c.a.value_antiquant_mode = 4;
              c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {0, 0});
              c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {0, 0});
            }),
       "key_antiquant_mode", kBad, "block_table is None",
       "modes 4 and 5 manage scales by page attention and need block_table"},
      {"PrefixPerTokenScalesTooShort",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_antiquant_scale", kBad, "[1, 3, 17]",
       "key_antiquant_mode 1 (per-token) needs shape (1, B, S) or (B, S) with B = 3, S >= 21"},
      {"Int4Paged",
       With([] { return Paged(4, 3, 1, 3, 1, 32, 3, {7, 1, 5}, DType::kInt32); },
            [](C c) {
              c.a.key = c.ar.T(DType::kInt32, {8, 1, 3, 4});
              c.a.value = c.a.key;
              c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2});
            }),
       "block_table", kUns, "int32 key",
       "int4 (int32) key/value do not support page attention (不支持Q为bfloat16、float16、key、value为int4（int32）的场景)"},
      {"Int4KvPadding",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.num_heads = c.a.num_key_value_heads = 1;
              c.a.query = c.ar.T(DType::kFloat16, {3, 1, 16});
              c.a.key = c.ar.T(DType::kInt32, {3, 17, 2});
              c.a.value = c.a.key;
              c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2, 16});
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{5};
              c.a.kv_padding_size = c.ar.I64(1);
            }),
       "kv_padding_size", kUns, "int32 key",
       "kv left padding does not support int4 (int32) key/value"},
      {"TndFullQuant",
       With([] { return Dense("TND", 3, 17, 3, 3, 17, 17, DType::kInt8); },
            [](C c) {
              c.a.dequant_scale1 = c.ar.F32({1}, 1.f);
              c.a.quant_scale1 = c.ar.F32({1}, 1.f);
              c.a.dequant_scale2 = c.ar.F32({1}, 1.f);
            }),
       "query", kUns, "int8",
       "input_layout TND does not support full quantization (TND不支持全量化)"},
      {"PagedInt8Query",
       With([] { return Paged(3, 3, 17, 3, 1, 32, 3, {7, 1, 5}, DType::kInt8); },
            [](C c) {
              c.a.query = c.ar.T(DType::kInt8, {3, 17, 96});
              c.a.dequant_scale1 = c.ar.F32({1}, 1.f);
              c.a.quant_scale1 = c.ar.F32({1}, 1.f);
              c.a.dequant_scale2 = c.ar.F32({1}, 1.f);
            }),
       "query", kUns, "int8",
       "page attention does not support an int8 query (page attention场景下，不支持输入query为int8的场景)"},
      // ---- full quantization ----
      {"FullQuantMissingDs1",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = TensorView(); }), "dequant_scale1", kBad,
       "None",
       "is required when query, key and value are int8"},
      {"FullQuantMissingQs1", With(FullQuant, [](C c) { c.a.quant_scale1 = TensorView(); }),
       "quant_scale1", kBad, "None",
       "is required when query, key and value are int8"},
      {"FullQuantMissingDs2", With(FullQuant, [](C c) { c.a.dequant_scale2 = TensorView(); }),
       "dequant_scale2", kBad, "None",
       "is required when query, key and value are int8"},
      {"Ds1DtypeF16",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = c.ar.T(DType::kFloat16, {1}); }),
       "dequant_scale1", kBad, "float16",
       "dtype must be uint64 or float32"},
      {"Ds1PerChannel",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = c.ar.F32({3}, 1.f); }), "dequant_scale1",
       kBad, "[3]",
       "supports per-tensor only: shape must be [1]"},
      {"Qs1Uint64",
       With(FullQuant, [](C c) { c.a.quant_scale1 = c.ar.T(DType::kUInt64, {1}); }),
       "quant_scale1", kBad, "uint64",
       "dtype must be float32"},
      {"Ds1WithFloatQuery",
       With(D0, [](C c) { c.a.dequant_scale1 = c.ar.F32({1}, 1.f); }), "dequant_scale1", kBad,
       "[1]",
       "must be None unless query, key and value are int8 (若存在则报错)"},
      // ---- post-quantization ----
      {"Qs2DtypeF16",
       With(D0, [](C c) { c.a.quant_scale2 = c.ar.T(DType::kFloat16, {1}); }), "quant_scale2",
       kBad, "float16",
       "dtype must be float32 (bfloat16 is also accepted with a bfloat16 query)"},
      {"Qs2Bf16WithF16Query",
       With(D0, [](C c) { c.a.quant_scale2 = c.ar.T(DType::kBFloat16, {1}); }),
       "quant_scale2", kBad, "bfloat16 with query float16",
       "dtype must be float32 (bfloat16 is also accepted with a bfloat16 query)"},
      {"Qs2Numel", With(D0, [](C c) { c.a.quant_scale2 = c.ar.F32({17}, 1.f); }),
       "quant_scale2", kBad, "[17]",
       "per-tensor needs one element, per-channel a product of dimensions equal to N * D = 51"},
      {"Qo2ShapeDiffers",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({3, 17}, 1.f);
              c.a.quant_offset2 = c.ar.F32({51}, 1.f);
            }),
       "quant_offset2", kBad, "[51]",
       "must have the dtype and shape of quant_scale2 (类型和shape信息与quantScale2一致)"},
      {"Qs2WithTnd",
       With([] { return Dense("TND"); }, [](C c) { c.a.quant_scale2 = c.ar.F32({1}, 1.f); }),
       "quant_scale2", kUns, "TND",
       "input_layout TND does not support post-quantization (TND不支持后量化)"},
      {"Qs2PerChannelWithPadding",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({51}, 1.f);
              c.a.actual_seq_lengths = std::vector<int64_t>{4};
              c.a.query_padding_size = c.ar.I64(1);
            }),
       "quant_scale2", kUns, "left padding",
       "per-channel post-quantization does not support left padding (暂不支持左padding)"},
      {"Qs2BandNegativePre",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.sparse_mode = 4;
              c.a.atten_mask = c.ar.CausalMask();
              c.a.pre_tokens = -1;
              c.a.next_tokens = 5;
            }),
       "sparse_mode", kUns, "pre_tokens = -1",
       "int8 output does not support band mode with negative pre_tokens/next_tokens (暂不支持sparse为band且preTokens/nextTokens为负数)"},
      {"Qo2Mode3MoreQueriesThanKeys",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.quant_offset2 = c.ar.F32({1}, 1.f);
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.CausalMask();
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 10, 17};
            }),
       "quant_offset2", kUns, "batch 1",
       "int8 output with quant_offset2 is intercepted when sparse_mode/pre_tokens/next_tokens leave rows without keys"},
      {"Qo2Mode0NegativeNext",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.quant_offset2 = c.ar.F32({1}, 1.f);
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
              c.a.next_tokens = -1;
            }),
       "quant_offset2", kUns, "next_tokens -1",
       "int8 output with quant_offset2 is intercepted when sparse_mode/pre_tokens/next_tokens leave rows without keys"},
      // ---- MLA ----
      {"QueryRopeDtype",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kBFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
            }),
       "query_rope", kBad, "bfloat16",
       "dtype must equal the query dtype"},
      {"KeyRopeShape",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 16});
            }),
       "key_rope", kBad, "[11, 3, 16]",
       "shape must equal the key's with D replaced by query_rope's D"},
      {"MlaNzBnsd",
       With([] { return Paged(5, 3, 1, 3, 1, 32, 3, {7, 1, 5}, DType::kFloat16, "BNSD"); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 3, 1, 16});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 1, 1, 3, 16});
            }),
       "key_rope", kUns, "BNSD",
       "MLA with an NZ cache does not support input_layout BNSD (当数据格式为NZ时input_layout不支持BNSD)"},
      {"MlaIncWithMask",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
              c.a.atten_mask = c.ar.T(DType::kBool, {3, 9});
            }),
       "atten_mask", kUns, "[3, 9]",
       "MLA with Q_S = 1 supports only sparse 0 without a mask (Q_S等于1时只支持sparse=0且不传mask)"},
      {"MlaQs17Mode0",
       With([] { return Paged(3, 3, 4, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 4, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
            }),
       "sparse_mode", kUns, "sparse_mode 0 without",
       "MLA with Q_S > 1 supports only sparse_mode 3 with atten_mask (Q_S大于1时只支持sparse=3且传入mask)"},
      {"MlaWithInt8Kv",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kInt8, {3, 17, 3 * 8});
            }),
       "key_rope", kUns, "int8 key",
       "MLA with int8/int4 query or key is not supported (its rope dequantization parameter key_rope_antiquant_scale is reserved)"},
      // ---- learnable sinks ----
      {"SinksDtypeInt32", With(D0, [](C c) { c.a.sinks = c.ar.T(DType::kInt32, {3}); }),
       "sinks", kBad, "int32",
       "dtype must be bfloat16 (float16 and float32 are also accepted)"},
      {"SinksPerKvHead",
       With(D0, [](C c) { c.a.sinks = c.ar.T(DType::kBFloat16, {1}); }), "sinks", kBad, "[1]",
       "shape must be (N,) with N = num_heads = 3"},
      {"SinksNonContiguous",
       With(D0,
            [](C c) {
              c.a.sinks = c.ar.T(DType::kFloat32, {3});
              c.a.sinks.strides = {2};
            }),
       "sinks", kBad, "strides",
       "does not support non-contiguous tensors (不支持非连续)"},
      {"SinksWithFullQuant",
       With(FullQuant, [](C c) { c.a.sinks = c.ar.T(DType::kBFloat16, {3}); }), "sinks", kUns,
       "int8",
       "learnable sinks with int8 query, key and value are not supported (the int8 softmax has no sink term)"},
      {"TndMode1",
       With([] { return Dense("TND"); },
            [](C c) {
              c.a.sparse_mode = 1;
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
            }),
       "sparse_mode", kUns, "sparse_mode 1 with",
       "input_layout TND supports only sparse_mode 0 without atten_mask or sparse_mode 3 or 4 with atten_mask"},
      {"NtdHeadsMismatch",
       With([] { return Dense("TND"); },
            [](C c) {
              c.a.input_layout = "NTD_TND";
              c.a.query = c.ar.T(DType::kFloat16, {51, 3, 17});
            }),
       "query", kBad, "N = 51",
       "the N axis must equal num_heads"},
      // ---- overflow-safe sizes ----
      {"NumHeadsHugeWithEmptyH",
       With(D0,
            [](C c) {
              c.a.num_heads = int64_t{1} << 62;
              c.a.num_key_value_heads = 1;
              c.a.query = c.ar.T(DType::kFloat16, {3, 17, 0});
              c.a.key = c.ar.T(DType::kFloat16, {3, 17, 0});
              c.a.value = c.ar.T(DType::kFloat16, {3, 17, 5});
            }),
       "num_heads", kBad, "num_heads = 4611686018427387904",
       "the output size B * S * num_heads * D must stay addressable"},
  };
  return v;
}

INSTANTIATE_TEST_SUITE_P(Rules, FiaRejects, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return i.param.name; });

// ------------------------------------------------------------------------------------------
// Positive tests: valid calls pass and give the documented output shapes.
// ------------------------------------------------------------------------------------------
using Shape = std::vector<int64_t>;

TEST(FiaAccepts, OutputShapesPerLayout) {
  struct L {
    const char* layout;
    Shape out;
  } cases[] = {{"BSH", {3, 17, 15}},        {"BSND", {3, 17, 3, 5}},
               {"BNSD", {3, 3, 17, 5}},     {"TND", {51, 3, 5}},
               {"NTD", {3, 51, 5}},         {"BNSD_BSND", {3, 17, 3, 5}},
               {"BSH_BNSD", {3, 3, 17, 5}}, {"BSND_BNSD", {3, 3, 17, 5}},
               {"BSH_NBSD", {3, 3, 17, 5}}, {"BSND_NBSD", {3, 3, 17, 5}},
               {"BNSD_NBSD", {3, 3, 17, 5}}, {"TND_NTD", {3, 51, 5}},
               {"NTD_TND", {51, 3, 5}}};
  for (const L& l : cases) {
    SCOPED_TRACE(l.layout);
    CallPtr c = Dense(l.layout, 3, 17, 3, 1, 17, 17, DType::kBFloat16, /*dv=*/5);
    FiaOutputSpec s = Validate(c->a);
    EXPECT_EQ(s.attention_out_sizes, l.out);
    EXPECT_EQ(s.attention_out_dtype, DType::kBFloat16);
    EXPECT_EQ(s.softmax_lse_sizes, Shape{1});
    c->a.softmax_lse_flag = true;
    s = Validate(c->a);
    EXPECT_EQ(s.softmax_lse_sizes, Packed(l.layout) ? Shape({51, 3, 1}) : Shape({3, 3, 17, 1}));
  }
}

TEST(FiaAccepts, Float32AndEmptyAndIgnoredArguments) {
  EXPECT_EQ(Validate(Dense("BSND", 1, 3, 1, 1, 1, 1, DType::kFloat32)->a).attention_out_dtype,
            DType::kFloat32);
  // Empty query (B = 0), empty KV (KV_S = 0), D = 1.
  EXPECT_EQ(Validate(Dense("BSH", 0, 17, 3, 3, 1, 17)->a).attention_out_sizes, Shape({0, 17, 3}));
  EXPECT_EQ(Validate(Dense("BNSD", 3, 17, 3, 3, 17, 0)->a).attention_out_sizes,
            Shape({3, 3, 17, 17}));
  // Q_S == 1 ignores sparse_mode, pre/next, actual_seq_lengths and query_padding_size.
  CallPtr c = Dense("BSH", 3, 1);
  c->a.sparse_mode = 42;
  c->a.actual_seq_lengths = std::vector<int64_t>{-5, 7};
  c->a.query_padding_size = c->ar.I64(99);
  EXPECT_NO_THROW(Validate(c->a));
  // Padding without actual lengths is not left padding (right padding).
  CallPtr d = Dense();
  d->a.query_padding_size = d->ar.I64(99);
  EXPECT_NO_THROW(Validate(d->a));
}

TEST(FiaAccepts, Int4KeyValueRealD) {
  CallPtr c = Antiquant(1, "BSND");
  c->a.query = c->ar.T(DType::kFloat16, {3, 1, 3, 16});
  c->a.key = c->ar.T(DType::kInt32, {3, 17, 3, 2});
  c->a.value = c->ar.T(DType::kInt32, {3, 17, 3, 3});  // value D 24
  c->a.antiquant_scale = TensorView();
  c->a.key_antiquant_scale = c->ar.T(DType::kFloat16, {1, 3, 16});
  c->a.value_antiquant_scale = c->ar.T(DType::kFloat32, {1, 3, 17});
  c->a.key_antiquant_mode = 0;
  c->a.value_antiquant_mode = 1;  // key per-channel + value per-token
  EXPECT_EQ(Validate(c->a).attention_out_sizes, Shape({3, 1, 3, 24}));
  const Problem p = Canon(c->a);
  EXPECT_EQ(p.k.cache.elem, Elem::kI4);
  EXPECT_EQ(p.k.cache.sd, 1);
  EXPECT_EQ(p.k.cache.sh, 16);
  EXPECT_EQ(p.k.cache.ss, 48);
  EXPECT_EQ(p.k.cache.sb, 17 * 48);
  EXPECT_EQ(p.v.cache.ss, 72);
  EXPECT_EQ(p.d_v, 24);
  EXPECT_EQ(p.k.dequant.kind, Dequant::Kind::kPerChannel);
  EXPECT_EQ(p.v.dequant.kind, Dequant::Kind::kPerToken);
  EXPECT_EQ(p.v.dequant.sb, 17);
}

TEST(FiaAccepts, PagedLayouts) {
  for (int form : {3, 4, 5}) {
    for (DType dt : {DType::kFloat16, DType::kBFloat16}) {
      SCOPED_TRACE(form);
      CallPtr c = Paged(form, 3, 1, 3, 1, 32, 3, {7, 1, 5}, dt);
      EXPECT_EQ(Validate(c->a).attention_out_sizes, Shape({3, 1, 96}));
      // Q_S > 1 with page attention, mask sized by maxBlockNumPerSeq * block_size = 9.
      CallPtr d = Paged(form, 3, 4, 3, 1, 32, 3, {7, 1, 5}, dt, "BNSD");
      d->a.atten_mask = d->ar.T(DType::kBool, {3, 1, 4, 9});
      EXPECT_EQ(Validate(d->a).attention_out_sizes, Shape({3, 3, 4, 32}));
    }
  }
  // Unused trailing block_table entries may hold anything.
  CallPtr c = Paged(3);
  auto* bt = static_cast<int32_t*>(c->a.block_table.data);
  bt[3] = 123456;   // batch 0 uses 3 of 4 columns
  bt[5] = -7;       // batch 1 uses 1
  EXPECT_NO_THROW(Validate(c->a));
  // Zero-length batch needs no block.
  c->a.actual_seq_lengths_kv = std::vector<int64_t>{0};
  EXPECT_NO_THROW(Validate(c->a));
  // int8 NZ uses 32-wide fractals, with legacy per-channel antiquant at Q_S = 1.
  CallPtr n = Paged(5, 3, 1, 3, 1, 64, 3, {7, 1, 5}, DType::kInt8);
  n->a.antiquant_scale = n->ar.T(DType::kFloat16, {2, 1, 1, 64});
  EXPECT_EQ(n->a.key.sizes, Shape({11, 1, 2, 3, 32}));
  EXPECT_NO_THROW(Validate(n->a));
}

TEST(FiaAccepts, AntiquantModes) {
  for (int mode = 0; mode <= 5; ++mode) {
    SCOPED_TRACE(mode);
    CallPtr c = SepAq(mode, mode >= 4);
    const FiaOutputSpec s = Validate(c->a);
    EXPECT_EQ(s.attention_out_dtype, DType::kFloat16);
    // Offsets are optional and follow the scale's shape and dtype.
    c->a.key_antiquant_offset = c->ar.T(c->a.key_antiquant_scale.dtype,
                                        c->a.key_antiquant_scale.sizes);
    c->a.value_antiquant_offset = c->ar.T(c->a.key_antiquant_scale.dtype,
                                          c->a.key_antiquant_scale.sizes);
    EXPECT_NO_THROW(Validate(c->a));
  }
  // Legacy spellings: per-tensor (2,), per-channel (2,N,1,D), (2,N,D), (2,H), per-token (2,B,S).
  for (Shape sh : {Shape{2}, Shape{2, 3, 1, 17}, Shape{2, 3, 17}, Shape{2, 51}}) {
    CallPtr c = Antiquant();
    c->a.antiquant_scale = c->ar.T(DType::kFloat16, sh);
    c->a.antiquant_offset = c->ar.T(DType::kFloat16, sh);
    EXPECT_NO_THROW(Validate(c->a));
  }
  CallPtr t = Antiquant(17);
  t->a.antiquant_mode = 1;
  t->a.antiquant_scale = t->ar.T(DType::kFloat32, {2, 3, 17});
  EXPECT_NO_THROW(Validate(t->a));
  // Q_S > 1 with separate per-token parameters (B, S) and (1, B, S).
  CallPtr u = SepAq(1);
  u->a.query = u->ar.T(DType::kFloat16, {3, 17, 51});
  u->a.key_antiquant_scale = u->ar.T(DType::kFloat32, {3, 17});
  u->a.value_antiquant_scale = u->ar.T(DType::kFloat32, {3, 17});
  EXPECT_NO_THROW(Validate(u->a));
  // Separate parameters win over legacy ones (an otherwise invalid legacy tensor is ignored).
  CallPtr w = SepAq(2);
  w->a.antiquant_scale = w->ar.T(DType::kFloat16, {7, 7});
  EXPECT_NO_THROW(Validate(w->a));
}

TEST(FiaAccepts, QuantCombinations) {
  CallPtr f = FullQuant();
  EXPECT_EQ(Validate(f->a).attention_out_dtype, DType::kFloat16);
  f->a.quant_scale2 = f->ar.F32({1}, 3.f);
  EXPECT_EQ(Validate(f->a).attention_out_dtype, DType::kInt8);
  f->a.quant_offset2 = f->ar.F32({1}, 1.f);
  EXPECT_EQ(Validate(f->a).attention_out_dtype, DType::kInt8);
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    CallPtr c = Dense("BSND", 3, 17, 3, 3, 17, 17, dt);
    for (Shape sh : {Shape{1}, Shape{3, 17}, Shape{1, 1, 3, 17}, Shape{51}}) {
      c->a.quant_scale2 = c->ar.F32(sh, 2.f);
      c->a.quant_offset2 = c->ar.F32(sh, 1.f);
      const FiaOutputSpec s = Validate(c->a);
      EXPECT_EQ(s.attention_out_dtype, DType::kInt8);
      EXPECT_EQ(s.attention_out_sizes, Shape({3, 17, 3, 17}));
    }
  }
  CallPtr b = Dense("BSH", 3, 17, 3, 3, 17, 17, DType::kBFloat16);
  b->a.quant_scale2 = b->ar.T(DType::kBFloat16, {1, 1, 51});
  EXPECT_NO_THROW(Validate(b->a));
}

TEST(FiaAccepts, PrefixMlaListsAndMasks) {
  CallPtr c = Dense("BNSD");
  c->a.key_shared_prefix = c->ar.T(DType::kFloat16, {1, 3, 4, 17});
  c->a.value_shared_prefix = c->ar.T(DType::kFloat16, {1, 3, 4, 17});
  c->a.atten_mask = c->ar.T(DType::kInt8, {1, 1, 17, 21});
  c->a.pse_shift = c->ar.T(DType::kFloat16, {3, 3, 17, 21});
  EXPECT_NO_THROW(Validate(c->a));
  // MLA, Q_S > 1: sparse_mode 3 with the 2048 mask.
  CallPtr m = Paged(5, 3, 4, 3, 1, 32, 3, {7, 1, 5}, DType::kBFloat16, "BSND");
  m->a.query_rope = m->ar.T(DType::kBFloat16, {3, 4, 3, 16});
  m->a.key_rope = m->ar.T(DType::kBFloat16, {m->a.key.size(0), 1, 1, 3, 16});
  m->a.sparse_mode = 3;
  m->a.atten_mask = m->ar.CausalMask(DType::kUInt8, {1, 2048, 2048});
  EXPECT_EQ(Validate(m->a).attention_out_sizes, Shape({3, 4, 3, 32}));
  // Tensor lists with different S per batch (BSH).
  CallPtr l = Dense("BSH", 3, 1);
  for (int i = 0; i < 3; ++i) {
    l->a.key_list.push_back(l->ar.T(DType::kFloat16, {1, 1 + 5 * i, 51}));
    l->a.value_list.push_back(l->ar.T(DType::kFloat16, {1, 1 + 5 * i, 51}));
  }
  l->a.key = l->a.value = TensorView();
  l->a.actual_seq_lengths_kv = std::vector<int64_t>{1, 6, 11};
  EXPECT_NO_THROW(Validate(l->a));
  // Incremental mask shapes.
  for (Shape sh : {Shape{3, 17}, Shape{1, 17}, Shape{3, 1, 17}, Shape{3, 1, 1, 32}}) {
    CallPtr i = Dense("BSH", 3, 1);
    i->a.atten_mask = i->ar.T(DType::kBool, sh);
    EXPECT_NO_THROW(Validate(i->a));
  }
}

// ------------------------------------------------------------------------------------------
// Canonicalization.
// ------------------------------------------------------------------------------------------
TEST(FiaCanonical, LayoutStridesMatchDirectIndex) {
  const int64_t B = 3, S = 17, N = 3, D = 5, DV = 7;
  for (const char* layout : {"BSH", "BSND", "BNSD", "TND", "NTD", "BNSD_BSND", "BSH_BNSD",
                             "BSND_BNSD", "BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "TND_NTD",
                             "NTD_TND"}) {
    SCOPED_TRACE(layout);
    CallPtr c = Dense(layout, B, S, N, 1, D, 4, DType::kFloat16, DV);
    c->a.softmax_lse_flag = true;
    const FiaGeometry g = AnalyzeFia(c->a);
    const Problem p = CanonicalizeFia(c->a, g, TensorView(),
                                      TensorView(nullptr, DType::kFloat32, {1}));
    const std::string l = layout;
    const std::string in = l.substr(0, l.find('_'));
    const std::string out = l.find('_') == std::string::npos ? l : l.substr(l.find('_') + 1);
    const int64_t T = B * S;
    EXPECT_EQ(p.h_kv, 1);
    EXPECT_EQ(p.group(), 3);
    EXPECT_FALSE(p.incremental);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < D; ++d) {
            int64_t want;
            const int64_t row = p.q_begin[b] + s;
            if (in == "BSH" || in == "BSND") want = ((b * S + s) * N + h) * D + d;
            else if (in == "TND") want = (row * N + h) * D + d;
            else if (in == "NTD") want = (h * T + row) * D + d;
            else want = ((b * N + h) * S + s) * D + d;
            ASSERT_EQ(p.q.Offset(b, h, row, d), want);
          }
    // Output in the layout after "_" (the input layout without one).
    const int64_t b = 2, h = 1, s = 5, d = 6;
    const int64_t row = p.q_begin[b] + s;
    int64_t want_out = ((b * S + s) * N + h) * DV + d;  // BSH, BSND
    if (out == "BNSD") want_out = ((b * N + h) * S + s) * DV + d;
    if (out == "NBSD") want_out = ((h * B + b) * S + s) * DV + d;
    if (out == "TND") want_out = (row * N + h) * DV + d;
    if (out == "NTD") want_out = (h * T + row) * DV + d;
    EXPECT_EQ(b * p.out_sb + h * p.out_sh + row * p.out_ss + d * p.out_sd, want_out);
    const int64_t want_lse = Packed(l) ? row * N + h : (b * N + h) * S + s;
    EXPECT_EQ(b * p.lse_sb + h * p.lse_sh + row * p.lse_ss, want_lse);
    if (Packed(l)) {
      EXPECT_EQ(p.q.sb, 0);
      EXPECT_EQ(p.q_begin, Shape({0, 17, 34}));
      EXPECT_EQ(p.kv_begin, Shape({0, 4, 8}));
      EXPECT_EQ(p.s_q, 51);
    }
  }
}

TEST(FiaCanonical, ActualLengthsBroadcastAndPadding) {
  CallPtr c = Dense("BSH", 3, 17, 3, 3, 17, 17);
  c->a.actual_seq_lengths = std::vector<int64_t>{5};
  c->a.actual_seq_lengths_kv = std::vector<int64_t>{1, 0, 17, 99};  // first B used
  Problem p = Canon(c->a);
  EXPECT_EQ(p.q_len, Shape({5, 5, 5}));
  EXPECT_EQ(p.q_begin, Shape({0, 0, 0}));
  EXPECT_EQ(p.kv_len, Shape({1, 0, 17}));
  // Left padding: rows [S - pad - act, S - pad); a negative pad counts as 0.
  c->a.query_padding_size = c->ar.I64(2);
  c->a.kv_padding_size = c->ar.I64(-4);
  p = Canon(c->a);
  EXPECT_EQ(p.q_begin, Shape({10, 10, 10}));
  EXPECT_EQ(p.kv_begin, Shape({16, 17, 0}));
  // Q_S == 1: q_len is 1; a kv window starting before 0 leaves the batch without keys.
  CallPtr i = Dense("BSH", 3, 1, 3, 3, 17, 17);
  i->a.actual_seq_lengths_kv = std::vector<int64_t>{4, 16, 2};
  i->a.kv_padding_size = i->ar.I64(3);
  p = Canon(i->a);
  EXPECT_TRUE(p.incremental);
  EXPECT_EQ(p.q_len, Shape({1, 1, 1}));
  EXPECT_EQ(p.kv_len, Shape({4, 0, 2}));
  EXPECT_EQ(p.kv_begin, Shape({10, 0, 12}));
}

struct BandCase {
  int64_t mode, pre, next;
  bool mask, pad;
  Shape want_pre, want_next;  // per batch; kN = kNoBand
};

TEST(FiaCanonical, BandsPerSparseMode) {
  constexpr int64_t kN = Problem::kNoBand;
  // S1 = act_q = {17, 3, 1}, S2 = act_kv = {17, 5, 0} (+ prefix 0).
  const BandCase cases[] = {
      {0, 2, -1, false, false, {kN, kN, kN}, {kN, kN, kN}},  // no mask: INT_MAX
      {0, 2, -1, true, false, {2, 2, 2}, {-1, -1, -1}},
      {0, 2, -1, true, true, {kN, kN, kN}, {kN, kN, kN}},  // left padding: INT_MAX
      {0, int64_t{1} << 40, -(int64_t{1} << 40), true, false, {kN, kN, kN},
       {-2147483647, -2147483647, -2147483647}},  // clipped to +-INT32_MAX
      {1, 2, -1, true, false, {kN, kN, kN}, {kN, kN, kN}},
      {2, 2, -1, true, false, {kN, kN, kN}, {0, 0, 0}},
      {3, 2, -1, true, false, {kN, kN, kN}, {0, 2, -1}},
      {4, 2, -1, true, false, {2, 0, 3}, {-1, 1, -2}},
      {4, 2147483647, 0, true, false, {kN, kN, kN}, {0, 2, -1}},
  };
  for (const BandCase& bc : cases) {
    SCOPED_TRACE(testing::Message() << "mode " << bc.mode << " pre " << bc.pre << " next "
                                    << bc.next << " mask " << bc.mask << " pad " << bc.pad);
    CallPtr c = Dense("BSND", 3, 17, 3, 3, 17, 17);
    c->a.sparse_mode = bc.mode;
    c->a.pre_tokens = bc.pre;
    c->a.next_tokens = bc.next;
    c->a.actual_seq_lengths = std::vector<int64_t>{17, 3, 1};
    c->a.actual_seq_lengths_kv = std::vector<int64_t>{17, 5, 0};
    if (bc.mask) c->a.atten_mask = bc.mode >= 2 ? c->ar.CausalMask() : c->ar.T(DType::kBool, {17, 17});
    if (bc.pad) c->a.kv_padding_size = c->ar.I64(0);
    const Problem p = Canon(c->a);
    EXPECT_EQ(p.band_pre, bc.want_pre);
    EXPECT_EQ(p.band_next, bc.want_next);
    EXPECT_EQ(p.mask != nullptr, bc.mask && bc.mode <= 1);
  }
  // Prefix counts in S2: mode 3 next = act_kv + P - act_q.
  CallPtr c = Dense("BSH", 3, 17, 3, 3, 17, 17);
  c->a.key_shared_prefix = c->ar.T(DType::kFloat16, {1, 6, 51});
  c->a.value_shared_prefix = c->ar.T(DType::kFloat16, {1, 6, 51});
  c->a.actual_shared_prefix_len = c->ar.I64(4);
  c->a.actual_seq_lengths_kv = std::vector<int64_t>{3, 17, 0};
  c->a.sparse_mode = 3;
  c->a.atten_mask = c->ar.CausalMask();
  Problem p = Canon(c->a);
  EXPECT_EQ(p.prefix_len, 4);
  EXPECT_EQ(p.band_next, Shape({3 + 4 - 17, 17 + 4 - 17, 0 + 4 - 17}));
  EXPECT_EQ(p.k.prefix.data, c->a.key_shared_prefix.data);
  EXPECT_EQ(p.v.prefix.Offset(0, 2, 5, 3), 5 * 51 + 2 * 17 + 3);
  // Q_S == 1 has no band at all.
  CallPtr i = Dense("BSH", 3, 1);
  i->a.sparse_mode = 4;
  i->a.pre_tokens = -3;
  p = Canon(i->a);
  EXPECT_EQ(p.band_pre, Shape({kN, kN, kN}));
  EXPECT_EQ(p.band_next, Shape({kN, kN, kN}));
}

TEST(FiaCanonical, MaskAndPseCoordinates) {
  struct M {
    Shape shape;
    int64_t sb, ss;
  } cases[] = {{{17, 19}, 0, 19},
               {{3, 17, 19}, 17 * 19, 19},
               {{1, 17, 19}, 0, 19},
               {{3, 1, 18, 19}, 18 * 19, 19},
               {{1, 1, 17, 19}, 0, 19}};
  for (const M& m : cases) {
    CallPtr c = Dense("BSH", 3, 17, 3, 3, 17, 17);
    c->a.actual_seq_lengths = std::vector<int64_t>{4, 5, 6};
    c->a.actual_seq_lengths_kv = std::vector<int64_t>{7};
    c->a.query_padding_size = c->ar.I64(1);
    c->a.kv_padding_size = c->ar.I64(2);
    c->a.atten_mask = c->ar.T(DType::kUInt8, m.shape);
    c->a.pse_shift = c->ar.T(DType::kFloat16, {1, 3, 17, 20});
    const Problem p = Canon(c->a);
    EXPECT_EQ(p.mask_sb, m.sb);
    EXPECT_EQ(p.mask_ss, m.ss);
    EXPECT_EQ(p.mask_sk, 1);
    EXPECT_EQ(p.mask_row0, Shape({12, 11, 10}));  // 17 - 1 - act
    EXPECT_EQ(p.mask_col0, Shape({8, 8, 8}));     // 17 - 2 - 7
    EXPECT_EQ(p.pse_row0, p.mask_row0);
    EXPECT_EQ(p.pse_col0, p.mask_col0);
    EXPECT_EQ(p.pse_sb, 0);
    EXPECT_EQ(p.pse_sh, 17 * 20);
    EXPECT_EQ(p.pse_ss, 20);
    EXPECT_EQ(p.pse_sk, 1);
  }
  // Q_S == 1 shapes.
  struct I {
    Shape shape;
    int64_t sb, ss;
  } inc[] = {{{3, 17}, 17, 0}, {{1, 17}, 0, 0}, {{3, 1, 17}, 17, 17}, {{3, 1, 1, 17}, 17, 17}};
  for (const I& m : inc) {
    CallPtr c = Dense("BSH", 3, 1);
    c->a.atten_mask = c->ar.T(DType::kBool, m.shape);
    c->a.pse_shift = c->ar.T(DType::kFloat16, {3, 3, 1, 17});
    const Problem p = Canon(c->a);
    EXPECT_EQ(p.mask_sb, m.sb);
    EXPECT_EQ(p.mask_ss, m.ss);
    EXPECT_EQ(p.mask_row0, Shape({0, 0, 0}));
    EXPECT_EQ(p.pse_sb, 3 * 17);
  }
}

TEST(FiaCanonical, PagedAddressingIncludingNz) {
  for (int form : {3, 4, 5}) {
    for (DType dt : {DType::kFloat16, DType::kInt8}) {
      SCOPED_TRACE(testing::Message() << "form " << form << " " << DTypeName(dt));
      const int64_t N = 2, D = 64, bs = 3;
      CallPtr c = Paged(form, 3, 1, 4, N, D, bs, {7, 1, 5}, dt);
      if (dt == DType::kInt8) c->a.antiquant_scale = c->ar.T(DType::kFloat16, {2});
      const Problem p = Canon(c->a);
      const int64_t base = dt == DType::kInt8 ? 32 : 16;
      EXPECT_TRUE(p.paged);
      EXPECT_EQ(p.block_size, bs);
      EXPECT_EQ(p.bt_stride, c->a.block_table.size(1));
      EXPECT_EQ(p.block_table, c->a.block_table.data);
      EXPECT_EQ(p.kv_len, Shape({7, 1, 5}));
      const int64_t bn = c->a.key.size(0);
      for (int64_t blk = 0; blk < bn; ++blk)
        for (int64_t h = 0; h < N; ++h)
          for (int64_t s = 0; s < bs; ++s)
            for (int64_t d = 0; d < D; ++d) {
              int64_t want;
              if (form == 3) want = (blk * bs + s) * N * D + h * D + d;
              else if (form == 4) want = ((blk * N + h) * bs + s) * D + d;
              else want = ((((blk * N + h) * (D / base) + d / base) * bs + s) * base) + d % base;
              ASSERT_EQ(p.k.cache.Offset(blk, h, s, d), want);
              ASSERT_EQ(p.v.cache.Offset(blk, h, s, d), want);
            }
    }
  }
}

TEST(FiaCanonical, DequantStridesPerMode) {
  using K = Dequant::Kind;
  struct W {
    int mode;
    K kind;
    int64_t sb, sh, ss, sd;
  } cases[] = {{0, K::kPerChannel, 0, 17, 0, 1},   {1, K::kPerToken, 17, 0, 1, 0},
               {2, K::kPerTensorHead, 0, 1, 0, 0}, {3, K::kPerTokenHead, 3 * 17, 17, 1, 0},
               {4, K::kPerToken, 3, 0, 1, 0},      {5, K::kPerTokenHead, 3 * 1 * 1, 3, 1, 0}};
  for (const W& w : cases) {
    SCOPED_TRACE(w.mode);
    CallPtr c = SepAq(w.mode, w.mode >= 4);
    c->a.key_antiquant_offset = c->ar.T(c->a.key_antiquant_scale.dtype,
                                        c->a.key_antiquant_scale.sizes);
    c->a.value_antiquant_offset = c->ar.T(c->a.key_antiquant_scale.dtype,
                                          c->a.key_antiquant_scale.sizes);
    const Problem p = Canon(c->a);
    for (const KvOperand* o : {&p.k, &p.v}) {
      EXPECT_EQ(o->dequant.kind, w.kind);
      EXPECT_EQ(o->dequant.sb, w.sb);
      EXPECT_EQ(o->dequant.sh, w.sh);
      EXPECT_EQ(o->dequant.ss, w.ss);
      EXPECT_EQ(o->dequant.sd, w.sd);
    }
    EXPECT_EQ(p.k.dequant.scale, c->a.key_antiquant_scale.data);
    EXPECT_EQ(p.v.dequant.scale, c->a.value_antiquant_scale.data);
    EXPECT_EQ(p.v.dequant.offset, c->a.value_antiquant_offset.data);
  }
  // Legacy joint tensors: V is the second half.
  CallPtr c = Antiquant();
  c->a.antiquant_offset = c->ar.T(DType::kFloat16, {2, 51});
  Problem p = Canon(c->a);
  const auto* base = static_cast<const char*>(c->a.antiquant_scale.data);
  EXPECT_EQ(p.k.dequant.scale, base);
  EXPECT_EQ(p.v.dequant.scale, base + 51 * 2);
  EXPECT_EQ(p.v.dequant.offset, static_cast<const char*>(c->a.antiquant_offset.data) + 51 * 2);
  EXPECT_EQ(p.v.dequant.kind, K::kPerChannel);
  EXPECT_EQ(p.v.dequant.sh, 17);
  c->a.antiquant_mode = 1;
  c->a.antiquant_offset = TensorView();
  c->a.antiquant_scale = c->ar.T(DType::kFloat32, {2, 3, 20});
  p = Canon(c->a);
  EXPECT_EQ(p.v.dequant.kind, K::kPerToken);
  EXPECT_EQ(p.v.dequant.sb, 20);
  EXPECT_EQ(p.v.dequant.scale, static_cast<const char*>(c->a.antiquant_scale.data) + 60 * 4);
  EXPECT_EQ(p.v.dequant.offset, nullptr);
  c->a.antiquant_mode = 0;
  c->a.antiquant_scale = c->ar.T(DType::kFloat16, {2});
  p = Canon(c->a);
  EXPECT_EQ(p.v.dequant.kind, K::kPerTensor);
  EXPECT_EQ(p.v.dequant.scale, static_cast<const char*>(c->a.antiquant_scale.data) + 2);
}

TEST(FiaCanonical, QuantScalarsAndPostQuantVectors) {
  CallPtr c = FullQuant();
  // uint64 carries fp32 bits in its low word; dequant_scale1 is truncated to 19 bits.
  c->a.dequant_scale1 = c->ar.T(DType::kUInt64, {1});
  const float x = 0.1f;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint64_t word = (uint64_t{0xDEADBEEF} << 32) | bits;
  std::memcpy(c->a.dequant_scale1.data, &word, 8);
  c->a.quant_scale2 = c->ar.F32({3, 17}, 0.f);
  for (int i = 0; i < 51; ++i) static_cast<float*>(c->a.quant_scale2.data)[i] = i * 0.5f;
  Problem p = Canon(c->a);
  EXPECT_TRUE(p.full_quant);
  uint32_t got;
  std::memcpy(&got, &p.dequant_scale1, 4);
  EXPECT_EQ(got, bits & 0xFFFFE000u);
  EXPECT_NE(got, bits);
  EXPECT_EQ(p.quant_scale1, 2.f);
  EXPECT_EQ(p.dequant_scale2, 0.25f);
  EXPECT_EQ(p.out_elem, Elem::kI8);
  ASSERT_EQ(p.quant_scale2.size(), 51u);
  EXPECT_EQ(p.quant_scale2[37], 18.5f);
  EXPECT_EQ(p.quant_offset2, std::vector<float>(51, 0.f));
  // bfloat16 per-tensor post-quant with a bfloat16 query.
  CallPtr b = Dense("BSH", 3, 17, 3, 3, 17, 17, DType::kBFloat16);
  b->a.quant_scale2 = b->ar.T(DType::kBFloat16, {1});
  b->a.quant_offset2 = b->ar.T(DType::kBFloat16, {1});
  static_cast<uint16_t*>(b->a.quant_scale2.data)[0] = 0x4040;   // 3.0
  static_cast<uint16_t*>(b->a.quant_offset2.data)[0] = 0xBF80;  // -1.0
  p = Canon(b->a);
  EXPECT_EQ(p.quant_scale2, std::vector<float>{3.f});
  EXPECT_EQ(p.quant_offset2, std::vector<float>{-1.f});
  EXPECT_FALSE(p.full_quant);
  EXPECT_EQ(p.k.dequant.kind, Dequant::Kind::kNone);
}

TEST(FiaCanonical, ListsAndMla) {
  CallPtr l = Dense("BSND", 3, 1);
  std::vector<const void*> ptrs;
  for (int i = 0; i < 3; ++i) {
    l->a.key_list.push_back(l->ar.T(DType::kFloat16, {1, 2 + i, 3, 17}));
    l->a.value_list.push_back(l->ar.T(DType::kFloat16, {1, 2 + i, 3, 17}));
    ptrs.push_back(l->a.key_list.back().data);
  }
  Problem p = Canon(l->a);
  EXPECT_EQ(p.k.cache.batch_data, ptrs);
  EXPECT_EQ(p.kv_len, Shape({2, 3, 4}));
  EXPECT_EQ(p.k.cache.Offset(2, 1, 3, 4), 3 * 51 + 17 + 4);
  EXPECT_EQ(p.k.cache.Base(1), ptrs[1]);

  CallPtr m = Paged(4, 3, 1, 3, 1, 32, 3);
  m->a.query_rope = m->ar.T(DType::kFloat16, {3, 1, 3 * 8});
  m->a.key_rope = m->ar.T(DType::kFloat16, {m->a.key.size(0), 1, 3, 8});
  p = Canon(m->a);
  EXPECT_EQ(p.d_rope, 8);
  EXPECT_EQ(p.q_rope.data, m->a.query_rope.data);
  EXPECT_EQ(p.q_rope.sh, 8);
  EXPECT_EQ(p.q_rope.sb, 24);
  EXPECT_EQ(p.k_rope.cache.sb, 3 * 8);
  EXPECT_EQ(p.k_rope.cache.ss, 8);
  EXPECT_TRUE(p.q_rope.present());
  EXPECT_FALSE(p.k.prefix.present());
}

// ------------------------------------------------------------------------------------------
// NPU-strict mode: one call per relaxed NPU limit (fia_strict.cc), valid by default and rejected
// in strict mode with that row's rule; NPU-valid calls pass in strict mode.
// ------------------------------------------------------------------------------------------
struct StrictCase {
  std::string name;
  std::string id;  // the row of fia_strict.cc
  std::function<CallPtr()> make;
  std::string argument;
  std::string actual_has;
};
std::ostream& operator<<(std::ostream& os, const StrictCase& c) { return os << c.name; }

// MLA (query_rope / key_rope) with an NZ cache in BSND: one batch of 7 keys, query head D `d`.
CallPtr Mla(int64_t q_s, int64_t n, int64_t d, int64_t d_rope, int64_t bs) {
  CallPtr m = Paged(5, 1, q_s, n, 1, d, bs, {7}, DType::kBFloat16, "BSND");
  m->a.query_rope = m->ar.T(DType::kBFloat16, {1, q_s, n, d_rope});
  m->a.key_rope = m->ar.T(DType::kBFloat16, {m->a.key.size(0), 1, d_rope / 16, bs, 16});
  if (q_s > 1) {
    m->a.sparse_mode = 3;
    m->a.atten_mask = m->ar.CausalMask(DType::kUInt8, {1, 2048, 2048});
  }
  return m;
}

// int8 key/value with separate per-token parameters (both modes 1) on a BSH call.
CallPtr SepPerToken(int64_t q_s, DType q_dtype) {
  CallPtr c = Dense("BSH", 3, q_s, 3, 3, 32, 17, q_dtype);
  c->a.key = c->ar.T(DType::kInt8, c->a.key.sizes);
  c->a.value = c->ar.T(DType::kInt8, c->a.value.sizes);
  c->a.key_antiquant_scale = c->ar.T(DType::kFloat32, {3, 17});
  c->a.value_antiquant_scale = c->ar.T(DType::kFloat32, {3, 17});
  c->a.key_antiquant_mode = c->a.value_antiquant_mode = 1;
  return c;
}

// A packed (TND) bfloat16 call the NPU takes: N 8, D 192, value D 128, two batches of 4 rows.
CallPtr Tnd(int64_t n = 8, int64_t d = 192, DType dt = DType::kBFloat16, int64_t q_s = 4,
            int64_t kv_s = 4) {
  return Dense("TND", 2, q_s, n, n, d, kv_s, dt, 128);
}

std::vector<StrictCase> StrictCases() {
  using C = Call&;
  constexpr DType f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  return {
      {"Float32Query", "fia.dtype-float32",
       [] { return Dense("BSH", 3, 17, 3, 3, 16, 17, DType::kFloat32); }, "query", "float32"},
      {"DAbove512", "fia.d-max", [] { return Dense("BNSD", 1, 2, 1, 1, 528, 4); }, "query",
       "D = 528"},
      {"DNotAlignedPrompt", "fia.d-align", [] { return Dense("BSH", 3, 17, 3, 3, 17, 17); },
       "query", "D = 17"},
      {"Int4DNot64Aligned", "fia.d-int4",
       [] {
         CallPtr c = Antiquant(1, "BSND");
         c->a.query = c->ar.T(DType::kFloat16, {3, 1, 3, 16});
         c->a.key = c->ar.T(DType::kInt32, {3, 17, 3, 2});
         c->a.value = c->ar.T(DType::kInt32, {3, 17, 3, 2});
         c->a.antiquant_scale = TensorView();
         c->a.key_antiquant_scale = c->ar.T(DType::kFloat16, {1, 3, 16});
         c->a.value_antiquant_scale = c->ar.T(DType::kFloat32, {1, 3, 17});
         c->a.value_antiquant_mode = 1;
         return c;
       },
       "key", "D = 16"},
      {"BlockSizePrompt", "fia.block-size-prompt",
       [] { return Paged(3, 3, 4, 3, 1, 32, 3, {7, 1, 5}, f16, "BNSD"); }, "block_size", "3"},
      {"BlockSizeIncre", "fia.block-size-incre", [] { return Paged(3); }, "block_size",
       "3 with float16 key"},
      {"BlockSizeMla", "fia.block-size-mla", [] { return Mla(4, 32, 512, 64, 32); }, "block_size",
       "32 with an NZ cache"},
      {"BatchAbove65536", "fia.batch-max", [] { return Dense("BSH", 65537, 1, 1, 1, 16, 1); },
       "query", "B = 65537"},
      {"HeadsAbove256", "fia.heads-max", [] { return Dense("BSH", 1, 1, 257, 1, 16, 1); },
       "num_heads", "257"},
      {"KvSAbove262144Incre", "fia.seq-max",
       [] { return Dense("BSH", 1, 1, 1, 1, 0, 262145); }, "key", "KV_S = 262145"},
      {"QSAbove20MPrompt", "fia.seq-max", [] { return Dense("BSH", 1, 20971521, 1, 1, 0, 1); },
       "query", "Q_S = 20971521"},
      {"NTimesDBsh", "fia.nd-max", [] { return Dense("BSH", 1, 2, 256, 256, 256, 2); }, "query",
       "N * D = 65536"},
      {"Paged3KvNTimesD", "fia.paged3-kvnd",
       [] { return Paged(3, 1, 1, 128, 128, 512, 16, {16}, f16); }, "key",
       "KV_N * D = 65536"},
      {"GroupAbove64", "fia.group-max", [] { return Dense("BSH", 1, 1, 65, 1, 16, 1); },
       "num_key_value_heads", "= 65"},
      {"PagedIncreKeyAboveInt32", "fia.kv-numel",
       [] {
         // Validation reads no key element: a view of 2^31 + 16 * 64 elements over a small
         // buffer is enough to be analysed.
         CallPtr c = Paged(3, 1, 1, 1, 1, 64, 16, {16}, f16);
         const int64_t bn = (int64_t{1} << 31) / (16 * 64) + 1;
         c->a.key = TensorView(c->a.key.data, f16, {bn, 16, 64});
         c->a.value = TensorView(c->a.value.data, f16, {bn, 16, 64});
         return c;
       },
       "key", "2147484672 elements"},
      {"Paged4CacheWithBsh", "fia.cache-layout",
       [] { return Paged(4, 3, 4, 3, 1, 32, 128, {7, 1, 5}, f16, "BSH"); }, "key",
       "4-D cache"},
      {"TndTAbove65536", "fia.tnd-t-max", [] { return Dense("TND", 1, 65537, 1, 1, 0, 1); },
       "query", "T = 65537"},
      {"TndHeads", "fia.tnd-heads", [] { return Tnd(3); }, "num_heads", "3"},
      {"TndGqa", "fia.tnd-heads",
       [] { return Dense("TND", 2, 4, 8, 4, 192, 4, bf16, 128); }, "num_key_value_heads",
       "4 vs num_heads 8"},
      {"TndDims", "fia.tnd-dims", [] { return Tnd(8, 16); }, "query", "D = 16"},
      {"TndFloat16", "fia.tnd-dtype", [] { return Tnd(8, 192, f16); }, "query", "float16"},
      {"TndPaged", "fia.tnd-paged",
       [] {
         CallPtr c = Paged(3, 3, 4, 8, 8, 192, 128, {7, 1, 5}, bf16, "TND");
         c->a.actual_seq_lengths = std::vector<int64_t>{4, 8, 12};
         return c;
       },
       "block_table", "block_table given"},
      {"TndSparseMode4", "fia.tnd-sparse-mode",
       With([] { return Tnd(); },
            [](C c) {
              c.a.sparse_mode = 4;
              c.a.atten_mask = c.ar.CausalMask();
            }),
       "sparse_mode", "4"},
      {"TndMode3QNotBelowKv", "fia.tnd-mode3-lengths",
       With([] { return Tnd(); },
            [](C c) {
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.CausalMask();
            }),
       "actual_seq_lengths", "batch 0: 4 query rows, 4 key rows"},
      {"MlaRopeD", "fia.mla-dims", [] { return Mla(4, 32, 512, 16, 128); }, "query_rope",
       "D = 16"},
      {"MlaD", "fia.mla-dims", [] { return Mla(4, 32, 256, 64, 128); }, "query", "D = 256"},
      {"MlaQSAbove16", "fia.mla-q-s", [] { return Mla(17, 32, 512, 64, 128); }, "query",
       "Q_S = 17"},
      {"MlaHeads", "fia.mla-heads", [] { return Mla(1, 16, 512, 64, 128); }, "num_heads", "16"},
      {"MlaDense", "fia.mla-paged",
       [] {
         CallPtr c = Dense("BSND", 1, 1, 32, 1, 512, 4, bf16);
         c->a.query_rope = c->ar.T(bf16, {1, 1, 32, 64});
         c->a.key_rope = c->ar.T(bf16, {1, 4, 1, 64});
         return c;
       },
       "block_table", "None"},
      {"SeparateAntiquantFloat16QueryPrompt", "fia.kvsep-q-dtype",
       [] { return SepPerToken(4, f16); }, "query", "float16 with Q_S > 1"},
      {"SeparateAntiquantK0V1Bfloat16", "fia.kvsep-q-dtype",
       [] {
         CallPtr c = Dense("BSND", 3, 1, 3, 3, 32, 17, bf16);
         c->a.key = c->ar.T(DType::kInt8, c->a.key.sizes);
         c->a.value = c->ar.T(DType::kInt8, c->a.value.sizes);
         c->a.key_antiquant_scale = c->ar.T(bf16, {1, 3, 32});
         c->a.value_antiquant_scale = c->ar.T(DType::kFloat32, {1, 3, 17});
         c->a.value_antiquant_mode = 1;
         return c;
       },
       "query", "bfloat16 with int8 key/value, key mode 0, value mode 1"},
      {"SeparateAntiquantQSAbove16", "fia.kvsep-q-s", [] { return SepPerToken(17, bf16); },
       "query", "Q_S = 17"},
      {"Int4PerTensorHead", "fia.int4-modes",
       [] {
         CallPtr c = Dense("BSND", 3, 1, 3, 3, 64, 17, f16);
         c->a.key = c->ar.T(DType::kInt32, {3, 17, 3, 8});
         c->a.value = c->ar.T(DType::kInt32, {3, 17, 3, 8});
         c->a.key_antiquant_scale = c->ar.T(f16, {3});
         c->a.value_antiquant_scale = c->ar.T(f16, {3});
         c->a.key_antiquant_mode = c->a.value_antiquant_mode = 2;
         return c;
       },
       "key_antiquant_mode", "mode 2"},
      {"LegacyAntiquantBfloat16Prompt", "fia.legacy-q-dtype",
       [] {
         CallPtr c = Dense("BSH", 3, 4, 3, 3, 32, 17, bf16);
         c->a.key = c->ar.T(DType::kInt8, c->a.key.sizes);
         c->a.value = c->ar.T(DType::kInt8, c->a.value.sizes);
         c->a.antiquant_scale = c->ar.T(bf16, {2, 96});
         return c;
       },
       "query", "bfloat16 with Q_S = 4"},
      {"ValueDDiffers", "fia.value-d", [] { return Dense("BSH", 3, 4, 3, 3, 16, 17, f16, 32); },
       "value", "D = 32 vs key D = 16"},
      {"PseIncreDNot16", "fia.pse-d16",
       With([] { return Dense("BSH", 3, 1, 3, 3, 8, 17); },
            [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 3, 1, 17}); }),
       "pse_shift", "D = 8"},
      {"PerTokenScalesPaged", "fia.per-token-paged",
       [] {
         CallPtr c = Paged(4, 3, 1, 3, 1, 32, 32, {7, 1, 5}, DType::kInt8);
         c->a.key_antiquant_scale = c->ar.T(DType::kFloat32, {1, 3, 32});
         c->a.value_antiquant_scale = c->ar.T(DType::kFloat32, {1, 3, 32});
         c->a.key_antiquant_mode = c->a.value_antiquant_mode = 1;
         return c;
       },
       "key_antiquant_mode", "1"},
      {"NbsdOutputWithoutMla", "fia.out-layout-nbsd",
       [] { return Dense("BSH_NBSD", 3, 4, 3, 3, 16, 17); }, "input_layout",
       "BSH_NBSD without MLA"},
      {"SinksFloat16", "fia.sinks",
       With([] { return Dense("BSH", 3, 4, 3, 3, 16, 17); },
            [](C c) { c.a.sinks = c.ar.T(DType::kFloat16, {3}); }),
       "sinks", "float16"},
  };
}

class FiaStrict : public ::testing::TestWithParam<StrictCase> {};

TEST_P(FiaStrict, DefaultAcceptsStrictRejectsWithTheNpuRule) {
  const StrictCase& sc = GetParam();
  CallPtr c = sc.make();
  testutil::ExpectStrictRejects([&] { Validate(c->a); }, sc.id, "Atlas A2/A3", sc.argument,
                                sc.actual_has);
}

INSTANTIATE_TEST_SUITE_P(Rows, FiaStrict, ::testing::ValuesIn(StrictCases()),
                         [](const auto& info) { return info.param.name; });

TEST(FiaStrictRows, EveryRowHasACase) {
  std::set<std::string> cased;
  for (const StrictCase& c : StrictCases()) cased.insert(c.id);
  const std::vector<std::string> ids = FiaNpuLimitIds();
  EXPECT_EQ(cased, std::set<std::string>(ids.begin(), ids.end()));
}

TEST(FiaStrictAccepts, CallsTheNpuTakes) {
  testutil::NpuStrictScope on(true);
  constexpr DType f16 = DType::kFloat16, bf16 = DType::kBFloat16;
  std::vector<CallPtr> calls;
  calls.push_back(Dense("BNSD", 2, 4, 32, 8, 128, 64, f16));                    // GQA prompt
  calls.push_back(Dense("BSH", 2, 1, 32, 8, 128, 64, bf16));                    // decode
  calls.push_back(Paged(3, 2, 1, 32, 8, 128, 128, {100, 50}, bf16));            // paged decode
  calls.push_back(Paged(3, 2, 4, 32, 8, 128, 128, {100, 50}, f16, "BSH"));      // paged prompt
  calls.push_back(Paged(4, 2, 4, 32, 8, 128, 256, {300, 50}, bf16, "BNSD"));   // 4-D cache
  calls.push_back(Tnd());                                                       // TND
  calls.push_back(Mla(4, 32, 512, 64, 128));                                    // MLA
  calls.push_back(SepPerToken(4, bf16));           // separate per-token antiquant, Q_S > 1
  for (const CallPtr& c : calls) EXPECT_NO_THROW(Validate(c->a)) << c->a.input_layout;
}

}  // namespace
}  // namespace openfia::internal
