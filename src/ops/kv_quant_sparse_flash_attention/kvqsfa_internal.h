// openfia internal: the stages of one KvQuantSparseFlashAttention call (see ARCHITECTURE.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/problem.h"
#include "openfia/kv_quant_sparse_flash_attention.h"

namespace openfia::internal {

// Row format of the tile-quantized KV cache (docs/semantics.md 2.1).
inline constexpr int64_t kKvqNope = 512;       // nope values (1 byte each)
inline constexpr int64_t kKvqRope = 64;        // rope values (query dtype, 2 bytes each)
inline constexpr int64_t kKvqTile = 128;       // nope channels per fp32 scale
inline constexpr int64_t kKvqRowBytes = 656;   // 512 + 64*2 + 4*4
inline constexpr int64_t kKvqRopeByte = 512;   // byte offset of the rope field
inline constexpr int64_t kKvqScaleByte = 640;  // byte offset of the scale field
inline constexpr int64_t kKvqQueryD = 576;     // query head dim: nope 512 + rope 64

enum class KvqLayout : uint8_t { kBSND, kTND, kPaBSND };

// What validation proved about a call; canonicalization lowers it without re-checking.
struct KvqsfaShape {
  KvqsfaOutputSpec spec;
  KvqLayout layout_q = KvqLayout::kBSND, layout_kv = KvqLayout::kBSND;
  int64_t batch = 0, h_q = 0, topk = 0;
  int64_t s_q = 0;  // query rows per batch in the tensor (S1, or T for TND)
  // Per batch: query rows [q_begin, q_begin + q_len) of the tensor, KV tokens [0, kv_len) starting
  // at cache token kv_begin (TND) or 0.
  std::vector<int64_t> q_begin, q_len, kv_begin, kv_len;
  int64_t block_size = 0;  // PA_BSND only
};

// kvqsfa_validate.cc: every documented constraint, in a fixed order; throws openfia::Error naming
// the argument, the rule and the value. Reads sequence lengths, block_table and sparse_indices to
// prove every memory access in range.
KvqsfaShape ValidateKvqsfa(const KvqsfaArgs& args);

// kvqsfa_strict.cc: NPU-strict mode's rows (the NPU limits openfia relaxes); throws
// Error(kUnsupported) for the first one a validated call breaks. ValidateKvqsfa calls it last
// when GetNpuStrict().
void EnforceKvqsfaNpuLimits(const KvqsfaArgs& args, const KvqsfaShape& shape);

// Which entries of one sparse_indices row are read (docs/semantics.md 2.3). Query row s1
// (0 <= s1 < q_len) of a batch with q_len query rows and kv_len KV tokens may attend tokens below
// `threshold`: kv_len in sparse_mode 0, kv_len - q_len + s1 + 1 in sparse_mode 3 (right-down
// causal). The kernel reads the first min(count, ceil(threshold / block)) entries (up to the
// first -1); rows s1 < q_len - kv_len in sparse_mode 3 read nothing and are 0.
struct SelectionWindow {
  int64_t threshold = 0;
  int64_t readable = 0;
};
inline SelectionWindow RowWindow(int64_t sparse_mode, int64_t block, int64_t q_len,
                                 int64_t kv_len, int64_t s1, int64_t count) {
  SelectionWindow w;
  if (sparse_mode == 3) {
    if (s1 < q_len - kv_len) return w;
    w.threshold = kv_len - q_len + s1 + 1;
  } else {
    w.threshold = kv_len;
  }
  w.readable = std::min<int64_t>(count, (w.threshold + block - 1) / block);
  return w;
}

// Calls emit(token) for every token the row attends, in the order and multiplicity of the
// entries: entry e contributes [e*block, min(e*block + block, threshold)), nothing when it starts
// at or past the threshold (the kernel skips such blocks); -1 ends the list. `stride` steps
// between entries. Validation has proved every read entry is -1 or a block inside the cache.
template <typename Emit>
void ForEachSelectedToken(const int32_t* indices, int64_t stride, const SelectionWindow& w,
                          int64_t block, Emit&& emit) {
  for (int64_t r = 0; r < w.readable; ++r) {
    const int64_t e = indices[r * stride];
    if (e < 0) break;
    const int64_t begin = e * block;
    if (begin >= w.threshold) continue;
    const int64_t end = std::min(begin + block, w.threshold);
    for (int64_t t = begin; t < end; ++t) emit(t);
  }
}

// kvqsfa_canonicalize.cc: lowers a validated call into the canonical Problem: strides for the
// nope/rope/scale fields inside the 656-byte rows (Dequant::kPerTile), paging, and the per-row
// key lists (Problem::key_offset/q_row_base/key_index). `out` is the caller's contiguous output.
Problem CanonicalizeKvqsfa(const KvqsfaArgs& args, const KvqsfaShape& shape,
                           const TensorView& out);

}  // namespace openfia::internal
