// MergeAttentionStates (include/openfia/attention_state.h): attention over a split key set,
// merged through softmax_lse, equals attention over the whole set; the row rules (empty, NaN,
// one rounding); one error per rule.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "common/numeric.h"
#include "openfia/openfia.h"
#include "settings_scope.h"
#include "test_arena.h"

namespace openfia {
namespace {

using testutil::Arena;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kU32 = 0x1p-24;  // unit roundoff of float32

float* F(const TensorView& t) { return static_cast<float*>(t.data); }

void Fill(const TensorView& t, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) F(t)[i] = u(rng);
}

// keys [k0, k1) of a [B, N, S, D] float32 tensor, as a new contiguous tensor.
TensorView Slice(Arena& ar, const TensorView& t, int64_t k0, int64_t k1) {
  const int64_t B = t.sizes[0], N = t.sizes[1], S = t.sizes[2], D = t.sizes[3];
  TensorView o = ar.T(DType::kFloat32, {B, N, k1 - k0, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(F(o) + ((b * N + n) * (k1 - k0)) * D, F(t) + ((b * N + n) * S + k0) * D,
                  sizeof(float) * (k1 - k0) * D);
  return o;
}

struct Result {
  TensorView out, lse;
};

Result Attend(Arena& ar, const TensorView& q, const TensorView& k, const TensorView& v, int64_t N,
              int64_t KVN, double scale, const TensorView* mask = nullptr) {
  FiaArgs a;
  a.query = q, a.key = k, a.value = v;
  a.num_heads = N, a.num_key_value_heads = KVN, a.scale = scale;
  a.input_layout = "BNSD";
  a.softmax_lse_flag = true;
  if (mask != nullptr) a.atten_mask = *mask;
  const FiaOutputSpec spec = FusedInferAttentionScoreOutputSpec(a);
  Result r{ar.T(spec.attention_out_dtype, spec.attention_out_sizes),
           ar.T(DType::kFloat32, spec.softmax_lse_sizes)};
  FusedInferAttentionScore(a, r.out, r.lse);
  return r;
}

using testutil::ImplScope;

// Attention (fp64 reference, float32 in and out) over keys [0, S_kv) against the merge of
// [0, c) and [c, S_kv) (and of three parts, merged left to right in place), for several cuts;
// a mask gives some rows no key in one part (lse +inf there) and one row no key at all.
TEST(AttentionState, SplitKeysMergeToWholeAttention) {
  ImplScope ref(Impl::kReference);
  std::mt19937 rng(7);
  const int64_t B = 2, N = 4, KVN = 2, S = 5, SKV = 37, D = 24;
  const double scale = 0.3;
  Arena ar;
  TensorView q = ar.T(DType::kFloat32, {B, N, S, D});
  TensorView k = ar.T(DType::kFloat32, {B, KVN, SKV, D});
  TensorView v = ar.T(DType::kFloat32, {B, KVN, SKV, D});
  Fill(q, rng, -2.f, 2.f), Fill(k, rng, -2.f, 2.f), Fill(v, rng, -3.f, 3.f);
  // mask (S, SKV): row 1 sees only keys >= 20, row 3 sees nothing.
  TensorView mask = ar.T(DType::kBool, {S, SKV});
  auto* m = static_cast<uint8_t*>(mask.data);
  for (int64_t c = 0; c < SKV; ++c) m[1 * SKV + c] = c < 20, m[3 * SKV + c] = 1;
  for (bool masked : {false, true}) {
    const Result whole = Attend(ar, q, k, v, N, KVN, scale, masked ? &mask : nullptr);
    for (int64_t cut : {1, 13, 20, 36}) {
      auto part_mask = [&](int64_t k0, int64_t k1) {
        TensorView pm = ar.T(DType::kBool, {S, k1 - k0});
        for (int64_t r = 0; r < S; ++r)
          for (int64_t c = k0; c < k1; ++c)
            static_cast<uint8_t*>(pm.data)[r * (k1 - k0) + c - k0] = m[r * SKV + c];
        return pm;
      };
      const TensorView m1 = part_mask(0, cut), m2 = part_mask(cut, SKV);
      const Result p1 = Attend(ar, q, Slice(ar, k, 0, cut), Slice(ar, v, 0, cut), N, KVN, scale,
                               masked ? &m1 : nullptr);
      const Result p2 = Attend(ar, q, Slice(ar, k, cut, SKV), Slice(ar, v, cut, SKV), N, KVN,
                               scale, masked ? &m2 : nullptr);
      const Result merged{ar.T(DType::kFloat32, {B, N, S, D}), ar.T(DType::kFloat32, {B, N, S, 1})};
      MergeAttentionStates({p1.out, p1.lse}, {p2.out, p2.lse}, {merged.out, merged.lse});
      // Each part is the exact result rounded to float32 (out and lse): a part's out moves by <=
      // u |v|max, its weight exp(lse) by a factor 1 +- u |lse|, so the merged out moves by <= (2 +
      // 2 |lse|max) u |v|max; the merge rounds once more (u |out|).
      float vmax = 0.f, lmax = 0.f;
      for (int64_t i = 0; i < v.numel(); ++i) vmax = std::max(vmax, std::fabs(F(v)[i]));
      for (int64_t i = 0; i < whole.lse.numel(); ++i)
        if (std::isfinite(F(whole.lse)[i])) lmax = std::max(lmax, std::fabs(F(whole.lse)[i]));
      const double bound = (3.0 + 2.0 * lmax) * kU32 * vmax;
      for (int64_t i = 0; i < whole.out.numel(); ++i)
        ASSERT_NEAR(F(merged.out)[i], F(whole.out)[i], bound)
            << "masked " << masked << " cut " << cut << " element " << i;
      for (int64_t i = 0; i < whole.lse.numel(); ++i) {
        const float w = F(whole.lse)[i], g = F(merged.lse)[i];
        if (std::isinf(w)) {
          ASSERT_EQ(g, w) << "row " << i;  // no key anywhere: lse +inf, out 0
          for (int64_t d = 0; d < D; ++d) ASSERT_EQ(F(merged.out)[i * D + d], 0.f);
        } else {
          ASSERT_NEAR(g, w, 4 * kU32 * std::fabs(w) + 2 * kU32) << "row " << i;
        }
      }
      // Three parts merged in place into the first: the same result within the bound.
      if (cut < 30) {
        const TensorView m2a = part_mask(cut, 30), m2b = part_mask(30, SKV);
        Result acc = Attend(ar, q, Slice(ar, k, 0, cut), Slice(ar, v, 0, cut), N, KVN, scale,
                            masked ? &m1 : nullptr);
        const Result pa = Attend(ar, q, Slice(ar, k, cut, 30), Slice(ar, v, cut, 30), N, KVN,
                                 scale, masked ? &m2a : nullptr);
        const Result pb = Attend(ar, q, Slice(ar, k, 30, SKV), Slice(ar, v, 30, SKV), N, KVN,
                                 scale, masked ? &m2b : nullptr);
        MergeAttentionStates({acc.out, acc.lse}, {pa.out, pa.lse}, {acc.out, acc.lse});
        MergeAttentionStates({acc.out, acc.lse}, {pb.out, pb.lse}, {acc.out, acc.lse});
        for (int64_t i = 0; i < whole.out.numel(); ++i)
          ASSERT_NEAR(F(acc.out)[i], F(whole.out)[i], 1.5 * bound) << "three parts, " << i;
      }
    }
  }
}

// One row per rule of the header, in float32 unless stated.
TEST(AttentionState, RowRules) {
  Arena ar;
  const int64_t R = 7, D = 3;
  TensorView oa = ar.T(DType::kFloat32, {1, 1, R, D}), la = ar.T(DType::kFloat32, {1, 1, R});
  TensorView ob = ar.T(DType::kFloat32, {1, 1, R, D}), lb = ar.T(DType::kFloat32, {1, 1, R});
  TensorView o = ar.T(DType::kFloat32, {1, 1, R, D}), l = ar.T(DType::kFloat32, {1, 1, R});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float lsa[R] = {kInf, kInf, 0.5f, -kInf, nan, 1.f, 2.f};
  const float lsb[R] = {kInf, 3.f, kInf, kInf, 1.f, -900.f, 2.f};
  for (int64_t r = 0; r < R; ++r) {
    F(la)[r] = lsa[r], F(lb)[r] = lsb[r];
    for (int64_t d = 0; d < D; ++d) F(oa)[r * D + d] = 9.f, F(ob)[r * D + d] = -1.f - d;
  }
  F(oa)[2 * D + 1] = -0.f;  // copied as it is
  F(oa)[5 * D] = nan;       // a NaN value with a finite lse stays NaN
  MergeAttentionStates({oa, la}, {ob, lb}, {o, l});
  auto row = [&](int64_t r, int64_t d) { return F(o)[r * D + d]; };
  EXPECT_EQ(F(l)[0], kInf);  // both empty
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(row(0, d), 0.f);
  EXPECT_EQ(F(l)[1], 3.f);  // a empty: b's row
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(row(1, d), -1.f - d);
  EXPECT_EQ(F(l)[2], 0.5f);  // b empty: a's row
  EXPECT_TRUE(std::signbit(row(2, 1)) && row(2, 1) == 0.f);
  EXPECT_EQ(row(2, 0), 9.f);
  EXPECT_EQ(F(l)[3], kInf);  // -inf (a zero sum) is empty too
  EXPECT_TRUE(std::isnan(F(l)[4]));  // a NaN lse: the row is NaN
  for (int64_t d = 0; d < D; ++d) EXPECT_TRUE(std::isnan(row(4, d)));
  EXPECT_TRUE(std::isnan(row(5, 0)));  // NaN value, weight ~1
  EXPECT_EQ(row(5, 1), 9.f);           // b's weight exp(-901) is 0 in double too
  EXPECT_EQ(F(l)[6], static_cast<float>(2.0 + std::log(2.0)));  // equal weights: the mean
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(row(6, d), static_cast<float>((9.0 - 1.0 - d) / 2));
}

// bfloat16 output: rounded once from double. out = (1 + 2^-8) + ~7.6e-10 lies just above a
// bfloat16 tie; rounding through float first lands on the tie and then on 1.0 (ties to even).
TEST(AttentionState, Bf16OutputIsRoundedOnce) {
  Arena ar;
  TensorView oa = ar.F32({1, 1, 1, 1}, 1.f + 0x1p-8f), la = ar.F32({1, 1, 1, 1}, 0.f);
  TensorView ob = ar.F32({1, 1, 1, 1}, 2.f + 0x1p-8f), lb = ar.F32({1, 1, 1, 1}, -21.f);
  TensorView o = ar.T(DType::kBFloat16, {1, 1, 1, 1}), l = ar.T(DType::kFloat32, {1, 1, 1, 1});
  MergeAttentionStates({oa, la}, {ob, lb}, {o, l});
  EXPECT_EQ(*static_cast<uint16_t*>(o.data), 0x3F81);  // 1 + 2^-7
  // b absent: a converted; float16 from float32 is a single rounding anyway.
  TensorView h = ar.T(DType::kFloat16, {1, 1, 1, 1});
  TensorView tie = ar.F32({1, 1, 1, 1}, 2.f + 0x1p-10f);
  MergeAttentionStates({tie, lb}, {}, {h, l});
  EXPECT_EQ(*static_cast<uint16_t*>(h.data), 0x4000);  // 2 + 2^-10 -> 2 (ties to even)
  EXPECT_EQ(F(l)[0], -21.f);
}

// A lone state (b absent) converts float32 values exactly as the library's scalar conversions
// do (to nearest even; NaN quiet; infinities, subnormals, overflow): 2^20 random bit patterns.
TEST(AttentionState, ConversionMatchesScalarRounding) {
  Arena ar;
  std::mt19937 rng(11);
  const int64_t n = int64_t{1} << 20;
  TensorView a = ar.T(DType::kFloat32, {1, 1, 1, n}), la = ar.F32({1, 1, 1}, 0.f);
  auto* bits = static_cast<uint32_t*>(a.data);
  for (int64_t i = 0; i < n; ++i) bits[i] = static_cast<uint32_t>(rng());
  const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x00000001u, 0x80000000u,
                               0x3F808000u, 0x3F818000u, 0x7FC00001u, 0x477FF000u};
  for (size_t i = 0; i < std::size(specials); ++i) bits[i] = specials[i];
  TensorView bf = ar.T(DType::kBFloat16, {1, 1, 1, n}), h = ar.T(DType::kFloat16, {1, 1, 1, n});
  TensorView l = ar.T(DType::kFloat32, {1, 1, 1});
  MergeAttentionStates({a, la}, {}, {bf, l});
  MergeAttentionStates({a, la}, {}, {h, l});
  for (int64_t i = 0; i < n; ++i) {
    const float f = std::bit_cast<float>(bits[i]);
    ASSERT_EQ(static_cast<uint16_t*>(bf.data)[i], internal::F32ToBF16(f)) << std::hex << bits[i];
    ASSERT_EQ(static_cast<uint16_t*>(h.data)[i], internal::F32ToF16(f)) << std::hex << bits[i];
  }
}

// Strided views (BSND memory seen as [B, N, S, D]) and any thread count give the same bits.
TEST(AttentionState, StridedViewsAndThreadsGiveTheSameBits) {
  Arena ar;
  std::mt19937 rng(3);
  const int64_t B = 2, S = 9, N = 3, D = 16;
  TensorView a = ar.T(DType::kBFloat16, {B, S, N, D}), b = ar.T(DType::kFloat32, {B, S, N, D});
  for (int64_t i = 0; i < a.numel(); ++i)
    static_cast<uint16_t*>(a.data)[i] = static_cast<uint16_t>(0x3C00 + rng() % 0x800);
  Fill(b, rng, -4.f, 4.f);
  TensorView la = ar.T(DType::kFloat32, {B, N, S, 1}), lb = ar.T(DType::kFloat32, {B, N, S, 1});
  Fill(la, rng, -5.f, 5.f), Fill(lb, rng, -5.f, 5.f);
  auto bnsd = [&](const TensorView& t) {
    return TensorView(t.data, t.dtype, {B, N, S, D}, {S * N * D, D, N * D, 1});
  };
  const int threads = GetNumThreads();
  std::vector<uint16_t> first;
  for (int th : {1, 2, 3}) {
    SetNumThreads(th);
    TensorView o = ar.T(DType::kBFloat16, {B, S, N, D}), l = ar.T(DType::kFloat32, {B, N, S, 1});
    MergeAttentionStates({bnsd(a), la}, {bnsd(b), lb}, {bnsd(o), l});
    const auto* p = static_cast<const uint16_t*>(o.data);
    if (first.empty()) {
      first.assign(p, p + o.numel());
      // Spot-check one element against the formula: (b=1, s=4, n=2, d=5).
      const int64_t row = (1 * N + 2) * S + 4, off = ((1 * S + 4) * N + 2) * D + 5;
      const double xa = F(la)[row], xb = F(lb)[row], m = std::max(xa, xb);
      const double wa = std::exp(xa - m), wb = std::exp(xb - m);
      const double va = std::bit_cast<float>(uint32_t{static_cast<uint16_t*>(a.data)[off]} << 16);
      const double want = (wa * va + wb * F(b)[off]) / (wa + wb);
      EXPECT_NEAR(std::bit_cast<float>(uint32_t{p[off]} << 16), want, std::fabs(want) * 0x1p-8);
    } else {
      EXPECT_EQ(std::memcmp(first.data(), p, first.size() * 2), 0) << th << " threads";
    }
  }
  SetNumThreads(threads);
}

void ExpectError(const std::function<void()>& f, const std::string& arg, const std::string& rule) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one for '" << arg << "' (" << rule << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("merge_attention_states"), std::string::npos);
  }
}

TEST(AttentionState, OneErrorPerRule) {
  Arena ar;
  const TensorView o = ar.T(DType::kFloat32, {1, 2, 3, 4}), l = ar.T(DType::kFloat32, {1, 2, 3});
  const TensorView o2 = ar.T(DType::kFloat32, {1, 2, 3, 4}), l2 = ar.T(DType::kFloat32, {1, 2, 3});
  const TensorView od = ar.T(DType::kFloat32, {1, 2, 3, 4}), ld = ar.T(DType::kFloat32, {1, 2, 3});
  auto merge = [&](TensorView a, TensorView la, TensorView b, TensorView lb, TensorView d,
                   TensorView dl) { return [=] { MergeAttentionStates({a, la}, {b, lb}, {d, dl}); }; };
  ExpectError(merge({}, l, o2, l2, od, ld), "out_a", "is required");
  ExpectError(merge(o, {}, o2, l2, od, ld), "lse_a", "is required");
  ExpectError(merge(o, l, o2, {}, od, ld), "lse_b", "given together");
  ExpectError(merge(o, l, {}, l2, od, ld), "out_b", "given together");
  ExpectError(merge(o, l, o2, l2, {}, ld), "out", "is required");
  ExpectError(merge(o, l, o2, l2, od, {}), "lse", "is required");
  ExpectError(merge(ar.T(DType::kFloat32, {2, 3, 4}), l, o2, l2, od, ld), "out_a", "4-D");
  ExpectError(merge(ar.T(DType::kInt8, {1, 2, 3, 4}), l, o2, l2, od, ld), "out_a", "dtype");
  ExpectError(merge(o, l, ar.T(DType::kFloat32, {1, 2, 3, 5}), l2, od, ld), "out_b",
              "out_a's sizes");
  ExpectError(merge(o, l, o2, l2, ar.T(DType::kFloat32, {1, 2, 4, 4}), ld), "out",
              "out_a's sizes");
  ExpectError(merge(o, ar.T(DType::kFloat32, {1, 2, 3, 2}), o2, l2, od, ld), "lse_a",
              "[B, N, S] or [B, N, S, 1]");
  ExpectError(merge(o, l, o2, ar.T(DType::kFloat16, {1, 2, 3}), od, ld), "lse_b", "float32");
  ExpectError(merge(o, l, o2, l2, od, ar.T(DType::kFloat32, {1, 3, 3})), "lse", "out_a's B, N, S");
  TensorView bad = o;
  bad.strides = {24, 12, 4};
  ExpectError(merge(bad, l, o2, l2, od, ld), "out_a", "one entry per dimension");
  bad.strides = {24, 12, -4, 1};
  ExpectError(merge(bad, l, o2, l2, od, ld), "out_a", "non-negative");
  bad = o;
  bad.sizes = {1, 2, -3, 4};
  ExpectError(merge(bad, l, o2, l2, od, ld), "out_a", "non-negative");
  bad = o;
  bad.strides = {24, 12, int64_t{1} << 60, 1};
  ExpectError(merge(bad, l, o2, l2, od, ld), "out_a", "below 2^56");
  bad = o;
  bad.data = nullptr;
  ExpectError(merge(bad, l, o2, l2, od, ld), "out_a", "null pointer");
  TensorView expanded = od;  // an output with a zero stride writes one element twice
  expanded.strides = {24, 12, 0, 1};
  ExpectError(merge(o, l, o2, l2, expanded, ld), "out", "must not overlap itself");
  TensorView lse_expanded = ld;
  lse_expanded.strides = {6, 0, 1};
  ExpectError(merge(o, l, o2, l2, od, lse_expanded), "lse", "must not overlap itself");
  TensorView big = ar.T(DType::kFloat32, {1, 2, 3, 5});
  TensorView in_big(big.data, DType::kFloat32, {1, 2, 3, 4}, {30, 15, 5, 1});
  // out shares memory with out_a without being it (one element further along each row).
  TensorView out_big(static_cast<float*>(big.data) + 1, DType::kFloat32, {1, 2, 3, 4}, {30, 15, 5, 1});
  ExpectError(merge(in_big, l, o2, l2, out_big, ld), "out", "'out_a' itself");
  ExpectError(merge(o, l, o2, l2, od, TensorView(o.data, DType::kFloat32, {1, 2, 3})), "lse",
              "must not overlap 'out_a'");
  ExpectError(merge(o, l, o2, l2, TensorView(l.data, DType::kFloat32, {1, 2, 3, 1}),
                    ld), "out", "out_a's sizes");  // a view of lse_a: wrong sizes first
  ExpectError(merge(o, l, o2, l2, TensorView(l2.data, DType::kFloat32, {1, 2, 3, 4}, {0, 3, 1, 0}),
                    ld), "out", "must not overlap itself");
  // Exact aliases are fine (in-place merge), and empty tensors are a no-op.
  MergeAttentionStates({o, l}, {o2, l2}, {o, l});
  MergeAttentionStates({o, l}, {o2, l2}, {o2, l2});
  const TensorView e = ar.T(DType::kFloat32, {0, 2, 3, 4}), el = ar.T(DType::kFloat32, {0, 2, 3});
  MergeAttentionStates({e, el}, {}, {e, el});
}

}  // namespace
}  // namespace openfia
