"""A dense bench problem's tensors on the GPU and gemmkit's run of it, for python -m
gemmkit.bench: the dense rows and the grouped rows' dense floors. Operands uniform in [-1, 1),
FP8 scales in [0.5, 2), mx ones powers of two, outputs NaN-filled. 4-bit weights as `gemmkit
bench` fills them (src/reference/device_problem.cpp): every code alike, int4's scales of A's type
(bf16 for W4A8's e4m3 A) in [0.5, 2) and zero points integers 0..15, MXFP4's exponents powers of
two; W4A8's activation scales in the line's mode_a, as FP8 lines' are."""

import torch

import gemmkit
from . import _gemmkit as _C

TORCH_DTYPES = {_C.DType.bf16: torch.bfloat16, _C.DType.f16: torch.float16, _C.DType.f32: torch.float32,
                _C.DType.e4m3: torch.float8_e4m3fn, _C.DType.e5m2: torch.float8_e5m2}


def uniform(shape, dtype, transposed, device="cuda"):
    """Uniform values in [-1, 1) of `dtype`, stored transposed (the last two dimensions swapped)
    where asked and returned as the view of `shape`."""
    stored = (*shape[:-2], shape[-1], shape[-2]) if transposed else shape
    x = (torch.rand(stored, device=device) * 2 - 1).to(dtype)
    return x.transpose(-1, -2) if transposed else x


def scales_for(mode, rows, cols, of_a, batch, device="cuda"):
    """Random scales of an operand in `mode`, laid out as torch._scaled_mm reads them: block
    scales column-major (A's [M, K/128], B's [K/128, N/128]), the rest row-major."""
    lead = (batch,) if batch > 1 else ()
    if mode == _C.ScaleMode.tensor:
        return torch.rand(lead + (1, 1) if lead else (), device=device) * 1.5 + 0.5
    if mode == _C.ScaleMode.rowwise:
        shape = (rows, 1) if of_a else (1, cols)
        return torch.rand(lead + shape, device=device) * 1.5 + 0.5
    if mode == _C.ScaleMode.block:
        shape = (rows, -(-cols // 128)) if of_a else (-(-rows // 128), -(-cols // 128))
        return (torch.rand(lead + shape[::-1], device=device) * 1.5 + 0.5).transpose(-1, -2)
    shape = (rows, -(-cols // 32)) if of_a else (-(-rows // 32), cols)
    return mx_exponents(lead + shape, device)


def mx_exponents(shape, device):
    """Random mx scales, 2^-2 .. 2^1, as float8_e8m0fnu."""
    return torch.randint(125, 129, shape, device=device, dtype=torch.uint8).view(torch.float8_e8m0fnu)


def w4_weights(p, device):
    """Random 4-bit weights W [N, K] of a w4 line as gemmkit.int4_mm and mxfp4_mm take them:
    (w, scales, zeros), w their [N, ceil(K/2)] bytes (every code alike), int4's scales [ceil(K/G),
    N] of A's type (bfloat16 for an e4m3 A) in [0.5, 2) and zeros None or integers 0..15 of the
    same (AWQ's), MXFP4's scales [N, ceil(K/32)] (gpt-oss's layout) and no zeros."""
    w = torch.randint(0, 256, (p.n, (p.k + 1) // 2), device=device, dtype=torch.uint8)
    if p.b_dtype == _C.DType.e2m1:
        return w, mx_exponents((p.n, -(-p.k // 32)), device), None
    shape, dtype = (-(-p.k // p.group), p.n), torch.bfloat16 if p.w4a8 else TORCH_DTYPES[p.in_dtype]
    scales = (torch.rand(shape, device=device) * 1.5 + 0.5).to(dtype)
    zeros = torch.randint(0, 16, shape, device=device).to(dtype) if p.zeros else None
    return w, scales, zeros


class BufferSet:
    """One set of a problem's operands, scales and outputs (ours, and torch's unless
    torch_out=False: a grouped row's dense floor has none). A w4 line (one weight matrix) has
    w, scales and zeros (w4_weights) in b's place, and for W4A8 sa, A's scales in mode_a;
    `device` is for the tests, which build w4 sets on the CPU."""

    def __init__(self, p, torch_out=True, device="cuda"):
        lead = (p.batch,) if p.batch > 1 else ()
        self.a = uniform(lead + (p.m, p.k), TORCH_DTYPES[p.in_dtype], p.layout[0] == "T", device)
        self.w4 = p.w4
        if self.w4:
            self.w, self.scales, self.zeros = w4_weights(p, device)
            if p.w4a8:
                self.sa = scales_for(p.mode_a, p.m, p.k, True, 1, device)
        else:
            self.b = uniform(lead + (p.k, p.n), TORCH_DTYPES[p.b_dtype], p.layout[1] == "T", device)
        out = TORCH_DTYPES[p.out_dtype]
        self.d = torch.full(lead + (p.m, p.n), float("nan"), device=device, dtype=out)
        self.d_torch = torch.empty_like(self.d) if torch_out else None
        self.fp8 = not self.w4 and p.mode != _C.ScaleMode.none
        if self.fp8:
            self.sa = scales_for(p.mode, p.m, p.k, True, p.batch)
            self.sb = scales_for(p.mode, p.k, p.n, False, p.batch)


def run_ours(p, s):
    """gemmkit's run of the problem on buffer set s."""
    if s.w4:
        x_scale = s.sa if p.w4a8 else None
        if p.b_dtype == _C.DType.e2m1:
            gemmkit.mxfp4_mm(s.a, s.w, s.scales, out=s.d, x_scale=x_scale)
        else:
            gemmkit.int4_mm(s.a, s.w, s.scales, s.zeros, group=p.group, out=s.d, x_scale=x_scale)
    elif s.fp8:
        gemmkit.scaled_mm(s.a, s.b, s.sa, s.sb, mode=p.mode.name, out=s.d)
    elif p.batch > 1:
        gemmkit.bmm(s.a, s.b, out=s.d)
    else:
        gemmkit.mm(s.a, s.b, out=s.d)
