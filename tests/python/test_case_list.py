"""The case-line format has one parser (openfia.bench.case_list) and the benchmark workloads
one file (model_cases.txt in the package), read by the tests and the benchmark alike."""
import importlib.resources

import pytest

from cases import CASES_PATH, parse_cases, tier_cases
from openfia.bench import case_list, fia_workloads


def test_model_workloads_live_in_one_file_shipped_with_the_package():
    shipped = importlib.resources.files("openfia.bench").joinpath("model_cases.txt")
    assert shipped.is_file()
    model = case_list.model_cases()
    assert [c.name for c in model][:3] == ["D1", "D2", "D3"] and len(model) >= 8
    # The test list does not repeat them; the tests' model tier is the same file's lines.
    assert not [c for c in case_list.read_cases(CASES_PATH) if c.tier == "model"]
    assert [(c.name, c.p) for c in tier_cases("model")] == [(c.name, c.p) for c in model]
    assert {c.tier for c in tier_cases("smoke")} == {"smoke"}


def test_lines_round_trip_and_defaults():
    c = case_list.parse_line("model X1 layout=BSH B=2 N=8 KVN=2 act_kv=5,7 # comment")
    assert (c.tier, c.name, c.i("B"), c.int_or("KVN", 0), c.int_or("DV", 64)) == \
        ("model", "X1", 2, 2, 64)
    assert c.ints("act_kv") == [5, 7] and c.p["dtype"] == case_list.DEFAULTS["dtype"]
    assert c.keys == {"layout": "BSH", "B": "2", "N": "8", "KVN": "2", "act_kv": "5,7"}
    assert case_list.parse_line(c.line()) == c
    assert case_list.parse_line("   # only a comment") is None


@pytest.mark.parametrize("line, what", [
    ("smoke", "expected '<tier> <name> key=value ...'"),
    ("nightly a B=1", "unknown tier 'nightly'"),
    ("smoke a Q=1", "unknown key 'Q=1'"),
    ("smoke a B", "unknown key 'B'"),
])
def test_bad_lines_name_file_line_and_problem(tmp_path, line, what):
    p = tmp_path / "cases.txt"
    p.write_text("# header\n" + line + "\n")
    with pytest.raises(ValueError) as e:
        case_list.read_cases(p)
    assert str(e.value).startswith(f"{p}:2: {what}")


def test_names_are_unique_across_the_files_read_together(tmp_path):
    p = tmp_path / "cases.txt"
    p.write_text("model D1 B=1\n")
    with pytest.raises(ValueError, match="duplicate case name 'D1'"):
        case_list.read_cases([p, case_list.MODEL_CASES_PATH])
    assert [c.name for c in parse_cases(str(p))] == ["D1"]  # another list alone: its own cases


def test_demo_preset_shrinks_lengths_and_batch():
    d4 = next(c for c in case_list.model_cases() if c.name == "D4")
    demo = fia_workloads.apply_preset(d4, "demo")
    assert demo.name == "D4@demo" and demo.i("B") == 4
    assert demo.i("KVS") == 512 and demo.p["act_kv"] == ""  # 4096 / 8, a page multiple
    assert fia_workloads.apply_preset(d4, "full") is d4
    with pytest.raises(ValueError, match="preset"):
        fia_workloads.apply_preset(d4, "tiny")
