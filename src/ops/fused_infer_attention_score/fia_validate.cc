// openfia: FusedInferAttentionScore argument analysis (the torch_npu document's 约束说明 and the
// decisions of docs/fused_infer_attention_score.md). AnalyzeFia runs once per call: its stages
// check every rule and resolve the call's geometry, which the output spec, validation and
// canonicalization all use. Every rule throws before any compute. The stages go from existence
// and attribute values, through each argument alone (dtype, rank, contiguity) and consistency
// between arguments (shapes, lengths, indices into memory), to the feature combinations the source
// marks unsupported (kUnsupported); the order of the stages is the order in which rules fire.
// NPU-only hardware limits are relaxed (listed in docs/fused_infer_attention_score.md); strict
// mode enforces them last (fia_strict.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/numeric.h"
#include "openfia/runtime.h"
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

// Width of the last axis of an NZ cache: 32 for int8, 16 otherwise.
int64_t NzBase(DType t) { return t == DType::kInt8 ? 32 : 16; }

// Every input_layout of the current aclnn FusedInferAttentionScoreV4 interface: the query layout,
// and after an underscore the output layout.
struct LayoutName {
  const char* name;
  FiaLayout in;
  FiaOutLayout out;
};
constexpr LayoutName kLayouts[] = {
    {"BSH", FiaLayout::kBSH, FiaOutLayout::kBSH},
    {"BSND", FiaLayout::kBSND, FiaOutLayout::kBSND},
    {"BNSD", FiaLayout::kBNSD, FiaOutLayout::kBNSD},
    {"TND", FiaLayout::kTND, FiaOutLayout::kTND},
    {"NTD", FiaLayout::kNTD, FiaOutLayout::kNTD},
    {"BNSD_BSND", FiaLayout::kBNSD, FiaOutLayout::kBSND},
    {"BSH_BNSD", FiaLayout::kBSH, FiaOutLayout::kBNSD},
    {"BSND_BNSD", FiaLayout::kBSND, FiaOutLayout::kBNSD},
    {"BSH_NBSD", FiaLayout::kBSH, FiaOutLayout::kNBSD},
    {"BSND_NBSD", FiaLayout::kBSND, FiaOutLayout::kNBSD},
    {"BNSD_NBSD", FiaLayout::kBNSD, FiaOutLayout::kNBSD},
    {"TND_NTD", FiaLayout::kTND, FiaOutLayout::kNTD},
    {"NTD_TND", FiaLayout::kNTD, FiaOutLayout::kTND},
};

const LayoutName& ParseLayout(const std::string& s) {
  for (const LayoutName& l : kLayouts)
    if (s == l.name) return l;
  Fail(ErrorCode::kInvalidArgument, "input_layout",
       "must be one of BSH, BSND, BNSD, TND, NTD, BNSD_BSND, BSH_BNSD, BSND_BNSD, BSH_NBSD, "
       "BSND_NBSD, BNSD_NBSD, TND_NTD, NTD_TND",
       s);
}

// Shape of one batch/tensor of a dense (query-layout) operand.
struct DenseDims {
  int64_t b = 0, s = 0, n = 0, d = 0;  // d in real elements
};

// Reads [B,S,H] / [B,S,N,D] / [B,N,S,D] / [T,N,D] / [N,T,D]. `heads` is the expected N (checked
// for the N-bearing layouts, used to split H for BSH). `dmul` is 8 for int4 stored as int32.
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
      CheckDim(t, name, 4, "[B, N, S, D] for input_layout BNSD");
      r = {t.size(0), t.size(2), t.size(1), t.size(3) * dmul};
      break;
    case FiaLayout::kTND:
      CheckDim(t, name, 3, "[T, N, D] for input_layout TND");
      r = {1, t.size(0), t.size(1), t.size(2) * dmul};
      break;
    case FiaLayout::kNTD:
      CheckDim(t, name, 3, "[N, T, D] for input_layout NTD");
      r = {1, t.size(1), t.size(0), t.size(2) * dmul};
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

// One FusedInferAttentionScore analysis: the stages below run once per call, in this order, each
// on what the earlier ones established (the order is the order in which rules are checked).
class Analyzer {
 public:
  explicit Analyzer(const FiaArgs& a) : a_(a) {}

  FiaGeometry Run() {
    CheckPresence();
    ReadAttributes();
    ReadQuery();
    ReadKeyValueDtypes();
    ReadKvStorageForm();
    ReadDenseOrListKv();
    ReadPagedKv();
    ReadMla();
    CheckOutputAddressable();
    ReadQueryLengths();
    ReadPagedKvLengths();
    ReadKvLengths();
    g_.left_padding = q_pad_ || kv_pad_;
    ReadPrefix();
    ReadSparseMode();
    ReadMask();
    ReadPse();
    ReadSinks();
    ReadAntiquant();
    ReadQuantScalars();
    ReadPostQuant();
    CheckRemainingCombinations();
    MakeOutputSpec();
    if (GetNpuStrict()) EnforceFiaNpuLimits(a_, g_);
    return std::move(g_);
  }

 private:
  using F = FiaAntiquant::Form;

  // ---- 1. existence, well-formedness, arguments that only exist in pairs ----
  void CheckPresence() {
    OPENFIA_CHECK(a_.query.defined(), "query", "is required", "None");
    use_list_ = !a_.key_list.empty() || !a_.value_list.empty();
    if (use_list_) {
      OPENFIA_CHECK(!a_.key_list.empty(), "key_list",
                    "key_list and value_list must be given together", "empty key_list, ",
                    a_.value_list.size(), " value tensors");
      OPENFIA_CHECK(!a_.value_list.empty(), "value_list",
                    "key_list and value_list must be given together", "empty value_list, ",
                    a_.key_list.size(), " key tensors");
      OPENFIA_CHECK(a_.key_list.size() == a_.value_list.size(), "value_list",
                    "must have as many tensors as key_list", a_.value_list.size(), " vs ",
                    a_.key_list.size());
    } else {
      OPENFIA_CHECK(a_.key.defined(), "key", "is required", "None");
      OPENFIA_CHECK(a_.value.defined(), "value", "is required", "None");
    }
    for (const auto& [t, name] : Tensors())
      if (t->defined() && !(use_list_ && (t == &a_.key || t == &a_.value)))
        CheckWellFormed(*t, name);
    for (const auto* list : {&a_.key_list, &a_.value_list}) {
      const char* name = list == &a_.key_list ? "key_list" : "value_list";
      for (size_t i = 0; i < list->size(); ++i) {
        OPENFIA_CHECK((*list)[i].defined(), name, "every tensor must be given", "None at index ",
                      i);
        CheckWellFormed((*list)[i], name);
      }
    }
    CheckPairs();
  }

  std::vector<std::pair<const TensorView*, const char*>> Tensors() const {
    return {{&a_.query, "query"},
            {&a_.key, "key"},
            {&a_.value, "value"},
            {&a_.pse_shift, "pse_shift"},
            {&a_.atten_mask, "atten_mask"},
            {&a_.dequant_scale1, "dequant_scale1"},
            {&a_.quant_scale1, "quant_scale1"},
            {&a_.dequant_scale2, "dequant_scale2"},
            {&a_.quant_scale2, "quant_scale2"},
            {&a_.quant_offset2, "quant_offset2"},
            {&a_.antiquant_scale, "antiquant_scale"},
            {&a_.antiquant_offset, "antiquant_offset"},
            {&a_.block_table, "block_table"},
            {&a_.query_padding_size, "query_padding_size"},
            {&a_.kv_padding_size, "kv_padding_size"},
            {&a_.key_antiquant_scale, "key_antiquant_scale"},
            {&a_.key_antiquant_offset, "key_antiquant_offset"},
            {&a_.value_antiquant_scale, "value_antiquant_scale"},
            {&a_.value_antiquant_offset, "value_antiquant_offset"},
            {&a_.key_shared_prefix, "key_shared_prefix"},
            {&a_.value_shared_prefix, "value_shared_prefix"},
            {&a_.actual_shared_prefix_len, "actual_shared_prefix_len"},
            {&a_.query_rope, "query_rope"},
            {&a_.key_rope, "key_rope"},
            {&a_.key_rope_antiquant_scale, "key_rope_antiquant_scale"},
            {&a_.sinks, "sinks"}};
  }

  // Both members of a pair, or neither: `first`/`second` name the argument reported missing.
  static void CheckPair(const TensorView& first, const TensorView& second,
                        const char* first_name, const char* second_name, const char* rule) {
    OPENFIA_CHECK(first.defined() == second.defined(),
                  first.defined() ? second_name : first_name, rule, "only one of them is given");
  }

  void CheckPairs() const {
    CheckPair(a_.query_rope, a_.key_rope, "query_rope", "key_rope",
              "query_rope and key_rope must be given together (要求同时配置或同时不配置)");
    CheckPair(a_.key_shared_prefix, a_.value_shared_prefix, "key_shared_prefix",
              "value_shared_prefix",
              "key_shared_prefix and value_shared_prefix must both be None or both be given");
    CheckPair(a_.key_antiquant_scale, a_.value_antiquant_scale, "key_antiquant_scale",
              "value_antiquant_scale",
              "key_antiquant_scale and value_antiquant_scale must both be None or both be given");
    CheckPair(a_.key_antiquant_offset, a_.value_antiquant_offset, "key_antiquant_offset",
              "value_antiquant_offset",
              "key_antiquant_offset and value_antiquant_offset must both be None or both be "
              "given");
    OPENFIA_CHECK(!a_.key_antiquant_offset.defined() || a_.key_antiquant_scale.defined(),
                  "key_antiquant_offset", "requires key_antiquant_scale", "scale is None");
    // The legacy parameters are ignored when the KV-separated ones are given.
    OPENFIA_CHECK(!a_.antiquant_offset.defined() || a_.antiquant_scale.defined() ||
                      a_.key_antiquant_scale.defined(),
                  "antiquant_offset", "requires antiquant_scale (非对称量化模式下需同时存在)",
                  "antiquant_scale is None");
    OPENFIA_CHECK(!a_.quant_offset2.defined() || a_.quant_scale2.defined(), "quant_offset2",
                  "requires quant_scale2", "quant_scale2 is None");
    OPENFIA_CHECK_SUPPORTED(!a_.key_rope_antiquant_scale.defined(), "key_rope_antiquant_scale",
                            "is a reserved parameter (预留参数，暂未使用) and must be None",
                            a_.key_rope_antiquant_scale.shape_string());
  }

  // ---- 2. attributes ----
  void ReadAttributes() {
    const LayoutName& layout = ParseLayout(a_.input_layout);
    g_.layout = layout.in;
    g_.out_layout = layout.out;
    // TND and NTD: the rules of the source's "TND" scenarios apply to both.
    g_.packed = tnd_ = g_.layout == FiaLayout::kTND || g_.layout == FiaLayout::kNTD;
    OPENFIA_CHECK(a_.num_heads >= 1, "num_heads", "must be >= 1", a_.num_heads);
    OPENFIA_CHECK(a_.num_key_value_heads >= 0, "num_key_value_heads",
                  "must be >= 0 (0 means equal to num_heads)", a_.num_key_value_heads);
    g_.h_q = a_.num_heads;
    g_.h_kv = a_.num_key_value_heads == 0 ? a_.num_heads : a_.num_key_value_heads;
    OPENFIA_CHECK(g_.h_q % g_.h_kv == 0, "num_key_value_heads",
                  "num_heads must be divisible by num_key_value_heads (需要满足num_heads整除"
                  "num_key_value_heads)",
                  "num_heads = ", g_.h_q, ", num_key_value_heads = ", g_.h_kv);
    // A NaN or infinite scale would turn every row into NaN (0 * inf): a usage error.
    OPENFIA_CHECK(std::isfinite(a_.scale), "scale", "must be a finite number", a_.scale);
    OPENFIA_CHECK(a_.inner_precise >= 0 && a_.inner_precise <= 3, "inner_precise",
                  "must be 0, 1, 2 or 3", a_.inner_precise);
  }

  // ---- 3. query: dtype, layout, branch (Q_S == 1 or not), batch, sparse_mode ----
  void ReadQuery() {
    const TensorView& q = a_.query;
    g_.q_dtype = q.dtype;
    OPENFIA_CHECK(IsFloat(q.dtype) || q.dtype == DType::kInt8, "query",
                  "dtype must be float16, bfloat16, float32 or int8", Name(q.dtype));
    CheckContiguous(q, "query");
    const DenseDims qd = ReadDense(q, g_.layout, g_.h_q, 1, "query", "num_heads");
    g_.d_qk = qd.d;
    g_.q_s = qd.s;
    g_.incremental = inc_ = !tnd_ && qd.s == 1;
    if (inc_)
      OPENFIA_CHECK(a_.inner_precise <= 1, "inner_precise",
                    "must be 0 or 1 when Q_S is 1 (Q_S为1时该参数仅支持0和1)", a_.inner_precise);
    OPENFIA_CHECK_SUPPORTED(!(inc_ && a_.input_layout == "BNSD_BSND"), "input_layout",
                            "BNSD_BSND is only supported when Q_S > 1 (仅支持Q_S大于1)",
                            "BNSD_BSND with Q_S = 1");
    if (tnd_) {
      OPENFIA_CHECK(a_.actual_seq_lengths.has_value(), "actual_seq_lengths",
                    "must be given for input_layout TND (该入参必须传入)", "None");
      OPENFIA_CHECK(!a_.actual_seq_lengths->empty(), "actual_seq_lengths",
                    "must have one entry per batch (at least one) for input_layout TND", "[]");
      g_.batch = static_cast<int64_t>(a_.actual_seq_lengths->size());
    } else {
      g_.batch = qd.b;
    }
    // The per-batch bookkeeping is sized by the batch: past the NPU's documented limit (65536)
    // only a batch the query's elements back, not the batch axis of an empty tensor alone.
    OPENFIA_CHECK(g_.batch <= 65536 || g_.batch <= a_.query.numel(), "query",
                  "a batch above 65536 needs a non-empty query (at least one element per batch)",
                  "B = ", g_.batch, ", shape ", a_.query.shape_string());
    if (!inc_) {
      OPENFIA_CHECK(a_.sparse_mode >= 0 && a_.sparse_mode <= 8, "sparse_mode",
                    "must be 0, 1, 2, 3 or 4", a_.sparse_mode);
      OPENFIA_CHECK_SUPPORTED(a_.sparse_mode <= 4, "sparse_mode",
                              "5, 6, 7, 8 (prefix, global, dilated, block_local) are not "
                              "supported (均暂不支持)",
                              a_.sparse_mode);
      g_.sparse_mode = a_.sparse_mode;
    }
    g_.pre_tokens = std::clamp<int64_t>(a_.pre_tokens, -kInt32Max, kInt32Max);
    g_.next_tokens = std::clamp<int64_t>(a_.next_tokens, -kInt32Max, kInt32Max);
  }

  // ---- 4. key / value dtypes: float, antiquant (int8 / int4 KV) or full quantization ----
  void ReadKeyValueDtypes() {
    const TensorView& q = a_.query;
    k0_ = use_list_ ? &a_.key_list[0] : &a_.key;
    v0_ = use_list_ ? &a_.value_list[0] : &a_.value;
    kname_ = use_list_ ? "key_list" : "key";
    vname_ = use_list_ ? "value_list" : "value";
    const TensorView& k0 = *k0_;
    g_.kv_dtype = k0.dtype;
    OPENFIA_CHECK(IsFloat(k0.dtype) || k0.dtype == DType::kInt8 || k0.dtype == DType::kInt32,
                  kname_, "dtype must be float16, bfloat16, float32, int8 or int4 (int32)",
                  Name(k0.dtype));
    OPENFIA_CHECK(v0_->dtype == k0.dtype, vname_, "dtype must equal the key dtype",
                  Name(v0_->dtype), " vs ", Name(k0.dtype));
    for (size_t i = 0; i < a_.key_list.size(); ++i) {
      OPENFIA_CHECK(a_.key_list[i].dtype == k0.dtype, "key_list",
                    "all tensors must share one dtype", Name(a_.key_list[i].dtype),
                    " at index ", i);
      OPENFIA_CHECK(a_.value_list[i].dtype == k0.dtype, "value_list",
                    "all tensors must share the key dtype", Name(a_.value_list[i].dtype),
                    " at index ", i);
      CheckContiguous(a_.key_list[i], "key_list");
      CheckContiguous(a_.value_list[i], "value_list");
    }
    if (!use_list_) {
      CheckContiguous(a_.key, "key");
      CheckContiguous(a_.value, "value");
    }
    if (IsFloat(q.dtype)) {
      OPENFIA_CHECK(k0.dtype == q.dtype || k0.dtype == DType::kInt8 || k0.dtype == DType::kInt32,
                    kname_,
                    "dtype must equal the query dtype, or be int8/int4 (int32) for antiquant",
                    Name(k0.dtype), " with query ", Name(q.dtype));
      g_.antiquant = !IsFloat(k0.dtype);
    } else {
      OPENFIA_CHECK(k0.dtype == DType::kInt8, kname_, "must be int8 when query is int8",
                    Name(k0.dtype));
      g_.full_quant = true;
    }
    g_.kv_int4 = k0.dtype == DType::kInt32;
    dmul_ = g_.kv_int4 ? 8 : 1;
    OPENFIA_CHECK_SUPPORTED(!(inc_ && g_.full_quant), "query",
                            "int8 query, key and value are not supported when Q_S is 1 "
                            "(query、key、value输入类型均为int8的场景暂不支持)",
                            "Q_S = 1");
  }

  // ---- 5. how key/value are stored: dense, tensor list or a paged cache ----
  void ReadKvStorageForm() {
    paged_ = a_.block_table.defined();
    if (paged_) {
      OPENFIA_CHECK_SUPPORTED(!use_list_, "block_table",
                              "page attention does not support tensorlist key/value "
                              "(page attention不支持tensorlist场景)",
                              a_.key_list.size(), " key tensors");
      const TensorView& k0 = *k0_;
      OPENFIA_CHECK(k0.dim() >= 3 && k0.dim() <= 5, "key",
                    "with block_table must be [blocknum, block_size, H], [blocknum, KV_N, "
                    "block_size, D] or NZ [blocknum, KV_N, D/16, block_size, 16]",
                    k0.shape_string());
      g_.kv_form = k0.dim() == 3   ? FiaKvForm::kPaged3
                   : k0.dim() == 4 ? FiaKvForm::kPaged4
                                   : FiaKvForm::kPagedNZ;
    } else {
      g_.kv_form = use_list_ ? FiaKvForm::kList : FiaKvForm::kDense;
    }
    OPENFIA_CHECK_SUPPORTED(!(use_list_ && tnd_), "key_list",
                            "input_layout TND does not support tensorlist (TND不支持tensorlist)",
                            a_.key_list.size(), " key tensors");
  }

  // ---- 6. dense and tensor-list key/value shapes ----
  void ReadDenseOrListKv() {
    const FiaLayout L = g_.layout;
    const int64_t B = g_.batch;
    if (g_.kv_form == FiaKvForm::kDense) {
      const DenseDims kd = ReadDense(a_.key, L, g_.h_kv, dmul_, "key", "num_key_value_heads");
      const DenseDims vd = ReadDense(a_.value, L, g_.h_kv, dmul_, "value", "num_key_value_heads");
      if (!tnd_)
        OPENFIA_CHECK(kd.b == B, "key", "the batch axis must equal the query batch", kd.b,
                      " vs ", B);
      OPENFIA_CHECK(kd.d == g_.d_qk, "key", "D must equal the query D", kd.d, " vs ", g_.d_qk);
      g_.d_v = vd.d;
      OPENFIA_CHECK(a_.value.sizes == WithD(a_.key, L, g_.h_kv, g_.d_v, dmul_), "value",
                    "shape must equal the key shape (except the head dim D)",
                    a_.value.shape_string(), " vs key ", a_.key.shape_string());
      kv_t_ = kd.s;
      g_.kv_storage_s.assign(B, kd.s);
    } else if (g_.kv_form == FiaKvForm::kList) {
      OPENFIA_CHECK(static_cast<int64_t>(a_.key_list.size()) == B, "key_list",
                    "must hold one tensor per batch (个数等于query的B)", a_.key_list.size(),
                    " tensors for batch ", B);
      g_.kv_storage_s.resize(B);
      for (int64_t b = 0; b < B; ++b) {
        const TensorView& k = a_.key_list[b];
        const TensorView& v = a_.value_list[b];
        const DenseDims kd = ReadDense(k, L, g_.h_kv, dmul_, "key_list", "num_key_value_heads");
        const DenseDims vd = ReadDense(v, L, g_.h_kv, dmul_, "value_list",
                                       "num_key_value_heads");
        OPENFIA_CHECK(kd.b == 1, "key_list", "every tensor must have batch 1 (batch只能为1)",
                      k.shape_string(), " at index ", b);
        OPENFIA_CHECK(kd.d == g_.d_qk, "key_list", "D must equal the query D", kd.d, " vs ",
                      g_.d_qk, " at index ", b);
        if (b == 0) g_.d_v = vd.d;
        OPENFIA_CHECK(v.sizes == WithD(k, L, g_.h_kv, g_.d_v, dmul_), "value_list",
                      "every tensor must have its key's shape (except D), with one D for all",
                      v.shape_string(), " vs key ", k.shape_string(), " at index ", b);
        g_.kv_storage_s[b] = kd.s;  // S may differ per tensor, in every layout
      }
    }
  }

  // ---- 7. paged cache shapes and the block table's form ----
  void ReadPagedKv() {
    if (!paged_) return;
    const TensorView& k = a_.key;
    const TensorView& v = a_.value;
    OPENFIA_CHECK(v.dim() == k.dim(), "value", "must have the same paged layout as key",
                  v.shape_string(), " vs key ", k.shape_string());
    const int64_t base = NzBase(k.dtype);
    g_.block_num = k.size(0);
    if (g_.kv_form == FiaKvForm::kPaged3) {
      g_.block_size = k.size(1);
      OPENFIA_CHECK(k.size(2) * dmul_ % g_.h_kv == 0, "key",
                    "H of [blocknum, block_size, H] must be divisible by num_key_value_heads",
                    k.size(2), " vs ", g_.h_kv);
      OPENFIA_CHECK(k.size(2) * dmul_ / g_.h_kv == g_.d_qk, "key",
                    "D = H / KV_N must equal the query D", k.size(2) * dmul_ / g_.h_kv, " vs ",
                    g_.d_qk);
      OPENFIA_CHECK(v.size(2) * dmul_ % g_.h_kv == 0, "value",
                    "H of [blocknum, block_size, H] must be divisible by num_key_value_heads",
                    v.size(2), " vs ", g_.h_kv);
      g_.d_v = v.size(2) * dmul_ / g_.h_kv;
    } else if (g_.kv_form == FiaKvForm::kPaged4) {
      g_.block_size = k.size(2);
      OPENFIA_CHECK(k.size(1) == g_.h_kv, "key",
                    "KV_N of [blocknum, KV_N, block_size, D] must equal num_key_value_heads",
                    k.size(1), " vs ", g_.h_kv);
      OPENFIA_CHECK(k.size(3) * dmul_ == g_.d_qk, "key", "D must equal the query D",
                    k.size(3) * dmul_, " vs ", g_.d_qk);
      g_.d_v = v.size(3) * dmul_;
    } else {
      g_.block_size = k.size(3);
      OPENFIA_CHECK(k.size(1) == g_.h_kv, "key",
                    "KV_N of NZ [blocknum, KV_N, D/16, block_size, 16] must equal "
                    "num_key_value_heads",
                    k.size(1), " vs ", g_.h_kv);
      OPENFIA_CHECK(k.size(4) == base && v.size(4) == base, "key",
                    Str("the last axis of an NZ cache must be ", base, " for ", Name(k.dtype)),
                    k.shape_string());
      OPENFIA_CHECK(k.size(2) * base == g_.d_qk, "key", "D = (D/16) * 16 must equal the query D",
                    k.size(2) * base, " vs ", g_.d_qk);
      g_.d_v = v.size(2) * base;
    }
    std::vector<int64_t> vexp = k.sizes;
    if (g_.kv_form == FiaKvForm::kPaged3) vexp[2] = g_.h_kv * g_.d_v / dmul_;
    if (g_.kv_form == FiaKvForm::kPaged4) vexp[3] = g_.d_v / dmul_;
    if (g_.kv_form == FiaKvForm::kPagedNZ) vexp[2] = g_.d_v / base;
    OPENFIA_CHECK(v.sizes == vexp, "value", "shape must equal the key shape (except the head dim D)",
                  v.shape_string(), " vs key ", k.shape_string());
    OPENFIA_CHECK(a_.block_size >= 1, "block_size",
                  "must be >= 1 with page attention (openfia accepts any block size)",
                  a_.block_size);
    OPENFIA_CHECK(a_.block_size == g_.block_size, "block_size",
                  "must equal the block size axis of the key cache", a_.block_size, " vs key ",
                  k.shape_string());
    CheckBlockTableForm();
  }

  void CheckBlockTableForm() {
    const TensorView& bt = a_.block_table;
    OPENFIA_CHECK(bt.dtype == DType::kInt32, "block_table", "dtype must be int32", Name(bt.dtype));
    CheckDim(bt, "block_table", 2, "[B, maxBlockNumPerSeq] (block_table必须为二维)");
    OPENFIA_CHECK(bt.size(0) == g_.batch, "block_table", "the first axis must equal the batch B",
                  bt.shape_string(), ", B = ", g_.batch);
    // A column slice of a bigger table (row stride > columns) is accepted: rows are read with
    // bt_stride, columns must be adjacent.
    OPENFIA_CHECK((bt.size(1) <= 1 || bt.stride(1) == 1) && bt.stride(0) >= 0, "block_table",
                  "rows must be contiguous (column stride 1, row stride >= 0)", "strides ",
                  bt.strides);
    int64_t extent = 0;  // (rows - 1) * row stride + columns: the table's memory span
    const bool ovf = bt.size(0) > 0 &&
                     (__builtin_mul_overflow(bt.size(0) - 1, bt.stride(0), &extent) ||
                      __builtin_add_overflow(extent, bt.size(1), &extent));
    OPENFIA_CHECK(!ovf && extent <= kMaxNumel, "block_table",
                  "row stride times rows must stay addressable", "strides ", bt.strides);
    g_.bt_cols = bt.size(1);
  }

  // ---- 8. MLA: query_rope / key_rope ----
  void ReadMla() {
    if (!a_.query_rope.defined()) return;
    g_.mla = true;
    const TensorView& q = a_.query;
    const TensorView& k0 = *k0_;
    const TensorView& qr = a_.query_rope;
    const TensorView& kr = a_.key_rope;
    const FiaLayout L = g_.layout;
    OPENFIA_CHECK(qr.dtype == q.dtype, "query_rope", "dtype must equal the query dtype",
                  Name(qr.dtype), " vs ", Name(q.dtype));
    OPENFIA_CHECK(kr.dtype == k0.dtype, "key_rope", "dtype must equal the key dtype",
                  Name(kr.dtype), " vs ", Name(k0.dtype));
    CheckContiguous(qr, "query_rope");
    CheckContiguous(kr, "key_rope");
    OPENFIA_CHECK(qr.dim() == q.dim(), "query_rope", "must have the query's layout",
                  qr.shape_string(), " vs query ", q.shape_string());
    const DenseDims rd = ReadDense(qr, L, g_.h_q, 1, "query_rope", "num_heads");
    g_.d_rope = rd.d;
    OPENFIA_CHECK(qr.sizes == WithD(q, L, g_.h_q, g_.d_rope, 1), "query_rope",
                  "B, N, S must equal the query's (shape中B、N、S与query一致)", qr.shape_string(),
                  " vs query ", q.shape_string());
    std::vector<int64_t> kexp = k0.sizes;
    const int64_t base = NzBase(k0.dtype);
    switch (g_.kv_form) {
      case FiaKvForm::kDense: kexp = WithD(a_.key, L, g_.h_kv, g_.d_rope, 1); break;
      case FiaKvForm::kPaged3: kexp[2] = g_.h_kv * g_.d_rope; break;
      case FiaKvForm::kPaged4: kexp[3] = g_.d_rope; break;
      case FiaKvForm::kPagedNZ:
        OPENFIA_CHECK(g_.d_rope % base == 0, "query_rope",
                      Str("D must be a multiple of ", base, " with an NZ cache"), g_.d_rope);
        kexp[2] = g_.d_rope / base;
        break;
      case FiaKvForm::kList: break;
    }
    OPENFIA_CHECK_SUPPORTED(g_.kv_form != FiaKvForm::kList, "key_rope",
                            "MLA (query_rope/key_rope) with tensorlist key/value is not supported",
                            "tensorlist");
    OPENFIA_CHECK(kr.sizes == kexp, "key_rope",
                  "shape must equal the key's with D replaced by query_rope's D",
                  kr.shape_string(), " expected ", Str(kexp));
    OPENFIA_CHECK_SUPPORTED(g_.kv_form != FiaKvForm::kPagedNZ || L != FiaLayout::kBNSD,
                            "key_rope",
                            "MLA with an NZ cache does not support input_layout BNSD "
                            "(当数据格式为NZ时input_layout不支持BNSD)",
                            "BNSD");
    OPENFIA_CHECK_SUPPORTED(!g_.antiquant && !g_.full_quant, "key_rope",
                            "MLA with int8/int4 query or key is not supported (its rope "
                            "dequantization parameter key_rope_antiquant_scale is reserved)",
                            Name(q.dtype), " query, ", Name(k0.dtype), " key");
  }

  // num_heads only divides H in BSH, so an empty H admits any num_heads: every output size and
  // offset must stay representable.
  void CheckOutputAddressable() const {
    int64_t n = 1;
    bool ovf = false;
    for (int64_t x : {std::max<int64_t>(g_.batch, 1), std::max<int64_t>(g_.q_s, 1), g_.h_q,
                      std::max<int64_t>(g_.d_v, 1)})
      ovf = ovf || __builtin_mul_overflow(n, x, &n);
    OPENFIA_CHECK(!ovf && n <= kMaxNumel, "num_heads",
                  "the output size B * S * num_heads * D must stay addressable",
                  "num_heads = ", g_.h_q, ", D = ", g_.d_v);
  }

  // ---- 9. query rows per batch: actual_seq_lengths, query left padding ----
  void ReadQueryLengths() {
    const int64_t B = g_.batch;
    g_.q_begin.assign(B, 0);
    g_.q_len.assign(B, inc_ ? 1 : g_.q_s);
    if (tnd_) {
      const auto& v = *a_.actual_seq_lengths;
      CheckCumulative(v, g_.q_s, "actual_seq_lengths", "T of query");
      for (int64_t b = 0; b < B; ++b) {
        g_.q_begin[b] = b ? v[b - 1] : 0;
        g_.q_len[b] = v[b] - g_.q_begin[b];
      }
      OPENFIA_CHECK_SUPPORTED(!a_.query_padding_size.defined() && !a_.kv_padding_size.defined(),
                              a_.query_padding_size.defined() ? "query_padding_size"
                                                              : "kv_padding_size",
                              "input_layout TND does not support left padding (TND不支持左padding)",
                              "given");
    } else if (!inc_ && a_.actual_seq_lengths) {
      const auto v = Broadcast(*a_.actual_seq_lengths, B, "actual_seq_lengths");
      for (int64_t b = 0; b < B; ++b) {
        OPENFIA_CHECK(v[b] >= 0 && v[b] <= g_.q_s, "actual_seq_lengths",
                      Str("each value must be in [0, Q_S = ", g_.q_s,
                          "] (不大于query中对应batch的seqlen)"),
                      "batch ", b, ": ", v[b]);
        g_.q_len[b] = v[b];
      }
    }
    // Query left padding: Q_S > 1 only, and only together with actual_seq_lengths.
    q_pad_ = !inc_ && !tnd_ && a_.query_padding_size.defined() && a_.actual_seq_lengths.has_value();
    if (!q_pad_) return;
    const int64_t pad =
        std::max<int64_t>(0, ReadInt64Scalar(a_.query_padding_size, "query_padding_size"));
    for (int64_t b = 0; b < B; ++b) {
      // start = Q_S - pad - act >= 0 (the end Q_S - pad <= Q_S holds since pad >= 0).
      OPENFIA_CHECK(pad <= g_.q_s && g_.q_len[b] <= g_.q_s - pad, "query_padding_size",
                    "query left padding start Q_S - query_padding_size - actual_seq_lengths "
                    "must be >= 0 (搬运起点不能小于0)",
                    "Q_S = ", g_.q_s, ", query_padding_size = ", pad, ", actual_seq_lengths[", b,
                    "] = ", g_.q_len[b]);
      g_.q_begin[b] = g_.q_s - pad - g_.q_len[b];
    }
  }

  // ---- 10. key rows per batch of a paged cache; every block id a batch reads ----
  void ReadPagedKvLengths() {
    if (!paged_) return;
    const int64_t B = g_.batch;
    g_.kv_begin.assign(B, 0);
    g_.kv_len.assign(B, 0);
    OPENFIA_CHECK(a_.actual_seq_lengths_kv.has_value(), "actual_seq_lengths_kv",
                  "must be given with page attention (page attention场景下，必须传入)", "None");
    std::vector<int64_t> v;
    if (tnd_) {
      OPENFIA_CHECK(static_cast<int64_t>(a_.actual_seq_lengths_kv->size()) == B,
                    "actual_seq_lengths_kv",
                    "with TND and page attention its length must equal the batch (长度等于Batch)",
                    a_.actual_seq_lengths_kv->size(), " vs ", B);
      v = *a_.actual_seq_lengths_kv;
    } else {
      v = Broadcast(*a_.actual_seq_lengths_kv, B, "actual_seq_lengths_kv");
    }
    int64_t max_blocks = 0, sum_blocks = 0;
    for (int64_t b = 0; b < B; ++b) {
      OPENFIA_CHECK(v[b] >= 0 && v[b] <= kMaxNumel, "actual_seq_lengths_kv",
                    Str("values must be in [0, ", kMaxNumel, "]"), "batch ", b, ": ", v[b]);
      g_.kv_len[b] = v[b];
      const int64_t nb = CeilDiv(v[b], g_.block_size);
      OPENFIA_CHECK(nb <= g_.bt_cols, "block_table",
                    "the second axis must not be smaller than maxBlockNumPerSeq = "
                    "ceil(actual_seq_lengths_kv / block_size)",
                    "batch ", b, " needs ", nb, " blocks, block_table is ",
                    a_.block_table.shape_string());
      max_blocks = std::max(max_blocks, nb);
      sum_blocks += nb;
    }
    OPENFIA_CHECK(sum_blocks <= g_.block_num, "key",
                  "blocknum must not be smaller than the sum of the blocks every batch needs "
                  "(blocknum不能小于每个batch的block数量之和)",
                  "blocknum = ", g_.block_num, ", needed ", sum_blocks);
    // Every block id a batch reads must address a block of the cache; trailing unused entries
    // may hold anything (the goldens fill them with -1).
    const int32_t* bt = static_cast<const int32_t*>(a_.block_table.data);
    const int64_t bt_stride = a_.block_table.stride(0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t nb = CeilDiv(g_.kv_len[b], g_.block_size);
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t id = bt[b * bt_stride + i];
        OPENFIA_CHECK(id >= 0 && id < g_.block_num, "block_table",
                      Str("every block id a batch uses must be in [0, blocknum = ", g_.block_num,
                          ")"),
                      "block_table[", b, "][", i, "] = ", id);
      }
    }
    g_.kv_s_for_masks = max_blocks * g_.block_size;  // <= kv_len + block_size: no overflow
  }

  // ---- 11. key rows per batch of dense / list / TND key-value; KV left padding ----
  void ReadKvLengths() {
    if (paged_) return;
    const int64_t B = g_.batch;
    g_.kv_begin.assign(B, 0);
    g_.kv_len.assign(B, 0);
    if (tnd_) {
      OPENFIA_CHECK(a_.actual_seq_lengths_kv.has_value(), "actual_seq_lengths_kv",
                    "must be given for input_layout TND (该入参必须传入)", "None");
      const auto& v = *a_.actual_seq_lengths_kv;
      OPENFIA_CHECK(static_cast<int64_t>(v.size()) == B, "actual_seq_lengths_kv",
                    "with TND its length must equal the batch (元素的数量等于Batch值)", v.size(),
                    " vs ", B);
      CheckCumulative(v, kv_t_, "actual_seq_lengths_kv", "T of key");
      for (int64_t b = 0; b < B; ++b) {
        g_.kv_begin[b] = b ? v[b - 1] : 0;
        g_.kv_len[b] = v[b] - g_.kv_begin[b];
      }
      g_.kv_s_for_masks = kv_t_;
      return;
    }
    if (a_.actual_seq_lengths_kv) {
      const auto v = Broadcast(*a_.actual_seq_lengths_kv, B, "actual_seq_lengths_kv");
      for (int64_t b = 0; b < B; ++b) {
        OPENFIA_CHECK(v[b] >= 0 && v[b] <= g_.kv_storage_s[b], "actual_seq_lengths_kv",
                      Str("each value must be in [0, KV_S = ", g_.kv_storage_s[b],
                          "] (不大于key/value中对应batch的seqlenKv)"),
                      "batch ", b, ": ", v[b]);
        g_.kv_len[b] = v[b];
      }
    } else {
      g_.kv_len = g_.kv_storage_s;
    }
    for (int64_t b = 0; b < B; ++b)
      g_.kv_s_for_masks = std::max(g_.kv_s_for_masks, g_.kv_storage_s[b]);
    // KV left padding, only together with actual_seq_lengths_kv.
    kv_pad_ = a_.kv_padding_size.defined() && a_.actual_seq_lengths_kv.has_value();
    if (kv_pad_) ReadKvPadding();
  }

  void ReadKvPadding() {
    const int64_t pad =
        std::max<int64_t>(0, ReadInt64Scalar(a_.kv_padding_size, "kv_padding_size"));
    for (int64_t b = 0; b < g_.batch; ++b) {
      const int64_t s = g_.kv_storage_s[b];
      const bool ok = pad <= s && g_.kv_len[b] <= s - pad;
      if (!ok && inc_) {
        // Q_S == 1: "搬运起点或终点小于0时，返回数据结果为全0": the batch attends nothing.
        g_.kv_begin[b] = 0;
        g_.kv_len[b] = 0;
        continue;
      }
      OPENFIA_CHECK(ok, "kv_padding_size",
                    "kv left padding start KV_S - kv_padding_size - actual_seq_lengths_kv "
                    "must be >= 0 (搬运起点不能小于0)",
                    "KV_S = ", s, ", kv_padding_size = ", pad, ", actual_seq_lengths_kv[", b,
                    "] = ", g_.kv_len[b]);
      g_.kv_begin[b] = s - pad - g_.kv_len[b];
    }
  }

  // ---- 12. shared prefix ----
  void ReadPrefix() {
    if (!a_.key_shared_prefix.defined()) return;
    const TensorView& kp = a_.key_shared_prefix;
    const TensorView& vp = a_.value_shared_prefix;
    OPENFIA_CHECK_SUPPORTED(!paged_, "key_shared_prefix",
                            "prefix does not support page attention (prefix不支持PageAttention)",
                            "block_table given");
    OPENFIA_CHECK_SUPPORTED(!use_list_, "key_shared_prefix",
                            "prefix does not support tensorlist (不支持tensorlist场景)",
                            "key_list given");
    OPENFIA_CHECK_SUPPORTED(!tnd_, "key_shared_prefix",
                            "input_layout TND does not support prefix", "TND");
    OPENFIA_CHECK_SUPPORTED(!g_.left_padding, "key_shared_prefix",
                            "prefix does not support left padding (不支持左padding场景)",
                            q_pad_ ? "query_padding_size with actual_seq_lengths"
                                   : "kv_padding_size with actual_seq_lengths_kv");
    OPENFIA_CHECK_SUPPORTED(!g_.full_quant, "key_shared_prefix",
                            "prefix does not support int8 query, key and value "
                            "(不支持输入qkv全部为int8的场景)",
                            "int8");
    OPENFIA_CHECK_SUPPORTED(!g_.mla, "key_shared_prefix",
                            "prefix with MLA (query_rope/key_rope) is not supported", "MLA");
    OPENFIA_CHECK(kp.dtype == a_.key.dtype, "key_shared_prefix", "dtype must equal the key dtype",
                  Name(kp.dtype), " vs ", Name(a_.key.dtype));
    OPENFIA_CHECK(vp.dtype == a_.value.dtype, "value_shared_prefix",
                  "dtype must equal the value dtype", Name(vp.dtype), " vs ",
                  Name(a_.value.dtype));
    CheckContiguous(kp, "key_shared_prefix");
    CheckContiguous(vp, "value_shared_prefix");
    OPENFIA_CHECK(kp.dim() == a_.key.dim(), "key_shared_prefix",
                  "must have as many dimensions as key (维度相同)", kp.shape_string());
    OPENFIA_CHECK(vp.dim() == a_.value.dim(), "value_shared_prefix",
                  "must have as many dimensions as value (维度相同)", vp.shape_string());
    const FiaLayout L = g_.layout;
    const DenseDims kpd =
        ReadDense(kp, L, g_.h_kv, dmul_, "key_shared_prefix", "num_key_value_heads");
    OPENFIA_CHECK(kpd.b == 1, "key_shared_prefix", "the batch axis must be 1 (第一维batch必须为1)",
                  kp.shape_string());
    OPENFIA_CHECK(kpd.d == g_.d_qk, "key_shared_prefix", "N and D (H) must equal the key's",
                  kp.shape_string(), " vs key ", a_.key.shape_string());
    const DenseDims vpd =
        ReadDense(vp, L, g_.h_kv, dmul_, "value_shared_prefix", "num_key_value_heads");
    OPENFIA_CHECK(vpd.b == 1, "value_shared_prefix",
                  "the batch axis must be 1 (第一维batch必须为1)", vp.shape_string());
    OPENFIA_CHECK(vpd.d == g_.d_v, "value_shared_prefix", "N and D (H) must equal the value's",
                  vp.shape_string(), " vs value ", a_.value.shape_string());
    OPENFIA_CHECK(vpd.s == kpd.s, "value_shared_prefix",
                  "S must equal key_shared_prefix's S (S应相等)", vpd.s, " vs ", kpd.s);
    g_.prefix_s = kpd.s;
    g_.prefix_len = kpd.s;
    if (a_.actual_shared_prefix_len.defined()) {
      const int64_t p =
          ReadInt64Scalar(a_.actual_shared_prefix_len, "actual_shared_prefix_len");
      OPENFIA_CHECK(p >= 0 && p <= kpd.s, "actual_shared_prefix_len",
                    "must be in [0, S of key_shared_prefix] (值不能大于key_shared_prefix的S)", p,
                    " with prefix S ", kpd.s);
      g_.prefix_len = p;
    }
  }

  // ---- 13. sparse_mode against the layout and MLA; which modes need a mask ----
  void ReadSparseMode() const {
    const TensorView& m = a_.atten_mask;
    const int64_t mode = g_.sparse_mode;
    if (!inc_) {
      if (tnd_)
        OPENFIA_CHECK_SUPPORTED((mode == 0 && !m.defined()) || (mode >= 3 && m.defined()),
                                "sparse_mode",
                                "input_layout TND supports only sparse_mode 0 without atten_mask "
                                "or sparse_mode 3 or 4 with atten_mask",
                                "sparse_mode ", mode, m.defined() ? " with" : " without",
                                " atten_mask");
      if (g_.mla)
        OPENFIA_CHECK_SUPPORTED(mode == 3 && m.defined(), "sparse_mode",
                                "MLA with Q_S > 1 supports only sparse_mode 3 with atten_mask "
                                "(Q_S大于1时只支持sparse=3且传入mask)",
                                "sparse_mode ", mode, m.defined() ? " with" : " without",
                                " atten_mask");
      if (mode >= 1)
        OPENFIA_CHECK(m.defined(), "atten_mask", Str("is required by sparse_mode ", mode),
                      "None");
    } else if (g_.mla) {
      OPENFIA_CHECK_SUPPORTED(!m.defined(), "atten_mask",
                              "MLA with Q_S = 1 supports only sparse 0 without a mask "
                              "(Q_S等于1时只支持sparse=0且不传mask)",
                              m.shape_string());
    }
  }

  // ---- 14. atten_mask: the 2048 x 2048 constant (modes 2-4) or a bit mask read cell by cell ----
  void ReadMask() {
    const TensorView& m = a_.atten_mask;
    if (!m.defined()) return;
    OPENFIA_CHECK(m.dtype == DType::kBool || m.dtype == DType::kInt8 || m.dtype == DType::kUInt8,
                  "atten_mask", "dtype must be bool, int8 or uint8", Name(m.dtype));
    CheckContiguous(m, "atten_mask");
    if (!inc_ && g_.sparse_mode >= 2) {
      g_.causal_mask = true;
      CheckCausalMask(m, g_.sparse_mode);
      return;
    }
    g_.user_mask = true;
    const auto& s = m.sizes;
    const int64_t dim = m.dim();
    OPENFIA_CHECK(dim >= 2 && dim <= 4, "atten_mask",
                  inc_ ? "shape must be (B, KV_S), (B, 1, KV_S) or (B, 1, 1, KV_S)"
                       : "shape must be (Q_S, KV_S), (B, Q_S, KV_S), (1, Q_S, KV_S), "
                         "(B, 1, Q_S, KV_S) or (1, 1, Q_S, KV_S)",
                  m.shape_string());
    const bool has_batch = inc_ || dim >= 3;
    if (has_batch)
      OPENFIA_CHECK(s[0] == g_.batch || s[0] == 1, "atten_mask",
                    Str("the batch axis must be B = ", g_.batch, " or 1"), m.shape_string());
    if (dim == 4)
      OPENFIA_CHECK(s[1] == 1, "atten_mask",
                    "the second axis of a 4-D mask must be 1 (masks are shared by heads)",
                    m.shape_string());
    const int64_t need_rows = inc_ ? 1 : g_.q_s;
    if (!(inc_ && dim == 2))
      OPENFIA_CHECK(s[dim - 2] >= need_rows, "atten_mask",
                    Str("the Q_S axis must be >= ", need_rows, " (Q_S may be padded up)"),
                    m.shape_string());
    const int64_t need_cols = g_.prefix_len + g_.kv_s_for_masks;
    OPENFIA_CHECK(s[dim - 1] >= need_cols, "atten_mask",
                  Str("the KV_S axis must be >= ", g_.prefix_len ? "actual_shared_prefix_len + " : "",
                      paged_ ? "maxBlockNumPerSeq * block_size = " : "KV_S = ", need_cols),
                  m.shape_string());
  }

  // The band of modes 2-4 follows from sparse_mode, pre_tokens and next_tokens alone: the mask
  // is the documented triu(ones(2048, 2048), k=1) constant, whose shape and dtype are checked as
  // the device checks them; its content is never read.
  static void CheckCausalMask(const TensorView& m, int64_t mode) {
    const auto& s = m.sizes;
    const bool ok = (s.size() >= 2 && s.size() <= 4 && s[s.size() - 1] == kCausalMaskSize &&
                     s[s.size() - 2] == kCausalMaskSize &&
                     std::all_of(s.begin(), s.end() - 2, [](int64_t x) { return x == 1; }));
    OPENFIA_CHECK(ok, "atten_mask",
                  Str("sparse_mode ", mode, " needs the optimized mask of shape (2048, 2048), "
                      "(1, 2048, 2048) or (1, 1, 2048, 2048)"),
                  m.shape_string());
  }

  // ---- 15. pse_shift ----
  void ReadPse() const {
    if (!a_.pse_shift.defined()) return;
    const TensorView& p = a_.pse_shift;
    const TensorView& q = a_.query;
    OPENFIA_CHECK_SUPPORTED(!tnd_, "pse_shift",
                            "input_layout TND does not support pse (TND不支持pse)",
                            p.shape_string());
    OPENFIA_CHECK(IsFloat(p.dtype), "pse_shift",
                  "dtype must be float16 or bfloat16 (float32 with a float32 query)",
                  Name(p.dtype));
    if (inc_) {
      OPENFIA_CHECK(p.dtype == q.dtype, "pse_shift",
                    "dtype must equal the query dtype when Q_S is 1", Name(p.dtype), " vs ",
                    Name(q.dtype));
    } else {
      const bool ok =
          p.dtype == q.dtype || (p.dtype == DType::kFloat16 && q.dtype == DType::kInt8);
      OPENFIA_CHECK(ok, "pse_shift",
                    "float16 pse needs a float16 or int8 query, bfloat16 pse a bfloat16 query",
                    Name(p.dtype), " with query ", Name(q.dtype));
    }
    CheckContiguous(p, "pse_shift");
    CheckDim(p, "pse_shift", 4, "(B, N, Q_S, KV_S) or (1, N, Q_S, KV_S)");
    OPENFIA_CHECK((p.size(0) == g_.batch || p.size(0) == 1) && p.size(1) == g_.h_q, "pse_shift",
                  Str("shape must be (B, N, Q_S, KV_S) or (1, N, Q_S, KV_S) with B = ", g_.batch,
                      ", N = ", g_.h_q),
                  p.shape_string());
    OPENFIA_CHECK(p.size(2) >= (inc_ ? 1 : g_.q_s), "pse_shift",
                  "the Q_S axis must be >= the query's S (Q_S需大于等于query的S长度)",
                  p.shape_string());
    OPENFIA_CHECK(p.size(3) >= g_.prefix_len + g_.kv_s_for_masks, "pse_shift",
                  Str("the KV_S axis must be >= ", g_.prefix_len ? "actual_shared_prefix_len + " : "",
                      "the key's S = ", g_.prefix_len + g_.kv_s_for_masks),
                  p.shape_string());
  }

  // ---- learnable sinks: one logit per query head in the softmax denominator ----
  void ReadSinks() {
    const TensorView& t = a_.sinks;
    if (!t.defined()) return;
    OPENFIA_CHECK(IsFloat(t.dtype), "sinks",
                  "dtype must be bfloat16 (float16 and float32 are also accepted)", Name(t.dtype));
    OPENFIA_CHECK(t.dim() == 1 && t.size(0) == g_.h_q, "sinks",
                  Str("shape must be (N,) with N = num_heads = ", g_.h_q), t.shape_string());
    CheckContiguous(t, "sinks");
    OPENFIA_CHECK_SUPPORTED(!g_.full_quant, "sinks",
                            "learnable sinks with int8 query, key and value are not supported "
                            "(the int8 softmax has no sink term)",
                            "int8 query");
    g_.sinks.resize(g_.h_q);
    for (int64_t h = 0; h < g_.h_q; ++h) g_.sinks[h] = LoadFloat(t.data, ElemOf(t.dtype), h);
  }

  // ---- 16. antiquant (int8 / int4 key and value with a floating-point query) ----
  void ReadAntiquant() {
    const bool sep = a_.key_antiquant_scale.defined();
    const bool legacy = a_.antiquant_scale.defined();
    if (!g_.antiquant) {
      const char* extra = sep ? "key_antiquant_scale" : legacy ? "antiquant_scale" : nullptr;
      OPENFIA_CHECK(extra == nullptr, extra ? extra : "",
                    "is only valid with int8/int4 (int32) key and value and a floating-point query",
                    Name(k0_->dtype), " key, ", Name(a_.query.dtype), " query");
    } else {
      OPENFIA_CHECK(sep || legacy, "antiquant_scale",
                    "int8/int4 key and value with a floating-point query need antiquant_scale or "
                    "key_antiquant_scale/value_antiquant_scale",
                    "None");
      // Per-token scales cover the shared prefix, then the key's S (a prefix precedes each
      // batch's keys; the golden concatenates them before dequantizing).
      int64_t token_s = g_.prefix_len;
      for (int64_t s : g_.kv_storage_s) token_s = std::max(token_s, g_.prefix_len + s);
      // A paged cache has no storage S: per-token (B, S) scales are indexed by the token's
      // position in its sequence and must cover every batch's actual_seq_lengths_kv.
      if (paged_)
        for (int64_t s : g_.kv_len) token_s = std::max(token_s, s);
      const AqContext c{a_.query.dtype, g_.batch, g_.h_kv, g_.block_num, g_.block_size, token_s};
      if (sep)
        ReadSeparateAntiquant(c);  // KV-separated parameters win over legacy ones (以KV分离量化参数为准)
      else
        ReadLegacyAntiquant(c);
      CheckAntiquantCombinations();
      // inner_precise bit 0 = 0 (high precision) keeps float16 antiquant K/V in fp32; bfloat16
      // does not distinguish the two modes (bfloat16和int8不区分高精度和高性能).
      g_.antiquant_f32 = a_.query.dtype == DType::kFloat16 && (a_.inner_precise & 1) == 0;
    }
    OPENFIA_CHECK_SUPPORTED(!(tnd_ && g_.antiquant), "key",
                            "input_layout TND does not support antiquant (TND不支持伪量化)",
                            Name(k0_->dtype));
    OPENFIA_CHECK_SUPPORTED(!(tnd_ && g_.full_quant), "query",
                            "input_layout TND does not support full quantization (TND不支持全量化)",
                            Name(a_.query.dtype));
    OPENFIA_CHECK_SUPPORTED(!(paged_ && g_.full_quant), "query",
                            "page attention does not support an int8 query "
                            "(page attention场景下，不支持输入query为int8的场景)",
                            "int8");
  }

  void ReadSeparateAntiquant(const AqContext& c) {
    const int64_t km = a_.key_antiquant_mode, vm = a_.value_antiquant_mode;
    OPENFIA_CHECK(km >= 0 && km <= 5, "key_antiquant_mode", "must be 0, 1, 2, 3, 4 or 5", km);
    OPENFIA_CHECK(vm >= 0 && vm <= 5, "value_antiquant_mode", "must be 0, 1, 2, 3, 4 or 5", vm);
    OPENFIA_CHECK(km == vm || (km == 0 && vm == 1), "value_antiquant_mode",
                  "must equal key_antiquant_mode, except key mode 0 with value mode 1",
                  "key_antiquant_mode = ", km, ", value_antiquant_mode = ", vm);
    if (!inc_) {
      OPENFIA_CHECK_SUPPORTED(km == 1 && vm == 1, "key_antiquant_mode",
                              "only per-token mode 1 is supported when Q_S > 1 "
                              "(Q_S大于等于2时仅支持传入值为1)",
                              "key_antiquant_mode = ", km, ", value_antiquant_mode = ", vm);
      OPENFIA_CHECK_SUPPORTED(!use_list_ && !g_.left_padding && !paged_ &&
                                  !a_.key_shared_prefix.defined(),
                              "key_antiquant_scale",
                              "KV-separated antiquant with Q_S > 1 does not support tensorlist, "
                              "left padding, page attention or prefix",
                              use_list_ ? "tensorlist" : g_.left_padding ? "left padding"
                              : paged_ ? "page attention" : "prefix");
    }
    g_.k_aq = ResolveSeparate(a_.key_antiquant_scale, a_.key_antiquant_offset, km, g_.d_qk, c,
                              "key_antiquant_scale", "key_antiquant_offset",
                              "key_antiquant_mode");
    g_.v_aq = ResolveSeparate(a_.value_antiquant_scale, a_.value_antiquant_offset, vm, g_.d_v, c,
                              "value_antiquant_scale", "value_antiquant_offset",
                              "value_antiquant_mode");
    if (km != vm || g_.d_qk != g_.d_v) return;
    OPENFIA_CHECK(a_.value_antiquant_scale.sizes == a_.key_antiquant_scale.sizes,
                  "value_antiquant_scale",
                  "must have the key_antiquant_scale shape (shape需要保持一致)",
                  a_.value_antiquant_scale.shape_string(), " vs ",
                  a_.key_antiquant_scale.shape_string());
    if (a_.key_antiquant_offset.defined())
      OPENFIA_CHECK(a_.value_antiquant_offset.sizes == a_.key_antiquant_offset.sizes,
                    "value_antiquant_offset",
                    "must have the key_antiquant_offset shape (shape需要保持一致)",
                    a_.value_antiquant_offset.shape_string(), " vs ",
                    a_.key_antiquant_offset.shape_string());
  }

  // Legacy joint antiquant_scale/antiquant_offset: index 0 of the leading axis is K, 1 is V.
  void ReadLegacyAntiquant(const AqContext& c) {
    const TensorView& s = a_.antiquant_scale;
    OPENFIA_CHECK(a_.antiquant_mode == 0 || a_.antiquant_mode == 1, "antiquant_mode",
                  "must be 0 (per-channel/per-tensor) or 1 (per-token)", a_.antiquant_mode);
    FiaAntiquant aq;
    aq.scale = &s;
    aq.offset = a_.antiquant_offset.defined() ? &a_.antiquant_offset : nullptr;
    if (a_.antiquant_mode == 1) {
      OPENFIA_CHECK(s.dim() == 3 && s.size(0) == 2 && s.size(1) == c.batch &&
                        s.size(2) >= c.token_s,
                    "antiquant_scale",
                    Str("per-token (antiquant_mode 1) needs shape (2, B, S) with B = ", c.batch,
                        ", S >= ", c.token_s),
                    s.shape_string());
      aq.form = F::kPerToken;
      aq.token_s = s.size(2);
    } else if (s.dim() == 1) {
      OPENFIA_CHECK(s.size(0) == 2, "antiquant_scale", "per-tensor needs shape (2,)",
                    s.shape_string());
      aq.form = F::kPerTensor;
    } else {
      OPENFIA_CHECK(g_.d_qk == g_.d_v, "antiquant_scale",
                    "joint K/V per-channel parameters need equal key and value D", g_.d_qk,
                    " vs ", g_.d_v);
      OPENFIA_CHECK(OneOf(s.sizes, PerChannelShapes(2, g_.h_kv, g_.d_qk)), "antiquant_scale",
                    Str("per-channel needs shape (2, N, 1, D), (2, N, D) or (2, H) with N = ",
                        g_.h_kv, ", D = ", g_.d_qk),
                    s.shape_string());
      aq.form = F::kPerChannel;
    }
    CheckParamDtype(s, "antiquant_scale", aq.form == F::kPerToken, c.q_dtype);
    CheckContiguous(s, "antiquant_scale");
    if (aq.offset) {
      const TensorView& o = a_.antiquant_offset;
      OPENFIA_CHECK(o.sizes == s.sizes, "antiquant_offset",
                    "must have the same shape as antiquant_scale", o.shape_string(), " vs ",
                    s.shape_string());
      OPENFIA_CHECK(o.dtype == s.dtype, "antiquant_offset",
                    "must have the same dtype as antiquant_scale", Name(o.dtype), " vs ",
                    Name(s.dtype));
      CheckContiguous(o, "antiquant_offset");
    }
    g_.k_aq = aq;
    g_.k_aq.index = 0;
    g_.v_aq = aq;
    g_.v_aq.index = 1;
  }

  void CheckAntiquantCombinations() const {
    const auto is_paged_token = [](F f) { return f == F::kPagedToken || f == F::kPagedTokenHead; };
    OPENFIA_CHECK_SUPPORTED(inc_ || !paged_, "block_table",
                            "page attention does not support antiquant when Q_S > 1 "
                            "(page attention不支持伪量化场景)",
                            Name(k0_->dtype), " key");
    // With a paged cache per-token (B, S) / (B, N, S) scales (which the Q_S == 1 table lists
    // without excluding page attention) are indexed by (batch, token position in the sequence),
    // see Dequant::logical; modes 4/5 index by (block, row) instead.
    if (!paged_)
      OPENFIA_CHECK(!is_paged_token(g_.k_aq.form) && !is_paged_token(g_.v_aq.form),
                    "key_antiquant_mode",
                    "modes 4 and 5 manage scales by page attention and need block_table",
                    "block_table is None");
    if (!g_.kv_int4) return;
    OPENFIA_CHECK_SUPPORTED(!paged_, "block_table",
                            "int4 (int32) key/value do not support page attention "
                            "(不支持Q为bfloat16、float16、key、value为int4（int32）的场景)",
                            "int32 key");
    OPENFIA_CHECK_SUPPORTED(!kv_pad_, "kv_padding_size",
                            "kv left padding does not support int4 (int32) key/value",
                            "int32 key");
  }

  // ---- 17. int8 full quantization scalars ----
  void ReadQuantScalars() {
    if (g_.full_quant) {
      OPENFIA_CHECK(a_.dequant_scale1.defined(), "dequant_scale1",
                    "is required when query, key and value are int8", "None");
      OPENFIA_CHECK(a_.quant_scale1.defined(), "quant_scale1",
                    "is required when query, key and value are int8", "None");
      OPENFIA_CHECK(a_.dequant_scale2.defined(), "dequant_scale2",
                    "is required when query, key and value are int8", "None");
      // As the golden (_np_pfaattention_act_int8) does, dequant_scale1 is truncated to 19
      // significant bits (fp32 bits & 0xFFFFE000) whether it arrives as float32 or uint64;
      // dequant_scale2 and quant_scale1 are used as given.
      g_.dequant_scale1 =
          BitsToFloat(ReadScaleBits(a_.dequant_scale1, "dequant_scale1", true) & 0xFFFFE000u);
      g_.quant_scale1 = BitsToFloat(ReadScaleBits(a_.quant_scale1, "quant_scale1", false));
      g_.dequant_scale2 = BitsToFloat(ReadScaleBits(a_.dequant_scale2, "dequant_scale2", true));
      return;
    }
    const std::pair<const TensorView*, const char*> fq[] = {
        {&a_.dequant_scale1, "dequant_scale1"},
        {&a_.quant_scale1, "quant_scale1"},
        {&a_.dequant_scale2, "dequant_scale2"}};
    for (const auto& [t, name] : fq)
      OPENFIA_CHECK(!t->defined(), name,
                    "must be None unless query, key and value are int8 (若存在则报错)",
                    t->shape_string());
  }

  // ---- 18. post-quantization to an int8 output ----
  void ReadPostQuant() {
    g_.post_quant = a_.quant_scale2.defined();
    if (!g_.post_quant) return;
    const TensorView& s = a_.quant_scale2;
    const TensorView& o = a_.quant_offset2;
    OPENFIA_CHECK(s.dtype == DType::kFloat32 ||
                      (s.dtype == DType::kBFloat16 && a_.query.dtype == DType::kBFloat16),
                  "quant_scale2",
                  "dtype must be float32 (bfloat16 is also accepted with a bfloat16 query)",
                  Name(s.dtype), " with query ", Name(a_.query.dtype));
    CheckContiguous(s, "quant_scale2");
    const int64_t n = s.numel();
    const int64_t hd = g_.h_q * g_.d_v;
    OPENFIA_CHECK(n == 1 || n == hd, "quant_scale2",
                  Str("per-tensor needs one element, per-channel a product of dimensions equal to "
                      "N * D = ", hd),
                  s.shape_string());
    g_.post_quant_per_channel = n != 1;
    if (o.defined()) {
      OPENFIA_CHECK(o.dtype == s.dtype && o.sizes == s.sizes, "quant_offset2",
                    "must have the dtype and shape of quant_scale2 (类型和shape信息与quantScale2一致)",
                    Name(o.dtype), " ", o.shape_string(), " vs ", Name(s.dtype), " ",
                    s.shape_string());
      CheckContiguous(o, "quant_offset2");
    }
    g_.quant_scale2.resize(n);
    g_.quant_offset2.assign(n, 0.f);
    for (int64_t i = 0; i < n; ++i) g_.quant_scale2[i] = LoadFloat(s.data, ElemOf(s.dtype), i);
    if (o.defined())
      for (int64_t i = 0; i < n; ++i) g_.quant_offset2[i] = LoadFloat(o.data, ElemOf(o.dtype), i);

    OPENFIA_CHECK_SUPPORTED(!tnd_, "quant_scale2",
                            "input_layout TND does not support post-quantization (TND不支持后量化)",
                            "TND");
    OPENFIA_CHECK_SUPPORTED(!g_.kv_int4, "quant_scale2",
                            "int4 (int32) antiquant does not support post-quantization "
                            "(int4（int32）伪量化场景不支持后量化)",
                            "int32 key");
    if (inc_) return;
    OPENFIA_CHECK_SUPPORTED(!(g_.post_quant_per_channel && g_.left_padding), "quant_scale2",
                            "per-channel post-quantization does not support left padding "
                            "(暂不支持左padding)",
                            "left padding");
    OPENFIA_CHECK_SUPPORTED(!(g_.sparse_mode == 4 && (a_.pre_tokens < 0 || a_.next_tokens < 0)),
                            "sparse_mode",
                            "int8 output does not support band mode with negative "
                            "pre_tokens/next_tokens (暂不支持sparse为band且preTokens/nextTokens"
                            "为负数)",
                            "pre_tokens = ", a_.pre_tokens, ", next_tokens = ", a_.next_tokens);
    if (o.defined() && o.numel() > 0) CheckRowsWithoutKeys();
  }

  // Rows that attend nothing would be quant_offset2 on the NPU and 0 in the golden: the source
  // intercepts these configurations (该场景会拦截).
  void CheckRowsWithoutKeys() const {
    const int64_t mode = g_.sparse_mode;
    const bool band_mode0 = mode == 0 && a_.atten_mask.defined() && !g_.left_padding;
    for (int64_t b = 0; b < g_.batch; ++b) {
      const int64_t s1 = g_.q_len[b], s2 = g_.kv_len[b] + g_.prefix_len;
      bool bad = false;
      if (band_mode0) bad = s1 - s2 - g_.pre_tokens > 0 || g_.next_tokens < 0;
      if (mode == 3) bad = s2 - s1 < 0;
      if (mode == 4) bad = g_.pre_tokens < 0 || g_.next_tokens + s2 - s1 < 0;
      OPENFIA_CHECK_SUPPORTED(!bad, "quant_offset2",
                              "int8 output with quant_offset2 is intercepted when "
                              "sparse_mode/pre_tokens/next_tokens leave rows without keys",
                              "batch ", b, ": sparse_mode ", mode, ", actual_seq_lengths ", s1,
                              ", actual_seq_lengths_kv ", s2, ", pre_tokens ", g_.pre_tokens,
                              ", next_tokens ", g_.next_tokens);
    }
  }

  // ---- 19. feature combinations not checked by an earlier stage ----
  // Left padding takes effect only with its actual lengths (and for the query only when
  // Q_S > 1); a padding size without effect is ignored, also with page attention.
  void CheckRemainingCombinations() const {
    if (!paged_) return;
    OPENFIA_CHECK_SUPPORTED(!q_pad_, "query_padding_size",
                            "left padding does not support page attention (不支持PageAttention)",
                            "block_table given");
    // A paged cache always has actual_seq_lengths_kv, so a KV padding size takes effect.
    OPENFIA_CHECK_SUPPORTED(!a_.kv_padding_size.defined(), "kv_padding_size",
                            "left padding does not support page attention (不支持PageAttention)",
                            "block_table given");
  }

  // ---- 20. output shapes and dtypes ----
  void MakeOutputSpec() {
    FiaOutputSpec& o = g_.spec;
    const int64_t B = g_.batch;
    o.attention_out_dtype = g_.post_quant   ? DType::kInt8
                            : g_.full_quant ? DType::kFloat16
                                            : a_.query.dtype;
    const int64_t S = g_.q_s, N = g_.h_q, DV = g_.d_v;
    switch (g_.out_layout) {
      case FiaOutLayout::kBSH: o.attention_out_sizes = {B, S, N * DV}; break;
      case FiaOutLayout::kBSND: o.attention_out_sizes = {B, S, N, DV}; break;
      case FiaOutLayout::kBNSD: o.attention_out_sizes = {B, N, S, DV}; break;
      case FiaOutLayout::kNBSD: o.attention_out_sizes = {N, B, S, DV}; break;
      case FiaOutLayout::kTND: o.attention_out_sizes = {S, N, DV}; break;  // S is T
      case FiaOutLayout::kNTD: o.attention_out_sizes = {N, S, DV}; break;
    }
    if (!a_.softmax_lse_flag)
      o.softmax_lse_sizes = {1};
    else if (tnd_)
      o.softmax_lse_sizes = {g_.q_s, g_.h_q, 1};
    else
      o.softmax_lse_sizes = {B, g_.h_q, g_.q_s, 1};
  }

  const FiaArgs& a_;
  FiaGeometry g_;
  // Established by the early stages, read by the later ones.
  bool use_list_ = false, tnd_ = false, inc_ = false, paged_ = false;
  bool q_pad_ = false, kv_pad_ = false;  // query / KV left padding in effect
  const TensorView* k0_ = nullptr;       // key (or key_list[0]): the key dtype and shape
  const TensorView* v0_ = nullptr;
  const char* kname_ = "key";
  const char* vname_ = "value";
  int64_t dmul_ = 1;   // real elements per stored element of key/value: 8 for int4 in int32
  int64_t kv_t_ = 0;   // dense TND key: total key rows
};

}  // namespace

FiaGeometry AnalyzeFia(const FiaArgs& args) { return Analyzer(args).Run(); }

}  // namespace openfia::internal
