"""Sparse-attention workloads of the benchmark: KvQuantSparseFlashAttention (S1, S2,
DeepSeek-V3.2) and SparseAttnSharedkv (V1, V2, V3, DeepSeek-V4), each with its PyTorch
compositions. runner.run_sparse checks and times them; they share the table with the FIA rows.

Peers:
  * PyTorch: everything a PyTorch user does per call, all of it timed: gather the selected rows
    (through the page table), dequantize (KvQuantSparseFlashAttention: int8 code x per-tile
    scale, rounded to bf16 as the operator does; the rope bytes read as bf16), then one
    scaled_dot_product_attention with the query heads folded into query rows (all heads share
    the one KV head); SparseAttnSharedkv adds a zero key whose additive bias is the head's sink
    (its score is the sink, its value 0: exactly the sink term of the softmax denominator).
  * PyTorch best case: the same SDPA call on K/V already gathered and dequantized.
Correctness, before timing: the same composition in float32 on the same (exactly dequantized)
inputs is the reference; openfia's bf16 output must be within BF16_U * (|ref| + P|V|) of it
element by element, plus the float32 reference's own accumulation error: P is rounded to bf16
before P.V (<= u/2 of P|V|) and the output is rounded once (<= u/2 of |out|). A wrong selection,
threshold, scale or sink errs by the size of the output.

A SparseAttnSharedkv call executes its metadata (V3 passes one; the others let the operator plan
for the thread count); V3 also reports each planned worker's busy time (through the bench-only
openfia.sas.sparse_attn_sharedkv_busy). The demo preset keeps the head geometry and top-k of S1,
S2 and V2 and shrinks the batch and the KV length (V1, V3 also the top-k), so that all five run
in seconds on 2 cores.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .timing import settle

@dataclass
class SparseWorkload:
    name: str
    shape: str
    decode: bool
    flops: float             # 2 * (Dqk + Dv) per attended (query head, key) pair; sinks excluded
    kv_bytes: float          # bytes of the selected K/V rows read once (the operator's minimum)
    io_bytes: float          # kv_bytes + query + output
    call_openfia: object     # () -> output tensor in the workload's layout
    out_to_rows: object      # openfia output -> [R, 1, N, Dv] (the peers' layout)
    prep: object             # () -> tuple of SDPA inputs (gather + dequantize), timed in "torch"
    sdpa: object             # (prepared) -> [R, 1, N, Dv]
    vmax: float              # max |V| over the attended values
    acc_len: int             # longest float32 dot product / accumulation of the reference
    note: str = ""           # extra text for the report (metadata split)
    report: object = None    # optional (result record) -> note text, run after the timing
    busy: object = None      # SparseAttnSharedkv: () -> (out, lse, busy seconds), bench-only
    label: str = ""          # what the workload is, in a user's words


def _pages(n_tokens_per_batch, B, page, gen):
    """A shuffled page table: [B, ceil(S/page)] int32 over B * that many blocks."""
    import torch

    nb = -(-n_tokens_per_batch // page)
    perm = torch.randperm(B * nb, generator=gen).to(torch.int32)
    return perm.reshape(B, nb), B * nb


def _phys(table, b_idx, tok, page):
    """Physical row (block * page + offset) of logical token `tok` of batch `b_idx` (broadcast)."""
    return table[b_idx, tok // page].long() * page + tok % page


# ---- KvQuantSparseFlashAttention ---------------------------------------------------------------

def build_kvqsfa(name, *, B, S1, N, topk_tokens, kv_len, page, sblock, seed=3):
    import torch
    import torch.nn.functional as F

    import openfia
    from openfia import quant

    gen = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16
    table, nblocks = _pages(kv_len, B, page, gen)
    nope = torch.randn(nblocks * page, 512, generator=gen)
    rope = torch.randn(nblocks * page, 64, generator=gen).to(dt)
    pool = quant.quantize_kv_rows(nope, rope, "int8").reshape(nblocks, page, 1, 656)
    query = torch.randn(B, S1, N, 576, generator=gen).to(dt)
    kentries = topk_tokens // sblock
    # sparse_mode 3: row i sees tokens < thr = kv_len - S1 + i + 1; the lightning indexer picks
    # distinct entries, all below the row's threshold (whole blocks for sparse_block_size > 1).
    idx = torch.empty(B, S1, 1, kentries, dtype=torch.int32)
    for b in range(B):
        for i in range(S1):
            thr = kv_len - S1 + i + 1
            idx[b, i, 0] = torch.randperm(thr // sblock, generator=gen)[:kentries].int()
    scale = 576 ** -0.5
    lens = torch.full((B,), kv_len, dtype=torch.int64)

    def call_openfia():
        return openfia.npu_kv_quant_sparse_flash_attention(
            query, pool, pool, idx, scale, 2, 2, attention_mode=2, layout_kv="PA_BSND",
            block_table=table, actual_seq_lengths_kv=lens, sparse_block_size=sblock,
            sparse_mode=3)

    flat = pool.reshape(-1, 656)
    bix = torch.arange(B).view(B, 1, 1)
    q_rows = query.reshape(B * S1, 1, N, 576)

    def prep():
        tok = idx[:, :, 0, :].long()                                   # [B, S1, E]
        if sblock > 1:
            tok = (tok.unsqueeze(-1) * sblock + torch.arange(sblock)).flatten(-2)
        rows = flat[_phys(table, bix, tok, page)]                      # [B, S1, T, 656] int8
        knope, krope = quant.dequantize_kv_rows(rows, dt)              # as the operator rounds
        k = torch.cat([knope, krope], -1).reshape(B * S1, 1, -1, 576)
        return k, k[..., :512]

    def sdpa(kv, dtype=None, abs_v=False):
        k, v = kv
        q = q_rows if dtype is None else q_rows.to(dtype)
        if dtype is not None:
            k, v = k.to(dtype), v.to(dtype)
        return F.scaled_dot_product_attention(q, k, v.abs() if abs_v else v, scale=scale)

    pairs = B * S1 * N * topk_tokens
    kv_bytes = B * S1 * topk_tokens * 656
    io = kv_bytes + query.numel() * 2 + B * S1 * N * 512 * 2
    vmax = float(prep()[1].float().abs().max())
    shape = (f"B={B} S1={S1} N={N} D=512+64 topk={topk_tokens}"
             + (f" (={kentries}x{sblock})" if sblock > 1 else "")
             + f" KV={kv_len} int8 paged/{page}")
    label = (f"DeepSeek-V3.2 sparse decode{' (MTP, ' + str(S1) + ' tokens)' if S1 > 1 else ''}:"
             f" {B} seq x top-{topk_tokens} of {kv_len} int8 cached tokens")
    # S1 = 4 is multi-token-prediction decode: the KV cache is as cold as for S1 = 1.
    return SparseWorkload(name, shape, True, 2.0 * (576 + 512) * pairs, kv_bytes, io,
                          call_openfia, lambda o: o.reshape(B * S1, 1, N, 512), prep, sdpa, vmax,
                          topk_tokens + 576, label=label)


# ---- SparseAttnSharedkv -----------------------------------------------------------------------

WIN = 128  # ori_win_left 127 + the token itself


def build_sas(name, *, B, S1, S2, N, D, ratio, k2, page=128, cmp_page=64, metadata=False,
              seed=5):
    import torch
    import torch.nn.functional as F

    import openfia
    from openfia import sas

    gen = torch.Generator().manual_seed(seed)
    dt = torch.bfloat16
    S3 = S2 // ratio
    ori_table, nb1 = _pages(S2, B, page, gen)
    cmp_table, nb2 = _pages(max(S3, 1), B, cmp_page, gen)
    ori = (torch.rand(nb1 * page, D, generator=gen) * 2 - 1).to(dt)
    cmpv = (torch.rand(nb2 * cmp_page, D, generator=gen) * 2 - 1).to(dt)
    q = (torch.rand(B, S1, N, D, generator=gen) * 2 - 1).to(dt)
    sinks = torch.rand(N, generator=gen) * 4 - 2
    seqused = torch.full((B,), S2, dtype=torch.int32)
    p = torch.arange(S1) + (S2 - S1)                                     # absolute positions
    thr = (p + 1) // ratio                                               # compressed entries seen
    idx = None
    if k2:
        idx = torch.empty(B, S1, 1, k2, dtype=torch.int32)
        for b in range(B):
            for i in range(S1):
                n = min(k2, int(thr[i]))
                row = torch.full((k2,), -1, dtype=torch.int32)
                row[:n] = torch.randperm(int(thr[i]), generator=gen)[:n].int()
                idx[b, i, 0] = row
    scale = D ** -0.5
    meta = None
    if metadata:
        meta = sas.npu_sparse_attn_sharedkv_metadata(
            N, 1, D, seqused_kv=seqused, batch_size=B, max_seqlen_q=S1, max_seqlen_kv=S2,
            cmp_topk=k2, cmp_ratio=ratio, layout_q="BSND")
    ori_pool = ori.reshape(nb1, page, 1, D)
    cmp_pool = cmpv.reshape(nb2, cmp_page, 1, D)
    kw = dict(ori_kv=ori_pool, cmp_kv=cmp_pool, cmp_sparse_indices=idx,
              ori_block_table=ori_table, cmp_block_table=cmp_table, seqused_kv=seqused,
              sinks=sinks, metadata=meta, softmax_scale=scale, cmp_ratio=ratio, layout_q="BSND")

    def call_openfia():
        return sas.npu_sparse_attn_sharedkv(q, **kw)[0]

    def report(res):
        return _busy_report(name, openfia, sas, meta,
                            lambda: sas.sparse_attn_sharedkv_busy(q, **kw))

    # Per row the keys are: window positions p-127..p (masked below 0), then the compressed
    # entries (SCFA: the row's indices, -1 masked; CFA: all entries, those >= thr masked), then
    # the sink column. Prefill (CFA) goes chunk by chunk of query rows so that the window and
    # the compressed prefix are shared by the chunk's rows (a banded mask), as one would in
    # PyTorch; decode gathers each row's own keys.
    win_off = torch.arange(-WIN + 1, 1)
    bix = torch.arange(B).view(B, 1, 1)
    sink_bias = sinks.view(1, 1, N, 1)
    chunk = 128

    def prep():
        if k2:
            wpos = p.view(1, S1, 1) + win_off                            # [1, S1, WIN]
            wvalid = (wpos >= 0).expand(B, S1, WIN)
            wk = ori[_phys(ori_table, bix, wpos.clamp(min=0), page)]     # [B, S1, WIN, D]
            ci = idx[:, :, 0, :].long()
            cvalid = ci >= 0
            ck = cmpv[_phys(cmp_table, bix, ci.clamp(min=0), cmp_page)]  # [B, S1, k2, D]
            kv = torch.cat([wk, ck, torch.zeros(B, S1, 1, D, dtype=dt)], 2)
            kv = kv.reshape(B * S1, 1, -1, D)
            valid = torch.cat([wvalid, cvalid], 2).reshape(B * S1, 1, 1, -1)
            bias = torch.where(valid, 0.0, -math.inf).expand(-1, 1, N, -1)
            mask = torch.cat([bias, sink_bias.expand(B * S1, 1, N, 1)], -1)
            return [(kv, mask)]
        out = []
        for b in range(B):
            ck_all = cmpv[_phys(cmp_table, b, torch.arange(S3), cmp_page)]    # [S3, D]
            for c0 in range(0, S1, chunk):
                c1 = min(S1, c0 + chunk)
                lo, hi = max(int(p[c0]) - WIN + 1, 0), int(p[c1 - 1]) + 1
                wk = ori[_phys(ori_table, b, torch.arange(lo, hi), page)]     # [hi-lo, D]
                ncmp = int(thr[c1 - 1])
                kv = torch.cat([wk, ck_all[:ncmp], torch.zeros(1, D, dtype=dt)])
                pr = p[c0:c1].view(-1, 1)
                kpos = torch.arange(lo, hi).view(1, -1)
                wv = (kpos <= pr) & (kpos > pr - WIN)
                cv = torch.arange(ncmp).view(1, -1) < thr[c0:c1].view(-1, 1)
                bias = torch.where(torch.cat([wv, cv], 1), 0.0, -math.inf)   # [rows, keys]
                mask = torch.cat([bias.view(1, c1 - c0, 1, -1).expand(1, c1 - c0, N, -1),
                                  sink_bias.expand(1, c1 - c0, N, 1)], -1)
                out.append((kv.view(1, 1, -1, D), mask.reshape(1, 1, (c1 - c0) * N, -1)))
        return out

    def sdpa(parts, dtype=None, abs_v=False):
        if k2:
            kv, mask = parts[0]
            qq = q.reshape(B * S1, 1, N, D)
            if dtype is not None:
                qq, kv, mask = qq.to(dtype), kv.to(dtype), mask.to(dtype)
            return F.scaled_dot_product_attention(qq, kv, kv.abs() if abs_v else kv,
                                                  attn_mask=mask.to(qq.dtype), scale=scale)
        outs, k = [], 0
        for b in range(B):
            for c0 in range(0, S1, chunk):
                c1 = min(S1, c0 + chunk)
                kv, mask = parts[k]
                k += 1
                qq = q[b, c0:c1].reshape(1, 1, (c1 - c0) * N, D)
                if dtype is not None:
                    qq, kv = qq.to(dtype), kv.to(dtype)
                o = F.scaled_dot_product_attention(qq, kv, kv.abs() if abs_v else kv,
                                                   attn_mask=mask.to(qq.dtype), scale=scale)
                outs.append(o.reshape(c1 - c0, 1, N, D))
        return torch.cat(outs).reshape(B * S1, 1, N, D)

    keys_per_row = [min(int(p[i]) + 1, WIN) + (min(k2, int(thr[i])) if k2 else int(thr[i]))
                    for i in range(S1)]
    pairs = B * N * sum(keys_per_row)
    kv_bytes = B * sum(keys_per_row) * D * 2 if S1 == 1 else B * (S2 + S3) * D * 2
    io = kv_bytes + 2 * q.numel() * 2
    vmax = max(float(ori.float().abs().max()), float(cmpv.float().abs().max()))
    mode = f"SCFA k2={k2}" if k2 else "CFA"
    shape = (f"B={B} S1={S1} N={N} D={D} oriKV={S2} win={WIN} cmp/{ratio} {mode} sinks "
             f"paged/{page}" + (" +metadata" if metadata else ""))
    kind = "decode" if S1 == 1 else f"prefill of {S1} tokens"
    entries = f"top-{k2} of the compressed entries" if k2 else "all compressed entries"
    label = (f"DeepSeek-V4 {kind}: {B} seq x {S2} tokens, {WIN}-token window + {entries} "
             f"(1 per {ratio})" + (", planned by the metadata op" if metadata else ""))
    return SparseWorkload(name, shape, S1 == 1, 2.0 * 2 * D * pairs, kv_bytes, io, call_openfia,
                          lambda o: o.reshape(B * S1, 1, N, D), prep, sdpa, vmax,
                          max(keys_per_row) + D, "", report if metadata else None,
                          lambda: sas.sparse_attn_sharedkv_busy(q, **kw), label)


def describe_plan(meta):
    """The split a SparseAttnSharedkv metadata tensor describes: 36 compute records of 8 words
    (on flag, then (bn2, m, s2) start and end cursors) followed by 72 reduce records."""
    words = meta.tolist()
    recs = [words[8 * c:8 * c + 8] for c in range(36)]
    on = [r for r in recs if r[0]]
    cur = lambda r, k: f"({r[k]},{r[k + 1]},{r[k + 2]})"  # noqa: E731  (bn2, m, s2)
    fd = [words[288 + 8 * v:296 + 8 * v] for v in range(72)]
    fd_on = [r for r in fd if r[0]]
    chunks = sorted({r[4] for r in fd_on})
    text = (f"{len(on)} compute record(s): " + ", ".join(f"{cur(r, 1)}..{cur(r, 4)}" for r in on)
            + " [(bn2, m, s2) cursors]; ")
    if fd_on:
        text += (f"{len(fd_on)} reduce record(s) merging {'/'.join(map(str, chunks))} S2 chunk "
                 f"partial states per row")
    else:
        text += "no S2 split (no reduce record)"
    return text


def _busy_report(name, openfia, sas, meta, call, reps=5):
    """Per-worker busy time of the metadata's compute records, per-thread busy time, the merge
    and the balance, from the call (of `reps`, each prepared by `settle` like a timed call) with
    the shortest wall time (compute phase plus merge phase: the shortest compute phase alone
    could pick a call whose merge was preempted)."""
    wall = lambda b: b["compute_wall"][0] + b["merge_wall"][0]  # noqa: E731
    best = None
    for _ in range(reps):
        # The same preparation as a timed call (the report follows the last timed PyTorch call,
        # whose OpenMP workers may still spin on both cores).
        settle("openfia")
        _, _, busy = call()
        if busy and (best is None or wall(busy) < wall(best)):
            best = busy
    plan = describe_plan(meta) if meta is not None else "plan made by the operator"
    if best is None:
        return f"{name}: {plan}; no engine timing (the call ran on the reference)."
    ms = lambda xs: "[" + ", ".join(f"{x * 1e3:.3f}" for x in xs) + "]"  # noqa: E731
    wk, cpu = best["workers"], best["workers_cpu"]
    mean = sum(wk) / len(wk)
    return (f"{name}: metadata for {len(wk)} worker(s) on {openfia.get_num_threads()} thread(s): "
            f"{plan}. Busy ms per worker {ms(wk)} (CPU {ms(cpu)}; max/mean {max(wk) / mean:.2f}); "
            f"merge {best['merge'][0] * 1e3:.3f} ms in total; per thread {ms(best['threads'])} "
            f"(compute + merge); compute phase {best['compute_wall'][0] * 1e3:.3f} ms, merge phase "
            f"{best['merge_wall'][0] * 1e3:.3f} ms wall (of {reps} calls, the one with the "
            f"shortest wall time).")


# ---- the workload list -----------------------------------------------------------------------

# name -> (builder, full-size kwargs, demo kwargs). Demo sizes keep the head geometry (N, D, top-k
# per row: what decides how much work one gathered row serves) and the operator features (paging,
# block-wise indices, MTP, sinks, metadata) and shrink B and the KV length.
SPARSE_CASES = {
    "S1": (build_kvqsfa, dict(B=4, S1=1, N=128, topk_tokens=2048, kv_len=32768, page=64, sblock=1),
           dict(B=1, S1=1, N=128, topk_tokens=2048, kv_len=8192, page=64, sblock=1)),
    "S2": (build_kvqsfa, dict(B=4, S1=4, N=128, topk_tokens=2048, kv_len=32768, page=64,
                              sblock=16),
           dict(B=1, S1=4, N=128, topk_tokens=2048, kv_len=8192, page=64, sblock=16)),
    "V1": (build_sas, dict(B=16, S1=1, S2=8192, N=64, D=512, ratio=4, k2=512),
           dict(B=4, S1=1, S2=2048, N=64, D=512, ratio=4, k2=256)),
    "V2": (build_sas, dict(B=1, S1=2048, S2=2048, N=64, D=512, ratio=128, k2=0),
           dict(B=1, S1=256, S2=128 * 8, N=64, D=512, ratio=128, k2=0)),
    "V3": (build_sas, dict(B=1, S1=1, S2=8192, N=64, D=512, ratio=4, k2=512, metadata=True),
           dict(B=1, S1=1, S2=2048, N=64, D=512, ratio=4, k2=256, metadata=True)),
}


def names():
    return list(SPARSE_CASES)


def build(name, preset):
    builder, full, demo = SPARSE_CASES[name]
    return builder(name + ("@demo" if preset == "demo" else ""), **(demo if preset == "demo"
                                                                       else full))


# ---- SparseAttnSharedkv cost model (docs/sparse_attn_sharedkv.md, "Cost model") ---------------

def sas_cost_model(reps=15, S2=4096, N=64, D=512):
    """Measures the planner's cost constants on this engine, on one thread, from the engine's own
    thread CPU time (no validation / canonicalization; robust to other processes of a shared
    machine): bf16 SCFA decode, N=64, D=512, min over `reps` calls.
      * unsplit items (B=8 decode tokens: 8 M blocks, no S2 split) with key lists of
        L = 128 + k2 keys (k2 = 64 .. 960): CPU/8 per item; a (per (query head x key) product)
        from the two longest lists;
      * B=1, k2=960: the same 1088 keys (17 tiles) as the planner's S2 chunks (4 chunks of at
        most 5 tiles, no chunk under 4 tiles) writing partial states: (compute CPU - one
        unsplit 1088-key item) / (chunks - 1) -> b (per extra item, its 64 state rows
        included); merge CPU over the chunks * N rows -> m (per row merged, epilogue included).
        (An intercept fitted to the unsplit items alone comes out near 80 us, which this
        experiment rules out as a per-item cost: it is the AMX kernel's per-key cost growing
        for short lists, see the docs.)
    Prints the measurements and returns the constants in picoseconds."""
    import openfia

    openfia.set_num_threads(1)

    def busy(B, k2):
        w = build_sas("cost", B=B, S1=1, S2=S2, N=N, D=D, ratio=4, k2=k2, metadata=True)
        best = None
        for _ in range(reps):
            _, _, b = w.busy()
            if best is None or b["workers_cpu"][0] < best["workers_cpu"][0]:
                best = b
        return best

    rows = [(128 + k2, busy(8, k2)["workers_cpu"][0] / 8) for k2 in (64, 192, 448, 960)]
    (l1, t1), (l2, t2) = rows[-2], rows[-1]
    a = (t2 - t1) / (N * (l2 - l1))
    split = busy(1, 960)
    # The planner's grid (metadata_plan.cc SasWorkUnits): about 36 chunks of whole 64-key
    # tiles, none under kSasMinChunkTiles = 4 tiles.
    L = 128 + 960
    tiles = (L + 63) // 64
    per = -(-tiles // min(36, max(1, tiles // 4)))
    chunks = -(-tiles // per)
    comp, merge = split["workers_cpu"][0], split["merge_cpu"][0]
    bb = max(0.0, (comp - t2) / (chunks - 1))
    m = merge / (chunks * N)
    for L_, t in rows:
        print(f"unsplit item, {L_:5d} keys: {t * 1e6:8.2f} us CPU (a*N*L: "
              f"{a * N * L_ * 1e6:8.2f} us)")
    print(f"split B=1, {L} keys in {chunks} chunks: compute {comp * 1e6:.1f} us CPU, merge "
          f"{merge * 1e6:.1f} us CPU")
    consts = {"ps_per_product": a * 1e12, "ps_per_item": bb * 1e12,
              "ps_per_merged_row": m * 1e12}
    print("constants (ps): " + ", ".join(f"{k} {v:.0f}" for k, v in consts.items()))
    return consts
