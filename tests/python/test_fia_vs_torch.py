"""Every case of the selected tier (OPENFIA_TIER: smoke (default), full, model) through openfia,
compared with the independent torch float64 oracle (torch_ref.py) within derived bounds."""
import os

import pytest

from cases import tier_cases
from common import check_case_against_torch

TIER = os.environ.get("OPENFIA_TIER", "smoke")
CASES = tier_cases(TIER)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_matches_torch(case):
    check_case_against_torch(case)
