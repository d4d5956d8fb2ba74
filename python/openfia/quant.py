"""Quantization helpers: the byte formats openfia's operators read, built from and decoded to
float tensors with torch.

- HiFloat8 codes (hifloat8_encode / hifloat8_decode; HIFLOAT8 is the key_dtype / value_dtype
  value that marks hifloat8 data held in uint8 / int8 storage);
- the 656-byte KV rows of npu_kv_quant_sparse_flash_attention (quantize_kv_rows /
  dequantize_kv_rows);
- packed int4 (pack_int4 / unpack_int4): eight signed 4-bit values per int32 word, as
  npu_fused_infer_attention_score takes an int4 KV cache.

openfia.kvqsfa re-exports the HiFloat8 and KV-row helpers under the same names.
"""
from __future__ import annotations

import torch

from ._native import error

__all__ = ["HIFLOAT8", "hifloat8_encode", "hifloat8_decode", "quantize_kv_rows",
           "dequantize_kv_rows", "pack_int4", "unpack_int4"]

# Value of key_dtype/value_dtype that marks hifloat8 data held in uint8/int8 storage (torch has
# no hifloat8 dtype). It is aclDataType ACL_HIFLOAT8; the strings "hifloat8" and, when torch_npu
# is importable, torch_npu.hifloat8 are accepted too.
HIFLOAT8 = 34


# ---- HiFloat8 ------------------------------------------------------------------------------

def _hif8_decode_code(x: int) -> float:
    """Value of one HiFloat8 code: sign bit, a dot field that sets how many of the remaining bits
    are exponent and mantissa, and special codes for 0, NaN and +-inf."""
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
        raise error("quantize_kv_rows", "fmt", f"must be one of {sorted(_QMAX)}", repr(fmt))
    if nope.shape[-1] != 512 or rope.shape[-1] != 64 or nope.shape[:-1] != rope.shape[:-1]:
        raise error("quantize_kv_rows", "nope", "nope must be [..., 512] and rope [..., 64] with "
                    "the same leading shape", f"{tuple(nope.shape)} and {tuple(rope.shape)}")
    if rope.dtype not in (torch.float16, torch.bfloat16):
        raise error("quantize_kv_rows", "rope", "must be float16 or bfloat16 (the query dtype)",
                    rope.dtype)
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


_ROW_FORMATS = {torch.int8: "int8", torch.float8_e4m3fn: "float8_e4m3fn", torch.uint8: "hifloat8"}


def dequantize_kv_rows(rows: torch.Tensor, dtype=torch.bfloat16, fmt: str | None = None):
    """The inverse view of quantize_kv_rows: [..., 656] rows -> (k_nope [..., 512], k_rope
    [..., 64]) in `dtype` (the query dtype), exactly as the operator computes them:
    k_nope = round_to_dtype(float32(code) * scale of its 128-wide tile); k_rope is the stored
    bytes read as `dtype`. V is k_nope. fmt defaults to the format rows' dtype stands for
    (int8, float8_e4m3fn, uint8 = hifloat8); give it for hifloat8 held in int8 storage."""
    fmt = fmt or _ROW_FORMATS.get(rows.dtype)
    if fmt not in _QMAX:
        raise error("dequantize_kv_rows", "fmt", f"must be one of {sorted(_QMAX)} (or rows of "
                    "dtype int8, float8_e4m3fn or uint8)", f"{fmt!r} for rows of {rows.dtype}")
    if rows.shape[-1] != 656:
        raise error("dequantize_kv_rows", "rows", "must be [..., 656]", tuple(rows.shape))
    if dtype not in (torch.float16, torch.bfloat16):
        raise error("dequantize_kv_rows", "dtype", "must be float16 or bfloat16 (the query dtype)",
                    dtype)
    u8 = rows.view(torch.uint8)
    lead = u8.shape[:-1]
    codes = u8[..., :512]
    if fmt == "int8":
        x = codes.contiguous().view(torch.int8).float()
    elif fmt == "float8_e4m3fn":
        x = codes.contiguous().view(torch.float8_e4m3fn).float()
    else:
        x = hifloat8_decode(codes).float()
    scale = u8[..., 640:656].contiguous().view(torch.float32)            # [..., 4]
    nope = (x.reshape(*lead, 4, 128) * scale.unsqueeze(-1)).reshape(*lead, 512).to(dtype)
    rope = u8[..., 512:640].contiguous().view(dtype)
    return nope, rope


# ---- int4 ----------------------------------------------------------------------------------------

def pack_int4(x: torch.Tensor) -> torch.Tensor:
    """Integer values in [-8, 7] (any integer dtype), last dimension a multiple of 8 -> int32
    words, eight values per word, the first in the lowest nibble (two's complement nibbles)."""
    if x.shape[-1] % 8 != 0:
        raise error("pack_int4", "x", "the last dimension must be a multiple of 8",
                    tuple(x.shape))
    *lead, d = x.shape
    nib = (x.to(torch.int64) & 0xF).reshape(*lead, d // 8, 8)
    shifts = torch.arange(8, dtype=torch.int64) * 4
    words = (nib << shifts).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32)


def unpack_int4(w: torch.Tensor) -> torch.Tensor:
    """int32 words -> int8 values in [-8, 7], eight per word (the inverse of pack_int4)."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    n = (w.unsqueeze(-1) >> shifts) & 0xF
    n = (n ^ 8) - 8
    return n.reshape(*w.shape[:-1], w.shape[-1] * 8).to(torch.int8)
