// openfia internal: the bf16 dot-product tiles of the generic loop on AArch64 (FEAT_BF16 BFDOT),
// the NEON twin of attend_dot-inl.h (read that file first: the pair forms, which items and
// tiles qualify and why are the same; only the instructions and the 4-lane width differ).
//
// Included by kernels_neonbf16.cc inside the target's namespace (V: 4 f32 lanes, compiled for
// armv8.2-a+bf16) between generic/attend_base-inl.h and generic/attend_dot_common-inl.h (then
// attend-inl.h, with OPENFIA_ATTEND_BF16DOT defined). BFDOT multiplies 4 lanes of bf16
// pairs: lane i of the accumulator += a[2i] b[2i] + a[2i+1] b[2i+1], 8 multiply-adds per
// instruction where FMLA does 4. Without FEAT_EBF16 it reads bf16 subnormals as zero, flushes
// subnormal results and rounds its fp32 sums to odd: the exclusions of attend_dot-inl.h (no
// subnormal / non-finite query element, no non-finite value in a dot tile's V, ExpP's P never
// subnormal) cover the first two, and a sum rounded to odd errs by at most one fp32 ulp (the
// fp32-accumulation tolerance the tests allow). Tested under user-mode QEMU (whose "max" CPU has
// FEAT_BF16); not measured on hardware.

// Whether the query rows are free of subnormal and non-finite values (DotItemOk).
inline bool QueryDotSafe(const float* q, int64_t rows, int64_t ldq, int64_t D) {
  // |x| in (0, 2^-126) or not finite: exponent field 0 with a nonzero mantissa, or 255.
  uint32_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) {
      uint32_t u;
      std::memcpy(&u, q + r * ldq + d, 4);
      const uint32_t e = u & 0x7F800000u;
      bad |= e == 0x7F800000u || (e == 0 && (u & 0x007FFFFFu) != 0);
    }
  return bad == 0;
}

// 4 words (a[i], b[i]) as bf16 pairs, a in the low half: a and b hold bf16 values (their low
// 16 bits are zero), so taking the top halves is exact.
__attribute__((always_inline)) inline uint32x4_t PairWords(float32x4_t a, float32x4_t b) {
  return vsriq_n_u32(vreinterpretq_u32_f32(b), vreinterpretq_u32_f32(a), 16);
}

// 4 words of 8 channels in order, lo = channels [0, 4), hi = [4, 8) (bf16 values): word k is the
// pair (channel 2k, channel 2k + 1).
__attribute__((always_inline)) inline float32x4_t ChannelWords(float32x4_t lo, float32x4_t hi) {
  return vreinterpretq_f32_u32(PairWords(vuzp1q_f32(lo, hi), vuzp2q_f32(lo, hi)));
}

// qp[r * ldqp + k] for k < ldqp (ldqp >= ceil(D / 2)): pairs of channels, zero past D.
inline void QueryPairs(const float* q, int64_t rows, int64_t ldq, int64_t D, uint32_t* qp,
                       int64_t ldqp) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < ldqp; ++k) {
      const int64_t d = 2 * k;
      uint32_t lo = 0, hi = 0;
      if (d < D) std::memcpy(&lo, q + r * ldq + d, 4);
      if (d + 1 < D) std::memcpy(&hi, q + r * ldq + d + 1, 4);
      qp[r * ldqp + k] = (lo >> 16) | (hi & 0xFFFF0000u);
    }
}

// dst[j * lds + c] = (src[2j][c], src[2j+1][c]) for j < ceil(nrows / 2), c < ncol (a multiple of
// 4): rows of src (stride ls) paired two by two, a zero row past nrows.
inline void PairRows(const float* src, int64_t ls, int64_t nrows, int64_t ncol, uint32_t* dst,
                     int64_t lds) {
  for (int64_t j = 0; 2 * j < nrows; ++j) {
    const float* a = src + 2 * j * ls;
    const float* b = a + ls;
    const bool hb = 2 * j + 1 < nrows;
    for (int64_t c = 0; c < ncol; c += 4)
      vst1q_u32(dst + j * lds + c, PairWords(vld1q_f32(a + c), hb ? vld1q_f32(b + c) : V::Zero()));
  }
}

// c[r * ldc + 4 j + i] (+)= sum_{k < K2} pair a[r * lda + k] . pair b[k * ldb + 4 j + i] for R
// rows and C vectors of 4 columns: a's word broadcast, BFDOT into R x C accumulators starting at
// zero (scores, stored times `scale`) or at c (ACC: the P V accumulators).
template <int R, int C, bool ACC>
inline void DotBlock(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t K2,
                     float* c, int64_t ldc, float32x4_t scale) {
  float32x4_t acc[R][C];
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) acc[r][j] = ACC ? vld1q_f32(c + r * ldc + j * 4) : V::Zero();
  for (int64_t k = 0; k < K2; ++k) {
    bfloat16x8_t x[C];
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j) x[j] = vreinterpretq_bf16_u32(vld1q_u32(b + k * ldb + j * 4));
    OPENFIA_UNROLL
    for (int r = 0; r < R; ++r) {
      const bfloat16x8_t ab = vreinterpretq_bf16_u32(vld1q_dup_u32(a + r * lda + k));
      OPENFIA_UNROLL
      for (int j = 0; j < C; ++j) acc[r][j] = vbfdotq_f32(acc[r][j], ab, x[j]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < R; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < C; ++j)
      vst1q_f32(c + r * ldc + j * 4, ACC ? acc[r][j] : vmulq_f32(acc[r][j], scale));
}

// 4 probabilities stored as bf16 (round to nearest even, a NaN stays a NaN).
inline void StoreP(uint16_t* p, float32x4_t e) { V::StoreBF16(p, e); }

// ---- Direct pair packing: bf16 rows straight into pair form, without the fp32 staging ------
// For tiles whose K (and rope) and V rows are bf16 rows of vector-contiguous operands
// (MakeFastRows: channel vectors of 4 at f.doff) with channel counts that are multiples of 16
// (so that P V, which reads the padded value width, reads only written words).

// Channels [e0, e0 + 4) and [e1, e1 + 4) of a bf16 row as 4 words.
__attribute__((always_inline)) inline uint32x4_t Load8Channels(const uint16_t* row, int64_t e0,
                                                               int64_t e1) {
  return vreinterpretq_u32_u16(vcombine_u16(vld1_u16(row + e0), vld1_u16(row + e1)));
}

// kp[(w0 + k) * TN + n] = word k of key n's row (its channels 2k, 2k + 1) for k < D / 2,
// n < npad (zero past nk): a 4 x 4 transpose of 32-bit words per 4 keys and 8 channels.
inline void KeyPairsBf16(const FastRows& f, int64_t nk, int64_t D, int64_t w0, uint32_t* kp) {
  const int64_t npad = (nk + 3) / 4 * 4;
  for (int64_t n0 = 0; n0 < npad; n0 += 4) {
    const int m = static_cast<int>(std::min<int64_t>(4, nk - n0));
    const uint16_t* rows[4];
    for (int i = 0; i < 4; ++i)
      rows[i] = i < m ? static_cast<const uint16_t*>(f.row[n0 + i]) : nullptr;
    for (int64_t c = 0; c < D / 8; ++c) {
      const int64_t e0 = f.doff[2 * c], e1 = f.doff[2 * c + 1];
      float32x4_t r[4];
      for (int i = 0; i < 4; ++i)
        r[i] = i < m ? vreinterpretq_f32_u32(Load8Channels(rows[i], e0, e1)) : V::Zero();
      V::Transpose(r);
      for (int i = 0; i < 4; ++i)
        vst1q_f32(reinterpret_cast<float*>(kp + (w0 + 4 * c + i) * TN + n0), r[i]);
    }
  }
}

// vp[j * vps + d] = (V[2j][d], V[2j+1][d]) for d < Dv, zero past nk; returns whether a value is
// Inf or NaN (exponent field all ones).
inline bool ValuePairsBf16(const FastRows& f, int64_t nk, int64_t Dv, uint32_t* vp, int64_t vps) {
  const uint16x8_t ex = vdupq_n_u16(0x7F80);
  uint16x8_t bad = vdupq_n_u16(0);
  for (int64_t j = 0; 2 * j < nk; ++j) {
    const uint16_t* a = static_cast<const uint16_t*>(f.row[2 * j]);
    const uint16_t* b = 2 * j + 1 < nk ? static_cast<const uint16_t*>(f.row[2 * j + 1]) : nullptr;
    uint32_t* dst = vp + j * vps;
    for (int64_t c = 0; c < Dv / 8; ++c) {
      const int64_t e0 = f.doff[2 * c], e1 = f.doff[2 * c + 1];
      const uint16x8_t x = vreinterpretq_u16_u32(Load8Channels(a, e0, e1));
      const uint16x8_t y = b ? vreinterpretq_u16_u32(Load8Channels(b, e0, e1)) : vdupq_n_u16(0);
      bad = vorrq_u16(bad, vceqq_u16(vandq_u16(x, ex), ex));
      bad = vorrq_u16(bad, vceqq_u16(vandq_u16(y, ex), ex));
      vst1q_u16(reinterpret_cast<uint16_t*>(dst + 8 * c), vzip1q_u16(x, y));
      vst1q_u16(reinterpret_cast<uint16_t*>(dst + 8 * c + 4), vzip2q_u16(x, y));
    }
  }
  return vmaxvq_u16(bad) != 0;
}

constexpr int kDotLanes = 4;             // fp32 lanes of a DotBlock column vector
// PairWords / ChannelWords take the top halves (exact for bf16 values only): dequantized rows are
// rounded to bf16 first, plain or not.
constexpr bool kPairsRoundFp32 = false;
constexpr int64_t kDirectChannels = 16;  // so that P V, reading the padded value width, reads
                                         // only words ValuePairsBf16 wrote
using DotScale = float32x4_t;
inline DotScale DotSet1(float x) { return vdupq_n_f32(x); }
