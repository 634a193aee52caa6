"""gemmkit.quantize_int4 and gemmkit.quantize_mxfp4 (torch.ops.gemmkit.quantize_w4): 4-bit weights
made from [N, K] ones, as int4_mm and mxfp4_mm take them. The rules are restated below in torch
double precision from gemmkit/quantize.h (int4_rule, mxfp4_rule): each float32 operation is done
in double and rounded to float32 once, which gives the float32 result (double holds more than
twice float32's precision, so the two roundings agree for +, -, *, /). Without a GPU: the
statement on hand-worked values, the binding's views as gemmkit's checks see them (CPU tensors,
refused only for their memory), the operator's fake implementation (shapes, dtypes, strides),
one traced operator, the argument errors, and results that never require grad. On an sm_90 GPU
(those tests skip, saying so, elsewhere): codes, scales and zero points bit for bit against the
statement on odd N and K, K not a multiple of the group, groups of 32 to one a row, bfloat16,
float16 and float32 weights, every 16-bit value around the rounding boundaries, and blocks of
zeros, NaN, infinities and float32's extremes; then round trips through int4_mm and mxfp4_mm
against the double-precision product of the dequantised weights, strided weights,
torch.compile and CUDA graphs. Needs torch; skips, saying so, without it."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import cuda, on_stream_zero, refused_for_memory_alone  # noqa: E402
from gpu_reference import capture  # noqa: E402
from test_lowbit import expect_close, int4_weights, mxfp4_weights, needs_sm90  # noqa: E402

import gemmkit  # noqa: E402
from gemmkit import _torch  # noqa: E402

BF16, F16, F32, U8, E8M0 = torch.bfloat16, torch.float16, torch.float32, torch.uint8, torch.float8_e8m0fnu
F64 = torch.float64
INF = float("inf")


# --- the rules of gemmkit/quantize.h, in double --------------------------------------------------

def f32(t):
    """t (double) rounded to float32, held in double: one float32 operation's result."""
    return t.float().double()


def blocks_of(w, group):
    """w [N, K] in double as [N, groups, g] blocks along K (g = min(group, K), the last block padded
    with zeros) and which of the block's places are real elements of w, [groups, g]."""
    n, k = w.shape
    g = max(min(group, k), 1)
    groups = -(-k // g)
    blocks = torch.nn.functional.pad(w.double(), (0, groups * g - k)).view(n, groups, g)
    return blocks, (torch.arange(groups * g, device=w.device) < k).view(groups, g)


def packed(codes, k):
    """codes [N, groups, g] (0..15) as [N, ceil(K/2)] bytes: the first K, two a byte along K, the
    even k in the low nibble, an odd K's last high nibble 0."""
    codes = codes.flatten(1)[:, :k]
    codes = torch.nn.functional.pad(codes, (0, k % 2)).to(U8)
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


QUIET_NAN = {BF16: 0x7fc0, F16: 0x7e00}  # a NaN scale's bits (gemmkit/quantize.h)


def int4_rule(w, group, zeros, scales_dtype):
    """quantize_int4's (qweight [N, ceil(K/2)] uint8, the scales' bits [ceil(K/g), N] as int16,
    zero points [ceil(K/g), N] of scales_dtype or None) for w [N, K]: per group, in float32,
      symmetric:   scale = round(2 amax / 15) to scales_dtype (2 / 15 for zeros); q = rne(x / scale) + 8
      zero points: scale = round(max(hi - lo, 1e-5) / 15); zero = clamp(rne(-lo / scale), 0, 15);
                   q = rne(x / scale) + zero
    q clamped to 0..15, the zero point where x / scale is NaN; a group with a NaN or an infinity:
    a NaN scale, zero point 8, every code 8. rne is torch.round's: to nearest, ties to even."""
    x, real = blocks_of(w, group)
    finite = (x.isfinite() | ~real).all(-1)
    lo, hi = torch.where(real, x, INF).amin(-1), torch.where(real, x, -INF).amax(-1)
    amax = torch.where(real, x.abs(), 0.0).amax(-1)
    if zeros:
        ratio = f32(f32(hi - lo).clamp_min(f32(torch.tensor(1e-5, dtype=F64))) / 15)
    else:
        ratio = torch.where(amax > 0, f32(f32(2 * amax) / 15), f32(torch.tensor(2 / 15, dtype=F64)))
    stored = ratio.float().to(scales_dtype)  # to nearest, ties to even
    scale = stored.double()
    zero = torch.round(f32(-lo / scale)).clamp(0, 15) if zeros else torch.full_like(scale, 8.0)
    q = f32(torch.round(f32(x / scale[..., None])) + zero[..., None])
    q = torch.where(q.isnan(), zero[..., None], q).clamp(0, 15)
    q = torch.where(finite[..., None], q, 8.0)
    bits = torch.where(finite, stored.view(torch.int16), QUIET_NAN[scales_dtype])
    zero = torch.where(finite, zero, 8.0).to(scales_dtype).t() if zeros else None
    return packed(q, w.size(1)), bits.t(), zero


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the magnitude of each code 0..7
POW2 = {e: 2.0 ** e for e in range(-127, 128)}


def e2m1_codes(y):
    """y (double) to e2m1 codes: the nearest magnitude (6 for anything above), of two at the same
    distance the even code, and the sign bit 8 where y is negative (-0 too)."""
    magnitudes = torch.tensor(E2M1, dtype=F64, device=y.device)
    distance = (y.abs().unsqueeze(-1) - magnitudes).abs()
    nearest = distance == distance.amin(-1, keepdim=True)
    preference = nearest * (2 - torch.arange(8, device=y.device) % 2)  # at a tie the even code wins
    return preference.argmax(-1) | torch.signbit(y).long() * 8


def mxfp4_rule(w):
    """quantize_mxfp4's (weight [N, ceil(K/2)] uint8, exponents [N, ceil(K/32)] uint8) for w [N,
    K]: per block of 32 along K, s = floor(log2(amax)) - 2 clamped to [-127, 127] (0 for zeros),
    stored as s + 127, and each code e2m1(x * 2^-s); a block with a NaN or an infinity: 255 and
    every code 0. x * 2^-s is exact in double; in float32 it rounds only below 2^-126, far below
    e2m1's first midpoint, and keeps its sign."""
    x, real = blocks_of(w, 32)
    finite = (x.isfinite() | ~real).all(-1)
    amax = torch.where(real & finite[..., None], x.abs(), 0.0).amax(-1)
    s = (torch.frexp(amax).exponent.long() - 1 - 2).clamp(-127, 127)  # frexp: amax = m 2^e, m in [0.5, 1)
    s = torch.where(amax == 0, 0, s)
    scale = torch.tensor([POW2[-e] for e in s.flatten().tolist()], dtype=F64, device=w.device).view(s.shape)
    codes = torch.where(finite[..., None], e2m1_codes(x * scale[..., None]), 0)
    return packed(codes, w.size(1)), torch.where(finite, s + 127, 255).to(U8)


def test_the_int4_rule_on_worked_values():
    # One group of 4: amax 1.5 gives scale 2 * 1.5 / 15 = 0.2 (bf16 0.2001953125); 0.3 / scale =
    # 1.498... -> 1, -1.5 / scale = -7.49... -> -7; with zero points, lo -1.5 and hi 0.75 give
    # scale 0.15 (bf16 0.150390625), zero rne(9.97...) = 10.
    w = torch.tensor([[0.3, -1.5, 0.0, 0.75]])
    qweight, bits, zeros = int4_rule(w, 4, False, BF16)
    assert bits.view(BF16).item() == 0.2001953125 and zeros is None
    assert qweight.tolist() == [[(8 + 1) | (8 - 7) << 4, 8 | (8 + 4) << 4]]
    qweight, bits, zeros = int4_rule(w, 4, True, BF16)
    assert bits.view(BF16).item() == 0.150390625 and zeros.tolist() == [[10.0]]
    assert qweight.tolist() == [[(10 + 2) | 0 << 4, 10 | (10 + 5) << 4]]
    # Groups of 2 of K = 5 (the last one short, its high nibble 0), in f16: a group of zeros gets
    # 2 / 15; a tie (x / scale = 2.5 -> 2) goes to even; a NaN marks its group alone.
    w = torch.tensor([[0.0, 0.0, 2.5, -7.5, float("nan")]])
    qweight, bits, _ = int4_rule(w, 2, False, F16)
    assert bits.view(F16)[:2, 0].tolist() == [0.13330078125, 1.0] and bits[2, 0].item() == 0x7e00
    assert qweight.tolist() == [[8 | 8 << 4, (8 + 2) | (8 - 8) << 4, 8]]


def test_the_mxfp4_rule_on_worked_values():
    # amax 5 -> s = floor(log2 5) - 2 = 0: 0.25 -> 0 (tie, even), 0.75 -> 1.0 (code 2), 1.25 -> 1.0,
    # 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0 (ties), 7 -> 6 (saturated), -0 -> code 8.
    row = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.0] + [0.0] * 24
    w = torch.tensor([row, [7.0] + [-0.3] + [0.0] * 30])
    weight, scales = mxfp4_rule(w)
    assert scales.tolist() == [[127], [127]]
    assert weight[0, :4].tolist() == [0 | 2 << 4, 2 | 4 << 4, 4 | 6 << 4, 6 | 8 << 4]
    assert weight[1, :1].tolist() == [7 | (8 | 1) << 4]  # -0.3 -> -0.5 (code 9)
    # Blocks of 32 along K = 33: amax 2^-140 clamps s to -127; 96 gives s = 4 (96 / 16 = 6); NaN: 255.
    w = torch.zeros(3, 33)
    w[0, 0], w[1, 32], w[2, 5] = 2.0 ** -140, 96.0, float("nan")
    weight, scales = mxfp4_rule(w)
    assert scales.tolist() == [[0, 127], [127, 131], [255, 127]]
    assert weight[:, 16].tolist() == [0, 7, 0] and weight.shape == (3, 17)  # K odd: the high nibble 0


# --- without a GPU: the binding, the operator under fake tensors, the errors ---------------------

@pytest.fixture
def cpu_launch(monkeypatch):
    """_torch.launch_quantize_w4 on CPU tensors, on stream 0."""
    on_stream_zero(monkeypatch)
    return _torch.launch_quantize_w4


def test_the_launch_passes_the_views_the_c_api_takes(cpu_launch):
    n, k = 11, 4097  # odd: 2049 bytes a row
    for w in (torch.zeros(n, k, dtype=F32), torch.zeros(k, n, dtype=BF16).t()):  # any strides
        for group, zeros in ((128, True), (32, False), (8192, True)):
            qweight, scales, z = _torch.new_quantize_w4_outputs(w, "int4", group, zeros, F16)
            refused_for_memory_alone(lambda: cpu_launch(w, qweight, scales, z, "int4", group))
        weight, e, _ = _torch.new_quantize_w4_outputs(w, "mxfp4", 32, False, U8)
        refused_for_memory_alone(lambda: cpu_launch(w, weight, e, None, "mxfp4", 32))
        refused_for_memory_alone(lambda: cpu_launch(w, weight, e.contiguous(), None, "mxfp4", 32))  # any strides
    # gemmkit's own checks see W^T (K x N), the codes beside it and B's scales.
    w = torch.zeros(n, k, dtype=BF16)
    qweight, scales, _ = _torch.new_quantize_w4_outputs(w, "int4", 128, False, BF16)
    with pytest.raises(ValueError, match=r"^scales: shape \[33, 11\]; expected ceil\(K/64\) x N = 65 x 11$"):
        cpu_launch(w, qweight, scales, None, "int4", 64)
    with pytest.raises(ValueError, match=r"^group: 5 with K = 4097; expected an even group"):
        cpu_launch(w, qweight, scales, None, "int4", 5)
    with pytest.raises(ValueError, match=r"^scales: dtype f32; expected bf16 or f16"):
        cpu_launch(w, qweight, scales.float(), None, "int4", 128)
    with pytest.raises(ValueError, match=r"^qweight: shape \[11, 2049\]; expected \[N, ceil\(K/2\)\] = \[11, 2048\]"):
        cpu_launch(w[:, :4096], qweight, scales, None, "int4", 128)
    weight, e, _ = _torch.new_quantize_w4_outputs(w, "mxfp4", 32, False, U8)
    with pytest.raises(ValueError, match=r"^scales: shape \[11, 129\]; expected ceil\(K/32\) x N = 129 x 11$"):
        cpu_launch(w, weight, e.t(), None, "mxfp4", 32)  # [129, N] given: the wrong way round
    with pytest.raises(ValueError, match=r"^zeros: given with MXFP4 weights; expected None$"):
        cpu_launch(w, weight, e, e, "mxfp4", 32)


FAKE = torch._subclasses.fake_tensor.FakeTensor


@pytest.mark.parametrize("dtype,scales_dtype,expected", [(BF16, None, BF16), (F16, None, F16), (F32, None, BF16),
                                                         (F32, F16, F16), (BF16, F16, F16)])
def test_fake_int4_shapes_and_dtypes(fake, dtype, scales_dtype, expected):
    for n, k, group, groups in [(4095, 4097, 128, 33), (7, 1000, 32, 32), (3, 300, 300, 1), (3, 300, 4096, 1)]:
        qweight, scales, zeros = gemmkit.quantize_int4(cuda(n, k, dtype=dtype), group=group, zeros=True,
                                                       scales_dtype=scales_dtype)
        assert all(isinstance(t, FAKE) and t.device.type == "cuda" for t in (qweight, scales, zeros))
        assert qweight.shape == (n, (k + 1) // 2) and qweight.dtype == U8 and qweight.is_contiguous()
        assert scales.shape == zeros.shape == (groups, n) and scales.dtype == zeros.dtype == expected
        assert scales.is_contiguous() and zeros.is_contiguous()  # N-contiguous: int4_mm reads them as they lie
        # The results are int4_mm's inputs.
        assert gemmkit.int4_mm(cuda(5, k, dtype=expected), qweight, scales, zeros, group=group).shape == (5, n)
    qweight, scales, zeros = gemmkit.quantize_int4(cuda(64, 256, dtype=dtype).t().contiguous().t())
    assert qweight.shape == (64, 128) and scales.shape == (2, 64) and zeros is None


def test_fake_mxfp4_shapes_and_strides(fake):
    for dtype in (BF16, F16, F32):
        weight, scales = gemmkit.quantize_mxfp4(cuda(4095, 4097, dtype=dtype))
        assert isinstance(weight, FAKE) and weight.shape == (4095, 2049) and weight.dtype == U8
        # [N, ceil(K/32)] exponents, stored [ceil(K/32), N]: mxfp4_mm reads them without a copy.
        assert scales.shape == (4095, 129) and scales.dtype == U8 and scales.stride() == (1, 4095)
        assert gemmkit.mxfp4_mm(cuda(3, 4097), weight, scales).shape == (3, 4095)
    q, s, z = torch.ops.gemmkit.quantize_w4(cuda(10, 64, dtype=F32), "mxfp4", 32, False, U8)
    assert q.shape == (10, 32) and s.shape == (10, 2) and z is None


QUANTIZE_W4 = (torch.ops.gemmkit.quantize_w4, torch.ops.gemmkit.quantize_w4.default)  # as a graph may record it


def test_a_traced_quantisation_is_one_operator(fake):
    def quantize_and_multiply(w, x):
        qweight, scales, zeros = gemmkit.quantize_int4(w, group=64, zeros=True)
        weight, e = gemmkit.quantize_mxfp4(w)
        return gemmkit.int4_mm(x, qweight, scales, zeros, group=64) + gemmkit.mxfp4_mm(x, weight, e)

    args = (cuda(96, 1000), cuda(8, 1000))
    graph, _ = torch._dynamo.export(quantize_and_multiply)(*args)  # raises where dynamo would break the graph
    calls = [node.args[1:] for node in graph.graph.nodes if node.target in QUANTIZE_W4]
    assert calls == [("int4", 64, True, BF16), ("mxfp4", 32, False, U8)]
    assert graph(*args).shape == (8, 96)


def test_results_never_require_grad(fake):
    # Traced, as in eager: w's gradient cannot silently stop at the quantisation.
    w = cuda(64, 256).requires_grad_()
    for results in (gemmkit.quantize_int4(w, zeros=True), gemmkit.quantize_mxfp4(w),
                    torch.ops.gemmkit.quantize_w4(w, "int4", 128, True, BF16),
                    torch.ops.gemmkit.quantize_w4(w, "int4", 128, False, F16),
                    torch.ops.gemmkit.quantize_w4(w, "mxfp4", 32, False, U8)):
        assert not any(t.requires_grad for t in results if t is not None)


@pytest.fixture
def cpu_quantize_w4():
    """quantize_w4 with a CPU kernel, the rules above, for the duration of a test."""
    from cpu_stand_ins import registered_on_cpu

    def quantize_w4(w, format, group, zeros, scales_dtype):
        if format == "mxfp4":
            weight, e = mxfp4_rule(w)
            return weight, e.t().contiguous().t(), None
        qweight, bits, z = int4_rule(w, group, zeros, scales_dtype)
        return qweight, bits.view(scales_dtype).contiguous(), z.contiguous() if zeros else None

    yield from registered_on_cpu({"quantize_w4": quantize_w4})


def test_gradients_flow_around_the_quantisation(cpu_quantize_w4):
    # The quantised weights are constants to autograd: w's other uses still get their gradient.
    w = torch.randn(5, 64, dtype=F32, requires_grad=True)
    qweight, scales, zeros = torch.ops.gemmkit.quantize_w4(w, "int4", 32, True, BF16)
    assert not (qweight.requires_grad or scales.requires_grad or zeros.requires_grad)
    deq = int4_weights(qweight, scales, zeros, 32, 64).float()
    (w * deq).sum().backward()
    assert torch.equal(w.grad, deq)
    weight, e, none = torch.ops.gemmkit.quantize_w4(w, "mxfp4", 32, False, U8)
    assert none is None and not weight.requires_grad and not e.requires_grad
    assert mxfp4_weights(weight, e, 64).shape == (5, 64)


def test_errors_name_the_argument(fake):
    w = cuda(64, 256)
    cases = [
        (TypeError, r"^w: expected a torch.Tensor or an array with __dlpack__, got list$",
         lambda: gemmkit.quantize_int4([[1.0]])),
        (ValueError, r"^w: 3 dimensions; expected 2, \[N, K\] \(torch.nn.Linear's weight\)$",
         lambda: gemmkit.quantize_int4(cuda(2, 64, 256))),
        (ValueError, r"^w: 1 dimensions; expected 2, \[N, K\]", lambda: gemmkit.quantize_mxfp4(cuda(256))),
        (TypeError, r"^w: dtype torch.float8_e4m3fn is not supported; expected bfloat16, float16 or float32$",
         lambda: gemmkit.quantize_int4(cuda(64, 256, dtype=torch.float8_e4m3fn))),
        (TypeError, r"^w: dtype torch.float64 is not supported", lambda: gemmkit.quantize_mxfp4(cuda(64, 256,
                                                                                                   dtype=F64))),
        (ValueError, r"^group: 48; expected 32, a power of two from 64, or at least K = 256 \(one scale a column\)$",
         lambda: gemmkit.quantize_int4(w, group=48)),
        (ValueError, r"^group: 16; expected 32", lambda: gemmkit.quantize_int4(w, group=16)),
        (ValueError, r"^group: 0; expected", lambda: gemmkit.quantize_int4(w, group=0)),
        (ValueError, r"^group: -128; expected", lambda: gemmkit.quantize_int4(w, group=-128)),
        (TypeError, r"^group: float; expected an int", lambda: gemmkit.quantize_int4(w, group=128.0)),
        (TypeError, r"^zeros: (Fake)?Tensor; expected True or False \(whether to compute zero points\)$",
         lambda: gemmkit.quantize_int4(w, zeros=cuda(2, 64))),
        (TypeError, r"^scales_dtype: torch.float32 is not supported; expected torch.bfloat16 or torch.float16 "
                    r"\(int4_mm takes scales of x's dtype\)$",
         lambda: gemmkit.quantize_int4(w, scales_dtype=F32)),
        (TypeError, r"^scales_dtype: bf16 is not supported", lambda: gemmkit.quantize_int4(w, scales_dtype="bf16")),
        (TypeError, r"^quantize_mxfp4\(\) got an unexpected keyword argument 'zeros'$",
         lambda: gemmkit.quantize_mxfp4(w, zeros=True)),
        (TypeError, r"^quantize_int4\(\) takes 1 positional argument but 2 were given$",
         lambda: gemmkit.quantize_int4(w, 64)),
        (ValueError, r"^zeros: True with format 'mxfp4'; expected False \(zero points are int4's\)$",
         lambda: torch.ops.gemmkit.quantize_w4(w, "mxfp4", 32, True, U8)),
        (ValueError, r"^group: 64 with format 'mxfp4'; expected 32",
         lambda: torch.ops.gemmkit.quantize_w4(w, "mxfp4", 64, False, U8)),
        (TypeError, r"^scales_dtype: torch.float8_e8m0fnu with format 'mxfp4'; expected torch.uint8",
         lambda: torch.ops.gemmkit.quantize_w4(w, "mxfp4", 32, False, E8M0)),
        (ValueError, r"^format: 'nvfp4'; expected 'int4' or 'mxfp4'$",
         lambda: torch.ops.gemmkit.quantize_w4(w, "nvfp4", 16, False, E8M0)),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()


def test_errors_without_fake_tensors():
    with pytest.raises(ValueError, match="^w: on cpu; expected a CUDA tensor$"):
        gemmkit.quantize_int4(torch.zeros(64, 256, dtype=BF16))
    with pytest.raises(ValueError, match="^w: on cpu; expected a CUDA tensor$"):
        gemmkit.quantize_mxfp4(torch.zeros(64, 256, dtype=BF16))


def test_the_functions_are_the_packages():
    for name in ("quantize_int4", "quantize_mxfp4"):
        assert getattr(gemmkit, name) is getattr(_torch, name) and name in gemmkit.__all__
    assert hasattr(torch.ops.gemmkit, "quantize_w4")


# --- on an sm_90 GPU: bit for bit against the rules, and round trips ---------------------------------
# The inputs are made on the CPU, where the rules' statement was also checked against
# src/reference/lowbit.cpp on the same inputs.

def random_weights(n, k, dtype, seed):
    """w [n, k] of `dtype` (CPU): normal values, each row's magnitude 10^u for u uniform in [-3,
    3], so that the scales span many binades."""
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=generator, dtype=F64) * 10.0 ** (torch.rand(n, 1, generator=generator) * 6 - 3)
    return w.to(dtype)


# The round trips' weights scaled so that x @ w.T stays within float16's range (65504) in a
# float16 output: rows of 10^3 overflowed it.
F16_FIT = {BF16: 1.0, F16: 1e-2}


def all_values_of(dtype, below):
    """Every finite value of the 16-bit `dtype` with magnitude below `below`, both signs (double)."""
    values = torch.arange(-(2 ** 15), 2 ** 15, dtype=torch.int32).to(torch.int16).view(dtype).double()
    return values[values.isfinite() & (values.abs() < below)].sort().values


def as_rows(values, k):
    """values (1-D) as rows of k, the last padded with zeros."""
    rows = -(-values.numel() // k)
    return torch.cat((values, values.new_zeros(rows * k - values.numel()))).view(rows, k)


def int4_tie_weights(dtype):
    """Groups of 128 that span [-7.5, 7.5], which gives scale 1 (symmetric: 2 * 7.5 / 15; zero
    points: 15 / 15, zero rne(7.5) = 8), so that x / scale is x: every value of `dtype` in
    between, every tie among them, fills the groups."""
    rows = as_rows(all_values_of(dtype, 7.5), 126)
    ends = torch.tensor([7.5, -7.5], dtype=F64).expand(rows.size(0), 2)
    return torch.cat((rows, ends), 1).to(dtype)


def int4_special_weights():
    """[6, 702] in double, groups of 64 (the last 62 long): zeros, constants, non-finite values,
    values whose f16 scales round to 0 or overflow, and float32 subnormals."""
    w = torch.randn(6, 11 * 64 - 2, generator=torch.Generator().manual_seed(0), dtype=F64)
    w[0] = 0.0  # groups of zeros
    w[1, :64] = 3.0  # constant: hi - lo = 0 -> 1e-5
    w[1, 64:128] = -0.0
    w[2, 5], w[2, 70], w[2, 200] = float("nan"), INF, -INF  # one non-finite value marks its group alone
    w[3] *= 1e-9  # f16 scales round to 0: x / 0 is +-inf (codes 15, 0) or NaN (the zero point)
    w[4] *= 3e37  # near float32's top (2 amax stays finite); f16 scales overflow to inf
    w[5, :64] = 2.0 ** -140  # float32 subnormals
    w[5, 64:128] = torch.linspace(-1e-40, 1e-40, 64, dtype=F64)
    return w


def mxfp4_every_value_weights(dtype):
    """Blocks whose amax is 7.5 (s = 0; above 6: saturation) holding every value of `dtype` below
    7.5, every midpoint and its neighbours among them; then the same times 2^-10 (s = -10)."""
    values = all_values_of(dtype, 7.5)
    rows = torch.cat((as_rows(values, 31), torch.full((-(-values.numel() // 31), 1), 7.5, dtype=F64)), 1)
    return torch.cat((rows, rows * 2.0 ** -10)).to(dtype)


def mxfp4_special_weights():
    """[10, 101] in double, blocks of 32 (the last 5 long): float32's neighbours of each e2m1
    midpoint at three scales, zeros, non-finite values, float32's extremes."""
    midpoints = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)
    near = torch.cat([torch.nextafter(midpoints, torch.tensor(-INF)), midpoints,
                      torch.nextafter(midpoints, torch.tensor(INF))]).double()
    extra = torch.tensor([7.0, 6.0, 0.0, -0.0, 2.0 ** -30, -(2.0 ** -30), 4.0, 5.9], dtype=F64)
    values = torch.cat((near, -near, extra))  # 50: two blocks, amax 5 and 7 (s = 0)
    w = torch.zeros(10, 96 + 5, dtype=F64)
    w[0, :50] = values
    w[1, :50] = values * 2.0 ** 100
    w[2, :50] = values * 2.0 ** -100
    w[3, :32] = -0.0  # a block of zeros, one of them negative: exponent 127, codes 8
    w[4, 3], w[4, 40] = float("nan"), -INF  # NaN scales (255), codes 0
    w[5, :32] = 2.0 ** -140  # subnormal amax: s clamps to -127
    w[6, :32] = 3.0e38  # s = 125
    w[7, 96:] = torch.tensor([1.0, -2.0, 3.0, -4.0, 6.0], dtype=F64)  # the short last block
    w[8] = torch.randn(101, generator=torch.Generator().manual_seed(1), dtype=F64) * 2.0 ** -126  # subnormals
    w[9] = float("nan")
    return w


def expect_int4_rule(w, group, zeros, scales_dtype=None):
    """quantize_int4 of w (CPU) on the GPU against int4_rule, bit for bit."""
    qweight, scales, z = gemmkit.quantize_int4(w.cuda(), group=group, zeros=zeros, scales_dtype=scales_dtype)
    expected = int4_rule(w, group, zeros, scales.dtype)
    assert torch.equal(qweight.cpu(), expected[0])
    assert torch.equal(scales.cpu().view(torch.int16), expected[1])
    assert (z is None) == (not zeros) and (z is None or torch.equal(z.cpu(), expected[2]))
    return scales


def expect_mxfp4_rule(w):
    """quantize_mxfp4 of w (CPU) on the GPU against mxfp4_rule, bit for bit."""
    weight, scales = gemmkit.quantize_mxfp4(w.cuda())
    expected = mxfp4_rule(w)
    assert torch.equal(weight.cpu(), expected[0])
    assert torch.equal(scales.cpu(), expected[1])


INT4_SHAPES = [(257, 1000, 128), (33, 999, 32), (64, 4097, 64), (7, 300, 300), (5, 100, 4096), (1, 1, 128),
               (4095, 256, 256)]  # (N, K, group)
MXFP4_SHAPES = [(257, 1000), (33, 999), (4095, 4097), (1, 1), (3, 31)]


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16, F32])
@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("n,k,group", INT4_SHAPES)
def test_int4_codes_and_scales_follow_the_rules(n, k, group, zeros, dtype):
    w = random_weights(n, k, dtype, seed=n * k + group)
    assert expect_int4_rule(w, group, zeros).dtype == (BF16 if dtype == F32 else dtype)
    expect_int4_rule(w, group, zeros, F16 if dtype == BF16 else BF16)


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("zeros", [False, True])
def test_int4_rounding_of_every_16_bit_value(dtype, zeros):
    expect_int4_rule(int4_tie_weights(dtype), 128, zeros)


@needs_sm90
@pytest.mark.parametrize("scales_dtype", [BF16, F16])
@pytest.mark.parametrize("zeros", [False, True])
def test_int4_special_groups(scales_dtype, zeros):
    w = int4_special_weights()
    expect_int4_rule(w.to(F32), 64, zeros, scales_dtype)
    expect_int4_rule(w[:3].to(BF16), 64, zeros, scales_dtype)


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16, F32])
@pytest.mark.parametrize("n,k", MXFP4_SHAPES)
def test_mxfp4_codes_and_scales_follow_the_rules(n, k, dtype):
    expect_mxfp4_rule(random_weights(n, k, dtype, seed=n + k))


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_mxfp4_rounding_of_every_16_bit_value(dtype):
    expect_mxfp4_rule(mxfp4_every_value_weights(dtype))


@needs_sm90
def test_mxfp4_near_the_midpoints_and_special_blocks():
    w = mxfp4_special_weights()
    expect_mxfp4_rule(w.to(F32))
    expect_mxfp4_rule(w[:5].to(BF16))


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("group,zeros", [(32, True), (64, False), (128, True), (128, False), (1000, True)])
def test_int4_round_trip(group, zeros, dtype):
    n, k = 257, 1000
    w = (random_weights(n, k, F32, seed=group) * F16_FIT[dtype]).cuda()
    qweight, scales, z = gemmkit.quantize_int4(w, group=group, zeros=zeros, scales_dtype=dtype)
    deq = int4_weights(qweight, scales, z, group, k)
    # Within one step of the weights (half a step and the scale's rounding, or clamped at the ends),
    # in the groups whose range holds 0: with zero points, a group of one sign (K's short last
    # group of 8, at times) has its zero point clamped to 0 or 15, as AWQ's rule clamps it.
    index = torch.arange(k, device="cuda") // group
    step = scales.double()[index].t()
    blocks, real = blocks_of(w, group)
    spans = (torch.where(real, blocks, INF).amin(-1) <= 0) & (torch.where(real, blocks, -INF).amax(-1) >= 0)
    checked = spans[:, index] if zeros else torch.ones_like(step, dtype=torch.bool)
    assert checked.float().mean() > 0.95
    assert ((deq - w.double()).abs() <= step)[checked].all()
    x = torch.randn(33, k, device="cuda").to(dtype)
    expect_close(gemmkit.int4_mm(x, qweight, scales, z, group=group), x, deq)


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_mxfp4_round_trip(dtype):
    n, k = 257, 1000
    w = (random_weights(n, k, F64, seed=7) * F16_FIT[dtype]).to(dtype).cuda()
    weight, scales = gemmkit.quantize_mxfp4(w)
    deq = mxfp4_weights(weight, scales, k)
    # Within 2 * 2^s of the weights (half a step of 2 at most, or 6 for 7.99 at the top).
    unit = torch.exp2(scales.double() - 127)[:, torch.arange(k, device="cuda") // 32]
    assert ((deq - w.double()).abs() <= 2 * unit).all()
    x = torch.randn(33, k, device="cuda").to(dtype)
    expect_close(gemmkit.mxfp4_mm(x, weight, scales), x, deq)
    expect_close(gemmkit.mxfp4_mm(x, weight, scales.contiguous()), x, deq)  # gpt-oss's layout too


@needs_sm90
def test_strided_weights_compiled_and_graphed():
    w = random_weights(129, 1000, BF16, seed=3).cuda()
    expected = gemmkit.quantize_int4(w, group=64, zeros=True) + gemmkit.quantize_mxfp4(w)
    columns = w.t().contiguous().t()  # K x N storage: the same weights
    sliced = torch.zeros(129, 1040, device="cuda", dtype=BF16)[:, 8:1008].copy_(w)

    def both(w):
        return gemmkit.quantize_int4(w, group=64, zeros=True) + gemmkit.quantize_mxfp4(w)

    for results in (both(columns), both(sliced), torch.compile(both, fullgraph=True)(w),
                    both(w.clone().requires_grad_())):
        assert all(torch.equal(r, e) for r, e in zip(results, expected))
        assert not any(r.requires_grad for r in results)
    graph, captured = capture(lambda: both(w))
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(c, e) for c, e in zip(captured, expected))
