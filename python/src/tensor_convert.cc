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

ErrorTypes& Errors() {
  static ErrorTypes* types = new ErrorTypes();  // never destroyed: Python owns the objects
  return *types;
}

void ArgTypeError(const char* op, const char* name, const std::string& rule,
                  const std::string& actual) {
  nb::object exc = Errors().type_error(nb::str((std::string(op) + ": argument '" + name + "': " +
                                                rule + " (got " + actual + ")").c_str()));
  exc.attr("argument") = nb::str(name);
  exc.attr("rule") = nb::str(rule.c_str());
  exc.attr("actual") = nb::str(actual.c_str());
  exc.attr("code") = nb::str("invalid_argument");
  PyErr_SetObject(Errors().type_error.ptr(), exc.ptr());
  throw nb::python_error();
}

namespace {

// "float 4.9", "str '8'": the kind and value of a rejected argument.
std::string Describe(nb::handle v) {
  std::string type = nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(
      Py_TYPE(v.ptr()))).attr("__name__")));
  std::string repr = nb::cast<std::string>(nb::repr(v));
  if (repr.size() > 60) repr = repr.substr(0, 57) + "...";
  return type + " " + repr;
}

}  // namespace

int64_t ToInt64(nb::handle v, const char* op, const char* name) {
  if (PyFloat_Check(v.ptr()) || PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) ||
      !PyIndex_Check(v.ptr()))
    ArgTypeError(op, name, "must be an integer", Describe(v));
  nb::object i = nb::steal(PyNumber_Index(v.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0)
    throw Error(ErrorCode::kInvalidArgument, name, "must be an integer in [-2^63, 2^63-1]",
                nb::cast<std::string>(nb::str(i)), op);
  if (x == -1 && PyErr_Occurred()) throw nb::python_error();
  return static_cast<int64_t>(x);
}

double ToDouble(nb::handle v, const char* op, const char* name) {
  if (PyFloat_Check(v.ptr())) return PyFloat_AsDouble(v.ptr());
  if (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) || PyBool_Check(v.ptr()) ||
      (!PyIndex_Check(v.ptr()) && !PyObject_HasAttrString(v.ptr(), "__float__")))
    ArgTypeError(op, name, "must be a real number", Describe(v));
  const double d = PyFloat_AsDouble(v.ptr());  // __index__ or __float__
  if (d == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return d;
}

bool ToBool(nb::handle v, const char* op, const char* name) {
  // A bool, or numpy's bool_; not an int or a string (bool("False") is True).
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  const std::string type = nb::cast<std::string>(
      nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(v.ptr()))).attr("__name__")));
  if (type != "bool_") ArgTypeError(op, name, "must be a bool", Describe(v));
  return PyObject_IsTrue(v.ptr()) == 1;
}

std::string ToString(nb::handle v, const char* op, const char* name) {
  if (!PyUnicode_Check(v.ptr())) ArgTypeError(op, name, "must be a str", Describe(v));
  return nb::cast<std::string>(v);
}

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

std::optional<std::vector<int64_t>> ToIntList(nb::handle obj, const char* op, const char* name) {
  if (obj.is_none()) return std::nullopt;
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()) ||
      !PySequence_Check(obj.ptr()))
    ArgTypeError(op, name, "must be a list of integers", Describe(obj));
  std::vector<int64_t> v;
  for (nb::handle x : obj) v.push_back(ToInt64(x, op, name));
  return v;
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
