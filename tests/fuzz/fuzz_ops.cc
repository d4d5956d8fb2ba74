// openfia fuzz target: random valid and invalid calls of FusedInferAttentionScore,
// KvQuantSparseFlashAttention, SparseAttnSharedkv and SparseAttnSharedkvMetadata.
//
// Each call is drawn from its seed: a valid call of random geometry (shapes, layouts, dtypes,
// paging, masks, lengths, tile-quantized KV formats, sparse indices, sinks, metadata), then, for
// half of the seeds, one to three random changes towards an invalid call (an index, block id,
// length or metadata word out of range; a size, stride or dtype changed over fresh memory; a
// tensor absent or without data; an extreme scalar or an unknown layout). Every call must either
// throw openfia::Error naming an argument (never an internal error, never another exception) or
// be accepted; an accepted call runs on the engine with 1 and 3 threads (bitwise equal) and on the
// float64 reference, and the two must agree: NaN and infinity positions equal, every finite
// element within its bound (the independent oracle's per-element bound for an unchanged call;
// for a changed one 16 ulps of the output dtype plus 2^-10 of the output's largest magnitude).
// Calls run in forked children, a batch per child: a crash, an ASan report or a hang (alarm)
// names the seed, which `--seed S --calls 1` replays.
//
//   openfia_fuzz [--seed S] [--calls N] [--seconds T] [--batch K]
//
// (default: seed 1, 200 calls, 16 per child). Prints calls per second and the outcome counts.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/numeric.h"
#include "openfia/openfia.h"
#include "settings_scope.h"
#include "test_arena.h"
#include "test_kvqsfa_util.h"
#include "test_sas_fixture.h"

namespace openfia {
namespace {

struct Options {
  uint64_t seed = 1;
  int64_t calls = 200;
  double seconds = 0;  // > 0: run until then instead of a call count
  int64_t batch = 16;
};
Options g_opt;

constexpr int64_t kMaxOutputBytes = 64 << 20;  // a changed call with larger outputs is skipped
constexpr unsigned kBatchAlarmS = 300;         // a child running longer than this hangs

class Rng {
 public:
  explicit Rng(uint64_t seed) : r_(seed * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull) {}
  int64_t Int(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(r_);
  }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(r_); }
  template <class T>
  T Pick(std::initializer_list<T> v) {
    return *(v.begin() + Int(0, static_cast<int64_t>(v.size()) - 1));
  }
  float Unit() { return std::uniform_real_distribution<float>(-1.f, 1.f)(r_); }
  uint32_t U32() { return static_cast<uint32_t>(r_()); }

 private:
  std::mt19937_64 r_;
};

// ---- the outputs of one run ----------------------------------------------------------------

struct Output {
  DType dtype;
  std::vector<uint8_t> bytes;
  int64_t numel() const { return static_cast<int64_t>(bytes.size()) / ElementSize(dtype); }
  double At(int64_t i) const {
    return internal::LoadDouble(bytes.data(), internal::ElemOf(dtype), i);
  }
};
using Outputs = std::vector<Output>;

// Unit roundoff of an output dtype.
double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kFloat16: return 0x1p-11;
    case DType::kBFloat16: return 0x1p-8;
    case DType::kInt8: return 0.5;
    default: return 0x1p-24;
  }
}

// ---- an operator call under test ----------------------------------------------------------------

class Call {
 public:
  virtual ~Call() = default;
  virtual const char* Op() const = 0;
  // Validates (the output spec): throws what the library throws; false when the outputs would be
  // too large to allocate here.
  virtual bool Spec() = 0;
  // Runs into fresh outputs (filled with garbage first) and returns them.
  virtual Outputs Run() = 0;
  // After Run() of an unchanged call: the outputs against the call's independent oracle.
  virtual void CheckOracle(const Outputs& o) = 0;
  // Every tensor argument, and those whose values address memory (lengths, block ids, indices,
  // metadata words), for the changes.
  virtual std::vector<TensorView*> Tensors() = 0;
  virtual std::vector<TensorView*> Indices() = 0;
  // One change of a scalar argument.
  virtual void MutateScalar(Rng& r) = 0;
  // The largest |V| the call's value tensors hold as they are now (0: not known), for the
  // bound of a changed call.
  virtual double VMax() = 0;
  // Whether the outputs may not depend on the thread count (a plan for "as many workers as
  // threads" does).
  virtual bool ThreadInvariant() const { return true; }

  testutil::Arena arena;
};

// Fresh memory for `t` (its possibly new sizes, dtype and strides), filled with small values of
// its dtype: integers in [-2, 64], floats in [-2, 2], other bytes random.
void Refill(TensorView* t, Rng& r, testutil::Arena& arena) {
  int64_t span = 1;
  for (size_t i = 0; i < t->sizes.size(); ++i) {
    if (t->sizes[i] <= 0) return void(t->data = nullptr);
    span += (t->sizes[i] - 1) * std::max<int64_t>(0, t->strides[i]);
  }
  const int64_t es = ElementSize(t->dtype);
  TensorView mem = arena.T(DType::kUInt8, {span * es});
  auto* p = static_cast<uint8_t*>(mem.data);
  for (int64_t i = 0; i < span; ++i) {
    switch (t->dtype) {
      case DType::kInt32: {
        const int32_t v = static_cast<int32_t>(r.Int(-2, 64));
        std::memcpy(p + 4 * i, &v, 4);
        break;
      }
      case DType::kInt64: case DType::kUInt64: {
        const int64_t v = r.Int(-2, 64);
        std::memcpy(p + 8 * i, &v, 8);
        break;
      }
      case DType::kFloat32: case DType::kFloat16: case DType::kBFloat16:
        internal::StoreFloat(p, internal::ElemOf(t->dtype), i, 2.f * r.Unit());
        break;
      case DType::kBool: p[i] = static_cast<uint8_t>(r.Int(0, 1)); break;
      default:
        for (int64_t b = 0; b < es; ++b) p[es * i + b] = static_cast<uint8_t>(r.U32());
    }
  }
  t->data = p;
}

// Calls fn(element offset) for every element of a well-formed view, row-major.
template <class F>
void ForEachElement(const TensorView& t, const F& fn) {
  if (t.data == nullptr || t.numel() == 0 || t.strides.size() != t.sizes.size()) return;
  std::vector<int64_t> idx(t.sizes.size(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    fn(off);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// max |x| of a float view (0 for another dtype or an absent view).
double MaxAbs(const TensorView& t) {
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16)
    return 0;
  double m = 0;
  const internal::Elem e = internal::ElemOf(t.dtype);
  ForEachElement(t, [&](int64_t off) {
    m = std::max(m, std::fabs(internal::LoadDouble(t.data, e, off)));
  });
  return m;
}

// One random change of a call (see the header). Returns a description.
std::string Mutate(Call& c, Rng& r) {
  std::vector<TensorView*> present;
  for (TensorView* t : c.Tensors())
    if (t->defined()) present.push_back(t);
  std::vector<TensorView*> idx;
  for (TensorView* t : c.Indices())
    if (t->defined() && t->numel() > 0 && t->data != nullptr &&
        (t->dtype == DType::kInt32 || t->dtype == DType::kInt64))
      idx.push_back(t);
  const auto pick = [&](std::vector<TensorView*>& v) {
    return v[static_cast<size_t>(r.Int(0, static_cast<int64_t>(v.size()) - 1))];
  };
  const int64_t kind = r.Int(0, 9);
  if (kind <= 3 && !idx.empty()) {  // a value that addresses memory, in place
    TensorView* t = pick(idx);
    // Element n of the view, in its own memory (row-major over its strides).
    int64_t n = r.Int(0, t->numel() - 1), off = 0;
    for (int64_t d = t->dim() - 1; d >= 0; --d) {
      off += (n % t->sizes[d]) * t->strides[d];
      n /= t->sizes[d];
    }
    const int64_t v = r.Pick<int64_t>({-1, -2, 0, 1, 63, 64, 65, 1000, 1 << 20, INT32_MAX,
                                       INT32_MIN, r.Int(0, 300)});
    if (t->dtype == DType::kInt32) static_cast<int32_t*>(t->data)[off] = static_cast<int32_t>(v);
    else static_cast<int64_t*>(t->data)[off] = v;
    return "index value";
  }
  if (kind == 9 || present.empty()) {
    c.MutateScalar(r);
    return "scalar";
  }
  TensorView* t = pick(present);
  switch (kind) {
    case 4: {  // one size
      if (t->sizes.empty()) return "none";
      int64_t& s = t->sizes[r.Int(0, t->dim() - 1)];
      s = r.Pick<int64_t>({0, 1, 2, 3, 7, 16, 33, s - 1, s + 1, 2 * s, s / 2});
      t->strides = TensorView::ContiguousStrides(t->sizes);
      Refill(t, r, c.arena);
      return "size";
    }
    case 5:  // dtype
      t->dtype = static_cast<DType>(r.Int(0, static_cast<int64_t>(DType::kHiFloat8)));
      t->strides = TensorView::ContiguousStrides(t->sizes);
      Refill(t, r, c.arena);
      return "dtype";
    case 6: {  // a stride: zero (broadcast) or padded
      if (t->sizes.empty()) return "none";
      const int64_t d = r.Int(0, t->dim() - 1);
      t->strides = TensorView::ContiguousStrides(t->sizes);
      t->strides[d] = r.Coin() ? 0 : t->strides[d] * 2 + 1;
      Refill(t, r, c.arena);
      return "stride";
    }
    case 7:
      *t = TensorView();
      return "absent";
    default:
      if (t->numel() == 0) return "none";
      t->data = nullptr;
      return "null data";
  }
}

// ---- FusedInferAttentionScore: float K/V of every layout, GQA, paging, masks, lengths --------

class FiaCall : public Call {
 public:
  explicit FiaCall(Rng& r) {
    const DType dt = r.Pick({DType::kFloat16, DType::kBFloat16, DType::kFloat32});
    const std::string layout = r.Pick<std::string>({"BSH", "BSND", "BNSD", "BNSD_BSND", "TND"});
    const int64_t B = r.Int(1, 3), n = r.Pick<int64_t>({1, 2, 4, 8});
    const int64_t kvn = n / r.Pick<int64_t>({1, n}), d = r.Pick<int64_t>({16, 64, 128});
    // (BNSD_BSND needs Q_S > 1.)
    const int64_t s = r.Coin(0.4) && layout != "BNSD_BSND" ? 1 : r.Int(2, 8);
    const int64_t kv_s = r.Int(1, 160);
    const bool paged = layout != "TND" && layout != "BNSD_BSND" && r.Coin(0.3);
    a_.num_heads = n;
    a_.num_key_value_heads = kvn;
    a_.input_layout = layout;
    a_.scale = r.Pick({0.05, 0.125, 0.3});
    a_.softmax_lse_flag = r.Coin();
    const auto fill = [&](TensorView t) {
      for (int64_t i = 0; i < t.numel(); ++i)
        internal::StoreFloat(t.data, internal::ElemOf(dt), i, r.Unit());
      return t;
    };
    const bool tnd = layout == "TND";
    std::vector<int64_t> q_cum, kv_cum;
    if (tnd) {
      int64_t tq = 0, tk = 0;
      for (int64_t b = 0; b < B; ++b) {
        q_cum.push_back(tq += r.Int(1, s));
        kv_cum.push_back(tk += r.Int(1, kv_s));
      }
      a_.query = fill(arena.T(dt, {tq, n, d}));
      a_.key = fill(arena.T(dt, {tk, kvn, d}));
      a_.value = fill(arena.T(dt, {tk, kvn, d}));
      a_.actual_seq_lengths = q_cum;
      a_.actual_seq_lengths_kv = kv_cum;
      keys_ = tk;
    } else {
      const auto shape = [&](int64_t heads, int64_t len) -> std::vector<int64_t> {
        if (layout == "BSH") return {B, len, heads * d};
        if (layout == "BSND") return {B, len, heads, d};
        return {B, heads, len, d};
      };
      a_.query = fill(arena.T(dt, shape(n, s)));
      keys_ = kv_s;
      if (paged) {
        const int64_t bs = r.Pick<int64_t>({16, 128}), per = (kv_s + bs - 1) / bs;
        const int64_t blocks = B * per + 2;
        a_.block_size = bs;
        a_.key = fill(arena.T(dt, {blocks, bs, kvn * d}));
        a_.value = fill(arena.T(dt, {blocks, bs, kvn * d}));
        a_.block_table = arena.T(DType::kInt32, {B, per});
        std::vector<int32_t> ids(blocks);
        for (int64_t i = 0; i < blocks; ++i) ids[i] = static_cast<int32_t>(i);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(r.U32()));
        std::copy(ids.begin(), ids.begin() + B * per, static_cast<int32_t*>(a_.block_table.data));
        std::vector<int64_t> kv(B);
        for (int64_t& x : kv) x = r.Int(1, kv_s);
        a_.actual_seq_lengths_kv = kv;
      } else {
        a_.key = fill(arena.T(dt, shape(kvn, kv_s)));
        a_.value = fill(arena.T(dt, shape(kvn, kv_s)));
        if (r.Coin()) {
          std::vector<int64_t> kv(B);
          for (int64_t& x : kv) x = r.Int(0, kv_s);
          a_.actual_seq_lengths_kv = kv;
        }
      }
      // Masks: a random one (a paged cache's covers its tables' blocks); with Q_S > 1 also the
      // causal or band modes with the compressed 2048 x 2048 mask.
      const int64_t m = s > 1 ? r.Int(0, 3) : r.Int(0, 1);
      if (m == 1) {  // a random mask
        const int64_t cols = paged ? a_.block_table.size(1) * a_.block_size : kv_s;
        a_.atten_mask = arena.T(DType::kBool, {B, 1, s, cols});
        auto* p = static_cast<uint8_t*>(a_.atten_mask.data);
        for (int64_t i = 0; i < a_.atten_mask.numel(); ++i) p[i] = r.Coin(0.3);
      } else if (m == 2 && s <= kv_s) {  // causal
        a_.sparse_mode = 3;
        a_.atten_mask = arena.CausalMask();
      } else if (m == 3) {  // a band
        a_.sparse_mode = 4;
        a_.pre_tokens = r.Int(0, 40);
        a_.next_tokens = r.Int(0, 10);
        a_.atten_mask = arena.CausalMask();
      }
    }
    u_ = UnitRoundoff(dt);  // the output's, and the probabilities' before P V
    score_err_ = a_.scale * static_cast<double>(d) * 0x1p-23;  // |q|, |k| <= 1
  }
  const char* Op() const override { return "npu_fused_infer_attention_score"; }
  bool Spec() override {
    spec_ = FusedInferAttentionScoreOutputSpec(a_);
    return Bytes(spec_.attention_out_sizes, spec_.attention_out_dtype) +
               Bytes(spec_.softmax_lse_sizes, DType::kFloat32) <= kMaxOutputBytes;
  }
  Outputs Run() override {
    Outputs o = {Garbage(spec_.attention_out_sizes, spec_.attention_out_dtype),
                 Garbage(spec_.softmax_lse_sizes, DType::kFloat32)};
    FusedInferAttentionScore(a_, View(o[0], spec_.attention_out_sizes),
                             View(o[1], spec_.softmax_lse_sizes));
    return o;
  }
  // The fp64 reference is the oracle here: |v|, |q|, |k| <= 1, so the engine's difference is at
  // most the probabilities' and the output's rounding (3u), the fp32 scores (2 score_err) and
  // the fp32 sums over the keys ((keys + 32) 2^-22), relative to max|v| = 1.
  void CheckOracle(const Outputs& o) override {
    if (GetImpl() == Impl::kReference) return;
    const Outputs& ref = reference_;
    for (int64_t i = 0; i < o[0].numel(); ++i) {
      const double e = o[0].At(i), w = ref[0].At(i);
      const double bound = 3 * u_ + 2 * score_err_ + (keys_ + 32) * 0x1p-22 + u_ * std::fabs(w);
      ASSERT_LE(std::fabs(e - w), bound) << "attention_out element " << i;
    }
    if (!a_.softmax_lse_flag) return;
    for (int64_t i = 0; i < o[1].numel(); ++i) {
      const double e = o[1].At(i), w = ref[1].At(i);
      if (std::isinf(w)) {
        ASSERT_EQ(e, w) << "softmax_lse element " << i;
        continue;
      }
      ASSERT_LE(std::fabs(e - w), 2 * score_err_ + (keys_ + 32) * 0x1p-22 + 0x1p-22 * std::fabs(w))
          << "softmax_lse element " << i;
    }
  }
  std::vector<TensorView*> Tensors() override {
    return {&a_.query, &a_.key, &a_.value, &a_.atten_mask, &a_.block_table, &a_.pse_shift};
  }
  std::vector<TensorView*> Indices() override { return {&a_.block_table}; }
  void MutateScalar(Rng& r) override {
    switch (r.Int(0, 6)) {
      case 0: a_.num_heads = r.Pick<int64_t>({0, -1, 3, a_.num_heads * 2, int64_t{1} << 40}); break;
      case 1: a_.num_key_value_heads = r.Pick<int64_t>({-1, 3, a_.num_heads + 1}); break;
      case 2: a_.sparse_mode = r.Int(-1, 9); break;
      case 3: a_.block_size = r.Pick<int64_t>({-1, 0, 3, 1 << 30}); break;
      case 4: a_.scale = r.Pick({0.0, std::nan(""), HUGE_VAL}); break;
      case 5: a_.input_layout = r.Pick<std::string>({"NSD", "", "BSH", "TND"}); break;
      default: {
        auto& v = r.Coin() ? a_.actual_seq_lengths : a_.actual_seq_lengths_kv;
        std::vector<int64_t> x(static_cast<size_t>(r.Int(0, 4)));
        for (int64_t& e : x) e = r.Pick<int64_t>({-1, 0, 5, 1000, INT64_MAX, r.Int(0, 200)});
        v = x;
      }
    }
  }
  void SetReference(Outputs ref) { reference_ = std::move(ref); }
  double VMax() override { return MaxAbs(a_.value); }

  static int64_t Bytes(const std::vector<int64_t>& sizes, DType t) {
    int64_t n = ElementSize(t);
    for (int64_t s : sizes) {
      if (s < 0 || s > kMaxOutputBytes) return kMaxOutputBytes + 1;
      n *= s;
      if (n > kMaxOutputBytes) return kMaxOutputBytes + 1;
    }
    return n;
  }
  static Output Garbage(const std::vector<int64_t>& sizes, DType t) {
    return Output{t, std::vector<uint8_t>(static_cast<size_t>(Bytes(sizes, t)), 0xA5)};
  }
  static TensorView View(Output& o, const std::vector<int64_t>& sizes) {
    return TensorView(o.bytes.data(), o.dtype, sizes);
  }

 private:
  FiaArgs a_;
  FiaOutputSpec spec_;
  Outputs reference_;
  double u_ = 0, score_err_ = 0;
  int64_t keys_ = 0;
};

// ---- KvQuantSparseFlashAttention: the test suite's builder (kvqtest) and its oracle ------------

class KvqCall : public Call {
 public:
  explicit KvqCall(Rng& r) {
    kvqtest::Case c;
    c.layout_q = r.Pick<std::string>({"BSND", "TND"});
    c.layout_kv = r.Coin(0.5) ? std::string("PA_BSND") : c.layout_q;
    c.qdt = r.Pick({DType::kBFloat16, DType::kFloat16});
    c.kvdt = r.Pick({DType::kInt8, DType::kFloat8E4M3, DType::kHiFloat8, DType::kUInt8});
    c.batch = r.Int(1, 2);
    c.s1 = r.Int(1, 3);
    c.heads = r.Pick<int64_t>({1, 2, 4, 16});
    c.s2 = r.Int(4, 90);
    c.topk = r.Pick<int64_t>({1, 4, 16, 32});
    c.sparse_block_size = r.Pick<int64_t>({1, 2, 4, 16});
    c.sparse_mode = r.Pick<int64_t>({0, 3});
    c.block_size = r.Pick<int64_t>({5, 16, 32});
    c.sinks = r.Coin();
    c.pass_act_kv = r.Coin();
    c.seed = r.U32();
    B_ = kvqtest::Build(c);
    a_ = B_.Args();
  }
  const char* Op() const override { return "npu_kv_quant_sparse_flash_attention"; }
  bool Spec() override {
    spec_ = KvQuantSparseFlashAttentionOutputSpec(a_);
    return FiaCall::Bytes(spec_.attention_out_sizes, spec_.attention_out_dtype) <= kMaxOutputBytes;
  }
  Outputs Run() override {
    Outputs o = {FiaCall::Garbage(spec_.attention_out_sizes, spec_.attention_out_dtype)};
    KvQuantSparseFlashAttention(a_, FiaCall::View(o[0], spec_.attention_out_sizes));
    return o;
  }
  void CheckOracle(const Outputs& o) override {
    const kvqtest::Expected E = kvqtest::Expect(B_);
    ASSERT_EQ(o[0].numel(), static_cast<int64_t>(E.out.size()));
    for (int64_t i = 0; i < o[0].numel(); ++i)
      ASSERT_LE(std::fabs(o[0].At(i) - E.out[i]), E.tol[i]) << "attention_out element " << i;
  }
  // V is the dequantized nope part of the key rows: max over every row of |nope * scale|.
  double VMax() override {
    const TensorView& k = a_.key;
    if (k.dim() < 1 || k.size(-1) != 656 || ElementSize(k.dtype) != 1) return 0;
    TensorView rows = k;  // one element per row: the rows' first bytes
    rows.sizes.back() = 1;
    double m = 0;
    ForEachElement(rows, [&](int64_t off) {
      const uint8_t* row = static_cast<const uint8_t*>(k.data) + off;
      for (int64_t d = 0; d < 512; ++d) {
        float scale;
        std::memcpy(&scale, row + 640 + 4 * (d / 128), 4);
        m = std::max(m, std::fabs(static_cast<double>(kvqtest::NopeValue(row[d], k.dtype)) *
                                  scale));
      }
    });
    return m;
  }
  std::vector<TensorView*> Tensors() override {
    return {&a_.query, &a_.key, &a_.value, &a_.sparse_indices, &a_.block_table,
            &a_.actual_seq_lengths_query, &a_.actual_seq_lengths_kv, &a_.sinks};
  }
  std::vector<TensorView*> Indices() override {
    return {&a_.sparse_indices, &a_.block_table, &a_.actual_seq_lengths_query,
            &a_.actual_seq_lengths_kv};
  }
  void MutateScalar(Rng& r) override {
    switch (r.Int(0, 5)) {
      case 0: a_.sparse_block_size = r.Pick<int64_t>({0, 3, 256, -1}); break;
      case 1: a_.sparse_mode = r.Pick<int64_t>({1, 2, -1}); break;
      case 2: a_.scale_value = r.Pick({std::nan(""), -HUGE_VAL, 0.0}); break;
      case 3: a_.layout_kv = r.Pick<std::string>({"TND", "BSND", "PA_BSND", "BNSD"}); break;
      case 4: a_.attention_mode = r.Pick<int64_t>({0, 1, 3}); break;
      default: a_.pre_tokens = r.Pick<int64_t>({0, INT64_MIN, 2147483647});
    }
  }

 private:
  kvqtest::Built B_;
  KvqsfaArgs a_;
  KvqsfaOutputSpec spec_;
};

// ---- SparseAttnSharedkv (and its metadata op): the test suite's fixture and its oracle --------

void RandomSasFixture(Rng& r, sas_test::SasFixture* f) {
  f->tnd = r.Coin(0.6);
  const int64_t B = r.Int(1, 3), s1 = r.Int(1, 4);
  f->q_len.assign(B, s1);
  f->kv_len.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    if (f->tnd) f->q_len[b] = r.Int(0, 5);
    f->kv_len[b] = r.Coin(0.2) ? r.Int(0, 30) : r.Int(31, 400);
  }
  if (f->T() == 0) f->q_len[0] = 1;
  const int64_t scenario = r.Int(0, 2);
  f->ratio = scenario == 0 ? 0 : r.Pick<int64_t>({4, 128});
  f->k2 = scenario == 2 ? r.Pick<int64_t>({1, 5, 16, 64}) : 0;
  f->ori_mask_mode = r.Pick<int64_t>({4, 4, 3, 0});
  f->n1 = r.Pick<int64_t>({1, 2, 8, 16});
  f->d = r.Pick<int64_t>({4, 16, 64});
  f->dtype = r.Pick({DType::kFloat32, DType::kBFloat16, DType::kFloat16});
  f->bs1 = r.Pick<int64_t>({1, 16, 128});
  f->bs2 = r.Pick<int64_t>({1, 8, 128});
  f->with_sinks = r.Coin(0.7);
  f->lse = r.Coin(0.7);
  if (r.Coin(0.3)) f->scale.reset();
  f->seed = r.U32();
}

class SasCall : public Call {
 public:
  explicit SasCall(Rng& r) {
    RandomSasFixture(r, &f_);
    a_ = f_.Build();
    if (r.Coin()) {  // a plan made for 1..36 workers
      words_.assign(kSasMetadataWords, 0);
      SparseAttnSharedkvMetadata(f_.MetaArgs(r.Int(1, 36)),
                                 TensorView(words_.data(), DType::kInt32, {kSasMetadataWords}));
      a_.metadata = TensorView(words_.data(), DType::kInt32, {kSasMetadataWords});
    }
  }
  const char* Op() const override { return "npu_sparse_attn_sharedkv"; }
  bool Spec() override {
    spec_ = SparseAttnSharedkvOutputSpec(a_);
    return FiaCall::Bytes(spec_.attention_out_sizes, spec_.attention_out_dtype) +
               FiaCall::Bytes(spec_.softmax_lse_sizes, DType::kFloat32) <= kMaxOutputBytes;
  }
  Outputs Run() override {
    Outputs o = {FiaCall::Garbage(spec_.attention_out_sizes, spec_.attention_out_dtype),
                 FiaCall::Garbage(spec_.softmax_lse_sizes, DType::kFloat32)};
    SparseAttnSharedkv(a_, FiaCall::View(o[0], spec_.attention_out_sizes),
                       FiaCall::View(o[1], spec_.softmax_lse_sizes));
    // The fixture's oracle reads its own buffers.
    f_.outbuf = o[0].bytes;
    f_.lsebuf.resize(o[1].bytes.size() / 4);
    std::memcpy(f_.lsebuf.data(), o[1].bytes.data(), o[1].bytes.size());
    return o;
  }
  void CheckOracle(const Outputs&) override {
    f_.ExpectMatchesOracle(f_.dtype == DType::kFloat32 ? 0x1p-24
                           : f_.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11);
  }
  double VMax() override { return std::max(MaxAbs(a_.ori_kv), MaxAbs(a_.cmp_kv)); }
  std::vector<TensorView*> Tensors() override {
    return {&a_.q, &a_.ori_kv, &a_.cmp_kv, &a_.cmp_sparse_indices, &a_.ori_block_table,
            &a_.cmp_block_table, &a_.cu_seqlens_q, &a_.seqused_kv, &a_.sinks, &a_.metadata};
  }
  std::vector<TensorView*> Indices() override {
    return {&a_.cmp_sparse_indices, &a_.ori_block_table, &a_.cmp_block_table, &a_.cu_seqlens_q,
            &a_.seqused_kv, &a_.metadata};
  }
  void MutateScalar(Rng& r) override {
    switch (r.Int(0, 4)) {
      case 0: a_.cmp_ratio = r.Pick<int64_t>({0, 3, 64, -4}); break;
      case 1: a_.ori_mask_mode = r.Pick<int64_t>({1, 2, 5}); break;
      case 2: a_.softmax_scale = r.Pick({std::nan(""), HUGE_VAL}); break;
      case 3: a_.layout_q = r.Pick<std::string>({"BSH", "TND", "BSND"}); break;
      default: a_.return_softmax_lse = !a_.return_softmax_lse;
    }
  }

 private:
  sas_test::SasFixture f_;
  SasArgs a_;
  SasOutputSpec spec_;
  std::vector<int32_t> words_;
};

class SasMetadataCall : public Call {
 public:
  explicit SasMetadataCall(Rng& r) {
    RandomSasFixture(r, &f_);
    sas_ = f_.Build();
    m_ = f_.MetaArgs(r.Int(0, 36));
  }
  const char* Op() const override { return "npu_sparse_attn_sharedkv_metadata"; }
  bool Spec() override { return true; }
  Outputs Run() override {
    Outputs o = {Output{DType::kInt32, std::vector<uint8_t>(kSasMetadataWords * 4, 0xA5)}};
    SparseAttnSharedkvMetadata(m_, TensorView(o[0].bytes.data(), DType::kInt32,
                                              {kSasMetadataWords}));
    return o;
  }
  // A plan for the fixture's call must verify and give that call's result bit for bit.
  void CheckOracle(const Outputs& o) override {
    TensorView words(const_cast<uint8_t*>(o[0].bytes.data()), DType::kInt32, {kSasMetadataWords});
    VerifySasMetadata(m_, words);
    f_.Run(sas_);
    const std::vector<uint8_t> plain = sas_test::Bytes(f_);
    SasArgs with = sas_;
    with.metadata = words;
    f_.Run(with);
    EXPECT_EQ(sas_test::Bytes(f_), plain) << "result with the plan differs from the one without";
  }
  double VMax() override { return 0; }
  bool ThreadInvariant() const override { return m_.num_workers != 0; }
  std::vector<TensorView*> Tensors() override { return {&m_.cu_seqlens_q, &m_.seqused_kv}; }
  std::vector<TensorView*> Indices() override { return {&m_.cu_seqlens_q, &m_.seqused_kv}; }
  void MutateScalar(Rng& r) override {
    switch (r.Int(0, 5)) {
      case 0: m_.batch_size = r.Pick<int64_t>({-1, 0, 1000000, m_.batch_size + 1}); break;
      case 1: m_.max_seqlen_q = r.Pick<int64_t>({-1, 0, 1 << 30}); break;
      case 2: m_.num_heads_q = r.Pick<int64_t>({0, int64_t{1} << 40, 3}); break;
      case 3: m_.cmp_ratio = r.Pick<int64_t>({0, 5, 128}); break;
      case 4: m_.num_workers = r.Pick<int64_t>({-1, 37, 1}); break;
      default: m_.cmp_topk = r.Pick<int64_t>({-1, INT64_MAX});
    }
  }

 private:
  sas_test::SasFixture f_;
  SasArgs sas_;
  SasMetadataArgs m_;
};

// ---- one call -----------------------------------------------------------------------------------

struct Counts {
  int64_t calls = 0, valid = 0, changed_accepted = 0, rejected = 0, skipped = 0;
  int64_t generated_rejected = 0;  // unchanged FIA calls the operator refused
};

// The implementation and the thread count for one scope.
struct ImplThreads {
  ImplThreads(Impl impl, int threads) : impl(impl), threads(threads) {}
  testutil::ImplScope impl;
  testutil::ThreadsScope threads;
};

// The engine's and the reference's outputs of a changed call: the same NaN and infinity
// positions; finite elements within 16 ulps of the output dtype of themselves plus, relative to
// vmax = max |V| (an output row is a weighted mean of V rows), 16 ulps for the probabilities'
// rounding before P V and 2^-9 for the fp32 scores and sums (D <= 576 products of magnitudes
// <= 2, key lists < 4096 here). vmax 0 (not known): positions only.
void ExpectAgree(const Outputs& eng, const Outputs& ref, double vmax) {
  for (size_t k = 0; k < eng.size(); ++k) {
    if (ref[k].dtype == DType::kInt32) {  // metadata words: the same plan
      ASSERT_EQ(eng[k].bytes, ref[k].bytes) << "output " << k;
      continue;
    }
    const double u = UnitRoundoff(ref[k].dtype);
    // softmax_lse (float32, k = 1) is log(sum): its error is relative to the sum's terms.
    const double scale = k == 0 ? vmax : 1.0;
    for (int64_t i = 0; i < ref[k].numel(); ++i) {
      const double e = eng[k].At(i), w = ref[k].At(i);
      ASSERT_EQ(std::isnan(e), std::isnan(w))
          << "output " << k << " element " << i << ": engine " << e << ", reference " << w;
      if (std::isnan(w)) continue;
      if (std::isinf(w)) {
        ASSERT_EQ(e, w) << "output " << k << " element " << i;
        continue;
      }
      if (vmax <= 0) continue;
      ASSERT_LE(std::fabs(e - w), 16 * u * std::fabs(w) + scale * (16 * u + 0x1p-9))
          << "output " << k << " element " << i << ": engine " << e << ", reference " << w;
    }
  }
}

std::unique_ptr<Call> MakeCall(Rng& r) {
  switch (r.Int(0, 3)) {
    case 0: return std::make_unique<FiaCall>(r);
    case 1: return std::make_unique<KvqCall>(r);
    case 2: return std::make_unique<SasCall>(r);
    default: return std::make_unique<SasMetadataCall>(r);
  }
}

void RunOne(uint64_t seed, Counts* n) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay: openfia_fuzz --seed " +
               std::to_string(seed) + " --calls 1)");
  Rng r(seed);
  std::unique_ptr<Call> c = MakeCall(r);
  std::string changes;
  const int64_t nchanges = r.Coin() ? r.Int(1, 3) : 0;
  for (int64_t i = 0; i < nchanges; ++i) changes += (i ? ", " : "") + Mutate(*c, r);
  SCOPED_TRACE(std::string(c->Op()) + (changes.empty() ? " (unchanged)" : " changed: " + changes));
  ++n->calls;
  try {
    ImplThreads eng(Impl::kAuto, 1);
    if (!c->Spec()) {
      ++n->skipped;
      return;
    }
    Outputs ref;
    {
      ImplThreads s(Impl::kReference, 2);
      ref = c->Run();
      if (nchanges == 0) c->CheckOracle(ref);
    }
    if (auto* f = dynamic_cast<FiaCall*>(c.get())) f->SetReference(ref);
    const Outputs one = c->Run();
    if (nchanges == 0) c->CheckOracle(one);
    Outputs three;
    {
      ImplThreads s(Impl::kAuto, 3);
      three = c->Run();
    }
    for (size_t k = 0; k < one.size() && c->ThreadInvariant(); ++k)
      ASSERT_EQ(one[k].bytes, three[k].bytes) << "output " << k << ": 1 and 3 threads differ";
    // (An unchanged call's engine and reference outputs each met the oracle's bound above.)
    if (nchanges > 0 && c->ThreadInvariant()) ExpectAgree(one, ref, c->VMax());
    ++(nchanges == 0 ? n->valid : n->changed_accepted);
  } catch (const Error& e) {
    ++n->rejected;
    EXPECT_NE(e.code(), ErrorCode::kInternal) << e.what();
    EXPECT_FALSE(e.argument().empty()) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind(c->Op(), 0), 0u) << "names another operator: "
                                                           << e.what();
    // The sparse operators' builders make valid calls only; the FIA generator draws from a
    // wider space than the operator's rules and may make an invalid one.
    if (nchanges == 0 && !dynamic_cast<FiaCall*>(c.get()))
      ADD_FAILURE() << "a generated valid call was rejected: " << e.what();
    if (nchanges == 0) ++n->generated_rejected;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an openfia::Error: " << e.what();
  }
}

// Runs seeds [from, to) in a forked child; returns its wait status (counts through `fd`).
int RunChild(uint64_t from, uint64_t to, Counts* total) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(kBatchAlarmS);
    // Failures the parent recorded before the fork are not this child's.
    const testing::TestResult* result =
        testing::UnitTest::GetInstance()->current_test_info()->result();
    const int before = result->total_part_count();
    Counts n;
    for (uint64_t s = from; s < to; ++s) RunOne(s, &n);
    (void)!write(fds[1], &n, sizeof(n));
    std::fflush(stdout);
    _exit(result->total_part_count() > before ? 1 : 0);
  }
  close(fds[1]);
  Counts n;
  const bool got = read(fds[0], &n, sizeof(n)) == static_cast<ssize_t>(sizeof(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got) {
    total->calls += n.calls;
    total->valid += n.valid;
    total->changed_accepted += n.changed_accepted;
    total->rejected += n.rejected;
    total->skipped += n.skipped;
    total->generated_rejected += n.generated_rejected;
  }
  return status;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGALRM ? "hung (alarm)"
                                       : "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

TEST(Fuzz, RandomValidAndInvalidCalls) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  Counts n;
  uint64_t next = g_opt.seed;
  const uint64_t end = g_opt.seconds > 0 ? UINT64_MAX : g_opt.seed + g_opt.calls;
  while (next < end && (g_opt.seconds <= 0 || elapsed() < g_opt.seconds)) {
    const uint64_t to = std::min<uint64_t>(end, next + g_opt.batch);
    const int status = RunChild(next, to, &n);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      // Which seed: one child per seed of the batch.
      for (uint64_t s = next; s < to; ++s) {
        Counts ignored;
        const int st = RunChild(s, s + 1, &ignored);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          ADD_FAILURE() << "seed " << s << ": " << Describe(st)
                        << " (replay: openfia_fuzz --seed " << s << " --calls 1)";
      }
    }
    next = to;
  }
  const double s = elapsed();
  std::printf("openfia_fuzz: seeds %llu..%llu: %lld calls in %.1f s (%.1f calls/s): %lld valid, "
              "%lld changed and accepted, %lld rejected (%lld of them unchanged FIA draws), %lld "
              "skipped (outputs too large)\n",
              static_cast<unsigned long long>(g_opt.seed), static_cast<unsigned long long>(next),
              static_cast<long long>(n.calls), s, n.calls / std::max(s, 1e-9),
              static_cast<long long>(n.valid), static_cast<long long>(n.changed_accepted),
              static_cast<long long>(n.rejected), static_cast<long long>(n.generated_rejected),
              static_cast<long long>(n.skipped));
  // Both sides are exercised: valid calls run, changed calls are mostly refused (a run of a few
  // calls, such as the replay of one seed, is too short to say).
  if (n.calls >= 64) {
    EXPECT_GT(n.valid, n.calls / 8);
    EXPECT_GT(n.rejected, n.calls / 8);
  }
}

}  // namespace
}  // namespace openfia

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "openfia_fuzz: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") openfia::g_opt.seed = std::stoull(value());
    else if (a == "--calls") openfia::g_opt.calls = std::stoll(value());
    else if (a == "--seconds") openfia::g_opt.seconds = std::stod(value());
    else if (a == "--batch") openfia::g_opt.batch = std::max(1LL, std::stoll(value()));
    else {
      std::fprintf(stderr, "usage: openfia_fuzz [--seed S] [--calls N] [--seconds T] [--batch K]\n");
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
