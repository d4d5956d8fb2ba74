// openfia: the AVX512-BF16 target: the AVX-512 table's loop with dot tiles, whose Q K^T and P V
// run as VDPBF16PS over bf16 pairs (attend_dot-inl.h) for items whose operands are bf16 values
// (bf16 queries over bf16 or antiquant caches); everything else as on the AVX-512 table.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>

#include "common/problem.h"
#include "engine/plan.h"
#include "simd/scalar_convert.h"
#include "simd/simd.h"

#if defined(OPENFIA_HAVE_AVX512BF16)
// GCC 12 flags the _mm512_undefined_* idiom inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Lambdas taking vector arguments inside templates get this ABI note although they are inlined.
#pragma GCC diagnostic ignored "-Wpsabi"
#include <immintrin.h>
// The target's instructions apply from here on only (kernels_avx512.cc says why).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,f16c")

namespace openfia::internal::avx512bf16_target {

#include "simd/vec_avx512-inl.h"

struct V : Avx512Vec {};

#define OPENFIA_ATTEND_ROWS 6
#define OPENFIA_ATTEND_COLS 4
#define OPENFIA_ATTEND_BF16DOT 1
#include "simd/attend-inl.h"
#undef OPENFIA_ATTEND_ROWS
#undef OPENFIA_ATTEND_COLS
#undef OPENFIA_ATTEND_BF16DOT
#include "simd/decode_tile-inl.h"
#define OPENFIA_DECODE_BF16DOT 1
#include "simd/decode_avx512-inl.h"
#undef OPENFIA_DECODE_BF16DOT
#include "simd/rows-inl.h"

// Decode items go to this target's bf16 decode kernel, else to the AVX2 decode kernel (int8 /
// int4 K or V) when they run them, everything else to the loop.
void Attend(const Problem& p, const WorkItem& w, EngineScratch& sc, const RowStates& out) {
  if (Avx2FullQuantRun(p, w, sc, out)) return;  // int8 full quantization (VPMADDWD)
  if (Bf16DecodeRun(p, w, sc, out)) return;
  if (Avx2DecodeRun(p, w, sc, out)) return;
  AttendImpl(p, w, sc, out);
}

const KernelTable kTable = {"avx512bf16", &ExpArray, &ExpPArray, &Attend, &ScaleRow, &Axpy};

}  // namespace openfia::internal::avx512bf16_target
#pragma GCC pop_options

// Baseline code: asked on any CPU (dispatch, tests).
namespace openfia::internal {
const KernelTable* Avx512Bf16Kernels() { return &avx512bf16_target::kTable; }
bool Avx512Bf16DotRunsItem(const Problem& p, const WorkItem& w) {
  return KernelsFor("avx512bf16") != nullptr && avx512bf16_target::DotItemOperandsOk(p) &&
         !p.full_quant && w.head_rows() > avx512bf16_target::kStreamRows;
}
bool Avx512Bf16DecodeRunsItem(const Problem& p, const WorkItem& w) {
  return KernelsFor("avx512bf16") != nullptr && avx512bf16_target::Bf16DecodeCan(p, w);
}
}  // namespace openfia::internal
#else
namespace openfia::internal {
const KernelTable* Avx512Bf16Kernels() { return nullptr; }
bool Avx512Bf16DotRunsItem(const Problem&, const WorkItem&) { return false; }
bool Avx512Bf16DecodeRunsItem(const Problem&, const WorkItem&) { return false; }
}  // namespace openfia::internal
#endif
