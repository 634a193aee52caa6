"""python -m gemmkit.bench's grouped rows, the suite lines `grouped OP G M N K dtype [mode] dist`
that `gemmkit bench` reads: gemmkit.grouped_mm and scaled_grouped_mm against torch._grouped_mm and
torch._scaled_grouped_mm in one process on the same tensors, with the CLI's two floors, the dense
GEMM of every group's rows at once (gemmkit.mm or scaled_mm, as a dense line of the row's types
runs) and moving the row's bytes at the copy bandwidth. What the CLI decides about a row before
timing it comes from the same C++ (gemmkit._gemmkit.bench): its record and the rows gemmkit does
not run, the group sizes (int32, on the device), the bytes of a buffer set. The timing is the
dense rows'.

Each OP's operands, as tools/grouped_bench.cpp lays them out, the weights w stored [G, N, K]:
  fwd     a = X [M_total, K], b = w.transpose(-2, -1) [G, K, N]  -> out [M_total, N]
  dgrad   a = dD [M_total, N], b = w [G, N, K], N contracted      -> out = dX [M_total, K]
  wgrad   a = dD.t() [N, M_total], b = X [M_total, K]            -> out = dW [G, N, K]
  masked  a [G, max_m, K], b = w.transpose(-2, -1), counts [G]   -> out [G, max_m, N]
Ours is grouped_mm(a, b, offs, out=...) (counts= for masked), or scaled_grouped_mm with the
row's scales for FP8 (A's over its rows, B's a set per group, in the shapes torch takes where it
has the mode). torch runs _grouped_mm(a, b, offs=offs) on the same tensors, or
_scaled_grouped_mm, except that
  - masked rows are one batched product over every group's max_m rows (offs=None): torch has no
    masked groups;
  - FP8 rows in tensor or block mode run with rowwise scales of 1 on the same FP8 buffers:
    torch's grouped FP8 product scales rowwise only;
both said in the row's note. Where torch raises, the row has no baseline and its note says why.
Rows with 4-bit weights (lowbit.txt's grouped rows) are listed, not run: torch has no grouped
4-bit product to set beside ours, and gemmkit bench times them against gemmkit's own 16-bit or
FP8 grouped GEMM.
Once per row, before timing, ours and (where it ran the row's own product) torch's outputs are
checked against a float64 product of sampled rows of sampled groups; a difference past the bound
of tests/python/gpu_reference.py goes in the note.
"""

import itertools

import torch

import gemmkit
from . import _gemmkit as _C
from ._bench_buffers import TORCH_DTYPES, BufferSet, uniform
from ._bench_buffers import run_ours as run_dense

bench = _C.bench
HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}
SAMPLED_GROUPS, SAMPLED_ROWS = 4, 8


def fp8_mode(p):
    """The row's FP8 scaling mode (a _C.ScaleMode), or None for 16-bit inputs."""
    return None if p.dense.mode == _C.ScaleMode.none else p.dense.mode


def random_scales(*shape):
    return torch.rand(shape, device="cuda") * 1.5 + 0.5


def scale_rows(p):
    """The shape of A's rows: [M_total], or [G, max_m] for masked groups."""
    return (p.groups, p.m) if p.op == "masked" else (p.m,)


def grouped_scales(p):
    """Random scales of the row's FP8 operands, as scaled_grouped_mm takes them: tensor one for A
    and one a group for B; rowwise [M_total] (or [G, max_m]) and [G, N], torch's shapes; block A's
    1x128 ones [..., K/128] and B's 128x128 ones [G, K/128, N/128], laid out as b (transposed)."""
    mode, rows, groups = fp8_mode(p), scale_rows(p), p.groups
    if mode == _C.ScaleMode.tensor:
        return random_scales(), random_scales(groups)
    if mode == _C.ScaleMode.rowwise:
        return random_scales(*rows), random_scales(groups, p.n)
    k_blocks, n_blocks = -(-p.k // 128), -(-p.n // 128)
    return random_scales(*rows, k_blocks), random_scales(groups, n_blocks, k_blocks).transpose(-2, -1)


class GroupedSet:
    """One buffer set of a grouped row: `dense`, the dense floor's buffers, which the groups share
    as tools/grouped_bench.cpp has them (the contiguous groups' rows are its A and D, wgrad's dD
    and X its A and B), and the groups' own tensors; d is our output, d_torch torch's last one."""

    def __init__(self, p):
        self.dense = BufferSet(p.dense, torch_out=False)
        in_a, in_b = TORCH_DTYPES[p.dense.in_dtype], TORCH_DTYPES[p.dense.b_dtype]
        out = TORCH_DTYPES[p.dense.out_dtype]
        groups = p.groups
        if p.op == "wgrad":  # the dense N x K x M_total TN GEMM's A = dD^T and B = X
            self.a, self.b = self.dense.a, self.dense.b
            self.d = torch.full((groups, p.n, p.k), float("nan"), device="cuda", dtype=out)
        elif p.op == "masked":
            self.a = uniform((groups, p.m, p.k), in_a, False)
            self.b = uniform((groups, p.k, p.n), in_b, True)
            self.d = torch.full((groups, p.m, p.n), float("nan"), device="cuda", dtype=out)
        else:
            self.a, self.d = self.dense.a, self.dense.d
            # fwd reads the weights K-major ([G, K, N] viewed), dgrad as stored, N contracted
            fwd = p.op == "fwd"
            self.b = uniform((groups, p.k, p.n) if fwd else (groups, p.n, p.k), in_b, fwd)
        self.sa, self.sb = grouped_scales(p) if fp8_mode(p) else (None, None)
        self.d_torch = None


def sizes_argument(p, sizes):
    """The group sizes as grouped_mm takes them: offs, or counts for masked groups."""
    return {"counts": sizes} if p.op == "masked" else {"offs": sizes}


def run_ours(p, s, sizes):
    """gemmkit's grouped product of the row on buffer set s."""
    if fp8_mode(p):
        gemmkit.scaled_grouped_mm(s.a, s.b, s.sa, s.sb, mode=p.dense.mode.name, out=s.d, **sizes_argument(p, sizes))
    else:
        gemmkit.grouped_mm(s.a, s.b, out=s.d, **sizes_argument(p, sizes))


def dense_floor(p, s):
    """gemmkit's dense GEMM of every group's rows at once, on set s: the compute floor."""
    run_dense(p.dense, s.dense)


def torch_function(p, rowwise_ones):
    """torch's call as a function of (a, b, scale_a, scale_b, sizes): _scaled_grouped_mm for FP8
    (with `rowwise_ones`, a pair of scales of 1, in place of the row's where given), else
    _grouped_mm; offs=None for masked rows, the batched product."""
    out_dtype = TORCH_DTYPES[p.dense.out_dtype]
    masked = p.op == "masked"
    if fp8_mode(p):
        def scaled(a, b, sa, sb, sizes):
            sa, sb = rowwise_ones or (sa, sb)
            return torch._scaled_grouped_mm(a, b, sa, sb, offs=None if masked else sizes, out_dtype=out_dtype)
        return scaled
    return lambda a, b, sa, sb, sizes: torch._grouped_mm(a, b, offs=None if masked else sizes, out_dtype=out_dtype)


def baseline(p, pool, sizes, compiled, name):
    """(launcher of a set index, note, whether it runs the row's own product) for torch's side,
    run once on set 0; (None, note, False) where torch refuses the row."""
    notes = []
    if p.op == "masked":
        notes.append(f"{name}: the batched product over every group's max_m rows (torch has no masked groups)")
    rowwise_ones = None
    if fp8_mode(p) not in (None, _C.ScaleMode.rowwise):
        rowwise_ones = (torch.ones(scale_rows(p), device="cuda"), torch.ones(p.groups, p.n, device="cuda"))
        notes.append(f"{name}: rowwise scales of 1 on the same FP8 buffers (torch's grouped FP8 is rowwise only)")
    function = torch_function(p, rowwise_ones)
    if compiled:  # one compilation: every set has the same shapes and strides
        function = torch.compile(function, mode="max-autotune-no-cudagraphs", dynamic=False)

    def launch(i):
        s = pool[i]
        s.d_torch = function(s.a, s.b, s.sa, s.sb, sizes)  # kept, so that outputs rotate as the sets do

    try:
        launch(0)
        torch.cuda.synchronize()
    except Exception as error:  # torch refuses the types, layout or shape
        return None, f"no {name} baseline: " + (str(error).strip().splitlines() or ["?"])[0], False
    return launch, "; ".join(notes), rowwise_ones is None


# --- checking the outputs once ----------------------------------------------------------------------

def spread(count, most):
    """Up to `most` of range(count), evenly spread, the first and the last among them."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def dequantized(x, scale, mode, block):
    """x in double times its scales: `scale` broadcast over x (tensor, rowwise), or one a `block`
    (rows, cols) of x (block)."""
    if mode == _C.ScaleMode.block:
        rows, cols = x.shape
        scale = scale.repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return x.double() * scale.double()


def a_rows(p, s, index):
    """The rows of a at `index` as real numbers (FP8 dequantised), in double."""
    mode = fp8_mode(p)
    if mode is None:
        return s.a[index].double()
    x = s.a.view(torch.uint8)[index].view(s.a.dtype)  # gathered as bytes: not every indexing kernel takes FP8
    if mode == _C.ScaleMode.tensor:
        return dequantized(x, s.sa, mode, None)
    scale = s.sa[index]
    return dequantized(x, scale[:, None] if mode == _C.ScaleMode.rowwise else scale, mode, (1, 128))


def b_group(p, s, g):
    """b[g] ([contracted, out]) as real numbers, in double."""
    y, mode = s.b[g], fp8_mode(p)
    if mode is None:
        return y.double()
    scale = s.sb[g]
    return dequantized(y, scale[None, :] if mode == _C.ScaleMode.rowwise else scale, mode, (128, 128))


def samples(p, s):
    """(index into the output, x, y) for sampled rows of sampled groups, the output there being
    x @ y in exact arithmetic. wgrad samples columns too: its contraction is a group's rows."""
    rows = p.rows
    starts = [0, *itertools.accumulate(rows)]
    for g in spread(p.groups, SAMPLED_GROUPS):
        if p.op == "wgrad":
            first, end = starts[g], starts[g + 1]
            n = torch.tensor(spread(p.n, SAMPLED_ROWS), device="cuda")
            k = torch.tensor(spread(p.k, SAMPLED_ROWS), device="cuda")
            yield (g, n[:, None], k[None, :]), s.a[n, first:end].double(), s.b[first:end, k].double()
            continue
        sampled = spread(rows[g], SAMPLED_ROWS)
        if not sampled:
            continue
        index = (g, sampled) if p.op == "masked" else ([starts[g] + r for r in sampled],)
        yield index, a_rows(p, s, index), b_group(p, s, g)


def check(p, s, outputs):
    """For each of `outputs` ({who: output tensor} on set s) that differs from a float64 product
    of sampled rows by more than the bound: "<who> differs ...". The bound: half an ulp of the
    output type of the reference, plus the accumulation's, K * 2^-24 (FP8: 2^-10) of the
    product of the magnitudes."""
    differs = {}
    for index, x, y in samples(p, s):
        ref = x @ y
        accumulation = 2.0 ** -10 if fp8_mode(p) else x.size(-1) * 2.0 ** -24
        for who, out in outputs.items():
            bound = ref.abs() * HALF_ULP[out.dtype] + (x.abs() @ y.abs()) * accumulation
            error = (out[index].double() - ref).abs()
            if who not in differs and not (error <= bound).all():  # NaN fails too
                worst = torch.nan_to_num(error - bound, nan=float("inf")).argmax()
                differs[who] = (f"{who} differs from a float64 product of sampled rows: error "
                                f"{error.flatten()[worst].item():.3g} where the bound is "
                                f"{bound.flatten()[worst].item():.3g}")
    return list(differs.values())


# --- one row --------------------------------------------------------------------------------------

def bench_grouped_row(p, r, timer, info, compiled, name, say):
    """Times grouped line p into r, its record from bench.grouped_record(); lines go to say()."""
    row = bench.grouped_name(r)
    if not r.note and p.dense.w4:
        r.note = "not run: grouped rows with 4-bit weights are timed by gemmkit bench only"
    if not r.note and fp8_mode(p) and p.op in ("dgrad", "wgrad"):
        r.note = "not run: FP8 gradient rows are timed by gemmkit bench only"
    if r.note:  # gemmkit does not run the row
        say(f"{row}: {r.note}")
        return r
    free, _ = torch.cuda.mem_get_info()
    sets = bench.buffer_set_count(bench.grouped_set_bytes(p), info["l2_bytes"], free)
    pool = [GroupedSet(p) for _ in range(sets)]
    sizes = torch.tensor(bench.group_size_values(p), dtype=torch.int32, device="cuda")
    try:  # once, before the timer: as in the CLI, a row gemmkit rejects is listed, not timed
        dense_floor(p, pool[0])  # first: contiguous groups share its output, and ours is checked below
        run_ours(p, pool[0], sizes)
        torch.cuda.synchronize()
    except ValueError as error:
        r.note = f"not run: {error}"
        say(f"{row}: {r.note}")
        return r
    theirs, note, own_product = baseline(p, pool, sizes, compiled, name)
    outputs = {"ours": pool[0].d, name: pool[0].d_torch} if own_product else {"ours": pool[0].d}
    r.note = "; ".join(([note] if note else []) + check(p, pool[0], outputs))
    launchers = [lambda i: run_ours(p, pool[i], sizes), lambda i: dense_floor(p, pool[i])]
    if theirs is not None:
        launchers.append(theirs)
    medians = timer.median_us(sets, launchers)
    r.ours_us, r.dense_us = medians[:2]
    if theirs is not None:
        r.baseline_us = medians[2]
    say(f"  {row}: ours {r.ours_us:.1f} us, dense floor {r.dense_us:.1f} us, {name} {r.baseline_us:.1f} us "
        f"({sets} buffer sets)" + (f"; {r.note}" if r.note else ""))
    return r
