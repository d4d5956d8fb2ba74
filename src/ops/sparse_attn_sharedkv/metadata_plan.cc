// openfia: SparseAttnSharedkvMetadata, the work plan of SparseAttnSharedkv.
//
// Work units are (bn2, m) pairs: M blocks of query tokens (with all heads of their KV group) of
// one batch, numbered in (bn2, m) order, as in the NPU's metadata (SEMANTICS 3.4). As on master
// (supportFd = false), no unit is split along S2, so the S2 cursors stay 0 and no reduce record
// is enabled. The units are cut into at most 36 contiguous ranges of near-equal cost, one per
// compute worker (docs/sparse_attn_sharedkv.md, "Metadata", has the cost model). The plan depends
// only on the configuration and the worker count, never on timing, so it is deterministic.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "openfia/runtime.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {
namespace {

// Fixed per-query-row work (load q, write the output row, softmax bookkeeping) in units of one
// key-row product, so that rows without keys still cost something. A guess until the engine
// calibrates it; any value gives a correct plan.
constexpr int64_t kRowOverheadKeys = 16;

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

// Unit index -> cursor (bn2, m); the total maps to (batch * n2, 0).
void Cursor(const SasConfig& c, const SasUnits& u, int64_t unit, int32_t* bn2, int32_t* m) {
  if (unit >= u.total()) {
    *bn2 = static_cast<int32_t>(c.batch * c.n2);
    *m = 0;
    return;
  }
  // The batch that holds `unit` (empty batches hold none).
  const int64_t b = std::upper_bound(u.begin.begin(), u.begin.end(), unit) - u.begin.begin() - 1;
  *bn2 = static_cast<int32_t>(b * c.n2);
  *m = static_cast<int32_t>(unit - u.begin[b]);
}

}  // namespace

SasUnits SasWorkUnits(const SasConfig& c) {
  SasUnits u;
  // M block = tokens_per_block * G rows of M = S1 * G: one token for SCFA, about 256 rows
  // otherwise (the NPU's mBaseSize: 64 with G = 64, else 256), whole tokens always.
  const bool scfa = c.has_cmp && c.cmp_topk > 0;
  u.tokens_per_block = scfa ? 1 : std::max<int64_t>(1, 256 / c.group());
  u.begin.assign(c.batch + 1, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    u.begin[b + 1] = u.begin[b] + (c.q_len[b] + u.tokens_per_block - 1) / u.tokens_per_block;
  return u;
}

std::vector<int64_t> SasUnitCosts(const SasConfig& c, const SasUnits& u) {
  std::vector<int64_t> cost(u.total(), 0);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t s1 = c.q_len[b], s2 = c.kv_len[b];
    for (int64_t i = 0; i < s1; ++i) {
      const int64_t keys = KeysOfRow(c, s2 - s1 + i, s2);
      cost[u.begin[b] + i / u.tokens_per_block] += c.n1 * (keys + kRowOverheadKeys);
    }
  }
  return cost;
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
  return s;
}

std::vector<int32_t> PlanSas(const SasConfig& c, int64_t num_workers) {
  OPENFIA_CHECK(num_workers >= 1 && num_workers <= kSasMaxWorkers, "num_workers",
                Str("must be in [1, ", kSasMaxWorkers, "]"), num_workers);
  const SasUnits u = SasWorkUnits(c);
  const std::vector<int64_t> cost = SasUnitCosts(c, u);
  std::vector<int64_t> prefix(cost.size() + 1, 0);
  for (size_t i = 0; i < cost.size(); ++i) prefix[i + 1] = prefix[i] + cost[i];
  const int64_t total = prefix.back(), units = u.total();

  std::vector<int32_t> words(kSasMetadataWords, 0);
  // Worker w ends at the unit boundary nearest to the ideal cut (w+1)/W of the total cost (ties
  // toward the earlier boundary), never before the previous cut and never empty-handed while
  // units remain for it; the last worker takes the rest. Equivalent to META's per-core limit
  // "remaining / cores left" with a tolerance of half the boundary unit's cost.
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
    Cursor(c, u, start, &rec[kBn2Start], &rec[kMStart]);
    Cursor(c, u, end, &rec[kBn2End], &rec[kMEnd]);
    rec[kS2Start] = rec[kS2End] = 0;    // no split along S2 (supportFd = false)
    rec[kFirstFdWorkspaceIdx] = 0;
    start = end;
  }
  const std::vector<int32_t> snap = SasSnapshot(c, u, num_workers);
  std::copy(snap.begin(), snap.end(), words.begin() + kSasSnapshotBase);
  return words;
}

}  // namespace openfia::internal

namespace openfia {

void SparseAttnSharedkvMetadata(const SasMetadataArgs& args, const TensorView& metadata) {
  using namespace internal;
  OpScope scope("npu_sparse_attn_sharedkv_metadata");
  const SasConfig c = ValidateSasMetadata(args);
  CheckSasMetadataTensor(metadata, "must be provided (the output)");
  const int64_t workers = args.num_workers > 0 ? args.num_workers : SasDefaultWorkers();
  const std::vector<int32_t> words = PlanSas(c, workers);
  std::memcpy(metadata.data, words.data(), words.size() * sizeof(int32_t));
}

}  // namespace openfia
