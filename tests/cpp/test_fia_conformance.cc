// FusedInferAttentionScore conformance with the operator as the current CANN API and its tests
// define it: arguments that have no effect are accepted and change nothing (a combination is
// refused only when both of its features take effect), and the features of the current API that
// openfia models. Calls are case-list lines (tests/cases/fia_cases.txt format) built through the
// public API; results are compared bitwise with the same call without the argument, on the fp64
// reference and on the automatic implementation (engine where it takes the call).
#include <gtest/gtest.h>

#include <cstring>
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
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
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

}  // namespace
}  // namespace openfia::cases
