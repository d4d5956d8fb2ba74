// openfia test support: the shared case list and the inputs of one case (see case_list.h).
#include "case_list.h"
#include "native_half.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

namespace openfia::cases {
namespace {

[[noreturn]] void Fail(const std::string& msg) { throw std::runtime_error(msg); }

// Keys of tests/cases/README.md; anything else in a line is a typo the builder must not ignore.
const std::set<std::string>& KnownKeys() {
  static const std::set<std::string> keys = {
      "layout", "B",     "N",      "KVN",   "S",      "KVS",  "D",    "DV",    "dtype",
      "kv",     "sparse", "pre",   "next",  "mask",   "mdtype", "act_q", "act_kv", "qpad",
      "kvpad",  "pse",   "page",   "cache", "prefix", "pact", "kmode", "vmode", "legacy",
      "aoff",   "lse",   "outq",   "qo2",   "fullquant", "rope", "ip",  "list",  "scale",
      "poison", "seed",  "sinks"};
  return keys;
}

// ---- deterministic data ------------------------------------------------------------------------

uint32_t Crc32(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char ch : s) {
    crc ^= ch;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// splitmix64: tiny, fast, and identical on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1p-53; }  // [0, 1)
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  double Normal() {  // Box-Muller; 1 - u keeps log's argument in (0, 1]
    const double u = 1.0 - Uniform(), w = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * w);
  }
  int64_t Int(int64_t lo, int64_t hi_excl) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi_excl - lo));
  }

 private:
  uint64_t s_;
};

// ---- element formats ---------------------------------------------------------------------------

uint16_t ToBF16(float f) {  // round to nearest even; NaN stays a quiet NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float FromBF16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// The value `v` has once stored as `dt` (float formats) or as an integer.
double RoundTo(DType dt, double v) {
  switch (dt) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat16: return static_cast<float>(static_cast<NativeHalf>(static_cast<float>(v)));
    case DType::kBFloat16: return FromBF16(ToBF16(static_cast<float>(v)));
    default: return v;
  }
}

void Put(void* base, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kFloat16:
      static_cast<NativeHalf*>(base)[i] = static_cast<NativeHalf>(static_cast<float>(v));
      return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[i] = ToBF16(static_cast<float>(v)); return;
    case DType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); return;
    case DType::kUInt8:
    case DType::kBool: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); return;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
    default: Fail("case builder: unexpected dtype");
  }
}

double Eps(DType dt) {  // unit roundoff
  switch (dt) {
    case DType::kFloat16: return 0x1p-11;
    case DType::kBFloat16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

DType ParseDType(const std::string& s) {
  if (s == "f32") return DType::kFloat32;
  if (s == "f16") return DType::kFloat16;
  if (s == "bf16") return DType::kBFloat16;
  Fail("dtype=" + s + " is not f32, f16 or bf16");
}

std::vector<int64_t> ParseList(const CaseSpec& c, const std::string& k) {
  std::vector<int64_t> v;
  std::stringstream ss(c.Str(k, ""));
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    v.push_back(std::strtoll(item.c_str(), &end, 10));
    if (item.empty() || *end != '\0')
      Fail(c.name + ": " + k + "=" + c.Str(k, "") + " is not a list");
  }
  return v;
}

// A logical [B, H, S, D] array of values already representable in their storage format.
struct Logical {
  int64_t B = 0, H = 0, S = 0, D = 0;
  std::vector<double> v;
  Logical() = default;
  Logical(int64_t b, int64_t h, int64_t s, int64_t d) : B(b), H(h), S(s), D(d), v(b * h * s * d) {}
  double& at(int64_t b, int64_t h, int64_t s, int64_t d) {
    return v[((b * H + h) * S + s) * D + d];
  }
  double at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return v[((b * H + h) * S + s) * D + d];
  }
};

}  // namespace

// ---- CaseSpec and the list ---------------------------------------------------------------------

int64_t CaseSpec::Int(const std::string& k, int64_t def) const {
  auto it = keys.find(k);
  if (it == keys.end()) return def;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0')
    Fail(name + ": " + k + "=" + it->second + " is not an integer");
  return v;
}

double CaseSpec::Double(const std::string& k, double def) const {
  auto it = keys.find(k);
  if (it == keys.end()) return def;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0')
    Fail(name + ": " + k + "=" + it->second + " is not a number");
  return v;
}

std::string CaseSpec::Str(const std::string& k, const std::string& def) const {
  auto it = keys.find(k);
  return it == keys.end() ? def : it->second;
}

std::string CaseSpec::ToLine() const {
  std::string s = tier + " " + name;
  for (const auto& [k, v] : keys) s += " " + k + "=" + v;
  return s;
}

bool ParseCaseLine(const std::string& line, CaseSpec* out) {
  std::istringstream in(line.substr(0, line.find('#')));
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  if (tokens.empty()) return false;
  if (tokens.size() < 2) Fail("case line needs `<tier> <name> key=value ...`: '" + line + "'");
  CaseSpec c;
  c.tier = tokens[0];
  c.name = tokens[1];
  if (c.name.find('=') != std::string::npos)
    Fail("case name '" + c.name + "' contains '=': '" + line + "'");
  for (size_t i = 2; i < tokens.size(); ++i) {
    const size_t eq = tokens[i].find('=');
    if (eq == std::string::npos || eq == 0)
      Fail("'" + tokens[i] + "' is not key=value in: '" + line + "'");
    const std::string key = tokens[i].substr(0, eq);
    if (c.keys.count(key)) Fail("key '" + key + "' given twice in: '" + line + "'");
    c.keys[key] = tokens[i].substr(eq + 1);
  }
  *out = std::move(c);
  return true;
}

std::vector<CaseSpec> ReadCases(const std::string& path, const std::string& tier) {
  std::ifstream f(path);
  if (!f) Fail("cannot read the case list " + path);
  std::vector<CaseSpec> cases;
  for (std::string line; std::getline(f, line);) {
    CaseSpec c;
    if (ParseCaseLine(line, &c) && c.tier == tier) cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<CaseSpec> TierCases(const std::string& path, const std::string& tier) {
  if (tier != "smoke" && tier != "full" && tier != "model")
    Fail("OPENFIA_TIER must be smoke, full or model (got '" + tier + "')");
  std::ifstream f(path);
  if (!f) Fail("cannot read the case list " + path);
  std::vector<CaseSpec> cases;
  std::set<std::string> names;
  int lineno = 0;
  for (std::string line; std::getline(f, line);) {
    ++lineno;
    CaseSpec c;
    if (!ParseCaseLine(line, &c)) continue;
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (c.tier != "smoke" && c.tier != "full" && c.tier != "model")
      Fail(where + "unknown tier " + c.tier);
    if (!names.insert(c.name).second) Fail(where + "duplicate case name " + c.name);
    for (const auto& kv : c.keys)
      if (!KnownKeys().count(kv.first)) Fail(where + "unknown key " + kv.first);
    if (c.tier == tier || (tier == "full" && c.tier == "smoke")) cases.push_back(std::move(c));
  }
  return cases;
}

// ---- FiaCase -----------------------------------------------------------------------------------

struct FiaCase::Buffer {
  std::vector<uint64_t> words;  // 8-byte aligned storage
  explicit Buffer(int64_t bytes) : words((bytes + 7) / 8 + 1, 0) {}
  void* data() { return words.data(); }
};

TensorView FiaCase::Alloc(DType dt, std::vector<int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  buffers_.push_back(std::make_unique<Buffer>(n * ElementSize(dt)));
  return TensorView(buffers_.back()->data(), dt, std::move(sizes));
}

FiaCase::~FiaCase() = default;

namespace {

// Sizes of a [B, H, S, D] tensor in the query layout `layout` (BSH merges H and D; TND and NTD
// are handled by the caller).
std::vector<int64_t> LayoutSizes(const std::string& layout, int64_t B, int64_t H, int64_t S,
                                 int64_t D) {
  if (layout == "BNSD") return {B, H, S, D};
  if (layout == "BSND") return {B, S, H, D};
  if (layout == "BSH") return {B, S, H * D};
  Fail("layout " + layout + " has no [B,H,S,D] form");
}

int64_t LayoutIndex(const std::string& layout, int64_t H, int64_t S, int64_t D, int64_t b,
                    int64_t h, int64_t s, int64_t d) {
  if (layout == "BNSD") return ((b * H + h) * S + s) * D + d;
  return ((b * S + s) * H + h) * D + d;  // BSND, BSH
}

}  // namespace

FiaCase::FiaCase(const CaseSpec& spec) : spec_(spec) {
  const CaseSpec& c = spec_;
  for (const auto& kv : c.keys)
    if (!KnownKeys().count(kv.first)) Fail(c.name + ": unknown key " + kv.first);
  Rng rng((static_cast<uint64_t>(Crc32(c.name)) ^ static_cast<uint64_t>(c.Int("seed", 0))) *
              0x2545F4914F6CDD1Dull + 1);

  CaseGeometry& g = geo_;
  // input_layout: the query layout, after "_" the output's.
  const std::string layout = c.Str("layout", "BNSD");
  static const std::set<std::string> kLayouts = {
      "BSH",      "BSND",      "BNSD",      "TND",       "NTD",     "BNSD_BSND", "BSH_BNSD",
      "BSND_BNSD", "BSH_NBSD", "BSND_NBSD", "BNSD_NBSD", "TND_NTD", "NTD_TND"};
  if (!kLayouts.count(layout)) Fail(c.name + ": layout=" + layout + " is unknown");
  const size_t us = layout.find('_');
  const std::string in = layout.substr(0, us);
  g.layout = layout;
  g.out_layout = us == std::string::npos ? layout : layout.substr(us + 1);
  const bool packed = in == "TND" || in == "NTD";
  g.packed = packed;
  const int64_t B = c.Int("B", 1), N = c.Int("N", 1), KVN = c.Int("KVN", N);
  const int64_t S = c.Int("S", 1), KVS = c.Int("KVS", 1);
  const int64_t D = c.Int("D", 64), DV = c.Int("DV", D);
  g.B = B, g.N = N, g.KVN = KVN, g.S = S, g.KVS = KVS, g.D = D, g.DV = DV;
  const DType dt = ParseDType(c.Str("dtype", "bf16"));
  const std::string kvq = c.Str("kv", "");
  if (!kvq.empty() && kvq != "int8" && kvq != "int4") Fail(c.name + ": kv=" + kvq + " is unknown");
  const bool int4 = kvq == "int4";
  const bool fullquant = c.Int("fullquant", 0) == 1;
  const bool rope = c.Int("rope", 0) == 1;
  const int64_t RD = rope ? 64 : 0;
  g.rope_d = RD;
  const int64_t page = c.Int("page", 0);
  const int64_t prefix = c.Int("prefix", 0);
  const bool poison = c.Int("poison", 1) == 1;
  const bool use_list = c.Int("list", 0) == 1;
  g.fullquant = fullquant;
  g.float_kv = kvq.empty() && !fullquant;

  // ---- lengths and valid windows ----
  const bool has_act_q = c.Has("act_q"), has_act_kv_key = c.Has("act_kv");
  std::vector<int64_t> act_q = has_act_q ? ParseList(c, "act_q") : std::vector<int64_t>{};
  std::vector<int64_t> act_kv = has_act_kv_key ? ParseList(c, "act_kv") : std::vector<int64_t>{};
  const bool has_act_kv = has_act_kv_key || page > 0;
  if (page > 0 && !has_act_kv_key) act_kv.assign(B, KVS);
  auto broadcast = [&](const std::vector<int64_t>& l, bool given, int64_t def) {
    std::vector<int64_t> r(B, def);
    if (given)
      for (int64_t b = 0; b < B; ++b) r[b] = l.size() == 1 ? l[0] : l.at(b);
    return r;
  };
  // Q_S == 1 (the incremental branch) ignores actual_seq_lengths (docs/semantics.md 1.1; TND keeps
  // them: they give T): every query row is valid, whatever the case passes to the operator.
  const bool q_lengths_apply = has_act_q && (S != 1 || packed);
  const std::vector<int64_t> aq = broadcast(act_q, q_lengths_apply, S);
  const std::vector<int64_t> akv = broadcast(act_kv, has_act_kv, KVS);
  const bool has_qpad = c.Has("qpad"), has_kvpad = c.Has("kvpad");
  const int64_t qpad = c.Int("qpad", 0), kvpad = c.Int("kvpad", 0);
  // KV rows of batch b's tensor: KVS, or S_b for a tensor list (one poisoned tail row on odd
  // batches).
  auto kv_rows = [&](int64_t b) { return use_list ? std::min(KVS, akv[b] + b % 2) : KVS; };
  std::vector<int64_t> q_begin(B, 0), kv_begin(B, 0);
  std::vector<int64_t> gkv = akv;  // valid KV rows (akv: the lengths the operator is given)
  for (int64_t b = 0; b < B; ++b) {
    if (has_qpad && q_lengths_apply) q_begin[b] = S - qpad - aq[b];
    if (has_kvpad && has_act_kv) {
      kv_begin[b] = kv_rows(b) - kvpad - akv[b];
      // Q_S == 1: a window starting before the tensor makes the batch attend nothing
      // (docs/semantics.md 1.6, "返回数据结果为全0"); Q_S > 1 rejects it.
      if (kv_begin[b] < 0 && S == 1 && !packed) kv_begin[b] = 0, gkv[b] = 0;
    }
    // A window that starts before the tensor is an error for the operator (Q_S > 1); the
    // builder must not read there either (random cases try such combinations).
    if (q_begin[b] < 0 || kv_begin[b] < 0)
      Fail(c.name + ": a left-padded window starts before the tensor (the operator rejects it)");
  }
  g.q_begin = q_begin;
  g.q_len = aq;
  g.kv_len = gkv;
  g.q_row0.assign(B, 0);
  if (packed)
    for (int64_t b = 1; b < B; ++b) g.q_row0[b] = g.q_row0[b - 1] + aq[b - 1];

  auto q_valid = [&](int64_t b, int64_t s) { return s >= q_begin[b] && s < q_begin[b] + aq[b]; };
  auto kv_valid = [&](int64_t b, int64_t s) {
    return s >= kv_begin[b] && s < kv_begin[b] + gkv[b];
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double kv_bad = !poison ? 0.0 : (g.float_kv ? nan : (int4 ? 7.0 : 127.0));

  // ---- query ----
  Logical q(B, N, S, D), qr;
  for (double& x : q.v) x = fullquant ? rng.Int(-64, 64) : RoundTo(dt, rng.Normal());
  if (rope) {
    qr = Logical(B, N, S, RD);
    for (double& x : qr.v) x = RoundTo(dt, rng.Normal());
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < N; ++h)
      for (int64_t s = 0; s < S; ++s) {
        if (q_valid(b, s)) {
          for (int64_t d = 0; d < D; ++d)
            g.q_absmax = std::max(g.q_absmax, std::fabs(q.at(b, h, s, d)));
          for (int64_t d = 0; d < RD; ++d)
            g.q_absmax = std::max(g.q_absmax, std::fabs(qr.at(b, h, s, d)));
        } else if (poison && !fullquant) {
          for (int64_t d = 0; d < D; ++d) q.at(b, h, s, d) = nan;
        }
      }

  // ---- key / value logical [B, KVN, KVS, D] ----
  Logical k(B, KVN, KVS, D), v(B, KVN, KVS, DV), kr;
  auto fill_kv = [&](Logical& x) {
    for (double& e : x.v) {
      if (int4) e = rng.Int(-8, 8);
      else if (fullquant) e = rng.Int(-64, 64);
      else if (!kvq.empty()) e = rng.Int(-128, 128);
      else e = RoundTo(dt, rng.Normal());
    }
  };
  fill_kv(k);
  fill_kv(v);
  if (rope) {
    kr = Logical(B, KVN, KVS, RD);
    for (double& e : kr.v) e = RoundTo(dt, rng.Normal());
  }
  double k_int_max = 0, v_int_max = 0;  // over readable rows
  for (Logical* t : {&k, &v, &kr}) {
    if (t->v.empty()) continue;
    const bool is_rope = t == &kr;
    const double bad = is_rope ? (poison ? nan : 0.0) : kv_bad;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < KVN; ++h)
        for (int64_t s = 0; s < KVS; ++s)
          for (int64_t d = 0; d < t->D; ++d) {
            double& e = t->at(b, h, s, d);
            if (!kv_valid(b, s)) {
              e = bad;
              continue;
            }
            if (t == &v) v_int_max = std::max(v_int_max, std::fabs(e));
            else k_int_max = std::max(k_int_max, std::fabs(e));
          }
  }

  // Storage of a logical array in a layout and dtype (int4: packed into int32 words).
  const DType kv_dt = fullquant || kvq == "int8" ? DType::kInt8 : (int4 ? DType::kInt32 : dt);
  auto store = [&](const Logical& x, const std::string& lay, DType sdt, bool pack4) {
    std::vector<int64_t> sizes = LayoutSizes(lay, x.B, x.H, x.S, x.D);
    if (pack4) {
      if (sizes.back() % 8 != 0) Fail(c.name + ": int4 last dimension must be a multiple of 8");
      std::vector<int8_t> flat(x.v.size());
      for (int64_t b = 0; b < x.B; ++b)
        for (int64_t h = 0; h < x.H; ++h)
          for (int64_t s = 0; s < x.S; ++s)
            for (int64_t d = 0; d < x.D; ++d)
              flat[LayoutIndex(lay, x.H, x.S, x.D, b, h, s, d)] =
                  static_cast<int8_t>(x.at(b, h, s, d));
      sizes.back() /= 8;
      TensorView t = Alloc(DType::kInt32, sizes);
      auto* w = static_cast<uint32_t*>(t.data);
      for (size_t i = 0; i < flat.size(); ++i)
        w[i / 8] |= (static_cast<uint32_t>(flat[i]) & 0xFu) << (4 * (i % 8));
      return t;
    }
    TensorView t = Alloc(sdt, sizes);
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t h = 0; h < x.H; ++h)
        for (int64_t s = 0; s < x.S; ++s)
          for (int64_t d = 0; d < x.D; ++d)
            Put(t.data, sdt, LayoutIndex(lay, x.H, x.S, x.D, b, h, s, d), x.at(b, h, s, d));
    return t;
  };
  // TND: [sum(lengths), H, D] from rows [0, len_b) of each batch; NTD: [H, sum(lengths), D].
  auto store_tnd = [&](const Logical& x, const std::vector<int64_t>& len, DType sdt, bool pack4) {
    const int64_t T = std::accumulate(len.begin(), len.end(), int64_t{0});
    const bool ntd = in == "NTD";
    Logical rows(1, ntd ? x.H : T, 1, ntd ? T * x.D : x.H * x.D);  // [T, H*D] or [H, T*D]
    int64_t row = 0;
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t s = 0; s < len[b]; ++s, ++row)
        for (int64_t h = 0; h < x.H; ++h)
          for (int64_t d = 0; d < x.D; ++d)
            (ntd ? rows.at(0, h, 0, row * x.D + d) : rows.at(0, row, 0, h * x.D + d)) =
                x.at(b, h, s, d);
    TensorView t = store(rows, "BNSD", sdt, pack4);
    const int64_t dd = pack4 ? x.D / 8 : x.D;
    t.sizes = ntd ? std::vector<int64_t>{x.H, T, dd} : std::vector<int64_t>{T, x.H, dd};
    t.strides = TensorView::ContiguousStrides(t.sizes);
    return t;
  };

  // ---- KV storage ----
  int64_t total_blocks = 0;
  if (page > 0) {
    const int64_t bs = page;
    std::vector<int64_t> nblk(B);
    int64_t max_blocks = 1;
    for (int64_t b = 0; b < B; ++b) {
      nblk[b] = (akv[b] + bs - 1) / bs;
      max_blocks = std::max(max_blocks, nblk[b]);
      total_blocks += nblk[b];
    }
    total_blocks += 2;  // two unused (poisoned) blocks
    std::vector<int64_t> perm(total_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = total_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.Int(0, i + 1)]);
    TensorView bt = Alloc(DType::kInt32, {B, max_blocks + 1});
    auto* btp = static_cast<int32_t*>(bt.data);
    std::fill(btp, btp + B * (max_blocks + 1), -1);
    int64_t cur = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < nblk[b]; ++i)
        btp[b * (max_blocks + 1) + i] = static_cast<int32_t>(perm[cur++]);
    const std::string cache = c.Str("cache", "3d");
    if (cache != "3d" && cache != "4d" && cache != "nz")
      Fail(c.name + ": cache=" + cache + " is unknown");
    auto to_cache = [&](const Logical& x, bool is_rope) {
      Logical cc(total_blocks, KVN, bs, x.D);
      std::fill(cc.v.begin(), cc.v.end(), is_rope ? (poison ? nan : 0.0) : kv_bad);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < akv[b]; ++t)
          for (int64_t h = 0; h < KVN; ++h)
            for (int64_t d = 0; d < x.D; ++d)
              cc.at(btp[b * (max_blocks + 1) + t / bs], h, t % bs, d) = x.at(b, h, t, d);
      return cc;
    };
    auto cache_store = [&](const Logical& cc, DType sdt, bool pack4) {
      if (cache == "3d") return store(cc, "BSH", sdt, pack4);
      if (cache == "4d") return store(cc, "BNSD", sdt, pack4);
      if (pack4) Fail(c.name + ": the case builder has no int4 NZ cache");
      const int64_t c0 = sdt == DType::kInt8 ? 32 : 16;
      if (cc.D % c0 != 0) Fail(c.name + ": NZ needs D a multiple of " + std::to_string(c0));
      TensorView t = Alloc(sdt, {cc.B, cc.H, cc.D / c0, cc.S, c0});
      for (int64_t n = 0; n < cc.B; ++n)
        for (int64_t h = 0; h < cc.H; ++h)
          for (int64_t s = 0; s < cc.S; ++s)
            for (int64_t d = 0; d < cc.D; ++d)
              Put(t.data, sdt, (((n * cc.H + h) * (cc.D / c0) + d / c0) * cc.S + s) * c0 + d % c0,
                  cc.at(n, h, s, d));
      return t;
    };
    args_.key = cache_store(to_cache(k, false), kv_dt, int4);
    args_.value = cache_store(to_cache(v, false), kv_dt, int4);
    if (rope) args_.key_rope = cache_store(to_cache(kr, true), dt, false);
    args_.block_table = bt;
    args_.block_size = bs;
  } else if (packed) {
    args_.key = store_tnd(k, akv, kv_dt, int4);
    args_.value = store_tnd(v, akv, kv_dt, int4);
    if (rope) args_.key_rope = store_tnd(kr, akv, dt, false);
  } else if (use_list) {
    // One [1, S_b, ...] tensor per batch with one poisoned tail row on odd batches (BNSD too:
    // there the head stride S_b * D differs per tensor).
    for (int64_t b = 0; b < B; ++b) {
      const int64_t sb = kv_rows(b);
      auto slice = [&](const Logical& x) {
        Logical y(1, x.H, sb, x.D);
        for (int64_t h = 0; h < x.H; ++h)
          for (int64_t s = 0; s < sb; ++s)
            for (int64_t d = 0; d < x.D; ++d) y.at(0, h, s, d) = x.at(b, h, s, d);
        return y;
      };
      args_.key_list.push_back(store(slice(k), in, kv_dt, int4));
      args_.value_list.push_back(store(slice(v), in, kv_dt, int4));
    }
    if (rope) args_.key_rope = store(kr, in, dt, false);
  } else {
    args_.key = store(k, in, kv_dt, int4);
    args_.value = store(v, in, kv_dt, int4);
    if (rope) args_.key_rope = store(kr, in, dt, false);
  }

  // ---- query tensor and lengths ----
  const DType q_dt = fullquant ? DType::kInt8 : dt;
  if (packed) {
    args_.query = store_tnd(q, aq, q_dt, false);
    std::vector<int64_t> cq(B), ckv(B);
    std::partial_sum(aq.begin(), aq.end(), cq.begin());
    std::partial_sum(akv.begin(), akv.end(), ckv.begin());
    args_.actual_seq_lengths = cq;
    args_.actual_seq_lengths_kv = page > 0 ? akv : ckv;
    if (rope) args_.query_rope = store_tnd(qr, aq, dt, false);
  } else {
    args_.query = store(q, in, q_dt, false);
    if (has_act_q) args_.actual_seq_lengths = act_q;
    if (has_act_kv) args_.actual_seq_lengths_kv = act_kv;
    if (rope) args_.query_rope = store(qr, in, dt, false);
  }
  auto scalar_i64 = [&](int64_t x) {
    TensorView t = Alloc(DType::kInt64, {1});
    Put(t.data, DType::kInt64, 0, static_cast<double>(x));
    return t;
  };
  if (has_qpad) args_.query_padding_size = scalar_i64(qpad);
  if (has_kvpad) args_.kv_padding_size = scalar_i64(kvpad);

  // ---- shared prefix ----
  Logical kp, vp;
  g.prefix_len = prefix;
  if (prefix > 0) {
    kp = Logical(1, KVN, prefix, D);
    vp = Logical(1, KVN, prefix, DV);
    if (kvq.empty()) {
      for (double& e : kp.v) e = RoundTo(dt, rng.Normal());
      for (double& e : vp.v) e = RoundTo(dt, rng.Normal());
    } else {  // antiquant: the prefix has the key's integer dtype
      fill_kv(kp);
      fill_kv(vp);
    }
    if (c.Has("pact")) {
      const int64_t pact = c.Int("pact", 0);
      g.prefix_len = pact;
      if (poison)
        for (Logical* t : {&kp, &vp})
          for (int64_t h = 0; h < KVN; ++h)
            for (int64_t s = pact; s < prefix; ++s)
              for (int64_t d = 0; d < t->D; ++d) t->at(0, h, s, d) = kv_bad;
      args_.actual_shared_prefix_len = scalar_i64(pact);
    }
    args_.key_shared_prefix = store(kp, in, kv_dt, int4);
    args_.value_shared_prefix = store(vp, in, kv_dt, int4);
    for (int64_t h = 0; h < KVN; ++h)
      for (int64_t s = 0; s < g.prefix_len; ++s) {
        for (int64_t d = 0; d < D; ++d)
          k_int_max = std::max(k_int_max, std::fabs(kp.at(0, h, s, d)));
        for (int64_t d = 0; d < DV; ++d)
          v_int_max = std::max(v_int_max, std::fabs(vp.at(0, h, s, d)));
      }
  }
  const int64_t kv_cols = KVS + prefix;  // mask / pse columns

  // ---- masks ----
  const int64_t sparse = c.Int("sparse", 0);
  std::string mask = c.Str("mask", "none");
  if ((sparse == 2 || sparse == 3 || sparse == 4) && mask == "none") mask = "2048";
  const std::string mdt_s = c.Str("mdtype", "bool");
  DType mdt;
  if (mdt_s == "bool") mdt = DType::kBool;
  else if (mdt_s == "int8") mdt = DType::kInt8;
  else if (mdt_s == "uint8") mdt = DType::kUInt8;
  else Fail(c.name + ": mdtype=" + mdt_s + " is unknown");
  if (mask == "2048") {
    TensorView t = Alloc(mdt, {2048, 2048});
    auto* bytes = static_cast<uint8_t*>(t.data);  // bool, int8 and uint8 all store 1 as 0x01
    for (int64_t i = 0; i < 2048; ++i) std::memset(bytes + i * 2048 + i + 1, 1, 2047 - i);
    args_.atten_mask = t;
  } else if (mask != "none") {
    std::vector<uint8_t> m(B * S * kv_cols);
    for (auto& e : m) e = rng.Uniform() < 0.25;
    // Most rows stay attendable; one fully masked row tests the "no visible key" rule.
    if (S > 2)
      for (int64_t j = 0; j < kv_cols; ++j) m[(S / 2) * kv_cols + j] = 1;
    std::vector<int64_t> sizes;
    int64_t nb = B, ns = S;
    if (mask == "full") sizes = {B, S, kv_cols};
    else if (mask == "full4") sizes = {B, 1, S, kv_cols};
    else if (mask == "full2") sizes = {S, kv_cols}, nb = 1;
    else if (mask == "bkv") sizes = {B, kv_cols}, ns = 1;
    else Fail(c.name + ": mask=" + mask + " is unknown");
    TensorView t = Alloc(mdt, sizes);
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < ns; ++i)
        for (int64_t j = 0; j < kv_cols; ++j)
          Put(t.data, mdt, (b * ns + i) * kv_cols + j, m[(b * S + i) * kv_cols + j]);
    args_.atten_mask = t;
  }

  const std::string pse = c.Str("pse", "0");
  if (pse == "1" || pse == "b1") {
    pse_b_ = pse == "b1" ? 1 : B;
    pse_cols_ = kv_cols;
    TensorView t = Alloc(dt, {pse_b_, N, S, kv_cols});
    pse_log_.resize(pse_b_ * N * S * kv_cols);
    for (size_t i = 0; i < pse_log_.size(); ++i) {
      pse_log_[i] = RoundTo(dt, rng.Normal());
      Put(t.data, dt, static_cast<int64_t>(i), pse_log_[i]);
      g.pse_absmax = std::max(g.pse_absmax, std::fabs(pse_log_[i]));
    }
    args_.pse_shift = t;
  } else if (pse != "0") {
    Fail(c.name + ": pse=" + pse + " is unknown");
  }

  // ---- antiquant ----
  double k_scale_max = 1, v_scale_max = 1, k_off_max = 0, v_off_max = 0;
  if (!kvq.empty()) {
    const double qmax = int4 ? 8.0 : 128.0;
    const bool aoff = c.Int("aoff", 1) == 1;
    const std::string legacy = c.Str("legacy", "");
    const int64_t TS = prefix + KVS;  // per-token scales cover the shared prefix, then the keys
    double smax = 0, omax = 0;
    // A scale/offset pair of `sizes`, stored as `sdt`; tracks the largest magnitudes.
    auto params = [&](std::vector<int64_t> sizes, DType sdt, TensorView* s_out, TensorView* o_out) {
      TensorView s = Alloc(sdt, sizes), o = Alloc(sdt, sizes);
      for (int64_t i = 0; i < s.numel(); ++i) {
        const double sv = RoundTo(sdt, rng.Uniform(0.5 / qmax, 2.0 / qmax));
        const double ov = std::round(rng.Uniform(-3, 3));
        Put(s.data, sdt, i, sv);
        Put(o.data, sdt, i, ov);
        smax = std::max(smax, sv);
        omax = std::max(omax, std::fabs(ov));
      }
      *s_out = s;
      if (aoff) *o_out = o;
    };
    auto perchan = [&](int64_t lead) {  // per-channel shape of the layout, query dtype
      if (in == "BSH") return std::vector<int64_t>{lead, KVN * D};
      if (in == "BSND") return std::vector<int64_t>{lead, KVN, D};
      return std::vector<int64_t>{lead, KVN, 1, D};
    };
    if (!legacy.empty()) {
      if (legacy == "pc") params(perchan(2), dt, &args_.antiquant_scale, &args_.antiquant_offset);
      else if (legacy == "pt") params({2}, dt, &args_.antiquant_scale, &args_.antiquant_offset);
      else if (legacy == "tok") {
        params({2, B, TS}, DType::kFloat32, &args_.antiquant_scale, &args_.antiquant_offset);
        args_.antiquant_mode = 1;
      } else {
        Fail(c.name + ": legacy=" + legacy + " is unknown");
      }
      k_scale_max = v_scale_max = smax;
      k_off_max = v_off_max = aoff ? omax : 0;
    } else {
      const std::string km = c.Str("kmode", "0"), vm = c.Str("vmode", km);
      auto mode_params = [&](const std::string& m, TensorView* s, TensorView* o) {
        smax = omax = 0;
        if (m == "0") params(perchan(1), dt, s, o);
        else if (m == "0t") params({1}, dt, s, o);
        else if (m == "1") params({1, B, TS}, DType::kFloat32, s, o);
        else if (m == "2") params({KVN}, dt, s, o);
        else if (m == "3") params({B, KVN, TS}, DType::kFloat32, s, o);
        else if (m == "4") params({total_blocks, page}, DType::kFloat32, s, o);
        else if (m == "5") params({total_blocks, KVN, page}, DType::kFloat32, s, o);
        else Fail(c.name + ": antiquant mode " + m + " is unknown");
        if ((m == "4" || m == "5") && page == 0) Fail(c.name + ": mode " + m + " needs page");
      };
      mode_params(km, &args_.key_antiquant_scale, &args_.key_antiquant_offset);
      k_scale_max = smax, k_off_max = aoff ? omax : 0;
      mode_params(vm, &args_.value_antiquant_scale, &args_.value_antiquant_offset);
      v_scale_max = smax, v_off_max = aoff ? omax : 0;
      args_.key_antiquant_mode = km[0] - '0';
      args_.value_antiquant_mode = vm[0] - '0';
    }
  }

  // Bounds on |K| and |V| as the kernel sees them (antiquant: (x + offset) * scale rounded to the
  // query dtype; full quantization: raw int8).
  const double round_up = 1 + Eps(dt);
  if (!kvq.empty()) {
    g.k_absmax = (k_int_max + k_off_max) * k_scale_max * round_up;
    g.v_absmax = (v_int_max + v_off_max) * v_scale_max * round_up;
  } else {
    g.k_absmax = k_int_max;
    g.v_absmax = v_int_max;
  }
  if (rope)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < KVN; ++h)
        for (int64_t s = kv_begin[b]; s < kv_begin[b] + gkv[b]; ++s)
          for (int64_t d = 0; d < RD; ++d)
            g.k_absmax = std::max(g.k_absmax, std::fabs(kr.at(b, h, s, d)));

  // ---- full quantization: powers of two, exact after the kernel's float19 cut ----
  if (fullquant) {
    auto f32 = [&](double x) {
      TensorView t = Alloc(DType::kFloat32, {1});
      Put(t.data, DType::kFloat32, 0, x);
      return t;
    };
    args_.dequant_scale1 = f32(0x1p-8);
    args_.quant_scale1 = f32(127.0);
    args_.dequant_scale2 = f32(0x1p-13);
  }

  // ---- post-quantization ----
  const std::string outq = c.Str("outq", "");
  if (!outq.empty()) {
    std::vector<int64_t> shape;
    if (outq == "pt") shape = {1};
    else if (outq != "pc") Fail(c.name + ": outq=" + outq + " is unknown");
    else if (g.out_layout == "BSH") shape = {1, 1, N * DV};
    else if (g.out_layout == "BNSD") shape = {1, N, 1, DV};
    else shape = {N, DV};  // any N * DV elements
    TensorView s = Alloc(DType::kFloat32, shape), o = Alloc(DType::kFloat32, shape);
    for (int64_t i = 0; i < s.numel(); ++i) {
      Put(s.data, DType::kFloat32, i, rng.Uniform(20.0, 60.0));
      Put(o.data, DType::kFloat32, i, rng.Uniform(-3.0, 3.0));
    }
    args_.quant_scale2 = s;
    if (c.Int("qo2", 1) == 1) args_.quant_offset2 = o;
    g.int8_out = true;
  }

  // ---- learnable sinks ----
  const std::string sinks = c.Str("sinks", "");
  if (!sinks.empty()) {
    const DType sdt = ParseDType(sinks);
    TensorView t = Alloc(sdt, {N});
    g.sinks.resize(N);
    for (int64_t h = 0; h < N; ++h) {
      g.sinks[h] = RoundTo(sdt, rng.Uniform(-1.0, 3.0));
      Put(t.data, sdt, h, g.sinks[h]);
    }
    args_.sinks = t;
  }

  // ---- attributes ----
  args_.num_heads = N;
  if (c.Has("KVN")) args_.num_key_value_heads = KVN;
  args_.input_layout = layout;
  g.scale = c.Has("scale") ? c.Double("scale", 1.0) : 1.0 / std::sqrt(static_cast<double>(D + RD));
  args_.scale = g.scale;
  args_.sparse_mode = sparse;
  args_.pre_tokens = c.Int("pre", 2147483647);
  args_.next_tokens = c.Int("next", 2147483647);
  args_.inner_precise = c.Int("ip", 0);
  args_.softmax_lse_flag = c.Int("lse", 0) == 1;
  g.all_visible = mask == "none" && sparse == 0 && !c.Has("pre") && !c.Has("next");
  // Score() indexes pse by tensor row and logical key; that is the pse coordinate only without
  // padding and prefix (their pse offsets are openfia's business, tested elsewhere).
  g.scores_known = g.all_visible && g.float_kv &&
                   (pse_log_.empty() || (prefix == 0 && !has_qpad && !has_kvpad));

  // ---- logical values for Score(): float KV only ----
  if (g.float_kv) {
    const int64_t dqk = D + RD;
    q_log_.assign(B * N * S * dqk, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t s = 0; s < S; ++s) {
          for (int64_t d = 0; d < D; ++d)
            q_log_[((b * N + h) * S + s) * dqk + d] = q.at(b, h, s, d);
          for (int64_t d = 0; d < RD; ++d)
            q_log_[((b * N + h) * S + s) * dqk + D + d] = qr.at(b, h, s, d);
        }
    k_rows_ = g.prefix_len + KVS;
    k_log_.assign(B * KVN * k_rows_ * dqk, 0);
    v_log_.assign(B * KVN * k_rows_ * DV, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < KVN; ++h)
        for (int64_t j = 0; j < g.prefix_len + gkv[b]; ++j) {
          double* dst = &k_log_[((b * KVN + h) * k_rows_ + j) * dqk];
          double* vdst = &v_log_[((b * KVN + h) * k_rows_ + j) * DV];
          if (j < g.prefix_len) {
            for (int64_t d = 0; d < D; ++d) dst[d] = kp.at(0, h, j, d);
            for (int64_t d = 0; d < DV; ++d) vdst[d] = vp.at(0, h, j, d);
          } else {
            const int64_t t = kv_begin[b] + j - g.prefix_len;
            for (int64_t d = 0; d < D; ++d) dst[d] = k.at(b, h, t, d);
            for (int64_t d = 0; d < RD; ++d) dst[D + d] = kr.at(b, h, t, d);
            for (int64_t d = 0; d < DV; ++d) vdst[d] = v.at(b, h, t, d);
          }
        }
  }

  // ---- outputs ----
  out_spec_ = FusedInferAttentionScoreOutputSpec(args_);
  out_ = Alloc(out_spec_.attention_out_dtype, out_spec_.attention_out_sizes);
  if (args_.softmax_lse_flag) lse_ = Alloc(DType::kFloat32, out_spec_.softmax_lse_sizes);
}

void FiaCase::Run() {
  // A sentinel in every output byte: an element the call forgets to write cannot look valid.
  std::memset(out_.data, 0xA5, out_.numel() * ElementSize(out_.dtype));
  if (lse_.defined()) std::memset(lse_.data, 0xA5, lse_.numel() * sizeof(float));
  FusedInferAttentionScore(args_, out_, lse_);
}

std::vector<uint8_t> FiaCase::OutBytes() const {
  const auto* p = static_cast<const uint8_t*>(out_.data);
  return std::vector<uint8_t>(p, p + out_.numel() * ElementSize(out_.dtype));
}

std::vector<float> FiaCase::LseValues() const {
  if (!lse_.defined()) return {};
  const auto* p = static_cast<const float*>(lse_.data);
  return std::vector<float>(p, p + lse_.numel());
}

int64_t FiaCase::OutRows(int64_t b) const { return geo_.packed ? geo_.q_len[b] : geo_.S; }

int64_t FiaCase::OutIndex(int64_t b, int64_t h, int64_t row, int64_t d) const {
  const CaseGeometry& g = geo_;
  const std::string& o = g.out_layout;
  if (o == "TND") return ((g.q_row0[b] + row) * g.N + h) * g.DV + d;
  if (o == "NTD") {
    const int64_t T = std::accumulate(g.q_len.begin(), g.q_len.end(), int64_t{0});
    return (h * T + g.q_row0[b] + row) * g.DV + d;
  }
  if (o == "BNSD") return ((b * g.N + h) * g.S + row) * g.DV + d;
  if (o == "NBSD") return ((h * g.B + b) * g.S + row) * g.DV + d;
  return ((b * g.S + row) * g.N + h) * g.DV + d;  // BSH, BSND
}

int64_t FiaCase::LseIndex(int64_t b, int64_t h, int64_t row) const {
  const CaseGeometry& g = geo_;
  if (g.packed) return (g.q_row0[b] + row) * g.N + h;
  return (b * g.N + h) * g.S + row;
}

double FiaCase::Score(int64_t b, int64_t h, int64_t row, int64_t j) const {
  const CaseGeometry& g = geo_;
  if (q_log_.empty()) Fail(spec_.name + ": Score() needs float K");
  const int64_t dqk = g.D + g.rope_d, hk = h / (g.N / g.KVN);
  const double* qp = &q_log_[((b * g.N + h) * g.S + row) * dqk];
  const double* kp = &k_log_[((b * g.KVN + hk) * k_rows_ + j) * dqk];
  double dot = 0;
  for (int64_t d = 0; d < dqk; ++d) dot += qp[d] * kp[d];
  double s = dot * g.scale;
  if (!pse_log_.empty()) {
    const int64_t pb = pse_b_ == 1 ? 0 : b;
    s += pse_log_[((pb * g.N + h) * g.S + row) * pse_cols_ + j];
  }
  return s;
}

double FiaCase::Value(int64_t b, int64_t h, int64_t j, int64_t d) const {
  const CaseGeometry& g = geo_;
  if (v_log_.empty()) Fail(spec_.name + ": Value() needs float V");
  return v_log_[((b * g.KVN + h / (g.N / g.KVN)) * k_rows_ + j) * g.DV + d];
}

}  // namespace openfia::cases
