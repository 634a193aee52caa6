"""Fixtures the test files share. torch is imported inside them, so that the files that need no
torch still run where it is not installed."""

import pytest


@pytest.fixture
def fake():
    """A fake tensor mode (no memory, no kernels), as torch.compile traces in."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        yield mode


@pytest.fixture
def cpu_kernels():
    """gemmkit's operators with CPU kernels (cpu_stand_ins.py) for the duration of a test."""
    from cpu_stand_ins import STAND_INS, registered_on_cpu
    yield from registered_on_cpu(STAND_INS)
