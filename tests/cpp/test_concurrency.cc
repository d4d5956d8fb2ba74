// Calls from several threads at once while another thread changes the thread count: every result
// must be bitwise the single-threaded one. The ThreadSanitizer build (preset tsan) runs this file
// and test_guarantees.cc (openfia_thread_tests), so a data race anywhere on these paths (the
// pool, the settings, the engine's kept scratch, the planner) fails CI.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "openfia/openfia.h"
#include "test_kvqsfa_util.h"
#include "test_sas_fixture.h"

namespace openfia {
namespace {

// Repetitions per calling thread (TSan runs each call ~10x slower).
constexpr int kRounds = 6;

struct SasCall {
  sas_test::SasFixture f;
  SasArgs a;
  std::vector<int32_t> metadata;
  explicit SasCall(bool with_metadata) {
    f.tnd = true;
    f.n1 = 8;
    f.q_len = {3, 1, 6};
    f.kv_len = {200, 40, 90};
    f.ratio = 4;
    f.k2 = 12;
    a = f.Build();
    if (with_metadata) {
      metadata.assign(kSasMetadataWords, 0);
      SparseAttnSharedkvMetadata(f.MetaArgs(3),
                                 TensorView(metadata.data(), DType::kInt32, {kSasMetadataWords}));
      a.metadata = TensorView(metadata.data(), DType::kInt32, {kSasMetadataWords});
    }
  }
  std::vector<uint8_t> Run() {
    f.Run(a);
    return sas_test::Bytes(f);
  }
};

struct KvqCall {
  kvqtest::Built B;
  KvqCall() {
    kvqtest::Case c;
    c.layout_q = "TND";
    c.layout_kv = "PA_BSND";
    c.batch = 2;
    c.heads = 16;
    c.s1 = 3;
    c.s2 = 70;
    c.topk = 24;
    c.sinks = true;
    B = kvqtest::Build(c);
  }
  std::vector<uint16_t> Run() {
    const KvqsfaArgs a = B.Args();
    const KvqsfaOutputSpec spec = KvQuantSparseFlashAttentionOutputSpec(a);
    int64_t n = 1;
    for (int64_t s : spec.attention_out_sizes) n *= s;
    std::vector<uint16_t> out(n);
    KvQuantSparseFlashAttention(a, TensorView(out.data(), spec.attention_out_dtype,
                                              spec.attention_out_sizes));
    return out;
  }
};

TEST(Concurrency, CallsFromSeveralThreadsWhileTheThreadCountChanges) {
  const int saved = GetNumThreads();
  SetNumThreads(1);
  const std::vector<uint8_t> sas_want = SasCall(false).Run();
  EXPECT_EQ(SasCall(true).Run(), sas_want);  // the plan does not change the result
  const std::vector<uint16_t> kvq_want = KvqCall().Run();

  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0}, errors{0};
  // The thread count changes under the callers' feet: 1, 2, 3, 4, 1, ...
  std::thread changer([&] {
    for (int i = 0; !done.load(); ++i) {
      SetNumThreads(1 + i % 4);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      try {
        // Each thread owns its inputs and outputs (the calls share only openfia's state).
        SasCall sas(t % 2 == 1);
        KvqCall kvq;
        for (int r = 0; r < kRounds; ++r) {
          if (sas.Run() != sas_want) mismatches++;
          if (kvq.Run() != kvq_want) mismatches++;
        }
      } catch (...) {
        errors++;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  done = true;
  changer.join();
  SetNumThreads(saved);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Concurrency, MergesFromSeveralThreads) {
  const int64_t B = 2, N = 3, S = 17, D = 40;
  std::vector<float> oa(B * N * S * D), ob(oa.size()), la(B * N * S), lb(la.size());
  for (size_t i = 0; i < oa.size(); ++i) {
    oa[i] = static_cast<float>((i * 37) % 101) / 50.f - 1.f;
    ob[i] = static_cast<float>((i * 53) % 97) / 48.f - 1.f;
  }
  for (size_t i = 0; i < la.size(); ++i) {
    la[i] = static_cast<float>(i % 7) - 2.f;
    lb[i] = i % 5 == 0 ? std::numeric_limits<float>::infinity() : static_cast<float>(i % 3);
  }
  const auto merge = [&](std::vector<float>* out, std::vector<float>* lse) {
    out->assign(oa.size(), 0.f);
    lse->assign(la.size(), 0.f);
    MergeAttentionStates({TensorView(oa.data(), DType::kFloat32, {B, N, S, D}),
                          TensorView(la.data(), DType::kFloat32, {B, N, S})},
                         {TensorView(ob.data(), DType::kFloat32, {B, N, S, D}),
                          TensorView(lb.data(), DType::kFloat32, {B, N, S})},
                         {TensorView(out->data(), DType::kFloat32, {B, N, S, D}),
                          TensorView(lse->data(), DType::kFloat32, {B, N, S})});
  };
  std::vector<float> want, want_lse;
  merge(&want, &want_lse);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t) {
    ts.emplace_back([&] {
      std::vector<float> out, lse;
      for (int r = 0; r < 20; ++r) {
        merge(&out, &lse);
        if (out != want || lse != want_lse) mismatches++;
      }
    });
  }
  for (std::thread& t : ts) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace openfia
