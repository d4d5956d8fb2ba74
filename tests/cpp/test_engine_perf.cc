// Quick local timers for the engine's two reference shapes (disabled by default; run with
// --gtest_also_run_disabled_tests --gtest_filter='*EnginePerf*'). They print time, GB/s, GFLOP/s.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <ctime>
#include <vector>

#include "engine/engine.h"
#include "engine_case.h"
#include "openfia/runtime.h"
#include "common/convert.h"
#include "case_list.h"
#include "test_sas_fixture.h"

namespace openfia::internal {
namespace {

struct Bf16Buf {
  std::vector<uint16_t> v;
  explicit Bf16Buf(int64_t n, uint32_t seed) : v(n) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& x : v) x = cvt::F32ToBF16(u(rng));
  }
};

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Best of `reps` runs. With one thread the engine runs on the calling thread, so its CPU time is
// reported instead of wall time: this machine is shared and wall time includes other tenants.
template <typename F>
double BestMs(F&& f, int reps, bool cpu) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuMs();
    f();
    const double c1 = ThreadCpuMs();
    const auto t1 = std::chrono::steady_clock::now();
    const double ms = cpu ? c1 - c0 : std::chrono::duration<double, std::milli>(t1 - t0).count();
    best = std::min(best, ms);
  }
  return best;
}

int Threads() {
  const char* e = std::getenv("OPENFIA_PERF_THREADS");
  return e ? std::atoi(e) : 2;
}

// B=1, 32 query heads, 8 KV heads, D=128, KV 16384 bf16 paged (block 128), Q_S=1.
TEST(EnginePerf, DISABLED_DecodeBf16Paged) {
  // SKV overrides the length, BATCH the batch (each batch its own pages / rows). Layouts:
  // default the 3-D paged cache [block, block_size, H*D] (BSH/BSND users); PAGED4D=1 the 4-D one
  // [block, H, block_size, D]; CONTIG=1 a contiguous BNSD cache. KVQ=i8: int8 K and V with
// per-token scale + offset (antiquant mode 4: page-managed (block, block_size) in paged layouts,
// (B, S) contiguous); KVQ=i4: int4 K with per-channel (H, D) and V with per-token scale + offset.
  const int64_t hq = 32, hkv = 8, D = 128, bs = 128;
  const int64_t S = std::getenv("SKV") ? std::atoi(std::getenv("SKV")) : 16384, nb1 = S / bs;
  const int64_t B = std::getenv("BATCH") ? std::atoi(std::getenv("BATCH")) : 1, nb = B * nb1;
  Bf16Buf q(B * hq * D, 1), k(nb * hkv * bs * D, 2), v(nb * hkv * bs * D, 3);
  std::vector<uint16_t> out(B * hq * D);
  std::vector<int32_t> table(nb);
  for (int64_t i = 0; i < nb; ++i) table[i] = static_cast<int32_t>((i * 37) % nb);
  Problem p;
  p.batch = B;
  p.h_q = hq;
  p.h_kv = hkv;
  p.d_qk = p.d_v = D;
  p.incremental = true;
  p.q_begin.assign(B, 0);
  p.q_len.assign(B, 1);
  p.kv_begin.assign(B, 0);
  p.kv_len.assign(B, S);
  p.s_q = 1;
  p.q = Operand{q.v.data(), Elem::kBF16, hq * D, D, D, 1};
  // (blocknum, blocksize, H*D)
  p.k.cache = Operand{k.v.data(), Elem::kBF16, bs * hkv * D, D, hkv * D, 1};
  p.v.cache = Operand{v.v.data(), Elem::kBF16, bs * hkv * D, D, hkv * D, 1};
  if (std::getenv("CONTIG")) {
    p.k.cache = Operand{k.v.data(), Elem::kBF16, S * hkv * D, S * D, D, 1};
    p.v.cache = Operand{v.v.data(), Elem::kBF16, S * hkv * D, S * D, D, 1};
  } else {
    p.paged = true;
    if (std::getenv("PAGED4D")) {  // (blocknum, H, blocksize, D)
      p.k.cache = Operand{k.v.data(), Elem::kBF16, bs * hkv * D, bs * D, D, 1};
      p.v.cache = Operand{v.v.data(), Elem::kBF16, bs * hkv * D, bs * D, D, 1};
    }
  }
  const std::string kvq = std::getenv("KVQ") ? std::getenv("KVQ") : "";
  std::vector<uint8_t> kq, vq;  // quantized storage (int4: two channels a byte, low nibble first)
  std::vector<float> ks, ko, vs, vo;
  if (kvq == "i8" || kvq == "i4") {
    const Elem e = kvq == "i8" ? Elem::kI8 : Elem::kI4;
    const int64_t n = nb * hkv * bs * D, bytes = e == Elem::kI8 ? n : n / 2;
    std::mt19937 rng(7);
    kq.resize(bytes);
    vq.resize(bytes);
    for (auto& x : kq) x = static_cast<uint8_t>(rng());
    for (auto& x : vq) x = static_cast<uint8_t>(rng());
    p.k.cache.data = kq.data();
    p.v.cache.data = vq.data();
    p.k.cache.elem = p.v.cache.elem = e;
    std::uniform_real_distribution<float> u(0.001f, 0.01f);
    const auto per_token = [&](Dequant* dq, std::vector<float>* sc, std::vector<float>* of) {
      sc->resize(nb * bs);  // (block, block_size) paged, (B, S) contiguous: both nb * bs
      of->resize(nb * bs);
      for (auto& x : *sc) x = u(rng);
      for (auto& x : *of) x = u(rng) * 100.f;
      dq->kind = Dequant::Kind::kPerToken;
      dq->scale = sc->data();
      dq->offset = of->data();
      dq->sb = p.paged ? bs : S;
      dq->ss = 1;
    };
    per_token(&p.v.dequant, &vs, &vo);
    if (e == Elem::kI8) {
      per_token(&p.k.dequant, &ks, &ko);
    } else {
      ks.resize(hkv * D);
      ko.resize(hkv * D);
      for (auto& x : ks) x = u(rng);
      for (auto& x : ko) x = u(rng) * 100.f;
      p.k.dequant.kind = Dequant::Kind::kPerChannel;
      p.k.dequant.scale = ks.data();
      p.k.dequant.offset = ko.data();
      p.k.dequant.sh = D;
      p.k.dequant.sd = 1;
    }
  }
  p.block_table = table.data();
  p.bt_stride = nb1;
  p.block_size = bs;
  p.scale = 0.088;
  p.band_pre.assign(B, Problem::kNoBand);
  p.band_next.assign(B, Problem::kNoBand);
  p.out = out.data();
  p.out_elem = Elem::kBF16;
  p.out_sb = hq * D;
  p.out_sh = D;
  p.out_ss = hq * D;
  SetNumThreads(Threads());
  ASSERT_TRUE(EngineSupports(p, nullptr));
  RunEngine(p);
  const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 20;
  const double ms = BestMs([&] { RunEngine(p); }, reps, Threads() == 1);
  const double bytes = 2.0 * B * S * hkv * D * (kvq == "i8" ? 1 : kvq == "i4" ? 0.5 : 2);
  std::printf("decode %s %s B=%lld S=%lld (%s, %d threads): %.3f ms, %.1f GB/s\n",
              kvq.empty() ? "bf16" : kvq.c_str(),
              std::getenv("CONTIG") ? "contig BNSD" : std::getenv("PAGED4D") ? "paged 4-D"
                                                                           : "paged 3-D",
              static_cast<long long>(B), static_cast<long long>(S), SimdTarget().c_str(),
              Threads(), ms, bytes / ms / 1e6);
}

// B=1, 32 query heads, 8 KV heads, D=128, Q_S=512, KV_S=4096, causal bottom-right, bf16.
TEST(EnginePerf, DISABLED_PrefillBf16CausalBr) {
  const int64_t hq = 32, hkv = 8, D = 128, Sq = 512, S = 4096;
  Bf16Buf q(Sq * hq * D, 1), k(S * hkv * D, 2), v(S * hkv * D, 3);
  std::vector<uint16_t> out(Sq * hq * D);
  Problem p;
  p.batch = 1;
  p.h_q = hq;
  p.h_kv = hkv;
  p.d_qk = p.d_v = D;
  p.q_begin = {0};
  p.q_len = {Sq};
  p.kv_begin = {0};
  p.kv_len = {S};
  p.s_q = Sq;
  p.q = Operand{q.v.data(), Elem::kBF16, Sq * hq * D, D, hq * D, 1};  // BSND
  p.k.cache = Operand{k.v.data(), Elem::kBF16, S * hkv * D, D, hkv * D, 1};
  p.v.cache = Operand{v.v.data(), Elem::kBF16, S * hkv * D, D, hkv * D, 1};
  p.scale = 0.088;
  p.band_pre = {Problem::kNoBand};
  p.band_next = {S - Sq};
  p.out = out.data();
  p.out_elem = Elem::kBF16;
  p.out_sb = Sq * hq * D;
  p.out_sh = D;
  p.out_ss = hq * D;
  SetNumThreads(Threads());
  ASSERT_TRUE(EngineSupports(p, nullptr));
  RunEngine(p);
  const double ms = BestMs([&] { RunEngine(p); }, 3, Threads() == 1);
  // Visible pairs: row i sees S - Sq + i + 1 keys; 2 GEMMs of 2*D flops per pair.
  double pairs = 0;
  for (int64_t i = 0; i < Sq; ++i) pairs += S - Sq + i + 1;
  const double flops = pairs * hq * 4.0 * D;
  std::printf("prefill bf16 causal-br (%s, %d threads): %.2f ms, %.1f GFLOP/s (%.1f per core)\n",
              SimdTarget().c_str(), Threads(), ms, flops / ms / 1e6,
              flops / ms / 1e6 / Threads());
}

// SparseAttnSharedkv V1 of the benchmark (DeepSeek-V4 decode): B=16, S1=1, N=64, D=512, ori KV
// 8192 (window 128), cmp_ratio 4 with 512 top-k entries, sinks, bf16. SAS_B / SAS_K2 override
// the batch and the top-k. Prints time and GFLOP/s (2 GEMMs of 2 D flops per visible key).
TEST(EnginePerf, DISABLED_SasDecodeV1) {
  sas_test::SasFixture f;
  const int64_t B = std::getenv("SAS_B") ? std::atoi(std::getenv("SAS_B")) : 16;
  f.dtype = DType::kBFloat16;
  f.n1 = 64;
  f.d = 512;
  f.q_len.assign(B, 1);
  f.kv_len.assign(B, 8192);
  f.bs1 = 128;
  f.bs2 = 64;
  f.ratio = 4;
  f.k2 = std::getenv("SAS_K2") ? std::atoi(std::getenv("SAS_K2")) : 512;
  f.lse = false;
  f.poison = false;
  f.scale = 1.0 / std::sqrt(512.0);
  const SasArgs a = f.Build();
  // Every row reads its whole window and top-k entries without -1 or repeats (as the benchmark).
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> all(8192 / 4);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(static_cast<uint32_t>(b)));
    for (int64_t n = 0; n < f.k2; ++n) f.idx[b * f.k2 + n] = all[n];
  }
  SetNumThreads(Threads());
  f.Run(a);
  const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 10;
  const double ms = BestMs([&] { f.Run(a); }, reps, Threads() == 1);
  const double flops = 4.0 * B * f.n1 * (128 + f.k2) * f.d;
  std::printf("sas decode B=%lld N=64 D=512 window 128 + top-%lld (%s, %d threads): %.3f ms, "
              "%.1f GFLOP/s (%.1f per core)\n",
              static_cast<long long>(B), static_cast<long long>(f.k2), SimdTarget().c_str(),
              Threads(), ms, flops / ms / 1e6, flops / ms / 1e6 / Threads());
}

// P3 of the benchmark (MLA decode): B=1, 128 query heads over one KV head, latent D = 512 (the
// same tensor as K and V) + rope 64, 8192 keys paged by 128, bf16. MLA_KV overrides the key
// count. Prints time and GFLOP/s (2 (576 + 512) flops per query head and key).
TEST(EnginePerf, DISABLED_MlaDecodeP3) {
  testing::CaseSpec s;
  s.h_q = 128;
  s.h_kv = 1;
  s.d_qk = s.d_v = 512;
  s.d_rope = 64;
  s.q_len = {1};
  s.kv_len = {std::getenv("MLA_KV") ? std::atoi(std::getenv("MLA_KV")) : 8192};
  s.block = 128;
  s.lse = false;
  s.scale = 1.0 / std::sqrt(576.0);
  testing::Case c(s);
  c.ValuesFromKeys(true);
  SetNumThreads(Threads());
  RunEngine(c.problem());
  const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 10;
  const double ms = BestMs([&] { RunEngine(c.problem()); }, reps, Threads() == 1);
  const double flops = 2.0 * 128 * s.kv_len[0] * (576 + 512);
  std::printf("mla decode N=128/1 D=512+64 KV=%lld (%s, %d threads): %.3f ms, %.1f GFLOP/s "
              "(%.1f per core)\n",
              static_cast<long long>(s.kv_len[0]), SimdTarget().c_str(), Threads(), ms,
              flops / ms / 1e6, flops / ms / 1e6 / Threads());
}

// int8 full quantization (int8 query, key and value; docs/semantics.md 1.8) as a prompt call of the
// shared case list's format: by default P1's geometry (512 queries over 4096 keys, bottom-right
// causal) with int8 Q / K / V. FQ_LINE overrides the case line. Prints time and the pair rate
// (GOP/s: 2 (D + Dv) operations per visible (head, query, key) pair, as P1's GFLOP/s).
TEST(EnginePerf, DISABLED_FullQuantPrefill) {
  const char* env = std::getenv("FQ_LINE");
  const std::string line =
      env ? env : "model fq layout=BSH B=1 N=32 KVN=8 S=512 KVS=4096 D=128 sparse=3 fullquant=1";
  cases::CaseSpec spec;
  ASSERT_TRUE(cases::ParseCaseLine(line, &spec));
  cases::FiaCase c(spec);
  SetImpl(Impl::kEngine);
  SetNumThreads(Threads());
  c.Run();
  const int reps = std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 3;
  const double ms = BestMs([&] { c.Run(); }, reps, Threads() == 1);
  SetImpl(Impl::kAuto);
  const cases::CaseGeometry& g = c.geometry();
  double pairs = 0;  // bottom-right causal (sparse 2 / 3) or everything
  const bool causal = spec.Int("sparse", 0) == 3;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t i = 0; i < g.q_len[b]; ++i)
      pairs += causal ? std::min(g.kv_len[b], g.kv_len[b] - g.q_len[b] + i + 1) : g.kv_len[b];
  const double ops = pairs * g.N * 2.0 * (g.D + g.DV);
  std::printf("full-quant prefill [%s] (%s, %d threads): %.2f ms, %.1f GOP/s (%.1f per core)\n",
              line.c_str(), SimdTarget().c_str(), Threads(), ms, ops / ms / 1e6,
              ops / ms / 1e6 / Threads());
}

}  // namespace
}  // namespace openfia::internal
