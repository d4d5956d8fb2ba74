"""Timing for the benchmark: the same preparation before every timed call of either side, cold
caches for decode, interleaved rounds, a progress line."""
from __future__ import annotations

import math
import sys
import time

SETTLE_S = 0.02
_TINY = {}


def settle(side=None):
    """Prepares the threads for one timed call of `side` ("openfia" or a PyTorch peer).

    First a 20 ms pause, so that no runtime's worker threads are still spinning: PyTorch's OpenMP
    workers spin for a while after each parallel region (the cache flush is one, and so is a
    PyTorch peer's call), and a call timed right after shares the two cores with them (S1 cold:
    7.4 ms right after the flush, 5.8 ms after the pause). Then one tiny untimed call of the same
    side's runtime, so that the timed call finds its own workers awake, as they are in a model's
    steady state, instead of waking them from an idle CPU (S1 warm, back to back: ~3.0 ms; after
    a 20 ms pause alone: ~4.1 ms). The tiny calls read none of the workload's data, so a flushed
    cache stays cold. Both sides get exactly the same treatment."""
    time.sleep(SETTLE_S)
    if side is None:
        return
    import torch
    if side == "openfia":
        import openfia
        if "fia" not in _TINY:  # two batches x two KV heads: several work items, both workers run
            q = torch.zeros(2, 2, 1, 64, dtype=torch.bfloat16)
            kv = torch.zeros(2, 2, 64, 64, dtype=torch.bfloat16)
            _TINY["fia"] = (q, kv)
        q, kv = _TINY["fia"]
        openfia.npu_fused_infer_attention_score(q, kv, kv, num_heads=2, num_key_value_heads=2,
                                                input_layout="BNSD")
    else:
        if "torch" not in _TINY:  # above PyTorch's parallel grain size: wakes its OpenMP team
            _TINY["torch"] = torch.ones(1 << 18)
        float(_TINY["torch"].sum())



class CacheFlusher:
    """Streams through 2x the last-level cache so that the next call reads its KV from memory."""

    def __init__(self, llc_bytes):
        import torch
        n = max(64 << 20, 2 * int(llc_bytes)) // 4
        self.buf = torch.ones(n, dtype=torch.float32)
        self.sink = 0.0

    def __call__(self):
        self.sink += float(self.buf.sum())



def probe_impl(openfia, call):
    """"engine", or "reference" when the fast engine does not take this call."""
    openfia.set_impl("engine")
    try:
        call()
        return "engine", ""
    except openfia.OpenfiaError as e:
        if "engine" not in str(e):
            raise
        return "reference", str(e)
    finally:
        openfia.set_impl("auto")


def time_interleaved(peers, runs, flush, cold, progress, name):
    """Times each (peer name, callable) `runs` times, interleaved: one call of each per round,
    each prepared by settle() (and a cache flush first when `cold`). Returns {peer: min s}."""
    best = {n: math.inf for n, _ in peers}
    for r in range(runs):
        for n, fn in peers:
            if flush is not None and cold:
                flush()
            settle(n)
            t0 = time.perf_counter()
            fn()
            best[n] = min(best[n], time.perf_counter() - t0)
            progress.step(f"{name}: {n} run {r + 1}/{runs}")
        if len(peers) < 3:  # the progress bar counts three calls per round
            progress.step(f"{name}: round {r + 1}", 3 - len(peers))
    return best


class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total, self.done, self.stream = max(total, 1), 0, stream
        self.tty = stream.isatty()
        self.t0 = time.perf_counter()
        self.last_line = ""

    def step(self, what, n=1):
        self.done += n
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        line = f"[{bar}] {100 * frac:3.0f}% {time.perf_counter() - self.t0:6.1f}s {what}"
        if self.tty:
            self.stream.write("\r" + line[:110].ljust(110))
            self.stream.flush()
        elif what.split(":")[0] != self.last_line:  # one line per workload when not a terminal
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_line = what.split(":")[0]

    def finish(self):
        if self.tty:
            self.stream.write("\n")
