"""FusedInferAttentionScore (torch_npu.npu_fused_infer_attention_score) on the CPU.

    out, lse = openfia.npu_fused_infer_attention_score(q, k, v, num_heads=32,
                                                       input_layout="BNSD", scale=0.088)

The signature is torch_npu's, argument for argument, plus `sinks` at the end. fia_output_spec() validates a call and
returns its output shapes without computing. The front ends over this operator (ifa, pfa,
fia_v2) call it through native_call and share dispatch, errors_as and query_seq_len. This module
needs torch only when called.
"""
from __future__ import annotations

import contextlib
import re

from . import _native as N

__all__ = ["npu_fused_infer_attention_score", "fia_output_spec"]

NAME = "npu_fused_infer_attention_score"

_TENSOR_ARGS = (
    "pse_shift", "atten_mask", "dequant_scale1", "quant_scale1", "dequant_scale2",
    "quant_scale2", "quant_offset2", "antiquant_scale", "antiquant_offset", "block_table",
    "query_padding_size", "kv_padding_size", "key_antiquant_scale", "key_antiquant_offset",
    "value_antiquant_scale", "value_antiquant_offset", "key_shared_prefix", "value_shared_prefix",
    "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale", "sinks",
)
_INT_ARGS = (
    "num_heads", "pre_tokens", "next_tokens", "num_key_value_heads", "sparse_mode",
    "inner_precise", "block_size", "antiquant_mode", "key_antiquant_mode", "value_antiquant_mode",
)
# Tensor arguments that hold integers and also accept an int or a list.
_INT_TENSOR_ARGS = ("query_padding_size", "kv_padding_size", "actual_shared_prefix_len")


def _native_kwargs(query, key, value, kw):
    """Keyword arguments of the native functions for one call (names as in torch_npu)."""
    out = {"query": N.dense_capsule(query, NAME, "query")}
    if isinstance(key, (list, tuple)) or isinstance(value, (list, tuple)):
        out["key_list"] = [N.dense_capsule(t, NAME, "key") for t in key]
        out["value_list"] = [N.dense_capsule(t, NAME, "value") for t in value]
    else:
        out["key"] = N.dense_capsule(key, NAME, "key")
        out["value"] = N.dense_capsule(value, NAME, "value")
    for name in _TENSOR_ARGS:
        v = kw[name]
        if v is not None:
            out[name] = N.dense_capsule(v, NAME, name)
    for name in ("actual_seq_lengths", "actual_seq_lengths_kv"):
        if kw[name] is not None:
            out[name] = N.int_list(kw[name], NAME, name)
    for name in _INT_ARGS:
        out[name] = N.integer(kw[name], NAME, name)
    out["scale"] = N.real(kw["scale"], NAME, "scale")
    out["input_layout"] = N.string(kw["input_layout"], NAME, "input_layout")
    out["softmax_lse_flag"] = N.boolean(kw["softmax_lse_flag"], NAME, "softmax_lse_flag")
    return out


def native_call(query, key, value, kw):
    """Validates, allocates the outputs with torch.empty and computes, in one native call (GIL
    released while computing). kw: every keyword argument of the operator."""
    return N.lib.fia_call(N.alloc_output, **_native_kwargs(query, key, value, kw))


def fia_output_spec(query, key, value, **kwargs):
    """Validates a call (same arguments as npu_fused_infer_attention_score) and returns
    {attention_out_sizes, attention_out_dtype, softmax_lse_sizes, softmax_lse_dtype} as the C++
    library computes them, without computing attention."""
    kw = dict(DEFAULTS)
    for name, v in kwargs.items():
        if name not in kw:
            raise TypeError(f"fia_output_spec() got an unexpected keyword argument '{name}'")
        kw[name] = v
    for name in _INT_TENSOR_ARGS:
        kw[name] = N.int64_tensor(kw[name], NAME, name)
    return N.lib.fia_output_spec(**_native_kwargs(query, key, value, kw))


def traced_lengths(v, op, name):
    """A length-list argument of a call that goes through the dispatcher, as its SymInt[]? /
    int[]? schema takes it: while compiling the entries may be SymInts (a tensor becomes its
    list, an int a one-entry list); otherwise a list of ints checked by N.int_list."""
    import torch

    if torch.compiler.is_compiling():
        if isinstance(v, torch.Tensor):
            return v.tolist()
        return [v] if isinstance(v, int) else v
    return N.int_list(v, op, name)


def dispatch(op, query, key, value, kw, cpu, length_args=()):
    """The path of a front end over this operator (openfia.ifa, pfa, fia_v2): plain CPU tensors
    in eager mode run `cpu(query, key, value, kw)` directly (kw: every keyword argument of the
    call); anything else (tracing, a dispatch mode, fake or meta tensors) goes through
    torch.ops.openfia.<op> with every keyword argument, the length lists `length_args` as
    traced_lengths makes them."""
    if not N.traced(op, query=query, key=key, value=value):
        return cpu(query, key, value, kw)
    import torch

    args = {k: v for k, v in kw.items() if k not in ("query", "key", "value")}
    for name in length_args:
        args[name] = traced_lengths(args[name], op, name)
    return getattr(torch.ops.openfia, op).default(query, key, value, **args)


def query_seq_len(query, input_layout):
    """The S of a query in input_layout's query layout (BSH, BSND, BNSD), or None where the
    layout has none or the query's rank does not fit it (the operator's checks then say so)."""
    q_layout = input_layout.partition("_")[0] if isinstance(input_layout, str) else None
    want = {"BSH": (3, 1), "BSND": (4, 1), "BNSD": (4, 2)}.get(q_layout)
    if want is None or query.dim() != want[0]:
        return None
    return query.shape[want[1]]


@contextlib.contextmanager
def errors_as(op, names):
    """An error of this operator raised inside is re-raised as front end `op`'s: its argument
    and the argument names in its rule and value become the front end's (names: {FIA name:
    front-end name}); the code stays. Only names with an underscore are replaced in the texts
    (`scale` is also an English word there)."""
    try:
        yield
    except N.OpenfiaError as e:
        if getattr(e, "code", None) == "resource_exhausted" or not hasattr(e, "argument"):
            raise
        words = sorted((n for n in names if "_" in n), key=len, reverse=True)
        pattern = re.compile(r"\b(" + "|".join(words) + r")\b") if words else None

        def rename(text):
            return pattern.sub(lambda m: names[m.group(1)], text) if pattern else text

        cls = N.OpenfiaTypeError if isinstance(e, N.OpenfiaTypeError) else N.OpenfiaError
        raise N.error(op, names.get(e.argument, e.argument), rename(e.rule), rename(e.actual),
                      code=e.code, cls=cls) from None


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
                                    value_antiquant_mode=0, sinks=None):
    """torch_npu.npu_fused_infer_attention_score on CPU tensors; returns
    (attention_out, softmax_lse). key/value may be lists of tensors (torch_npu's tensorlist:
    one [1, S_b, ...] tensor per batch). `sinks` (openfia's addition: the current aclnn
    interface's learnableSink) is one logit per query head in the softmax denominator. Goes through torch.ops.openfia so torch.compile traces
    it as one op (eager calls on plain CPU tensors skip the dispatcher: the same native call)."""
    import torch

    is_list = isinstance(key, (list, tuple)) or isinstance(value, (list, tuple))
    if is_list:
        key, value = list(key), list(value)
    query_padding_size = N.int64_tensor(query_padding_size, NAME, "query_padding_size")
    kv_padding_size = N.int64_tensor(kv_padding_size, NAME, "kv_padding_size")
    actual_shared_prefix_len = N.int64_tensor(actual_shared_prefix_len, NAME,
                                              "actual_shared_prefix_len")
    if not N.traced(NAME, query=query, key=key, value=value):
        # Plain CPU tensors in eager mode: the native call itself, with every argument by name
        # (locals(); the dispatcher's conversion of this 40-argument schema costs ~30 us, about
        # as much as the rest of a short decode call).
        return native_call(query, key, value, locals())
    actual_seq_lengths = traced_lengths(actual_seq_lengths, NAME, "actual_seq_lengths")
    actual_seq_lengths_kv = traced_lengths(actual_seq_lengths_kv, NAME, "actual_seq_lengths_kv")
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
              key_antiquant_mode=key_antiquant_mode, value_antiquant_mode=value_antiquant_mode,
              sinks=sinks)


# Every keyword argument with its default (the schema's defaults too).
DEFAULTS = N.keyword_defaults(npu_fused_infer_attention_score)
