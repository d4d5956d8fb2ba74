// openfia: element types accepted by the public API.
#pragma once

#include <cstdint>
#include <string_view>

#include "openfia/export.h"

namespace openfia {

// Element type of a TensorView. int4 is not listed: torch_npu passes packed int4 as int32
// (eight two's-complement nibbles per word, low nibble first); the operator decides from context
// whether an int32 key/value is an int4 cache.
enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kBool,
  kInt32,
  kInt64,
  kUInt64,
  kFloat8E4M3,  // OCP float8 e4m3fn (no infinities, 0x7F/0xFF are NaN)
  kHiFloat8,    // Ascend HiFloat8
};

// Size of one element in bytes.
constexpr int64_t ElementSize(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
    case DType::kUInt64:
      return 8;
    default:
      return 1;
  }
}

// Lower-case name as torch spells it ("float16", "bfloat16", "float8_e4m3fn", "hifloat8", ...).
OPENFIA_API std::string_view DTypeName(DType t);

}  // namespace openfia
