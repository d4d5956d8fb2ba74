// openfia Python bindings for KvQuantSparseFlashAttention: kvqsfa_call(alloc, **kw) (one call:
// validate, allocate, compute) and kvqsfa_output_spec(**kw). Bindings only convert and forward (see tensor_convert.h for the conventions:
// DLPack tensors become non-owning TensorViews; openfia::Error becomes openfia.OpenfiaError
// through the translator bindings.cc registers for the whole module).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>

#include "openfia/openfia.h"
#include "tensor_convert.h"

namespace nb = nanobind;
using openfia::py::IntField;
using openfia::py::Keepalive;
using openfia::py::OutputSpecDict;
using openfia::py::OutputSpecOf;
using openfia::py::SetTableField;
using openfia::py::TensorField;
using openfia::py::ToBool;
using openfia::py::ToDouble;
using openfia::py::ToString;
using openfia::py::ToView;
using openfia::py::UnexpectedKeyword;

namespace {

// key_hifloat8/value_hifloat8: the 1-byte storage holds hifloat8 codes (torch has no such dtype).
std::optional<openfia::DType> Hifloat8If(bool hifloat8) {
  if (hifloat8) return openfia::DType::kHiFloat8;
  return std::nullopt;
}

// KvqsfaArgs from keyword arguments named as in the torch_npu schema. key_dtype/value_dtype are
// booleans here ("the 1-byte storage is hifloat8"); the Python front end maps torch_npu's dtype
// argument onto them.
constexpr const char* kOp = "npu_kv_quant_sparse_flash_attention";

openfia::KvqsfaArgs KvqArgs(const nb::kwargs& kw, Keepalive& keep) {
  using A = openfia::KvqsfaArgs;
  A a;
  bool key_hif8 = false, value_hif8 = false;
  if (kw.contains("key_hifloat8")) key_hif8 = ToBool(kw["key_hifloat8"], kOp, "key_hifloat8");
  if (kw.contains("value_hifloat8"))
    value_hif8 = ToBool(kw["value_hifloat8"], kOp, "value_hifloat8");
  static const TensorField<A> kTensors[] = {
      {"query", &A::query},
      {"sparse_indices", &A::sparse_indices},
      {"key_dequant_scale", &A::key_dequant_scale},
      {"value_dequant_scale", &A::value_dequant_scale},
      {"block_table", &A::block_table},
      {"actual_seq_lengths_query", &A::actual_seq_lengths_query},
      {"actual_seq_lengths_kv", &A::actual_seq_lengths_kv},
      {"sinks", &A::sinks},
  };
  static const IntField<A> kInts[] = {
      {"key_quant_mode", &A::key_quant_mode},
      {"value_quant_mode", &A::value_quant_mode},
      {"sparse_block_size", &A::sparse_block_size},
      {"sparse_mode", &A::sparse_mode},
      {"pre_tokens", &A::pre_tokens},
      {"next_tokens", &A::next_tokens},
      {"attention_mode", &A::attention_mode},
      {"quant_scale_repo_mode", &A::quant_scale_repo_mode},
      {"tile_size", &A::tile_size},
      {"rope_head_dim", &A::rope_head_dim},
  };
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    if (name == "key_hifloat8" || name == "value_hifloat8") continue;
    if (SetTableField<A>(a, name, v, kTensors, kInts, keep, kOp)) continue;
    if (name == "key") {
      a.key = ToView(v, "key", keep, Hifloat8If(key_hif8));
    } else if (name == "value") {
      a.value = ToView(v, "value", keep, Hifloat8If(value_hif8));
    } else if (name == "scale_value") {
      a.scale_value = ToDouble(v, kOp, "scale_value");
    } else if (name == "layout_query") {
      a.layout_query = ToString(v, kOp, "layout_query");
    } else if (name == "layout_kv") {
      a.layout_kv = ToString(v, kOp, "layout_kv");
    } else {
      UnexpectedKeyword(name);
    }
  }
  return a;
}

}  // namespace

void RegisterKvqsfa(nb::module_& m) {
  m.def(
      "kvqsfa_call",
      [](nb::handle alloc, const nb::kwargs& kw) {
        return openfia::py::SpecAllocCompute(
            KvqArgs, kw, alloc, openfia::KvQuantSparseFlashAttentionOutputSpec,
            [](const openfia::KvqsfaArgs& a, const std::vector<openfia::py::Allocated>& o) {
              openfia::KvQuantSparseFlashAttention(a, o[0].view);
            });
      },
      nb::arg("alloc"), nb::arg("kwargs"),
      "kvqsfa_output_spec + allocation through alloc(sizes, dtype name, output name) -> "
      "(tensor, DLPack capsule) + kvqsfa in one call; returns (attention_out,).");
  m.def(
      "kvqsfa_output_spec",
      [](const nb::kwargs& kw) {
        const openfia::KvqsfaOutputSpec spec =
            OutputSpecOf(KvqArgs, kw, openfia::KvQuantSparseFlashAttentionOutputSpec);
        return OutputSpecDict(spec.attention_out_sizes, spec.attention_out_dtype);
      },
      "Validates npu_kv_quant_sparse_flash_attention arguments (torch_npu names; key_hifloat8 / "
      "value_hifloat8 mark 1-byte storage holding hifloat8) and returns "
      "{attention_out_sizes, attention_out_dtype}.");
}
