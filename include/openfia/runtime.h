// openfia: process-wide runtime settings.
#pragma once

#include <string>
#include <vector>

#include "openfia/export.h"

namespace openfia {

// Which implementation executes an operator.
enum class Impl {
  kAuto,       // the fast engine where it supports the call, else the reference
  kReference,  // the fp64 reference (also forced by the environment variable OPENFIA_IMPL=ref)
  kEngine,     // the fast engine; a call it does not support is an error naming why
};

OPENFIA_API void SetImpl(Impl impl);
OPENFIA_API Impl GetImpl();  // honours OPENFIA_IMPL=ref|engine|auto at first use

// Worker threads used by the engine (default: OPENFIA_NUM_THREADS or the hardware concurrency).
// Results do not depend on this number.
OPENFIA_API void SetNumThreads(int n);
OPENFIA_API int GetNumThreads();

// Highest SIMD target the engine may use: "scalar", "avx2", "avx512", "avx512bf16", "neon", ...
// Also set by OPENFIA_SIMD. The default is the best the CPU supports.
OPENFIA_API void SetSimdCap(const std::string& target);
OPENFIA_API std::string SimdTarget();  // the target in effect

// Forces one attention kernel for every work item instead of the target's kernel list ("" = the
// list, the default). Also set by OPENFIA_KERNEL. The name must be one of AvailableKernels(); a
// call with an item the kernel does not support then fails with an error naming the reason (for
// tests and measurements: every kernel can be run against the reference on its own).
OPENFIA_API void SetKernel(const std::string& name);
OPENFIA_API std::string GetKernel();
// The kernels compiled into this build whose instructions this CPU runs, e.g. "portable",
// "tile_avx2", "decode_avx512bf16".
OPENFIA_API std::vector<std::string> AvailableKernels();

OPENFIA_API std::string Version();

}  // namespace openfia
