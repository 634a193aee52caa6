"""gemmkit.mm, bmm and addmm on torch tensors against a double-precision product. Each result
is checked against |ref| * (half an ulp of the output type) + K * 2^-24 * (|a| @ |b|): rounding
the f32 sum once, plus f32 accumulation. Needs torch and an sm_90 GPU; skips, saying so,
without them."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("no sm_90 GPU", allow_module_level=True)

import gemmkit

HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def expect_close(d, a, b, alpha=1.0, beta=0.0, c=None):
    ref = alpha * torch.matmul(a.double(), b.double())
    bound = torch.matmul(a.double().abs(), b.double().abs()) * abs(alpha) * a.shape[-1] * 2.0 ** -24
    if c is not None and beta != 0:
        ref = ref + beta * c.double()
    bound = bound + ref.abs() * HALF_ULP[d.dtype]
    assert torch.isfinite(d).all(), "non-finite outputs"
    error = (d.double() - ref).abs()
    assert (error <= bound + 1e-30).all(), f"max error {error.max().item()} over bound {bound.max().item()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 13, 29), (128, 256, 64), (129, 255, 4097), (1000, 1000, 1000)])
def test_mm_matches_double(dtype, m, n, k):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    expect_close(gemmkit.mm(a, b), a, b)


def test_transposed_views_and_slices_run_as_they_are():
    a, b = rand(300, 200), rand(500, 300)
    for x, y in [(a.t(), b.t()), (a[:, 10:110].t(), b[::2].t()), (a[1:, 1:], b[:, :199].t())]:
        expect_close(gemmkit.mm(x, y), x, y)


def test_out_out_dtype_alpha_beta_and_c_in_place():
    a, b = rand(256, 384), rand(384, 192)
    out = nan_like((256, 192), torch.float32)
    assert gemmkit.mm(a, b, out=out) is out
    expect_close(out, a, b)
    expect_close(gemmkit.mm(a, b, out_dtype=torch.float32), a, b)
    c = rand(256, 192, dtype=torch.float32)
    expect_close(gemmkit.mm(a, b, out_dtype=torch.float32, alpha=0.5, beta=-2.0, c=c), a, b, 0.5, -2.0, c)
    d = c.clone()
    gemmkit.mm(a, b, out=d, alpha=0.5, beta=-2.0, c=d)
    expect_close(d, a, b, 0.5, -2.0, c)


def test_bmm_with_batches_and_a_shared_operand():
    a, b = rand(4, 100, 64), rand(4, 64, 72)
    expect_close(gemmkit.bmm(a, b), a, b)
    shared = rand(64, 72)
    expect_close(gemmkit.bmm(a, shared), a, shared.expand(4, 64, 72))


def test_addmm_broadcasts_a_bias_row():
    bias, a, b = rand(72, dtype=torch.float32), rand(100, 64), rand(64, 72)
    d = gemmkit.addmm(bias, a, b, beta=1.0, alpha=2.0, out=nan_like((100, 72), torch.float32))
    expect_close(d, a, b, 2.0, 1.0, bias.expand(100, 72))


def test_runs_on_the_current_stream():
    a, b = rand(512, 512), rand(512, 512)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        d = gemmkit.mm(a, b)
    stream.synchronize()
    expect_close(d, a, b)


def test_misuse_raises_with_the_argument_named():
    a, b = rand(8, 16), rand(16, 4)
    with pytest.raises(TypeError, match="^a: dtype torch.float64 is not supported"):
        gemmkit.mm(a.double(), b)
    with pytest.raises(TypeError, match="^b: expected a torch.Tensor"):
        gemmkit.mm(a, [[1.0]])
    with pytest.raises(ValueError, match="^a: 3 dimensions; expected 2"):
        gemmkit.mm(a.unsqueeze(0), b)
    with pytest.raises(ValueError, match="^B: shape"):
        gemmkit.mm(a, rand(15, 4))
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor"):
        gemmkit.mm(a.cpu(), b)
    with pytest.raises(TypeError, match="^input: expected a torch.Tensor"):
        gemmkit.addmm(1.0, a, b)
