"""Random combinations of the case list's keys (tests/cases/README.md) through openfia, against
the independent torch float64 oracle (torch_ref.py), as test_fia_vs_torch does for the listed
cases. The C++ suite draws its own random cases against openfia's fp64 reference
(test_fia_cases.cc); this one checks the reference's semantics from outside on combinations
nobody wrote down. OPENFIA_RANDOM_CASES (default 40) sets how many, OPENFIA_RANDOM_SEED
(default 1) which; a failing case's id is its case line (paste it into fia_cases.txt)."""
import os
import random

import pytest

import openfia
from cases import DEFAULTS, Case, build_inputs, call_kwargs
from common import check_case_against_torch

COUNT = int(os.environ.get("OPENFIA_RANDOM_CASES", "40"))
SEED = int(os.environ.get("OPENFIA_RANDOM_SEED", "1"))


def random_params(rng, index):
    """One random case line's keys (the distribution of test_fia_cases.cc's RandomCaseSpec)."""
    k = {}
    layout = rng.choice(["BSH", "BSND", "BNSD", "BNSD_BSND", "TND"])
    k["layout"] = layout
    k["dtype"] = rng.choice(["bf16", "bf16", "f16", "f32"])
    B, KVN, G = rng.randint(1, 3), rng.randint(1, 3), rng.choice([1, 2, 4, 5])
    mla = rng.random() < 0.06
    N = 32 if mla else KVN * G
    decode = rng.random() < 0.4
    S = 1 if decode else (rng.randint(10, 80) if rng.random() < 0.2 else rng.randint(2, 9))
    KVS = 0 if rng.random() < 0.05 else (rng.randint(49, 300) if rng.random() < 0.35
                                         else rng.randint(1, 48))
    k.update(B=B, N=N, KVN=1 if mla else KVN, S=S, KVS=KVS)
    if mla:
        k.update(D=512, rope=1)
    else:
        k["D"] = rng.choice([8, 16, 32, 64, 128])
        if rng.random() < 0.1:
            k["DV"] = rng.choice([16, 32])

    def lengths(hi):
        n = 1 if rng.random() < 0.2 else B
        return ",".join(str(rng.randint(0, hi)) for _ in range(n))

    if layout == "TND" or rng.random() < 0.4:
        k["act_q"] = lengths(S)
    if layout == "TND" or rng.random() < 0.5:
        k["act_kv"] = lengths(KVS)
    if rng.random() < 0.05:
        k["qpad"] = rng.randint(0, 2)
    if rng.random() < 0.05:
        k["kvpad"] = rng.randint(0, 2)
    sparse = 0 if decode else rng.choice([0, 0, 1, 2, 3, 4])
    if sparse:
        k["sparse"] = sparse
    if sparse in (0, 1):
        mask = (rng.choice(["none", "none", "bkv"]) if decode
                else rng.choice(["none", "full", "full4", "full2"]))
        if mask != "none":
            k["mask"], k["mdtype"] = mask, rng.choice(["bool", "int8", "uint8"])
    if sparse == 4 or (sparse == 0 and "mask" in k and rng.random() < 0.5):
        k["pre"], k["next"] = rng.randint(-2, 8), rng.randint(-2, 8)
    if rng.random() < 0.25:
        k["page"], k["cache"] = rng.choice([16, 32, 128]), rng.choice(["3d", "4d", "nz"])
    if not mla and rng.random() < 0.25:
        k["kv"] = rng.choice(["int8", "int8", "int4"])
        if rng.random() < 0.1:
            k["legacy"] = rng.choice(["pc", "pt", "tok"])
        else:
            k["kmode"] = rng.choice(["0", "0t", "1", "2", "3", "4", "5"])
            if rng.random() < 0.3:
                k["vmode"] = rng.choice(["0", "1"])
        if rng.random() < 0.3:
            k["aoff"] = 0
    elif not mla and rng.random() < 0.05:
        k["fullquant"] = 1
    if rng.random() < 0.1:
        k["prefix"] = rng.randint(1, 6)
        if rng.random() < 0.5:
            k["pact"] = rng.randint(0, k["prefix"])
    if rng.random() < 0.1:
        k["pse"] = rng.choice(["1", "b1"])
    if rng.random() < 0.1:
        k["list"] = 1
    if rng.random() < 0.1:
        k["outq"] = rng.choice(["pt", "pc"])
        if rng.random() < 0.3:
            k["qo2"] = 0
    if rng.random() < 0.1:
        k["ip"] = rng.randint(0, 3)
    if rng.random() < 0.3:
        k["lse"] = 1
    k["seed"] = index
    return {key: str(v) for key, v in k.items()}


def _valid(case):
    """Whether the case builds and openfia accepts the call (invalid combinations are what
    test_api's error tests and the C++ robustness tests check)."""
    try:
        q, k, v, kw = call_kwargs(build_inputs(case))
        openfia.fia_output_spec(q, k, v, **kw)
    except Exception:  # noqa: BLE001 - the builder's or the operator's rejection
        return False
    return True


def random_cases(count=COUNT, seed=SEED):
    rng = random.Random(seed * 0x9E3779B97F4A7C15)
    cases, tried = [], 0
    while len(cases) < count and tried < 400 * count:
        p = dict(DEFAULTS)
        p.update(random_params(rng, tried))
        case = Case("random", f"random_{tried}", p)
        tried += 1
        if _valid(case):
            cases.append(case)
    return cases, tried


CASES, TRIED = random_cases()


def _line(case):
    return " ".join(f"{k}={v}" for k, v in case.p.items() if v != DEFAULTS[k])


def test_random_cases_are_found():
    assert len(CASES) == COUNT, f"{len(CASES)} valid of {TRIED} drawn"
    if COUNT >= 32:
        assert {c.p["layout"] for c in CASES} == {"BSH", "BSND", "BNSD", "BNSD_BSND", "TND"}
        assert any(c.p["S"] == "1" for c in CASES) and any(c.p["page"] != "0" for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[_line(c) for c in CASES])
def test_random_case_matches_torch(case):
    check_case_against_torch(case)
