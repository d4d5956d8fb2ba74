"""The benchmark's optional ggml column: ggml's flash attention timed beside openfia where
ggml-python is importable, and the column absent (with the reason) where it is not."""
import math
import sys

import pytest

from openfia.bench import case_list, fia_workloads, peers_ggml, report, runner, timing
from test_bench_report import LIM, _timed

BF16_U = 2.0 ** -8


def tiny(kv="", **keys):
    """A paged GQA decode with two sequences, small enough to time in a fraction of a second."""
    base = dict(layout="BSH", B=2, N=4, KVN=2, S=1, KVS=256, D=64, page=32)
    if kv:
        base.update(kv=kv, kmode=4, vmode=4)
    return fia_workloads.build(case_list.make_case("model", "T" + (kv or "bf16"),
                                                   {**base, **keys}))


@pytest.mark.parametrize("kv, fmt", [("", "bf16"), ("int8", "q8_0")])
def test_ggml_peer_is_checked_and_timed_beside_openfia(monkeypatch, kv, fmt):
    pytest.importorskip("ggml")
    import openfia
    import torch

    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    w = tiny(kv)
    policy = timing.Policy(min_rounds=3, max_rounds=3, budget_s=5.0)
    res = runner.run_fia(openfia, torch, w, policy, None, timing.Progress(1),
                         peers_ggml.Peer(2))
    assert res["correct"] and res["ggml_format"] == fmt
    assert len(res["times"]["ggml"]) == res["rounds"] == 3
    assert all(math.isfinite(t) and t > 0 for t in res["times"]["ggml"])
    assert res["t_ggml"] > 0 and math.isfinite(res["ratio_ggml"]["value"])
    out_max = float(w.v_ref.abs().max())
    if fmt == "bf16":
        # The same bf16 values as openfia reads, f32 output: within openfia's own bound.
        assert res["err_ggml"] <= res["tol"]
    else:
        # q8_0 requantizes K, V and Q in 32-value blocks with f16 scales: a few bf16 roundings
        # of max|V| (about 1.5 u here); a scale 10% off errs by 18 u, a wrong layout by max|V|.
        assert res["err_ggml"] <= 8 * BF16_U * out_max


def test_ggml_does_not_take_what_one_node_cannot_express():
    prefill = fia_workloads.build(case_list.make_case(
        "model", "P", dict(layout="BSH", B=1, N=4, KVN=2, S=8, KVS=64, D=64, sparse=3)))
    ragged = fia_workloads.build(case_list.make_case(
        "model", "R", dict(layout="BSH", B=2, N=4, KVN=2, S=1, KVS=64, D=64, act_kv="64,32")))
    assert peers_ggml.ggml_format(prefill) is None
    assert peers_ggml.ggml_format(ragged) is None
    assert peers_ggml.ggml_format(tiny("int4", kmode=0, vmode=1, page=0)) == "q4_0"


def test_without_ggml_the_column_is_absent_and_the_report_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "ggml", None)  # `import ggml` raises ImportError
    peer = peers_ggml.Peer(2)
    assert not peer.available and peer.build(tiny()) is None
    status = peer.status()
    assert "pip install ggml-python" in status["text"]
    rows = [_timed("D1", 2.0, 1.9, 2.1)]
    table = report.headline_table(rows, 0.10, status)
    assert "ggml" not in table and table == report.headline_table(rows, 0.10)
    from openfia.bench.timing import Policy

    doc = report.document(rows, LIM, 2, Policy(), dict(
        command="x", preset="demo", warm=False, openfia="0", simd="x", torch="0"), [], "", False,
        status)
    assert "ggml ms" not in doc and doc.count(status["text"]) == 1


def test_with_ggml_the_columns_show_times_ratio_format_and_dashes():
    status = {"available": True, "text": "ggml-python 0"}
    d1 = _timed("D1", 2.0, 1.9, 2.1)
    d1.update(t_ggml=3e-3, med_ggml=3.3e-3, ratio_ggml={"value": 3.0, "low": 2.9, "high": 3.1},
              err_ggml=1.5e-3, ggml_format="q8_0")
    p1 = _timed("P1", 2.0, 1.9, 2.1)
    table = report.headline_table([d1, p1], 0.10, status).splitlines()
    assert table[0].endswith("| ggml ms | ggml / openfia |")
    assert table[2].endswith("| 3.000 / 3.300 | 3.00x (2.90-3.10) |")
    assert table[3].endswith("| - | - |")
    details = report.details_table([d1, p1], LIM, 2, status).splitlines()
    assert details[2].endswith("| 1.50e-03 (q8_0) |") and details[3].endswith("| - |")
    assert "D1 q8_0" in peers_ggml.note([d1, p1], status)
