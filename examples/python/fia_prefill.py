"""The prefill of a Llama-style model with openfia: every prompt token attends itself and the
tokens before it (causal attention). Two prompts of different lengths share one padded batch;
grouped-query attention (32 query heads share 8 KV heads), head size 128, bfloat16.

    python examples/python/fia_prefill.py

The call is torch_npu's npu_fused_infer_attention_score: sparse_mode=3 with the 2048 x 2048
mask is its causal mode (the mask's upper triangle, aligned to the bottom right of each
prompt's scores). The result is checked against the same attention composed in plain PyTorch
(float64) and the script exits 1 if they disagree.
"""
import math

import torch

import openfia
from reference import attention, check

N, KV_N, D = 32, 8, 128
prompt_lens = [300, 120]          # the batch is padded to the longest prompt
S = max(prompt_lens)
dtype = torch.bfloat16
scale = 1.0 / math.sqrt(D)
g = torch.Generator().manual_seed(0)

# BSND layout: [batch, tokens, heads, head size]; the padding rows are never read.
q = torch.randn(len(prompt_lens), S, N, D, generator=g).to(dtype)
k = torch.randn(len(prompt_lens), S, KV_N, D, generator=g).to(dtype)
v = torch.randn(len(prompt_lens), S, KV_N, D, generator=g).to(dtype)
causal = torch.ones(2048, 2048, dtype=torch.bool).triu(1)  # True = masked
out, lse = openfia.npu_fused_infer_attention_score(
    q, k, v, num_heads=N, num_key_value_heads=KV_N, input_layout="BSND", scale=scale,
    atten_mask=causal, sparse_mode=3, actual_seq_lengths=prompt_lens,
    actual_seq_lengths_kv=prompt_lens, softmax_lse_flag=True)
print("prefill:", tuple(out.shape), out.dtype, "softmax_lse", tuple(lse.shape))

# ---- the same attention in plain PyTorch, float64: per prompt and KV head, the group's query
# heads attend the head's keys under a causal mask (-inf above the diagonal) ----
G = N // KV_N
for b, n in enumerate(prompt_lens):
    qb = q[b, :n].view(n, KV_N, G, D).permute(1, 2, 0, 3).reshape(KV_N, G * n, D)
    kb = k[b, :n].transpose(0, 1)                          # [KV heads, n, D]
    vb = v[b, :n].transpose(0, 1)
    above = torch.ones(n, n, dtype=torch.bool).triu(1)
    bias = torch.zeros(n, n, dtype=torch.float64).masked_fill(above, -math.inf).repeat(1, G, 1)
    ref = attention(qb, kb, vb, scale, bias=bias.view(1, G * n, n))
    got = out[b, :n].view(n, KV_N, G, D).permute(1, 2, 0, 3).reshape(KV_N, G * n, D)
    check(f"prompt {b} ({n} tokens)", got, ref, dtype, d_qk=D, n_keys=n)
