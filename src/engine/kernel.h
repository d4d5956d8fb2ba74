// openfia internal: the kernel interface, the one boundary between the runner and every
// attention kernel.
//
// The runner (engine/runner.cc) cuts a call into work items, asks the active kernel list once per
// item which kernel runs it (engine/select.cc), gives that kernel its scratch and the item's row
// states, then merges split items and writes the outputs. A kernel attends the rows of one item
// to its keys and leaves one online-softmax state per row; it never allocates, never throws and
// never calls another kernel. Every kernel includes this header and nothing above it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/problem.h"

namespace openfia::internal {

inline constexpr int64_t kTileKeys = 64;   // keys per KV tile (multiple of every SIMD width)
inline constexpr int64_t kItemRows = 128;  // rows per work item (head x query pairs), except:
// dense prefill items (many query rows per KV head) hold up to kMaxRows rows, so that each packed
// K / V tile serves more rows. kMaxRows sizes the per-worker scratch and row states.
inline constexpr int64_t kMaxRows = 512;

// A work item is (batch b, KV heads [hk, hk + n_hk), query heads [g0, g1) of each KV head's
// group, logical query rows [i0, i1), logical keys [j0, j1)). Its rows are the (head, query)
// pairs ordered head-major: row r is head g0 + r / (i1 - i0), query i0 + r % (i1 - i0) (relative
// to KV head hk's group). Packing the GQA heads of one KV head as rows lets every key/value byte
// be read once per group.
struct WorkItem {
  int64_t b = 0, hk = 0;
  int64_t g0 = 0, g1 = 0;  // query heads within the group
  int64_t i0 = 0, i1 = 0;  // logical query rows
  int64_t j0 = 0, j1 = 0;  // logical keys (a multiple of kTileKeys apart, except the last split)
  int64_t split = 0;       // index among the splits of the same rows
  int64_t n_split = 1;     // number of splits of these rows (1: no split-KV)
  int64_t state0 = 0;      // first row of this item in the split workspace (n_split > 1)
  // KV heads [hk, hk + n_hk). n_hk > 1 only with the whole group (g0 = 0, g1 = G): the rows of
  // KV head hk + x follow those of hk + x - 1, so row r is still query head hk * G + r / (i1 - i0)
  // and query i0 + r % (i1 - i0). Decode uses it to read each token's row of all KV heads at once
  // (a [block, block_size, H_kv * D] cache stores them contiguously). Kernels must honour it.
  int64_t n_hk = 1;
  int64_t head_rows() const { return (g1 - g0) * (i1 - i0); }  // rows of one KV head
  int64_t rows() const { return n_hk * head_rows(); }
};

// Sparse key selection: the item of query row i of batch b, KV head hk and query heads
// [g0, min(G, g0 + g_chunk)), over the whole key list of that row (j0 = 0, j1 = its length).
inline WorkItem SparseRowItem(const Problem& p, int64_t b, int64_t i, int64_t hk, int64_t g0,
                              int64_t g_chunk) {
  const int64_t r = (p.q_row_base[b] + i) * p.h_kv + hk;
  WorkItem w;
  w.b = b;
  w.hk = hk;
  w.g0 = g0;
  w.g1 = std::min(p.group(), g0 + g_chunk);
  w.i0 = i;
  w.i1 = i + 1;
  w.j0 = 0;
  w.j1 = p.key_offset[r + 1] - p.key_offset[r];
  return w;
}

// The online-softmax state a kernel leaves for each row of its item, over the item's visible
// keys: m (running max of the scaled scores, -inf when no key was visible, NaN once a NaN score
// was met), l (sum of exp(s - m)) and acc[d] (sum of P * V with P rounded as the problem says).
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

// The per-worker scratch a kernel declares for a problem: `bytes` in all (64-byte aligned), of
// which the first `zeroed` must be zero when a call's first item enters the kernel (the runner
// clears them once per call and worker; the kernel keeps them as it needs).
struct ScratchSize {
  int64_t bytes = 0;
  int64_t zeroed = 0;
};

// The instruction set a kernel's code needs: the build must have compiled it and the CPU must
// run it (engine/select.cc).
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512, kAvx512Bf16, kAmx, kNeon, kNeonBf16 };

struct Kernel {
  const char* name;  // what OPENFIA_KERNEL / SetKernel name, e.g. "tile_avx512bf16"
  Isa isa;
  // nullptr when the kernel runs item *w of p, else why not (a sentence fragment, e.g. "query
  // dtype is not bfloat16"). With w == nullptr: the part of the check that depends on p alone
  // (asked once per call); a kernel that accepts p this way must accept or refuse each item of
  // it by geometry only, so the answer is cheap.
  const char* (*supports)(const Problem& p, const WorkItem* w);
  // Kernels with the same `scratch` share one buffer per worker: made (its first `zeroed` bytes
  // zero) and handed to `prepare` (when not null) once per call and worker, before the first item
  // any of them runs.
  ScratchSize (*scratch)(const Problem& p);
  void (*prepare)(const Problem& p, void* scratch);
  // Attends the rows of w to its keys: resets out's first w.rows() states, then accumulates.
  // `scratch` holds scratch(p).bytes bytes, 64-byte aligned.
  void (*run)(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out);
};

// The runner's vector helpers of one instruction-set target (the epilogue and the split merge),
// bitwise the scalar loops they replace; exp / exp_p are the target's vector exponentials, for
// tests.
struct VectorOps {
  const char* target;  // "scalar", "avx2", ...
  // y[i] = exp(x[i]) as the softmax computes it.
  void (*exp)(const float* x, float* y, int64_t n);
  // y[i] = the softmax probability's exp(x[i]) (x <= 0): 0 below -86.5, never subnormal.
  void (*exp_p)(const float* x, float* y, int64_t n);
  // out[d] = acc[d] * factor / denom rounded to e; false (nothing written) when e is not
  // float32 / bfloat16 / float16. nullptr: the runner's scalar loop.
  bool (*scale_row)(const float* acc, int64_t n, float factor, float denom, Elem e, void* out);
  // dst[d] += ws * src[d], product and sum rounded apart. nullptr: the scalar loop.
  void (*axpy)(float ws, const float* src, float* dst, int64_t n);
};

// The most rows an item of p's plan can have (engine/plan.cc; sizes scratch and row states).
int64_t MaxItemRows(const Problem& p);

// Whether VDPBF16PS / BFDOT products are used where a kernel could use them: where they are the
// faster product (AMD CPUs; AArch64 with BF16), or whenever the SIMD cap names avx512bf16 itself
// (tests, measurements). A property of the CPU and the cap only, so results stay the same run to
// run (engine/select.cc).
bool Bf16DotTiles();

// ---- the kernel registry (engine/kernels/kernel_lists.cc) ----

// The kernels of target `isa` in priority order, ending with the portable kernel (which runs
// every item of every problem the engine supports): the first that supports an item runs it.
// Only kernels this build compiled are listed; whether the CPU runs them is select.cc's question.
// `count` receives the length.
const Kernel* const* KernelList(Isa isa, int* count);
// The vector helpers of target `isa` (nullptr when the build has no such target).
const VectorOps* VectorOpsOf(Isa isa);
// Every kernel this build compiled, for lookups by name.
const Kernel* const* AllKernels(int* count);
// Whether this CPU (and OS) runs the instructions of target `isa` (compiled or not).
bool CpuRuns(Isa isa);

}  // namespace openfia::internal
