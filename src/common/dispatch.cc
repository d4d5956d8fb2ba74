// openfia internal: output checks, pre-fill and implementation choice shared by the op drivers.
#include "common/dispatch.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "common/check.h"
#include "common/parallel.h"
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

void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (data == nullptr || bytes < 4 * static_cast<int64_t>(kHuge)) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (a + kHuge - 1) & ~(kHuge - 1), hi = (a + bytes) & ~(kHuge - 1);
  // A hint only: memory that cannot take huge pages (file-backed, THP off) keeps its pages.
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

void PrefillOutputs(const TensorView& out, const TensorView& lse, bool lse_real) {
  // An empty output may have a null pointer (CheckOutput allows it): never hand it to memset.
  if (out.numel() > 0) {
    const int64_t bytes = out.numel() * ElementSize(out.dtype);
    AdviseHugePages(out.data, bytes);
    // Large outputs are cleared by all workers (the first write of fresh memory is page faults
    // as much as stores).
    constexpr int64_t kPart = int64_t{1} << 22;
    char* base = static_cast<char*>(out.data);
    ParallelFor((bytes + kPart - 1) / kPart, [&](int64_t i, int) {
      std::memset(base + i * kPart, 0, std::min(kPart, bytes - i * kPart));
    });
  }
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
