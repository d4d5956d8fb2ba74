// openfia tests: the engine-vs-reference harness shared by the engine test files: every SIMD
// target this CPU runs against the fp64 reference (and the test oracle), 1, 2, 3 threads bitwise.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/plan.h"
#include "engine_case.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "simd/simd.h"

namespace openfia::internal::testing {

inline double Eps(Elem e) {
  switch (e) {
    case Elem::kF16: return std::ldexp(1.0, -10);
    case Elem::kBF16: return std::ldexp(1.0, -7);
    case Elem::kI8: return 1.0;
    default: return std::ldexp(1.0, -23);
  }
}

// Restores the process-wide settings a test changes.
struct SettingsGuard {
  ~SettingsGuard() {
    SetSimdCap("");
    SetNumThreads(2);
  }
};

inline std::vector<std::string> Targets() {
  std::vector<std::string> t;
  for (const char* name : {"scalar", "avx2", "avx512", "avx512bf16", "amx"})
    if (KernelsFor(name)) t.push_back(name);
  return t;
}

inline void Compare(Case& c, const std::vector<uint8_t>& ref_out, const std::vector<float>& ref_lse,
             const std::string& what) {
  const Problem& p = c.problem();
  const CaseSpec& s = c.spec();
  const double u32 = std::ldexp(1.0, -24);
  const int64_t D = p.d_qk + p.d_rope;
  int64_t kvmax = 0;
  for (int64_t b = 0; b < p.batch; ++b) kvmax = std::max(kvmax, p.kv_total(b));
  // Score error of an fp32 dot product of length D (|q|, |k| <= amp): D * u * D * amp^2 * scale.
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
          if (std::isnan(want) || std::isnan(got)) {
            ok = std::isnan(want) && std::isnan(got);
          } else if (std::isinf(want) || std::isinf(got)) {
            ok = got == want;  // the same infinity, at the same positions
          } else if (oe == Elem::kI8) {
            const int64_t c2 = h * p.d_v + d;
            const double qs = p.quant_scale2.size() == 1 ? p.quant_scale2[0] : p.quant_scale2[c2];
            ok = std::fabs(got - want) <= 1 + std::ceil(qs * atol_x);
          } else {
            ok = std::fabs(got - want) <= atol_x + Eps(oe) * std::fabs(want);
          }
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": out(b=" << b << ", h=" << h << ", row=" << row
                          << ", d=" << d << ") = " << got << ", want " << want
                          << " (atol " << atol_x << ")";
        }
        if (p.lse) {
          const int64_t li = b * p.lse_sb + h * p.lse_sh + row * p.lse_ss;
          const double got = c.lse()[li], want = ref_lse[li];
          bool ok;
          if (std::isnan(want) || std::isinf(want)) {
            ok = std::isnan(want) ? std::isnan(got) : got == want;
          } else {
            ok = std::fabs(got - want) <= lse_tol + 2 * u32 * std::fabs(want);
          }
          if (!ok && bad++ < 5)
            ADD_FAILURE() << what << ": lse(b=" << b << ", h=" << h << ", row=" << row
                          << ") = " << got << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// `mutate` may rewrite the built problem (e.g. quantize its KV); `oracle` = false compares with
// the fp64 reference only (the test's oracle knows no antiquant).
inline void RunCase(const CaseSpec& spec, const std::function<void(Case&)>& mutate = {},
             bool oracle = true) {
  SettingsGuard guard;
  Case c(spec);
  if (mutate) mutate(c);
  std::string why;
  ASSERT_TRUE(EngineSupports(c.problem(), &why)) << why;
  // The fp64 reference is the contract; the test's own oracle is a second, independent opinion.
  c.ResetOutputs();
  RunReference(c.problem());
  const std::vector<uint8_t> ref_out(c.out(), c.out() + c.out_bytes());
  const std::vector<float> ref_lse = c.lse();
  c.ResetOutputs();
  if (oracle) Oracle(c.problem());
  const std::vector<uint8_t> oracle_out(c.out(), c.out() + c.out_bytes());
  const std::vector<float> oracle_lse = c.lse();
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
        if (oracle) Compare(c, oracle_out, oracle_lse, what + " vs oracle");
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

// Items of p's plan that `runs` (a kernel's own predicate) says the kernel takes.
inline int64_t CountItems(const Problem& p, bool (*runs)(const Problem&, const WorkItem&)) {
  int64_t n = 0;
  for (const WorkItem& w : MakePlan(p).items) n += runs(p, w) ? 1 : 0;
  return n;
}

}  // namespace openfia::internal::testing
