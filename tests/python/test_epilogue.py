"""gemmkit.mm and grouped_mm with a fused epilogue on an sm_90 GPU: D and the auxiliary outputs
against the double-precision product with the epilogue evaluated in double by torch, for vectors
given 1-D or as the C++ API takes them, odd shapes, strided tensors, f32 and 16-bit outputs and
C, per-expert and per-token vectors, the grouped weight gradient's per-expert scalars, vectors
and outputs (an empty expert), scaled_grouped_mm's FP8 groups (rowwise, tensor, block;
contiguous and masked); the operator under opcheck and torch.compile, and
enable_compile_fusion's pass on a compiled layer and a compiled batched product. Each output
starts as NaN. Skips, saying so, without torch or an sm_90 GPU."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import HALF_ULP, expect_near, nan_like, rand, skip_without_sm90  # noqa: E402

skip_without_sm90()

import gemmkit  # noqa: E402

F32 = torch.float32


def product(a, b, alpha=1.0, beta=0.0, c=None):
    """alpha a @ b + beta c in double, and its bound: f32 accumulation over K."""
    a, b = a.double(), b.double()
    ref = alpha * (a @ b)
    if c is not None and beta != 0:
        ref = ref + beta * c.double()
    return ref, (a.abs() @ b.abs()) * abs(alpha) * a.shape[-1] * 2.0 ** -24


@pytest.mark.parametrize("m,n,k", [(1, 8, 64), (67, 45, 129), (256, 384, 512), (1000, 1032, 1000)])
def test_bias_silu_gate_and_a_saved_preactivation(m, n, k):
    a, b = rand(m, k), rand(k, n)
    bias, scale, gate = rand(n), rand(m, dtype=F32), rand(m, n)
    pre = nan_like((m, n), F32)
    d = gemmkit.mm(a, b, epilogue="h = acc * scale[m] + bias[n]; pre[m, n] = h; silu(h) * gate[m, n]",
                   bias=bias, scale=scale, gate=gate, pre=pre)
    ref, acc_bound = product(a, b)
    h = ref * scale.double()[:, None] + bias.double()[None, :]
    expect_near(pre, h, acc_bound * scale.double().abs()[:, None])
    # silu's slope is at most 1.1 and the gate multiplies it.
    want = torch.nn.functional.silu(h) * gate.double()
    expect_near(d, want, acc_bound * scale.double().abs()[:, None] * 1.1 * gate.double().abs())


def test_vectors_as_the_c_api_takes_them_strided_views_f32_out_and_c():
    m, n, k = 96, 200, 256
    a, b = rand(k, m).t(), rand(n, k).t()  # column-major A, K-major B
    bias = rand(1, 2 * n)[:, ::2]  # [1, N] with a column stride of 2
    scale = rand(m, 1, dtype=F32)
    residual = rand(m, 2 * n)[:, :n]  # row stride 2N
    c = rand(m, n)
    out = nan_like((m, n), F32)
    d = gemmkit.mm(a, b, out=out, alpha=0.5, beta=2.0, c=c, epilogue="relu(acc + bias[n]) * scale[m] + r[m, n]",
                   bias=bias, scale=scale, r=residual)
    assert d is out
    ref, acc_bound = product(a, b, 0.5, 2.0, c)
    want = torch.relu(ref + bias.double()) * scale.double() + residual.double()
    expect_near(d, want, acc_bound * scale.double().abs())


def test_nothing_outside_the_outputs_views_is_written():
    m, n, k = 70, 33, 96
    a, b = rand(m, k), rand(k, n)
    buffer = nan_like((m, 2 * n + 1), torch.bfloat16)
    saved = buffer[:, 1:n + 1]  # a view inside a larger buffer
    d = gemmkit.mm(a, b, epilogue="saved[m, n] = acc; gelu(acc)", saved=saved)
    ref, acc_bound = product(a, b)
    expect_near(saved, ref, acc_bound)
    expect_near(d, torch.nn.functional.gelu(ref), acc_bound * 1.2)
    assert torch.isnan(buffer[:, 0]).all() and torch.isnan(buffer[:, n + 1:]).all()


def test_bmm_with_per_batch_vectors_and_scaled_mm():
    batch, m, n, k = 3, 70, 136, 96
    a, b = rand(batch, m, k), rand(k, n)  # b shared by the batch
    bias, scale = rand(batch, n), rand(batch, m, dtype=F32)
    d = gemmkit.bmm(a, b, epilogue="relu(acc + bias[n]) * s[m]", bias=bias, s=scale)
    for i in range(batch):
        ref, acc_bound = product(a[i], b)
        s = scale[i].double()[:, None]
        expect_near(d[i], torch.relu(ref + bias[i].double()) * s, acc_bound * s.abs())
    qa, qb = rand(m, k).to(torch.float8_e4m3fn), rand(n, k).to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    gate = rand(m, n)
    d = gemmkit.scaled_mm(qa, qb.t(), one, one, out_dtype=F32, epilogue="silu(acc) * g[m, n]", g=gate)
    ref, acc_bound = product(qa.float(), qb.float().t())
    # FP8 sums accumulate in the tensor cores' narrower form: 2^-10 of |a| |b| (gpu_reference)
    fp8_bound = (qa.double().abs() @ qb.double().abs().t()) * 2.0 ** -10
    expect_near(d, torch.nn.functional.silu(ref) * gate.double(), (acc_bound + fp8_bound) * 1.1 * gate.double().abs())


def test_grouped_down_projection_with_expert_biases_and_router_weights():
    groups, k, n, rows = 4, 256, 192, [37, 0, 100, 63]  # an empty expert among them
    total = sum(rows)
    offs = torch.tensor(rows, device="cuda").cumsum(0).to(torch.int32)
    h, w = rand(total, k), rand(groups, n, k)
    bias, route = rand(groups, n), rand(total, dtype=F32)
    d = gemmkit.grouped_mm(h, w.transpose(-2, -1), offs, epilogue="(acc + bias[n]) * route[m]", bias=bias,
                           route=route)
    start = 0
    for g, count in enumerate(rows):
        ref, acc_bound = product(h[start:start + count], w[g].t())
        r = route[start:start + count].double()[:, None]
        expect_near(d[start:start + count], (ref + bias[g].double()) * r, acc_bound * r.abs())
        start += count


def test_grouped_weight_gradient_with_expert_scales_biases_and_a_saved_value():
    from gpu_reference import offs_of, spans
    sizes, p, q = [37, 0, 100, 63], 192, 136  # an empty expert: its acc is 0
    groups, owned = len(sizes), sum(sizes)
    dy, x = rand(owned + 5, p), rand(owned + 5, q)
    dy[owned:] = float("nan")  # rows past the last end: no group's, not contracted
    x[owned:] = float("nan")
    s, bias, scale = rand(groups, dtype=F32), rand(groups, q), rand(p, dtype=F32)
    r = rand(groups, p, 2 * q)[..., :q]  # one an expert, row stride 2Q
    saved, out = nan_like((groups, p, q), F32), nan_like((groups, p, q), F32)
    d = gemmkit.grouped_mm(dy.t(), x, offs_of(sizes), out=out, epilogue="h = acc * s[] + bias[n]; saved[m, n] = h; "
                           "h * scale[m] + r[m, n]", s=s, bias=bias, scale=scale, r=r, saved=saved)
    assert d is out
    silu = gemmkit.grouped_mm(dy.t(), x, offs_of(sizes), epilogue="silu(acc + bias[n])", bias=bias[0])
    assert silu.shape == (groups, p, q) and silu.dtype == torch.bfloat16
    c = scale.double()[:, None]
    for g, start, end in spans(sizes):
        ref, acc_bound = product(dy[start:end].t(), x[start:end])
        h = ref * s[g].double() + bias[g].double()
        expect_near(saved[g], h, acc_bound * s[g].double().abs())
        expect_near(d[g], h * c + r[g].double(), acc_bound * s[g].double().abs() * c.abs())
        # silu's slope is at most 1.1
        expect_near(silu[g], torch.nn.functional.silu(ref + bias[0].double()), acc_bound * 1.1)


@pytest.mark.parametrize("mode", ["rowwise", "tensor", "block"])
def test_scaled_grouped_down_projection_with_expert_biases_and_router_weights(mode):
    from gpu_reference import FP8_SUMS, dequantized, offs_of, spans
    e4m3, sizes, k, n = torch.float8_e4m3fn, [37, 0, 100, 63], 256, 192
    total = sum(sizes) + 5  # rows past the last end: not written
    h, w = rand(total, k) * 3, rand(len(sizes), n, k)
    w_block = (128, 128) if mode == "block" else None
    qh, sh = gemmkit.quantize(h, e4m3, mode)
    qw, sw = gemmkit.quantize(w, e4m3, mode, block=w_block)
    scale_w = {"rowwise": sw.squeeze(-1), "tensor": sw.view(-1), "block": sw.transpose(-2, -1)}[mode]
    scale_h = sh.squeeze(-1) if mode == "rowwise" else sh
    bias, route = rand(len(sizes), n), rand(total, dtype=F32)
    out = nan_like((total, n), F32)
    d = gemmkit.scaled_grouped_mm(qh, qw.transpose(-2, -1), scale_h, scale_w, offs_of(sizes), mode=mode, out=out,
                                  epilogue="(acc + bias[n]) * route[m]", bias=bias, route=route)
    assert d is out
    x, wd = dequantized(qh, sh, mode), dequantized(qw, sw, mode, w_block)
    for g, start, end in spans(sizes):
        ref = x[start:end] @ wd[g].t()
        r = route[start:end].double()[:, None]
        bound = (x[start:end].abs() @ wd[g].abs().t()) * FP8_SUMS  # FP8 sums (gpu_reference)
        expect_near(d[start:end], (ref + bias[g].double()) * r, bound * r.abs())
    assert out[sum(sizes):].isnan().all(), "rows past the last end written"


def test_scaled_grouped_masked_groups_with_a_weight_a_token():
    from gpu_reference import FP8_SUMS, dequantized
    e4m3, counts, max_m, k, n = torch.float8_e4m3fn, [3, 130, 0, 64], 136, 256, 128
    groups = len(counts)
    qx, sx = gemmkit.quantize(rand(groups, max_m, k), e4m3, "rowwise")
    qw, sw = gemmkit.quantize(rand(groups, n, k), e4m3, "rowwise")
    route = rand(groups, max_m, dtype=F32)
    out = nan_like((groups, max_m, n), torch.bfloat16)
    gemmkit.scaled_grouped_mm(qx, qw.transpose(-2, -1), sx.squeeze(-1), sw.squeeze(-1),
                              counts=torch.tensor(counts, device="cuda"), out=out, epilogue="silu(acc) * route[m]",
                              route=route)
    x, wd = dequantized(qx, sx, "rowwise"), dequantized(qw, sw, "rowwise")
    for g, count in enumerate(counts):
        ref = x[g, :count] @ wd[g].t()
        r = route[g, :count].double()[:, None]
        bound = (x[g, :count].abs() @ wd[g].abs().t()) * FP8_SUMS * 1.1 * r.abs()  # silu's slope: at most 1.1
        expect_near(out[g, :count], torch.nn.functional.silu(ref) * r, bound)
        assert out[g, count:].isnan().all(), f"group {g}: rows past its count written"


def test_compile_fusion_runs_bias_silu_and_a_gate_in_the_product():
    from gemmkit import _fusion

    m, n, k = 200, 328, 256
    x, w, bias, gate = rand(m, k), rand(n, k), rand(n), rand(m, n)
    gemmkit.enable_compile_fusion()
    try:
        before = _fusion.fusions
        layer = torch.compile(lambda x, w, b, g: torch.nn.functional.silu(x @ w.t() + b) * g, fullgraph=True)
        d = layer(x, w, bias, gate)
        assert _fusion.fusions == before + 1  # the product and its epilogue became one gemmkit call
    finally:
        gemmkit.enable_compile_fusion(False)
    ref, acc_bound = product(x, w.t())
    want = torch.nn.functional.silu(ref + bias.double()) * gate.double()
    # torch's graph rounds silu's result to bf16 before the gate, which the fused text keeps
    expect_near(d, want, acc_bound * 1.1 * gate.double().abs() + want.abs() * HALF_ULP[torch.bfloat16])


def test_compile_fusion_runs_a_batched_product_and_its_epilogue_in_one_call():
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from gemmkit import _fusion

    batch, m, n, k = 3, 100, 136, 192
    x, w, bias, scale = rand(batch, m, k), rand(batch, k, n), rand(batch, 1, n), rand(m, 1, dtype=F32)
    torch._dynamo.reset()
    gemmkit.enable_compile_fusion()
    try:
        before = _fusion.fusions
        with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            layer = torch.compile(lambda x, w, b, s: torch.nn.functional.gelu(torch.bmm(x, w) + b).float() * s,
                                  fullgraph=True)
            d = layer(x, w, bias, scale)
        assert _fusion.fusions == before + 1  # the batched product and its epilogue became one gemmkit call
    finally:
        gemmkit.enable_compile_fusion(False)
        torch._dynamo.reset()
    assert d.shape == (batch, m, n) and d.dtype == F32
    for i in range(batch):
        ref, acc_bound = product(x[i], w[i])
        s = scale.double()
        want = torch.nn.functional.gelu(ref + bias[i].double()) * s
        # gelu's slope is at most 1.13; torch's graph rounds gelu's result to bf16 before the f32
        # scale, which the fused text keeps
        expect_near(d[i], want, acc_bound * 1.13 * s.abs() + want.abs() * HALF_ULP[torch.bfloat16])


def test_the_operator_under_opcheck_and_torch_compile():
    m, n, k = 128, 256, 192
    a, w, bias = rand(m, k), rand(n, k), rand(n)
    pre = nan_like((m, n), torch.bfloat16)
    out = nan_like((m, n), torch.bfloat16)
    torch.library.opcheck(torch.ops.gemmkit.gemm_epilogue,
                          (a, w.t(), out, None, None, "none", "none", "p[m, n] = acc + b[n]; silu(acc + b[n])",
                           ["b", "p"], [bias.view(1, n)], [pre], 1.0, 0.0, None))

    def layer(x, weight, b):
        return gemmkit.mm(x, weight.t(), epilogue="silu(acc + b[n])", b=b) * 2

    compiled = torch.compile(layer, fullgraph=True)
    ref, acc_bound = product(a, w.t())
    expect_near(compiled(a, w, bias) / 2, torch.nn.functional.silu(ref + bias.double()), acc_bound * 1.1)
