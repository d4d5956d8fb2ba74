// openfia internal: the fp64 reference for the canonical Problem.
//
// A literal transcription of docs/semantics.md 1.2-1.12 (the decisions of its section 6): scores
// are materialized per query row, accumulated in double, softmax without tiling. Only the roundings
// the NPU performs on purpose are reproduced (dequantized K/V and the unnormalized probabilities
// rounded to the query dtype, the output rounded to its dtype, the int8 paths' fp16 steps), so the
// fast engine can be compared against it with tolerances derived from the output dtype alone.
//
// Nothing is parallel. Per (batch, KV head) the keys that at least one valid query row can see
// are dequantized once into a dense float buffer; keys nobody can see are never read, so NaN
// written into masked, out-of-band, beyond-kv_len or unused-page storage cannot reach an output.
#include "reference/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/numeric.h"

namespace openfia::internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kF16Max = 65504.f;

// ---- addressing --------------------------------------------------------------------------

// Storage coordinates of one logical key in one KvOperand (problem.h, KvOperand).
struct KeyAddr {
  const Operand* op;
  const Dequant* dq;
  int64_t b;  // batch; physical block id when paged; 0 for the shared prefix
  int64_t s;  // token index; row inside the block when paged; prefix row
  int64_t lb = 0, ls = 0;  // batch and token position in its sequence (Dequant::logical)
};

// Logical keys j >= kv_total(b) name token j - kv_total(b) of the second source (problem.h,
// k2/v2): the reference numbers both sources in one dense key space per batch.
int64_t Kv2Len(const Problem& p, int64_t b) { return p.kv2_len.empty() ? 0 : p.kv2_len[b]; }

KeyAddr Locate2(const Problem& p, const KvOperand& kv, int64_t b, int64_t t) {
  if (p.block_table2 != nullptr) {
    const int64_t block = p.block_table2[b * p.bt_stride2 + t / p.block_size2];
    return {&kv.cache, &kv.dequant, block, t % p.block_size2, b, t};
  }
  return {&kv.cache, &kv.dequant, b, t, b, t};
}

KeyAddr Locate(const Problem& p, const KvOperand& kv, int64_t b, int64_t j) {
  if (j < p.prefix_len) return {&kv.prefix, &kv.prefix_dequant, 0, j, b, j};
  const int64_t t = p.kv_begin[b] + j - p.prefix_len;
  if (p.paged) {
    const int64_t block = p.block_table[b * p.bt_stride + t / p.block_size];
    return {&kv.cache, &kv.dequant, block, t % p.block_size, b, t};
  }
  return {&kv.cache, &kv.dequant, b, t, b, t};
}

// Element (h, d) of a key/value row as the matmul consumes it. Antiquant (docs/semantics.md 1.9):
// (x + offset) * scale in fp32, then rounded to the query dtype, because the NPU feeds the
// dequantized tile to the fp16/bf16 matmul. An f32 query keeps the fp32 value.
float LoadKv(const KeyAddr& a, int64_t h, int64_t d, Elem q_elem) {
  const Operand& o = *a.op;
  const float x = LoadFloat(o.Base(a.b), o.elem, o.Offset(a.b, h, a.s, d));
  const Dequant& dq = *a.dq;
  if (dq.kind == Dequant::Kind::kNone) return x;
  // per-tile scales: d_group channels share one; logical: per-token scales of a paged cache
  const int64_t idx = dq.logical ? dq.Index(a.lb, h, a.ls, d) : dq.Index(a.b, h, a.s, d);
  const float scale = LoadFloat(dq.scale, dq.scale_elem, idx);
  const float offset = dq.offset != nullptr ? LoadFloat(dq.offset, dq.offset_elem, idx) : 0.f;
  const float sum = x + offset;
  const float deq = sum * scale;
  return RoundTo(deq, q_elem);
}

// ---- visibility --------------------------------------------------------------------------

// Per-batch vectors of Problem may be left empty by hand-built problems when the feature is
// unused (no mask, no pse, no band); an empty vector means "0" (offsets) or "unbounded" (band).
int64_t At(const std::vector<int64_t>& v, int64_t b, int64_t absent) {
  return v.empty() ? absent : v[b];
}

// Keys [lo, hi] that the band admits for query i of batch b, clipped to [0, total).
void BandRange(const Problem& p, int64_t b, int64_t i, int64_t total, int64_t* lo,
               int64_t* hi) {
  const int64_t pre = At(p.band_pre, b, Problem::kNoBand);
  const int64_t next = At(p.band_next, b, Problem::kNoBand);
  *lo = std::max<int64_t>(0, i - pre);       // kNoBand is max/4: no overflow
  *hi = std::min<int64_t>(total - 1, i + next);
}

// The band is checked first, so the mask is read only inside the band.
bool MaskedBit(const Problem& p, int64_t b, int64_t i, int64_t j) {
  if (p.mask == nullptr) return false;
  const int64_t off = b * p.mask_sb + (At(p.mask_row0, b, 0) + i) * p.mask_ss +
                      (At(p.mask_col0, b, 0) + j) * p.mask_sk;
  return p.mask[off] != 0;
}

// Logical keys query i of batch b attends through KV head hk: the band/mask-visible keys in
// ascending order, or, with sparse selection, exactly the selected tokens in their given order
// (duplicates count as often as they appear; bands and masks do not apply).
void VisibleKeys(const Problem& p, int64_t b, int64_t hk, int64_t i, std::vector<int64_t>* keys) {
  keys->clear();
  if (!p.key_offset.empty()) {
    const int64_t r = (p.q_row_base[b] + i) * p.h_kv + hk;
    for (int64_t n = p.key_offset[r]; n < p.key_offset[r + 1]; ++n) {
      // Token t is logical key t (prefix_len is 0); a second-source token follows the first.
      const bool second = !p.key_source.empty() && p.key_source[n] != 0;
      keys->push_back(p.key_index[n] + (second ? p.kv_total(b) : 0));
    }
    return;
  }
  int64_t lo, hi;
  BandRange(p, b, i, p.kv_total(b), &lo, &hi);
  for (int64_t j = lo; j <= hi; ++j)
    if (!MaskedBit(p, b, i, j)) keys->push_back(j);
}

double Pse(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (p.pse == nullptr) return 0.0;
  const int64_t off = b * p.pse_sb + h * p.pse_sh + (At(p.pse_row0, b, 0) + i) * p.pse_ss +
                      (At(p.pse_col0, b, 0) + j) * p.pse_sk;
  return LoadDouble(p.pse, p.pse_elem, off);
}

// ---- fp16 / float helpers ----------------------------------------------------------------

float F16(float x) { return F16ToF32(F32ToF16(x)); }

// x * s + o with the product rounded to fp32 before the addition (docs/semantics.md 1.8 says fp32
// arithmetic); the volatile keeps a compiler from contracting the two into one fused FMA.
float MulAddF32(float x, float s, float o) {
  volatile float prod = x * s;
  return prod + o;
}

// dequant_scale1 is consumed as a "float19": the low 13 mantissa bits are cleared
// (docs/semantics.md 1.8, golden `ds1 = f32bits & 0xFFFFE000`). Idempotent, so harmless if the
// canonicalizer already truncated it.
float TruncateToFloat19(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= 0xFFFFE000u;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

// ---- outputs -----------------------------------------------------------------------------

// Writes output row (b, h, tensor row `row`) and its lse. `o` holds the row before
// post-quantization (zeros for a row with no visible key).
void WriteRow(const Problem& p, int64_t b, int64_t h, int64_t row, const std::vector<double>& o,
              double lse) {
  const bool post_quant = !p.quant_scale2.empty();
  for (int64_t d = 0; d < p.d_v; ++d) {
    const int64_t idx = b * p.out_sb + h * p.out_sh + row * p.out_ss + d * p.out_sd;
    const float x = static_cast<float>(o[d]);
    if (!post_quant) {
      StoreFloat(p.out, p.out_elem, idx, x);  // f16/bf16: nearest even (docs/semantics.md 1.2)
      continue;
    }
    // docs/semantics.md 1.8: y = x * qs2 + qo2 in fp32, round half away from zero, saturate.
    const int64_t c = h * p.d_v + d;
    const float qs2 = p.quant_scale2.size() == 1 ? p.quant_scale2[0] : p.quant_scale2[c];
    const float qo2 = p.quant_offset2.empty()       ? 0.f
                      : p.quant_offset2.size() == 1 ? p.quant_offset2[0]
                                                    : p.quant_offset2[c];
    static_cast<int8_t*>(p.out)[idx] = F32ToI8RoundAwaySat(MulAddF32(x, qs2, qo2));
  }
  if (p.lse != nullptr)
    p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = static_cast<float>(lse);
}

// ---- one (batch, KV head) ----------------------------------------------------------------

// Dense, dequantized K (d_qk + d_rope wide, rope last) and V rows of the keys some row needs.
struct Gathered {
  int64_t dk = 0, dv = 0;
  std::vector<float> k, v;  // [kv_total, dk], [kv_total, dv]; rows nobody sees stay 0, unread
};

Gathered Gather(const Problem& p, int64_t b, int64_t hk, const std::vector<char>& needed) {
  Gathered g;
  g.dk = p.d_qk + p.d_rope;
  g.dv = p.d_v;
  const int64_t total1 = p.kv_total(b);
  const int64_t total = total1 + Kv2Len(p, b);
  g.k.assign(total * g.dk, 0.f);
  g.v.assign(total * g.dv, 0.f);
  const Elem round_to = p.kv_round_elem();
  for (int64_t j = 0; j < total; ++j) {
    if (!needed[j]) continue;
    if (j >= total1) {  // second source: no rope (problem.h)
      const KeyAddr ka = Locate2(p, p.k2, b, j - total1);
      const KeyAddr va = Locate2(p, p.v2, b, j - total1);
      for (int64_t d = 0; d < p.d_qk; ++d) g.k[j * g.dk + d] = LoadKv(ka, hk, d, round_to);
      for (int64_t d = 0; d < p.d_v; ++d) g.v[j * g.dv + d] = LoadKv(va, hk, d, round_to);
      continue;
    }
    const KeyAddr ka = Locate(p, p.k, b, j);
    for (int64_t d = 0; d < p.d_qk; ++d) g.k[j * g.dk + d] = LoadKv(ka, hk, d, round_to);
    if (p.d_rope > 0) {
      const KeyAddr kr = Locate(p, p.k_rope, b, j);
      for (int64_t d = 0; d < p.d_rope; ++d)
        g.k[j * g.dk + p.d_qk + d] = LoadKv(kr, hk, d, round_to);
    }
    const KeyAddr va = Locate(p, p.v, b, j);
    for (int64_t d = 0; d < p.d_v; ++d) g.v[j * g.dv + d] = LoadKv(va, hk, d, round_to);
  }
  return g;
}

// Query row (b, h, row) as doubles, rope dims appended after the d_qk dims.
std::vector<double> LoadQuery(const Problem& p, int64_t b, int64_t h, int64_t row) {
  std::vector<double> q(p.d_qk + p.d_rope);
  for (int64_t d = 0; d < p.d_qk; ++d)
    q[d] = LoadDouble(p.q.Base(b), p.q.elem, p.q.Offset(b, h, row, d));
  for (int64_t d = 0; d < p.d_rope; ++d)
    q[p.d_qk + d] = LoadDouble(p.q_rope.Base(b), p.q_rope.elem, p.q_rope.Offset(b, h, row, d));
  return q;
}

// Max that propagates NaN: once a NaN score is seen the whole row becomes NaN, as IEEE
// arithmetic on the NPU's running max would make it.
double NanMax(double m, double s) {
  if (std::isnan(m)) return m;
  if (std::isnan(s)) return s;
  return s > m ? s : m;
}

// docs/semantics.md 1.2-1.5 for float/fp16/bf16 (incl. antiquant KV) queries. False, with o and
// lse untouched, where the row attends to no key (every score -inf).
bool FloatRow(const Problem& p, const Gathered& g, int64_t b, int64_t h, int64_t i,
              const std::vector<int64_t>& keys, std::vector<double>* o, double* lse) {
  const int64_t row = p.q_begin[b] + i;
  const std::vector<double> q = LoadQuery(p, b, h, row);
  std::vector<double> s(keys.size());
  for (size_t n = 0; n < keys.size(); ++n) {
    const float* k = g.k.data() + keys[n] * g.dk;
    double dot = 0.0;
    for (int64_t d = 0; d < g.dk; ++d) dot += q[d] * k[d];
    s[n] = dot * p.scale + Pse(p, b, h, i, keys[n]);  // scale, then pse (docs/semantics.md 1.2)
  }
  const bool has_sink = p.sinks != nullptr;
  const double sink = has_sink ? static_cast<double>(p.sinks[h]) : 0.0;
  double m = -kInf;
  for (double x : s) m = NanMax(m, x);
  // Every score -inf (a pse of -inf, infinite keys): the row attends to nothing and is one
  // without a visible key (0, lse +inf, sink or not), where exp(-inf - (-inf)) would be NaN;
  // PyTorch's SDPA gives such a row 0 as well.
  if (m == -kInf) return false;
  if (has_sink) m = NanMax(sink, m);

  // The sink's term of the denominator, exp(sink - m): exactly 1 when the sink is the maximum,
  // also for sink = +inf (the formula's limit: output 0, lse +inf); a NaN sink makes m and so the
  // whole row NaN.
  double l = !has_sink ? 0.0 : sink == m ? 1.0 : std::exp(sink - m);
  const bool round_p = p.q.elem != Elem::kF32;
  o->assign(p.d_v, 0.0);
  for (size_t n = 0; n < keys.size(); ++n) {
    const double e = std::exp(s[n] - m);
    l += e;  // the row sum uses the unrounded probabilities
    // docs/semantics.md 1.2: the unnormalized P is cast to the query dtype before P*V.
    const double pw = round_p ? RoundTo(static_cast<float>(e), p.q.elem) : e;
    const float* v = g.v.data() + keys[n] * g.dv;  // (no element when the value head size is 0)
    for (int64_t d = 0; d < p.d_v; ++d) (*o)[d] += pw * v[d];
  }
  for (int64_t d = 0; d < p.d_v; ++d) (*o)[d] /= l;
  *lse = std::log(l) + m;
  return true;
}

// docs/semantics.md 1.8: int8 Q/K/V with the fp16 arithmetic of the golden, emulated step by step.
// Decision: the max is taken over all visible keys at once, not the golden's running max over
// 1024-column chunks. The chunked form is the same function in exact arithmetic; its extra
// fp16 roundings of partial outputs are tiling artefacts that the kernel does not share
// (its tiles differ), so they are not part of the semantics. Sinks do not exist on this path.
// False as FloatRow.
bool FullQuantRow(const Problem& p, const Gathered& g, int64_t b, int64_t h, int64_t i,
                  const std::vector<int64_t>& keys, std::vector<double>* o, double* lse) {
  const int64_t row = p.q_begin[b] + i;
  const std::vector<double> q = LoadQuery(p, b, h, row);  // int8 values, exact
  const float ds1 = TruncateToFloat19(p.dequant_scale1);
  const float scale16 = F16(static_cast<float>(p.scale));  // fp16(scale)
  const float qs1_16 = F16(p.quant_scale1);                // fp16(quant_scale1)

  std::vector<float> s(keys.size());
  for (size_t n = 0; n < keys.size(); ++n) {
    const float* k = g.k.data() + keys[n] * g.dk;
    int64_t acc = 0;  // the cube's int32 accumulator (never near overflow for d <= 2^10)
    for (int64_t d = 0; d < g.dk; ++d)
      acc += static_cast<int64_t>(q[d]) * static_cast<int64_t>(k[d]);
    // S = fp16(clip(float(acc) * ds1, +-65504))
    float x = std::clamp(static_cast<float>(acc) * ds1, -kF16Max, kF16Max);
    x = F16(x);
    // S = fp16(S * fp16(scale)): the product of two fp16 values is exact in fp32, so this is a
    // single rounding, like the fp16 multiply.
    x = F16(x * scale16);
    // S = fp16(S + pse): the fp16 add of the golden's fp16 arrays.
    if (p.pse != nullptr) x = F16(x + static_cast<float>(Pse(p, b, h, i, keys[n])));
    s[n] = x;
  }
  // m = max over all visible keys (NaN-propagating; a NaN can only come from pse).
  double m = -kInf;
  for (float x : s) m = NanMax(m, x);
  if (m == -kInf) return false;  // every score -inf: no key attended (FloatRow)
  const float m32 = static_cast<float>(m);

  double l = 0.0;  // sum of the fp16 E values
  std::vector<int64_t> acc(p.d_v, 0);
  bool nan_row = std::isnan(m);
  for (size_t n = 0; n < keys.size() && !nan_row; ++n) {
    // E = fp16(exp(S - m)), exp in fp32.
    const float e = F16(std::exp(s[n] - m32));
    l += e;
    // P_i8 = clip(round_half_even(fp16(E * fp16(qs1))), -128, 127).
    const float pq = F16(e * qs1_16);
    if (std::isnan(pq)) { nan_row = true; break; }
    const int64_t p8 = static_cast<int64_t>(std::clamp(std::nearbyint(pq), -128.f, 127.f));
    // O_acc += P_i8 * V_i8 (int32 accumulate).
    const float* v = g.v.data() + keys[n] * g.dv;  // (no element when the value head size is 0)
    for (int64_t d = 0; d < p.d_v; ++d) acc[d] += p8 * static_cast<int64_t>(v[d]);
  }
  o->assign(p.d_v, 0.0);
  if (nan_row) {
    o->assign(p.d_v, std::numeric_limits<double>::quiet_NaN());
    *lse = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  // O = float(acc) * ds2 / fp16(l), in fp32.
  const float l16 = F16(static_cast<float>(l));
  for (int64_t d = 0; d < p.d_v; ++d) {
    const float od = static_cast<float>(acc[d]) * p.dequant_scale2;
    (*o)[d] = od / l16;
  }
  *lse = std::log(l) + m;
  return true;
}

}  // namespace

void RunReference(const Problem& p) {
  const int64_t group = p.group();
  std::vector<int64_t> keys;
  std::vector<double> o;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t qn = p.q_len[b];
    const int64_t total = p.kv_total(b);
    if (qn <= 0) continue;
    // docs/semantics.md 1.12: with post-quantization, a prompt (Q_S>1) batch without any key
    // outputs int8 0 ("PFA输出0"), while the incremental branch outputs the quantized zero
    // sat(round(qo2)) like every other row without a visible key. Rows keep the pre-filled 0.
    if (total == 0 && !p.quant_scale2.empty() && !p.incremental) {
      for (int64_t h = 0; h < p.h_q; ++h)
        for (int64_t i = 0; i < qn; ++i) {
          const int64_t row = p.q_begin[b] + i;
          for (int64_t d = 0; d < p.d_v; ++d)
            static_cast<int8_t*>(p.out)[b * p.out_sb + h * p.out_sh + row * p.out_ss +
                                        d * p.out_sd] = 0;
          if (p.lse != nullptr) p.lse[b * p.lse_sb + h * p.lse_sh + row * p.lse_ss] = kInf;
        }
      continue;
    }
    for (int64_t hk = 0; hk < p.h_kv; ++hk) {
      // Keys some row of this (batch, KV head) attends: only those are ever read.
      std::vector<char> needed(total + Kv2Len(p, b), 0);
      for (int64_t i = 0; i < qn; ++i) {
        VisibleKeys(p, b, hk, i, &keys);
        for (int64_t j : keys) needed[j] = 1;
      }
      const Gathered g = Gather(p, b, hk, needed);
      for (int64_t i = 0; i < qn; ++i) {
        VisibleKeys(p, b, hk, i, &keys);
        const int64_t row = p.q_begin[b] + i;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          // docs/semantics.md 1.4: a row that attends to no key (none visible, or every score
          // -inf) -> 0 and lse +inf.
          double lse = kInf;
          const bool attended = !keys.empty() && (p.full_quant
                                                      ? FullQuantRow(p, g, b, h, i, keys, &o, &lse)
                                                      : FloatRow(p, g, b, h, i, keys, &o, &lse));
          if (!attended) {
            o.assign(p.d_v, 0.0);
            lse = kInf;
          }
          WriteRow(p, b, h, row, o, lse);
        }
      }
    }
  }
}

}  // namespace openfia::internal
