"""Attention over a sequence or a KV cache split across processes, through softmax_lse.

ring_attention(query, key, value, ...) is attention over a sequence split across the ranks of a
torch.distributed process group: rank r holds the r-th contiguous chunk of the queries and of the
keys / values; the key / value chunks travel around the ring (rank r sends to r + 1 and receives
from r - 1, overlapped with the compute), every rank attends its queries to each chunk with
openfia's FusedInferAttentionScore and merges the partial results through their softmax_lse in
float32 (merge_attention_states). sharded_kv_attention(query, key, value, ...) is decode over a
KV cache sharded across the ranks. The compute is openfia's C++ library; torch.distributed only
moves tensors (any backend that has send / recv for CPU tensors, e.g. gloo).
"""
from __future__ import annotations

import copy
import pickle

import torch

from . import _native as N
from ._native import OpenfiaError
from .attention_state import merge_attention_states

__all__ = ["ring_attention", "sharded_kv_attention"]

_LAYOUTS = ("BSH", "BSND", "BNSD")


_CAUSAL_MASK = None


def _causal_mask():
    """The 2048 x 2048 mask of FIA's sparse_mode 3 (1 strictly above the diagonal)."""
    global _CAUSAL_MASK
    if _CAUSAL_MASK is None:
        _CAUSAL_MASK = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    return _CAUSAL_MASK


def _seq_axis(layout):
    return 2 if layout == "BNSD" else 1


def _as_float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return repr(x)


def _portable(e):
    """e itself when it survives pickling (how all_gather_object sends it to the other ranks),
    else a RuntimeError with its type and message and the .argument / .rule / .code it had."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 - any exception must reach the other ranks
        p = RuntimeError(f"{type(e).__name__}: {e}")
        for a in ("argument", "rule", "actual", "code"):
            if hasattr(e, a):
                setattr(p, a, getattr(e, a))
        return p


def _describe(query, key, value, num_heads, num_key_value_heads, scale, input_layout, causal,
              zigzag):
    """What every rank must agree on, and this rank's local error (or None)."""
    op = "ring_attention"
    err = None
    try:
        if input_layout not in _LAYOUTS:
            raise N.error(op, "input_layout", "must be BSH, BSND or BNSD", f"'{input_layout}'")
        from .fia import fia_output_spec

        fia_output_spec(query, key, value, num_heads=num_heads,
                        num_key_value_heads=num_key_value_heads, scale=scale,
                        input_layout=input_layout, softmax_lse_flag=True)
        ax = _seq_axis(input_layout)
        if causal and query.shape[ax] != key.shape[ax]:
            raise N.error(op, "key", "with causal=True every rank holds the same positions of "
                          "the queries and the keys, so the sequence lengths must be equal",
                          f"query {query.shape[ax]}, key {key.shape[ax]}")
        if zigzag and (not causal or query.shape[ax] % 2 != 0):
            raise N.error(op, "zigzag", "needs causal=True and an even local sequence length "
                          "(two equal chunks)", f"causal={bool(causal)}, length {query.shape[ax]}")
    except Exception as e:  # noqa: BLE001 - every rank must learn of any error
        err = e
    ax = _seq_axis(input_layout) if input_layout in _LAYOUTS else 1

    def shape_wo_seq(t):
        s = list(getattr(t, "shape", []))
        return s[:ax] + s[ax + 1:] if len(s) > ax else s

    common = {
        "query": (str(getattr(query, "dtype", None)), shape_wo_seq(query)),
        "key": (str(getattr(key, "dtype", None)), shape_wo_seq(key)),
        "value": (str(getattr(value, "dtype", None)), shape_wo_seq(value)),
        "num_heads": num_heads, "num_key_value_heads": num_key_value_heads,
        "scale": _as_float(scale), "input_layout": input_layout, "causal": bool(causal),
        "zigzag": bool(zigzag),
    }
    if zigzag:  # every rank holds two chunks of the same length
        common["sequence length"] = getattr(query, "shape", [0, 0, 0])[ax]
    kv_shape = (list(key.shape), list(value.shape)) if err is None else None
    return {"common": common, "kv_shape": kv_shape, "error": err}


def _from_rank(e, r, world, op):
    """Rank r's exception e (as all_gather_object delivered it) to raise here: the same type and
    attributes (.argument, .rule, .code), its message prefixed with where it happened."""
    prefix = f"{op}: rank {r} of {world}: "
    try:
        e2 = copy.copy(e)
        e2.args = (prefix + str(e),)
        if str(e2) == prefix + str(e):
            return e2
    except Exception:  # noqa: BLE001 - a type that cannot take a new message keeps its own
        pass
    e.add_note(prefix.rstrip(": "))
    return e


def _raise_any(errors, rank, world, op):
    """Raises on every rank once the ranks' errors (one per rank, None for none) are known: this
    rank's own (the original object), else the first other rank's."""
    if errors[rank] is not None:
        raise errors[rank]
    for r, e in enumerate(errors):
        if e is not None:
            raise _from_rank(e, r, world, op)


def _agree(desc, group, world, rank, op):
    """Exchanges the ranks' descriptions ({"common", "error", ...}); raises on every rank when
    any rank's call failed (the exception itself, whatever its type) or the ranks' "common" parts
    differ (OpenfiaError). Returns them all."""
    import torch.distributed as dist

    if desc["error"] is not None:
        local = desc["error"]
        desc = dict(desc, error=_portable(local))
    if world > 1:
        descs = [None] * world
        dist.all_gather_object(descs, desc, group=group)
    else:
        descs = [desc]
    errors = [d["error"] for d in descs]
    if errors[rank] is not None:
        errors[rank] = local  # this rank's own error: the original object
    _raise_any(errors, rank, world, op)
    for r, d in enumerate(descs):
        for name, v in d["common"].items():
            if v != desc["common"][name]:
                what = ("dtype and sizes (all but the sequence axis)"
                        if name in ("query", "key", "value") and op == "ring_attention"
                        else "dtype and sizes" if name == "query" else "value")
                raise N.error(op, name, f"every rank must pass the same {what}",
                              f"rank {rank}: {desc['common'][name]}, rank {r}: {v}")
    return descs


def _settle(err, group, world, rank, op):
    """After the ring: every rank learns whether any rank failed during it (a rank that failed
    kept passing its chunks, so nobody waits) and all raise that exception."""
    import torch.distributed as dist

    if world == 1:
        if err is not None:
            raise err
        return
    flag = torch.tensor([0 if err is None else 1], dtype=torch.int32)
    dist.all_reduce(flag, group=group)
    if int(flag) == 0:
        return
    errors = [None] * world
    dist.all_gather_object(errors, None if err is None else _portable(err), group=group)
    if err is not None:
        errors[rank] = err
    _raise_any(errors, rank, world, op)


def _world(group):
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group), dist.get_rank(group)
    return 1, 0


def ring_attention(query, key, value, *, num_heads, num_key_value_heads=0, scale=1.0,
                   input_layout="BSND", causal=False, zigzag=False, softmax_lse_flag=False,
                   group=None):
    """Attention over a sequence split across the ranks of `group` (torch.distributed; the
    default group when None; a single process when torch.distributed is not initialized).

    Rank r passes the r-th contiguous chunk of the queries and of the keys / values of the same
    batch, heads and head size on every rank (chunk lengths may differ between ranks; with
    causal=True a rank's query and key chunks cover the same positions, so their lengths are
    equal). Arguments as npu_fused_infer_attention_score's: input_layout BSH, BSND or BNSD,
    num_heads, num_key_value_heads (GQA), scale (default 1.0 as there). causal=True: query i
    attends keys 0..i of the whole sequence (across ranks), else every key.
    zigzag=True (with causal): the sequence is cut into 2W equal chunks and rank r holds chunks
    r and 2W - 1 - r, concatenated (queries and keys alike, so every rank has the same even
    length): every ring step is then one call of the same cost on every rank, where the
    contiguous split gives rank W - 1 W times the causal work of rank 0.

    Returns (attention_out, softmax_lse) for this rank's queries: attention_out in the query's
    dtype and layout, softmax_lse [B, N, S, 1] float32 over the whole sequence (softmax_lse_flag),
    else a [1] tensor of zero, as npu_fused_infer_attention_score returns.
    Every rank raises the same OpenfiaError when any rank's arguments are invalid or the ranks
    disagree (no rank is left waiting)."""
    import torch.distributed as dist

    from .fia import npu_fused_infer_attention_score as fia

    world, rank = _world(group)
    desc = _describe(query, key, value, num_heads, num_key_value_heads, scale, input_layout,
                     causal, zigzag)
    descs = _agree(desc, group, world, rank, "ring_attention")
    ax = _seq_axis(input_layout)
    use_mask = causal and query.shape[ax] > 1
    acc = acc_lse = None
    err = None  # the first exception of this rank's compute, raised on every rank by _settle
    k_cur, v_cur = key.detach().contiguous(), value.detach().contiguous()
    q = query.detach()
    half = query.shape[ax] // 2

    def step_compute(part, k_cur, v_cur, acc, acc_lse):
        """This rank's queries (all, or the upper half) against the visible part of one chunk,
        merged into (acc, acc_lse); returns them."""
        diag = part == "causal" and use_mask
        qp = q.narrow(ax, half, half) if part == "upper" else q
        kp, vp = k_cur, v_cur
        if zigzag and part == "all":  # src < rank: only src's first chunk is visible
            kp, vp = k_cur.narrow(ax, 0, half), v_cur.narrow(ax, 0, half)
        out_t, lse_t = fia(qp, kp, vp, num_heads=num_heads,
                           num_key_value_heads=num_key_value_heads, scale=scale,
                           input_layout=input_layout, sparse_mode=3 if diag else 0,
                           atten_mask=_causal_mask() if diag else None, softmax_lse_flag=True)
        if acc is None:
            return merge_attention_states(out_t, lse_t, input_layout=input_layout,
                                          out_dtype=torch.float32)
        a, al = acc, acc_lse
        if part == "upper":
            a, al = acc.narrow(ax, half, half), acc_lse.narrow(2, half, half)
        merge_attention_states(a, al, out_t, lse_t, input_layout=input_layout, out=a, lse=al)
        return acc, acc_lse

    for step in range(world):
        src = (rank - step) % world  # the rank whose chunk k_cur / v_cur is
        reqs = []
        if step + 1 < world:  # pass the chunk on while computing on it
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            k_shape, v_shape = descs[(rank - step - 1) % world]["kv_shape"]
            k_next = torch.empty(k_shape, dtype=key.dtype)
            v_next = torch.empty(v_shape, dtype=value.dtype)
            g = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
            reqs = [dist.isend(k_cur, g(nxt), group=group), dist.isend(v_cur, g(nxt), group=group),
                    dist.irecv(k_next, g(prv), group=group),
                    dist.irecv(v_next, g(prv), group=group)]
        # Which queries see which keys of chunk `src`: all, causally (the rank's own chunk: in
        # both splits the local order is the global order), only the upper half of the queries
        # (zigzag, src > rank: both of src's chunks precede this rank's second chunk), or none.
        if not causal or src < rank:
            part = "all"
        elif src == rank:
            part = "causal"
        else:
            part = "upper" if zigzag else None
        if part is not None and err is None:
            try:
                acc, acc_lse = step_compute(part, k_cur, v_cur, acc, acc_lse)
            except Exception as e:  # noqa: BLE001 - the ring goes on; _settle raises it everywhere
                err = e
        for req in reqs:
            req.wait()
        if reqs:
            k_cur, v_cur = k_next, v_next
    _settle(err, group, world, rank, "ring_attention")
    out, lse = merge_attention_states(acc, acc_lse, input_layout=input_layout,
                                      out_dtype=query.dtype)
    if not softmax_lse_flag:
        lse = torch.zeros(1, dtype=torch.float32)
    return out, lse


# Arguments of npu_fused_infer_attention_score that describe the keys: they may differ between
# the ranks of sharded_kv_attention (each holds its own part of the cache).
_KV_ARGS = frozenset((
    "key", "value", "atten_mask", "pse_shift", "actual_seq_lengths_kv", "antiquant_scale",
    "antiquant_offset", "block_table", "kv_padding_size", "key_antiquant_scale",
    "key_antiquant_offset", "value_antiquant_scale", "value_antiquant_offset",
    "key_shared_prefix", "value_shared_prefix", "actual_shared_prefix_len", "key_rope",
    "block_size", "key_antiquant_mode", "value_antiquant_mode", "antiquant_mode",
    "pre_tokens", "next_tokens", "sparse_mode",
))


def sharded_kv_attention(query, key, value, *, group=None, **kwargs):
    """Attention of the same queries over a key / value sequence sharded across the ranks of
    `group` (torch.distributed; one process without it): decode over a context whose KV cache
    does not fit one machine. Every rank passes the same query and query-side arguments
    (num_heads, scale, input_layout, num_key_value_heads, query_rope, ...; checked) and its own
    part of the keys in any form npu_fused_infer_attention_score takes (contiguous, paged,
    int8 / int4 antiquant, a shared prefix, its own mask / lengths for its keys); the parts must
    be disjoint. Each rank computes its part with softmax_lse, the ranks all_gather the (out,
    lse) pairs (small: the queries' rows) and every rank merges them in rank order, so every
    rank returns bitwise the same (attention_out, softmax_lse) over the union of the keys
    (softmax_lse as FIA returns it: the real lse with softmax_lse_flag, else [1] zero).
    Not with int8 output quantization (quant_scale2): quantized outputs cannot be merged."""
    import torch.distributed as dist

    from .fia import npu_fused_infer_attention_score as fia

    world, rank = _world(group)
    want_lse = bool(kwargs.pop("softmax_lse_flag", False))
    layout = kwargs.get("input_layout", "BSH")
    err = None
    try:
        if kwargs.get("quant_scale2") is not None:
            raise N.error("sharded_kv_attention", "quant_scale2",
                          "int8 output quantization cannot be merged across ranks", "a tensor")
        out, lse = fia(query, key, value, softmax_lse_flag=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - every rank must learn of any error
        err = e

    def summary(v):
        if isinstance(v, torch.Tensor):
            return (str(v.dtype), list(v.shape), v.tolist() if v.numel() <= 64 else None)
        return _as_float(v) if isinstance(v, float) else v

    common = {"query": (str(getattr(query, "dtype", None)), list(getattr(query, "shape", [])))}
    common.update({k: summary(v) for k, v in sorted(kwargs.items()) if k not in _KV_ARGS})
    _agree({"common": common, "error": err}, group, world, rank, "sharded_kv_attention")
    if world > 1:
        outs = [torch.empty_like(out) for _ in range(world)]
        lses = [torch.empty_like(lse) for _ in range(world)]
        dist.all_gather(outs, out.contiguous(), group=group)
        dist.all_gather(lses, lse.contiguous(), group=group)
        acc, acc_lse = merge_attention_states(outs[0], lses[0], input_layout=layout,
                                              out_dtype=torch.float32)
        for o, l in zip(outs[1:], lses[1:]):
            merge_attention_states(acc, acc_lse, o, l, input_layout=layout, out=acc, lse=acc_lse)
        out, lse = merge_attention_states(acc, acc_lse, input_layout=layout, out_dtype=out.dtype)
    if not want_lse:
        lse = torch.zeros(1, dtype=torch.float32)
    return out, lse
