"""The command line (python -m openfia): help, version, info, friendly usage errors and exit
codes; `run` keeps a script's own arguments and exit status."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import openfia
from openfia import _cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env=None, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "openfia", *args], capture_output=True,
                          text=True, timeout=300, env=e, cwd=cwd)


def test_help_lists_the_commands_and_version_prints_it(capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for what in ("python -m openfia run script.py", "bench", "info", "--version"):
        assert what in out
    assert _cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"openfia {openfia.version()}\n"
    assert _cli.main(["run", "--help"]) == 0
    assert "Everything after the script or module name goes to it" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    ((), "a command is required"),
    (("bogus",), "invalid choice: 'bogus'"),
    (("info", "extra"), "unrecognized arguments: extra"),
    (("--bogus",), "unrecognized arguments: --bogus"),
    (("run",), "the script to run is missing"),
    (("run", "-m"), "the module to run is missing"),
    (("run", "--strictly"), "unknown option '--strictly'"),
    (("run", "missing.py"), "cannot open 'missing.py': no such file"),
    (("run", "-m", "no_such_module.sub"), "no module named 'no_such_module.sub'"),
    (("bench", "--preset", "huge"), "invalid choice: 'huge'"),
])
def test_usage_errors_exit_2_with_one_line_and_no_traceback(capsys, args, words):
    with pytest.raises(SystemExit) as e:  # argparse exits; the rest returns 2
        sys.exit(_cli.main(list(args)))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line or words in line]) == 1


def test_run_missing_script_from_the_shell(tmp_path):
    r = cli("run", "missing.py", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "python -m openfia run: cannot open 'missing.py': no such file\n"


def test_run_passes_arguments_and_exit_status(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys, torch_npu\nprint(sys.argv[1:])\nsys.exit(int(sys.argv[2]))\n")
    r = cli("run", str(script), "--help", "3", cwd=tmp_path)
    assert r.returncode == 3 and r.stdout.strip() == "['--help', '3']", r.stderr
    # An error inside the script is the script's: its traceback, status 1.
    script.write_text("raise KeyError('inside the script')\n")
    r = cli("run", str(script), cwd=tmp_path)
    assert r.returncode == 1 and "KeyError: 'inside the script'" in r.stderr


def test_run_imports_the_scripts_sibling_modules(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "helper.py").write_text("VALUE = 'from the sibling'\n")
    (tmp_path / "app" / "main.py").write_text("import helper\nprint(helper.VALUE)\n")
    r = cli("run", "app/main.py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "from the sibling", r.stderr


def test_info_reports_version_simd_threads_and_environment():
    r = cli("info", env={"OPENFIA_NUM_THREADS": "3", "OPENFIA_IMPL": "ref"})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"openfia {openfia.version()} ")
    assert f"SIMD target in use: {openfia.simd_target()}\n" in out
    runnable = re.search(r"SIMD targets this CPU can run: (.*)\n", out).group(1).split(", ")
    assert runnable[0] == "scalar" and openfia.simd_target() in runnable
    assert set(runnable) <= set(_cli.SIMD_TARGETS)
    assert "threads: 3\n" in out and "implementation: ref\n" in out
    assert "  OPENFIA_NUM_THREADS=3\n" in out and "  OPENFIA_SIMD (not set: best)\n" in out
    for name, _, _, _ in _cli.ENVIRONMENT:
        assert f"  {name}" in out
    # A cap limits what runs: the target in use follows it, the runnable list does not.
    r = cli("info", env={"OPENFIA_SIMD": "scalar"})
    assert "SIMD target in use: scalar\n" in r.stdout
    assert re.search(r"SIMD targets this CPU can run: (.*)\n", r.stdout).group(1).split(", ") \
        == runnable


def test_probing_the_simd_targets_keeps_the_cap_in_effect(monkeypatch):
    before = openfia.simd_target()
    runnable = _cli.runnable_simd_targets()
    assert openfia.simd_target() == before and before in runnable
    monkeypatch.setenv("OPENFIA_SIMD", "scalar")
    openfia.set_simd_cap("scalar")
    try:
        _cli.runnable_simd_targets()
        assert openfia.simd_target() == "scalar"
    finally:
        monkeypatch.delenv("OPENFIA_SIMD")
        openfia.set_simd_cap("best")
    assert openfia.simd_target() == before


def test_every_environment_variable_the_sources_read_is_listed():
    """`info` documents every OPENFIA_* variable a source file reads (C++ getenv, Python
    os.environ); a new one must be added to openfia._cli.ENVIRONMENT."""
    if not (ROOT / "src").is_dir():
        pytest.skip("needs the source tree")
    pattern = re.compile(r"(?:getenv\(|environ(?:\.get\(|\.setdefault\(|\[))\s*\"(OPENFIA_\w+)\"")
    read = {}
    for top in ("src", "include", "python", "bench", "tests", "examples"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".cc", ".h", ".py", ".sh") and path.is_file():
                for name in pattern.findall(path.read_text(errors="replace")):
                    read.setdefault(name, str(path.relative_to(ROOT)))
    assert {"OPENFIA_IMPL", "OPENFIA_NUM_THREADS", "OPENFIA_SIMD"} <= set(read)
    listed = {name for name, _, _, _ in _cli.ENVIRONMENT}
    missing = {name: where for name, where in read.items() if name not in listed}
    assert not missing, f"OPENFIA_* variables read but not listed by `info`: {missing}"


def test_bench_help_names_the_bench_command(capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: python -m openfia bench")
    assert "--preset" in out
