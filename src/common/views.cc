// openfia internal: shared rules on caller views (common/views.h).
#include "common/views.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "common/check.h"

namespace openfia::internal {

void CheckWellFormed(const TensorView& t, const char* name) {
  OPENFIA_CHECK(t.strides.size() == t.sizes.size(), name,
                "strides must have one entry per dimension", "sizes ", t.sizes, ", strides ",
                t.strides);
  bool empty = false;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    OPENFIA_CHECK(t.sizes[i] >= 0, name, "sizes must be non-negative", t.shape_string());
    OPENFIA_CHECK(t.strides[i] >= 0, name, "strides must be non-negative", "strides ",
                  t.strides);
    empty = empty || t.sizes[i] == 0;
  }
  if (empty) return;
  constexpr int64_t kMax = int64_t{1} << 56;
  int64_t n = 1, last = 0;  // element count, offset of the last element
  bool ovf = false;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    int64_t term = 0;
    ovf = ovf || __builtin_mul_overflow(n, t.sizes[i], &n) ||
          __builtin_mul_overflow(t.sizes[i] - 1, t.strides[i], &term) ||
          __builtin_add_overflow(last, term, &last);
  }
  OPENFIA_CHECK(!ovf && n <= kMax && last < kMax, name,
                "the element count and the addressed elements must stay below 2^56", "sizes ",
                t.sizes, ", strides ", t.strides);
  OPENFIA_CHECK(t.data != nullptr, name,
                "data must not be a null pointer when the tensor has elements", "null data for ",
                t.shape_string());
}

ByteRange BytesOf(const TensorView& t) {
  if (t.numel() == 0 || t.data == nullptr) return {};
  int64_t last = 0;
  for (size_t i = 0; i < t.sizes.size(); ++i) last += (t.sizes[i] - 1) * t.strides[i];
  const auto lo = reinterpret_cast<uintptr_t>(t.data);
  return {lo, lo + static_cast<uintptr_t>((last + 1) * ElementSize(t.dtype))};
}

bool SameView(const TensorView& x, const TensorView& y) {
  return x.data == y.data && x.dtype == y.dtype && x.sizes == y.sizes && x.strides == y.strides;
}

void CheckNoSelfOverlap(const TensorView& t, const char* name) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (size_t i = 0; i < t.sizes.size(); ++i)
    if (t.sizes[i] > 1) dims.emplace_back(t.strides[i], t.sizes[i]);
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements the smaller dimensions cover
  for (const auto& [stride, size] : dims) {
    OPENFIA_CHECK(stride >= span, name,
                  "an output must not overlap itself (no zero or interleaved strides)",
                  "sizes ", t.sizes, ", strides ", t.strides);
    span = stride * size;
  }
}

void CheckAliasOrDisjoint(const TensorView& dst, const char* dst_name, const TensorView& src,
                          const char* src_name, bool may_alias) {
  if (!src.defined() || (may_alias && SameView(dst, src))) return;
  OPENFIA_CHECK(!Overlap(BytesOf(dst), BytesOf(src)), dst_name,
                may_alias ? Str("must be '", src_name,
                                "' itself (same data, dtype and strides) or not overlap it")
                          : Str("must not overlap '", src_name, "'"),
                "sizes ", dst.sizes, ", strides ", dst.strides, " against sizes ", src.sizes,
                ", strides ", src.strides);
}

void CheckOutputsDisjoint(const std::vector<NamedView>& outputs,
                          const std::vector<NamedView>& inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    if (!o->view->defined()) continue;
    for (const NamedView& in : inputs)
      CheckAliasOrDisjoint(*o->view, o->name, *in.view, in.name, false);
    for (auto p = outputs.begin(); p != o; ++p)
      CheckAliasOrDisjoint(*o->view, o->name, *p->view, p->name, false);
  }
}
void CheckOutputsDisjoint(std::initializer_list<NamedView> outputs,
                          std::initializer_list<NamedView> inputs) {
  CheckOutputsDisjoint(std::vector<NamedView>(outputs), std::vector<NamedView>(inputs));
}

TensorView Snapshot::Take(const TensorView& t, const char* name) {
  if (!t.defined()) return t;
  CheckWellFormed(t, name);
  const int64_t n = t.numel(), es = ElementSize(t.dtype);
  TensorView copy = t;
  copy.strides = TensorView::ContiguousStrides(t.sizes);
  if (n == 0) return copy;  // keeps the caller's pointer: nothing is ever read through it
  std::unique_ptr<uint8_t[]> buf;
  try {
    buf = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(n * es));
  } catch (const std::bad_alloc&) {
    FailAlloc(Str("the copy of '", name, "'"), n * es);
  }
  // Row-major walk over the caller's strides, the innermost dimension copied as a run.
  const auto* src = static_cast<const uint8_t*>(t.data);
  const int64_t dims = t.dim();
  const int64_t inner = dims > 0 ? t.sizes[dims - 1] : 1;
  const int64_t inner_stride = dims > 0 ? t.strides[dims - 1] : 1;
  std::vector<int64_t> idx(std::max<int64_t>(dims - 1, 0), 0);
  uint8_t* dst = buf.get();
  for (int64_t row = 0; row < n / inner; ++row) {
    int64_t off = 0;
    for (int64_t d = 0; d + 1 < dims; ++d) off += idx[d] * t.strides[d];
    if (inner_stride == 1) {
      std::memcpy(dst, src + off * es, static_cast<size_t>(inner * es));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + i * es, src + (off + i * inner_stride) * es, static_cast<size_t>(es));
    }
    dst += inner * es;
    for (int64_t d = dims - 2; d >= 0; --d) {  // next row index
      if (++idx[d] < t.sizes[d]) break;
      idx[d] = 0;
    }
  }
  copy.data = buf.get();
  buffers_.push_back(std::move(buf));
  return copy;
}

}  // namespace openfia::internal
