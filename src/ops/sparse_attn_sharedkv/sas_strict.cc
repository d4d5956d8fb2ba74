// openfia: SparseAttnSharedkv's (and its metadata op's) NPU-strict rules: the NPU limits openfia
// relaxes (docs/sparse_attn_sharedkv.md, "Relaxed"), one row each, as the custom-op documents
// state them for the product they list (Atlas A3). ValidateSas and ValidateSasMetadata apply
// them last when strict mode is on; the metadata op has no tensors to check, so the rows about
// q and the caches apply to SparseAttnSharedkv only.
#include <string>
#include <utility>

#include "common/npu_strict.h"
#include "ops/sparse_attn_sharedkv/sas_internal.h"

namespace openfia::internal {
namespace {

struct SasStrictCall {
  const SasArgs* a;  // null for the metadata op
  const SasConfig& c;
};
using Row = NpuLimit<SasStrictCall>;

constexpr const char* kA3 = "Atlas A3";


// The argument a configuration value comes from: a tensor's dimension or a metadata scalar.
const char* Arg(const SasStrictCall& s, const char* sas, const char* metadata) {
  return s.a ? sas : metadata;
}

NpuBreach BlockSize(const TensorView& kv, const char* name) {
  if (!kv.defined()) return NpuOk();
  const int64_t bs = kv.size(1);
  return bs % 16 == 0 && bs <= 1024 ? NpuOk() : NpuGotAt(name, "block_size = ", bs);
}

const Row kRows[] = {
    {"sas.heads", "q", kA3, "N1 (the query's heads) is 64 (目前仅支持64)",
     [](const SasStrictCall& s) {
       return s.c.n1 == 64 ? NpuOk() : NpuGotAt(Arg(s, "q", "num_heads_q"), "N1 = ", s.c.n1);
     }},
    {"sas.head-dim", "q", kA3, "D is 512",
     [](const SasStrictCall& s) {
       return s.c.d == 512 ? NpuOk() : NpuGotAt(Arg(s, "q", "head_dim"), "D = ", s.c.d);
     }},
    {"sas.block-size", "ori_kv", kA3, "block sizes are multiples of 16, at most 1024",
     [](const SasStrictCall& s) {
       if (!s.a) return NpuOk();
       const NpuBreach b = BlockSize(s.a->ori_kv, "ori_kv");
       return b.broken() ? b : BlockSize(s.a->cmp_kv, "cmp_kv");
     }},
    {"sas.topk", "cmp_sparse_indices", kA3,
     "K2 (cmp_topk, the selected compressed entries per row) is 512 (目前仅支持512)",
     [](const SasStrictCall& s) {
       if (s.c.cmp_topk == 0 || s.c.cmp_topk == 512) return NpuOk();
       return NpuGotAt(Arg(s, "cmp_sparse_indices", "cmp_topk"), "K2 = ", s.c.cmp_topk);
     }},
    {"sas.dtype", "q", kA3, "q and the caches are bfloat16 or float16",
     [](const SasStrictCall& s) {
       if (!s.a || s.a->q.dtype != DType::kFloat32) return NpuOk();
       return NpuGot("float32");
     }},
    {"sas.contiguous", "q", kA3, "q, ori_kv and cmp_kv are contiguous",
     [](const SasStrictCall& s) {
       if (!s.a) return NpuOk();
       const std::pair<const TensorView*, const char*> ts[] = {
           {&s.a->q, "q"}, {&s.a->ori_kv, "ori_kv"}, {&s.a->cmp_kv, "cmp_kv"}};
       for (const auto& [t, name] : ts)
         if (t->defined() && !t->is_contiguous())
           return NpuGotAt(name, "sizes ", t->sizes, ", strides ", t->strides);
       return NpuOk();
     }},
};

}  // namespace

void EnforceSasNpuLimits(const SasArgs* args, const SasConfig& config) {
  EnforceNpuLimits(kRows, SasStrictCall{args, config});
}

std::vector<std::string> SasNpuLimitIds() { return NpuLimitIds(kRows); }

}  // namespace openfia::internal
