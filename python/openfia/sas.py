"""SparseAttnSharedkv (DeepSeek-V4 attention) and its planner, with the custom-op signatures.

    metadata = npu_sparse_attn_sharedkv_metadata(64, 1, 512, cu_seqlens_q=cu, seqused_kv=s2,
                                                 batch_size=b, cmp_topk=512, cmp_ratio=4,
                                                 layout_q="TND")
    out, lse = npu_sparse_attn_sharedkv(q, ori_kv=ori, cmp_kv=cmp, cmp_sparse_indices=idx,
                                        ori_block_table=bt1, cmp_block_table=bt2,
                                        cu_seqlens_q=cu, seqused_kv=s2, sinks=sinks,
                                        metadata=metadata, cmp_ratio=4, layout_q="TND")

Semantics: docs/sparse_attn_sharedkv.md. Tensors are CPU torch tensors; outputs are new
contiguous tensors. Invalid calls raise openfia.OpenfiaError (a ValueError). Both functions are
also torch.library operators: torch.ops.openfia.* (defined by openfia.torch_ops) and, after
openfia.patch_torch_npu(), torch.ops.custom.* (where DeepSeek-V4 code calls them).
"""
from __future__ import annotations

import inspect
from typing import Optional, Tuple

import torch

from . import _native as N

__all__ = ["npu_sparse_attn_sharedkv_metadata", "npu_sparse_attn_sharedkv",
           "verify_sparse_attn_sharedkv_metadata"]

NAME = "npu_sparse_attn_sharedkv"
METADATA_NAME = "npu_sparse_attn_sharedkv_metadata"

# Index tensors, sinks and metadata are read on the host row by row: they pass dense (N.dense);
# q and the caches may be strided views, read through their strides (N.data). Neither makes a
# detached alias or a copy of a tensor that needs none: on a cold cache those calls cost ~110 us
# of a 0.7 ms V3 decode. Both check the tensor and name it (op, name).
_index = N.dense
_data = N.data


def _metadata_kwargs(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv,
                     cu_seqlens_cmp_kv, seqused_q, seqused_kv, batch_size, max_seqlen_q,
                     max_seqlen_kv, ori_topk, cmp_topk, cmp_ratio, ori_mask_mode, cmp_mask_mode,
                     ori_win_left, ori_win_right, layout_q, layout_kv, has_ori_kv, has_cmp_kv,
                     num_workers):
    op = METADATA_NAME
    # Optional integers (the schema's int?): None is the default.
    opt = lambda v, name, default=0: default if v is None else N.integer(v, op, name)  # noqa: E731
    return dict(
        num_heads_q=N.integer(num_heads_q, op, "num_heads_q"),
        num_heads_kv=N.integer(num_heads_kv, op, "num_heads_kv"),
        head_dim=N.integer(head_dim, op, "head_dim"),
        cu_seqlens_q=_index(cu_seqlens_q, op, "cu_seqlens_q"),
        cu_seqlens_ori_kv=_index(cu_seqlens_ori_kv, op, "cu_seqlens_ori_kv"),
        cu_seqlens_cmp_kv=_index(cu_seqlens_cmp_kv, op, "cu_seqlens_cmp_kv"),
        seqused_q=_index(seqused_q, op, "seqused_q"),
        seqused_kv=_index(seqused_kv, op, "seqused_kv"), batch_size=opt(batch_size, "batch_size"),
        max_seqlen_q=opt(max_seqlen_q, "max_seqlen_q"),
        max_seqlen_kv=opt(max_seqlen_kv, "max_seqlen_kv"), ori_topk=opt(ori_topk, "ori_topk"),
        cmp_topk=opt(cmp_topk, "cmp_topk"), cmp_ratio=opt(cmp_ratio, "cmp_ratio", -1),
        ori_mask_mode=N.integer(ori_mask_mode, op, "ori_mask_mode"),
        cmp_mask_mode=N.integer(cmp_mask_mode, op, "cmp_mask_mode"),
        ori_win_left=N.integer(ori_win_left, op, "ori_win_left"),
        ori_win_right=N.integer(ori_win_right, op, "ori_win_right"),
        layout_q=N.string(layout_q, op, "layout_q"), layout_kv=N.string(layout_kv, op, "layout_kv"),
        has_ori_kv=N.boolean(has_ori_kv, op, "has_ori_kv"),
        has_cmp_kv=N.boolean(has_cmp_kv, op, "has_cmp_kv"),
        num_workers=opt(num_workers, "num_workers"))


def npu_sparse_attn_sharedkv_metadata(
        num_heads_q: int, num_heads_kv: int, head_dim: int, *,
        cu_seqlens_q: Optional[torch.Tensor] = None,
        cu_seqlens_ori_kv: Optional[torch.Tensor] = None,
        cu_seqlens_cmp_kv: Optional[torch.Tensor] = None,
        seqused_q: Optional[torch.Tensor] = None, seqused_kv: Optional[torch.Tensor] = None,
        batch_size: int = 0, max_seqlen_q: int = 0, max_seqlen_kv: int = 0, ori_topk: int = 0,
        cmp_topk: int = 0, cmp_ratio: int = -1, ori_mask_mode: int = 4, cmp_mask_mode: int = 3,
        ori_win_left: int = 127, ori_win_right: int = 0, layout_q: str = "BSND",
        layout_kv: str = "PA_ND", has_ori_kv: bool = True, has_cmp_kv: bool = True,
        device=None, num_workers: Optional[int] = None) -> torch.Tensor:
    """The int32[1024] work plan for npu_sparse_attn_sharedkv. `device` is ignored (CPU);
    `num_workers` (openfia extension, 1..36) defaults to the thread count. Under torch.compile
    (or with fake / meta tensors) it is the registered op, so a graph holds it as one node."""
    if N.traced(METADATA_NAME, cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv):
        return torch.ops.openfia.npu_sparse_attn_sharedkv_metadata.default(
            num_heads_q, num_heads_kv, head_dim, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_ori_kv=cu_seqlens_ori_kv, cu_seqlens_cmp_kv=cu_seqlens_cmp_kv,
            seqused_q=seqused_q, seqused_kv=seqused_kv, batch_size=batch_size,
            max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv, ori_topk=ori_topk,
            cmp_topk=cmp_topk, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
            cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
            layout_q=layout_q, layout_kv=layout_kv, has_ori_kv=has_ori_kv, has_cmp_kv=has_cmp_kv,
            device=None if device is None else str(device), num_workers=num_workers)
    return metadata_native_call(locals())


def metadata_native_call(a):
    """The native call of npu_sparse_attn_sharedkv_metadata (a: all of its arguments by name)."""
    a = dict(a)
    a.pop("device", None)
    out = torch.zeros(1024, dtype=torch.int32)
    N.lib.sas_metadata(out, **_metadata_kwargs(**a))
    return out


def verify_sparse_attn_sharedkv_metadata(metadata: torch.Tensor, num_heads_q: int,
                                         num_heads_kv: int, head_dim: int, **kwargs) -> None:
    """Raises OpenfiaError unless `metadata` was made for these metadata arguments (same keyword
    names as npu_sparse_attn_sharedkv_metadata) and covers every (work unit, S2 chunk) piece
    exactly once."""
    full = dict(METADATA_DEFAULTS)
    unknown = set(kwargs) - set(full)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    full.update(kwargs)
    full.pop("device")
    N.lib.verify_sas_metadata(_index(metadata, METADATA_NAME, "metadata"), **_metadata_kwargs(
        num_heads_q, num_heads_kv, head_dim, **full))


def npu_sparse_attn_sharedkv(
        q: torch.Tensor, *, ori_kv: Optional[torch.Tensor] = None,
        cmp_kv: Optional[torch.Tensor] = None,
        ori_sparse_indices: Optional[torch.Tensor] = None,
        cmp_sparse_indices: Optional[torch.Tensor] = None,
        ori_block_table: Optional[torch.Tensor] = None,
        cmp_block_table: Optional[torch.Tensor] = None,
        cu_seqlens_q: Optional[torch.Tensor] = None,
        cu_seqlens_ori_kv: Optional[torch.Tensor] = None,
        cu_seqlens_cmp_kv: Optional[torch.Tensor] = None,
        seqused_q: Optional[torch.Tensor] = None, seqused_kv: Optional[torch.Tensor] = None,
        sinks: Optional[torch.Tensor] = None, metadata: Optional[torch.Tensor] = None,
        softmax_scale: Optional[float] = None, cmp_ratio: Optional[int] = None,
        ori_mask_mode: int = 4, cmp_mask_mode: int = 3, ori_win_left: int = 127,
        ori_win_right: int = 0, layout_q: str = "BSND", layout_kv: str = "PA_ND",
        return_softmax_lse: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sliding-window + (sparse) compressed attention with sinks; returns (attention_out,
    softmax_lse). softmax_lse is real when return_softmax_lse ([1, T, N1] for TND,
    [B, 1, S1, N1] for BSND), else a one-element 0. Under torch.compile (or with fake / meta
    tensors) it is the registered op, so a graph holds it as one node."""
    if N.traced(NAME, q=q, ori_kv=ori_kv):
        # (every argument by name: torch.compile cannot trace locals())
        return torch.ops.openfia.npu_sparse_attn_sharedkv.default(
            q, ori_kv=ori_kv, cmp_kv=cmp_kv, ori_sparse_indices=ori_sparse_indices,
            cmp_sparse_indices=cmp_sparse_indices, ori_block_table=ori_block_table,
            cmp_block_table=cmp_block_table, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_ori_kv=cu_seqlens_ori_kv, cu_seqlens_cmp_kv=cu_seqlens_cmp_kv,
            seqused_q=seqused_q, seqused_kv=seqused_kv, sinks=sinks, metadata=metadata,
            softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
            cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
            layout_q=layout_q, layout_kv=layout_kv, return_softmax_lse=return_softmax_lse)
    return native_call(locals())


def native_call(a):
    """The native call of npu_sparse_attn_sharedkv (a: all of its arguments by name):
    validation, allocation and compute in one call; tensors as DLPack capsules."""
    return tuple(N.lib.sas_call(N.alloc_output_lse_zeroed, **N.capsules(_convert(a))))


_INDEX_ARGS = ("ori_sparse_indices", "cmp_sparse_indices", "ori_block_table", "cmp_block_table",
               "cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv",
               "sinks", "metadata")


def _convert(a):
    """The binding's keyword arguments from npu_sparse_attn_sharedkv's (a dict of all of them)."""
    opt = lambda k, f: None if a[k] is None else f(a[k], NAME, k)  # noqa: E731
    return dict(
        q=_data(a["q"], NAME, "q"), ori_kv=_data(a["ori_kv"], NAME, "ori_kv"),
        cmp_kv=_data(a["cmp_kv"], NAME, "cmp_kv"), **{k: _index(a[k], NAME, k) for k in _INDEX_ARGS},
        softmax_scale=opt("softmax_scale", N.real), cmp_ratio=opt("cmp_ratio", N.integer),
        **{k: N.integer(a[k], NAME, k) for k in (
            "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right")},
        layout_q=N.string(a["layout_q"], NAME, "layout_q"),
        layout_kv=N.string(a["layout_kv"], NAME, "layout_kv"),
        return_softmax_lse=N.boolean(a["return_softmax_lse"], NAME, "return_softmax_lse"))


def _run_busy(kw, busy):
    spec = N.lib.sas_output_spec(**kw)
    out = torch.empty(spec["attention_out_sizes"],
                      dtype=N.torch_dtype(spec["attention_out_dtype"]))
    lse = torch.zeros(spec["softmax_lse_sizes"], dtype=torch.float32)
    busy.update({k: list(v) for k, v in N.lib.sas_busy(out, lse, **kw).items()})
    return out, lse


def sparse_attn_sharedkv_busy(q: torch.Tensor, **kwargs):
    """Benchmarks only: npu_sparse_attn_sharedkv(q, **kwargs) (same keywords) that also returns
    the engine's busy seconds: (attention_out, softmax_lse, busy) with busy = {"workers": [s per
    compute worker of the plan (metadata record), wall], "workers_cpu": [the same, thread CPU
    time], "threads": [s per thread], "merge", "merge_cpu", "compute_wall", "merge_wall": [s]};
    {} when the call ran on the reference. Only this function times: the public op never does."""
    bound = inspect.signature(npu_sparse_attn_sharedkv).bind(q, **kwargs)
    bound.apply_defaults()
    busy = {}
    out, lse = _run_busy(_convert(bound.arguments), busy)
    return out, lse, busy


# Every keyword argument of the two functions with its default (the schemas' defaults too).
DEFAULTS = N.keyword_defaults(npu_sparse_attn_sharedkv)
METADATA_DEFAULTS = N.keyword_defaults(npu_sparse_attn_sharedkv_metadata)
