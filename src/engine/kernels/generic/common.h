// openfia internal: what every kernel target shares besides the kernel interface: the constants
// of the probability exponential and the band / mask visibility of an item's cells (and the
// row-state rules of common/online_softmax.h).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/online_softmax.h"
#include "common/problem.h"
#include "engine/kernel.h"

namespace openfia::internal {

// The constants of every target's ExpP (the softmax probability's exp; the vector traits of each
// target): below kLo the result is 0; v = x log2e + kMagic holds
// n + 127 in its low mantissa bits (kMagic = 1.5 * 2^23 + 127); r = x - n ln2 in two steps
// (kLn2Hi + kLn2Lo); e^r = 1 + r (1 + r (kC[0] + r (kC[1] + ...))), a degree-6 fit with p(0) = 1.
namespace expp {
inline constexpr float kLo = -86.5f;
inline constexpr float kMagic = 12583039.f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;
inline constexpr float kLn2Lo = 1.428606765330187e-06f;
// Horner order, highest degree first: r^6 .. r^2 coefficients.
inline constexpr float kC[5] = {1.3846146175637841e-03f, 8.374120108783245e-03f,
                                4.1667960584163666e-02f, 1.6666431725025177e-01f,
                                4.999999403953552e-01f};
}  // namespace expp

// Batch b's band and the origins of its mask and pse rows/columns; hand-built problems may leave
// the per-batch vectors empty: no band, zero origins.
struct ItemOrigins {
  int64_t pre = Problem::kNoBand, next = Problem::kNoBand;
  int64_t mask_row0 = 0, mask_col0 = 0, pse_row0 = 0, pse_col0 = 0;
};
inline ItemOrigins OriginsOf(const Problem& p, int64_t b) {
  const auto at = [b](const std::vector<int64_t>& v, int64_t absent) {
    return v.empty() ? absent : v[b];
  };
  return {at(p.band_pre, Problem::kNoBand), at(p.band_next, Problem::kNoBand),
          at(p.mask_row0, 0), at(p.mask_col0, 0), at(p.pse_row0, 0), at(p.pse_col0, 0)};
}

// vis[qi * ld + n] = whether key jt0 + n is visible from logical query i0 + qi of
// batch b (band, then bit mask; docs/semantics.md 1.3), for qi < nq, n < nk: the element visibility
// of a boundary tile, shared by the heads of a query.
inline void TileVisibility(const Problem& p, int64_t b, const ItemOrigins& o, int64_t i0,
                           int64_t nq, int64_t jt0, int64_t nk, uint8_t* vis, int64_t ld) {
  for (int64_t qi = 0; qi < nq; ++qi) {
    const int64_t i = i0 + qi;
    uint8_t* vr = vis + qi * ld;
    const uint8_t* mrow =
        p.mask ? p.mask + b * p.mask_sb + (o.mask_row0 + i) * p.mask_ss : nullptr;
    for (int64_t n = 0; n < nk; ++n) {
      const int64_t j = jt0 + n;
      bool ok = j >= i - o.pre && j <= i + o.next;
      if (ok && mrow) ok = mrow[(o.mask_col0 + j) * p.mask_sk] == 0;
      vr[n] = ok;
    }
  }
}

}  // namespace openfia::internal
