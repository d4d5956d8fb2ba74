"""torch.library registration of openfia's operators: their schemas, CPU kernels (which call the
operator modules' native calls) and fake kernels (output shapes from shapes alone, so that
torch.compile(fullgraph=True) traces calls without running them).

torch.ops.openfia.npu_fused_infer_attention_score has torch_npu's schema (overload `default`,
key/value tensors) plus an overload `tensorlist` (key/value as Tensor[], torch_npu's tensorlist
form). register_npu_namespace() adds the upstream names (torch.ops.npu.*, torch.ops.custom.*).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _native as N
from . import attention_state, fia, fia_v2, ifa, kvqsfa, pfa, sas

TORCH_DTYPES = N.torch_dtypes()

# ---- schemas -------------------------------------------------------------------------------------

# The argument list after `value` as torch_npu declares npu_fused_infer_attention_score, plus
# openfia's `sinks` at the end.
_FIA_KWARGS_SCHEMA = (
    "*, Tensor? pse_shift=None, Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, "
    "SymInt[]? actual_seq_lengths_kv=None, Tensor? dequant_scale1=None, "
    "Tensor? quant_scale1=None, Tensor? dequant_scale2=None, Tensor? quant_scale2=None, "
    "Tensor? quant_offset2=None, Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, "
    "Tensor? block_table=None, Tensor? query_padding_size=None, Tensor? kv_padding_size=None, "
    "Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
    "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, "
    "Tensor? key_shared_prefix=None, Tensor? value_shared_prefix=None, "
    "Tensor? actual_shared_prefix_len=None, Tensor? query_rope=None, Tensor? key_rope=None, "
    "Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
    "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
    "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
    "int antiquant_mode=0, bool softmax_lse_flag=False, int key_antiquant_mode=0, "
    "int value_antiquant_mode=0, Tensor? sinks=None) -> (Tensor, Tensor)"
)
FIA_SCHEMA = "(Tensor query, Tensor key, Tensor value, " + _FIA_KWARGS_SCHEMA
FIA_TENSORLIST_SCHEMA = "(Tensor query, Tensor[] key, Tensor[] value, " + _FIA_KWARGS_SCHEMA

# The front ends over FIA, as op-plugin's op_plugin_functions.yaml declares them.
IFA_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
    "Tensor? atten_mask=None, Tensor? pse_shift=None, SymInt[]? actual_seq_lengths=None, "
    "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? block_table=None, "
    "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
    "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? kv_padding_size=None, "
    "int num_heads=1, float scale_value=1.0, str input_layout=\"BSH\", "
    "int num_key_value_heads=0, int block_size=0, int inner_precise=1) -> Tensor"
)
PFA_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
    "Tensor? atten_mask=None, Tensor? pse_shift=None, int[]? actual_seq_lengths=None, "
    "Tensor? deq_scale1=None, Tensor? quant_scale1=None, Tensor? deq_scale2=None, "
    "Tensor? quant_scale2=None, Tensor? quant_offset2=None, int num_heads=1, "
    "float scale_value=1.0, int pre_tokens=2147483647, int next_tokens=0, "
    "str input_layout=\"BSH\", int num_key_value_heads=0, int[]? actual_seq_lengths_kv=None, "
    "int sparse_mode=0) -> Tensor"
)
FIA_V2_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, *, Tensor? query_rope=None, "
    "Tensor? key_rope=None, Tensor? pse_shift=None, Tensor? atten_mask=None, "
    "SymInt[]? actual_seq_qlen=None, SymInt[]? actual_seq_kvlen=None, "
    "Tensor? block_table=None, Tensor? dequant_scale_query=None, "
    "Tensor? dequant_scale_key=None, Tensor? dequant_offset_key=None, "
    "Tensor? dequant_scale_value=None, Tensor? dequant_offset_value=None, "
    "Tensor? dequant_scale_key_rope=None, Tensor? quant_scale_out=None, "
    "Tensor? quant_offset_out=None, Tensor? quant_scale_p=None, Tensor? learnable_sink=None, "
    "int num_query_heads=1, int num_key_value_heads=0, float softmax_scale=1.0, "
    "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
    "int sparse_mode=0, int block_size=0, int query_quant_mode=0, int key_quant_mode=0, "
    "int value_quant_mode=0, int inner_precise=0, bool return_softmax_lse=False, "
    "int? query_dtype=None, int? key_dtype=None, int? value_dtype=None, "
    "int? query_rope_dtype=None, int? key_rope_dtype=None, int? key_shared_prefix_dtype=None, "
    "int? value_shared_prefix_dtype=None, int? dequant_scale_query_dtype=None, "
    "int? dequant_scale_key_dtype=None, int? dequant_scale_value_dtype=None, "
    "int? dequant_scale_key_rope_dtype=None, int? out_dtype=None) -> (Tensor, Tensor)"
)

# torch_npu's npu_kv_quant_sparse_flash_attention (op-plugin's op_plugin_functions.yaml).
KVQSFA_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, Tensor sparse_indices, float scale_value, "
    "int key_quant_mode, int value_quant_mode, *, Tensor? key_dequant_scale=None, "
    "Tensor? value_dequant_scale=None, Tensor? block_table=None, "
    "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_kv=None, "
    "int sparse_block_size=1, str layout_query=\"BSND\", str layout_kv=\"BSND\", "
    "int sparse_mode=3, int pre_tokens=9223372036854775807, "
    "int next_tokens=9223372036854775807, int attention_mode=0, int quant_scale_repo_mode=1, "
    "int tile_size=128, int rope_head_dim=64, int? key_dtype=None, int? value_dtype=None, "
    "Tensor? sinks=None) -> Tensor"
)

# The SparseAttnSharedkv signatures (openfia.sas) as operator schemas. Arguments the functions
# accept as None (softmax_scale, cmp_ratio, the metadata sizes) are optional ints/floats; `device`
# is the custom op's str; the metadata op's num_workers is openfia's extension.
SAS_SCHEMA = (
    "(Tensor q, *, Tensor? ori_kv=None, Tensor? cmp_kv=None, Tensor? ori_sparse_indices=None, "
    "Tensor? cmp_sparse_indices=None, Tensor? ori_block_table=None, "
    "Tensor? cmp_block_table=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_ori_kv=None, "
    "Tensor? cu_seqlens_cmp_kv=None, Tensor? seqused_q=None, Tensor? seqused_kv=None, "
    "Tensor? sinks=None, Tensor? metadata=None, float? softmax_scale=None, "
    "int? cmp_ratio=None, int ori_mask_mode=4, int cmp_mask_mode=3, int ori_win_left=127, "
    "int ori_win_right=0, str layout_q=\"BSND\", str layout_kv=\"PA_ND\", "
    "bool return_softmax_lse=False) -> (Tensor, Tensor)"
)
SAS_METADATA_SCHEMA = (
    "(int num_heads_q, int num_heads_kv, int head_dim, *, Tensor? cu_seqlens_q=None, "
    "Tensor? cu_seqlens_ori_kv=None, Tensor? cu_seqlens_cmp_kv=None, Tensor? seqused_q=None, "
    "Tensor? seqused_kv=None, int? batch_size=0, int? max_seqlen_q=0, int? max_seqlen_kv=0, "
    "int? ori_topk=0, int? cmp_topk=0, int? cmp_ratio=-1, int ori_mask_mode=4, "
    "int cmp_mask_mode=3, int ori_win_left=127, int ori_win_right=0, str layout_q=\"BSND\", "
    "str layout_kv=\"PA_ND\", bool has_ori_kv=True, bool has_cmp_kv=True, str? device=None, "
    "int? num_workers=None) -> Tensor"
)

MERGE_SCHEMA = ("(Tensor out_a, Tensor lse_a, Tensor? out_b=None, Tensor? lse_b=None, *, "
                "str input_layout=\"BSND\", ScalarType? out_dtype=None) -> (Tensor, Tensor)")


# ---- CPU kernels: the operator modules' native calls. The dispatcher passes only the keyword
# arguments that differ from the schema's defaults. ------------------------------------------------

def _fia_cpu(query, key, value, **kw):
    return fia.native_call(query, key, value, {**fia.DEFAULTS, **kw})


def _front_cpu(mod):
    """The CPU kernel of a front end over FIA (module ifa, pfa or fia_v2)."""
    def cpu(query, key, value, **kw):
        return mod.native_call(query, key, value, {**mod.DEFAULTS, **kw})

    return cpu


def _sas_cpu(q, **kw):
    return sas.native_call({**sas.DEFAULTS, "q": q, **kw})


def _sas_metadata_cpu(num_heads_q, num_heads_kv, head_dim, **kw):
    return sas.metadata_native_call({**sas.METADATA_DEFAULTS, "num_heads_q": num_heads_q,
                                     "num_heads_kv": num_heads_kv, "head_dim": head_dim, **kw})


def _merge_cpu(out_a, lse_a, out_b=None, lse_b=None, *, input_layout="BSND", out_dtype=None):
    return attention_state.native_call(out_a, lse_a, out_b, lse_b, input_layout, None, None,
                                       out_dtype)


# ---- fake kernels --------------------------------------------------------------------------------

# input_layout -> (query layout, output layout): the part after "_" names the output's layout.
_IN_LAYOUTS = ("BSH", "BSND", "BNSD", "TND", "NTD")
_OUT_LAYOUTS = _IN_LAYOUTS + ("NBSD",)


def fia_fake_spec(query, key, value, *, block_table=None, quant_scale2=None, num_heads=1,
                  input_layout="BSH", num_key_value_heads=0, softmax_lse_flag=False, **_):
    """Output (sizes, dtype) and lse sizes of a call, from shapes only. Mirrors the C++
    FusedInferAttentionScoreOutputSpec for valid calls (tests check they agree on every case):
    out = the query's B, S, N (T, N) with value's D (BSH: N*D_v), in the layout after "_" of
    input_layout (BNSD_BSND gives BSND, *_NBSD gives [N, B, S, D]); an int32 key/value is packed
    int4, so its real D is 8x the stored one. int8 when quant_scale2 is given, float16 for an int8
    query without it, else query's dtype. lse: (B, N, Q_S, 1), TND/NTD (T, N, 1), or [1] when
    softmax_lse_flag is False."""
    q_layout, _, out_layout = input_layout.partition("_")
    out_layout = out_layout or q_layout
    if q_layout not in _IN_LAYOUTS or out_layout not in _OUT_LAYOUTS:
        raise N.error(fia.NAME, "input_layout",
                      "must be one of BSH, BSND, BNSD, TND, NTD, BNSD_BSND, BSH_BNSD, BSND_BNSD, "
                      "BSH_NBSD, BSND_NBSD, BNSD_NBSD, TND_NTD, NTD_TND", input_layout)
    v = value[0] if isinstance(value, (list, tuple)) else value
    q = list(query.shape)
    if q_layout == "BSH":
        b, s, n = q[0], q[1], num_heads
    elif q_layout == "BSND":
        b, s, n = q[0], q[1], q[2]
    elif q_layout == "BNSD":
        b, s, n = q[0], q[2], q[1]
    elif q_layout == "TND":
        b, s, n = 1, q[0], q[1]
    else:  # NTD
        b, s, n = 1, q[1], q[0]
    kvn = num_key_value_heads if num_key_value_heads > 0 else n
    pack = 8 if v.dtype == torch.int32 else 1
    if block_table is not None and v.dim() == 5:  # NZ [blocks, KV_N, D/16, block_size, 16]
        dv = v.shape[2] * v.shape[4] * pack
    elif block_table is not None and v.dim() == 4:  # [blocks, KV_N, block_size, D]
        dv = v.shape[3] * pack
    elif block_table is not None or q_layout == "BSH":  # [.., .., KV_N*D]
        dv = v.shape[-1] * pack // kvn
    else:
        dv = v.shape[-1] * pack
    out = {"BSH": [b, s, n * dv], "BSND": [b, s, n, dv], "BNSD": [b, n, s, dv],
           "NBSD": [n, b, s, dv], "TND": [s, n, dv], "NTD": [n, s, dv]}[out_layout]
    lse = [s, n, 1] if q_layout in ("TND", "NTD") else [b, n, s, 1]
    if quant_scale2 is not None:
        dtype = torch.int8
    elif query.dtype == torch.int8:
        dtype = torch.float16
    else:
        dtype = query.dtype
    if not softmax_lse_flag:
        lse = [1]
    return out, dtype, lse


def _fia_fake(query, key, value, **kw):
    N.one_device(fia.NAME, query=query, key=key, value=value,
                 **{k: v for k, v in kw.items() if isinstance(v, torch.Tensor)})
    out, dtype, lse = fia_fake_spec(query, key, value, **kw)
    return (query.new_empty(out, dtype=dtype), query.new_empty(lse, dtype=torch.float32))


def _front_fake(mod, with_lse):
    """The fake kernel of a front end over FIA: its own checks and argument mapping, then FIA's
    output shapes (a one-token prompt query keeps S = 1: pfa computes it padded and returns the
    first row). with_lse: the op returns (attention_out, softmax_lse), else attention_out."""
    def fake(query, key, value, **kw):
        with fia.errors_as(mod.NAME, mod.FIA_NAMES):
            out, lse = _fia_fake(query, key, value,
                                 **mod.fia_kwargs(query, {**mod.DEFAULTS, **kw}))
        return (out, lse) if with_lse else out

    return fake


def _kvqsfa_fake(query, key, value, sparse_indices, scale_value, key_quant_mode,
                 value_quant_mode, *, rope_head_dim=64, **kw):
    """Output shape from shapes alone, as torch_npu's infershape: query's shape with the last
    dimension reduced by rope_head_dim (576 - 64 = 512), query's dtype."""
    N.one_device(kvqsfa.NAME, query=query, key=key, value=value, sparse_indices=sparse_indices,
                 **{k: v for k, v in kw.items() if isinstance(v, torch.Tensor)})
    sizes = list(query.shape)
    sizes[-1] = sizes[-1] - rope_head_dim
    return query.new_empty(sizes)


def _sas_fake(q, *, ori_kv=None, cmp_kv=None, layout_q="BSND", return_softmax_lse=False, **kw):
    """Output shapes from shapes alone, as SparseAttnSharedkvOutputSpec: out is q's shape and
    dtype; lse [N2, T, G] (TND) or [B, N2, S1, G] (BSND) with G = N1 / N2 when
    return_softmax_lse, else [1]. The caches are [blocks, block_size, N2, D]."""
    N.one_device(sas.NAME, q=q, ori_kv=ori_kv, cmp_kv=cmp_kv,
                 **{k: v for k, v in kw.items() if isinstance(v, torch.Tensor)})
    kv = ori_kv if ori_kv is not None else cmp_kv
    n2 = kv.shape[-2] if kv is not None and kv.dim() == 4 else 1
    if not return_softmax_lse:
        lse = [1]
    elif layout_q == "TND":
        lse = [n2, q.shape[0], q.shape[1] // n2]
    else:
        lse = [q.shape[0], n2, q.shape[1], q.shape[2] // n2]
    return q.new_empty(q.shape), q.new_empty(lse, dtype=torch.float32)


def _sas_metadata_fake(num_heads_q, num_heads_kv, head_dim, **_):
    return torch.empty(1024, dtype=torch.int32)


def _merge_fake(out_a, lse_a, out_b=None, lse_b=None, *, input_layout="BSND", out_dtype=None):
    N.one_device(attention_state.NAME, out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b)
    return (out_a.new_empty(out_a.shape, dtype=out_dtype or out_a.dtype),
            lse_a.new_empty(lse_a.shape, dtype=torch.float32))


# ---- the operator table --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Op:
    name: str
    overloads: tuple      # ((overload name or "", schema), ...)
    cpu: object           # the CPU kernel of every overload
    fake: object          # the fake kernel of every overload
    # The metadata op may have no tensor argument at all, so its kernel is
    # CompositeExplicitAutograd (a CPU kernel would never be selected for a call without tensors).
    dispatch_key: str = "CPU"


OPS = (
    _Op(fia.NAME, (("", FIA_SCHEMA), ("tensorlist", FIA_TENSORLIST_SCHEMA)), _fia_cpu, _fia_fake),
    _Op(ifa.NAME, (("", IFA_SCHEMA),), _front_cpu(ifa), _front_fake(ifa, False)),
    _Op(pfa.NAME, (("", PFA_SCHEMA),), _front_cpu(pfa), _front_fake(pfa, False)),
    _Op(fia_v2.NAME, (("", FIA_V2_SCHEMA),), _front_cpu(fia_v2), _front_fake(fia_v2, True)),
    _Op(kvqsfa.NAME, (("", KVQSFA_SCHEMA),), kvqsfa.native_call, _kvqsfa_fake),
    _Op(sas.NAME, (("", SAS_SCHEMA),), _sas_cpu, _sas_fake),
    _Op(sas.METADATA_NAME, (("", SAS_METADATA_SCHEMA),), _sas_metadata_cpu, _sas_metadata_fake,
        "CompositeExplicitAutograd"),
    _Op(attention_state.NAME, (("", MERGE_SCHEMA),), _merge_cpu, _merge_fake),
)
_BY_NAME = {op.name: op for op in OPS}


def _define(lib, namespace, op):
    """Defines <namespace>::<op.name> (every overload) in torch.library `lib`, with its CPU kernel
    and its fake kernel."""
    for overload, schema in op.overloads:
        qual = op.name + (f".{overload}" if overload else "")
        lib.define(qual + schema)
        lib.impl(qual, op.cpu, op.dispatch_key)
        torch.library.register_fake(f"{namespace}::{qual}", op.fake, lib=lib)


def _impl_cpu(lib, op):
    """openfia as the CPU kernel of an op someone else defined (its default overload only)."""
    lib.impl(op.name, op.cpu, "CPU")


_lib = torch.library.Library("openfia", "DEF")
for _op in OPS:
    _define(_lib, "openfia", _op)

# Libraries made by register_npu_namespace (kept alive: dropping one removes its registrations).
_patch_libs = {}

# The upstream names: torch_npu registers its operators in torch.ops.npu, the CANN custom-op
# package (where DeepSeek-V4 calls SparseAttnSharedkv) in torch.ops.custom.
UPSTREAM_NAMESPACES = {fia.NAME: "npu", ifa.NAME: "npu", pfa.NAME: "npu", fia_v2.NAME: "npu",
                       kvqsfa.NAME: "npu", sas.NAME: "custom", sas.METADATA_NAME: "custom"}


def _register_op(namespace, op):
    """torch.ops.<namespace>.<op.name> -> openfia on CPU tensors: defines the op when nobody
    registered it, else adds openfia as the CPU kernel of the existing op (a real torch_npu or
    custom-op package). Idempotent."""
    if (namespace, op.name) in _patch_libs:
        return
    try:
        existing = getattr(getattr(torch.ops, namespace), op.name)
    except (AttributeError, RuntimeError):
        existing = None
    if existing is None:
        lib = torch.library.Library(namespace, "FRAGMENT")
        _define(lib, namespace, op)
    else:
        lib = torch.library.Library(namespace, "IMPL")
        _impl_cpu(lib, op)
    _patch_libs[(namespace, op.name)] = lib


def register_npu_namespace():
    """The upstream operator names -> openfia on CPU tensors, as torch_npu and the CANN custom-op
    package register them: torch.ops.npu.npu_fused_infer_attention_score (both overloads),
    torch.ops.npu.npu_incre_flash_attention, .npu_prompt_flash_attention,
    .npu_fused_infer_attention_score_v2, .npu_kv_quant_sparse_flash_attention, and
    torch.ops.custom.npu_sparse_attn_sharedkv and .npu_sparse_attn_sharedkv_metadata
    (DeepSeek-V4 calls them there). Idempotent."""
    for name, namespace in UPSTREAM_NAMESPACES.items():
        _register_op(namespace, _BY_NAME[name])
