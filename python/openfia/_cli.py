"""The command line, `python -m openfia`: run Ascend scripts on the CPU, benchmark, show this
machine's settings. Exit codes: 0 success, 1 a failure the command reports (a benchmark with a
wrong result), 2 a usage error (unknown command or option, a script or module that does not
exist); `run` exits with the script's own status."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

PROG = "python -m openfia"

USAGE = f"""{PROG} run script.py [args...]
       {PROG} run -m module [args...]
       {PROG} bench [--preset demo|full] [options...]
       {PROG} info
       {PROG} --version | --help"""

DESCRIPTION = """\
openfia runs Huawei Ascend's attention operators (torch_npu.npu_fused_infer_attention_score and
its _v2, npu_incre_flash_attention, npu_prompt_flash_attention,
npu_kv_quant_sparse_flash_attention, npu_sparse_attn_sharedkv and its _metadata op) on the CPU.

commands:
  run      Runs a script (or `-m module`) written for an Ascend NPU, unchanged, on the CPU:
           openfia.patch_torch_npu() is applied first, so its `import torch_npu` and operator
           calls go to openfia; without a real torch_npu, `.npu()`, torch.npu, "npu" device
           strings and `import torchair` work too, and any other torch_npu.X is an error
           naming X. The script gets its own arguments and exit status. `run --strict` turns
           NPU-strict mode on: a call the NPU would reject (a limit openfia relaxes) raises an
           error naming the NPU's rule.
  bench    Benchmarks openfia against PyTorch compositions of the same attention on
           model-shaped workloads and writes a report (`bench --help` for its options).
  info     Prints the version, the SIMD target in use and those this CPU can run, the thread
           count, NPU-strict mode, and every OPENFIA_* environment variable with its value and
           meaning."""

# Every environment variable openfia reads: (name, who reads it, default, meaning). A test checks
# that this list names every OPENFIA_* variable the sources read.
ENVIRONMENT = (
    ("OPENFIA_IMPL", "library", "auto",
     "which implementation runs the operators: ref (the float64 reference), engine (the fast "
     "engine; a call it does not take is an error) or auto (the engine where it takes the call, "
     "else the reference); read at the first call, where any other value is an error naming "
     "the variable"),
    ("OPENFIA_NUM_THREADS", "library", "the number of CPUs (at most 1024)",
     "worker threads of the engine, an integer in [1, 1024] (results do not depend on it); "
     "read at the first call, where any other value is an error naming the variable"),
    ("OPENFIA_SIMD", "library", "best",
     "the highest SIMD target the engine may use: scalar, avx2, avx512, avx512bf16, avx512fp16, "
     "amx, neon, neonbf16, sve or best (another architecture's names cap to scalar); read at "
     "the first call, where any other value is an error naming the variable"),
    ("OPENFIA_NPU_STRICT", "library", "0",
     "NPU-strict mode: 1 or true enforces every NPU hardware limit openfia relaxes (a call the "
     "NPU would reject is an error naming the NPU's rule), 0 or false does not; read at the "
     "first call, where any other value is an error naming the variable"),
    ("OPENFIA_KERNEL", "library", "each call's kernel picked from the SIMD target's list",
     "forces one attention kernel for every work item (for tests and measurements); a call "
     "the kernel cannot run is then an error naming why"),
    ("OPENFIA_TORCHAIR_BACKEND", "python run", "inductor",
     "the torch.compile backend behind the torchair stand-in's npu backend (e.g. eager)"),
    ("OPENFIA_BENCH_BIN", "bench", "build/bench/bench/openfia-bench of the source tree, or on PATH",
     "the C++ benchmark binary that measures the machine's limits for `bench`"),
    ("OPENFIA_TIER", "tests", "smoke",
     "which cases of the test list the test suites run: smoke, full (smoke and full) or model "
     "(the benchmark workloads)"),
    ("OPENFIA_RANDOM_CASES", "tests", "C++ 48, pytest 40 FIA and 16 per sparse operator",
     "how many random calls the randomized tests draw"),
    ("OPENFIA_RANDOM_SEED", "tests", "1", "which random draw the randomized tests make"),
    ("OPENFIA_TEST_EMULATED", "tests", "not set",
     "set by CTest for the C++ tests under user-mode QEMU (the AArch64 cross build): the fork "
     "test skips itself there, as QEMU does not survive fork() of a multi-threaded process"),
    ("OPENFIA_PERF_THREADS", "tests", "2",
     "the thread count of the C++ engine performance tests (disabled by default)"),
)

# Every SIMD target name the library knows, in its order (each architecture's own names; the
# other architecture's names cap to scalar).
SIMD_TARGETS = ("scalar", "avx2", "avx512", "avx512bf16", "avx512fp16", "amx", "neon", "neonbf16",
                "sve")


class UsageError(Exception):
    """A command line openfia cannot run: one line on stderr, exit status 2."""


def _parser():
    p = argparse.ArgumentParser(prog=PROG, usage=USAGE, description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=f"`{PROG} info` lists the OPENFIA_* environment variables.")
    p.add_argument("--version", action="store_true", help="print openfia's version and exit")
    sub = p.add_subparsers(dest="command", metavar="{run,bench,info}")
    sub.add_parser("run", help="run an Ascend script unchanged on the CPU", add_help=False)
    sub.add_parser("bench", help="benchmark openfia against PyTorch", add_help=False)
    sub.add_parser("info", help="version, SIMD targets, threads, environment variables",
                   description="Prints the version, the SIMD target in use and those this CPU "
                   "can run, the thread count and every OPENFIA_* environment variable.")
    return p


RUN_HELP = f"""usage: {PROG} run [--strict] script.py [args...]
       {PROG} run [--strict] -m module [args...]

Runs an Ascend script (or module) unchanged on the CPU: openfia.patch_torch_npu() first, then
the script as __main__ with sys.argv = [script, args...] (as `python script.py args...` would).
Everything after the script or module name goes to it, options included. The exit status is
the script's.

options:
  --strict  NPU-strict mode (openfia.set_npu_strict(True)): every NPU hardware limit openfia
            relaxes is enforced, so a call the NPU would reject raises an error naming the
            NPU's rule."""


def _run(argv):
    """`run`: the script's exit status (SystemExit passes through); UsageError when there is
    nothing to run."""
    import runpy

    if not argv:
        raise UsageError("run: the script to run is missing (run script.py or run -m module)")
    if argv[0] in ("-h", "--help"):
        print(RUN_HELP)
        return 0
    strict = argv[0] == "--strict"
    if strict:
        argv = argv[1:]
        if not argv:
            raise UsageError("run --strict: the script to run is missing (run --strict "
                             "script.py or run --strict -m module)")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise UsageError("run -m: the module to run is missing")
        import importlib.util

        try:
            found = importlib.util.find_spec(argv[1]) is not None
        except (ImportError, ValueError):  # a parent package that does not exist, or ""
            found = False
        if not found:
            raise UsageError(f"run -m: no module named '{argv[1]}'")
    elif argv[0].startswith("-"):
        raise UsageError(f"run: unknown option '{argv[0]}' (run script.py or run -m module)")
    elif not os.path.exists(argv[0]):
        raise UsageError(f"run: cannot open '{argv[0]}': no such file")

    import openfia

    if strict:
        openfia.set_npu_strict(True)
    openfia.patch_torch_npu()
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        # As `python script.py` does: the script's directory comes first on the import path, so
        # it imports its sibling modules.
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


def runnable_simd_targets():
    """The SIMD targets this CPU (and this build) can run: each target whose cap makes it the
    target in effect. The cap in effect is restored afterwards (to OPENFIA_SIMD's value: the
    command line changes it nowhere else)."""
    import openfia

    found = []
    try:
        for t in SIMD_TARGETS:
            openfia.set_simd_cap(t)
            if openfia.simd_target() == t:
                found.append(t)
    finally:
        try:
            openfia.set_simd_cap(os.environ.get("OPENFIA_SIMD") or "best")
        except openfia.OpenfiaError:  # an invalid OPENFIA_SIMD: `info` shows its error
            openfia.set_simd_cap("best")
    return found


def _setting(get):
    """A setting's value for `info`, or the error an invalid environment variable gives."""
    import openfia

    try:
        return get()
    except openfia.OpenfiaError as e:
        return f"none: {e}"


def info(out=sys.stdout):
    import openfia

    w = out.write
    w(f"openfia {openfia.version()} ({os.path.dirname(openfia.__file__)})\n")
    w(f"SIMD target in use: {_setting(openfia.simd_target)}\n")
    w(f"SIMD targets this CPU can run: {', '.join(runnable_simd_targets())}\n")
    kernels = getattr(openfia._openfia, "available_kernels", None)  # where the build has it
    if kernels is not None:
        w(f"attention kernels this CPU runs: {', '.join(kernels())}\n")
    w(f"threads: {_setting(openfia.get_num_threads)}\n")
    w(f"implementation: {_setting(openfia.get_impl)}\n")
    strict = _setting(openfia.get_npu_strict)
    if isinstance(strict, bool):
        strict = ("on: NPU hardware limits are enforced" if strict
                  else "off: NPU hardware limits are relaxed")
    w(f"NPU-strict mode: {strict}\n")
    try:
        import torch
    except ImportError:
        w("torch: not installed (the operators' torch functions need it)\n")
    else:
        w(f"torch: {torch.__version__}\n")
    w("\n" + textwrap.fill(
        "environment variables (read by: library = the C++ library, at its first call; python "
        "run = the stand-ins of `run`; bench = the benchmark; tests = the source tree's test "
        "suites):", 96) + "\n")
    for name, who, default, meaning in ENVIRONMENT:
        value = os.environ.get(name)
        shown = f"{name}={value}" if value is not None else f"{name} (not set: {default})"
        w(f"  {shown}\n" + textwrap.fill(f"[{who}] {meaning}", 96, initial_indent=" " * 6,
                                          subsequent_indent=" " * 6) + "\n")
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "run":
            return _run(argv[1:])
        if argv and argv[0] == "bench":
            from .bench.cli import main as bench_main

            return bench_main(argv[1:], prog=f"{PROG} bench")
        parser = _parser()
        args = parser.parse_args(argv)  # --help, unknown commands and options: argparse's exits
        if args.version:
            import openfia

            print(f"openfia {openfia.version()}")
            return 0
        if args.command == "info":
            return info()
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: a command is required (run, bench or info; --help "
                         "tells more)\n")
        return 2
    except UsageError as e:
        sys.stderr.write(f"{PROG} {e}\n")
        return 2
