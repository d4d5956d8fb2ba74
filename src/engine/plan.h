// openfia internal: the engine's work plan of a problem (FusedInferAttentionScore and
// KvQuantSparseFlashAttention; SparseAttnSharedkv's metadata is its own plan).
//
// The plan depends on the Problem only (never on the thread count), so split-KV boundaries and
// every reduction order are fixed and results are bitwise independent of the number of workers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.h"
#include "engine/kernel.h"

namespace openfia::internal {

struct Plan {
  std::vector<WorkItem> items;
  int64_t state_rows = 0;  // rows of split workspace needed (sum over split items)
};

// Builds the work list of p (deterministic; depends on p only). MaxItemRows (engine/kernel.h)
// bounds the rows of its items.
Plan MakePlan(const Problem& p);

}  // namespace openfia::internal
