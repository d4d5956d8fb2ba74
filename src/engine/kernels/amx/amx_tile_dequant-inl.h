// openfia internal: the AMX-BF16 path for sparse items over tile-quantized rows
// (KvQuantSparseFlashAttention, problem.h Dequant::kPerTile), included by kernels_amx.cc inside
// namespace openfia::internal::amx_target after PackK, PackV, ScoreRows, PvRows and
// Softmax16 (which it reuses).
//
// Per tile of kTileKeys selected keys (random rows of the cache):
//   1. each row's d_qk quantized channels (int8, fp8 e4m3 or hifloat8) are dequantized ONCE into
//      a bf16 staging row: x * scale[tile] in fp32, rounded to bf16 to nearest even. These are
//      the operations and the rounding of attend_base-inl.h LoadElem (the reference's), bit for
//      bit;
//   2. K is packed from the staging rows (nope) and the rows' rope values (read in place), V from
//      the same staging rows (K and V are the same dequantized memory, problem.h v == k), so one
//      dequantization serves K, V and every query head of the item;
//   3. scores (ScoreRows: the K tile's channels in L1-sized groups), then once per step of
//      kStepTiles tiles the softmax (Softmax16) and P V (PvRows), whose 512-channel fp32
//      accumulators are the largest memory traffic of the item.
// The rows of the next tile are prefetched while the current one is computed: a sparse list
// jumps across the whole cache, which no hardware prefetcher follows.
//
// Sparse selection makes every listed key visible (no band, mask or pse applies), so every tile
// is a plain one; the last, partial tile pads its scores with keys whose scaled score is -inf
// (P = 0) and its K/V with zero rows.

// Whether item w of p runs on the tile-dequant path.
inline bool AmxTileDqCan(const Problem& p, const WorkItem& w) {
  if (p.key_offset.empty() || p.q.elem != Elem::kBF16) return false;
  // 16-row blocks only (KvQuantSparseFlashAttention's head counts >= 16 are multiples of 16).
  if (w.n_hk != 1 || w.rows() < 16 || w.rows() % 16 != 0) return false;
  if (p.pse != nullptr || p.mask != nullptr || p.full_quant || p.prefix_len != 0 ||
      p.k2.cache.present() || !p.key_source.empty())
    return false;
  const float scale = static_cast<float>(p.scale);
  if (!std::isfinite(scale) || scale == 0.f) return false;  // the padding trick needs a sign
  // PvRows takes 32 value columns at a time.
  if (p.d_qk % 32 != 0 || p.d_qk > 1024 || p.d_v % 32 != 0 || p.d_v > p.d_qk) return false;
  if (p.d_qk + p.d_rope > 1024) return false;
  const KvOperand& k = p.k;
  const Elem e = k.cache.elem;
  if (e != Elem::kI8 && e != Elem::kFP8E4M3 && e != Elem::kHiF8) return false;
  if (k.cache.sd != 1 || k.cache.d_split != 0 || k.prefix.present()) return false;
  const Dequant& dq = k.dequant;
  if (dq.kind != Dequant::Kind::kPerTile || dq.scale_elem != Elem::kF32 || dq.offset != nullptr ||
      dq.d_group <= 0 || dq.d_group % 32 != 0)
    return false;
  // V must be the same dequantized rows (KvQuantSparseFlashAttention: V = K_nope).
  if (!SameOperand(p.v.cache, k.cache) || !SameDequant(p.v.dequant, dq) || p.v.prefix.present())
    return false;
  if (p.d_rope > 0) {
    if (p.q_rope.elem != Elem::kBF16 || !RowContiguousBf16(p.k_rope.cache) ||
        p.k_rope.dequant.kind != Dequant::Kind::kNone || p.k_rope.prefix.present())
      return false;
  }
  return true;
}

// Where the fields of one selected key live.
struct TileDqRows {
  const uint8_t* nope[TN];   // quantized channel 0
  const float* scale[TN];    // scale of channel tile 0 (tile t at scale[n] + t * sd)
  const uint16_t* rope[TN];  // bf16 rope channel 0 (null without rope)
};

// Where a key's fields sit relative to its quantized bytes when nope, rope and scales are fields
// of one storage row (KvQuantSparseFlashAttention's 656-byte rows: the same strides in bytes, no
// tensor lists): one key resolution then serves all three and one prefetch run covers the row.
struct RowFields {
  bool one_row = false;
  int64_t rope = 0, scale = 0;  // byte offsets from the nope bytes
  int64_t bytes = 0;            // bytes from the nope bytes to the end of the last field
};

inline RowFields OneRowFields(const Problem& p, int64_t scale_bytes) {
  RowFields f;
  const Operand& k = p.k.cache;
  const Dequant& dq = p.k.dequant;
  const auto same = [&](int64_t sb, int64_t sh, int64_t ss, int64_t elem_bytes) {
    return sb * elem_bytes == k.sb && sh * elem_bytes == k.sh && ss * elem_bytes == k.ss;
  };
  if (!k.batch_data.empty() || dq.logical || !same(dq.sb, dq.sh, dq.ss, 4)) return f;
  const char* k0 = static_cast<const char*>(k.data);
  f.scale = static_cast<const char*>(dq.scale) - k0;
  f.bytes = std::max(p.d_qk, f.scale + scale_bytes);
  if (p.d_rope > 0) {
    const Operand& r = p.k_rope.cache;
    if (!r.batch_data.empty() || !same(r.sb, r.sh, r.ss, 2)) return f;
    f.rope = static_cast<const char*>(r.data) - k0;
    f.bytes = std::max(f.bytes, f.rope + 2 * p.d_rope);
  }
  f.one_row = f.scale >= 0 && f.rope >= 0;
  return f;
}

inline void ResolveTileDqRows(const Problem& p, const WorkItem& w, const RowFields& f,
                              int64_t jt0, int64_t nk, TileDqRows* r) {
  const Dequant& dq = p.k.dequant;
  const float* scale = static_cast<const float*>(dq.scale);
  for (int64_t n = 0; n < nk; ++n) {
    const void* base;
    int64_t off, coord[2];
    uint8_t pre;
    ResolveItemKey(p, p.k, p.k2, w, w.hk, jt0 + n, &base, &off, &pre, coord);
    const uint8_t* nope = static_cast<const uint8_t*>(base) + off;  // one byte per element
    r->nope[n] = nope;
    if (f.one_row) {
      r->scale[n] = reinterpret_cast<const float*>(nope + f.scale);
      r->rope[n] = p.d_rope > 0 ? reinterpret_cast<const uint16_t*>(nope + f.rope) : nullptr;
      continue;
    }
    r->scale[n] = scale + dq.Index(coord[0], w.hk, coord[1], 0);
    r->rope[n] = nullptr;
    if (p.d_rope > 0) {
      ResolveItemKey(p, p.k_rope, p.k2, w, w.hk, jt0 + n, &base, &off, &pre);
      r->rope[n] = static_cast<const uint16_t*>(base) + off;
    }
  }
}

// Prefetches the fields of key n of r.
inline void PrefetchTileDqRow(const TileDqRows& r, int64_t n, const RowFields& f,
                              int64_t dq_bytes, int64_t scale_bytes, int64_t rope_bytes) {
  const char* a = reinterpret_cast<const char*>(r.nope[n]);
  if (f.one_row) {
    for (int64_t o = 0; o < f.bytes; o += 64) __builtin_prefetch(a + o);
    __builtin_prefetch(a + f.bytes - 1);
    return;
  }
  for (int64_t o = 0; o < dq_bytes; o += 64) __builtin_prefetch(a + o);
  __builtin_prefetch(a + dq_bytes - 1);
  const char* s = reinterpret_cast<const char*>(r.scale[n]);
  __builtin_prefetch(s);
  __builtin_prefetch(s + scale_bytes - 1);
  if (r.rope[n] != nullptr) {
    const char* q = reinterpret_cast<const char*>(r.rope[n]);
    for (int64_t o = 0; o < rope_bytes; o += 64) __builtin_prefetch(q + o);
    __builtin_prefetch(q + rope_bytes - 1);
  }
}

// 16 quantized elements as f32, exactly as cvt::Load decodes them; `table` is the 256-entry
// decoder of the float formats (unused for int8).
template <Elem E>
inline __m512 LoadQuant16(const uint8_t* src, const float* table) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if constexpr (E == Elem::kI8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
  } else {
    // LoadElem adds the absent offset (0.f) before scaling: -0 + 0 = +0 (fp8 0x80) matters.
    return _mm512_add_ps(_mm512_i32gather_ps(_mm512_cvtepu8_epi32(bytes), table, 4),
                         _mm512_setzero_ps());
  }
}

// Round-to-nearest-even bf16 bits of 16 floats, NaN kept quiet with its sign and payload top:
// bitwise cvt::F32ToBF16 (also for subnormal inputs, which VCVTNEPS2BF16 would flush).
inline __m256i ExactBf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                                                 lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// dst[d] = bf16(x[d] * scale[(d / d_group) * sd]) for d < D (D % 32 == 0, d_group % 32 == 0).
template <Elem E, bool kCheck>
inline void DequantRowBf16(const uint8_t* src, const float* scale, int64_t sd, int64_t d_group,
                           int64_t D, const float* table, uint16_t* dst) {
  // fpclass: QNaN | SNaN | denormal. Those lanes take the exact integer rounding (VCVTNE2PS2BF16
  // flushes denormals; the scalar path keeps them).
  constexpr int kOdd = 0x01 | 0x80 | 0x20;
  for (int64_t d0 = 0; d0 < D; d0 += 32) {
    const __m512 s = _mm512_set1_ps(scale[(d0 / d_group) * sd]);
    const __m512 x0 = _mm512_mul_ps(LoadQuant16<E>(src + d0, table), s);
    const __m512 x1 = _mm512_mul_ps(LoadQuant16<E>(src + d0 + 16, table), s);
    __m512i y = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
    if (kCheck && (_mm512_fpclass_ps_mask(x0, kOdd) | _mm512_fpclass_ps_mask(x1, kOdd)) != 0)
      y = _mm512_inserti64x4(_mm512_castsi256_si512(ExactBf16(x0)), ExactBf16(x1), 1);
    _mm512_storeu_si512(dst + d0, y);
  }
}

// Whether int8 x scale can be neither NaN nor denormal for every scale of a row: a finite scale
// that is 0 or at least FLT_MIN in magnitude (|x| >= 1 for x != 0). Then VCVTNE2PS2BF16 rounds
// every product as ExactBf16 does and the per-vector class check is skipped.
inline bool Int8RowPlain(const float* scale, int64_t sd, int64_t d_group, int64_t D) {
  for (int64_t t = 0; t * d_group < D; ++t) {
    const float a = std::fabs(scale[t * sd]);
    if (!(a == 0.f || (a >= std::numeric_limits<float>::min() &&
                       a <= std::numeric_limits<float>::max())))
      return false;
  }
  return true;
}

template <Elem E>
inline void DequantRowBf16(const uint8_t* src, const float* scale, int64_t sd, int64_t d_group,
                           int64_t D, const float* table, uint16_t* dst) {
  if (E == Elem::kI8 && Int8RowPlain(scale, sd, d_group, D))
    DequantRowBf16<E, false>(src, scale, sd, d_group, D, table, dst);
  else
    DequantRowBf16<E, true>(src, scale, sd, d_group, D, table, dst);
}

// Stores 16 keys x 32 channels (x[i]: key n0 + i, channels c .. c + 31 as bf16) into the packed
// V tile (row pairs interleaved, as PackV) and the packed K tile (a 16 x 16 transpose of the
// channel pairs, as PackK). Shared by the fused int8 dequant below and amx_sas-inl.h.
inline void StoreKvBlock16(const __m512i* x, int64_t n0, int64_t c, uint32_t* kp, uint32_t* vp,
                           int64_t ldvp) {
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                      8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int j = 0; j < 8; ++j) {
    uint32_t* dst = vp + (n0 / 2 + j) * ldvp + c;
    _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(x[2 * j], lo, x[2 * j + 1]));
    _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi16(x[2 * j], hi, x[2 * j + 1]));
  }
  __m512 f[16];
  for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(x[i]);
  V::Transpose(f);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kp + (c / 2 + i) * TN + n0, f[i]);
}

// A full tile of int8 rows whose scales are all plain (Int8RowPlain), with d_v == d_qk: each
// 16-key x 32-channel block is dequantized in registers (the same operations and rounding as
// DequantRowBf16) and goes straight into the packed K tile (a 16 x 16 transpose of the channel
// pairs, as PackK) and the packed V tile (row pairs interleaved, as PackV): no bf16 staging rows
// to store and read back twice. The rows of the prefetched tile are prefetched 16 per key block.
template <typename Pf>
inline void DequantPackI8(const TileDqRows& r, int64_t D, int64_t sd, int64_t d_group,
                          uint32_t* kp, uint32_t* vp, int64_t ldvp, const Pf& pf, int64_t pf_nk) {
  for (int64_t n0 = 0; n0 < TN; n0 += 16) {
    for (int64_t n = n0; n < std::min(n0 + 16, pf_nk); ++n) pf(n);
    for (int64_t c = 0; c < D; c += 32) {
      __m512i x[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = n0 + i;
        const __m512 sc = _mm512_set1_ps(r.scale[n][(c / d_group) * sd]);
        const __m512 a = _mm512_mul_ps(LoadQuant16<Elem::kI8>(r.nope[n] + c, nullptr), sc);
        const __m512 b = _mm512_mul_ps(LoadQuant16<Elem::kI8>(r.nope[n] + c + 16, nullptr), sc);
        x[i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
      }
      StoreKvBlock16(x, n0, c, kp, vp, ldvp);
    }
  }
  for (int64_t n = TN; n < pf_nk; ++n) pf(n);
}

inline bool TileInt8Plain(const TileDqRows& r, int64_t nk, int64_t sd, int64_t d_group,
                          int64_t D) {
  for (int64_t n = 0; n < nk; ++n)
    if (!Int8RowPlain(r.scale[n], sd, d_group, D)) return false;
  return true;
}

template <Elem E, typename Pf>
inline void DequantTile(const TileDqRows& r, int64_t nk, const Dequant& dq, int64_t D,
                        const float* table, uint16_t* stg, const Pf& pf, int64_t pf_nk) {
  // One row of the prefetched tile per dequantized row: a burst of ~700 prefetches would hold
  // every fill buffer and stall the loads behind it.
  for (int64_t n = 0; n < nk; ++n) {
    if (n < pf_nk) pf(n);
    DequantRowBf16<E>(r.nope[n], r.scale[n], dq.sd, dq.d_group, D, table, stg + n * D);
  }
  for (int64_t n = nk; n < pf_nk; ++n) pf(n);
}

void AmxAttendTileDq(const Problem& p, const WorkItem& w, TileScratch& sc,
                     const RowStates& out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t b = w.b, nq = w.i1 - w.i0, rows = w.rows(), G = p.group();
  const int64_t Dn = p.d_qk, D = p.d_qk + (p.d_rope + 31) / 32 * 32, Dv = p.d_v;
  const int64_t ldv = sc.dv_pad;
  const float scale = static_cast<float>(p.scale);
  if (w.j0 >= w.j1) {
    ResetRowStates(out, rows, ldv);
    return;
  }
  // m and l only: the first step's P V writes the accumulators (PvRows with acc_init) and its
  // softmax has nothing to rescale.
  for (int64_t r = 0; r < rows; ++r) {
    out.m[r] = kNegInf;
    out.l[r] = 0.f;
  }

  // Scratch (TileScratch::step, sized by ScratchBuffer for per-tile dequant problems): the
  // packed K tiles of one step [kStepTiles][D/2][TN] pairs, the bf16 staging rows of one tile
  // [TN][Dn], the packed V of the step [kStepTiles * TN / 2][ldvp] pairs and the step's scores
  // [rows][TS] (P as bf16 over the first half of each fp32 score row); sc.q the bf16 query rows.
  constexpr int64_t TS = kStepTiles * TN;
  static_assert(kStepTiles >= 1 && kStepTiles <= 4, "a step is 1-4 tiles");
  uint16_t* qb = reinterpret_cast<uint16_t*>(sc.q);
  uint32_t* kp[kStepTiles];
  for (int64_t k = 0; k < kStepTiles; ++k)
    kp[k] = reinterpret_cast<uint32_t*>(sc.step) + k * (D / 2 * TN);
  uint16_t* stg = reinterpret_cast<uint16_t*>(kp[0] + kStepTiles * (D / 2 * TN));
  uint32_t* vp = reinterpret_cast<uint32_t*>(stg + TN * Dn);
  // Packed V rows one cache line longer when Dv pairs are a multiple of 1 KiB (as AccStride).
  const int64_t ldvp = Dv % 256 == 0 ? Dv + 16 : Dv;
  float* ss = reinterpret_cast<float*>(vp + kStepTiles * (TN / 2) * ldvp);
  // Score rows one cache line longer when TS floats are a multiple of 1 KiB (as AccStride): the
  // P tile loads read 16 rows at this stride.
  const int64_t lds = TS % 256 == 0 ? TS + 16 : TS, ldp = 2 * lds;

  const Dequant& dq = p.k.dequant;
  const Elem ke = p.k.cache.elem;
  const float* table = ke == Elem::kFP8E4M3 ? cvt::Fp8E4M3Table()
                       : ke == Elem::kHiF8  ? cvt::HiF8Table()
                                            : nullptr;
  const int64_t scale_bytes = ((Dn - 1) / dq.d_group * dq.sd + 1) * 4;
  // Rows of tile i in ring[i % kAhead1]: tile i + kAhead is resolved while tile i is computed
  // and its rows are prefetched one per row dequantized (a cold cache: each tile's rows are
  // random DRAM lines and page walks; one tile of lead leaves most of that latency exposed).
  constexpr int64_t kAhead = 2, kAhead1 = kAhead + 1;
  TileDqRows ring[kAhead1];
  const RowFields fields = OneRowFields(p, scale_bytes);
  const int64_t tile0 = w.j0 / TN * TN;
  const auto keys_of = [&](int64_t ts) {  // keys of the tile starting at ts (0 past the item)
    return ts >= w.j1 ? int64_t{0} : std::min(ts + TN, w.j1) - std::max(ts, w.j0);
  };
  const auto ring_of = [&](int64_t ts) { return &ring[(ts - tile0) / TN % kAhead1]; };
  const auto resolve = [&](int64_t ts) {
    const int64_t nk = keys_of(ts);
    if (nk > 0) {
      TileDqRows* r = ring_of(ts);
      ResolveTileDqRows(p, w, fields, std::max(ts, w.j0), nk, r);
      // One real load per row, back to back: it walks the page tables now, with the loads of
      // the other rows in flight. Random rows of a large cache each sit on their own 4 KiB page;
      // cold, a software prefetch alone does not hide the walk (~280 ns per row).
      uint32_t touch = 0;
      for (int64_t n = 0; n < nk; ++n)
        touch += *reinterpret_cast<const volatile uint8_t*>(r->nope[n]);
      asm volatile("" ::"r"(touch));
    }
    return nk;
  };
  for (int64_t i = 0; i < kAhead; ++i) {
    const int64_t ts = tile0 + i * TN, nk = resolve(ts);
    for (int64_t n = 0; n < nk; ++n)
      PrefetchTileDqRow(*ring_of(ts), n, fields, Dn, scale_bytes, p.d_rope * 2);
  }

  // Q tiles straight from the query when its rows are: one query row of consecutive heads (the
  // sparse items' shape), nope and rope adjacent in memory with no padding channel (576 = 512 +
  // 64), row-contiguous bf16. Else the rows are packed into sc.q.
  const uint16_t* qt = qb;
  int64_t ldq = D;
  const uint16_t* q0 = static_cast<const uint16_t*>(p.q.Base(b)) +
                       p.q.Offset(b, w.hk * G + w.g0, p.q_begin[b] + w.i0, 0);
  const bool q_direct =
      nq == 1 && p.q.sd == 1 && p.q.d_split == 0 && D == Dn + p.d_rope &&
      (p.d_rope == 0 ||
       (p.q_rope.sd == 1 && p.q_rope.d_split == 0 && p.q_rope.sh == p.q.sh &&
        static_cast<const uint16_t*>(p.q_rope.Base(b)) +
                p.q_rope.Offset(b, w.hk * G + w.g0, p.q_begin[b] + w.i0, 0) ==
            q0 + Dn));
  if (q_direct) {
    qt = q0;
    ldq = p.q.sh;
  } else {
    PackQueryRows(p, w, rows, rows, D, qb);
  }

  const uint16_t* srow[TN];
  for (int64_t n = 0; n < TN; ++n) srow[n] = stg + n * Dn;
  // Padded keys of a partial tile: a score whose product with `scale` is -inf.
  const float pad = scale > 0.f ? kNegInf : -kNegInf;
  LoadTileConfig();
  // Steps of up to kStepTiles tiles: each tile is dequantized, packed and scored on its own; the
  // softmax and P V then run once per step, so the 512-channel fp32 accumulator of every row
  // passes through the tiles once per TS keys.
  for (int64_t t0 = tile0; t0 < w.j1; t0 += TS) {
    const int64_t ntile = std::min<int64_t>(kStepTiles, (w.j1 - t0 + TN - 1) / TN);
    for (int64_t k = 0; k < ntile; ++k) {
      const int64_t ts = t0 + k * TN;
      const int64_t jt0 = std::max(ts, w.j0), nk = std::min(ts + TN, w.j1) - jt0;
      const int64_t ta = ts + kAhead * TN, pf_nk = resolve(ta);
      const TileDqRows* ahead = ring_of(ta);
      const auto pf = [&](int64_t n) {
        PrefetchTileDqRow(*ahead, n, fields, Dn, scale_bytes, p.d_rope * 2);
      };
      const TileDqRows* cur = ring_of(ts);
      if (ke == Elem::kI8 && nk == TN && Dv == Dn &&
          TileInt8Plain(*cur, nk, dq.sd, dq.d_group, Dn)) {
        DequantPackI8(*cur, Dn, dq.sd, dq.d_group, kp[k], vp + k * (TN / 2) * ldvp, ldvp, pf,
                      pf_nk);
      } else {
        switch (ke) {
          case Elem::kI8: DequantTile<Elem::kI8>(*cur, nk, dq, Dn, table, stg, pf, pf_nk); break;
          case Elem::kFP8E4M3:
            DequantTile<Elem::kFP8E4M3>(*cur, nk, dq, Dn, table, stg, pf, pf_nk);
            break;
          default: DequantTile<Elem::kHiF8>(*cur, nk, dq, Dn, table, stg, pf, pf_nk); break;
        }
        PackK(srow, nk, Dn, kp[k]);
        PackV(srow, nk, Dv, vp + k * (TN / 2) * ldvp, ldvp);
      }
      if (p.d_rope > 0) PackK(cur->rope, nk, p.d_rope, kp[k] + Dn / 2 * TN);
      ScoreRows(qt, ldq, kp[k], D, rows, ss + k * TN, lds);
      if (nk < TN) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t n = nk; n < TN; ++n) ss[r * lds + k * TN + n] = pad;
      }
    }
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      float* sb = ss + r0 * lds;
      float* a = out.acc + r0 * out.acc_stride;
      float* m = out.m + r0;
      float* l = out.l + r0;
      const bool live = t0 != tile0;  // the accumulators hold earlier steps
      Softmax16(sb, lds, ntile * TN, scale, m, l, a, out.acc_stride, ldv, live);
    }
    PvRows(reinterpret_cast<const uint16_t*>(ss), ldp, vp, ldvp, Dv, ntile * (TN / 32), rows,
           out.acc, out.acc_stride, /*acc_init=*/t0 == tile0);
  }
  _tile_release();
}
