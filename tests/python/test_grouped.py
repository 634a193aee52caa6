"""gemmkit's grouped products (grouped_mm, scaled_grouped_mm) on an sm_90 GPU, each group against
its own double-precision product (bounds as test_torch.py's): contiguous groups, empty ones
first, in the middle and last, one-row groups, sizes off every multiple of 8 and rows past the
last end; the weight gradient; masked groups; FP8 in rowwise, tensor and block modes; int32 and
int64 sizes; outputs NaN-filled first, so that rows no group owns are seen to stay untouched;
autograd against per-group double math; the operators under opcheck, torch.compile and CUDA
graphs replayed with new sizes in the same offs tensor. Skips, saying so, without torch or an
sm_90 GPU."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import (E4M3, FP8_SUMS, capture, dequantized, expect_close, expect_grads, nan_like,  # noqa: E402
                           offs_of, rand, skip_without_sm90, spans)

skip_without_sm90()

import gemmkit  # noqa: E402

BF16, F16, F32, I32, I64 = torch.bfloat16, torch.float16, torch.float32, torch.int32, torch.int64
# Each group's rows: empty groups first, in the middle and last, one row, sizes off every
# multiple of 8; one group; equal groups.
SIZES = [[0, 37, 0, 1, 130, 5, 0], [200], [64] * 8]


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("offs_dtype", [I32, I64])
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_contiguous_groups(sizes, offs_dtype, dtype):
    m, k, n = sum(sizes) + 11, 256, 136  # 11 rows past the last end
    a, w = rand(m, k, dtype=dtype), rand(len(sizes), n, k, dtype=dtype)  # weights [G, N, K]
    offs = offs_of(sizes, offs_dtype)
    # The forward's weights as they are stored, and [G, K, N] as the input gradient reads them.
    for b in (w.transpose(-2, -1), w.transpose(-2, -1).contiguous()):
        out = nan_like((m, n), dtype)
        assert gemmkit.grouped_mm(a, b, offs, out=out) is out
        for g, start, end in spans(sizes):
            expect_close(out[start:end], a[start:end], b[g])
        assert out[sum(sizes):].isnan().all(), "rows past the last end written"
    d = gemmkit.grouped_mm(a, w.transpose(-2, -1), offs, out_dtype=F32)
    assert d.shape == (m, n) and d.dtype == F32
    for g, start, end in spans(sizes):
        expect_close(d[start:end], a[start:end], w[g].t())


def test_operands_tma_cannot_read_are_copied_first():
    sizes = [5, 0, 40, 17]
    x = rand(sum(sizes), 101)[:, 1:]  # K = 100: rows 2 bytes past 16-byte boundaries
    w = rand(4, 72, 100)  # K-major weights whose rows are 200 bytes apart
    d = gemmkit.grouped_mm(x, w.transpose(-2, -1), offs_of(sizes), max_sms=8)
    for g, start, end in spans(sizes):
        expect_close(d[start:end], x[start:end], w[g].t())


@pytest.mark.parametrize("offs_dtype", [I32, I64])
@pytest.mark.parametrize("p,q", [(128, 192), (36, 40)])
def test_weight_gradient(offs_dtype, p, q):
    sizes = [0, 37, 0, 1, 130, 5, 0]
    m = sum(sizes) + 9
    x, dy = rand(m, p), rand(m, q)
    x[sum(sizes):] = float("nan")  # rows no group owns are not read
    dy[sum(sizes):] = float("nan")
    offs = offs_of(sizes, offs_dtype)
    out = nan_like((len(sizes), p, q), F32)
    assert gemmkit.grouped_mm(x.t(), dy, offs, out=out) is out
    for g, start, end in spans(sizes):
        expect_close(out[g], x[start:end].t(), dy[start:end])  # an empty group: exact zeros
    # a stored [P, M_total] row-major is copied to the layout the kernel reads.
    d = gemmkit.grouped_mm(x.t().contiguous(), dy, offs)
    assert d.shape == (len(sizes), p, q) and d.dtype == BF16
    for g, start, end in spans(sizes):
        expect_close(d[g], x[start:end].t(), dy[start:end])


@pytest.mark.parametrize("counts_dtype", [I32, I64])
def test_masked_groups(counts_dtype):
    counts = [0, 1, 37, 64, 5]
    groups, max_m, k, n = len(counts), 64, 192, 72
    a, w = rand(groups, max_m, k), rand(groups, n, k)
    out = nan_like((groups, max_m, n), BF16)
    counts_t = torch.tensor(counts, device="cuda", dtype=counts_dtype)
    assert gemmkit.grouped_mm(a, w.transpose(-2, -1), counts=counts_t, out=out) is out
    for g, count in enumerate(counts):
        expect_close(out[g, :count], a[g, :count], w[g].t())
        assert out[g, count:].isnan().all(), f"group {g}: rows past its count written"


# --- FP8 ---------------------------------------------------------------------------------------

def quantized(x, w, mode):
    """x [..., K] and weights w [G, N, K] quantised in `mode` (weights in 128x128 blocks for
    'block'), with the scales as scaled_grouped_mm takes them (torch's shapes where torch has
    them), and x and w dequantised in double."""
    w_block = (128, 128) if mode == "block" else None
    qx, sx = gemmkit.quantize(x, E4M3, mode)
    qw, sw = gemmkit.quantize(w, E4M3, mode, block=w_block)
    scales = {"rowwise": (sx.squeeze(-1), sw.squeeze(-1)),  # [M_total] or [G, max_m], and [G, N]
              "tensor": (sx, sw.view(-1)),  # one scale, and one a group
              "block": (sx, sw.transpose(-2, -1))}[mode]  # [..., K/128], and [G, K/128, N/128]
    return (qx, qw.transpose(-2, -1), *scales), (dequantized(qx, sx, mode), dequantized(qw, sw, mode, w_block))


@pytest.mark.parametrize("mode", ["rowwise", "tensor", "block"])
def test_scaled_contiguous_groups(mode):
    sizes = [0, 37, 0, 1, 130, 5, 0]
    m, k, n = sum(sizes) + 7, 640, 384
    operands, (x, w) = quantized(rand(m, k) * 3, rand(len(sizes), n, k), mode)
    out = nan_like((m, n), F32)
    assert gemmkit.scaled_grouped_mm(*operands, offs_of(sizes), mode=mode, out=out) is out
    for g, start, end in spans(sizes):
        expect_close(out[start:end], x[start:end], w[g].t(), accumulation=FP8_SUMS)
    assert out[sum(sizes):].isnan().all(), "rows past the last end written"
    d = gemmkit.scaled_grouped_mm(*operands, offs_of(sizes, I64), mode=mode)
    assert d.dtype == BF16
    for g, start, end in spans(sizes):
        expect_close(d[start:end], x[start:end], w[g].t(), accumulation=FP8_SUMS)


@pytest.mark.parametrize("mode", ["rowwise", "tensor", "block"])
def test_scaled_masked_groups(mode):
    counts = [3, 130, 0, 64]
    groups, max_m, k, n = len(counts), 136, 256, 256
    operands, (x, w) = quantized(rand(groups, max_m, k), rand(groups, n, k), mode)
    out = nan_like((groups, max_m, n), BF16)
    counts_t = torch.tensor(counts, device="cuda")
    assert gemmkit.scaled_grouped_mm(*operands, counts=counts_t, mode=mode, out=out) is out
    for g, count in enumerate(counts):
        expect_close(out[g, :count], x[g, :count], w[g].t(), accumulation=FP8_SUMS)
        assert out[g, count:].isnan().all(), f"group {g}: rows past its count written"


# --- autograd, operators, compile, graphs ----------------------------------------------------------

def test_autograd_of_contiguous_groups_against_double():
    sizes = [0, 37, 0, 1, 130, 5, 0]
    m, k, n = sum(sizes) + 9, 128, 96
    x, w = rand(m, k, requires_grad=True), rand(len(sizes), n, k, requires_grad=True)

    def reference(x, w):  # rows past the last end are no group's: their gradient is 0
        return torch.cat([x[start:end] @ w[g].t() for g, start, end in spans(sizes)] + [x.new_zeros(9, n)])

    expect_grads(gemmkit.grouped_mm(x, w.transpose(-2, -1), offs_of(sizes)), (x, w), reference)


def test_three_d_by_three_d_is_torchs_batched_case_with_gradients():
    a, b = rand(4, 70, 64, requires_grad=True), rand(4, 64, 40, requires_grad=True)
    d = gemmkit.grouped_mm(a, b)
    expect_close(d, a, b)
    expect_grads(gemmkit.grouped_mm(a, b), (a, b), torch.matmul)


def test_three_d_by_two_d_groups_columns_with_gradients():
    sizes = [30, 0, 66, 1]  # columns of b a group, one empty
    m, k, n = 50, 64, sum(sizes)
    a, b = rand(len(sizes), m, k, requires_grad=True), rand(k, n, requires_grad=True)

    def reference(a, b):
        return torch.cat([a[g] @ b[:, start:end] for g, start, end in spans(sizes)], dim=1)

    d = gemmkit.grouped_mm(a, b, offs_of(sizes))
    for g, start, end in spans(sizes):
        expect_close(d[:, start:end], a[g], b[:, start:end])
    expect_grads(d, (a, b), reference)


def test_autograd_of_masked_groups_against_double():
    counts = [0, 1, 37, 64, 5]
    max_m, k, n = 64, 128, 96
    a = rand(len(counts), max_m, k)
    for g, count in enumerate(counts):
        a[g, count:] = float("nan")  # rows past each count may hold anything
    a.requires_grad_()
    b = rand(len(counts), k, n, requires_grad=True)

    def reference(a, b):
        return torch.stack([torch.cat([a[g, :c] @ b[g], a.new_zeros(max_m - c, n)]) for g, c in enumerate(counts)])

    out = gemmkit.grouped_mm(a, b, counts=torch.tensor(counts, device="cuda"))
    expect_grads(out, (a, b), reference)


def test_autograd_of_the_weight_gradient_against_double():
    sizes = [0, 37, 0, 1, 130, 5, 0]
    m = sum(sizes) + 9
    x, dy = rand(m, 64, requires_grad=True), rand(m, 48, requires_grad=True)

    def reference(x, dy):
        return torch.stack([x[start:end].t() @ dy[start:end] for _, start, end in spans(sizes)])

    expect_grads(gemmkit.grouped_mm(x.t(), dy, offs_of(sizes)), (x, dy), reference)


def test_opcheck():
    ops = torch.ops.gemmkit
    offs = offs_of([5, 0, 11])  # every row owned, so that outputs are defined throughout
    a, b = rand(16, 64, requires_grad=True), rand(3, 64, 32, requires_grad=True)
    x, y = rand(16, 48, requires_grad=True), rand(16, 40, requires_grad=True)
    contiguous = (a, b, offs, "contiguous", None, None, "none", "none", None, 0, False)
    torch.library.opcheck(ops.grouped_mm.default, contiguous)
    counts = torch.tensor([8, 0, 3], device="cuda")
    masked = (rand(3, 8, 64, requires_grad=True), b, counts, "masked", None, None, "none", "none", F32, 0, True)
    torch.library.opcheck(ops.grouped_mm.default, masked)
    torch.library.opcheck(ops.grouped_wgrad.default, (x, y, offs, None, None, "none", "none", None, 0))
    out = torch.empty(16, 32, device="cuda")
    torch.library.opcheck(ops.grouped_mm_out.default,
                          (a.detach(), b.detach(), offs, out, "contiguous", None, None, "none", "none", 0))
    wgrad_out = torch.empty(3, 48, 40, device="cuda")
    torch.library.opcheck(ops.grouped_wgrad_out.default,
                          (x.detach(), y.detach(), offs, wgrad_out, None, None, "none", "none", 0))
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs.
    (qa, qb, sa, sb), _ = quantized(a.detach(), b.detach().transpose(-2, -1), "rowwise")
    torch.library.opcheck(ops.grouped_mm.default, (qa, qb, offs, "contiguous", sa, sb.unsqueeze(-2), "rowwise",
                                                   "rowwise", None, 0, False), test_utils="test_faketensor")


def test_autograd_runs_gemmkit_and_compiles(monkeypatch):
    launches = []
    for name in ("launch_grouped", "launch_grouped_wgrad"):
        launch = getattr(gemmkit._torch, name)
        monkeypatch.setattr(gemmkit._torch, name, lambda *args, launch=launch: launches.append(1) or launch(*args))

    def loss(x, w, offs):
        return gemmkit.grouped_mm(x, w.transpose(-2, -1), offs).float().square().mean()

    sizes = [100, 0, 28, 128]  # every row owned: the loss reads the whole output
    x, w = rand(sum(sizes), 256, requires_grad=True), rand(len(sizes), 192, 256, requires_grad=True)
    offs = offs_of(sizes)
    eager = torch.autograd.grad(loss(x, w, offs), (x, w))
    assert len(launches) == 3, "the forward product and both gradients run gemmkit"
    compiled = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x, w, offs), (x, w))
    assert len(launches) == 6, "compiled, the forward product and both gradients still run gemmkit"
    for e, c in zip(eager, compiled):
        assert torch.allclose(e.float(), c.float(), rtol=2.0 ** -7, atol=1e-6)


def test_cuda_graph_replays_with_new_offs():
    groups, m, k, n = 4, 512, 256, 128
    x, w, dy = rand(m, k), rand(groups, n, k), rand(m, n)
    offs = offs_of([100, 50, 0, 200], I64)

    def step():
        return gemmkit.grouped_mm(x, w.transpose(-2, -1), offs), gemmkit.grouped_mm(x.t(), dy, offs, out_dtype=F32)

    graph, (y, wg) = capture(step)
    for sizes in ([0, 300, 150, 0], [7, 1, 1, 1], [128] * 4):
        offs.copy_(offs_of(sizes, I64))  # new values in the tensor the graph reads
        y.fill_(float("nan"))
        wg.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for g, start, end in spans(sizes):
            expect_close(y[start:end], x[start:end], w[g].t())
            expect_close(wg[g], x[start:end].t(), dy[start:end])
        assert y[sum(sizes):].isnan().all(), "rows past the last end written"


def test_misuse_raises_with_the_argument_named():
    x, w, offs = rand(64, 128), rand(4, 96, 128), offs_of([16] * 4)
    (qx, qw, sx, sw), _ = quantized(x, w, "rowwise")
    with pytest.raises(ValueError, match=r"^scale_b: shape \[1, 95\] does not fit rowwise scaling"):
        gemmkit.scaled_grouped_mm(qx, qw, sx, sw[:, :95], offs)
    with pytest.raises(ValueError, match="^options.max_sms: -1"):
        gemmkit.grouped_mm(x, w.transpose(-2, -1), offs, max_sms=-1)
    with pytest.raises(ValueError, match="^out: 2 dimensions; expected 3$"):
        gemmkit.grouped_mm(x.t(), x, offs, out=torch.empty(128, 128, device="cuda"))
    with pytest.raises(RuntimeError, match="^out: gemmkit functions with out= do not support automatic"):
        gemmkit.grouped_mm(rand(64, 128, requires_grad=True), w.transpose(-2, -1), offs, out=nan_like((64, 96), F32))
