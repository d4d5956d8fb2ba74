// openfia: checks a SparseAttnSharedkv metadata tensor before anyone trusts it.
//
// The NPU trusts its metadata; a stale one (made for other sequence lengths) silently computes
// the wrong rows or reads past a batch. Here a plan is accepted only if its snapshot names the
// same configuration, its compute records tile the (unit, S2 chunk) pieces exactly once and its
// reduce records are those of the configuration's S2 grid; any worker count 1..36 and any order
// of the compute records is fine, because they only distribute work.
#include <algorithm>
#include <new>
#include <string>

#include "common/check.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {
namespace {

[[noreturn]] void Bad(const std::string& rule, const std::string& actual) {
  Fail(ErrorCode::kInvalidArgument, "metadata", rule, actual);
}

const char* SnapshotFieldName(int64_t k) {
  switch (k) {
    case kSnapBatch: return "batch size";
    case kSnapN1: return "num_heads_q";
    case kSnapN2: return "num_heads_kv";
    case kSnapD: return "head_dim";
    case kSnapLayoutQ: return "layout_q (0 BSND, 1 TND)";
    case kSnapHasCmp: return "has_cmp_kv";
    case kSnapCmpRatio: return "cmp_ratio";
    case kSnapCmpTopk: return "cmp_topk (K2 of cmp_sparse_indices; 0 without)";
    case kSnapOriMaskMode: return "ori_mask_mode";
    case kSnapCmpMaskMode: return "cmp_mask_mode";
    case kSnapOriWinLeft: return "ori_win_left";
    case kSnapOriWinRight: return "ori_win_right";
    case kSnapTokensPerBlock: return "query tokens per M block";
    case kSnapUnits: return "number of work units";
    case kSnapTotalQ: return "total query tokens";
    case kSnapLenHashLo:
    case kSnapLenHashHi: return "per-batch query/KV lengths (hash)";
    case kSnapPieces: return "number of (unit, S2 chunk) pieces";
    case kSnapSlots: return "number of split-KV workspace slots";
    default: return "snapshot word";
  }
}

// Cursor (bn2, m, s2) -> piece index, or -1 when it names no piece boundary. (bn2, units of b,
// 0) names the start of the next batch's first unit, as the NPU's end cursors do.
int64_t Linear(const SasConfig& c, const SasUnits& u, int64_t bn2, int64_t m, int64_t s2) {
  const int64_t bn2_total = c.batch * c.n2;
  if (bn2 < 0 || bn2 > bn2_total || m < 0 || s2 < 0) return -1;
  if (bn2 == bn2_total) return m == 0 && s2 == 0 ? u.pieces() : -1;
  const int64_t b = bn2 / c.n2;
  const int64_t units_b = u.begin[b + 1] - u.begin[b];
  if (m == units_b) return s2 == 0 ? u.piece_begin[u.begin[b + 1]] : -1;
  if (m > units_b) return -1;
  const int64_t unit = u.begin[b] + m;
  return s2 < u.chunks[unit] ? u.piece_begin[unit] + s2 : -1;
}

}  // namespace

std::vector<SasWorkerRange> VerifySasPlan(const SasConfig& c, const int32_t* words) {
  const SasUnits u = SasWorkUnits(c);
  const int32_t* snap = words + kSasSnapshotBase;
  if (snap[kSnapMagic] != kSasMagic)
    Bad("must come from npu_sparse_attn_sharedkv_metadata (no openfia configuration snapshot in "
        "words 864..1023)",
        Str("word 864 = ", snap[kSnapMagic]));
  if (snap[kSnapVersion] != kSasSnapshotVersion)
    Bad(Str("snapshot version must be ", kSasSnapshotVersion), Str(snap[kSnapVersion]));
  const std::vector<int32_t> want = SasSnapshot(c, u, snap[kSnapWorkers]);
  for (int64_t k = kSnapBatch; k < kSnapCount; ++k) {
    if (k == kSnapWorkers) continue;
    if (snap[k] != want[k])
      Bad(Str("was made for another configuration: ", SnapshotFieldName(k), " differs"),
          Str("metadata ", snap[k], ", this call ", want[k]));
  }
  const int64_t workers = snap[kSnapWorkers];
  if (workers < 1 || workers > kSasMaxWorkers)
    Bad(Str("planned worker count must be in [1, ", kSasMaxWorkers, "]"), Str(workers));
  for (int64_t w = kSasSnapshotBase + kSnapCount; w < kSasMetadataWords; ++w)
    if (words[w] != 0) Bad("unused words must be 0", Str("word ", w, " = ", words[w]));
  // The reduce records follow from the S2 grid, i.e. from the configuration alone.
  const std::vector<int32_t> reduce = SasReduceRecords(c, u);
  for (int64_t w = kSasReduceBase; w < kSasSnapshotBase; ++w)
    if (words[w] != reduce[w - kSasReduceBase])
      Bad("reduce records must be those of this configuration's S2 split",
          Str("word ", w, " = ", words[w], ", expected ", reduce[w - kSasReduceBase]));

  std::vector<SasWorkerRange> ranges;
  for (int64_t core = 0; core < kSasMaxWorkers; ++core) {
    const int32_t* rec = words + core * kSasRecordWords;
    if (rec[kCoreEnable] == 0) {
      for (int64_t k = 1; k < kSasRecordWords; ++k)
        if (rec[k] != 0)
          Bad("an idle compute record must be all 0", Str("core ", core, " word ", k, " = ", rec[k]));
      continue;
    }
    if (rec[kCoreEnable] != 1)
      Bad("CORE_ENABLE must be 0 or 1", Str("core ", core, ": ", rec[kCoreEnable]));
    if (core >= workers)
      Bad(Str("only the first ", workers, " compute records may be enabled"),
          Str("core ", core));
    const int64_t lo = Linear(c, u, rec[kBn2Start], rec[kMStart], rec[kS2Start]);
    const int64_t hi = Linear(c, u, rec[kBn2End], rec[kMEnd], rec[kS2End]);
    if (lo < 0 || hi < 0)
      Bad("compute cursors must name (unit, S2 chunk) pieces of this configuration",
          Str("core ", core, ": (", rec[kBn2Start], ", ", rec[kMStart], ", ", rec[kS2Start],
              ") .. (", rec[kBn2End], ", ", rec[kMEnd], ", ", rec[kS2End], ")"));
    if (lo >= hi)
      Bad("an enabled compute record must cover at least one piece",
          Str("core ", core, ": pieces [", lo, ", ", hi, ")"));
    if (rec[kFirstFdWorkspaceIdx] != SasSlotsBefore(u, lo))
      Bad("FIRST_FD_DATA_WORKSPACE_IDX must be the workspace slots of the pieces before the start",
          Str("core ", core, ": ", rec[kFirstFdWorkspaceIdx], ", expected ", SasSlotsBefore(u, lo)));
    ranges.push_back({lo, hi});
  }
  std::vector<SasWorkerRange> sorted = ranges;
  std::sort(sorted.begin(), sorted.end(),
            [](const SasWorkerRange& a, const SasWorkerRange& b) {
              return a.piece_begin < b.piece_begin;
            });
  int64_t next = 0;
  for (const SasWorkerRange& r : sorted) {
    if (r.piece_begin != next)
      Bad("compute records must cover every piece exactly once",
          r.piece_begin > next ? Str("pieces [", next, ", ", r.piece_begin, ") are not covered")
                               : Str("pieces [", r.piece_begin, ", ", next, ") are covered twice"));
    next = r.piece_end;
  }
  if (next != u.pieces())
    Bad("compute records must cover every piece exactly once",
        Str("pieces [", next, ", ", u.pieces(), ") are not covered"));
  return ranges;
}

void CheckSasMetadataTensor(const TensorView& metadata, const char* provided_rule) {
  OPENFIA_CHECK(metadata.defined(), "metadata", provided_rule, "None");
  OPENFIA_CHECK(metadata.dtype == DType::kInt32, "metadata", "must have dtype int32",
                DTypeName(metadata.dtype));
  OPENFIA_CHECK(metadata.dim() == 1 && metadata.size(0) == kSasMetadataWords, "metadata",
                Str("must have shape [", kSasMetadataWords, "]"), metadata.shape_string());
  OPENFIA_CHECK(metadata.data != nullptr, "metadata", "data must not be a null pointer", "null");
  OPENFIA_CHECK(metadata.is_contiguous(), "metadata", "must be contiguous", "strides ",
                metadata.strides);
}

}  // namespace openfia::internal

namespace openfia {

void VerifySasMetadata(const SasMetadataArgs& args, const TensorView& metadata) {
  using namespace internal;
  OpScope scope("npu_sparse_attn_sharedkv_metadata");
  try {
    Snapshot snap;
    const SasConfig c = ValidateSasMetadata(SnapshotSasMetadata(args, &snap));
    const TensorView words = snap.Take(metadata, "metadata");
    CheckSasMetadataTensor(words, "must be provided");
    VerifySasPlan(c, static_cast<const int32_t*>(words.data));
  } catch (const std::bad_alloc&) {
    FailAlloc("the work plan", -1);
  }
}

}  // namespace openfia
