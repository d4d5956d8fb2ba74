// openfia internal: the one K / V row resolver: where each key of a work item lives (contiguous
// or paged caches, 3-D / 4-D / NZ layouts through Operand strides, the shared prefix before the
// batch's keys, sparse key lists and the second key source of SparseAttnSharedkv), with the
// antiquant coordinates of its row. Included (no include guard) inside a target's namespace.

// Where logical key j of batch b, KV head hk lives in `kv` (docs/semantics.md 1.7 / 1.10). coord
// gets the dequant coordinates (problem.h Dequant): storage (b, s), or (batch, token position) when
// the cache's scales are `logical`.
inline void ResolveKey(const Problem& p, const KvOperand& kv, int64_t b, int64_t hk, int64_t j,
                       const void** base, int64_t* off, uint8_t* from_prefix,
                       int64_t* coord = nullptr) {
  int64_t cb, cs;  // storage (b, s): the dequant coordinates (problem.h, Dequant)
  if (j < p.prefix_len) {
    *base = kv.prefix.Base(0);
    *off = kv.prefix.Offset(0, hk, j, 0);
    *from_prefix = 1;
    cb = kv.prefix_dequant.logical ? b : 0;  // per-token scales of a prefix are per batch
    cs = j;
  } else {
    const int64_t t = p.kv_begin[b] + j - p.prefix_len;
    *from_prefix = 0;
    if (p.paged) {
      cb = p.block_table[b * p.bt_stride + t / p.block_size];
      cs = t % p.block_size;
      *base = kv.cache.data;
    } else {
      cb = b;
      cs = t;
      *base = kv.cache.Base(b);
    }
    *off = kv.cache.Offset(cb, hk, cs, 0);
    if (kv.dequant.logical) {  // per-token scales of a paged cache: (batch, token position)
      cb = b;
      cs = t;
    }
  }
  if (coord) {
    coord[0] = cb;
    coord[1] = cs;
  }
}

// Sparse key selection (problem.h): the list entry at position j of work item w's key list for
// KV head hk (a sparse item has exactly one query row, so one list per KV head).
inline int64_t ListEntry(const Problem& p, const WorkItem& w, int64_t hk, int64_t j) {
  return p.key_offset[(p.q_row_base[w.b] + w.i0) * p.h_kv + hk] + j;
}

// Where list entry e lives: token key_index[e] of the batch's sequence in kv, or for an entry of
// the second key source (key_source[e] != 0) token key_index[e] of kv2, reported as *second = 1:
// the packing reads such keys through the `prefix` slot of the operand WithSecond() builds (a
// problem with a second key source has no shared prefix, so the slot is free).
inline void ResolveEntry(const Problem& p, const KvOperand& kv, const KvOperand& kv2, int64_t b,
                         int64_t hk, int64_t e, const void** base, int64_t* off,
                         uint8_t* second, int64_t* coord = nullptr) {
  const int64_t t = p.key_index[e];
  if (p.key_source.empty() || p.key_source[e] == 0) {
    ResolveKey(p, kv, b, hk, p.prefix_len + t, base, off, second, coord);
    return;
  }
  int64_t cb = b, cs = t;
  if (p.block_table2 != nullptr) {
    cb = p.block_table2[b * p.bt_stride2 + t / p.block_size2];
    cs = t % p.block_size2;
    *base = kv2.cache.data;
  } else {
    *base = kv2.cache.Base(b);
  }
  *off = kv2.cache.Offset(cb, hk, cs, 0);
  *second = 1;
  if (coord) {
    coord[0] = cb;
    coord[1] = cs;
  }
}

// Logical key j of item w for KV head hk: the key range of dense problems, the position in the
// row's key list under sparse selection. kv2 is the second key source (unused when absent).
inline void ResolveItemKey(const Problem& p, const KvOperand& kv, const KvOperand& kv2,
                           const WorkItem& w, int64_t hk, int64_t j, const void** base,
                           int64_t* off, uint8_t* from_prefix, int64_t* coord = nullptr) {
  if (p.key_offset.empty()) {
    ResolveKey(p, kv, w.b, hk, j, base, off, from_prefix, coord);
  } else {
    ResolveEntry(p, kv, kv2, w.b, hk, ListEntry(p, w, hk, j), base, off, from_prefix, coord);
  }
}

// kv with the second key source kv2 in its prefix slot (see ResolveEntry), for a problem with a
// second key source.
inline KvOperand WithSecond(const KvOperand& kv, const KvOperand& kv2) {
  KvOperand m = kv;
  m.prefix = kv2.cache;
  m.prefix_dequant = kv2.dequant;
  return m;
}

// Keys [j0, j0 + n) of item w for KV head hk, as ResolveItemKey resolves each: base[i], off[i],
// pre[i] and coord[2 i], coord[2 i + 1] (coord may be null). Dense keys are resolved once per
// run of keys in one page (or one contiguous sequence): the next key of a run is the cache row
// stride further on (Operand::Offset is linear in s) with its antiquant token one further; a
// block-table lookup and two 64-bit divisions per key took ~5% of a decode.
inline void ResolveItemKeys(const Problem& p, const KvOperand& kv, const KvOperand& kv2,
                            const WorkItem& w, int64_t hk, int64_t j0, int64_t n,
                            const void** base, int64_t* off, uint8_t* pre, int64_t* coord) {
  if (!p.key_offset.empty()) {
    for (int64_t i = 0; i < n; ++i)
      ResolveItemKey(p, kv, kv2, w, hk, j0 + i, &base[i], &off[i], &pre[i],
                     coord ? coord + 2 * i : nullptr);
    return;
  }
  for (int64_t i = 0; i < n;) {
    const int64_t j = j0 + i;
    int64_t c[2];
    ResolveKey(p, kv, w.b, hk, j, &base[i], &off[i], &pre[i], c);
    if (coord) {
      coord[2 * i] = c[0];
      coord[2 * i + 1] = c[1];
    }
    int64_t run = 1;  // keys from i on in one run
    if (!pre[i]) {
      const int64_t t = p.kv_begin[w.b] + j - p.prefix_len;
      run = p.paged ? std::min(n - i, p.block_size - t % p.block_size) : n - i;
    }
    for (int64_t k = 1; k < run; ++k) {
      base[i + k] = base[i];
      off[i + k] = off[i] + k * kv.cache.ss;
      pre[i + k] = 0;
    }
    if (coord)
      for (int64_t k = 1; k < run; ++k) {
        coord[2 * (i + k)] = c[0];
        coord[2 * (i + k) + 1] = c[1] + k;
      }
    i += run;
  }
}
