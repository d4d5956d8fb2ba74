// openfia Python bindings for SparseAttnSharedkv and SparseAttnSharedkvMetadata (nanobind).
// Registered into the openfia._openfia module by RegisterSas(m), which bindings.cc calls; the
// module's exception translator turns openfia::Error into openfia.OpenfiaError. Bindings only
// convert and forward: tensors arrive through DLPack, every rule is checked by the C++ library.
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

[[noreturn]] void SasBindingError(const std::string& msg) { throw nb::value_error(msg.c_str()); }

openfia::DType SasDType(const nb::dlpack::dtype& t, const char* name) {
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
  }
  SasBindingError(std::string("openfia: argument '") + name + "': dtype (DLPack code " +
                  std::to_string(t.code) + ", " + std::to_string(t.bits) +
                  " bits) has no openfia equivalent");
}

// Pins the ndarrays (and their producers' buffers) while a call uses their views.
struct SasKeep {
  std::vector<Array> arrays;
};

openfia::TensorView SasView(nb::handle obj, const char* name, SasKeep& keep) {
  if (obj.is_none()) return {};
  Array a;
  if (!nb::try_cast<Array>(obj, a))
    SasBindingError(std::string("openfia: argument '") + name +
                    "': expected a tensor supporting DLPack");
  if (a.device_type() != nb::device::cpu::value)
    SasBindingError(std::string("openfia: argument '") + name + "': must be a CPU tensor");
  std::vector<int64_t> sizes(a.ndim()), strides(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    sizes[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = static_cast<int64_t>(a.stride(i));
  }
  openfia::TensorView v(const_cast<void*>(a.data()), SasDType(a.dtype(), name), std::move(sizes),
                        std::move(strides));
  keep.arrays.push_back(std::move(a));
  return v;
}

template <typename Args>
struct TensorField {
  const char* name;
  openfia::TensorView Args::*field;
};
template <typename Args>
struct IntField {
  const char* name;
  int64_t Args::*field;
};

openfia::SasArgs BuildSasArgs(const nb::kwargs& kw, SasKeep& keep) {
  using A = openfia::SasArgs;
  static const TensorField<A> kTensors[] = {
      {"q", &A::q},
      {"ori_kv", &A::ori_kv},
      {"cmp_kv", &A::cmp_kv},
      {"ori_sparse_indices", &A::ori_sparse_indices},
      {"cmp_sparse_indices", &A::cmp_sparse_indices},
      {"ori_block_table", &A::ori_block_table},
      {"cmp_block_table", &A::cmp_block_table},
      {"cu_seqlens_q", &A::cu_seqlens_q},
      {"cu_seqlens_ori_kv", &A::cu_seqlens_ori_kv},
      {"cu_seqlens_cmp_kv", &A::cu_seqlens_cmp_kv},
      {"seqused_q", &A::seqused_q},
      {"seqused_kv", &A::seqused_kv},
      {"sinks", &A::sinks},
      {"metadata", &A::metadata},
  };
  static const IntField<A> kInts[] = {
      {"ori_mask_mode", &A::ori_mask_mode},
      {"cmp_mask_mode", &A::cmp_mask_mode},
      {"ori_win_left", &A::ori_win_left},
      {"ori_win_right", &A::ori_win_right},
  };
  A a;
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    bool found = false;
    for (const auto& f : kTensors)
      if (name == f.name) a.*(f.field) = SasView(v, f.name, keep), found = true;
    for (const auto& f : kInts)
      if (name == f.name) a.*(f.field) = nb::cast<int64_t>(v), found = true;
    if (found) continue;
    if (name == "softmax_scale") {
      if (!v.is_none()) a.softmax_scale = nb::cast<double>(v);
    } else if (name == "cmp_ratio") {
      if (!v.is_none()) a.cmp_ratio = nb::cast<int64_t>(v);
    } else if (name == "layout_q") {
      a.layout_q = nb::cast<std::string>(v);
    } else if (name == "layout_kv") {
      a.layout_kv = nb::cast<std::string>(v);
    } else if (name == "return_softmax_lse") {
      a.return_softmax_lse = nb::cast<bool>(v);
    } else {
      SasBindingError("openfia: unexpected keyword argument '" + name + "'");
    }
  }
  return a;
}

openfia::SasMetadataArgs BuildSasMetadataArgs(const nb::kwargs& kw, SasKeep& keep) {
  using A = openfia::SasMetadataArgs;
  static const TensorField<A> kTensors[] = {
      {"cu_seqlens_q", &A::cu_seqlens_q},
      {"cu_seqlens_ori_kv", &A::cu_seqlens_ori_kv},
      {"cu_seqlens_cmp_kv", &A::cu_seqlens_cmp_kv},
      {"seqused_q", &A::seqused_q},
      {"seqused_kv", &A::seqused_kv},
  };
  static const IntField<A> kInts[] = {
      {"num_heads_q", &A::num_heads_q},     {"num_heads_kv", &A::num_heads_kv},
      {"head_dim", &A::head_dim},           {"batch_size", &A::batch_size},
      {"max_seqlen_q", &A::max_seqlen_q},   {"max_seqlen_kv", &A::max_seqlen_kv},
      {"ori_topk", &A::ori_topk},           {"cmp_topk", &A::cmp_topk},
      {"cmp_ratio", &A::cmp_ratio},         {"ori_mask_mode", &A::ori_mask_mode},
      {"cmp_mask_mode", &A::cmp_mask_mode}, {"ori_win_left", &A::ori_win_left},
      {"ori_win_right", &A::ori_win_right}, {"num_workers", &A::num_workers},
  };
  A a;
  for (auto [k, v] : kw) {
    const std::string name = nb::cast<std::string>(k);
    bool found = false;
    for (const auto& f : kTensors)
      if (name == f.name) a.*(f.field) = SasView(v, f.name, keep), found = true;
    for (const auto& f : kInts)
      if (name == f.name) a.*(f.field) = nb::cast<int64_t>(v), found = true;
    if (found) continue;
    if (name == "layout_q") {
      a.layout_q = nb::cast<std::string>(v);
    } else if (name == "layout_kv") {
      a.layout_kv = nb::cast<std::string>(v);
    } else if (name == "has_ori_kv") {
      a.has_ori_kv = nb::cast<bool>(v);
    } else if (name == "has_cmp_kv") {
      a.has_cmp_kv = nb::cast<bool>(v);
    } else if (name == "device") {
      if (!v.is_none()) a.device = nb::cast<std::string>(nb::str(v));
    } else {
      SasBindingError("openfia: unexpected keyword argument '" + name + "'");
    }
  }
  return a;
}

}  // namespace

void RegisterSas(nb::module_& m) {
  m.def(
      "sas_output_spec",
      [](const nb::kwargs& kw) {
        SasKeep keep;
        const openfia::SasArgs args = BuildSasArgs(kw, keep);
        openfia::SasOutputSpec spec;
        {
          nb::gil_scoped_release release;
          spec = openfia::SparseAttnSharedkvOutputSpec(args);
        }
        nb::dict d;
        d["attention_out_sizes"] = spec.attention_out_sizes;
        d["attention_out_dtype"] = std::string(openfia::DTypeName(spec.attention_out_dtype));
        d["softmax_lse_sizes"] = spec.softmax_lse_sizes;
        d["softmax_lse_dtype"] = std::string("float32");
        return d;
      },
      "Validates npu_sparse_attn_sharedkv arguments (custom-op names) and returns the output "
      "shapes and dtypes.");
  m.def(
      "sas",
      [](nb::handle out, nb::handle lse, const nb::kwargs& kw) {
        SasKeep keep;
        const openfia::SasArgs args = BuildSasArgs(kw, keep);
        const openfia::TensorView out_view = SasView(out, "attention_out", keep);
        const openfia::TensorView lse_view = SasView(lse, "softmax_lse", keep);
        nb::gil_scoped_release release;
        openfia::SparseAttnSharedkv(args, out_view, lse_view);
      },
      nb::arg("out"), nb::arg("lse").none(), nb::arg("kwargs"),
      "Computes SparseAttnSharedkv into `out` and `lse` (contiguous, sas_output_spec shapes).");
  m.def(
      "sas_metadata",
      [](nb::handle out, const nb::kwargs& kw) {
        SasKeep keep;
        const openfia::SasMetadataArgs args = BuildSasMetadataArgs(kw, keep);
        const openfia::TensorView out_view = SasView(out, "metadata", keep);
        nb::gil_scoped_release release;
        openfia::SparseAttnSharedkvMetadata(args, out_view);
      },
      nb::arg("out"), nb::arg("kwargs"),
      "Writes the SparseAttnSharedkv plan into `out` (int32 [1024], contiguous).");
  m.def(
      "verify_sas_metadata",
      [](nb::handle metadata, const nb::kwargs& kw) {
        SasKeep keep;
        const openfia::SasMetadataArgs args = BuildSasMetadataArgs(kw, keep);
        const openfia::TensorView view = SasView(metadata, "metadata", keep);
        nb::gil_scoped_release release;
        openfia::VerifySasMetadata(args, view);
      },
      nb::arg("metadata"), nb::arg("kwargs"),
      "Raises OpenfiaError unless `metadata` was made for these metadata arguments and covers "
      "every work unit exactly once.");
}
