"""openfia in two steps of a Llama-style model (GQA: 32 query heads share 8 KV heads, D = 128):
a causal prefill over the prompt, then one decode step reading a paged KV cache.

    pip install .            # from the openfia repository
    python examples/python/example.py

The calls are exactly torch_npu's (torch_npu.npu_fused_infer_attention_score); on Ascend code
you may instead call openfia.patch_torch_npu() once and leave the code unchanged.
"""
import math

import torch

import openfia

N, KV_N, D = 32, 8, 128
prompt_len, block_size = 200, 128
scale = 1.0 / math.sqrt(D)
torch.manual_seed(0)

# ---- prefill: BSH layout, right-down causal mask (sparse_mode 3 takes the 2048x2048 mask) ----
q = torch.randn(1, prompt_len, N * D, dtype=torch.bfloat16)
k = torch.randn(1, prompt_len, KV_N * D, dtype=torch.bfloat16)
v = torch.randn(1, prompt_len, KV_N * D, dtype=torch.bfloat16)
causal = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
out, lse = openfia.npu_fused_infer_attention_score(
    q, k, v, num_heads=N, num_key_value_heads=KV_N, input_layout="BSH", scale=scale,
    atten_mask=causal, sparse_mode=3, softmax_lse_flag=True)
print("prefill:", tuple(out.shape), out.dtype, "lse", tuple(lse.shape))

# Cross-check with PyTorch (float32 SDPA; openfia rounds P to bf16 like the NPU does).
to_bnsd = lambda x, n: x.view(1, prompt_len, n, D).transpose(1, 2).float()
ref = torch.nn.functional.scaled_dot_product_attention(
    to_bnsd(q, N), to_bnsd(k, KV_N), to_bnsd(v, KV_N), is_causal=True, scale=scale,
    enable_gqa=True)
print("max |openfia - sdpa|:", (out.float() - ref.transpose(1, 2).reshape(1, prompt_len, -1))
      .abs().max().item())

# ---- decode: the prompt's K/V (plus the new token's) in a paged cache [blocks, block_size, H] ----
seq_len = prompt_len + 1
k_new = torch.randn(1, 1, KV_N * D, dtype=torch.bfloat16)
v_new = torch.randn(1, 1, KV_N * D, dtype=torch.bfloat16)
n_blocks = math.ceil(seq_len / block_size)
block_table = torch.tensor([[3, 1]], dtype=torch.int32)  # any free blocks of the pool
key_cache = torch.zeros(4, block_size, KV_N * D, dtype=torch.bfloat16)
value_cache = torch.zeros_like(key_cache)
full_k, full_v = torch.cat([k, k_new], 1)[0], torch.cat([v, v_new], 1)[0]
for i in range(n_blocks):
    rows = slice(i * block_size, min(seq_len, (i + 1) * block_size))
    n = rows.stop - rows.start
    key_cache[block_table[0, i], :n] = full_k[rows]
    value_cache[block_table[0, i], :n] = full_v[rows]

q_step = torch.randn(1, 1, N * D, dtype=torch.bfloat16)
out_step, _ = openfia.npu_fused_infer_attention_score(
    q_step, key_cache, value_cache, num_heads=N, num_key_value_heads=KV_N, input_layout="BSH",
    scale=scale, block_table=block_table, block_size=block_size,
    actual_seq_lengths_kv=[seq_len])
print("decode:", tuple(out_step.shape), out_step.dtype)
print("openfia", openfia.version(), "impl", openfia.get_impl(), "simd", openfia.simd_target())
