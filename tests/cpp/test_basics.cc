// Error messages and TensorView helpers.
#include <gtest/gtest.h>

#include "common/check.h"
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
}  // namespace
}  // namespace openfia
