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

from torch.utils._python_dispatch import _get_current_dispatch_mode as _dispatch_mode

from . import _openfia

__all__ = ["npu_sparse_attn_sharedkv_metadata", "npu_sparse_attn_sharedkv",
           "verify_sparse_attn_sharedkv_metadata"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# No detached alias or contiguous() call for a tensor that needs none: on a cold cache those
# calls cost ~110 us of a 0.7 ms V3 decode (DLPack cannot export a tensor that requires grad).
def _index(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # Index tensors, sinks and metadata are read on the host row by row: pass contiguous ones.
    t = _data(t)
    return t if not isinstance(t, torch.Tensor) or t.is_contiguous() else t.contiguous()


def _data(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # q and the caches may be strided views; the library reads them through their strides.
    return t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t


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
    `num_workers` (openfia extension, 1..36) defaults to the thread count. Under torch.compile
    (or with fake / meta tensors) it is the registered op, so a graph holds it as one node."""
    if _traced(cu_seqlens_q, seqused_kv):
        return _op(METADATA_NAME)(
            num_heads_q, num_heads_kv, head_dim, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_ori_kv=cu_seqlens_ori_kv, cu_seqlens_cmp_kv=cu_seqlens_cmp_kv,
            seqused_q=seqused_q, seqused_kv=seqused_kv, batch_size=batch_size,
            max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv, ori_topk=ori_topk,
            cmp_topk=cmp_topk, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
            cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
            layout_q=layout_q, layout_kv=layout_kv, has_ori_kv=has_ori_kv, has_cmp_kv=has_cmp_kv,
            device=None if device is None else str(device), num_workers=num_workers)
    return _metadata_native(locals())


def _metadata_native(a):
    """The native call of npu_sparse_attn_sharedkv_metadata (a: all of its arguments by name)."""
    a = dict(a)
    a.pop("device", None)
    out = torch.zeros(1024, dtype=torch.int32)
    _openfia.sas_metadata(out, **_metadata_kwargs(**a))
    return out


def verify_sparse_attn_sharedkv_metadata(metadata: torch.Tensor, num_heads_q: int,
                                         num_heads_kv: int, head_dim: int, **kwargs) -> None:
    """Raises OpenfiaError unless `metadata` was made for these metadata arguments (same keyword
    names as npu_sparse_attn_sharedkv_metadata) and covers every (work unit, S2 chunk) piece
    exactly once."""
    full = dict(_METADATA_DEFAULTS)
    unknown = set(kwargs) - set(full)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    full.update(kwargs)
    full.pop("device")
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
    [B, 1, S1, N1] for BSND), else a one-element 0. Under torch.compile (or with fake / meta
    tensors) it is the registered op, so a graph holds it as one node."""
    if _traced(q, ori_kv):
        # (every argument by name: torch.compile cannot trace locals())
        return _op(NAME)(
            q, ori_kv=ori_kv, cmp_kv=cmp_kv, ori_sparse_indices=ori_sparse_indices,
            cmp_sparse_indices=cmp_sparse_indices, ori_block_table=ori_block_table,
            cmp_block_table=cmp_block_table, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_ori_kv=cu_seqlens_ori_kv, cu_seqlens_cmp_kv=cu_seqlens_cmp_kv,
            seqused_q=seqused_q, seqused_kv=seqused_kv, sinks=sinks, metadata=metadata,
            softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
            cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
            layout_q=layout_q, layout_kv=layout_kv, return_softmax_lse=return_softmax_lse)
    return _native(locals())


def _traced(*tensors) -> bool:
    """Whether the call must go through the dispatcher: while torch.compile / export traces,
    while a TorchDispatchMode is active (FakeTensorMode, FlopCounterMode, a user's logging mode:
    they see the op), or for tensors the native call cannot read (fake, functional or other
    subclasses, meta or other devices; the caller passes its leading tensors, which fake and
    meta modes make alike). Plain CPU tensors in eager mode take the direct native call (~30 us
    cheaper cold than the dispatcher on a 0.7 ms V3 decode, ~40 us on an FIA decode)."""
    if torch.compiler.is_compiling() or _dispatch_mode() is not None:
        return True
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.device.type != "cpu"):
            return True
    return False


def _op(name):
    return getattr(torch.ops.openfia, name).default


def _native(a):
    """The native call of npu_sparse_attn_sharedkv (a: all of its arguments by name):
    validation, allocation and compute in one call; tensors as DLPack capsules."""
    kw = _convert(a)
    tdl = torch.utils.dlpack.to_dlpack
    return tuple(_openfia.sas_call(
        _alloc, **{k: tdl(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}))


_INDEX_ARGS = ("ori_sparse_indices", "cmp_sparse_indices", "ori_block_table", "cmp_block_table",
               "cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv",
               "sinks", "metadata")


def _convert(a):
    """The binding's keyword arguments from npu_sparse_attn_sharedkv's (a dict of all of them)."""
    opt = lambda v, f: None if v is None else f(v)  # noqa: E731
    return dict(
        q=_data(a["q"]), ori_kv=_data(a["ori_kv"]), cmp_kv=_data(a["cmp_kv"]),
        **{k: _index(a[k]) for k in _INDEX_ARGS},
        softmax_scale=opt(a["softmax_scale"], float), cmp_ratio=opt(a["cmp_ratio"], int),
        **{k: int(a[k]) for k in (
            "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right")},
        layout_q=a["layout_q"], layout_kv=a["layout_kv"],
        return_softmax_lse=bool(a["return_softmax_lse"]))


def _alloc(sizes, dtype_name, name):
    """Output allocator of sas_call: softmax_lse starts zeroed (return_softmax_lse=False leaves
    its placeholder unwritten), attention_out uninitialized (every element is written)."""
    make = torch.zeros if name == "softmax_lse" else torch.empty
    t = make(sizes, dtype=_DTYPES[dtype_name])
    return t, torch.utils.dlpack.to_dlpack(t)


def _run_busy(kw, busy):
    spec = _openfia.sas_output_spec(**kw)
    out = torch.empty(spec["attention_out_sizes"], dtype=_DTYPES[spec["attention_out_dtype"]])
    lse = torch.zeros(spec["softmax_lse_sizes"], dtype=torch.float32)
    busy.update({k: list(v) for k, v in _openfia.sas_busy(out, lse, **kw).items()})
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


# ---- torch.library registration ----------------------------------------------------------------

NAME = "npu_sparse_attn_sharedkv"
METADATA_NAME = "npu_sparse_attn_sharedkv_metadata"

# The signatures above as operator schemas. Arguments the functions accept as None (softmax_scale,
# cmp_ratio, the metadata sizes) are optional ints/floats; `device` is the custom op's str; the
# metadata op's num_workers is openfia's extension (see npu_sparse_attn_sharedkv_metadata).
_SCHEMA = (
    "(Tensor q, *, Tensor? ori_kv=None, Tensor? cmp_kv=None, Tensor? ori_sparse_indices=None, "
    "Tensor? cmp_sparse_indices=None, Tensor? ori_block_table=None, "
    "Tensor? cmp_block_table=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_ori_kv=None, "
    "Tensor? cu_seqlens_cmp_kv=None, Tensor? seqused_q=None, Tensor? seqused_kv=None, "
    "Tensor? sinks=None, Tensor? metadata=None, float? softmax_scale=None, "
    "int? cmp_ratio=None, int ori_mask_mode=4, int cmp_mask_mode=3, int ori_win_left=127, "
    "int ori_win_right=0, str layout_q=\"BSND\", str layout_kv=\"PA_ND\", "
    "bool return_softmax_lse=False) -> (Tensor, Tensor)"
)
_METADATA_SCHEMA = (
    "(int num_heads_q, int num_heads_kv, int head_dim, *, Tensor? cu_seqlens_q=None, "
    "Tensor? cu_seqlens_ori_kv=None, Tensor? cu_seqlens_cmp_kv=None, Tensor? seqused_q=None, "
    "Tensor? seqused_kv=None, int? batch_size=0, int? max_seqlen_q=0, int? max_seqlen_kv=0, "
    "int? ori_topk=0, int? cmp_topk=0, int? cmp_ratio=-1, int ori_mask_mode=4, "
    "int cmp_mask_mode=3, int ori_win_left=127, int ori_win_right=0, str layout_q=\"BSND\", "
    "str layout_kv=\"PA_ND\", bool has_ori_kv=True, bool has_cmp_kv=True, str? device=None, "
    "int? num_workers=None) -> Tensor"
)


# The keyword arguments of the two functions with their defaults (the schemas' defaults too).
def _keyword_defaults(fn):
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


_DEFAULTS = _keyword_defaults(npu_sparse_attn_sharedkv)
_METADATA_DEFAULTS = _keyword_defaults(npu_sparse_attn_sharedkv_metadata)


# The kernels take the native path directly (the dispatcher already chose the CPU). It passes
# only the keyword arguments that differ from the schema's defaults.
def cpu_kernel(q, **kw):
    return _native({**_DEFAULTS, "q": q, **kw})


def metadata_cpu_kernel(num_heads_q, num_heads_kv, head_dim, **kw):
    return _metadata_native({**_METADATA_DEFAULTS, "num_heads_q": num_heads_q,
                             "num_heads_kv": num_heads_kv, "head_dim": head_dim, **kw})


def _fake(q, *, ori_kv=None, cmp_kv=None, layout_q="BSND", return_softmax_lse=False, **_):
    """Output shapes from shapes alone, as SparseAttnSharedkvOutputSpec: out is q's shape and
    dtype; lse [N2, T, G] (TND) or [B, N2, S1, G] (BSND) with G = N1 / N2 when
    return_softmax_lse, else [1]. The caches are [blocks, block_size, N2, D]."""
    kv = ori_kv if ori_kv is not None else cmp_kv
    n2 = kv.shape[-2] if kv is not None and kv.dim() == 4 else 1
    if not return_softmax_lse:
        lse = [1]
    elif layout_q == "TND":
        lse = [n2, q.shape[0], q.shape[1] // n2]
    else:
        lse = [q.shape[0], n2, q.shape[1], q.shape[2] // n2]
    return q.new_empty(q.shape), q.new_empty(lse, dtype=torch.float32)


def _metadata_fake(num_heads_q, num_heads_kv, head_dim, **_):
    return torch.empty(1024, dtype=torch.int32)


def define_ops(lib, namespace, names=(NAME, METADATA_NAME)):
    """Defines <namespace>::npu_sparse_attn_sharedkv(_metadata) (those of `names`) in
    torch.library `lib` with the CPU kernel and a fake kernel (torch.compile). The metadata op
    may have no tensor argument at all, so its kernel is CompositeExplicitAutograd (a CPU kernel
    would never be selected for a call without tensors)."""
    if NAME in names:
        lib.define(NAME + _SCHEMA)
        lib.impl(NAME, cpu_kernel, "CPU")
        torch.library.register_fake(f"{namespace}::{NAME}", _fake, lib=lib)
    if METADATA_NAME in names:
        lib.define(METADATA_NAME + _METADATA_SCHEMA)
        lib.impl(METADATA_NAME, metadata_cpu_kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{METADATA_NAME}", _metadata_fake, lib=lib)
