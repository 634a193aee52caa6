"""For the torch tests without a GPU: empty CUDA tensors, made inside the `fake` fixture's mode
(conftest.py), and launches on CPU tensors that reach gemmkit's checks. Imported after
pytest.importorskip("torch"), which each test file makes itself."""

import pytest
import torch

# How gemmkit refuses a launch where there is no GPU to run it on.
DEVICE_REFUSALS = ("no NVIDIA driver found", "no CUDA device", "the NVIDIA driver supports")


def on_stream_zero(monkeypatch):
    """Launches from CPU tensors take stream 0 (torch without CUDA has none to give), so that they
    reach gemmkit's checks, which refuse CPU memory only after every shape, dtype and stride."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0, raising=False)


def refused_for_memory_alone(call):
    """call() reaches gemmkit and gets past its checks of the views: it is refused for the CPU
    memory alone (without a GPU: for the missing device, RuntimeError)."""
    with pytest.raises((RuntimeError, ValueError)) as error:
        call()
    text = str(error.value)
    assert text.startswith(DEVICE_REFUSALS) or "is not device memory" in text, text


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


def row_minor(scales):
    """Whether 1x128 block scales lie as gemmkit's quantize and e4m3 outputs lay them out, and as
    torch's _scaled_mm and gemmkit's TMA kernel read them: rows contiguous, the leading dimension
    a multiple of 4 (16 bytes) and at least the rows."""
    return scales.stride(-2) == 1 and scales.stride(-1) % 4 == 0 and scales.stride(-1) >= scales.shape[-2]
