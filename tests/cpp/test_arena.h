// openfia tests: owns the memory of the tensors of one public-API call.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "openfia/openfia.h"

namespace openfia::testutil {

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
