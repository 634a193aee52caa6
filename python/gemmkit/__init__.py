"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

`mm`, `bmm`, `addmm`, `scaled_mm` and `quantize` take torch tensors (or any CUDA array with
__dlpack__) on the GPU with any strides, and run on the tensors' device and its current stream.
They are also torch custom operators, torch.ops.gemmkit.*, which torch.compile traces, CUDA graphs
capture and autograd differentiates. torch is the caller's: `import gemmkit` does not import it.
The first use of one of those functions does (looking one up is enough, also while torch.compile
traces), and registers the operators; so does `import gemmkit` where torch is already loaded.
`gemm`, `quantize_views`, `TensorView`, `DType`, `ScaleMode` and the tuning mode are the C++ API
itself, with device pointers as integers.
"""

import sys

from ._gemmkit import DType, ScaleMode, TensorView, TuningMode, gemm, set_tuning_mode, tuning_mode
from ._gemmkit import quantize as quantize_views

_TORCH_FUNCTIONS = ("addmm", "bmm", "mm", "quantize", "scaled_mm")
__all__ = ["DType", "ScaleMode", "TensorView", "TuningMode", "gemm", "quantize_views", "set_tuning_mode",
           "tuning_mode", *_TORCH_FUNCTIONS]


def __getattr__(name):
    """The torch functions, from gemmkit._torch, imported (with torch) on first use."""
    if name not in _TORCH_FUNCTIONS:
        raise AttributeError(f"module 'gemmkit' has no attribute {name!r}")
    from . import _torch

    for function in _TORCH_FUNCTIONS:  # from now on plain attributes, found without this call
        globals()[function] = getattr(_torch, function)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_TORCH_FUNCTIONS))


if "torch" in sys.modules:  # register torch.ops.gemmkit now, so a traced program finds them
    from . import _torch  # noqa: F401
