"""Timing for the benchmark: the same preparation before every timed call of either side, cold
caches for decode, rounds of one call of each side repeated until their ratios are stable, a
progress line."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from .stats import paired_ratio

SETTLE_S = 0.02
_TINY = {}


def settle(side=None, wake=None):
    """Prepares the threads for one timed call of `side` ("openfia", a PyTorch peer, or a peer
    with its own `wake`: a tiny call of that peer's runtime, such as ggml's thread pool).

    First a 20 ms pause, so that no runtime's worker threads are still spinning: PyTorch's OpenMP
    workers spin for a while after each parallel region (the cache flush is one, and so is a
    PyTorch peer's call), and a call timed right after shares the two cores with them (S1 cold:
    7.4 ms right after the flush, 5.8 ms after the pause). Then one tiny untimed call of the same
    side's runtime, so that the timed call finds its own workers awake, as they are in a model's
    steady state, instead of waking them from an idle CPU (S1 warm, back to back: ~3.0 ms; after
    a 20 ms pause alone: ~4.1 ms). The tiny calls read none of the workload's data, so a flushed
    cache stays cold. Both sides get exactly the same treatment."""
    time.sleep(SETTLE_S)
    if wake is not None:
        wake()
        return
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


@dataclass
class Rounds:
    """What repeat_until_stable measured: every call's seconds per peer, in round order."""
    times: dict            # peer name -> [seconds per round]
    stable: bool           # every ratio's interval narrowed to the target
    seconds: float         # wall time spent

    def ratio(self, peer, base="openfia"):
        return paired_ratio(self.times[peer], self.times[base])


@dataclass
class Policy:
    """When repeat_until_stable stops: after at least `min_rounds` rounds, once every ratio of a
    PyTorch peer to openfia has a ~95% interval within +-`target` of it; or, unstable, after
    `max_rounds` rounds or `budget_s` seconds."""
    min_rounds: int = 5
    max_rounds: int = 25
    budget_s: float = 20.0
    target: float = 0.10


def repeat_until_stable(peers, policy, flush, cold, progress, name):
    """Times rounds of one call of each (peer name, callable[, wake]), in order, each prepared by
    settle() (and a cache flush first when `cold`), until the ratios are stable or the policy
    gives up. The first peer is the base of the ratios."""
    base = peers[0][0]
    times = {p[0]: [] for p in peers}
    t0 = time.perf_counter()
    stable = False
    for r in range(policy.max_rounds):
        for n, fn, *wake in peers:
            if flush is not None and cold:
                flush()
            settle(n, *wake)
            t = time.perf_counter()
            fn()
            times[n].append(time.perf_counter() - t)
        if r + 1 < policy.min_rounds:
            progress.update(name, f"round {r + 1}")
            continue
        widths = [paired_ratio(times[p[0]], times[base]).rel_halfwidth for p in peers[1:]]
        worst = max(widths, default=0.0)
        progress.update(name, f"round {r + 1}, ratios within +-{100 * worst:.0f}%")
        if worst <= policy.target:
            stable = True
            break
        if time.perf_counter() - t0 > policy.budget_s:
            break
    return Rounds(times, stable, time.perf_counter() - t0)


class Progress:
    """One status line: which workload of how many, and what it is doing (rewritten in place on
    a terminal; one line per workload otherwise)."""

    def __init__(self, total, stream=sys.stderr):
        self.total, self.index, self.stream = total, 0, stream
        self.tty = stream.isatty()
        self.t0 = time.perf_counter()
        self.name = None

    def update(self, name, what):
        if name != self.name:
            if self.name is not None and self.tty:
                self.stream.write("\n")
            self.index += 1
            self.name = name
            new = True
        else:
            new = False
        line = (f"[{self.index}/{self.total}] {time.perf_counter() - self.t0:6.1f}s {name}: "
                f"{what}")
        if self.tty:
            self.stream.write("\r" + line[:110].ljust(110))
            self.stream.flush()
        elif new:
            self.stream.write(line + "\n")
            self.stream.flush()

    def result(self, name, what):
        """The workload's outcome: its own line, on a terminal and in a log alike."""
        self.update(name, what)
        if not self.tty:
            self.stream.write(f"      {name}: {what}\n")
            self.stream.flush()

    def finish(self):
        if self.tty and self.name is not None:
            self.stream.write("\n")
