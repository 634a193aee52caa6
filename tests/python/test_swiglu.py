"""gemmkit.swiglu_mm, SwiGLU's up-projection as one dual GEMM (GemmOptions::b2), and its operators
torch.ops.gemmkit.swiglu_mm and swiglu_mm_out.

Without a GPU: the operators' registration, fake shapes and dtypes for each weight form (two
tensors, one [2I, K] weight gate rows first, interleaved), tracing into one operator, the
argument errors (each naming its argument), the bindings' B2 (gemm_tensors' b2, swiglu_tensors'
views of the weights) reaching the C++ checks, and the autograd formula, its gradients' layouts
and opcheck, with double-precision CPU stand-ins for the kernels (cpu_stand_ins.py and SwiGLU's
below). On an sm_90 GPU (the tests marked `sm90`, which
skip, saying so, elsewhere): values against silu(x @ gate.T) * (x @ up.T) in double within
test_epilogue.py's bounds, odd shapes, leading dimensions, float16, float32 outputs, out=, a
custom epilogue with per-column vectors and an auxiliary output, gradients against double
autograd (gpu_reference.expect_grads), torch.compile(fullgraph=True) forward and backward, and
opcheck. Skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from cpu_stand_ins import registered_on_cpu  # noqa: E402
from fake_cuda import cuda  # noqa: E402
from gpu_reference import expect_near, swiglu_reference as reference  # noqa: E402

import gemmkit  # noqa: E402
from gemmkit import _torch  # noqa: E402

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
SWIGLU = "silu(acc) * acc2"
ops = torch.ops.gemmkit
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")


def rows(w, w_up, interleaved):
    """(gate, up) of each weight form, by torch."""
    if w_up is not None:
        return w, w_up
    half = w.size(0) // 2
    return (w[0::2], w[1::2]) if interleaved else (w[:half], w[half:])


def split(weights, interleaved):
    """rows() of (w,) or (w, w_up)."""
    return rows(weights[0], weights[1] if len(weights) == 2 else None, interleaved)


def swiglu(x, gate, up):
    return torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())


# --- without a GPU ----------------------------------------------------------------------------

def test_the_operators_are_registered_and_exported():
    assert hasattr(ops, "swiglu_mm") and hasattr(ops, "swiglu_mm_out")
    assert gemmkit.swiglu_mm is _torch.swiglu_mm and "swiglu_mm" in gemmkit.__all__


@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
def test_fake_shapes_and_dtypes_of_each_weight_form(fake, form):
    i, k = 13, 64
    w, w_up = (cuda(i, k), cuda(i, k)) if form == "pair" else (cuda(2 * i, k), None)
    interleaved = form == "interleaved"
    for x, shape in [(cuda(7, k), (7, i)), (cuda(2, 5, k), (2, 5, i)), (cuda(k), (i,)), (cuda(1, 3, 1, k), (1, 3, 1, i)),
                     (cuda(0, 4, k), (0, 4, i)), (cuda(3, 2 * k)[:, :k], (3, i))]:
        d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved)
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == BF16 and d.device.type == "cuda"
        d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved, out_dtype=F32)
        assert tuple(d.shape) == shape and d.dtype == F32
    half = (cuda(9, k, dtype=F16), cuda(i, k, dtype=F16), cuda(i, k, dtype=F16))
    d = gemmkit.swiglu_mm(*half) if form == "pair" else gemmkit.swiglu_mm(half[0], cuda(2 * i, k, dtype=F16),
                                                                         interleaved=interleaved)
    assert tuple(d.shape) == (9, i) and d.dtype == F16
    out = cuda(2, 5, i, dtype=F32)
    assert gemmkit.swiglu_mm(cuda(2, 5, k), w, w_up, interleaved=interleaved, out=out) is out


def test_a_custom_epilogue_takes_tensors_of_x_s_leading_dimensions(fake):
    x, w = cuda(2, 5, 64), cuda(26, 64)
    text = "pre[m, n] = acc; silu(acc + bg[n]) * (acc2 + bu[n]) * s[m] + r[m, n]"
    d = gemmkit.swiglu_mm(x, w, epilogue=text, bg=cuda(13), bu=cuda(13), s=cuda(2, 5, dtype=F32), r=cuda(2, 5, 13),
                          pre=cuda(2, 5, 13, dtype=F32))
    assert tuple(d.shape) == (2, 5, 13) and d.dtype == BF16
    d = gemmkit.swiglu_mm(x.view(10, 64), w, epilogue=text, bg=cuda(13), bu=cuda(1, 13), s=cuda(10, 1, dtype=F32),
                          r=cuda(10, 13), pre=cuda(10, 13))
    assert tuple(d.shape) == (10, 13)


def test_a_traced_call_is_one_operator_with_the_weight_whole(fake):
    def layer(x, w):
        return gemmkit.swiglu_mm(x, w, interleaved=True) * 2

    x, w = cuda(4, 8, 64), cuda(26, 64)
    graph, _ = torch._dynamo.export(layer)(x, w)  # raises where dynamo would break the graph
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    fused = [node for node in calls if node.target == ops.swiglu_mm]
    assert len(fused) == 1 and not any(node.target == ops.gemm for node in calls)
    assert fused[0].args[1].name == "l_w_" and fused[0].args[3:5] == (True, SWIGLU)
    assert tuple(graph(x, w).shape) == (4, 8, 13)

    def gated(x, gate, up, bg, pre):
        return gemmkit.swiglu_mm(x, gate, up, epilogue="pre[m, n] = acc; silu(acc + bg[n]) * acc2", bg=bg, pre=pre)

    args = (cuda(32, 64), cuda(13, 64), cuda(13, 64), cuda(13), cuda(32, 13, dtype=F32))
    graph, _ = torch._dynamo.export(gated)(*args)
    fused = [node for node in graph.graph.nodes if node.target == ops.swiglu_mm_out]
    assert len(fused) == 1 and fused[0].args[6] == ["bg", "pre"]  # outputs need the mutating form


def test_errors_name_the_argument(fake):
    x, w, gate = cuda(8, 64), cuda(26, 64), cuda(13, 64)
    with pytest.raises(ValueError, match=r"^w: shape \[25, 64\] has an odd first dimension, 25; expected \[2I, K\]"):
        gemmkit.swiglu_mm(x, cuda(25, 64))
    with pytest.raises(ValueError, match=r"^w: shape \[25, 64\] has an odd first dimension.*alternating"):
        gemmkit.swiglu_mm(x, cuda(25, 64), interleaved=True)
    with pytest.raises(ValueError, match=r"^w: shape \[26, 32\] has K = 32 but x \[8, 64\] has K = 64"):
        gemmkit.swiglu_mm(x, cuda(26, 32))
    with pytest.raises(ValueError, match=r"^w: shape \[13, 32\] has K = 32 but x \[8, 64\] has K = 64.*\[I, K\]"):
        gemmkit.swiglu_mm(x, cuda(13, 32), cuda(13, 32))
    with pytest.raises(ValueError, match=r"^w_up: shape \[12, 64\] differs from w's \[13, 64\]; expected both \[I, K\]"):
        gemmkit.swiglu_mm(x, gate, cuda(12, 64))
    with pytest.raises(ValueError, match="^interleaved: True with w_up given"):
        gemmkit.swiglu_mm(x, gate, gate, interleaved=True)
    with pytest.raises(TypeError, match="^w: dtype torch.float16 differs from x's, torch.bfloat16"):
        gemmkit.swiglu_mm(x, cuda(26, 64, dtype=F16))
    with pytest.raises(TypeError, match="^w_up: dtype torch.float16 differs from x's, torch.bfloat16"):
        gemmkit.swiglu_mm(x, gate, cuda(13, 64, dtype=F16))
    with pytest.raises(TypeError, match="^x: dtype torch.float32 is not supported; expected bfloat16 or float16"):
        gemmkit.swiglu_mm(cuda(8, 64, dtype=F32), w)
    with pytest.raises(ValueError, match="^w: 3 dimensions; expected 2"):
        gemmkit.swiglu_mm(x, cuda(2, 26, 64))
    with pytest.raises(TypeError, match="^w: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.swiglu_mm(x, [[1.0]])
    with pytest.raises(ValueError, match="^w_up: on cpu; expected a CUDA tensor$"):
        gemmkit.swiglu_mm(x, gate, torch.empty(13, 64, dtype=BF16, device="cpu"))
    with pytest.raises(ValueError, match="^x: 0 dimensions; expected at least 1"):
        gemmkit.swiglu_mm(cuda(()), w)
    with pytest.raises(ValueError, match=r"^out: shape \[8, 26\]; expected x's leading dimensions and I, \[8, 13\]"):
        gemmkit.swiglu_mm(x, w, out=cuda(8, 26))
    with pytest.raises(ValueError, match="^out: dtype torch.bfloat16 differs from out_dtype torch.float32"):
        gemmkit.swiglu_mm(x, w, out=cuda(8, 13), out_dtype=F32)
    with pytest.raises(TypeError, match="^out_dtype: torch.float64 is not supported"):
        gemmkit.swiglu_mm(x, w, out_dtype=F64)
    with pytest.raises(ValueError, match="^epilogue: 'silu\\(acc\\)' does not read acc2"):
        gemmkit.swiglu_mm(x, w, epilogue="silu(acc)")
    with pytest.raises(ValueError, match="^bg: not given; the epilogue reads bg\\[n\\]"):
        gemmkit.swiglu_mm(x, w, epilogue="silu(acc + bg[n]) * acc2")
    with pytest.raises(TypeError, match="^swiglu_mm\\(\\) got unexpected keyword arguments bg; tensors are taken only"):
        gemmkit.swiglu_mm(x, w, bg=cuda(13))
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue yet"):
        gemmkit.swiglu_mm(x.requires_grad_(), w, epilogue="relu(acc) * acc2")
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.swiglu_mm(x, w, out=cuda(8, 13))


def test_errors_without_fake_tensors():
    x = torch.ones(8, 64, dtype=BF16)
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.swiglu_mm(x, x)
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.swiglu_mm([[1.0]], x)


def test_the_binding_gives_b2_to_the_library():
    # The library checks B2 against B before it looks for a GPU: its messages name options.b2.
    from gemmkit import _gemmkit

    a, b, d = torch.ones(8, 16, dtype=BF16), torch.ones(16, 4, dtype=BF16), torch.empty(8, 4, dtype=BF16)
    none = _gemmkit.ScaleMode.none
    with pytest.raises(ValueError, match=r"^options.b2: shape \[16, 5\]; expected B's, K x N = 16 x 4"):
        _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, none, None, none, None, "", [], torch.ones(16, 5, dtype=BF16))
    with pytest.raises(ValueError, match="^options.b2: dtype f16; expected B's, bf16"):
        _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, none, None, none, None, "", [], torch.ones(16, 4, dtype=F16))
    with pytest.raises(ValueError, match="does not read acc2"):
        _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, none, None, none, None, "relu(acc)", [], b.clone())
    with pytest.raises(ValueError, match="reads acc2, a dual GEMM's second product"):
        _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, none, None, none, None, "acc2", [])
    # swiglu_tensors makes B and B2 (K x I) of the weights' rows: D must be M x I.
    x, w = torch.ones(8, 16, dtype=BF16), torch.ones(16, 16, dtype=BF16)
    for interleaved in (False, True):
        with pytest.raises(ValueError, match=r"^D: shape \[8, 16\]; expected M x N = 8 x 8$"):
            _gemmkit.swiglu_tensors(x, w, None, interleaved, torch.empty(8, 16, dtype=BF16), 0)
    with pytest.raises(ValueError, match=r"^options.b2: shape \[16, 7\]; expected B's, K x N = 16 x 8$"):
        _gemmkit.swiglu_tensors(x, w[:8], w[8:15], False, torch.empty(8, 8, dtype=BF16), 0)
    with pytest.raises(ValueError, match="^w: 3 dimensions; expected 2"):
        _gemmkit.swiglu_tensors(x, w.view(2, 8, 16), None, False, torch.empty(8, 4, dtype=BF16), 0)
    view = _gemmkit.view_of
    with pytest.raises(ValueError, match=r"^options.b2: shape \[16, 5\]"):
        gemmkit.gemm(view(a, "a"), view(b, "b"), view(d, "d"), b2=view(torch.ones(16, 5, dtype=BF16), "b2"))


# The autograd formula with double-precision CPU stand-ins for the kernels (the `cpu_kernels`
# fixture's gemm, and swiglu_mm's below).

def swiglu_stand_in(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype):
    assert epilogue == SWIGLU and not names
    gate, up = rows(w.double(), None if w_up is None else w_up.double(), interleaved)
    return swiglu(x.double(), gate, up).contiguous().to(_torch.output_dtype(x, out_dtype))


@pytest.fixture
def swiglu_kernels(cpu_kernels):
    yield from registered_on_cpu({"swiglu_mm": swiglu_stand_in})


def leaf(*shape, transposed=False):
    """A double leaf, row-major or (transposed) the transpose of a row-major tensor."""
    if not transposed:
        return torch.randn(*shape, dtype=F64, requires_grad=True)
    return torch.randn(*shape[::-1], dtype=F64).t().detach().requires_grad_()


def weights(form, i, k, transposed=False):
    """(w, w_up, interleaved) of a weight form."""
    if form == "pair":
        return leaf(i, k, transposed=transposed), leaf(i, k, transposed=transposed), False
    return leaf(2 * i, k, transposed=transposed), None, form == "interleaved"


@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
@pytest.mark.parametrize("transposed", [False, True])
def test_gradients_match_torch_s_and_take_their_inputs_layouts(swiglu_kernels, form, transposed):
    m, i, k = 9, 5, 7
    x = leaf(m, k, transposed=transposed)
    w, w_up, interleaved = weights(form, i, k, transposed)
    inputs = (x, w) if w_up is None else (x, w, w_up)
    d = ops.swiglu_mm(x, w, w_up, interleaved, SWIGLU, [], [], F64)
    up = torch.randn(m, i, dtype=F64)
    got = torch.autograd.grad(d, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(swiglu(copies[0], *split(copies[1:], interleaved)), copies, up)
    for g, wanted, t in zip(got, want, inputs):
        assert torch.allclose(g, wanted, rtol=1e-12, atol=1e-12), (g - wanted).abs().max()
        assert g.shape == t.shape and g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"


def test_only_the_gradients_asked_for_are_computed(swiglu_kernels):
    x, w = leaf(6, 4), leaf(10, 4)
    w.requires_grad_(False)
    d = ops.swiglu_mm(x, w, None, False, SWIGLU, [], [], F64)
    (dx,) = torch.autograd.grad(d.sum(), (x,))
    assert dx.shape == x.shape


def test_opcheck_with_the_stand_ins(swiglu_kernels):
    x, gate, up = leaf(6, 4), leaf(3, 4), leaf(3, 4)
    torch.library.opcheck(ops.swiglu_mm.default, (x, gate, up, False, SWIGLU, [], [], F64))
    torch.library.opcheck(ops.swiglu_mm.default, (x, leaf(6, 4), None, True, SWIGLU, [], [], F64))


# --- on an sm_90 GPU ----------------------------------------------------------------------------

def gpu_rand(*shape, dtype=BF16, requires_grad=False):
    return torch.randn(*shape, device="cuda", dtype=F32).to(dtype).requires_grad_(requires_grad)


def gpu_weights(form, i, k, dtype=BF16, requires_grad=False):
    if form == "pair":
        return gpu_rand(i, k, dtype=dtype, requires_grad=requires_grad), gpu_rand(
            i, k, dtype=dtype, requires_grad=requires_grad), False
    return gpu_rand(2 * i, k, dtype=dtype, requires_grad=requires_grad), None, form == "interleaved"


@sm90
@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
@pytest.mark.parametrize("lead,i,k", [((1,), 1000, 64), ((97,), 1000, 128), ((256,), 13652, 64), ((2, 3), 1000, 64),
                                      ((509,), 208, 576), ((4, 33), 13652, 32)])
def test_values_match_double(form, lead, i, k):
    x = gpu_rand(*lead, k)
    w, w_up, interleaved = gpu_weights(form, i, k)
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved)
    assert d.shape == (*lead, i) and d.dtype == BF16
    expect_near(d, *reference(x, *rows(w, w_up, interleaved)))


@sm90
@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
def test_float16_float32_outputs_out_and_strided_x(form):
    m, i, k = 131, 1000, 256
    x = gpu_rand(m, k, dtype=F16)
    w, w_up, interleaved = gpu_weights(form, i, k, dtype=F16)
    gate, up = rows(w, w_up, interleaved)
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved)
    assert d.dtype == F16
    expect_near(d, *reference(x, gate, up))
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved, out_dtype=F32)
    assert d.dtype == F32
    expect_near(d, *reference(x, gate, up))
    out = torch.full((m, i), float("nan"), device="cuda", dtype=F32)
    assert gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved, out=out) is out
    expect_near(out, *reference(x, gate, up))
    xt = gpu_rand(k, m, dtype=F16).t()  # column-major x
    expect_near(gemmkit.swiglu_mm(xt, w, w_up, interleaved=interleaved), *reference(xt, gate, up))


@sm90
@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
def test_a_custom_epilogue_with_biases_and_an_auxiliary_output(form):
    lead, i, k = (3, 37), 1000, 128
    x = gpu_rand(*lead, k)
    w, w_up, interleaved = gpu_weights(form, i, k)
    bg, bu = gpu_rand(i), gpu_rand(i, dtype=F32)
    pre = torch.full((*lead, i), float("nan"), device="cuda", dtype=F32)
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved,
                          epilogue="pre[m, n] = acc + bg[n]; silu(acc + bg[n]) * (acc2 + bu[n])", bg=bg, bu=bu, pre=pre)
    gate, up = rows(w, w_up, interleaved)
    want, bound = reference(x, gate, up, bg, bu)
    expect_near(d, want, bound)
    g = x.double() @ gate.double().t() + bg.double()
    expect_near(pre, g, (x.double().abs() @ gate.double().abs().t()) * k * 2.0 ** -24)


@sm90
@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
def test_gradients_match_double_autograd(form):
    from gpu_reference import expect_grads

    m, i, k = 77, 200, 128
    x = gpu_rand(m, k, requires_grad=True)
    w, w_up, interleaved = gpu_weights(form, i, k, requires_grad=True)
    inputs = (x, w) if w_up is None else (x, w, w_up)
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved)
    expect_grads(d, inputs, lambda x, *ws: swiglu(x, *split(ws, interleaved)))
    d = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved)
    grads = torch.autograd.grad(d.float().square().sum(), inputs)
    for g, t in zip(grads, inputs):
        assert g.stride() == t.stride()


@sm90
def test_gradients_with_leading_dimensions_and_float32_outputs():
    from gpu_reference import expect_grads

    x, w = gpu_rand(2, 40, 64, requires_grad=True), gpu_rand(600, 64, requires_grad=True)
    d = gemmkit.swiglu_mm(x, w, out_dtype=F32)
    assert d.dtype == F32 and d.shape == (2, 40, 300)
    expect_grads(d, (x, w), lambda x, w: swiglu(x, w[:300], w[300:]))


@sm90
def test_torch_compile_with_fullgraph_forward_and_backward():
    from gpu_reference import expect_grads

    def layer(x, w):
        return gemmkit.swiglu_mm(x, w) * 2

    x, w = gpu_rand(4, 50, 128), gpu_rand(2000, 128)
    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(x, w), layer(x, w))  # the same kernel, the same result
    x.requires_grad_(), w.requires_grad_()
    d = torch.compile(lambda x, w: gemmkit.swiglu_mm(x, w, interleaved=True), fullgraph=True)(x, w)
    expect_grads(d, (x, w), lambda x, w: swiglu(x, w[0::2], w[1::2]))
    torch._dynamo.reset()


@sm90
def test_opcheck():
    x, gate, up = gpu_rand(64, 128, requires_grad=True), gpu_rand(96, 128, requires_grad=True), gpu_rand(96, 128)
    torch.library.opcheck(ops.swiglu_mm.default, (x, gate, up, False, SWIGLU, [], [], None))
    torch.library.opcheck(ops.swiglu_mm.default, (x, gpu_rand(192, 128), None, True, SWIGLU, [], [], F32))
    bias = gpu_rand(1, 96)
    torch.library.opcheck(ops.swiglu_mm.default, (x.detach(), gate.detach(), up, False, "silu(acc + b[n]) * acc2",
                                                  ["b"], [bias], None))
    out, pre = torch.empty(64, 96, device="cuda", dtype=BF16), torch.empty(64, 96, device="cuda", dtype=F32)
    torch.library.opcheck(ops.swiglu_mm_out.default, (x.detach(), gate.detach(), up, out, False,
                                                      "p[m, n] = acc2; silu(acc) * acc2", ["p"], [], [pre]))
