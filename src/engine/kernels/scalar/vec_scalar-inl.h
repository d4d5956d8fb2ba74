// openfia internal: the scalar "vector" traits (one lane): the portable kernel's arithmetic.
// Included (no include guard) inside the scalar target's namespace.

struct ScalarVec {
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
  static T Min(T a, T b) { return std::isnan(b) ? b : (b < a ? b : a); }
  static float ReduceMax(T a) { return a; }
  static float ReduceMin(T a) { return a; }
  static float ReduceSum(T a) { return a; }
  // The vector targets' contract (vec_avx512-inl.h Exp) on the C library's exp.
  template <bool kProb = false>
  static T Exp(T a) {
    if constexpr (kProb) return a < expp::kLo ? 0.f : std::exp(a);  // NaN: exp(NaN)
    return std::exp(a);
  }
  static T RoundBF16(T a) { return cvt::BF16ToF32(cvt::F32ToBF16(a)); }
  static void StoreBF16(uint16_t* p, T a) { *p = cvt::F32ToBF16(a); }
  static T RoundF16(T a) { return cvt::F16ToF32(cvt::F32ToF16(a)); }
  static T LoadF16(const uint16_t* p) { return cvt::F16ToF32(*p); }
  static T LoadBF16(const uint16_t* p) { return cvt::BF16ToF32(*p); }
  static T LoadI8(const int8_t* p) { return static_cast<float>(*p); }
  static T LoadI4(const uint8_t* p) { return cvt::Load(p, Elem::kI4, 0); }  // kW == 1: unused
  static void Transpose(T*) {}
};
