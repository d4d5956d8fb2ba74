"""torch.library registration of openfia's operators.

torch.ops.openfia.npu_fused_infer_attention_score has torch_npu's schema (overload `default`,
key/value tensors) plus an overload `tensorlist` (key/value as Tensor[], torch_npu's tensorlist
form). The CPU kernel calls the C++ library; the fake kernel computes the output shapes and
dtypes from shapes alone, so torch.compile(fullgraph=True) traces calls without running them.
"""
from __future__ import annotations

import torch

from . import _openfia

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "int32": torch.int32,
    "int64": torch.int64,
    "float8_e4m3fn": torch.float8_e4m3fn,
}

# The argument list after `value`, exactly as torch_npu declares it (seeds/000, SPEC.md 1).
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
    "int value_antiquant_mode=0) -> (Tensor, Tensor)"
)
FIA_SCHEMA = "(Tensor query, Tensor key, Tensor value, " + _FIA_KWARGS_SCHEMA
FIA_TENSORLIST_SCHEMA = "(Tensor query, Tensor[] key, Tensor[] value, " + _FIA_KWARGS_SCHEMA
_NAME = "npu_fused_infer_attention_score"


def alloc_output(sizes, dtype_name, name):
    """The output allocator of the native *_call functions: an uninitialized tensor (the library
    writes every element) and its DLPack capsule, through which the library writes it."""
    t = torch.empty(sizes, dtype=TORCH_DTYPES[dtype_name])
    return t, torch.utils.dlpack.to_dlpack(t)


def _cpu_kernel(query, key, value, **kw):
    # The dispatcher passes only the keyword arguments that differ from the schema's defaults.
    from . import _DEFAULTS, _fia_eager

    return _fia_eager(query, key, value, {**_DEFAULTS, **kw})


def fia_fake_spec(query, key, value, *, block_table=None, quant_scale2=None, num_heads=1,
                  input_layout="BSH", num_key_value_heads=0, softmax_lse_flag=False, **_):
    """Output (sizes, dtype) and lse sizes of a call, from shapes only. Mirrors the C++
    FusedInferAttentionScoreOutputSpec for valid calls (tests check they agree on every case):
    out = query's shape with the last dimension value's D (BSH: N*D_v); BNSD_BSND gives BSND;
    an int32 key/value is packed int4, so its real D is 8x the stored one. int8 when
    quant_scale2 is given, float16 for an int8 query without it, else query's dtype.
    lse: (B, N, Q_S, 1), TND (T, N, 1), or [1] when softmax_lse_flag is False."""
    layout = input_layout
    v = value[0] if isinstance(value, (list, tuple)) else value
    q = list(query.shape)
    if layout == "BSH":
        n = num_heads
    elif layout in ("BSND", "TND"):
        n = q[-2]
    else:  # BNSD, BNSD_BSND
        n = q[1]
    kvn = num_key_value_heads if num_key_value_heads > 0 else n
    pack = 8 if v.dtype == torch.int32 else 1
    if block_table is not None and v.dim() == 5:  # NZ [blocks, KV_N, D/16, block_size, 16]
        dv = v.shape[2] * v.shape[4] * pack
    elif block_table is not None and v.dim() == 4:  # [blocks, KV_N, block_size, D]
        dv = v.shape[3] * pack
    elif block_table is not None or layout == "BSH":  # [.., .., KV_N*D]
        dv = v.shape[-1] * pack // kvn
    else:
        dv = v.shape[-1] * pack
    if layout == "BSH":
        out = [q[0], q[1], n * dv]
        lse = [q[0], n, q[1], 1]
    elif layout == "BSND":
        out = [q[0], q[1], q[2], dv]
        lse = [q[0], q[2], q[1], 1]
    elif layout == "BNSD":
        out = [q[0], q[1], q[2], dv]
        lse = [q[0], q[1], q[2], 1]
    elif layout == "BNSD_BSND":
        out = [q[0], q[2], q[1], dv]
        lse = [q[0], q[1], q[2], 1]
    elif layout == "TND":
        out = [q[0], q[1], dv]
        lse = [q[0], q[1], 1]
    else:
        raise ValueError(f"npu_fused_infer_attention_score: argument 'input_layout': must be "
                         f"one of BSH, BSND, BNSD, BNSD_BSND, TND (got {layout})")
    if quant_scale2 is not None:
        dtype = torch.int8
    elif query.dtype == torch.int8:
        dtype = torch.float16
    else:
        dtype = query.dtype
    if not softmax_lse_flag:
        lse = [1]
    return out, dtype, lse


def _fake_kernel(query, key, value, **kw):
    out, dtype, lse = fia_fake_spec(query, key, value, **kw)
    return (query.new_empty(out, dtype=dtype), query.new_empty(lse, dtype=torch.float32))


def _define(lib, namespace):
    lib.define(_NAME + FIA_SCHEMA)
    lib.define(_NAME + ".tensorlist" + FIA_TENSORLIST_SCHEMA)
    for overload in ("default", "tensorlist"):
        qual = f"{namespace}::{_NAME}" + ("" if overload == "default" else ".tensorlist")
        lib.impl(_NAME + ("" if overload == "default" else ".tensorlist"), _cpu_kernel, "CPU")
        torch.library.register_fake(qual, _fake_kernel, lib=lib)


from . import kvqsfa as _kvqsfa  # noqa: E402
from . import ring as _ring  # noqa: E402
from . import sas as _sas  # noqa: E402

_lib = torch.library.Library("openfia", "DEF")
_define(_lib, "openfia")
_kvqsfa.define_op(_lib, "openfia")
_sas.define_ops(_lib, "openfia")
_ring.define_op(_lib, "openfia")

# Libraries made by register_npu_namespace (kept alive: dropping one removes its registrations).
_patch_libs = {}


def _register_op(namespace, name, define, impl_cpu):
    """torch.ops.<namespace>.<name> -> openfia on CPU tensors: `define(lib, namespace)` defines
    the op when nobody registered it, else `impl_cpu(lib)` adds openfia as the CPU kernel of the
    existing op (a real torch_npu or custom-op package). Idempotent."""
    if (namespace, name) in _patch_libs:
        return
    try:
        existing = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        existing = None
    if existing is None:
        lib = torch.library.Library(namespace, "FRAGMENT")
        define(lib, namespace)
    else:
        lib = torch.library.Library(namespace, "IMPL")
        impl_cpu(lib)
    _patch_libs[(namespace, name)] = lib


def register_npu_namespace():
    """The upstream operator names -> openfia on CPU tensors, as torch_npu and the CANN custom-op
    package register them: torch.ops.npu.npu_fused_infer_attention_score (both overloads),
    torch.ops.npu.npu_kv_quant_sparse_flash_attention, and torch.ops.custom.npu_sparse_attn_sharedkv
    and .npu_sparse_attn_sharedkv_metadata (DeepSeek-V4 calls them there). Idempotent."""
    _register_op("npu", _NAME, _define, lambda lib: lib.impl(_NAME, _cpu_kernel, "CPU"))
    _register_op("npu", _kvqsfa.NAME, _kvqsfa.define_op,
                 lambda lib: lib.impl(_kvqsfa.NAME, _kvqsfa.cpu_kernel, "CPU"))
    for name, kernel in ((_sas.NAME, _sas.cpu_kernel),
                         (_sas.METADATA_NAME, _sas.metadata_cpu_kernel)):
        _register_op("custom", name,
                     lambda lib, ns, name=name: _sas.define_ops(lib, ns, names=(name,)),
                     lambda lib, name=name, kernel=kernel: lib.impl(name, kernel, "CPU"))
