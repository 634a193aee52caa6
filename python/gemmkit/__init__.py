"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

`gemm`, `TensorView` and `DType` are the C++ API itself (device pointers as integers).
"""

from ._gemmkit import DType, TensorView, gemm

__all__ = ["DType", "TensorView", "gemm"]
