// The compiler's native IEEE half type for the tests' independent float16 conversions:
// ARM's __fp16 storage type on AArch64 (GCC 12 has no C++ _Float16 there), _Float16 elsewhere
// (GCC on x86-64). Both convert float -> half rounding to nearest even and keep NaN / Inf.
#pragma once

#if defined(__aarch64__)
using NativeHalf = __fp16;
#else
using NativeHalf = _Float16;
#endif
