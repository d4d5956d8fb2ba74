"""Properties that hold whatever the reference says: the same problem spelled differently
(layout, paging, GQA as repeated heads, left padding, prefix) gives the same answer, and the
fast engine agrees with the reference."""
import pytest
import torch

import openfia
from cases import build_inputs, call_kwargs, pack_int4, tier_cases
from common import assert_within, run_openfia
import torch_ref

fia = openfia.npu_fused_infer_attention_score


def _rand(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _bound(q, k, v, **kw):
    return torch_ref.reference(q, k, v, **kw)[2]


def test_layouts_agree():
    """BNSD vs BSND vs BSH vs BNSD_BSND: bitwise equal after transposition."""
    B, N, KVN, S, KVS, D = 2, 4, 2, 5, 11, 32
    q, k, v = _rand(B, N, S, D, seed=1), _rand(B, KVN, KVS, D, seed=2), _rand(B, KVN, KVS, D, seed=3)
    kw = dict(num_heads=N, num_key_value_heads=KVN, scale=0.2, sparse_mode=3,
              atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1),
              softmax_lse_flag=True)
    o_bnsd, l_bnsd = fia(q, k, v, input_layout="BNSD", **kw)
    t = lambda x: x.transpose(1, 2).contiguous()
    o_bsnd, l_bsnd = fia(t(q), t(k), t(v), input_layout="BSND", **kw)
    h = lambda x: t(x).reshape(x.shape[0], x.shape[2], -1)
    o_bsh, l_bsh = fia(h(q), h(k), h(v), input_layout="BSH", **kw)
    o_mix, l_mix = fia(q, k, v, input_layout="BNSD_BSND", **kw)
    assert torch.equal(t(o_bnsd), o_bsnd)
    assert torch.equal(t(o_bnsd).reshape(B, S, -1), o_bsh)
    assert torch.equal(t(o_bnsd), o_mix)
    for lse in (l_bsnd, l_bsh, l_mix):
        assert torch.equal(l_bnsd, lse)


def test_tnd_agrees_with_bsnd():
    """TND (packed rows, cumulative lengths) vs BSND with actual lengths."""
    N, D, DV = 8, 192, 128
    lq, lkv = [3, 5], [6, 9]
    q, k, v = _rand(2, 5, N, D, seed=4), _rand(2, 9, N, D, seed=5), _rand(2, 9, N, DV, seed=6)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    kw = dict(num_heads=N, scale=0.1, sparse_mode=3, atten_mask=mask, softmax_lse_flag=True)
    o, lse = fia(q, k, v, input_layout="BSND", actual_seq_lengths=lq, actual_seq_lengths_kv=lkv,
                 **kw)
    qt = torch.cat([q[b, :lq[b]] for b in range(2)])
    kt = torch.cat([k[b, :lkv[b]] for b in range(2)])
    vt = torch.cat([v[b, :lkv[b]] for b in range(2)])
    ot, lt = fia(qt, kt, vt, input_layout="TND", actual_seq_lengths=[3, 8],
                 actual_seq_lengths_kv=[6, 15], **kw)
    assert torch.equal(ot, torch.cat([o[b, :lq[b]] for b in range(2)]))
    assert torch.equal(lt[..., 0], torch.cat([lse[b, :, :lq[b], 0].T for b in range(2)]))


@pytest.mark.parametrize("cache", ["3d", "4d", "nz"])
@pytest.mark.parametrize("seq", [1, 3])
def test_paged_equals_contiguous(cache, seq):
    """Paged KV with a random block permutation: bitwise the contiguous result."""
    B, N, KVN, D, bs = 2, 4, 2, 32, 16 if seq == 1 else 128
    lkv = [37, 20] if seq == 1 else [200, 130]
    KVS = max(lkv)
    layout = "BNSD"
    q = _rand(B, N, seq, D, seed=7)
    k, v = _rand(B, KVN, KVS, D, seed=8), _rand(B, KVN, KVS, D, seed=9)
    kw = dict(num_heads=N, num_key_value_heads=KVN, input_layout=layout, scale=0.17,
              actual_seq_lengths_kv=lkv, softmax_lse_flag=True)
    if seq > 1:
        kw.update(sparse_mode=3, atten_mask=torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1))
    o_ref, l_ref = fia(q, k, v, **kw)
    nblk = [-(-x // bs) for x in lkv]
    total = sum(nblk) + 1
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(3)).tolist()
    bt = torch.full((B, max(nblk)), -1, dtype=torch.int32)
    kc = torch.full((total, KVN, bs, D), float("nan"), dtype=q.dtype)
    vc = kc.clone()
    i = 0
    for b in range(B):
        for blk in range(nblk[b]):
            n = min(bs, lkv[b] - blk * bs)
            bt[b, blk] = perm[i]
            kc[perm[i], :, :n] = k[b, :, blk * bs:blk * bs + n]
            vc[perm[i], :, :n] = v[b, :, blk * bs:blk * bs + n]
            i += 1
    if cache == "3d":
        f = lambda c: c.permute(0, 2, 1, 3).reshape(total, bs, KVN * D).contiguous()
    elif cache == "4d":
        f = lambda c: c
    else:
        f = lambda c: c.reshape(total, KVN, bs, D // 16, 16).permute(0, 1, 3, 2, 4).contiguous()
    o, lse = fia(q, f(kc), f(vc), block_table=bt, block_size=bs, **kw)
    assert torch.equal(o, o_ref)
    assert torch.equal(lse, l_ref)


@pytest.mark.parametrize("seq", [1, 4])
def test_gqa_equals_repeated_heads(seq):
    B, N, KVN, KVS, D = 2, 8, 2, 13, 32
    q = _rand(B, N, seq, D, seed=10)
    k, v = _rand(B, KVN, KVS, D, seed=11), _rand(B, KVN, KVS, D, seed=12)
    kw = dict(num_heads=N, input_layout="BNSD", scale=0.2, softmax_lse_flag=True)
    o, lse = fia(q, k, v, num_key_value_heads=KVN, **kw)
    r = lambda x: x.repeat_interleave(N // KVN, 1)
    o2, lse2 = fia(q, r(k), r(v), num_key_value_heads=N, **kw)
    assert torch.equal(o, o2)
    # The packed GQA call has group*seq rows per KV head, the repeated one seq rows, so the engine
    # may pick different kernels (AMX needs >= 16 rows) whose fp32 softmax sums round in a
    # different order: lse agrees to a few float32 ulps, not bitwise.
    torch.testing.assert_close(lse, lse2, rtol=4 * 2.0**-24, atol=0)


def test_left_padding_equals_unpadded():
    """Query and KV left padding: the valid window equals the same problem without padding."""
    B, N, S, KVS, D = 2, 2, 7, 12, 32
    aq, akv, qpad, kvpad = [4, 2], [9, 5], 2, 1
    q, k, v = _rand(B, N, S, D, seed=13), _rand(B, N, KVS, D, seed=14), _rand(B, N, KVS, D, seed=15)
    kw = dict(num_heads=N, input_layout="BNSD", scale=0.2, softmax_lse_flag=True)
    o, lse = fia(q, k, v, actual_seq_lengths=aq, actual_seq_lengths_kv=akv,
                 query_padding_size=torch.tensor([qpad]), kv_padding_size=torch.tensor([kvpad]),
                 **kw)
    for b in range(B):
        qs, ks = S - qpad - aq[b], KVS - kvpad - akv[b]
        qb, kb, vb = (q[b:b + 1, :, qs:qs + aq[b]], k[b:b + 1, :, ks:ks + akv[b]],
                      v[b:b + 1, :, ks:ks + akv[b]])
        ob, lb = fia(qb.contiguous(), kb.contiguous(), vb.contiguous(), **kw)
        bound = 2 * _bound(qb, kb, vb, **kw)
        assert_within(o[b:b + 1, :, qs:qs + aq[b]], ob.double(), bound, f"batch {b}")
        assert torch.allclose(lse[b:b + 1, :, qs:qs + aq[b]], lb, rtol=1e-5, atol=1e-5)
        # Rows outside the window are 0 / +inf.
        assert (o[b, :, :qs] == 0).all() and (o[b, :, qs + aq[b]:] == 0).all()
        assert torch.isposinf(lse[b, :, :qs]).all()


def test_prefix_equals_concatenated_kv():
    B, N, S, KVS, P, D = 2, 2, 3, 6, 5, 32
    q, k, v = _rand(B, N, S, D, seed=16), _rand(B, N, KVS, D, seed=17), _rand(B, N, KVS, D, seed=18)
    kp, vp = _rand(1, N, P, D, seed=19), _rand(1, N, P, D, seed=20)
    kw = dict(num_heads=N, input_layout="BNSD", scale=0.2)
    o, _ = fia(q, k, v, key_shared_prefix=kp, value_shared_prefix=vp,
               actual_shared_prefix_len=torch.tensor([4]), actual_seq_lengths_kv=[6, 2], **kw)
    for b, lkv in enumerate([6, 2]):
        kc = torch.cat([kp[:, :, :4], k[b:b + 1, :, :lkv]], 2)
        vc = torch.cat([vp[:, :, :4], v[b:b + 1, :, :lkv]], 2)
        ob, _ = fia(q[b:b + 1], kc, vc, **kw)
        bound = 2 * _bound(q[b:b + 1], kc, vc, **kw)
        assert_within(o[b:b + 1], ob.double(), bound, f"batch {b}")


def test_int4_unpacks_like_int8():
    """int4 KV (packed int32) holds the same values as the int8 KV it was packed from: the
    reference reads them bitwise alike; the engine's decode kernels may stage int4 and int8
    differently (int4 with a bias that comes out of the sums, so its fp32 sums round
    differently), so both agree with the float64 oracle of the int8 call within its bound."""
    B, N, KVS, D = 1, 2, 9, 64
    q = _rand(B, N, 1, D, seed=21)
    g = torch.Generator().manual_seed(22)
    k8 = torch.randint(-8, 8, (B, N, KVS, D), generator=g, dtype=torch.int8)
    v8 = torch.randint(-8, 8, (B, N, KVS, D), generator=g, dtype=torch.int8)
    s = torch.full((1, N, 1, D), 0.125, dtype=torch.bfloat16)
    kw = dict(num_heads=N, input_layout="BNSD", key_antiquant_scale=s, value_antiquant_scale=s)
    ref, _, bound, _, _ = torch_ref.reference(q, k8, v8, **kw)
    for impl in ("ref", "engine"):
        prev = openfia.get_impl()
        openfia.set_impl(impl)
        try:
            o8, _ = fia(q, k8, v8, **kw)
            o4, _ = fia(q, pack_int4(k8), pack_int4(v8), **kw)
        finally:
            openfia.set_impl(prev)
        if impl == "ref":
            assert torch.equal(o8, o4)
        assert_within(o8, ref, bound, f"{impl} int8")
        assert_within(o4, ref, bound, f"{impl} int4")


def test_threads_do_not_change_results():
    inputs = build_inputs(next(c for c in tier_cases("smoke") if c.name == "gqa_bsh"))
    n0 = openfia.get_num_threads()
    try:
        openfia.set_num_threads(1)
        a = run_openfia(inputs)
        openfia.set_num_threads(3)
        b = run_openfia(inputs)
    finally:
        openfia.set_num_threads(n0)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


SMOKE = tier_cases("smoke")


@pytest.mark.parametrize("case", SMOKE, ids=[c.name for c in SMOKE])
def test_engine_matches_reference(case):
    """set_impl("engine") vs set_impl("ref") where the engine supports the case; within twice
    the oracle bound (both sides are within one bound of the exact result)."""
    inputs = build_inputs(case)
    prev = openfia.get_impl()
    try:
        openfia.set_impl("ref")
        ref = run_openfia(inputs)
        openfia.set_impl("engine")
        try:
            eng = run_openfia(inputs)
        except openfia.OpenfiaError as e:
            if e.code == "unsupported":
                pytest.skip(f"engine: {e}")
            raise
    finally:
        openfia.set_impl(prev)
    q, k, v, kw = call_kwargs(inputs)
    _, _, bound, lse_bound, _ = torch_ref.reference(q, k, v, **kw)
    if ref[0].dtype == torch.int8:
        assert ((eng[0].double() - ref[0].double()).abs() <= 1).all()
    else:
        assert_within(eng[0], ref[0].double(), 2 * bound, f"{case.name}: engine vs reference")
    if kw.get("softmax_lse_flag"):
        assert_within(eng[1], ref[1].double(), 2 * lse_bound, f"{case.name}: lse")
