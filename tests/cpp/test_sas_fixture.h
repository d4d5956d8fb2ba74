// Test fixture for SparseAttnSharedkv: a small call held as logical values, stored the way the
// NPU stores it (paged ori/cmp caches with shuffled block tables, -1 padded sparse indices), plus
// an independent double-precision oracle of docs/semantics.md 3.3.
//
// Storage nobody may read is NaN: unused blocks and rows, table padding (-1), and every original
// or compressed token that no query row attends according to the oracle, so reading a wrong token
// turns an output into NaN.
#pragma once

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
#include "openfia/openfia.h"

namespace openfia::sas_test {

using internal::Elem;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct SasFixture {
  // ---- the call ----
  bool tnd = false;
  DType dtype = DType::kFloat32;
  int64_t n1 = 4, d = 8;
  std::vector<int64_t> q_len = {3, 3};      // BSND: all equal
  std::vector<int64_t> kv_len = {300, 2};   // S2 per batch
  int64_t bs1 = 16, bs2 = 8;
  int64_t ratio = 0;  // 0: no cmp_kv (SWA)
  int64_t k2 = 0;     // > 0: SCFA with K2 index entries per row; 0: CFA
  int64_t ori_mask_mode = 4;
  bool with_sinks = true;
  bool lse = true;
  bool poison = true;
  std::optional<double> scale = 0.3;
  uint32_t seed = 1;

  // ---- logical values (already representable in dtype) ----
  std::vector<float> qv;                            // [T, n1, d] (rows in batch order)
  std::vector<std::vector<float>> ori, cmp;         // per batch: [S2 * d], [S3 * d]
  std::vector<std::vector<std::vector<int32_t>>> sel;  // SCFA: per batch, row: index entries
  std::vector<float> sinks;

  // ---- storage ----
  std::vector<uint8_t> qbuf, oribuf, cmpbuf, outbuf;
  std::vector<int32_t> ori_bt, cmp_bt, idx, seqused, cu;
  std::vector<float> lsebuf;
  int64_t ori_blocks = 0, cmp_blocks = 0, bt1_w = 0, bt2_w = 0;

  int64_t B() const { return static_cast<int64_t>(q_len.size()); }
  int64_t T() const { return std::accumulate(q_len.begin(), q_len.end(), int64_t{0}); }
  int64_t S1() const { return q_len[0]; }
  int64_t RowBase(int64_t b) const {
    return std::accumulate(q_len.begin(), q_len.begin() + b, int64_t{0});
  }
  Elem elem() const { return internal::ElemOf(dtype); }
  int64_t esize() const { return ElementSize(dtype); }
  int64_t S3(int64_t b) const { return ratio > 0 ? kv_len[b] / ratio : 0; }
  // Output / lse row index of (b, i) in the flattened [rows, n1] view.
  int64_t OutRow(int64_t b, int64_t i) const { return tnd ? RowBase(b) + i : b * S1() + i; }

  // Keys of query (b, i) as (source, token), in the order of docs/semantics.md 3.3.
  std::vector<std::pair<int, int64_t>> Keys(int64_t b, int64_t i) const {
    std::vector<std::pair<int, int64_t>> keys;
    const int64_t s1 = q_len[b], s2 = kv_len[b], p = s2 - s1 + i;
    if (p < 0) return keys;
    int64_t lo = std::max<int64_t>(0, p - 127), hi = p;
    if (ori_mask_mode == 3) lo = 0;
    if (ori_mask_mode == 0) lo = 0, hi = s2 - 1;
    for (int64_t t = lo; t <= hi; ++t) keys.push_back({0, t});
    if (ratio > 0) {
      const int64_t thr = (p + 1) / ratio;
      if (k2 == 0) {
        for (int64_t j = 0; j < thr; ++j) keys.push_back({1, j});
      } else {
        const auto& e = sel[b][i];
        for (int64_t n = 0; n < std::min<int64_t>(k2, thr); ++n) {
          if (e[n] == -1) break;
          if (e[n] >= thr) continue;
          keys.push_back({1, e[n]});
        }
      }
    }
    return keys;
  }

  float Rand(std::mt19937& rng) {
    return internal::RoundTo(std::uniform_real_distribution<float>(-1.f, 1.f)(rng), elem());
  }

  void Store(std::vector<uint8_t>& buf, int64_t index, float v) const {
    internal::StoreFloat(buf.data(), elem(), index, v);
  }

  // Builds logical values and storage; returns the arguments (metadata absent).
  SasArgs Build() {
    std::mt19937 rng(seed);
    const int64_t b_n = B(), t_n = T();
    qv.resize(t_n * n1 * d);
    for (float& x : qv) x = Rand(rng);
    ori.assign(b_n, {});
    cmp.assign(b_n, {});
    for (int64_t b = 0; b < b_n; ++b) {
      ori[b].resize(kv_len[b] * d);
      for (float& x : ori[b]) x = Rand(rng);
      cmp[b].resize(S3(b) * d);
      for (float& x : cmp[b]) x = Rand(rng);
    }
    sinks.resize(n1);
    for (float& x : sinks) x = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
    // SCFA entries: in-range picks (duplicates possible), skipped picks in [thr, S3), a -1 at a
    // random place, and out-of-range garbage after it or past min(K2, thr) (never read).
    sel.assign(b_n, {});
    if (ratio > 0 && k2 > 0) {
      for (int64_t b = 0; b < b_n; ++b) {
        sel[b].resize(q_len[b]);
        for (int64_t i = 0; i < q_len[b]; ++i) {
          const int64_t p = kv_len[b] - q_len[b] + i, thr = p >= 0 ? (p + 1) / ratio : 0;
          auto& e = sel[b][i];
          e.assign(k2, 99999);
          const int64_t read = std::min<int64_t>(k2, std::max<int64_t>(thr, 0));
          const int64_t stop = read > 0 ? int64_t(rng() % (read + 1)) : 0;
          for (int64_t n = 0; n < read; ++n) {
            if (n == stop) { e[n] = -1; break; }
            const int64_t pick = (rng() % 4 == 0 && S3(b) > thr)
                                     ? thr + int64_t(rng() % (S3(b) - thr))
                                     : int64_t(rng() % thr);
            e[n] = static_cast<int32_t>(pick);
          }
        }
      }
    }

    // Which tokens anybody reads (poison the rest).
    std::vector<std::vector<char>> ori_used(b_n), cmp_used(b_n);
    for (int64_t b = 0; b < b_n; ++b) {
      ori_used[b].assign(kv_len[b], poison ? 0 : 1);
      cmp_used[b].assign(S3(b), poison ? 0 : 1);
      for (int64_t i = 0; i < q_len[b]; ++i)
        for (auto [src, t] : Keys(b, i)) (src == 0 ? ori_used : cmp_used)[b][t] = 1;
    }

    SasArgs a;
    a.layout_q = tnd ? "TND" : "BSND";
    // q
    qbuf.assign(t_n * n1 * d * esize(), 0);
    for (int64_t n = 0; n < t_n * n1 * d; ++n) Store(qbuf, n, qv[n]);
    a.q = tnd ? TensorView(qbuf.data(), dtype, {t_n, n1, d})
              : TensorView(qbuf.data(), dtype, {b_n, S1(), n1, d});
    // caches
    auto make_cache = [&](std::vector<uint8_t>& buf, std::vector<int32_t>& bt, int64_t* blocks,
                          int64_t* width, int64_t bs, auto len, const auto& val,
                          const std::vector<std::vector<char>>& used) {
      *width = 1;
      int64_t total = 1;  // one unused block
      for (int64_t b = 0; b < b_n; ++b) {
        const int64_t nb = (len(b) + bs - 1) / bs;
        *width = std::max(*width, nb + 1);
        total += nb;
      }
      *blocks = total;
      std::vector<int32_t> phys(total);
      std::iota(phys.begin(), phys.end(), 0);
      std::shuffle(phys.begin(), phys.end(), rng);
      bt.assign(b_n * *width, -1);
      buf.assign(total * bs * d * esize(), 0);
      for (int64_t n = 0; n < total * bs * d; ++n) Store(buf, n, kNaN);
      int64_t next = 0;
      for (int64_t b = 0; b < b_n; ++b) {
        const int64_t nb = (len(b) + bs - 1) / bs;
        for (int64_t k = 0; k < nb; ++k) bt[b * *width + k] = phys[next++];
        for (int64_t t = 0; t < len(b); ++t)
          for (int64_t c = 0; c < d; ++c)
            Store(buf, (bt[b * *width + t / bs] * bs + t % bs) * d + c,
                  used[b][t] ? val[b][t * d + c] : kNaN);
      }
    };
    make_cache(oribuf, ori_bt, &ori_blocks, &bt1_w, bs1, [&](int64_t b) { return kv_len[b]; }, ori,
               ori_used);
    a.ori_kv = TensorView(oribuf.data(), dtype, {ori_blocks, bs1, 1, d});
    a.ori_block_table = TensorView(ori_bt.data(), DType::kInt32, {b_n, bt1_w});
    if (ratio > 0) {
      make_cache(cmpbuf, cmp_bt, &cmp_blocks, &bt2_w, bs2, [&](int64_t b) { return S3(b); }, cmp,
                 cmp_used);
      a.cmp_kv = TensorView(cmpbuf.data(), dtype, {cmp_blocks, bs2, 1, d});
      a.cmp_block_table = TensorView(cmp_bt.data(), DType::kInt32, {b_n, bt2_w});
      a.cmp_ratio = ratio;
      if (k2 > 0) {
        idx.assign(t_n * k2, 77777);  // rows that are never read keep garbage
        for (int64_t b = 0; b < b_n; ++b)
          for (int64_t i = 0; i < q_len[b]; ++i)
            for (int64_t n = 0; n < k2; ++n) idx[(RowBase(b) + i) * k2 + n] = sel[b][i][n];
        a.cmp_sparse_indices = tnd ? TensorView(idx.data(), DType::kInt32, {t_n, 1, k2})
                                   : TensorView(idx.data(), DType::kInt32, {b_n, S1(), 1, k2});
      }
    }
    seqused.assign(kv_len.begin(), kv_len.end());
    a.seqused_kv = TensorView(seqused.data(), DType::kInt32, {b_n});
    if (tnd) {
      cu.assign(1, 0);
      for (int64_t b = 0; b < b_n; ++b) cu.push_back(cu.back() + static_cast<int32_t>(q_len[b]));
      a.cu_seqlens_q = TensorView(cu.data(), DType::kInt32, {b_n + 1});
    }
    if (with_sinks) a.sinks = TensorView(sinks.data(), DType::kFloat32, {n1});
    a.softmax_scale = scale;
    a.ori_mask_mode = ori_mask_mode;
    a.return_softmax_lse = lse;
    return a;
  }

  // The metadata arguments describing this call.
  SasMetadataArgs MetaArgs(int64_t workers) {
    SasMetadataArgs m;
    m.num_heads_q = n1;
    m.num_heads_kv = 1;
    m.head_dim = d;
    m.layout_q = tnd ? "TND" : "BSND";
    if (tnd) m.cu_seqlens_q = TensorView(cu.data(), DType::kInt32, {B() + 1});
    m.seqused_kv = TensorView(seqused.data(), DType::kInt32, {B()});
    m.batch_size = B();
    m.max_seqlen_q = *std::max_element(q_len.begin(), q_len.end());
    m.max_seqlen_kv = *std::max_element(kv_len.begin(), kv_len.end());
    m.has_cmp_kv = ratio > 0;
    m.cmp_ratio = ratio > 0 ? ratio : -1;
    m.cmp_topk = k2;
    m.ori_mask_mode = ori_mask_mode;
    m.num_workers = workers;
    return m;
  }

  // Runs the op into owned outputs.
  void Run(const SasArgs& a) {
    const SasOutputSpec spec = SparseAttnSharedkvOutputSpec(a);
    int64_t n = 1;
    for (int64_t s : spec.attention_out_sizes) n *= s;
    outbuf.assign(n * esize(), 0xAB);
    int64_t nl = 1;
    for (int64_t s : spec.softmax_lse_sizes) nl *= s;
    lsebuf.assign(nl, -777.f);
    SparseAttnSharedkv(a, TensorView(outbuf.data(), spec.attention_out_dtype,
                                     spec.attention_out_sizes),
                       TensorView(lsebuf.data(), DType::kFloat32, spec.softmax_lse_sizes));
  }
  float Out(int64_t b, int64_t i, int64_t h, int64_t c) const {
    return internal::LoadFloat(outbuf.data(), elem(), (OutRow(b, i) * n1 + h) * d + c);
  }
  float Lse(int64_t b, int64_t i, int64_t h) const { return lsebuf[OutRow(b, i) * n1 + h]; }

  // Oracle in double: out [b][i][h][c] and lse, P not rounded.
  void Oracle(int64_t b, int64_t i, int64_t h, std::vector<double>* o, double* lse) const {
    o->assign(d, 0.0);
    *lse = kInf;
    const auto keys = Keys(b, i);
    if (keys.empty()) return;
    const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(double(d));
    const float* qrow = &qv[((RowBase(b) + i) * n1 + h) * d];
    std::vector<double> s;
    double m = with_sinks ? sinks[h] : -kInf;
    for (auto [src, t] : keys) {
      const float* k = &(src == 0 ? ori : cmp)[b][t * d];
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double(qrow[c]) * k[c];
      s.push_back(dot * sc);
      m = std::max(m, s.back());
    }
    double l = with_sinks ? std::exp(sinks[h] - m) : 0.0;
    for (size_t n = 0; n < keys.size(); ++n) {
      const double e = std::exp(s[n] - m);
      l += e;
      const float* v = &(keys[n].first == 0 ? ori : cmp)[b][keys[n].second * d];
      for (int64_t c = 0; c < d; ++c) (*o)[c] += e * v[c];
    }
    for (double& x : *o) x /= l;
    *lse = std::log(l) + m;
  }

  // The engine's extra error over the reference's (which rounds once from double): fp32 scores
  // (a dot product of d terms: d * u32 * max|q| * max|k| * scale, ds), fp32 accumulation of the
  // softmax sum and P * V over the row's n keys (+ the sink) and a vectorized exp (<= 3 ulp):
  // out += max|v| * (3 ds + 2 (n + 16) u32), lse += ds + 2 (n + 16) u32. Zero on the reference.
  // Plus the rescales of the fp32 state, once per 64-key tile and once per merged S2 chunk
  // (each: an exp and a product, about 2 fp32 ulp): rel = 2 u32 * tiles.
  struct EngineSlack {
    double out = 0, lse = 0, rel = 0;
  };
  EngineSlack Slack(int64_t b, int64_t i, int64_t h) const {
    if (GetImpl() == Impl::kReference) return {};
    constexpr double u32 = 0x1p-24;
    const auto keys = Keys(b, i);
    const double sc = scale.has_value() ? *scale : 1.0 / std::sqrt(double(d));
    const float* qrow = &qv[((RowBase(b) + i) * n1 + h) * d];
    double qmax = 0, kmax = 0;
    for (int64_t c = 0; c < d; ++c) qmax = std::max(qmax, double(std::fabs(qrow[c])));
    for (auto [src, t] : keys) {
      const float* k = &(src == 0 ? ori : cmp)[b][t * d];
      for (int64_t c = 0; c < d; ++c) kmax = std::max(kmax, double(std::fabs(k[c])));
    }
    const double ds = d * u32 * qmax * kmax * sc;
    const double acc = 2 * (double(keys.size()) + 16) * u32;
    const double tiles = std::max<double>(1, std::ceil(keys.size() / 64.0));
    return {kmax * (3 * ds + acc), ds + acc, 2 * u32 * tiles};  // K = V: max|v| = max|k|
  }

  // Every output against the oracle. `eps`: unit roundoff of the output dtype times 2; P
  // rounding (bf16/f16) and the output rounding each contribute at most eps/2 relative to max|v|.
  void ExpectMatchesOracle(double eps) const {
    for (int64_t b = 0; b < B(); ++b)
      for (int64_t i = 0; i < q_len[b]; ++i)
        for (int64_t h = 0; h < n1; ++h) {
          std::vector<double> o;
          double lse_want;
          Oracle(b, i, h, &o, &lse_want);
          const EngineSlack slack = Slack(b, i, h);
          for (int64_t c = 0; c < d; ++c)
            ASSERT_NEAR(Out(b, i, h, c), o[c],
                        (2 * eps + slack.rel) * std::max(1.0, std::fabs(o[c])) + slack.out)
                << "b=" << b << " i=" << i << " h=" << h << " c=" << c;
          if (!lse) continue;
          if (std::isinf(lse_want)) {
            ASSERT_EQ(Lse(b, i, h), float(lse_want)) << "b=" << b << " i=" << i;
          } else {
            ASSERT_NEAR(Lse(b, i, h), lse_want,
                        (2 * 0x1p-24 + slack.rel) * std::max(1.0, std::fabs(lse_want)) +
                            slack.lse)
                << "b=" << b << " i=" << i << " h=" << h;
          }
        }
  }
};

// Output and lse bytes of one run (bitwise comparisons across plans and thread counts).
inline std::vector<uint8_t> Bytes(const SasFixture& f) {
  std::vector<uint8_t> v = f.outbuf;
  const auto* l = reinterpret_cast<const uint8_t*>(f.lsebuf.data());
  v.insert(v.end(), l, l + f.lsebuf.size() * sizeof(float));
  return v;
}

}  // namespace openfia::sas_test
