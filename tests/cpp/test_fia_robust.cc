// Robustness of the public entry points of all three operators: random mutations of valid calls
// (shapes, dtypes, strides, absent / extra tensors, scalars, lengths, block tables, sparse
// indices, metadata words) must either run or throw openfia::Error naming an argument, never any
// other exception, never an internal error, never a crash. The ASan + UBSan build runs this too,
// so an out-of-bounds read or undefined behaviour on any mutated call fails it. Bases: the FIA
// case list's smoke tier, and the sparse operators' test fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "case_list.h"
#include "openfia/openfia.h"
#include "test_arena.h"
#include "test_kvqsfa_util.h"
#include "test_sas_fixture.h"

namespace openfia {
namespace {

constexpr int64_t kMaxBytes = 4 << 20;  // a mutated tensor or output larger than this is skipped

std::vector<TensorView*> Tensors(FiaArgs& a) {
  std::vector<TensorView*> t = {
      &a.query, &a.key, &a.value, &a.pse_shift, &a.atten_mask, &a.dequant_scale1,
      &a.quant_scale1, &a.dequant_scale2, &a.quant_scale2, &a.quant_offset2, &a.antiquant_scale,
      &a.antiquant_offset, &a.block_table, &a.query_padding_size, &a.kv_padding_size,
      &a.key_antiquant_scale, &a.key_antiquant_offset, &a.value_antiquant_scale,
      &a.value_antiquant_offset, &a.key_shared_prefix, &a.value_shared_prefix,
      &a.actual_shared_prefix_len, &a.query_rope, &a.key_rope, &a.key_rope_antiquant_scale,
      &a.sinks};
  for (TensorView& x : a.key_list) t.push_back(&x);
  for (TensorView& x : a.value_list) t.push_back(&x);
  return t;
}

bool IsFloatDType(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}

class Mutator {
 public:
  Mutator(uint64_t seed, testutil::Arena* ar) : rng_(seed), ar_(ar) {}

  int64_t Int(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  const T& Pick(const std::vector<T>& v) { return v[static_cast<size_t>(Int(0, static_cast<int64_t>(v.size()) - 1))]; }

  // A size near s, or a small / odd one.
  int64_t Size(int64_t s) {
    return Pick<int64_t>({0, 1, 2, 3, 7, 16, 33, s - 1, s + 1, 2 * s, s / 2, 128});
  }

  // t with new memory of its (possibly new) sizes, dtype and strides, filled with values of the
  // dtype: integers mostly small (plausible lengths, block ids, indices), sometimes extreme;
  // floats any bit pattern. False when it would be too large.
  bool Realloc(TensorView* t, bool keep_strides = false) {
    for (int64_t s : t->sizes)
      if (s < 0 || s > kMaxBytes) return false;
    std::vector<int64_t> strides =
        keep_strides && t->strides.size() == t->sizes.size() ? t->strides
                                                            : TensorView::ContiguousStrides(t->sizes);
    int64_t span = 1;  // elements the strides reach
    for (size_t i = 0; i < t->sizes.size(); ++i) {
      if (t->sizes[i] == 0) {
        span = 0;
        break;
      }
      span += (t->sizes[i] - 1) * strides[i];
    }
    const int64_t es = ElementSize(t->dtype);
    if (span * es > kMaxBytes) return false;
    const int64_t n = std::max<int64_t>(1, span);
    TensorView fresh = ar_->T(DType::kUInt8, {n * es});
    auto* p = static_cast<uint8_t*>(fresh.data);
    for (int64_t i = 0; i < n; ++i) {
      switch (t->dtype) {
        case DType::kBool: p[i] = static_cast<uint8_t>(Int(0, 1)); break;
        case DType::kInt32: {
          const int32_t v = static_cast<int32_t>(Coin(0.9) ? Int(-2, 40) : Int(INT32_MIN, INT32_MAX));
          std::memcpy(p + 4 * i, &v, 4);
          break;
        }
        case DType::kInt64: case DType::kUInt64: {
          const int64_t v = Coin(0.9) ? Int(-2, 40) : Int(INT64_MIN, INT64_MAX);
          std::memcpy(p + 8 * i, &v, 8);
          break;
        }
        default:
          for (int64_t b = 0; b < es; ++b) p[es * i + b] = static_cast<uint8_t>(Int(0, 255));
      }
    }
    if (IsFloatDType(t->dtype) && Coin(0.7)) {  // mostly ordinary numbers
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(Int(-300, 300)) / 64.f;
        if (t->dtype == DType::kFloat32) std::memcpy(p + 4 * i, &v, 4);
        else {
          uint32_t u;
          std::memcpy(&u, &v, 4);
          const uint16_t h = static_cast<uint16_t>(u >> 16);  // bf16 bits (as f16: some value)
          std::memcpy(p + 2 * i, &h, 2);
        }
      }
    }
    t->data = fresh.data;
    t->strides = strides;
    return true;
  }

  // One random change of one of the tensors ts (kinds 0-6); false when it made a tensor too
  // large (skip the call).
  bool MutateTensor(const std::vector<TensorView*>& ts, int64_t kind) {
    std::vector<TensorView*> present;
    for (TensorView* t : ts)
      if (t->defined()) present.push_back(t);
    if (present.empty()) return true;
    switch (kind) {
      case 0: {  // one size
        TensorView* t = Pick(present);
        if (t->sizes.empty()) return true;
        const int64_t d = Int(0, t->dim() - 1);
        t->sizes[d] = Size(t->sizes[d]);
        return Realloc(t);
      }
      case 1: {  // one dimension more or less
        TensorView* t = Pick(present);
        if (Coin() && !t->sizes.empty()) t->sizes.pop_back();
        else t->sizes.insert(t->sizes.begin() + Int(0, t->dim()), Int(1, 3));
        return Realloc(t);
      }
      case 2: {  // dtype
        TensorView* t = Pick(present);
        t->dtype = static_cast<DType>(Int(0, static_cast<int64_t>(DType::kHiFloat8)));
        return Realloc(t);
      }
      case 3: {  // strides: zero (broadcast), padded or swapped
        TensorView* t = Pick(present);
        if (t->dim() < 1) return true;
        std::vector<int64_t> st = TensorView::ContiguousStrides(t->sizes);
        const int64_t d = Int(0, t->dim() - 1);
        st[d] = Pick<int64_t>({0, st[d] * 2 + 1, st[d] + 3});
        if (t->dim() >= 2 && Coin()) std::swap(st[0], st[t->dim() - 1]);
        t->strides = st;
        return Realloc(t, true);
      }
      case 4: {  // an argument absent
        *Pick(present) = TensorView();
        return true;
      }
      case 5: {  // an argument (absent or not) replaced: a small tensor of any shape and dtype
        TensorView* t = Pick(ts);
        std::vector<int64_t> sizes(static_cast<size_t>(Int(0, 4)));
        for (int64_t& s : sizes) s = Int(1, 9);
        *t = TensorView(nullptr, static_cast<DType>(Int(0, static_cast<int64_t>(DType::kHiFloat8))),
                        sizes);
        return Realloc(t);
      }
      default:  // new contents (table entries, lengths, indices, scales, any values)
        return Realloc(Pick(present), true);
    }
  }

  // One random change of an FIA call.
  bool Mutate(FiaArgs& a) {
    const int64_t kind = Int(0, 10);
    if (kind <= 6) return MutateTensor(Tensors(a), kind);
    switch (kind) {
      case 7: {  // a scalar argument
        switch (Int(0, 10)) {
          case 0: a.num_heads = Pick<int64_t>({0, 1, -1, a.num_heads * 2, a.num_heads + 1, 1 << 20}); break;
          case 1: a.num_key_value_heads = Pick<int64_t>({0, 1, -1, 3, a.num_heads, a.num_heads + 1}); break;
          case 2: a.sparse_mode = Int(-1, 9); break;
          case 3: a.pre_tokens = Pick<int64_t>({-5, 0, 1, 3, 2147483647, INT64_MAX, INT64_MIN}); break;
          case 4: a.next_tokens = Pick<int64_t>({-5, 0, 1, 3, 2147483647, INT64_MAX, INT64_MIN}); break;
          case 5: a.block_size = Pick<int64_t>({-1, 0, 1, 3, 16, 128, 1 << 30}); break;
          case 6: a.inner_precise = Int(-1, 5); break;
          case 7: a.antiquant_mode = Int(-1, 3); break;
          case 8: a.key_antiquant_mode = Int(-1, 7); a.value_antiquant_mode = Int(-1, 7); break;
          case 9:
            a.scale = Pick<double>({0.0, -1.0, 1e30, std::numeric_limits<double>::quiet_NaN(),
                                    std::numeric_limits<double>::infinity()});
            break;
          default:
            a.input_layout = Pick<std::string>({"BSH", "BSND", "BNSD", "BNSD_BSND", "TND", "NSD",
                                                "bsh", "", "BNSD_NBSD", "NTD", "TND_NTD",
                                                "BSH_NBSD", "NTD_BSH"});
        }
        return true;
      }
      case 8: {  // actual lengths
        auto& v = Coin() ? a.actual_seq_lengths : a.actual_seq_lengths_kv;
        if (Coin(0.2)) {
          v.reset();
          return true;
        }
        std::vector<int64_t> x(static_cast<size_t>(Int(0, 5)));
        for (int64_t& e : x) e = Coin(0.9) ? Int(-2, 70) : Pick<int64_t>({INT64_MAX, INT64_MIN, 1 << 30});
        v = x;
        return true;
      }
      case 9: {  // tensor lists: one entry less, or one of another shape
        if (a.key_list.empty()) return true;
        if (Coin()) {
          (Coin() ? a.key_list : a.value_list).pop_back();
          return true;
        }
        TensorView& t = a.key_list[static_cast<size_t>(Int(0, static_cast<int64_t>(a.key_list.size()) - 1))];
        if (t.sizes.empty()) return true;
        const int64_t d = Int(0, t.dim() - 1);
        t.sizes[d] = Size(t.sizes[d]);
        return Realloc(&t);
      }
      default:
        a.softmax_lse_flag = !a.softmax_lse_flag;
        return true;
    }
  }

 private:
  std::mt19937_64 rng_;
  testutil::Arena* ar_;
};

// Outcomes of the mutated calls of one test.
struct Outcome {
  int ran = 0, rejected = 0, skipped = 0;
  // run() returns false when the call was skipped (outputs too large); an openfia::Error must
  // name its argument and never be an internal error; any other exception fails the test.
  template <class F>
  void Classify(const std::string& what, const F& run) {
    try {
      if (run()) ++ran;
      else ++skipped;
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(e.code(), ErrorCode::kInternal) << what << ": " << e.what();
      EXPECT_FALSE(e.argument().empty()) << what << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": not an openfia::Error: " << e.what();
    }
  }
  // Both outcomes must be exercised.
  void Check(const char* op, int iters) const {
    EXPECT_GT(ran, iters / 20) << op;
    EXPECT_GT(rejected, iters / 4) << op;
    std::printf("%s: %d mutated calls: %d ran, %d rejected, %d skipped (too large)\n", op, iters,
                ran, rejected, skipped);
  }
};

int Iters(int def) {
  return std::getenv("ROBUST_ITERS") ? std::atoi(std::getenv("ROBUST_ITERS")) : def;
}

// Elements of a shape, or -1 when over kMaxBytes / 4 (or negative).
int64_t SmallNumel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s < 0 || s > kMaxBytes) return -1;
    n *= s;
    if (n > kMaxBytes / 4) return -1;
  }
  return n;
}

TEST(Robustness, FusedInferAttentionScoreMutations) {
  const std::vector<cases::CaseSpec> specs =
      cases::TierCases(std::string(OPENFIA_CASES_DIR) + "/fia_cases.txt", "smoke");
  ASSERT_FALSE(specs.empty());
  std::vector<std::unique_ptr<cases::FiaCase>> calls;
  for (const cases::CaseSpec& s : specs) calls.push_back(std::make_unique<cases::FiaCase>(s));
  const int iters = Iters(3000);
  Outcome o;
  for (int it = 0; it < iters; ++it) {
    testutil::Arena ar;
    Mutator m(0x5EED0000u + static_cast<uint64_t>(it), &ar);
    const cases::FiaCase& base = *calls[static_cast<size_t>(m.Int(0, static_cast<int64_t>(calls.size()) - 1))];
    FiaArgs a = base.args();
    bool ok = true;
    for (int64_t k = m.Int(1, 3); k > 0 && ok; --k) ok = m.Mutate(a);
    o.Classify(base.spec().ToLine() + " (iteration " + std::to_string(it) + ")", [&] {
      if (!ok) return false;
      const FiaOutputSpec spec = FusedInferAttentionScoreOutputSpec(a);
      if (SmallNumel(spec.attention_out_sizes) < 0 || SmallNumel(spec.softmax_lse_sizes) < 0)
        return false;
      FusedInferAttentionScore(a, ar.T(spec.attention_out_dtype, spec.attention_out_sizes),
                               ar.T(DType::kFloat32, spec.softmax_lse_sizes));
      return true;
    });
  }
  o.Check("npu_fused_infer_attention_score", iters);
}

TEST(Robustness, KvQuantSparseFlashAttentionMutations) {
  std::vector<kvqtest::Case> cs(5);
  cs[1].layout_kv = "PA_BSND";
  cs[1].batch = 2;
  cs[1].act_kv = {24, 13};
  cs[1].sinks = true;
  cs[2].layout_q = cs[2].layout_kv = "TND";
  cs[2].kvdt = DType::kFloat8E4M3;
  cs[2].sparse_block_size = 4;
  cs[2].batch = 2;
  cs[3].kvdt = DType::kUInt8;
  cs[3].sparse_mode = 0;
  cs[3].pass_act_q = cs[3].pass_act_kv = true;
  cs[4].layout_kv = "PA_BSND";
  cs[4].sparse_block_size = 8;
  cs[4].s2 = 40;
  std::vector<kvqtest::Built> built;
  for (const kvqtest::Case& c : cs) built.push_back(kvqtest::Build(c));
  const int iters = Iters(2000);
  Outcome o;
  for (int it = 0; it < iters; ++it) {
    testutil::Arena ar;
    Mutator m(0xC0FFEE00u + static_cast<uint64_t>(it), &ar);
    const int64_t base = m.Int(0, static_cast<int64_t>(built.size()) - 1);
    KvqsfaArgs a = built[static_cast<size_t>(base)].Args();
    bool ok = true;
    for (int64_t k = m.Int(1, 3); k > 0 && ok; --k) {
      const int64_t kind = m.Int(0, 8);
      if (kind <= 6) {
        ok = m.MutateTensor({&a.query, &a.key, &a.value, &a.sparse_indices, &a.key_dequant_scale,
                             &a.value_dequant_scale, &a.block_table, &a.actual_seq_lengths_query,
                             &a.actual_seq_lengths_kv, &a.sinks},
                            kind);
        continue;
      }
      switch (m.Int(0, 11)) {
        case 0: a.scale_value = m.Pick<double>({0.0, -1.0, std::nan(""), 1e300}); break;
        case 1: a.key_quant_mode = m.Int(-1, 3); break;
        case 2: a.value_quant_mode = m.Int(-1, 3); break;
        case 3: a.sparse_block_size = m.Pick<int64_t>({-1, 0, 1, 2, 3, 4, 16, 128, 256, 1 << 30}); break;
        case 4: a.layout_query = m.Pick<std::string>({"BSND", "TND", "BNSD", ""}); break;
        case 5: a.layout_kv = m.Pick<std::string>({"BSND", "TND", "PA_BSND", "PA_ND", ""}); break;
        case 6: a.sparse_mode = m.Int(-1, 4); break;
        case 7: a.pre_tokens = m.Pick<int64_t>({-1, 0, 5, INT64_MAX}); break;
        case 8: a.next_tokens = m.Pick<int64_t>({-1, 0, 5, INT64_MAX}); break;
        case 9: a.attention_mode = m.Int(-1, 3); break;
        case 10: a.tile_size = m.Pick<int64_t>({0, 64, 128, 256}); break;
        default: a.rope_head_dim = m.Pick<int64_t>({0, 32, 64, 128}); break;
      }
    }
    o.Classify("kvqsfa base " + std::to_string(base) + " (iteration " + std::to_string(it) + ")", [&] {
      if (!ok) return false;
      const KvqsfaOutputSpec spec = KvQuantSparseFlashAttentionOutputSpec(a);
      if (SmallNumel(spec.attention_out_sizes) < 0) return false;
      KvQuantSparseFlashAttention(a, ar.T(spec.attention_out_dtype, spec.attention_out_sizes));
      return true;
    });
  }
  o.Check("npu_kv_quant_sparse_flash_attention", iters);
}

TEST(Robustness, SparseAttnSharedkvAndMetadataMutations) {
  std::vector<std::unique_ptr<sas_test::SasFixture>> fx;
  std::vector<SasArgs> bases;
  for (int v = 0; v < 4; ++v) {
    auto f = std::make_unique<sas_test::SasFixture>();
    f->poison = false;
    if (v == 1) f->ratio = 128, f->kv_len = {300, 130}, f->dtype = DType::kBFloat16;
    if (v == 2) f->ratio = 4, f->k2 = 8, f->tnd = true, f->q_len = {3, 1};
    if (v == 3) f->ratio = 4, f->k2 = 5, f->ori_mask_mode = 3, f->with_sinks = false;
    bases.push_back(f->Build());
    fx.push_back(std::move(f));
  }
  const int iters = Iters(2000);
  Outcome o, om;
  int meta_iters = 0;
  for (int it = 0; it < iters; ++it) {
    testutil::Arena ar;
    Mutator m(0xABBA0000u + static_cast<uint64_t>(it), &ar);
    const int64_t base = m.Int(0, static_cast<int64_t>(bases.size()) - 1);
    sas_test::SasFixture& f = *fx[static_cast<size_t>(base)];
    const std::string what = "sas base " + std::to_string(base) + " (iteration " + std::to_string(it) + ")";
    if (m.Coin(0.2)) {  // the metadata op itself, its arguments mutated
      ++meta_iters;
      SasMetadataArgs ma = f.MetaArgs(m.Int(-1, 40));
      bool ok = true;
      for (int64_t k = m.Int(1, 3); k > 0 && ok; --k) {
        const int64_t kind = m.Int(0, 8);
        if (kind <= 6) {
          ok = m.MutateTensor({&ma.cu_seqlens_q, &ma.cu_seqlens_ori_kv, &ma.cu_seqlens_cmp_kv,
                               &ma.seqused_q, &ma.seqused_kv}, kind);
          continue;
        }
        switch (m.Int(0, 9)) {
          case 0: ma.num_heads_q = m.Pick<int64_t>({-1, 0, 1, 64, 1 << 20, 1LL << 40}); break;
          case 1: ma.num_heads_kv = m.Int(-1, 2); break;
          case 2: ma.head_dim = m.Pick<int64_t>({-1, 0, 1, 512, 1LL << 40}); break;
          case 3: ma.batch_size = m.Pick<int64_t>({-1, 0, 1, 2, 5, 1LL << 32, INT64_MAX}); break;
          case 4: ma.max_seqlen_q = m.Pick<int64_t>({-1, 0, 1, 3, 1 << 16, 1LL << 31, INT64_MAX}); break;
          case 5: ma.max_seqlen_kv = m.Pick<int64_t>({-1, 0, 1, 300, INT64_MAX}); break;
          case 6: ma.cmp_topk = m.Pick<int64_t>({-1, 0, 1, 8, 1LL << 40}); break;
          case 7: ma.cmp_ratio = m.Pick<int64_t>({-1, 0, 3, 4, 128}); break;
          case 8: ma.ori_mask_mode = m.Int(-1, 5); break;
          default: ma.layout_q = m.Pick<std::string>({"BSND", "TND", ""}); break;
        }
      }
      om.Classify(what + " metadata", [&] {
        if (!ok) return false;
        const TensorView md = ar.T(DType::kInt32, {kSasMetadataWords});
        SparseAttnSharedkvMetadata(ma, md);
        VerifySasMetadata(ma, md);
        return true;
      });
      continue;
    }
    SasArgs a = bases[static_cast<size_t>(base)];
    if (m.Coin(0.4)) {  // metadata planned for the base call, some words then overwritten
      const TensorView md = ar.T(DType::kInt32, {kSasMetadataWords});
      SparseAttnSharedkvMetadata(f.MetaArgs(m.Int(1, 8)), md);
      auto* w = static_cast<int32_t*>(md.data);
      for (int64_t k = m.Int(0, 3); k > 0; --k)
        w[m.Int(0, kSasMetadataWords - 1)] =
            static_cast<int32_t>(m.Coin(0.8) ? m.Int(-2, 40) : m.Int(INT32_MIN, INT32_MAX));
      a.metadata = md;
    }
    bool ok = true;
    for (int64_t k = m.Int(1, 3); k > 0 && ok; --k) {
      const int64_t kind = m.Int(0, 8);
      if (kind <= 6) {
        ok = m.MutateTensor({&a.q, &a.ori_kv, &a.cmp_kv, &a.ori_sparse_indices,
                             &a.cmp_sparse_indices, &a.ori_block_table, &a.cmp_block_table,
                             &a.cu_seqlens_q, &a.cu_seqlens_ori_kv, &a.cu_seqlens_cmp_kv,
                             &a.seqused_q, &a.seqused_kv, &a.sinks, &a.metadata},
                            kind);
        continue;
      }
      switch (m.Int(0, 8)) {
        case 0:
          a.softmax_scale = m.Coin(0.2) ? std::nullopt
                                        : std::optional<double>(m.Pick<double>({0.0, -1.0, std::nan("")}));
          break;
        case 1: a.cmp_ratio = m.Coin(0.2) ? std::nullopt : std::optional<int64_t>(m.Pick<int64_t>({-1, 0, 3, 4, 128})); break;
        case 2: a.ori_mask_mode = m.Int(-1, 5); break;
        case 3: a.cmp_mask_mode = m.Int(-1, 5); break;
        case 4: a.ori_win_left = m.Pick<int64_t>({-1, 0, 127, INT64_MAX}); break;
        case 5: a.ori_win_right = m.Pick<int64_t>({-1, 0, 1}); break;
        case 6: a.layout_q = m.Pick<std::string>({"BSND", "TND", "BNSD", ""}); break;
        case 7: a.layout_kv = m.Pick<std::string>({"PA_ND", "ND", ""}); break;
        default: a.return_softmax_lse = !a.return_softmax_lse; break;
      }
    }
    o.Classify(what, [&] {
      if (!ok) return false;
      const SasOutputSpec spec = SparseAttnSharedkvOutputSpec(a);
      if (SmallNumel(spec.attention_out_sizes) < 0 || SmallNumel(spec.softmax_lse_sizes) < 0)
        return false;
      SparseAttnSharedkv(a, ar.T(spec.attention_out_dtype, spec.attention_out_sizes),
                         spec.softmax_lse_sizes.empty()
                             ? TensorView()
                             : ar.T(DType::kFloat32, spec.softmax_lse_sizes));
      return true;
    });
  }
  o.Check("npu_sparse_attn_sharedkv", iters - meta_iters);
  om.Check("npu_sparse_attn_sharedkv_metadata", meta_iters);
}

}  // namespace
}  // namespace openfia
