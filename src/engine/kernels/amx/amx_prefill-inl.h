// openfia internal: the AMX prefill kernel (dense bf16 keys, no rope): included by kernels_amx.cc
// inside namespace amx_target, after its tile helpers (TileConfig, PackK, PackV,
// AnyNonFiniteBf16, ResolveKey) and the shared online softmax (softmax-inl.h).
//
// Same results as the generic loop (attend-inl.h) up to fp32 rounding: the same tiles of kTileKeys
// keys, band / bit-mask / pse / boundary semantics, online softmax in fp32, P rounded to bf16
// before P * V (docs/semantics.md 1.2), masked cells contribute nothing even next to non-finite
// values. What differs is how the work is laid out, because on AMX the tile products are cheap and
// the vector softmax and the L1 footprint are what cost:
//   - Every step works on a block of 16 rows; a block skips the key tiles none of its rows can see
//     (the causal diagonal is paid once per block, not once per item), and only the tiles that are
//     partly visible to the block go through the masked path.
//   - Each K / V tile is packed once per item; prefill items hold up to kMaxRows rows (plan.cc), so
//     the transposition of K is shared by up to 32 blocks.
//   - A tile runs in two passes over its blocks: scores and softmax (P of every block kept as
//     bf16), then acc += P V. Each pass keeps one 16 KB packed tile in L1 next to the streamed
//     query / accumulator blocks; both tiles at once overflow the 48 KB L1 of current Xeons and
//     made the tile loads several times slower.
//   - The softmax of a block runs on 16 rows at once (softmax-inl.h: row maxima and sums reduced
//     across the rows together).
//   - The next tile's K / V rows are prefetched while the current one is computed.


// Rows of one block, and the most blocks of an item.
constexpr int64_t kBlockRows = 16;
constexpr int64_t kMaxBlocks = kMaxRows / kBlockRows;

// One block of up to 16 rows of a work item.
struct PrefillBlock {
  int64_t r0 = 0;      // first row
  int64_t n = 0;       // rows (16 except for the last block of the item)
  int64_t qlo = 0;     // smallest and largest query index of its rows
  int64_t qhi = 0;
};

// CompilerFence, ScoreBegin/ScoreChunk/ScoreEnd and PvBegin/PvChunk: kernels_amx.cc.

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
      if (!full) prepare(a, sbuf, 0, 16);
      SoftmaxStep step;  // the block's rows; a full block's raw scores are scaled as read
      step.s = sbuf;
      step.lds = TN;
      step.rows = x.n;
      step.nk = TN;
      step.npad = TN;
      step.scale = full ? scale : 1.f;
      step.store.kind = SoftmaxStore::Kind::kBf16;
      step.store.p = pbuf + x.r0 * TN;
      step.store.ldp = TN;
      step.m = out.m + x.r0;
      step.l = out.l + x.r0;
      step.acc = out.acc + x.r0 * out.acc_stride;
      step.acc_stride = out.acc_stride;
      step.ldv = ldv;
      RunSoftmaxStep(step);
      // Rows past the block's (padding of the 16-row tile product): P = 0.
      for (int64_t r = x.n; r < 16; ++r) std::memset(pbuf + (x.r0 + r) * TN, 0, TN * 2);
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
