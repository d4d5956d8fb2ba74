"""Every example runs and passes its own check (each compares openfia with the same attention
composed in plain PyTorch or a plain C++ loop, or a model with a float32 PyTorch model of the same
weights, and exits non-zero when they disagree)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY_EXAMPLES = ROOT / "examples" / "python"
HELPERS = {"reference.py"}  # imported by the examples, not one itself
# Arguments that keep an example short in the test run.
ARGS = {"ring_attention.py": ["--seq", "256", "--world", "2"]}
SCRIPTS = sorted(p.name for p in PY_EXAMPLES.glob("*.py") if p.name not in HELPERS)
# What an example prints when its check passes: the attention examples' check() (reference.py),
# or the model's.
PASSED = "matches the float64 PyTorch reference"
PASSED_BY = {"paged_decode_loop.py": "logits match the float32 PyTorch reference model",
             "transformers_generate.py": "greedy tokens identical to transformers' SDPA"}
# Examples that need an optional package (skipped without it).
REQUIRES = {"transformers_generate.py": "transformers"}


def test_there_is_an_example_per_operator():
    calls = "".join((PY_EXAMPLES / s).read_text() for s in SCRIPTS)
    for op in ("npu_fused_infer_attention_score", "npu_kv_quant_sparse_flash_attention",
               "npu_sparse_attn_sharedkv_metadata", "npu_sparse_attn_sharedkv(",
               "ring_attention"):
        assert f"openfia.{op}" in calls, op


def _run_example(script, args, launcher=()):
    r = subprocess.run([sys.executable, *launcher, str(PY_EXAMPLES / script), *args],
                       capture_output=True, text=True, timeout=600, cwd=PY_EXAMPLES,
                       env=dict(os.environ))
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert PASSED_BY.get(script, PASSED) in r.stdout and "FAILED" not in r.stdout
    return r.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_python_example_runs_and_checks_itself(script):
    if script in REQUIRES:
        pytest.importorskip(REQUIRES[script])
    _run_example(script, ARGS.get(script, []))


@pytest.mark.parametrize("args, launcher", [
    (["--kv", "int8"], ()),
    (["--block-size", "128"], ()),
    # Ascend code (import torch_npu, device "npu") under the command line's stand-in.
    (["--torch-npu", "--kv", "int8"], ("-m", "openfia", "run")),
], ids=["int8-cache", "block-128", "torch-npu-run"])
def test_paged_decode_loop_variants(args, launcher):
    out = _run_example("paged_decode_loop.py", args, launcher)
    assert ("int8 cache" in out) == ("int8" in args)


def _cpp_example():
    """The C++ example built from the current example.cc (build/<preset>/openfia_example_cpp,
    made by any CMake build with OPENFIA_BUILD_EXAMPLES=ON, e.g. the dev preset), or None."""
    source = (ROOT / "examples" / "cpp" / "example.cc").stat().st_mtime
    found = [p for p in (ROOT / "build").glob("*/openfia_example_cpp")
             if os.access(p, os.X_OK) and p.stat().st_mtime >= source]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def test_cpp_example_runs_and_checks_itself():
    exe = _cpp_example()
    if exe is None:
        pytest.skip("the C++ example is not built from the current example.cc (cmake --preset "
                    "dev && cmake --build build/dev makes build/dev/openfia_example_cpp)")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{exe} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.count("match the double-precision loop") == 2
