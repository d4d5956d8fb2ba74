"""The benchmark's report: the markdown table, the summary lines and the roofline plot."""
from __future__ import annotations

import math

from .machine import adjacent_limit, bf16_limit, bf16_limit_name, bw_limit


def fmt_ms(t):
    return "—" if t is None or not math.isfinite(t) else (f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}")


def percent_of_limit(r, lim, threads, adjacent=False):
    """(value, what): decode (no MLA) is measured against streaming bandwidth, the rest against the
    bf16 dot peak (the issue's targets). adjacent: against the readings taken next to the workload
    (Prober) instead of the run's start."""
    t = r.get("t_openfia")
    if t is None:
        return None, ""
    bw_kind = r.get("limit") != "bf16" and r["decode"] and "+64" not in r["shape"]
    if bw_kind:
        bw = adjacent_limit(r, lim, "bw") if adjacent else bw_limit(lim, threads)
        return (100 * r["kv_bytes"] / t / 1e9 / bw if bw else None), "bw"
    # bf16: the sparse operators (many query heads share one KV head), prefill and MLA decode.
    pk = adjacent_limit(r, lim, "bf16") if adjacent else bf16_limit(lim, threads)
    return (100 * r["flops"] / t / 1e9 / pk if pk else None), "bf16"


def markdown_table(results, lim, threads):
    head = ("| workload | shape | openfia impl | openfia ms | GFLOP/s | KV GB/s | % of limit | "
            "torch ms | torch / openfia | torch* ms | torch* / openfia | max err openfia (tol) | "
            "max err torch |")
    lines = [head, "|" + "|".join(["---"] * 13) + "|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r.get('shape', '')} | skipped: {r['error']} |"
                         + " |" * 10)
            continue
        if not r["correct"]:
            lines.append(f"| {r['workload']} | {r['shape']} | {r['impl']} | FAILED: wrong result "
                         f"| — | — | — | — | — | — | — | {r['err_openfia']:.2e} ({r['tol']:.1e}) | "
                         f"{r['err_torch']:.2e} |")
            continue
        t = r["t_openfia"]
        # Sparse rows are gated elementwise: show how close the worst element came to its bound.
        err_s = (f"{r['err_openfia']:.2e} ({r['err_to_tol']:.2f} of tol)" if "err_to_tol" in r
                 else f"{r['err_openfia']:.2e} ({r['tol']:.1e})")
        pct, what = percent_of_limit(r, lim, threads)
        pct_s = f"{pct:.0f}% {what}" if pct is not None else "n/a"
        adj, _ = percent_of_limit(r, lim, threads, adjacent=True)
        if adj is not None:
            pct_s += f" ({adj:.0f}% adj.)"
        lines.append(
            f"| {r['workload']} | {r['shape']} | {r['impl']} | {fmt_ms(t)} | "
            f"{r['flops'] / t / 1e9:.1f} | {r['kv_bytes'] / t / 1e9:.2f} | {pct_s} | "
            f"{fmt_ms(r['t_torch'])} | {r['t_torch'] / t:.2f}x | {fmt_ms(r['t_torch_best'])} | "
            f"{r['t_torch_best'] / t:.2f}x | {err_s} | "
            f"{r['err_torch']:.2e} |")
    return "\n".join(lines)


def targets_text(results, lim, threads):
    by = {r["workload"].split("@")[0]: r for r in results if r.get("correct")}
    out = []

    def pct(n):
        return percent_of_limit(by[n], lim, threads)[0] if n in by else None

    def adj(n):  # ", X% of the limit measured next to it" where probes ran
        a = percent_of_limit(by[n], lim, threads, adjacent=True)[0] if n in by else None
        return "" if a is None else f" ({a:.0f}% of the limit measured next to it)"

    for n in ("D1", "D4", "D5"):
        if n in by:
            p = pct(n)
            out.append(f"- {n}: KV read at {'n/a' if p is None else f'{p:.0f}%'} of streaming "
                       f"bandwidth{adj(n)} (target >= 85%); {by[n]['t_torch'] / by[n]['t_openfia']:.2f}x "
                       f"PyTorch SDPA (target >= 2x; {by[n]['t_torch_best'] / by[n]['t_openfia']:.2f}x "
                       f"its best case)")
    for n, x in (("D2", 1.8), ("D3", 3.0)):
        if n in by and "D1" in by:
            out.append(f"- {n}: {by['D1']['t_openfia'] / by[n]['t_openfia']:.2f}x D1's speed "
                       f"(target >= {x}x)")
    for n in ("P1", "P2"):
        if n in by:
            p = pct(n)
            out.append(f"- {n}: {'n/a' if p is None else f'{p:.0f}%'} of the bf16 peak{adj(n)} "
                       f"(target >= 60%); {by[n]['t_torch'] / by[n]['t_openfia']:.2f}x PyTorch SDPA "
                       f"(target >= 1.5x)")
    if "P3" in by:
        p = pct("P3")
        out.append(f"- P3: {'n/a' if p is None else f'{p:.0f}%'} of the bf16 peak{adj('P3')} "
                   f"(target >= 60%)")
    if "V1" in by:
        p = pct("V1")
        out.append(f"- V1: {'n/a' if p is None else f'{p:.0f}%'} of the bf16 peak{adj('V1')} "
                   f"(target >= 60%); {by['V1']['t_torch'] / by['V1']['t_openfia']:.2f}x the "
                   f"PyTorch composition (target >= 5x)")
    return "\n".join(out)


def limits_text(lim, threads):
    if not lim:
        return ("Machine limits: not measured (build the C++ benchmark: "
                "`cmake --preset bench && cmake --build build/bench`), so no % column.")
    bf = (f"{lim['bf16_dot_gflops_core']:.0f} GFLOP/s per core (vdpbf16ps)"
          if lim.get("has_bf16_dot") else "n/a (no AVX512-BF16: the bf16 targets use the fp32 FMA "
          "peak)")
    if lim.get("has_bf16_dot") and lim["fma_fp32_gflops_core"] > lim["bf16_dot_gflops_core"]:
        bf += " (slower than the FMA here: the bf16 targets use the FMA peak)"
    return (f"Machine ({lim['cpu']}, {threads} of {lim['threads']} threads used): streaming read "
            f"{lim['read_bw_1t_gbs']:.1f} GB/s (1 thread), {lim['read_bw_all_gbs']:.1f} GB/s "
            f"({lim['threads']} threads); fp32 FMA {lim['fma_fp32_gflops_core']:.0f} GFLOP/s per "
            f"core; bf16 dot {bf}"
            + (f"; AMX bf16 {lim['amx_bf16_gflops_core']:.0f} GFLOP/s per core (information: "
               f"the targets use the bf16 dot peak)" if lim.get("amx_bf16_gflops_core") else "")
            + "."
            + (f" WARNING: other processes used {lim['foreign_load']:.1f} CPUs' worth of time while "
               f"the limits were measured (a busy machine): limits and timings are pessimistic."
               if lim.get("foreign_load", 0) > 0.25 else ""))


def roofline_png(results, lim, threads, path):
    """Arithmetic intensity (FLOP per byte of compulsory traffic) vs achieved GFLOP/s, with the
    measured bandwidth and compute roofs; one labelled point per workload and implementation."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no roofline.png"
    ok = [r for r in results if r.get("correct")]
    if not ok:
        return "no correct results to plot"
    fig, ax = plt.subplots(figsize=(11, 7), dpi=120)
    ais = [r["flops"] / r["io_bytes"] for r in ok]
    x_lo, x_hi = min(ais) / 3, max(ais) * 3
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    bw, pk = bw_limit(lim, threads), bf16_limit(lim, threads)
    fma = lim["fma_fp32_gflops_core"] * threads if lim else None
    if bw:
        top = pk or fma or max(r["flops"] / r["t_openfia"] / 1e9 for r in ok) * 2
        ax.plot(xs, [min(bw * x, top) for x in xs], "k-", lw=2,
                label=f"roof: {bw:.1f} GB/s streaming read x AI, capped by the bf16 peak")
    if pk:
        ax.axhline(pk, color="tab:red", ls="--", lw=1.2, label=f"bf16 peak {pk:.0f} GFLOP/s "
                   f"({threads} cores x {bf16_limit_name(lim)})")
    if fma:
        ax.axhline(fma, color="tab:orange", ls=":", lw=1.2,
                   label=f"fp32 FMA peak {fma:.0f} GFLOP/s ({threads} cores)")
    amx = (lim or {}).get("amx_bf16_gflops_core", 0) * threads
    if amx:
        ax.axhline(amx, color="tab:purple", ls="-.", lw=1.0,
                   label=f"AMX bf16 peak {amx:.0f} GFLOP/s (information: oneDNN/PyTorch use it)")
    styles = [("openfia", "t_openfia", "o", "tab:blue"), ("torch (gather+dequant+SDPA)", "t_torch",
              "x", "tab:green"), ("torch* (SDPA, contiguous bf16, decode GQA folded)",
                                  "t_torch_best", "^", "tab:gray")]
    seen = {}
    for label, key, marker, color in styles:
        pts = [(r["flops"] / r["io_bytes"], r["flops"] / r[key] / 1e9, r["workload"]) for r in ok
               if key in r and (key != "t_torch_best" or r["t_torch_best"] != r["t_torch"])]
        if not pts:
            continue
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=70, color=color,
                   label=label, zorder=3)
        for x, y, name in pts:
            # Points at the same intensity (D1, D4) would print their labels on top of each other.
            k = (round(math.log10(x), 1), round(math.log10(y), 1))
            seen[k] = seen.get(k, 0) + 1
            dy = 4 - 10 * (seen[k] - 1)
            ax.annotate(name.split("@")[0] + ("" if key == "t_openfia" else " (torch" +
                        ("*" if key == "t_torch_best" else "") + ")"),
                        (x, y), textcoords="offset points", xytext=(6, dy), fontsize=8, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity [FLOP / byte of K, V, Q and output]")
    ax.set_ylabel("achieved GFLOP/s (attended pairs only)")
    preset = "demo sizes (1/8)" if any("@demo" in r["workload"] for r in ok) else "full sizes"
    ax.set_title(f"openfia vs PyTorch SDPA: roofline, {threads} threads, {preset}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


SPARSE_PEERS = (
    "Rows S1, S2 (KvQuantSparseFlashAttention) and V1-V3 (SparseAttnSharedkv): torch = gather "
    "the selected rows through the page table + dequantize (int8 x tile scale -> bf16) + one SDPA "
    "with the heads folded into query rows (V*: plus a zero key whose bias is the head's sink), "
    "torch* = that SDPA on pre-gathered bf16 K/V; % of limit is of the bf16 peak (the faster of vdpbf16ps and the fp32 FMA); the "
    "error check is elementwise: the err column shows max |err| and the largest err / tol "
    "ratio over the elements (<= 1 passes).")
