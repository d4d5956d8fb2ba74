"""Stand-ins for the NPU-side Python API that Ascend scripts touch around the attention calls,
so that such scripts run unchanged on a CPU (`python -m openfia run script.py`, or
`openfia.patch_torch_npu()` before the script's imports). Installed only where the real package
is absent: with a real torch_npu / torchair nothing here replaces anything of theirs.

- `Tensor.npu(device=None, non_blocking=False)` returns the tensor itself (the CPU is openfia's
  NPU); `torch.npu` / `torch_npu.npu` answer the usual housekeeping calls (synchronize,
  set_device, current_device, empty_cache, manual_seed as no-ops or their CPU meaning) and say
  `is_available() == False`, `device_count() == 0`, so code that picks a device string picks
  "cpu". Device strings "npu" / "npu:0" themselves are not mapped (torch rejects them).
- `torchair` (the NPU graph-mode package): `get_npu_backend(compiler_config=...)` returns a
  torch.compile backend that compiles for the CPU (inductor; `OPENFIA_TORCHAIR_BACKEND` picks
  another, e.g. "eager"); `torchair.configs.compiler_config.CompilerConfig` accepts any nested
  option (`config.debug.graph_dump.type = "pbtxt"`, ...), which the CPU ignores;
  `torchair.core.utils.logger` is a logging.Logger.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
import types


def _is_real(name):
    """Whether module `name` is importable and is not one of openfia's stand-ins."""
    mod = sys.modules.get(name)
    if mod is None:
        try:
            mod = importlib.import_module(name)
        except Exception:  # absent, or unusable without an NPU
            return False
    return not getattr(mod, "__openfia_stand_in__", False)


def _tensor_npu(self, device=None, non_blocking=False):
    """openfia stand-in for torch_npu's Tensor.npu(): the tensor itself, on the CPU."""
    return self


def _npu_namespace():
    import torch

    ns = types.ModuleType("torch.npu")
    ns.__doc__ = "openfia stand-in for torch.npu (no NPU: the CPU runs openfia's operators)"
    ns.__openfia_stand_in__ = True
    ns.is_available = lambda: False
    ns.device_count = lambda: 0
    ns.current_device = lambda: 0
    ns.set_device = lambda device=None: None
    ns.synchronize = lambda device=None: None
    ns.empty_cache = lambda: None
    ns.manual_seed = lambda seed: torch.manual_seed(seed)
    ns.manual_seed_all = lambda seed: torch.manual_seed(seed)
    return ns


def install_device_shims(torch_npu_module):
    """Tensor.npu and torch.npu (also as torch_npu.npu), where torch_npu is openfia's stand-in."""
    import torch

    if not hasattr(torch.Tensor, "npu"):
        torch.Tensor.npu = _tensor_npu
    if not hasattr(torch, "npu"):
        torch.npu = _npu_namespace()
        sys.modules.setdefault("torch.npu", torch.npu)
    if not hasattr(torch_npu_module, "npu"):
        torch_npu_module.npu = torch.npu


class _Options:
    """A permissive nested option namespace: reading an unset option makes a nested one, so
    `config.debug.graph_dump.type = "pbtxt"` works for any path (the CPU ignores them)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Options()
        object.__setattr__(self, name, sub)
        return sub

    def __repr__(self):
        return f"Options({vars(self)})"


class CompilerConfig(_Options):
    """openfia stand-in for torchair.configs.compiler_config.CompilerConfig."""


def get_npu_backend(*, compiler_config=None, **kwargs):
    """openfia stand-in for torchair.get_npu_backend: a torch.compile backend for the CPU."""
    import torch._dynamo

    return torch._dynamo.lookup_backend(os.environ.get("OPENFIA_TORCHAIR_BACKEND", "inductor"))


def install_torchair():
    """A `torchair` module (and the submodules the Ascend examples import) where none is
    installed. Returns the torchair module in effect."""
    if _is_real("torchair"):
        return sys.modules["torchair"]
    names = ("torchair", "torchair.configs", "torchair.configs.compiler_config", "torchair.core",
             "torchair.core.utils")
    mods = {}
    for name in names:
        m = types.ModuleType(name)
        m.__doc__ = "openfia stand-in for " + name
        m.__openfia_stand_in__ = True
        m.__path__ = []  # a package: its submodules import
        mods[name] = m
    mods["torchair"].get_npu_backend = get_npu_backend
    mods["torchair.configs.compiler_config"].CompilerConfig = CompilerConfig
    mods["torchair"].CompilerConfig = CompilerConfig
    mods["torchair.core.utils"].logger = logging.getLogger("torchair")
    for name in names:
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mods[name])
        sys.modules[name] = mods[name]
    return mods["torchair"]
