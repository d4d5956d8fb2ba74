// openfia internal: output checks, pre-fill and implementation choice shared by the op drivers.
#include "common/dispatch.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "common/check.h"
#include "engine/engine.h"
#include "openfia/runtime.h"
#include "reference/reference.h"

namespace openfia::internal {

void CheckOutput(const TensorView& t, const char* name, const std::vector<int64_t>& sizes,
                 DType dtype) {
  OPENFIA_CHECK(t.defined(), name, "must be provided", "None");
  OPENFIA_CHECK(t.sizes == sizes, name, Str("must have shape ", sizes), t.shape_string());
  OPENFIA_CHECK(t.dtype == dtype, name, Str("must have dtype ", DTypeName(dtype)),
                DTypeName(t.dtype));
  OPENFIA_CHECK(t.is_contiguous(), name, "must be contiguous", "strides ", t.strides);
  OPENFIA_CHECK(t.numel() == 0 || t.data != nullptr, name, "must not be a null pointer", "null");
}

void PrefillOutputs(const TensorView& out, const TensorView& lse, bool lse_real) {
  // An empty output may have a null pointer (CheckOutput allows it): never hand it to memset.
  if (out.numel() > 0) std::memset(out.data, 0, out.numel() * ElementSize(out.dtype));
  if (lse.defined() && lse.numel() > 0) {
    float* p = static_cast<float*>(lse.data);
    std::fill(p, p + lse.numel(), lse_real ? std::numeric_limits<float>::infinity() : 0.f);
  }
}

void RunSelectedImpl(const Problem& p, const std::function<void(const Problem&)>& run_reference) {
  const Impl impl = GetImpl();
  std::string why;
  if (impl == Impl::kReference) {
    run_reference(p);
  } else if (EngineSupports(p, &why)) {
    RunEngine(p);
  } else if (impl == Impl::kEngine) {
    Fail(ErrorCode::kUnsupported, "impl", "the engine does not support this call", why);
  } else {
    run_reference(p);
  }
}

void RunSelectedImpl(const Problem& p) { RunSelectedImpl(p, RunReference); }

}  // namespace openfia::internal
