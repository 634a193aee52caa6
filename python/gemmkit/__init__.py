"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

`mm`, `bmm`, `addmm`, `scaled_mm`, `quantize` and the grouped (mixture-of-experts) products
`grouped_mm` and `scaled_grouped_mm` take torch tensors (or any CUDA array with __dlpack__) on
the GPU with any strides, and run on the tensors' device and its current stream.
They are also torch custom operators, torch.ops.gemmkit.*, which torch.compile traces, CUDA graphs
capture and autograd differentiates. torch is the caller's: `import gemmkit` does not import it.
The first use of one of those functions does (looking one up is enough, also while torch.compile
traces), and registers the operators; so does `import gemmkit` where torch is already loaded.
`gemm`, `quantize_views`, `TensorView`, `DType`, `ScaleMode` and the tuning mode are the C++ API
itself, with device pointers as integers, and need no torch (`pip install 'gemmkit[torch]'` brings
it). `__version__` and `__git_commit__` are the C++ library's.
"""

import sys

from . import _gemmkit
from ._gemmkit import DType, ScaleMode, TensorView, TuningMode, gemm, set_tuning_mode, tuning_mode
from ._gemmkit import quantize as quantize_views

__version__ = _gemmkit.version()
__git_commit__ = _gemmkit.git_commit()  # "" where the library was not built from a git checkout

_TORCH_FUNCTIONS = ("addmm", "bmm", "grouped_mm", "mm", "quantize", "scaled_grouped_mm", "scaled_mm")
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


def __getattr__(name):
    """The torch functions, from gemmkit._torch, imported (with torch) on first use."""
    if name not in _TORCH_FUNCTIONS:
        raise AttributeError(f"module 'gemmkit' has no attribute {name!r}")
    _torch = _load_torch(f"gemmkit.{name}")
    for function in _TORCH_FUNCTIONS:  # from now on plain attributes, found without this call
        globals()[function] = getattr(_torch, function)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_TORCH_FUNCTIONS))


if sys.modules.get("torch") is not None:  # register torch.ops.gemmkit now, so a traced program finds them
    from . import _torch  # noqa: F401
