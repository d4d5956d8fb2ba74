"""IncreFlashAttention (torch_npu.npu_incre_flash_attention) on the CPU: the incremental
(one query token per batch) operator that FusedInferAttentionScore's Q_S = 1 branch took over,
as a front end over openfia's FIA call.

    out = openfia.npu_incre_flash_attention(q, k, v, num_heads=32, input_layout="BSH",
                                            scale_value=0.088)

The signature is torch_npu's (op-plugin's schema), argument for argument; the result is the
attention output alone. The call is npu_fused_infer_attention_score with the query's S = 1:
`actual_seq_lengths` (the key/value lengths) becomes actual_seq_lengths_kv, `scale_value`
scale, the rest keeps its name; errors name this operator's arguments. This module needs torch
only when called.
"""
from __future__ import annotations

from . import _native as N
from . import fia

__all__ = ["npu_incre_flash_attention"]

NAME = "npu_incre_flash_attention"

# The query layouts the operator takes (torch_npu: 三维是BSH，四维是BNSD或BSND, 不支持其他值).
LAYOUTS = ("BSH", "BSND", "BNSD")

# Arguments passed on to FIA under the same name.
_SAME = ("pse_shift", "atten_mask", "antiquant_scale", "antiquant_offset", "block_table",
         "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
         "kv_padding_size", "num_heads", "input_layout", "num_key_value_heads", "block_size",
         "inner_precise")

# FIA's argument names -> this operator's, for errors.
FIA_NAMES = {"actual_seq_lengths_kv": "actual_seq_lengths", "scale": "scale_value"}


def fia_kwargs(query, kw):
    """Checks this operator's own rules and returns the FIA keyword arguments of the call (kw:
    every argument of npu_incre_flash_attention). `padding_mask` is reserved (预留参数，暂未使用):
    torch_npu does not pass it on, so it has no effect here either."""
    layout = N.string(kw["input_layout"], NAME, "input_layout")
    if layout not in LAYOUTS:
        raise N.error(NAME, "input_layout", "must be one of BSH, BSND, BNSD", layout)
    s = fia.query_seq_len(query, layout)
    if s is not None and s != 1:
        raise N.error(NAME, "query", "the incremental operator takes one query token per batch: "
                      f"query's S must be 1 ({layout})", f"shape {list(query.shape)}")
    out = dict(fia.DEFAULTS)
    for name in _SAME:
        out[name] = kw[name]
    out["actual_seq_lengths_kv"] = kw["actual_seq_lengths"]
    out["scale"] = kw["scale_value"]
    return out


def native_call(query, key, value, kw):
    """The CPU kernel: this operator's rules, then FIA's native call; returns attention_out."""
    with fia.errors_as(NAME, FIA_NAMES):
        return fia.native_call(query, key, value, fia_kwargs(query, kw))[0]


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None,
                              pse_shift=None, actual_seq_lengths=None, antiquant_scale=None,
                              antiquant_offset=None, block_table=None, dequant_scale1=None,
                              quant_scale1=None, dequant_scale2=None, quant_scale2=None,
                              quant_offset2=None, kv_padding_size=None, num_heads=1,
                              scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
                              block_size=0, inner_precise=1):
    """torch_npu.npu_incre_flash_attention on CPU tensors; returns attention_out (the query's
    shape with value's D; int8 with quant_scale2). Goes through torch.ops.openfia like
    npu_fused_infer_attention_score (eager calls on plain CPU tensors skip the dispatcher)."""
    kv_padding_size = N.int64_tensor(kv_padding_size, NAME, "kv_padding_size")
    return fia.dispatch(NAME, query, key, value, locals(), native_call, ("actual_seq_lengths",))


# Every keyword argument with its default (the schema's defaults too).
DEFAULTS = N.keyword_defaults(npu_incre_flash_attention)
