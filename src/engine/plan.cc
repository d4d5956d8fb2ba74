// openfia: the engine's work plan (deterministic, from the Problem only) and scratch sizing.
#include "engine/plan.h"

#include <algorithm>
#include <cstdint>

namespace openfia::internal {
namespace {

// Split-KV (decode): when the unsplit items are fewer than kSplitItems, long key ranges are cut
// into pieces of at least kMinSplitTiles tiles so that any machine has work for all its cores.
// The constants are fixed: the split, and so every bit of the result, never depends on the
// number of threads.
constexpr int64_t kSplitItems = 64;
constexpr int64_t kMinSplitTiles = 16;
// A wide item (at least kWideRows rows: MLA decode, 128 heads on one KV head; a multi-head
// decode item, 8 KV heads x a GQA group of 4) is cut in two from 2 x kWideMinTiles tiles on, so
// that one short decode (a 1024-key MLA or Llama decode at B = 1) still gives two cores work.
// More pieces than tiles / kMinSplitTiles would only add state writes and merging (an MLA
// piece's state: 260 KB).
constexpr int64_t kWideRows = 32;
constexpr int64_t kWideMinTiles = 8;
int64_t SplitPieces(int64_t rows, int64_t tiles) {
  int64_t n = tiles / kMinSplitTiles;
  if (rows >= kWideRows) n = std::max(n, std::min<int64_t>(2, tiles / kWideMinTiles));
  return n;
}
// At most this many rows per KV head (GQA group x query rows) make an item span several KV heads.
constexpr int64_t kMultiHeadRows = 16;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Dense prefill items may hold up to kMaxRows rows (MakePlan); everything else kItemRows.
bool BigItems(const Problem& p) {
  return p.key_offset.empty() && !p.full_quant && p.d_rope == 0 && p.group() <= kItemRows;
}


}  // namespace

int64_t MaxItemRows(const Problem& p) {
  if (!BigItems(p)) return kItemRows;
  for (int64_t nq : p.q_len)
    if (nq * p.group() > kItemRows) return kMaxRows;
  return kItemRows;
}

Plan MakePlan(const Problem& p) {
  Plan plan;
  const int64_t G = p.group();
  const int64_t g_chunk = std::min(G, kItemRows);
  const int64_t q_tile = std::max<int64_t>(1, kItemRows / g_chunk);
  // Dense prefill (more than kItemRows rows per KV head, whole groups): items of up to kMaxRows
  // rows, the query count a multiple of 16 when it can be, so that the 16-row blocks of the AMX
  // prefill kernel (amx_prefill-inl.h) hold consecutive queries of one head. Not for MLA rope or
  // int8 full quantization, which keep kItemRows.
  const bool big = BigItems(p);
  const int64_t q_big = kMaxRows / G >= 16 ? kMaxRows / G / 16 * 16 : kMaxRows / G;

  std::vector<WorkItem> base;
  if (!p.key_offset.empty()) {
    // Sparse key selection: every (query row, KV head) has its own key list, so an item holds one
    // query row and (a chunk of) its group's heads; its keys are the positions of that list.
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < p.q_len[b]; ++i) {
        for (int64_t hk = 0; hk < p.h_kv; ++hk)
          for (int64_t g0 = 0; g0 < G; g0 += g_chunk)
            base.push_back(SparseRowItem(p, b, i, hk, g0, g_chunk));
      }
    }
  }
  for (int64_t b = 0; b < p.batch && p.key_offset.empty(); ++b) {
    const int64_t nq = p.q_len[b], kvt = p.kv_total(b);
    // docs/semantics.md 1.12: with post-quantization a prompt (Q_S > 1) batch without any key
    // outputs int8 0 ("PFA输出0"), not the quantized zero sat(round(qo2)) that rows without a visible
    // key get elsewhere: no item, so the pre-filled 0 and lse +inf stay (as the reference).
    if (kvt == 0 && !p.quant_scale2.empty() && !p.incremental) continue;
    const int64_t pre = p.band_pre.empty() ? Problem::kNoBand : p.band_pre[b];
    const int64_t next = p.band_next.empty() ? Problem::kNoBand : p.band_next[b];
    // Decode (few rows per KV head): one item covers kv_heads KV heads, so a tile reads whole
    // token rows of a [block, block_size, H_kv * D] cache instead of a 2 KB-strided slice per head.
    const int64_t head_rows = std::max<int64_t>(1, G * std::min<int64_t>(nq, q_tile));
    const int64_t kv_heads = G <= kItemRows && nq * G <= kMultiHeadRows
                                 ? std::max<int64_t>(1, std::min(p.h_kv, kItemRows / head_rows))
                                 : 1;
    const int64_t qt = big && nq * G > kItemRows ? q_big : q_tile;
    for (int64_t hk = 0; hk < p.h_kv; hk += kv_heads) {
      for (int64_t g0 = 0; g0 < G; g0 += g_chunk) {
        for (int64_t i0 = 0; i0 < nq; i0 += qt) {
          WorkItem w;
          w.b = b;
          w.hk = hk;
          w.n_hk = std::min(kv_heads, p.h_kv - hk);
          w.g0 = g0;
          w.g1 = std::min(G, g0 + g_chunk);
          w.i0 = i0;
          w.i1 = std::min(nq, i0 + qt);
          // Keys some row of the tile can see: [i0 - pre, i1 - 1 + next] within [0, kvt).
          w.j0 = std::max<int64_t>(0, w.i0 - pre);
          w.j1 = std::min<int64_t>(kvt, w.i1 - 1 + next + 1);
          if (w.j0 >= w.j1) w.j0 = w.j1 = 0;
          base.push_back(w);
        }
      }
    }
  }

  // The work of the items counted in kItemRows-row units: a few large prefill items already
  // give every core work (and splitting them costs a split workspace of S_q rows and a merge).
  int64_t units = 0;
  for (const WorkItem& w : base) units += CeilDiv(std::max<int64_t>(1, w.rows()), kItemRows);
  const int64_t want = units < kSplitItems ? CeilDiv(kSplitItems, std::max<int64_t>(1, units)) : 1;
  for (const WorkItem& w : base) {
    // Tiles on the absolute grid of kTileKeys (paged blocks and causal diagonals line up).
    const int64_t t_first = w.j0 / kTileKeys, t_end = CeilDiv(w.j1, kTileKeys);
    const int64_t tiles = w.j1 > w.j0 ? t_end - t_first : 0;
    // Full quantization normalizes P by the max over all of a row's keys: never split.
    // Sparse items keep kMinSplitTiles: each piece pays a cold start on its gathered rows, which
    // finer pieces would pay more often than they gain in balance.
    const int64_t pieces =
        p.key_offset.empty() ? SplitPieces(w.rows(), tiles) : tiles / kMinSplitTiles;
    int64_t n_split = p.full_quant ? 1 : std::min(want, pieces);
    if (n_split <= 1) {
      plan.items.push_back(w);
      continue;
    }
    const int64_t per = CeilDiv(tiles, n_split);
    n_split = CeilDiv(tiles, per);
    for (int64_t s = 0; s < n_split; ++s) {
      WorkItem x = w;
      x.j0 = std::max(w.j0, (t_first + s * per) * kTileKeys);
      x.j1 = std::min(w.j1, (t_first + (s + 1) * per) * kTileKeys);
      x.split = s;
      x.n_split = n_split;
      x.state0 = plan.state_rows;
      plan.state_rows += x.rows();
      plan.items.push_back(x);
    }
  }
  return plan;
}

}  // namespace openfia::internal
