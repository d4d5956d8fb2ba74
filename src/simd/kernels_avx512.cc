// openfia: the AVX-512 (F, BW, VL, DQ) target: 16 f32 lanes, F16C conversions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "common/problem.h"
#include "engine/plan.h"
#include "simd/scalar_convert.h"
#include "simd/simd.h"

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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

namespace openfia::internal::avx512_target {

#include "simd/vec_avx512-inl.h"

struct V : Avx512Vec {};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#include "simd/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#include "simd/decode_tile-inl.h"
#include "simd/decode_avx512-inl.h"
#include "simd/rows-inl.h"

// Decode items go to the AVX2 decode kernel when it runs them, everything else to the loop.
void Attend(const Problem& p, const WorkItem& w, EngineScratch& sc, const RowStates& out) {
  if (Avx2FullQuantRun(p, w, sc, out)) return;  // int8 full quantization (VPMADDWD)
  if (Bf16DecodeRun(p, w, sc, out)) return;  // bf16 queries: fp32 FMA products
  if (Avx2DecodeRun(p, w, sc, out)) return;
  AttendImpl(p, w, sc, out);
}

const KernelTable kTable = {"avx512", &ExpArray, &ExpPArray, &Attend, &ScaleRow, &Axpy};

}  // namespace openfia::internal::avx512_target

namespace openfia::internal {
const KernelTable* Avx512Kernels() { return &avx512_target::kTable; }
}  // namespace openfia::internal
#pragma GCC pop_options
#else
namespace openfia::internal {
const KernelTable* Avx512Kernels() { return nullptr; }
}  // namespace openfia::internal
#endif
