// openfia internal: the decode kernels (decode_avx2, decode_avx512, decode_avx512bf16): a few
// query rows per KV head (a GQA group at one or a few queries) over long key ranges, where every
// key / value byte serves only those rows. Included (no include guard) inside a target's namespace
// after attend-inl.h (V, the resolver, LoadElem, RunSoftmaxStep); kernels_avx512bf16.cc defines
// OPENFIA_DECODE_DOT first, which brings in avx512/decode_dot-inl.h for the VDPBF16PS products,
// and kernels_avx2.cc OPENFIA_DECODE_INT, which brings in avx2/decode_int_avx2-inl.h for
// VPMADDWD products of int8 / int4 caches.
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
// at each step of the products.

constexpr int64_t kDecMaxD = 1024;
constexpr int kDecMaxR = 16;  // rows per KV head
constexpr int64_t kDecRun = 16;    // keys per P V step of the token-major walk
constexpr int64_t kDecAhead = 32;  // tokens its prefetch stream runs ahead

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
// fp32 P of one head [2][16][TN], P' as int16 [16][TN / 2]; per-key parameters [4][TN]; K and V
// rows staged as bf16 [TN][(D + Dv) / 2]; per-channel parameters [2][D + Dv]; three per-row sums
// [3][rows]; per KV head, whether it runs the reference's element order [rows]; the integer
// query pieces' scales and corrections [3][rows] (the pieces themselves in the bf16 packs' place).
struct DecScratch {
  float *q, *S, *P, *pb, *kpar, *kstage, *vstage, *kchan, *vchan, *aux, *qsum, *crow, *exact,
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
  s->vstage = take(TNk * Dv / 2);
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
    for (int64_t n = 0; n < t->nk; ++n) {
      const Operand& o = pre[n] ? kv.prefix : kv.cache;
      const DecFmt f = kv.dequant.kind == Dequant::Kind::kNone
                           ? DecFloatFmt(o.elem)
                           : o.elem == Elem::kI8 ? DecFmt::kI8 : DecFmt::kI4;
      row[n] = static_cast<const char*>(base[n]) + DecBytes(f, off[n]);
      step[n] = DecBytes(f, pre[n] ? o.sh : o.Sh(w.b));
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
        pr = cvt::RoundToElem(t[0], it.qe) * vsc[n];
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
  SoftmaxStep st;
  st.s = S;
  st.lds = kTileKeys;
  st.rows = it.R;
  st.nk = t.nk;
  st.npad = kTileKeys;
  st.scale = it.scale;
  st.store.kind = SoftmaxStore::Kind::kRounded;
  st.store.pe = it.qe;
  st.store.pf = P;
  st.store.ldpf = kTileKeys;
  st.exact = true;
  st.m = o.m;
  st.l = o.l;
  st.acc = o.acc;
  st.acc_stride = o.acc_stride;
  st.ldv = it.ldv;
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

// int4 K rows staged for VDPBF16PS hold x + kDecI4Bias (decode_dot-inl.h); the bias comes out of
// the sums with the offsets.
constexpr float kDecI4Bias = 136.f;

// Integer products of int8 / int4 K and V (avx512/decode_dot-inl.h: VPDPBUSD / VPDPWSSD;
// avx2/decode_int_avx2-inl.h: VPMADDWD), each file with the same hooks:
//   DecIntScoresFit(it), DecIntValuesFit(it)   whether the item's keys / values may take them
//                                              (the first before the query rows are read)
//   DecIntQueryBytes(Rp, D)                    bytes of one head's integer query rows
//   DecIntQuery(kf, qf, Rp, D, qp, sigma, corr)  those rows (false: keep the other products)
//   DecIntQk(it, qp, sigma, corr, t, x, S, pf, stage)   S = Q K^T of head x
//   DecIntQuantP(P, s, o, npad, p, sigma, sum)          a row's P' as 15-bit integers
//   DecIntPv(it, p, sigma, t, x, acc, lda, pf, stage)   acc += sigma P V of head x
#if defined(OPENFIA_DECODE_DOT)
#include "engine/kernels/avx512/decode_dot-inl.h"
#define OPENFIA_DECODE_INTS 1
#elif defined(OPENFIA_DECODE_INT)
#include "engine/kernels/avx2/decode_int_avx2-inl.h"
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
  st.m = o.m;
  st.l = o.l;
  st.acc = o.acc;
  st.acc_stride = o.acc_stride;
  st.ldv = it.ldv;
  return st;
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
// declares.
inline void DecodeRunItem(const Problem& p, const WorkItem& w, void* scratch,
                          const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  DecScratch sc;
  DecScratchFloats(p, &sc, static_cast<float*>(scratch));
  DecItem it;
  it.p = &p;
  it.w = &w;
  DecSideOf(p.k, p.q.elem, &it.ks);
  DecSideOf(p.v, p.q.elem, &it.vs);
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
    const bool has_next = t0 + TNk < w.j1;
    if (has_next) DecResolveTile(p, w, t0 + TNk, &tiles[cur ^ 1]);
    pf.Start(has_next && !token_major ? &tiles[cur ^ 1] : nullptr, nh, kbytes, vbytes);
    const int64_t nk = t.nk, npad = (nk + V::kW - 1) / V::kW * V::kW;
#if defined(OPENFIA_DECODE_DOT)
    const int64_t klines = (kbytes + 63) / 64, vlines = (vbytes + 63) / 64;
    if (token_major) {
      stream.Tile(&t, has_next ? &tiles[cur ^ 1] : nullptr);
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
    for (int64_t x = 0; x < nh; ++x) {
      const int64_t hk = w.hk + x;
      float* S = sc.S + (token_major ? x * Rp * TNk : 0);
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
        DecIntQk(it, qint + x * qint_bytes, sc.qsig + x * Rp, sc.qcorr + x * 2 * Rp, t, x, S, pf,
                 sc.kstage);
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
      // fp32 products on the P of the softmax (rounded to the query dtype), in channel order.
      const auto fma_pv = [&] {
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
#if defined(OPENFIA_DECODE_DOT)
      if (token_major) {
        pv_later[x] = true;
        continue;
      }
#endif
#if defined(OPENFIA_DECODE_INTS)
      if (it.int_pv) {  // integer P' and values
        int16_t* p16 = reinterpret_cast<int16_t*>(sc.pb);
        float sig[kDecMaxR], psum[kDecMaxR];
        bool ok = true;
        for (int64_t r = 0; r < R && ok; ++r)
          ok = DecIntQuantP(P + r * TNk, it.vs.tok() ? vsc : nullptr,
                            it.vs.tok() && it.vs.off ? vof : nullptr, npad, p16 + r * TNk,
                            &sig[r], &psum[r]);
        if (ok) {
          // The offsets' sum sum_n P' o (per token), or sum(P) (per channel).
          if (v_aux)
            for (int64_t r = 0; r < R; ++r) ax[r] += psum[r];
          DecIntPv(it, p16, sig, t, x, o.acc, o.acc_stride, pf, sc.vstage);
        } else {  // a P' that is not finite or too small for the integer form
          in_channel_order(o, fma_pv);
        }
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
      fma_pv();
    }
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

// The decode kernel's supports entry: the problem-level rules, then the item's.
inline const char* DecodeSupports(const Problem& p, const WorkItem* w) {
  return w == nullptr ? DecodeProblemWhy(p) : DecodeItemWhy(p, *w);
}
#undef OPENFIA_DECODE_INTS
