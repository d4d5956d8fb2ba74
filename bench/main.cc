// openfia-bench: model-shaped FusedInferAttentionScore workloads (the `model` lines of
// python/openfia/bench/model_cases.txt) through the public C++ API, reported against limits this binary
// measures on the machine it runs on. See docs/benchmark.md.
//
//   openfia-bench [--preset demo|full] [--threads 1,all] [--cases FILE] [--warm] [--huge-pages]
//                 [--no-linearity] [--memcheck|--no-memcheck] [--no-verify] [--limits]
//                 [--limits-out FILE] [--probe-server]
//                 [Google Benchmark flags, e.g. --benchmark_filter=D1]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "machine_limits.h"
#include "openfia/openfia.h"
#include "workload.h"

namespace openfia::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool limits_only = false;
  bool probe_server = false;  // --probe-server: limits next to each workload (machine_limits.h)
  std::string preset = "full";
  std::string cases;  // empty: the model workloads file (python/openfia/bench/model_cases.txt)
  std::vector<int> threads;
  bool cold = true;
  bool linearity = true;
  int memcheck = -1;  // -1: only when the engine runs the prefill (the reference would take hours)
  bool verify = true;
  std::string limits_out;  // also write the measured limits (JSON) here
};

int AllThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "openfia-bench: %s\n"
               "usage: openfia-bench [--preset demo|full] [--threads LIST] [--cases FILE] [--warm]\n"
               "                     [--huge-pages]\n"
               "                     [--no-linearity] [--memcheck|--no-memcheck] [--no-verify]\n"
               "                     [--limits] [--limits-out FILE] [--probe-server]\n"
               "                     [--benchmark_* flags]\n",
               why.c_str());
  std::exit(2);
}

// Takes our flags out of argv (Google Benchmark rejects flags it does not know).
Options ParseOptions(int* argc, char** argv) {
  Options o;
  int out = 1;
  auto value = [&](int& i, const char* flag) -> std::string {
    const size_t n = std::strlen(flag);
    if (std::strncmp(argv[i], flag, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    if (i + 1 >= *argc) Usage(std::string(flag) + " needs a value");
    return argv[++i];
  };
  auto is = [&](int i, const char* flag) {
    const size_t n = std::strlen(flag);
    return std::strncmp(argv[i], flag, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=');
  };
  for (int i = 1; i < *argc; ++i) {
    if (is(i, "--limits")) o.limits_only = true;
    else if (is(i, "--probe-server")) o.probe_server = true;
    else if (is(i, "--preset")) o.preset = value(i, "--preset");
    else if (is(i, "--cases")) o.cases = value(i, "--cases");
    else if (is(i, "--warm")) o.cold = false;
    else if (is(i, "--huge-pages")) Workload::UseHugePages(true);
    else if (is(i, "--no-linearity")) o.linearity = false;
    else if (is(i, "--memcheck")) o.memcheck = 1;
    else if (is(i, "--no-memcheck")) o.memcheck = 0;
    else if (is(i, "--no-verify")) o.verify = false;
    else if (is(i, "--limits-out")) o.limits_out = value(i, "--limits-out");
    else if (is(i, "--threads")) {
      const std::string v = value(i, "--threads");
      size_t pos = 0;
      while (pos <= v.size()) {
        const size_t comma = std::min(v.find(',', pos), v.size());
        const std::string item = v.substr(pos, comma - pos);
        const int t = item == "all" ? AllThreads() : std::atoi(item.c_str());
        if (t < 1) Usage("--threads takes positive counts or 'all' (got " + v + ")");
        if (std::find(o.threads.begin(), o.threads.end(), t) == o.threads.end()) o.threads.push_back(t);
        pos = comma + 1;
      }
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  if (o.preset != "demo" && o.preset != "full") Usage("--preset must be demo or full");
  if (o.threads.empty()) {
    o.threads.push_back(1);
    if (AllThreads() > 1) o.threads.push_back(AllThreads());
  }
  return o;
}

std::string BaseName(const std::string& name) { return name.substr(0, name.find('@')); }

// Which implementation runs a workload: the engine, or the reference because the engine does not
// support the call (yet). Probed by forcing the engine, which names what it lacks.
std::string ProbeImpl(const Workload& w, std::string* why) {
  SetImpl(Impl::kEngine);
  std::string impl = "engine";
  try {
    w.Run();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) {
      SetImpl(Impl::kAuto);
      throw;
    }
    impl = "reference";
    *why = e.actual();
  }
  SetImpl(Impl::kAuto);
  return impl;
}

struct Entry {
  std::unique_ptr<Workload> w;
  std::string impl, why;
  double probe_s = 0;
  double max_err = NAN, tol = NAN;
};

struct Result {
  std::string workload;
  int threads = 1;
  double min_s = 0;
  double gflops = 0, kv_gbs = 0, pct = NAN;
  std::string pct_of;  // "bw" or "bf16"
  // The compute floor: the call's products at the machine's measured dot peak on these threads
  // (a decode's int8 / int4 products take as many dot instructions as its bf16 ones).
  double floor_s = NAN;
  double peak_rss_mib = 0, extra_rss_mib = 0;
};

MachineLimits g_limits;
Options g_opt;
std::vector<Result> g_results;

double Percent(const Workload& w, int threads, double gflops, double gbs, std::string* of) {
  if (w.decode() && w.spec().Int("rope", 0) == 0) {
    *of = "bw";
    const double bw = g_limits.ReadBandwidthGBs(threads);
    return bw > 0 ? 100.0 * gbs / bw : NAN;
  }
  *of = "bf16";
  const double peak = g_limits.Bf16PeakGflops(threads);
  return peak > 0 ? 100.0 * gflops / peak : NAN;
}

void RunOne(benchmark::State& st, Entry* e, int threads, const std::string& label) {
  Workload& w = *e->w;
  SetNumThreads(threads);
  const bool cold = g_opt.cold && w.decode();
  w.Run();  // warm-up at this thread count (page faults, engine workspaces)
  const size_t rss0 = CurrentRssBytes();
  ResetPeakRss();
  double best = INFINITY;
  for (auto _ : st) {
    if (cold) FlushCaches();  // outside the timed region (manual time)
    const auto t0 = Clock::now();
    w.Run();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    st.SetIterationTime(dt);
    best = std::min(best, dt);
  }
  Result r;
  r.workload = w.name();
  r.threads = threads;
  r.min_s = best;
  r.gflops = 1e-9 * w.flops() / best;
  r.kv_gbs = 1e-9 * w.kv_bytes() / best;
  r.pct = Percent(w, threads, r.gflops, r.kv_gbs, &r.pct_of);
  const double peak = g_limits.Bf16PeakGflops(threads);
  if (peak > 0) r.floor_s = w.flops() / (peak * 1e9);
  r.peak_rss_mib = (static_cast<double>(PeakRssBytes()) - static_cast<double>(FlushBufferBytes())) / 1048576.0;
  r.extra_rss_mib = (static_cast<double>(PeakRssBytes()) - static_cast<double>(rss0)) / 1048576.0;
  st.counters["min_ms"] = best * 1e3;
  st.counters["GFLOP/s"] = r.gflops;
  st.counters["KV_GB/s"] = r.kv_gbs;
  st.counters["pct_" + r.pct_of] = r.pct;
  st.counters["peakRSS_MiB"] = r.peak_rss_mib;
  st.counters["RSS_growth_MiB"] = r.extra_rss_mib;
  st.SetLabel(label);
  g_results.push_back(r);
}

// Iterations so that one benchmark takes about `target_s` of timed work (>= 2, <= cap).
int64_t IterationsFor(double probe_s, double target_s, int64_t cap) {
  if (probe_s <= 0) return cap;
  return std::clamp<int64_t>(static_cast<int64_t>(target_s / probe_s), 2, cap);
}

std::string DefaultCasesFile(std::string* fallback) {
  fallback->clear();  // one file holds the model workloads
  return OPENFIA_MODEL_CASE_LIST;
}

const Result* Find(const std::string& base, int threads) {
  for (const Result& r : g_results)
    if (BaseName(r.workload) == base && r.threads == threads) return &r;
  return nullptr;
}

void PrintSummary(const std::vector<std::unique_ptr<Entry>>& all, size_t n_main,
                  const std::vector<std::pair<int64_t, std::string>>& sweep, int top_threads) {
  const std::vector<const Entry*> entries = [&] {
    std::vector<const Entry*> v;
    for (size_t i = 0; i < n_main; ++i) v.push_back(all[i].get());
    return v;
  }();
  std::printf("\n## openfia-bench summary (preset %s, %s KV for decode, KV on %s)\n\n",
              g_opt.preset.c_str(), g_opt.cold ? "cold-cache" : "warm-cache",
              Workload::HugePages() ? "2 MiB pages" : "4 KiB pages");
  std::printf("machine: %s; read bandwidth %.1f GB/s (1 thread), %.1f GB/s (%d threads); fp32 FMA "
              "%.0f GFLOP/s/core; bf16 dot %s; AMX bf16 %.0f GFLOP/s/core (information); bf16 "
              "targets against %s\n\n",
              g_limits.cpu.c_str(), g_limits.read_bw_1t_gbs, g_limits.read_bw_all_gbs,
              g_limits.threads, g_limits.fma_fp32_gflops_core,
              g_limits.has_bf16_dot
                  ? (std::to_string(static_cast<int>(g_limits.bf16_dot_gflops_core)) + " GFLOP/s/core").c_str()
                  : "n/a (no AVX512-BF16)",
              g_limits.amx_bf16_gflops_core, g_limits.Bf16PeakName());
  if (g_limits.foreign_load > 0.25)
    std::printf("WARNING: other processes used %.1f CPUs' worth of time while the limits were "
                "measured (a busy machine): limits and timings are pessimistic.\n\n",
                g_limits.foreign_load);
  std::printf("| workload | shape | impl | threads | time ms | GFLOP/s | KV GB/s | %% of limit | "
              "x compute floor | peak RSS MiB (+during calls) | max err (tol) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& e : entries) {
    for (const Result& r : g_results) {
      if (r.workload != e->w->name()) continue;
      char err[64] = "n/a";
      if (!std::isnan(e->max_err)) std::snprintf(err, sizeof err, "%.2e (%.1e)", e->max_err, e->tol);
      std::printf("| %s | %s | %s | %d | %.3f | %.1f | %.2f | %.0f%% %s | %.2f | %.0f (+%.0f) | %s |\n",
                  r.workload.c_str(), e->w->Describe().c_str(), e->impl.c_str(), r.threads,
                  r.min_s * 1e3, r.gflops, r.kv_gbs, r.pct, r.pct_of.c_str(), r.min_s / r.floor_s,
                  r.peak_rss_mib, r.extra_rss_mib, err);
    }
  }

  // Thread scaling: time(1) / time(T) for every thread count measured.
  std::vector<int> counts;
  for (const Result& r : g_results)
    if (std::find(counts.begin(), counts.end(), r.threads) == counts.end()) counts.push_back(r.threads);
  std::sort(counts.begin(), counts.end());
  if (counts.size() > 1 && counts[0] == 1) {
    std::printf("\nThread scaling (time at 1 thread / time at T):\n\n| workload |");
    for (size_t i = 1; i < counts.size(); ++i) std::printf(" %d threads |", counts[i]);
    std::printf("\n|---|");
    for (size_t i = 1; i < counts.size(); ++i) std::printf("---|");
    std::printf("\n");
    for (const auto& e : entries) {
      const Result* one = Find(BaseName(e->w->name()), 1);
      if (one == nullptr) continue;
      std::printf("| %s |", BaseName(e->w->name()).c_str());
      for (size_t i = 1; i < counts.size(); ++i) {
        const Result* t = Find(BaseName(e->w->name()), counts[i]);
        if (t) std::printf(" %.2fx |", one->min_s / t->min_s);
        else std::printf(" - |");
      }
      std::printf("\n");
    }
  }

  // Decode time vs KV length: least-squares line through the points; linear growth means a small
  // intercept and every point within a few percent of the line.
  if (sweep.size() >= 2) {
    std::vector<double> x, y;
    for (const auto& [kv, name] : sweep)
      for (const Result& r : g_results)
        if (r.workload == name && r.threads == top_threads) {
          x.push_back(static_cast<double>(kv));
          y.push_back(r.min_s);
        }
    if (x.size() == sweep.size()) {
      const double n = static_cast<double>(x.size());
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        sxy += x[i] * y[i];
      }
      const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icpt = (sy - slope * sx) / n;
      double worst = 0;
      std::printf("\nDecode time vs KV length (%s, %d threads):", BaseName(sweep[0].second).c_str(), top_threads);
      for (size_t i = 0; i < x.size(); ++i) {
        const double fit = icpt + slope * x[i];
        worst = std::max(worst, std::fabs(y[i] - fit) / fit);
        std::printf(" KV %lld: %.3f ms (%.2f ns/token);", static_cast<long long>(x[i]), y[i] * 1e3,
                    y[i] / x[i] * 1e9);
      }
      std::printf("\n  linear fit: %.3f ns/token + %.3f ms fixed; worst deviation from the fit %.1f%%; "
                  "time ratio longest/shortest %.2f for KV ratio %.0f\n",
                  slope * 1e9, icpt * 1e3, worst * 100, y.back() / y.front(), x.back() / x.front());
    }
  }

  // The targets, reported (never asserted).
  // How far each workload is from what the machine can do: a decode reads its KV once (the
  // streaming bandwidth bounds it) and does its products at the dot unit's rate (the compute
  // floor bounds it; int8 / int4 caches take as many dot instructions as 16-bit ones).
  std::printf("\nDistance from the machine's limits (%d threads unless said):\n", top_threads);
  auto time = [&](const char* n) { const Result* r = Find(n, top_threads); return r ? r->min_s : NAN; };
  for (const char* n : {"D1", "D2", "D3", "D4", "D5"})
    if (const Result* r = Find(n, top_threads))
      std::printf("  %s: %.3f ms, %.2fx its compute floor, %.0f%% of the streaming bandwidth\n", n,
                  r->min_s * 1e3, r->min_s / r->floor_s, r->pct);
  if (const Result* d1 = Find("D1", 1)) {
    std::printf("  D1, 1 thread: %.3f ms, %.2fx its compute floor\n", d1->min_s * 1e3,
                d1->min_s / d1->floor_s);
    for (const char* n : {"D2", "D3"})
      if (const Result* r = Find(n, 1))
        std::printf("  %s, 1 thread: %.2fx the speed of D1 (16-bit KV) at 1 thread, %.1f GB/s of KV\n",
                    n, d1->min_s / r->min_s, r->kv_gbs);
  }
  for (const char* n : {"P1", "P2", "P3"})
    if (const Result* r = Find(n, top_threads))
      std::printf("  %s: %.0f%% of the %s peak\n", n, r->pct, g_limits.Bf16PeakName());
  // int8 full quantization against bf16 at the same shape (integer VPMADDWD products, about the
  // fp32 FMA's rate on AVX2 CPUs; two passes over the keys, the second reading the first's
  // scores).
  if (!std::isnan(time("Q1")) && !std::isnan(time("P1")))
    std::printf("  Q1 (int8 full quantization, P1's shape): %.2fx P1's time\n", time("Q1") / time("P1"));
  std::printf("  (ratios to PyTorch SDPA: python -m openfia.bench)\n");
}

// Runs a causal prefill of `len` tokens (one head: the point is the S_q x S_kv growth, not the
// FLOPs) and reports how far the peak RSS rose above what the inputs already occupied.
void MemCheck(int64_t len, int threads) {
  CaseSpec c;
  c.tier = "model";
  c.name = "prefill" + std::to_string(len);
  c.keys = {{"layout", "BSH"}, {"N", "1"}, {"KVN", "1"}, {"S", std::to_string(len)},
            {"KVS", std::to_string(len)}, {"D", "128"}, {"sparse", "3"}};
  try {
    auto w = Workload::Build(c);
    SetNumThreads(threads);
    size_t rss0 = CurrentRssBytes();
    ResetPeakRss();
    auto t0 = Clock::now();
    std::string impl = "engine";
    SetImpl(Impl::kEngine);
    try {
      w->Run();  // the engine rejects an unsupported call before computing anything
    } catch (const Error& e) {
      SetImpl(Impl::kAuto);
      if (e.code() != ErrorCode::kUnsupported) throw;
      impl = "reference";
    }
    SetImpl(Impl::kAuto);
    if (impl == "reference") {
      if (g_opt.memcheck != 1) {
        std::printf("\nMemory: %s skipped: the engine does not run it yet and the reference would "
                    "take too long (force with --memcheck)\n", c.name.c_str());
        return;
      }
      rss0 = CurrentRssBytes();
      ResetPeakRss();
      t0 = Clock::now();
      w->Run();
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const double extra = (static_cast<double>(PeakRssBytes()) - static_cast<double>(rss0)) / 1048576.0;
    const double quadratic = static_cast<double>(len) * static_cast<double>(len) * 4 / 1048576.0;
    std::printf("\nMemory: %s (%s, %d threads, %.1f s): peak RSS %.0f MiB, %.1f MiB above the "
                "inputs; one fp32 S_q x S_kv buffer would be %.0f MiB -> %s\n",
                c.name.c_str(), impl.c_str(), threads, dt,
                (static_cast<double>(PeakRssBytes()) - static_cast<double>(FlushBufferBytes())) / 1048576.0, extra,
                quadratic, extra < quadratic / 8 ? "no S_q x S_kv buffer" : "GROWS WITH S_q x S_kv");
  } catch (const std::exception& e) {
    std::printf("\nMemory check failed to run: %s\n", e.what());
  }
}

}  // namespace
}  // namespace openfia::bench

int main(int argc, char** argv) {
  using namespace openfia::bench;
  g_opt = ParseOptions(&argc, argv);
  if (g_opt.probe_server) {
    RunProbeServer(AllThreads(), stdin, stdout);
    return 0;
  }
  if (g_opt.limits_only) {
    g_limits = MeasureMachineLimits(AllThreads());
    std::printf("%s\n", ToJson(g_limits).c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  std::fprintf(stderr, "openfia-bench %s (SIMD target %s): measuring machine limits...\n",
               openfia::Version().c_str(), openfia::SimdTarget().c_str());
  g_limits = MeasureMachineLimits(AllThreads());
  std::fprintf(stderr, "limits: %s\n", ToJson(g_limits).c_str());
  if (g_limits.foreign_load > 0.25)
    std::fprintf(stderr, "WARNING: other processes used %.1f CPUs while the limits were measured; "
                 "every number of this run is pessimistic\n", g_limits.foreign_load);
  if (!g_opt.limits_out.empty()) {
    FILE* f = std::fopen(g_opt.limits_out.c_str(), "w");
    if (f == nullptr) Usage("cannot write " + g_opt.limits_out);
    std::fprintf(f, "%s\n", ToJson(g_limits).c_str());
    std::fclose(f);
  }

  if (g_opt.cold) FlushCaches();  // allocates its buffer now, so no workload's RSS includes it

  std::string fallback;
  std::string path = g_opt.cases.empty() ? DefaultCasesFile(&fallback) : g_opt.cases;
  std::vector<CaseSpec> cases;
  try {
    cases = ReadCases(path, "model");
  } catch (const std::exception& e) {
    if (fallback.empty()) throw;
  }
  if (cases.empty() && !fallback.empty()) {
    std::fprintf(stderr, "no `model` cases in %s; using %s\n", path.c_str(), fallback.c_str());
    path = fallback;
    cases = ReadCases(path, "model");
  }
  if (cases.empty()) {
    std::fprintf(stderr, "openfia-bench: no `model` cases in %s\n", path.c_str());
    return 1;
  }

  std::vector<std::unique_ptr<Entry>> entries;
  bool any_wrong = false;  // a wrong result fails the run; a workload openfia rejects is reported
  auto add = [&](const CaseSpec& c) -> Entry* {
    auto e = std::make_unique<Entry>();
    try {
      e->w = Workload::Build(c);
      e->impl = ProbeImpl(*e->w, &e->why);
      const auto t0 = std::chrono::steady_clock::now();
      e->w->Run();
      e->probe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (g_opt.verify && e->impl == "engine") e->w->CompareWithReference(&e->max_err, &e->tol);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "skip %s: %s\n", c.name.c_str(), ex.what());
      return nullptr;
    }
    std::fprintf(stderr, "built %-10s %-60s impl=%s%s%s (%.3f s/call)\n", e->w->name().c_str(),
                 e->w->Describe().c_str(), e->impl.c_str(), e->why.empty() ? "" : ": ",
                 e->why.c_str(), e->probe_s);
    if (!std::isnan(e->max_err) && !(e->max_err <= e->tol)) {
      // A wrong result has no speed: the workload is reported as failed and not timed.
      std::fprintf(stderr, "FAIL %s: max |engine - reference| = %.3e > tolerance %.3e; not timed\n",
                   e->w->name().c_str(), e->max_err, e->tol);
      any_wrong = true;
      return nullptr;
    }
    entries.push_back(std::move(e));
    return entries.back().get();
  };
  for (const CaseSpec& c : cases) add(ApplyPreset(c, g_opt.preset));

  const int top = *std::max_element(g_opt.threads.begin(), g_opt.threads.end());
  const size_t n_main = entries.size();
  for (size_t i = 0; i < n_main; ++i) {
    Entry* e = entries[i].get();
    for (int t : g_opt.threads) {
      const std::string label = e->impl + (e->impl == "reference" ? " (engine lacks it)" : "");
      benchmark::RegisterBenchmark((e->w->name() + "/threads:" + std::to_string(t)).c_str(),
                                   [e, t, label](benchmark::State& st) { RunOne(st, e, t, label); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(IterationsFor(e->probe_s, 0.5, e->w->decode() && g_opt.cold ? 10 : 30));
    }
  }

  // Decode time vs KV length: the first bf16 decode workload (D1 in the shared list) at 1/8, 1/4,
  // 1/2 and 1x its KV length.
  std::vector<std::pair<int64_t, std::string>> sweep;
  if (g_opt.linearity) {
    const Entry* base = nullptr;
    for (size_t i = 0; i < n_main && !base; ++i)
      if (entries[i]->w->decode() && !entries[i]->w->spec().Has("kv") && !entries[i]->w->spec().Int("rope", 0))
        base = entries[i].get();
    if (base) {
      const CaseSpec& c = base->w->spec();
      const int64_t kv = c.Int("KVS", 1), page = std::max<int64_t>(1, c.Int("page", 1));
      for (int64_t div : {8, 4, 2, 1}) {
        const int64_t len = std::max<int64_t>(page, kv / div / page * page);
        const std::string name = c.name + "/kv" + std::to_string(len);
        Entry* e = (div == 1) ? nullptr : add(WithKey(c, "KVS", std::to_string(len), name));
        if (div == 1) {
          // Reuse the base workload's own measurement at `top` threads.
          sweep.emplace_back(len, base->w->name());
          continue;
        }
        if (!e) continue;
        sweep.emplace_back(len, name);
        benchmark::RegisterBenchmark((name + "/threads:" + std::to_string(top)).c_str(),
                                     [e, top](benchmark::State& st) { RunOne(st, e, top, e->impl); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(IterationsFor(e->probe_s, 0.5, g_opt.cold ? 10 : 30));
      }
    }
  }

  // Debian's libbenchmark is a debug build and says so in its header; openfia-bench itself is
  // built as Release and times single calls around the operator.
  std::printf("(a \"Library was built as DEBUG\" warning below is about the system's Google "
              "Benchmark library; openfia and openfia-bench are Release builds)\n");
  std::fflush(stdout);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  PrintSummary(entries, n_main, sweep, top);

  // Memory: a long prefill must not allocate anything that grows with S_q x S_kv.
  if (g_opt.memcheck != 0) MemCheck(g_opt.preset == "demo" ? 4096 : 32768, top);
  return any_wrong ? 1 : 0;
}
