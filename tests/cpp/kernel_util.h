// openfia tests: looking up targets and kernels of this build and CPU (engine/select.h,
// engine/kernels/registry.h), and whether a named kernel takes a work item.
#pragma once

#include <string>
#include <vector>

#include "engine/kernel.h"
#include "engine/kernels/registry.h"
#include "engine/select.h"

namespace openfia::internal::testing {

inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2,     Isa::kAvx512, Isa::kAvx512Bf16,
                                   Isa::kAmx,    Isa::kNeon,     Isa::kNeonBf16};

// The vector helpers of the target named `name` when this build has it and the CPU runs it.
inline const VectorOps* TargetOps(const std::string& name) {
  for (Isa isa : kAllIsas)
    if (name == IsaName(isa) && IsaRuns(isa)) return VectorOpsOf(isa);
  return nullptr;
}

// The compiled kernels whose instructions this CPU runs.
inline std::vector<const Kernel*> RunnableKernels() {
  std::vector<const Kernel*> out;
  int n = 0;
  const Kernel* const* all = AllKernels(&n);
  for (int i = 0; i < n; ++i)
    if (CpuRuns(all[i]->isa)) out.push_back(all[i]);
  return out;
}

// Whether kernel `name` exists here, runs on this CPU and supports item w of p.
inline bool KernelTakes(const char* name, const Problem& p, const WorkItem& w) {
  const Kernel* k = FindKernel(name);
  return k != nullptr && CpuRuns(k->isa) && k->supports(p, nullptr) == nullptr &&
         k->supports(p, &w) == nullptr;
}

inline bool Avx2DecodeRunsItem(const Problem& p, const WorkItem& w) {
  return KernelTakes("decode_avx2", p, w);
}
inline bool Avx512Bf16DecodeRunsItem(const Problem& p, const WorkItem& w) {
  return KernelTakes("decode_avx512bf16", p, w);
}
inline bool AmxPrefillRunsItem(const Problem& p, const WorkItem& w) {
  return KernelTakes("amx_prefill", p, w);
}
// Any AMX tile kernel (per-tile dequant, SparseAttnSharedkv, prefill, generic).
inline bool AmxRunsItem(const Problem& p, const WorkItem& w) {
  return KernelTakes("amx_tile_dequant", p, w) || KernelTakes("amx_sas", p, w) ||
         KernelTakes("amx_tile", p, w);
}

}  // namespace openfia::internal::testing
