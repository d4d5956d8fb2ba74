"""The check every example makes: the same attention composed in plain PyTorch in float64, and
openfia's output compared with it element by element within a bound derived from the dtype.

    ref = attention(q, k, v, scale)          # q [H, M, D], k / v [H or 1, L, D]
    check("decode", out, ref, torch.bfloat16, d_qk=128, n_keys=L)

check() exits the script with status 1 when an element is outside its bound (or NaN / Inf
appear where the reference has none), naming the worst element.

The model examples compare whole models' logits and greedy tokens with a reference model's:

    bound = logit_bound(lm_head, hidden, roundings, torch.bfloat16)
    passed, decided = check_generation("sequence 0", logits, ref_logits, bound)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

F64 = torch.float64
U32 = 2.0 ** -24  # unit roundoff of float32, openfia's accumulation precision


@dataclass
class Reference:
    out: torch.Tensor        # [..., M, Dv] float64: softmax(q k^T * scale + bias) v
    out_abs: torch.Tensor    # [..., M, Dv]: the same with |v| (what the rounding errors scale with)
    score_abs: torch.Tensor  # [..., M]: scale * max over the row's keys of sum |q| |k|


def attention(q, k, v, scale, *, bias=None, sink=None):
    """Attention in float64 of each query row over its keys. q [H, M, D]; k [H, L, D] and
    v [H, L, Dv] (or a leading 1 to share them across the H heads); bias [H or 1, M, L] is added
    to the scores (-inf masks a key); sink [H]: one more score per head whose value row is 0,
    i.e. a term exp(sink - max) in the softmax denominator only."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    s = (q @ k.transpose(-1, -2)) * scale
    score_abs = (q.abs() @ k.abs().transpose(-1, -2)).amax(-1) * scale
    if bias is not None:
        s = s + bias
    v = v.expand(q.shape[0], -1, -1)
    if sink is not None:
        s = torch.cat([s, sink.to(F64).view(-1, 1, 1).expand(s.shape[0], s.shape[1], 1)], -1)
        v = torch.cat([v, torch.zeros(v.shape[0], 1, v.shape[2], dtype=F64)], 1)
    p = torch.softmax(s, -1)
    return Reference(p @ v, p @ v.abs(), score_abs)


def error_bound(ref, dtype, *, d_qk, n_keys):
    """The bound on each element of openfia's output against the float64 reference. With u the
    unit roundoff of `dtype` (the query dtype: openfia rounds P to it before P.V and rounds the
    output to it), the first-order errors are u |out| (output rounding), u (P|V|) (rounding P),
    2 d_qk 2^-24 score_abs (P|V|) (float32 scores move each probability by twice their error)
    and n_keys 2^-24 (P|V|) (float32 accumulation); the bound is twice their sum."""
    u = torch.finfo(dtype).eps / 2
    return 2 * (u * (ref.out.abs() + ref.out_abs)
                + U32 * (2 * d_qk * ref.score_abs.unsqueeze(-1) + n_keys) * ref.out_abs)


def check(what, got, ref, dtype, *, d_qk, n_keys, bound=None):
    """openfia's `got` against the float64 reference, element by element, within
    error_bound(ref, dtype, d_qk=d_qk, n_keys=n_keys) (or the `bound` given)."""
    g = got.to(F64).reshape(ref.out.shape)
    for name, f in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        if not torch.equal(f(g), f(ref.out)):
            sys.exit(f"{what}: FAILED, {name} positions differ from the reference")
    if bound is None:
        bound = error_bound(ref, dtype, d_qk=d_qk, n_keys=n_keys)
    excess = (g - ref.out).abs() - bound
    worst = int(excess.flatten().argmax())
    if excess.flatten()[worst] > 0:
        idx = [int(i) for i in torch.unravel_index(torch.tensor(worst), excess.shape)]
        got_w, ref_w = g.flatten()[worst].item(), ref.out.flatten()[worst].item()
        sys.exit(f"{what}: FAILED, {int((excess > 0).sum())} of {g.numel()} elements outside "
                 f"their bound; worst at {idx}: openfia {got_w:.6g}, reference {ref_w:.6g}, "
                 f"bound {bound.flatten()[worst].item():.3g}")
    err = float((g - ref.out).abs().max())
    print(f"{what}: matches the float64 PyTorch reference (max |error| {err:.2e}, every element "
          f"within its {dtype} bound)")


# ---- whole models: logits and greedy tokens ---------------------------------------------------

def logit_bound(lm_head, hidden, roundings, dtype, sigmas=6.0):
    """The bound on the logits of a model computed in `dtype` against the same model computed
    exactly (or in a wider dtype): `sigmas` standard deviations of the first-order rounding
    model, in which each of the `roundings` roundings to `dtype` on the path to a logit is
    uniform within half a unit in the last place of its value and passed on with unit gain:

        sigma = u / sqrt(3) * sqrt(roundings) * |W_v| * rms(h)

    lm_head [V, H]: the output rows W_v; hidden [..., H]: the final normalized hidden states h.
    Returns [..., V]."""
    u = torch.finfo(dtype).eps / 2
    w = lm_head.to(F64).norm(dim=-1)
    rms = hidden.to(F64).pow(2).mean(-1, keepdim=True).sqrt()
    return sigmas * u / 3 ** 0.5 * roundings ** 0.5 * w * rms


def check_generation(what, logits, ref_logits, bound):
    """A greedy decoder's logits [S, V] against the reference's on the same tokens: every logit
    within its bound (NaN / Inf where the reference has them), and the decoder's token (its
    argmax) the reference's wherever the reference's top-2 margin exceeds the sum of the two
    logits' bounds (elsewhere either is a correct greedy choice within the rounding). Prints the
    first failure; returns (passed, decided [S] bool: the steps whose token was checked)."""
    got, ref = logits.to(F64), ref_logits.to(F64)
    for name, f in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        if not torch.equal(f(got), f(ref)):
            print(f"{what}: FAILED, {name} positions differ from the reference")
            return False, torch.zeros(len(got), dtype=torch.bool)
    excess = (got - ref).abs() - bound
    if (excess > 0).any():
        s, v = divmod(int(excess.flatten().argmax()), got.shape[-1])
        print(f"{what}: FAILED, logit {v} at step {s}: {got[s, v].item():.5g}, reference "
              f"{ref[s, v].item():.5g}, bound {bound[s, v].item():.3g}")
        return False, torch.zeros(len(got), dtype=torch.bool)
    top2 = ref.topk(2, -1)
    margin = top2.values[:, 0] - top2.values[:, 1]
    decided = margin > bound.gather(1, top2.indices).sum(-1)
    wrong = decided & (got.argmax(-1) != top2.indices[:, 0])
    if wrong.any():
        s = int(wrong.nonzero()[0])
        print(f"{what}: FAILED, step {s} chose token {int(got[s].argmax())}, the reference "
              f"{int(top2.indices[s, 0])} by a margin of {margin[s].item():.3g}")
        return False, decided
    return True, decided
