// openfia test support: the shared FusedInferAttentionScore case list (tests/cases/fia_cases.txt,
// format in tests/cases/README.md) and the inputs of one case, built through the public API.
//
// FiaCase mirrors tests/python/cases.py key by key (layouts, GQA, masks, sparse modes, actual
// lengths, padding, pse, paged caches 3d/4d/nz with a random block permutation, shared prefix,
// antiquant modes, int4, post-quantization, full quantization, MLA rope, tensor lists, lse). The
// data come from this file's own seeded generator (not torch's), so values differ from the Python
// suite's but the structure of every input is the same. Memory that no valid row may read is
// poisoned (NaN for floats, 127 / 7 for int8 / int4) so that reading it shows in the output.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "openfia/openfia.h"

namespace openfia::cases {

// One line of the case list: `<tier> <name> key=value ...`.
struct CaseSpec {
  std::string tier, name;
  std::map<std::string, std::string> keys;

  bool Has(const std::string& k) const { return keys.count(k) != 0; }
  int64_t Int(const std::string& k, int64_t def) const;
  double Double(const std::string& k, double def) const;
  std::string Str(const std::string& k, const std::string& def) const;
  std::string ToLine() const;  // back to the list's format
};

// Parses one line; returns false for blank/comment lines. Throws std::runtime_error on a malformed
// line (naming the line).
bool ParseCaseLine(const std::string& line, CaseSpec* out);
// Every case of `tier` in `path` (a missing file is an error).
std::vector<CaseSpec> ReadCases(const std::string& path, const std::string& tier);

// The cases OPENFIA_TIER=tier runs (README): smoke = smoke, full = smoke + full, model = model.
// Also checks that names are unique across the whole file.
std::vector<CaseSpec> TierCases(const std::string& path, const std::string& tier);

// The query-row windows and KV lengths of a case, as the case list defines them (independent of
// openfia's canonicalization): what the invariants of a test are stated in.
struct CaseGeometry {
  std::string layout;      // input_layout
  std::string out_layout;  // the output's layout: after "_" in input_layout, else input_layout
  bool packed = false;     // TND / NTD query: batches share one T axis
  int64_t B = 1, N = 1, KVN = 1, S = 1, KVS = 1, D = 64, DV = 64, rope_d = 0;
  int64_t prefix_len = 0;                  // attended shared-prefix rows (pact or prefix)
  std::vector<int64_t> q_begin, q_len;     // valid query tensor rows per batch (BNSD row index)
  std::vector<int64_t> kv_len;             // valid KV rows per batch (prefix excluded)
  std::vector<int64_t> q_row0;             // TND: first packed row of batch b (else 0)
  bool all_visible = false;  // no mask, sparse 0, unbounded band: every valid key is visible
  bool float_kv = true;      // K/V are float (no antiquant, no full quantization)
  bool scores_known = false; // all_visible, float K/V and FiaCase::Score() is the exact score
  bool fullquant = false;
  bool int8_out = false;     // post-quantized output
  double scale = 1.0;
  double q_absmax = 0, k_absmax = 0;  // over the values valid rows read (K: dequantized bound)
  double v_absmax = 0;                // bound on |dequantized V| over readable rows
  double pse_absmax = 0;
  std::vector<double> sinks;  // per query head (empty: none), as stored
};

// Owns every input and both outputs of one call.
class FiaCase {
 public:
  // Throws std::runtime_error naming the key for an unknown key or value.
  explicit FiaCase(const CaseSpec& spec);
  ~FiaCase();
  FiaCase(const FiaCase&) = delete;
  FiaCase& operator=(const FiaCase&) = delete;

  const CaseSpec& spec() const { return spec_; }
  const FiaArgs& args() const { return args_; }
  // For tests that add an argument to the call or change one; the output spec must not change.
  FiaArgs& mutable_args() { return args_; }
  const CaseGeometry& geometry() const { return geo_; }
  const FiaOutputSpec& output_spec() const { return out_spec_; }

  // One FusedInferAttentionScore call with the current runtime settings (SetImpl, threads).
  // Outputs are first filled with a sentinel so that an element the call never writes shows.
  void Run();
  const TensorView& out() const { return out_; }
  const TensorView& lse() const { return lse_; }  // absent unless softmax_lse_flag
  std::vector<uint8_t> OutBytes() const;
  std::vector<float> LseValues() const;

  // Index of output element (b, h, row, d) / lse (b, h, row) in the output tensors, where row is
  // the BNSD query row of batch b (TND: the row within the batch).
  int64_t OutIndex(int64_t b, int64_t h, int64_t row, int64_t d) const;
  int64_t LseIndex(int64_t b, int64_t h, int64_t row) const;
  // Rows per batch of the output (S; TND: q_len[b]).
  int64_t OutRows(int64_t b) const;

  // For float K/V cases (geometry().float_kv): the score of query row `row` (BNSD tensor row) of
  // batch b, head h against logical key j (shared prefix first, then the valid KV rows), computed
  // in double from the stored values (rope dims included; pse added when present), and the value
  // V(b, h, j, d) of that key. Meaningful for pse only when geometry().scores_known.
  double Score(int64_t b, int64_t h, int64_t row, int64_t j) const;
  double Value(int64_t b, int64_t h, int64_t j, int64_t d) const;

 private:
  struct Buffer;
  TensorView Alloc(DType dt, std::vector<int64_t> sizes);

  CaseSpec spec_;
  CaseGeometry geo_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  FiaArgs args_;
  FiaOutputSpec out_spec_;
  TensorView out_, lse_;
  // Logical float values for Score()/Value(): q [B,N,S,Dqk], k [B,KVN,prefix+KVS,Dqk], v likewise
  // with DV, pse [pb,N,S,cols].
  std::vector<double> q_log_, k_log_, v_log_, pse_log_;
  int64_t k_rows_ = 0, pse_b_ = 0, pse_cols_ = 0;
};

}  // namespace openfia::cases

// The benchmark reads the same list with the same parser.
namespace openfia::bench {
using cases::CaseSpec;
using cases::ParseCaseLine;
using cases::ReadCases;
}  // namespace openfia::bench
