"""A small Llama-style model generating text with openfia: prefill, then greedy decoding, its KV
cache kept in pages of a shared pool (block table), as vLLM-style servers keep it. Every
attention call is torch_npu's npu_fused_infer_attention_score: the prefill with a BSH query and a
causal band (sparse_mode 3), each decode step with a BSND query over the paged cache
(block_table, actual_seq_lengths_kv).

    python examples/python/paged_decode_loop.py                  # bfloat16 KV cache, pages of 16
    python examples/python/paged_decode_loop.py --kv int8        # int8 cache, per-token scales
    python examples/python/paged_decode_loop.py --block-size 128
    python -m openfia run examples/python/paged_decode_loop.py --torch-npu   # as Ascend code
    python examples/python/paged_decode_loop.py --bench          # tokens/s beside PyTorch SDPA

The model: 2 layers, 8 query heads sharing 2 KV heads (GQA), head size 64, RoPE, RMSNorm,
SwiGLU, vocabulary 256, random weights from a seeded generator, bfloat16 throughout. Three
prompts of different lengths decode together (one batch); each sequence's pages are handed out
from a shuffled free list as it grows. With `--kv int8` the cache holds int8 keys and values
with one float32 scale per token and page row (key/value_antiquant_mode 4); the prefill attends
its own bfloat16 keys and values, the decode steps the int8 cache.

With `--torch-npu` the model is written as Ascend code: `import torch_npu`, tensors made on
device "npu", torch_npu.npu_fused_infer_attention_score. `python -m openfia run` provides that
torch_npu on the CPU.

What is checked (exit status 1 when it fails). A float32 PyTorch model with the same weights
runs every generated sequence in one causal forward pass (no cache, plain matmul / softmax
attention, no quantization). For each logit of every generated position:

  |logit - reference| <= 6 sigma,  sigma = u / sqrt(3) * sqrt(R) * |W_v| * rms(h)

(reference.logit_bound), the first-order rounding model of the bfloat16 model: R = 16 per layer + 2 roundings to
bfloat16 on the path to a logit (listed at ROUNDINGS_PER_LAYER), each uniform within half a
unit in the last place (u = 2^-8) of its value and passed on with unit gain; W_v is the
vocabulary entry's output row, h the final normalized hidden state. An int8 cache adds per layer
two roundings (K, V) whose step is the token's absmax / 127, i.e. (absmax / rms)^2 bfloat16
roundings each. And each generated token must be the reference's argmax wherever the
reference's top-2 margin exceeds the sum of the two logits' bounds (where it does not, either
token is a correct greedy choice within the model's rounding). The reference reads the tokens
this model generated, so one close call does not end the comparison.

--bench times the decode steps (the prefill excluded) of this loop and of the same loop with
PyTorch attention: each step gathers the sequences' pages through the block table (dequantized
for int8) and calls torch.nn.functional.scaled_dot_product_attention with a length mask.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

from reference import check_generation, logit_bound

LAYERS, HIDDEN, N, KV_N, D, FFN, VOCAB = 2, 512, 8, 2, 64, 1024, 256
THETA, EPS = 10000.0, 1e-5
DTYPE = torch.bfloat16
# Roundings to bfloat16 on the path to a logit, per layer: attention norm, q, k, v, rope q,
# rope k, the probabilities and output inside attention, o projection, residual add, MLP norm,
# gate, up, silu(gate) * up, down projection, residual add (16); after the layers: the final
# norm and the logits (2).
ROUNDINGS_PER_LAYER, ROUNDINGS_FINAL = 16, 2


def make_weights(seed=0):
    """Random weights (seeded), rounded to bfloat16: a linear map's entries have variance
    1/fan_in, the embedding's 1, the norms' gains 1 + 0.1 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)

    def linear(out_f, in_f):
        return (torch.randn(out_f, in_f, generator=g) / math.sqrt(in_f)).to(DTYPE)

    def gain():
        return (1 + 0.1 * torch.randn(HIDDEN, generator=g)).to(DTYPE)

    w = {"embed": torch.randn(VOCAB, HIDDEN, generator=g).to(DTYPE), "layers": []}
    for _ in range(LAYERS):
        w["layers"].append({
            "attn_norm": gain(), "wq": linear(N * D, HIDDEN), "wk": linear(KV_N * D, HIDDEN),
            "wv": linear(KV_N * D, HIDDEN), "wo": linear(HIDDEN, N * D), "mlp_norm": gain(),
            "gate": linear(FFN, HIDDEN), "up": linear(FFN, HIDDEN), "down": linear(HIDDEN, FFN)})
    w["norm"] = gain()
    w["lm_head"] = linear(VOCAB, HIDDEN)
    return w


def rms_norm(x, gain):
    """RMSNorm computed in float32, returned in x's dtype."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS) * gain.float()).to(x.dtype)


def rope(x, pos):
    """Rotary position embedding (the halves rotated, as Llama's), in float32. x [..., S, heads,
    D], pos [..., S] integer positions; returns x's dtype."""
    inv = THETA ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = pos.to(torch.float32).unsqueeze(-1) * inv                    # [..., S, D/2]
    cos, sin = ang.cos().unsqueeze(-2), ang.sin().unsqueeze(-2)        # [..., S, 1, D/2]
    x1, x2 = x.float().chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def mlp(x, lw):
    h = rms_norm(x, lw["mlp_norm"])
    return x + F.linear((F.silu(F.linear(h, lw["gate"]).float())
                         * F.linear(h, lw["up"]).float()).to(x.dtype), lw["down"])


# ---- the reference: float32, each sequence in one causal pass, plain attention ----------------

def reference_logits(w, tokens):
    """float32 logits [L, VOCAB] and final normalized hidden states [L, HIDDEN] of one token
    sequence (a list of ints), the model's weights in float32."""
    f = lambda t: t.float()  # noqa: E731
    pos = torch.arange(len(tokens))
    x = f(w["embed"])[torch.tensor(tokens)]
    causal = torch.ones(len(tokens), len(tokens), dtype=torch.bool).tril()
    for lw in w["layers"]:
        h = rms_norm(x, lw["attn_norm"])
        q = rope((h @ f(lw["wq"]).T).view(-1, N, D), pos).transpose(0, 1)      # [N, L, D]
        k = rope((h @ f(lw["wk"]).T).view(-1, KV_N, D), pos).transpose(0, 1)   # [KV_N, L, D]
        v = (h @ f(lw["wv"]).T).view(-1, KV_N, D).transpose(0, 1)
        k, v = k.repeat_interleave(N // KV_N, 0), v.repeat_interleave(N // KV_N, 0)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        p = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
        x = x + (p @ v).transpose(0, 1).reshape(-1, N * D) @ f(lw["wo"]).T
        h = rms_norm(x, lw["mlp_norm"])
        x = x + (F.silu(h @ f(lw["gate"]).T) * (h @ f(lw["up"]).T)) @ f(lw["down"]).T
    h = rms_norm(x, w["norm"])
    return h @ f(w["lm_head"]).T, h


# ---- the paged KV cache ---------------------------------------------------------------------

class PagedKVCache:
    """Per layer a key pool and a value pool [blocks, block_size, KV_N * D] (the 3-D cache form
    of npu_fused_infer_attention_score), shared by the batch's sequences; block_table[b] lists
    sequence b's pages in order (-1 past its end). Pages come from a shuffled free list as a
    sequence grows. kv="int8": int8 pools plus float32 per-token scales [blocks, block_size]
    (one scale per token and page row, the operator's key/value_antiquant_mode 4)."""

    def __init__(self, batch, max_len, block_size, kv, device, generator):
        self.block_size, self.kv = block_size, kv
        pages_per_seq = -(-max_len // block_size)
        blocks = batch * pages_per_seq + 2                        # a few pages to spare
        self.free = torch.randperm(blocks, generator=generator).tolist()
        self.block_table = torch.full((batch, pages_per_seq), -1, dtype=torch.int32,
                                      device=device)
        self.lens = [0] * batch
        store = torch.int8 if kv == "int8" else DTYPE
        shape = (blocks, block_size, KV_N * D)
        self.k = [torch.zeros(shape, dtype=store, device=device) for _ in range(LAYERS)]
        self.v = [torch.zeros(shape, dtype=store, device=device) for _ in range(LAYERS)]
        if kv == "int8":
            self.k_scale = [torch.ones(blocks, block_size, device=device) for _ in range(LAYERS)]
            self.v_scale = [torch.ones(blocks, block_size, device=device) for _ in range(LAYERS)]

    def grow(self, b, new_len):
        """Gives sequence b the pages for new_len tokens; returns the (page, row) of its tokens
        self.lens[b] .. new_len - 1 and advances its length."""
        pos = torch.arange(self.lens[b], new_len)
        for i in range(-(-self.lens[b] // self.block_size), -(-new_len // self.block_size)):
            self.block_table[b, i] = self.free.pop()
        self.lens[b] = new_len
        return self.block_table[b, pos // self.block_size].long(), pos % self.block_size

    def write(self, layer, page, row, k, v):
        """Stores tokens' keys and values [T, KV_N * D] (bfloat16) at (page, row) [T]."""
        if self.kv == "int8":
            for pool, scales, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
                pool[layer][page, row], scales[layer][page, row] = quantize_per_token(x)
        else:
            self.k[layer][page, row] = k
            self.v[layer][page, row] = v


def quantize_per_token(x):
    """Symmetric int8 with one float32 scale per row: codes round(x / s), s = absmax / 127."""
    x = x.float()
    s = (x.abs().amax(-1) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(x / s.unsqueeze(-1)).clamp(-127, 127).to(torch.int8), s


# ---- the bfloat16 model with the paged cache ------------------------------------------------

CAUSAL_2048 = None


class PagedModel:
    """The bfloat16 model over a PagedKVCache. attention="fia" calls
    npu_fused_infer_attention_score (`fia`, openfia's or torch_npu's); "sdpa" gathers the pages
    through the block table and calls PyTorch's scaled_dot_product_attention."""

    def __init__(self, w, cache, attention="fia", fia=None, device="cpu"):
        self.w, self.cache, self.attention, self.fia, self.device = w, cache, attention, fia, device

    def _project(self, lw, x, pos):
        h = rms_norm(x, lw["attn_norm"])
        q = rope(F.linear(h, lw["wq"]).unflatten(-1, (N, D)), pos)
        k = rope(F.linear(h, lw["wk"]).unflatten(-1, (KV_N, D)), pos)
        v = F.linear(h, lw["wv"])
        return q, k.flatten(-2), v

    def prefill(self, prompts):
        """Runs the prompts (lists of ints, any lengths) as one padded batch; returns the logits
        [B, VOCAB] of each prompt's last token."""
        global CAUSAL_2048
        c = self.cache
        lens = [len(p) for p in prompts]
        S = max(lens)
        tokens = torch.zeros(len(prompts), S, dtype=torch.long, device=self.device)
        for b, p in enumerate(prompts):
            tokens[b, :len(p)] = torch.tensor(p)
        pos = torch.arange(S, device=self.device).expand(len(prompts), S)
        slots = [c.grow(b, n) for b, n in enumerate(lens)]
        x = self.w["embed"][tokens]
        for layer, lw in enumerate(self.w["layers"]):
            q, k, v = self._project(lw, x, pos)
            for b, (page, row) in enumerate(slots):
                c.write(layer, page, row, k[b, :lens[b]], v[b, :lens[b]])
            if self.attention == "fia":
                if CAUSAL_2048 is None:  # sparse_mode 3 takes this mask; its content is not read
                    CAUSAL_2048 = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
                common = dict(num_heads=N, num_key_value_heads=KV_N, input_layout="BSH",
                              scale=1 / math.sqrt(D), sparse_mode=3, atten_mask=CAUSAL_2048,
                              actual_seq_lengths=lens, actual_seq_lengths_kv=lens)
                if c.kv == "int8":  # the prompt attends its own bfloat16 keys and values
                    o, _ = self.fia(q.flatten(-2), k, v, **common)
                else:               # the prompt attends the paged cache it has just filled
                    o, _ = self.fia(q.flatten(-2), c.k[layer], c.v[layer],
                                    block_table=c.block_table, block_size=c.block_size, **common)
            else:
                valid = torch.arange(S) < torch.tensor(lens).unsqueeze(-1)       # [B, S]
                mask = torch.ones(S, S, dtype=torch.bool).tril() & valid.view(-1, 1, 1, S)
                o = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k.unflatten(-1, (KV_N, D)).transpose(1, 2),
                    v.unflatten(-1, (KV_N, D)).transpose(1, 2), attn_mask=mask,
                    scale=1 / math.sqrt(D), enable_gqa=True).transpose(1, 2).flatten(-2)
            x = mlp(x + F.linear(o, lw["wo"]), lw)
        last = x[torch.arange(len(prompts)), torch.tensor(lens) - 1]
        return F.linear(rms_norm(last, self.w["norm"]), self.w["lm_head"])

    def decode(self, tokens):
        """One decode step: tokens [B] (each sequence's newest token); returns logits [B, VOCAB]."""
        c = self.cache
        B = len(tokens)
        pos = torch.tensor(c.lens, device=self.device).view(B, 1)           # [B, 1]
        slots = [c.grow(b, c.lens[b] + 1) for b in range(B)]
        page = torch.cat([s[0] for s in slots])
        row = torch.cat([s[1] for s in slots])
        x = self.w["embed"][tokens].view(B, 1, HIDDEN)
        for layer, lw in enumerate(self.w["layers"]):
            q, k, v = self._project(lw, x, pos)
            c.write(layer, page, row, k[:, 0], v[:, 0])
            if self.attention == "fia":
                kw = dict(num_heads=N, num_key_value_heads=KV_N, input_layout="BSND",
                          scale=1 / math.sqrt(D), block_table=c.block_table,
                          block_size=c.block_size, actual_seq_lengths_kv=c.lens)
                if c.kv == "int8":
                    kw.update(key_antiquant_scale=c.k_scale[layer],
                              value_antiquant_scale=c.v_scale[layer], key_antiquant_mode=4,
                              value_antiquant_mode=4)
                o, _ = self.fia(q, c.k[layer], c.v[layer], **kw)                 # [B, 1, N, D]
            else:
                o = sdpa_paged(q, c, layer)
            x = mlp(x + F.linear(o.flatten(-2), lw["wo"]), lw)
        return F.linear(rms_norm(x[:, 0], self.w["norm"]), self.w["lm_head"])


def sdpa_paged(q, c, layer):
    """PyTorch's side of a decode step: gather each sequence's pages through the block table
    (dequantized for an int8 cache), mask the rows past its length, one SDPA call."""
    B = q.shape[0]
    pages = c.block_table.clamp_min(0).long()                            # [B, P]
    L = pages.shape[1] * c.block_size

    def gather(pool, scales):
        x = pool[layer][pages].view(B, L, KV_N * D)
        if scales is not None:
            x = (x.float() * scales[layer][pages].view(B, L, 1)).to(DTYPE)
        return x.unflatten(-1, (KV_N, D)).transpose(1, 2)                   # [B, KV_N, L, D]

    int8 = c.kv == "int8"
    k = gather(c.k, c.k_scale if int8 else None)
    v = gather(c.v, c.v_scale if int8 else None)
    mask = (torch.arange(L) < torch.tensor(c.lens).unsqueeze(-1)).view(B, 1, 1, L)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask,
                                       scale=1 / math.sqrt(D), enable_gqa=True)
    return o.transpose(1, 2)                                                # [B, 1, N, D]


def generate(model, prompts, steps):
    """Greedy decoding: prefill, then `steps` - 1 decode steps. Returns the generated tokens
    [B, steps], the logits each was chosen from [B, steps, VOCAB] (float32) and the decode
    steps' seconds."""
    logits = [model.prefill(prompts).float()]
    tokens = [logits[-1].argmax(-1)]
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        logits.append(model.decode(tokens[-1]).float())
        tokens.append(logits[-1].argmax(-1))
    return torch.stack(tokens, 1), torch.stack(logits, 1), time.perf_counter() - t0


def check(w, prompts, tokens, logits, kv, cache):
    """The bound and token checks of the module's doc; returns whether both hold."""
    rounds = ROUNDINGS_PER_LAYER * LAYERS + ROUNDINGS_FINAL
    if kv == "int8":  # each K and V rounding counts (absmax / rms)^2 bfloat16 roundings
        ratio = 0.0
        for pools, scales in ((cache.k, cache.k_scale), (cache.v, cache.v_scale)):
            for pool, s in zip(pools, scales):
                x = pool.float() * s.unsqueeze(-1)
                rms = x.pow(2).mean(-1).sqrt()
                used = rms > 0
                ratio = max(ratio, float((x.abs().amax(-1)[used] / rms[used]).max()))
        rounds += 2 * LAYERS * (ratio * 256 / 254) ** 2
    ok, decided, worst = True, 0, 0.0
    for b, prompt in enumerate(prompts):
        seq = prompt + tokens[b].tolist()
        ref, h = reference_logits(w, seq)
        at = slice(len(prompt) - 1, len(seq) - 1)       # the positions each token was chosen at
        bound = logit_bound(w["lm_head"], h[at], rounds, DTYPE)
        passed, steps = check_generation(f"sequence {b}", logits[b], ref[at], bound)
        ok &= passed
        decided += int(steps.sum())
        worst = max(worst, float(((logits[b] - ref[at]).abs() / bound).max()))
    if ok:
        print(f"logits match the float32 PyTorch reference model (largest error {worst:.2f} of "
              f"its bound); tokens identical at all {decided} of {tokens.numel()} steps whose "
              f"reference margin exceeds the two logits' bounds")
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kv", choices=("bf16", "int8"), default="bf16", help="KV cache format")
    p.add_argument("--block-size", type=int, default=16, help="tokens per page")
    p.add_argument("--steps", type=int, default=32, help="tokens to generate per sequence")
    p.add_argument("--prompt-lens", default="45,7,20", help="prompt lengths (the batch)")
    p.add_argument("--torch-npu", action="store_true",
                   help="Ascend-style: import torch_npu, device 'npu' (under python -m openfia run)")
    p.add_argument("--bench", action="store_true",
                   help="also time the decode steps beside PyTorch SDPA over the same cache")
    p.add_argument("--repeat", type=int, default=3, help="runs of each loop with --bench")
    p.add_argument("--threads", type=int, default=0,
                   help="threads for openfia and torch (0: as they are set)")
    args = p.parse_args(argv)

    if args.torch_npu:
        import torch_npu  # an Ascend machine, or openfia's stand-in under `python -m openfia run`

        fia, device = torch_npu.npu_fused_infer_attention_score, "npu"
    else:
        import openfia

        fia, device = openfia.npu_fused_infer_attention_score, "cpu"
    if args.threads:
        import openfia

        openfia.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(VOCAB, (int(n),), generator=g).tolist()
               for n in args.prompt_lens.split(",")]
    w = make_weights()
    if device != "cpu":
        w = {k: ([{n: t.to(device) for n, t in lw.items()} for lw in v] if k == "layers"
                 else v.to(device)) for k, v in w.items()}

    def run(attention):
        cache = PagedKVCache(len(prompts), max(map(len, prompts)) + args.steps, args.block_size,
                             args.kv, device, torch.Generator().manual_seed(2))
        model = PagedModel(w, cache, attention, fia, device)
        with torch.inference_mode():
            return (*generate(model, prompts, args.steps), cache)

    tokens, logits, seconds, cache = run("fia")
    print(f"generated {tuple(tokens.shape)} tokens ({args.kv} cache, pages of "
          f"{args.block_size}); sequence 0: {tokens[0, :12].tolist()} ...")
    ok = check(w, prompts, tokens, logits, args.kv, cache)
    if args.bench:
        # The loops alternate, and each one's fastest run counts (other load on the machine
        # only slows a run down).
        decoded = len(prompts) * (args.steps - 1)
        best_sdpa = math.inf
        for _ in range(args.repeat):
            s_tokens, _logits, s_seconds, _cache = run("sdpa")
            best_sdpa = min(best_sdpa, s_seconds)
            seconds = min(seconds, run("fia")[2])
        print(f"decode: openfia {decoded / seconds:.1f} tokens/s, PyTorch SDPA "
              f"{decoded / best_sdpa:.1f} tokens/s (batch {len(prompts)}, {args.steps - 1} "
              f"steps, {torch.get_num_threads()} threads, fastest of {args.repeat + 1} / "
              f"{args.repeat} runs); same tokens: {torch.equal(tokens, s_tokens)} (two bfloat16 "
              f"loops may part where logits tie)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
