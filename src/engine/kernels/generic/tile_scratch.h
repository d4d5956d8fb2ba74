// openfia internal: the scratch of the tile-loop kernel family (the generic tile loop, the dot
// tiles, the decode and full-quantization kernels and the AMX kernels share one layout): every
// buffer an item of the problem can need, carved from the bytes the runner gives the kernel.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "engine/kernel.h"

namespace openfia::internal {

// Keys per softmax step of the per-tile dequant AMX path, in tiles (TileScratch::step).
constexpr int64_t kStepTiles = 4;

// Row stride (floats) of the generic loop's packed V tile for dv_pad channels: one cache line
// more when the rows would be a multiple of 256 bytes apart, so the 64 rows of a tile do not
// fall into a few L1 sets (P V reads a 16-channel column of all of them per register block).
inline int64_t PackedVStride(int64_t dv_pad) { return dv_pad % 64 == 0 ? dv_pad + 16 : dv_pad; }

// Whether the scratch of p holds the transposed query rows (TileScratch::qt): K and V can be
// one tensor (no rope, d_v == d_qk) and an item can have enough rows for the transposed score
// kernel (16 or more).
inline bool TransposedQueryFits(const Problem& p, int64_t max_item_rows) {
  return p.d_rope == 0 && p.d_v == p.d_qk && max_item_rows >= 16;
}

// Per-worker buffers sized for the problem (allocated by the engine before the parallel loop;
// kernels never allocate). Row pointers: where each key of the current tile lives.
struct TileScratch {
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
  // that the scores of a tile come from its row-major V (attend_base-inl.h ScoresFromRows). Null
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

// Bytes of the full-quantization kernel's kept scores per worker (TileScratch::fq_sv): 128 rows
// x 16384 keys of fp16. Longer key ranges recompute their scores in the second pass.
inline constexpr int64_t kFqScoreBytes = int64_t{4} << 20;

// Floats from TileScratch::kt to ::tmp (the packed K and V tiles and the scores, one region):
// the staging space the decode kernels carve their buffers from.
inline int64_t TileStageFloats(const Problem& p) {
  const int64_t dk = p.d_qk + p.d_rope, dv_pad = (p.d_v + 15) / 16 * 16;
  return (dk * kTileKeys + 16) + kTileKeys * PackedVStride(dv_pad) + MaxItemRows(p) * kTileKeys;
}

// The scratch of every kernel of the family (Kernel::scratch / prepare): the TileScratch itself,
// then its buffers, those a fresh buffer has zeroed first (`zeroed` bytes), those every kernel
// writes before it reads them after.
ScratchSize TileScratchSize(const Problem& p);
// Lays the buffers of p out in `mem` (TileScratchSize(p).bytes bytes, 64-byte aligned) and
// stores their TileScratch at its start.
void PrepareTileScratch(const Problem& p, void* mem);
// The TileScratch a prepared scratch holds.
inline TileScratch& TileOf(void* scratch) { return *static_cast<TileScratch*>(scratch); }

// n floats from the heap for a rare path (data() null where the memory is not there: the path
// then does without), freed with the object.
class SpareFloats {
 public:
  explicit SpareFloats(int64_t n);
  ~SpareFloats();
  SpareFloats(const SpareFloats&) = delete;
  SpareFloats& operator=(const SpareFloats&) = delete;
  float* data() const { return p_; }

 private:
  float* p_ = nullptr;
};

}  // namespace openfia::internal
