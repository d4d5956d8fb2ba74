// openfia internal: the generic flash-attention tile loop, compiled once per SIMD target.
//
// Included (without include guard, on purpose) inside namespace openfia::internal::<target> after
// generic/attend_base-inl.h (the traits V, loading, packing, fp32 products) and, on a target with
// bf16 dot tiles (OPENFIA_ATTEND_BF16DOT), after its dot file (avx512/attend_dot-inl.h or
// neon/attend_dot_neon-inl.h) and generic/attend_dot_common-inl.h.
//
// Data flow of one work item (see engine/plan.h): pack its query rows once (f32, rope appended);
// then per tile of kTileKeys keys: resolve every key's storage row once, pack K transposed
// ([d][key], so the score kernel broadcasts one query element against kW keys) and V ([key][d]),
// converting to f32 in registers; scores = Q * K^T (register-blocked FMA); online softmax in f32;
// P rounded to the query dtype (docs/semantics.md 1.2); acc += P * V (register-blocked FMA). Tiles
// the band proves empty are skipped; the band / bit mask is evaluated per element only on boundary
// tiles.

#include "engine/kernels/generic/attend_fullquant-inl.h"
#include "engine/kernels/generic/softmax-inl.h"

// ---------------------------------------------------------------------------------------------
// The tile loop

inline float ExpScalar(float x) {
  alignas(64) float t[W];
  V::Store(t, V::Exp(V::Set1(x)));
  return t[0];
}

// Row r of item w (KV head hk) before its softmax, scores already scaled: the pse bias added,
// cells the tile's visibility hides (boundary tiles, !full) and the padding [nk, npad) set to
// -inf.
inline void BiasAndMaskRow(const Problem& p, const WorkItem& w, const ItemOrigins& org,
                           int64_t hk, int64_t r, int64_t jt0, int64_t nk, int64_t npad,
                           bool full, const uint8_t* vis, float* s) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t nq = w.i1 - w.i0;
  if (p.pse) {
    const int64_t h = hk * p.group() + w.g0 + r / nq, i = w.i0 + r % nq;
    const int64_t po = w.b * p.pse_sb + h * p.pse_sh + (org.pse_row0 + i) * p.pse_ss +
                       (org.pse_col0 + jt0) * p.pse_sk;
    for (int64_t n = 0; n < nk; ++n) s[n] += cvt::Load(p.pse, p.pse_elem, po + n * p.pse_sk);
  }
  if (!full) {
    const uint8_t* vr = vis + (r % nq) * TN;
    for (int64_t n = 0; n < nk; ++n)
      if (!vr[n]) s[n] = kNegInf;
  }
  for (int64_t n = nk; n < npad; ++n) s[n] = kNegInf;
}

inline void AttendImpl(const Problem& p, const WorkItem& w, TileScratch& sc,
                       const RowStates& out, float pscale = 1.f) {
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t D = sc.dk, Dv = p.d_v, ldv = sc.dv_pad, ldq = sc.dk_pad;
  const int64_t vs = PackedVStride(ldv);  // row stride of the packed V tile
  const float scale = static_cast<float>(p.scale);
  const Elem pe = p.q.elem;  // P is rounded to the query dtype before P * V (docs/semantics.md 1.2)
  const ItemOrigins org = OriginsOf(p, b);
  const int64_t pre = org.pre, next = org.next;

  ResetRowStates(out, rows, ldv);
  if (w.j0 >= w.j1) return;

  // Query rows, rope appended, as f32.
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = w.hk * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
    float* dst = sc.q + r * ldq;
    LoadRowF32(p.q, p.q.Base(b), p.q.Offset(b, h, row, 0), p.d_qk, dst);
    if (p.d_rope > 0)
      LoadRowF32(p.q_rope, p.q_rope.Base(b), p.q_rope.Offset(b, h, row, 0), p.d_rope,
                 dst + p.d_qk);
  }

#if defined(OPENFIA_ATTEND_BF16DOT)
  // Dot tiles (attend_dot-inl.h) for items whose operands are all bf16 values; the query rows
  // in pair form once per item.
  const int64_t ldqp = ldq / 2;
  const bool dot_item = DotItemOk(p, sc.q, rows, ldq, D);
  if (dot_item) QueryPairs(sc.q, rows, ldq, D, sc.qp, ldqp);
#endif

  // The KV operands the tile loop reads: with a second key source (SparseAttnSharedkv) its keys
  // come through the prefix slot (WithSecond / ResolveEntry).
  // (Copied only then: an operand of a tensor-list problem owns a vector of batch pointers.)
  const bool two = p.k2.cache.present();
  KvOperand k_two, v_two;
  if (two) {
    k_two = WithSecond(p.k, p.k2);
    v_two = WithSecond(p.v, p.v2);
  }
  const KvOperand& Kx = two ? k_two : p.k;
  const KvOperand& Vx = two ? v_two : p.v;
  const KvOperand& Rx = p.k_rope;
  const bool kv_shared = KvShared(p, Kx, Vx, D);
  // K = V items with at least a register block's width of rows per KV head (SparseAttnSharedkv:
  // the 64 heads of a KV head) score each tile from its packed values (ScoresFromRows): no
  // transposed K. Only the fp32 products (the dot tiles pack kt for their pair forms).
  // Each KV head's rows transposed on their own ([D][ldt] at sc.qt + hx * D * ldt).
  const int64_t ldt = (w.head_rows() + W - 1) / W * W;
  bool from_rows = kv_shared && sc.qt != nullptr && w.head_rows() >= kCB * W && ldt <= D &&
                   w.n_hk * ldt <= sc.qt_ld;
#if defined(OPENFIA_ATTEND_BF16DOT)
  from_rows = from_rows && !dot_item;
#endif
  if (from_rows)
    for (int64_t hx = 0; hx < w.n_hk; ++hx)
      TransposeQuery(sc.q + hx * w.head_rows() * ldq, ldq, w.head_rows(), D, ldt,
                     sc.qt + hx * D * ldt);

  FastRows fast, fastv;
  DqRows dq_rows;  // reused by every antiquant pack (each fills it for its own operand)
  // Rows of one KV head; a multi-head item (decode) runs the heads one after the other on each
  // tile, so each head's rows see exactly the operations of a single-head item.
  const int64_t hrows = w.head_rows();
  const bool stream_ok = hrows <= kStreamRows && p.d_rope == 0 && D % W == 0 && Dv % W == 0;
  const int64_t tile0 = w.j0 / TN * TN;
  const int64_t pf_keys = std::max<int64_t>(W, kPrefetchTiles * TN / w.n_hk);
  // V's rows are K's (K = V, MLA's values are the keys' first channels): its lines are K's.
  const bool same_kv_rows = p.k.cache.data != nullptr && Dv <= p.d_qk && SameRows(p.k, p.v) &&
                            SameRows(p.k2, p.v2);
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TN) {
    const int64_t jt0 = std::max(t0, w.j0), jt1 = std::min(t0 + TN, w.j1), nk = jt1 - jt0;
    // Some row i in [i0, i1) sees a key in [jt0, jt1) iff i - pre <= jt1 - 1 and jt0 <= i + next.
    if (std::max(w.i0, jt0 - next) > std::min(w.i1 - 1, jt1 - 1 + pre)) continue;
    const bool full = p.mask == nullptr && (w.i1 - 1) - pre <= jt0 && jt1 - 1 <= w.i0 + next;
    const int64_t npad = (nk + W - 1) / W * W;

    {  // keep about kPrefetchTiles single-head tiles of K and V in flight (in bytes: an item
       // of n_hk heads reads n_hk times more per key, so it looks n_hk times fewer keys ahead)
      const int64_t pf0 = t0 == tile0 ? jt1 : std::min(w.j1, t0 + pf_keys);
      const int64_t pf1 = std::min(w.j1, t0 + TN + pf_keys);
      if (pf0 < pf1) {
        PrefetchKeys(p, p.k, p.k2, w, w.hk, w.n_hk, pf0, pf1, p.d_qk);
        if (!same_kv_rows)
          PrefetchKeys(p, p.v, p.v2, w, w.hk, w.n_hk, pf0, pf1, Dv);
        if (p.d_rope > 0) PrefetchKeys(p, p.k_rope, p.k2, w, w.hk, w.n_hk, pf0, pf1, p.d_rope);
      }
    }
    for (int64_t hx = 0; hx < w.n_hk; ++hx) {
      const int64_t hk = w.hk + hx;
      const float* qh = sc.q + hx * hrows * ldq;
      const RowStates o{out.m + hx * hrows, out.l + hx * hrows,
                        out.acc + hx * hrows * out.acc_stride, out.acc_stride};
      const TileDq kdq = MakeTileDq(Kx, sc.kcoord, hk, p.kv_round_elem());
      const TileDq vdq = MakeTileDq(Vx, sc.vcoord, hk, p.kv_round_elem());
      const TileDq rdq = MakeTileDq(Rx, sc.kcoord, hk, p.kv_round_elem());
      if (hx == 0) {
        ResolveItemKeys(p, p.k, p.k2, w, hk, jt0, nk, sc.kbase, sc.koff, sc.kpre, sc.kcoord);
        ResolveItemKeys(p, p.v, p.v2, w, hk, jt0, nk, sc.vbase, sc.voff, sc.kpre, sc.vcoord);
        if (p.d_rope > 0)  // rope keys live in the first source (no rope with a second one)
          ResolveItemKeys(p, p.k_rope, p.k2, w, hk, jt0, nk, sc.rbase, sc.roff, sc.kpre,
                          sc.kcoord);
      } else {  // the next KV head (never sparse: plan.cc keeps n_hk = 1 there): same storage
                // rows (and dequant coordinates), offset + sh
        for (int64_t n = 0; n < nk; ++n) {
          const bool pr = sc.kpre[n] != 0;
          sc.koff[n] += pr ? p.k.prefix.sh : p.k.cache.Sh(w.b);
          sc.voff[n] += pr ? p.v.prefix.sh : p.v.cache.Sh(w.b);
          if (p.d_rope > 0) sc.roff[n] += pr ? p.k_rope.prefix.sh : p.k_rope.cache.Sh(w.b);
        }
      }
      // Streaming path: few rows, a fully visible tile (so no masked cell can meet a non-finite
      // value), no rope, whole vectors of channels, both K and V vector-contiguous.
      const bool stream = stream_ok && full && !kdq.any() && !vdq.any() &&
                          MakeFastRows(Kx, sc.kbase, sc.koff, sc.kpre, nk, D, &fast) &&
                          MakeFastRows(Vx, sc.vbase, sc.voff, sc.kpre, nk, Dv, &fastv);
      bool v_bad = false, v_seen = false;  // v_seen: v_bad says whether V has a non-finite value
      bool dot = false;  // a dot tile: bf16 pair products (attend_dot-inl.h)
      bool tile_from_rows = false;  // scores from the packed V (ScoresFromRows)
      if (stream) {
        switch (FastElem(Kx, sc.kpre)) {
          case Elem::kF32: StreamScores<Elem::kF32>(fast, nk, qh, ldq, hrows, D, sc.s); break;
          case Elem::kF16: StreamScores<Elem::kF16>(fast, nk, qh, ldq, hrows, D, sc.s); break;
          default: StreamScores<Elem::kBF16>(fast, nk, qh, ldq, hrows, D, sc.s); break;
        }
      } else if (stream_ok && full && kdq.any() &&
                 MakeDqRows(Kx, sc.kbase, sc.koff, sc.kpre, nk, D, kdq, &dq_rows)) {
        // Antiquant decode: dequantize K row-major into kt (no transpose; D * TN floats fit) and
        // stream the scores over it as over an f32 cache; V is packed as below.
        PackVDqAny(dq_rows, nk, D, D, sc.kt);
        for (int64_t n = 0; n < nk; ++n) fast.row[n] = sc.kt + n * D;
        for (int64_t k = 0; k * W < D; ++k) fast.doff[k] = k * W;
        StreamScores<Elem::kF32>(fast, nk, qh, ldq, hrows, D, sc.s);
        PackV(Vx, sc.vbase, sc.voff, sc.kpre, nk, Dv, vs, sc.v, &fast, vdq, &dq_rows);
      } else {
#if defined(OPENFIA_ATTEND_BF16DOT)
        // Dot tiles of bf16 or quantized rows pack their pair forms straight from the rows.
        dot = dot_item && PackPairsDirect(p, Kx, Vx, Rx, sc, nk, vs, kdq, vdq, rdq, &dq_rows,
                                          &fast, &v_bad);
#endif
        if (!dot) {
          tile_from_rows = from_rows && PackKVShared(Kx, sc, nk, D, vs, &fast, false);
          if (!tile_from_rows && (!kv_shared || !PackKVShared(Kx, sc, nk, D, vs, &fast))) {
            PackKT(Kx, sc.kbase, sc.koff, sc.kpre, nk, p.d_qk, 0, sc.kt, &fast, kdq, &dq_rows);
            if (p.d_rope > 0)
              PackKT(Rx, sc.rbase, sc.roff, sc.kpre, nk, p.d_rope, p.d_qk, sc.kt, &fast, rdq,
                     &dq_rows);
            PackV(Vx, sc.vbase, sc.voff, sc.kpre, nk, Dv, vs, sc.v, &fast, vdq, &dq_rows);
          }
          v_bad = AnyNonFinite(sc.v, nk, vs);
#if defined(OPENFIA_ATTEND_BF16DOT)
          // Not with a non-finite value: its masked cells and tiny probabilities need the fp32
          // P; otherwise the pair forms from the fp32 packing (every storage format, antiquant).
          dot = dot_item && !v_bad;
          if (dot) {
            KeyPairs(sc.kt, D, npad, sc.kp);
            ValuePairs(sc.v, vs, nk, ldv, sc.vp, vs);
          }
#endif
        }
        v_seen = true;
#if defined(OPENFIA_ATTEND_BF16DOT)
        if (dot) ScoresDot(sc.qp + hx * hrows * ldqp, ldqp, hrows, sc.kp, D, npad, scale, sc.s);
#endif
        if (!dot) {
          if (tile_from_rows)
            ScoresFromRows(sc.v, vs, nk, sc.qt + hx * D * ldt, ldt, hrows, D, npad, sc.kt, sc.s);
          else
            Scores(qh, ldq, hrows, sc.kt, D, npad, sc.s);
        }
      }

      // Dot tiles store their scores scaled, and so does a tile with a rescored cell.
      const bool scaled =
          RescoreNonFinite(p, sc, Kx, Rx, kdq, rdq, qh, ldq, hrows, nk, npad, dot, sc.s) || dot;

      if (!full) TileVisibility(p, b, org, w.i0, nq, jt0, nk, sc.vis, TN);

      // The step's scores: scaled, the pse bias added, masked cells and the padding at -inf; a
      // full tile without pse leaves the scaling to the step.
      const bool prepare = p.pse != nullptr || !full || nk != npad;
      if (prepare) {
        for (int64_t r = 0; r < hrows; ++r) {
          float* s = sc.s + r * TN;
          if (!scaled) ScaleScores(s, npad, scale);
          BiasAndMaskRow(p, w, org, hk, r, jt0, nk, npad, full, sc.vis, s);
        }
      }
      SoftmaxStep step;
      step.s = sc.s;
      step.lds = TN;
      step.rows = hrows;
      step.nk = nk;
      step.npad = npad;
      step.scale = prepare || scaled ? 1.f : scale;
      step.store.kind = dot ? SoftmaxStore::Kind::kBf16 : SoftmaxStore::Kind::kRounded;
      step.store.pe = pe;
      // The probability exp drops P below exp(-86.5) ~ 2.6e-38 (against l >= 1 they vanish in
      // fp32); a non-finite value must still meet the tiny P the reference gives it: the exact
      // exp there, and on the streaming paths, which do not look at V.
      step.exact = !v_seen || v_bad;
      step.pscale = pscale;
      step.State(o, ldv);
      RunSoftmaxStep(step);

      if (stream) {
        switch (FastElem(Vx, sc.kpre)) {
          case Elem::kF32: StreamPv<Elem::kF32>(sc.s, hrows, fastv, Dv, nk, o.acc, o.acc_stride);
            break;
          case Elem::kF16: StreamPv<Elem::kF16>(sc.s, hrows, fastv, Dv, nk, o.acc, o.acc_stride);
            break;
          default: StreamPv<Elem::kBF16>(sc.s, hrows, fastv, Dv, nk, o.acc, o.acc_stride);
            break;
        }
      } else if (!full && v_bad) {  // v_bad: see AnyNonFinite above
        PvMasked(sc.s, hrows, sc.vis, nq, sc.v, vs, ldv, nk, o.acc, o.acc_stride);
#if defined(OPENFIA_ATTEND_BF16DOT)
      } else if (dot) {
        PvDot(sc.s, hrows, sc.vp, vs, ldv, nk, o.acc, o.acc_stride);
#endif
      } else {
        Pv(sc.s, hrows, sc.v, vs, ldv, nk, o.acc, o.acc_stride);
      }
    }
  }
}

// Whether row r's accumulators (ld floats, zero past d_v) hold a value that is not finite while
// its running maximum is finite (a row whose scores hold a NaN has m = NaN).
inline bool RowAccNonFinite(const RowStates& out, int64_t r, int64_t ld) {
  return std::isfinite(out.m[r]) && AnyNonFinite(out.acc + r * out.acc_stride, 1, ld);
}

// Runs a work item, run(pscale), whose rows (out: `rows` states, accumulators of ld floats) the
// run resets and fills. The fp32 P V sums of a row can pass FLT_MAX while its output, their
// mean, is an ordinary number (values near the bf16 / fp32 maximum under probabilities near 1;
// the reference sums in double). Where a row's accumulators came out non-finite the item runs
// again with every probability times 2^-64 (SoftmaxStep::pscale), and each such row that comes
// out finite leaves normalized: acc / l, l = 1 and m + log l (computed in double, the 2^-64
// taken back), the same output and lse and a state the runner merges like any other. Other
// rows keep the first run's bits (a non-finite value meeting a probability the scaling took
// below fp32's range would turn an infinity into a NaN). f16 probabilities cannot take the
// scaling, and their values (f16, or int8 dequantized to f16) cannot overflow the sums.
template <class Run>
inline void RunRerunningOverflow(const Problem& p, const RowStates& out, int64_t rows, int64_t ld,
                                 Run run) {
  run(1.f);
  if (p.q.elem == Elem::kF16) return;
  const int64_t st = out.acc_stride;
  int64_t first = 0;
  while (first < rows && !RowAccNonFinite(out, first, ld)) ++first;
  if (first == rows) return;
  // The first run's states, to restore the rows the rerun does not make finite (without the
  // memory the first run stands).
  const SpareFloats keep(rows * (ld + 3));
  if (keep.data() == nullptr) return;
  float* km = keep.data();
  float* kl = km + rows;
  float* kbad = kl + rows;
  float* kacc = kbad + rows;
  for (int64_t r = 0; r < rows; ++r) {
    km[r] = out.m[r];
    kl[r] = out.l[r];
    kbad[r] = r >= first && RowAccNonFinite(out, r, ld) ? 1.f : 0.f;
    std::memcpy(kacc + r * ld, out.acc + r * st, sizeof(float) * ld);
  }
  run(0x1p-64f);
  for (int64_t r = 0; r < rows; ++r) {
    float* a = out.acc + r * st;
    const float l = out.l[r];
    if (kbad[r] != 0.f && std::isfinite(out.m[r]) && std::isfinite(l) && l > 0.f &&
        !AnyNonFinite(a, 1, ld)) {
      const double lse = static_cast<double>(out.m[r]) + std::log(static_cast<double>(l)) +
                         64.0 * 0.69314718055994530942;  // log(l 2^64)
      if (NormalizeRowState(a, l, lse, ld, a, &out.m[r], &out.l[r])) continue;
    }
    out.m[r] = km[r];
    out.l[r] = kl[r];
    std::memcpy(a, kacc + r * ld, sizeof(float) * ld);
  }
}

// Item w through the tile loop.
inline void AttendItem(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  RunRerunningOverflow(p, out, w.rows(), sc.dv_pad,
                       [&](float pscale) { AttendImpl(p, w, sc, out, pscale); });
}

// Every target's tile_<isa> kernel: its supports and run entries.
inline const char* TileSupports(const Problem& p, const WorkItem* w) {
  if (const char* why = TileLoopSupports(p)) return why;
  return w != nullptr ? OneTokenPerSparseItem(p, *w) : nullptr;
}
inline void TileRun(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out) {
  AttendItem(p, w, TileOf(scratch), out);
}

// y[i] = f(x[i]) over whole vectors, the tail one element at a time (the tables' exp / exp_p
// entries, for tests).
template <class F>
inline void MapArray(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + W <= n; i += W) V::Store(y + i, f(V::Load(x + i)));
  for (; i < n; ++i) {
    alignas(64) float t[W] = {};
    t[0] = x[i];
    V::Store(t, f(V::Load(t)));
    y[i] = t[0];
  }
}
inline void ExpArray(const float* x, float* y, int64_t n) {
  MapArray(x, y, n, [](typename V::T v) { return V::Exp(v); });
}
inline void ExpPArray(const float* x, float* y, int64_t n) {
  MapArray(x, y, n, [](typename V::T v) { return V::template Exp<true>(v); });
}
