// openfia internal: the fp64 reference for the canonical Problem. Readable, slow, complete.
#pragma once

#include "common/problem.h"

namespace openfia::internal {

// Computes every valid query row (b, h, i < q_len[b]) of `p`: output row and, when requested,
// lse. Rows with no attendable key get output 0 before post-quantization and lse +inf.
// Rows outside the valid ranges are not touched (the driver pre-fills them).
void RunReference(const Problem& p);

}  // namespace openfia::internal
