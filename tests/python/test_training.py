"""Training through gemmkit's torch functions on an sm_90 GPU: linear and nn.Linear against double
precision, every gradient in its input's layout with the real kernels, and the blocks of
`python -m gemmkit.bench --block` (a Llama-style MLP and a Qwen3-like mixture of experts): their
gradients against double precision, eager and compiled, and no copy kernel in a training step
that the same block on torch's products does not launch too. Skips, saying so, without torch or
an sm_90 GPU."""

import subprocess
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import expect_grads, rand, skip_without_sm90  # noqa: E402

skip_without_sm90()

import torch.nn.functional as F  # noqa: E402

import gemmkit  # noqa: E402
import gemmkit.nn  # noqa: E402
from gemmkit import _bench_block as blocks  # noqa: E402


# --- linear and nn.Linear -------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(33, 96), (2, 5, 96), (96,)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_double_with_any_leading_dimensions(shape, with_bias):
    x, w = rand(*shape, requires_grad=True), rand(80, 96, requires_grad=True)
    bias = rand(80, requires_grad=True) if with_bias else None
    y = gemmkit.linear(x, w, bias)
    assert y.shape == (*shape[:-1], 80) and y.dtype == x.dtype
    inputs = (x, w) if bias is None else (x, w, bias)
    expect_grads(y, inputs, lambda *t: F.linear(*t))


def test_linear_rejects_mismatched_shapes():
    x, w = rand(4, 96), rand(80, 96)
    with pytest.raises(ValueError, match=r"^weight: shape \[80, 95\] has in_features = 95 but input \[4, 96\]"):
        gemmkit.linear(x, rand(80, 95))
    with pytest.raises(ValueError, match=r"^bias: shape \[79\]; expected \[out_features\] = \[80\]$"):
        gemmkit.linear(x, w, rand(79))
    with pytest.raises(ValueError, match=r"^input: 0 dimensions; expected at least 1"):
        gemmkit.linear(rand(()), w)


def test_a_backward_pass_that_starts_with_gemmkit():
    # torch's autograd thread has made no CUDA call when its first work is gemmkit's: gemmkit must
    # make the device's context current there (a module load failed with "invalid device context").
    code = ("import torch, gemmkit\n"
            "x = torch.randn(33, 96, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
            "w = torch.randn(80, 96, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
            "gemmkit.linear(x, w).backward(torch.ones(33, 80, device='cuda', dtype=torch.bfloat16))\n"
            "assert torch.equal(x.grad, gemmkit.mm(torch.ones(33, 80, device='cuda', dtype=torch.bfloat16), w))\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nn_linear_is_a_drop_in():
    torch.manual_seed(0)
    reference = torch.nn.Linear(96, 80, device="cuda", dtype=torch.bfloat16)
    module = gemmkit.nn.Linear.from_linear(reference)
    assert isinstance(module, torch.nn.Linear) and module.weight is reference.weight and module.bias is reference.bias
    assert module.state_dict().keys() == reference.state_dict().keys()
    x = rand(3, 7, 96, requires_grad=True)
    expect_grads(module(x), (x, module.weight, module.bias), lambda *t: F.linear(*t))
    fresh = gemmkit.nn.Linear(96, 80, bias=False, device="cuda", dtype=torch.bfloat16)
    fresh.load_state_dict({"weight": reference.weight.detach()})
    assert torch.equal(fresh(x), gemmkit.linear(x, reference.weight))


# --- gradient layouts with the real kernels ------------------------------------------------------

def expect_layouts(out, inputs):
    got = torch.autograd.grad(out, inputs, torch.randn_like(out))
    for g, t in zip(got, inputs):
        assert g.stride() == t.stride(), f"gradient strides {g.stride()}, input's {t.stride()}"


def test_gradients_take_their_inputs_layouts():
    x, w, bias = rand(64, 96, requires_grad=True), rand(80, 96, requires_grad=True), rand(80, requires_grad=True)
    expect_layouts(gemmkit.linear(x, w, bias), (x, w, bias))
    expect_layouts(gemmkit.mm(x, w.t()), (x, w))
    a = rand(96, 64, requires_grad=True)  # a column-major A: a.t() is [64, 96]
    expect_layouts(gemmkit.mm(a.t(), w.t()), (a, w))
    xs, ws = rand(3, 64, 96, requires_grad=True), rand(3, 80, 96, requires_grad=True)
    expect_layouts(gemmkit.bmm(xs, ws.transpose(1, 2)), (xs, ws))
    expect_layouts(gemmkit.bmm(xs, w.t()), (xs, w))
    expect_layouts(gemmkit.addmm(bias, x, w.t()), (bias, x, w))


@pytest.mark.parametrize("layout", ["contiguous", "masked"])
def test_grouped_gradients_take_their_inputs_layouts(layout):
    w = rand(4, 80, 96, requires_grad=True)  # [G, N, K], passed as w.transpose(-2, -1)
    if layout == "contiguous":
        a = rand(200, 96, requires_grad=True)
        out = gemmkit.grouped_mm(a, w.transpose(-2, -1), torch.tensor([50, 90, 150, 200], device="cuda",
                                                                        dtype=torch.int32))
    else:
        a = rand(4, 64, 96, requires_grad=True)
        out = gemmkit.grouped_mm(a, w.transpose(-2, -1), counts=torch.tensor([64, 3, 0, 40], device="cuda"))
    expect_layouts(out, (a, w))


# --- the blocks ------------------------------------------------------------------------------------

SMALL = {"mlp": {"tokens": 512, "hidden": 256, "intermediate": 384},
         "moe": {"tokens": 512, "hidden": 256, "intermediate": 128, "experts": 16, "top_k": 4}}


def double_grouped_mm(a, b, offs):
    """torch._grouped_mm's product in double, group by group."""
    ends = offs.tolist()
    return torch.cat([a[s:e] @ b[g] for g, (s, e) in enumerate(zip([0] + ends[:-1], ends))])


DOUBLE = blocks.Products("double", F.linear, double_grouped_mm)


def block_case(kind):
    """(a function of the block's differentiable tensors, the tensors) for a block of SMALL size,
    the moe block's routing fixed beforehand (top-k in double could pick other experts)."""
    torch.manual_seed(1)
    forward, tensors = blocks.make_block(kind, SMALL[kind])
    if kind == "mlp":
        return forward, tensors
    x, router, w13, w2 = tensors
    token, offs, weights = blocks.route(blocks.TORCH, x.detach(), router, SMALL[kind]["top_k"])
    weights = weights.detach().requires_grad_()
    return (lambda products, x, w13, w2, weights: blocks.experts(products, x, token, offs, weights, w13, w2),
            (x, w13, w2, weights))


def relative_errors(forward, products, tensors, up, reference, compiled):
    run = torch.compile(forward, dynamic=False) if compiled else forward
    got = torch.autograd.grad(run(products, *tensors), tensors, up)
    return [((g.double() - r).norm() / r.norm()).item() for g, r in zip(got, reference)]


@pytest.mark.parametrize("kind", ["mlp", "moe"])
@pytest.mark.parametrize("compiled", [False, True])
def test_block_gradients_match_double_as_closely_as_torchs(kind, compiled):
    forward, tensors = block_case(kind)
    up = torch.randn_like(tensors[0])
    doubled = [t.detach().double().requires_grad_() for t in tensors]
    reference = torch.autograd.grad(forward(DOUBLE, *doubled), doubled, up.double())
    ours = relative_errors(forward, blocks.GEMMKIT, tensors, up, reference, compiled)
    theirs = relative_errors(forward, blocks.TORCH, tensors, up, reference, compiled)
    for name, e_ours, e_theirs in zip(("input", "w13 or router", "w2", "weights"), ours, theirs):
        assert e_ours <= 2 * e_theirs + 2.0 ** -10, f"{name}: relative error {e_ours:.2e}, torch's {e_theirs:.2e}"


@pytest.mark.parametrize("kind", ["mlp", "moe"])
def test_a_training_step_launches_no_copy_that_torchs_does_not(kind):
    forward, tensors = blocks.make_block(kind, SMALL[kind])
    copies = {}
    for products in (blocks.TORCH, blocks.GEMMKIT):
        launched = blocks.kernels(blocks.stepper(forward, products, tensors, compiled=False))
        copies[products.name] = Counter(name for name, _ in launched if blocks.is_copy(name))
    extra = copies["gemmkit"] - copies["torch"]
    assert not extra, f"copies only gemmkit's step launches: {dict(extra)}"
