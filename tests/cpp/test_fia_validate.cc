// FusedInferAttentionScore validation and canonicalization: one negative test per rule (an
// otherwise valid call with one thing broken must throw an Error naming that argument and the
// offending value), positive tests for every layout/feature with the documented output shapes,
// and checks of the canonical Problem (strides, ranges, bands, masks, dequant, NZ addressing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/problem.h"
#include "openfia/openfia.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia::internal {
namespace {

// Owns the memory of the tensors of one call.
class Arena {
 public:
  TensorView T(DType dt, std::vector<int64_t> sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    bufs_.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 1) * ElementSize(dt)), 0);
    return TensorView(bufs_.back().data(), dt, std::move(sizes));
  }
  TensorView I64(int64_t v) {
    TensorView t = T(DType::kInt64, {1});
    std::memcpy(t.data, &v, 8);
    return t;
  }
  TensorView F32(std::vector<int64_t> sizes, float v) {
    TensorView t = T(DType::kFloat32, std::move(sizes));
    for (int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.data)[i] = v;
    return t;
  }
  TensorView CausalMask(DType dt = DType::kBool, std::vector<int64_t> sizes = {2048, 2048}) {
    TensorView t = T(dt, std::move(sizes));
    auto* p = static_cast<uint8_t*>(t.data);
    for (int64_t r = 0; r < 2048; ++r)
      for (int64_t c = 0; c < 2048; ++c) p[r * 2048 + c] = c > r;
    return t;
  }

 private:
  std::deque<std::vector<uint8_t>> bufs_;
};

struct Call {
  Arena ar;
  FiaArgs a;
};
using CallPtr = std::unique_ptr<Call>;

std::vector<int64_t> QShape(const std::string& l, int64_t b, int64_t s, int64_t n, int64_t d) {
  if (l == "BSH") return {b, s, n * d};
  if (l == "BSND") return {b, s, n, d};
  if (l == "TND") return {b * s, n, d};
  return {b, n, s, d};  // BNSD, BNSD_BSND
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
  if (layout == "TND") {
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

FiaOutputSpec Validate(const FiaArgs& a) { return ValidateFia(a); }
Problem Canon(const FiaArgs& a) {
  const FiaOutputSpec spec = ValidateFia(a);
  return CanonicalizeFia(a, spec, TensorView(), TensorView());
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
    EXPECT_FALSE(e.rule().empty());
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
      {"QueryMissing", With(D0, [](C c) { c.a.query = TensorView(); }), "query", kBad, "None"},
      {"KeyMissing", With(D0, [](C c) { c.a.key = TensorView(); }), "key", kBad, "None"},
      {"ValueMissing", With(D0, [](C c) { c.a.value = TensorView(); }), "value", kBad, "None"},
      {"KeyListWithoutValueList",
       With(D0, [](C c) { c.a.key_list = {c.ar.T(DType::kFloat16, {1, 17, 51})}; }),
       "value_list", kBad, "empty value_list"},
      {"StridesWrongLength", With(D0, [](C c) { c.a.query.strides = {1, 2}; }), "query", kBad,
       "strides [1, 2]"},
      {"NegativeSize", With(D0, [](C c) { c.a.key.sizes[1] = -4; }), "key", kBad, "-4"},
      {"NullDataWithElements", With(D0, [](C c) { c.a.value.data = nullptr; }), "value", kBad,
       "null"},
      {"NumelOverflow",
       With(D0,
            [](C c) {
              c.a.query.sizes = {1 << 30, 1 << 30, 1 << 30};
              c.a.query.strides = TensorView::ContiguousStrides(c.a.query.sizes);
            }),
       "query", kBad, "1073741824"},
      {"QueryRopeWithoutKeyRope",
       With(D0, [](C c) { c.a.query_rope = c.ar.T(DType::kFloat16, {3, 17, 3}); }), "key_rope",
       kBad, "only one"},
      {"KeyPrefixWithoutValuePrefix",
       With(D0, [](C c) { c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51}); }),
       "value_shared_prefix", kBad, "only one"},
      {"PrefixLenWithoutPrefix", With(D0, [](C c) { c.a.actual_shared_prefix_len = c.ar.I64(2); }),
       "actual_shared_prefix_len", kBad, "without"},
      {"KeyAqScaleWithoutValue",
       With([] { return Antiquant(); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 51}); }),
       "value_antiquant_scale", kBad, "only one"},
      {"AntiquantOffsetWithoutScale",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_offset = c.a.antiquant_scale;
              c.a.antiquant_scale = TensorView();
            }),
       "antiquant_offset", kBad, "None"},
      {"QuantOffset2WithoutScale2",
       With(D0, [](C c) { c.a.quant_offset2 = c.ar.F32({1}, 0.f); }), "quant_offset2", kBad,
       "None"},
      {"KeyRopeAntiquantScaleReserved",
       With(D0, [](C c) { c.a.key_rope_antiquant_scale = c.ar.F32({1}, 1.f); }),
       "key_rope_antiquant_scale", kUns, "[1]"},
      // ---- attributes ----
      {"BadLayout", With(D0, [](C c) { c.a.input_layout = "SBH"; }), "input_layout", kBad,
       "SBH"},
      {"NumHeadsZero", With(D0, [](C c) { c.a.num_heads = 0; }), "num_heads", kBad, "0"},
      {"NumKvHeadsNegative", With(D0, [](C c) { c.a.num_key_value_heads = -1; }),
       "num_key_value_heads", kBad, "-1"},
      {"NumHeadsNotDivisible", With(D0, [](C c) { c.a.num_key_value_heads = 2; }),
       "num_key_value_heads", kBad, "num_key_value_heads = 2"},
      {"ScaleNaN", With(D0, [](C c) { c.a.scale = std::nan(""); }), "scale", kBad, "nan"},
      {"ScaleInf",
       With(D0, [](C c) { c.a.scale = std::numeric_limits<double>::infinity(); }), "scale", kBad,
       "inf"},
      {"InnerPrecise4", With(D0, [](C c) { c.a.inner_precise = 4; }), "inner_precise", kBad,
       "4"},
      {"InnerPrecise2WhenQs1", With(Inc, [](C c) { c.a.inner_precise = 2; }), "inner_precise",
       kBad, "2"},
      // ---- query ----
      {"QueryDtypeInt32", With(D0, [](C c) { c.a.query.dtype = DType::kInt32; }), "query", kBad,
       "int32"},
      {"QueryNonContiguous",
       With(D0, [](C c) { c.a.query.strides = {17 * 51, 1, 17}; }), "query", kBad, "strides"},
      {"QueryRank", With(D0, [](C c) { c.a.query = c.ar.T(DType::kFloat16, {3, 17}); }), "query",
       kBad, "[3, 17]"},
      {"BshHNotDivisible", With(D0, [](C c) { c.a.num_heads = 4; c.a.num_key_value_heads = 1; }),
       "query", kBad, "H = 51"},
      {"BsndHeadsMismatch",
       With([] { return Dense("BSND"); }, [](C c) { c.a.num_heads = 1; }), "query", kBad,
       "N = 3"},
      {"BnsdBsndWithQs1", With([] { return Dense("BNSD_BSND", 3, 1); }, [](C) {}),
       "input_layout", kUns, "BNSD_BSND"},
      {"TndWithoutActualSeqLengths",
       With([] { return Dense("TND"); }, [](C c) { c.a.actual_seq_lengths.reset(); }),
       "actual_seq_lengths", kBad, "None"},
      {"SparseMode9", With(D0, [](C c) { c.a.sparse_mode = 9; }), "sparse_mode", kBad, "9"},
      {"SparseModeNegative", With(D0, [](C c) { c.a.sparse_mode = -1; }), "sparse_mode", kBad,
       "-1"},
      {"SparseMode5Unsupported", With(D0, [](C c) { c.a.sparse_mode = 5; }), "sparse_mode", kUns,
       "5"},
      {"SparseMode8Unsupported", With(D0, [](C c) { c.a.sparse_mode = 8; }), "sparse_mode", kUns,
       "8"},
      // ---- key / value ----
      {"KeyDtypeUint8",
       With(D0, [](C c) { c.a.key.dtype = c.a.value.dtype = DType::kUInt8; }), "key", kBad,
       "uint8"},
      {"ValueDtypeDiffers", With(D0, [](C c) { c.a.value.dtype = DType::kBFloat16; }), "value",
       kBad, "bfloat16"},
      {"KeyFloatDtypeDiffersFromQuery",
       With(D0,
            [](C c) { c.a.key.dtype = c.a.value.dtype = DType::kBFloat16; }),
       "key", kBad, "bfloat16"},
      {"Int8QueryFloatKey", With(D0, [](C c) { c.a.query.dtype = DType::kInt8; }), "key", kBad,
       "float16"},
      {"Int8AllWhenQs1",
       With([] { return Dense("BSH", 3, 1, 3, 3, 17, 17, DType::kInt8); }, [](C) {}), "query",
       kUns, "Q_S = 1"},
      {"KeyNonContiguous", With(D0, [](C c) { c.a.key.strides = {1, 3, 51}; }), "key", kBad,
       "strides"},
      {"KeyBatchMismatch",
       With(D0, [](C c) { c.a.key = c.ar.T(DType::kFloat16, {2, 17, 51}); }), "key", kBad, "2"},
      {"KeyDMismatch",
       With(D0,
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {3, 17, 48});
              c.a.value = c.ar.T(DType::kFloat16, {3, 17, 48});
            }),
       "key", kBad, "16 vs 17"},
      {"ValueSeqMismatch",
       With(D0, [](C c) { c.a.value = c.ar.T(DType::kFloat16, {3, 16, 51}); }), "value", kBad,
       "[3, 16, 51]"},
      {"KeyListCount",
       With(D0,
            [](C c) {
              c.a.key_list = {c.ar.T(DType::kFloat16, {1, 17, 51})};
              c.a.value_list = {c.ar.T(DType::kFloat16, {1, 17, 51})};
            }),
       "key_list", kBad, "1 tensors for batch 3"},
      {"KeyListBatchNot1",
       With(D0,
            [](C c) {
              for (int i = 0; i < 3; ++i) {
                c.a.key_list.push_back(c.ar.T(DType::kFloat16, {2, 17, 51}));
                c.a.value_list.push_back(c.ar.T(DType::kFloat16, {2, 17, 51}));
              }
            }),
       "key_list", kBad, "[2, 17, 51]"},
      {"KeyListBnsdUnequalS",
       With([] { return Dense("BNSD"); },
            [](C c) {
              for (int i = 0; i < 3; ++i) {
                c.a.key_list.push_back(c.ar.T(DType::kFloat16, {1, 3, 5 + i, 17}));
                c.a.value_list.push_back(c.ar.T(DType::kFloat16, {1, 3, 5 + i, 17}));
              }
            }),
       "key_list", kUns, "[1, 3, 6, 17]"},
      // ---- paging ----
      {"PagedWithKeyList",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key_list = {c.a.key};
              c.a.value_list = {c.a.value};
            }),
       "block_table", kUns, "1 key tensors"},
      {"PagedKey2D",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "[8, 32]"},
      {"Paged3DMismatch",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 3, 16});
              c.a.value = c.a.key;
            }),
       "key", kBad, "16 vs 32"},
      {"Paged4HeadsMismatch",
       With([] { return Paged(4); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 2, 3, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "2 vs 1"},
      {"PagedNzLastAxis",
       With([] { return Paged(5); },
            [](C c) {
              c.a.key = c.ar.T(DType::kFloat16, {8, 1, 1, 3, 32});
              c.a.value = c.a.key;
            }),
       "key", kBad, "[8, 1, 1, 3, 32]"},
      {"BlockSizeZero", With([] { return Paged(3); }, [](C c) { c.a.block_size = 0; }),
       "block_size", kBad, "0"},
      {"BlockSizeMismatch", With([] { return Paged(3); }, [](C c) { c.a.block_size = 4; }),
       "block_size", kBad, "4 vs key"},
      {"BlockTableDtype",
       With([] { return Paged(3); }, [](C c) { c.a.block_table.dtype = DType::kInt64; }),
       "block_table", kBad, "int64"},
      {"BlockTable1D",
       With([] { return Paged(3); }, [](C c) { c.a.block_table = c.ar.T(DType::kInt32, {9}); }),
       "block_table", kBad, "[9]"},
      {"BlockTableRows",
       With([] { return Paged(3); },
            [](C c) { c.a.block_table = c.ar.T(DType::kInt32, {2, 4}); }),
       "block_table", kBad, "B = 3"},
      {"BlockTableColumnStride",
       With([] { return Paged(3); }, [](C c) { c.a.block_table.strides = {1, 3}; }),
       "block_table", kBad, "strides"},
      {"BlockTableTooFewColumns",
       With([] { return Paged(3); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{7, 1, 13}; }),
       "block_table", kBad, "batch 2 needs 5 blocks"},
      {"BlockIdPastBlocknum",
       With([] { return Paged(3); },
            [](C c) { static_cast<int32_t*>(c.a.block_table.data)[1] = 11; }),
       "block_table", kBad, "block_table[0][1] = 11"},
      {"BlockIdNegativeInUse",
       With([] { return Paged(3); },
            [](C c) { static_cast<int32_t*>(c.a.block_table.data)[4] = -1; }),
       "block_table", kBad, "block_table[1][0] = -1"},
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
       "key", kBad, "needed 6"},
      {"PagedWithoutActualSeqLengthsKv",
       With([] { return Paged(3); }, [](C c) { c.a.actual_seq_lengths_kv.reset(); }),
       "actual_seq_lengths_kv", kBad, "None"},
      {"PagedActualKvHuge",
       With([] { return Paged(3); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{INT64_MAX}; }),
       "actual_seq_lengths_kv", kBad, "9223372036854775807"},
      {"BlockTableExtentOverflow",
       With([] { return Paged(3); },
            [](C c) { c.a.block_table.strides = {int64_t{1} << 62, 1}; }),
       "block_table", kBad, "strides"},
      // ---- actual lengths ----
      {"ActualSeqLengthsBadLength",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{3, 4}; }),
       "actual_seq_lengths", kBad, "length 2"},
      {"ActualSeqLengthsEmpty",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{}; }),
       "actual_seq_lengths", kBad, "length 0"},
      {"ActualSeqLengthsTooLong",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{3, 18, 1}; }),
       "actual_seq_lengths", kBad, "batch 1: 18"},
      {"ActualSeqLengthsNegative",
       With(D0, [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{-1}; }),
       "actual_seq_lengths", kBad, "-1"},
      {"ActualSeqLengthsKvTooLong",
       With(D0, [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{1, 2, 18, 99}; }),
       "actual_seq_lengths_kv", kBad, "batch 2: 18"},
      {"TndDecreasing",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{17, 10, 51}; }),
       "actual_seq_lengths", kBad, "10 after 17"},
      {"TndLastPastT",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{17, 34, 52}; }),
       "actual_seq_lengths", kBad, "52 > 51"},
      {"TndNegative",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths = std::vector<int64_t>{-1, 34, 51}; }),
       "actual_seq_lengths", kBad, "-1"},
      {"TndKvCount",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 34}; }),
       "actual_seq_lengths_kv", kBad, "2 vs 3"},
      {"TndKvLastPastT",
       With([] { return Dense("TND"); },
            [](C c) { c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 34, 60}; }),
       "actual_seq_lengths_kv", kBad, "60 > 51"},
      // ---- left padding ----
      {"QueryPaddingStartNegative",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.I64(8);
            }),
       "query_padding_size", kBad, "query_padding_size = 8"},
      {"QueryPaddingDtype",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.T(DType::kInt32, {1});
            }),
       "query_padding_size", kBad, "int32"},
      {"QueryPaddingShape",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{10};
              c.a.query_padding_size = c.ar.T(DType::kInt64, {2});
            }),
       "query_padding_size", kBad, "[2]"},
      {"KvPaddingStartNegative",
       With(D0,
            [](C c) {
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{10};
              c.a.kv_padding_size = c.ar.I64(30);
            }),
       "kv_padding_size", kBad, "kv_padding_size = 30"},
      {"TndPaddingUnsupported",
       With([] { return Dense("TND"); },
            [](C c) { c.a.kv_padding_size = c.ar.I64(0); }),
       "kv_padding_size", kUns, "given"},
      {"QueryPaddingWithPaged",
       With([] { return Paged(3, 3, 4); },
            [](C c) {
              c.a.actual_seq_lengths = std::vector<int64_t>{4};
              c.a.query_padding_size = c.ar.I64(0);
            }),
       "query_padding_size", kUns, "block_table"},
      {"KvPaddingWithPaged",
       With([] { return Paged(3); }, [](C c) { c.a.kv_padding_size = c.ar.I64(0); }),
       "kv_padding_size", kUns, "block_table"},
      // ---- shared prefix ----
      {"PrefixWithPaged",
       With([] { return Paged(3); },
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 32});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 32});
            }),
       "key_shared_prefix", kUns, "block_table"},
      {"PrefixBatch2",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {2, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {2, 4, 51});
            }),
       "key_shared_prefix", kBad, "[2, 4, 51]"},
      {"PrefixHMismatch",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 48});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
            }),
       "key_shared_prefix", kBad, "[1, 4, 48]"},
      {"PrefixDtype",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kBFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
            }),
       "key_shared_prefix", kBad, "bfloat16"},
      {"PrefixSMismatch",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 5, 51});
            }),
       "value_shared_prefix", kBad, "5 vs 4"},
      {"PrefixLenTooLarge",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.actual_shared_prefix_len = c.ar.I64(5);
            }),
       "actual_shared_prefix_len", kBad, "5 with prefix S 4"},
      {"PrefixWithFullQuant",
       With(FullQuant,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_shared_prefix", kUns, "int8"},
      {"PrefixWithPadding",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.kv_padding_size = c.ar.I64(0);
            }),
       "key_shared_prefix", kUns, "padding"},
      // ---- atten_mask / sparse_mode ----
      {"TndMode0WithMask",
       With([] { return Dense("TND"); },
            [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {17, 17}); }),
       "sparse_mode", kUns, "sparse_mode 0 with"},
      {"TndMode2", With([] { return Dense("TND"); },
                        [](C c) {
                          c.a.sparse_mode = 2;
                          c.a.atten_mask = c.ar.CausalMask();
                        }),
       "sparse_mode", kUns, "sparse_mode 2"},
      {"Mode1WithoutMask", With(D0, [](C c) { c.a.sparse_mode = 1; }), "atten_mask", kBad,
       "None"},
      {"Mode3WithoutMask", With(D0, [](C c) { c.a.sparse_mode = 3; }), "atten_mask", kBad,
       "None"},
      {"MaskDtypeFloat",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kFloat16, {17, 17}); }), "atten_mask",
       kBad, "float16"},
      {"MaskNonContiguous",
       With(D0,
            [](C c) {
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
              c.a.atten_mask.strides = {1, 17};
            }),
       "atten_mask", kBad, "strides"},
      {"Mode3MaskShape",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
            }),
       "atten_mask", kBad, "[17, 17]"},
      {"Mode3MaskBatched",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.T(DType::kBool, {3, 2048, 2048});
            }),
       "atten_mask", kBad, "[3, 2048, 2048]"},
      {"Mode2MaskNotTriu",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 2;
              c.a.atten_mask = c.ar.CausalMask();
              static_cast<uint8_t*>(c.a.atten_mask.data)[5 * 2048 + 3] = 1;
            }),
       "atten_mask", kBad, "mask[5][3] = 1"},
      {"Mode4MaskZeros",
       With(D0,
            [](C c) {
              c.a.sparse_mode = 4;
              c.a.atten_mask = c.ar.T(DType::kUInt8, {1, 1, 2048, 2048});
            }),
       "atten_mask", kBad, "mask[0][1] = 0"},
      {"Mask1D", With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {17}); }),
       "atten_mask", kBad, "[17]"},
      {"MaskBatchAxis",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {2, 17, 17}); }), "atten_mask",
       kBad, "[2, 17, 17]"},
      {"Mask4DHeadAxis",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {3, 3, 17, 17}); }),
       "atten_mask", kBad, "[3, 3, 17, 17]"},
      {"MaskTooFewRows",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {16, 32}); }), "atten_mask",
       kBad, "[16, 32]"},
      {"MaskTooFewCols",
       With(D0, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {1, 17, 16}); }), "atten_mask",
       kBad, "[1, 17, 16]"},
      {"MaskColsMissPrefix",
       With(D0,
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kFloat16, {1, 4, 51});
              c.a.actual_shared_prefix_len = c.ar.I64(3);
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 19});
            }),
       "atten_mask", kBad, "[17, 19]"},
      {"MaskPagedColsTooFew",  // maxBlockNumPerSeq * block_size = 9
       With([] { return Paged(3); },
            [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {3, 8}); }),
       "atten_mask", kBad, "[3, 8]"},
      {"IncMask2DBatch",
       With(Inc, [](C c) { c.a.atten_mask = c.ar.T(DType::kBool, {2, 17}); }), "atten_mask",
       kBad, "[2, 17]"},
      // ---- pse_shift ----
      {"PseWithTnd",
       With([] { return Dense("TND"); },
            [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 17, 17}); }),
       "pse_shift", kUns, "[1, 3, 17, 17]"},
      {"PseDtypeInt8",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kInt8, {1, 3, 17, 17}); }), "pse_shift",
       kBad, "int8"},
      {"PseBf16WithF16Query",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kBFloat16, {1, 3, 17, 17}); }),
       "pse_shift", kBad, "bfloat16 with query float16"},
      {"IncPseDtypeMismatch",
       With([] { return Dense("BSH", 3, 1, 3, 3, 17, 17, DType::kBFloat16); },
            [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 1, 17}); }),
       "pse_shift", kBad, "float16 vs bfloat16"},
      {"Pse3D", With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 17, 17}); }),
       "pse_shift", kBad, "[3, 17, 17]"},
      {"PseHeads",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 1, 17, 17}); }),
       "pse_shift", kBad, "[1, 1, 17, 17]"},
      {"PseQsTooSmall",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 3, 16, 17}); }),
       "pse_shift", kBad, "[3, 3, 16, 17]"},
      {"PseKvTooSmall",
       With(D0, [](C c) { c.a.pse_shift = c.ar.T(DType::kFloat16, {3, 3, 17, 16}); }),
       "pse_shift", kBad, "[3, 3, 17, 16]"},
      {"PseNonContiguous",
       With(D0,
            [](C c) {
              c.a.pse_shift = c.ar.T(DType::kFloat16, {1, 3, 17, 17});
              c.a.pse_shift.strides = {867, 289, 1, 17};
            }),
       "pse_shift", kBad, "strides"},
      // ---- antiquant ----
      {"AntiquantWithFloatKv",
       With(D0, [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2}); }),
       "antiquant_scale", kBad, "float16 key"},
      {"Int8KvWithoutAntiquant",
       With([] { return Antiquant(); }, [](C c) { c.a.antiquant_scale = TensorView(); }),
       "antiquant_scale", kBad, "None"},
      {"LegacyAntiquantMode2",
       With([] { return Antiquant(); }, [](C c) { c.a.antiquant_mode = 2; }), "antiquant_mode",
       kBad, "2"},
      {"LegacyPerTensorShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {3}); }),
       "antiquant_scale", kBad, "[3]"},
      {"LegacyPerChannelShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2, 50}); }),
       "antiquant_scale", kBad, "[2, 50]"},
      {"LegacyPerTokenShape",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_mode = 1;
              c.a.antiquant_scale = c.ar.T(DType::kFloat32, {2, 3, 16});
            }),
       "antiquant_scale", kBad, "[2, 3, 16]"},
      {"LegacyPerTokenDtype",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.antiquant_mode = 1;
              c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2, 3, 17});
            }),
       "antiquant_scale", kBad, "float16"},
      {"LegacyPerChannelDtype",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat32, {2, 51}); }),
       "antiquant_scale", kBad, "float32 vs query float16"},
      {"LegacyOffsetShape",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_offset = c.ar.T(DType::kFloat16, {2, 3, 17}); }),
       "antiquant_offset", kBad, "[2, 3, 17]"},
      {"LegacyOffsetDtype",
       With([] { return Antiquant(); },
            [](C c) { c.a.antiquant_offset = c.ar.T(DType::kBFloat16, {2, 51}); }),
       "antiquant_offset", kBad, "bfloat16"},
      {"KeyAntiquantMode6",
       With([] { return SepAq(0); }, [](C c) { c.a.key_antiquant_mode = 6; }),
       "key_antiquant_mode", kBad, "6"},
      {"AntiquantModesDiffer",
       With([] { return SepAq(1); }, [](C c) { c.a.value_antiquant_mode = 0; }),
       "value_antiquant_mode", kBad, "value_antiquant_mode = 0"},
      {"SepMode0Shape",
       With([] { return SepAq(0); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 3, 2, 17}); }),
       "key_antiquant_scale", kBad, "[1, 3, 2, 17]"},
      {"SepMode1Batch",
       With([] { return SepAq(1); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {1, 2, 17}); }),
       "value_antiquant_scale", kBad, "[1, 2, 17]"},
      {"SepMode1Dtype",
       With([] { return SepAq(1); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1, 3, 17}); }),
       "key_antiquant_scale", kBad, "float16"},
      {"SepMode2Shape",
       With([] { return SepAq(2); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat16, {1}); }),
       "key_antiquant_scale", kBad, "[1]"},
      {"SepMode3Shape",
       With([] { return SepAq(3); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {3, 1, 17}); }),
       "key_antiquant_scale", kBad, "[3, 1, 17]"},
      {"SepMode4Shape",
       With([] { return SepAq(4, true); },
            [](C c) { c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {8, 4}); }),
       "key_antiquant_scale", kBad, "[8, 4]"},
      {"SepMode5Shape",
       With([] { return SepAq(5, true); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {8, 3}); }),
       "value_antiquant_scale", kBad, "[8, 3]"},
      {"SepOffsetShape",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_antiquant_offset = c.ar.T(DType::kFloat32, {3, 17});
              c.a.value_antiquant_offset = c.ar.T(DType::kFloat32, {1, 3, 17});
            }),
       "key_antiquant_offset", kBad, "[3, 17]"},
      {"SepValueShapeDiffers",
       With([] { return SepAq(0); },
            [](C c) { c.a.value_antiquant_scale = c.ar.T(DType::kFloat16, {1, 51}); }),
       "value_antiquant_scale", kBad, "[1, 51]"},
      {"SepQs17Mode0Unsupported",
       With([] { return SepAq(0); },
            [](C c) {
              c.a.query = c.ar.T(DType::kFloat16, {3, 17, 51});
            }),
       "key_antiquant_mode", kUns, "key_antiquant_mode = 0"},
      {"SepQs17WithPrefixUnsupported",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.query = c.ar.T(DType::kFloat16, {3, 17, 51});
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_antiquant_scale", kUns, "prefix"},
      {"PagedAntiquantQs17",
       With([] { return Paged(3, 3, 17, 3, 1, 32, 3, {7, 1, 5}, DType::kInt8); },
            [](C c) { c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2}); }),
       "block_table", kUns, "int8 key"},
      {"PagedPerTokenMode1",
       With([] { return SepAq(4, true); },
            [](C c) {
              c.a.key_antiquant_mode = c.a.value_antiquant_mode = 1;
              c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {1, 3, 1});
              c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {1, 3, 1});
            }),
       "key_antiquant_scale", kUns, "block_table"},
      {"Mode4WithoutPaging",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_antiquant_mode = c.a.value_antiquant_mode = 4;
              c.a.key_antiquant_scale = c.ar.T(DType::kFloat32, {0, 0});
              c.a.value_antiquant_scale = c.ar.T(DType::kFloat32, {0, 0});
            }),
       "key_antiquant_mode", kBad, "block_table is None"},
      {"PrefixWithPerToken",
       With([] { return SepAq(1); },
            [](C c) {
              c.a.key_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
              c.a.value_shared_prefix = c.ar.T(DType::kInt8, {1, 4, 51});
            }),
       "key_antiquant_scale", kUns, "key_shared_prefix"},
      {"Int4Paged",
       With([] { return Paged(4, 3, 1, 3, 1, 32, 3, {7, 1, 5}, DType::kInt32); },
            [](C c) {
              c.a.key = c.ar.T(DType::kInt32, {8, 1, 3, 4});
              c.a.value = c.a.key;
              c.a.antiquant_scale = c.ar.T(DType::kFloat16, {2});
            }),
       "block_table", kUns, "int32 key"},
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
       "kv_padding_size", kUns, "int32 key"},
      {"TndFullQuant",
       With([] { return Dense("TND", 3, 17, 3, 3, 17, 17, DType::kInt8); },
            [](C c) {
              c.a.dequant_scale1 = c.ar.F32({1}, 1.f);
              c.a.quant_scale1 = c.ar.F32({1}, 1.f);
              c.a.dequant_scale2 = c.ar.F32({1}, 1.f);
            }),
       "query", kUns, "int8"},
      {"PagedInt8Query",
       With([] { return Paged(3, 3, 17, 3, 1, 32, 3, {7, 1, 5}, DType::kInt8); },
            [](C c) {
              c.a.query = c.ar.T(DType::kInt8, {3, 17, 96});
              c.a.dequant_scale1 = c.ar.F32({1}, 1.f);
              c.a.quant_scale1 = c.ar.F32({1}, 1.f);
              c.a.dequant_scale2 = c.ar.F32({1}, 1.f);
            }),
       "query", kUns, "int8"},
      // ---- full quantization ----
      {"FullQuantMissingDs1",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = TensorView(); }), "dequant_scale1", kBad,
       "None"},
      {"FullQuantMissingQs1", With(FullQuant, [](C c) { c.a.quant_scale1 = TensorView(); }),
       "quant_scale1", kBad, "None"},
      {"FullQuantMissingDs2", With(FullQuant, [](C c) { c.a.dequant_scale2 = TensorView(); }),
       "dequant_scale2", kBad, "None"},
      {"Ds1DtypeF16",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = c.ar.T(DType::kFloat16, {1}); }),
       "dequant_scale1", kBad, "float16"},
      {"Ds1PerChannel",
       With(FullQuant, [](C c) { c.a.dequant_scale1 = c.ar.F32({3}, 1.f); }), "dequant_scale1",
       kBad, "[3]"},
      {"Qs1Uint64",
       With(FullQuant, [](C c) { c.a.quant_scale1 = c.ar.T(DType::kUInt64, {1}); }),
       "quant_scale1", kBad, "uint64"},
      {"Ds1WithFloatQuery",
       With(D0, [](C c) { c.a.dequant_scale1 = c.ar.F32({1}, 1.f); }), "dequant_scale1", kBad,
       "[1]"},
      // ---- post-quantization ----
      {"Qs2DtypeF16",
       With(D0, [](C c) { c.a.quant_scale2 = c.ar.T(DType::kFloat16, {1}); }), "quant_scale2",
       kBad, "float16"},
      {"Qs2Bf16WithF16Query",
       With(D0, [](C c) { c.a.quant_scale2 = c.ar.T(DType::kBFloat16, {1}); }),
       "quant_scale2", kBad, "bfloat16 with query float16"},
      {"Qs2Numel", With(D0, [](C c) { c.a.quant_scale2 = c.ar.F32({17}, 1.f); }),
       "quant_scale2", kBad, "[17]"},
      {"Qo2ShapeDiffers",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({3, 17}, 1.f);
              c.a.quant_offset2 = c.ar.F32({51}, 1.f);
            }),
       "quant_offset2", kBad, "[51]"},
      {"Qs2WithTnd",
       With([] { return Dense("TND"); }, [](C c) { c.a.quant_scale2 = c.ar.F32({1}, 1.f); }),
       "quant_scale2", kUns, "TND"},
      {"Qs2PerChannelWithPadding",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({51}, 1.f);
              c.a.actual_seq_lengths = std::vector<int64_t>{4};
              c.a.query_padding_size = c.ar.I64(1);
            }),
       "quant_scale2", kUns, "left padding"},
      {"Qs2BandNegativePre",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.sparse_mode = 4;
              c.a.atten_mask = c.ar.CausalMask();
              c.a.pre_tokens = -1;
              c.a.next_tokens = 5;
            }),
       "sparse_mode", kUns, "pre_tokens = -1"},
      {"Qo2Mode3MoreQueriesThanKeys",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.quant_offset2 = c.ar.F32({1}, 1.f);
              c.a.sparse_mode = 3;
              c.a.atten_mask = c.ar.CausalMask();
              c.a.actual_seq_lengths_kv = std::vector<int64_t>{17, 10, 17};
            }),
       "quant_offset2", kUns, "batch 1"},
      {"Qo2Mode0NegativeNext",
       With(D0,
            [](C c) {
              c.a.quant_scale2 = c.ar.F32({1}, 1.f);
              c.a.quant_offset2 = c.ar.F32({1}, 1.f);
              c.a.atten_mask = c.ar.T(DType::kBool, {17, 17});
              c.a.next_tokens = -1;
            }),
       "quant_offset2", kUns, "next_tokens -1"},
      // ---- MLA ----
      {"QueryRopeDtype",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kBFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
            }),
       "query_rope", kBad, "bfloat16"},
      {"KeyRopeShape",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 16});
            }),
       "key_rope", kBad, "[11, 3, 16]"},
      {"MlaNzBnsd",
       With([] { return Paged(5, 3, 1, 3, 1, 32, 3, {7, 1, 5}, DType::kFloat16, "BNSD"); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 3, 1, 16});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 1, 1, 3, 16});
            }),
       "key_rope", kUns, "BNSD"},
      {"MlaIncWithMask",
       With([] { return Paged(3, 3, 1, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
              c.a.atten_mask = c.ar.T(DType::kBool, {3, 9});
            }),
       "atten_mask", kUns, "[3, 9]"},
      {"MlaQs17Mode0",
       With([] { return Paged(3, 3, 4, 3, 1, 32, 3); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 4, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kFloat16, {c.a.key.size(0), 3, 8});
            }),
       "sparse_mode", kUns, "sparse_mode 0 without"},
      {"MlaWithInt8Kv",
       With([] { return Antiquant(); },
            [](C c) {
              c.a.query_rope = c.ar.T(DType::kFloat16, {3, 1, 3 * 8});
              c.a.key_rope = c.ar.T(DType::kInt8, {3, 17, 3 * 8});
            }),
       "key_rope", kUns, "int8 key"},
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
       "num_heads", kBad, "num_heads = 4611686018427387904"},
  };
  return v;
}

INSTANTIATE_TEST_SUITE_P(Rules, FiaRejects, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& i) { return i.param.name; });

}  // namespace
}  // namespace openfia::internal
