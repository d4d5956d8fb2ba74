"""npu_incre_flash_attention, npu_prompt_flash_attention and npu_fused_infer_attention_score_v2:
each case of the shared list that the operator can express, translated into its arguments, gives
exactly (bitwise) the FIA result and lies within the float64 oracle's bounds; the operators' own
rules and defaults; their schemas (op-plugin's), fake kernels and torch.compile; torch_npu's
names after patch_torch_npu() and the stand-in's error for what openfia does not provide."""
import inspect
import math
import os
import subprocess
import sys

import pytest
import torch

import openfia
import torch_ref
from cases import build_inputs, call_kwargs, tier_cases
from common import assert_within

fia = openfia.npu_fused_infer_attention_score
ifa = openfia.npu_incre_flash_attention
pfa = openfia.npu_prompt_flash_attention
fia_v2 = openfia.npu_fused_infer_attention_score_v2

SMOKE = tier_cases("smoke")


def _query_s(q, layout):
    return openfia.fia.query_seq_len(q, layout)


# ---- FIA keyword arguments of a case -> each operator's, or None where it cannot express them --

def _unset(kw, names):
    """Every one of `names` absent from kw or None."""
    return all(kw.get(n) is None for n in names)


def as_ifa(q, k, kw):
    """IFA takes one query token, the query layouts BSH/BSND/BNSD, legacy antiquant in mode 0,
    no tensor list, prefix, rope, sinks or KV-separated antiquant parameters. FIA ignores
    actual_seq_lengths, query_padding_size, sparse_mode and pre/next at Q_S = 1: dropped."""
    layout = kw.get("input_layout", "BSH")
    if isinstance(k, list) or layout not in ("BSH", "BSND", "BNSD") or _query_s(q, layout) != 1:
        return None
    if not _unset(kw, ("key_antiquant_scale", "value_antiquant_scale", "key_shared_prefix",
                       "query_rope", "sinks")) or kw.get("antiquant_mode", 0) != 0:
        return None
    out = {n: kw[n] for n in ("pse_shift", "atten_mask", "antiquant_scale", "antiquant_offset",
                              "block_table", "dequant_scale1", "quant_scale1", "dequant_scale2",
                              "quant_scale2", "quant_offset2", "kv_padding_size", "num_heads",
                              "num_key_value_heads", "block_size") if n in kw}
    out["input_layout"] = layout
    out["actual_seq_lengths"] = kw.get("actual_seq_lengths_kv")
    out["scale_value"] = kw.get("scale", 1.0)
    out["inner_precise"] = kw.get("inner_precise", 0)  # IFA's default is 1, FIA's 0
    return out


def as_pfa(q, k, kw):
    """PFA takes Q_S > 1 here (a one-token query is a prompt for it: tested below), the layouts
    BSH/BSND/BNSD/BNSD_BSND/TND, int8 full quantization and post-quantization, no paging,
    antiquant, padding sizes, prefix, rope, sinks or tensor list. inner_precise bit 0 becomes
    sparse_mode + 10 (bit 1 is always in effect in openfia)."""
    layout = kw.get("input_layout", "BSH")
    if isinstance(k, list) or layout not in ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND"):
        return None
    if layout != "TND" and _query_s(q, layout) == 1:
        return None
    if not _unset(kw, ("block_table", "antiquant_scale", "key_antiquant_scale",
                       "value_antiquant_scale", "query_padding_size", "kv_padding_size",
                       "key_shared_prefix", "query_rope", "sinks")):
        return None
    out = {n: kw[n] for n in ("pse_shift", "atten_mask", "actual_seq_lengths",
                              "actual_seq_lengths_kv", "quant_scale1", "quant_scale2",
                              "quant_offset2", "num_heads", "num_key_value_heads",
                              "pre_tokens") if n in kw}
    out["input_layout"] = layout
    out["deq_scale1"] = kw.get("dequant_scale1")
    out["deq_scale2"] = kw.get("dequant_scale2")
    out["scale_value"] = kw.get("scale", 1.0)
    out["next_tokens"] = kw.get("next_tokens", 2147483647)  # PFA's default is 0
    mode = kw.get("sparse_mode", 0)
    out["sparse_mode"] = mode + 10 if kw.get("inner_precise", 0) & 1 == 0 else mode
    return out


V2_NAMES = {
    "actual_seq_lengths": "actual_seq_qlen", "actual_seq_lengths_kv": "actual_seq_kvlen",
    "key_antiquant_scale": "dequant_scale_key", "key_antiquant_offset": "dequant_offset_key",
    "value_antiquant_scale": "dequant_scale_value",
    "value_antiquant_offset": "dequant_offset_value", "quant_scale2": "quant_scale_out",
    "quant_offset2": "quant_offset_out", "sinks": "learnable_sink", "num_heads": "num_query_heads",
    "scale": "softmax_scale", "key_antiquant_mode": "key_quant_mode",
    "value_antiquant_mode": "value_quant_mode", "softmax_lse_flag": "return_softmax_lse",
}
V2_SAME = ("query_rope", "key_rope", "pse_shift", "atten_mask", "block_table",
           "num_key_value_heads", "pre_tokens", "next_tokens", "input_layout", "sparse_mode",
           "block_size", "inner_precise")


def as_v2(q, k, kw):
    """v2 has no tensor list, shared prefix, padding sizes, legacy antiquant or int8 (pertensor)
    full quantization; everything else is renamed."""
    if isinstance(k, list) or q.dtype == torch.int8:
        return None
    if not _unset(kw, ("key_shared_prefix", "query_padding_size", "kv_padding_size",
                       "antiquant_scale", "key_rope_antiquant_scale")):
        return None
    out = {}
    for name, value in kw.items():
        if name in V2_NAMES:
            out[V2_NAMES[name]] = value
        elif name in V2_SAME:
            out[name] = value
        elif value is not None and name not in ("antiquant_mode", "actual_shared_prefix_len",
                                                "antiquant_offset"):
            raise AssertionError(f"as_v2: unmapped argument {name}")
    return out


def bits_equal(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype and
            torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def _check(case, translate, op, with_lse):
    q, k, v, kw = call_kwargs(build_inputs(case))
    args = translate(q, k, kw)
    want = fia(q, k, v, **kw)
    got = op(q, k, v, **args)
    out = got[0] if with_lse else got
    assert bits_equal(out, want[0]), f"{case.name}: attention_out differs from FIA's"
    if with_lse:
        assert bits_equal(got[1], want[1]), f"{case.name}: softmax_lse differs from FIA's"
    ref, ref_lse, bound, lse_bound, ref_dtype = torch_ref.reference(q, k, v, **kw)
    assert out.dtype == ref_dtype
    assert_within(out, ref, bound, f"{case.name}: attention_out")
    if with_lse and kw.get("softmax_lse_flag"):
        assert_within(got[1], ref_lse, lse_bound, f"{case.name}: softmax_lse")
    # The fake kernel: the same shapes and dtypes from meta tensors.
    meta = op(*(t.to("meta") for t in (q, k, v)),
              **{n: x.to("meta") if isinstance(x, torch.Tensor) else x for n, x in args.items()})
    for m, e in zip(meta if with_lse else (meta,), got if with_lse else (got,)):
        assert m.device.type == "meta" and m.shape == e.shape and m.dtype == e.dtype


def _expressible(translate):
    """The cases of the list whose arguments the operator has."""
    out = []
    for case in SMOKE:
        q, k, v, kw = call_kwargs(build_inputs(case))
        if translate(q, k, kw) is not None:
            out.append(case)
    return out


IFA_CASES, PFA_CASES, V2_CASES = (_expressible(t) for t in (as_ifa, as_pfa, as_v2))


@pytest.mark.parametrize("case", IFA_CASES, ids=[c.name for c in IFA_CASES])
def test_incre_flash_attention_cases(case):
    _check(case, as_ifa, ifa, False)


@pytest.mark.parametrize("case", PFA_CASES, ids=[c.name for c in PFA_CASES])
def test_prompt_flash_attention_cases(case):
    _check(case, as_pfa, pfa, False)


@pytest.mark.parametrize("case", V2_CASES, ids=[c.name for c in V2_CASES])
def test_fused_infer_attention_score_v2_cases(case):
    _check(case, as_v2, fia_v2, True)


def test_translations_cover_the_features():
    """The case list reaches each operator with its features (so the tests above are not
    vacuous): IFA with GQA, paging, a mask, kv padding, legacy antiquant and post-quantization;
    PFA with every sparse_mode, pse, int8 full quantization, TND and BNSD_BSND; v2 with KV
    antiquant modes, MLA rope, sinks, lse and paging."""
    seen = {"ifa": set(), "pfa": set(), "v2": set()}
    for name, tr, cases in (("ifa", as_ifa, IFA_CASES), ("pfa", as_pfa, PFA_CASES),
                            ("v2", as_v2, V2_CASES)):
        for case in cases:
            q, k, v, kw = call_kwargs(build_inputs(case))
            a = tr(q, k, kw)
            s = seen[name]
            s.update(n for n, x in a.items() if isinstance(x, torch.Tensor))
            s.add(f"layout={a['input_layout']}" if "input_layout" in a else "layout=BSH")
            s.add(f"sparse={a.get('sparse_mode', 0) % 10}")
            if a.get("num_key_value_heads", 0) not in (0, a.get("num_heads",
                                                                a.get("num_query_heads"))):
                s.add("gqa")
    assert {"block_table", "atten_mask", "kv_padding_size", "antiquant_scale", "quant_scale2",
            "gqa", "layout=BSH", "layout=BSND", "layout=BNSD"} <= seen["ifa"]
    assert {"atten_mask", "pse_shift", "deq_scale1", "quant_scale2", "layout=TND",
            "layout=BNSD_BSND", "sparse=0", "sparse=1", "sparse=2", "sparse=3",
            "sparse=4"} <= seen["pfa"]
    assert {"dequant_scale_key", "dequant_scale_value", "query_rope", "learnable_sink",
            "block_table", "quant_scale_out", "layout=TND", "layout=BSND_NBSD"} <= seen["v2"]


def test_ifa_pse_shift_and_int4_cache():
    """IFA's pse_shift (B, N, 1, KV_S) and an int4 cache with per-channel legacy antiquant (not
    in the shared list's one-token cases): FIA's result, bitwise, within the oracle's bounds."""
    q, k, v = _bnsd(2, 4, 1, 32, 64, dtype=torch.float16, seed=3)
    pse = torch.randn(2, 4, 1, 32).to(torch.float16)
    kw = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD",
              actual_seq_lengths_kv=[32, 20])
    kv = k[:, :2].contiguous(), v[:, :2].contiguous()
    got = ifa(q, *kv, pse_shift=pse, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
              actual_seq_lengths=[32, 20], inner_precise=0)
    assert bits_equal(got, fia(q, *kv, pse_shift=pse, **kw)[0])
    ref, _, bound, _, _ = torch_ref.reference(q, *kv, pse_shift=pse, **kw)
    assert_within(got, ref, bound, "ifa pse_shift")
    # int4 cache (BNSD [B, KV_N, KV_S, D / 8] int32 words).
    g = torch.Generator().manual_seed(5)
    cache = torch.randint(-2**31, 2**31 - 1, (2, 2, 32, 8), generator=g, dtype=torch.int64)
    cache = cache.to(torch.int32)
    scale = (torch.rand(2, 2, 1, 64, generator=g) * 0.1).to(torch.float16)
    offset = torch.randn(2, 2, 1, 64, generator=g).to(torch.float16)
    fkw = dict(antiquant_scale=scale, antiquant_offset=offset, num_heads=4,
               num_key_value_heads=2, input_layout="BNSD", inner_precise=1)
    got = ifa(q, cache, cache, actual_seq_lengths=[32, 9], **fkw)
    want = fia(q, cache, cache, actual_seq_lengths_kv=[32, 9], **fkw)[0]
    assert bits_equal(got, want) and got.abs().sum() > 0
    ref, _, bound, _, _ = torch_ref.reference(q, cache, cache, actual_seq_lengths_kv=[32, 9],
                                              **fkw)
    assert_within(got, ref, bound, "ifa int4")


# ---- npu_prompt_flash_attention's own semantics --------------------------------------------------

def _bnsd(b, n, s, kvs, d, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, n, s, d, generator=g).to(dtype)
    k = torch.randn(b, n, kvs, d, generator=g).to(dtype)
    v = torch.randn(b, n, kvs, d, generator=g).to(dtype)
    return q, k, v


def test_pfa_next_tokens_defaults_to_zero():
    """PFA's next_tokens defaults to 0: with a mask in sparse_mode 0 each row sees keys up to its
    own position (FIA's default 2147483647 sees every key the mask allows)."""
    q, k, v = _bnsd(2, 2, 5, 7, 16)
    mask = torch.zeros(5, 7, dtype=torch.bool)
    kw = dict(num_heads=2, input_layout="BNSD", atten_mask=mask)
    got = pfa(q, k, v, scale_value=0.25, **kw)
    assert bits_equal(got, fia(q, k, v, scale=0.25, next_tokens=0, **kw)[0])
    assert not torch.equal(got, fia(q, k, v, scale=0.25, **kw)[0])
    ref, _, bound, _, _ = torch_ref.reference(q, k, v, scale=0.25, next_tokens=0, **kw)
    assert_within(got, ref, bound, "pfa next_tokens=0")


def test_pfa_one_token_query_is_a_prompt():
    """A one-token query is computed as a prompt (FIA's Q_S = 1 branch would ignore the band,
    sparse_mode and actual_seq_lengths): with a mask and next_tokens 0 (PFA's default) or
    sparse_mode 2 row 0 sees key 0 alone, so the output is value row 0; sparse_mode 4 with
    pre_tokens 1, next_tokens 0 sees the last two keys; sparse_mode 3 sees every key;
    actual_seq_lengths 0 computes nothing. Layouts BNSD, BSND, BSH, BNSD_BSND; a one-row pse."""
    q, k, v = _bnsd(2, 2, 1, 9, 16)
    kw = dict(num_heads=2, input_layout="BNSD", scale_value=0.3)
    causal = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    first = v[:, :, :1]
    assert torch.equal(pfa(q, k, v, atten_mask=torch.zeros(1, 9, dtype=torch.bool), **kw), first)
    assert torch.equal(pfa(q, k, v, atten_mask=causal, sparse_mode=2, **kw), first)
    # BSND / BSH / BNSD_BSND: the same computation in the other layouts, with a 4-D mask.
    mask4 = torch.zeros(2, 1, 1, 9, dtype=torch.bool)
    bsnd = pfa(q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(),
               v.transpose(1, 2).contiguous(), atten_mask=mask4,
               **{**kw, "input_layout": "BSND"})
    assert torch.equal(bsnd, first.transpose(1, 2))
    bsh = pfa(q.transpose(1, 2).reshape(2, 1, 32), k.transpose(1, 2).reshape(2, 9, 32),
              v.transpose(1, 2).reshape(2, 9, 32), atten_mask=mask4,
              **{**kw, "input_layout": "BSH"})
    assert torch.equal(bsh, first.transpose(1, 2).reshape(2, 1, 32))
    out = pfa(q, k, v, atten_mask=mask4, **{**kw, "input_layout": "BNSD_BSND"})
    assert torch.equal(out, first.transpose(1, 2))
    # sparse_mode 4, pre 1, next 0, origin bottom-right: keys 7 and 8.
    got = pfa(q, k, v, atten_mask=causal, sparse_mode=4, pre_tokens=1, **kw)
    ref, _, bound, _, _ = torch_ref.reference(q, k[:, :, 7:], v[:, :, 7:], num_heads=2,
                                              input_layout="BNSD", scale=0.3)
    assert_within(got, ref, bound, "pfa one token, band")
    # sparse_mode 3: every key, as the incremental operator computes.
    got = pfa(q, k, v, atten_mask=causal, sparse_mode=3, **kw)
    ref, _, bound, _, _ = torch_ref.reference(q, k, v, num_heads=2, input_layout="BNSD",
                                              scale=0.3)
    assert_within(got, ref, bound, "pfa one token, rightDownCausal")
    # A one-row pse_shift is added to row 0's scores.
    pse = torch.randn(1, 2, 1, 9).to(torch.bfloat16)
    got = pfa(q, k, v, pse_shift=pse, **kw)
    ref, _, bound, _, _ = torch_ref.reference(q, k, v, pse_shift=pse, num_heads=2,
                                              input_layout="BNSD", scale=0.3)
    assert_within(got, ref, bound, "pfa one token, pse")
    # actual_seq_lengths 0 for batch 1: its row is not computed (0).
    got = pfa(q, k, v, actual_seq_lengths=[1, 0], **kw)
    assert got.shape == q.shape and torch.equal(got[1], torch.zeros_like(got[1]))
    assert got[0].abs().sum() > 0


def test_pfa_high_precision_sparse_modes_and_padding_mask():
    """sparse_mode 10-14 are sparse_mode 0-4 in high-precision mode (torch_npu's mapping);
    padding_mask is reserved and torch_npu does not pass it on: no effect."""
    q, k, v = _bnsd(1, 2, 6, 9, 16)
    causal = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
    kw = dict(num_heads=2, input_layout="BNSD", atten_mask=causal)
    for mode in (2, 3, 4):
        assert bits_equal(pfa(q, k, v, sparse_mode=mode + 10, **kw),
                          fia(q, k, v, sparse_mode=mode, next_tokens=0, inner_precise=0,
                              **kw)[0])
    assert bits_equal(pfa(q, k, v, padding_mask=torch.ones(1, 9), sparse_mode=3, **kw),
                      pfa(q, k, v, sparse_mode=3, **kw))


# ---- each operator's own errors ------------------------------------------------------------------

def _raises(argument, fn, *args, code=None, words=(), **kw):
    with pytest.raises(openfia.OpenfiaError) as ei:
        fn(*args, **kw)
    e = ei.value
    assert e.argument == argument, str(e)
    assert str(e).startswith(fn.__name__ + ": argument '" + argument + "'"), str(e)
    if code is not None:
        assert e.code == code, str(e)
    for w in words:
        assert w in str(e), str(e)
    return e


def test_ifa_errors():
    q, k, v = _bnsd(2, 2, 1, 9, 16)
    kw = dict(num_heads=2, input_layout="BNSD")
    q2 = torch.cat([q, q], dim=2)
    _raises("query", ifa, q2, k, v, words=("S must be 1", "[2, 2, 2, 16]"), **kw)
    _raises("input_layout", ifa, q[:, :, 0], k[:, :, 0], v[:, :, 0], num_heads=2,
            input_layout="TND", words=("BSH, BSND, BNSD",))
    _raises("input_layout", ifa, q, k, v, num_heads=2, input_layout="BNSD_BSND")
    # FIA's rules in IFA's names: the key/value lengths are `actual_seq_lengths` here.
    _raises("actual_seq_lengths", ifa, q, k, v, actual_seq_lengths=[10, 3], **kw)
    _raises("scale_value", ifa, q, k, v, scale_value=math.nan, **kw)
    _raises("inner_precise", ifa, q, k, v, inner_precise=2, **kw)
    # Through the dispatcher (meta tensors) the fake kernel says the same.
    _raises("query", ifa, q2.to("meta"), k.to("meta"), v.to("meta"), **kw)


def test_pfa_errors():
    q, k, v = _bnsd(2, 2, 4, 9, 16)
    kw = dict(num_heads=2, input_layout="BNSD")
    _raises("input_layout", pfa, q[0], k[0], v[0], num_heads=2, input_layout="NTD",
            words=("BSH, BSND, BNSD, BNSD_BSND, TND",))
    _raises("sparse_mode", pfa, q, k, v, sparse_mode=5, code="unsupported", **kw)
    _raises("deq_scale1", pfa, q, k, v, deq_scale1=torch.ones(1), **kw)
    _raises("scale_value", pfa, q, k, v, scale_value=math.inf, **kw)
    q1 = q[:, :, :1].contiguous()
    _raises("actual_seq_lengths", pfa, q1, k, v, actual_seq_lengths=[2], **kw)
    _raises("actual_seq_lengths", pfa, q1, k, v, actual_seq_lengths=[1, -1], **kw)


def test_v2_errors_name_what_openfia_lacks():
    q, k, v = _bnsd(1, 2, 3, 9, 16)
    kw = dict(num_query_heads=2, input_layout="BNSD")
    for name in ("dequant_scale_query", "dequant_scale_key_rope", "quant_scale_p"):
        _raises(name, fia_v2, q, k, v, code="unsupported", **{name: torch.ones(1)}, **kw)
    _raises("out_dtype", fia_v2, q, k, v, out_dtype=1, code="unsupported", **kw)
    for name in ("query_dtype", "key_dtype", "dequant_scale_key_rope_dtype"):
        _raises(name, fia_v2, q, k, v, code="unsupported", **{name: 27}, **kw)
    qi = torch.ones(1, 2, 3, 16, dtype=torch.int8)
    _raises("query", fia_v2, qi, qi, qi, code="unsupported", words=("int8",), **kw)
    mask = torch.zeros(1, 3, 3, dtype=torch.bool)
    _raises("sparse_mode", fia_v2, q, k, v, sparse_mode=9, atten_mask=mask, code="unsupported",
            words=("treeMask",), **kw)
    # FIA's rules in v2's names.
    e = _raises("query", fia_v2, q, k, v, num_query_heads=3, input_layout="BNSD",
                words=("must equal num_query_heads",))
    assert "num_query_heads = 3" in e.actual, str(e)
    _raises("actual_seq_kvlen", fia_v2, q, k, v, actual_seq_kvlen=[10], **kw)
    _raises("softmax_scale", fia_v2, q, k, v, softmax_scale=math.nan, **kw)
    # The rule's own text speaks v2's names too.
    _raises("dequant_scale_value", fia_v2, q, k, v, dequant_scale_key=torch.ones(1),
            words=("dequant_scale_key and dequant_scale_value must both be None",), **kw)


# ---- registration: schemas, signatures, torch.compile --------------------------------------------

# op-plugin's op_plugin_functions.yaml, verbatim (torch prints 1.0 as "1.").
UPSTREAM_SCHEMAS = {
    "npu_incre_flash_attention": (
        "(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? pse_shift=None, SymInt[]? actual_seq_lengths=None, "
        "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? kv_padding_size=None, "
        "int num_heads=1, float scale_value=1.0, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int block_size=0, int inner_precise=1) -> Tensor"),
    "npu_prompt_flash_attention": (
        "(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? pse_shift=None, int[]? actual_seq_lengths=None, "
        "Tensor? deq_scale1=None, Tensor? quant_scale1=None, Tensor? deq_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, int num_heads=1, "
        "float scale_value=1.0, int pre_tokens=2147483647, int next_tokens=0, "
        "str input_layout=\"BSH\", int num_key_value_heads=0, "
        "int[]? actual_seq_lengths_kv=None, int sparse_mode=0) -> Tensor"),
    "npu_fused_infer_attention_score_v2": (
        "(Tensor query, Tensor key, Tensor value, *, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? pse_shift=None, Tensor? atten_mask=None, "
        "SymInt[]? actual_seq_qlen=None, SymInt[]? actual_seq_kvlen=None, "
        "Tensor? block_table=None, Tensor? dequant_scale_query=None, "
        "Tensor? dequant_scale_key=None, Tensor? dequant_offset_key=None, "
        "Tensor? dequant_scale_value=None, Tensor? dequant_offset_value=None, "
        "Tensor? dequant_scale_key_rope=None, Tensor? quant_scale_out=None, "
        "Tensor? quant_offset_out=None, Tensor? quant_scale_p=None, "
        "Tensor? learnable_sink=None, int num_query_heads=1, int num_key_value_heads=0, "
        "float softmax_scale=1.0, int pre_tokens=2147483647, int next_tokens=2147483647, "
        "str input_layout=\"BSH\", int sparse_mode=0, int block_size=0, "
        "int query_quant_mode=0, int key_quant_mode=0, int value_quant_mode=0, "
        "int inner_precise=0, bool return_softmax_lse=False, int? query_dtype=None, "
        "int? key_dtype=None, int? value_dtype=None, int? query_rope_dtype=None, "
        "int? key_rope_dtype=None, int? key_shared_prefix_dtype=None, "
        "int? value_shared_prefix_dtype=None, int? dequant_scale_query_dtype=None, "
        "int? dequant_scale_key_dtype=None, int? dequant_scale_value_dtype=None, "
        "int? dequant_scale_key_rope_dtype=None, int? out_dtype=None) -> (Tensor, Tensor)"),
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_SCHEMAS))
def test_schema_and_signature_are_torch_npus(name):
    schema = getattr(torch.ops.openfia, name).default._schema
    assert str(schema) == f"openfia::{name}" + UPSTREAM_SCHEMAS[name].replace("=1.0,", "=1.,")
    # The Python function: the same arguments, order and defaults.
    params = inspect.signature(getattr(openfia, name)).parameters
    assert list(params) == [a.name for a in schema.arguments]
    for a in schema.arguments:
        default = params[a.name].default
        want = a.default_value if a.has_default_value() else inspect.Parameter.empty
        assert default == want and type(default) is type(want), a.name


def test_torch_compile_fullgraph_matches_eager():
    q, k, v = _bnsd(2, 4, 1, 9, 16)
    qp = torch.cat([q, q, q], dim=2)
    mask = torch.triu(torch.ones(3, 9, dtype=torch.bool), diagonal=7)

    def f(q, qp, k, v):
        a = ifa(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                actual_seq_lengths=[9, 5], scale_value=0.25)
        b = pfa(qp, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                atten_mask=mask, next_tokens=6)
        c = pfa(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD")
        d, lse = fia_v2(qp, k, v, num_query_heads=4, num_key_value_heads=2,
                        input_layout="BNSD_BSND", actual_seq_kvlen=[9, 4],
                        return_softmax_lse=True)
        return a.float() + 1, b, c * 2, d, lse

    kv = k[:, :2].contiguous(), v[:, :2].contiguous()
    eager = f(q, qp, *kv)
    assert [t.shape for t in eager] == [(2, 4, 1, 16), (2, 4, 3, 16), (2, 4, 1, 16),
                                        (2, 3, 4, 16), (2, 4, 3, 1)]
    for backend in ("eager", "aot_eager"):
        compiled = torch.compile(f, fullgraph=True, backend=backend)(q, qp, *kv)
        for a, b in zip(eager, compiled):
            assert bits_equal(a, b)


# ---- patch_torch_npu and the stand-in ------------------------------------------------------------

def test_torch_npu_names_and_the_stand_ins_error(tmp_path):
    """Under `python -m openfia run`, torch_npu.<op> and torch.ops.npu.<op> of the three
    operators are openfia's; torch_npu.X that openfia does not provide raises an OpenfiaError
    (also an AttributeError, so hasattr() still answers) naming X; importing a submodule it does
    not have, or `from torch_npu import X`, names it likewise."""
    code = (
        "import torch, openfia, torch_npu\n"
        "q = torch.randn(1, 2, 1, 16).to(torch.bfloat16)\n"
        "k = torch.randn(1, 2, 7, 16).to(torch.bfloat16)\n"
        "kw = dict(input_layout='BNSD')\n"
        "for name, extra in (('npu_incre_flash_attention', dict(num_heads=2)),\n"
        "                    ('npu_prompt_flash_attention', dict(num_heads=2)),\n"
        "                    ('npu_fused_infer_attention_score_v2', dict(num_query_heads=2))):\n"
        "    want = getattr(openfia, name)(q, k, k, **kw, **extra)\n"
        "    assert getattr(torch_npu, name) is getattr(openfia, name)\n"
        "    for f in (getattr(torch_npu, name), getattr(torch.ops.npu, name)):\n"
        "        got = f(q, k, k, **kw, **extra)\n"
        "        got, want1 = (got[0], want[0]) if isinstance(got, tuple) else (got, want)\n"
        "        assert torch.equal(got, want1), name\n"
        "assert not hasattr(torch_npu, 'npu_rotary_mul')\n"
        "assert getattr(torch_npu, 'npu_format_cast', 5) == 5\n"
        "try:\n"
        "    torch_npu.npu_rms_norm\n"
        "except openfia.OpenfiaError as e:\n"
        "    assert isinstance(e, AttributeError) and e.argument == 'npu_rms_norm', e\n"
        "    assert str(e).startswith('torch_npu.npu_rms_norm: openfia does not provide it'), e\n"
        "    assert 'npu_incre_flash_attention' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error for torch_npu.npu_rms_norm')\n"
        "try:\n"
        "    from torch_npu.contrib import transfer_to_npu\n"
        "except ModuleNotFoundError as e:\n"
        "    assert str(e).startswith('torch_npu.contrib: openfia does not provide it'), e\n"
        "else:\n"
        "    raise SystemExit('no error for torch_npu.contrib')\n"
        "try:\n"
        "    from torch_npu import npu_rotary_mul\n"
        "except ImportError as e:\n"
        "    assert str(e).startswith('torch_npu.npu_rotary_mul: openfia does not provide it'), e\n"
        "    assert 'npu_fused_infer_attention_score' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no error for from torch_npu import npu_rotary_mul')\n"
        "from torch_npu import npu_fused_infer_attention_score, testing  # provided names import\n"
        "import torch_npu.testing.testcase  # the stand-in's own submodule still imports\n"
        "print('ok')\n")
    path = tmp_path / "neighbours.py"
    path.write_text(code)
    r = subprocess.run([sys.executable, "-m", "openfia", "run", str(path)], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
