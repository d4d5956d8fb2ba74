"""openfia.quant: the byte formats' builders and decoders, and the structured errors of the
Python-side argument checks."""
import pytest
import torch

import openfia
from openfia import quant

F64 = torch.float64


def _decode_rows(rows, fmt, dtype):
    """An independent decode of 656-byte rows: the nope codes by dtype view (hifloat8 through
    its code table), times the tile's float32 scale, rounded to the query dtype."""
    u8 = rows.view(torch.uint8)
    codes = u8[..., :512].contiguous()
    if fmt == "int8":
        vals = codes.view(torch.int8).to(F64)
    elif fmt == "float8_e4m3fn":
        vals = codes.view(torch.float8_e4m3fn).to(F64)
    else:
        vals = quant.hifloat8_decode(codes)
    scales = u8[..., 640:656].contiguous().view(torch.float32).to(F64)
    nope = (vals.reshape(*u8.shape[:-1], 4, 128) * scales.unsqueeze(-1)).float()
    return (nope.reshape(*u8.shape[:-1], 512).to(dtype),
            u8[..., 512:640].contiguous().view(dtype))


@pytest.mark.parametrize("fmt", ["int8", "float8_e4m3fn", "hifloat8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dequantize_kv_rows_is_what_the_rows_describe(fmt, dtype):
    g = torch.Generator().manual_seed(7)
    nope = torch.randn(2, 3, 512, generator=g) * 5
    rope = torch.randn(2, 3, 64, generator=g).to(dtype)
    rows = quant.quantize_kv_rows(nope, rope, fmt)
    k_nope, k_rope = quant.dequantize_kv_rows(rows, dtype)
    want_nope, want_rope = _decode_rows(rows, fmt, dtype)
    assert k_nope.dtype == dtype and k_nope.shape == (2, 3, 512)
    assert torch.equal(k_nope, want_nope) and torch.equal(k_rope, rope)
    assert torch.equal(k_rope, want_rope)
    # hifloat8 in int8 storage, format named explicitly.
    if fmt == "hifloat8":
        again, _ = quant.dequantize_kv_rows(rows.view(torch.int8), dtype, fmt="hifloat8")
        assert torch.equal(again, k_nope)


def test_dequantize_kv_rows_errors_name_the_argument():
    rows = torch.zeros(4, 656, dtype=torch.int8)
    with pytest.raises(openfia.OpenfiaError) as e:
        quant.dequantize_kv_rows(rows[:, :600])
    assert e.value.argument == "rows" and "(got (4, 600))" in str(e.value)
    with pytest.raises(openfia.OpenfiaError) as e:
        quant.dequantize_kv_rows(rows, torch.float32)
    assert e.value.argument == "dtype"
    with pytest.raises(openfia.OpenfiaError) as e:
        quant.dequantize_kv_rows(rows.view(torch.uint8).view(torch.bool))
    assert e.value.argument == "fmt"


def test_int4_pack_unpack():
    vals = torch.tensor([[1, 2, 3, 4, 5, 6, 7, -8], [-1, -2, -3, -4, 0, 0, 0, 0]], dtype=torch.int8)
    words = quant.pack_int4(vals)
    assert words.dtype == torch.int32 and words.shape == (2, 1)
    # The first value sits in the lowest nibble.
    assert words[0, 0].item() == 0x87654321 - 2**32
    assert words[1, 0].item() == 0x0000CDEF
    every = torch.arange(-8, 8, dtype=torch.int8).repeat(3, 2)  # [3, 32]
    assert torch.equal(quant.unpack_int4(quant.pack_int4(every)), every)
    with pytest.raises(openfia.OpenfiaError) as e:
        quant.pack_int4(torch.zeros(3, 12, dtype=torch.int8))
    assert e.value.argument == "x" and e.value.code == "invalid_argument"


def test_python_side_errors_are_structured_like_the_librarys():
    """Errors raised by the Python front end carry .argument / .rule / .actual / .code and the
    library's wording, as the C++ errors do."""
    with pytest.raises(openfia.OpenfiaError) as e:
        quant.quantize_kv_rows(torch.zeros(1, 512), torch.zeros(1, 64).half(), "int4")
    err = e.value
    assert (err.argument, err.code) == ("fmt", "invalid_argument")
    assert str(err) == (f"quantize_kv_rows: argument 'fmt': {err.rule} (got 'int4')")
    out = torch.zeros(1, 3, 2, 8)
    lse = torch.zeros(1, 2, 3, 1)
    with pytest.raises(openfia.OpenfiaError) as e:
        openfia.merge_attention_states(out, lse, out, lse, input_layout="NSD")
    assert e.value.argument == "input_layout" and e.value.actual == "'NSD'"
    # The C++ library's own errors, for comparison: the same attributes.
    with pytest.raises(openfia.OpenfiaError) as e:
        openfia.npu_fused_infer_attention_score(out, out, out, input_layout="XYZ")
    assert e.value.argument == "input_layout" and e.value.code
