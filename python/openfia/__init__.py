"""openfia: Huawei Ascend CANN attention operators on the CPU, with torch_npu's Python API.

    import openfia
    out, lse = openfia.npu_fused_infer_attention_score(q, k, v, num_heads=32,
                                                       input_layout="BNSD", scale=0.088)

Tensors are CPU torch tensors (any strides); outputs are new contiguous tensors. Every invalid
call raises openfia.OpenfiaError (a ValueError) whose message is the C++ library's. The same
operator is registered as torch.ops.openfia.npu_fused_infer_attention_score (torch.compile
works), and patch_torch_npu() makes torch_npu.npu_fused_infer_attention_score (and the other
operators' upstream names, torch.ops.npu.* / torch.ops.custom.* included) run openfia.

torch is optional at import time: the runtime settings work without it.
"""
from __future__ import annotations

import sys

from . import _openfia
from ._openfia import OpenfiaError

__all__ = [
    "OpenfiaError",
    "npu_fused_infer_attention_score",
    "npu_kv_quant_sparse_flash_attention",
    "patch_torch_npu",
    "set_impl",
    "get_impl",
    "set_num_threads",
    "get_num_threads",
    "set_simd_cap",
    "simd_target",
    "version",
    "fia_output_spec",
]

__version__ = _openfia.version()


def set_impl(impl: str) -> None:
    """Selects the implementation: "ref" (fp64 reference), "engine" (fast engine; an unsupported
    call is an error) or "auto" (engine where it supports the call, else the reference)."""
    _openfia.set_impl(impl)


def get_impl() -> str:
    return _openfia.get_impl()


def set_num_threads(n: int) -> None:
    """Worker threads of the engine; results do not depend on it."""
    _openfia.set_num_threads(int(n))


def get_num_threads() -> int:
    return _openfia.get_num_threads()


def set_simd_cap(target: str) -> None:
    """Highest SIMD target the engine may use ("scalar", "avx2", "avx512", ...)."""
    _openfia.set_simd_cap(target)


def simd_target() -> str:
    """The SIMD target in effect."""
    return _openfia.simd_target()


def version() -> str:
    return _openfia.version()


# ---- tensors -> native arguments ------------------------------------------------------------

_TENSOR_ARGS = (
    "pse_shift", "atten_mask", "dequant_scale1", "quant_scale1", "dequant_scale2",
    "quant_scale2", "quant_offset2", "antiquant_scale", "antiquant_offset", "block_table",
    "query_padding_size", "kv_padding_size", "key_antiquant_scale", "key_antiquant_offset",
    "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix", "value_shared_prefix",
    "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale",
)
_INT_ARGS = (
    "num_heads", "pre_tokens", "next_tokens", "num_key_value_heads", "sparse_mode",
    "inner_precise", "block_size", "antiquant_mode", "key_antiquant_mode", "value_antiquant_mode",
)


def _native_tensor(t):
    """A tensor as the native module takes it. DLPack cannot export tensors that require grad
    (the operator is inference-only, so the data is read as is). The C++ API follows the NPU,
    which rejects non-contiguous inputs; torch users routinely hold transposed or sliced views,
    so the front end passes a contiguous copy of those (no copy for contiguous tensors)."""
    if t is None:
        return None
    if hasattr(t, "requires_grad") and t.requires_grad:
        t = t.detach()
    if hasattr(t, "is_contiguous") and not t.is_contiguous():
        t = t.contiguous()
    return _capsule(t)


def _capsule(t):
    """A torch tensor as a DLPack capsule, anything else (e.g. a numpy array) as is. The native
    module reads both; torch.utils.dlpack.to_dlpack costs ~0.4 us where the __dlpack__ protocol
    call nanobind makes for a tensor costs ~2.5 us, and a decode call passes 4-8 tensors. A
    capsule is single-use: each dict of native arguments goes to exactly one native call."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor):
        return torch.utils.dlpack.to_dlpack(t)
    return t


def _native_ints(v):
    if v is None:
        return None
    if hasattr(v, "tolist"):  # a tensor or numpy array of lengths
        v = v.tolist()
    if isinstance(v, int):
        return [v]
    return [int(x) for x in v]


def _native_kwargs(query, key, value, kw):
    """Keyword arguments of the native functions for one call (names as in torch_npu)."""
    out = {"query": _native_tensor(query)}
    if isinstance(key, (list, tuple)) or isinstance(value, (list, tuple)):
        out["key_list"] = [_native_tensor(t) for t in key]
        out["value_list"] = [_native_tensor(t) for t in value]
    else:
        out["key"] = _native_tensor(key)
        out["value"] = _native_tensor(value)
    for name in _TENSOR_ARGS:
        v = kw[name]
        if v is not None:
            out[name] = _native_tensor(v)
    for name in ("actual_seq_lengths", "actual_seq_lengths_kv"):
        if kw[name] is not None:
            out[name] = _native_ints(kw[name])
    for name in _INT_ARGS:
        out[name] = int(kw[name])
    out["scale"] = float(kw["scale"])
    out["input_layout"] = str(kw["input_layout"])
    out["softmax_lse_flag"] = bool(kw["softmax_lse_flag"])
    return out


def _as_tensor_arg(v, dtype_name="int64"):
    """Scalar-valued tensor arguments (padding sizes, prefix length) also accept ints/lists."""
    if v is None or hasattr(v, "data_ptr"):
        return v
    import torch

    return torch.tensor(v if isinstance(v, (list, tuple)) else [v], dtype=getattr(torch, dtype_name))


def fia_output_spec(query, key, value, **kwargs):
    """Validates a call (same arguments as npu_fused_infer_attention_score) and returns
    {attention_out_sizes, attention_out_dtype, softmax_lse_sizes, softmax_lse_dtype} as the C++
    library computes them, without computing attention."""
    kw = dict(_DEFAULTS)
    for name, v in kwargs.items():
        if name not in kw:
            raise TypeError(f"fia_output_spec() got an unexpected keyword argument '{name}'")
        kw[name] = v
    for name in ("query_padding_size", "kv_padding_size", "actual_shared_prefix_len"):
        kw[name] = _as_tensor_arg(kw[name])
    return _openfia.fia_output_spec(**_native_kwargs(query, key, value, kw))


def _fia_eager(query, key, value, kw):
    """Validates, allocates the outputs with torch.empty and computes, in one native call (GIL
    released while computing)."""
    from .torch_ops import alloc_output

    return _openfia.fia_call(alloc_output, **_native_kwargs(query, key, value, kw))


def npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
                                    actual_seq_lengths=None, actual_seq_lengths_kv=None,
                                    dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                                    quant_scale2=None, quant_offset2=None, antiquant_scale=None,
                                    antiquant_offset=None, block_table=None,
                                    query_padding_size=None, kv_padding_size=None,
                                    key_antiquant_scale=None, key_antiquant_offset=None,
                                    value_antiquant_scale=None, value_antiquant_offset=None,
                                    key_shared_prefix=None, value_shared_prefix=None,
                                    actual_shared_prefix_len=None, query_rope=None, key_rope=None,
                                    key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
                                    pre_tokens=2147483647, next_tokens=2147483647,
                                    input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
                                    inner_precise=0, block_size=0, antiquant_mode=0,
                                    softmax_lse_flag=False, key_antiquant_mode=0,
                                    value_antiquant_mode=0):
    """torch_npu.npu_fused_infer_attention_score on CPU tensors; returns
    (attention_out, softmax_lse). key/value may be lists of tensors (torch_npu's tensorlist:
    one [1, S_b, ...] tensor per batch). Goes through torch.ops.openfia so torch.compile traces
    it as one op (eager calls on plain CPU tensors skip the dispatcher: the same native call)."""
    import torch

    is_list = isinstance(key, (list, tuple)) or isinstance(value, (list, tuple))
    if is_list:
        key, value = list(key), list(value)
    query_padding_size = _as_tensor_arg(query_padding_size)
    kv_padding_size = _as_tensor_arg(kv_padding_size)
    actual_shared_prefix_len = _as_tensor_arg(actual_shared_prefix_len)
    if not _traced(query, key[0] if is_list and key else key):
        # Plain CPU tensors in eager mode: the native call itself, with every argument by name
        # (locals(); the dispatcher's conversion of this 40-argument schema costs ~30 us, about
        # as much as the rest of a short decode call).
        return _fia_eager(query, key, value, locals())
    if isinstance(actual_seq_lengths, torch.Tensor):
        actual_seq_lengths = actual_seq_lengths.tolist()
    if isinstance(actual_seq_lengths_kv, torch.Tensor):
        actual_seq_lengths_kv = actual_seq_lengths_kv.tolist()
    if isinstance(actual_seq_lengths, int):
        actual_seq_lengths = [actual_seq_lengths]
    if isinstance(actual_seq_lengths_kv, int):
        actual_seq_lengths_kv = [actual_seq_lengths_kv]
    op = torch.ops.openfia.npu_fused_infer_attention_score
    op = op.tensorlist if is_list else op.default
    return op(query, key, value, pse_shift=pse_shift, atten_mask=atten_mask,
              actual_seq_lengths=actual_seq_lengths, actual_seq_lengths_kv=actual_seq_lengths_kv,
              dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
              dequant_scale2=dequant_scale2, quant_scale2=quant_scale2,
              quant_offset2=quant_offset2, antiquant_scale=antiquant_scale,
              antiquant_offset=antiquant_offset, block_table=block_table,
              query_padding_size=query_padding_size, kv_padding_size=kv_padding_size,
              key_antiquant_scale=key_antiquant_scale, key_antiquant_offset=key_antiquant_offset,
              value_antiquant_scale=value_antiquant_scale,
              value_antiquant_offset=value_antiquant_offset, key_shared_prefix=key_shared_prefix,
              value_shared_prefix=value_shared_prefix,
              actual_shared_prefix_len=actual_shared_prefix_len, query_rope=query_rope,
              key_rope=key_rope, key_rope_antiquant_scale=key_rope_antiquant_scale,
              num_heads=num_heads, scale=scale, pre_tokens=pre_tokens, next_tokens=next_tokens,
              input_layout=input_layout, num_key_value_heads=num_key_value_heads,
              sparse_mode=sparse_mode, inner_precise=inner_precise, block_size=block_size,
              antiquant_mode=antiquant_mode, softmax_lse_flag=softmax_lse_flag,
              key_antiquant_mode=key_antiquant_mode, value_antiquant_mode=value_antiquant_mode)


def _signature_defaults():
    import inspect

    return {name: p.default for name, p in
            inspect.signature(npu_fused_infer_attention_score).parameters.items()
            if p.kind == inspect.Parameter.KEYWORD_ONLY}


_DEFAULTS = _signature_defaults()


def patch_torch_npu():
    """Makes Ascend code run unchanged on a CPU: afterwards `import torch_npu` yields a module
    whose npu_fused_infer_attention_score, npu_kv_quant_sparse_flash_attention,
    npu_sparse_attn_sharedkv and npu_sparse_attn_sharedkv_metadata are openfia's, and the
    operators run openfia on CPU tensors where upstream code calls them:
    torch.ops.npu.npu_fused_infer_attention_score,
    torch.ops.npu.npu_kv_quant_sparse_flash_attention, torch.ops.custom.npu_sparse_attn_sharedkv
    and torch.ops.custom.npu_sparse_attn_sharedkv_metadata (the CANN custom-op package's
    namespace). With a real torch_npu (or custom-op package) installed, its functions are
    replaced and a CPU kernel is added to its ops. Without one, the stand-in also gives
    Tensor.npu(), torch.npu and a torchair whose npu_backend compiles for the CPU (npu_shim.py),
    so the source documents' examples run unchanged (`python -m openfia run script.py`).
    Returns the torch_npu module."""
    import importlib
    import sys
    import types

    from . import kvqsfa, sas, torch_ops

    mod = sys.modules.get("torch_npu")
    if mod is None:
        try:
            mod = importlib.import_module("torch_npu")
        except Exception:  # not installed (or unusable without an NPU): provide a stand-in
            mod = types.ModuleType("torch_npu")
            mod.__doc__ = "openfia stand-in for torch_npu (openfia.patch_torch_npu())"
            mod.__openfia_stand_in__ = True
            sys.modules["torch_npu"] = mod
    if getattr(mod, "__openfia_stand_in__", False):
        # No NPU software at all: the script-side calls around the operators too (Tensor.npu,
        # torch.npu, torchair's graph mode), see npu_shim.py.
        from . import npu_shim

        npu_shim.install_device_shims(mod)
        npu_shim.install_torchair()
    mod.npu_fused_infer_attention_score = npu_fused_infer_attention_score
    mod.npu_kv_quant_sparse_flash_attention = kvqsfa.npu_kv_quant_sparse_flash_attention
    mod.npu_sparse_attn_sharedkv = sas.npu_sparse_attn_sharedkv
    mod.npu_sparse_attn_sharedkv_metadata = sas.npu_sparse_attn_sharedkv_metadata
    torch_ops.register_npu_namespace()
    return mod


# Register torch.ops.openfia.* at import when torch is present (torch stays optional).
try:
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised only without torch
    pass
else:
    from . import torch_ops  # noqa: F401,E402
    from .sas import _traced  # noqa: E402  (npu_fused_infer_attention_score's eager test)
    from .kvqsfa import npu_kv_quant_sparse_flash_attention  # noqa: F401,E402
    from .sas import (npu_sparse_attn_sharedkv, npu_sparse_attn_sharedkv_metadata,  # noqa: E402
                      verify_sparse_attn_sharedkv_metadata)
    from .ring import merge_attention_states, ring_attention, sharded_kv_attention  # noqa: E402
    __all__ += ["npu_sparse_attn_sharedkv", "npu_sparse_attn_sharedkv_metadata",
                "verify_sparse_attn_sharedkv_metadata", "merge_attention_states",
                "ring_attention", "sharded_kv_attention"]
