"""The shared FIA case list (tests/cases/fia_cases.txt) and the torch inputs of a case.

parse_cases() reads the list and the benchmark's model workloads (format: tests/cases/README.md;
the parser is openfia.bench.case_list). build_inputs(case) returns the
exact arguments of one npu_fused_infer_attention_score call: a dict with query/key/value and the
keyword arguments, all CPU torch tensors. Data are deterministic per case name. Memory that no
valid row may read (KV rows past the actual length or before the left padding, unused pages and
the tail of the last page, query rows outside the valid window) is poisoned with NaN (float) or
extreme integers, so an implementation that reads it shows up as NaN or as a wrong value.
"""
from __future__ import annotations

import math
import os
import zlib

import torch

from openfia.bench.case_list import DEFAULTS, MODEL_CASES_PATH, Case, read_cases  # noqa: F401
from openfia.quant import pack_int4  # noqa: F401  (re-exported: int4 KV storage of the cases)

CASES_PATH = os.path.join(os.path.dirname(__file__), "..", "cases", "fia_cases.txt")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parse_cases(path=CASES_PATH, tiers=None):
    """All cases of the list, then the benchmark's model workloads (optionally only those of the
    given tiers), in file order. One parser serves the tests and the benchmark."""
    return read_cases([path, MODEL_CASES_PATH] if path == CASES_PATH else [path], tiers)


def tier_cases(tier):
    """Cases run for OPENFIA_TIER=tier: smoke = smoke; full = smoke + full; model = model."""
    if tier == "full":
        return parse_cases(tiers=("smoke", "full"))
    return parse_cases(tiers=(tier,))


# ---- helpers ------------------------------------------------------------------------------------

def _gen(case):
    seed = zlib.crc32(case.name.encode()) ^ int(case.p["seed"])
    g = torch.Generator().manual_seed(seed)
    return g


def _randn(g, shape, dtype, std=1.0):
    return (torch.randn(shape, generator=g, dtype=torch.float64) * std).to(dtype)


def _uniform(g, shape, lo, hi, dtype=torch.float64):
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def _broadcast_lengths(lengths, batch, default):
    if lengths is None:
        return [default] * batch
    if len(lengths) == 1:
        return lengths * batch
    return lengths[:batch]


def bnsd_to_layout(x, layout):
    """[B, N, S, D] -> the query layout of input_layout `layout` (BSH merges N and D)."""
    layout = layout.partition("_")[0]
    if layout == "BNSD":
        return x.contiguous()
    if layout == "BSND":
        return x.permute(0, 2, 1, 3).contiguous()
    if layout == "BSH":
        b, n, s, d = x.shape
        return x.permute(0, 2, 1, 3).reshape(b, s, n * d).contiguous()
    raise ValueError(layout)


def _tnd(x, lengths, ntd=False):
    """[B, N, S, D] and per-batch lengths -> [sum(lengths), N, D] (rows [0, len_b) of each b);
    NTD: [N, sum(lengths), D]."""
    t = torch.cat([x[b, :, :lengths[b]].permute(1, 0, 2) for b in range(x.shape[0])], 0)
    return t.permute(1, 0, 2).contiguous() if ntd else t


# ---- the inputs of a case -----------------------------------------------------------------------

def build_inputs(case):
    """Returns {query, key, value, <kwargs>} for openfia.npu_fused_infer_attention_score."""
    c = case
    g = _gen(c)
    layout = c.p["layout"]  # input_layout: the query layout, after "_" the output's
    q_layout, _, out_layout = layout.partition("_")
    out_layout = out_layout or q_layout
    packed = q_layout in ("TND", "NTD")
    ntd = q_layout == "NTD"
    B, N, S, KVS, D = c.i("B"), c.i("N"), c.i("S"), c.i("KVS"), c.i("D")
    KVN = int(c.p["KVN"]) if c.p["KVN"] else N
    DV = int(c.p["DV"]) if c.p["DV"] else D
    dt = DTYPES[c.p["dtype"]]
    kvq = c.p["kv"]  # "", int8, int4
    fullquant = c.i("fullquant") == 1
    rope = c.i("rope") == 1
    page = c.i("page")
    prefix = c.i("prefix")
    poison = c.i("poison") == 1
    use_list = c.i("list") == 1
    args = {}

    act_q = c.ints("act_q")
    act_kv = c.ints("act_kv")
    qpad = int(c.p["qpad"]) if c.p["qpad"] else None
    kvpad = int(c.p["kvpad"]) if c.p["kvpad"] else None
    if page and act_kv is None:
        act_kv = [KVS] * B
    # Q_S == 1 (the incremental branch) ignores actual_seq_lengths (docs/semantics.md 1.1; TND keeps
    # them: they give T): every query row is valid, whatever the case passes to the operator.
    q_lengths_apply = act_q is not None and (S != 1 or packed)
    aq = _broadcast_lengths(act_q if q_lengths_apply else None, B, S)
    akv = _broadcast_lengths(act_kv, B, KVS)
    # Valid tensor rows of each batch (left padding shifts the window to the right end).
    q_begin = [S - qpad - aq[b] if qpad is not None and q_lengths_apply else 0 for b in range(B)]
    # KV rows of batch b's tensor: KVS, or S_b for a tensor list (see below).
    kv_rows = [min(KVS, akv[b] + b % 2) if use_list else KVS for b in range(B)]
    kv_begin = [kv_rows[b] - kvpad - akv[b] if kvpad is not None and act_kv is not None else 0
                for b in range(B)]
    gkv = list(akv)  # valid KV rows (akv: the lengths the operator is given)
    for b in range(B):
        # Q_S == 1: a window starting before the tensor makes the batch attend nothing
        # (docs/semantics.md 1.6); Q_S > 1 rejects it.
        if kv_begin[b] < 0 and S == 1 and not packed:
            kv_begin[b], gkv[b] = 0, 0

    # ---- query ----
    if fullquant:
        q = torch.randint(-64, 64, (B, N, S, D), generator=g, dtype=torch.int8)
    else:
        q = _randn(g, (B, N, S, D), dt)
    if poison and not fullquant:
        for b in range(B):
            q[b, :, :q_begin[b]] = float("nan")
            q[b, :, q_begin[b] + aq[b]:] = float("nan")
    qr = _randn(g, (B, N, S, 64), dt) if rope else None

    # ---- key / value logical [B, KVN, KVS, D] ----
    kv_int = kvq in ("int8", "int4") or fullquant
    if kvq == "int4":
        k = torch.randint(-8, 8, (B, KVN, KVS, D), generator=g, dtype=torch.int8)
        v = torch.randint(-8, 8, (B, KVN, KVS, DV), generator=g, dtype=torch.int8)
    elif kv_int:
        hi = 64 if fullquant else 128
        k = torch.randint(-hi, hi, (B, KVN, KVS, D), generator=g, dtype=torch.int8)
        v = torch.randint(-hi, hi, (B, KVN, KVS, DV), generator=g, dtype=torch.int8)
    else:
        k = _randn(g, (B, KVN, KVS, D), dt)
        v = _randn(g, (B, KVN, KVS, DV), dt)
    kr = _randn(g, (B, KVN, KVS, 64), dt) if rope else None
    if poison:
        for b in range(B):
            for t in (k, v, kr):
                if t is None:
                    continue
                bad = float("nan") if t.is_floating_point() else (7 if kvq == "int4" else 127)
                t[b, :, :kv_begin[b]] = bad
                t[b, :, kv_begin[b] + gkv[b]:] = bad

    def store(x):  # logical int8 nibbles -> int32 words for int4
        return pack_int4(x) if kvq == "int4" else x

    # ---- KV storage ----
    if page:
        bs = page
        nblk = [math.ceil(akv[b] / bs) for b in range(B)]
        max_blocks = max(max(nblk), 1)
        total = sum(nblk) + 2  # two unused (poisoned) blocks
        perm = torch.randperm(total, generator=g).tolist()
        bt = torch.full((B, max_blocks + 1), -1, dtype=torch.int32)
        cur = 0
        for b in range(B):
            for i in range(nblk[b]):
                bt[b, i] = perm[cur]
                cur += 1

        def to_cache(x, d):  # x [B, KVN, KVS, d] -> [total, KVN, bs, d]
            if x.is_floating_point():
                cache = torch.full((total, KVN, bs, d), float("nan") if poison else 0, dtype=x.dtype)
            else:
                cache = torch.full((total, KVN, bs, d), 7 if kvq == "int4" else 127,
                                   dtype=x.dtype)
            for b in range(B):
                for t0 in range(0, akv[b], bs):
                    n = min(bs, akv[b] - t0)
                    cache[bt[b, t0 // bs], :, :n] = x[b, :, t0:t0 + n]
            return cache

        def cache_layout(cache, kind):
            total_, kvn, bs_, d = cache.shape
            if kind == "3d":
                return store(cache.permute(0, 2, 1, 3).reshape(total_, bs_, kvn * d)).contiguous()
            if kind == "4d":
                return store(cache).contiguous()
            if kind == "nz":
                c0 = 32 if cache.dtype == torch.int8 else 16
                return cache.reshape(total_, kvn, bs_, d // c0, c0).permute(0, 1, 3, 2, 4)\
                    .contiguous()
            raise ValueError(kind)

        kc, vc = to_cache(k, D), to_cache(v, DV)
        args["key"] = cache_layout(kc, c.p["cache"])
        args["value"] = cache_layout(vc, c.p["cache"])
        if rope:
            args["key_rope"] = cache_layout(to_cache(kr, 64), c.p["cache"])
        args["block_table"] = bt
        args["block_size"] = bs
    elif packed:
        args["key"] = store(_tnd(k, akv, ntd))
        args["value"] = store(_tnd(v, akv, ntd))
    elif use_list:
        # One [1, S_b, ...] tensor per batch; S_b = act_kv[b] + (b % 2) (a poisoned tail row),
        # in every layout (BNSD: a different head stride per tensor).
        sb = kv_rows
        args["key"] = [store(bnsd_to_layout(k[b:b + 1, :, :sb[b]], layout)) for b in range(B)]
        args["value"] = [store(bnsd_to_layout(v[b:b + 1, :, :sb[b]], layout)) for b in range(B)]
    else:
        args["key"] = store(bnsd_to_layout(k, layout))
        args["value"] = store(bnsd_to_layout(v, layout))

    # ---- query tensor ----
    if packed:
        args["query"] = _tnd(q, aq, ntd)
        args["actual_seq_lengths"] = list(itertools_accumulate(aq))
        args["actual_seq_lengths_kv"] = akv if page else list(itertools_accumulate(akv))
    else:
        args["query"] = bnsd_to_layout(q, layout)
        if act_q is not None:
            args["actual_seq_lengths"] = act_q
        if act_kv is not None:
            args["actual_seq_lengths_kv"] = act_kv
    if rope:
        args["query_rope"] = bnsd_to_layout(qr, layout) if not packed else _tnd(qr, aq, ntd)
    if qpad is not None:
        args["query_padding_size"] = torch.tensor([qpad], dtype=torch.int64)
    if kvpad is not None:
        args["kv_padding_size"] = torch.tensor([kvpad], dtype=torch.int64)

    # ---- shared prefix ----
    if prefix:
        if kv_int:  # antiquant: the prefix has the key's integer dtype
            hi = 8 if kvq == "int4" else 128
            kp = torch.randint(-hi, hi, (1, KVN, prefix, D), generator=g, dtype=torch.int8)
            vp = torch.randint(-hi, hi, (1, KVN, prefix, DV), generator=g, dtype=torch.int8)
        else:
            kp = _randn(g, (1, KVN, prefix, D), dt)
            vp = _randn(g, (1, KVN, prefix, DV), dt)
        if c.p["pact"]:
            pact = int(c.p["pact"])
            if poison:
                bad = float("nan") if kp.is_floating_point() else (7 if kvq == "int4" else 127)
                kp[:, :, pact:] = bad
                vp[:, :, pact:] = bad
            args["actual_shared_prefix_len"] = torch.tensor([pact], dtype=torch.int64)
        args["key_shared_prefix"] = store(bnsd_to_layout(kp, layout))
        args["value_shared_prefix"] = store(bnsd_to_layout(vp, layout))
    p_len = int(c.p["pact"]) if c.p["pact"] else prefix
    kv_cols = KVS + prefix  # mask / pse columns

    # ---- masks ----
    sparse = c.i("sparse")
    mask_kind = c.p["mask"]
    if sparse in (2, 3, 4) and mask_kind == "none":
        mask_kind = "2048"
    mdt = {"bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8}[c.p["mdtype"]]
    if mask_kind == "2048":
        args["atten_mask"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1).to(mdt)
    elif mask_kind != "none":
        m = torch.rand((B, S, kv_cols), generator=g) < 0.25
        # Keep most rows attendable; a few fully masked rows test the "no visible key" rule.
        if S > 2:
            m[0, S // 2] = True
        if mask_kind == "full":
            mm = m
        elif mask_kind == "full4":
            mm = m[:, None]
        elif mask_kind == "full2":
            mm = m[0]
        elif mask_kind == "bkv":  # Q_S == 1: (B, KV_S)
            mm = m[:, 0]
        else:
            raise ValueError(mask_kind)
        args["atten_mask"] = mm.to(mdt).contiguous()

    if c.p["pse"] in ("1", "b1"):
        pb = 1 if c.p["pse"] == "b1" else B
        args["pse_shift"] = _randn(g, (pb, N, S, kv_cols), dt if dt != torch.float32
                                   else torch.float32)

    # ---- antiquant ----
    if kvq:
        # Per-token scales cover the shared prefix, then the keys.
        _antiquant_args(c, g, args, B, KVN, KVS + prefix, D, DV, dt, q_layout, page)

    # ---- full quantization: values exactly representable after the kernel's float19 cut ----
    if fullquant:
        args["dequant_scale1"] = torch.tensor([2.0 ** -8], dtype=torch.float32)
        args["quant_scale1"] = torch.tensor([127.0], dtype=torch.float32)
        args["dequant_scale2"] = torch.tensor([2.0 ** -13], dtype=torch.float32)

    # ---- post-quantization ----
    outq = c.p["outq"]
    if outq:
        if outq == "pt":
            shape = (1,)
        elif out_layout == "BSH":
            shape = (1, 1, N * DV)
        elif out_layout == "BNSD":
            shape = (1, N, 1, DV)
        else:  # any N * DV elements
            shape = (N, DV)
        args["quant_scale2"] = _uniform(g, shape, 20.0, 60.0, torch.float32)
        if c.i("qo2"):
            args["quant_offset2"] = _uniform(g, shape, -3.0, 3.0, torch.float32)

    # ---- attributes ----
    args["num_heads"] = N
    if KVN != N or c.p["KVN"]:
        args["num_key_value_heads"] = KVN
    args["input_layout"] = layout
    dqk = D + (64 if rope else 0)
    args["scale"] = float(c.p["scale"]) if c.p["scale"] else 1.0 / math.sqrt(dqk)
    if sparse:
        args["sparse_mode"] = sparse
    if c.p["pre"] != DEFAULTS["pre"]:
        args["pre_tokens"] = int(c.p["pre"])
    if c.p["next"] != DEFAULTS["next"]:
        args["next_tokens"] = int(c.p["next"])
    if c.i("ip"):
        args["inner_precise"] = c.i("ip")
    if c.i("lse"):
        args["softmax_lse_flag"] = True
    if c.p["sinks"]:
        # One logit per query head, of the dtype the case names.
        args["sinks"] = _uniform(g, (N,), -1.0, 3.0, DTYPES[c.p["sinks"]])
    return args


def itertools_accumulate(xs):
    tot = 0
    for x in xs:
        tot += x
        yield tot


def _antiquant_args(c, g, args, B, KVN, KVS, D, DV, dt, layout, page):
    """Scale/offset tensors of the antiquant mode the case names. Scales make |K|, |V| ~ 1."""
    qmax = 8.0 if c.p["kv"] == "int4" else 128.0
    aoff = c.i("aoff") == 1
    legacy = c.p["legacy"]
    H = KVN * D

    def perchan(lead):  # per-channel params in the layout's shape, query dtype
        base = _uniform(g, (KVN, D), 0.5 / qmax, 2.0 / qmax)
        off = torch.round(_uniform(g, (KVN, D), -3, 3))
        if layout == "BSH":
            shp = lead + (H,)
        elif layout == "BSND":
            shp = lead + (KVN, D)
        else:
            shp = lead + (KVN, 1, D)
        return base.reshape(shp).to(dt), off.reshape(shp).to(dt)

    if legacy:
        if legacy == "pc":
            s0, o0 = perchan((1,))
            s1, o1 = perchan((1,))
            s, o = torch.cat([s0, s1]), torch.cat([o0, o1])
        elif legacy == "pt":
            s = _uniform(g, (2,), 0.5 / qmax, 2.0 / qmax, dt)
            o = torch.round(_uniform(g, (2,), -3, 3)).to(dt)
        elif legacy == "tok":
            s = _uniform(g, (2, B, KVS), 0.5 / qmax, 2.0 / qmax, torch.float32)
            o = torch.round(_uniform(g, (2, B, KVS), -3, 3)).to(torch.float32)
            args["antiquant_mode"] = 1
        else:
            raise ValueError(legacy)
        args["antiquant_scale"] = s
        if aoff:
            args["antiquant_offset"] = o
        return

    nblocks = args["key"].shape[0] if page else 0
    bs = page

    def params(mode):
        m = str(mode)
        if m == "0":
            return perchan((1,))
        if m == "0t":  # per-tensor (1,)
            return (_uniform(g, (1,), 0.5 / qmax, 2.0 / qmax, dt),
                    torch.round(_uniform(g, (1,), -3, 3)).to(dt))
        if m == "1":
            shp = (1, B, KVS)
        elif m == "2":
            return (_uniform(g, (KVN,), 0.5 / qmax, 2.0 / qmax, dt),
                    torch.round(_uniform(g, (KVN,), -3, 3)).to(dt))
        elif m == "3":
            shp = (B, KVN, KVS)
        elif m == "4":
            shp = (nblocks, bs)
        elif m == "5":
            shp = (nblocks, KVN, bs)
        else:
            raise ValueError(m)
        return (_uniform(g, shp, 0.5 / qmax, 2.0 / qmax, torch.float32),
                torch.round(_uniform(g, shp, -3, 3)).to(torch.float32))

    km = c.p["kmode"] or "0"
    vm = c.p["vmode"] or km
    ks, ko = params(km)
    vs, vo = params(vm)
    args["key_antiquant_scale"], args["value_antiquant_scale"] = ks, vs
    if aoff:
        args["key_antiquant_offset"], args["value_antiquant_offset"] = ko, vo
    args["key_antiquant_mode"] = int(km[0])
    args["value_antiquant_mode"] = int(vm[0])


def call_kwargs(inputs):
    """Splits build_inputs() into (query, key, value) and keyword arguments."""
    kw = dict(inputs)
    return kw.pop("query"), kw.pop("key"), kw.pop("value"), kw
