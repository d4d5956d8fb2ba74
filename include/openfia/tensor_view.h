// openfia: non-owning strided view of a tensor in host memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "openfia/export.h"
#include "openfia/dtype.h"

namespace openfia {

// A view of memory owned by the caller. Strides are in elements (as torch counts them), not bytes.
// A default-constructed view is "absent" (the NPU API's None).
struct OPENFIA_API TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  TensorView() = default;
  TensorView(void* data, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {});

  bool defined() const { return !sizes.empty() || data != nullptr; }
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t size(int64_t i) const { return sizes[i < 0 ? i + dim() : i]; }
  int64_t stride(int64_t i) const { return strides[i < 0 ? i + dim() : i]; }
  int64_t numel() const;
  bool is_contiguous() const;
  // "[2, 8, 128]"
  std::string shape_string() const;
  // Row-major strides for `sizes`.
  static std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes);
};

}  // namespace openfia
