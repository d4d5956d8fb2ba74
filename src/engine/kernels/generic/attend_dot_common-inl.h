// openfia internal: the ISA-neutral part of the generic loop's bf16 dot tiles, included by a
// target with dot tiles after its dot file (avx512/attend_dot-inl.h: AVX512-BF16 VDPBF16PS;
// neon/attend_dot_neon-inl.h: FEAT_BF16 BFDOT) and its DotBlock, PairRows, QueryDotSafe,
// KeyPairsBf16, ValuePairsBf16, kDotLanes, kDirectChannels, DotScale and DotSet1, before
// generic/attend-inl.h (the tile loop that calls it).

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

// ---- Antiquant pair packing: quantized rows dequantized straight into pair form ------------
// DqAt gives the element the fp32 packing gives (the same fp32 operations, rounded to bf16, the
// only rounding a dot item has: DotItemOperandsOk), so the pair forms are those KeyPairs and
// ValuePairs would build from kt and v; each element is dequantized once, without the fp32
// staging (a sparse MLA tile's 64 keys x 1088 channels serve 128 query rows, yet the staging took
// a sixth of a KvQuantSparseFlashAttention decode).

// f(std::integral_constant<Elem, E>(), std::bool_constant<plain>()) for prepared rows; plain
// only where the ISA's pair conversion rounds fp32 values (kPairsRoundFp32).
template <class F>
inline decltype(auto) WithDqRows(const DqRows& r, F&& f) {
  return WithDqElem(r.elem, [&](auto e) {
    return r.plain && kPairsRoundFp32 ? f(e, std::true_type()) : f(e, std::false_type());
  });
}

// vp[j * vps + d] for j < ceil(nk / 2), d < Dv (zero row past nk); returns whether a value is Inf
// or NaN (x - x is NaN exactly for those; none with plain rows).
template <Elem E, bool kPlain>
inline bool ValuePairsDq(const DqRows& f, int64_t nk, int64_t Dv, uint32_t* vp, int64_t vps) {
  typename V::T nf = V::Zero();
  for (int64_t j = 0; 2 * j < nk; ++j) {
    const bool hb = 2 * j + 1 < nk;
    for (int64_t d0 = 0; d0 < Dv; d0 += W) {
      const typename V::T a = DqAt<E, !kPlain>(f, 2 * j, d0);
      const typename V::T b = hb ? DqAt<E, !kPlain>(f, 2 * j + 1, d0) : V::Zero();
      if constexpr (!kPlain) nf = V::Add(nf, V::Add(V::Sub(a, a), V::Sub(b, b)));
      const auto w = PairWords(a, b);
      std::memcpy(vp + j * vps + d0, &w, sizeof(w));
    }
  }
  return std::isnan(V::ReduceSum(nf));
}

// kp[(w0 + k) * TN + n] for k < D / 2, n < npad (zero past nk; a W x W transpose of words per W
// keys and 2 W channels) and, where the values are the keys' first Dv channels (Dv <= D, both
// multiples of 2 W; MLA's shared KV), vp as ValuePairsDq from the same read and dequantization
// of each element (about a third less time than two passes); Dv = 0: the keys alone. Returns
// whether a value is Inf or NaN. kPlain: f.plain, the bf16 conversion rounds the fp32 values (no
// RoundBF16 first).
template <Elem E, bool kPlain>
inline bool KeyValuePairsDq(const DqRows& f, int64_t nk, int64_t D, int64_t w0, uint32_t* kp,
                            int64_t Dv, uint32_t* vp, int64_t vps) {
  static_assert(W % 2 == 0, "keys go to the value pairs two by two");
  typename V::T nf = V::Zero();
  const int64_t npad = (nk + W - 1) / W * W;
  for (int64_t n0 = 0; n0 < npad; n0 += W) {
    const int64_t m = std::min<int64_t>(W, nk - n0);
    for (int64_t c = 0; c < D / (2 * W); ++c) {
      const int64_t d0 = 2 * W * c;
      typename V::T r[W];
      for (int i = 0; i < W; i += 2) {
        const typename V::T a0 = i < m ? DqAt<E, !kPlain>(f, n0 + i, d0) : V::Zero();
        const typename V::T a1 = i < m ? DqAt<E, !kPlain>(f, n0 + i, d0 + W) : V::Zero();
        const typename V::T b0 = i + 1 < m ? DqAt<E, !kPlain>(f, n0 + i + 1, d0) : V::Zero();
        const typename V::T b1 = i + 1 < m ? DqAt<E, !kPlain>(f, n0 + i + 1, d0 + W) : V::Zero();
        r[i] = ChannelWords(a0, a1);
        r[i + 1] = ChannelWords(b0, b1);
        if (d0 < Dv && i < m) {
          if constexpr (!kPlain)
            nf = V::Add(nf, V::Add(V::Add(V::Sub(a0, a0), V::Sub(a1, a1)),
                                   V::Add(V::Sub(b0, b0), V::Sub(b1, b1))));
          uint32_t* dst = vp + (n0 + i) / 2 * vps + d0;
          const auto pw0 = PairWords(a0, b0);
          const auto pw1 = PairWords(a1, b1);
          std::memcpy(dst, &pw0, sizeof(pw0));
          std::memcpy(dst + W, &pw1, sizeof(pw1));
        }
      }
      V::Transpose(r);
      for (int i = 0; i < W; ++i)
        V::Store(reinterpret_cast<float*>(kp + (w0 + W * c + i) * TN + n0), r[i]);
    }
  }
  return std::isnan(V::ReduceSum(nf));
}

// Whether the tile's values are its keys' rows under the same antiquant (so that value channel d
// is key channel d): the same operand layout and parameters, every key resolved to the same row.
inline bool TileValuesAreKeys(const KvOperand& kx, const KvOperand& vx, const TileScratch& sc,
                              int64_t nk) {
  if (!SameLayout(kx.cache, vx.cache) || !SameLayout(kx.prefix, vx.prefix) ||
      !SameDequant(kx.dequant, vx.dequant) || !SameDequant(kx.prefix_dequant, vx.prefix_dequant))
    return false;
  for (int64_t n = 0; n < nk; ++n)
    if (sc.kbase[n] != sc.vbase[n] || sc.koff[n] != sc.voff[n] ||
        sc.kcoord[2 * n] != sc.vcoord[2 * n] || sc.kcoord[2 * n + 1] != sc.vcoord[2 * n + 1])
      return false;
  return true;
}

// The pair form of one tile operand from its rows: bf16 rows directly, quantized rows (tq.any())
// dequantized. False when the rows do not qualify (nothing usable written).
inline bool KeyPairsOf(const KvOperand& kv, const TileDq& tq, const void* const* base,
                       const int64_t* off, const uint8_t* pre, int64_t nk, int64_t D, int64_t w0,
                       uint32_t* kp, DqRows* dq, FastRows* f) {
  if (D % kDirectChannels != 0) return false;
  if (!tq.any()) {
    if (!Bf16Rows(kv, base, off, pre, nk, D, f)) return false;
    KeyPairsBf16(*f, nk, D, w0, kp);
    return true;
  }
  if (!MakeDqRows(kv, base, off, pre, nk, D, tq, dq)) return false;
  WithDqRows(*dq, [&](auto e, auto pl) {
    KeyValuePairsDq<decltype(e)::value, decltype(pl)::value>(*dq, nk, D, w0, kp, 0, nullptr, 0);
  });
  return true;
}

// As KeyPairsOf for the values; *bad: a value is Inf or NaN.
inline bool ValuePairsOf(const KvOperand& kv, const TileDq& tq, const void* const* base,
                         const int64_t* off, const uint8_t* pre, int64_t nk, int64_t Dv,
                         uint32_t* vp, int64_t vps, DqRows* dq, FastRows* f, bool* bad) {
  if (Dv % kDirectChannels != 0) return false;
  if (!tq.any()) {
    if (!Bf16Rows(kv, base, off, pre, nk, Dv, f)) return false;
    *bad = ValuePairsBf16(*f, nk, Dv, vp, vps);
    return true;
  }
  if (!MakeDqRows(kv, base, off, pre, nk, Dv, tq, dq)) return false;
  *bad = WithDqRows(*dq, [&](auto e, auto pl) {
    return ValuePairsDq<decltype(e)::value, decltype(pl)::value>(*dq, nk, Dv, vp, vps);
  });
  return true;
}

// The tile's kp / vp straight from its rows (bf16 or quantized, see above); false (nothing
// usable packed) when a row set does not qualify or a value is Inf or NaN (*v_bad: the fp32
// path must run).
inline bool PackPairsDirect(const Problem& p, const KvOperand& kx, const KvOperand& vx,
                            const KvOperand& rx, const TileScratch& sc, int64_t nk, int64_t vps,
                            const TileDq& kdq, const TileDq& vdq, const TileDq& rdq, DqRows* dq,
                            FastRows* f, bool* v_bad) {
  *v_bad = false;
  if (kdq.any() && p.d_v <= p.d_qk && p.d_qk % kDirectChannels == 0 &&
      p.d_v % kDirectChannels == 0 && TileValuesAreKeys(kx, vx, sc, nk) &&
      MakeDqRows(kx, sc.kbase, sc.koff, sc.kpre, nk, p.d_qk, kdq, dq)) {
    *v_bad = WithDqRows(*dq, [&](auto e, auto pl) {
      return KeyValuePairsDq<decltype(e)::value, decltype(pl)::value>(*dq, nk, p.d_qk, 0, sc.kp,
                                                                       p.d_v, sc.vp, vps);
    });
    if (*v_bad) return false;
  } else {
    if (!ValuePairsOf(vx, vdq, sc.vbase, sc.voff, sc.kpre, nk, p.d_v, sc.vp, vps, dq, f, v_bad) ||
        *v_bad)
      return false;
    if (!KeyPairsOf(kx, kdq, sc.kbase, sc.koff, sc.kpre, nk, p.d_qk, 0, sc.kp, dq, f))
      return false;
  }
  return p.d_rope == 0 || KeyPairsOf(rx, rdq, sc.rbase, sc.roff, sc.kpre, nk, p.d_rope,
                                     p.d_qk / 2, sc.kp, dq, f);
}
