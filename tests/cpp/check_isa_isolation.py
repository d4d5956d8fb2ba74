#!/usr/bin/env python3
"""Checks that no function the linker may share between objects carries per-ISA instructions.

The per-ISA files (src/engine/kernels/<isa>/*_avx2.cc, *_avx512*.cc, *_amx.cc) compile their
kernels for their target; every other object is baseline x86-64. An inline function or template instantiation
(a weak / COMDAT symbol) emitted by several objects is kept once for the whole program, so if a
per-ISA object's copy of such a function holds VEX/EVEX/AMX instructions, a baseline caller on a
CPU without that ISA may run it and die of SIGILL (an inline helper of a shared header, compiled
into kernels_avx512.cc with -mavx512f, can be the copy an ASan build keeps).

Usage: check_isa_isolation.py LIBOPENFIA.a   (x86-64 only; elsewhere it reports and passes)
Exit 0 with a summary line when clean, 1 listing each offending symbol and object.
"""
import re
import subprocess
import sys
from collections import defaultdict

ISA_MEMBER = re.compile(r"_(avx2|avx512\w*|amx)\.cc\.o$")
# A baseline x86-64 function has no VEX/EVEX-encoded instruction (mnemonics starting with v,
# e.g. vmovups, vzeroupper), no ymm/zmm/mask/tile register and no AMX tile instruction.
ISA_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(v[a-z0-9]+|t(ile|dp)[a-z0-9]*|kmov\w*)\b|%[yz]mm|%k[1-7]\b|%tmm")


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lib = sys.argv[1]
    machine = run(["objdump", "-f", lib])
    if "x86-64" not in machine:
        print("check_isa_isolation: not an x86-64 library, nothing to check: 0 passed, 0 failed")
        return 0
    # member -> set of weak (COMDAT) function symbols it defines
    weak = defaultdict(set)
    member = None
    for line in run(["nm", "--defined-only", lib]).splitlines():
        if line.endswith(":") and line.strip():
            member = line[:-1].strip()
            continue
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("W", "V", "u", "i") and member:
            weak[member].add(parts[2])
    owners = defaultdict(list)
    for m, syms in weak.items():
        for s in syms:
            owners[s].append(m)
    shared = {s for s, ms in owners.items() if len(ms) > 1}
    bad = []
    checked = 0
    isa_members = [m for m in sorted(weak) if ISA_MEMBER.search(m) and weak[m] & shared]
    if isa_members:
        # One disassembly of the archive, split into members, then into functions.
        dis = run(["objdump", "-d", "--no-show-raw-insn", "-w", lib])
        chunks = re.split(r"\n(?=\S+\.o:\s+file format)", dis)
        for m in isa_members:
            targets = weak[m] & shared
            text = next((c for c in chunks if c.lstrip().startswith(m + ":")), "")
            for f in re.split(r"\n(?=[0-9a-f]+ <)", text):
                head = re.match(r"[0-9a-f]+ <([^>]+)>:", f)
                if not head or head.group(1) not in targets:
                    continue
                checked += 1
                hits = [l.strip() for l in f.splitlines()[1:] if ISA_INSN.search(l)]
                if hits:
                    bad.append((m, head.group(1), hits[0]))
    for m, s, insn in bad:
        dem = run(["c++filt", s]).strip()
        print(f"FAIL {m}: shared function {dem} holds target instructions ({insn})")
    print(f"check_isa_isolation: {checked} shared function copies in per-ISA objects checked: "
          f"{checked - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
