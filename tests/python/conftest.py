"""pytest setup: makes tests/python importable (cases, torch_ref) and fixes torch's threads so
the oracle's float64 work does not oversubscribe small CI machines."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(params=["ref", "engine"])
def both_impls(request):
    """Runs a test on the fp64 reference and on the engine (set_impl("engine") raises if the
    engine stopped taking a case, instead of silently falling back). Modules opt in with
    `pytestmark = pytest.mark.usefixtures("both_impls")`."""
    import openfia

    prev = openfia.get_impl()
    openfia.set_impl(request.param)
    yield request.param
    openfia.set_impl(prev)
