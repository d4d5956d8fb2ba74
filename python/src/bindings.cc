// openfia Python bindings (nanobind). Bindings only convert and forward: tensors arrive through
// DLPack as nb::ndarray and become non-owning openfia::TensorView; every rule is checked by the
// C++ library, whose openfia::Error surfaces as openfia.OpenfiaError (a ValueError) carrying the
// exact C++ message. torch is never seen here; python/openfia/__init__.py does the torch side.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "openfia/openfia.h"
#include "tensor_convert.h"

namespace nb = nanobind;
using openfia::py::Allocated;
using openfia::py::AllocOutputs;
using openfia::py::BindingError;
using openfia::py::IntField;
using openfia::py::Keepalive;
using openfia::py::OutputSpecDict;
using openfia::py::OutputSpecOf;
using openfia::py::SetTableField;
using openfia::py::TensorField;
using openfia::py::ToBool;
using openfia::py::ToDouble;
using openfia::py::ToIntList;
using openfia::py::ToString;
using openfia::py::ToViewList;
using openfia::py::UnexpectedKeyword;

void RegisterKvqsfa(nb::module_& m);  // bindings_kvqsfa.cc
void RegisterSas(nb::module_& m);     // bindings_sas.cc: SparseAttnSharedkv(Metadata)

namespace {

// Builds FiaArgs from keyword arguments named exactly as in the torch_npu signature, plus
// key_list/value_list for the tensorlist form. Unknown names are an error (catches typos).
constexpr const char* kFiaOp = "npu_fused_infer_attention_score";

openfia::FiaArgs BuildArgs(const nb::kwargs& kw, Keepalive& keep) {
  using A = openfia::FiaArgs;
  A a;
  static const TensorField<A> kTensors[] = {
      {"query", &A::query},
      {"key", &A::key},
      {"value", &A::value},
      {"pse_shift", &A::pse_shift},
      {"atten_mask", &A::atten_mask},
      {"dequant_scale1", &A::dequant_scale1},
      {"quant_scale1", &A::quant_scale1},
      {"dequant_scale2", &A::dequant_scale2},
      {"quant_scale2", &A::quant_scale2},
      {"quant_offset2", &A::quant_offset2},
      {"antiquant_scale", &A::antiquant_scale},
      {"antiquant_offset", &A::antiquant_offset},
      {"block_table", &A::block_table},
      {"query_padding_size", &A::query_padding_size},
      {"kv_padding_size", &A::kv_padding_size},
      {"key_antiquant_scale", &A::key_antiquant_scale},
      {"key_antiquant_offset", &A::key_antiquant_offset},
      {"value_antiquant_scale", &A::value_antiquant_scale},
      {"value_antiquant_offset", &A::value_antiquant_offset},
      {"key_shared_prefix", &A::key_shared_prefix},
      {"value_shared_prefix", &A::value_shared_prefix},
      {"actual_shared_prefix_len", &A::actual_shared_prefix_len},
      {"query_rope", &A::query_rope},
      {"key_rope", &A::key_rope},
      {"key_rope_antiquant_scale", &A::key_rope_antiquant_scale},
      {"sinks", &A::sinks},
  };
  static const IntField<A> kInts[] = {
      {"num_heads", &A::num_heads},
      {"pre_tokens", &A::pre_tokens},
      {"next_tokens", &A::next_tokens},
      {"num_key_value_heads", &A::num_key_value_heads},
      {"sparse_mode", &A::sparse_mode},
      {"inner_precise", &A::inner_precise},
      {"block_size", &A::block_size},
      {"antiquant_mode", &A::antiquant_mode},
      {"key_antiquant_mode", &A::key_antiquant_mode},
      {"value_antiquant_mode", &A::value_antiquant_mode},
  };
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    if (SetTableField<A>(a, name, v, kTensors, kInts, keep, kFiaOp)) continue;
    if (name == "key_list") {
      a.key_list = ToViewList(v, "key", keep);
    } else if (name == "value_list") {
      a.value_list = ToViewList(v, "value", keep);
    } else if (name == "actual_seq_lengths") {
      a.actual_seq_lengths = ToIntList(v, kFiaOp, "actual_seq_lengths");
    } else if (name == "actual_seq_lengths_kv") {
      a.actual_seq_lengths_kv = ToIntList(v, kFiaOp, "actual_seq_lengths_kv");
    } else if (name == "scale") {
      a.scale = ToDouble(v, kFiaOp, "scale");
    } else if (name == "input_layout") {
      a.input_layout = ToString(v, kFiaOp, "input_layout");
    } else if (name == "softmax_lse_flag") {
      a.softmax_lse_flag = ToBool(v, kFiaOp, "softmax_lse_flag");
    } else {
      UnexpectedKeyword(name);
    }
  }
  return a;
}

const char* ErrorCodeName(openfia::ErrorCode c) {
  switch (c) {
    case openfia::ErrorCode::kInvalidArgument: return "invalid_argument";
    case openfia::ErrorCode::kUnsupported: return "unsupported";
    case openfia::ErrorCode::kInternal: return "internal";
    case openfia::ErrorCode::kResourceExhausted: return "resource_exhausted";
  }
  return "internal";
}

}  // namespace

NB_MODULE(_openfia, m) {
  m.doc() = "openfia native module: Ascend CANN attention operators on the CPU (use `openfia`)";

  // openfia.OpenfiaError: a ValueError whose str() is exactly the C++ what(); the structured
  // parts are attributes (argument, rule, actual, code) for programs that branch on them.
  // OpenfiaTypeError (an argument of the wrong kind) is also a TypeError, OpenfiaResourceError
  // (no memory or threads for a valid call) also a MemoryError: code that catches the builtin
  // types keeps working, and `except OpenfiaError` catches every error openfia raises.
  openfia::py::ErrorTypes& types = openfia::py::Errors();
  types.error = nb::steal(PyErr_NewExceptionWithDoc(
      "openfia.OpenfiaError",
      "Invalid or unsupported arguments to an openfia operator (message from the C++ library).",
      PyExc_ValueError, nullptr));
  types.type_error = nb::steal(PyErr_NewExceptionWithDoc(
      "openfia.OpenfiaTypeError",
      "An argument of the wrong kind (an OpenfiaError and a TypeError).",
      nb::make_tuple(types.error, nb::handle(PyExc_TypeError)).ptr(), nullptr));
  types.resource_error = nb::steal(PyErr_NewExceptionWithDoc(
      "openfia.OpenfiaResourceError",
      "The machine could not provide the memory or the threads a valid call needs (an "
      "OpenfiaError and a MemoryError; the message names what and how much).",
      nb::make_tuple(types.error, nb::handle(PyExc_MemoryError)).ptr(), nullptr));
  m.attr("OpenfiaError") = types.error;
  m.attr("OpenfiaTypeError") = types.type_error;
  m.attr("OpenfiaResourceError") = types.resource_error;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const openfia::Error& e) {
      const openfia::py::ErrorTypes& t = openfia::py::Errors();
      const nb::object& type =
          e.code() == openfia::ErrorCode::kResourceExhausted ? t.resource_error : t.error;
      nb::object exc = type(nb::str(e.what()));
      exc.attr("argument") = nb::str(e.argument().c_str());
      exc.attr("rule") = nb::str(e.rule().c_str());
      exc.attr("actual") = nb::str(e.actual().c_str());
      exc.attr("code") = nb::str(ErrorCodeName(e.code()));
      PyErr_SetObject(type.ptr(), exc.ptr());
    }
  });

  m.def(
      "fia_output_spec",
      [](const nb::kwargs& kw) {
        const openfia::FiaOutputSpec spec =
            OutputSpecOf(BuildArgs, kw, openfia::FusedInferAttentionScoreOutputSpec);
        return OutputSpecDict(spec.attention_out_sizes, spec.attention_out_dtype,
                              &spec.softmax_lse_sizes);
      },
      "Validates the arguments (torch_npu names, tensors via DLPack) and returns the output "
      "shapes and dtypes: {attention_out_sizes, attention_out_dtype, softmax_lse_sizes, "
      "softmax_lse_dtype}.");

  m.def(
      "fia_call",
      [](nb::handle alloc, const nb::kwargs& kw) {
        // One analysis for the whole call: validation (GIL released), the outputs from its spec
        // through `alloc` (GIL held), then the compute (GIL released).
        Keepalive keep;
        const openfia::FiaArgs args = BuildArgs(kw, keep);
        std::optional<openfia::FiaCall> call;
        {
          nb::gil_scoped_release release;
          call.emplace(args);
        }
        const std::vector<Allocated> outs = AllocOutputs(alloc, call->output_spec(), keep);
        {
          nb::gil_scoped_release release;
          call->Run(outs[0].view, outs[1].view);
        }
        return nb::make_tuple(outs[0].tensor, outs[1].tensor);
      },
      nb::arg("alloc"), nb::arg("kwargs"),
      "Validates, allocates the outputs through alloc(sizes, dtype name, output name) -> "
      "(tensor, DLPack capsule) and computes FusedInferAttentionScore in one call; returns "
      "(attention_out, softmax_lse).");

  m.def(
      "merge_attention_states",
      [](nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b, nb::handle out,
         nb::handle lse) {
        openfia::py::Keepalive keep;
        using openfia::py::ToView;
        const openfia::AttentionState a{ToView(out_a, "out_a", keep), ToView(lse_a, "lse_a", keep)};
        const openfia::AttentionState b{ToView(out_b, "out_b", keep), ToView(lse_b, "lse_b", keep)};
        const openfia::AttentionState d{ToView(out, "out", keep), ToView(lse, "lse", keep)};
        nb::gil_scoped_release release;
        openfia::MergeAttentionStates(a, b, d);
      },
      nb::arg("out_a").none(), nb::arg("lse_a").none(), nb::arg("out_b").none(),
      nb::arg("lse_b").none(), nb::arg("out").none(), nb::arg("lse").none(),
      "MergeAttentionStates on [B, N, S, D] / [B, N, S(, 1)] views (DLPack, any strides): "
      "writes the merge of (out_a, lse_a) and (out_b, lse_b) into (out, lse).");

  m.def(
      "set_impl",
      [](nb::handle v) {
        const std::string s = ToString(v, "set_impl", "impl");
        if (s == "ref" || s == "reference") openfia::SetImpl(openfia::Impl::kReference);
        else if (s == "engine") openfia::SetImpl(openfia::Impl::kEngine);
        else if (s == "auto") openfia::SetImpl(openfia::Impl::kAuto);
        else throw openfia::Error(openfia::ErrorCode::kInvalidArgument, "impl",
                                  "must be one of ref, reference, engine, auto", "'" + s + "'",
                                  "set_impl");
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
  m.def(
      "set_num_threads",
      [](nb::handle n) {
        // SetNumThreads names the accepted range; an int beyond int's goes in as int's limit.
        const int64_t x = openfia::py::ToInt64(n, "set_num_threads", "n");
        openfia::SetNumThreads(static_cast<int>(std::clamp<int64_t>(x, INT32_MIN, INT32_MAX)));
      },
      nb::arg("n"));
  m.def("get_num_threads", []() { return openfia::GetNumThreads(); });
  m.def(
      "set_simd_cap",
      [](nb::handle t) { openfia::SetSimdCap(ToString(t, "set_simd_cap", "target")); },
      nb::arg("target"));
  m.def("simd_cap_names", []() { return openfia::SimdCapNames(); });
  m.def("simd_target", []() { return openfia::SimdTarget(); });
  m.def("set_kernel", [](const std::string& k) { openfia::SetKernel(k); }, nb::arg("name"));
  m.def("get_kernel", []() { return openfia::GetKernel(); });
  m.def("available_kernels", []() { return openfia::AvailableKernels(); });
  m.def(
      "set_npu_strict",
      [](nb::handle on) { openfia::SetNpuStrict(ToBool(on, "set_npu_strict", "on")); },
      nb::arg("on"));
  m.def("get_npu_strict", []() { return openfia::GetNpuStrict(); });
  m.def("version", []() { return openfia::Version(); });
  RegisterKvqsfa(m);
  RegisterSas(m);
}
