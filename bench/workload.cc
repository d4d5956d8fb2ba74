// openfia-bench: case-list parsing and workload construction (see workload.h).
#include "workload.h"

#include "common/numeric.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

namespace openfia::bench {
namespace {

[[noreturn]] void Fail(const std::string& what) { throw std::runtime_error("openfia-bench: " + what); }

// ---- deterministic data: splitmix64, so a workload is the same bytes on every machine ----
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() {  // [-1, 1)
    return static_cast<float>(static_cast<int64_t>(Next() >> 40) - (int64_t{1} << 23)) /
           static_cast<float>(int64_t{1} << 23);
  }
  int Int(int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t s_;
};

uint16_t ToBf16(float f) { return internal::F32ToBF16(f); }
float FromBf16(uint16_t h) { return internal::BF16ToF32(h); }
uint16_t ToF16(float f) { return internal::F32ToF16(f); }
float FromF16(uint16_t h) { return internal::F16ToF32(h); }

void StoreFloat(const TensorView& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::kFloat32:
      static_cast<float*>(t.data)[i] = v;
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(t.data)[i] = ToBf16(v);
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(t.data)[i] = ToF16(v);
      return;
    default:
      Fail("internal: StoreFloat on a non-float tensor");
  }
}
float LoadFloat(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kFloat32:
      return static_cast<const float*>(t.data)[i];
    case DType::kBFloat16:
      return FromBf16(static_cast<const uint16_t*>(t.data)[i]);
    case DType::kFloat16:
      return FromF16(static_cast<const uint16_t*>(t.data)[i]);
    default:
      Fail("internal: LoadFloat on a non-float tensor");
  }
}

DType ParseDType(const std::string& s) {
  if (s == "bf16") return DType::kBFloat16;
  if (s == "f16") return DType::kFloat16;
  if (s == "f32") return DType::kFloat32;
  Fail("dtype=" + s + " is not one of bf16, f16, f32");
}

double UnitRoundoff(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -24);
  }
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

// Keys this benchmark knows how to build; anything else in a `model` line is an error, so that a
// workload is never silently benchmarked without a feature it asks for.
const std::set<std::string>& SupportedKeys() {
  static const std::set<std::string> k = {"layout", "B",    "N",     "KVN",  "S",    "KVS",
                                          "D",      "DV",   "dtype", "kv",   "sparse", "pre",
                                          "next",   "mask", "act_kv", "page", "cache", "kmode",
                                          "vmode",  "lse",  "rope",  "scale", "fullquant"};
  return k;
}

constexpr int64_t kRopeDim = 64;  // MLA rope head dim (SEMANTICS 1.11)

}  // namespace

// CaseSpec, ParseCaseLine and ReadCases come from the shared reader (tests/cases/cpp).

CaseSpec ApplyPreset(const CaseSpec& c, const std::string& preset) {
  if (preset == "full") return c;
  if (preset != "demo") Fail("--preset must be demo or full (got " + preset + ")");
  CaseSpec d = c;
  d.name = c.name + "@demo";
  const int64_t page = c.Int("page", 0);
  auto shrink = [&](int64_t v) {
    int64_t r = std::max<int64_t>(1, (v + 7) / 8);
    if (page > 0) r = (r + page - 1) / page * page;
    return r;
  };
  const int64_t s = c.Int("S", 1), kvs = c.Int("KVS", 1);
  if (s > 1) d.keys["S"] = std::to_string(std::max<int64_t>(2, (s + 7) / 8));
  d.keys["KVS"] = std::to_string(shrink(kvs));
  if (c.Has("act_kv")) d.keys.erase("act_kv");  // act_kv refers to the full KVS
  if (c.Int("B", 1) > 4) d.keys["B"] = "4";
  return d;
}

CaseSpec WithKey(const CaseSpec& c, const std::string& key, const std::string& value,
                 const std::string& new_name) {
  CaseSpec d = c;
  d.keys[key] = value;
  if (key == "KVS") d.keys.erase("act_kv");
  d.name = new_name;
  return d;
}

// ---- Workload ----

namespace {
bool g_huge_pages = false;
}  // namespace

void Workload::UseHugePages(bool on) { g_huge_pages = on; }
bool Workload::HugePages() { return g_huge_pages; }

struct Workload::Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes) {
    // With UseHugePages, buffers of 8 MiB and more (the KV caches) start on a 2 MiB boundary and
    // are advised to transparent huge pages before their first write, as the bandwidth limit's
    // buffer is (machine_limits.cc).
    const bool huge = g_huge_pages && bytes >= (size_t{8} << 20);
    const size_t align = huge ? size_t{2} << 20 : 64;
    const size_t rounded = std::max(align, (bytes + align - 1) / align * align);
    p = std::aligned_alloc(align, rounded);
    if (p == nullptr) Fail("out of memory allocating " + std::to_string(bytes) + " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
  }
  ~Buffer() { std::free(p); }
};

Workload::~Workload() = default;

TensorView Workload::Alloc(DType dt, std::vector<int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  buffers_.push_back(std::make_unique<Buffer>(static_cast<size_t>(n * ElementSize(dt))));
  return TensorView(buffers_.back()->p, dt, std::move(sizes));
}

std::unique_ptr<Workload> Workload::Build(const CaseSpec& c, uint64_t seed) {
  for (const auto& [k, v] : c.keys)
    if (!SupportedKeys().count(k))
      Fail(c.name + ": key '" + k + "' is not supported by the benchmark builder");

  std::unique_ptr<Workload> w(new Workload());
  w->spec_ = c;
  Rng rng(seed);

  const std::string layout = c.Str("layout", "BNSD");
  if (layout != "BSH" && layout != "BSND" && layout != "BNSD")
    Fail(c.name + ": layout=" + layout + " (the benchmark builds BSH, BSND, BNSD)");
  const int64_t B = c.Int("B", 1), N = c.Int("N", 1), KVN = c.Int("KVN", N);
  const int64_t S = c.Int("S", 1), KVS = c.Int("KVS", 1);
  const int64_t D = c.Int("D", 64), DV = c.Int("DV", D);
  const bool rope = c.Int("rope", 0) != 0;
  const int64_t DR = rope ? kRopeDim : 0;
  const DType qdt = ParseDType(c.Str("dtype", "bf16"));
  const std::string kv = c.Str("kv", "");
  const bool int8 = kv == "int8", int4 = kv == "int4";
  if (!kv.empty() && !int8 && !int4) Fail(c.name + ": kv=" + kv + " (int8 or int4)");
  const int64_t page = c.Int("page", 0);
  const std::string cache = c.Str("cache", "3d");
  if (cache != "3d" && cache != "4d") Fail(c.name + ": cache=" + cache + " (3d or 4d)");
  const int64_t sparse = c.Int("sparse", 0);
  if (sparse != 0 && sparse != 2 && sparse != 3 && sparse != 4)
    Fail(c.name + ": sparse=" + std::to_string(sparse) + " (the benchmark builds 0, 2, 3, 4)");
  const std::string mask = c.Str("mask", sparse ? "2048" : "none");
  if (mask != (sparse ? "2048" : "none"))
    Fail(c.name + ": mask=" + mask + " (sparse 0 takes no mask, 2-4 the 2048 mask)");
  if (rope && DV != D) Fail(c.name + ": rope=1 takes DV = D (value is the key cache)");
  const bool fullquant = c.Int("fullquant", 0) != 0;
  if (fullquant && (!kv.empty() || rope || page > 0 || S < 2))
    Fail(c.name + ": fullquant=1 (int8 query, key and value) takes no kv=, rope, page, and S > 1");
  if (B < 1 || N < 1 || KVN < 1 || S < 1 || KVS < 1 || D < 1 || DV < 1)
    Fail(c.name + ": sizes must be positive");
  w->s_q_ = S;
  w->kv_s_ = KVS;

  FiaArgs& a = w->args_;
  a.num_heads = N;
  a.num_key_value_heads = KVN;
  a.input_layout = layout;
  a.scale = c.Double("scale", 1.0 / std::sqrt(static_cast<double>(D)));
  a.sparse_mode = sparse;
  a.pre_tokens = c.Int("pre", 2147483647);
  a.next_tokens = c.Int("next", 2147483647);
  a.softmax_lse_flag = c.Int("lse", 0) != 0;

  // Query-like tensor (query, query_rope) in `layout`.
  auto qshape = [&](int64_t heads, int64_t d) -> std::vector<int64_t> {
    if (layout == "BSH") return {B, S, heads * d};
    if (layout == "BSND") return {B, S, heads, d};
    return {B, heads, S, d};
  };
  auto fill_float = [&](const TensorView& t, float amp) {
    for (int64_t i = 0; i < t.numel(); ++i) StoreFloat(t, i, amp * rng.Uniform());
  };
  // Query amplitude: scores get a standard deviation near 2.7, so each row's softmax concentrates
  // on a handful of keys as in trained models. With unit amplitude every row would average
  // thousands of random values into an output near 0, where a wrong mask or scale hides inside
  // any tolerance.
  constexpr float kQueryAmp = 8.0f;
  // int8 full quantization: int8 query, key and value uniform in [-127, 127], like int8 KV.
  const bool int8_kv = int8 || fullquant;
  auto fill_int8 = [&](const TensorView& t) {
    int8_t* p = static_cast<int8_t*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int8_t>(rng.Int(-127, 127));
  };
  a.query = w->Alloc(fullquant ? DType::kInt8 : qdt, qshape(N, D));
  if (fullquant) fill_int8(a.query);
  else fill_float(a.query, kQueryAmp);
  if (rope) {
    a.query_rope = w->Alloc(qdt, qshape(N, DR));
    fill_float(a.query_rope, kQueryAmp);
  }

  // KV storage. int4 is packed eight to an int32 along the last dimension.
  const DType kdt = int8_kv ? DType::kInt8 : int4 ? DType::kInt32 : qdt;
  auto packed = [&](int64_t d) {
    if (int4 && d % 8 != 0) Fail(c.name + ": int4 KV needs D divisible by 8");
    return int4 ? d / 8 : d;
  };
  const int64_t blocks_per_batch = page > 0 ? (KVS + page - 1) / page : 0;
  const int64_t num_blocks = B * blocks_per_batch;
  auto kvshape = [&](int64_t d) -> std::vector<int64_t> {
    const int64_t dp = packed(d);
    if (page > 0) {
      if (cache == "4d") return {num_blocks, KVN, page, dp};
      return {num_blocks, page, KVN * dp};
    }
    if (layout == "BSH") return {B, KVS, KVN * dp};
    if (layout == "BSND") return {B, KVS, KVN, dp};
    return {B, KVN, KVS, dp};
  };
  auto fill_kv = [&](const TensorView& t) {
    if (int8_kv) {
      fill_int8(t);
    } else if (int4) {
      uint32_t* p = static_cast<uint32_t*>(t.data);
      for (int64_t i = 0; i < t.numel(); ++i) {
        uint32_t word = 0;
        for (int n = 0; n < 8; ++n) word |= static_cast<uint32_t>(rng.Int(-8, 7) & 0xF) << (4 * n);
        p[i] = word;
      }
    } else {
      fill_float(t, 1.0f);
    }
  };
  a.key = w->Alloc(kdt, kvshape(D));
  fill_kv(a.key);
  if (rope) {
    // MLA: the value is the latent cache itself (V = K's first D columns), as in DeepSeek serving.
    a.value = a.key;
    a.key_rope = w->Alloc(qdt, kvshape(DR));
    fill_float(a.key_rope, 1.0f);
  } else {
    a.value = w->Alloc(kdt, kvshape(DV));
    fill_kv(a.value);
  }
  if (fullquant) {
    // A score's integer dot product has a standard deviation near 127^2 / 3 sqrt(D);
    // dequant_scale1 = 2^-11 (exact after the kernel's float19 cut) brings S to about
    // 2.7 sqrt(D / 128) / (sqrt(D) scale), the bf16 workloads' spread at D = 128. quant_scale1 =
    // 127 maps E in [0, 1] onto P8 in [0, 127]; dequant_scale2 = 1 / 127^2 maps sum P8 V / l back
    // to about the values' mean / 127.
    auto f32 = [&](float v) {
      TensorView t = w->Alloc(DType::kFloat32, {1});
      static_cast<float*>(t.data)[0] = v;
      return t;
    };
    a.dequant_scale1 = f32(0x1p-11f);
    a.quant_scale1 = f32(127.f);
    a.dequant_scale2 = f32(1.f / (127.f * 127.f));
  }

  if (page > 0) {
    // Blocks in a random order: a real cache is fragmented, and a sequential table would let the
    // hardware prefetcher stream across page boundaries that real serving does not give it.
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = num_blocks - 1; i > 0; --i)
      std::swap(perm[i], perm[static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(i + 1))]);
    a.block_table = w->Alloc(DType::kInt32, {B, blocks_per_batch});
    std::memcpy(a.block_table.data, perm.data(), perm.size() * sizeof(int32_t));
    a.block_size = page;
  }
  std::vector<int64_t> act_kv(B, KVS);
  if (c.Has("act_kv")) {
    const auto v = ParseList(c.Str("act_kv", ""));
    if (v.size() != 1 && static_cast<int64_t>(v.size()) != B)
      Fail(c.name + ": act_kv needs 1 or B entries");
    for (int64_t b = 0; b < B; ++b) act_kv[b] = v.size() == 1 ? v[0] : v[b];
  }
  if (page > 0 || c.Has("act_kv")) a.actual_seq_lengths_kv = act_kv;

  // Antiquant parameters. Scales are chosen so that dequantized values span about [-1.5, 1.5],
  // like the bf16 workloads, and `v_absmax_` bounds |V| for the accuracy check.
  // int8 full quantization: 0, so the tolerance is 0 (the engine is bitwise the reference there,
  // tests/cpp/test_fullquant.cc).
  w->v_absmax_ = fullquant ? 0.0 : 1.0;
  if (int8 || int4) {
    const int64_t kmode = c.Int("kmode", 0), vmode = c.Int("vmode", 0);
    const float qmax = int8 ? 127.f : 7.f;
    // Shapes of SEED 000's antiquant table: 0 per-channel and 2 per-head in the query dtype; 1
    // per-token (1, B, S), 3 per-token-head (B, N, S), 4/5 page-managed (blocknum[, N], blocksize)
    // in fp32.
    auto make_scale = [&](int64_t mode, int64_t d) -> TensorView {
      TensorView t;
      if (mode == 0) {
        if (layout == "BSH") t = w->Alloc(qdt, {1, KVN * d});
        else if (layout == "BSND") t = w->Alloc(qdt, {1, KVN, d});
        else t = w->Alloc(qdt, {1, KVN, 1, d});
      } else if (mode == 1) {
        t = w->Alloc(DType::kFloat32, {1, B, KVS});
      } else if (mode == 2) {
        t = w->Alloc(qdt, {KVN});
      } else if (mode == 3) {
        t = w->Alloc(DType::kFloat32, {B, KVN, KVS});
      } else if ((mode == 4 || mode == 5) && page > 0) {
        t = mode == 4 ? w->Alloc(DType::kFloat32, {num_blocks, page})
                      : w->Alloc(DType::kFloat32, {num_blocks, KVN, page});
      } else {
        Fail(c.name + ": kmode/vmode " + std::to_string(mode) + " (0-3, or 4-5 with page)");
      }
      for (int64_t i = 0; i < t.numel(); ++i) StoreFloat(t, i, (1.0f + 0.5f * rng.Uniform()) / qmax);
      return t;
    };
    a.key_antiquant_mode = kmode;
    a.value_antiquant_mode = vmode;
    a.key_antiquant_scale = make_scale(kmode, D);
    a.value_antiquant_scale = make_scale(vmode, DV);
    double vmax = 0;
    for (int64_t i = 0; i < a.value_antiquant_scale.numel(); ++i)
      vmax = std::max<double>(vmax, LoadFloat(a.value_antiquant_scale, i));
    w->v_absmax_ = vmax * (int8 ? 127 : 8);
  }

  if (sparse != 0) {
    // The documented compressed causal mask: 1 strictly above the diagonal.
    a.atten_mask = w->Alloc(DType::kBool, {2048, 2048});
    uint8_t* m = static_cast<uint8_t*>(a.atten_mask.data);
    for (int64_t i = 0; i < 2048; ++i)
      for (int64_t j = 0; j < 2048; ++j) m[i * 2048 + j] = j > i ? 1 : 0;
  }

  const FiaOutputSpec spec = FusedInferAttentionScoreOutputSpec(a);
  w->out_ = w->Alloc(spec.attention_out_dtype, spec.attention_out_sizes);
  if (a.softmax_lse_flag) w->lse_ = w->Alloc(DType::kFloat32, spec.softmax_lse_sizes);

  // ---- work and traffic ----
  // Attended (query, key) pairs per batch, from the band of SEMANTICS 1.3 (Q_S == 1 ignores
  // sparse_mode). Masked pairs are not counted: FLOP/s measures useful work.
  double pairs = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t kvl = act_kv[b];
    for (int64_t i = 0; i < S; ++i) {
      int64_t lo = 0, hi = kvl - 1;
      if (S > 1 && sparse == 2) hi = std::min(hi, i);
      if (S > 1 && sparse == 3) hi = std::min(hi, i + kvl - S);
      if (S > 1 && sparse == 4) {
        lo = std::max<int64_t>(lo, i + kvl - S - a.pre_tokens);
        hi = std::min<int64_t>(hi, i + kvl - S + a.next_tokens);
      }
      if (hi >= lo) pairs += static_cast<double>(hi - lo + 1);
    }
  }
  w->flops_ = 2.0 * pairs * static_cast<double>(N) * static_cast<double>(D + DR + DV);

  // Bytes of K/V one call must read at least once: every token up to act_kv of every KV head.
  const double kelem = int8_kv ? 1.0 : int4 ? 0.5 : static_cast<double>(ElementSize(qdt));
  double per_token = static_cast<double>(KVN) * kelem * static_cast<double>(D);
  if (!rope) per_token += static_cast<double>(KVN) * kelem * static_cast<double>(DV);
  if (rope) per_token += static_cast<double>(KVN * DR * ElementSize(qdt));
  // Scales read per token: 4 bytes (modes 1, 4) or 4 per KV head (modes 3, 5).
  for (int64_t mode : {a.key_antiquant_mode, a.value_antiquant_mode}) {
    if (!(int8 || int4)) break;
    if (mode == 1 || mode == 4) per_token += 4;
    if (mode == 3 || mode == 5) per_token += 4.0 * static_cast<double>(KVN);
  }
  double tokens = 0;
  for (int64_t kvl : act_kv) tokens += static_cast<double>(kvl);
  double fixed = 0;  // per-channel scales
  if (int8 || int4) {
    for (const TensorView* t : {&a.key_antiquant_scale, &a.value_antiquant_scale})
      if (t->dtype != DType::kFloat32) fixed += static_cast<double>(t->numel() * ElementSize(t->dtype));
  }
  w->kv_bytes_ = tokens * per_token + fixed;
  auto bytes = [](const TensorView& t) {
    return t.defined() ? static_cast<double>(t.numel() * ElementSize(t.dtype)) : 0.0;
  };
  w->io_bytes_ = w->kv_bytes_ + bytes(a.query) + bytes(a.query_rope) + bytes(w->out_);
  return w;
}

void Workload::Run() const { FusedInferAttentionScore(args_, out_, lse_); }

void Workload::CompareWithReference(double* max_abs_err, double* tol) const {
  std::vector<float> fast(static_cast<size_t>(out_.numel()));
  for (int64_t i = 0; i < out_.numel(); ++i) fast[i] = LoadFloat(out_, i);
  const Impl saved = GetImpl();
  SetImpl(Impl::kReference);
  try {
    Run();
  } catch (...) {
    SetImpl(saved);
    throw;
  }
  SetImpl(saved);
  double err = 0;
  for (int64_t i = 0; i < out_.numel(); ++i) {
    const double r = LoadFloat(out_, i), f = fast[i];
    // NaN anywhere (or Inf where the reference is finite) is an unbounded error.
    const double e = (std::isnan(f) != std::isnan(r)) ? INFINITY : std::isnan(r) ? 0 : std::fabs(f - r);
    err = std::max(err, e);
  }
  *max_abs_err = err;
  // Each output is sum_j p_j v_j / sum_j p_j with |v| <= v_absmax_. The engine may round p to
  // the input dtype (SPEC 2.6: relative error u each) and rounds the output (u); fp32 accumulation
  // adds far less. Two roundings of the reference and of the engine output: 4 u |v|max.
  // (int8 full quantization: v_absmax_ = 0, the engine must match the reference bit for bit.)
  *tol = 4.0 * UnitRoundoff(args_.query.dtype) * v_absmax_;
}

std::string Workload::Describe() const {
  const CaseSpec& c = spec_;
  std::ostringstream o;
  o << "B=" << c.Int("B", 1) << " N=" << c.Int("N", 1) << "/" << c.Int("KVN", c.Int("N", 1))
    << " S=" << c.Int("S", 1) << " KV=" << c.Int("KVS", 1) << " D=" << c.Int("D", 64);
  if (c.Int("rope", 0)) o << "+" << kRopeDim;
  o << " " << (c.Int("fullquant", 0) ? "int8 full-quant" : c.Str("dtype", "bf16"));
  if (c.Has("kv")) o << " kv=" << c.Str("kv", "") << "(k" << c.Int("kmode", 0) << ",v" << c.Int("vmode", 0) << ")";
  if (c.Int("page", 0)) o << " paged/" << c.Int("page", 0);
  if (c.Int("sparse", 0)) o << " sparse=" << c.Int("sparse", 0);
  return o.str();
}

}  // namespace openfia::bench
