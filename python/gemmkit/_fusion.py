"""The torch.compile pass (gemmkit.enable_compile_fusion): in Inductor's post-grad graphs, a
matrix product (aten.mm, aten.addmm) followed by elementwise operations becomes one
gemmkit.mm_epilogue, the operations its fused epilogue's text.

From each product of 2-D bfloat16 or float16 CUDA tensors, the pass takes the elementwise nodes
that follow it and that gemmkit's epilogue language spells (FUNCTIONS, BINARY, the casts),
whose other operands are numbers or tensors read as name[n] ([N] or [1, N]), name[m] ([M, 1]) or
name[m, n] ([M, N]) of bfloat16, float16 or float32. Where the product's one user views its M
rows as more dimensions ([M, N] -> [B, S, N]: a linear layer on [B, S, K]), the region's tensors
may have them too ([B, S, 1], [B, S, N]), reshaped to M rows for the call, whose result is
viewed back. It fuses the largest such region whose values are used only inside it but for its
last node, which becomes the call's output: a value that escapes (used by another node or a
graph output, such as an activation the backward keeps) ends the region before it. Where no
node can join, the product stays as it was.

The epilogue computes in float32 from the product's float32 sum: casts inside the region round
as their type's store would (bf16(x), f16(x)); the first cast after the product, which torch
makes to compute in float32, is the sum itself. Operations torch ran in 16 bits run in float32
here, so the result rounds less than the graph it replaces.
"""

import math

import torch

aten, prims = torch.ops.aten, torch.ops.prims

# One-operand operations and the epilogue's function for each.
FUNCTIONS = {aten.relu.default: "relu", aten.sigmoid.default: "sigmoid", aten.tanh.default: "tanh",
             aten.erf.default: "erf", aten.exp.default: "exp", aten.log.default: "log", aten.abs.default: "abs",
             aten.neg.default: "neg", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
             aten.silu.default: "silu"}
# Two-operand operations and the epilogue's operator or function.
BINARY = {aten.add.Tensor: "+", aten.sub.Tensor: "-", aten.mul.Tensor: "*", aten.div.Tensor: "/",
          aten.maximum.default: "max", aten.minimum.default: "min"}
CASTS = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
INPUT_DTYPES = (torch.bfloat16, torch.float16)
TENSOR_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _number(x):
    """The text of a finite number operand, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return repr(float(x))


class _Region:
    """The epilogue grown from one product: its nodes' texts, and the tensors it reads. `rows` is
    the shape the region's values have before their last dimension N: (M,), or more dimensions
    where a view after the product splits its rows (x [B, S, K] @ w.t() runs as an mm of B * S
    rows, viewed back as [B, S, N])."""

    def __init__(self, product, m, n, rows):
        self.product, self.m, self.n, self.rows = product, m, n, rows
        self.text = {product: "acc"}  # node -> its value's expression
        self.sums = {product}  # the product and its views: a float32 widening of one is acc
        self.tensors = []  # (name, node, shape it is read as: None as it is, or (M, 1) or (M, N))
        self.names = {}  # node -> name

    def operand(self, x):
        """The expression of operand x (a region node, a number or an outside tensor node), or
        None where the epilogue cannot read it."""
        if x in self.text:
            return self.text[x]
        number = _number(x)
        if number is not None:
            return f"({number})" if number.startswith("-") else number
        val = _val(x)
        if val is None or not isinstance(val, torch.Tensor) or val.dtype not in TENSOR_DTYPES \
                or val.device.type != "cuda":
            return None
        shape, lead = tuple(val.shape), len(self.rows)
        if shape[-1:] == (self.n,) and all(size == 1 for size in shape[:-1]) and len(shape) <= lead + 1:
            index, read_as = "n", (self.n,) if len(shape) != 1 else None
        elif shape == (*self.rows, 1):
            index, read_as = "m", (self.m, 1) if lead > 1 else None
        elif shape == (*self.rows, self.n):
            index, read_as = "m, n", (self.m, self.n) if lead > 1 else None
        else:
            return None
        if x not in self.names:
            self.names[x] = f"t{len(self.names)}"
            self.tensors.append((self.names[x], x, read_as))
        return f"{self.names[x]}[{index}]"

    def expression(self, node):
        """node's expression over the region, or None where it cannot join."""
        if node.op != "call_function" or node.kwargs.get("alpha", 1) != 1 or node.kwargs.get("rounding_mode"):
            return None
        args = node.args
        if node.target in FUNCTIONS and len(args) == 1:
            x = self.operand(args[0])
            return None if x is None else f"{FUNCTIONS[node.target]}({x})"
        if node.target in BINARY and len(args) == 2:
            x, y = self.operand(args[0]), self.operand(args[1])
            if x is None or y is None:
                return None
            op = BINARY[node.target]
            return f"{op}({x}, {y})" if op in ("max", "min") else f"({x} {op} {y})"
        if node.target == prims.convert_element_type.default and args[1] in CASTS:
            x = self.operand(args[0])
            if x is None:
                return None
            if args[0] in self.sums and args[1] == torch.float32:
                return "acc"  # torch's widening of the product to compute: the f32 sum itself
            return f"{CASTS[args[1]]}({x})"
        if node.target == aten.gelu.default and len(args) == 1:
            x = self.operand(args[0])
            approximate = node.kwargs.get("approximate", "none")
            return None if x is None else f"{'gelu_tanh' if approximate == 'tanh' else 'gelu'}({x})"
        return None


def _product(node):
    """(a, b, bias) of a 2-D product of 16-bit CUDA tensors (bias: addmm's input with beta and
    alpha 1, else None), or None."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
        return None
    if node.target == aten.addmm.default:
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            return None
        bias, a, b = node.args[:3]
    else:
        (a, b), bias = node.args[:2], None
    vals = [_val(a), _val(b), _val(node)]
    if any(v is None for v in vals) or any(v.dtype not in INPUT_DTYPES or v.device.type != "cuda" for v in vals):
        return None
    if vals[0].dtype != vals[1].dtype:
        return None
    return a, b, bias


def _fuse(graph, node):
    """Fuses the epilogue after product `node` where one can join; returns whether it did."""
    operands = _product(node)
    if operands is None:
        return False
    a, b, bias = operands
    m, n = _val(node).shape
    region = _Region(node, m, n, (m,))
    definitions = {}  # member -> its expression over the names of earlier members
    if bias is not None:  # addmm's input, as the product's [M, N] reads it
        term = region.operand(bias)
        if term is None:
            return False
        definitions[node] = f"acc + {term}"
        region.text[node] = "v0"
    members = [node]
    view = _row_split(node, m, n)
    if view is not None:
        region.rows = tuple(_val(view).shape[:-1])
        region.text[view] = region.text[node]
        region.sums.add(view)
        members.append(view)
    # Grow in graph order: a node joins where it reads a region value and otherwise only numbers
    # and readable tensors. Users come after what they read, so members stay in graph order.
    order = {x: i for i, x in enumerate(graph.nodes)}
    frontier = sorted(members[-1].users, key=order.get)
    while frontier:
        candidate = frontier.pop(0)
        if candidate in region.text:
            continue
        expression = region.expression(candidate)
        if expression is None or not any(isinstance(x, torch.fx.Node) and x in region.text for x in candidate.args):
            continue
        if expression == "acc":  # the product widened to float32: the sum itself
            region.text[candidate] = region.text[node]
            region.sums.add(candidate)
        else:
            definitions[candidate] = expression
            region.text[candidate] = f"v{len(members)}"
        members.append(candidate)
        frontier = sorted(set(frontier) | set(candidate.users), key=order.get)
    # The last member of the largest region whose other members are used inside it alone.
    for last in range(len(members) - 1, 1 if view is not None else 0, -1):
        inside = set(members[:last + 1])
        if all(u in inside for x in members[:last] for u in x.users):
            break
    else:
        return False
    members, sink = members[:last + 1], members[last]
    sink_val = _val(sink)
    if sink_val is None or sink_val.dtype not in TENSOR_DTYPES or tuple(sink_val.shape) != (*region.rows, n):
        return False
    statements = [f"{region.text[x]} = {definitions[x]}" for x in members[:-1] if x in definitions]
    text = "; ".join([*statements, definitions.get(sink, region.text[sink])])
    used = [(name, t, read_as) for name, t, read_as in region.tensors if f"{name}[" in text]
    with graph.inserting_before(sink):
        inputs = []
        for _, t, read_as in used:  # a tensor of the split rows, read as M rows
            inputs.append(t if read_as is None else _node(graph, aten.reshape.default, (t, list(read_as)),
                                                          _val(t).reshape(read_as)))
        flat = sink_val.reshape(m, n) if view is not None else sink_val
        fused = _node(graph, torch.ops.gemmkit.mm_epilogue.default,
                      (a, b, text, [name for name, _, _ in used], inputs, sink_val.dtype), flat)
        if view is not None:
            fused = _node(graph, aten.view.default, (fused, list(sink_val.shape)), sink_val)
    sink.replace_all_uses_with(fused)
    for x in reversed(members):
        graph.erase_node(x)
    return True


fusions = 0  # products fused by the pass in this process, for a caller (or a test) to see it worked


def _row_split(product, m, n):
    """The product's one user where it is a view of the product's M rows as more dimensions
    ([M, N] -> [..., N]), else None."""
    users = list(product.users)
    if len(users) != 1 or users[0].target not in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        return None
    shape = tuple(_val(users[0]).shape) if _val(users[0]) is not None else ()
    return users[0] if len(shape) >= 2 and shape[-1] == n and math.prod(shape[:-1]) == m else None


def _node(graph, target, args, val):
    node = graph.call_function(target, args)
    node.meta["val"] = val
    return node


def fuse_epilogues(graph):
    """The pass: every product's epilogue fused where one can be; returns how many."""
    global fusions
    fused = 0
    for node in list(graph.nodes):
        if not getattr(node, "_erased", False) and _fuse(graph, node):
            fused += 1
    if fused:
        graph.lint()
        fusions += fused
    return fused


def _pass_type():
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class FusionPass(CustomGraphPass):
        """fuse_epilogues as Inductor's post-grad pass; its uuid (for Inductor's cache) is this
        file's hash."""

        def __call__(self, graph):
            fuse_epilogues(graph)

        def uuid(self):
            return get_hash_for_files((__file__,))

    return FusionPass


_FusionPass = None


def enable_compile_fusion(enabled=True):
    """From now on (enabled) or no longer, torch.compile's Inductor graphs run matrix products
    followed by elementwise operations as gemmkit products with fused epilogues (see _fusion).
    Takes Inductor's post_grad_custom_post_pass; raises RuntimeError where something else holds
    it."""
    global _FusionPass
    import torch._inductor.config as config

    if _FusionPass is None:
        _FusionPass = _pass_type()
    current = config.post_grad_custom_post_pass
    if current is not None and not isinstance(current, _FusionPass):
        raise RuntimeError(f"enable_compile_fusion: torch._inductor.config.post_grad_custom_post_pass is already "
                           f"{current!r}; expected it unset (gemmkit's pass takes it)")
    config.post_grad_custom_post_pass = _FusionPass() if enabled else None
