"""Side by side: openfia against PyTorch compositions of the same attention, on model-shaped
workloads, in one process.

    python -m openfia.bench                    # every workload at demo size: a few minutes
    python -m openfia.bench --preset full      # the workloads' full sizes
    python -m openfia.bench --only D1,P1,S1    # some of them

Workloads: D1-D5 decode and P1-P3 prefill (npu_fused_infer_attention_score, Llama-3-8B and
DeepSeek MLA attention; the `model` lines of openfia/bench/model_cases.txt), S1-S2
(npu_kv_quant_sparse_flash_attention, DeepSeek-V3.2) and V1-V3 (npu_sparse_attn_sharedkv,
DeepSeek-V4). Each is checked for correctness first, then timed in rounds of one openfia call,
one call of the same computation composed in PyTorch, and one of PyTorch's best case, repeated
until the ratios are stable. Where ggml-python is installed (`pip install ggml-python`; never
required), ggml's CPU flash attention is timed beside them on the decode workloads one
ggml_flash_attn_ext node expresses (columns "ggml ms" and "ggml / openfia"). Writes
OUT/results.md (the report: a headline table, details and how each number is measured),
results.json (every round's time) and roofline.png. The machine's limits come from the C++
benchmark binary (openfia-bench) when it is found.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from . import (case_list, fia_workloads, machine, peers_ggml, report, runner, sparse_workloads,
               timing)

# How long each preset may repeat a workload (timing.Policy).
POLICIES = {"demo": dict(max_rounds=25, budget_s=20.0), "full": dict(max_rounds=40, budget_s=60.0)}


def main(argv=None, prog="python -m openfia.bench"):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["demo", "full"], default="demo",
                    help="demo (default): sequence lengths / 8, batch <= 4, smaller sparse "
                         "workloads; full: the workloads as written")
    ap.add_argument("--cases", help="a case list file whose `model` lines are the FIA workloads "
                    "(default: the package's model_cases.txt)")
    ap.add_argument("--only", help="comma-separated workload names (e.g. D1,P2,S1,V3)")
    ap.add_argument("--ops", choices=["all", "fia", "sparse"], default="all",
                    help="fia: the FusedInferAttentionScore workloads; sparse: "
                         "KvQuantSparseFlashAttention (S1, S2) and SparseAttnSharedkv (V1-V3); "
                         "all (default): both")
    ap.add_argument("--rounds", "--runs", dest="rounds", type=int, default=5,
                    help="rounds at least, per workload (default 5)")
    ap.add_argument("--max-rounds", type=int,
                    help="rounds at most (default 25 demo, 40 full)")
    ap.add_argument("--budget", type=float,
                    help="seconds of rounds at most per workload (default 20 demo, 60 full)")
    ap.add_argument("--stable", type=float, default=10.0,
                    help="stop once every ratio's ~95%% interval is within +-this percent "
                         "(default 10)")
    ap.add_argument("--threads", type=int, default=machine.cpu_count(),
                    help="threads for both sides (default: the CPUs this process may use)")
    ap.add_argument("--warm", action="store_true", help="do not flush caches before decode calls")
    ap.add_argument("--bench-bin", help="openfia-bench binary (for the machine limits)")
    ap.add_argument("--limits-json", help="read machine limits from this JSON file instead")
    ap.add_argument("--out", default="bench_out", help="output directory (default bench_out)")
    ap.add_argument("--sas-cost-model", action="store_true",
                    help="instead of the table: measure the SparseAttnSharedkv planner's cost "
                         "constants on this machine (one thread) and print them")
    args = ap.parse_args(argv)
    command = " ".join([prog] + list(sys.argv[1:] if argv is None else argv))
    if args.sas_cost_model:
        sparse_workloads.sas_cost_model()
        return 0

    import torch

    import openfia

    limits = dict(POLICIES[args.preset])
    if args.max_rounds:
        limits["max_rounds"] = args.max_rounds
    if args.budget:
        limits["budget_s"] = args.budget
    policy = timing.Policy(min_rounds=max(1, args.rounds), target=args.stable / 100, **limits)
    policy.max_rounds = max(policy.max_rounds, policy.min_rounds)
    threads = max(1, args.threads)
    torch.set_num_threads(threads)
    openfia.set_num_threads(threads)

    binary = machine.find_bench_binary(args.bench_bin)
    ggml = peers_ggml.Peer(threads)
    print(f"openfia {openfia.version()} (SIMD {openfia.simd_target()}), torch {torch.__version__}, "
          f"{threads} threads, preset {args.preset}; {ggml.why}", file=sys.stderr)
    note = report.cpp_note(args.out)
    if report.DEBUG_WARNING in note:  # right after the C++ part printed it
        print("Note: " + note[note.index("Its `***WARNING***"):], file=sys.stderr)
    if args.limits_json:
        print(f"machine limits from {args.limits_json}", file=sys.stderr)
    else:
        print("measuring machine limits" + (f" with {binary}" if binary else " (no openfia-bench "
              "binary found)") + "...", file=sys.stderr)
    lim = machine.machine_limits(binary, args.limits_json)

    cases = case_list.model_cases(args.cases)
    sparse = sparse_workloads.names()
    if args.ops == "sparse":
        cases = []
    if args.ops == "fia":
        sparse = []
    if args.only:
        want = set(args.only.split(","))
        unknown = want - {c.name for c in cases} - set(sparse)
        if unknown:
            ap.error(f"--only: no workload named {', '.join(sorted(unknown))} (there are "
                     f"{', '.join([c.name for c in cases] + sparse)})")
        cases = [c for c in cases if c.name in want]
        sparse = [n for n in sparse if n in want]
    cases = [fia_workloads.apply_preset(c, args.preset) for c in cases]
    # int8 full quantization (Q1): no PyTorch composition computes its int8 P . V semantics, so
    # the C++ benchmark times it (bitwise against the reference) and this table leaves it out.
    cpp_only = [c.name for c in cases if c.i("fullquant")]
    cases = [c for c in cases if not c.i("fullquant")]

    flush = None if args.warm else timing.CacheFlusher(lim["llc_bytes"] if lim
                                                      else machine.llc_bytes_guess())
    progress = timing.Progress(len(cases) + len(sparse))
    prober = machine.Prober(binary)
    results = []

    def bracketed(fn):  # one workload between two readings of the machine's limits
        before = prober.probe(threads)
        r = fn()
        r["probe_before"], r["probe_after"] = before, prober.probe(threads)
        return r

    for c in cases:
        try:
            w = fia_workloads.build(c)
        except Exception as e:  # noqa: BLE001 - an unbuildable workload is reported, not fatal
            results.append({"workload": c.name, "error": str(e)})
            continue
        try:
            results.append(bracketed(lambda: runner.run_fia(openfia, torch, w, policy, flush,
                                                            progress, ggml)))
        except openfia.OpenfiaError as e:
            results.append({"workload": c.name, "label": w.label(), "shape": w.describe(),
                            "error": str(e)})
        del w
    for n in sparse:
        try:
            w = sparse_workloads.build(n, args.preset)
            results.append(bracketed(lambda: runner.run_sparse(openfia, torch, w, policy, flush,
                                                               progress)))
        except openfia.OpenfiaError as e:
            results.append({"workload": n, "error": str(e)})
        w = None
    progress.finish()
    prober.close()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_problem = report.roofline_png(results, lim, threads, out / "roofline.png", args.preset)
    md = report.document(results, lim, threads, policy, dict(
        command=command, preset=args.preset, warm=args.warm, openfia=openfia.version(),
        simd=openfia.simd_target(), torch=torch.__version__), cpp_only, note, plot_problem is None,
        ggml.status())
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "openfia": openfia.version(), "simd": openfia.simd_target(), "torch": torch.__version__,
        "limits": lim, "threads": threads, "preset": args.preset, "warm": args.warm,
        "policy": vars(policy), "ggml": ggml.status(), "results": results}, indent=1))
    print()
    print(report.console_summary(results, lim, threads, policy, cpp_only, ggml.status()))
    print(f"\nwrote {out / 'results.md'} (the report, with how each number is measured), "
          f"{out / 'results.json'}" + (f", {out / 'roofline.png'}" if plot_problem is None
                                       else f" ({plot_problem})"))
    return 0 if all(r.get("correct", True) for r in results) else 1
