// openfia-bench: model-shaped workloads read from the shared case list (tests/cases/README.md
// describes the format) and turned into FusedInferAttentionScore calls through the public API.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "case_list.h"  // tests/cases/cpp: CaseSpec, ParseCaseLine, ReadCases
#include "openfia/openfia.h"

namespace openfia::bench {

// The benchmark's size presets. "full": the case as written. "demo": every sequence length (S
// when > 1, KVS) divided by 8 and rounded up to the page size, B capped at 4, so that every
// workload runs in seconds even on the fp64 reference. The name gets a "@demo" suffix so that a
// demo number can never be mistaken for a full-size one.
CaseSpec ApplyPreset(const CaseSpec& c, const std::string& preset);
// The same case with one key replaced (KV-length sweeps, memory check).
CaseSpec WithKey(const CaseSpec& c, const std::string& key, const std::string& value,
                 const std::string& new_name);

// Owns every input and output buffer of one call.
class Workload {
 public:
  // Builds inputs from a fixed-seed generator. Throws std::runtime_error for a key the benchmark
  // does not support (it names the key), openfia::Error when openfia rejects the call.
  static std::unique_ptr<Workload> Build(const CaseSpec& c, uint64_t seed = 1);
  // Large buffers (the KV caches) of the workloads built after this call on transparent huge
  // pages (Linux; elsewhere, or where THP is off, ordinary pages).
  static void UseHugePages(bool on);
  static bool HugePages();
  ~Workload();

  void Run() const;  // one FusedInferAttentionScore call with the current runtime settings
  // Max |out - ref| between the current output and one computed by the fp64 reference, and the
  // tolerance that derives from the output dtype (see workload.cc). Leaves the output as computed
  // by the reference.
  void CompareWithReference(double* max_abs_err, double* tol) const;

  const CaseSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  bool decode() const { return s_q_ == 1; }
  double flops() const { return flops_; }        // attended (q, k) pairs x 2 x (d_qk + d_rope + d_v) x heads
  double kv_bytes() const { return kv_bytes_; }  // unique K/V/rope/scale bytes one call must read
  double io_bytes() const { return io_bytes_; }  // kv_bytes + query + output
  int64_t kv_len() const { return kv_s_; }
  std::string Describe() const;                  // one line: geometry, dtypes, paging

 private:
  struct Buffer;
  Workload() = default;
  TensorView Alloc(DType dt, std::vector<int64_t> sizes);

  CaseSpec spec_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  FiaArgs args_;
  TensorView out_, lse_;
  int64_t s_q_ = 1, kv_s_ = 1;
  double flops_ = 0, kv_bytes_ = 0, io_bytes_ = 0;
  double v_absmax_ = 1;  // bound on |dequantized V|: the output is a convex combination of V rows
};

}  // namespace openfia::bench
