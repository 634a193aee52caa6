"""gemmkit.grouped_int4_mm and gemmkit.grouped_mxfp4_mm: grouped products (mixture-of-experts
layers) with 4-bit weights, the experts' W [G, N, K] stored as [G, N, ceil(K/2)] bytes, over
grouped_mm's contiguous (offs) and masked (counts) groups. Without a GPU: the binding's view of
the experts' bytes (G x K x N nibbles) and of masked MXFP4 activations (G x max_m x K codes),
the launch's arguments as the C++ checks see them (CPU
tensors, refused only for their memory; W4A8's 1x128 blocks and mx exponents skipped, saying
so, where the library's grouped_gemm takes none yet) and as the launch hands them over (the
mode and the view of x_scale), the operator's fake implementation under fake CUDA tensors
(output shapes, dtypes, x_scale's modes, one traced operator; with a fused epilogue, its
tensors' shapes and one grouped_w4_mm_epilogue), the argument errors, the backward's refusal,
and the operator under opcheck with a double-precision CPU stand-in. On an sm_90 GPU (those
tests skip, saying so, elsewhere): each group against the double-precision product of its
weights dequantised exactly, within the bounds of test_lowbit.py (lowbit_reference.py), W4A16
and W4A8 (x's scales one, one a row, 1x128 blocks, or mx exponents against weights in groups of
32 of K: not yet run on a GPU) and FP4 x FP4 (MXFP4 activations, x's codes and exponents
dequantised exactly, within the FP8 bound: not yet run on a GPU), over groups that start off
every multiple of 4; outputs
NaN-filled first, so that rows no group owns are seen to stay untouched; a fused epilogue (a
per-expert bias, a router weight, an auxiliary output, a reduction) against the epilogue in
double on each group's product (not yet run on a GPU); then torch.compile, CUDA graphs replayed
with new sizes, and autograd's refusal. Needs torch; skips, saying so, without it."""

import functools

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import DEVICE_REFUSALS, cuda, on_stream_zero, refused_for_memory_alone  # noqa: E402
from gpu_reference import HALF_ULP, capture, expect_near, nan_like, offs_of, spans  # noqa: E402
from lowbit_reference import (expect_close, expect_close_fp8, int4_weights, mxfp4_weights,  # noqa: E402
                              scaled_x)

import gemmkit  # noqa: E402
from gemmkit import DType, _gemmkit, _torch  # noqa: E402

BF16, F16, F32, F64, U8 = torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.uint8
E4M3, E8M0, I32, I64 = torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.int32, torch.int64
FLOAT4 = getattr(torch, "float4_e2m1fn_x2", None)

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
gpu = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")


def test_the_functions_are_the_packages():
    for name in ("grouped_int4_mm", "grouped_mxfp4_mm"):
        assert getattr(gemmkit, name) is getattr(_torch, name) and name in gemmkit.__all__
    for op in ("grouped_w4_mm", "grouped_w4_mm_out", "grouped_w4_mm_epilogue"):
        assert hasattr(torch.ops.gemmkit, op), op


def test_the_binding_views_the_experts_bytes_as_g_x_k_x_n_nibbles():
    storage = torch.zeros(3, 10, 40, dtype=U8)
    w = storage[:, :, 3:36]  # G = 3, N = 10, 33 bytes a row, rows 40 bytes apart, experts 400
    v = _gemmkit.packed_weight_view_of(w, DType.u4, 65, "qweight")
    assert (v.data, v.dtype, v.shape, v.strides) == (w.data_ptr(), DType.u4, [3, 65, 10], [800, 1, 80])
    v = _gemmkit.packed_weight_view_of(w[::2], DType.e2m1, 66, "weight")  # every other expert
    assert (v.dtype, v.shape, v.strides) == (DType.e2m1, [2, 66, 10], [1600, 1, 80])
    with pytest.raises(ValueError, match=r"^weight: shape \[3, 10, 33\]; expected \[G, N, ceil\(K/2\)\] = "
                                         r"\[3, 10, 34\] bytes for K = 67$"):
        _gemmkit.packed_weight_view_of(w, DType.e2m1, 67, "weight")
    with pytest.raises(ValueError, match=r"^qweight: strides \[330, 1, 10\]; expected the bytes along K contiguous"):
        _gemmkit.packed_weight_view_of(torch.zeros(3, 33, 10, dtype=U8).transpose(1, 2), DType.u4, 66, "qweight")
    with pytest.raises(ValueError, match=r"^qweight: 4 dimensions; expected 2, \[N, ceil\(K/2\)\] bytes, or 3"):
        _gemmkit.packed_weight_view_of(storage.view(3, 2, 5, 40), DType.u4, 80, "qweight")
    # The grouped launch takes the experts' bytes alone, not one matrix's.
    x, out = torch.zeros(4, 66, dtype=BF16), torch.zeros(4, 10, dtype=BF16)
    with pytest.raises(ValueError, match=r"^qweight: 2 dimensions; expected 3, \[G, N, ceil\(K/2\)\] bytes$"):
        _gemmkit.grouped_gemm_4bit_tensors(x, w[0], out, DType.u4, torch.zeros(1, 1, 10, dtype=BF16), None, 128,
                                           torch.tensor([4], dtype=I32), _gemmkit.GroupLayout.contiguous, False, 0)


@pytest.fixture
def cpu_launch(monkeypatch):
    """_torch.launch_grouped_w4 on CPU tensors, on stream 0."""
    on_stream_zero(monkeypatch)
    return _torch.launch_grouped_w4


def test_the_launch_passes_the_views_the_c_api_takes(cpu_launch):
    groups, n, k = 4, 64, 4160  # 32.5 groups of 128
    x, offs = torch.zeros(100, k, dtype=BF16), torch.tensor([0, 30, 30, 90], dtype=I32)
    out = torch.zeros(100, n, dtype=F32)
    qweight = torch.zeros(groups, n, 2096, dtype=U8)[:, :, :k // 2]  # rows padded to 2096 bytes
    scales = torch.zeros(groups, 33, n, dtype=BF16)
    zeros = torch.zeros(groups, n, 33, dtype=BF16).transpose(1, 2)  # any strides
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales, zeros, offs, "contiguous", "int4", 128, out, 0))
    # Masked groups, counts int64; an SM budget.
    xm, outm = torch.zeros(groups, 16, k, dtype=F16), torch.zeros(groups, 16, n, dtype=F16)
    refused_for_memory_alone(lambda: cpu_launch(xm, qweight, scales.half(), None, offs.long(), "masked", "int4", 128,
                                                outm, 8))
    # MXFP4: exponents [G, N, ceil(K/32)] pass transposed, [G, ceil(K/32), N], uint8 read as e8m0.
    e = torch.zeros(groups, n, 130, dtype=U8)
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, e, None, offs, "contiguous", "mxfp4", 32, out, 0))
    refused_for_memory_alone(lambda: cpu_launch(xm, qweight, e.view(E8M0), None, offs, "masked", "mxfp4", 32, outm, 0))
    # A fused epilogue: a per-expert bias [G, 1, N] and a token's router weight [M_total, 1] (1-D vectors are
    # _torch's to view), masked [G, max_m, 1]; a bias one column short refused by name.
    bias, route = torch.zeros(groups, 1, n, dtype=BF16), torch.zeros(100, 1, dtype=F32)
    pairs = [("bias", bias, "n"), ("route", route, "m")]
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales, zeros, offs, "contiguous", "int4", 128, out, 0,
                                                None, "silu(acc + bias[n]) * route[m]", pairs))
    pairs = [("bias", bias, "n"), ("route", torch.zeros(groups, 16, 1, dtype=F32), "m")]
    refused_for_memory_alone(lambda: cpu_launch(xm, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0, None,
                                                "silu(acc + bias[n]) * route[m]", pairs))
    with pytest.raises(ValueError, match=r'^options.epilogue.tensors\["bias"\]: shape \[4, 1, 63\] for bias\[n\]'):
        cpu_launch(x, qweight, scales, zeros, offs, "contiguous", "int4", 128, out, 0, None, "acc + bias[n]",
                   [("bias", bias[..., 1:], "n")])
    # W4A8: e4m3 x with one scale, or one a row ([M_total, 1], [M_total]; masked [G, max_m], given its column back).
    x8, xm8, bf = x.to(E4M3), xm.to(E4M3), torch.zeros(groups, 33, n, dtype=BF16)
    for x_scale in (torch.ones(()), torch.ones(1, 1, 1), torch.ones(100, 1), torch.ones(100)):
        refused_for_memory_alone(lambda: cpu_launch(x8, qweight, bf, bf, offs, "contiguous", "int4", 128, out, 0,
                                                    x_scale))
    for x_scale in (torch.ones(()), torch.ones(groups, 16), torch.ones(groups, 16, 1)):
        refused_for_memory_alone(lambda: cpu_launch(xm8, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0,
                                                    x_scale))


@pytest.fixture
def launched(monkeypatch):
    """The arguments each _torch.launch_grouped_w4 hands the binding (grouped_gemm_4bit_tensors,
    replaced by a recorder), on CPU tensors and stream 0."""
    on_stream_zero(monkeypatch)
    calls = []
    monkeypatch.setattr(_torch._C, "grouped_gemm_4bit_tensors", lambda *args: calls.append(args))
    return calls


def w4a8_operands(groups, n, k, group):
    """CPU x [100, K] and masked xm [G, 16, K] of e4m3, offs, outputs and u4 weights with bfloat16
    scales in groups of `group` (zero points alike) and MXFP4 weights' uint8 exponents."""
    x, xm = torch.zeros(100, k, dtype=E4M3), torch.zeros(groups, 16, k, dtype=E4M3)
    offs, out, outm = torch.tensor([0, 30, 30, 90], dtype=I32), torch.zeros(100, n), torch.zeros(groups, 16, n)
    qweight, scales = torch.zeros(groups, n, k // 2, dtype=U8), torch.zeros(groups, -(-k // group), n, dtype=BF16)
    return x, xm, offs, out, outm, qweight, scales, torch.zeros(groups, n, -(-k // 32), dtype=U8)


def test_the_w4a8_launch_passes_blocks_and_mx_exponents_as_a_scales(launched):
    groups, n, k = 4, 64, 4160  # 33 blocks of 128, 130 of 32
    x, xm, offs, out, outm, qweight, scales, e = w4a8_operands(groups, n, k, 128)
    scales32 = torch.zeros(groups, 130, n, dtype=BF16)
    block, block_m = torch.ones(33, 100).t(), torch.ones(groups, 16, 33)  # M-contiguous as quantize() lays them
    mx_u8, mx_m = torch.zeros(100, 130, dtype=U8), torch.zeros(groups, 16, 130, dtype=U8).view(E8M0)
    cases = [  # 1x128 blocks as they are (float32, block); mx exponents read as float8_e8m0fnu (mx)
        ((x, qweight, scales, scales, offs, "contiguous", "int4", 128, out, 0, block), _gemmkit.ScaleMode.block, block),
        ((xm, qweight, scales, None, offs, "masked", "int4", 128, outm, 0, block_m), _gemmkit.ScaleMode.block, block_m),
        ((x, qweight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, block), _gemmkit.ScaleMode.block, block),
        ((x, qweight, scales32, None, offs, "contiguous", "int4", 32, out, 0, mx_u8), _gemmkit.ScaleMode.mx, mx_u8),
        ((xm, qweight, scales32, scales32, offs, "masked", "int4", 32, outm, 0, mx_m), _gemmkit.ScaleMode.mx, mx_m),
        ((x, qweight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, mx_u8.t().contiguous().t()),
         _gemmkit.ScaleMode.mx, mx_u8),
        ((xm, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0, mx_m.view(U8)), _gemmkit.ScaleMode.mx, mx_m)]
    for args, mode, expected in cases:
        _torch.launch_grouped_w4(*args)
        mode_a, scale_a = launched[-1][11:13]
        assert mode_a == mode
        assert scale_a.dtype == (E8M0 if mode == _gemmkit.ScaleMode.mx else F32)
        assert tuple(scale_a.shape) == tuple(expected.shape) and scale_a.stride() == args[-1].stride()
        assert scale_a.data_ptr() == args[-1].data_ptr()  # a view, not a copy
    # K <= 128: [M_total, 1] are one a row; masked rowwise [G, max_m] still get their column back.
    x, xm, offs, out, outm, qweight, scales, e = w4a8_operands(groups, n, 96, 128)
    _torch.launch_grouped_w4(x, qweight, scales, None, offs, "contiguous", "int4", 128, out, 0, torch.ones(100, 1))
    assert launched[-1][11] == _gemmkit.ScaleMode.rowwise
    _torch.launch_grouped_w4(xm, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0, torch.ones(groups, 16))
    assert launched[-1][11] == _gemmkit.ScaleMode.rowwise and launched[-1][12].shape == (groups, 16, 1)
    _torch.launch_grouped_w4(xm, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0,
                             torch.zeros(groups, 16, 3, dtype=U8))
    assert launched[-1][11] == _gemmkit.ScaleMode.mx and launched[-1][12].shape == (groups, 16, 3)


def test_the_library_takes_the_w4a8_blocks_and_mx_exponents(cpu_launch):
    # Through the binding to grouped_gemm's checks, which refuse the CPU memory alone; skipped
    # where this library's grouped_gemm refuses 1x128 blocks or mx exponents with 4-bit weights.
    groups, n, k = 4, 64, 4160
    x, xm, offs, out, outm, qweight, scales, e = w4a8_operands(groups, n, k, 128)
    with pytest.raises((RuntimeError, ValueError)) as error:
        cpu_launch(x, qweight, scales, None, offs, "contiguous", "int4", 128, out, 0, torch.ones(33, 100).t())
    if "not supported yet" in str(error.value):
        pytest.skip(f"this library's grouped_gemm takes no 1x128 or mx A scales with 4-bit weights: {error.value}")
    scales32 = torch.zeros(groups, 130, n, dtype=BF16)
    calls = [
        lambda: cpu_launch(x, qweight, scales, scales, offs, "contiguous", "int4", 128, out, 0,
                           torch.ones(33, 100).t()),
        lambda: cpu_launch(xm, qweight, scales, None, offs, "masked", "int4", 128, outm, 0, torch.ones(groups, 16, 33)),
        lambda: cpu_launch(x, qweight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, torch.ones(100, 33)),
        lambda: cpu_launch(x, qweight, scales32, scales32, offs, "contiguous", "int4", 32, out, 0,
                           torch.zeros(100, 130, dtype=U8)),
        lambda: cpu_launch(xm, qweight, e, None, offs, "masked", "mxfp4", 32, outm, 0,
                           torch.zeros(groups, 16, 130, dtype=U8).view(E8M0))]
    for call in calls:
        refused_for_memory_alone(call)


def test_the_binding_views_masked_mxfp4_activations_as_g_x_max_m_x_k_codes():
    storage = torch.zeros(3, 5, 40, dtype=U8)
    x = storage[:, :, 3:35]  # G = 3, max_m = 5, 32 bytes a row (K = 64), rows 40 bytes apart, groups 200
    v = _gemmkit.packed_activation_view_of(x, "x")
    assert (v.data, v.dtype, v.shape, v.strides) == (x.data_ptr(), DType.e2m1, [3, 5, 64], [400, 80, 1])
    v = _gemmkit.packed_activation_view_of(x[::2], "x")  # every other group
    assert (v.shape, v.strides) == ([2, 5, 64], [800, 80, 1])
    if FLOAT4 is not None:
        assert _gemmkit.packed_activation_view_of(x.view(FLOAT4), "x").shape == [3, 5, 64]
    with pytest.raises(ValueError, match=r"^x: strides \[160, 1, 5\]; expected the bytes along K contiguous"):
        _gemmkit.packed_activation_view_of(torch.zeros(3, 32, 5, dtype=U8).transpose(1, 2), "x")


def fp4_operands(groups, n, k):
    """CPU MXFP4 x [100, K/2] (a slice of wider rows, 8 bytes in: not as TMA would read it) and
    masked xm [G, 16, K/2] of uint8 codes, their uint8 exponents [100, ceil(K/32)] and [G, 16,
    ceil(K/32)], offs, outputs, MXFP4 weights' codes and exponents, and int4 scales in groups of
    32 (bfloat16)."""
    x, xm = torch.zeros(100, k // 2 + 24, dtype=U8)[:, 8:8 + k // 2], torch.zeros(groups, 16, k // 2, dtype=U8)
    ex, exm = torch.zeros(100, -(-k // 32), dtype=U8), torch.zeros(groups, 16, -(-k // 32), dtype=U8)
    offs, out, outm = torch.tensor([0, 30, 30, 90], dtype=I32), torch.zeros(100, n), torch.zeros(groups, 16, n)
    weight, e = torch.zeros(groups, n, k // 2, dtype=U8), torch.zeros(groups, n, -(-k // 32), dtype=U8)
    return x, xm, ex, exm, offs, out, outm, weight, e, torch.zeros(groups, -(-k // 32), n, dtype=BF16)


def test_the_fp4_launch_passes_x_as_e2m1_codes_with_mx_exponents(launched):
    groups, n, k = 4, 64, 4160  # 2080 bytes of x a row, 130 exponents
    x, xm, ex, exm, offs, out, outm, weight, e, s32 = fp4_operands(groups, n, k)
    cases = [  # MXFP4 and int4 in groups of 32; exponents uint8 or float8_e8m0fnu, row-major or M-contiguous
        (x, weight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, ex),
        (xm, weight, e, None, offs, "masked", "mxfp4", 32, outm, 0, exm.view(E8M0)),
        (x, weight, s32, s32, offs, "contiguous", "int4", 32, out, 0, ex.t().contiguous().t()),
        (xm, weight, s32, None, offs, "masked", "int4", 32, outm, 0, exm)]
    if FLOAT4 is not None:  # torch's MXFP4 dtype
        cases.append((x.view(FLOAT4), weight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, ex))
    for args in cases:
        _torch.launch_grouped_w4(*args)
        call = launched[-1]
        # The codes as they lie (grouped_gemm widens them first: no copy for TMA), flagged as MXFP4 x.
        assert call[0] is args[0] and call[16] is True
        mode_a, scale_a = call[11:13]
        assert mode_a == _gemmkit.ScaleMode.mx and scale_a.dtype == E8M0
        assert tuple(scale_a.shape) == tuple(args[-1].shape) and scale_a.stride() == args[-1].stride()
        assert scale_a.data_ptr() == args[-1].data_ptr()
    # With a fused epilogue too; other x is not flagged.
    _torch.launch_grouped_w4(xm, weight, e, None, offs, "masked", "mxfp4", 32, outm, 0, exm, "acc * route[m]",
                             [("route", torch.zeros(groups, 16, 1), "m")])
    assert launched[-1][16] is True and launched[-1][14] == "acc * route[m]"
    _torch.launch_grouped_w4(torch.zeros(100, k, dtype=BF16), weight, e, None, offs, "contiguous", "mxfp4", 32, out,
                             0)
    assert launched[-1][16] is False


def test_the_library_takes_mxfp4_activations(cpu_launch):
    # Through the binding (x's bytes viewed as e2m1 codes) to grouped_gemm's checks, which refuse
    # the CPU memory alone; skipped where this library's grouped_gemm refuses e2m1 activations.
    groups, n, k = 4, 64, 4160
    x, xm, ex, exm, offs, out, outm, weight, e, s32 = fp4_operands(groups, n, k)
    with pytest.raises((RuntimeError, ValueError)) as error:
        cpu_launch(x, weight, e, None, offs, "contiguous", "mxfp4", 32, out, 0, ex)
    text = str(error.value)
    if not (text.startswith(DEVICE_REFUSALS) or "is not device memory" in text) and "e2m1" in text:
        pytest.skip(f"this library's grouped_gemm takes no e2m1 activations: {text}")
    for call in [lambda: cpu_launch(xm, weight, e, None, offs, "masked", "mxfp4", 32, outm, 0, exm.view(E8M0)),
                 lambda: cpu_launch(x, weight, s32, s32, offs, "contiguous", "int4", 32, out, 0, ex),
                 lambda: cpu_launch(xm, weight, s32, None, offs, "masked", "int4", 32, outm, 0, exm)]:
        refused_for_memory_alone(call)
    # grouped_gemm's own checks of an e2m1 A (check_grouped_w4 refuses these first).
    with pytest.raises(ValueError, match=r"^scale_a: mode none for e2m1 activations A; expected mx"):
        cpu_launch(x, weight, e, None, offs, "contiguous", "mxfp4", 32, out, 0)


# --- without a GPU: the operator under fake tensors, as torch.compile traces it --------------------

def int4_args(groups, n, k, group=128, dtype=BF16, zeros=False, scales_dtype=None):
    """Fake CUDA qweight [G, N, ceil(K/2)], scales [G, ceil(K/group), N] (and zeros) for
    grouped_int4_mm (inside the `fake` fixture)."""
    scales = cuda(groups, -(-k // group), n, dtype=scales_dtype or dtype)
    return cuda(groups, n, (k + 1) // 2, dtype=U8), scales, cuda(*scales.shape, dtype=scales.dtype) if zeros else None


def mxfp4_args(groups, n, k, weights=U8, scales=U8):
    """Fake CUDA weight [G, N, ceil(K/2)] and exponents [G, N, ceil(K/32)] for grouped_mxfp4_mm."""
    return cuda(groups, n, (k + 1) // 2, dtype=weights), cuda(groups, n, -(-k // 32), dtype=scales)


GROUPED_W4_MM = (torch.ops.gemmkit.grouped_w4_mm, torch.ops.gemmkit.grouped_w4_mm.default)
GROUPED_W4_MM_OUT = (torch.ops.gemmkit.grouped_w4_mm_out, torch.ops.gemmkit.grouped_w4_mm_out.default)
GROUPED_W4_MM_EPILOGUE = (torch.ops.gemmkit.grouped_w4_mm_epilogue, torch.ops.gemmkit.grouped_w4_mm_epilogue.default)


def test_fake_shapes_and_dtypes(fake):
    groups, n, k = 4, 264, 4160
    x, xm, offs = cuda(100, k), cuda(groups, 16, k), cuda(groups, dtype=I32)
    x8, xm8 = cuda(100, k, dtype=E4M3), cuda(groups, 16, k, dtype=E4M3)
    qweight, scales, zeros = int4_args(groups, n, k, zeros=True)
    weight, e = mxfp4_args(groups, n, k)
    q32, s32, z32 = int4_args(groups, n, k, 32, zeros=True)
    one, rows = cuda((), dtype=F32), cuda(100, 1, dtype=F32)
    for d, shape, dtype in [
            (gemmkit.grouped_int4_mm(x, qweight, scales, offs), (100, n), BF16),
            (gemmkit.grouped_int4_mm(x, qweight, scales, offs.long(), zeros=zeros, out_dtype=F32), (100, n), F32),
            (gemmkit.grouped_int4_mm(xm, qweight, scales, counts=offs, zeros=zeros), (groups, 16, n), BF16),
            (gemmkit.grouped_int4_mm(cuda(100, k, dtype=F16), *int4_args(groups, n, k, 32, F16, True)[:2], offs,
                                     group=32), (100, n), F16),
            (gemmkit.grouped_int4_mm(x, *int4_args(groups, n, k, 8192)[:2], offs, group=8192), (100, n), BF16),
            (gemmkit.grouped_int4_mm(x.t().contiguous().t(), qweight, scales, offs, max_sms=8), (100, n), BF16),
            (gemmkit.grouped_mxfp4_mm(x, weight, e, offs), (100, n), BF16),
            (gemmkit.grouped_mxfp4_mm(xm.half(), weight, e.view(E8M0), counts=offs.long(), out_dtype=BF16),
             (groups, 16, n), BF16),
            # W4A8: one scale, one a row ([M_total, 1], [M_total]; masked [G, max_m, 1], [G, max_m]).
            (gemmkit.grouped_int4_mm(x8, qweight, scales, offs, zeros=zeros, x_scale=one), (100, n), BF16),
            (gemmkit.grouped_int4_mm(x8, *int4_args(groups, n, k, 64, scales_dtype=F16)[:2], offs, group=64,
                                     x_scale=rows), (100, n), BF16),
            (gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(100, dtype=F32), out_dtype=F16), (100, n),
             F16),
            (gemmkit.grouped_int4_mm(xm8, qweight, scales, counts=offs, x_scale=cuda(groups, 16, 1, dtype=F32)),
             (groups, 16, n), BF16),
            (gemmkit.grouped_mxfp4_mm(xm8, weight, e, counts=offs, x_scale=cuda(groups, 16, dtype=F32)),
             (groups, 16, n), BF16),
            (gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(1, 1, dtype=F32), out_dtype=F32), (100, n),
             F32),
            # 1x128 blocks of x's rows ([M_total, 33]; masked [G, max_m, 33]); mx exponents ([M_total, 130]; masked
            # [G, max_m, 130]) against weights in groups of 32 (int4 group 32, MXFP4).
            (gemmkit.grouped_int4_mm(x8, qweight, scales, offs, zeros=zeros, x_scale=cuda(100, 33, dtype=F32)),
             (100, n), BF16),
            (gemmkit.grouped_int4_mm(xm8, qweight, scales, counts=offs, x_scale=cuda(groups, 16, 33, dtype=F32),
                                     out_dtype=F32), (groups, 16, n), F32),
            (gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(33, 100, dtype=F32).t(), out_dtype=F16),
             (100, n), F16),
            (gemmkit.grouped_int4_mm(x8, q32, s32, offs, zeros=z32, group=32, x_scale=cuda(100, 130, dtype=U8)),
             (100, n), BF16),
            (gemmkit.grouped_int4_mm(xm8, *int4_args(groups, n, k, 32, scales_dtype=F16)[:2], counts=offs, group=32,
                                     x_scale=cuda(groups, 16, 130, dtype=E8M0)), (groups, 16, n), BF16),
            (gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(100, 130, dtype=E8M0), out_dtype=F32),
             (100, n), F32),
            (gemmkit.grouped_mxfp4_mm(xm8, weight, e, counts=offs, x_scale=cuda(groups, 16, 130, dtype=U8)),
             (groups, 16, n), BF16)]:
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    if FLOAT4 is not None:
        d = gemmkit.grouped_mxfp4_mm(x, *mxfp4_args(groups, n, k, weights=FLOAT4, scales=E8M0), offs)
        assert tuple(d.shape) == (100, n) and d.dtype == BF16
    out = cuda(100, n, dtype=F32)
    assert gemmkit.grouped_int4_mm(x, qweight, scales, offs, out=out) is out
    out = cuda(groups, 16, n, dtype=F16)
    assert gemmkit.grouped_mxfp4_mm(xm8, weight, e, counts=offs, x_scale=one, out=out, out_dtype=F16) is out


def test_the_mode_of_x_scale_is_its_dtypes_and_shapes_over_xs_rows(fake):
    k = 4160  # 33 blocks of 128, 130 of 32
    x, xm = cuda(100, k, dtype=E4M3), cuda(4, 16, k, dtype=E4M3)
    assert [_torch.grouped_x_scale_mode(cuda(shape, dtype=dtype), x) for shape, dtype in (
        ((), F32), ((1, 1), F32), ((100, 1), F32), ((100,), F32), ((100, 33), F32), ((100, 130), U8),
        ((100, 130), E8M0), ((100, 130), F32), ((100, 33), U8), ((100, 1), U8), ((4, 16, 33), F32),
        ((1, 100), F32))] == ["tensor", "tensor", "rowwise", "rowwise", "block", "mx", "mx", None, None, None,
                              None, None]
    assert [_torch.grouped_x_scale_mode(cuda(shape, dtype=dtype), xm) for shape, dtype in (
        ((), F32), ((1, 1, 1), F32), ((4, 16), F32), ((4, 16, 1), F32), ((4, 16, 33), F32), ((4, 16, 130), E8M0),
        ((4, 16, 130), U8), ((64, 130), U8), ((100, 33), F32), ((4, 16, 33), E8M0))] == [
        "tensor", "tensor", "rowwise", "rowwise", "block", "mx", "mx", None, None, None]
    # K <= 32: one exponent a row, [M_total, 1], an mx form still.
    assert _torch.grouped_x_scale_mode(cuda(1, 1, dtype=U8), cuda(1, 20, dtype=E4M3)) == "mx"


def test_a_traced_call_is_one_operator_with_the_layout_format_and_group(fake):
    def experts(x, qweight, scales, zeros, offs, weight, e, counts):
        h = gemmkit.grouped_int4_mm(x, qweight, scales, offs, zeros=zeros, group=64).relu()
        return gemmkit.grouped_mxfp4_mm(h.view(4, 25, 256), weight, e, counts=counts, out_dtype=F32)

    qweight, scales, zeros = int4_args(4, 256, 1000, 64, zeros=True)
    args = (cuda(100, 1000), qweight, scales, zeros, cuda(4, dtype=I32), *mxfp4_args(4, 96, 256), cuda(4, dtype=I64))
    graph, _ = torch._dynamo.export(experts)(*args)  # raises where dynamo would break the graph
    calls = [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM]
    assert [node.args[5:] for node in calls] == [("contiguous", "int4", 64, None, 0),
                                                 ("masked", "mxfp4", 32, torch.float32, 0)]
    d = graph(*args)
    assert tuple(d.shape) == (4, 25, 96) and d.dtype == F32
    # W4A8 with out=: x_scale the operator's keyword.
    x8, rows, out = cuda(100, 1000, dtype=E4M3), cuda(100, dtype=F32), cuda(100, 256)
    graph, _ = torch._dynamo.export(lambda x, q, s, o, xs, out: gemmkit.grouped_int4_mm(
        x, q, s, o, group=64, x_scale=xs, out=out, max_sms=4))(x8, qweight, scales, args[4], rows, out)
    calls = [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM_OUT]
    assert [node.args[6:] for node in calls] == [("contiguous", "int4", 64, 4)]
    assert calls[0].kwargs["x_scale"].meta["example_value"].shape == (100,)
    # mx exponents of masked rows, as they are: the operator's keyword too.
    weight, e = mxfp4_args(4, 96, 1000)
    graph, _ = torch._dynamo.export(lambda x, w, e, c, xs: gemmkit.grouped_mxfp4_mm(x, w, e, counts=c, x_scale=xs))(
        cuda(4, 25, 1000, dtype=E4M3), weight, e, args[7], cuda(4, 25, 32, dtype=E8M0))
    calls = [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM]
    assert [node.args[5:] for node in calls] == [("masked", "mxfp4", 32, None, 0)]
    example = calls[0].kwargs["x_scale"].meta["example_value"]
    assert example.shape == (4, 25, 32) and example.dtype == E8M0


def test_fake_epilogue_shapes_and_one_traced_operator(fake):
    groups, n, k = 4, 264, 4160
    x, xm, offs = cuda(100, k), cuda(groups, 16, k), cuda(groups, dtype=I32)
    qweight, scales, zeros = int4_args(groups, n, k, zeros=True)
    weight, e = mxfp4_args(groups, n, k)
    bias = cuda(groups, n)
    text = "h = acc + bias[n]; pre[m, n] = h; db[n] = sum(h); silu(h) * route[m]"
    # Contiguous: route one a row of x, [M_total]; db one an expert, [G, N], or over every expert, [N].
    for db in (cuda(groups, n, dtype=F32), cuda(n, dtype=F32)):
        d = gemmkit.grouped_int4_mm(x, qweight, scales, offs, zeros=zeros, epilogue=text, bias=bias,
                                    route=cuda(100, dtype=F32), pre=cuda(100, n), db=db)
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == (100, n) and d.dtype == BF16
    # Masked: route [G, max_m]; W4A8 with out= and out_dtype.
    out = cuda(groups, 16, n, dtype=F32)
    d = gemmkit.grouped_mxfp4_mm(xm.to(E4M3), weight, e, counts=offs, x_scale=cuda(groups, 16, dtype=F32), out=out,
                                 out_dtype=F32, epilogue="acc * route[m]", route=cuda(groups, 16, dtype=F32))
    assert d is out

    def layer(x, qweight, scales, offs, bias, route):
        return gemmkit.grouped_int4_mm(x, qweight, scales, offs, group=128, epilogue="silu(acc + bias[n]) * route[m]",
                                       bias=bias, route=route, max_sms=8)

    args = (x, qweight, scales, offs, bias, cuda(100, dtype=F32))
    graph, _ = torch._dynamo.export(layer)(*args)  # raises where dynamo would break the graph
    calls = [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM_EPILOGUE]
    assert len(calls) == 1 and [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM] == []
    assert calls[0].args[6:11] == ("contiguous", "int4", 128, "silu(acc + bias[n]) * route[m]", ["bias", "route"])
    d = graph(*args)
    assert tuple(d.shape) == (100, n) and d.dtype == BF16


def test_errors_name_the_argument(fake):
    groups, n, k = 4, 64, 256
    x, xm, offs = cuda(100, k), cuda(groups, 16, k), cuda(groups, dtype=I32)
    x8 = cuda(100, k, dtype=E4M3)
    qweight, scales, zeros = int4_args(groups, n, k, zeros=True)
    weight, e = mxfp4_args(groups, n, k)
    rows = cuda(100, 1, dtype=F32)
    forms = (r"one element \(tensor\), one a row of x \(rowwise\), \[M_total, 1\] or \[M_total\] = \[100, 1\] or "
             r"\[100\], or 1x128 blocks of x's rows \(block\), \[M_total, ceil\(K/128\)\] = \[100, 2\]")
    mx_forms = (forms + r"; or float8_e8m0fnu or uint8 exponents \[M_total, ceil\(K/32\)\] = \[100, 8\] \(mx, MXFP8: "
                r"2\^\(e - 127\) per 32 of K\)$")
    masked_forms = (r"one element \(tensor\), one a row of x \(rowwise\), \[G, max_m, 1\] or \[G, max_m\] = "
                    r"\[4, 16, 1\] or \[4, 16\], or 1x128 blocks of x's rows \(block\), \[G, max_m, "
                    r"ceil\(K/128\)\] = \[4, 16, 2\]")
    masked_mx = r"; or float8_e8m0fnu or uint8 exponents \[G, max_m, ceil\(K/32\)\] = \[4, 16, 8\] \(mx, MXFP8: "
    refused_mx = (r"; expected mx exponents only against weights in groups of 32 of K \(grouped_mxfp4_mm, or "
                  r"grouped_int4_mm with group=32 and K > 32\), else float32 scales: ")
    q32, s32, _ = int4_args(groups, n, k, 32)
    cases = [
        (ValueError, r"^offs: None; expected the groups' cumulative row ends \(int32 or int64 \[G\]\) for a 2-D x$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales)),
        (ValueError, r"^counts: None; expected each group's valid rows \(int32 or int64 \[G\]\) for a 3-D x$",
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e)),
        (ValueError, r"^counts: given with a 2-D x; expected offs",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, counts=offs)),
        (ValueError, r"^offs: given with a 3-D x; expected counts",
         lambda: gemmkit.grouped_int4_mm(xm, qweight, scales, offs)),
        (ValueError, r"^x: 1 dimensions; expected 2, \[M_total, K\] with offs, or 3, \[G, max_m, K\] with counts$",
         lambda: gemmkit.grouped_int4_mm(x[0], qweight, scales, offs)),
        (TypeError, r"^x: dtype torch.float32 is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                    r"x_scale, or MXFP4 activations \(uint8",
         lambda: gemmkit.grouped_int4_mm(x.float(), qweight, scales, offs)),
        (TypeError, r"^offs: dtype torch.float32 is not supported; expected int32 or int64$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs.float())),
        (ValueError, r"^offs: 3 values; expected one a group, G = 4 \(qweight's first dimension\)$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs[:3])),
        (ValueError, r"^counts: 3 values; expected one a group, G = 4 \(weight's first dimension\)$",
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs[:3])),
        (ValueError, r"^qweight: shape \[4, 64, 128\] has G = 4 but x \[3, 16, 256\] has G = 3$",
         lambda: gemmkit.grouped_int4_mm(xm[:3], qweight, scales, counts=offs)),
        (TypeError, r"^qweight: dtype torch.int8 is not supported; expected uint8, two 4-bit codes a byte along K$",
         lambda: gemmkit.grouped_int4_mm(x, qweight.view(torch.int8), scales, offs)),
        (ValueError, r"^qweight: shape \[64, 128\]; expected \[G, N, ceil\(K/2\)\] = \[G, N, 128\] bytes for x's "
                     r"K = 256$",
         lambda: gemmkit.grouped_int4_mm(x, qweight[0], scales, offs)),  # one matrix's: int4_mm's
        (ValueError, r"^qweight: shape \[4, 64, 127\]; expected \[G, N, ceil\(K/2\)\] = \[G, N, 128\]",
         lambda: gemmkit.grouped_int4_mm(x, qweight[..., 1:], scales, offs)),
        (ValueError, r"^qweight: strides \[8192, 1, 64\]; expected the bytes along K contiguous \(stride 1\)$",
         lambda: gemmkit.grouped_int4_mm(x, cuda(groups, 128, 64, dtype=U8).transpose(1, 2), scales, offs)),
        (TypeError, r"^scales: dtype torch.float16; expected x's, torch.bfloat16$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales.half(), offs)),
        (ValueError, r"^scales: shape \[4, 64, 2\]; expected \[G, ceil\(K/128\), N\] = \[4, 2, 64\] for G = 4, "
                     r"K = 256, N = 64$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales.transpose(1, 2), offs)),  # [G, N, K/group]: the wrong way
        (ValueError, r"^scales: shape \[2, 64\]; expected \[G, ceil\(K/128\), N\] = \[4, 2, 64\]",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales[0], offs)),  # one expert's scales for every expert
        (ValueError, r"^scales: shape \[4, 2, 64\]; expected \[G, ceil\(K/64\), N\] = \[4, 4, 64\]",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, group=64)),
        (ValueError, r"^group: 48; expected 32, a power of two from 64, or at least K = 256",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, group=48)),
        (TypeError, r"^group: float; expected an int", lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs,
                                                                                       group=128.0)),
        (TypeError, r"^zeros: dtype torch.float16; expected the scales', torch.bfloat16$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, zeros=zeros.half())),
        (ValueError, r"^zeros: shape \[3, 2, 64\]; expected the scales', \[4, 2, 64\]$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, zeros=zeros[:3])),
        (TypeError, r"^weight: dtype torch.int8 is not supported; expected uint8",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight.view(torch.int8), e, offs)),
        (TypeError, r"^scales: dtype torch.bfloat16 is not supported; expected float8_e8m0fnu or uint8",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e.to(BF16), offs)),
        (ValueError, r"^scales: shape \[4, 8, 64\]; expected \[G, N, ceil\(K/32\)\] = \[4, 64, 8\] for G = 4, K = 256, "
                     r"N = 64$",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e.transpose(1, 2), offs)),  # gpt-oss's [E, N, K/32], not B's
        (TypeError, r"^grouped_mxfp4_mm\(\) got unexpected keyword arguments zeros; tensors are taken only with "
                    r"epilogue=$",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, zeros=e)),
        # A fused epilogue's tensors
        (TypeError, r"^grouped_int4_mm\(\) got unexpected keyword arguments bias; tensors are taken only with "
                    r"epilogue=$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, bias=cuda(groups, n))),
        (ValueError, r"^route: not given; the epilogue reads route\[m\], expected route=tensor$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, epilogue="acc * route[m]")),
        (ValueError, r"^zeros: not a tensor the epilogue names; expected route$",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, epilogue="acc * route[m]", route=cuda(100, dtype=F32),
                                          zeros=e)),
        # (contiguous groups share one output along x's rows: no batch)
        (ValueError, r"^ra: shape \[4, 100\] for ra\[m\] = amax\(...\); expected \[100\] or \[100, 1\]$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, epilogue="ra[m] = amax(acc); acc",
                                         ra=cuda(groups, 100, dtype=F32))),
        (ValueError, r"^db: shape \[3, 64\] for db\[n\] = sum\(...\); expected \[64\] or \[1, 64\] \(summed over "
                     r"every group\), or \[4, 64\] \(one a group, G = 4\)$",
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs, epilogue="db[n] = sum(acc); acc",
                                          db=cuda(3, n, dtype=F32))),
        (ValueError, r"^db: shape \[3, 64\] for db\[n\] = sum\(...\); expected",
         lambda: torch.ops.gemmkit.grouped_w4_mm_epilogue(x, weight, e, None, offs, cuda(100, n), "contiguous",
                                                          "mxfp4", 32, "db[n] = sum(acc); acc", ["db"], [],
                                                          [cuda(3, n, dtype=F32)], 0)),
        # W4A8
        (ValueError, r"^x_scale: None with float8_e4m3fn x; expected x's float32 scales: " + forms + "$",
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs)),
        (ValueError, r"^x_scale: None with float8_e4m3fn x; expected x's float32 scales: " + mx_forms,
         lambda: gemmkit.grouped_mxfp4_mm(x8, weight, e, offs)),
        (ValueError, r"^x_scale: given with torch.bfloat16 x; expected None \(scales go with float8_e4m3fn x or "
                     r"MXFP4 x\)$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, x_scale=rows)),
        (TypeError, r"^x_scale: dtype torch.bfloat16; expected float32$",
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(100, 1))),
        (TypeError, r"^x_scale: dtype torch.int8; expected float32 \(or float8_e8m0fnu or uint8 mx exponents\)$",
         lambda: gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(100, 8, dtype=torch.int8))),
        (ValueError, r"^x_scale: shape \[1, 100\]; expected " + forms + "$",
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(1, 100, dtype=F32))),
        (ValueError, r"^x_scale: shape \[100, 3\]; expected " + forms + "$",  # one block too many
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(100, 3, dtype=F32))),
        (ValueError, r"^x_scale: shape \[4, 16, 2\]; expected " + forms + "$",  # masked blocks with contiguous x
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(4, 16, 2, dtype=F32))),
        (ValueError, r"^x_scale: shape \[4, 16, 3\]; expected " + masked_forms + "$",
         lambda: gemmkit.grouped_int4_mm(xm.to(E4M3), qweight, scales, counts=offs, x_scale=cuda(4, 16, 3, dtype=F32))),
        (ValueError, r"^x_scale: shape \[4, 1\]; expected " + masked_forms + masked_mx,
         lambda: gemmkit.grouped_mxfp4_mm(xm.to(E4M3), weight, e, counts=offs, x_scale=cuda(4, 1, dtype=F32))),
        # mx exponents (A8W4 in MX) only against weights in groups of 32 of K, of x's rows by ceil(K/32).
        (ValueError, r"^x_scale: dtype torch.uint8, mx exponents \(MXFP8\), against int4 weights in groups of 128"
                     + refused_mx + forms + "$",
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales, offs, x_scale=cuda(100, 8, dtype=U8))),
        (ValueError, r"^x_scale: dtype torch.float8_e8m0fnu, mx exponents \(MXFP8\), against int4 weights in groups "
                     r"of 64" + refused_mx,
         lambda: gemmkit.grouped_int4_mm(xm.to(E4M3), qweight, cuda(groups, 4, 64), counts=offs, group=64,
                                         x_scale=cuda(groups, 16, 8, dtype=E8M0))),
        (ValueError, r"^x_scale: dtype torch.uint8, mx exponents \(MXFP8\), against int4 weights in groups of 32, one "
                     r"covering all of K = 32" + refused_mx,  # one group a column, as gemm() has it
         lambda: gemmkit.grouped_int4_mm(cuda(100, 32, dtype=E4M3), *int4_args(groups, n, 32, 32)[:2], offs, group=32,
                                         x_scale=cuda(100, 1, dtype=U8))),
        (ValueError, r"^x_scale: shape \[100, 2\]; expected " + mx_forms,  # 1x128 blocks' shape, in exponents
         lambda: gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(100, 2, dtype=E8M0))),
        (ValueError, r"^x_scale: shape \[100, 8\]; expected " + mx_forms,  # float32 of the exponents' shape
         lambda: gemmkit.grouped_int4_mm(x8, q32, s32, offs, group=32, x_scale=cuda(100, 8, dtype=F32))),
        (ValueError, r"^x_scale: shape \[4, 16, 7\]; expected " + masked_forms + masked_mx,
         lambda: gemmkit.grouped_int4_mm(xm.to(E4M3), q32, s32, counts=offs, group=32,
                                         x_scale=cuda(4, 16, 7, dtype=U8))),
        (ValueError, r"^x_scale: shape \[4, 16, 8\]; expected " + mx_forms,  # masked exponents with contiguous x
         lambda: gemmkit.grouped_mxfp4_mm(x8, weight, e, offs, x_scale=cuda(4, 16, 8, dtype=U8))),
        (TypeError, r"^scales: dtype torch.float32; expected bfloat16 or float16 with float8_e4m3fn x$",
         lambda: gemmkit.grouped_int4_mm(x8, qweight, scales.float(), offs, x_scale=rows)),
        # The output
        (TypeError, r"^out_dtype: torch.float8_e4m3fn is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, out_dtype=E4M3)),
        (ValueError, r"^out: shape \[100, 63\]; expected x's rows and N, \[100, 64\]$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, out=cuda(100, 63))),
        (ValueError, r"^out: shape \[4, 16, 64\]; expected x's rows and N, \[100, 64\]$",
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, out=cuda(4, 16, 64))),
        (ValueError, r"^out: dtype torch.bfloat16 differs from out_dtype torch.float32$",
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs, out=cuda(4, 16, 64), out_dtype=F32)),
        (TypeError, r"^out: dtype torch.float64 is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs, out=cuda(4, 16, 64, dtype=F64))),
        # The operator's own arguments
        (ValueError, r"^format: 'int8'; expected 'int4' or 'mxfp4'$",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, qweight, scales, None, offs, "contiguous", "int8", 128, None, 0)),
        (ValueError, r"^layout: 'ragged'; expected 'contiguous' or 'masked'$",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, qweight, scales, None, offs, "ragged", "int4", 128, None, 0)),
        (ValueError, r"^x: 2 dimensions; expected 3, \[G, max_m, K\] \(masked groups, counts\)$",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, qweight, scales, None, offs, "masked", "int4", 128, None, 0)),
        (ValueError, r"^zeros: given with MXFP4 weights; expected None \(zero points are int4's\)$",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, weight, e, e, offs, "contiguous", "mxfp4", 32, None, 0)),
        (ValueError, r"^group: 128 with format 'mxfp4'; expected 32",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, weight, e, None, offs, "contiguous", "mxfp4", 128, None, 0)),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


def fp4_args(*rows, k, x_dtype=U8, scale_dtype=U8):
    """Fake CUDA MXFP4 activations x [*rows, k/2] and their exponents [*rows, ceil(k/32)]."""
    return cuda(*rows, k // 2, dtype=x_dtype), cuda(*rows, -(-k // 32), dtype=scale_dtype)


def test_fp4_fake_shapes_dtypes_and_x_scale_modes(fake):
    groups, n, k = 4, 264, 4160  # 2080 bytes of x a row, 130 exponents
    offs = cuda(groups, dtype=I32)
    x, ex = fp4_args(100, k=k)
    xm, exm = fp4_args(groups, 16, k=k, scale_dtype=E8M0)
    weight, e = mxfp4_args(groups, n, k)
    q32, s32, z32 = int4_args(groups, n, k, 32, zeros=True)
    for d, shape, dtype in [
            (gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex), (100, n), BF16),  # bfloat16, as for e4m3 x
            (gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs, x_scale=exm, out_dtype=F32), (groups, 16, n), F32),
            (gemmkit.grouped_mxfp4_mm(x, weight, e, offs.long(), x_scale=cuda(130, 100, dtype=U8).t()), (100, n),
             BF16),  # M-contiguous exponents
            (gemmkit.grouped_int4_mm(x, q32, s32, offs, zeros=z32, group=32, x_scale=ex.view(E8M0)), (100, n), BF16),
            (gemmkit.grouped_int4_mm(xm, q32, s32.half(), counts=offs, group=32, x_scale=exm, out_dtype=F16),
             (groups, 16, n), F16),
            (torch.ops.gemmkit.grouped_w4_mm(x, weight, e, None, offs, "contiguous", "mxfp4", 32, None, 0, x_scale=ex),
             (100, n), BF16),
            (gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex, max_sms=8, epilogue="acc * route[m]",
                                      route=cuda(100, dtype=F32)), (100, n), BF16),
            (gemmkit.grouped_mxfp4_mm(*fp4_args(100, k=20)[:1], *mxfp4_args(groups, n, 20), offs,
                                      x_scale=fp4_args(100, k=20)[1]), (100, n), BF16)]:  # K = 20: one exponent a row
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    if FLOAT4 is not None:
        d = gemmkit.grouped_mxfp4_mm(x.view(FLOAT4), weight.view(FLOAT4), e, offs, x_scale=ex)
        assert tuple(d.shape) == (100, n) and d.dtype == BF16
    out = cuda(groups, 16, n, dtype=F32)
    assert gemmkit.grouped_int4_mm(xm, q32, s32, counts=offs, zeros=z32, group=32, x_scale=exm, out=out) is out
    # x_scale's mode over x's rows by K = 2 * x.size(-1): ceil(K/32) = 130 exponents a row, not 65.
    assert [_torch.grouped_x_scale_mode(cuda(shape, dtype=U8), t) for t, shape in (
        (x, (100, 130)), (x, (100, 65)), (xm, (groups, 16, 130)), (xm, (100, 130)))] == ["mx", None, "mx", None]


def test_a_traced_fp4_call_carries_the_codes_and_exponents(fake):
    weight, e = mxfp4_args(4, 96, 1000)
    args = (cuda(4, 25, 500, dtype=U8), weight, e, cuda(4, dtype=I64), cuda(4, 25, 32, dtype=U8))  # K = 1000
    graph, _ = torch._dynamo.export(lambda x, w, e, c, xs: gemmkit.grouped_mxfp4_mm(x, w, e, counts=c, x_scale=xs,
                                                                                    out_dtype=F32))(*args)
    calls = [node for node in graph.graph.nodes if node.target in GROUPED_W4_MM]
    assert [node.args[5:] for node in calls] == [("masked", "mxfp4", 32, torch.float32, 0)]
    codes, exponents = calls[0].args[0].meta["example_value"], calls[0].kwargs["x_scale"].meta["example_value"]
    assert (codes.shape, codes.dtype, exponents.shape, exponents.dtype) == ((4, 25, 500), U8, (4, 25, 32), U8)
    d = graph(*args)
    assert tuple(d.shape) == (4, 25, 96) and d.dtype == F32
    q32, s32, _ = int4_args(4, 96, 1000, 32)
    graph, _ = torch._dynamo.export(lambda x, q, s, o, xs, out: gemmkit.grouped_int4_mm(
        x, q, s, o, group=32, x_scale=xs, out=out))(cuda(100, 500, dtype=U8), q32, s32, cuda(4, dtype=I32),
                                                    cuda(100, 32, dtype=E8M0), cuda(100, 96))
    assert [node.args[6:] for node in graph.graph.nodes if node.target in GROUPED_W4_MM_OUT] == [
        ("contiguous", "int4", 32, 0)]


def test_fp4_errors_name_the_argument(fake):
    groups, n, k = 4, 64, 256  # 128 bytes of x a row, 8 exponents
    offs = cuda(groups, dtype=I32)
    x, ex = fp4_args(100, k=k)
    xm, exm = fp4_args(groups, 16, k=k)
    weight, e = mxfp4_args(groups, n, k)
    qweight, scales, _ = int4_args(groups, n, k)
    q32, s32, _ = int4_args(groups, n, k, 32)
    exponents = r"float8_e8m0fnu or uint8 exponents \[{}, ceil\(K/32\)\] = \[{}\] \(mx, MXFP4: 2\^\(e - 127\) per 32 of K\)$"
    forms, masked_forms = exponents.format("M_total", "100, 8"), exponents.format("G, max_m", "4, 16, 8")
    groups_of_32 = (r"; expected 32 with K > 32: MXFP4 x goes only with weights in groups of 32 of K "
                    r"\(grouped_mxfp4_mm, or grouped_int4_mm with group=32\)$")
    cases = [
        (ValueError, r"^x_scale: None with MXFP4 activations x \(torch.uint8\); expected their " + forms,
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs)),
        (ValueError, r"^x_scale: None with MXFP4 activations x \(torch.uint8\); expected their " + masked_forms,
         lambda: gemmkit.grouped_int4_mm(xm, q32, s32, counts=offs, group=32)),
        (ValueError, r"^x_scale: None with MXFP4 activations x",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, weight, e, None, offs, "contiguous", "mxfp4", 32, None, 0)),
        (TypeError, r"^x_scale: dtype torch.float32 with MXFP4 activations x; expected float8_e8m0fnu or uint8 \(mx "
                    r"exponents, one per 32 of K\)$",  # a float32 mode's scales (tensor, rowwise, block)
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=cuda(100, 1, dtype=F32))),
        (TypeError, r"^x_scale: dtype torch.int8 with MXFP4 activations x",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex.view(torch.int8))),
        (ValueError, r"^x_scale: shape \[100, 4\]; expected " + forms,  # ceil(x.size(-1)/32): K is twice the bytes
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex[:, :4])),
        (ValueError, r"^x_scale: shape \[100, 2\]; expected " + forms,  # 1x128 blocks' shape, in exponents
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex[:, :2])),
        (ValueError, r"^x_scale: shape \[4, 16, 8\]; expected " + forms,  # masked exponents with contiguous x
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=exm)),
        (ValueError, r"^x_scale: shape \[4, 16\]; expected " + masked_forms,
         lambda: gemmkit.grouped_mxfp4_mm(xm, weight, e, counts=offs, x_scale=exm[..., 0])),
        (ValueError, r"^group: 128 with MXFP4 activations x \(torch.uint8, K = 2 \* 128 = 256\), against int4 weights "
                     r"in groups of 128" + groups_of_32,  # grouped_int4_mm's default group
         lambda: gemmkit.grouped_int4_mm(x, qweight, scales, offs, x_scale=ex)),
        (ValueError, r"^group: 64 with MXFP4 activations x \(torch.uint8, K = 2 \* 128 = 256\), against int4 weights "
                     r"in groups of 64" + groups_of_32,
         lambda: gemmkit.grouped_int4_mm(xm, qweight, cuda(groups, 4, n), counts=offs, group=64, x_scale=exm)),
        (ValueError, r"^group: 32 with MXFP4 activations x \(torch.uint8, K = 2 \* 16 = 32\), against int4 weights in "
                     r"groups of 32, one covering all of K = 32" + groups_of_32,  # one group a column
         lambda: gemmkit.grouped_int4_mm(cuda(100, 16, dtype=U8), *int4_args(groups, n, 32, 32)[:2], offs, group=32,
                                         x_scale=cuda(100, 1, dtype=U8))),
        (ValueError, r"^x: strides \[1, 100\]; expected the bytes along K contiguous \(stride 1\)$",
         lambda: gemmkit.grouped_mxfp4_mm(cuda(128, 100, dtype=U8).t(), weight, e, offs, x_scale=ex)),
        (ValueError, r"^x: strides \[2048, 1, 16\]; expected the bytes along K contiguous \(stride 1\)$",
         lambda: gemmkit.grouped_int4_mm(cuda(groups, 128, 16, dtype=U8).transpose(1, 2), q32, s32, counts=offs,
                                         group=32, x_scale=exm)),
        (ValueError, r"^weight: shape \[4, 64, 128\]; expected \[G, N, ceil\(K/2\)\] = \[G, N, 64\] bytes for x's "
                     r"K = 128 \(2 \* x's 64 bytes: MXFP4 x has an even K\)$",  # x's codes for K = 128, weights for 256
         lambda: gemmkit.grouped_mxfp4_mm(x[:, :64], weight, e, offs, x_scale=ex[:, :4])),
        (ValueError, r"^qweight: shape \[4, 64, 128\]; expected \[G, N, ceil\(K/2\)\] = \[G, N, 256\] bytes for x's "
                     r"K = 512",
         lambda: gemmkit.grouped_int4_mm(cuda(100, 256, dtype=U8), q32, cuda(groups, 16, n), offs, group=32,
                                         x_scale=cuda(100, 16, dtype=U8))),
        (TypeError, r"^scales: dtype torch.float32; expected bfloat16 or float16 with MXFP4 x$",
         lambda: gemmkit.grouped_int4_mm(x, q32, s32.float(), offs, group=32, x_scale=ex)),
        (TypeError, r"^x: dtype torch.int8 is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                    r"x_scale, or MXFP4 activations \(uint8",
         lambda: gemmkit.grouped_mxfp4_mm(x.view(torch.int8), weight, e, offs, x_scale=ex)),
        (ValueError, r"^out: shape \[100, 128\]; expected x's rows and N, \[100, 64\]$",
         lambda: gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=ex, out=cuda(100, 128))),
        (ValueError, r"^x: 2 dimensions; expected 3, \[G, max_m, K\] \(masked groups, counts\)$",
         lambda: torch.ops.gemmkit.grouped_w4_mm(x, weight, e, None, offs, "masked", "mxfp4", 32, None, 0,
                                                 x_scale=ex)),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
    with pytest.raises(ValueError, match="^x_scale: on cpu; expected a CUDA tensor$"):
        gemmkit.grouped_mxfp4_mm(x, weight, e, offs, x_scale=torch.zeros(100, 8, dtype=U8))


def test_an_epilogue_that_autograd_would_track_is_refused(fake):
    x, offs = cuda(100, 256).requires_grad_(), cuda(4, dtype=I32)
    qweight, scales, _ = int4_args(4, 64, 256)
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue yet"):
        gemmkit.grouped_int4_mm(x, qweight, scales, offs, epilogue="acc * route[m]", route=cuda(100, dtype=F32))
    with torch.no_grad():
        d = gemmkit.grouped_int4_mm(x, qweight, scales, offs, epilogue="acc * route[m]", route=cuda(100, dtype=F32))
    assert not d.requires_grad


def test_errors_without_fake_tensors():
    x, offs = torch.zeros(8, 256, dtype=BF16), torch.tensor([4, 8])
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.grouped_int4_mm(x, torch.zeros(2, 64, 128, dtype=U8), torch.zeros(2, 2, 64, dtype=BF16), offs)
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.grouped_mxfp4_mm([[1.0]], torch.zeros(2, 64, 128, dtype=U8), torch.zeros(2, 64, 8, dtype=U8), offs)


def test_inputs_that_require_grad_go_through_the_operator_and_out_refuses_them(fake):
    x, offs = cuda(100, 256).requires_grad_(), cuda(4, dtype=I32)
    qweight, scales, _ = int4_args(4, 64, 256)
    d = gemmkit.grouped_int4_mm(x, qweight, scales, offs)
    assert d.requires_grad and d.grad_fn is not None  # the operator's autograd formula, which refuses (below)
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.grouped_int4_mm(x, qweight, scales, offs, out=cuda(100, 64))
    with torch.no_grad():
        assert not gemmkit.grouped_int4_mm(x, qweight, scales, offs).requires_grad
    x_scale = cuda(4, 16, dtype=F32).requires_grad_()
    assert gemmkit.grouped_mxfp4_mm(cuda(4, 16, 256, dtype=E4M3), *mxfp4_args(4, 64, 256), counts=offs,
                                    x_scale=x_scale).requires_grad


# --- a double-precision CPU stand-in for the kernel: the backward's refusal, opcheck ---------------

def grouped_w4_reference(x, w, scales, zeros, sizes, layout, format, group, out_dtype, x_scale=None, fill=None):
    """The grouped product in double, each group's rows of x times its weights dequantised exactly
    (lowbit_reference.py), x scaled by x_scale; rows no group owns `fill` (None: 0, as opcheck
    compares them), of out_dtype (None: x's; bfloat16 for e4m3 x)."""
    from cpu_stand_ins import group_rows
    k = x.size(-1)
    out = x.new_full((*x.shape[:-1], w.size(1)), 0.0 if fill is None else fill, dtype=F64)
    xd = x.double()
    if x_scale is not None:
        s = x_scale.double()
        s = s.reshape(()) if s.numel() == 1 else s if s.dim() == x.dim() else s.unsqueeze(-1)
        xd = xd * s
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        rows = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        weights = (int4_weights(w[g], scales[g], None if zeros is None else zeros[g], group, k) if format == "int4"
                   else mxfp4_weights(w[g], scales[g], k))
        out[rows] = xd[rows] @ weights.t()
    return out.to(_torch.output_dtype(x, out_dtype))


@pytest.fixture
def cpu_grouped_w4():
    """grouped_w4_mm with a CPU kernel, grouped_w4_reference, for the duration of a test."""
    from cpu_stand_ins import registered_on_cpu

    def grouped_w4_mm(x, w, scales, zeros, sizes, layout, format, group, out_dtype, max_sms, x_scale=None):
        return grouped_w4_reference(x, w, scales, zeros, sizes, layout, format, group, out_dtype, x_scale)

    yield from registered_on_cpu({"grouped_w4_mm": grouped_w4_mm})


def test_the_backward_raises_naming_the_function(cpu_grouped_w4):
    x = torch.randn(12, 64, dtype=BF16, requires_grad=True)
    qweight, scales = torch.randint(0, 256, (3, 5, 32), dtype=U8), torch.rand(3, 1, 5, dtype=BF16).requires_grad_()
    ends = torch.tensor([4, 4, 12], dtype=I32)
    d = torch.ops.gemmkit.grouped_w4_mm(x, qweight, scales, None, ends, "contiguous", "int4", 128, None, 0)
    assert d.requires_grad and d.dtype == BF16 and d.shape == (12, 5)
    with pytest.raises(RuntimeError, match=r"^gemmkit: grouped_int4_mm \(4-bit weights\) is not differentiable; "
                                           r"expected inputs that do not require grad \(or torch.no_grad\(\)\)$"):
        d.sum().backward()
    x8 = torch.randn(3, 4, 64).to(E4M3)
    x_scale = (torch.rand(3, 4) + 0.5).requires_grad_()
    e = torch.randint(120, 130, (3, 5, 2), dtype=U8)
    d = torch.ops.gemmkit.grouped_w4_mm(x8, qweight, e, None, torch.tensor([2, 0, 4]), "masked", "mxfp4", 32, F32,
                                        0, x_scale=x_scale)
    assert d.requires_grad and d.dtype == F32 and d.shape == (3, 4, 5)
    with pytest.raises(RuntimeError, match=r"^gemmkit: grouped_mxfp4_mm \(4-bit weights\) is not differentiable"):
        torch.autograd.grad(d.sum(), x_scale)
    assert x.grad is None and scales.grad is None and x_scale.grad is None


def test_the_stand_in_is_each_groups_dense_product():
    # The grouped reference against the dense one (test_lowbit.py's w4_mm stand-in), group by group.
    x = torch.randn(12, 300, dtype=F64)
    qweight, scales = torch.randint(0, 256, (3, 5, 150), dtype=U8), torch.rand(3, 5, 5, dtype=F64)
    zeros = torch.randint(0, 16, (3, 5, 5)).double()
    ends = torch.tensor([4, 4, 12])
    d = grouped_w4_reference(x, qweight, scales, zeros, ends, "contiguous", "int4", 64, F64)
    for g, start, end in [(0, 0, 4), (2, 4, 12)]:
        want = x[start:end] @ int4_weights(qweight[g], scales[g], zeros[g], 64, 300).t()
        assert torch.equal(d[start:end], want)


def test_opcheck_with_the_stand_in(cpu_grouped_w4):
    # The schema (what the operator mutates and aliases) and the autograd registration, with the
    # stand-in. Not opcheck's fake-tensor test: the fake implementation checks the arguments as the
    # CUDA kernel's launch does, CUDA tensors included (test_fake_shapes_and_dtypes runs it).
    op = torch.ops.gemmkit.grouped_w4_mm.default
    utils = ("test_schema", "test_autograd_registration")
    x, ends = torch.randn(12, 70, dtype=BF16), torch.tensor([4, 4, 12], dtype=I32)
    qweight = torch.randint(0, 256, (3, 6, 35), dtype=U8)
    scales, zeros = torch.rand(3, 3, 6, dtype=BF16), torch.randint(0, 16, (3, 3, 6)).to(BF16)
    torch.library.opcheck(op, (x, qweight, scales, zeros, ends, "contiguous", "int4", 32, None, 0), test_utils=utils)
    e = torch.randint(120, 130, (3, 6, 3), dtype=U8)
    masked = (torch.randn(3, 4, 70, dtype=F16), qweight, e, None, torch.tensor([4, 4, 4]), "masked", "mxfp4", 32, F32,
              0)
    torch.library.opcheck(op, masked, test_utils=utils)
    # (not with e4m3 x: torch has no arithmetic on FP8 tensors, which opcheck does on the inputs)


# --- on an sm_90 GPU: each group against the double-precision product ----------------------------

# Each group's rows: empty groups first, in the middle and last, one row, sizes off every multiple
# of 8 (test_grouped.py's).
SIZES = [0, 37, 0, 1, 130, 5, 0]
N = 264  # a partial tile of columns

def random_x(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def random_scales(*shape, dtype):
    """Scales in [0.5, 2) of `dtype`."""
    return (torch.rand(*shape, device="cuda") * 1.5 + 0.5).to(dtype)


def random_int4(groups, n, k, group, dtype, zeros):
    """qweight [G, n, ceil(k/2)] of random codes (an odd k's padding nibble random too), scales [G,
    ceil(k/group), n] in [0.5, 2) and zero points, whole numbers from 0 to 15, or None."""
    blocks = -(-k // group)
    qweight = torch.randint(0, 256, (groups, n, (k + 1) // 2), device="cuda", dtype=U8)
    z = torch.randint(0, 16, (groups, blocks, n), device="cuda").to(dtype) if zeros else None
    return qweight, random_scales(groups, blocks, n, dtype=dtype), z


def random_mxfp4(groups, n, k):
    """weight [G, n, ceil(k/2)] of random e2m1 codes and exponents [G, n, ceil(k/32)], uint8, of 0.5
    and 1 (126 and 127): scales in [0.5, 2)."""
    return (torch.randint(0, 256, (groups, n, (k + 1) // 2), device="cuda", dtype=U8),
            torch.randint(126, 128, (groups, n, -(-k // 32)), device="cuda", dtype=U8))


def experts_int4(qweight, scales, zeros, group, k):
    return [int4_weights(qweight[g], scales[g], None if zeros is None else zeros[g], group, k)
            for g in range(qweight.size(0))]


def experts_mxfp4(weight, e, k):
    return [mxfp4_weights(weight[g], e[g], k) for g in range(weight.size(0))]


def expect_groups(d, x, weights, sizes, x_scale=None, exact_x=False):
    """Each group's rows of d (contiguous: `sizes` its rows in order, the rows past them NaN;
    masked: `sizes` the counts, the rows past each NaN) against its product in double, W4A16's
    bounds, or W4A8's with x_scale (one, or over x's rows: one a row, 1x128 blocks or mx
    exponents) or where `exact_x` (x the activations' values in double: MXFP4 x dequantised)."""
    masked = d.dim() == 3
    for g, rows in enumerate(sizes):
        if masked:
            got, xg, past = d[g, :rows], x[g, :rows], d[g, rows:]
            sg = None if x_scale is None else x_scale if x_scale.numel() == 1 else x_scale[g, :rows]
        else:
            start = sum(sizes[:g])
            got, xg, past = d[start:start + rows], x[start:start + rows], d[:0]
            sg = None if x_scale is None else x_scale if x_scale.numel() == 1 else x_scale[start:start + rows]
        if exact_x:  # widened exactly to e4m3, then multiplied as A8W4 in MX: the FP8 products' bound
            expect_close_fp8(got, xg, weights[g])
        elif x_scale is None:
            expect_close(got, xg, weights[g])
        else:
            expect_close_fp8(got, scaled_x(xg, sg), weights[g])
        assert past.isnan().all(), f"group {g}: rows past its count written"
    if not masked:
        assert d[sum(sizes):].isnan().all(), "rows past the last end written"


@gpu
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("k", [4160, 4097])  # 32.5 groups of 128; odd, the last byte half padding
@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("offs_dtype", [I32, I64])
def test_grouped_int4_contiguous_matches_double(dtype, k, zeros, offs_dtype):
    m = sum(SIZES) + 11  # 11 rows past the last end
    x = random_x(m, k, dtype=dtype)
    qweight, scales, z = random_int4(len(SIZES), N, k, 128, dtype, zeros)
    out = nan_like((m, N), dtype)
    assert gemmkit.grouped_int4_mm(x, qweight, scales, offs_of(SIZES, offs_dtype), zeros=z, out=out) is out
    expect_groups(out, x, experts_int4(qweight, scales, z, 128, k), SIZES)


@gpu
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("k", [4160, 4097])
def test_grouped_mxfp4_contiguous_matches_double(dtype, k):
    m = sum(SIZES) + 11
    x = random_x(m, k, dtype=dtype)
    weight, e = random_mxfp4(len(SIZES), N, k)
    out = nan_like((m, N), F32)
    assert gemmkit.grouped_mxfp4_mm(x, weight, e, offs_of(SIZES), out=out) is out
    expect_groups(out, x, experts_mxfp4(weight, e, k), SIZES)
    if FLOAT4 is not None:  # the dtypes gpt-oss's checkpoints and torch name them
        out = nan_like((m, N), dtype)
        assert gemmkit.grouped_mxfp4_mm(x, weight.view(FLOAT4), e.view(E8M0), offs_of(SIZES), out=out) is out
        expect_groups(out, x, experts_mxfp4(weight, e, k), SIZES)


@gpu
@pytest.mark.parametrize("format", ["int4", "mxfp4"])
@pytest.mark.parametrize("counts_dtype", [I32, I64])
def test_masked_decode_matches_double(format, counts_dtype):
    counts, max_m, k = [0, 1, 3, 16, 5], 16, 4096  # decode: a few tokens an expert
    x = random_x(len(counts), max_m, k, dtype=BF16)
    counts_t = torch.tensor(counts, device="cuda", dtype=counts_dtype)
    out = nan_like((len(counts), max_m, N), BF16)
    if format == "int4":
        qweight, scales, z = random_int4(len(counts), N, k, 128, BF16, True)
        assert gemmkit.grouped_int4_mm(x, qweight, scales, counts=counts_t, zeros=z, out=out) is out
        weights = experts_int4(qweight, scales, z, 128, k)
    else:
        weight, e = random_mxfp4(len(counts), N, k)
        assert gemmkit.grouped_mxfp4_mm(x, weight, e, counts=counts_t, out=out) is out
        weights = experts_mxfp4(weight, e, k)
    expect_groups(out, x, weights, counts)


@gpu
@pytest.mark.parametrize("group", [32, 64, 256, 1024, 8192])  # 1024 and 8192: one scale a column (K = 1024)
def test_int4_groups_and_scale_layouts(group):
    sizes, k = [5, 0, 40, 17], 1024
    x = random_x(sum(sizes), k, dtype=BF16)
    qweight, scales, z = random_int4(len(sizes), 136, k, group, BF16, True)
    weights = experts_int4(qweight, scales, z, group, k)
    d = gemmkit.grouped_int4_mm(x, qweight, scales, offs_of(sizes), zeros=z, group=group, max_sms=8)
    expect_groups(d, x, weights, sizes)
    # The scales and zero points stored [G, N, ceil(K/group)] and passed transposed.
    st, zt = scales.transpose(1, 2).contiguous().transpose(1, 2), z.transpose(1, 2).contiguous().transpose(1, 2)
    expect_groups(gemmkit.grouped_int4_mm(x, qweight, st, offs_of(sizes), zeros=zt, group=group), x, weights, sizes)


def random_x_scale(mode, *rows, k=None):
    """Scales of e4m3 x's `rows` (K = k): float32 in [0.5, 2), 0-d (tensor), one a row (rowwise) or
    1x128 blocks [*rows, ceil(k/128)] laid out M-contiguous as quantize() lays them, each row's
    scales its rows apart (block); or mx exponents [*rows, ceil(k/32)] of 0.5, 1 and 2 (126 to
    128), uint8 (mx)."""
    if mode == "mx":
        return torch.randint(126, 129, (*rows, -(-k // 32)), device="cuda", dtype=U8)
    if mode == "block":
        return (torch.rand(*rows[:-1], -(-k // 128), rows[-1], device="cuda") * 1.5 + 0.5).transpose(-1, -2)
    return torch.rand(() if mode == "tensor" else rows, device="cuda") * 1.5 + 0.5


@gpu
@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("k", [4096, 4160])
@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("group", [128, 64])
def test_w4a8_int4_contiguous_matches_double(mode, k, zeros, group):
    # SIZES' groups start at rows 37, 38, 168 and 173: no multiple of 4, as 1x128 blocks' rows may.
    m = sum(SIZES) + 11
    x = random_x(m, k, dtype=BF16).to(E4M3)
    x_scale = random_x_scale(mode, m, k=k)
    qweight, scales, z = random_int4(len(SIZES), N, k, group, BF16, zeros)
    out = nan_like((m, N), BF16)
    assert gemmkit.grouped_int4_mm(x, qweight, scales, offs_of(SIZES), zeros=z, group=group, x_scale=x_scale,
                                   out=out) is out
    expect_groups(out, x, experts_int4(qweight, scales, z, group, k), SIZES, x_scale)
    # Per token as [M_total, 1]; 1x128 blocks row-major.
    if mode != "tensor":
        other = x_scale.unsqueeze(-1) if mode == "rowwise" else x_scale.contiguous()
        d = gemmkit.grouped_int4_mm(x, qweight, scales, offs_of(SIZES), zeros=z, group=group, x_scale=other,
                                    out=nan_like((m, N), BF16))
        expect_groups(d, x, experts_int4(qweight, scales, z, group, k), SIZES, x_scale)


@gpu
@pytest.mark.parametrize("format", ["int4", "mxfp4"])
@pytest.mark.parametrize("k", [4096, 4160])
def test_a8w4_mx_contiguous_matches_double(format, k):
    # A8W4 in MX: x's mx exponents against weights in groups of 32 of K (int4 group 32 with zero
    # points, MXFP4), uint8 and float8_e8m0fnu, row-major and M-contiguous; groups off every multiple of 4.
    m = sum(SIZES) + 11
    x = random_x(m, k, dtype=BF16).to(E4M3)
    x_scale = random_x_scale("mx", m, k=k)
    if format == "int4":
        qweight, scales, z = random_int4(len(SIZES), N, k, 32, BF16, True)
        weights = experts_int4(qweight, scales, z, 32, k)
        run = functools.partial(gemmkit.grouped_int4_mm, x, qweight, scales, offs_of(SIZES), zeros=z, group=32)
    else:
        weight, e = random_mxfp4(len(SIZES), N, k)
        weights = experts_mxfp4(weight, e, k)
        run = functools.partial(gemmkit.grouped_mxfp4_mm, x, weight, e, offs_of(SIZES))
    for exponents in (x_scale, x_scale.view(E8M0).t().contiguous().t()):
        out = nan_like((m, N), BF16)
        assert run(x_scale=exponents, out=out) is out
        expect_groups(out, x, weights, SIZES, x_scale)


@gpu
@pytest.mark.parametrize("format", ["int4", "mxfp4"])
@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block", "mx"])
def test_w4a8_masked_decode_matches_double(format, mode):
    counts, max_m, k = [0, 1, 3, 16, 5], 16, 4160
    x = random_x(len(counts), max_m, k, dtype=BF16).to(E4M3)
    x_scale = random_x_scale(mode, len(counts), max_m, k=k)  # [G, max_m] per token, [G, max_m, blocks]
    counts_t = torch.tensor(counts, device="cuda", dtype=I32)
    out = nan_like((len(counts), max_m, N), F32)
    if format == "int4":
        group = 32 if mode == "mx" else 128  # mx exponents go with weights in groups of 32 of K
        qweight, scales, z = random_int4(len(counts), N, k, group, F16, True)  # W4A8: float16 scales too
        assert gemmkit.grouped_int4_mm(x, qweight, scales, counts=counts_t, zeros=z, group=group, x_scale=x_scale,
                                       out=out) is out
        weights = experts_int4(qweight, scales, z, group, k)
    else:
        weight, e = random_mxfp4(len(counts), N, k)
        assert gemmkit.grouped_mxfp4_mm(x, weight, e, counts=counts_t, x_scale=x_scale, out=out) is out
        weights = experts_mxfp4(weight, e, k)
    expect_groups(out, x, weights, counts, x_scale)


@gpu
@pytest.mark.parametrize("mode", ["rowwise", "block", "mx"])
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_w4a8_activations_quantized_by_gemmkit(mode, layout):
    # quantize()'s scales as they come (float32 [..., 1] or [..., 32] 1x128 blocks, float8_e8m0fnu
    # [..., 64] exponents), for groups starting at rows 61 and 161 or masked.
    sizes, k = [61, 0, 100, 3], 2048
    masked = layout == "masked"
    xb = random_x(len(sizes), 100, k, dtype=BF16) if masked else random_x(sum(sizes), k, dtype=BF16)
    q, x_scale = gemmkit.quantize(xb, mode=mode)
    weight, e = random_mxfp4(len(sizes), N, k)
    groups_of = {"counts": torch.tensor(sizes, device="cuda", dtype=I32)} if masked else {"offs": offs_of(sizes)}
    d = gemmkit.grouped_mxfp4_mm(q, weight, e, x_scale=x_scale, out=nan_like((*q.shape[:-1], N), BF16), **groups_of)
    assert d.dtype == BF16 and d.shape == (*q.shape[:-1], N)
    expect_groups(d, q, experts_mxfp4(weight, e, k), sizes, x_scale)


def random_fp4_x(*rows, k):
    """MXFP4 activations: random codes [*rows, k/2] (every e2m1 value, both zeros) and uint8
    exponents [*rows, ceil(k/32)] of 0.5 and 1 (126 and 127)."""
    return (torch.randint(0, 256, (*rows, k // 2), device="cuda", dtype=U8),
            torch.randint(126, 128, (*rows, -(-k // 32)), device="cuda", dtype=U8))


def fp4_values(x, x_scale):
    """MXFP4 x [..., K/2] with its exponents [..., ceil(K/32)] as [..., K] in double."""
    k = 2 * x.size(-1)
    values = mxfp4_weights(x.reshape(-1, x.size(-1)), x_scale.reshape(-1, x_scale.size(-1)), k)
    return values.view(*x.shape[:-1], k)


def fp4_experts(weights, groups, k):
    """(call, W): a product of MXFP4 x against random experts, 'mxfp4' or 'int4 zeros' (int4 in
    groups of 32 with zero points), call(x, **keywords), and the experts' weights in double."""
    if weights == "mxfp4":
        weight, e = random_mxfp4(groups, N, k)
        return functools.partial(gemmkit.grouped_mxfp4_mm, weight=weight, scales=e), experts_mxfp4(weight, e, k)
    qweight, scales, z = random_int4(groups, N, k, 32, BF16, True)
    return (functools.partial(gemmkit.grouped_int4_mm, qweight=qweight, scales=scales, zeros=z, group=32),
            experts_int4(qweight, scales, z, 32, k))


@gpu
@pytest.mark.parametrize("weights", ["mxfp4", "int4 zeros"])
@pytest.mark.parametrize("k", [4160, 4112])  # 130 and 128.5 blocks of 32 (MXFP4 x: an even K)
def test_fp4_x_fp4_contiguous_matches_double(weights, k):
    # FP4 x FP4: SIZES' groups start at rows 37, 38, 168 and 173 (off every multiple of 16), empty
    # groups first, between and last; exponents uint8 row-major and float8_e8m0fnu M-contiguous,
    # codes uint8 and float4_e2m1fn_x2, and rows padded (a slice of wider random bytes).
    m = sum(SIZES) + 11
    x, x_scale = random_fp4_x(m, k=k)
    xs = fp4_values(x, x_scale)
    run, w = fp4_experts(weights, len(SIZES), k)
    padded = torch.randint(0, 256, (m, k // 2 + 48), device="cuda", dtype=U8)
    padded[:, 16:16 + k // 2] = x
    inputs = [(x, x_scale), (x, x_scale.view(E8M0).t().contiguous().t()), (padded[:, 16:16 + k // 2], x_scale)]
    if FLOAT4 is not None:
        inputs.append((x.view(FLOAT4), x_scale.view(E8M0)))
    for codes, exponents in inputs:
        out = nan_like((m, N), BF16)
        assert run(codes, offs=offs_of(SIZES), x_scale=exponents, out=out) is out
        expect_groups(out, xs, w, SIZES, exact_x=True)
    d = run(x, offs=offs_of(SIZES, I64), x_scale=x_scale, out_dtype=F32)
    assert d.shape == (m, N) and d.dtype == F32


@gpu
@pytest.mark.parametrize("weights", ["mxfp4", "int4 zeros"])
def test_fp4_x_fp4_masked_decode_matches_double(weights):
    counts, max_m, k = [0, 1, 3, 16, 5], 16, 4160
    x, x_scale = random_fp4_x(len(counts), max_m, k=k)
    xs = fp4_values(x, x_scale)
    run, w = fp4_experts(weights, len(counts), k)
    counts_t = torch.tensor(counts, device="cuda", dtype=I32)
    inputs = [(x, x_scale.view(E8M0))] + ([(x.view(FLOAT4), x_scale)] if FLOAT4 is not None else [])
    for codes, exponents in inputs:
        out = nan_like((len(counts), max_m, N), F32)
        assert run(codes, counts=counts_t, x_scale=exponents, out=out) is out
        expect_groups(out, xs, w, counts, exact_x=True)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_fp4_activations_quantized_by_gemmkit(layout):
    # quantize_mxfp4's codes and exponents (M-contiguous, as it returns them), for groups starting
    # at rows 61 and 161 or masked.
    sizes, k = [61, 0, 100, 3], 2048
    masked = layout == "masked"
    xb = random_x(len(sizes) * 100 if masked else sum(sizes), k, dtype=BF16)
    q, x_scale = gemmkit.quantize_mxfp4(xb)
    if masked:
        q, x_scale = q.view(len(sizes), 100, k // 2), x_scale.contiguous().view(len(sizes), 100, k // 32)
    weight, e = random_mxfp4(len(sizes), N, k)
    groups_of = {"counts": torch.tensor(sizes, device="cuda", dtype=I32)} if masked else {"offs": offs_of(sizes)}
    d = gemmkit.grouped_mxfp4_mm(q, weight, e, x_scale=x_scale, out=nan_like((*q.shape[:-1], N), BF16), **groups_of)
    assert d.dtype == BF16 and d.shape == (*q.shape[:-1], N)
    expect_groups(d, fp4_values(q, x_scale), experts_mxfp4(weight, e, k), sizes, exact_x=True)


@gpu
@pytest.mark.parametrize("format", ["int4", "mxfp4"])
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_fused_epilogue_matches_double(format, layout):
    # A per-expert bias and silu, each token's router weight, the activation's input kept, and each
    # expert's sum of it (db[n], one an expert; an empty expert's 0): D, pre and db against the
    # epilogue in double on each group's product (W4A16's bound, through silu's slope of at most 1.1).
    masked, k = layout == "masked", 2880
    sizes = [0, 1, 3, 16, 5] if masked else SIZES
    groups = len(sizes)
    rows = (groups, 16) if masked else (sum(sizes) + 11,)
    x = random_x(*rows, k, dtype=BF16)
    bias, route = random_x(groups, N, dtype=BF16), random_scales(*rows, dtype=F32)
    out, pre = nan_like((*rows, N), BF16), nan_like((*rows, N), BF16)
    db = torch.full((groups, N), float("nan"), device="cuda")
    fused = dict(epilogue="h = acc + bias[n]; pre[m, n] = h; db[n] = sum(h); silu(h) * route[m]", bias=bias,
                 route=route, pre=pre, db=db, out=out)
    sizes_t = torch.tensor(sizes, device="cuda", dtype=I32) if masked else offs_of(sizes)
    groups_of = {"counts": sizes_t} if masked else {"offs": sizes_t}
    if format == "int4":
        qweight, scales, z = random_int4(groups, N, k, 128, BF16, True)
        assert gemmkit.grouped_int4_mm(x, qweight, scales, zeros=z, **groups_of, **fused) is out
        weights = experts_int4(qweight, scales, z, 128, k)
    else:
        weight, e = random_mxfp4(groups, N, k)
        assert gemmkit.grouped_mxfp4_mm(x, weight, e, **groups_of, **fused) is out
        weights = experts_mxfp4(weight, e, k)
    for g, start, end in spans(sizes):
        at = (g, slice(0, end - start)) if masked else (slice(start, end),)
        xg = x[at].double()
        h = xg @ weights[g].t() + bias[g].double()
        bound = (xg.abs() @ weights[g].abs().t()) * (HALF_ULP[BF16] + 1e-5)
        r = route[at].double()[:, None]
        expect_near(pre[at], h, bound)
        expect_near(out[at], torch.nn.functional.silu(h) * r, bound * 1.1 * r.abs())
        expect_near(db[g], h.sum(0), bound.sum(0) + h.abs().sum(0) * 2.0 ** -16)  # f32 adds, tile by tile
        if masked:
            past = (g, slice(end - start, None))
            assert out[past].isnan().all() and pre[past].isnan().all(), f"group {g}: rows past its count written"
    if not masked:
        assert out[sum(sizes):].isnan().all() and pre[sum(sizes):].isnan().all(), "rows past the last end written"


@gpu
def test_compiled_graphed_with_new_sizes_and_not_differentiable():
    k, groups = 4096, 4
    x = random_x(160, k, dtype=BF16)
    qweight, scales, z = random_int4(groups, N, k, 64, BF16, True)
    weight, e = random_mxfp4(groups, N, k)
    offs = offs_of([40, 0, 60, 50])

    def both(x):
        return (gemmkit.grouped_int4_mm(x, qweight, scales, offs, zeros=z, group=64),
                gemmkit.grouped_mxfp4_mm(x, weight, e, offs))

    eager = both(x)
    compiled = torch.compile(both, fullgraph=True)(x)
    rows = 150  # the rows groups own: past them, undefined
    assert all(torch.equal(c[:rows], d[:rows]) for c, d in zip(compiled, eager))
    graph, captured = capture(lambda: both(x))
    offs.copy_(offs_of([10, 70, 0, 80]))  # new sizes in the same offs: replayed with them
    graph.replay()
    torch.cuda.synchronize()
    expect_groups(captured[0], x, experts_int4(qweight, scales, z, 64, k), [10, 70, 0, 80])  # every row owned
    expect_groups(captured[1], x, experts_mxfp4(weight, e, k), [10, 70, 0, 80])
    offs.copy_(offs_of([40, 0, 60, 50]))
    d = gemmkit.grouped_int4_mm(x.clone().requires_grad_(), qweight, scales, offs, zeros=z, group=64)
    assert torch.equal(d.detach()[:rows], eager[0][:rows])
    with pytest.raises(RuntimeError, match=r"^gemmkit: grouped_int4_mm \(4-bit weights\) is not differentiable"):
        d.sum().backward()
