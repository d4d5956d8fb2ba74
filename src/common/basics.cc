// openfia: DType names, Error, TensorView helpers, check plumbing.
#include <cstdint>
#include <numeric>

#include "common/check.h"
#include "openfia/dtype.h"
#include "openfia/error.h"
#include "openfia/tensor_view.h"

namespace openfia {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt64: return "uint64";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kHiFloat8: return "hifloat8";
  }
  return "unknown";
}

Error::Error(ErrorCode code, std::string argument, std::string rule, std::string actual,
             std::string op)
    : std::invalid_argument(op + ": argument '" + argument + "': " + rule +
                            (actual.empty() ? std::string() : " (got " + actual + ")")),
      code_(code), argument_(std::move(argument)), rule_(std::move(rule)), actual_(std::move(actual)) {}

TensorView::TensorView(void* d, DType t, std::vector<int64_t> sz, std::vector<int64_t> st)
    : data(d), dtype(t), sizes(std::move(sz)), strides(std::move(st)) {
  if (strides.empty()) strides = ContiguousStrides(sizes);
}

int64_t TensorView::numel() const {
  // Saturates instead of overflowing: callers compare against real buffer sizes, and validation
  // rejects anything above 2^56 elements before computing.
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s <= 0) return 0;
    if (__builtin_mul_overflow(n, s, &n)) return INT64_MAX;
  }
  return n;
}

bool TensorView::is_contiguous() const {
  if (strides.size() != sizes.size()) return false;
  for (int64_t s : sizes)
    if (s == 0) return true;  // an empty tensor has no layout to violate
  int64_t expect = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expect) return false;
    expect *= sizes[i];
  }
  return true;
}

std::string TensorView::shape_string() const { return internal::Str(sizes); }

std::vector<int64_t> TensorView::ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    st[i] = s;
    if (sizes[i] > 0 && __builtin_mul_overflow(s, sizes[i], &s)) s = INT64_MAX;
  }
  return st;
}

namespace internal {
namespace {
thread_local const char* g_op = "npu_fused_infer_attention_score";
}
const char* CurrentOp() { return g_op; }
OpScope::OpScope(const char* op) : prev_(g_op) { g_op = op; }
OpScope::~OpScope() { g_op = prev_; }
void Fail(ErrorCode code, const std::string& argument, const std::string& rule,
          const std::string& actual) {
  throw Error(code, argument, rule, actual, g_op);
}
void FailAlloc(const std::string& what, int64_t bytes) {
  Fail(ErrorCode::kResourceExhausted, "memory", "not enough memory for " + what,
       bytes >= 0 ? Str(bytes, " bytes") : std::string("std::bad_alloc"));
}
}  // namespace internal
}  // namespace openfia
