"""KvQuantSparseFlashAttention (torch_npu.npu_kv_quant_sparse_flash_attention) on the CPU, and the
helpers that build its 656-byte KV rows.

    rows = openfia.kvqsfa.quantize_kv_rows(k_nope, k_rope, "int8")      # [..., 656] int8
    out = openfia.npu_kv_quant_sparse_flash_attention(
        query, rows, rows, topk_indices, scale_value=576 ** -0.5, key_quant_mode=2,
        value_quant_mode=2, attention_mode=2, layout_kv="PA_BSND", block_table=bt,
        actual_seq_lengths_kv=lens)

The signature is torch_npu's, checked against the operator schema in Ascend/op-plugin
(op_plugin/config/op_plugin_functions.yaml @ 517f2e7d, `npu_kv_quant_sparse_flash_attention`),
its doc docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_quant_sparse_flash_attention.md, and the
upstream example cannmirror/ops-transformer
attention/kv_quant_sparse_flash_attention/examples/test_npu_kv_quant_sparse_flash_attention.py
(which passes every argument after sparse_indices by keyword). Notably: key_quant_mode and
value_quant_mode are required positional arguments; attention_mode defaults to 0, which the
operator rejects (only 2 is supported), so callers pass attention_mode=2 as the example does;
key_dtype/value_dtype/sinks are the newest additions.
Semantics: docs/kv_quant_sparse_flash_attention.md.
The row helpers live in openfia.quant and are re-exported here.
"""
from __future__ import annotations

import sys

import torch

from . import _native as N
from .quant import HIFLOAT8, hifloat8_decode, hifloat8_encode, quantize_kv_rows

__all__ = [
    "npu_kv_quant_sparse_flash_attention",
    "quantize_kv_rows",
    "hifloat8_encode",
    "hifloat8_decode",
    "HIFLOAT8",
]

NAME = "npu_kv_quant_sparse_flash_attention"
_MAX_INT64 = 2**63 - 1

_INT_ARGS = ("sparse_block_size", "sparse_mode", "pre_tokens", "next_tokens", "attention_mode",
             "quant_scale_repo_mode", "tile_size", "rope_head_dim")
_TENSOR_ARGS = ("key_dequant_scale", "value_dequant_scale", "block_table", "sinks")


def _dtype_code(v, name):
    """key_dtype/value_dtype -> None or HIFLOAT8 (the only value torch_npu accepts)."""
    if v is None:
        return None
    npu = sys.modules.get("torch_npu")
    if v == HIFLOAT8 or v == "hifloat8" or (npu is not None and v is getattr(npu, "hifloat8", 0)):
        return HIFLOAT8
    raise N.error(NAME, name, "only hifloat8 (openfia.kvqsfa.HIFLOAT8, \"hifloat8\" or "
                  "torch_npu.hifloat8) or None is supported", repr(v))


def _rows_tensor(t, name):
    """The KV rows are read in place when their strides and address allow it (torch_npu accepts
    a dim-0 non-contiguous paged cache): unit last-dimension stride, byte strides and base
    4-byte aligned, since the fp32 scales are read inside the rows. Any other view (a slice
    starting at an odd byte, say) is copied."""
    t = N.data(t, NAME, name)
    ok = t.dim() > 0 and t.stride(-1) == 1 and t.data_ptr() % 4 == 0 and all(
        (s * t.element_size()) % 4 == 0 for s in t.stride()[:-1])
    return t if ok else t.clone(memory_format=torch.contiguous_format)


def _native_kwargs(query, key, value, sparse_indices, scale_value, key_quant_mode,
                   value_quant_mode, kw):
    nkw = {
        "query": N.dense(query, NAME, "query"),
        "key": _rows_tensor(key, "key"),
        "value": _rows_tensor(value, "value"),
        "sparse_indices": N.data(sparse_indices, NAME, "sparse_indices"),
        "scale_value": N.real(scale_value, NAME, "scale_value"),
        "key_quant_mode": N.integer(key_quant_mode, NAME, "key_quant_mode"),
        "value_quant_mode": N.integer(value_quant_mode, NAME, "value_quant_mode"),
        "layout_query": N.string(kw["layout_query"], NAME, "layout_query"),
        "layout_kv": N.string(kw["layout_kv"], NAME, "layout_kv"),
        "key_hifloat8": _dtype_code(kw["key_dtype"], "key_dtype") is not None,
        "value_hifloat8": _dtype_code(kw["value_dtype"], "value_dtype") is not None,
    }
    for name in _INT_ARGS:
        nkw[name] = N.integer(kw[name], NAME, name)
    for name in _TENSOR_ARGS:
        if kw[name] is not None:
            nkw[name] = N.data(kw[name], NAME, name)
    for name in ("actual_seq_lengths_query", "actual_seq_lengths_kv"):
        if kw[name] is not None:
            nkw[name] = N.lengths(kw[name], NAME, name)
    return nkw


def native_call(query, key, value, sparse_indices, scale_value, key_quant_mode,
                value_quant_mode, **kw):
    """Validation, allocation and compute in one native call (tensors as DLPack capsules).
    kw: the keyword arguments that differ from the defaults (as the dispatcher passes them)."""
    kw = {**DEFAULTS, **kw}
    nkw = _native_kwargs(query, key, value, sparse_indices, scale_value, key_quant_mode,
                         value_quant_mode, kw)
    return N.lib.kvqsfa_call(N.alloc_output, **N.capsules(nkw))[0]


def npu_kv_quant_sparse_flash_attention(query, key, value, sparse_indices, scale_value,
                                        key_quant_mode, value_quant_mode, *,
                                        key_dequant_scale=None, value_dequant_scale=None,
                                        block_table=None, actual_seq_lengths_query=None,
                                        actual_seq_lengths_kv=None, sparse_block_size=1,
                                        layout_query="BSND", layout_kv="BSND", sparse_mode=3,
                                        pre_tokens=_MAX_INT64, next_tokens=_MAX_INT64,
                                        attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
                                        rope_head_dim=64, key_dtype=None, value_dtype=None,
                                        sinks=None):
    """torch_npu.npu_kv_quant_sparse_flash_attention on CPU tensors; returns attention_out
    ([B, S1, Q_N, 512] or [T, Q_N, 512], query dtype).

    query [B,S1,Q_N,576] (BSND) / [T,Q_N,576] (TND), float16/bfloat16. key: 656-byte rows
    [B,S2,1,656] / [KV_T,1,656] / [block_num,block_size,1,656] (PA_BSND) as torch.int8 (int8
    nope), torch.float8_e4m3fn, or torch.uint8 (hifloat8 nope; or any 1-byte tensor with
    key_dtype=HIFLOAT8). value: same dtype and leading shape (its content is not read: V is the
    dequantized nope part of key). sparse_indices int32 [B,S1,1,K] / [T,1,K], -1 ends a row.
    actual_seq_lengths_query/_kv: tensors or lists (TND: cumulative). Rows attending no key are
    0. Goes through torch.ops.openfia when traced (torch.compile holds it as one op), the native
    call directly for plain CPU tensors in eager mode."""
    key_dtype = _dtype_code(key_dtype, "key_dtype")
    value_dtype = _dtype_code(value_dtype, "value_dtype")
    actual_seq_lengths_query = N.lengths(actual_seq_lengths_query, NAME,
                                         "actual_seq_lengths_query")
    actual_seq_lengths_kv = N.lengths(actual_seq_lengths_kv, NAME, "actual_seq_lengths_kv")
    # Eager calls on plain CPU tensors skip the dispatcher (the same native call, ~30 us less).
    traced = N.traced(NAME, query=query, key=key)
    call = torch.ops.openfia.npu_kv_quant_sparse_flash_attention.default if traced else native_call
    return call(query, key, value, sparse_indices, N.real(scale_value, NAME, "scale_value"),
                N.integer(key_quant_mode, NAME, "key_quant_mode"),
                N.integer(value_quant_mode, NAME, "value_quant_mode"),
                key_dequant_scale=key_dequant_scale,
                value_dequant_scale=value_dequant_scale, block_table=block_table,
                actual_seq_lengths_query=actual_seq_lengths_query,
                actual_seq_lengths_kv=actual_seq_lengths_kv,
                sparse_block_size=sparse_block_size, layout_query=layout_query,
                layout_kv=layout_kv, sparse_mode=sparse_mode, pre_tokens=pre_tokens,
                next_tokens=next_tokens, attention_mode=attention_mode,
                quant_scale_repo_mode=quant_scale_repo_mode, tile_size=tile_size,
                rope_head_dim=rope_head_dim, key_dtype=key_dtype, value_dtype=value_dtype,
                sinks=sinks)


# Every keyword argument with its default (the schema's defaults too).
DEFAULTS = N.keyword_defaults(npu_kv_quant_sparse_flash_attention)
