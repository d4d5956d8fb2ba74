// openfia: FusedInferAttentionScore argument validation (the torch_npu doc's 约束说明, SPEC.md
// decisions, SEMANTICS.md section 1). Every rule below throws before any compute; the order is
//   1. existence and well-formedness of every tensor, attribute values;
//   2. each argument alone (dtype, rank, contiguity);
//   3. consistency between arguments (shapes, lengths, indices into memory);
//   4. feature combinations the source marks unsupported (kUnsupported).
// NPU-only hardware limits are relaxed (listed in docs/fused_infer_attention_score.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/numeric.h"
#include "ops/fused_infer_attention_score/fia_geometry.h"
#include "ops/fused_infer_attention_score/fia_internal.h"

namespace openfia::internal {
namespace {

constexpr int64_t kInt32Max = 2147483647;
// Largest element count accepted for any tensor: leaves room to form byte and nibble offsets
// (x8 for int4 in int32 words, x8 for bytes) without int64 overflow.
constexpr int64_t kMaxNumel = int64_t{1} << 56;
constexpr int64_t kCausalMaskSize = 2048;

bool IsFloat(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32;
}
std::string Name(DType t) { return std::string(DTypeName(t)); }

// Sizes non-negative, strides of matching length, element count representable, data present.
void CheckWellFormed(const TensorView& t, const std::string& name) {
  OPENFIA_CHECK(t.strides.size() == t.sizes.size(), name,
                "strides must have one entry per dimension", "sizes ", t.sizes, ", strides ",
                t.strides);
  int64_t n = 1;
  bool zero = false;
  for (int64_t s : t.sizes) {
    OPENFIA_CHECK(s >= 0, name, "sizes must be non-negative", t.shape_string());
    if (s == 0) zero = true;
  }
  if (!zero) {
    for (int64_t s : t.sizes) {
      const bool ovf = __builtin_mul_overflow(n, s, &n);
      OPENFIA_CHECK(!ovf && n <= kMaxNumel, name,
                    Str("the number of elements must not exceed ", kMaxNumel), t.shape_string());
    }
  } else {
    n = 0;
  }
  OPENFIA_CHECK(n == 0 || t.data != nullptr, name,
                "data must not be a null pointer when the tensor has elements", "null data for ",
                t.shape_string());
}

void CheckContiguous(const TensorView& t, const std::string& name) {
  // An empty tensor addresses no element, so any strides are fine for it.
  OPENFIA_CHECK(t.numel() == 0 || t.is_contiguous(), name, "does not support non-contiguous tensors (不支持非连续)",
                "sizes ", t.sizes, ", strides ", t.strides);
}

void CheckDim(const TensorView& t, const std::string& name, int64_t dim, const std::string& what) {
  OPENFIA_CHECK(t.dim() == dim, name, Str("must be ", dim, "-D ", what), t.shape_string());
}

int64_t ReadInt64Scalar(const TensorView& t, const char* name) {
  OPENFIA_CHECK(t.dtype == DType::kInt64, name, "dtype must be int64", Name(t.dtype));
  OPENFIA_CHECK(t.numel() == 1, name, "shape must be [1]", t.shape_string());
  int64_t v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

// Per-tensor float scalar given as float32 or as uint64 whose low 32 bits are fp32 bits.
uint32_t ReadScaleBits(const TensorView& t, const char* name, bool allow_u64) {
  OPENFIA_CHECK(t.dtype == DType::kFloat32 || (allow_u64 && t.dtype == DType::kUInt64), name,
                allow_u64 ? "dtype must be uint64 or float32" : "dtype must be float32",
                Name(t.dtype));
  OPENFIA_CHECK(t.numel() == 1, name, "supports per-tensor only: shape must be [1]",
                t.shape_string());
  if (t.dtype == DType::kUInt64) {
    uint64_t v;
    std::memcpy(&v, t.data, sizeof v);
    return static_cast<uint32_t>(v & 0xFFFFFFFFu);
  }
  uint32_t v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// actual_seq_lengths broadcasting: length 1 -> every batch, length >= B -> the first B.
std::vector<int64_t> Broadcast(const std::vector<int64_t>& v, int64_t batch, const char* name) {
  if (batch == 0) return {};
  OPENFIA_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) >= batch, name,
                Str("length must be 1 or at least the batch size ", batch), "length ", v.size());
  if (v.size() == 1) return std::vector<int64_t>(batch, v[0]);
  return std::vector<int64_t>(v.begin(), v.begin() + batch);
}

// TND cumulative lengths: non-negative, non-decreasing, last <= total rows.
void CheckCumulative(const std::vector<int64_t>& v, int64_t total, const char* name,
                     const char* total_name) {
  int64_t prev = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    OPENFIA_CHECK(v[i] >= 0, name, "values must be non-negative (不能出现负值)", "entry ", i, " = ",
                  v[i]);
    OPENFIA_CHECK(v[i] >= prev, name,
                  "TND: each value is the cumulative length and must be >= the previous one",
                  "entry ", i, " = ", v[i], " after ", prev);
    prev = v[i];
  }
  if (!v.empty())
    OPENFIA_CHECK(v.back() <= total, name, Str("TND: the last value must not exceed ", total_name),
                  v.back(), " > ", total);
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

FiaLayout ParseLayout(const std::string& s) {
  if (s == "BSH") return FiaLayout::kBSH;
  if (s == "BSND") return FiaLayout::kBSND;
  if (s == "BNSD") return FiaLayout::kBNSD;
  if (s == "BNSD_BSND") return FiaLayout::kBNSD_BSND;
  if (s == "TND") return FiaLayout::kTND;
  Fail(ErrorCode::kInvalidArgument, "input_layout",
       "must be one of BSH, BSND, BNSD, BNSD_BSND, TND", s);
}

// Shape of one batch/tensor of a dense (query-layout) operand.
struct DenseDims {
  int64_t b = 0, s = 0, n = 0, d = 0;  // d in real elements
};

// Reads [B,S,H] / [B,S,N,D] / [B,N,S,D] / [T,N,D]. `heads` is the expected N (checked for the
// N-bearing layouts, used to split H for BSH). `dmul` is 8 for int4 stored as int32.
DenseDims ReadDense(const TensorView& t, FiaLayout layout, int64_t heads, int64_t dmul,
                    const std::string& name, const char* heads_name) {
  DenseDims r;
  switch (layout) {
    case FiaLayout::kBSH: {
      CheckDim(t, name, 3, "[B, S, H] for input_layout BSH");
      r.b = t.size(0);
      r.s = t.size(1);
      const int64_t h = t.size(2) * dmul;
      OPENFIA_CHECK(h % heads == 0, name, Str("H must be divisible by ", heads_name), "H = ", h,
                    ", ", heads_name, " = ", heads);
      r.n = heads;
      r.d = h / heads;
      return r;
    }
    case FiaLayout::kBSND:
      CheckDim(t, name, 4, "[B, S, N, D] for input_layout BSND");
      r = {t.size(0), t.size(1), t.size(2), t.size(3) * dmul};
      break;
    case FiaLayout::kBNSD:
    case FiaLayout::kBNSD_BSND:
      CheckDim(t, name, 4, "[B, N, S, D] for input_layout BNSD");
      r = {t.size(0), t.size(2), t.size(1), t.size(3) * dmul};
      break;
    case FiaLayout::kTND:
      CheckDim(t, name, 3, "[T, N, D] for input_layout TND");
      r = {1, t.size(0), t.size(1), t.size(2) * dmul};
      break;
  }
  OPENFIA_CHECK(r.n == heads, name, Str("the N axis must equal ", heads_name), "N = ", r.n, ", ",
                heads_name, " = ", heads, " (shape ", t.shape_string(), ")");
  return r;
}

// The shape `t` must have when it is `ref` with its D-carrying axis replaced by `d` (real
// elements, stored as d / dmul). For BSH the H axis is heads * d.
std::vector<int64_t> WithD(const TensorView& ref, FiaLayout layout, int64_t heads, int64_t d,
                           int64_t dmul) {
  std::vector<int64_t> s = ref.sizes;
  s.back() = (layout == FiaLayout::kBSH ? heads * d : d) / dmul;
  return s;
}

// Antiquant parameter shape/dtype checks; fills `aq`.
struct AqContext {
  DType q_dtype;
  int64_t batch, h_kv, block_num, block_size;
  int64_t token_s;  // storage S the per-token scales must cover
};

std::vector<std::vector<int64_t>> PerChannelShapes(int64_t lead, int64_t n, int64_t d) {
  return {{lead, n, 1, d}, {lead, n, d}, {lead, n * d}};
}

bool OneOf(const std::vector<int64_t>& s, const std::vector<std::vector<int64_t>>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

void CheckParamDtype(const TensorView& t, const char* name, bool per_token, DType q_dtype) {
  if (per_token) {
    OPENFIA_CHECK(t.dtype == DType::kFloat32, name,
                  "per-token scale/offset dtype is fixed to float32 (数据类型固定为float32)",
                  Name(t.dtype));
  } else {
    OPENFIA_CHECK(t.dtype == q_dtype, name,
                  "per-channel/per-tensor/per-head scale/offset dtype must equal the query dtype",
                  Name(t.dtype), " vs query ", Name(q_dtype));
  }
}

// Separate key_/value_antiquant_* parameters under `mode` (0-5).
FiaAntiquant ResolveSeparate(const TensorView& scale, const TensorView& offset, int64_t mode,
                             int64_t d, const AqContext& c, const char* scale_name,
                             const char* offset_name, const char* mode_name) {
  using F = FiaAntiquant::Form;
  FiaAntiquant aq;
  aq.scale = &scale;
  aq.offset = offset.defined() ? &offset : nullptr;
  const std::vector<int64_t>& s = scale.sizes;
  switch (mode) {
    case 0:
      if (s == std::vector<int64_t>{1}) {
        aq.form = F::kPerTensor;
      } else {
        OPENFIA_CHECK(OneOf(s, PerChannelShapes(1, c.h_kv, d)), scale_name,
                      Str(mode_name, " 0 (per-channel) needs shape (1, N, 1, D), (1, N, D) or "
                          "(1, H) with N = ", c.h_kv, ", D = ", d, ", or (1,) per-tensor"),
                      scale.shape_string());
        aq.form = F::kPerChannel;
      }
      break;
    case 1:
      OPENFIA_CHECK((s.size() == 3 && s[0] == 1 && s[1] == c.batch && s[2] >= c.token_s) ||
                        (s.size() == 2 && s[0] == c.batch && s[1] >= c.token_s),
                    scale_name,
                    Str(mode_name, " 1 (per-token) needs shape (1, B, S) or (B, S) with B = ",
                        c.batch, ", S >= ", c.token_s),
                    scale.shape_string());
      aq.form = F::kPerToken;
      aq.token_s = s.back();
      break;
    case 2:
      OPENFIA_CHECK(s == std::vector<int64_t>{c.h_kv}, scale_name,
                    Str(mode_name, " 2 (per-tensor + per-head) needs shape (N,) with N = ",
                        c.h_kv),
                    scale.shape_string());
      aq.form = F::kPerTensorHead;
      break;
    case 3:
      OPENFIA_CHECK(s.size() == 3 && s[0] == c.batch && s[1] == c.h_kv && s[2] >= c.token_s,
                    scale_name,
                    Str(mode_name, " 3 (per-token + per-head) needs shape (B, N, S) with B = ",
                        c.batch, ", N = ", c.h_kv, ", S >= ", c.token_s),
                    scale.shape_string());
      aq.form = F::kPerTokenHead;
      aq.token_s = s[2];
      break;
    case 4:
      OPENFIA_CHECK((s == std::vector<int64_t>{c.block_num, c.block_size}), scale_name,
                    Str(mode_name, " 4 (per-token, page attention managed) needs shape "
                        "(blocknum, blocksize) = (", c.block_num, ", ", c.block_size, ")"),
                    scale.shape_string());
      aq.form = F::kPagedToken;
      break;
    case 5:
      OPENFIA_CHECK((s == std::vector<int64_t>{c.block_num, c.h_kv, c.block_size}), scale_name,
                    Str(mode_name, " 5 (per-token + per-head, page attention managed) needs "
                        "shape (blocknum, N, blocksize) = (", c.block_num, ", ", c.h_kv, ", ",
                        c.block_size, ")"),
                    scale.shape_string());
      aq.form = F::kPagedTokenHead;
      break;
    default:
      Fail(ErrorCode::kInvalidArgument, mode_name, "must be 0, 1, 2, 3, 4 or 5", Str(mode));
  }
  const bool per_token = mode == 1 || mode == 3 || mode == 4 || mode == 5;
  CheckParamDtype(scale, scale_name, per_token, c.q_dtype);
  CheckContiguous(scale, scale_name);
  if (aq.offset) {
    OPENFIA_CHECK(offset.sizes == scale.sizes, offset_name,
                  Str("must have the same shape as ", scale_name), offset.shape_string(), " vs ",
                  scale.shape_string());
    OPENFIA_CHECK(offset.dtype == scale.dtype, offset_name,
                  Str("must have the same dtype as ", scale_name), Name(offset.dtype), " vs ",
                  Name(scale.dtype));
    CheckContiguous(offset, offset_name);
  }
  return aq;
}

}  // namespace

FiaGeometry AnalyzeFia(const FiaArgs& a) {
  FiaGeometry g;
  using F = FiaAntiquant::Form;

  // =============================== 1. existence ===============================================
  OPENFIA_CHECK(a.query.defined(), "query", "is required", "None");
  const bool use_list = !a.key_list.empty() || !a.value_list.empty();
  if (use_list) {
    OPENFIA_CHECK(!a.key_list.empty(), "key_list", "key_list and value_list must be given together",
                  "empty key_list, ", a.value_list.size(), " value tensors");
    OPENFIA_CHECK(!a.value_list.empty(), "value_list",
                  "key_list and value_list must be given together", "empty value_list, ",
                  a.key_list.size(), " key tensors");
    OPENFIA_CHECK(a.key_list.size() == a.value_list.size(), "value_list",
                  "must have as many tensors as key_list", a.value_list.size(), " vs ",
                  a.key_list.size());
  } else {
    OPENFIA_CHECK(a.key.defined(), "key", "is required", "None");
    OPENFIA_CHECK(a.value.defined(), "value", "is required", "None");
  }
  const std::pair<const TensorView*, const char*> tensors[] = {
      {&a.query, "query"},
      {&a.key, "key"},
      {&a.value, "value"},
      {&a.pse_shift, "pse_shift"},
      {&a.atten_mask, "atten_mask"},
      {&a.dequant_scale1, "dequant_scale1"},
      {&a.quant_scale1, "quant_scale1"},
      {&a.dequant_scale2, "dequant_scale2"},
      {&a.quant_scale2, "quant_scale2"},
      {&a.quant_offset2, "quant_offset2"},
      {&a.antiquant_scale, "antiquant_scale"},
      {&a.antiquant_offset, "antiquant_offset"},
      {&a.block_table, "block_table"},
      {&a.query_padding_size, "query_padding_size"},
      {&a.kv_padding_size, "kv_padding_size"},
      {&a.key_antiquant_scale, "key_antiquant_scale"},
      {&a.key_antiquant_offset, "key_antiquant_offset"},
      {&a.value_antiquant_scale, "value_antiquant_scale"},
      {&a.value_antiquant_offset, "value_antiquant_offset"},
      {&a.key_shared_prefix, "key_shared_prefix"},
      {&a.value_shared_prefix, "value_shared_prefix"},
      {&a.actual_shared_prefix_len, "actual_shared_prefix_len"},
      {&a.query_rope, "query_rope"},
      {&a.key_rope, "key_rope"},
      {&a.key_rope_antiquant_scale, "key_rope_antiquant_scale"},
  };
  for (const auto& [t, name] : tensors)
    if (t->defined() && !(use_list && (t == &a.key || t == &a.value))) CheckWellFormed(*t, name);
  for (size_t i = 0; i < a.key_list.size(); ++i) {
    OPENFIA_CHECK(a.key_list[i].defined(), "key_list", "every tensor must be given",
                  "None at index ", i);
    CheckWellFormed(a.key_list[i], "key_list");
  }
  for (size_t i = 0; i < a.value_list.size(); ++i) {
    OPENFIA_CHECK(a.value_list[i].defined(), "value_list", "every tensor must be given",
                  "None at index ", i);
    CheckWellFormed(a.value_list[i], "value_list");
  }
  // Arguments that only exist in pairs.
  OPENFIA_CHECK(a.query_rope.defined() == a.key_rope.defined(),
                a.query_rope.defined() ? "key_rope" : "query_rope",
                "query_rope and key_rope must be given together (要求同时配置或同时不配置)",
                "only one of them is given");
  OPENFIA_CHECK(a.key_shared_prefix.defined() == a.value_shared_prefix.defined(),
                a.key_shared_prefix.defined() ? "value_shared_prefix" : "key_shared_prefix",
                "key_shared_prefix and value_shared_prefix must both be None or both be given",
                "only one of them is given");
  OPENFIA_CHECK(!a.actual_shared_prefix_len.defined() || a.key_shared_prefix.defined(),
                "actual_shared_prefix_len", "requires key_shared_prefix/value_shared_prefix",
                "given without a shared prefix");
  OPENFIA_CHECK(a.key_antiquant_scale.defined() == a.value_antiquant_scale.defined(),
                a.key_antiquant_scale.defined() ? "value_antiquant_scale" : "key_antiquant_scale",
                "key_antiquant_scale and value_antiquant_scale must both be None or both be given",
                "only one of them is given");
  OPENFIA_CHECK(a.key_antiquant_offset.defined() == a.value_antiquant_offset.defined(),
                a.key_antiquant_offset.defined() ? "value_antiquant_offset"
                                                 : "key_antiquant_offset",
                "key_antiquant_offset and value_antiquant_offset must both be None or both be "
                "given",
                "only one of them is given");
  OPENFIA_CHECK(!a.key_antiquant_offset.defined() || a.key_antiquant_scale.defined(),
                "key_antiquant_offset", "requires key_antiquant_scale", "scale is None");
  OPENFIA_CHECK(!a.antiquant_offset.defined() || a.antiquant_scale.defined(), "antiquant_offset",
                "requires antiquant_scale (非对称量化模式下需同时存在)", "antiquant_scale is None");
  OPENFIA_CHECK(!a.quant_offset2.defined() || a.quant_scale2.defined(), "quant_offset2",
                "requires quant_scale2", "quant_scale2 is None");
  OPENFIA_CHECK_SUPPORTED(!a.key_rope_antiquant_scale.defined(), "key_rope_antiquant_scale",
                          "is a reserved parameter (预留参数，暂未使用) and must be None",
                          a.key_rope_antiquant_scale.shape_string());

  // ---- attributes ----
  g.layout = ParseLayout(a.input_layout);
  const FiaLayout L = g.layout;
  const bool tnd = L == FiaLayout::kTND;
  OPENFIA_CHECK(a.num_heads >= 1, "num_heads", "must be >= 1", a.num_heads);
  OPENFIA_CHECK(a.num_key_value_heads >= 0, "num_key_value_heads",
                "must be >= 0 (0 means equal to num_heads)", a.num_key_value_heads);
  g.h_q = a.num_heads;
  g.h_kv = a.num_key_value_heads == 0 ? a.num_heads : a.num_key_value_heads;
  OPENFIA_CHECK(g.h_q % g.h_kv == 0, "num_key_value_heads",
                "num_heads must be divisible by num_key_value_heads (需要满足num_heads整除"
                "num_key_value_heads)",
                "num_heads = ", g.h_q, ", num_key_value_heads = ", g.h_kv);
  // A NaN or infinite scale would turn every row into NaN (0 * inf): rejected as a usage error.
  OPENFIA_CHECK(std::isfinite(a.scale), "scale", "must be a finite number", a.scale);
  OPENFIA_CHECK(a.inner_precise >= 0 && a.inner_precise <= 3, "inner_precise",
                "must be 0, 1, 2 or 3", a.inner_precise);

  // =============================== 2. query ==================================================
  const TensorView& q = a.query;
  g.q_dtype = q.dtype;
  OPENFIA_CHECK(IsFloat(q.dtype) || q.dtype == DType::kInt8, "query",
                "dtype must be float16, bfloat16, float32 or int8", Name(q.dtype));
  CheckContiguous(q, "query");
  const DenseDims qd = ReadDense(q, L, g.h_q, 1, "query", "num_heads");
  g.d_qk = qd.d;
  g.q_s = qd.s;
  g.incremental = !tnd && qd.s == 1;
  const bool inc = g.incremental;
  if (inc)
    OPENFIA_CHECK(a.inner_precise <= 1, "inner_precise",
                  "must be 0 or 1 when Q_S is 1 (Q_S为1时该参数仅支持0和1)", a.inner_precise);
  OPENFIA_CHECK_SUPPORTED(!(inc && L == FiaLayout::kBNSD_BSND), "input_layout",
                          "BNSD_BSND is only supported when Q_S > 1 (仅支持Q_S大于1)",
                          "BNSD_BSND with Q_S = 1");
  if (tnd) {
    OPENFIA_CHECK(a.actual_seq_lengths.has_value(), "actual_seq_lengths",
                  "must be given for input_layout TND (该入参必须传入)", "None");
    OPENFIA_CHECK(!a.actual_seq_lengths->empty(), "actual_seq_lengths",
                  "must have one entry per batch (at least one) for input_layout TND", "[]");
    g.batch = static_cast<int64_t>(a.actual_seq_lengths->size());
  } else {
    g.batch = qd.b;
  }
  const int64_t B = g.batch;
  // The per-batch bookkeeping is sized by B: past the NPU's documented limit (65536) only a
  // batch the query's elements back, not the batch axis of an empty tensor alone.
  OPENFIA_CHECK(B <= 65536 || B <= q.numel(), "query",
                "a batch above 65536 needs a non-empty query (at least one element per batch)",
                "B = ", B, ", shape ", q.shape_string());
  if (!inc) {
    OPENFIA_CHECK(a.sparse_mode >= 0 && a.sparse_mode <= 8, "sparse_mode",
                  "must be 0, 1, 2, 3 or 4", a.sparse_mode);
    OPENFIA_CHECK_SUPPORTED(a.sparse_mode <= 4, "sparse_mode",
                            "5, 6, 7, 8 (prefix, global, dilated, block_local) are not supported "
                            "(均暂不支持)",
                            a.sparse_mode);
    g.sparse_mode = a.sparse_mode;
  }
  g.pre_tokens = std::clamp<int64_t>(a.pre_tokens, -kInt32Max, kInt32Max);
  g.next_tokens = std::clamp<int64_t>(a.next_tokens, -kInt32Max, kInt32Max);

  // =============================== 2. key / value ============================================
  const TensorView& k0 = use_list ? a.key_list[0] : a.key;
  const TensorView& v0 = use_list ? a.value_list[0] : a.value;
  const char* kname = use_list ? "key_list" : "key";
  const char* vname = use_list ? "value_list" : "value";
  g.kv_dtype = k0.dtype;
  OPENFIA_CHECK(IsFloat(k0.dtype) || k0.dtype == DType::kInt8 || k0.dtype == DType::kInt32, kname,
                "dtype must be float16, bfloat16, float32, int8 or int4 (int32)", Name(k0.dtype));
  OPENFIA_CHECK(v0.dtype == k0.dtype, vname, "dtype must equal the key dtype", Name(v0.dtype),
                " vs ", Name(k0.dtype));
  for (size_t i = 0; i < a.key_list.size(); ++i) {
    OPENFIA_CHECK(a.key_list[i].dtype == k0.dtype, "key_list", "all tensors must share one dtype",
                  Name(a.key_list[i].dtype), " at index ", i);
    OPENFIA_CHECK(a.value_list[i].dtype == k0.dtype, "value_list",
                  "all tensors must share the key dtype", Name(a.value_list[i].dtype),
                  " at index ", i);
    CheckContiguous(a.key_list[i], "key_list");
    CheckContiguous(a.value_list[i], "value_list");
  }
  if (!use_list) {
    CheckContiguous(a.key, "key");
    CheckContiguous(a.value, "value");
  }
  if (IsFloat(q.dtype)) {
    OPENFIA_CHECK(k0.dtype == q.dtype || k0.dtype == DType::kInt8 || k0.dtype == DType::kInt32,
                  kname,
                  "dtype must equal the query dtype, or be int8/int4 (int32) for antiquant",
                  Name(k0.dtype), " with query ", Name(q.dtype));
    g.antiquant = !IsFloat(k0.dtype);
  } else {
    OPENFIA_CHECK(k0.dtype == DType::kInt8, kname, "must be int8 when query is int8",
                  Name(k0.dtype));
    g.full_quant = true;
  }
  g.kv_int4 = k0.dtype == DType::kInt32;
  const int64_t dmul = g.kv_int4 ? 8 : 1;
  OPENFIA_CHECK_SUPPORTED(!(inc && g.full_quant), "query",
                          "int8 query, key and value are not supported when Q_S is 1 "
                          "(query、key、value输入类型均为int8的场景暂不支持)",
                          "Q_S = 1");

  // ---- KV storage form ----
  const bool paged = a.block_table.defined();
  if (paged) {
    OPENFIA_CHECK_SUPPORTED(!use_list, "block_table",
                            "page attention does not support tensorlist key/value "
                            "(page attention不支持tensorlist场景)",
                            a.key_list.size(), " key tensors");
    OPENFIA_CHECK(k0.dim() >= 3 && k0.dim() <= 5, "key",
                  "with block_table must be [blocknum, block_size, H], [blocknum, KV_N, "
                  "block_size, D] or NZ [blocknum, KV_N, D/16, block_size, 16]",
                  k0.shape_string());
    g.kv_form = k0.dim() == 3 ? FiaKvForm::kPaged3
                : k0.dim() == 4 ? FiaKvForm::kPaged4 : FiaKvForm::kPagedNZ;
  } else {
    g.kv_form = use_list ? FiaKvForm::kList : FiaKvForm::kDense;
  }
  OPENFIA_CHECK_SUPPORTED(!(use_list && tnd), "key_list",
                          "input_layout TND does not support tensorlist (TND不支持tensorlist)",
                          a.key_list.size(), " key tensors");

  // ---- KV shapes ----
  int64_t kv_t = 0;  // TND dense: total key rows
  if (g.kv_form == FiaKvForm::kDense) {
    const DenseDims kd = ReadDense(a.key, L, g.h_kv, dmul, "key", "num_key_value_heads");
    const DenseDims vd = ReadDense(a.value, L, g.h_kv, dmul, "value", "num_key_value_heads");
    if (!tnd)
      OPENFIA_CHECK(kd.b == B, "key", "the batch axis must equal the query batch", kd.b,
                    " vs ", B);
    OPENFIA_CHECK(kd.d == g.d_qk, "key", "D must equal the query D", kd.d, " vs ", g.d_qk);
    g.d_v = vd.d;
    OPENFIA_CHECK(a.value.sizes == WithD(a.key, L, g.h_kv, g.d_v, dmul), "value",
                  "shape must equal the key shape (except the head dim D)",
                  a.value.shape_string(), " vs key ", a.key.shape_string());
    kv_t = kd.s;
    g.kv_storage_s.assign(B, kd.s);
  } else if (g.kv_form == FiaKvForm::kList) {
    OPENFIA_CHECK(static_cast<int64_t>(a.key_list.size()) == B, "key_list",
                  "must hold one tensor per batch (个数等于query的B)", a.key_list.size(),
                  " tensors for batch ", B);
    g.kv_storage_s.resize(B);
    for (int64_t b = 0; b < B; ++b) {
      const DenseDims kd =
          ReadDense(a.key_list[b], L, g.h_kv, dmul, "key_list", "num_key_value_heads");
      const DenseDims vd =
          ReadDense(a.value_list[b], L, g.h_kv, dmul, "value_list", "num_key_value_heads");
      OPENFIA_CHECK(kd.b == 1, "key_list", "every tensor must have batch 1 (batch只能为1)",
                    a.key_list[b].shape_string(), " at index ", b);
      OPENFIA_CHECK(kd.d == g.d_qk, "key_list", "D must equal the query D", kd.d, " vs ", g.d_qk,
                    " at index ", b);
      if (b == 0) g.d_v = vd.d;
      OPENFIA_CHECK(a.value_list[b].sizes == WithD(a.key_list[b], L, g.h_kv, g.d_v, dmul),
                    "value_list",
                    "every tensor must have its key's shape (except D), with one D for all",
                    a.value_list[b].shape_string(), " vs key ", a.key_list[b].shape_string(),
                    " at index ", b);
      g.kv_storage_s[b] = kd.s;  // S may differ per tensor, in every layout (seeds/000)
    }
  } else {
    const TensorView& k = a.key;
    const TensorView& v = a.value;
    OPENFIA_CHECK(v.dim() == k.dim(), "value", "must have the same paged layout as key",
                  v.shape_string(), " vs key ", k.shape_string());
    const int64_t base = k.dtype == DType::kInt8 ? 32 : 16;
    g.block_num = k.size(0);
    if (g.kv_form == FiaKvForm::kPaged3) {
      g.block_size = k.size(1);
      OPENFIA_CHECK(k.size(2) * dmul % g.h_kv == 0, "key",
                    "H of [blocknum, block_size, H] must be divisible by num_key_value_heads",
                    k.size(2), " vs ", g.h_kv);
      OPENFIA_CHECK(k.size(2) * dmul / g.h_kv == g.d_qk, "key", "D = H / KV_N must equal the query D",
                    k.size(2) * dmul / g.h_kv, " vs ", g.d_qk);
      OPENFIA_CHECK(v.size(2) * dmul % g.h_kv == 0, "value",
                    "H of [blocknum, block_size, H] must be divisible by num_key_value_heads",
                    v.size(2), " vs ", g.h_kv);
      g.d_v = v.size(2) * dmul / g.h_kv;
    } else if (g.kv_form == FiaKvForm::kPaged4) {
      g.block_size = k.size(2);
      OPENFIA_CHECK(k.size(1) == g.h_kv, "key",
                    "KV_N of [blocknum, KV_N, block_size, D] must equal num_key_value_heads",
                    k.size(1), " vs ", g.h_kv);
      OPENFIA_CHECK(k.size(3) * dmul == g.d_qk, "key", "D must equal the query D",
                    k.size(3) * dmul, " vs ", g.d_qk);
      g.d_v = v.size(3) * dmul;
    } else {
      g.block_size = k.size(3);
      OPENFIA_CHECK(k.size(1) == g.h_kv, "key",
                    "KV_N of NZ [blocknum, KV_N, D/16, block_size, 16] must equal "
                    "num_key_value_heads",
                    k.size(1), " vs ", g.h_kv);
      OPENFIA_CHECK(k.size(4) == base && v.size(4) == base, "key",
                    Str("the last axis of an NZ cache must be ", base, " for ", Name(k.dtype)),
                    k.shape_string());
      OPENFIA_CHECK(k.size(2) * base == g.d_qk, "key", "D = (D/16) * 16 must equal the query D",
                    k.size(2) * base, " vs ", g.d_qk);
      g.d_v = v.size(2) * base;
    }
    std::vector<int64_t> vexp = k.sizes;
    if (g.kv_form == FiaKvForm::kPaged3) vexp[2] = g.h_kv * g.d_v / dmul;
    if (g.kv_form == FiaKvForm::kPaged4) vexp[3] = g.d_v / dmul;
    if (g.kv_form == FiaKvForm::kPagedNZ) vexp[2] = g.d_v / base;
    OPENFIA_CHECK(v.sizes == vexp, "value",
                  "shape must equal the key shape (except the head dim D)", v.shape_string(),
                  " vs key ", k.shape_string());
    OPENFIA_CHECK(a.block_size >= 1, "block_size",
                  "must be >= 1 with page attention (openfia accepts any block size)",
                  a.block_size);
    OPENFIA_CHECK(a.block_size == g.block_size, "block_size",
                  "must equal the block size axis of the key cache", a.block_size, " vs key ",
                  k.shape_string());
    const TensorView& bt = a.block_table;
    OPENFIA_CHECK(bt.dtype == DType::kInt32, "block_table", "dtype must be int32",
                  Name(bt.dtype));
    CheckDim(bt, "block_table", 2, "[B, maxBlockNumPerSeq] (block_table必须为二维)");
    OPENFIA_CHECK(bt.size(0) == B, "block_table", "the first axis must equal the batch B",
                  bt.shape_string(), ", B = ", B);
    // A column slice of a bigger table (row stride > columns) is accepted: rows are read with
    // bt_stride, columns must be adjacent.
    OPENFIA_CHECK((bt.size(1) <= 1 || bt.stride(1) == 1) && bt.stride(0) >= 0, "block_table",
                  "rows must be contiguous (column stride 1, row stride >= 0)", "strides ",
                  bt.strides);
    int64_t extent = 0;  // (rows - 1) * row stride + columns: the table's memory span
    const bool ovf = bt.size(0) > 0 && (__builtin_mul_overflow(bt.size(0) - 1, bt.stride(0),
                                                               &extent) ||
                                        __builtin_add_overflow(extent, bt.size(1), &extent));
    OPENFIA_CHECK(!ovf && extent <= kMaxNumel, "block_table",
                  "row stride times rows must stay addressable", "strides ", bt.strides);
    g.bt_cols = bt.size(1);
  }

  // ---- MLA ----
  if (a.query_rope.defined()) {
    g.mla = true;
    const TensorView& qr = a.query_rope;
    const TensorView& kr = a.key_rope;
    OPENFIA_CHECK(qr.dtype == q.dtype, "query_rope", "dtype must equal the query dtype",
                  Name(qr.dtype), " vs ", Name(q.dtype));
    OPENFIA_CHECK(kr.dtype == k0.dtype, "key_rope", "dtype must equal the key dtype",
                  Name(kr.dtype), " vs ", Name(k0.dtype));
    CheckContiguous(qr, "query_rope");
    CheckContiguous(kr, "key_rope");
    OPENFIA_CHECK(qr.dim() == q.dim(), "query_rope", "must have the query's layout",
                  qr.shape_string(), " vs query ", q.shape_string());
    const DenseDims rd = ReadDense(qr, L, g.h_q, 1, "query_rope", "num_heads");
    g.d_rope = rd.d;
    OPENFIA_CHECK(qr.sizes == WithD(q, L, g.h_q, g.d_rope, 1), "query_rope",
                  "B, N, S must equal the query's (shape中B、N、S与query一致)", qr.shape_string(),
                  " vs query ", q.shape_string());
    std::vector<int64_t> kexp = k0.sizes;
    const int64_t base = k0.dtype == DType::kInt8 ? 32 : 16;
    switch (g.kv_form) {
      case FiaKvForm::kDense: kexp = WithD(a.key, L, g.h_kv, g.d_rope, 1); break;
      case FiaKvForm::kPaged3: kexp[2] = g.h_kv * g.d_rope; break;
      case FiaKvForm::kPaged4: kexp[3] = g.d_rope; break;
      case FiaKvForm::kPagedNZ:
        OPENFIA_CHECK(g.d_rope % base == 0, "query_rope",
                      Str("D must be a multiple of ", base, " with an NZ cache"), g.d_rope);
        kexp[2] = g.d_rope / base;
        break;
      case FiaKvForm::kList: break;
    }
    OPENFIA_CHECK_SUPPORTED(g.kv_form != FiaKvForm::kList, "key_rope",
                            "MLA (query_rope/key_rope) with tensorlist key/value is not supported",
                            "tensorlist");
    OPENFIA_CHECK(kr.sizes == kexp, "key_rope",
                  "shape must equal the key's with D replaced by query_rope's D",
                  kr.shape_string(), " expected ", Str(kexp));
    OPENFIA_CHECK_SUPPORTED(g.kv_form != FiaKvForm::kPagedNZ || L != FiaLayout::kBNSD, "key_rope",
                            "MLA with an NZ cache does not support input_layout BNSD "
                            "(当数据格式为NZ时input_layout不支持BNSD)",
                            "BNSD");
    OPENFIA_CHECK_SUPPORTED(!g.antiquant && !g.full_quant, "key_rope",
                            "MLA with int8/int4 query or key is not supported (its rope "
                            "dequantization parameter key_rope_antiquant_scale is reserved)",
                            Name(q.dtype), " query, ", Name(k0.dtype), " key");
  }

  {
    // num_heads only divides H in BSH, so an empty H admits any num_heads: keep every output
    // size and offset representable.
    int64_t n = 1;
    bool ovf = false;
    for (int64_t x : {std::max<int64_t>(B, 1), std::max<int64_t>(g.q_s, 1), g.h_q,
                      std::max<int64_t>(g.d_v, 1)})
      ovf = ovf || __builtin_mul_overflow(n, x, &n);
    OPENFIA_CHECK(!ovf && n <= kMaxNumel, "num_heads",
                  "the output size B * S * num_heads * D must stay addressable",
                  "num_heads = ", g.h_q, ", D = ", g.d_v);
  }
  // =============================== 3. per-batch lengths ======================================
  // ---- query ----
  g.q_begin.assign(B, 0);
  g.q_len.assign(B, inc ? 1 : g.q_s);
  if (tnd) {
    const auto& v = *a.actual_seq_lengths;
    CheckCumulative(v, g.q_s, "actual_seq_lengths", "T of query");
    for (int64_t b = 0; b < B; ++b) {
      g.q_begin[b] = b ? v[b - 1] : 0;
      g.q_len[b] = v[b] - g.q_begin[b];
    }
    OPENFIA_CHECK_SUPPORTED(!a.query_padding_size.defined() && !a.kv_padding_size.defined(),
                            a.query_padding_size.defined() ? "query_padding_size"
                                                           : "kv_padding_size",
                            "input_layout TND does not support left padding (TND不支持左padding)",
                            "given");
  } else if (!inc && a.actual_seq_lengths) {
    const auto v = Broadcast(*a.actual_seq_lengths, B, "actual_seq_lengths");
    for (int64_t b = 0; b < B; ++b) {
      OPENFIA_CHECK(v[b] >= 0 && v[b] <= g.q_s, "actual_seq_lengths",
                    Str("each value must be in [0, Q_S = ", g.q_s,
                        "] (不大于query中对应batch的seqlen)"),
                    "batch ", b, ": ", v[b]);
      g.q_len[b] = v[b];
    }
  }
  // Query left padding: Q_S > 1 only, and only together with actual_seq_lengths.
  const bool q_pad = !inc && !tnd && a.query_padding_size.defined() &&
                     a.actual_seq_lengths.has_value();
  if (q_pad) {
    const int64_t pad = std::max<int64_t>(0, ReadInt64Scalar(a.query_padding_size,
                                                             "query_padding_size"));
    for (int64_t b = 0; b < B; ++b) {
      // start = Q_S - pad - act >= 0 (the end Q_S - pad <= Q_S holds since pad >= 0).
      OPENFIA_CHECK(pad <= g.q_s && g.q_len[b] <= g.q_s - pad, "query_padding_size",
                    "query left padding start Q_S - query_padding_size - actual_seq_lengths "
                    "must be >= 0 (搬运起点不能小于0)",
                    "Q_S = ", g.q_s, ", query_padding_size = ", pad, ", actual_seq_lengths[", b,
                    "] = ", g.q_len[b]);
      g.q_begin[b] = g.q_s - pad - g.q_len[b];
    }
  }

  // ---- key/value ----
  g.kv_begin.assign(B, 0);
  g.kv_len.assign(B, 0);
  bool kv_pad = false;
  if (paged) {
    OPENFIA_CHECK(a.actual_seq_lengths_kv.has_value(), "actual_seq_lengths_kv",
                  "must be given with page attention (page attention场景下，必须传入)", "None");
    std::vector<int64_t> v;
    if (tnd) {
      OPENFIA_CHECK(static_cast<int64_t>(a.actual_seq_lengths_kv->size()) == B,
                    "actual_seq_lengths_kv",
                    "with TND and page attention its length must equal the batch (长度等于Batch)",
                    a.actual_seq_lengths_kv->size(), " vs ", B);
      v = *a.actual_seq_lengths_kv;
    } else {
      v = Broadcast(*a.actual_seq_lengths_kv, B, "actual_seq_lengths_kv");
    }
    int64_t max_blocks = 0, sum_blocks = 0;
    for (int64_t b = 0; b < B; ++b) {
      OPENFIA_CHECK(v[b] >= 0 && v[b] <= kMaxNumel, "actual_seq_lengths_kv",
                    Str("values must be in [0, ", kMaxNumel, "]"), "batch ", b, ": ", v[b]);
      g.kv_len[b] = v[b];
      const int64_t nb = CeilDiv(v[b], g.block_size);
      OPENFIA_CHECK(nb <= g.bt_cols, "block_table",
                    "the second axis must not be smaller than maxBlockNumPerSeq = "
                    "ceil(actual_seq_lengths_kv / block_size)",
                    "batch ", b, " needs ", nb, " blocks, block_table is ",
                    a.block_table.shape_string());
      max_blocks = std::max(max_blocks, nb);
      sum_blocks += nb;
    }
    OPENFIA_CHECK(sum_blocks <= g.block_num, "key",
                  "blocknum must not be smaller than the sum of the blocks every batch needs "
                  "(blocknum不能小于每个batch的block数量之和)",
                  "blocknum = ", g.block_num, ", needed ", sum_blocks);
    // Every block id a batch reads must address a block of the cache; trailing unused entries
    // may hold anything (the goldens fill them with -1).
    const int32_t* bt = static_cast<const int32_t*>(a.block_table.data);
    const int64_t bt_stride = a.block_table.stride(0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t nb = CeilDiv(g.kv_len[b], g.block_size);
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t id = bt[b * bt_stride + i];
        OPENFIA_CHECK(id >= 0 && id < g.block_num, "block_table",
                      Str("every block id a batch uses must be in [0, blocknum = ", g.block_num,
                          ")"),
                      "block_table[", b, "][", i, "] = ", id);
      }
    }
    g.kv_s_for_masks = max_blocks * g.block_size;  // <= kv_len + block_size: no overflow
  } else if (tnd) {
    OPENFIA_CHECK(a.actual_seq_lengths_kv.has_value(), "actual_seq_lengths_kv",
                  "must be given for input_layout TND (该入参必须传入)", "None");
    const auto& v = *a.actual_seq_lengths_kv;
    OPENFIA_CHECK(static_cast<int64_t>(v.size()) == B, "actual_seq_lengths_kv",
                  "with TND its length must equal the batch (元素的数量等于Batch值)", v.size(),
                  " vs ", B);
    CheckCumulative(v, kv_t, "actual_seq_lengths_kv", "T of key");
    for (int64_t b = 0; b < B; ++b) {
      g.kv_begin[b] = b ? v[b - 1] : 0;
      g.kv_len[b] = v[b] - g.kv_begin[b];
    }
    g.kv_s_for_masks = kv_t;
  } else {
    if (a.actual_seq_lengths_kv) {
      const auto v = Broadcast(*a.actual_seq_lengths_kv, B, "actual_seq_lengths_kv");
      for (int64_t b = 0; b < B; ++b) {
        OPENFIA_CHECK(v[b] >= 0 && v[b] <= g.kv_storage_s[b], "actual_seq_lengths_kv",
                      Str("each value must be in [0, KV_S = ", g.kv_storage_s[b],
                          "] (不大于key/value中对应batch的seqlenKv)"),
                      "batch ", b, ": ", v[b]);
        g.kv_len[b] = v[b];
      }
    } else {
      g.kv_len = g.kv_storage_s;
    }
    for (int64_t b = 0; b < B; ++b) g.kv_s_for_masks = std::max(g.kv_s_for_masks,
                                                              g.kv_storage_s[b]);
    // KV left padding, only together with actual_seq_lengths_kv.
    kv_pad = a.kv_padding_size.defined() && a.actual_seq_lengths_kv.has_value();
    if (kv_pad) {
      const int64_t pad = std::max<int64_t>(0, ReadInt64Scalar(a.kv_padding_size,
                                                               "kv_padding_size"));
      for (int64_t b = 0; b < B; ++b) {
        const int64_t s = g.kv_storage_s[b];
        const bool ok = pad <= s && g.kv_len[b] <= s - pad;
        if (!ok && inc) {
          // Q_S == 1: "搬运起点或终点小于0时，返回数据结果为全0": the batch attends nothing.
          g.kv_begin[b] = 0;
          g.kv_len[b] = 0;
          continue;
        }
        OPENFIA_CHECK(ok, "kv_padding_size",
                      "kv left padding start KV_S - kv_padding_size - actual_seq_lengths_kv "
                      "must be >= 0 (搬运起点不能小于0)",
                      "KV_S = ", s, ", kv_padding_size = ", pad, ", actual_seq_lengths_kv[", b,
                      "] = ", g.kv_len[b]);
        g.kv_begin[b] = s - pad - g.kv_len[b];
      }
    }
  }
  g.left_padding = q_pad || kv_pad;

  // ---- shared prefix ----
  if (a.key_shared_prefix.defined()) {
    const TensorView& kp = a.key_shared_prefix;
    const TensorView& vp = a.value_shared_prefix;
    OPENFIA_CHECK_SUPPORTED(!paged, "key_shared_prefix",
                            "prefix does not support page attention (prefix不支持PageAttention)",
                            "block_table given");
    OPENFIA_CHECK_SUPPORTED(!use_list, "key_shared_prefix",
                            "prefix does not support tensorlist (不支持tensorlist场景)",
                            "key_list given");
    OPENFIA_CHECK_SUPPORTED(!tnd, "key_shared_prefix", "input_layout TND does not support prefix",
                            "TND");
    OPENFIA_CHECK_SUPPORTED(!a.query_padding_size.defined() && !a.kv_padding_size.defined(),
                            "key_shared_prefix",
                            "prefix does not support left padding (不支持左padding场景)",
                            "query_padding_size/kv_padding_size given");
    OPENFIA_CHECK_SUPPORTED(!g.full_quant, "key_shared_prefix",
                            "prefix does not support int8 query, key and value "
                            "(不支持输入qkv全部为int8的场景)",
                            "int8");
    OPENFIA_CHECK_SUPPORTED(!g.mla, "key_shared_prefix",
                            "prefix with MLA (query_rope/key_rope) is not supported", "MLA");
    OPENFIA_CHECK(kp.dtype == a.key.dtype, "key_shared_prefix", "dtype must equal the key dtype",
                  Name(kp.dtype), " vs ", Name(a.key.dtype));
    OPENFIA_CHECK(vp.dtype == a.value.dtype, "value_shared_prefix",
                  "dtype must equal the value dtype", Name(vp.dtype), " vs ",
                  Name(a.value.dtype));
    CheckContiguous(kp, "key_shared_prefix");
    CheckContiguous(vp, "value_shared_prefix");
    OPENFIA_CHECK(kp.dim() == a.key.dim(), "key_shared_prefix",
                  "must have as many dimensions as key (维度相同)", kp.shape_string());
    OPENFIA_CHECK(vp.dim() == a.value.dim(), "value_shared_prefix",
                  "must have as many dimensions as value (维度相同)", vp.shape_string());
    const DenseDims kpd = ReadDense(kp, L, g.h_kv, dmul, "key_shared_prefix",
                                    "num_key_value_heads");
    OPENFIA_CHECK(kpd.b == 1, "key_shared_prefix", "the batch axis must be 1 (第一维batch必须为1)",
                  kp.shape_string());
    OPENFIA_CHECK(kpd.d == g.d_qk, "key_shared_prefix", "N and D (H) must equal the key's",
                  kp.shape_string(), " vs key ", a.key.shape_string());
    const DenseDims vpd = ReadDense(vp, L, g.h_kv, dmul, "value_shared_prefix",
                                    "num_key_value_heads");
    OPENFIA_CHECK(vpd.b == 1, "value_shared_prefix",
                  "the batch axis must be 1 (第一维batch必须为1)", vp.shape_string());
    OPENFIA_CHECK(vpd.d == g.d_v, "value_shared_prefix", "N and D (H) must equal the value's",
                  vp.shape_string(), " vs value ", a.value.shape_string());
    OPENFIA_CHECK(vpd.s == kpd.s, "value_shared_prefix",
                  "S must equal key_shared_prefix's S (S应相等)", vpd.s, " vs ", kpd.s);
    g.prefix_s = kpd.s;
    g.prefix_len = kpd.s;
    if (a.actual_shared_prefix_len.defined()) {
      const int64_t p = ReadInt64Scalar(a.actual_shared_prefix_len, "actual_shared_prefix_len");
      OPENFIA_CHECK(p >= 0 && p <= kpd.s, "actual_shared_prefix_len",
                    "must be in [0, S of key_shared_prefix] (值不能大于key_shared_prefix的S)", p,
                    " with prefix S ", kpd.s);
      g.prefix_len = p;
    }
  }

  // =============================== 3. atten_mask =============================================
  const TensorView& m = a.atten_mask;
  const int64_t mode = g.sparse_mode;
  if (!inc) {
    if (tnd)
      OPENFIA_CHECK_SUPPORTED((mode == 0 && !m.defined()) || (mode == 3 && m.defined()),
                              "sparse_mode",
                              "input_layout TND supports only sparse_mode 0 without atten_mask "
                              "or sparse_mode 3 with atten_mask",
                              "sparse_mode ", mode, m.defined() ? " with" : " without",
                              " atten_mask");
    if (g.mla)
      OPENFIA_CHECK_SUPPORTED(mode == 3 && m.defined(), "sparse_mode",
                              "MLA with Q_S > 1 supports only sparse_mode 3 with atten_mask "
                              "(Q_S大于1时只支持sparse=3且传入mask)",
                              "sparse_mode ", mode, m.defined() ? " with" : " without",
                              " atten_mask");
    if (mode >= 1)
      OPENFIA_CHECK(m.defined(), "atten_mask", Str("is required by sparse_mode ", mode),
                    "None");
  } else if (g.mla) {
    OPENFIA_CHECK_SUPPORTED(!m.defined(), "atten_mask",
                            "MLA with Q_S = 1 supports only sparse 0 without a mask "
                            "(Q_S等于1时只支持sparse=0且不传mask)",
                            m.shape_string());
  }
  if (m.defined()) {
    OPENFIA_CHECK(m.dtype == DType::kBool || m.dtype == DType::kInt8 || m.dtype == DType::kUInt8,
                  "atten_mask", "dtype must be bool, int8 or uint8", Name(m.dtype));
    CheckContiguous(m, "atten_mask");
    const int64_t need_cols = g.prefix_len + g.kv_s_for_masks;
    if (!inc && mode >= 2) {
      g.causal_mask = true;
      const auto& s = m.sizes;
      const bool ok = (s.size() >= 2 && s.size() <= 4 && s[s.size() - 1] == kCausalMaskSize &&
                       s[s.size() - 2] == kCausalMaskSize &&
                       std::all_of(s.begin(), s.end() - 2, [](int64_t x) { return x == 1; }));
      OPENFIA_CHECK(ok, "atten_mask",
                    Str("sparse_mode ", mode, " needs the optimized mask of shape (2048, 2048), "
                        "(1, 2048, 2048) or (1, 1, 2048, 2048)"),
                    m.shape_string());
      // The kernel reads the compressed mask at diagonal offsets, so only the documented
      // constant triu(ones, k=1) gives the documented band; anything else is refused.
      // Row r is zero at columns <= r and nonzero above: memcmp against zeros and memchr for a
      // zero byte do it at memory speed (this runs on every prompt call with sparse_mode 2-4);
      // the element loop below only names the first wrong cell.
      const uint8_t* p = static_cast<const uint8_t*>(m.data);
      static const uint8_t kZeros[kCausalMaskSize] = {};
      bool exact = true;
      for (int64_t r = 0; r < kCausalMaskSize && exact; ++r) {
        const uint8_t* row = p + r * kCausalMaskSize;
        exact = std::memcmp(row, kZeros, r + 1) == 0 &&
                std::memchr(row + r + 1, 0, kCausalMaskSize - r - 1) == nullptr;
      }
      for (int64_t r = 0; r < kCausalMaskSize && !exact; ++r)
        for (int64_t c = 0; c < kCausalMaskSize; ++c) {
          const bool want = c > r;
          const bool got = p[r * kCausalMaskSize + c] != 0;
          OPENFIA_CHECK(want == got, "atten_mask",
                        Str("sparse_mode ", mode, " needs the upper-triangular mask "
                            "triu(ones(2048, 2048), k=1) (1 above the diagonal, 0 elsewhere)"),
                        "mask[", r, "][", c, "] = ", int{p[r * kCausalMaskSize + c]});
        }
    } else {
      g.user_mask = true;
      const auto& s = m.sizes;
      const int64_t dim = m.dim();
      OPENFIA_CHECK(dim >= 2 && dim <= 4, "atten_mask",
                    inc ? "shape must be (B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S)"
                        : "shape must be (Q_S, KV_S), (B, Q_S, KV_S), (1, Q_S, KV_S), "
                          "(B, 1, Q_S, KV_S) or (1, 1, Q_S, KV_S)",
                    m.shape_string());
      const bool has_batch = inc || dim >= 3;
      if (has_batch)
        OPENFIA_CHECK(s[0] == B || s[0] == 1, "atten_mask",
                      Str("the batch axis must be B = ", B, " or 1"), m.shape_string());
      if (dim == 4)
        OPENFIA_CHECK(s[1] == 1, "atten_mask",
                      "the second axis of a 4-D mask must be 1 (masks are shared by heads)",
                      m.shape_string());
      const int64_t need_rows = inc ? 1 : g.q_s;
      if (!(inc && dim == 2))
        OPENFIA_CHECK(s[dim - 2] >= need_rows, "atten_mask",
                      Str("the Q_S axis must be >= ", need_rows, " (Q_S may be padded up)"),
                      m.shape_string());
      OPENFIA_CHECK(s[dim - 1] >= need_cols, "atten_mask",
                    Str("the KV_S axis must be >= ",
                        g.prefix_len ? "actual_shared_prefix_len + " : "",
                        paged ? "maxBlockNumPerSeq * block_size = " : "KV_S = ", need_cols),
                    m.shape_string());
    }
  }
  const bool band_mode0 = mode == 0 && m.defined() && !g.left_padding;

  // =============================== 3. pse_shift ==============================================
  if (a.pse_shift.defined()) {
    const TensorView& p = a.pse_shift;
    OPENFIA_CHECK_SUPPORTED(!tnd, "pse_shift", "input_layout TND does not support pse (TND不支持pse)",
                            p.shape_string());
    OPENFIA_CHECK(IsFloat(p.dtype), "pse_shift",
                  "dtype must be float16 or bfloat16 (float32 with a float32 query)",
                  Name(p.dtype));
    if (inc) {
      OPENFIA_CHECK(p.dtype == q.dtype, "pse_shift",
                    "dtype must equal the query dtype when Q_S is 1", Name(p.dtype), " vs ",
                    Name(q.dtype));
    } else {
      const bool ok = p.dtype == q.dtype || (p.dtype == DType::kFloat16 && q.dtype == DType::kInt8);
      OPENFIA_CHECK(ok, "pse_shift",
                    "float16 pse needs a float16 or int8 query, bfloat16 pse a bfloat16 query",
                    Name(p.dtype), " with query ", Name(q.dtype));
    }
    CheckContiguous(p, "pse_shift");
    CheckDim(p, "pse_shift", 4, "(B, N, Q_S, KV_S) or (1, N, Q_S, KV_S)");
    OPENFIA_CHECK((p.size(0) == B || p.size(0) == 1) && p.size(1) == g.h_q, "pse_shift",
                  Str("shape must be (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S) with B = ", B,
                      ", N = ", g.h_q),
                  p.shape_string());
    OPENFIA_CHECK(p.size(2) >= (inc ? 1 : g.q_s), "pse_shift",
                  "the Q_S axis must be >= the query's S (Q_S需大于等于query的S长度)",
                  p.shape_string());
    OPENFIA_CHECK(p.size(3) >= g.prefix_len + g.kv_s_for_masks, "pse_shift",
                  Str("the KV_S axis must be >= ",
                      g.prefix_len ? "actual_shared_prefix_len + " : "",
                      "the key's S = ", g.prefix_len + g.kv_s_for_masks),
                  p.shape_string());
  }

  // =============================== 3. antiquant ==============================================
  const bool sep = a.key_antiquant_scale.defined();
  const bool legacy = a.antiquant_scale.defined();
  if (!g.antiquant) {
    const char* extra = sep ? "key_antiquant_scale" : legacy ? "antiquant_scale" : nullptr;
    OPENFIA_CHECK(extra == nullptr, extra ? extra : "",
                  "is only valid with int8/int4 (int32) key and value and a floating-point query",
                  Name(k0.dtype), " key, ", Name(q.dtype), " query");
  } else {
    OPENFIA_CHECK(sep || legacy, "antiquant_scale",
                  "int8/int4 key and value with a floating-point query need antiquant_scale or "
                  "key_antiquant_scale/value_antiquant_scale",
                  "None");
    int64_t token_s = 0;
    for (int64_t s : g.kv_storage_s) token_s = std::max(token_s, s);
    // A paged cache has no storage S: per-token (B, S) scales are indexed by the token's
    // position in its sequence and must cover every batch's actual_seq_lengths_kv.
    if (paged)
      for (int64_t s : g.kv_len) token_s = std::max(token_s, s);
    const AqContext c{q.dtype, B, g.h_kv, g.block_num, g.block_size, token_s};
    if (sep) {
      // KV-separated parameters win over the legacy joint ones (以KV分离量化参数为准).
      const int64_t km = a.key_antiquant_mode, vm = a.value_antiquant_mode;
      OPENFIA_CHECK(km >= 0 && km <= 5, "key_antiquant_mode", "must be 0, 1, 2, 3, 4 or 5", km);
      OPENFIA_CHECK(vm >= 0 && vm <= 5, "value_antiquant_mode", "must be 0, 1, 2, 3, 4 or 5", vm);
      OPENFIA_CHECK(km == vm || (km == 0 && vm == 1), "value_antiquant_mode",
                    "must equal key_antiquant_mode, except key mode 0 with value mode 1",
                    "key_antiquant_mode = ", km, ", value_antiquant_mode = ", vm);
      if (!inc) {
        OPENFIA_CHECK_SUPPORTED(km == 1 && vm == 1, "key_antiquant_mode",
                                "only per-token mode 1 is supported when Q_S > 1 "
                                "(Q_S大于等于2时仅支持传入值为1)",
                                "key_antiquant_mode = ", km, ", value_antiquant_mode = ", vm);
        OPENFIA_CHECK_SUPPORTED(!use_list && !g.left_padding && !paged &&
                                    !a.key_shared_prefix.defined(),
                                "key_antiquant_scale",
                                "KV-separated antiquant with Q_S > 1 does not support tensorlist, "
                                "left padding, page attention or prefix",
                                use_list ? "tensorlist" : g.left_padding ? "left padding"
                                : paged ? "page attention" : "prefix");
      }
      g.k_aq = ResolveSeparate(a.key_antiquant_scale, a.key_antiquant_offset, km, g.d_qk, c,
                               "key_antiquant_scale", "key_antiquant_offset",
                               "key_antiquant_mode");
      g.v_aq = ResolveSeparate(a.value_antiquant_scale, a.value_antiquant_offset, vm, g.d_v, c,
                               "value_antiquant_scale", "value_antiquant_offset",
                               "value_antiquant_mode");
      if (km == vm && g.d_qk == g.d_v) {
        OPENFIA_CHECK(a.value_antiquant_scale.sizes == a.key_antiquant_scale.sizes,
                      "value_antiquant_scale",
                      "must have the key_antiquant_scale shape (shape需要保持一致)",
                      a.value_antiquant_scale.shape_string(), " vs ",
                      a.key_antiquant_scale.shape_string());
        if (a.key_antiquant_offset.defined())
          OPENFIA_CHECK(a.value_antiquant_offset.sizes == a.key_antiquant_offset.sizes,
                        "value_antiquant_offset",
                        "must have the key_antiquant_offset shape (shape需要保持一致)",
                        a.value_antiquant_offset.shape_string(), " vs ",
                        a.key_antiquant_offset.shape_string());
      }
    } else {
      const TensorView& s = a.antiquant_scale;
      OPENFIA_CHECK(a.antiquant_mode == 0 || a.antiquant_mode == 1, "antiquant_mode",
                    "must be 0 (per-channel/per-tensor) or 1 (per-token)", a.antiquant_mode);
      FiaAntiquant aq;
      aq.scale = &s;
      aq.offset = a.antiquant_offset.defined() ? &a.antiquant_offset : nullptr;
      if (a.antiquant_mode == 1) {
        OPENFIA_CHECK(s.dim() == 3 && s.size(0) == 2 && s.size(1) == B && s.size(2) >= token_s,
                      "antiquant_scale",
                      Str("per-token (antiquant_mode 1) needs shape (2, B, S) with B = ", B,
                          ", S >= ", token_s),
                      s.shape_string());
        aq.form = F::kPerToken;
        aq.token_s = s.size(2);
      } else if (s.dim() == 1) {
        OPENFIA_CHECK(s.size(0) == 2, "antiquant_scale", "per-tensor needs shape (2,)",
                      s.shape_string());
        aq.form = F::kPerTensor;
      } else {
        OPENFIA_CHECK(g.d_qk == g.d_v, "antiquant_scale",
                      "joint K/V per-channel parameters need equal key and value D", g.d_qk,
                      " vs ", g.d_v);
        OPENFIA_CHECK(OneOf(s.sizes, PerChannelShapes(2, g.h_kv, g.d_qk)), "antiquant_scale",
                      Str("per-channel needs shape (2, N, 1, D), (2, N, D) or (2, H) with N = ",
                          g.h_kv, ", D = ", g.d_qk),
                      s.shape_string());
        aq.form = F::kPerChannel;
      }
      CheckParamDtype(s, "antiquant_scale", aq.form == F::kPerToken, q.dtype);
      CheckContiguous(s, "antiquant_scale");
      if (aq.offset) {
        OPENFIA_CHECK(a.antiquant_offset.sizes == s.sizes, "antiquant_offset",
                      "must have the same shape as antiquant_scale",
                      a.antiquant_offset.shape_string(), " vs ", s.shape_string());
        OPENFIA_CHECK(a.antiquant_offset.dtype == s.dtype, "antiquant_offset",
                      "must have the same dtype as antiquant_scale",
                      Name(a.antiquant_offset.dtype), " vs ", Name(s.dtype));
        CheckContiguous(a.antiquant_offset, "antiquant_offset");
      }
      g.k_aq = aq;
      g.k_aq.index = 0;
      g.v_aq = aq;
      g.v_aq.index = 1;
    }
    const char* aq_name = sep ? "key_antiquant_scale" : "antiquant_scale";
    const auto is_token = [](F f) { return f == F::kPerToken || f == F::kPerTokenHead; };
    const auto is_paged_token = [](F f) {
      return f == F::kPagedToken || f == F::kPagedTokenHead;
    };
    OPENFIA_CHECK_SUPPORTED(inc || !paged, "block_table",
                            "page attention does not support antiquant when Q_S > 1 "
                            "(page attention不支持伪量化场景)",
                            Name(k0.dtype), " key");
    if (paged) {
      // Per-token (B, S) / (B, N, S) scales with a paged cache (the Q_S == 1 table lists them
      // without excluding page attention): indexed by (batch, token position in the sequence),
      // see Dequant::logical; modes 4/5 index by (block, row) instead.
    } else {
      OPENFIA_CHECK(!is_paged_token(g.k_aq.form) && !is_paged_token(g.v_aq.form),
                    "key_antiquant_mode",
                    "modes 4 and 5 manage scales by page attention and need block_table",
                    "block_table is None");
    }
    if (a.key_shared_prefix.defined())
      OPENFIA_CHECK_SUPPORTED(!is_token(g.k_aq.form) && !is_token(g.v_aq.form), aq_name,
                              "per-token antiquant with a shared prefix is not supported (the "
                              "source defines no scale for prefix tokens)",
                              "per-token scales with key_shared_prefix");
    if (g.kv_int4) {
      OPENFIA_CHECK_SUPPORTED(!paged, "block_table",
                              "int4 (int32) key/value do not support page attention "
                              "(不支持Q为bfloat16、float16、key、value为int4（int32）的场景)",
                              "int32 key");
      OPENFIA_CHECK_SUPPORTED(!kv_pad, "kv_padding_size",
                              "kv left padding does not support int4 (int32) key/value",
                              "int32 key");
    }
  }
  OPENFIA_CHECK_SUPPORTED(!(tnd && g.antiquant), "key",
                          "input_layout TND does not support antiquant (TND不支持伪量化)",
                          Name(k0.dtype));
  OPENFIA_CHECK_SUPPORTED(!(tnd && g.full_quant), "query",
                          "input_layout TND does not support full quantization (TND不支持全量化)",
                          Name(q.dtype));
  OPENFIA_CHECK_SUPPORTED(!(paged && g.full_quant), "query",
                          "page attention does not support an int8 query "
                          "(page attention场景下，不支持输入query为int8的场景)",
                          "int8");

  // =============================== 3. quantization ===========================================
  g.post_quant = a.quant_scale2.defined();
  if (g.full_quant) {
    OPENFIA_CHECK(a.dequant_scale1.defined(), "dequant_scale1",
                  "is required when query, key and value are int8", "None");
    OPENFIA_CHECK(a.quant_scale1.defined(), "quant_scale1",
                  "is required when query, key and value are int8", "None");
    OPENFIA_CHECK(a.dequant_scale2.defined(), "dequant_scale2",
                  "is required when query, key and value are int8", "None");
    // Decision (as the golden, FIA-GOLD _np_pfaattention_act_int8): dequant_scale1 is truncated
    // to 19 significant bits (fp32 bits & 0xFFFFE000) whether it arrives as float32 or uint64;
    // dequant_scale2 and quant_scale1 are used as given.
    g.dequant_scale1 =
        BitsToFloat(ReadScaleBits(a.dequant_scale1, "dequant_scale1", true) & 0xFFFFE000u);
    g.quant_scale1 = BitsToFloat(ReadScaleBits(a.quant_scale1, "quant_scale1", false));
    g.dequant_scale2 = BitsToFloat(ReadScaleBits(a.dequant_scale2, "dequant_scale2", true));
  } else {
    const std::pair<const TensorView*, const char*> fq[] = {
        {&a.dequant_scale1, "dequant_scale1"},
        {&a.quant_scale1, "quant_scale1"},
        {&a.dequant_scale2, "dequant_scale2"}};
    for (const auto& [t, name] : fq)
      OPENFIA_CHECK(!t->defined(), name,
                    "must be None unless query, key and value are int8 (若存在则报错)",
                    t->shape_string());
  }
  if (g.post_quant) {
    const TensorView& s = a.quant_scale2;
    OPENFIA_CHECK(s.dtype == DType::kFloat32 ||
                      (s.dtype == DType::kBFloat16 && q.dtype == DType::kBFloat16),
                  "quant_scale2",
                  "dtype must be float32 (bfloat16 is also accepted with a bfloat16 query)",
                  Name(s.dtype), " with query ", Name(q.dtype));
    CheckContiguous(s, "quant_scale2");
    const int64_t n = s.numel();
    const int64_t hd = g.h_q * g.d_v;
    OPENFIA_CHECK(n == 1 || n == hd, "quant_scale2",
                  Str("per-tensor needs one element, per-channel a product of dimensions equal to "
                      "N * D = ", hd),
                  s.shape_string());
    g.post_quant_per_channel = n != 1;
    if (a.quant_offset2.defined()) {
      OPENFIA_CHECK(a.quant_offset2.dtype == s.dtype && a.quant_offset2.sizes == s.sizes,
                    "quant_offset2",
                    "must have the dtype and shape of quant_scale2 (类型和shape信息与quantScale2一致)",
                    Name(a.quant_offset2.dtype), " ", a.quant_offset2.shape_string(), " vs ",
                    Name(s.dtype), " ", s.shape_string());
      CheckContiguous(a.quant_offset2, "quant_offset2");
    }
    g.quant_scale2.resize(n);
    g.quant_offset2.assign(n, 0.f);
    for (int64_t i = 0; i < n; ++i) g.quant_scale2[i] = LoadFloat(s.data, ElemOf(s.dtype), i);
    if (a.quant_offset2.defined())
      for (int64_t i = 0; i < n; ++i) g.quant_offset2[i] = LoadFloat(a.quant_offset2.data, ElemOf(a.quant_offset2.dtype), i);

    OPENFIA_CHECK_SUPPORTED(!tnd, "quant_scale2",
                            "input_layout TND does not support post-quantization (TND不支持后量化)",
                            "TND");
    OPENFIA_CHECK_SUPPORTED(!g.kv_int4, "quant_scale2",
                            "int4 (int32) antiquant does not support post-quantization "
                            "(int4（int32）伪量化场景不支持后量化)",
                            "int32 key");
    if (!inc) {
      OPENFIA_CHECK_SUPPORTED(!(g.post_quant_per_channel && g.left_padding), "quant_scale2",
                              "per-channel post-quantization does not support left padding "
                              "(暂不支持左padding)",
                              "left padding");
      OPENFIA_CHECK_SUPPORTED(!(mode == 4 && (a.pre_tokens < 0 || a.next_tokens < 0)),
                              "sparse_mode",
                              "int8 output does not support band mode with negative "
                              "pre_tokens/next_tokens (暂不支持sparse为band且preTokens/nextTokens"
                              "为负数)",
                              "pre_tokens = ", a.pre_tokens, ", next_tokens = ", a.next_tokens);
      // Rows that attend nothing would be quant_offset2 on the NPU and 0 in the golden: the
      // source intercepts these configurations (该场景会拦截).
      if (a.quant_offset2.defined() && a.quant_offset2.numel() > 0) {
        for (int64_t b = 0; b < B; ++b) {
          const int64_t s1 = g.q_len[b], s2 = g.kv_len[b] + g.prefix_len;
          bool bad = false;
          if (band_mode0) bad = s1 - s2 - g.pre_tokens > 0 || g.next_tokens < 0;
          if (mode == 3) bad = s2 - s1 < 0;
          if (mode == 4) bad = g.pre_tokens < 0 || g.next_tokens + s2 - s1 < 0;
          OPENFIA_CHECK_SUPPORTED(!bad, "quant_offset2",
                                  "int8 output with quant_offset2 is intercepted when "
                                  "sparse_mode/pre_tokens/next_tokens leave rows without keys",
                                  "batch ", b, ": sparse_mode ", mode, ", actual_seq_lengths ",
                                  s1, ", actual_seq_lengths_kv ", s2, ", pre_tokens ",
                                  g.pre_tokens, ", next_tokens ", g.next_tokens);
        }
      }
    }
  } else if (g.full_quant) {
    // quant_offset2 without quant_scale2 was rejected above.
  }

  // =============================== 4. remaining feature combinations =========================
  if (paged) {
    OPENFIA_CHECK_SUPPORTED(!a.query_padding_size.defined(), "query_padding_size",
                            "left padding does not support page attention (不支持PageAttention)",
                            "block_table given");
    OPENFIA_CHECK_SUPPORTED(!a.kv_padding_size.defined(), "kv_padding_size",
                            "left padding does not support page attention (不支持PageAttention)",
                            "block_table given");
  }

  // =============================== output spec ===============================================
  FiaOutputSpec& o = g.spec;
  o.attention_out_dtype = g.post_quant ? DType::kInt8
                          : g.full_quant ? DType::kFloat16 : q.dtype;
  switch (L) {
    case FiaLayout::kBSH: o.attention_out_sizes = {B, g.q_s, g.h_q * g.d_v}; break;
    case FiaLayout::kBSND: o.attention_out_sizes = {B, g.q_s, g.h_q, g.d_v}; break;
    case FiaLayout::kBNSD: o.attention_out_sizes = {B, g.h_q, g.q_s, g.d_v}; break;
    case FiaLayout::kBNSD_BSND: o.attention_out_sizes = {B, g.q_s, g.h_q, g.d_v}; break;
    case FiaLayout::kTND: o.attention_out_sizes = {g.q_s, g.h_q, g.d_v}; break;
  }
  if (!a.softmax_lse_flag)
    o.softmax_lse_sizes = {1};
  else if (tnd)
    o.softmax_lse_sizes = {g.q_s, g.h_q, 1};
  else
    o.softmax_lse_sizes = {B, g.h_q, g.q_s, 1};
  return g;
}

FiaOutputSpec ValidateFia(const FiaArgs& args) { return AnalyzeFia(args).spec; }

}  // namespace openfia::internal
