// openfia internal: the kernels each per-ISA file defines, for the kernel lists
// (kernel_lists.cc). A getter of a target this build did not compile returns nullptr.
#pragma once

#include "engine/kernel.h"

namespace openfia::internal {

// scalar/kernels_scalar.cc: the portable kernel (the generic tile loop and the two-pass
// full-quantization kernel on scalar floats) runs everything the engine supports.
const Kernel* PortableKernel();
const VectorOps* ScalarVectorOps();

// avx2/kernels_avx2.cc
const Kernel* TileAvx2Kernel();
const Kernel* DecodeAvx2Kernel();
const Kernel* FullQuantAvx2Kernel();
const VectorOps* Avx2VectorOps();
// y[i] = fp16(expf(x[i])) as the AVX2 full-quantization kernel computes it (x <= 0, -inf or
// NaN); false when AVX2 is not compiled or the CPU lacks it. For tests.
bool Avx2FullQuantExpF16(const float* x, float* y, int64_t n);

// avx512/kernels_avx512.cc, avx512/kernels_avx512bf16.cc
const Kernel* TileAvx512Kernel();
const Kernel* DecodeAvx512Kernel();
const VectorOps* Avx512VectorOps();
const Kernel* TileAvx512Bf16Kernel();
const Kernel* DecodeAvx512Bf16Kernel();
const VectorOps* Avx512Bf16VectorOps();
// Whether tile_avx512bf16 runs the packed tiles of item w of p as dot tiles (its operands are
// bf16 values and the item is never streamed; false when the CPU lacks the target). The loop
// still keeps fp32 for a query with a subnormal or non-finite value and for tiles whose V holds
// Inf / NaN. For tests that must prove dot tiles ran.
bool Avx512Bf16DotRunsItem(const Problem& p, const WorkItem& w);

// amx/kernels_amx.cc
const Kernel* AmxTileDequantKernel();
const Kernel* AmxSasKernel();
const Kernel* AmxPrefillKernel();
const Kernel* AmxTileKernel();
// Whether Linux grants this process AMX tile data (asked once; without it the first tile
// instruction faults). False where AMX is not compiled.
bool AmxTileDataGranted();

// neon/kernels_neon.cc, neon/kernels_neonbf16.cc
const Kernel* TileNeonKernel();
const VectorOps* NeonVectorOps();
const Kernel* TileNeonBf16Kernel();
const VectorOps* NeonBf16VectorOps();
// Whether tile_neonbf16 runs the packed tiles of item w of p as BFDOT dot tiles. For tests.
bool NeonBf16DotRunsItem(const Problem& p, const WorkItem& w);

}  // namespace openfia::internal
