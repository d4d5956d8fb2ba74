// openfia: KvQuantSparseFlashAttention's NPU-strict rules: the NPU limits openfia relaxes
// (docs/kv_quant_sparse_flash_attention.md, "Relaxed NPU restrictions"), one row each, with the
// product lines the ops-transformer document states them for. Where the rule differs between
// Atlas A2/A3 and Ascend 950, strict mode accepts a call that at least one of them accepts.
#include <string>

#include "common/npu_strict.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"

namespace openfia::internal {
namespace {

struct KvqsfaStrictCall {
  const KvqsfaArgs& a;
  const KvqsfaShape& sh;
};
using Row = NpuLimit<KvqsfaStrictCall>;


bool HiFloat8(const KvqsfaArgs& a) {
  return a.key.dtype == DType::kHiFloat8 || a.key.dtype == DType::kUInt8;
}
// What only Ascend 950 accepts, "" when the call uses none of it.
std::string Only950(const KvqsfaStrictCall& c) {
  if (c.sh.h_q == 48) return "Q_N = 48";
  if (c.a.key.dtype != DType::kInt8)
    return Str(HiFloat8(c.a) ? "hifloat8" : "float8_e4m3fn", " key");
  if (c.a.sinks.defined()) return "sinks";
  return "";
}

const Row kRows[] = {
    {"kvqsfa.sparse-block-size", "sparse_block_size", "Atlas A2/A3: [1, 16]; Ascend 950: 1",
     "Atlas A2/A3 take a power of two in [1, 16] that divides block_size with PageAttention (支持"
     "[1,16]，且要求是2的幂次方，在PageAttention场景下要求sparse_block_size整除block_size); "
     "Ascend 950 takes only 1 (只支持sparse_block_size为1)",
     [](const KvqsfaStrictCall& c) {
       const int64_t sbs = c.a.sparse_block_size;
       if (sbs > 16) return NpuGot(sbs);
       if (c.sh.layout_kv == KvqLayout::kPaBSND && c.sh.block_size % sbs != 0)
         return NpuGot(sbs, " with block_size ", c.sh.block_size);
       return NpuOk();
     }},
    {"kvqsfa.product", "sparse_block_size", "Atlas A2/A3 and Ascend 950",
     "Q_N 48, float8_e4m3fn/hifloat8 key and value, and sinks are Ascend 950's (Atlas A2/A3: Q_N"
     "值不支持48, 仅支持int8数据类型), where sparse_block_size is 1: a call with one of them and "
     "sparse_block_size > 1 runs on neither product",
     [](const KvqsfaStrictCall& c) {
       if (c.a.sparse_block_size == 1) return NpuOk();
       const std::string f = Only950(c);
       return f.empty() ? NpuOk() : NpuGot(c.a.sparse_block_size, " with ", f);
     }},
    {"kvqsfa.block-size", "key", "Atlas A2/A3 and Ascend 950",
     "PA_BSND: block_size is a multiple of 16, at most 1024 (block_size取值为16的整数倍，最大支持到"
     "1024)",
     [](const KvqsfaStrictCall& c) {
       const int64_t bs = c.sh.block_size;
       if (c.sh.layout_kv != KvqLayout::kPaBSND || (bs % 16 == 0 && bs <= 1024)) return NpuOk();
       return NpuGot("block_size = ", bs);
     }},
    {"kvqsfa.hifloat8-sparse-size", "sparse_indices", "Ascend 950",
     "with hifloat8 key and value, sparse_size is 2048 (sparse_size仅支持2048)",
     [](const KvqsfaStrictCall& c) {
       if (!HiFloat8(c.a) || c.sh.topk == 2048) return NpuOk();
       return NpuGot("sparse_size = ", c.sh.topk);
     }},
    {"kvqsfa.contiguous", "query", "Atlas A2/A3 and Ascend 950",
     "query and sparse_indices do not support non-contiguous tensors (不支持非连续)",
     [](const KvqsfaStrictCall& c) {
       if (!c.a.query.is_contiguous())
         return NpuGot("sizes ", c.a.query.sizes, ", strides ", c.a.query.strides);
       const TensorView& s = c.a.sparse_indices;
       if (!s.is_contiguous())
         return NpuGotAt("sparse_indices", "sizes ", s.sizes, ", strides ", s.strides);
       return NpuOk();
     }},
};

}  // namespace

void EnforceKvqsfaNpuLimits(const KvqsfaArgs& args, const KvqsfaShape& shape) {
  EnforceNpuLimits(kRows, KvqsfaStrictCall{args, shape});
}

std::vector<std::string> KvqsfaNpuLimitIds() { return NpuLimitIds(kRows); }

}  // namespace openfia::internal
