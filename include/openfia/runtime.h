// openfia: process-wide runtime settings.
#pragma once

#include <string>
#include <vector>

#include "openfia/export.h"

namespace openfia {

// Every setting is checked where it is set: a setter given a value outside its accepted set throws
// openfia::Error naming the value and the accepted ones; an environment variable is read once, at
// the first use of any setting, and an invalid one makes every use of its setting throw that error
// (naming the variable) until the setting is set explicitly.

// Which implementation executes an operator.
enum class Impl {
  kAuto,       // the fast engine where it supports the call, else the reference
  kReference,  // the fp64 reference (also forced by the environment variable OPENFIA_IMPL=ref)
  kEngine,     // the fast engine; a call it does not support is an error naming why
};

OPENFIA_API void SetImpl(Impl impl);
OPENFIA_API Impl GetImpl();  // honours OPENFIA_IMPL=ref|reference|engine|auto at first use

// Worker threads used by the engine: 1..kMaxNumThreads (default: OPENFIA_NUM_THREADS, else the
// hardware concurrency capped at kMaxNumThreads). Results do not depend on this number. A count
// the system cannot start (a process thread limit) fails the next multi-threaded call with
// ErrorCode::kResourceExhausted naming the count.
inline constexpr int kMaxNumThreads = 1024;
OPENFIA_API void SetNumThreads(int n);
OPENFIA_API int GetNumThreads();

// Highest SIMD target the engine may use: one of SimdCapNames() ("scalar", "avx2", "avx512",
// "avx512bf16", "avx512fp16", "amx", "neon", "neonbf16", "sve", "best"; another architecture's
// names cap to scalar; "" = "best"). Also set by OPENFIA_SIMD. The default is the best the CPU
// supports.
OPENFIA_API void SetSimdCap(const std::string& target);
OPENFIA_API std::vector<std::string> SimdCapNames();
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

// NPU-strict mode (default off): openfia lifts limits that exist only because of the NPU's
// hardware (any D, any block_size, head ratios over 64, no B/N/S limits, float32, any cache form
// with any layout, ...; each operator's page lists them under its relaxations). With strict mode
// on, every such limit is enforced with the NPU's rule: a call the NPU would reject throws
// openfia::Error (ErrorCode::kUnsupported) naming the argument, the NPU's rule with the product
// line it applies to, and the value. Also set by OPENFIA_NPU_STRICT=0|1|false|true.
OPENFIA_API void SetNpuStrict(bool on);
OPENFIA_API bool GetNpuStrict();

OPENFIA_API std::string Version();

}  // namespace openfia
