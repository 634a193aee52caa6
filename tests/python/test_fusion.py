"""The torch.compile pass (gemmkit.enable_compile_fusion). Without a GPU: on post-grad-like graphs
(make_fx with Inductor's decompositions, fake CUDA tensors), which products with elementwise work
after them become one gemmkit.mm_epilogue, with what text, and each refusal: an operation or
tensor shape the epilogue cannot take, other dtypes, more than eight tensors, a value stored for
nothing computed, a tensor read that the region's own output computes; values that escape
(used outside the region, a training graph's saved activations) stored as outputs of a
gemmkit.mm_epilogue_outputs, and where its values go; batched products (bmm, matmul of 3-D and
4-D tensors) likewise, their tensors shared or one a batch, and their fused graphs run on CPU
tensors with mm_epilogue's double-precision stand-in; SwiGLU's patterns (two products of one x,
or the halves of one product, plain, interleaved, with biases) becoming one gemmkit.swiglu_mm
(swiglu_mm_outputs where products or halves escape), and their refusals; the fused graphs run on
CPU tensors with double-precision stand-ins, against the graph they replaced; the forward graphs
of training steps as Inductor makes them; and a whole compiled training step of an MLP block on
CPU tensors (the pass's DEVICE set to the CPU, gemmkit's operators by stand-ins), forward and
backward against eager. Grouped and FP8 products: torch._grouped_mm and its chain (a router
weight, a shared bias, a gate) becoming one gemmkit.grouped_mm_epilogue, its halves' SwiGLU
(chunk, slices, split, interleaved) one grouped_swiglu_mm, torch._scaled_mm with tensor-wise or
row-wise scales one gemm_epilogue, each of the operators that write into an out recorded as
torch.compile records them (auto_functionalized), escaping values their outputs; the refusals
(the other grouped forms, offsets and dtypes, a bias, a product kept whole beside its halves,
other scales); the fused graphs run on CPU tensors with double-precision stand-ins, and an MoE
layer compiled on CPU tensors. Every positive test asserts that the products were replaced. On
an sm_90 GPU (the tests marked `sm90`, which skip, saying so, elsewhere): compiled MLP
up-projections against eager and double precision, and a training graph, whose products become
outputs of the dual GEMM; compiled MoE up- and down-projections and FP8 products with an
epilogue, one gemmkit call each, against double precision and eager. Skips, saying so, without
torch."""

import math
import operator

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from cpu_stand_ins import registered_on_cpu  # noqa: E402
from fake_cuda import cuda  # noqa: E402

import gemmkit  # noqa: E402
from gemmkit import _fusion  # noqa: E402

F = torch.nn.functional
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
M, N, K = 64, 96, 128
I = 48  # SwiGLU's intermediate size: [M, I] from weights [I, K] (or [2I, K])
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")


def graph_of(function, *args):
    """function's graph as Inductor's post-grad passes see it: aten operations, decomposed."""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(function, decomposition_table=select_decomp_table(), tracing_mode="fake")(*args)


def calls(gm, target):
    return [node for node in gm.graph.nodes if node.op == "call_function" and node.target == target]


def fused(function, *args):
    """The graph after the pass, and its fused calls (mm_epilogue, and mm_epilogue_outputs where
    values escape)."""
    gm = graph_of(function, *args)
    _fusion.fuse_epilogues(gm.graph)
    gm.recompile()
    ops = torch.ops.gemmkit
    return gm, calls(gm, ops.mm_epilogue.default) + calls(gm, ops.mm_epilogue_outputs.default)


def results(node):
    """The values of a *_outputs call, D first, as the graph takes them (the getitem of each)."""
    items = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    return [items.get(i) for i in range(len(node.args[-1]) + 1)]


def graph_outputs(gm):
    return list(gm.graph.nodes)[-1].args[0]


def test_bias_silu_and_a_gate_become_one_product(fake):
    x, w, bias, gate = cuda(M, K), cuda(N, K), cuda(N), cuda(M, N)
    before = _fusion.fusions
    gm, done = fused(lambda x, w, b, g: F.silu(x @ w.t() + b) * g, x, w, bias, gate)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default) and _fusion.fusions == before + 1
    a, b, text, names, inputs, dtype, alpha, beta, c = done[0].args
    assert (alpha, beta, c) == (1.0, 0.0, None)  # the product alone, its bias in the text
    assert names == ["t0", "t1"] and [t.target for t in inputs] == ["b_1", "g_1"] and dtype == BF16
    # silu decomposed by torch (x / (1 + exp(-x)) in float32), then rounded to bf16 before the gate
    program = gemmkit._gemmkit.epilogue_tensor_uses(text)
    assert [(name, index) for name, index, *_ in program] == [("t0", "n"), ("t1", "mn")]
    assert "exp(" in text and "bf16(" in text, text
    out = gm(x, w, bias, gate)
    assert out.shape == (M, N) and out.dtype == BF16


def test_addmm_gelu_and_a_residual_and_float32_out(fake):
    x, w, bias, r = cuda(M, K), cuda(N, K), cuda(N, dtype=F32), cuda(M, N, dtype=F32)
    gm, done = fused(lambda x, w, b, r: F.gelu(torch.addmm(b.to(BF16), x, w.t())).float() + r, x, w, bias, r)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.addmm.default)
    text, dtype = done[0].args[2], done[0].args[5]
    assert text.startswith("v0 = acc + t0[n]; ") and "erf(" in text and dtype == F32, text


def test_a_linear_layer_on_batched_rows_reads_its_tensors_as_rows(fake):
    x, w, bias, gate, scale = cuda(2, 32, K), cuda(N, K), cuda(N), cuda(2, 32, N), cuda(2, 32, 1, dtype=F32)
    gm, done = fused(lambda x, w, b, g, s: F.silu(F.linear(x, w, b)) * g * s, x, w, bias, gate, scale)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.addmm.default)
    text, names, inputs = done[0].args[2], done[0].args[3], done[0].args[4]
    assert text.startswith("v0 = acc + t0[n]; ") and "t1[m, n]" in text and "t2[m]" in text, text
    # the [2, 32, ...] tensors reshaped to 64 rows for the product, and its result viewed back
    assert [tuple(t.meta["val"].shape) for t in inputs] == [(N,), (64, N), (64, 1)]
    views = list(done[0].users)
    assert len(views) == 1 and views[0].target == torch.ops.aten.view.default and views[0].args[1] == [2, 32, N]
    out = gm(x, w, bias, gate, scale)
    assert tuple(out.shape) == (2, 32, N) and out.dtype == F32


def test_a_per_row_scale_in_float32(fake):
    x, w, scale = cuda(M, K), cuda(N, K), cuda(M, 1, dtype=F32)
    gm, done = fused(lambda x, w, s: torch.relu((x @ w.t()).float() * s), x, w, scale)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default)
    text, names, dtype = done[0].args[2], done[0].args[3], done[0].args[5]
    assert names == ["t0"] and "t0[m]" in text and "relu(" in text and dtype == F32, text


def test_a_value_that_escapes_is_stored_as_an_output(fake):
    x, w, bias = cuda(M, K), cuda(N, K), cuda(N)

    def both(x, w, b):  # the pre-activation is returned too, as a forward graph saves it
        h = x @ w.t() + b
        return F.silu(h), h

    gm, done = fused(both, x, w, bias)
    assert len(done) == 1 and done[0].target == torch.ops.gemmkit.mm_epilogue_outputs.default
    assert not calls(gm, torch.ops.aten.mm.default) and not calls(gm, torch.ops.aten.exp.default)  # silu fused
    a, b, text, names, inputs, dtype, types = done[0].args
    assert text.startswith("v1 = (acc + t0[n]); o0[m, n] = v1; ") and "exp(" in text, text
    assert names == ["t0", "o0"] and [t.target for t in inputs] == ["b_1"] and (dtype, types) == (BF16, ["bf16"])
    uses = gemmkit._gemmkit.epilogue_tensor_uses(text)  # the C++ parser takes the text: o0 an M x N output
    assert [tuple(use) for use in uses] == [("t0", "n", False, None), ("o0", "mn", True, None)]
    d, h = results(done[0])
    assert graph_outputs(gm) == (d, h)
    assert [(tuple(v.meta["val"].shape), v.meta["val"].dtype) for v in (d, h)] == [((M, N), BF16)] * 2
    out = gm(x, w, bias)
    assert [(tuple(v.shape), v.dtype) for v in out] == [((M, N), BF16)] * 2


def test_a_value_read_inside_and_outside_is_stored_once(fake):
    x, w, bias = cuda(M, K), cuda(N, K), cuda(N)

    def saved(x, w, b):
        h = x @ w.t() + b
        return F.silu(h) * h, h, torch.sin(h)  # h: read by the region, returned, and read by sin

    gm, done = fused(saved, x, w, bias)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default)
    text, types = done[0].args[2], done[0].args[-1]
    assert text.count("o0[m, n] = ") == 1 and "o1[" not in text and types == ["bf16"], text
    d, h = results(done[0])
    assert graph_outputs(gm)[:2] == (d, h)
    assert [node.args[0] for node in calls(gm, torch.ops.aten.sin.default)] == [h]


def test_a_saved_product_of_split_rows_is_stored_as_it_is(fake):
    x, w = cuda(2, 32, K), cuda(N, K)

    def saved(x, w):  # the product's flat [64, N] value saved, its [2, 32, N] view activated
        h = x.reshape(-1, K) @ w.t()
        return torch.tanh(h.view(2, 32, N)) * 2.0, h

    gm, done = fused(saved, x, w)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default)
    text, types = done[0].args[2], done[0].args[-1]
    assert text.startswith("o0[m, n] = acc; ") and "tanh(acc)" in text and types == ["bf16"], text
    d, h = results(done[0])
    d_view, h_out = graph_outputs(gm)
    assert h_out is h and tuple(h.meta["val"].shape) == (64, N)  # as the graph had it: no view
    assert d_view.target == torch.ops.aten.view.default and d_view.args == (d, [2, 32, N])

    def flat_and_split(x, w):  # relu of the flat rows has another shape than the region's: it reads h
        h = x.reshape(-1, K) @ w.t()
        return torch.relu(h), torch.tanh(h.view(2, 32, N))

    gm, done = fused(flat_and_split, x, w)
    assert len(done) == 1 and done[0].args[2] == "o0[m, n] = acc; tanh(acc)", done[0].args[2]
    d, h = results(done[0])
    assert [node.args for node in calls(gm, torch.ops.aten.relu.default)] == [(h,)]


def test_a_region_whose_tensor_reads_its_own_output_stops_before_it(fake):
    x, w = cuda(M, K), cuda(N, K)

    def later(x, w):  # y reads h, the region stores h: the region ends before it reads y
        h = x @ w.t()
        y = torch.sin(h)
        return torch.relu(h) * y

    gm, done = fused(later, x, w)
    assert len(done) == 1 and done[0].args[2] == "o0[m, n] = acc; relu(acc)", done[0].args[2]
    d, h = results(done[0])
    sin = calls(gm, torch.ops.aten.sin.default)
    assert [node.args for node in sin] == [(h,)]
    assert [node.args for node in calls(gm, torch.ops.aten.mul.Tensor)] == [(d, sin[0])]


def test_at_most_eight_tensors_a_call(fake):
    x, w, rs = cuda(M, K), cuda(N, K), [cuda(M, N) for _ in range(9)]

    def nine(x, w, *rs):
        h = x @ w.t()
        for r in rs:
            h = h + r
        return h

    gm, done = fused(nine, x, w, *rs)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default)
    assert len(done[0].args[3]) == 8 and len(calls(gm, torch.ops.aten.add.Tensor)) == 1  # the ninth left to torch

    def seven_and_two_stores(x, w, *rs):  # relu(h) with h and p stored: 7 read and 2 written, 9
        h = p = x @ w.t()
        for r in rs[:7]:
            h = h + r
        return torch.relu(h), h, p

    gm, done = fused(seven_and_two_stores, x, w, *rs)
    assert len(done) == 1 and done[0].args[3] == [f"t{i}" for i in range(7)] + ["o0"], done[0].args[2]
    assert done[0].args[2].startswith("o0[m, n] = acc; ") and len(calls(gm, torch.ops.aten.relu.default)) == 1
    d, p = results(done[0])
    relu = calls(gm, torch.ops.aten.relu.default)[0]
    assert relu.args == (d,) and graph_outputs(gm) == (relu, d, p)


def test_refusals_leave_the_product(fake):
    x, w = cuda(M, K), cuda(N, K)
    refused = [
        (lambda x, w: torch.sin(x @ w.t()), (x, w)),  # no sin in the epilogue language
        (lambda x, w: x @ w.t(), (x, w)),  # nothing after the product
        (lambda x, w, v: (x @ w.t()) * v, (x, w, cuda(1, 1))),  # a [1, 1] tensor: not [N], [M, 1] or [M, N]
        (lambda x, w, v: (x @ w.t()).double() + v, (x, w, cuda(M, N, dtype=torch.float64))),  # float64
        (lambda x, w: torch.relu(x @ w.t()), (cuda(M, K, dtype=F32), cuda(N, K, dtype=F32))),  # 32-bit inputs
        # the product widened and kept: it would compute nothing, only store the product again
        (lambda x, w: (lambda h: (h.float(), h))(x @ w.t()), (x, w)),
        # a tensor the region reads computed from a value it would store: the region's own output
        (lambda x, w: (lambda h: torch.relu(h + torch.sin(h)))(x @ w.t()), (x, w)),
    ]
    for function, args in refused:
        gm, done = fused(function, *args)
        assert not done and calls(gm, torch.ops.aten.mm.default), gm.graph


def test_a_strided_m_by_n_tensor_is_read_as_it_lies(fake):
    x, w, v = cuda(M, K), cuda(N, K), cuda(M, N, 2)[..., 0]
    gm, done = fused(lambda x, w, v: torch.tanh((x @ w.t()) + v), x, w, v)
    assert len(done) == 1 and "t0[m, n]" in done[0].args[2] and "tanh(" in done[0].args[2]


# --- batched products (bmm) ------------------------------------------------------------------------

B = 3  # the batch of the bmm tests


def placeholder_of(node):
    return node.target if node is not None and node.op == "placeholder" else None


def test_bmm_with_a_bias_silu_and_a_gate_becomes_one_batched_product(fake):
    x, w, bias, gate = cuda(B, M, K), cuda(B, K, N), cuda(N), cuda(B, M, N)
    before = _fusion.fusions
    gm, done = fused(lambda x, w, b, g: F.silu(torch.bmm(x, w) + b) * g, x, w, bias, gate)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.bmm.default) and _fusion.fusions == before + 1
    a, b, text, names, inputs, dtype, alpha, beta, c = done[0].args
    assert (placeholder_of(a), placeholder_of(b), alpha, beta, c, dtype) == ("x_1", "w_1", 1.0, 0.0, None, BF16)
    uses = gemmkit._gemmkit.epilogue_tensor_uses(text)  # the C++ parser takes the text
    assert [(name, index) for name, index, *_ in uses] == [("t0", "n"), ("t1", "mn")], text
    assert "exp(" in text and "bf16(" in text, text
    # the bias [N] read as a row [1, N] for every batch, the gate one a batch as it is
    assert [tuple(t.meta["val"].shape) for t in inputs] == [(1, N), (B, M, N)]
    assert placeholder_of(inputs[1]) == "g_1"
    out = gm(x, w, bias, gate)
    assert tuple(out.shape) == (B, M, N) and out.dtype == BF16


def test_a_matmul_of_4d_tensors_reads_its_tensors_one_a_batch_or_shared(fake):
    x, w, s, r = cuda(2, B, M, K), cuda(2, B, K, N), cuda(2, B, M, 1, dtype=F32), cuda(M, N)
    gm, done = fused(lambda x, w, s, r: torch.relu((x @ w).float() * s + r), x, w, s, r)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.bmm.default)
    a, b, text, names, inputs, dtype = done[0].args[:6]
    assert tuple(a.meta["val"].shape) == (2 * B, M, K) and tuple(b.meta["val"].shape) == (2 * B, K, N)
    assert "t0[m]" in text and "t1[m, n]" in text and "relu(" in text and dtype == F32, text
    # the scale one a batch: [2, B, M, 1] reshaped to the product's batch of 2 * B; r as it is, shared
    assert [tuple(t.meta["val"].shape) for t in inputs] == [(2 * B, M, 1), (M, N)]
    assert inputs[0].target == torch.ops.aten.reshape.default and placeholder_of(inputs[1]) == "r_1"
    views = list(done[0].users)
    assert len(views) == 1 and views[0].target == torch.ops.aten.view.default and views[0].args[1] == [2, B, M, N]
    out = gm(x, w, s, r)
    assert tuple(out.shape) == (2, B, M, N) and out.dtype == F32


def test_bmm_values_that_escape_are_stored_as_outputs(fake):
    x, w, bias = cuda(B, M, K), cuda(B, K, N), cuda(B, 1, N)

    def escapes_the_product(x, w):
        h = torch.bmm(x, w)
        return torch.relu(h), h

    gm, done = fused(escapes_the_product, x, w)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.bmm.default)
    assert done[0].args[2:] == ("o0[m, n] = acc; relu(acc)", ["o0"], [], BF16, ["bf16"]), done[0].args[2]
    assert graph_outputs(gm) == tuple(results(done[0]))
    assert [tuple(v.meta["val"].shape) for v in results(done[0])] == [(B, M, N)] * 2

    def escapes_the_preactivation(x, w, b):  # as a forward graph saves it for the backward
        h = torch.bmm(x, w) + b
        return F.silu(h), h

    gm, done = fused(escapes_the_preactivation, x, w, bias)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.bmm.default) and not calls(gm, torch.ops.aten.exp.default)
    text = done[0].args[2]
    assert text.startswith("v1 = (acc + t0[n]); o0[m, n] = v1; ") and "exp(" in text, text
    assert [tuple(t.meta["val"].shape) for t in done[0].args[4]] == [(B, 1, N)]  # a bias a batch
    assert graph_outputs(gm) == tuple(results(done[0]))

    def saved_before_its_view(x, w):  # the flat [2B, M, N] product kept, its [2, B, M, N] view activated
        h = torch.bmm(x.reshape(2 * B, M, K), w.reshape(2 * B, K, N))
        return torch.relu(h.view(2, B, M, N)), h

    gm, done = fused(saved_before_its_view, cuda(2, B, M, K), cuda(2, B, K, N))
    assert len(done) == 1 and done[0].args[2] == "o0[m, n] = acc; relu(acc)", done[0].args[2]
    d, h = results(done[0])
    d_view, h_out = graph_outputs(gm)
    assert h_out is h and tuple(h.meta["val"].shape) == (2 * B, M, N)
    assert d_view.target == torch.ops.aten.view.default and d_view.args == (d, [2, B, M, N])


def test_bmm_refusals_leave_the_product(fake):
    x, w = cuda(B, M, K), cuda(B, K, N)
    refused = [
        (lambda x, w: torch.sin(torch.bmm(x, w)), (x, w)),  # no sin in the epilogue language
        (lambda x, w: torch.bmm(x, w), (x, w)),  # nothing after the product
        (lambda x, w, v: torch.bmm(x, w) * v, (x, w, cuda(B, 1, 1))),  # a value a batch: no index reads it
        (lambda x, w, v: (x @ w) + v, (cuda(2, B, M, K), cuda(2, B, K, N), cuda(2, 1, 1, N))),  # part of the batch
        (lambda x, w: torch.relu(torch.bmm(x, w)), (cuda(B, M, K, dtype=F32), cuda(B, K, N, dtype=F32))),  # 32-bit
        (lambda x, w: torch.relu(torch.bmm(x, w)), (torch.empty(B, M, K, dtype=BF16), torch.empty(B, K, N,
                                                                                                  dtype=BF16))),
    ]
    for function, args in refused:
        gm, done = fused(function, *args)
        assert not done and calls(gm, torch.ops.aten.bmm.default), gm.graph


BMM_CPU_CASES = {  # name: (the function, its tensors' shapes and dtypes)
    "bias_silu_gate": (lambda x, w, b, g: F.silu(torch.bmm(x, w) + b) * g,
                       [((B, 24, K), BF16), ((B, K, N), BF16), ((N,), BF16), ((B, 24, N), BF16)]),
    "per_batch_bias_gelu_shared_scale": (lambda x, w, b, s: F.gelu(torch.bmm(x, w) + b).float() * s,
                                         [((B, 24, K), BF16), ((B, K, N), BF16), ((B, 1, N), BF16), ((24, 1), F32)]),
    "matmul_4d_tanh_residual": (lambda x, w, r, s: torch.tanh(x @ w) * s + r,
                                [((2, B, 24, K), BF16), ((2, B, K, N), BF16), ((24, N), BF16),
                                 ((2, B, 24, 1), BF16)]),
}


@pytest.mark.parametrize("case", BMM_CPU_CASES)
def test_fused_bmm_graphs_compute_what_they_replace(cpu_kernels, case):
    """The fused graph run on CPU tensors, mm_epilogue by its double-precision stand-in
    (cpu_stand_ins.py), against torch's graph on the same tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    function, shapes = BMM_CPU_CASES[case]
    torch.manual_seed(0)
    args = [(torch.randn(*shape) / (K ** 0.5 if i == 1 else 1)).to(dtype)
            for i, (shape, dtype) in enumerate(shapes)]
    with FakeTensorMode():
        gm, done = fused(function, *[torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in args])
    assert len(done) == 1 and not calls(gm, torch.ops.aten.bmm.default), gm.graph
    got, want = gm(*args), function(*args)
    assert got.shape == want.shape and got.dtype == want.dtype
    # torch rounds the product to bf16 before its epilogue, which the fused text does not
    torch.testing.assert_close(got.double(), want.double(), rtol=2 ** -6, atol=2 ** -5)
    # the check sees the batches apart: not so close with the batches of x rolled
    rolled = function(args[0].roll(1, 0 if args[0].dim() == 3 else 1), *args[1:])
    assert (got.double() - rolled.double()).abs().max() > 0.25


def test_the_outputs_operators_give_d_and_each_output(fake):
    """The fake implementations of the operators the pass makes where values escape: D, then each
    output of D's shape, row-major, of its type; an output the text reduces into refused, as the
    kernel's check would refuse it."""
    ops = torch.ops.gemmkit
    a, b, bias = cuda(B, M, K), cuda(B, K, N), cuda(N)
    text = "h = acc + t0[n]; o0[m, n] = h; o1[m, n] = h; silu(h)"
    values = ops.mm_epilogue_outputs(a, b, text, ["t0", "o0", "o1"], [bias], F32, ["bf16", "f32"])
    assert [(tuple(v.shape), v.dtype, v.is_contiguous()) for v in values] == [
        ((B, M, N), F32, True), ((B, M, N), BF16, True), ((B, M, N), F32, True)]
    x, wg, wu, w = cuda(M, K), cuda(I, K), cuda(I, K), cuda(2 * I, K)
    values = ops.swiglu_mm_outputs(x, wg, wu, False, "o0[m, n] = acc2; silu(acc) * acc2", ["o0"], [], None, ["f16"])
    assert [(tuple(v.shape), v.dtype) for v in values] == [((M, I), BF16), ((M, I), F16)]
    values = ops.swiglu_mm_outputs(x, w, None, True, "o0[m, n] = acc; acc * acc2", ["o0"], [], F32, ["bf16"])
    assert [(tuple(v.shape), v.dtype) for v in values] == [((M, I), F32), ((M, I), BF16)]
    with pytest.raises(ValueError, match=r"^o0: shape \[64, 96\] for o0\[n\] = sum\(\.\.\.\); expected"):
        ops.mm_epilogue_outputs(x, cuda(K, N), "o0[n] = sum(acc); acc", ["o0"], [], BF16, ["f32"])


def test_enable_takes_inductors_post_grad_pass_and_refuses_anothers():
    import torch._inductor.config as config

    assert config.post_grad_custom_post_pass is None
    gemmkit.enable_compile_fusion()
    try:
        assert config.post_grad_custom_post_pass is not None
        assert config.post_grad_custom_post_pass.uuid()  # Inductor caches by it
        gemmkit.enable_compile_fusion()  # again: still gemmkit's
    finally:
        gemmkit.enable_compile_fusion(False)
    assert config.post_grad_custom_post_pass is None
    config.post_grad_custom_post_pass = object()
    try:
        with pytest.raises(RuntimeError, match="^enable_compile_fusion: torch._inductor.config.post_grad_custom"):
            gemmkit.enable_compile_fusion()
    finally:
        config.post_grad_custom_post_pass = None


# --- SwiGLU: dual products -------------------------------------------------------------------

def swiglu_calls(gm):
    return calls(gm, torch.ops.gemmkit.swiglu_mm.default) + calls(gm, torch.ops.gemmkit.swiglu_mm_outputs.default)


def dual(function, *args):
    """The graph after the pass, and its swiglu_mm calls; asserts that no mm or addmm and no
    mm_epilogue is left beside them."""
    before = _fusion.fusions
    gm, single = fused(function, *args)
    done = swiglu_calls(gm)
    assert done and not single, gm.graph
    assert not calls(gm, torch.ops.aten.mm.default) and not calls(gm, torch.ops.aten.addmm.default), gm.graph
    assert _fusion.fusions == before + len(done)  # one a gemmkit call, whatever it replaced
    for node in done:
        gemmkit._gemmkit.epilogue_tensor_uses(node.args[4])  # the C++ parser takes the text
    return gm, done


def placeholder(node):
    return node.target if node is not None and node.op == "placeholder" else None


def test_two_linear_layers_of_one_x_become_one_dual_product(fake):
    x, wg, wu = cuda(2, 32, K), cuda(I, K), cuda(I, K)
    gm, done = dual(lambda x, wg, wu: F.silu(F.linear(x, wg)) * F.linear(x, wu), x, wg, wu)
    assert len(done) == 1
    xs, w, w_up, interleaved, text, names, inputs, dtype = done[0].args
    # each layer views x [2, 32, K] as 64 rows, as its own node: the first's is x
    assert xs.target == torch.ops.aten.view.default and placeholder(xs.args[0]) == "x_1"
    assert (placeholder(w), placeholder(w_up), interleaved, names, inputs, dtype) == ("wg_1", "wu_1", False, [], [],
                                                                                      BF16)
    # silu decomposed by torch, on the gate's f32 sum, rounded to bf16 before it meets the up's
    assert "exp(" in text and "= (acc / " in text and text.endswith(" * acc2)") and "bf16(" in text, text
    views = list(done[0].users)
    assert len(views) == 1 and views[0].target == torch.ops.aten.view.default and views[0].args[1] == [2, 32, I]
    out = gm(x, wg, wu)
    assert tuple(out.shape) == (2, 32, I) and out.dtype == BF16


def test_the_gate_is_the_product_silu_reads_in_either_order(fake):
    x, wg, wu = cuda(M, K), cuda(I, K), cuda(I, K)
    gm, done = dual(lambda x, wu, wg: (x @ wu.t()) * F.silu(x @ wg.t()), x, wu, wg)  # up first
    w, w_up, text = done[0].args[1], done[0].args[2], done[0].args[4]
    assert (placeholder(w), placeholder(w_up)) == ("wg_1", "wu_1") and "(acc2 * " in text and "neg(acc)" in text, text


def test_biases_gelu_and_a_row_scale_join_the_dual_epilogue(fake):
    x, wg, wu, bg, bu, s = cuda(M, K), cuda(I, K), cuda(I, K), cuda(I), cuda(I), cuda(M, 1, dtype=F32)
    gm, done = dual(lambda x, wg, wu, bg, bu, s: F.gelu(F.linear(x, wg, bg)) * F.linear(x, wu, bu) * s,
                    x, wg, wu, bg, bu, s)
    xs, w, w_up, interleaved, text, names, inputs, dtype = done[0].args
    assert placeholder(xs) == "x_1" and (placeholder(w), placeholder(w_up)) == ("wg_1", "wu_1")
    assert text.startswith("v0 = acc + t0[n]; v1 = acc2 + t1[n]; ") and "erf(" in text and "t2[m]" in text, text
    assert [placeholder(t) for t in inputs] == ["bg_1", "bu_1", "s_1"] and names == ["t0", "t1", "t2"]
    assert dtype == F32  # the f32 scale promotes the result


def test_a_weight_the_graph_did_not_transpose_goes_in_as_a_transposed_view(fake):
    x, wg_t, wu = cuda(M, K), cuda(K, I), cuda(I, K)  # the gate weight stored [K, I]
    gm, done = dual(lambda x, wg_t, wu: F.silu(x @ wg_t) * (x @ wu.t()), x, wg_t, wu)
    w, w_up = done[0].args[1], done[0].args[2]
    assert w.target == torch.ops.aten.permute.default and placeholder(w.args[0]) == "wg_t_1" and w.args[1] == [1, 0]
    assert tuple(w.meta["val"].shape) == (I, K) and placeholder(w_up) == "wu_1"


HALVES = {  # the forms of taking a [.., 2I] product's halves, as torch writes them
    "slices": lambda h: F.silu(h[..., :I]) * h[..., I:],
    "chunk": lambda h: (lambda g, u: F.silu(g) * u)(*h.chunk(2, dim=-1)),
    "split_with_sizes": lambda h: (lambda g, u: F.silu(g) * u)(*h.split([I, I], dim=-1)),
    "up_first": lambda h: h[..., I:] * F.silu(h[..., :I]),
}


@pytest.mark.parametrize("form", HALVES)
@pytest.mark.parametrize("lead", [(M,), (2, 32)])
def test_the_halves_of_one_product_of_concatenated_weights(fake, form, lead):
    x, w = cuda(*lead, K), cuda(2 * I, K)
    gm, done = dual(lambda x, w: HALVES[form](F.linear(x, w)), x, w)
    xs, w_arg, w_up, interleaved, text = done[0].args[:5]
    assert placeholder(w_arg) == "w_1" and w_up is None and interleaved is False
    assert (xs.args[0] if len(lead) > 1 else xs).target == "x_1"
    assert "neg(acc)" in text and "acc2" in text, text  # the first half is the gate
    out = gm(x, w)
    assert tuple(out.shape) == (*lead, I) and out.dtype == BF16


def test_interleaved_halves_with_a_bias(fake):
    x, w, b = cuda(M, K), cuda(2 * I, K), cuda(2 * I)
    gm, done = dual(lambda x, w, b: (lambda h: F.silu(h[:, 0::2]) * h[:, 1::2])(F.linear(x, w, b)), x, w, b)
    xs, w_arg, w_up, interleaved, text, names, inputs = done[0].args[:7]
    assert placeholder(xs) == "x_1" and placeholder(w_arg) == "w_1" and w_up is None and interleaved is True
    assert text.startswith("v1 = acc + t0[n]; v2 = acc2 + t1[n]; "), text
    # the bias's even and odd elements, as the product's columns
    assert [(t.target, placeholder(t.args[0]), t.args[1:]) for t in inputs] == [
        (torch.ops.aten.slice.Tensor, "b_1", (-1, 0, None, 2)), (torch.ops.aten.slice.Tensor, "b_1", (-1, 1, None, 2))]
    assert [tuple(t.meta["val"].shape) for t in inputs] == [(I,), (I,)]


def saves_both(x, wg, wu):  # a forward graph's products kept for the backward
    g, u = x @ wg.t(), x @ wu.t()
    return F.silu(g) * u, g, u


def saves_the_gate_up_first(x, wu, wg):
    u = x @ wu.t()
    g = x @ wg.t()
    return u * F.silu(g), g


def saves_a_half(x, w):
    g, u = (x @ w.t()).chunk(2, dim=-1)
    return F.silu(g) * u, u


def test_saved_products_and_halves_of_a_dual_product_are_its_outputs(fake):
    x, wg, wu, w = cuda(M, K), cuda(I, K), cuda(I, K), cuda(2 * I, K)
    gm, done = dual(saves_both, x, wg, wu)
    assert len(done) == 1 and done[0].target == torch.ops.gemmkit.swiglu_mm_outputs.default
    xs, w_arg, w_up, interleaved, text, names, inputs, dtype, types = done[0].args
    assert (placeholder(xs), placeholder(w_arg), placeholder(w_up)) == ("x_1", "wg_1", "wu_1")
    assert text.startswith("o0[m, n] = acc; o1[m, n] = acc2; ") and text.endswith(" * acc2)"), text
    assert (names, inputs, dtype, types) == (["o0", "o1"], [], BF16, ["bf16", "bf16"])
    assert graph_outputs(gm) == tuple(results(done[0]))

    # the gate is silu's product, the second in graph order: the text's acc and acc2 swap, and the
    # stored gate is acc with them
    gm, done = dual(saves_the_gate_up_first, x, wu, wg)
    w_arg, w_up, text = done[0].args[1], done[0].args[2], done[0].args[4]
    assert (placeholder(w_arg), placeholder(w_up)) == ("wg_1", "wu_1") and text.startswith("o0[m, n] = acc; "), text
    assert graph_outputs(gm) == tuple(results(done[0]))

    gm, done = dual(saves_a_half, x, w)  # the up half of a [2I, K] weight's product
    w_arg, w_up, text, types = done[0].args[1], done[0].args[2], done[0].args[4], done[0].args[8]
    assert placeholder(w_arg) == "w_1" and w_up is None and text.startswith("o0[m, n] = acc2; ") and types == ["bf16"]
    d, u = results(done[0])
    assert graph_outputs(gm) == (d, u) and u.meta["val"].is_contiguous()  # the half's own tensor, not a view of h


def test_swiglu_refusals(fake):
    x, wg, wu, w = cuda(M, K), cuda(I, K), cuda(I, K), cuda(2 * I, K)

    def escapes_h(x, w):  # [M, 2I]: not an output of the dual GEMM's [M, I]
        h = x @ w.t()
        return F.silu(h[:, :I]) * h[:, I:], h

    swiglu = lambda x, wg, wu: F.silu(x @ wg.t()) * (x @ wu.t())  # noqa: E731
    cpu = lambda *shape: torch.empty(*shape, dtype=BF16)  # noqa: E731
    refused = [  # (function, its tensors, products left, mm_epilogue calls made of the others)
        (escapes_h, (x, w), 1, 0),
        # two chains that do not meet: one would be D, the other an output; each fuses alone
        (lambda x, wg, wu: (F.silu(x @ wg.t()), torch.relu(x @ wu.t())), (x, wg, wu), 0, 2),
        (swiglu, (x, wg, cuda(1, K)), 1, 1),  # weights [I, K] and [1, K]: u [M, 1] broadcasts
        (lambda x, wg, wu: F.silu(x @ wg.t()) * (x.half() @ wu.t()), (x, wg, cuda(I, K, dtype=F16)), 1, 1),  # dtypes
        (swiglu, (cpu(M, K), cpu(I, K), cpu(I, K)), 2, 0),  # not CUDA
        (swiglu, (cuda(M, K, dtype=F32), cuda(I, K, dtype=F32), cuda(I, K, dtype=F32)), 2, 0),  # 32-bit
        (lambda x, y, wg, wu: F.silu(x @ wg.t()) * (y @ wu.t()), (x, cuda(M, K), wg, wu), 1, 1),  # two x
        (lambda x, w: (lambda h: F.silu(h[:, :32]) * h[:, 32:64])(x @ w.t()), (x, cuda(96, K)), 1, 0),  # not halves
        (lambda x, w: (lambda h: F.silu(h[:, :I]) * h[:, I + 1:])(x @ w.t()), (x, cuda(2 * I + 1, K)), 1, 0),  # odd
        (lambda x, w: (lambda h: F.silu(h[:I]) * h[I:])(x @ w.t()), (cuda(2 * I, K), w), 1, 0),  # halves of rows
        (lambda x, w: (lambda h: F.silu(h[:, 0::2]) * h[:, 0::2])(x @ w.t()), (x, w), 1, 0),  # one half twice
    ]
    for function, args, left, single in refused:
        gm, done = fused(function, *args)
        assert not swiglu_calls(gm), gm.graph
        assert len(calls(gm, torch.ops.aten.mm.default)) == left and len(done) == single, gm.graph


class Stop(Exception):
    """Ends a CPU compile after its post-grad pass (its graph then calls CUDA-only operators)."""


INDUCTOR_CASES = {  # name: (the layer, its tensors' shapes, swiglu_mm's interleaved, its tensors read)
    "pair": (lambda x, wg, wu: F.silu(F.linear(x, wg)) * F.linear(x, wu), [(2, 8, K), (I, K), (I, K)], False, 0),
    "pair_biases": (lambda x, wg, wu, bg, bu: F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu),
                    [(M, K), (I, K), (I, K), (I,), (I,)], False, 2),
    "chunk": (lambda x, w: (lambda g, u: F.silu(g) * u)(*F.linear(x, w).chunk(2, dim=-1)), [(2, 8, K), (2 * I, K)],
              False, 0),
    "interleaved_bias": (lambda x, w, b: (lambda h: F.silu(h[..., 0::2]) * h[..., 1::2])(F.linear(x, w, b)),
                         [(2, 8, K), (2 * I, K), (2 * I,)], True, 2),
}


def inductor_graph(layer, args, training=False):
    """(the post-grad graph torch.compile of `layer` on CPU tensors `args` hands the pass, with its
    values made CUDA tensors of their shapes, and the pass's count on it): the graphs as Inductor
    makes them (reshapes, a view of x for each layer, no dead nodes); `training`: with autograd, of
    args that require grad, the forward graph (which returns what the backward keeps). The compile
    stops after the pass (its graph then calls CUDA-only operators)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen, mode = [], FakeTensorMode()

    class Probe(CustomGraphPass):
        def __call__(self, graph):
            for node in graph.nodes:
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor):
                    with mode:
                        node.meta["val"] = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device="cuda")
            seen.append((graph, _fusion.fuse_epilogues(graph)))
            raise Stop

        def uuid(self):
            return None

    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=Probe(), fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False), torch.set_grad_enabled(training):
        with pytest.raises(Exception) as stopped:
            torch.compile(layer, fullgraph=True)(*args)
    torch._dynamo.reset()
    assert seen, stopped.value
    return seen[0]


@pytest.mark.parametrize("case", INDUCTOR_CASES)
def test_the_graphs_inductor_hands_the_pass(case):
    """torch.compile of CPU tensors up to the post-grad pass (inductor_graph)."""
    layer, shapes, interleaved, read = INDUCTOR_CASES[case]
    graph, count = inductor_graph(layer, [torch.randn(*shape).to(BF16) for shape in shapes])
    done = [node for node in graph.nodes if node.target == torch.ops.gemmkit.swiglu_mm.default]
    assert count == 1 and len(done) == 1, graph
    assert not [node for node in graph.nodes if node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)]
    xs, w, w_up, flag, text, names, inputs = done[0].args[:7]
    assert w.op == "placeholder" and (w_up is None) == (shapes[1][0] == 2 * I)  # the weights as they came
    assert flag == interleaved and len(inputs) == read and "acc2" in text and "neg(" in text, text


@pytest.mark.parametrize("lead", [(B,), (2, B)])
def test_the_bmm_graphs_inductor_hands_the_pass(lead):
    """A batched product with a bias a batch and gelu, as Inductor's post-grad graph has it."""
    args = [torch.randn(*lead, 24, K).to(BF16), torch.randn(*lead, K, N).to(BF16), torch.randn(*lead, 1, N).to(BF16)]
    graph, count = inductor_graph(lambda x, w, b: F.gelu(torch.matmul(x, w) + b), args)
    done = [node for node in graph.nodes if node.target == torch.ops.gemmkit.mm_epilogue.default]
    assert count == 1 and len(done) == 1 and not [node for node in graph.nodes
                                                  if node.target == torch.ops.aten.bmm.default], graph
    text, names, inputs = done[0].args[2:5]
    assert "t0[n]" in text and "erf(" in text and len(inputs) == 1, text
    assert tuple(inputs[0].meta["val"].shape) == (math.prod(lead), 1, N)


TRAINING_CASES = {  # name: (the layer, its tensors' shapes, the call it becomes, how many values it stores)
    "pair": (lambda x, wg, wu: F.silu(F.linear(x, wg)) * F.linear(x, wu), [(2, 8, K), (I, K), (I, K)],
             torch.ops.gemmkit.swiglu_mm_outputs.default, 2),
    "pair_biases": (lambda x, wg, wu, bg, bu: F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu),
                    [(M, K), (I, K), (I, K), (I,), (I,)], torch.ops.gemmkit.swiglu_mm_outputs.default, 2),
    "gelu_bias": (lambda x, w, b: F.gelu(F.linear(x, w, b)), [(2, 8, K), (N, K), (N,)],
                  torch.ops.gemmkit.mm_epilogue_outputs.default, 1),
    "bmm": (lambda x, w, b: F.gelu(torch.matmul(x, w) + b), [(B, 24, K), (B, K, N), (B, 1, N)],
            torch.ops.gemmkit.mm_epilogue_outputs.default, 1),
}


@pytest.mark.parametrize("case", TRAINING_CASES)
def test_a_training_graph_stores_what_the_backward_keeps(case):
    """The forward graph of a layer whose tensors require grad returns the products (the
    pre-activation) for the backward: each becomes an output of the call, which the graph returns."""
    layer, shapes, target, stores = TRAINING_CASES[case]
    graph, count = inductor_graph(layer, [torch.randn(*shape).to(BF16).requires_grad_() for shape in shapes],
                                  training=True)
    done = [node for node in graph.nodes if node.target == target]
    assert count == 1 and len(done) == 1, graph
    assert not [node for node in graph.nodes if node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
                                                                torch.ops.aten.bmm.default)], graph
    text, types = done[0].args[4 if target == torch.ops.gemmkit.swiglu_mm_outputs.default else 2], done[0].args[-1]
    assert types == ["bf16"] * stores and all(f"o{i}[m, n] = " in text for i in range(stores)), text
    saved = results(done[0])[1:]
    assert all(value in list(graph.nodes)[-1].args[0] for value in saved), graph


def test_a_training_graph_that_keeps_a_combined_product_is_left(fake):
    """A [2I, K] weight's product h kept whole for the backward: the dual GEMM would write h's halves
    as two outputs in one tensor, whose memory the library refuses to share (nor does h's [M, 2I]
    fit a single product's chain, whose halves are no elementwise nodes)."""
    layer = lambda x, w: (lambda g, u: F.silu(g) * u)(*F.linear(x, w).chunk(2, dim=-1))  # noqa: E731
    graph, count = inductor_graph(layer, [torch.randn(2, 8, K).to(BF16).requires_grad_(),
                                          torch.randn(2 * I, K).to(BF16).requires_grad_()], training=True)
    assert count == 0 and [node for node in graph.nodes if node.target == torch.ops.aten.mm.default], graph


# --- SwiGLU's fused graphs run on CPU tensors, swiglu_mm by a double-precision stand-in -------

def evaluate(text, acc, acc2, tensors):
    """An epilogue text of the pass, in double: its statements are Python's (`v = ...`, then D),
    its tensors read as name[n], name[m] or name[m, n]."""
    m, n = acc.shape

    class Read:
        def __init__(self, t):
            self.t = t.double()

        def __getitem__(self, index):
            return self.t.reshape({"n": (1, n), "m": (m, 1), ("m", "n"): (m, n)}[index])

    def round_to(dtype):
        return lambda v: v.to(dtype).double()

    scope = {"acc": acc, "acc2": acc2, "m": "m", "n": "n", "relu": torch.relu, "sigmoid": torch.sigmoid,
             "tanh": torch.tanh, "erf": torch.erf, "exp": torch.exp, "log": torch.log, "abs": torch.abs,
             "neg": torch.neg, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "silu": F.silu, "gelu": F.gelu,
             "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "max": torch.maximum, "min": torch.minimum,
             "bf16": round_to(BF16), "f16": round_to(F16), "f32": round_to(F32)}
    scope.update((name, Read(t)) for name, t in tensors.items())
    *statements, last = text.split(";")
    for statement in statements:
        name, value = statement.split("=", 1)
        scope[name.strip()] = eval(value, {"__builtins__": {}}, scope)
    return eval(last, {"__builtins__": {}}, scope)


def swiglu_products(x, w, w_up, interleaved):
    """(x @ gate^T, x @ up^T) in double, the weights as swiglu_mm takes them."""
    half = w.size(0) // 2
    gate, up = (w, w_up) if w_up is not None else (w[0::2], w[1::2]) if interleaved else (w[:half], w[half:])
    rows = x.double()
    return rows @ gate.double().t(), rows @ up.double().t()


def swiglu_stand_in(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype):
    d = evaluate(epilogue, *swiglu_products(x, w, w_up, interleaved), dict(zip(names, inputs)))
    return d.to(out_dtype or x.dtype)


def with_outputs(text, acc, acc2, names, inputs, out_dtype, output_types):
    """[D, *outputs] of a *_outputs operator's text, by gemmkit's own evaluation in double."""
    from gemmkit._epilogue_eval import evaluate as evaluate_text
    from gemmkit._ops import OUTPUT_TYPES

    d, values = evaluate_text(text, acc, {name: t.double() for name, t in zip(names, inputs)}, acc2=acc2)
    written = zip(names[len(inputs):], output_types)
    return [d.to(out_dtype).contiguous(), *(values[name].to(OUTPUT_TYPES[kind]).contiguous() for name, kind in written)]


def mm_epilogue_outputs_stand_in(a, b, epilogue, names, inputs, out_dtype, output_types):
    return with_outputs(epilogue, a.double() @ b.double(), None, names, inputs, out_dtype, output_types)


def swiglu_mm_outputs_stand_in(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype, output_types):
    return with_outputs(epilogue, *swiglu_products(x, w, w_up, interleaved), names, inputs, out_dtype or x.dtype,
                        output_types)


@pytest.fixture
def cpu_outputs():
    """gemmkit's *_outputs operators on CPU tensors, by the stand-ins above, for the duration of a
    test."""
    yield from registered_on_cpu({"mm_epilogue_outputs": mm_epilogue_outputs_stand_in,
                                  "swiglu_mm_outputs": swiglu_mm_outputs_stand_in})


@pytest.fixture
def cpu_swiglu():
    """gemmkit.swiglu_mm on CPU tensors, by swiglu_stand_in, for the duration of a test."""
    yield from registered_on_cpu({"swiglu_mm": swiglu_stand_in})


def linear_pair(act, bias=False):
    def layer(x, wg, wu, bg, bu):
        return act(F.linear(x, wg, bg if bias else None)) * F.linear(x, wu, bu if bias else None)
    return layer


def halves_of(act, interleaved=False, bias=False):
    def layer(x, w, b):
        h = F.linear(x, w, b if bias else None)
        return act(h[..., 0::2]) * h[..., 1::2] if interleaved else (lambda g, u: act(g) * u)(*h.chunk(2, dim=-1))
    return layer


CPU_CASES = {  # name: (the layer, whether it takes one [2I, K] weight and bias)
    "pair": (linear_pair(F.silu), False),
    "pair_gelu_biases": (linear_pair(F.gelu, bias=True), False),
    "up_first": (lambda x, wg, wu, bg, bu: F.linear(x, wu) * F.silu(F.linear(x, wg)), False),
    "sigmoid_written_out": (lambda x, wg, wu, bg, bu: (lambda g: g * torch.sigmoid(g))(x @ wg.t()) * (x @ wu.t()),
                            False),
    "chunk": (halves_of(F.silu), True),
    "chunk_bias": (halves_of(F.silu, bias=True), True),
    "up_half_first": (lambda x, w, b: (lambda h: h[..., I:] * F.silu(h[..., :I]))(F.linear(x, w)), True),
    "interleaved_bias": (halves_of(F.silu, interleaved=True, bias=True), True),
    "interleaved_tanh_gelu": (halves_of(lambda v: F.gelu(v, approximate="tanh"), interleaved=True), True),
}


@pytest.mark.parametrize("case", CPU_CASES)
def test_fused_swiglu_graphs_compute_what_they_replace(cpu_swiglu, case):
    from torch._subclasses.fake_tensor import FakeTensorMode

    layer, combined = CPU_CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 24, K).to(BF16)
    weights = [(torch.randn(*shape) / K ** 0.5).to(BF16) for shape in
               ([(2 * I, K), (2 * I,)] if combined else [(I, K), (I, K), (I,), (I,)])]
    args = (x, *weights)
    with FakeTensorMode():
        gm, _ = dual(layer, *[torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in args])
    got, want = gm(*args), layer(*args)  # the fused graph on CPU tensors, and torch's on the same
    assert got.shape == want.shape and got.dtype == want.dtype
    # torch rounds each product (and its bias's sum) to bf16 before the activation, which the
    # fused text does not: outputs of a few units differ by a few of bf16's half ulps (2^-8)
    torch.testing.assert_close(got.double(), want.double(), rtol=2 ** -6, atol=2 ** -5)
    # the check tells the gate from the up: not so close to the layer with their weights swapped
    if combined:
        w, b = weights
        halves = (lambda t: t.unflatten(0, (-1, 2)).flip(1).flatten(0, 1)) if "interleaved" in case else \
            (lambda t: torch.cat(t.chunk(2)[::-1]))
        swapped = [halves(w), halves(b)]
    else:
        swapped = [weights[1], weights[0], weights[3], weights[2]]
    assert (got.double() - layer(x, *swapped).double()).abs().max() > 0.25


OUTPUTS_CPU_CASES = {  # name: (the function, its tensors' shapes)
    "saved_preactivation": (lambda x, w, b: (lambda h: (F.silu(h) * h, h))(x @ w.t() + b), [(M, K), (N, K), (N,)]),
    "saved_bmm": (lambda x, w, b: (lambda h: (F.gelu(h + b), h))(torch.bmm(x, w)), [(B, 24, K), (B, K, N), (N,)]),
    "saved_gate_and_up": (saves_both, [(M, K), (I, K), (I, K)]),
    "saved_gate_up_first": (saves_the_gate_up_first, [(M, K), (I, K), (I, K)]),
    "saved_half": (saves_a_half, [(M, K), (2 * I, K)]),
}


@pytest.mark.parametrize("case", OUTPUTS_CPU_CASES)
def test_fused_graphs_with_outputs_compute_what_they_replace(cpu_outputs, case):
    """The fused graph run on CPU tensors, the *_outputs operators by their double-precision
    stand-ins, against torch's graph on the same tensors: D and each stored value."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    function, shapes = OUTPUTS_CPU_CASES[case]
    torch.manual_seed(0)
    args = [(torch.randn(*shape) / (K ** 0.5 if i else 1)).to(BF16) for i, shape in enumerate(shapes)]
    with FakeTensorMode():
        gm, done = fused(function, *[torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in args])
    done += swiglu_calls(gm)
    assert len(done) == 1 and done[0].target in (torch.ops.gemmkit.mm_epilogue_outputs.default,
                                                 torch.ops.gemmkit.swiglu_mm_outputs.default), gm.graph
    got, want = gm(*args), function(*args)
    assert len(got) == len(want)
    for value, expected in zip(got, want):
        assert value.shape == expected.shape and value.dtype == expected.dtype
        torch.testing.assert_close(value.double(), expected.double(), rtol=2 ** -6, atol=2 ** -5)


class MLP(torch.nn.Module):
    """A transformer's MLP block on CPU tensors: x + down(act(up(x))), its up-projection a SwiGLU
    pair (Llama's) or a linear layer with a bias and gelu."""

    def __init__(self, form, d, i):
        super().__init__()
        self.form = form

        def weight(*shape):
            return torch.nn.Parameter((torch.randn(*shape) / shape[-1] ** 0.5).to(BF16))

        self.wg, self.wu, self.wd, self.b = weight(i, d), weight(i, d), weight(d, i), weight(i)

    def forward(self, x):
        if self.form == "swiglu":
            h = F.silu(F.linear(x, self.wg)) * F.linear(x, self.wu)
        else:
            h = F.gelu(F.linear(x, self.wg, self.b))
        return x + F.linear(h, self.wd)


@pytest.mark.parametrize("form", ["swiglu", "gelu"])
def test_a_compiled_training_step_runs_the_backward_on_the_stored_values(cpu_kernels, cpu_swiglu, cpu_outputs,
                                                                         monkeypatch, form):
    """torch.compile of an MLP block's forward and backward on CPU tensors, the pass taking CPU
    tensors (_fusion.DEVICE) and gemmkit's operators their CPU stand-ins: Inductor compiles and
    runs the calls with outputs, its backward reads the values they stored, and the gradients are
    torch's within the roundings the fused texts skip."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(_fusion, "DEVICE", "cpu")
    torch.manual_seed(0)
    layer = MLP(form, 64, I)
    x = torch.randn(2, 16, 64).to(BF16).requires_grad_()
    up = torch.randn(2, 16, 64).to(BF16)
    before = _fusion.fusions
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        gemmkit.enable_compile_fusion()
        try:
            d = torch.compile(layer, fullgraph=True)(x)
            grads = torch.autograd.grad(d, (x, *layer.parameters()), up, allow_unused=True)
        finally:
            gemmkit.enable_compile_fusion(False)
    torch._dynamo.reset()
    # forward: the up-projection storing its products (or its pre-activation), the down-projection
    # with the residual; backward: two products with their elementwise work
    assert _fusion.fusions == before + 4
    eager = layer(x)
    want = torch.autograd.grad(eager, (x, *layer.parameters()), up, allow_unused=True)
    torch.testing.assert_close(d, eager, rtol=2 ** -6, atol=2 ** -5 * eager.abs().max().item())
    for got, expected in zip(grads, want):
        if expected is None:  # the bias of the other form
            assert got is None
            continue
        torch.testing.assert_close(got, expected, rtol=2 ** -6, atol=2 ** -5 * expected.abs().max().item())


# --- grouped (MoE) and FP8 products -------------------------------------------------------------

G = 4  # experts of the grouped tests
I32, E4M3 = torch.int32, torch.float8_e4m3fn
aten, ops = torch.ops.aten, torch.ops.gemmkit


def after_pass(function, *args):
    """The graph after the pass, and the gemmkit calls it made (as _fusion.fusions counts them)."""
    gm = graph_of(function, *args)
    before = _fusion.fusions
    made = _fusion.fuse_epilogues(gm.graph)
    assert _fusion.fusions == before + made
    gm.recompile()
    return gm, made


def written(gm, op):
    """The calls of `op`, an operator that writes into the out it is given, as the pass records
    them (auto_functionalized, as torch.compile records such a call)."""
    return [node for node in calls(gm, torch.ops.higher_order.auto_functionalized) if node.args[0] == op]


def uses(text):
    """(name, index) of each tensor the text names, by gemmkit's C++ parser."""
    return [(name, index) for name, index, *_ in gemmkit._gemmkit.epilogue_tensor_uses(text)]


def experts(x, w, offs):
    """The MoE product: each expert's rows of x [M, K] times its weight, w [G, N, K]."""
    return torch._grouped_mm(x, w.transpose(-2, -1), offs)


def down(x, w, offs, route):  # the down-projection, each token's output scaled by its router weight
    return (experts(x, w, offs) * route[:, None]).to(BF16)


def test_a_grouped_product_and_its_router_weight_become_one_grouped_epilogue(fake):
    x, w, offs, route = cuda(M, K), cuda(G, N, K), cuda(G, dtype=I32), cuda(M, dtype=F32)
    gm, made = after_pass(down, x, w, offs, route)
    done = written(gm, ops.grouped_mm_epilogue.default)
    assert made == 1 and len(done) == 1 and not calls(gm, aten._grouped_mm.default), gm.graph
    args = done[0].kwargs
    assert (placeholder(args["a"]), placeholder(args["b"].args[0]), placeholder(args["sizes"])) == \
        ("x_1", "w_1", "offs_1")
    assert args["b"].target == aten.permute.default and args["layout"] == "contiguous" and args["outputs"] == []
    assert args["names"] == ["t0"] and uses(args["epilogue"]) == [("t0", "m")] and "bf16(" in args["epilogue"]
    assert [tuple(t.meta["val"].shape) for t in args["inputs"]] == [(M, 1)]  # route[:, None], each row's own
    out = args["out"]  # D: a new [M, N] tensor of the graph's result's type, which the call fills
    assert out.target == aten.empty.memory_format and (tuple(out.meta["val"].shape), out.meta["val"].dtype) == \
        ((M, N), BF16)
    (d,) = done[0].users
    assert d.target is operator.getitem and d.args == (done[0], 1) and graph_outputs(gm) == d
    result = gm(x, w, offs, route)
    assert result.shape == (M, N) and result.dtype == BF16


def test_a_grouped_epilogue_reads_a_shared_bias_and_a_gate(fake):
    x, w, offs, bias, gate = cuda(M, K), cuda(G, N, K), cuda(G, dtype=I32), cuda(N), cuda(M, N)
    gm, made = after_pass(lambda x, w, o, b, g: F.silu(experts(x, w, o) + b) * g, x, w, offs, bias, gate)
    (done,) = written(gm, ops.grouped_mm_epilogue.default)
    assert made == 1 and not calls(gm, aten._grouped_mm.default) and not calls(gm, aten.exp.default)
    text = done.kwargs["epilogue"]
    assert uses(text) == [("t0", "n"), ("t1", "mn")] and "exp(" in text, text
    assert [placeholder(t) for t in done.kwargs["inputs"]] == ["b_1", "g_1"]


def test_grouped_values_that_escape_are_outputs_of_the_grouped_epilogue(fake):
    x, w, offs, bias = cuda(M, K), cuda(G, N, K), cuda(G, dtype=I32), cuda(N)

    def saved(x, w, o, b):  # the pre-activation kept, as a training step's forward graph keeps it
        h = experts(x, w, o) + b
        return F.silu(h), h

    gm, made = after_pass(saved, x, w, offs, bias)
    (done,) = written(gm, ops.grouped_mm_epilogue.default)
    assert made == 1 and not calls(gm, aten._grouped_mm.default) and not calls(gm, aten.exp.default)
    args = done.kwargs
    assert args["epilogue"].startswith("v1 = (acc + t0[n]); o0[m, n] = v1; ") and args["names"] == ["t0", "o0"]
    assert [(n.target, tuple(n.meta["val"].shape), n.meta["val"].dtype) for n in [args["out"], *args["outputs"]]] \
        == [(aten.empty.memory_format, (M, N), BF16)] * 2
    d, h = graph_outputs(gm)  # D, and the output: the call's written list's first
    assert d.args == (done, 1) and h.target is operator.getitem and h.args[0].args == (done, 2) and h.args[1] == 0


def with_val(gm, name, val):
    """gm with node `name`'s value `val`: graphs torch's own checks would not let it trace."""
    (node,) = [node for node in gm.graph.nodes if node.name == name]
    node.meta["val"] = val
    return gm


def test_grouped_refusals_leave_the_product(fake):
    x, w, offs = cuda(M, K), cuda(G, N, K), cuda(G, dtype=I32)
    refused = [
        (lambda x, w, o: torch.sin(experts(x, w, o)), (x, w, offs)),  # no sin in the epilogue language
        (lambda x, w, o: experts(x, w, o), (x, w, offs)),  # nothing after the product
        # torch's whole batches, 3-D x 3-D; the weight gradient, 2-D x 2-D; groups along N, 3-D x 2-D
        (lambda x, w: torch.relu(torch._grouped_mm(x, w.transpose(-2, -1))), (cuda(G, M, K), w)),
        (lambda x, dy, o: torch.relu(torch._grouped_mm(x.t(), dy, o)), (x, cuda(M, N), offs)),
        (lambda x, w, o: torch.relu(torch._grouped_mm(x, w, o)), (cuda(G, M, K), cuda(K, N), offs)),
        (lambda x, w, o: torch.relu(experts(x, w, o)), (torch.empty(M, K, dtype=BF16), torch.empty(G, N, K, dtype=BF16),
                                                       torch.empty(G, dtype=I32))),  # CPU tensors
    ]
    for function, args in refused:
        gm, made = after_pass(function, *args)
        assert not made and calls(gm, aten._grouped_mm.default), gm.graph
    # offsets other than int32, inputs of 32 bits or of two types (torch's _grouped_mm takes none)
    for name, val in [("o_1", offs.long()), ("x_1", x.float()), ("permute", w.transpose(-2, -1).half())]:
        gm = with_val(graph_of(lambda x, w, o: torch.relu(experts(x, w, o)), x, w, offs), name, val)
        assert not _fusion.fuse_epilogues(gm.graph) and calls(gm, aten._grouped_mm.default), name
    # a bias, which torch's _grouped_mm does not take yet: given to the traced product by hand
    gm = graph_of(lambda x, w, o, b: (torch.relu(experts(x, w, o)), b), x, w, offs, cuda(N))
    (product,) = calls(gm, aten._grouped_mm.default)
    product.args = (*product.args, next(node for node in gm.graph.nodes if node.name == "b_1"))
    assert not _fusion.fuse_epilogues(gm.graph) and calls(gm, aten._grouped_mm.default)


def chunked(x, w, o):  # silu(g) * u of the halves of one product with each expert's [2I, K] weight
    g, u = experts(x, w, o).chunk(2, dim=-1)
    return F.silu(g) * u


GROUPED_HALVES = {  # name: (the up-projection, whether its halves are interleaved)
    "chunk": (chunked, False),
    "slices_up_first": (lambda x, w, o: (lambda h: h[:, I:] * F.silu(h[:, :I]))(experts(x, w, o)), False),
    "split": (lambda x, w, o: (lambda g, u: F.silu(g) * u)(*experts(x, w, o).split(I, dim=-1)), False),
    "interleaved": (lambda x, w, o: (lambda h: F.silu(h[:, 0::2]) * h[:, 1::2])(experts(x, w, o)), True),
}


@pytest.mark.parametrize("form", GROUPED_HALVES)
def test_the_halves_of_a_grouped_product_become_one_grouped_dual_product(fake, form):
    up, interleaved = GROUPED_HALVES[form]
    x, w, offs = cuda(M, K), cuda(G, 2 * I, K), cuda(G, dtype=I32)
    gm, made = after_pass(up, x, w, offs)
    done = calls(gm, ops.grouped_swiglu_mm.default)
    assert made == 1 and len(done) == 1 and not calls(gm, aten._grouped_mm.default), gm.graph
    x_, w_, w_up, sizes, layout, interleaved_, text, names, inputs, dtype, max_sms = done[0].args
    # the experts' [G, 2I, K] weight as they store it, not the graph's transposed view
    assert (placeholder(x_), placeholder(w_), w_up, placeholder(sizes)) == ("x_1", "w_1", None, "o_1")
    assert (layout, interleaved_, names, inputs, dtype, max_sms) == ("contiguous", interleaved, [], [], BF16, 0)
    assert "exp(acc)" not in text and "neg(acc)" in text and "acc2" in text and not uses(text), text
    assert graph_outputs(gm) == done[0] and tuple(done[0].meta["val"].shape) == (M, I)


def test_a_router_weight_joins_the_grouped_dual_epilogue(fake):
    x, w, offs, route = cuda(M, K), cuda(G, 2 * I, K), cuda(G, dtype=I32), cuda(M, 1)
    gm, made = after_pass(lambda x, w, o, r: chunked(x, w, o) * r, x, w, offs, route)
    (done,) = calls(gm, ops.grouped_swiglu_mm.default)
    assert made == 1 and uses(done.args[6]) == [("t0", "m")] and [placeholder(t) for t in done.args[8]] == ["r_1"]


def test_grouped_halves_that_escape_are_outputs_of_the_grouped_dual_product(fake):
    x, w, offs = cuda(M, K), cuda(G, 2 * I, K), cuda(G, dtype=I32)

    def saved(x, w, o):  # the halves kept for the backward, as a training step's forward graph keeps them
        g, u = experts(x, w, o).chunk(2, dim=-1)
        return F.silu(g) * u, g, u

    gm, made = after_pass(saved, x, w, offs)
    (done,) = written(gm, ops.grouped_swiglu_mm_out.default)
    assert made == 1 and not calls(gm, aten._grouped_mm.default) and not calls(gm, ops.grouped_swiglu_mm.default)
    args = done.kwargs
    assert (placeholder(args["w"]), args["w_up"], args["interleaved"]) == ("w_1", None, False)
    assert args["epilogue"].startswith("o0[m, n] = acc; o1[m, n] = acc2; ") and args["names"] == ["o0", "o1"]
    assert [tuple(n.meta["val"].shape) for n in args["outputs"]] == [(M, I)] * 2
    d, g, u = graph_outputs(gm)
    assert d.args == (done, 1) and [(v.args[0].args, v.args[1]) for v in (g, u)] == [((done, 2), 0), ((done, 2), 1)]


def test_grouped_halves_refusals(fake):
    x, w, offs = cuda(M, K), cuda(G, 2 * I, K), cuda(G, dtype=I32)

    def kept_whole(x, w, o):  # the product kept whole beside its halves: no [M, I] value, two outputs in it
        h = experts(x, w, o)
        g, u = h.chunk(2, dim=-1)
        return F.silu(g) * u, h

    def unequal(x, w, o):  # 40 and 56 of 96 columns: no halves
        h = experts(x, w, o)
        return F.silu(h[:, :40]) * h[:, 40:].sum(-1, keepdim=True)

    for function in (kept_whole, unequal):
        gm, made = after_pass(function, x, w, offs)
        assert not made and calls(gm, aten._grouped_mm.default), gm.graph


def scaled(a, b, sa, sb, **kwargs):  # FP8 a [M, K] times b [N, K] transposed, as torch takes it
    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=kwargs.pop("out_dtype", BF16), **kwargs)


def fp8_scales(mode):
    """(scale_a, scale_b) of `mode` for a [M, K] @ [K, N] product: one value each, or a row's and a
    column's, as torch's _scaled_mm takes them."""
    shapes = [(), ()] if mode == "tensor" else [(M, 1), (1, N)]
    return tuple(cuda(shape, dtype=F32) for shape in shapes)


@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
def test_an_fp8_product_and_its_epilogue_become_one_scaled_gemm_epilogue(fake, mode):
    a, b, bias, gate = cuda(M, K, dtype=E4M3), cuda(N, K, dtype=E4M3), cuda(N), cuda(M, N)
    sa, sb = fp8_scales(mode)
    gm, made = after_pass(lambda a, b, sa, sb, c, g: F.silu(scaled(a, b, sa, sb, bias=c)) * g, a, b, sa, sb, bias,
                          gate)
    (done,) = written(gm, ops.gemm_epilogue.default)
    assert made == 1 and not calls(gm, aten._scaled_mm.default), gm.graph
    args = done.kwargs
    assert [placeholder(args[name]) for name in ("a", "scale_a", "scale_b")] == ["a_1", "sa_1", "sb_1"]
    assert placeholder(args["b"].args[0]) == "b_1" and (args["mode_a"], args["mode_b"]) == (mode, mode)
    assert (args["alpha"], args["beta"], args["c"], args["outputs"]) == (1.0, 0.0, None, [])
    text = args["epilogue"]  # the bias in the text, as addmm's
    assert text.startswith("v0 = acc + t0[n]; ") and uses(text) == [("t0", "n"), ("t1", "mn")], text
    assert (tuple(args["out"].meta["val"].shape), args["out"].meta["val"].dtype) == ((M, N), BF16)
    result = gm(a, b, sa, sb, bias, gate)
    assert result.shape == (M, N) and result.dtype == BF16


def test_an_fp8_product_that_escapes_is_an_output(fake):
    a, b = cuda(M, K, dtype=E4M3), cuda(N, K, dtype=E4M3)
    sa, sb = fp8_scales("rowwise")
    gm, made = after_pass(lambda a, b, sa, sb: (lambda p: (torch.relu(p), p))(scaled(a, b, sa, sb)), a, b, sa, sb)
    (done,) = written(gm, ops.gemm_epilogue.default)
    assert made == 1 and done.kwargs["epilogue"] == "o0[m, n] = acc; relu(acc)" and len(done.kwargs["outputs"]) == 1
    d, p = graph_outputs(gm)
    assert d.args == (done, 1) and p.args[0].args == (done, 2)


def test_fp8_refusals_leave_the_product(fake):
    a, b = cuda(M, K, dtype=E4M3), cuda(N, K, dtype=E4M3)
    one = cuda((), dtype=F32)
    refused = [
        (lambda a, b, sa, sb: torch.sin(scaled(a, b, sa, sb)), (a, b, one, one)),  # no sin in the language
        (lambda a, b, sa, sb: scaled(a, b, sa, sb), (a, b, one, one)),  # nothing after the product
        # torch's blockwise scales, A's 1x128 and B's 128x128 blocks (K = 256): neither one value nor a row's
        (lambda a, b, sa, sb: torch.relu(scaled(a, b, sa, sb)),
         (cuda(M, 256, dtype=E4M3), cuda(N, 256, dtype=E4M3), cuda(M, 2, dtype=F32), cuda(2, 1, dtype=F32))),
        # a scale of the result, which gemmkit's bf16 D has not
        (lambda a, b, sa, sb: torch.relu(scaled(a, b, sa, sb, scale_result=sa)), (a, b, one, one)),
        # an e4m3 result: the pass's epilogue stores bf16, f16 or f32
        (lambda a, b, sa, sb: scaled(a, b, sa, sb, out_dtype=E4M3).float() * 2, (a, b, one, one)),
        # a float64 tensor: not of the epilogue's types
        (lambda a, b, sa, sb, v: scaled(a, b, sa, sb).double() + v, (a, b, one, one, cuda(M, N, dtype=torch.float64))),
        (lambda a, b, sa, sb: torch.relu(scaled(a, b, sa, sb)),
         (torch.empty(M, K, dtype=E4M3), torch.empty(N, K, dtype=E4M3), torch.ones(()), torch.ones(()))),  # CPU
    ]
    for function, args in refused:
        gm, made = after_pass(function, *args)
        assert not made and calls(gm, aten._scaled_mm.default), gm.graph
    # other layouts (torch's _scaled_mm takes none: gemmkit's FP8 kernels read K-major operands),
    # AMD's FP8 type, scales other than float32
    for name, val in [("a_1", a.t().contiguous().t()), ("permute", b.t().contiguous()),
                      ("a_1", a.to(torch.float8_e4m3fnuz)), ("sa_1", one.double())]:
        gm = graph_of(lambda a, b, sa, sb: torch.relu(scaled(a, b, sa, sb)), a, b, one, cuda((), dtype=F32))
        gm = with_val(gm, name, val)
        assert not _fusion.fuse_epilogues(gm.graph) and calls(gm, aten._scaled_mm.default), name


def grouped_products(x, w, offs, interleaved=None):
    """Each group's rows of x times its weight w [G, N, K] in double ([acc]), or the gate's and
    the up's of a combined [G, 2I, K] weight, side by side or interleaved ([acc, acc2]); rows no
    group owns NaN, as a kernel leaves them undefined."""
    from cpu_stand_ins import grouped_mm_stand_in

    half = w.size(1) // 2
    weights = [w] if interleaved is None else [w[:, 0::2], w[:, 1::2]] if interleaved else [w[:, :half], w[:, half:]]
    return [grouped_mm_stand_in(x, v.transpose(-2, -1), offs, "contiguous", None, None, "none", "none",
                                torch.float64, 0, False) for v in weights]


def write_epilogue(text, acc, acc2, names, inputs, out, outputs):
    """D and each output of the text, by gemmkit's own evaluation in double, into out and outputs."""
    from gemmkit._epilogue_eval import evaluate as evaluate_text

    d, values = evaluate_text(text, acc, {name: t.double() for name, t in zip(names, inputs)}, acc2=acc2)
    out.copy_(d)
    for name, t in zip(names[len(inputs):], outputs):
        t.copy_(values[name])


def grouped_mm_epilogue_stand_in(a, b, sizes, out, layout, epilogue, names, inputs, outputs, max_sms, scale_a=None,
                                 scale_b=None, mode_a="none", mode_b="none", scale_d=None):
    (acc,) = grouped_products(a, b.transpose(-2, -1), sizes)
    write_epilogue(epilogue, acc, None, names, inputs, out, outputs)


def grouped_swiglu_stand_in(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, out_dtype, max_sms):
    out = x.new_empty(x.size(0), w.size(1) // 2, dtype=out_dtype or x.dtype)
    write_epilogue(epilogue, *grouped_products(x, w, sizes, interleaved), names, inputs, out, [])
    return out


def grouped_swiglu_out_stand_in(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs,
                                max_sms, scale_d=None):
    write_epilogue(epilogue, *grouped_products(x, w, sizes, interleaved), names, inputs, out, outputs)


def scaled_epilogue_stand_in(a, b, out, scale_a, scale_b, mode_a, mode_b, epilogue, names, inputs, outputs, alpha,
                             beta, c, scale_d=None):
    """gemm_epilogue of FP8 operands: a and b times their scales (one value, or a row's of A and
    a column's of B, broadcast), in double."""
    acc = (a.double() * scale_a.double()) @ (b.double() * scale_b.double())
    write_epilogue(epilogue, acc, None, names, inputs, out, outputs)


@pytest.fixture
def cpu_grouped():
    """The operators the pass makes of grouped and FP8 products on CPU tensors, by the
    double-precision stand-ins above, for the duration of a test."""
    yield from registered_on_cpu({"grouped_mm_epilogue": grouped_mm_epilogue_stand_in,
                                  "grouped_swiglu_mm": grouped_swiglu_stand_in,
                                  "grouped_swiglu_mm_out": grouped_swiglu_out_stand_in,
                                  "gemm_epilogue": scaled_epilogue_stand_in})


OFFS = [10, 10, 40, M]  # an empty expert; every row owned, so that the graphs' values are defined
GROUPED_CPU_CASES = {  # name: (the function, its tensors: shape and dtype)
    "router_weight": (down, [((M, K), BF16), ((G, N, K), BF16), None, ((M,), F32)]),
    "bias_silu_gate": (lambda x, w, o, b, g: F.silu(experts(x, w, o) + b) * g,
                       [((M, K), BF16), ((G, N, K), BF16), None, ((N,), BF16), ((M, N), BF16)]),
    "saved_preactivation": (lambda x, w, o, b: (lambda h: (F.gelu(h), h))(experts(x, w, o) + b),
                            [((M, K), BF16), ((G, N, K), BF16), None, ((N,), BF16)]),
    "swiglu_chunk": (chunked, [((M, K), BF16), ((G, 2 * I, K), BF16), None]),
    "swiglu_interleaved_routed": (lambda x, w, o, r: GROUPED_HALVES["interleaved"][0](x, w, o) * r,
                                  [((M, K), BF16), ((G, 2 * I, K), BF16), None, ((M, 1), BF16)]),
    "swiglu_saved_halves": (lambda x, w, o: (lambda g, u: (F.silu(g) * u, g, u))(*experts(x, w, o).chunk(2, -1)),
                            [((M, K), BF16), ((G, 2 * I, K), BF16), None]),
    "fp8_tensorwise": (lambda a, b, sa, sb, g: torch.relu(scaled(a, b, sa, sb)) * g,
                       [((M, K), E4M3), ((N, K), E4M3), ((), F32), ((), F32), ((M, N), BF16)]),
}


def cpu_args(shapes):
    """Random CPU tensors of `shapes` (None: the experts' offsets, OFFS), products of unit scale."""
    torch.manual_seed(0)
    return [torch.tensor(OFFS, dtype=I32) if s is None else
            (torch.rand(s[0]) + 0.5 if s[0] == () else torch.randn(s[0]) / (K ** 0.5 if i == 1 else 1)).to(s[1])
            for i, s in enumerate(shapes)]


def fused_on_cpu(function, args, monkeypatch):
    """The graph after the pass taking CPU tensors (_fusion.DEVICE), traced on fake tensors of args'
    shapes (the new tensors it makes for the calls to write lie where the graph's do), and its
    gemmkit calls."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(_fusion, "DEVICE", "cpu")
    with FakeTensorMode():
        gm, made = after_pass(function, *[torch.empty(t.shape, dtype=t.dtype) for t in args])
    targets = [ops.grouped_mm_epilogue.default, ops.grouped_swiglu_mm_out.default, ops.gemm_epilogue.default]
    return gm, made, calls(gm, ops.grouped_swiglu_mm.default) + [n for t in targets for n in written(gm, t)]


@pytest.mark.parametrize("case", GROUPED_CPU_CASES)
def test_fused_grouped_and_fp8_graphs_compute_what_they_replace(cpu_grouped, monkeypatch, case):
    """The fused graph run on CPU tensors, the operators by their double-precision stand-ins, against
    torch's graph (its _grouped_mm and tensor-wise _scaled_mm run on the CPU) on the same tensors."""
    function, shapes = GROUPED_CPU_CASES[case]
    args = cpu_args(shapes)
    gm, made, done = fused_on_cpu(function, args, monkeypatch)
    assert made == 1 and len(done) == 1, gm.graph
    assert not calls(gm, aten._grouped_mm.default) and not calls(gm, aten._scaled_mm.default)
    got, want = gm(*args), function(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for value, expected in zip(got, want):
        assert value.shape == expected.shape and value.dtype == expected.dtype
        # torch rounds each product to bf16 before its epilogue, which the fused text does not
        torch.testing.assert_close(value.double(), expected.double(), rtol=2 ** -6, atol=2 ** -5)
    if "swiglu" in case:  # the check tells the gate from the up: not so close with them swapped
        w = args[1]
        swapped = w.unflatten(1, (-1, 2)).flip(2).flatten(1, 2) if "interleaved" in case else \
            torch.cat(w.chunk(2, 1)[::-1], 1)
        other = function(args[0], swapped, *args[2:])
        other = other[0] if isinstance(other, tuple) else other
        assert (got[0].double() - other.double()).abs().max() > 0.25


def test_a_fused_rowwise_fp8_graph_computes_the_scaled_product(cpu_grouped, monkeypatch):
    """Row-wise scales (torch's _scaled_mm takes them only on CUDA): the fused graph on CPU tensors
    against the scaled product with its epilogue in double."""
    a, b = (torch.randn(*shape).clamp(-4, 4).to(E4M3) for shape in ((M, K), (N, K)))
    sa, sb, bias = torch.rand(M, 1) + 0.5, torch.rand(1, N) / K ** 0.5, torch.randn(N).to(BF16)
    gm, made, done = fused_on_cpu(lambda a, b, sa, sb, c: F.gelu(scaled(a, b, sa, sb, bias=c)), (a, b, sa, sb, bias),
                                  monkeypatch)
    assert made == 1 and [n.kwargs["mode_a"] for n in done] == ["rowwise"], gm.graph
    want = F.gelu((a.double() * sa.double()) @ (b.double() * sb.double().t()).t() + bias.double())
    got = gm(a, b, sa, sb, bias)
    assert got.dtype == BF16
    torch.testing.assert_close(got.double(), want, rtol=2 ** -7, atol=2 ** -7)


def test_a_compiled_moe_layer_runs_two_grouped_gemmkit_calls(cpu_grouped, monkeypatch):
    """torch.compile of an MoE layer's experts on CPU tensors, the pass taking CPU tensors
    (_fusion.DEVICE) and gemmkit's operators their stand-ins: the up-projection becomes one
    grouped_swiglu_mm, the down-projection and its router weights one grouped_mm_epilogue, which
    Inductor runs as it runs a traced gemmkit.grouped_mm with an epilogue (writing into a new
    out); the result is torch's within the roundings the fused texts skip."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(_fusion, "DEVICE", "cpu")

    def moe(x, w13, w2, offs, route):
        return down(chunked(x, w13, offs), w2, offs, route)

    x, w13, w2, offs, route = cpu_args([((M, K), BF16), ((G, 2 * I, K), BF16), ((G, K, I), BF16), None, ((M,), F32)])
    before = _fusion.fusions
    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
        gemmkit.enable_compile_fusion()
        try:
            d = torch.compile(moe, fullgraph=True)(x, w13, w2, offs, route)
        finally:
            gemmkit.enable_compile_fusion(False)
    torch._dynamo.reset()
    assert _fusion.fusions == before + 2
    eager = moe(x, w13, w2, offs, route)
    assert d.shape == eager.shape and d.dtype == eager.dtype
    torch.testing.assert_close(d, eager, rtol=2 ** -6, atol=2 ** -5 * eager.abs().max().item())


# --- on an sm_90 GPU ----------------------------------------------------------------------------

def gpu_rand(*shape, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(BF16)


def expect_swiglu(got, eager, x, gate, up, bg, bu, act, slope):
    """got (the fused graph's) within the f32 accumulation bound of act(g) * u in double (test_swiglu's
    bound, with act's slope), plus bf16's rounding of act's result and the output; and eager's within
    that plus the two roundings of g and u to bf16 the fused text does not make."""
    from gpu_reference import HALF_ULP

    x, gate, up = x.double(), gate.double(), up.double()
    k, half = x.shape[-1], HALF_ULP[BF16]
    g, u = x @ gate.t(), x @ up.t()
    bound_g, bound_u = (x.abs() @ gate.abs().t()) * k * 2.0 ** -24, (x.abs() @ up.abs().t()) * k * 2.0 ** -24
    if bg is not None:
        g, u = g + bg.double(), u + bu.double()
    a = act(g)
    want = a * u
    # f32's roundings in the epilogue (the bias's sum among them): 1e-6 of the magnitudes
    bound = slope * u.abs() * bound_g + a.abs() * bound_u + want.abs() * (2 * half + 1e-6) \
        + slope * g.abs() * u.abs() * 1e-6 + 1e-6
    eager_bound = bound + half * (slope * g.abs() * u.abs() + a.abs() * u.abs()) * 1.01
    assert torch.isfinite(got).all(), "non-finite outputs"
    for value, limit, name in ((got, bound, "fused"), (eager, eager_bound, "eager")):
        error = (value.double() - want).abs()
        assert (error <= limit).all(), f"{name}: max error {error.max().item()} over {(error - limit).max().item()}"
    assert ((got.double() - eager.double()).abs() <= bound + eager_bound).all()


class UpProjection(torch.nn.Module):
    """An MLP's up-projection in one of the forms models write it."""

    def __init__(self, form, k, i):
        super().__init__()
        self.form = form
        rows = 2 * i if form in ("chunk", "interleaved") else i
        self.w = torch.nn.Parameter(gpu_rand(rows, k, scale=k ** -0.5), requires_grad=False)
        self.w_up = torch.nn.Parameter(gpu_rand(i, k, scale=k ** -0.5), requires_grad=False)
        self.bg, self.bu = (torch.nn.Parameter(gpu_rand(i), requires_grad=False) for _ in range(2))

    def forward(self, x):
        if self.form == "pair":
            return F.silu(F.linear(x, self.w)) * F.linear(x, self.w_up)
        if self.form == "pair_gelu_biases":
            return F.gelu(F.linear(x, self.w, self.bg)) * F.linear(x, self.w_up, self.bu)
        h = F.linear(x, self.w)
        if self.form == "chunk":
            g, u = h.chunk(2, dim=-1)
            return F.silu(g) * u
        return F.silu(h[..., 0::2]) * h[..., 1::2]

    def weights(self):
        """(gate, up, gate's bias, up's bias) as [I, K] weights."""
        half = self.w.size(0) // 2
        if self.form == "chunk":
            return self.w[:half], self.w[half:], None, None
        if self.form == "interleaved":
            return self.w[0::2], self.w[1::2], None, None
        biased = self.form == "pair_gelu_biases"
        return self.w, self.w_up, self.bg if biased else None, self.bu if biased else None


@sm90
def test_the_outputs_operators_on_the_gpu():
    """The operators the pass makes where values escape, called eagerly: D and the outputs, each
    in its type, against double precision."""
    ops = torch.ops.gemmkit
    k = 256
    a, w, bias = gpu_rand(200, k), gpu_rand(96, k, scale=k ** -0.5), gpu_rand(96)
    d, pre, pre32 = ops.mm_epilogue_outputs(a, w.t(), "h = acc + b[n]; o0[m, n] = h; o1[m, n] = h; silu(h)",
                                            ["b", "o0", "o1"], [bias], BF16, ["bf16", "f32"])
    h = a.double() @ w.double().t() + bias.double()
    bound = 2.0 ** -12 * (a.double().abs() @ w.double().abs().t() + bias.double().abs()).max().item()
    assert [(tuple(v.shape), v.dtype) for v in (d, pre, pre32)] == [((200, 96), BF16)] * 2 + [((200, 96), F32)]
    torch.testing.assert_close(pre32.double(), h, rtol=0, atol=bound)
    torch.testing.assert_close(pre.double(), h, rtol=2 ** -8, atol=bound)
    torch.testing.assert_close(d.double(), F.silu(h), rtol=2 ** -7, atol=bound)
    x, wg, wu = gpu_rand(200, k), gpu_rand(96, k, scale=k ** -0.5), gpu_rand(96, k, scale=k ** -0.5)
    d, g, u = ops.swiglu_mm_outputs(x, wg, wu, False, "o0[m, n] = acc; o1[m, n] = acc2; silu(acc) * acc2",
                                    ["o0", "o1"], [], None, ["bf16", "bf16"])
    g_want, u_want = x.double() @ wg.double().t(), x.double() @ wu.double().t()
    torch.testing.assert_close(g.double(), g_want, rtol=2 ** -8, atol=bound)
    torch.testing.assert_close(u.double(), u_want, rtol=2 ** -8, atol=bound)
    torch.testing.assert_close(d.double(), F.silu(g_want) * u_want, rtol=2 ** -7, atol=bound)


def compiled(function):
    """function compiled anew with the pass, Inductor's caches off (a cached graph skips the pass,
    and so its count)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()

    def run(*args):
        with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            gemmkit.enable_compile_fusion()
            try:
                return torch.compile(function, fullgraph=True)(*args)
            finally:
                gemmkit.enable_compile_fusion(False)
    return run


@sm90
@pytest.mark.parametrize("form", ["pair", "pair_gelu_biases", "chunk", "interleaved"])
@pytest.mark.parametrize("lead", [(200,), (2, 100)])  # rows Inductor does not pad (pad_mm)
def test_compiled_up_projections_run_one_dual_product(form, lead):
    k, i = 256, 344
    layer = UpProjection(form, k, i)
    x = gpu_rand(*lead, k)
    before = _fusion.fusions
    with torch.no_grad():
        d = compiled(layer)(x)
        eager = layer(x)
    assert _fusion.fusions == before + 1  # the up-projection became one gemmkit.swiglu_mm
    assert d.shape == (*lead, i) and d.dtype == BF16
    gelu = form == "pair_gelu_biases"
    expect_swiglu(d, eager, x, *layer.weights(), F.gelu if gelu else F.silu, 1.13 if gelu else 1.1)
    torch._dynamo.reset()


@sm90
def test_a_training_graph_stores_the_products_for_the_backward():
    k, i = 128, 96
    x, wg, wu = gpu_rand(64, k).requires_grad_(), gpu_rand(i, k, scale=k ** -0.5), gpu_rand(i, k, scale=k ** -0.5)
    wg.requires_grad_(), wu.requires_grad_()
    layer = linear_pair(F.silu)
    before = _fusion.fusions
    d = compiled(layer)(x, wg, wu, None, None)
    # the forward graph keeps both products for the backward: one swiglu_mm_outputs, D and g and u
    assert _fusion.fusions == before + 1
    eager = layer(x, wg, wu, None, None)
    expect_swiglu(d.detach(), eager.detach(), x.detach(), wg.detach(), wu.detach(), None, None, F.silu, 1.1)
    up = gpu_rand(*d.shape)
    grads, want = torch.autograd.grad(d, (x, wg, wu), up), torch.autograd.grad(eager, (x, wg, wu), up)
    for got, expected in zip(grads, want):  # bf16 sums of bf16 terms each side: 2^-5 of the largest
        scale = expected.abs().max().item()
        torch.testing.assert_close(got, expected, rtol=2 ** -5, atol=2 ** -5 * scale)
    torch._dynamo.reset()


MOE_SIZES = [37, 0, 100, 63]  # each expert's tokens, an empty expert among them


@sm90
@pytest.mark.parametrize("form", ["chunk", "interleaved"])
def test_a_compiled_moe_up_projection_runs_one_grouped_dual_product(form):
    from gpu_reference import HALF_ULP, expect_near, offs_of, spans, swiglu_reference

    k, i = 256, 200
    x, w13, offs = gpu_rand(sum(MOE_SIZES), k), gpu_rand(len(MOE_SIZES), 2 * i, k, scale=k ** -0.5), offs_of(MOE_SIZES)
    up = GROUPED_HALVES[form][0]
    before = _fusion.fusions
    with torch.no_grad():
        d = compiled(up)(x, w13, offs)
        eager = up(x, w13, offs)
    assert _fusion.fusions == before + 1  # the grouped product and its halves' SwiGLU: one grouped_swiglu_mm
    assert d.shape == (sum(MOE_SIZES), i) and d.dtype == BF16
    gate, up_w = (w13[:, 0::2], w13[:, 1::2]) if form == "interleaved" else (w13[:, :i], w13[:, i:])
    for g, start, end in spans(MOE_SIZES):
        want, bound = swiglu_reference(x[start:end], gate[g], up_w[g])
        # torch's graph rounds silu's result to bf16 before the up, which the fused text keeps
        expect_near(d[start:end], want, bound + want.abs() * HALF_ULP[BF16])
    torch.testing.assert_close(d, eager, rtol=2 ** -6, atol=2 ** -5 * eager.abs().max().item())
    torch._dynamo.reset()


@sm90
def test_a_compiled_moe_down_projection_with_router_weights_runs_one_grouped_epilogue():
    from gpu_reference import expect_near, offs_of, spans

    k, n = 256, 192
    h, w2, offs = gpu_rand(sum(MOE_SIZES), k), gpu_rand(len(MOE_SIZES), n, k, scale=k ** -0.5), offs_of(MOE_SIZES)
    route = torch.rand(sum(MOE_SIZES), device="cuda")
    before = _fusion.fusions
    with torch.no_grad():
        d = compiled(down)(h, w2, offs, route)
        eager = down(h, w2, offs, route)
    assert _fusion.fusions == before + 1  # the grouped product and its router weights: one grouped_mm_epilogue
    assert d.shape == (sum(MOE_SIZES), n) and d.dtype == BF16
    for g, start, end in spans(MOE_SIZES):
        hg, wg, r = h[start:end].double(), w2[g].double(), route[start:end].double()[:, None]
        expect_near(d[start:end], (hg @ wg.t()) * r, (hg.abs() @ wg.abs().t()) * k * 2.0 ** -24 * r.abs())
    torch.testing.assert_close(d, eager, rtol=2 ** -6, atol=2 ** -5 * eager.abs().max().item())
    torch._dynamo.reset()


@sm90
@pytest.mark.parametrize("mode", ["tensor", "rowwise"])
def test_a_compiled_fp8_product_and_its_epilogue_run_one_gemmkit_call(mode):
    from gpu_reference import FP8_SUMS, HALF_ULP, dequantized, expect_near

    m, n, k = 200, 192, 256
    (qa, sa), (qw, sw) = gemmkit.quantize(gpu_rand(m, k), E4M3, mode), gemmkit.quantize(gpu_rand(n, k), E4M3, mode)
    bias, gate = gpu_rand(n), gpu_rand(m, n)

    def layer(a, b, sa, sb, c, g):
        return F.silu(scaled(a, b, sa, sb, bias=c)) * g

    args = (qa, qw, sa, sw.t().contiguous(), bias, gate)  # B's scales a row [1, N], as torch takes them
    before = _fusion.fusions
    d, eager = compiled(layer)(*args), layer(*args)
    assert _fusion.fusions == before + 1  # the scaled product, its bias and epilogue: one gemm_epilogue
    assert d.shape == (m, n) and d.dtype == BF16
    a, w = dequantized(qa, sa, mode), dequantized(qw, sw, mode)
    want = F.silu(a @ w.t() + bias.double()) * gate.double()
    # f32 sums of FP8 products (2^-10 of |a| |w|, gpu_reference), through silu (slope 1.1) and the
    # gate; torch's graph rounds silu's result to bf16 before the gate, which the fused text keeps
    bound = (a.abs() @ w.abs().t()) * (k * 2.0 ** -24 + FP8_SUMS) * 1.1 * gate.double().abs()
    expect_near(d, want, bound + want.abs() * HALF_ULP[BF16])
    torch.testing.assert_close(d, eager, rtol=2 ** -6, atol=2 ** -5 * eager.abs().max().item())
    torch._dynamo.reset()
