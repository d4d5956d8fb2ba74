"""torch_npu.npu_fused_infer_attention_score_v2 on the CPU: FusedInferAttentionScore's newer
spelling, as a front end over openfia's FIA call.

    out, lse = openfia.npu_fused_infer_attention_score_v2(
        q, k, v, num_query_heads=32, num_key_value_heads=8, input_layout="BNSD",
        softmax_scale=0.088, actual_seq_kvlen=lengths, return_softmax_lse=True)

The signature is torch_npu's (op-plugin's schema), argument for argument. Renamed arguments map
one to one onto npu_fused_infer_attention_score's (FIA_ARGS); what v2 has beyond the FIA engine
(the quantized query and its scales, P quantization, the tree mask sparse_mode 9, an output
dtype, the dtype reinterpretations of the *_dtype arguments) is refused with an error naming the
argument, never ignored. v2 has no shared prefix, left padding, legacy antiquant or tensorlist
arguments (torch_npu points to npu_fused_infer_attention_score for them). This module needs
torch only when called.
"""
from __future__ import annotations

from . import _native as N
from . import fia

__all__ = ["npu_fused_infer_attention_score_v2"]

NAME = "npu_fused_infer_attention_score_v2"

# v2 name -> FIA name, for every argument that FIA computes.
FIA_ARGS = {
    "query_rope": "query_rope", "key_rope": "key_rope", "pse_shift": "pse_shift",
    "atten_mask": "atten_mask", "actual_seq_qlen": "actual_seq_lengths",
    "actual_seq_kvlen": "actual_seq_lengths_kv", "block_table": "block_table",
    "dequant_scale_key": "key_antiquant_scale", "dequant_offset_key": "key_antiquant_offset",
    "dequant_scale_value": "value_antiquant_scale",
    "dequant_offset_value": "value_antiquant_offset", "quant_scale_out": "quant_scale2",
    "quant_offset_out": "quant_offset2", "learnable_sink": "sinks",
    "num_query_heads": "num_heads", "num_key_value_heads": "num_key_value_heads",
    "softmax_scale": "scale", "pre_tokens": "pre_tokens", "next_tokens": "next_tokens",
    "input_layout": "input_layout", "sparse_mode": "sparse_mode", "block_size": "block_size",
    "key_quant_mode": "key_antiquant_mode", "value_quant_mode": "value_antiquant_mode",
    "inner_precise": "inner_precise", "return_softmax_lse": "softmax_lse_flag",
}
FIA_NAMES = {f: v for v, f in FIA_ARGS.items()}
FIA_NAMES["key_rope_antiquant_scale"] = "dequant_scale_key_rope"

# Arguments whose feature the FIA engine does not have: given (not None), the call is refused.
UNSUPPORTED = {
    "dequant_scale_query": "the quantized query's dequantization (query_quant_mode 3, per "
                           "token and head; int8 / fp8 full quantization) is not supported by "
                           "openfia",
    "dequant_scale_key_rope": "reserved (预留参数，暂未使用): must be None",
    "quant_scale_p": "reserved (预留参数，暂未使用): the quantization of P is not supported by "
                     "openfia, must be None",
    "out_dtype": "an output dtype other than the computed one is not supported by openfia "
                 "(the output is the query's dtype, int8 with quant_scale_out)",
}
# The *_dtype arguments reinterpret a tensor's storage (e.g. int8 bytes as hifloat8): openfia
# takes every tensor as its own dtype, so any value is refused.
DTYPE_ARGS = ("query_dtype", "key_dtype", "value_dtype", "query_rope_dtype", "key_rope_dtype",
              "key_shared_prefix_dtype", "value_shared_prefix_dtype", "dequant_scale_query_dtype",
              "dequant_scale_key_dtype", "dequant_scale_value_dtype",
              "dequant_scale_key_rope_dtype")


def fia_kwargs(query, kw):
    """Checks what v2 has beyond FIA and returns the FIA keyword arguments of the call (kw:
    every argument of npu_fused_infer_attention_score_v2). query_quant_mode only qualifies
    dequant_scale_query, so it is not checked without it (as FIA does with the key/value
    modes)."""
    for name, rule in UNSUPPORTED.items():
        if kw[name] is not None:
            v = kw[name]
            got = f"a tensor of shape {list(v.shape)}" if hasattr(v, "shape") else repr(v)
            raise N.error(NAME, name, rule, got, code="unsupported")
    for name in DTYPE_ARGS:
        if kw[name] is not None:
            raise N.error(NAME, name, "a dtype reinterpretation of a tensor's storage is not "
                          "supported by openfia (tensors are taken as their own dtype): must "
                          "be None", kw[name], code="unsupported")
    import torch

    if isinstance(query, torch.Tensor) and query.dtype in (torch.int8, torch.float8_e4m3fn,
                                                         torch.float8_e5m2):
        raise N.error(NAME, "query", "a quantized query (full quantization with "
                      "dequant_scale_query/key/value) is not supported by openfia; int8 full "
                      "quantization with dequant_scale1/quant_scale1/dequant_scale2 is "
                      "npu_fused_infer_attention_score's", str(query.dtype).replace("torch.", ""),
                      code="unsupported")
    layout = N.string(kw["input_layout"], NAME, "input_layout")
    mode = N.integer(kw["sparse_mode"], NAME, "sparse_mode")
    # sparse_mode has no effect for Q_S = 1 without query_rope (Q_S为1且不带rope输入时该参数无效).
    if mode == 9 and (kw["query_rope"] is not None or fia.query_seq_len(query, layout) != 1):
        raise N.error(NAME, "sparse_mode", "9 (treeMask, a user tree mask over the draft tokens) "
                      "is not supported by openfia", mode, code="unsupported")
    out = dict(fia.DEFAULTS)
    for v2, name in FIA_ARGS.items():
        out[name] = kw[v2]
    return out


def native_call(query, key, value, kw):
    """The CPU kernel: v2's checks, then FIA's native call; returns (attention_out,
    softmax_lse)."""
    with fia.errors_as(NAME, FIA_NAMES):
        return fia.native_call(query, key, value, fia_kwargs(query, kw))


def npu_fused_infer_attention_score_v2(
        query, key, value, *, query_rope=None, key_rope=None, pse_shift=None, atten_mask=None,
        actual_seq_qlen=None, actual_seq_kvlen=None, block_table=None, dequant_scale_query=None,
        dequant_scale_key=None, dequant_offset_key=None, dequant_scale_value=None,
        dequant_offset_value=None, dequant_scale_key_rope=None, quant_scale_out=None,
        quant_offset_out=None, quant_scale_p=None, learnable_sink=None, num_query_heads=1,
        num_key_value_heads=0, softmax_scale=1.0, pre_tokens=2147483647,
        next_tokens=2147483647, input_layout="BSH", sparse_mode=0, block_size=0,
        query_quant_mode=0, key_quant_mode=0, value_quant_mode=0, inner_precise=0,
        return_softmax_lse=False, query_dtype=None, key_dtype=None, value_dtype=None,
        query_rope_dtype=None, key_rope_dtype=None, key_shared_prefix_dtype=None,
        value_shared_prefix_dtype=None, dequant_scale_query_dtype=None,
        dequant_scale_key_dtype=None, dequant_scale_value_dtype=None,
        dequant_scale_key_rope_dtype=None, out_dtype=None):
    """torch_npu.npu_fused_infer_attention_score_v2 on CPU tensors; returns (attention_out,
    softmax_lse) as npu_fused_infer_attention_score does. Goes through torch.ops.openfia (eager
    calls on plain CPU tensors skip the dispatcher)."""
    return fia.dispatch(NAME, query, key, value, locals(), native_call,
                        ("actual_seq_qlen", "actual_seq_kvlen"))


DEFAULTS = N.keyword_defaults(npu_fused_infer_attention_score_v2)
