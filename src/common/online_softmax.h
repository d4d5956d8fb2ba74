// openfia internal: the online-softmax state of one query row and its finalize rules.
//
// State over a set of visible keys: m = max score (-inf when the set is empty), l = sum of
// exp(s - m) (fp32, unrounded), acc[d] = sum of round_q(exp(s - m)) * V[d]. An empty state is
// the identity of the runner's split-KV merge (engine/runner.cc), which is how split partials,
// fully masked tiles and rows with no visible key compose without producing NaN from
// (-inf) - (-inf).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace openfia::internal {

struct SoftmaxRow {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.f;
  bool empty() const { return m == -std::numeric_limits<float>::infinity(); }
};

// Final output factor and lse of a row: out[d] = acc[d] * factor / denom (the division happens in
// fp32, after P*V, as on the NPU). A row with no visible key returns false (output 0, lse +inf,
// sink or not).
struct RowFinal {
  float factor = 0.f, denom = 1.f, lse = std::numeric_limits<float>::infinity();
};
inline bool FinalizeSoftmax(const SoftmaxRow& r, RowFinal* f) {
  if (r.empty()) {
    *f = RowFinal{};
    return false;
  }
  f->factor = 1.f;
  f->denom = r.l;
  f->lse = r.m + std::log(r.l);
  return true;
}
// The same with a sink: a logit that joins the denominator only,
//   out = sum_j e^{s_j} v_j / (e^{sink} + sum_j e^{s_j}),  lse = log(e^{sink} + sum_j e^{s_j}),
// taken literally for every float sink: NaN makes the row NaN (out and lse), -inf is no sink at
// all, +inf is the formula's limit (out 0, lse +inf; a NaN or infinite accumulator stays NaN).
inline bool FinalizeSoftmax(const SoftmaxRow& r, float sink, RowFinal* f) {
  if (r.empty()) {
    *f = RowFinal{};
    return false;
  }
  if (std::isnan(sink)) {
    f->factor = sink;
    f->denom = 1.f;
    f->lse = sink;
    return true;
  }
  // Rebase on max(m, sink) so a large sink cannot overflow exp(sink - m); the sink's own term is
  // exactly 1 when it is that maximum (also for sink = +inf, where sink - big would be NaN).
  const float big = std::fmax(r.m, sink);
  const float a = std::exp(r.m - big);
  f->factor = a;
  f->denom = r.l * a + (sink == big ? 1.f : std::exp(sink - big));
  f->lse = big + std::log(f->denom);
  return true;
}

// A row state put back in range after its fp32 sums passed FLT_MAX: acc[d] = sum[d] / l in
// double, l = 1 and m = lse (the m + log l of the state it replaces, in double): the same output
// and lse, and a state the split-KV merge combines like any other. False, with nothing written,
// where a quotient is not finite in fp32.
template <class T>
inline bool NormalizeRowState(const T* sum, double l, double lse, int64_t n, float* acc, float* m,
                              float* l_out) {
  for (int64_t d = 0; d < n; ++d)
    if (!std::isfinite(static_cast<float>(static_cast<double>(sum[d]) / l))) return false;
  for (int64_t d = 0; d < n; ++d) acc[d] = static_cast<float>(static_cast<double>(sum[d]) / l);
  *m = static_cast<float>(lse);
  *l_out = 1.f;
  return true;
}

}  // namespace openfia::internal
