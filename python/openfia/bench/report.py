"""The benchmark's report: the headline table, the details, how each number is measured, and the
roofline plot."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

from .machine import adjacent_limit, bf16_limit, bf16_limit_name, bw_limit
from .peers_ggml import note as ggml_note

PEERS = {"openfia": "openfia", "torch": "PyTorch", "torch_best": "PyTorch best case"}


def fmt_ms(t):
    if t is None or not math.isfinite(t):
        return "—"
    return f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}"


def fmt_times(r, peer):
    """'min / median' milliseconds of a peer's rounds."""
    return f"{fmt_ms(r[f't_{peer}'])} / {fmt_ms(r[f'med_{peer}'])}"


def ratio_is_wide(ratio, target):
    v = ratio["value"]
    return not (v > 0 and (ratio["high"] - ratio["low"]) / (2 * v) <= target)


def fmt_ratio(r, peer, target):
    """'1.62x (1.55-1.70)', the median per-round ratio and its ~95% interval; ' ?' marks an
    interval wider than +-target, too wide to trust the ratio."""
    x = r[f"ratio_{peer}"]
    s = f"{x['value']:.2f}x ({x['low']:.2f}-{x['high']:.2f})"
    return s + (" ?" if ratio_is_wide(x, target) else "")


def percent_of_limit(r, lim, threads, adjacent=False):
    """(value, what) of openfia's fastest call: decode (no MLA) against the streaming read
    bandwidth ("bw"), the rest (prefill, MLA decode, the sparse operators, where many query heads
    share each key) against the bf16 compute peak ("bf16"). adjacent: against the readings taken
    next to the workload (machine.Prober) instead of the run's start."""
    t = r.get("t_openfia")
    if t is None:
        return None, ""
    bw_kind = r.get("limit") != "bf16" and r["decode"] and "+64" not in r["shape"]
    if bw_kind:
        bw = adjacent_limit(r, lim, "bw") if adjacent else bw_limit(lim, threads)
        return (100 * r["kv_bytes"] / t / 1e9 / bw if bw else None), "bw"
    pk = adjacent_limit(r, lim, "bf16") if adjacent else bf16_limit(lim, threads)
    return (100 * r["flops"] / t / 1e9 / pk if pk else None), "bf16"


def _problem(r):
    """The cell text of a workload that has no timing, or None."""
    if "error" in r:
        return f"not run: {r['error']}"
    if not r["correct"]:
        return "WRONG RESULT (not timed; see the details)"
    return None


def _has_ggml(ggml):
    """Whether the report has the ggml columns (peers_ggml.Peer.status(): `import ggml` worked)."""
    return bool(ggml and ggml["available"])


def _ggml_cells(r, target):
    """The 'ggml ms' and 'ggml / openfia' cells: "-" where ggml does not express the workload."""
    if "t_ggml" in r:
        return f" {fmt_times(r, 'ggml')} | {fmt_ratio(r, 'ggml', target)} |"
    return f" {'failed (see the details)' if 'ggml_error' in r else '-'} | - |"


def headline_table(results, target, ggml=None):
    """ggml: peers_ggml.Peer.status(); with ggml available, its two columns are added."""
    cols = _has_ggml(ggml)
    head = ("| workload | what it is | openfia ms | PyTorch ms | PyTorch / openfia | "
            "PyTorch best case ms | best case / openfia | rounds |"
            + (" ggml ms | ggml / openfia |" if cols else ""))
    lines = [head, "|" + "|".join(["---"] * (10 if cols else 8)) + "|"]
    for r in results:
        name = r["workload"]
        problem = _problem(r)
        if problem:
            lines.append(f"| {name} | {r.get('label', '')} | {problem} |" + " |" * 5
                         + (" - | - |" if cols else ""))
            continue
        same = " (same call)" if r["best_is_torch"] else ""
        lines.append(
            f"| {name} | {r['label']} | {fmt_times(r, 'openfia')} | {fmt_times(r, 'torch')} | "
            f"{fmt_ratio(r, 'torch', target)} | {fmt_times(r, 'torch_best')}{same} | "
            f"{fmt_ratio(r, 'torch_best', target)} | {r['rounds']}"
            f"{'' if r['stable'] else ' (not stable)'} |"
            + (_ggml_cells(r, target) if cols else ""))
    return "\n".join(lines)


def _ggml_error_cell(r):
    if "err_ggml" in r:
        return f" {r['err_ggml']:.2e} ({r['ggml_format']}) |"
    return f" {r['ggml_error']} |" if "ggml_error" in r else " - |"


def details_table(results, lim, threads, ggml=None):
    cols = _has_ggml(ggml)
    head = ("| workload | shape | openfia ran on | GFLOP/s | KV GB/s | share of this machine's "
            "limit | max error openfia (bound) | max error PyTorch |"
            + (" max error ggml (its format) |" if cols else ""))
    lines = [head, "|" + "|".join(["---"] * (9 if cols else 8)) + "|"]
    for r in results:
        extra = _ggml_error_cell(r) if cols else ""
        if "error" in r:
            lines.append(f"| {r['workload']} | {r.get('shape', '')} | not run |" + " |" * 5
                         + extra)
            continue
        # The sparse rows are checked element by element: how close the worst came to its bound.
        err = (f"{r['err_openfia']:.2e} ({r['err_to_tol']:.2f} of its bound)" if "err_to_tol" in r
               else f"{r['err_openfia']:.2e} ({r['tol']:.1e})")
        if not r["correct"]:
            lines.append(f"| {r['workload']} | {r['shape']} | {r['impl']} | — | — | — | "
                         f"WRONG: {err} | {r['err_torch']:.2e} |{extra}")
            continue
        t = r["t_openfia"]
        pct, what = percent_of_limit(r, lim, threads)
        share = "n/a" if pct is None else (
            f"{pct:.0f}% of {'read bandwidth' if what == 'bw' else 'bf16 peak'}")
        adj, _ = percent_of_limit(r, lim, threads, adjacent=True)
        if adj is not None:
            share += f" ({adj:.0f}% measured next to it)"
        lines.append(
            f"| {r['workload']} | {r['shape']} | {r['impl']} | {r['flops'] / t / 1e9:.1f} | "
            f"{r['kv_bytes'] / t / 1e9:.2f} | {share} | {err} | {r['err_torch']:.2e} |{extra}")
    return "\n".join(lines)


def limits_text(lim, threads):
    if not lim:
        return ("Machine limits: not measured (the C++ benchmark binary was not found: "
                "`cmake --preset bench && cmake --build build/bench` builds it), so no share of "
                "the machine's limit.")
    bf = (f"{lim['bf16_dot_gflops_core']:.0f} GFLOP/s per core (vdpbf16ps)"
          if lim.get("has_bf16_dot") else "n/a (no AVX512-BF16: bf16 work is measured against "
          "the fp32 FMA peak)")
    if lim.get("has_bf16_dot") and lim["fma_fp32_gflops_core"] > lim["bf16_dot_gflops_core"]:
        bf += " (slower than the FMA here: bf16 work is measured against the FMA peak)"
    return (f"Machine ({lim['cpu']}, {threads} of {lim['threads']} threads used): streaming read "
            f"{lim['read_bw_1t_gbs']:.1f} GB/s (1 thread), {lim['read_bw_all_gbs']:.1f} GB/s "
            f"({lim['threads']} threads); fp32 FMA {lim['fma_fp32_gflops_core']:.0f} GFLOP/s per "
            f"core; bf16 dot {bf}"
            + (f"; AMX bf16 {lim['amx_bf16_gflops_core']:.0f} GFLOP/s per core (for information)"
               if lim.get("amx_bf16_gflops_core") else "")
            + "."
            + (f" WARNING: other processes used {lim['foreign_load']:.1f} CPUs' worth of time "
               f"while the limits were measured (a busy machine): limits and timings are "
               f"pessimistic."
               if lim.get("foreign_load", 0) > 0.25 else ""))


def _bullets(items):
    """Markdown bullets, each wrapped to 96 columns."""
    return "\n".join(textwrap.fill(i, 96, initial_indent="- ", subsequent_indent="  ")
                     for i in items)


def method_text(policy, warm):
    """How every number of the tables is measured, in a user's words (markdown bullets)."""
    caches = ("warm caches" if warm else "cold caches (the last-level cache is flushed first: in "
              "a model the other layers evict a layer's KV cache between its calls)")
    return _bullets([
        "**Rows.** D1-D5 decode and P1-P3 prefill call `npu_fused_infer_attention_score` with "
        "Llama-3-8B attention (32 query heads sharing 8 KV heads, head size 128; P3: DeepSeek's "
        "MLA); S1-S2 call `npu_kv_quant_sparse_flash_attention` (DeepSeek-V3.2) and V1-V3 "
        "`npu_sparse_attn_sharedkv` (DeepSeek-V4). The FIA workloads are the `model` lines of "
        "`openfia/bench/model_cases.txt`; \"shape\" in the details gives every size.",
        "**openfia**: the Python call on the workload's own inputs (paged, quantized, ...), as a "
        "model makes it. **PyTorch**: the same computation composed in PyTorch the way a user "
        "would, all of it timed: gather the pages through the block table, unpack / dequantize "
        "to bf16, then `scaled_dot_product_attention` (sparse rows: gather the selected rows, one "
        "SDPA with the query heads folded into rows; V rows add a zero key whose bias is the "
        "head's sink). **PyTorch best case**: that SDPA alone on keys and values already "
        "gathered, dequantized and contiguous (decode: each KV head's query heads folded into "
        "rows, so every K/V byte is read once); for contiguous bf16 prefill it is the same call "
        "as PyTorch and not timed twice.",
        "**Times** are milliseconds, \"min / median\" over the rounds. A round times one call of "
        f"each side back to back, each after the same preparation: decode calls start with "
        f"{caches}, and every call starts with its runtime's worker threads awake (a 20 ms "
        "pause, then one tiny untimed call of the same library), as in a model's steady state.",
        "**Ratios** (\"PyTorch / openfia\" above 1: openfia is faster) are the median of the "
        "per-round ratios, with a ~95% confidence interval in brackets (order statistics of the "
        "per-round ratios; pairing the two calls of a round cancels the machine's slow drifts). "
        f"Rounds repeat until every ratio's interval is within +-{100 * policy.target:.0f}% (at "
        f"least {policy.min_rounds} rounds, at most {policy.max_rounds} or "
        f"{policy.budget_s:.0f} s per workload). **\"?\"** marks a ratio whose interval stayed "
        "wider: the machine was too noisy during that workload to trust it (rerun it alone: "
        "`python -m openfia.bench --only NAME`); \"(not stable)\" in the rounds column says the "
        "rounds ran out before that.",
        "**Correctness first**: each output is checked against float32 SDPA on the exactly "
        "dequantized inputs before any timing; a wrong result is reported and not timed. The "
        "details table gives the largest error and its bound.",
        "**Share of this machine's limit**: decode against the streaming read bandwidth (KV "
        "bytes read per second), the rest against the bf16 compute peak, both measured on this "
        "machine by the C++ benchmark (`openfia-bench --limits`); \"measured next to it\" uses "
        "readings taken right before and after that workload, as a shared machine's speed "
        "drifts.",
    ])


def _notes(results, cpp_only, ggml=None):
    notes = [r["note"] for r in results if r.get("note")]
    line = ggml_note(results, ggml)
    if line:
        notes.append(line)
    if cpp_only:
        notes.append(f"{', '.join(cpp_only)} (int8 full quantization): timed by the C++ "
                     "benchmark only (openfia-bench.txt): no PyTorch composition computes it.")
    if any(r.get("impl") == "reference" for r in results):
        notes.append("Rows whose openfia column says \"reference\" in the details ran on "
                     "openfia's float64 reference (the fast engine does not take them): their "
                     "times are the reference's.")
    return notes


def _legend(results, policy):
    wide = [r["workload"] for r in results if "ratio_torch" in r and any(
        ratio_is_wide(r[f"ratio_{p}"], policy.target) for p in ("torch", "torch_best", "ggml")
        if f"ratio_{p}" in r)]
    text = ("Times: milliseconds, min / median of the rounds. Ratios: how many times longer "
            f"PyTorch{' (or ggml)' if any('ratio_ggml' in r for r in results) else ''} takes "
            "(above 1: openfia is faster), the median of the rounds with its ~95% interval in "
            "brackets.")
    if wide:
        text += (f" \"?\": the interval is wider than +-{100 * policy.target:.0f}%, too wide to "
                 f"trust the ratio ({', '.join(wide)}): the machine was busy; rerun those alone.")
    return text


def preset_text(preset):
    if preset == "demo":
        return ("Demo sizes: every FIA sequence length is 1/8 of the workload's and at most 4 "
                "sequences; the sparse workloads have smaller batches, caches and top-k. These "
                "are not the full-size numbers (`--preset full`).")
    return "Full sizes: the workloads as written."


def document(results, lim, threads, policy, run, cpp_only, cpp_text, with_plot, ggml=None):
    """The report (markdown). run: command, preset, warm, openfia, simd, torch. ggml:
    peers_ggml.Peer.status() (None: no ggml column and no line about it)."""
    import datetime

    cpu = lim["cpu"] if lim else "CPU not measured"
    notes = "".join(f"- {n}\n" for n in _notes(results, cpp_only, ggml))
    return (
        f"# openfia against PyTorch\n\n"
        f"{datetime.date.today().isoformat()}, {cpu}, {threads} threads; openfia {run['openfia']} "
        f"(SIMD target {run['simd']}), PyTorch {run['torch']}.\n"
        f"Command: `{run['command']}`\n\n{preset_text(run['preset'])}\n\n"
        f"## Results\n\n{headline_table(results, policy.target, ggml)}\n\n"
        f"{_legend(results, policy)}\n\n{notes}"
        f"\n## Details\n\n{limits_text(lim, threads)}\n\n"
        f"{details_table(results, lim, threads, ggml)}"
        f"\n\n## How the numbers are measured\n\n{method_text(policy, run['warm'])}\n"
        + (_bullets([cpp_text]) + "\n" if cpp_text else "")
        + ("\n![roofline: achieved GFLOP/s against arithmetic intensity](roofline.png)\n"
           if with_plot else ""))


def console_summary(results, lim, threads, policy, cpp_only, ggml=None):
    lines = [limits_text(lim, threads), "", headline_table(results, policy.target, ggml), "",
             _legend(results, policy)]
    lines += [f"- {n}" for n in _notes(results, cpp_only, ggml)]
    return "\n".join(lines)


DEBUG_WARNING = "Library was built as DEBUG"


def cpp_note(out_dir):
    """What the C++ benchmark's own table in openfia-bench.txt measures (it sits in the same
    output directory when scripts/bench.sh ran it), and what its Google Benchmark warning means.
    Empty when there is no such file."""
    path = Path(out_dir) / "openfia-bench.txt"
    if not path.is_file():
        return ""
    text = path.read_text(errors="replace")
    note = ("`openfia-bench.txt` is the C++ benchmark's own run (`openfia-bench`): openfia alone, "
            "called from C++ with no Python in between, at 1 thread and at every thread; each "
            "decode call starts with cold caches *and* with openfia's worker threads asleep, "
            "as after any pause. Its times are therefore higher than this table's openfia "
            "column, whose calls find the workers awake; read it for thread scaling, the decode "
            "time against the KV length and memory use, and this table for the comparison with "
            "PyTorch.")
    if DEBUG_WARNING in text:
        note += (" Its `***WARNING*** Library was built as DEBUG` line is Google Benchmark's: "
                 "the libbenchmark the system provides (Debian's libbenchmark-dev) was compiled "
                 "without NDEBUG (its own assertions on), which it reports as a debug build. It "
                 "concerns that library, not openfia (built as Release), and no time in either "
                 "table: openfia-bench times each call itself, around the call alone.")
    return note


# ---- the roofline plot ---------------------------------------------------------------------------

_STYLES = (("openfia", "t_openfia", "o", "tab:blue"),
           ("PyTorch (gather, dequantize, SDPA)", "t_torch", "X", "tab:green"),
           ("PyTorch best case (SDPA on prepared K/V)", "t_torch_best", "^", "tab:gray"))


def _place_labels(ax, fig, points, texts, markers):
    """Writes each text next to its point at the first of several offsets where it overlaps
    neither an earlier label nor a marker (`markers`: every plotted point), in display
    coordinates: the nearest free spot."""
    renderer = fig.canvas.get_renderer()
    taken = []
    marker_boxes = []
    for x, y in markers:
        px, py = ax.transData.transform((x, y))
        marker_boxes.append((px - 6, py - 6, px + 6, py + 6))
    offsets = [(8, -4), (8, 8), (8, -16), (-8, -4), (-8, 8), (-8, -16), (8, 20), (8, -28),
               (-8, 20), (-8, -28), (8, 32), (8, -40), (-8, 32), (-8, -40)]

    def overlaps(b):
        return any(not (b[2] < o[0] or b[0] > o[2] or b[3] < o[1] or b[1] > o[3])
                   for o in taken + marker_boxes)

    for (x, y), text in zip(points, texts):
        for dx, dy in offsets:
            a = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy),
                            fontsize=8, ha="left" if dx > 0 else "right", va="bottom",
                            bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none",
                                      alpha=0.8))
            e = a.get_window_extent(renderer)
            box = (e.x0, e.y0, e.x1, e.y1)
            if not overlaps(box) or (dx, dy) == offsets[-1]:
                taken.append(box)
                break
            a.remove()
    return taken


def roofline_png(results, lim, threads, path, preset):
    """Arithmetic intensity (FLOPs per byte of compulsory traffic) against achieved GFLOP/s with
    the measured bandwidth and compute roofs; each workload's three timings on one vertical line
    (same work, same bytes), the workload named once."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no roofline.png"
    ok = [r for r in results if r.get("correct") and "t_openfia" in r]
    if not ok:
        return "no correct results to plot"
    fig, ax = plt.subplots(figsize=(12, 6.5), dpi=120)
    ais = [r["flops"] / r["io_bytes"] for r in ok]
    x_lo, x_hi = min(ais) / 2, max(ais) * 2
    xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
    bw, pk = bw_limit(lim, threads), bf16_limit(lim, threads)
    fma = lim["fma_fp32_gflops_core"] * threads if lim else None
    if bw:
        top = pk or fma or max(r["flops"] / r["t_openfia"] / 1e9 for r in ok) * 2
        ax.plot(xs, [min(bw * x, top) for x in xs], "k-", lw=2,
                label=f"memory roof: {bw:.1f} GB/s read x intensity, up to the bf16 peak")
    if pk:
        ax.axhline(pk, color="tab:red", ls="--", lw=1.2, label=f"bf16 compute peak {pk:.0f} "
                   f"GFLOP/s ({threads} cores, {bf16_limit_name(lim)})")
    if fma:
        ax.axhline(fma, color="tab:orange", ls=":", lw=1.2,
                   label=f"fp32 FMA peak {fma:.0f} GFLOP/s ({threads} cores)")
    amx = (lim or {}).get("amx_bf16_gflops_core", 0) * threads
    if amx:
        ax.axhline(amx, color="tab:purple", ls="-.", lw=1.0,
                   label=f"AMX bf16 peak {amx:.0f} GFLOP/s (for information)")
    # Each workload: its timings joined by a thin line (same x: same work and bytes).
    for r in ok:
        x = r["flops"] / r["io_bytes"]
        ys = [r["flops"] / r[k] / 1e9 for _, k, _, _ in _STYLES]
        ax.plot([x] * len(ys), ys, "-", color="0.6", lw=0.8, zorder=2)
    every = []
    for label, key, marker, color in _STYLES:
        pts = [(r["flops"] / r["io_bytes"], r["flops"] / r[key] / 1e9) for r in ok
               if key != "t_torch_best" or not r["best_is_torch"]]
        every += pts
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=60, color=color,
                   label=label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs per byte of memory traffic (arithmetic intensity)")
    ax.set_ylabel("achieved GFLOP/s, fastest round (higher is faster)")
    sizes = "demo sizes" if preset == "demo" else "full sizes"
    ax.set_title(f"openfia and PyTorch against this machine's limits ({threads} threads, {sizes})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.canvas.draw()  # the layout the labels are placed in
    _place_labels(ax, fig, [(r["flops"] / r["io_bytes"], r["flops"] / r["t_openfia"] / 1e9)
                            for r in ok], [r["workload"].split("@")[0] for r in ok], every)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return None
