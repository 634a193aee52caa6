"""The package without torch or a GPU: import, the C++ API's views, and errors as Python
exceptions carrying the C++ message."""

import subprocess
import sys

import pytest

import gemmkit
from gemmkit import DType, TensorView


def test_import_leaves_torch_alone():
    code = "import sys, gemmkit; assert 'torch' not in sys.modules, 'import gemmkit imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_misuse_raises_value_error_naming_the_argument():
    a = TensorView.matrix(0x1000, DType.bf16, 4, 3, 3, 1)
    b = TensorView.matrix(0x2000, DType.bf16, 5, 2, 2, 1)  # 5 rows where A has K = 3
    d = TensorView.matrix(0x3000, DType.bf16, 4, 2, 2, 1)
    with pytest.raises(ValueError, match=r"^B: shape \[5, 2\] has 5 rows but A \[4, 3\] has K = 3"):
        gemmkit.gemm(a, b, d)
    with pytest.raises(ValueError, match=r"^options.c: beta is 0.5.* but no C was given"):
        gemmkit.gemm(a, TensorView.matrix(0x2000, DType.bf16, 3, 2, 2, 1), d, beta=0.5)


def test_pointers_that_are_not_device_memory_are_refused():
    a = TensorView.matrix(0x1000, DType.bf16, 4, 3, 3, 1)
    b = TensorView.matrix(0x2000, DType.bf16, 3, 2, 2, 1)
    d = TensorView.matrix(0x3000, DType.bf16, 4, 2, 2, 1)
    # Without a GPU the device lookup fails first (RuntimeError); with one, D's pointer, the
    # first checked, is refused (ValueError). Either way nothing runs.
    with pytest.raises((RuntimeError, ValueError)) as error:
        gemmkit.gemm(a, b, d)
    if error.type is RuntimeError:
        assert str(error.value).startswith("no CUDA device")
    else:
        assert str(error.value) == "D: pointer 0x3000 is not device memory; expected device memory"
