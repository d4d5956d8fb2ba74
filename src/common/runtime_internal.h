// openfia internal: runtime settings not in the public header.
#pragma once
#include <string>
namespace openfia {
// The SIMD cap requested through SetSimdCap / OPENFIA_SIMD ("" = best available).
std::string SimdCap();
// Whether the cap names the avx512bf16 target itself (SetSimdCap("avx512bf16") or
// OPENFIA_SIMD=avx512bf16): its VDPBF16PS dot tiles then run on every CPU that has the
// instruction, not only where it is the faster product (engine/select.cc Bf16DotTiles).
bool SimdCapIsAvx512Bf16();
// The kernel forced through SetKernel / OPENFIA_KERNEL ("" = none); validated where it is used.
std::string KernelSetting();
void SetKernelSetting(const std::string& name);
}  // namespace openfia
