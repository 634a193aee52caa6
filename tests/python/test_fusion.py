"""The torch.compile pass (gemmkit.enable_compile_fusion) without a GPU: on post-grad-like graphs
(make_fx with Inductor's decompositions, fake CUDA tensors), which products with elementwise work
after them become one gemmkit.mm_epilogue, with what text, and each refusal: a value that
escapes, an operation or tensor shape the epilogue cannot take, other dtypes. Every positive
test asserts that the product was replaced. Needs torch, not a GPU; skips, saying so, without
torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import cuda  # noqa: E402

import gemmkit  # noqa: E402
from gemmkit import _fusion  # noqa: E402

F = torch.nn.functional
BF16, F32 = torch.bfloat16, torch.float32
M, N, K = 64, 96, 128


def graph_of(function, *args):
    """function's graph as Inductor's post-grad passes see it: aten operations, decomposed."""
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(function, decomposition_table=select_decomp_table(), tracing_mode="fake")(*args)


def calls(gm, target):
    return [node for node in gm.graph.nodes if node.op == "call_function" and node.target == target]


def fused(function, *args):
    """The graph after the pass, and its fused calls."""
    gm = graph_of(function, *args)
    _fusion.fuse_epilogues(gm.graph)
    gm.recompile()
    return gm, calls(gm, torch.ops.gemmkit.mm_epilogue.default)


def test_bias_silu_and_a_gate_become_one_product(fake):
    x, w, bias, gate = cuda(M, K), cuda(N, K), cuda(N), cuda(M, N)
    before = _fusion.fusions
    gm, done = fused(lambda x, w, b, g: F.silu(x @ w.t() + b) * g, x, w, bias, gate)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default) and _fusion.fusions == before + 1
    a, b, text, names, inputs, dtype = done[0].args
    assert names == ["t0", "t1"] and [t.target for t in inputs] == ["b_1", "g_1"] and dtype == BF16
    # silu decomposed by torch (x / (1 + exp(-x)) in float32), then rounded to bf16 before the gate
    program = gemmkit._gemmkit.epilogue_tensor_uses(text)
    assert [(name, index) for name, index, _ in program] == [("t0", "n"), ("t1", "mn")]
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


def test_a_value_that_escapes_ends_the_region_before_it(fake):
    x, w, bias = cuda(M, K), cuda(N, K), cuda(N)

    def both(x, w, b):  # the pre-activation is returned too, as a forward graph saves it
        h = x @ w.t() + b
        return F.silu(h), h

    gm, done = fused(both, x, w, bias)
    assert len(done) == 1 and not calls(gm, torch.ops.aten.mm.default)
    assert done[0].args[2] == "(acc + t0[n])", done[0].args[2]  # h alone: silu reads it outside
    outputs = list(gm.graph.nodes)[-1].args[0]
    assert done[0] in outputs
    assert calls(gm, torch.ops.aten.exp.default)  # silu's work stays torch's


def test_refusals_leave_the_product(fake):
    x, w = cuda(M, K), cuda(N, K)
    refused = [
        (lambda x, w: torch.sin(x @ w.t()), (x, w)),  # no sin in the epilogue language
        (lambda x, w: x @ w.t(), (x, w)),  # nothing after the product
        (lambda x, w, v: (x @ w.t()) * v, (x, w, cuda(1, 1))),  # a [1, 1] tensor: not [N], [M, 1] or [M, N]
        (lambda x, w, v: (x @ w.t()).double() + v, (x, w, cuda(M, N, dtype=torch.float64))),  # float64
        (lambda x, w: torch.relu(x @ w.t()), (cuda(M, K, dtype=F32), cuda(N, K, dtype=F32))),  # 32-bit inputs
    ]
    for function, args in refused:
        gm, done = fused(function, *args)
        assert not done and calls(gm, torch.ops.aten.mm.default), gm.graph


def test_a_strided_m_by_n_tensor_is_read_as_it_lies(fake):
    x, w, v = cuda(M, K), cuda(N, K), cuda(M, N, 2)[..., 0]
    gm, done = fused(lambda x, w, v: torch.tanh((x @ w.t()) + v), x, w, v)
    assert len(done) == 1 and "t0[m, n]" in done[0].args[2] and "tanh(" in done[0].args[2]


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
