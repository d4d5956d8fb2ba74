"""DeepSeek-V3.2 sparse attention with openfia: npu_kv_quant_sparse_flash_attention. Every
query token attends only the cached tokens its indexer selected (top-k), reading them from a
paged cache of 656-byte rows: the 512 latent ("nope") values quantized to int8 per 128-wide
tile, the 64 rope values as bfloat16, and the four float32 tile scales. All query heads share
the one latent KV head (multi-head latent attention): keys are the 576 = 512 + 64 values, values
the 512 dequantized latent ones.

    python examples/python/kv_quant_sparse_flash_attention.py

The call is torch_npu's, argument for argument (attention_mode=2 and quant modes 2 as the
operator requires). The result is checked against the same attention composed in plain PyTorch
(float64) and the script exits 1 if they disagree.
"""
import torch

import openfia
from openfia import quant
from reference import attention, check

N = 16                     # query heads (DeepSeek-V3.2 has 128; fewer keep the example quick)
TOPK = 64                  # tokens each query token attends
BLOCK = 64                 # tokens per page
kv_lens = [700, 300]       # tokens cached per sequence
S1 = 2                     # query tokens per sequence (e.g. multi-token prediction)
dtype = torch.bfloat16
scale = 576 ** -0.5
g = torch.Generator().manual_seed(0)

# ---- the paged cache of quantized rows [blocks, BLOCK, 1, 656] and its block table ----
pages = [-(-n // BLOCK) for n in kv_lens]
pool = quant.quantize_kv_rows(torch.randn(sum(pages), BLOCK, 1, 512, generator=g),
                              torch.randn(sum(pages), BLOCK, 1, 64, generator=g).to(dtype),
                              "int8")                       # int8 rows: [blocks, BLOCK, 1, 656]
order = torch.randperm(sum(pages), generator=g).to(torch.int32)
block_table = torch.full((len(kv_lens), max(pages)), -1, dtype=torch.int32)
start = 0
for b, n in enumerate(pages):
    block_table[b, :n] = order[start:start + n]
    start += n

# ---- the query and each query token's selected tokens (causal: token s1 of a sequence of
# length L sees cache positions < L - S1 + s1 + 1) ----
query = torch.randn(len(kv_lens), S1, N, 576, generator=g).to(dtype)
indices = torch.full((len(kv_lens), S1, 1, TOPK), -1, dtype=torch.int32)   # -1 ends a row
for b, n in enumerate(kv_lens):
    for s1 in range(S1):
        visible = n - S1 + s1 + 1
        pick = torch.randperm(visible, generator=g)[:TOPK]
        indices[b, s1, 0, :len(pick)] = pick.to(torch.int32)

out = openfia.npu_kv_quant_sparse_flash_attention(
    query, pool, pool, indices, scale, 2, 2, block_table=block_table,
    actual_seq_lengths_kv=kv_lens, layout_kv="PA_BSND", sparse_mode=3, attention_mode=2)
print("sparse attention:", tuple(out.shape), out.dtype)       # (2, 2, 16, 512) bfloat16

# ---- the same attention in plain PyTorch, float64: gather each token's selected rows through
# the block table, dequantize them as the operator does (int8 code x tile scale, rounded to the
# query dtype), attend ----
for b, n in enumerate(kv_lens):
    for s1 in range(S1):
        toks = [t for t in indices[b, s1, 0].tolist() if t >= 0]
        rows = torch.stack([pool[block_table[b, t // BLOCK], t % BLOCK, 0] for t in toks])
        k_nope, k_rope = quant.dequantize_kv_rows(rows, dtype)    # [k, 512], [k, 64]
        keys = torch.cat([k_nope, k_rope], -1)
        ref = attention(query[b, s1].unsqueeze(1), keys.unsqueeze(0), k_nope.unsqueeze(0), scale)
        check(f"sequence {b}, query token {s1} ({len(toks)} selected tokens)",
              out[b, s1].unsqueeze(1), ref, dtype, d_qk=576, n_keys=len(toks))
