// openfia: the AVX-512 (F, BW, VL, DQ) target: 16 f32 lanes, F16C conversions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "common/convert.h"
#include "common/problem.h"
#include "engine/kernel.h"
#include "engine/kernels/generic/common.h"
#include "engine/kernels/generic/support.h"
#include "engine/kernels/generic/tile_scratch.h"
#include "engine/kernels/registry.h"

#if defined(OPENFIA_HAVE_AVX512)
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace openfia::internal::avx512_target {

#include "engine/kernels/avx512/vec_avx512-inl.h"
#include "engine/kernels/avx2/vec_avx2-inl.h"  // for the integer decode products below

struct V : Avx512Vec {};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#include "engine/kernels/generic/decode_base-inl.h"
// int8 / int4 K and V under bf16 / f16 queries: the AVX2 target's integer products (VPMADDWD),
// which run int8 decode ~1.3x and int4 ~1.5x faster here than fp32 FMAs on 16 lanes over the
// dequantized elements (this target has no VPDPBUSD / VDPBF16PS of its own).
#include "engine/kernels/avx2/decode_int_avx2-inl.h"
#define OPENFIA_DECODE_INT 1
#include "engine/kernels/generic/decode-inl.h"
#undef OPENFIA_DECODE_INT
#include "engine/kernels/generic/rows-inl.h"

const Kernel kTile = {"tile_avx512", Isa::kAvx512, &TileSupports, &TileScratchSize,
                      &PrepareTileScratch, &TileRun};
const Kernel kDecode = {"decode_avx512", Isa::kAvx512, &DecodeSupports, &DecodeScratchSize,
                        nullptr, &DecodeRunItem};
const VectorOps kOps = {"avx512", &ExpArray, &ExpPArray, &ScaleRow, &Axpy};

}  // namespace openfia::internal::avx512_target
#pragma GCC pop_options

// Baseline code: asked on any CPU (the registry, tests).
namespace openfia::internal {
const Kernel* TileAvx512Kernel() { return &avx512_target::kTile; }
const Kernel* DecodeAvx512Kernel() { return &avx512_target::kDecode; }
const VectorOps* Avx512VectorOps() { return &avx512_target::kOps; }
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* TileAvx512Kernel() { return nullptr; }
const Kernel* DecodeAvx512Kernel() { return nullptr; }
const VectorOps* Avx512VectorOps() { return nullptr; }
}  // namespace openfia::internal
#endif
