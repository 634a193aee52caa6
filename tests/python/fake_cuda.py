"""Empty CUDA tensors for the torch tests without a GPU, made inside the `fake` fixture's mode
(conftest.py). Imported after pytest.importorskip("torch"), which each test file makes itself."""

import torch


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


def row_minor(scales):
    """Whether 1x128 block scales lie as gemmkit's quantize and e4m3 outputs lay them out, and as
    torch's _scaled_mm and gemmkit's TMA kernel read them: rows contiguous, the leading dimension
    a multiple of 4 (16 bytes) and at least the rows."""
    return scales.stride(-2) == 1 and scales.stride(-1) % 4 == 0 and scales.stride(-1) >= scales.shape[-2]
