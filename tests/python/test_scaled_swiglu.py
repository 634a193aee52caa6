"""gemmkit.scaled_swiglu_mm and scaled_grouped_swiglu_mm, the FP8 dual GEMMs (GemmOptions::b2 with
B2's scales, GemmOptions::scale_b2): swiglu_mm and grouped_swiglu_mm of FP8 x and weights with
their scales, laid out as scaled_mm's and scaled_grouped_mm's (a weight's as B's for b = w.t()), a
combined [2I, K] weight's one scale tensor split into the gate's and the up's; and their operators
torch.ops.gemmkit.scaled_swiglu_mm, scaled_grouped_swiglu_mm and their _out and _quantized forms.

Without a GPU: the operators' registration and export; fake shapes and dtypes for each weight form
and scale mode, the pair (out, scales) of an e4m3 output, out=; tracing into one operator that
takes the weights and their scales whole (a grouped call's scales as gemm.h's views); the halves of
a combined weight's scales as views (first and last columns, even and odd ones, the one tensor-wise
scale, 128x128 blocks where I is a multiple of 128); the argument errors, each naming its argument,
among them 128x128 scales that do not split (I not a multiple of 128, interleaved rows), saying what
to pass instead; inputs that require grad refused, and the operators' backward refusing; the
bindings giving scale_b2 to the library (its checks name options.scale_b2); and the operators'
kernels with double-precision CPU stand-ins for the launches (reading the split scales as gemm.h
lays them out) against torch's SwiGLU of the operands dequantised whole, for every weight form and
scale mode, dense and grouped (contiguous groups with empty ones, masked groups), through an
epilogue with an auxiliary output, to an e4m3 output, and opcheck's fake-tensor test. On an sm_90
GPU (the tests marked `sm90`, which skip, saying so, elsewhere): values against float64 SwiGLU of
the operands gemmkit.quantize dequantised, within the FP8 accumulation bound
(gpu_reference.FP8_SUMS), outputs NaN-filled first, for the three weight forms in modes tensor,
rowwise, block (128x128 and 128x1 weights) and mx, M = 1 and 257, I = 13652/4 and 256, and e4m3 x
e5m2; float16 and float32 outputs and out=; contiguous groups with empty ones and rows past the last
end, and masked groups, the rows no group owns left NaN; FP8 outputs within e4m3's rounding; the
errors on real tensors; torch.compile(fullgraph=True) against eager; opcheck. Skips, saying so,
without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402

from fake_cuda import cuda, row_minor  # noqa: E402

import gemmkit  # noqa: E402
from cpu_stand_ins import group_rows, quantized_blocks, registered_on_cpu, store  # noqa: E402
from gemmkit import _torch  # noqa: E402
from gpu_reference import FP8_SUMS, HALF_ULP, block_of, dequantized, nan_like  # noqa: E402
from gpu_reference import rand as gpu_rand  # noqa: E402

BF16, F16, F32, F64, I32, I64 = torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32, torch.int64
E4M3, E5M2, E8M0 = torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu
SWIGLU = "silu(acc) * acc2"
ops = torch.ops.gemmkit
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")
FORMS = ["pair", "concat", "interleaved"]
# Each scale scheme: the mode, and the block quantize() takes for the weights, stored [N, K] (None:
# the mode's own). x's blocks are the mode's own: one value, a row, 1x128, 1x32.
SCHEMES = {"tensor": ("tensor", None), "rowwise": ("rowwise", None), "block128x128": ("block", (128, 128)),
           "block128x1": ("block", (1, 128)), "mx": ("mx", None)}
GROUPED_SCHEMES = ["tensor", "rowwise", "block128x128", "block128x1"]  # grouped products take no MXFP8 scales
OPERATORS = ("scaled_swiglu_mm", "scaled_swiglu_mm_out", "scaled_swiglu_mm_quantized", "scaled_grouped_swiglu_mm",
             "scaled_grouped_swiglu_mm_out", "scaled_grouped_swiglu_mm_quantized")


def rows(w, w_up, interleaved):
    """(gate, up) [..., I, K] of each weight form (the experts' too), by torch."""
    if w_up is not None:
        return w, w_up
    return (w[..., 0::2, :], w[..., 1::2, :]) if interleaved else w.chunk(2, -2)


def scales_shape(scheme, n, k, weight=True):
    """The shape of quantize()'s scales of an [n, k] operand in `scheme` (x's: weight=False)."""
    mode, block = SCHEMES[scheme]
    br, bc = block_of(mode, block if weight else None, n, k)
    return -(-n // br), -(-k // bc)


def scale_dtype(scheme):
    return E8M0 if scheme == "mx" else F32


def splits(form, scheme, i):
    """Whether a weight form's scales in `scheme` split into the gate's and the up's: all but a
    combined weight's 128x128 blocks where the up's rows do not start on a block."""
    return not (scheme == "block128x128" and (form == "interleaved" or (form == "concat" and i % 128)))


# --- without a GPU ----------------------------------------------------------------------------

def test_the_operators_are_registered_and_exported():
    for name in OPERATORS:
        assert hasattr(ops, name), name
    for name in ("scaled_swiglu_mm", "scaled_grouped_swiglu_mm"):
        assert getattr(gemmkit, name) is getattr(_torch, name) and name in gemmkit.__all__
    schema = str(ops.scaled_swiglu_mm.default._schema)
    assert schema == ("gemmkit::scaled_swiglu_mm(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, "
                      "Tensor? scale_up, str mode_x, str mode_w, bool interleaved, str epilogue, str[] names, "
                      "Tensor[] inputs, ScalarType? out_dtype) -> Tensor"), schema


def fake_weights(form, i, k, scheme, groups=None, dtype=E4M3):
    """(w, scale_w, w_up, scale_up, interleaved) of a weight form, fake CUDA tensors, the scales as
    scaled_mm takes B's for b = w.t() (scaled_grouped_mm's for b = w.transpose(-2, -1), G first)."""
    g = () if groups is None else (groups,)

    def weight(n):
        return cuda(*g, n, k, dtype=dtype), cuda(*g, *scales_shape(scheme, n, k), dtype=scale_dtype(scheme)
                                                 ).transpose(-2, -1)

    if form == "pair":
        (w, sw), (w_up, su) = weight(i), weight(i)
        return w, sw, w_up, su, False
    w, sw = weight(2 * i)
    return w, sw, None, None, form == "interleaved"


def fake_x_scales(scheme, m, k):
    return cuda(*scales_shape(scheme, m, k, weight=False), dtype=scale_dtype(scheme))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_fake_shapes_and_dtypes_of_each_weight_form_and_mode(fake, form, scheme):
    m, i, k = 257, 256, 320
    mode = SCHEMES[scheme][0]
    x, sx = cuda(m, k, dtype=E4M3), fake_x_scales(scheme, m, k)
    w, sw, w_up, su, interleaved = fake_weights(form, i, k, scheme)
    if not splits(form, scheme, i):
        with pytest.raises(ValueError, match="^scale_w: 128x128 blocks of an interleaved w"):
            gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved)
        return
    d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved)
    assert isinstance(d, FakeTensor) and d.device.type == "cuda"
    assert tuple(d.shape) == (m, i) and d.dtype == BF16
    for dtype in (F16, F32):
        d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved, out_dtype=dtype)
        assert tuple(d.shape) == (m, i) and d.dtype == dtype
    q, s = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved, out_dtype=E4M3)
    assert (tuple(q.shape), q.dtype, tuple(s.shape), s.dtype) == ((m, i), E4M3, (m, 2), F32)
    assert row_minor(s)
    out = cuda(m, i, dtype=F32)
    assert gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved, out=out) is out
    pair = [cuda(m, i, dtype=E4M3), cuda(m, 2, dtype=F32)]
    assert gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved, out=pair) is pair
    d = gemmkit.scaled_swiglu_mm(cuda(1, k, dtype=E5M2), w, fake_x_scales(scheme, 1, k), sw, w_up, su, mode=mode,
                                 interleaved=interleaved)
    assert tuple(d.shape) == (1, i)


def test_an_odd_i_takes_every_mode_but_a_combined_weight_s_128x128_blocks(fake):
    m, i, k = 1, 13652 // 4, 256
    x = cuda(m, k, dtype=E4M3)
    for form in FORMS:
        for scheme in SCHEMES:
            w, sw, w_up, su, interleaved = fake_weights(form, i, k, scheme)
            call = lambda: gemmkit.scaled_swiglu_mm(x, w, fake_x_scales(scheme, m, k), sw, w_up, su,  # noqa: E731
                                                    mode=SCHEMES[scheme][0], interleaved=interleaved)
            if splits(form, scheme, i):
                assert tuple(call().shape) == (m, i), (form, scheme)
            else:
                with pytest.raises(ValueError, match="^scale_w: 128x128 blocks of "):
                    call()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", GROUPED_SCHEMES)
def test_grouped_fake_shapes_and_dtypes(fake, form, scheme):
    groups, i, k = 4, 256, 256
    mode = SCHEMES[scheme][0]
    w, sw, w_up, su, interleaved = fake_weights(form, i, k, scheme, groups)
    if scheme == "rowwise":  # scaled_grouped_mm's (torch's) forms: [G, N] a group
        sw, su = sw.squeeze(-2), None if su is None else su.squeeze(-2)
    elif scheme == "tensor":  # one a group
        sw, su = sw.reshape(groups), None if su is None else su.reshape(groups)
    offs, counts = cuda(groups, dtype=I32), cuda(groups, dtype=I64)
    sx = {"tensor": cuda((), dtype=F32), "rowwise": cuda(100, dtype=F32)}.get(scheme, cuda(100, 2, dtype=F32))
    sxm = {"tensor": cuda(1, dtype=F32), "rowwise": cuda(groups, 20, dtype=F32)}.get(scheme,
                                                                                     cuda(groups, 20, 2, dtype=F32))
    for x, scale_x, sizes, shape in [(cuda(100, k, dtype=E4M3), sx, {"offs": offs}, (100, i)),
                                     (cuda(groups, 20, k, dtype=E4M3), sxm, {"counts": counts}, (groups, 20, i))]:
        def call(**kwargs):
            return gemmkit.scaled_grouped_swiglu_mm(x, w, scale_x, sw, **sizes, w_up=w_up, scale_up=su, mode=mode,
                                                    interleaved=interleaved, **kwargs)

        if not splits(form, scheme, i):
            with pytest.raises(ValueError, match=r"^scale_w: 128x128 blocks of an interleaved w \[G, 2I, K\]"):
                call()
            continue
        d = call()
        assert isinstance(d, FakeTensor) and tuple(d.shape) == shape and d.dtype == BF16
        assert call(out_dtype=F32).dtype == F32
        q, s = call(out_dtype=E4M3)
        assert (tuple(q.shape), q.dtype, tuple(s.shape), s.dtype) == (shape, E4M3, (*shape[:-1], 2), F32)
        out = cuda(*shape, dtype=F16)
        assert call(out=out, max_sms=8) is out


def test_a_custom_epilogue_takes_tensors_as_the_16_bit_functions(fake):
    x, sx = cuda(70, 256, dtype=E4M3), cuda(70, dtype=F32)
    w, sw = cuda(600, 256, dtype=E4M3), cuda(600, dtype=F32)
    text = "pre[m, n] = acc; silu(acc + bg[n]) * (acc2 + bu[n]) * s[m]"
    d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="rowwise", epilogue=text, bg=cuda(300), bu=cuda(300, dtype=F32),
                                 s=cuda(70, dtype=F32), pre=cuda(70, 300, dtype=F32))
    assert tuple(d.shape) == (70, 300) and d.dtype == BF16
    q, s = gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="rowwise", epilogue="silu(acc + bg[n]) * acc2", bg=cuda(300),
                                    out_dtype=E4M3)
    assert tuple(q.shape) == (70, 300) and tuple(s.shape) == (70, 3)
    offs = cuda(4, dtype=I32)
    d = gemmkit.scaled_grouped_swiglu_mm(x, cuda(4, 600, 256, dtype=E4M3), sx, cuda(4, 600, dtype=F32), offs,
                                         epilogue="silu(acc + bg[n]) * acc2 * route[m]", bg=cuda(4, 300),
                                         route=cuda(70, dtype=F32))
    assert tuple(d.shape) == (70, 300)


def calls_of(graph):
    return [node for node in graph.graph.nodes if node.op == "call_function"]


def test_a_traced_call_is_one_operator_with_the_weight_and_its_scales_whole(fake):
    def layer(x, w, sx, sw):
        return gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="block", out_dtype=F32) * 2

    args = (cuda(64, 256, dtype=E4M3), cuda(512, 256, dtype=E4M3), cuda(64, 2, dtype=F32),
            cuda(4, 2, dtype=F32).t())  # 128x128 blocks of a [512, 256] weight, as quantize() gives, transposed
    graph, _ = torch._dynamo.export(layer)(*args)  # raises where dynamo would break the graph
    fused = [node for node in calls_of(graph) if node.target == ops.scaled_swiglu_mm]
    assert len(fused) == 1 and not any(node.target in (ops.gemm, ops.swiglu_mm) for node in calls_of(graph))
    x, w, w_up, sx, sw, su, mode_x, mode_w, interleaved, text = fused[0].args[:10]
    assert (w.name, sw.name, w_up, su, mode_x, mode_w, interleaved, text) == \
        ("l_w_", "l_sw_", None, None, "block", "block", False, SWIGLU)
    assert tuple(graph(*args).shape) == (64, 256)

    def to_fp8(x, w, sx, sw):
        return gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="rowwise", interleaved=True, out_dtype=E4M3)

    args = (cuda(64, 256, dtype=E4M3), cuda(512, 256, dtype=E4M3), cuda(64, dtype=F32), cuda(512, dtype=F32))
    graph, _ = torch._dynamo.export(to_fp8)(*args)
    targets = [node.target for node in calls_of(graph)]
    assert targets.count(ops.scaled_swiglu_mm_quantized) == 1 and ops.scaled_swiglu_mm not in targets

    def with_pre(x, w, sx, sw, pre):  # an epilogue's output: the operator that writes in place
        return gemmkit.scaled_swiglu_mm(x, w, sx, sw, epilogue="pre[m, n] = acc2; silu(acc) * acc2", pre=pre)

    args = (cuda(64, 256, dtype=E4M3), cuda(512, 256, dtype=E4M3), cuda((), dtype=F32), cuda((), dtype=F32),
            cuda(64, 256, dtype=F32))
    graph, _ = torch._dynamo.export(with_pre)(*args)
    fused = [node for node in calls_of(graph) if node.target == ops.scaled_swiglu_mm_out]
    assert len(fused) == 1 and fused[0].args[11] == ["pre"]


def test_a_traced_grouped_call_takes_the_scales_as_gemm_h_views(fake):
    def moe_up(x, w, sx, sw, counts):
        return gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, counts=counts, max_sms=16)

    args = (cuda(4, 20, 256, dtype=E4M3), cuda(4, 512, 256, dtype=E4M3), cuda(4, 20, dtype=F32),
            cuda(4, 512, dtype=F32), cuda(4, dtype=I32))
    graph, _ = torch._dynamo.export(moe_up)(*args)
    [node] = [node for node in calls_of(graph) if node.target == ops.scaled_grouped_swiglu_mm]
    x, w, w_up, sx, sw, su, sizes, layout, mode_x, mode_w = node.args[:10]
    assert (w.name, w_up, su, layout, mode_x, mode_w, node.args[-1]) == ("l_w_", None, None, "masked", "rowwise",
                                                                         "rowwise", 16)
    assert tuple(sx.meta["example_value"].shape) == (4, 20, 1)  # [G, max_m] as [G, max_m, 1]
    assert tuple(sw.meta["example_value"].shape) == (4, 1, 512)  # [G, 2I] as [G, 1, 2I], whole
    assert tuple(graph(*args).shape) == (4, 20, 256)

    def tensorwise(x, w, sx, sw, offs):
        return gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, offs, mode="tensor", out_dtype=E4M3)

    args = (cuda(100, 256, dtype=E4M3), cuda(4, 512, 256, dtype=E4M3), cuda((), dtype=F32), cuda(4, dtype=F32),
            cuda(4, dtype=I32))
    graph, _ = torch._dynamo.export(tensorwise)(*args)
    [node] = [node for node in calls_of(graph) if node.target == ops.scaled_grouped_swiglu_mm_quantized]
    assert tuple(node.args[4].meta["example_value"].shape) == (4, 1, 1)  # [G] as [G, 1, 1]


def storage(t):
    return t.untyped_storage().data_ptr()


def test_a_combined_weight_s_scales_split_into_views():
    split = _torch.swiglu_scales
    s = torch.arange(2 * 600, dtype=F32).view(2, 600)  # [ceil(K/128), 2I]: per column (128x1)
    for interleaved, (want_g, want_u) in [(False, (s[:, :300], s[:, 300:])), (True, (s[:, 0::2], s[:, 1::2]))]:
        g, u = split(s, None, "block", interleaved, 600)
        assert torch.equal(g, want_g) and torch.equal(u, want_u)
        assert storage(g) == storage(s) and storage(u) == storage(s)
    row = torch.arange(600, dtype=F32)  # rowwise [2I]
    g, u = split(row, None, "rowwise", False, 600)
    assert torch.equal(g, row[:300]) and torch.equal(u, row[300:]) and storage(u) == storage(row)
    one = torch.ones(())  # tensor-wise: the one scale for both
    assert split(one, None, "tensor", True, 600) == (one, one)
    blocks = torch.arange(3 * 4, dtype=F32).view(3, 4)  # 128x128 blocks of a [512, K] w: I = 256
    g, u = split(blocks, None, "block", False, 512)
    assert torch.equal(g, blocks[:, :2]) and torch.equal(u, blocks[:, 2:]) and storage(u) == storage(blocks)
    experts = torch.arange(4 * 3 * 4, dtype=F32).view(4, 3, 4)  # [G, ceil(K/128), ceil(2I/128)]
    g, u = split(experts, None, "block", False, 512, grouped=True)
    assert torch.equal(g, experts[..., :2]) and torch.equal(u, experts[..., 2:])
    mx = torch.zeros(8, 600, dtype=torch.uint8).view(E8M0)
    g, u = split(mx, None, "mx", True, 600)
    assert g.shape == (8, 300) and g.dtype == E8M0 and storage(g) == storage(mx)
    gate, up = torch.ones(2, 300), torch.ones(2, 300)  # w and w_up: their own, as they are
    assert split(gate, up, "block", True, 300) == (gate, up)


def test_the_grouped_scales_become_gemm_h_views():
    groups = 4
    x, w = torch.empty(100, 256), torch.empty(groups, 512, 256)
    masked = torch.empty(groups, 20, 256)
    sx, sw, su = _torch._grouped_swiglu_scales(x, w, torch.ones(100), torch.ones(groups, 512), torch.ones(groups, 256),
                                               ("rowwise", "rowwise"))
    assert (sx.shape, sw.shape, su.shape) == ((100,), (groups, 1, 512), (groups, 1, 256))
    sx, sw, su = _torch._grouped_swiglu_scales(masked, w, torch.ones(groups, 20), torch.ones(groups), None,
                                               ("rowwise", "tensor"))
    assert (sx.shape, sw.shape, su) == ((groups, 20, 1), (groups, 1, 1), None)
    blocks = torch.ones(groups, 2, 4)
    assert _torch._grouped_swiglu_scales(x, w, torch.ones(100, 2), blocks, None, ("block", "block"))[1] is blocks


def test_errors_name_the_argument(fake):
    x, sx, offs = cuda(8, 256, dtype=E4M3), cuda((), dtype=F32), cuda(4, dtype=I32)
    w, sw, gate, one = cuda(26, 256, dtype=E4M3), cuda((), dtype=F32), cuda(13, 256, dtype=E4M3), cuda((), dtype=F32)
    odd = 13652 // 4  # I = 3413
    wide, wide_blocks = cuda(2 * odd, 256, dtype=E4M3), cuda(54, 2, dtype=F32).t()  # 128x128: ceil(6826/128) = 54
    experts = cuda(4, 400, 256, dtype=E4M3)
    for match, error, call in [
        (r"^scale_w: 128x128 blocks of a w \[2I, K\] with I = 3413, not a multiple of 128: the up's rows start inside "
         r"block 26 of w's rows, so the scales do not split into the gate's and the up's; expected the gate and up "
         r"weights apart, w and w_up \[I, K\], each quantised with its own scales \(scale_w and scale_up\)", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, wide, cuda(8, 2, dtype=F32), wide_blocks, mode="block")),
        (r"^scale_w: 128x128 blocks of an interleaved w \[2I, K\], each block's rows alternating gate and up, do not "
         r"split into the gate's scales and the up's; expected the gate and up weights apart", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(512, 256, dtype=E4M3), cuda(8, 2, dtype=F32),
                                          cuda(2, 4, dtype=F32), mode="block", interleaved=True)),
        (r"^scale_w: 128x128 blocks of a w \[G, 2I, K\] with I = 200, not a multiple of 128.*w and w_up \[G, I, K\]",
         ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, cuda(8, 2, dtype=F32), cuda(4, 2, 4, dtype=F32), offs,
                                                  mode="block")),
        (r"^scale_w: shape \[2, 7\] in mode 'block' for a w \[2I, K\] of 2I = 512 rows; expected B's scales for b = "
         r"w.t\(\), their last dimension one a row of w, 512 \(rowwise, block 128x1, mx\), or one a block of 128 "
         r"rows, 4 \(block 128x128\)$", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(512, 256, dtype=E4M3), cuda(8, 2, dtype=F32),
                                          cuda(2, 7, dtype=F32), mode="block")),
        (r"^scale_w: shape \[512, 1\] in mode 'rowwise'", ValueError,  # quantize()'s, not transposed
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(512, 256, dtype=E4M3), cuda(8, 1, dtype=F32),
                                          cuda(512, 1, dtype=F32), mode="rowwise")),
        (r"^scale_up: given without w_up; expected the up weight's scales only with w_up", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, scale_up=one)),
        (r"^scale_up: None with w_up given; expected the up weight's scales", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, gate, sx, sw, gate)),
        (r"^scale_up: None with w_up given", ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, cuda(4, 13, 256, dtype=E4M3), sx, sw, offs,
                                                  w_up=cuda(4, 13, 256, dtype=E4M3))),
        (r"^x: dtype torch.bfloat16 is not supported; expected float8_e4m3fn or float8_e5m2 \(16-bit inputs: "
         r"swiglu_mm\)$", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(cuda(8, 256), w, sx, sw)),
        (r"^x: dtype torch.bfloat16 is not supported; expected float8_e4m3fn or float8_e5m2 \(16-bit inputs: "
         r"grouped_swiglu_mm\)$", TypeError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(cuda(8, 256), experts, sx, sw, offs)),
        (r"^w: dtype torch.bfloat16 is not supported; expected float8_e4m3fn or float8_e5m2", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(26, 256), sx, sw)),
        (r"^w_up: dtype torch.float8_e5m2 differs from w's, torch.float8_e4m3fn; expected the up weight of the "
         r"gate's type$", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(x, gate, sx, sw, cuda(13, 256, dtype=E5M2), one)),
        (r"^x: 3 dimensions; expected 2, \[M, K\] \(leading dimensions flattened first", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(cuda(2, 4, 256, dtype=E4M3), w, sx, sw)),
        (r"^w: shape \[26, 128\] has K = 128 but x \[8, 256\] has K = 256", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(26, 128, dtype=E4M3), sx, sw)),
        (r"^w: shape \[25, 256\] has an odd first dimension, 25", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, cuda(25, 256, dtype=E4M3), sx, sw)),
        ("^interleaved: True with w_up given", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, gate, sx, sw, gate, one, interleaved=True)),
        ("^scale_x: expected a torch.Tensor or an array with __dlpack__, got NoneType$", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, None, sw)),
        ("^scale_w: expected a torch.Tensor or an array with __dlpack__, got float$", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, 1.0)),
        ("^scale_x: on cpu; expected a CUDA tensor$", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, torch.ones(()), sw)),
        ("^scale_w: 4 dimensions; expected 0 or 1 or 2 or 3$", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, cuda(1, 1, 1, 1, dtype=F32))),
        ("^mode: 'none'; expected 'tensor', 'rowwise', 'block' or 'mx'", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="none")),
        ("^mode: 'mx'; expected 'tensor', 'rowwise' or 'block' \\(grouped products take no MXFP8 scales\\)$",
         ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, sx, sw, offs, mode=("rowwise", "mx"))),
        (r"^offs: None; expected the groups' cumulative row ends", ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, sx, sw)),
        (r"^counts: None; expected each group's valid rows", ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(cuda(4, 2, 256, dtype=E4M3), experts, sx, sw)),
        (r"^out: shape \[8, 26\]; expected x's rows and I, \[8, 13\]$", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, out=cuda(8, 26))),
        (r"^out: shape \[8, 13\]; expected x's rows and I, \[8, 200\]$", ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, sx, sw, offs, mode="tensor", out=cuda(8, 13))),
        ("^out: dtype torch.bfloat16 differs from out_dtype torch.float32", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, out=cuda(8, 13), out_dtype=F32)),
        (r"^out: a float8_e4m3fn tensor without its scales; expected the pair out=\(out, scales\)$", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, out=cuda(8, 13, dtype=E4M3))),
        ("^out_dtype: torch.float8_e5m2 is not supported", TypeError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, out_dtype=E5M2)),
        (r"^epilogue: 'silu\(acc\)' does not read acc2", ValueError,
         lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, epilogue="silu(acc)")),
        (r"^bg: not given; the epilogue reads bg\[n\]", ValueError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, sx, sw, offs, mode="tensor",
                                                  epilogue="silu(acc + bg[n]) * acc2")),
        (r"^scaled_swiglu_mm\(\) got unexpected keyword arguments bg; tensors are taken only with epilogue=",
         TypeError, lambda: gemmkit.scaled_swiglu_mm(x, w, sx, sw, bg=cuda(13))),
        (r"^scaled_grouped_swiglu_mm\(\) got unexpected keyword arguments bg", TypeError,
         lambda: gemmkit.scaled_grouped_swiglu_mm(x, experts, sx, sw, offs, bg=cuda(4, 200))),
    ]:
        with pytest.raises(error, match=match):
            call()


def test_errors_without_fake_tensors():
    x, s = torch.ones(8, 64).to(E4M3), torch.ones(())
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.scaled_swiglu_mm(x, torch.ones(26, 64).to(E4M3), s, s)
    with pytest.raises(ValueError, match="^x: on cpu; expected a CUDA tensor$"):
        gemmkit.scaled_grouped_swiglu_mm(x, torch.ones(2, 26, 64).to(E4M3), s, s, torch.tensor([4, 8]))
    with pytest.raises(TypeError, match="^x: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.scaled_swiglu_mm([[1.0]], x, s, s)


def test_inputs_that_require_grad_are_refused(fake):
    x, w, offs = cuda(8, 256, dtype=E4M3), cuda(512, 256, dtype=E4M3), cuda(4, dtype=I32)
    experts = cuda(4, 512, 256, dtype=E4M3)

    def scale():
        return cuda((), dtype=F32)

    dense, grouped = "scaled_swiglu_mm", "scaled_grouped_swiglu_mm"
    cases = [  # (the name refused, the tensor that requires grad, the function, a call on it)
        ("x", cuda(8, 256, dtype=E4M3), dense, lambda t: gemmkit.scaled_swiglu_mm(t, w, scale(), scale())),
        ("w", cuda(512, 256, dtype=E4M3), dense, lambda t: gemmkit.scaled_swiglu_mm(x, t, scale(), scale())),
        ("scale_x", scale(), dense, lambda t: gemmkit.scaled_swiglu_mm(x, w, t, scale(), out_dtype=E4M3)),
        ("scale_w", cuda(512, dtype=F32), dense,
         lambda t: gemmkit.scaled_swiglu_mm(x, w, cuda(8, dtype=F32), t, mode="rowwise")),
        ("w_up", cuda(256, 256, dtype=E4M3), dense,
         lambda t: gemmkit.scaled_swiglu_mm(x, w[:256], scale(), scale(), t, scale())),
        ("scale_up", scale(), dense, lambda t: gemmkit.scaled_swiglu_mm(x, w[:256], scale(), scale(), w[256:], t)),
        ("bg", cuda(256), dense,
         lambda t: gemmkit.scaled_swiglu_mm(x, w, scale(), scale(), epilogue="silu(acc + bg[n]) * acc2", bg=t)),
        ("x", cuda(100, 256, dtype=E4M3), grouped,
         lambda t: gemmkit.scaled_grouped_swiglu_mm(t, experts, scale(), scale(), offs, mode="tensor")),
        ("scale_w", cuda(4, 512, dtype=F32), grouped,
         lambda t: gemmkit.scaled_grouped_swiglu_mm(cuda(100, 256, dtype=E4M3), experts, cuda(100, dtype=F32), t,
                                                    offs, out_dtype=E4M3)),
    ]
    for name, t, function, call in cases:
        t.requires_grad_()
        with pytest.raises(RuntimeError, match=f"^{name}: requires grad, but {function} \\(FP8 inputs\\) is not "
                                               r"differentiable; expected inputs that do not require grad \(or "
                                               r"torch.no_grad\(\)\)$"):
            call(t)
        with torch.no_grad():
            d = call(t)
        assert not (d[0] if isinstance(d, tuple) else d).requires_grad


def test_the_operators_backward_refuses(fake):
    # Fake CPU tensors: autograd's engine wants a real device for CUDA's.
    def empty(*shape, dtype=E4M3):
        return torch.empty(*shape, dtype=dtype)

    x, w, s = empty(8, 256), empty(512, 256), empty((), dtype=F32).requires_grad_()
    d = ops.scaled_swiglu_mm(x, w, None, s, s, None, "tensor", "tensor", False, SWIGLU, [], [], F32)
    assert d.requires_grad and tuple(d.shape) == (8, 256)
    with pytest.raises(RuntimeError, match=r"^gemmkit: FP8 products \(scaled_swiglu_mm\) are not differentiable$"):
        torch.autograd.grad(d.sum(), s)
    d = ops.scaled_grouped_swiglu_mm(empty(100, 256), empty(4, 512, 256), None, s, s, None, empty(4, dtype=I32),
                                     "contiguous", "tensor", "tensor", False, SWIGLU, [], [], None, 0)
    with pytest.raises(RuntimeError, match=r"^gemmkit: FP8 products \(scaled_grouped_swiglu_mm\) are not "):
        torch.autograd.grad(d.float().sum(), s)


def test_the_bindings_give_scale_b2_to_the_library():
    # The library checks B2's scales before it looks for a GPU: its messages name
    # options.scale_b2; a call that passes the checks fails for want of a GPU (or, with one, for
    # the CPU tensors' pointers).
    from gemmkit import _gemmkit

    tensor, contiguous = _gemmkit.ScaleMode.tensor, _gemmkit.GroupLayout.contiguous
    a, b, d = torch.ones(8, 256).to(E4M3), torch.ones(256, 16).to(E4M3), torch.empty(8, 16, dtype=BF16)
    w, experts, offs = torch.ones(32, 256).to(E4M3), torch.ones(2, 32, 256).to(E4M3), torch.tensor([3, 8], dtype=I32)
    one = torch.ones(1, 1)

    def past_the_checks():
        return pytest.raises((RuntimeError, ValueError),
                             match="gemmkit needs an NVIDIA Hopper GPU|is not device memory")

    scales = {"mode_a": tensor, "scale_a": one, "mode_b": tensor, "scale_b": one}
    calls = {
        "gemm_tensors": lambda s: _gemmkit.gemm_tensors(a, b, d, 1.0, 0.0, None, 0, tensor, one, tensor, one, "", [],
                                                        b.clone(), scale_b2=s),
        "swiglu_tensors": lambda s: _gemmkit.swiglu_tensors(a, w, None, False, d, 0, scale_b2=s, **scales),
        "grouped_swiglu_tensors": lambda s: _gemmkit.grouped_swiglu_tensors(a, experts, None, False, d, offs,
                                                                            contiguous, False, 0, 0, scale_b2=s,
                                                                            **scales),
        "gemm": lambda s: gemmkit.gemm(*(_gemmkit.view_of(t, "t") for t in (a, b, d)), mode_a=tensor,
                                       scale_a=_gemmkit.view_of(one, "s"), mode_b=tensor,
                                       scale_b=_gemmkit.view_of(one, "s"), b2=_gemmkit.view_of(b, "b2"),
                                       scale_b2=None if s is None else _gemmkit.view_of(s, "s")),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="^options.scale_b2: mode none with FP8 options.b2"):
            call(None)
        with pytest.raises(ValueError, match=r"^options.scale_b2: shape \[2, 2\]"):
            call(torch.ones(2, 2))
        with past_the_checks():
            call(one)
    with pytest.raises(ValueError, match=r"^options.scale_b2: shape \[3, 1, 1\]; expected a batch of G = 2"):
        calls["grouped_swiglu_tensors"](torch.ones(3, 1, 1))


# The operators' kernels (_ops') with double-precision CPU stand-ins for the launches: each reads x's
# scales and the gate's and up's (split by _torch.swiglu_scales) as gemm.h lays them out, and the
# reference dequantises the weights whole with their scales as quantize() lays them out.

def gemm_h_scales(s, mode, rows, cols, of_a):
    """The scale of each element of an operand rows x cols (A's, of_a, or B's), in double, from s
    as gemm.h lays it out (one value of any shape; a 1-D s a column of A's or a row of B's);
    asserting s's shape is the one its mode and blocks give."""
    s = torch.exp2(s.view(torch.uint8).double() - 127) if s.dtype == E8M0 else s.double()
    if s.numel() == 1:
        return s.reshape(1, 1).expand(rows, cols)
    if s.dim() == 1:
        s = s.unsqueeze(1) if of_a else s.unsqueeze(0)
    if mode == "rowwise":
        block = (1, cols) if of_a else (rows, 1)
    elif mode == "mx":
        block = (1, 32) if of_a else (32, 1)
    elif of_a:
        block = (1, 128) if s.size(0) == rows else (128, 128)
    else:
        block = (128, 1) if s.size(1) == cols else (128, 128)
    assert s.shape == (-(-rows // block[0]), -(-cols // block[1])), (mode, of_a, s.shape, rows, cols)
    return s.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]


def dual_products(x, scale_x, gate, scale_gate, up, scale_up, mode_x, mode_w):
    """(acc, acc2) in double: x [M, K] and gate and up [I, K], FP8, times their gemm.h scales (the
    weights' as B's, K x I)."""
    (m, k), i = x.shape, gate.size(0)
    a = x.double() * gemm_h_scales(scale_x, mode_x, m, k, True)
    return (a @ (gate.double().t() * gemm_h_scales(scale_gate, mode_w, k, i, False)),
            a @ (up.double().t() * gemm_h_scales(scale_up, mode_w, k, i, False)))


def swiglu_launch_stand_in(x, w, w_up, interleaved, out, scale_x, scale_gate, scale_up, mode_x, mode_w, epilogue,
                           triples, scale_d=None):
    from gemmkit._epilogue_eval import evaluate
    gate, up = rows(w, w_up, interleaved)
    acc, acc2 = dual_products(x, scale_x, gate, scale_gate, up, scale_up, mode_x, mode_w)
    written = {use[0] for use in _torch.epilogue_uses(epilogue) if use[2]}
    reads = {name: t.double() for name, t, _ in triples or () if name not in written}
    outputs = {name: t for name, t, _ in triples or () if name in written}
    value, values = evaluate(epilogue, acc, reads, acc2, shapes={name: t.shape for name, t in outputs.items()})
    store(out, value, scale_d)
    for name, t in outputs.items():
        t.copy_(values[name])


def grouped_launch_stand_in(x, w, w_up, interleaved, sizes, layout, out, scale_x, scale_gate, scale_up, mode_x,
                            mode_w, max_sms, epilogue, triples, scale_d=None):
    """Each group's rows as swiglu_launch_stand_in's (the default text); rows no group owns NaN
    (their scales too), as an empty output may hold anything."""
    assert epilogue == SWIGLU and not triples
    gate, up = rows(w, w_up, interleaved)
    value = torch.full(out.shape, float("nan"), dtype=F64)
    for g, start, end in group_rows(sizes, layout, x.size(-2)):
        at = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        sx = scale_x if scale_x.numel() == 1 else scale_x[at]

        def of_group(s):
            return s[g] if s.dim() == 3 else s

        acc, acc2 = dual_products(x[at], sx, gate[g], of_group(scale_gate), up[g], of_group(scale_up), mode_x, mode_w)
        value[at] = torch.nn.functional.silu(acc) * acc2
    store(out, value, scale_d)


@pytest.fixture
def fp8_kernels(monkeypatch):
    """The FP8 dual GEMMs' operators with their own kernels (_ops') on CPU tensors, the launches
    those call the stand-ins above."""
    from gemmkit import _ops

    monkeypatch.setattr(_torch, "launch_scaled_swiglu", swiglu_launch_stand_in)
    monkeypatch.setattr(_torch, "launch_scaled_grouped_swiglu", grouped_launch_stand_in)
    yield from registered_on_cpu({name: getattr(_ops, "_" + name) for name in OPERATORS})


def cpu_fp8(*shape, dtype=E4M3):
    return torch.randn(*shape, dtype=F32).to(dtype)


def cpu_scales(shape, scheme):
    """Random scales of `shape`: float32 in [0.5, 1.5), or powers of two 2^-7 .. 2^6 (mx)."""
    if scheme == "mx":
        return torch.randint(120, 134, shape, dtype=torch.uint8).view(E8M0)
    return torch.rand(shape) + 0.5


def quantized_weight(n, k, scheme, groups=None):
    """(q [G,] n x k, its scales as quantize() lays them out, the weight it stands for in double)."""
    mode, block = SCHEMES[scheme]
    g = () if groups is None else (groups,)
    q, s = cpu_fp8(*g, n, k), cpu_scales((*g, *scales_shape(scheme, n, k)), scheme)
    return q, s, dequantized(q, s, mode, block)


def cpu_case(form, scheme, m, i, k, groups=None):
    """FP8 x and weights of a form with random scales, as the operators take them, and their values
    in double: (x, scale_x, w, scale_w, w_up, scale_up, interleaved, xd, gate, up)."""
    mode = SCHEMES[scheme][0]
    x, sx = cpu_fp8(m, k), cpu_scales(scales_shape(scheme, m, k, weight=False), scheme)
    xd = dequantized(x, sx, mode)
    if form == "pair":
        (w, sw, gate), (w_up, su, up) = quantized_weight(i, k, scheme, groups), quantized_weight(i, k, scheme, groups)
        return x, sx, w, sw.transpose(-2, -1), w_up, su.transpose(-2, -1), False, xd, gate, up
    w, sw, wd = quantized_weight(2 * i, k, scheme, groups)
    gate, up = rows(wd, None, form == "interleaved")
    return x, sx, w, sw.transpose(-2, -1), None, None, form == "interleaved", xd, gate, up


def close(got, want):
    assert torch.allclose(got.double(), want, rtol=1e-9, atol=1e-9), (got.double() - want).abs().max()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_kernels_dequantise_each_form_and_mode_as_torch(fp8_kernels, form, scheme):
    m, i, k = 5, 256 if scheme == "block128x128" else 150, 200  # K: a partial block; I: 128x128 splits
    mode = SCHEMES[scheme][0]
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = cpu_case(form, scheme, m, i, k)
    if not splits(form, scheme, i):
        with pytest.raises(ValueError, match="^scale_w: 128x128 blocks of an interleaved w"):
            ops.scaled_swiglu_mm(x, w, w_up, sx, sw, su, mode, mode, interleaved, SWIGLU, [], [], F64)
        return
    want = torch.nn.functional.silu(xd @ gate.t()) * (xd @ up.t())
    d = ops.scaled_swiglu_mm(x, w, w_up, sx, sw, su, mode, mode, interleaved, SWIGLU, [], [], F64)
    assert d.shape == (m, i) and d.dtype == F64
    close(d, want)
    # rowwise and tensor-wise scales as scaled_mm also takes them: 1-D, 0-d
    if scheme == "rowwise":
        su = None if su is None else su.reshape(-1)
        close(ops.scaled_swiglu_mm(x, w, w_up, sx.reshape(-1), sw.reshape(-1), su, mode, mode, interleaved, SWIGLU,
                                   [], [], F64), want)
    if scheme == "tensor":
        su = None if su is None else su.reshape(())
        close(ops.scaled_swiglu_mm(x, w, w_up, sx.reshape(()), sw.reshape(()), su, mode, mode, interleaved, SWIGLU,
                                   [], [], F64), want)


def test_an_epilogue_s_output_and_an_e4m3_output_through_the_kernels(fp8_kernels):
    m, i, k = 7, 300, 256
    x, sx, w, sw, _, _, _, xd, gate, up = cpu_case("interleaved", "block128x1", m, i, k)
    g, u = xd @ gate.t(), xd @ up.t()
    bg = torch.randn(i, dtype=F64)
    out, pre = torch.full((m, i), float("nan"), dtype=F64), torch.full((m, i), float("nan"), dtype=F64)
    ops.scaled_swiglu_mm_out(x, w, None, sx, sw, None, out, "block", "block", True,
                             "pre[m, n] = acc2; silu(acc + bg[n]) * acc2", ["bg", "pre"], [bg], [pre])
    close(out, torch.nn.functional.silu(g + bg) * u)
    close(pre, u)
    q, s = ops.scaled_swiglu_mm_quantized(x, w, None, sx, sw, None, "block", "block", True, SWIGLU, [], [])
    d = ops.scaled_swiglu_mm(x, w, None, sx, sw, None, "block", "block", True, SWIGLU, [], [], F64)
    close(d, torch.nn.functional.silu(g) * u)
    want_q, want_s = quantized_blocks(d)  # the same kernel's value, quantised
    assert torch.equal(s, want_s) and torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", GROUPED_SCHEMES)
@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_the_grouped_kernels_dequantise_each_group_as_torch(fp8_kernels, form, scheme, layout):
    groups, i, k = 4, 256 if scheme == "block128x128" else 150, 200
    mode = SCHEMES[scheme][0]
    if layout == "contiguous":
        sizes, m = torch.tensor([0, 5, 5, 12], dtype=I32), 14  # an empty group first, one in the middle, 2 rows past
        spans = [(g, start, end) for g, start, end in group_rows(sizes, layout, m)]
    else:
        sizes, m = torch.tensor([3, 0, 6, 1]), 6
        spans = [(g, 0, count) for g, count in enumerate(sizes.tolist())]
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = cpu_case(form, scheme, groups * m if layout == "masked" else m,
                                                                 i, k, groups)
    if layout == "masked":  # x [G, max_m, K] and its scales [G, max_m, ...]
        x, xd = x.view(groups, m, k), xd.view(groups, m, k)
        sx = sx if scheme == "tensor" else sx.view(groups, m, -1)
    if not splits(form, scheme, i):
        with pytest.raises(ValueError, match=r"^scale_w: 128x128 blocks of an interleaved w \[G, 2I, K\]"):
            ops.scaled_grouped_swiglu_mm(x, w, w_up, sx, sw, su, sizes, layout, mode, mode, interleaved, SWIGLU, [],
                                         [], F64, 0)
        return
    d = ops.scaled_grouped_swiglu_mm(x, w, w_up, sx, sw, su, sizes, layout, mode, mode, interleaved, SWIGLU, [], [],
                                     F64, 0)
    assert d.shape == (*x.shape[:-1], i)
    owned = torch.zeros(d.shape[:-1], dtype=torch.bool)
    for g, start, end in spans:
        at = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        xg = xd[at]
        close(d[at], torch.nn.functional.silu(xg @ gate[g].t()) * (xg @ up[g].t()))
        owned[at] = True
    assert d[~owned].isnan().all()
    q, s = ops.scaled_grouped_swiglu_mm_quantized(x, w, w_up, sx, sw, su, sizes, layout, mode, mode, interleaved,
                                                  SWIGLU, [], [], 0)
    assert q.dtype == E4M3 and s.shape == (*x.shape[:-1], 2)


def test_opcheck_with_the_stand_ins(fp8_kernels):
    # torch has no arithmetic on FP8 tensors, which opcheck's other tests do on the inputs.
    x, sx, w, sw, *_ = cpu_case("concat", "rowwise", 6, 150, 64)
    for args in [(x, w, None, sx, sw, None, "rowwise", "rowwise", False, SWIGLU, [], [], None),
                 (x, w, None, sx, sw, None, "rowwise", "rowwise", True, "silu(acc + b[n]) * acc2", ["b"],
                  [torch.randn(1, 150)], F32)]:
        torch.library.opcheck(ops.scaled_swiglu_mm.default, args, test_utils="test_faketensor")
    torch.library.opcheck(ops.scaled_swiglu_mm_quantized.default,
                          (x, w, None, sx, sw, None, "rowwise", "rowwise", False, SWIGLU, [], []),
                          test_utils="test_faketensor")
    experts, scales = cpu_fp8(3, 300, 64), torch.rand(3, 1, 300)
    ends = torch.tensor([2, 2, 6], dtype=I32)
    torch.library.opcheck(ops.scaled_grouped_swiglu_mm.default,
                          (x, experts, None, sx, scales, None, ends, "contiguous", "rowwise", "rowwise", True, SWIGLU,
                           [], [], F32, 0), test_utils="test_faketensor")
    torch.library.opcheck(ops.scaled_grouped_swiglu_mm_quantized.default,
                          (x, experts, None, sx, scales, None, ends, "contiguous", "rowwise", "rowwise", False, SWIGLU,
                           [], [], 0), test_utils="test_faketensor")


# --- on an sm_90 GPU ----------------------------------------------------------------------------

SIZES = [0, 37, 0, 1, 130, 5, 0]  # empty groups first, in the middle and last, one row, odd sizes
COUNTS = [0, 1, 37, 64, 5]


def quantized(t, scheme, weight=True, dtype=E4M3):
    """(q, scales, q * scales in double) of t [..., rows, K] by gemmkit.quantize in `scheme` (x's
    blocks where not `weight`)."""
    mode, block = SCHEMES[scheme]
    block = block if weight else None
    q, s = gemmkit.quantize(t, dtype, mode, block=block)
    return q, s, dequantized(q, s, mode, block)


def gpu_case(form, scheme, m, i, k, groups=None, w_dtype=E4M3):
    """gpu_rand x and weights quantised by gemmkit.quantize: (x, scale_x, w, scale_w, w_up,
    scale_up, interleaved, xd, gate, up), the weights' scales transposed as B's for b = w.t() (G
    first), the values in double."""
    g = () if groups is None else (groups,)
    x, sx, xd = quantized(gpu_rand(m, k), scheme, weight=False)
    if form == "pair":
        (w, sw, gate), (w_up, su, up) = (quantized(gpu_rand(*g, i, k), scheme, dtype=w_dtype) for _ in range(2))
        return x, sx, w, sw.transpose(-2, -1), w_up, su.transpose(-2, -1), False, xd, gate, up
    w, sw, wd = quantized(gpu_rand(*g, 2 * i, k), scheme, dtype=w_dtype)
    gate, up = rows(wd, None, form == "interleaved")
    return x, sx, w, sw.transpose(-2, -1), None, None, form == "interleaved", xd, gate, up


def fp8_reference(xd, gate, up):
    """(silu(xd gate^T) * (xd up^T) in double, its bound): FP8_SUMS * (|x| @ |w|^T) on each
    product, carried through silu (slope at most 1.1) and the product."""
    g, u = xd @ gate.t(), xd @ up.t()
    bound_g, bound_u = (xd.abs() @ gate.abs().t()) * FP8_SUMS, (xd.abs() @ up.abs().t()) * FP8_SUMS
    silu = torch.nn.functional.silu(g)
    return silu * u, 1.1 * (u.abs() + bound_u) * bound_g + silu.abs() * bound_u


def expect_within(got, want, bound):
    """got within `bound` of want, plus its type's rounding and f32 arithmetic's."""
    assert torch.isfinite(got).all(), "non-finite outputs"
    limit = bound + want.abs() * (HALF_ULP[got.dtype] + 1e-6) + 1e-6
    error = (got.double() - want).abs()
    assert (error <= limit).all(), f"max error {error.max().item()}, {(error / limit).max().item()} of the bound"


def expect_quantized(q, scales, ref, bound):
    """An e4m3 output and its 1x128 scales against ref within `bound`: each scale amax / 448 of its
    block (1 for zeros) within the block's largest bound / 448, q * scale within e4m3's rounding
    (2^-4 relative, 2^-10 of the scale) beyond the bound (test_quantized_output.py's check)."""
    n = ref.size(-1)
    blocks = -(-n // 128)
    assert q.dtype == E4M3 and q.shape == ref.shape and scales.shape == (*ref.shape[:-1], blocks)

    def block_max(t):
        return torch.nn.functional.pad(t, (0, 128 * blocks - n)).unflatten(-1, (blocks, 128)).amax(-1)

    amax = block_max(ref.abs())
    want = torch.where(amax == 0, 1.0, amax / 448)
    assert ((scales.double() - want).abs() <= block_max(bound) / 448 + want * 2.0 ** -20).all(), "scales off"
    s = scales.double().repeat_interleave(128, -1)[..., :n]
    error = (q.double() * s - ref).abs()
    assert (error <= 2.0 ** -4 * (ref.abs() + bound) + 2.0 ** -10 * s + bound + ref.abs() * 2.0 ** -20).all()


@sm90
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("m,i,k", [(1, 13652 // 4, 256), (257, 13652 // 4, 320), (257, 256, 256)])
def test_values_match_double(form, scheme, m, i, k):
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = gpu_case(form, scheme, m, i, k)
    mode = SCHEMES[scheme][0]
    if not splits(form, scheme, i):
        with pytest.raises(ValueError, match="^scale_w: 128x128 blocks of "):
            gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved)
        return
    out = nan_like((m, i), BF16)
    assert gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved, out=out) is out
    expect_within(out, *fp8_reference(xd, gate, up))
    d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode=mode, interleaved=interleaved)
    assert d.shape == (m, i) and d.dtype == BF16
    expect_within(d, *fp8_reference(xd, gate, up))


@sm90
@pytest.mark.parametrize("form", FORMS)
def test_e4m3_x_e5m2_float16_float32_and_e4m3_outputs(form):
    m, i, k = 131, 300, 256
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = gpu_case(form, "rowwise", m, i, k, w_dtype=E5M2)
    assert w.dtype == E5M2
    ref, bound = fp8_reference(xd, gate, up)
    for dtype in (F16, F32):
        d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode="rowwise", interleaved=interleaved, out_dtype=dtype)
        assert d.dtype == dtype
        expect_within(d, ref, bound)
        out = nan_like((m, i), dtype)
        gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode="rowwise", interleaved=interleaved, out=out)
        expect_within(out, ref, bound)
    q, s = gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode="rowwise", interleaved=interleaved, out_dtype=E4M3)
    expect_quantized(q, s, ref, bound)
    pair = (torch.full((m, i), 0xFF, device="cuda", dtype=torch.uint8).view(E4M3), nan_like((m, 3), F32))
    assert gemmkit.scaled_swiglu_mm(x, w, sx, sw, w_up, su, mode="rowwise", interleaved=interleaved, out=pair) is pair
    assert torch.equal(pair[0].view(torch.uint8), q.view(torch.uint8)) and torch.equal(pair[1], s)


@sm90
def test_a_custom_epilogue_with_biases_and_an_auxiliary_output():
    m, i, k = 77, 256, 256
    x, sx, w, sw, _, _, _, xd, gate, up = gpu_case("concat", "block128x128", m, i, k)
    bg, bu = gpu_rand(i), gpu_rand(i, dtype=F32)
    pre = nan_like((m, i), F32)
    d = gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="block", out_dtype=F32,
                                 epilogue="pre[m, n] = acc2; silu(acc + bg[n]) * (acc2 + bu[n])", bg=bg, bu=bu,
                                 pre=pre)
    g, u = xd @ gate.t() + bg.double(), xd @ up.t()
    bound_g, bound_u = (xd.abs() @ gate.abs().t()) * FP8_SUMS, (xd.abs() @ up.abs().t()) * FP8_SUMS
    expect_within(pre, u, bound_u)
    u = u + bu.double()
    silu = torch.nn.functional.silu(g)
    expect_within(d, silu * u, 1.1 * (u.abs() + bound_u) * bound_g + silu.abs() * bound_u)


def grouped_scales(scheme, sx, sw, su, masked):
    """The scales of gpu_case's grouped operands in the forms scaled_grouped_mm takes (torch's
    where it has them): rowwise x [M_total] ([G, max_m] masked) and weights [G, N]; tensor-wise
    one x scale and one a group [G]; blocks as they are."""
    def weights(s):
        if s is None:
            return None
        return s.squeeze(-2) if scheme == "rowwise" else s.reshape(-1) if scheme == "tensor" else s

    if scheme == "rowwise":
        sx = sx.squeeze(-1)
    return sx, weights(sw), weights(su)


def expect_groups(d, xd, gate, up, spans):
    """Each group's rows of d against its reference; the rows no group owns still NaN."""
    owned = torch.zeros(d.shape[:-1], dtype=torch.bool, device=d.device)
    for at, g in spans:
        expect_within(d[at], *fp8_reference(xd[at], gate[g], up[g]))
        owned[at] = True
    assert d[~owned].isnan().all(), "rows no group owns written"


@sm90
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", GROUPED_SCHEMES)
def test_contiguous_groups_match_double(form, scheme):
    from gpu_reference import offs_of, spans

    groups, k = len(SIZES), 256
    i = 256 if scheme == "block128x128" else 200
    m = sum(SIZES) + 11  # 11 rows past the last end
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = gpu_case(form, scheme, m, i, k, groups)
    sx, sw, su = grouped_scales(scheme, sx, sw, su, masked=False)
    mode, offs = SCHEMES[scheme][0], offs_of(SIZES)
    if not splits(form, scheme, i):
        with pytest.raises(ValueError, match=r"^scale_w: 128x128 blocks of an interleaved w \[G, 2I, K\]"):
            gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, offs, w_up=w_up, scale_up=su, mode=mode,
                                             interleaved=interleaved)
        return
    out = nan_like((m, i), BF16)
    assert gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, offs, w_up=w_up, scale_up=su, mode=mode,
                                            interleaved=interleaved, out=out) is out
    expect_groups(out, xd, gate, up, [((slice(start, end),), g) for g, start, end in spans(SIZES)])
    d = gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, offs.long(), w_up=w_up, scale_up=su, mode=mode,
                                         interleaved=interleaved, out_dtype=F32, max_sms=8)
    assert d.shape == (m, i) and d.dtype == F32
    d[sum(SIZES):] = float("nan")  # undefined rows of a new output
    expect_groups(d, xd, gate, up, [((slice(start, end),), g) for g, start, end in spans(SIZES)])


@sm90
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("scheme", ["tensor", "rowwise", "block128x1"])
def test_masked_groups_match_double(form, scheme):
    groups, max_m, i, k = len(COUNTS), 64, 136, 192
    x, sx, w, sw, w_up, su, interleaved, xd, gate, up = gpu_case(form, scheme, groups * max_m, i, k, groups)
    x, xd = x.view(groups, max_m, k), xd.view(groups, max_m, k)  # quantised as one matrix: x's scales are its rows'
    sx = sx if scheme == "tensor" else sx.view(groups, max_m, -1)
    sx, sw, su = grouped_scales(scheme, sx, sw, su, masked=True)
    counts = torch.tensor(COUNTS, device="cuda", dtype=I32)
    out = nan_like((groups, max_m, i), BF16)
    assert gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, counts=counts, w_up=w_up, scale_up=su,
                                            mode=SCHEMES[scheme][0], interleaved=interleaved, out=out) is out
    expect_groups(out, xd, gate, up, [((g, slice(0, count)), g) for g, count in enumerate(COUNTS)])


@sm90
def test_grouped_e4m3_output_feeds_the_down_projection():
    from gpu_reference import expect_close, offs_of, spans

    groups, h, i = 5, 256, 256
    sizes = [0, 37, 1, 130, 5]
    x, sx, w13, sw13, _, _, _, xd, gate, up = gpu_case("concat", "block128x128", sum(sizes) + 7, i, h, groups)
    offs = offs_of(sizes)
    q, s = gemmkit.scaled_grouped_swiglu_mm(x, w13, sx, sw13, offs, mode="block", out_dtype=E4M3)
    assert q.shape == (sum(sizes) + 7, i) and s.shape == (sum(sizes) + 7, 2)
    qw2, sw2 = gemmkit.quantize(gpu_rand(groups, h, i), E4M3, "block", block=(128, 128))
    y = gemmkit.scaled_grouped_mm(q, qw2.transpose(-2, -1), s, sw2.transpose(-2, -1), offs, mode="block",
                                  out_dtype=F32)
    for g, start, end in spans(sizes):
        expect_quantized(q[start:end], s[start:end], *fp8_reference(xd[start:end], gate[g], up[g]))
        a, b = dequantized(q[start:end], s[start:end], "block"), dequantized(qw2[g], sw2[g], "block", (128, 128)).t()
        expect_close(y[start:end], a, b, accumulation=FP8_SUMS)


@sm90
def test_errors_and_refusals_on_real_tensors():
    from gpu_reference import offs_of

    x, sx, w, sw, *_ = gpu_case("concat", "block128x128", 64, 13652 // 4, 256)
    with pytest.raises(ValueError, match=r"^scale_w: 128x128 blocks of a w \[2I, K\] with I = 3413"):
        gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="block")
    x, sx, w, sw, *_ = gpu_case("interleaved", "rowwise", 64, 200, 256)
    with pytest.raises(RuntimeError, match="^x: requires grad, but scaled_swiglu_mm"):
        gemmkit.scaled_swiglu_mm(x.requires_grad_(), w, sx, sw, mode="rowwise", interleaved=True)
    with pytest.raises(TypeError, match="^x: dtype torch.bfloat16 is not supported; expected float8"):
        gemmkit.scaled_swiglu_mm(gpu_rand(64, 256), w, sx, sw, mode="rowwise", interleaved=True)
    experts, scales, _ = quantized(gpu_rand(4, 400, 256), "rowwise")
    with pytest.raises(RuntimeError, match="^scale_w: requires grad, but scaled_grouped_swiglu_mm"):
        gemmkit.scaled_grouped_swiglu_mm(x.detach(), experts, sx.squeeze(-1), scales.squeeze(-1).requires_grad_(),
                                         offs_of([16] * 4))


@sm90
def test_torch_compile_with_fullgraph_gives_eager_s_bytes():
    from gpu_reference import offs_of

    x, sx, w, sw, *_ = gpu_case("interleaved", "block128x1", 100, 300, 256)

    def dense(x, w, sx, sw):
        return gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="block", interleaved=True)

    def dense_fp8(x, w, sx, sw):
        return gemmkit.scaled_swiglu_mm(x, w, sx, sw, mode="block", interleaved=True, out_dtype=E4M3)

    assert torch.equal(torch.compile(dense, fullgraph=True)(x, w, sx, sw), dense(x, w, sx, sw))
    for got, want in zip(torch.compile(dense_fp8, fullgraph=True)(x, w, sx, sw), dense_fp8(x, w, sx, sw)):
        assert torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))
    x, sx, w, sw, *_ = gpu_case("concat", "rowwise", 200, 256, 256, groups=4)
    sx, sw = sx.squeeze(-1), sw.squeeze(-2)
    offs = offs_of([60, 0, 1, 139])  # every row owned

    def moe_up(x, w, sx, sw, offs):
        return gemmkit.scaled_grouped_swiglu_mm(x, w, sx, sw, offs)

    assert torch.equal(torch.compile(moe_up, fullgraph=True)(x, w, sx, sw, offs), moe_up(x, w, sx, sw, offs))
    torch._dynamo.reset()


@sm90
def test_opcheck():
    from gpu_reference import offs_of

    x, sx, w, sw, *_ = gpu_case("concat", "block128x128", 64, 256, 256)
    torch.library.opcheck(ops.scaled_swiglu_mm.default,
                          (x, w, None, sx, sw, None, "block", "block", False, SWIGLU, [], [], None),
                          test_utils="test_faketensor")
    x, sx, w, sw, *_ = gpu_case("interleaved", "rowwise", 64, 96, 128, groups=3)
    torch.library.opcheck(ops.scaled_grouped_swiglu_mm.default,
                          (x, w, None, sx, sw, None, offs_of([5, 0, 59]), "contiguous", "rowwise", "rowwise", True,
                           SWIGLU, [], [], F32, 0), test_utils="test_faketensor")
