"""The machine's limits for the benchmark's percentages: streaming read bandwidth and compute
peaks, measured by the C++ benchmark binary (openfia-bench --limits, and --probe-server for
readings next to each workload)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def find_repo_root(start: Path | None = None):
    """The openfia source tree containing `start` (default: the working directory), or None."""
    for base in [start or Path.cwd(), Path(__file__).resolve().parent]:
        for d in [base, *base.parents]:
            if (d / "tests" / "cases").is_dir() and (d / "include" / "openfia").is_dir():
                return d
    return None


# ---- machine limits (measured by the C++ benchmark binary) ------------------------------------

def find_bench_binary(explicit=None):
    cands = [explicit, os.environ.get("OPENFIA_BENCH_BIN")]
    root = find_repo_root()
    if root is not None:
        cands += [root / "build" / "bench" / "bench" / "openfia-bench",
                  root / "build" / "release" / "bench" / "openfia-bench"]
    cands.append(shutil.which("openfia-bench"))
    for c in cands:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def machine_limits(binary, cache_file=None):
    """The limits JSON from `openfia-bench --limits` (or from a file), or None."""
    if cache_file:
        return json.loads(Path(cache_file).read_text())
    if binary is None:
        return None
    try:
        r = subprocess.run([binary, "--limits"], capture_output=True, text=True, timeout=120,
                           check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        print(f"openfia.bench: could not read machine limits from {binary}: {e}", file=sys.stderr)
        return None


class Prober:
    """Limits measured next to each workload (`openfia-bench --probe-server`, machine_limits.h):
    one reading before and one after it, at the workload's thread count. On a shared VM the
    machine's speed drifts between minutes (the same FMA loop at 73% or 100% of its best), so a
    percentage of limits measured once at the start can be off by tens of percent; the table shows
    both."""

    def __init__(self, binary):
        self.p = None
        if binary is None:
            return
        try:
            self.p = subprocess.Popen([binary, "--probe-server"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
            if "ready" not in json.loads(self.p.stdout.readline()):
                raise ValueError("no ready line")
        except (OSError, ValueError) as e:
            print(f"openfia.bench: no probe server ({e}): no adjacent limits", file=sys.stderr)
            self.close()

    def probe(self, threads):
        if self.p is None:
            return None
        # PyTorch's OpenMP workers spin for a while after its last call; a reading taken while
        # they do sees one core fewer (a 2-thread FMA reading of ~100 instead of ~200 GFLOP/s).
        time.sleep(0.3)
        try:
            self.p.stdin.write(f"probe {threads}\n")
            self.p.stdin.flush()
            return json.loads(self.p.stdout.readline())
        except (OSError, ValueError):
            self.close()
            return None

    def close(self):
        if self.p is not None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.close()
                self.p.wait(timeout=10)
            except (OSError, subprocess.SubprocessError):
                self.p.kill()
        self.p = None


def adjacent_limit(r, lim, what):
    """The best of the readings taken right before and after workload r: streaming read GB/s
    (what == "bw") or the bf16 compute peak (bf16_limit), or None."""
    ps = [p for p in (r.get("probe_before"), r.get("probe_after")) if p]
    if not ps:
        return None
    if what == "bw":
        key = "read_bw_gbs"
    else:
        keys = ["fma_fp32_gflops"]
        if lim and lim.get("has_bf16_dot"):
            keys.append("bf16_dot_gflops")
        return max(p.get(k, 0) for p in ps for k in keys) or None
    return max(p[key] for p in ps) or None


def bw_limit(lim, threads):
    if not lim:
        return None
    # n threads can always do what one does (on a shared machine the all-thread measurement can
    # come out lower when another process takes a core).
    all_t = max(lim["read_bw_all_gbs"], lim["read_bw_1t_gbs"])
    if threads >= lim["threads"]:
        return all_t
    return min(lim["read_bw_1t_gbs"] * threads, all_t)


def bf16_limit(lim, threads):
    """The bf16 compute peak bf16 work is measured against: the faster of vdpbf16ps (where the
    CPU has it) and the fp32 FMA on widened bf16 inputs (bf16 x bf16 products are exact in fp32
    either way). The engine multiplies with the faster one: on AMD Zen 4 vdpbf16ps is 2x the
    FMA, on some Intel CPUs half of it, where a "% of the vdpbf16ps peak" would read over 100%."""
    if not lim:
        return None
    fma = lim["fma_fp32_gflops_core"]
    if lim.get("has_bf16_dot"):
        return max(lim["bf16_dot_gflops_core"], fma) * threads or None
    return fma * threads or None


def bf16_limit_name(lim):
    if not lim or not lim.get("has_bf16_dot"):
        return "fp32 FMA, no AVX512-BF16"
    return "vdpbf16ps" if lim["bf16_dot_gflops_core"] >= lim["fma_fp32_gflops_core"] else \
        "fp32 FMA, faster than vdpbf16ps here"



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
