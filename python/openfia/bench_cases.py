"""Benchmark workloads for `python -m openfia.bench`: the `model` lines of the shared case list
(tests/cases/README.md describes the format), turned into torch tensors for openfia and for the
PyTorch peers.

Everything here mirrors bench/workload.cc (the C++ benchmark): the same presets, FLOP and byte
counts, so the two report comparable numbers. Data comes from a fixed-seed generator.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

# The fallback copy of the workloads, the same as bench/model_cases.txt; used only when neither
# the shared list nor bench/model_cases.txt can be found (e.g. an installed package run outside
# the source tree).
BUILTIN_MODEL_CASES = """
model D1 layout=BSH B=1 N=32 KVN=8 S=1 KVS=16384 D=128 page=128 act_kv=16384
model D2 layout=BSH B=1 N=32 KVN=8 S=1 KVS=16384 D=128 page=128 act_kv=16384 kv=int8 kmode=4 vmode=4
model D3 layout=BSH B=1 N=32 KVN=8 S=1 KVS=16384 D=128 kv=int4 kmode=0 vmode=1
model D4 layout=BSH B=16 N=32 KVN=8 S=1 KVS=4096 D=128 page=128 act_kv=4096
model D5 layout=BSH B=1 N=32 KVN=8 S=1 KVS=32768 D=128
model P1 layout=BSH B=1 N=32 KVN=8 S=512 KVS=4096 D=128 sparse=3
model P2 layout=BSH B=1 N=32 KVN=8 S=4096 KVS=4096 D=128 sparse=3
model P3 layout=BSND B=1 N=128 KVN=1 S=1 KVS=8192 D=512 rope=1 page=128 act_kv=8192
model Q1 layout=BSH B=1 N=32 KVN=8 S=512 KVS=4096 D=128 sparse=3 fullquant=1
"""

SUPPORTED_KEYS = {"layout", "B", "N", "KVN", "S", "KVS", "D", "DV", "dtype", "kv", "sparse",
                  "pre", "next", "mask", "act_kv", "page", "cache", "kmode", "vmode", "lse",
                  "rope", "scale", "fullquant"}
ROPE_DIM = 64  # MLA rope head dim


@dataclass
class Case:
    tier: str
    name: str
    keys: dict = field(default_factory=dict)

    def int(self, k, default):
        return int(self.keys[k]) if k in self.keys else default

    def str(self, k, default):
        return self.keys.get(k, default)

    def line(self):
        return " ".join([self.tier, self.name] + [f"{k}={v}" for k, v in self.keys.items()])


def parse_line(raw: str):
    """One `<tier> <name> key=value ...` line; None for blank and comment lines."""
    tok = raw.split("#", 1)[0].split()
    if not tok:
        return None
    if len(tok) < 2:
        raise ValueError(f"case line needs '<tier> <name> key=value ...': {raw!r}")
    keys = {}
    for t in tok[2:]:
        k, eq, v = t.partition("=")
        if not eq or not k:
            raise ValueError(f"{t!r} is not key=value in {raw!r}")
        keys[k] = v
    return Case(tok[0], tok[1], keys)


def read_cases(text: str, tier: str = "model"):
    out = []
    for raw in text.splitlines():
        c = parse_line(raw)
        if c is not None and c.tier == tier:
            out.append(c)
    return out


def find_repo_root(start: Path | None = None):
    """The openfia source tree containing `start` (default: the working directory), or None."""
    for base in [start or Path.cwd(), Path(__file__).resolve().parent]:
        for d in [base, *base.parents]:
            if (d / "tests" / "cases").is_dir() and (d / "include" / "openfia").is_dir():
                return d
    return None


def load_model_cases(path: str | None = None):
    """(cases, source): the `model` tier of `path`, else of the shared list, else of
    bench/model_cases.txt, else the built-in copy."""
    if path:
        return read_cases(Path(path).read_text()), path
    root = find_repo_root()
    if root is not None:
        for p in [root / "tests" / "cases" / "fia_cases.txt", root / "bench" / "model_cases.txt"]:
            if p.is_file():
                cases = read_cases(p.read_text())
                if cases:
                    return cases, str(p)
    return read_cases(BUILTIN_MODEL_CASES), "built-in copy (bench/model_cases.txt)"


def apply_preset(c: Case, preset: str) -> Case:
    """"full": as written. "demo": sequence lengths (S when > 1, KVS) / 8 (KVS rounded up to the
    page size), B capped at 4; the name gets "@demo" (bench/workload.cc ApplyPreset)."""
    if preset == "full":
        return c
    if preset != "demo":
        raise ValueError(f"preset must be demo or full, got {preset!r}")
    keys = dict(c.keys)
    page = c.int("page", 0)
    s, kvs = c.int("S", 1), c.int("KVS", 1)
    if s > 1:
        keys["S"] = str(max(2, (s + 7) // 8))
    r = max(1, (kvs + 7) // 8)
    if page > 0:
        r = (r + page - 1) // page * page
    keys["KVS"] = str(r)
    keys.pop("act_kv", None)
    if c.int("B", 1) > 4:
        keys["B"] = "4"
    return Case(c.tier, c.name + "@demo", keys)


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

    def describe(self):
        c = self.case
        s = (f"B={c.int('B', 1)} N={c.int('N', 1)}/{c.int('KVN', c.int('N', 1))} "
             f"S={c.int('S', 1)} KV={c.int('KVS', 1)} D={c.int('D', 64)}")
        if c.int("rope", 0):
            s += f"+{ROPE_DIM}"
        if "kv" in c.keys:
            s += f" {c.keys['kv']}(k{c.int('kmode', 0)},v{c.int('vmode', 0)})"
        if c.int("page", 0):
            s += f" paged/{c.int('page', 0)}"
        if c.int("sparse", 0):
            s += f" causal(sparse={c.int('sparse', 0)})"
        return s


def attended_pairs(S, kv_lens, sparse, pre, nxt):
    """(query, key) pairs attended, by the bands of SEMANTICS 1.3 (Q_S == 1 ignores sparse)."""
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


def _pack_int4(x):
    """int values in [-8, 7], last dim a multiple of 8 -> int32 words, low nibble first."""
    import torch

    shp = x.shape
    n = (x.to(torch.int64) & 0xF).reshape(*shp[:-1], shp[-1] // 8, 8)
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    w = (n << shifts).sum(-1)
    w = torch.where(w >= 2**31, w - 2**32, w)
    return w.to(torch.int32)


def _unpack_int4(w):
    """int32 words -> int8 values (two's complement nibbles, low nibble first)."""
    import torch

    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    n = (w.unsqueeze(-1) >> shifts) & 0xF
    n = (n ^ 8) - 8
    return n.reshape(*w.shape[:-1], w.shape[-1] * 8).to(torch.int8)


def build(c: Case, seed: int = 1) -> Workload:
    import torch

    bad = set(c.keys) - SUPPORTED_KEYS
    if bad:
        raise ValueError(f"{c.name}: keys {sorted(bad)} are not supported by the benchmark")
    layout = c.str("layout", "BNSD")
    if layout not in ("BSH", "BSND", "BNSD"):
        raise ValueError(f"{c.name}: layout={layout} (the benchmark builds BSH, BSND, BNSD)")
    B, N = c.int("B", 1), c.int("N", 1)
    KVN = c.int("KVN", N)
    S, KVS = c.int("S", 1), c.int("KVS", 1)
    D = c.int("D", 64)
    DV = c.int("DV", D)
    rope = c.int("rope", 0) != 0
    DR = ROPE_DIM if rope else 0
    qdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[c.str("dtype", "bf16")]
    kv = c.str("kv", "")
    if kv not in ("", "int8", "int4"):
        raise ValueError(f"{c.name}: kv={kv}")
    page = c.int("page", 0)
    if c.str("cache", "3d") != "3d":
        raise ValueError(f"{c.name}: the python driver builds the 3d paged cache only")
    sparse = c.int("sparse", 0)
    if sparse not in (0, 2, 3, 4):
        raise ValueError(f"{c.name}: sparse={sparse}")
    pre, nxt = c.int("pre", 2147483647), c.int("next", 2147483647)
    scale = float(c.keys["scale"]) if "scale" in c.keys else 1.0 / math.sqrt(D)
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

    # Query amplitude 8 (bench/workload.cc kQueryAmp): scores with a standard deviation near 2.7,
    # so each softmax concentrates on a few keys as in trained models; unit amplitude would make
    # every output an average of thousands of random values, near 0, hiding wrong results.
    q = 8 * uni(B, N, S, D)
    q_rope = 8 * uni(B, N, S, DR) if rope else None
    query = to_layout(q.to(qdt))
    kwargs = dict(num_heads=N, num_key_value_heads=KVN, input_layout=layout, scale=scale,
                  sparse_mode=sparse, pre_tokens=pre, next_tokens=nxt,
                  softmax_lse_flag=bool(c.int("lse", 0)))
    if rope:
        kwargs["query_rope"] = to_layout(q_rope.to(qdt))
    q_bnsd = q.to(qdt) if not rope else torch.cat([q.to(qdt), q_rope.to(qdt)], dim=-1)

    # ---- logical KV, [B, KVN, KVS, d]: integers + scales, or floats ----
    int8, int4 = kv == "int8", kv == "int4"
    quant = int8 or int4
    qmax = 127 if int8 else 7
    kmode, vmode = c.int("kmode", 0), c.int("vmode", 0)

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
            return _pack_int4(x) if int4 else x
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
    if page == 0 and "act_kv" in c.keys:
        kwargs["actual_seq_lengths_kv"] = [int(x) for x in c.keys["act_kv"].split(",")]
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
            kc, vc = _unpack_int4(kc), _unpack_int4(vc)
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

    # ---- work and traffic (bench/workload.cc) ----
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


def llc_bytes_guess():
    """Last-level cache size from sysfs (fallback when the C++ limits are unavailable)."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    if base.is_dir():
        for idx in base.glob("index*"):
            try:
                s = (idx / "size").read_text().strip()
                mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
                best = max(best, int(s.rstrip("KMG")) * mult)
            except (OSError, ValueError):
                pass
    return best or (256 << 20)


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
