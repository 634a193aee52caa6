"""gemmkit's grouped products (grouped_mm, scaled_grouped_mm) without a GPU: output shapes and
dtypes on fake CUDA tensors, tracing into one graph, the argument errors (also while tracing),
the copies made for operands TMA cannot read, the weight gradient through a fused epilogue (its
tensors' shapes, its errors, no autograd), and the autograd formulas and opcheck, run with
double-precision CPU stand-ins for the kernels. Needs torch, not a GPU; skips, saying so,
without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fake_cuda import cuda  # noqa: E402

import gemmkit  # noqa: E402
from cpu_stand_ins import group_rows  # noqa: E402

BF16, F32, F64, E4M3, E5M2 = torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2
I32, I64 = torch.int32, torch.int64


def test_fake_shapes_and_dtypes(fake):
    x, w, offs = cuda(100, 64), cuda(4, 32, 64), cuda(4, dtype=I32)
    q, qw = cuda(100, 64, dtype=E4M3), cuda(4, 32, 64, dtype=E4M3)
    cases = [
        (gemmkit.grouped_mm(x, w.transpose(-2, -1), offs), (100, 32), BF16),
        (gemmkit.grouped_mm(x, cuda(4, 64, 32), offs.long(), out_dtype=F32), (100, 32), F32),
        (gemmkit.grouped_mm(x.t(), cuda(100, 40), offs), (4, 64, 40), BF16),  # the weight gradient
        (gemmkit.grouped_mm(cuda(4, 20, 64), w.transpose(-2, -1), counts=offs), (4, 20, 32), BF16),
        (gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), cuda(100, dtype=F32), cuda(4, 32, dtype=F32), offs),
         (100, 32), BF16),
        (gemmkit.scaled_grouped_mm(cuda(4, 20, 64, dtype=E4M3), qw.transpose(-2, -1), cuda(4, 20, dtype=F32),
                                   cuda(4, dtype=F32), counts=offs, mode=("rowwise", "tensor"), out_dtype=F32),
         (4, 20, 32), F32),
    ]
    for d, shape, dtype in cases:
        assert isinstance(d, FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"
    out = cuda(100, 32, dtype=F32)
    assert gemmkit.grouped_mm(x, w.transpose(-2, -1), offs, out=out) is out
    out = cuda(4, 64, 40)
    assert gemmkit.grouped_mm(x.t(), cuda(100, 40), offs, out=out) is out


def test_a_traced_function_is_one_graph_of_gemmkit_operators(fake):
    def moe(x, w, offs):
        h = gemmkit.grouped_mm(x, w.transpose(-2, -1), offs)
        q, s = gemmkit.quantize(x, mode="rowwise")
        qw, sw = gemmkit.quantize(w, mode="rowwise")
        y = gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), s.squeeze(-1), sw.squeeze(-1), offs)
        return gemmkit.grouped_mm(h.t(), x, offs), y

    x, w, offs = cuda(100, 64), cuda(4, 32, 64), cuda(4, dtype=I64)
    graph, _ = torch._dynamo.export(moe)(x, w, offs)  # raises where dynamo would break the graph
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.gemmkit.grouped_mm) == 2 and torch.ops.gemmkit.grouped_wgrad in targets
    assert [tuple(t.shape) for t in graph(x, w, offs)] == [(4, 32, 64), (100, 32)]


def test_three_d_by_three_d_without_sizes_is_a_batched_product(fake):
    a, b = cuda(4, 10, 64), cuda(4, 64, 32)
    d = gemmkit.grouped_mm(a, b)
    assert tuple(d.shape) == (4, 10, 32) and d.dtype == BF16

    def traced(a, b):
        return gemmkit.grouped_mm(a, b, out_dtype=F32)

    graph, _ = torch._dynamo.export(traced)(a, b)
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert torch.ops.gemmkit.gemm in targets and torch.ops.gemmkit.grouped_mm not in targets


def test_three_d_by_two_d_groups_columns_through_the_transposed_case(fake):
    a, b, offs = cuda(4, 10, 64), cuda(64, 96), cuda(4, dtype=I32)
    d = gemmkit.grouped_mm(a, b, offs)
    assert tuple(d.shape) == (10, 96) and d.dtype == BF16 and d.stride() == (1, 10)  # the transposed result

    def traced(a, b, offs):
        return gemmkit.grouped_mm(a, b, offs)

    graph, _ = torch._dynamo.export(traced)(a, b, offs)
    assert torch.ops.gemmkit.grouped_mm in [node.target for node in graph.graph.nodes if node.op == "call_function"]
    out = cuda(10, 96)
    assert gemmkit.grouped_mm(a, b, offs, out=out) is out
    with pytest.raises(ValueError, match="^epilogue: given with a 3-D a and a 2-D b"):
        gemmkit.grouped_mm(a, b, offs, epilogue="acc")


def test_scaled_grouped_mm_takes_an_epilogue_with_its_scales(fake):
    """scaled_grouped_mm's forward through a fused epilogue: one grouped_mm_epilogue operator with
    the scales as gemm.h's views (_grouped_scales) and the modes, the tensors as grouped_mm's
    (per-expert [G, N], per-token [M_total] or masked [G, max_m]); output shapes and dtypes."""
    q, qw, offs = cuda(100, 64, dtype=E4M3), cuda(4, 32, 64, dtype=E4M3), cuda(4, dtype=I32)
    sx, sw, bias, route = cuda(100, dtype=F32), cuda(4, 32, dtype=F32), cuda(4, 32), cuda(100, dtype=F32)
    text = "(acc + bias[n]) * route[m]"

    def down(q, qw, sx, sw, offs, bias, route):
        return gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), sx, sw, offs, out_dtype=F32, epilogue=text,
                                         bias=bias, route=route)

    args = (q, qw, sx, sw, offs, bias, route)
    d = down(*args)
    assert isinstance(d, FakeTensor) and tuple(d.shape) == (100, 32) and d.dtype == F32
    graph, _ = torch._dynamo.export(down)(*args)
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    fused = [node for node in calls if node.target == torch.ops.gemmkit.grouped_mm_epilogue]
    assert len(fused) == 1 and torch.ops.gemmkit.grouped_mm not in [node.target for node in calls]
    a, b, sizes, out, layout, epilogue, names, inputs, outputs, max_sms, scale_a, scale_b, mode_a, mode_b = \
        fused[0].args
    assert (layout, epilogue, names, outputs, max_sms) == ("contiguous", text, ["bias", "route"], [], 0)
    assert (mode_a, mode_b) == ("rowwise", "rowwise")
    assert [tuple(t.meta["example_value"].shape) for t in inputs] == [(4, 1, 32), (100,)]  # a bias an expert
    assert tuple(scale_a.meta["example_value"].shape) == (100,)  # read as a column of A's
    assert tuple(scale_b.meta["example_value"].shape) == (4, 1, 32)  # [G, N] as [G, 1, N]
    assert tuple(out.meta["example_value"].shape) == (100, 32) and out.meta["example_value"].dtype == F32
    # masked groups with a weight a token, tensor-wise scales one a group, block scales
    masked = gemmkit.scaled_grouped_mm(cuda(4, 20, 64, dtype=E4M3), qw.transpose(-2, -1), cuda(1, dtype=F32),
                                       cuda(4, dtype=F32), counts=offs, mode="tensor", epilogue="silu(acc) * w[m]",
                                       w=cuda(4, 20, dtype=F32))
    assert tuple(masked.shape) == (4, 20, 32) and masked.dtype == BF16
    out = cuda(100, 32)
    blocks = gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), cuda(100, 1, dtype=F32), cuda(4, 1, 1, dtype=F32),
                                       offs, mode="block", out=out, epilogue="gelu(acc)")
    assert blocks is out
    # no autograd through it, and tensors go with an epilogue
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue yet"):
        down(q, qw, sx, sw, offs, bias.requires_grad_(), route)
    with pytest.raises(TypeError, match="^scaled_grouped_mm\\(\\) got unexpected keyword arguments route"):
        gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), sx, sw, offs, route=route)
    with pytest.raises(ValueError, match="^route: not given; the epilogue reads route\\[m\\]"):
        gemmkit.scaled_grouped_mm(q, qw.transpose(-2, -1), sx, sw, offs, epilogue="acc * route[m]")


def test_grouped_mm_of_whole_batches_differentiates_its_epilogue(fake):
    """grouped_mm's 3-D x 3-D case runs as bmm: through an epilogue too, recorded for autograd by
    mm_epilogue's formula (bmm's); the grouped forward's epilogue refuses inputs that require grad."""
    a, b, offs = cuda(4, 10, 64).requires_grad_(), cuda(4, 64, 32), cuda(4, dtype=I32)
    d = gemmkit.grouped_mm(a, b, epilogue="relu(acc + bias[n])", bias=cuda(4, 32))
    assert tuple(d.shape) == (4, 10, 32) and "gemmkit_mm_epilogue" in type(d.grad_fn).__name__
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue yet"):
        gemmkit.grouped_mm(cuda(100, 64).requires_grad_(), b, offs, epilogue="relu(acc)")


def test_errors_name_the_argument_while_tracing(fake):
    x, b, offs, q = cuda(100, 64), cuda(4, 64, 32), cuda(4, dtype=I32), cuda(100, 64, dtype=E4M3)
    one = cuda(1, dtype=F32)
    for match, error, call in [
        ("^offs: None; expected the groups' cumulative row ends", ValueError, lambda: gemmkit.grouped_mm(x, b)),
        ("^counts: given with a 2-D a", ValueError, lambda: gemmkit.grouped_mm(x, b, offs, counts=offs)),
        ("^offs: given with a 3-D a", ValueError, lambda: gemmkit.grouped_mm(cuda(4, 10, 64), b, offs)),
        ("^offs: None; expected the groups' cumulative column ends in b", ValueError,
         lambda: gemmkit.grouped_mm(cuda(4, 10, 64), cuda(64, 32))),
        ("^max_sms: 8 for 3-D a and b without offs or counts", ValueError,
         lambda: gemmkit.grouped_mm(cuda(4, 10, 64), b, max_sms=8)),
        (r"^offs: 3 values; expected one a group, G = 4 \(b's first dimension\)$", ValueError,
         lambda: gemmkit.grouped_mm(x, b, offs[:3])),
        ("^offs: dtype torch.float32 is not supported; expected int32 or int64$", TypeError,
         lambda: gemmkit.grouped_mm(x, b, offs.float())),
        (r"^offs: 2 dimensions; expected 1 \(one value a group\)$", ValueError,
         lambda: gemmkit.grouped_mm(x, b, offs.view(2, 2))),
        (r"^b: shape \[4, 63, 32\] has K = 63 but a \[100, 64\] has K = 64", ValueError,
         lambda: gemmkit.grouped_mm(x, cuda(4, 63, 32), offs)),
        (r"^b: shape \[4, 64, 32\] has G = 4 but a \[3, 10, 64\] has G = 3$", ValueError,
         lambda: gemmkit.grouped_mm(cuda(3, 10, 64), b, counts=offs)),
        (r"^b: shape \[99, 40\] has 99 rows but a \[48, 100\] has M_total = 100 columns", ValueError,
         lambda: gemmkit.grouped_mm(cuda(48, 100), cuda(99, 40), offs)),
        ("^a, b: dtypes torch.bfloat16 and torch.float16; expected both bfloat16 or both float16", TypeError,
         lambda: gemmkit.grouped_mm(x, b.half(), offs)),
        ("^out_dtype: torch.float64 is not supported", TypeError,
         lambda: gemmkit.grouped_mm(x, b, offs, out_dtype=torch.float64)),
        ("^out: dtype torch.bfloat16 differs from out_dtype torch.float32$", ValueError,
         lambda: gemmkit.grouped_mm(x, b, offs, out=cuda(100, 32), out_dtype=F32)),
        ("^out: 3 dimensions; expected 2$", ValueError, lambda: gemmkit.grouped_mm(x, b, offs, out=cuda(1, 100, 32))),
        ("^a, b: dtypes torch.bfloat16 and torch.bfloat16; expected float8_e4m3fn or float8_e5m2", TypeError,
         lambda: gemmkit.scaled_grouped_mm(x, b, one, one, offs)),
        ("^mode: 'mx'; expected 'tensor', 'rowwise' or 'block'", ValueError,
         lambda: gemmkit.scaled_grouped_mm(q, b.to(E4M3), one, one, offs, mode="mx")),
        ("^b: 2 dimensions; expected 3$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(cuda(4, 10, 64, dtype=E4M3), cuda(64, 32, dtype=E4M3), one, one,
                                           counts=offs)),
        ("^offs: expected a torch.Tensor or an array with __dlpack__, got list$", TypeError,
         lambda: gemmkit.grouped_mm(x, b, [4, 8])),
        ("^offs: on cpu; expected a CUDA tensor$", ValueError,
         lambda: gemmkit.grouped_mm(x, b, torch.zeros(4, dtype=I32, device="cpu"))),
        ("^scale_b: expected a torch.Tensor", TypeError, lambda: gemmkit.scaled_grouped_mm(q, b, one, 1.0, offs)),
    ]:
        with pytest.raises(error, match=match):
            call()


def test_errors_without_fake_tensors():
    a, b, offs = torch.ones(8, 16, dtype=BF16), torch.ones(2, 16, 8, dtype=BF16), torch.tensor([4, 8])
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor$"):
        gemmkit.grouped_mm(a, b, offs)
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor$"):
        gemmkit.scaled_grouped_mm(a.to(E4M3), b.to(E4M3), torch.ones(1), torch.ones(1), offs)


def test_operands_tma_cannot_read_are_copied_with_padded_rows():
    from gemmkit._torch import tma_readable

    a = torch.randn(40, 64).to(BF16)  # 16-bit: 8 elements to 16 bytes
    kept = [(a, (-1, -2)), (a.t(), (-1, -2)), (a[:, 8:40], (-1,)), (a[:, :60], (-1,)), (a.view(5, 8, 64), (-1,)),
            (a.view(5, 8, 64).transpose(-2, -1), (-2,)), (a.expand(3, 40, 64), (-1,))]
    for t, inner_dims in kept:
        assert tma_readable(t, inner_dims) is t
    copied = [
        (a.t(), (-1,), (40, 1)),  # K-major wanted
        (a[:, 1:33], (-1,), (32, 1)),  # data 2 bytes past a 16-byte boundary
        (a[0].expand(40, 64), (-1, -2), (64, 1)),  # rows overlapping (stride 0)
        (torch.randn(3, 20, 36).to(BF16), (-1,), (800, 40, 1)),  # rows of 36 padded to 40
        (torch.randn(3, 36, 20).to(BF16).transpose(-2, -1), (-2,), (864, 1, 24)),  # columns of 20 padded to 24
        (torch.randn(2, 64, 32).to(E4M3), (-2,), (2048, 1, 64)),  # FP8 B made K-major
    ]
    for t, inner_dims, strides in copied:
        copy = tma_readable(t, inner_dims)
        assert copy.stride() == strides and copy.data_ptr() % 16 == 0
        bits = (lambda x: x.view(torch.uint8)) if t.dtype == E4M3 else (lambda x: x)  # no FP8 arithmetic on CPU
        assert torch.equal(bits(copy), bits(t))


# --- the FP8 weight gradient: scaled_grouped_mm with 2-D a [P, M_total] and b [M_total, Q] --------

class OpCalls(TorchDispatchMode):
    """Records the gemmkit operators called under it, with their arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "gemmkit":
            self.calls.append((func, args))
        return func(*args, **(kwargs or {}))


def test_fp8_weight_gradient_fake_shapes_and_dtypes(fake):
    p, m, q, offs = 40, 100, 24, cuda(4, dtype=I32)
    a, b = cuda(p, m, dtype=E4M3), cuda(m, q, dtype=E5M2)  # e4m3 and e5m2 mixed
    rowwise = (cuda(4 * p, dtype=F32), cuda(4 * q, dtype=F32))
    per_group = (cuda(4, dtype=F32), cuda(4, dtype=F32))
    for d, shape, dtype in [
            (gemmkit.scaled_grouped_mm(a, b, *rowwise, offs), (4, p, q), BF16),
            (gemmkit.scaled_grouped_mm(a, b, *per_group, offs.long(), mode="tensor", out_dtype=F32), (4, p, q), F32),
            (gemmkit.scaled_grouped_mm(b.t(), a.t(), rowwise[1], rowwise[0], offs), (4, q, p), BF16)]:
        assert isinstance(d, FakeTensor) and d.device.type == "cuda"
        assert tuple(d.shape) == shape and d.dtype == dtype
    out = cuda(4, p, q, dtype=F32)
    assert gemmkit.scaled_grouped_mm(a, b, *rowwise, offs, out=out) is out


@pytest.mark.parametrize("mode,scale_a,scale_b,want_a,want_b", [
    ("rowwise", (3 * 40,), (3 * 24,), (3, 40, 1), (3, 1, 24)),  # torch's, group after group
    ("rowwise", (3, 40), (3, 24), (3, 40, 1), (3, 1, 24)),
    ("rowwise", (40,), (24,), (40,), (24,)),  # shared by every group: a column and a row in C++
    ("tensor", (), (1,), (), (1,)),  # a single value each
    ("tensor", (3,), (3,), (3, 1, 1), (3, 1, 1)),  # one a group
    (("tensor", "rowwise"), (3,), (3, 24), (3, 1, 1), (3, 1, 24)),
])
def test_fp8_weight_gradient_passes_scales_as_gemm_h_views(fake, mode, scale_a, scale_b, want_a, want_b):
    a, b, offs = cuda(40, 100, dtype=E4M3), cuda(100, 24, dtype=E4M3), cuda(3, dtype=I64)
    scales = (torch.empty(scale_a, device="cuda"), torch.empty(scale_b, device="cuda"))
    with OpCalls() as ops:
        gemmkit.scaled_grouped_mm(a, b, *scales, offs, mode=mode)
        gemmkit.scaled_grouped_mm(a, b, *scales, offs, mode=mode, out=cuda(3, 40, 24))
    modes = (mode, mode) if isinstance(mode, str) else mode
    (op, args), (op_out, args_out) = ops.calls
    assert op is torch.ops.gemmkit.grouped_wgrad.default and op_out is torch.ops.gemmkit.grouped_wgrad_out.default
    x, y, _, sa, sb, mode_a, mode_b = args[:7]
    assert tuple(x.shape) == (100, 40) and x.stride() == (1, 100) and y is b  # a.t(), not copied
    assert (tuple(sa.shape), tuple(sb.shape), (mode_a, mode_b)) == (want_a, want_b, modes)
    assert [tuple(t.shape) for t in args_out[4:6]] == [want_a, want_b] and tuple(args_out[6:8]) == modes


def test_fp8_weight_gradient_traces_into_one_graph(fake):
    def wgrad(a, b, scale_a, scale_b, offs):
        return gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs)

    args = (cuda(40, 100, dtype=E4M3), cuda(100, 24, dtype=E4M3), cuda(120, dtype=F32), cuda(72, dtype=F32),
            cuda(3, dtype=I32))
    graph, _ = torch._dynamo.export(wgrad)(*args)  # raises where dynamo would break the graph
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.gemmkit.grouped_wgrad) == 1
    assert tuple(graph(*args).shape) == (3, 40, 24)


def test_fp8_weight_gradient_errors_name_the_argument(fake):
    a, b, offs, one = cuda(40, 100, dtype=E4M3), cuda(100, 24, dtype=E4M3), cuda(3, dtype=I32), cuda(1, dtype=F32)
    for match, error, call in [
        (r"^mode: 'block'; expected 'tensor' or 'rowwise' for the weight gradient \(2-D a and b\)$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, one, one, offs, mode="block")),
        (r"^mode: 'mx'; expected 'tensor' or 'rowwise' for the weight gradient", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, one, one, offs, mode=("rowwise", "mx"))),
        (r"^b: shape \[99, 24\] has 99 rows but a \[40, 100\] has M_total = 100 columns", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, cuda(99, 24, dtype=E4M3), one, one, offs)),
        ("^offs: None; expected the groups' cumulative row ends", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, one, one)),
        ("^counts: given with a 2-D a", ValueError, lambda: gemmkit.scaled_grouped_mm(a, b, one, one, counts=offs)),
        ("^a, b: dtypes torch.float8_e4m3fn and torch.bfloat16; expected float8_e4m3fn or float8_e5m2", TypeError,
         lambda: gemmkit.scaled_grouped_mm(a, cuda(100, 24), one, one, offs)),
        ("^out: 2 dimensions; expected 3$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, one, one, offs, out=cuda(40, 24))),
        ("^out: dtype torch.bfloat16 differs from out_dtype torch.float32$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, one, one, offs, out=cuda(3, 40, 24), out_dtype=F32)),
        ("^scale_a: 4 dimensions; expected 0 or 1 or 2 or 3$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(a, b, cuda(3, 40, 1, 1, dtype=F32), one, offs)),
    ]:
        with pytest.raises(error, match=match):
            call()


# --- autograd, with CPU stand-ins for the kernels (cpu_stand_ins.py) ----------------------------
# The operators' backward formulas, checked against torch's autograd through the same products
# written group by group.

def expect_grads(out, inputs, reference):
    """The gradients of sum(out * up) against those of `reference`, in double."""
    up = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, inputs, up)
    copies = [t.detach().clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(reference(*copies), copies, up)
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.allclose(g, w, rtol=1e-12, atol=1e-12), (g - w).abs().max()


def rand64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("dtype", [I32, I64])
def test_contiguous_gradients_and_zero_rows_past_the_last_end(cpu_kernels, dtype):
    a, w = rand64(20, 6), rand64(4, 5, 6)  # rows 12 to 19 are no group's
    ends = [0, 7, 7, 12]

    def reference(a, w):
        rows = [a[start:end] @ w[g].t() for g, start, end in group_rows(torch.tensor(ends), "contiguous", 20)]
        return torch.cat(rows + [a.new_zeros(8, 5)])

    out = torch.ops.gemmkit.grouped_mm(a, w.transpose(-2, -1), torch.tensor(ends, dtype=dtype), "contiguous", None,
                                       None, "none", "none", F64, 0, False)
    expect_grads(out, (a, w), reference)


def test_masked_gradients_ignore_the_rows_past_each_count(cpu_kernels):
    a, b = torch.randn(3, 5, 6, dtype=torch.float64), rand64(3, 6, 4)
    counts = [0, 5, 2]
    for g, count in enumerate(counts):
        a[g, count:] = float("nan")  # rows no group owns may hold anything
    a.requires_grad_()

    def reference(a, b):
        return torch.stack([torch.cat([a[g, :c] @ b[g], a.new_zeros(5 - c, 4)]) for g, c in enumerate(counts)])

    out = torch.ops.gemmkit.grouped_mm(a, b, torch.tensor(counts), "masked", None, None, "none", "none", F64, 0, False)
    up = torch.randn(out.shape, dtype=torch.float64)
    grad_a, grad_b = torch.autograd.grad(out, (a, b), up)
    copies = [t.detach().clone().requires_grad_() for t in (a, b)]
    want_a, want_b = torch.autograd.grad(reference(*copies), copies, up)
    assert torch.equal(grad_a == 0, want_a == 0) and torch.allclose(grad_a, want_a.nan_to_num(), rtol=1e-12)
    assert torch.allclose(grad_b, want_b, rtol=1e-12, atol=1e-12)


def test_weight_gradient_is_differentiable(cpu_kernels):
    x, y = rand64(20, 3), rand64(20, 4)
    ends = [5, 5, 16]  # rows 16 to 19 are no group's

    def reference(x, y):
        return torch.stack([x[s:e].t() @ y[s:e] for _, s, e in group_rows(torch.tensor(ends), "contiguous", 20)])

    out = torch.ops.gemmkit.grouped_wgrad(x, y, torch.tensor(ends), None, None, "none", "none", F64, 0)
    expect_grads(out, (x, y), reference)


def test_fp8_products_are_not_differentiable(cpu_kernels):
    a, b = torch.ones(8, 4, dtype=E4M3, requires_grad=True), torch.ones(2, 4, 3, dtype=E4M3)
    ends, one = torch.tensor([4, 8]), torch.ones(1)
    out = torch.ops.gemmkit.grouped_mm(a, b, ends, "contiguous", one, one, "tensor", "tensor", F32, 0, False)
    wgrad = torch.ops.gemmkit.grouped_wgrad(a, a.detach(), ends, one, one, "tensor", "tensor", F32, 0)
    for d in (out, wgrad):
        with pytest.raises(RuntimeError, match=r"^gemmkit: FP8 products \(scaled_grouped_mm\) are not differentiable$"):
            d.sum().backward()


@pytest.mark.parametrize("mode", ["rowwise", "tensor"])
def test_fp8_weight_gradient_scales_are_read_as_torch_lays_them_out(cpu_kernels, mode):
    # torch._scaled_grouped_mm's 2-D x 2-D scales (rowwise [G*P] and [G*Q], group after group;
    # here also [G] a group for tensor), through scaled_grouped_mm's views and the stand-in's
    # reading of gemm.h's, against each group's product of its scaled columns of a and rows of b.
    from gemmkit._torch import _wgrad_scales

    groups, p, q, ends = 3, 5, 4, torch.tensor([4, 4, 11])  # rows 11 and 12 are no group's
    a, b = torch.randn(p, 13, dtype=F64), torch.randn(13, q, dtype=F64)
    per_group = {"rowwise": (p, q), "tensor": (1, 1)}[mode]
    scale_a, scale_b = torch.rand(groups * per_group[0], dtype=F64), torch.rand(groups * per_group[1], dtype=F64)
    sa, sb = _wgrad_scales(a, b, ends, scale_a, scale_b, (mode, mode))
    assert sa.data_ptr() == scale_a.data_ptr() and sb.data_ptr() == scale_b.data_ptr()  # views, not copies
    out = torch.ops.gemmkit.grouped_wgrad(a.t(), b, ends, sa, sb, mode, mode, F64, 0)
    sa_rows, sb_cols = scale_a.view(groups, -1, 1), scale_b.view(groups, 1, -1)  # [G, P or 1, 1], [G, 1, Q or 1]
    for g, start, end in group_rows(ends, "contiguous", 13):
        want = (a[:, start:end] * sa_rows[g]) @ (b[start:end] * sb_cols[g])
        assert torch.allclose(out[g], want, rtol=1e-12, atol=1e-12)


def test_opcheck_with_the_stand_ins(cpu_kernels):
    # Schemas, fake implementations against real outputs, autograd registration and AOT dispatch;
    # every row owned by a group, so that outputs are defined throughout.
    ops = torch.ops.gemmkit
    a, b, x = rand64(12, 6), rand64(3, 6, 4), rand64(12, 5)
    ends, counts = torch.tensor([4, 4, 12], dtype=I32), torch.tensor([2, 0, 3])
    torch.library.opcheck(ops.grouped_mm.default, (a, b, ends, "contiguous", None, None, "none", "none", F64, 0, False))
    masked = (rand64(3, 4, 6), b, counts, "masked", None, None, "none", "none", F64, 0, True)
    torch.library.opcheck(ops.grouped_mm.default, masked)
    torch.library.opcheck(ops.grouped_wgrad.default, (a, x, ends, None, None, "none", "none", F64, 0))
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs.
    fp8 = (a.detach().to(E4M3), x.detach().to(E5M2), ends, torch.rand(3, 6, 1), torch.rand(3, 1, 5), "rowwise",
           "rowwise", None, 0)
    torch.library.opcheck(ops.grouped_wgrad.default, fp8, test_utils="test_faketensor")


# --- the weight gradient through a fused epilogue: grouped_mm and scaled_grouped_mm with 2-D a
# [P, M_total] and b [M_total, Q], D [G, P, Q] ---------------------------------------------------

WGRAD_TEXT = "h = acc * s[] + bias[n]; saved[m, n] = h; ra[m] = amax(h); silu(h) * scale[m]"


def test_weight_gradient_takes_an_epilogue(fake):
    """One grouped_wgrad_epilogue operator on x = a.t() (not copied), its tensors as D [G, P, Q]
    sees them: name[n] [G, Q] one a group (passed as [G, 1, Q]) or [Q], name[m] [G, P] or [P]
    (rows of P: the tokens are contracted), name[] [G] or 0-d, outputs [G, P, Q], reductions one a
    group or over every group; output shapes and dtypes; scaled_grouped_mm's FP8 weight gradient
    with its scales as gemm.h's views."""
    groups, p, m, q = 4, 40, 100, 24
    a, b, offs = cuda(p, m), cuda(m, q), cuda(groups, dtype=I32)

    def wgrad(a, b, offs, s, bias, saved, ra, scale):
        return gemmkit.grouped_mm(a, b, offs, out_dtype=F32, epilogue=WGRAD_TEXT, s=s, bias=bias, saved=saved, ra=ra,
                                  scale=scale)

    args = (a, b, offs, cuda(groups, dtype=F32), cuda(groups, q), cuda(groups, p, q, dtype=F32),
            cuda(groups, p, dtype=F32), cuda(p, dtype=F32))
    d = wgrad(*args)
    assert isinstance(d, FakeTensor) and tuple(d.shape) == (groups, p, q) and d.dtype == F32
    graph, _ = torch._dynamo.export(wgrad)(*args)
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    fused = [node for node in calls if node.target == torch.ops.gemmkit.grouped_wgrad_epilogue]
    assert len(fused) == 1 and torch.ops.gemmkit.grouped_wgrad not in [node.target for node in calls]
    x, y, sizes, out, text, names, inputs, outputs, max_sms, *scales_and_modes = fused[0].args
    assert (text, names, max_sms) == (WGRAD_TEXT, ["s", "bias", "scale", "saved", "ra"], 0)
    assert scales_and_modes == [None, None, "none", "none"]
    assert tuple(x.meta["example_value"].shape) == (m, p) and x.meta["example_value"].stride() == (1, m)  # a.t()
    assert [tuple(t.meta["example_value"].shape) for t in inputs] == [(groups,), (groups, 1, q), (p,)]
    assert [tuple(t.meta["example_value"].shape) for t in outputs] == [(groups, p, q), (groups, p, 1)]
    assert tuple(out.meta["example_value"].shape) == (groups, p, q)
    # tensors every group reads and reductions over every group; out= and the default dtype
    text = "db[n] = sum(acc); t[] = amax(acc); (acc + bias[n]) * scale[m] * s[] + r[m, n]"
    for db, t in [(cuda(q, dtype=F32), cuda((), dtype=F32)), (cuda(groups, q, dtype=F32), cuda(groups, dtype=F32))]:
        out = cuda(groups, p, q)
        assert gemmkit.grouped_mm(a, b, offs, out=out, epilogue=text, db=db, t=t, bias=cuda(q), scale=cuda(p, 1),
                                  s=cuda(()), r=cuda(p, q)) is out
    d = gemmkit.grouped_mm(a, b, offs.long(), epilogue="gelu(acc)")
    assert tuple(d.shape) == (groups, p, q) and d.dtype == BF16
    # FP8: rowwise scales as torch lays them out, passed as [G, P, 1] and [G, 1, Q]
    with OpCalls() as ops:
        d = gemmkit.scaled_grouped_mm(cuda(p, m, dtype=E4M3), cuda(m, q, dtype=E5M2), cuda(groups * p, dtype=F32),
                                      cuda(groups * q, dtype=F32), offs, epilogue="acc * s[]",
                                      s=cuda(groups, dtype=F32))
    assert tuple(d.shape) == (groups, p, q) and d.dtype == BF16
    [(op, args)] = ops.calls
    assert op is torch.ops.gemmkit.grouped_wgrad_epilogue.default and args[4:6] == ("acc * s[]", ["s"])
    assert [tuple(t.shape) for t in args[9:11]] == [(groups, p, 1), (groups, 1, q)]
    assert tuple(args[11:13]) == ("rowwise", "rowwise")


def test_weight_gradient_epilogue_errors_name_the_tensor(fake):
    a, b, offs = cuda(40, 100), cuda(100, 24), cuda(4, dtype=I32)
    qa, qb, one = cuda(40, 100, dtype=E4M3), cuda(100, 24, dtype=E4M3), cuda(1, dtype=F32)
    for match, error, call in [
        # a row is one of P, not a token
        (r"^ra: shape \[100\] for ra\[m\] = amax\(\.\.\.\); expected \[40\] or \[40, 1\] \(the largest \|x\| over "
         r"every group\), or \[4, 40\] \(one a group, G = 4\)$", ValueError,
         lambda: gemmkit.grouped_mm(a, b, offs, epilogue="ra[m] = amax(acc); acc", ra=cuda(100, dtype=F32))),
        (r"^db: shape \[3, 24\] for db\[n\] = sum\(\.\.\.\); expected \[24\] or \[1, 24\] \(summed over every group\), "
         r"or \[4, 24\] \(one a group, G = 4\)$", ValueError,
         lambda: gemmkit.grouped_mm(a, b, offs, epilogue="db[n] = sum(acc); acc", db=cuda(3, 24, dtype=F32))),
        (r"^db: dtype torch.bfloat16 for db\[n\] = sum\(\.\.\.\); expected float32", TypeError,
         lambda: gemmkit.grouped_mm(a, b, offs, epilogue="db[n] = sum(acc); acc", db=cuda(24))),
        (r"^s: shape \[5\] for s\[\]; expected 0-d or \[1\] \(one value over every group\), or \[4\] \(one a group, "
         r"G = 4\)$", ValueError, lambda: gemmkit.grouped_mm(a, b, offs, epilogue="acc * s[]", s=cuda(5, dtype=F32))),
        (r"^saved: not given; the epilogue writes saved\[m, n\] =, expected saved=tensor$", ValueError,
         lambda: gemmkit.grouped_mm(a, b, offs, epilogue="saved[m, n] = acc; acc")),
        ("^route: not a tensor the epilogue names; expected bias$", ValueError,
         lambda: gemmkit.grouped_mm(a, b, offs, epilogue="acc + bias[n]", bias=cuda(24), route=cuda(100))),
        ("^grouped_mm\\(\\) got unexpected keyword arguments bias; tensors are taken only with epilogue=", TypeError,
         lambda: gemmkit.grouped_mm(a, b, offs, bias=cuda(24))),
        ("^out: 2 dimensions; expected 3$", ValueError,
         lambda: gemmkit.grouped_mm(a, b, offs, out=cuda(40, 24), epilogue="gelu(acc)")),
        (r"^mode: 'block'; expected 'tensor' or 'rowwise' for the weight gradient \(2-D a and b\)$", ValueError,
         lambda: gemmkit.scaled_grouped_mm(qa, qb, one, one, offs, mode="block", epilogue="gelu(acc)")),
    ]:
        with pytest.raises(error, match=match):
            call()
    # no gradient flows through it: an operand or a tensor the text reads that requires grad is refused
    for a_, bias in [(cuda(40, 100).requires_grad_(), cuda(24)), (a, cuda(24).requires_grad_())]:
        with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue yet"):
            gemmkit.grouped_mm(a_, b, offs, epilogue="silu(acc + bias[n])", bias=bias)
    with torch.no_grad():
        assert tuple(gemmkit.grouped_mm(a, b, offs, epilogue="acc + bias[n]", bias=cuda(24).requires_grad_()).shape) \
            == (4, 40, 24)


def test_weight_gradient_epilogue_with_the_stand_in(cpu_kernels):
    """grouped_wgrad_epilogue with the CPU stand-in (cpu_stand_ins.py), eager, under torch.compile's
    aot_eager and under opcheck: D and the outputs written in place, a reduction one a group
    through its [G, 1, Q] view (as grouped_mm passes it), against each group's product and the
    epilogue written out in double."""
    ends = torch.tensor([4, 4, 11])  # an empty group; rows 11 and 12 are no group's
    x, y = torch.randn(13, 5, dtype=F64), torch.randn(13, 6, dtype=F64)
    s, bias = torch.rand(3, dtype=F64) + 0.5, torch.randn(3, 6, dtype=F64)
    text = "h = acc * s[] + bias[n]; db[n] = sum(h); ta[] = amax(h); relu(h)"
    names = ["s", "bias", "db", "ta"]

    def step(x, y, ends, s, bias, db, ta):
        out = x.new_empty(3, 5, 6)
        torch.ops.gemmkit.grouped_wgrad_epilogue(x, y, ends, out, text, names, [s, bias.unsqueeze(-2)],
                                                 [db.unsqueeze(-2), ta], 0)
        return out

    h = torch.stack([x[start:end].t() @ y[start:end] * s[g] + bias[g]
                     for g, (start, end) in enumerate([(0, 4), (4, 4), (4, 11)])])
    for function in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        db, ta = torch.full((3, 6), float("nan")), torch.full((), float("nan"))
        out = function(x, y, ends, s, bias, db, ta)
        assert torch.allclose(out, h.relu(), rtol=1e-12, atol=1e-12)
        assert torch.allclose(db.double(), h.sum(1), rtol=1e-5, atol=1e-5), "db [G, Q] not written through its view"
        assert torch.allclose(ta.double(), h.abs().amax(), rtol=1e-6)
    torch._dynamo.reset()
    torch.library.opcheck(torch.ops.gemmkit.grouped_wgrad_epilogue.default,
                          (x, y, ends, torch.empty(3, 5, 6, dtype=F64), text, names, [s, bias.unsqueeze(-2)],
                           [torch.zeros(3, 1, 6), torch.zeros(())], 0))
