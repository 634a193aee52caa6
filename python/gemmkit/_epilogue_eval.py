"""A fused epilogue's text evaluated with torch operations, element by element over whole tensors:
the backward of a product through an epilogue (autograd differentiates this evaluation), and CPU
stand-ins in tests. gemmkit's parser checks a text before it gets here (gemmkit.epilogue_uses);
its grammar is a subset of Python's expressions and statements (statements split by ';', `name =
value`, `name[m, n] = value`, reductions `name[n] = sum(value)` (or amax, name[m], name[]), reads
`name[n]`, `name[m]`, `name[m, n]`, `name[]`, + - * / and unary minus, calls), so Python's ast reads
it once `name[]` is spelt `name[()]`. Each function is the formula of kernels/sm90/epilogue_ops.cuh."""

import ast
import functools
import math
import operator
import re

import torch
import torch.nn.functional as F


def _round(dtype):
    """A cast of the language: the value rounded to `dtype` as a store of it would, kept in the
    type it computes in."""
    return lambda x: x.to(dtype).to(x.dtype)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # gelu_tanh's scale of its cubic
_GELU_TANH_CUBIC = 0.044715


def _dgelu(x):
    """gelu's slope, Phi(x) + x phi(x), Phi the standard normal distribution and phi its density."""
    return 0.5 * (1.0 + torch.erf(x * math.sqrt(0.5))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _dgelu_tanh(x):
    """gelu_tanh's slope, 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) du/dx with u = sqrt(2/pi) (x +
    0.044715 x^3)."""
    t = torch.tanh(_SQRT_2_OVER_PI * (x + _GELU_TANH_CUBIC * x * x * x))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_TANH_CUBIC * x * x)


def _dsilu(x):
    """silu's slope, s (1 + x (1 - s)) with s = sigmoid(x)."""
    s = torch.sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


def _dsigmoid(x):
    s = torch.sigmoid(x)
    return s * (1.0 - s)


def _dtanh(x):
    t = torch.tanh(x)
    return 1.0 - t * t


def _drelu(x):
    """relu's slope, 1 where x > 0, else 0 (0 at 0 and for NaN, as the kernels' comparison). A
    step: a constant to autograd, whose slope of it is 0."""
    return (x > 0).to(x.dtype)


FUNCTIONS = {
    "identity": lambda x: x, "relu": torch.relu, "relu2": lambda x: torch.relu(x).square(), "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "erf": torch.erf, "exp": torch.exp, "log": torch.log, "abs": torch.abs, "neg": torch.neg,
    "square": torch.square, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "max": torch.maximum, "min": torch.minimum,
    "clamp": torch.clamp, "bf16": _round(torch.bfloat16), "f16": _round(torch.float16), "f32": lambda x: x,
    # the activations' slopes, for backward epilogues (dD * dgelu(pre[m, n])): torch operations, so
    # that autograd differentiates them in turn
    "dgelu": _dgelu, "dgelu_tanh": _dgelu_tanh, "dsilu": _dsilu, "drelu": _drelu, "dsigmoid": _dsigmoid,
    "dtanh": _dtanh,
}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@functools.lru_cache(maxsize=256)
def _statements(text):
    return ast.parse(re.sub(r"\[\s*\]", "[()]", text), mode="exec").body


def _index(subscript):
    """The index of name[n], name[m], name[m, n] or name[()] (the text's name[]): 'n', 'm', 'mn'
    or '', as gemmkit.epilogue_uses spells it."""
    if isinstance(subscript.slice, ast.Name):
        return subscript.slice.id
    return "" if isinstance(subscript.slice, ast.Tuple) and not subscript.slice.elts else "mn"


# The dimensions of D a reduction to name[n], name[m] or name[] takes its values over.
_REDUCED_DIMS = {"n": (-2,), "m": (-1,), "": (-2, -1)}


def _reduce(x, kind, dims):
    """sum(x) or amax(x) (the largest |x|, NaN where any is) over dims, kept as dimensions of 1."""
    return x.sum(dims, keepdim=True) if kind == "sum" else x.abs().amax(dims, keepdim=True)


def fit_reduction(value, kind, shape):
    """A reduction's value as evaluate gives it, one a batch ([1, N] or [batch, 1, N] for name[n],
    [M, 1] or [batch, M, 1] for name[m], [1, 1] or [batch, 1, 1] for name[]), in an output's
    `shape`: as it is where that holds as many values (reshaped: [N], [batch, N], [batch], ...),
    else (a shape of one batch's values: [N], [1, N], [M], 0-d, ...) reduced over the batch too,
    as gemmkit reduces into an output without the batch. `kind` is 'sum' or 'amax'."""
    if value.dim() == 3 and value.numel() != math.prod(shape):
        value = value.sum(0) if kind == "sum" else value.amax(0)  # amax's values are |x| already
    return value.reshape(shape)


def evaluate(text, acc, tensors, acc2=None, shapes=None):
    """(D's value, {output name: value}) of the epilogue `text` over a product `acc` [M, N] or
    [batch, M, N] (and a dual GEMM's second product `acc2`), `tensors` mapping each name the text
    reads to its tensor: name[n] of N elements (any shape; batch * N elements: one a batch),
    name[m] of M (batch * M), name[m, n] [M, N] (or [batch, M, N]), name[] of one element (0-d,
    [1], [1, 1]; batch elements: one a batch). Values compute in acc's dtype; tensors are read in
    theirs and broadcast as their index says. D has acc's shape, an M x N output D's; a
    reduction's value (name[n] = sum(x), amax(x): the largest |x|; name[m] = ..., name[] = ...)
    is x's sum or amax over the elements of D its index leaves out, batch by batch: [1, N] or
    [batch, 1, N] for name[n], [M, 1] or [batch, M, 1] for name[m], [1, 1] or [batch, 1, 1] for
    name[]; or, where `shapes` maps its name to an output's shape, in that shape (fit_reduction)."""
    m, n = acc.shape[-2:]

    def vector(t, size, shape):  # a vector of `size` elements, or one a batch
        return t.reshape(shape if t.numel() == size else (-1, *shape))

    reads = {"n": lambda t: vector(t, n, (1, n)), "m": lambda t: vector(t, m, (m, 1)),
             "": lambda t: vector(t, 1, (1, 1))}
    values = {"acc": acc, "acc2": acc2}
    outputs = {}

    def value(node):
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.Subscript):
            index = _index(node)
            t = tensors[node.value.id]
            return reads[index](t) if index in reads else t
        if isinstance(node, ast.UnaryOp):  # unary minus
            return -value(node.operand)
        if isinstance(node, ast.BinOp):
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Call):  # numbers as tensors of acc's dtype: max(x, 0), clamp's bounds
            args = [a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=acc.dtype, device=acc.device)
                    for a in map(value, node.args)]
            return FUNCTIONS[node.func.id](*args)
        raise ValueError(f"epilogue: {ast.dump(node)} is not of the language")

    def over_d(x):  # a value over D's elements
        if not isinstance(x, torch.Tensor):  # a text of numbers alone
            return torch.full_like(acc, x)
        if x.shape != acc.shape:  # a text of tensors that broadcast (bias[n], a batch's shared r[m, n])
            return x.expand(torch.broadcast_shapes(x.shape, acc.shape))
        return x

    statements = _statements(text)
    for statement in statements[:-1]:
        target = statement.targets[0]
        if not isinstance(target, ast.Subscript):
            values[target.id] = value(statement.value)
            continue
        name, index = target.value.id, _index(target)
        if index == "mn":
            outputs[name] = value(statement.value)
            continue
        call = statement.value  # sum(x) or amax(x): the parser takes nothing else here
        kind = call.func.id
        reduced = _reduce(over_d(value(call.args[0])), kind, _REDUCED_DIMS[index])
        outputs[name] = reduced if shapes is None or name not in shapes else fit_reduction(reduced, kind, shapes[name])
    return over_d(value(statements[-1].value)), outputs
