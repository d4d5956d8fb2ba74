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
import numbers
import operator

from . import _openfia as lib
from ._openfia import OpenfiaError, OpenfiaResourceError, OpenfiaTypeError

try:
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None

__all__ = ["lib", "OpenfiaError", "OpenfiaTypeError", "OpenfiaResourceError", "error",
           "type_error", "capsule", "data", "dense", "dense_capsule", "capsules", "integer",
           "real", "boolean", "string", "int_list", "int64_tensor", "lengths", "torch_dtype",
           "alloc_output", "alloc_output_lse_zeroed", "traced", "one_device", "keyword_defaults"]

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

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


def error(op, argument, rule, actual, code="invalid_argument", cls=OpenfiaError):
    """An OpenfiaError raised by the Python side, worded and structured as the C++ library's:
    "<op>: argument '<argument>': <rule> (got <actual>)" with .argument, .rule, .actual, .code."""
    e = cls(f"{op}: argument '{argument}': {rule} (got {actual})")
    e.argument, e.rule, e.actual, e.code = argument, rule, str(actual), code
    return e


def type_error(op, argument, rule, actual):
    """error() for an argument of the wrong kind: an OpenfiaTypeError (also a TypeError)."""
    return error(op, argument, rule, actual, cls=OpenfiaTypeError)


def _kind(v):
    """'float 4.9', 'numpy.ndarray', 'str '8'': what a rejected argument is, briefly (never a
    whole array)."""
    t = type(v)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    if isinstance(v, (bool, int, float, str, bytes)):
        r = repr(v)
        return f"{name} {r[:57] + '...' if len(r) > 60 else r}"
    return name


# ---- tensors in ---------------------------------------------------------------------------------

def capsule(t):
    """A torch tensor as a DLPack capsule, anything else (None, a numpy array, a number) as is.
    The native module reads both; torch.utils.dlpack.to_dlpack costs ~0.4 us where the
    __dlpack__ protocol call nanobind makes for a tensor costs ~2.5 us, and a decode call passes
    4-8 tensors. A capsule is single-use: each one goes to exactly one native call."""
    if torch is not None and isinstance(t, torch.Tensor):
        return torch.utils.dlpack.to_dlpack(t)
    return t


def _check(t, op, name):
    """t is a CPU tensor (the native call's operands): else an OpenfiaTypeError (not a tensor)
    or an OpenfiaError (another device) naming the argument. The leading tensors decide the
    path (traced); this catches the others, on the native path only, where it costs nothing
    more than the conversion that follows."""
    if type(t) in _plain_types() and t.is_cpu:
        return
    if not isinstance(t, torch.Tensor):
        raise type_error(op, name, "must be a torch.Tensor", _kind(t))
    if not t.is_cpu:
        raise error(op, name, "must be on the CPU like the call's other tensors (a meta or "
                    "another device's tensor beside CPU tensors is taken only while tracing)",
                    str(t.device))


def data(t, op=None, name=None):
    """A tensor the library reads through its strides (no copy). DLPack cannot export a tensor
    that requires grad; the operators are inference-only, so the data is read as is. With `op`
    and `name` the tensor is checked first (_check)."""
    if t is None:
        return None
    if op is not None:
        _check(t, op, name)
    if getattr(t, "requires_grad", False):
        return t.detach()
    return t


def dense(t, op=None, name=None):
    """A tensor the library reads densely: detached, and a contiguous copy only of a view that
    is not contiguous (the C++ API follows the NPU, which rejects non-contiguous inputs; torch
    users routinely hold transposed or sliced views). In NPU-strict mode a caller's view (`op`
    given) passes as it is, so that the operator's rule (不支持非连续) refuses it as the NPU does."""
    t = data(t, op, name)
    if t is not None and hasattr(t, "is_contiguous") and not t.is_contiguous() and \
            (op is None or not lib.get_npu_strict()):
        t = t.contiguous()
    return t


def dense_capsule(t, op=None, name=None):
    return capsule(dense(t, op, name))


def capsules(kw):
    """A dict of native keyword arguments with every tensor as a DLPack capsule."""
    return {k: capsule(v) for k, v in kw.items()}


# ---- scalars, strictly: int(4.9) is 4 and bool("False") is True, so neither is used -------------

def integer(v, op, name):
    """An integer argument: an int (bool too, as torch's int arguments take it), a numpy integer
    or a one-element integer tensor (anything with __index__), within int64. A float (even 4.0)
    or a string is an OpenfiaTypeError naming the argument; an int outside int64 an OpenfiaError."""
    if isinstance(v, (float, str, bytes)):
        raise type_error(op, name, "must be an integer", _kind(v))
    try:
        i = operator.index(v)
    except TypeError:
        raise type_error(op, name, "must be an integer", _kind(v)) from None
    if not INT64_MIN <= i <= INT64_MAX:
        raise error(op, name, "must be an integer in [-2^63, 2^63-1]", i)
    return i


def real(v, op, name):
    """A float argument: an int, a float, a numpy number or a one-element real tensor."""
    if torch is not None and isinstance(v, torch.Tensor) and v.numel() == 1 and \
            not v.is_complex() and v.dtype != torch.bool:
        return float(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise type_error(op, name, "must be a real number", _kind(v))
    return float(v)


def boolean(v, op, name):
    """A bool argument: a bool, numpy.bool_ or a one-element bool tensor (not an int, not a
    string: bool("False") is True)."""
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return bool(v)
    if torch is not None and isinstance(v, torch.Tensor) and v.dtype == torch.bool and \
            v.numel() == 1:
        return bool(v)
    raise type_error(op, name, "must be a bool", _kind(v))


def string(v, op, name):
    if not isinstance(v, str):
        raise type_error(op, name, "must be a str", _kind(v))
    return v


def _int_entries(v, op, name):
    """The integers of a length list (a list / tuple, a tensor or an array): each entry as
    integer() takes it, so 7.9 and "8" are errors rather than 7 and 8."""
    if isinstance(v, (str, bytes)):
        raise type_error(op, name, "must be a list of integers", _kind(v))
    if hasattr(v, "tolist"):
        v = v.tolist()
        if not isinstance(v, list):  # a 0-d tensor / array
            v = [v]
    elif not isinstance(v, (list, tuple)):
        return [integer(v, op, name)]
    out = []
    for i, x in enumerate(v):
        if isinstance(x, (float, str, bytes)) or not hasattr(x, "__index__"):
            raise type_error(op, name, "entries must be integers", f"entry {i} = {_kind(x)}")
        out.append(integer(x, op, name))
    return out


def int_list(v, op, name):
    """None, an int, a list / tuple or a tensor / array of lengths -> None or a list of ints."""
    if v is None:
        return None
    return _int_entries(v, op, name)


def int64_tensor(v, op, name):
    """Tensor-valued integer arguments (padding sizes, a prefix length, lengths) also accept an
    int or a list: those become an int64 tensor; None and tensors pass as they are (their dtype
    is the library's to check); an array-like (numpy) becomes a tensor of its integers."""
    if v is None or (torch is not None and isinstance(v, torch.Tensor)):
        return v
    return torch.tensor(_int_entries(v, op, name), dtype=torch.int64)


def lengths(v, op, name):
    """A lengths argument (a tensor, a list or an int) as a dense tensor, or None."""
    return dense(int64_tensor(v, op, name))


# ---- outputs ------------------------------------------------------------------------------------

def _new_tensor(make, sizes, dtype_name, name):
    """make(sizes, dtype=...) for output `name`; the machine refusing the memory is an
    OpenfiaResourceError (also a MemoryError) naming the output and its size."""
    dtype = torch_dtype(dtype_name)
    try:
        return make(sizes, dtype=dtype)
    except (RuntimeError, MemoryError) as e:
        n = 1
        for s in sizes:
            n *= s
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        raise error("openfia", "memory", f"not enough memory for the output '{name}' "
                    f"{list(sizes)} {dtype_name}", f"{nbytes} bytes: {e}",
                    code="resource_exhausted", cls=OpenfiaResourceError) from None


def alloc_output(sizes, dtype_name, name):
    """The output allocator of the native *_call functions: an uninitialized tensor (the library
    writes every element) and its DLPack capsule, through which the library writes it."""
    t = _new_tensor(torch.empty, sizes, dtype_name, name)
    return t, torch.utils.dlpack.to_dlpack(t)


def alloc_output_lse_zeroed(sizes, dtype_name, name):
    """alloc_output, but softmax_lse starts zeroed: operators that leave the lse placeholder
    unwritten when it is not asked for (return_softmax_lse=False) return a 0."""
    if name != "softmax_lse":
        return alloc_output(sizes, dtype_name, name)
    t = _new_tensor(torch.zeros, sizes, dtype_name, name)
    return t, torch.utils.dlpack.to_dlpack(t)


# ---- eager or dispatcher ------------------------------------------------------------------------

# Tensor types the native call reads as they are (a Parameter is a plain tensor to it).
_PLAIN = ()


def _plain_types():
    global _PLAIN
    if not _PLAIN:
        _PLAIN = (torch.Tensor, torch.nn.Parameter)
    return _PLAIN


def _tensors(op, named):
    """[(name, tensor)] of every tensor of `named` ((name, value) pairs; a value may be None, a
    tensor or a list of tensors); anything else in a tensor argument is an OpenfiaTypeError
    naming it (a numpy array included: the operators take torch tensors, as torch_npu does)."""
    out = []
    for name, v in named:
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor):
                raise type_error(op, name, "must be a torch.Tensor", _kind(t))
            out.append((name, t))
    return out


def one_device(op, **tensors):
    """Every tensor argument on the device of the first one; else an OpenfiaError naming the
    first that is not (a meta query beside CPU keys, outside tracing, is a caller's error)."""
    ts = _tensors(op, tensors.items())
    for name, t in ts[1:]:
        if t.device != ts[0][1].device:
            raise error(op, name, f"must be on the device of '{ts[0][0]}' ({ts[0][1].device}): "
                        "tensors on different devices are not taken", str(t.device))
    return ts


def traced(op, **leading) -> bool:
    """Whether a call must go through the dispatcher (torch.ops.openfia.*): while torch.compile /
    export traces, while a TorchDispatchMode is active (FakeTensorMode, FlopCounterMode, a user's
    logging mode: they see the op), for tensors the native call cannot read (fake, functional or
    other subclasses, meta or other devices). The caller passes its leading tensors by name,
    which fake and meta modes make alike; they are checked here (a non-tensor is an
    OpenfiaTypeError, differing devices an OpenfiaError, naming the argument), the others where
    the native path converts them (_check) and in the fake kernels (one_device). Plain CPU
    tensors in eager mode take the direct native call: the dispatcher's argument conversion
    costs ~30-40 us, about as much as a short decode."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return True
    plain = _plain_types()
    for t in leading.values():
        if not (t is None or (type(t) in plain and t.is_cpu)):
            break
    else:
        return False  # the common case: plain CPU tensors
    ts = one_device(op, **leading)
    return any(type(t) not in plain or not t.is_cpu for _, t in ts)


def keyword_defaults(fn):
    """{name: default} of fn's keyword-only parameters (an operator's defaults, in one place)."""
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}
