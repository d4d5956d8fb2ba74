// FusedInferAttentionScore conformance with the operator as the current CANN API and its tests
// define it: arguments that have no effect are accepted and change nothing (a combination is
// refused only when both of its features take effect), and the features of the current API that
// openfia models. Calls are case-list lines (tests/cases/fia_cases.txt format) built through the
// public API; results are compared bitwise with the same call without the argument, on the fp64
// reference and on the automatic implementation (engine where it takes the call).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <functional>
#include <string>
#include <vector>

#include "case_list.h"
#include "openfia/openfia.h"
#include "test_arena.h"

namespace openfia::cases {
namespace {

struct SettingsGuard {
  Impl impl = GetImpl();
  ~SettingsGuard() { SetImpl(impl); }
};

CaseSpec Spec(const std::string& line) {
  CaseSpec c;
  if (!ParseCaseLine("smoke " + line, &c)) throw std::runtime_error("empty case line");
  return c;
}

using Change = std::function<void(FiaArgs&, testutil::Arena&)>;

struct Outputs {
  std::vector<uint8_t> out;
  std::vector<float> lse;
};

Outputs RunCase(FiaCase& c, Impl impl) {
  SetImpl(impl);
  c.Run();
  return {c.OutBytes(), c.LseValues()};
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The call of `line` with `change` applied gives bitwise the outputs of the call without it, on
// the reference and on the automatic implementation.
void ExpectNoEffect(const std::string& line, const Change& change) {
  SCOPED_TRACE(line);
  SettingsGuard guard;
  FiaCase c(Spec(line));
  const Outputs ref = RunCase(c, Impl::kReference);
  const Outputs fast = RunCase(c, Impl::kAuto);
  testutil::Arena ar;
  change(c.mutable_args(), ar);
  ASSERT_EQ(FusedInferAttentionScoreOutputSpec(c.args()).attention_out_sizes,
            c.output_spec().attention_out_sizes);
  const Outputs ref2 = RunCase(c, Impl::kReference);
  EXPECT_TRUE(ref2.out == ref.out) << "reference output changed";
  EXPECT_TRUE(SameBits(ref2.lse, ref.lse)) << "reference lse changed";
  const Outputs fast2 = RunCase(c, Impl::kAuto);
  EXPECT_TRUE(fast2.out == fast.out) << "output changed";
  EXPECT_TRUE(SameBits(fast2.lse, fast.lse)) << "lse changed";
}

// The same call with `change` is refused with `argument` and kUnsupported.
void ExpectUnsupported(const std::string& line, const Change& change,
                       const std::string& argument) {
  SCOPED_TRACE(line);
  FiaCase c(Spec(line));
  testutil::Arena ar;
  change(c.mutable_args(), ar);
  try {
    FusedInferAttentionScoreOutputSpec(c.args());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

Change QueryPadding(int64_t pad) {
  return [pad](FiaArgs& a, testutil::Arena& ar) { a.query_padding_size = ar.I64(pad); };
}
Change KvPadding(int64_t pad) {
  return [pad](FiaArgs& a, testutil::Arena& ar) { a.kv_padding_size = ar.I64(pad); };
}

// ---- left padding with page attention ----
constexpr const char* kPagedDecode =
    "paged_decode layout=BSH B=3 N=7 KVN=1 S=1 KVS=120 D=64 page=32 act_kv=7,1,120";
constexpr const char* kPagedPrefill =
    "paged_prefill layout=BNSD B=2 N=2 S=4 KVS=70 D=16 page=32 cache=4d act_kv=70,33 sparse=3";

TEST(FiaNoEffect, QueryPaddingWithPagedCacheAtQs1) {
  // Q_S = 1: query_padding_size is ignored by the operator (仅支持Q_S大于1，其余场景该参数无效),
  // with or without actual_seq_lengths.
  ExpectNoEffect(kPagedDecode, QueryPadding(4));
  ExpectNoEffect(std::string(kPagedDecode) + " act_q=1", QueryPadding(0));
}

TEST(FiaNoEffect, QueryPaddingWithPagedCacheWithoutActualSeqLengths) {
  // Without actual_seq_lengths the padding size means right padding: no left padding occurs.
  ExpectNoEffect(kPagedPrefill, QueryPadding(1));
}

TEST(FiaNoEffect, QueryPaddingWithPagedCacheInEffectIsUnsupported) {
  ExpectUnsupported(std::string(kPagedPrefill) + " act_q=3,2", QueryPadding(1),
                    "query_padding_size");
}

// ---- left padding with a shared prefix ----
constexpr const char* kPrefixPrefill =
    "prefix_prefill layout=BNSD B=2 N=2 S=3 KVS=5 D=16 prefix=4 pact=3";
constexpr const char* kPrefixDecode = "prefix_decode layout=BSH B=2 N=2 S=1 KVS=5 D=16 prefix=4";

TEST(FiaNoEffect, KvPaddingWithPrefixWithoutActualSeqLengthsKv) {
  ExpectNoEffect(kPrefixPrefill, KvPadding(2));
  ExpectNoEffect(kPrefixDecode, KvPadding(0));
}

TEST(FiaNoEffect, QueryPaddingWithPrefix) {
  ExpectNoEffect(kPrefixPrefill, QueryPadding(1));           // no actual_seq_lengths
  ExpectNoEffect(std::string(kPrefixDecode) + " act_q=1", QueryPadding(1));  // Q_S = 1
}

TEST(FiaNoEffect, LeftPaddingWithPrefixInEffectIsUnsupported) {
  ExpectUnsupported(std::string(kPrefixPrefill) + " act_kv=4,3", KvPadding(1),
                    "key_shared_prefix");
  ExpectUnsupported(std::string(kPrefixPrefill) + " act_q=2,3", QueryPadding(0),
                    "key_shared_prefix");
}

// ---- left padding with the other features the source forbids it with ----
TEST(FiaNoEffect, KvPaddingWithInt4WithoutActualSeqLengthsKv) {
  const char* int4 = "int4 layout=BSH dtype=f16 B=2 N=2 S=1 KVS=9 D=64 kv=int4 kmode=0";
  ExpectNoEffect(int4, KvPadding(2));
  ExpectUnsupported(std::string(int4) + " act_kv=7,5", KvPadding(2), "kv_padding_size");
}

TEST(FiaNoEffect, LeftPaddingWithPerChannelPostQuantWithoutActualLengths) {
  const char* pc = "outq_pc layout=BSH B=2 N=2 S=4 KVS=9 D=16 outq=pc";
  ExpectNoEffect(pc, QueryPadding(1));
  ExpectNoEffect(pc, KvPadding(1));
  ExpectUnsupported(std::string(pc) + " act_q=3,2", QueryPadding(1), "quant_scale2");
  ExpectUnsupported(std::string(pc) + " act_kv=8,4", KvPadding(1), "quant_scale2");
}

TEST(FiaNoEffect, LeftPaddingWithKvSeparatedAntiquantPrefillWithoutActualLengths) {
  const char* sep = "kvsep layout=BSND B=2 N=2 S=4 KVS=9 D=32 kv=int8 kmode=1";
  ExpectNoEffect(sep, QueryPadding(1));
  ExpectNoEffect(sep, KvPadding(1));
  ExpectUnsupported(std::string(sep) + " act_kv=8,5", KvPadding(1), "key_antiquant_scale");
  ExpectUnsupported(std::string(sep) + " act_q=3,2", QueryPadding(1), "key_antiquant_scale");
}

// ---- the legacy antiquant parameters beside the KV-separated ones ----
TEST(FiaNoEffect, LegacyAntiquantOffsetWithKvSeparatedScales) {
  // The KV-separated parameters win; a legacy offset without its scale changes nothing.
  ExpectNoEffect("kvsep_decode layout=BSH dtype=f16 B=2 N=2 S=1 KVS=9 D=32 kv=int8 kmode=0",
                 [](FiaArgs& a, testutil::Arena& ar) {
                   a.antiquant_offset = ar.T(DType::kFloat16, {2, 64});
                 });
}

// ---- pre_tokens / next_tokens / sparse_mode where the operator ignores them ----
TEST(FiaNoEffect, BandArgumentsWithInt8OutputWhereIgnored) {
  const Change band4 = [](FiaArgs& a, testutil::Arena&) {
    a.sparse_mode = 4;
    a.pre_tokens = -1;
  };
  // Q_S = 1: sparse_mode and pre/next are ignored, so no band with a negative side forms.
  ExpectNoEffect("int8_out_decode layout=BSH B=2 N=2 S=1 KVS=9 D=16 outq=pt", band4);
  // Q_S > 1, sparse_mode 0 without a mask: pre/next are ignored, so quant_offset2 meets no row
  // without keys.
  const Change next_neg = [](FiaArgs& a, testutil::Arena&) { a.next_tokens = -3; };
  ExpectNoEffect("int8_out_prefill layout=BNSD B=2 N=2 S=4 KVS=9 D=16 outq=pt", next_neg);
  ExpectNoEffect("int8_out_mode1 layout=BNSD B=2 N=2 S=4 KVS=9 D=16 outq=pt sparse=1 mask=full",
                 next_neg);
  // In effect: a band with a negative side, and rows the band leaves empty with quant_offset2.
  ExpectUnsupported("int8_out_band layout=BNSD B=2 N=2 S=4 KVS=9 D=16 outq=pt sparse=4 pre=3 "
                    "next=0",
                    [](FiaArgs& a, testutil::Arena&) { a.pre_tokens = -1; }, "sparse_mode");
}

TEST(FiaNoEffect, SparseModeWithMlaDecode) {
  // MLA at Q_S = 1: sparse_mode is ignored (the rule asks for no mask, not for a mode).
  ExpectNoEffect("mla_decode layout=BSND B=2 N=4 KVN=1 S=1 KVS=9 D=32 rope=1",
                 [](FiaArgs& a, testutil::Arena&) { a.sparse_mode = 3; });
}

// ---- the "X does not support Y" rules where both take effect ----
// A case line that is refused as it is, with kUnsupported naming `argument`.
void ExpectLineUnsupported(const std::string& line, const std::string& argument) {
  SCOPED_TRACE(line);
  try {
    FiaCase c(Spec(line));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
}

TEST(FiaInEffect, CombinationsTheSourceForbids) {
  const auto prefix = [](DType dt, std::vector<int64_t> sizes) {
    return [dt, sizes](FiaArgs& a, testutil::Arena& ar) {
      a.key_shared_prefix = ar.T(dt, sizes);
      a.value_shared_prefix = ar.T(dt, sizes);
    };
  };
  // A shared prefix with a tensor list, TND or MLA.
  ExpectUnsupported("list layout=BSH B=2 N=2 S=1 KVS=9 D=16 list=1 act_kv=9,5",
                    prefix(DType::kBFloat16, {1, 4, 32}), "key_shared_prefix");
  ExpectUnsupported("tnd layout=TND B=2 N=2 S=4 KVS=9 D=16 act_q=4,2 act_kv=9,5",
                    prefix(DType::kBFloat16, {4, 2, 16}), "key_shared_prefix");
  ExpectUnsupported("mla_decode layout=BSND B=2 N=4 KVN=1 S=1 KVS=9 D=32 rope=1",
                    prefix(DType::kBFloat16, {1, 4, 1, 32}), "key_shared_prefix");
  // TND with query left padding (its actual lengths are always given).
  ExpectUnsupported("tnd layout=TND B=2 N=2 S=4 KVS=9 D=16 act_q=4,2 act_kv=9,5", QueryPadding(0),
                    "query_padding_size");
  // int4 key / value with post-quantization.
  ExpectUnsupported("int4 layout=BSH dtype=f16 B=2 N=2 S=1 KVS=9 D=64 kv=int4 kmode=0",
                    [](FiaArgs& a, testutil::Arena& ar) { a.quant_scale2 = ar.F32({1}, 1.f); },
                    "quant_scale2");
  // KV-separated antiquant at Q_S > 1 with a tensor list or page attention.
  ExpectLineUnsupported("kvsep_list layout=BSND B=2 N=2 S=4 KVS=9 D=32 kv=int8 kmode=1 list=1 "
                        "act_kv=9,5",
                        "key_antiquant_scale");
  ExpectLineUnsupported("kvsep_paged layout=BSND B=2 N=2 S=4 KVS=40 D=32 kv=int8 kmode=1 page=16 "
                        "act_kv=40,9",
                        "key_antiquant_scale");
  // MLA with a tensor list.
  ExpectLineUnsupported("mla_list layout=BSND B=2 N=4 KVN=1 S=1 KVS=9 D=32 rope=1 list=1 act_kv=9,5",
                        "key_rope");
}

// ---- actual_shared_prefix_len without a shared prefix ----
TEST(FiaNoEffect, PrefixLengthWithoutPrefix) {
  // Older generations of the operator's tests pass it that way; the operator ignores it.
  const Change len2 = [](FiaArgs& a, testutil::Arena& ar) {
    a.actual_shared_prefix_len = ar.I64(2);
  };
  ExpectNoEffect("decode layout=BSH B=2 N=4 KVN=2 S=1 KVS=13 D=32 act_kv=13,5", len2);
  ExpectNoEffect("prefill layout=BNSD B=2 N=2 S=5 KVS=7 D=16 sparse=3", len2);
}

// ---- the 2048 x 2048 mask of sparse modes 2-4: shape and dtype only ----
TEST(FiaNoEffect, CausalMaskContentIsNotRead) {
  // The band follows from sparse_mode, pre_tokens and next_tokens: a mask of zeros (what some
  // callers pass for a band that covers every pair) gives the documented band.
  const Change zeros = [](FiaArgs& a, testutil::Arena& ar) {
    a.atten_mask = ar.T(a.atten_mask.dtype, a.atten_mask.sizes);
  };
  ExpectNoEffect("mode2 layout=BSH B=2 N=2 S=7 KVS=9 D=16 sparse=2", zeros);
  ExpectNoEffect("mode3 layout=BNSD B=2 N=2 S=7 KVS=9 D=16 sparse=3 act_q=7,4 act_kv=9,3",
                 zeros);
  ExpectNoEffect("mode4 layout=TND B=2 N=2 S=6 KVS=9 D=16 act_q=6,4 act_kv=9,5 sparse=4 pre=3 "
                 "next=-1 mdtype=uint8 lse=1",
                 zeros);
}

// ---- learnable sinks ----
TEST(FiaSinks, MinusInfinityIsNoSink) {
  // exp(-inf - max) = 0: a sink of -inf adds nothing to any denominator.
  const Change minus_inf = [](FiaArgs& a, testutil::Arena& ar) {
    a.sinks = ar.T(DType::kFloat32, {a.num_heads});
    for (int64_t h = 0; h < a.num_heads; ++h)
      static_cast<float*>(a.sinks.data)[h] = -std::numeric_limits<float>::infinity();
  };
  ExpectNoEffect("prefill layout=BNSD B=2 N=4 KVN=2 S=5 KVS=9 D=16 mask=full lse=1", minus_inf);
  ExpectNoEffect("decode layout=BSH B=2 N=4 KVN=1 S=1 KVS=40 D=32 page=16 act_kv=40,9 lse=1",
                 minus_inf);
}

TEST(FiaSinks, ShrinkEveryRowByItsSinkWeight) {
  // out_sink = out * l / (l + exp(sink - m)) and lse_sink = log(exp(lse) + exp(sink)): checked
  // on the reference against the same call without sinks, in double.
  SettingsGuard guard;
  SetImpl(Impl::kReference);
  const char* line = "sinks layout=BNSD dtype=f32 B=2 N=3 S=4 KVS=6 D=16 lse=1";
  FiaCase plain(Spec(line));
  plain.Run();
  FiaCase with(Spec(line));
  testutil::Arena ar;
  with.mutable_args().sinks = ar.T(DType::kFloat32, {3});
  const float sinks[3] = {-1.5f, 0.25f, 2.0f};
  std::memcpy(with.mutable_args().sinks.data, sinks, sizeof sinks);
  with.Run();
  const std::vector<float> l0 = plain.LseValues(), l1 = with.LseValues();
  const auto* o0 = static_cast<const float*>(plain.out().data);
  const auto* o1 = static_cast<const float*>(with.out().data);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t row = 0; row < 4; ++row) {
        const double lse0 = l0[plain.LseIndex(b, h, row)];
        const double want_lse = std::log(std::exp(lse0) + std::exp(double{sinks[h]}));
        EXPECT_NEAR(l1[with.LseIndex(b, h, row)], want_lse, 1e-5 * (1 + std::fabs(want_lse)));
        const double keep = std::exp(lse0 - want_lse);  // l / (l + exp(sink - m))
        for (int64_t d = 0; d < 16; ++d) {
          const int64_t i = plain.OutIndex(b, h, row, d);
          EXPECT_NEAR(o1[i], o0[i] * keep, 1e-5 * (std::fabs(o0[i]) + 1e-3));
        }
      }
}

// ---- inner_precise with float16 antiquant ----
TEST(FiaInnerPrecise, HighPrecisionKeepsDequantizedKvInFp32) {
  // Large scores: fp16-rounded K moves them by ~2^-11 relative, which the softmax amplifies.
  SettingsGuard guard;
  SetImpl(Impl::kReference);
  const std::string line =
      "aq layout=BSH dtype=f16 B=2 N=2 S=1 KVS=9 D=32 kv=int8 kmode=0 scale=4";
  FiaCase high(Spec(line));
  high.Run();
  FiaCase perf(Spec(line + " ip=1"));
  perf.Run();
  EXPECT_NE(high.OutBytes(), perf.OutBytes()) << "inner_precise 0 and 1 agree";
  // bfloat16 does not distinguish the two modes.
  const std::string bf = "aq layout=BSH dtype=bf16 B=2 N=2 S=1 KVS=9 D=32 kv=int8 kmode=0";
  FiaCase bf0(Spec(bf));
  bf0.Run();
  FiaCase bf1(Spec(bf + " ip=1"));
  bf1.Run();
  EXPECT_EQ(bf0.OutBytes(), bf1.OutBytes());
}

}  // namespace
}  // namespace openfia::cases
