"""Decode steps of two small DeepSeek-style attention layers with openfia, each layer writing its
own paged KV cache as it goes:

1. a V3.2-style MLA layer: every token's compressed KV (the 512-wide latent and the 64 rotary
   values) is written as a 656-byte int8 row through openfia.kvqsfa.quantize_kv_rows; each new
   token's indexer picks the top-k cached tokens it may see, and
   npu_kv_quant_sparse_flash_attention attends them with the absorbed query (q_nope times the
   latent's key up-projection, then q_rope); the latent output goes through the value
   up-projection and the output projection.
2. a V4-style layer: one shared key/value head; every token's vector goes to the original
   cache, every 4 tokens one gated compression of them to the compressed cache; each new token
   attends its window of the last 128 original tokens, the compressed entries its indexer
   picked and a learned per-head sink, through npu_sparse_attn_sharedkv with the plan of
   npu_sparse_attn_sharedkv_metadata (made once per step, as a model makes it once for all
   layers).

    python examples/python/deepseek_sparse_decode.py

Both layers run a batch of two sequences: a prompt is written to the cache, then DECODE_STEPS
steps each add one token per sequence. The layer's inputs are random hidden states (seeded);
its weights are random. Every step's attention output is checked against the same attention
composed in plain PyTorch in float64 (reference.py) from what the cache holds. MLA: the layer
composed per head without absorption (each head's keys latent x W_uk plus the shared rotary key,
its unrounded float32 q_nope and q_rope) from the rows decoded by hand from their documented byte
layout; openfia's latent output within its bound (reference.error_bound) plus 6 standard
deviations of the query's rounding to bfloat16; each written row must also decode to its latent
within half a quantization step. V4: the window and compressed entries read from the layer's own tensors (not
from the cache), the sink. The script exits 1 on any failure.
"""
import math
import sys

import torch

import openfia
from reference import attention, check, error_bound

DTYPE = torch.bfloat16
U = torch.finfo(DTYPE).eps / 2   # unit roundoff
HIDDEN = 256
DECODE_STEPS = 4
g = torch.Generator().manual_seed(0)


def weight(*shape, fan_in):
    return torch.randn(*shape, generator=g) / math.sqrt(fan_in)


def rope(x, pos, theta=10000.0):
    """Rotary embedding of x [T, ..., R] at positions pos [T] (halves rotated), float32."""
    r = x.shape[-1]
    ang = pos.float().view(-1, *([1] * (x.dim() - 1))) * theta ** (-torch.arange(0, r, 2) / r)
    x1, x2 = x.float().chunk(2, -1)
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()], -1)


class Pages:
    """A paged cache: a pool [blocks, block, 1, width] shared by the batch's sequences, and a
    block table whose row b lists sequence b's pages (-1 past its end), taken from a shuffled
    free list as the sequence grows."""

    def __init__(self, batch, max_len, block, width, dtype):
        per_seq = -(-max_len // block)
        self.block, self.lens = block, [0] * batch
        self.pool = torch.zeros(batch * per_seq + 1, block, 1, width, dtype=dtype)
        self.free = torch.randperm(self.pool.shape[0], generator=g).tolist()
        self.table = torch.full((batch, per_seq), -1, dtype=torch.int32)

    def append(self, b, rows):
        """Writes rows [n, width] after sequence b's last one."""
        start, end = self.lens[b], self.lens[b] + rows.shape[0]
        for i in range(-(-start // self.block), -(-end // self.block)):
            self.table[b, i] = self.free.pop()
        pos = torch.arange(start, end)
        self.pool[self.table[b, pos // self.block].long(), pos % self.block, 0] = rows
        self.lens[b] = end

    def row(self, b, t):
        return self.pool[int(self.table[b, t // self.block]), t % self.block, 0]


# ---- 1. the V3.2-style MLA layer --------------------------------------------------------------

def mla_layer_steps():
    N, NOPE, ROPE, LATENT, VD = 8, 64, 64, 512, 64   # heads, per-head dims, latent width
    TOPK, BLOCK = 64, 32
    prompts = [300, 130]
    scale = (NOPE + ROPE) ** -0.5                     # the unabsorbed head's q.k size
    w_dkv = weight(HIDDEN, LATENT, fan_in=HIDDEN)     # hidden -> latent
    w_kr = weight(HIDDEN, ROPE, fan_in=HIDDEN)        # hidden -> shared rotary key
    w_qn = weight(HIDDEN, N, NOPE, fan_in=HIDDEN)
    w_qr = weight(HIDDEN, N, ROPE, fan_in=HIDDEN)
    w_uk = weight(N, NOPE, LATENT, fan_in=LATENT)     # latent -> each head's key (absorbed)
    w_uv = weight(N, LATENT, VD, fan_in=LATENT)       # latent -> each head's value
    w_o = weight(N * VD, HIDDEN, fan_in=N * VD)
    w_iq = weight(HIDDEN, 32, fan_in=HIDDEN)          # the indexer's query and key
    w_ik = weight(HIDDEN, 32, fan_in=HIDDEN)
    cache = Pages(len(prompts), max(prompts) + DECODE_STEPS, BLOCK, 656, torch.int8)
    index_keys = [torch.empty(0, 32) for _ in prompts]

    def write(b, x, pos):
        """The layer's cache write for tokens x [n, HIDDEN] at positions pos [n]."""
        latent = x @ w_dkv
        k_rope = rope(x @ w_kr, pos).to(DTYPE)
        rows = openfia.kvqsfa.quantize_kv_rows(latent, k_rope, "int8")         # [n, 656]
        nope, stored_rope, _ = decode_rows(rows)
        step = latent.view(-1, 4, 128).abs().amax(-1, keepdim=True) / 127
        if ((nope.float().view(-1, 4, 128) - latent.view(-1, 4, 128)).abs()
                > step * (0.5 + 2 ** -8) + 2 ** -8 * latent.view(-1, 4, 128).abs()).any() \
                or not torch.equal(stored_rope, k_rope):
            sys.exit("MLA cache write: FAILED, a row does not decode to its latent within half "
                     "a quantization step")
        cache.append(b, rows)
        index_keys[b] = torch.cat([index_keys[b], x @ w_ik])

    for b, n in enumerate(prompts):                                            # the prompts
        write(b, torch.randn(n, HIDDEN, generator=g), torch.arange(n))
    for step in range(DECODE_STEPS):
        x = torch.randn(len(prompts), HIDDEN, generator=g)                     # one token each
        pos = torch.tensor(cache.lens)
        for b in range(len(prompts)):
            write(b, x[b:b + 1], pos[b:b + 1])
        # The query: q_nope absorbed into the latent space, then q_rope: [B, 1, N, 576].
        q_abs = torch.einsum("bhn,hnl->bhl", torch.einsum("bd,dhn->bhn", x, w_qn), w_uk)
        q_rope = rope(torch.einsum("bd,dhr->bhr", x, w_qr), pos)
        query = torch.cat([q_abs, q_rope], -1).to(DTYPE).unsqueeze(1)
        # The indexer: each token's top-k among the cached tokens it sees (itself included).
        indices = torch.full((len(prompts), 1, 1, TOPK), -1, dtype=torch.int32)
        for b in range(len(prompts)):
            top = (index_keys[b] @ (x[b] @ w_iq)).topk(min(TOPK, cache.lens[b])).indices
            indices[b, 0, 0, :len(top)] = top.to(torch.int32)
        out = openfia.npu_kv_quant_sparse_flash_attention(
            query, cache.pool, cache.pool, indices, scale, 2, 2, block_table=cache.table,
            actual_seq_lengths_kv=cache.lens, layout_kv="PA_BSND", sparse_mode=3,
            attention_mode=2)                                                  # [B, 1, N, 512]
        layer_out = torch.einsum("bhl,hlv->bhv", out[:, 0].float(), w_uv).flatten(1) @ w_o
        assert layer_out.shape == (len(prompts), HIDDEN)
        q_nope = torch.einsum("bd,dhn->bhn", x, w_qn)
        for b in range(len(prompts)):
            toks = [t for t in indices[b, 0, 0].tolist() if t >= 0]
            latent, k_rope, _ = decode_rows(torch.stack([cache.row(b, t) for t in toks]))
            # openfia's latent attention from its own inputs, and its bound ...
            keys = torch.cat([latent, k_rope], -1)
            lat = attention(query[b, 0].unsqueeze(1), keys[None], latent[None], scale)
            bound = error_bound(lat, DTYPE, d_qk=LATENT + ROPE, n_keys=len(toks))
            # ... plus the rounding of the query to bfloat16, which the composition below does
            # not make: each score moves by the sum of q_i k_i d_i, d_i uniform within +-u, so
            # 6 standard deviations s = scale u / sqrt(3) sqrt(sum q_i^2 k_i^2) (the worst key),
            # and the output by up to twice that times P|V|.
            q64 = query[b, 0].double()
            s = scale * U / 3 ** 0.5 * (q64.pow(2) @ keys.double().pow(2).T).sqrt().amax(-1)
            bound = bound + 2 * 2 * 6 * s.view(N, 1, 1) * lat.out_abs
            # The layer composed per head without absorption: each head's keys (latent x W_uk,
            # then the shared rotary key) from the cache, its float32 q_nope and q_rope; the
            # head's softmax weights over the latent rows are its latent output (its values are
            # that times W_uv).
            head_keys = torch.cat([torch.einsum("tl,hnl->htn", latent.double(), w_uk.double()),
                                   k_rope.double().expand(N, -1, -1)], -1)
            ref = attention(torch.cat([q_nope[b], q_rope[b]], -1).unsqueeze(1), head_keys,
                            latent[None], scale)
            check(f"MLA step {step}, sequence {b} ({len(toks)} of {cache.lens[b]} tokens)",
                  out[b, 0].unsqueeze(1), ref, DTYPE, d_qk=NOPE + ROPE, n_keys=len(toks),
                  bound=bound)


def decode_rows(rows):
    """A 656-byte row by its documented layout: bytes 0-511 the int8 codes, 512-639 the rotary
    values (bfloat16), 640-655 one float32 scale per 128-wide tile; the latent key is
    code * scale rounded to the query dtype. Returns (latent, rope, scales)."""
    b = rows.contiguous().view(torch.uint8)
    codes = b[..., :512].contiguous().view(torch.int8).float()
    scales = b[..., 640:656].contiguous().view(torch.float32)
    latent = (codes.unflatten(-1, (4, 128)) * scales.unsqueeze(-1)).flatten(-2).to(DTYPE)
    return latent, b[..., 512:640].contiguous().view(DTYPE), scales


# ---- 2. the V4-style layer ----------------------------------------------------------------------

def v4_layer_steps():
    N1, D = 16, 128                  # query heads, head size (one shared key/value head)
    WINDOW, RATIO = 128, 4           # the window (ori_win_left 127 + the token), tokens per entry
    TOPK, ORI_BLOCK, CMP_BLOCK = 16, 64, 16
    prompts = [250, 37]
    scale = D ** -0.5
    w_q = weight(HIDDEN, N1, D, fan_in=HIDDEN)
    w_kv = weight(HIDDEN, D, fan_in=HIDDEN)
    w_cmp = weight(HIDDEN, D, fan_in=HIDDEN)          # the compressor's value and gate
    w_gate = weight(HIDDEN, 1, fan_in=HIDDEN)
    w_iq = weight(HIDDEN, 32, fan_in=HIDDEN)          # the indexer's query and key
    w_ik = weight(HIDDEN, 32, fan_in=HIDDEN)
    sinks = torch.randn(N1, generator=g)              # float32, one learned logit per head
    max_len = max(prompts) + DECODE_STEPS
    ori = Pages(len(prompts), max_len, ORI_BLOCK, D, DTYPE)
    cmp = Pages(len(prompts), max_len // RATIO, CMP_BLOCK, D, DTYPE)
    hidden = [torch.empty(0, HIDDEN) for _ in prompts]                 # the compressor's input
    ori_rows = [torch.empty(0, D, dtype=DTYPE) for _ in prompts]       # what the caches hold,
    cmp_rows = [torch.empty(0, D, dtype=DTYPE) for _ in prompts]       # for the check
    index_keys = [torch.empty(0, 32) for _ in prompts]

    def write(b, x):
        """The layer's cache writes for new tokens x [n, HIDDEN]: each token's vector, and
        every completed group of RATIO tokens its gated compression."""
        kv = rope(x @ w_kv, torch.arange(ori.lens[b], ori.lens[b] + len(x))).to(DTYPE)
        ori.append(b, kv)
        ori_rows[b] = torch.cat([ori_rows[b], kv])
        hidden[b] = torch.cat([hidden[b], x])
        while (cmp.lens[b] + 1) * RATIO <= ori.lens[b]:
            group = hidden[b][cmp.lens[b] * RATIO:(cmp.lens[b] + 1) * RATIO]
            entry = (torch.softmax(group @ w_gate, 0) * (group @ w_cmp)).sum(0, True).to(DTYPE)
            index_keys[b] = torch.cat([index_keys[b], group.mean(0, True) @ w_ik])
            cmp.append(b, entry)
            cmp_rows[b] = torch.cat([cmp_rows[b], entry])

    for b, n in enumerate(prompts):
        write(b, torch.randn(n, HIDDEN, generator=g))
    for step in range(DECODE_STEPS):
        x = torch.randn(len(prompts), HIDDEN, generator=g)
        for b in range(len(prompts)):
            write(b, x[b:b + 1])
        pos = torch.tensor(ori.lens) - 1
        q = rope(torch.einsum("bd,dhk->bhk", x, w_q), pos).to(DTYPE)           # TND [B, N1, D]
        # The indexer: entries j < (p + 1) // RATIO are visible to the token at position p.
        indices = torch.full((len(prompts), 1, TOPK), -1, dtype=torch.int32)
        for b in range(len(prompts)):
            visible = (int(pos[b]) + 1) // RATIO
            top = (index_keys[b][:visible] @ (x[b] @ w_iq)).topk(min(TOPK, visible)).indices
            indices[b, 0, :len(top)] = top.to(torch.int32)
        cu_seqlens_q = torch.arange(len(prompts) + 1, dtype=torch.int32)       # one token each
        seqused_kv = torch.tensor(ori.lens, dtype=torch.int32)
        metadata = openfia.npu_sparse_attn_sharedkv_metadata(
            N1, 1, D, cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv,
            batch_size=len(prompts), max_seqlen_q=1, max_seqlen_kv=max(ori.lens),
            cmp_topk=TOPK, cmp_ratio=RATIO, layout_q="TND")
        out, _ = openfia.npu_sparse_attn_sharedkv(
            q, ori_kv=ori.pool, cmp_kv=cmp.pool, cmp_sparse_indices=indices,
            ori_block_table=ori.table, cmp_block_table=cmp.table, cu_seqlens_q=cu_seqlens_q,
            seqused_kv=seqused_kv, sinks=sinks, metadata=metadata, softmax_scale=scale,
            cmp_ratio=RATIO, layout_q="TND")                                   # [B, N1, D]
        for b in range(len(prompts)):
            p = int(pos[b])
            window = ori_rows[b][max(p - WINDOW + 1, 0):p + 1]
            chosen = [j for j in indices[b, 0].tolist() if j >= 0]
            kv = torch.cat([window, cmp_rows[b][chosen]])
            ref = attention(q[b].unsqueeze(1), kv.unsqueeze(0), kv.unsqueeze(0), scale,
                            sink=sinks)
            check(f"V4 step {step}, sequence {b} ({len(window)} window + {len(chosen)} "
                  f"compressed keys)", out[b].unsqueeze(1), ref, DTYPE, d_qk=D, n_keys=len(kv))


if __name__ == "__main__":
    mla_layer_steps()
    v4_layer_steps()
