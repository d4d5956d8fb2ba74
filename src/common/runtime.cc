// openfia: process-wide runtime settings (implementation choice, threads, SIMD cap, forced
// kernel).
#include "openfia/runtime.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "common/check.h"

namespace openfia {
namespace {

std::once_flag g_env_once;
std::atomic<int> g_impl{static_cast<int>(Impl::kAuto)};
std::atomic<int> g_threads{0};
std::mutex g_simd_mu;
std::string g_simd_cap;  // empty: best available
std::atomic<bool> g_cap_bf16{false};  // g_simd_cap == "avx512bf16" (read per work item)
std::string g_kernel;  // guarded by g_simd_mu; empty: the kernel lists

void ReadEnv() {
  if (const char* v = std::getenv("OPENFIA_IMPL")) {
    std::string s(v);
    if (s == "ref" || s == "reference") g_impl = static_cast<int>(Impl::kReference);
    else if (s == "engine") g_impl = static_cast<int>(Impl::kEngine);
  }
  if (const char* v = std::getenv("OPENFIA_NUM_THREADS")) {
    int n = std::atoi(v);
    if (n > 0) g_threads = n;
  }
  if (const char* v = std::getenv("OPENFIA_SIMD")) g_simd_cap = v;
  g_cap_bf16 = g_simd_cap == "avx512bf16";
  if (const char* v = std::getenv("OPENFIA_KERNEL")) g_kernel = v;
}

}  // namespace

void SetImpl(Impl impl) {
  std::call_once(g_env_once, ReadEnv);
  g_impl = static_cast<int>(impl);
}
Impl GetImpl() {
  std::call_once(g_env_once, ReadEnv);
  return static_cast<Impl>(g_impl.load());
}

void SetNumThreads(int n) {
  std::call_once(g_env_once, ReadEnv);
  OPENFIA_CHECK(n >= 1, "num_threads", "must be at least 1", n);
  g_threads = n;
}
int GetNumThreads() {
  std::call_once(g_env_once, ReadEnv);
  int n = g_threads.load();
  if (n > 0) return n;
  // Asked once: libstdc++ answers from get_nprocs(), which reads /sys on every call (~3 us
  // here); the engine asks several times per operator call (a 0.5 ms decode paid ~35 us).
  static const int hc = [] {
    const unsigned c = std::thread::hardware_concurrency();
    return c ? static_cast<int>(c) : 1;
  }();
  return hc;
}

void SetSimdCap(const std::string& target) {
  std::call_once(g_env_once, ReadEnv);
  std::lock_guard<std::mutex> lk(g_simd_mu);
  g_simd_cap = target;
  g_cap_bf16 = target == "avx512bf16";
}
std::string SimdCap() {
  std::call_once(g_env_once, ReadEnv);
  std::lock_guard<std::mutex> lk(g_simd_mu);
  return g_simd_cap;
}

bool SimdCapIsAvx512Bf16() {
  std::call_once(g_env_once, ReadEnv);
  return g_cap_bf16.load(std::memory_order_relaxed);
}

std::string KernelSetting() {
  std::call_once(g_env_once, ReadEnv);
  std::lock_guard<std::mutex> lk(g_simd_mu);
  return g_kernel;
}
void SetKernelSetting(const std::string& name) {
  std::call_once(g_env_once, ReadEnv);
  std::lock_guard<std::mutex> lk(g_simd_mu);
  g_kernel = name;
}

std::string Version() { return OPENFIA_VERSION; }

}  // namespace openfia
