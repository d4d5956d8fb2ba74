// openfia-bench: machine limits (see machine_limits.h for the method).
#include "machine_limits.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define OPENFIA_BENCH_X86 1
#endif

namespace openfia::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Results are folded into this so that no measured loop is dead code.
volatile double g_sink = 0;

// ---- CPU features ----

bool CpuHasAvx512() {
#if OPENFIA_BENCH_X86
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
bool CpuHasAvx2Fma() {
#if OPENFIA_BENCH_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
bool CpuHasAvx512Bf16() {
#if OPENFIA_BENCH_X86
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// ---- large, huge-page-backed, owner-touched buffers ----

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

Buffer AllocBig(size_t bytes) {
  constexpr size_t kAlign = size_t{2} << 20;  // 2 MiB: lets THP back the buffer with huge pages
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) return nullptr;
  madvise(p, rounded, MADV_HUGEPAGE);
  return Buffer(static_cast<float*>(p));
}

// Runs body(tid) on `n` threads, `reps` times; returns each repetition's wall time, measured by
// thread 0 between two barriers so that it covers the slowest thread.
std::vector<double> TimedParallel(int n, int reps, const std::function<void(int, int)>& body) {
  std::vector<double> times(reps);
  std::barrier sync(n);
  auto worker = [&](int tid) {
    for (int r = 0; r < reps; ++r) {
      sync.arrive_and_wait();
      const auto t0 = Clock::now();
      body(tid, n);
      sync.arrive_and_wait();
      if (tid == 0) times[r] = Seconds(t0, Clock::now());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  return times;
}

// First-touch: each thread writes the slice it will later read, so its pages are local to it.
void ParallelFill(float* p, size_t n_floats, int threads) {
  TimedParallel(threads, 1, [&](int tid, int nt) {
    const size_t chunk = n_floats / nt;
    float* s = p + tid * chunk;
    const size_t len = (tid == nt - 1) ? n_floats - tid * chunk : chunk;
    for (size_t i = 0; i < len; ++i) s[i] = 1.0f + 1e-7f * static_cast<float>(i & 1023);
  });
}

// ---- streaming read kernels: n floats, n % 128 == 0, p 64-byte aligned ----

#if OPENFIA_BENCH_X86
// (_mm512_reduce_add_ps trips a false -Wuninitialized in GCC 12's headers.)
__attribute__((target("avx512f"))) double HorizontalSum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  double s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx512f"))) double ReadSumAvx512(const float* p, size_t n) {
  // Eight independent accumulators: one add chain per 64-byte line in flight keeps the adds off
  // the critical path, so the loads (the thing measured) are the only bound.
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64));
    a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96));
    a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
  }
  a0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  a4 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
  return HorizontalSum(_mm512_add_ps(a0, a4));
}

__attribute__((target("avx2"))) double ReadSumAvx2(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += 64) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    a4 = _mm256_add_ps(a4, _mm256_load_ps(p + i + 32));
    a5 = _mm256_add_ps(a5, _mm256_load_ps(p + i + 40));
    a6 = _mm256_add_ps(a6, _mm256_load_ps(p + i + 48));
    a7 = _mm256_add_ps(a7, _mm256_load_ps(p + i + 56));
  }
  a0 = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  a4 = _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a4));
  double s = 0;
  for (float v : lanes) s += v;
  return s;
}
#endif

// Integer words: the compiler may vectorise this freely (no fp reassociation needed).
double ReadSumPortable(const float* p, size_t n) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n / 2; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  return static_cast<double>(s0 ^ s1 ^ s2 ^ s3);
}

using ReadFn = double (*)(const float*, size_t);

ReadFn PickRead(std::string* isa) {
#if OPENFIA_BENCH_X86
  if (CpuHasAvx512()) {
    if (isa) *isa = "avx512";
    return ReadSumAvx512;
  }
  if (CpuHasAvx2Fma()) {
    if (isa) *isa = "avx2";
    return ReadSumAvx2;
  }
#endif
  if (isa) *isa = "portable";
  return ReadSumPortable;
}

// ---- throughput kernels: 16 independent accumulator chains, registers only ----
// 16 chains exceed latency (4-6 cycles) x issue width (1-2 per cycle) of FMA and dot units on
// every current x86 core, and fit the 32 zmm (or 16 ymm, with the two sources) registers.

#if OPENFIA_BENCH_X86
#define OPENFIA_BENCH_REP16(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

__attribute__((target("avx512f"))) double FmaLoopAvx512(int64_t iters) {
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 c##i = _mm512_set1_ps(static_cast<float>(i));
  OPENFIA_BENCH_REP16(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm512_fmadd_ps(a, b, c##i);
    OPENFIA_BENCH_REP16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
  OPENFIA_BENCH_REP16(SUM)
#undef SUM
  return HorizontalSum(s);
}

// 12 chains: ymm has 16 registers and two hold the sources.
__attribute__((target("avx2,fma"))) double FmaLoopAvx2(int64_t iters) {
  const __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-7f);
  __m256 c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) c[i] = _mm256_fmadd_ps(a, b, c[i]);
  }
  alignas(32) float lanes[8];
  __m256 s = c[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, c[i]);
  _mm256_store_ps(lanes, s);
  double r = 0;
  for (float v : lanes) r += v;
  return r;
}

__attribute__((target("avx512f,avx512bf16"))) double Bf16DotLoop(int64_t iters) {
  // Pairs (1.0, 1.0) and (0.5, 0.5) in bf16: every lane adds 1.0 per instruction, stays normal.
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3f003f00);
#define DECL(i) __m512 c##i = _mm512_set1_ps(static_cast<float>(i));
  OPENFIA_BENCH_REP16(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
    OPENFIA_BENCH_REP16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
  OPENFIA_BENCH_REP16(SUM)
#undef SUM
  return HorizontalSum(s);
}
#endif

#if OPENFIA_BENCH_X86 && defined(__linux__)
// AMX-BF16 (tdpbf16ps): not what the targets are measured against (they use vdpbf16ps),
// but PyTorch's oneDNN kernels use it where present, so it is reported as the CPU's real bf16
// matrix peak. Linux hands out the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM).
bool AmxUsable() {
  if (!__builtin_cpu_supports("amx-bf16") || !__builtin_cpu_supports("amx-tile")) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Tile configuration (palette 1): tiles 0-3 accumulators (16 x 16 fp32), 4-5 A (16 x 32 bf16),
// 6-7 B (16 pairs-rows x 16 columns of bf16 pairs); 64 bytes per row everywhere.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"))) double AmxLoop(int64_t iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) static uint16_t ones[16 * 32];
  for (auto& v : ones) v = 0x3f80;  // bf16 1.0
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t it = 0; it < iters; ++it) {
    // Four independent accumulators: each tdpbf16ps has a long latency.
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) static thread_local float c[16 * 16];
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

double FmaLoopPortable(int64_t iters) {
  float c[16];
  for (int i = 0; i < 16; ++i) c[i] = static_cast<float>(i);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) c[i] = std::fma(1.0f, 1e-7f, c[i]);
  double r = 0;
  for (float v : c) r += v;
  return r;
}

struct Throughput {
  double (*loop)(int64_t) = nullptr;
  double flop_per_iter = 0;  // FLOPs one iteration of the loop performs
};

Throughput PickFma(std::string* isa) {
#if OPENFIA_BENCH_X86
  if (CpuHasAvx512()) {
    *isa = "avx512f (zmm)";
    return {FmaLoopAvx512, 16 * 16 * 2.0};
  }
  if (CpuHasAvx2Fma()) {
    *isa = "avx2+fma (ymm)";
    return {FmaLoopAvx2, 12 * 8 * 2.0};
  }
#endif
  *isa = "portable";
  return {FmaLoopPortable, 16 * 2.0};
}

// Best GFLOP/s of `reps` repetitions on `threads` threads, each repetition sized from a probe
// to last about `rep_s` seconds.
double MeasureThroughput(const Throughput& k, int threads, double rep_s = 0.04, int reps = 9) {
  int64_t iters = 1 << 16;
  for (;;) {  // probe until a run is long enough to time reliably
    const auto t0 = Clock::now();
    g_sink = g_sink + k.loop(iters);
    const double dt = Seconds(t0, Clock::now());
    if (dt > 0.005) {
      iters = std::max<int64_t>(1, static_cast<int64_t>(iters * rep_s / dt));
      break;
    }
    iters *= 4;
  }
  std::vector<double> sums(threads);
  const auto times = TimedParallel(threads, reps, [&](int tid, int) { sums[tid] += k.loop(iters); });
  for (double s : sums) g_sink = g_sink + s;
  const double best = *std::min_element(times.begin(), times.end());
  return 1e-9 * k.flop_per_iter * static_cast<double>(iters) * threads / best;
}

size_t LastLevelCacheBytes() {
  for (int name : {_SC_LEVEL4_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long v = sysconf(name);
    if (v > 0) return static_cast<size_t>(v);
  }
  return 0;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) {
        std::string v = line.substr(c + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "unknown";
}

size_t StatusField(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, klen, key) == 0 && line.size() > klen && line[klen] == ':')
      return static_cast<size_t>(std::strtoull(line.c_str() + klen + 1, nullptr, 10)) * 1024;
  }
  return 0;
}

// CPU time (in clock ticks) used by the whole machine and by this process, from /proc. Their
// difference over an interval says how busy other processes kept the CPUs: the limits are only as
// good as the machine was quiet.
struct CpuTicks {
  long long machine = 0, self = 0;
};
CpuTicks ReadCpuTicks() {
  CpuTicks t;
  std::ifstream stat("/proc/stat");
  std::string cpu;
  long long v[8] = {};
  if (stat >> cpu && cpu == "cpu") {
    for (auto& x : v) stat >> x;
    t.machine = v[0] + v[1] + v[2] + v[5] + v[6];  // user nice system irq softirq
  }
  std::ifstream self("/proc/self/stat");
  std::string line;
  std::getline(self, line);
  const auto close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 0; i < 11 && rest >> field; ++i) {
    }
    long long ut = 0, st = 0;
    rest >> ut >> st;  // fields 14 and 15: utime, stime
    t.self = ut + st;
  }
  return t;
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

}  // namespace

// n threads can always do what one does: on a shared machine the all-thread number can come out
// below the single-thread one when another process takes a core.
double MachineLimits::ReadBandwidthGBs(int n) const {
  const double all = std::max(read_bw_all_gbs, read_bw_1t_gbs);
  if (n >= threads) return all;
  if (n <= 1) return read_bw_1t_gbs;
  return std::min(read_bw_1t_gbs * n, all);
}

// Compute peaks scale with cores by construction (each core has its own units); the per-core
// number is the robust one on a shared machine, where a second thread may be time-sliced.
double MachineLimits::Bf16DotGflops(int n) const {
  return has_bf16_dot ? bf16_dot_gflops_core * std::max(n, 1) : 0;
}

double MachineLimits::FmaGflops(int n) const { return fma_fp32_gflops_core * std::max(n, 1); }

// The faster of the two bf16 products: on the Intel VM of session 12 vdpbf16ps ran at half the
// FMA's rate (the engine multiplies with FMAs there, simd.h Bf16DotTiles).
double MachineLimits::Bf16PeakGflops(int n) const {
  return has_bf16_dot ? std::max(Bf16DotGflops(n), FmaGflops(n)) : FmaGflops(n);
}

const char* MachineLimits::Bf16PeakName() const {
  if (!has_bf16_dot) return "fp32 FMA (no AVX512-BF16)";
  return bf16_dot_gflops_core >= fma_fp32_gflops_core ? "vdpbf16ps"
                                                      : "fp32 FMA (faster than vdpbf16ps here)";
}

namespace {

// Best streaming-read rate over `buf` (n floats, n % (128 * threads) == 0) on `threads` threads.
double ReadBandwidthOver(const float* buf, size_t n, int threads, double budget_s) {
  const ReadFn read = PickRead(nullptr);
  auto pass = [&](int tid, int nt) {
    const size_t chunk = n / nt;
    g_sink = g_sink + read(buf + tid * chunk, chunk);
  };
  // One untimed pass settles TLBs and clocks; its time sizes the repetition count.
  const double first = TimedParallel(threads, 1, pass)[0];
  const int reps = std::clamp(static_cast<int>(budget_s / std::max(first, 1e-6)), 3, 20);
  const auto times = TimedParallel(threads, reps, pass);
  const double best = *std::min_element(times.begin(), times.end());
  return 1e-9 * static_cast<double>(n * sizeof(float)) / best;
}

size_t RoundFloats(size_t bytes, int threads) {
  const size_t quantum = 128 * static_cast<size_t>(threads);  // whole 128-float blocks per thread
  return std::max(bytes / sizeof(float) / quantum, size_t{1}) * quantum;
}

// Four times the LLC so that at most a quarter of a pass can hit in cache even with a perfect
// replacement policy; at least 512 MiB for machines that under-report their cache.
size_t BandwidthBufferBytes(size_t llc_bytes) {
  return std::max<size_t>(size_t{512} << 20, 4 * llc_bytes);
}

#if OPENFIA_BENCH_X86
// vdpbf16ps: 16 fp32 lanes x 2 products x 2 FLOPs = 64 FLOPs per instruction.
const Throughput kBf16Dot{Bf16DotLoop, 16 * 64.0};
#endif

}  // namespace

double MeasureReadBandwidthGBs(int threads, size_t bytes, double budget_s) {
  const size_t n = RoundFloats(bytes, threads);
  Buffer buf = AllocBig(n * sizeof(float));
  if (!buf) return 0;
  ParallelFill(buf.get(), n, threads);
  return ReadBandwidthOver(buf.get(), n, threads, budget_s);
}

MachineLimits MeasureMachineLimits(int threads) {
  const auto t0 = Clock::now();
  const CpuTicks ticks0 = ReadCpuTicks();
  MachineLimits m;
  m.cpu = CpuModel();
  m.threads = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  m.llc_bytes = LastLevelCacheBytes();
  m.bw_buffer_bytes = BandwidthBufferBytes(m.llc_bytes);
  PickRead(&m.bw_isa);
  {
    // One buffer for both measurements: touching 1+ GiB costs more than reading it.
    const size_t n = RoundFloats(m.bw_buffer_bytes, m.threads);
    Buffer buf = AllocBig(n * sizeof(float));
    if (buf) {
      ParallelFill(buf.get(), n, m.threads);
      m.read_bw_1t_gbs = ReadBandwidthOver(buf.get(), n, 1, 0.5);
      m.read_bw_all_gbs =
          m.threads == 1 ? m.read_bw_1t_gbs : ReadBandwidthOver(buf.get(), n, m.threads, 0.5);
    }
  }

  const Throughput fma = PickFma(&m.fma_isa);
  m.fma_fp32_gflops_core = MeasureThroughput(fma, 1);
  m.fma_fp32_gflops_all = m.threads == 1 ? m.fma_fp32_gflops_core : MeasureThroughput(fma, m.threads);
#if OPENFIA_BENCH_X86
  m.has_bf16_dot = CpuHasAvx512Bf16();
  if (m.has_bf16_dot) {
    m.bf16_dot_gflops_core = MeasureThroughput(kBf16Dot, 1);
    m.bf16_dot_gflops_all =
        m.threads == 1 ? m.bf16_dot_gflops_core : MeasureThroughput(kBf16Dot, m.threads);
  }
#if defined(__linux__)
  if (AmxUsable()) {
    // tdpbf16ps on 16x32 by 32x16 bf16 tiles: 16 x 16 x 32 multiply-adds = 16384 FLOPs.
    m.amx_bf16_gflops_core = MeasureThroughput(Throughput{AmxLoop, 4 * 16384.0}, 1);
  }
#endif
#endif
  m.seconds = Seconds(t0, Clock::now());
  const CpuTicks ticks1 = ReadCpuTicks();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  m.foreign_load = std::max(0.0, static_cast<double>((ticks1.machine - ticks0.machine) -
                                                     (ticks1.self - ticks0.self)) /
                                     hz / std::max(m.seconds, 1e-3));
  return m;
}

void RunProbeServer(int max_threads, std::FILE* in, std::FILE* out) {
  max_threads = std::max(1, max_threads);
  const size_t n = RoundFloats(BandwidthBufferBytes(LastLevelCacheBytes()), max_threads);
  Buffer buf = AllocBig(n * sizeof(float));
  if (buf) ParallelFill(buf.get(), n, max_threads);
  std::string isa;
  const Throughput fma = PickFma(&isa);
  bool bf16 = false;
#if OPENFIA_BENCH_X86
  bf16 = CpuHasAvx512Bf16();
#endif
  std::fprintf(out, "{\"ready\": true}\n");
  std::fflush(out);
  char line[128];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    int t = 0;
    if (std::sscanf(line, "probe %d", &t) != 1) break;  // "quit" or anything else: stop
    t = std::clamp(t, 1, max_threads);
    const auto t0 = Clock::now();
    const double f = MeasureThroughput(fma, t, 0.02, 5);
    double d = 0;
#if OPENFIA_BENCH_X86
    if (bf16) d = MeasureThroughput(kBf16Dot, t, 0.02, 5);
#endif
    const size_t nt = RoundFloats(n * sizeof(float), t);  // whole blocks for t threads
    const double bw = buf ? ReadBandwidthOver(buf.get(), nt, t, 0.15) : 0;
    std::fprintf(out,
                 "{\"threads\": %d, \"fma_fp32_gflops\": %.6g, \"bf16_dot_gflops\": %.6g, "
                 "\"read_bw_gbs\": %.6g, \"seconds\": %.3f}\n",
                 t, f, d, bw, Seconds(t0, Clock::now()));
    std::fflush(out);
  }
}

std::string ToJson(const MachineLimits& m) {
  std::ostringstream o;
  o.precision(6);
  o << "{\"cpu\": \"" << JsonEscape(m.cpu) << "\", \"threads\": " << m.threads
    << ", \"llc_bytes\": " << m.llc_bytes << ", \"bw_buffer_bytes\": " << m.bw_buffer_bytes
    << ", \"bw_isa\": \"" << m.bw_isa << "\", \"read_bw_1t_gbs\": " << m.read_bw_1t_gbs
    << ", \"read_bw_all_gbs\": " << m.read_bw_all_gbs << ", \"fma_isa\": \"" << m.fma_isa
    << "\", \"fma_fp32_gflops_core\": " << m.fma_fp32_gflops_core
    << ", \"fma_fp32_gflops_all\": " << m.fma_fp32_gflops_all
    << ", \"has_bf16_dot\": " << (m.has_bf16_dot ? "true" : "false")
    << ", \"bf16_dot_gflops_core\": " << m.bf16_dot_gflops_core
    << ", \"bf16_dot_gflops_all\": " << m.bf16_dot_gflops_all
    << ", \"amx_bf16_gflops_core\": " << m.amx_bf16_gflops_core << ", \"seconds\": " << m.seconds << ", \"foreign_load\": " << m.foreign_load
    << "}";
  return o.str();
}

size_t PeakRssBytes() { return StatusField("VmHWM"); }
size_t CurrentRssBytes() { return StatusField("VmRSS"); }

bool ResetPeakRss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

namespace {
size_t g_flush_bytes = 0;
}  // namespace

size_t FlushBufferBytes() { return g_flush_bytes; }

void FlushCaches() {
  static const size_t n = [] {
    const size_t bytes = std::max<size_t>(size_t{64} << 20, 2 * LastLevelCacheBytes());
    return bytes / sizeof(float) / 128 * 128;
  }();
  static Buffer buf = [] {
    Buffer b = AllocBig(n * sizeof(float));
    if (b) {
      ParallelFill(b.get(), n, 1);
      g_flush_bytes = n * sizeof(float);
    }
    return b;
  }();
  static const ReadFn read = PickRead(nullptr);
  if (buf) g_sink = g_sink + read(buf.get(), n);
}

}  // namespace openfia::bench
