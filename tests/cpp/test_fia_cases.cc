// Every case of the shared list (tests/cases/fia_cases.txt) through the public C++ API.
//
// The tier is OPENFIA_TIER (smoke by default; full = smoke + full). For each case:
//  (a) the reference's output obeys invariants stated in the case's own terms (independent of
//      openfia's canonicalization): rows outside the valid query windows are exactly 0 with lse
//      +inf, every valid output is finite (the inputs poison every cell no valid row may read with
//      NaN), outputs are convex combinations of V rows, and when every key is visible (no mask,
//      no band) and K/V are float, output and lse equal a softmax computed here in double;
//  (b) the engine (where it supports the call) matches the reference within tolerances derived
//      from dtype unit roundoffs and the reduction lengths; NaN/Inf positions match exactly, and
//      where the engine declines, the automatic fallback is bitwise the reference;
//  (c) the automatic implementation gives bitwise identical outputs with 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "case_list.h"
#include "native_half.h"
#include "openfia/openfia.h"

namespace openfia::cases {

// gtest prints the parameter of a failing case as its line.
void PrintTo(const CaseSpec& c, std::ostream* os) { *os << c.ToLine(); }

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU32 = 0x1p-24;

std::string Tier() {
  const char* t = std::getenv("OPENFIA_TIER");
  return t && *t ? t : "smoke";
}

std::string& LoadError() {
  static std::string e;
  return e;
}

std::vector<CaseSpec> Cases() {
  try {
    const std::string tier = Tier();
    return TierCases(tier == "model" ? OPENFIA_MODEL_CASE_LIST : OPENFIA_CASE_LIST, tier);
  } catch (const std::exception& e) {
    LoadError() = e.what();  // reported by FiaCaseList.Loads rather than crashing static init
    return {};
  }
}

double UnitRoundoff(DType dt) {
  switch (dt) {
    case DType::kFloat16: return 0x1p-11;
    case DType::kBFloat16: return 0x1p-8;
    default: return kU32;
  }
}

double Load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kFloat32: return static_cast<const float*>(t.data)[i];
    case DType::kFloat16: return static_cast<float>(static_cast<const NativeHalf*>(t.data)[i]);
    case DType::kBFloat16: {
      const uint16_t h = static_cast<const uint16_t*>(t.data)[i];
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
    case DType::kInt8: return static_cast<const int8_t*>(t.data)[i];
    default: ADD_FAILURE() << "unexpected output dtype"; return 0;
  }
}

// Bitwise equality (NaN payloads included); memcmp must not see the null data of an empty vector.
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool IsFloat(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kFloat16 || dt == DType::kBFloat16;
}

// Restores the process-wide settings a test changes.
struct SettingsGuard {
  Impl impl = GetImpl();
  int threads = GetNumThreads();
  std::string kernel = GetKernel();
  ~SettingsGuard() {
    SetImpl(impl);
    SetNumThreads(threads);
    SetKernel(kernel);
  }
};

bool RowValid(const CaseGeometry& g, int64_t b, int64_t row) {
  if (g.packed) return true;  // TND / NTD output holds only the valid rows
  return row >= g.q_begin[b] && row < g.q_begin[b] + g.q_len[b];
}

class FiaCases : public ::testing::TestWithParam<CaseSpec> {};

TEST(FiaCaseList, Loads) {
  ASSERT_EQ(LoadError(), "");
  const std::vector<CaseSpec> cases = Cases();
  EXPECT_FALSE(cases.empty()) << "tier " << Tier();
  if (Tier() == "full") {  // full runs smoke + full
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](auto& c) { return c.tier == "smoke"; }));
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](auto& c) { return c.tier == "full"; }));
  }
}

TEST(FiaCaseList, Parser) {
  CaseSpec c;
  EXPECT_FALSE(ParseCaseLine("   # only a comment", &c));
  EXPECT_FALSE(ParseCaseLine("", &c));
  ASSERT_TRUE(ParseCaseLine("smoke x layout=BSH B=2 scale=0.5  # trailing", &c));
  EXPECT_EQ(c.tier, "smoke");
  EXPECT_EQ(c.name, "x");
  EXPECT_EQ(c.Str("layout", ""), "BSH");
  EXPECT_EQ(c.Int("B", 1), 2);
  EXPECT_EQ(c.Int("N", 7), 7);
  EXPECT_DOUBLE_EQ(c.Double("scale", 1), 0.5);
  EXPECT_TRUE(c.Has("B"));
  EXPECT_FALSE(c.Has("N"));
  CaseSpec back;
  ASSERT_TRUE(ParseCaseLine(c.ToLine(), &back));
  EXPECT_EQ(back.keys, c.keys);
  EXPECT_THROW(ParseCaseLine("smoke", &c), std::runtime_error);
  EXPECT_THROW(ParseCaseLine("smoke y B2", &c), std::runtime_error);
  EXPECT_THROW(ParseCaseLine("smoke y =2", &c), std::runtime_error);
  EXPECT_THROW(ParseCaseLine("smoke y B=1 B=2", &c), std::runtime_error);
  ASSERT_TRUE(ParseCaseLine("smoke y B=x", &c));
  EXPECT_THROW(c.Int("B", 1), std::runtime_error);
  EXPECT_THROW(ReadCases("/nonexistent/fia_cases.txt", "smoke"), std::runtime_error);
  EXPECT_THROW(TierCases(OPENFIA_CASE_LIST, "nightly"), std::runtime_error);
  // An unknown key is a typo, not a default.
  ASSERT_TRUE(ParseCaseLine("smoke z layuot=BSH", &c));
  EXPECT_THROW(FiaCase{c}, std::runtime_error);
}

TEST(FiaCaseList, DeterministicInputs) {
  CaseSpec c;
  ASSERT_TRUE(ParseCaseLine("smoke det layout=BSH B=2 N=2 S=3 KVS=5 D=16", &c));
  FiaCase a(c), b(c);
  const int64_t bytes = a.args().key.numel() * ElementSize(a.args().key.dtype);
  ASSERT_EQ(std::memcmp(a.args().key.data, b.args().key.data, bytes), 0);
  c.keys["seed"] = "1";
  FiaCase d(c);
  EXPECT_NE(std::memcmp(a.args().key.data, d.args().key.data, bytes), 0);
}

// (a) invariants of the reference's output.
void ReferenceInvariants(const CaseSpec& spec) {
  SettingsGuard guard;
  SetImpl(Impl::kReference);
  FiaCase c(spec);
  c.Run();
  const CaseGeometry& g = c.geometry();
  const TensorView& out = c.out();
  const TensorView& lse = c.lse();

  // The output shapes follow from the case alone.
  std::vector<int64_t> want_out;
  const int64_t T = std::accumulate(g.q_len.begin(), g.q_len.end(), int64_t{0});
  const std::string& ol = g.out_layout;
  if (ol == "TND") want_out = {T, g.N, g.DV};
  else if (ol == "NTD") want_out = {g.N, T, g.DV};
  else if (ol == "BNSD") want_out = {g.B, g.N, g.S, g.DV};
  else if (ol == "NBSD") want_out = {g.N, g.B, g.S, g.DV};
  else if (ol == "BSH") want_out = {g.B, g.S, g.N * g.DV};
  else want_out = {g.B, g.S, g.N, g.DV};
  ASSERT_EQ(out.sizes, want_out);
  EXPECT_EQ(out.dtype, g.int8_out ? DType::kInt8
                                  : (g.fullquant ? DType::kFloat16 : c.args().query.dtype))
      << "output dtype";
  if (lse.defined()) {
    const std::vector<int64_t> want_lse = g.packed
                                              ? std::vector<int64_t>{T, g.N, 1}
                                              : std::vector<int64_t>{g.B, g.N, g.S, 1};
    ASSERT_EQ(lse.sizes, want_lse);
  }

  const double eps_q = UnitRoundoff(c.args().query.dtype);
  const double eps_o = UnitRoundoff(out.dtype);
  // Convex combination of V rows (weights summing to less than 1 with a sink); p is rounded to
  // the query dtype before p.V while l is not, so the weights may sum to 1 + eps_q; the output
  // rounding adds eps_o.
  const double v_bound = g.v_absmax * (1 + 2 * eps_q) * (1 + 2 * eps_o) + 1e-30;
  const bool check_bound = IsFloat(out.dtype) && !g.fullquant;
  int bad = 0;
  auto report = [&](const std::string& what) {
    if (bad++ < 8) ADD_FAILURE() << what;
  };
  for (int64_t b = 0; b < g.B; ++b) {
    const int64_t kv_total = g.prefix_len + g.kv_len[b];
    for (int64_t h = 0; h < g.N; ++h) {
      for (int64_t row = 0; row < c.OutRows(b); ++row) {
        const std::string at = "(b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                               ", row=" + std::to_string(row) + ")";
        const bool valid = RowValid(g, b, row);
        const double l = lse.defined() ? c.LseValues()[c.LseIndex(b, h, row)] : 0.0;
        bool row_zero = true;
        for (int64_t d = 0; d < g.DV; ++d) {
          const double x = Load(out, c.OutIndex(b, h, row, d));
          const bool zero_bits = x == 0 && !std::signbit(x);
          row_zero = row_zero && x == 0;
          if (!valid && !zero_bits) report("row outside the valid window not +0: out" + at + " = " +
                                           std::to_string(x));
          if (!std::isfinite(x)) report("non-finite out" + at + "[" + std::to_string(d) + "]");
          if (check_bound && std::fabs(x) > v_bound)
            report("out" + at + "[" + std::to_string(d) + "] = " + std::to_string(x) +
                   " exceeds max |V| " + std::to_string(v_bound));
        }
        if (valid && kv_total == 0 && IsFloat(out.dtype) && !row_zero)
          report("row without keys not 0: out" + at);
        if (valid && kv_total > 0 && g.scores_known) {
          // Every key is visible: softmax in double from the stored values, a sink joining the
          // denominator. The reference rounds p to the query dtype (relative eps_q) while l is
          // not, then rounds the output.
          std::vector<double> s(kv_total);
          const bool sink = !g.sinks.empty();
          double m = sink ? g.sinks[h] : -kInf, sum = 0;
          for (int64_t j = 0; j < kv_total; ++j) m = std::max(m, s[j] = c.Score(b, h, row, j));
          for (int64_t j = 0; j < kv_total; ++j) sum += s[j] = std::exp(s[j] - m);
          if (sink) sum += std::exp(g.sinks[h] - m);
          const double want_lse = m + std::log(sum);
          if (lse.defined() && !(std::fabs(l - want_lse) <= 4 * kU32 * (std::fabs(want_lse) + 1)))
            report("lse" + at + " = " + std::to_string(l) + ", want " + std::to_string(want_lse));
          if (IsFloat(out.dtype)) {
            for (int64_t d = 0; d < g.DV; ++d) {
              double o = 0;
              for (int64_t j = 0; j < kv_total; ++j) o += s[j] * c.Value(b, h, j, d);
              o /= sum;
              const double x = Load(out, c.OutIndex(b, h, row, d));
              if (!(std::fabs(x - o) <= 2 * eps_q * g.v_absmax + 2 * eps_o * std::fabs(o) + 1e-12))
                report("out" + at + "[" + std::to_string(d) + "] = " + std::to_string(x) +
                       ", softmax(QK)V = " + std::to_string(o));
            }
          }
        }
        if (!lse.defined()) continue;
        if (!valid || kv_total == 0) {
          if (l != kInf) report("lse" + at + " = " + std::to_string(l) + ", want +inf");
          continue;
        }
        if (std::isnan(l) || l == -kInf) report("lse" + at + " = " + std::to_string(l));
        // No visible key (lse +inf) means the documented empty row: output 0.
        if (l == kInf && IsFloat(out.dtype) && !row_zero)
          report("lse +inf but out row nonzero" + at);
      }
    }
  }
  EXPECT_EQ(bad, 0) << spec.ToLine();
}

// (b) engine against the reference. With `kernel`, that kernel is forced
// (SetKernel) and a case it does not take is skipped (*ran = false).
void EngineMatchesReference(const CaseSpec& spec, const std::string& kernel = "",
                            bool* ran = nullptr) {
  SettingsGuard guard;
  SetImpl(Impl::kReference);
  FiaCase ref(spec);
  ref.Run();
  FiaCase eng(spec);
  SetImpl(Impl::kEngine);
  SetKernel(kernel);
  if (ran) *ran = true;
  try {
    eng.Run();
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    if (!kernel.empty()) {  // the forced kernel does not take this case: nothing to check
      if (ran) *ran = false;
      return;
    }
    // Every feature of the case list runs on the engine.
    ADD_FAILURE() << "the engine does not take this case: " << e.what();
    return;
  }
  const std::vector<uint8_t> rb = ref.OutBytes(), eb = eng.OutBytes();
  const std::vector<float> rl = ref.LseValues(), el = eng.LseValues();
  const CaseGeometry& g = ref.geometry();
  const TensorView& ro = ref.out();
  const TensorView& eo = eng.out();
  int64_t kvmax = 0;
  for (int64_t b = 0; b < g.B; ++b) kvmax = std::max(kvmax, g.prefix_len + g.kv_len[b]);
  const double dqk = static_cast<double>(g.D + g.rope_d);
  // Error of an fp32 dot product of length dqk with |q| <= qmax, |k| <= kmax (worst case), plus
  // the fp32 pse addition.
  // Full quantization: integer dot products are exact, then one fp32 dequantization rounding.
  const double ds = (g.fullquant ? 2 * kU32 : dqk * kU32) * dqk * g.q_absmax * g.k_absmax * g.scale +
                    2 * kU32 * g.pse_absmax;
  // p is rounded to the query dtype at a running max that differs from the reference's global one
  // (both round, so 2 eps_q); fp32 accumulation over kvmax keys.
  const double eps_q = UnitRoundoff(ref.args().query.dtype);
  const double atol = g.v_absmax * (2 * eps_q + 2.5 * ds + 2 * (kvmax + 16) * kU32);
  const double lse_tol = ds + 2 * (kvmax + 16) * kU32;
  const double eps_o = UnitRoundoff(ro.dtype);
  double qs_max = 0;
  if (ref.args().quant_scale2.defined())
    for (int64_t i = 0; i < ref.args().quant_scale2.numel(); ++i)
      qs_max = std::max(qs_max, Load(ref.args().quant_scale2, i));
  int bad = 0;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.N; ++h)
      for (int64_t row = 0; row < ref.OutRows(b); ++row) {
        const bool valid = RowValid(g, b, row);
        for (int64_t d = 0; d < g.DV; ++d) {
          const int64_t i = ref.OutIndex(b, h, row, d);
          const double want = Load(ro, i), got = Load(eo, i);
          bool ok;
          if (!valid) ok = got == want && std::signbit(got) == std::signbit(want);
          else if (std::isnan(want) || std::isnan(got)) ok = std::isnan(want) && std::isnan(got);
          else if (std::isinf(want) || std::isinf(got)) ok = want == got;
          else if (ro.dtype == DType::kInt8)
            ok = std::fabs(got - want) <= 1 + std::ceil(qs_max * atol);
          else ok = std::fabs(got - want) <= atol + 2 * eps_o * std::fabs(want);
          if (!ok && bad++ < 8)
            ADD_FAILURE() << "out(b=" << b << ", h=" << h << ", row=" << row << ", d=" << d
                          << ") = " << got << ", reference " << want << " (atol " << atol << ")";
        }
        if (rl.empty()) continue;
        const int64_t li = ref.LseIndex(b, h, row);
        const double want = rl[li], got = el[li];
        const bool ok = std::isnan(want) || std::isinf(want) || std::isnan(got) || std::isinf(got)
                            ? (std::isnan(want) ? std::isnan(got) : got == want)
                            : std::fabs(got - want) <= lse_tol + 2 * kU32 * std::fabs(want);
        if (!ok && bad++ < 8)
          ADD_FAILURE() << "lse(b=" << b << ", h=" << h << ", row=" << row << ") = " << got
                        << ", reference " << want << " (tol " << lse_tol << ")";
      }
  EXPECT_EQ(bad, 0) << spec.ToLine();
}

// (c) the thread count never changes a bit of the result (of the kernel list, or of `kernel`
// forced on a case it takes).
void ThreadCountInvariant(const CaseSpec& spec, const std::string& kernel = "") {
  SettingsGuard guard;
  SetImpl(Impl::kAuto);
  SetKernel(kernel);
  FiaCase c(spec);
  std::vector<uint8_t> out1;
  std::vector<float> lse1;
  for (int threads : {1, 2, 3}) {
    SetNumThreads(threads);
    c.Run();
    if (threads == 1) {
      out1 = c.OutBytes();
      lse1 = c.LseValues();
      continue;
    }
    EXPECT_TRUE(c.OutBytes() == out1) << threads << " threads: output differs from 1 thread";
    EXPECT_TRUE(SameBits(c.LseValues(), lse1))
        << threads << " threads: lse differs from 1 thread";
  }
}

TEST_P(FiaCases, ReferenceInvariants) { ReferenceInvariants(GetParam()); }
TEST_P(FiaCases, EngineMatchesReference) { EngineMatchesReference(GetParam()); }
TEST_P(FiaCases, ThreadCountInvariant) { ThreadCountInvariant(GetParam()); }
// (b) and (c) for every kernel this CPU runs, forced one at a time on the cases it takes: each
// kernel is held to the reference on its own, not only where the kernel list picks it.
TEST_P(FiaCases, EveryKernelMatchesReference) {
  int ran = 0;
  std::string names;
  for (const std::string& k : AvailableKernels()) {
    bool took = false;
    EngineMatchesReference(GetParam(), k, &took);
    if (!took) continue;
    ++ran;
    names += (names.empty() ? "" : " ") + k;
    ThreadCountInvariant(GetParam(), k);
  }
  RecordProperty("kernels", names);
  // The portable kernel runs every case the engine runs.
  EXPECT_GT(ran, 0) << GetParam().ToLine();
}

std::string CaseName(const ::testing::TestParamInfo<CaseSpec>& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// ---- random combinations -------------------------------------------------------------------
// The list names each feature's cases; combinations nobody wrote down get the same checks here:
// case lines drawn at random from every key of the list's format (tests/cases/README.md), kept
// when the call is valid (FiaCase builds it and computes its output spec; invalid combinations
// are what test_fia_robust.cc checks). OPENFIA_RANDOM_CASES (default 48) sets how many,
// OPENFIA_RANDOM_SEED (default 1) which: a failing case prints its line, which reproduces it in
// fia_cases.txt.

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : def;
}

CaseSpec RandomCaseSpec(std::mt19937_64& rng, int64_t index) {
  auto pick = [&](int64_t lo, int64_t hi) {  // uniform in [lo, hi]
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto chance = [&](double p) { return static_cast<double>(rng() % 1000000) < p * 1e6; };
  auto one_of = [&](std::initializer_list<const char*> xs) {
    return std::string(xs.begin()[pick(0, static_cast<int64_t>(xs.size()) - 1)]);
  };
  auto list = [&](int64_t n, int64_t hi) {
    std::string r;
    for (int64_t i = 0; i < n; ++i) r += (i ? "," : "") + std::to_string(pick(0, hi));
    return r;
  };
  CaseSpec c;
  c.tier = "random";
  c.name = "random_" + std::to_string(index);
  auto& k = c.keys;
  const std::string layout =
      one_of({"BSH", "BSND", "BNSD", "BNSD_BSND", "TND", "NTD_TND", "BSND_NBSD"});
  const bool packed = layout == "TND" || layout == "NTD_TND";
  k["layout"] = layout;
  k["dtype"] = one_of({"bf16", "bf16", "f16", "f32"});
  const int64_t B = pick(1, 3), KVN = pick(1, 3), G = std::stoll(one_of({"1", "2", "4", "5"}));
  const bool mla = chance(0.06);
  const int64_t N = mla ? 32 : KVN * G;
  const bool decode = chance(0.4);
  // Lengths past one 64-key tile (and the decode kernels' blocks) and a few long query tiles.
  const int64_t S = decode ? 1 : chance(0.2) ? pick(10, 80) : pick(2, 9);
  const int64_t KVS = chance(0.05) ? 0 : chance(0.35) ? pick(49, 300) : pick(1, 48);
  k["B"] = std::to_string(B), k["N"] = std::to_string(N), k["KVN"] = mla ? "1" : std::to_string(KVN);
  k["S"] = std::to_string(S), k["KVS"] = std::to_string(KVS);
  if (mla) {
    k["D"] = "512", k["rope"] = "1";
  } else {
    k["D"] = one_of({"8", "16", "32", "64", "128"});
    if (chance(0.1)) k["DV"] = one_of({"16", "32"});
  }
  if (packed || chance(0.4)) k["act_q"] = list(chance(0.2) ? 1 : B, S);
  if (packed || chance(0.5)) k["act_kv"] = list(chance(0.2) ? 1 : B, KVS);
  if (chance(0.05)) k["qpad"] = std::to_string(pick(0, 2));
  if (chance(0.05)) k["kvpad"] = std::to_string(pick(0, 2));
  const int64_t sparse = decode ? 0 : one_of({"0", "0", "1", "2", "3", "4"})[0] - '0';
  if (sparse) k["sparse"] = std::to_string(sparse);
  if (sparse == 0 || sparse == 1) {
    const std::string mask = decode ? one_of({"none", "none", "bkv"})
                                    : one_of({"none", "full", "full4", "full2"});
    if (mask != "none") k["mask"] = mask, k["mdtype"] = one_of({"bool", "int8", "uint8"});
  }
  if (sparse == 4 || (sparse == 0 && k.count("mask") && chance(0.5))) {
    k["pre"] = std::to_string(pick(-2, 8));
    k["next"] = std::to_string(pick(-2, 8));
  }
  if (chance(0.25)) {
    k["page"] = one_of({"16", "32", "128"});
    k["cache"] = one_of({"3d", "4d", "nz"});
  }
  if (!mla && chance(0.25)) {
    k["kv"] = one_of({"int8", "int8", "int4"});
    if (chance(0.1)) {
      k["legacy"] = one_of({"pc", "pt", "tok"});
    } else {
      k["kmode"] = one_of({"0", "0t", "1", "2", "3", "4", "5"});
      if (chance(0.3)) k["vmode"] = one_of({"0", "1"});
    }
    if (chance(0.3)) k["aoff"] = "0";
  } else if (!mla && chance(0.05)) {
    k["fullquant"] = "1";
  }
  if (chance(0.1)) k["prefix"] = std::to_string(pick(1, 6));
  if (k.count("prefix") && chance(0.5)) k["pact"] = std::to_string(pick(0, std::stoi(k["prefix"])));
  if (chance(0.1)) k["pse"] = one_of({"1", "b1"});
  if (chance(0.1)) k["list"] = "1";
  if (chance(0.1)) k["outq"] = one_of({"pt", "pc"});
  if (k.count("outq") && chance(0.3)) k["qo2"] = "0";
  if (chance(0.1)) k["ip"] = std::to_string(pick(0, 3));
  if (chance(0.1)) k["sinks"] = one_of({"bf16", "f32"});
  if (chance(0.3)) k["lse"] = "1";
  k["seed"] = std::to_string(index);
  return c;
}

struct RandomList {
  std::vector<CaseSpec> cases;
  int64_t tried = 0;
};

const RandomList& RandomCases() {
  static const RandomList list = [] {
    RandomList r;
    const int64_t want = EnvInt("OPENFIA_RANDOM_CASES", 48);
    std::mt19937_64 rng(static_cast<uint64_t>(EnvInt("OPENFIA_RANDOM_SEED", 1)) * 0x9E3779B97F4A7C15ull);
    while (static_cast<int64_t>(r.cases.size()) < want && r.tried < 400 * want) {
      CaseSpec c = RandomCaseSpec(rng, r.tried++);
      try {
        FiaCase built(c);  // throws for a combination the builder or the operator rejects
      } catch (const std::exception&) {
        continue;
      }
      r.cases.push_back(std::move(c));
    }
    return r;
  }();
  return list;
}

// One test, not a parameterized suite: the cases are drawn (and built, to keep the valid ones)
// when it runs, so the other tests' processes (ctest runs each test in its own; under QEMU in CI)
// do not pay for drawing them at start-up.
TEST(FiaRandomCases, PassTheListsChecks) {
  // The generator must keep producing valid calls (a builder or validation change that rejects
  // them all would otherwise leave the random suite empty), and a varied mix of them.
  const RandomList& r = RandomCases();
  const int64_t want = EnvInt("OPENFIA_RANDOM_CASES", 48);
  ASSERT_EQ(static_cast<int64_t>(r.cases.size()), want) << "after " << r.tried << " tries";
  std::set<std::string> layouts;
  int64_t decode = 0, paged = 0, quant = 0;
  for (const CaseSpec& c : r.cases) {
    layouts.insert(c.Str("layout", ""));
    decode += c.Int("S", 1) == 1;
    paged += c.Has("page");
    quant += c.Has("kv") || c.Has("fullquant");
  }
  if (want >= 32) {
    EXPECT_EQ(layouts.size(), 7u);
    EXPECT_GT(decode, 0);
    EXPECT_GT(paged, 0);
    EXPECT_GT(quant, 0);
  }
  std::printf("random cases: %zu kept of %lld drawn (%lld decode, %lld paged, %lld quantized)\n",
              r.cases.size(), static_cast<long long>(r.tried), static_cast<long long>(decode),
              static_cast<long long>(paged), static_cast<long long>(quant));
  for (const CaseSpec& c : r.cases) {
    SCOPED_TRACE(c.ToLine());
    ReferenceInvariants(c);
    EngineMatchesReference(c);
    ThreadCountInvariant(c);
  }
}

INSTANTIATE_TEST_SUITE_P(List, FiaCases, ::testing::ValuesIn(Cases()), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FiaCases);

}  // namespace
}  // namespace openfia::cases
