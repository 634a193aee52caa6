"""FP8 outputs from Python: out_dtype=torch.float8_e4m3fn on mm, bmm, scaled_mm, swiglu_mm,
grouped_mm (contiguous and masked groups, whole batches, the weight gradient), scaled_grouped_mm
and grouped_swiglu_mm, and out= the pair on addmm too, give (out, scales): out quantised in 1x128
blocks as the kernel stores it (GemmOptions::scale_d), scales float32 [..., M, ceil(N/128)] laid
out as quantize()'s block scales, the next FP8 product's a and block-mode scale_a. Operators:
torch.ops.gemmkit.*_quantized, and scale_d on those that write into out.

Without a GPU: the operators' registration; the pair's shapes, dtypes and strides (quantize()'s)
on fake tensors for every function, with epilogues and out=; tracing into one graph, mm's pair
into scaled_mm and grouped_swiglu_mm's into scaled_grouped_mm (the MoE down-projection), out= and
an epilogue's outputs through the operators' scale_d; the argument errors, each naming its
argument, and inputs that require grad refused; the bindings giving scale_d to the library (its
checks name it); opcheck and torch.compile (aot_eager) of the operators with double-precision CPU
stand-ins. On an sm_90 GPU (the tests marked `sm90`, which skip, saying so, elsewhere), against
float64 references: each block's scale against amax / 448 of the reference's block, and out *
scale against the reference within e4m3's rounding (2^-4 relative, 2^-10 of the scale absolute)
beyond the f32 accumulation's bound, for mm (M = 333, N = 300) with and without an epilogue and
out=, bmm (batched and a shared b), swiglu_mm, grouped_mm over contiguous groups with empty and
odd ones (rows no group owns left as they were in out=), masked groups and the weight gradient
(an empty group's blocks: scale 1, zeros), scaled_mm of FP8 inputs; chained, mm's pair into
scaled_mm and grouped_swiglu_mm's (contiguous and masked) into scaled_grouped_mm with block-scaled
A, against float64 products of the dequantised operands; torch.compile(fullgraph=True) against
eager, and opcheck. Skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402

from fake_cuda import cuda, row_minor  # noqa: E402

import gemmkit  # noqa: E402
from cpu_stand_ins import group_rows, quantized_blocks, registered_on_cpu  # noqa: E402
from gpu_reference import FP8_SUMS, dequantized, expect_close, offs_of, spans, swiglu_reference  # noqa: E402

BF16, F32, F64, E4M3, I32 = torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn, torch.int32
SWIGLU = "silu(acc) * acc2"
ops = torch.ops.gemmkit
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")
QUANTIZED_OPS = ("gemm_quantized", "swiglu_mm_quantized", "grouped_mm_quantized", "grouped_wgrad_quantized",
                 "grouped_swiglu_mm_quantized")


# --- without a GPU ----------------------------------------------------------------------------

def test_the_operators_are_registered():
    for name in QUANTIZED_OPS:
        assert hasattr(ops, name), name


def expect_pair(result, shape):
    """result is (out, scales) of fake CUDA tensors: out e4m3 of `shape`, row-major, and its scales
    shaped as quantize() shapes block scales of a tensor of that shape (what scaled_mm's block-mode
    scale_a is), rows contiguous as quantize() lays them out."""
    assert isinstance(result, tuple) and len(result) == 2
    q, s = result
    assert isinstance(q, FakeTensor) and isinstance(s, FakeTensor)
    assert tuple(q.shape) == shape and q.dtype == E4M3 and q.device.type == "cuda" and q.is_contiguous()
    _, want = gemmkit.quantize(cuda(*shape), mode="block")
    assert s.dtype == F32 and s.device.type == "cuda"
    assert s.shape == want.shape and row_minor(s) and row_minor(want), (s.shape, s.stride(), want.shape, want.stride())


def test_each_function_returns_the_pair_with_quantize_s_layout(fake):
    a, b, offs = cuda(333, 256), cuda(256, 300), cuda(4, dtype=I32)
    expect_pair(gemmkit.mm(a, b, out_dtype=E4M3), (333, 300))
    expect_pair(gemmkit.mm(a, b, out_dtype=E4M3, alpha=0.5, beta=1.0, c=cuda(333, 300)), (333, 300))
    expect_pair(gemmkit.mm(a, b, out_dtype=E4M3, epilogue="relu(acc + bias[n])", bias=cuda(300)), (333, 300))
    expect_pair(gemmkit.bmm(cuda(3, 70, 256), b, out_dtype=E4M3), (3, 70, 300))
    expect_pair(gemmkit.bmm(cuda(70, 256), cuda(3, 256, 300), out_dtype=E4M3, epilogue="gelu(acc)"), (3, 70, 300))
    qa, qb = cuda(333, 256, dtype=E4M3), cuda(256, 300, dtype=E4M3)
    expect_pair(gemmkit.scaled_mm(qa, qb, cuda(333, 2, dtype=F32), cuda(2, 3, dtype=F32), mode="block",
                                  out_dtype=E4M3), (333, 300))
    expect_pair(gemmkit.swiglu_mm(cuda(2, 70, 256), cuda(600, 256), out_dtype=E4M3), (2, 70, 300))
    expect_pair(gemmkit.swiglu_mm(cuda(70, 256), cuda(300, 256), cuda(300, 256), out_dtype=E4M3,
                                  epilogue="silu(acc + bg[n]) * acc2", bg=cuda(300)), (70, 300))
    expect_pair(gemmkit.grouped_mm(cuda(100, 256), cuda(4, 256, 300), offs, out_dtype=E4M3), (100, 300))
    expect_pair(gemmkit.grouped_mm(cuda(100, 256), cuda(4, 256, 300), offs, out_dtype=E4M3,
                                   epilogue="acc * route[m]", route=cuda(100, dtype=F32)), (100, 300))
    expect_pair(gemmkit.grouped_mm(cuda(4, 30, 256), cuda(4, 256, 300), counts=offs, out_dtype=E4M3), (4, 30, 300))
    expect_pair(gemmkit.grouped_mm(cuda(4, 30, 256), cuda(4, 256, 300), out_dtype=E4M3), (4, 30, 300))
    expect_pair(gemmkit.grouped_mm(cuda(64, 100), cuda(100, 300), offs, out_dtype=E4M3), (4, 64, 300))
    expect_pair(gemmkit.grouped_mm(cuda(64, 100), cuda(100, 300), offs, out_dtype=E4M3, epilogue="silu(acc)"),
                (4, 64, 300))
    expect_pair(gemmkit.scaled_grouped_mm(cuda(100, 256, dtype=E4M3), cuda(4, 256, 300, dtype=E4M3),
                                          cuda(100, 2, dtype=F32), cuda(4, 2, 3, dtype=F32), offs, mode="block",
                                          out_dtype=E4M3), (100, 300))
    expect_pair(gemmkit.scaled_grouped_mm(cuda(64, 100, dtype=E4M3), cuda(100, 300, dtype=E4M3), cuda(4, 64, dtype=F32),
                                          cuda(4, 300, dtype=F32), offs, out_dtype=E4M3), (4, 64, 300))
    expect_pair(gemmkit.grouped_swiglu_mm(cuda(100, 256), cuda(4, 600, 256), offs, out_dtype=E4M3), (100, 300))
    expect_pair(gemmkit.grouped_swiglu_mm(cuda(4, 30, 256), cuda(4, 300, 256), counts=offs, w_up=cuda(4, 300, 256),
                                          out_dtype=E4M3, epilogue="silu(acc + bg[n]) * acc2", bg=cuda(4, 300)),
                (4, 30, 300))
    # Other dtypes are as they were: one tensor.
    d = gemmkit.mm(a, b, out_dtype=F32)
    assert isinstance(d, FakeTensor) and d.dtype == F32


def test_out_takes_the_pair_and_returns_it(fake):
    a, b, offs = cuda(333, 256), cuda(256, 300), cuda(4, dtype=I32)

    def pair(*shape):
        return cuda(*shape, dtype=E4M3), cuda(*shape[:-1], -(-shape[-1] // 128), dtype=F32)

    out = pair(333, 300)
    assert gemmkit.mm(a, b, out=out) is out
    assert gemmkit.mm(a, b, out=out, out_dtype=E4M3, epilogue="pre[m, n] = acc; relu(acc)",
                      pre=cuda(333, 300, dtype=F32)) is out
    assert gemmkit.addmm(cuda(300), a, b, out=out) is out
    listed = list(pair(3, 70, 300))
    assert gemmkit.bmm(cuda(3, 70, 256), b, out=listed) is listed
    out = pair(2, 70, 300)
    assert gemmkit.swiglu_mm(cuda(2, 70, 256), cuda(600, 256), out=out) is out
    out = pair(100, 300)
    assert gemmkit.grouped_mm(cuda(100, 256), cuda(4, 256, 300), offs, out=out) is out
    assert gemmkit.grouped_swiglu_mm(cuda(100, 256), cuda(4, 600, 256), offs, out=out) is out
    out = pair(4, 64, 300)
    assert gemmkit.grouped_mm(cuda(64, 100), cuda(100, 300), offs, out=out) is out


def targets_of(graph):
    return [node.target for node in graph.graph.nodes if node.op == "call_function"]


def test_a_traced_chain_gives_the_pair_to_the_next_fp8_product(fake):
    def dense(x, w1, qw2, sw2):
        q, s = gemmkit.mm(x, w1.t(), out_dtype=E4M3)
        return gemmkit.scaled_mm(q, qw2.t(), s, sw2.t(), mode="block")

    args = (cuda(333, 256), cuda(300, 256), cuda(64, 300, dtype=E4M3), cuda(1, 3, dtype=F32))
    graph, _ = torch._dynamo.export(dense)(*args)  # raises where dynamo would break the graph
    assert targets_of(graph).count(ops.gemm_quantized) == 1 and ops.gemm in targets_of(graph)
    assert tuple(graph(*args).shape) == (333, 64)

    def moe(x, w13, offs, qw2, sw2):
        q, s = gemmkit.grouped_swiglu_mm(x, w13, offs, out_dtype=E4M3)
        return gemmkit.scaled_grouped_mm(q, qw2.transpose(-2, -1), s, sw2.transpose(-2, -1), offs, mode="block")

    args = (cuda(100, 256), cuda(4, 640, 256), cuda(4, dtype=I32), cuda(4, 256, 320, dtype=E4M3),
            cuda(4, 2, 3, dtype=F32))
    graph, _ = torch._dynamo.export(moe)(*args)
    assert ops.grouped_swiglu_mm_quantized in targets_of(graph) and ops.grouped_mm in targets_of(graph)
    assert tuple(graph(*args).shape) == (100, 256)


def test_out_and_an_epilogue_s_outputs_trace_through_scale_d(fake):
    def into(a, b, q, s):
        return gemmkit.mm(a, b, out=(q, s))

    q, s = cuda(333, 300, dtype=E4M3), cuda(333, 3, dtype=F32)
    graph, _ = torch._dynamo.export(into)(cuda(333, 256), cuda(256, 300), q, s)
    [node] = [n for n in graph.graph.nodes if n.target == ops.gemm_out]
    assert len(node.args) == 11 and node.args[-1] is not None  # scale_d

    def with_pre(a, b, pre):
        return gemmkit.mm(a, b, out_dtype=E4M3, epilogue="pre[m, n] = acc; relu(acc)", pre=pre)

    graph, _ = torch._dynamo.export(with_pre)(cuda(333, 256), cuda(256, 300), cuda(333, 300, dtype=F32))
    [node] = [n for n in graph.graph.nodes if n.target == ops.gemm_epilogue]
    assert len(node.args) == 15 and node.args[-1] is not None  # scale_d
    assert ops.gemm_quantized not in targets_of(graph)


def test_errors_name_the_argument(fake):
    a, b, offs = cuda(333, 256), cuda(256, 300), cuda(4, dtype=I32)
    q, s = cuda(333, 300, dtype=E4M3), cuda(333, 3, dtype=F32)
    with pytest.raises(TypeError, match=r"^out_dtype: torch.float8_e5m2 is not supported; expected bfloat16, "
                                        r"float16, float32 or float8_e4m3fn \(returned with its scales\)$"):
        gemmkit.mm(a, b, out_dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match=r"^out: a float8_e4m3fn tensor without its scales; expected the pair "
                                         r"out=\(out, scales\)$"):
        gemmkit.mm(a, b, out=q)
    with pytest.raises(ValueError, match=r"^out: the pair \(out, scales\) with out of dtype torch.bfloat16; "
                                         "expected scales only with a float8_e4m3fn out$"):
        gemmkit.mm(a, b, out=(cuda(333, 300), s))
    with pytest.raises(ValueError, match=r"^out\[1\]: shape \[333, 2\]; expected \[333, 3\], one scale a row for "
                                         r"each 128 columns of out \[333, 300\]$"):
        gemmkit.mm(a, b, out=(q, cuda(333, 2, dtype=F32)))
    with pytest.raises(TypeError, match=r"^out\[1\]: dtype torch.bfloat16; expected float32"):
        gemmkit.mm(a, b, out=(q, cuda(333, 3)))
    with pytest.raises(ValueError, match=r"^out: 1 items; expected a tensor, or the pair \(out, scales\)"):
        gemmkit.mm(a, b, out=(q,))
    with pytest.raises(ValueError, match="^out: dtype torch.float8_e4m3fn differs from out_dtype torch.bfloat16$"):
        gemmkit.mm(a, b, out=(q, s), out_dtype=BF16)
    with pytest.raises(ValueError, match=r"^out\[1\]: shape \[2, 70, 2\]; expected \[2, 70, 3\]"):
        gemmkit.swiglu_mm(cuda(2, 70, 256), cuda(600, 256), out=(cuda(2, 70, 300, dtype=E4M3),
                                                                   cuda(2, 70, 2, dtype=F32)))
    with pytest.raises(ValueError, match="^out_dtype: float8_e4m3fn with a 3-D a and a 2-D b"):
        gemmkit.grouped_mm(cuda(4, 30, 256), cuda(256, 300), offs, out_dtype=E4M3)


def test_inputs_that_require_grad_are_refused(fake):
    a, b, offs = cuda(333, 256), cuda(256, 300), cuda(4, dtype=I32)
    x, w13 = cuda(100, 256), cuda(4, 600, 256)
    cases = [  # (the name refused, the tensor that requires grad, a call on it)
        ("a", cuda(333, 256), lambda t: gemmkit.mm(t, b, out_dtype=E4M3)),
        ("bias", cuda(300), lambda t: gemmkit.mm(a, b, out_dtype=E4M3, epilogue="acc + bias[n]", bias=t)),
        ("c", cuda(333, 300), lambda t: gemmkit.mm(a, b, out_dtype=E4M3, beta=1.0, c=t)),
        ("b", cuda(256, 300), lambda t: gemmkit.bmm(cuda(3, 333, 256), t, out_dtype=E4M3)),
        ("w", cuda(600, 256), lambda t: gemmkit.swiglu_mm(x, t, out_dtype=E4M3)),
        ("b", cuda(4, 256, 300), lambda t: gemmkit.grouped_mm(x, t, offs, out_dtype=E4M3)),
        ("a", cuda(64, 100), lambda t: gemmkit.grouped_mm(t, cuda(100, 300), offs, out_dtype=E4M3)),
        ("x", cuda(100, 256), lambda t: gemmkit.grouped_swiglu_mm(t, w13, offs, out_dtype=E4M3)),
    ]
    for name, t, call in cases:
        t.requires_grad_()
        with pytest.raises(RuntimeError, match=f"^{name}: requires grad, but a float8_e4m3fn output "
                                               r"\(out_dtype or out=\) is not differentiable"):
            call(t)
        with torch.no_grad():
            assert isinstance(call(t), tuple)


def test_the_bindings_give_scale_d_to_the_library():
    # The library checks D's scales before it looks for a GPU: its messages name scale_d; a call
    # that passes the checks fails for want of a GPU (or, with one, for the CPU tensors' pointers).
    from gemmkit import _gemmkit

    none, contiguous, masked = _gemmkit.ScaleMode.none, _gemmkit.GroupLayout.contiguous, _gemmkit.GroupLayout.masked
    a, b, d = torch.ones(8, 16, dtype=BF16), torch.ones(16, 200, dtype=BF16), torch.empty(8, 200, dtype=E4M3)
    offs = torch.tensor([3, 8], dtype=I32)

    def past_the_checks():
        return pytest.raises((RuntimeError, ValueError),
                             match="gemmkit needs an NVIDIA Hopper GPU|is not device memory")

    def wrong(shape, n=2):
        return pytest.raises(ValueError, match=rf"^scale_d: shape \[{shape}\]; expected M x ceil\(N/128\) = .* x {n} ")

    calls = {
        "gemm": lambda d, s: _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, none, None, none, None, scale_d=s),
        "swiglu": lambda d, s: _gemmkit.swiglu_tensors(a, torch.ones(400, 16, dtype=BF16), None, False, d, 0,
                                                       scale_d=s),
        "grouped": lambda d, s: _gemmkit.grouped_gemm_tensors(a, torch.ones(2, 16, 200, dtype=BF16), d, offs,
                                                              contiguous, False, False, 1.0, 0, none, None, none, None,
                                                              0, scale_d=s),
        "grouped_swiglu": lambda d, s: _gemmkit.grouped_swiglu_tensors(a, torch.ones(2, 400, 16, dtype=BF16), None,
                                                                       False, d, offs, contiguous, False, 0, 0,
                                                                       scale_d=s),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="^scale_d: mode none for an e4m3 D; expected block"):
            call(d, None)
        with wrong("8, 1"):
            call(d, torch.empty(8, 1))
        with pytest.raises(ValueError, match="^scale_d: mode block given for D of dtype bf16"):
            call(torch.empty(8, 200, dtype=BF16), torch.empty(8, 2))
        with past_the_checks():
            call(d, torch.empty(8, 2))
    masked_d = d.view(2, 4, 200)

    def grouped_masked(s):
        _gemmkit.grouped_gemm_tensors(a.view(2, 4, 16), torch.ones(2, 16, 200, dtype=BF16), masked_d, offs, masked,
                                      False, False, 1.0, 0, none, None, none, None, 0, scale_d=s)

    with wrong("2, 4, 3"):
        grouped_masked(torch.empty(2, 4, 3))
    with past_the_checks():
        grouped_masked(torch.empty(2, 4, 2))
    dw = torch.empty(2, 16, 200, dtype=E4M3)

    def wgrad(s):
        _gemmkit.grouped_gemm_wgrad_tensors(a, torch.ones(8, 200, dtype=BF16), dw, offs, False, 1.0, 0.0, None, 0,
                                            none, None, none, None, 0, scale_d=s)

    with wrong("2, 16, 3"):
        wgrad(torch.empty(2, 16, 3))
    with past_the_checks():
        wgrad(torch.empty(2, 16, 2))
    view = _gemmkit.view_of
    with wrong("8, 1"):
        gemmkit.gemm(view(a, "a"), view(b, "b"), view(d, "d"), scale_d=view(torch.empty(8, 1), "scale_d"))
    with past_the_checks():
        gemmkit.gemm(view(a, "a"), view(b, "b"), view(d, "d"), scale_d=view(torch.empty(8, 2), "scale_d"))


def gate_and_up(w, w_up, interleaved):
    """(gate, up) [..., I, K] of each weight form (the experts' too)."""
    if w_up is not None:
        return w, w_up
    return (w[..., 0::2, :], w[..., 1::2, :]) if interleaved else w.chunk(2, -2)


def swiglu_quantized_stand_in(x, w, w_up, interleaved, epilogue, names, inputs):
    assert epilogue == SWIGLU and not names
    gate, up = gate_and_up(w.double(), None if w_up is None else w_up.double(), interleaved)
    x = x.double()
    return quantized_blocks(torch.nn.functional.silu(x @ gate.t()) * (x @ up.t()))


def grouped_swiglu_quantized_stand_in(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, max_sms):
    assert epilogue == SWIGLU and not names
    gate, up = gate_and_up(w.double(), None if w_up is None else w_up.double(), interleaved)
    value = x.new_full((*x.shape[:-1], gate.size(-2)), float("nan"), dtype=F64)
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        rows = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        xg = x[rows].double()
        value[rows] = torch.nn.functional.silu(xg @ gate[g].t()) * (xg @ up[g].t())
    return quantized_blocks(value)


@pytest.fixture
def quantized_kernels(cpu_kernels):
    yield from registered_on_cpu({"swiglu_mm_quantized": swiglu_quantized_stand_in,
                                  "grouped_swiglu_mm_quantized": grouped_swiglu_quantized_stand_in})


def test_opcheck_with_the_stand_ins(quantized_kernels):
    # Schemas, fake implementations against real outputs and AOT dispatch; every row owned by a
    # group, so that outputs are defined throughout.
    a, b, bias = torch.randn(20, 6, dtype=F64), torch.randn(6, 300, dtype=F64), torch.randn(300, dtype=F64)
    torch.library.opcheck(ops.gemm_quantized.default, (a, b, None, None, "none", "none", 1.0, 0.0, None, "", [], []))
    torch.library.opcheck(ops.gemm_quantized.default, (torch.randn(3, 20, 6, dtype=F64), b, None, None, "none", "none",
                                                       0.5, 1.0, torch.randn(20, 300, dtype=F64), "relu(acc + bias[n])",
                                                       ["bias"], [bias]))
    ends, counts = torch.tensor([4, 4, 20], dtype=I32), torch.tensor([2, 0, 4])
    experts = torch.randn(3, 6, 300, dtype=F64)
    torch.library.opcheck(ops.grouped_mm_quantized.default, (a, experts, ends, "contiguous", "", [], [], 0, None, None,
                                                             "none", "none"))
    torch.library.opcheck(ops.grouped_wgrad_quantized.default, (a, torch.randn(20, 300, dtype=F64), ends, "", [], [],
                                                                0, None, None, "none", "none"))
    w, w_up = torch.randn(600, 6, dtype=F64), torch.randn(300, 6, dtype=F64)
    torch.library.opcheck(ops.swiglu_mm_quantized.default, (a, w, None, True, SWIGLU, [], []))
    torch.library.opcheck(ops.swiglu_mm_quantized.default, (a, w[:300], w_up, False, SWIGLU, [], []))
    torch.library.opcheck(ops.grouped_swiglu_mm_quantized.default,
                          (a, torch.randn(3, 600, 6, dtype=F64), None, ends, "contiguous", False, SWIGLU, [], [], 0))
    d = ops.grouped_swiglu_mm_quantized(torch.randn(3, 4, 6, dtype=F64), torch.randn(3, 600, 6, dtype=F64), None,
                                        counts, "masked", False, SWIGLU, [], [], 0)
    assert d[0].shape == (3, 4, 300) and d[1].shape == (3, 4, 3) and d[1][1].isnan().all()
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs (an e4m3
    # out among them here); test_the_operators_under_torch_compile_write_the_scales runs it compiled.
    out, scales, pre = torch.empty(20, 300, dtype=E4M3), torch.empty(20, 3), torch.empty(20, 300, dtype=F64)
    torch.library.opcheck(ops.gemm_epilogue.default,
                          (a, b, out, None, None, "none", "none", "pre[m, n] = acc; relu(acc)", ["pre"], [], [pre],
                           1.0, 0.0, None, scales), test_utils="test_faketensor")


def _epilogue_into(a, b, out, scales, pre):
    ops.gemm_epilogue(a, b, out, None, None, "none", "none", "pre[m, n] = acc; relu(acc)", ["pre"], [], [pre], 1.0,
                      0.0, None, scales)
    return ops.gemm_quantized(a, b, None, None, "none", "none", 1.0, 0.0, None, "", [], [])


def test_the_operators_under_torch_compile_write_the_scales(cpu_kernels):
    # The scales an operator writes in place (scale_d) come out of a compiled graph as they do
    # eagerly; gemm_quantized's pair is returned.
    a, b = torch.randn(20, 6, dtype=F64), torch.randn(6, 300, dtype=F64)
    want_q, want_s = quantized_blocks((a @ b).relu())
    for step in (_epilogue_into, torch.compile(_epilogue_into, backend="aot_eager", fullgraph=True)):
        out, scales = torch.empty(20, 300, dtype=E4M3), torch.full((20, 3), float("nan"))
        pre = torch.full((20, 300), float("nan"), dtype=F64)
        q, s = step(a, b, out, scales, pre)
        assert torch.equal(scales, want_s) and torch.equal(out.view(torch.uint8), want_q.view(torch.uint8))
        assert torch.allclose(pre, a @ b, rtol=1e-12, atol=1e-12)
        assert (q.shape, s.shape) == ((20, 300), (20, 3)) and torch.equal(s, quantized_blocks(a @ b)[1])
    torch._dynamo.reset()


# --- on an sm_90 GPU ----------------------------------------------------------------------------

SIZES = [0, 37, 0, 1, 130, 5, 0]  # empty groups first, in the middle and last, one row, odd sizes
COUNTS = [0, 1, 37, 64, 5]


def gpu_rand(*shape, dtype=BF16):
    return torch.randn(*shape, device="cuda", dtype=F32).to(dtype)


def nan_pair(*shape):
    """An e4m3 output of `shape` and its scales, every byte NaN, to see what a call leaves alone."""
    q = torch.full(shape, 0xFF, device="cuda", dtype=torch.uint8).view(E4M3)
    return q, torch.full((*shape[:-1], -(-shape[-1] // 128)), float("nan"), device="cuda")


def product_bound(a, b, accumulation):
    """The accumulation's bound on a @ b in double: accumulation * (|a| @ |b|)."""
    return (a.double().abs() @ b.double().abs()) * accumulation


def expect_quantized(q, scales, ref, bound):
    """q (e4m3) and its scales against ref, the float64 value q stands for, the kernel's f32 value
    within `bound` of it (both of q's shape): each 1x128 block's scale amax / 448 of ref's block
    (1 for a block of zeros) to within the block's largest bound / 448, and q * scale ref to
    within e4m3's rounding (2^-4 relative, 2^-10 of the scale absolute) of the f32 value; 2^-20
    relative beside, for f32 arithmetic (the scale's division, an epilogue's functions)."""
    n = ref.size(-1)
    blocks = -(-n // 128)
    assert q.dtype == E4M3 and q.shape == ref.shape
    assert scales.dtype == F32 and scales.shape == (*ref.shape[:-1], blocks)

    def block_max(t):
        return torch.nn.functional.pad(t, (0, 128 * blocks - n)).unflatten(-1, (blocks, 128)).amax(-1)

    amax, slack = block_max(ref.abs()), block_max(bound)
    want = torch.where(amax == 0, 1.0, amax / 448)
    got = scales.double()
    assert torch.isfinite(got).all(), "non-finite scales"
    off = (got - want).abs()
    assert (off <= slack / 448 + want * 2.0 ** -20).all(), f"scale off by {off.max().item()}"
    s = got.repeat_interleave(128, -1)[..., :n]
    value = q.double() * s
    assert torch.isfinite(value).all(), "non-finite outputs"
    error = (value - ref).abs()
    limit = 2.0 ** -4 * (ref.abs() + bound) + 2.0 ** -10 * s + bound + ref.abs() * 2.0 ** -20
    assert (error <= limit).all(), f"max error {error.max().item()}, {(error / limit).max().item()} of the bound"


def untouched(q, scales):
    """Whether every byte of q and its scales is still nan_pair's."""
    return bool((q.view(torch.uint8) == 0xFF).all()) and bool(scales.isnan().all())


def same_bytes(got, want):
    """got and want alike to the bit, compared as bytes (e4m3 included), whatever their strides (1x128
    scales are rows-contiguous)."""
    return got.dtype == want.dtype and torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))


@sm90
def test_mm_with_odd_n_matches_double_and_feeds_scaled_mm():
    m, k, n, n2 = 333, 256, 300, 200
    x, w = gpu_rand(m, k), gpu_rand(n, k)
    q, s = gemmkit.mm(x, w.t(), out_dtype=E4M3)
    ref = x.double() @ w.double().t()
    expect_quantized(q, s, ref, product_bound(x, w.t(), k * 2.0 ** -24))
    out = nan_pair(m, n)
    assert gemmkit.mm(x, w.t(), out=out) is out
    assert same_bytes(out[0], q) and same_bytes(out[1], s)
    # The pair is the next FP8 product's a and block-mode scale_a, as they are.
    w2 = gpu_rand(n2, n)
    qw2, sw2 = gemmkit.quantize(w2, E4M3, "block", block=(128, 128))
    y = gemmkit.scaled_mm(q, qw2.t(), s, sw2.t(), mode="block", out_dtype=F32)
    a, b = dequantized(q, s, "block"), dequantized(qw2, sw2, "block", (128, 128)).t()
    expect_close(y, a, b, accumulation=FP8_SUMS)


@sm90
def test_mm_through_an_epilogue_with_alpha_beta_and_c():
    m, k, n = 333, 256, 300
    x, w, c, bias = gpu_rand(m, k), gpu_rand(k, n), gpu_rand(m, n, dtype=F32), gpu_rand(n)
    q, s = gemmkit.mm(x, w, out_dtype=E4M3, alpha=0.5, beta=2.0, c=c, epilogue="silu(acc + bias[n])", bias=bias)
    acc = 0.5 * (x.double() @ w.double()) + 2.0 * c.double() + bias.double()
    bound = 0.5 * product_bound(x, w, k * 2.0 ** -24) * 1.1 + acc.abs() * 1e-6 + 1e-6  # silu's slope, f32 steps
    expect_quantized(q, s, torch.nn.functional.silu(acc), bound)


@sm90
def test_bmm_batched_and_with_a_shared_b():
    k = 192
    a, b3, b = gpu_rand(3, 200, k), gpu_rand(3, k, 300), gpu_rand(k, 300)
    for bb in (b3, b):
        q, s = gemmkit.bmm(a, bb, out_dtype=E4M3)
        assert s.shape == (3, 200, 3)
        expect_quantized(q, s, a.double() @ bb.double(), product_bound(a, bb, k * 2.0 ** -24))


@sm90
def test_scaled_mm_of_fp8_inputs_to_an_fp8_output():
    m, k, n = 256, 640, 300
    qx, sx = gemmkit.quantize(gpu_rand(m, k), E4M3, "block")
    qw, sw = gemmkit.quantize(gpu_rand(n, k), E4M3, "block", block=(128, 128))
    q, s = gemmkit.scaled_mm(qx, qw.t(), sx, sw.t(), mode="block", out_dtype=E4M3)
    a, b = dequantized(qx, sx, "block"), dequantized(qw, sw, "block", (128, 128)).t()
    expect_quantized(q, s, a @ b, product_bound(a, b, FP8_SUMS))


@sm90
@pytest.mark.parametrize("form", ["pair", "concat", "interleaved"])
def test_swiglu_mm_with_leading_dimensions(form):
    i, k = 300, 256
    x = gpu_rand(2, 70, k)
    w, w_up = (gpu_rand(i, k), gpu_rand(i, k)) if form == "pair" else (gpu_rand(2 * i, k), None)
    interleaved = form == "interleaved"
    q, s = gemmkit.swiglu_mm(x, w, w_up, interleaved=interleaved, out_dtype=E4M3)
    assert q.shape == (2, 70, i) and s.shape == (2, 70, 3)
    gate, up = gate_and_up(w, w_up, interleaved)
    ref, bound = swiglu_reference(x.view(140, k), gate, up)
    expect_quantized(q.view(140, i), s.view(140, 3), ref, bound)


@sm90
def test_grouped_mm_contiguous_groups_with_empty_and_odd_ones():
    k, n = 256, 300
    m = sum(SIZES) + 11  # 11 rows past the last end
    x, experts = gpu_rand(m, k), gpu_rand(len(SIZES), n, k)  # [G, N, K], passed as [G, K, N]
    offs = offs_of(SIZES)
    out = nan_pair(m, n)
    assert gemmkit.grouped_mm(x, experts.transpose(-2, -1), offs, out=out) is out
    q, s = gemmkit.grouped_mm(x, experts.transpose(-2, -1), offs, out_dtype=E4M3)
    for g, start, end in spans(SIZES):
        w = experts[g].t()
        for pair in (out, (q, s)):
            expect_quantized(pair[0][start:end], pair[1][start:end], x[start:end].double() @ w.double(),
                             product_bound(x[start:end], w, k * 2.0 ** -24))
    assert untouched(out[0][sum(SIZES):], out[1][sum(SIZES):]), "rows past the last end written"


@sm90
def test_grouped_mm_masked_groups():
    groups, max_m, k, n = len(COUNTS), 64, 192, 300
    x, b = gpu_rand(groups, max_m, k), gpu_rand(groups, k, n)
    out = nan_pair(groups, max_m, n)
    assert gemmkit.grouped_mm(x, b, counts=torch.tensor(COUNTS, device="cuda"), out=out) is out
    for g, count in enumerate(COUNTS):
        expect_quantized(out[0][g, :count], out[1][g, :count], x[g, :count].double() @ b[g].double(),
                         product_bound(x[g, :count], b[g], k * 2.0 ** -24))
        assert untouched(out[0][g, count:], out[1][g, count:]), f"group {g}: rows past its count written"


@sm90
def test_grouped_mm_weight_gradient():
    p, q_cols = 96, 300
    m = sum(SIZES)
    x, y = gpu_rand(m, p), gpu_rand(m, q_cols)
    q, s = gemmkit.grouped_mm(x.t(), y, offs_of(SIZES), out_dtype=E4M3)
    assert q.shape == (len(SIZES), p, q_cols) and s.shape == (len(SIZES), p, 3)
    for g, start, end in spans(SIZES):
        xg, yg = x[start:end].t(), y[start:end]
        expect_quantized(q[g], s[g], xg.double() @ yg.double(), product_bound(xg, yg, max(end - start, 1) * 2.0 ** -24))
        if start == end:  # an empty group's blocks: zeros, scale 1
            assert (s[g] == 1).all() and (q[g].double() == 0).all()


def moe_up_and_down(layout):
    """The MoE block's experts with FP8 between them: the up-projection grouped_swiglu_mm to an e4m3
    output, its pair scaled_grouped_mm's a and block-mode scale_a for the down-projection's
    weights quantised in 128x128 blocks. Returns what each step took and gave, and the groups'
    rows ((group, first, end) each; masked rows indexed [g, first:end])."""
    groups, h, i = 5, 256, 320
    if layout == "contiguous":
        sizes = [0, 37, 1, 130, 5]
        x, sizes_t, rows = gpu_rand(sum(sizes) + 7, h), offs_of(sizes), list(spans(sizes))
        kwargs = {"offs": sizes_t}
    else:
        x, sizes_t = gpu_rand(groups, 64, h), torch.tensor(COUNTS, device="cuda")
        rows, kwargs = [(g, 0, c) for g, c in enumerate(COUNTS)], {"counts": sizes_t}
    w13, w2 = gpu_rand(groups, 2 * i, h), gpu_rand(groups, h, i)
    q, s = gemmkit.grouped_swiglu_mm(x, w13, out_dtype=E4M3, **kwargs)
    qw2, sw2 = gemmkit.quantize(w2, E4M3, "block", block=(128, 128))
    y = gemmkit.scaled_grouped_mm(q, qw2.transpose(-2, -1), s, sw2.transpose(-2, -1), mode="block", out_dtype=F32,
                                  **kwargs)
    return x, w13, (q, s), (qw2, sw2), y, rows


@sm90
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_grouped_swiglu_mm_feeds_the_down_projection(layout):
    x, w13, (q, s), (qw2, sw2), y, rows = moe_up_and_down(layout)
    i = w13.size(1) // 2
    assert q.shape == (*x.shape[:-1], i) and s.shape == (*x.shape[:-1], 3)
    for g, start, end in rows:
        at = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        ref, bound = swiglu_reference(x[at], w13[g, :i], w13[g, i:])
        expect_quantized(q[at], s[at], ref, bound)
        a = dequantized(q[at], s[at], "block")
        b = dequantized(qw2[g], sw2[g], "block", (128, 128)).t()
        expect_close(y[at], a, b, accumulation=FP8_SUMS)


@sm90
def test_torch_compile_with_fullgraph_gives_eager_s_bytes():
    def dense(x, w1, qw2, sw2):
        q, s = gemmkit.mm(x, w1.t(), out_dtype=E4M3)
        return q, s, gemmkit.scaled_mm(q, qw2.t(), s, sw2.t(), mode="block")

    qw2, sw2 = gemmkit.quantize(gpu_rand(200, 300), E4M3, "block", block=(128, 128))
    args = (gpu_rand(333, 256), gpu_rand(300, 256), qw2, sw2)
    for got, want in zip(torch.compile(dense, fullgraph=True)(*args), dense(*args)):
        assert same_bytes(got, want)

    def moe(x, w13, offs, qw2, sw2):
        q, s = gemmkit.grouped_swiglu_mm(x, w13, offs, out_dtype=E4M3)
        return q, s, gemmkit.scaled_grouped_mm(q, qw2.transpose(-2, -1), s, sw2.transpose(-2, -1), offs, mode="block")

    qw2, sw2 = gemmkit.quantize(gpu_rand(4, 256, 320), E4M3, "block", block=(128, 128))
    args = (gpu_rand(200, 256), gpu_rand(4, 640, 256), offs_of([60, 0, 1, 139]), qw2, sw2)  # every row owned
    for got, want in zip(torch.compile(moe, fullgraph=True)(*args), moe(*args)):
        assert same_bytes(got, want)
    torch._dynamo.reset()


@sm90
def test_opcheck():
    a, b = gpu_rand(64, 128), gpu_rand(128, 300)
    torch.library.opcheck(ops.gemm_quantized.default, (a, b, None, None, "none", "none", 1.0, 0.0, None, "", [], []))
    torch.library.opcheck(ops.gemm_quantized.default, (a, b, None, None, "none", "none", 1.0, 0.0, None,
                                                       "relu(acc + bias[n])", ["bias"], [gpu_rand(300)]))
    offs = offs_of([5, 0, 59])  # every row owned, so that outputs are defined throughout
    torch.library.opcheck(ops.grouped_mm_quantized.default, (a, gpu_rand(3, 128, 300), offs, "contiguous", "", [], [],
                                                             0, None, None, "none", "none"))
    torch.library.opcheck(ops.grouped_wgrad_quantized.default, (a, gpu_rand(64, 300), offs, "", [], [], 0, None, None,
                                                                "none", "none"))
    torch.library.opcheck(ops.swiglu_mm_quantized.default, (a, gpu_rand(600, 128), None, False, SWIGLU, [], []))
    torch.library.opcheck(ops.grouped_swiglu_mm_quantized.default,
                          (a, gpu_rand(3, 600, 128), None, offs, "contiguous", True, SWIGLU, [], [], 0))
    out, scales = nan_pair(64, 300)  # an e4m3 input: no arithmetic on it (test_opcheck_with_the_stand_ins)
    torch.library.opcheck(ops.gemm_out.default, (a, b, out, None, None, "none", "none", 1.0, 0.0, None, scales),
                          test_utils="test_faketensor")
