// openfia internal: the AVX2 decode kernel (few query rows per KV head; bf16, int8 or int4 K/V).
//
// Included by kernels_avx2.cc inside namespace openfia::internal::avx2_target, after
// attend-inl.h (ResolveKey, DqVecOk, ExpScalar, V): the kernel decode_avx2 of the kernel lists,
// which runs the items DecodeCan accepts (the others go further down the list).
//
// Decode reads every K/V byte for only R = G x query rows (<= 8) rows, and without a bf16 dot
// instruction each product is an fp32 FMA: the generic streaming loop spent ~465 instructions per
// key and KV head (bf16 widened 8 channels at a time, one horizontal sum per key and row, the
// FMA chains at their latency bound) for 128 FMAs of work. Here, per 64-key tile:
//   scores   a bf16 row is read 16 channels (32 bytes) at a time and split by one shift and one
//            mask into its even and odd channels (each 32-bit lane holds a channel pair); the
//            query rows are stored in the same [8 even | 8 odd] order per 16 channels, so two
//            FMAs per row take both halves. Blocks of R rows x KB keys (12 accumulators: the
//            chains have latency slack) end in one transposing horizontal sum per 4
//            accumulators. int8 / int4 keys are widened 8 channels at a time and dequantized in
//            registers with attend-inl.h's DqAt operations and rounding (DecDequant), so the
//            dequantized keys are bitwise the reference's. Scores land key-major, st[key][R].
//   softmax  on the key-major scores directly: a vector holds 8 / R keys x R rows, so the
//            row maxima and sums are lane folds and no transpose is needed; the operations of
//            attend-inl.h (scale, running max, exp, sum, P rounded to the query dtype).
//   P V      in chunks of kDecChunk keys: each value row widened by the same shift / mask (or,
//            for int8 / int4 values, the chunk dequantized once into an fp32 buffer), FMAed into
//            up to 8 accumulators (R rows x 4 / R groups of 16 channels); with bf16 values the
//            row states hold every 16 channels as [8 even | 8 odd] while the item runs
//            (Unpermute16 at the end).
// bf16 x bf16 products are exact in fp32; only the summation order differs from the generic
// loop (both within the fp32-accumulation tolerance of the fp64 reference).
//
// Memory order matters most: an item spans several KV heads (plan.h n_hk), and the kernel reads
// token after token, every head's row of a token after the other (score blocks of all heads for
// each KB keys, P V chunks for all heads), which a [block, block_size, H_kv * D] cache streams
// ~1.6x faster than head after head (architecture_notes.md, session 7). A prefetch stream in
// the same order (DecPrefetcher, kDecAhead tokens ahead; into L2 for a token's contiguous rows,
// non-temporal for rows apart) is issued a few lines per block, never as a burst.
//
// Items it runs: dense (no sparse lists, no second source), no rope, no pse, no mask, no band
// cutting into the item's keys (every tile fully visible), R = 1, 2, 4 or 8 rows per KV head
// (GQA groups of 1, 2, 4, 8 at one query; other R run the generic loop), d_qk and d_v multiples
// of 16 (<= 1024), K and V each bf16 (a bf16 shared prefix allowed) or int8 / int4 with a
// vector antiquant (DecOperandKind), and the scratch to hold the item (DecScratchFloats).

#include "engine/kernels/generic/decode_tile-inl.h"

constexpr int64_t kDecChunk = 8;  // keys per P V chunk (all heads' value rows stay in L1)

// 8 channels [d, d + 8) of an int8 / int4 row as fp32 (exact small integers), in channel order.
template <DecKind K>
__attribute__((always_inline)) inline __m256 DecLoadQ8(const char* row, int64_t d) {
  if constexpr (K == DecKind::kI8) return V::LoadI8(reinterpret_cast<const int8_t*>(row) + d);
  else return V::LoadI4(reinterpret_cast<const uint8_t*>(row) + d / 2);
}

// (x + offset) * scale rounded to the query dtype: the fp32 operations of attend-inl.h's DqAt in
// the same order, so the dequantized values are bitwise those of the reference.
// FIN: every value (x + offset) * scale of the block is zero or a normal float below 2^111
// (DecFastRange), so the bf16 rounding can be the split below (no NaN, infinity, subnormal or
// overflow to handle).
template <bool OFF, Elem QE, bool FIN = false>
__attribute__((always_inline)) inline __m256 DecDequant(__m256 x, __m256 scale, __m256 offset) {
  if constexpr (OFF) x = _mm256_add_ps(x, offset);
  x = _mm256_mul_ps(x, scale);
  if constexpr (QE == Elem::kBF16 && FIN) {
    // Veltkamp's split at 16 bits: c - (c - x) with c = x * (2^16 + 1) is x rounded to 8
    // significant bits, to nearest even, which is cvt::F32ToBF16 bit for bit for zero and every
    // normal |x| < 2^111 (test NumericBF16.VeltkampSplitRoundsLikeBf16InItsRange; the caller
    // proves the range, DecFastRange). 3 floating-point operations on any FP pipe instead of 5
    // integer ones, which share the FMA pipes: int8 decode in L3 1.06x (Zen 3). The barrier
    // keeps c - x from being contracted into an FMA (c must be rounded).
    __m256 c = _mm256_mul_ps(x, _mm256_set1_ps(65537.f));
    asm("" : "+x"(c));
    return _mm256_sub_ps(c, _mm256_sub_ps(c, x));
  } else if constexpr (QE == Elem::kBF16) {
    return V::RoundBF16(x);
  } else if constexpr (QE == Elem::kF16) {
    return V::RoundF16(x);
  } else {
    return x;
  }
}

// Whether every value (x + o) * s of a row, x an integer with |x| <= 2^XL (int8: 7, int4: 3),
// is zero or a normal float below 2^111 (DecDequant's FIN), from the exponents alone (once per
// key and head: a few integer operations). With e(v) = floor(log2 |v|):
//   above: |x + o| <= 2^XL + |o| < 2^(max(XL, e(o) + 1) + 1) and |s| < 2^(e(s) + 1), so the
//          product stays below 2^110 (the two fp32 roundings cannot reach 2^111) when
//          max(XL, e(o) + 1) + e(s) + 2 <= 110;
//   below: x + o is a multiple of u = min(1, ulp(o)) = 2^min(0, e(o) - 23) (u = 1 for o = 0),
//          so a nonzero |x + o| >= u and the product >= 2^-125 when e(s) + log2 u >= -125.
template <int XL>
__attribute__((always_inline)) inline bool DecFastRange(float s, float o) {
  const uint32_t us = std::bit_cast<uint32_t>(s) & 0x7FFFFFFFu;
  const uint32_t uo = std::bit_cast<uint32_t>(o) & 0x7FFFFFFFu;
  const int bs = static_cast<int>(us >> 23), bo = static_cast<int>(uo >> 23);
  if (bs == 255 || bo == 255) return false;  // an infinity or NaN
  if (us == 0) return true;                  // every value is a zero
  if (bs == 0) return false;                 // a subnormal scale
  const int es = bs - 127, eo = std::max(bo, 1) - 127;  // a subnormal o counts as 2^-126
  if (std::max(XL, eo + 1) + es + 2 > 110) return false;
  const int lu = uo == 0 ? 0 : std::min(0, eo - 23);
  return es + lu >= -125;
}

template <DecKind K>
constexpr int DecXl() {
  return K == DecKind::kI8 ? 7 : 3;
}

// DecFastRange of every channel of a per-channel antiquant (DecDq::chan, n_hk heads).
template <DecKind K>
inline bool DecChanFast(const DecDq& dq, int64_t n_hk) {
  if (!dq.per_chan) return false;
  for (int64_t x = 0; x < n_hk; ++x)
    for (int64_t c = 0; c < dq.D; ++c)
      if (!DecFastRange<DecXl<K>()>(dq.chan[2 * x * dq.D + c], dq.chan[(2 * x + 1) * dq.D + c]))
        return false;
  return true;
}

// The even channels (low halves) and odd channels (high halves) of 16 bf16 values.
__attribute__((always_inline)) inline void DecSplit(const char* p, __m256* even, __m256* odd) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  *even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
  *odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// The sums of a, b, c, d (8 lanes each) as one vector [sum a, sum b, sum c, sum d].
__attribute__((always_inline)) inline __m128 DecSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// st[(n0 + k) * RP + r] = q_r . K[n0 + k] for r < RP, k < KB: q rows at stride D floats (packed
// [8 even | 8 odd] per 16 channels), key rows krow[n] + x * step[n] (head x).
// RP >= 2 runs in passes of two rows whose four query vectors per 16 channels stay in registers
// beside 2 x KB accumulators, the key rows split again for each pass (the second pass finds them
// in L1): a block of 4 rows x 3 keys with the query operands loaded by every FMA read 1.25
// vectors per FMA and ran the 4-row score phase at 52 cycles per key and head (Zen 4, AVX2, rows
// from L2), this one 47 (architecture_notes.md, session 17). Each accumulator sums its products
// in the same order, so the scores are bitwise the same.
template <int RP, int KB>
__attribute__((always_inline)) inline void DecScoreBlock(const float* q, int64_t D,
                                                         const char* const* krow,
                                                         const int64_t* step, int64_t x,
                                                         int64_t n0, float* st) {
  constexpr int RR = RP < 2 ? RP : 2;  // rows per pass
  static_assert((RR * KB) % 4 == 0, "accumulators are summed four at a time");
  const char* kr[KB];
  OPENFIA_UNROLL
  for (int k = 0; k < KB; ++k) kr[k] = krow[n0 + k] + x * step[n0 + k];
  OPENFIA_UNROLL
  for (int r0 = 0; r0 < RP; r0 += RR) {
    __m256 acc[KB][RR];
    OPENFIA_UNROLL
    for (int k = 0; k < KB; ++k)
      OPENFIA_UNROLL
      for (int r = 0; r < RR; ++r) acc[k][r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __m256 qe[RR], qo[RR];
      OPENFIA_UNROLL
      for (int r = 0; r < RR; ++r) {
        qe[r] = _mm256_loadu_ps(q + (r0 + r) * D + d);
        qo[r] = _mm256_loadu_ps(q + (r0 + r) * D + d + 8);
      }
      OPENFIA_UNROLL
      for (int k = 0; k < KB; ++k) {
        __m256 e, o;
        DecSplit(kr[k] + 2 * d, &e, &o);
        OPENFIA_UNROLL
        for (int r = 0; r < RR; ++r) acc[k][r] = _mm256_fmadd_ps(qe[r], e, acc[k][r]);
        OPENFIA_UNROLL
        for (int r = 0; r < RR; ++r) acc[k][r] = _mm256_fmadd_ps(qo[r], o, acc[k][r]);
      }
    }
    // acc[k][r] is st[(n0 + k) * RP + r0 + r]: one row (RR = 1) is the memory order; two rows
    // of keys k, k + 1 are two pairs.
    const __m256* a = &acc[0][0];
    OPENFIA_UNROLL
    for (int i = 0; i < RR * KB; i += 4) {
      const __m128 s4 = DecSum4(a[i], a[i + 1], a[i + 2], a[i + 3]);
      if constexpr (RR == 1) {
        _mm_storeu_ps(st + n0 + i, s4);
      } else {
        const int64_t k = i / 2;
        _mm_storel_pi(reinterpret_cast<__m64*>(st + (n0 + k) * RP + r0), s4);
        _mm_storeh_pi(reinterpret_cast<__m64*>(st + (n0 + k + 1) * RP + r0), s4);
      }
    }
  }
}

// st[(n0 + k) * RP + r] = q_r . deq(K[n0 + k]) for an int8 / int4 K: q rows in channel order;
// each 8 channels of a key are widened, dequantized (DecDequant) and FMAed into RP rows. sc / oc:
// per-row parameters of the KB keys, or (CHAN) the head's per-channel vectors.
template <int RP, int KB, DecKind K, bool OFF, bool CHAN, Elem QE, bool FIN>
__attribute__((always_inline)) inline void DecScoreBlockDq(const float* q, int64_t D,
                                                           const char* const* kr,
                                                           const float* sc, const float* oc,
                                                           int64_t n0, float* st) {
  static_assert((RP * KB) % 4 == 0, "accumulators are summed four at a time");
  __m256 acc[KB][RP];
  OPENFIA_UNROLL
  for (int k = 0; k < KB; ++k)
    OPENFIA_UNROLL
    for (int r = 0; r < RP; ++r) acc[k][r] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    OPENFIA_UNROLL
    for (int k = 0; k < KB; ++k) {
      const __m256 s = CHAN ? _mm256_loadu_ps(sc + d) : _mm256_set1_ps(sc[k]);
      const __m256 o = !OFF ? _mm256_setzero_ps() : CHAN ? _mm256_loadu_ps(oc + d)
                                                         : _mm256_set1_ps(oc[k]);
      const __m256 x = DecDequant<OFF, QE, FIN>(DecLoadQ8<K>(kr[k], d), s, o);
      OPENFIA_UNROLL
      for (int r = 0; r < RP; ++r)
        acc[k][r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + r * D + d), x, acc[k][r]);
    }
  }
  const __m256* a = &acc[0][0];
  OPENFIA_UNROLL
  for (int i = 0; i < RP * KB; i += 4)
    _mm_storeu_ps(st + n0 * RP + i, DecSum4(a[i], a[i + 1], a[i + 2], a[i + 3]));
}

// Dequantized value rows [n0, n1) of head x into vb (fp32, rows of Dv, channel order).
template <DecKind K, bool OFF, bool CHAN, Elem QE>
inline void DecDequantRows(const DecTile& t, const DecDq& dq, int64_t hk, int64_t x, int64_t n0,
                           int64_t n1, int64_t Dv, float* vb) {
  const float* cs = CHAN ? dq.chan + 2 * x * Dv : nullptr;
  // One row: the parameters as vectors (per channel) or broadcast (per row).
  const auto row_of = [&]<bool FIN>(const char* row, float* dst, __m256 vs, __m256 vo) {
    for (int64_t d = 0; d < Dv; d += 8) {
      const __m256 s = CHAN ? _mm256_loadu_ps(cs + d) : vs;
      const __m256 o = CHAN ? _mm256_loadu_ps(cs + Dv + d) : vo;
      _mm256_storeu_ps(dst + d, DecDequant<OFF, QE, FIN>(DecLoadQ8<K>(row, d), s, o));
    }
  };
  for (int64_t n = n0; n < n1; ++n) {
    const char* row = t.v[n] + x * t.vstep[n];
    float* dst = vb + (n - n0) * Dv;
    bool fin = dq.chan_fast;
    __m256 vs = _mm256_setzero_ps(), vo = _mm256_setzero_ps();
    if constexpr (!CHAN) {
      float s, o;
      dq.Row(t.vc + 2 * n, hk + x, &s, &o);
      vs = _mm256_set1_ps(s);
      vo = _mm256_set1_ps(o);
      fin = DecFastRange<DecXl<K>()>(s, o);
      if constexpr (K == DecKind::kI4) {
        // A row with one scale and offset holds at most 16 values: dequantize the 16 nibbles
        // once (the same DecDequant, so each entry is bitwise what the channel loop computes)
        // and look every channel up (two VPERMPS on the nibble's low 3 bits, a blend on bit 3):
        // 6 operations per 8 channels instead of ~16.
        const __m256 lo_x = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 hi_x = _mm256_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1);
        __m256 tlo, thi;
        if (QE == Elem::kBF16 && fin) {
          tlo = DecDequant<OFF, QE, true>(lo_x, vs, vo);
          thi = DecDequant<OFF, QE, true>(hi_x, vs, vo);
        } else {
          tlo = DecDequant<OFF, QE, false>(lo_x, vs, vo);
          thi = DecDequant<OFF, QE, false>(hi_x, vs, vo);
        }
        const auto* bytes = reinterpret_cast<const uint8_t*>(row);
        for (int64_t d = 0; d < Dv; d += 8) {
          const __m256i idx = V::NibbleLanes(bytes + d / 2);
          const __m256 a = _mm256_permutevar8x32_ps(tlo, idx);
          const __m256 b = _mm256_permutevar8x32_ps(thi, idx);
          _mm256_storeu_ps(dst + d, _mm256_blendv_ps(a, b, _mm256_castsi256_ps(
                                                              _mm256_slli_epi32(idx, 28))));
        }
        continue;
      }
    }
    if (QE == Elem::kBF16 && fin) row_of.template operator()<true>(row, dst, vs, vo);
    else row_of.template operator()<false>(row, dst, vs, vo);
  }
}

// Lane l of the result: op over the lanes of v with the same l % RP (op: max or add).
template <int RP, class Op>
__attribute__((always_inline)) inline __m256 DecFold(__m256 v, Op op) {
  if constexpr (RP <= 4) v = op(v, _mm256_permute2f128_ps(v, v, 1));
  if constexpr (RP <= 2) v = op(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  if constexpr (RP <= 1) v = op(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return v;
}

// Online softmax of one head's tile on the key-major scores st[key][RP] (in place: P, rounded
// to the query dtype pe); updates m / l of the RP rows and rescales their accumulators.
template <int RP>
inline void DecSoftmax(float* st, int64_t nk, float scale, Elem pe, float* m, float* l,
                       float* acc, int64_t acc_stride, int64_t ldv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr int64_t KPV = 8 / RP;  // keys per vector
  const int64_t nvec = (nk + KPV - 1) / KPV;
  const __m256 vscale = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(kNegInf);
  // Lane l holds key l / RP of its vector.
  const __m256i lane_key = _mm256_setr_epi32(0 / RP, 1 / RP, 2 / RP, 3 / RP, 4 / RP, 5 / RP,
                                             6 / RP, 7 / RP);
  __m256 vm = ninf;
  for (int64_t i = 0; i < nvec; ++i) {
    __m256 s = _mm256_mul_ps(_mm256_loadu_ps(st + 8 * i), vscale);
    if ((i + 1) * KPV > nk) {  // keys past nk: -inf
      const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(nk - i * KPV)),
                                              lane_key);
      s = _mm256_blendv_ps(ninf, s, _mm256_castsi256_ps(live));
    }
    _mm256_storeu_ps(st + 8 * i, s);
    vm = _mm256_max_ps(vm, s);
  }
  alignas(32) float tmax[8], mnew[8], alpha[8];
  _mm256_store_ps(tmax, DecFold<RP>(vm, [](__m256 a, __m256 b) { return _mm256_max_ps(a, b); }));
  for (int64_t r = 0; r < RP; ++r) {
    const float m_old = m[r];
    const float m_new = std::max(m_old, tmax[r]);
    // A row that has seen nothing finite yet subtracts 0: its P is exp(-inf) = 0.
    mnew[r] = m_new == kNegInf ? 0.f : m_new;
    alpha[r] = m_old == kNegInf ? 0.f : ExpScalar(m_old - m_new);
    m[r] = m_new;
  }
  for (int64_t r = RP; r < 8; ++r) mnew[r] = mnew[r % RP];
  const __m256 vmn = _mm256_load_ps(mnew);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t i = 0; i < nvec; ++i) {
    __m256 e = V::Exp(_mm256_sub_ps(_mm256_loadu_ps(st + 8 * i), vmn));
    vsum = _mm256_add_ps(vsum, e);
    if (pe == Elem::kBF16) e = V::RoundBF16(e);
    else if (pe == Elem::kF16) e = V::RoundF16(e);
    _mm256_storeu_ps(st + 8 * i, e);
  }
  alignas(32) float tsum[8];
  _mm256_store_ps(tsum, DecFold<RP>(vsum, [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); }));
  for (int64_t r = 0; r < RP; ++r) {
    // A row with no finite score yet whose sum is NaN met a NaN score: the row is NaN, as in the
    // reference (m = NaN spreads to every later tile; the epilogue would read m = -inf as empty).
    if (m[r] == kNegInf && std::isnan(tsum[r])) m[r] = std::numeric_limits<float>::quiet_NaN();
    l[r] = l[r] * alpha[r] + tsum[r];
    if (alpha[r] != 1.f) {
      float* a = acc + r * acc_stride;
      const __m256 va = _mm256_set1_ps(alpha[r]);
      for (int64_t d = 0; d < ldv; d += 8)
        _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), va));
    }
  }
}

// Where P V reads its value rows: bf16 rows of the cache (split into [8 even | 8 odd] per 16
// channels, the accumulators' order then), or dequantized fp32 rows in channel order.
struct DecBf16Rows {
  const char* const* vr;  // value row of key n (this head's)
  __attribute__((always_inline)) void operator()(int64_t n, int64_t g, __m256* e, __m256* o) const {
    DecSplit(vr[n] + 32 * g, e, o);
  }
};
struct DecF32Rows {
  const float* vb;  // row n at vb + (n - n0) * Dv
  int64_t n0, Dv;
  __attribute__((always_inline)) void operator()(int64_t n, int64_t g, __m256* lo, __m256* hi) const {
    const float* r = vb + (n - n0) * Dv + 16 * g;
    *lo = _mm256_loadu_ps(r);
    *hi = _mm256_loadu_ps(r + 8);
  }
};

// acc rows [r0, r0 + RB) x channel groups [g0, g0 + NG) (16 channels each, in the rows' order)
// += P V over keys [n0, n1); P key-major at stride RP. NK > 0: n1 - n0 == NK, the key loop
// unrolled.
template <int RB, int NG, int RP, int NK, class Rows>
__attribute__((always_inline)) inline void DecPvBlock(const float* pk, int64_t r0,
                                                      const Rows& rows, int64_t n0, int64_t n1,
                                                      int64_t g0, float* acc, int64_t lda) {
  if constexpr (NK > 0) n1 = n0 + NK;
  __m256 a[RB][2 * NG];
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < 2 * NG; ++j)
      a[r][j] = _mm256_loadu_ps(acc + (r0 + r) * lda + 16 * g0 + 8 * j);
  OPENFIA_UNROLL
  for (int64_t n = n0; n < n1; ++n) {
    __m256 v[2 * NG];
    OPENFIA_UNROLL
    for (int g = 0; g < NG; ++g) rows(n, g0 + g, &v[2 * g], &v[2 * g + 1]);
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) {
      const __m256 pb = _mm256_broadcast_ss(pk + n * RP + r0 + r);
      OPENFIA_UNROLL
      for (int j = 0; j < 2 * NG; ++j) a[r][j] = _mm256_fmadd_ps(pb, v[j], a[r][j]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int j = 0; j < 2 * NG; ++j)
      _mm256_storeu_ps(acc + (r0 + r) * lda + 16 * g0 + 8 * j, a[r][j]);
}

// acc (RP rows of one head) += P V over keys [n0, n1) (at most kDecChunk) of `rows`.
template <int RP, class Rows>
inline void DecPv(const float* pk, const Rows& rows, int64_t n0, int64_t n1, int64_t Dv,
                  float* acc, int64_t lda) {
  constexpr int RB = RP < 4 ? RP : 4;  // rows per block
  constexpr int NG = 4 / RB;           // 16-channel groups per block: 8 accumulators
  const int64_t ng = Dv / 16;
  const bool whole = n1 - n0 == kDecChunk;
  for (int64_t r0 = 0; r0 < RP; r0 += RB) {
    int64_t g = 0;
    if (whole) {
      for (; g + NG <= ng; g += NG)
        DecPvBlock<RB, NG, RP, kDecChunk>(pk, r0, rows, n0, n1, g, acc, lda);
      for (; g < ng; ++g) DecPvBlock<RB, 1, RP, kDecChunk>(pk, r0, rows, n0, n1, g, acc, lda);
    } else {
      for (; g + NG <= ng; g += NG) DecPvBlock<RB, NG, RP, 0>(pk, r0, rows, n0, n1, g, acc, lda);
      for (; g < ng; ++g) DecPvBlock<RB, 1, RP, 0>(pk, r0, rows, n0, n1, g, acc, lda);
    }
  }
}

// Row states in [8 even | 8 odd] order per 16 channels back to channel order.
inline void Unpermute16(float* acc, int64_t rows, int64_t lda, int64_t Dv) {
  for (int64_t r = 0; r < rows; ++r) {
    float* a = acc + r * lda;
    for (int64_t c = 0; c < Dv; c += 16) {
      const __m256 e = _mm256_loadu_ps(a + c), o = _mm256_loadu_ps(a + c + 8);
      const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
      _mm256_storeu_ps(a + c, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(a + c + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
}

// Scratch (from sc.kt on: kt, v and s are one allocation, ScratchBuffer) for an item: the scores
// of every head [n_hk][kDecMaxKeys][R], per-channel antiquant vectors of K and V [n_hk][2][D],
// one chunk of dequantized value rows [kDecChunk][d_v]. Sizes in floats.
inline int64_t DecScratchFloats(const Problem& p, const WorkItem& w) {
  return w.n_hk * kDecMaxKeys * w.head_rows() + 2 * w.n_hk * (p.d_qk + p.d_v) +
         kDecChunk * p.d_v;
}

// fin: every value of the block is in DecFastRange (DecDequant's FIN).
template <int KB, int RP, DecKind K, bool OFF, bool CHAN>
inline void DecScoreDqQ(Elem qe, bool fin, const float* q, int64_t D, const char* const* kr,
                        const float* sc, const float* oc, int64_t n0, float* st) {
  switch (qe) {
    case Elem::kBF16:
      if (fin) return DecScoreBlockDq<RP, KB, K, OFF, CHAN, Elem::kBF16, true>(q, D, kr, sc, oc, n0, st);
      return DecScoreBlockDq<RP, KB, K, OFF, CHAN, Elem::kBF16, false>(q, D, kr, sc, oc, n0, st);
    case Elem::kF16:
      return DecScoreBlockDq<RP, KB, K, OFF, CHAN, Elem::kF16, false>(q, D, kr, sc, oc, n0, st);
    default:
      return DecScoreBlockDq<RP, KB, K, OFF, CHAN, Elem::kF32, false>(q, D, kr, sc, oc, n0, st);
  }
}

// One dequantized score block of head x (KV head hk + x): the antiquant mode picked at run time.
template <int KB, int RP, DecKind K>
inline void DecScoreDq(Elem qe, const DecDq& dq, const float* q, int64_t D, const DecTile& t,
                       int64_t hk, int64_t x, int64_t n0, float* st) {
  const char* kr[KB];
  float sc[KB], oc[KB];
  for (int k = 0; k < KB; ++k) {
    kr[k] = t.k[n0 + k] + x * t.kstep[n0 + k];
    if (!dq.per_chan) dq.Row(t.kc + 2 * (n0 + k), hk + x, &sc[k], &oc[k]);
  }
  const float* cs = dq.per_chan ? dq.chan + 2 * x * D : sc;
  const float* co = dq.per_chan ? dq.chan + (2 * x + 1) * D : oc;
  bool fin = dq.per_chan ? dq.chan_fast : true;
  if (!dq.per_chan)
    for (int k = 0; k < KB; ++k) fin = fin && DecFastRange<DecXl<K>()>(sc[k], oc[k]);
  if (dq.per_chan) {
    if (dq.has_off) return DecScoreDqQ<KB, RP, K, true, true>(qe, fin, q, D, kr, cs, co, n0, st);
    return DecScoreDqQ<KB, RP, K, false, true>(qe, fin, q, D, kr, cs, co, n0, st);
  }
  if (dq.has_off) return DecScoreDqQ<KB, RP, K, true, false>(qe, fin, q, D, kr, cs, co, n0, st);
  return DecScoreDqQ<KB, RP, K, false, false>(qe, fin, q, D, kr, cs, co, n0, st);
}

template <DecKind K, bool OFF, bool CHAN>
inline void DecDequantQ(Elem qe, const DecTile& t, const DecDq& dq, int64_t hk, int64_t x,
                        int64_t n0, int64_t n1, int64_t Dv, float* vb) {
  switch (qe) {
    case Elem::kBF16: return DecDequantRows<K, OFF, CHAN, Elem::kBF16>(t, dq, hk, x, n0, n1, Dv, vb);
    case Elem::kF16: return DecDequantRows<K, OFF, CHAN, Elem::kF16>(t, dq, hk, x, n0, n1, Dv, vb);
    default: return DecDequantRows<K, OFF, CHAN, Elem::kF32>(t, dq, hk, x, n0, n1, Dv, vb);
  }
}

template <DecKind K>
inline void DecDequantV(Elem qe, const DecTile& t, const DecDq& dq, int64_t hk, int64_t x,
                        int64_t n0, int64_t n1, int64_t Dv, float* vb) {
  if (dq.per_chan) {
    if (dq.has_off) return DecDequantQ<K, true, true>(qe, t, dq, hk, x, n0, n1, Dv, vb);
    return DecDequantQ<K, false, true>(qe, t, dq, hk, x, n0, n1, Dv, vb);
  }
  if (dq.has_off) return DecDequantQ<K, true, false>(qe, t, dq, hk, x, n0, n1, Dv, vb);
  return DecDequantQ<K, false, false>(qe, t, dq, hk, x, n0, n1, Dv, vb);
}

template <int RP, DecKind KK, DecKind VK>
void DecRun(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  // Keys per score block: bf16 K 12 accumulators for one row, 8 per pass of two rows
  // (DecScoreBlock); dequantized K 8 (its widening and antiquant, not the FMA chains, bound the
  // block).
  constexpr int KB = KK == DecKind::kBf16 ? (RP == 1 ? 12 : 4) : 8 / RP;
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group(), nh = w.n_hk;
  const int64_t D = p.d_qk, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);
  const Elem pe = p.q.elem;  // P (and dequantized K / V) are rounded to the query dtype
  ResetRowStates(out, w.rows(), ldv);

  // Query rows as f32: [8 even | 8 odd] per 16 channels for bf16 K (the split of its rows),
  // channel order for dequantized K. qp[x][r][D].
  float* qp = sc.q;
  for (int64_t x = 0; x < nh; ++x) {
    for (int64_t r = 0; r < RP; ++r) {
      float* dst = qp + (x * RP + r) * D;
      const int64_t h = (w.hk + x) * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
      const void* qb = p.q.Base(b);
      const int64_t qo = p.q.Offset(b, h, row, 0);
      if (KK == DecKind::kBf16 && p.q.elem == Elem::kBF16 && p.q.sd == 1 && p.q.d_split == 0) {
        const char* src = static_cast<const char*>(qb) + 2 * qo;
        for (int64_t d = 0; d < D; d += 16) {
          __m256 e, o;
          DecSplit(src + 2 * d, &e, &o);
          _mm256_storeu_ps(dst + d, e);
          _mm256_storeu_ps(dst + d + 8, o);
        }
        continue;
      }
      for (int64_t d = 0; d < D; ++d) {
        const float v = cvt::Load(qb, p.q.elem, qo + DOff(p.q, d));
        dst[KK == DecKind::kBf16 ? (d & ~15) + (d & 1) * 8 + (d & 15) / 2 : d] = v;
      }
    }
  }

  float* st = sc.kt;  // [nh][kDecMaxKeys][RP] scores, then P
  const int64_t sst = kDecMaxKeys * RP;
  float* kchan = st + nh * sst;          // [nh][2][D]
  float* vchan = kchan + 2 * nh * D;     // [nh][2][Dv]
  float* vb = vchan + 2 * nh * Dv;       // [kDecChunk][Dv]
  DecDq kdq, vdq;
  if constexpr (KK != DecKind::kBf16) {
    kdq.Init(p.k.dequant, D, w.hk, nh, kchan);
    kdq.chan_fast = DecChanFast<KK>(kdq, nh);
  }
  if constexpr (VK != DecKind::kBf16) {
    vdq.Init(p.v.dequant, Dv, w.hk, nh, vchan);
    vdq.chan_fast = DecChanFast<VK>(vdq, nh);
  }

  // Per tile, token-major: the score blocks of all heads for each KB keys (so the cache is read
  // in token order, every head's row of a token after the other, which the memory system streams
  // ~1.6x faster than head after head), the softmax of each head, then P V in chunks of kDecChunk
  // keys for all heads (the chunk's value rows stay in L1 across the channel blocks).
  const int64_t kbytes = DecBytes(p.k.cache.elem, D), vbytes = DecBytes(p.v.cache.elem, Dv);
  DecTile tiles[2];
  const int64_t tile0 = w.j0 / TN * TN;
  DecResolve(p, w, tile0, &tiles[0]);
  const int64_t klines = nh * ((kbytes + 63) / 64), vlines = nh * ((vbytes + 63) / 64);
  DecPrefetcher pf;  // K of the tile's scores, then its V, then the next tile's K
  pf.hint = DecPrefetcher::Hint::kT1Runs;
  pf.Start(&tiles[0], false, nh, kbytes, 0);
  pf.Issue(kDecAhead * klines, kDecAhead);
  int cur = 0;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN, cur ^= 1) {
    const DecTile& t = tiles[cur];
    DecTile* nt = t0 + TN < w.j1 ? &tiles[cur ^ 1] : nullptr;
    if (nt != nullptr) DecResolve(p, w, t0 + TN, nt);
    const int64_t nk = t.nk;
    // Scores; the key rows kDecAhead tokens ahead, then this tile's first value rows.
    const int64_t kper = (KB * klines + nh - 1) / nh;  // lines per head and score block
    for (int64_t n0 = 0; n0 < nk; n0 += KB) {
      for (int64_t x = 0; x < nh; ++x) {
        if (pf.Done() && !pf.v) pf.Start(&t, true, nh, vbytes, 0);
        pf.Issue(kper, pf.v ? kDecAhead : n0 + KB + kDecAhead);
        if constexpr (KK == DecKind::kBf16)
          DecScoreBlock<RP, KB>(qp + x * RP * D, D, t.k, t.kstep, x, n0, st + x * sst);
        else
          DecScoreDq<KB, RP, KK>(pe, kdq, qp + x * RP * D, D, t, w.hk, x, n0, st + x * sst);
      }
    }
    for (int64_t x = 0; x < nh; ++x)
      DecSoftmax<RP>(st + x * sst, nk, scale, pe, out.m + x * RP, out.l + x * RP,
                     out.acc + x * RP * out.acc_stride, out.acc_stride, ldv);
    // P V; the value rows kDecAhead tokens ahead, then the next tile's first key rows.
    if (pf.t != &t || !pf.v) pf.Start(&t, true, nh, vbytes, 0);
    const int64_t vper = (kDecChunk * vlines + nh - 1) / nh;  // lines per head and chunk
    for (int64_t n0 = 0; n0 < nk; n0 += kDecChunk) {
      const int64_t n1 = std::min(nk, n0 + kDecChunk);
      for (int64_t x = 0; x < nh; ++x) {
        if (pf.Done() && pf.v && nt != nullptr) pf.Start(nt, false, nh, kbytes, 0);
        pf.Issue(vper, pf.v ? n1 + kDecAhead : kDecAhead);
        float* acc = out.acc + x * RP * out.acc_stride;
        if constexpr (VK == DecKind::kBf16) {
          const char* vr[kDecMaxKeys];
          for (int64_t n = n0; n < n1; ++n) vr[n] = t.v[n] + x * t.vstep[n];
          DecPv<RP>(st + x * sst, DecBf16Rows{vr}, n0, n1, Dv, acc, out.acc_stride);
        } else {
          DecDequantV<VK>(pe, t, vdq, w.hk, x, n0, n1, Dv, vb);
          DecPv<RP>(st + x * sst, DecF32Rows{vb, n0, Dv}, n0, n1, Dv, acc, out.acc_stride);
        }
      }
    }
    if (nt != nullptr && (pf.t != nt || pf.v)) {  // a short tile: start the next one's keys
      pf.Start(nt, false, nh, kbytes, 0);
      pf.Issue(kDecAhead * klines, kDecAhead);
    }
  }
  if constexpr (VK == DecKind::kBf16) Unpermute16(out.acc, w.rows(), out.acc_stride, Dv);
}

template <int RP, DecKind KK>
inline void DecRunV(DecKind vk, const Problem& p, const WorkItem& w, TileScratch& sc,
                    const RowStates& out) {
  switch (vk) {
    case DecKind::kBf16: return DecRun<RP, KK, DecKind::kBf16>(p, w, sc, out);
    case DecKind::kI8: return DecRun<RP, KK, DecKind::kI8>(p, w, sc, out);
    default: return DecRun<RP, KK, DecKind::kI4>(p, w, sc, out);
  }
}

template <int RP>
inline void DecRunK(DecKind kk, DecKind vk, const Problem& p, const WorkItem& w,
                    TileScratch& sc, const RowStates& out) {
  switch (kk) {
    case DecKind::kBf16: return DecRunV<RP, DecKind::kBf16>(vk, p, w, sc, out);
    case DecKind::kI8: return DecRunV<RP, DecKind::kI8>(vk, p, w, sc, out);
    default: return DecRunV<RP, DecKind::kI4>(vk, p, w, sc, out);
  }
}

// Runs item w (DecodeCan holds and the scratch fits it: the kernel's supports checked both).
inline void DecodeRunItem(const Problem& p, const WorkItem& w, TileScratch& sc,
                          const RowStates& out) {
  DecKind kk, vk;
  DecodeCan(p, w, &kk, &vk);
  switch (w.head_rows()) {
    case 1: DecRunK<1>(kk, vk, p, w, sc, out); break;
    case 2: DecRunK<2>(kk, vk, p, w, sc, out); break;
    case 4: DecRunK<4>(kk, vk, p, w, sc, out); break;
    default: DecRunK<8>(kk, vk, p, w, sc, out); break;
  }
}
