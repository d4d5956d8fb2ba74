// openfia internal: the stages of SparseAttnSharedkv and SparseAttnSharedkvMetadata calls.
//
// Both ops reduce their arguments to one SasConfig (what the work split depends on and what the
// metadata snapshot records). The consumer then canonicalizes into the shared Problem (ori cache
// = k/v, cmp cache = the second key source k2/v2, per-row key lists) and dispatches like FIA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/problem.h"
#include "openfia/sparse_attn_sharedkv.h"

namespace openfia::internal {

struct SasConfig {
  int64_t batch = 0;
  int64_t n1 = 0, n2 = 1, d = 0;  // query heads, KV heads (1), head dim
  int64_t layout_q = 0;           // 0: BSND, 1: TND
  bool has_cmp = false;
  int64_t cmp_ratio = 0;  // 0 without cmp_kv
  int64_t cmp_topk = 0;   // > 0: SCFA with that many index entries per row; 0: CFA or no cmp
  int64_t ori_mask_mode = 4, cmp_mask_mode = 3, ori_win_left = 127, ori_win_right = 0;
  std::vector<int64_t> q_len;   // [batch] S1 of each batch
  std::vector<int64_t> kv_len;  // [batch] S2 of each batch (ori tokens)

  int64_t group() const { return n1 / n2; }
};

// sas_validate.cc: every documented constraint in a fixed order; throws openfia::Error naming the
// argument, the rule and the value. Reads only host-side index tensors, never q or the caches.
SasConfig ValidateSasMetadata(const SasMetadataArgs& args);
SasOutputSpec ValidateSas(const SasArgs& args, SasConfig* config);

// sas_canonicalize.cc: the validated call as a Problem (ori cache = k = v, paged; cmp cache =
// k2 = v2, paged; one key list per valid query row: window tokens, then compressed entries).
// `lse` is absent unless return_softmax_lse.
Problem CanonicalizeSas(const SasArgs& args, const SasConfig& config, const TensorView& out,
                        const TensorView& lse);

// ---- the plan (metadata_plan.cc) ----------------------------------------------------------

// Metadata word layout (SEMANTICS.md 3.4, master sparse_attn_sharedkv_metadata.h).
inline constexpr int64_t kSasRecordWords = 8;
inline constexpr int64_t kSasReduceBase = 288;  // 36 compute records * 8 words
inline constexpr int64_t kSasReduceRecords = 72;
inline constexpr int64_t kSasSnapshotBase = 864;
enum SasRecordWord : int64_t {
  kCoreEnable = 0,
  kBn2Start = 1, kMStart = 2, kS2Start = 3,
  kBn2End = 4, kMEnd = 5, kS2End = 6,
  kFirstFdWorkspaceIdx = 7,
};
// Snapshot words (offsets from kSasSnapshotBase).
enum SasSnapshotWord : int64_t {
  kSnapMagic = 0, kSnapVersion, kSnapBatch, kSnapN1, kSnapN2, kSnapD, kSnapLayoutQ,
  kSnapHasCmp, kSnapCmpRatio, kSnapCmpTopk, kSnapOriMaskMode, kSnapCmpMaskMode,
  kSnapOriWinLeft, kSnapOriWinRight, kSnapTokensPerBlock, kSnapUnits, kSnapWorkers,
  kSnapTotalQ, kSnapLenHashLo, kSnapLenHashHi, kSnapCount
};
inline constexpr int32_t kSasMagic = 0x4F465341;  // "OFSA"
inline constexpr int32_t kSasSnapshotVersion = 1;

// Work units are (bn2, m): M blocks of tokens_per_block query tokens (x group heads) of one batch,
// numbered in (bn2, m) order. begin[b] is the first unit of batch b; begin[batch] the total.
struct SasUnits {
  int64_t tokens_per_block = 1;
  std::vector<int64_t> begin;  // [batch + 1]
  int64_t total() const { return begin.back(); }
};
SasUnits SasWorkUnits(const SasConfig& config);

// Cost of each unit in the cost model of docs/sparse_attn_sharedkv.md ("key-row products").
std::vector<int64_t> SasUnitCosts(const SasConfig& config, const SasUnits& units);

// The int32[1024] plan for `num_workers` (1..36) compute workers, with the snapshot.
std::vector<int32_t> PlanSas(const SasConfig& config, int64_t num_workers);

// Default worker count: min(GetNumThreads(), 36).
int64_t SasDefaultWorkers();

// The snapshot words [kSasSnapshotBase, kSasSnapshotBase + kSnapCount) for `config`, planned for
// `num_workers`; FNV-1a 64 of the per-batch (q_len, kv_len) pairs in kSnapLenHashLo/Hi.
std::vector<int32_t> SasSnapshot(const SasConfig& config, const SasUnits& units,
                                 int64_t num_workers);

// ---- verification (metadata_verify.cc) -----------------------------------------------------

// A compute worker's units [unit_begin, unit_end).
struct SasWorkerRange {
  int64_t unit_begin = 0, unit_end = 0;
};

// Checks the snapshot against `config` and that the enabled compute records tile every work unit
// exactly once; returns their ranges in record order. Throws openfia::Error naming `metadata`.
std::vector<SasWorkerRange> VerifySasPlan(const SasConfig& config, const int32_t* words);

// The tensor form every metadata argument must have: present (else the rule `provided_rule`),
// int32, shape [kSasMetadataWords], contiguous with a non-null pointer. Shared by
// SparseAttnSharedkvMetadata (its output), VerifySasMetadata and SparseAttnSharedkv's input.
void CheckSasMetadataTensor(const TensorView& metadata, const char* provided_rule);

// Reads element i of a 1-D integer tensor (int32 or int64) through its stride.
int64_t ReadIndex(const TensorView& t, int64_t i);

}  // namespace openfia::internal
