// openfia internal: the rule every op driver applies to its caller-allocated outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "openfia/dtype.h"
#include "openfia/tensor_view.h"

namespace openfia::internal {

// A caller-allocated output must be provided, have exactly `sizes` and `dtype`, be contiguous,
// and have a non-null pointer unless it is empty. Throws openfia::Error naming `name`.
void CheckOutput(const TensorView& t, const char* name, const std::vector<int64_t>& sizes,
                 DType dtype);

}  // namespace openfia::internal
