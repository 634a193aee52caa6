"""gemmkit.nn without a GPU: Linear is a torch.nn.Linear with the same parameters and state_dict,
from_linear shares a module's parameters, and inputs gemmkit does not take (CPU, float32) run
torch's linear. Needs torch, not a GPU; skips, saying so, without torch."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import gemmkit.nn  # noqa: E402


def test_from_linear_shares_the_parameters():
    reference = torch.nn.Linear(6, 4)
    module = gemmkit.nn.Linear.from_linear(reference.eval())
    assert isinstance(module, torch.nn.Linear) and not module.training
    assert module.weight is reference.weight and module.bias is reference.bias
    assert module.state_dict().keys() == reference.state_dict().keys()
    assert repr(module) == "Linear(in_features=6, out_features=4, bias=True)"
    no_bias = gemmkit.nn.Linear.from_linear(torch.nn.Linear(6, 4, bias=False))
    assert no_bias.bias is None and list(no_bias.state_dict()) == ["weight"]
    with pytest.raises(TypeError, match=r"^module: Conv1d; expected a torch.nn.Linear$"):
        gemmkit.nn.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))


def test_inputs_gemmkit_does_not_take_run_torchs_linear():
    torch.manual_seed(0)
    module = gemmkit.nn.Linear(6, 4)
    x = torch.randn(2, 3, 6, requires_grad=True)
    y = module(x)
    assert torch.equal(y, torch.nn.functional.linear(x, module.weight, module.bias))
    y.sum().backward()
    assert module.weight.grad.shape == (4, 6) and x.grad.shape == x.shape
    module.load_state_dict(torch.nn.Linear(6, 4).state_dict())


def test_linear_and_the_module_trace_into_one_graph_of_gemmkit_operators(fake):
    from fake_cuda import cuda
    module = gemmkit.nn.Linear(128, 256, device="cuda", dtype=torch.bfloat16)
    x = cuda(2, 64, 128)
    graph, _ = torch._dynamo.export(lambda x: module(gemmkit.linear(x, module.weight[:128])))(x)
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count(torch.ops.gemmkit.gemm) == 2
    assert graph(x).shape == (2, 64, 256)
