// openfia internal: what the decode kernels share (decode_avx2-inl.h, decode_avx512-inl.h):
// which items they take, where a tile's K / V rows live, and the token-order prefetch stream.
//
// Included inside a target namespace after attend-inl.h (ResolveKey, DqVecOk, TN), before the
// kernel that uses it; no include guard (each target has its own copy).

constexpr int64_t kDecMaxD = 1024;
constexpr int64_t kDecMaxKeys = 72;  // TN rounded up to a multiple of 12 (other key blocks divide TN)
constexpr int64_t kDecAhead = 8;     // tokens of prefetch distance (all heads' rows of each)

// How the kernel reads one of K / V: bf16 rows (split into even / odd channels in registers),
// or int8 / int4 rows with an antiquant whose scale / offset is one value per row (per tensor,
// head, token or token-head) or one vector over the channels of a head (per channel).
enum class DecKind : uint8_t { kBf16, kI8, kI4 };

inline bool DecOperandKind(const KvOperand& kv, DecKind* kind) {
  const auto bf16 = [](const Operand& o) {
    return o.elem == Elem::kBF16 && o.sd == 1 && o.d_split == 0;
  };
  if (kv.dequant.kind == Dequant::Kind::kNone) {
    if (!bf16(kv.cache)) return false;
    if (kv.prefix.present() && (kv.prefix_dequant.kind != Dequant::Kind::kNone || !bf16(kv.prefix)))
      return false;
    *kind = DecKind::kBf16;
    return true;
  }
  // The vector antiquant of attend-inl.h (DqVecOk: int8 / int4, unit channel stride, no
  // per-tile groups), no shared prefix, per-channel parameters that depend on the head only,
  // byte-aligned int4 rows.
  const Operand& o = kv.cache;
  const Dequant& dq = kv.dequant;
  if (kv.prefix.present() || dq.kind == Dequant::Kind::kPerTile || !DqVecOk(o, &dq)) return false;
  if (dq.sd != 0 && (dq.sb != 0 || dq.ss != 0)) return false;
  if (o.elem == Elem::kI4 && ((o.sb | o.sh | o.ss) & 1) != 0) return false;
  *kind = o.elem == Elem::kI8 ? DecKind::kI8 : DecKind::kI4;
  return true;
}

// The problem-level part of DecodeCan (nullptr: some items of p may qualify).
inline const char* DecodeProblemWhy(const Problem& p) {
  if (p.d_rope > 0 || p.full_quant || !p.key_offset.empty() || p.k2.cache.present() ||
      p.pse != nullptr || p.mask != nullptr)
    return "rope, full quantization, sparse keys, pse or a mask";
  if (p.d_qk % 16 != 0 || p.d_v % 16 != 0 || p.d_qk > kDecMaxD || p.d_v > kDecMaxD)
    return "head sizes that are not multiples of 16 up to 1024";
  DecKind k, v;
  if (!DecOperandKind(p.k, &k) || !DecOperandKind(p.v, &v))
    return "a key or value format the decode kernels do not read";
  return nullptr;
}

inline bool DecodeCan(const Problem& p, const WorkItem& w, DecKind* kk = nullptr,
                      DecKind* vk = nullptr) {
  if (p.d_rope > 0 || p.full_quant || !p.key_offset.empty() || p.k2.cache.present() ||
      p.pse != nullptr || p.mask != nullptr)
    return false;
  const int64_t R = w.head_rows();
  if ((R != 1 && R != 2 && R != 4 && R != 8) || w.j0 >= w.j1) return false;
  if (w.n_hk * R > kItemRows) return false;  // packed queries fit sc.q, scores fit the scratch
  if (p.d_qk % 16 != 0 || p.d_v % 16 != 0 || p.d_qk > kDecMaxD || p.d_v > kDecMaxD) return false;
  DecKind k, v;
  if (!DecOperandKind(p.k, &k) || !DecOperandKind(p.v, &v)) return false;
  if (kk != nullptr) *kk = k;
  if (vk != nullptr) *vk = v;
  const ItemOrigins o = OriginsOf(p, w.b);
  return (w.i1 - 1) - o.pre <= w.j0 && w.j1 - 1 <= w.i0 + o.next;
}

// The antiquant of one int8 / int4 operand as the decode kernels apply it: per-row parameters
// looked up per key (Row), per-channel ones as fp32 vectors per head (chan, filled once per item).
struct DecDq {
  const Dequant* dq = nullptr;
  bool has_off = false, per_chan = false;
  bool chan_fast = false;  // per-channel: every channel's values in the AVX2 kernel's fast range
  const float* chan = nullptr;  // [n_hk][2][D]: scale, offset (per-channel only)
  int64_t D = 0;

  void Init(const Dequant& d, int64_t dim, int64_t hk, int64_t n_hk, float* buf) {
    dq = &d;
    D = dim;
    has_off = d.offset != nullptr;
    per_chan = d.sd != 0;
    if (!per_chan) return;
    for (int64_t x = 0; x < n_hk; ++x) {
      const int64_t i = d.Index(0, hk + x, 0, 0);
      for (int64_t c = 0; c < dim; ++c) {
        buf[(2 * x) * dim + c] = cvt::Load(d.scale, d.scale_elem, i + c * d.sd);
        buf[(2 * x + 1) * dim + c] = has_off ? cvt::Load(d.offset, d.offset_elem, i + c * d.sd) : 0.f;
      }
    }
    chan = buf;
  }
  // Scale and offset of the row at antiquant coordinates c (storage b, s) of KV head h.
  // fp32 parameters (the per-token antiquant's dtype) are read inline: cvt::Load's call and
  // dtype switch for the 4 parameters of each key and head took ~5% of int8 decode (Zen 4, AVX2).
  __attribute__((always_inline)) void Row(const int64_t* c, int64_t h, float* scale,
                                          float* offset) const {
    const int64_t i = dq->Index(c[0], h, c[1], 0);
    const auto load = [i](const void* p, Elem e) {
      return e == Elem::kF32 ? static_cast<const float*>(p)[i] : cvt::Load(p, e, i);
    };
    *scale = load(dq->scale, dq->scale_elem);
    *offset = has_off ? load(dq->offset, dq->offset_elem) : 0.f;
  }
};

// Where the keys of one tile live: KV head w.hk's K / V row of key n (bytes), the bytes from one
// KV head to the next, and the antiquant coordinates (Dequant) of each row. Keys past nk (up to a
// whole key block) point at a zero row.
struct DecTile {
  const char* k[kDecMaxKeys];
  const char* v[kDecMaxKeys];
  int64_t kstep[kDecMaxKeys], vstep[kDecMaxKeys];
  int64_t kc[2 * kDecMaxKeys], vc[2 * kDecMaxKeys];
  int64_t nk = 0;
};

alignas(64) inline const uint16_t kDecZeroRow[kDecMaxD] = {};

// Bytes of `elems` elements of e (int4: two a byte; offsets of int4 operands are even).
inline int64_t DecBytes(Elem e, int64_t elems) {
  return e == Elem::kBF16 ? 2 * elems : e == Elem::kI8 ? elems : elems / 2;
}

// The rows of the tile's keys. ResolveKey (a block-table lookup and two 64-bit divisions, for K
// and for V) runs once per run of keys in one page (or one contiguous sequence): the next key of
// a run is the cache row stride further on (Operand::Offset is linear in s) with its antiquant
// coordinate one further. Per key it took ~5% of bf16 decode (Zen 4, AVX2).
inline void DecResolve(const Problem& p, const WorkItem& w, int64_t t0, DecTile* t) {
  const int64_t jt0 = std::max(t0, w.j0);
  t->nk = std::min(t0 + TN, w.j1) - jt0;
  const auto side = [&](const KvOperand& kv, const char** row, int64_t* step, int64_t* c) {
    const int64_t ds = DecBytes(kv.cache.elem, kv.cache.ss);
    int64_t left = 0;  // keys after the last resolved one in its page (cache keys only)
    for (int64_t n = 0; n < t->nk; ++n) {
      if (left > 0) {
        --left;
        row[n] = row[n - 1] + ds;
        step[n] = step[n - 1];
        c[2 * n] = c[2 * n - 2];
        c[2 * n + 1] = c[2 * n - 1] + 1;
        continue;
      }
      const int64_t j = jt0 + n;
      const void* base;
      int64_t off;
      uint8_t pre;
      ResolveKey(p, kv, w.b, w.hk, j, &base, &off, &pre, c + 2 * n);
      const Operand& o = pre ? kv.prefix : kv.cache;
      row[n] = static_cast<const char*>(base) + DecBytes(o.elem, off);
      step[n] = DecBytes(o.elem, pre ? o.sh : o.Sh(w.b));
      if (!pre) {
        const int64_t tk = p.kv_begin[w.b] + j - p.prefix_len;
        left = p.paged ? p.block_size - 1 - tk % p.block_size : t->nk;
      }
    }
  };
  side(p.k, t->k, t->kstep, t->kc);
  side(p.v, t->v, t->vstep, t->vc);
  for (int64_t n = t->nk; n < kDecMaxKeys; ++n) {
    t->k[n] = t->v[n] = reinterpret_cast<const char*>(kDecZeroRow);
    t->kstep[n] = t->vstep[n] = 0;
    t->kc[2 * n] = t->kc[2 * n + 1] = t->vc[2 * n] = t->vc[2 * n + 1] = 0;
  }
}


// A prefetch stream over the rows of a tile in token order (every head's row of a token, then
// the next token), issued a few lines at a time between the kernel's work (a burst of a whole
// token or chunk would hold every fill buffer and have the rest of it dropped).
struct DecPrefetcher {
  const DecTile* t = nullptr;
  bool v = false;
  int64_t n = 0, x = 0;               // the run being issued: token n, head x (runs of whole
  const char* cur = nullptr;          // tokens when their heads' rows are contiguous)
  const char* end = nullptr;
  int64_t n_hk = 1, bytes = 0;
  // Where the lines go: L1 only (NTA), L2 (T1), or L2 for runs of whole tokens and L1 for rows
  // apart (kT1Runs).
  enum class Hint : uint8_t { kNta, kT1, kT1Runs } hint = Hint::kNta;
  bool l2 = false;                    // the current run's lines go to L2

  void Start(const DecTile* tile, bool values, int64_t heads, int64_t row_bytes, int64_t n0) {
    t = tile;
    v = values;
    n = n0;
    x = 0;
    n_hk = heads;
    bytes = row_bytes;
    cur = end = nullptr;
    Run();
  }
  // Sets [cur, end) to the run of token n from head x on.
  void Run() {
    if (n >= t->nk) return;
    const char* row = v ? t->v[n] : t->k[n];
    const int64_t step = v ? t->vstep[n] : t->kstep[n];
    cur = row + x * step;
    const bool whole = step == bytes;  // the token's rows of every head are one run
    end = cur + (whole ? (n_hk - x) * bytes : bytes);
    l2 = hint == Hint::kT1 || (hint == Hint::kT1Runs && whole);
    if (whole) x = n_hk - 1;
  }
  // Prefetches up to `lines` lines, not past token `n_end`.
  void Issue(int64_t lines, int64_t n_end) {
    if (t == nullptr) return;
    n_end = std::min(n_end, t->nk);
    while (lines > 0 && n < n_end) {
      // Non-temporal: into L1 without displacing L2 (every line is read within a few
      // microseconds, then never again). kT1: T1 instead (the AVX512-BF16 kernel, which
      // consumes lines ~2x faster: from DRAM 1.3-1.6x faster than NTA there, single thread).
      // kT1Runs (the AVX2 kernel): T1 where a token's rows of every head are one run (a
      // [block, block_size, H * D] cache), NTA for rows apart (BNSD, [block, H, block_size,
      // D]). On Zen 4 with AVX2 (session 17, 2 threads): D1's shape 3.9 -> 3.25 ms and D4's
      // 18.3 -> 13.0 ms with T1, while a contiguous BNSD cache (D5) ran 1.04x slower with T1
      // and the 4-D cache the same; on Zen 3 T1, T0 and NTA were within the noise of each
      // other for the 3-D cache (architecture_notes.md, sessions 8 and 15).
      if (l2)
        for (; lines > 0 && cur < end; --lines, cur += 64) _mm_prefetch(cur, _MM_HINT_T1);
      else
        for (; lines > 0 && cur < end; --lines, cur += 64) _mm_prefetch(cur, _MM_HINT_NTA);
      if (cur >= end) {
        if (++x == n_hk) {
          x = 0;
          ++n;
        }
        Run();
      }
    }
  }
  bool Done() const { return t == nullptr || n >= t->nk; }
};
