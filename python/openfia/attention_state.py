"""merge_attention_states: attention over key sets split across calls, through softmax_lse.

merge_attention_states(out_a, lse_a, out_b, lse_b) combines two npu_fused_infer_attention_score
results (softmax_lse_flag=True) of the same queries over disjoint keys into the result over all
of them (the C++ library's MergeAttentionStates). ring_attention and sharded_kv_attention
(openfia.ring) are built on it.
"""
from __future__ import annotations

import torch

from . import _native as N

__all__ = ["merge_attention_states"]

NAME = "merge_attention_states"
OUTPUT_LAYOUTS = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND")


def _bnsd(t, layout, n, name):
    """A [B, N, S, D] view of an attention output in `layout` (no copy)."""
    if layout == "TND":
        if t.dim() != 3:
            raise N.error(NAME, name, "must be 3-D [T, N, D] for input_layout TND",
                          list(t.shape))
        return t.unsqueeze(0).permute(0, 2, 1, 3)
    if layout == "BSH":
        if t.dim() != 3 or n <= 0 or t.shape[2] % n != 0:
            raise N.error(NAME, name, f"must be 3-D [B, S, H] with H a multiple of N = {n} for "
                          "input_layout BSH", list(t.shape))
        return t.view(t.shape[0], t.shape[1], n, t.shape[2] // n).permute(0, 2, 1, 3)
    if t.dim() != 4:
        raise N.error(NAME, name, f"must be 4-D for input_layout {layout}", list(t.shape))
    return t.permute(0, 2, 1, 3) if layout in ("BSND", "BNSD_BSND") else t


def _lse_bnsd(t, layout):
    """softmax_lse as [B, N, S, 1]: TND's [T, N, 1] becomes [1, N, T, 1] (no copy)."""
    if layout == "TND" and t.dim() == 3:
        return t.unsqueeze(0).permute(0, 2, 1, 3)
    return t


def merge_attention_states(out_a, lse_a, out_b=None, lse_b=None, *, input_layout="BSND",
                           out=None, lse=None, out_dtype=None):
    """Returns (out, lse): attention over the union of two disjoint key sets from the
    (attention_out, softmax_lse) pairs npu_fused_infer_attention_score returned for each set
    (softmax_lse_flag=True, same queries). input_layout is the layout of the attention outputs:
    BSH [B, S, H], BSND [B, S, N, D] (also what BNSD_BSND returns), BNSD [B, N, S, D] or TND
    [T, N, D]; softmax_lse is [B, N, S, 1] ([T, N, 1] for TND). A row whose lse is +inf (no
    key) contributes nothing. out_b / lse_b None: (out, lse) = a converted to out_dtype.
    `out` / `lse` may be given (written in place; they may be out_a / lse_a themselves), else
    they are allocated with out_dtype (default: out_a's dtype) and float32. Under
    torch.compile (without out / lse) it is the op torch.ops.openfia.merge_attention_states."""
    if out is None and lse is None and N.traced(NAME, out_a=out_a, lse_a=lse_a):
        return torch.ops.openfia.merge_attention_states(out_a, lse_a, out_b, lse_b,
                                                        input_layout=input_layout,
                                                        out_dtype=out_dtype)
    return native_call(out_a, lse_a, out_b, lse_b, input_layout, out, lse, out_dtype)


def native_call(out_a, lse_a, out_b, lse_b, input_layout, out, lse, out_dtype):
    """The merge on CPU tensors: views of any strides in, `out` / `lse` written (allocated when
    None)."""
    N.one_device(NAME, out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b, out=out, lse=lse)
    if not isinstance(input_layout, str) or input_layout not in OUTPUT_LAYOUTS:
        raise N.error(NAME, "input_layout", "must be BSH, BSND, BNSD, BNSD_BSND or TND",
                      f"'{input_layout}'")
    n = lse_a.shape[1] if lse_a.dim() >= 2 else 0  # N: [B, N, S, 1] and [T, N, 1] alike
    if out is None:
        out = torch.empty(out_a.shape, dtype=out_dtype or out_a.dtype)
    if lse is None:
        lse = torch.empty(lse_a.shape, dtype=torch.float32)
    views = [None if t is None else N.capsule(N.data(_bnsd(t, input_layout, n, name)))
             for t, name in ((out_a, "out_a"), (out_b, "out_b"), (out, "out"))]
    lses = [None if t is None else N.capsule(N.data(_lse_bnsd(t, input_layout)))
            for t in (lse_a, lse_b, lse)]
    N.lib.merge_attention_states(views[0], lses[0], views[1], lses[1], views[2], lses[2])
    return out, lse
