// openfia tests: owns the memory of the tensors of one public-API call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "openfia/openfia.h"

namespace openfia::testutil {

// The byte span a view addresses (0 for an absent or empty one).
inline int64_t SpanBytes(const TensorView& t) {
  if (!t.defined() || t.data == nullptr) return 0;
  int64_t span = 1;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    if (t.sizes[i] <= 0) return 0;
    span += (t.sizes[i] - 1) * std::max<int64_t>(0, t.strides[i]);
  }
  return span * ElementSize(t.dtype);
}

// A test that relabels a view (another dtype, larger sizes) to check the error for it must still
// hand the library addressable memory: the operators copy their index tensors before they
// validate them. The constructor notes what each view addresses; Back() gives every view that now
// addresses more of its memory a fresh buffer holding its old bytes, zeros after.
class Regrow {
 public:
  explicit Regrow(std::vector<TensorView*> views) : views_(std::move(views)) {
    for (TensorView* v : views_) {
      before_.push_back(SpanBytes(*v));
      data_.push_back(v->data);
    }
  }
  void Back() {
    for (size_t i = 0; i < views_.size(); ++i) {
      TensorView& v = *views_[i];
      const int64_t now = SpanBytes(v);
      if (v.data != data_[i] || now <= before_[i]) continue;  // new memory, or no more bytes
      bufs_.emplace_back(static_cast<size_t>(now), 0);
      if (before_[i] > 0) std::memcpy(bufs_.back().data(), v.data, static_cast<size_t>(before_[i]));
      v.data = bufs_.back().data();
    }
  }

 private:
  std::vector<TensorView*> views_;
  std::vector<int64_t> before_;
  std::vector<void*> data_;
  std::deque<std::vector<uint8_t>> bufs_;
};

class Arena {
 public:
  // A zero-filled tensor.
  TensorView T(DType dt, std::vector<int64_t> sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    bufs_.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 1) * ElementSize(dt)), 0);
    return TensorView(bufs_.back().data(), dt, std::move(sizes));
  }
  TensorView I64(int64_t v) {
    TensorView t = T(DType::kInt64, {1});
    std::memcpy(t.data, &v, 8);
    return t;
  }
  TensorView F32(std::vector<int64_t> sizes, float v) {
    TensorView t = T(DType::kFloat32, std::move(sizes));
    for (int64_t i = 0; i < t.numel(); ++i) static_cast<float*>(t.data)[i] = v;
    return t;
  }
  // The documented compressed causal mask of sparse modes 2-4: 1 strictly above the diagonal.
  TensorView CausalMask(DType dt = DType::kBool, std::vector<int64_t> sizes = {2048, 2048}) {
    TensorView t = T(dt, std::move(sizes));
    auto* p = static_cast<uint8_t*>(t.data);
    for (int64_t r = 0; r < 2048; ++r)
      for (int64_t c = 0; c < 2048; ++c) p[r * 2048 + c] = c > r;
    return t;
  }

 private:
  std::deque<std::vector<uint8_t>> bufs_;
};

}  // namespace openfia::testutil
