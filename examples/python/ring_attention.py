"""Ring attention with openfia: a causal prefill whose sequence is split across processes
(torch.distributed over gloo here; on a cluster, one process per machine), timed against one
process computing the whole sequence, and checked against the same attention composed in plain
PyTorch (float64) on a sample of query positions; the script exits 1 if they disagree.

    python examples/python/ring_attention.py [--world 2] [--seq 4096] [--threads 1]

Each rank holds its chunk of the queries, keys and values; openfia.ring_attention passes the
key / value chunks around the ring and merges the partial results through softmax_lse. The
contiguous split leaves the last rank with most of the causal work; the zigzag split (rank r
holds chunks r and 2W - 1 - r) balances it.
"""
import argparse
import datetime
import math
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import openfia
from reference import attention, check

N, KV_N, D = 32, 8, 128  # Llama-3-8B heads


def inputs(seq):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, seq, h, D, generator=g).bfloat16() for h in (N, KV_N, KV_N)]


def local(x, rank, world, zigzag):
    """This rank's part of x (BSND, sequence axis 1)."""
    if not zigzag:
        c = x.shape[1] // world
        return x[:, rank * c:(rank + 1) * c].contiguous()
    c = x.shape[1] // (2 * world)
    j = 2 * world - 1 - rank
    return torch.cat([x[:, rank * c:(rank + 1) * c], x[:, j * c:(j + 1) * c]], 1).contiguous()


def assemble(parts, world, zigzag):
    """The ranks' outputs (local() of the whole, rank by rank) back in sequence order."""
    if not zigzag:
        return torch.cat(parts, 1)
    c = parts[0].shape[1] // 2
    chunks = [None] * (2 * world)
    for r, x in enumerate(parts):
        chunks[r], chunks[2 * world - 1 - r] = x[:, :c], x[:, c:]
    return torch.cat(chunks, 1)


def check_rows(what, out, q, k, v, rows):
    """out [1, S, N, D] against causal float64 attention for the query positions `rows`."""
    g = N // KV_N
    pos = torch.tensor(rows)

    def fold(x):  # [1, S, N, D] -> the sampled rows, each KV head's query heads as rows
        return x[0, pos].view(len(rows), KV_N, g, D).permute(1, 2, 0, 3).reshape(
            KV_N, g * len(rows), D)

    after = torch.arange(k.shape[1]).view(1, -1) > pos.view(-1, 1)         # key after the query
    bias = torch.zeros(after.shape, dtype=torch.float64).masked_fill(after, -math.inf)
    ref = attention(fold(q), k[0].transpose(0, 1), v[0].transpose(0, 1), 1 / math.sqrt(D),
                    bias=bias.repeat(g, 1).unsqueeze(0))
    check(what, fold(out), ref, torch.bfloat16, d_qk=D, n_keys=k.shape[1])


def worker(rank, world, seq, threads, rdv, out_dir):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    openfia.set_num_threads(threads)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"file://{rdv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    q, k, v = inputs(seq)
    res = {}
    for zigzag in (False, True):
        args = [local(x, rank, world, zigzag) for x in (q, k, v)]
        kw = dict(num_heads=N, num_key_value_heads=KV_N, scale=1 / math.sqrt(D),
                  input_layout="BSND", causal=True, zigzag=zigzag)
        openfia.ring_attention(*args, **kw)  # warm-up
        dist.barrier()
        t0 = time.perf_counter()
        out, _ = openfia.ring_attention(*args, **kw)
        dist.barrier()
        res[zigzag] = (out, time.perf_counter() - t0)
    torch.save(res, f"{out_dir}/rank{rank}.pt")
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1, help="openfia threads per rank")
    a = ap.parse_args()
    assert a.seq % (2 * a.world) == 0
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a.world, a.seq, a.threads, f"{tmp}/rdv", tmp), nprocs=a.world)
        res = [torch.load(f"{tmp}/rank{r}.pt") for r in range(a.world)]
    q, k, v = inputs(a.seq)
    openfia.set_num_threads(a.world * a.threads)
    kw = dict(num_heads=N, num_key_value_heads=KV_N, scale=1 / math.sqrt(D), input_layout="BSND",
              sparse_mode=3, atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1))
    openfia.npu_fused_infer_attention_score(q, k, v, **kw)  # warm-up
    t0 = time.perf_counter()
    whole, _ = openfia.npu_fused_infer_attention_score(q, k, v, **kw)
    t_whole = time.perf_counter() - t0
    print(f"causal prefill, S = {a.seq}, 32 / 8 heads, D = 128, bf16; "
          f"{a.world} ranks x {a.threads} thread(s)")
    print(f"  one process, {a.world * a.threads} threads: {t_whole * 1e3:8.1f} ms")
    rows = sorted({int(x) for x in torch.linspace(0, a.seq - 1, 48)})
    check_rows("one process", whole, q, k, v, rows)
    for zigzag in (False, True):
        split = "zigzag" if zigzag else "contiguous"
        ring = assemble([res[r][zigzag][0] for r in range(a.world)], a.world, zigzag)
        t = max(res[r][zigzag][1] for r in range(a.world))
        print(f"  ring, {split} split: {t * 1e3:8.1f} ms ({t / t_whole:.2f}x one process), "
              f"max |ring - one process| = {(ring.float() - whole.float()).abs().max():.3g}")
        check_rows(f"ring, {split} split", ring, q, k, v, rows)


if __name__ == "__main__":
    main()
