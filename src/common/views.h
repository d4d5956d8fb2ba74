// openfia internal: rules on caller-provided views that every operator shares: a view is
// well formed, the bytes it addresses, outputs that must not overlap inputs, and the snapshot of
// the index tensors (memory-addressing values are read once into openfia's memory).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "openfia/tensor_view.h"

namespace openfia::internal {

// Sizes non-negative, one non-negative stride per dimension, every addressed element offset and
// the element count below 2^56, data present when there are elements. Throws Error naming `name`.
void CheckWellFormed(const TensorView& t, const char* name);

// Byte range [lo, hi) a well-formed view addresses (lo == hi for a view without elements).
struct ByteRange {
  uintptr_t lo = 0, hi = 0;
  bool empty() const { return lo == hi; }
};
ByteRange BytesOf(const TensorView& t);
inline bool Overlap(const ByteRange& a, const ByteRange& b) {
  return !a.empty() && !b.empty() && a.lo < b.hi && b.lo < a.hi;
}
bool SameView(const TensorView& x, const TensorView& y);

// An output's elements must have distinct addresses (no zero or interleaved strides).
void CheckNoSelfOverlap(const TensorView& t, const char* name);

// `dst` must not share a byte with `src` (absent: nothing to check); with may_alias it may also
// be `src` itself (same data, dtype, sizes and strides: an in-place update).
void CheckAliasOrDisjoint(const TensorView& dst, const char* dst_name, const TensorView& src,
                          const char* src_name, bool may_alias);

// A named view of a call's argument list.
struct NamedView {
  const char* name;
  const TensorView* view;
};
// Every output is disjoint from every input and from the other outputs (an output written while
// the call reads an input it overlaps would change the input under the computation).
void CheckOutputsDisjoint(std::initializer_list<NamedView> outputs,
                          std::initializer_list<NamedView> inputs);
void CheckOutputsDisjoint(const std::vector<NamedView>& outputs,
                          const std::vector<NamedView>& inputs);

// Contiguous copies, in memory this object owns, of the caller's index tensors (block tables,
// sequence lengths, sparse indices, metadata words). Validation and computation read only the
// copies, so a caller that changes an index tensor during a call (another thread updating a
// block table) cannot make openfia read outside the memory it validated: the call sees one
// consistent set of values. Views handed out stay valid while the Snapshot lives.
class Snapshot {
 public:
  // The copy of `t` (t itself when absent); checks t is well formed first (CheckWellFormed).
  TensorView Take(const TensorView& t, const char* name);

 private:
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
};

}  // namespace openfia::internal
