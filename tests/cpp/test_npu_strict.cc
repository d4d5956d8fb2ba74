// NPU-strict mode: the setting, and each operator's table of relaxed NPU limits against the
// relaxation list of its documentation page (every listed relaxation names the rows that enforce
// it, and every row is listed). The rows themselves are tested per operator
// (test_fia_validate.cc, test_kvqsfa_validate.cc, test_sas_validate.cc: FiaStrict, KvqsfaStrict,
// SasStrict).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/npu_strict.h"
#include "openfia/runtime.h"
#include "settings_scope.h"

namespace openfia::internal {
namespace {

TEST(NpuStrict, SetterRoundTripsAndScopesRestore) {
  const bool before = GetNpuStrict();
  {
    testutil::NpuStrictScope on(true);
    EXPECT_TRUE(GetNpuStrict());
    SetNpuStrict(false);
    EXPECT_FALSE(GetNpuStrict());
    SetNpuStrict(true);
  }
  EXPECT_EQ(GetNpuStrict(), before);
}

// The bullets of the page's section whose heading mentions relaxed limits: each bullet's text.
std::vector<std::string> RelaxationBullets(const std::string& page) {
  std::ifstream in(std::string(OPENFIA_DOCS_DIR) + "/" + page);
  EXPECT_TRUE(in.good()) << page;
  std::vector<std::string> bullets;
  bool inside = false;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      if (inside) break;
      inside = line.find("Relax") != std::string::npos;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("- ", 0) == 0) bullets.push_back(line);
    else if (!bullets.empty() && line.rfind("  ", 0) == 0)
      bullets.back() += " " + line.substr(line.find_first_not_of(' '));
  }
  return bullets;
}

void ExpectDocsMatchRows(const std::string& page, const std::string& op,
                         const std::vector<std::string>& rows) {
  SCOPED_TRACE(page);
  const std::vector<std::string> bullets = RelaxationBullets(page);
  ASSERT_FALSE(bullets.empty());
  const std::regex tag("`(" + op + "\\.[a-z0-9-]+)`");
  std::set<std::string> documented;
  for (const std::string& b : bullets) {
    const size_t at = b.find("Strict mode: ");
    EXPECT_NE(at, std::string::npos) << "a relaxation without its strict rule: " << b;
    if (at == std::string::npos) continue;
    const std::string tail = b.substr(at);
    size_t found = 0;
    for (std::sregex_iterator it(tail.begin(), tail.end(), tag), end; it != end; ++it, ++found)
      documented.insert((*it)[1]);
    EXPECT_GT(found, 0u) << b;
  }
  EXPECT_EQ(documented, std::set<std::string>(rows.begin(), rows.end()));
}

TEST(NpuStrict, FiaRowsMatchTheDocumentedRelaxations) {
  ExpectDocsMatchRows("fused_infer_attention_score.md", "fia", FiaNpuLimitIds());
}
TEST(NpuStrict, KvqsfaRowsMatchTheDocumentedRelaxations) {
  ExpectDocsMatchRows("kv_quant_sparse_flash_attention.md", "kvqsfa", KvqsfaNpuLimitIds());
}
TEST(NpuStrict, SasRowsMatchTheDocumentedRelaxations) {
  ExpectDocsMatchRows("sparse_attn_sharedkv.md", "sas", SasNpuLimitIds());
}

}  // namespace
}  // namespace openfia::internal
