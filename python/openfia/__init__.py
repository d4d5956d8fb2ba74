"""openfia: Huawei Ascend CANN attention operators on the CPU, with torch_npu's Python API.

    import openfia
    out, lse = openfia.npu_fused_infer_attention_score(q, k, v, num_heads=32,
                                                       input_layout="BNSD", scale=0.088)

Tensors are CPU torch tensors (any strides); outputs are new contiguous tensors. Every invalid
call raises openfia.OpenfiaError (a ValueError) whose message is the C++ library's. The same
operators are registered as torch.ops.openfia.* (torch.compile works), and patch_torch_npu()
makes torch_npu.npu_fused_infer_attention_score (and the other operators' upstream names,
torch.ops.npu.* / torch.ops.custom.* included) run openfia. `python -m openfia --help` lists
the command line (run Ascend scripts unchanged, benchmark, show this machine's settings).

Modules: fia, kvqsfa, sas (the operators), ifa, pfa, fia_v2 (npu_incre_flash_attention,
npu_prompt_flash_attention and npu_fused_infer_attention_score_v2: front ends over fia), attention_state and ring (merging partial results,
sequence and KV-cache parallelism), quant (the quantized byte formats), torch_ops (torch.library
registration), bench (the benchmark). torch is optional at import time: the runtime settings
work without it.
"""
from __future__ import annotations

from . import _openfia
from ._openfia import OpenfiaError, OpenfiaResourceError, OpenfiaTypeError
from .fia import fia_output_spec, npu_fused_infer_attention_score
from .fia_v2 import npu_fused_infer_attention_score_v2
from .ifa import npu_incre_flash_attention
from .pfa import npu_prompt_flash_attention

__all__ = [
    "OpenfiaError",
    "OpenfiaTypeError",
    "OpenfiaResourceError",
    "npu_fused_infer_attention_score",
    "npu_fused_infer_attention_score_v2",
    "npu_incre_flash_attention",
    "npu_prompt_flash_attention",
    "npu_kv_quant_sparse_flash_attention",
    "patch_torch_npu",
    "set_impl",
    "get_impl",
    "set_num_threads",
    "get_num_threads",
    "set_simd_cap",
    "simd_target",
    "set_kernel",
    "get_kernel",
    "set_npu_strict",
    "get_npu_strict",
    "available_kernels",
    "version",
    "fia_output_spec",
]

__version__ = _openfia.version()


# ---- runtime settings -------------------------------------------------------------------------

def set_impl(impl: str) -> None:
    """Selects the implementation: "ref" (fp64 reference), "engine" (fast engine; an unsupported
    call is an error) or "auto" (engine where it supports the call, else the reference)."""
    _openfia.set_impl(impl)


def get_impl() -> str:
    return _openfia.get_impl()


def set_num_threads(n: int) -> None:
    """Worker threads of the engine, 1..1024; results do not depend on it. Any other value (0,
    100000, 3.7) is an OpenfiaError naming the accepted range."""
    _openfia.set_num_threads(n)


def get_num_threads() -> int:
    return _openfia.get_num_threads()


def set_simd_cap(target: str) -> None:
    """Highest SIMD target the engine may use ("scalar", "avx2", "avx512", ...)."""
    _openfia.set_simd_cap(target)


def simd_target() -> str:
    """The SIMD target in effect."""
    return _openfia.simd_target()


def set_kernel(name: str) -> None:
    """Forces one attention kernel for every work item ("" = the target's kernel list, the
    default; also OPENFIA_KERNEL). The name must be one of available_kernels(); a call with an
    item the kernel does not support then fails with an error naming why."""
    _openfia.set_kernel(name)


def get_kernel() -> str:
    """The forced kernel, "" when none."""
    return _openfia.get_kernel()


def available_kernels() -> list:
    """The attention kernels compiled into this build whose instructions this CPU runs."""
    return list(_openfia.available_kernels())


def set_npu_strict(on: bool) -> None:
    """NPU-strict mode (default off; also OPENFIA_NPU_STRICT=1): every NPU hardware limit openfia
    relaxes (any D, any block_size, head ratios over 64, no B/N/S limits, float32, any cache form
    with any layout, ...; each operator's documentation lists them) is enforced with the NPU's
    rule, so a call the NPU would reject raises OpenfiaError (code "unsupported") naming the
    argument, the rule with its product line, and the value."""
    _openfia.set_npu_strict(on)


def get_npu_strict() -> bool:
    """Whether NPU-strict mode is on (an invalid OPENFIA_NPU_STRICT raises OpenfiaError)."""
    return _openfia.get_npu_strict()


def version() -> str:
    return _openfia.version()


# ---- Ascend code unchanged ----------------------------------------------------------------------

# The torch_npu functions patch_torch_npu() provides: {name: module of openfia that has it}.
TORCH_NPU_FUNCTIONS = {
    "npu_fused_infer_attention_score": "fia",
    "npu_fused_infer_attention_score_v2": "fia_v2",
    "npu_incre_flash_attention": "ifa",
    "npu_prompt_flash_attention": "pfa",
    "npu_kv_quant_sparse_flash_attention": "kvqsfa",
    "npu_sparse_attn_sharedkv": "sas",
    "npu_sparse_attn_sharedkv_metadata": "sas",
}


def patch_torch_npu():
    """Makes Ascend code run unchanged on a CPU: afterwards `import torch_npu` yields a module
    whose functions named in TORCH_NPU_FUNCTIONS (npu_fused_infer_attention_score and its _v2,
    npu_incre_flash_attention, npu_prompt_flash_attention,
    npu_kv_quant_sparse_flash_attention, npu_sparse_attn_sharedkv and
    npu_sparse_attn_sharedkv_metadata) are openfia's, and the operators run openfia on CPU
    tensors where upstream code calls them: torch.ops.npu.<each of the first six>,
    torch.ops.custom.npu_sparse_attn_sharedkv
    and torch.ops.custom.npu_sparse_attn_sharedkv_metadata (the CANN custom-op package's
    namespace). With a real torch_npu (or custom-op package) installed, its functions are
    replaced and a CPU kernel is added to its ops. Without one, the stand-in also gives
    Tensor.npu(), torch.npu and a torchair whose npu_backend compiles for the CPU (npu_shim.py),
    so the source documents' examples run unchanged (`python -m openfia run script.py`); any
    other torch_npu.X of the stand-in raises an AttributeError that names X and says openfia
    does not provide it. Returns the torch_npu module."""
    import importlib
    import sys
    import types

    from . import torch_ops

    mod = sys.modules.get("torch_npu")
    if mod is None:
        try:
            mod = importlib.import_module("torch_npu")
        except Exception:  # not installed (or unusable without an NPU): provide a stand-in
            mod = types.ModuleType("torch_npu")
            mod.__doc__ = "openfia stand-in for torch_npu (openfia.patch_torch_npu())"
            mod.__openfia_stand_in__ = True
            sys.modules["torch_npu"] = mod
    if getattr(mod, "__openfia_stand_in__", False):
        # No NPU software at all: the script-side calls around the operators too (Tensor.npu,
        # torch.npu, torchair's graph mode), see npu_shim.py.
        from . import npu_shim

        npu_shim.install_device_shims(mod)
        npu_shim.install_torchair()
        npu_shim.install_missing_attribute_error(mod)
    for name, module in TORCH_NPU_FUNCTIONS.items():
        setattr(mod, name, getattr(importlib.import_module(f"{__name__}.{module}"), name))
    torch_ops.register_npu_namespace()
    return mod


# ---- the torch operators ------------------------------------------------------------------------

# Registers torch.ops.openfia.* at import when torch is present (torch stays optional).
try:
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised only without torch
    pass
else:
    from . import torch_ops  # noqa: F401
    from .attention_state import merge_attention_states
    from .kvqsfa import npu_kv_quant_sparse_flash_attention
    from .ring import ring_attention, sharded_kv_attention
    from .sas import (npu_sparse_attn_sharedkv, npu_sparse_attn_sharedkv_metadata,
                      verify_sparse_attn_sharedkv_metadata)
    __all__ += ["npu_sparse_attn_sharedkv", "npu_sparse_attn_sharedkv_metadata",
                "verify_sparse_attn_sharedkv_metadata", "merge_attention_states",
                "ring_attention", "sharded_kv_attention"]
