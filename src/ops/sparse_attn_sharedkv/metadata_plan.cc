// openfia: SparseAttnSharedkvMetadata, the work plan of SparseAttnSharedkv.
//
// Work units are (bn2, m) pairs: M blocks of query tokens (with all heads of their KV group) of
// one batch, numbered in (bn2, m) order, as in the NPU's metadata (docs/semantics.md 3.4). With few
// units (small-batch decode) each unit's key lists are also cut along S2 on a fixed grid of whole
// tiles (the NPU's FlashDecode split, supportFd); the split units' partial states are merged by
// the reduce records. The pieces (unit, S2 chunk) are cut into at most 36 contiguous ranges of
// near-equal cost, one per compute worker (docs/sparse_attn_sharedkv.md, "Metadata", has the cost
// model). The grid depends only on the configuration, the cut also on the worker count, never on
// timing, so the plan is deterministic and the result independent of it.
#include <algorithm>
#include <cstring>
#include <new>

#include "common/check.h"
#include "openfia/runtime.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {
namespace {

// The cost model, in units of 100 ps (docs/sparse_attn_sharedkv.md, "Cost model", has the
// measuring command and the numbers: bf16, N1 = 64, D = 512, one thread of this machine): per
// (query head x key) product, and per engine item (one query token, its heads, one S2 chunk:
// query packing, and the epilogue or the partial-state write). The merge of a split unit runs
// after every compute record, so it is not part of a piece. Any values give a correct plan;
// these make the pieces of a record take about equal time on this engine.
constexpr int64_t kCostPerProduct = 74;      // 7.4 ns
constexpr int64_t kCostPerItem = 140000;     // 14 us

// Keys a query at absolute position p of a batch with S2 = s2 attends (sparse lists counted at
// their capacity: the planner never sees the indices).
int64_t KeysOfRow(const SasConfig& c, int64_t p, int64_t s2) {
  if (p < 0) return 0;
  int64_t win = 0;
  switch (c.ori_mask_mode) {
    case 0: win = s2; break;
    case 3: win = p + 1; break;
    default: win = std::min(p, c.ori_win_left) + 1; break;
  }
  int64_t cmp = 0;
  if (c.has_cmp) {
    cmp = (p + 1) / c.cmp_ratio;
    if (c.cmp_topk > 0) cmp = std::min(cmp, c.cmp_topk);
  }
  return win + cmp;
}

uint64_t Fnv1a(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xFF;
    h *= 0x100000001B3ull;
  }
  return h;
}

// Piece index -> cursor (bn2, m, s2); pieces() maps to (batch * n2, 0, 0).
void Cursor(const SasConfig& c, const SasUnits& u, int64_t piece, int32_t* bn2, int32_t* m,
            int32_t* s2) {
  if (piece >= u.pieces()) {
    *bn2 = static_cast<int32_t>(c.batch * c.n2);
    *m = *s2 = 0;
    return;
  }
  const int64_t unit = u.UnitOfPiece(piece);
  const int64_t b = u.batch_of[unit];
  *bn2 = static_cast<int32_t>(b * c.n2);
  *m = static_cast<int32_t>(unit - u.begin[b]);
  *s2 = static_cast<int32_t>(piece - u.piece_begin[unit]);
}

}  // namespace

// Workspace slots used by the pieces before `piece` (FIRST_FD_DATA_WORKSPACE_IDX of a record
// starting there: the slot its first split piece writes).
int64_t SasSlotsBefore(const SasUnits& u, int64_t piece) {
  if (piece >= u.pieces()) return u.slots();
  const int64_t unit = u.UnitOfPiece(piece);
  return u.slot_begin[unit] + (u.chunks[unit] > 1 ? piece - u.piece_begin[unit] : 0);
}

int64_t SasUnits::UnitOfPiece(int64_t piece) const {
  return std::upper_bound(piece_begin.begin(), piece_begin.end(), piece) - piece_begin.begin() - 1;
}

SasUnits SasWorkUnits(const SasConfig& c) {
  SasUnits u;
  // M block = tokens_per_block * G rows of M = S1 * G: one token for SCFA, about 256 rows
  // otherwise (the NPU's mBaseSize: 64 with G = 64, else 256), whole tokens always.
  const bool scfa = c.has_cmp && c.cmp_topk > 0;
  u.group = c.group();
  u.tokens_per_block = scfa ? 1 : std::max<int64_t>(1, 256 / c.group());
  u.begin.assign(c.batch + 1, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    u.begin[b + 1] = u.begin[b] + (c.q_len[b] + u.tokens_per_block - 1) / u.tokens_per_block;
  const int64_t units = u.total();
  u.batch_of.resize(units);
  u.tokens.resize(units);
  std::vector<int64_t> cap(units, 0);  // longest key list of the unit's tokens (capacity)
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s1 = c.q_len[b], s2 = c.kv_len[b];
    for (int64_t x = u.begin[b]; x < u.begin[b + 1]; ++x) {
      const int64_t t0 = (x - u.begin[b]) * u.tokens_per_block;
      const int64_t t1 = std::min(s1, t0 + u.tokens_per_block);
      u.batch_of[x] = b;
      u.tokens[x] = t1 - t0;
      for (int64_t i = t0; i < t1; ++i) cap[x] = std::max(cap[x], KeysOfRow(c, s2 - s1 + i, s2));
    }
  }
  // The S2 grid: with few units (decode with a small batch) each unit's lists are cut into
  // chunks of whole tiles, so that up to 32 workers find work: n = the largest power of two at
  // most kSasSplitTarget / units and tiles / kSasMinChunkTiles, n - 1 chunks of floor(tiles / n)
  // tiles and the last one the rest (at most n - 1 tiles longer). Powers of two give every
  // power-of-two worker count equal shares (10 tiles: 5 + 5, not 4 + 4 + 2, which leaves one of
  // two workers 6 tiles); otherwise no split (the merge costs more than idle workers would).
  // Configuration only, never the worker count: that is what makes the result independent of
  // the plan.
  const int64_t want = units < kSasSplitBelowUnits
                           ? (kSasSplitTarget + units - 1) / std::max<int64_t>(units, 1)
                           : 1;
  u.chunks.assign(units, 1);
  u.chunk_keys.assign(units, 0);
  u.piece_begin.assign(units + 1, 0);
  u.slot_begin.assign(units + 1, 0);
  u.slot_row0.assign(units, -1);
  for (int64_t x = 0; x < units; ++x) {
    const int64_t tiles = std::max<int64_t>(1, (cap[x] + kSasTileKeys - 1) / kSasTileKeys);
    const int64_t most = std::min(want, std::max<int64_t>(1, tiles / kSasMinChunkTiles));
    int64_t n = 1;
    while (n * 2 <= most) n *= 2;
    u.chunk_keys[x] = tiles / n * kSasTileKeys;  // the last chunk takes the rest
    u.chunks[x] = n;
    u.piece_begin[x + 1] = u.piece_begin[x] + u.chunks[x];
    const bool split = u.chunks[x] > 1;
    u.slot_begin[x + 1] = u.slot_begin[x] + (split ? u.chunks[x] : 0);
    if (split) {
      u.slot_row0[x] = u.state_rows;
      u.state_rows += u.chunks[x] * u.rows(x);
    }
  }
  return u;
}

std::vector<int64_t> SasPieceCosts(const SasConfig& c, const SasUnits& u) {
  // Summed in double: exact (integers below 2^53) for every realistic configuration, and no
  // overflow for absurd ones (2^31 tokens x 2^31 keys x many heads), whose costs are scaled so
  // that their total stays below 2^62 (the plan's prefix sums are int64).
  std::vector<double> cost(u.pieces(), 0.0);
  const int64_t items_per_token = (c.group() + 127) / 128;  // engine items hold <= 128 heads
  for (int64_t x = 0; x < u.total(); ++x) {
    const int64_t b = u.batch_of[x], s1 = c.q_len[b], s2 = c.kv_len[b];
    const int64_t t0 = (x - u.begin[b]) * u.tokens_per_block;
    for (int64_t s = 0; s < u.chunks[x]; ++s) {
      const int64_t lo = s * u.chunk_keys[x];
      const bool last = s + 1 == u.chunks[x];
      double& k = cost[u.piece_begin[x] + s];
      for (int64_t i = t0; i < t0 + u.tokens[x]; ++i) {
        const int64_t keys = KeysOfRow(c, s2 - s1 + i, s2);
        const int64_t mine = std::max<int64_t>(
            0, (last ? keys : std::min(keys, lo + u.chunk_keys[x])) - lo);
        k += static_cast<double>(kCostPerProduct) * static_cast<double>(c.n1) *
                 static_cast<double>(mine) +
             static_cast<double>(kCostPerItem * items_per_token);
      }
    }
  }
  double total = 0;
  for (double x : cost) total += x;
  const double scale = total > 0x1p62 ? 0x1p62 / total : 1.0;
  std::vector<int64_t> out(cost.size());
  for (size_t i = 0; i < cost.size(); ++i) out[i] = static_cast<int64_t>(cost[i] * scale);
  return out;
}

int64_t SasDefaultWorkers() {
  return std::clamp<int64_t>(GetNumThreads(), 1, kSasMaxWorkers);
}

std::vector<int32_t> SasSnapshot(const SasConfig& c, const SasUnits& u, int64_t num_workers) {
  std::vector<int32_t> s(kSnapCount, 0);
  uint64_t h = 0xCBF29CE484222325ull;
  int64_t total_q = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    h = Fnv1a(Fnv1a(h, c.q_len[b]), c.kv_len[b]);
    total_q += c.q_len[b];
  }
  s[kSnapMagic] = kSasMagic;
  s[kSnapVersion] = kSasSnapshotVersion;
  s[kSnapBatch] = static_cast<int32_t>(c.batch);
  s[kSnapN1] = static_cast<int32_t>(c.n1);
  s[kSnapN2] = static_cast<int32_t>(c.n2);
  s[kSnapD] = static_cast<int32_t>(c.d);
  s[kSnapLayoutQ] = static_cast<int32_t>(c.layout_q);
  s[kSnapHasCmp] = c.has_cmp ? 1 : 0;
  s[kSnapCmpRatio] = static_cast<int32_t>(c.cmp_ratio);
  s[kSnapCmpTopk] = static_cast<int32_t>(c.cmp_topk);
  s[kSnapOriMaskMode] = static_cast<int32_t>(c.ori_mask_mode);
  s[kSnapCmpMaskMode] = static_cast<int32_t>(c.cmp_mask_mode);
  s[kSnapOriWinLeft] = static_cast<int32_t>(c.ori_win_left);
  s[kSnapOriWinRight] = static_cast<int32_t>(c.ori_win_right);
  s[kSnapTokensPerBlock] = static_cast<int32_t>(u.tokens_per_block);
  s[kSnapUnits] = static_cast<int32_t>(u.total());
  s[kSnapWorkers] = static_cast<int32_t>(num_workers);
  s[kSnapTotalQ] = static_cast<int32_t>(total_q);
  s[kSnapLenHashLo] = static_cast<int32_t>(static_cast<uint32_t>(h));
  s[kSnapLenHashHi] = static_cast<int32_t>(static_cast<uint32_t>(h >> 32));
  s[kSnapPieces] = static_cast<int32_t>(u.pieces());
  s[kSnapSlots] = static_cast<int32_t>(u.slots());
  return s;
}

std::vector<int32_t> SasReduceRecords(const SasConfig& c, const SasUnits& u) {
  std::vector<int32_t> r(kSasSnapshotBase - kSasReduceBase, 0);
  int64_t split_units = 0;
  for (int64_t x = 0; x < u.total(); ++x) split_units += u.chunks[x] > 1;
  if (split_units == 0) return r;
  // Split units are fewer than kSasSplitBelowUnits (4), so each may take 72 / 3 = 24 records.
  const int64_t max_parts = kSasReduceRecords / split_units;
  int64_t v = 0;
  for (int64_t x = 0; x < u.total(); ++x) {
    if (u.chunks[x] <= 1) continue;
    const int64_t rows = u.rows(x);
    const int64_t parts = std::clamp<int64_t>((rows + kSasReduceRows - 1) / kSasReduceRows, 1,
                                              max_parts);
    const int64_t per = (rows + parts - 1) / parts;
    for (int64_t r0 = 0; r0 < rows; r0 += per, ++v) {
      int32_t* rec = &r[v * kSasRecordWords];
      rec[kFdEnable] = 1;
      rec[kFdBn2] = static_cast<int32_t>(u.batch_of[x] * c.n2);
      rec[kFdM] = static_cast<int32_t>(x - u.begin[u.batch_of[x]]);
      rec[kFdWorkspaceIdx] = static_cast<int32_t>(u.slot_begin[x]);
      rec[kFdWorkspaceNum] = static_cast<int32_t>(u.chunks[x]);
      rec[kFdMStart] = static_cast<int32_t>(r0);
      rec[kFdMNum] = static_cast<int32_t>(std::min(per, rows - r0));
    }
  }
  return r;
}

std::vector<int32_t> PlanSas(const SasConfig& c, int64_t num_workers) {
  OPENFIA_CHECK(num_workers >= 1 && num_workers <= kSasMaxWorkers, "num_workers",
                Str("must be in [1, ", kSasMaxWorkers, "]"), num_workers);
  const SasUnits u = SasWorkUnits(c);
  const std::vector<int64_t> cost = SasPieceCosts(c, u);
  std::vector<int64_t> prefix(cost.size() + 1, 0);
  for (size_t i = 0; i < cost.size(); ++i) prefix[i + 1] = prefix[i] + cost[i];
  const int64_t total = prefix.back(), units = u.pieces();

  std::vector<int32_t> words(kSasMetadataWords, 0);
  // Over the pieces (unit, S2 chunk) in order: worker w ends at the piece boundary nearest to the
  // ideal cut (w+1)/W of the total cost (ties toward the earlier boundary), never before the
  // previous cut and never empty-handed while pieces remain for it; the last worker takes the
  // rest. Equivalent to META's per-core limit "remaining / cores left" with a tolerance of half
  // the boundary piece's cost; with S2 chunks this is its FlashDecode split (supportFd).
  int64_t start = 0;
  for (int64_t w = 0; w < num_workers; ++w) {
    int64_t end = units;
    if (w + 1 < num_workers) {
      const int64_t target = (total * (w + 1) + num_workers - 1) / num_workers;
      end = std::lower_bound(prefix.begin() + start, prefix.end(), target) - prefix.begin();
      end = std::min(end, units);
      if (end > start + 1 && prefix[end] - target > target - prefix[end - 1]) --end;
      if (end == start && start < units) end = start + 1;
    }
    int32_t* rec = &words[w * kSasRecordWords];
    if (end <= start) continue;  // idle: only CORE_ENABLE (= 0) is meaningful
    rec[kCoreEnable] = 1;
    Cursor(c, u, start, &rec[kBn2Start], &rec[kMStart], &rec[kS2Start]);
    Cursor(c, u, end, &rec[kBn2End], &rec[kMEnd], &rec[kS2End]);
    rec[kFirstFdWorkspaceIdx] = static_cast<int32_t>(SasSlotsBefore(u, start));
    start = end;
  }
  const std::vector<int32_t> reduce = SasReduceRecords(c, u);
  std::copy(reduce.begin(), reduce.end(), words.begin() + kSasReduceBase);
  const std::vector<int32_t> snap = SasSnapshot(c, u, num_workers);
  std::copy(snap.begin(), snap.end(), words.begin() + kSasSnapshotBase);
  return words;
}

}  // namespace openfia::internal

namespace openfia {

void SparseAttnSharedkvMetadata(const SasMetadataArgs& args, const TensorView& metadata) {
  using namespace internal;
  OpScope scope("npu_sparse_attn_sharedkv_metadata");
  try {
    Snapshot snap;
    const SasConfig c = ValidateSasMetadata(SnapshotSasMetadata(args, &snap));
    CheckSasMetadataTensor(metadata, "must be provided (the output)");
    CheckOutputsDisjoint({{"metadata", &metadata}},
                         {{"cu_seqlens_q", &args.cu_seqlens_q},
                          {"cu_seqlens_ori_kv", &args.cu_seqlens_ori_kv},
                          {"cu_seqlens_cmp_kv", &args.cu_seqlens_cmp_kv},
                          {"seqused_q", &args.seqused_q}, {"seqused_kv", &args.seqused_kv}});
    const int64_t workers = args.num_workers > 0 ? args.num_workers : SasDefaultWorkers();
    const std::vector<int32_t> words = PlanSas(c, workers);
    std::memcpy(metadata.data, words.data(), words.size() * sizeof(int32_t));
  } catch (const std::bad_alloc&) {
    FailAlloc("the work plan", -1);
  }
}

}  // namespace openfia
