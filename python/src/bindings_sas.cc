// openfia Python bindings for SparseAttnSharedkv and SparseAttnSharedkvMetadata (nanobind).
// Registered into the openfia._openfia module by RegisterSas(m), which bindings.cc calls; the
// module's exception translator turns openfia::Error into openfia.OpenfiaError. Bindings only
// convert and forward: tensors arrive through DLPack, every rule is checked by the C++ library.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <string>

#include "openfia/openfia.h"
#include "tensor_convert.h"

// Defined in src/ops/sparse_attn_sharedkv/sas_op.cc (declared in sas_internal.h, which the
// bindings cannot include): SparseAttnSharedkv with per-worker busy seconds, for benchmarks.
namespace openfia::internal {
std::map<std::string, std::vector<double>> SparseAttnSharedkvBusy(
    const SasArgs& args, const TensorView& attention_out, const TensorView& softmax_lse);
}  // namespace openfia::internal

namespace nb = nanobind;
using openfia::py::Compute;
using openfia::py::IntField;
using openfia::py::Keepalive;
using openfia::py::Output;
using openfia::py::OutputSpecDict;
using openfia::py::OutputSpecOf;
using openfia::py::SetTableField;
using openfia::py::TensorField;
using openfia::py::ToBool;
using openfia::py::ToDouble;
using openfia::py::ToInt64;
using openfia::py::ToString;
using openfia::py::UnexpectedKeyword;

namespace {

constexpr const char* kOp = "npu_sparse_attn_sharedkv";
constexpr const char* kMetaOp = "npu_sparse_attn_sharedkv_metadata";

openfia::SasArgs BuildSasArgs(const nb::kwargs& kw, Keepalive& keep) {
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
    if (SetTableField<A>(a, name, v, kTensors, kInts, keep, kOp)) continue;
    if (name == "softmax_scale") {
      if (!v.is_none()) a.softmax_scale = ToDouble(v, kOp, "softmax_scale");
    } else if (name == "cmp_ratio") {
      if (!v.is_none()) a.cmp_ratio = ToInt64(v, kOp, "cmp_ratio");
    } else if (name == "layout_q") {
      a.layout_q = ToString(v, kOp, "layout_q");
    } else if (name == "layout_kv") {
      a.layout_kv = ToString(v, kOp, "layout_kv");
    } else if (name == "return_softmax_lse") {
      a.return_softmax_lse = ToBool(v, kOp, "return_softmax_lse");
    } else {
      UnexpectedKeyword(name);
    }
  }
  return a;
}

openfia::SasMetadataArgs BuildSasMetadataArgs(const nb::kwargs& kw, Keepalive& keep) {
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
    if (SetTableField<A>(a, name, v, kTensors, kInts, keep, kMetaOp)) continue;
    if (name == "layout_q") {
      a.layout_q = ToString(v, kMetaOp, "layout_q");
    } else if (name == "layout_kv") {
      a.layout_kv = ToString(v, kMetaOp, "layout_kv");
    } else if (name == "has_ori_kv") {
      a.has_ori_kv = ToBool(v, kMetaOp, "has_ori_kv");
    } else if (name == "has_cmp_kv") {
      a.has_cmp_kv = ToBool(v, kMetaOp, "has_cmp_kv");
    } else if (name == "device") {
      if (!v.is_none()) a.device = nb::cast<std::string>(nb::str(v));
    } else {
      UnexpectedKeyword(name);
    }
  }
  return a;
}

}  // namespace

void RegisterSas(nb::module_& m) {
  m.def(
      "sas_call",
      [](nb::handle alloc, const nb::kwargs& kw) {
        return openfia::py::SpecAllocCompute(
            BuildSasArgs, kw, alloc, openfia::SparseAttnSharedkvOutputSpec,
            [](const openfia::SasArgs& a, const std::vector<openfia::py::Allocated>& o) {
              openfia::SparseAttnSharedkv(a, o[0].view, o[1].view);
            });
      },
      nb::arg("alloc"), nb::arg("kwargs"),
      "sas_output_spec + allocation through alloc(sizes, dtype name, output name) -> (tensor, "
      "DLPack capsule) + sas in one call; returns (attention_out, softmax_lse).");
  m.def(
      "sas_output_spec",
      [](const nb::kwargs& kw) {
        const openfia::SasOutputSpec spec =
            OutputSpecOf(BuildSasArgs, kw, openfia::SparseAttnSharedkvOutputSpec);
        return OutputSpecDict(spec.attention_out_sizes, spec.attention_out_dtype,
                              &spec.softmax_lse_sizes);
      },
      "Validates npu_sparse_attn_sharedkv arguments (custom-op names) and returns the output "
      "shapes and dtypes.");
  m.def(
      "sas_busy",
      [](nb::handle out, nb::handle lse, const nb::kwargs& kw) {
        std::map<std::string, std::vector<double>> busy;
        Compute(
            BuildSasArgs, kw,
            [&](const openfia::SasArgs& a, const openfia::TensorView& o,
                const openfia::TensorView& l) {
              busy = openfia::internal::SparseAttnSharedkvBusy(a, o, l);
            },
            Output{out, "attention_out"}, Output{lse, "softmax_lse"});
        return busy;
      },
      nb::arg("out"), nb::arg("lse").none(), nb::arg("kwargs"),
      "Benchmarks only: as `sas`, and returns the engine's busy seconds: {'workers': per compute "
      "record (wall), 'workers_cpu': the same in thread CPU time, 'threads': per thread, "
      "'merge', 'merge_cpu', 'compute_wall', 'merge_wall': [seconds]}; {} on the reference.");
  m.def(
      "sas_metadata",
      [](nb::handle out, const nb::kwargs& kw) {
        Compute(BuildSasMetadataArgs, kw, openfia::SparseAttnSharedkvMetadata,
                Output{out, "metadata"});
      },
      nb::arg("out"), nb::arg("kwargs"),
      "Writes the SparseAttnSharedkv plan into `out` (int32 [1024], contiguous).");
  m.def(
      "verify_sas_metadata",
      [](nb::handle metadata, const nb::kwargs& kw) {
        Compute(BuildSasMetadataArgs, kw, openfia::VerifySasMetadata, Output{metadata, "metadata"});
      },
      nb::arg("metadata"), nb::arg("kwargs"),
      "Raises OpenfiaError unless `metadata` was made for these metadata arguments and covers "
      "every (work unit, S2 chunk) piece exactly once.");
}
