// openfia: run-time choice of the instruction-set target and of the kernel of each work item.
#include "engine/select.h"

#include <string>

#include "common/check.h"
#include "common/runtime_internal.h"
#include "openfia/runtime.h"

namespace openfia::internal {
namespace {

// Targets in increasing order, by their names; a cap admits every target up to and including it.
// A target with no kernels of its own (avx512fp16 on x86, sve on AArch64) caps like the best
// table below it. amx comes last: only an explicit "amx" or "best" cap admits it.
struct Target {
  const char* name;
  Isa isa;
};
#if defined(__aarch64__)
constexpr Target kOrder[] = {{"scalar", Isa::kScalar}, {"neon", Isa::kNeon},
                             {"neonbf16", Isa::kNeonBf16}, {"sve", Isa::kNeonBf16}};
// Names of the other architecture's targets: a cap naming one admits the portable target only
// (a script written for one machine runs on the other).
constexpr const char* kForeign[] = {"avx2", "avx512", "avx512bf16", "avx512fp16", "amx"};
#else
constexpr Target kOrder[] = {{"scalar", Isa::kScalar},         {"avx2", Isa::kAvx2},
                             {"avx512", Isa::kAvx512},         {"avx512bf16", Isa::kAvx512Bf16},
                             {"avx512fp16", Isa::kAvx512Bf16}, {"amx", Isa::kAmx}};
constexpr const char* kForeign[] = {"neon", "neonbf16", "sve"};
#endif
constexpr int kNumTargets = static_cast<int>(sizeof(kOrder) / sizeof(kOrder[0]));

int CapIndex() {
  const std::string cap = SimdCap();
  if (cap.empty() || cap == "best") return kNumTargets - 1;
  for (int t = 0; t < kNumTargets; ++t)
    if (cap == kOrder[t].name) return t;
  bool foreign = false;
  for (const char* f : kForeign) foreign = foreign || cap == f;
  OPENFIA_CHECK(foreign, "OPENFIA_SIMD / SetSimdCap",
                "must be one of scalar, avx2, avx512, avx512bf16, avx512fp16, amx, neon, neonbf16, "
                "sve, best",
                cap);
  return 0;
}

bool Compiled(Isa isa) {
  int n = 0;
  KernelList(isa, &n);
  // Every list ends with the portable kernel: a target has kernels of its own when it lists more
  // (the scalar target is the portable kernel itself).
  return isa == Isa::kScalar || n > 1;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
    case Isa::kAmx: return "amx";
    case Isa::kNeon: return "neon";
    case Isa::kNeonBf16: return "neonbf16";
  }
  return "?";
}

bool IsaRuns(Isa isa) { return Compiled(isa) && CpuRuns(isa); }

Isa ActiveIsa() {
  for (int t = CapIndex(); t > 0; --t) {
    // The CPU first: a target's own code runs only on a CPU that has it.
    if (CpuRuns(kOrder[t].isa) && Compiled(kOrder[t].isa)) return kOrder[t].isa;
  }
  return Isa::kScalar;
}

const VectorOps& ActiveVectorOps() { return *VectorOpsOf(ActiveIsa()); }

const Kernel* FindKernel(const std::string& name) {
  int n = 0;
  const Kernel* const* all = AllKernels(&n);
  for (int i = 0; i < n; ++i)
    if (name == all[i]->name) return all[i];
  return nullptr;
}

// VDPBF16PS measured against fp32 FMA with the benchmark's machine-limits part (GFLOP/s per core):
// AMD Zen 4 229-232 against 113-116 (dot tiles: a causal 512 x 4096 prefill 1.7x faster); an
// Intel family 6 model 207 (no AMX exposed) 77-86 against 166-175 (dot tiles 1.5x slower). So AMD
// CPUs use them, Intel CPUs do not, and a cap naming avx512bf16 itself turns them on anywhere.
bool Bf16DotTiles() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool amd = __builtin_cpu_is("amd");
  return amd || SimdCapIsAvx512Bf16();
#elif defined(__aarch64__)
  // BFDOT does 8 multiply-adds per instruction where FMLA does 4, at the same issue rate on the
  // Arm cores that have it (Neoverse V1 / V2 / N2).
  return true;
#else
  return false;
#endif
}

KernelChoice::KernelChoice(const Problem& p) : p_(p) {
  const std::string name = KernelSetting();
  if (!name.empty()) {
    forced_ = FindKernel(name);
    OPENFIA_CHECK(forced_ != nullptr, "OPENFIA_KERNEL / SetKernel",
                  "must name a kernel compiled into this build (openfia::AvailableKernels)", name);
    OPENFIA_CHECK(CpuRuns(forced_->isa), "OPENFIA_KERNEL / SetKernel",
                  Str("names a kernel whose instructions (", IsaName(forced_->isa),
                      ") this CPU does not run"),
                  name);
    why_not_ = forced_->supports(p, nullptr);
    return;
  }
  int n = 0;
  const Kernel* const* list = KernelList(ActiveIsa(), &n);
  // The portable kernel (last) decides whether the engine runs p at all.
  why_not_ = list[n - 1]->supports(p, nullptr);
  if (why_not_ != nullptr) return;
  for (int i = 0; i < n; ++i)
    if (list[i]->supports(p, nullptr) == nullptr) candidates_.push_back(list[i]);
}

const Kernel& KernelChoice::For(const WorkItem& w) const {
  if (forced_ != nullptr) {
    const char* why = forced_->supports(p_, &w);
    if (why != nullptr)
      Fail(ErrorCode::kUnsupported, "kernel",
           Str("the forced kernel ", forced_->name, " cannot run this call"), why);
    return *forced_;
  }
  for (const Kernel* k : candidates_)
    if (k->supports(p_, &w) == nullptr) return *k;
  // Unreachable for a plan of p: the portable kernel runs every item of a problem it accepts.
  Fail(ErrorCode::kInternal, "kernel", "no kernel of the list runs this work item",
       candidates_.back()->supports(p_, &w));
}

}  // namespace openfia::internal

namespace openfia {
std::string SimdTarget() { return internal::IsaName(internal::ActiveIsa()); }

void SetKernel(const std::string& name) {
  if (!name.empty()) {
    const internal::Kernel* k = internal::FindKernel(name);
    OPENFIA_CHECK(k != nullptr, "kernel",
                  "must name a kernel compiled into this build (openfia::AvailableKernels)", name);
    OPENFIA_CHECK(internal::CpuRuns(k->isa), "kernel",
                  internal::Str("names a kernel whose instructions (", internal::IsaName(k->isa),
                                ") this CPU does not run"),
                  name);
  }
  SetKernelSetting(name);
}
std::string GetKernel() { return KernelSetting(); }

std::vector<std::string> AvailableKernels() {
  std::vector<std::string> names;
  int n = 0;
  const internal::Kernel* const* all = internal::AllKernels(&n);
  for (int i = 0; i < n; ++i)
    if (internal::CpuRuns(all[i]->isa)) names.push_back(all[i]->name);
  return names;
}
}  // namespace openfia
