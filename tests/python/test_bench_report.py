"""The benchmark's report arithmetic: percentages of the run's limits and of the limits measured
next to each workload (openfia.bench.machine.Prober readings)."""
from openfia.bench import machine, report

LIM = {"threads": 2, "read_bw_1t_gbs": 20.0, "read_bw_all_gbs": 30.0, "fma_fp32_gflops_core": 100.0,
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
    # Where vdpbf16ps is slower than the FMA (the Intel VM of session 12), the FMA is the peak:
    # the run's limits and the readings next to the workload alike.
    slow = dict(LIM, has_bf16_dot=True, bf16_dot_gflops_core=50.0)
    assert report.percent_of_limit(row(False), slow, 2) == (100 * 100 / 200, "bf16")
    r = row(False, probe_before=dict(before, bf16_dot_gflops=60.0), probe_after=None)
    assert report.percent_of_limit(r, slow, 2, adjacent=True) == (100 * 100 / 150, "bf16")
    assert machine.bf16_limit_name(slow).startswith("fp32 FMA")
    assert machine.bf16_limit_name(lim) == "vdpbf16ps"
    # No readings (no openfia-bench binary): no adjacent percentage.
    assert report.percent_of_limit(row(True), LIM, 2, adjacent=True)[0] is None
