"""openfia.integrations.transformers: the attention function transformers calls (its masks and
causality mapped onto npu_fused_infer_attention_score, checked against the float64 oracle given
the same attention with an explicit mask), its registration, and what it refuses. Whole models
(Llama, Qwen2: greedy tokens and logits against transformers' SDPA) run in
examples/python/transformers_generate.py, which test_examples.py runs."""
import types

import pytest
import torch

pytest.importorskip("transformers")

import openfia  # noqa: E402
import openfia.integrations.transformers as oft  # noqa: E402
import torch_ref  # noqa: E402
from common import assert_within  # noqa: E402

B, N, KV_N, D = 2, 8, 2, 32
CAUSAL = types.SimpleNamespace(is_causal=True)


def _qkv(s_q, s_kv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N, s_q, D, generator=g).to(torch.bfloat16)
    k = torch.randn(B, KV_N, s_kv, D, generator=g).to(torch.bfloat16)
    v = torch.randn(B, KV_N, s_kv, D, generator=g).to(torch.bfloat16)
    return q, k, v


def _expect(q, k, v, attend):
    """The oracle for the attention with an explicit mask: attend [B, 1, S_q, S_kv] True where
    a query row may attend a key (transformers' convention); the output [B, S_q, N, D]."""
    ref, _, bound, _, _ = torch_ref.reference(
        q, k, v, atten_mask=(~attend).expand(B, 1, -1, -1).contiguous(), num_heads=N,
        num_key_value_heads=KV_N, input_layout="BNSD", scale=0.125)
    return ref.transpose(1, 2), bound.transpose(1, 2)


def _padding_mask(s_q, s_kv):
    """Causal (aligned bottom-right, as a cache's decode) with the first keys of batch 1 padded."""
    causal = torch.ones(s_q, s_kv, dtype=torch.bool).tril(s_kv - s_q)
    keep = torch.ones(B, s_kv, dtype=torch.bool)
    keep[1, :3] = False
    return causal & keep.view(B, 1, 1, s_kv)


@pytest.mark.parametrize("s_q, s_kv, mask, attend", [
    # no mask: causality alone (prefill), or a decode row that sees every key
    (7, 7, None, lambda s_q, s_kv: torch.ones(s_q, s_kv, dtype=torch.bool).tril()),
    (1, 9, None, lambda s_q, s_kv: torch.ones(s_q, s_kv, dtype=torch.bool)),
    # more keys than queries without a mask: transformers' SDPA path is causal from the top left
    (3, 10, None, lambda s_q, s_kv: torch.ones(s_q, s_kv, dtype=torch.bool).tril()),
    # transformers' boolean masks (padding), and the same as an additive float mask
    (4, 6, "bool", _padding_mask),
    (1, 6, "bool", _padding_mask),
    (4, 6, "float", _padding_mask),
], ids=["prefill", "decode", "top-left", "padding", "padding-decode", "float-mask"])
def test_attention_matches_the_oracle(s_q, s_kv, mask, attend):
    q, k, v = _qkv(s_q, s_kv)
    allowed = attend(s_q, s_kv).expand(B, 1, s_q, s_kv)
    given = None
    if mask == "bool":
        given = allowed
    elif mask == "float":
        given = torch.zeros(allowed.shape, dtype=torch.bfloat16).masked_fill(
            ~allowed, torch.finfo(torch.bfloat16).min)
    # transformers hands over its query transposed (not contiguous): the function takes it
    out, weights = oft.attention_forward(CAUSAL, q.transpose(1, 2).contiguous().transpose(1, 2),
                                         k, v, given, scaling=0.125)
    assert weights is None and out.shape == (B, s_q, N, D) and out.dtype == torch.bfloat16
    ref, bound = _expect(q, k, v, allowed)
    assert_within(out, ref, bound, f"S_q {s_q}, S_kv {s_kv}, mask {mask}")


def test_registered_with_transformers():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    assert AttentionInterface._global_mapping[oft.NAME] is oft.attention_forward
    assert AttentionMaskInterface._global_mapping[oft.NAME] is sdpa_mask


@pytest.mark.parametrize("kwargs, argument", [
    (dict(dropout=0.1), "dropout"),
    (dict(softcap=30.0), "softcap"),
    (dict(position_bias=torch.zeros(1)), "position_bias"),
    (dict(output_attentions=True), "output_attentions"),
    (dict(attention_mask=torch.full((B, 1, 2, 5), 0.5)), "attention_mask"),
    (dict(attention_mask=torch.ones(B, 1, 2, 5, dtype=torch.int64)), "attention_mask"),
])
def test_refuses_what_it_cannot_run_naming_the_argument(kwargs, argument):
    q, k, v = _qkv(2, 5)
    mask = kwargs.pop("attention_mask", None)
    with pytest.raises(openfia.OpenfiaError) as e:
        oft.attention_forward(CAUSAL, q, k, v, mask, **kwargs)
    assert e.value.argument == argument
