"""npu_sparse_attn_sharedkv(_metadata) against an independent PyTorch float64 computation.

The oracle gathers each query row's keys from the logical (unpaged) sequences, the window of
original tokens then the compressed entries (docs/semantics.md 3.3), and runs
torch.nn.functional.scaled_dot_product_attention in float64 with one extra all-zero key whose
additive bias is the head's sink: its score is exactly the sink and its value row is 0, so the
sink enters the denominator only. Tolerances derive from the output dtype's epsilon.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import openfia

from openfia.sas import (npu_sparse_attn_sharedkv, npu_sparse_attn_sharedkv_metadata,
                         verify_sparse_attn_sharedkv_metadata)

EPS = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -10}


# Every test runs on the fp64 reference and on the engine (conftest.py both_impls).
pytestmark = pytest.mark.usefixtures("both_impls")


def paged(seqs, block_size, d, dtype, gen):
    """Pages the per-batch [len, d] sequences into shuffled blocks; unused storage is NaN."""
    counts = [max(1, math.ceil(len(s) / block_size)) if len(s) else 0 for s in seqs]
    total = sum(counts) + 1
    perm = torch.randperm(total, generator=gen)
    cache = torch.full((total, block_size, 1, d), float("nan"), dtype=dtype)
    width = max(counts + [1]) + 1
    table = torch.full((len(seqs), width), -1, dtype=torch.int32)
    nxt = 0
    for b, s in enumerate(seqs):
        for k in range(counts[b]):
            blk = int(perm[nxt])
            nxt += 1
            table[b, k] = blk
            rows = s[k * block_size:(k + 1) * block_size]
            cache[blk, :len(rows), 0] = rows.to(dtype)
    return cache, table


class Case:
    def __init__(self, *, tnd, q_len, kv_len, ratio=0, k2=0, n1=8, d=64, dtype=torch.bfloat16,
                 bs1=16, bs2=8, sinks=True, scale=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.tnd, self.q_len, self.kv_len, self.ratio, self.k2 = tnd, q_len, kv_len, ratio, k2
        self.n1, self.d, self.dtype, self.scale = n1, d, dtype, scale
        B, T = len(q_len), sum(q_len)
        rnd = lambda *s: (torch.rand(*s, generator=g) * 2 - 1).to(dtype)  # noqa: E731
        self.ori = [rnd(s, d) for s in kv_len]
        self.cmp = [rnd(s // ratio if ratio else 0, d) for s in kv_len]
        self.q = rnd(T, n1, d) if tnd else rnd(B, q_len[0], n1, d)
        self.sinks = (torch.rand(n1, generator=g) * 4 - 2) if sinks else None
        self.cu = torch.tensor([0] + list(torch.tensor(q_len).cumsum(0)), dtype=torch.int32)
        self.seqused = torch.tensor(kv_len, dtype=torch.int32)
        self.ori_kv, self.ori_bt = paged(self.ori, bs1, d, dtype, g)
        self.cmp_kv = self.cmp_bt = None
        if ratio:
            self.cmp_kv, self.cmp_bt = paged(self.cmp, bs2, d, dtype, g)
        self.idx = None
        if ratio and k2:
            # Per row: random entries below the causal threshold, some at/above it (skipped),
            # then -1 and garbage after it.
            self.idx = torch.full((T, 1, k2), 1 << 30, dtype=torch.int32)
            r = 0
            for b in range(B):
                for i in range(q_len[b]):
                    p = kv_len[b] - q_len[b] + i
                    thr = (p + 1) // ratio if p >= 0 else 0
                    n = min(k2, thr)
                    if n:
                        stop = int(torch.randint(0, n + 1, (1,), generator=g))
                        hi = max(len(self.cmp[b]), 1)
                        vals = torch.randint(0, hi, (n,), generator=g, dtype=torch.int32)
                        self.idx[r, 0, :n] = vals
                        if stop < n:
                            self.idx[r, 0, stop] = -1
                    r += 1
            if not tnd:
                self.idx = self.idx.reshape(B, q_len[0], 1, k2)

    def kwargs(self, **extra):
        kw = dict(ori_kv=self.ori_kv, cmp_kv=self.cmp_kv, cmp_sparse_indices=self.idx,
                  ori_block_table=self.ori_bt, cmp_block_table=self.cmp_bt,
                  cu_seqlens_q=self.cu if self.tnd else None, seqused_kv=self.seqused,
                  sinks=self.sinks, softmax_scale=self.scale,
                  cmp_ratio=self.ratio or None, layout_q="TND" if self.tnd else "BSND",
                  return_softmax_lse=True)
        kw.update(extra)
        return kw

    def metadata(self, workers=None):
        return npu_sparse_attn_sharedkv_metadata(
            self.n1, 1, self.d, cu_seqlens_q=self.cu if self.tnd else None,
            seqused_kv=self.seqused, batch_size=len(self.q_len), max_seqlen_q=max(self.q_len),
            max_seqlen_kv=max(self.kv_len), cmp_topk=self.k2, cmp_ratio=self.ratio or -1,
            layout_q="TND" if self.tnd else "BSND", has_cmp_kv=bool(self.ratio),
            num_workers=workers)

    def keys(self, b, i):
        p = self.kv_len[b] - self.q_len[b] + i
        if p < 0:
            return None
        ks = [self.ori[b][max(p - 127, 0):p + 1].double()]
        if self.ratio:
            thr = (p + 1) // self.ratio
            if not self.k2:
                ks.append(self.cmp[b][:thr].double())
            else:
                row = sum(self.q_len[:b]) + i
                entries = self.idx.reshape(-1, self.k2)[row, :min(self.k2, thr)].tolist()
                sel = []
                for j in entries:
                    if j == -1:
                        break
                    if j < thr:
                        sel.append(j)
                ks.append(self.cmp[b][sel].double())
        return torch.cat(ks)

    def oracle(self):
        """(out, lse, sab) in float64, rows ordered as the output's [rows, n1, d]; sab[row, h]
        = scale * max over the row's keys of sum |q| |k|, what an fp32 score's rounding error
        (at most d * 2^-24 times it) scales with."""
        outs, lses, sabs = [], [], []
        q = self.q.reshape(-1, self.n1, self.d).double()
        scale = self.scale if self.scale is not None else 1 / math.sqrt(self.d)
        row = 0
        for b in range(len(self.q_len)):
            for i in range(self.q_len[b]):
                k = self.keys(b, i)
                if k is None:
                    outs.append(torch.zeros(self.n1, self.d, dtype=torch.float64))
                    lses.append(torch.full((self.n1,), math.inf, dtype=torch.float64))
                    sabs.append(torch.zeros(self.n1, dtype=torch.float64))
                    row += 1
                    continue
                qh = q[row].unsqueeze(1)  # [n1, 1, d]
                sink = self.sinks.double() if self.sinks is not None else None
                kk = k.unsqueeze(0).expand(self.n1, -1, -1)
                bias = torch.zeros(self.n1, 1, k.shape[0], dtype=torch.float64)
                if sink is not None:
                    kk = torch.cat([kk, torch.zeros(self.n1, 1, self.d, dtype=torch.float64)], 1)
                    bias = torch.cat([bias, sink.view(self.n1, 1, 1)], 2)
                o = F.scaled_dot_product_attention(qh, kk, kk, attn_mask=bias, scale=scale)
                scores = (qh @ kk.transpose(1, 2)) * scale + bias
                outs.append(o[:, 0])
                lses.append(torch.logsumexp(scores[:, 0], -1))
                sab = (qh.abs() @ k.abs().T.unsqueeze(0)) * scale  # [n1, 1, keys]
                sabs.append(sab[:, 0].amax(-1) if k.shape[0] else torch.zeros(self.n1,
                                                                              dtype=torch.float64))
                row += 1
        return torch.stack(outs), torch.stack(lses), torch.stack(sabs)

    def check(self, out, lse):
        want, want_lse, sab = self.oracle()
        got = out.reshape(-1, self.n1, self.d).double()
        eps = EPS[self.dtype]
        # fp32 scores: a dot product of length d errs by at most d * 2^-24 * sab; that moves
        # the lse by as much and the output (a convex combination of rows |v| <= 1) by twice it.
        ds = self.d * 2.0 ** -24 * sab  # [rows, n1]
        # P rounded to the dtype before P.V and the output rounding: each <= eps/2 relative to
        # max|v| <= 1; float32 also accumulates in its own precision over <= 640 keys.
        atol = (2 * eps if self.dtype != torch.float32 else 64 * eps) + 2 * ds[..., None]
        err = (got - want).abs()
        bound = atol + eps * want.abs()
        assert not torch.isnan(got).any(), "NaN in the output"
        assert (err <= bound).all(), (
            f"{int((err > bound).sum())} of {err.numel()} output elements outside their bound; "
            f"worst excess {float((err - bound).max()):.3g}")
        got_lse = lse.reshape(-1, self.n1).double()
        inf = torch.isinf(want_lse)
        assert torch.equal(torch.isinf(got_lse), inf)
        lerr = (got_lse - want_lse).abs()[~inf]
        lbound = (2 ** -20 + ds + 2 ** -22 * want_lse.abs())[~inf]
        assert (lerr <= lbound).all(), (
            f"{int((lerr > lbound).sum())} lse values outside their bound; worst excess "
            f"{float((lerr - lbound).max()):.3g}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_sparse_compressed_tnd(dtype):
    c = Case(tnd=True, q_len=[4, 0, 6], kv_len=[300, 5, 40], ratio=4, k2=12, dtype=dtype)
    out, lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs(metadata=c.metadata(3)))
    assert out.dtype == dtype and out.shape == c.q.shape
    assert lse.shape == (1, sum(c.q_len), c.n1)
    c.check(out, lse)


@pytest.mark.parametrize("ratio", [4, 128])
def test_compressed_all_entries_bsnd(ratio):
    c = Case(tnd=False, q_len=[3, 3], kv_len=[400, 2], ratio=ratio, scale=0.05, seed=1)
    out, lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs())
    assert lse.shape == (2, 1, 3, c.n1)
    c.check(out, lse)
    # Batch 1 has S2 = 2 < S1 = 3: row 0 precedes the sequence.
    assert torch.all(out[1, 0] == 0) and torch.all(torch.isinf(lse[1, 0, 0]))


def test_sliding_window_only_prefill_without_sinks():
    c = Case(tnd=True, q_len=[150], kv_len=[150], sinks=False, n1=4, d=32, seed=2)
    out, lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs())
    c.check(out, lse)


def test_deepseek_v4_head_geometry():
    # N1 = 64, D = 512 as in the model; a short decode batch with SCFA.
    c = Case(tnd=True, q_len=[2, 1], kv_len=[260, 33], ratio=4, k2=16, n1=64, d=512, seed=3)
    out, lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs(metadata=c.metadata()))
    c.check(out, lse)


def test_bitwise_identical_with_any_metadata():
    c = Case(tnd=True, q_len=[7, 3, 9], kv_len=[200, 3, 140], ratio=4, k2=8, seed=4)
    threads = openfia.get_num_threads()
    try:
        openfia.set_num_threads(1)
        base = npu_sparse_attn_sharedkv(c.q, **c.kwargs())
        for workers, nthreads in ((1, 3), (2, 2), (7, 1), (36, 4)):
            openfia.set_num_threads(nthreads)
            got = npu_sparse_attn_sharedkv(c.q, **c.kwargs(metadata=c.metadata(workers)))
            assert torch.equal(got[0].view(torch.int16), base[0].view(torch.int16))
            assert torch.equal(got[1].view(torch.int32), base[1].view(torch.int32))
    finally:
        openfia.set_num_threads(threads)
    no_lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs(return_softmax_lse=False))
    assert torch.equal(no_lse[0].view(torch.int16), base[0].view(torch.int16))
    assert no_lse[1].shape == (1,) and no_lse[1].item() == 0


def test_stale_metadata_is_rejected():
    c = Case(tnd=True, q_len=[4, 5], kv_len=[100, 50], ratio=4, k2=8, seed=5)
    other = Case(tnd=True, q_len=[4, 5], kv_len=[100, 51], ratio=4, k2=8, seed=5)
    with pytest.raises(ValueError, match="argument 'metadata'.*another configuration"):
        npu_sparse_attn_sharedkv(c.q, **c.kwargs(metadata=other.metadata()))
    verify_sparse_attn_sharedkv_metadata(
        c.metadata(5), c.n1, 1, c.d, cu_seqlens_q=c.cu, seqused_kv=c.seqused, cmp_topk=8,
        cmp_ratio=4, layout_q="TND")
    with pytest.raises(ValueError, match="argument 'metadata'"):
        verify_sparse_attn_sharedkv_metadata(
            c.metadata(5), c.n1, 1, c.d, cu_seqlens_q=c.cu, seqused_kv=c.seqused, cmp_topk=0,
            cmp_ratio=4, layout_q="TND")


def test_bad_indices_are_errors_not_reads():
    c = Case(tnd=True, q_len=[2], kv_len=[64], ratio=4, k2=4, seed=6)
    bt = c.ori_bt.clone()
    bt[0, 1] = 10_000
    with pytest.raises(ValueError, match="argument 'ori_block_table'"):
        npu_sparse_attn_sharedkv(c.q, **c.kwargs(ori_block_table=bt))
    idx = c.idx.clone()
    idx[1, 0, 0] = 16  # S3 = 16: one past the compressed sequence
    with pytest.raises(ValueError, match="argument 'cmp_sparse_indices'"):
        npu_sparse_attn_sharedkv(c.q, **c.kwargs(cmp_sparse_indices=idx))
    with pytest.raises(ValueError, match="argument 'seqused_q'"):
        npu_sparse_attn_sharedkv(c.q, **c.kwargs(seqused_q=c.seqused))


def test_strided_query_and_cache_views():
    c = Case(tnd=True, q_len=[5], kv_len=[90], ratio=4, k2=6, seed=7)
    want = npu_sparse_attn_sharedkv(c.q, **c.kwargs())
    q_wide = torch.zeros(c.q.shape[0], c.n1, 2 * c.d, dtype=c.dtype)
    q_wide[..., ::2] = c.q
    kv_wide = torch.zeros(*c.ori_kv.shape[:3], 2 * c.d, dtype=c.dtype)
    kv_wide[..., 1::2] = c.ori_kv
    got = npu_sparse_attn_sharedkv(q_wide[..., ::2], **c.kwargs(ori_kv=kv_wide[..., 1::2]))
    assert torch.equal(got[0].view(torch.int16), want[0].view(torch.int16))


def _random_case(rng, seed):
    """Random geometry: layout, batch and lengths (queries that precede their sequence, empty
    batches), the three scenarios with either ratio, head count and size, dtype, page sizes,
    sinks, scale and a metadata plan for a random worker count (or none)."""
    tnd = rng.random() < 0.6
    B = rng.randint(1, 3)
    if tnd:
        q_len = [rng.choice([0, 1, 1, 2, rng.randint(3, 12)]) for _ in range(B)]
        q_len[0] = max(q_len[0], 1 - sum(q_len[1:]))  # T >= 1 (the metadata op's rule)
    else:
        q_len = [rng.choice([1, 1, 2, rng.randint(3, 9)])] * B
    kv_len = [rng.choice([0, rng.randint(1, 40), rng.randint(41, 700)]) for _ in range(B)]
    scenario = rng.choice(["window", "all", "sparse"])
    ratio = 0 if scenario == "window" else rng.choice([4, 128])
    k2 = rng.choice([1, 4, 16, 64, 300]) if scenario == "sparse" else 0
    n1 = rng.choice([1, 2, 8, 16, 64])
    d = rng.choice([16, 32, 64, 128, 512]) if n1 <= 16 else rng.choice([64, 512])
    return Case(tnd=tnd, q_len=q_len, kv_len=kv_len, ratio=ratio, k2=k2, n1=n1, d=d,
                dtype=rng.choice([torch.bfloat16, torch.float16, torch.float32]),
                bs1=rng.choice([1, 16, 64, 128]), bs2=rng.choice([1, 8, 128]),
                sinks=rng.random() < 0.7, scale=rng.choice([None, 0.05, 0.3]), seed=seed)


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("OPENFIA_RANDOM_CASES",
                                                                        "16"))))
def test_random_calls(seed):
    """Random calls against the float64 oracle (OPENFIA_RANDOM_SEED picks another draw)."""
    import os
    import random

    base = int(os.environ.get("OPENFIA_RANDOM_SEED", "1"))
    rng = random.Random(base * 1_000_003 + seed)
    c = _random_case(rng, seed)
    workers = rng.choice([None, 1, 2, 3, 36])
    md = c.metadata(workers) if workers is not None or rng.random() < 0.5 else None
    out, lse = npu_sparse_attn_sharedkv(c.q, **c.kwargs(metadata=md))
    assert out.dtype == c.dtype and out.shape == c.q.shape
    c.check(out, lse)
