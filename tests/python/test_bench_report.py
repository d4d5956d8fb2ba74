"""The benchmark's report arithmetic: percentages of the run's limits and of the limits measured
next to each workload (openfia.bench.machine.Prober readings)."""
import pytest

from openfia.bench import machine, report

LIM = {"cpu": "test CPU", "threads": 2, "read_bw_1t_gbs": 20.0, "read_bw_all_gbs": 30.0,
       "fma_fp32_gflops_core": 100.0,
       "has_bf16_dot": False, "bf16_dot_gflops_core": 0.0}


def row(decode, **kw):
    r = {"t_openfia": 0.5, "decode": decode, "shape": "B=1", "flops": 50e9, "kv_bytes": 10e9}
    r.update(kw)
    return r


def test_percent_of_the_runs_limits():
    assert report.percent_of_limit(row(True), LIM, 2) == (100 * 20 / 30, "bw")
    assert report.percent_of_limit(row(False), LIM, 2) == (100 * 100 / 200, "bf16")
    assert report.percent_of_limit(row(True), LIM, 1) == (100 * 20 / 20, "bw")
    # MLA decode (rope +64) and the sparse operators are compute rows.
    assert report.percent_of_limit(row(True, shape="D=512+64"), LIM, 2)[1] == "bf16"
    assert report.percent_of_limit(row(True, limit="bf16"), LIM, 2)[1] == "bf16"


def test_adjacent_percent_uses_the_best_reading_next_to_the_workload():
    before = {"fma_fp32_gflops": 150.0, "bf16_dot_gflops": 0.0, "read_bw_gbs": 25.0}
    after = {"fma_fp32_gflops": 160.0, "bf16_dot_gflops": 0.0, "read_bw_gbs": 24.0}
    r = row(True, probe_before=before, probe_after=after)
    assert report.percent_of_limit(r, LIM, 2, adjacent=True) == (100 * 20 / 25, "bw")
    r = row(False, probe_before=before, probe_after=after)
    assert report.percent_of_limit(r, LIM, 2, adjacent=True) == (100 * 100 / 160, "bf16")
    # With vdpbf16ps the bf16 rows use its reading.
    lim = dict(LIM, has_bf16_dot=True, bf16_dot_gflops_core=400.0)
    r = row(False, probe_before=dict(before, bf16_dot_gflops=500.0), probe_after=None)
    assert report.percent_of_limit(r, lim, 2, adjacent=True) == (100 * 100 / 500, "bf16")
    # Where vdpbf16ps is slower than the FMA (some Intel CPUs), the FMA is the peak:
    # the run's limits and the readings next to the workload alike.
    slow = dict(LIM, has_bf16_dot=True, bf16_dot_gflops_core=50.0)
    assert report.percent_of_limit(row(False), slow, 2) == (100 * 100 / 200, "bf16")
    r = row(False, probe_before=dict(before, bf16_dot_gflops=60.0), probe_after=None)
    assert report.percent_of_limit(r, slow, 2, adjacent=True) == (100 * 100 / 150, "bf16")
    assert machine.bf16_limit_name(slow).startswith("fp32 FMA")
    assert machine.bf16_limit_name(lim) == "vdpbf16ps"
    # No readings (no openfia-bench binary): no adjacent percentage.
    assert report.percent_of_limit(row(True), LIM, 2, adjacent=True)[0] is None


# ---- repeated rounds, ratios and their intervals ------------------------------------------------

def test_median_interval_is_the_order_statistics_interval():
    from openfia.bench.stats import median, median_interval, paired_ratio

    assert median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5
    assert median_interval([5, 1, 4, 2, 3]) == (1, 5)          # n = 5: the whole range
    xs = list(range(10, 0, -1))
    assert median_interval(xs) == (2, 9)                         # n = 10: x(2) .. x(9)
    assert median_interval(list(range(100))) == (40, 59)         # n = 100: x(41) .. x(60)
    r = paired_ratio([2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert (r.value, r.low, r.high, r.rounds, r.rel_halfwidth) == (2.0, 2.0, 2.0, 5, 0.0)
    r = paired_ratio([1.0, 2.0, 3.0, 4.0, 5.0], [1.0] * 5)
    assert (r.value, r.low, r.high) == (3.0, 1.0, 5.0) and r.rel_halfwidth == 2 / 3


def test_rounds_repeat_until_the_ratio_is_stable(monkeypatch):
    import itertools
    import time

    from openfia.bench import timing

    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    progress = timing.Progress(1)
    steady = [("openfia", lambda: time.sleep(0.002)), ("torch", lambda: time.sleep(0.006))]
    pol = timing.Policy(min_rounds=4, max_rounds=30, budget_s=30, target=0.25)
    got = timing.repeat_until_stable(steady, pol, None, False, progress, "steady")
    assert got.stable and 4 <= len(got.times["openfia"]) == len(got.times["torch"]) < 30
    assert 1.5 < got.ratio("torch").value < 4
    alternate = itertools.cycle([0.001, 0.012])  # half the rounds 12x slower: no stable median
    noisy = [("openfia", lambda: time.sleep(0.001)),
             ("torch", lambda: time.sleep(next(alternate)))]
    pol = timing.Policy(min_rounds=4, max_rounds=8, budget_s=30, target=0.05)
    got = timing.repeat_until_stable(noisy, pol, None, False, progress, "noisy")
    assert not got.stable and len(got.times["torch"]) == 8  # it says it could not
    pol = timing.Policy(min_rounds=4, max_rounds=1000, budget_s=0.2, target=0.0)
    got = timing.repeat_until_stable(noisy, pol, None, False, progress, "budget")
    assert not got.stable and len(got.times["torch"]) < 1000   # the time budget ends it


def _timed(name, ratio, low, high, stable=True):
    r = {"workload": name, "label": "decode", "shape": "B=1", "correct": True, "decode": True,
         "impl": "engine", "rounds": 9, "stable": stable, "best_is_torch": False,
         "flops": 1e9, "kv_bytes": 1e8, "io_bytes": 1.1e8, "err_openfia": 1e-3, "tol": 1e-2,
         "err_torch": 1e-3}
    for peer, t in (("openfia", 1e-3), ("torch", ratio * 1e-3), ("torch_best", 1e-3)):
        r[f"t_{peer}"], r[f"med_{peer}"] = t, t * 1.1
    r["ratio_torch"] = {"value": ratio, "low": low, "high": high}
    r["ratio_torch_best"] = {"value": 1.0, "low": 0.99, "high": 1.01}
    return r


def test_headline_marks_ratios_whose_interval_is_too_wide():
    from openfia.bench.timing import Policy

    rows = [_timed("D1", 2.0, 1.9, 2.1), _timed("D2", 2.0, 1.2, 3.5, stable=False),
            {"workload": "D3", "error": "rejected"}]
    table = report.headline_table(rows, 0.10)
    d1, d2, d3 = table.splitlines()[2:]
    assert "| 1.000 / 1.100 | 2.000 / 2.200 | 2.00x (1.90-2.10) |" in d1 and "?" not in d1
    assert "2.00x (1.20-3.50) ?" in d2 and "9 (not stable)" in d2
    assert "not run: rejected" in d3
    legend = report._legend(rows, Policy(target=0.10))
    assert "(D2)" in legend and "D1" not in legend


def test_report_text_explains_the_cpp_table_and_its_debug_warning(tmp_path):
    assert report.cpp_note(tmp_path) == ""
    (tmp_path / "openfia-bench.txt").write_text("Load Average: 1\nall fine\n")
    note = report.cpp_note(tmp_path)
    assert "asleep" in note and "DEBUG" not in note
    (tmp_path / "openfia-bench.txt").write_text("***WARNING*** Library was built as DEBUG. "
                                                "Timings may be affected.\n")
    note = report.cpp_note(tmp_path)
    assert "Google Benchmark" in note and "not openfia" in note
    from openfia.bench.timing import Policy

    doc = report.document([_timed("D1", 2.0, 1.9, 2.1)], LIM, 2, Policy(), dict(
        command="python -m openfia.bench", preset="demo", warm=False, openfia="0", simd="x",
        torch="0"), ["Q1"], note, True)
    # Plain words: no development goals or history (the SIMD target is the CPU code path).
    for word in ("targets", ">= ", "issue", "session", "reported, not asserted"):
        assert word not in doc.lower(), word


def test_roofline_labels_do_not_overlap():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [(4.0, 40.0), (4.0, 42.0), (4.0, 38.0), (4.2, 40.0), (3.9, 41.0)]
    ax.scatter(*zip(*pts))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1, 100)
    ax.set_ylim(1, 1000)  # the points lie within a few pixels of each other
    fig.canvas.draw()
    boxes = report._place_labels(ax, fig, pts, ["D1", "D4", "D5", "P3", "V3"], pts)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1], (a, b)
    plt.close(fig)
