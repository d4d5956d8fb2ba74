// openfia: the tile-loop kernel family's scratch layout (tile_scratch.h).
#include "engine/kernels/generic/tile_scratch.h"

#include <algorithm>
#include <cstdint>
#include <new>

namespace openfia::internal {
namespace {

// Full quantization: the key capacity of the kept scores (TileScratch::fq_sv), or 0.
int64_t FqKeptKeys(const Problem& p, int64_t rows) {
  if (!p.full_quant) return 0;
  int64_t keys = 0;  // the longest key range, in whole tiles plus one (an item may start mid-tile)
  for (int64_t b = 0; b < p.batch; ++b) keys = std::max(keys, p.kv_total(b));
  keys = (keys + 2 * kTileKeys - 1) / kTileKeys * kTileKeys;
  return rows * keys * 2 <= kFqScoreBytes ? keys : 0;
}

// Lays out the parts of p's TileScratch from byte 0 on, each on a cache line of its own (a tile
// row straddling two lines costs two loads). With base == nullptr it only counts.
struct Layout {
  char* base;
  int64_t at = 0;
  template <class T>
  T* Take(int64_t n) {
    T* p = base ? reinterpret_cast<T*>(base + at) : nullptr;
    at += (n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64;
    return p;
  }
};

// Fills s (when mem is not null) and returns the sizes.
ScratchSize Lay(const Problem& p, void* mem, TileScratch* s) {
  Layout l{static_cast<char*>(mem)};
  s->dk = p.d_qk + p.d_rope;
  s->dk_pad = (s->dk + 15) / 16 * 16;
  s->dv_pad = (p.d_v + 15) / 16 * 16;
  const int64_t rows = MaxItemRows(p), TN = kTileKeys;
  // ---- zeroed when a call starts: the packed tiles, the row temporaries, the key tables ----
  s->q = l.Take<float>(rows * s->dk_pad);
  s->kt = l.Take<float>(s->dk * TN + 16);
  s->v = l.Take<float>(TN * PackedVStride(s->dv_pad));
  s->s = l.Take<float>(rows * TN);
  s->tmp = l.Take<float>((rows + 2 * s->dv_pad + 64 + 15) / 16 * 16);
  if (p.q.elem == Elem::kBF16) {  // the dot tiles' pair forms (32-bit words)
    s->qp = l.Take<uint32_t>(rows * s->dk_pad / 2);
    s->kp = l.Take<uint32_t>(s->dk_pad / 2 * TN);
    s->vp = l.Take<uint32_t>(TN / 2 * PackedVStride(s->dv_pad));
  }
  s->vis = l.Take<uint8_t>(rows * TN);
  s->kpre = l.Take<uint8_t>(TN);
  s->kbase = l.Take<const void*>(TN);
  s->rbase = l.Take<const void*>(TN);
  s->vbase = l.Take<const void*>(TN);
  s->koff = l.Take<int64_t>(TN);
  s->roff = l.Take<int64_t>(TN);
  s->voff = l.Take<int64_t>(TN);
  s->kcoord = l.Take<int64_t>(3 * TN);
  s->vcoord = l.Take<int64_t>(3 * TN);
  if (p.full_quant) {
    s->acc64 = l.Take<int64_t>(rows * p.d_v);
    s->fq_l = l.Take<int64_t>(rows);
  }
  ScratchSize size;
  size.zeroed = l.at;
  // ---- written before they are read: no clearing ----
  // Per-tile dequantized sparse items, and every sparse problem: the AMX SparseAttnSharedkv path
  // (amx_sas-inl.h) keeps a step's packed V and scores there.
  if (p.k.dequant.kind == Dequant::Kind::kPerTile || !p.key_offset.empty()) {
    const int64_t d_pack = p.d_qk + (p.d_rope + 31) / 32 * 32;
    s->step = l.Take<float>(kStepTiles * (d_pack / 2 * TN) + TN * s->dk / 2 +
                            kStepTiles * (TN / 2) * (s->dv_pad + 16) +
                            rows * (kStepTiles * TN + 16) + 64);
  }
  if (TransposedQueryFits(p, rows)) {
    s->qt_ld = (rows + 15) / 16 * 16;
    s->qt = l.Take<float>(s->dk * s->qt_ld);
  }
  if (p.full_quant) {  // layouts: attend_fullquant-inl.h
    const int64_t dq = (s->dk + 1) / 2 * 2, dvq = (p.d_v + 15) / 16 * 16;
    s->fq_q = l.Take<int16_t>(rows * dq);
    s->fq_k = l.Take<int16_t>(dq * TN);
    s->fq_v = l.Take<int16_t>(TN * dvq);
    s->fq_p = l.Take<int16_t>(rows * TN);
    s->fq_s = l.Take<int32_t>(rows * TN);
    s->fq_acc = l.Take<int32_t>(rows * dvq);
    s->fq_nan = l.Take<uint8_t>(rows);
    s->fq_pse = l.Take<float>(TN);
    if (const int64_t keys = FqKeptKeys(p, rows); keys > 0) {
      s->fq_sv = l.Take<uint16_t>(rows * keys);
      s->fq_sv_keys = keys;
    }
  }
  size.bytes = l.at;
  return size;
}

}  // namespace

// The TileScratch itself sits in the first kHeader bytes; the buffers follow.
constexpr int64_t kHeader = (sizeof(TileScratch) + 63) / 64 * 64;

ScratchSize TileScratchSize(const Problem& p) {
  TileScratch s;
  ScratchSize z = Lay(p, nullptr, &s);
  z.bytes += kHeader;
  z.zeroed += kHeader;
  return z;
}

void PrepareTileScratch(const Problem& p, void* mem) {
  TileScratch s;
  Lay(p, static_cast<char*>(mem) + kHeader, &s);
  *static_cast<TileScratch*>(mem) = s;
}

SpareFloats::SpareFloats(int64_t n)
    : p_(n > 0 ? new (std::nothrow) float[static_cast<size_t>(n)] : nullptr) {}
SpareFloats::~SpareFloats() { delete[] p_; }

}  // namespace openfia::internal
