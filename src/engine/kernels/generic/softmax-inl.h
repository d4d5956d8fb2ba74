// openfia internal: the online-softmax update, the one every kernel runs: the rules for a row's
// running maximum, the empty row, the NaN score and the rescale of its accumulators are here and
// nowhere else.
//
// Included (no include guard) inside a target's namespace after its vector traits V (Exp,
// Transpose, ...). Rows go in groups of up to V::kW, one row per lane for the state update: the
// step maxima and sums of a group's rows are reduced together (V::ReduceRows where the target has
// a tree of its own, else a transpose), and its rescale factors come from one vector exp.
//
// A step is a block of keys of some rows. For row r, with the step's scores s (scaled, biased,
// masked keys and padding at -inf), m the running maximum, l the running sum and acc the P V
// accumulators:
//   m' = max(m, max s), where a NaN step maximum is ignored here and reaches the row through its
//        P (exp(NaN - m') is NaN);
//   m' = -inf (nothing visible yet): if some score is NaN the row is NaN from now on (m' = NaN,
//        the reference's rule: a NaN in K or its antiquant parameters poisons the row), else
//        the row stays as it is and its P is 0;
//   P = exp(s - m') (times SoftmaxStep::pscale where that is not 1), stored as the step asks
//        (SoftmaxStore);
//   alpha = 0 for a row without history (m = -inf), 1 when m' == m is finite (exp(0) is exactly
//        1, so this only skips work), else exp(m - m');
//   l' = l alpha + sum exp(s - m') (unrounded), m = m', acc *= alpha (rows whose alpha is not 1,
//        NaN included).
// RunSoftmaxStep runs a whole step; kernels that interleave the phases with their products
// (amx_prefill-inl.h) call SoftmaxRowMax, SoftmaxGroup::Rule, SoftmaxRowExp and
// SoftmaxGroup::Finish themselves, in that order.

// Where a step writes its probabilities P.
struct SoftmaxStore {
  enum class Kind : uint8_t {
    kRounded,  // fp32, rounded to `pe` (bf16, f16; f32: as computed), at `pf` (nullptr: over
               // the scores)
    kBf16,     // bf16 (round to nearest even) at `p` (nullptr: over the first half of the scores)
  };
  Kind kind = Kind::kRounded;
  Elem pe = Elem::kF32;
  uint16_t* p = nullptr;  // kBf16 elsewhere: row r at p + r * ldp
  int64_t ldp = 0;
  float* pf = nullptr;  // kRounded elsewhere: row r at pf + r * ldpf
  int64_t ldpf = 0;
};

// Whether the target's traits have a row-reduction tree / a native bf16 store of their own.
template <class VV>
concept SoftmaxHasReduceRows = requires(typename VV::T* p) {
  VV::ReduceRows(p, [](typename VV::T a, typename VV::T) { return a; });
};
template <class VV>
concept SoftmaxHasReduceRows4 = requires(const typename VV::T* p) {
  VV::ReduceRows4(p, [](typename VV::T a, typename VV::T) { return a; });
};
template <class VV>
concept SoftmaxHasStoreBF16Normal =
    requires(uint16_t* p, typename VV::T e) { VV::StoreBF16Normal(p, e); };

// Lane r < kW of the result: op over the lanes of part[r] (part is overwritten). VV: V.
// With `four`, only part[0..3] are read and lanes r < 4 are meaningful (decode steps have a few
// rows: a 16-row tree would spend most of its shuffles on padding rows).
template <class VV, class Op>
inline typename VV::T SoftmaxReduceRows(typename VV::T* part, Op op, bool four = false) {
  if constexpr (SoftmaxHasReduceRows4<VV>) {
    if (four) return VV::ReduceRows4(part, op);
  }
  if constexpr (SoftmaxHasReduceRows<VV>) {
    return VV::ReduceRows(part, op);
  } else {
    VV::Transpose(part);
    typename VV::T x = part[0];
    for (int i = 1; i < VV::kW; ++i) x = op(x, part[i]);
    return x;
  }
}

template <class VV>
inline void SoftmaxStoreBf16(uint16_t* p, typename VV::T e, bool exact) {
  if constexpr (SoftmaxHasStoreBF16Normal<VV>) {
    // The probability exp never computes a subnormal: the native conversion is exact there.
    if (!exact) return VV::StoreBF16Normal(p, e);
  }
  VV::StoreBF16(p, e);
}

// The partial maxima (one vector) of a row's scores s[0, npad) times `scale` (1: as they are).
// For scale > 0, max round(scale s) = round(scale max s) (rounding is monotonic): the caller
// may pass the raw scores with scale 1 and scale the row maximum instead (SoftmaxGroup::Rule).
inline typename V::T SoftmaxRowMax(const float* s, int64_t npad, float scale = 1.f) {
  constexpr int W = V::kW;
  typename V::T vm = V::Set1(-std::numeric_limits<float>::infinity());
  if (scale == 1.f) {
    for (int64_t n = 0; n < npad; n += W) vm = V::Max(vm, V::Load(s + n));
  } else {
    const typename V::T vs = V::Set1(scale);
    for (int64_t n = 0; n < npad; n += W) vm = V::Max(vm, V::Mul(V::Load(s + n), vs));
  }
  return vm;
}

// P of one row (keys [0, npad), scores times `scale`, P = exp(x - m_new) times pscale) stored as
// `st` says (row r of its destination); returns the partial sums (one vector). kExact: V::Exp (a
// P below exp(-86.5) is kept: where the step's values hold a non-finite number, a tiny P times
// inf must be inf, not 0 x inf = NaN); else the probability exp.
template <bool kExact>
inline typename V::T SoftmaxRowExp(float* s, int64_t npad, float scale, float m_new,
                                   const SoftmaxStore& st, int64_t r, float pscale = 1.f) {
  constexpr int W = V::kW;
  const typename V::T vmn = V::Set1(m_new), vscale = V::Set1(scale), vp = V::Set1(pscale);
  typename V::T vsum = V::Zero();
  // kBf16 in place: keys [n, n + W) are read before P goes to their bytes [2n, 2n + 2W).
  uint16_t* pb = st.kind == SoftmaxStore::Kind::kBf16
                     ? (st.p != nullptr ? st.p + r * st.ldp : reinterpret_cast<uint16_t*>(s))
                     : nullptr;
  float* pf = st.pf != nullptr ? st.pf + r * st.ldpf : s;
  for (int64_t n = 0; n < npad; n += W) {
    typename V::T x = V::Load(s + n);
    if (scale != 1.f) x = V::Mul(x, vscale);
    typename V::T e = V::template Exp<!kExact>(V::Sub(x, vmn));
    if (pscale != 1.f) e = V::Mul(e, vp);
    vsum = V::Add(vsum, e);
    if (pb != nullptr) {
      SoftmaxStoreBf16<V>(pb + n, e, kExact);
      continue;
    }
    if (st.pe == Elem::kBF16) e = V::RoundBF16(e);
    else if (st.pe == Elem::kF16) e = V::RoundF16(e);
    V::Store(pf + n, e);
  }
  return vsum;
}

// P = 0 for a row with nothing visible yet (its state stays).
inline void SoftmaxRowZero(float* s, int64_t npad, const SoftmaxStore& st, int64_t r) {
  if (st.kind == SoftmaxStore::Kind::kBf16) {
    uint16_t* pb = st.p != nullptr ? st.p + r * st.ldp : reinterpret_cast<uint16_t*>(s);
    std::fill(pb, pb + npad, uint16_t{0});
    return;
  }
  float* pf = st.pf != nullptr ? st.pf + r * st.ldpf : s;
  std::fill(pf, pf + npad, 0.f);
}

// The state update of a group of g <= kW rows, lane i being row i.
struct SoftmaxGroup {
  static constexpr int W = V::kW;
  alignas(64) float m_new[W];
  alignas(64) float alpha[W];
  bool dead[W];
  int g = 0;

  // The rules before the exponentials: from the rows' step maxima tmax (lanes; times
  // max_scale when the maxima were taken on raw scores, else 1) and their running maxima m[i].
  // has_nan(i) says whether row i's live scores hold a NaN; asked only for a row whose new
  // maximum is -inf.
  template <class HasNan>
  void Rule(typename V::T tmax, float max_scale, const float* m, int rows, HasNan has_nan) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    g = rows;
    if (max_scale != 1.f) tmax = V::Mul(tmax, V::Set1(max_scale));
    alignas(64) float t[W], mold[W];
    V::Store(t, tmax);
    for (int i = 0; i < g; ++i) {
      mold[i] = m[i];
      float mn = std::isnan(t[i]) ? mold[i] : std::max(mold[i], t[i]);
      dead[i] = false;
      if (mn == kNegInf) {
        if (has_nan(i)) mn = std::numeric_limits<float>::quiet_NaN();
        else dead[i] = true;
      }
      m_new[i] = mn;
    }
    for (int i = g; i < W; ++i) {  // lanes without a row
      mold[i] = m_new[i] = 0.f;
      dead[i] = false;
    }
    V::Store(alpha, V::Exp(V::Sub(V::Load(mold), V::Load(m_new))));
    for (int i = 0; i < g; ++i) {
      if (mold[i] == kNegInf) alpha[i] = 0.f;
      else if (mold[i] == m_new[i] && std::isfinite(mold[i])) alpha[i] = 1.f;
    }
  }

  // The rules after the exponentials: l, m and the accumulators (acc == nullptr: not written
  // yet, so nothing to rescale; every row is then without history) from the rows' step sums
  // (lanes); aux (when not null): one more per-row accumulator, rescaled like acc.
  void Finish(typename V::T sums, float* m, float* l, float* acc, int64_t acc_stride,
              int64_t ldv, float* aux = nullptr) const {
    alignas(64) float sum[W];
    V::Store(sum, sums);
    for (int i = 0; i < g; ++i) {
      if (dead[i]) continue;
      l[i] = l[i] * alpha[i] + sum[i];
      m[i] = m_new[i];
      if (aux != nullptr && alpha[i] != 1.f) aux[i] *= alpha[i];
      if (acc != nullptr && alpha[i] != 1.f) {
        float* a = acc + i * acc_stride;
        const typename V::T va = V::Set1(alpha[i]);
        for (int64_t d = 0; d < ldv; d += W) V::Store(a + d, V::Mul(V::Load(a + d), va));
      }
    }
  }
};

// One step of `rows` rows over keys [0, npad) (a multiple of V::kW).
struct SoftmaxStep {
  float* s = nullptr;  // [rows][lds]: the step's scores (P over them unless store.p is set)
  int64_t lds = 0;
  int64_t rows = 0;
  int64_t nk = 0;    // live keys: a NaN is looked for in [0, nk); [nk, npad) hold -inf
  int64_t npad = 0;
  float scale = 1.f;  // multiplies every score as it is read (final scores, e.g. biased: 1)
  SoftmaxStore store;
  bool exact = false;  // SoftmaxRowExp<true>
  float* m = nullptr;  // [rows]
  float* l = nullptr;  // [rows]
  // The rows' accumulators; nullptr when nothing is accumulated yet (every row is then without
  // history, and the caller's P V initializes them).
  float* acc = nullptr;
  int64_t acc_stride = 0, ldv = 0;
  float* aux = nullptr;  // [rows] or null: one more per-row accumulator, rescaled like acc
  // Multiplies every P (and so l, acc and aux alike: acc / l is unchanged) after its exp: a
  // power of two below 1 keeps the P V sums that much further from FLT_MAX
  // (RunRerunningOverflow), 1 the usual P. P below FLT_MIN / pscale then lands subnormal; the
  // bf16 store flushes it to 0 (the dot products would read it so), the exact exp keeps it.
  float pscale = 1.f;

  // The rows' running state o, accumulators of ldv_ channels.
  void State(const RowStates& o, int64_t ldv_) {
    m = o.m;
    l = o.l;
    acc = o.acc;
    acc_stride = o.acc_stride;
    ldv = ldv_;
  }
};

inline void RunSoftmaxStep(const SoftmaxStep& st) {
  constexpr int W = V::kW;
  // Maxima of raw scores, scaled once per row (SoftmaxRowMax), where the scale is positive.
  const bool raw_max = st.scale > 0.f;
  for (int64_t r0 = 0; r0 < st.rows; r0 += W) {
    const int g = static_cast<int>(std::min<int64_t>(W, st.rows - r0));
    const bool four = g <= 4 && SoftmaxHasReduceRows4<V>;
    const int parts = four ? 4 : W;  // partial vectors the reductions read
    typename V::T part[W];
    for (int i = 0; i < parts; ++i)
      part[i] = i < g ? SoftmaxRowMax(st.s + (r0 + i) * st.lds, st.npad, raw_max ? 1.f : st.scale)
                      : V::Set1(-std::numeric_limits<float>::infinity());
    SoftmaxGroup grp;
    grp.Rule(SoftmaxReduceRows<V>(part, [](auto a, auto b) { return V::Max(a, b); }, four),
             raw_max ? st.scale : 1.f, st.m + r0, g, [&](int i) {
               const float* s = st.s + (r0 + i) * st.lds;
               for (int64_t n = 0; n < st.nk; ++n)
                 if (std::isnan(s[n])) return true;
               return false;
             });
    for (int i = 0; i < parts; ++i) {
      part[i] = V::Zero();
      if (i >= g) continue;
      float* s = st.s + (r0 + i) * st.lds;
      if (grp.dead[i]) {
        SoftmaxRowZero(s, st.npad, st.store, r0 + i);
        continue;
      }
      part[i] = st.exact ? SoftmaxRowExp<true>(s, st.npad, st.scale, grp.m_new[i], st.store, r0 + i,
                                               st.pscale)
                         : SoftmaxRowExp<false>(s, st.npad, st.scale, grp.m_new[i], st.store,
                                                r0 + i, st.pscale);
    }
    grp.Finish(SoftmaxReduceRows<V>(part, [](auto a, auto b) { return V::Add(a, b); }, four),
               st.m + r0, st.l + r0, st.acc ? st.acc + r0 * st.acc_stride : nullptr,
               st.acc_stride, st.ldv, st.aux ? st.aux + r0 : nullptr);
  }
}
