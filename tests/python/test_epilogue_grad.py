"""Gradients through a fused epilogue: torch.ops.gemmkit.mm_epilogue's autograd formula (the
backward recomputes the product, differentiates the epilogue evaluated by torch and multiplies
out the product's gradient), for single and batched products (a shared operand among them) and
with alpha, beta and C, and gemmkit.mm, bmm and addmm(..., epilogue=...) on inputs that require
grad; the activations' slopes (dgelu, dgelu_tanh, dsilu, drelu, dsigmoid, dtanh) in the torch
evaluator against autograd's derivatives (and second derivatives) of the activations. The
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
    names = [name for name, *_ in gemmkit._torch.epilogue_uses(text)]
    out = ops.mm_epilogue(a, b, text, names, [tensors[name] for name in names], F64, 1.0, 0.0, None)
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
    out = ops.mm_epilogue(a, b, "silu(acc + bias[n])", ["bias"], [bias], F64, 1.0, 0.0, None)
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
            ("h = acc; pre[m, n] = h; silu(h)", {"pre": x}, {"alpha": 2.0, "beta": 1.0, "c": x}, "outputs"),
            ("silu(acc)", {}, {"out": x}, "out="),
            ("silu(acc)", {}, {"scaled": True}, "FP8")]:
        with pytest.raises(NotImplementedError, match=f"^epilogue: no gradient flows .*{why}"):
            differentiable(text, a, b, tensors, **options)
    # FP8 operands are refused by their type too, where a tensor the text reads requires grad
    e4m3 = torch.zeros(4, 3, dtype=torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="FP8"):
        differentiable("silu(acc + bias[n])", e4m3, e4m3.t(), {"bias": leaf(4)})
    # batched operands (bmm), alpha, beta and c (addmm) are the formula's
    assert differentiable("silu(acc)", leaf(2, 4, 3), leaf(2, 3, 5), {})
    assert differentiable("silu(acc)", a, b, {}, alpha=2.0, beta=0.5, c=x)
    assert differentiable("silu(acc)", a.detach(), b.detach(), {}, beta=1.0, c=x.clone().requires_grad_())
    assert differentiable("silu(acc + bias[n])", a.detach(), b.detach(), {"bias": leaf(5)})
    assert not differentiable("silu(acc)", a.detach(), b.detach(), {})
    assert not differentiable("h = acc; pre[m, n] = h; silu(h)", a.detach(), b.detach(), {"pre": x}, out=x)
    with torch.no_grad():
        assert not differentiable("silu(acc)", a, b, {})


# --- the activations' slopes (dgelu, dsilu, ...) --------------------------------------------------

SLOPES = {  # the slope's name in the language: the activation whose derivative it is
    "dgelu": F.gelu, "dgelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "dsilu": F.silu, "drelu": F.relu,
    "dsigmoid": torch.sigmoid, "dtanh": torch.tanh,
}


def slope_points():
    """Points across each activation's bends and tails, 0 and the values round it included."""
    x = torch.cat([torch.linspace(-12, 12, 481, dtype=F64), torch.tensor([0.0, 1e-300, -1e-300, 5e-8, -5e-8],
                                                                         dtype=F64), torch.randn(200, dtype=F64) * 3])
    return x.requires_grad_()


@pytest.mark.parametrize("name", SLOPES)
def test_each_slope_is_autograds_derivative_of_its_activation(name):
    x = slope_points()
    (want,) = torch.autograd.grad(SLOPES[name](x).sum(), x, create_graph=True)
    got, outputs = evaluate(f"{name}(acc)", x.view(-1, 1), {})
    assert not outputs and got.shape == (x.numel(), 1) and got.dtype == F64
    assert torch.allclose(got.view(-1), want, rtol=1e-12, atol=1e-14), (got.view(-1) - want).abs().max()
    if name == "drelu":  # a step: 1 past 0, else 0 (0 at 0, as torch's relu gradient), constant to autograd
        assert torch.equal(got.view(-1), (x > 0).to(F64)) and not got.requires_grad
        return
    # autograd differentiates the slope in turn: its derivative is the activation's second
    (second,) = torch.autograd.grad(want.sum(), x)
    (got_second,) = torch.autograd.grad(got.sum(), x)
    assert torch.allclose(got_second, second, rtol=1e-10, atol=1e-12), (got_second - second).abs().max()


def test_slopes_compose_in_a_backward_epilogue_and_in_the_formula(cpu_kernels):
    """A backward epilogue's text, the output gradient times gelu's slope at the saved
    pre-activation (dh = dD * dgelu(pre), fused after dD's own product), differentiated through
    mm_epilogue's formula against autograd's second derivative of gelu."""
    m, n, k = 6, 5, 4
    a, b, pre, bias = leaf(m, k), leaf(k, n), leaf(m, n), leaf(n)
    text = "dgelu(pre[m, n]) * (acc + bias[n]) + dsilu(acc) * dtanh(bias[n]) - drelu(acc) * dsigmoid(pre[m, n])"
    out = ops.mm_epilogue(a, b, text, ["pre", "bias"], [pre, bias], F64, 1.0, 0.0, None)
    up = torch.randn(m, n, dtype=F64)
    got = torch.autograd.grad(out, (a, b, pre, bias), up)

    def slope(act, x):
        return torch.autograd.grad(act(x).sum(), x, create_graph=True)[0]

    copies = [t.detach().clone().requires_grad_() for t in (a, b, pre, bias)]
    acc = copies[0] @ copies[1]
    p, c = copies[2], copies[3]
    by_hand = (slope(F.gelu, p) * (acc + c) + slope(F.silu, acc) * slope(torch.tanh, c)
               - (acc > 0).to(F64) * slope(torch.sigmoid, p))
    assert torch.allclose(out, by_hand, rtol=1e-12)
    want = torch.autograd.grad(by_hand, copies, up)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), (g - w).abs().max()


def test_a_text_of_steps_alone_gives_zero_gradients(cpu_kernels):
    a, b = leaf(4, 3), leaf(3, 5)
    out = ops.mm_epilogue(a, b, "drelu(acc)", [], [], F64, 1.0, 0.0, None)
    assert torch.equal(out, (a @ b > 0).to(F64))
    grad_a, grad_b = torch.autograd.grad(out, (a, b), torch.randn(4, 5, dtype=F64))
    assert torch.equal(grad_a, torch.zeros_like(a)) and torch.equal(grad_b, torch.zeros_like(b))


# --- batched products (bmm) and alpha, beta, C (addmm) through the formula -----------------------

BATCH = 3
# (name, a's shape, b's shape, whether b is stored transposed) given M, N, K
OPERANDS = [
    ("both_batched", lambda m, n, k: (BATCH, m, k), lambda m, n, k: (BATCH, k, n), False),
    ("b_shared", lambda m, n, k: (BATCH, m, k), lambda m, n, k: (k, n), False),
    ("b_shared_transposed", lambda m, n, k: (BATCH, m, k), lambda m, n, k: (k, n), True),
    ("a_shared", lambda m, n, k: (m, k), lambda m, n, k: (BATCH, k, n), False),
]
# (text, tensors: name -> shape given M and N, the expression by hand); the tensors with the
# batch, one a batch, and without it, shared by every batch
BATCHED_CASES = [
    ("silu(acc + bias[n]) * s[m]", {"bias": lambda m, n: (BATCH, 1, n), "s": lambda m, n: (m,)},
     lambda acc, t: F.silu(acc + t["bias"]) * t["s"][:, None]),
    ("h = gelu(acc * scale[m]); h * gate[m, n] + r[m, n]",
     {"scale": lambda m, n: (BATCH, m, 1), "gate": lambda m, n: (BATCH, m, n), "r": lambda m, n: (m, n)},
     lambda acc, t: F.gelu(acc * t["scale"]) * t["gate"] + t["r"]),
    ("dgelu_tanh(acc) * bias[n]", {"bias": lambda m, n: (n,)},
     lambda acc, t: torch.autograd.grad(F.gelu(acc, approximate="tanh").sum(), acc, create_graph=True)[0]
     * t["bias"]),
]


@pytest.mark.parametrize("text,shapes,by_hand", BATCHED_CASES, ids=[c[0] for c in BATCHED_CASES])
@pytest.mark.parametrize("operands", OPERANDS, ids=[o[0] for o in OPERANDS])
def test_the_formula_of_a_batch_matches_autograd(cpu_kernels, text, shapes, by_hand, operands):
    m, n, k = 5, 7, 4
    _, a_shape, b_shape, b_transposed = operands
    a, b = leaf(*a_shape(m, n, k)), leaf(*b_shape(m, n, k), transposed=b_transposed)
    tensors = {name: leaf(*shape(m, n)) for name, shape in shapes.items()}
    names = list(tensors)
    out = ops.mm_epilogue(a, b, text, names, [tensors[name] for name in names], F64, 1.0, 0.0, None)
    assert out.shape == (BATCH, m, n)
    inputs = (a, b, *(tensors[name] for name in names))
    up = torch.randn(out.shape, dtype=F64)
    got = torch.autograd.grad(out, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    expression = by_hand(torch.matmul(copies[0], copies[1]), dict(zip(names, copies[2:])))
    assert torch.allclose(out, expression, rtol=1e-12, atol=1e-14)
    want = torch.autograd.grad(expression, copies, up)
    for g, w, t in zip(got, want, inputs):
        # a shared operand's and tensor's gradient: the sum over the batch, in its own shape and layout
        assert g.shape == t.shape and g.stride() == t.stride(), (g.shape, g.stride(), t.stride())
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), (g - w).abs().max()


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0)])
@pytest.mark.parametrize("c_form", ["bias_row", "matrix", "shared_by_a_batch"])
def test_the_formula_with_alpha_beta_and_c_matches_autograd(cpu_kernels, alpha, beta, c_form):
    m, n, k = 6, 5, 4
    batched = c_form == "shared_by_a_batch"
    a, b = leaf(*((BATCH, m, k) if batched else (m, k))), leaf(k, n)
    source = leaf(n) if c_form == "bias_row" else leaf(m, n)  # addmm's input, or bmm's c
    gate = leaf(m, n)
    text = "silu(acc) * gate[m, n] + tanh(acc)"
    c = (source.expand(m, n) if c_form == "bias_row" else source) if beta != 0 else None
    out = ops.mm_epilogue(a, b, text, ["gate"], [gate], F64, alpha, beta, c)
    inputs = (a, b, gate) + ((source,) if beta != 0 else ())
    up = torch.randn(out.shape, dtype=F64)
    got = torch.autograd.grad(out, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    acc = alpha * torch.matmul(copies[0], copies[1]) + (beta * copies[3] if beta != 0 else 0)
    expression = F.silu(acc) * copies[2] + torch.tanh(acc)
    assert torch.allclose(out, expression, rtol=1e-12, atol=1e-14)
    want = torch.autograd.grad(expression, copies, up)
    for g, w, t in zip(got, want, inputs):
        assert g.shape == t.shape and g.dtype == t.dtype
        assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), (g - w).abs().max()


def test_gemmkits_functions_record_the_formula(fake):
    """gemmkit.bmm and addmm with an epilogue, on inputs that require grad, go through
    mm_epilogue (whose formula the tests above check) with their alpha, beta and C (fake CUDA
    tensors: shapes, no values; a backward pass would need a GPU); what the formula does not
    cover is refused by name."""
    from fake_cuda import cuda

    def recorded(d):
        return d.requires_grad and "gemmkit_mm_epilogue" in type(d.grad_fn).__name__

    x, w = cuda(3, 16, 32).requires_grad_(), cuda(24, 32).requires_grad_()
    bias, s = cuda(3, 24).requires_grad_(), cuda(16, dtype=torch.float32).requires_grad_()
    d = gemmkit.bmm(x, w.t(), epilogue="silu(acc + bias[n]) * s[m]", bias=bias, s=s)
    assert d.shape == (3, 16, 24) and recorded(d), d.grad_fn
    d = gemmkit.bmm(x.detach(), w.t().detach(), epilogue="silu(acc + bias[n]) * s[m]", bias=bias.detach(), s=s)
    assert recorded(d)  # a tensor the text reads alone requires grad
    row, mat1, mat2 = cuda(24).requires_grad_(), cuda(16, 32).requires_grad_(), cuda(32, 24)
    d = gemmkit.addmm(row, mat1, mat2, beta=0.5, alpha=2.0, epilogue="gelu(acc)")
    assert d.shape == (16, 24) and recorded(d)
    with torch.no_grad():
        assert not gemmkit.addmm(row, mat1, mat2, epilogue="gelu(acc)").requires_grad

    def layer(row, mat1, mat2):
        return gemmkit.addmm(row, mat1, mat2, beta=0.5, alpha=2.0, epilogue="gelu(acc)")

    graph, _ = torch._dynamo.export(layer)(row, mat1, mat2)
    fused = [node for node in graph.graph.nodes if node.target in (ops.mm_epilogue, ops.mm_epilogue.default)]
    assert len(fused) == 1 and fused[0].args[2] == "gelu(acc)" and fused[0].args[6:8] == (2.0, 0.5)
    assert fused[0].args[8] is not None  # C: the row, expanded
    for function, args, options, why in [
            (gemmkit.bmm, (x, w.t()), {"out": cuda(3, 16, 24)}, "out="),
            (gemmkit.addmm, (row, mat1, mat2), {"epilogue": "p[m, n] = acc; relu(acc)", "p": cuda(16, 24)},
             "outputs")]:
        options.setdefault("epilogue", "relu(acc)")
        with pytest.raises(NotImplementedError, match=f"^epilogue: no gradient flows through a fused epilogue with "
                                                      f"{why}"):
            function(*args, **options)
    e4m3 = torch.float8_e4m3fn
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows .* FP8"):
        gemmkit.scaled_mm(cuda(16, 32, dtype=e4m3), cuda(32, 24, dtype=e4m3), cuda((), dtype=torch.float32),
                          cuda((), dtype=torch.float32), epilogue="acc * g[m, n]", g=cuda(16, 24).requires_grad_())


# On the GPU: gemmkit.mm itself.

def _gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("no sm_90 GPU")


def _expect_compiled_grads(step, *inputs):
    """The gradients of step(*inputs) under torch.compile (one graph, its backward compiled too)
    match the eager ones."""
    eager = torch.autograd.grad(step(*inputs), inputs)
    compiled = torch.autograd.grad(torch.compile(step, fullgraph=True)(*inputs), inputs)
    for e, c in zip(eager, compiled):
        assert torch.allclose(e.float(), c.float(), rtol=2e-2, atol=2e-2)


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

    _expect_compiled_grads(step, x, w, bias)


@pytest.mark.parametrize("b_shared", [True, False])
@pytest.mark.parametrize("m,n,k", [(1, 8, 64), (67, 45, 129), (128, 256, 192)])
def test_bmm_with_an_epilogue_is_differentiable(m, n, k, b_shared):
    _gpu()
    from gpu_reference import expect_grads, rand
    batch = 3
    x = rand(batch, m, k, requires_grad=True)
    w = rand(n, k, requires_grad=True) if b_shared else rand(batch, n, k, requires_grad=True)
    bias = rand(batch, n, requires_grad=True)  # one a batch
    scale = rand(m, dtype=torch.float32, requires_grad=True)  # shared by every batch
    gate = rand(batch, m, n, requires_grad=True)
    d = gemmkit.bmm(x, w.transpose(-1, -2), epilogue="silu(acc * s[m] + bias[n]) * gate[m, n]", bias=bias, s=scale,
                    gate=gate)
    assert d.shape == (batch, m, n)
    expect_grads(d, (x, w, bias, scale, gate), lambda x, w, bias, scale, gate:
                 F.silu(torch.matmul(x, w.transpose(-1, -2)) * scale[:, None] + bias[:, None, :]) * gate)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 0.5), (0.5, 0.0)])
def test_addmm_with_an_epilogue_is_differentiable(alpha, beta):
    _gpu()
    from gpu_reference import expect_grads, rand
    m, n, k = 67, 45, 129
    bias, x, w = rand(n, requires_grad=True), rand(m, k, requires_grad=True), rand(n, k, requires_grad=True)
    g = rand(m, n, dtype=torch.float32, requires_grad=True)
    d = gemmkit.addmm(bias, x, w.t(), beta=beta, alpha=alpha, epilogue="gelu_tanh(acc) * g[m, n]", g=g)
    inputs = (bias, x, w, g) if beta != 0 else (x, w, g)

    def reference(*t):
        bias, x, w, g = t if beta != 0 else (None, *t)
        acc = alpha * (x @ w.t()) + (beta * bias if beta != 0 else 0)
        return F.gelu(acc, approximate="tanh") * g

    expect_grads(d, inputs, reference)


def test_bmm_with_an_epilogue_compiles_with_its_backward():
    _gpu()
    from gpu_reference import rand
    x, w = rand(2, 64, 128, requires_grad=True), rand(96, 128, requires_grad=True)
    bias = rand(2, 96, requires_grad=True)

    def step(x, w, bias):
        return gemmkit.bmm(x, w.t(), epilogue="relu2(acc + bias[n])", bias=bias).float().square().sum()

    _expect_compiled_grads(step, x, w, bias)


@pytest.mark.parametrize("name", SLOPES)
def test_the_kernels_slopes_are_the_evaluators(name):
    """Each slope fused into gemmkit.mm's epilogue (the kernels' formula) against the evaluator's
    in double (autograd's, by the CPU tests above), and differentiable through it."""
    _gpu()
    from gpu_reference import expect_near, rand
    m, n, k = 96, 80, 64
    x, w, pre = rand(m, k), rand(n, k), rand(m, n, dtype=torch.float32) * 3
    text = f"{name}(pre[m, n]) * acc"
    d = gemmkit.mm(x, w.t(), out_dtype=torch.float32, epilogue=text, pre=pre)
    acc = x.double() @ w.double().t()
    want, _ = evaluate(text, acc, {"pre": pre.double()})
    slope, _ = evaluate(f"{name}(pre[m, n])", acc, {"pre": pre.double()})
    bound = (x.double().abs() @ w.double().abs().t()) * k * 2.0 ** -24
    # the slope in f32 (__expf's few ulps, 1 - s's cancellation): within 4e-6 of its value
    expect_near(d, want, bound * slope.abs() + acc.abs() * 4e-6)
    pre.requires_grad_()
    d = gemmkit.mm(x, w.t(), out_dtype=torch.float32, epilogue=text, pre=pre)
    # drelu is a step: nothing flows to pre (None from autograd, compared as zeros).
    (grad,) = torch.autograd.grad(d, (pre,), torch.ones_like(d), allow_unused=True)
    p = pre.detach().double().requires_grad_()
    value = evaluate(text, acc, {"pre": p})[0]
    (expected,) = (torch.autograd.grad(value, (p,), torch.ones_like(acc), allow_unused=True) if value.requires_grad
                   else (None,))
    grad = torch.zeros_like(p) if grad is None else grad.double()
    expected = torch.zeros_like(p) if expected is None else expected
    if name == "drelu":
        assert not grad.any()
    assert torch.allclose(grad, expected, rtol=1e-4, atol=1e-4 * acc.abs().max().item())
