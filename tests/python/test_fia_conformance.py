"""Conformance with FusedInferAttentionScore as the current CANN interface and Huawei's own test
files use it: features of the current API (checked against the torch float64 oracle), arguments
without effect, non-contiguous inputs, and Ascend test scripts run unchanged."""
import os
import subprocess
import sys

import pytest
import torch

import openfia
import torch_ref
from cases import build_inputs, call_kwargs
from common import assert_within
from openfia.bench.case_list import parse_line

fia = openfia.npu_fused_infer_attention_score


def _inputs(line):
    return call_kwargs(build_inputs(parse_line("smoke " + line)))


def _check_oracle(q, k, v, kw, what):
    out, lse = fia(q, k, v, **kw)
    ref, ref_lse, bound, lse_bound, dtype = torch_ref.reference(q, k, v, **kw)
    assert out.dtype == dtype
    assert_within(out, ref, bound, what)
    if kw.get("softmax_lse_flag"):
        assert_within(lse, ref_lse, lse_bound, what + " lse")
    return out, lse


# ---- inner_precise with float16 antiquant ----

def test_high_precision_keeps_dequantized_keys_in_fp32():
    """Two keys whose fp32 dequantized values differ by 0.007 but round to the same float16:
    with a large scale the high-precision mode (inner_precise 0) attends the larger one; in the
    high-performance mode (1) the reference, which rounds every dequantized element to the query
    dtype as that mode does, sees a tie, while the engine's decode kernels apply the antiquant
    scales to the sums (no rounding of the elements, at least as accurate) and may see either.
    Both modes against the oracle, which models each mode, within its bound."""
    q = torch.zeros(1, 1, 1, 16, dtype=torch.float16)
    q[..., 0] = 1
    k = torch.zeros(1, 1, 2, 16, dtype=torch.int8)
    k[0, 0, :, 0] = 127
    v = torch.full((1, 1, 2, 16), 100, dtype=torch.int8)
    v[0, 0, 1] = -100
    k_scale = torch.tensor([[[1 / 3, 42.34 / 127]]], dtype=torch.float32)  # per token (1, B, S)
    v_scale = torch.full((1, 1, 2), 0.01, dtype=torch.float32)
    kw = dict(key_antiquant_scale=k_scale, value_antiquant_scale=v_scale, key_antiquant_mode=1,
              value_antiquant_mode=1, num_heads=1, input_layout="BNSD", scale=1000.0)
    high, _ = _check_oracle(q, k, v, dict(kw, inner_precise=0), "inner_precise 0")
    perf, _ = _check_oracle(q, k, v, dict(kw, inner_precise=1), "inner_precise 1")
    assert high[0, 0, 0, 0].item() < -0.99  # the second key (value -1) wins
    prev = openfia.get_impl()
    try:
        openfia.set_impl("ref")
        perf, _ = _check_oracle(q, k, v, dict(kw, inner_precise=1), "inner_precise 1, reference")
    finally:
        openfia.set_impl(prev)
    assert abs(perf[0, 0, 0, 0].item()) < 1e-3  # a tie: the mean of +1 and -1


# ---- arguments without effect ----

def test_prefix_length_without_prefix_is_ignored():
    q, k, v, kw = _inputs("p layout=BNSD B=2 N=2 S=5 KVS=7 D=16 sparse=3 lse=1")
    base = _check_oracle(q, k, v, kw, "without")
    kw["actual_shared_prefix_len"] = torch.tensor([2], dtype=torch.int64)
    with_len = _check_oracle(q, k, v, kw, "with actual_shared_prefix_len")
    assert torch.equal(base[0], with_len[0]) and torch.equal(base[1], with_len[1])


@pytest.mark.parametrize("line", [
    "m2 layout=BSH B=2 N=2 S=7 KVS=9 D=16 sparse=2",
    "m3 layout=BNSD B=2 N=2 S=7 KVS=9 D=16 sparse=3 act_q=7,4 act_kv=9,3",
    "m4 layout=TND B=2 N=2 S=6 KVS=9 D=16 act_q=6,4 act_kv=9,5 sparse=4 pre=3 next=-1 lse=1",
])
def test_causal_mask_content_is_not_read(line):
    """sparse_mode 2-4 take the band from sparse_mode and pre/next: an all-zero 2048 x 2048 mask
    gives the same result as the documented triu constant."""
    q, k, v, kw = _inputs(line)
    base = _check_oracle(q, k, v, kw, "triu mask")
    kw["atten_mask"] = torch.zeros_like(kw["atten_mask"])
    zeros = _check_oracle(q, k, v, kw, "zero mask")
    assert torch.equal(base[0], zeros[0]) and torch.equal(base[1], zeros[1])


# ---- non-contiguous inputs: the Python front end copies them (not in NPU-strict mode) ----

def test_non_contiguous_views_are_copied():
    q, k, v, kw = _inputs("nc layout=BNSD dtype=f16 B=2 N=4 KVN=2 S=5 KVS=9 D=16 mask=full pse=1 "
                          "lse=1")
    base = _check_oracle(q, k, v, kw, "contiguous")

    def strided(t):  # the same values behind other strides
        wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)[..., ::2]
        wide.copy_(t)
        return wide.transpose(0, 1).contiguous().transpose(0, 1) if t.dim() == 4 else wide

    views = {name: strided(t) for name, t in kw.items()
             if isinstance(t, torch.Tensor) and t.dim() >= 2}
    assert all(not t.is_contiguous() for t in views.values())
    out = _check_oracle(strided(q), strided(k), strided(v), dict(kw, **views), "views")
    assert torch.equal(base[0], out[0]) and torch.equal(base[1], out[1])
    # NPU-strict mode: no copy, so the operator refuses each view by its rule, naming it.
    prev = openfia.get_npu_strict()
    try:
        openfia.set_npu_strict(True)
        for name in ("query", "key", "value", *views):
            args = dict(query=q, key=k, value=v, **kw)
            args[name] = views[name] if name in views else strided(args[name])
            with pytest.raises(openfia.OpenfiaError, match="不支持非连续") as err:
                openfia.npu_fused_infer_attention_score(**args)
            assert err.value.argument == name
        out = openfia.npu_fused_infer_attention_score(q, k, v, **kw)  # contiguous: accepted
        assert torch.equal(base[0], out[0])
    finally:
        openfia.set_npu_strict(prev)


# ---- learnable sinks through torch.ops and torch.compile; output layouts in the fake kernel ----

def test_sinks_and_output_layouts_through_torch_ops():
    q, k, v, kw = _inputs("s layout=BSND_NBSD B=2 N=4 KVN=2 S=3 KVS=7 D=16 sinks=bf16 lse=1")
    eager = _check_oracle(q, k, v, kw, "eager")
    op = torch.ops.openfia.npu_fused_infer_attention_score(q, k, v, **kw)
    assert torch.equal(eager[0], op[0]) and torch.equal(eager[1], op[1])
    compiled = torch.compile(lambda *a: fia(*a, **kw), fullgraph=True, backend="eager")(q, k, v)
    assert torch.equal(eager[0], compiled[0])
    meta = torch.ops.openfia.npu_fused_infer_attention_score(
        q.to("meta"), k.to("meta"), v.to("meta"),
        **{n: t.to("meta") if isinstance(t, torch.Tensor) else t for n, t in kw.items()})
    assert meta[0].shape == eager[0].shape == (4, 2, 3, 16) and meta[1].shape == eager[1].shape


# ---- Ascend operator test files run unchanged under `python -m openfia run` ----

ASCEND_STYLE_TEST = '''
import unittest
import numpy as np
import torch
import torch_npu
from torch_npu.testing.testcase import TestCase, run_tests
from torch_npu.testing.common_utils import SupportedDevices

torch.npu.set_compile_mode(jit_compile=False)
torch.npu.config.allow_internal_format = False


class Proj(torch.nn.Module):
    def forward(self, x):
        return x * 2


class TestFia(TestCase):
    def golden(self, q, k, v, scale):
        w = torch.softmax(torch.matmul(q.float(), k.float().transpose(2, 3)) * scale, -1)
        return torch.matmul(w, v.float())

    @SupportedDevices(["Ascend910B"])
    def test_fia(self, device="npu"):
        torch.manual_seed(0)
        q = torch.randn(1, 4, 3, 64, dtype=torch.float16).npu()
        k = torch.randn(1, 4, 9, 64, dtype=torch.float16).npu()
        v = torch.randn(1, 4, 9, 64, dtype=torch.float16).npu()
        out = torch_npu.npu_fused_infer_attention_score(
            q, k, v, num_heads=4, input_layout="BNSD", scale=0.125)[0]
        self.assertEqual(Proj().npu()(out), out * 2)
        self.assertRtolEqual(GOLDEN(self.golden(q, k, v, 0.125)), out, prec16=0.005)


if __name__ == "__main__":
    run_tests()
'''


@pytest.mark.parametrize("golden, passes", [("lambda g: g.half()", True),
                                            ("lambda g: g.half() + 0.01", False)])
def test_ascend_style_test_file_runs_unchanged(tmp_path, golden, passes):
    """An Ascend-style operator test (torch_npu.testing's TestCase, run_tests and
    SupportedDevices, torch.npu.set_compile_mode, torch.npu.config, Module.npu): it passes, and
    fails when the golden is off by more than prec16 (assertRtolEqual checks every element)."""
    path = tmp_path / "test_ascend_style.py"
    path.write_text(ASCEND_STYLE_TEST.replace("GOLDEN(", f"({golden})("))
    r = subprocess.run([sys.executable, "-m", "openfia", "run", str(path)], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path))
    assert (r.returncode == 0) == passes, r.stderr[-3000:]
    assert ("OK" if passes else "FAILED") in r.stderr, r.stderr[-3000:]
