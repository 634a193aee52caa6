"""A dense bench problem's tensors on the GPU and gemmkit's run of it, for python -m
gemmkit.bench: the dense rows and the grouped rows' dense floors. Operands uniform in [-1, 1),
FP8 scales in [0.5, 2), mx ones powers of two, outputs NaN-filled."""

import torch

import gemmkit
from . import _gemmkit as _C

TORCH_DTYPES = {_C.DType.bf16: torch.bfloat16, _C.DType.f16: torch.float16, _C.DType.f32: torch.float32,
                _C.DType.e4m3: torch.float8_e4m3fn, _C.DType.e5m2: torch.float8_e5m2}


def uniform(shape, dtype, transposed):
    """Uniform values in [-1, 1) of `dtype`, stored transposed (the last two dimensions swapped)
    where asked and returned as the view of `shape`."""
    stored = (*shape[:-2], shape[-1], shape[-2]) if transposed else shape
    x = (torch.rand(stored, device="cuda") * 2 - 1).to(dtype)
    return x.transpose(-1, -2) if transposed else x


def scales_for(mode, rows, cols, of_a, batch):
    """Random scales of an operand in `mode`, laid out as torch._scaled_mm reads them: block
    scales column-major (A's [M, K/128], B's [K/128, N/128]), the rest row-major."""
    lead = (batch,) if batch > 1 else ()
    if mode == _C.ScaleMode.tensor:
        return torch.rand(lead + (1, 1) if lead else (), device="cuda") * 1.5 + 0.5
    if mode == _C.ScaleMode.rowwise:
        shape = (rows, 1) if of_a else (1, cols)
        return torch.rand(lead + shape, device="cuda") * 1.5 + 0.5
    if mode == _C.ScaleMode.block:
        shape = (rows, -(-cols // 128)) if of_a else (-(-rows // 128), -(-cols // 128))
        return (torch.rand(lead + shape[::-1], device="cuda") * 1.5 + 0.5).transpose(-1, -2)
    shape = (rows, -(-cols // 32)) if of_a else (-(-rows // 32), cols)  # mx: 2^-2 .. 2^1
    return torch.randint(125, 129, lead + shape, device="cuda", dtype=torch.uint8).view(torch.float8_e8m0fnu)


class BufferSet:
    """One set of a problem's operands, scales and outputs (ours, and torch's unless
    torch_out=False: a grouped row's dense floor has none)."""

    def __init__(self, p, torch_out=True):
        lead = (p.batch,) if p.batch > 1 else ()
        self.a = uniform(lead + (p.m, p.k), TORCH_DTYPES[p.in_dtype], p.layout[0] == "T")
        self.b = uniform(lead + (p.k, p.n), TORCH_DTYPES[p.b_dtype], p.layout[1] == "T")
        out = TORCH_DTYPES[p.out_dtype]
        self.d = torch.full(lead + (p.m, p.n), float("nan"), device="cuda", dtype=out)
        self.d_torch = torch.empty_like(self.d) if torch_out else None
        self.fp8 = p.mode != _C.ScaleMode.none
        if self.fp8:
            self.sa = scales_for(p.mode, p.m, p.k, True, p.batch)
            self.sb = scales_for(p.mode, p.k, p.n, False, p.batch)


def set_bytes(p):
    size = {_C.DType.bf16: 2, _C.DType.f16: 2, _C.DType.f32: 4, _C.DType.e4m3: 1, _C.DType.e5m2: 1}
    return p.batch * (p.m * p.k * size[p.in_dtype] + p.k * p.n * size[p.b_dtype] + p.m * p.n * size[p.out_dtype])


def run_ours(p, s):
    """gemmkit's run of the problem on buffer set s."""
    if s.fp8:
        gemmkit.scaled_mm(s.a, s.b, s.sa, s.sb, mode=p.mode.name, out=s.d)
    elif p.batch > 1:
        gemmkit.bmm(s.a, s.b, out=s.d)
    else:
        gemmkit.mm(s.a, s.b, out=s.d)
