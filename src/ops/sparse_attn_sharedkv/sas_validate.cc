// openfia: SparseAttnSharedkv(Metadata) argument validation. Every rule of the custom-op docs
// (cann-recipes-infer custom-npu_sparse_attn_sharedkv*.md) in a fixed order, with the relaxations
// of docs/sparse_attn_sharedkv.md (N1, D, block sizes, K2 free); every value that addresses memory
// (sequence lengths, block ids, sparse indices) is proven in range here, so no later stage can
// read out of bounds. Order: layouts, q, caches, modes, unsupported arguments, lengths, tables,
// indices, sinks, scale, metadata.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/views.h"
#include "openfia/runtime.h"
#include "openfia/sparse_attn_sharedkv.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {

int64_t ReadIndex(const TensorView& t, int64_t i) {
  const int64_t off = i * (t.strides.empty() ? 1 : t.strides[0]);
  if (t.dtype == DType::kInt64) return static_cast<const int64_t*>(t.data)[off];
  return static_cast<const int32_t*>(t.data)[off];
}

SasArgs SnapshotSas(const SasArgs& a, Snapshot* snap) {
  SasArgs c = a;
  // Without cmp_kv the compressed entries' indices and block table have no effect: not taken.
  const bool cmp = a.cmp_kv.defined();
  c.cmp_sparse_indices =
      cmp ? snap->Take(a.cmp_sparse_indices, "cmp_sparse_indices") : TensorView();
  c.ori_block_table = snap->Take(a.ori_block_table, "ori_block_table");
  c.cmp_block_table = cmp ? snap->Take(a.cmp_block_table, "cmp_block_table") : TensorView();
  c.cu_seqlens_q = snap->Take(a.cu_seqlens_q, "cu_seqlens_q");
  c.seqused_kv = snap->Take(a.seqused_kv, "seqused_kv");
  c.metadata = snap->Take(a.metadata, "metadata");
  return c;
}

SasMetadataArgs SnapshotSasMetadata(const SasMetadataArgs& a, Snapshot* snap) {
  SasMetadataArgs c = a;
  c.cu_seqlens_q = snap->Take(a.cu_seqlens_q, "cu_seqlens_q");
  c.seqused_kv = snap->Take(a.seqused_kv, "seqused_kv");
  return c;
}

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// cu_seqlens_q (TND) counts B + 1 entries; seqused_kv (and the block table rows) count B too. When
// the others agree on a B that cu_seqlens_q does not give, cu_seqlens_q is the argument that is
// off, not the others.
void CheckCuSeqlensCount(const TensorView& cu, int64_t batch_from_cu, int64_t other_batch,
                         const char* others) {
  OPENFIA_CHECK(other_batch < 0 || other_batch == batch_from_cu, "cu_seqlens_q",
                Str("must have B+1 = ", other_batch + 1, " elements (", others, " hold B = ",
                    other_batch, " batches)"),
                cu.shape_string());
}

bool IsFloat(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Element (i, j) of a 2-D int32 tensor.
int32_t At2(const TensorView& t, int64_t i, int64_t j) {
  return static_cast<const int32_t*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}

void CheckLayouts(const std::string& layout_q, const std::string& layout_kv) {
  OPENFIA_CHECK_SUPPORTED(layout_q == "BSND" || layout_q == "TND", "layout_q",
                          "must be \"BSND\" or \"TND\"", layout_q);
  OPENFIA_CHECK_SUPPORTED(layout_kv == "PA_ND", "layout_kv", "only \"PA_ND\" is supported",
                          layout_kv);
}

void CheckModes(int64_t ori_mask_mode, int64_t cmp_mask_mode, int64_t win_left,
                int64_t win_right) {
  // The public docs list only 4; the operator's newer host code (ops-transformer) also accepts 0
  // (whole ori range) and 3 (causal from token 0) and defines them (docs/semantics.md 3.2).
  OPENFIA_CHECK_SUPPORTED(ori_mask_mode == 0 || ori_mask_mode == 3 || ori_mask_mode == 4,
                          "ori_mask_mode", "must be 4 (band), 3 (causal) or 0 (none)",
                          ori_mask_mode);
  OPENFIA_CHECK_SUPPORTED(cmp_mask_mode == 3, "cmp_mask_mode",
                          "only 3 (rightDownCausal) is supported", cmp_mask_mode);
  OPENFIA_CHECK_SUPPORTED(win_left == 127, "ori_win_left", "only 127 is supported", win_left);
  OPENFIA_CHECK_SUPPORTED(win_right == 0, "ori_win_right", "only 0 is supported", win_right);
}

// A present index tensor with no effect still has the documented dtype.
void CheckIgnoredInt32(const TensorView& t, const char* name) {
  if (!t.defined()) return;
  OPENFIA_CHECK(t.dtype == DType::kInt32, name, "must have dtype int32 (it has no effect)",
                DTypeName(t.dtype));
}

// A 1-D int32 tensor of n elements whose values are read on the host.
void CheckIndexVector(const TensorView& t, const char* name, int64_t n) {
  OPENFIA_CHECK(t.dtype == DType::kInt32, name, "must have dtype int32", DTypeName(t.dtype));
  OPENFIA_CHECK(t.dim() == 1, name, "must be 1-D", t.shape_string());
  OPENFIA_CHECK(n < 0 || t.size(0) == n, name, Str("must have ", n, " elements"),
                t.shape_string());
  OPENFIA_CHECK(t.size(0) == 0 || t.data != nullptr, name, "must not be a null pointer", "null");
}

// cu_seqlens_q: B+1 prefix sums starting at 0, non-decreasing. Returns the per-batch lengths.
std::vector<int64_t> QLensFromCuSeqlens(const TensorView& cu) {
  OPENFIA_CHECK(cu.defined(), "cu_seqlens_q", "must be provided when layout_q is TND", "None");
  CheckIndexVector(cu, "cu_seqlens_q", -1);
  OPENFIA_CHECK(cu.size(0) >= 2, "cu_seqlens_q", "must have B+1 >= 2 elements",
                cu.shape_string());
  OPENFIA_CHECK(ReadIndex(cu, 0) == 0, "cu_seqlens_q", "must start at 0", ReadIndex(cu, 0));
  std::vector<int64_t> lens;
  for (int64_t b = 0; b + 1 < cu.size(0); ++b) {
    const int64_t lo = ReadIndex(cu, b), hi = ReadIndex(cu, b + 1);
    OPENFIA_CHECK(hi >= lo, "cu_seqlens_q", "must be non-decreasing",
                  Str("cu_seqlens_q[", b + 1, "] = ", hi, " < ", lo));
    lens.push_back(hi - lo);
  }
  return lens;
}

// A paged cache [blocks, block_size, 1, D] of q's dtype.
void CheckCache(const TensorView& kv, const char* name, const TensorView& q, int64_t d) {
  OPENFIA_CHECK(kv.dim() == 4, name, "must be 4-D [block_num, block_size, KV_N, D] (PA_ND)",
                kv.shape_string());
  OPENFIA_CHECK(kv.dtype == q.dtype, name, Str("must have the dtype of q (", DTypeName(q.dtype), ")"),
                DTypeName(kv.dtype));
  OPENFIA_CHECK(kv.size(0) >= 1 && kv.size(1) >= 1, name, "must not be empty", kv.shape_string());
  OPENFIA_CHECK_SUPPORTED(kv.size(2) == 1, name, "KV_N (dimension 2) must be 1",
                          kv.shape_string());
  OPENFIA_CHECK(kv.size(3) == d, name, Str("D (dimension 3) must equal q's D = ", d),
                kv.shape_string());
  OPENFIA_CHECK(kv.data != nullptr, name, "must not be a null pointer", "null");
}

// A block table [B, >= ceil(max len / block_size)] int32 whose entries for the blocks that
// hold tokens [0, len[b]) are block ids of the cache.
void CheckBlockTable(const TensorView& bt, const char* name, int64_t batch,
                     const std::vector<int64_t>& len, int64_t block_size, int64_t blocks,
                     const char* cache_name) {
  OPENFIA_CHECK(bt.defined(), name, Str("must be provided with ", cache_name, " (PA_ND)"),
                "None");
  OPENFIA_CHECK(bt.dtype == DType::kInt32, name, "must have dtype int32", DTypeName(bt.dtype));
  OPENFIA_CHECK(bt.dim() == 2, name, "must be 2-D [B, max_blocks]", bt.shape_string());
  OPENFIA_CHECK(bt.size(0) == batch, name, Str("dimension 0 must be B = ", batch),
                bt.shape_string());
  int64_t need = 0;
  for (int64_t b = 0; b < batch; ++b) need = std::max(need, CeilDiv(len[b], block_size));
  OPENFIA_CHECK(bt.size(1) >= need, name,
                Str("dimension 1 must be at least ceil(max length / block_size) = ", need),
                bt.shape_string());
  // The Problem addresses entries as b * bt_stride + n.
  OPENFIA_CHECK(bt.size(1) <= 1 || bt.stride(1) == 1, name, "must be contiguous in dimension 1",
                "strides ", bt.strides);
  OPENFIA_CHECK(need == 0 || bt.data != nullptr, name, "must not be a null pointer", "null");
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t n = 0; n < CeilDiv(len[b], block_size); ++n) {
      const int32_t id = At2(bt, b, n);
      OPENFIA_CHECK(id >= 0 && id < blocks, name,
                    Str("entries for tokens below the sequence length must be block ids in [0, ",
                        blocks, ") of ", cache_name),
                    Str(name, "[", b, "][", n, "] = ", id));
    }
}

void CheckSequsedKv(const TensorView& t, int64_t batch, int64_t max_seqlen_kv,
                    std::vector<int64_t>* kv_len) {
  CheckIndexVector(t, "seqused_kv", batch);
  kv_len->clear();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t v = ReadIndex(t, b);
    OPENFIA_CHECK(v >= 0, "seqused_kv", "must be >= 0", Str("seqused_kv[", b, "] = ", v));
    OPENFIA_CHECK(max_seqlen_kv <= 0 || v <= max_seqlen_kv, "seqused_kv",
                  Str("must be <= max_seqlen_kv = ", max_seqlen_kv),
                  Str("seqused_kv[", b, "] = ", v));
    kv_len->push_back(v);
  }
}

}  // namespace

SasConfig ValidateSasMetadata(const SasMetadataArgs& a) {
  SasConfig c;
  OPENFIA_CHECK(a.num_heads_q >= 1, "num_heads_q", "must be >= 1", a.num_heads_q);
  OPENFIA_CHECK(a.num_heads_kv >= 1, "num_heads_kv", "must be >= 1", a.num_heads_kv);
  OPENFIA_CHECK_SUPPORTED(a.num_heads_kv == 1, "num_heads_kv", "only 1 is supported",
                          a.num_heads_kv);
  OPENFIA_CHECK(a.head_dim >= 1, "head_dim", "must be >= 1", a.head_dim);
  CheckLayouts(a.layout_q, a.layout_kv);
  OPENFIA_CHECK_SUPPORTED(a.has_ori_kv, "has_ori_kv",
                          "must be true (every documented scenario attends ori_kv)", false);
  CheckModes(a.ori_mask_mode, a.cmp_mask_mode, a.ori_win_left, a.ori_win_right);
  OPENFIA_CHECK_SUPPORTED(a.ori_topk == 0, "ori_topk", "is not supported yet: must be 0",
                          a.ori_topk);
  OPENFIA_CHECK_SUPPORTED(!a.seqused_q.defined(), "seqused_q",
                          "is not supported yet: must be None", a.seqused_q.shape_string());
  CheckIgnoredInt32(a.cu_seqlens_ori_kv, "cu_seqlens_ori_kv");
  CheckIgnoredInt32(a.cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv");
  OPENFIA_CHECK(a.batch_size >= 0, "batch_size", "must be >= 0", a.batch_size);
  OPENFIA_CHECK(a.max_seqlen_q >= 0, "max_seqlen_q", "must be >= 0", a.max_seqlen_q);
  OPENFIA_CHECK(a.max_seqlen_kv >= 0, "max_seqlen_kv", "must be >= 0", a.max_seqlen_kv);
  if (a.has_cmp_kv) {
    OPENFIA_CHECK_SUPPORTED(a.cmp_ratio == 4 || a.cmp_ratio == 128, "cmp_ratio",
                            "must be 4 or 128 when has_cmp_kv", a.cmp_ratio);
    OPENFIA_CHECK(a.cmp_topk >= 0, "cmp_topk", "must be >= 0 (0: all compressed entries)",
                  a.cmp_topk);
  }
  OPENFIA_CHECK(a.num_workers >= 0 && a.num_workers <= kSasMaxWorkers, "num_workers",
                Str("must be in [1, ", kSasMaxWorkers, "] (0: the thread count)"), a.num_workers);

  c.n1 = a.num_heads_q;
  c.n2 = a.num_heads_kv;
  c.d = a.head_dim;
  c.layout_q = a.layout_q == "TND" ? 1 : 0;
  c.has_cmp = a.has_cmp_kv;
  c.cmp_ratio = a.has_cmp_kv ? a.cmp_ratio : 0;
  c.cmp_topk = a.has_cmp_kv ? a.cmp_topk : 0;
  c.ori_mask_mode = a.ori_mask_mode;
  c.cmp_mask_mode = a.cmp_mask_mode;
  c.ori_win_left = a.ori_win_left;
  c.ori_win_right = a.ori_win_right;

  if (c.layout_q == 1) {
    c.q_len = QLensFromCuSeqlens(a.cu_seqlens_q);
    c.batch = static_cast<int64_t>(c.q_len.size());
    const int64_t kv_batch =
        a.seqused_kv.defined() && a.seqused_kv.dim() == 1 ? a.seqused_kv.size(0) : -1;
    if (a.batch_size > 0 && a.batch_size == kv_batch)
      CheckCuSeqlensCount(a.cu_seqlens_q, c.batch, kv_batch, "batch_size and seqused_kv");
    OPENFIA_CHECK(a.batch_size == 0 || a.batch_size == c.batch, "batch_size",
                  Str("must equal len(cu_seqlens_q) - 1 = ", c.batch), a.batch_size);
    int64_t total = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      OPENFIA_CHECK(a.max_seqlen_q == 0 || c.q_len[b] <= a.max_seqlen_q, "max_seqlen_q",
                    "must bound every batch's query length", a.max_seqlen_q, " < ", c.q_len[b]);
      total += c.q_len[b];
    }
    OPENFIA_CHECK(total >= 1, "cu_seqlens_q", "must describe at least one query token (T >= 1)",
                  total);
    OPENFIA_CHECK(total <= kSasMaxPlanTokens, "cu_seqlens_q",
                  Str("must describe at most ", kSasMaxPlanTokens,
                      " query tokens (the planner's limit)"),
                  "T = ", total);
  } else {
    c.batch = a.batch_size > 0 ? a.batch_size : (a.seqused_kv.defined() ? a.seqused_kv.size(0) : 0);
    OPENFIA_CHECK(c.batch >= 1, "batch_size", "must be >= 1 (or given by seqused_kv) for BSND",
                  a.batch_size);
    OPENFIA_CHECK(a.max_seqlen_q >= 1, "max_seqlen_q", "must be S1 >= 1 for BSND",
                  a.max_seqlen_q);
    // Before anything is sized from it: the plan's memory grows with the query tokens, which
    // here come from two scalars alone.
    OPENFIA_CHECK(c.batch <= kSasMaxPlanTokens && a.max_seqlen_q <= kSasMaxPlanTokens / c.batch,
                  "max_seqlen_q",
                  Str("times the batch must be at most ", kSasMaxPlanTokens,
                      " query tokens (the planner's limit)"),
                  a.max_seqlen_q, " x ", c.batch);
    c.q_len.assign(c.batch, a.max_seqlen_q);
  }
  // The metadata's words and the operator's index tensors are int32.
  OPENFIA_CHECK(a.num_heads_q <= kInt32Max, "num_heads_q", "must fit int32", a.num_heads_q);
  OPENFIA_CHECK(a.head_dim <= kInt32Max, "head_dim", "must fit int32", a.head_dim);
  OPENFIA_CHECK(a.max_seqlen_kv <= kInt32Max, "max_seqlen_kv", "must fit int32 (seqused_kv's dtype)",
                a.max_seqlen_kv);
  OPENFIA_CHECK(c.cmp_topk <= kInt32Max, "cmp_topk", "must fit int32", c.cmp_topk);
  if (a.seqused_kv.defined()) {
    CheckSequsedKv(a.seqused_kv, c.batch, a.max_seqlen_kv, &c.kv_len);
  } else {
    c.kv_len.assign(c.batch, a.max_seqlen_kv);  // "不输入则所有token均参与运算"
  }
  if (GetNpuStrict()) EnforceSasNpuLimits(nullptr, c);
  return c;
}

SasOutputSpec ValidateSas(const SasArgs& a, SasConfig* cfg) {
  SasConfig& c = *cfg;
  c = SasConfig();
  CheckLayouts(a.layout_q, a.layout_kv);
  const bool tnd = a.layout_q == "TND";
  c.layout_q = tnd ? 1 : 0;

  // ---- q ----
  const TensorView& q = a.q;
  OPENFIA_CHECK(q.defined(), "q", "must be provided", "None");
  OPENFIA_CHECK(IsFloat(q.dtype), "q", "must have dtype float16, bfloat16 or float32",
                DTypeName(q.dtype));
  OPENFIA_CHECK(q.dim() == (tnd ? 3 : 4), "q",
                tnd ? "must be 3-D [T, N1, D] for TND" : "must be 4-D [B, S1, N1, D] for BSND",
                q.shape_string());
  for (int64_t i = 0; i < q.dim(); ++i)
    OPENFIA_CHECK(q.size(i) >= 1, "q", "must not be empty", q.shape_string());
  OPENFIA_CHECK(q.data != nullptr, "q", "must not be a null pointer", "null");
  c.n1 = q.size(-2);
  c.d = q.size(-1);
  c.n2 = 1;

  // ---- caches ----
  OPENFIA_CHECK(a.ori_kv.defined(), "ori_kv",
                "must be provided (every documented scenario: SWA, CFA, SCFA attends ori_kv)",
                "None");
  CheckCache(a.ori_kv, "ori_kv", q, c.d);
  c.has_cmp = a.cmp_kv.defined();
  if (c.has_cmp) {
    CheckCache(a.cmp_kv, "cmp_kv", q, c.d);
    OPENFIA_CHECK(a.cmp_ratio.has_value(), "cmp_ratio", "must be given with cmp_kv", "None");
    OPENFIA_CHECK_SUPPORTED(*a.cmp_ratio == 4 || *a.cmp_ratio == 128, "cmp_ratio",
                            "must be 4 or 128", *a.cmp_ratio);
    c.cmp_ratio = *a.cmp_ratio;
  }

  // ---- modes, arguments without effect, unsupported arguments ----
  CheckModes(a.ori_mask_mode, a.cmp_mask_mode, a.ori_win_left, a.ori_win_right);
  c.ori_mask_mode = a.ori_mask_mode;
  c.cmp_mask_mode = a.cmp_mask_mode;
  c.ori_win_left = a.ori_win_left;
  c.ori_win_right = a.ori_win_right;
  OPENFIA_CHECK_SUPPORTED(!a.seqused_q.defined(), "seqused_q",
                          "is not supported yet: must be None", a.seqused_q.shape_string());
  CheckIgnoredInt32(a.ori_sparse_indices, "ori_sparse_indices");
  CheckIgnoredInt32(a.cu_seqlens_ori_kv, "cu_seqlens_ori_kv");
  CheckIgnoredInt32(a.cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv");

  // ---- lengths ----
  if (tnd) {
    c.q_len = QLensFromCuSeqlens(a.cu_seqlens_q);
    c.batch = static_cast<int64_t>(c.q_len.size());
    if (a.seqused_kv.defined() && a.seqused_kv.dim() == 1 && a.ori_block_table.defined() &&
        a.ori_block_table.dim() == 2 && a.seqused_kv.size(0) == a.ori_block_table.size(0))
      CheckCuSeqlensCount(a.cu_seqlens_q, c.batch, a.seqused_kv.size(0),
                          "seqused_kv and ori_block_table");
    const int64_t t_total = ReadIndex(a.cu_seqlens_q, c.batch);
    OPENFIA_CHECK(t_total == q.size(0), "cu_seqlens_q",
                  Str("last element must equal T = q.size(0) = ", q.size(0)), t_total);
  } else {
    c.batch = q.size(0);
    c.q_len.assign(c.batch, q.size(1));
  }
  OPENFIA_CHECK(a.seqused_kv.defined(), "seqused_kv",
                "must be provided (the ori KV length of each batch)", "None");
  CheckSequsedKv(a.seqused_kv, c.batch, 0, &c.kv_len);

  // ---- block tables ----
  CheckBlockTable(a.ori_block_table, "ori_block_table", c.batch, c.kv_len, a.ori_kv.size(1),
                  a.ori_kv.size(0), "ori_kv");
  std::vector<int64_t> cmp_len(c.batch, 0);
  if (c.has_cmp) {
    for (int64_t b = 0; b < c.batch; ++b) cmp_len[b] = c.kv_len[b] / c.cmp_ratio;
    CheckBlockTable(a.cmp_block_table, "cmp_block_table", c.batch, cmp_len, a.cmp_kv.size(1),
                    a.cmp_kv.size(0), "cmp_kv");
  }

  // ---- sparse indices (SCFA) ----
  const TensorView& idx = a.cmp_sparse_indices;
  if (idx.defined()) {
    OPENFIA_CHECK(idx.dtype == DType::kInt32, "cmp_sparse_indices", "must have dtype int32",
                  DTypeName(idx.dtype));
    if (tnd) {
      OPENFIA_CHECK(idx.dim() == 3 && idx.size(0) == q.size(0) && idx.size(1) == 1,
                    "cmp_sparse_indices", Str("must be [T, KV_N, K2] = [", q.size(0), ", 1, K2]"),
                    idx.shape_string());
    } else {
      OPENFIA_CHECK(idx.dim() == 4 && idx.size(0) == c.batch && idx.size(1) == q.size(1) &&
                        idx.size(2) == 1,
                    "cmp_sparse_indices",
                    Str("must be [B, S1, KV_N, K2] = [", c.batch, ", ", q.size(1), ", 1, K2]"),
                    idx.shape_string());
    }
    const int64_t k2 = idx.size(-1);
    OPENFIA_CHECK(k2 >= 1, "cmp_sparse_indices", "K2 (last dimension) must be >= 1",
                  idx.shape_string());
    OPENFIA_CHECK(idx.data != nullptr, "cmp_sparse_indices", "must not be a null pointer", "null");
    c.cmp_topk = k2;
    // Exactly the entries the computation reads: for a valid row (p >= 0) the first
    // min(K2, thr) entries up to the first -1 (docs/semantics.md 3.3). Entries in [thr, S3) are
    // skipped (the causal rule); anything else would address memory outside the compressed
    // sequence.
    const auto* data = static_cast<const int32_t*>(idx.data);
    int64_t row0 = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t s1 = c.q_len[b], s2 = c.kv_len[b];
      for (int64_t i = 0; i < s1; ++i) {
        const int64_t p = s2 - s1 + i;
        if (p < 0) continue;
        const int64_t thr = (p + 1) / c.cmp_ratio;
        const int64_t base = tnd ? (row0 + i) * idx.strides[0]
                                 : b * idx.strides[0] + i * idx.strides[1];
        for (int64_t n = 0; n < std::min(k2, thr); ++n) {
          const int32_t j = data[base + n * idx.strides[tnd ? 2 : 3]];
          if (j == -1) break;
          OPENFIA_CHECK(j >= 0 && j < cmp_len[b], "cmp_sparse_indices",
                        Str("entries before the first -1 must be -1 or in [0, S3 = ",
                            cmp_len[b], ")"),
                        Str("batch ", b, " row ", i, " entry ", n, " = ", j));
        }
      }
      row0 += s1;
    }
  }

  // ---- sinks, scale ----
  if (a.sinks.defined()) {
    OPENFIA_CHECK(a.sinks.dtype == DType::kFloat32, "sinks", "must have dtype float32",
                  DTypeName(a.sinks.dtype));
    OPENFIA_CHECK(a.sinks.dim() == 1 && a.sinks.size(0) == c.n1, "sinks",
                  Str("must have shape [N1] = [", c.n1, "]"), a.sinks.shape_string());
    OPENFIA_CHECK(a.sinks.stride(0) == 1 || c.n1 == 1, "sinks", "must be contiguous",
                  "strides ", a.sinks.strides);
    OPENFIA_CHECK(a.sinks.data != nullptr, "sinks", "must not be a null pointer", "null");
  }
  if (a.softmax_scale.has_value())
    OPENFIA_CHECK(std::isfinite(*a.softmax_scale), "softmax_scale", "must be finite",
                  *a.softmax_scale);

  // ---- metadata ----
  if (a.metadata.defined()) {
    CheckSasMetadataTensor(a.metadata, "must be provided");  // defined here: the rule is moot
    VerifySasPlan(c, static_cast<const int32_t*>(a.metadata.data));
  }

  SasOutputSpec spec;
  spec.attention_out_sizes = q.sizes;
  spec.attention_out_dtype = q.dtype;
  if (a.return_softmax_lse) {
    const int64_t g = c.group();
    spec.softmax_lse_sizes = tnd ? std::vector<int64_t>{c.n2, q.size(0), g}
                                 : std::vector<int64_t>{c.batch, c.n2, q.size(1), g};
  } else {
    spec.softmax_lse_sizes = {1};
  }
  if (GetNpuStrict()) EnforceSasNpuLimits(&a, c);
  return spec;
}

}  // namespace openfia::internal
