// openfia: KvQuantSparseFlashAttention entry points: validate -> canonicalize -> dispatch (the
// same reference/engine dispatch as FusedInferAttentionScore).
#include <cstring>
#include <string>

#include "common/check.h"
#include "engine/engine.h"
#include "openfia/kv_quant_sparse_flash_attention.h"
#include "openfia/runtime.h"
#include "ops/kv_quant_sparse_flash_attention/kvqsfa_internal.h"
#include "reference/reference.h"

namespace openfia {
namespace {

constexpr const char* kOpName = "npu_kv_quant_sparse_flash_attention";

void CheckOutput(const TensorView& t, const std::vector<int64_t>& sizes, DType dtype) {
  using internal::Str;
  OPENFIA_CHECK(t.defined(), "attention_out", "must be provided", "None");
  OPENFIA_CHECK(t.sizes == sizes, "attention_out", Str("must have shape ", sizes),
                t.shape_string());
  OPENFIA_CHECK(t.dtype == dtype, "attention_out", Str("must have dtype ", DTypeName(dtype)),
                DTypeName(t.dtype));
  OPENFIA_CHECK(t.is_contiguous(), "attention_out", "must be contiguous", "strides ", t.strides);
  OPENFIA_CHECK(t.numel() == 0 || t.data != nullptr, "attention_out",
                "must not be a null pointer", "null");
}

}  // namespace

KvqsfaOutputSpec KvQuantSparseFlashAttentionOutputSpec(const KvqsfaArgs& args) {
  internal::OpScope scope(kOpName);
  return internal::ValidateKvqsfa(args).spec;
}

void KvQuantSparseFlashAttention(const KvqsfaArgs& args, const TensorView& attention_out) {
  internal::OpScope scope(kOpName);
  const internal::KvqsfaShape shape = internal::ValidateKvqsfa(args);
  CheckOutput(attention_out, shape.spec.attention_out_sizes, shape.spec.attention_out_dtype);

  // Pre-fill: rows that attend nothing, padding rows and rows past the actual lengths are 0.
  std::memset(attention_out.data, 0, attention_out.numel() * ElementSize(attention_out.dtype));

  const internal::Problem p = internal::CanonicalizeKvqsfa(args, shape, attention_out);
  if (p.batch == 0) return;

  const Impl impl = GetImpl();
  std::string why;
  if (impl == Impl::kReference) {
    internal::RunReference(p);
  } else if (internal::EngineSupports(p, &why)) {
    internal::RunEngine(p);
  } else if (impl == Impl::kEngine) {
    internal::Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call", why);
  } else {
    internal::RunReference(p);
  }
}

}  // namespace openfia
