// openfia: process-wide runtime settings.
#pragma once

#include <string>

namespace openfia {

// Which implementation executes an operator.
enum class Impl {
  kAuto,       // the fast engine where it supports the call, else the reference
  kReference,  // the fp64 reference (also forced by the environment variable OPENFIA_IMPL=ref)
  kEngine,     // the fast engine; a call it does not support is an error naming why
};

void SetImpl(Impl impl);
Impl GetImpl();  // honours OPENFIA_IMPL=ref|engine|auto at first use

// Worker threads used by the engine (default: OPENFIA_NUM_THREADS or the hardware concurrency).
// Results do not depend on this number.
void SetNumThreads(int n);
int GetNumThreads();

// Highest SIMD target the engine may use: "scalar", "avx2", "avx512", "avx512bf16", "neon", ...
// Also set by OPENFIA_SIMD. The default is the best the CPU supports.
void SetSimdCap(const std::string& target);
std::string SimdTarget();  // the target in effect

std::string Version();

}  // namespace openfia
