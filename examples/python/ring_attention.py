"""Ring attention with openfia: a causal prefill whose sequence is split across processes
(torch.distributed over gloo here; on a cluster, one process per machine), checked against one
process computing the whole sequence, and timed both ways.

    pip install .            # from the openfia repository
    python examples/python/ring_attention.py [--world 2] [--seq 4096] [--threads 1]

Each rank holds its chunk of the queries, keys and values; openfia.ring_attention passes the
key / value chunks around the ring and merges the partial results through softmax_lse
(docs/ring_attention.md). With --zigzag off, the contiguous split leaves the last rank with most
of the causal work; zigzag (rank r holds chunks r and 2W - 1 - r) balances it.
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
    for zigzag in (False, True):
        err = max((res[r][zigzag][0].float() - local(whole, r, a.world, zigzag).float())
                  .abs().max().item() for r in range(a.world))
        t = max(res[r][zigzag][1] for r in range(a.world))
        print(f"  ring, {'zigzag' if zigzag else 'contiguous'} split: {t * 1e3:8.1f} ms "
              f"({t / t_whole:.2f}x one process), max |ring - one process| = {err:.3g}")


if __name__ == "__main__":
    main()
