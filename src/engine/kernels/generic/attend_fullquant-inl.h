// openfia internal: int8 full quantization (int8 query, key and value; docs/semantics.md 1.8) on
// the engine. Included by attend-inl.h (inside the per-target namespace, after
// attend_base-inl.h). The driver FqRun takes its products, packing and per-row element
// operations from an Ops class: FqScalarOps here (every target), FqAvx2Ops in
// fullquant_avx2-inl.h (the x86 tables).
//
// The same step-by-step fp16 emulation as the reference's FullQuantRow:
//   S = fp16(fp16(clip(float(Q.K) * ds1, +-65504)) * fp16(scale)) [+ pse, fp16 add]
//   m = max over every visible key of the row (NaN-propagating)
//   E = fp16(exp(S - m)); l = sum E; P8 = clip(rne(fp16(E * fp16(qs1))), -128, 127)
//   out = float(sum P8 * V) * ds2 / fp16(l)
// Every step is exact or the reference's rounding in the reference's order, so the output is
// bitwise the reference's (test FullQuant.EngineBitwiseEqualsReference):
//   - Q.K and P8.V are integer sums of int16 pair products (int8 values widened once per tile,
//     two channels or two keys per 32-bit word: one VPMADDWD does 16 products on AVX2), summed
//     in int32: exact, |q k| <= 2^14 per channel. A tile adds at most 64 * 2^14 to a P8.V sum,
//     and the int32 sums move into the int64 row sums every kFqFlushTiles tiles, long before
//     an int32 could overflow (the reference sums in int64).
//   - l: every E is an fp16 value in [0, 1], so a multiple of 2^-24: l is kept as an integer
//     count of 2^-24 (exact; the reference's double sum is exact too, in any order).
//   - exp: std::exp (expf) per element, or a vector exp whose fp16 rounding is used only where
//     it provably equals that of expf (fullquant_avx2-inl.h FqExpF16).
// The max is over all visible keys at once (the reference's decision), so each KV head of an
// item makes two passes over its keys: the first computes S and finds m, the second accumulates,
// reading S as the first pass kept it (fp16 bits, TileScratch::fq_sv, at most kFqScoreBytes
// per worker) or, for longer key ranges, recomputing it. The plan never splits full-quant items
// (plan.cc).
//
// Layouts (int16 elements, TileScratch::fq_*): query rows q[r][dq] with dq = dk rounded up
// to 2 (zero channel padding); the K tile kp[c2][n][2] = channels 2 c2, 2 c2 + 1 of key n for
// n < round_up(nk, 8) (zero keys past nk); the V tile vp[n2][d][2] = channel d of keys 2 n2,
// 2 n2 + 1 for d < dvq = round_up(d_v, 16) (zeros past d_v and past key nk); P8 p[r][n].

constexpr int64_t kFqFlushTiles = 1024;  // tiles between int32 -> int64 moves of the P8.V sums
constexpr float kFqF16Max = 65504.f;

inline float F16Round(float x) { return cvt::RoundToElem(x, Elem::kF16); }

// The per-call constants of the fp16 emulation.
struct FqConst {
  float ds1;      // dequant_scale1 as the golden's "float19" (low 13 mantissa bits cleared)
  float scale16;  // fp16(scale)
  float qs1_16;   // fp16(quant_scale1)
};

// S from the integer score (and the pse bias, nullptr when absent).
inline float FqScore(int32_t acc, const FqConst& c, const float* pse) {
  float x = std::clamp(static_cast<float>(acc) * c.ds1, -kFqF16Max, kFqF16Max);
  x = F16Round(F16Round(x) * c.scale16);
  if (pse != nullptr) x = F16Round(x + *pse);
  return x;
}

// The element operations of one row of a tile, one element at a time (exactly the reference's
// FullQuantRow steps). s: integer scores of keys [0, nk); vis: visibility (nullptr: all
// visible); pse: the row's bias per key (nullptr: none).
struct FqScalarRows {
  // The NaN-propagating max of m and the visible S; keep (when not null): S of every visible key
  // as fp16 bits (exact: S is an fp16 value).
  static float RowMax(const int32_t* s, int64_t nk, const uint8_t* vis, const float* pse,
                      const FqConst& c, float m, uint16_t* keep) {
    for (int64_t n = 0; n < nk; ++n) {
      if (vis != nullptr && !vis[n]) continue;
      const float x = FqScore(s[n], c, pse != nullptr ? pse + n : nullptr);
      if (keep != nullptr) keep[n] = cvt::F32ToF16(x);
      m = std::isnan(x) || std::isnan(m) ? std::numeric_limits<float>::quiet_NaN()
                                         : std::max(m, x);
    }
    return m;
  }
  // P8 of keys [0, npad) into p (0 for invisible keys and past nk), E summed into *l24 (units of
  // 2^-24), from the integer scores s (and pse), or from S as kept by RowMax (sv, when s is
  // null). False when an E or P8 is NaN (the row is NaN; p and *l24 are then meaningless).
  static bool RowProbs(const int32_t* s, const uint16_t* sv, int64_t nk, int64_t npad,
                       const uint8_t* vis, const float* pse, const FqConst& c, float m,
                       int64_t* l24, int16_t* p) {
    for (int64_t n = 0; n < npad; ++n) {
      p[n] = 0;
      if (n >= nk || (vis != nullptr && !vis[n])) continue;
      const float x = s != nullptr ? FqScore(s[n], c, pse != nullptr ? pse + n : nullptr)
                                   : cvt::F16ToF32(sv[n]);
      const float e = F16Round(std::exp(x - m));
      const float pq = F16Round(e * c.qs1_16);
      if (std::isnan(e) || std::isnan(pq)) return false;
      *l24 += static_cast<int64_t>(e * 16777216.f);  // e in [0, 1], a multiple of 2^-24
      p[n] = static_cast<int16_t>(std::clamp(std::nearbyint(pq), -128.f, 127.f));
    }
    return true;
  }
};

// kp (see the layout above) from int8 key rows (channel stride sd[n]), keys [0, nk), D channels.
inline void FqPackKScalar(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t D,
                          int16_t* kp) {
  const int64_t dq = (D + 1) / 2 * 2, npad = (nk + 7) / 8 * 8;
  for (int64_t n = 0; n < npad; ++n)
    for (int64_t d = 0; d < dq; ++d)
      kp[((d / 2) * TN + n) * 2 + d % 2] = n < nk && d < D ? rows[n][d * sd[n]] : 0;
}

// vp (see the layout above) from int8 value rows, keys [0, nk), Dv channels of dvq.
inline void FqPackVScalar(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t Dv,
                          int64_t dvq, int16_t* vp) {
  for (int64_t n2 = 0; n2 < (nk + 1) / 2; ++n2)
    for (int64_t t = 0; t < 2; ++t) {
      const int64_t n = 2 * n2 + t;
      for (int64_t d = 0; d < dvq; ++d)
        vp[(n2 * dvq + d) * 2 + t] = n < nk && d < Dv ? rows[n][d * sd[n]] : 0;
    }
}

// Portable products (loops the compiler may vectorize; exact integer arithmetic).
struct FqScalarOps : FqScalarRows {
  static void PackK(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t D,
                    int16_t* kp) {
    FqPackKScalar(rows, sd, nk, D, kp);
  }
  static void PackV(const int8_t* const* rows, const int64_t* sd, int64_t nk, int64_t Dv,
                    int64_t dvq, int16_t* vp) {
    FqPackVScalar(rows, sd, nk, Dv, dvq, vp);
  }
  // s[r][n] = q_r . k_n for r < nr, n < npad (a multiple of 8); rows of q at stride ldq.
  static void Scores(const int16_t* q, int64_t ldq, int64_t nr, const int16_t* kp, int64_t dq,
                     int64_t npad, int32_t* s) {
    Pairs(q, ldq, nr, kp, TN, dq / 2, npad, s, TN, false);
  }
  // acc[r][d] += sum over key pairs n2 < np2 of p[r][2 n2 + t] * v[2 n2 + t][d], d < dvq.
  static void Pv(const int16_t* p, int64_t nr, const int16_t* vp, int64_t dvq, int64_t np2,
                 int32_t* acc) {
    Pairs(p, TN, nr, vp, dvq, np2, dvq, acc, dvq, true);
  }
  // Both products: c[r][n] (+)= sum over k < nk of a[r][2 k + t] * b[k][n][t] (t = 0, 1), for
  // r < nr, n < nc; a at stride lda int16, b at stride ldb pairs, c at stride ldc.
  static void Pairs(const int16_t* a, int64_t lda, int64_t nr, const int16_t* b, int64_t ldb,
                    int64_t nk, int64_t nc, int32_t* c, int64_t ldc, bool acc) {
    for (int64_t r = 0; r < nr; ++r) {
      int32_t* cr = c + r * ldc;
      if (!acc)
        for (int64_t n = 0; n < nc; ++n) cr[n] = 0;
      for (int64_t k = 0; k < nk; ++k) {
        const int32_t x = a[r * lda + 2 * k], y = a[r * lda + 2 * k + 1];
        if (x == 0 && y == 0) continue;
        const int16_t* br = b + k * ldb * 2;
        for (int64_t n = 0; n < nc; ++n) cr[n] += x * br[2 * n] + y * br[2 * n + 1];
      }
    }
  }
};

template <class Ops>
inline void FqRun(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t hrows = w.head_rows(), D = p.d_qk, Dv = p.d_v;
  const int64_t dq = (D + 1) / 2 * 2, dvq = (Dv + 15) / 16 * 16;
  const ItemOrigins org = OriginsOf(p, b);
  const int64_t pre = org.pre, next = org.next;
  const FqConst c{cvt::FromBits(cvt::Bits(p.dequant_scale1) & 0xFFFFE000u),
                  F16Round(static_cast<float>(p.scale)), F16Round(p.quant_scale1)};

  for (int64_t r = 0; r < rows; ++r) {
    out.m[r] = kNegInf;
    out.l[r] = 0.f;
    for (int64_t d = 0; d < out.acc_stride; ++d) out.acc[r * out.acc_stride + d] = 0.f;
  }
  if (w.j0 >= w.j1) return;

  // The int8 query rows widened to int16 (zero channel padding).
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hk = w.hk + r / hrows, rr = r % hrows;
    const int64_t h = hk * G + w.g0 + rr / nq, row = p.q_begin[b] + w.i0 + rr % nq;
    const int8_t* src = static_cast<const int8_t*>(p.q.Base(b));
    const int64_t qo = p.q.Offset(b, h, row, 0);
    int16_t* dst = sc.fq_q + r * dq;
    for (int64_t d = 0; d < dq; ++d) dst[d] = d < D ? src[qo + DOff(p.q, d)] : 0;
  }

  // Where key j of KV head hk lives (int8 rows, one channel stride: EngineSupports).
  const auto resolve = [&](const KvOperand& kv, int64_t hk, int64_t jt0, int64_t nk,
                           const int8_t** row, int64_t* sd) {
    for (int64_t n = 0; n < nk; ++n) {
      const void* base;
      int64_t off;
      uint8_t pre_flag;
      ResolveKey(p, kv, b, hk, jt0 + n, &base, &off, &pre_flag);
      row[n] = static_cast<const int8_t*>(base) + off;
      sd[n] = (pre_flag ? kv.prefix : kv.cache).sd;
    }
  };
  const int8_t* krow[TN];
  const int8_t* vrow[TN];
  int64_t ksd[TN], vsd[TN];

  const int64_t tile0 = w.j0 / TN * TN;
  for (int64_t hx = 0; hx < w.n_hk; ++hx) {
    const int64_t hk = w.hk + hx, r0 = hx * hrows;
    const int16_t* qh = sc.fq_q + r0 * dq;
    // The tiles of this head's keys some row sees: [jt0, jt0 + nk), `full` when no row's band
    // or mask hides one of them; vis (TileVisibility, per query) otherwise.
    struct Tile {
      int64_t jt0, nk, npad;
      bool full;
    };
    const auto tile_at = [&](int64_t t0, Tile* t) {
      const int64_t jt0 = std::max(t0, w.j0), jt1 = std::min(t0 + TN, w.j1);
      if (std::max(w.i0, jt0 - next) > std::min(w.i1 - 1, jt1 - 1 + pre)) return false;
      t->jt0 = jt0;
      t->nk = jt1 - jt0;
      t->npad = (t->nk + 7) / 8 * 8;
      t->full = p.mask == nullptr && (w.i1 - 1) - pre <= jt0 && jt1 - 1 <= w.i0 + next;
      if (!t->full) TileVisibility(p, b, org, w.i0, nq, jt0, t->nk, sc.vis, TN);
      return true;
    };
    // Whether row rr sees none of the tile's keys (its band misses the tile).
    const auto row_out = [&](int64_t rr, const Tile& t) {
      const int64_t i = w.i0 + rr % nq;
      return i + next < t.jt0 || i - pre > t.jt0 + t.nk - 1;
    };
    // The pse bias of row rr for the tile's keys into sc.fq_pse (nullptr when absent).
    const auto pse_row = [&](int64_t rr, const Tile& t) -> const float* {
      if (p.pse == nullptr) return nullptr;
      const int64_t h = hk * G + w.g0 + rr / nq, i = w.i0 + rr % nq;
      const int64_t po = b * p.pse_sb + h * p.pse_sh + (org.pse_row0 + i) * p.pse_ss +
                         (org.pse_col0 + t.jt0) * p.pse_sk;
      for (int64_t n = 0; n < t.npad; ++n)  // (zeros past nk: vector rows read whole groups)
        sc.fq_pse[n] = n < t.nk ? cvt::Load(p.pse, p.pse_elem, po + n * p.pse_sk) : 0.f;
      return sc.fq_pse;
    };
    const auto vis_row = [&](int64_t rr, const Tile& t) -> const uint8_t* {
      return t.full ? nullptr : sc.vis + (rr % nq) * TN;
    };

    // S of pass 1 kept for pass 2 when the item's keys fit (row rr, key jt0 + n at
    // keep_at(rr, jt0) + n): pass 2 then neither packs K nor recomputes the products (benchmark
    // Q1, P1's shape: 1.46x -> 0.96-1.07x P1's time). Either way the same S, so the same bits.
    const bool keep = sc.fq_sv != nullptr && w.j1 - tile0 <= sc.fq_sv_keys;
    const auto keep_at = [&](int64_t rr, int64_t jt0) {
      return sc.fq_sv + rr * sc.fq_sv_keys + (jt0 - tile0);
    };

    // Pass 1: the row maxima.
    Tile t;
    for (int64_t t0 = tile0; t0 < w.j1; t0 += TN) {
      if (!tile_at(t0, &t)) continue;
      resolve(p.k, hk, t.jt0, t.nk, krow, ksd);
      Ops::PackK(krow, ksd, t.nk, D, sc.fq_k);
      Ops::Scores(qh, dq, hrows, sc.fq_k, dq, t.npad, sc.fq_s);
      for (int64_t rr = 0; rr < hrows; ++rr) {
        if (row_out(rr, t)) continue;
        float& m = out.m[r0 + rr];
        m = Ops::RowMax(sc.fq_s + rr * TN, t.nk, vis_row(rr, t), pse_row(rr, t), c, m,
                        keep ? keep_at(rr, t.jt0) : nullptr);
      }
    }

    // Pass 2: P8, l and the integer P8.V sums (int32 per tile run, int64 per row).
    int64_t* acc64 = sc.acc64 + r0 * Dv;
    int64_t* l24 = sc.fq_l + r0;
    uint8_t* nan_row = sc.fq_nan + r0;
    for (int64_t rr = 0; rr < hrows; ++rr) {
      for (int64_t d = 0; d < Dv; ++d) acc64[rr * Dv + d] = 0;
      l24[rr] = 0;
      nan_row[rr] = std::isnan(out.m[r0 + rr]) ? 1 : 0;
    }
    for (int64_t x = 0; x < hrows * dvq; ++x) sc.fq_acc[x] = 0;
    const auto flush = [&] {
      for (int64_t rr = 0; rr < hrows; ++rr)
        for (int64_t d = 0; d < Dv; ++d) {
          acc64[rr * Dv + d] += sc.fq_acc[rr * dvq + d];
          sc.fq_acc[rr * dvq + d] = 0;
        }
    };
    int64_t run = 0;  // tiles since the last flush
    for (int64_t t0 = tile0; t0 < w.j1; t0 += TN) {
      if (!tile_at(t0, &t)) continue;
      resolve(p.v, hk, t.jt0, t.nk, vrow, vsd);
      Ops::PackV(vrow, vsd, t.nk, Dv, dvq, sc.fq_v);
      if (!keep) {
        resolve(p.k, hk, t.jt0, t.nk, krow, ksd);
        Ops::PackK(krow, ksd, t.nk, D, sc.fq_k);
        Ops::Scores(qh, dq, hrows, sc.fq_k, dq, t.npad, sc.fq_s);
      }
      for (int64_t rr = 0; rr < hrows; ++rr) {
        int16_t* pr = sc.fq_p + rr * TN;
        // A row whose every score is -inf has no key to attend (docs/semantics.md 1.4).
        if (nan_row[rr] || row_out(rr, t) || out.m[r0 + rr] == kNegInf) {
          for (int64_t n = 0; n < t.npad; ++n) pr[n] = 0;
          continue;
        }
        if (!Ops::RowProbs(keep ? nullptr : sc.fq_s + rr * TN,
                           keep ? keep_at(rr, t.jt0) : nullptr, t.nk, t.npad, vis_row(rr, t),
                           keep ? nullptr : pse_row(rr, t), c, out.m[r0 + rr], &l24[rr], pr)) {
          nan_row[rr] = 1;
          for (int64_t n = 0; n < t.npad; ++n) pr[n] = 0;
        }
      }
      Ops::Pv(sc.fq_p, hrows, sc.fq_v, dvq, (t.nk + 1) / 2, sc.fq_acc);
      if (++run == kFqFlushTiles) {
        flush();
        run = 0;
      }
    }
    flush();

    for (int64_t rr = 0; rr < hrows; ++rr) {
      const int64_t r = r0 + rr;
      float* a = out.acc + r * out.acc_stride;
      if (nan_row[rr]) {
        out.m[r] = std::numeric_limits<float>::quiet_NaN();
        out.l[r] = std::numeric_limits<float>::quiet_NaN();
        for (int64_t d = 0; d < Dv; ++d) a[d] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      if (out.m[r] == kNegInf) continue;  // no key attended: the epilogue writes 0 / +inf
      const double l = static_cast<double>(l24[rr]) * 0x1p-24;  // exact
      out.l[r] = static_cast<float>(l);
      const float l16 = F16Round(static_cast<float>(l));
      for (int64_t d = 0; d < Dv; ++d) {
        const float od = static_cast<float>(acc64[rr * Dv + d]) * p.dequant_scale2;
        a[d] = od / l16;
      }
    }
  }
}

inline void AttendFullQuant(const Problem& p, const WorkItem& w, TileScratch& sc,
                            const RowStates& out) {
  FqRun<FqScalarOps>(p, w, sc, out);
}
