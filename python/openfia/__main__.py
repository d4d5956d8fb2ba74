"""`python -m openfia run script.py [args...]` (or `run -m module [args...]`): runs unchanged
Ascend code on the CPU. openfia.patch_torch_npu() is applied first, so the script's
`import torch_npu` (and, without a real one, `.npu()`, `torch.npu`, `import torchair`) and its
operator calls go to openfia; then the script runs as __main__ with its own arguments."""
import runpy
import sys

_USAGE = ("usage: python -m openfia run script.py [args...]\n"
          "       python -m openfia run -m module [args...]\n")


def main(argv):
    if len(argv) < 2 or argv[0] != "run" or (argv[1] == "-m" and len(argv) < 3):
        sys.stderr.write(_USAGE)
        return 2
    import openfia

    openfia.patch_torch_npu()
    if argv[1] == "-m":
        sys.argv = [argv[2]] + argv[3:]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv[1:]
        runpy.run_path(argv[1], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
