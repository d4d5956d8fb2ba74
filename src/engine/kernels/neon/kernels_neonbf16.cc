// openfia: the AArch64 NEON + FEAT_BF16 target: the neon target's loop (vec_neon-inl.h,
// attend-inl.h) with dot tiles whose Q K^T and P V run as BFDOT over bf16 pairs
// (attend_dot_neon-inl.h) for items whose operands are bf16 values. Chosen at run time where the
// CPU reports BF16 (HWCAP2_BF16: Neoverse V1 / V2 / N2, Apple M2 and later, ...); compiled for
// armv8.2-a+bf16 as a whole, since it runs only on such CPUs.
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

#if defined(OPENFIA_HAVE_NEONBF16) && defined(__aarch64__)
#include <arm_neon.h>
// The target's instructions apply from here on only (kernels_avx512.cc says why).
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+bf16")

namespace openfia::internal::neonbf16_target {

#include "engine/kernels/neon/vec_neon-inl.h"

struct V : NeonVec {};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#define OPENFIA_ATTEND_BF16DOT 1
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/neon/attend_dot_neon-inl.h"
#include "engine/kernels/generic/attend_dot_common-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#undef OPENFIA_ATTEND_BF16DOT
#include "engine/kernels/generic/rows-inl.h"

const Kernel kTile = {"tile_neonbf16", Isa::kNeonBf16, &TileSupports, &TileScratchSize,
                      &PrepareTileScratch, &TileRun};
const VectorOps kOps = {"neonbf16", &ExpArray, &ExpPArray, &ScaleRow, &Axpy};

}  // namespace openfia::internal::neonbf16_target
#pragma GCC pop_options

// Baseline code: asked on any CPU (the registry, tests).
namespace openfia::internal {
const Kernel* TileNeonBf16Kernel() { return &neonbf16_target::kTile; }
const VectorOps* NeonBf16VectorOps() { return &neonbf16_target::kOps; }
bool NeonBf16DotRunsItem(const Problem& p, const WorkItem& w) {
  return CpuRuns(Isa::kNeonBf16) && neonbf16_target::DotItemOperandsOk(p) &&
         !p.full_quant && w.head_rows() > neonbf16_target::kStreamRows;
}
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* TileNeonBf16Kernel() { return nullptr; }
const VectorOps* NeonBf16VectorOps() { return nullptr; }
bool NeonBf16DotRunsItem(const Problem&, const WorkItem&) { return false; }
}  // namespace openfia::internal
#endif
