// openfia tests: the engine-vs-reference harness shared by the engine test files: every SIMD
// target this CPU runs against the fp64 reference (and the test oracle), 1, 2, 3 threads bitwise.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/plan.h"
#include "engine_case.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "kernel_util.h"

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
    SetKernel("");
  }
};

inline std::vector<std::string> Targets() {
  std::vector<std::string> t;
  for (const char* name : {"scalar", "avx2", "avx512", "avx512bf16", "amx", "neon", "neonbf16"})
    if (TargetOps(name)) t.push_back(name);
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
  // The reference rounds every dequantized K / V element to the query dtype; kernels may take
  // the integers exact and apply the scales to the sums (at least as accurate): a K element's
  // rounding moves a score by up to D * amp^2 * scale * u_q, a V element's an output by vmax * u_q.
  const double u_q = p.q.elem == Elem::kF32 ? u32 : Eps(p.q.elem) / 2;
  const bool kq = p.k.dequant.kind != Dequant::Kind::kNone;
  const bool vq = p.v.dequant.kind != Dequant::Kind::kNone;
  const double ds = D * u32 * D * s.amp * s.amp * std::fabs(s.scale) + (kq ? D * s.amp * s.amp * std::fabs(s.scale) * u_q : 0);
  const double vmax = c.max_abs_v();
  const double eps_p = p.q.elem == Elem::kF32 ? u32 : Eps(p.q.elem);
  const double atol_x = vmax * (eps_p + (vq ? u_q : 0) + 2.5 * ds + 2 * (kvmax + 16) * u32);
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
  // Every target's kernel list, then every kernel this CPU runs forced on its own where it takes
  // every item of the case.
  std::vector<std::string> runs;
  for (const std::string& target : Targets()) runs.push_back(target);
  const std::vector<WorkItem> items = MakePlan(c.problem()).items;
  for (const Kernel* k : RunnableKernels()) {
    bool all = k->supports(c.problem(), nullptr) == nullptr;
    for (const WorkItem& w : items) all = all && k->supports(c.problem(), &w) == nullptr;
    if (all) runs.push_back(std::string("kernel:") + k->name);
  }
  for (const std::string& run : runs) {
    const bool forced = run.rfind("kernel:", 0) == 0;
    SetSimdCap(forced ? "" : run);
    SetKernel(forced ? run.substr(7) : "");
    if (!forced) ASSERT_EQ(SimdTarget(), run);
    const std::string& target = run;
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
        // (Compared as vectors: an empty output has no data pointer to hand to memcmp.)
        EXPECT_EQ(first_out, std::vector<uint8_t>(c.out(), c.out() + c.out_bytes())) << what;
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

// Replaces the float cache of `kv` (D channels) by int8 / int4 codes at the same element
// strides with a Dequant of `kind`, so that |(x + offset) * scale| <= amp. `keep` owns the buffers.
inline void Quantize(Problem& p, KvOperand& kv, int64_t D, Elem e, Dequant::Kind kind, bool with_offset,
              float amp, std::vector<std::vector<uint8_t>>& keep, std::mt19937& rng) {
  Operand& o = kv.cache;
  int64_t nb = p.batch, ns = 0;  // storage (b, s) extents
  if (p.paged) {
    nb = 0;
    for (int64_t i = 0; i < p.batch * p.bt_stride; ++i)
      nb = std::max<int64_t>(nb, p.block_table[i] + 1);
    ns = p.block_size;
  } else {
    for (int64_t b = 0; b < p.batch; ++b) ns = std::max(ns, p.kv_begin[b] + p.kv_len[b]);
  }
  const int64_t extent = o.sb * (nb - 1) + o.sh * (p.h_kv - 1) + o.ss * (ns - 1) + D;
  keep.emplace_back(e == Elem::kI4 ? (extent + 1) / 2 : extent);
  for (auto& x : keep.back()) x = static_cast<uint8_t>(rng() & 0xFF);
  o.data = keep.back().data();
  o.elem = e;
  Dequant& dq = kv.dequant;
  dq.kind = kind;
  int64_t n = 1;
  switch (kind) {
    case Dequant::Kind::kPerChannel: dq.sh = D; dq.sd = 1; n = p.h_kv * D; break;
    case Dequant::Kind::kPerToken: dq.sb = ns; dq.ss = 1; n = nb * ns; break;
    case Dequant::Kind::kPerTokenHead:
      dq.sb = p.h_kv * ns; dq.sh = ns; dq.ss = 1; n = nb * p.h_kv * ns; break;
    default: break;  // per-tensor: every stride 0
  }
  const float qmax = e == Elem::kI4 ? 8.f : 128.f, omax = e == Elem::kI4 ? 2.f : 4.f;
  std::uniform_real_distribution<float> u(0.5f, 1.f), uo(-omax, omax);
  // Scales as bf16 (exercises a non-f32 scale dtype), offsets as f32.
  keep.emplace_back(n * 2);
  for (int64_t i = 0; i < n; ++i)
    cvt::Store(keep.back().data(), Elem::kBF16, i, u(rng) * amp / (qmax + omax));
  dq.scale = keep.back().data();
  dq.scale_elem = Elem::kBF16;
  if (with_offset) {
    keep.emplace_back(n * 4);
    for (int64_t i = 0; i < n; ++i) cvt::Store(keep.back().data(), Elem::kF32, i, uo(rng));
    dq.offset = keep.back().data();
    dq.offset_elem = Elem::kF32;
  }
}

// A decode case with int8 / int4 K and V (Quantize, K offset k_off, V offset v_off) against the
// fp64 reference; `count` (a kernel's item predicate via CountItems) must find items when
// `expect` (the CPU runs that kernel). `edit` (optional) rewrites the quantized problem.
inline void RunQuantizedDecode(const CaseSpec& s, Elem e, Dequant::Kind kk, Dequant::Kind vk,
                        bool k_off, bool v_off, int64_t (*count)(const Problem&), bool expect,
                        const std::function<void(Problem&)>& edit = {}) {
  std::vector<std::vector<uint8_t>> keep;
  const auto quantize = [&](Case& c) {
    std::mt19937 rng(s.seed);
    Problem& p = c.problem();
    Quantize(p, p.k, s.d_qk, e, kk, k_off, 1.f, keep, rng);
    Quantize(p, p.v, s.d_v, e, vk, v_off, 1.f, keep, rng);
    if (edit) edit(p);
  };
  Case c(s);
  quantize(c);
  if (expect) EXPECT_GT(count(c.problem()), 0) << "seed " << s.seed;
  RunCase(s, quantize, false);
}

}  // namespace openfia::internal::testing
