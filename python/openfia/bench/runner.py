"""One workload through openfia and its PyTorch peers: the correctness check first (a wrong
result is reported and not timed), then rounds of one call of each until the ratios are stable
(timing.repeat_until_stable)."""
from __future__ import annotations

import math

from .stats import median
from .timing import probe_impl, repeat_until_stable

BF16_U = 2.0 ** -8  # unit roundoff of bfloat16


def run_fia(openfia, torch, w, policy, flush, progress, ggml=None):
    """ggml: a peers_ggml.Peer, whose flash attention is timed as a further peer where it
    expresses the workload."""
    import torch.nn.functional as F

    res = {"workload": w.name, "label": w.label(), "shape": w.describe(), "decode": w.decode,
           "flops": w.flops, "kv_bytes": w.kv_bytes, "io_bytes": w.io_bytes}
    impl, why = probe_impl(openfia, lambda: openfia.npu_fused_infer_attention_score(
        *w.fia_args, **w.fia_kwargs))
    res["impl"], res["impl_note"] = impl, why
    progress.update(w.name, f"first call (openfia {impl}), checking the result")

    # ---- correctness, before any timing ----
    out = openfia.npu_fused_infer_attention_score(*w.fia_args, **w.fia_kwargs)[0]
    o_fia = w.out_to_bnsd(out).float()
    ref = F.scaled_dot_product_attention(w.q_bnsd.float(), w.k_ref, w.v_ref,
                                         **w.sdpa_kwargs).float()

    def call_fair():
        k, v = w.fair()
        return F.scaled_dot_product_attention(w.q_bnsd, k, v, **w.sdpa_kwargs)

    B, N, S, Dq = w.q_bnsd.shape
    KVN = w.k_best.shape[1]
    if w.decode:
        # PyTorch's fastest form of GQA decode: the query heads sharing a KV head become query rows
        # of one head ([B, KVN, G, D]), so each K/V byte is read once (no enable_gqa expansion).
        q_fold = w.q_bnsd.reshape(B, KVN, (N // KVN) * S, Dq)
        best_kwargs = {"scale": w.sdpa_kwargs["scale"]}

        def call_best():
            o = F.scaled_dot_product_attention(q_fold, w.k_best, w.v_best, **best_kwargs)
            return o.reshape(B, N, S, o.shape[-1])
    else:
        def call_best():
            return F.scaled_dot_product_attention(w.q_bnsd, w.k_best, w.v_best, **w.sdpa_kwargs)

    o_fair = call_fair().float()
    o_best = call_best().float()
    err = lambda o: float((o - ref).abs().max()) if o.shape == ref.shape else math.inf  # noqa: E731
    res["err_openfia"], res["err_torch"] = err(o_fia), err(o_fair)
    res["err_torch_best"] = err(o_best)
    # openfia must be within 4x of PyTorch's own bf16 error on the same inputs, or within two
    # output roundings of the largest output (whichever is larger). A wrong mask, scale or
    # dequantization gives errors of the size of the output itself, orders of magnitude above.
    res["tol"] = max(4 * res["err_torch_best"], 2 * BF16_U * float(ref.abs().max()))
    res["correct"] = bool(res["err_openfia"] <= res["tol"])
    if not res["correct"]:
        progress.update(w.name, "WRONG RESULT, not timed")
        return res

    # ---- timing: rounds of one call of each until the ratios are stable ----
    peers = [("openfia", lambda: openfia.npu_fused_infer_attention_score(*w.fia_args,
                                                                         **w.fia_kwargs)),
             ("torch", call_fair)]
    # For contiguous bf16 prefill the best case is the same SDPA call: not timed twice.
    if w.paged_or_quant or w.decode:
        peers.append(("torch_best", call_best))
    g = None
    try:
        g = ggml.build(w) if ggml is not None else None
    except Exception as e:  # noqa: BLE001 - an optional peer that fails is reported, not fatal
        res["ggml_error"] = f"{type(e).__name__}: {e}"
    try:
        if g is not None:
            # ggml's error is shown, never a reason not to time it: its q8_0 / q4_0 formats
            # round differently from the workload's int8 / int4 scales.
            progress.update(w.name, f"checking ggml ({g.format})")
            g()  # and one more untimed call: openfia had two (probe_impl and its check)
            g()
            res["ggml_format"], res["err_ggml"] = g.format, err(g.output())
            peers.append(("ggml", g, g.wake))
        return add_timing(res, repeat_until_stable(peers, policy, flush, w.decode, progress,
                                                   w.name), progress)
    finally:
        if g is not None:
            g.close()


def add_timing(res, rounds, progress):
    """The timing fields of a result record: every round's seconds, min and median per peer,
    the ratios of the PyTorch peers to openfia with their intervals, and whether they settled.
    A peer that was not timed separately (the best case where it is the same call as the
    composition) takes the composition's numbers."""
    res["times"] = rounds.times
    res["rounds"] = len(rounds.times["openfia"])
    res["stable"] = rounds.stable
    res["seconds"] = rounds.seconds
    for peer in ("openfia", "torch", "torch_best") + (("ggml",) if "ggml" in rounds.times
                                                      else ()):
        src = peer if peer in rounds.times else "torch"
        res[f"t_{peer}"] = min(rounds.times[src])
        res[f"med_{peer}"] = median(rounds.times[src])
        if peer != "openfia":
            r = rounds.ratio(src)
            res[f"ratio_{peer}"] = {"value": r.value, "low": r.low, "high": r.high}
    res["best_is_torch"] = "torch_best" not in rounds.times
    x = res["ratio_torch"]
    progress.result(res["workload"], f"{res['rounds']} rounds in {rounds.seconds:.0f} s"
                    f"{'' if rounds.stable else ' (not stable)'}; openfia "
                    f"{res['med_openfia'] * 1e3:.3f} ms median, PyTorch / openfia "
                    f"{x['value']:.2f}x ({x['low']:.2f}-{x['high']:.2f})")
    return res


def run_sparse(openfia, torch, w, policy, flush, progress):
    res = {"workload": w.name, "label": w.label, "shape": w.shape, "decode": w.decode,
           "flops": w.flops, "kv_bytes": w.kv_bytes, "io_bytes": w.io_bytes, "limit": "bf16"}
    if w.note:
        res["note"] = w.note
    impl, why = probe_impl(openfia, w.call_openfia)
    res["impl"], res["impl_note"] = impl, why
    progress.update(w.name, f"first call (openfia {impl}), checking the result")

    o_fia = w.out_to_rows(w.call_openfia()).float()
    prepared = w.prep()
    ref = w.sdpa(prepared, torch.float32).float()

    def call_fair():
        return w.sdpa(w.prep())

    o_fair = call_fair().float()
    o_best = w.sdpa(prepared).float()
    err = lambda o: float((o - ref).abs().max()) if o.shape == ref.shape else math.inf  # noqa: E731
    res["err_openfia"], res["err_torch"] = err(o_fia), err(o_fair)
    res["err_torch_best"] = err(o_best)
    # Elementwise bound: output rounding u/2 |out| + P rounded to bf16 u/2 sum P|v| (computed:
    # SDPA with |V|), doubled, plus the float32 reference's own accumulation error.
    tol = (BF16_U * (ref.abs() + w.sdpa(prepared, torch.float32, abs_v=True).float())
           + w.acc_len * 2.0 ** -24 * w.vmax)
    ratio = (o_fia - ref).abs() / tol if o_fia.shape == ref.shape else None
    worst = int(ratio.flatten().argmax()) if ratio is not None else 0
    res["tol"] = float(tol.flatten()[worst])
    res["err_to_tol"] = float(ratio.max()) if ratio is not None else math.inf
    res["correct"] = bool(torch.isfinite(o_fia).all()) and res["err_to_tol"] <= 1.0
    if not res["correct"]:
        progress.update(w.name, "WRONG RESULT, not timed")
        return res

    peers = [("openfia", w.call_openfia), ("torch", call_fair),
             ("torch_best", lambda: w.sdpa(prepared))]
    add_timing(res, repeat_until_stable(peers, policy, flush, w.decode, progress, w.name),
               progress)
    if w.report is not None:
        res["note"] = w.report(res)
    return res
