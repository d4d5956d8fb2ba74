// openfia: the scalar target and the portable kernel (always built): the generic tile loop and
// the two-pass int8 full-quantization kernel on scalar floats. It runs every item of every problem
// the engine supports, so it ends every kernel list.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/convert.h"
#include "common/problem.h"
#include "engine/kernel.h"
#include "engine/kernels/generic/common.h"
#include "engine/kernels/generic/support.h"
#include "engine/kernels/generic/tile_scratch.h"
#include "engine/kernels/registry.h"

namespace openfia::internal::scalar_target {

#include "engine/kernels/scalar/vec_scalar-inl.h"

struct V : ScalarVec {};

#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/generic/attend-inl.h"

const char* PortableSupports(const Problem& p, const WorkItem* w) {
  if (const char* why = p.full_quant ? FullQuantSupports(p) : TileLoopSupports(p)) return why;
  return w != nullptr ? OneTokenPerSparseItem(p, *w) : nullptr;
}

void PortableRun(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out) {
  if (p.full_quant) return AttendFullQuant(p, w, TileOf(scratch), out);
  AttendItem(p, w, TileOf(scratch), out);
}

const Kernel kPortable = {"portable", Isa::kScalar, &PortableSupports, &TileScratchSize,
                          &PrepareTileScratch, &PortableRun};
// No vector row helpers: the runner's own loops write the rows.
const VectorOps kOps = {"scalar", &ExpArray, &ExpPArray, nullptr, nullptr};

}  // namespace openfia::internal::scalar_target

namespace openfia::internal {
const Kernel* PortableKernel() { return &scalar_target::kPortable; }
const VectorOps* ScalarVectorOps() { return &scalar_target::kOps; }
}  // namespace openfia::internal
