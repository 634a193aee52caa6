"""Every gradient gemmkit's operators return has the strides of its input (torch's layout contract
for gradients; torch copies a leaf's gradient of other strides into the leaf's layout every step),
and the same values as before: the autograd formulas run with double-precision CPU stand-ins for
the kernels (cpu_stand_ins.py), whose outputs are fresh row-major tensors as gemmkit's are. Needs
torch, not a GPU; skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import gemmkit  # noqa: E402,F401  (registers the operators)

F64 = torch.float64
ops = torch.ops.gemmkit


def leaf(*shape, transposed=False):
    """A double leaf tensor of `shape`, row-major, or the transpose of a row-major tensor (its
    last two dimensions swapped: column-major, as a weight passed as w.t())."""
    if not transposed:
        return torch.randn(*shape, dtype=F64, requires_grad=True)
    t = torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=F64).transpose(-1, -2)
    return t.detach().requires_grad_()


def gemm(a, b, beta=0.0, c=None):
    return ops.gemm(a, b, None, None, "none", "none", F64, 1.0, beta, c)


def grads(out, inputs, reference):
    """The gradients of sum(out * up), checked against `reference` evaluated by torch."""
    up = torch.randn(out.shape, dtype=F64)
    got = torch.autograd.grad(out, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(reference(*copies), copies, up)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-12, atol=1e-12), (g - w).abs().max()
    return got


def expect_layouts(gradients, inputs):
    for g, t in zip(gradients, inputs):
        assert g.shape == t.shape and g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"


@pytest.mark.parametrize("a_transposed", [False, True])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_mm_gradients_take_their_inputs_layouts(cpu_kernels, a_transposed, b_transposed):
    a, b = leaf(7, 5, transposed=a_transposed), leaf(5, 6, transposed=b_transposed)
    expect_layouts(grads(gemm(a, b), (a, b), lambda x, y: x @ y), (a, b))


def test_a_weight_passed_transposed_gets_a_row_major_gradient(cpu_kernels):
    x, w, bias = leaf(9, 4), leaf(3, 4), leaf(3)
    got = grads(gemm(x, w.t(), 1.0, bias.expand(9, 3)), (x, w, bias), lambda x, w, b: x @ w.t() + b)
    expect_layouts(got, (x, w, bias))
    assert got[1].is_contiguous()


@pytest.mark.parametrize("b_transposed", [False, True])
def test_batched_gradients_take_their_inputs_layouts(cpu_kernels, b_transposed):
    a, b = leaf(3, 7, 5, transposed=True), leaf(3, 5, 6, transposed=b_transposed)
    expect_layouts(grads(gemm(a, b), (a, b), lambda x, y: x @ y), (a, b))


def test_a_shared_weight_gets_its_layout(cpu_kernels):
    x, w = leaf(3, 7, 5), leaf(6, 5)  # x [batch, M, K] times w.t(), one weight for the batch
    expect_layouts(grads(gemm(x, w.t()), (x, w), lambda x, w: x @ w.t()), (x, w))
    a, b = leaf(7, 5, transposed=True), leaf(3, 5, 6, transposed=True)  # a shared A
    expect_layouts(grads(gemm(a, b), (a, b), lambda x, y: x @ y), (a, b))


def grouped(a, b, sizes, layout):
    return ops.grouped_mm(a, b, sizes, layout, None, None, "none", "none", F64, 0, False)


def per_group(a, b, sizes, layout):
    """The grouped product written group by group, every row owned."""
    if layout == "masked":
        return torch.stack([a[g] @ b[g] for g in range(b.size(0))])
    starts = [0] + sizes.tolist()[:-1]
    return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(zip(starts, sizes.tolist()))])


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
@pytest.mark.parametrize("transposed", [False, True])
def test_grouped_weight_gradients_take_the_weights_layout(cpu_kernels, layout, transposed):
    # Weights [G, N, K] as an MoE layer stores them, passed as w.transpose(-2, -1); or [G, K, N].
    if layout == "contiguous":
        a, sizes = leaf(12, 5), torch.tensor([4, 4, 12])
    else:
        a, sizes = leaf(3, 4, 5), torch.tensor([4, 4, 4])
    b = leaf(3, 5, 6, transposed=transposed)
    expect_layouts(grads(grouped(a, b, sizes, layout), (a, b), lambda x, y: per_group(x, y, sizes, layout)), (a, b))
    w = leaf(3, 6, 5)
    got = grads(grouped(a, w.transpose(-2, -1), sizes, layout), (a, w),
                lambda x, w: per_group(x, w.transpose(-2, -1), sizes, layout))
    expect_layouts(got, (a, w))


def test_eager_functions_record_the_operators_formulas(cpu_kernels, monkeypatch):
    # Eager calls with inputs that require grad run through _ops' autograd Functions, whose
    # forward launches the kernel itself: here the launches write the stand-ins' products.
    from cpu_stand_ins import grouped_mm_stand_in, grouped_wgrad_stand_in
    from gemmkit import _ops, _torch

    def launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c):
        out.copy_(alpha * (a @ b) + (beta * c if beta else 0))

    monkeypatch.setattr(_torch, "launch_gemm", launch_gemm)
    monkeypatch.setattr(_torch, "launch_grouped", lambda a, b, sizes, layout, out, *rest, zero_unowned=False: out.copy_(
        grouped_mm_stand_in(a, b, sizes, layout, None, None, "none", "none", F64, 0, zero_unowned)))
    monkeypatch.setattr(_torch, "launch_grouped_wgrad", lambda x, y, offs, out, *rest: out.copy_(
        grouped_wgrad_stand_in(x, y, offs, None, None, "none", "none", F64, 0)))
    x, w, bias = leaf(9, 4), leaf(3, 4), leaf(3)
    out = _ops.EagerGemm.apply(x, w.t(), None, None, "none", "none", F64, 1.0, 1.0, bias.expand(9, 3))
    assert type(out.grad_fn).__name__ == "EagerGemmBackward"
    expect_layouts(grads(out, (x, w, bias), lambda x, w, b: x @ w.t() + b), (x, w, bias))
    a, sizes, experts = leaf(12, 5), torch.tensor([4, 4, 12]), leaf(3, 6, 5)
    out = _ops.EagerGroupedMm.apply(a, experts.transpose(-2, -1), sizes, "contiguous", None, None, "none", "none",
                                    F64, 0, False)
    got = grads(out, (a, experts), lambda x, w: per_group(x, w.transpose(-2, -1), sizes, "contiguous"))
    expect_layouts(got, (a, experts))
    y = leaf(12, 4)
    out = _ops.EagerGroupedWgrad.apply(a, y, sizes, None, None, "none", "none", F64, 0)
    starts = [0] + sizes.tolist()[:-1]
    grads(out, (a, y), lambda a, y: torch.stack([a[s:e].t() @ y[s:e] for s, e in zip(starts, sizes.tolist())]))
