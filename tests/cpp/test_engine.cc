// Engine vs the fp64 oracle on hand-built Problems, under every SIMD target this CPU runs and
// 1, 2, 3 threads (which must agree bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_case.h"
#include "engine_check.h"
#include "openfia/runtime.h"
#include "reference/reference.h"
#include "kernel_util.h"

namespace openfia::internal::testing {
namespace {

constexpr int64_t kNo = Problem::kNoBand;

TEST(Engine, Bf16Basic) {
  CaseSpec s;
  s.batch = 2;
  s.q_len = {3, 17};
  s.kv_len = {17, 61};
  RunCase(s);
}

// K = V (one tensor for both, as SparseAttnSharedkv always has): the packed path reads and
// converts each row once for both packings (PackKVShared). Dense, paged, a shared prefix, a
// causal boundary and key counts off the tile and vector widths, in every dtype.
TEST(Engine, SameTensorForKeysAndValues) {
  for (Elem e : {Elem::kBF16, Elem::kF16, Elem::kF32}) {
    for (int64_t block : {0, 16}) {
      CaseSpec s;
      s.qe = s.oe = e;
      s.batch = 2;
      s.h_q = 4;
      s.h_kv = 2;
      s.d_qk = s.d_v = 48;
      s.q_len = {33, 70};
      s.kv_len = {77, 130};
      s.block = block;
      s.causal_br = true;
      s.prefix = block == 0 ? 0 : 21;
      RunCase(s, [](Case& c) { c.problem().v = c.problem().k; }, /*oracle=*/false);
    }
  }
}

// K = V items with 16 or more rows of one KV head score each tile from the packed values
// (attend_base-inl.h ScoresFromRows: the query rows transposed, no transposed K). Its scores are
// the same FMAs in the same order as the transposed-K kernel's, so the output must equal, bit for
// bit, that of the same call with V a copy of K in other buffers (which packs K transposed).
// Row counts off the vector width, key counts off the tile and the register block, paged and
// dense, a shared prefix, decode and a causal prefill, in every dtype.
TEST(Engine, ScoresFromPackedValuesMatchTransposedKeys) {
  int cases = 0;
  for (Elem e : {Elem::kBF16, Elem::kF16, Elem::kF32}) {
    for (int64_t group : {16, 20, 40, 64}) {
      CaseSpec s;
      s.qe = s.oe = e;
      s.batch = 2;
      s.h_kv = 2;
      s.h_q = 2 * group;
      s.d_qk = s.d_v = group == 64 ? 128 : 64;
      // (16 rows of one query: the streaming decode path, which packs nothing; 3 queries and a
      // causal band make 48-row items that pack.)
      s.q_len = group == 16   ? std::vector<int64_t>{3, 1}
                : group == 20 ? std::vector<int64_t>{1, 2}
                              : std::vector<int64_t>{1};
      s.kv_len = {61, 203};
      s.block = group == 40 ? 0 : 16;
      s.prefix = group == 16 ? 19 : 0;
      s.causal_br = group == 16 || group == 20;
      SettingsGuard guard;
      Case shared(s), copied(s);
      shared.ValuesFromKeys(true);
      copied.ValuesFromKeys(false);
      ASSERT_NE(shared.problem().v.cache.data, copied.problem().v.cache.data);
      for (const std::string& target : Targets()) {
        SetSimdCap(target);
        for (int threads : {1, 2}) {
          SetNumThreads(threads);
          shared.ResetOutputs();
          copied.ResetOutputs();
          RunEngine(shared.problem());
          RunEngine(copied.problem());
          ASSERT_EQ(shared.out_bytes(), copied.out_bytes());
          EXPECT_EQ(0, std::memcmp(shared.out(), copied.out(), shared.out_bytes()))
              << target << " x" << threads << " group " << group;
          EXPECT_EQ(0, std::memcmp(shared.lse().data(), copied.lse().data(),
                                   shared.lse().size() * 4))
              << target << " x" << threads << " group " << group;
          ++cases;
        }
      }
      // And against the fp64 reference (tolerances of engine_check.h).
      RunCase(s, [](Case& c) { c.ValuesFromKeys(true); }, /*oracle=*/false);
    }
  }
  EXPECT_GT(cases, 0);
}

TEST(Engine, DtypesF16F32) {
  for (Elem e : {Elem::kF16, Elem::kF32}) {
    CaseSpec s;
    s.qe = s.oe = e;
    s.batch = 2;
    s.q_len = {5, 1};
    s.kv_len = {113, 70};
    s.d_qk = 32;
    s.d_v = 48;
    RunCase(s);
  }
}

TEST(Engine, OddHeadDimsAndGqa) {
  CaseSpec s;
  s.h_q = 8;
  s.h_kv = 1;
  s.d_qk = 61;
  s.d_v = 17;
  s.q_len = {13};
  s.kv_len = {113};
  s.oe = Elem::kF32;
  RunCase(s);
}

TEST(Engine, LargeGroupSplitsHeads) {
  CaseSpec s;
  s.h_q = 130;  // more query heads per KV head than rows in a work item
  s.h_kv = 1;
  s.d_qk = 16;
  s.d_v = 16;
  s.q_len = {2};
  s.kv_len = {65};
  RunCase(s);
}

TEST(Engine, PagedOddBlocks) {
  for (int64_t bs : {5, 16, 128}) {
    CaseSpec s;
    s.batch = 3;
    s.block = bs;
    s.q_len = {1, 7, 3};
    s.kv_len = {61, 130, 1};
    s.causal_br = true;
    RunCase(s);
  }
}

TEST(Engine, PagedNz) {
  CaseSpec s;
  s.batch = 2;
  s.block = 16;
  s.nz = true;
  s.d_qk = 32;
  s.d_v = 32;
  s.q_len = {1, 4};
  s.kv_len = {100, 33};
  RunCase(s);
}

TEST(Engine, PrefixThenCache) {
  CaseSpec s;
  s.batch = 2;
  s.prefix = 7;
  s.q_len = {4, 9};
  s.kv_len = {0, 70};
  s.causal_br = true;
  RunCase(s);
}

TEST(Engine, TensorList) {
  CaseSpec s;
  s.batch = 3;
  s.tensor_list = true;
  s.q_len = {2, 1, 3};
  s.kv_len = {9, 77, 30};
  RunCase(s);
}

TEST(Engine, BandsWithEmptyRows) {
  // next < 0: the first rows see nothing (output 0, lse +inf); later keys are seen by no row.
  CaseSpec s;
  s.batch = 2;
  s.q_len = {40, 17};
  s.kv_len = {90, 17};
  s.pre = 9;
  s.next = -5;
  RunCase(s);
  s.pre = kNo;
  s.next = 0;
  s.q_len = {70};
  s.kv_len = {70};
  s.batch = 1;
  RunCase(s);
}

TEST(Engine, BitMaskNaNNeverLeaks) {
  CaseSpec s;
  s.batch = 2;
  s.q_len = {17, 3};
  s.kv_len = {113, 40};
  s.mask = true;
  s.pre = 50;
  s.next = 10;
  RunCase(s);
}

TEST(Engine, PseSinksLse) {
  for (Elem pe : {Elem::kF32, Elem::kBF16}) {
    CaseSpec s;
    s.batch = 2;
    s.h_q = 4;
    s.h_kv = 4;
    s.q_len = {6, 2};
    s.kv_len = {70, 5};
    s.pse = pe;
    s.sinks = true;
    s.causal_br = true;
    RunCase(s);
  }
}

TEST(Engine, PostQuantInt8) {
  for (bool per_channel : {false, true}) {
    CaseSpec s;
    s.oe = Elem::kI8;
    s.per_channel_quant = per_channel;
    s.batch = 2;
    s.q_len = {5, 3};
    s.kv_len = {66, 9};
    s.pre = 3;
    s.next = -2;  // rows 0 and 1 see nothing: quantized zero
    RunCase(s);
  }
}

TEST(Engine, RopeConcat) {
  CaseSpec s;
  s.h_q = 16;
  s.h_kv = 1;
  s.d_qk = 32;
  s.d_rope = 16;
  s.d_v = 32;
  s.block = 16;
  s.q_len = {2};
  s.kv_len = {80};
  RunCase(s);
}

TEST(Engine, EmptyBatches) {
  CaseSpec s;
  s.batch = 3;
  s.q_len = {0, 3, 2};
  s.kv_len = {5, 0, 7};
  s.sinks = true;
  RunCase(s);
}

TEST(Engine, SplitKvDecode) {
  for (Elem e : {Elem::kBF16, Elem::kF16}) {
    CaseSpec s;
    s.qe = s.oe = e;
    s.h_q = 8;
    s.h_kv = 2;
    s.d_qk = 64;
    s.d_v = 64;
    s.block = 64;
    s.batch = 2;
    s.q_len = {1};
    s.kv_len = {3001, 1500};
    s.sinks = e == Elem::kF16;
    RunCase(s);
  }
}

// A decode item of 32+ rows (MLA: 128 heads on one KV head; 8 KV heads x GQA 4) is cut in two
// from 16 tiles on, one of fewer rows from 32 tiles on (16 per piece), so a 1024-key MLA or Llama
// decode gives two cores work. Results: against the reference, bitwise across 1-3 threads.
TEST(Engine, WideDecodeItemsSplitAtShortLengths) {
  for (int64_t hq : {128, 32, 16}) {
    CaseSpec s;
    s.h_q = hq;
    s.h_kv = 1;
    s.d_qk = s.d_v = 32;
    s.q_len = {1};
    s.kv_len = {1024};
    Case c(s);
    int64_t pieces = 0;
    for (const WorkItem& w : MakePlan(c.problem()).items) pieces += w.n_hk > 0 ? 1 : 0;
    EXPECT_EQ(pieces, hq >= 32 ? 2 : 1) << "h_q " << hq;
    RunCase(s);
  }
}

// Decode shapes (few rows per work item) take the streaming no-pack path: every KV dtype,
// contiguous and paged, a shared prefix, pse, sinks and a row count just above/below the limit.
TEST(Engine, StreamingDecode) {
  for (Elem e : {Elem::kBF16, Elem::kF16, Elem::kF32}) {
    for (int64_t block : {0, 32}) {
      CaseSpec s;
      s.qe = s.oe = e;
      s.h_q = 8;
      s.h_kv = 2;
      s.d_qk = 64;
      s.d_v = 32;
      s.block = block;
      s.batch = 2;
      s.prefix = block ? 0 : 19;
      s.q_len = {1, 4};
      s.kv_len = {300, 129};
      s.pse = block ? Elem::kU8 : Elem::kF32;
      s.sinks = block != 0;
      RunCase(s);
    }
  }
  CaseSpec s;  // 17 rows per item: just over the streaming limit, same answers
  s.h_q = 17;
  s.h_kv = 1;
  s.d_qk = 32;
  s.d_v = 32;
  s.q_len = {1};
  s.kv_len = {200};
  RunCase(s);
}

// Decode items span several KV heads (plan.h, n_hk): each tile reads whole token rows of the
// [block, block_size, H_kv * D] cache. Odd block sizes (NaN in the unused tail of the last page
// and in the spare pages), splits (long keys), a sliding band, sinks, pse, a few query rows, and
// more KV heads than fit one item (chunks of kMaxRows rows); 1-3 threads bitwise (RunCase).
TEST(Engine, MultiHeadDecode) {
  for (int64_t block : {7, 33, 128}) {
    CaseSpec s;
    s.h_q = 16;
    s.h_kv = 8;
    s.d_qk = 32;
    s.d_v = 48;
    s.block = block;
    s.batch = 3;
    s.q_len = {1, 2, 4};
    s.kv_len = {1500 + block, 77, 2100};
    s.sinks = block == 33;
    s.pse = block == 7 ? Elem::kBF16 : Elem::kU8;
    if (block == 128) s.pre = 700;  // sliding window: the leading splits see nothing
    RunCase(s);
  }
  for (int64_t block : {0, 16}) {
    CaseSpec s;
    s.qe = s.oe = Elem::kF16;
    s.h_q = 80;  // 40 KV heads x 2: 32 heads per item, then 8
    s.h_kv = 40;
    s.d_qk = 16;
    s.d_v = 16;
    s.block = block;
    s.batch = 2;
    s.q_len = {1};
    s.kv_len = {1100, 3};
    RunCase(s);
  }
}

// Antiquant: int8 / int4 K and V dequantized in the engine's packing, every granularity,
// contiguous and paged, with a float shared prefix in front, against the fp64 reference.
TEST(Engine, Antiquant) {
  using K = Dequant::Kind;
  int variant = 0;
  for (Elem e : {Elem::kI8, Elem::kI4}) {
    for (K kind : {K::kPerTensor, K::kPerChannel, K::kPerToken, K::kPerTokenHead}) {
      ++variant;
      CaseSpec s;
      s.qe = s.oe = variant % 3 == 0 ? Elem::kF16 : Elem::kBF16;
      s.h_q = 8;
      s.h_kv = 2;
      s.d_qk = 32;
      s.d_v = 16;
      s.block = variant % 2 ? 16 : 0;
      s.prefix = variant == 4 ? 5 : 0;
      s.batch = 2;
      s.q_len = {1, 5};
      s.kv_len = {150, 70};
      s.seed = variant;
      std::vector<std::vector<uint8_t>> keep;
      RunCase(
          s,
          [&](Case& c) {
            std::mt19937 rng(variant);
            Problem& p = c.problem();
            Quantize(p, p.k, s.d_qk, e, kind, variant % 2 == 0, 1.f, keep, rng);
            Quantize(p, p.v, s.d_v, e, kind, true, 1.f, keep, rng);
          },
          false);
    }
  }
}

// Plan items of `p` a decode kernel of this CPU runs (0 without AVX2).
bool AnyDecodeRunsItem(const Problem& p, const WorkItem& w) {
  return KernelTakes("decode_avx512bf16", p, w) || KernelTakes("decode_avx512", p, w) ||
         KernelTakes("decode_avx2", p, w);
}
int64_t DecodeItems(const Problem& p) { return CountItems(p, AnyDecodeRunsItem); }

// The decode kernels (generic/decode-inl.h) on multi-head decode items: bf16 K/V read straight
// from the cache rows (contiguous, paged with 16-aligned blocks) or gathered (odd blocks, partial
// groups, a bf16 shared prefix), 1-16 rows per KV head, splits, sinks; items they do not take
// (a band cutting into the keys) run the generic loop in the same call. Proof they ran: the plan
// has items they accept (when the CPU has AVX2); RunCase checks every target and every kernel
// forced on its own against the fp64 reference and 1-3 threads bitwise.
TEST(Engine, DecodeKernelShapes) {
  const bool amx = TargetOps("avx2") != nullptr;
  int variant = 0;
  for (int64_t block : {0, 7, 48, 128}) {
    CaseSpec s;
    s.h_q = 16;
    s.h_kv = 8;
    s.d_qk = 64;
    s.d_v = 32;
    s.block = block;
    s.batch = 3;
    s.q_len = {1, 2, 4};
    s.kv_len = {1500 + block, 77, 2100};
    s.prefix = block == 0 ? 21 : 0;
    s.sinks = block == 7;
    s.seed = ++variant;
    if (block == 128) s.pre = 700;  // the leading splits see nothing: generic loop
    Case c(s);
    if (amx) EXPECT_GT(DecodeItems(c.problem()), 0) << "block " << block;
    RunCase(s);
  }
  // Odd rows per KV head (G = 3) with large scores (running-max rescales), d_qk 128 / d_v 96,
  // and the 16-row maximum (G = 16).
  for (int64_t g : {3, 16}) {
    CaseSpec s;
    s.h_kv = g == 3 ? 16 : 2;
    s.h_q = g * s.h_kv;
    s.d_qk = g == 3 ? 128 : 32;
    s.d_v = g == 3 ? 96 : 32;
    s.block = g == 3 ? 64 : 0;
    s.batch = 2;
    s.q_len = {1, 1};
    s.kv_len = {700, 1000};
    s.amp = g == 3 ? 4.f : 1.f;
    s.scale = g == 3 ? 0.125 : 0.25;
    s.seed = ++variant;
    Case c(s);
    if (amx) EXPECT_GT(DecodeItems(c.problem()), 0) << "G " << g;
    RunCase(s);
  }
  // Antiquant: int8 per-token (K, V), int8 per-token-head K + per-channel V, int4 per-channel K
  // + per-token V (the D3 shape), int4 per-channel K and V (d_v 96: a 3-chunk P V block), paged
  // and contiguous.
  using K = Dequant::Kind;
  struct Q {
    Elem e;
    K kk, vk;
    int64_t block, d_v;
  };
  for (const Q& q : {Q{Elem::kI8, K::kPerToken, K::kPerToken, 32, 64},
                     Q{Elem::kI8, K::kPerTokenHead, K::kPerChannel, 0, 64},
                     Q{Elem::kI4, K::kPerChannel, K::kPerToken, 0, 64},
                     Q{Elem::kI4, K::kPerTensor, K::kPerTokenHead, 16, 64},
                     Q{Elem::kI4, K::kPerChannel, K::kPerChannel, 0, 96}}) {
    CaseSpec s;
    s.h_q = 8;
    s.h_kv = 4;
    s.d_qk = 64;
    s.d_v = q.d_v;
    s.block = q.block;
    s.batch = 2;
    s.q_len = {1, 3};
    s.kv_len = {1300, 45};
    s.seed = ++variant;
    RunQuantizedDecode(s, q.e, q.kk, q.vk, variant % 2 == 0, true, DecodeItems, amx);
  }
}

int64_t Avx2DecodeItems(const Problem& p) { return CountItems(p, Avx2DecodeRunsItem); }

// The AVX2 decode kernel (decode_avx2-inl.h): bf16 K/V split into even / odd channels in
// registers, key-major scores and softmax, token-order reads across the item's KV heads. 1, 2, 4
// and 8 rows per KV head (GQA groups, and G = 2 with 2 or 4 query rows), multi-head items over
// 3-D paged caches with odd blocks (NaN in unused page tails), contiguous caches with a bf16
// shared prefix, splits, partial first / last tiles, sinks, lse, d_qk 128 / d_v 64 and the
// 16-channel minimum, G = 3; items it does not take (a band cutting into the keys, pse) run the
// generic loop in the same call. Proof it ran: the plan has items it accepts (when the CPU has
// AVX2); RunCase checks every target against the fp64 reference and 1-3 threads bitwise.
TEST(Engine, Avx2Decode) {
  const bool avx2 = TargetOps("avx2") != nullptr;
  struct G {
    int64_t h_q, h_kv, q_len, d_qk, d_v, block, prefix;
    bool sinks, expect;
  };
  int seed = 0;
  for (const G& g : {G{32, 8, 1, 128, 64, 128, 0, false, true},   // Llama GQA 4, paged 3-D
                     G{16, 8, 1, 32, 48, 33, 0, true, true},      // G = 2, odd blocks, sinks
                     G{8, 8, 1, 64, 64, 0, 21, false, true},      // MHA, bf16 prefix
                     G{16, 2, 1, 16, 16, 7, 0, false, true},      // G = 8, d 16
                     G{8, 4, 2, 32, 32, 16, 0, true, true},       // G = 2 x 2 query rows
                     G{8, 4, 4, 32, 32, 0, 5, false, true},       // G = 2 x 4 query rows
                     G{12, 4, 1, 32, 32, 0, 0, false, true}}) {   // G = 3
    CaseSpec s;
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
    if (avx2) EXPECT_EQ(Avx2DecodeItems(c.problem()) > 0, g.expect) << "case " << seed;
    RunCase(s);
  }
  {
    CaseSpec s;  // a sliding band: the leading splits see nothing, the cut tile is generic
    s.h_q = 32;
    s.h_kv = 8;
    s.d_qk = 64;
    s.d_v = 64;
    s.block = 64;
    s.q_len = {1};
    s.kv_len = {2300};
    s.pre = 900;
    RunCase(s);
  }
  // int8 / int4 K and V dequantized in registers (K) and per chunk (V): every antiquant
  // granularity the kernel takes, with and without offsets, bf16 and float16 queries (the
  // dequantized values round to the query dtype), paged and contiguous, 1, 2 and 4 rows per KV
// head.
  using K = Dequant::Kind;
  struct Q {
    Elem e, qe;
    K kk, vk;
    int64_t block, h_q;
  };
  for (const Q& q : {Q{Elem::kI8, Elem::kBF16, K::kPerToken, K::kPerToken, 32, 16},
                     Q{Elem::kI4, Elem::kBF16, K::kPerChannel, K::kPerToken, 0, 16},
                     Q{Elem::kI8, Elem::kF16, K::kPerTokenHead, K::kPerChannel, 0, 8},
                     Q{Elem::kI4, Elem::kF16, K::kPerTensor, K::kPerTokenHead, 16, 16},
                     Q{Elem::kI8, Elem::kBF16, K::kPerChannel, K::kPerTensor, 48, 8},
                     Q{Elem::kI8, Elem::kBF16, K::kPerToken, K::kPerChannel, 16, 4},
                     Q{Elem::kI4, Elem::kF16, K::kPerChannel, K::kPerToken, 0, 4}}) {
    CaseSpec s;
    s.qe = s.oe = q.qe;
    s.h_q = q.h_q;
    s.h_kv = 4;
    s.d_qk = 64;
    s.d_v = 48;
    s.block = q.block;
    s.batch = 2;
    s.q_len = {1, 1};
    s.kv_len = {1300, 45};
    s.seed = ++seed;
    RunQuantizedDecode(s, q.e, q.kk, q.vk, seed % 2 == 0, seed % 3 != 0, Avx2DecodeItems, avx2);
  }
}

// The decode kernels apply finite antiquant parameters to their sums (docs/kernels.md); a tile
// whose parameters are not all finite runs the reference's element order. Non-finite parameters
// must give the reference's NaNs and infinities at the same positions, on every target (where the
// CPU has avx512bf16 the proof-it-ran count is decode_avx512bf16's). Variants:
// 0: one K token's scale NaN (its batch's scores, then its rows: NaN), one V token's scale NaN;
// 1: per-channel: one channel's K offset NaN, one channel's V scale inf;
// 2: one V token's scale inf (infinities, or NaN where x + offset is 0). Not run where the AMX
//    table exists: its decode kernel folds a per-token V scale into P (p s x + p s o), which
//    gives NaN from inf - inf where the reference's s (x + o) is an infinity.
TEST(Engine, Avx2DecodeNonFiniteAntiquant) {
  const bool avx2 = TargetOps("avx2") != nullptr;
  using K = Dequant::Kind;
  for (int variant : {0, 1, 2}) {
    if (variant == 2 && TargetOps("amx") != nullptr) continue;
    CaseSpec s;
    s.h_q = 16;
    s.h_kv = 4;
    s.d_qk = 64;
    s.d_v = 32;
    s.batch = 3;
    s.q_len = {1, 1, 1};
    s.kv_len = {300, 45, 200};
    s.seed = 41 + variant;
    const bool per_channel = variant == 1;
    const Elem e = per_channel ? Elem::kI4 : Elem::kI8;
    const K kind = per_channel ? K::kPerChannel : K::kPerToken;
    const auto poison = [&](Problem& p) {
      // Scales are bf16, offsets f32 (Quantize).
      uint16_t* ks = static_cast<uint16_t*>(const_cast<void*>(p.k.dequant.scale));
      uint16_t* vs = static_cast<uint16_t*>(const_cast<void*>(p.v.dequant.scale));
      float* ko = static_cast<float*>(const_cast<void*>(p.k.dequant.offset));
      const int64_t ns = p.k.dequant.sb;  // storage tokens per batch (contiguous cache)
      if (variant == 0) {
        ks[0 * ns + 7] = 0x7FC0;  // batch 0, token 7: NaN
        vs[2 * ns + 9] = 0x7FC0;  // batch 2, token 9: NaN
      } else if (variant == 1) {
        ko[1 * s.d_qk + 5] = std::numeric_limits<float>::quiet_NaN();  // KV head 1, channel 5
        vs[2 * s.d_v + 3] = 0x7F80;                                  // KV head 2, channel 3: inf
      } else {
        vs[2 * ns + 9] = 0x7F80;  // batch 2, token 9: inf
      }
    };
    const auto count = [](const Problem& p) -> int64_t {
      return TargetOps("avx512bf16") ? CountItems(p, Avx512Bf16DecodeRunsItem)
                                      : Avx2DecodeItems(p);
    };
    RunQuantizedDecode(s, e, kind, kind, true, true, count, avx2, poison);
  }
}

// Integer scores (VPMADDWD on avx2, VPDPBUSD on avx512bf16) hold each query row as integers of
// the row's largest magnitude: rows the integers cannot carry keep the fp32 products and must
// give the reference's NaN / Inf positions and values. int8 and int4 keys, bf16 and f16 queries,
// 4 rows per KV head: a NaN query element (its rows NaN), an infinite one (inf - inf: NaN rows,
// or a key at 0 there: NaN from 0 x inf), a zero row (uniform weights), a row of the smallest
// normal bf16 / subnormal f16 values (its integer scale would be subnormal in fp32), and a row
// whose one large channel dwarfs the others (their integers are coarse: the tolerance is the
// reference's). int4 keys of 80 channels: a last chunk of 16.
TEST(Engine, DecodeIntegerQueryCorners) {
  const bool avx2 = TargetOps("avx2") != nullptr;
  using K = Dequant::Kind;
  int seed = 70;
  for (Elem e : {Elem::kI8, Elem::kI4}) {
    for (Elem qe : {Elem::kBF16, Elem::kF16}) {
      CaseSpec s;
      s.qe = s.oe = qe;
      s.h_q = 16;
      s.h_kv = 4;
      s.d_qk = e == Elem::kI4 ? 80 : 64;
      s.d_v = 48;
      s.batch = 2;
      s.q_len = {1, 1};
      s.kv_len = {200, 70};
      s.seed = ++seed;
      const auto edit = [&](Problem& p) {
        void* q = const_cast<void*>(p.q.data);
        const auto at = [&](int64_t b, int64_t h, int64_t d) {
          return p.q.Offset(b, h, p.q_begin[b], d);
        };
        cvt::Store(q, qe, at(0, 1, 3), std::numeric_limits<float>::quiet_NaN());
        cvt::Store(q, qe, at(1, 6, 7), std::numeric_limits<float>::infinity());
        const float tiny = qe == Elem::kBF16 ? std::numeric_limits<float>::min() : 0x1p-24f;
        for (int64_t d = 0; d < s.d_qk; ++d) {
          cvt::Store(q, qe, at(0, 8, d), 0.f);
          cvt::Store(q, qe, at(1, 13, d), d % 2 ? tiny : -tiny);
        }
        cvt::Store(q, qe, at(0, 14, 11), 40.f);
      };
      SCOPED_TRACE(std::string(e == Elem::kI8 ? "int8" : "int4") +
                   (qe == Elem::kBF16 ? " bf16" : " f16"));
      RunQuantizedDecode(s, e, K::kPerToken, K::kPerToken, true, true, DecodeItems, avx2, edit);
    }
  }
}

// Antiquant values of ~1e34 (finite): the decode kernels take int8 / int4 keys exact and apply
// a per-token scale to the score (s (q.x + o sum q)), the reference rounds every dequantized
// element to the query dtype first. An outlier key or channel dominates its rows: the scores
// agree to the reference's rounding (D u_q relative), the outputs (the outlier key's value)
// closely, and every output is finite where the reference's is.
TEST(Engine, DecodeHugeAntiquantValues) {
  using K = Dequant::Kind;
  for (bool per_channel : {true, false}) {
    SettingsGuard guard;
    CaseSpec s;
    s.h_q = 16;
    s.h_kv = 4;
    s.d_qk = 64;
    s.d_v = 32;
    s.batch = 2;
    s.q_len = {1, 1};
    s.kv_len = {150, 70};
    s.seed = per_channel ? 52 : 53;
    s.oe = Elem::kF32;  // the outlier's term dominates its rows: keep the output unrounded
    std::vector<std::vector<uint8_t>> keep;
    Case c(s);
    std::mt19937 rng(s.seed);
    Problem& p = c.problem();
    const Elem e = per_channel ? Elem::kI4 : Elem::kI8;
    const K kind = per_channel ? K::kPerChannel : K::kPerToken;
    Quantize(p, p.k, s.d_qk, e, kind, true, 1.f, keep, rng);
    Quantize(p, p.v, s.d_v, e, kind, true, 1.f, keep, rng);
    uint16_t* ks = static_cast<uint16_t*>(const_cast<void*>(p.k.dequant.scale));
    if (per_channel)
      cvt::Store(ks, Elem::kBF16, 2 * s.d_qk + 9, 2e33f);  // KV head 2, channel 9: |K| ~1.6e34
    else  // batch 0, token 100 (storage tokens per batch: sb): |K| ~1.3e34
      cvt::Store(ks, Elem::kBF16, 0 * p.k.dequant.sb + 100, 1e32f);
    if (TargetOps("avx2") != nullptr) EXPECT_GT(DecodeItems(p), 0);
    c.ResetOutputs();
    RunReference(p);
    const std::vector<uint8_t> ref(c.out(), c.out() + c.out_bytes());
    const std::vector<float> ref_lse = c.lse();
    c.ResetOutputs();
    RunEngine(p);
    const float* out = reinterpret_cast<const float*>(c.out());
    const float* want = reinterpret_cast<const float*>(ref.data());
    const double u_q = std::ldexp(1.0, -8), vmax = c.max_abs_v();
    for (size_t i = 0; i < c.out_bytes() / 4; ++i) {
      ASSERT_EQ(std::isfinite(out[i]), std::isfinite(want[i])) << i;
      EXPECT_LE(std::fabs(out[i] - want[i]), vmax * 4 * u_q) << i;
    }
    for (size_t i = 0; i < ref_lse.size(); ++i) {
      if (!std::isfinite(ref_lse[i])) {
        EXPECT_EQ(c.lse()[i], ref_lse[i]) << i;  // rows without keys: +inf in both
        continue;
      }
      EXPECT_LE(std::fabs(c.lse()[i] - ref_lse[i]), 2 * s.d_qk * u_q * std::fabs(ref_lse[i]) + 1e-3)
          << i;
    }
  }
}

// A value of +inf at a key whose score is ~90 below the row maximum: its probability exp(-90) ~
// 8e-40 is tiny but not zero (in bf16 too), so the output is +inf there, as in the reference. The
// packed path's probability exp (ExpP) drops anything below exp(-86.5); it must not run when a
// tile's V holds a non-finite value (0 x inf would be NaN). Full tiles, no mask: the pse shift
// makes the gap.
TEST(Engine, InfiniteValueMeetsATinyProbability) {
  for (Elem e : {Elem::kBF16, Elem::kF32}) {
    // Not where the AMX table exists for bf16: its tile products (TDPBF16PS) read a subnormal
    // bf16 P as zero, so such a key gives NaN there (docs/kernels.md, known differences).
    if (e == Elem::kBF16 && TargetOps("amx") != nullptr) continue;
    for (int64_t kv : {64, 130}) {
      CaseSpec s;
      s.qe = e;
      s.oe = Elem::kF32;
      s.batch = 1;
      s.h_q = 2;
      s.h_kv = 1;
      s.d_qk = s.d_v = 32;
      s.q_len = {24};
      s.kv_len = {kv};
      s.pse = Elem::kF32;
      RunCase(s, [kv](Case& c) {
        Problem& p = c.problem();
        const int64_t j = kv / 2 + 3;  // a key inside a full tile
        float* pse = const_cast<float*>(static_cast<const float*>(p.pse));
        for (int64_t h = 0; h < p.h_q; ++h)
          for (int64_t i = 0; i < p.q_len[0]; ++i)
            pse[h * p.pse_sh + (p.pse_row0[0] + i) * p.pse_ss + (p.pse_col0[0] + j) * p.pse_sk] =
                -90.f;
        const int64_t o = p.v.cache.Offset(0, 0, j, 3);
        if (p.v.cache.elem == Elem::kF32)
          const_cast<float*>(static_cast<const float*>(p.v.cache.data))[o] =
              std::numeric_limits<float>::infinity();
        else
          const_cast<uint16_t*>(static_cast<const uint16_t*>(p.v.cache.data))[o] = 0x7F80;
      });
    }
  }
}

// Values whose fp32 P V sums pass FLT_MAX while their mean does not: zero queries give every
// key the same score, and three keys (the first, the middle, the last) hold 2e38 (bf16: 1.99e38)
// on one channel, so the fp32 sum of the three is past FLT_MAX and the output, their sum over
// kv_len keys, an ordinary number. The reference sums in double; the kernels rerun such rows with
// their probabilities scaled by 2^-64 (RunRerunningOverflow), and the split-KV merge sums such
// splits in double. A decode (the decode kernels, the tile loop forced), a prefill, and a long
// decode whose plan splits the keys so that the three land in different splits; bf16 not where
// the AMX table exists (its kernels keep the fp32 overflow, docs/kernels.md).
TEST(Engine, ValueSumsPastFltMaxStayFinite) {
  struct G {
    int64_t q_len, kv;
  };
  for (Elem e : {Elem::kF32, Elem::kBF16}) {
    if (e == Elem::kBF16 && TargetOps("amx") != nullptr) continue;
    for (const G g : {G{1, 300}, G{24, 300}, G{1, 4096}}) {
      CaseSpec s;
      s.qe = e;
      s.oe = Elem::kF32;
      s.batch = 1;
      s.h_q = 8;
      s.h_kv = 2;
      s.d_qk = s.d_v = 64;
      s.block = 32;
      s.q_len = {g.q_len};
      s.kv_len = {g.kv};
      s.seed = 70 + g.q_len + g.kv;
      const std::vector<int64_t> big = {10, g.kv / 2, g.kv - 10};
      if (g.kv > 300) {  // the merge's case: the big keys in three different splits
        Case c(s);
        std::vector<int64_t> at;
        for (const WorkItem& w : MakePlan(c.problem()).items)
          for (int64_t j : big)
            if (w.hk == 0 && w.n_split > 1 && w.j0 <= j && j < w.j1) at.push_back(w.split);
        ASSERT_EQ(at.size(), 3u);
        ASSERT_TRUE(at[0] != at[1] && at[1] != at[2] && at[0] != at[2]);
      }
      RunCase(s, [&big](Case& c) {
        Problem& p = c.problem();
        const auto row = [&](const Operand& o, int64_t h, int64_t j, int64_t d) {
          return o.Offset(p.block_table[j / p.block_size], h, j % p.block_size, d);
        };
        const auto set = [](const Operand& o, int64_t at, float x) {
          cvt::Store(const_cast<void*>(o.Base(0)), o.elem, at, x);
        };
        for (int64_t h = 0; h < p.h_q; ++h)
          for (int64_t i = 0; i < p.q_len[0]; ++i)
            for (int64_t d = 0; d < p.d_qk; ++d)
              set(p.q, p.q.Offset(0, h, p.q_begin[0] + i, d), 0.f);
        for (int64_t h = 0; h < p.h_kv; ++h)
          for (int64_t j : big) set(p.v.cache, row(p.v.cache, h, j, 5), 2e38f);
      });
    }
  }
}

// Rows whose visible keys all score -inf attend to nothing (docs/semantics.md 1.4: 0, lse +inf,
// sink or not), where the plain formula gives NaN: a pse of -inf on every key of every third
// row (and on all keys but one of the next row, whose output is that key's value), and keys
// whose first channel is +inf against queries whose first channel is -1 (every score -inf, the
// decode kernels' case: they take no pse). Decode and prefill, fp32 and bf16, with and without
// sinks, lengths with a partial tile and one the plan splits.
TEST(Engine, RowsWhoseScoresAreAllMinusInf) {
  for (Elem e : {Elem::kF32, Elem::kBF16})
    for (const auto [q_len, kv] : {std::pair<int64_t, int64_t>{1, 70}, {1, 2048}, {24, 150}})
      for (bool sinks : {false, true})
        for (bool by_keys : {false, true}) {
          CaseSpec s;
          s.qe = e;
          s.oe = Elem::kF32;
          s.batch = 1;
          s.h_q = 8;
          s.h_kv = 2;
          s.d_qk = s.d_v = 64;
          s.q_len = {q_len};
          s.kv_len = {kv};
          s.sinks = sinks;
          s.pse = by_keys ? Elem::kU8 : Elem::kF32;
          s.seed = 90 + static_cast<uint32_t>(q_len + kv) + (sinks ? 1 : 0);
          RunCase(s, [by_keys](Case& c) {
            Problem& p = c.problem();
            const float inf = std::numeric_limits<float>::infinity();
            const auto set = [](const Operand& o, int64_t at, float x) {
              cvt::Store(const_cast<void*>(o.Base(0)), o.elem, at, x);
            };
            const int64_t kvt = p.kv_len[0];
            if (by_keys) {
              for (int64_t h = 0; h < p.h_q; ++h)
                for (int64_t i = 0; i < p.q_len[0]; ++i)
                  set(p.q, p.q.Offset(0, h, p.q_begin[0] + i, 0), -1.f);
              for (int64_t h = 0; h < p.h_kv; ++h)
                for (int64_t j = 0; j < kvt; ++j) set(p.k.cache, p.k.cache.Offset(0, h, j, 0), inf);
              return;
            }
            float* pse = const_cast<float*>(static_cast<const float*>(p.pse));
            for (int64_t h = 0; h < p.h_q; ++h)
              for (int64_t i = 0; i < p.q_len[0]; ++i) {
                const int64_t kind = (h + i) % 3;
                if (kind == 2) continue;
                for (int64_t j = 0; j < kvt; ++j)
                  if (kind == 0 || j != (h + i) % kvt)
                    pse[h * p.pse_sh + (p.pse_row0[0] + i) * p.pse_ss +
                        (p.pse_col0[0] + j) * p.pse_sk] = -inf;
              }
          });
        }
}

// The AVX512-BF16 table's dot tiles (attend_dot-inl.h: Q K^T and P V as VDPBF16PS over bf16
// pairs) on the shapes that stress their pair forms, packed from the fp32 staging or straight
// from bf16 rows: odd head dims (a zero-padded last pair), key tails of odd length, MLA rope,
// int8 antiquant under bf16 queries, a bf16 shared prefix (tiles mixing prefix and cache rows),
// paging, the NZ layout (16-channel chunks), a causal band and a bit mask (whose poisoned columns
// hold NaN values: those tiles keep fp32).
// RunCase checks every target against the fp64 reference and 1-3 threads bitwise. Proof the dot
// tiles ran: the plan has items the table's predicate takes (where the CPU has the table).
TEST(Engine, Bf16DotTiles) {
  struct G {
    int64_t h_q, h_kv, d_qk, d_rope, d_v, q_len, kv_len, block, prefix;
    bool causal, mask, quant, nz = false;
  };
  int seed = 40;
  for (const G& g : {G{8, 2, 128, 0, 128, 70, 131, 0, 0, true, false, false},
                     G{4, 1, 61, 0, 17, 33, 77, 16, 0, false, false, false},
                     G{16, 1, 64, 32, 64, 3, 129, 0, 0, false, false, false},
                     G{4, 2, 32, 0, 48, 40, 101, 0, 9, false, false, false},
                     G{4, 2, 32, 0, 32, 37, 90, 0, 0, false, true, false},
                     G{8, 2, 64, 0, 32, 24, 150, 32, 0, false, false, true},
                     G{4, 2, 64, 0, 64, 20, 200, 16, 5, false, false, false},
                     G{4, 2, 64, 0, 96, 30, 90, 16, 0, true, false, false, true}}) {
    CaseSpec s;
    s.h_q = g.h_q;
    s.h_kv = g.h_kv;
    s.d_qk = g.d_qk;
    s.d_rope = g.d_rope;
    s.d_v = g.d_v;
    s.q_len = {g.q_len};
    s.kv_len = {g.kv_len};
    s.block = g.block;
    s.prefix = g.prefix;
    s.causal_br = g.causal;
    s.mask = g.mask;
    s.nz = g.nz;
    s.oe = Elem::kF32;
    s.seed = ++seed;
    std::vector<std::vector<uint8_t>> keep;
    const auto quantize = [&](Case& c) {
      if (!g.quant) return;
      std::mt19937 rng(s.seed);
      Problem& p = c.problem();
      Quantize(p, p.k, s.d_qk, Elem::kI8, Dequant::Kind::kPerToken, true, 1.f, keep, rng);
      Quantize(p, p.v, s.d_v, Elem::kI8, Dequant::Kind::kPerChannel, false, 1.f, keep, rng);
    };
    Case c(s);
    quantize(c);
    if (TargetOps("avx512bf16")) {  // the cap naming the target turns its dot tiles on
      SettingsGuard guard;
      SetSimdCap("avx512bf16");
      EXPECT_GT(CountItems(c.problem(), Avx512Bf16DotRunsItem), 0) << "case " << seed;
    }
    if (TargetOps("neonbf16"))  // the best table on an AArch64 CPU with BF16
      EXPECT_GT(CountItems(c.problem(), NeonBf16DotRunsItem), 0) << "case " << seed;
    RunCase(s, quantize, !g.quant);
  }
}

// Dot tiles packed straight from int8 rows (attend_dot_common-inl.h, KeyPairsOf / ValuePairsOf):
// a tile whose value scales are plain converts without rounding twice; one with values that
// overflow bf16 although their fp32 products are finite (codes +-127, scale 2^121 (1 + 2^-7):
// +-3.402e38), an infinite scale, or a subnormal one must give what the reference gives: the
// overflowing or infinite values keep the fp32 path, so the rows of the causal band that do not
// see them stay finite (a masked P of 0 against an infinite value would be NaN), and a subnormal
// value contributes at most its size.
TEST(Engine, Bf16DotTilesQuantizedScaleCorners) {
  for (int variant = 0; variant < 3; ++variant) {
    CaseSpec s;
    s.h_q = 8;
    s.h_kv = 2;
    s.d_qk = s.d_v = 64;
    s.q_len = {40};
    s.kv_len = {140};
    s.causal_br = true;
    s.oe = Elem::kF32;
    s.seed = 90 + variant;
    std::vector<std::vector<uint8_t>> keep;
    const auto quantize = [&](Case& c) {
      std::mt19937 rng(s.seed);
      Problem& p = c.problem();
      Quantize(p, p.k, s.d_qk, Elem::kI8, Dequant::Kind::kPerToken, false, 1.f, keep, rng);
      Quantize(p, p.v, s.d_v, Elem::kI8, Dequant::Kind::kPerToken, false, 1.f, keep, rng);
      const float big[3] = {std::ldexp(1.f + 0x1p-7f, 121), std::numeric_limits<float>::infinity(),
                            1e-40f};
      // Token 125 (seen by the band's last 15 rows only) and, for the subnormal scale, token 20.
      for (int64_t j : {int64_t{125}, int64_t{20}}) {
        if (j == 20 && variant != 2) continue;
        cvt::Store(const_cast<void*>(p.v.dequant.scale), p.v.dequant.scale_elem,
                   p.v.dequant.Index(0, 0, j, 0), big[variant]);
        if (variant == 0)
          for (int64_t h = 0; h < p.h_kv; ++h)
            for (int64_t d = 0; d < s.d_v; ++d)
              static_cast<int8_t*>(const_cast<void*>(p.v.cache.data))
                  [p.v.cache.Offset(0, h, j, d)] = static_cast<int8_t>(d % 3 == 0 ? -127 : 127);
      }
    };
    Case c(s);
    quantize(c);
    if (TargetOps("avx512bf16")) {
      SettingsGuard guard;
      SetSimdCap("avx512bf16");
      EXPECT_GT(CountItems(c.problem(), Avx512Bf16DotRunsItem), 0) << "variant " << variant;
    }
    RunCase(s, quantize, false);
  }
}

// A dot item must not flush a subnormal query element: against a key channel of -inf it gives
// a score of -inf (that key is invisible), where VDPBF16PS, reading it as 0, would give
// 0 x -inf = NaN. Such items keep the fp32 FMA path (DotItemOk); the reference's finite rows
// must come out (NaN otherwise). One query per head: the decode kernels' items.
TEST(Engine, SubnormalQueryMeetsInfiniteKey) {
  for (int64_t nq : {20, 1}) {
    CaseSpec s;
    s.h_q = 4;
    s.h_kv = 1;
    s.d_qk = s.d_v = 32;
    s.q_len = {nq};
    s.kv_len = {100};
    s.oe = Elem::kF32;
    RunCase(s, [](Case& c) {
      Problem& p = c.problem();
      uint16_t* q = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.q.data));
      uint16_t* k = const_cast<uint16_t*>(static_cast<const uint16_t*>(p.k.cache.data));
      for (int64_t h = 0; h < p.h_q; ++h)
        for (int64_t i = 0; i < p.q_len[0]; ++i)
          q[p.q.Offset(0, h, p.q_begin[0] + i, 5)] = 0x0001;
      k[p.k.cache.Offset(0, 0, 37, 5)] = 0xFF80;  // -inf
    });
  }
}

// A scale of 0 makes every visible score 0 (the output is the mean of the visible V rows) and a
// negative one reverses the order; the padding of a partial tile and masked cells must stay out
// of the softmax (-inf x 0 is NaN, -inf x -s is +inf). Decode items (1-16 rows per KV head) and
// prefill items with a band, key counts that end inside a tile; every kernel against the fp64
// reference (RunCase).
TEST(Engine, ZeroAndNegativeScale) {
  for (double scale : {0.0, -0.3}) {
    for (int64_t nq : {1, 5}) {
      CaseSpec s;
      s.scale = scale;
      s.h_q = 8;
      s.h_kv = 2;
      s.d_qk = s.d_v = 64;
      s.batch = 2;
      s.q_len = {nq, nq};
      s.kv_len = {40, 150};
      if (nq > 1) {
        s.causal_br = true;  // a causal band: masked cells inside the tiles
        s.mask = true;
      }
      SCOPED_TRACE("scale " + std::to_string(scale) + ", q_len " + std::to_string(nq));
      RunCase(s);
    }
  }
}

TEST(Engine, LargeScoresStayFinite) {
  CaseSpec s;
  s.amp = 6.f;  // scores up to ~ 6*6*32*0.25: exp needs the running-max rescale
  s.d_qk = 32;
  s.d_v = 32;
  s.q_len = {9};
  s.kv_len = {200};
  s.oe = Elem::kF32;
  RunCase(s);
}

TEST(Engine, SupportsIsHonest) {
  Case c(CaseSpec{});
  Problem p = c.problem();
  std::string why;
  EXPECT_TRUE(EngineSupports(p, &why));
  p.full_quant = true;
  EXPECT_FALSE(EngineSupports(p, &why));
  EXPECT_NE(why.find("full quantization"), std::string::npos);
  p.full_quant = false;
  p.k.cache.elem = Elem::kFP8E4M3;
  EXPECT_FALSE(EngineSupports(p, &why));
}

// A value head size of 0: every output row is empty, the lse as usual. Prefill over a paged
// cache, so that the tile loop prefetches V's (empty) rows too; under UBSan in CI.
TEST(Engine, ValueHeadSizeZero) {
  CaseSpec s;
  s.h_q = 4;
  s.h_kv = 2;
  s.d_qk = 32;
  s.d_v = 0;
  s.block = 16;
  s.q_len = {20};
  s.kv_len = {150};
  s.seed = 91;
  RunCase(s);
}

}  // namespace
}  // namespace openfia::internal::testing
