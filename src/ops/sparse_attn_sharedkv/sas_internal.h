// openfia internal: the stages of SparseAttnSharedkv and SparseAttnSharedkvMetadata calls.
//
// Both ops reduce their arguments to one SasConfig (what the work split depends on and what the
// metadata snapshot records). The consumer then canonicalizes into the shared Problem (ori cache
// = k/v, cmp cache = the second key source k2/v2, per-row key lists) and dispatches like FIA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/problem.h"
#include "common/views.h"
#include "engine/engine.h"
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

// sas_validate.cc: `a` with its index tensors (lengths, block tables, sparse indices, metadata)
// replaced by copies `snap` owns (common/views.h Snapshot); validation and computation read only
// those.
SasArgs SnapshotSas(const SasArgs& a, Snapshot* snap);
SasMetadataArgs SnapshotSasMetadata(const SasMetadataArgs& a, Snapshot* snap);

// Query tokens (batch x max_seqlen_q, or T) one SparseAttnSharedkvMetadata call may plan: the
// plan's memory (~100 bytes per work unit) would otherwise follow two scalars without bound.
// 4M tokens of DeepSeek-V4 queries (64 heads x 512) are 256 GiB, beyond any real call.
inline constexpr int64_t kSasMaxPlanTokens = int64_t{1} << 22;

// sas_validate.cc: every documented constraint in a fixed order; throws openfia::Error naming the
// argument, the rule and the value. Reads only host-side index tensors, never q or the caches.
SasConfig ValidateSasMetadata(const SasMetadataArgs& args);
SasOutputSpec ValidateSas(const SasArgs& args, SasConfig* config);

// sas_strict.cc: NPU-strict mode's rows (the NPU limits openfia relaxes); throws
// Error(kUnsupported) for the first one a validated call breaks (`args` null: the metadata op,
// whose configuration has no tensors). Both validations call it last when GetNpuStrict().
void EnforceSasNpuLimits(const SasArgs* args, const SasConfig& config);

// sas_canonicalize.cc: the validated call as a Problem (ori cache = k = v, paged; cmp cache =
// k2 = v2, paged; one key list per valid query row: window tokens, then compressed entries).
// `lse` is absent unless return_softmax_lse.
Problem CanonicalizeSas(const SasArgs& args, const SasConfig& config, const TensorView& out,
                        const TensorView& lse);

// ---- the plan (metadata_plan.cc) ----------------------------------------------------------

// Metadata word layout (docs/semantics.md 3.4).
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
// Reduce (FlashDecode) record words (offsets from kSasReduceBase + 8 * v).
enum SasReduceWord : int64_t {
  kFdEnable = 0, kFdBn2 = 1, kFdM = 2, kFdWorkspaceIdx = 3, kFdWorkspaceNum = 4,
  kFdMStart = 5, kFdMNum = 6,
};
// Snapshot words (offsets from kSasSnapshotBase).
enum SasSnapshotWord : int64_t {
  kSnapMagic = 0, kSnapVersion, kSnapBatch, kSnapN1, kSnapN2, kSnapD, kSnapLayoutQ,
  kSnapHasCmp, kSnapCmpRatio, kSnapCmpTopk, kSnapOriMaskMode, kSnapCmpMaskMode,
  kSnapOriWinLeft, kSnapOriWinRight, kSnapTokensPerBlock, kSnapUnits, kSnapWorkers,
  kSnapTotalQ, kSnapLenHashLo, kSnapLenHashHi, kSnapPieces, kSnapSlots, kSnapCount
};
inline constexpr int32_t kSasMagic = 0x4F465341;  // "OFSA"
inline constexpr int32_t kSasSnapshotVersion = 3;  // 2: S2 chunk grid and reduce records;
                                                   // 3: power-of-two chunk counts

// Key-list positions per S2 tile of the engine: chunk boundaries are multiples of it.
inline constexpr int64_t kSasTileKeys = 64;
// Units (M blocks) below which the S2 axis is split, and the number of pieces then aimed at.
inline constexpr int64_t kSasSplitBelowUnits = 4;
inline constexpr int64_t kSasSplitTarget = kSasMaxWorkers;
// Fewest tiles of a split chunk. A chunk pays its engine item, its partial-state write and its
// share of the merge whatever its length: ~35 us for 64 rows of 512 channels on the AMX engine
// (0.4x the attention of 192 keys there), ~20 us on the AVX2 engine (0.06x). 3 splits the
// 384-key lists of a short DeepSeek-V4 context (128 window + 256 compressed entries) over two
// workers; 4 would leave one worker idle.
inline constexpr int64_t kSasMinChunkTiles = 3;
// Rows per reduce record (at most; fewer records when 72 would not suffice).
inline constexpr int64_t kSasReduceRows = 16;

// Work units are (bn2, m): M blocks of tokens_per_block query tokens (x group heads) of one batch,
// numbered in (bn2, m) order. begin[b] is the first unit of batch b; begin[batch] the total.
//
// Each unit's key lists are cut on a fixed grid into `chunks[u]` S2 chunks of chunk_keys[u]
// list positions (the last one takes the rest); the grid depends on the configuration only
// (sequence lengths, never the indices or the worker count), so every chunk's partial state is
// computed the same way whoever runs it. A piece is one (unit, chunk); pieces are numbered
// unit-major. A unit with chunks > 1 ("split") keeps each chunk's partial states in workspace
// slot rows [slot_row0[u] + s * rows(u), + rows(u)) for chunk s; they are merged in chunk order.
struct SasUnits {
  int64_t tokens_per_block = 1;
  int64_t group = 1;
  std::vector<int64_t> begin;        // [batch + 1]
  std::vector<int64_t> batch_of;     // [units]
  std::vector<int64_t> tokens;       // [units] query tokens of the unit
  std::vector<int64_t> chunks;       // [units] >= 1
  std::vector<int64_t> chunk_keys;   // [units] multiple of kSasTileKeys
  std::vector<int64_t> piece_begin;  // [units + 1]
  std::vector<int64_t> slot_begin;   // [units + 1] workspace slots (split chunks) before unit u
  std::vector<int64_t> slot_row0;    // [units] first workspace row of a split unit, else -1
  int64_t state_rows = 0;
  int64_t total() const { return begin.back(); }
  int64_t pieces() const { return piece_begin.back(); }
  int64_t slots() const { return slot_begin.back(); }
  int64_t rows(int64_t u) const { return tokens[u] * group; }
  int64_t UnitOfPiece(int64_t piece) const;  // the unit holding `piece` (< pieces())
};
SasUnits SasWorkUnits(const SasConfig& config);

// Workspace slots written by the pieces before `piece` (FIRST_FD_DATA_WORKSPACE_IDX of a compute
// record starting there: the slot its first split piece writes).
int64_t SasSlotsBefore(const SasUnits& units, int64_t piece);

// Cost model (docs/sparse_attn_sharedkv.md, "Cost model"; measured on this engine), in units of
// 100 ps per piece: per (query head x key) product and per engine item (one query token x its
// heads x the chunk, with its epilogue or partial-state write).
std::vector<int64_t> SasPieceCosts(const SasConfig& config, const SasUnits& units);

// The int32[1024] plan for `num_workers` (1..36) compute workers, with the snapshot.
std::vector<int32_t> PlanSas(const SasConfig& config, int64_t num_workers);

// Default worker count: min(GetNumThreads(), 36).
int64_t SasDefaultWorkers();

// The snapshot words [kSasSnapshotBase, kSasSnapshotBase + kSnapCount) for `config`, planned for
// `num_workers`; FNV-1a 64 of the per-batch (q_len, kv_len) pairs in kSnapLenHashLo/Hi.
std::vector<int32_t> SasSnapshot(const SasConfig& config, const SasUnits& units,
                                 int64_t num_workers);

// The reduce records [kSasReduceBase, kSasSnapshotBase) of `units` (configuration only): per
// split unit, in unit order, its rows in parts of at most kSasReduceRows (fewer parts when 72
// records would not suffice), each naming the unit's first workspace slot and chunk count.
std::vector<int32_t> SasReduceRecords(const SasConfig& config, const SasUnits& units);

// ---- verification (metadata_verify.cc) -----------------------------------------------------

// A compute worker's pieces [piece_begin, piece_end) (unit-major (unit, S2 chunk) order).
struct SasWorkerRange {
  int64_t piece_begin = 0, piece_end = 0;
};

// Checks the snapshot against `config`, that the enabled compute records tile every piece exactly
// once (with the right FIRST_FD_DATA_WORKSPACE_IDX) and that the reduce records are those of the
// configuration's S2 grid; returns the compute ranges in record order. Throws openfia::Error
// naming `metadata`.
std::vector<SasWorkerRange> VerifySasPlan(const SasConfig& config, const int32_t* words);

// The tensor form every metadata argument must have: present (else the rule `provided_rule`),
// int32, shape [kSasMetadataWords], contiguous with a non-null pointer. Shared by
// SparseAttnSharedkvMetadata (its output), VerifySasMetadata and SparseAttnSharedkv's input.
void CheckSasMetadataTensor(const TensorView& metadata, const char* provided_rule);

// ---- execution (sas_op.cc) -----------------------------------------------------------------

// The engine schedule of a verified plan: one task per compute record (its pieces' items: per
// query token and S2 chunk, the token's heads over the chunk's list positions), one merge per
// reduce record. N2 = 1 (validated), so a unit's rows are its tokens x G heads.
Schedule SasSchedule(const Problem& p, const SasConfig& config, const SasUnits& units,
                     const std::vector<SasWorkerRange>& ranges, const int32_t* words);

// SparseAttnSharedkv with optional engine timing (`stats` null: none; no timing on the reference).
void RunSas(const SasArgs& args, const TensorView& attention_out, const TensorView& softmax_lse,
            EngineStats* stats);

// For benchmarks (python/src/bindings_sas.cc redeclares it: the bindings see only include/):
// runs the op like SparseAttnSharedkv with engine timing (EngineStats): "workers" /
// "workers_cpu" (each compute record's busy wall / CPU seconds), "threads" (each thread's busy
// seconds), "merge" / "merge_cpu" (all merges), "compute_wall" / "merge_wall" (the phases).
// Empty when the reference ran.
std::map<std::string, std::vector<double>> SparseAttnSharedkvBusy(
    const SasArgs& args, const TensorView& attention_out, const TensorView& softmax_lse);

// Reads element i of a 1-D integer tensor (int32 or int64) through its stride.
int64_t ReadIndex(const TensorView& t, int64_t i);

}  // namespace openfia::internal
