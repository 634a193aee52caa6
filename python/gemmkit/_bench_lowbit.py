"""torch's side of python -m gemmkit.bench's lines with 4-bit weights (`A,w4:FORMAT[:OUT]`), and a
check of both sides' outputs once a line. gemmkit runs int4_mm or mxfp4_mm on the weights
_bench_buffers.w4_weights draws; torch runs, from the same codes, scales and zero points:

  int4gG[z]  torch._weight_int4pack_mm(x, packed, G, scales_and_zeros) (tinygemm), the weights
             converted once a buffer set, before timing, by torch._convert_weight_to_int4pack
  mxfp4      torch.mm on the weights dequantised to A's type once a buffer set (exact for the
             bench's exponents): a stand-in, noted (torch has no MXFP4 GEMM on Hopper)
  W4A8       (e4m3 A against int4gG[z] or mxfp4) torch._scaled_mm of the same e4m3 A, scaled as
             the line's is, against random e4m3 weights [N, K] (per channel for rowwise A, 128x128
             blocks for block A), or per-tensor where torch refuses those scales: a stand-in of the
             same shape, noted (torch has no W4A8 GEMM); its output, of other weights, is not
             checked. A's mx exponents (A8W4 in MX, `mx`): torch has no MXFP8 GEMM on Hopper, so
             torch runs nothing (W4A8_MX_WHY, said as the line's reason for no baseline); ours is
             timed and checked

tinygemm's conventions in torch 2.11, read from aten/src/ATen/native/cuda/int4mm.cu (every
TORCH_CHECK condition below stands verbatim in 2.11's libtorch_cuda.so) and from torch.testing's
_group_quantize_tensor, which packs weights for it:
  - _convert_weight_to_int4pack(w, inner_k_tiles) takes w uint8 [N, K/2], two codes a byte along
    K, the even k in the HIGH nibble (gemmkit's qweight has it in the low one: tinygemm_bytes
    swaps them); inner_k_tiles 2, 4 or 8, K a multiple of 16 * inner_k_tiles.
  - _weight_int4pack_mm takes x bf16 [M, K] contiguous (no float16), groups of 32, 64, 128 or 256
    dividing K, N a multiple of 8 (its scales cover N rounded up to 8), scales_and_zeros bf16
    [K/G, N, 2], (scale, zero) of each group and column; it dequantises q as (q - 8) * scale +
    zero in one bf16 fma and writes bf16 [M, N] (no other output type).
gemmkit's (q - z) * scale is then torch's with zero = (8 - z) * scale, rounded to bf16: exact for
symmetric weights (z = 8, zero 0), else within one rounding of the zero term, which check()'s
bound allows. On the CPU, torch's _weight_int4pack_mm_for_cpu takes the same scales_and_zeros and
unpacked codes (_convert_weight_to_int4pack_for_cpu of int32 [N, K]); the tests run it to prove
the scales, zeros and group layout, and that tinygemm_bytes is torch.testing's packing. The CUDA
kernel's reading of those bytes is proved only on the GPU, by check() on every int4 line.
"""

import torch

from . import _gemmkit as _C
from ._bench_buffers import TORCH_DTYPES, scales_for, uniform
from ._bench_grouped import HALF_ULP, SAMPLED_ROWS, spread

INT4_GROUPS = (32, 64, 128, 256)  # tinygemm's
SAMPLED_COLUMNS = 64
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
MXFP4_NOTE = "torch.mm on the weights dequantised to A's type (torch has no MXFP4 GEMM on Hopper)"
W4A8_NOTE = "torch._scaled_mm on e4m3 weights of the same shape (torch has no W4A8 GEMM)"
W4A8_MX_WHY = ("torch has no W4A8 GEMM, nor an MXFP8 one on Hopper (torch._scaled_mm's float8_e8m0fnu scales are "
               "for sm_100)")
FP8_SUMS = 2.0 ** -10  # FP8 products' accumulation bound, as tests/python/gpu_reference.py's


def is_mxfp4(p):
    return p.b_dtype == _C.DType.e2m1


# --- the weights as torch takes them ---------------------------------------------------------

def codes(w, k):
    """The codes [N, K] (uint8) of weights stored as gemmkit's bytes w [N, ceil(K/2)], the even k in
    the low nibble."""
    return torch.stack((w & 15, w >> 4), -1).flatten(1)[:, :k]


def tinygemm_bytes(w):
    """gemmkit's bytes w [N, K/2] as _convert_weight_to_int4pack takes them on CUDA: each byte's
    nibbles swapped, the even k in the high one."""
    return (w << 4) | (w >> 4)


def tinygemm_scales_and_zeros(scales, zeros):
    """bf16 [K/G, N, 2] of (scale, zero), zero = (8 - z) * scale so that torch's (q - 8) * scale +
    zero is gemmkit's (q - z) * scale; 0 for symmetric weights (zeros None: z = 8)."""
    s = scales.float()
    zero = torch.zeros_like(s) if zeros is None else (8 - zeros.float()) * s
    return torch.stack((s, zero), -1).to(torch.bfloat16).contiguous()


def inner_k_tiles(k):
    """The most k-tiles of 16 tinygemm packs together (8, 4 or 2) that K is a multiple of."""
    return next(tiles for tiles in (8, 4, 2) if k % (16 * tiles) == 0)


def int4_refusal(p):
    """Why torch._weight_int4pack_mm cannot run int4 line p (torch's own checks, stated ahead so
    that the table's note is readable), or ""."""
    name = "torch._weight_int4pack_mm"
    if p.in_dtype != _C.DType.bf16:
        return f"{name} takes bf16 activations only"
    if p.out_dtype != _C.DType.bf16:
        return f"{name} writes bf16 only"
    if p.layout[0] != "N":
        return f"{name} takes A row-major (contiguous), not stored transposed"
    if p.group not in INT4_GROUPS:
        return f"{name} takes groups of 32, 64, 128 or 256, not {p.group}"
    if p.k % p.group:
        return f"{name} takes K a multiple of the group, not K = {p.k}"
    if p.n % 8:
        return f"{name} takes N a multiple of 8, not N = {p.n}"
    return ""


def int4_packed(w, k):
    """torch's packed int4 weights from gemmkit's bytes w [N, K/2]: tinygemm's int32 tiles on CUDA,
    the CPU kernel's bytes (from the unpacked codes) on the CPU."""
    if w.is_cuda:
        return torch._convert_weight_to_int4pack(tinygemm_bytes(w), inner_k_tiles(k))
    return torch._convert_weight_to_int4pack_for_cpu(codes(w, k).int(), inner_k_tiles(k))


def int4_product(x, packed, group, scales_and_zeros):
    """torch's x @ W.T of packed int4 weights, on x's device."""
    mm = torch._weight_int4pack_mm if x.is_cuda else torch._weight_int4pack_mm_for_cpu
    return mm(x, packed, group, scales_and_zeros)


def mxfp4_weights(w, scales, k, dtype):
    """MXFP4 weights W [N, K] of `dtype` (float64 for the exact values): each e2m1 code's value
    times 2^(e - 127), e the exponent of its block of 32 (scales [N, ceil(K/32)])."""
    values = torch.tensor(FP4_VALUES, dtype=torch.float64, device=w.device)[codes(w, k).long()]
    exponents = scales.view(torch.uint8).double().repeat_interleave(32, 1)[:, :k]
    return (values * torch.exp2(exponents - 127)).to(dtype)


def w4a8_calls(p, pool):
    """torch's calls for W4A8 line p: torch._scaled_mm of each set's e4m3 A and its scales (sa)
    against e4m3 weights [N, K] made for it, scaled in the mode torch pairs with A's; then the
    same with per-tensor scales of 1, for where torch refuses those. None for A's mx exponents
    (W4A8_MX_WHY)."""
    if p.mode_a == _C.ScaleMode.mx:
        return [], W4A8_MX_WHY
    for s in pool:
        s.torch_w = uniform((p.n, p.k), torch.float8_e4m3fn, False, s.a.device)
        s.torch_sb = scales_for(p.mode_a, p.k, p.n, False, 1, s.a.device)
    one = torch.ones((), device=pool[0].a.device)

    def scaled(a, w, sa, sb, out):
        return torch._scaled_mm(a, w.t(), sa, sb, out_dtype=out.dtype, use_fast_accum=False)
    calls = [(scaled, lambda s: (s.a, s.torch_w, s.sa, s.torch_sb, s.d_torch), W4A8_NOTE)]
    if p.mode_a != _C.ScaleMode.tensor:
        calls.append((scaled, lambda s: (s.a, s.torch_w, one, one, s.d_torch), f"{W4A8_NOTE}, per-tensor scales"))
    return calls, ""


def torch_calls(p, pool):
    """torch's calls for w4 line p as bench.baseline takes them, ([(function, arguments of a buffer
    set, note)], why torch cannot run it or ""), its weights converted (W4A8: made) on every set of
    the pool."""
    if p.w4a8:
        return w4a8_calls(p, pool)
    k = p.k
    if is_mxfp4(p):
        out_dtype = TORCH_DTYPES[p.out_dtype]
        for s in pool:
            s.torch_w = mxfp4_weights(s.w, s.scales, k, s.a.dtype)
        if out_dtype == pool[0].a.dtype:
            def function(a, w, out):
                return torch.mm(a, w.t(), out=out)
        else:
            def function(a, w, out):
                return torch.mm(a, w.t(), out_dtype=out_dtype)
        return [(function, lambda s: (s.a, s.torch_w, s.d_torch), MXFP4_NOTE)], ""
    why = int4_refusal(p)
    if why:
        return [], why
    for s in pool:
        s.torch_w = int4_packed(s.w, k)
        s.torch_scales = tinygemm_scales_and_zeros(s.scales, s.zeros)
    group = p.group

    def int4(a, packed, scales_and_zeros):
        return int4_product(a, packed, group, scales_and_zeros)
    return [(int4, lambda s: (s.a, s.torch_w, s.torch_scales), "")], ""


def torch_bytes(p):
    """The bytes a buffer set holds for torch beside the line's own: its copy of the weights (W4A8:
    its e4m3 weights; none where A's scales are mx, which torch does not run)."""
    if p.w4a8:
        return 0 if p.mode_a == _C.ScaleMode.mx else p.n * p.k
    if is_mxfp4(p):
        return p.n * p.k * 2
    return p.n * p.k // 2 + -(-p.k // p.group) * p.n * 4


# --- checking both outputs once --------------------------------------------------------------------

def exact_weights(p, s, columns):
    """(W, Z) [len(columns), K] in double for output columns `columns`: the weights as real numbers,
    and |(8 - z) * scale|, the magnitude of the zero term torch's int4 dequantisation rounds (0
    for MXFP4 and symmetric int4)."""
    w = s.w[columns]
    if is_mxfp4(p):
        weights = mxfp4_weights(w, s.scales[columns], p.k, torch.float64)
        return weights, torch.zeros_like(weights)
    scale = s.scales[:, columns].double().t().repeat_interleave(p.group, 1)[:, :p.k]
    zero = 8.0 if s.zeros is None else s.zeros[:, columns].double().t().repeat_interleave(p.group, 1)[:, :p.k]
    return (codes(w, p.k).double() - zero) * scale, ((8.0 - zero) * scale).abs()


def scaled_activations(p, s, rows):
    """Rows `rows` of A in double, times their scales where the line has them (W4A8: x * x_scale;
    mx: x * 2^(e - 127), e the exponent of its row's block of 32 of K)."""
    x = s.a[rows].double()
    if not p.w4a8:
        return x
    if p.mode_a == _C.ScaleMode.mx:
        return x * torch.exp2(s.sa.view(torch.uint8)[rows].double() - 127).repeat_interleave(32, 1)[:, :p.k]
    sa = s.sa.double()
    if p.mode_a == _C.ScaleMode.tensor:
        return x * sa
    if p.mode_a == _C.ScaleMode.block:
        return x * sa[rows].repeat_interleave(128, 1)[:, :p.k]
    return x * sa[rows]


def check(p, s, outputs):
    """{who: "<who> differs ..."} for each of `outputs` ({who: output [M, N]} on set s) that differs
    from a float64 product of sampled rows and columns by more than the bound. The bound: one rounding
    of each weight and of torch's zero term to A's type, float32 sums (K * 2^-24 of the product of
    the magnitudes), then the output's rounding; for W4A8 (exact e4m3 activations and weights'
    integers) FP8 sums' 2^-10 of the product of the magnitudes, then the output's rounding."""
    rows = spread(p.m, SAMPLED_ROWS)
    columns = spread(p.n, SAMPLED_COLUMNS)
    x = scaled_activations(p, s, rows)
    weights, zero_terms = exact_weights(p, s, columns)
    ref = x @ weights.t()
    magnitude = x.abs() @ weights.abs().t()
    if p.w4a8:
        rounding = FP8_SUMS * magnitude
    else:
        rounding = HALF_ULP[s.a.dtype] * (magnitude + x.abs() @ zero_terms.t()) + p.k * 2.0 ** -24 * magnitude
    differs = {}
    for who, out in outputs.items():
        bound = ref.abs() * HALF_ULP[out.dtype] + rounding * (1 + HALF_ULP[out.dtype])
        error = (out[rows][:, columns].double() - ref).abs()
        if not (error <= bound).all():  # NaN fails too
            worst = torch.nan_to_num(error - bound, nan=float("inf")).argmax()
            differs[who] = (f"{who} differs from a float64 product of sampled rows and columns: error "
                            f"{error.flatten()[worst].item():.3g} where the bound is {bound.flatten()[worst].item():.3g}")
    return differs
