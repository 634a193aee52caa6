"""gemmkit.int4_mm and gemmkit.mxfp4_mm, products with 4-bit weights W [N, K] stored as [N,
ceil(K/2)] bytes. Without a GPU: the views the binding makes of the bytes (u4 or e2m1, K x N,
strides in nibbles), the launch's arguments as the C++ checks see them (CPU tensors, refused only
for their memory), the operator's fake implementation under fake CUDA tensors (output shapes,
dtypes, one traced operator), the argument errors, the backward's refusal, and the reference's
own reading of the bytes. On an sm_90 GPU (those tests skip, saying so, elsewhere): the products
against a double-precision product of the weights dequantised exactly, allowed one rounding of
each weight to x's type (2^-8 of sum |x||w| for bfloat16, 2^-11 for float16) and 1e-5 of it for
the float32 sums, as tests/gpu/lowbit_test.cpp's reference (src/reference/compare.h), plus two
roundings of the output (lowbit_reference.py, shared with test_grouped_lowbit.py); then layouts, out=, torch.compile, CUDA graphs and autograd. int4_mm
with float8_e4m3fn x and its x_scale (W4A8) likewise: without a GPU its fake shapes, tracing,
argument errors and backward; on the GPU against x * x_scale times the same weights in double,
within the FP8 products' bound (tests/python/gpu_reference.py's FP8_SUMS, 2^-10 of sum |x||w|)
and two roundings of the output. A8W4 in MX (x_scale mx exponents, one a row per 32 of K, against
MXFP4 weights or int4 in groups of 32) the same way, x dequantised as x * 2^(e - 127); FP4 x FP4
(x MXFP4 activations, [M, K/2] bytes of e2m1 codes with those exponents) likewise, x's codes
dequantised as the MXFP4 weights' are, within the same FP8 bound (gemm() widens them exactly to
e4m3). Needs torch; skips, saying so, without it."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import cuda, on_stream_zero, refused_for_memory_alone  # noqa: E402
from gpu_reference import capture  # noqa: E402
from lowbit_reference import (codes_of, expect_close, expect_close_fp8, int4_weights, mxfp4_weights,  # noqa: E402
                              scaled_x)

import gemmkit  # noqa: E402
from gemmkit import DType, _gemmkit, _torch  # noqa: E402

BF16, F16, F32, U8, E8M0 = torch.bfloat16, torch.float16, torch.float32, torch.uint8, torch.float8_e8m0fnu
E4M3 = torch.float8_e4m3fn
FLOAT4 = getattr(torch, "float4_e2m1fn_x2", None)
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")


def test_the_reference_reads_the_low_nibble_first():
    w = torch.tensor([[0x21, 0xF3], [0x8C, 0x07]], dtype=U8)
    assert codes_of(w, 3).tolist() == [[1, 2, 3], [12, 8, 7]]  # K = 3: the last high nibble is padding
    scales = torch.tensor([[1.0, 0.5], [2.0, 4.0]], dtype=BF16)  # [ceil(3/2), N]: groups of 2
    assert int4_weights(w, scales, None, 2, 3).tolist() == [[-7.0, -6.0, -10.0], [2.0, 0.0, -4.0]]
    zeros = torch.tensor([[1.0, 8.0], [3.0, 7.0]], dtype=BF16)
    assert int4_weights(w, scales, zeros, 2, 3).tolist() == [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    e = torch.tensor([[127], [129]], dtype=U8)  # [N, ceil(3/32)]: 1 and 4
    assert mxfp4_weights(w, e, 3).tolist() == [[0.5, 1.0, 1.5], [-8.0, -0.0, 24.0]]
    assert mxfp4_weights(w, e.view(E8M0), 3).tolist() == mxfp4_weights(w, e, 3).tolist()


# --- without a GPU: the package, the binding's views, the launch's arguments -----------------------

def test_the_functions_are_the_packages():
    for name in ("int4_mm", "mxfp4_mm"):
        assert getattr(gemmkit, name) is getattr(_torch, name) and name in gemmkit.__all__
    assert hasattr(torch.ops.gemmkit, "w4_mm") and hasattr(torch.ops.gemmkit, "w4_mm_out")


def test_the_binding_views_bytes_as_k_x_n_nibbles():
    storage = torch.zeros(10, 40, dtype=U8)
    w = storage[:, 3:36]  # N = 10, 33 bytes a row, rows 40 bytes apart: K = 65 or 66
    v = _gemmkit.packed_weight_view_of(w, DType.u4, 65, "qweight")
    assert (v.data, v.dtype, v.shape, v.strides) == (w.data_ptr(), DType.u4, [65, 10], [1, 80])
    v = _gemmkit.packed_weight_view_of(w, DType.e2m1, 66, "weight")
    assert (v.dtype, v.shape, v.strides) == (DType.e2m1, [66, 10], [1, 80])
    if FLOAT4 is not None:  # the dtype is the caller's to check
        f = torch.zeros(4, 16, dtype=U8).view(FLOAT4)
        assert _gemmkit.packed_weight_view_of(f, DType.e2m1, 32, "weight").strides == [1, 32]
    with pytest.raises(ValueError, match=r"^qweight: 1 dimensions; expected 2, \[N, ceil\(K/2\)\] bytes, or 3, "
                                         r"\[G, N, ceil\(K/2\)\]$"):
        _gemmkit.packed_weight_view_of(storage.view(400), DType.u4, 80, "qweight")
    with pytest.raises(ValueError, match=r"^weight: shape \[10, 33\]; expected \[N, ceil\(K/2\)\] = \[10, 34\] bytes "
                                         r"for K = 67$"):
        _gemmkit.packed_weight_view_of(w, DType.e2m1, 67, "weight")
    with pytest.raises(ValueError, match=r"^qweight: strides \[1, 10\]; expected the bytes along K contiguous"):
        _gemmkit.packed_weight_view_of(torch.zeros(33, 10, dtype=U8).t(), DType.u4, 66, "qweight")
    with pytest.raises(ValueError, match="^qweight: dtype bf16; expected u4 or e2m1$"):
        _gemmkit.packed_weight_view_of(w, DType.bf16, 66, "qweight")


def raises_each(cases):
    """Each (error, message, call) of `cases`: call() raises `error`, its text matching `message`."""
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


@pytest.fixture
def cpu_launch(monkeypatch):
    """_torch.launch_w4 on CPU tensors, on stream 0."""
    on_stream_zero(monkeypatch)
    return _torch.launch_w4


def test_the_launch_passes_the_views_the_c_api_takes(cpu_launch):
    m, n, k = 3, 10, 4097  # odd K: 2049 bytes a row
    x, out = torch.zeros(m, k, dtype=BF16), torch.zeros(m, n, dtype=F32)
    qweight = torch.zeros(n, 2056, dtype=U8)[:, :2049]  # rows padded to 2056 bytes
    scales, zeros = torch.zeros(33, n, dtype=BF16), torch.zeros(n, 33, dtype=BF16).t()  # any strides
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales, zeros, "int4", 128, out))
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales[:1], None, "int4", 8192, out))  # per column
    # gemmkit's own checks see B = W^T (K x N) and scales [ceil(K/group), N] as given.
    with pytest.raises(ValueError, match=r"^scale_b: shape \[33, 10\]; expected ceil\(K/64\) x N = 65 x 10"):
        cpu_launch(x, qweight, scales, None, "int4", 64, out)
    with pytest.raises(ValueError, match=r"^scale_b: dtype f16; expected bf16 \(A's dtype\)"):
        cpu_launch(x, qweight, scales.half(), None, "int4", 128, out)
    # MXFP4: scales [N, ceil(K/32)] pass transposed, B's ceil(K/32) x N, uint8 read as e8m0.
    e = torch.zeros(n, 129, dtype=U8)
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, e, None, "mxfp4", 32, out))
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, e.view(E8M0), None, "mxfp4", 32, out))
    with pytest.raises(ValueError, match=r"^scale_b: shape \[10, 129\]; expected ceil\(K/32\) x N = 129 x 10"):
        cpu_launch(x, qweight, e.t().contiguous(), None, "mxfp4", 32, out)  # [129, N] given: the wrong way round
    with pytest.raises(ValueError, match=r"^qweight: shape \[10, 2049\]; expected \[N, ceil\(K/2\)\] = \[10, 2048\]"):
        cpu_launch(x[:, :4096], qweight, scales, None, "int4", 128, out)


def test_the_w4a8_launch_passes_x_scale_as_a_scales(cpu_launch):
    m, n, k = 3, 10, 4096
    x, out = torch.zeros(m, k, dtype=E4M3), torch.zeros(m, n, dtype=BF16)
    qweight, scales = torch.zeros(n, k // 2, dtype=U8), torch.zeros(32, n, dtype=BF16)
    # Per tensor (0-d), per token ([M, 1] and [M]), 1x128 blocks ([M, 32], M-contiguous as quantize() lays them).
    for x_scale in (torch.ones(()), torch.ones(m, 1), torch.ones(m), torch.ones(32, m).t()):
        refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales, None, "int4", 128, out, x_scale))
    refused_for_memory_alone(lambda: cpu_launch(x, qweight, scales.half(), scales.half(), "int4", 128, out,
                                                torch.ones(m, 1)))


def test_the_a8w4_mx_launch_passes_x_scale_as_mx_scales(cpu_launch):
    m, n, k = 3, 10, 4096
    x, out = torch.zeros(m, k, dtype=E4M3), torch.zeros(m, n, dtype=BF16)
    qweight = torch.zeros(n, k // 2, dtype=U8)
    # MXFP8 activations: one exponent a row per 32 of K, [M, ceil(K/32)], uint8 read as e8m0; against
    # int4 in groups of 32 and against MXFP4, as gemm()'s scale_a in mode mx.
    for x_scale in (torch.zeros(m, 128, dtype=U8), torch.zeros(m, 128, dtype=U8).view(E8M0),
                    torch.zeros(128, m, dtype=U8).t()):
        refused_for_memory_alone(lambda: cpu_launch(x, qweight, torch.zeros(128, n, dtype=BF16), None, "int4", 32,
                                                    out, x_scale))
        refused_for_memory_alone(lambda: cpu_launch(x, qweight, torch.zeros(n, 128, dtype=U8), None, "mxfp4", 32,
                                                    out, x_scale))
    # gemm() itself refuses them against other groups, naming scale_a (check_w4 refuses them first).
    with pytest.raises(ValueError, match=r"^scale_a: mode mx with B in groups of 128 with 4-bit weights B; expected"):
        cpu_launch(x, qweight, torch.zeros(32, n, dtype=BF16), None, "int4", 128, out, torch.zeros(m, 128, dtype=U8))


def test_the_binding_views_mxfp4_activations_as_m_x_k_codes():
    storage = torch.zeros(5, 40, dtype=U8)
    x = storage[:, 3:35]  # M = 5, 32 bytes a row, rows 40 bytes apart: K = 64
    v = _gemmkit.packed_activation_view_of(x, "x")
    assert (v.data, v.dtype, v.shape, v.strides) == (x.data_ptr(), DType.e2m1, [5, 64], [80, 1])
    if FLOAT4 is not None:
        assert _gemmkit.packed_activation_view_of(x.view(FLOAT4), "x").shape == [5, 64]
    with pytest.raises(ValueError, match=r"^x: 4 dimensions; expected 2, \[M, K/2\] bytes of MXFP4 activations, or "
                                         r"3, \[G, max_m, K/2\]$"):
        _gemmkit.packed_activation_view_of(storage.view(5, 2, 2, 10), "x")
    with pytest.raises(ValueError, match=r"^x: strides \[1, 5\]; expected the bytes along K contiguous"):
        _gemmkit.packed_activation_view_of(torch.zeros(32, 5, dtype=U8).t(), "x")


def test_the_fp4_launch_passes_x_as_an_e2m1_a(cpu_launch):
    m, n, k = 3, 10, 4160
    x, out = torch.randint(0, 256, (m, k // 2), dtype=U8), torch.zeros(m, n, dtype=BF16)
    qweight, weight = torch.zeros(n, k // 2, dtype=U8), torch.zeros(n, k // 2, dtype=U8)
    scales, e = torch.zeros(130, n, dtype=BF16), torch.zeros(n, 130, dtype=U8)
    # MXFP4 activations: gemm() sees A, M x K of e2m1, with its exponents [M, ceil(K/32)] as scale_a in
    # mode mx, against MXFP4 and int4 in groups of 32; uint8 (or float4) codes, exponents of either dtype.
    codes = (x,) + ((x.view(FLOAT4),) if FLOAT4 is not None else ())
    for xs in codes:
        for x_scale in (torch.zeros(m, 130, dtype=U8), torch.zeros(m, 130, dtype=U8).view(E8M0),
                        torch.zeros(130, m, dtype=U8).t()):
            refused_for_memory_alone(lambda: cpu_launch(xs, weight, e, None, "mxfp4", 32, out, x_scale))
            refused_for_memory_alone(lambda: cpu_launch(xs, qweight, scales, scales, "int4", 32, out, x_scale))
    # gemm()'s own checks of an e2m1 A (check_w4 refuses these first): its exponents, its weights' groups.
    with pytest.raises(ValueError, match=r"^scale_a: mode none for e2m1 activations A; expected mx"):
        cpu_launch(x, weight, e, None, "mxfp4", 32, out)
    with pytest.raises(ValueError, match=r"^scale_a: mode mx with B in groups of 128 with 4-bit weights B"):
        cpu_launch(x, qweight, torch.zeros(33, n, dtype=BF16), None, "int4", 128, out, torch.zeros(m, 130, dtype=U8))


# --- without a GPU: the operator under fake tensors, as torch.compile traces it --------------------

def int4_args(m, n, k, group=128, dtype=BF16, zeros=False):
    """Fake CUDA x [m, k], qweight, scales (and zeros) for int4_mm (inside the `fake` fixture)."""
    scales = cuda(-(-k // group), n, dtype=dtype)
    return cuda(m, k, dtype=dtype), cuda(n, (k + 1) // 2, dtype=U8), scales, cuda(*scales.shape, dtype=dtype) if zeros \
        else None


def mxfp4_args(m, n, k, dtype=BF16, weights=U8, scales=U8):
    return cuda(m, k, dtype=dtype), cuda(n, (k + 1) // 2, dtype=weights), cuda(n, -(-k // 32), dtype=scales)


W4_MM = (torch.ops.gemmkit.w4_mm, torch.ops.gemmkit.w4_mm.default)  # as a graph may record them
W4_MM_OUT = (torch.ops.gemmkit.w4_mm_out, torch.ops.gemmkit.w4_mm_out.default)


def test_fake_shapes_and_dtypes(fake):
    n = 4095
    x, qweight, scales, zeros = int4_args(33, n, 4160, zeros=True)
    for d, shape, dtype in [
            (gemmkit.int4_mm(x, qweight, scales), (33, n), BF16),
            (gemmkit.int4_mm(x, qweight, scales, zeros, out_dtype=F32), (33, n), F32),
            (gemmkit.int4_mm(x.view(3, 11, 4160), qweight, scales), (3, 11, n), BF16),  # leading dimensions
            (gemmkit.int4_mm(x[0], qweight, scales), (n,), BF16),  # one row, 1-D
            (gemmkit.int4_mm(x.t().contiguous().t(), qweight, scales.t().contiguous().t()), (33, n), BF16),
            (gemmkit.int4_mm(*int4_args(16, n, 4097, 32, F16, True)[:3], group=32), (16, n), F16),
            (gemmkit.int4_mm(*int4_args(16, n, 4097, 8192, F16)[:3], group=8192), (16, n), F16),  # per column
            (gemmkit.int4_mm(*int4_args(1, n, 4097, 4097)[:3], group=4097), (1, n), BF16),  # K itself
            (gemmkit.mxfp4_mm(*mxfp4_args(33, n, 4097)), (33, n), BF16),
            (gemmkit.mxfp4_mm(*mxfp4_args(2, n, 4160, F16, scales=E8M0), out_dtype=BF16), (2, n), BF16)]:
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    if FLOAT4 is not None:
        d = gemmkit.mxfp4_mm(*mxfp4_args(4, n, 4160, weights=FLOAT4, scales=E8M0))
        assert tuple(d.shape) == (4, n) and d.dtype == BF16
    out = cuda(3, 11, n, dtype=F32)
    assert gemmkit.int4_mm(x.view(3, 11, 4160), qweight, scales, out=out) is out
    out = cuda(33, n, dtype=F16)
    assert gemmkit.mxfp4_mm(*mxfp4_args(33, n, 4097, F16), out=out, out_dtype=F16) is out


def test_a_traced_call_is_one_operator_with_the_format_and_group(fake):
    def layer(x, qweight, scales, zeros, weight, e):
        h = gemmkit.int4_mm(x, qweight, scales, zeros, group=64).relu()
        return gemmkit.mxfp4_mm(h, weight, e, out_dtype=F32)

    x, qweight, scales, zeros = int4_args(8, 256, 1000, 64, zeros=True)
    args = (x.view(2, 4, 1000), qweight, scales, zeros, *mxfp4_args(1, 96, 256)[1:])
    graph, _ = torch._dynamo.export(layer)(*args)  # raises where dynamo would break the graph
    calls = [node for node in graph.graph.nodes if node.target in W4_MM]
    assert [node.args[4:] for node in calls] == [("int4", 64, None), ("mxfp4", 32, torch.float32)]
    d = graph(*args)
    assert tuple(d.shape) == (2, 4, 96) and d.dtype == F32
    graph, _ = torch._dynamo.export(lambda x, q, s, o: gemmkit.int4_mm(x, q, s, group=64, out=o))(
        *args[:3], cuda(2, 4, 256))
    assert [node.args[5:] for node in graph.graph.nodes if node.target in W4_MM_OUT] == [("int4", 64)]


def w4a8_args(m, n, k, group=128, scales_dtype=BF16, zeros=False):
    """Fake CUDA e4m3 x [m, k], qweight, scales (and zeros) for int4_mm with x_scale."""
    scales = cuda(-(-k // group), n, dtype=scales_dtype)
    return (cuda(m, k, dtype=E4M3), cuda(n, (k + 1) // 2, dtype=U8), scales,
            cuda(*scales.shape, dtype=scales_dtype) if zeros else None)


def test_w4a8_fake_shapes_dtypes_and_x_scale_forms(fake):
    n, k = 4095, 4160  # 32.5 blocks of 128: x_scale's blocks are ceil(K/128) = 33
    x, qweight, scales, zeros = w4a8_args(33, n, k, zeros=True)
    x3 = x.view(3, 11, k)
    for d, shape, dtype in [
            (gemmkit.int4_mm(x, qweight, scales, x_scale=cuda((), dtype=F32)), (33, n), BF16),  # 0-d: per tensor
            (gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(1, dtype=F32)), (33, n), BF16),  # one element
            (gemmkit.int4_mm(x, qweight, scales, zeros, x_scale=cuda(33, 1, dtype=F32)), (33, n), BF16),  # per token
            (gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(33, dtype=F32)), (33, n), BF16),  # per token, 1-D
            (gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(33, 33, dtype=F32)), (33, n), BF16),  # 1x128 blocks
            (gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(33, 33, dtype=F32), out_dtype=F32), (33, n), F32),
            (gemmkit.int4_mm(x3, qweight, scales, x_scale=cuda(3, 11, 1, dtype=F32)), (3, 11, n), BF16),
            (gemmkit.int4_mm(x3, qweight, scales, x_scale=cuda(3, 11, 33, dtype=F32)), (3, 11, n), BF16),
            (gemmkit.int4_mm(x[0], qweight, scales, x_scale=cuda(33, dtype=F32)), (n,), BF16),  # one row's blocks
            (gemmkit.int4_mm(*w4a8_args(16, n, k, 256, F16, True), x_scale=cuda((), dtype=F32), group=256), (16, n), BF16),
            (gemmkit.int4_mm(*w4a8_args(4, n, 64, 64)[:3], x_scale=cuda(4, 1, dtype=F32), group=64), (4, n), BF16),
            (gemmkit.int4_mm(*w4a8_args(4, n, 100, 8192)[:3], x_scale=cuda(4, 1, dtype=F32), group=8192), (4, n),
             BF16)]:  # groups under 128 where one covers K: one scale a column
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    out = cuda(3, 11, n, dtype=F16)
    assert gemmkit.int4_mm(x3, qweight, scales, x_scale=cuda(33, dtype=F32), out=out) is out
    # The scales' forms, as the operator reads them for x's rows.
    assert [_torch.x_scale_mode(cuda(shape, dtype=F32), 33, k) for shape in ((), (1, 1), (33, 1), (33,), (33, 33),
                                                                               (33, 32), (1, 33))] == [
        "tensor", "tensor", "rowwise", "rowwise", "block", None, None]


def test_a8w4_mx_fake_shapes_dtypes_and_x_scale_forms(fake):
    n, k = 4095, 4160  # 130 blocks of 32
    x = cuda(33, k, dtype=E4M3)
    x3 = x.view(3, 11, k)
    _, weight, e = mxfp4_args(33, n, k)
    _, qweight, scales, zeros = w4a8_args(33, n, k, 32, F16, True)
    for d, shape, dtype in [
            (gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(33, 130, dtype=E8M0)), (33, n), BF16),
            (gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(33, 130, dtype=U8), out_dtype=F32), (33, n), F32),
            (gemmkit.mxfp4_mm(x3, weight, e, x_scale=cuda(3, 11, 130, dtype=E8M0)), (3, 11, n), BF16),  # x's rows
            (gemmkit.mxfp4_mm(x[0], weight, e, x_scale=cuda(130, dtype=U8)), (n,), BF16),  # one row's exponents
            (gemmkit.int4_mm(x, qweight, scales, zeros, group=32, x_scale=cuda(33, 130, dtype=U8)), (33, n), BF16),
            (gemmkit.int4_mm(x3, qweight, scales, group=32, x_scale=cuda(3, 11, 130, dtype=E8M0)), (3, 11, n), BF16),
            (gemmkit.mxfp4_mm(cuda(2, 20, dtype=E4M3), *mxfp4_args(2, n, 20)[1:], x_scale=cuda(2, 1, dtype=U8)),
             (2, n), BF16),  # K < 32: one exponent a row (e2m1's blocks are 32 of K whatever K is)
            (gemmkit.mxfp4_mm(cuda(20, dtype=E4M3), *mxfp4_args(1, n, 20)[1:], x_scale=cuda(1, dtype=U8)), (n,),
             BF16)]:
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    out = cuda(3, 11, n, dtype=F16)
    assert gemmkit.mxfp4_mm(x3, weight, e, x_scale=cuda(3, 11, 130, dtype=U8), out=out) is out
    # The mode is the dtype's: exponents are mx, of [M, ceil(K/32)] only; float32 ones keep their forms.
    assert [_torch.x_scale_mode(cuda(shape, dtype=dtype), 33, k) for shape, dtype in (
        ((33, 130), E8M0), ((33, 130), U8), ((33, 33), E8M0), ((33, 1), U8), ((), U8), ((33, 130), F32),
        ((33, 33), F32))] == ["mx", "mx", None, None, None, None, "block"]
    assert _torch.x_scale_mode(cuda(1, 1, dtype=U8), 1, 32) == "mx"


def test_a_traced_a8w4_mx_call_carries_the_exponents_for_the_rows(fake):
    def layer(x, weight, e, x_scale):
        return gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale, out_dtype=F32)

    x, weight, e = mxfp4_args(8, 256, 1000)
    args = (x.to(E4M3).view(2, 4, 1000), weight, e, cuda(2, 4, 32, dtype=E8M0))  # ceil(1000/32) = 32
    graph, _ = torch._dynamo.export(layer)(*args)
    calls = [node for node in graph.graph.nodes if node.target in W4_MM]
    assert [node.args[4:] for node in calls] == [("mxfp4", 32, torch.float32)]
    example = calls[0].kwargs["x_scale"].meta["example_value"]
    assert example.shape == (8, 32) and example.dtype == E8M0  # x's rows' exponents
    d = graph(*args)
    assert tuple(d.shape) == (2, 4, 256) and d.dtype == F32


def test_a8w4_mx_errors_name_x_scale(fake):
    x, qweight, scales, _ = w4a8_args(8, 64, 256)
    _, weight, e = mxfp4_args(8, 64, 256)
    exponents = cuda(8, 8, dtype=U8)  # ceil(256/32) = 8
    mx_forms = (r"; or float8_e8m0fnu or uint8 exponents \[\.\.\., ceil\(K/32\)\] = \[\.\.\., 8\] \(mx, MXFP8: "
                r"2\^\(e - 127\) per 32 of K\)$")
    cases = [
        (ValueError, r"^x_scale: dtype torch.uint8, mx exponents \(MXFP8\), against int4 weights in groups of 128; "
                     r"expected mx exponents only against weights in groups of 32 of K \(mxfp4_mm, or int4_mm with "
                     r"group=32 and K > 32\), else float32 scales: one element",
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=exponents)),
        (ValueError, r"^x_scale: dtype torch.float8_e8m0fnu, mx exponents \(MXFP8\), against int4 weights in groups "
                     r"of 64;",
         lambda: gemmkit.int4_mm(x, qweight, cuda(4, 64), group=64, x_scale=exponents.view(E8M0))),
        (ValueError, r"^x_scale: dtype torch.uint8, mx exponents \(MXFP8\), against int4 weights in groups of 32, one "
                     r"covering all of K = 32;",  # one group a column: gemm() takes it so
         lambda: gemmkit.int4_mm(cuda(8, 32, dtype=E4M3), cuda(64, 16, dtype=U8), cuda(1, 64), group=32,
                                 x_scale=cuda(8, 1, dtype=U8))),
        (ValueError, r"^x_scale: shape \[8, 2\]; expected one element .*" + mx_forms,  # 1x128 blocks' shape
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(8, 2, dtype=E8M0))),
        (ValueError, r"^x_scale: shape \[8, 8\]; expected one element .*" + mx_forms,  # float32 of the mx shape
         lambda: gemmkit.int4_mm(x, qweight, cuda(8, 64), group=32, x_scale=cuda(8, 8, dtype=F32))),
        (ValueError, r"^x_scale: shape \[8, 7\]; expected",
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(8, 7, dtype=U8))),
        (TypeError, r"^x_scale: dtype torch.int8; expected float32 \(or float8_e8m0fnu or uint8 mx exponents\)$",
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=exponents.view(torch.int8))),
        (ValueError, r"^x_scale: None with float8_e4m3fn x; expected x's float32 scales: one element .*" + mx_forms,
         lambda: gemmkit.mxfp4_mm(x, weight, e)),
        (ValueError, r"^x_scale: given with torch.bfloat16 x; expected None",
         lambda: gemmkit.mxfp4_mm(cuda(8, 256), weight, e, x_scale=exponents)),
    ]
    raises_each(cases)
    with pytest.raises(ValueError, match="^x_scale: on cpu; expected a CUDA tensor$"):
        gemmkit.mxfp4_mm(x, weight, e, x_scale=torch.zeros(8, 8, dtype=U8))


def fp4_args(m, k, x_dtype=U8, scale_dtype=E8M0):
    """Fake CUDA MXFP4 activations x [m, k/2] and their exponents [m, ceil(k/32)]."""
    return cuda(m, k // 2, dtype=x_dtype), cuda(m, -(-k // 32), dtype=scale_dtype)


def test_fp4_fake_shapes_dtypes_and_x_scale_forms(fake):
    n, k = 4095, 4160  # 2080 bytes of x a row, 130 exponents
    x, x_scale = fp4_args(33, k)
    x3, x_scale3 = x.view(3, 11, k // 2), x_scale.view(3, 11, 130)
    _, weight, e = mxfp4_args(33, n, k)
    _, qweight, scales, zeros = w4a8_args(33, n, k, 32, F16, True)
    for d, shape, dtype in [
            (gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale), (33, n), BF16),  # bfloat16, as for e4m3 x
            (gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale.view(U8), out_dtype=F32), (33, n), F32),
            (gemmkit.mxfp4_mm(x3, weight, e, x_scale=x_scale3), (3, 11, n), BF16),  # x's rows, K from the bytes
            (gemmkit.mxfp4_mm(x[0], weight, e, x_scale=x_scale[0]), (n,), BF16),  # one row's codes and exponents
            (gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(130, 33, dtype=U8).t()), (33, n), BF16),  # M-contiguous
            (gemmkit.int4_mm(x, qweight, scales, zeros, group=32, x_scale=x_scale), (33, n), BF16),
            (gemmkit.int4_mm(x3, qweight, scales.to(BF16), group=32, x_scale=x_scale3, out_dtype=F16), (3, 11, n),
             F16),
            (torch.ops.gemmkit.w4_mm(x, weight, e, None, "mxfp4", 32, None, x_scale=x_scale), (33, n), BF16),
            (gemmkit.mxfp4_mm(*fp4_args(2, 20)[:1], *mxfp4_args(2, n, 20)[1:], x_scale=fp4_args(2, 20)[1]), (2, n),
             BF16)]:  # K = 20 < 32: one exponent a row, as for MXFP4 weights
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    if FLOAT4 is not None:
        d = gemmkit.mxfp4_mm(x.view(FLOAT4), weight.view(FLOAT4), e, x_scale=x_scale)
        assert tuple(d.shape) == (33, n) and d.dtype == BF16
    out = cuda(3, 11, n, dtype=F32)
    assert gemmkit.mxfp4_mm(x3, weight, e, x_scale=x_scale3, out=out) is out
    assert gemmkit.int4_mm(x3, qweight, scales, group=32, x_scale=x_scale3, out=out) is out
    assert [_torch.x_k(t) for t in (x, x3, x.view(E4M3), cuda(3, 7))] == [k, k, k // 2, 7]


def test_a_traced_fp4_call_carries_the_codes_and_exponents_for_the_rows(fake):
    def layer(x, weight, e, x_scale):
        return gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale, out_dtype=F32)

    _, weight, e = mxfp4_args(8, 256, 1000)
    args = (cuda(2, 4, 500, dtype=U8), weight, e, cuda(2, 4, 32, dtype=U8))  # K = 1000: 500 bytes, 32 exponents
    graph, _ = torch._dynamo.export(layer)(*args)
    calls = [node for node in graph.graph.nodes if node.target in W4_MM]
    assert [node.args[4:] for node in calls] == [("mxfp4", 32, torch.float32)]
    codes, exponents = calls[0].args[0].meta["example_value"], calls[0].kwargs["x_scale"].meta["example_value"]
    assert (codes.shape, codes.dtype, exponents.shape, exponents.dtype) == ((8, 500), U8, (8, 32), U8)
    d = graph(*args)
    assert tuple(d.shape) == (2, 4, 256) and d.dtype == F32
    graph, _ = torch._dynamo.export(lambda x, q, s, xs, o: gemmkit.int4_mm(x, q, s, group=32, x_scale=xs, out=o))(
        args[0], cuda(256, 500, dtype=U8), cuda(32, 256), args[3], cuda(2, 4, 256))
    assert [node.args[5:] for node in graph.graph.nodes if node.target in W4_MM_OUT] == [("int4", 32)]


def test_fp4_errors_name_the_argument(fake):
    x, x_scale = fp4_args(8, 256)  # 128 bytes a row, 8 exponents
    _, weight, e = mxfp4_args(8, 64, 256)
    _, qweight, scales, _ = w4a8_args(8, 64, 256, 32)
    mx_forms = (r"float8_e8m0fnu or uint8 exponents \[\.\.\., ceil\(K/32\)\] = \[\.\.\., 8\] \(mx, MXFP4: 2\^\(e - "
                r"127\) per 32 of K\)$")
    cases = [
        (ValueError, r"^x_scale: None with MXFP4 activations x \(torch.uint8\); expected their " + mx_forms,
         lambda: gemmkit.mxfp4_mm(x, weight, e)),
        (ValueError, r"^x_scale: None with MXFP4 activations x",
         lambda: torch.ops.gemmkit.w4_mm(x, weight, e, None, "mxfp4", 32, None)),
        (TypeError, r"^x_scale: dtype torch.float32 with MXFP4 activations x; expected float8_e8m0fnu or uint8 \(mx "
                    r"exponents, one per 32 of K\)$",
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=cuda(8, 1, dtype=F32))),
        (ValueError, r"^x_scale: shape \[8, 4\]; expected " + mx_forms,  # ceil(x.size(-1)/32): K is twice the bytes
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale[:, :4])),
        (ValueError, r"^x_scale: shape \[2, 4, 8\]; expected",  # x's leading dimensions are [4, 2]
         lambda: gemmkit.mxfp4_mm(x.view(4, 2, 128), weight, e, x_scale=x_scale.view(2, 4, 8))),
        (ValueError, r"^group: 128 with MXFP4 activations x \(torch.uint8, K = 2 \* 128 = 256\), against int4 weights "
                     r"in groups of 128; expected 32 with K > 32: MXFP4 x goes only with weights in groups of 32 of K "
                     r"\(mxfp4_mm, or int4_mm with group=32\)$",  # int4_mm's default group
         lambda: gemmkit.int4_mm(x, qweight, cuda(2, 64), x_scale=x_scale)),
        (ValueError, r"^group: 64 with MXFP4 activations x",
         lambda: gemmkit.int4_mm(x, qweight, cuda(4, 64), group=64, x_scale=x_scale)),
        (ValueError, r"^group: 32 with MXFP4 activations x \(torch.uint8, K = 2 \* 16 = 32\), against int4 weights in "
                     r"groups of 32, one covering all of K = 32;",  # one group a column: gemm() takes no mx there
         lambda: gemmkit.int4_mm(cuda(8, 16, dtype=U8), cuda(64, 16, dtype=U8), cuda(1, 64), group=32,
                                 x_scale=cuda(8, 1, dtype=U8))),
        (ValueError, r"^x: strides \[1, 8\]; expected the bytes along K contiguous \(stride 1\)$",
         lambda: gemmkit.mxfp4_mm(cuda(128, 8, dtype=U8).t(), weight, e, x_scale=x_scale)),
        (ValueError, r"^weight: shape \[64, 128\]; expected \[N, ceil\(K/2\)\] = \[N, 64\] bytes for x's K = 128 \(2 "
                     r"\* x's 64 bytes: MXFP4 x has an even K\)$",  # x's codes for K = 128, weights for 256
         lambda: gemmkit.mxfp4_mm(x[:, :64], weight, e, x_scale=x_scale[:, :4])),
        (ValueError, r"^weight: shape \[64, 128\]; expected \[N, ceil\(K/2\)\] = \[N, 256\] bytes for x's K = 512",
         lambda: gemmkit.mxfp4_mm(cuda(8, 256, dtype=U8), weight, e, x_scale=cuda(8, 16, dtype=U8))),
        (TypeError, r"^scales: dtype torch.float32; expected bfloat16 or float16 with MXFP4 x$",
         lambda: gemmkit.int4_mm(x, qweight, scales.float(), group=32, x_scale=x_scale)),
        (TypeError, r"^x: dtype torch.int8 is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                    r"x_scale, or MXFP4 activations \(uint8",
         lambda: gemmkit.mxfp4_mm(x.view(torch.int8), weight, e, x_scale=x_scale)),
        (TypeError, r"^out_dtype: torch.float8_e4m3fn is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale, out_dtype=E4M3)),
        (ValueError, r"^out: shape \[8, 128\]; expected x's leading dimensions and N, \[8, 64\]$",
         lambda: gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale, out=cuda(8, 128))),
    ]
    raises_each(cases)


def test_a_traced_w4a8_call_carries_x_scale_for_the_rows(fake):
    def layer(x, qweight, scales, x_scale):
        return gemmkit.int4_mm(x, qweight, scales, x_scale=x_scale, out_dtype=F32)

    x, qweight, scales, _ = w4a8_args(8, 256, 1000)
    args = (x.view(2, 4, 1000), qweight, scales, cuda(2, 4, 8, dtype=F32))  # 1x128 blocks: ceil(1000/128) = 8
    graph, _ = torch._dynamo.export(layer)(*args)
    calls = [node for node in graph.graph.nodes if node.target in W4_MM]
    assert [node.args[4:] for node in calls] == [("int4", 128, torch.float32)]
    assert calls[0].kwargs["x_scale"].meta["example_value"].shape == (8, 8)  # x's rows' scales
    d = graph(*args)
    assert tuple(d.shape) == (2, 4, 256) and d.dtype == F32


def test_w4a8_errors_name_the_argument(fake):
    x, qweight, scales, zeros = w4a8_args(8, 64, 256, zeros=True)
    xb = cuda(8, 256)
    xm, weight, e = mxfp4_args(8, 64, 256)
    rows = cuda(8, 1, dtype=F32)
    forms = (r"one element \(tensor\), \[\.\.\., 1\] or \[M\] \(one a row of x: rowwise\) or \[\.\.\., "
             r"ceil\(K/128\)\] = \[\.\.\., 2\] \(1x128 blocks\), the leading dimensions x's$")
    cases = [
        (ValueError, r"^x_scale: None with float8_e4m3fn x; expected x's float32 scales: " + forms,
         lambda: gemmkit.int4_mm(x, qweight, scales)),
        (ValueError, r"^x_scale: None with float8_e4m3fn x",
         lambda: torch.ops.gemmkit.w4_mm(x, qweight, scales, None, "int4", 128, None)),
        (ValueError, r"^x_scale: given with torch.bfloat16 x; expected None \(scales go with float8_e4m3fn x or "
                     r"MXFP4 x\)$",
         lambda: gemmkit.int4_mm(xb, qweight, scales, x_scale=rows)),
        (TypeError, r"^x_scale: dtype torch.bfloat16; expected float32$",
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(8, 1))),
        (ValueError, r"^x_scale: shape \[8, 3\]; expected " + forms,
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(8, 3, dtype=F32))),
        (ValueError, r"^x_scale: shape \[1, 8\]; expected one element",  # a row of x's rows, not a column
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=cuda(1, 8, dtype=F32))),
        (ValueError, r"^x_scale: shape \[4, 2, 1\]; expected one element",  # x's leading dimensions are [2, 4]
         lambda: gemmkit.int4_mm(x.view(2, 4, 256), qweight, scales, x_scale=cuda(4, 2, 1, dtype=F32))),
        (TypeError, r"^x_scale: expected a torch.Tensor or an array with __dlpack__, got float$",
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=1.0)),
        (TypeError, r"^x: dtype torch.float8_e5m2 is not supported; expected bfloat16 or float16, or float8_e4m3fn "
                    r"with x_scale, or MXFP4 activations \(uint8( or float4_e2m1fn_x2)? \[\.\.\., K/2\]\) with "
                    r"x_scale$",
         lambda: gemmkit.int4_mm(cuda(8, 256, dtype=torch.float8_e5m2), qweight, scales, x_scale=rows)),
        (ValueError, r"^x_scale: None with float8_e4m3fn x",
         lambda: gemmkit.mxfp4_mm(cuda(8, 256, dtype=E4M3), weight, e)),
        (ValueError, r"^scales: shape \[4, 64\]; expected \[ceil\(K/32\), N\] = \[8, 64\]",
         lambda: gemmkit.int4_mm(x, qweight, cuda(4, 64), group=32, x_scale=rows)),
        (TypeError, r"^scales: dtype torch.float32; expected bfloat16 or float16 with float8_e4m3fn x$",
         lambda: gemmkit.int4_mm(x, qweight, scales.float(), x_scale=rows)),
        (TypeError, r"^zeros: dtype torch.float16; expected the scales', torch.bfloat16$",
         lambda: gemmkit.int4_mm(x, qweight, scales, zeros.half(), x_scale=rows)),
        (ValueError, r"^scales: shape \[64, 2\]; expected \[ceil\(K/128\), N\] = \[2, 64\]",
         lambda: gemmkit.int4_mm(x, qweight, scales.t(), x_scale=rows)),
        (TypeError, r"^out_dtype: torch.float8_e4m3fn is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scale=rows, out_dtype=E4M3)),
        (TypeError, r"^int4_mm\(\) got an unexpected keyword argument 'x_scales'$",
         lambda: gemmkit.int4_mm(x, qweight, scales, x_scales=rows)),
    ]
    raises_each(cases)
    with pytest.raises(ValueError, match="^x_scale: on cpu; expected a CUDA tensor$"):
        gemmkit.int4_mm(x, qweight, scales, x_scale=torch.ones((), device="cpu"))


def test_errors_name_the_argument(fake):
    x, qweight, scales, zeros = int4_args(8, 64, 256, zeros=True)
    xm, weight, e = mxfp4_args(8, 64, 256)
    cases = [
        (TypeError, r"^x: dtype torch.float32 is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                    r"x_scale, or MXFP4 activations \(uint8",
         lambda: gemmkit.int4_mm(x.float(), qweight, scales)),
        (TypeError, r"^x: dtype torch.float32 is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                    r"x_scale, or MXFP4 activations \(uint8",
         lambda: gemmkit.mxfp4_mm(xm.float(), weight, e)),
        (ValueError, r"^x: 0 dimensions; expected at least 1, \[\.\.\., K\]$",
         lambda: gemmkit.int4_mm(x[0, 0], qweight, scales)),
        (TypeError, r"^qweight: dtype torch.int8 is not supported; expected uint8, two 4-bit codes a byte along K$",
         lambda: gemmkit.int4_mm(x, qweight.view(torch.int8), scales)),
        (ValueError, r"^qweight: shape \[64, 127\]; expected \[N, ceil\(K/2\)\] = \[N, 128\] bytes for x's K = 256$",
         lambda: gemmkit.int4_mm(x, qweight[:, 1:], scales)),
        (ValueError, r"^qweight: shape \[2, 32, 128\]; expected \[N, ceil\(K/2\)\]",
         lambda: gemmkit.int4_mm(x, qweight.view(2, 32, 128), scales)),
        (ValueError, r"^qweight: shape \[64, 256\]; expected \[N, ceil\(K/2\)\] = \[N, 128\]",  # [N, K] codes
         lambda: gemmkit.int4_mm(x, cuda(64, 256, dtype=U8), scales)),
        (ValueError, r"^qweight: strides \[1, 64\]; expected the bytes along K contiguous \(stride 1\)$",
         lambda: gemmkit.int4_mm(x, cuda(128, 64, dtype=U8).t(), scales)),
        (TypeError, r"^scales: dtype torch.float16; expected x's, torch.bfloat16$",
         lambda: gemmkit.int4_mm(x, qweight, scales.half())),
        (ValueError, r"^scales: shape \[64, 2\]; expected \[ceil\(K/128\), N\] = \[2, 64\] for K = 256, N = 64$",
         lambda: gemmkit.int4_mm(x, qweight, scales.t())),
        (ValueError, r"^scales: shape \[2, 64\]; expected \[ceil\(K/64\), N\] = \[4, 64\]",
         lambda: gemmkit.int4_mm(x, qweight, scales, group=64)),
        (ValueError, r"^group: 48; expected 32, a power of two from 64, or at least K = 256 \(one scale a column\)$",
         lambda: gemmkit.int4_mm(x, qweight, scales, group=48)),
        (ValueError, r"^group: 16; expected 32, a power of two from 64",
         lambda: gemmkit.int4_mm(x, qweight, cuda(16, 64), group=16)),
        (ValueError, r"^group: 0; expected", lambda: gemmkit.int4_mm(x, qweight, scales, group=0)),
        (TypeError, r"^group: float; expected an int", lambda: gemmkit.int4_mm(x, qweight, scales, group=128.0)),
        (TypeError, r"^zeros: dtype torch.float16; expected the scales', torch.bfloat16$",
         lambda: gemmkit.int4_mm(x, qweight, scales, zeros.half())),
        (ValueError, r"^zeros: shape \[1, 64\]; expected the scales', \[2, 64\]$",
         lambda: gemmkit.int4_mm(x, qweight, scales, zeros[:1])),
        (TypeError, r"^weight: expected a torch.Tensor or an array with __dlpack__, got list$",
         lambda: gemmkit.mxfp4_mm(xm, [[1]], e)),
        (TypeError, r"^weight: dtype torch.int8 is not supported; expected uint8",
         lambda: gemmkit.mxfp4_mm(xm, weight.view(torch.int8), e)),
        (ValueError, r"^weight: shape \[64, 64\]; expected \[N, ceil\(K/2\)\] = \[N, 128\] bytes",
         lambda: gemmkit.mxfp4_mm(xm, weight[:, :64], e)),
        (TypeError, r"^scales: dtype torch.bfloat16 is not supported; expected float8_e8m0fnu or uint8",
         lambda: gemmkit.mxfp4_mm(xm, weight, e.to(BF16))),
        (ValueError, r"^scales: shape \[8, 64\]; expected \[N, ceil\(K/32\)\] = \[64, 8\] for K = 256, N = 64$",
         lambda: gemmkit.mxfp4_mm(xm, weight, e.t())),  # gpt-oss's [N, K/32], not B's [K/32, N]
        (TypeError, r"^mxfp4_mm\(\) got an unexpected keyword argument 'zeros'$",
         lambda: gemmkit.mxfp4_mm(xm, weight, e, zeros=e)),
        (ValueError, r"^zeros: given with MXFP4 weights; expected None \(zero points are int4's\)$",
         lambda: torch.ops.gemmkit.w4_mm(xm, weight, e, e, "mxfp4", 32, None)),
        (ValueError, r"^group: 128 with format 'mxfp4'; expected 32",
         lambda: torch.ops.gemmkit.w4_mm(xm, weight, e, None, "mxfp4", 128, None)),
        (ValueError, r"^format: 'int8'; expected 'int4' or 'mxfp4'$",
         lambda: torch.ops.gemmkit.w4_mm(x, qweight, scales, None, "int8", 128, None)),
        (ValueError, r"^x: 3 dimensions; expected 2, \[M, K\]$",
         lambda: torch.ops.gemmkit.w4_mm(x.view(2, 4, 256), qweight, scales, None, "int4", 128, None)),
        (TypeError, r"^out_dtype: torch.float8_e4m3fn is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.int4_mm(x, qweight, scales, out_dtype=torch.float8_e4m3fn)),
        (ValueError, r"^out: shape \[8, 63\]; expected x's leading dimensions and N, \[8, 64\]$",
         lambda: gemmkit.int4_mm(x, qweight, scales, out=cuda(8, 63))),
        (ValueError, r"^out: dtype torch.bfloat16 differs from out_dtype torch.float32$",
         lambda: gemmkit.mxfp4_mm(xm, weight, e, out=cuda(8, 64), out_dtype=F32)),
        (ValueError, r"^out: shape \[2, 4, 64\] with strides \[64, 128, 1\] cannot be viewed as \[8, 64\] rows",
         lambda: gemmkit.int4_mm(x.view(2, 4, 256), qweight, scales, out=cuda(4, 2, 64).transpose(0, 1))),
    ]
    raises_each(cases)


def test_errors_without_fake_tensors():
    x = torch.zeros(8, 256, dtype=BF16)
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.int4_mm(x, torch.zeros(64, 128, dtype=U8), torch.zeros(2, 64, dtype=BF16))
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.mxfp4_mm([[1.0]], torch.zeros(64, 128, dtype=U8), torch.zeros(64, 8, dtype=U8))


def test_inputs_that_require_grad_go_through_the_operator_and_out_refuses_them(fake):
    x, qweight, scales, _ = int4_args(8, 64, 256)
    x.requires_grad_()
    d = gemmkit.int4_mm(x, qweight, scales)
    assert d.requires_grad and d.grad_fn is not None  # the operator's autograd formula, which refuses (below)
    xm, weight, e = mxfp4_args(8, 64, 256)
    assert gemmkit.mxfp4_mm(xm.requires_grad_(), weight, e).requires_grad
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.int4_mm(x, qweight, scales, out=cuda(8, 64))
    with torch.no_grad():
        assert not gemmkit.int4_mm(x, qweight, scales).requires_grad
    # W4A8: x and its scales alike.
    x8, qweight, scales, _ = w4a8_args(8, 64, 256)
    x_scale = cuda(8, 1, dtype=F32).requires_grad_()
    assert gemmkit.int4_mm(x8, qweight, scales, x_scale=x_scale).requires_grad
    assert gemmkit.int4_mm(x8.requires_grad_(), qweight, scales, x_scale=x_scale.detach()).requires_grad
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.int4_mm(x8.detach(), qweight, scales, x_scale=x_scale, out=cuda(8, 64))


@pytest.fixture
def cpu_w4():
    """w4_mm with a CPU kernel, the reference's product in double, for the duration of a test."""
    from cpu_stand_ins import registered_on_cpu

    def w4_mm(x, w, scales, zeros, format, group, out_dtype, x_scale=None):
        k = x.size(1)
        weights = int4_weights(w, scales, zeros, group, k) if format == "int4" else mxfp4_weights(w, scales, k)
        xd = x.double() if x_scale is None else scaled_x(x, x_scale)
        return (xd @ weights.t()).to(_torch.output_dtype(x, out_dtype))

    yield from registered_on_cpu({"w4_mm": w4_mm})


def test_the_backward_raises_naming_the_function(cpu_w4):
    x = torch.randn(3, 64, dtype=BF16, requires_grad=True)
    qweight, scales = torch.randint(0, 256, (5, 32), dtype=U8), torch.rand(1, 5, dtype=BF16).requires_grad_()
    d = torch.ops.gemmkit.w4_mm(x, qweight, scales, None, "int4", 128, None)
    assert d.requires_grad and d.dtype == BF16 and d.shape == (3, 5)
    with pytest.raises(RuntimeError, match=r"^gemmkit: int4_mm \(4-bit weights\) is not differentiable; expected "
                                           r"inputs that do not require grad \(or torch.no_grad\(\)\)$"):
        d.sum().backward()
    e = torch.randint(120, 130, (5, 2), dtype=U8)
    d = torch.ops.gemmkit.w4_mm(x, qweight, e, None, "mxfp4", 32, torch.float32)
    assert d.requires_grad and d.dtype == F32
    with pytest.raises(RuntimeError, match=r"^gemmkit: mxfp4_mm \(4-bit weights\) is not differentiable"):
        torch.autograd.grad(d.sum(), x)
    assert x.grad is None and scales.grad is None


def test_the_w4a8_backward_raises_and_the_stand_in_scales_x(cpu_w4):
    x = torch.randn(3, 300).to(E4M3).requires_grad_()
    x_scale = (torch.rand(3, 3) + 0.5).requires_grad_()  # 1x128 blocks: ceil(300/128) = 3 a row
    qweight, scales = torch.randint(0, 256, (5, 150), dtype=U8), torch.rand(3, 5, dtype=F16)
    d = torch.ops.gemmkit.w4_mm(x, qweight, scales, None, "int4", 128, None, x_scale=x_scale)
    assert d.requires_grad and d.dtype == BF16 and d.shape == (3, 5)  # bfloat16 for e4m3 x
    weights = int4_weights(qweight, scales, None, 128, 300)
    blocks = x_scale.detach().double().repeat_interleave(128, 1)[:, :300]
    assert torch.equal(d.detach(), (x.detach().double() * blocks @ weights.t()).to(BF16))
    with pytest.raises(RuntimeError, match=r"^gemmkit: int4_mm \(4-bit weights\) is not differentiable; expected "
                                           r"inputs that do not require grad \(or torch.no_grad\(\)\)$"):
        torch.autograd.grad(d.sum(), x_scale)
    assert x.grad is None and x_scale.grad is None


def test_the_a8w4_mx_backward_raises_and_the_stand_in_scales_x_per_32(cpu_w4):
    x = torch.randn(3, 300).to(E4M3).requires_grad_()
    x_scale = torch.randint(124, 130, (3, 10), dtype=U8)  # ceil(300/32) = 10 exponents a row
    weight, e = torch.randint(0, 256, (5, 150), dtype=U8), torch.randint(126, 128, (5, 10), dtype=U8)
    d = torch.ops.gemmkit.w4_mm(x, weight, e, None, "mxfp4", 32, None, x_scale=x_scale.view(E8M0))
    assert d.requires_grad and d.dtype == BF16 and d.shape == (3, 5)
    per_32 = torch.exp2(x_scale.double() - 127).repeat_interleave(32, 1)[:, :300]
    assert torch.equal(d.detach(), (x.detach().double() * per_32 @ mxfp4_weights(weight, e, 300).t()).to(BF16))
    with pytest.raises(RuntimeError, match=r"^gemmkit: mxfp4_mm \(4-bit weights\) is not differentiable"):
        torch.autograd.grad(d.sum(), x)
    assert x.grad is None


# --- on an sm_90 GPU: against the double-precision product ---------------------------------------

N = 4095  # odd: a partial tile of columns


def random_x(m, k, dtype):
    return torch.randn(m, k, device="cuda", dtype=torch.float32).to(dtype)


def random_scales(*shape, dtype):
    """Scales in [0.5, 2) of `dtype`."""
    return (torch.rand(*shape, device="cuda") * 1.5 + 0.5).to(dtype)


def random_int4(n, k, group, dtype, zeros):
    """qweight [n, ceil(k/2)] of random codes (an odd k's padding nibble random too), scales
    [ceil(k/group), n] in [0.5, 2) and zero points, whole numbers from 0 to 15, or None."""
    groups = -(-k // group)
    qweight = torch.randint(0, 256, (n, (k + 1) // 2), device="cuda", dtype=U8)
    z = torch.randint(0, 16, (groups, n), device="cuda").to(dtype) if zeros else None
    return qweight, random_scales(groups, n, dtype=dtype), z


def random_mxfp4(n, k):
    """weight [n, ceil(k/2)] of random e2m1 codes and exponents [n, ceil(k/32)], uint8, of 0.5 and
    1 (126 and 127): scales in [0.5, 2)."""
    return (torch.randint(0, 256, (n, (k + 1) // 2), device="cuda", dtype=U8),
            torch.randint(126, 128, (n, -(-k // 32)), device="cuda", dtype=U8))


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("k", [4160, 4097])  # 32.5 groups of 128; odd, the last byte half padding
@pytest.mark.parametrize("m", [1, 16, 33, 4096])
@pytest.mark.parametrize("zeros", [False, True])
def test_int4_mm_matches_double(m, k, dtype, zeros):
    x = random_x(m, k, dtype)
    qweight, scales, z = random_int4(N, k, 128, dtype, zeros)
    d = gemmkit.int4_mm(x, qweight, scales, z)
    assert d.shape == (m, N) and d.dtype == dtype
    expect_close(d, x, int4_weights(qweight, scales, z, 128, k))


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("k", [4160, 4097])
@pytest.mark.parametrize("m", [1, 16, 33, 4096])
def test_mxfp4_mm_matches_double(m, k, dtype):
    x = random_x(m, k, dtype)
    weight, e = random_mxfp4(N, k)
    d = gemmkit.mxfp4_mm(x, weight, e)
    assert d.shape == (m, N) and d.dtype == dtype
    expect_close(d, x, mxfp4_weights(weight, e, k))


@needs_sm90
@pytest.mark.parametrize("group", [32, 64, 256, 1000, 8192])  # 1000 and 8192: one scale a column (K = 1000)
def test_int4_groups_and_scale_layouts(group):
    k = 1000
    x = random_x(17, k, BF16)
    qweight, scales, z = random_int4(257, k, group, BF16, True)
    w = int4_weights(qweight, scales, z, group, k)
    expect_close(gemmkit.int4_mm(x, qweight, scales, z, group=group), x, w)
    # The scales and zero points stored [N, ceil(K/group)] and passed transposed: copied first.
    expect_close(gemmkit.int4_mm(x, qweight, scales.t().contiguous().t(), z.t().contiguous().t(), group=group), x, w)


@needs_sm90
def test_layouts_leading_dimensions_out_and_out_dtype():
    k = 4160
    x = random_x(6 * 11, k, F16)
    qweight, scales, _ = random_int4(N, k, 128, F16, False)
    w = int4_weights(qweight, scales, None, 128, k)
    # x [2, 3, 11, K]: leading dimensions flattened; x column-major; one row as a 1-D x.
    d = gemmkit.int4_mm(x.view(2, 3, 11, k), qweight, scales)
    assert d.shape == (2, 3, 11, N)
    expect_close(d.view(-1, N), x, w)
    columns = x.t().contiguous().t()
    expect_close(gemmkit.int4_mm(columns, qweight, scales), columns, w)
    expect_close(gemmkit.int4_mm(x[5], qweight, scales).unsqueeze(0), x[5:6], w)
    # Rows of the bytes padded (a slice of a wider buffer), out= and out_dtype.
    padded = torch.randint(0, 256, (N, 2096), device="cuda", dtype=U8)
    qpadded = padded[:, 8:8 + k // 2]
    out = torch.full((2, 33, N), float("nan"), device="cuda", dtype=F32)
    assert gemmkit.int4_mm(x.view(2, 33, k), qpadded, scales, out=out) is out
    expect_close(out.view(-1, N), x, int4_weights(qpadded, scales, None, 128, k))
    expect_close(gemmkit.int4_mm(x, qweight, scales, out_dtype=BF16), x, w)
    # MXFP4 as the dtypes gpt-oss's checkpoints and torch name them, out= in float32.
    weight, e = random_mxfp4(N, k)
    w = mxfp4_weights(weight, e, k)
    if FLOAT4 is not None:
        expect_close(gemmkit.mxfp4_mm(x, weight.view(FLOAT4), e.view(E8M0)), x, w)
    out = torch.full((66, N), float("nan"), device="cuda", dtype=F32)
    expect_close(gemmkit.mxfp4_mm(x, weight, e, out=out), x, w)
    # Exponents stored [ceil(K/32), N] and passed transposed: read as they lie.
    expect_close(gemmkit.mxfp4_mm(x, weight, e.t().contiguous().t()), x, w)


@needs_sm90
def test_compiled_graphed_and_not_differentiable():
    k = 4097
    x = random_x(33, k, BF16)
    qweight, scales, z = random_int4(N, k, 64, BF16, True)
    weight, e = random_mxfp4(N, k)

    def both(x):
        return gemmkit.int4_mm(x, qweight, scales, z, group=64), gemmkit.mxfp4_mm(x, weight, e)

    eager = both(x)
    compiled = torch.compile(both, fullgraph=True)(x)
    assert all(torch.equal(c, d) for c, d in zip(compiled, eager))
    graph, captured = capture(lambda: both(x))
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(c, d) for c, d in zip(captured, eager))
    d = gemmkit.int4_mm(x.clone().requires_grad_(), qweight, scales, z, group=64)
    assert torch.equal(d.detach(), eager[0])
    with pytest.raises(RuntimeError, match=r"^gemmkit: int4_mm \(4-bit weights\) is not differentiable"):
        d.sum().backward()


# --- W4A8 on an sm_90 GPU: e4m3 x and its scales against the double-precision product ------------

def random_x_scale(mode, m, k):
    """float32 scales in [0.5, 2) of e4m3 x [m, k]: 0-d (tensor), [m, 1] (rowwise) or [m, ceil(k/128)]
    (1x128 blocks) stored M-contiguous, as quantize() writes them."""
    if mode == "tensor":
        return torch.rand((), device="cuda") * 1.5 + 0.5
    if mode == "rowwise":
        return torch.rand(m, 1, device="cuda") * 1.5 + 0.5
    return (torch.rand(-(-k // 128), m, device="cuda") * 1.5 + 0.5).t()


@needs_sm90
@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("k", [4096, 4160, 4097])  # whole groups; 32.5 of them; odd, the last byte half padding
@pytest.mark.parametrize("m", [1, 16, 33, 4096])
@pytest.mark.parametrize("zeros", [False, True])
def test_int4_mm_w4a8_matches_double(m, k, mode, zeros):
    x = random_x(m, k, BF16).to(E4M3)
    x_scale = random_x_scale(mode, m, k)
    qweight, scales, z = random_int4(N, k, 128, BF16, zeros)
    d = gemmkit.int4_mm(x, qweight, scales, z, x_scale=x_scale)
    assert d.shape == (m, N) and d.dtype == BF16
    expect_close_fp8(d, scaled_x(x, x_scale), int4_weights(qweight, scales, z, 128, k))


@needs_sm90
@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
@pytest.mark.parametrize("k", [4160, 4097])  # 130 and 128.03 blocks of 32: a partial last one, an odd K
@pytest.mark.parametrize("m", [1, 16, 4096])
def test_mxfp4_mm_w4a8_matches_double(m, k, mode):
    x = random_x(m, k, BF16).to(E4M3)
    x_scale = random_x_scale(mode, m, k)
    weight, e = random_mxfp4(N, k)
    d = gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale)
    assert d.shape == (m, N) and d.dtype == BF16
    expect_close_fp8(d, scaled_x(x, x_scale), mxfp4_weights(weight, e, k))


@needs_sm90
@pytest.mark.parametrize("group", [32, 64, 128, 256, 1000, 8192])  # 1000 and 8192: one scale a column (K = 1000)
@pytest.mark.parametrize("scales_dtype", [BF16, F16])
def test_w4a8_groups_scale_dtypes_and_layouts(group, scales_dtype):
    k = 1000
    x = random_x(17, k, BF16).to(E4M3)
    x_scale = random_x_scale("block", 17, k)
    qweight, scales, z = random_int4(257, k, group, scales_dtype, True)
    w, xs = int4_weights(qweight, scales, z, group, k), scaled_x(x, x_scale)
    expect_close_fp8(gemmkit.int4_mm(x, qweight, scales, z, group=group, x_scale=x_scale), xs, w)
    # Scales, zero points and x's block scales in the other layouts: copied first, the same product.
    expect_close_fp8(gemmkit.int4_mm(x, qweight, scales.t().contiguous().t(), z.t().contiguous().t(), group=group,
                                     x_scale=x_scale.contiguous()), xs, w)


@needs_sm90
def test_w4a8_quantized_activations_leading_dimensions_and_outputs():
    k = 4160
    xb = random_x(6 * 11, k, BF16)
    qweight, scales, _ = random_int4(N, k, 128, BF16, False)
    w = int4_weights(qweight, scales, None, 128, k)
    # Activations quantised by gemmkit.quantize, the scales as it returns them.
    for mode in ("tensor", "rowwise", "block"):
        q, x_scale = gemmkit.quantize(xb, mode=mode)
        expect_close_fp8(gemmkit.int4_mm(q, qweight, scales, x_scale=x_scale), scaled_x(q, x_scale), w)
    q, x_scale = gemmkit.quantize(xb, mode="rowwise")
    xs = scaled_x(q, x_scale)
    # x [2, 3, 11, K] with its scales [2, 3, 11, 1]; one row as a 1-D x with one scale.
    d = gemmkit.int4_mm(q.view(2, 3, 11, k), qweight, scales, x_scale=x_scale.view(2, 3, 11, 1))
    assert d.shape == (2, 3, 11, N) and d.dtype == BF16
    expect_close_fp8(d.view(-1, N), xs, w)
    expect_close_fp8(gemmkit.int4_mm(q[5], qweight, scales, x_scale=x_scale[5, 0]).unsqueeze(0), xs[5:6], w)
    # out_dtype, and out= through a view of its leading dimensions.
    expect_close_fp8(gemmkit.int4_mm(q, qweight, scales, x_scale=x_scale, out_dtype=F32), xs, w)
    out = torch.full((2, 33, N), float("nan"), device="cuda", dtype=F16)
    assert gemmkit.int4_mm(q.view(2, 33, k), qweight, scales, x_scale=x_scale.view(2, 33, 1), out=out) is out
    expect_close_fp8(out.view(-1, N), xs, w)


def compiled_and_graphed_alike(layer, *args):
    """layer(*args), eager, once torch.compile(fullgraph=True) and a CUDA graph's replay of it are
    found to give the same tensor."""
    eager = layer(*args)
    assert torch.equal(torch.compile(layer, fullgraph=True)(*args), eager)
    graph, captured = capture(lambda: layer(*args))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    return eager


@needs_sm90
def test_w4a8_compiled_graphed_and_not_differentiable():
    k = 4096
    x = random_x(33, k, BF16).to(E4M3)
    x_scale = random_x_scale("block", 33, k)
    qweight, scales, z = random_int4(N, k, 128, BF16, True)

    def layer(x, x_scale):
        return gemmkit.int4_mm(x, qweight, scales, z, x_scale=x_scale)

    eager = compiled_and_graphed_alike(layer, x, x_scale)
    d = layer(x, x_scale.clone().requires_grad_())
    assert torch.equal(d.detach(), eager)
    with pytest.raises(RuntimeError, match=r"^gemmkit: int4_mm \(4-bit weights\) is not differentiable"):
        d.sum().backward()


# --- A8W4 in MX and FP4 x FP4 on an sm_90 GPU: e4m3 x (MXFP8) or e2m1 codes (MXFP4 activations) ------
# --- with ue8m0 exponents per 32 of K --------------------------------------------------------------------

def random_x_exponents(m, k, dtype=U8):
    """mx exponents of e4m3 x [m, k]: [m, ceil(k/32)] from 125 to 128 (scales 2^-2 to 2^1), uint8 or
    viewed as float8_e8m0fnu."""
    return torch.randint(125, 129, (m, -(-k // 32)), device="cuda", dtype=U8).view(dtype)


def mx_product(x, x_scale, weights, k):
    """(d, w): mxfp4_mm's or int4_mm's product (`weights` 'mxfp4', or 'int4' or 'int4 zeros' in groups
    of 32) of x and its exponents x_scale with random weights [N, K], and those weights in double."""
    if weights == "mxfp4":
        weight, e = random_mxfp4(N, k)
        return gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale), mxfp4_weights(weight, e, k)
    qweight, scales, z = random_int4(N, k, 32, BF16, weights == "int4 zeros")
    return gemmkit.int4_mm(x, qweight, scales, z, group=32, x_scale=x_scale), int4_weights(qweight, scales, z, 32, k)


@needs_sm90
@pytest.mark.parametrize("weights", ["mxfp4", "int4", "int4 zeros"])
@pytest.mark.parametrize("k", [4160, 4097])  # 130 and 128.03 blocks of 32: a partial last one, an odd K
@pytest.mark.parametrize("m", [1, 16, 33, 4096])
def test_a8w4_mx_matches_double(m, k, weights):
    x = random_x(m, k, BF16).to(E4M3)
    x_scale = random_x_exponents(m, k, E8M0 if m % 2 else U8)  # either dtype
    d, w = mx_product(x, x_scale, weights, k)
    assert d.shape == (m, N) and d.dtype == BF16
    expect_close_fp8(d, scaled_x(x, x_scale), w)


@needs_sm90
@pytest.mark.parametrize("weights", ["mxfp4", "int4", "int4 zeros"])
@pytest.mark.parametrize("k", [4160, 4112])  # 130 and 128.5 blocks of 32 (MXFP4 x: an even K)
@pytest.mark.parametrize("m", [1, 16, 33, 4096])
def test_fp4_x_fp4_matches_double(m, k, weights):
    # Random codes (every e2m1 value, both zeros) and exponents 126 and 127, uint8 or float8_e8m0fnu.
    x, x_scale = random_mxfp4(m, k)
    d, w = mx_product(x, x_scale.view(E8M0) if m % 2 else x_scale, weights, k)
    assert d.shape == (m, N) and d.dtype == BF16
    # x is widened exactly to e4m3, then multiplied as A8W4 in MX: the FP8 products' bound.
    expect_close_fp8(d, mxfp4_weights(x, x_scale, k), w)


def mx_activations(kind, x):
    """(q, x_scale, xs): x [M, K] quantised with ue8m0 exponents x_scale per 32 of K, as MXFP8
    (`kind` 'mxfp8': gemmkit.quantize, e4m3 q [M, K]) or MXFP4 activations ('mxfp4':
    gemmkit.quantize_mxfp4, q [M, K/2] bytes of codes), and q's values xs in double."""
    if kind == "mxfp8":
        q, x_scale = gemmkit.quantize(x, mode="mx")
        return q, x_scale, scaled_x(q, x_scale)
    q, x_scale = gemmkit.quantize_mxfp4(x)
    return q, x_scale, mxfp4_weights(q, x_scale, x.size(1))


@needs_sm90
@pytest.mark.parametrize("kind", ["mxfp8", "mxfp4"])
def test_mx_quantized_activations_layouts_and_outputs(kind):
    k = 4160
    q, x_scale, xs = mx_activations(kind, random_x(6 * 11, k, BF16))
    width = q.size(1)  # K, or the K/2 bytes of MXFP4 codes
    assert x_scale.shape == (66, 130) and width == (k if kind == "mxfp8" else k // 2)
    weight, e = random_mxfp4(N, k)
    w = mxfp4_weights(weight, e, k)
    # The exponents as uint8 row-major, and as float8_e8m0fnu M-contiguous (passed transposed).
    for exponents in (x_scale.view(U8).contiguous(), x_scale.view(E8M0).t().contiguous().t()):
        expect_close_fp8(gemmkit.mxfp4_mm(q, weight, e, x_scale=exponents), xs, w)
    # x [2, 3, 11, K] with its exponents [2, 3, 11, 130]; one row as a 1-D x with its row's.
    d = gemmkit.mxfp4_mm(q.view(2, 3, 11, width), weight, e, x_scale=x_scale.reshape(2, 3, 11, 130))
    assert d.shape == (2, 3, 11, N) and d.dtype == BF16
    expect_close_fp8(d.view(-1, N), xs, w)
    expect_close_fp8(gemmkit.mxfp4_mm(q[5], weight, e, x_scale=x_scale[5]).unsqueeze(0), xs[5:6], w)
    # out= through a view of its leading dimensions; int4 in groups of 32 with float16 scales, out_dtype.
    out = torch.full((2, 33, N), float("nan"), device="cuda", dtype=F16)
    assert gemmkit.mxfp4_mm(q.view(2, 33, width), weight, e, x_scale=x_scale.reshape(2, 33, 130), out=out) is out
    expect_close_fp8(out.view(-1, N), xs, w)
    qweight, scales, z = random_int4(N, k, 32, F16, True)
    expect_close_fp8(gemmkit.int4_mm(q, qweight, scales, z, group=32, x_scale=x_scale, out_dtype=F32), xs,
                     int4_weights(qweight, scales, z, 32, k))


@needs_sm90
def test_fp4_x_fp4_float4_dtypes_and_padded_rows():
    k = 4160
    x, x_scale, xs = mx_activations("mxfp4", random_x(66, k, BF16))
    weight, e = random_mxfp4(N, k)
    w = mxfp4_weights(weight, e, k)
    if FLOAT4 is not None:  # codes and weights as torch names MXFP4, exponents as float8_e8m0fnu
        expect_close_fp8(gemmkit.mxfp4_mm(x.view(FLOAT4), weight.view(FLOAT4), e, x_scale=x_scale.view(E8M0)), xs, w)
    # The codes' rows padded: a slice of a wider buffer of random bytes, rows 2128 bytes apart.
    padded = torch.randint(0, 256, (66, k // 2 + 48), device="cuda", dtype=U8)
    padded[:, 16:16 + k // 2] = x
    expect_close_fp8(gemmkit.mxfp4_mm(padded[:, 16:16 + k // 2], weight, e, x_scale=x_scale), xs, w)


@needs_sm90
@pytest.mark.parametrize("kind", ["mxfp8", "mxfp4"])
def test_mx_activations_compiled_and_graphed(kind):
    k = 4096
    x, x_scale, xs = mx_activations(kind, random_x(33, k, BF16))
    weight, e = random_mxfp4(N, k)

    def layer(x, x_scale):
        return gemmkit.mxfp4_mm(x, weight, e, x_scale=x_scale)

    expect_close_fp8(compiled_and_graphed_alike(layer, x, x_scale), xs, mxfp4_weights(weight, e, k))
