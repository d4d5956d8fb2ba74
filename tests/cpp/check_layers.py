#!/usr/bin/env python3
"""Checks that every #include in src/ and python/src/ points down the layers, never up.

The layers, top to bottom (a file may include its own layer and the layers below it):

  python/src         the bindings: the public headers (include/openfia) only
  src/ops/<op>       validation, canonicalization, the op's driver: its own folder, the engine's
                     public headers (src/engine/*.h), the reference, common
  src/engine/*       the runner, the plan, kernel selection: the kernel interface and the kernel
                     registry (never a kernel's code), the reference, common
  src/engine/kernels the kernels: the kernel interface, other kernel files, common
  src/reference      the fp64 reference: common
  src/common         shared rules and utilities: nothing above it

Besides includes, the op layer must never name a kernel (a kernel's name or its predicates):
which kernel runs an item is decided in one place, src/engine/select.cc.

Usage: check_layers.py REPO_ROOT. Exit 0 with a summary line when clean, 1 listing each
violation (file, line, what it includes, the rule).
"""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Kernel-specific identifiers that must not appear in an op: ISA-named functions or kernel
# predicates (e.g. AmxRunsSasItem, Avx2DecodeRun).
KERNEL_NAME = re.compile(r"\b(Amx|Avx\d*|Avx512\w*|Neon\w*|Sve)[A-Z]\w*\s*\(")

# For a file's layer: the include prefixes it may use (beside the public "openfia/" headers).
ENGINE_PUBLIC = re.compile(r"^engine/[^/]+\.h$")


def layer_of(rel):
    parts = rel.split("/")
    if parts[0] == "python":
        return "bindings"
    if parts[1] == "common":
        return "common"
    if parts[1] == "reference":
        return "reference"
    if parts[1] == "engine":
        return "kernels" if len(parts) > 3 and parts[2] == "kernels" else "engine"
    if parts[1] == "ops":
        return "ops"
    return "other"


def allowed(layer, rel, inc):
    """Empty string when `rel` (a file of `layer`) may include `inc`, else the rule it breaks."""
    if inc.startswith("openfia/"):
        return ""  # the public headers: every layer
    top = inc.split("/")[0]
    if layer == "bindings":
        # The bindings see the public API and their own helpers, never the library's internals.
        if "/" not in inc:
            return ""
        return "the bindings include only the public headers (include/openfia)"
    if layer == "common":
        return "" if top == "common" else "src/common includes nothing above it"
    if layer == "reference":
        return "" if top in ("common", "reference") else "the reference includes only common"
    if layer == "kernels":
        if top == "common" or inc.startswith("engine/kernels/") or inc == "engine/kernel.h":
            return ""
        return "kernels include only the kernel interface (engine/kernel.h), kernel files and common"
    if layer == "engine":
        if top in ("common", "reference") or ENGINE_PUBLIC.match(inc):
            return ""
        if inc.startswith("engine/kernels/"):
            return "the engine reaches kernels only through the registry (engine/kernel.h)"
        return "the engine never includes an op"
    if layer == "ops":
        op_dir = "/".join(rel.split("/")[1:3])  # ops/<op>
        if top in ("common", "reference") or ENGINE_PUBLIC.match(inc) or inc.startswith(op_dir + "/"):
            return ""
        if inc.startswith("engine/kernels/"):
            return "ops never include a kernel"
        return "an op includes only its own folder, the engine's public headers, the reference and common"
    return ""


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = pathlib.Path(sys.argv[1])
    files = sorted(
        [p for p in (root / "src").rglob("*") if p.suffix in (".h", ".cc")]
        + [p for p in (root / "python" / "src").rglob("*") if p.suffix in (".h", ".cc")]
    )
    bad = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        layer = layer_of(rel)
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if m:
                why = allowed(layer, rel, m.group(1))
                if why:
                    bad.append(f"{rel}:{n}: includes \"{m.group(1)}\": {why}")
            if layer == "ops":
                code = line.split("//", 1)[0]
                k = KERNEL_NAME.search(code)
                if k:
                    bad.append(f"{rel}:{n}: names a kernel ({k.group(0).strip()}): ops never name "
                               "a kernel; ask the engine (src/engine/*.h)")
    if bad:
        print("\n".join(bad))
        print(f"check_layers: {len(bad)} violation(s) in {len(files)} files")
        return 1
    print(f"check_layers: {len(files)} files, every include points down the layers: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
