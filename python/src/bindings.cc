// openfia Python bindings (nanobind). Bindings only convert and forward: tensors arrive through
// DLPack as nb::ndarray and become non-owning openfia::TensorView; every rule is checked by the
// C++ library, whose openfia::Error surfaces as openfia.OpenfiaError (a ValueError) carrying the
// exact C++ message. torch is never seen here; python/openfia/__init__.py does the torch side.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "openfia/openfia.h"

namespace nb = nanobind;

void RegisterKvqsfa(nb::module_& m);  // bindings_kvqsfa.cc

namespace {

using Array = nb::ndarray<nb::ro>;

// Raised for misuse of the binding itself (a non-CPU tensor, an unknown keyword, a dtype without
// an openfia equivalent); rules of the operator are the library's and raise OpenfiaError.
[[noreturn]] void BindingError(const std::string& msg) { throw nb::value_error(msg.c_str()); }

std::optional<openfia::DType> DTypeFromName(const std::string& s) {
  using openfia::DType;
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

openfia::DType DTypeFromDlpack(const nb::dlpack::dtype& t, const char* name) {
  using openfia::DType;
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
  BindingError(std::string("openfia: argument '") + name + "': dtype (DLPack code " +
               std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
               std::to_string(t.lanes) + " lanes) has no openfia equivalent");
}

// Holds the ndarrays (and so the producers' buffers) alive while a call uses their views.
struct Keepalive {
  std::vector<Array> arrays;
};

// A tensor argument is an ndarray or a pair (ndarray, dtype name) whose name overrides the DLPack
// dtype of a same-size view (uint8 storage of hifloat8, or of float8 where DLPack lacks it).
openfia::TensorView ToView(nb::handle obj, const char* name, Keepalive& keep) {
  if (obj.is_none()) return {};
  std::optional<openfia::DType> override_dtype;
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
  openfia::DType dt = DTypeFromDlpack(a.dtype(), name);
  if (override_dtype) {
    if (openfia::ElementSize(*override_dtype) != openfia::ElementSize(dt))
      BindingError(std::string("openfia: argument '") + name + "': dtype override '" +
                   std::string(openfia::DTypeName(*override_dtype)) +
                   "' must have the element size of the tensor's dtype '" +
                   std::string(openfia::DTypeName(dt)) + "'");
    dt = *override_dtype;
  }
  std::vector<int64_t> sizes(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = static_cast<int64_t>(a.stride(i));
  }
  // A 0-d tensor is a one-element view: "defined" needs a non-null pointer or a size.
  openfia::TensorView v(const_cast<void*>(a.data()), dt, std::move(sizes), std::move(strides));
  keep.arrays.push_back(std::move(a));
  return v;
}

std::vector<openfia::TensorView> ToViewList(nb::handle obj, const char* name, Keepalive& keep) {
  std::vector<openfia::TensorView> out;
  if (obj.is_none()) return out;
  for (nb::handle item : obj) out.push_back(ToView(item, name, keep));
  return out;
}

std::optional<std::vector<int64_t>> ToIntList(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return nb::cast<std::vector<int64_t>>(obj);
}

// Builds FiaArgs from keyword arguments named exactly as in the torch_npu signature, plus
// key_list/value_list for the tensorlist form. Unknown names are an error (catches typos).
openfia::FiaArgs BuildArgs(const nb::kwargs& kw, Keepalive& keep) {
  openfia::FiaArgs a;
  struct TensorField {
    const char* name;
    openfia::TensorView openfia::FiaArgs::*field;
  };
  static const TensorField kTensors[] = {
      {"query", &openfia::FiaArgs::query},
      {"key", &openfia::FiaArgs::key},
      {"value", &openfia::FiaArgs::value},
      {"pse_shift", &openfia::FiaArgs::pse_shift},
      {"atten_mask", &openfia::FiaArgs::atten_mask},
      {"dequant_scale1", &openfia::FiaArgs::dequant_scale1},
      {"quant_scale1", &openfia::FiaArgs::quant_scale1},
      {"dequant_scale2", &openfia::FiaArgs::dequant_scale2},
      {"quant_scale2", &openfia::FiaArgs::quant_scale2},
      {"quant_offset2", &openfia::FiaArgs::quant_offset2},
      {"antiquant_scale", &openfia::FiaArgs::antiquant_scale},
      {"antiquant_offset", &openfia::FiaArgs::antiquant_offset},
      {"block_table", &openfia::FiaArgs::block_table},
      {"query_padding_size", &openfia::FiaArgs::query_padding_size},
      {"kv_padding_size", &openfia::FiaArgs::kv_padding_size},
      {"key_antiquant_scale", &openfia::FiaArgs::key_antiquant_scale},
      {"key_antiquant_offset", &openfia::FiaArgs::key_antiquant_offset},
      {"value_antiquant_scale", &openfia::FiaArgs::value_antiquant_scale},
      {"value_antiquant_offset", &openfia::FiaArgs::value_antiquant_offset},
      {"key_shared_prefix", &openfia::FiaArgs::key_shared_prefix},
      {"value_shared_prefix", &openfia::FiaArgs::value_shared_prefix},
      {"actual_shared_prefix_len", &openfia::FiaArgs::actual_shared_prefix_len},
      {"query_rope", &openfia::FiaArgs::query_rope},
      {"key_rope", &openfia::FiaArgs::key_rope},
      {"key_rope_antiquant_scale", &openfia::FiaArgs::key_rope_antiquant_scale},
  };
  struct IntField {
    const char* name;
    int64_t openfia::FiaArgs::*field;
  };
  static const IntField kInts[] = {
      {"num_heads", &openfia::FiaArgs::num_heads},
      {"pre_tokens", &openfia::FiaArgs::pre_tokens},
      {"next_tokens", &openfia::FiaArgs::next_tokens},
      {"num_key_value_heads", &openfia::FiaArgs::num_key_value_heads},
      {"sparse_mode", &openfia::FiaArgs::sparse_mode},
      {"inner_precise", &openfia::FiaArgs::inner_precise},
      {"block_size", &openfia::FiaArgs::block_size},
      {"antiquant_mode", &openfia::FiaArgs::antiquant_mode},
      {"key_antiquant_mode", &openfia::FiaArgs::key_antiquant_mode},
      {"value_antiquant_mode", &openfia::FiaArgs::value_antiquant_mode},
  };
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    bool found = false;
    for (const TensorField& f : kTensors) {
      if (name == f.name) {
        a.*(f.field) = ToView(v, f.name, keep);
        found = true;
        break;
      }
    }
    if (found) continue;
    for (const IntField& f : kInts) {
      if (name == f.name) {
        a.*(f.field) = nb::cast<int64_t>(v);
        found = true;
        break;
      }
    }
    if (found) continue;
    if (name == "key_list") {
      a.key_list = ToViewList(v, "key", keep);
    } else if (name == "value_list") {
      a.value_list = ToViewList(v, "value", keep);
    } else if (name == "actual_seq_lengths") {
      a.actual_seq_lengths = ToIntList(v);
    } else if (name == "actual_seq_lengths_kv") {
      a.actual_seq_lengths_kv = ToIntList(v);
    } else if (name == "scale") {
      a.scale = nb::cast<double>(v);
    } else if (name == "input_layout") {
      a.input_layout = nb::cast<std::string>(v);
    } else if (name == "softmax_lse_flag") {
      a.softmax_lse_flag = nb::cast<bool>(v);
    } else {
      BindingError("openfia: unexpected keyword argument '" + name + "'");
    }
  }
  return a;
}

nb::dict SpecToDict(const openfia::FiaOutputSpec& s) {
  nb::dict d;
  d["attention_out_sizes"] = s.attention_out_sizes;
  d["attention_out_dtype"] = std::string(openfia::DTypeName(s.attention_out_dtype));
  d["softmax_lse_sizes"] = s.softmax_lse_sizes;
  d["softmax_lse_dtype"] = std::string("float32");
  return d;
}

const char* ErrorCodeName(openfia::ErrorCode c) {
  switch (c) {
    case openfia::ErrorCode::kInvalidArgument: return "invalid_argument";
    case openfia::ErrorCode::kUnsupported: return "unsupported";
    case openfia::ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace

void RegisterSas(nb::module_& m);  // bindings_sas.cc: SparseAttnSharedkv(Metadata)

NB_MODULE(_openfia, m) {
  m.doc() = "openfia native module: Ascend CANN attention operators on the CPU (use `openfia`)";

  // openfia.OpenfiaError: a ValueError whose str() is exactly the C++ what(); the structured
  // parts are attributes (argument, rule, actual, code) for programs that branch on them.
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "openfia.OpenfiaError",
      "Invalid or unsupported arguments to an openfia operator (message from the C++ library).",
      PyExc_ValueError, nullptr));
  m.attr("OpenfiaError") = error_type;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const openfia::Error& e) {
      nb::object exc = error_type(nb::str(e.what()));
      exc.attr("argument") = nb::str(e.argument().c_str());
      exc.attr("rule") = nb::str(e.rule().c_str());
      exc.attr("actual") = nb::str(e.actual().c_str());
      exc.attr("code") = nb::str(ErrorCodeName(e.code()));
      PyErr_SetObject(error_type.ptr(), exc.ptr());
    }
  });

  m.def(
      "fia_output_spec",
      [](const nb::kwargs& kw) {
        Keepalive keep;
        const openfia::FiaArgs args = BuildArgs(kw, keep);
        openfia::FiaOutputSpec spec;
        {
          nb::gil_scoped_release release;
          spec = openfia::FusedInferAttentionScoreOutputSpec(args);
        }
        return SpecToDict(spec);
      },
      "Validates the arguments (torch_npu names, tensors via DLPack) and returns the output "
      "shapes and dtypes: {attention_out_sizes, attention_out_dtype, softmax_lse_sizes, "
      "softmax_lse_dtype}.");

  m.def(
      "fia",
      [](nb::handle out, nb::handle lse, const nb::kwargs& kw) {
        Keepalive keep;
        const openfia::FiaArgs args = BuildArgs(kw, keep);
        const openfia::TensorView out_view = ToView(out, "attention_out", keep);
        const openfia::TensorView lse_view = ToView(lse, "softmax_lse", keep);
        // The views point into buffers the caller keeps alive (and `keep` pins); compute does not
        // touch Python objects, so other Python threads run meanwhile.
        nb::gil_scoped_release release;
        openfia::FusedInferAttentionScore(args, out_view, lse_view);
      },
      nb::arg("out"), nb::arg("lse").none(), nb::arg("kwargs"),
      "Computes FusedInferAttentionScore into `out` (and `lse`; None when softmax_lse_flag is "
      "False), both contiguous tensors of the shapes fia_output_spec returns.");

  m.def(
      "set_impl",
      [](const std::string& s) {
        if (s == "ref" || s == "reference") openfia::SetImpl(openfia::Impl::kReference);
        else if (s == "engine") openfia::SetImpl(openfia::Impl::kEngine);
        else if (s == "auto") openfia::SetImpl(openfia::Impl::kAuto);
        else BindingError("openfia: set_impl: expected 'ref', 'engine' or 'auto' (got '" + s + "')");
      },
      nb::arg("impl"));
  m.def("get_impl", []() -> std::string {
    switch (openfia::GetImpl()) {
      case openfia::Impl::kReference: return "ref";
      case openfia::Impl::kEngine: return "engine";
      case openfia::Impl::kAuto: break;
    }
    return "auto";
  });
  m.def("set_num_threads", [](int n) { openfia::SetNumThreads(n); }, nb::arg("n"));
  m.def("get_num_threads", []() { return openfia::GetNumThreads(); });
  m.def("set_simd_cap", [](const std::string& t) { openfia::SetSimdCap(t); }, nb::arg("target"));
  m.def("simd_target", []() { return openfia::SimdTarget(); });
  m.def("version", []() { return openfia::Version(); });
<<<<<<< HEAD
  RegisterKvqsfa(m);
=======
  RegisterSas(m);
>>>>>>> sas
}
