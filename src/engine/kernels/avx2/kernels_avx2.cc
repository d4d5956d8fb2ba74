// openfia: the AVX2 + FMA + F16C target: 8 f32 lanes.
#include <bit>
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

#if defined(OPENFIA_HAVE_AVX2)
// GCC 12 flags the _mm512_undefined_* idiom inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Lambdas taking vector arguments inside templates get this ABI note although they are inlined.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
// The target's instructions apply from here on only (not through compiler flags on the whole
// file): inline functions of the shared headers and std templates included above stay
// baseline code, so the linker can never hand a baseline caller this file's copy of them.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace openfia::internal::avx2_target {

#include "engine/kernels/avx2/vec_avx2-inl.h"

struct V : Avx2Vec {};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 2
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#include "engine/kernels/generic/decode_base-inl.h"
#include "engine/kernels/avx2/decode_int_avx2-inl.h"
#define OPENFIA_DECODE_INT 1
#include "engine/kernels/generic/decode-inl.h"
#undef OPENFIA_DECODE_INT
#include "engine/kernels/avx2/fullquant_avx2-inl.h"
#include "engine/kernels/generic/rows-inl.h"

const char* FullQuantKernelSupports(const Problem& p, const WorkItem*) {
  return FullQuantSupports(p);
}
void FullQuantKernelRun(const Problem& p, const WorkItem& w, void* scratch,
                        const RowStates& out) {
  FullQuantRun(p, w, TileOf(scratch), out);
}

const Kernel kTile = {"tile_avx2", Isa::kAvx2, &TileSupports, &TileScratchSize,
                      &PrepareTileScratch, &TileRun};
const Kernel kDecode = {"decode_avx2", Isa::kAvx2, &DecodeSupports, &DecodeScratchSize,
                        nullptr, &DecodeRunItem};
const Kernel kFullQuant = {"fullquant_avx2", Isa::kAvx2, &FullQuantKernelSupports,
                           &TileScratchSize, &PrepareTileScratch, &FullQuantKernelRun};
const VectorOps kOps = {"avx2", &ExpArray, &ExpPArray, &ScaleRow, &Axpy};

}  // namespace openfia::internal::avx2_target
#pragma GCC pop_options

// Baseline code: asked on any CPU (the registry, tests).
namespace openfia::internal {
const Kernel* TileAvx2Kernel() { return &avx2_target::kTile; }
const Kernel* DecodeAvx2Kernel() { return &avx2_target::kDecode; }
const Kernel* FullQuantAvx2Kernel() { return &avx2_target::kFullQuant; }
const VectorOps* Avx2VectorOps() { return &avx2_target::kOps; }
bool Avx2FullQuantExpF16(const float* x, float* y, int64_t n) {
  if (!CpuRuns(Isa::kAvx2)) return false;
  avx2_target::FqExpF16Array(x, y, n);
  return true;
}
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* TileAvx2Kernel() { return nullptr; }
const Kernel* DecodeAvx2Kernel() { return nullptr; }
const Kernel* FullQuantAvx2Kernel() { return nullptr; }
const VectorOps* Avx2VectorOps() { return nullptr; }
bool Avx2FullQuantExpF16(const float*, float*, int64_t) { return false; }
}  // namespace openfia::internal
#endif
