"""openfia as an attention implementation of Hugging Face transformers.

    import openfia.integrations.transformers      # registers the implementation "openfia"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="openfia")
    # or, for a model already made: model.set_attn_implementation("openfia")

Every attention call of the model then runs npu_fused_infer_attention_score: the prefill and each
cached decode step (the keys and values transformers' cache hands over), grouped-query heads as
they are (no repeated keys), BNSD, the model's scaling. The masks are transformers' own for SDPA
(the model builds them as for attn_implementation="sdpa"): none where causality alone decides,
which becomes the operator's causal band (sparse_mode 2 or 3 with its 2048 x 2048 mask), or a
boolean mask (padding, sliding windows), passed as atten_mask (the operator masks where it is
nonzero, transformers where it is False). A query row that no key may attend (a left-padded
position) is 0, the operator's rule for a row without keys.

What it does not take is an OpenfiaError naming the argument: dropout > 0 (training), a
`softcap`, a `position_bias`, a float mask other than 0 / -inf, and `output_attentions` (no
weights are made). Needs transformers 5 and torch.
"""
from __future__ import annotations

import math

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .._native import error
from ..fia import npu_fused_infer_attention_score

NAME = "openfia"
OP = "openfia attention (transformers)"

__all__ = ["NAME", "attention_forward", "register"]

_band_mask = None  # the 2048 x 2048 mask sparse_mode 2 / 3 take (its content is not read)


def _causal_band():
    global _band_mask
    if _band_mask is None:
        _band_mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    return _band_mask


def _masked_positions(mask):
    """transformers' 4-D mask (True / 0 = attend) as the operator's (True = masked)."""
    if mask.dtype == torch.bool:
        return ~mask
    if not mask.is_floating_point():
        raise error(OP, "attention_mask", "must be boolean or an additive float mask",
                    mask.dtype)
    masked = mask <= torch.finfo(mask.dtype).min / 2
    if not torch.all(masked | (mask == 0)):
        raise error(OP, "attention_mask", "an additive float mask must hold only 0 and -inf "
                    "(or the dtype's lowest value): a bias is not a mask",
                    "other values")
    return masked


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers' attention function signature: query [B, N, S_q, D], key / value
    [B, KV_N, S_kv, D], attention_mask None or [B|1, 1, S_q, S_kv]; returns ([B, S_q, N, D_v],
    None)."""
    if dropout:
        raise error(OP, "dropout", "must be 0 (openfia runs inference only)", dropout)
    for name in ("softcap", "position_bias"):
        if kwargs.get(name) is not None:
            raise error(OP, name, "is not supported (use attn_implementation='eager')",
                        type(kwargs[name]).__name__)
    if kwargs.get("output_attentions"):
        raise error(OP, "output_attentions", "must be False: openfia makes no attention weights",
                    True)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise error(OP, "query", "query, key and value must be 4-D [B, heads, S, D]",
                    f"{query.dim()}, {key.dim()} and {value.dim()} dimensions")
    B, N, S_q, D = query.shape
    KV_N, S_kv = key.shape[1], key.shape[2]
    kw = dict(num_heads=N, num_key_value_heads=KV_N, input_layout="BNSD",
              scale=1 / math.sqrt(D) if scaling is None else float(scaling))
    if attention_mask is not None:
        masked = _masked_positions(attention_mask)
        kw["atten_mask"] = masked.expand(masked.shape[0], 1, S_q, S_kv).contiguous()
    elif S_q > 1 and (getattr(module, "is_causal", True) if is_causal is None else is_causal):
        # Causal without a mask: transformers' SDPA path aligns it top-left (query row i sees
        # keys 0..i), the operator's sparse_mode 2; with as many keys as queries, 3 is the same.
        kw.update(sparse_mode=2 if S_kv != S_q else 3, atten_mask=_causal_band())
    out, _ = npu_fused_infer_attention_score(query.contiguous(), key.contiguous(),
                                             value.contiguous(), **kw)
    return out.transpose(1, 2).contiguous(), None


def register():
    """Registers attention_forward as the attention implementation "openfia", with transformers'
    SDPA masks (done on import; calling it again changes nothing)."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


register()
