"""gemmkit's torch functions on an sm_90 GPU, against double-precision products: dtypes, layouts,
out=, the FP8 product and quantisation in every scaling mode, the operators under opcheck,
torch.compile, CUDA graphs, autograd, DLPack and threads. A 16-bit result is checked against
|ref| * (half an ulp of the output type) + K * 2^-24 * (|a| @ |b|): rounding the f32 sum once,
plus f32 accumulation; an FP8 one against 2^-10 * (|a| @ |b|) for the tensor cores' narrower
sums (src/reference/compare.h). Skips, saying so, without torch or an sm_90 GPU."""

import os
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import (E4M3, E5M2, E8M0, capture, dequantized, expect_close, expect_grads,  # noqa: E402
                           nan_like, rand, skip_without_sm90)

skip_without_sm90()

import gemmkit  # noqa: E402
from dlpack_array import Array  # noqa: E402


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
    with pytest.raises(ValueError, match="^B: shape"):  # the same message through the operator
        gemmkit.mm(rand(8, 16, requires_grad=True), rand(15, 4))
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor"):
        gemmkit.mm(a.cpu(), b)
    with pytest.raises(ValueError, match="^scale_a: shape"):
        gemmkit.scaled_mm(a.to(E4M3), b.to(E4M3), torch.ones(3, 1, device="cuda"), torch.ones(1, 4, device="cuda"),
                          mode="rowwise")
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.mm(rand(8, 16, requires_grad=True), b, out=torch.empty(8, 4, device="cuda", dtype=torch.bfloat16))


# --- FP8 ---------------------------------------------------------------------------------------

MAX_FINITE = {E4M3: 448.0, E5M2: 57344.0}
# Relative rounding of a normal value, and the absolute one below the normal range, per scale.
ROUNDING = {E4M3: (2.0 ** -4, 2.0 ** -10), E5M2: (2.0 ** -3, 2.0 ** -17)}


@pytest.mark.parametrize("mode,block", [("tensor", None), ("rowwise", None), ("block", None),
                                        ("block", (128, 128)), ("mx", None)])
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_quantize_each_block_within_rounding(mode, block, dtype):
    x = rand(3, 130, 300, dtype=torch.float32) * 10
    q, s = gemmkit.quantize(x, dtype, mode, block=block)
    assert q.shape == x.shape and q.dtype == dtype and s.dtype == (E8M0 if mode == "mx" else torch.float32)
    full = dequantized(torch.ones_like(q, dtype=torch.float32), s, mode, block)
    relative, absolute = ROUNDING[dtype]
    error = (dequantized(q, s, mode, block) - x.double()).abs()
    assert (error <= x.double().abs() * relative + full * absolute).all()
    # Each block's largest value lands near the top of the range, none above it.
    top = q.double().abs().amax()
    assert top <= MAX_FINITE[dtype] and top >= MAX_FINITE[dtype] / (2.0 if mode == "mx" else 1.01)


def test_quantize_power_of_two_scales():
    x = rand(64, 256, dtype=torch.bfloat16)
    _, s = gemmkit.quantize(x, mode="block", power_of_two=True)
    assert torch.equal(torch.exp2(torch.log2(s).round()), s)
    amax = x.float().abs().reshape(64, 2, 128).amax(-1)
    assert (s >= amax / 448).all() and (s < 2 * amax / 448).all()


@pytest.mark.parametrize("mode,w_block", [("tensor", None), ("rowwise", None), ("block", (128, 128)),
                                          ("mx", None), (("block", "tensor"), None)])
@pytest.mark.parametrize("m,n,k", [(1, 256, 512), (100, 300, 640), (256, 512, 1024)])
def test_scaled_mm_matches_double(mode, w_block, m, n, k):
    mode_a, mode_b = (mode, mode) if isinstance(mode, str) else mode
    x, w = rand(m, k) * 3, rand(n, k)  # activations M x K, weights N x K
    qx, sx = gemmkit.quantize(x, E4M3, mode_a)
    qw, sw = gemmkit.quantize(w, E4M3, mode_b, block=w_block)
    d = gemmkit.scaled_mm(qx, qw.t(), sx, sw.t(), mode=mode, out=nan_like((m, n), torch.float32))
    x, w = dequantized(qx, sx, mode_a), dequantized(qw, sw, mode_b, w_block)
    expect_close(d, x, w.t(), accumulation=2.0 ** -10)
    d16 = gemmkit.scaled_mm(qx, qw.t(), sx, sw.t(), mode=mode)
    assert d16.dtype == torch.bfloat16
    expect_close(d16, x, w.t(), accumulation=2.0 ** -10)


def test_scaled_mm_e5m2_gradients_and_single_scales():
    g, x = rand(128, 256).to(E5M2), rand(256, 64).to(E4M3)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor([2.0], device="cuda")
    d = gemmkit.scaled_mm(g, x, sa, sb, out_dtype=torch.float32)
    expect_close(d, g.double() * 0.5, x.double() * 2.0, accumulation=2.0 ** -10)


# --- the operators -------------------------------------------------------------------------------

def test_opcheck():
    a, b, c = rand(64, 96), rand(96, 48), rand(64, 48, dtype=torch.float32)
    gemm, gemm_out, quantize = (torch.ops.gemmkit.gemm.default, torch.ops.gemmkit.gemm_out.default,
                                torch.ops.gemmkit.quantize.default)
    torch.library.opcheck(gemm, (a, b, None, None, "none", "none", None, 1.0, 0.0, None))
    shared_a, b3 = rand(64, 96, requires_grad=True), rand(3, 96, 48, requires_grad=True)
    shared_c = rand(64, 48, dtype=torch.float32, requires_grad=True)
    torch.library.opcheck(gemm, (shared_a, b3, None, None, "none", "none", torch.float32, 0.5, 2.0, shared_c))
    out = torch.empty(64, 48, device="cuda")
    torch.library.opcheck(gemm_out, (a, b, out, None, None, "none", "none", 1.0, 1.0, c))
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs.
    qa, sa = gemmkit.quantize(a.float(), mode="rowwise")
    torch.library.opcheck(gemm, (qa, qa.t(), sa, sa.t(), "rowwise", "rowwise", None, 1.0, 0.0, None),
                          test_utils="test_faketensor")
    torch.library.opcheck(quantize, (a, E4M3, 1, 32, E8M0, True))


def test_torch_compile_full_graph():
    def layer(x, w, bias):
        h = gemmkit.addmm(bias, x, w.t()).relu()
        q, s = gemmkit.quantize(h, mode="rowwise")
        return h, gemmkit.scaled_mm(q, q.t(), s, s.t(), mode="rowwise", out_dtype=torch.float32)

    x, w, bias = rand(128, 256), rand(512, 256), rand(512, dtype=torch.float32)
    compiled = torch.compile(layer, fullgraph=True)
    h, d = compiled(x, w, bias)
    h_eager, d_eager = layer(x, w, bias)
    assert torch.equal(h, h_eager) and torch.equal(d, d_eager)  # the same kernels, run alike
    expect_close(gemmkit.addmm(bias, x, w.t(), out=nan_like((128, 512), torch.float32)), x, w.t(), 1.0, 1.0,
                 bias.expand(128, 512))


def test_cuda_graph_replays_with_new_inputs():
    a, b, c = rand(384, 256), rand(256, 320), rand(384, 320, dtype=torch.float32)
    w = rand(320, 256)
    qw, sw = gemmkit.quantize(w, mode="block", block=(128, 128))

    def layer():
        d = gemmkit.mm(a, b, alpha=0.5, beta=1.0, c=c, out_dtype=torch.float32)
        q, s = gemmkit.quantize(a, mode="block")
        return d, q, s, gemmkit.scaled_mm(q, qw.t(), s, sw.t(), mode="block", out_dtype=torch.float32)

    graph, (d, q, s, e) = capture(layer)
    for _ in range(2):
        a.copy_(rand(384, 256))
        c.copy_(rand(384, 320, dtype=torch.float32))
        d.fill_(float("nan"))
        e.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expect_close(d, a, b, 0.5, 1.0, c)
        expect_close(e, dequantized(q, s, "block"), dequantized(qw, sw, "block", (128, 128)).t(),
                     accumulation=2.0 ** -10)


# --- autograd ----------------------------------------------------------------------------------

def test_autograd_mm_addmm_and_bmm_against_double():
    a, b = rand(96, 160, requires_grad=True), rand(160, 80, requires_grad=True)
    expect_grads(gemmkit.mm(a, b, alpha=0.5), (a, b), lambda x, y: 0.5 * x @ y)
    bias = rand(80, dtype=torch.float32, requires_grad=True)
    expect_grads(gemmkit.addmm(bias, a, b, beta=2.0), (bias, a, b), lambda z, x, y: 2.0 * z + x @ y)
    a3, b3 = rand(3, 96, 160, requires_grad=True), rand(3, 160, 80, requires_grad=True)
    expect_grads(gemmkit.bmm(a3, b3), (a3, b3), lambda x, y: x @ y)
    expect_grads(gemmkit.bmm(a3, b), (a3, b), lambda x, y: x @ y)  # shared B: summed over the batch
    expect_grads(gemmkit.bmm(a, b3), (a, b3), lambda x, y: x @ y)  # shared A
    c = rand(96, 80, dtype=torch.float32, requires_grad=True)
    expect_grads(gemmkit.bmm(a3, b3, beta=-1.0, c=c, out_dtype=torch.float32), (a3, b3, c),
                 lambda x, y, z: x @ y - z)


def test_autograd_runs_gemmkit_and_compiles(monkeypatch):
    launches = []
    launch = gemmkit._torch.launch_gemm
    monkeypatch.setattr(gemmkit._torch, "launch_gemm", lambda *args, **kwargs: launches.append(1) or launch(*args, **kwargs))

    def loss(x, w):
        return gemmkit.mm(x, w.t()).float().square().mean()

    x, w = rand(128, 256, requires_grad=True), rand(192, 256, requires_grad=True)
    eager = torch.autograd.grad(loss(x, w), (x, w))
    assert len(launches) == 3, "the forward product and both gradients run gemmkit"
    compiled = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x, w), (x, w))
    assert len(launches) == 6, "compiled, the forward product and both gradients still run gemmkit"
    for e, c in zip(eager, compiled):
        assert torch.allclose(e.float(), c.float(), rtol=2.0 ** -7, atol=1e-6)


# --- DLPack and threads --------------------------------------------------------------------------

def test_dlpack_arrays_come_back_in_their_library():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    a = cupy.random.standard_normal((200, 96)).astype(cupy.float16)
    b = cupy.random.standard_normal((96, 72)).astype(cupy.float16)
    d = gemmkit.mm(a, b, out_dtype=torch.float32)
    assert isinstance(d, cupy.ndarray) and d.dtype == cupy.float32
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    expect_close(torch.from_dlpack(d), ta, tb)
    out = cupy.full((200, 72), cupy.nan, dtype=cupy.float16)
    assert gemmkit.mm(a, b, out=out) is out
    expect_close(torch.from_dlpack(out), ta, tb)


def test_dlpack_round_trip_without_other_libraries():
    a, b = rand(64, 32), rand(32, 48)
    d = gemmkit.mm(Array(a), Array(b))
    assert isinstance(d, torch.Tensor)  # its module has no from_dlpack
    expect_close(d, a, b)


def test_threads_each_on_their_own_stream():
    problems = [(rand(256, 128), rand(128, 192)) for _ in range(4)]
    results, errors = [None] * 4, []

    def work(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                results[i] = [gemmkit.mm(*problems[i]) for _ in range(20)]
            stream.synchronize()
        except Exception as error:  # reported below: a thread's exception would be lost
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (a, b), ds in zip(problems, results):
        for d in ds:
            expect_close(d, a, b)


def test_tensors_in_expandable_segments():
    """PyTorch's expandable segments map memory piece by piece, and CUDA reports one piece as a
    pointer's allocation: operands spanning several pieces are still accepted and right. In a
    child process, since the allocator's setting is read once."""
    code = "\n".join([
        "import torch, gemmkit",
        "a = torch.randn(6000, 4096, device='cuda').bfloat16()",  # 48 MB each: several pieces
        "b = torch.randn(4096, 6000, device='cuda').bfloat16()",
        "d = gemmkit.mm(a, b)",
        "ref = a.double() @ b.double()",
        "bound = (a.double().abs() @ b.double().abs()) * 4096 * 2.0 ** -24 + ref.abs() * 2.0 ** -8",
        "assert ((d.double() - ref).abs() <= bound).all(), 'wrong result'",
    ])
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
