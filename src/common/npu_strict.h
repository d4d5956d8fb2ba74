// openfia internal: NPU-strict mode (SetNpuStrict / OPENFIA_NPU_STRICT). Each operator keeps the
// NPU hardware limits it relaxes in one table of NpuLimit rows, named by the same ids as the
// relaxation list of its documentation page; its validation calls EnforceNpuLimits with that
// table after every other rule has passed, so strict mode only ever adds errors, and only for
// calls the NPU would reject.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/check.h"
#include "openfia/runtime.h"

namespace openfia::internal {

// What a row's check found: nothing (actual empty) or the offending value, and optionally the
// argument that carries it when the row covers several.
struct NpuBreach {
  std::string actual;
  const char* argument = nullptr;
  bool broken() const { return !actual.empty(); }
};

// A row's results: the call keeps the limit / breaks it with these values (/ in that argument).
inline NpuBreach NpuOk() { return {}; }
template <typename... Ts>
NpuBreach NpuGot(const Ts&... vs) { return {Str(vs...)}; }
template <typename... Ts>
NpuBreach NpuGotAt(const char* argument, const Ts&... vs) { return {Str(vs...), argument}; }

template <typename Ctx>
struct NpuLimit {
  const char* id;        // "<op>.<name>", as tagged in the operator page's relaxation list
  const char* argument;  // the argument the rule is about
  const char* products;  // the product lines the source states the rule for
  const char* rule;      // the NPU's rule, in the source's words
  NpuBreach (*check)(const Ctx&);
};

// The message's rule: the row's id, the product lines and the NPU's rule.
inline std::string NpuRuleText(const char* id, const char* products, const char* rule) {
  return Str("NPU strict mode [", id, "] (", products, "): ", rule);
}

// Throws Error(kUnsupported) for the first row the call breaks.
template <typename Ctx, size_t N>
void EnforceNpuLimits(const NpuLimit<Ctx> (&table)[N], const Ctx& c) {
  for (const NpuLimit<Ctx>& l : table) {
    const NpuBreach b = l.check(c);
    if (b.broken())
      Fail(ErrorCode::kUnsupported, b.argument ? b.argument : l.argument,
           NpuRuleText(l.id, l.products, l.rule), b.actual);
  }
}

template <typename Ctx, size_t N>
std::vector<std::string> NpuLimitIds(const NpuLimit<Ctx> (&table)[N]) {
  std::vector<std::string> ids;
  for (const NpuLimit<Ctx>& l : table) ids.emplace_back(l.id);
  return ids;
}

// The ids of each operator's table (for the test that compares them with the documentation).
std::vector<std::string> FiaNpuLimitIds();
std::vector<std::string> KvqsfaNpuLimitIds();
std::vector<std::string> SasNpuLimitIds();

}  // namespace openfia::internal
