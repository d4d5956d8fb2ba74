// openfia Python bindings: DLPack -> TensorView conversion and the other shared helpers.
#include "tensor_convert.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <utility>

namespace openfia::py {
namespace {

std::optional<DType> DTypeFromName(const std::string& s) {
  if (s == "float32") return DType::kFloat32;
  if (s == "float16") return DType::kFloat16;
  if (s == "bfloat16") return DType::kBFloat16;
  if (s == "int8") return DType::kInt8;
  if (s == "uint8") return DType::kUInt8;
  if (s == "bool") return DType::kBool;
  if (s == "int32") return DType::kInt32;
  if (s == "int64") return DType::kInt64;
  if (s == "uint64") return DType::kUInt64;
  if (s == "float8_e4m3fn") return DType::kFloat8E4M3;
  if (s == "hifloat8") return DType::kHiFloat8;
  return std::nullopt;
}

DType DTypeFromDlpack(const nb::dlpack::dtype& t, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return DType::kFloat32;
    if (code == Code::Float && t.bits == 16) return DType::kFloat16;
    if (code == Code::Bfloat && t.bits == 16) return DType::kBFloat16;
    if (code == Code::Int && t.bits == 8) return DType::kInt8;
    if (code == Code::UInt && t.bits == 8) return DType::kUInt8;
    if (code == Code::Bool && t.bits == 8) return DType::kBool;
    if (code == Code::Int && t.bits == 32) return DType::kInt32;
    if (code == Code::Int && t.bits == 64) return DType::kInt64;
    if (code == Code::UInt && t.bits == 64) return DType::kUInt64;
    if (code == Code::Float8_E4M3FN && t.bits == 8) return DType::kFloat8E4M3;
  }
  // The tensor's dtype in torch's words where DLPack's code has one (float64, int16, complex64,
  // float8_e5m2, ...), else the raw code.
  std::string what;
  switch (code) {
    case Code::Int: what = "int" + std::to_string(t.bits); break;
    case Code::UInt: what = "uint" + std::to_string(t.bits); break;
    case Code::Float: what = "float" + std::to_string(t.bits); break;
    case Code::Bfloat: what = "bfloat" + std::to_string(t.bits); break;
    case Code::Complex: what = "complex" + std::to_string(t.bits); break;
    case Code::Bool: what = "bool" + std::to_string(t.bits); break;
    case Code::Float8_E5M2: what = "float8_e5m2"; break;
    default:
      what = "DLPack code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits";
  }
  if (t.lanes != 1) what += " x " + std::to_string(t.lanes) + " lanes";
  BindingError(std::string("openfia: argument '") + name + "': dtype " + what +
               " is not supported (openfia takes float32, float16, bfloat16, int8, uint8, bool, "
               "int32, int64, uint64, float8_e4m3fn and hifloat8 as uint8)");
}

}  // namespace

void BindingError(const std::string& msg) { throw nb::value_error(msg.c_str()); }

void UnexpectedKeyword(const std::string& name) {
  BindingError("openfia: unexpected keyword argument '" + name + "'");
}

TensorView ToView(nb::handle obj, const char* name, Keepalive& keep,
                  std::optional<DType> override_dtype) {
  if (obj.is_none()) return {};
  nb::handle arr_obj = obj;
  if (nb::isinstance<nb::tuple>(obj)) {
    nb::tuple tup = nb::borrow<nb::tuple>(obj);
    if (tup.size() != 2)
      BindingError(std::string("openfia: argument '") + name + "': expected a tensor or a pair "
                   "(tensor, dtype name)");
    arr_obj = tup[0];
    std::string dname = nb::cast<std::string>(tup[1]);
    override_dtype = DTypeFromName(dname);
    if (!override_dtype)
      BindingError(std::string("openfia: argument '") + name + "': unknown dtype name '" + dname +
                   "'");
  }
  Array a;
  if (!nb::try_cast<Array>(arr_obj, a))
    BindingError(std::string("openfia: argument '") + name +
                 "': expected a tensor supporting DLPack (got " +
                 nb::cast<std::string>(nb::str(arr_obj.type())) + ")");
  if (a.device_type() != nb::device::cpu::value)
    BindingError(std::string("openfia: argument '") + name + "': must be a CPU tensor");
  DType dt = DTypeFromDlpack(a.dtype(), name);
  if (override_dtype) {
    if (ElementSize(*override_dtype) != ElementSize(dt))
      BindingError(std::string("openfia: argument '") + name + "': dtype override '" +
                   std::string(DTypeName(*override_dtype)) +
                   "' must have the element size of the tensor's dtype '" +
                   std::string(DTypeName(dt)) + "'");
    dt = *override_dtype;
  }
  std::vector<int64_t> sizes(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = static_cast<int64_t>(a.stride(i));
  }
  // A 0-d tensor is a one-element view: "defined" needs a non-null pointer or a size.
  TensorView v(const_cast<void*>(a.data()), dt, std::move(sizes), std::move(strides));
  keep.arrays.push_back(std::move(a));
  return v;
}

std::vector<TensorView> ToViewList(nb::handle obj, const char* name, Keepalive& keep) {
  std::vector<TensorView> out;
  if (obj.is_none()) return out;
  for (nb::handle item : obj) out.push_back(ToView(item, name, keep));
  return out;
}

std::optional<std::vector<int64_t>> ToIntList(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return nb::cast<std::vector<int64_t>>(obj);
}

Allocated AllocOutput(nb::handle alloc, const std::vector<int64_t>& sizes, DType dtype,
                      const char* name, Keepalive& keep) {
  nb::object r = alloc(sizes, std::string(DTypeName(dtype)), name);
  if (!nb::isinstance<nb::tuple>(r) || nb::len(r) != 2)
    BindingError(std::string("openfia: the output allocator must return (tensor, DLPack capsule) "
                             "for '") + name + "'");
  nb::tuple t = nb::borrow<nb::tuple>(r);
  Allocated a;
  a.view = ToView(t[1], name, keep);
  a.tensor = nb::borrow(t[0]);
  return a;
}

nb::dict OutputSpecDict(const std::vector<int64_t>& out_sizes, DType out_dtype,
                        const std::vector<int64_t>* lse_sizes) {
  nb::dict d;
  d["attention_out_sizes"] = out_sizes;
  d["attention_out_dtype"] = std::string(DTypeName(out_dtype));
  if (lse_sizes != nullptr) {
    d["softmax_lse_sizes"] = *lse_sizes;
    d["softmax_lse_dtype"] = std::string("float32");
  }
  return d;
}

}  // namespace openfia::py
