"""PromptFlashAttention (torch_npu.npu_prompt_flash_attention) on the CPU: the prompt (full
sequence) operator that FusedInferAttentionScore's Q_S > 1 branch took over, as a front end
over openfia's FIA call.

    out = openfia.npu_prompt_flash_attention(q, k, v, num_heads=8, input_layout="BNSD",
                                             scale_value=0.088, atten_mask=mask)

The signature is torch_npu's (op-plugin's schema), argument for argument, with its defaults:
note next_tokens=0 (FIA: 2147483647), which with an atten_mask in sparse_mode 0 limits each row
to the keys up to its own position. The result is the attention output alone. `scale_value`
becomes FIA's scale, `deq_scale1` / `deq_scale2` dequant_scale1 / dequant_scale2; sparse_mode
10-14 select the high-precision mode of sparse_mode 0-4 as torch_npu does (inner_precise 0, else
1). A one-token query (Q_S = 1) is computed as a prompt too (the band, sparse_mode and
actual_seq_lengths apply), where FIA's Q_S = 1 branch ignores them; errors name this operator's
arguments. This module needs torch only when called.
"""
from __future__ import annotations

from . import _native as N
from . import fia

__all__ = ["npu_prompt_flash_attention"]

NAME = "npu_prompt_flash_attention"

# The layouts the operator takes: BSH, BSND, BNSD, BNSD_BSND (input_layout) and TND (with
# cumulative actual_seq_lengths / actual_seq_lengths_kv).
LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND")

# torch_npu's sparse_mode 10-14: sparse_mode 0-4 in high-precision mode (inner_precise 0).
HIGH_PRECISION_SPARSE = range(10, 15)

_SAME = ("pse_shift", "atten_mask", "actual_seq_lengths", "quant_scale1", "quant_scale2",
         "quant_offset2", "num_heads", "pre_tokens", "next_tokens", "input_layout",
         "num_key_value_heads", "actual_seq_lengths_kv", "sparse_mode")

FIA_NAMES = {"scale": "scale_value", "dequant_scale1": "deq_scale1",
             "dequant_scale2": "deq_scale2"}


def fia_kwargs(query, kw):
    """Checks this operator's own rules and returns the FIA keyword arguments of the call (kw:
    every argument of npu_prompt_flash_attention). `padding_mask` is reserved (预留参数，暂未
    使用): torch_npu does not pass it on, so it has no effect here either."""
    layout = N.string(kw["input_layout"], NAME, "input_layout")
    if layout not in LAYOUTS:
        raise N.error(NAME, "input_layout", "must be one of BSH, BSND, BNSD, BNSD_BSND, TND",
                      layout)
    out = dict(fia.DEFAULTS)
    for name in _SAME:
        out[name] = kw[name]
    out["dequant_scale1"] = kw["deq_scale1"]
    out["dequant_scale2"] = kw["deq_scale2"]
    out["scale"] = kw["scale_value"]
    mode = N.integer(kw["sparse_mode"], NAME, "sparse_mode")
    if mode in HIGH_PRECISION_SPARSE:
        out["sparse_mode"], out["inner_precise"] = mode - 10, 0
    else:
        out["inner_precise"] = 1
    return out


def _one_token_as_prompt(query, kw, layout):
    """A one-token query computed as a prompt: FIA takes the prompt branch for Q_S > 1 only, so
    the query gets a second row that actual_seq_lengths leaves out (a row past a batch's
    actual length is not computed); a mask or pse_shift with a single query row gets that row
    twice. Returns the query, the FIA arguments and the output's S axis."""
    import torch

    s_axis = 2 if layout.startswith("BNSD") else 1
    lengths = N.int_list(kw["actual_seq_lengths"], NAME, "actual_seq_lengths")
    if lengths is None:
        lengths = [1]
    # One entry serves every batch; otherwise the first B entries are the batches' lengths.
    for i, n in enumerate(lengths if len(lengths) == 1 else lengths[:query.shape[0]]):
        if not 0 <= n <= 1:
            raise N.error(NAME, "actual_seq_lengths", "each entry must be in [0, S of query] "
                          "(不大于query中对应batch的Sequence Length), S = 1",
                          f"entry {i} = {n}")
    kw = dict(kw, actual_seq_lengths=lengths)
    query = torch.cat([query, query], dim=s_axis)
    mask, pse = kw["atten_mask"], kw["pse_shift"]
    if isinstance(mask, torch.Tensor) and mask.dim() >= 2 and mask.shape[-2] == 1:
        kw["atten_mask"] = torch.cat([mask, mask], dim=-2)
    if isinstance(pse, torch.Tensor) and pse.dim() == 4 and pse.shape[2] == 1:
        kw["pse_shift"] = torch.cat([pse, pse], dim=2)
    out_layout = layout.partition("_")[2] or layout
    return query, kw, 2 if out_layout == "BNSD" else 1


def native_call(query, key, value, kw):
    """The CPU kernel: this operator's rules, then FIA's native call; returns attention_out."""
    with fia.errors_as(NAME, FIA_NAMES):
        fkw = fia_kwargs(query, kw)
        layout = fkw["input_layout"]
        if fia.query_seq_len(query, layout) == 1:
            query, fkw, out_s = _one_token_as_prompt(query, fkw, layout)
            out = fia.native_call(query, key, value, fkw)[0]
            return out.narrow(out_s, 0, 1).contiguous()
        return fia.native_call(query, key, value, fkw)[0]


def npu_prompt_flash_attention(query, key, value, *, padding_mask=None, atten_mask=None,
                               pse_shift=None, actual_seq_lengths=None, deq_scale1=None,
                               quant_scale1=None, deq_scale2=None, quant_scale2=None,
                               quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147483647, next_tokens=0, input_layout="BSH",
                               num_key_value_heads=0, actual_seq_lengths_kv=None, sparse_mode=0):
    """torch_npu.npu_prompt_flash_attention on CPU tensors; returns attention_out (the query's
    shape with value's D; BNSD_BSND: BSND; int8 with quant_scale2, float16 for an int8 query
    without it). Goes through torch.ops.openfia like npu_fused_infer_attention_score (eager
    calls on plain CPU tensors skip the dispatcher)."""
    return fia.dispatch(NAME, query, key, value, locals(), native_call,
                        ("actual_seq_lengths", "actual_seq_lengths_kv"))


DEFAULTS = N.keyword_defaults(npu_prompt_flash_attention)
