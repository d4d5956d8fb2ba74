"""Shared helpers of the pytest suite: run a case through openfia, compare with bounds."""
from __future__ import annotations

import torch

import openfia
from cases import call_kwargs

F64 = torch.float64


def run_openfia(inputs):
    q, k, v, kw = call_kwargs(inputs)
    return openfia.npu_fused_infer_attention_score(q, k, v, **kw)


def check_case_against_torch(case):
    """One case of the list (or a random one) through openfia and the torch float64 oracle:
    output dtype, contiguity, every element within its derived bound, lse likewise (or the
    one-element 0 without softmax_lse_flag)."""
    import torch_ref
    from cases import build_inputs

    inputs = build_inputs(case)
    q, k, v, kw = call_kwargs(inputs)
    out, lse = run_openfia(inputs)
    ref, ref_lse, bound, lse_bound, ref_dtype = torch_ref.reference(q, k, v, **kw)
    assert out.dtype == ref_dtype, f"attention_out dtype {out.dtype}, expected {ref_dtype}"
    assert out.is_contiguous() and lse.dtype == torch.float32
    assert_within(out, ref, bound, f"{case.name}: attention_out")
    if kw.get("softmax_lse_flag"):
        assert_within(lse, ref_lse, lse_bound, f"{case.name}: softmax_lse")
    else:
        assert lse.shape == (1,) and lse.item() == 0.0


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
