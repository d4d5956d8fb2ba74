// openfia internal: the ISA-neutral part of the generic loop's bf16 dot tiles, included at the
// end of attend_dot-inl.h (AVX512-BF16 VDPBF16PS) and attend_dot_neon-inl.h (FEAT_BF16 BFDOT),
// after their DotBlock, PairRows, QueryDotSafe, KeyPairsBf16, ValuePairsBf16, kDotLanes,
// kDirectChannels, DotScale and DotSet1.

// Whether item rows can take dot tiles: the CPU prefers them (Bf16DotTiles), a bf16 query,
// every packed K / V / rope value a bf16 value (bf16 storage, or antiquant, which rounds to the
// query dtype), and query rows (fp32 in q, rows x D at stride ldq) free of subnormal and
// non-finite values.
inline bool DotOperandOk(const Operand& o, const Dequant& dq) {
  return !o.present() || o.elem == Elem::kBF16 || dq.kind != Dequant::Kind::kNone;
}
inline bool DotKvOk(const KvOperand& kv) {
  return DotOperandOk(kv.cache, kv.dequant) && DotOperandOk(kv.prefix, kv.prefix_dequant);
}
inline bool DotItemOperandsOk(const Problem& p) {
  if (!Bf16DotTiles()) return false;  // the CPU's FMA is the faster product (kernel.h)
  if (p.q.elem != Elem::kBF16 || (p.d_rope > 0 && p.q_rope.elem != Elem::kBF16)) return false;
  if (p.kv_round_elem() != Elem::kBF16) return false;  // dequantized K / V kept in fp32
  if (!DotKvOk(p.k) || !DotKvOk(p.v)) return false;
  if (p.d_rope > 0 && !DotKvOk(p.k_rope)) return false;
  return !p.k2.cache.present() || (DotKvOk(p.k2) && DotKvOk(p.v2));
}
inline bool DotItemOk(const Problem& p, const float* q, int64_t rows, int64_t ldq, int64_t D) {
  return DotItemOperandsOk(p) && QueryDotSafe(q, rows, ldq, D);
}

// kp[k * TN + n] for k < ceil(D / 2), n < npad, from kt[d * TN + n] (d < D; zeros past D).
inline void KeyPairs(const float* kt, int64_t D, int64_t npad, uint32_t* kp) {
  PairRows(kt, TN, D, npad, kp, TN);
}

// vp[j * vps + d] for j < ceil(nk / 2), d < ldv, from v[n * vs + d] (n < nk; zeros past nk).
inline void ValuePairs(const float* v, int64_t vs, int64_t nk, int64_t ldv, uint32_t* vp,
                       int64_t vps) {
  PairRows(v, vs, nk, ldv, vp, vps);
}

// Rows [0, rows) of a product in register blocks of kRB rows x kCB vectors: c (rows x ncol at
// stride ldc) (+)= a (rows x K2 words at stride lda) * b (K2 x ncol words at stride ldb).
template <bool ACC, int R>
inline void DotRows(const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, int64_t K2,
                    int64_t ncol, float* c, int64_t ldc, DotScale scale) {
  int64_t c0 = 0;
  for (; c0 + kCB * kDotLanes <= ncol; c0 += kCB * kDotLanes)
    DotBlock<R, kCB, ACC>(a, lda, b + c0, ldb, K2, c + c0, ldc, scale);
  for (; c0 < ncol; c0 += kDotLanes)
    DotBlock<R, 1, ACC>(a, lda, b + c0, ldb, K2, c + c0, ldc, scale);
}

template <bool ACC, int R>
inline void DotTail(int64_t rem, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                    int64_t K2, int64_t ncol, float* c, int64_t ldc, DotScale scale) {
  if constexpr (R > 0) {
    if (rem == R) return DotRows<ACC, R>(a, lda, b, ldb, K2, ncol, c, ldc, scale);
    DotTail<ACC, R - 1>(rem, a, lda, b, ldb, K2, ncol, c, ldc, scale);
  }
}

template <bool ACC>
inline void DotProduct(const uint32_t* a, int64_t lda, int64_t rows, const uint32_t* b,
                       int64_t ldb, int64_t K2, int64_t ncol, float* c, int64_t ldc,
                       DotScale scale = DotSet1(1.f)) {
  int64_t r0 = 0;
  for (; r0 + kRB <= rows; r0 += kRB)
    DotRows<ACC, kRB>(a + r0 * lda, lda, b, ldb, K2, ncol, c + r0 * ldc, ldc, scale);
  DotTail<ACC, kRB - 1>(rows - r0, a + r0 * lda, lda, b, ldb, K2, ncol, c + r0 * ldc, ldc,
                        scale);
}

// s[r * TN + n] = scale * (q_r . k_n) for n < npad (kp from KeyPairs over D channels).
inline void ScoresDot(const uint32_t* qp, int64_t ldqp, int64_t rows, const uint32_t* kp,
                      int64_t D, int64_t npad, float scale, float* s) {
  DotProduct<false>(qp, ldqp, rows, kp, TN, (D + 1) / 2, npad, s, TN, DotSet1(scale));
}

// acc[r * lda + d] += sum_n P[r][n] V[n][d] for d < ldv, P as bf16 rows over sc.s (row stride
// TN floats = TN words), vp from ValuePairs over nk keys.
inline void PvDot(const float* s, int64_t rows, const uint32_t* vp, int64_t vps, int64_t ldv,
                  int64_t nk, float* acc, int64_t lda) {
  DotProduct<true>(reinterpret_cast<const uint32_t*>(s), TN, rows, vp, vps, (nk + 1) / 2, ldv,
                   acc, lda);
}

inline bool Bf16Rows(const KvOperand& kv, const void* const* base, const int64_t* off,
                     const uint8_t* pre, int64_t nk, int64_t D, FastRows* f) {
  return D % kDirectChannels == 0 && MakeFastRows(kv, base, off, pre, nk, D, f) &&
         FastElem(kv, pre) == Elem::kBF16;
}

// The tile's kp / vp straight from bf16 rows (see above); false (nothing usable packed) when a
// row is not such a row, a value is Inf or NaN (*v_bad: the fp32 path must run), or an operand
// is quantized.
inline bool PackPairsDirect(const Problem& p, const KvOperand& kx, const KvOperand& vx,
                            const TileScratch& sc, int64_t nk, int64_t vps, bool quantized,
                            FastRows* fk, FastRows* fv, bool* v_bad) {
  *v_bad = false;
  if (quantized || !Bf16Rows(kx, sc.kbase, sc.koff, sc.kpre, nk, p.d_qk, fk) ||
      !Bf16Rows(vx, sc.vbase, sc.voff, sc.kpre, nk, p.d_v, fv))
    return false;
  if (ValuePairsBf16(*fv, nk, p.d_v, sc.vp, vps)) {
    *v_bad = true;
    return false;
  }
  KeyPairsBf16(*fk, nk, p.d_qk, 0, sc.kp);
  if (p.d_rope > 0) {
    if (!Bf16Rows(p.k_rope, sc.rbase, sc.roff, sc.kpre, nk, p.d_rope, fk)) return false;
    KeyPairsBf16(*fk, nk, p.d_rope, p.d_qk / 2, sc.kp);
  }
  return true;
}
