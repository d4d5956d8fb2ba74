"""The FusedInferAttentionScore case-line format, read by the benchmark and the test suites.

One case per line: `<tier> <name> key=value ...`; `#` starts a comment; names are unique across
the files read together. Tiers: smoke and full (the test list, tests/cases/fia_cases.txt in the
source tree) and model (the benchmark workloads, model_cases.txt beside this module, shipped
with the package). Every key and its default is in DEFAULTS (an absent key takes its default);
tests/cases/README.md explains each one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TIERS = ("smoke", "full", "model")

# Every key of the format with its default, as a string (the value a line would spell).
DEFAULTS = {
    "layout": "BNSD", "B": "1", "N": "1", "KVN": "", "S": "1", "KVS": "1", "D": "64", "DV": "",
    "dtype": "bf16", "kv": "", "sparse": "0", "pre": "2147483647", "next": "2147483647",
    "mask": "none", "mdtype": "bool", "act_q": "", "act_kv": "", "qpad": "", "kvpad": "",
    "pse": "0", "page": "0", "cache": "3d", "prefix": "0", "pact": "", "kmode": "", "vmode": "",
    "legacy": "", "aoff": "1", "lse": "0", "outq": "", "qo2": "1", "fullquant": "0", "rope": "0",
    "ip": "0", "list": "0", "scale": "", "poison": "1", "seed": "0", "sinks": "",
}

MODEL_CASES_PATH = Path(__file__).with_name("model_cases.txt")


@dataclass
class Case:
    tier: str
    name: str
    p: dict = field(default_factory=dict)  # every key's value as a string, defaults filled

    def i(self, k):
        return int(self.p[k])

    def ints(self, k):
        v = self.p[k]
        return [int(x) for x in v.split(",")] if v else None

    def int_or(self, k, default):
        """The key's int value, or `default` where the key has no value (e.g. KVN: N)."""
        return int(self.p[k]) if self.p[k] != "" else default

    @property
    def keys(self):
        """The keys whose value differs from its default (what the case's line spells)."""
        return {k: v for k, v in self.p.items() if v != DEFAULTS[k]}

    def line(self):
        return " ".join([self.tier, self.name] + [f"{k}={v}" for k, v in self.keys.items()])

    def __repr__(self):
        return f"{self.tier}:{self.name}"


def make_case(tier, name, keys):
    """A Case from its non-default keys (unknown keys are an error)."""
    bad = sorted(set(keys) - set(DEFAULTS))
    if bad:
        raise ValueError(f"case {name}: unknown key(s) {', '.join(bad)}")
    return Case(tier, name, {**DEFAULTS, **{k: str(v) for k, v in keys.items()}})


def parse_line(line, where=""):
    """One line -> a Case, or None for a blank or comment line. `where` prefixes errors."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    parts = line.split()
    if len(parts) < 2:
        raise ValueError(f"{where}expected '<tier> <name> key=value ...'")
    tier, name = parts[0], parts[1]
    if tier not in TIERS:
        raise ValueError(f"{where}unknown tier '{tier}' (tiers: {', '.join(TIERS)})")
    keys = {}
    for kv in parts[2:]:
        k, sep, v = kv.partition("=")
        if not sep or k not in DEFAULTS:
            raise ValueError(f"{where}unknown key '{kv}'")
        keys[k] = v
    return Case(tier, name, {**DEFAULTS, **keys})


def read_cases(paths, tiers=None):
    """The cases of one file or several (in order), optionally only those of `tiers`. Names
    must be unique across all of them."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    cases, names = [], set()
    for path in paths:
        with open(path) as f:
            for lineno, raw in enumerate(f, 1):
                c = parse_line(raw, f"{path}:{lineno}: ")
                if c is None:
                    continue
                if c.name in names:
                    raise ValueError(f"{path}:{lineno}: duplicate case name '{c.name}'")
                names.add(c.name)
                if tiers is None or c.tier in tiers:
                    cases.append(c)
    return cases


def model_cases(path=None):
    """The benchmark workloads: the `model` cases of `path` (default: the package's
    model_cases.txt)."""
    return read_cases(path or MODEL_CASES_PATH, tiers=("model",))
