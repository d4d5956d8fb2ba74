// The library-wide guarantees of docs/guarantees.md that C++ can show: settings checked where
// they are set, a thread pool that survives exceptions, fork() and thread-count changes, index
// tensors read once into openfia's memory, outputs that must not overlap inputs, the sinks rule
// for non-finite values, and bounded planning memory. (Concurrent calls are in
// test_concurrency.cc, which the ThreadSanitizer build runs.)
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "common/views.h"
#include "openfia/openfia.h"
#include "settings_scope.h"
#include "test_kvqsfa_util.h"
#include "test_sas_fixture.h"

namespace openfia {
namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();

// f() must throw openfia::Error naming `argument` whose message contains `fragment`.
void ExpectError(const std::function<void()>& f, const std::string& argument,
                 const std::string& fragment, ErrorCode code = ErrorCode::kInvalidArgument) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

using testutil::ImplScope;
using testutil::ThreadsScope;

// ---- settings ----------------------------------------------------------------------------

TEST(Settings, ThreadCountOutsideItsRangeIsRejectedWhereItIsSet) {
  const int before = GetNumThreads();
  ExpectError([] { SetNumThreads(0); }, "n", "[1, 1024]");
  ExpectError([] { SetNumThreads(kMaxNumThreads + 1); }, "n", "[1, 1024]");
  ExpectError([] { SetNumThreads(100000); }, "n", "set_num_threads");
  EXPECT_EQ(GetNumThreads(), before);
}

TEST(Settings, UnknownSimdCapIsRejectedWhereItIsSet) {
  const std::string before = SimdTarget();
  ExpectError([] { SetSimdCap("bogus"); }, "target", "avx512bf16");
  EXPECT_EQ(SimdTarget(), before);
  for (const std::string& name : SimdCapNames()) {
    SetSimdCap(name);  // every documented name is accepted
    EXPECT_FALSE(SimdTarget().empty()) << name;
  }
  SetSimdCap("");
  EXPECT_EQ(SimdTarget(), before);
}

// ---- the thread pool ---------------------------------------------------------------------

TEST(Parallel, AnExceptionInAnyItemReachesTheCaller) {
  ThreadsScope threads(3);
  for (int64_t bad : {0, 1, 57, 99}) {
    std::atomic<int64_t> ran{0};
    try {
      internal::ParallelFor(100, [&](int64_t i, int) {
        ran++;
        if (i == bad) throw std::runtime_error("item " + std::to_string(i));
      });
      ADD_FAILURE() << "no exception for item " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "item " + std::to_string(bad));
    }
    EXPECT_GE(ran.load(), 1);
    // The pool serves the next call as if nothing happened.
    std::vector<std::atomic<int>> hits(200);
    internal::ParallelFor(200, [&](int64_t i, int) { hits[i]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

// Each worker runs a contiguous share front to back and then halves of the others' rests: with
// the first half of the items slow, every item still runs once, and each worker's items come in
// a few ascending runs rather than interleaved with the others' (as one-by-one claiming gives).
TEST(Parallel, WorkersRunConsecutiveItemsWhenSomeAreSlow) {
  ThreadsScope threads(3);
  constexpr int64_t kItems = 300;
  std::vector<std::atomic<int>> hits(kItems);
  std::vector<std::vector<int64_t>> order(3);
  internal::ParallelFor(
      kItems,
      [&](int64_t i, int w) {
        hits[i]++;
        order[w].push_back(i);
        if (i < kItems / 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
      },
      3);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  for (const auto& o : order) {
    int64_t runs = 0;
    for (size_t k = 0; k < o.size(); ++k) runs += k == 0 || o[k] != o[k - 1] + 1;
    EXPECT_LE(runs, 25) << "items of one worker scattered: " << runs << " runs of " << o.size();
  }
}

#if !defined(__SANITIZE_THREAD__)
// A child of fork() inherits the pool object but not its threads: its first multi-threaded call
// must not wait for them, and must give the parent's results bit for bit.
TEST(Parallel, ForkedChildRunsWithItsOwnPoolAndTheParentsResults) {
  if (std::getenv("OPENFIA_TEST_EMULATED") != nullptr)
    GTEST_SKIP() << "user-mode QEMU does not survive fork() of a multi-threaded process";
  ThreadsScope threads(3);
  sas_test::SasFixture f;
  f.n1 = 8;
  f.q_len = {40, 40};
  f.kv_len = {400, 90};
  f.ratio = 4;
  const SasArgs a = f.Build();
  f.Run(a);  // starts the pool's threads
  const std::vector<uint8_t> parent = sas_test::Bytes(f);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a hang ends the child with SIGALRM instead of the test run
    f.Run(a);
    std::vector<int> hits(1000, 0);
    internal::ParallelFor(1000, [&](int64_t i, int) { hits[i]++; });
    bool ok = sas_test::Bytes(f) == parent;
    for (int h : hits) ok = ok && h == 1;
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's results differ from the parent's";
}
#endif

// ---- index tensors: one snapshot -----------------------------------------------------------

TEST(Snapshot, CopiesAStridedViewInItsLogicalOrder) {
  std::vector<int32_t> mem(64);
  for (int i = 0; i < 64; ++i) mem[i] = i;
  internal::Snapshot snap;
  // [3, 4] with strides (2, 7): element (i, j) at 2i + 7j.
  const TensorView v(mem.data(), DType::kInt32, {3, 4}, {2, 7});
  const TensorView c = snap.Take(v, "t");
  EXPECT_NE(c.data, v.data);
  EXPECT_EQ(c.strides, (std::vector<int64_t>{4, 1}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(static_cast<int32_t*>(c.data)[i * 4 + j], 2 * i + 7 * j);
  mem[0] = 1000;  // the copy does not follow the caller's memory
  EXPECT_EQ(static_cast<int32_t*>(c.data)[0], 0);
  // A 0-d view, an empty view and an absent one.
  EXPECT_EQ(*static_cast<int32_t*>(snap.Take(TensorView(&mem[5], DType::kInt32, {}), "t").data),
            5);
  EXPECT_EQ(snap.Take(TensorView(nullptr, DType::kInt32, {0, 3}), "t").numel(), 0);
  EXPECT_FALSE(snap.Take(TensorView(), "t").defined());
  ExpectError([&] { snap.Take(TensorView(nullptr, DType::kInt32, {2}), "block_table"); },
              "block_table", "null pointer");
  ExpectError([&] { snap.Take(TensorView(mem.data(), DType::kInt32, {2}, {-1}), "x"); }, "x",
              "non-negative");
}

// ---- outputs never overlap inputs ----------------------------------------------------------

TEST(Outputs, KvqsfaOutputOverlappingAnInputIsRejected) {
  kvqtest::Case c;
  kvqtest::Built B = kvqtest::Build(c);
  const KvqsfaArgs a = B.Args();
  const KvqsfaOutputSpec spec = KvQuantSparseFlashAttentionOutputSpec(a);
  // attention_out placed over the key rows (partial overlap: it starts 600 bytes in).
  ASSERT_GE(B.key_store.size() * 4, 600 + 2 * static_cast<size_t>(c.batch * c.s1 * c.heads * 512));
  const TensorView over_key(B.key_bytes() + 600, spec.attention_out_dtype,
                            spec.attention_out_sizes);
  ExpectError([&] { KvQuantSparseFlashAttention(a, over_key); }, "attention_out",
              "must not overlap 'key'");
  const TensorView over_query(B.query.data(), spec.attention_out_dtype, spec.attention_out_sizes);
  ExpectError([&] { KvQuantSparseFlashAttention(a, over_query); }, "attention_out",
              "must not overlap 'query'");
}

TEST(Outputs, SasOutputsOverlappingInputsOrEachOtherAreRejected) {
  sas_test::SasFixture f;
  const SasArgs a = f.Build();
  const SasOutputSpec spec = SparseAttnSharedkvOutputSpec(a);
  f.Run(a);
  std::vector<float> lse(f.lsebuf.size());
  const TensorView lse_view(lse.data(), DType::kFloat32, spec.softmax_lse_sizes);
  const TensorView out_over_q(f.qbuf.data(), spec.attention_out_dtype, spec.attention_out_sizes);
  ExpectError([&] { SparseAttnSharedkv(a, out_over_q, lse_view); }, "attention_out",
              "must not overlap 'q'");
  const TensorView out_view(f.outbuf.data(), spec.attention_out_dtype, spec.attention_out_sizes);
  const TensorView lse_over_out(f.outbuf.data() + 4, DType::kFloat32, spec.softmax_lse_sizes);
  ExpectError([&] { SparseAttnSharedkv(a, out_view, lse_over_out); }, "softmax_lse",
              "must not overlap 'attention_out'");
  const TensorView lse_over_table(f.ori_bt.data(), DType::kFloat32, {1});
  SasArgs no_lse = a;
  no_lse.return_softmax_lse = false;
  ExpectError([&] { SparseAttnSharedkv(no_lse, out_view, lse_over_table); }, "softmax_lse",
              "must not overlap 'ori_block_table'");
  // The metadata op's output over its own lengths.
  std::vector<int32_t> words(kSasMetadataWords + f.seqused.size());
  SasMetadataArgs m = f.MetaArgs(2);
  m.seqused_kv = TensorView(words.data(), DType::kInt32, {f.B()});
  std::copy(f.seqused.begin(), f.seqused.end(), words.begin());
  ExpectError(
      [&] {
        SparseAttnSharedkvMetadata(m, TensorView(words.data(), DType::kInt32, {kSasMetadataWords}));
      },
      "metadata", "must not overlap 'seqused_kv'");
}

// A small BSND FusedInferAttentionScore call over `mem` (q [1, 2, 4, 16], k / v [1, 5, 4, dv]).
struct FiaSmall {
  std::vector<float> q = std::vector<float>(2 * 4 * 16), k = std::vector<float>(5 * 4 * 16);
  std::vector<float> out = std::vector<float>(2 * 4 * 16), lse = std::vector<float>(4 * 2);
  FiaArgs a;
  explicit FiaSmall(int64_t dv) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((i * 5) % 11) / 11.f - 0.5f;
    a.query = TensorView(q.data(), DType::kFloat32, {1, 2, 4, 16});
    a.key = TensorView(k.data(), DType::kFloat32, {1, 5, 4, 16});
    a.value = TensorView(k.data(), DType::kFloat32, {1, 5, 4, dv});
    a.num_heads = 4;
    a.input_layout = "BSND";
    a.softmax_lse_flag = true;
  }
  TensorView Out(int64_t dv) { return TensorView(out.data(), DType::kFloat32, {1, 2, 4, dv}); }
  TensorView Lse() { return TensorView(lse.data(), DType::kFloat32, {1, 4, 2, 1}); }
};

TEST(Outputs, FiaOutputOverlappingAnInputIsRejected) {
  FiaSmall f(16);
  ExpectError([&] { FusedInferAttentionScore(f.a, TensorView(f.k.data() + 8, DType::kFloat32,
                                                               {1, 2, 4, 16}), f.Lse()); },
              "attention_out", "must not overlap 'key'");
  ExpectError([&] { FusedInferAttentionScore(f.a, f.Out(16), TensorView(f.out.data() + 3,
                                                                        DType::kFloat32,
                                                                        {1, 4, 2, 1})); },
              "softmax_lse", "must not overlap 'attention_out'");
}

// The lse does not depend on V: a value head size of 0 still gives every row's log-sum-exp.
TEST(Errors, FiaValueHeadSize0KeepsTheLse) {
  for (Impl impl : {Impl::kEngine, Impl::kReference}) {
    SCOPED_TRACE(impl == Impl::kEngine ? "engine" : "reference");
    ImplScope scope(impl);
    FiaSmall with(16), without(0);
    FusedInferAttentionScore(with.a, with.Out(16), with.Lse());
    FusedInferAttentionScore(without.a, without.Out(0), without.Lse());
    for (size_t i = 0; i < with.lse.size(); ++i) {
      EXPECT_TRUE(std::isfinite(without.lse[i])) << i;
      EXPECT_EQ(without.lse[i], with.lse[i]) << i;
    }
  }
}

TEST(Errors, FiaTndWithoutBatchesAndUnbackedHugeBatchesAreRefused) {
  FiaSmall f(16);
  FiaArgs tnd = f.a;
  tnd.input_layout = "TND";
  tnd.query = TensorView(f.q.data(), DType::kFloat32, {2, 4, 16});
  tnd.key = tnd.value = TensorView(f.k.data(), DType::kFloat32, {5, 4, 16});
  tnd.actual_seq_lengths = std::vector<int64_t>{};
  tnd.actual_seq_lengths_kv = std::vector<int64_t>{};
  ExpectError([&] { FusedInferAttentionScoreOutputSpec(tnd); }, "actual_seq_lengths",
              "at least one");
  // 2^28 batches of nothing: refused before any per-batch bookkeeping is sized.
  FiaArgs empty = f.a;
  empty.query = TensorView(nullptr, DType::kFloat32, {int64_t{1} << 28, 0, 4, 16});
  empty.key = empty.value = empty.query;
  ExpectError([&] { FusedInferAttentionScoreOutputSpec(empty); }, "query", "65536");
  empty.query.sizes[0] = empty.key.sizes[0] = empty.value.sizes[0] = 65536;
  EXPECT_NO_THROW(FusedInferAttentionScoreOutputSpec(empty));
}

// ---- named causes ---------------------------------------------------------------------------

TEST(Errors, MetadataWithNullDataIsNamedAsSuch) {
  sas_test::SasFixture f;
  f.ratio = 4;
  SasArgs a = f.Build();
  a.metadata = TensorView(nullptr, DType::kInt32, {kSasMetadataWords});
  ExpectError([&] { SparseAttnSharedkvOutputSpec(a); }, "metadata", "null pointer");
  ExpectError(
      [&] {
        VerifySasMetadata(f.MetaArgs(2), TensorView(nullptr, DType::kInt32, {kSasMetadataWords}));
      },
      "metadata", "null pointer");
  ExpectError(
      [&] {
        SparseAttnSharedkvMetadata(f.MetaArgs(2),
                                   TensorView(nullptr, DType::kInt32, {kSasMetadataWords}));
      },
      "metadata", "null pointer");
}

TEST(Errors, ShortCuSeqlensQIsTheArgumentNamed) {
  sas_test::SasFixture f;
  f.tnd = true;
  f.q_len = {3, 2, 4};
  f.kv_len = {50, 9, 20};
  SasArgs a = f.Build();
  // B = 3 by seqused_kv and the block table; cu_seqlens_q lost its last entry (B + 1 - 1).
  a.cu_seqlens_q.sizes = {3};
  a.q.sizes[0] = 5;
  ExpectError([&] { SparseAttnSharedkvOutputSpec(a); }, "cu_seqlens_q", "B+1 = 4");
  SasMetadataArgs m = f.MetaArgs(2);
  m.cu_seqlens_q.sizes = {3};
  ExpectError([&] { SparseAttnSharedkvMetadata(m, TensorView()); }, "cu_seqlens_q", "B+1 = 4");
}

TEST(Errors, KvqsfaScaleMustBeFinite) {
  kvqtest::Built B = kvqtest::Build(kvqtest::Case());
  for (double s : {std::nan(""), double(kInfF), -double(kInfF)}) {
    KvqsfaArgs a = B.Args();
    a.scale_value = s;
    ExpectError([&] { KvQuantSparseFlashAttentionOutputSpec(a); }, "scale_value", "finite");
  }
}

// Planning memory follows the tensors, never a product of scalars: a metadata call for 10^9
// query tokens is refused before anything is sized from it.
TEST(Errors, MetadataPlanForAbsurdTokenCountsIsRefused) {
  SasMetadataArgs m;
  m.num_heads_q = 64;
  m.num_heads_kv = 1;
  m.head_dim = 512;
  m.batch_size = 1000000;
  m.max_seqlen_q = 1024;
  m.max_seqlen_kv = 4096;
  m.cmp_ratio = 4;
  m.cmp_topk = 512;
  std::vector<int32_t> words(kSasMetadataWords);
  const TensorView out(words.data(), DType::kInt32, {kSasMetadataWords});
  ExpectError([&] { SparseAttnSharedkvMetadata(m, out); }, "max_seqlen_q", "4194304");
  std::vector<int32_t> cu = {0, 1 << 30};
  m.layout_q = "TND";
  m.batch_size = 0;
  m.max_seqlen_q = 0;
  m.cu_seqlens_q = TensorView(cu.data(), DType::kInt32, {2});
  ExpectError([&] { SparseAttnSharedkvMetadata(m, out); }, "cu_seqlens_q", "4194304");
  // Below the limit it plans.
  m.layout_q = "BSND";
  m.cu_seqlens_q = TensorView();
  m.batch_size = 64;
  m.max_seqlen_q = 1024;
  EXPECT_NO_THROW(SparseAttnSharedkvMetadata(m, out));
}

// ---- sinks: the formula for every float --------------------------------------------------------

// out = sum e^s v / (e^sink + sum e^s), lse = log(e^sink + sum e^s): a NaN sink makes its head's
// rows NaN, +inf gives the limit (0, +inf), -inf is no sink; a row without keys is 0 / +inf
// whatever the sink. Engine and reference alike.
TEST(Sinks, NonFiniteSinksFollowTheFormulaOnEngineAndReference) {
  for (Impl impl : {Impl::kEngine, Impl::kReference}) {
    SCOPED_TRACE(impl == Impl::kEngine ? "engine" : "reference");
    ImplScope scope(impl);
    sas_test::SasFixture f;
    f.n1 = 4;
    f.q_len = {5, 5};
    f.kv_len = {130, 3};  // batch 1: rows 0 and 1 precede the KV sequence (no keys)
    f.ratio = 4;
    f.poison = false;
    SasArgs a = f.Build();
    f.sinks[0] = kNaNF;  // (a.sinks points at f.sinks)
    f.sinks[1] = kInfF;
    f.sinks[2] = -kInfF;
    f.Run(a);
    sas_test::SasFixture plain = f;  // the same call without sinks: what -inf must give
    plain.with_sinks = false;
    SasArgs pa = plain.Build();
    plain.Run(pa);
    for (int64_t b = 0; b < f.B(); ++b) {
      for (int64_t i = 0; i < f.q_len[b]; ++i) {
        const bool keys = !f.Keys(b, i).empty();
        for (int64_t c = 0; c < f.d; ++c) {
          const float nan_head = f.Out(b, i, 0, c), inf_head = f.Out(b, i, 1, c);
          if (keys) {
            EXPECT_TRUE(std::isnan(nan_head)) << b << " " << i;
          } else {
            EXPECT_EQ(nan_head, 0.f) << b << " " << i;
          }
          EXPECT_EQ(inf_head, 0.f) << b << " " << i;
          EXPECT_EQ(f.Out(b, i, 2, c), plain.Out(b, i, 2, c)) << b << " " << i;
        }
        EXPECT_EQ(std::isnan(f.Lse(b, i, 0)), keys) << b << " " << i;
        if (!keys) EXPECT_EQ(f.Lse(b, i, 0), kInfF);
        EXPECT_EQ(f.Lse(b, i, 1), kInfF) << b << " " << i;
        EXPECT_EQ(f.Lse(b, i, 2), plain.Lse(b, i, 2)) << b << " " << i;
        EXPECT_TRUE(std::isfinite(f.Lse(b, i, 3)) || !keys);
      }
    }
  }
}

TEST(Sinks, KvqsfaNanSinkIsNotDropped) {
  for (Impl impl : {Impl::kEngine, Impl::kReference}) {
    SCOPED_TRACE(impl == Impl::kEngine ? "engine" : "reference");
    ImplScope scope(impl);
    kvqtest::Case c;
    c.sinks = true;
    c.heads = 4;
    c.sparse_mode = 0;
    kvqtest::Built B = kvqtest::Build(c);
    B.sinks = {kNaNF, kInfF, -kInfF, 1.f};
    const KvqsfaArgs a = B.Args();
    std::vector<uint16_t> out(c.batch * c.s1 * c.heads * 512, 0x7E00);
    KvQuantSparseFlashAttention(a, TensorView(out.data(), c.qdt, B.out_sizes));
    const kvqtest::Expected E = kvqtest::Expect(B);  // tol > 0: the row attends keys
    int64_t rows_with_keys = 0;
    for (int64_t r = 0; r < c.batch * c.s1; ++r) {
      const bool keys = E.tol[(r * 4 + 3) * 512] > 0;
      rows_with_keys += keys;
      for (int64_t d = 0; d < 512; ++d) {
        const float x0 = kvqtest::FromQ(out[(r * 4 + 0) * 512 + d], c.qdt);
        EXPECT_TRUE(keys ? std::isnan(x0) : x0 == 0.f) << r;
        EXPECT_EQ(kvqtest::FromQ(out[(r * 4 + 1) * 512 + d], c.qdt), 0.f) << r;
        EXPECT_TRUE(std::isfinite(kvqtest::FromQ(out[(r * 4 + 2) * 512 + d], c.qdt))) << r;
      }
    }
    EXPECT_GT(rows_with_keys, 0);
  }
}

}  // namespace
}  // namespace openfia
