"""DeepSeek-V4 attention with openfia: npu_sparse_attn_sharedkv and its planner
npu_sparse_attn_sharedkv_metadata. Each query token attends, in one softmax with a per-head
"sink" logit: a sliding window of the last 128 original tokens (itself included), and the
compressed cache entries (one per 4 tokens) that an indexer selected among those it may see.
Keys and values are the same vectors (shared KV, one KV head); both caches are paged. Here two
sequences in one TND batch: one with 2 new tokens (MTP decode), one with 1.

    python examples/python/sparse_attn_sharedkv.py

The calls are the CANN custom ops' (torch.ops.custom.* in DeepSeek-V4 code; openfia registers
them there after openfia.patch_torch_npu()). The result is checked against the same attention
composed in plain PyTorch (float64) and the script exits 1 if they disagree.
"""

import torch

import openfia
from reference import attention, check

N1, D = 64, 512                   # query heads, head size (one shared KV head)
WINDOW = 128                      # ori_win_left 127 + the token itself
RATIO = 4                         # tokens per compressed entry
TOPK = 32                         # compressed entries the indexer selects per query token
ORI_BLOCK, CMP_BLOCK = 128, 64    # tokens / entries per page of each cache
kv_lens = [600, 90]               # original tokens per sequence, the new ones included
q_lens = [2, 1]                   # new (query) tokens per sequence
dtype = torch.bfloat16
scale = D ** -0.5
g = torch.Generator().manual_seed(0)


def paged(seqs, block):
    """Pages per-sequence [len, D] tensors into a shuffled pool [blocks, block, 1, D]."""
    counts = [max(1, -(-len(s) // block)) for s in seqs]
    order = torch.randperm(sum(counts), generator=g).tolist()
    pool = torch.zeros(sum(counts), block, 1, D, dtype=dtype)
    table = torch.full((len(seqs), max(counts)), -1, dtype=torch.int32)
    for b, s in enumerate(seqs):
        for i in range(counts[b]):
            page = order.pop()
            table[b, i] = page
            rows = s[i * block:(i + 1) * block]
            pool[page, :len(rows), 0] = rows
    return pool, table


ori = [(torch.rand(n, D, generator=g) * 2 - 1).to(dtype) for n in kv_lens]
cmp = [(torch.rand(n // RATIO, D, generator=g) * 2 - 1).to(dtype) for n in kv_lens]
ori_kv, ori_table = paged(ori, ORI_BLOCK)
cmp_kv, cmp_table = paged(cmp, CMP_BLOCK)

# TND query: the sequences' new tokens one after another, cu_seqlens_q their boundaries.
q = (torch.rand(sum(q_lens), N1, D, generator=g) * 2 - 1).to(dtype)
cu_seqlens_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
seqused_kv = torch.tensor(kv_lens, dtype=torch.int32)
sinks = torch.rand(N1, generator=g) * 4 - 2                    # float32, one per head

# The indexer's choice: query token at position p may select compressed entries below
# (p + 1) // RATIO; -1 ends a row.
positions = [n - s + i for n, s in zip(kv_lens, q_lens) for i in range(s)]
batch_of = [b for b, s in enumerate(q_lens) for _ in range(s)]
indices = torch.full((sum(q_lens), 1, TOPK), -1, dtype=torch.int32)
for row, p in enumerate(positions):
    pick = torch.randperm((p + 1) // RATIO, generator=g)[:TOPK]
    indices[row, 0, :len(pick)] = pick.to(torch.int32)

# The planner: which worker computes which part (made once per batch shape, reused by layers).
metadata = openfia.npu_sparse_attn_sharedkv_metadata(
    N1, 1, D, cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv, batch_size=len(kv_lens),
    max_seqlen_q=max(q_lens), max_seqlen_kv=max(kv_lens), cmp_topk=TOPK, cmp_ratio=RATIO,
    layout_q="TND")
out, lse = openfia.npu_sparse_attn_sharedkv(
    q, ori_kv=ori_kv, cmp_kv=cmp_kv, cmp_sparse_indices=indices, ori_block_table=ori_table,
    cmp_block_table=cmp_table, cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv, sinks=sinks,
    metadata=metadata, softmax_scale=scale, cmp_ratio=RATIO, layout_q="TND",
    return_softmax_lse=True)
print("attention:", tuple(out.shape), out.dtype, "softmax_lse", tuple(lse.shape))

# ---- the same attention in plain PyTorch, float64: per query token, its window of original
# tokens, then its selected compressed entries, and the sink ----
for row, (p, b) in enumerate(zip(positions, batch_of)):
    window = ori[b][max(p - WINDOW + 1, 0):p + 1]
    chosen = [j for j in indices[row, 0].tolist() if j >= 0]
    kv = torch.cat([window, cmp[b][chosen]])
    ref = attention(q[row].unsqueeze(1), kv.unsqueeze(0), kv.unsqueeze(0), scale, sink=sinks)
    check(f"sequence {b}, position {p} ({len(window)} window + {len(chosen)} compressed keys)",
          out[row].unsqueeze(1), ref, dtype, d_qk=D, n_keys=len(kv))
