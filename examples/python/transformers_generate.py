"""Hugging Face transformers models with openfia as their attention implementation: greedy
generation with transformers' own KV cache, the prefill and every decode step's attention through
npu_fused_infer_attention_score.

    pip install openfia[transformers]
    python examples/python/transformers_generate.py

    import openfia.integrations.transformers          # registers attn_implementation="openfia"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="openfia")

For the Llama and Qwen2 architectures (grouped-query attention: 8 query heads, 2 KV heads; small
configs, random weights, nothing downloaded), in bfloat16, two prompts generate 32 tokens each,
once with openfia and once with transformers' `sdpa` attention, from the same weights: prompts of
different lengths (left-padded: the masks transformers makes for padding) and of equal lengths
(no mask: causality alone).

What is checked (exit status 1 when it fails): the tokens are identical up to the first step
where the SDPA model's top-2 margin is within the rounding bound (bfloat16 logits of random models
tie now and then: from there the two greedy continuations may part, as transformers' own eager
attention parts from its SDPA; the script prints both models' distance from SDPA), and
up to that step every logit agrees within reference.logit_bound: 6 standard deviations of the
first-order rounding model, with the roundings to bfloat16 on the path to a logit counted for both
models (each model rounds on its own once the attention outputs differ in a bit).
"""
import sys

import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, Qwen2Config

import openfia.integrations.transformers  # noqa: F401  (registers "openfia")
from reference import check_generation, logit_bound

STEPS = 32
DTYPE = torch.bfloat16
LAYERS = 2
# Roundings to bfloat16 on the path to a logit in transformers' Llama / Qwen2 layers: RMSNorm
# (normalized, then times its weight) 2, q, k, v 3, rotary embedding of q and k (x cos, rotated
# x sin, their sum) 6, attention (probabilities, output) 2, o projection, residual add, RMSNorm 2,
# gate, up, activation, product, down projection, residual add (23 per layer); the final RMSNorm
# 2 and the logits 1. Both models count.
ROUNDINGS = 2 * (23 * LAYERS + 3)


def config(cls):
    return cls(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=LAYERS,
               num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
               tie_word_embeddings=False)


def generate(model, input_ids, attention_mask):
    """Greedy decoding through transformers' cache: the prefill, then STEPS - 1 cached decode
    steps. Returns the tokens [B, STEPS], the logits they were chosen from [B, STEPS, V] and the
    final normalized hidden states [B, STEPS, H] (float32)."""
    hidden = []
    hook = model.model.norm.register_forward_hook(lambda m, i, o: hidden.append(o[:, -1]))
    positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache(config=model.config)      # filled in place by every call
    tokens, logits = [], []
    ids = input_ids
    with torch.inference_mode():
        for _ in range(STEPS):
            # The cache is the fourth argument (named past_key_values or cache by the version).
            out = model(ids, attention_mask, positions, cache, use_cache=True)
            logits.append(out.logits[:, -1].float())
            tokens.append(logits[-1].argmax(-1))
            ids = tokens[-1].unsqueeze(-1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(ids)], -1)
            positions = positions[:, -1:] + 1
    hook.remove()
    return torch.stack(tokens, 1), torch.stack(logits, 1), torch.stack(hidden, 1).float()


def run(cls, seed, lens):
    """One architecture, one batch of prompts of lengths `lens`: SDPA, then openfia."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(cls), attn_implementation="sdpa",
                                             dtype=DTYPE).eval()
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(len(lens), max(lens), dtype=torch.long)
    attention_mask = torch.zeros(len(lens), max(lens), dtype=torch.long)
    for b, n in enumerate(lens):                                    # left padding
        input_ids[b, max(lens) - n:] = torch.randint(1, 256, (n,), generator=g)
        attention_mask[b, max(lens) - n:] = 1
    ref_tokens, ref_logits, hidden = generate(model, input_ids, attention_mask)
    model.set_attn_implementation("openfia")
    tokens, logits, _ = generate(model, input_ids, attention_mask)
    # For scale: how far transformers' own eager attention is from its SDPA (printed only).
    model.set_attn_implementation("eager")
    eager_tokens, eager_logits, _ = generate(model, input_ids, attention_mask)
    name = f"{cls.__name__.removesuffix('Config')}, prompts of {lens} tokens"
    ok, same = True, STEPS
    for b in range(len(lens)):
        differ = (tokens[b] != ref_tokens[b]).nonzero()
        upto = int(differ[0]) + 1 if len(differ) else STEPS     # comparable logits: same history
        bound = logit_bound(model.lm_head.weight, hidden[b, :upto], ROUNDINGS, DTYPE)
        passed, _ = check_generation(f"{name} sequence {b}", logits[b, :upto],
                                     ref_logits[b, :upto], bound)
        ok &= passed       # a token that differs must be at a step the bound leaves open
        same = min(same, upto - (1 if len(differ) else 0))
    if ok:
        first = (tokens == ref_tokens).all(0).logical_not().nonzero()
        first_eager = (eager_tokens == ref_tokens).all(0).logical_not().nonzero()
        upto = min(int(first[0]) + 1 if len(first) else STEPS,
                   int(first_eager[0]) + 1 if len(first_eager) else STEPS)
        print(f"{name}: greedy tokens identical to transformers' SDPA for {same} of {STEPS} "
              f"steps (up to the first step within the rounding bound), logits within their "
              f"bfloat16 bound; largest logit difference from SDPA over the first {upto} steps: "
              f"openfia {(logits - ref_logits)[:, :upto].abs().max():.4f}, transformers' eager "
              f"attention {(eager_logits - ref_logits)[:, :upto].abs().max():.4f}")
    return ok


if __name__ == "__main__":
    # Prompts of different lengths are left-padded: transformers passes boolean masks. Equal
    # lengths need no mask: causality alone (the operator's causal band in the prefill).
    results = [run(cls, seed, lens) for cls, seed in ((LlamaConfig, 0), (Qwen2Config, 1))
               for lens in ([20, 13], [16, 16])]
    sys.exit(0 if all(results) else 1)
