// openfia internal: the AMX prefill kernel's entry for tests (kernels_amx.cc, amx_prefill-inl.h).
#pragma once

#include "common/problem.h"
#include "engine/plan.h"

namespace openfia::internal {

// Whether the AMX table runs item `w` of `p` on its prefill kernel (dense bf16 keys, no rope):
// false when it takes another path or AMX is not compiled. For tests that must prove it ran.
bool AmxRunsPrefill(const Problem& p, const WorkItem& w);

}  // namespace openfia::internal
