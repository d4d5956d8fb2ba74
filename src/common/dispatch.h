// openfia internal: the steps every op driver shares once its arguments are validated and before
// or after canonicalization: checking the caller-allocated outputs, pre-filling them, and running
// the implementation GetImpl() selects. FusedInferAttentionScore, KvQuantSparseFlashAttention and
// SparseAttnSharedkv all go through these, so the three ops agree on output rules and dispatch.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/problem.h"
#include "openfia/dtype.h"
#include "openfia/tensor_view.h"

namespace openfia::internal {

// A caller-allocated output must be provided, have exactly `sizes` and `dtype`, be contiguous,
// and have a non-null pointer unless it is empty. Throws openfia::Error naming `name`.
void CheckOutput(const TensorView& t, const char* name, const std::vector<int64_t>& sizes,
                 DType dtype);

// Asks the OS for transparent huge pages over the 2 MiB-aligned interior of [data, data + bytes)
// when it spans at least 8 MiB (Linux MADV_HUGEPAGE; a no-op elsewhere, and where THP is off).
// The first write of a fresh output faults in one page per 4 KiB otherwise: a 134 MB output took
// 60 ms to write the first time in 4 KiB pages and 23-30 ms in 2 MiB pages (this VM, THP in
// "madvise" mode). Contents and semantics are unchanged; it only changes how memory is mapped.
void AdviseHugePages(void* data, int64_t bytes);

// Pre-fill, before any row is computed: every element of `out` is 0 (rows no implementation
// writes: no keys, padding, past the actual lengths), and every entry of `lse` (when defined)
// is +inf when `lse_real`, else 0 (the one-element placeholder of a call without lse). Large
// outputs get AdviseHugePages and are cleared by all workers.
void PrefillOutputs(const TensorView& out, const TensorView& lse, bool lse_real);

// Runs `p` on the implementation GetImpl() selects: kReference -> run_reference; kEngine -> the
// engine, or an ErrorCode::kUnsupported Error on argument "impl" carrying EngineSupports' reason;
// kAuto -> the engine where it supports `p`, else run_reference. SparseAttnSharedkv passes its
// plan-driven reference; the other ops use RunReference.
void RunSelectedImpl(const Problem& p, const std::function<void(const Problem&)>& run_reference);
void RunSelectedImpl(const Problem& p);

}  // namespace openfia::internal
