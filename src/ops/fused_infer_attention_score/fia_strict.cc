// openfia: FusedInferAttentionScore's NPU-strict rules: the NPU hardware limits openfia relaxes
// (docs/fused_infer_attention_score.md, "Relaxations versus the NPU"), one row each, with the
// rule as the torch_npu document states it for Atlas A2 / A3 (the products it lists). AnalyzeFia
// applies them last, to a call every other rule has accepted, when strict mode is on.
#include <algorithm>
#include <string>

#include "common/npu_strict.h"
#include "ops/fused_infer_attention_score/fia_geometry.h"

namespace openfia::internal {
namespace {

struct FiaStrictCall {
  const FiaArgs& a;
  const FiaGeometry& g;
};
using Row = NpuLimit<FiaStrictCall>;
using F = FiaAntiquant::Form;

constexpr const char* kA2A3 = "Atlas A2/A3";
constexpr int64_t kInt32Max = 2147483647;


std::string Name(DType t) { return std::string(DTypeName(t)); }
bool Packed(const FiaGeometry& g) {
  return g.layout == FiaLayout::kTND || g.layout == FiaLayout::kNTD;
}
bool Paged(const FiaGeometry& g) {
  return g.kv_form == FiaKvForm::kPaged3 || g.kv_form == FiaKvForm::kPaged4 ||
         g.kv_form == FiaKvForm::kPagedNZ;
}
bool Separate(const FiaAntiquant& aq) { return aq.form != F::kNone && aq.index < 0; }
bool Legacy(const FiaAntiquant& aq) { return aq.form != F::kNone && aq.index >= 0; }
bool IsPerToken(F f) { return f == F::kPerToken || f == F::kPerTokenHead; }
bool Int8Only(F f) {
  return f == F::kPerTensor || f == F::kPerTensorHead || f == F::kPagedToken ||
         f == F::kPagedTokenHead;
}
// The key's S as the limits count it: the shared prefix and the key rows together.
int64_t KvS(const FiaGeometry& g) { return g.prefix_s + g.kv_s_for_masks; }
bool IsInt8(DType t) { return t == DType::kInt8; }

const Row kRows[] = {
    {"fia.dtype-float32", "query", kA2A3,
     "query, key and value are float16, bfloat16, int8 or int4 (int32); pse_shift has a "
     "float16/bfloat16 query's dtype",
     [](const FiaStrictCall& c) {
       if (c.g.q_dtype == DType::kFloat32) return NpuGotAt("query", "float32");
       if (c.g.kv_dtype == DType::kFloat32) return NpuGotAt("key", "float32");
       if (c.a.pse_shift.defined() && c.a.pse_shift.dtype == DType::kFloat32)
         return NpuGotAt("pse_shift", "float32");
       return NpuOk();
     }},
    {"fia.d-max", "query", kA2A3, "D <= 512 (支持D轴小于等于512)",
     [](const FiaStrictCall& c) {
       if (c.g.d_qk > 512) return NpuGot("D = ", c.g.d_qk);
       if (c.g.d_v > 512) return NpuGotAt("value", "D = ", c.g.d_v);
       return NpuOk();
     }},
    {"fia.d-align", "query", kA2A3,
     "Q_S > 1: D is 32-aligned when query, key or value is int8 and 16-aligned when all are "
     "float16/bfloat16 (D轴需要32对齐 / 16对齐; D not 32-byte aligned only up to 128)",
     [](const FiaStrictCall& c) {
       if (c.g.incremental) return NpuOk();
       const bool i8 = IsInt8(c.g.q_dtype) || IsInt8(c.g.kv_dtype);
       const int64_t base = i8 ? 32 : 16;
       if (c.g.d_qk % base) return NpuGot("D = ", c.g.d_qk, i8 ? " with int8" : "");
       if (c.g.d_v % base) return NpuGotAt("value", "D = ", c.g.d_v, i8 ? " with int8" : "");
       return NpuOk();
     }},
    {"fia.d-int4", "key", kA2A3, "int4 (int32) antiquant supports only D 64-aligned (仅支持D 64对齐)",
     [](const FiaStrictCall& c) {
       if (!c.g.kv_int4) return NpuOk();
       if (c.g.d_qk % 64) return NpuGot("D = ", c.g.d_qk);
       if (c.g.d_v % 64) return NpuGotAt("value", "D = ", c.g.d_v);
       return NpuOk();
     }},
    {"fia.block-size-prompt", "block_size", kA2A3,
     "page attention with Q_S > 1: block_size is a multiple of 128 in [128, 512] (最小为128，最大为"
     "512，且要求是128的倍数)",
     [](const FiaStrictCall& c) {
       const int64_t bs = c.g.block_size;
       if (!Paged(c.g) || c.g.incremental || c.g.mla) return NpuOk();
       return bs % 128 == 0 && bs >= 128 && bs <= 512 ? NpuOk() : NpuGot(bs);
     }},
    {"fia.block-size-incre", "block_size", kA2A3,
     "page attention with Q_S = 1: block_size 16-aligned for float16/bfloat16 key/value, "
     "32-aligned for int8 (需要16对齐 / 需要32对齐)",
     [](const FiaStrictCall& c) {
       const int64_t bs = c.g.block_size;
       if (!Paged(c.g) || !c.g.incremental || c.g.mla) return NpuOk();
       const int64_t base = IsInt8(c.g.kv_dtype) ? 32 : 16;
       return bs % base == 0 ? NpuOk() : NpuGot(bs, " with ", Name(c.g.kv_dtype), " key");
     }},
    {"fia.block-size-mla", "block_size", kA2A3,
     "MLA (query_rope/key_rope): block_size 16 or 128, and 128 for an NZ cache (block_size支持16、"
     "128，其中数据格式为NZ时block_size不支持配置16)",
     [](const FiaStrictCall& c) {
       const int64_t bs = c.g.block_size;
       if (!c.g.mla || !Paged(c.g)) return NpuOk();
       if (bs == 128 || (bs == 16 && c.g.kv_form != FiaKvForm::kPagedNZ)) return NpuOk();
       return NpuGot(bs, c.g.kv_form == FiaKvForm::kPagedNZ ? " with an NZ cache" : "");
     }},
    {"fia.batch-max", "query", kA2A3, "B <= 65536 (支持B轴小于等于65536)",
     [](const FiaStrictCall& c) {
       return c.g.batch <= 65536 ? NpuOk() : NpuGot("B = ", c.g.batch);
     }},
    {"fia.heads-max", "num_heads", kA2A3, "N <= 256 (支持N轴小于等于256)",
     [](const FiaStrictCall& c) { return c.g.h_q <= 256 ? NpuOk() : NpuGot(c.g.h_q); }},
    {"fia.seq-max", "query", kA2A3,
     "S <= 20971520 (20M) when Q_S > 1; key/value S <= 262144 when Q_S = 1 (a shared prefix "
     "counts into the key's S)",
     [](const FiaStrictCall& c) {
       if (Packed(c.g)) return NpuOk();
       if (c.g.incremental)
         return KvS(c.g) <= 262144 ? NpuOk()
                                   : NpuGotAt("key", "KV_S = ", KvS(c.g), " with Q_S = 1");
       if (c.g.q_s > 20971520) return NpuGot("Q_S = ", c.g.q_s);
       if (KvS(c.g) > 20971520) return NpuGotAt("key", "KV_S = ", KvS(c.g));
       return NpuOk();
     }},
    {"fia.nd-max", "query", kA2A3,
     "Q_S > 1 with input_layout BSH or BSND: N * D < 65535 (要求N*D小于65535)",
     [](const FiaStrictCall& c) {
       if (c.g.incremental || (c.g.layout != FiaLayout::kBSH && c.g.layout != FiaLayout::kBSND))
         return NpuOk();
       return c.g.h_q * c.g.d_qk < 65535 ? NpuOk() : NpuGot("N * D = ", c.g.h_q * c.g.d_qk);
     }},
    {"fia.paged3-kvnd", "key", kA2A3,
     "page attention with a (blocknum, blocksize, H) cache: KV_N * D <= 65535 (超过65535时会被拦截)",
     [](const FiaStrictCall& c) {
       if (c.g.kv_form != FiaKvForm::kPaged3) return NpuOk();
       const int64_t d = std::max(c.g.d_qk, c.g.d_v);
       return c.g.h_kv * d <= 65535 ? NpuOk() : NpuGot("KV_N * D = ", c.g.h_kv * d);
     }},
    {"fia.group-max", "num_key_value_heads", kA2A3,
     "num_heads / num_key_value_heads <= 64 (比值不能大于64)",
     [](const FiaStrictCall& c) {
       const int64_t r = c.g.h_q / std::max<int64_t>(c.g.h_kv, 1);
       return r <= 64 ? NpuOk() : NpuGot("num_heads / num_key_value_heads = ", r);
     }},
    {"fia.kv-numel", "key", kA2A3,
     "page attention with Q_S = 1: the product of key's and of value's dimensions fits int32 "
     "(所有维度相乘不能超过int32的表示范围)",
     [](const FiaStrictCall& c) {
       if (!Paged(c.g) || !c.g.incremental) return NpuOk();
       if (c.a.key.numel() > kInt32Max) return NpuGot(c.a.key.numel(), " elements");
       if (c.a.value.numel() > kInt32Max) return NpuGotAt("value", c.a.value.numel(), " elements");
       return NpuOk();
     }},
    {"fia.cache-layout", "key", kA2A3,
     "page attention with Q_S > 1 and input_layout BSH or BSND: only the (blocknum, blocksize, H) "
     "cache (kv cache排布只支持（blocknum, blocksize, H）一种格式)",
     [](const FiaStrictCall& c) {
       if (!Paged(c.g) || c.g.incremental || c.g.mla ||
           (c.g.layout != FiaLayout::kBSH && c.g.layout != FiaLayout::kBSND))
         return NpuOk();
       if (c.g.kv_form == FiaKvForm::kPaged3) return NpuOk();
       return NpuGot(c.a.key.dim(), "-D cache ", c.a.key.shape_string());
     }},
    {"fia.tnd-t-max", "query", kA2A3, "input_layout TND: T <= 65536 (T小于等于65536)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g)) return NpuOk();
       if (c.g.q_s > 65536) return NpuGot("T = ", c.g.q_s);
       if (!Paged(c.g) && !c.g.kv_storage_s.empty() && c.g.kv_storage_s[0] > 65536)
         return NpuGotAt("key", "T = ", c.g.kv_storage_s[0]);
       return NpuOk();
     }},
    {"fia.tnd-heads", "num_heads", kA2A3,
     "input_layout TND: N is 8, 16, 32, 64 or 128 and Q_N = K_N = V_N (N等于8/16/32/64/128，且"
     "Q_N、K_N、V_N相等)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g) || c.g.mla) return NpuOk();
       const int64_t n = c.g.h_q;
       if (n != 8 && n != 16 && n != 32 && n != 64 && n != 128) return NpuGot(n);
       if (c.g.h_kv != n) return NpuGotAt("num_key_value_heads", c.g.h_kv, " vs num_heads ", n);
       return NpuOk();
     }},
    {"fia.tnd-dims", "query", kA2A3,
     "input_layout TND: Q_D = K_D = 192, V_D 128 or 192 (Q_D、K_D等于192，V_D等于128/192)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g) || c.g.mla) return NpuOk();
       if (c.g.d_qk != 192) return NpuGot("D = ", c.g.d_qk);
       if (c.g.d_v != 128 && c.g.d_v != 192) return NpuGotAt("value", "D = ", c.g.d_v);
       return NpuOk();
     }},
    {"fia.tnd-dtype", "query", kA2A3, "input_layout TND: bfloat16 only (数据类型仅支持BFLOAT16)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g) || c.g.mla || c.g.q_dtype == DType::kBFloat16) return NpuOk();
       return NpuGot(Name(c.g.q_dtype));
     }},
    {"fia.tnd-paged", "block_table", kA2A3,
     "input_layout TND does not support page attention (不支持page attention)",
     [](const FiaStrictCall& c) {
       return Packed(c.g) && Paged(c.g) && !c.g.mla ? NpuGot("block_table given") : NpuOk();
     }},
    {"fia.tnd-sparse-mode", "sparse_mode", kA2A3,
     "input_layout TND: only sparse_mode 0 without atten_mask or 3 with atten_mask (仅支持"
     "sparse=0且不传mask，或sparse=3且传入mask)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g) || c.g.sparse_mode == 0 || c.g.sparse_mode == 3) return NpuOk();
       return NpuGot(c.g.sparse_mode);
     }},
    {"fia.tnd-mode3-lengths", "actual_seq_lengths", kA2A3,
     "input_layout TND with sparse_mode 3: each batch's actual_seq_lengths < "
     "actual_seq_lengths_kv (要求每个batch单独的actual_seq_lengths < actual_seq_lengths_kv)",
     [](const FiaStrictCall& c) {
       if (!Packed(c.g) || c.g.sparse_mode != 3) return NpuOk();
       for (size_t b = 0; b < c.g.q_len.size(); ++b)
         if (c.g.q_len[b] >= c.g.kv_len[b])
           return NpuGot("batch ", b, ": ", c.g.q_len[b], " query rows, ", c.g.kv_len[b],
                         " key rows");
       return NpuOk();
     }},
    {"fia.mla-dims", "query_rope", kA2A3,
     "MLA: query and key D 512, query_rope and key_rope D 64 (D为512 / D为64)",
     [](const FiaStrictCall& c) {
       if (!c.g.mla) return NpuOk();
       if (c.g.d_rope != 64) return NpuGot("D = ", c.g.d_rope);
       if (c.g.d_qk != 512) return NpuGotAt("query", "D = ", c.g.d_qk);
       return NpuOk();
     }},
    {"fia.mla-q-s", "query", kA2A3, "MLA: the query's S is 1-16 (要求query的S为1-16)",
     [](const FiaStrictCall& c) {
       if (!c.g.mla || Packed(c.g) || c.g.q_s <= 16) return NpuOk();
       return NpuGot("Q_S = ", c.g.q_s);
     }},
    {"fia.mla-heads", "num_heads", kA2A3,
     "MLA: N 32, 64 or 128 and key N 1 (N为32、64、128 / key的N为1)",
     [](const FiaStrictCall& c) {
       if (!c.g.mla) return NpuOk();
       const int64_t n = c.g.h_q;
       if (n != 32 && n != 64 && n != 128) return NpuGot(n);
       if (c.g.h_kv != 1) return NpuGotAt("num_key_value_heads", c.g.h_kv);
       return NpuOk();
     }},
    {"fia.mla-paged", "block_table", kA2A3,
     "MLA requires page attention (该场景下，必须开启PageAttention)",
     [](const FiaStrictCall& c) { return c.g.mla && !Paged(c.g) ? NpuGot("None") : NpuOk(); }},
    {"fia.kvsep-q-dtype", "query", kA2A3,
     "separate key/value antiquant: bfloat16 query with int8 key/value and a bfloat16 output "
     "when Q_S > 1 (要求query的dtype为bfloat16); float16 query and output for int8 key/value with "
     "key_antiquant_mode 0 and value_antiquant_mode 1 (仅支持query和输出的dtype为float16)",
     [](const FiaStrictCall& c) {
       if (!Separate(c.g.k_aq) && !Separate(c.g.v_aq)) return NpuOk();
       if (!c.g.incremental) {
         if (c.g.q_dtype != DType::kBFloat16) return NpuGot(Name(c.g.q_dtype), " with Q_S > 1");
         if (c.g.kv_int4) return NpuGotAt("key", "int4 with Q_S > 1");
         if (c.g.post_quant) return NpuGotAt("quant_scale2", "int8 output with Q_S > 1");
         return NpuOk();
       }
       const bool k0v1 = c.a.key_antiquant_mode == 0 && c.a.value_antiquant_mode == 1;
       if (k0v1 && !c.g.kv_int4 && c.g.q_dtype != DType::kFloat16)
         return NpuGot(Name(c.g.q_dtype), " with int8 key/value, key mode 0, value mode 1");
       return NpuOk();
     }},
    {"fia.kvsep-q-s", "query", kA2A3,
     "separate key/value antiquant with Q_S > 1: the query's S <= 16 (要求query的s小于等于16)",
     [](const FiaStrictCall& c) {
       if ((!Separate(c.g.k_aq) && !Separate(c.g.v_aq)) || c.g.incremental || c.g.q_s <= 16)
         return NpuOk();
       return NpuGot("Q_S = ", c.g.q_s);
     }},
    {"fia.int4-modes", "key_antiquant_mode", kA2A3,
     "int4 (int32) key/value support only per-channel, per-token and per-token-head antiquant: "
     "per-tensor, per-tensor-head and the page-managed modes need int8 (当key、value数据类型为int8时"
     "支持)",
     [](const FiaStrictCall& c) {
       if (!c.g.kv_int4) return NpuOk();
       if (Int8Only(c.g.k_aq.form))
         return NpuGot("int4 key with form ", static_cast<int>(c.g.k_aq.form), ", mode ",
                    c.a.key_antiquant_mode);
       if (Int8Only(c.g.v_aq.form))
         return NpuGotAt("value_antiquant_mode", "int4 value with form ",
                      static_cast<int>(c.g.v_aq.form), ", mode ", c.a.value_antiquant_mode);
       return NpuOk();
     }},
    {"fia.legacy-q-dtype", "query", kA2A3,
     "antiquant_scale (joint key/value parameters) with Q_S > 1 dequantizes int8 to float16 only "
     "(kvCache反量化的合成参数场景仅支持int8反量化到float16)",
     [](const FiaStrictCall& c) {
       if (!Legacy(c.g.k_aq) || c.g.incremental || c.g.q_dtype == DType::kFloat16) return NpuOk();
       return NpuGot(Name(c.g.q_dtype), " with Q_S = ", c.g.q_s);
     }},
    {"fia.value-d", "value", kA2A3,
     "key and value have identical shapes (key、value中对应tensor的shape需要完全一致)",
     [](const FiaStrictCall& c) {
       if (Packed(c.g) || c.g.d_v == c.g.d_qk) return NpuOk();
       return NpuGot("D = ", c.g.d_v, " vs key D = ", c.g.d_qk);
     }},
    {"fia.pse-d16", "pse_shift", kA2A3,
     "pse_shift with Q_S = 1 needs D divisible by 16 (仅支持D轴对齐，即D轴可以被16整除)",
     [](const FiaStrictCall& c) {
       if (!c.a.pse_shift.defined() || !c.g.incremental || c.g.d_qk % 16 == 0) return NpuOk();
       return NpuGot("D = ", c.g.d_qk);
     }},
    {"fia.per-token-paged", "key_antiquant_mode", kA2A3,
     "per-token antiquant with page attention uses the page-managed modes 4 ((blocknum, "
     "blocksize)) and 5 ((blocknum, N, blocksize)) (per-token叠加使用page attention模式)",
     [](const FiaStrictCall& c) {
       if (!Paged(c.g)) return NpuOk();
       if (IsPerToken(c.g.k_aq.form))
         return c.g.k_aq.index >= 0 ? NpuGotAt("antiquant_mode", c.a.antiquant_mode)
                                    : NpuGot(c.a.key_antiquant_mode);
       if (IsPerToken(c.g.v_aq.form))
         return NpuGotAt("value_antiquant_mode", c.a.value_antiquant_mode);
       return NpuOk();
     }},
    {"fia.out-layout-nbsd", "input_layout", kA2A3,
     "an NBSD output (BSH_NBSD, BSND_NBSD, BNSD_NBSD) is MLA's, with Q_S 1-16",
     [](const FiaStrictCall& c) {
       if (c.g.out_layout != FiaOutLayout::kNBSD) return NpuOk();
       if (c.g.mla && c.g.q_s <= 16) return NpuOk();
       return NpuGot(c.a.input_layout, c.g.mla ? " with Q_S = " : " without MLA",
                  c.g.mla ? std::to_string(c.g.q_s) : std::string());
     }},
    {"fia.sinks", "sinks", kA2A3,
     "learnable sinks are bfloat16, not with MLA's value D 512, and not with inner_precise 1-3 "
     "in input_layout TND",
     [](const FiaStrictCall& c) {
       if (!c.a.sinks.defined()) return NpuOk();
       if (c.a.sinks.dtype != DType::kBFloat16) return NpuGot(Name(c.a.sinks.dtype));
       if (c.g.mla && c.g.d_v == 512) return NpuGot("MLA with value D 512");
       if (Packed(c.g) && c.a.inner_precise != 0)
         return NpuGotAt("inner_precise", c.a.inner_precise, " with input_layout TND and sinks");
       return NpuOk();
     }},
};

}  // namespace

void EnforceFiaNpuLimits(const FiaArgs& args, const FiaGeometry& g) {
  EnforceNpuLimits(kRows, FiaStrictCall{args, g});
}

std::vector<std::string> FiaNpuLimitIds() { return NpuLimitIds(kRows); }

}  // namespace openfia::internal
