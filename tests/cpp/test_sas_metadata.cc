// SparseAttnSharedkvMetadata: the plan (coverage, determinism, balance, record layout), its
// verification (every corruption named `metadata`), and one test per argument rule.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ops/sparse_attn_sharedkv/sas_internal.h"
#include "test_sas_fixture.h"

namespace openfia::internal {
namespace {

SasConfig RandomConfig(std::mt19937& rng) {
  SasConfig c;
  c.batch = 1 + rng() % 6;
  const int64_t heads[] = {1, 3, 64, 128};
  c.n1 = heads[rng() % 4];
  c.d = 8;
  c.layout_q = rng() % 2;
  const int64_t kind = rng() % 3;  // SWA, CFA, SCFA
  c.has_cmp = kind > 0;
  c.cmp_ratio = c.has_cmp ? (rng() % 2 ? 4 : 128) : 0;
  c.cmp_topk = kind == 2 ? 1 + rng() % 600 : 0;
  const int64_t modes[] = {0, 3, 4};
  c.ori_mask_mode = modes[rng() % 3];
  const int64_t s1 = 1 + rng() % 40;
  for (int64_t b = 0; b < c.batch; ++b) {
    c.q_len.push_back(c.layout_q == 1 ? rng() % 41 : s1);
    c.kv_len.push_back(rng() % 400);
  }
  return c;
}

// Pieces each enabled record covers, recomputed from the raw words (independent of Linear()).
std::vector<int> CoverCount(const SasConfig& c, const std::vector<int32_t>& w) {
  const SasUnits u = SasWorkUnits(c);
  std::vector<int> count(u.pieces(), 0);
  for (int64_t core = 0; core < kSasMaxWorkers; ++core) {
    const int32_t* r = &w[core * kSasRecordWords];
    if (!r[kCoreEnable]) continue;
    auto lin = [&](int32_t bn2, int32_t m, int32_t s2) {
      return bn2 == c.batch ? u.pieces() : u.piece_begin[u.begin[bn2] + m] + s2;
    };
    for (int64_t k = lin(r[kBn2Start], r[kMStart], r[kS2Start]);
         k < lin(r[kBn2End], r[kMEnd], r[kS2End]); ++k)
      ++count[k];
  }
  return count;
}

TEST(SasPlan, CoversEveryUnitExactlyOnceBalancedAndDeterministic) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    const SasConfig c = RandomConfig(rng);
    const int64_t workers = 1 + rng() % kSasMaxWorkers;
    const std::vector<int32_t> w = PlanSas(c, workers);
    ASSERT_EQ(w, PlanSas(c, workers));
    for (int n : CoverCount(c, w)) ASSERT_EQ(n, 1) << "iter " << iter;
    const std::vector<SasWorkerRange> ranges = VerifySasPlan(c, w.data());
    // Enabled records are the first ones, in piece order, each non-empty.
    int64_t next = 0;
    for (size_t k = 0; k < ranges.size(); ++k) {
      EXPECT_EQ(w[k * kSasRecordWords + kCoreEnable], 1);
      EXPECT_EQ(ranges[k].piece_begin, next);
      next = ranges[k].piece_end;
    }
    ASSERT_LE(int64_t(ranges.size()), workers);
    // Balance: no worker exceeds the ideal share by more than one piece's cost.
    const SasUnits u = SasWorkUnits(c);
    const std::vector<int64_t> cost = SasPieceCosts(c, u);
    int64_t total = 0, max_piece = 0;
    for (int64_t x : cost) total += x, max_piece = std::max(max_piece, x);
    for (const SasWorkerRange& r : ranges) {
      int64_t mine = 0;
      for (int64_t k = r.piece_begin; k < r.piece_end; ++k) mine += cost[k];
      EXPECT_LE(mine, (total + workers - 1) / workers + max_piece) << "iter " << iter;
    }
    // Enough pieces: every worker gets some.
    if (u.pieces() >= workers * 4 && max_piece * workers <= total / 2)
      EXPECT_EQ(int64_t(ranges.size()), workers) << "iter " << iter;
    // The S2 grid: whole tiles, split only with few units, never depending on the workers.
    for (int64_t x = 0; x < u.total(); ++x) {
      EXPECT_EQ(u.chunk_keys[x] % kSasTileKeys, 0);
      if (u.total() >= kSasSplitBelowUnits) EXPECT_EQ(u.chunks[x], 1);
    }
  }
}

TEST(SasPlan, RecordLayoutAndMBlocks) {
  SasConfig c;
  c.batch = 2, c.n1 = 64, c.d = 512, c.has_cmp = true, c.cmp_ratio = 4, c.cmp_topk = 0;
  c.q_len = {10, 3}, c.kv_len = {500, 3};
  // CFA with G = 64: 256-row M blocks are 4 tokens; SCFA: one token (docs/semantics.md 3.4).
  EXPECT_EQ(SasWorkUnits(c).tokens_per_block, 4);
  EXPECT_EQ(SasWorkUnits(c).begin, (std::vector<int64_t>{0, 3, 4}));
  c.cmp_topk = 512;
  EXPECT_EQ(SasWorkUnits(c).tokens_per_block, 1);
  c.cmp_topk = 0, c.n1 = 3;
  EXPECT_EQ(SasWorkUnits(c).tokens_per_block, 85);
  c.n1 = 512;
  EXPECT_EQ(SasWorkUnits(c).tokens_per_block, 1);

  c.n1 = 64, c.cmp_topk = 512;  // 13 units, 3 workers
  const std::vector<int32_t> w = PlanSas(c, 3);
  EXPECT_EQ(w[kCoreEnable], 1);
  EXPECT_EQ(w[kBn2Start], 0);
  EXPECT_EQ(w[kMStart], 0);
  int64_t last = -1;
  for (int64_t core = 0; core < 3; ++core)
    if (w[core * kSasRecordWords + kCoreEnable]) last = core;
  ASSERT_GE(last, 0);
  EXPECT_EQ(w[last * kSasRecordWords + kBn2End], 2);  // (B, 0, 0): exclusive end of everything
  EXPECT_EQ(w[last * kSasRecordWords + kMEnd], 0);
  for (int64_t k = 3 * kSasRecordWords; k < kSasSnapshotBase; ++k) EXPECT_EQ(w[k], 0) << k;
  EXPECT_EQ(w[kSasSnapshotBase + kSnapMagic], kSasMagic);
  EXPECT_EQ(w[kSasSnapshotBase + kSnapWorkers], 3);
  for (int64_t k = kSasSnapshotBase + kSnapCount; k < kSasMetadataWords; ++k) EXPECT_EQ(w[k], 0);
}

TEST(SasPlan, MoreWorkersThanUnitsLeavesIdleRecords) {
  SasConfig c;
  c.batch = 1, c.n1 = 4, c.d = 8, c.q_len = {2}, c.kv_len = {2};
  const std::vector<int32_t> w = PlanSas(c, 36);  // one unit (64 tokens per block)
  EXPECT_EQ(w[kCoreEnable], 1);
  for (int64_t core = 1; core < 36; ++core) EXPECT_EQ(w[core * kSasRecordWords + kCoreEnable], 0);
  EXPECT_EQ(VerifySasPlan(c, w.data()).size(), 1u);
}

// ---- verification --------------------------------------------------------------------------

SasConfig SmallScfa() {
  SasConfig c;
  c.batch = 3, c.n1 = 8, c.d = 16, c.layout_q = 1, c.has_cmp = true, c.cmp_ratio = 4;
  c.cmp_topk = 16, c.q_len = {5, 0, 7}, c.kv_len = {50, 0, 7};
  return c;
}

void ExpectRejected(const SasConfig& c, const std::vector<int32_t>& w, const char* needle) {
  try {
    VerifySasPlan(c, w.data());
    ADD_FAILURE() << "expected openfia::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "metadata");
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SasVerify, RejectsEveryCorruption) {
  const SasConfig c = SmallScfa();  // 12 units
  const std::vector<int32_t> good = PlanSas(c, 4);
  ASSERT_NO_THROW(VerifySasPlan(c, good.data()));
  auto mutate = [&](const std::function<void(std::vector<int32_t>&)>& f) {
    std::vector<int32_t> w = good;
    f(w);
    return w;
  };
  const int64_t r1 = kSasRecordWords;
  ExpectRejected(c, mutate([&](auto& w) { for (int k = 0; k < 8; ++k) w[r1 + k] = 0; }),
                 "not covered");
  ExpectRejected(c, mutate([&](auto& w) {
                   w[r1 + kBn2Start] = w[kBn2Start], w[r1 + kMStart] = w[kMStart];
                 }),
                 "covered twice");
  ExpectRejected(c, mutate([&](auto& w) { w[kCoreEnable] = 2; }), "CORE_ENABLE");
  ExpectRejected(c, mutate([&](auto& w) { w[kS2End] = 1; }), "name (unit, S2 chunk) pieces");
  ExpectRejected(c, mutate([&](auto& w) { w[kFirstFdWorkspaceIdx] = 3; }),
                 "FIRST_FD_DATA_WORKSPACE_IDX");
  ExpectRejected(c, mutate([&](auto& w) { w[kSasReduceBase + 5] = 1; }), "reduce records");
  ExpectRejected(c, mutate([&](auto& w) { w[kSasSnapshotBase] = 0; }), "no openfia");
  ExpectRejected(c, mutate([&](auto& w) { w[1023] = 9; }), "unused words");
  ExpectRejected(c, mutate([&](auto& w) { w[kMEnd] = 99; }), "name (unit, S2 chunk) pieces");
  ExpectRejected(c, mutate([&](auto& w) { w[kBn2End] = 7; }), "name (unit, S2 chunk) pieces");
  ExpectRejected(c, mutate([&](auto& w) {
                   w[kBn2End] = w[kBn2Start], w[kMEnd] = w[kMStart];
                 }),
                 "at least one piece");
  ExpectRejected(c, mutate([&](auto& w) { w[30 * kSasRecordWords + kMEnd] = 1; }),
                 "idle compute record");
  ExpectRejected(c, mutate([&](auto& w) {
                   std::copy_n(&w[0], 8, &w[10 * kSasRecordWords]);
                   std::fill_n(&w[0], 8, 0);
                 }),
                 "first 4 compute records");
  ExpectRejected(c, mutate([&](auto& w) { w[kSasSnapshotBase + kSnapWorkers] = 0; }),
                 "worker count");
  for (int64_t k = kSnapBatch; k < kSnapCount; ++k) {
    if (k == kSnapWorkers) continue;
    ExpectRejected(c, mutate([&](auto& w) { w[kSasSnapshotBase + k] ^= 1; }),
                   "another configuration");
  }
  // Records in another order are fine: the plan only distributes work.
  std::vector<int32_t> swapped = good;
  std::swap_ranges(&swapped[0], &swapped[8], &swapped[r1]);
  EXPECT_NO_THROW(VerifySasPlan(c, swapped.data()));
  // Any worker count made for the same configuration is fine.
  for (int64_t workers : {1, 7, 36}) EXPECT_NO_THROW(VerifySasPlan(c, PlanSas(c, workers).data()));
}

TEST(SasPlan, SmallBatchDecodeSplitsS2OnAFixedGrid) {
  // V3: B = 1 decode, SCFA 512 of 2048 compressed entries + the 128-token window = 640 keys =
  // 10 tiles: at most 3 chunks of kSasMinChunkTiles = 3 tiles, so two (a power of two) of 5
  // tiles, whatever the worker count; the merge of the 64 rows in 4 reduce records.
  SasConfig c;
  c.batch = 1, c.n1 = 64, c.d = 512, c.has_cmp = true, c.cmp_ratio = 4, c.cmp_topk = 512;
  c.q_len = {1}, c.kv_len = {8192};
  const SasUnits u = SasWorkUnits(c);
  ASSERT_EQ(u.total(), 1);
  EXPECT_EQ(u.chunks[0], 2);
  EXPECT_EQ(u.chunk_keys[0], 320);
  EXPECT_EQ(u.state_rows, 128);
  for (int64_t workers : {1, 2, 3, 36}) {
    const std::vector<int32_t> w = PlanSas(c, workers);
    const std::vector<SasWorkerRange> r = VerifySasPlan(c, w.data());
    // Equal-cost pieces: up to two workers get one each.
    ASSERT_EQ(int64_t(r.size()), std::min<int64_t>(workers, 2)) << workers;
    for (const SasWorkerRange& x : r)
      EXPECT_EQ(x.piece_end - x.piece_begin, workers == 1 ? 2 : 1) << workers;
    for (int64_t v = 0; v < 4; ++v) {
      const int32_t* fd = &w[kSasReduceBase + v * kSasRecordWords];
      EXPECT_EQ(fd[kFdEnable], 1);
      EXPECT_EQ(fd[kFdWorkspaceIdx], 0);
      EXPECT_EQ(fd[kFdWorkspaceNum], 2);
      EXPECT_EQ(fd[kFdMStart], 16 * v);
      EXPECT_EQ(fd[kFdMNum], 16);
    }
    EXPECT_EQ(w[kSasReduceBase + 4 * kSasRecordWords + kFdEnable], 0);
  }
  // Two workers: pieces [0, 1) and [1, 2) = cursors (0,0,0)..(0,0,1)..(1,0,0).
  const std::vector<int32_t> w = PlanSas(c, 2);
  EXPECT_EQ(w[kS2Start], 0);
  EXPECT_EQ(w[kS2End], 1);
  EXPECT_EQ(w[kSasRecordWords + kS2Start], 1);
  EXPECT_EQ(w[kSasRecordWords + kFirstFdWorkspaceIdx], 1);
  EXPECT_EQ(w[kSasRecordWords + kBn2End], 1);
  auto bad = w;
  bad[kS2End] = 3;  // past the unit's chunks
  ExpectRejected(c, bad, "name (unit, S2 chunk) pieces");
  bad = w;
  bad[kSasReduceBase + kFdWorkspaceNum] = 9;
  ExpectRejected(c, bad, "reduce records");
  bad = w;
  bad[kS2End] = 0;  // an empty record
  ExpectRejected(c, bad, "at least one piece");
  // A longer list: 128 + 2048 keys = 34 tiles -> at most 11 chunks of 3 tiles, so 8 (a power
  // of two): 7 of 4 tiles and the last one the rest, 6 tiles.
  c.cmp_topk = 2048, c.kv_len = {16384};
  const SasUnits v = SasWorkUnits(c);
  EXPECT_EQ(v.chunk_keys[0], 256);
  EXPECT_EQ(v.chunks[0], 8);
  {
    // The pieces' costs follow the chunks' keys: seven equal ones, the last one larger (6
    // tiles against 4).
    const std::vector<int64_t> cost = SasPieceCosts(c, v);
    ASSERT_EQ(cost.size(), 8u);
    for (int i = 1; i < 7; ++i) EXPECT_EQ(cost[i], cost[0]) << i;
    EXPECT_GT(cost[7], cost[0]);
  }
  const std::vector<int32_t> w2 = PlanSas(c, 2);
  ASSERT_EQ(VerifySasPlan(c, w2.data()).size(), 2u);
  bad = w2;
  bad[kS2End] -= 1;  // the last piece of worker 0 covered by nobody
  ExpectRejected(c, bad, "not covered");
  // A list shorter than 2 x kSasMinChunkTiles tiles is not split: 128 + 192 keys = 5 tiles.
  c.cmp_topk = 192, c.kv_len = {8192};
  EXPECT_EQ(SasWorkUnits(c).pieces(), 1);
  // 128 + 256 keys = 6 tiles (a short context's decode): two chunks of 3 tiles, one per worker
  // of two.
  c.cmp_topk = 256;
  const SasUnits six = SasWorkUnits(c);
  EXPECT_EQ(six.chunks[0], 2);
  EXPECT_EQ(six.chunk_keys[0], 192);
  {
    const std::vector<int32_t> w6 = PlanSas(c, 2);
    const std::vector<SasWorkerRange> r6 = VerifySasPlan(c, w6.data());
    ASSERT_EQ(r6.size(), 2u);
    for (const SasWorkerRange& x : r6) EXPECT_EQ(x.piece_end - x.piece_begin, 1);
  }
  // 128 + 700 keys = 13 tiles: at most 4 chunks of 3 tiles -> 4, the last one 4 tiles.
  c.cmp_topk = 700;
  const SasUnits thirteen = SasWorkUnits(c);
  EXPECT_EQ(thirteen.chunks[0], 4);
  EXPECT_EQ(thirteen.chunk_keys[0], 192);
  // A batch of 4 units is not split (kSasSplitBelowUnits).
  c.batch = 4, c.q_len.assign(4, 1), c.kv_len.assign(4, 8192);
  EXPECT_EQ(SasWorkUnits(c).pieces(), 4);
}

// ---- the public op -------------------------------------------------------------------------

struct MetaCall {
  std::vector<int32_t> cu = {0, 5, 5, 12}, used = {50, 0, 7};
  std::vector<int64_t> cu64 = {0, 5, 5, 12};
  std::vector<int32_t> out = std::vector<int32_t>(kSasMetadataWords, -1);
  SasMetadataArgs Args() {
    SasMetadataArgs a;
    a.num_heads_q = 8, a.num_heads_kv = 1, a.head_dim = 16;
    a.cu_seqlens_q = TensorView(cu.data(), DType::kInt32, {4});
    a.seqused_kv = TensorView(used.data(), DType::kInt32, {3});
    a.batch_size = 3, a.max_seqlen_q = 7, a.max_seqlen_kv = 50;
    a.cmp_topk = 16, a.cmp_ratio = 4, a.layout_q = "TND";
    a.num_workers = 4;
    return a;
  }
  std::vector<int64_t> out_sizes = {kSasMetadataWords};
  DType out_dtype = DType::kInt32;
  TensorView Out() { return TensorView(out.data(), out_dtype, out_sizes); }
};

TEST(SasMetadataOp, WritesThePlanOfItsConfiguration) {
  MetaCall m;
  SparseAttnSharedkvMetadata(m.Args(), m.Out());
  EXPECT_EQ(m.out, PlanSas(SmallScfa(), 4));
  EXPECT_NO_THROW(VerifySasMetadata(m.Args(), m.Out()));
  SasMetadataArgs other = m.Args();
  other.ori_mask_mode = 3;
  try {
    VerifySasMetadata(other, m.Out());
    ADD_FAILURE() << "expected openfia::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "metadata");
  }
  // Default worker count: the thread count, capped at 36.
  const int threads = GetNumThreads();
  SetNumThreads(5);
  SasMetadataArgs dflt = m.Args();
  dflt.num_workers = 0;
  SparseAttnSharedkvMetadata(dflt, m.Out());
  EXPECT_EQ(m.out[kSasSnapshotBase + kSnapWorkers], 5);
  SetNumThreads(100);
  SparseAttnSharedkvMetadata(dflt, m.Out());
  EXPECT_EQ(m.out[kSasSnapshotBase + kSnapWorkers], 36);
  SetNumThreads(threads);
}

TEST(SasMetadataOp, BsndTakesS1FromMaxSeqlenQAndS2FromMaxSeqlenKv) {
  SasMetadataArgs a;
  a.num_heads_q = 64, a.num_heads_kv = 1, a.head_dim = 512;
  a.batch_size = 2, a.max_seqlen_q = 3, a.max_seqlen_kv = 200;
  a.has_cmp_kv = false;
  a.num_workers = 2;
  std::vector<int32_t> out(kSasMetadataWords);
  SparseAttnSharedkvMetadata(a, TensorView(out.data(), DType::kInt32, {kSasMetadataWords}));
  SasConfig c;
  c.batch = 2, c.n1 = 64, c.d = 512, c.q_len = {3, 3}, c.kv_len = {200, 200};
  EXPECT_EQ(out, PlanSas(c, 2));
}

void ExpectArgError(const std::function<void(SasMetadataArgs&, MetaCall&)>& mutate,
                    const char* argument, ErrorCode code = ErrorCode::kInvalidArgument) {
  MetaCall m;
  SasMetadataArgs a = m.Args();
  mutate(a, m);
  try {
    SparseAttnSharedkvMetadata(a, m.Out());
    ADD_FAILURE() << "expected an error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("npu_sparse_attn_sharedkv_metadata"), std::string::npos);
  }
}

TEST(SasMetadataOp, OneErrorPerRule) {
  using A = SasMetadataArgs;
  using M = MetaCall;
  const auto kU = ErrorCode::kUnsupported;
  ExpectArgError([](A& a, M&) { a.num_heads_q = 0; }, "num_heads_q");
  ExpectArgError([](A& a, M&) { a.num_heads_kv = 0; }, "num_heads_kv");
  ExpectArgError([](A& a, M&) { a.num_heads_kv = 2; }, "num_heads_kv", kU);
  ExpectArgError([](A& a, M&) { a.head_dim = 0; }, "head_dim");
  ExpectArgError([](A& a, M&) { a.layout_q = "BNSD"; }, "layout_q", kU);
  ExpectArgError([](A& a, M&) { a.layout_kv = "BSND"; }, "layout_kv", kU);
  ExpectArgError([](A& a, M&) { a.has_ori_kv = false; }, "has_ori_kv", kU);
  ExpectArgError([](A& a, M&) { a.ori_mask_mode = 1; }, "ori_mask_mode", kU);
  ExpectArgError([](A& a, M&) { a.cmp_mask_mode = 0; }, "cmp_mask_mode", kU);
  ExpectArgError([](A& a, M&) { a.ori_win_left = 63; }, "ori_win_left", kU);
  ExpectArgError([](A& a, M&) { a.ori_win_right = 1; }, "ori_win_right", kU);
  ExpectArgError([](A& a, M&) { a.ori_topk = 512; }, "ori_topk", kU);
  ExpectArgError([](A& a, M& m) { a.seqused_q = TensorView(m.used.data(), DType::kInt32, {3}); },
                 "seqused_q", kU);
  ExpectArgError(
      [](A& a, M& m) { a.cu_seqlens_ori_kv = TensorView(m.cu64.data(), DType::kInt64, {4}); },
      "cu_seqlens_ori_kv");
  ExpectArgError(
      [](A& a, M& m) { a.cu_seqlens_cmp_kv = TensorView(m.cu64.data(), DType::kInt64, {4}); },
      "cu_seqlens_cmp_kv");
  ExpectArgError([](A& a, M&) { a.batch_size = -1; }, "batch_size");
  ExpectArgError([](A& a, M&) { a.max_seqlen_q = -1; }, "max_seqlen_q");
  ExpectArgError([](A& a, M&) { a.max_seqlen_kv = -1; }, "max_seqlen_kv");
  ExpectArgError([](A& a, M&) { a.cmp_ratio = -1; }, "cmp_ratio", kU);
  ExpectArgError([](A& a, M&) { a.cmp_topk = -1; }, "cmp_topk");
  ExpectArgError([](A& a, M&) { a.num_workers = 37; }, "num_workers");
  ExpectArgError([](A& a, M&) { a.cu_seqlens_q = TensorView(); }, "cu_seqlens_q");
  ExpectArgError([](A& a, M& m) { a.cu_seqlens_q = TensorView(m.cu64.data(), DType::kInt64, {4}); },
                 "cu_seqlens_q");
  ExpectArgError([](A& a, M& m) { m.cu[0] = 1; }, "cu_seqlens_q");
  ExpectArgError([](A& a, M& m) { m.cu[2] = 4; }, "cu_seqlens_q");
  ExpectArgError([](A& a, M& m) { m.cu = {0, 0, 0, 0}; }, "cu_seqlens_q");
  ExpectArgError([](A& a, M&) { a.batch_size = 2; }, "batch_size");
  ExpectArgError([](A& a, M&) { a.max_seqlen_q = 6; }, "max_seqlen_q");
  ExpectArgError([](A& a, M& m) { a.seqused_kv = TensorView(m.used.data(), DType::kInt32, {2}); },
                 "seqused_kv");
  ExpectArgError([](A& a, M& m) { m.used[1] = -1; }, "seqused_kv");
  ExpectArgError([](A& a, M&) { a.max_seqlen_kv = 49; }, "seqused_kv");
  ExpectArgError([](A& a, M&) { a.layout_q = "BSND", a.batch_size = 0, a.seqused_kv = {}; },
                 "batch_size");
  ExpectArgError([](A& a, M&) { a.layout_q = "BSND", a.max_seqlen_q = 0; }, "max_seqlen_q");
  // The metadata's words are int32.
  ExpectArgError([](A& a, M&) { a.num_heads_q = int64_t{1} << 31; }, "num_heads_q");
  ExpectArgError([](A& a, M&) { a.head_dim = int64_t{1} << 31; }, "head_dim");
  ExpectArgError([](A& a, M&) { a.max_seqlen_kv = int64_t{1} << 31; }, "max_seqlen_kv");
  ExpectArgError([](A& a, M&) { a.cmp_topk = int64_t{1} << 31; }, "cmp_topk");
  ExpectArgError([](A& a, M&) { a.layout_q = "BSND", a.max_seqlen_q = int64_t{1} << 30; },
                 "max_seqlen_q");  // 3 batches x 2^30 query tokens
  ExpectArgError([](A&, M& m) { m.out_sizes = {512}; }, "metadata");
  ExpectArgError([](A&, M& m) { m.out_dtype = DType::kFloat32; }, "metadata");
}

}  // namespace
}  // namespace openfia::internal
