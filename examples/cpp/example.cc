// openfia from C++: a Llama-style GQA prefill (causal, BSH) and one paged decode step, through
// the framework-free API (TensorView over your own buffers), each checked element by element
// against a plain double-precision loop over the same attention; exits 1 if they disagree.
// Build it inside the openfia tree (OPENFIA_BUILD_EXAMPLES=ON) or against an installed openfia
// (examples/cpp/CMakeLists.txt).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "openfia/openfia.h"

namespace {

// float -> bfloat16 bits, round to nearest even (inputs here are finite).
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float FromBf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist;
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = ToBf16(dist(rng));
  return v;
}

// The attention of one query row (head h) in double precision: keys 0 .. n_keys-1 of KV head
// h / group, rows of `kv_stride` values, head hk at offset hk * d. Checks openfia's output row
// `got` (bf16) element by element. With u = 2^-8 (bf16's unit roundoff: openfia rounds P to
// bf16 before P.V and the output to bf16), the first-order errors are u |out|, u (P|V|),
// 2 d 2^-24 score_abs (P|V|) (float32 scores) and n_keys 2^-24 (P|V|) (float32 sums); the bound
// is twice their sum. Returns false (and says why) on the first element outside it.
bool CheckRow(const char* what, const uint16_t* q, const uint16_t* k, const uint16_t* v,
              int64_t kv_stride, int64_t hk, int64_t n_keys, int64_t d, double scale,
              const uint16_t* got) {
  std::vector<double> s(n_keys);
  double m = -INFINITY, score_abs = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    double dot = 0, dabs = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double a = FromBf16(q[c]), b = FromBf16(k[j * kv_stride + hk * d + c]);
      dot += a * b;
      dabs += std::fabs(a * b);
    }
    s[j] = dot * scale;
    score_abs = std::max(score_abs, dabs * scale);
    m = std::max(m, s[j]);
  }
  double l = 0;
  for (double& x : s) l += (x = std::exp(x - m));
  const double u = 0x1p-8, u32 = 0x1p-24;
  for (int64_t c = 0; c < d; ++c) {
    double out = 0, out_abs = 0;
    for (int64_t j = 0; j < n_keys; ++j) {
      const double val = FromBf16(v[j * kv_stride + hk * d + c]);
      out += s[j] / l * val;
      out_abs += s[j] / l * std::fabs(val);
    }
    const double bound = 2 * (u * (std::fabs(out) + out_abs) +
                              u32 * (2.0 * static_cast<double>(d) * score_abs +
                                     static_cast<double>(n_keys)) * out_abs);
    const double err = std::fabs(FromBf16(got[c]) - out);
    if (!(err <= bound)) {
      std::fprintf(stderr, "%s: FAILED at channel %lld: openfia %g, reference %g, bound %g\n",
                   what, static_cast<long long>(c), FromBf16(got[c]), out, bound);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  constexpr int64_t kN = 32, kKvN = 8, kD = 128, kPrompt = 200, kBlock = 128;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  std::mt19937 rng(0);
  using openfia::DType;
  using openfia::TensorView;

  // ---- prefill: [1, S, H] BSH, sparse_mode 3 (right-down causal) with the 2048x2048 mask ----
  auto q = RandomBf16(kPrompt * kN * kD, rng);
  auto k = RandomBf16(kPrompt * kKvN * kD, rng);
  auto v = RandomBf16(kPrompt * kKvN * kD, rng);
  std::vector<uint8_t> causal(2048 * 2048);
  for (int64_t i = 0; i < 2048; ++i)
    for (int64_t j = 0; j < 2048; ++j) causal[i * 2048 + j] = j > i;

  openfia::FiaArgs args;
  args.query = TensorView(q.data(), DType::kBFloat16, {1, kPrompt, kN * kD});
  args.key = TensorView(k.data(), DType::kBFloat16, {1, kPrompt, kKvN * kD});
  args.value = TensorView(v.data(), DType::kBFloat16, {1, kPrompt, kKvN * kD});
  args.atten_mask = TensorView(causal.data(), DType::kBool, {2048, 2048});
  args.num_heads = kN;
  args.num_key_value_heads = kKvN;
  args.input_layout = "BSH";
  args.scale = scale;
  args.sparse_mode = 3;
  args.softmax_lse_flag = true;
  try {
    // Ask for the output shapes, allocate, compute.
    const openfia::FiaOutputSpec spec = openfia::FusedInferAttentionScoreOutputSpec(args);
    std::vector<uint16_t> out(TensorView(nullptr, spec.attention_out_dtype,
                                         spec.attention_out_sizes).numel());
    std::vector<float> lse(kN * kPrompt);
    openfia::FusedInferAttentionScore(
        args, TensorView(out.data(), spec.attention_out_dtype, spec.attention_out_sizes),
        TensorView(lse.data(), DType::kFloat32, spec.softmax_lse_sizes));
    // Query row i (head h) attends keys 0 .. i of KV head h / group (causal).
    const int64_t group = kN / kKvN;
    bool ok = true;
    for (int64_t i = 0; i < kPrompt && ok; ++i)
      for (int64_t h = 0; h < kN && ok; ++h)
        ok = CheckRow("prefill", &q[(i * kN + h) * kD], k.data(), v.data(), kKvN * kD, h / group,
                      i + 1, kD, scale, &out[(i * kN + h) * kD]);
    if (!ok) return 1;
    std::printf("prefill: %lld tokens x %lld heads match the double-precision loop\n",
                static_cast<long long>(kPrompt), static_cast<long long>(kN));

    // ---- decode: one query token over a paged cache [blocks, block_size, KV_N*D] ----
    const int64_t seq_len = kPrompt + 1, blocks = 4;
    std::vector<uint16_t> key_cache(blocks * kBlock * kKvN * kD, 0);
    std::vector<uint16_t> value_cache(key_cache.size(), 0);
    std::vector<int32_t> block_table = {3, 1};  // any free blocks of the pool
    auto k_new = RandomBf16(kKvN * kD, rng), v_new = RandomBf16(kKvN * kD, rng);
    for (int64_t t = 0; t < seq_len; ++t) {
      const uint16_t* ks = t < kPrompt ? &k[t * kKvN * kD] : k_new.data();
      const uint16_t* vs = t < kPrompt ? &v[t * kKvN * kD] : v_new.data();
      const int64_t row = (block_table[t / kBlock] * kBlock + t % kBlock) * kKvN * kD;
      std::memcpy(&key_cache[row], ks, kKvN * kD * 2);
      std::memcpy(&value_cache[row], vs, kKvN * kD * 2);
    }
    auto q_step = RandomBf16(kN * kD, rng);
    openfia::FiaArgs dec;
    dec.query = TensorView(q_step.data(), DType::kBFloat16, {1, 1, kN * kD});
    dec.key = TensorView(key_cache.data(), DType::kBFloat16, {blocks, kBlock, kKvN * kD});
    dec.value = TensorView(value_cache.data(), DType::kBFloat16, {blocks, kBlock, kKvN * kD});
    dec.block_table = TensorView(block_table.data(), DType::kInt32, {1, 2});
    dec.block_size = kBlock;
    dec.actual_seq_lengths_kv = std::vector<int64_t>{seq_len};
    dec.num_heads = kN;
    dec.num_key_value_heads = kKvN;
    dec.input_layout = "BSH";
    dec.scale = scale;
    const openfia::FiaOutputSpec dspec = openfia::FusedInferAttentionScoreOutputSpec(dec);
    std::vector<uint16_t> dout(kN * kD);
    openfia::FusedInferAttentionScore(
        dec, TensorView(dout.data(), dspec.attention_out_dtype, dspec.attention_out_sizes),
        TensorView());
    // The logical sequence (prompt + new token) in order, for the plain loop.
    std::vector<uint16_t> seq_k(k), seq_v(v);
    seq_k.insert(seq_k.end(), k_new.begin(), k_new.end());
    seq_v.insert(seq_v.end(), v_new.begin(), v_new.end());
    for (int64_t h = 0; h < kN; ++h)
      if (!CheckRow("decode", &q_step[h * kD], seq_k.data(), seq_v.data(), kKvN * kD, h / group,
                    seq_len, kD, scale, &dout[h * kD]))
        return 1;
    std::printf("decode: %lld heads over %lld cached tokens match the double-precision loop\n",
                static_cast<long long>(kN), static_cast<long long>(seq_len));
  } catch (const openfia::Error& e) {  // every invalid call: argument, rule and value
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("openfia %s, SIMD target %s\n", openfia::Version().c_str(),
              openfia::SimdTarget().c_str());
  return 0;
}
