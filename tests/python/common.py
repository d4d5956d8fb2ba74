"""Shared helpers of the pytest suite: run a case through openfia, compare with bounds."""
from __future__ import annotations

import torch

import openfia
from cases import call_kwargs

F64 = torch.float64


def run_openfia(inputs):
    q, k, v, kw = call_kwargs(inputs)
    return openfia.npu_fused_infer_attention_score(q, k, v, **kw)


def assert_within(actual, expected, bound, what):
    """Every element within its bound; NaN and +-Inf positions identical. No fraction-based
    pass criterion: one element outside its bound fails, and the message names the worst."""
    a = actual.to(F64)
    e = expected.to(F64)
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}"
    for name, f in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf)):
        am, em = f(a), f(e)
        if not torch.equal(am, em):
            idx = (am != em).nonzero()[0].tolist()
            raise AssertionError(f"{what}: {name} positions differ, first at {idx}: got "
                                 f"{a[tuple(idx)].item()}, expected {e[tuple(idx)].item()}")
    fin = torch.isfinite(e)
    err = torch.where(fin, (a - e).abs(), torch.zeros((), dtype=F64))
    excess = err - torch.where(fin, bound.to(F64), torch.zeros((), dtype=F64))
    if (excess > 0).any():
        idx = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
        n_bad = int((excess > 0).sum())
        raise AssertionError(
            f"{what}: {n_bad} of {e.numel()} elements outside their bound; worst at {list(idx)}: "
            f"got {a[idx].item():.8g}, expected {e[idx].item():.8g}, |err| {err[idx].item():.3g}"
            f" > bound {bound[idx].item():.3g}")
