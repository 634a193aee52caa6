"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

`mm`, `bmm` and `addmm` take torch tensors on the GPU with any strides (transposed views and
slices run without copies) and run on the tensors' device and its current stream. torch is the
caller's: it is imported when one of them is first called, not by `import gemmkit`.
`gemm`, `TensorView` and `DType` are the C++ API itself (device pointers as integers).
"""

from ._gemmkit import DType, TensorView, gemm
from ._torch import addmm, bmm, mm

__all__ = ["DType", "TensorView", "addmm", "bmm", "gemm", "mm"]
