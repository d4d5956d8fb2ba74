// openfia internal: the AMX-BF16 path of SparseAttnSharedkv items (bf16 K = V rows of an original
// and an optional compressed cache, sparse key lists), included by kernels_amx.cc inside
// namespace openfia::internal::amx_target after ScoreRows, PvRows, Softmax16 and
// amx_tile_dequant-inl.h (SameOperand), which it reuses.
//
// An item's keys are its "columns", taken in steps of kStepTiles tiles of TN:
//   * one query token (decode, SCFA): the list positions [j0, j1) of the token's key list;
//   * several consecutive query tokens of a CFA / SWA unit (SasSchedule makes such items only
//     where AmxRunsSasItem says so): the union of their lists, the original tokens [lo, hi]
//     followed by the compressed entries [0, n_cmp), each row masking what its list does not
//     hold. Consecutive tokens share all but one of their window tokens, so each key row is
//     gathered and packed once per item instead of once per token.
// Per tile, each key row is read once: 16 keys x 32 channels at a time go into the packed K tile
// (a 16 x 16 transpose of channel pairs, as PackK) and the packed V of the step (row pairs
// interleaved, as PackV) from the same registers. The rows of the tile two ahead are resolved and
// prefetched meanwhile (a sparse list jumps across the cache; no hardware prefetcher follows).
// Scores go tile by tile (ScoreRows, K in L1-sized channel groups); the softmax
// (Softmax16) and P V (PvRows) run once per step, so each row's 512-channel fp32
// accumulator passes through the tiles once per kStepTiles * TN keys.
//
// The grouping of keys into tiles and steps depends on the item only, and items depend on the
// configuration only (SasSchedule), so results stay bitwise independent of plans and threads.

// Most query tokens of one multi-token item.
constexpr int64_t kSasMaxTokens = 8;

// The key columns of item w (see the top of the file).
struct SasColumns {
  int64_t n = 0;          // columns
  bool multi = false;     // several query tokens
  int64_t e0 = 0;         // single token: the list entry of column 0
  int64_t lo = 0;         // multi: original token of column 0
  int64_t n_ori = 0;      // multi: original tokens (columns [0, n_ori))
  int64_t n_cmp = 0;      // multi: compressed entries (columns [n_ori, n))
  int64_t olo[kSasMaxTokens] = {}, ohi[kSasMaxTokens] = {};  // per token: original [olo, ohi)
  int64_t nc[kSasMaxTokens] = {};                            // per token: compressed [0, nc)
};

// The lists of the tokens of a multi-token item, when each is an ascending run of consecutive
// original tokens followed by the compressed entries 0, 1, ..., n - 1 (CanonicalizeSas builds
// CFA and SWA lists so; SasSchedule makes multi-token items only for those). False otherwise.
inline bool SasMultiColumns(const Problem& p, const WorkItem& w, SasColumns* c) {
  const int64_t nq = w.i1 - w.i0;
  if (nq < 2 || nq > kSasMaxTokens) return false;
  c->multi = true;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0, n_cmp = 0;
  for (int64_t q = 0; q < nq; ++q) {
    const int64_t r = (p.q_row_base[w.b] + w.i0 + q) * p.h_kv + w.hk;
    const int64_t e0 = p.key_offset[r], e1 = p.key_offset[r + 1];
    // Sources are 0 ... 0 1 ... 1 in a list CanonicalizeSas builds: the first compressed entry.
    const int64_t ec = std::partition_point(p.key_source.begin() + e0, p.key_source.begin() + e1,
                                            [](uint8_t s) { return s == 0; }) -
                       p.key_source.begin();
    const int64_t no = ec - e0, ncq = e1 - ec;
    if (no > 0) {
      const int64_t a = p.key_index[e0], z = p.key_index[ec - 1];
      if (z - a != no - 1) return false;
      c->olo[q] = a;
      c->ohi[q] = z + 1;
      lo = std::min(lo, a);
      hi = std::max(hi, z + 1);
    } else {
      c->olo[q] = c->ohi[q] = 0;
    }
    if (ncq > 0 && (p.key_index[ec] != 0 || p.key_index[e1 - 1] != ncq - 1)) return false;
    c->nc[q] = ncq;
    n_cmp = std::max(n_cmp, ncq);
  }
  c->lo = hi > 0 ? lo : 0;
  c->n_ori = hi > 0 ? hi - lo : 0;
  c->n_cmp = n_cmp;
  c->n = c->n_ori + c->n_cmp;
  return true;
}

// Whether item w of p runs on this path.
inline bool AmxSasCan(const Problem& p, const WorkItem& w) {
  if (p.key_offset.empty() || p.key_source.empty() || p.q.elem != Elem::kBF16) return false;
  if (w.n_hk != 1 || w.rows() < 16 || w.rows() % 16 != 0 || w.rows() > kItemRows) return false;
  if (p.pse != nullptr || p.mask != nullptr || p.full_quant || p.prefix_len != 0 ||
      p.d_rope != 0 || !p.paged)
    return false;
  const float scale = static_cast<float>(p.scale);
  if (!std::isfinite(scale) || scale == 0.f) return false;  // the padding trick needs a sign
  if (p.d_qk != p.d_v || p.d_qk % 32 != 0 || p.d_qk > 1024) return false;
  const auto plain = [](const KvOperand& k, const KvOperand& v) {
    return RowContiguousBf16(k.cache) && k.dequant.kind == Dequant::Kind::kNone &&
           !k.prefix.present() && SameOperand(k.cache, v.cache) &&
           v.dequant.kind == Dequant::Kind::kNone && !v.prefix.present() &&
           k.cache.batch_data.empty();
  };
  if (!plain(p.k, p.v)) return false;
  if (p.k2.cache.present() && (!plain(p.k2, p.v2) || p.block_table2 == nullptr)) return false;
  if (w.i1 - w.i0 > 1) {
    SasColumns c;
    return SasMultiColumns(p, w, &c);
  }
  return true;
}

// bf16 row of original token t (source 0) or compressed entry t (source 1) of batch b.
inline const uint16_t* SasRow(const Problem& p, int64_t b, int64_t hk, int src, int64_t t) {
  if (src == 0) {
    const int64_t tt = p.kv_begin[b] + t;
    const int64_t blk = p.block_table[b * p.bt_stride + tt / p.block_size];
    return static_cast<const uint16_t*>(p.k.cache.data) +
           p.k.cache.Offset(blk, hk, tt % p.block_size, 0);
  }
  const int64_t blk = p.block_table2[b * p.bt_stride2 + t / p.block_size2];
  return static_cast<const uint16_t*>(p.k2.cache.data) +
         p.k2.cache.Offset(blk, hk, t % p.block_size2, 0);
}

// The rows of the nk columns from c0.
inline void SasResolve(const Problem& p, const WorkItem& w, const SasColumns& c, int64_t c0,
                       int64_t nk, const uint16_t** rows) {
  for (int64_t n = 0; n < nk; ++n) {
    const int64_t col = c0 + n;
    if (!c.multi) {
      const int64_t e = c.e0 + col;
      rows[n] = SasRow(p, w.b, w.hk, p.key_source[e] != 0, p.key_index[e]);
    } else if (col < c.n_ori) {
      rows[n] = SasRow(p, w.b, w.hk, 0, c.lo + col);
    } else {
      rows[n] = SasRow(p, w.b, w.hk, 1, col - c.n_ori);
    }
  }
}

// Packs nk bf16 rows of D channels (D % 32 == 0) into the K tile kp ([D/2][TN] channel pairs,
// as PackK) and the V rows vp ([TN/2][ldvp] key pairs, as PackV), zero keys past nk; reads each
// row once. pf(n) prefetches row n of a later tile: 16 per block of 16 keys. Returns whether
// some element is not finite (bf16 exponent all ones).
template <typename Pf>
inline bool PackKVBf16(const uint16_t* const* row, int64_t nk, int64_t D, uint32_t* kp,
                       uint32_t* vp, int64_t ldvp, const Pf& pf, int64_t pf_nk) {
  const __m512i e = _mm512_set1_epi16(0x7F80);
  __mmask32 bad = 0;
  for (int64_t n0 = 0; n0 < TN; n0 += 16) {
    for (int64_t n = n0; n < std::min(n0 + 16, pf_nk); ++n) pf(n);
    const int live = static_cast<int>(std::clamp<int64_t>(nk - n0, 0, 16));
    for (int64_t c = 0; c < D; c += 32) {
      __m512i x[16];
      for (int i = 0; i < 16; ++i) {
        x[i] = i < live ? _mm512_loadu_si512(row[n0 + i] + c) : _mm512_setzero_si512();
        bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x[i], e), e);
      }
      StoreKvBlock16(x, n0, c, kp, vp, ldvp);
    }
  }
  for (int64_t n = TN; n < pf_nk; ++n) pf(n);
  return bad != 0;
}

// Per token q of a multi-token item, bit n: column c0 + n (n < nk) is in the token's list.
inline uint64_t SasVisible(const SasColumns& c, int64_t q, int64_t c0, int64_t nk) {
  uint64_t m = 0;
  for (int64_t n = 0; n < nk; ++n) {
    const int64_t col = c0 + n;
    const bool v = col < c.n_ori ? (c.lo + col >= c.olo[q] && c.lo + col < c.ohi[q])
                                 : (col - c.n_ori < c.nc[q]);
    m |= static_cast<uint64_t>(v) << n;
  }
  return m;
}

void AmxAttendSas(const Problem& p, const WorkItem& w, TileScratch& sc, const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t D = p.d_qk, Dv = p.d_v, ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);

  SasColumns cols;
  if (nq > 1) {
    SasMultiColumns(p, w, &cols);  // AmxSasCan checked it
  } else {
    cols.e0 = p.key_offset[(p.q_row_base[b] + w.i0) * p.h_kv + w.hk] + w.j0;
    cols.n = std::max<int64_t>(0, w.j1 - w.j0);
  }
  if (cols.n == 0) {
    ResetRowStates(out, rows, ldv);
    return;
  }
  // m and l only: the first step's P V writes the accumulators (PvRows with acc_init) and its
  // softmax has nothing to rescale.
  for (int64_t r = 0; r < rows; ++r) {
    out.m[r] = kNegInf;
    out.l[r] = 0.f;
  }

  // Scratch (TileScratch::step, allocated for sparse problems by ScratchBuffer): the packed K
  // tile [D/2][TN] pairs, the packed V of a step [kStepTiles * TN / 2][ldvp] pairs and the
  // step's scores [rows][lds] (P as bf16 over the first half of each fp32 score row); sc.q the
  // bf16 query rows, one cache line longer than D when D is a multiple of 256 channels (rows a
  // multiple of 512 bytes apart fall into a few L1 sets: the Q tiles of a channel group would
  // evict each other).
  // Every buffer starts on a cache line: a tile row that straddles two lines costs two loads.
  const auto line = [](void* x) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(x) + 63) & ~uintptr_t{63});
  };
  constexpr int64_t TS = kStepTiles * TN;
  static_assert(TS <= 256, "the softmax below takes up to 256 keys per step");
  uint32_t* kp = static_cast<uint32_t*>(line(sc.step));
  const int64_t ldvp = Dv % 256 == 0 ? Dv + 16 : Dv;
  uint32_t* vp = kp + D / 2 * TN;
  float* ss = reinterpret_cast<float*>(vp + kStepTiles * (TN / 2) * ldvp);
  const int64_t lds = TS % 256 == 0 ? TS + 16 : TS, ldp = 2 * lds;
  const int64_t ldq = D % 256 == 0 ? D + 32 : D;
  // Rows of tile i in ring[i % kAhead1]: tile i + kAhead is resolved (and its rows touched: the
  // page walks of random rows overlap) while tile i is packed, and prefetched row by row.
  constexpr int64_t kAhead = 2, kAhead1 = kAhead + 1;
  const uint16_t* ring[kAhead1][TN];
  const auto keys_of = [&](int64_t c0) { return c0 >= cols.n ? 0 : std::min(TN, cols.n - c0); };
  const auto resolve = [&](int64_t c0) {
    const int64_t nk = keys_of(c0);
    if (nk > 0) {
      const uint16_t** r = ring[c0 / TN % kAhead1];
      SasResolve(p, w, cols, c0, nk, r);
      uint32_t touch = 0;
      for (int64_t n = 0; n < nk; ++n) touch += *reinterpret_cast<const volatile uint16_t*>(r[n]);
      asm volatile("" ::"r"(touch));
    }
    return nk;
  };
  const int64_t row_bytes = D * 2;
  const auto prefetch_row = [&](const uint16_t* r) {
    const char* a = reinterpret_cast<const char*>(r);
    for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(a + o);
  };
  // The first tiles' rows are on their way while the query rows are copied (a cold decode item
  // waited for them after the copy).
  for (int64_t i = 0; i < kAhead; ++i) {
    const int64_t nk = resolve(i * TN);
    for (int64_t n = 0; n < nk; ++n) prefetch_row(ring[i % kAhead1][n]);
  }

  uint16_t* qb = static_cast<uint16_t*>(line(sc.q));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = w.hk * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
    const uint16_t* src = static_cast<const uint16_t*>(p.q.Base(b)) + p.q.Offset(b, h, row, 0);
    uint16_t* dst = qb + r * ldq;
    if (p.q.sd == 1 && p.q.d_split == 0) {
      std::memcpy(dst, src, D * 2);
    } else {
      for (int64_t d = 0; d < D; ++d) dst[d] = src[DOff(p.q, d)];
    }
  }

  // Padded keys and masked cells: a score whose product with `scale` is -inf.
  const float pad = scale > 0.f ? kNegInf : -kNegInf;
  const __m512 vpad = _mm512_set1_ps(pad);
  LoadTileConfig();
  for (int64_t t0 = 0; t0 < cols.n; t0 += TS) {
    const int64_t ntile = std::min<int64_t>(kStepTiles, (cols.n - t0 + TN - 1) / TN);
    bool bad = false;  // a step with a non-finite value some row masks: exact P V below
    for (int64_t k = 0; k < ntile; ++k) {
      const int64_t c0 = t0 + k * TN, nk = keys_of(c0);
      const int64_t ca = c0 + kAhead * TN, pf_nk = resolve(ca);
      const uint16_t* const* ahead = ring[ca / TN % kAhead1];
      const auto pf = [&](int64_t n) { prefetch_row(ahead[n]); };
      const bool v_bad = PackKVBf16(ring[c0 / TN % kAhead1], nk, D, kp,
                                    vp + k * (TN / 2) * ldvp, ldvp, pf, pf_nk);
      // The score tiles of live keys only (a short last tile: the padding columns are set
      // below).
      switch ((nk + 15) / 16) {
        case 1: ScoreRows<1>(qb, ldq, kp, D, rows, ss + k * TN, lds); break;
        case 2: ScoreRows<2>(qb, ldq, kp, D, rows, ss + k * TN, lds); break;
        case 3: ScoreRows<3>(qb, ldq, kp, D, rows, ss + k * TN, lds); break;
        default: ScoreRows(qb, ldq, kp, D, rows, ss + k * TN, lds); break;
      }
      if (cols.multi) {
        uint64_t vis[kSasMaxTokens];
        bool partial = false;
        const uint64_t all = nk == TN ? ~uint64_t{0} : (uint64_t{1} << nk) - 1;
        for (int64_t q = 0; q < nq; ++q) {
          vis[q] = SasVisible(cols, q, c0, nk);
          partial |= vis[q] != all;
        }
        bad |= v_bad && partial;
        for (int64_t r = 0; r < rows; ++r) {
          const uint64_t v = vis[r % nq];
          if (v == ~uint64_t{0}) continue;
          float* s = ss + r * lds + k * TN;
          for (int j = 0; j < TN / 16; ++j)
            _mm512_mask_storeu_ps(s + 16 * j, static_cast<__mmask16>(~(v >> (16 * j))), vpad);
        }
      } else if (nk < TN) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = nk; n < TN; ++n) ss[r * lds + k * TN + n] = pad;
      }
    }
    const bool live = t0 != 0;  // the accumulators hold earlier steps
    const int64_t live_keys = std::min(ntile * TN, cols.n - t0);
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      float* sb = ss + r0 * lds;
      float* a = out.acc + r0 * out.acc_stride;
      float* m = out.m + r0;
      float* l = out.l + r0;
      // With `bad` the exact path below reads the accumulators: they must be live.
      const bool al = live || bad;
      if (bad && !live) {
        for (int64_t r = 0; r < 16; ++r) std::memset(a + r * out.acc_stride, 0, Dv * 4);
      }
      // Over the live keys rounded up to 32 (the P V below reads no further).
      const int64_t npad = std::min<int64_t>(256, (live_keys + 31) / 32 * 32);
      Softmax16(sb, lds, npad, scale, m, l, a, out.acc_stride, ldv, al);
    }
    if (bad) {
      // A masked cell (P = 0) must not meet a non-finite value (0 * Inf is NaN): the cells each
      // row's list holds, in fp32 (bf16 P times bf16 V is exact, like the tile product).
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* pr = reinterpret_cast<const uint16_t*>(ss + r * lds);
        float* a = out.acc + r * out.acc_stride;
        for (int64_t k = 0; k < ntile; ++k) {
          const int64_t c0 = t0 + k * TN, nk = keys_of(c0);
          const uint64_t v = SasVisible(cols, r % nq, c0, nk);
          for (int64_t n = 0; n < nk; ++n) {
            if (!(v >> n & 1)) continue;
            const float pn = cvt::Load(pr, Elem::kBF16, k * TN + n);
            const uint32_t* pair = vp + (k * (TN / 2) + n / 2) * ldvp;
            for (int64_t d = 0; d < Dv; ++d) {
              const uint16_t x = static_cast<uint16_t>(pair[d] >> (16 * (n & 1)));
              a[d] += pn * cvt::Load(&x, Elem::kBF16, 0);
            }
          }
        }
      }
      continue;
    }
    // Key chunks of 32 past the last live key hold P = 0 and zero V rows only: adding them
    // changes no bit, so P V stops at the last live chunk.
    PvRows(reinterpret_cast<const uint16_t*>(ss), ldp, vp, ldvp, Dv, (live_keys + 31) / 32, rows,
           out.acc, out.acc_stride, /*acc_init=*/!live);
  }
  _tile_release();
}
