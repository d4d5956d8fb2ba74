// openfia: the AVX512-BF16 target: the AVX-512 table's loop with dot tiles, whose Q K^T and P V
// run as VDPBF16PS over bf16 pairs (attend_dot-inl.h) for items whose operands are bf16 values
// (bf16 queries over bf16 or antiquant caches); everything else as on the AVX-512 table.
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

#if defined(OPENFIA_HAVE_AVX512BF16)
// GCC 12 flags the _mm512_undefined_* idiom inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Lambdas taking vector arguments inside templates get this ABI note although they are inlined.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
// The target's instructions apply from here on only (kernels_avx512.cc says why).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,fma,f16c")

namespace openfia::internal::avx512bf16_target {

#include "engine/kernels/avx512/vec_avx512-inl.h"

struct V : Avx512Vec {
  // bf16 of 16 values that are zero or normal floats (VCVTNEPS2BF16 rounds to nearest even like
  // StoreBF16, and flushes only subnormal inputs).
  static void StoreBF16Normal(uint16_t* p, __m512 a) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(a)));
  }
};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#define OPENFIA_ATTEND_BF16DOT 1
#include "engine/kernels/generic/attend_base-inl.h"
#include "engine/kernels/avx512/attend_dot-inl.h"
#include "engine/kernels/generic/attend_dot_common-inl.h"
#include "engine/kernels/generic/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#undef OPENFIA_ATTEND_BF16DOT
#include "engine/kernels/generic/decode_base-inl.h"
#include "engine/kernels/avx512/decode_dot-inl.h"
#define OPENFIA_DECODE_DOT 1
#include "engine/kernels/generic/decode-inl.h"
#undef OPENFIA_DECODE_DOT
#include "engine/kernels/generic/rows-inl.h"

const Kernel kTile = {"tile_avx512bf16", Isa::kAvx512Bf16, &TileSupports, &TileScratchSize,
                      &PrepareTileScratch, &TileRun};
const Kernel kDecode = {"decode_avx512bf16", Isa::kAvx512Bf16, &DecodeSupports, &DecodeScratchSize,
                        nullptr, &DecodeRunItem};
const VectorOps kOps = {"avx512bf16", &ExpArray, &ExpPArray, &ScaleRow, &Axpy};

}  // namespace openfia::internal::avx512bf16_target
#pragma GCC pop_options

// Baseline code: asked on any CPU (the registry, tests).
namespace openfia::internal {
const Kernel* TileAvx512Bf16Kernel() { return &avx512bf16_target::kTile; }
const Kernel* DecodeAvx512Bf16Kernel() { return &avx512bf16_target::kDecode; }
const VectorOps* Avx512Bf16VectorOps() { return &avx512bf16_target::kOps; }
bool Avx512Bf16DotRunsItem(const Problem& p, const WorkItem& w) {
  return CpuRuns(Isa::kAvx512Bf16) && avx512bf16_target::DotItemOperandsOk(p) &&
         !p.full_quant && w.head_rows() > avx512bf16_target::kStreamRows;
}
}  // namespace openfia::internal
#else
namespace openfia::internal {
const Kernel* TileAvx512Bf16Kernel() { return nullptr; }
const Kernel* DecodeAvx512Bf16Kernel() { return nullptr; }
const VectorOps* Avx512Bf16VectorOps() { return nullptr; }
bool Avx512Bf16DotRunsItem(const Problem&, const WorkItem&) { return false; }
}  // namespace openfia::internal
#endif
