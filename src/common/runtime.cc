// openfia: process-wide runtime settings (implementation choice, threads, SIMD cap, forced
// kernel, NPU-strict mode). Each setting is validated where it is set: by its setter, or, for
// its environment variable, when the variables are read (once, at the first use of any
// setting).
#include "openfia/runtime.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "common/check.h"

namespace openfia {
namespace {

constexpr const char* kSimdCaps[] = {"scalar", "avx2",     "avx512", "avx512bf16", "avx512fp16",
                                     "amx",    "neon",     "neonbf16", "sve",      "best"};
constexpr const char* kSimdRule =
    "must be one of scalar, avx2, avx512, avx512bf16, avx512fp16, amx, neon, neonbf16, sve, best";
constexpr const char* kImplRule = "must be one of ref, reference, engine, auto";
constexpr const char* kStrictRule = "must be one of 0, 1, false, true";

bool IsSimdCap(const std::string& s) {
  return s.empty() || std::find(std::begin(kSimdCaps), std::end(kSimdCaps), s) != std::end(kSimdCaps);
}

std::string ThreadsRule() {
  return internal::Str("must be an integer in [1, ", kMaxNumThreads, "]");
}

// "3" -> 3; anything but plain decimal digits in [1, kMaxNumThreads] (a sign, a fraction,
// spaces, an overflow) -> 0.
int ParseThreads(const std::string& s) {
  if (s.empty() || s.size() > 9) return 0;
  int n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return 0;
    n = n * 10 + (c - '0');
  }
  return n >= 1 && n <= kMaxNumThreads ? n : 0;
}

std::once_flag g_env_once;
std::atomic<int> g_impl{static_cast<int>(Impl::kAuto)};
std::atomic<int> g_threads{0};
std::mutex g_simd_mu;
std::string g_simd_cap;  // empty: best available
std::atomic<bool> g_cap_bf16{false};  // g_simd_cap == "avx512bf16" (read per work item)
std::string g_kernel;  // guarded by g_simd_mu; empty: the kernel lists
std::atomic<bool> g_npu_strict{false};

// An environment variable whose value is not accepted: its raw value, kept (read-only after
// ReadEnv) for the error that every use of the setting raises until a setter replaces it.
struct BadEnv {
  std::atomic<bool> bad{false};
  std::string value;
};
BadEnv g_bad_impl, g_bad_threads, g_bad_simd, g_bad_strict;

void ThrowIfBad(const BadEnv& e, const char* var, const std::string& rule) {
  if (!e.bad.load(std::memory_order_acquire)) return;
  throw Error(ErrorCode::kInvalidArgument, var, rule, "\"" + e.value + "\"", "environment");
}

// Fork: the settings mutex is held across fork() so the child never inherits it locked by a
// thread that does not exist there.
void LockSettings() { g_simd_mu.lock(); }
void UnlockSettings() { g_simd_mu.unlock(); }

void ReadEnv() {
  pthread_atfork(LockSettings, UnlockSettings, UnlockSettings);
  // An empty variable counts as unset (VAR= in a shell).
  const auto str = [](const char* v) { return v ? std::string(v) : std::string(); };
  if (const std::string s = str(std::getenv("OPENFIA_IMPL")); !s.empty()) {
    if (s == "ref" || s == "reference") g_impl = static_cast<int>(Impl::kReference);
    else if (s == "engine") g_impl = static_cast<int>(Impl::kEngine);
    else if (s != "auto") g_bad_impl.value = s, g_bad_impl.bad = true;
  }
  if (const std::string s = str(std::getenv("OPENFIA_NUM_THREADS")); !s.empty()) {
    if (const int n = ParseThreads(s)) g_threads = n;
    else g_bad_threads.value = s, g_bad_threads.bad = true;
  }
  if (const std::string s = str(std::getenv("OPENFIA_SIMD")); !s.empty()) {
    if (IsSimdCap(s)) g_simd_cap = s;
    else g_bad_simd.value = s, g_bad_simd.bad = true;
  }
  if (const std::string s = str(std::getenv("OPENFIA_NPU_STRICT")); !s.empty()) {
    if (s == "1" || s == "true") g_npu_strict = true;
    else if (s != "0" && s != "false") g_bad_strict.value = s, g_bad_strict.bad = true;
  }
  g_cap_bf16 = g_simd_cap == "avx512bf16";
  g_kernel = str(std::getenv("OPENFIA_KERNEL"));
}

void EnsureEnv() { std::call_once(g_env_once, ReadEnv); }

}  // namespace

void SetImpl(Impl impl) {
  EnsureEnv();
  internal::OpScope scope("set_impl");
  OPENFIA_CHECK(impl == Impl::kAuto || impl == Impl::kReference || impl == Impl::kEngine, "impl",
                "must be Impl::kAuto, kReference or kEngine", static_cast<int>(impl));
  g_impl = static_cast<int>(impl);
  g_bad_impl.bad = false;
}
Impl GetImpl() {
  EnsureEnv();
  ThrowIfBad(g_bad_impl, "OPENFIA_IMPL", kImplRule);
  return static_cast<Impl>(g_impl.load());
}

void SetNumThreads(int n) {
  EnsureEnv();
  internal::OpScope scope("set_num_threads");
  OPENFIA_CHECK(n >= 1 && n <= kMaxNumThreads, "n", ThreadsRule(), n);
  g_threads = n;
  g_bad_threads.bad = false;
}
int GetNumThreads() {
  EnsureEnv();
  ThrowIfBad(g_bad_threads, "OPENFIA_NUM_THREADS", ThreadsRule());
  int n = g_threads.load();
  if (n > 0) return n;
  // Asked once: libstdc++ answers from get_nprocs(), which reads /sys on every call (~3 us
  // here); the engine asks several times per operator call (a 0.5 ms decode paid ~35 us).
  static const int hc = [] {
    const unsigned c = std::thread::hardware_concurrency();
    return std::clamp(static_cast<int>(c), 1, kMaxNumThreads);
  }();
  return hc;
}

void SetSimdCap(const std::string& target) {
  EnsureEnv();
  internal::OpScope scope("set_simd_cap");
  OPENFIA_CHECK(IsSimdCap(target), "target", kSimdRule, "\"", target, "\"");
  std::lock_guard<std::mutex> lk(g_simd_mu);
  g_simd_cap = target;
  g_cap_bf16 = target == "avx512bf16";
  g_bad_simd.bad = false;
}
std::string SimdCap() {
  EnsureEnv();
  ThrowIfBad(g_bad_simd, "OPENFIA_SIMD", kSimdRule);
  std::lock_guard<std::mutex> lk(g_simd_mu);
  return g_simd_cap;
}
std::vector<std::string> SimdCapNames() {
  return std::vector<std::string>(std::begin(kSimdCaps), std::end(kSimdCaps));
}

bool SimdCapIsAvx512Bf16() {
  EnsureEnv();
  return g_cap_bf16.load(std::memory_order_relaxed);
}

std::string KernelSetting() {
  EnsureEnv();
  std::lock_guard<std::mutex> lk(g_simd_mu);
  return g_kernel;
}
void SetKernelSetting(const std::string& name) {
  EnsureEnv();
  std::lock_guard<std::mutex> lk(g_simd_mu);
  g_kernel = name;
}

void SetNpuStrict(bool on) {
  EnsureEnv();
  g_npu_strict = on;
  g_bad_strict.bad = false;
}
bool GetNpuStrict() {
  EnsureEnv();
  ThrowIfBad(g_bad_strict, "OPENFIA_NPU_STRICT", kStrictRule);
  return g_npu_strict.load(std::memory_order_relaxed);
}

std::string Version() { return OPENFIA_VERSION; }

}  // namespace openfia
