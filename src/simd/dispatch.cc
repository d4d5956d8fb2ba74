// openfia: run-time choice of the SIMD target (CPU features, capped by SetSimdCap/OPENFIA_SIMD).
#include <string>

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)  // Linux's bit (arch/arm64/include/uapi/asm/hwcap.h)
#endif
#endif

#include "common/check.h"
#include "common/runtime_internal.h"
#include "openfia/runtime.h"
#include "simd/simd.h"

namespace openfia::internal {
namespace {

// Targets in increasing order; a cap admits every target up to and including it. A target with no
// kernels of its own (avx512fp16 on x86, sve on AArch64) runs the best table below it.
// amx (AMX-TILE + AMX-BF16 tile matmuls for bf16 prefill, AVX-512 for everything else) comes last:
// only an explicit "amx" or "best" cap admits it.
#if defined(__aarch64__)
constexpr const char* kOrder[] = {"scalar", "neon", "neonbf16", "sve"};
constexpr int kNumTargets = 4;
// Names of the other architecture's targets: a cap naming one admits the portable target only.
constexpr const char* kForeign[] = {"avx2", "avx512", "avx512bf16", "avx512fp16", "amx"};
#else
constexpr const char* kOrder[] = {"scalar", "avx2", "avx512", "avx512bf16", "avx512fp16", "amx"};
constexpr int kNumTargets = 6;
constexpr const char* kForeign[] = {"neon", "neonbf16", "sve"};
#endif

bool CpuHas(int t) {
#if defined(__x86_64__) || defined(_M_X64)
  switch (t) {
    case 0: return true;
    case 1:  // the AVX2 table converts float16 with F16C too
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case 2:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case 3: return CpuHas(2) && __builtin_cpu_supports("avx512bf16");
    case 4: return CpuHas(3) && __builtin_cpu_supports("avx512fp16");
    case 5:
      return CpuHas(3) && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
  }
  return false;
#elif defined(__aarch64__)
  // Advanced SIMD is part of every AArch64 CPU; SVE has no table of its own.
  if (t == 2) return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
  return t <= 1;
#else
  return t == 0;
#endif
}

const KernelTable* Table(int t) {
#if defined(__aarch64__)
  switch (t) {
    case 0: return ScalarKernels();
    case 1: return NeonKernels();
    case 2: return NeonBf16Kernels();
    default: return nullptr;
  }
#else
  switch (t) {
    case 0: return ScalarKernels();
    case 1: return Avx2Kernels();
    case 2: return Avx512Kernels();
    case 3: return Avx512Bf16Kernels();
    case 5: return AmxKernels();  // null also when the OS refuses tile data
    default: return nullptr;
  }
#endif
}

int CapIndex() {
  const std::string cap = SimdCap();
  if (cap.empty() || cap == "best") return kNumTargets - 1;
  for (int t = 0; t < kNumTargets; ++t)
    if (cap == kOrder[t]) return t;
  // The other architecture's target names cap to scalar (a script written for one machine runs
  // on the other); anything else is a user error.
  bool foreign = false;
  for (const char* f : kForeign) foreign = foreign || cap == f;
  OPENFIA_CHECK(foreign, "OPENFIA_SIMD / SetSimdCap",
                "must be one of scalar, avx2, avx512, avx512bf16, avx512fp16, amx, neon, neonbf16, "
                "sve, best",
                cap);
  return 0;
}

}  // namespace

const KernelTable& ActiveKernels() {
  const int cap = CapIndex();
  for (int t = cap; t > 0; --t) {
    if (!CpuHas(t)) continue;  // first: a target's own code runs only on a CPU that has it
    if (const KernelTable* k = Table(t)) return *k;
  }
  return *ScalarKernels();
}

bool Bf16DotTiles() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool amd = __builtin_cpu_is("amd");
  return amd || SimdCapIsAvx512Bf16();
#elif defined(__aarch64__)
  // BFDOT does 8 multiply-adds per instruction where FMLA does 4, at the same issue rate on the
  // Arm cores that have it (Neoverse V1 / V2 / N2): only the neonbf16 table asks (not measured
  // here: no AArch64 hardware; tested under QEMU).
  return true;
#else
  return false;
#endif
}

const KernelTable* KernelsFor(const std::string& target) {
  for (int t = 0; t < kNumTargets; ++t) {
    if (target == kOrder[t]) return CpuHas(t) ? Table(t) : nullptr;
  }
  return nullptr;
}

}  // namespace openfia::internal

namespace openfia {
std::string SimdTarget() { return internal::ActiveKernels().name; }
}  // namespace openfia
