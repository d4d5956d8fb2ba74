// openfia internal: the decode kernels (decode_avx2, decode_avx512, decode_avx512bf16): a few
// query rows per KV head (a GQA group at one or a few queries) over long key ranges, where every
// key / value byte serves only those rows. Included (no include guard) inside a target's namespace
// after attend_base-inl.h / attend-inl.h (V, the resolver, LoadElem, RunSoftmaxStep) and
// decode_base-inl.h (the pieces below the item: rows, prefetch, fp32 products, exact corners,
// the softmax step); a target with integer or dot products includes its own file in between and
// defines OPENFIA_DECODE_DOT (kernels_avx512bf16.cc: avx512/decode_dot-inl.h, VDPBF16PS /
// VPDPBUSD / VPDPWSSD) or OPENFIA_DECODE_INT (kernels_avx2.cc: avx2/decode_int_avx2-inl.h,
// VPMADDWD).
//
// Per tile of kTileKeys keys and per KV head of the item, with R rows:
//   S = Q K^T   VDPBF16PS on bf16 queries where Bf16DotTiles (decode_dot-inl.h); int8 / int4
//               keys as integer products against integer query rows (VPDPBUSD for 3 or more
//               rows there, VPMADDWD on avx2 for bf16 / f16 queries); else fp32 FMAs on K rows
//               widened in registers, the rows sharing each loaded K vector;
//   softmax     the shared update (softmax-inl.h) on the row-major scores, P rounded to the
//               query dtype into its own buffer (the scores stay);
//   acc += P V  VDPBF16PS on bf16 value pairs where Q K^T used it; int8 / int4 values as integer
//               products against 15-bit integer probabilities per tile and row (VPDPWSSD there,
//               VPMADDWD on avx2); else fp32 FMAs, the rows sharing each loaded V vector.
// int8 / int4 K and V: the integers are exact in bf16 and fp32, so they go to the products with
// one exact conversion (int4 keys with none on the VDPBF16PS path: 0x4300 | nibble is a bf16
// number) and every antiquant parameter comes out of the sums:
//   per token, head or tensor (s, o of a key)   score = s (q.x + o sum(q)); a value's P' = P s
//                                               and sum(P' o) joins every channel of the row;
//   per channel (s_d, o_d of a head)            score = q'.x + sum(q' o) with q' = q s (fp32;
//                                               VDPBF16PS takes q' as two bf16 terms); a value
//                                               channel is s_d (sum(P x_d) + o_d sum(P)) at the
//                                               item's end.
// The reference rounds each dequantized element (x + o) s to the query dtype first; the factored
// forms are at least as accurate (the tests allow the reference's rounding, not more).
//
// Exact corners, tile by tile and head by head: a tile whose per-token parameters are not all
// finite runs the reference's element order (DecodeExactTile), and so does every tile of a head
// whose per-channel parameters are not all finite; a tile whose probabilities fell below the
// probability exp's floor (exp(-86.5)) next to a float V recomputes them with the exact exp and
// multiplies in fp32 (a tiny P times an infinite value is infinite, not 0 x inf = NaN).
//
// Memory: float K and V on the VDPBF16PS path (R >= 3) walk a tile token after token across the
// item's heads, as a [block, block_size, H_kv * D] cache stores them (the scores of every head 4
// keys at a time, then P V of every head 16 keys at a time), with a prefetch stream into L2
// kDecAhead tokens ahead of the walk (DecStream): from DRAM, D1's shape at 2 threads ran about
// 1.1x faster so than head after head. The other paths go head after head through a tile while
// the next tile's rows of every head are prefetched token after token (DecPrefetch), a few lines
// at each step of the products; integer K and V on VPDPBUSD / VPDPWSSD take every head's scores
// first, then one softmax step over the rows of all of them, then P V head after head.

// Integer products of int8 / int4 K and V (avx512/decode_dot-inl.h: VPDPBUSD / VPDPWSSD;
// avx2/decode_int_avx2-inl.h: VPMADDWD), each file with the same hooks, included by the target
// before this file:
//   DecIntScoresFit(it), DecIntValuesFit(it)   whether the item's keys / values may take them
//                                              (the first before the query rows are read)
//   DecIntQueryBytes(Rp, D)                    bytes of one head's integer query rows
//   DecIntQuery(kf, qf, Rp, D, qp, sigma, corr)  those rows (false: keep the other products)
//   DecIntQk(it, qp, sigma, corr, t, x, S, pf)   S = Q K^T of head x
//   DecIntQuantP(P, s, o, npad, p, sigma, sum)   a row's P' as 15-bit integers
//   DecIntPv(it, p, sigma, t, x, acc, lda, pf)   acc += sigma P V of head x
#if defined(OPENFIA_DECODE_DOT) || defined(OPENFIA_DECODE_INT)
#define OPENFIA_DECODE_INTS 1
#endif

// ---- the item ---------------------------------------------------------------------------------

using DecQkFn = void (*)(const DecItem&, const float*, int64_t, const DecTileRows&, int64_t,
                         float*, DecPrefetch&);
using DecPvFn = void (*)(const DecItem&, const float*, const DecTileRows&, int64_t, float*,
                         int64_t, DecPrefetch&);

inline DecQkFn DecPickQk(DecFmt f) {
  switch (f) {
    case DecFmt::kF32: return &DecQkFma<DecFmt::kF32>;
    case DecFmt::kF16: return &DecQkFma<DecFmt::kF16>;
    case DecFmt::kBF16: return &DecQkFma<DecFmt::kBF16>;
    case DecFmt::kI8: return &DecQkFma<DecFmt::kI8>;
    default: return &DecQkFma<DecFmt::kI4>;
  }
}
inline DecPvFn DecPickPv(DecFmt f) {
  switch (f) {
    case DecFmt::kF32: return &DecPvFma<DecFmt::kF32>;
    case DecFmt::kF16: return &DecPvFma<DecFmt::kF16>;
    case DecFmt::kBF16: return &DecPvFma<DecFmt::kBF16>;
    case DecFmt::kI8: return &DecPvFma<DecFmt::kI8>;
    default: return &DecPvFma<DecFmt::kI4>;
  }
}

// Whether a probability of some row fell below the probability exp's floor in this tile: a live
// score with scale s - m < -86.5 (its exact P is tiny but not 0).
inline bool DecTinyP(const DecItem& it, const float* S, const float* m, int64_t nk) {
  constexpr int W = V::kW;
  const int64_t nv = nk / W * W;
  for (int64_t r = 0; r < it.R; ++r) {
    if (!std::isfinite(m[r])) continue;
    const float* s = S + r * kTileKeys;
    typename V::T vlo = V::Set1(std::numeric_limits<float>::infinity());
    typename V::T vhi = V::Set1(-std::numeric_limits<float>::infinity());
    for (int64_t n = 0; n < nv; n += W) {
      const typename V::T x = V::Load(s + n);
      vlo = V::Min(vlo, x);
      vhi = V::Max(vhi, x);
    }
    float lo = V::ReduceMin(vlo), hi = V::ReduceMax(vhi);
    for (int64_t n = nv; n < nk; ++n) {
      lo = std::min(lo, s[n]);
      hi = std::max(hi, s[n]);
    }
    const float worst = it.scale >= 0.f ? lo * it.scale : hi * it.scale;
    if (worst - m[r] < -86.5f) return true;
  }
  return false;
}

// Runs item w (DecodeProblemWhy / DecodeItemWhy accepted it) with the scratch DecodeScratchSize
// declares, every probability times pscale (DecodeRunItem).
inline void DecodeRunItemScaled(const Problem& p, const WorkItem& w, void* scratch,
                                const RowStates& out, float pscale) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  DecScratch sc;
  DecScratchFloats(p, &sc, static_cast<float*>(scratch));
  DecItem it;
  it.p = &p;
  it.w = &w;
  DecSideOf(p.k, p.q.elem, &it.ks);
  DecSideOf(p.v, p.q.elem, &it.vs);
  it.pscale = pscale;
  it.R = w.head_rows();
  it.nh = w.n_hk;
  it.D = p.d_qk;
  it.Dv = p.d_v;
  it.ldv = (p.d_v + 15) / 16 * 16;
  it.scale = static_cast<float>(p.scale);
  if (!(it.scale > 0.f)) {
    it.prescale = true;
    it.raw_scale = it.scale;
    it.scale = 1.f;
  }
  it.qe = p.q.elem;
#if defined(OPENFIA_DECODE_DOT)
  it.dot_qk = it.qe == Elem::kBF16 && Bf16DotTiles();
#endif
#if defined(OPENFIA_DECODE_INTS)
  it.int_qk = it.ks.quant() && DecIntScoresFit(it);
#endif
  const int64_t R = it.R, nh = it.nh, D = it.D, Dv = it.Dv, TNk = kTileKeys;
  const int64_t b = w.b, nq = w.i1 - w.i0, G = p.group(), Rp = DecRowsPad(R);
  ResetRowStates(out, w.rows(), it.ldv);
  float* ksc = sc.kpar, *kof = sc.kpar + TNk, *vsc = sc.kpar + 2 * TNk, *vof = sc.kpar + 3 * TNk;

  // Query rows as fp32 [nh][Rp][D] (rows past R zero), with per-channel K parameters folded in
  // (q' = q s), their sums, and the rows' per-channel K constants sum(q' (o - bias)) (int4 keys
  // staged for VDPBF16PS hold bias + x).
  const float kbias_st =
      it.dot_qk && !it.int_qk && it.ks.fmt == DecFmt::kI4 ? kDecI4Bias : 0.f;
  for (int64_t x = 0; x < nh; ++x) {
    const bool exact =
        !DecChanFinite(it.ks, D, w.hk + x) || !DecChanFinite(it.vs, Dv, w.hk + x);
    sc.exact[x] = exact ? 1.f : 0.f;
    const bool fold = it.ks.chan && !exact;
    if (fold) DecChanParams(it.ks, D, w.hk + x, sc.kchan);
    for (int64_t r = 0; r < Rp; ++r) {
      float* dst = sc.q + (x * Rp + r) * D;
      if (r >= R) {
        std::fill(dst, dst + D, 0.f);
        continue;
      }
      const int64_t h = (w.hk + x) * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
      LoadRowF32(p.q, p.q.Base(b), p.q.Offset(b, h, row, 0), D, dst);
      // D is a multiple of 16, so of the vector width.
      typename V::T sum = V::Zero(), c = V::Zero();
      const typename V::T vb = V::Set1(kbias_st);
      for (int64_t d = 0; d < D; d += V::kW) {
        typename V::T qv = V::Load(dst + d);
        sum = V::Add(sum, qv);
        if (fold) {
          qv = V::Mul(qv, V::Load(sc.kchan + d));
          V::Store(dst + d, qv);
          c = V::Fma(qv, V::Sub(V::Load(sc.kchan + D + d), vb), c);
        }
      }
      sc.qsum[x * R + r] = V::ReduceSum(sum);
      sc.crow[x * R + r] = V::ReduceSum(c);
    }
  }
  float kbias = kbias_st;
#if defined(OPENFIA_DECODE_DOT)
  it.dot_qk = it.dot_qk && DotQueryOk(sc.q, nh * Rp * D);
  it.dot_pv = it.dot_qk;
#endif
#if defined(OPENFIA_DECODE_INTS)
  it.int_qk = it.int_qk && DecIntScoresFit(it);
  it.int_pv = it.vs.quant() && DecIntValuesFit(it);
  char* qint = reinterpret_cast<char*>(sc.qdot);
  const int64_t qint_bytes = DecIntQueryBytes(Rp, D);
  for (int64_t x = 0; it.int_qk && x < nh; ++x)
    it.int_qk = DecIntQuery(it.ks.fmt, sc.q + x * Rp * D, Rp, D, qint + x * qint_bytes,
                            sc.qsig + x * Rp, sc.qcorr + x * 2 * Rp);
#endif
#if defined(OPENFIA_DECODE_DOT)
  uint32_t* qhi = sc.qdot;
  uint32_t* qlo = sc.qdot + nh * Rp * D / 2;  // per-channel K: q' = hi + lo
  if (it.dot_qk && !it.int_qk) {
    kbias = it.ks.fmt == DecFmt::kI4 ? kDecI4Bias : 0.f;
    for (int64_t x = 0; x < nh; ++x) {
      DotPackQuery(sc.q + x * Rp * D, R, D, qhi + x * Rp * D / 2, false);
      if (it.ks.chan) DotPackQuery(sc.q + x * Rp * D, R, D, qlo + x * Rp * D / 2, true);
    }
  }
#endif
  if (!it.dot_qk) kbias = 0.f;  // fp32 products read the integers
  if (it.ks.chan && kbias != kbias_st)  // the rows' constants for the keys' bias after all
    for (int64_t x = 0; x < nh; ++x) {
      if (sc.exact[x] != 0.f) continue;
      DecChanParams(it.ks, D, w.hk + x, sc.kchan);
      for (int64_t r = 0; r < R; ++r) {
        const float* q = sc.q + (x * Rp + r) * D;
        float c = 0.f;
        for (int64_t d = 0; d < D; ++d) c += q[d] * (sc.kchan[D + d] - kbias);
        sc.crow[x * R + r] = c;
      }
    }
  const DecQkFn qk = DecPickQk(it.ks.fmt);
  const DecPvFn pv = DecPickPv(it.vs.fmt);
  // The rows' extra sums: per-token value offsets, or per channel sum(P).
  const bool v_aux = (it.vs.tok() && it.vs.off) || it.vs.chan;
  for (int64_t i = 0; i < nh * R; ++i) sc.aux[i] = 0.f;

  // Float keys and values on the VDPBF16PS path with row groups of 4 walk each tile token
  // after token across the item's heads, in the order a [.., H_kv * D] row stores them: the
  // scores of every head, 4 keys at a time; each head's softmax; then P V of every head, 16
  // keys at a time; with a prefetch stream kDecAhead tokens ahead of the walk.
  const bool token_major =
      it.dot_qk && !it.int_qk && !it.ks.quant() && it.dot_pv && !it.vs.quant() && R > 2;
  [[maybe_unused]] bool pv_later[kItemRows] = {};
  [[maybe_unused]] DecStream stream;
  // The token-major walk runs one softmax step over the rows of every head at once (their scores,
  // P, states and accumulators lie row after row when R fills its row groups): 16-row groups
  // reduce and update together instead of a 4-row step per head. (Its K / V are floats, so no
  // head runs the reference's element order.)
  const bool joint_softmax = token_major && R == Rp;
#if defined(OPENFIA_DECODE_DOT)
  // Integer K and V (VPDPBUSD / VPDPWSSD) the same way: the scores of every head, one softmax
  // step over runs of heads (a head that runs the reference's element order splits a run), then
  // P V head after head: in cache 2-3% faster than a 4-row step per head for D2 / D3's shapes.
  // (avx2's VPMADDWD form keeps the step per head: the runs made D3 8% slower there.)
  const bool joint_int = it.int_qk && it.int_pv && R == Rp;
#else
  constexpr bool joint_int = false;
#endif

  DecTileRows tiles[2];
  DecPrefetch pf;
  const int64_t kbytes = DecBytes(it.ks.fmt, D), vbytes = DecBytes(it.vs.fmt, Dv);
  stream.nh = nh;
  stream.kbytes = kbytes;
  stream.vbytes = vbytes;
  const int64_t tile0 = w.j0 / TNk * TNk;
  if (w.j0 < w.j1) DecResolveTile(p, w, tile0, &tiles[0]);
  int cur = 0;
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TNk, cur ^= 1) {
    const DecTileRows& t = tiles[cur];
    // The tile after this one, prefetched while this one runs: the next of this piece, or past
    // a split piece's end the next piece's first (pieces end on the tile grid): from DRAM an
    // item's first tile otherwise takes about twice a later one, and the next piece follows in
    // memory (the pool runs consecutive items on one thread, ParallelFor).
    WorkItem wa = w;
    if (t0 + TNk >= w.j1 && w.split + 1 < w.n_split) wa.j1 = p.kv_total(b);
    const DecTileRows* after = nullptr;
    if (t0 + TNk < wa.j1) {
      DecResolveTile(p, wa, t0 + TNk, &tiles[cur ^ 1]);
      after = &tiles[cur ^ 1];
    }
    pf.Start(token_major ? nullptr : after, nh, kbytes, vbytes);
    const int64_t nk = t.nk, npad = (nk + V::kW - 1) / V::kW * V::kW;
#if defined(OPENFIA_DECODE_DOT)
    const int64_t klines = (kbytes + 63) / 64, vlines = (vbytes + 63) / 64;
    if (token_major) {
      stream.Tile(&t, after);
      if (t0 == tile0) stream.Issue(kDecAhead * nh * klines, kDecAhead);
      for (int64_t n0 = 0; n0 < nk; n0 += 4)
        for (int64_t x = 0; x < nh; ++x) {
          stream.Issue(4 * klines, n0 + 4 + kDecAhead);
          const char* k4[4];
          for (int k = 0; k < 4; ++k) {
            const int64_t n = std::min<int64_t>(n0 + k, nk - 1);
            k4[k] = t.k[n] + x * t.kstep[n];
          }
          DotQkFour(it, qhi + x * Rp * D / 2, k4, sc.S + x * Rp * TNk, n0);
        }
    }
#endif
    bool kfinite = true, vfinite = true;  // the tile's per-key parameters
    // Runs f on head rows o's accumulators in channel order (the fp32 products and the exact
    // paths), whatever order the VDPBF16PS P V keeps them in.
    const auto in_channel_order = [&](const RowStates& o, auto&& f) {
#if defined(OPENFIA_DECODE_DOT)
      if (it.dot_pv) DotPermuteRows(o.acc, R, o.acc_stride, Dv, false);
#endif
      f();
#if defined(OPENFIA_DECODE_DOT)
      if (it.dot_pv) DotPermuteRows(o.acc, R, o.acc_stride, Dv, true);
#endif
    };
    // Head x's probabilities fell below the probability exp's floor (DecTinyP) next to float
    // values: the exact P over its scores S, times the values in fp32.
    const auto exact_pv = [&](int64_t x, float* S, const RowStates& o) {
      DecKeyParams(it.vs, t.vc, nk, w.hk + x, vsc, vof);
      DecExactP(it, S, o.m, vsc, nk, S);
      in_channel_order(o, [&] { pv(it, S, t, x, o.acc, o.acc_stride, pf); });
    };
    // fp32 products on head x's P of the softmax (rounded to the query dtype), in channel order.
    const auto fma_pv = [&](int64_t x, float* P, const RowStates& o) {
      float* ax = sc.aux + x * R;
      if (it.vs.tok()) {  // P' = P s per key; the offsets' sum sum_n P' o per row
        for (int64_t r = 0; r < R; ++r) {
          float* pr = P + r * TNk;
          typename V::T sum = V::Zero();
          for (int64_t n = 0; n < npad; n += V::kW) {
            const typename V::T pn = V::Mul(V::Load(pr + n), V::Load(vsc + n));
            V::Store(pr + n, pn);
            sum = V::Fma(pn, V::Load(vof + n), sum);
          }
          if (it.vs.off) ax[r] += V::ReduceSum(sum);
        }
      } else if (it.vs.chan) {
        for (int64_t r = 0; r < R; ++r) ax[r] += DecSum(P + r * TNk, npad);
      }
      pv(it, P, t, x, o.acc, o.acc_stride, pf);
    };
#if defined(OPENFIA_DECODE_INTS)
    // Integer P' and values for head x (vsc, vof: its per-key value parameters).
    const auto int_pv = [&](int64_t x, float* P, const RowStates& o) {
      int16_t* p16 = reinterpret_cast<int16_t*>(sc.pb);
      float sig[kDecMaxR], psum[kDecMaxR];
      bool ok = true;
      for (int64_t r = 0; r < R && ok; ++r)
        ok = DecIntQuantP(P + r * TNk, it.vs.tok() ? vsc : nullptr,
                          it.vs.tok() && it.vs.off ? vof : nullptr, npad, p16 + r * TNk,
                          &sig[r], &psum[r]);
      if (!ok) {  // a P' that is not finite or too small for the integer form
        in_channel_order(o, [&] { fma_pv(x, P, o); });
        return;
      }
      // The offsets' sum sum_n P' o (per token), or sum(P) (per channel).
      if (v_aux)
        for (int64_t r = 0; r < R; ++r) sc.aux[x * R + r] += psum[r];
      DecIntPv(it, p16, sig, t, x, o.acc, o.acc_stride, pf);
    };
#endif
    for (int64_t x = 0; x < nh; ++x) {
      const int64_t hk = w.hk + x;
      float* S = sc.S + (token_major || joint_int ? x * Rp * TNk : 0);
      // The token-major walk keeps every head's bf16 P in sc.P, rows of TNk words one after the
      // other; a fp32 P of its heads would go over their scores.
      float* P = token_major ? S : sc.P;
      uint16_t* P16 = token_major ? reinterpret_cast<uint16_t*>(sc.P) + x * Rp * TNk
                                  : reinterpret_cast<uint16_t*>(P);
      pv_later[x] = false;
      const float* q = sc.q + x * Rp * D;
      const RowStates o{out.m + x * R, out.l + x * R, out.acc + x * R * out.acc_stride,
                        out.acc_stride};
      float* ax = sc.aux + x * R;
      // Per-key parameters (per token, head or tensor; read once per tile where they do not
      // depend on the head): a tile with one that is not finite runs the reference's element
      // order.
      if (it.ks.tok() && (x == 0 || it.ks.dq->sh != 0)) {
        DecKeyParams(it.ks, t.kc, nk, hk, ksc, kof);
        kfinite = DecFinite(ksc, nk) && DecFinite(kof, nk);
      }
      if (it.vs.tok() && (x == 0 || it.vs.dq->sh != 0)) {
        DecKeyParams(it.vs, t.vc, nk, hk, vsc, vof);
        vfinite = DecFinite(vsc, nk) && DecFinite(vof, nk);
      }
      const bool finite = kfinite && vfinite;
      const bool exact_head = sc.exact[x] != 0.f;
      if (!finite || exact_head) {
        in_channel_order(o, [&] { DecodeExactTile(it, t, x, S, P, ax, o, !exact_head); });
        continue;
      }

      // S = Q K^T, then the per-key or per-channel K parameters.
#if defined(OPENFIA_DECODE_INTS)
      if (it.int_qk) {
        DecIntQk(it, qint + x * qint_bytes, sc.qsig + x * Rp, sc.qcorr + x * 2 * Rp, t, x, S, pf);
      } else
#endif
#if defined(OPENFIA_DECODE_DOT)
      if (token_major) {  // the scores are in S
      } else if (it.dot_qk) {
        const char* kr[kTileKeys];
        if (it.ks.quant()) {
          uint16_t* st = reinterpret_cast<uint16_t*>(sc.kstage);
          DotStageRows(it.ks.fmt, t.k, t.kstep, x, nk, D, st, D);
          for (int64_t n = 0; n < nk; ++n) kr[n] = reinterpret_cast<const char*>(st + n * D);
        } else {
          for (int64_t n = 0; n < nk; ++n) kr[n] = t.k[n] + x * t.kstep[n];
        }
        DotQk(it, qhi + x * Rp * D / 2, it.ks.chan ? qlo + x * Rp * D / 2 : nullptr, kr, nk, S,
              pf);
      } else {
        qk(it, q, D, t, x, S, pf);
      }
#else
      qk(it, q, D, t, x, S, pf);
#endif
      if (it.ks.tok()) {  // s (q.x + o sum(q)) per key (padding keys: 0, then -inf below)
        for (int64_t r = 0; r < R; ++r) {
          float* sr = S + r * TNk;
          const typename V::T qs = V::Set1(sc.qsum[x * R + r]), vb = V::Set1(kbias);
          for (int64_t n = 0; n < npad; n += V::kW)
            V::Store(sr + n, V::Mul(V::Fma(V::Sub(V::Load(kof + n), vb), qs, V::Load(sr + n)),
                                    V::Load(ksc + n)));
        }
      } else if (it.ks.chan) {  // q'.x + sum(q' (o - bias))
        for (int64_t r = 0; r < R; ++r) {
          float* sr = S + r * TNk;
          const typename V::T c = V::Set1(sc.crow[x * R + r]);
          for (int64_t n = 0; n < npad; n += V::kW) V::Store(sr + n, V::Add(V::Load(sr + n), c));
        }
      }
      for (int64_t r = 0; r < R; ++r) {
        if (it.prescale)
          for (int64_t n = 0; n < nk; ++n) S[r * TNk + n] *= it.raw_scale;
        for (int64_t n = nk; n < npad; ++n) S[r * TNk + n] = kNegInf;
      }

      if (joint_softmax) continue;  // after the last head (below)
      if (joint_int) {
        pv_later[x] = true;
        continue;
      }

      // P, and the rows' m, l, accumulators and extra sums.
      SoftmaxStep st = DecSoftmaxStep(it, S, R, nk, npad, o);
      if (it.dot_pv && !it.int_pv) {
        st.store.kind = SoftmaxStore::Kind::kBf16;
        st.store.p = P16;
        st.store.ldp = TNk;
      } else {
        st.store.kind = SoftmaxStore::Kind::kRounded;
        st.store.pf = P;
        st.store.ldpf = TNk;
      }
      st.aux = v_aux ? ax : nullptr;
      RunSoftmaxStep(st);

      // acc += P V.
      if (!it.vs.quant() && DecTinyP(it, S, o.m, nk)) {
        exact_pv(x, S, o);
        continue;
      }
#if defined(OPENFIA_DECODE_DOT)
      if (token_major) {
        pv_later[x] = true;
        continue;
      }
#endif
#if defined(OPENFIA_DECODE_INTS)
      if (it.int_pv) {
        int_pv(x, P, o);
        continue;
      }
#endif
#if defined(OPENFIA_DECODE_DOT)
      if (it.dot_pv) {  // float values: P in bf16 (the softmax stored it so)
        const char* vr[kTileKeys + 1];
        for (int64_t n = 0; n < nk; ++n) vr[n] = t.v[n] + x * t.vstep[n];
        vr[nk] = reinterpret_cast<const char*>(kDecZeroRow);
        DotPv(it, P16, vr, nk, o.acc, o.acc_stride, pf);
        continue;
      }
#endif
      fma_pv(x, P, o);
    }
#if defined(OPENFIA_DECODE_INTS)
    if (joint_int) {
      for (int64_t x0 = 0; x0 < nh;) {  // runs of heads that took the steps above
        int64_t x1 = x0;
        while (x1 < nh && pv_later[x1]) ++x1;
        if (x1 == x0) {
          ++x0;
          continue;
        }
        const RowStates o{out.m + x0 * R, out.l + x0 * R, out.acc + x0 * R * out.acc_stride,
                          out.acc_stride};
        SoftmaxStep st = DecSoftmaxStep(it, sc.S + x0 * Rp * TNk, (x1 - x0) * R, nk, npad, o);
        st.store.kind = SoftmaxStore::Kind::kRounded;  // over the scores
        st.aux = v_aux ? sc.aux + x0 * R : nullptr;
        RunSoftmaxStep(st);
        x0 = x1;
      }
      for (int64_t x = 0; x < nh; ++x) {
        if (!pv_later[x]) continue;
        if (it.vs.tok() && it.vs.dq->sh != 0) DecKeyParams(it.vs, t.vc, nk, w.hk + x, vsc, vof);
        const RowStates o{out.m + x * R, out.l + x * R, out.acc + x * R * out.acc_stride,
                          out.acc_stride};
        int_pv(x, sc.S + x * Rp * TNk, o);
      }
    }
#endif
#if defined(OPENFIA_DECODE_DOT)
    if (joint_softmax) {
      SoftmaxStep st = DecSoftmaxStep(it, sc.S, nh * R, nk, npad, out);
      st.store.kind = SoftmaxStore::Kind::kBf16;
      st.store.p = reinterpret_cast<uint16_t*>(sc.P);
      st.store.ldp = TNk;
      RunSoftmaxStep(st);
      for (int64_t x = 0; x < nh; ++x) {
        float* S = sc.S + x * Rp * TNk;
        const RowStates o{out.m + x * R, out.l + x * R, out.acc + x * R * out.acc_stride,
                          out.acc_stride};
        pv_later[x] = !DecTinyP(it, S, o.m, nk);  // as the per-head step above
        if (!pv_later[x]) exact_pv(x, S, o);
      }
    }
    if (token_major)  // P V of every head (value rows past nk: a zero row, P 0 there)
      for (int64_t n0 = 0; n0 < nk; n0 += kDecRun) {
        const int64_t n = std::min(kDecRun, nk - n0);
        for (int64_t x = 0; x < nh; ++x) {
          stream.Issue(kDecRun * vlines, nk + n0 + kDecRun + kDecAhead);
          if (!pv_later[x]) continue;
          const char* vr[kDecRun + 1];
          for (int64_t i = 0; i < n; ++i) vr[i] = t.v[n0 + i] + x * t.vstep[n0 + i];
          vr[n] = reinterpret_cast<const char*>(kDecZeroRow);
          DotPv(it, reinterpret_cast<const uint16_t*>(sc.P) + x * Rp * TNk + n0, vr, n,
                out.acc + x * R * out.acc_stride, out.acc_stride, pf);
        }
      }
#endif
  }
#if defined(OPENFIA_DECODE_DOT)
  if (it.dot_pv) DotPermuteRows(out.acc, w.rows(), out.acc_stride, Dv, false);
#endif
  if (it.vs.tok() && v_aux) {  // every channel of a row gets its value-offset sum
    for (int64_t i = 0; i < nh * R; ++i) {
      float* a = out.acc + i * out.acc_stride;
      for (int64_t d = 0; d < Dv; ++d) a[d] += sc.aux[i];
    }
  } else if (it.vs.chan) {  // s_d (sum(P x_d) + (o_d - bias) sum(P))
    for (int64_t x = 0; x < nh; ++x) {
      if (sc.exact[x] != 0.f) continue;
      DecChanParams(it.vs, Dv, w.hk + x, sc.vchan);
      for (int64_t r = 0; r < R; ++r) {
        float* a = out.acc + (x * R + r) * out.acc_stride;
        const float ps = sc.aux[x * R + r];
        for (int64_t d = 0; d < Dv; ++d)
          a[d] = sc.vchan[d] * (a[d] + sc.vchan[Dv + d] * ps);
      }
    }
  }
}

// The decode kernel's run entry: item w with the rerun of rows whose fp32 sums passed FLT_MAX
// (attend-inl.h).
inline void DecodeRunItem(const Problem& p, const WorkItem& w, void* scratch,
                          const RowStates& out) {
  RunRerunningOverflow(p, out, w.rows(), (p.d_v + 15) / 16 * 16, [&](float pscale) {
    DecodeRunItemScaled(p, w, scratch, out, pscale);
  });
}

// The decode kernel's supports entry: the problem-level rules, then the item's.
inline const char* DecodeSupports(const Problem& p, const WorkItem* w) {
  return w == nullptr ? DecodeProblemWhy(p) : DecodeItemWhy(p, *w);
}
#undef OPENFIA_DECODE_INTS
