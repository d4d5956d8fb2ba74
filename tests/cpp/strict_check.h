// openfia tests: the check every NPU-strict row's test makes.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "openfia/error.h"
#include "settings_scope.h"

namespace openfia::testutil {

// `call` (a validation) passes by default and, in NPU-strict mode, throws kUnsupported naming
// `argument`, with the rule of row `id` on `products` and `actual_has` in the value.
template <typename Call>
void ExpectStrictRejects(Call&& call, const std::string& id, const std::string& products,
                         const std::string& argument, const std::string& actual_has) {
  {
    NpuStrictScope off(false);
    EXPECT_NO_THROW(call());
  }
  NpuStrictScope on(true);
  try {
    call();
    ADD_FAILURE() << "strict mode accepted the call";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.rule().rfind("NPU strict mode [" + id + "] (" + products + "): ", 0), 0u)
        << e.what();
    EXPECT_NE(e.actual().find(actual_has), std::string::npos)
        << "actual '" << e.actual() << "' lacks '" << actual_has << "'; " << e.what();
  }
}

}  // namespace openfia::testutil
