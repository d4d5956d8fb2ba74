// openfia internal: argument checks that throw openfia::Error.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "openfia/error.h"

namespace openfia::internal {

// Streams any value (vectors as "[a, b]") into a string for the "got ..." part of a message.
template <typename T>
void AppendValue(std::ostringstream& os, const T& v) { os << v; }
inline void AppendValue(std::ostringstream& os, bool v) { os << (v ? "true" : "false"); }
template <typename T>
void AppendValue(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) { if (i) os << ", "; AppendValue(os, v[i]); }
  os << ']';
}
template <typename... Ts>
std::string Str(const Ts&... vs) {
  std::ostringstream os;
  (AppendValue(os, vs), ...);
  return os.str();
}

// Name of the operator whose arguments are being checked (used in Error messages).
const char* CurrentOp();
class OpScope {  // sets CurrentOp() for the lifetime of the scope (thread-local)
 public:
  explicit OpScope(const char* op);
  ~OpScope();
 private:
  const char* prev_;
};

[[noreturn]] void Fail(ErrorCode code, const std::string& argument, const std::string& rule,
                       const std::string& actual);

// The machine has no memory left for `what`, `bytes` long (< 0: not known): throws
// Error(kResourceExhausted) with argument "memory", so that a std::bad_alloc never reaches a caller
// without the operator and the size that caused it.
[[noreturn]] void FailAlloc(const std::string& what, int64_t bytes);

}  // namespace openfia::internal

// OPENFIA_CHECK(cond, "argument", "rule in the spec's words", actual values...)
#define OPENFIA_CHECK(cond, arg, rule, ...)                                                      \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::openfia::internal::Fail(::openfia::ErrorCode::kInvalidArgument, (arg), (rule),          \
                                ::openfia::internal::Str(__VA_ARGS__));                        \
  } while (0)
// Same, for documented-but-unsupported combinations.
#define OPENFIA_CHECK_SUPPORTED(cond, arg, rule, ...)                                            \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::openfia::internal::Fail(::openfia::ErrorCode::kUnsupported, (arg), (rule),              \
                                ::openfia::internal::Str(__VA_ARGS__));                        \
  } while (0)
