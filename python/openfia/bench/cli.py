"""Side-by-side benchmark: openfia vs PyTorch scaled_dot_product_attention on model workloads.

    python -m openfia.bench --preset demo      # every workload at 1/8 size, a few minutes
    python -m openfia.bench --preset full      # the issue's exact shapes

For each `model` workload of the package's model_cases.txt it runs, in the same process and
interleaved (one call of each per round, min over rounds):
  * openfia.npu_fused_infer_attention_score on the workload's exact inputs (paged, quantized...);
  * "torch" : the fair PyTorch composition of the same computation, all of it timed: gather the
    pages by block_table, unpack/dequantize to bf16, scaled_dot_product_attention(enable_gqa=True);
  * "torch*": PyTorch's best case: SDPA on K/V already dequantized into contiguous bf16, and for
    decode the query heads of each KV group folded into query rows (no enable_gqa expansion). For
    contiguous bf16 prefill it is the same call as "torch" and is not timed twice.
Before timing, every output is checked against float32 SDPA on the exactly dequantized inputs; a
workload whose openfia output is wrong is reported as FAILED with no speed. Decode workloads run
with cold caches (the last-level cache is flushed before each timed call, as in serving, where the
other layers evict a layer's KV cache). Machine limits come from the C++ benchmark
(`openfia-bench --limits`). Writes bench_out/results.md, results.json and roofline.png.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import case_list, fia_workloads, machine, report, runner, sparse_workloads, timing


def main(argv=None, prog="python -m openfia.bench"):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["demo", "full"], default="demo")
    ap.add_argument("--cases", help="case list file whose `model` lines are the FIA workloads "
                    "(default: the package's model_cases.txt)")
    ap.add_argument("--only", help="comma-separated workload names (e.g. D1,P2,S1,V3)")
    ap.add_argument("--ops", choices=["all", "fia", "sparse"], default="all",
                    help="fia: the FusedInferAttentionScore model workloads; sparse: "
                         "KvQuantSparseFlashAttention (S1, S2) and SparseAttnSharedkv (V1-V3); "
                         "all (default): both")
    ap.add_argument("--runs", type=int, help="timed rounds per workload (default 3 demo, 5 full)")
    ap.add_argument("--threads", type=int, default=machine.cpu_count(),
                    help="threads for both sides")
    ap.add_argument("--warm", action="store_true", help="do not flush caches before decode calls")
    ap.add_argument("--bench-bin", help="openfia-bench binary (for the machine limits)")
    ap.add_argument("--limits-json", help="read machine limits from this JSON file instead")
    ap.add_argument("--out", default="bench_out", help="output directory (default bench_out)")
    ap.add_argument("--sas-cost-model", action="store_true",
                    help="instead of the table: measure the SparseAttnSharedkv planner's cost "
                         "constants on this machine (one thread) and print them")
    args = ap.parse_args(argv)
    if args.sas_cost_model:
        sparse_workloads.sas_cost_model()
        return 0

    import torch

    import openfia

    runs = args.runs or (3 if args.preset == "demo" else 5)
    threads = max(1, args.threads)
    torch.set_num_threads(threads)
    openfia.set_num_threads(threads)

    binary = machine.find_bench_binary(args.bench_bin)
    print(f"openfia {openfia.version()} (SIMD {openfia.simd_target()}), torch {torch.__version__}, "
          f"{threads} threads, preset {args.preset}", file=sys.stderr)
    if args.limits_json:
        print(f"machine limits from {args.limits_json}", file=sys.stderr)
    else:
        print("measuring machine limits" + (f" with {binary}" if binary else " (no openfia-bench "
              "binary found)") + "...", file=sys.stderr)
    lim = machine.machine_limits(binary, args.limits_json)

    source = args.cases or str(case_list.MODEL_CASES_PATH)
    cases = case_list.model_cases(args.cases)
    sparse = sparse_workloads.names()
    if args.ops == "sparse":
        cases = []
    if args.ops == "fia":
        sparse = []
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in cases if c.name in want]
        sparse = [n for n in sparse if n in want]
    cases = [fia_workloads.apply_preset(c, args.preset) for c in cases]
    # int8 full quantization (Q1): no PyTorch composition computes its int8 P . V semantics, so
    # the C++ benchmark times it (bitwise against the reference) and this table leaves it out.
    cpp_only = [c.name for c in cases if c.i("fullquant")]
    cases = [c for c in cases if not c.i("fullquant")]
    print(f"{len(cases)} FIA workloads from {source}, {len(sparse)} sparse-operator workloads",
          file=sys.stderr)

    flush = None if args.warm else timing.CacheFlusher(lim["llc_bytes"] if lim
                                                      else machine.llc_bytes_guess())
    progress = timing.Progress((len(cases) + len(sparse)) * (1 + 3 * runs))
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
            progress.step(f"{c.name}: skipped", 1 + 3 * runs)
            continue
        try:
            results.append(bracketed(lambda: runner.run_fia(openfia, torch, w, runs, flush,
                                                            progress)))
        except openfia.OpenfiaError as e:
            results.append({"workload": c.name, "shape": w.describe(), "error": str(e)})
            progress.step(f"{c.name}: rejected", 1 + 3 * runs)
        del w
    for n in sparse:
        try:
            w = sparse_workloads.build(n, args.preset)
            results.append(bracketed(lambda: runner.run_sparse(openfia, torch, w, runs, flush,
                                                               progress)))
        except openfia.OpenfiaError as e:
            results.append({"workload": n, "error": str(e)})
            progress.step(f"{n}: rejected", 1 + 3 * runs)
        w = None
    progress.finish()
    prober.close()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = report.markdown_table(results, lim, threads)
    targets = report.targets_text(results, lim, threads)
    note = report.roofline_png(results, lim, threads, out / "roofline.png")
    label = ("DEMO PRESET: every FIA sequence length is 1/8 of the issue's and B <= 4; the "
             "sparse-operator rows (S*, V*) use reduced B, N, KV and top-k; these are not the "
             "full-size numbers (run --preset full)."
             if args.preset == "demo" else "Full preset: the issue's exact shapes.")
    impls = sorted({r.get("impl") for r in results if r.get("impl")})
    notes = [r["note"] for r in results if r.get("note")]
    if cpp_only:
        notes.append(f"{', '.join(cpp_only)} (int8 full quantization): timed by the C++ benchmark "
                     f"only (openfia-bench.txt), as no PyTorch composition computes it.")
    notes_md = "".join(f"- {n}\n" for n in notes) + ("\n" if notes else "")
    impl_note = ("" if impls == ["engine"] else
                 "\n\nSome workloads ran on openfia's fp64 reference (the fast engine does not "
                 "support them yet): those timings measure the reference, not the engine.")
    md = (f"# openfia benchmark\n\n{label}\n\n{report.limits_text(lim, threads)}\n\n"
          f"Decode runs with {'warm' if args.warm else 'cold'} caches; min of {runs} interleaved "
          f"rounds; torch = gather + dequantize + SDPA(enable_gqa=True) per call, torch* = SDPA on "
          f"pre-dequantized contiguous bf16 K/V (decode: GQA group folded into query rows). "
          f"% of limit: of the limits above (measured at the start); (adj.): of the best of two "
          f"readings at the same thread count taken right before and right after that workload "
          f"(openfia-bench --probe-server), since this machine's speed can drift between minutes. "
          f"{report.SPARSE_PEERS}{impl_note}\n\n{table}\n\n{notes_md}"
          f"## Targets (reported, not asserted)\n\n"
          f"{targets}\n\n![roofline](roofline.png)\n")
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"limits": lim, "threads": threads,
                                                  "preset": args.preset, "runs": runs,
                                                  "results": results}, indent=1))
    print()
    print(f"{label}\n{report.limits_text(lim, threads)}\n")
    print(table)
    for n in notes:
        print(f"- {n}")
    print("\nTargets (reported, not asserted):\n" + targets)
    print(f"\nwrote {out / 'results.md'}, {out / 'results.json'}"
          + (f", {out / 'roofline.png'}" if note is None else f" ({note})"))
    return 0 if all(r.get("correct", True) for r in results) else 1
