// openfia: KvQuantSparseFlashAttention argument validation. Order: presence, attributes, dtypes
// and shapes, sequence lengths, paging, index contents. Sources: the torch_npu documentation of
// npu_kv_quant_sparse_flash_attention and docs/semantics.md 2; every index that addresses memory
// is checked (docs/semantics.md 4). NPU hardware limits are relaxed; strict mode enforces them
// last (kvqsfa_strict.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/views.h"
#include "openfia/runtime.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"

namespace openfia::internal {
namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

bool IsKvDType(DType t) {
  return t == DType::kInt8 || t == DType::kFloat8E4M3 || t == DType::kHiFloat8 ||
         t == DType::kUInt8;
}
// torch has no hifloat8 dtype: a uint8 tensor carries hifloat8 bytes (docs/semantics.md 6.9).
DType KvFormat(DType t) { return t == DType::kUInt8 ? DType::kHiFloat8 : t; }

KvqLayout ParseLayout(const std::string& s, const char* arg, bool allow_pa) {
  if (s == "BSND") return KvqLayout::kBSND;
  if (s == "TND") return KvqLayout::kTND;
  if (allow_pa && s == "PA_BSND") return KvqLayout::kPaBSND;
  OPENFIA_CHECK(false, arg, allow_pa ? "must be BSND, TND or PA_BSND" : "must be BSND or TND",
                "\"", s, "\"");
  return KvqLayout::kBSND;
}

// Reads a 1-D int32/int64 host tensor (the NPU takes these as tensors).
std::vector<int64_t> ReadLengths(const TensorView& t, const char* arg, int64_t expect_len) {
  CheckWellFormed(t, arg);
  OPENFIA_CHECK(t.dtype == DType::kInt32 || t.dtype == DType::kInt64, arg,
                "must have dtype int32 or int64", DTypeName(t.dtype));
  OPENFIA_CHECK(t.dim() == 1, arg, "must be 1-D", t.shape_string());
  if (expect_len >= 0)
    OPENFIA_CHECK(t.size(0) == expect_len, arg, Str("must have one entry per batch (", expect_len,
                                                    ")"), t.shape_string());
  std::vector<int64_t> v(t.size(0));
  for (int64_t i = 0; i < t.size(0); ++i) {
    const int64_t off = i * t.stride(0);
    v[i] = t.dtype == DType::kInt32 ? static_cast<const int32_t*>(t.data)[off]
                                    : static_cast<const int64_t*>(t.data)[off];
  }
  return v;
}

// Per-batch lengths: as given (each in [0, cap]) or, for TND, cumulative (non-decreasing, last
// <= cap). Fills begin/len.
void Lengths(const std::vector<int64_t>& v, bool cumulative, int64_t cap, const char* arg,
             std::vector<int64_t>* begin, std::vector<int64_t>* len) {
  const int64_t n = static_cast<int64_t>(v.size());
  begin->assign(n, 0);
  len->assign(n, 0);
  int64_t prev = 0;
  for (int64_t b = 0; b < n; ++b) {
    if (cumulative) {
      OPENFIA_CHECK(v[b] >= prev, arg, "must be non-decreasing cumulative lengths (TND)",
                    "entry ", b, " = ", v[b], " after ", prev);
      OPENFIA_CHECK(v[b] <= cap, arg, Str("cumulative lengths must not exceed the T dimension (",
                                          cap, ")"), "entry ", b, " = ", v[b]);
      (*begin)[b] = prev;
      (*len)[b] = v[b] - prev;
      prev = v[b];
    } else {
      OPENFIA_CHECK(v[b] >= 0 && v[b] <= cap, arg,
                    Str("each length must be in [0, ", cap, "]"), "entry ", b, " = ", v[b]);
      (*len)[b] = v[b];
    }
  }
}

}  // namespace

KvqsfaShape ValidateKvqsfa(const KvqsfaArgs& a) {
  KvqsfaShape sh;

  // ---- presence ----
  OPENFIA_CHECK(a.query.defined(), "query", "is required", "None");
  OPENFIA_CHECK(a.key.defined(), "key", "is required", "None");
  OPENFIA_CHECK(a.value.defined(), "value", "is required", "None");
  OPENFIA_CHECK(a.sparse_indices.defined(), "sparse_indices", "is required", "None");
  OPENFIA_CHECK_SUPPORTED(!a.key_dequant_scale.defined(), "key_dequant_scale",
                          "is a reserved parameter and must be None", a.key_dequant_scale.shape_string());
  OPENFIA_CHECK_SUPPORTED(!a.value_dequant_scale.defined(), "value_dequant_scale",
                          "is a reserved parameter and must be None",
                          a.value_dequant_scale.shape_string());

  // ---- attributes ----
  OPENFIA_CHECK_SUPPORTED(a.key_quant_mode == 2, "key_quant_mode", "only 2 (per-tile) is supported",
                          a.key_quant_mode);
  OPENFIA_CHECK_SUPPORTED(a.value_quant_mode == 2, "value_quant_mode",
                          "only 2 (per-tile) is supported", a.value_quant_mode);
  OPENFIA_CHECK_SUPPORTED(a.attention_mode == 2, "attention_mode",
                          "only 2 (MLA-absorb, KV shared) is supported; pass attention_mode=2",
                          a.attention_mode);
  OPENFIA_CHECK_SUPPORTED(a.quant_scale_repo_mode == 1, "quant_scale_repo_mode",
                          "only 1 (scales stored inside the KV rows) is supported",
                          a.quant_scale_repo_mode);
  OPENFIA_CHECK_SUPPORTED(a.tile_size == kKvqTile, "tile_size", "only 128 is supported",
                          a.tile_size);
  OPENFIA_CHECK_SUPPORTED(a.rope_head_dim == kKvqRope, "rope_head_dim", "only 64 is supported",
                          a.rope_head_dim);
  OPENFIA_CHECK_SUPPORTED(a.pre_tokens == kMaxInt64, "pre_tokens", "only 2^63-1 is supported",
                          a.pre_tokens);
  OPENFIA_CHECK_SUPPORTED(a.next_tokens == kMaxInt64, "next_tokens", "only 2^63-1 is supported",
                          a.next_tokens);
  OPENFIA_CHECK_SUPPORTED(a.sparse_mode == 0 || a.sparse_mode == 3, "sparse_mode",
                          "must be 0 (all) or 3 (right-down causal)", a.sparse_mode);
  // The NPU limits block-wise sparsity to powers of two in [1, 16] (A2/A3) or 1 (950); the doc's
  // parameter table describes block sizes up to 128, and every power of two up to 128 is well
  // defined here (relaxed, see docs).
  const int64_t sbs = a.sparse_block_size;
  OPENFIA_CHECK(sbs >= 1 && sbs <= 128 && (sbs & (sbs - 1)) == 0, "sparse_block_size",
                "must be a power of two in [1, 128]", sbs);
  OPENFIA_CHECK(std::isfinite(a.scale_value), "scale_value", "must be finite", a.scale_value);
  sh.layout_q = ParseLayout(a.layout_query, "layout_query", false);
  sh.layout_kv = ParseLayout(a.layout_kv, "layout_kv", true);
  if (sh.layout_kv != KvqLayout::kPaBSND)
    OPENFIA_CHECK(a.layout_kv == a.layout_query, "layout_kv",
                  "must equal layout_query unless it is PA_BSND", "layout_query \"",
                  a.layout_query, "\", layout_kv \"", a.layout_kv, "\"");

  // ---- query ----
  const TensorView& q = a.query;
  CheckWellFormed(q, "query");
  // float32 is not accepted: the KV rows store the rope part as 64 two-byte query-dtype values.
  OPENFIA_CHECK(q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16, "query",
                "must have dtype float16 or bfloat16", DTypeName(q.dtype));
  const bool q_tnd = sh.layout_q == KvqLayout::kTND;
  OPENFIA_CHECK(q.dim() == (q_tnd ? 3 : 4), "query",
                q_tnd ? "must be 3-D [T, Q_N, 576] for layout_query TND"
                      : "must be 4-D [B, S1, Q_N, 576] for layout_query BSND",
                q.shape_string());
  for (int64_t i = 0; i < q.dim(); ++i)
    OPENFIA_CHECK(q.sizes[i] > 0, "query", "must not be empty (every dimension > 0)",
                  q.shape_string());
  OPENFIA_CHECK(q.size(-1) == kKvqQueryD, "query",
                "last dimension must be 576 (q_nope 512 + q_rope 64)", q.shape_string());
  sh.h_q = q.size(-2);
  static constexpr int64_t kHeads[] = {1, 2, 4, 8, 16, 32, 48, 64, 128};
  OPENFIA_CHECK(std::find(std::begin(kHeads), std::end(kHeads), sh.h_q) != std::end(kHeads),
                "query", "Q_N must be one of 1, 2, 4, 8, 16, 32, 48, 64, 128", "Q_N = ", sh.h_q);

  // ---- key / value ----
  const TensorView& k = a.key;
  CheckWellFormed(k, "key");
  OPENFIA_CHECK(IsKvDType(k.dtype), "key",
                "must have dtype int8, float8_e4m3fn or hifloat8 (uint8 carries hifloat8)",
                DTypeName(k.dtype));
  const bool kv_tnd = sh.layout_kv == KvqLayout::kTND;
  OPENFIA_CHECK(k.dim() == (kv_tnd ? 3 : 4), "key",
                kv_tnd ? "must be 3-D [KV_T, 1, 656] for layout_kv TND"
                       : (sh.layout_kv == KvqLayout::kPaBSND
                              ? "must be 4-D [block_num, block_size, 1, 656] for layout_kv PA_BSND"
                              : "must be 4-D [B, S2, 1, 656] for layout_kv BSND"),
                k.shape_string());
  for (int64_t i = 0; i < k.dim(); ++i)
    OPENFIA_CHECK(k.sizes[i] > 0, "key", "must not be empty (every dimension > 0)",
                  k.shape_string());
  OPENFIA_CHECK(k.size(-1) == kKvqRowBytes, "key",
                "last dimension must be 656 (nope 512 + rope 64*2 bytes + 4 fp32 scales)",
                k.shape_string());
  OPENFIA_CHECK(k.size(-2) == 1, "key", "KV_N must be 1", k.shape_string());
  // The rope (2-byte) and scale (4-byte) fields are addressed inside the rows.
  OPENFIA_CHECK(k.stride(-1) == 1, "key", "rows must be contiguous (last-dimension stride 1)",
                "strides ", k.strides);
  for (int64_t i = 0; i + 1 < k.dim(); ++i)
    OPENFIA_CHECK(k.strides[i] % 4 == 0, "key",
                  "strides must be multiples of 4 bytes (fp32 scales inside the rows)",
                  "strides ", k.strides);
  OPENFIA_CHECK(reinterpret_cast<uintptr_t>(k.data) % 4 == 0, "key",
                "data must be 4-byte aligned (fp32 scales inside the rows)", k.data);

  const TensorView& v = a.value;
  CheckWellFormed(v, "value");
  OPENFIA_CHECK(IsKvDType(v.dtype) && KvFormat(v.dtype) == KvFormat(k.dtype), "value",
                Str("must have the dtype of key (", DTypeName(k.dtype), ")"), DTypeName(v.dtype));
  bool v_shape_ok = v.dim() == k.dim() && (v.size(-1) == kKvqRowBytes || v.size(-1) == kKvqNope);
  for (int64_t i = 0; v_shape_ok && i + 1 < k.dim(); ++i) v_shape_ok = v.sizes[i] == k.sizes[i];
  OPENFIA_CHECK(v_shape_ok, "value",
                Str("must have the leading dimensions of key ", k.shape_string(),
                    " and a last dimension of 656 or 512 (its content is not read: V is the "
                    "dequantized nope part of key)"),
                v.shape_string());

  // ---- sparse_indices ----
  const TensorView& si = a.sparse_indices;
  CheckWellFormed(si, "sparse_indices");
  OPENFIA_CHECK(si.dtype == DType::kInt32, "sparse_indices", "must have dtype int32",
                DTypeName(si.dtype));
  OPENFIA_CHECK(si.dim() == (q_tnd ? 3 : 4), "sparse_indices",
                q_tnd ? "must be 3-D [T, 1, sparse_size] for layout_query TND"
                      : "must be 4-D [B, S1, 1, sparse_size] for layout_query BSND",
                si.shape_string());
  OPENFIA_CHECK(si.size(-1) > 0, "sparse_indices", "sparse_size (last dimension) must be > 0",
                si.shape_string());
  OPENFIA_CHECK(si.size(-2) == 1, "sparse_indices", "KV_N dimension must be 1",
                si.shape_string());
  for (int64_t i = 0; i + 2 < si.dim(); ++i)
    OPENFIA_CHECK(si.sizes[i] == q.sizes[i], "sparse_indices",
                  Str("leading dimensions must match query ", q.shape_string()),
                  si.shape_string());
  sh.topk = si.size(-1);

  // ---- batch and query lengths ----
  if (q_tnd) {
    OPENFIA_CHECK(a.actual_seq_lengths_query.defined(), "actual_seq_lengths_query",
                  "is required when layout_query is TND", "None");
    const std::vector<int64_t> cum =
        ReadLengths(a.actual_seq_lengths_query, "actual_seq_lengths_query", -1);
    OPENFIA_CHECK(!cum.empty(), "actual_seq_lengths_query", "must have at least one batch",
                  a.actual_seq_lengths_query.shape_string());
    sh.batch = static_cast<int64_t>(cum.size());
    sh.s_q = q.size(0);
    Lengths(cum, true, sh.s_q, "actual_seq_lengths_query", &sh.q_begin, &sh.q_len);
  } else {
    sh.batch = q.size(0);
    sh.s_q = q.size(1);
    if (a.actual_seq_lengths_query.defined()) {
      Lengths(ReadLengths(a.actual_seq_lengths_query, "actual_seq_lengths_query", sh.batch),
              false, sh.s_q, "actual_seq_lengths_query", &sh.q_begin, &sh.q_len);
    } else {
      sh.q_begin.assign(sh.batch, 0);
      sh.q_len.assign(sh.batch, sh.s_q);
    }
  }

  // ---- KV lengths, capacity (tokens a batch's indices may address), paging ----
  std::vector<int64_t> capacity(sh.batch, 0);
  if (sh.layout_kv == KvqLayout::kPaBSND) {
    OPENFIA_CHECK(a.block_table.defined(), "block_table", "is required when layout_kv is PA_BSND",
                  "None");
    OPENFIA_CHECK(a.actual_seq_lengths_kv.defined(), "actual_seq_lengths_kv",
                  "is required when layout_kv is PA_BSND", "None");
    const TensorView& bt = a.block_table;
    CheckWellFormed(bt, "block_table");
    OPENFIA_CHECK(bt.dtype == DType::kInt32, "block_table", "must have dtype int32",
                  DTypeName(bt.dtype));
    OPENFIA_CHECK(bt.dim() == 2 && bt.size(0) == sh.batch, "block_table",
                  Str("must be 2-D [B = ", sh.batch, ", max_blocks]"), bt.shape_string());
    OPENFIA_CHECK(bt.size(1) > 0, "block_table", "must have at least one column",
                  bt.shape_string());
    OPENFIA_CHECK(bt.size(1) == 1 || bt.stride(1) == 1, "block_table",
                  "rows must be contiguous (last-dimension stride 1)", "strides ", bt.strides);
    // The NPU requires block_size to be a multiple of 16 and at most 1024 (hardware tiling);
    // any block size addresses rows just as well (relaxed, see docs).
    sh.block_size = k.size(1);
    const int64_t block_num = k.size(0);
    const int64_t cap = bt.size(1) * sh.block_size;
    Lengths(ReadLengths(a.actual_seq_lengths_kv, "actual_seq_lengths_kv", sh.batch), false, cap,
            "actual_seq_lengths_kv", &sh.kv_begin, &sh.kv_len);
    const int32_t* tbl = static_cast<const int32_t*>(bt.data);
    for (int64_t b = 0; b < sh.batch; ++b) {
      capacity[b] = cap;
      const int64_t used = (sh.kv_len[b] + sh.block_size - 1) / sh.block_size;
      for (int64_t j = 0; j < used; ++j) {
        const int64_t id = tbl[b * bt.stride(0) + j];
        OPENFIA_CHECK(id >= 0 && id < block_num, "block_table",
                      Str("entries covering actual_seq_lengths_kv must be block ids in [0, ",
                          block_num, ")"),
                      "block_table[", b, "][", j, "] = ", id);
      }
    }
  } else {  // a block_table has no effect here (the snapshot dropped it)
    if (kv_tnd) {
      OPENFIA_CHECK(a.actual_seq_lengths_kv.defined(), "actual_seq_lengths_kv",
                    "is required when layout_kv is TND", "None");
      Lengths(ReadLengths(a.actual_seq_lengths_kv, "actual_seq_lengths_kv", sh.batch), true,
              k.size(0), "actual_seq_lengths_kv", &sh.kv_begin, &sh.kv_len);
      for (int64_t b = 0; b < sh.batch; ++b) capacity[b] = k.size(0) - sh.kv_begin[b];
    } else {
      OPENFIA_CHECK(k.size(0) == sh.batch, "key",
                    Str("batch dimension must equal query's (", sh.batch, ")"), k.shape_string());
      if (a.actual_seq_lengths_kv.defined()) {
        Lengths(ReadLengths(a.actual_seq_lengths_kv, "actual_seq_lengths_kv", sh.batch), false,
                k.size(1), "actual_seq_lengths_kv", &sh.kv_begin, &sh.kv_len);
      } else {
        sh.kv_begin.assign(sh.batch, 0);
        sh.kv_len.assign(sh.batch, k.size(1));
      }
      capacity.assign(sh.batch, k.size(1));
    }
  }

  // ---- sparse_indices contents: every entry the kernel reads ----
  const int32_t* idx = static_cast<const int32_t*>(si.data);
  const int64_t st_k = si.stride(-1);
  for (int64_t b = 0; b < sh.batch; ++b) {
    for (int64_t i = 0; i < sh.q_len[b]; ++i) {
      const int64_t row = sh.q_begin[b] + i;
      const int32_t* r = q_tnd ? idx + row * si.stride(0) : idx + b * si.stride(0) + row * si.stride(1);
      const SelectionWindow w = RowWindow(a.sparse_mode, sbs, sh.q_len[b], sh.kv_len[b], i, sh.topk);
      bool ended = false;
      for (int64_t e = 0; e < w.readable; ++e) {
        const int64_t x = r[e * st_k];
        const auto where = [&] {
          return q_tnd ? Str("sparse_indices[", row, "][0][", e, "] = ", x)
                       : Str("sparse_indices[", b, "][", row, "][0][", e, "] = ", x);
        };
        OPENFIA_CHECK(x >= -1, "sparse_indices", "entries must be -1 (end of list) or >= 0",
                      where());
        if (x == -1) {
          ended = true;
          continue;
        }
        OPENFIA_CHECK(!ended, "sparse_indices",
                      "valid entries must precede the -1 entries of a row", where());
        OPENFIA_CHECK(x * sbs < capacity[b], "sparse_indices",
                      Str("block start (entry * sparse_block_size) must be inside the KV cache (",
                          capacity[b], " tokens for batch ", b, ")"),
                      where());
      }
    }
  }

  // ---- sinks ----
  if (a.sinks.defined()) {
    CheckWellFormed(a.sinks, "sinks");
    OPENFIA_CHECK(a.sinks.dtype == DType::kFloat32, "sinks", "must have dtype float32",
                  DTypeName(a.sinks.dtype));
    OPENFIA_CHECK(a.sinks.dim() == 1 && a.sinks.size(0) == sh.h_q, "sinks",
                  Str("must be 1-D [Q_N = ", sh.h_q, "]"), a.sinks.shape_string());
    OPENFIA_CHECK(sh.h_q == 1 || a.sinks.stride(0) == 1, "sinks", "must be contiguous",
                  "strides ", a.sinks.strides);
  }

  sh.spec.attention_out_dtype = q.dtype;
  sh.spec.attention_out_sizes = q.sizes;
  sh.spec.attention_out_sizes.back() = kKvqNope;
  if (GetNpuStrict()) EnforceKvqsfaNpuLimits(a, sh);
  return sh;
}

}  // namespace openfia::internal
