// openfia internal: the AMX-BF16 path of SparseAttnSharedkv items (bf16 K = V rows of an original
// and an optional compressed cache, sparse key lists), included by kernels_amx.cc inside
// namespace openfia::internal::amx_target after PvRows, RescaleMoved, ExpP and
// amx_tile_dequant-inl.h (SameOperand, StoreVBlock16), which it reuses.
//
// An item's keys are its "columns", taken in steps of kStepTiles tiles of TN:
//   * one query token (decode, SCFA): the list positions [j0, j1) of the token's key list;
//   * several consecutive query tokens of a CFA / SWA unit (SasSchedule makes such items only
//     where AmxRunsSasItem says so): the union of their lists, the original tokens [lo, hi]
//     followed by the compressed entries [0, n_cmp), each row masking what its list does not
//     hold. Consecutive tokens share all but one of their window tokens, so each key row is
//     gathered and packed once per item instead of once per token.
// Scores are computed transposed, S^T = K Q^T: the key rows are the A operand, so a tile needs
// them only copied contiguous (tile loads take one stride), not transposed into channel pairs;
// the query rows are transposed into pairs once per item. Per tile, each key row is read once:
// 16 keys x 32 channels at a time go into that copy and the packed V of the step (row pairs
// interleaved, as PackV) from the same registers. The rows of the tile two ahead are resolved and
// prefetched meanwhile (a sparse list jumps across the cache; no hardware prefetcher follows).
// The softmax (SoftmaxT16) runs once per step down the key-major scores, 16 query rows per
// vector, and writes P query-major (a small transpose of 32 keys x 16 rows at a time) for P V
// (PvRows), so each row's 512-channel fp32 accumulator passes through the tiles once per
// kStepTiles * TN keys.
// (Scores as S = Q K^T took a 16 x 16 transpose of channel pairs for every key row: a third of
// the V1 benchmark's time, instrumented.)
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

// For the keys [na, nb) (multiples of 16) of a tile of nk bf16 rows of D channels (D % 32 == 0):
// sets the A operand of each block of 16 keys b ((n - na) / 16): ka[b] and its row stride kld[b]
// in elements, the rows themselves when they are equally far apart, else their copy in kc (row
// n - na, stride ldk; rows up to the next multiple of 16 past nk zero: their scores are computed,
// then overwritten) and packs them into the tile's V rows vp
// ([TN/2][ldvp] key pairs, as PackV; keys up to the next multiple of 32 zero: P V reads them);
// reads each row once. pf(n) prefetches row n of a later tile: 16 per block of 16 keys, the rest
// after the tile's last block. Returns whether some element is not finite (bf16 exponent all
// ones).
template <typename Pf>
inline bool PackKcVBf16(const uint16_t* const* row, int64_t nk, int64_t D, int64_t na,
                        int64_t nb, uint16_t* kc, int64_t ldk, const uint16_t** ka,
                        int64_t* kld, uint32_t* vp, int64_t ldvp, const Pf& pf, int64_t pf_nk) {
  const __m512i e = _mm512_set1_epi16(0x7F80);
  __mmask32 bad = 0;
  const int64_t nv = (nk + 31) / 32 * 32;
  for (int64_t n0 = na; n0 < nb; n0 += 16) {
    for (int64_t n = n0; n < std::min(n0 + 16, pf_nk); ++n) pf(n);
    const int live = static_cast<int>(std::clamp<int64_t>(nk - n0, 0, 16));
    // 16 live rows equally far apart (a run of one cache page: window tokens, consecutive
    // compressed entries) are the A operand where they are; others are copied.
    const auto at = [&](int i) { return reinterpret_cast<uintptr_t>(row[n0 + i]); };
    bool run = live == 16 && at(1) > at(0) && (at(1) - at(0)) % 2 == 0;
    const uintptr_t step = run ? at(1) - at(0) : 0;  // bytes
    for (int i = 2; i < 16 && run; ++i) run = at(i) - at(i - 1) == step;
    const int64_t b = (n0 - na) / 16;
    ka[b] = run ? row[n0] : kc + (n0 - na) * ldk;
    kld[b] = run ? static_cast<int64_t>(step / 2) : ldk;
    const bool copy = live > 0 && !run;
    for (int64_t c = 0; c < D; c += 32) {
      __m512i x[16];
      for (int i = 0; i < 16; ++i) {
        x[i] = i < live ? _mm512_loadu_si512(row[n0 + i] + c) : _mm512_setzero_si512();
        bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x[i], e), e);
        if (copy) _mm512_storeu_si512(kc + (n0 - na + i) * ldk + c, x[i]);
      }
      StoreVBlock16(x, n0, c, vp, ldvp);
    }
  }
  if (nb == nv)
    for (int64_t n = nv; n < pf_nk; ++n) pf(n);
  return bad != 0;
}

// Keys copied, then scored, at a time: their copy (34 KiB) stays in L1 from its stores to its
// tile loads. A whole 64-key tile's copy did not (every store took a line from L2): V1 1.14-1.24x
// with 32 keys, 16 no faster; V2 1.06x (one thread, cold, separate processes).
constexpr int64_t kSasKcKeys = 32;

// qt[j][r] = the channel pair (q[r][2j], q[r][2j + 1]) of the bf16 query rows q[r], for `rows`
// rows (a multiple of 16) and D channels (a multiple of 32): the B operand of S^T = K Q^T.
inline void PackQueryPairsT(const uint16_t* const* q, int64_t rows, int64_t D, uint32_t* qt,
                            int64_t ldqt) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    for (int64_t c = 0; c < D; c += 32) {
      __m512 f[16];
      for (int i = 0; i < 16; ++i) f[i] = _mm512_loadu_ps(q[r0 + i] + c);
      V::Transpose(f);
      for (int j = 0; j < 16; ++j) _mm512_storeu_ps(qt + (c / 2 + j) * ldqt + r0, f[j]);
    }
  }
}

// S^T = K Q^T for one block of 16 (TK: 32) keys x 16 (TQ: 32) query rows over D channels: K rows
// at k (stride ldk elements; with TK, the next 16 at k1, stride ldk1), query pairs at q (PackQueryPairsT, stride ldqt); scores key-major at s
// (stride ldst floats). Channel chunks are summed in ascending order into one accumulator.
template <bool TK, bool TQ>
inline void ScoreBlockT(const uint16_t* k, int64_t ldk, const uint16_t* k1, int64_t ldk1,
                        const uint32_t* q, int64_t ldqt, int64_t D, float* s, int64_t ldst) {
  CompilerFence();
  _tile_zero(0);
  if constexpr (TQ) _tile_zero(1);
  if constexpr (TK) _tile_zero(2);
  if constexpr (TK && TQ) _tile_zero(3);
  for (int64_t d0 = 0; d0 < D; d0 += 32) {
    const uint32_t* b = q + d0 / 2 * ldqt;
    _tile_loadd(4, k + d0, ldk * 2);
    _tile_loadd(6, b, ldqt * 4);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (TQ) {
      _tile_loadd(7, b + 16, ldqt * 4);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (TK) {
      _tile_loadd(5, k1 + d0, ldk1 * 2);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (TQ) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, s, ldst * 4);
  if constexpr (TQ) _tile_stored(1, s + 16, ldst * 4);
  if constexpr (TK) _tile_stored(2, s + 16 * ldst, ldst * 4);
  if constexpr (TK && TQ) _tile_stored(3, s + 16 * ldst + 16, ldst * 4);
  CompilerFence();
}

// S^T for nkb blocks of 16 keys and `rows` query rows (a multiple of 16), in 2 x 2 blocks: each
// K tile and each query tile feeds two products.
inline void ScoreTileT(const uint16_t* const* ka, const int64_t* kld, int64_t nkb,
                       const uint32_t* qt, int64_t ldqt, int64_t rows, int64_t D, float* st,
                       int64_t ldst) {
  for (int64_t kb = 0; kb < nkb; kb += 2) {
    const bool tk = kb + 1 < nkb;
    const uint16_t* k = ka[kb];
    const int64_t ldk = kld[kb];
    const uint16_t* k1 = tk ? ka[kb + 1] : k;
    const int64_t ldk1 = tk ? kld[kb + 1] : ldk;
    for (int64_t r0 = 0; r0 < rows; r0 += 32) {
      const bool tq = r0 + 16 < rows;
      const uint32_t* q = qt + r0;
      float* s = st + kb * 16 * ldst + r0;
      if (tk && tq) {
        ScoreBlockT<true, true>(k, ldk, k1, ldk1, q, ldqt, D, s, ldst);
      } else if (tk) {
        ScoreBlockT<true, false>(k, ldk, k1, ldk1, q, ldqt, D, s, ldst);
      } else if (tq) {
        ScoreBlockT<false, true>(k, ldk, k1, ldk1, q, ldqt, D, s, ldst);
      } else {
        ScoreBlockT<false, false>(k, ldk, k1, ldk1, q, ldqt, D, s, ldst);
      }
    }
  }
}

// The softmax of 16 query rows (the lanes) over nk keys (a multiple of 32) of key-major scores s
// (stride ldst floats): the operations of SoftmaxBlock16N (scale, max, exp(s - m), bf16 P,
// l = l * alpha + sum, acc *= alpha) with each row's maximum and sum taken down the key rows.
// P goes query-major as bf16 to p (row stride ldp): per 32 keys, each pair of key rows is
// interleaved into channel pairs and 16 such pairs transposed, one 64-byte P row per query.
// acc_live false: the accumulators are not written yet (only valid when every row is fresh).
inline void SoftmaxT16(const float* s, int64_t ldst, int64_t nk, float scale, float* m,
                       float* l, float* acc, int64_t lda, int64_t ldv, bool acc_live,
                       uint16_t* p, int64_t ldp) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  __m512 vm0 = ninf, vm1 = ninf;
  for (int64_t k = 0; k < nk; k += 2) {
    vm0 = _mm512_max_ps(vm0, _mm512_mul_ps(_mm512_loadu_ps(s + k * ldst), vscale));
    vm1 = _mm512_max_ps(vm1, _mm512_mul_ps(_mm512_loadu_ps(s + (k + 1) * ldst), vscale));
  }
  const Softmax16State st = Softmax16Begin(_mm512_max_ps(vm0, vm1), m);
  const __mmask16 live = static_cast<__mmask16>(~st.dead);
  const __m512 m_new = st.m_new;
  alignas(64) static constexpr uint16_t kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                      21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                      11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pairs = _mm512_load_si512(kPairs);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  for (int64_t c = 0; c < nk; c += 32) {
    __m512 z[16];
    for (int i = 0; i < 16; ++i) {
      const float* sk = s + (c + 2 * i) * ldst;
      // Rows with nothing visible: P = 0 (their exp arguments are NaN or +inf).
      const __m512 x0 = _mm512_maskz_mov_ps(
          live, ExpP(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(sk), vscale), m_new)));
      const __m512 x1 = _mm512_maskz_mov_ps(
          live, ExpP(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(sk + ldst), vscale), m_new)));
      sum0 = _mm512_add_ps(sum0, x0);
      sum1 = _mm512_add_ps(sum1, x1);
      // VCVTNEPS2BF16 rounds to nearest even like RoundBF16 but flushes subnormal inputs to
      // zero; TDPBF16PS would read such a P as zero anyway (see ExpP).
      const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
      z[i] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(pairs, h));
    }
    V::Transpose(z);
    for (int r = 0; r < 16; ++r) _mm512_storeu_ps(p + r * ldp + c, z[r]);
  }
  Softmax16End(st, _mm512_add_ps(sum0, sum1), m, l, acc, lda, ldv, acc_live);
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

void AmxAttendSas(const Problem& p, const WorkItem& w, EngineScratch& sc, const RowStates& out) {
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

  // Scratch (EngineScratch::step, sized for sparse problems by ScratchBuffer): the buffers of
  // SasStepLayout (the tile's key rows, the transposed query pairs, the step's packed V, key-major
  // scores and query-major P); sc.q the bf16 query rows where they must be gathered (below), one
  // cache line longer than D when D is a multiple of 256 channels.
  constexpr int64_t TS = kStepTiles * TN;
  static_assert(TS <= 256, "the P rows below hold up to 256 keys per step");
  const SasStepLayout lay = SasStepLayoutFor(D, Dv, rows);
  char* base = reinterpret_cast<char*>(sc.step);
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  uint16_t* kc = reinterpret_cast<uint16_t*>(base + lay.kc);
  uint32_t* qt = reinterpret_cast<uint32_t*>(base + lay.qt);
  uint32_t* vp = reinterpret_cast<uint32_t*>(base + lay.vp);
  float* st = reinterpret_cast<float*>(base + lay.st);
  uint16_t* pb = reinterpret_cast<uint16_t*>(base + lay.pb);
  const int64_t ldk = lay.ldk, ldqt = lay.ldqt, ldvp = lay.ldvp, ldst = lay.ldst, ldp = lay.ldp;
  const int64_t ldq = D % 256 == 0 ? D + 32 : D;
  const auto line = [](void* x) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(x) + 63) & ~uintptr_t{63});
  };
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
  // The first tiles' rows are on their way while the query rows are transposed.
  for (int64_t i = 0; i < kAhead; ++i) {
    const int64_t nk = resolve(i * TN);
    for (int64_t n = 0; n < nk; ++n) prefetch_row(ring[i % kAhead1][n]);
  }

  // The query rows are read where they are when their channels are contiguous (a copy would be
  // one more buffer to bring in from memory on a cold call), else gathered into sc.q first.
  uint16_t* qb = static_cast<uint16_t*>(line(sc.q));
  const uint16_t* qrow[kItemRows];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = w.hk * G + w.g0 + r / nq, row = p.q_begin[b] + w.i0 + r % nq;
    const uint16_t* src = static_cast<const uint16_t*>(p.q.Base(b)) + p.q.Offset(b, h, row, 0);
    if (p.q.sd == 1 && p.q.d_split == 0) {
      qrow[r] = src;
    } else {
      uint16_t* dst = qb + r * ldq;
      for (int64_t d = 0; d < D; ++d) dst[d] = src[DOff(p.q, d)];
      qrow[r] = dst;
    }
  }
  PackQueryPairsT(qrow, rows, D, qt, ldqt);

  // Padded keys and masked cells: a score whose product with `scale` is -inf.
  const float pad = scale > 0.f ? kNegInf : -kNegInf;
  const __m512 vpad = _mm512_set1_ps(pad);
  // Multi-token items: lanes[g][q], the lanes of query block g that belong to token q (row r is
  // token r % nq).
  __mmask16 lanes[kItemRows / 16][kSasMaxTokens] = {};
  if (cols.multi) {
    for (int64_t r = 0; r < rows; ++r)
      lanes[r / 16][r % nq] |= static_cast<__mmask16>(1u << (r % 16));
  }
  LoadTileConfig();
  for (int64_t t0 = 0; t0 < cols.n; t0 += TS) {
    const int64_t ntile = std::min<int64_t>(kStepTiles, (cols.n - t0 + TN - 1) / TN);
    bool bad = false;  // a step with a non-finite value some row masks: exact P V below
    for (int64_t k = 0; k < ntile; ++k) {
      const int64_t c0 = t0 + k * TN, nk = keys_of(c0);
      const int64_t ca = c0 + kAhead * TN, pf_nk = resolve(ca);
      const uint16_t* const* ahead = ring[ca / TN % kAhead1];
      const auto pf = [&](int64_t n) { prefetch_row(ahead[n]); };
      bool v_bad = false;
      float* sk = st + k * TN * ldst;
      const int64_t nv = (nk + 31) / 32 * 32, nkb = (nk + 15) / 16;
      for (int64_t h = 0; h < nv; h += kSasKcKeys) {
        const int64_t he = std::min(nv, h + kSasKcKeys);
        const uint16_t* ka[kSasKcKeys / 16];
        int64_t kld[kSasKcKeys / 16];
        v_bad |= PackKcVBf16(ring[c0 / TN % kAhead1], nk, D, h, he, kc, ldk, ka, kld,
                             vp + k * (TN / 2) * ldvp, ldvp, pf, pf_nk);
        const int64_t kb1 = std::min(he / 16, nkb);
        if (kb1 > h / 16)
          ScoreTileT(ka, kld, kb1 - h / 16, qt, ldqt, rows, D, sk + h * ldst, ldst);
      }
      // The score rows of live keys (blocks of 16), then padding up to the next 32 keys (the
      // softmax and P V below read no further).
      for (int64_t n = nk; n < (nk + 31) / 32 * 32; ++n)
        for (int64_t r0 = 0; r0 < rows; r0 += 16) _mm512_storeu_ps(sk + n * ldst + r0, vpad);
      if (cols.multi) {
        uint64_t vis[kSasMaxTokens];
        bool partial = false;
        const uint64_t all = nk == TN ? ~uint64_t{0} : (uint64_t{1} << nk) - 1;
        for (int64_t q = 0; q < nq; ++q) {
          vis[q] = SasVisible(cols, q, c0, nk);
          partial |= vis[q] != all;
        }
        bad |= v_bad && partial;
        if (!partial) continue;
        for (int64_t n = 0; n < nk; ++n) {
          unsigned hidden = 0;  // bit q: token q's list does not hold the key
          for (int64_t q = 0; q < nq; ++q) hidden |= static_cast<unsigned>(!(vis[q] >> n & 1)) << q;
          if (hidden == 0) continue;
          for (int64_t g = 0; g < rows / 16; ++g) {
            __mmask16 mk = 0;
            for (unsigned hq = hidden; hq != 0; hq &= hq - 1) mk |= lanes[g][__builtin_ctz(hq)];
            _mm512_mask_storeu_ps(sk + n * ldst + 16 * g, mk, vpad);
          }
        }
      }
    }
    const bool live = t0 != 0;  // the accumulators hold earlier steps
    const int64_t live_keys = std::min(ntile * TN, cols.n - t0);
    // Over the live keys rounded up to 32 (the P V below reads no further).
    const int64_t nks = (live_keys + 31) / 32 * 32;
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      float* a = out.acc + r0 * out.acc_stride;
      // With `bad` the exact path below reads the accumulators: they must be live.
      const bool al = live || bad;
      if (bad && !live) {
        for (int64_t r = 0; r < 16; ++r) std::memset(a + r * out.acc_stride, 0, Dv * 4);
      }
      SoftmaxT16(st + r0, ldst, nks, scale, out.m + r0, out.l + r0, a, out.acc_stride, ldv, al,
                 pb + r0 * ldp, ldp);
    }
    if (bad) {
      // A masked cell (P = 0) must not meet a non-finite value (0 * Inf is NaN): the cells each
      // row's list holds, in fp32 (bf16 P times bf16 V is exact, like the tile product).
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* pr = pb + r * ldp;
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
    PvRows(pb, ldp, vp, ldvp, Dv, nks / 32, rows, out.acc, out.acc_stride, /*acc_init=*/!live);
  }
  _tile_release();
}
