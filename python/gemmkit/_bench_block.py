"""python -m gemmkit.bench --block mlp|moe: a training step (forward and backward) of an LLM block,
written once with torch's products and once with gemmkit's, eager and under torch.compile, timed
in one process on the same inputs.

- mlp: a Llama-3-8B MLP, x @ w13^T, SwiGLU, @ w2^T, weights stored as nn.Linear stores them
  ([out, in], row-major): torch.nn.functional.linear against gemmkit.linear.
- moe: a Qwen3-30B-A3B-like mixture of experts: a router (linear, softmax, top-k, weights
  renormalised), tokens sorted by expert, grouped up-projection [G, 2I, H], SwiGLU, grouped
  down-projection [G, H, I], router weights, index_add back to the tokens:
  torch._grouped_mm against gemmkit.grouped_mm (the router's linear as the mlp's).

Everything but the products is the same torch code on both sides. A step sets the gradients to
None (as optimizer.zero_grad does), runs the forward and backward with a fixed output gradient,
and is timed between CUDA events; the table gives the median of --steps steps after --warmup.
One step of each side runs under torch.profiler too, which counts the copy kernels it launches
(copies torch makes to fix a gradient's layout, operands copied for a kernel) and, with --top,
lists the kernels that take the most time."""

import dataclasses
import statistics

import torch
import torch.nn.functional as F

import gemmkit

SIZES = {  # the defaults of --tokens, --hidden, --intermediate, --experts, --top-k
    "mlp": {"tokens": 4096, "hidden": 4096, "intermediate": 14336},
    "moe": {"tokens": 4096, "hidden": 2048, "intermediate": 768, "experts": 128, "top_k": 8},
}


@dataclasses.dataclass
class Products:
    """One side's products: linear(x, w, bias) as torch.nn.functional.linear, grouped_mm(a, b,
    offs) as torch._grouped_mm."""
    name: str
    linear: object
    grouped_mm: object


TORCH = Products("torch", F.linear, lambda a, b, offs: torch._grouped_mm(a, b, offs=offs))
GEMMKIT = Products("gemmkit", gemmkit.linear, gemmkit.grouped_mm)


def swiglu(h):
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def mlp(products, x, w13, w2):
    return products.linear(swiglu(products.linear(x, w13)), w2)


def route(products, x, router, top_k):
    """(the sorted tokens' indices, the experts' cumulative row ends, the sorted routing weights)."""
    probs = torch.softmax(products.linear(x, router).float(), dim=-1)
    weights, chosen = probs.topk(top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    chosen = chosen.flatten()
    order = chosen.argsort()
    counts = torch.zeros(router.size(0), dtype=torch.int32, device=x.device)
    counts.scatter_add_(0, chosen, torch.ones_like(chosen, dtype=torch.int32))
    return order // top_k, counts.cumsum(0, dtype=torch.int32), weights.flatten()[order]


def experts(products, x, token, offs, weights, w13, w2):
    """The experts' part of the moe block, for routing given."""
    h = products.grouped_mm(x[token], w13.transpose(-2, -1), offs)
    out = products.grouped_mm(swiglu(h), w2.transpose(-2, -1), offs) * weights.unsqueeze(-1).to(x.dtype)
    return torch.zeros_like(x).index_add(0, token, out)


def moe(products, x, router, w13, w2, top_k):
    token, offs, weights = route(products, x, router, top_k)
    return experts(products, x, token, offs, weights, w13, w2)


def parameter(*shape, fan_in):
    return torch.nn.Parameter(torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * fan_in ** -0.5)


def make_block(kind, sizes):
    """(forward(products, *tensors), the tensors: the input first, then the weights), bfloat16."""
    tokens, hidden, inter = sizes["tokens"], sizes["hidden"], sizes["intermediate"]
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16).requires_grad_()
    if kind == "mlp":
        return mlp, (x, parameter(2 * inter, hidden, fan_in=hidden), parameter(hidden, inter, fan_in=inter))
    e, top_k = sizes["experts"], sizes["top_k"]
    tensors = (x, parameter(e, hidden, fan_in=hidden), parameter(e, 2 * inter, hidden, fan_in=hidden),
               parameter(e, hidden, inter, fan_in=inter))
    return (lambda products, *t: moe(products, *t, top_k)), tensors


def stepper(forward, products, tensors, compiled):
    """A function that runs one training step: gradients to None, forward, backward."""
    run = torch.compile(forward, dynamic=False) if compiled else forward
    up = torch.randn_like(tensors[0])

    def step():
        for t in tensors:
            t.grad = None
        run(products, *tensors).backward(up)
    return step


def median_ms(step, warmup, steps):
    for _ in range(warmup):
        step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def is_copy(kernel):
    """Whether a kernel only moves data: a memcpy, torch's copy (a layout or dtype change, as
    AccumulateGrad's into a parameter's layout) or cat, inductor's clone."""
    name = kernel.lower()
    return (name.startswith("memcpy") or "direct_copy" in name or "copy_kernel" in name
            or "catarraybatchedcopy" in name or (name.startswith("triton_") and "clone" in name))


def kernels(step):
    """[(kernel name, microseconds)] of one step's GPU kernels and copies, from torch.profiler."""
    step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        step()
        torch.cuda.synchronize()
    return [(e.name, e.device_time_total) for e in profile.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


@dataclasses.dataclass
class Row:
    block: str
    mode: str
    torch_ms: float
    gemmkit_ms: float
    copies: dict  # side -> [count, microseconds] of its step's copy kernels
    top: dict  # side -> [(kernel, microseconds)], the step's most costly kernels


def top_kernels(launched, top):
    totals = {}
    for name, us in launched:
        totals[name] = totals.get(name, 0.0) + us
    return sorted(totals.items(), key=lambda item: -item[1])[:top]


def bench_block(kind, sizes, compiled, warmup, steps, top):
    forward, tensors = make_block(kind, sizes)
    times, copies, tops = {}, {}, {}
    for products in (TORCH, GEMMKIT):
        step = stepper(forward, products, tensors, compiled)
        launched = kernels(step)  # also compiles, where compiled, before the timing
        copied = [us for name, us in launched if is_copy(name)]
        copies[products.name] = [len(copied), sum(copied)]
        tops[products.name] = top_kernels(launched, top)
        times[products.name] = median_ms(step, warmup, steps)
    return Row(kind, "compiled" if compiled else "eager", times["torch"], times["gemmkit"], copies, tops)


def format_rows(rows):
    head = (f"{'block':<6} {'mode':<9} {'torch ms':>9} {'gemmkit ms':>10} {'speedup':>8}  "
            f"{'copies torch (us)':>18}  {'copies gemmkit (us)':>20}")
    lines = [head]
    for r in rows:
        (tc, tus), (gc, gus) = r.copies["torch"], r.copies["gemmkit"]
        lines.append(f"{r.block:<6} {r.mode:<9} {r.torch_ms:9.3f} {r.gemmkit_ms:10.3f} "
                     f"{r.torch_ms / r.gemmkit_ms:7.3f}x  {tc:>7} ({tus:8.1f})  {gc:>8} ({gus:8.1f})")
    return "\n".join(lines) + "\n"


def run_blocks(args):
    """The --block command: each block of args.block in each of args.modes, as one table (and,
    with args.top, each step's most costly kernels)."""
    rows = []
    for kind in args.block:
        sizes = {name: getattr(args, name) or value for name, value in SIZES[kind].items()}
        shape = ", ".join(f"{name} {value}" for name, value in sizes.items())
        print(f"{kind}: {shape}; bfloat16; {args.warmup} warm-up and {args.steps} timed steps, median", flush=True)
        for mode in args.modes:
            rows.append(bench_block(kind, sizes, mode == "compiled", args.warmup, args.steps, args.top))
    print(f"device {torch.cuda.current_device()}: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"gemmkit {gemmkit.__version__} {gemmkit.__git_commit__}")
    print(format_rows(rows), end="")
    for r in rows:
        for side, kernels_ in r.top.items():
            if kernels_:
                print(f"\n{side}'s {r.block} step ({r.mode}): its {len(kernels_)} most costly kernels")
                for name, us in kernels_:
                    print(f"  {us:9.1f} us  {name[:120]}")
    return [dataclasses.asdict(r) for r in rows]
