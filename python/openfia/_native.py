"""The one place where the Python front end meets the native extension (openfia._openfia).

Every operator module converts its arguments with these helpers: tensors cross into C++ as DLPack
capsules, outputs are allocated here (torch.empty / torch.zeros, written by the library through
their capsules), integers and length lists are coerced here, and `traced` decides whether a call
may take the direct native path or must go through the torch dispatcher.

torch is optional: without it the native module still takes numpy arrays (and anything else with
__dlpack__), and the runtime settings work.
"""
from __future__ import annotations

import inspect

from . import _openfia as lib
from ._openfia import OpenfiaError

try:
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None

__all__ = ["lib", "OpenfiaError", "error", "capsule", "data", "dense", "dense_capsule",
           "capsules", "int_list", "int64_tensor", "lengths", "torch_dtype", "alloc_output",
           "alloc_output_lse_zeroed", "traced", "keyword_defaults"]

_DTYPE_NAMES = ("float32", "float16", "bfloat16", "int8", "uint8", "bool", "int32", "int64",
                "float8_e4m3fn")
_TORCH_DTYPES = None


def __getattr__(name):
    if name == "TORCH_DTYPES":  # built on first use: torch is optional at import
        return torch_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def torch_dtypes():
    """{dtype name as the native module spells it: torch dtype}."""
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        _TORCH_DTYPES = {n: getattr(torch, n) for n in _DTYPE_NAMES}
    return _TORCH_DTYPES


def torch_dtype(name):
    return torch_dtypes()[name]


def error(op, argument, rule, actual, code="invalid_argument"):
    """An OpenfiaError raised by the Python side, worded and structured as the C++ library's:
    "<op>: argument '<argument>': <rule> (got <actual>)" with .argument, .rule, .actual, .code."""
    e = OpenfiaError(f"{op}: argument '{argument}': {rule} (got {actual})")
    e.argument, e.rule, e.actual, e.code = argument, rule, str(actual), code
    return e


# ---- tensors in ---------------------------------------------------------------------------------

def capsule(t):
    """A torch tensor as a DLPack capsule, anything else (None, a numpy array, a number) as is.
    The native module reads both; torch.utils.dlpack.to_dlpack costs ~0.4 us where the
    __dlpack__ protocol call nanobind makes for a tensor costs ~2.5 us, and a decode call passes
    4-8 tensors. A capsule is single-use: each one goes to exactly one native call."""
    if torch is not None and isinstance(t, torch.Tensor):
        return torch.utils.dlpack.to_dlpack(t)
    return t


def data(t):
    """A tensor the library reads through its strides (no copy). DLPack cannot export a tensor
    that requires grad; the operators are inference-only, so the data is read as is."""
    if t is not None and getattr(t, "requires_grad", False):
        return t.detach()
    return t


def dense(t):
    """A tensor the library reads densely: detached, and a contiguous copy only of a view that
    is not contiguous (the C++ API follows the NPU, which rejects non-contiguous inputs; torch
    users routinely hold transposed or sliced views)."""
    t = data(t)
    if t is not None and hasattr(t, "is_contiguous") and not t.is_contiguous():
        t = t.contiguous()
    return t


def dense_capsule(t):
    return capsule(dense(t))


def capsules(kw):
    """A dict of native keyword arguments with every tensor as a DLPack capsule."""
    return {k: capsule(v) for k, v in kw.items()}


# ---- integers -----------------------------------------------------------------------------------

def int_list(v):
    """None, an int, a list / tuple or a tensor / array of lengths -> None or a list of ints."""
    if v is None:
        return None
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, int):
        return [v]
    return [int(x) for x in v]


def int64_tensor(v):
    """Tensor-valued integer arguments (padding sizes, a prefix length, lengths) also accept an
    int or a list: those become an int64 tensor; None and tensors (or arrays) pass as they are."""
    if v is None or hasattr(v, "__dlpack__"):
        return v
    return torch.tensor([int(x) for x in (v if isinstance(v, (list, tuple)) else [v])],
                        dtype=torch.int64)


def lengths(v):
    """A lengths argument (a tensor, a list or an int) as a dense tensor, or None."""
    return dense(int64_tensor(v))


# ---- outputs ------------------------------------------------------------------------------------

def alloc_output(sizes, dtype_name, name):
    """The output allocator of the native *_call functions: an uninitialized tensor (the library
    writes every element) and its DLPack capsule, through which the library writes it."""
    t = torch.empty(sizes, dtype=torch_dtype(dtype_name))
    return t, torch.utils.dlpack.to_dlpack(t)


def alloc_output_lse_zeroed(sizes, dtype_name, name):
    """alloc_output, but softmax_lse starts zeroed: operators that leave the lse placeholder
    unwritten when it is not asked for (return_softmax_lse=False) return a 0."""
    if name != "softmax_lse":
        return alloc_output(sizes, dtype_name, name)
    t = torch.zeros(sizes, dtype=torch_dtype(dtype_name))
    return t, torch.utils.dlpack.to_dlpack(t)


# ---- eager or dispatcher ------------------------------------------------------------------------

def traced(*tensors) -> bool:
    """Whether a call must go through the dispatcher (torch.ops.openfia.*): while torch.compile /
    export traces, while a TorchDispatchMode is active (FakeTensorMode, FlopCounterMode, a user's
    logging mode: they see the op), or for tensors the native call cannot read (fake, functional
    or other subclasses, meta or other devices; the caller passes its leading tensors, which fake
    and meta modes make alike). Plain CPU tensors in eager mode take the direct native call: the
    dispatcher's argument conversion costs ~30-40 us, about as much as a short decode."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return True
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or t.device.type != "cpu"):
            return True
    return False


def keyword_defaults(fn):
    """{name: default} of fn's keyword-only parameters (an operator's defaults, in one place)."""
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}
