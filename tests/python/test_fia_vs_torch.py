"""Every case of the selected tier (OPENFIA_TIER: smoke (default), full, model) through openfia,
compared with the independent torch float64 oracle (torch_ref.py) within derived bounds."""
import os

import pytest
import torch

from cases import build_inputs, call_kwargs, tier_cases
from common import assert_within, run_openfia
import torch_ref

TIER = os.environ.get("OPENFIA_TIER", "smoke")
CASES = tier_cases(TIER)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_torch(case):
    inputs = build_inputs(case)
    q, k, v, kw = call_kwargs(inputs)
    out, lse = run_openfia(inputs)
    ref, ref_lse, bound, lse_bound, ref_dtype = torch_ref.reference(q, k, v, **kw)
    assert out.dtype == ref_dtype, f"attention_out dtype {out.dtype}, expected {ref_dtype}"
    assert out.is_contiguous() and lse.dtype == torch.float32
    assert_within(out, ref, bound, f"{case.name}: attention_out")
    if kw.get("softmax_lse_flag"):
        assert_within(lse, ref_lse, lse_bound, f"{case.name}: softmax_lse")
    else:
        assert lse.shape == (1,) and lse.item() == 0.0
