"""FusedInferAttentionScore workloads of the benchmark: the `model` case lines (model_cases.txt)
turned into torch tensors for openfia and for the PyTorch compositions it is compared with.

The presets, FLOP and byte counts are the C++ benchmark's (bench/workload.cc), so the two report
comparable numbers. Data come from a fixed-seed generator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..quant import pack_int4, unpack_int4
from .case_list import Case, make_case

SUPPORTED_KEYS = {"layout", "B", "N", "KVN", "S", "KVS", "D", "DV", "dtype", "kv", "sparse",
                  "pre", "next", "mask", "act_kv", "page", "cache", "kmode", "vmode", "lse",
                  "rope", "scale", "fullquant"}
ROPE_DIM = 64  # MLA rope head dim


def apply_preset(c: Case, preset: str) -> Case:
    """"full": as written. "demo": sequence lengths (S when > 1, KVS) / 8 (KVS rounded up to the
    page size), B capped at 4; the name gets "@demo" (the C++ benchmark's demo preset)."""
    if preset == "full":
        return c
    if preset != "demo":
        raise ValueError(f"preset must be demo or full, got {preset!r}")
    keys = dict(c.keys)
    page = c.i("page")
    s, kvs = c.i("S"), c.i("KVS")
    if s > 1:
        keys["S"] = str(max(2, (s + 7) // 8))
    r = max(1, (kvs + 7) // 8)
    if page > 0:
        r = (r + page - 1) // page * page
    keys["KVS"] = str(r)
    keys.pop("act_kv", None)
    if c.i("B") > 4:
        keys["B"] = "4"
    return make_case(c.tier, c.name + "@demo", keys)


@dataclass
class Workload:
    """Tensors and counts of one benchmark workload."""
    case: Case
    fia_args: tuple          # (query, key, value)
    fia_kwargs: dict         # keyword arguments of npu_fused_infer_attention_score
    q_bnsd: object           # [B, N, S, Dqk(+rope)] bf16, the peers' query
    k_ref: object            # [B, KVN, KVS, Dk(+rope)] float32: exact dequantized keys
    v_ref: object            # [B, KVN, KVS, Dv] float32
    k_best: object           # [B, KVN, KVS, Dk] bf16 contiguous, pre-dequantized ("best case")
    v_best: object           # [B, KVN, KVS, Dv]
    fair: object             # callable -> (k, v) as a PyTorch user would compose them per call
    sdpa_kwargs: dict        # is_causal / attn_mask / scale / enable_gqa
    out_to_bnsd: object      # callable: openfia output -> [B, N, S, Dv]
    v_absmax: float
    flops: float
    kv_bytes: float
    io_bytes: float
    decode: bool
    paged_or_quant: bool

    @property
    def name(self):
        return self.case.name

    def label(self):
        """What the workload is, in a user's words."""
        c = self.case
        B, S, KVS = c.i("B"), c.i("S"), c.i("KVS")
        cache = ("int8 " if c.p["kv"] == "int8" else "int4 " if c.p["kv"] == "int4" else "")
        cache += "paged " if c.i("page") else ""
        if c.i("rope"):
            text = (f"MLA decode (DeepSeek geometry, {c.i('N')} heads): {B} seq x {KVS} "
                    f"{cache}cached tokens")
        elif S == 1:
            text = f"decode: {B} seq x {KVS} {cache}cached tokens"
        else:
            text = f"causal prefill: {B} seq x {S} new tokens" + (
                f" after {KVS - S} cached" if KVS > S else "")
        if c.i("fullquant"):
            text += ", int8 Q, K and V"
        return text

    def describe(self):
        c = self.case
        s = (f"B={c.i('B')} N={c.i('N')}/{c.int_or('KVN', c.i('N'))} "
             f"S={c.i('S')} KV={c.i('KVS')} D={c.i('D')}")
        if c.i("rope"):
            s += f"+{ROPE_DIM}"
        if c.p["kv"]:
            kmode = c.int_or("kmode", 0)
            s += f" {c.p['kv']}(k{kmode},v{c.int_or('vmode', kmode)})"
        if c.i("page"):
            s += f" paged/{c.i('page')}"
        if c.i("sparse"):
            s += f" causal(sparse={c.i('sparse')})"
        return s


def attended_pairs(S, kv_lens, sparse, pre, nxt):
    """(query, key) pairs attended under sparse_mode's band (a single query token, Q_S == 1,
    ignores sparse_mode and attends every key)."""
    total = 0
    for kvl in kv_lens:
        for i in range(S):
            lo, hi = 0, kvl - 1
            if S > 1 and sparse == 2:
                hi = min(hi, i)
            elif S > 1 and sparse == 3:
                hi = min(hi, i + kvl - S)
            elif S > 1 and sparse == 4:
                lo = max(lo, i + kvl - S - pre)
                hi = min(hi, i + kvl - S + nxt)
            total += max(0, hi - lo + 1)
    return total


def build(c: Case, seed: int = 1) -> Workload:
    import torch

    bad = set(c.keys) - SUPPORTED_KEYS
    if bad:
        raise ValueError(f"{c.name}: keys {sorted(bad)} are not supported by the benchmark")
    layout = c.p["layout"]
    if layout not in ("BSH", "BSND", "BNSD"):
        raise ValueError(f"{c.name}: layout={layout} (the benchmark builds BSH, BSND, BNSD)")
    B, N = c.i("B"), c.i("N")
    KVN = c.int_or("KVN", N)
    S, KVS = c.i("S"), c.i("KVS")
    D = c.i("D")
    DV = c.int_or("DV", D)
    rope = c.i("rope") != 0
    DR = ROPE_DIM if rope else 0
    qdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[c.p["dtype"]]
    kv = c.p["kv"]
    if kv not in ("", "int8", "int4"):
        raise ValueError(f"{c.name}: kv={kv}")
    page = c.i("page")
    if c.p["cache"] != "3d":
        raise ValueError(f"{c.name}: the python driver builds the 3d paged cache only")
    sparse = c.i("sparse")
    if sparse not in (0, 2, 3, 4):
        raise ValueError(f"{c.name}: sparse={sparse}")
    pre, nxt = c.i("pre"), c.i("next")
    scale = float(c.p["scale"]) if c.p["scale"] else 1.0 / math.sqrt(D)
    if rope and DV != D:
        raise ValueError(f"{c.name}: rope=1 takes DV = D")
    G = torch.Generator().manual_seed(seed)

    def uni(*shape):
        return torch.rand(*shape, generator=G) * 2 - 1

    def to_layout(x_bnsd):  # [B, H, S, d] -> the FIA layout
        if layout == "BNSD":
            return x_bnsd.contiguous()
        x = x_bnsd.transpose(1, 2).contiguous()  # BSND
        return x.reshape(x.shape[0], x.shape[1], -1) if layout == "BSH" else x

    # Query amplitude 8 (as the C++ benchmark): scores with a standard deviation near 2.7,
    # so each softmax concentrates on a few keys as in trained models; unit amplitude would make
    # every output an average of thousands of random values, near 0, hiding wrong results.
    q = 8 * uni(B, N, S, D)
    q_rope = 8 * uni(B, N, S, DR) if rope else None
    query = to_layout(q.to(qdt))
    kwargs = dict(num_heads=N, num_key_value_heads=KVN, input_layout=layout, scale=scale,
                  sparse_mode=sparse, pre_tokens=pre, next_tokens=nxt,
                  softmax_lse_flag=bool(c.i("lse")))
    if rope:
        kwargs["query_rope"] = to_layout(q_rope.to(qdt))
    q_bnsd = q.to(qdt) if not rope else torch.cat([q.to(qdt), q_rope.to(qdt)], dim=-1)

    # ---- logical KV, [B, KVN, KVS, d]: integers + scales, or floats ----
    int8, int4 = kv == "int8", kv == "int4"
    quant = int8 or int4
    qmax = 127 if int8 else 7
    kmode = c.int_or("kmode", 0)
    vmode = c.int_or("vmode", kmode)

    def ints(*shape):
        lo, hi = (-127, 128) if int8 else (-8, 8)
        return torch.randint(lo, hi, shape, generator=G, dtype=torch.int8)

    def scales(mode, d):
        """Logical scale broadcastable to [B, KVN, KVS, d] (float32) and its FIA tensor (made
        once the block table exists, for the page-managed mode)."""
        base = lambda *s: (1.0 + 0.5 * uni(*s)) / qmax  # noqa: E731
        if mode == 0:
            s = base(KVN, d).to(qdt).float()
            return s.reshape(1, KVN, 1, d), ("channel", s)
        if mode in (1, 4):
            s = base(B, KVS)
            return s.reshape(B, 1, KVS, 1), ("token", s)
        raise ValueError(f"{c.name}: kmode/vmode {mode} (the python driver builds 0, 1, 4)")

    if quant:
        k_int, v_int = ints(B, KVN, KVS, D), ints(B, KVN, KVS, DV)
        ks_log, ks_fia = scales(kmode, D)
        vs_log, vs_fia = scales(vmode, DV)
        k_f = k_int.float() * ks_log
        v_f = v_int.float() * vs_log
    elif rope:
        k_f = uni(B, KVN, KVS, D).to(qdt).float()
        kr_f = uni(B, KVN, KVS, DR).to(qdt).float()
        v_f = k_f
    else:
        k_f = uni(B, KVN, KVS, D).to(qdt).float()
        v_f = uni(B, KVN, KVS, DV).to(qdt).float()

    # ---- storage as openfia receives it ----
    def storage(x_bhsd):  # logical [B, KVN, KVS, d] (any dtype) -> cache tensor, before packing
        x = x_bhsd.transpose(1, 2)  # [B, KVS, KVN, d]
        if page == 0:
            return to_layout(x_bhsd)
        nb = (KVS + page - 1) // page
        pad = nb * page - KVS
        if pad:
            x = torch.cat([x, torch.zeros(B, pad, *x.shape[2:], dtype=x.dtype)], dim=1)
        x = x.reshape(B * nb, page, -1)  # [blocks of batch b in order, page, KVN*d]
        cache = torch.empty_like(x)
        cache[block_table.flatten().long()] = x
        return cache

    block_table = None
    if page > 0:
        nb = (KVS + page - 1) // page
        perm = torch.randperm(B * nb, generator=G).to(torch.int32)
        block_table = perm.reshape(B, nb)
        kwargs["block_table"] = block_table
        kwargs["block_size"] = page
        kwargs["actual_seq_lengths_kv"] = [KVS] * B

    if quant:
        def pack(x):
            return pack_int4(x) if int4 else x
        key = pack(storage(k_int))
        value = pack(storage(v_int))

        def fia_scale(kind_s, mode, d):
            kind, s = kind_s
            if kind == "channel":
                s = s.to(qdt)
                if layout == "BSH":
                    return s.reshape(1, KVN * d)
                return s.reshape(1, KVN, d) if layout == "BSND" else s.reshape(1, KVN, 1, d)
            if mode == 1:
                return s.reshape(1, B, KVS).contiguous()
            # mode 4: (blocknum, blocksize), indexed by the physical block of each token
            nb = (KVS + page - 1) // page
            padded = torch.zeros(B, nb * page)
            padded[:, :KVS] = s
            out = torch.empty(B * nb, page)
            out[block_table.flatten().long()] = padded.reshape(B * nb, page)
            return out
        kwargs.update(key_antiquant_mode=kmode, value_antiquant_mode=vmode,
                      key_antiquant_scale=fia_scale(ks_fia, kmode, D),
                      value_antiquant_scale=fia_scale(vs_fia, vmode, DV))
    else:
        key = storage(k_f.to(qdt))
        value = key if rope else storage(v_f.to(qdt))
        if rope:
            kwargs["key_rope"] = storage(kr_f.to(qdt))
    if page == 0 and c.p["act_kv"]:
        kwargs["actual_seq_lengths_kv"] = c.ints("act_kv")
    if sparse:
        kwargs["atten_mask"] = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)

    # ---- the PyTorch peers ----
    if rope:
        k_best = torch.cat([k_f, kr_f], dim=-1).to(qdt).contiguous()
        v_best = k_f.to(qdt).contiguous()
    else:
        k_best, v_best = k_f.to(qdt).contiguous(), v_f.to(qdt).contiguous()

    def gather(cache, d_words):
        """Paged cache -> [B, KVS, KVN, d_words] by block_table (torch indexing)."""
        g = cache[block_table.long()]  # [B, nb, page, KVN*d]
        return g.reshape(B, -1, KVN, d_words)[:, :KVS]

    def fair():
        """What a PyTorch user runs per call: gather pages, unpack/dequantize, to BNSD bf16."""
        if page == 0 and not quant:
            return k_best, v_best  # contiguous bf16 already: the fair and best peers coincide
        if rope:
            kc, kr = gather(key, D), gather(kwargs["key_rope"], DR)
            k = torch.cat([kc, kr], dim=-1).transpose(1, 2)
            return k, kc.transpose(1, 2)
        kw_, vw_ = (D // 8, DV // 8) if int4 else (D, DV)
        def unpaged(t, words):  # contiguous storage -> [B, KVS, KVN, words]
            return t.transpose(1, 2) if layout == "BNSD" else t.reshape(B, KVS, KVN, words)
        kc = gather(key, kw_) if page else unpaged(key, kw_)
        vc = gather(value, vw_) if page else unpaged(value, vw_)
        if not quant:
            return kc.transpose(1, 2), vc.transpose(1, 2)
        if int4:
            kc, vc = unpack_int4(kc), unpack_int4(vc)
        ks_b = ks_log.transpose(1, 2)  # broadcastable to [B, KVS, KVN, d]
        vs_b = vs_log.transpose(1, 2)
        k = (kc.to(torch.float32) * ks_b).to(qdt).transpose(1, 2)
        v = (vc.to(torch.float32) * vs_b).to(qdt).transpose(1, 2)
        return k, v

    sdpa_kwargs = dict(scale=scale, enable_gqa=True)
    if S > 1 and sparse in (2, 3) and S == KVS:
        sdpa_kwargs["is_causal"] = True
    elif S > 1 and sparse == 2:
        sdpa_kwargs["is_causal"] = True  # top-left aligned, as PyTorch's is_causal
    elif S > 1 and sparse == 3:
        from torch.nn.attention.bias import causal_lower_right
        sdpa_kwargs["attn_mask"] = causal_lower_right(S, KVS)
    elif S > 1 and sparse == 4:
        i = torch.arange(S).unsqueeze(1)
        j = torch.arange(KVS).unsqueeze(0)
        sdpa_kwargs["attn_mask"] = (j >= i + KVS - S - pre) & (j <= i + KVS - S + nxt)

    def out_to_bnsd(o):
        if layout == "BNSD":
            return o
        if layout == "BSH":
            o = o.reshape(B, S, N, DV)
        return o.transpose(1, 2)

    # ---- work and traffic (counted as the C++ benchmark counts them) ----
    kv_lens = kwargs.get("actual_seq_lengths_kv") or [KVS] * B
    pairs = attended_pairs(S, kv_lens, sparse, pre, nxt)
    flops = 2.0 * pairs * N * (D + DR + DV)
    kelem = 1.0 if int8 else 0.5 if int4 else torch.finfo(qdt).bits / 8
    per_token = KVN * kelem * D + (0 if rope else KVN * kelem * DV)
    if rope:
        per_token += KVN * DR * torch.finfo(qdt).bits / 8
    if quant:
        per_token += 4 * sum(1 for m in (kmode, vmode) if m in (1, 4))
    fixed = 0.0
    if quant:
        fixed += sum(KVN * d * torch.finfo(qdt).bits / 8 for m, d in ((kmode, D), (vmode, DV))
                     if m == 0)
    kv_bytes = sum(kv_lens) * per_token + fixed
    esz = torch.finfo(qdt).bits / 8
    io_bytes = kv_bytes + B * S * N * (D + DR) * esz + B * S * N * DV * esz

    k_ref = torch.cat([k_f, kr_f], dim=-1) if rope else k_f
    return Workload(case=c, fia_args=(query, key, value), fia_kwargs=kwargs, q_bnsd=q_bnsd,
                    k_ref=k_ref, v_ref=v_f,
                    k_best=k_best, v_best=v_best, fair=fair, sdpa_kwargs=sdpa_kwargs,
                    out_to_bnsd=out_to_bnsd, v_absmax=float(v_f.abs().max()), flops=flops,
                    kv_bytes=kv_bytes, io_bytes=io_bytes, decode=(S == 1),
                    paged_or_quant=(page > 0 or quant))
