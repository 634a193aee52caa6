"""The torch.compile pass (gemmkit.enable_compile_fusion): in Inductor's post-grad graphs, a
matrix product (aten.mm, aten.addmm, aten.bmm) followed by elementwise operations becomes one
gemmkit.mm_epilogue, the operations its fused epilogue's text; grouped and FP8 products
(aten._grouped_mm, aten._scaled_mm) likewise become gemmkit's grouped and scaled calls (below).

From each product of 2-D bfloat16 or float16 CUDA tensors, the pass takes the elementwise nodes
that follow it and that gemmkit's epilogue language spells (FUNCTIONS, BINARY, the casts),
whose other operands are numbers or tensors read as name[n] ([N] or [1, N]), name[m] ([M, 1]) or
name[m, n] ([M, N]) of bfloat16, float16 or float32. Where one user of the product views its M
rows as more dimensions ([M, N] -> [B, S, N]: a linear layer on [B, S, K]), the region's tensors
may have them too ([B, S, 1], [B, S, N]), reshaped to M rows for the call, whose result is
viewed back. It fuses the largest such region: its last node's value is the call's result (D),
and each other value that escapes it (used by another node or a graph output, as a training
step's forward graph returns the activations and products the backward keeps) is an output of
the call, stored beside D in that value's dtype (`oK[m, n] = ...;` in the text): the call is then
a gemmkit.mm_epilogue_outputs, which returns [D, *outputs], each used where the value was. A
product kept as it is beside the view that splits its rows is such an output. A region stops
short of what would make the call read and write more than eight tensors, or read a tensor
computed from one of its own outputs; one that would compute nothing but store the product
again is no fusion. Where no node can join, the product stays as it was.

A batched product (aten.bmm of [B, M, K] and [B, K, N], as torch.bmm and matmul of 3-D or more
dimensions make it) fuses the same way into one mm_epilogue of its batched operands, its values
[B, M, N] (or viewed with the batch as more dimensions, [A, H, M, N]): the region's tensors are
read as name[n] ([..., 1, N]), name[m] ([..., M, 1]) or name[m, n] ([..., M, N]), their
dimensions before the last two all 1 (one tensor for every batch) or the batch's own (one a
batch).

The epilogue computes in float32 from the product's float32 sum: casts inside the region round
as their type's store would (bf16(x), f16(x)); the first cast after the product, which torch
makes to compute in float32, is the sum itself. Operations torch ran in 16 bits run in float32
here, so the result rounds less than the graph it replaces.

SwiGLU's up-projection becomes one gemmkit.swiglu_mm (a dual GEMM: both products from the same
tiles of x, neither stored unless the graph keeps it) where a region grown from two products of one x ends in one value:
its text reads the gate's sum as acc and the up's as acc2, with whatever the language spells
around them (biases, silu or gelu as torch decomposes them, scales). The two forms:
- two products of the same rows x [M, K] (one node, or equal views of one node, as a linear layer
  on [B, S, K] makes one per product), g = x @ wg.t() and u = x @ wu.t() (mm, or addmm with a
  bias), weights of one shape and dtype: swiglu_mm(x, wg, wu, False, ...); acc is the product
  that reaches a one-operand function (silu's exp, gelu's erf) where only one does, else the
  first in graph order;
- one product h = x @ w.t() of 2I columns whose only users take its halves (h[..., :I] and
  h[..., I:], as slices, split or chunk): swiglu_mm(x, w, None, False, ...); its even and odd
  columns (h[..., 0::2], h[..., 1::2]): interleaved=True. An addmm's bias is sliced likewise.
The weights go in as the [I, K] (or [2I, K]) tensors the graph transposed for the product (a
permute's input), else as a transposed view of the product's operand. A product or half used
outside the region is an output, as above, of a gemmkit.swiglu_mm_outputs (a training step's
forward graph keeps g and u). A product of 2I columns kept whole (as a training step keeps a
combined weight's product) refuses: its halves would be two outputs in one tensor's memory,
which gemmkit refuses, and it is no [M, I] value. Products that cannot fuse so are left to the
one-product fusion above (where one may read the other's value as a tensor).

Grouped and FP8 products become the operators that gemmkit.grouped_mm, grouped_swiglu_mm and
scaled_mm with an epilogue trace to:
- aten._grouped_mm of tokens x [M_total, K] and the experts' weights b [G, K, N] (w.transpose(-2,
  -1) of [G, N, K]), 16-bit, with int32 offs and no bias: the region grown from its [M_total, N]
  values, its tensors read as name[n] ([N] or [1, N], every expert's), name[m] ([M_total, 1]: a
  router weight per routed token, route[:, None]) or name[m, n], becomes one
  grouped_mm_epilogue(x, b, offs, "contiguous", ...). The 3-D x 3-D (whole batches), 2-D x 2-D
  (the weight gradient) and 3-D x 2-D forms stay torch's, as do other offsets and dtypes. No
  tensor of one vector an expert ([G, N]) broadcasts against [M_total, N] values, so none is read.
- such a product h [M_total, 2I] whose only users take its halves (as the dense halves above,
  without a bias) becomes one grouped_swiglu_mm(x, w, None, offs, "contiguous", interleaved, ...),
  w the [G, 2I, K] weight as the experts store it (the transpose's input).
- aten._scaled_mm of FP8 a [M, K] and b [K, N] (row-major and column-major: the only layouts torch
  takes, and gemmkit's FP8 kernels' too), each scaled tensor-wise (one float32 value) or row-wise
  (float32 [M, 1] for a, [1, N] for b), without scale_result, its result of the epilogue's types:
  one gemm_epilogue of a and b with those scales and modes 'tensor' or 'rowwise' (a bias in the
  text, as addmm's). Other scales (torch's blockwise ones) stay torch's.
grouped_mm_epilogue, gemm_epilogue (mm_epilogue takes no scales) and grouped_swiglu_mm_out (a
grouped SwiGLU with outputs) have no functional form: they write D and the outputs into tensors
they are given. The pass makes those new and empty, and records the call as torch.compile records
a traced gemmkit.grouped_mm(..., epilogue=) (auto_functionalized), which Inductor's later passes
turn back into the call writing into them. A value that escapes such a region is stored as an
output (its `outputs`) as above, so grouped and FP8 products in a training step's forward graph
fuse too.

The pass runs after autograd: the *_outputs operators it makes have no autograd formula.
`fusions` counts the gemmkit calls the pass made: one a region, a swiglu_mm (grouped or not)
included, whether it replaced two products or one of 2I columns.
"""

import math
import operator
import re

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
VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)  # of a product's rows, or of x's
TENSOR_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DEVICE = "cuda"  # where the fused tensors lie (gemmkit's kernels'; a test runs the pass on CPU stand-ins)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _number(x):
    """The text of a finite number operand, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return repr(float(x))


class _Region:
    """The epilogue grown from one product, or from a dual GEMM's two: its nodes' texts, and the
    tensors it reads. m x n is the shape of the epilogue's values (a dual GEMM's: each product's);
    `rows` is the shape they have before their last dimension n: (m,), or more dimensions where a
    view after the product splits its rows (x [B, S, K] @ w.t() runs as an mm of B * S rows,
    viewed back as [B, S, N]). A batched product's (bmm's, `batch` its B) values are [B, M, N],
    its rows (B, m), or (..., m) where a view splits B into more dimensions ([A * H, M, N] ->
    [A, H, M, N], as matmul of 4-D tensors makes)."""

    def __init__(self, m, n, rows, batch=None):
        self.m, self.n, self.rows, self.batch = m, n, rows, batch
        self.text = {}  # node -> its value's expression (acc, acc2, vK, ...)
        self.sums = set()  # the products and their views and halves: a float32 widening of one is its sum
        self.tensors = []  # (name, node, shape it is read as: None as it is, else reshaped: (M, 1), (B, M, N), ...)
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
                or val.device.type != DEVICE:
            return None
        shape, lead = tuple(val.shape), len(self.rows)
        if self.batch is not None:
            found = self._batched_read(shape)
            if found is None:
                return None
            index, read_as = found
        elif shape[-1:] == (self.n,) and all(size == 1 for size in shape[:-1]) and len(shape) <= lead + 1:
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

    def _batched_read(self, shape):
        """(index, shape read as: None as it is) of a tensor of `shape` that broadcasts against a
        batched product's values [*batch, M, N]: its last two dimensions [1, N], [M, 1] or [M, N];
        those before them all 1 (read 2-D, shared by every batch) or the batch's (read [B, ., .],
        one a batch). None for any other (a partial broadcast over the batch, a value a batch)."""
        batch = self.rows[:-1]
        if len(shape) > len(batch) + 2:
            return None
        full = (1,) * (len(batch) + 2 - len(shape)) + shape
        outer, inner = full[:-2], full[-2:]
        if inner == (1, self.n):
            index = "n"
        elif inner == (self.m, 1):
            index = "m"
        elif inner == (self.m, self.n):
            index = "m, n"
        else:
            return None
        if all(size == 1 for size in outer):
            want = inner
        elif outer == batch:
            want = (self.batch, *inner)
        else:
            return None
        return index, None if shape == want else want

    def flat(self):
        """The shape of the gemmkit call's result: [M, N], or [B, M, N] for a batched product."""
        return (self.m, self.n) if self.batch is None else (self.batch, self.m, self.n)

    def expression(self, node):
        """node's expression over the region, or None where it cannot join; WIDENED where node is
        the float32 widening of a sum (its text is then the sum's own)."""
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
                return WIDENED  # torch's widening of the product to compute: the f32 sum itself
            return f"{CASTS[args[1]]}({x})"
        if node.target == aten.gelu.default and len(args) == 1:
            x = self.operand(args[0])
            approximate = node.kwargs.get("approximate", "none")
            return None if x is None else f"{'gelu_tanh' if approximate == 'tanh' else 'gelu'}({x})"
        return None

    def seed(self, members, definitions, product, name, bias):
        """Adds `product` (a product, or a dual GEMM's half of one) to the region as the sum `name`
        (acc, acc2), plus `bias` where it has one (addmm's input, read as the product's [M, N]
        reads it); False where the epilogue cannot read the bias."""
        if bias is not None:
            term = self.operand(bias)
            if term is None:
                return False
            definitions[product] = f"{name} + {term}"
            self.text[product] = f"v{len(members)}"
        else:
            self.text[product] = name
        self.sums.add(product)
        members.append(product)
        return True

    def alias(self, members, view, of):
        """Adds `view`, a view of sum `of` with its values (its rows split), as `of`."""
        self.text[view] = self.text[of]
        self.sums.add(view)
        members.append(view)


WIDENED = "="  # Region.expression of a sum's widening to float32: no text of the language


def _product(node):
    """(a, b, bias) of a 2-D product of 16-bit CUDA tensors (bias: addmm's input with beta and
    alpha 1, else None), or None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" \
            or node.target not in (aten.mm.default, aten.addmm.default):
        return None
    if node.target == aten.addmm.default:
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            return None
        bias, a, b = node.args[:3]
    else:
        (a, b), bias = node.args[:2], None
    vals = [_val(a), _val(b), _val(node)]
    if any(v is None for v in vals) or any(v.dtype not in INPUT_DTYPES or v.device.type != DEVICE for v in vals):
        return None
    if vals[0].dtype != vals[1].dtype:
        return None
    return a, b, bias


def _grow(graph, region, members, definitions):
    """Grows the region from its seeds, `members` (products, their views and halves), in graph
    order: a node joins where it has the region's values' shape, reads a region value and
    otherwise only numbers and readable tensors. Returns the members, or None where none joined."""
    seeds, joined = len(members), set(members)
    shape = (*region.rows, region.n)
    order = {x: i for i, x in enumerate(graph.nodes)}
    frontier = sorted({u for x in members for u in x.users if u not in joined}, key=order.get)
    while frontier:  # users come after what they read, so members stay in graph order
        candidate = frontier.pop(0)
        val = _val(candidate)
        if candidate in joined or not isinstance(val, torch.Tensor) or tuple(val.shape) != shape:
            continue
        expression = region.expression(candidate)
        if expression is None or not any(isinstance(x, torch.fx.Node) and x in region.text for x in candidate.args):
            continue
        if expression == WIDENED:  # a product widened to float32: the sum itself
            region.text[candidate] = region.text[candidate.args[0]]
            region.sums.add(candidate)
        else:
            definitions[candidate] = expression
            region.text[candidate] = f"v{len(members)}"
        members.append(candidate)
        joined.add(candidate)
        frontier = sorted(set(frontier) | set(candidate.users), key=order.get)
    return members if len(members) > seeds else None


MAX_TENSORS = 8  # tensors an epilogue reads and writes (the library's kMaxEpilogueTensors)


def _fuse_region(graph, region, members, seeds, definitions, call, products, both=()):
    """Replaces the largest region members[:last + 1] (a grown member last, past the `seeds`) that
    _replace takes by one call; returns whether it did. A smaller one may take what a larger one
    cannot (a tensor computed from one of its outputs, too many tensors)."""
    return any(_replace(graph, region, members[:last + 1], definitions, call, products, both)
               for last in range(len(members) - 1, seeds - 1, -1))


def _replace(graph, region, members, definitions, call, products, both):
    """Replaces the region's members by one call, call(text, names, inputs, out_dtype,
    output_types, members) -> (target, args) (or (operator, keyword arguments) for an operator
    that writes into tensors it is given: _written), whose result (D) the last member, the sink,
    takes; each other member used outside the region is an output of the call (`oK[m, n] =
    ...`, of the member's dtype), which its outside users take, viewed back to the member's shape
    where that is the split rows' (as D is). The call is made before the first node that takes
    one of its values. Returns whether it did: not where the sink is not an [*rows, n] tensor of the
    epilogue's types or is not computed from each of `both` (a dual GEMM's sums); where a member
    used outside is no value of the text, or neither [*rows, n] nor the product's own shape;
    where it would compute nothing but store a sum (the product, again); where it would read and
    write more than MAX_TENSORS tensors; or where what it reads (the `products`' operands, its
    tensors) comes after the first node that takes its values (a tensor computed from one of its
    own outputs)."""
    sink, inside = members[-1], set(members)
    stored = [x for x in members[:-1] if any(u not in inside for u in x.users)]
    shapes = ((*region.rows, region.n), region.flat())
    vals = [_val(x) for x in (sink, *stored)]
    if any(not isinstance(v, torch.Tensor) or v.dtype not in TENSOR_DTYPES or tuple(v.shape) not in shapes
           for v in vals) or tuple(vals[0].shape) != shapes[0] or any(x not in region.text for x in stored):
        return False
    if stored and not any(x in definitions and x not in region.sums for x in members):
        return False
    if both and not set(both) <= _reach(members, both)[sink]:
        return False
    statements = []
    for x in members[:-1]:
        if x in definitions:
            statements.append(f"{region.text[x]} = {definitions[x]}")
        if x in stored:
            statements.append(f"o{stored.index(x)}[m, n] = {region.text[x]}")
    text = "; ".join([*statements, definitions.get(sink, region.text[sink])])
    used = [(name, t, read_as) for name, t, read_as in region.tensors if f"{name}[" in text]
    if len(used) + len(stored) > MAX_TENSORS:
        return False
    order = {x: i for i, x in enumerate(graph.nodes)}
    at = min([sink, *(u for x in stored for u in x.users if u not in inside)], key=order.get)
    reads = [a for p in products for a in p.args if isinstance(a, torch.fx.Node)] + [t for _, t, _ in used]
    if any(order[x] >= order[at] for x in reads):
        return False
    with graph.inserting_before(at):
        inputs = []
        for _, t, read_as in used:  # a tensor of the split rows, read as M rows
            inputs.append(t if read_as is None else _node(graph, aten.reshape.default, (t, list(read_as)),
                                                          _val(t).reshape(read_as)))
        flat = [v.new_empty(region.flat()) for v in vals]  # the call's values: row-major, [M, N] or [B, M, N]
        names = [name for name, _, _ in used] + [f"o{i}" for i in range(len(stored))]
        target, args = call(text, names, inputs, vals[0].dtype, [CASTS[v.dtype] for v in vals[1:]], members)
        if isinstance(args, dict):
            values = _written(graph, target, args, flat)
        else:
            fused = _node(graph, target, args, flat if stored else flat[0])
            values = [_node(graph, operator.getitem, (fused, i), v) for i, v in enumerate(flat)] if stored else [fused]
        values = [value if v.shape == f.shape else
                  _node(graph, aten.view.default, (value, list(v.shape)), f.view(v.shape))
                  for value, v, f in zip(values, vals, flat)]
    sink.replace_all_uses_with(values[0])
    for x, value in zip(stored, values[1:]):
        x.replace_all_uses_with(value, delete_user_cb=lambda user: user not in inside)
    for x in reversed(members):
        graph.erase_node(x)
    return True


def _fuse(graph, node):
    """Fuses the epilogue after product `node` where one can join; returns whether it did."""
    operands = _product(node)
    if operands is None:
        return False
    a, b, bias = operands
    m, n = _val(node).shape
    region, members, definitions = _Region(m, n, (m,)), [], {}  # definitions: member -> its expression
    if not region.seed(members, definitions, node, "acc", bias):
        return False
    return _fuse_chain(graph, node, region, members, definitions, _row_split(node, m, n), _mm_call(a, b))


def _mm_call(a, b):
    """The call of _fuse and _fuse_batched: mm_epilogue of a @ b, or mm_epilogue_outputs."""
    def call(text, names, inputs, dtype, types, members):
        if types:
            return torch.ops.gemmkit.mm_epilogue_outputs.default, (a, b, text, names, inputs, dtype, types)
        return torch.ops.gemmkit.mm_epilogue.default, (a, b, text, names, inputs, dtype, 1.0, 0.0, None)
    return call


def _fuse_chain(graph, node, region, members, definitions, view, call):
    """The tail of the one-product fusions: the region seeded at product `node` grown through its
    elementwise chain, where `view` (None: none) is the product's one user that splits its rows,
    and replaced by `call` (as _replace takes it); returns whether it was."""
    if view is not None:
        region.rows = tuple(_val(view).shape[:-1])
        region.alias(members, view, node)
    seeds = len(members)
    members = _grow(graph, region, members, definitions)
    return members is not None and _fuse_region(graph, region, members, seeds, definitions, call, (node,))


def _argument(node, index, name, default=None):
    """An aten node's argument, given by position or by name."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _grouped_product(node):
    """(x, b, offs) of aten._grouped_mm of x [M_total, K] and b [G, K, N], 16-bit CUDA tensors of
    one dtype, with int32 offs [G] and no bias, else None: the MoE forward that gemmkit's grouped
    kernels run (not the weight gradient, 2-D x 2-D, nor whole batches, 3-D x 3-D)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target != aten._grouped_mm.default:
        return None
    x, b, offs = node.args[0], node.args[1], _argument(node, 2, "offs")
    vals = [_val(x), _val(b), _val(offs), _val(node)]
    if any(v is None for v in vals) or _argument(node, 3, "bias") is not None:
        return None
    vx, vb, voffs, _ = vals
    if vx.dim() != 2 or vb.dim() != 3 or voffs.dtype != torch.int32 or any(v.device.type != DEVICE for v in vals) \
            or vx.dtype not in INPUT_DTYPES or vb.dtype != vx.dtype:
        return None
    return x, b, offs


def _fuse_grouped(graph, node):
    """Fuses the epilogue after grouped product `node` (aten._grouped_mm) into one
    grouped_mm_epilogue where one can join; returns whether it did."""
    operands = _grouped_product(node)
    if operands is None:
        return False
    x, b, offs = operands
    m, n = _val(node).shape
    region, members, definitions = _Region(m, n, (m,)), [], {}
    region.seed(members, definitions, node, "acc", None)

    def call(text, names, inputs, dtype, types, members):
        return torch.ops.gemmkit.grouped_mm_epilogue.default, {
            "a": x, "b": b, "sizes": offs, "layout": "contiguous", "epilogue": text, "names": names,
            "inputs": inputs, "max_sms": 0}

    return _fuse_chain(graph, node, region, members, definitions, None, call)


def _fuse_grouped_halves(graph, h):
    """Fuses grouped product h [M_total, 2I] (aten._grouped_mm) whose only users take its halves
    (as _fuse_halves) into one grouped_swiglu_mm of its [G, 2I, K] weight; returns whether it did."""
    operands = _grouped_product(h)
    if operands is None:
        return False
    x, b, offs = operands
    m, n2 = _val(h).shape
    halves = None if n2 % 2 else _halves(h, n2 // 2)
    if halves is None:
        return False
    gate, up, interleaved, between = halves
    region, definitions, members = _Region(m, n2 // 2, (m,)), {}, [h, *between]
    region.seed(members, definitions, gate, "acc", None)
    region.seed(members, definitions, up, "acc2", None)
    seeds = len(members)
    members = _grow(graph, region, members, definitions)

    def call(text, names, inputs, dtype, types, members):
        w = _weight(graph, b)
        if types:
            return torch.ops.gemmkit.grouped_swiglu_mm_out.default, {
                "x": x, "w": w, "w_up": None, "sizes": offs, "layout": "contiguous", "interleaved": interleaved,
                "epilogue": text, "names": names, "inputs": inputs, "max_sms": 0}
        return torch.ops.gemmkit.grouped_swiglu_mm.default, (x, w, None, offs, "contiguous", interleaved, text, names,
                                                             inputs, dtype, 0)

    return members is not None and _fuse_region(graph, region, members, seeds, definitions, call, (h,),
                                                 both=(gate, up))


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _scale_mode(scale, rowwise):
    """gemmkit's mode of an FP8 operand's float32 CUDA scales: 'tensor' for one value, 'rowwise' for
    the `rowwise` shape (A's [M, 1], B's [1, N]), else None."""
    val = _val(scale)
    if val is None or val.dtype != torch.float32 or val.device.type != DEVICE:
        return None
    return "tensor" if val.numel() == 1 else "rowwise" if tuple(val.shape) == rowwise else None


def _scaled_product(node):
    """(a, b, scale_a, scale_b, modes, bias) of aten._scaled_mm of FP8 a [M, K] (row-major) and b
    [K, N] (column-major, as w.t()), each scaled tensor-wise or row-wise (float32 [M, 1] and [1,
    N]), without scale_result, its result of the epilogue's types; else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target != aten._scaled_mm.default:
        return None
    a, b, scale_a, scale_b = node.args[:4]
    vals = [_val(a), _val(b), _val(node)]
    if any(v is None for v in vals) or _argument(node, 5, "scale_result") is not None:
        return None
    va, vb, out = vals
    if any(v.device.type != DEVICE for v in vals) or va.dtype not in FP8 or vb.dtype not in FP8 \
            or out.dtype not in TENSOR_DTYPES or va.stride(-1) != 1 or vb.stride(-2) != 1:
        return None
    m, n = out.shape
    modes = (_scale_mode(scale_a, (m, 1)), _scale_mode(scale_b, (1, n)))
    return None if None in modes else (a, b, scale_a, scale_b, modes, _argument(node, 4, "bias"))


def _fuse_scaled(graph, node):
    """Fuses the epilogue after FP8 product `node` (aten._scaled_mm) into one gemm_epilogue of its
    operands and scales where one can join; returns whether it did."""
    operands = _scaled_product(node)
    if operands is None:
        return False
    a, b, scale_a, scale_b, modes, bias = operands
    m, n = _val(node).shape
    region, members, definitions = _Region(m, n, (m,)), [], {}
    if not region.seed(members, definitions, node, "acc", bias):
        return False

    def call(text, names, inputs, dtype, types, members):
        return torch.ops.gemmkit.gemm_epilogue.default, {
            "a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "mode_a": modes[0], "mode_b": modes[1],
            "epilogue": text, "names": names, "inputs": inputs, "alpha": 1.0, "beta": 0.0, "c": None}

    return _fuse_chain(graph, node, region, members, definitions, _row_split(node, m, n), call)


def _batched_product(node):
    """(a, b) of a batched product (aten.bmm) of 16-bit CUDA tensors of one dtype, or None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target != aten.bmm.default:
        return None
    a, b = node.args[:2]
    vals = [_val(a), _val(b), _val(node)]
    if any(v is None for v in vals) or any(v.dtype not in INPUT_DTYPES or v.device.type != DEVICE for v in vals):
        return None
    return (a, b) if vals[0].dtype == vals[1].dtype else None


def _batch_split(product, batch, m, n):
    """The batched product's one user that views its [B, M, N] values with the batch as any
    dimensions ([B, M, N] itself, [A, H, M, N] for B = A * H), else None (as _row_split)."""
    return _one_view(product, lambda shape: len(shape) >= 3 and shape[-2:] == (m, n)
                     and math.prod(shape[:-2]) == batch)


def _fuse_batched(graph, node):
    """Fuses the epilogue after batched product `node` (bmm) into one mm_epilogue of its batched
    operands where one can join; returns whether it did."""
    operands = _batched_product(node)
    if operands is None:
        return False
    a, b = operands
    batch, m, n = _val(node).shape
    region, members, definitions = _Region(m, n, (batch, m), batch=batch), [], {}
    region.seed(members, definitions, node, "acc", None)
    return _fuse_chain(graph, node, region, members, definitions, _batch_split(node, batch, m, n),
                       _mm_call(a, b))


def _fuse_dual(graph, node):
    """Fuses SwiGLU's pattern with product `node` where it is one (see the module's docstring):
    `node`'s halves, or `node` with another product of its x; returns whether it did."""
    operands = _product(node)
    if operands is None:
        return False
    if _fuse_halves(graph, node, operands):
        return True
    return any(_fuse_pair(graph, node, operands, other) for other in _partners(graph, node, operands[0]))


def _fuse_pair(graph, p, p_operands, q):
    """Fuses products p and q of the same x, each [M, I], into one swiglu_mm where the region
    grown from both ends in one value that reads both; returns whether it did."""
    q_operands = _product(q)
    if q_operands is None:
        return False
    (x, b, bias), (x2, b2, bias2) = p_operands, q_operands
    vb, vb2, vp, vq = _val(b), _val(b2), _val(p), _val(q)
    if x2 not in _same_rows(x) or vb.shape != vb2.shape or vb.dtype != vb2.dtype or vp.dtype != vq.dtype:
        return False
    m, n = vp.shape
    region, members, definitions = _Region(m, n, (m,)), [], {}
    if not (region.seed(members, definitions, p, "acc", bias) and region.seed(members, definitions, q, "acc2", bias2)):
        return False
    views = [_row_split(p, m, n), _row_split(q, m, n)]
    if (views[0] is None) != (views[1] is None):
        return False
    if views[0] is not None:
        if _val(views[0]).shape != _val(views[1]).shape:
            return False
        region.rows = tuple(_val(views[0]).shape[:-1])
        region.alias(members, views[0], p)
        region.alias(members, views[1], q)
    seeds = len(members)
    members = _grow(graph, region, members, definitions)

    def call(text, names, inputs, dtype, types, members):
        w, w_up = _weight(graph, b), _weight(graph, b2)
        # acc is the gate: the product a one-operand function reads (silu's exp), where only one is
        if _activated(members, (p, q)) == {q}:
            text = re.sub(r"\bacc2?\b", lambda s: "acc" if s.group() == "acc2" else "acc2", text)
            w, w_up = w_up, w
        return _swiglu_call(x, w, w_up, False, text, names, inputs, dtype, types)

    if members is None or not _fuse_region(graph, region, members, seeds, definitions, call, (p, q), both=(p, q)):
        return False
    if x2 is not x and not x2.users:  # q's own view of x
        graph.erase_node(x2)
    return True


def _fuse_halves(graph, h, operands):
    """Fuses product h [M, 2I] whose only users take its halves (its first and last I columns, or
    its even and odd ones) into one swiglu_mm of its weight; returns whether it did."""
    x, b, bias = operands
    m, n2 = _val(h).shape
    if n2 % 2:
        return False
    n = n2 // 2
    view = _row_split(h, m, n2)
    halves = _halves(view if view is not None else h, n)
    if halves is None:
        return False
    gate, up, interleaved, between = halves
    parts = [None, None]  # the bias's halves, sliced as the product's columns are
    if bias is not None:
        if not isinstance(_val(bias), torch.Tensor) or _val(bias).dim() == 0:
            return False
        span = ((0, None, 2), (1, None, 2)) if interleaved else ((0, n, 1), (n, n2, 1))
        with graph.inserting_before(h):
            parts = [_node(graph, aten.slice.Tensor, (bias, -1, *s), _val(bias)[..., slice(*s)]) for s in span]
    region, definitions = _Region(m, n, (m,)), {}
    members = [h, *([view] if view is not None else []), *between]
    if view is not None:
        region.rows = tuple(_val(view).shape[:-1])
    fused = region.seed(members, definitions, gate, "acc", parts[0]) \
        and region.seed(members, definitions, up, "acc2", parts[1])
    if fused:
        seeds = len(members)
        members = _grow(graph, region, members, definitions)
        fused = members is not None and _fuse_region(
            graph, region, members, seeds, definitions,
            lambda text, names, inputs, dtype, types, members: _swiglu_call(x, _weight(graph, b), None, interleaved,
                                                                            text, names, inputs, dtype, types),
            (h,), both=(gate, up))
    if not fused and bias is not None:
        for part in parts:
            graph.erase_node(part)
    return fused


def _swiglu_call(x, w, w_up, interleaved, text, names, inputs, dtype, types):
    """(target, args) of a swiglu_mm, or of a swiglu_mm_outputs where the text stores outputs of
    `types`."""
    args = (x, w, w_up, interleaved, text, names, inputs, dtype)
    if types:
        return torch.ops.gemmkit.swiglu_mm_outputs.default, (*args, types)
    return torch.ops.gemmkit.swiglu_mm.default, args


def _halves(h, n):
    """(gate, up, interleaved, between) where the only users of h [..., 2n] take its last
    dimension's halves: two slices, or one split (`between`, [split], whose two items are the
    halves); gate the first n columns (interleaved: the even ones), up the others. Else None."""
    users, last = list(h.users), len(_val(h).shape) - 1

    def last_dim(dim):
        return isinstance(dim, int) and dim % (last + 1) == last

    if len(users) == 1 and users[0].target in (aten.split.Tensor, aten.split_with_sizes.default):
        split = users[0]  # split(h, n, dim), split_with_sizes(h, [n, n], dim)
        sizes, dim = split.args[1], split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
        if not last_dim(dim) or sizes not in (n, [n, n]):
            return None
        items = {}
        for item in split.users:
            if item.target is not operator.getitem or item.args[1] in items:
                return None
            items[item.args[1]] = item
        return (items[0], items[1], False, [split]) if sorted(items) == [0, 1] else None
    if len(users) != 2 or any(u.target != aten.slice.Tensor or u.kwargs for u in users):
        return None
    spans = []
    for u in users:
        dim, start, end, step = (list(u.args[1:]) + [0, None, None, 1][len(u.args) - 1:])[:4]
        if not last_dim(dim) or any(v is not None and not isinstance(v, int) for v in (start, end, step)):
            return None
        spans.append(range(*slice(start, end, step).indices(2 * n)))
    for first, second, interleaved in ((range(0, n), range(n, 2 * n), False),
                                       (range(0, 2 * n, 2), range(1, 2 * n, 2), True)):
        if spans == [first, second]:
            return users[0], users[1], interleaved, []
        if spans == [second, first]:
            return users[1], users[0], interleaved, []
    return None


def _partners(graph, node, x):
    """The other products of x (or of an equal view of x's input), in graph order."""
    order = {y: i for i, y in enumerate(graph.nodes)}
    found = {u for r in _same_rows(x) for u in r.users
             if u is not node and u.target in (aten.mm.default, aten.addmm.default)
             and u.args[1 if u.target == aten.addmm.default else 0] is r}
    return sorted(found, key=order.get)


def _same_rows(x):
    """x, and the views of x's input with x's shape where x is such a view (a linear layer's
    reshape of [B, S, K] to rows, made once a layer)."""
    same = [x]
    if x.op == "call_function" and x.target in VIEWS and isinstance(x.args[0], torch.fx.Node) \
            and _val(x) is not None:
        same += [v for v in x.args[0].users if v is not x and v.target in VIEWS and v.args[0] is x.args[0]
                 and _val(v) is not None and _val(v).shape == _val(x).shape]
    return same


def _reach(members, sources):
    """member -> the `sources` (among the members) its value is computed from."""
    reach = {s: {s} for s in sources}
    for node in members:
        if node not in reach:
            reach[node] = set().union(*(reach.get(a, set()) for a in node.args if isinstance(a, torch.fx.Node)))
    return reach


def _activated(members, products):
    """The products whose values reach a one-operand function of the region (silu's exp, gelu's
    erf)."""
    reach = _reach(members, products)
    return set().union(*(reach[x] for x in members if x.target in FUNCTIONS or x.target == aten.gelu.default))


def _weight(graph, b):
    """The [I, K] tensor of a product's [K, I] operand b ([G, I, K] of a grouped product's [G, K,
    I]): the input of the transpose that made b, else a transposed view of b."""
    d = _val(b).dim()
    swap = [*range(d - 2), d - 1, d - 2]
    transposes = b.op == "call_function" and (
        b.target == aten.permute.default and [x % d for x in b.args[1]] == swap or b.target == aten.t.default
        or b.target == aten.transpose.int and sorted(x % d for x in b.args[1:3]) == [d - 2, d - 1])
    if transposes and _val(b.args[0]) is not None and _val(b.args[0]).dim() == d:
        return b.args[0]
    return _node(graph, aten.permute.default, (b, swap), _val(b).permute(swap))


fusions = 0  # gemmkit calls the pass made in this process, for a caller (or a test) to see it worked


def _row_split(product, m, n):
    """The product's one user that views its M rows as more dimensions ([M, N] -> [..., N]), else
    None. Its other users (a forward graph's output of the product, saved for the backward) read
    the product's own value, which the region stores for them."""
    return _one_view(product, lambda shape: len(shape) >= 2 and shape[-1] == n and math.prod(shape[:-1]) == m)


def _one_view(product, splits):
    """The one user of `product` that is a view whose shape `splits` takes, else None."""
    views = [u for u in product.users if u.target in VIEWS and _val(u) is not None and splits(tuple(_val(u).shape))]
    return views[0] if len(views) == 1 else None


def _node(graph, target, args, val, kwargs=None):
    node = graph.call_function(target, args, kwargs)
    node.meta["val"] = val
    return node


def _written(graph, op, given, flat):
    """[D, *outputs] of `op` (gemm_epilogue, grouped_mm_epilogue, grouped_swiglu_mm_out), which
    writes D into its `out` and the outputs into its `outputs`: new empty tensors of `flat`'s
    values, the call as torch.compile records such an operator (auto_functionalized, every
    argument named, which Inductor's later passes turn back into the call writing in place), and
    the values it returns (the operator's result, then each argument it writes)."""
    from torch._higher_order_ops.auto_functionalize import get_mutable_args

    empty = [_node(graph, aten.empty.memory_format, (list(v.shape),), v.new_empty(v.shape),
                   {"dtype": v.dtype, "device": v.device}) for v in flat]
    given = {**given, "out": empty[0], "outputs": empty[1:]}
    kwargs = {arg.name: given[arg.name] if arg.name in given else arg.default_value for arg in op._schema.arguments}
    written, _ = get_mutable_args(op)
    returned = {"out": flat[0], "outputs": list(flat[1:])}
    call = _node(graph, torch.ops.higher_order.auto_functionalized, (op,), (None, *map(returned.get, written)), kwargs)
    d = _node(graph, operator.getitem, (call, 1 + written.index("out")), flat[0])
    if len(flat) == 1:
        return [d]
    outputs = _node(graph, operator.getitem, (call, 1 + written.index("outputs")), list(flat[1:]))
    return [d, *(_node(graph, operator.getitem, (outputs, i), v) for i, v in enumerate(flat[1:]))]


def fuse_epilogues(graph):
    """The pass: every product's epilogue fused where one can be, SwiGLU's pairs and halves first;
    returns how many gemmkit calls it made."""
    global fusions
    fused = 0
    for node in list(graph.nodes):
        if not getattr(node, "_erased", False) and (
                _fuse_dual(graph, node) or _fuse(graph, node) or _fuse_batched(graph, node)
                or _fuse_grouped_halves(graph, node) or _fuse_grouped(graph, node) or _fuse_scaled(graph, node)):
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
