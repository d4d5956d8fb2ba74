// openfia tests: hand-built canonical Problems for the engine tests (hostile storage: odd sizes,
// strided layouts, paged caches with shuffled and spare blocks, NaN written into every position a
// correct engine must never read or must never let leak).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/problem.h"
#include "common/convert.h"

namespace openfia::internal::testing {

struct CaseSpec {
  Elem qe = Elem::kBF16;     // query (and K, V, rope) element type
  Elem oe = Elem::kBF16;     // output element type (kI8: post-quant)
  int64_t batch = 1, h_q = 4, h_kv = 2, d_qk = 16, d_rope = 0, d_v = 16;
  std::vector<int64_t> q_len = {3}, kv_len = {17};
  int64_t prefix = 0;
  int64_t block = 0;  // paged block size (0: contiguous)
  bool nz = false;    // paged NZ layout (d_qk, d_v multiples of 16)
  bool tensor_list = false;
  // Band per batch from these (kNoBand = unbounded); `causal_br` sets next = kvt - q_len.
  int64_t pre = Problem::kNoBand, next = Problem::kNoBand;
  bool causal_br = false;
  bool mask = false;       // random bit mask, some fully masked rows and columns
  Elem pse = Elem::kU8;    // kU8: none, else pse element type
  bool sinks = false;
  bool lse = true;
  bool per_channel_quant = false;
  double scale = 0.25;
  float amp = 1.f;         // magnitude of Q and K (scores grow with it)
  uint32_t seed = 1;
};

// Owns storage; problem() points into it.
class Case {
 public:
  explicit Case(const CaseSpec& s) : s_(s), rng_(s.seed) { Build(); }
  Problem& problem() { return p_; }
  const CaseSpec& spec() const { return s_; }
  size_t out_bytes() const { return out_.size(); }
  const uint8_t* out() const { return out_.data(); }
  const std::vector<float>& lse() const { return lse_; }
  void ResetOutputs() {
    std::fill(out_.begin(), out_.end(), 0);
    std::fill(lse_.begin(), lse_.end(), std::numeric_limits<float>::infinity());
  }
  // Key column j of batch b is never visible to any row (NaN was written into its K and V).
  bool poisoned(int64_t b, int64_t j) const {
    return std::find(poison_[b].begin(), poison_[b].end(), j) != poison_[b].end();
  }
  float max_abs_v() const { return vmax_; }
  // For an edit that rescales the values (the tolerances scale with their magnitude).
  void set_max_abs_v(float v) { vmax_ = v; }
  // V becomes a copy of K in buffers of its own (same layout, same values, other addresses):
  // with `shared` false; the same tensor as K with `shared` true. Needs d_v == d_qk.
  void ValuesFromKeys(bool shared) {
    p_.v = p_.k;
    if (shared) return;
    for (Operand* o : {&p_.v.cache, &p_.v.prefix}) {
      if (o->data == nullptr) continue;
      for (size_t i = 0, n = bufs_.size(); i < n; ++i)
        if (bufs_[i].data() == o->data) {
          bufs_.push_back(bufs_[i]);  // (reserve(64) in Build: no reallocation)
          o->data = bufs_.back().data();
          break;
        }
    }
  }
  float max_abs_qk() const { return s_.amp; }

 private:
  static int64_t Size(Elem e) { return e == Elem::kF32 ? 4 : e == Elem::kI8 ? 1 : 2; }
  float Rand(float amp) { return std::uniform_real_distribution<float>(-amp, amp)(rng_); }

  // A buffer of n elements of type e, filled with NaN (garbage nobody may read).
  std::vector<uint8_t>& NewBuf(int64_t n, Elem e) {
    bufs_.emplace_back(n * Size(e));
    auto& v = bufs_.back();
    for (int64_t i = 0; i < n; ++i) cvt::Store(v.data(), e, i, std::nanf(""));
    return v;
  }
  void Put(std::vector<uint8_t>& buf, Elem e, int64_t idx, float x) {
    cvt::Store(buf.data(), e, idx, x);
  }

  void Build();
  void BuildKv(KvOperand& kv, int64_t D, float amp, bool is_v);

  CaseSpec s_;
  std::mt19937 rng_;
  Problem p_;
  std::vector<std::vector<uint8_t>> bufs_;
  std::vector<uint8_t> out_;
  std::vector<float> lse_, sinks_;
  std::vector<uint8_t> mask_;
  std::vector<int32_t> table_;
  std::vector<std::vector<int64_t>> poison_;
  int64_t kv_store_ = 0, kvt_max_ = 0;
  float vmax_ = 1.f;
};

inline void Case::Build() {
  bufs_.reserve(64);
  Problem& p = p_;
  const int64_t B = s_.batch;
  p.batch = B;
  p.h_q = s_.h_q;
  p.h_kv = s_.h_kv;
  p.d_qk = s_.d_qk;
  p.d_rope = s_.d_rope;
  p.d_v = s_.d_v;
  p.incremental = false;
  p.prefix_len = s_.prefix;
  p.scale = s_.scale;
  for (int64_t b = 0; b < B; ++b) {
    p.q_len.push_back(s_.q_len[b % s_.q_len.size()]);
    p.kv_len.push_back(s_.kv_len[b % s_.kv_len.size()]);
  }
  int64_t qmax = 0, kvmax = 0;
  for (int64_t b = 0; b < B; ++b) {
    qmax = std::max(qmax, p.q_len[b]);
    kvmax = std::max(kvmax, p.kv_len[b]);
  }
  // Query: BSND with one padding row before and after the valid rows (NaN).
  p.s_q = qmax + 2;
  const int64_t Dq = s_.d_qk;
  {
    auto& qb = NewBuf(B * p.s_q * s_.h_q * Dq, s_.qe);
    p.q = Operand{qb.data(), s_.qe, p.s_q * s_.h_q * Dq, Dq, s_.h_q * Dq, 1};
    for (int64_t b = 0; b < B; ++b) {
      p.q_begin.push_back(1);
      for (int64_t i = 0; i < p.q_len[b]; ++i)
        for (int64_t h = 0; h < s_.h_q; ++h)
          for (int64_t d = 0; d < Dq; ++d) Put(qb, s_.qe, p.q.Offset(b, h, 1 + i, d), Rand(s_.amp));
    }
    if (s_.d_rope > 0) {
      auto& rb = NewBuf(B * s_.h_q * p.s_q * s_.d_rope, s_.qe);  // BNSD
      p.q_rope = Operand{rb.data(), s_.qe, s_.h_q * p.s_q * s_.d_rope, p.s_q * s_.d_rope,
                         s_.d_rope, 1};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < p.q_len[b]; ++i)
          for (int64_t h = 0; h < s_.h_q; ++h)
            for (int64_t d = 0; d < s_.d_rope; ++d)
              Put(rb, s_.qe, p.q_rope.Offset(b, h, 1 + i, d), Rand(s_.amp));
    }
  }
  // KV: contiguous storage has left padding (kv_begin = b % 2) and a NaN tail.
  kv_store_ = kvmax + 3;
  for (int64_t b = 0; b < B; ++b) p.kv_begin.push_back(s_.block ? 0 : b % 2);
  if (s_.block) {
    p.paged = true;
    p.block_size = s_.block;
    p.bt_stride = (kvmax + s_.block - 1) / s_.block + 1;
    int64_t nb = 2;  // two spare blocks (NaN)
    for (int64_t b = 0; b < B; ++b) nb += (p.kv_len[b] + s_.block - 1) / s_.block;
    std::vector<int32_t> ids(nb);
    for (int64_t i = 0; i < nb; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng_);
    table_.assign(B * p.bt_stride, -1);
    int64_t next_id = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < (p.kv_len[b] + s_.block - 1) / s_.block; ++t)
        table_[b * p.bt_stride + t] = ids[next_id++];
    p.block_table = table_.data();
    kv_store_ = nb;  // number of blocks
  }
  poison_.assign(B, {});
  BuildKv(p.k, s_.d_qk, s_.amp, false);
  BuildKv(p.v, s_.d_v, 1.f, true);
  if (s_.d_rope > 0) BuildKv(p.k_rope, s_.d_rope, s_.amp, false);

  // Band.
  for (int64_t b = 0; b < B; ++b) {
    kvt_max_ = std::max(kvt_max_, p.kv_total(b));
    p.band_pre.push_back(s_.pre);
    p.band_next.push_back(s_.causal_br ? p.kv_total(b) - p.q_len[b] : s_.next);
  }
  // Mask: [B, s_q, kvt_max + 1], rows indexed from mask_row0 = q_begin (absolute rows).
  if (s_.mask) {
    const int64_t cols = kvt_max_ + 1;
    mask_.assign(B * p.s_q * cols, 0);
    std::bernoulli_distribution bern(0.25);
    for (auto& m : mask_) m = bern(rng_) ? 1 : 0;
    for (int64_t b = 0; b < B; ++b) {
      // Row 0 fully masked; every 5th column masked for all rows (and poisoned with NaN).
      for (int64_t j = 0; j < cols; ++j) mask_[(b * p.s_q + 1) * cols + j] = 1;
      for (int64_t j = 2; j < p.kv_total(b); j += 5) {
        for (int64_t r = 0; r < p.s_q; ++r) mask_[(b * p.s_q + r) * cols + j] = 1;
        poison_[b].push_back(j);
      }
      p.mask_row0.push_back(1);
      p.mask_col0.push_back(0);
    }
    p.mask = mask_.data();
    p.mask_sb = p.s_q * cols;
    p.mask_ss = cols;
    p.mask_sk = 1;
  }
  // Keys the band hides from every row also get NaN.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < p.kv_total(b); ++j) {
      bool seen = false;
      for (int64_t i = 0; i < p.q_len[b] && !seen; ++i)
        seen = j >= i - p.band_pre[b] && j <= i + p.band_next[b];
      if (!seen && !poisoned(b, j)) poison_[b].push_back(j);
    }
  }
  // Poison: NaN into K and V of never-visible keys.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j : poison_[b]) {
      for (KvOperand* kv : {&p.k, &p.v, &p.k_rope}) {
        if (!kv->cache.present()) continue;
        const int64_t D = kv == &p.v ? s_.d_v : kv == &p.k ? s_.d_qk : s_.d_rope;
        const Operand* o;
        int64_t bb, s;
        if (j < p.prefix_len) {
          continue;  // the prefix is shared by every batch; never poison it
        } else {
          const int64_t t = p.kv_begin[b] + j - p.prefix_len;
          o = &kv->cache;
          bb = p.paged ? p.block_table[b * p.bt_stride + t / p.block_size] : b;
          s = p.paged ? t % p.block_size : t;
        }
        for (int64_t h = 0; h < s_.h_kv; ++h)
          for (int64_t d = 0; d < D; ++d)
            cvt::Store(const_cast<void*>(o->Base(p.paged ? 0 : b)), o->elem,
                       o->Offset(bb, h, s, d), std::nanf(""));
      }
    }
  }
  if (s_.pse != Elem::kU8) {
    const int64_t cols = kvt_max_ + 2;
    auto& pb = NewBuf(B * s_.h_q * p.s_q * cols, s_.pse);
    p.pse = pb.data();
    p.pse_elem = s_.pse;
    p.pse_sb = s_.h_q * p.s_q * cols;
    p.pse_sh = p.s_q * cols;
    p.pse_ss = cols;
    p.pse_sk = 1;
    for (int64_t b = 0; b < B; ++b) {
      p.pse_row0.push_back(1);
      p.pse_col0.push_back(1);
      for (int64_t h = 0; h < s_.h_q; ++h)
        for (int64_t i = 0; i < p.q_len[b]; ++i)
          for (int64_t j = 0; j < p.kv_total(b); ++j)
            Put(pb, s_.pse, b * p.pse_sb + h * p.pse_sh + (1 + i) * p.pse_ss + 1 + j, Rand(2.f));
    }
  }
  if (s_.sinks) {
    for (int64_t h = 0; h < s_.h_q; ++h) sinks_.push_back(h == 1 ? 100.f : Rand(3.f));
    p.sinks = sinks_.data();
  }
  // Output BSND; lse [B, h_q, s_q].
  p.out_elem = s_.oe;
  out_.assign(B * p.s_q * s_.h_q * s_.d_v * Size(s_.oe), 0);
  p.out = out_.data();
  p.out_sb = p.s_q * s_.h_q * s_.d_v;
  p.out_sh = s_.d_v;
  p.out_ss = s_.h_q * s_.d_v;
  p.out_sd = 1;
  if (s_.oe == Elem::kI8) {
    if (s_.per_channel_quant) {
      for (int64_t c = 0; c < s_.h_q * s_.d_v; ++c) {
        p.quant_scale2.push_back(20.f + Rand(10.f));
        p.quant_offset2.push_back(Rand(3.f));
      }
    } else {
      p.quant_scale2 = {60.f};
      p.quant_offset2 = {1.5f};
    }
  }
  lse_.assign(B * s_.h_q * p.s_q, std::numeric_limits<float>::infinity());
  if (s_.lse) {
    p.lse = lse_.data();
    p.lse_sb = s_.h_q * p.s_q;
    p.lse_sh = p.s_q;
    p.lse_ss = 1;
  }
}

inline void Case::BuildKv(KvOperand& kv, int64_t D, float amp, bool is_v) {
  const Problem& p = p_;
  const Elem e = s_.qe;
  const int64_t B = s_.batch, H = s_.h_kv;
  if (p.paged) {
    const int64_t nb = kv_store_, bs = s_.block;
    auto& buf = NewBuf(nb * H * bs * D, e);
    if (s_.nz && D % 16 == 0) {  // (nb, H, D/16, bs, 16)
      kv.cache = Operand{buf.data(), e, H * D * bs, D * bs, 16, 1, 16, bs * 16};
    } else {  // (nb, bs, H*D)
      kv.cache = Operand{buf.data(), e, bs * H * D, D, H * D, 1};
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < p.kv_len[b]; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t blk = p.block_table[b * p.bt_stride + t / bs];
            const float x = Rand(amp);
            Put(buf, e, kv.cache.Offset(blk, h, t % bs, d), x);
          }
  } else if (s_.tensor_list) {  // per batch (1, H, S_b + 1, D) BNSD
    // A real list may hold different lengths per batch; strides are shared, so size for the max.
    const int64_t S = kv_store_;
    kv.cache = Operand{nullptr, e, 0, S * D, D, 1};
    for (int64_t b = 0; b < B; ++b) {
      auto& buf = NewBuf(H * S * D, e);
      kv.cache.batch_data.push_back(buf.data());
      for (int64_t t = 0; t < p.kv_len[b]; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d)
            Put(buf, e, kv.cache.Offset(b, h, p.kv_begin[b] + t, d), Rand(amp));
    }
  } else {  // (B, S, H, D) BSND
    const int64_t S = kv_store_;
    auto& buf = NewBuf(B * S * H * D, e);
    kv.cache = Operand{buf.data(), e, S * H * D, D, H * D, 1};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < p.kv_len[b]; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d)
            Put(buf, e, kv.cache.Offset(b, h, p.kv_begin[b] + t, d), Rand(amp));
  }
  if (s_.prefix > 0) {  // (1, H, P + 1, D), last row NaN
    const int64_t P1 = s_.prefix + 1;
    auto& buf = NewBuf(H * P1 * D, e);
    kv.prefix = Operand{buf.data(), e, H * P1 * D, P1 * D, D, 1};
    for (int64_t j = 0; j < s_.prefix; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) Put(buf, e, kv.prefix.Offset(0, h, j, d), Rand(amp));
  }
  if (is_v) vmax_ = 1.f;
}

// fp64 oracle of the Problem contract (used until/besides RunReference): scores in double, P
// rounded to the query dtype after exp(s - m_final), output = sum(P V) / l.
inline void Oracle(const Problem& p) {
  const int64_t G = p.group();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kvt = p.kv_total(b);
    for (int64_t h = 0; h < p.h_q; ++h) {
      const int64_t hk = h / G;
      for (int64_t i = 0; i < p.q_len[b]; ++i) {
        const int64_t row = p.q_begin[b] + i;
        std::vector<double> s(kvt);
        std::vector<char> vis(kvt, 0);
        double m = -INFINITY;
        auto key = [&](const KvOperand& kv, int64_t j, int64_t d) {
          if (j < p.prefix_len) return (double)cvt::Load(kv.prefix.Base(0), kv.prefix.elem,
                                                          kv.prefix.Offset(0, hk, j, d));
          const int64_t t = p.kv_begin[b] + j - p.prefix_len;
          if (p.paged) {
            const int64_t blk = p.block_table[b * p.bt_stride + t / p.block_size];
            return (double)cvt::Load(kv.cache.data, kv.cache.elem,
                                     kv.cache.Offset(blk, hk, t % p.block_size, d));
          }
          return (double)cvt::Load(kv.cache.Base(b), kv.cache.elem, kv.cache.Offset(b, hk, t, d));
        };
        for (int64_t j = 0; j < kvt; ++j) {
          bool ok = j >= i - p.band_pre[b] && j <= i + p.band_next[b];
          if (ok && p.mask)
            ok = p.mask[b * p.mask_sb + (p.mask_row0[b] + i) * p.mask_ss +
                        (p.mask_col0[b] + j) * p.mask_sk] == 0;
          if (!ok) continue;
          vis[j] = 1;
          double acc = 0;
          for (int64_t d = 0; d < p.d_qk; ++d)
            acc += (double)cvt::Load(p.q.Base(b), p.q.elem, p.q.Offset(b, h, row, d)) *
                   key(p.k, j, d);
          for (int64_t d = 0; d < p.d_rope; ++d)
            acc += (double)cvt::Load(p.q_rope.Base(b), p.q_rope.elem,
                                     p.q_rope.Offset(b, h, row, d)) *
                   key(p.k_rope, j, d);
          s[j] = acc * p.scale;
          if (p.pse)
            s[j] += cvt::Load(p.pse, p.pse_elem,
                              b * p.pse_sb + h * p.pse_sh + (p.pse_row0[b] + i) * p.pse_ss +
                                  (p.pse_col0[b] + j) * p.pse_sk);
          m = std::max(m, s[j]);
        }
        std::vector<double> out(p.d_v, 0.0);
        double lse = INFINITY;
        if (m != -INFINITY) {
          double l = 0;
          for (int64_t j = 0; j < kvt; ++j) {
            if (!vis[j]) continue;
            const double e = std::exp(s[j] - m);
            l += e;
            const double pr = cvt::RoundToElem(static_cast<float>(e), p.q.elem);
            for (int64_t d = 0; d < p.d_v; ++d) out[d] += pr * key(p.v, j, d);
          }
          if (p.sinks) l += std::exp((double)p.sinks[h] - m);
          for (auto& o : out) o /= l;
          lse = m + std::log(l);
        }
        const int64_t o = b * p.out_sb + h * p.out_sh + row * p.out_ss;
        for (int64_t d = 0; d < p.d_v; ++d) {
          double x = out[d];
          if (p.out_elem == Elem::kI8) {
            const int64_t c = h * p.d_v + d;
            const float qs = p.quant_scale2.size() == 1 ? p.quant_scale2[0] : p.quant_scale2[c];
            const float qo = p.quant_offset2.empty()        ? 0.f
                             : p.quant_offset2.size() == 1 ? p.quant_offset2[0]
                                                           : p.quant_offset2[c];
            x = x * qs + qo;
          }
          cvt::Store(p.out, p.out_elem, o + d * p.out_sd, static_cast<float>(x));
        }
        if (p.lse) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = static_cast<float>(lse);
      }
    }
  }
}

}  // namespace openfia::internal::testing
