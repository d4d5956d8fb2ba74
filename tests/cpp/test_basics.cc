// Error messages and TensorView helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/check.h"
#include "common/outputs.h"
#include "engine/engine.h"
#include "openfia/openfia.h"

namespace openfia {
namespace {

TEST(Error, MessageNamesArgumentRuleAndValue) {
  try {
    OPENFIA_CHECK(false, "block_table", "entries must be < blocknum", 7);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "block_table");
    EXPECT_EQ(e.rule(), "entries must be < blocknum");
    EXPECT_EQ(e.actual(), "7");
    EXPECT_STREQ(e.what(),
                 "npu_fused_infer_attention_score: argument 'block_table': entries must be < "
                 "blocknum (got 7)");
  }
}

TEST(TensorView, ContiguityAndShape) {
  float buf[24];
  TensorView t(buf, DType::kFloat32, {2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  TensorView tr(buf, DType::kFloat32, {2, 4, 3}, {12, 1, 4});
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2);
  EXPECT_EQ(DTypeName(DType::kFloat8E4M3), "float8_e4m3fn");
}

}  // namespace
}  // namespace openfia

namespace openfia {
namespace {
TEST(TensorView, EmptyIsContiguousAndNumelSaturates) {
  TensorView e(nullptr, DType::kFloat32, {3, 17, 0});
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.numel(), 0);
  TensorView huge(nullptr, DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, {1, 1});
  EXPECT_EQ(huge.numel(), INT64_MAX);
}
TEST(PrefillOutputs, LargeOutputsAreClearedEverywhereWhateverTheThreads) {
  // 20 MiB + 6 bytes at an odd 2-byte offset: the huge-page hint covers only the 2 MiB-aligned
  // interior and the parallel clear splits the rest in 4 MiB parts; every byte must be 0, the
  // bytes around it untouched, and the lse entries +inf.
  const int64_t n = (int64_t{20} << 20) / 2 + 3;
  const int saved = GetNumThreads();
  for (int threads : {1, 2, 3}) {
    SetNumThreads(threads);
    std::vector<uint16_t> buf(n + 2, 0xBEEF);
    TensorView out(buf.data() + 1, DType::kBFloat16, {n});
    std::vector<float> lse(5, 1.f);
    internal::PrefillOutputs(out, TensorView(lse.data(), DType::kFloat32, {5}), true);
    EXPECT_EQ(buf.front(), 0xBEEF);
    EXPECT_EQ(buf.back(), 0xBEEF);
    int64_t nonzero = 0;
    for (int64_t i = 1; i <= n; ++i) nonzero += buf[i] != 0;
    EXPECT_EQ(nonzero, 0) << threads;
    for (float x : lse) EXPECT_EQ(x, std::numeric_limits<float>::infinity());
  }
  SetNumThreads(saved);
}

}  // namespace
}  // namespace openfia
