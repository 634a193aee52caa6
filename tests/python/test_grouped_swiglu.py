"""gemmkit.grouped_swiglu_mm, the MoE up-projection as one grouped dual GEMM (grouped_gemm with
GemmOptions::b2), and its operators torch.ops.gemmkit.grouped_swiglu_mm and grouped_swiglu_mm_out.

Without a GPU: the operators' registration, fake shapes and dtypes for each weight form (two
tensors, one [G, 2I, K] weight each expert's gate rows first, interleaved) with contiguous and
masked groups, tracing into one operator, the argument errors (each naming its argument), the
refusal of inputs that require grad with another epilogue or out=, the binding's views of the
experts' weights reaching the C++ checks, the copies made of weights whose views TMA cannot read,
opcheck with a double-precision CPU stand-in for the kernel, and the default epilogue's autograd
formula with double-precision CPU stand-ins for every kernel (x and the weights of each form
against torch's autograd of the groups one by one, contiguous and masked, rows no group owns NaN;
the weights' gradients in their layouts; the eager Function's backward; fake tensors;
torch.compile's aot_eager; opcheck). On an sm_90 GPU (the tests marked `sm90`, which
skip, saying so, elsewhere): each group's rows against silu(x_g @ gate_g.T) * (x_g @ up_g.T) in
double within test_swiglu.py's bounds, for the three weight forms, contiguous groups (empty ones
first, in the middle and last, one-row groups, odd sizes, rows past the last end) and masked ones,
outputs NaN-filled first so that rows no group owns are seen to stay untouched; int32 and int64
sizes, float16, float32 outputs, out=, an odd K (copied), a custom epilogue with per-expert biases
[G, I], per-token weights and an auxiliary output, torch.compile(fullgraph=True) against eager,
gradients against double autograd (gpu_reference.expect_grads) for each weight form, contiguous
and masked, column-major weights' gradients in their layout, torch.compile(fullgraph=True)'s
backward, and opcheck. Skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import cuda  # noqa: E402
from gpu_reference import expect_near, swiglu_reference as reference  # noqa: E402

import gemmkit  # noqa: E402
from cpu_stand_ins import group_rows, registered_on_cpu  # noqa: E402
from gemmkit import _torch  # noqa: E402

BF16, F16, F32, F64, I32, I64 = torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64
SWIGLU = "silu(acc) * acc2"
ops = torch.ops.gemmkit
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")
FORMS = ["pair", "concat", "interleaved"]


def rows(w, w_up, interleaved):
    """(gate, up) [G, I, K] of each weight form, by torch."""
    if w_up is not None:
        return w, w_up
    half = w.size(1) // 2
    return (w[:, 0::2], w[:, 1::2]) if interleaved else (w[:, :half], w[:, half:])


def fake_weights(form, groups, i, k, dtype=BF16):
    """(w, w_up, interleaved) of a weight form, fake CUDA tensors."""
    if form == "pair":
        return cuda(groups, i, k, dtype=dtype), cuda(groups, i, k, dtype=dtype), False
    return cuda(groups, 2 * i, k, dtype=dtype), None, form == "interleaved"


# --- without a GPU ----------------------------------------------------------------------------

def test_the_operators_are_registered_and_exported():
    assert hasattr(ops, "grouped_swiglu_mm") and hasattr(ops, "grouped_swiglu_mm_out")
    assert gemmkit.grouped_swiglu_mm is _torch.grouped_swiglu_mm and "grouped_swiglu_mm" in gemmkit.__all__
    schema = str(ops.grouped_swiglu_mm.default._schema)
    assert schema.startswith("gemmkit::grouped_swiglu_mm(Tensor x, Tensor w, Tensor? w_up, Tensor sizes, str layout, "
                             "bool interleaved, str epilogue, str[] names, Tensor[] inputs, ScalarType? out_dtype, "
                             "int max_sms) -> Tensor"), schema


@pytest.mark.parametrize("form", FORMS)
def test_fake_shapes_and_dtypes_of_each_weight_form(fake, form):
    groups, i, k = 4, 13, 64
    w, w_up, interleaved = fake_weights(form, groups, i, k)
    for sizes_dtype in (I32, I64):
        offs, counts = cuda(groups, dtype=sizes_dtype), cuda(groups, dtype=sizes_dtype)
        for x, sizes, shape in [(cuda(100, k), {"offs": offs}, (100, i)), (cuda(0, k), {"offs": offs}, (0, i)),
                                (cuda(groups, 20, k), {"counts": counts}, (groups, 20, i)),
                                (cuda(200, k)[::2], {"offs": offs}, (100, i))]:
            d = gemmkit.grouped_swiglu_mm(x, w, **sizes, w_up=w_up, interleaved=interleaved)
            assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
            assert tuple(d.shape) == shape and d.dtype == BF16 and d.device.type == "cuda"
            d = gemmkit.grouped_swiglu_mm(x, w, **sizes, w_up=w_up, interleaved=interleaved, out_dtype=F32)
            assert tuple(d.shape) == shape and d.dtype == F32
    w16, w_up16, _ = fake_weights(form, groups, i, k, F16)
    d = gemmkit.grouped_swiglu_mm(cuda(9, k, dtype=F16), w16, cuda(groups, dtype=I32), w_up=w_up16,
                                  interleaved=interleaved, max_sms=8)
    assert tuple(d.shape) == (9, i) and d.dtype == F16
    for x, sizes, out in [(cuda(100, k), {"offs": cuda(groups, dtype=I32)}, cuda(100, i, dtype=F32)),
                          (cuda(groups, 20, k), {"counts": cuda(groups, dtype=I64)}, cuda(groups, 20, i))]:
        assert gemmkit.grouped_swiglu_mm(x, w, **sizes, w_up=w_up, interleaved=interleaved, out=out) is out


def test_a_custom_epilogue_takes_tensors_as_grouped_mm_s(fake):
    groups, i, k = 4, 13, 64
    w, offs = cuda(groups, 2 * i, k), cuda(groups, dtype=I32)
    text = "pre[m, n] = acc; silu(acc + bg[n]) * (acc2 + bu[n]) * route[m] + r[m, n]"
    # Per-expert biases [G, I] (or [I] for every expert), per-token weights [M_total].
    d = gemmkit.grouped_swiglu_mm(cuda(100, k), w, offs, epilogue=text, bg=cuda(groups, i), bu=cuda(i),
                                  route=cuda(100, dtype=F32), r=cuda(100, i), pre=cuda(100, i, dtype=F32))
    assert tuple(d.shape) == (100, i) and d.dtype == BF16
    # Masked: per-token weights [G, max_m].
    d = gemmkit.grouped_swiglu_mm(cuda(groups, 20, k), w, counts=offs, epilogue=text, bg=cuda(groups, i),
                                  bu=cuda(groups, i, dtype=F32), route=cuda(groups, 20, dtype=F32),
                                  r=cuda(groups, 20, i), pre=cuda(groups, 20, i), out_dtype=F32)
    assert tuple(d.shape) == (groups, 20, i) and d.dtype == F32


def test_a_traced_call_is_one_operator_with_the_weights_whole(fake):
    def moe_up(x, w, offs):
        return gemmkit.grouped_swiglu_mm(x, w, offs, interleaved=True) * 2

    x, w, offs = cuda(100, 64), cuda(4, 26, 64), cuda(4, dtype=I64)
    graph, _ = torch._dynamo.export(moe_up)(x, w, offs)  # raises where dynamo would break the graph
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    fused = [node for node in calls if node.target == ops.grouped_swiglu_mm]
    assert len(fused) == 1 and not any(node.target in (ops.grouped_mm, ops.gemm) for node in calls)
    assert fused[0].args[1].name == "l_w_" and fused[0].args[4:7] == ("contiguous", True, SWIGLU)
    assert tuple(graph(x, w, offs).shape) == (100, 13)

    def gated(x, gate, up, counts, bg, pre):
        return gemmkit.grouped_swiglu_mm(x, gate, counts=counts, w_up=up, epilogue="pre[m, n] = acc; "
                                         "silu(acc + bg[n]) * acc2", bg=bg, pre=pre, max_sms=16)

    args = (cuda(4, 32, 64), cuda(4, 13, 64), cuda(4, 13, 64), cuda(4, dtype=I32), cuda(4, 13),
            cuda(4, 32, 13, dtype=F32))
    graph, _ = torch._dynamo.export(gated)(*args)
    fused = [node for node in graph.graph.nodes if node.target == ops.grouped_swiglu_mm_out]
    assert len(fused) == 1 and fused[0].args[5] == "masked"  # outputs need the mutating form
    assert fused[0].args[8] == ["bg", "pre"] and fused[0].args[11] == 16


def test_errors_name_the_argument(fake):
    x, w, gate, offs = cuda(100, 64), cuda(4, 26, 64), cuda(4, 13, 64), cuda(4, dtype=I32)
    for match, error, call in [
        (r"^w: shape \[4, 25, 64\] has an odd second dimension, 25; expected \[G, 2I, K\]", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(4, 25, 64), offs)),
        (r"^w: shape \[4, 25, 64\] has an odd second dimension.*alternating", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(4, 25, 64), offs, interleaved=True)),
        (r"^w: shape \[4, 26, 32\] has K = 32 but x \[100, 64\] has K = 64", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(4, 26, 32), offs)),
        (r"^w: shape \[4, 13, 32\] has K = 32 but x \[100, 64\] has K = 64; expected w \[G, I, K\]$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(4, 13, 32), offs, w_up=cuda(4, 13, 32))),
        (r"^w_up: shape \[4, 12, 64\] differs from w's \[4, 13, 64\]; expected both \[G, I, K\]", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=cuda(4, 12, 64))),
        (r"^w_up: shape \[3, 13, 64\] differs from w's \[4, 13, 64\]", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=cuda(3, 13, 64))),
        ("^interleaved: True with w_up given", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=gate, interleaved=True)),
        ("^w: dtype torch.float16 differs from x's, torch.bfloat16", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(4, 26, 64, dtype=F16), offs)),
        ("^w_up: dtype torch.float16 differs from x's, torch.bfloat16", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=cuda(4, 13, 64, dtype=F16))),
        ("^x: dtype torch.float32 is not supported; expected bfloat16 or float16", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(100, 64, dtype=F32), w, offs)),
        (r"^x: 1 dimensions; expected 2, \[M_total, K\] with offs, or 3, \[G, max_m, K\] with counts$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(64), w, offs)),
        (r"^w: 2 dimensions; expected 3, \[G, 2I, K\]", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, cuda(26, 64), offs)),
        (r"^w_up: 2 dimensions; expected 3, \[G, I, K\]$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=cuda(13, 64))),
        ("^w: expected a torch.Tensor or an array with __dlpack__, got list$", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, [[1.0]], offs)),
        ("^w_up: on cpu; expected a CUDA tensor$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, gate, offs, w_up=torch.empty(4, 13, 64, dtype=BF16, device="cpu"))),
        (r"^offs: None; expected the groups' cumulative row ends \(int32 or int64 \[G\]\) for a 2-D x$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w)),
        ("^counts: given with a 2-D x; expected offs", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, counts=offs)),
        ("^offs: given with a 3-D x; expected counts", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(4, 20, 64), w, offs)),
        (r"^counts: None; expected each group's valid rows \(int32 or int64 \[G\]\) for a 3-D x$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(4, 20, 64), w)),
        (r"^offs: 3 values; expected one a group, G = 4 \(w's first dimension\)$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs[:3])),
        (r"^counts: 5 values; expected one a group, G = 4 \(w's first dimension\)$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(4, 20, 64), w, counts=cuda(5, dtype=I32))),
        ("^offs: dtype torch.float32 is not supported; expected int32 or int64$", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs.float())),
        ("^offs: on cpu; expected a CUDA tensor$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, torch.zeros(4, dtype=I32, device="cpu"))),
        (r"^w: shape \[4, 26, 64\] has G = 4 but x \[3, 20, 64\] has G = 3$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(cuda(3, 20, 64), w, counts=offs)),
        (r"^out: shape \[100, 26\]; expected x's rows and I, \[100, 13\]$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, out=cuda(100, 26))),
        (r"^out: 3 dimensions; expected 2$", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, out=cuda(1, 100, 13))),
        ("^out: dtype torch.bfloat16 differs from out_dtype torch.float32", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, out=cuda(100, 13), out_dtype=F32)),
        ("^out_dtype: torch.float64 is not supported", TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, out_dtype=F64)),
        (r"^epilogue: 'silu\(acc\)' does not read acc2", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, epilogue="silu(acc)")),
        (r"^bg: not given; the epilogue reads bg\[n\]", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, epilogue="silu(acc + bg[n]) * acc2")),
        ("^bu: not a tensor the epilogue names; expected bg", ValueError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, epilogue="silu(acc + bg[n]) * acc2", bg=cuda(4, 13),
                                           bu=cuda(4, 13))),
        (r"^grouped_swiglu_mm\(\) got unexpected keyword arguments bg; tensors are taken only with epilogue=",
         TypeError,
         lambda: gemmkit.grouped_swiglu_mm(x, w, offs, bg=cuda(4, 13))),
    ]:
        with pytest.raises(error, match=match):
            call()


def test_inputs_that_require_grad_are_refused_with_another_epilogue_or_out(fake):
    x, w, offs = cuda(100, 64), cuda(4, 26, 64), cuda(4, dtype=I32)
    text = "silu(acc + bg[n]) * acc2"
    message = (r"^grouped_swiglu_mm: {} requires grad, but no gradient flows through grouped_swiglu_mm with an "
               r"epilogue other than the default, 'silu\(acc\) \* acc2', yet; expected inputs that do not require "
               r"grad \(or torch.no_grad\(\)\)$")
    with pytest.raises(NotImplementedError, match=message.format("x")):
        gemmkit.grouped_swiglu_mm(x.clone().requires_grad_(), w, offs, epilogue=text, bg=cuda(4, 13))
    with pytest.raises(NotImplementedError, match=message.format("w")):
        gemmkit.grouped_swiglu_mm(x, w.clone().requires_grad_(), offs, epilogue=text, bg=cuda(4, 13))
    with pytest.raises(NotImplementedError, match=message.format("w_up")):
        gemmkit.grouped_swiglu_mm(x, w[:, :13], offs, w_up=w[:, 13:].clone().requires_grad_(), epilogue=text,
                                  bg=cuda(4, 13))
    with pytest.raises(NotImplementedError, match=message.format("bg")):
        gemmkit.grouped_swiglu_mm(x, w, offs, epilogue=text, bg=cuda(4, 13).requires_grad_())
    with pytest.raises(NotImplementedError, match=message.format("x")):  # outputs: not the default either
        gemmkit.grouped_swiglu_mm(x.clone().requires_grad_(), w, offs, epilogue="p[m, n] = acc; silu(acc) * acc2",
                                  p=cuda(100, 13, dtype=F32))
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.grouped_swiglu_mm(x.clone().requires_grad_(), w, offs, out=cuda(100, 13))
    with torch.no_grad():
        d = gemmkit.grouped_swiglu_mm(x.clone().requires_grad_(), w, offs, epilogue=text, bg=cuda(4, 13))
    assert tuple(d.shape) == (100, 13) and not d.requires_grad


@pytest.mark.parametrize("form", FORMS)
def test_fake_gradients_take_the_inputs_shapes_dtypes_and_layouts(fake, form):
    # A traced call with inputs that require grad is the operator, with its autograd formula.
    w, w_up, interleaved = fake_weights(form, 4, 13, 64)
    inputs = [t.requires_grad_() for t in (cuda(100, 64), w, w_up) if t is not None]
    d = gemmkit.grouped_swiglu_mm(inputs[0], w, cuda(4, dtype=I32), w_up=w_up, interleaved=interleaved)
    assert d.requires_grad and "grouped_swiglu_mm" in type(d.grad_fn).__name__
    # The operator's backward with fake tensors, as torch.compile traces it (CPU ones: autograd's
    # engine wants a real device for CUDA's): the weights' gradients in their layouts (row-major,
    # or the transposes of row-major [G, K, I] or [G, K, 2I] tensors), bfloat16 throughout.
    groups, i, k = 4, 13, 64
    for transposed in (False, True):
        for layout, x, sizes in [("contiguous", torch.empty(100, k, dtype=BF16), torch.empty(groups, dtype=I32)),
                                 ("masked", torch.empty(groups, 20, k, dtype=BF16), torch.empty(groups, dtype=I64))]:
            rows_w = i if form == "pair" else 2 * i
            w = torch.empty(groups, k, rows_w, dtype=BF16).transpose(1, 2) if transposed else \
                torch.empty(groups, rows_w, k, dtype=BF16)
            w_up = None if form != "pair" else torch.empty(groups, k, i, dtype=BF16).transpose(1, 2) if transposed \
                else torch.empty(groups, i, k, dtype=BF16)
            inputs = [t.requires_grad_() for t in (x, w, w_up) if t is not None]
            d = ops.grouped_swiglu_mm(x, w, w_up, sizes, layout, interleaved, SWIGLU, [], [], F32, 0)
            assert d.requires_grad and d.dtype == F32
            grads = torch.autograd.grad(d, inputs, torch.empty_like(d))
            for g, t in zip(grads, inputs):
                assert g.shape == t.shape and g.dtype == t.dtype
                assert g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"


def test_errors_without_fake_tensors():
    x, w, offs = torch.ones(8, 64, dtype=BF16), torch.ones(2, 26, 64, dtype=BF16), torch.tensor([4, 8])
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.grouped_swiglu_mm(x, w, offs)
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.grouped_swiglu_mm([[1.0]], w, offs)


def test_the_binding_makes_b_and_b2_of_the_experts_weights():
    # The library checks shapes before it looks for a GPU: its messages name B2 (options.b2), D,
    # the epilogue's tensors; a problem that passes them fails for want of a GPU, or with one for
    # the CPU tensors' pointers.
    from gemmkit import _gemmkit

    contiguous, masked = _gemmkit.GroupLayout.contiguous, _gemmkit.GroupLayout.masked
    x, w, offs = torch.ones(8, 16, dtype=BF16), torch.ones(2, 16, 16, dtype=BF16), torch.tensor([3, 8], dtype=I32)

    def past_the_shape_checks():
        return pytest.raises((RuntimeError, ValueError),
                             match="gemmkit needs an NVIDIA Hopper GPU|is not device memory")

    def call(x, w, w_up, interleaved, d, layout=contiguous, epilogue="", tensors=()):
        _gemmkit.grouped_swiglu_tensors(x, w, w_up, interleaved, d, offs, layout, False, 0, 0, epilogue, tensors)

    for interleaved in (False, True):  # B and B2 [G, K, I] of w [G, 2I, K]: D must be [M_total, I]
        with pytest.raises(ValueError, match=r"^D: shape \[8, 16\]; expected M x N = 8 x 8$"):
            call(x, w, None, interleaved, torch.empty(8, 16, dtype=BF16))
        with past_the_shape_checks():
            call(x, w, None, interleaved, torch.empty(8, 8, dtype=BF16))
    with pytest.raises(ValueError, match=r"^options.b2: shape \[16, 7\]; expected B's, K x N = 16 x 8$"):
        call(x, w[:, :8], w[:, 8:15], False, torch.empty(8, 8, dtype=BF16))
    with pytest.raises(ValueError, match=r"^options.b2: shape \[1, 16, 8\]; expected \[G, K, N\] like B, with G = "):
        call(x, w[:, :8], w[:1, 8:], False, torch.empty(8, 8, dtype=BF16))
    with past_the_shape_checks():
        call(x, w[:, :8], w[:, 8:], False, torch.empty(8, 8, dtype=BF16))
    with pytest.raises(ValueError, match=r"^D: shape \[8, 8\]; expected \[G, max_m, N\] with G = 2 for masked"):
        call(x.view(2, 4, 16), w, None, False, torch.empty(8, 8, dtype=BF16), masked)
    with past_the_shape_checks():
        call(x.view(2, 4, 16), w, None, True, torch.empty(2, 4, 8, dtype=BF16), masked)
    with pytest.raises(ValueError, match=r"^w: 2 dimensions; expected 3, \[G, I, K\] or \[G, 2I, K\]$"):
        call(x, w[0], None, False, torch.empty(8, 8, dtype=BF16))
    with pytest.raises(ValueError, match=r"^w_up: 2 dimensions; expected 3, \[G, I, K\]$"):
        call(x, w[:, :8], w[0, :8], False, torch.empty(8, 8, dtype=BF16))
    with pytest.raises(ValueError, match="does not read acc2"):
        call(x, w, None, False, torch.empty(8, 8, dtype=BF16), epilogue="relu(acc)")
    bias = ("b", torch.ones(3, 1, 8, dtype=BF16), "n")  # per expert: [G, 1, I]
    with pytest.raises(ValueError, match=r"^options.epilogue.tensors\[\"b\"\]: shape \[3, 1, 8\] for b\[n\]; "
                                         r"expected \[1, 8\] or \[G = 2, 1, 8\]$"):
        call(x, w, None, False, torch.empty(8, 8, dtype=BF16), epilogue="silu(acc + b[n]) * acc2", tensors=[bias])
    # The grouped kernel reads its operands with TMA only: an odd K is refused here, and copied by
    # gemmkit.grouped_swiglu_mm first.
    with pytest.raises(ValueError, match="^A, B, options.b2: not readable by TMA as they lie"):
        call(torch.ones(8, 15, dtype=BF16), torch.ones(2, 16, 15, dtype=BF16), None, False,
             torch.empty(8, 8, dtype=BF16))


def aligned(*shape, dtype=BF16):
    """A CPU tensor whose data starts on a 16-byte boundary (as the CUDA allocator's do)."""
    size = 1
    for s in shape:
        size *= s
    unit = 16 // torch.empty((), dtype=dtype).element_size()
    storage = torch.randn(size + unit).to(dtype)
    skip = (-storage.data_ptr() % 16) // storage.element_size()
    return storage[skip:skip + size].view(*shape)


def expect_kept(w, w_up):
    got, got_up = _torch.swiglu_weights_readable(w, w_up)
    assert got is w and got_up is w_up


def test_weights_with_k_contiguous_are_read_as_they_lie_where_tma_can():
    expect_kept(aligned(4, 26, 64), None)  # [G, 2I, K], K-major rows of 128 bytes
    expect_kept(aligned(1, 26, 64)[:, :, :56], None)  # K = 56, rows 128 bytes apart
    expect_kept(aligned(4, 26, 72)[:, :, 8:], None)  # K = 64 from a 16-byte boundary 8 elements in
    expect_kept(aligned(4, 13, 64), aligned(4, 13, 64))


@pytest.mark.parametrize("case", ["odd k", "unaligned base", "stored k x i", "mixed"])
def test_other_weights_are_copied_with_k_contiguous_and_padded_rows(case):
    w_up = None
    if case == "odd k":
        w = aligned(4, 26, 63)
    elif case == "unaligned base":
        w = aligned(4, 26, 65)[:, :, 1:]
    elif case == "stored k x i":  # I contiguous: the kernel takes B and B2 K-major
        w = aligned(4, 64, 24).transpose(1, 2)
    else:  # gate K-major, up I-major
        w, w_up = aligned(4, 13, 64), aligned(4, 64, 16).transpose(1, 2)[:, :13]
    got, got_up = _torch.swiglu_weights_readable(w, w_up)
    for copy, t in ((got, w), (got_up, w_up)):
        if t is None:
            assert copy is None
            continue
        assert torch.equal(copy, t) and copy.stride(2) == 1 and copy.data_ptr() % 16 == 0
        assert copy.stride(1) * copy.element_size() % 16 == 0
    expect_kept(got, got_up)


# opcheck with a double-precision CPU stand-in for the kernel: each group's rows through the
# epilogue, rows no group owns NaN (as cpu_stand_ins.py's grouped_mm).

def auxiliary_up(acc, acc2, vectors, outputs):
    outputs["p"].copy_(acc2)
    return torch.nn.functional.silu(acc) * acc2


EPILOGUES = {  # the texts the stand-in computes: (acc, acc2, name[n] vectors, outputs' rows) -> D
    SWIGLU: lambda acc, acc2, vectors, outputs: torch.nn.functional.silu(acc) * acc2,
    "silu(acc + bg[n]) * (acc2 + bu[n])":
        lambda acc, acc2, v, outputs: torch.nn.functional.silu(acc + v["bg"]) * (acc2 + v["bu"]),
    "p[m, n] = acc2; silu(acc) * acc2": auxiliary_up,
}


def grouped_swiglu_into(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs):
    gate, up = rows(w.double(), None if w_up is None else w_up.double(), interleaved)
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        at = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        xg = x[at].double()
        # name[n] vectors as [G, 1, I] (the group's own) or [I]; outputs as out (the group's rows).
        vectors = {name: (t[g] if t.dim() == 3 else t).double() for name, t in zip(names, inputs)}
        rows_of = {name: t[at] for name, t in zip(names[len(inputs):], outputs)}
        out[at] = EPILOGUES[epilogue](xg @ gate[g].t(), xg @ up[g].t(), vectors, rows_of).to(out.dtype)


def grouped_swiglu_stand_in(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, out_dtype, max_sms):
    i = w.size(1) if w_up is not None else w.size(1) // 2
    out = x.new_full((*x.shape[:-1], i), float("nan"), dtype=_torch.output_dtype(x, out_dtype))
    grouped_swiglu_into(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, [])
    return out


def grouped_swiglu_out_stand_in(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs,
                                max_sms):
    grouped_swiglu_into(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs)


@pytest.fixture
def grouped_swiglu_kernels():
    yield from registered_on_cpu({"grouped_swiglu_mm": grouped_swiglu_stand_in,
                                  "grouped_swiglu_mm_out": grouped_swiglu_out_stand_in})


def test_opcheck_with_the_stand_in(grouped_swiglu_kernels):
    # Schemas, fake implementations against real outputs and AOT dispatch; every row owned by a
    # group, so that outputs are defined throughout.
    x, masked = torch.randn(12, 6, dtype=F64), torch.randn(3, 4, 6, dtype=F64)
    gate, up, w = torch.randn(3, 5, 6, dtype=F64), torch.randn(3, 5, 6, dtype=F64), torch.randn(3, 10, 6, dtype=F64)
    ends, counts = torch.tensor([4, 4, 12], dtype=I32), torch.tensor([2, 0, 4])
    op, op_out = ops.grouped_swiglu_mm.default, ops.grouped_swiglu_mm_out.default
    torch.library.opcheck(op, (x, gate, up, ends, "contiguous", False, SWIGLU, [], [], F64, 0))
    torch.library.opcheck(op, (x, w, None, ends.long(), "contiguous", True, SWIGLU, [], [], None, 0))
    torch.library.opcheck(op, (x, w, None, ends, "contiguous", False, SWIGLU, [], [], F32, 8))
    d = op(masked, w, None, counts, "masked", False, SWIGLU, [], [], F64, 0)
    assert d.shape == (3, 4, 5) and d[1].isnan().all() and d[0, 2:].isnan().all() and not d[2].isnan().any()
    biases = [torch.randn(3, 1, 5, dtype=F64), torch.randn(5, dtype=F64)]  # one a group; one for all
    torch.library.opcheck(op, (x, w, None, ends, "contiguous", False, "silu(acc + bg[n]) * (acc2 + bu[n])",
                               ["bg", "bu"], biases, F64, 0))
    out, p = torch.empty(12, 5, dtype=F64), torch.empty(12, 5, dtype=F64)
    args = (x, gate, up, ends, out, "contiguous", False, "p[m, n] = acc2; silu(acc) * acc2", ["p"], [], [p], 0)
    torch.library.opcheck(op_out, args)
    op_out(*args)
    reference = torch.cat([x[s:e] @ up[g].t() for g, s, e in group_rows(ends, "contiguous", 12)])
    assert torch.allclose(p, reference, rtol=1e-12, atol=1e-12)


def test_the_operator_s_backward_refuses_another_epilogue(grouped_swiglu_kernels):
    x, w = torch.randn(12, 6, dtype=F64, requires_grad=True), torch.randn(3, 10, 6, dtype=F64)
    bg, bu = torch.randn(5, dtype=F64), torch.randn(5, dtype=F64)
    d = ops.grouped_swiglu_mm(x, w, None, torch.tensor([4, 4, 12]), "contiguous", False,
                              "silu(acc + bg[n]) * (acc2 + bu[n])", ["bg", "bu"], [bg, bu], F64, 0)
    assert d.requires_grad
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through grouped_swiglu_mm with an "
                                                  "epilogue but the default"):
        d.sum().backward()


# The autograd formula with double-precision CPU stand-ins for the kernels: the `cpu_kernels`
# fixture's grouped_mm, grouped_wgrad and gemm (cpu_stand_ins.py; their grouped outputs' rows that
# no group owns NaN unless zeroed), and the grouped SwiGLU's above. Against torch's autograd of the
# forward written group by group in double; the output's gradient NaN in rows no group owns, and
# so are x's rows there, which must reach no gradient.

@pytest.fixture
def grad_kernels(cpu_kernels, grouped_swiglu_kernels):
    yield


def leaf(*shape, transposed=False):
    """A double tensor, row-major or (transposed) the transpose of a row-major one in its last two
    dimensions."""
    if not transposed:
        return torch.randn(*shape, dtype=F64)
    return torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=F64).transpose(-1, -2)


def grad_weights(form, groups, i, k, transposed=False):
    """(w, w_up, interleaved) of a weight form, double leaves that require grad."""
    if form == "pair":
        return (leaf(groups, i, k, transposed=transposed).requires_grad_(),
                leaf(groups, i, k, transposed=transposed).requires_grad_(), False)
    return leaf(groups, 2 * i, k, transposed=transposed).requires_grad_(), None, form == "interleaved"


def swiglu(x, gate, up):
    return torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())


def grouped_reference(x, gate, up, sizes, layout):
    """The grouped SwiGLU by torch, each group's rows in turn; rows no group owns 0 (no gradient)."""
    i = gate.size(1)
    if layout == "masked":
        return torch.stack([torch.cat((swiglu(x[g, :end], gate[g], up[g]), x.new_zeros(x.size(1) - end, i)))
                            for g, _, end in group_rows(sizes, layout, x.size(1))])
    spans = group_rows(sizes, layout, x.size(0))
    pieces = [swiglu(x[start:end], gate[g], up[g]) for g, start, end in spans]
    return torch.cat((*pieces, x.new_zeros(x.size(0) - spans[-1][2], i)))


def owned(x, sizes, layout):
    """Whether a group owns each row of x ([G, max_m] or [M_total])."""
    mask = torch.zeros(x.shape[:-1], dtype=torch.bool)
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        mask[(g, slice(start, end)) if layout == "masked" else slice(start, end)] = True
    return mask


GRAD_CASES = {"contiguous": ((12, 7), torch.tensor([3, 3, 9, 9], dtype=I32)),  # empty groups, 3 rows past the end
              "masked": ((4, 5, 7), torch.tensor([2, 0, 5, 3]))}


def grad_case(layout, form, transposed=False, i=5):
    """(x, w, w_up, interleaved, sizes, up): x with NaN in the rows no group owns, requiring grad, and
    the output's gradient `up`, NaN there too."""
    shape, sizes = GRAD_CASES[layout]
    x = leaf(*shape)
    mask = owned(x, sizes, layout)
    x[~mask] = float("nan")
    w, w_up, interleaved = grad_weights(form, sizes.size(0), i, shape[-1], transposed)
    up = torch.randn(*shape[:-1], i, dtype=F64)
    up[~mask] = float("nan")
    return x.requires_grad_(), w, w_up, interleaved, sizes, up


def reference_grads(x, w, w_up, interleaved, sizes, layout, up):
    inputs = [t for t in (x, w, w_up) if t is not None]
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    weights = copies[1:]
    gate, up_w = rows(weights[0], weights[1] if len(weights) == 2 else None, interleaved)
    d = grouped_reference(copies[0], gate, up_w, sizes, layout)
    return torch.autograd.grad(d, copies, up.nan_to_num(0.0))


def expect_grads_match(got, want, inputs):
    for g, wanted, t in zip(got, want, inputs):
        assert g.shape == t.shape and g.dtype == t.dtype
        assert torch.isfinite(g).all(), "non-finite gradient"
        assert torch.allclose(g, wanted, rtol=1e-12, atol=1e-12), (g - wanted).abs().max()


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("transposed", [False, True])
def test_gradients_match_torch_s_and_take_the_weights_layouts(grad_kernels, layout, form, transposed):
    x, w, w_up, interleaved, sizes, up = grad_case(layout, form, transposed)
    inputs = [t for t in (x, w, w_up) if t is not None]
    d = ops.grouped_swiglu_mm(x, w, w_up, sizes, layout, interleaved, SWIGLU, [], [], F64, 0)
    got = torch.autograd.grad(d, inputs, up)
    expect_grads_match(got, reference_grads(x, w, w_up, interleaved, sizes, layout, up), inputs)
    for g, t in zip(got, inputs):  # x's gradient is row-major, as grouped_mm's
        assert g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"
    assert (got[0][~owned(x, sizes, layout)] == 0).all()


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_the_eager_function_records_the_operator_s_formula(grad_kernels, layout, monkeypatch):
    # _torch routes eager calls with inputs that require grad through _ops.EagerGroupedSwiglu,
    # whose forward launches the kernel itself: here the launch writes the stand-in's output.
    from gemmkit import _ops

    def launch(x, w, w_up, interleaved, sizes, layout, out, max_sms, epilogue, pairs):
        grouped_swiglu_into(x, w, w_up, sizes, out, layout, interleaved, epilogue, [], [], [])

    monkeypatch.setattr(_torch, "launch_grouped_swiglu", launch)
    for form in FORMS:
        x, w, w_up, interleaved, sizes, up = grad_case(layout, form)
        inputs = [t for t in (x, w, w_up) if t is not None]
        d = _ops.EagerGroupedSwiglu.apply(x, w, w_up, sizes, layout, interleaved, SWIGLU, [], [], F64, 0)
        assert type(d.grad_fn).__name__ == "EagerGroupedSwigluBackward"
        got = torch.autograd.grad(d, inputs, up)
        expect_grads_match(got, reference_grads(x, w, w_up, interleaved, sizes, layout, up), inputs)


def test_only_the_gradients_asked_for_are_computed(grad_kernels):
    x, w, w_up, interleaved, sizes, up = grad_case("contiguous", "pair")
    w.requires_grad_(False)
    d = ops.grouped_swiglu_mm(x, w, w_up, sizes, "contiguous", False, SWIGLU, [], [], F64, 0)
    dx, dw_up = torch.autograd.grad(d, (x, w_up), up)
    want = reference_grads(x, w, w_up, False, sizes, "contiguous", up)
    expect_grads_match((dx, dw_up), (want[0], want[2]), (x, w_up))
    x.requires_grad_(False)
    d = ops.grouped_swiglu_mm(x, w, w_up, sizes, "contiguous", False, SWIGLU, [], [], F64, 0)
    (dw_up,) = torch.autograd.grad(d, (w_up,), up)
    assert torch.allclose(dw_up, want[2], rtol=1e-12, atol=1e-12)


def test_torch_compile_traces_the_backward(grad_kernels):
    # aot_eager: the operator's forward and backward traced with fake tensors (the backward's
    # grouped products, weight gradients and masks), then run with the stand-ins.
    def layer(x, w, sizes):
        return ops.grouped_swiglu_mm(x, w, None, sizes, layout, True, SWIGLU, [], [], F64, 0) * 2

    for layout in ("contiguous", "masked"):
        x, w, _, _, sizes, up = grad_case(layout, "interleaved")
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        got = torch.autograd.grad(compiled(x, w, sizes), (x, w), up)
        expect_grads_match(got, reference_grads(x, w, None, True, sizes, layout, 2 * up), (x, w))
        torch._dynamo.reset()


def test_opcheck_with_gradients(grad_kernels):
    # As test_opcheck_with_the_stand_in, with inputs that require grad: autograd's registration
    # and the AOT-dispatched backward against eager.
    x, masked = torch.randn(12, 6, dtype=F64, requires_grad=True), torch.randn(3, 4, 6, dtype=F64, requires_grad=True)
    gate, up = torch.randn(3, 5, 6, dtype=F64, requires_grad=True), torch.randn(3, 5, 6, dtype=F64, requires_grad=True)
    w = torch.randn(3, 10, 6, dtype=F64, requires_grad=True)
    op = ops.grouped_swiglu_mm.default
    ends, counts = torch.tensor([4, 4, 12], dtype=I32), torch.tensor([4, 4, 4])
    torch.library.opcheck(op, (x, gate, up, ends, "contiguous", False, SWIGLU, [], [], F64, 0))
    torch.library.opcheck(op, (x, w, None, ends.long(), "contiguous", True, SWIGLU, [], [], None, 0))
    torch.library.opcheck(op, (masked, w, None, counts, "masked", False, SWIGLU, [], [], None, 0))


# --- on an sm_90 GPU ----------------------------------------------------------------------------

SIZES = [0, 37, 0, 1, 130, 5, 0]  # empty groups first, in the middle and last, one row, odd sizes
COUNTS = [0, 1, 37, 64, 5]


def gpu_rand(*shape, dtype=BF16):
    return torch.randn(*shape, device="cuda", dtype=F32).to(dtype)


def nan_like(shape, dtype):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def gpu_weights(form, groups, i, k, dtype=BF16):
    if form == "pair":
        return gpu_rand(groups, i, k, dtype=dtype), gpu_rand(groups, i, k, dtype=dtype), False
    return gpu_rand(groups, 2 * i, k, dtype=dtype), None, form == "interleaved"


def expect_groups(d, x, gate, up, sizes, layout, **biases):
    """Each group's rows of d against its reference; the rows no group owns still NaN."""
    owned = torch.zeros(d.shape[:-1], dtype=torch.bool, device=d.device)
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        at = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        expect_near(d[at], *reference(x[at], gate[g], up[g], *(b[g] for b in biases.values())))
        owned[at] = True
    assert d[~owned].isnan().all(), "rows no group owns written"


@sm90
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("sizes_dtype", [I32, I64])
def test_contiguous_groups_match_double(form, sizes_dtype):
    from gpu_reference import offs_of

    i, k = 200, 256
    m = sum(SIZES) + 11  # 11 rows past the last end
    x = gpu_rand(m, k)
    w, w_up, interleaved = gpu_weights(form, len(SIZES), i, k)
    offs = offs_of(SIZES, sizes_dtype)
    out = nan_like((m, i), BF16)
    assert gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved, out=out) is out
    expect_groups(out, x, *rows(w, w_up, interleaved), offs.cpu(), "contiguous")
    d = gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved, out_dtype=F32)
    assert d.shape == (m, i) and d.dtype == F32
    d[sum(SIZES):] = float("nan")  # undefined rows of a new output
    expect_groups(d, x, *rows(w, w_up, interleaved), offs.cpu(), "contiguous")


@sm90
@pytest.mark.parametrize("form", FORMS)
def test_masked_groups_match_double(form):
    groups, max_m, i, k = len(COUNTS), 64, 136, 192
    x = gpu_rand(groups, max_m, k)
    w, w_up, interleaved = gpu_weights(form, groups, i, k)
    counts = torch.tensor(COUNTS, device="cuda")
    out = nan_like((groups, max_m, i), BF16)
    assert gemmkit.grouped_swiglu_mm(x, w, counts=counts, w_up=w_up, interleaved=interleaved, out=out) is out
    expect_groups(out, x, *rows(w, w_up, interleaved), counts.cpu(), "masked")


@sm90
@pytest.mark.parametrize("form", FORMS)
def test_float16_odd_k_and_strided_x(form):
    from gpu_reference import offs_of

    sizes, i = [5, 0, 40, 17], 1000
    offs = offs_of(sizes)
    for k, x in [(128, gpu_rand(62, 256, dtype=F16)[:, 64:192]), (100, gpu_rand(62, 101, dtype=F16)[:, 1:])]:
        w, w_up, interleaved = gpu_weights(form, len(sizes), i, k, dtype=F16)  # K = 100: copied, rows padded
        d = gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved, max_sms=8)
        assert d.dtype == F16
        expect_groups(d, x, *rows(w, w_up, interleaved), offs.cpu(), "contiguous")


@sm90
@pytest.mark.parametrize("form", FORMS)
def test_a_custom_epilogue_with_per_expert_biases(form):
    from gpu_reference import offs_of

    i, k = 200, 128
    m = sum(SIZES)
    x = gpu_rand(m, k)
    w, w_up, interleaved = gpu_weights(form, len(SIZES), i, k)
    gate, up = rows(w, w_up, interleaved)
    bg, bu = gpu_rand(len(SIZES), i), gpu_rand(len(SIZES), i, dtype=F32)  # [G, I]: each expert's own
    offs = offs_of(SIZES)
    d = gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved,
                                  epilogue="silu(acc + bg[n]) * (acc2 + bu[n])", bg=bg, bu=bu)
    expect_groups(d, x, gate, up, offs.cpu(), "contiguous", bg=bg, bu=bu)
    # A per-token weight and an auxiliary output: the gate's pre-activation.
    route, pre = gpu_rand(m, dtype=F32), nan_like((m, i), F32)
    d = gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved,
                                  epilogue="pre[m, n] = acc + bg[n]; silu(acc + bg[n]) * (acc2 + bu[n]) * route[m]",
                                  bg=bg, bu=bu, route=route, pre=pre)
    for g, start, end in group_rows(offs.cpu(), "contiguous", m):
        want, bound = reference(x[start:end], gate[g], up[g], bg[g], bu[g])
        scale = route[start:end].double().unsqueeze(1)
        expect_near(d[start:end], want * scale, bound * scale.abs())
        xg, wg = x[start:end].double(), gate[g].double()
        expect_near(pre[start:end], xg @ wg.t() + bg[g].double(), (xg.abs() @ wg.abs().t()) * k * 2.0 ** -24)


@sm90
def test_a_masked_custom_epilogue_with_per_expert_biases():
    groups, max_m, i, k = len(COUNTS), 64, 136, 128
    x = gpu_rand(groups, max_m, k)
    w = gpu_rand(groups, 2 * i, k)
    bg, bu = gpu_rand(groups, i), gpu_rand(groups, i)
    counts = torch.tensor(COUNTS, device="cuda", dtype=I32)
    out = nan_like((groups, max_m, i), F32)
    gemmkit.grouped_swiglu_mm(x, w, counts=counts, interleaved=True, epilogue="silu(acc + bg[n]) * (acc2 + bu[n])",
                              bg=bg, bu=bu, out=out)
    expect_groups(out, x, w[:, 0::2], w[:, 1::2], counts.cpu(), "masked", bg=bg, bu=bu)


@sm90
def test_inputs_that_require_grad_are_refused_with_another_epilogue_on_the_gpu():
    from gpu_reference import offs_of

    x, w = gpu_rand(64, 128).requires_grad_(), gpu_rand(4, 64, 128)
    with pytest.raises(NotImplementedError, match="^grouped_swiglu_mm: x requires grad"):
        gemmkit.grouped_swiglu_mm(x, w, offs_of([16] * 4), epilogue="silu(acc + b[n]) * acc2", b=gpu_rand(4, 32))


def gpu_grad_case(layout, form, i=200, k=128, transposed=False):
    """(x, w, w_up, interleaved, sizes, reference) on the GPU, x and the weights requiring grad, x's
    rows that no group owns NaN; reference(x, *weights) the grouped SwiGLU in double."""
    from gpu_reference import offs_of

    if layout == "contiguous":
        sizes = offs_of(SIZES)
        x = gpu_rand(sum(SIZES) + 11, k)  # 11 rows past the last end
        x[sum(SIZES):] = float("nan")
    else:
        sizes = torch.tensor(COUNTS, device="cuda", dtype=I32)
        x = gpu_rand(len(COUNTS), 64, k)
        x[~(torch.arange(64, device="cuda") < sizes.unsqueeze(1))] = float("nan")
    groups = sizes.size(0)
    w, w_up, interleaved = gpu_weights(form, groups, i, k)
    if transposed:  # the transposes of row-major [G, K, 2I] (or [G, K, I]) weights
        w = w.transpose(1, 2).contiguous().transpose(1, 2)
        w_up = None if w_up is None else w_up.transpose(1, 2).contiguous().transpose(1, 2)
    for t in (x, w, w_up):
        if t is not None:
            t.requires_grad_()
    cpu_sizes = sizes.cpu()

    def reference(x, *weights):
        gate, up = rows(weights[0], weights[1] if len(weights) == 2 else None, interleaved)
        return grouped_reference(x, gate, up, cpu_sizes, layout)

    return x, w, w_up, interleaved, sizes, reference


def grouped_call(x, w, w_up, interleaved, sizes, layout, **kwargs):
    size = {"offs": sizes} if layout == "contiguous" else {"counts": sizes}
    return gemmkit.grouped_swiglu_mm(x, w, **size, w_up=w_up, interleaved=interleaved, **kwargs)


@sm90
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_double_autograd(layout, form):
    from gpu_reference import expect_grads

    x, w, w_up, interleaved, sizes, reference = gpu_grad_case(layout, form)
    inputs = [t for t in (x, w, w_up) if t is not None]
    d = grouped_call(x, w, w_up, interleaved, sizes, layout)
    expect_grads(d, inputs, reference)
    d = grouped_call(x, w, w_up, interleaved, sizes, layout, out_dtype=F32)
    expect_grads(d, inputs, reference)
    # The output's rows that no group owns are undefined (NaN, say): their gradient is not read.
    d = grouped_call(x, w, w_up, interleaved, sizes, layout, out_dtype=F32)  # expect_grads spent the graph
    grads = torch.autograd.grad(d.square().sum(), inputs)
    for g, t in zip(grads, inputs):
        assert g.stride() == t.stride() and torch.isfinite(g).all()


@sm90
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_gradients_of_column_major_weights_take_their_layout(layout):
    from gpu_reference import expect_grads

    for form in ("pair", "concat"):
        x, w, w_up, interleaved, sizes, reference = gpu_grad_case(layout, form, i=96, transposed=True)
        inputs = [t for t in (x, w, w_up) if t is not None]
        expect_grads(grouped_call(x, w, w_up, interleaved, sizes, layout), inputs, reference)
        grads = torch.autograd.grad(grouped_call(x, w, w_up, interleaved, sizes, layout).float().square().sum(),
                                    inputs)
        for g, t in zip(grads, inputs):
            assert g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"


@sm90
def test_torch_compile_with_fullgraph_backward():
    from gpu_reference import expect_grads

    for layout, form in (("contiguous", "interleaved"), ("masked", "pair")):
        x, w, w_up, interleaved, sizes, reference = gpu_grad_case(layout, form)
        inputs = [t for t in (x, w, w_up) if t is not None]

        def layer(x, w, w_up, sizes):
            return grouped_call(x, w, w_up, interleaved, sizes, layout)

        d = torch.compile(layer, fullgraph=True)(x, w, w_up, sizes)
        expect_grads(d, inputs, reference)
        torch._dynamo.reset()


@sm90
@pytest.mark.parametrize("form", FORMS)
def test_torch_compile_with_fullgraph_gives_the_same_result(form):
    from gpu_reference import offs_of

    groups, i, k = 8, 256, 128
    offs = offs_of([0, 100, 3, 64, 0, 77, 128, 20])  # every row owned
    x = gpu_rand(392, k)
    w, w_up, interleaved = gpu_weights(form, groups, i, k)
    bg = gpu_rand(groups, i)

    def moe_up(x, w, w_up, offs):
        return gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved) * 2

    def biased(x, w, w_up, offs, bg):
        return gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved,
                                         epilogue="silu(acc + bg[n]) * acc2", bg=bg)

    compiled = torch.compile(moe_up, fullgraph=True)
    assert torch.equal(compiled(x, w, w_up, offs), moe_up(x, w, w_up, offs))  # the same kernel, the same result
    assert torch.equal(torch.compile(biased, fullgraph=True)(x, w, w_up, offs, bg), biased(x, w, w_up, offs, bg))
    counts = torch.tensor([3, 0, 64, 17, 1, 64, 9, 40], device="cuda")
    xm = gpu_rand(groups, 64, k)

    def masked(x, w, w_up, counts):
        return gemmkit.grouped_swiglu_mm(x, w, counts=counts, w_up=w_up, interleaved=interleaved, out_dtype=F32)

    got, want = torch.compile(masked, fullgraph=True)(xm, w, w_up, counts), masked(xm, w, w_up, counts)
    owned = torch.arange(64, device="cuda") < counts.unsqueeze(1)
    assert torch.equal(got[owned], want[owned])

    def with_pre(x, w, w_up, offs, pre):  # an auxiliary output: the operator that writes in place
        return gemmkit.grouped_swiglu_mm(x, w, offs, w_up=w_up, interleaved=interleaved,
                                         epilogue="pre[m, n] = acc; silu(acc) * acc2", pre=pre)

    pre, pre_eager = nan_like((392, i), F32), nan_like((392, i), F32)
    assert torch.equal(torch.compile(with_pre, fullgraph=True)(x, w, w_up, offs, pre),
                       with_pre(x, w, w_up, offs, pre_eager))
    assert torch.equal(pre, pre_eager)
    torch._dynamo.reset()


@sm90
def test_opcheck():
    from gpu_reference import offs_of

    offs = offs_of([5, 0, 59])  # every row owned, so that outputs are defined throughout
    x, gate, up, w = gpu_rand(64, 128), gpu_rand(3, 96, 128), gpu_rand(3, 96, 128), gpu_rand(3, 192, 128)
    op = ops.grouped_swiglu_mm.default
    torch.library.opcheck(op, (x, gate, up, offs, "contiguous", False, SWIGLU, [], [], None, 0))
    torch.library.opcheck(op, (x, w, None, offs.long(), "contiguous", True, SWIGLU, [], [], F32, 0))
    counts = torch.tensor([16, 16, 16], device="cuda")
    torch.library.opcheck(op, (x.view(4, 16, 128)[:3], w, None, counts, "masked", False,
                               "silu(acc + b[n]) * acc2", ["b"], [gpu_rand(3, 1, 96)], None, 0))
    out, pre = torch.empty(64, 96, device="cuda", dtype=BF16), torch.empty(64, 96, device="cuda", dtype=F32)
    torch.library.opcheck(ops.grouped_swiglu_mm_out.default, (x, gate, up, offs, out, "contiguous", False,
                                                              "p[m, n] = acc2; silu(acc) * acc2", ["p"], [], [pre], 0))
