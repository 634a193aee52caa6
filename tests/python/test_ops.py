"""torch.ops.gemmkit without a GPU: the operators' registration, their fake implementations
(output shapes and dtypes computed on fake CUDA tensors, as torch.compile does), tracing whole
functions into one graph, and the argument errors raised while tracing. Needs torch, not a GPU;
skips, saying so, without torch."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
from fake_cuda import cuda  # noqa: E402

import gemmkit  # noqa: E402
from dlpack_array import Array  # noqa: E402

BF16, F32, E4M3 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


def test_operators_are_registered_on_import_when_torch_is_loaded():
    code = ("import torch, gemmkit\n"
            "for op in ('gemm', 'gemm_out', 'gemm_epilogue', 'mm_epilogue', 'quantize', 'grouped_mm', "
            "'grouped_mm_out', 'grouped_mm_epilogue', 'grouped_wgrad', 'grouped_wgrad_out', 'grouped_wgrad_epilogue', "
            "'swiglu_mm', 'swiglu_mm_out', 'grouped_swiglu_mm', 'grouped_swiglu_mm_out'):\n"
            "    assert hasattr(torch.ops.gemmkit, op), op\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fake_shapes_and_dtypes(fake):
    a, b = cuda(64, 96), cuda(96, 40)
    for d, shape, dtype in [(gemmkit.mm(a, b), (64, 40), BF16),
                            (gemmkit.mm(a, b, out_dtype=F32), (64, 40), F32),
                            (gemmkit.bmm(cuda(3, 64, 96), b), (3, 64, 40), BF16),
                            (gemmkit.bmm(a, cuda(5, 96, 40)), (5, 64, 40), BF16),
                            (gemmkit.addmm(cuda(40, dtype=F32), a, b), (64, 40), BF16),
                            (gemmkit.mm(a.t().contiguous().t(), b[:, :33]), (64, 33), BF16),
                            (gemmkit.scaled_mm(cuda(64, 96, dtype=E4M3), cuda(96, 40, dtype=E4M3),
                                               cuda((), dtype=F32), cuda((), dtype=F32)), (64, 40), BF16)]:
        assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor)
        assert tuple(d.shape) == shape and d.dtype == dtype and d.device.type == "cuda"


@pytest.mark.parametrize("mode,block,scales", [("tensor", None, (1, 1)), ("rowwise", None, (100, 1)),
                                               ("block", None, (100, 3)), ("block", (128, 128), (1, 3)),
                                               ("mx", None, (100, 9))])
def test_fake_quantize_shapes(fake, mode, block, scales):
    q, s = gemmkit.quantize(cuda(100, 260), mode=mode, block=block)
    assert q.shape == (100, 260) and q.dtype == E4M3
    assert tuple(s.shape) == scales
    assert s.dtype == (torch.float8_e8m0fnu if mode == "mx" else F32)
    q, s = gemmkit.quantize(cuda(2, 100, 260), torch.float8_e5m2, mode)
    assert q.shape == (2, 100, 260) and q.dtype == torch.float8_e5m2 and s.shape[0] == 2


def test_quantized_results_never_require_grad(fake):
    # Traced, as in eager: x's gradient cannot silently stop at the quantisation.
    x = cuda(100, 260).requires_grad_()
    for mode in ("tensor", "rowwise", "block", "mx"):
        q, s = gemmkit.quantize(x, mode=mode)
        assert not q.requires_grad and not s.requires_grad, mode
    q, s = torch.ops.gemmkit.quantize(x, E4M3, 1, 128, F32, False)
    assert not q.requires_grad and not s.requires_grad


def test_fake_out_is_returned(fake):
    out = cuda(8, 4, dtype=F32)
    assert gemmkit.mm(cuda(8, 16), cuda(16, 4), out=out) is out


def test_a_traced_function_is_one_graph_of_gemmkit_operators(fake):
    def layer(x, w, bias):
        h = gemmkit.addmm(bias, x, w.t()).relu()
        q, s = gemmkit.quantize(h, mode="rowwise")
        return gemmkit.scaled_mm(q, q.t(), s, s.t(), mode="rowwise", out_dtype=F32)

    x, w, bias = cuda(64, 128), cuda(256, 128), cuda(256, dtype=F32)
    graph, _ = torch._dynamo.export(layer)(x, w, bias)  # raises where dynamo would break the graph
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert torch.ops.gemmkit.gemm in targets and torch.ops.gemmkit.quantize in targets
    assert graph(x, w, bias).shape == (64, 64)


def test_a_traced_epilogue_is_one_operator_that_writes_out_and_the_outputs(fake):
    text = "h = acc * scale[m] + bias[n]; pre[m, n] = h; silu(h) * gate[m, n]"

    def layer(x, w, bias, scale, gate, pre):
        return gemmkit.mm(x, w.t(), epilogue=text, bias=bias, scale=scale, gate=gate, pre=pre)

    args = (cuda(64, 128), cuda(96, 128), cuda(96), cuda(64, dtype=F32), cuda(64, 96), cuda(64, 96, dtype=F32))
    graph, _ = torch._dynamo.export(layer)(*args)  # first: the text is parsed while tracing
    d = layer(*args)
    assert isinstance(d, torch._subclasses.fake_tensor.FakeTensor) and tuple(d.shape) == (64, 96) and d.dtype == BF16
    calls = [node for node in graph.graph.nodes if node.op == "call_function"]
    fused = [node for node in calls if node.target == torch.ops.gemmkit.gemm_epilogue]
    assert len(fused) == 1 and not any(node.target == torch.ops.gemmkit.gemm for node in calls)
    assert fused[0].args[7] == text and fused[0].args[8] == ["scale", "bias", "gate", "pre"]


def test_a_traced_grouped_epilogue_takes_per_expert_and_per_token_vectors(fake):
    text = "(acc + bias[n]) * route[m]"

    def down(h, w, offs, bias, route):
        return gemmkit.grouped_mm(h, w.transpose(-2, -1), offs, epilogue=text, bias=bias, route=route)

    args = (cuda(256, 64), cuda(4, 32, 64), cuda(4, dtype=torch.int32), cuda(4, 32), cuda(256, dtype=F32))
    graph, _ = torch._dynamo.export(down)(*args)
    fused = [node for node in graph.graph.nodes if node.target == torch.ops.gemmkit.grouped_mm_epilogue]
    assert len(fused) == 1 and fused[0].args[5] == text and fused[0].args[6] == ["bias", "route"]
    d = down(*args)
    assert tuple(d.shape) == (256, 32) and d.dtype == BF16
    masked = gemmkit.grouped_mm(cuda(4, 16, 64), cuda(4, 64, 32), counts=cuda(4, dtype=torch.int32),
                                epilogue="silu(acc) * route[m]", route=cuda(4, 16, dtype=F32))
    assert tuple(masked.shape) == (4, 16, 32)
    wgrad = gemmkit.grouped_mm(cuda(32, 256), cuda(256, 48), cuda(4, dtype=torch.int32), epilogue="silu(acc)")
    assert tuple(wgrad.shape) == (4, 32, 48)  # the weight gradient takes one too (test_grouped_ops.py)
    with pytest.raises(TypeError, match="^grouped_mm\\(\\) got unexpected keyword arguments route"):
        gemmkit.grouped_mm(*args[:3], route=args[4])


def test_bmm_addmm_and_scaled_mm_take_an_epilogue(fake):
    d = gemmkit.bmm(cuda(3, 64, 32), cuda(32, 48), epilogue="relu(acc + bias[n]) * s[m]", bias=cuda(3, 48),
                    s=cuda(3, 64, dtype=F32))
    assert tuple(d.shape) == (3, 64, 48) and d.dtype == BF16
    d = gemmkit.addmm(cuda(48), cuda(64, 32), cuda(32, 48), epilogue="gelu(acc)")
    assert tuple(d.shape) == (64, 48)
    d = gemmkit.scaled_mm(cuda(64, 128, dtype=E4M3), cuda(128, 48, dtype=E4M3), cuda((), dtype=F32),
                          cuda((), dtype=F32), out_dtype=F32, epilogue="silu(acc) * g[m, n]", g=cuda(64, 48))
    assert tuple(d.shape) == (64, 48) and d.dtype == F32

    def traced(a, b, sa, sb, g):
        return gemmkit.scaled_mm(a, b, sa, sb, mode="rowwise", epilogue="silu(acc) * g[m, n]", g=g)

    args = (cuda(64, 128, dtype=E4M3), cuda(128, 48, dtype=E4M3), cuda(64, 1, dtype=F32), cuda(1, 48, dtype=F32),
            cuda(64, 48))
    graph, _ = torch._dynamo.export(traced)(*args)
    fused = [node for node in graph.graph.nodes if node.target == torch.ops.gemmkit.gemm_epilogue]
    assert len(fused) == 1 and fused[0].args[5:7] == ("rowwise", "rowwise") and fused[0].args[8] == ["g"]
    for function in (gemmkit.bmm, gemmkit.scaled_mm):
        with pytest.raises(TypeError, match=f"^{function.__name__}\\(\\) got unexpected keyword arguments g;"):
            function(*args[:4] if function is gemmkit.scaled_mm else (cuda(2, 8, 16), cuda(16, 4)), g=args[4])


def test_operator_tensors_take_their_index_by_name():
    from gemmkit import _torch

    x, y = object(), object()
    assert _torch.epilogue_triples("acc * s[m] + b[n]", ["b", "s"], [x, y]) == [("b", x, "n"), ("s", y, "m")]


def test_epilogue_errors_name_the_tensor(fake):
    a, b = cuda(8, 16), cuda(16, 4)
    with pytest.raises(ValueError, match="^bias: not given; the epilogue reads bias\\[n\\], expected bias=tensor$"):
        gemmkit.mm(a, b, epilogue="relu(acc + bias[n])")
    with pytest.raises(ValueError, match="^pre: not given; the epilogue writes pre\\[m, n\\] ="):
        gemmkit.mm(a, b, epilogue="pre[m, n] = acc; relu(acc)")
    with pytest.raises(ValueError, match="^gate: not a tensor the epilogue names; expected bias$"):
        gemmkit.mm(a, b, epilogue="relu(acc + bias[n])", bias=cuda(4), gate=cuda(8, 4))
    with pytest.raises(ValueError, match="^epilogue: column 6 .*unknown function 'slu'"):
        gemmkit.mm(a, b, epilogue="relu(slu(acc))")
    with pytest.raises(TypeError, match="^mm\\(\\) got unexpected keyword arguments bias; tensors are taken only with"):
        gemmkit.mm(a, b, bias=cuda(4))
    with pytest.raises(TypeError, match="^bias: expected a torch.Tensor"):
        gemmkit.mm(a, b, epilogue="acc + bias[n]", bias=[1.0] * 4)
    with pytest.raises(NotImplementedError, match="^epilogue: no gradient flows through a fused epilogue with out="):
        gemmkit.mm(a.requires_grad_(), b, epilogue="relu(acc)", out=cuda(8, 4))
    assert gemmkit.mm(a, b, epilogue="relu(acc)").requires_grad  # mm_epilogue's formula


def test_errors_name_the_argument_while_tracing(fake):
    a, b = cuda(8, 16), cuda(16, 4)
    with pytest.raises(ValueError, match="^b: 3 dimensions; expected 2$"):
        gemmkit.mm(a, cuda(2, 16, 4))
    with pytest.raises(TypeError, match="^a: dtype torch.float64 is not supported"):
        gemmkit.mm(cuda(8, 16, dtype=torch.float64), b)
    with pytest.raises(ValueError, match="^a, b: both 2-D"):
        gemmkit.bmm(a, b)
    with pytest.raises(ValueError, match="^out: dtype torch.bfloat16 differs from out_dtype torch.float32"):
        gemmkit.mm(a, b, out=cuda(8, 4), out_dtype=F32)
    with pytest.raises(ValueError, match="^mode: 'blocks'; expected 'tensor', 'rowwise', 'block' or 'mx'"):
        gemmkit.scaled_mm(a, b, cuda(1, dtype=F32), cuda(1, dtype=F32), mode="blocks")
    with pytest.raises(ValueError, match="^mode: 'row'; expected"):
        gemmkit.quantize(a, mode="row")
    with pytest.raises(ValueError, match="^block: "):
        gemmkit.quantize(a, mode="block", block=(0, 128))


def test_errors_without_fake_tensors():
    a = torch.ones(8, 16, dtype=BF16)
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor$"):
        gemmkit.mm(a, a.t())
    with pytest.raises(TypeError, match="^a: expected a torch.Tensor or an array with __dlpack__, got list$"):
        gemmkit.mm([[1.0]], a)
    with pytest.raises(TypeError, match="^input: expected a torch.Tensor"):
        gemmkit.addmm(1.0, a, a.t())
    with pytest.raises(TypeError, match="^scale_a: expected a torch.Tensor"):
        gemmkit.scaled_mm(a, a.t(), 1.0, 1.0)


def test_dlpack_arrays_are_taken_as_tensors():
    # A CPU array with __dlpack__ comes in through DLPack and is then refused for its device, as a
    # CPU tensor is.
    a = Array(torch.ones(8, 16, dtype=F32))
    with pytest.raises(ValueError, match="^a: on cpu; expected a CUDA tensor$"):
        gemmkit.mm(a, a)


def run_bench(*args):
    return subprocess.run([sys.executable, "-m", "gemmkit.bench", *args], capture_output=True, text=True)


def test_the_python_bench_reports_bad_suites_in_one_line(tmp_path):
    missing = run_bench("--suite", "no-such-suite")
    assert missing.returncode != 0
    last = missing.stderr.strip().splitlines()[-1]
    assert last.startswith("gemmkit.bench: --suite no-such-suite: no such file, nor a shipped suite ("), last
    assert "dense-decode, dense-large" in last, last
    bad = tmp_path / "bad.txt"
    bad.write_text("64 64 64 NT int8\n")
    malformed = run_bench("--suite", str(bad))
    assert malformed.returncode != 0
    assert malformed.stderr.strip().startswith(f"gemmkit.bench: {bad}:1: ")
    # Grouped lines are the bench's too, with the CLI's errors.
    bad.write_text("64 64 64\ngrouped fwd 4 1000 64 64 bf16 zipf\n")
    malformed = run_bench("--suite", str(bad))
    assert malformed.returncode != 0
    assert malformed.stderr.strip() == (f"gemmkit.bench: {bad}:2: unknown distribution 'zipf'; expected balanced, "
                                        "skew:R, zipf:S, random:SEED or routed:SEED")
    # Epilogue lines are the CLI's alone so far: refused, not run unfused.
    bad.write_text("64 64 64\nepilogue relu(acc)\n128 64 64\n")
    fused = run_bench("--suite", str(bad))
    assert fused.returncode != 0
    assert fused.stderr.strip() == (f"gemmkit.bench: {bad}:3: a line under `epilogue relu(acc)`, which only gemmkit "
                                    "bench times so far; expected a suite without epilogue lines")
    # (4-bit weights' lines: test_bench_lowbit.py.)


def test_views_are_read_from_the_tensors():
    from gemmkit import _gemmkit

    x = torch.ones(4, 6, 10, dtype=BF16)[:, 1:, ::2]
    v = _gemmkit.view_of(x, "a")
    assert (v.data, v.dtype, v.shape, v.strides) == (x.data_ptr(), gemmkit.DType.bf16, [4, 5, 5], [60, 10, 2])
    assert _gemmkit.view_of(x[0].t(), "b").strides == [2, 10]
    column = _gemmkit.scale_view_of(torch.ones(12)[::3], "scale_a", True)
    row = _gemmkit.scale_view_of(torch.ones(12)[::3], "scale_b", False)
    assert (column.shape, column.strides, row.shape, row.strides) == ([4, 1], [3, 1], [1, 4], [12, 3])
    assert _gemmkit.scale_view_of(torch.ones(()), "scale_a", True).shape == [1, 1]
    with pytest.raises(ValueError, match="^a: 4 dimensions; expected 2 or 3$"):
        _gemmkit.view_of(torch.ones(1, 2, 3, 4, dtype=BF16), "a")
    with pytest.raises(TypeError, match="^out: dtype torch.int32 is not supported"):
        _gemmkit.view_of(torch.ones(2, 2, dtype=torch.int32), "out")


def test_first_use_while_tracing_registers_the_operators():
    # gemmkit imported before torch, and its first use inside a function torch traces: the lookup
    # of gemmkit.mm imports torch's side and registers the operators there and then.
    code = ("import gemmkit, sys\n"
            "assert 'torch' not in sys.modules\n"
            "import torch\n"
            "from torch._subclasses.fake_tensor import FakeTensorMode\n"
            "with FakeTensorMode():\n"
            "    a = torch.empty(64, 32, device='cuda', dtype=torch.bfloat16)\n"
            "graph, _ = torch._dynamo.export(lambda x: gemmkit.mm(x, x.t()))(a)\n"
            "assert torch.ops.gemmkit.gemm in [n.target for n in graph.graph.nodes], graph.graph\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_cuda_runtime_next_to_torch():
    # gemmkit imported first: its CUDA runtime is linked in, so torch's is the only libcudart.
    code = ("import gemmkit, torch\n"
            "maps = {line.split()[-1] for line in open('/proc/self/maps') if 'libcudart.so' in line}\n"
            "assert len(maps) <= 1, maps\n")
    subprocess.run([sys.executable, "-c", code], check=True)
