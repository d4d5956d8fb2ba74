"""merge_attention_states, ring_attention and sharded_kv_attention (docs/ring_attention.md):
attention over keys split across calls, or a sequence split across processes
(torch.distributed, gloo), against the float64 oracle of the whole problem (torch_ref) with
bounds derived from it."""
import datetime
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import openfia
from common import assert_within
import torch_ref

fia = openfia.npu_fused_infer_attention_score
MASK = torch.ones(2048, 2048, dtype=torch.bool).triu(1)


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _bnsd_to(x, layout):
    """[B, N, S, X] float64 -> the output layout (BSH merges N and X)."""
    if layout == "BNSD":
        return x
    y = x.permute(0, 2, 1, 3)
    return y.reshape(y.shape[0], y.shape[1], -1) if layout == "BSH" else y


def _qkv(case):
    """The whole problem of a case: q, k, v in its layout (full sequence)."""
    b, n, kvn, d, lay, dt = (case[k] for k in ("B", "N", "KVN", "D", "layout", "dtype"))
    sq, skv = sum(case["q_lens"]), sum(case["kv_lens"])
    out = []
    for i, (heads, s) in enumerate(((n, sq), (kvn, skv), (kvn, skv))):
        x = _rand((b, heads, s, d), dt, case["seed"] + i)
        if lay == "BSND":
            x = x.transpose(1, 2).contiguous()
        elif lay == "BSH":
            x = x.transpose(1, 2).reshape(b, s, heads * d).contiguous()
        out.append(x)
    return out


def _chunks(case, r, world):
    """The chunks of the sequence rank r holds: r, or r and 2W - 1 - r (zigzag)."""
    return [r, 2 * world - 1 - r] if case.get("zigzag") else [r]


def _take(x, ax, lens, idxs):
    """Chunks `idxs` of x along axis ax (chunk i has length lens[i]), concatenated."""
    return torch.cat([x.narrow(ax, sum(lens[:i]), lens[i]) for i in idxs], dim=ax).contiguous()


def _chunk(x, layout, lens, r, case=None, world=None):
    ax = 2 if layout == "BNSD" else 1
    return _take(x, ax, lens, _chunks(case, r, world) if case else [r])


def _expected(case):
    """(out, lse, out bound, lse bound) of the whole sequence from the oracle, with the ring's
    terms added: each rank's result merges partial results, each within the oracle's bound of
    its own (smaller) key set plus its own output rounding (<= u_out max|v|), weighted by
    exp(lse) whose error moves the weights by a factor <= 1 + 2 * lse bound."""
    q, k, v = _qkv(case)
    kw = dict(num_heads=case["N"], num_key_value_heads=case["KVN"], scale=case["scale"],
              input_layout=case["layout"], softmax_lse_flag=True)
    if case["causal"]:
        kw.update(sparse_mode=3, atten_mask=MASK)
    out, lse, bound, lbound, out_dtype = torch_ref.reference(q, k, v, **kw)
    vmax = v.double().abs().max()
    extra = (torch_ref.UNIT_ROUNDOFF[out_dtype] + 2 * lbound) * vmax  # [B, N, S, 1]
    extra = extra.expand(-1, -1, -1, case["D"])
    return out, lse, bound + _bnsd_to(extra, case["layout"]), lbound


# Cases of one world size: lengths per rank (they may differ), layouts, dtypes, GQA, causal.
CASES = {
    2: [
        dict(B=2, N=4, KVN=2, D=32, layout="BSND", dtype=torch.bfloat16, causal=True,
             q_lens=[37, 29], kv_lens=[37, 29], scale=0.18, seed=10),
        dict(B=1, N=2, KVN=1, D=32, layout="BNSD", dtype=torch.bfloat16, causal=True,
             zigzag=True, q_lens=[9] * 4, kv_lens=[9] * 4, scale=0.2, seed=15),
        dict(B=1, N=2, KVN=2, D=16, layout="BNSD", dtype=torch.float16, causal=False,
             q_lens=[5, 1], kv_lens=[40, 23], scale=0.25, seed=20),
    ],
    3: [
        dict(B=1, N=4, KVN=1, D=24, layout="BSH", dtype=torch.float32, causal=True,
             q_lens=[16, 1, 20], kv_lens=[16, 1, 20], scale=0.2, seed=30),
        dict(B=2, N=2, KVN=1, D=64, layout="BSND", dtype=torch.bfloat16, causal=False,
             q_lens=[3, 4, 5], kv_lens=[10, 30, 7], scale=0.125, seed=40),
        dict(B=2, N=4, KVN=2, D=16, layout="BSH", dtype=torch.float16, causal=True,
             zigzag=True, q_lens=[6] * 6, kv_lens=[6] * 6, scale=0.3, seed=50),
    ],
}


# sharded_kv_attention: the same decode queries, the keys split across ranks. Rank r holds
# lens[r] keys of which act[r][b] count for batch b (0: that rank has none of batch b's keys).
SHARDED = [
    dict(kind="bf16", B=2, N=8, KVN=2, D=64, lens=[30, 20, 25], act=[[30, 12], [20, 0], [25, 25]],
         seed=60),
    dict(kind="int8", B=1, N=4, KVN=4, D=32, lens=[40, 17, 33], act=None, seed=70),
]


def _sharded_full(case, world):
    """(q, per-rank kwargs list, full-problem kwargs for the oracle) of a sharded case."""
    b, n, kvn, d, seed = (case[k] for k in ("B", "N", "KVN", "D", "seed"))
    lens = case["lens"][:world]
    q = _rand((b, n, 1, d), torch.bfloat16, seed)
    common = dict(num_heads=n, num_key_value_heads=kvn, scale=d ** -0.5, input_layout="BNSD",
                  softmax_lse_flag=True)
    parts, ks, vs = [], [], []
    for r, ln in enumerate(lens):
        if case["kind"] == "bf16":
            k = _rand((b, kvn, ln, d), torch.bfloat16, seed + 10 * r + 1)
            v = _rand((b, kvn, ln, d), torch.bfloat16, seed + 10 * r + 2)
            kw = dict(actual_seq_lengths_kv=case["act"][r][:b])
        else:
            g = torch.Generator().manual_seed(seed + 10 * r)
            k = torch.randint(-128, 128, (b, kvn, ln, d), generator=g, dtype=torch.int8)
            v = torch.randint(-128, 128, (b, kvn, ln, d), generator=g, dtype=torch.int8)
            kw = dict(key_antiquant_scale=torch.rand(b, ln, generator=g) / 50 + 1e-3,
                      value_antiquant_scale=torch.rand(b, ln, generator=g) / 50 + 1e-3,
                      key_antiquant_mode=1, value_antiquant_mode=1)
        parts.append((k, v, kw))
    # The whole problem: batch b's keys are every rank's first act[r][b] keys, in rank order.
    if case["kind"] == "bf16":
        tot = [sum(case["act"][r][bi] for r in range(world)) for bi in range(b)]
        kf = torch.zeros(b, kvn, max(tot), d, dtype=torch.bfloat16)
        vf = torch.zeros_like(kf)
        for bi in range(b):
            at = 0
            for r in range(world):
                a = case["act"][r][bi]
                kf[bi, :, at:at + a] = parts[r][0][bi, :, :a]
                vf[bi, :, at:at + a] = parts[r][1][bi, :, :a]
                at += a
        full = dict(common, actual_seq_lengths_kv=tot)
        vmax = vf.double().abs().max()
    else:
        kf = torch.cat([p[0] for p in parts], 2)
        vf = torch.cat([p[1] for p in parts], 2)
        full = dict(common, key_antiquant_mode=1, value_antiquant_mode=1,
                    key_antiquant_scale=torch.cat([p[2]["key_antiquant_scale"] for p in parts], 1),
                    value_antiquant_scale=torch.cat([p[2]["value_antiquant_scale"] for p in parts],
                                                    1))
        vmax = (vf.double() * full["value_antiquant_scale"].double()[:, None, :, None]).abs().max()
    return q, parts, common, (kf, vf, full, vmax)


def _worker(rank, world, tmp, cases):
    """One rank: every case of its world, then a subgroup ring, then the error cases. Results
    and exceptions go to files the test reads (a child's assert would only say 'exit 1')."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    openfia.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rdv", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fail, never hang
    res = {}
    try:
        for i, case in enumerate(cases):
            q, k, v = _qkv(case)
            lay = case["layout"]
            res[i] = openfia.ring_attention(
                _chunk(q, lay, case["q_lens"], rank, case, world),
                _chunk(k, lay, case["kv_lens"], rank, case, world),
                _chunk(v, lay, case["kv_lens"], rank, case, world), num_heads=case["N"],
                num_key_value_heads=case["KVN"], scale=case["scale"], input_layout=lay,
                causal=case["causal"], zigzag=case.get("zigzag", False), softmax_lse_flag=True)
        for i, case in enumerate(SHARDED):
            q, parts, common, _ = _sharded_full(case, world)
            k, v, kw = parts[rank]
            res[f"sharded{i}"] = openfia.sharded_kv_attention(q, k, v, **common, **kw)
        q, parts, common, _ = _sharded_full(SHARDED[0], world)
        k, v, kw = parts[rank]
        try:
            openfia.sharded_kv_attention(q, k, v, **dict(common, scale=0.5 if rank == 1 else 1.0),
                                         **kw)
            res["err_sharded"] = None
        except openfia.OpenfiaError as e:
            res["err_sharded"] = str(e)
        # A ring over a subgroup: ranks 0 and world - 1 (group ranks 0, 1).
        sub = dist.new_group([0, world - 1])
        if rank in (0, world - 1):
            case = dict(cases[0], q_lens=cases[0]["q_lens"][:2], kv_lens=cases[0]["kv_lens"][:2])
            q, k, v = _qkv(case)
            gr = 0 if rank == 0 else 1
            lay = case["layout"]
            res["sub"] = openfia.ring_attention(
                _chunk(q, lay, case["q_lens"], gr), _chunk(k, lay, case["kv_lens"], gr),
                _chunk(v, lay, case["kv_lens"], gr), num_heads=case["N"],
                num_key_value_heads=case["KVN"], scale=case["scale"], input_layout=lay,
                causal=case["causal"], softmax_lse_flag=True, group=sub)
        # Errors: every rank must raise (none may be left waiting in a collective).
        q = torch.zeros(1, 2, 4, 8)  # BSND: S 2, N 4, D 8
        for name, kw in (("scale", dict(scale=0.5 if rank == world - 1 else 1.0)),
                         ("layout", dict(input_layout="TND" if rank == 0 else "BSND")),
                         ("causal_len", dict(causal=True)),
                         ("zigzag", dict(causal=rank != 0, zigzag=True))):
            kv = torch.zeros(1, 3 if name == "causal_len" and rank == 1 else 2, 4, 8)
            try:
                openfia.ring_attention(q, kv, kv, num_heads=4, **kw)
                res["err_" + name] = None
            except openfia.OpenfiaError as e:
                res["err_" + name] = str(e)
    except Exception as e:  # noqa: BLE001 - reported to the test
        res["crash"] = repr(e)
    torch.save(res, f"{tmp}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_ring_attention_matches_the_whole_sequence(world, tmp_path):
    cases = CASES[world]
    mp.spawn(_worker, args=(world, str(tmp_path), cases), nprocs=world, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    for r, res in enumerate(results):
        assert "crash" not in res, f"rank {r}: {res['crash']}"
    for i, case in enumerate(cases):
        out, lse, bound, lbound = _expected(case)
        lay = case["layout"]
        for r in range(world):
            got_out, got_lse = results[r][i]
            assert got_out.dtype == case["dtype"]
            what = f"world {world} case {i} ({lay}, causal={case['causal']}) rank {r}"
            assert_within(got_out, _chunk(out, lay, case["q_lens"], r, case, world),
                          _chunk(bound, lay, case["q_lens"], r, case, world), what + " out")
            idx = _chunks(case, r, world)
            want_lse = _take(lse, 2, case["q_lens"], idx)
            assert_within(got_lse, want_lse, 2 * _take(lbound, 2, case["q_lens"], idx) + 4 *
                          torch_ref.EPS32 * want_lse.abs(), what + " lse")
    # sharded_kv_attention: every rank returns bitwise the same result, within the oracle's
    # bound of the whole problem plus the split's terms (as _expected).
    for i, case in enumerate(SHARDED):
        q, _, _, (kf, vf, full, vmax) = _sharded_full(case, world)
        out, lse, bound, lbound, out_dtype = torch_ref.reference(q, kf, vf, **full)
        bound = bound + (torch_ref.UNIT_ROUNDOFF[out_dtype] + 2 * lbound) * vmax
        got, got_lse = results[0][f"sharded{i}"]
        for r in range(1, world):
            assert torch.equal(results[r][f"sharded{i}"][0], got)
            assert torch.equal(results[r][f"sharded{i}"][1], got_lse)
        assert_within(got, out, bound, f"sharded case {i} ({case['kind']}), world {world}")
        assert_within(got_lse, lse, 2 * lbound + 4 * torch_ref.EPS32 * lse.abs(),
                      f"sharded case {i} lse")
    for r, res in enumerate(results):
        assert res["err_sharded"] is not None and "'scale'" in res["err_sharded"], res
    # The subgroup ring computed case 0 over ranks 0 and world - 1 only.
    sub = dict(cases[0], q_lens=cases[0]["q_lens"][:2], kv_lens=cases[0]["kv_lens"][:2])
    out, lse, bound, _ = _expected(sub)
    for gr, r in ((0, 0), (1, world - 1)):
        assert_within(results[r]["sub"][0], _chunk(out, sub["layout"], sub["q_lens"], gr),
                      _chunk(bound, sub["layout"], sub["q_lens"], gr), f"subgroup rank {r}")
    assert "sub" not in results[1] or world == 2
    # Errors: every rank raised, naming the argument; ranks that were fine name the bad rank.
    for r, res in enumerate(results):
        assert res["err_scale"] is not None and "'scale'" in res["err_scale"], res
        msg = res["err_layout"]
        assert msg is not None and "'input_layout'" in msg, res
        assert (r == 0) == ("rank 0 of" not in msg), msg
        msg = res["err_causal_len"]
        assert msg is not None and "lengths must be equal" in msg, res
        assert (r == 1) == ("rank 1 of" not in msg), msg
        msg = res["err_zigzag"]  # rank 0: zigzag without causal
        assert msg is not None and "'zigzag'" in msg and (r == 0) == ("rank 0 of" not in msg), msg


def test_sharded_kv_attention_single_process_is_fia():
    q, parts, common, _ = _sharded_full(SHARDED[1], 1)
    k, v, kw = parts[0]
    want = fia(q, k, v, **common, **kw)
    got = openfia.sharded_kv_attention(q, k, v, **common, **kw)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(openfia.OpenfiaError, match="argument 'quant_scale2'"):
        openfia.sharded_kv_attention(q, k, v, quant_scale2=torch.ones(1), **common, **kw)


def test_ring_attention_single_process_is_fia():
    """Without torch.distributed: one chunk, the operator's own result bit for bit."""
    q, k, v = (_rand((1, 6, 4, 16), torch.bfloat16, s) for s in (1, 2, 3))
    for causal in (False, True):
        kw = dict(num_heads=4, scale=0.3, input_layout="BSND", softmax_lse_flag=True)
        extra = dict(sparse_mode=3, atten_mask=MASK) if causal else {}
        want = fia(q, k, v, **kw, **extra)
        got = openfia.ring_attention(q, k, v, causal=causal, **kw)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    out, lse = openfia.ring_attention(q, k, v, num_heads=4)
    assert lse.shape == (1,) and lse.item() == 0.0 and out.shape == q.shape


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "TND"])
def test_merge_attention_states_split_keys(layout):
    """Keys split in three: results merged left to right (in place into a float32 accumulator,
    then converted) are within the oracle's bound of attention over all keys."""
    B, N, KVN, S, SKV, D = 2, 4, 2, 5, 50, 32
    dt = torch.bfloat16
    q, k, v = (_rand(sh, dt, s) for sh, s in (((B, N, S, D), 1), ((B, KVN, SKV, D), 2),
                                                ((B, KVN, SKV, D), 3)))
    kw = dict(num_heads=N, num_key_value_heads=KVN, scale=0.2, softmax_lse_flag=True)
    if layout == "TND":
        def lay(x):
            return x.permute(0, 2, 1, 3).reshape(-1, x.shape[1], D).contiguous()
        kw.update(actual_seq_lengths=[S * (b + 1) for b in range(B)])
        lens = lambda n: [n * (b + 1) for b in range(B)]  # noqa: E731
    else:
        def lay(x):
            return _bnsd_to(x, layout).contiguous()
        lens = None
    cuts = [0, 11, 30, SKV]
    parts = []
    for c0, c1 in zip(cuts, cuts[1:]):
        extra = dict(actual_seq_lengths_kv=lens(c1 - c0)) if lens else {}
        parts.append(fia(lay(q), lay(k[:, :, c0:c1]), lay(v[:, :, c0:c1]), input_layout=layout,
                         **kw, **extra))
    acc, acc_lse = openfia.merge_attention_states(*parts[0], input_layout=layout,
                                                  out_dtype=torch.float32)
    for o, l in parts[1:]:
        r = openfia.merge_attention_states(acc, acc_lse, o, l, input_layout=layout, out=acc,
                                           lse=acc_lse)
        assert r[0] is acc and r[1] is acc_lse
    out, lse = openfia.merge_attention_states(acc, acc_lse, input_layout=layout, out_dtype=dt)
    extra = dict(actual_seq_lengths_kv=lens(SKV)) if lens else {}
    want, want_lse, bound, lbound, _ = torch_ref.reference(lay(q), lay(k), lay(v),
                                                           input_layout=layout, **kw, **extra)
    vmax = v.double().abs().max()
    u = torch_ref.UNIT_ROUNDOFF[dt]
    if layout == "TND":
        extra_b = (u + 2 * lbound) * vmax  # [T, N, 1]
    else:
        extra_b = _bnsd_to(((u + 2 * lbound) * vmax).expand(-1, -1, -1, D), layout)
    assert out.dtype == dt and out.shape == want.shape
    assert_within(out, want, bound + extra_b, f"{layout} merged out")
    assert_within(acc_lse, want_lse, 2 * lbound + 4 * torch_ref.EPS32 * want_lse.abs(),
                  f"{layout} merged lse")


def test_merge_attention_states_errors():
    o, l = torch.zeros(1, 3, 2, 8), torch.zeros(1, 2, 3, 1)
    with pytest.raises(openfia.OpenfiaError, match="argument 'out_b'.*together"):
        openfia.merge_attention_states(o, l, None, l)
    with pytest.raises(openfia.OpenfiaError, match="argument 'lse_a'.*float32"):
        openfia.merge_attention_states(o, l.half())
    with pytest.raises(openfia.OpenfiaError, match="argument 'out_b'.*out_a's sizes"):
        openfia.merge_attention_states(o, l, torch.zeros(1, 3, 2, 4), l)
    with pytest.raises(openfia.OpenfiaError, match="argument 'input_layout'"):
        openfia.merge_attention_states(o, l, input_layout="SBH")
    with pytest.raises(openfia.OpenfiaError, match="argument 'out'.*overlap itself"):
        openfia.merge_attention_states(o, l, out=torch.zeros(1, 1, 2, 8).expand(1, 3, 2, 8))


def test_merge_attention_states_under_torch_compile():
    """Inside torch.compile(fullgraph=True) the merge is one op node
    (torch.ops.openfia.merge_attention_states, fake kernel for shapes): bitwise the eager
    result; meta tensors give the output shapes and dtypes."""
    q, k, v = (_rand((1, 4, 3, 16), torch.bfloat16, s) for s in (1, 2, 3))
    kw = dict(num_heads=4, scale=0.25, input_layout="BNSD", softmax_lse_flag=True)

    def f(q, k, v):
        a = fia(q, k[:, :, :5], v[:, :, :5], **kw)
        b = fia(q, k[:, :, 5:], v[:, :, 5:], **kw)
        return openfia.merge_attention_states(a[0], a[1], b[0], b[1], input_layout="BNSD",
                                              out_dtype=torch.float32)

    k, v = (_rand((1, 4, 12, 16), torch.bfloat16, s) for s in (4, 5))
    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])
    assert eager[0].dtype == torch.float32
    m = openfia.merge_attention_states(torch.empty(2, 3, 4, 8, device="meta"),
                                       torch.empty(2, 4, 3, 1, device="meta"))
    assert m[0].shape == (2, 3, 4, 8) and m[0].device.type == "meta" and m[1].dtype == torch.float32
