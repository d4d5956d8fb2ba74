// openfia: MergeAttentionStates (include/openfia/attention_state.h): two attention results over
// disjoint key sets -> the result over their union, through softmax_lse. Validation first (every
// rule names its argument), then one pass over the rows; the arithmetic is the header's formula
// in double with one rounding into dst's dtypes, so the merge adds no error of its own beyond
// that rounding and is the same for any thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/parallel.h"
#include "common/views.h"
#include "openfia/attention_state.h"
#include "common/convert.h"

namespace openfia {
namespace {

using internal::CheckAliasOrDisjoint;
using internal::CheckNoSelfOverlap;
using internal::CheckWellFormed;
using internal::Str;

constexpr const char* kOp = "merge_attention_states";
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Name(DType t) { return std::string(DTypeName(t)); }

struct Dims {
  int64_t b = 0, n = 0, s = 0, d = 0;
};

void CheckOut(const TensorView& t, const char* name, const Dims* want, Dims* got) {
  CheckWellFormed(t, name);
  OPENFIA_CHECK(t.dim() == 4, name, "must be 4-D [B, N, S, D]", t.shape_string());
  OPENFIA_CHECK(t.dtype == DType::kFloat32 || t.dtype == DType::kFloat16 ||
                    t.dtype == DType::kBFloat16,
                name, "dtype must be float32, float16 or bfloat16", Name(t.dtype));
  const Dims d{t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]};
  if (want != nullptr)
    OPENFIA_CHECK(d.b == want->b && d.n == want->n && d.s == want->s && d.d == want->d, name,
                  Str("must have out_a's sizes [", want->b, ", ", want->n, ", ", want->s, ", ",
                      want->d, "]"),
                  t.shape_string());
  if (got != nullptr) *got = d;
}

void CheckLse(const TensorView& t, const char* name, const Dims& want) {
  CheckWellFormed(t, name);
  OPENFIA_CHECK(t.dim() == 3 || (t.dim() == 4 && t.sizes[3] == 1), name,
                "must be [B, N, S] or [B, N, S, 1]", t.shape_string());
  OPENFIA_CHECK(t.dtype == DType::kFloat32, name, "dtype must be float32", Name(t.dtype));
  OPENFIA_CHECK(t.sizes[0] == want.b && t.sizes[1] == want.n && t.sizes[2] == want.s, name,
                Str("must have out_a's B, N, S (", want.b, ", ", want.n, ", ", want.s, ")"),
                t.shape_string());
}

// The float nearest d with ties to odd when inexact (round to odd): rounding it once more to
// float16 / bfloat16 (nearest even) gives d rounded once to that format, since float has more
// than two extra bits of precision over both at every magnitude.
float RoundToOddF32(double d) {
  const float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  // Inexact: the float toward zero (one step down in magnitude from f when f rounded away;
  // f is then nonzero, possibly infinite) with its last bit set.
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1;
  return std::bit_cast<float>(u | 1u);
}

// A row of D elements (element stride `st`) of a view as doubles; the dtype is switched on once
// per row and the conversions are common/convert.h's inline ones (a per-element LoadDouble call
// costs ~12 ns / element).
void LoadRow(const TensorView& t, const char* p, int64_t st, int64_t D, double* out) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  switch (t.dtype) {
    case DType::kFloat32: {
      const auto* f = reinterpret_cast<const float*>(p);
      for (int64_t i = 0; i < D; ++i) out[i] = f[i * st];
      break;
    }
    case DType::kBFloat16:
      for (int64_t i = 0; i < D; ++i) out[i] = internal::cvt::BF16ToF32(h[i * st]);
      break;
    default:  // float16
      for (int64_t i = 0; i < D; ++i) out[i] = internal::cvt::F16ToF32(h[i * st]);
      break;
  }
}

void StoreRow(const TensorView& t, char* p, int64_t st, int64_t D, const double* v) {
  auto* h = reinterpret_cast<uint16_t*>(p);
  switch (t.dtype) {
    case DType::kFloat32: {
      auto* f = reinterpret_cast<float*>(p);
      for (int64_t i = 0; i < D; ++i) f[i * st] = static_cast<float>(v[i]);
      break;
    }
    case DType::kBFloat16:
      for (int64_t i = 0; i < D; ++i) h[i * st] = internal::cvt::F32ToBF16(RoundToOddF32(v[i]));
      break;
    default:  // float16
      for (int64_t i = 0; i < D; ++i) h[i * st] = internal::cvt::F32ToF16(RoundToOddF32(v[i]));
      break;
  }
}

char* At(const TensorView& t, int64_t b, int64_t n, int64_t s) {
  return static_cast<char*>(t.data) +
         (b * t.strides[0] + n * t.strides[1] + s * t.strides[2]) * ElementSize(t.dtype);
}

}  // namespace

void MergeAttentionStates(const AttentionState& a, const AttentionState& b,
                          const AttentionState& dst) {
  internal::OpScope scope(kOp);
  // ---- validate ----
  OPENFIA_CHECK(a.out.defined(), "out_a", "is required", "None");
  OPENFIA_CHECK(a.lse.defined(), "lse_a", "is required", "None");
  OPENFIA_CHECK(b.out.defined() == b.lse.defined(), b.out.defined() ? "lse_b" : "out_b",
                "out_b and lse_b are given together or both absent",
                b.out.defined() ? "lse_b None" : "out_b None");
  OPENFIA_CHECK(dst.out.defined(), "out", "is required", "None");
  OPENFIA_CHECK(dst.lse.defined(), "lse", "is required", "None");
  Dims dims;
  CheckOut(a.out, "out_a", nullptr, &dims);
  CheckLse(a.lse, "lse_a", dims);
  if (b.out.defined()) {
    CheckOut(b.out, "out_b", &dims, nullptr);
    CheckLse(b.lse, "lse_b", dims);
  }
  CheckOut(dst.out, "out", &dims, nullptr);
  CheckLse(dst.lse, "lse", dims);
  CheckNoSelfOverlap(dst.out, "out");
  CheckNoSelfOverlap(dst.lse, "lse");
  // out may be out_a or out_b itself, lse lse_a or lse_b; any other sharing is an error.
  CheckAliasOrDisjoint(dst.out, "out", a.out, "out_a", true);
  CheckAliasOrDisjoint(dst.out, "out", b.out, "out_b", true);
  CheckAliasOrDisjoint(dst.out, "out", a.lse, "lse_a", false);
  CheckAliasOrDisjoint(dst.out, "out", b.lse, "lse_b", false);
  CheckAliasOrDisjoint(dst.out, "out", dst.lse, "lse", false);
  CheckAliasOrDisjoint(dst.lse, "lse", a.lse, "lse_a", true);
  CheckAliasOrDisjoint(dst.lse, "lse", b.lse, "lse_b", true);
  CheckAliasOrDisjoint(dst.lse, "lse", a.out, "out_a", false);
  CheckAliasOrDisjoint(dst.lse, "lse", b.out, "out_b", false);
  if (a.out.numel() == 0 && a.lse.numel() == 0) return;

  // ---- merge, one (b, n) plane of S rows per item ----
  const bool has_b = b.out.defined();
  const int64_t D = dims.d;
  const int workers = internal::NumWorkers();
  std::vector<std::vector<double>> scratch(workers, std::vector<double>(2 * static_cast<size_t>(D)));
  internal::ParallelFor(dims.b * dims.n, [&](int64_t item, int worker) {
    const int64_t bi = item / dims.n, ni = item % dims.n;
    double* va = scratch[worker].data();
    double* vb = va + D;
    for (int64_t s = 0; s < dims.s; ++s) {
      const double la = *reinterpret_cast<const float*>(At(a.lse, bi, ni, s));
      const double lb = has_b ? *reinterpret_cast<const float*>(At(b.lse, bi, ni, s)) : kInf;
      double lse = 0.0, wa = 0.0, wb = 0.0;  // out = wa * out_a + wb * out_b
      if (std::isnan(la) || std::isnan(lb)) {
        lse = std::numeric_limits<double>::quiet_NaN();
      } else {
        const bool ea = std::isinf(la), eb = std::isinf(lb);  // empty rows (+-inf)
        if (ea && eb) {
          lse = kInf;
        } else if (eb) {
          lse = la, wa = 1.0;
        } else if (ea) {
          lse = lb, wb = 1.0;
        } else {
          const double m = std::max(la, lb);
          const double xa = std::exp(la - m), xb = std::exp(lb - m);
          const double sum = xa + xb;
          lse = m + std::log(sum);
          wa = xa / sum, wb = xb / sum;
        }
      }
      // A row's own value is copied as it is (-0 stays -0); no term is added for a weight 0.
      if (wa != 0.0) LoadRow(a.out, At(a.out, bi, ni, s), a.out.strides[3], D, va);
      if (wb != 0.0) LoadRow(b.out, At(b.out, bi, ni, s), b.out.strides[3], D, vb);
      if (std::isnan(lse)) {
        std::fill(va, va + D, lse);
      } else if (wa != 0.0 && wb != 0.0) {
        for (int64_t i = 0; i < D; ++i) va[i] = wa * va[i] + wb * vb[i];
      } else if (wa != 0.0) {
        for (int64_t i = 0; i < D; ++i) va[i] *= wa;
      } else if (wb != 0.0) {
        for (int64_t i = 0; i < D; ++i) va[i] = wb * vb[i];
      } else {
        std::fill(va, va + D, 0.0);
      }
      StoreRow(dst.out, At(dst.out, bi, ni, s), dst.out.strides[3], D, va);
      *reinterpret_cast<float*>(At(dst.lse, bi, ni, s)) = static_cast<float>(lse);
    }
  }, workers);
}

}  // namespace openfia
