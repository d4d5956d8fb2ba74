// openfia from C++: a Llama-style GQA prefill (causal, BSH) and one paged decode step, through
// the framework-free API (TensorView over your own buffers). Build it inside the openfia tree
// (OPENFIA_BUILD_EXAMPLES=ON) or against an installed openfia (examples/cpp/CMakeLists.txt).
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
    std::printf("prefill: out[0] = %f, lse[0] = %f\n", FromBf16(out[0]), lse[0]);

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
    std::printf("decode: out[0] = %f\n", FromBf16(dout[0]));
  } catch (const openfia::Error& e) {  // every invalid call: argument, rule and value
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("openfia %s, SIMD target %s\n", openfia::Version().c_str(),
              openfia::SimdTarget().c_str());
  return 0;
}
