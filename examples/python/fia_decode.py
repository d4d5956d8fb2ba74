"""One decode step of a Llama-style model with openfia: each sequence's new query token attends
its KV cache, which lives in pages of a shared pool (a paged KV cache, as vLLM-style servers keep
it). Grouped-query attention: 32 query heads share 8 KV heads, head size 128, bfloat16.

    python examples/python/fia_decode.py

The call is torch_npu's npu_fused_infer_attention_score, argument for argument: Ascend code
may call openfia.patch_torch_npu() once and run unchanged. The result is checked against the
same attention composed in plain PyTorch (float64) and the script exits 1 if they disagree.
"""
import math

import torch

import openfia
from reference import attention, check

N, KV_N, D = 32, 8, 128            # query heads, KV heads, head size
BLOCK = 128                        # tokens per page
seq_lens = [1000, 37]              # tokens already in each sequence's cache
dtype = torch.bfloat16
scale = 1.0 / math.sqrt(D)
g = torch.Generator().manual_seed(0)

# ---- the paged cache: a pool of pages [blocks, BLOCK, KV_N * D]; block_table[b] lists the
# pages of sequence b in order (any free pages of the pool, -1 past its end) ----
pages_per_seq = [math.ceil(n / BLOCK) for n in seq_lens]
pool_blocks = sum(pages_per_seq) + 3                       # a few spare pages
order = torch.randperm(pool_blocks, generator=g)           # pages handed out in any order
block_table = torch.full((len(seq_lens), max(pages_per_seq)), -1, dtype=torch.int32)
key_cache = torch.zeros(pool_blocks, BLOCK, KV_N * D, dtype=dtype)
value_cache = torch.zeros_like(key_cache)
keys, values = [], []                                      # each sequence's K, V [len, KV_N*D]
used = 0
for b, n in enumerate(seq_lens):
    k = torch.randn(n, KV_N * D, generator=g).to(dtype)
    v = torch.randn(n, KV_N * D, generator=g).to(dtype)
    keys.append(k)
    values.append(v)
    for i in range(pages_per_seq[b]):
        page = int(order[used])
        used += 1
        block_table[b, i] = page
        rows = slice(i * BLOCK, min(n, (i + 1) * BLOCK))
        key_cache[page, :rows.stop - rows.start] = k[rows]
        value_cache[page, :rows.stop - rows.start] = v[rows]

# ---- the decode step: one query token per sequence, BSH layout [B, 1, N * D] ----
query = torch.randn(len(seq_lens), 1, N * D, generator=g).to(dtype)
out, _ = openfia.npu_fused_infer_attention_score(
    query, key_cache, value_cache, num_heads=N, num_key_value_heads=KV_N, input_layout="BSH",
    scale=scale, block_table=block_table, block_size=BLOCK, actual_seq_lengths_kv=seq_lens)
print("decode step:", tuple(out.shape), out.dtype)         # (2, 1, 4096) torch.bfloat16

# ---- the same attention in plain PyTorch: per sequence, the query heads of each KV head's
# group attend that head's keys (GQA), in float64 ----
G = N // KV_N
for b, n in enumerate(seq_lens):
    q = query[b, 0].view(KV_N, G, D)                       # [KV heads, group, D]
    k = keys[b].view(n, KV_N, D).transpose(0, 1)           # [KV heads, n, D]
    v = values[b].view(n, KV_N, D).transpose(0, 1)
    ref = attention(q, k, v, scale)
    check(f"sequence {b} ({n} cached tokens)", out[b, 0].view(KV_N, G, D), ref, dtype, d_qk=D,
          n_keys=n)
