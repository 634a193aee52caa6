"""Empty CUDA tensors for the torch tests without a GPU, made inside the `fake` fixture's mode
(conftest.py). Imported after pytest.importorskip("torch"), which each test file makes itself."""

import torch


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)
