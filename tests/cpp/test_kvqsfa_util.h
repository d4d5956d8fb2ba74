// Test helper for KvQuantSparseFlashAttention: builds the tensors of one call (query, 656-byte KV
// rows in BSND / TND / PA_BSND, sparse_indices, lengths, block_table) from per-batch logical data,
// and computes the expected output independently of the library's canonicalization and reference:
// it re-derives the token lists from the documented threshold rule (docs/semantics.md 2.3) and
// dequantizes the rows from their raw bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/numeric.h"
#include "openfia/kv_quant_sparse_flash_attention.h"

namespace openfia::kvqtest {

using internal::Elem;

struct Case {
  std::string layout_q = "BSND", layout_kv = "BSND";
  DType qdt = DType::kBFloat16;
  DType kvdt = DType::kInt8;
  int64_t batch = 1, s1 = 2, heads = 2, s2 = 24, topk = 8;
  int64_t sparse_block_size = 1, sparse_mode = 3, block_size = 16;
  std::vector<int64_t> act_q, act_kv;  // per-batch lengths; empty: s1 / s2 for every batch
  bool pass_act_q = false, pass_act_kv = false;  // BSND: pass the lengths explicitly
  bool sinks = false;
  int64_t extra_blocks = 3;     // PA: unused (poisoned) blocks in the pool
  int64_t key_dim0_pad = 0;     // PA/BSND: extra rows between dim-0 slices (non-contiguous key)
  uint32_t seed = 1;
  double scale = 1.0 / std::sqrt(576.0);
};

inline Elem QElem(DType t) { return t == DType::kFloat16 ? Elem::kF16 : Elem::kBF16; }

inline uint16_t ToQ(float x, DType t) {
  return t == DType::kFloat16 ? internal::F32ToF16(x) : internal::F32ToBF16(x);
}
inline float FromQ(uint16_t x, DType t) {
  return t == DType::kFloat16 ? internal::F16ToF32(x) : internal::BF16ToF32(x);
}
inline float NopeValue(uint8_t byte, DType kv) {
  switch (kv) {
    case DType::kInt8: return static_cast<float>(static_cast<int8_t>(byte));
    case DType::kFloat8E4M3: return internal::FP8E4M3ToF32(byte);
    default: return internal::HiF8ToF32(byte);  // kHiFloat8, kUInt8
  }
}

// Everything one call needs, owning its storage.
struct Built {
  Case c;
  std::vector<int64_t> q_len, kv_len, q_begin, kv_begin;
  std::vector<uint16_t> query;
  // Optional: the same query with last-dimension stride 2 (Args passes this view instead; the
  // oracle keeps reading `query`).
  std::vector<uint16_t> query_wide;
  std::vector<float> key_store;  // 4-byte aligned backing for the 656-byte rows
  std::vector<uint8_t> value;    // 512-wide nope-only value (its content is never read)
  std::vector<int32_t> indices, block_table;
  std::vector<int32_t> act_q, act_kv;  // what is passed (cumulative for TND)
  std::vector<float> sinks;
  std::vector<int64_t> key_sizes, key_strides, value_sizes;
  std::vector<int64_t> out_sizes;
  int64_t rows_q = 0;  // S1 (BSND) or T (TND)

  uint8_t* key_bytes() { return reinterpret_cast<uint8_t*>(key_store.data()); }
  const uint8_t* key_bytes() const { return reinterpret_cast<const uint8_t*>(key_store.data()); }

  // Byte offset of KV token t of batch b (requires PA mapping for PA_BSND).
  int64_t RowOffset(int64_t b, int64_t t) const {
    if (c.layout_kv == "TND") return (kv_begin[b] + t) * key_strides[0];
    if (c.layout_kv == "PA_BSND") {
      const int64_t cols = static_cast<int64_t>(block_table.size()) / c.batch;
      const int64_t blk = block_table[b * cols + t / c.block_size];
      return blk * key_strides[0] + (t % c.block_size) * key_strides[1];
    }
    return b * key_strides[0] + t * key_strides[1];
  }
  int64_t QOffset(int64_t b, int64_t row, int64_t h) const {
    if (c.layout_q == "TND") return (row * c.heads + h) * 576;
    return ((b * c.s1 + row) * c.heads + h) * 576;
  }

  KvqsfaArgs Args() {
    KvqsfaArgs a;
    const std::vector<int64_t> qsz = c.layout_q == "TND"
                                         ? std::vector<int64_t>{rows_q, c.heads, 576}
                                         : std::vector<int64_t>{c.batch, c.s1, c.heads, 576};
    a.query = TensorView(query.data(), c.qdt, qsz);
    if (!query_wide.empty()) {
      std::vector<int64_t> st(qsz.size());
      int64_t s = 2;
      for (size_t i = qsz.size(); i-- > 0;) {
        st[i] = s;
        s *= qsz[i];
      }
      a.query = TensorView(query_wide.data(), c.qdt, qsz, st);
    }
    a.key = TensorView(key_store.data(), c.kvdt, key_sizes, key_strides);
    a.value = TensorView(value.data(), c.kvdt, value_sizes);
    const std::vector<int64_t> isz =
        c.layout_q == "TND" ? std::vector<int64_t>{rows_q, 1, c.topk}
                            : std::vector<int64_t>{c.batch, c.s1, 1, c.topk};
    a.sparse_indices = TensorView(indices.data(), DType::kInt32, isz);
    a.scale_value = c.scale;
    a.attention_mode = 2;
    a.sparse_block_size = c.sparse_block_size;
    a.sparse_mode = c.sparse_mode;
    a.layout_query = c.layout_q;
    a.layout_kv = c.layout_kv;
    if (!act_q.empty())
      a.actual_seq_lengths_query =
          TensorView(act_q.data(), DType::kInt32, {static_cast<int64_t>(act_q.size())});
    if (!act_kv.empty())
      a.actual_seq_lengths_kv =
          TensorView(act_kv.data(), DType::kInt32, {static_cast<int64_t>(act_kv.size())});
    if (c.layout_kv == "PA_BSND")
      a.block_table = TensorView(block_table.data(), DType::kInt32,
                                 {c.batch, static_cast<int64_t>(block_table.size()) / c.batch});
    if (c.sinks) a.sinks = TensorView(sinks.data(), DType::kFloat32, {c.heads});
    return a;
  }
};

// A random nope byte of the format whose value is finite and moderate (|v| <= 16 for the float
// formats, so scores stay in a range where softmax is not one-hot).
inline uint8_t RandomNope(std::mt19937& rng, DType kv) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (;;) {
    const uint8_t x = static_cast<uint8_t>(byte(rng));
    const float v = NopeValue(x, kv);
    if (std::isfinite(v) && std::fabs(v) <= (kv == DType::kInt8 ? 127.f : 16.f)) return x;
  }
}

inline void PutFloat(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

inline Built Build(const Case& c) {
  Built B;
  B.c = c;
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> unif(-1.f, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();

  B.q_len = c.act_q.empty() ? std::vector<int64_t>(c.batch, c.s1) : c.act_q;
  B.kv_len = c.act_kv.empty() ? std::vector<int64_t>(c.batch, c.s2) : c.act_kv;
  B.q_begin.assign(c.batch, 0);
  B.kv_begin.assign(c.batch, 0);
  const bool q_tnd = c.layout_q == "TND", kv_tnd = c.layout_kv == "TND";
  const bool pa = c.layout_kv == "PA_BSND";
  int64_t tq = 0, tkv = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    if (q_tnd) B.q_begin[b] = tq;
    if (kv_tnd) B.kv_begin[b] = tkv;
    tq += B.q_len[b];
    tkv += B.kv_len[b];
  }
  B.rows_q = q_tnd ? tq + 1 : c.s1;  // TND: one trailing padding row past the last batch

  // ---- query: valid rows random, every other row NaN (must never be read) ----
  const int64_t qrows = q_tnd ? B.rows_q : c.batch * c.s1;
  B.query.assign(qrows * c.heads * 576, ToQ(nan, c.qdt));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < B.q_len[b]; ++i)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t d = 0; d < 576; ++d)
          B.query[B.QOffset(b, B.q_begin[b] + i, h) + d] = ToQ(unif(rng), c.qdt);

  // ---- key storage: every row starts poisoned (NaN scales and rope) ----
  int64_t dim0 = 0, dim1 = 0;
  if (pa) {
    int64_t used = 0;
    for (int64_t b = 0; b < c.batch; ++b) used += (B.kv_len[b] + c.block_size - 1) / c.block_size;
    dim0 = used + c.extra_blocks;
    dim1 = c.block_size;
    // block_table: columns enough for s2 tokens; ids a shuffled permutation of the pool.
    const int64_t cols = std::max<int64_t>(1, (c.s2 + c.block_size - 1) / c.block_size);
    std::vector<int32_t> ids(dim0);
    for (int64_t i = 0; i < dim0; ++i) ids[i] = static_cast<int32_t>(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    B.block_table.assign(c.batch * cols, -7);  // unused columns hold garbage
    int64_t next = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t j = 0; j < (B.kv_len[b] + c.block_size - 1) / c.block_size; ++j)
        B.block_table[b * cols + j] = ids[next++];
    B.key_sizes = {dim0, dim1, 1, 656};
  } else if (kv_tnd) {
    dim0 = tkv + 2;  // two trailing rows no batch owns
    B.key_sizes = {dim0, 1, 656};
  } else {
    dim0 = c.batch;
    dim1 = c.s2;
    B.key_sizes = {dim0, dim1, 1, 656};
  }
  const int64_t row_stride = 656;
  if (kv_tnd) {
    B.key_strides = {row_stride, row_stride, 1};
  } else {
    B.key_strides = {(dim1 + c.key_dim0_pad) * row_stride, row_stride, row_stride, 1};
  }
  const int64_t total_bytes = kv_tnd ? dim0 * row_stride : dim0 * B.key_strides[0];
  B.key_store.assign((total_bytes + 3) / 4, 0.f);
  uint8_t* kb = B.key_bytes();
  const int64_t nrows = total_bytes / row_stride;
  for (int64_t r = 0; r < nrows; ++r) {
    uint8_t* row = kb + r * row_stride;
    for (int64_t d = 0; d < 64; ++d) PutU16(row + 512 + 2 * d, ToQ(nan, c.qdt));
    for (int64_t t = 0; t < 4; ++t) PutFloat(row + 640 + 4 * t, nan);
  }
  // Valid tokens: random nope bytes, rope values, scales of mixed sign.
  const float scale_mag = c.kvdt == DType::kInt8 ? 1.f / 64 : 1.f / 8;
  std::uniform_real_distribution<float> sdist(0.5f * scale_mag, 1.5f * scale_mag);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t t = 0; t < B.kv_len[b]; ++t) {
      uint8_t* row = kb + B.RowOffset(b, t);
      for (int64_t d = 0; d < 512; ++d) row[d] = RandomNope(rng, c.kvdt);
      for (int64_t d = 0; d < 64; ++d) PutU16(row + 512 + 2 * d, ToQ(unif(rng), c.qdt));
      for (int64_t tile = 0; tile < 4; ++tile)
        PutFloat(row + 640 + 4 * tile, (rng() & 1 ? 1.f : -1.f) * sdist(rng));
    }
  B.value_sizes = B.key_sizes;
  B.value_sizes.back() = 512;
  int64_t vn = 1;
  for (int64_t s : B.value_sizes) vn *= s;
  B.value.assign(vn, 0);

  // ---- sparse_indices: per valid row a mix of in-range blocks, duplicates, blocks at or past
  // the threshold (skipped) and blocks past kv_len but inside the cache; -1 tail ----
  const int64_t irows = q_tnd ? B.rows_q : c.batch * c.s1;
  B.indices.assign(irows * c.topk, -1);
  for (int64_t b = 0; b < c.batch; ++b) {
    int64_t cap;
    if (pa) cap = static_cast<int64_t>(B.block_table.size()) / c.batch * c.block_size;
    else if (kv_tnd) cap = dim0 - B.kv_begin[b];
    else cap = c.s2;
    const int64_t nblk_cap = (cap + c.sparse_block_size - 1) / c.sparse_block_size;
    for (int64_t i = 0; i < B.q_len[b]; ++i) {
      const int64_t row = B.q_begin[b] + i;
      int32_t* r = B.indices.data() + (q_tnd ? row : b * c.s1 + row) * c.topk;
      // Entries the kernel may read: bounded by the cache so validation accepts them.
      const int64_t nvalid = std::uniform_int_distribution<int64_t>(0, c.topk)(rng);
      for (int64_t e = 0; e < nvalid; ++e) {
        int64_t blk;
        const int kind = static_cast<int>(rng() % 8);
        if (kind == 0 && e > 0) blk = r[e - 1];  // duplicate
        else if (kind == 1) blk = nblk_cap - 1;  // last block of the cache (often skipped)
        else blk = std::uniform_int_distribution<int64_t>(
                 0, std::max<int64_t>(0, (B.kv_len[b] - 1) / c.sparse_block_size))(rng);
        r[e] = static_cast<int32_t>(std::min<int64_t>(blk, nblk_cap - 1));
      }
    }
  }

  // ---- lengths, sinks, output ----
  if (q_tnd) {
    for (int64_t b = 0; b < c.batch; ++b)
      B.act_q.push_back(static_cast<int32_t>(B.q_begin[b] + B.q_len[b]));
  } else if (c.pass_act_q || !c.act_q.empty()) {
    for (int64_t b = 0; b < c.batch; ++b) B.act_q.push_back(static_cast<int32_t>(B.q_len[b]));
  }
  if (kv_tnd) {
    for (int64_t b = 0; b < c.batch; ++b)
      B.act_kv.push_back(static_cast<int32_t>(B.kv_begin[b] + B.kv_len[b]));
  } else if (pa || c.pass_act_kv || !c.act_kv.empty()) {
    for (int64_t b = 0; b < c.batch; ++b) B.act_kv.push_back(static_cast<int32_t>(B.kv_len[b]));
  }
  if (c.sinks) {
    std::uniform_real_distribution<float> sk(-2.f, 4.f);
    for (int64_t h = 0; h < c.heads; ++h) B.sinks.push_back(sk(rng));
  }
  B.out_sizes = q_tnd ? std::vector<int64_t>{B.rows_q, c.heads, 512}
                      : std::vector<int64_t>{c.batch, c.s1, c.heads, 512};
  return B;
}

// Expected output (float64) and per-element tolerance, from the documented semantics alone.
struct Expected {
  std::vector<double> out, tol;
};

inline Expected Expect(const Built& B) {
  const Case& c = B.c;
  const bool q_tnd = c.layout_q == "TND";
  int64_t n = 1;
  for (int64_t s : B.out_sizes) n *= s;
  Expected E;
  E.out.assign(n, 0.0);
  E.tol.assign(n, 0.0);
  // Unit roundoff of the query dtype: output rounding (<= u|ref|) and the rounding of the
  // unnormalized probabilities before P*V (<= u max|v|) bound the difference to the exact value.
  const double u = c.qdt == DType::kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  // Absolute rounding error in the subnormal range (half the smallest spacing): fp16 outputs and
  // probabilities below 2^-14 round on an absolute grid of 2^-24. bf16 shares fp32's range.
  const double sub = c.qdt == DType::kFloat16 ? std::ldexp(1.0, -25) : 0.0;
  const uint8_t* kb = B.key_bytes();
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t S1 = B.q_len[b], S2 = B.kv_len[b];
    for (int64_t i = 0; i < S1; ++i) {
      const int64_t row = B.q_begin[b] + i;
      // Token list: the documented rule, written out independently.
      std::vector<int64_t> tokens;
      const bool invalid_row = c.sparse_mode == 3 && i < S1 - S2;
      if (!invalid_row) {
        const int64_t thr = c.sparse_mode == 3 ? S2 - S1 + i + 1 : S2;
        const int64_t bs = c.sparse_block_size;
        const int64_t nread = std::min<int64_t>(c.topk, (thr + bs - 1) / bs);
        const int32_t* r = B.indices.data() + (q_tnd ? row : b * c.s1 + row) * c.topk;
        for (int64_t e = 0; e < nread && r[e] != -1; ++e) {
          const int64_t begin = int64_t{r[e]} * bs;
          for (int64_t t = begin; t < begin + bs && t < thr; ++t) tokens.push_back(t);
        }
      }
      if (tokens.empty()) continue;  // 0, tolerance 0
      // Dequantized K (576) and V (512) of the tokens.
      std::vector<double> K(tokens.size() * 576);
      for (size_t j = 0; j < tokens.size(); ++j) {
        const uint8_t* rowp = kb + B.RowOffset(b, tokens[j]);
        for (int64_t d = 0; d < 512; ++d) {
          float scale;
          std::memcpy(&scale, rowp + 640 + 4 * (d / 128), 4);
          const float x = NopeValue(rowp[d], c.kvdt) * scale;
          K[j * 576 + d] = FromQ(ToQ(x, c.qdt), c.qdt);
        }
        for (int64_t d = 0; d < 64; ++d) {
          uint16_t r16;
          std::memcpy(&r16, rowp + 512 + 2 * d, 2);
          K[j * 576 + 512 + d] = FromQ(r16, c.qdt);
        }
      }
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t qo = B.QOffset(b, row, h);
        std::vector<double> s(tokens.size());
        double m = c.sinks ? B.sinks[h] : -std::numeric_limits<double>::infinity();
        for (size_t j = 0; j < tokens.size(); ++j) {
          double dot = 0;
          for (int64_t d = 0; d < 576; ++d) dot += FromQ(B.query[qo + d], c.qdt) * K[j * 576 + d];
          s[j] = dot * c.scale;
          m = std::max(m, s[j]);
        }
        double l = c.sinks ? std::exp(B.sinks[h] - m) : 0.0;
        std::vector<double> acc(512, 0.0), vmax(512, 0.0);
        for (size_t j = 0; j < tokens.size(); ++j) {
          const double p = std::exp(s[j] - m);
          l += p;
          for (int64_t d = 0; d < 512; ++d) {
            acc[d] += p * K[j * 576 + d];
            vmax[d] = std::max(vmax[d], std::fabs(K[j * 576 + d]));
          }
        }
        const int64_t base = q_tnd ? (row * c.heads + h) * 512
                                   : ((b * c.s1 + row) * c.heads + h) * 512;
        for (int64_t d = 0; d < 512; ++d) {
          E.out[base + d] = acc[d] / l;
          E.tol[base + d] = u * (std::fabs(E.out[base + d]) + vmax[d]) +
                            sub * (1.0 + static_cast<double>(tokens.size()) * vmax[d] / l) +
                            // fp32 accumulation of up to n + 576 terms (an engine may)
                            static_cast<double>(tokens.size() + 576) * std::ldexp(1.0, -24) *
                                vmax[d];
        }
      }
    }
  }
  return E;
}

}  // namespace openfia::kvqtest
