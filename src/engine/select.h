// openfia internal: which kernel runs each work item (the one place that decides it).
//
// The active instruction-set target is the best one this build compiled and this CPU runs,
// capped by SetSimdCap / OPENFIA_SIMD; its kernel list (engine/kernel.h KernelList) is asked in
// priority order and the first kernel that supports an item runs it. SetKernel / OPENFIA_KERNEL
// force one kernel instead (any compiled kernel whose instructions the CPU runs, whatever the
// cap): then every item must be one it supports, else the call fails naming the reason.
#pragma once

#include <string>
#include <vector>

#include "engine/kernel.h"

namespace openfia::internal {

// The target in effect (throws openfia::Error for an unknown cap).
Isa ActiveIsa();
const char* IsaName(Isa isa);
// Whether target `isa` is compiled into this build and this CPU runs it.
bool IsaRuns(Isa isa);
// The runner's vector helpers of the target in effect.
const VectorOps& ActiveVectorOps();
// A compiled kernel by name (nullptr when none has it).
const Kernel* FindKernel(const std::string& name);

// The kernels one call may use: the active list filtered by each kernel's problem-level check,
// or the forced kernel.
class KernelChoice {
 public:
  explicit KernelChoice(const Problem& p);
  // nullptr when the engine runs p, else why not: the portable kernel's reason, or the forced
  // kernel's.
  const char* why_not() const { return why_not_; }
  const Kernel* forced() const { return forced_; }
  // The kernel that runs item w (p must be runnable: why_not() == nullptr). Throws openfia::Error
  // (ErrorCode::kUnsupported, argument "kernel") when a forced kernel does not support w.
  const Kernel& For(const WorkItem& w) const;

 private:
  const Problem& p_;
  std::vector<const Kernel*> candidates_;
  const Kernel* forced_ = nullptr;
  const char* why_not_ = nullptr;
};

}  // namespace openfia::internal
