"""NPU-strict mode from Python: the setter, OPENFIA_NPU_STRICT, `python -m openfia run --strict`
and `info`, and calls of each operator that openfia accepts by default and the NPU rejects (the
C++ tests FiaStrict / KvqsfaStrict / SasStrict cover every relaxed limit)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import openfia
from openfia import kvqsfa as K
from test_sas import Case


@pytest.fixture
def strict():
    before = openfia.get_npu_strict()
    openfia.set_npu_strict(True)
    yield
    openfia.set_npu_strict(before)


def fia_call(d):
    q = torch.randn(1, 2, 4, d, dtype=torch.float16)
    return openfia.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD")


def kvqsfa_call(sparse_block_size):
    query = torch.zeros(1, 1, 1, 576, dtype=torch.bfloat16)
    key = K.quantize_kv_rows(torch.ones(1, 8, 1, 512), torch.zeros(1, 8, 1, 64).bfloat16())
    sparse = torch.tensor([[[[0, -1, -1, -1]]]], dtype=torch.int32)
    return openfia.npu_kv_quant_sparse_flash_attention(
        query, key, key, sparse, 1.0, 2, 2, attention_mode=2,
        sparse_block_size=sparse_block_size)


def sas_call(n1):
    # DeepSeek V4's geometry (what the NPU takes): N1 64, D 512, block sizes 16, K2 512.
    c = Case(tnd=True, q_len=[2, 1], kv_len=[260, 33], ratio=4, k2=512, n1=n1, d=512, bs2=16,
             seed=3)
    return openfia.npu_sparse_attn_sharedkv(c.q, **c.kwargs())


def test_default_is_off_and_the_setter_takes_bools_only():
    assert openfia.get_npu_strict() is False
    openfia.set_npu_strict(True)
    try:
        assert openfia.get_npu_strict() is True
    finally:
        openfia.set_npu_strict(False)
    assert openfia.get_npu_strict() is False
    with pytest.raises(openfia.OpenfiaTypeError):
        openfia.set_npu_strict(1)
    with pytest.raises(openfia.OpenfiaTypeError):
        openfia.set_npu_strict("true")


@pytest.mark.parametrize("call, valid, relaxed, argument, row", [
    (fia_call, 16, 17, "query", "fia.d-align"),
    (kvqsfa_call, 1, 32, "sparse_block_size", "kvqsfa.sparse-block-size"),
    (sas_call, 64, 4, "q", "sas.heads"),
])
def test_strict_rejects_what_the_npu_rejects_and_only_that(strict, call, valid, relaxed,
                                                           argument, row):
    call(valid)
    with pytest.raises(openfia.OpenfiaError) as e:
        call(relaxed)
    assert e.value.code == "unsupported" and e.value.argument == argument
    assert e.value.rule.startswith(f"NPU strict mode [{row}] (")
    openfia.set_npu_strict(False)
    call(relaxed)  # the default relaxes the limit


def test_strict_applies_to_the_registered_ops_and_fake_kernels(strict):
    q = torch.randn(1, 2, 4, 17, dtype=torch.float16)
    with pytest.raises(openfia.OpenfiaError, match=r"fia\.d-align"):
        torch.ops.openfia.npu_fused_infer_attention_score(q, q, q, num_heads=2,
                                                          input_layout="BNSD")
    with pytest.raises(openfia.OpenfiaError, match=r"fia\.d-align"):
        openfia.fia_output_spec(q, q, q, num_heads=2, input_layout="BNSD")


SCRIPT = textwrap.dedent("""\
    import torch, torch_npu, openfia
    print("strict", openfia.get_npu_strict())
    q = torch.randn(1, 2, 4, 17, dtype=torch.float16)
    try:
        torch_npu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BNSD")
        print("accepted")
    except openfia.OpenfiaError as e:
        print("rejected", e.argument, e.code)
    """)


def run(*args, env=None, cwd=None):
    e = {k: v for k, v in os.environ.items() if k != "OPENFIA_NPU_STRICT"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "openfia", *args], capture_output=True,
                          text=True, timeout=300, env=e, cwd=cwd)


def test_run_strict_and_the_environment_variable(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    r = run("run", str(script), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "strict False\naccepted\n", r.stderr
    r = run("run", "--strict", str(script), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "strict True\nrejected query unsupported\n", r.stderr
    for value, out in (("1", "strict True\nrejected query unsupported\n"),
                       ("true", "strict True\nrejected query unsupported\n"),
                       ("0", "strict False\naccepted\n")):
        r = run("run", str(script), env={"OPENFIA_NPU_STRICT": value}, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout == out, (value, r.stderr)
    r = run("run", "--strict", cwd=tmp_path)
    assert r.returncode == 2 and "the script to run is missing" in r.stderr


def test_an_invalid_environment_variable_fails_every_call_naming_it(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT.replace('print("strict", openfia.get_npu_strict())\n', ""))
    r = run("run", str(script), env={"OPENFIA_NPU_STRICT": "on"}, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "rejected OPENFIA_NPU_STRICT invalid_argument\n", \
        r.stderr


def test_info_shows_the_mode():
    r = run("info")
    assert r.returncode == 0 and "NPU-strict mode: off" in r.stdout, r.stderr
    r = run("info", env={"OPENFIA_NPU_STRICT": "1"})
    assert "NPU-strict mode: on" in r.stdout and "  OPENFIA_NPU_STRICT=1\n" in r.stdout
    r = run("info", env={"OPENFIA_NPU_STRICT": "bogus"})
    assert r.returncode == 0 and "NPU-strict mode: none:" in r.stdout
