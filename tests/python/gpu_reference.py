"""What the torch tests on an sm_90 GPU share: their skip, random inputs, NaN-filled outputs,
group ends, dequantised FP8 operands, SwiGLU's reference, and the checks of products, fused
epilogues and gradients against double precision (the bounds are test_torch.py's docstring's). Imported after
pytest.importorskip("torch"), which each test file makes itself (scripts/python_test.sh picks the
torch tests by it)."""

import pytest
import torch


def skip_without_sm90():
    """Skips the importing test module, saying so, where there is no sm_90 GPU."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("no sm_90 GPU", allow_module_level=True)


HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}
FP8_SUMS = 2.0 ** -10  # expect_close's accumulation bound for FP8 products
E4M3, E5M2, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu


def rand(*shape, dtype=torch.bfloat16, requires_grad=False):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype).requires_grad_(requires_grad)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def expect_close(d, a, b, alpha=1.0, beta=0.0, c=None, accumulation=None):
    """d against alpha * a @ b + beta * c in double, a and b as real numbers (FP8 dequantised)."""
    a, b = a.detach().double(), b.detach().double()
    ref = alpha * torch.matmul(a, b)
    if accumulation is None:
        accumulation = a.shape[-1] * 2.0 ** -24
    bound = torch.matmul(a.abs(), b.abs()) * abs(alpha) * accumulation
    if c is not None and beta != 0:
        ref = ref + beta * c.detach().double()
    bound = bound + ref.abs() * HALF_ULP[d.dtype]
    assert torch.isfinite(d).all(), "non-finite outputs"
    error = (d.detach().double() - ref).abs()
    assert (error <= bound + 1e-30).all(), f"max error {error.max().item()} over bound {bound.max().item()}"


def expect_near(got, want, acc_bound, slope=1.0):
    """got within the accumulation bound `acc_bound` of want (times the epilogue's slope there),
    plus its type's rounding and f32 arithmetic's: the fused epilogues' check."""
    assert torch.isfinite(got).all(), "non-finite outputs"
    bound = acc_bound * slope + want.abs() * (HALF_ULP[got.dtype] + 1e-6) + 1e-6
    error = (got.double() - want).abs()
    assert (error <= bound).all(), f"max error {error.max().item()}"


def swiglu_reference(x, gate, up, bg=None, bu=None):
    """(silu(x gate^T + bg) * (x up^T + bu) in double, its bound): the f32 accumulation bound on
    each product, K * 2^-24 * (|x| @ |w|^T), carried through silu (slope at most 1.1) and the
    product."""
    x, gate, up = x.detach().double(), gate.detach().double(), up.detach().double()
    g, u = x @ gate.t(), x @ up.t()
    k = x.shape[-1]
    bound_g, bound_u = (x.abs() @ gate.abs().t()) * k * 2.0 ** -24, (x.abs() @ up.abs().t()) * k * 2.0 ** -24
    if bg is not None:
        g, u = g + bg.double(), u + bu.double()
    silu = torch.nn.functional.silu(g)
    return silu * u, 1.1 * u.abs() * bound_g + silu.abs() * bound_u


def offs_of(sizes, dtype=torch.int32):
    """The groups' cumulative row ends, on the GPU."""
    return torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(dtype)


def spans(sizes):
    """(group, first row, end row) of each group."""
    start = 0
    for g, rows in enumerate(sizes):
        yield g, start, start + rows
        start += rows


def block_of(mode, block, rows, cols):
    """The block (rows, cols) that quantize() takes for `mode` on a rows x cols matrix."""
    return block or {"tensor": (rows, cols), "rowwise": (1, cols), "block": (1, 128), "mx": (1, 32)}[mode]


def dequantized(q, scales, mode, block=None):
    """q times its block's scale, in double."""
    rows, cols = q.shape[-2:]
    br, bc = block_of(mode, block, rows, cols)
    s = torch.exp2(scales.view(torch.uint8).double() - 127) if scales.dtype == E8M0 else scales.double()
    s = s.reshape(1, 1) if s.dim() < 2 else s
    return q.double() * s.repeat_interleave(br, -2)[..., :rows, :].repeat_interleave(bc, -1)[..., :cols]


def expect_grads(out, inputs, reference):
    """The gradients of sum(out * up) for a random `up`, against those of `reference`, the same
    expression evaluated in double. Each may be off by one rounding of its own type, plus 2^-8 of
    the sum of the magnitudes it adds up (the gradient of `reference` on |inputs| and |up|): an
    f32 `up` is taken in the inputs' 16-bit type first."""
    up = rand(*out.shape, dtype=out.dtype)
    got = torch.autograd.grad(out, inputs, up)
    doubled = [t.detach().double().requires_grad_() for t in inputs]
    want = torch.autograd.grad(reference(*doubled), doubled, up.double())
    magnitudes = [t.detach().double().abs().requires_grad_() for t in inputs]
    sums = torch.autograd.grad(reference(*magnitudes), magnitudes, up.double().abs())
    for g, w, total, t in zip(got, want, sums, inputs):
        assert g.shape == t.shape and g.dtype == t.dtype
        bound = w.abs() * HALF_ULP[g.dtype] + total.abs() * 2.0 ** -8
        assert ((g.double() - w).abs() <= bound).all(), f"gradient off by {(g.double() - w).abs().max().item()}"


def capture(step):
    """A CUDA graph of step() and the outputs it captured: step runs once on a side stream first,
    so that its kernels are compiled and loaded outside the capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs
