// openfia Python bindings for KvQuantSparseFlashAttention: kvqsfa_output_spec(**kw) and
// kvqsfa(out, **kw). Bindings only convert and forward (see bindings.cc for the conventions:
// DLPack tensors become non-owning TensorViews; openfia::Error becomes openfia.OpenfiaError
// through the translator bindings.cc registers for the whole module).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "openfia/openfia.h"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<nb::ro>;

[[noreturn]] void KvqBindingError(const std::string& msg) { throw nb::value_error(msg.c_str()); }

openfia::DType KvqDType(const nb::dlpack::dtype& t, const char* name) {
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
    if (code == Code::Float8_E4M3FN && t.bits == 8) return DType::kFloat8E4M3;
  }
  KvqBindingError(std::string("openfia: argument '") + name + "': dtype (DLPack code " +
                  std::to_string(t.code) + ", " + std::to_string(t.bits) +
                  " bits) has no openfia equivalent");
}

// A tensor argument (None -> absent). `hifloat8`: the 1-byte storage holds hifloat8 codes.
openfia::TensorView KvqView(nb::handle obj, const char* name, std::vector<Array>& keep,
                            bool hifloat8 = false) {
  if (obj.is_none()) return {};
  Array a;
  if (!nb::try_cast<Array>(obj, a))
    KvqBindingError(std::string("openfia: argument '") + name +
                    "': expected a tensor supporting DLPack");
  if (a.device_type() != nb::device::cpu::value)
    KvqBindingError(std::string("openfia: argument '") + name + "': must be a CPU tensor");
  openfia::DType dt = KvqDType(a.dtype(), name);
  if (hifloat8) {
    if (openfia::ElementSize(dt) != 1)
      KvqBindingError(std::string("openfia: argument '") + name +
                      "': hifloat8 data must be held in a 1-byte dtype (uint8 or int8)");
    dt = openfia::DType::kHiFloat8;
  }
  std::vector<int64_t> sizes(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = static_cast<int64_t>(a.stride(i));
  }
  openfia::TensorView v(const_cast<void*>(a.data()), dt, std::move(sizes), std::move(strides));
  keep.push_back(std::move(a));
  return v;
}

// KvqsfaArgs from keyword arguments named as in the torch_npu schema. key_dtype/value_dtype are
// booleans here ("the 1-byte storage is hifloat8"); the Python front end maps torch_npu's dtype
// argument onto them.
openfia::KvqsfaArgs KvqArgs(const nb::kwargs& kw, std::vector<Array>& keep) {
  openfia::KvqsfaArgs a;
  bool key_hif8 = false, value_hif8 = false;
  if (kw.contains("key_hifloat8")) key_hif8 = nb::cast<bool>(kw["key_hifloat8"]);
  if (kw.contains("value_hifloat8")) value_hif8 = nb::cast<bool>(kw["value_hifloat8"]);
  struct TensorField {
    const char* name;
    openfia::TensorView openfia::KvqsfaArgs::*field;
  };
  static const TensorField kTensors[] = {
      {"query", &openfia::KvqsfaArgs::query},
      {"sparse_indices", &openfia::KvqsfaArgs::sparse_indices},
      {"key_dequant_scale", &openfia::KvqsfaArgs::key_dequant_scale},
      {"value_dequant_scale", &openfia::KvqsfaArgs::value_dequant_scale},
      {"block_table", &openfia::KvqsfaArgs::block_table},
      {"actual_seq_lengths_query", &openfia::KvqsfaArgs::actual_seq_lengths_query},
      {"actual_seq_lengths_kv", &openfia::KvqsfaArgs::actual_seq_lengths_kv},
      {"sinks", &openfia::KvqsfaArgs::sinks},
  };
  struct IntField {
    const char* name;
    int64_t openfia::KvqsfaArgs::*field;
  };
  static const IntField kInts[] = {
      {"key_quant_mode", &openfia::KvqsfaArgs::key_quant_mode},
      {"value_quant_mode", &openfia::KvqsfaArgs::value_quant_mode},
      {"sparse_block_size", &openfia::KvqsfaArgs::sparse_block_size},
      {"sparse_mode", &openfia::KvqsfaArgs::sparse_mode},
      {"pre_tokens", &openfia::KvqsfaArgs::pre_tokens},
      {"next_tokens", &openfia::KvqsfaArgs::next_tokens},
      {"attention_mode", &openfia::KvqsfaArgs::attention_mode},
      {"quant_scale_repo_mode", &openfia::KvqsfaArgs::quant_scale_repo_mode},
      {"tile_size", &openfia::KvqsfaArgs::tile_size},
      {"rope_head_dim", &openfia::KvqsfaArgs::rope_head_dim},
  };
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    if (name == "key_hifloat8" || name == "value_hifloat8") continue;
    bool found = false;
    for (const TensorField& f : kTensors) {
      if (name == f.name) {
        a.*(f.field) = KvqView(v, f.name, keep);
        found = true;
        break;
      }
    }
    for (const IntField& f : kInts) {
      if (!found && name == f.name) {
        a.*(f.field) = nb::cast<int64_t>(v);
        found = true;
      }
    }
    if (found) continue;
    if (name == "key") {
      a.key = KvqView(v, "key", keep, key_hif8);
    } else if (name == "value") {
      a.value = KvqView(v, "value", keep, value_hif8);
    } else if (name == "scale_value") {
      a.scale_value = nb::cast<double>(v);
    } else if (name == "layout_query") {
      a.layout_query = nb::cast<std::string>(v);
    } else if (name == "layout_kv") {
      a.layout_kv = nb::cast<std::string>(v);
    } else {
      KvqBindingError("openfia: unexpected keyword argument '" + name + "'");
    }
  }
  return a;
}

}  // namespace

void RegisterKvqsfa(nb::module_& m) {
  m.def(
      "kvqsfa_output_spec",
      [](const nb::kwargs& kw) {
        std::vector<Array> keep;
        const openfia::KvqsfaArgs args = KvqArgs(kw, keep);
        openfia::KvqsfaOutputSpec spec;
        {
          nb::gil_scoped_release release;
          spec = openfia::KvQuantSparseFlashAttentionOutputSpec(args);
        }
        nb::dict d;
        d["attention_out_sizes"] = spec.attention_out_sizes;
        d["attention_out_dtype"] = std::string(openfia::DTypeName(spec.attention_out_dtype));
        return d;
      },
      "Validates npu_kv_quant_sparse_flash_attention arguments (torch_npu names; key_hifloat8 / "
      "value_hifloat8 mark 1-byte storage holding hifloat8) and returns "
      "{attention_out_sizes, attention_out_dtype}.");
  m.def(
      "kvqsfa",
      [](nb::handle out, const nb::kwargs& kw) {
        std::vector<Array> keep;
        const openfia::KvqsfaArgs args = KvqArgs(kw, keep);
        const openfia::TensorView out_view = KvqView(out, "attention_out", keep);
        nb::gil_scoped_release release;
        openfia::KvQuantSparseFlashAttention(args, out_view);
      },
      nb::arg("out"), nb::arg("kwargs"),
      "Computes KvQuantSparseFlashAttention into `out`, a contiguous tensor of the shape and "
      "dtype kvqsfa_output_spec returns.");
}
