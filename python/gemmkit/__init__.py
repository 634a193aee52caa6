"""gemmkit: matrix-multiply kernels for NVIDIA Hopper GPUs (sm_90a), from Python.

`mm`, `bmm`, `addmm`, `scaled_mm` and `quantize` take torch tensors (or any CUDA array with
__dlpack__) on the GPU with any strides, and run on the tensors' device and its current stream.
They are also torch custom operators, torch.ops.gemmkit.*, which torch.compile traces, CUDA graphs
capture and autograd differentiates. torch is the caller's: `import gemmkit` does not import it;
the first call does, or this import where torch is already loaded.
`gemm`, `quantize_views`, `TensorView`, `DType`, `ScaleMode` and the tuning mode are the C++ API
itself, with device pointers as integers.
"""

import sys

from ._gemmkit import DType, ScaleMode, TensorView, TuningMode, gemm, set_tuning_mode, tuning_mode
from ._gemmkit import quantize as quantize_views
from ._torch import addmm, bmm, load_torch, mm, quantize, scaled_mm

if "torch" in sys.modules:  # register torch.ops.gemmkit now, so a traced program finds them
    load_torch()

__all__ = ["DType", "ScaleMode", "TensorView", "TuningMode", "addmm", "bmm", "gemm", "load_torch", "mm",
           "quantize", "quantize_views", "scaled_mm", "set_tuning_mode", "tuning_mode"]
