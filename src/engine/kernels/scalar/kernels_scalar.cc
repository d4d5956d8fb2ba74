// openfia: the scalar target and the portable kernel (always built): the generic tile loop and
// the two-pass int8 full-quantization kernel on scalar floats. It runs every item of every problem
// the engine supports, so it ends every kernel list.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/convert.h"
#include "common/problem.h"
#include "engine/kernel.h"
#include "engine/kernels/generic/common.h"
#include "engine/kernels/generic/support.h"
#include "engine/kernels/generic/tile_scratch.h"
#include "engine/kernels/registry.h"

namespace openfia::internal::scalar_target {

struct V {
  static constexpr int kW = 1;
  using T = float;
  static T Zero() { return 0.f; }
  static T Set1(float x) { return x; }
  static T Load(const float* p) { return *p; }
  static void Store(float* p, T x) { *p = x; }
  static T Fma(T a, T b, T c) { return a * b + c; }  // baseline x86-64 has no FMA instruction
  static T Mul(T a, T b) { return a * b; }
  static T Add(T a, T b) { return a + b; }
  static T Sub(T a, T b) { return a - b; }
  static T Max(T a, T b) { return std::isnan(b) ? b : (a < b ? b : a); }
  static float ReduceMax(T a) { return a; }
  static float ReduceSum(T a) { return a; }
  static T Exp(T a) { return std::exp(a); }
  static T ExpP(T a) { return a < expp::kLo ? 0.f : std::exp(a); }  // NaN: exp(NaN)
  static T RoundBF16(T a) { return cvt::BF16ToF32(cvt::F32ToBF16(a)); }
  static T RoundF16(T a) { return cvt::F16ToF32(cvt::F32ToF16(a)); }
  static T LoadF16(const uint16_t* p) { return cvt::F16ToF32(*p); }
  static T LoadBF16(const uint16_t* p) { return cvt::BF16ToF32(*p); }
  static T LoadI8(const int8_t* p) { return static_cast<float>(*p); }
  static T LoadI4(const uint8_t* p) { return cvt::Load(p, Elem::kI4, 0); }  // kW == 1: unused
  static void Transpose(T*) {}
};

#include "engine/kernels/generic/attend-inl.h"

const char* PortableSupports(const Problem& p, const WorkItem* w) {
  if (const char* why = p.full_quant ? FullQuantSupports(p) : TileLoopSupports(p)) return why;
  return w != nullptr ? OneTokenPerSparseItem(p, *w) : nullptr;
}

void PortableRun(const Problem& p, const WorkItem& w, void* scratch, const RowStates& out) {
  if (p.full_quant) return AttendFullQuant(p, w, TileOf(scratch), out);
  AttendImpl(p, w, TileOf(scratch), out);
}

const Kernel kPortable = {"portable", Isa::kScalar, &PortableSupports, &TileScratchSize,
                          &PrepareTileScratch, &PortableRun};
// No vector row helpers: the runner's own loops write the rows.
const VectorOps kOps = {"scalar", &ExpArray, &ExpPArray, nullptr, nullptr};

}  // namespace openfia::internal::scalar_target

namespace openfia::internal {
const Kernel* PortableKernel() { return &scalar_target::kPortable; }
const VectorOps* ScalarVectorOps() { return &scalar_target::kOps; }
}  // namespace openfia::internal
