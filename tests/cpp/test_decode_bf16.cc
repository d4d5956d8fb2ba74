// The decode kernel's VDPBF16PS path (avx512/decode_dot-inl.h) vs the fp64 reference under every SIMD
// target this CPU runs and 1, 2, 3 threads (which must agree bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/plan.h"
#include "engine_case.h"
#include "engine_check.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "kernel_util.h"

namespace openfia::internal::testing {
namespace {

int64_t Bf16DecodeItems(const Problem& p) { return CountItems(p, Avx512Bf16DecodeRunsItem); }

// 1, 2, 4 and 8 rows per KV head (GQA groups, G = 2 with 2 query rows), paged caches with odd
// blocks (NaN in unused page tails), contiguous caches with a bf16 shared prefix, splits (1500+
// keys), short batches (61 keys: a partial first tile), sinks, lse, d 16 / 32 / 64 / 128 and
// d_v != d_qk (including d % 32 == 16), large scores (running-max rescales). Proof it ran: the
// plan has items it accepts (when the CPU has the table); G = 3 and f16 queries it declines.
TEST(DecodeBf16, Shapes) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
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
                     G{12, 4, 1, 32, 32, 0, 0, false, true},      // G = 3
                     G{16, 4, 1, 64, 64, 33, 0, false, true, Elem::kF16}}) {  // f16
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
    RunCase(s, {}, false);
  }
}

// A NaN and an +inf in V (the chunks holding them take the fp32 products, whose tiny
// probabilities still meet the infinity) must land where the reference puts its NaN and inf;
// a NaN in K makes its rows NaN.
TEST(DecodeBf16, NonFiniteValues) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
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
    }, false);
  }
}

// An +inf value at keys whose probability is exp(-90) ~ 8e-40, a subnormal even in bf16: the
// output is +inf there, as in the reference. VDPBF16PS reads a subnormal P as 0 (0 x inf = NaN),
// so a tile whose probabilities fell below the probability exp's floor takes the exact exp and
// the fp32 products (DecTinyP in generic/decode-inl.h, DecExactP in generic/decode_base-inl.h).
// Query rows of KV head 0 are e_0 (channel 0 one, the rest zero); key j0's channel 0 makes its
// scaled score 90 above every other key's 0.
TEST(DecodeBf16, InfiniteValueMeetsATinyProbability) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
  for (int64_t d : {64, 48}) {
    CaseSpec s;
    s.oe = Elem::kF32;
    s.h_q = 8;
    s.h_kv = 2;
    s.d_qk = s.d_v = d;
    s.block = 32;
    s.batch = 1;
    s.q_len = {1};
    s.kv_len = {300};
    s.scale = 0.125;
    s.seed = 60 + d;
    Case c(s);
    if (bf16) EXPECT_GT(Bf16DecodeItems(c.problem()), 0);
    RunCase(s, [d](Case& c) {
      Problem& p = c.problem();
      const auto words = [](const Operand& o) {
        return const_cast<uint16_t*>(static_cast<const uint16_t*>(o.Base(0)));
      };
      for (int64_t h = 0; h < 4; ++h)  // the query heads of KV head 0
        for (int64_t c0 = 0; c0 < d; ++c0)
          words(p.q)[p.q.Offset(0, h, p.q_begin[0], c0)] = c0 == 0 ? 0x3F80 : 0;  // 1, 0
      const auto row = [&](const Operand& o, int64_t j, int64_t c0) {
        return o.Offset(p.block_table[j / p.block_size], 0, j % p.block_size, c0);
      };
      for (int64_t j = 0; j < 300; ++j) words(p.k.cache)[row(p.k.cache, j, 0)] = 0;
      words(p.k.cache)[row(p.k.cache, 77, 0)] = 0x4434;  // 720: 720 x 0.125 = 90
      for (int64_t j : {5, 140, 299}) words(p.v.cache)[row(p.v.cache, j, j % d)] = 0x7F80;
    }, false);
  }
}

// int8 / int4 K and V with the antiquant parameters applied to the sums (integer keys by
// VPDPBUSD or staged to bf16, integer values by VPDPWSSD): every antiquant granularity the kernel
// takes, with and without offsets, paged (odd blocks) and contiguous, 1, 2, 4 and 8 rows per KV
// head, d % 32 == 16 (the products' last 16 channels),
// d_v != d_qk, splits (1300 keys) and a partial first tile (45 keys). f16 queries it declines.
TEST(DecodeBf16, Quantized) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
  using K = Dequant::Kind;
  struct Q {
    Elem ke, ve;
    K kk, vk;
    int64_t block, h_q, h_kv, d_qk, d_v;
    Elem qe = Elem::kBF16;
  };
  int seed = 100;
  for (const Q& q : {Q{Elem::kI8, Elem::kI8, K::kPerToken, K::kPerToken, 32, 16, 4, 64, 48},
                     Q{Elem::kI4, Elem::kI8, K::kPerChannel, K::kPerToken, 0, 16, 4, 128, 64},
                     Q{Elem::kI8, Elem::kI4, K::kPerTokenHead, K::kPerChannel, 7, 8, 4, 48, 32},
                     Q{Elem::kI4, Elem::kI4, K::kPerTensor, K::kPerTokenHead, 16, 16, 2, 32, 80},
                     Q{Elem::kI8, Elem::kI8, K::kPerChannel, K::kPerTensor, 48, 8, 8, 16, 16},
                     Q{Elem::kI8, Elem::kI8, K::kPerToken, K::kPerToken, 16, 16, 4, 64, 64,
                       Elem::kF16}}) {
    CaseSpec s;
    s.qe = s.oe = q.qe;
    s.h_q = q.h_q;
    s.h_kv = q.h_kv;
    s.d_qk = q.d_qk;
    s.d_v = q.d_v;
    s.block = q.block;
    s.batch = 2;
    s.q_len = {1, 1};
    s.kv_len = {1300, 45};
    s.sinks = seed % 2 == 0;
    s.seed = ++seed;
    std::vector<std::vector<uint8_t>> keep;
    const auto quantize = [&](Case& c) {
      std::mt19937 rng(s.seed);
      Problem& p = c.problem();
      Quantize(p, p.k, s.d_qk, q.ke, q.kk, seed % 2 == 0, 1.f, keep, rng);
      Quantize(p, p.v, s.d_v, q.ve, q.vk, seed % 3 != 0, 1.f, keep, rng);
    };
    Case c(s);
    quantize(c);
    if (bf16) EXPECT_GT(Bf16DecodeItems(c.problem()), 0) << "case " << seed;
    RunCase(s, quantize, false);
  }
}

// int8 / int4 values take integer probabilities (P' / sigma to 15 bits per tile and row) on the
// VDPBF16PS path; the corners of that form, with bf16 keys and peaked rows (large scores: one
// key's error is not spread over hundreds): per-token value scales of both signs (sigma from the
// largest magnitude), value scales so small that a tile's largest P' falls below the integer
// form's floor (those tiles multiply in fp32; the outputs are ~1e-33 and the tolerance scales
// with them; the scales stay normal numbers, which every target's products keep), scales just
// above it (2^-100), and a NaN key (its rows NaN: the tile's P' is not finite, fp32 products).
TEST(DecodeBf16, QuantizedValueCorners) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
  using K = Dequant::Kind;
  for (int variant = 0; variant < 4; ++variant) {
    CaseSpec s;
    s.qe = Elem::kBF16;
    s.oe = Elem::kF32;
    s.h_q = 16;
    s.h_kv = 4;
    s.d_qk = 64;
    s.d_v = variant == 1 ? 48 : 64;
    s.block = 32;
    s.batch = 2;
    s.q_len = {1, 1};
    s.kv_len = {300, 45};
    s.seed = 80 + variant;
    s.amp = 4.f;
    s.scale = 0.5;
    const Elem ve = variant == 1 ? Elem::kI4 : Elem::kI8;
    std::vector<std::vector<uint8_t>> keep;
    const auto edit = [&](Case& c) {
      std::mt19937 rng(s.seed);
      Problem& p = c.problem();
      Quantize(p, p.v, s.d_v, ve, K::kPerToken, true, 1.f, keep, rng);
      // The value scales (bf16), before their offsets (f32) in keep.
      uint16_t* vs = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.v.dequant.scale));
      const int64_t n = static_cast<int64_t>(keep[keep.size() - 2].size()) / 2;
      const float factor = variant == 1 ? 1e-33f : variant == 2 ? 0x1p-100f : 1.f;
      c.set_max_abs_v(factor);  // the dequantized values' magnitude (the tolerance's scale)
      for (int64_t i = 0; i < n; ++i) {
        float v = cvt::BF16ToF32(vs[i]) * factor;
        if (variant == 0 && i % 3 == 1) v = -v;
        vs[i] = cvt::F32ToBF16(v);
      }
      if (variant == 3) {  // a NaN in key 7 of batch 0, KV head 1
        uint16_t* kd = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.k.cache.data));
        kd[p.k.cache.Offset(p.block_table[0], 1, 7, 5)] = 0x7FC0;
      }
    };
    Case c(s);
    edit(c);
    if (bf16) EXPECT_GT(Bf16DecodeItems(c.problem()), 0) << "variant " << variant;
    RunCase(s, edit, false);
  }
}

// Runs case c's problem on the engine under every target this CPU runs at 1 and 2 threads,
// calling check(label) after each run.
template <class Check>
void ForEachTargetRun(Case& c, Check check) {
  for (const std::string& target : Targets())
    for (int threads : {1, 2}) {
      SetSimdCap(target);
      SetNumThreads(threads);
      c.ResetOutputs();
      RunEngine(c.problem());
      check(target + " x" + std::to_string(threads));
    }
}

// Case c's fp32 outputs each within tol of want (the first few misses reported, *bad counting).
void CheckOutputs(const Case& c, const std::vector<float>& want, double tol,
                  const std::string& label, int* bad) {
  const float* got = reinterpret_cast<const float*>(c.out());
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol) && (*bad)++ < 3)
      ADD_FAILURE() << label << " out[" << i << "] = " << got[i] << ", want " << want[i];
}

// Integer keys and values that every form computes exactly: per-tensor scales of 2^-6 (int8) and
// 2^-3 (int4), so each dequantized element is exact in bf16 and fp32, and queries of +-1 and 0,
// so the reference's scores are exact up to their fp32 rounding. The comparison is then tight
// (outputs to a few bf16 roundings of the probabilities, lse to a few fp32 roundings), tighter
// than the worst-case rounding bounds RunCase allows quantized caches: an integer path whose key
// bias were off by one unit (x + 129 for x + 128), or whose int4 values lost a bit, misses it.
// Keys int8 / int4 under bf16, int8 and int4 values; 2 rows per KV head (bf16 products on staged
// keys) and 4 (VPDPBUSD / VPDPWSSD where the CPU has them; VPMADDWD on avx2), paged and
// contiguous, head size 64 (int8 keys) and 48 (int4 keys: a last 16 channels), value head size
// 64 and 48, a decode and 6 query rows (the tile loop's dequantizing packs), every target, 1 and
// 2 threads.
TEST(DecodeBf16, IntegerKvExact) {
  for (const Elem ke : {Elem::kI8, Elem::kI4})
    for (const Elem ve : {Elem::kBF16, Elem::kI8, Elem::kI4})
      for (const int64_t group : {2, 4})
        for (const int64_t block : {0, 32})
          for (const int64_t q_len : {1, 6}) {
            CaseSpec s;
            s.qe = Elem::kBF16;
            s.oe = Elem::kF32;
            s.h_q = 4 * group;
            s.h_kv = 4;
            s.d_qk = ke == Elem::kI4 ? 48 : 64;  // int4: a whole 32-channel block and a half one
            s.d_v = ve == Elem::kI4 ? 48 : 64;
            s.block = block;
            s.batch = 1;
            s.q_len = {q_len};
            s.kv_len = {300};
            s.scale = 4.0;
            s.seed = static_cast<uint32_t>(120 + group + block + q_len + (ke == Elem::kI4 ? 7 : 0) +
                                           (ve == Elem::kI8 ? 11 : ve == Elem::kI4 ? 13 : 0));
            std::vector<std::vector<uint8_t>> keep;
            const auto pow2_scale = [](KvOperand& kv, Elem e) {
              uint16_t* sc = const_cast<uint16_t*>(static_cast<const uint16_t*>(kv.dequant.scale));
              sc[0] = cvt::F32ToBF16(e == Elem::kI8 ? 0x1p-6f : 0x1p-3f);
            };
            const auto edit = [&](Case& c) {
              std::mt19937 rng(s.seed);
              Problem& p = c.problem();
              Quantize(p, p.k, s.d_qk, ke, Dequant::Kind::kPerTensor, false, 1.f, keep, rng);
              pow2_scale(p.k, ke);
              if (ve != Elem::kBF16) {
                Quantize(p, p.v, s.d_v, ve, Dequant::Kind::kPerTensor, false, 1.f, keep, rng);
                pow2_scale(p.v, ve);
                c.set_max_abs_v(ve == Elem::kI8 ? 2.f : 1.f);  // 128 x 2^-6, 8 x 2^-3
              }
              for (int64_t h = 0; h < p.h_q; ++h)
                for (int64_t i = 0; i < q_len; ++i)
                  for (int64_t d = 0; d < p.d_qk; ++d) {
                    const uint32_t r = rng() % 5;
                    cvt::Store(const_cast<void*>(p.q.Base(0)), p.q.elem,
                               p.q.Offset(0, h, p.q_begin[0] + i, d),
                               r == 0 ? 0.f : r % 2 == 0 ? 1.f : -1.f);
                  }
            };
            Case c(s);
            edit(c);
            SettingsGuard guard;
            Problem& p = c.problem();
            c.ResetOutputs();
            RunReference(p);
            const float* out0 = reinterpret_cast<const float*>(c.out());
            const std::vector<float> want(out0, out0 + c.out_bytes() / 4);
            const std::vector<float> want_lse = c.lse();
            const double vmax = c.max_abs_v(), u_bf = std::ldexp(1.0, -8);
            ForEachTargetRun(c, [&](const std::string& label) {
              int bad = 0;
              CheckOutputs(c, want, 4 * u_bf * vmax, label, &bad);
              for (size_t i = 0; i < want_lse.size(); ++i)
                if (c.lse()[i] != want_lse[i] &&  // (padding rows: +inf in both)
                    !(std::fabs(c.lse()[i] - want_lse[i]) <= 1e-5 * (1 + std::fabs(want_lse[i]))) &&
                    bad++ < 6)
                  ADD_FAILURE() << label << " lse[" << i << "] = " << c.lse()[i] << ", want "
                                << want_lse[i];
            });
          }
}

// Integer scores at the edge of int32: int8 keys whose every channel is 127 or -128 against
// query rows of one magnitude (+1 or -1 in every channel), so that |q . x| in the VPDPBUSD form
// (the query to 15 bits, 32639 per channel) is D x 32639 x 127 or x 128: just below 2^31 for D
// 512, where the two query pieces' sums join per lane before the reduction and their partial
// sums wrap; D 1024 keeps them apart. Other keys random; 4 rows per KV head; scores exact, so the
// comparison is tight (as in IntegerKvExact); every target, 1 and 2 threads.
TEST(DecodeBf16, IntegerScoresAtTheirBound) {
  const bool bf16 = TargetOps("avx512bf16") != nullptr;
  for (const int64_t d : {512, 1024}) {
    CaseSpec s;
    s.qe = Elem::kBF16;
    s.oe = Elem::kF32;
    s.h_q = 4;
    s.h_kv = 1;
    s.d_qk = d;
    s.d_v = 64;
    s.block = 32;
    s.batch = 1;
    s.q_len = {1};
    s.kv_len = {200};
    s.scale = 1.0 / static_cast<double>(d);
    s.seed = static_cast<uint32_t>(140 + d / 512);
    std::vector<std::vector<uint8_t>> keep;
    const auto edit = [&](Case& c) {
      std::mt19937 rng(s.seed);
      Problem& p = c.problem();
      Quantize(p, p.k, s.d_qk, Elem::kI8, Dequant::Kind::kPerTensor, false, 1.f, keep, rng);
      uint16_t* sc = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.k.dequant.scale));
      sc[0] = cvt::F32ToBF16(0x1p-6f);
      int8_t* k = const_cast<int8_t*>(static_cast<const int8_t*>(p.k.cache.data));
      for (int64_t j = 0; j < s.kv_len[0]; ++j) {
        if (j % 3 == 2) continue;  // random
        for (int64_t x = 0; x < d; ++x)
          k[p.k.cache.Offset(p.block_table[j / p.block_size], 0, j % p.block_size, x)] =
              static_cast<int8_t>(j % 3 == 0 ? 127 : -128);
      }
      for (int64_t h = 0; h < p.h_q; ++h)
        for (int64_t x = 0; x < d; ++x)
          cvt::Store(const_cast<void*>(p.q.Base(0)), p.q.elem, p.q.Offset(0, h, p.q_begin[0], x),
                     h % 2 == 0 ? 1.f : -1.f);
    };
    Case c(s);
    edit(c);
    Problem& p = c.problem();
    if (bf16) EXPECT_GT(Bf16DecodeItems(p), 0) << "d " << d;
    SettingsGuard guard;
    c.ResetOutputs();
    RunReference(p);
    const float* out0 = reinterpret_cast<const float*>(c.out());
    const std::vector<float> want(out0, out0 + c.out_bytes() / 4);
    const double vmax = c.max_abs_v(), u_bf = std::ldexp(1.0, -8);
    ForEachTargetRun(c, [&](const std::string& label) {
      int bad = 0;
      CheckOutputs(c, want, 4 * u_bf * vmax, "d " + std::to_string(d) + " " + label, &bad);
    });
  }
}

// The softmax step reduces a few rows' maxima and sums at once (ReduceRows4 on AVX-512): rows of
// one KV head whose scores lie ~100 apart (query head h scaled by 2^(4 h)) overflow exp(s - m)
// if a row ever took another row's maximum, and get wrong sums if it took another's sum.
TEST(DecodeBf16, RowsWithFarApartScores) {
  for (int64_t rows : {2, 4, 8}) {
    CaseSpec s;
    s.qe = Elem::kBF16;
    s.oe = Elem::kF32;
    s.h_q = 4 * rows;
    s.h_kv = 4;
    s.d_qk = s.d_v = 64;
    s.block = 64;
    s.batch = 1;
    s.q_len = {1};
    s.kv_len = {700};
    s.seed = 90 + static_cast<int>(rows);
    s.scale = 1.0;
    s.lse = true;
    const auto edit = [](Case& c) {
      Problem& p = c.problem();
      uint16_t* q = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.q.data));
      for (int64_t h = 0; h < p.h_q; ++h)
        for (int64_t d = 0; d < p.d_qk; ++d) {
          uint16_t& x = q[p.q.Offset(0, h, 0, d)];
          x = cvt::F32ToBF16(cvt::BF16ToF32(x) * std::ldexp(1.f, static_cast<int>(4 * (h % 4))));
        }
    };
    RunCase(s, edit, false);
  }
}

}  // namespace
}  // namespace openfia::internal::testing
