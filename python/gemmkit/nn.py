"""gemmkit.nn: modules that run gemmkit's kernels where torch.nn's would run torch's.

`Linear` is torch.nn.Linear (the same parameters, initialisation, state_dict and repr; an
instance of torch.nn.Linear) whose forward runs gemmkit.linear. Swap one into a model with
`model.proj = gemmkit.nn.Linear.from_linear(model.proj)`: the new module shares the old one's
parameters, so optimizers, hooks on the parameters and checkpoints see the same tensors.
"""

import gemmkit

gemmkit._load_torch("gemmkit.nn")
import torch  # noqa: E402

_GEMMKIT_DTYPES = (torch.bfloat16, torch.float16)


class Linear(torch.nn.Linear):
    """torch.nn.Linear on gemmkit: y = x @ weight.T + bias. CUDA inputs of bfloat16 or float16
    with weights of the same type run gemmkit.linear; any other input (CPU tensors, float32,
    mixed types) runs torch.nn.functional.linear, as torch.nn.Linear would, so a model converted
    before it is cast or moved to the GPU still works."""

    def forward(self, input):
        weight, bias = self.weight, self.bias
        if (input.is_cuda and input.dtype in _GEMMKIT_DTYPES and weight.dtype == input.dtype
                and (bias is None or bias.dtype == input.dtype)):
            return gemmkit.linear(input, weight, bias)
        return torch.nn.functional.linear(input, weight, bias)

    @classmethod
    def from_linear(cls, module):
        """A gemmkit Linear that holds `module`'s parameters themselves (not copies), in its
        training mode; `module` is a torch.nn.Linear."""
        if not isinstance(module, torch.nn.Linear):
            raise TypeError(f"module: {type(module).__name__}; expected a torch.nn.Linear")
        linear = cls(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
        linear.weight = module.weight
        linear.bias = module.bias
        return linear.train(module.training)
