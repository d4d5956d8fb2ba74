// The AVX512-BF16 decode kernel (decode_avx512bf16-inl.h) vs the fp64 reference under every SIMD
// target this CPU runs and 1, 2, 3 threads (which must agree bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/plan.h"
#include "engine_case.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "simd/simd.h"

namespace openfia::internal::testing {
namespace {

// The helpers of test_engine.cc (Eps, Compare, RunCase), trimmed to what these cases need.
double Eps(Elem e) {
  switch (e) {
    case Elem::kF16: return std::ldexp(1.0, -10);
    case Elem::kBF16: return std::ldexp(1.0, -7);
    default: return std::ldexp(1.0, -23);
  }
}

struct SettingsGuard {
  ~SettingsGuard() {
    SetSimdCap("");
    SetNumThreads(2);
  }
};

std::vector<std::string> Targets() {
  std::vector<std::string> t;
  for (const char* name : {"scalar", "avx2", "avx512", "avx512bf16", "amx"})
    if (KernelsFor(name)) t.push_back(name);
  return t;
}

void Compare(Case& c, const std::vector<uint8_t>& ref_out, const std::vector<float>& ref_lse,
             const std::string& what) {
  const Problem& p = c.problem();
  const CaseSpec& s = c.spec();
  const double u32 = std::ldexp(1.0, -24);
  const int64_t D = p.d_qk + p.d_rope;
  int64_t kvmax = 0;
  for (int64_t b = 0; b < p.batch; ++b) kvmax = std::max(kvmax, p.kv_total(b));
  const double ds = D * u32 * D * s.amp * s.amp * s.scale;
  const double vmax = c.max_abs_v();
  const double eps_p = p.q.elem == Elem::kF32 ? u32 : Eps(p.q.elem);
  const double atol_x = vmax * (eps_p + 2.5 * ds + 2 * (kvmax + 16) * u32);
  const double lse_tol = ds + 2 * (kvmax + 16) * u32;
  const Elem oe = p.out_elem;
  int bad = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.h_q; ++h) {
      for (int64_t row = 0; row < p.s_q; ++row) {
        for (int64_t d = 0; d < p.d_v; ++d) {
          const int64_t o = b * p.out_sb + h * p.out_sh + row * p.out_ss + d * p.out_sd;
          const double got = cvt::Load(c.out(), oe, o), want = cvt::Load(ref_out.data(), oe, o);
          bool ok;
          if (std::isnan(want) || std::isnan(got)) ok = std::isnan(want) && std::isnan(got);
          else if (std::isinf(want) || std::isinf(got)) ok = got == want;
          else ok = std::fabs(got - want) <= atol_x + Eps(oe) * std::fabs(want);
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": out(b=" << b << ", h=" << h << ", row=" << row
                          << ", d=" << d << ") = " << got << ", want " << want;
        }
        if (p.lse) {
          const int64_t li = b * p.lse_sb + h * p.lse_sh + row * p.lse_ss;
          const double got = c.lse()[li], want = ref_lse[li];
          bool ok;
          if (std::isnan(want) || std::isinf(want)) ok = std::isnan(want) ? std::isnan(got) : got == want;
          else ok = std::fabs(got - want) <= lse_tol + 2 * u32 * std::fabs(want);
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": lse(b=" << b << ", h=" << h << ", row=" << row
                          << ") = " << got << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Every target against the fp64 reference; 1, 2, 3 threads bitwise.
void RunCase(const CaseSpec& spec, const std::function<void(Case&)>& mutate = {}) {
  SettingsGuard guard;
  Case c(spec);
  if (mutate) mutate(c);
  std::string why;
  ASSERT_TRUE(EngineSupports(c.problem(), &why)) << why;
  c.ResetOutputs();
  RunReference(c.problem());
  const std::vector<uint8_t> ref_out(c.out(), c.out() + c.out_bytes());
  const std::vector<float> ref_lse = c.lse();
  for (const std::string& target : Targets()) {
    SetSimdCap(target);
    ASSERT_EQ(SimdTarget(), target);
    std::vector<uint8_t> first_out;
    std::vector<float> first_lse;
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      c.ResetOutputs();
      RunEngine(c.problem());
      const std::string what = target + " x" + std::to_string(threads);
      if (threads == 1) {
        Compare(c, ref_out, ref_lse, what + " vs reference");
        first_out.assign(c.out(), c.out() + c.out_bytes());
        first_lse = c.lse();
      } else {
        EXPECT_EQ(0, std::memcmp(first_out.data(), c.out(), c.out_bytes())) << what;
        EXPECT_EQ(0, std::memcmp(first_lse.data(), c.lse().data(), first_lse.size() * 4))
            << what;
      }
    }
  }
}

int64_t Bf16DecodeItems(const Problem& p) {
  int64_t n = 0;
  for (const WorkItem& w : MakePlan(p).items) n += Avx512Bf16DecodeRunsItem(p, w) ? 1 : 0;
  return n;
}

// 1, 2, 4 and 8 rows per KV head (GQA groups, G = 2 with 2 query rows), paged caches with odd
// blocks (NaN in unused page tails), contiguous caches with a bf16 shared prefix, splits (1500+
// keys), short batches (61 keys: a partial first tile), sinks, lse, d 16 / 32 / 64 / 128 and
// d_v != d_qk (including d % 32 == 16), large scores (running-max rescales). Proof it ran: the
// plan has items it accepts (when the CPU has the table); G = 3 and f16 queries it declines.
TEST(DecodeBf16, Shapes) {
  const bool bf16 = KernelsFor("avx512bf16") != nullptr;
  struct G {
    int64_t h_q, h_kv, q_len, d_qk, d_v, block, prefix;
    bool sinks, expect;
    Elem e = Elem::kBF16;
  };
  int seed = 0;
  for (const G& g : {G{32, 8, 1, 128, 128, 128, 0, false, true},  // Llama GQA 4, paged 3-D
                     G{32, 8, 1, 128, 64, 128, 0, true, true},    // d_v != d_qk
                     G{16, 8, 1, 32, 48, 33, 0, true, true},      // G = 2, odd blocks, d_v 48
                     G{8, 8, 1, 64, 64, 0, 21, false, true},      // MHA, bf16 prefix
                     G{8, 8, 1, 16, 80, 7, 0, false, true},       // G = 1, d 16, blocks of 7
                     G{16, 2, 1, 16, 16, 7, 0, false, true},      // G = 8, d 16
                     G{16, 2, 1, 48, 32, 0, 9, true, true},       // G = 8, d 48, prefix
                     G{8, 4, 2, 32, 32, 16, 0, true, true},       // G = 2 x 2 query rows
                     G{8, 4, 4, 32, 32, 0, 5, false, true},       // G = 2 x 4 query rows
                     G{12, 4, 1, 32, 32, 0, 0, false, false},     // G = 3: not this kernel
                     G{16, 4, 1, 64, 64, 33, 0, false, false, Elem::kF16}}) {  // f16
    CaseSpec s;
    s.qe = s.oe = g.e;
    s.h_q = g.h_q;
    s.h_kv = g.h_kv;
    s.d_qk = g.d_qk;
    s.d_v = g.d_v;
    s.block = g.block;
    s.prefix = g.prefix;
    s.sinks = g.sinks;
    s.batch = 2;
    s.q_len = {g.q_len, g.q_len};
    s.kv_len = {1500 + g.block, 61};
    s.amp = 3.f;  // large scores: running-max rescales
    s.scale = 0.125;
    s.seed = ++seed;
    Case c(s);
    if (bf16) EXPECT_EQ(Bf16DecodeItems(c.problem()) > 0, g.expect) << "case " << seed;
    RunCase(s);
  }
}

// A NaN and an +inf in V (the chunks holding them take the fp32 products, whose tiny
// probabilities still meet the infinity) must land where the reference puts its NaN and inf;
// a NaN in K makes its rows NaN.
TEST(DecodeBf16, NonFiniteValues) {
  const bool bf16 = KernelsFor("avx512bf16") != nullptr;
  for (int which = 0; which < 3; ++which) {
    CaseSpec s;
    s.oe = Elem::kF32;
    s.h_q = 32;
    s.h_kv = 8;
    s.d_qk = s.d_v = 64;
    s.block = 33;
    s.batch = 1;
    s.q_len = {1};
    s.kv_len = {700};
    s.seed = 40 + which;
    Case c(s);
    if (bf16) EXPECT_GT(Bf16DecodeItems(c.problem()), 0);
    RunCase(s, [which](Case& c) {
      Problem& p = c.problem();
      KvOperand& kv = which == 2 ? p.k : p.v;
      uint16_t* data = const_cast<uint16_t*>(static_cast<const uint16_t*>(kv.cache.data));
      const uint16_t bits = which == 0 ? 0x7FC0 : 0x7F80;  // NaN, +inf
      for (int64_t j : {5, 300, 641}) {
        // The paged cache: logical key j of batch 0 lives at block table[j / block].
        const int64_t blk = p.block_table[j / p.block_size];
        const int64_t o = kv.cache.Offset(blk, 3, j % p.block_size, 7);
        data[o] = bits;
      }
    });
  }
}

}  // namespace
}  // namespace openfia::internal::testing
