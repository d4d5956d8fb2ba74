"""SparseAttnSharedkv (DeepSeek-V4 attention) and its planner, with the custom-op signatures.

    metadata = npu_sparse_attn_sharedkv_metadata(64, 1, 512, cu_seqlens_q=cu, seqused_kv=s2,
                                                 batch_size=b, cmp_topk=512, cmp_ratio=4,
                                                 layout_q="TND")
    out, lse = npu_sparse_attn_sharedkv(q, ori_kv=ori, cmp_kv=cmp, cmp_sparse_indices=idx,
                                        ori_block_table=bt1, cmp_block_table=bt2,
                                        cu_seqlens_q=cu, seqused_kv=s2, sinks=sinks,
                                        metadata=metadata, cmp_ratio=4, layout_q="TND")

Semantics: docs/sparse_attn_sharedkv.md. Tensors are CPU torch tensors; outputs are new
contiguous tensors. Invalid calls raise openfia.OpenfiaError (a ValueError).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from . import _openfia

__all__ = ["npu_sparse_attn_sharedkv_metadata", "npu_sparse_attn_sharedkv",
           "verify_sparse_attn_sharedkv_metadata"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _index(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # Index tensors, sinks and metadata are read on the host row by row: pass contiguous copies.
    return None if t is None else t.detach().contiguous()


def _data(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # q and the caches may be strided views; the library reads them through their strides.
    return None if t is None else t.detach()


def _metadata_kwargs(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv,
                     cu_seqlens_cmp_kv, seqused_q, seqused_kv, batch_size, max_seqlen_q,
                     max_seqlen_kv, ori_topk, cmp_topk, cmp_ratio, ori_mask_mode, cmp_mask_mode,
                     ori_win_left, ori_win_right, layout_q, layout_kv, has_ori_kv, has_cmp_kv,
                     num_workers):
    return dict(
        num_heads_q=int(num_heads_q), num_heads_kv=int(num_heads_kv), head_dim=int(head_dim),
        cu_seqlens_q=_index(cu_seqlens_q), cu_seqlens_ori_kv=_index(cu_seqlens_ori_kv),
        cu_seqlens_cmp_kv=_index(cu_seqlens_cmp_kv), seqused_q=_index(seqused_q),
        seqused_kv=_index(seqused_kv), batch_size=int(batch_size or 0),
        max_seqlen_q=int(max_seqlen_q or 0), max_seqlen_kv=int(max_seqlen_kv or 0),
        ori_topk=int(ori_topk or 0), cmp_topk=int(cmp_topk or 0),
        cmp_ratio=-1 if cmp_ratio is None else int(cmp_ratio), ori_mask_mode=int(ori_mask_mode),
        cmp_mask_mode=int(cmp_mask_mode), ori_win_left=int(ori_win_left),
        ori_win_right=int(ori_win_right), layout_q=layout_q, layout_kv=layout_kv,
        has_ori_kv=bool(has_ori_kv), has_cmp_kv=bool(has_cmp_kv),
        num_workers=int(num_workers or 0))


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
    `num_workers` (openfia extension, 1..36) defaults to the thread count."""
    out = torch.zeros(1024, dtype=torch.int32)
    _openfia.sas_metadata(out, **_metadata_kwargs(
        num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv,
        seqused_q, seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk,
        cmp_ratio, ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right, layout_q,
        layout_kv, has_ori_kv, has_cmp_kv, num_workers))
    return out


def verify_sparse_attn_sharedkv_metadata(metadata: torch.Tensor, num_heads_q: int,
                                         num_heads_kv: int, head_dim: int, **kwargs) -> None:
    """Raises OpenfiaError unless `metadata` was made for these metadata arguments (same keyword
    names as npu_sparse_attn_sharedkv_metadata) and covers every work unit exactly once."""
    kwargs.pop("device", None)
    full = dict(cu_seqlens_q=None, cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None,
                seqused_kv=None, batch_size=0, max_seqlen_q=0, max_seqlen_kv=0, ori_topk=0,
                cmp_topk=0, cmp_ratio=-1, ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=127,
                ori_win_right=0, layout_q="BSND", layout_kv="PA_ND", has_ori_kv=True,
                has_cmp_kv=True, num_workers=None)
    unknown = set(kwargs) - set(full)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    full.update(kwargs)
    _openfia.verify_sas_metadata(_index(metadata), **_metadata_kwargs(
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
    [B, 1, S1, N1] for BSND), else a one-element 0."""
    kw = dict(
        q=_data(q), ori_kv=_data(ori_kv), cmp_kv=_data(cmp_kv),
        ori_sparse_indices=_index(ori_sparse_indices),
        cmp_sparse_indices=_index(cmp_sparse_indices), ori_block_table=_index(ori_block_table),
        cmp_block_table=_index(cmp_block_table), cu_seqlens_q=_index(cu_seqlens_q),
        cu_seqlens_ori_kv=_index(cu_seqlens_ori_kv), cu_seqlens_cmp_kv=_index(cu_seqlens_cmp_kv),
        seqused_q=_index(seqused_q), seqused_kv=_index(seqused_kv), sinks=_index(sinks),
        metadata=_index(metadata),
        softmax_scale=None if softmax_scale is None else float(softmax_scale),
        cmp_ratio=None if cmp_ratio is None else int(cmp_ratio),
        ori_mask_mode=int(ori_mask_mode), cmp_mask_mode=int(cmp_mask_mode),
        ori_win_left=int(ori_win_left), ori_win_right=int(ori_win_right), layout_q=layout_q,
        layout_kv=layout_kv, return_softmax_lse=bool(return_softmax_lse))
    spec = _openfia.sas_output_spec(**kw)
    out = torch.empty(spec["attention_out_sizes"], dtype=_DTYPES[spec["attention_out_dtype"]])
    lse = torch.zeros(spec["softmax_lse_sizes"], dtype=torch.float32)
    _openfia.sas(out, lse, **kw)
    return out, lse
