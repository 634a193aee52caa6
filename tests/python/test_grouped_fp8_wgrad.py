"""scaled_grouped_mm's FP8 weight gradient (torch._scaled_grouped_mm's 2-D a and b) on an sm_90
GPU: out[g] = (a's group-g columns * scale_a) @ (b's group-g rows * scale_b), each group against
the double-precision product of its dequantised operands, within expect_close's FP8 bound
(FP8_SUMS, as test_grouped.py's). Rowwise scales as torch passes them ([G*P], [G*Q]) and as
[G, P], [G, Q]; tensor-wise ones single or one a group; a mixed pair of modes; e4m3, e5m2 and the
two mixed; empty groups first, in the middle and last, groups of 1, 37 and 200 rows, one group
of every row; P and Q not multiples of 64; columns of a and rows of b past the last end NaN
(read by no group); bfloat16 and float32 outputs, NaN-filled where passed as out=; int32 and
int64 offs; operands in torch's layout, row-major and at unaligned addresses; a fused epilogue
with a scale and a bias an expert (empty experts: the epilogue of 0); scales of no layout
refused; the operators under opcheck and torch.compile(fullgraph=True). Skips, saying so,
without torch or an sm_90 GPU."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import (E4M3, E5M2, FP8_SUMS, expect_close, nan_like, offs_of, skip_without_sm90,  # noqa: E402
                           spans)

skip_without_sm90()

import gemmkit  # noqa: E402

BF16, F32, I64 = torch.bfloat16, torch.float32, torch.int64
SIZES = [0, 1, 37, 0, 200, 0]  # each group's rows of b (columns of a)
PAST = 5  # rows of b (columns of a) past the last end
P, Q = 100, 72


def fp8_operands(p, q, dtypes, sizes=SIZES):
    """a [P, M_total] and b [M_total, Q] of random FP8 values (of dtypes[0] and dtypes[1]) in
    torch's layout: a row-major, b column-major, both contiguous along M_total. Their PAST
    columns and rows past the last end are NaN."""
    m, end = sum(sizes) + PAST, sum(sizes)
    a, bt = torch.randn(p, m, device="cuda"), torch.randn(q, m, device="cuda")
    a[:, end:] = float("nan")
    bt[:, end:] = float("nan")
    return a.to(dtypes[0]), bt.to(dtypes[1]).t()


def random_scales(p, q, modes=("rowwise", "rowwise"), forms=("flat", "flat"), groups=len(SIZES)):
    """Random float32 scales of a and b in `modes` and `forms` ('flat': rowwise [G*P] and [G*Q],
    torch's; 'grouped': rowwise [G, P] and [G, Q] or tensor-wise [G]; 'single': one tensor-wise
    value, 0-d), and the same as [G, P] and [G, Q] doubles."""
    given, doubles = [], []
    for mode, form, n in zip(modes, forms, (p, q)):
        if mode == "rowwise":
            s = torch.rand(groups, n, device="cuda") + 0.5
            given.append(s.view(-1) if form == "flat" else s)
            doubles.append(s.double())
        else:
            s = torch.rand(() if form == "single" else (groups,), device="cuda") + 0.5
            given.append(s)
            doubles.append(s.double().reshape(-1, 1).expand(groups, n))
    return given, doubles


def expect_groups(out, a, b, sa, sb, sizes=SIZES):
    """out[g] against group g's columns of a and rows of b dequantised by sa [G, P] and sb [G, Q],
    in double: exact zeros for an empty group."""
    assert out.shape == (len(sizes), a.size(0), b.size(1))
    for g, start, end in spans(sizes):
        expect_close(out[g], a[:, start:end].double() * sa[g, :, None], b[start:end].double() * sb[g],
                     accumulation=FP8_SUMS)


@pytest.mark.parametrize("out_dtype", [BF16, F32])
@pytest.mark.parametrize("dtypes", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)], ids=["e4m3", "e5m2", "e4m3-e5m2"])
@pytest.mark.parametrize("mode,forms", [("rowwise", ("flat", "flat")), ("rowwise", ("grouped", "grouped")),
                                        ("tensor", ("single", "single")), ("tensor", ("grouped", "grouped")),
                                        (("tensor", "rowwise"), ("single", "flat"))])
def test_matches_double_per_group(mode, forms, dtypes, out_dtype):
    a, b = fp8_operands(P, Q, dtypes)
    (scale_a, scale_b), (sa, sb) = random_scales(P, Q, (mode, mode) if isinstance(mode, str) else mode, forms)
    out = nan_like((len(SIZES), P, Q), out_dtype)
    assert gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs_of(SIZES), mode=mode, out=out) is out
    expect_groups(out, a, b, sa, sb)
    d = gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs_of(SIZES, I64), mode=mode, out_dtype=out_dtype)
    assert d.dtype == out_dtype
    expect_groups(d, a, b, sa, sb)


@pytest.mark.parametrize("p,q", [(100, 72), (264, 129), (1, 17)])
@pytest.mark.parametrize("layout", ["torch", "row-major", "unaligned"])
def test_operand_layouts(layout, p, q):
    a, b = fp8_operands(p, q, (E4M3, E4M3))
    if layout == "row-major":  # as activations and output gradients lie: a = x.t() for x [M_total, P]
        a, b = a.t().contiguous().t(), b.contiguous()
    elif layout == "unaligned":  # one byte past 16-byte boundaries, rows of M_total + 1 bytes
        a = torch.empty(p, a.size(1) + 1, device="cuda", dtype=E4M3)[:, 1:].copy_(a)
        b = torch.empty(q, b.size(0) + 1, device="cuda", dtype=E4M3)[:, 1:].t().copy_(b)
    (scale_a, scale_b), (sa, sb) = random_scales(p, q)
    d = gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs_of(SIZES), max_sms=8)
    assert d.dtype == BF16
    expect_groups(d, a, b, sa, sb)


def test_one_group_of_every_row():
    sizes = [300]
    a, b = fp8_operands(P, Q, (E5M2, E4M3), sizes)
    (scale_a, scale_b), (sa, sb) = random_scales(P, Q, groups=1)
    expect_groups(gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs_of(sizes)), a, b, sa, sb, sizes)


@pytest.mark.parametrize("mode,forms", [("rowwise", ("flat", "flat")), ("tensor", ("grouped", "grouped"))])
def test_a_fused_epilogue_with_a_scale_and_a_bias_an_expert(mode, forms):
    from gpu_reference import expect_near
    a, b = fp8_operands(P, Q, (E4M3, E4M3))
    (scale_a, scale_b), (sa, sb) = random_scales(P, Q, (mode, mode), forms)
    groups = len(SIZES)
    s, bias = torch.rand(groups, device="cuda") + 0.5, torch.randn(groups, Q, device="cuda")
    out = nan_like((groups, P, Q), F32)
    d = gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs_of(SIZES), mode=mode, out=out,
                                  epilogue="silu(acc * s[] + bias[n])", s=s, bias=bias)
    assert d is out
    for g, start, end in spans(SIZES):  # empty groups: silu(bias)
        x, y = a[:, start:end].double() * sa[g, :, None], b[start:end].double() * sb[g]
        bound = (x.abs() @ y.abs()) * FP8_SUMS * s[g].double()  # FP8 sums (gpu_reference), scaled by s
        expect_near(out[g], torch.nn.functional.silu((x @ y) * s[g].double() + bias[g].double()), bound, slope=1.1)


def test_compiled_with_fullgraph_runs_gemmkit(monkeypatch):
    launches = []
    launch = gemmkit._torch.launch_grouped_wgrad
    monkeypatch.setattr(gemmkit._torch, "launch_grouped_wgrad", lambda *args, **kwargs: launches.append(1) or launch(*args, **kwargs))

    def wgrad(a, b, scale_a, scale_b, offs, out):
        gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out=out)
        return gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b, offs, out_dtype=F32)

    a, b = fp8_operands(P, Q, (E4M3, E4M3))
    (scale_a, scale_b), (sa, sb) = random_scales(P, Q)
    out = nan_like((len(SIZES), P, Q), BF16)
    d = torch.compile(wgrad, fullgraph=True)(a, b, scale_a, scale_b, offs_of(SIZES), out)
    assert len(launches) == 2, "both products run gemmkit"
    assert d.dtype == F32
    expect_groups(out, a, b, sa, sb)
    expect_groups(d, a, b, sa, sb)


def test_opcheck():
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs.
    sizes = [5, 0, 11]
    a, b = fp8_operands(48, 40, (E4M3, E5M2), sizes)
    scales = (torch.rand(3, 48, 1, device="cuda"), torch.rand(3, 1, 40, device="cuda"), "rowwise", "rowwise")
    ops, offs = torch.ops.gemmkit, offs_of(sizes)
    torch.library.opcheck(ops.grouped_wgrad.default, (a.t(), b, offs, *scales, None, 0), test_utils="test_faketensor")
    out = torch.empty(3, 48, 40, device="cuda")
    torch.library.opcheck(ops.grouped_wgrad_out.default, (a.t(), b, offs, out, *scales, 0),
                          test_utils="test_faketensor")


def test_scales_that_fit_no_layout_raise_naming_them():
    a, b = fp8_operands(P, Q, (E4M3, E4M3))
    (scale_a, scale_b), _ = random_scales(P, Q)
    offs = offs_of(SIZES)
    with pytest.raises(ValueError, match="^scale_a: "):
        gemmkit.scaled_grouped_mm(a, b, scale_a[1:], scale_b, offs)
    with pytest.raises(ValueError, match="^scale_b: "):
        gemmkit.scaled_grouped_mm(a, b, scale_a, scale_b[1:], offs)
