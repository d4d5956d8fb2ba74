// openfia internal: the decode kernels' pieces below the item (generic/decode-inl.h): formats and
// what the kernels take, the scratch, tile rows and their prefetch, per-key and per-channel
// antiquant parameters, the fp32 products, the softmax step and the reference-order corners.
// Included (no include guard) inside a target's namespace after attend_base-inl.h / attend-inl.h
// and before the target's product file (if any) and decode-inl.h.

constexpr int64_t kDecMaxD = 1024;
constexpr int kDecMaxR = 16;  // rows per KV head
constexpr int64_t kDecRun = 16;    // keys per P V step of the token-major walk
constexpr int64_t kDecAhead = 32;  // tokens its prefetch stream runs ahead (8, 16: slower)

enum class DecFmt : uint8_t { kF32, kF16, kBF16, kI8, kI4 };

inline int64_t DecBytes(DecFmt f, int64_t elems) {
  switch (f) {
    case DecFmt::kF32: return 4 * elems;
    case DecFmt::kF16:
    case DecFmt::kBF16: return 2 * elems;
    case DecFmt::kI8: return elems;
    default: return elems / 2;
  }
}

// How the kernel reads one of K / V.
struct DecSide {
  DecFmt fmt = DecFmt::kBF16;
  const Dequant* dq = nullptr;  // int8 / int4 only
  bool chan = false;            // per-channel parameters (of a head)
  bool off = false;             // with an offset
  bool quant() const { return dq != nullptr; }
  bool tok() const { return dq != nullptr && !chan; }  // parameters per key
};

inline DecFmt DecFloatFmt(Elem e) {
  return e == Elem::kF32 ? DecFmt::kF32 : e == Elem::kF16 ? DecFmt::kF16 : DecFmt::kBF16;
}

inline const char* DecSideOf(const KvOperand& kv, Elem qe, DecSide* s) {
  const Operand& o = kv.cache;
  if (o.sd != 1 || o.d_split != 0) return "a key / value layout with strided or split channels";
  const Dequant& dq = kv.dequant;
  if (dq.kind == Dequant::Kind::kNone) {
    if (o.elem != qe) return "a float key / value dtype other than the query's";
    if (kv.prefix.present() &&
        (kv.prefix.elem != qe || kv.prefix.sd != 1 || kv.prefix.d_split != 0 ||
         kv.prefix_dequant.kind != Dequant::Kind::kNone))
      return "a shared prefix stored unlike the cache";
    s->fmt = DecFloatFmt(qe);
    return nullptr;
  }
  if (kv.prefix.present()) return "an antiquant cache with a shared prefix";
  if (o.elem != Elem::kI8 && o.elem != Elem::kI4) return "an antiquant storage other than int8 / int4";
  if (dq.kind == Dequant::Kind::kPerTile || dq.d_group != 0) return "per-tile antiquant";
  s->chan = dq.sd != 0;
  if (s->chan && (dq.sb != 0 || dq.ss != 0))
    return "antiquant parameters per channel and token";
  if (o.elem == Elem::kI4 && ((o.sb | o.sh | o.ss) & 1) != 0)
    return "int4 rows that do not start on a byte";
  if (!IsFloatElem(dq.scale_elem) || (dq.offset != nullptr && !IsFloatElem(dq.offset_elem)))
    return "an antiquant scale or offset that is not a float";
  s->fmt = o.elem == Elem::kI8 ? DecFmt::kI8 : DecFmt::kI4;
  s->dq = &dq;
  s->off = dq.offset != nullptr;
  return nullptr;
}

// The problem-level part of the decode kernels' support.
inline const char* DecodeProblemWhy(const Problem& p) {
  if (p.full_quant || !p.key_offset.empty() || p.k2.cache.present())
    return "full quantization or sparse keys";
  if (p.d_rope > 0 || p.pse != nullptr || p.mask != nullptr) return "rope, pse or a mask";
  if (!IsFloatElem(p.q.elem)) return "a query dtype other than float32, float16 or bfloat16";
  if (p.d_qk % 16 != 0 || p.d_v % 16 != 0 || p.d_qk > kDecMaxD || p.d_v > kDecMaxD)
    return "head sizes that are not multiples of 16 up to 1024";
  DecSide k, v;
  if (const char* w = DecSideOf(p.k, p.q.elem, &k)) return w;
  if (const char* w = DecSideOf(p.v, p.q.elem, &v)) return w;
  return nullptr;
}

// Query rows of one KV head as the products read them: R rounded up to a row block.
inline int64_t DecRowsPad(int64_t R) { return R <= 2 ? R : (R + 3) / 4 * 4; }

// The decode kernels' scratch (Kernel::scratch), in floats: query rows [rows][D] (fp32) and their
// two bf16 packs [2][rows][D / 2], with rows = MaxItemRows(p) >= n_hk * DecRowsPad(R); scores and
// fp32 P of one head [2][16][TN], P' as int16 [16][TN / 2]; per-key parameters [4][TN]; K rows
// staged as bf16 [TN][D / 2]; per-channel parameters [2][D + Dv]; three per-row sums
// [3][rows]; per KV head, whether it runs the reference's element order [rows]; the integer
// query pieces' scales and corrections [3][rows] (the pieces themselves in the bf16 packs' place).
struct DecScratch {
  float *q, *S, *P, *pb, *kpar, *kstage, *kchan, *vchan, *aux, *qsum, *crow, *exact,
      *qsig;
  int32_t* qcorr;
  uint32_t* qdot;
};
inline int64_t DecScratchFloats(const Problem& p, DecScratch* s, float* base) {
  const int64_t rows = MaxItemRows(p), D = p.d_qk, Dv = p.d_v, TNk = kTileKeys;
  float* f = base;
  const auto take = [&](int64_t n) {
    float* r = f;
    f += (n + 15) / 16 * 16;  // each part on a cache line
    return r;
  };
  s->q = take(rows * D);
  s->qdot = reinterpret_cast<uint32_t*>(take(rows * D));
  // Scores and P of every head of an item at once (the token-major pass keeps them all).
  s->S = take(std::max<int64_t>(kDecMaxR, rows) * TNk);
  s->P = take(std::max<int64_t>(kDecMaxR, rows) * TNk);
  s->pb = take(kDecMaxR * TNk / 2);
  s->kpar = take(4 * TNk);
  s->kstage = take(TNk * D / 2);
  s->kchan = take(2 * D);
  s->vchan = take(2 * Dv);
  s->aux = take(rows);
  s->qsum = take(rows);
  s->crow = take(rows);
  s->exact = take(rows);
  s->qsig = take(rows);
  s->qcorr = reinterpret_cast<int32_t*>(take(2 * rows));
  return f - base;
}
inline ScratchSize DecodeScratchSize(const Problem& p) {
  DecScratch s;
  float* zero = nullptr;
  ScratchSize z;
  z.bytes = 4 * DecScratchFloats(p, &s, zero);
  return z;  // every part is written before it is read
}

// Whether every per-channel parameter of head h is finite (a head with one that is not runs the
// reference's element order, which the factored form does not reproduce).
inline bool DecChanFinite(const DecSide& s, int64_t D, int64_t h) {
  if (!s.quant() || !s.chan) return true;
  const Dequant& dq = *s.dq;
  for (int64_t d = 0; d < D; ++d) {
    const int64_t i = dq.Index(0, h, 0, d);
    if (!std::isfinite(cvt::Load(dq.scale, dq.scale_elem, i))) return false;
    if (dq.offset != nullptr && !std::isfinite(cvt::Load(dq.offset, dq.offset_elem, i)))
      return false;
  }
  return true;
}

inline const char* DecodeItemWhy(const Problem& p, const WorkItem& w) {
  const int64_t R = w.head_rows();
  if (R < 1 || R > kDecMaxR) return "more than 16 rows per KV head";
  if (w.n_hk * DecRowsPad(R) > MaxItemRows(p)) return "more rows than the scratch holds";
  const ItemOrigins o = OriginsOf(p, w.b);
  if (w.j0 < w.j1 && ((w.i1 - 1) - o.pre > w.j0 || w.j1 - 1 > w.i0 + o.next))
    return "a band that cuts into the item's keys";
  return nullptr;
}

// W channels [d, d + W) of a row of format F as fp32 (exact for every format).
template <DecFmt F>
__attribute__((always_inline)) inline typename V::T DecLoad(const char* row, int64_t d) {
  if constexpr (F == DecFmt::kF32) return V::Load(reinterpret_cast<const float*>(row) + d);
  else if constexpr (F == DecFmt::kF16) return V::LoadF16(reinterpret_cast<const uint16_t*>(row) + d);
  else if constexpr (F == DecFmt::kBF16) return V::LoadBF16(reinterpret_cast<const uint16_t*>(row) + d);
  else if constexpr (F == DecFmt::kI8) return V::LoadI8(reinterpret_cast<const int8_t*>(row) + d);
  else return V::LoadI4(reinterpret_cast<const uint8_t*>(row) + d / 2);
}

// ---- the per-tile state ---------------------------------------------------------------------

// Where the keys of one tile live: head hk's K / V row of key n (bytes), the bytes from one KV
// head to the next, and the antiquant coordinates of each row.
struct DecTileRows {
  const char* k[kTileKeys];
  const char* v[kTileKeys];
  int64_t kstep[kTileKeys], vstep[kTileKeys];
  int64_t kc[2 * kTileKeys], vc[2 * kTileKeys];
  int64_t jt0 = 0, nk = 0;
};

inline void DecResolveTile(const Problem& p, const WorkItem& w, int64_t t0, DecTileRows* t) {
  t->jt0 = std::max(t0, w.j0);
  t->nk = std::min(t0 + kTileKeys, w.j1) - t->jt0;
  const void* base[kTileKeys];
  int64_t off[kTileKeys];
  uint8_t pre[kTileKeys];
  const auto side = [&](const KvOperand& kv, const char** row, int64_t* step, int64_t* c) {
    ResolveItemKeys(p, kv, kv, w, w.hk, t->jt0, t->nk, base, off, pre, c);
    const auto fmt = [&](const Operand& o) {
      return kv.dequant.kind == Dequant::Kind::kNone ? DecFloatFmt(o.elem)
             : o.elem == Elem::kI8                   ? DecFmt::kI8
                                                     : DecFmt::kI4;
    };
    // Bytes of e elements as (e << up) >> down, per source (offsets of rows are whole bytes).
    const auto shifts = [](DecFmt f, int* up, int* down) {
      *up = f == DecFmt::kF32 ? 2 : f == DecFmt::kI8 || f == DecFmt::kI4 ? 0 : 1;
      *down = f == DecFmt::kI4 ? 1 : 0;
    };
    const DecFmt fc = fmt(kv.cache);
    int uc, dc, up = 0, dp = 0;
    shifts(fc, &uc, &dc);
    const int64_t sc = DecBytes(fc, kv.cache.Sh(w.b));
    int64_t sp = 0;
    if (kv.prefix.present()) {
      const DecFmt fp = fmt(kv.prefix);
      shifts(fp, &up, &dp);
      sp = DecBytes(fp, kv.prefix.sh);
    }
    for (int64_t n = 0; n < t->nk; ++n) {
      const bool q = pre[n] != 0;
      row[n] = static_cast<const char*>(base[n]) + ((off[n] << (q ? up : uc)) >> (q ? dp : dc));
      step[n] = q ? sp : sc;
    }
  };
  side(p.k, t->k, t->kstep, t->kc);
  side(p.v, t->v, t->vstep, t->vc);
}

// A prefetch stream into L2 over the rows of the next tile in token order (every head's row of a
// token, then the next token), issued a few lines at each tick of the products (a burst of a
// whole tile would hold every fill buffer): the lines of the next tile spread evenly over the
// ticks the current one takes (counted on the tile before; the first tile guesses).
struct DecPrefetch {
  const DecTileRows* t = nullptr;
  int64_t n = 0, x = 0, n_hk = 1;
  int64_t kbytes = 0, vbytes = 0;
  bool v = false;
  const char* cur = nullptr;
  const char* end = nullptr;
  int64_t per_tick = 1;
  int64_t ticks = 0, last_ticks = 0;  // ticks of the current and of the previous tile

  void Start(const DecTileRows* tile, int64_t heads, int64_t kb, int64_t vb) {
    t = tile;
    n_hk = heads;
    kbytes = kb;
    vbytes = vb;
    n = x = 0;
    v = false;
    if (ticks > 0) last_ticks = ticks;
    ticks = 0;
    const int64_t lines = tile == nullptr ? 0 : tile->nk * heads * ((kb + 63) / 64 + (vb + 63) / 64);
    const int64_t expect = last_ticks > 0 ? last_ticks : 8 * heads;
    per_tick = (lines + expect - 1) / expect;
    Run();
  }
  // [cur, end): token n from head x on, of K then V (a token's heads in one run where they are
  // contiguous).
  __attribute__((always_inline)) void Run() {
    cur = end = nullptr;
    if (t == nullptr || n >= t->nk) return;
    const char* row = v ? t->v[n] : t->k[n];
    const int64_t step = v ? t->vstep[n] : t->kstep[n], bytes = v ? vbytes : kbytes;
    cur = row + x * step;
    const bool whole = step == bytes;
    end = cur + (whole ? (n_hk - x) * bytes : bytes);
    if (whole) x = n_hk - 1;
  }
  // Inlined into the products' loops: a call there would spill every vector accumulator.
  __attribute__((always_inline)) void Tick() {
    ++ticks;
    int64_t lines = per_tick;
    while (lines > 0 && cur != nullptr) {
      const char* c = cur;  // a local: the prefetch loop keeps it in a register
      for (; lines > 0 && c < end; --lines, c += 64) __builtin_prefetch(c, 0, 2);
      cur = c;
      if (cur >= end) {
        if (++x == n_hk) {
          x = 0;
          if (v) {
            v = false;
            ++n;
          } else {
            v = true;
          }
        }
        Run();
      }
    }
  }
};

// A prefetch stream into L2 that runs a fixed distance ahead of a token-major walk: the tokens
// of [this tile's K, its V, the next tile's K] in order, every head's row of a token (one run
// where a token's heads are contiguous), a few lines per step of the products.
struct DecStream {
  const DecTileRows* t = nullptr;
  const DecTileRows* next = nullptr;
  int64_t nh = 1, kbytes = 0, vbytes = 0;
  int64_t u = 0;  // the token being issued (0 = this tile's first key)
  int64_t c = 0;  // bytes of it issued, over its heads

  // Moves to tile `tile` (followed by `after`, or nullptr), keeping what the last tile issued of it.
  void Tile(const DecTileRows* tile, const DecTileRows* after) {
    const int64_t done = t == nullptr ? 0 : 2 * t->nk;
    if (t != nullptr && u >= done) {
      u -= done;
    } else {
      u = 0;
      c = 0;
    }
    t = tile;
    next = after;
  }
  // Issues up to `lines` lines, not past token u_end.
  void Issue(int64_t lines, int64_t u_end) {
    while (lines > 0 && u < u_end) {
      const DecTileRows* tt = t;
      bool v = false;
      int64_t n = u;
      if (n >= t->nk) {
        n -= t->nk;
        v = true;
        if (n >= t->nk) {
          n -= t->nk;
          v = false;
          tt = next;
        }
      }
      if (tt == nullptr || n >= tt->nk) return;
      const char* row = v ? tt->v[n] : tt->k[n];
      const int64_t bytes = v ? vbytes : kbytes, step = v ? tt->vstep[n] : tt->kstep[n];
      const int64_t total = nh * bytes;
      if (step == bytes) {
        for (; lines > 0 && c < total; c += 64, --lines) __builtin_prefetch(row + c, 0, 2);
      } else {
        for (; lines > 0 && c < total; c += 64, --lines)
          __builtin_prefetch(row + c / bytes * step + c % bytes, 0, 2);
      }
      if (c >= total) {
        c = 0;
        ++u;
      }
    }
  }
};

// The item's constants.
struct DecItem {
  const Problem* p;
  const WorkItem* w;
  DecSide ks, vs;
  int64_t R, nh, D, Dv, ldv;
  // A scale <= 0 multiplies the scores as they are computed (prescale), so that the padding's
  // -inf stays -inf (-inf x 0 is NaN, -inf x -s is +inf); the softmax then takes them as they are.
  bool prescale = false;
  float raw_scale = 1.f;
  float scale;
  Elem qe;
  bool dot_qk = false, dot_pv = false;
  bool int_qk = false;  // int8 / int4 keys by VPDPBUSD (decode_dot-inl.h)
  bool int_pv = false;  // int8 / int4 values by VPDPWSSD (decode_dot-inl.h)
  float pscale = 1.f;    // SoftmaxStep::pscale of every step (RunRerunningOverflow)
};

// Per-key parameters of head h (per token, head or tensor; 1, 0 for a float side) of the tile.
inline void DecKeyParams(const DecSide& s, const int64_t* c, int64_t nk, int64_t h, float* sc,
                         float* of) {
  if (!s.quant()) {
    for (int64_t n = 0; n < kTileKeys; ++n) sc[n] = 1.f, of[n] = 0.f;
    return;
  }
  const Dequant& dq = *s.dq;
  for (int64_t n = nk; n < kTileKeys; ++n) sc[n] = of[n] = 0.f;  // padding keys: P' = 0
  const int64_t hb = dq.Index(0, h, 0, 0);
  if (dq.scale_elem == Elem::kF32 && (!s.off || dq.offset_elem == Elem::kF32)) {
    const float* sp = static_cast<const float*>(dq.scale) + hb;
    if (!s.off) {
      for (int64_t n = 0; n < nk; ++n) sc[n] = sp[c[2 * n] * dq.sb + c[2 * n + 1] * dq.ss];
      std::fill(of, of + nk, 0.f);
      return;
    }
    const float* op = static_cast<const float*>(dq.offset) + hb;
    for (int64_t n = 0; n < nk; ++n) {
      const int64_t i = c[2 * n] * dq.sb + c[2 * n + 1] * dq.ss;
      sc[n] = sp[i];
      of[n] = op[i];
    }
    return;
  }
  for (int64_t n = 0; n < nk; ++n) {
    const int64_t i = hb + c[2 * n] * dq.sb + c[2 * n + 1] * dq.ss;
    sc[n] = cvt::Load(dq.scale, dq.scale_elem, i);
    of[n] = s.off ? cvt::Load(dq.offset, dq.offset_elem, i) : 0.f;
  }
}

// Whether x[0, n) are all finite (x - x is 0 for a finite x, NaN otherwise).
inline bool DecFinite(const float* x, int64_t n) {
  constexpr int W = V::kW;
  typename V::T acc = V::Zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const typename V::T v = V::Load(x + i);
    acc = V::Add(acc, V::Sub(v, v));
  }
  float r = V::ReduceSum(acc);
  for (; i < n; ++i) r += x[i] - x[i];
  return r == 0.f;
}

// Per-channel parameters of head h: chan[0, D) scales, chan[D, 2D) offsets.
inline void DecChanParams(const DecSide& s, int64_t D, int64_t h, float* chan) {
  const Dequant& dq = *s.dq;
  for (int64_t d = 0; d < D; ++d) {
    const int64_t i = dq.Index(0, h, 0, d);
    chan[d] = cvt::Load(dq.scale, dq.scale_elem, i);
    chan[D + d] = s.off ? cvt::Load(dq.offset, dq.offset_elem, i) : 0.f;
  }
}

// ---- fp32 products ----------------------------------------------------------------------------

// Row blocks of the fp32 products: RB rows x W / RB keys of W-lane partial sums (one
// SoftmaxReduceRows per block).
constexpr int kDecRB = V::kW >= 4 ? 4 : V::kW;

// s[r * lds + k] = q_r . k_k for r < RB, k < W / RB: q rows fp32 at stride ldq, key rows kr[k] of
// format F (exact values).
template <DecFmt F, int RB>
__attribute__((always_inline)) inline void DecQkBlock(const float* q, int64_t ldq, int64_t D,
                                                      const char* const* kr, float* s,
                                                      int64_t lds) {
  constexpr int W = V::kW, KB = W / RB;
  typename V::T acc[W];
  OPENFIA_UNROLL
  for (int i = 0; i < W; ++i) acc[i] = V::Zero();
  for (int64_t d = 0; d < D; d += W) {
    typename V::T qv[RB];
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) qv[r] = V::Load(q + r * ldq + d);
    OPENFIA_UNROLL
    for (int k = 0; k < KB; ++k) {
      const typename V::T x = DecLoad<F>(kr[k], d);
      OPENFIA_UNROLL
      for (int r = 0; r < RB; ++r) acc[k * RB + r] = V::Fma(qv[r], x, acc[k * RB + r]);
    }
  }
  alignas(64) float t[W];
  if constexpr (W == 1) {
    t[0] = acc[0];
  } else {
    V::Store(t, SoftmaxReduceRows<V>(acc, [](auto a, auto b) { return V::Add(a, b); }));
  }
  OPENFIA_UNROLL
  for (int k = 0; k < KB; ++k)
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) s[r * lds + k] = t[k * RB + r];
}

// S[r][n] = q_r . K_n for the R rows of head x (q fp32 [R padded][ldq], zero rows past R) and the
// tile's keys n < nk (keys past nk read key nk - 1; the caller sets their scores).
template <DecFmt F>
inline void DecQkFma(const DecItem& it, const float* q, int64_t ldq, const DecTileRows& t,
                     int64_t x, float* S, DecPrefetch& pf) {
  constexpr int W = V::kW;
  const int RB = it.R <= 1 ? 1 : it.R <= 2 && W >= 2 ? 2 : kDecRB;
  const int64_t TNk = kTileKeys;
  const char* kr[W];
  for (int64_t n0 = 0; n0 < t.nk; n0 += W / RB) {
    pf.Tick();
    for (int k = 0; k < W / RB; ++k) {
      const int64_t n = std::min(n0 + k, t.nk - 1);
      kr[k] = t.k[n] + x * t.kstep[n];
    }
    for (int64_t r0 = 0; r0 < it.R; r0 += RB) {
      float* s = S + r0 * TNk + n0;
      const float* qr = q + r0 * ldq;
      if constexpr (W >= 4) {
        if (RB == 4) {
          DecQkBlock<F, 4>(qr, ldq, it.D, kr, s, TNk);
          continue;
        }
      }
      if constexpr (W >= 2) {
        if (RB == 2) {
          DecQkBlock<F, 2>(qr, ldq, it.D, kr, s, TNk);
          continue;
        }
      }
      DecQkBlock<F, 1>(qr, ldq, it.D, kr, s, TNk);
    }
  }
}

// acc[r][c] += sum_n P[r][n] v_n[c] for r < RB, channel vectors [c0, c0 + CB): P fp32 [R][ldp],
// value rows vr of format F (exact values), keys n < nk.
template <DecFmt F, int RB, int CB>
__attribute__((always_inline)) inline void DecPvBlock(const float* P, int64_t ldp,
                                                      const char* const* vr, int64_t nk,
                                                      int64_t c0, float* acc, int64_t lda) {
  constexpr int W = V::kW;
  typename V::T a[RB][CB];
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int c = 0; c < CB; ++c) a[r][c] = V::Load(acc + r * lda + c0 + c * W);
  for (int64_t n = 0; n < nk; ++n) {
    typename V::T xv[CB];
    OPENFIA_UNROLL
    for (int c = 0; c < CB; ++c) xv[c] = DecLoad<F>(vr[n], c0 + c * W);
    OPENFIA_UNROLL
    for (int r = 0; r < RB; ++r) {
      const typename V::T pb = V::Set1(P[r * ldp + n]);
      OPENFIA_UNROLL
      for (int c = 0; c < CB; ++c) a[r][c] = V::Fma(pb, xv[c], a[r][c]);
    }
  }
  OPENFIA_UNROLL
  for (int r = 0; r < RB; ++r)
    OPENFIA_UNROLL
    for (int c = 0; c < CB; ++c) V::Store(acc + r * lda + c0 + c * W, a[r][c]);
}

template <DecFmt F, int RB>
inline void DecPvRows(const DecItem& it, const float* P, const char* const* vr, int64_t nk,
                      float* acc, int64_t lda) {
  constexpr int W = V::kW;
  constexpr int CB = V::kW >= 8 ? 4 : 2;
  int64_t c0 = 0;
  for (; c0 + CB * W <= it.Dv; c0 += CB * W)
    DecPvBlock<F, RB, CB>(P, kTileKeys, vr, nk, c0, acc, lda);
  for (; c0 < it.Dv; c0 += W) DecPvBlock<F, RB, 1>(P, kTileKeys, vr, nk, c0, acc, lda);
}

// acc (the R rows of head x) += P V over the tile's keys; P fp32 [R][TN].
template <DecFmt F>
inline void DecPvFma(const DecItem& it, const float* P, const DecTileRows& t, int64_t x,
                     float* acc, int64_t lda, DecPrefetch& pf) {
  constexpr int RB = V::kW >= 16 ? 4 : V::kW >= 8 ? 2 : 4;
  const char* vr[kTileKeys];
  for (int64_t n = 0; n < t.nk; ++n) vr[n] = t.v[n] + x * t.vstep[n];
  int64_t r0 = 0;
  for (; r0 + RB <= it.R; r0 += RB) {
    pf.Tick();
    DecPvRows<F, RB>(it, P + r0 * kTileKeys, vr, t.nk, acc + r0 * lda, lda);
  }
  for (; r0 < it.R; ++r0) {
    pf.Tick();
    DecPvRows<F, 1>(it, P + r0 * kTileKeys, vr, t.nk, acc + r0 * lda, lda);
  }
}

// sum_n P[n] for n < npad (P fp32, already rounded; 0 past the live keys).
inline float DecSum(const float* P, int64_t npad) {
  typename V::T s = V::Zero();
  for (int64_t n = 0; n < npad; n += V::kW) s = V::Add(s, V::Load(P + n));
  return V::ReduceSum(s);
}

// ---- the exact corners ------------------------------------------------------------------------

// The softmax step of `rows` rows of scores S (row stride kTileKeys) with states o; the caller
// says where P goes (store) and passes any extra per-row sum (aux).
inline SoftmaxStep DecSoftmaxStep(const DecItem& it, float* S, int64_t rows, int64_t nk,
                                  int64_t npad, const RowStates& o) {
  SoftmaxStep st;
  st.s = S;
  st.lds = kTileKeys;
  st.rows = rows;
  st.nk = nk;
  st.npad = npad;
  st.scale = it.scale;
  st.store.pe = it.qe;
  st.pscale = it.pscale;
  st.State(o, it.ldv);
  return st;
}


// P[r][n] = round(exp(S[r][n] * scale - m[r])) with the exact exp (subnormals kept), times the
// value's per-key scale vs[n]; 0 for a row without a visible key yet.
inline void DecExactP(const DecItem& it, const float* S, const float* m, const float* vsc,
                      int64_t nk, float* P) {
  for (int64_t r = 0; r < it.R; ++r) {
    for (int64_t n = 0; n < kTileKeys; ++n) {
      float pr = 0.f;
      if (n < nk && m[r] != -std::numeric_limits<float>::infinity()) {
        alignas(64) float t[V::kW] = {};
        t[0] = S[r * kTileKeys + n] * it.scale - m[r];
        V::Store(t, V::Exp(V::Load(t)));
        pr = cvt::RoundToElem(t[0] * it.pscale, it.qe) * vsc[n];
      }
      P[r * kTileKeys + n] = pr;
    }
  }
}

// One tile of head x in the reference's element order: each K / V element dequantized as
// (x + o) s rounded as the reference rounds it (LoadElem, Problem::kv_round_elem), fp32
// products, the exact exp. With vfactored a per-channel V stays in the factored form the head's
// other tiles use (its integers here, sum(P) into aux). For tiles whose per-token parameters are
// not all finite, and every tile of a head whose per-channel parameters are not.
inline void DecodeExactTile(const DecItem& it, const DecTileRows& t, int64_t x, float* S,
                            float* P, float* aux, const RowStates& o, bool vfactored) {
  const Problem& p = *it.p;
  const WorkItem& w = *it.w;
  const int64_t hk = w.hk + x, nq = w.i1 - w.i0;
  const TileDq kdq = MakeTileDq(p.k, t.kc, hk, p.kv_round_elem());
  TileDq vdq = MakeTileDq(p.v, t.vc, hk, p.kv_round_elem());
  const bool vf = it.vs.chan && vfactored;
  if (vf) vdq.cache = nullptr;  // the integers
  // LoadElem reads element d of a row at element offset 0 from the row's own start.
  const auto kelem = [&](int64_t n, int64_t d) {
    return LoadElem(p.k.cache, kdq, n, false, t.k[n] + x * t.kstep[n], 0, d);
  };
  const auto velem = [&](int64_t n, int64_t d) {
    return LoadElem(p.v.cache, vdq, n, false, t.v[n] + x * t.vstep[n], 0, d);
  };
  std::vector<float> q(it.D);  // a rare path: the reference's query row
  for (int64_t r = 0; r < it.R; ++r) {
    const int64_t h = hk * p.group() + w.g0 + r / nq, row = p.q_begin[w.b] + w.i0 + r % nq;
    LoadRowF32(p.q, p.q.Base(w.b), p.q.Offset(w.b, h, row, 0), it.D, q.data());
    for (int64_t n = 0; n < kTileKeys; ++n) {
      float acc = 0.f;
      if (n < t.nk)
        for (int64_t d = 0; d < it.D; ++d) acc += q[d] * kelem(n, d);
      if (it.prescale) acc *= it.raw_scale;
      S[r * kTileKeys + n] = n < t.nk ? acc : -std::numeric_limits<float>::infinity();
    }
  }
  SoftmaxStep st = DecSoftmaxStep(it, S, it.R, t.nk, kTileKeys, o);
  st.store.pf = P;
  st.store.ldpf = kTileKeys;
  st.exact = true;
  st.aux = aux;
  RunSoftmaxStep(st);
  for (int64_t r = 0; r < it.R; ++r) {
    float* a = o.acc + r * o.acc_stride;
    for (int64_t n = 0; n < t.nk; ++n) {
      const float pn = P[r * kTileKeys + n];
      // A per-channel V in the other tiles' form: x, and sum(P).
      for (int64_t d = 0; d < it.Dv; ++d) a[d] += pn * velem(n, d);
      if (vf) aux[r] += pn;
    }
  }
}

alignas(64) inline const uint16_t kDecZeroRow[kDecMaxD] = {};

// Largest |P'| of a tile below which the integer P V forms (DecIntQuantP) are not used: 32767 /
// max |P'| stays finite (from 2^-113 on) and sigma keeps at least 22 bits.
constexpr float kDecPMin = 0x1p-112f;

// int4 K rows staged for VDPBF16PS hold x + kDecI4Bias (decode_dot-inl.h); the bias comes out of
// the sums with the offsets.
constexpr float kDecI4Bias = 136.f;
