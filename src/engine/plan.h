// openfia internal: the engine's work plan and per-worker scratch.
//
// A work item is (batch b, KV heads [hk, hk + n_hk), query heads [g0, g1) of each KV head's
// group, logical query rows [i0, i1), logical keys [j0, j1)). Its rows are the (head, query)
// pairs ordered head-major: row r is head g0 + r / (i1 - i0), query i0 + r % (i1 - i0) (relative
// to KV head hk's group). Packing the GQA heads of one KV head as rows lets every key/value byte
// be read once per group.
//
// The plan depends on the Problem only (never on the thread count), so split-KV boundaries and
// every reduction order are fixed and results are bitwise independent of the number of workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/problem.h"

namespace openfia::internal {

inline constexpr int64_t kTileKeys = 64;  // keys per KV tile (multiple of every SIMD width)
inline constexpr int64_t kItemRows = 128;  // rows per work item (head x query pairs), except:
// dense prefill items (many query rows per KV head) hold up to kMaxRows rows, so that each packed
// K / V tile serves more rows. kMaxRows sizes the per-worker scratch and row states.
inline constexpr int64_t kMaxRows = 512;

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

struct Plan {
  std::vector<WorkItem> items;
  int64_t state_rows = 0;  // rows of split workspace needed (sum over split items)
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

// Keys per softmax step of the per-tile dequant AMX path, in tiles (EngineScratch::step).
constexpr int64_t kStepTiles = 4;

// The most rows an item of p's plan can have (sizes the scratch and the row states).
int64_t MaxItemRows(const Problem& p);

// Builds the work list of p (deterministic; depends on p only).
Plan MakePlan(const Problem& p);

// Row stride (floats) of the generic loop's packed V tile for dv_pad channels: one cache line
// more when the rows would be a multiple of 256 bytes apart, so the 64 rows of a tile do not
// fall into a few L1 sets (P V reads a 16-channel column of all of them per register block).
inline int64_t PackedVStride(int64_t dv_pad) { return dv_pad % 64 == 0 ? dv_pad + 16 : dv_pad; }

// Whether the scratch of p holds the transposed query rows (EngineScratch::qt): K and V can be
// one tensor (no rope, d_v == d_qk) and an item can have enough rows for the transposed score
// kernel (16 or more).
inline bool TransposedQueryFits(const Problem& p, int64_t max_item_rows) {
  return p.d_rope == 0 && p.d_v == p.d_qk && max_item_rows >= 16;
}

// Per-worker buffers sized for the problem (allocated by the engine before the parallel loop;
// kernels never allocate). Row pointers: where each key of the current tile lives.
struct EngineScratch {
  int64_t dk = 0;      // d_qk + d_rope
  int64_t dk_pad = 0;  // dk rounded up to 16
  int64_t dv_pad = 0;  // d_v rounded up to 16
  float* q = nullptr;       // [kMaxRows, dk_pad] packed query rows (f32)
  float* kt = nullptr;      // [dk, kTileKeys] packed key tile, transposed
  float* v = nullptr;       // [kTileKeys, PackedVStride(dv_pad)] packed value tile
  float* s = nullptr;       // [kMaxRows, kTileKeys] scores, then probabilities
  float* tmp = nullptr;     // [kMaxRows + 2 * dv_pad + 64] per-row temporaries
  // bf16 pair forms of the dot tiles (attend_dot-inl.h; bf16 queries only, else null): query
  // rows [kMaxRows, dk_pad / 2], K tile [dk_pad / 2, kTileKeys], V tile
  // [kTileKeys / 2, PackedVStride(dv_pad)].
  uint32_t* qp = nullptr;
  uint32_t* kp = nullptr;
  uint32_t* vp = nullptr;
  uint8_t* vis = nullptr;   // [kMaxRows, kTileKeys] visibility of boundary tiles
  const void** kbase = nullptr;  // [kTileKeys] storage base of each key (K)
  int64_t* koff = nullptr;       // [kTileKeys] element offset of (row, d = 0) from kbase
  const void** rbase = nullptr;  // K-rope
  int64_t* roff = nullptr;
  const void** vbase = nullptr;  // V
  int64_t* voff = nullptr;
  int64_t* kcoord = nullptr;     // [kTileKeys, 3] storage (b, h, s) of each key (dequant index)
  int64_t* vcoord = nullptr;
  uint8_t* kpre = nullptr;       // [kTileKeys] 1 when the key comes from the shared prefix
  // Per-tile dequantized sparse items only (null otherwise; amx_tile_dequant-inl.h): kStepTiles
  // packed K tiles, the bf16 staging rows of one tile, the packed V of a step and its scores.
  float* step = nullptr;
  // K = V problems (no rope, d_v == d_qk, TransposedQueryFits): dk * qt_ld floats (qt_ld: the
  // most rows rounded up to 16) for the query rows of each KV head of an item transposed, so
  // that the scores of a tile come from its row-major V (attend-inl.h ScoresFromRows). Null
  // otherwise.
  float* qt = nullptr;
  int64_t qt_ld = 0;
  // int8 full quantization only (null otherwise; attend_fullquant-inl.h, which documents the
  // layouts): int16 forms of the query rows [rows, dq], the K tile [dq / 2, kTileKeys, 2], the V
  // tile [kTileKeys / 2, dvq, 2] and P8 [rows, kTileKeys]; int32 scores [rows, kTileKeys] and
  // P8 * V sums [rows, dvq]; exact int64 P8 * V sums [rows, d_v] and sums of E in units of 2^-24
  // [rows]; NaN flags [rows]; one row's pse bias [kTileKeys]. rows = MaxItemRows, dq = dk rounded
  // up to 2, dvq = d_v rounded up to 16.
  int16_t* fq_q = nullptr;
  int16_t* fq_k = nullptr;
  int16_t* fq_v = nullptr;
  int16_t* fq_p = nullptr;
  int32_t* fq_s = nullptr;
  int32_t* fq_acc = nullptr;
  int64_t* acc64 = nullptr;
  int64_t* fq_l = nullptr;
  uint8_t* fq_nan = nullptr;
  float* fq_pse = nullptr;
  // The fp16 scores S of pass 1, kept for pass 2 [rows of one KV head][fq_sv_keys] when an item's
  // keys fit (fq_sv_keys: 0 when the problem's longest key range would not fit kFqScoreBytes).
  uint16_t* fq_sv = nullptr;
  int64_t fq_sv_keys = 0;
};

// Bytes of the full-quantization kernel's kept scores per worker (EngineScratch::fq_sv): 128 rows
// x 16384 keys of fp16. Longer key ranges recompute their scores in the second pass.
inline constexpr int64_t kFqScoreBytes = int64_t{4} << 20;

// Owns the memory of one EngineScratch.
class ScratchBuffer {
 public:
  explicit ScratchBuffer(const Problem& p);
  EngineScratch& get() { return s_; }
  // What the sizes depend on: a buffer made for a problem with the same key serves another.
  static std::vector<int64_t> Key(const Problem& p);
  // Back to the state the constructor leaves (the zeroed parts zero again), without allocating.
  void Clear();

 private:
  std::vector<float> f_;
  std::vector<int64_t> i_;
  std::vector<const void*> ptr_;
  std::vector<uint8_t> u8_;
  std::unique_ptr<float[]> step_;
  std::unique_ptr<float[]> qt_;
  std::vector<int64_t> acc64_;  // acc64, then fq_l
  std::unique_ptr<unsigned char[]> fq_;  // the other fq_ buffers
  std::unique_ptr<uint16_t[]> fq_sv_;
  EngineScratch s_;
};

}  // namespace openfia::internal
