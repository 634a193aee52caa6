"""The reference of the products with 4-bit weights (test_lowbit.py's int4_mm and mxfp4_mm,
test_grouped_lowbit.py's grouped_int4_mm and grouped_mxfp4_mm): the weights dequantised exactly,
in double, and the bounds the products are held to, as tests/gpu/lowbit_test.cpp's reference
(src/reference/compare.h): one rounding of each weight to x's type (2^-8 of sum |x||w| for
bfloat16, 2^-11 for float16) and 1e-5 of it for the float32 sums, plus two roundings of the
output; FP8 activations (W4A8, their scales float32 or mx exponents) within the FP8 products'
bound (gpu_reference.py's FP8_SUMS, 2^-10 of sum |x||w|) and two roundings of the output.
Imported after pytest.importorskip("torch"), which each test file makes itself."""

import torch

from gpu_reference import FP8_SUMS, HALF_ULP

U8 = torch.uint8
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def codes_of(w, k):
    """The 4-bit codes [N, K] of weights stored as bytes w [N, ceil(K/2)] (uint8 or float4), the
    even k in the low nibble."""
    b = w.view(U8)
    return torch.stack((b & 15, b >> 4), -1).flatten(1)[:, :k]


def int4_weights(qweight, scales, zeros, group, k):
    """W [N, K] in double: (q - zero) * scale, zero 8 without zeros."""
    index = torch.arange(k, device=qweight.device) // group
    s = scales.double()[index].t()
    z = 8.0 if zeros is None else zeros.double()[index].t()
    return (codes_of(qweight, k).double() - z) * s


def mxfp4_weights(weight, scales, k):
    """W [N, K] in double: the e2m1 value times 2^(e - 127), e the exponent of its block of 32."""
    values = torch.tensor(FP4_VALUES, dtype=torch.float64, device=weight.device)[codes_of(weight, k).long()]
    exponents = scales.view(U8).double()[:, torch.arange(k, device=weight.device) // 32]
    return values * torch.exp2(exponents - 127)


def scaled_x(x, x_scale):
    """e4m3 x [M, K] times its scales, in double: float32 ones, one (any shape of one element), one
    a row ([M, 1] or [M]) or one per 128 of K a row ([M, ceil(K/128)]); or mx exponents e
    (float8_e8m0fnu or uint8) [M, ceil(K/32)], each 2^(e - 127) for 32 of K of a row."""
    if x_scale.dtype in (torch.float8_e8m0fnu, U8):
        exponents = x_scale.view(U8).double()[:, torch.arange(x.size(1), device=x.device) // 32]
        return x.double() * torch.exp2(exponents - 127)
    xd, s = x.double(), x_scale.double()
    if s.numel() == 1:
        return xd * s.reshape(())
    if s.dim() == 1:
        return xd * s[:, None]
    if s.size(1) == 1:
        return xd * s
    return xd * s.repeat_interleave(128, 1)[:, :x.size(1)]


def expect_close_fp8(d, xs, w):
    """d [M, N] against xs [M, K] (x * x_scale, double) @ w.T in double: FP8 sums (FP8_SUMS of sum
    |xs||w|) and two roundings of the output."""
    ref, total = xs @ w.t(), xs.abs() @ w.abs().t()
    bound = total * FP8_SUMS + ref.abs() * 2 * HALF_ULP[d.dtype]
    assert d.shape == ref.shape
    assert torch.isfinite(d).all(), "non-finite outputs"
    error = (d.double() - ref).abs()
    assert (error <= bound + 1e-30).all(), f"max error {error.max().item()}, over its bound by {(error - bound).max()}"


def expect_close(d, x, w):
    """d [..., N] against x [..., K] @ w.T in double, x bfloat16 or float16: one rounding of each
    weight to x's type and float32 sums (HALF_ULP[x's type] + 1e-5 of sum |x||w|), and two
    roundings of the output."""
    xd = x.double()
    ref, total = xd @ w.t(), xd.abs() @ w.abs().t()
    bound = total * (HALF_ULP[x.dtype] + 1e-5) + ref.abs() * 2 * HALF_ULP[d.dtype]
    assert d.shape == ref.shape
    assert torch.isfinite(d).all(), "non-finite outputs"
    error = (d.double() - ref).abs()
    assert (error <= bound + 1e-30).all(), f"max error {error.max().item()}, over its bound by {(error - bound).max()}"
