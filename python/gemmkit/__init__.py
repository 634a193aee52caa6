"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

The functions listed below under "Functions on torch tensors" take torch tensors (or any CUDA
array with __dlpack__) on the GPU with any strides, and run on the tensors' device and its current
stream. They are also torch custom operators, torch.ops.gemmkit.*, which torch.compile traces, CUDA
graphs capture and autograd differentiates. torch is the caller's: `import gemmkit` does not import
it. The first use of one of those functions does (looking one up is enough, also while
torch.compile traces), and registers the operators; so does `import gemmkit` where torch is already
loaded. Where torch is not installed they are still there, and calling one raises
ModuleNotFoundError saying how to get it (`pip install 'gemmkit[torch]'`). gemmkit.nn holds
torch.nn modules on these kernels (gemmkit.nn.Linear; importing it needs torch).
`gemm`, `quantize_views`, `TensorView`, `DType`, `ScaleMode` and the tuning mode are the C++ API
itself, with device pointers as integers, and need no torch. `__version__` and `__git_commit__`
are the C++ library's.
"""

import sys

from . import _gemmkit
from ._gemmkit import DType, ScaleMode, TensorView, TuningMode, gemm, set_tuning_mode, tuning_mode
from ._gemmkit import quantize as quantize_views

__version__ = _gemmkit.version()
__git_commit__ = _gemmkit.git_commit()  # "" where the library was not built from a git checkout

# The torch functions (gemmkit._torch) and what each computes, for help() with or without torch.
_TORCH_FUNCTIONS = {
    "addmm": "beta * input + alpha * mat1 @ mat2, as torch.addmm",
    "bmm": "a batch of products, [B, M, K] @ [B, K, N]; a 2-D operand is shared",
    "enable_compile_fusion": "torch.compile runs products and the elementwise work after them as one gemmkit call",
    "grouped_int4_mm": "int4_mm per group (MoE expert) in one launch: x's groups of rows, int4 weights [G, N, K/2]",
    "grouped_mm": "one product per group (MoE expert) in one launch, as torch._grouped_mm",
    "grouped_mxfp4_mm": "mxfp4_mm per group (MoE expert) in one launch: x's groups of rows, weights [G, N, K/2]",
    "grouped_swiglu_mm": "the MoE up-projection: swiglu_mm per expert's rows, one grouped dual GEMM",
    "int4_from_awq": "an AWQ checkpoint's qweight, qzeros, scales as int4_mm's (qweight, scales, zeros)",
    "int4_from_gptq": "a GPTQ checkpoint's qweight, qzeros, scales as int4_mm's (qweight, scales, zeros or None)",
    "int4_mm": "x @ W.T for int4 weights W [N, K] as [N, K/2] bytes, group scales (and zero points)",
    "linear": "input @ weight.T + bias, as torch.nn.functional.linear",
    "mm": "alpha * a @ b + beta * c, a [M, K] and b [K, N] of bfloat16 or float16",
    "mxfp4_from_gpt_oss": "gpt-oss's MXFP4 blocks and scales as mxfp4_mm's (weight, scales), read without a copy",
    "mxfp4_mm": "x @ W.T for MXFP4 weights W [N, K] as [N, K/2] bytes, e8m0 scales per 32 of K",
    "quantize": "x in FP8, a scale per block (tensor, row, 1x128, 128x128, mx): (q, scales)",
    "quantize_int4": "weights W [N, K] to int4_mm's (qweight, scales, zeros or None), GPTQ or AWQ rounding",
    "quantize_mxfp4": "weights W [N, K] to mxfp4_mm's (weight, scales), OCP MX rounding",
    "scaled_grouped_mm": "grouped_mm of FP8 inputs with their scales, as torch._scaled_grouped_mm",
    "scaled_grouped_swiglu_mm": "grouped_swiglu_mm of FP8 inputs with their scales (MoE up-projection)",
    "scaled_mm": "the FP8 product (a * scales) @ (b * scales); scales per tensor, row, block, mx",
    "scaled_swiglu_mm": "swiglu_mm of FP8 inputs with their scales, as scaled_mm takes them",
    "swiglu_mm": "silu(x @ gate.T) * (x @ up.T) as one dual GEMM (SwiGLU's up-projection)",
}
_WIDTH = max(map(len, _TORCH_FUNCTIONS))
__doc__ = (__doc__ or "") + "\nFunctions on torch tensors (help(gemmkit.NAME) for the details):\n" + "".join(
    f"  {name:<{_WIDTH}} {summary}\n" for name, summary in _TORCH_FUNCTIONS.items())
__all__ = ["DType", "ScaleMode", "TensorView", "TuningMode", "gemm", "quantize_views", "set_tuning_mode",
           "tuning_mode", *_TORCH_FUNCTIONS]


def _load_torch(user):
    """gemmkit._torch (importing torch), or, where torch is not installed, a ModuleNotFoundError
    telling that `user` needs it and how to install it."""
    try:
        from . import _torch
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        raise ModuleNotFoundError(f"{user} needs torch, which is not installed: pip install 'gemmkit[torch]' "
                                  "(torch >= 2.11)", name="torch") from None
    return _torch


def _without_torch(name):
    """What gemmkit.`name` is where torch is not installed: found by hasattr, dir and help, and
    raising _load_torch's error when called."""
    def function(*args, **kwargs):
        return getattr(_load_torch(f"gemmkit.{name}"), name)(*args, **kwargs)
    function.__name__ = function.__qualname__ = name
    function.__doc__ = (f"{_TORCH_FUNCTIONS[name]}.\n\n"
                        "Needs torch, which is not installed: pip install 'gemmkit[torch]'.")
    return function


def __getattr__(name):
    """The torch functions, from gemmkit._torch, imported (with torch) on first use."""
    if name not in _TORCH_FUNCTIONS:
        raise AttributeError(f"module 'gemmkit' has no attribute {name!r}")
    try:
        _torch = _load_torch(f"gemmkit.{name}")
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        return _without_torch(name)  # not kept: a later look-up tries torch again
    for function in _TORCH_FUNCTIONS:  # from now on plain attributes, found without this call
        globals()[function] = getattr(_torch, function)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_TORCH_FUNCTIONS))


if sys.modules.get("torch") is not None:  # register torch.ops.gemmkit now, so a traced program finds them
    from . import _torch  # noqa: F401
