// openfia internal: output checks shared by the op drivers.
#include "common/outputs.h"

#include "common/check.h"

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

}  // namespace openfia::internal
