// openfia internal: the per-ISA kernel tables and run-time target selection.
//
// Each target (scalar, avx2, avx512, avx512bf16) compiles the same generic kernels
// (attend-inl.h) with its own vector type; dispatch picks the best table the CPU supports,
// capped by openfia::SetSimdCap / OPENFIA_SIMD.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/problem.h"

namespace openfia::internal {

// The constants of every target's ExpP (the softmax probability's exp; kernels_scalar.cc,
// kernels_avx2.cc, vec_avx512-inl.h): below kLo the result is 0; v = x log2e + kMagic holds
// n + 127 in its low mantissa bits (kMagic = 1.5 * 2^23 + 127); r = x - n ln2 in two steps
// (kLn2Hi + kLn2Lo); e^r = 1 + r (1 + r (kC[0] + r (kC[1] + ...))), a degree-6 fit with p(0) = 1.
namespace expp {
inline constexpr float kLo = -86.5f;
inline constexpr float kMagic = 12583039.f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;
inline constexpr float kLn2Lo = 1.428606765330187e-06f;
// Horner order, highest degree first: r^6 .. r^2 coefficients.
inline constexpr float kC[5] = {1.3846146175637841e-03f, 8.374120108783245e-03f,
                                4.1667960584163666e-02f, 1.6666431725025177e-01f,
                                4.999999403953552e-01f};
}  // namespace expp

struct WorkItem;
struct EngineScratch;

// Per-row result of attending a work item's rows to its key range: m (running max, -inf when no
// key was visible), l (sum of exp(s - m) over visible keys) and acc[d] (sum of round(P) * V).
struct RowStates {
  float* m;    // [rows]
  float* l;    // [rows]
  float* acc;  // [rows, acc_stride]
  int64_t acc_stride;
};

// Resets the first `rows` row states to the empty state (m = -inf, l = 0, acc[0, ldv) = 0), as
// every kernel does before its first key.
inline void ResetRowStates(const RowStates& out, int64_t rows, int64_t ldv) {
  for (int64_t r = 0; r < rows; ++r) {
    out.m[r] = -std::numeric_limits<float>::infinity();
    out.l[r] = 0.f;
    float* a = out.acc + r * out.acc_stride;
    for (int64_t d = 0; d < ldv; ++d) a[d] = 0.f;
  }
}

// Batch b's band and the origins of its mask and pse rows/columns; hand-built problems may leave
// the per-batch vectors empty: no band, zero origins.
struct ItemOrigins {
  int64_t pre = Problem::kNoBand, next = Problem::kNoBand;
  int64_t mask_row0 = 0, mask_col0 = 0, pse_row0 = 0, pse_col0 = 0;
};
inline ItemOrigins OriginsOf(const Problem& p, int64_t b) {
  const auto at = [b](const std::vector<int64_t>& v, int64_t absent) {
    return v.empty() ? absent : v[b];
  };
  return {at(p.band_pre, Problem::kNoBand), at(p.band_next, Problem::kNoBand),
          at(p.mask_row0, 0), at(p.mask_col0, 0), at(p.pse_row0, 0), at(p.pse_col0, 0)};
}

// vis[qi * ld + n] = whether key jt0 + n is visible from logical query i0 + qi of
// batch b (band, then bit mask; SEMANTICS 1.5), for qi < nq, n < nk: the element visibility of a
// boundary tile, shared by the heads of a query.
inline void TileVisibility(const Problem& p, int64_t b, const ItemOrigins& o, int64_t i0,
                           int64_t nq, int64_t jt0, int64_t nk, uint8_t* vis, int64_t ld) {
  for (int64_t qi = 0; qi < nq; ++qi) {
    const int64_t i = i0 + qi;
    uint8_t* vr = vis + qi * ld;
    const uint8_t* mrow =
        p.mask ? p.mask + b * p.mask_sb + (o.mask_row0 + i) * p.mask_ss : nullptr;
    for (int64_t n = 0; n < nk; ++n) {
      const int64_t j = jt0 + n;
      bool ok = j >= i - o.pre && j <= i + o.next;
      if (ok && mrow) ok = mrow[(o.mask_col0 + j) * p.mask_sk] == 0;
      vr[n] = ok;
    }
  }
}

struct KernelTable {
  const char* name;
  // y[i] = exp(x[i]) as the softmax computes it (tests measure its ulp error).
  void (*exp)(const float* x, float* y, int64_t n);
  // y[i] = the softmax probability's exp(x[i]) (x <= 0): 0 below -86.5, never subnormal.
  void (*exp_p)(const float* x, float* y, int64_t n);
  // Attends the rows of `w` to its keys; see RowStates. Never allocates, never throws.
  void (*attend)(const Problem& p, const WorkItem& w, EngineScratch& s, const RowStates& out);
  // The epilogue's contiguous rows (rows-inl.h), bitwise the engine's scalar loops; nullptr
  // where the target has none (the engine loops run). scale_row: out[d] = acc[d] * factor /
  // denom rounded to e, false (nothing written) when e is not float32 / bfloat16 / float16.
  bool (*scale_row)(const float* acc, int64_t n, float factor, float denom, Elem e, void* out);
  // dst[d] += ws * src[d] (the split merge).
  void (*axpy)(float ws, const float* src, float* dst, int64_t n);
};

// Tables of the targets compiled into this build (nullptr when a target was not compiled).
const KernelTable* ScalarKernels();
const KernelTable* Avx2Kernels();
// Whether the AVX2 table runs item `w` of `p` on its decode kernel (decode_avx2-inl.h; false when
// AVX2 is not compiled or the CPU lacks it). For tests that must prove the kernel ran.
bool Avx2DecodeRunsItem(const Problem& p, const WorkItem& w);
// Runs item w on the AVX2 decode kernel when it takes it (false: nothing done). The AVX-512
// tables offer it their decode items first (every AVX-512 CPU has AVX2): on AMD Zen 4 it decodes
// 2.xx times faster than the AVX-512 generic loop's streaming path (architecture_notes.md, s11).
bool Avx2DecodeRun(const Problem& p, const WorkItem& w, EngineScratch& sc, const RowStates& out);
// Runs an int8 full-quantization item on the AVX2 kernel (fullquant_avx2-inl.h: VPMADDWD
// products, vector fp16 steps); false (nothing done) for other problems or without AVX2. The
// AVX-512 tables hand it their full-quantization items (integer products either way).
bool Avx2FullQuantRun(const Problem& p, const WorkItem& w, EngineScratch& sc,
                      const RowStates& out);
// y[i] = fp16(expf(x[i])) as the AVX2 full-quantization kernel computes it (x <= 0, -inf or
// NaN); false when AVX2 is not compiled or the CPU lacks it. For tests.
bool Avx2FullQuantExpF16(const float* x, float* y, int64_t n);
const KernelTable* Avx512Kernels();
// The AVX-512 loop with VDPBF16PS dot tiles for bf16 items (attend_dot-inl.h).
const KernelTable* Avx512Bf16Kernels();
// Whether the AVX512-BF16 table runs the packed tiles of item `w` of `p` as dot tiles (its
// operands are bf16 values and the item is never streamed; false when the target is not
// compiled or the CPU lacks it). The loop still keeps fp32 for a query with a subnormal or
// non-finite value and for tiles whose V holds Inf / NaN. For tests that must prove dot tiles ran.
bool Avx512Bf16DotRunsItem(const Problem& p, const WorkItem& w);
// Whether the AVX512-BF16 table's generic loop uses dot tiles at all: where VDPBF16PS is the
// faster product. Measured with ../shared/tools/machine_limits (GFLOP/s per core, bf16 dot /
// fp32 FMA): AMD Zen 4 229-232 / 113-116 (dot tiles: causal 512 x 4096 prefill 1.7x faster);
// Intel family 6 model 207 (no AMX exposed) 77-86 / 166-175 (dot tiles 1.5x slower: 61 against
// 90 GFLOP/s). So: AMD CPUs yes, Intel CPUs no (their bf16 decode kernel still runs: 2x the
// AVX2 kernel there, with fp32 FMA products), and yes whenever the cap names avx512bf16 itself
// (tests, measurements). The bf16 decode kernel (decode_avx512-inl.h) picks its products by the
// same rule. A property of the CPU and the cap only, so results stay the same run to run.
bool Bf16DotTiles();
// Whether the AVX512-BF16 table runs item `w` of `p` on its bf16 decode kernel
// (decode_avx512-inl.h; false when the target is not compiled or the CPU lacks it). The
// kernel still declines an item whose query holds a subnormal or non-finite value. For tests
// that must prove the kernel ran.
bool Avx512Bf16DecodeRunsItem(const Problem& p, const WorkItem& w);
// AMX-BF16 tiles for bf16 prefill items, the AVX-512 table for the rest; nullptr when not compiled
// or when the OS refuses the tile-data permission (the first call requests it).
const KernelTable* AmxKernels();
// Whether the AMX table runs item `w` of `p` on tiles (false: it hands it to AVX-512, or AMX is
// not compiled). For tests that must prove the tile path ran.
bool AmxRunsItem(const Problem& p, const WorkItem& w);

// AArch64 Advanced SIMD (kernels_neon.cc): the generic loop on 4 f32 lanes; nullptr off AArch64.
const KernelTable* NeonKernels();
// AArch64 Advanced SIMD + FEAT_BF16 (kernels_neonbf16.cc): the NEON loop with BFDOT dot tiles for
// bf16 items (attend_dot_neon-inl.h); nullptr off AArch64 or where the compiler lacks +bf16.
const KernelTable* NeonBf16Kernels();
// Whether the neonbf16 table runs the packed tiles of item `w` of `p` as dot tiles (false when
// it is not compiled or the CPU lacks BF16). For tests that must prove dot tiles ran.
bool NeonBf16DotRunsItem(const Problem& p, const WorkItem& w);

// The best table allowed by the CPU and the cap (throws openfia::Error for an unknown cap).
const KernelTable& ActiveKernels();
// Table of a named target if it is compiled and the CPU runs it, else nullptr (for tests).
const KernelTable* KernelsFor(const std::string& target);

}  // namespace openfia::internal
