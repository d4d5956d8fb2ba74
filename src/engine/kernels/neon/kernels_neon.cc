// openfia: the AArch64 NEON (Advanced SIMD) target: 4 f32 lanes, the generic tile loop of
// attend-inl.h (packed Q K^T and P V as fp32 FMA register blocks, streaming path for few rows,
// online softmax with the vectorized exp), the epilogue's row helpers. Advanced SIMD is part of
// every AArch64 CPU, so the table needs no run-time feature check there; it is compiled only
// for AArch64 (cmake/OpenfiaSimd.cmake). Tested under user-mode QEMU (preset aarch64).
// The vector traits (vec_neon-inl.h) are shared with the neonbf16 target (kernels_neonbf16.cc:
// this loop plus BFDOT dot tiles, on CPUs with FEAT_BF16).
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

#if defined(OPENFIA_HAVE_NEON) && defined(__aarch64__)
#include <arm_neon.h>

namespace openfia::internal::neon_target {

#include "engine/kernels/neon/vec_neon-inl.h"

struct V : NeonVec {};

// 32 vector registers of 4 lanes: 6 rows x 4 vectors (16 columns) = 24 accumulators.
#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#include "engine/kernels/generic/rows-inl.h"

const Kernel kTile = {"tile_neon", Isa::kNeon, &TileSupports, &TileScratchSize,
                      &PrepareTileScratch, &TileRun};
const VectorOps kOps = {"neon", &ExpArray, &ExpPArray, &ScaleRow, &Axpy};

}  // namespace openfia::internal::neon_target

namespace openfia::internal {
const Kernel* TileNeonKernel() { return &neon_target::kTile; }
const VectorOps* NeonVectorOps() { return &neon_target::kOps; }
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* TileNeonKernel() { return nullptr; }
const VectorOps* NeonVectorOps() { return nullptr; }
}  // namespace openfia::internal
#endif
