"""Gradients through a fused epilogue: torch.ops.gemmkit.mm_epilogue's autograd formula (the
backward recomputes the product, differentiates the epilogue evaluated by torch and multiplies
out the product's gradient), and gemmkit.mm(..., epilogue=...) on inputs that require grad. The
formula's tests run on CPU stand-ins for the kernels in double (cpu_stand_ins.py) against torch's
autograd of the same expression written out by hand; the others need an sm_90 GPU and skip
without one. Skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import gemmkit  # noqa: E402
from gemmkit._epilogue_eval import evaluate  # noqa: E402

F64 = torch.float64
F = torch.nn.functional
ops = torch.ops.gemmkit

# (text, tensors: name -> shape given M and N, the same expression by hand)
CASES = [
    ("silu(acc + bias[n])", {"bias": lambda m, n: (n,)}, lambda acc, t: F.silu(acc + t["bias"])),
    ("gelu(acc * scale[m] + bias[n]) * gate[m, n]",
     {"scale": lambda m, n: (m, 1), "bias": lambda m, n: (1, n), "gate": lambda m, n: (m, n)},
     lambda acc, t: F.gelu(acc * t["scale"] + t["bias"]) * t["gate"]),
    ("h = acc + bias[n]; tanh(h) * h - relu2(acc) / 3", {"bias": lambda m, n: (n,)},
     lambda acc, t: torch.tanh(acc + t["bias"]) * (acc + t["bias"]) - F.relu(acc).square() / 3),
    ("gelu_tanh(clamp(acc, -2, 2)) + max(acc, 0.5) * sigmoid(-acc)", {},
     lambda acc, t: F.gelu(acc.clamp(-2, 2), approximate="tanh") + acc.clamp(min=0.5) * torch.sigmoid(-acc)),
]


def leaf(*shape, transposed=False):
    if not transposed:
        return torch.randn(*shape, dtype=F64, requires_grad=True)
    return torch.randn(*reversed(shape), dtype=F64).t().detach().requires_grad_()


@pytest.mark.parametrize("text,shapes,by_hand", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_the_formula_matches_autograd_of_the_expression(cpu_kernels, text, shapes, by_hand, b_transposed):
    m, n, k = 7, 6, 5
    a, b = leaf(m, k), leaf(k, n, transposed=b_transposed)
    tensors = {name: leaf(*shape(m, n)) for name, shape in shapes.items()}
    names = [name for name, _, _ in gemmkit._torch.epilogue_uses(text)]
    out = ops.mm_epilogue(a, b, text, names, [tensors[name] for name in names], F64)
    inputs = (a, b, *(tensors[name] for name in names))
    up = torch.randn(out.shape, dtype=F64)
    got = torch.autograd.grad(out, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(by_hand(copies[0] @ copies[1], dict(zip(names, copies[2:]))), copies, up)
    for g, w, t in zip(got, want, inputs):
        assert g.shape == t.shape and g.stride() == t.stride(), (g.stride(), t.stride())
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), (g - w).abs().max()


def test_only_what_requires_grad_gets_a_gradient(cpu_kernels):
    a, b, bias = leaf(4, 3), torch.randn(3, 5, dtype=F64), torch.randn(5, dtype=F64)
    out = ops.mm_epilogue(a, b, "silu(acc + bias[n])", ["bias"], [bias], F64)
    (grad_a,) = torch.autograd.grad(out.sum(), (a,))
    want = (torch.sigmoid(a @ b + bias) * (1 + (a @ b + bias) * (1 - torch.sigmoid(a @ b + bias)))) @ b.t()
    assert torch.allclose(grad_a, want)


def test_the_evaluation_is_the_languages():
    acc, acc2 = torch.randn(5, 7, dtype=F64), torch.randn(5, 7, dtype=F64)
    bias, scale, gate = torch.randn(7, dtype=F64), torch.randn(5, dtype=F64), torch.randn(5, 7, dtype=F64)
    d, outputs = evaluate("h = acc + bias[n]; pre[m, n] = h; silu(h) * gate[m, n] * scale[m]", acc,
                          {"bias": bias, "gate": gate, "scale": scale})
    assert torch.equal(outputs["pre"], acc + bias)
    assert torch.allclose(d, F.silu(acc + bias) * gate * scale[:, None])
    d, _ = evaluate("g = min(acc, 7); g * sigmoid(1.702 * g) * (clamp(acc2, -7, 7) + 1)", 9 * acc, {}, 9 * acc2)
    g = (9 * acc).clamp(max=7)
    assert torch.allclose(d, g * torch.sigmoid(1.702 * g) * ((9 * acc2).clamp(-7, 7) + 1))
    d, _ = evaluate("bf16(acc) - -acc / 4 + exp(-acc) + rsqrt(abs(acc) + 1)", acc, {})
    assert torch.allclose(d, acc.to(torch.bfloat16).double() + acc / 4 + torch.exp(-acc) + torch.rsqrt(acc.abs() + 1))


def test_calls_the_formula_does_not_cover_are_refused_by_name():
    a, b, x = leaf(4, 3), leaf(3, 5), torch.randn(4, 5, dtype=F64)
    differentiable = gemmkit._torch.differentiable_epilogue
    for text, tensors, options, why in [
            ("h = acc; pre[m, n] = h; silu(h)", {"pre": x}, {}, "outputs"),
            ("silu(acc)", {}, {"alpha": 2.0}, "alpha, beta or c"),
            ("silu(acc)", {}, {"beta": 1.0, "c": x}, "alpha, beta or c"),
            ("silu(acc)", {}, {"out": x}, "out="),
            ("silu(acc)", {}, {"scaled": True}, "FP8")]:
        with pytest.raises(NotImplementedError, match=f"^epilogue: .*{why}"):
            differentiable(text, a, b, tensors, **options)
    with pytest.raises(NotImplementedError, match="batched"):
        differentiable("silu(acc)", leaf(2, 4, 3), leaf(2, 3, 5), {})
    assert differentiable("silu(acc + bias[n])", a.detach(), b.detach(), {"bias": leaf(5)})
    assert not differentiable("silu(acc)", a.detach(), b.detach(), {})
    with torch.no_grad():
        assert not differentiable("silu(acc)", a, b, {})


# On the GPU: gemmkit.mm itself.

def _gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("no sm_90 GPU")


@pytest.mark.parametrize("m,n,k", [(1, 8, 64), (67, 45, 129), (256, 384, 512)])
def test_mm_with_an_epilogue_is_differentiable(m, n, k):
    _gpu()
    from gpu_reference import expect_grads, rand
    x, w = rand(m, k, requires_grad=True), rand(n, k, requires_grad=True)
    bias, scale = rand(n, requires_grad=True), rand(m, 1, dtype=torch.float32, requires_grad=True)
    d = gemmkit.mm(x, w.t(), epilogue="gelu(acc * scale[m] + bias[n])", bias=bias, scale=scale)
    expect_grads(d, (x, w, bias, scale), lambda x, w, bias, scale: F.gelu((x @ w.t()) * scale + bias))


def test_mm_with_an_epilogue_compiles_with_its_backward():
    _gpu()
    from gpu_reference import rand
    x, w, bias = rand(64, 128, requires_grad=True), rand(96, 128, requires_grad=True), rand(96, requires_grad=True)

    def step(x, w, bias):
        return gemmkit.mm(x, w.t(), epilogue="silu(acc + bias[n])", bias=bias).float().square().sum()

    eager = torch.autograd.grad(step(x, w, bias), (x, w, bias))
    compiled = torch.autograd.grad(torch.compile(step, fullgraph=True)(x, w, bias), (x, w, bias))
    for e, c in zip(eager, compiled):
        assert torch.allclose(e.float(), c.float(), rtol=2e-2, atol=2e-2)
