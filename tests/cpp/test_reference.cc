// The fp64 reference (src/reference): property tests on hand-built canonical Problems.
//
// Every expectation is either a closed form computed here in double, or bitwise equality between
// two storages of the same logical problem (paged vs contiguous, prefix vs concatenation, NaN vs
// finite garbage in storage nobody may read). Tolerances derive from the output dtype's epsilon.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/numeric.h"
#include "common/problem.h"
#include "reference/reference.h"

namespace openfia::internal {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsF32 = 0x1p-24;  // unit roundoff of the f32 output
constexpr double kEpsBF16 = 0x1p-8;
constexpr double kEpsF16 = 0x1p-11;

// Typed storage of `n` elements of format `e` (int4: n nibbles).
struct Buffer {
  Elem elem = Elem::kF32;
  std::vector<uint8_t> bytes;
  Buffer() = default;
  Buffer(Elem e, int64_t n) : elem(e), bytes((n * ElemBits(e) + 7) / 8 + 1, 0) {}
  void* data() { return bytes.data(); }
  void Set(int64_t i, float v) {
    if (elem == Elem::kI4) {
      const int nib = static_cast<int>(v) & 0xF;
      uint8_t& byte = bytes[i >> 1];
      byte = (i & 1) ? static_cast<uint8_t>((byte & 0x0F) | (nib << 4))
                     : static_cast<uint8_t>((byte & 0xF0) | nib);
      return;
    }
    StoreFloat(bytes.data(), elem, i, v);
  }
  // Garbage nobody may read: NaN for float formats, the extreme value for integers.
  void Poison(int64_t n, bool nan) {
    for (int64_t i = 0; i < n; ++i) {
      if (elem == Elem::kI4) Set(i, nan ? -8.f : 0.f);
      else if (elem == Elem::kI8) Set(i, nan ? 127.f : 0.f);
      else Set(i, nan ? kNaN : 0.f);
    }
  }
  float Get(int64_t i) const { return LoadFloat(bytes.data(), elem, i); }
};

// An operand with unit d stride and no NZ split.
Operand Dense(const void* data, Elem e, int64_t sb, int64_t sh, int64_t ss) {
  Operand o;
  o.data = data;
  o.elem = e;
  o.sb = sb, o.sh = sh, o.ss = ss, o.sd = 1;
  return o;
}

// Cache storage the fixture can build for K and V.
enum class Store { kContiguousBNSD, kContiguousBSH, kPaged4D, kPaged3D, kPagedNZ };

// A small attention problem held as logical values (BNSD, already representable in their
// formats), lowered to a canonical Problem over one of several storages.
class Fixture {
 public:
  int64_t B, Hq, Hkv, Sq, Skv, D, Dv;  // Skv: logical key capacity (prefix included)
  Elem q_elem, kv_elem;
  std::vector<float> q, k, v;  // [B,Hq,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,Dv]
  std::vector<int64_t> q_len, kv_len;  // kv_len excludes the prefix
  int64_t q_offset = 0, kv_offset = 0;  // storage rows before the valid window (left padding)
  int64_t prefix_len = 0;
  int64_t d_rope = 0;  // the last d_rope dims of q/k live in separate rope operands
  Store store = Store::kContiguousBNSD;
  int64_t block_size = 0, nz_split = 0;
  bool poison_nan = true;  // NaN (or int extremes) in every storage cell no valid key/row uses
  uint32_t perm_seed = 7;
  double scale = 1.0;
  std::vector<int64_t> band_pre, band_next;
  std::vector<uint8_t> mask;  // [B, Sq, Skv] logical, or empty
  std::vector<float> pse;     // [B, Hq, Sq, Skv] logical, or empty
  std::vector<float> sinks;
  std::vector<float> qs2, qo2;
  Elem out_elem = Elem::kF32;
  bool incremental = false;

  // Buffers the Problem points into (kept alive by the fixture).
  Buffer qbuf, qrbuf, kbuf, vbuf, krbuf, kpre, vpre, krpre, pse_buf, outbuf;
  std::vector<int32_t> block_table;
  std::vector<float> lse, sink_buf;
  int64_t sq_store = 0;

  Fixture(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv, int64_t d, int64_t dv,
          Elem qe = Elem::kF32, Elem kve = Elem::kF32, uint32_t seed = 1)
      : B(b), Hq(hq), Hkv(hkv), Sq(sq), Skv(skv), D(d), Dv(dv), q_elem(qe), kv_elem(kve) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    auto fill = [&](std::vector<float>& x, int64_t n, Elem e) {
      x.resize(n);
      for (float& f : x) {
        if (e == Elem::kI8) f = std::round(uni(rng) * 100.f);
        else if (e == Elem::kI4) f = std::round(uni(rng) * 7.f);
        else f = RoundTo(uni(rng), e);
      }
    };
    fill(q, B * Hq * Sq * D, qe);
    fill(k, B * Hkv * Skv * D, kve);
    fill(v, B * Hkv * Skv * Dv, kve);
    q_len.assign(B, Sq);
    kv_len.assign(B, Skv);
  }

  float& Q(int64_t b, int64_t h, int64_t i, int64_t d) { return q[((b * Hq + h) * Sq + i) * D + d]; }
  float& K(int64_t b, int64_t h, int64_t j, int64_t d) {
    return k[((b * Hkv + h) * Skv + j) * D + d];
  }
  float& V(int64_t b, int64_t h, int64_t j, int64_t d) {
    return v[((b * Hkv + h) * Skv + j) * Dv + d];
  }
  // Makes every batch's first prefix_len keys equal to batch 0's (a shared prefix is shared).
  void SharePrefix() {
    for (int64_t b = 1; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t j = 0; j < prefix_len; ++j) {
          for (int64_t d = 0; d < D; ++d) K(b, h, j, d) = K(0, h, j, d);
          for (int64_t d = 0; d < Dv; ++d) V(b, h, j, d) = V(0, h, j, d);
        }
  }

  Problem Build() {
    Problem p;
    p.batch = B;
    p.h_q = Hq;
    p.h_kv = Hkv;
    p.d_qk = D - d_rope;
    p.d_rope = d_rope;
    p.d_v = Dv;
    p.incremental = incremental;
    p.prefix_len = prefix_len;
    sq_store = q_offset + Sq;
    p.s_q = sq_store;
    p.q_begin.assign(B, q_offset);
    p.q_len = q_len;
    p.kv_begin.assign(B, kv_offset);
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_LE(prefix_len + kv_len[b], Skv);
      p.kv_len.push_back(std::min(kv_len[b], Skv - prefix_len));
    }
    p.scale = scale;

    // Query (and rope) in BNSD with q_offset leading rows.
    auto make_q = [&](Buffer& buf, Operand& op, int64_t d0, int64_t dn) {
      buf = Buffer(q_elem, B * Hq * sq_store * dn);
      buf.Poison(B * Hq * sq_store * dn, poison_nan);
      op = Dense(buf.data(), q_elem, Hq * sq_store * dn, sq_store * dn, dn);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < q_len[b]; ++i)
            for (int64_t d = 0; d < dn; ++d)
              buf.Set(op.Offset(b, h, q_offset + i, d), Q(b, h, i, d0 + d));
    };
    make_q(qbuf, p.q, 0, D - d_rope);
    if (d_rope > 0) make_q(qrbuf, p.q_rope, D - d_rope, d_rope);

    // Paging: blocks of every batch in a random physical order, plus two unused blocks.
    int64_t nblocks = 0, max_blocks = 0;
    if (IsPaged()) {
      p.paged = true;
      p.block_size = block_size;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t nb = (kv_offset + p.kv_len[b] + block_size - 1) / block_size;
        nblocks += nb;
        max_blocks = std::max(max_blocks, nb);
      }
      nblocks += 2;
      std::vector<int32_t> phys(nblocks);
      std::iota(phys.begin(), phys.end(), 0);
      std::shuffle(phys.begin(), phys.end(), std::mt19937(perm_seed));
      p.bt_stride = max_blocks + 1;
      block_table.assign(B * p.bt_stride, -1);  // unused entries are -1, as in the goldens
      int64_t next = 0;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t nb = (kv_offset + p.kv_len[b] + block_size - 1) / block_size;
        for (int64_t n = 0; n < nb; ++n) block_table[b * p.bt_stride + n] = phys[next++];
      }
      p.block_table = block_table.data();
    }
    const int64_t tokens = kv_offset + Skv - prefix_len;  // contiguous token capacity

    auto make_kv = [&](Buffer& buf, Buffer& pre, KvOperand& kv, bool is_v, int64_t d0,
                       int64_t dn) {
      // NZ pads d up to a multiple of the split (D/16 tiles on the NPU).
      const int64_t dp = store == Store::kPagedNZ ? (dn + nz_split - 1) / nz_split * nz_split : dn;
      const int64_t n = IsPaged() ? nblocks * Hkv * block_size * dp : B * Hkv * tokens * dn;
      buf = Buffer(kv_elem, n);
      buf.Poison(n, poison_nan);
      Operand& c = kv.cache;
      c.data = buf.data();
      c.elem = kv_elem;
      switch (store) {
        case Store::kContiguousBNSD:
          c.sb = Hkv * tokens * dn, c.sh = tokens * dn, c.ss = dn, c.sd = 1;
          break;
        case Store::kContiguousBSH:
          c.sb = tokens * Hkv * dn, c.ss = Hkv * dn, c.sh = dn, c.sd = 1;
          break;
        case Store::kPaged4D:
          c.sb = Hkv * block_size * dn, c.sh = block_size * dn, c.ss = dn, c.sd = 1;
          break;
        case Store::kPaged3D:
          c.sb = block_size * Hkv * dn, c.ss = Hkv * dn, c.sh = dn, c.sd = 1;
          break;
        case Store::kPagedNZ:  // (blocknum, N, D/c, block_size, c)
          c.sb = Hkv * dp * block_size, c.sh = dp * block_size, c.sd_outer = block_size * nz_split,
          c.ss = nz_split, c.sd = 1, c.d_split = nz_split;
          break;
      }
      if (prefix_len > 0) {
        pre = Buffer(kv_elem, Hkv * prefix_len * dn);
        kv.prefix = Dense(pre.data(), kv_elem, 0, prefix_len * dn, dn);
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t j = 0; j < prefix_len + p.kv_len[b]; ++j)
            for (int64_t d = 0; d < dn; ++d) {
              const float x = is_v ? V(b, h, j, d0 + d) : K(b, h, j, d0 + d);
              if (j < prefix_len) {
                pre.Set(kv.prefix.Offset(0, h, j, d), x);
                continue;
              }
              const int64_t t = kv_offset + j - prefix_len;
              int64_t sb = b, s = t;
              if (IsPaged()) sb = block_table[b * p.bt_stride + t / block_size], s = t % block_size;
              buf.Set(c.Offset(sb, h, s, d), x);
            }
    };
    make_kv(kbuf, kpre, p.k, false, 0, D - d_rope);
    make_kv(vbuf, vpre, p.v, true, 0, Dv);
    if (d_rope > 0) make_kv(krbuf, krpre, p.k_rope, false, D - d_rope, d_rope);

    if (!band_pre.empty()) p.band_pre = band_pre;
    if (!band_next.empty()) p.band_next = band_next;
    if (!mask.empty()) {
      // Mask cells are addressed at (q_offset + i, col) like the NPU's absolute coordinates.
      p.mask = mask.data();
      p.mask_sb = Sq * Skv, p.mask_ss = Skv, p.mask_sk = 1;
      p.mask_row0.assign(B, 0);
      p.mask_col0.assign(B, 0);
    }
    if (!pse.empty()) {
      pse_buf = Buffer(Elem::kF32, pse.size());
      for (size_t n = 0; n < pse.size(); ++n) pse_buf.Set(n, pse[n]);
      p.pse = pse_buf.data();
      p.pse_sb = Hq * Sq * Skv, p.pse_sh = Sq * Skv, p.pse_ss = Skv, p.pse_sk = 1;
      p.pse_row0.assign(B, 0);
      p.pse_col0.assign(B, 0);
    }
    if (!sinks.empty()) p.sinks = sinks.data();
    p.quant_scale2 = qs2;
    p.quant_offset2 = qo2;
    p.out_elem = qs2.empty() ? out_elem : Elem::kI8;
    const int64_t nout = B * Hq * sq_store * Dv;
    outbuf = Buffer(p.out_elem, nout);
    for (int64_t n = 0; n < nout; ++n) outbuf.Set(n, p.out_elem == Elem::kI8 ? 99.f : -777.f);
    p.out = outbuf.data();
    p.out_sb = Hq * sq_store * Dv, p.out_sh = sq_store * Dv, p.out_ss = Dv, p.out_sd = 1;
    lse.assign(B * Hq * sq_store, -777.f);
    p.lse = lse.data();
    p.lse_sb = Hq * sq_store, p.lse_sh = sq_store, p.lse_ss = 1;
    return p;
  }

  bool IsPaged() const { return store >= Store::kPaged4D; }
  void Run() {
    Problem p = Build();
    RunReference(p);
  }
  // Output and lse of logical row i.
  float Out(int64_t b, int64_t h, int64_t i, int64_t d) const {
    return outbuf.Get(((b * Hq + h) * sq_store + q_offset + i) * Dv + d);
  }
  float Lse(int64_t b, int64_t h, int64_t i) const {
    return lse[(b * Hq + h) * sq_store + q_offset + i];
  }
  // Every output/lse element as raw bits, for bitwise comparisons.
  std::vector<uint8_t> OutBytes() const { return outbuf.bytes; }
};

void ExpectBitwiseEqual(const Fixture& a, const Fixture& b) {
  ASSERT_EQ(a.B * a.Hq * a.Sq, b.B * b.Hq * b.Sq);
  for (int64_t bb = 0; bb < a.B; ++bb)
    for (int64_t h = 0; h < a.Hq; ++h)
      for (int64_t i = 0; i < a.Sq; ++i) {
        for (int64_t d = 0; d < a.Dv; ++d) {
          const float x = a.Out(bb, h, i, d), y = b.Out(bb, h, i, d);
          ASSERT_EQ(std::memcmp(&x, &y, sizeof x), 0)
              << "out b=" << bb << " h=" << h << " i=" << i << " d=" << d << ": " << x << " vs "
              << y;
        }
        const float x = a.Lse(bb, h, i), y = b.Lse(bb, h, i);
        ASSERT_EQ(std::memcmp(&x, &y, sizeof x), 0) << "lse b=" << bb << " h=" << h << " i=" << i;
      }
}

// Independent dense oracle over the logical values (f32 query: no P rounding), double.
// Returns out [B,Hq,Sq,Dv] and lse [B,Hq,Sq].
void Oracle(const Fixture& f, std::vector<double>* out, std::vector<double>* lse) {
  out->assign(f.B * f.Hq * f.Sq * f.Dv, 0.0);
  lse->assign(f.B * f.Hq * f.Sq, kInf);
  const int64_t group = f.Hq / f.Hkv;
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t h = 0; h < f.Hq; ++h)
      for (int64_t i = 0; i < f.q_len[b]; ++i) {
        const int64_t hk = h / group, total = f.prefix_len + f.kv_len[b];
        std::vector<double> s(total, -kInf);
        std::vector<bool> vis(total, false);
        double m = f.sinks.empty() ? -kInf : f.sinks[h];
        bool any = false;
        for (int64_t j = 0; j < total; ++j) {
          if (!f.band_pre.empty() && j < i - f.band_pre[b]) continue;
          if (!f.band_next.empty() && j > i + f.band_next[b]) continue;
          if (!f.mask.empty() && f.mask[(b * f.Sq + i) * f.Skv + j]) continue;
          double dot = 0;
          for (int64_t d = 0; d < f.D; ++d)
            dot += double(f.q[((b * f.Hq + h) * f.Sq + i) * f.D + d]) *
                   f.k[((b * f.Hkv + hk) * f.Skv + j) * f.D + d];
          s[j] = dot * f.scale +
                 (f.pse.empty() ? 0.0 : f.pse[((b * f.Hq + h) * f.Sq + i) * f.Skv + j]);
          vis[j] = any = true;
          m = std::max(m, s[j]);
        }
        if (!any) continue;
        double l = f.sinks.empty() ? 0.0 : std::exp(f.sinks[h] - m);
        std::vector<double> o(f.Dv, 0.0);
        for (int64_t j = 0; j < total; ++j) {
          if (!vis[j]) continue;
          const double e = std::exp(s[j] - m);
          l += e;
          for (int64_t d = 0; d < f.Dv; ++d)
            o[d] += e * f.v[((b * f.Hkv + hk) * f.Skv + j) * f.Dv + d];
        }
        for (int64_t d = 0; d < f.Dv; ++d)
          (*out)[((b * f.Hq + h) * f.Sq + i) * f.Dv + d] = o[d] / l;
        (*lse)[(b * f.Hq + h) * f.Sq + i] = std::log(l) + m;
      }
}

// f32 output vs the oracle: the reference differs by its f32 rounding (1 ulp relative) plus a
// reassociation of the d_v-long weighted sum, bounded by n*eps64 * max|v| (negligible): 2 eps32
// relative to the row's largest |v| covers both.
void ExpectMatchesOracle(const Fixture& f) {
  std::vector<double> out, lse;
  Oracle(f, &out, &lse);
  double vmax = 0;
  for (float x : f.v) vmax = std::max(vmax, double(std::fabs(x)));
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t h = 0; h < f.Hq; ++h)
      for (int64_t i = 0; i < f.Sq; ++i) {
        const bool valid = i < f.q_len[b];
        for (int64_t d = 0; d < f.Dv; ++d) {
          const double want = valid ? out[((b * f.Hq + h) * f.Sq + i) * f.Dv + d] : -777.0;
          EXPECT_NEAR(f.Out(b, h, i, d), want, 2 * kEpsF32 * std::max(vmax, std::fabs(want)))
              << "b=" << b << " h=" << h << " i=" << i << " d=" << d;
        }
        const double want = valid ? lse[(b * f.Hq + h) * f.Sq + i] : -777.0;
        if (std::isinf(want)) {
          EXPECT_EQ(f.Lse(b, h, i), want);
        } else {
          EXPECT_NEAR(f.Lse(b, h, i), want, 2 * kEpsF32 * std::max(1.0, std::fabs(want)));
        }
      }
}

// ---- core semantics --------------------------------------------------------------------------

TEST(Reference, MatchesDenseOracleWithBandMaskPseGqa) {
  Fixture f(2, 4, 2, 7, 9, 5, 3);
  f.scale = 0.7;
  f.q_len = {7, 4};
  f.kv_len = {9, 6};
  f.band_pre = {2, 100};
  f.band_next = {1, 0};
  std::mt19937 rng(3);
  f.mask.resize(f.B * f.Sq * f.Skv);
  for (auto& m : f.mask) m = rng() % 5 == 0;
  f.pse.resize(f.B * f.Hq * f.Sq * f.Skv);
  for (auto& x : f.pse) x = float(rng() % 100) / 50.f - 1.f;
  f.Run();
  ExpectMatchesOracle(f);
}

TEST(Reference, IdenticalValueRowsGiveThatRow) {
  Fixture f(1, 2, 1, 3, 11, 4, 5);
  for (int64_t j = 0; j < f.Skv; ++j)
    for (int64_t d = 0; d < f.Dv; ++d) f.V(0, 0, j, d) = f.V(0, 0, 0, d);
  f.Run();
  // o = v * sum(p)/l with sum(p) == l up to double reassociation: v within 1 f32 ulp.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t d = 0; d < f.Dv; ++d)
        EXPECT_NEAR(f.Out(0, h, i, d), f.V(0, 0, 0, d), kEpsF32 * std::fabs(f.V(0, 0, 0, d)));
}

TEST(Reference, SingleVisibleKeyGivesItsValueRowAndScore) {
  for (Elem e : {Elem::kF32, Elem::kF16, Elem::kBF16}) {
    Fixture f(1, 1, 1, 6, 6, 8, 8, e, e);
    f.out_elem = e;
    f.scale = 0.25;
    f.band_pre = {0};
    f.band_next = {0};  // the diagonal: key i only
    f.Run();
    for (int64_t i = 0; i < 6; ++i) {
      double dot = 0;
      for (int64_t d = 0; d < f.D; ++d) dot += double(f.Q(0, 0, i, d)) * f.K(0, 0, i, d);
      // P = exp(0) = 1 exactly, l = 1: the output is the V row, exactly representable.
      for (int64_t d = 0; d < f.Dv; ++d) EXPECT_EQ(f.Out(0, 0, i, d), f.V(0, 0, i, d));
      EXPECT_NEAR(f.Lse(0, 0, i), dot * f.scale, kEpsF32 * std::max(1.0, std::fabs(dot)));
    }
  }
}

TEST(Reference, TwoKeysClosedFormSoftmax) {
  Fixture f(1, 1, 1, 1, 2, 1, 2);
  const double a = 1.5, c = -0.75;  // scores of key 0 and key 1
  f.Q(0, 0, 0, 0) = 1.f;
  f.K(0, 0, 0, 0) = float(a);
  f.K(0, 0, 1, 0) = float(c);
  f.V(0, 0, 0, 0) = 2.f, f.V(0, 0, 0, 1) = -1.f;
  f.V(0, 0, 1, 0) = 0.5f, f.V(0, 0, 1, 1) = 3.f;
  f.Run();
  const double w0 = 1 / (1 + std::exp(c - a)), w1 = 1 - w0;
  const double o0 = w0 * 2 + w1 * 0.5, o1 = w0 * -1 + w1 * 3;
  EXPECT_NEAR(f.Out(0, 0, 0, 0), o0, kEpsF32 * 2);
  EXPECT_NEAR(f.Out(0, 0, 0, 1), o1, kEpsF32 * 3);
  EXPECT_NEAR(f.Lse(0, 0, 0), std::log(std::exp(a) + std::exp(c)), kEpsF32 * 2);
}

TEST(Reference, GqaHeadsOfOneGroupWithSameQueryAgree) {
  Fixture f(1, 6, 2, 4, 7, 3, 3);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t d = 0; d < 3; ++d)
      for (int64_t h : {1, 2}) f.Q(0, h, i, d) = f.Q(0, 0, i, d);  // group 0 = heads 0-2
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t d = 0; d < 3; ++d) f.Q(0, 3, i, d) = f.Q(0, 0, i, d);  // head 3: group 1
  f.Run();
  bool differs = false;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t d = 0; d < 3; ++d) {
      EXPECT_EQ(f.Out(0, 1, i, d), f.Out(0, 0, i, d));
      EXPECT_EQ(f.Out(0, 2, i, d), f.Out(0, 0, i, d));
      differs |= f.Out(0, 3, i, d) != f.Out(0, 0, i, d);  // other KV head, other result
    }
  EXPECT_TRUE(differs);
  ExpectMatchesOracle(f);
}

Fixture PagingCase(Elem e) {
  Fixture f(3, 4, 2, 5, 13, 8, 6, e, e, 11);
  f.out_elem = e;
  f.kv_len = {13, 1, 7};
  f.q_len = {5, 3, 0};
  f.band_next = {0, 12, 3};
  f.band_pre = {Problem::kNoBand, 2, Problem::kNoBand};
  return f;
}

TEST(Reference, PagedEqualsContiguousBitwise) {
  for (Elem e : {Elem::kF32, Elem::kBF16}) {
    Fixture base = PagingCase(e);
    base.Run();
    for (Store s : {Store::kPaged4D, Store::kPaged3D, Store::kPagedNZ})
      for (int64_t bs : {3, 5}) {
        Fixture f = PagingCase(e);
        f.store = s;
        f.block_size = bs;
        f.nz_split = 4;  // D = 8 = 2 x 4
        f.perm_seed = uint32_t(bs * 10 + int(s));
        f.Run();
        SCOPED_TRACE(::testing::Message() << "store " << int(s) << " block " << bs);
        ExpectBitwiseEqual(base, f);
      }
    Fixture bsh = PagingCase(e);
    bsh.store = Store::kContiguousBSH;
    bsh.Run();
    ExpectBitwiseEqual(base, bsh);
  }
}

TEST(Reference, PrefixPlusCacheEqualsConcatenationBitwise) {
  Fixture base(2, 2, 1, 4, 10, 4, 4, Elem::kF16, Elem::kF16, 5);
  base.out_elem = Elem::kF16;
  base.prefix_len = 3;
  base.SharePrefix();
  base.prefix_len = 0;
  base.kv_len = {10, 6};
  base.band_next = {6, 3};  // bottom-right causal: S2 - S1
  Fixture pre = base;
  base.Run();
  pre.prefix_len = 3;
  pre.kv_len = {7, 3};
  pre.Run();
  ExpectBitwiseEqual(base, pre);
  // And with a paged cache behind the prefix.
  Fixture paged = pre;
  paged.store = Store::kPaged4D;
  paged.block_size = 3;
  paged.Run();
  ExpectBitwiseEqual(base, paged);
}

TEST(Reference, RopeSplitEqualsConcatenatedHeadDim) {
  Fixture base(1, 4, 1, 3, 9, 8, 5, Elem::kBF16, Elem::kBF16, 9);
  Fixture rope = base;
  base.Run();
  rope.d_rope = 3;
  rope.store = Store::kPaged4D;
  rope.block_size = 4;
  rope.Run();
  ExpectBitwiseEqual(base, rope);
}

// Sparse per-row key selection (problem.h key_offset/key_index) for a fixture: row r = (base_b
// + i) * h_kv + hk attends `sel(b, hk, i)`.
template <typename Sel>
void SetSelection(const Fixture& f, Problem* p, Sel sel) {
  p->key_offset = {0};
  p->q_row_base.clear();
  int64_t base = 0;
  for (int64_t b = 0; b < f.B; ++b) {
    p->q_row_base.push_back(base);
    base += f.q_len[b];
  }
  for (int64_t b = 0; b < f.B; ++b)
    for (int64_t i = 0; i < f.q_len[b]; ++i)
      for (int64_t hk = 0; hk < f.Hkv; ++hk) {
        for (int32_t t : sel(b, hk, i)) p->key_index.push_back(t);
        p->key_offset.push_back(int64_t(p->key_index.size()));
      }
}

TEST(Reference, SparseSelectionEqualsTheSameKeysByMask) {
  // Ascending selection of the keys a mask would leave: bitwise the masked problem. The band and
  // mask of the Problem are ignored under selection, so a hostile band is set on that side.
  Fixture masked(2, 2, 1, 3, 7, 4, 4, Elem::kBF16, Elem::kBF16, 31);
  masked.q_len = {3, 2};
  masked.kv_len = {7, 5};
  std::mt19937 rng(5);
  masked.mask.assign(2 * 3 * 7, 0);
  for (auto& m : masked.mask) m = rng() % 3 == 0;
  Fixture sel = masked;
  masked.Run();
  sel.mask.clear();
  sel.band_pre = {-5, -5};  // would hide every key if it applied
  sel.band_next = {-5, -5};
  Problem p = sel.Build();
  SetSelection(sel, &p, [&](int64_t b, int64_t, int64_t i) {
    std::vector<int32_t> keys;
    for (int32_t j = 0; j < masked.kv_len[b]; ++j)
      if (!masked.mask[(b * 3 + i) * 7 + j]) keys.push_back(j);
    return keys;
  });
  RunReference(p);
  ExpectBitwiseEqual(masked, sel);
}

TEST(Reference, SparseSelectionCountsDuplicatesAndIsPerKvHead) {
  // KV head 0 row selects {0, 0, 1}: weights 2e^a : e^c. KV head 1 selects {1}: its V row.
  // Token 2 is never selected and holds NaN.
  Fixture f(1, 2, 2, 1, 3, 1, 1);
  const double a = 0.5, c = -0.25;
  f.Q(0, 0, 0, 0) = f.Q(0, 1, 0, 0) = 1.f;
  for (int64_t h = 0; h < 2; ++h) {
    f.K(0, h, 0, 0) = float(a), f.K(0, h, 1, 0) = float(c), f.K(0, h, 2, 0) = kNaN;
    f.V(0, h, 0, 0) = 1.f, f.V(0, h, 1, 0) = -3.f, f.V(0, h, 2, 0) = kNaN;
  }
  Problem p = f.Build();
  SetSelection(f, &p, [](int64_t, int64_t hk, int64_t) {
    return hk == 0 ? std::vector<int32_t>{0, 0, 1} : std::vector<int32_t>{1};
  });
  RunReference(p);
  const double w0 = 2 * std::exp(a) / (2 * std::exp(a) + std::exp(c));
  EXPECT_NEAR(f.Out(0, 0, 0, 0), w0 - 3 * (1 - w0), 4 * kEpsF32);
  EXPECT_NEAR(f.Lse(0, 0, 0), std::log(2 * std::exp(a) + std::exp(c)), 2 * kEpsF32);
  EXPECT_EQ(f.Out(0, 1, 0, 0), -3.f);
  EXPECT_NEAR(f.Lse(0, 1, 0), c, kEpsF32);
}

TEST(Reference, SecondKeySourceEqualsOneConcatenatedSourceBitwise) {
  // Keys [0, 4) of each batch stay in k/v (paged, block size 3); keys [4, 7) move to a second,
  // paged source with its own block table and block size 2 (problem.h k2/v2). Selections mixing
  // both sources, in any order and with duplicates, give bitwise the single-source result. Every
  // storage cell of the second source that no selection names holds NaN.
  Fixture whole(2, 4, 2, 3, 7, 5, 3, Elem::kBF16, Elem::kBF16, 41);
  whole.sinks = {0.5f, -1.f, 2.f, 0.f};
  Fixture split = whole;
  auto sel = [](int64_t b, int64_t hk, int64_t i) {
    std::vector<int32_t> keys = {int32_t(6 - i), 0, int32_t((b + hk + i) % 7), 5, 3};
    if (hk == 1) keys.push_back(4);
    return keys;
  };
  Problem pw = whole.Build();
  SetSelection(whole, &pw, sel);
  RunReference(pw);

  constexpr int64_t kN1 = 4, kN2 = 3, kBs2 = 2;
  split.store = Store::kPaged4D;
  split.block_size = 3;
  split.kv_len = {kN1, kN1};
  Problem p = split.Build();
  SetSelection(split, &p, sel);
  p.key_source.assign(p.key_index.size(), 0);
  for (size_t n = 0; n < p.key_index.size(); ++n)
    if (p.key_index[n] >= kN1) p.key_index[n] -= kN1, p.key_source[n] = 1;
  // Second source: blocks {3, 0} for batch 0 and {2, 4} for batch 1 of 5; block 1 unused.
  std::vector<int32_t> table2 = {3, 0, -1, 2, 4, -1};
  const int64_t n2 = 5 * whole.Hkv * kBs2;
  Buffer k2(Elem::kBF16, n2 * whole.D), v2(Elem::kBF16, n2 * whole.Dv);
  k2.Poison(n2 * whole.D, true);
  v2.Poison(n2 * whole.Dv, true);
  p.k2.cache = Dense(k2.data(), Elem::kBF16, whole.Hkv * kBs2 * whole.D, kBs2 * whole.D, whole.D);
  p.v2.cache =
      Dense(v2.data(), Elem::kBF16, whole.Hkv * kBs2 * whole.Dv, kBs2 * whole.Dv, whole.Dv);
  p.block_table2 = table2.data();
  p.bt_stride2 = 3;
  p.block_size2 = kBs2;
  p.kv2_len = {kN2, kN2};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < whole.Hkv; ++h)
      for (int64_t t = 0; t < kN2; ++t) {
        const int64_t blk = table2[b * 3 + t / kBs2], row = t % kBs2;
        for (int64_t d = 0; d < whole.D; ++d)
          k2.Set(p.k2.cache.Offset(blk, h, row, d), whole.K(b, h, kN1 + t, d));
        for (int64_t d = 0; d < whole.Dv; ++d)
          v2.Set(p.v2.cache.Offset(blk, h, row, d), whole.V(b, h, kN1 + t, d));
      }
  RunReference(p);
  ExpectBitwiseEqual(whole, split);
}

TEST(Reference, SecondKeySourceContiguousAndUnreadTokensDoNotLeak) {
  // Without block_table2 the second source is (b, h, t). Tokens the lists do not name hold NaN
  // (token 1 of batch 0, past kv2_len in batch 1); a row whose list is empty gets 0 / +inf.
  Fixture f(2, 1, 1, 2, 2, 2, 2, Elem::kF32, Elem::kF32, 43);
  Problem p = f.Build();
  p.key_offset = {0, 2, 2, 3, 4};  // rows (b, i): (0,0): 2 keys, (0,1): none, (1,0), (1,1)
  p.q_row_base = {0, 2};
  p.key_index = {0, 1, 0, 0};
  p.key_source = {1, 0, 1, 0};
  std::vector<float> k2(2 * 3 * 2, kNaN), v2(2 * 3 * 2, kNaN);  // [b, t < 3, d]
  auto at = [](int64_t b, int64_t t, int64_t d) { return (b * 3 + t) * 2 + d; };
  k2[at(0, 0, 0)] = 0.25f, k2[at(0, 0, 1)] = -0.5f, v2[at(0, 0, 0)] = 2.f, v2[at(0, 0, 1)] = 1.f;
  k2[at(1, 0, 0)] = 1.f, k2[at(1, 0, 1)] = 0.f, v2[at(1, 0, 0)] = -1.f, v2[at(1, 0, 1)] = 3.f;
  p.k2.cache = Dense(k2.data(), Elem::kF32, 6, 0, 2);
  p.v2.cache = Dense(v2.data(), Elem::kF32, 6, 0, 2);
  p.kv2_len = {3, 1};
  RunReference(p);
  // Row (1, 0): a single key: its value row, lse = its score.
  EXPECT_EQ(f.Out(1, 0, 0, 0), -1.f);
  EXPECT_EQ(f.Out(1, 0, 0, 1), 3.f);
  EXPECT_NEAR(f.Lse(1, 0, 0), f.Q(1, 0, 0, 0), 2 * kEpsF32);
  // Row (0, 0): second-source token 0 and first-source token 1 in one softmax.
  const double s0 = double(f.Q(0, 0, 0, 0)) * 0.25 - double(f.Q(0, 0, 0, 1)) * 0.5;
  const double s1 = double(f.Q(0, 0, 0, 0)) * f.K(0, 0, 1, 0) +
                    double(f.Q(0, 0, 0, 1)) * f.K(0, 0, 1, 1);
  const double w0 = 1 / (1 + std::exp(s1 - s0));
  for (int64_t d = 0; d < 2; ++d)
    EXPECT_NEAR(f.Out(0, 0, 0, d), w0 * v2[at(0, 0, d)] + (1 - w0) * f.V(0, 0, 1, d),
                4 * kEpsF32 * 3);
  EXPECT_NEAR(f.Lse(0, 0, 0), std::max(s0, s1) + std::log1p(std::exp(-std::fabs(s0 - s1))),
              4 * kEpsF32);
  EXPECT_EQ(f.Out(0, 0, 1, 0), 0.f);
  EXPECT_EQ(f.Lse(0, 0, 1), float(kInf));
}

TEST(Reference, TensorListEqualsContiguousBitwise) {
  Fixture base(3, 2, 2, 2, 6, 4, 3, Elem::kF16, Elem::kF16, 23);
  base.kv_len = {6, 2, 4};
  Fixture list = base;
  base.Run();
  Problem p = list.Build();
  // Per-batch base pointers; the batch stride must then be ignored.
  for (KvOperand* kv : {&p.k, &p.v}) {
    const auto* data = static_cast<const uint16_t*>(kv->cache.data);
    for (int64_t b = 0; b < 3; ++b) kv->cache.batch_data.push_back(data + b * kv->cache.sb);
    kv->cache.sb = 1 << 30;
  }
  RunReference(p);
  ExpectBitwiseEqual(base, list);
}

TEST(Reference, PaddingOffsetsAndNaNInUnreadStorageDoNotLeak) {
  // NaN in: left-padding rows of q and KV, tokens past kv_len, unused pages and table entries,
  // and in logical keys that the band or the mask hides from every row.
  auto make = [](bool nan) {
    Fixture f(2, 2, 2, 4, 9, 4, 4, Elem::kF32, Elem::kF32, 21);
    f.q_offset = 2;
    f.kv_offset = 3;
    f.q_len = {4, 2};
    f.kv_len = {8, 5};
    f.band_pre = {1, 1};
    f.band_next = {2, 2};  // row i sees [i-1, i+2]: keys >= 6 never visible
    f.mask.assign(f.B * f.Sq * f.Skv, 0);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 4; ++i) f.mask[(b * 4 + i) * 9 + 1] = 1;  // key 1 masked for all
    f.store = Store::kPaged4D;
    f.block_size = 3;
    f.poison_nan = nan;
    const float junk = nan ? kNaN : 0.5f;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j : {1, 6, 7})
          for (int64_t d = 0; d < 4; ++d) f.K(b, h, j, d) = f.V(b, h, j, d) = junk;
    return f;
  };
  Fixture with_nan = make(true), clean = make(false);
  with_nan.Run();
  clean.Run();
  ExpectBitwiseEqual(with_nan, clean);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < with_nan.q_len[b]; ++i)
        for (int64_t d = 0; d < 4; ++d) EXPECT_FALSE(std::isnan(with_nan.Out(b, h, i, d)));
  // Rows outside q_len keep the caller's pre-fill.
  EXPECT_EQ(with_nan.Out(1, 0, 3, 0), -777.f);
  EXPECT_EQ(with_nan.Lse(1, 1, 2), -777.f);
}

TEST(Reference, FullyMaskedRowIsZeroWithInfiniteLse) {
  Fixture f(1, 2, 1, 3, 4, 4, 4);
  f.mask.assign(3 * 4, 0);
  for (int64_t j = 0; j < 4; ++j) f.mask[1 * 4 + j] = 1;  // row 1 fully masked
  f.K(0, 0, 0, 0) = kNaN;  // visible to rows 0 and 2: they turn NaN, row 1 must not
  f.Run();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < 4; ++d) {
      EXPECT_EQ(f.Out(0, h, 1, d), 0.f);
      EXPECT_TRUE(std::isnan(f.Out(0, h, 0, d)));  // NaN in a visible key makes its row NaN
      EXPECT_TRUE(std::isnan(f.Out(0, h, 2, d)));
    }
    EXPECT_EQ(f.Lse(0, h, 1), float(kInf));
    EXPECT_TRUE(std::isnan(f.Lse(0, h, 0)));
  }
  // Geometrically empty rows (band) and empty batches behave the same.
  Fixture g(2, 1, 1, 3, 4, 2, 2);
  g.band_pre = {-1, Problem::kNoBand};  // row i sees [i+1, i]: nothing
  g.band_next = {0, Problem::kNoBand};
  g.kv_len = {4, 0};
  g.Run();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(g.Out(b, 0, i, 0), 0.f);
      EXPECT_EQ(g.Lse(b, 0, i), float(kInf));
    }
}

TEST(Reference, SinksEnterTheDenominator) {
  // One key with score a and a sink c: o = v * e^a / (e^a + e^c), lse = log(e^a + e^c).
  Fixture f(1, 2, 1, 1, 1, 1, 2);
  const double a = 0.5;
  f.Q(0, 0, 0, 0) = f.Q(0, 1, 0, 0) = 1.f;
  f.K(0, 0, 0, 0) = float(a);
  f.V(0, 0, 0, 0) = 1.f, f.V(0, 0, 0, 1) = -2.f;
  f.sinks = {1.25f, 1000.f};
  f.Run();
  const double w = 1 / (1 + std::exp(1.25 - a));
  EXPECT_NEAR(f.Out(0, 0, 0, 0), w, 2 * kEpsF32);
  EXPECT_NEAR(f.Out(0, 0, 0, 1), -2 * w, 4 * kEpsF32);
  EXPECT_NEAR(f.Lse(0, 0, 0), std::log(std::exp(a) + std::exp(1.25)), 4 * kEpsF32);
  // A huge sink drives the output to e^(a - 1000) ~ 0 and lse to the sink.
  EXPECT_EQ(f.Out(0, 1, 0, 0), 0.f);
  EXPECT_EQ(f.Out(0, 1, 0, 1), -0.f);
  EXPECT_NEAR(f.Lse(0, 1, 0), 1000.0, 1000.0 * kEpsF32);
}

TEST(Reference, Bf16RoundsUnnormalizedProbabilitiesBeforePV) {
  // Keys with scores a and 0 (a > 0): p = {1, e^-a}; V = {0, 1}: o = P1 / (1 + e^-a), where
  // P1 = bf16(e^-a) on the NPU path and e^-a in exact arithmetic. l is never rounded.
  Fixture f(1, 1, 1, 1, 2, 1, 1, Elem::kBF16, Elem::kBF16);
  const float a = RoundTo(0.3f, Elem::kBF16);
  f.Q(0, 0, 0, 0) = 1.f;
  f.K(0, 0, 0, 0) = a;
  f.K(0, 0, 1, 0) = 0.f;
  f.V(0, 0, 0, 0) = 0.f;
  f.V(0, 0, 1, 0) = 1.f;
  f.out_elem = Elem::kF32;
  f.Run();
  const double e = std::exp(-double(a));
  const double rounded = RoundTo(float(e), Elem::kBF16) / (1 + e);
  const double exact = e / (1 + e);
  ASSERT_GT(std::fabs(rounded - exact), 100 * kEpsF32);  // the case does distinguish them
  EXPECT_NEAR(f.Out(0, 0, 0, 0), rounded, 2 * kEpsF32);
  // f16 query: same rounding with f16 precision; f32 query: none.
  Fixture g = f;
  g.q_elem = g.kv_elem = Elem::kF32;
  g.Run();
  EXPECT_NEAR(g.Out(0, 0, 0, 0), exact, 2 * kEpsF32);
}

TEST(Reference, HalfOutputsRoundToNearestEven) {
  // Identical V rows with a value exactly halfway between two bf16/f16 numbers would need an
  // f32 V; instead check the stored output is the nearest representable value of the exact one.
  for (Elem e : {Elem::kF16, Elem::kBF16}) {
    Fixture f(1, 1, 1, 3, 5, 4, 4, e, e, 2);
    f.out_elem = e;
    f.Run();
    Fixture g = f;
    g.out_elem = Elem::kF32;
    g.Run();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t d = 0; d < 4; ++d) EXPECT_EQ(f.Out(0, 0, i, d), RoundTo(g.Out(0, 0, i, d), e));
  }
}

// ---- quantized paths -------------------------------------------------------------------------

TEST(Reference, PostQuantRoundsHalfAwayAndSaturates) {
  // Identical V rows make the pre-quant output exactly the row (f32, within 1 ulp: values are
  // small integers, so exact): x = {1, -1, 100, -100, 0.25}.
  Fixture f(1, 2, 1, 2, 3, 2, 5);
  const float row[5] = {1.f, -1.f, 100.f, -100.f, 0.25f};
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t d = 0; d < 5; ++d) f.V(0, 0, j, d) = row[d];
  f.mask.assign(2 * 3, 0);
  f.mask[1 * 3 + 0] = f.mask[1 * 3 + 1] = f.mask[1 * 3 + 2] = 1;  // row 1: no visible key
  f.qs2 = {2.f};
  f.qo2 = {0.5f};
  f.Run();
  // 1*2+.5 = 2.5 -> 3; -1*2+.5 = -1.5 -> -2; 200.5 -> 127; -199.5 -> -128; 1.0 -> 1.
  const float want[5] = {3.f, -2.f, 127.f, -128.f, 1.f};
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t d = 0; d < 5; ++d) EXPECT_EQ(f.Out(0, h, 0, d), want[d]) << d;
    for (int64_t d = 0; d < 5; ++d) EXPECT_EQ(f.Out(0, h, 1, d), 1.f);  // round(0 + 0.5) = 1
  }
  // Per-channel vectors (h*d_v + d), offset absent: -2.5 -> -3 needs x*qs2 = -2.5.
  Fixture g = f;
  g.qs2.assign(2 * 5, 1.f);
  g.qs2[0 * 5 + 0] = 2.5f;   // head 0, d 0: 1 * 2.5 = 2.5 -> 3
  g.qs2[1 * 5 + 1] = 2.5f;   // head 1, d 1: -1 * 2.5 = -2.5 -> -3
  g.qs2[1 * 5 + 4] = 2.f;    // 0.25 * 2 = 0.5 -> 1
  g.qo2.clear();
  g.Run();
  EXPECT_EQ(g.Out(0, 0, 0, 0), 3.f);
  EXPECT_EQ(g.Out(0, 1, 0, 1), -3.f);
  EXPECT_EQ(g.Out(0, 0, 0, 1), -1.f);
  EXPECT_EQ(g.Out(0, 1, 0, 4), 1.f);
  EXPECT_EQ(g.Out(0, 0, 0, 4), 0.f);  // 0.25 -> 0
  EXPECT_EQ(g.Out(0, 0, 1, 0), 0.f);  // no key, no offset: 0
}

TEST(Reference, PostQuantEmptyPromptBatchStaysZeroIncrementalQuantizesZero) {
  // docs/semantics.md 1.12: act_kv == 0 with post-quant: PFA (Q_S > 1) writes 0, IFA writes
  // sat(round(qo2)).
  for (bool incremental : {false, true}) {
    Fixture f(1, 1, 1, 1, 2, 2, 2);
    f.kv_len = {0};
    f.qs2 = {1.f};
    f.qo2 = {2.5f};
    f.incremental = incremental;
    f.Run();
    EXPECT_EQ(f.Out(0, 0, 0, 0), incremental ? 3.f : 0.f);
    EXPECT_EQ(f.Lse(0, 0, 0), float(kInf));
  }
}

// f32 scale (and offset) with strides (sb, sh, ss, sd) over the storage coordinates.
Dequant MakeDequant(Dequant::Kind kind, const float* scale, const float* offset, int64_t sb,
                    int64_t sh, int64_t ss, int64_t sd, int64_t d_group = 0) {
  Dequant dq;
  dq.kind = kind;
  dq.scale = scale;
  dq.offset = offset;
  dq.sb = sb, dq.sh = sh, dq.ss = ss, dq.sd = sd;
  dq.d_group = d_group;
  return dq;
}

TEST(Reference, PerTileScalesShareOneScalePerChannelGroup) {
  // KvQuantSparseFlashAttention-style rows: one scale per (token, tile of 2 channels).
  Fixture f(1, 1, 1, 2, 4, 6, 6, Elem::kBF16, Elem::kI8, 29);
  Fixture hand = f;
  hand.kv_elem = Elem::kBF16;
  std::vector<float> scale(4 * 3);
  for (size_t n = 0; n < scale.size(); ++n) scale[n] = 0.004f * float(n + 1);
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t d = 0; d < 6; ++d) {
      hand.K(0, 0, j, d) = RoundTo(f.K(0, 0, j, d) * scale[j * 3 + d / 2], Elem::kBF16);
      hand.V(0, 0, j, d) = RoundTo(f.V(0, 0, j, d) * scale[j * 3 + d / 2], Elem::kBF16);
    }
  Problem p = f.Build();
  p.k.dequant = p.v.dequant =
      MakeDequant(Dequant::Kind::kPerTile, scale.data(), nullptr, 0, 0, 3, 1, /*d_group=*/2);
  RunReference(p);
  hand.Run();
  ExpectBitwiseEqual(f, hand);
}

// Scale/offset storage for antiquant tests, with the dequantized values written back into a
// second fixture holding them as the query dtype.
TEST(Reference, AntiquantPerChannelAndPerTokenMatchHandDequant) {
  for (Elem kv : {Elem::kI8, Elem::kI4}) {
    const Elem qe = Elem::kF16;
    Fixture f(2, 2, 2, 3, 5, 4, 4, qe, kv, 13);
    f.out_elem = Elem::kF32;
    // K: per-channel (h, d) with offset; V: per-token (b, s), no offset.
    std::vector<float> kscale(2 * 4), koff(2 * 4), vscale(2 * 5);
    for (size_t n = 0; n < kscale.size(); ++n) kscale[n] = 0.01f * float(n + 1), koff[n] = float(n % 3) - 1.f;
    for (size_t n = 0; n < vscale.size(); ++n) vscale[n] = 0.03f + 0.007f * float(n);
    Fixture hand = f;
    hand.kv_elem = qe;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t j = 0; j < 5; ++j)
          for (int64_t d = 0; d < 4; ++d) {
            // (x + offset) * scale in fp32, then rounded to the query dtype.
            hand.K(b, h, j, d) = RoundTo((f.K(b, h, j, d) + koff[h * 4 + d]) * kscale[h * 4 + d], qe);
            hand.V(b, h, j, d) = RoundTo(f.V(b, h, j, d) * vscale[b * 5 + j], qe);
          }
    Problem p = f.Build();
    p.k.dequant = MakeDequant(Dequant::Kind::kPerChannel, kscale.data(), koff.data(), 0, 4, 0, 1);
    p.v.dequant = MakeDequant(Dequant::Kind::kPerToken, vscale.data(), nullptr, 5, 0, 1, 0);
    RunReference(p);
    hand.Run();
    SCOPED_TRACE(int(kv));
    ExpectBitwiseEqual(f, hand);
  }
}

TEST(Reference, PagedPerTokenScalesUseBlockCoordinates) {
  // Page-managed per-token scales (blocknum, block_size): scale index = block*bs + row.
  Fixture f(1, 1, 1, 2, 7, 2, 2, Elem::kBF16, Elem::kI8, 17);
  f.store = Store::kPaged4D;
  f.block_size = 3;
  Fixture hand = f;
  hand.kv_elem = Elem::kBF16;
  Problem p = f.Build();
  const int64_t nblocks = int64_t(f.kbuf.bytes.size() - 1) / (3 * 2);
  std::vector<float> scale(nblocks * 3);
  for (size_t n = 0; n < scale.size(); ++n) scale[n] = 0.02f * float(n + 1);
  for (int64_t j = 0; j < 7; ++j) {
    const float s = scale[f.block_table[j / 3] * 3 + j % 3];
    for (int64_t d = 0; d < 2; ++d) {
      hand.K(0, 0, j, d) = RoundTo(f.K(0, 0, j, d) * s, Elem::kBF16);
      hand.V(0, 0, j, d) = RoundTo(f.V(0, 0, j, d) * s, Elem::kBF16);
    }
  }
  const Dequant dq = MakeDequant(Dequant::Kind::kPerToken, scale.data(), nullptr, 3, 0, 1, 0);
  p.k.dequant = p.v.dequant = dq;
  RunReference(p);
  hand.Run();
  ExpectBitwiseEqual(f, hand);
}

TEST(Reference, FullQuantSingleKeyByHand) {
  // One int8 key: S is irrelevant to P (m = S, E = 1), so O = float(P_i8 * v) * ds2 / fp16(1)
  // with P_i8 = round(fp16(1 * fp16(qs1))); lse = log(1) + S.
  Fixture f(1, 1, 1, 1, 1, 3, 2, Elem::kI8, Elem::kI8);
  f.qs2.clear();
  f.Q(0, 0, 0, 0) = 10, f.Q(0, 0, 0, 1) = -3, f.Q(0, 0, 0, 2) = 7;
  f.K(0, 0, 0, 0) = 5, f.K(0, 0, 0, 1) = 20, f.K(0, 0, 0, 2) = -1;
  f.V(0, 0, 0, 0) = 9, f.V(0, 0, 0, 1) = -100;
  f.scale = 0.3;  // fp16(0.3) = 0.300048828125
  Problem p = f.Build();
  p.full_quant = true;
  p.dequant_scale1 = 0.0123f;
  p.quant_scale1 = 100.3f;  // fp16(100.3) = 100.3125 -> round half even 100
  p.dequant_scale2 = 0.01f;
  RunReference(p);
  const int32_t dot = 10 * 5 + -3 * 20 + 7 * -1;  // -17
  uint32_t bits;
  float ds1 = 0.0123f;
  std::memcpy(&bits, &ds1, 4);
  bits &= 0xFFFFE000u;
  std::memcpy(&ds1, &bits, 4);
  const float s1 = F16ToF32(F32ToF16(float(dot) * ds1));
  const float s = F16ToF32(F32ToF16(s1 * F16ToF32(F32ToF16(0.3f))));
  const float p8 = 100.f;
  EXPECT_EQ(f.Out(0, 0, 0, 0), (p8 * 9) * 0.01f / 1.f);
  EXPECT_EQ(f.Out(0, 0, 0, 1), (p8 * -100) * 0.01f / 1.f);
  EXPECT_NEAR(f.Lse(0, 0, 0), s, 0.0);
}

TEST(Reference, FullQuantTwoKeysFollowsFp16Steps) {
  // Scores S0 > S1: E = {1, fp16(exp(S1 - S0))}, P_i8 = round_half_even(fp16(E * fp16(qs1))),
  // O = float(sum P_i8 v) * ds2 / fp16(1 + E1).
  Fixture f(1, 1, 1, 1, 2, 1, 1, Elem::kI8, Elem::kI8);
  f.Q(0, 0, 0, 0) = 2;
  f.K(0, 0, 0, 0) = 50;
  f.K(0, 0, 1, 0) = 40;
  f.V(0, 0, 0, 0) = 3;
  f.V(0, 0, 1, 0) = -7;
  f.out_elem = Elem::kF16;
  Problem p = f.Build();
  p.full_quant = true;
  p.dequant_scale1 = 0.01f;
  p.quant_scale1 = 127.f;
  p.dequant_scale2 = 0.5f;
  RunReference(p);
  auto h = [](float x) { return F16ToF32(F32ToF16(x)); };
  uint32_t bits;
  float ds1 = 0.01f;
  std::memcpy(&bits, &ds1, 4);
  bits &= 0xFFFFE000u;
  std::memcpy(&ds1, &bits, 4);
  const float s0 = h(h(100.f * ds1) * 1.f), s1 = h(h(80.f * ds1) * 1.f);
  const float e1 = h(std::exp(s1 - s0));
  const float p0 = std::nearbyint(h(1.f * 127.f)), p1 = std::nearbyint(h(e1 * 127.f));
  const float o = (p0 * 3 + p1 * -7) * 0.5f / h(1.f + e1);
  EXPECT_EQ(f.Out(0, 0, 0, 0), h(o));
  EXPECT_NEAR(f.Lse(0, 0, 0), std::log(1.0 + e1) + s0, kEpsF32 * 4);
}

TEST(Reference, MidSizeProblemIsFast) {
  // B=2, N=8, S=KVS=256, D=64 with a causal band: must stay well under a second.
  Fixture f(2, 8, 2, 256, 256, 64, 64, Elem::kBF16, Elem::kBF16);
  f.band_next = {0, 0};
  f.Run();
  for (int64_t d = 0; d < 64; ++d) EXPECT_EQ(f.Out(1, 7, 0, d), f.V(1, 1, 0, d));
}

}  // namespace
}  // namespace openfia::internal
