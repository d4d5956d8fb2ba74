"""KvQuantSparseFlashAttention (torch_npu.npu_kv_quant_sparse_flash_attention) on the CPU, and the
helpers that build its 656-byte KV rows.

    rows = openfia.kvqsfa.quantize_kv_rows(k_nope, k_rope, "int8")      # [..., 656] int8
    out = openfia.npu_kv_quant_sparse_flash_attention(
        query, rows, rows, topk_indices, scale_value=576 ** -0.5, key_quant_mode=2,
        value_quant_mode=2, attention_mode=2, layout_kv="PA_BSND", block_table=bt,
        actual_seq_lengths_kv=lens)

The signature is torch_npu's, checked against the operator schema in Ascend/op-plugin
(op_plugin/config/op_plugin_functions.yaml @ 517f2e7d, `npu_kv_quant_sparse_flash_attention`),
its doc docs/zh/custom_APIs/torch_npu/torch_npu-npu_kv_quant_sparse_flash_attention.md, and the
upstream example cannmirror/ops-transformer
attention/kv_quant_sparse_flash_attention/examples/test_npu_kv_quant_sparse_flash_attention.py
(which passes every argument after sparse_indices by keyword). Notably: key_quant_mode and
value_quant_mode are required positional arguments; attention_mode defaults to 0, which the
operator rejects (only 2 is supported), so callers pass attention_mode=2 as the example does;
key_dtype/value_dtype/sinks are the newest additions. Semantics: docs/kv_quant_sparse_flash_attention.md.
"""
from __future__ import annotations

import sys

import torch

from . import _capsule, _openfia
from .sas import _traced
from .torch_ops import alloc_output

__all__ = [
    "npu_kv_quant_sparse_flash_attention",
    "quantize_kv_rows",
    "hifloat8_encode",
    "hifloat8_decode",
    "HIFLOAT8",
]

# Value of key_dtype/value_dtype that marks hifloat8 data held in uint8/int8 storage (torch has
# no hifloat8 dtype). It is aclDataType ACL_HIFLOAT8; the strings "hifloat8" and, when torch_npu
# is importable, torch_npu.hifloat8 are accepted too.
HIFLOAT8 = 34

_MAX_INT64 = 2**63 - 1

_SCHEMA = (
    "(Tensor query, Tensor key, Tensor value, Tensor sparse_indices, float scale_value, "
    "int key_quant_mode, int value_quant_mode, *, Tensor? key_dequant_scale=None, "
    "Tensor? value_dequant_scale=None, Tensor? block_table=None, "
    "Tensor? actual_seq_lengths_query=None, Tensor? actual_seq_lengths_kv=None, "
    "int sparse_block_size=1, str layout_query=\"BSND\", str layout_kv=\"BSND\", "
    "int sparse_mode=3, int pre_tokens=9223372036854775807, "
    "int next_tokens=9223372036854775807, int attention_mode=0, int quant_scale_repo_mode=1, "
    "int tile_size=128, int rope_head_dim=64, int? key_dtype=None, int? value_dtype=None, "
    "Tensor? sinks=None) -> Tensor"
)
NAME = "npu_kv_quant_sparse_flash_attention"

_DEFAULTS = dict(
    key_dequant_scale=None, value_dequant_scale=None, block_table=None,
    actual_seq_lengths_query=None, actual_seq_lengths_kv=None, sparse_block_size=1,
    layout_query="BSND", layout_kv="BSND", sparse_mode=3, pre_tokens=_MAX_INT64,
    next_tokens=_MAX_INT64, attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
    rope_head_dim=64, key_dtype=None, value_dtype=None, sinks=None,
)
_INT_ARGS = ("sparse_block_size", "sparse_mode", "pre_tokens", "next_tokens", "attention_mode",
             "quant_scale_repo_mode", "tile_size", "rope_head_dim")
_TENSOR_ARGS = ("key_dequant_scale", "value_dequant_scale", "block_table", "sinks")


def _dtype_code(v, name):
    """key_dtype/value_dtype -> None or HIFLOAT8 (the only value torch_npu accepts)."""
    if v is None:
        return None
    npu = sys.modules.get("torch_npu")
    if v == HIFLOAT8 or v == "hifloat8" or (npu is not None and v is getattr(npu, "hifloat8", 0)):
        return HIFLOAT8
    raise ValueError(f"{NAME}: argument '{name}': only hifloat8 (openfia.kvqsfa.HIFLOAT8, "
                     f"\"hifloat8\" or torch_npu.hifloat8) or None is supported (got {v!r})")


def _detached(t):
    if t is not None and t.requires_grad:
        t = t.detach()
    return t


def _rows_tensor(t):
    """The KV rows are read in place when their strides allow it (torch_npu accepts a dim-0
    non-contiguous paged cache); other views are copied."""
    t = _detached(t)
    if t.is_contiguous():
        return t
    ok = t.dim() > 0 and t.stride(-1) == 1 and t.data_ptr() % 4 == 0 and all(
        (s * t.element_size()) % 4 == 0 for s in t.stride()[:-1])
    return t if ok else t.contiguous()


def _lengths(v):
    if v is None:
        return None
    if isinstance(v, torch.Tensor):
        return _detached(v).contiguous()
    if isinstance(v, int):
        v = [v]
    return torch.tensor([int(x) for x in v], dtype=torch.int64)


def _native_kwargs(query, key, value, sparse_indices, scale_value, key_quant_mode,
                   value_quant_mode, kw):
    nkw = {
        "query": _detached(query).contiguous() if not query.is_contiguous() else _detached(query),
        "key": _rows_tensor(key),
        "value": _rows_tensor(value),
        "sparse_indices": _detached(sparse_indices),
        "scale_value": float(scale_value),
        "key_quant_mode": int(key_quant_mode),
        "value_quant_mode": int(value_quant_mode),
        "layout_query": str(kw["layout_query"]),
        "layout_kv": str(kw["layout_kv"]),
        "key_hifloat8": _dtype_code(kw["key_dtype"], "key_dtype") is not None,
        "value_hifloat8": _dtype_code(kw["value_dtype"], "value_dtype") is not None,
    }
    for name in _INT_ARGS:
        nkw[name] = int(kw[name])
    for name in _TENSOR_ARGS:
        if kw[name] is not None:
            nkw[name] = _detached(kw[name])
    for name in ("actual_seq_lengths_query", "actual_seq_lengths_kv"):
        if kw[name] is not None:
            nkw[name] = _lengths(kw[name])
    return nkw


def cpu_kernel(query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode,
               **kw):
    kw = {**_DEFAULTS, **kw}
    nkw = _native_kwargs(query, key, value, sparse_indices, scale_value, key_quant_mode,
                         value_quant_mode, kw)
    # One native call: validation, allocation (alloc_output) and compute; tensors as DLPack
    # capsules (see openfia._capsule).
    nkw = {k: _capsule(v) for k, v in nkw.items()}
    return _openfia.kvqsfa_call(alloc_output, **nkw)[0]


def _fake(query, key, value, sparse_indices, scale_value, key_quant_mode, value_quant_mode,
          *, rope_head_dim=64, **_):
    """Output shape from shapes alone, as torch_npu's infershape: query's shape with the last
    dimension reduced by rope_head_dim (576 - 64 = 512), query's dtype."""
    sizes = list(query.shape)
    sizes[-1] = sizes[-1] - rope_head_dim
    return query.new_empty(sizes)


def define_op(lib, namespace):
    """Defines <namespace>::npu_kv_quant_sparse_flash_attention in torch.library `lib` with the
    CPU kernel and a fake kernel (torch.compile). Called by openfia.torch_ops."""
    lib.define(NAME + _SCHEMA)
    lib.impl(NAME, cpu_kernel, "CPU")
    torch.library.register_fake(f"{namespace}::{NAME}", _fake, lib=lib)


def npu_kv_quant_sparse_flash_attention(query, key, value, sparse_indices, scale_value,
                                        key_quant_mode, value_quant_mode, *,
                                        key_dequant_scale=None, value_dequant_scale=None,
                                        block_table=None, actual_seq_lengths_query=None,
                                        actual_seq_lengths_kv=None, sparse_block_size=1,
                                        layout_query="BSND", layout_kv="BSND", sparse_mode=3,
                                        pre_tokens=_MAX_INT64, next_tokens=_MAX_INT64,
                                        attention_mode=0, quant_scale_repo_mode=1, tile_size=128,
                                        rope_head_dim=64, key_dtype=None, value_dtype=None,
                                        sinks=None):
    """torch_npu.npu_kv_quant_sparse_flash_attention on CPU tensors; returns attention_out
    ([B, S1, Q_N, 512] or [T, Q_N, 512], query dtype).

    query [B,S1,Q_N,576] (BSND) / [T,Q_N,576] (TND), float16/bfloat16. key: 656-byte rows
    [B,S2,1,656] / [KV_T,1,656] / [block_num,block_size,1,656] (PA_BSND) as torch.int8 (int8
    nope), torch.float8_e4m3fn, or torch.uint8 (hifloat8 nope; or any 1-byte tensor with
    key_dtype=HIFLOAT8). value: same dtype and leading shape (its content is not read: V is the
    dequantized nope part of key). sparse_indices int32 [B,S1,1,K] / [T,1,K], -1 ends a row.
    actual_seq_lengths_query/_kv: tensors or lists (TND: cumulative). Rows attending no key are
    0. Goes through torch.ops.openfia when traced (torch.compile holds it as one op), the native
    call directly for plain CPU tensors in eager mode."""
    key_dtype = _dtype_code(key_dtype, "key_dtype")
    value_dtype = _dtype_code(value_dtype, "value_dtype")
    op = getattr(torch.ops.openfia, NAME, None)
    # Eager calls on plain CPU tensors skip the dispatcher (the same native call, ~30 us less).
    call = op.default if op is not None and _traced(query, key) else cpu_kernel
    return call(query, key, value, sparse_indices, float(scale_value), int(key_quant_mode),
                int(value_quant_mode), key_dequant_scale=key_dequant_scale,
                value_dequant_scale=value_dequant_scale, block_table=block_table,
                actual_seq_lengths_query=_lengths(actual_seq_lengths_query),
                actual_seq_lengths_kv=_lengths(actual_seq_lengths_kv),
                sparse_block_size=sparse_block_size, layout_query=layout_query,
                layout_kv=layout_kv, sparse_mode=sparse_mode, pre_tokens=pre_tokens,
                next_tokens=next_tokens, attention_mode=attention_mode,
                quant_scale_repo_mode=quant_scale_repo_mode, tile_size=tile_size,
                rope_head_dim=rope_head_dim, key_dtype=key_dtype, value_dtype=value_dtype,
                sinks=sinks)


# ---- HiFloat8 ------------------------------------------------------------------------------

def _hif8_decode_code(x: int) -> float:
    """Value of one HiFloat8 code (SEMANTICS.md 2.5)."""
    if x == 0x00:
        return 0.0
    if x == 0x80:
        return float("nan")
    if x == 0x6F:
        return float("inf")
    if x == 0xEF:
        return float("-inf")
    sign = -1.0 if x & 0x80 else 1.0
    dot = (x >> 3) & 0xF
    if dot == 0:  # denormal
        return sign * 2.0 ** ((x & 7) - 23)
    if dot >= 12:
        w, mbits = 4, 1
    elif dot >= 8:
        w, mbits = 3, 2
    elif dot >= 4:
        w, mbits = 2, 3
    elif dot >= 2:
        w, mbits = 1, 3
    else:
        w, mbits = 0, 3
    m = x & ((1 << mbits) - 1)
    e_field = (x >> mbits) & ((1 << w) - 1)
    if w == 0:
        e = 0
    else:  # sign-magnitude with an implicit leading 1: top bit = negative
        mag = (1 << (w - 1)) + (e_field & ((1 << (w - 1)) - 1))
        e = -mag if e_field >> (w - 1) else mag
    return sign * 2.0 ** e * (1.0 + m / (1 << mbits))


_HIF8_TABLE = torch.tensor([_hif8_decode_code(c) for c in range(256)], dtype=torch.float64)
# Non-negative finite values in ascending order with their codes, and the midpoints between
# neighbours (exact in float64: every value has few significant bits).
_pos = sorted((v, c) for c, v in enumerate(_HIF8_TABLE.tolist())
              if c < 0x80 and v == v and v != float("inf"))
_HIF8_POS_VALUES = torch.tensor([v for v, _ in _pos], dtype=torch.float64)
_HIF8_POS_CODES = torch.tensor([c for _, c in _pos], dtype=torch.int64)
_HIF8_MIDPOINTS = (_HIF8_POS_VALUES[1:] + _HIF8_POS_VALUES[:-1]) / 2
_HIF8_OVERFLOW = 40960.0  # halfway from the largest value 32768 to 49152 (the code 0x6F)


def hifloat8_decode(codes: torch.Tensor) -> torch.Tensor:
    """HiFloat8 codes (uint8/int8 storage) -> float64 values."""
    return _HIF8_TABLE[codes.view(torch.uint8).long()]


def hifloat8_encode(x: torch.Tensor, saturate: bool = False) -> torch.Tensor:
    """float -> HiFloat8 codes (torch.uint8) the way the NPU converts (F32ToHiF8RoundAway):
    the input is first rounded to float32, then to the nearest HiFloat8 value with ties away from
    zero; |x| >= 40960 and +-inf become +-inf (or +-32768 when `saturate`); NaN -> 0x80; there is
    no -0 (tiny negatives -> 0x00)."""
    a = x.detach().to(torch.float32).to(torch.float64)
    mag = a.abs()
    # Count of midpoints <= |x|: ties (|x| equal to a midpoint) go to the larger magnitude.
    idx = torch.bucketize(mag, _HIF8_MIDPOINTS, right=True)
    code = _HIF8_POS_CODES[idx.clamp(max=len(_HIF8_POS_CODES) - 1)]
    over = mag >= _HIF8_OVERFLOW
    code = torch.where(over, torch.full_like(code, 0x6E if saturate else 0x6F), code)
    neg = (a < 0) & (code != 0)
    code = torch.where(neg, code | 0x80, code)
    code = torch.where(torch.isnan(a), torch.full_like(code, 0x80), code)
    return code.to(torch.uint8)


# ---- 656-byte rows -------------------------------------------------------------------------

_QMAX = {"int8": 127.0, "float8_e4m3fn": 448.0, "hifloat8": 15.0}


def quantize_kv_rows(nope: torch.Tensor, rope: torch.Tensor, fmt: str = "int8") -> torch.Tensor:
    """Builds KvQuantSparseFlashAttention KV rows: nope [..., 512] (any float dtype), rope
    [..., 64] (float16 or bfloat16, the query dtype) -> [..., 656] laid out as
    bytes 0-511 nope quantized per 128-wide tile, 512-639 rope, 640-655 four float32 scales.

    fmt "int8": scale = amax(|tile|)/127, round half to even, clamp to [-127, 127] -> torch.int8.
    fmt "float8_e4m3fn": scale = amax/448, round to nearest even -> torch.float8_e4m3fn.
    fmt "hifloat8": scale = amax/15 (HiFloat8 keeps 3 mantissa bits for magnitudes in
    [2^-3, 16)), NPU rounding (hifloat8_encode) -> torch.uint8.
    A tile of zeros gets scale 1. The operator computes K_nope = round_to_query_dtype(
    float(q) * scale), so the dequantized key is exactly what these bytes describe."""
    if fmt not in _QMAX:
        raise ValueError(f"quantize_kv_rows: fmt must be one of {sorted(_QMAX)} (got {fmt!r})")
    if nope.shape[-1] != 512 or rope.shape[-1] != 64 or nope.shape[:-1] != rope.shape[:-1]:
        raise ValueError(f"quantize_kv_rows: expected nope [..., 512] and rope [..., 64] with the "
                         f"same leading shape (got {tuple(nope.shape)} and {tuple(rope.shape)})")
    if rope.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"quantize_kv_rows: rope must be float16 or bfloat16 (the query dtype), "
                         f"got {rope.dtype}")
    lead = nope.shape[:-1]
    tiles = nope.detach().to(torch.float32).reshape(*lead, 4, 128)
    amax = tiles.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / _QMAX[fmt], torch.ones_like(amax)).to(torch.float32)
    x = tiles / scale
    if fmt == "int8":
        q = torch.round(x).clamp(-127, 127).to(torch.int8).view(torch.uint8)
    elif fmt == "float8_e4m3fn":
        q = x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    else:
        q = hifloat8_encode(x, saturate=True)
    q = q.reshape(*lead, 512)
    rows = torch.cat([q, rope.detach().contiguous().view(torch.uint8).reshape(*lead, 128),
                      scale.reshape(*lead, 4).contiguous().view(torch.uint8).reshape(*lead, 16)],
                     dim=-1)
    out_dtype = {"int8": torch.int8, "float8_e4m3fn": torch.float8_e4m3fn,
                 "hifloat8": torch.uint8}[fmt]
    return rows.contiguous().view(out_dtype)
