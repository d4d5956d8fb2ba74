// openfia-bench: the machine's own limits, measured by the benchmark itself, so that every
// workload can be reported as a percentage of what this CPU can do (bandwidth for decode, bf16 dot
// throughput for prefill) rather than as a bare number.
//
// Method (each measurement takes well under a second):
// - streaming read bandwidth: a buffer several times the last-level cache, split into one
//   contiguous slice per thread, first touched by its owner; every pass sums the whole slice with
//   several independent vector accumulators; the best (minimum-time) pass is kept, because on a
//   shared machine interference only ever makes a pass slower.
// - fp32 FMA and bf16 dot peaks: independent accumulator chains (more than latency x throughput)
//   of vfmadd231ps / vdpbf16ps on registers only, so the pipes, not memory, are the bound.
// ISA-specific loops are compiled with __attribute__((target(...))) and chosen at run time from
// CPUID, so the binary runs on any x86-64 CPU (and falls back to portable loops elsewhere).
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace openfia::bench {

struct MachineLimits {
  std::string cpu;              // model name from /proc/cpuinfo
  int threads = 1;              // the "all threads" count used below
  size_t llc_bytes = 0;         // last-level cache size as the OS reports it (0 if unknown)
  size_t bw_buffer_bytes = 0;   // size of the streaming buffer (>= 4x LLC, >= 512 MiB)
  std::string bw_isa;           // "avx512", "avx2" or "portable"
  double read_bw_1t_gbs = 0;    // streaming read, 1 thread, GB/s (1e9 bytes/s)
  double read_bw_all_gbs = 0;   // streaming read, `threads` threads
  std::string fma_isa;          // "avx512f (zmm)", "avx2+fma (ymm)" or "portable"
  double fma_fp32_gflops_core = 0;  // fp32 multiply-add peak of one core, GFLOP/s (FMA = 2)
  double fma_fp32_gflops_all = 0;   // same, `threads` threads at once
  bool has_bf16_dot = false;        // AVX512-BF16 present (vdpbf16ps)
  double bf16_dot_gflops_core = 0;  // vdpbf16ps peak of one core (0 when absent)
  double bf16_dot_gflops_all = 0;   // same, `threads` threads at once
  double amx_bf16_gflops_core = 0;  // AMX tdpbf16ps peak of one core (0 when absent/not granted);
                                    // for information: the targets use vdpbf16ps
  double seconds = 0;               // wall time spent measuring
  double foreign_load = 0;          // CPUs' worth of time other processes used meanwhile (Linux)

  // Limits a workload run with `n` threads is measured against. Bandwidth: the all-thread
  // measurement (at least the 1-thread one) when n == threads, the 1-thread one when n == 1,
  // else min(n x 1-thread, all).
  // Compute: per-core peak x n (the all-thread numbers are reported for information only).
  double ReadBandwidthGBs(int n) const;
  double Bf16DotGflops(int n) const;  // 0 when the CPU has no bf16 dot instruction
  // The bf16 compute peak the targets are measured against: the faster of vdpbf16ps (where the
  // CPU has it) and the fp32 FMA on widened bf16 inputs (exact products either way; the engine
  // uses the faster). Bf16PeakName() says which.
  double Bf16PeakGflops(int n) const;
  const char* Bf16PeakName() const;
  double FmaGflops(int n) const;
};

// Runs every measurement (about 2-4 s in total, dominated by touching the large buffer).
// `threads` <= 0 means std::thread::hardware_concurrency().
MachineLimits MeasureMachineLimits(int threads);

// Single measurements, exposed for the benchmark's own checks.
double MeasureReadBandwidthGBs(int threads, size_t bytes, double budget_s = 0.8);

// One JSON object (keys as the struct's field names; has_bf16_dot as true/false).
std::string ToJson(const MachineLimits& m);

// Limits measured next to a workload (the Python driver brackets each workload with one before
// and one after): on a shared VM the machine's speed drifts between minutes, so a percentage of
// limits measured once at the start can be off by tens of percent. Reads lines on `in`:
// "probe N" measures, at N threads at once, the fp32 FMA throughput, the bf16 dot throughput
// (where the CPU has vdpbf16ps) and the streaming read bandwidth over one buffer of
// 4x the LLC (>= 512 MiB, allocated and touched once at start), in about 0.3 s, and writes one
// JSON line {"threads", "fma_fp32_gflops", "bf16_dot_gflops", "read_bw_gbs", "seconds"} on `out`;
// "quit" or end of input returns.
void RunProbeServer(int max_threads, std::FILE* in, std::FILE* out);

// Peak resident set size of this process (VmHWM) in bytes, and a reset of that peak to the
// current RSS (Linux /proc/self/clear_refs "5"; returns false where unsupported).
size_t PeakRssBytes();
size_t CurrentRssBytes();
bool ResetPeakRss();

// Evicts the caches by streaming through a buffer of 2x the last-level cache (allocated once).
// Decode in a real model reads each layer's KV cache after the other layers have evicted it, so
// timing decode with a warm 300 MiB L3 would overstate memory bandwidth.
void FlushCaches();
// Bytes of the flush buffer (0 until FlushCaches first runs): resident memory of the benchmark's,
// not of the workload's, so reports subtract it from the peak RSS.
size_t FlushBufferBytes();

}  // namespace openfia::bench
