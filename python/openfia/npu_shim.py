"""Stand-ins for the NPU-side Python API that Ascend scripts touch around the attention calls,
so that such scripts run unchanged on a CPU (`python -m openfia run script.py`, or
`openfia.patch_torch_npu()` before the script's imports). Installed only where the real package
is absent: with a real torch_npu / torchair nothing here replaces anything of theirs.

- `Tensor.npu(device=None, non_blocking=False)` returns the tensor itself and
  `torch.nn.Module.npu(device=None)` the module itself (the CPU is openfia's NPU); `torch.npu` /
  `torch_npu.npu` answer the usual housekeeping calls (synchronize, set_device, current_device,
  empty_cache, manual_seed, set_compile_mode as no-ops or their CPU meaning; `torch.npu.config`
  takes any option, e.g. `allow_internal_format`) and say `is_available() == False`,
  `device_count() == 0`, so code that picks a device string picks "cpu".
- `torch_npu.testing`, as far as Ascend's operator test files use it:
  `torch_npu.testing.testcase.TestCase` (a unittest.TestCase whose `assertEqual` compares tensors
  with torch.testing.assert_close and `assertRtolEqual(expected, actual, prec, prec16)` checks
  every element), `run_tests()` (unittest.main) and
  `torch_npu.testing.common_utils.SupportedDevices(devices)`, which runs the test whatever the
  device list names: openfia stands in for each of them.
- Device strings: "npu" becomes a device name torch parses (`torch.device("npu:0")`; the
  privateuse1 backend renamed, where nothing else has renamed it) and a torch-function mode maps
  every "npu" device to the CPU where tensors are made or moved: `device=` of any torch function
  (`torch.randn(..., device="npu:0")`, `torch.tensor`, `new_empty`, ...), `Tensor.to("npu")`,
  `Tensor.to(torch.device("npu", 0))`, `Tensor.to(0)`, `Module.to("npu")`, and
  `torch.set_default_device("npu")`. The mode is torch's per-thread mode stack: it holds in the
  thread that called patch_torch_npu() (the script's main thread under `python -m openfia run`);
  another thread enters `npu_shim.NpuDeviceMode()` itself. It costs ~2 us per torch call.
- Any other `torch_npu.X` of the stand-in raises `NotProvidedError` (an OpenfiaError and an
  AttributeError, so `hasattr(torch_npu, X)` and `getattr(torch_npu, X, default)` keep working)
  whose message names X, says openfia does not provide it and lists what it provides;
  `import torch_npu.X` of a submodule it does not have is a ModuleNotFoundError saying the
  same.
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

from ._openfia import OpenfiaError


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


def _module_npu(self, device=None):
    """openfia stand-in for torch_npu's Module.npu(): the module itself, on the CPU."""
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
    # The CPU generator is the "device" generator. Not torch.manual_seed, which itself calls
    # the privateuse1 backend's manual_seed_all once "npu" names it (see _seed_custom_device).
    ns.manual_seed = lambda seed: torch.default_generator.manual_seed(int(seed))
    ns.manual_seed_all = ns.manual_seed
    ns._is_in_bad_fork = lambda: False
    # Graph compilation settings of the NPU runtime: nothing to set on the CPU.
    ns.set_compile_mode = lambda jit_compile=False, **kwargs: None
    ns.config = _Options()  # torch.npu.config.allow_internal_format = False, ...
    return ns


def _is_npu_device(d):
    import torch

    if isinstance(d, torch.device):
        return d.type == "npu"
    return isinstance(d, str) and (d == "npu" or d.startswith("npu:"))


def _cpu_if_npu(d):
    import torch

    return torch.device("cpu") if _is_npu_device(d) else d


def _make_mode_class():
    import torch
    from torch.overrides import TorchFunctionMode

    to_funcs = (torch.Tensor.to,)

    class NpuDeviceMode(TorchFunctionMode):
        """Maps "npu" devices to the CPU in the torch calls made while it is entered: the
        `device=` keyword of any torch function and the positional device of Tensor.to (a device,
        a device string, or an accelerator index, which now means an "npu")."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if "device" in kwargs:
                dev = kwargs["device"]
                # An integer device is an index of the current accelerator, which is "npu" now.
                if _is_npu_device(dev) or (isinstance(dev, int) and not isinstance(dev, bool)):
                    kwargs = dict(kwargs, device=torch.device("cpu"))
            if func in to_funcs and len(args) > 1:
                a = args[1]
                if _is_npu_device(a) or (isinstance(a, int) and not isinstance(a, bool)):
                    args = (args[0], torch.device("cpu")) + tuple(args[2:])
            return func(*args, **kwargs)

    return NpuDeviceMode


NpuDeviceMode = None  # the class, made on first use (torch is imported lazily)
_device_mode = None  # the mode entered by install_device_mapping()


def install_device_mapping():
    """Makes "npu" a device name and maps it to the CPU (see the module's doc). Does nothing
    where another package renamed torch's privateuse1 backend (a real device backend). Returns
    whether the mapping is in effect; a second call enters no second mode."""
    global NpuDeviceMode, _device_mode
    import torch

    if _device_mode is not None:
        return True
    name = torch._C._get_privateuse1_backend_name()
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend("npu")
    elif name != "npu":
        return False
    if NpuDeviceMode is None:
        NpuDeviceMode = _make_mode_class()
    if not hasattr(torch.Tensor, "is_npu"):
        # What torch expects of a renamed privateuse1 backend (torch.overrides reads it); the
        # tensors are on the CPU, so False.
        torch.Tensor.is_npu = property(lambda self: False, doc="openfia stand-in: False (CPU)")
    set_default_device = torch.set_default_device

    def _set_default_device(device):
        return set_default_device(_cpu_if_npu(device))

    _set_default_device.__doc__ = set_default_device.__doc__
    _set_default_device.__openfia_stand_in__ = True
    torch.set_default_device = _set_default_device
    _device_mode = NpuDeviceMode()
    _device_mode.__enter__()
    return True


def install_device_shims(torch_npu_module):
    """Tensor.npu, Module.npu, torch.npu (also as torch_npu.npu), the "npu" device mapping and
    torch_npu.testing, where torch_npu is openfia's stand-in."""
    import torch

    if not hasattr(torch.Tensor, "npu"):
        torch.Tensor.npu = _tensor_npu
    if not hasattr(torch.nn.Module, "npu"):
        torch.nn.Module.npu = _module_npu
    install_testing(torch_npu_module)
    if not hasattr(torch, "npu"):
        torch.npu = _npu_namespace()
        sys.modules.setdefault("torch.npu", torch.npu)
    if not hasattr(torch_npu_module, "npu"):
        torch_npu_module.npu = torch.npu
    if getattr(torch.npu, "__openfia_stand_in__", False):
        install_device_mapping()


class NotProvidedError(OpenfiaError, AttributeError):
    """torch_npu.X that openfia's torch_npu stand-in does not have: the message names X. Also an
    AttributeError, so hasattr() and getattr() with a default treat X as absent."""


def install_missing_attribute_error(torch_npu_module):
    """Makes a missing public attribute of the stand-in torch_npu module a NotProvidedError
    naming it (.argument = the name, .code = "unsupported"); dunder lookups (__file__,
    __spec__, ... probed by inspect, pickle and importlib) stay plain AttributeErrors."""

    def __getattr__(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module 'torch_npu' has no attribute {name!r}")
        e = NotProvidedError(_not_provided_message(f"torch_npu.{name}", torch_npu_module))
        e.name, e.obj = name, torch_npu_module
        e.argument, e.rule, e.actual, e.code = (name, "not provided by openfia's torch_npu "
                                                "stand-in", name, "unsupported")
        raise e

    torch_npu_module.__getattr__ = __getattr__
    if not any(isinstance(f, _NotProvidedFinder) for f in sys.meta_path):
        sys.meta_path.append(_NotProvidedFinder())


def _not_provided_message(fullname, torch_npu_module):
    provided = ", ".join(sorted(n for n in vars(torch_npu_module) if not n.startswith("_")))
    return (f"{fullname}: openfia does not provide it. openfia's torch_npu stand-in (no "
            f"torch_npu installed) provides only: {provided} (torch_npu.testing is its one "
            "submodule); the rest of torch_npu needs torch_npu itself (an Ascend NPU)")


class _NotProvidedFinder:
    """The last import finder: `import torch_npu.X` (a submodule the stand-in does not have,
    e.g. torch_npu.contrib) and `from torch_npu import X` (an X it does not have) are a
    ModuleNotFoundError whose message names X and says openfia does not provide it. Does nothing
    while torch_npu is a real package."""

    def find_spec(self, fullname, path=None, target=None):
        mod = sys.modules.get("torch_npu")
        if not fullname.startswith("torch_npu.") or not getattr(mod, "__openfia_stand_in__",
                                                                 False):
            return None
        # No .name: `from torch_npu import X` tries the submodule torch_npu.X first and would
        # swallow an error whose .name is that submodule, then say only "cannot import name".
        raise ModuleNotFoundError(_not_provided_message(fullname, mod))


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


def _as_float64(x):
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64).numpy(), x.dtype in (torch.float16,
                                                                        torch.bfloat16)
    a = np.asarray(x)
    return a.astype(np.float64), a.dtype == np.float16


def _make_test_case_class():
    import unittest

    import numpy as np
    import torch

    class TestCase(unittest.TestCase):
        """openfia stand-in for torch_npu.testing.testcase.TestCase."""

        def assertEqual(self, first, second, msg=None, **kwargs):
            if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
                torch.testing.assert_close(torch.as_tensor(first), torch.as_tensor(second),
                                           msg=msg, check_dtype=False, **kwargs)
            else:
                super().assertEqual(first, second, msg)

        def assertRtolEqual(self, expected, actual, prec=1.0e-4, prec16=1.0e-3,
                            auto_trans_dtype=False, message=None):
            """Every element within prec (prec16 for half-precision inputs) of the expected
            value, relative to max(|expected|, 1); NaN and infinity at the same positions."""
            e, e16 = _as_float64(expected)
            a, a16 = _as_float64(actual)
            self.assertEqual(e.shape, a.shape, message)
            self.assertTrue(np.array_equal(np.isnan(e), np.isnan(a)), message or "NaN positions")
            fin = np.isfinite(e)
            self.assertTrue(np.array_equal(e[~fin & ~np.isnan(e)], a[~fin & ~np.isnan(e)]),
                            message or "infinities")
            tol = (prec16 if e16 or a16 else prec) * np.maximum(np.abs(e[fin]), 1.0)
            err = np.abs(a[fin] - e[fin])
            if err.size and not (err <= tol).all():
                i = int(np.argmax(err - tol))
                self.fail(message or f"{int((err > tol).sum())} of {err.size} elements differ; "
                          f"worst: {a[fin][i]!r} vs expected {e[fin][i]!r}")

    return TestCase


def _run_tests():
    """openfia stand-in for torch_npu.testing.testcase.run_tests."""
    import unittest

    unittest.main()


def SupportedDevices(devices):  # noqa: N802 (the upstream name)
    """openfia stand-in for torch_npu.testing.common_utils.SupportedDevices: the test runs,
    whatever devices it names (openfia computes what each of them computes)."""
    return lambda func: func


def install_testing(torch_npu_module):
    """torch_npu.testing with its testcase and common_utils modules, where absent."""
    if "torch_npu.testing" in sys.modules:
        return
    if not hasattr(torch_npu_module, "__path__"):
        torch_npu_module.__path__ = []  # a package: `from torch_npu.testing import ...` works
    names = ("torch_npu.testing", "torch_npu.testing.testcase", "torch_npu.testing.common_utils")
    mods = {}
    for name in names:
        m = types.ModuleType(name)
        m.__doc__ = "openfia stand-in for " + name
        m.__openfia_stand_in__ = True
        m.__path__ = []
        mods[name] = m
    tc = _make_test_case_class()
    for m in (mods["torch_npu.testing.testcase"], mods["torch_npu.testing.common_utils"]):
        m.TestCase, m.run_tests = tc, _run_tests
    mods["torch_npu.testing.common_utils"].SupportedDevices = SupportedDevices
    mods["torch_npu.testing"].testcase = mods["torch_npu.testing.testcase"]
    mods["torch_npu.testing"].common_utils = mods["torch_npu.testing.common_utils"]
    torch_npu_module.testing = mods["torch_npu.testing"]
    sys.modules.update(mods)


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
