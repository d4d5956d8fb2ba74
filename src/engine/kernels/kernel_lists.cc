// openfia: the kernel list of each instruction-set target, in priority order, and which targets
// this CPU runs. The first kernel of the active target's list that supports an item runs it
// (engine/select.cc); every list ends with the portable kernel, which runs everything the engine
// supports.
#include <array>

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1 << 14)  // Linux's bit (arch/arm64/include/uapi/asm/hwcap.h)
#endif
#endif

#include "engine/kernel.h"
#include "engine/kernels/registry.h"

namespace openfia::internal {
namespace {

constexpr int kMaxList = 16;

struct List {
  std::array<const Kernel*, kMaxList> k{};
  int n = 0;
  void Add(const Kernel* x) {
    if (x != nullptr) k[n++] = x;
  }
};

// The lists. Specialized kernels come first, each for the items it is faster on; the generic
// tile loop of the target after them; the portable kernel last.
//   - int8 full quantization takes the VPMADDWD kernel on every x86 target with AVX2 (integer
//     products either way);
//   - decode items (a few rows per KV head, every key visible) take the target's decode kernel
//     (generic/decode-inl.h: fp32 FMA products, VDPBF16PS where Bf16DotTiles() on avx512bf16,
//     integer products of int8 / int4 caches on avx512bf16 and avx2);
//   - the AMX target runs per-tile dequantized sparse items, multi-token SparseAttnSharedkv
//     items, dense bf16 prefill and other bf16 items of 16 or more rows on tile matmuls, and its
//     decode items on the AVX-512 decode kernel (fp32 FMA products: on the Intel CPUs measured,
//     VDPBF16PS runs at half the FMA's rate).
List Make(Isa isa) {
  List l;
  switch (isa) {
    case Isa::kScalar:
      break;
    case Isa::kAvx2:
      l.Add(FullQuantAvx2Kernel());
      l.Add(DecodeAvx2Kernel());
      l.Add(TileAvx2Kernel());
      break;
    case Isa::kAvx512:
      l.Add(FullQuantAvx2Kernel());
      l.Add(DecodeAvx512Kernel());
      l.Add(TileAvx512Kernel());
      break;
    case Isa::kAvx512Bf16:
      l.Add(FullQuantAvx2Kernel());
      l.Add(DecodeAvx512Bf16Kernel());
      l.Add(TileAvx512Bf16Kernel());
      break;
    case Isa::kAmx:
      l.Add(FullQuantAvx2Kernel());
      l.Add(AmxTileDequantKernel());
      l.Add(AmxSasKernel());
      l.Add(AmxPrefillKernel());
      l.Add(AmxTileKernel());
      l.Add(DecodeAvx512Kernel());
      l.Add(TileAvx512Kernel());
      break;
    case Isa::kNeon:
      l.Add(TileNeonKernel());
      break;
    case Isa::kNeonBf16:
      l.Add(TileNeonBf16Kernel());
      break;
  }
  l.Add(PortableKernel());
  return l;
}

constexpr int kIsas = 7;

}  // namespace

const Kernel* const* KernelList(Isa isa, int* count) {
  static const std::array<List, kIsas> lists = [] {
    std::array<List, kIsas> a;
    for (int i = 0; i < kIsas; ++i) a[i] = Make(static_cast<Isa>(i));
    return a;
  }();
  const List& l = lists[static_cast<int>(isa)];
  *count = l.n;
  return l.k.data();
}

const Kernel* const* AllKernels(int* count) {
  static const List all = [] {
    List a;
    for (const Kernel* k :
         {PortableKernel(), TileAvx2Kernel(), DecodeAvx2Kernel(), FullQuantAvx2Kernel(),
          TileAvx512Kernel(), DecodeAvx512Kernel(), TileAvx512Bf16Kernel(),
          DecodeAvx512Bf16Kernel(), AmxTileDequantKernel(), AmxSasKernel(), AmxPrefillKernel(),
          AmxTileKernel(), TileNeonKernel(), TileNeonBf16Kernel()})
      if (k != nullptr && a.n < kMaxList) a.Add(k);
    return a;
  }();
  *count = all.n;
  return all.k.data();
}

const VectorOps* VectorOpsOf(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return ScalarVectorOps();
    case Isa::kAvx2: return Avx2VectorOps();
    case Isa::kAvx512: return Avx512VectorOps();
    case Isa::kAvx512Bf16: return Avx512Bf16VectorOps();
    case Isa::kAmx: return AmxTileKernel() != nullptr ? Avx512VectorOps() : nullptr;
    case Isa::kNeon: return NeonVectorOps();
    case Isa::kNeonBf16: return NeonBf16VectorOps();
  }
  return nullptr;
}

bool CpuRuns(Isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:  // the AVX2 kernels convert float16 with F16C too
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return CpuRuns(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
    case Isa::kAvx512Bf16:  // the decode kernel uses VNNI too (every AVX512-BF16 CPU has it)
      return CpuRuns(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512vnni");
    case Isa::kAmx:
      return CpuRuns(Isa::kAvx512Bf16) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-bf16") && AmxTileDataGranted();
    default: return false;
  }
#elif defined(__aarch64__)
  // Advanced SIMD is part of every AArch64 CPU.
  switch (isa) {
    case Isa::kScalar:
    case Isa::kNeon: return true;
    case Isa::kNeonBf16: return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
    default: return false;
  }
#else
  return isa == Isa::kScalar;
#endif
}

}  // namespace openfia::internal
