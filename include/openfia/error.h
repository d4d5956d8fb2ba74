// openfia: the one exception type every invalid call raises.
#pragma once

#include <stdexcept>
#include <string>

#include "openfia/export.h"

namespace openfia {

enum class ErrorCode {
  kInvalidArgument,  // a value, shape or dtype breaks a documented rule
  kUnsupported,      // a combination the source documents mark as not supported
  kInternal,         // a bug in openfia
  // The machine could not provide what a valid call needs: memory (the message names what was
  // being allocated and its size) or worker threads (the count asked for).
  kResourceExhausted,
};

// Thrown by every public entry point before any compute happens. what() reads
// "<op>: argument '<argument>': <rule> (got <actual>)".
class OPENFIA_API Error : public std::invalid_argument {
 public:
  Error(ErrorCode code, std::string argument, std::string rule, std::string actual,
        std::string op = "npu_fused_infer_attention_score");

  ErrorCode code() const noexcept { return code_; }
  const std::string& argument() const noexcept { return argument_; }  // e.g. "block_table"
  const std::string& rule() const noexcept { return rule_; }          // the rule, in the spec's words
  const std::string& actual() const noexcept { return actual_; }      // the offending value or shape

 private:
  ErrorCode code_;
  std::string argument_, rule_, actual_;
};

}  // namespace openfia
