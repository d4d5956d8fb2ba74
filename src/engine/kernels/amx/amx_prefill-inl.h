// openfia internal: the AMX prefill kernel (dense bf16 keys, no rope): included by kernels_amx.cc
// inside namespace amx_target, after its tile helpers (TileConfig, PackK, PackV, ReduceRows16,
// AnyNonFiniteBf16, ResolveKey).
//
// Same results as the generic loop (attend-inl.h) up to fp32 rounding: the same tiles of kTileKeys
// keys, band / bit-mask / pse / boundary semantics, online softmax in fp32, P rounded to bf16
// before P * V (SPEC 2.6), masked cells contribute nothing even next to non-finite values. What
// differs is how the work is laid out, because on AMX the tile products are cheap and the vector
// softmax and the L1 footprint are what cost:
//   - Every step works on a block of 16 rows; a block skips the key tiles none of its rows can see
//     (the causal diagonal is paid once per block, not once per item), and only the tiles that are
//     partly visible to the block go through the masked path.
//   - Each K / V tile is packed once per item; prefill items hold up to kMaxRows rows (plan.cc), so
//     the transposition of K is shared by up to 32 blocks.
//   - A tile runs in two passes over its blocks: scores and softmax (P of every block kept as
//     bf16), then acc += P V. Each pass keeps one 16 KB packed tile in L1 next to the streamed
//     query / accumulator blocks; both tiles at once overflow the 48 KB L1 of current Xeons and
//     made the tile loads several times slower.
//   - The softmax of a block runs on 16 rows at once (row maxima and sums reduced across the rows
//     together) and its exponential is a base-2 one with a single FMA for the argument:
//       exp(s * scale - m) = 2^t,  t = s * (scale * log2 e) - m * log2 e,
//     evaluated as 2^round(t) * poly5(t - round(t)) (relative error <= 3 ulp; the generic loop's
//     exp has 1 ulp, both far below the bf16 rounding of P). For |t| of a few hundred (scores that
//     large only come from huge logits) the rounding of the argument adds |t| * 2^-23 relative.
//   - The next tile's K / V rows are prefetched while the current one is computed.


// Rows of one block, and the most blocks of an item.
constexpr int64_t kBlockRows = 16;
constexpr int64_t kMaxBlocks = kMaxRows / kBlockRows;
constexpr float kLog2e = 1.44269504088896341f;

// 2^t for t <= 0 (a larger t only from rounding, a few ulp above 0), NaN for NaN, 0 below -125.
// No step yields a subnormal or an underflowing result: those take a microcode assist per
// instruction without FTZ (masked cells, t = -inf, made the causal diagonal blocks ~10x slower
// than full ones). 2^t below 2^-125 becomes 0: as P it would be subnormal-adjacent and is dropped
// by the bf16 tile product's flush anyway (kernels_amx.cc, top); in the row sum (>= 1) it is far
// below one ulp.
inline __m512 Exp2NonPositive(__m512 t) {
  // t >= -125 or NaN (_CMP_NLT_UQ is true for NaN): the lanes that keep their power.
  const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-125.f), _CMP_NLT_UQ);
  // max(lo, t) keeps a NaN t (the second operand wins); -inf and anything below -125 become -125,
  // whose power of two is normal.
  t = _mm512_max_ps(_mm512_set1_ps(-125.f), t);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);  // [-0.5, 0.5]
  // Minimax fit of 2^f on [-0.5, 0.5] with p(0) = 1 exactly: relative error 1.7e-7.
  __m512 p = _mm512_set1_ps(1.326472266e-03f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.671512991e-03f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550733581e-02f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402224243e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931470037e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_maskz_scalef_ps(keep, p, n);  // p * 2^n >= 2^-125.5: normal, one rounding
}

// One block of up to 16 rows of a work item.
struct PrefillBlock {
  int64_t r0 = 0;      // first row
  int64_t n = 0;       // rows (16 except for the last block of the item)
  int64_t qlo = 0;     // smallest and largest query index of its rows
  int64_t qhi = 0;
};

// CompilerFence, ScoreBegin/ScoreChunk/ScoreEnd and PvBegin/PvChunk: kernels_amx.cc.

// The online-softmax update of one block over one key tile, in phases (MaxRows for every row,
// MaxEnd, ExpRows for every row, Finish; rows can be split between calls). s holds 16 rows
// of kTileKeys fp32 scores: `raw` ones (Q.K, to be multiplied by scale) or prepared ones (scale *
// Q.K + pse, invisible cells -inf). Rows outside `valid` are padding: P = 0, states untouched. P
// goes out as bf16 rows of kTileKeys at `pout`. The operations are those of
// attend-inl.h's row loop: m_new = max(m_old, max_n x); a row with m_new = -inf keeps P = 0 and
// its state; P = round_bf16(exp(x - m_new)); l = l * alpha + sum_n exp(x - m_new) (unrounded);
// acc *= alpha, alpha = exp(m_old - m_new) (0 for a row without history).
struct BlockSoftmax {
  alignas(64) float part[16][16];  // per row: 16 partial maxima, then 16 partial sums
  alignas(64) float nmb[16];       // -m_new * log2(e)
  alignas(64) float m_new[16];
  alignas(64) float alpha[16];
  float* s = nullptr;
  uint16_t* pout = nullptr;
  float scale = 1.f;
  bool raw = false;
  bool scale_after = false;  // raw and scale > 0: rows reduced on raw scores, scaled once
  __mmask16 valid = 0;
  __mmask16 dead = 0;

  void Begin(float* scores, uint16_t* p, bool is_raw, float sc, __mmask16 rows_valid) {
    s = scores;
    pout = p;
    raw = is_raw;
    scale = sc;
    // For scale > 0, max_n round(scale * s_n) = round(scale * max_n s_n) (rounding is monotonic).
    scale_after = raw && scale > 0.f;
    valid = rows_valid;
  }
  void MaxRows(int r0, int r1) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int r = r0; r < r1; ++r) {
      const float* sr = s + r * TN;
      __m512 x0 = _mm512_loadu_ps(sr), x1 = _mm512_loadu_ps(sr + 16);
      __m512 x2 = _mm512_loadu_ps(sr + 32), x3 = _mm512_loadu_ps(sr + 48);
      if (raw && !scale_after) {
        x0 = _mm512_mul_ps(x0, vscale);
        x1 = _mm512_mul_ps(x1, vscale);
        x2 = _mm512_mul_ps(x2, vscale);
        x3 = _mm512_mul_ps(x3, vscale);
      }
      // For NaN-free rows any pairing gives the maximum; a NaN score makes its P NaN anyway.
      _mm512_store_ps(part[r], _mm512_max_ps(_mm512_max_ps(x0, x1), _mm512_max_ps(x2, x3)));
    }
  }
  void MaxEnd(const float* m) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const auto vmax = [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); };
    __m512 tile_max = ReduceRows16(part, vmax);
    if (scale_after) tile_max = _mm512_mul_ps(tile_max, _mm512_set1_ps(scale));
    const __m512 ninf = _mm512_set1_ps(kNegInf);
    const __m512 m_old = _mm512_mask_loadu_ps(ninf, valid, m);
    // std::max(m_old, max) keeps m_old when the maximum is NaN; so does max_ps(max, m_old).
    const __m512 mn = _mm512_max_ps(tile_max, m_old);
    dead = static_cast<__mmask16>(_mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ) |
                                  static_cast<__mmask16>(~valid));
    const __mmask16 fresh = _mm512_cmp_ps_mask(m_old, ninf, _CMP_EQ_OQ);
    _mm512_store_ps(alpha, _mm512_maskz_mov_ps(static_cast<__mmask16>(~fresh),
                                               V::Exp(_mm512_sub_ps(m_old, mn))));
    _mm512_store_ps(m_new, mn);
    _mm512_store_ps(nmb, _mm512_mul_ps(mn, _mm512_set1_ps(-kLog2e)));
  }
  void ExpRows(int r0, int r1) {
    const __m512 c1 = _mm512_set1_ps(raw ? scale * kLog2e : kLog2e);
    for (int r = r0; r < r1; ++r) {
      const float* sr = s + r * TN;
      uint16_t* pr = pout + r * TN;
      if (dead >> r & 1) {
        _mm512_storeu_si512(pr, _mm512_setzero_si512());
        _mm512_storeu_si512(pr + 32, _mm512_setzero_si512());
        _mm512_store_ps(part[r], _mm512_setzero_ps());
        continue;
      }
      const __m512 nmb_r = _mm512_set1_ps(nmb[r]);
      const __m512 e0 = Exp2NonPositive(_mm512_fmadd_ps(_mm512_loadu_ps(sr), c1, nmb_r));
      const __m512 e1 = Exp2NonPositive(_mm512_fmadd_ps(_mm512_loadu_ps(sr + 16), c1, nmb_r));
      const __m512 e2 = Exp2NonPositive(_mm512_fmadd_ps(_mm512_loadu_ps(sr + 32), c1, nmb_r));
      const __m512 e3 = Exp2NonPositive(_mm512_fmadd_ps(_mm512_loadu_ps(sr + 48), c1, nmb_r));
      // VCVTNEPS2BF16 rounds to nearest even like RoundBF16 but flushes subnormal inputs to
      // zero; TDPBF16PS would read such a P as zero anyway (kernels_amx.cc, top).
      _mm512_storeu_si512(pr, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0)));
      _mm512_storeu_si512(pr + 32, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e3, e2)));
      _mm512_store_ps(part[r], _mm512_add_ps(_mm512_add_ps(e0, e1), _mm512_add_ps(e2, e3)));
    }
  }
  void Finish(float* m, float* l, float* acc, int64_t lda, int64_t ldv) {
    const auto vadd = [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); };
    const __mmask16 live = static_cast<__mmask16>(~dead);
    const __m512 va_all = _mm512_load_ps(alpha);
    const __m512 l_old = _mm512_maskz_loadu_ps(live, l);
    const __m512 l_new = _mm512_add_ps(_mm512_mul_ps(l_old, va_all), ReduceRows16(part, vadd));
    _mm512_mask_storeu_ps(l, live, l_new);
    _mm512_mask_storeu_ps(m, live, _mm512_load_ps(m_new));
    // Rows whose maximum moved rescale their accumulator (alpha != 1, NaN included).
    RescaleMoved(_mm512_mask_cmp_ps_mask(live, va_all, _mm512_set1_ps(1.f), _CMP_NEQ_UQ), alpha,
                 acc, lda, ldv);
  }
};

// Prefetches bytes [0, n) at p into L1 (whole lines; the tile loads that follow would otherwise
// wait for L2 line by line).
inline void PrefetchL1(const void* p, int64_t n) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < n; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}

// Whether the prefill kernel runs item w (AmxCan(p, w) already holds): dense keys, no rope.
inline bool PrefillCan(const Problem& p, const WorkItem& w) {
  return p.key_offset.empty() && p.d_rope == 0 && !p.k2.cache.present() && w.n_hk == 1;
}

// n lanes (0 <= n <= 64) as a key mask.
inline uint64_t LowKeys(int64_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }


void AmxPrefill(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t D = p.d_qk, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);
  const ItemOrigins org = OriginsOf(p, b);
  const int64_t pre = org.pre, next = org.next, mask_row0 = org.mask_row0,
                mask_col0 = org.mask_col0, pse_row0 = org.pse_row0, pse_col0 = org.pse_col0;

  ResetRowStates(out, rows, ldv);
  if (w.j0 >= w.j1) return;

  // Scratch (ScratchBuffer sizes): sc.q holds the bf16 query rows [rows_pad][D] (zero rows past
  // `rows`); sc.kt the packed K tile [D/2][TN] pairs; sc.v the packed V tile [TN/2][Dv] pairs and
  // then a 16-row accumulator for the last, partial block; sc.s ([rows][TN] fp32 for the most
  // rows of an item, >= 32) P of every block as bf16 [rows_pad][TN], then one block of scores.
  const int64_t rows_pad = (rows + 15) / 16 * 16;
  uint16_t* qb = reinterpret_cast<uint16_t*>(sc.q);
  uint32_t* kp = reinterpret_cast<uint32_t*>(sc.kt);
  uint32_t* vp = reinterpret_cast<uint32_t*>(sc.v);
  float* acc_tail = sc.v + 32 * ldv;
  uint16_t* pbuf = reinterpret_cast<uint16_t*>(sc.s);
  float* sbuf = sc.s + rows_pad * TN / 2;
  PackQueryRows(p, w, rows, rows_pad, D, qb);  // D == d_qk: no rope on this path

  // Blocks and the query range of each (rows of a block may wrap to the next head).
  PrefillBlock blk[kMaxBlocks];
  const int64_t nblk = rows_pad / 16;
  for (int64_t k = 0; k < nblk; ++k) {
    PrefillBlock& x = blk[k];
    x.r0 = 16 * k;
    x.n = std::min<int64_t>(16, rows - x.r0);
    x.qlo = w.i1;
    x.qhi = w.i0;
    for (int64_t r = x.r0; r < x.r0 + x.n; ++r) {
      x.qlo = std::min(x.qlo, w.i0 + r % nq);
      x.qhi = std::max(x.qhi, w.i0 + r % nq);
    }
  }

  const uint16_t* krow[TN];
  const uint16_t* vrow[TN];
  int64_t act[kMaxBlocks];   // blocks that see the tile, in order
  bool act_full[kMaxBlocks];  // ... every row of which sees every key (no mask, no pse)
  uint64_t vis[kMaxBlocks][16];  // boundary blocks: visible keys of each row
  BlockSoftmax sm;
  const __m512 vscale = _mm512_set1_ps(scale);
  const int64_t nd = D / 32, nc = (Dv + 31) / 32;
  LoadTileConfig();
  const int64_t tile0 = w.j0 / TN * TN;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN) {
    const int64_t jt0 = std::max(t0, w.j0), jt1 = std::min(t0 + TN, w.j1), nk = jt1 - jt0;
    if (std::max(w.i0, jt0 - next) > std::min(w.i1 - 1, jt1 - 1 + pre)) continue;
    // Blocks with a row that sees a key of the tile: i - pre <= jt1 - 1 and jt0 <= i + next for
    // some i in [qlo, qhi].
    int64_t na = 0;
    for (int64_t k = 0; k < nblk; ++k) {
      const PrefillBlock& x = blk[k];
      if (std::max(x.qlo, jt0 - next) > std::min(x.qhi, jt1 - 1 + pre)) continue;
      act[na] = k;
      act_full[na] = p.mask == nullptr && p.pse == nullptr && nk == TN &&
                     x.qhi - pre <= jt0 && jt1 - 1 <= x.qlo + next;
      ++na;
    }
    if (na == 0) continue;
    for (int64_t n = 0; n < nk; ++n) {
      const void* base;
      int64_t off;
      uint8_t from_prefix;
      ResolveKey(p, p.k, b, w.hk, jt0 + n, &base, &off, &from_prefix);
      krow[n] = static_cast<const uint16_t*>(base) + off;
      ResolveKey(p, p.v, b, w.hk, jt0 + n, &base, &off, &from_prefix);
      vrow[n] = static_cast<const uint16_t*>(base) + off;
    }
    {  // the next tile's rows into L2 while this one is computed
      const int64_t n1 = std::min(w.j1, jt1 + TN);
      for (int64_t j = jt1; j < n1; ++j) {
        const void* base;
        int64_t off;
        uint8_t from_prefix;
        ResolveKey(p, p.k, b, w.hk, j, &base, &off, &from_prefix);
        const char* kr = reinterpret_cast<const char*>(static_cast<const uint16_t*>(base) + off);
        for (int64_t o = 0; o < D * 2; o += 64) _mm_prefetch(kr + o, _MM_HINT_T1);
        ResolveKey(p, p.v, b, w.hk, j, &base, &off, &from_prefix);
        const char* vr = reinterpret_cast<const char*>(static_cast<const uint16_t*>(base) + off);
        for (int64_t o = 0; o < Dv * 2; o += 64) _mm_prefetch(vr + o, _MM_HINT_T1);
      }
    }
    PackK(krow, nk, D, kp);
    PackV(vrow, nk, Dv, vp);
    CompilerFence();
    bool v_bad = false;  // non-finite values in the tile (checked when a block is boundary)
    for (int64_t a = 0; a < na; ++a) {
      if (!act_full[a]) {
        v_bad = AnyNonFiniteBf16(vrow, nk, Dv);
        break;
      }
    }

    // Boundary rows [r0, r1) of active block a: x = scale * s + pse, -inf where the band, the bit
    // mask or the tile end hides the cell; each row's visible cells are kept for the non-finite V
    // case.
    const auto prepare = [&](int64_t a, float* s, int r0, int r1) {
      const PrefillBlock& x = blk[act[a]];
      for (int r = r0; r < std::min<int>(r1, static_cast<int>(x.n)); ++r) {
        const int64_t rr = x.r0 + r;
        const int64_t i = w.i0 + rr % nq;
        float* sr = s + r * TN;
        // Visible n: i - pre <= jt0 + n <= i + next, n < nk.
        const int64_t lo = std::max<int64_t>(0, i - pre - jt0);
        const int64_t hi = std::min<int64_t>(nk - 1, i + next - jt0);
        uint64_t vm = lo > hi ? 0 : LowKeys(hi + 1) & ~LowKeys(lo);
        if (p.mask != nullptr && vm != 0) {
          const uint8_t* mrow = p.mask + b * p.mask_sb + (mask_row0 + i) * p.mask_ss +
                                (mask_col0 + jt0) * p.mask_sk;
          uint64_t hidden = 0;
          if (p.mask_sk == 1) {
            const __m512i mb8 = _mm512_maskz_loadu_epi8(LowKeys(nk), mrow);
            hidden = _mm512_test_epi8_mask(mb8, mb8);
          } else {
            for (int64_t n = 0; n < nk; ++n)
              if (mrow[n * p.mask_sk] != 0) hidden |= 1ull << n;
          }
          vm &= ~hidden;
        }
        vis[a][r] = vm;
        int64_t po = 0;
        if (p.pse) {
          const int64_t h = w.hk * G + w.g0 + rr / nq;
          po = b * p.pse_sb + h * p.pse_sh + (pse_row0 + i) * p.pse_ss +
               (pse_col0 + jt0) * p.pse_sk;
        }
        for (int64_t c = 0; c < TN / 16; ++c) {
          const __mmask16 mv = static_cast<__mmask16>(vm >> (16 * c));
          __m512 xv = _mm512_mul_ps(_mm512_loadu_ps(sr + 16 * c), vscale);
          if (p.pse) {
            const __mmask16 in = static_cast<__mmask16>(LowKeys(nk) >> (16 * c));
            __m512 pv;
            if (p.pse_elem == Elem::kF32 && p.pse_sk == 1) {
              pv = _mm512_maskz_loadu_ps(in, static_cast<const float*>(p.pse) + po + 16 * c);
            } else if (p.pse_elem == Elem::kBF16 && p.pse_sk == 1) {
              const __m256i u = _mm256_maskz_loadu_epi16(
                  in, static_cast<const uint16_t*>(p.pse) + po + 16 * c);
              pv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(u), 16));
            } else {
              alignas(64) float t[16] = {};
              for (int64_t n = 16 * c; n < std::min<int64_t>(nk, 16 * c + 16); ++n)
                t[n - 16 * c] = cvt::Load(p.pse, p.pse_elem, po + n * p.pse_sk);
              pv = _mm512_load_ps(t);
            }
            xv = _mm512_add_ps(xv, pv);
          }
          _mm512_storeu_ps(sr + 16 * c, _mm512_mask_blend_ps(mv, _mm512_set1_ps(kNegInf), xv));
        }
      }
    };

    // Pass 1: S = Q K^T and the softmax, P of each active block to the pbuf rows of the block.
    // (Interleaving the next block's tile products with this block's softmax did not pay: the
    // tile loads keep the vector code from overlapping them.)
    for (int64_t a = 0; a < na; ++a) {
      const PrefillBlock& x = blk[act[a]];
      const bool full = act_full[a];
      ScoreBegin();
      for (int64_t c = 0; c < nd; ++c) ScoreChunk(qb + x.r0 * D, D, kp, 32 * c);
      ScoreEnd(sbuf);
      if (a + 1 < na) PrefetchL1(qb + blk[act[a + 1]].r0 * D, 16 * D * 2);
      sm.Begin(sbuf, pbuf + x.r0 * TN, full, scale, static_cast<__mmask16>((1u << x.n) - 1));
      if (!full) prepare(a, sbuf, 0, 16);
      sm.MaxRows(0, 16);
      sm.MaxEnd(out.m + x.r0);
      sm.ExpRows(0, 16);
      // Rescales only live rows (< x.n), so the partial block needs no copy here.
      sm.Finish(out.m + x.r0, out.l + x.r0, out.acc + x.r0 * out.acc_stride, out.acc_stride, ldv);
    }

    // Pass 2: acc += P V for every active block.
    CompilerFence();
    for (int64_t a = 0; a < na; ++a) {
      const PrefillBlock& x = blk[act[a]];
      const uint16_t* pa = pbuf + x.r0 * TN;
      float* acc = out.acc + x.r0 * out.acc_stride;
      if (!act_full[a] && v_bad) {
        // A masked cell must not meet a non-finite value (P = 0 times Inf is NaN): visible cells
        // only, in fp32 (bf16 P times bf16 V is exact, like the tile product).
        for (int64_t r = 0; r < x.n; ++r) {
          float* ar = acc + r * out.acc_stride;
          for (int64_t n = 0; n < nk; ++n) {
            if (!(vis[a][r] >> n & 1)) continue;
            const float pn = cvt::Load(pa, Elem::kBF16, r * TN + n);
            for (int64_t d = 0; d < Dv; ++d) ar[d] += pn * cvt::Load(vrow[n], Elem::kBF16, d);
          }
        }
        continue;
      }
      if (x.n == 16) {
        PvBegin(pa, TN);
        for (int64_t c = 0; c < nc; ++c) PvChunk(vp, Dv, acc, out.acc_stride, 32 * c);
        continue;
      }
      // The row states end at `rows`: run the partial block on a 16-row copy.
      for (int64_t r = 0; r < 16; ++r) {
        float* dst = acc_tail + r * ldv;
        if (r < x.n) std::memcpy(dst, acc + r * out.acc_stride, ldv * 4);
        else std::memset(dst, 0, ldv * 4);
      }
      CompilerFence();
      PvBegin(pa, TN);
      for (int64_t c = 0; c < nc; ++c) PvChunk(vp, Dv, acc_tail, ldv, 32 * c);
      for (int64_t r = 0; r < x.n; ++r)
        std::memcpy(acc + r * out.acc_stride, acc_tail + r * ldv, ldv * 4);
    }
  }
  _tile_release();
}
