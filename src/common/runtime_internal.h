// openfia internal: runtime settings not in the public header.
#pragma once
#include <string>
namespace openfia {
// The SIMD cap requested through SetSimdCap / OPENFIA_SIMD ("" = best available).
std::string SimdCap();
}  // namespace openfia
