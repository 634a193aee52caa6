"""torch tensors in, gemmkit's C++ library underneath. Each tensor becomes a TensorView of its
data pointer, dtype, sizes and strides, so any strided view runs as it is, on the tensors'
device and that device's current stream.

A call reaches the launch (`launch_gemm`, `launch_grouped`, `launch_grouped_wgrad`,
`launch_quantize`, `launch_w4`, `launch_grouped_w4`, `launch_quantize_w4`) by one of three
roads. Where torch has something to record besides autograd (torch.compile tracing, fake or
other subclass tensors, a dispatch mode, a functorch transform) it goes through the custom
operators torch.ops.gemmkit.* (`_ops`), whose CUDA kernels are these same launches. Where only
autograd has (inputs that require grad, eager) it goes through _ops' autograd Functions, which
launch them too and record the operators' own backward formulas. Otherwise it launches
directly: torch's dispatcher would only add host time. Arrays of other libraries come in through
DLPack (`_arrays`).

Importing this module imports torch and registers the operators; gemmkit imports it on the first
use of one of its functions (or at once where torch is already loaded), not before.
"""

import collections
import operator
import re

import torch

from . import _arrays
from . import _gemmkit as _C
from ._fusion import enable_compile_fusion  # noqa: F401  (gemmkit.enable_compile_fusion)

DTYPES = {torch.bfloat16: _C.DType.bf16, torch.float16: _C.DType.f16, torch.float32: _C.DType.f32,
          torch.float8_e4m3fn: _C.DType.e4m3, torch.float8_e5m2: _C.DType.e5m2,
          torch.float8_e8m0fnu: _C.DType.ue8m0}
for _framework_dtype, _dtype in DTYPES.items():
    _C.register_dtype(_framework_dtype, _dtype)
MODES = {mode.name: mode for mode in (_C.ScaleMode.none, _C.ScaleMode.tensor, _C.ScaleMode.rowwise,
                                      _C.ScaleMode.block, _C.ScaleMode.mx)}
SIZE_DTYPES = (torch.int32, torch.int64)  # group sizes (offs, counts)
for _framework_dtype in SIZE_DTYPES:
    _C.register_size_dtype(_framework_dtype, _framework_dtype == torch.int64)
# gemmkit's scratch (split-K partials, operand copies) from torch's caching allocator, on the
# call's device and stream: torch counts it (torch.cuda.memory_allocated) and a capture keeps it
# in the graph's pool, where the kernels then run as uncaptured (gemmkit/scratch.h). Installed once
# torch has initialised CUDA, which makes its allocator: until then gemmkit keeps its own.
torch.cuda._lazy_call(lambda: _C.set_scratch_allocator(torch._C._cuda_cudaCachingAllocator_raw_alloc,
                                                       torch._C._cuda_cudaCachingAllocator_raw_delete))
LAYOUTS = {"contiguous": _C.GroupLayout.contiguous, "masked": _C.GroupLayout.masked}
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# The out_dtype of an output quantised in 1x128 blocks (GemmOptions::scale_d), which comes with its
# scales: (out, scales).
QUANTIZED = torch.float8_e4m3fn
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)  # tensor types that carry nothing for torch to record


# --- what the launches take -------------------------------------------------------------------

def output_dtype(a, out_dtype):
    """out_dtype, else the inputs' type for 16-bit inputs and bfloat16 for 8-bit ones."""
    if out_dtype is not None:
        return out_dtype
    return a.dtype if a.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def output_shape(a, b):
    """[batch,] M x N for a [batch,] M x K and b [batch,] K x N (one of them may be 2-D)."""
    if a.dim() == 3:
        return (a.size(0), a.size(1), b.size(-1))
    return (a.size(0), b.size(-1)) if b.dim() == 2 else (b.size(0), a.size(0), b.size(2))


def new_output(a, b, out_dtype):
    """An empty output for a @ b on a's device. new_empty with the sizes as separate arguments is
    the cheapest allocation from Python (a tuple of sizes costs 40% more to parse)."""
    dtype = output_dtype(a, out_dtype)
    return a.new_empty(*output_shape(a, b)) if dtype == a.dtype else a.new_empty(*output_shape(a, b), dtype=dtype)


def scales_shape(shape):
    """The shape of the scales of an e4m3 output of `shape`: one a row for each 128 columns,
    [..., M, ceil(N/128)]."""
    return (*shape[:-1], -(-shape[-1] // 128))


def new_scales(out):
    """Empty float32 scales for the e4m3 `out`, laid out as quantize()'s 1x128 ones
    (new_quantize_scales), so that scaled_mm and scaled_grouped_mm take them as block-mode scale_a
    with out as a, without a copy."""
    return new_quantize_scales(out, 1, 128, torch.float32)


def launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue="", epilogue_pairs=None,
                b2=None, scale_d=None):
    """out = alpha * a @ b + beta * c on out's device and current stream (scales for FP8), through
    the fused epilogue's text where one is given, with its (name, tensor, index) triples
    (epilogue_pairs). With b2 (a second K x N operand of b's type) it is a dual GEMM, whose
    epilogue reads a @ b2 as acc2 (an empty text: SWIGLU). An e4m3 out is quantised in 1x128
    blocks, its scales written to scale_d (new_scales).
    The views are read in C++ (python/src/tensor_views.h); a single scale may have any shape, a
    1-D one is a column of A's or a row of B's."""
    _C.gemm_tensors(a, b, out, alpha, beta, c, torch._C._cuda_getCurrentRawStream(out.get_device()),
                    MODES[mode_a], scale_a, MODES[mode_b], scale_b, epilogue, epilogue_pairs, b2, scale_d)


SWIGLU = "silu(acc) * acc2"  # a dual GEMM's epilogue where none is given (gemmkit/gemm.h, GemmOptions::b2)

# 4-bit weights (int4_mm, mxfp4_mm; gemmkit/gemm.h): each format's DType of B, and the dtypes its
# [N, ceil(K/2)] bytes may come in: uint8, or for MXFP4 torch's float4_e2m1fn_x2 where this torch
# has it. MXFP4's scales are one ue8m0 exponent a block of MX_BLOCK along K.
W4_FORMATS = {"int4": _C.DType.u4, "mxfp4": _C.DType.e2m1}
FLOAT4 = getattr(torch, "float4_e2m1fn_x2", None)
W4_BYTES = {"int4": (torch.uint8,), "mxfp4": (torch.uint8,) + ((FLOAT4,) if FLOAT4 is not None else ())}
E8M0 = torch.float8_e8m0fnu
MX_BLOCK = 32
W4_SCALE_DTYPES = (torch.bfloat16, torch.float16)  # int4's scales (and zero points)
# int4_mm's FP8 activations (W4A8; the grouped products' likewise, over x's rows), scaled by
# x_scale: one float32 scale (tensor), one a row (rowwise) or one a row per X_SCALE_BLOCK of K
# (block, 1x128); or, against weights in groups of MX_BLOCK of K (mxfp4, int4 with group 32), one
# ue8m0 exponent a row per MX_BLOCK of K (mx: MXFP8 activations), of X_SCALE_MX's dtypes.
W4A8_X = torch.float8_e4m3fn
X_SCALE_BLOCK = 128
X_SCALE_MX = (E8M0, torch.uint8)
# MXFP4 activations (FP4 x FP4): x [..., K/2] bytes of e2m1 codes, packed two a byte along K as
# MXFP4 weights are (so K is even) and in their dtypes, with mx x_scale, against weights in groups
# of MX_BLOCK of K; gemm() widens them to e4m3 and runs A8W4 in MX.
FP4_X = W4_BYTES["mxfp4"]
FP4_X_NAMES = " or ".join(str(d).replace("torch.", "") for d in FP4_X)


def as_e8m0(exponents):
    """ue8m0 exponents (float8_e8m0fnu, or uint8 viewed so) as gemmkit reads them: float8_e8m0fnu."""
    return exponents if exponents.dtype == E8M0 else exponents.view(E8M0)


def x_k(x):
    """K of x [..., K], or of MXFP4 activations x [..., K/2] bytes (FP4_X): 2 * x.size(-1)."""
    return 2 * x.size(-1) if x.dtype in FP4_X else x.size(-1)


def new_w4_output(x, w, out_dtype):
    """An empty [M, N] output for x [M, K] and 4-bit weights w [N, ceil(K/2)] (new_output's
    cheapest form)."""
    dtype = output_dtype(x, out_dtype)
    return x.new_empty(x.size(0), w.size(0)) if dtype == x.dtype else x.new_empty(x.size(0), w.size(0), dtype=dtype)


def launch_w4(x, w, scales, zeros, format, group, out, x_scale=None):
    """out [M, N] = x [M, K] @ W^T on out's device and current stream, for 4-bit weights W [N, K]
    (torch.nn.Linear's layout) stored as w, [N, ceil(K/2)] bytes, two K elements a byte: B = W^T,
    viewed in C++ as K x N of u4 (format 'int4') or e2m1 ('mxfp4') with nibble strides {1, 2 *
    w.stride(0)} (python/src/module.cpp, gemm_4bit_tensors). int4's scales and zero points
    [ceil(K/group), N] go as they are; MXFP4's [N, ceil(K/32)] (gpt-oss's layout) as their
    transpose, B's ceil(K/32) x N, read as float8_e8m0fnu (uint8 exponents viewed so). An e4m3 x
    is scaled by x_scale, A's scales in the mode its dtype and shape say (x_scale_mode); mx
    exponents in uint8 are read as float8_e8m0fnu too. MXFP4 activations x [M, K/2] (FP4_X) are
    viewed in C++ as A, M x K of e2m1 (packed_activation_view_of), their x_scale mx. Checked by
    check_w4."""
    if format == "mxfp4":
        scales = as_e8m0(scales).t()
    mode_a = _C.ScaleMode.none if x_scale is None else MODES[x_scale_mode(x_scale, x.size(0), x_k(x))]
    if mode_a == _C.ScaleMode.mx:
        x_scale = as_e8m0(x_scale)
    _C.gemm_4bit_tensors(x, w, out, W4_FORMATS[format], scales, zeros, group,
                         torch._C._cuda_getCurrentRawStream(out.get_device()), mode_a, x_scale, x.dtype in FP4_X)


def grouped_w4_output_shape(x, w):
    """[M_total, N] for contiguous groups (x [M_total, K], or MXFP4 x's [M_total, K/2] bytes),
    [G, max_m, N] for masked ones (x [G, max_m, K] or [G, max_m, K/2]); w the experts' 4-bit
    weights as bytes [G, N, ceil(K/2)]."""
    return (*x.shape[:-1], w.size(1))


def new_grouped_w4_output(x, w, out_dtype):
    """An empty output for grouped_int4_mm and grouped_mxfp4_mm (the rows no group owns are never
    written)."""
    return x.new_empty(grouped_w4_output_shape(x, w), dtype=output_dtype(x, out_dtype))


def launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale=None, epilogue="",
                      epilogue_pairs=None):
    """out = x_g @ W_g^T for each group g's rows of x (`layout` and `sizes` as launch_grouped's) on
    out's device and current stream, for the experts' 4-bit weights W [G, N, K] stored as w, [G, N,
    ceil(K/2)] bytes: B = W^T, viewed in C++ as G x K x N of u4 or e2m1 (python/src/module.cpp,
    grouped_gemm_4bit_tensors; packed_weight_view_of), as launch_w4's for each expert. int4's
    scales and zero points [G, ceil(K/group), N] go as they are; MXFP4's [G, N, ceil(K/32)] as
    their transpose, read as float8_e8m0fnu. An e4m3 x is scaled by x_scale, A's scales in the
    mode its dtype and shape say (grouped_x_scale_mode: one for all, one a row, 1x128 blocks or mx
    exponents, each over x's rows); masked rowwise [G, max_m] ones get their column back, [G,
    max_m, 1], as scaled_grouped_mm's; mx exponents in uint8 are read as float8_e8m0fnu, as
    launch_w4's. MXFP4 activations x [M_total, K/2] or [G, max_m, K/2] (FP4_X) are viewed in C++
    as A, M_total x K or G x max_m x K of e2m1 (packed_activation_view_of, as launch_w4's), their
    x_scale mx; grouped_gemm widens them to e4m3 first, reading them as they lie. Any other x is
    copied first where TMA cannot read it K-major. Through a fused epilogue where one is given, as
    launch_grouped. Checked by check_grouped_w4."""
    packed = x.dtype in FP4_X
    if not packed:
        x = tma_readable(x, (-1,))
    if format == "mxfp4":
        scales = as_e8m0(scales).transpose(-1, -2)
    mode_a = _C.ScaleMode.none
    if x_scale is not None:
        mode_a = MODES[grouped_x_scale_mode(x_scale, x)]
        if mode_a == _C.ScaleMode.mx:  # [M_total or G, max_m, ceil(K/32)] as they are
            x_scale = as_e8m0(x_scale)
        elif x_scale.numel() == 1 and x_scale.dim() > 2:
            x_scale = x_scale.reshape(())
        elif x.dim() == 3 and x_scale.dim() == 2:
            x_scale = x_scale.unsqueeze(-1)
    _C.grouped_gemm_4bit_tensors(x, w, out, W4_FORMATS[format], scales, zeros, group, sizes.contiguous(),
                                 LAYOUTS[layout], False, torch._C._cuda_getCurrentRawStream(out.get_device()), mode_a,
                                 x_scale, max_sms, epilogue, epilogue_pairs, packed)


def new_quantize_w4_outputs(w, format, group, zeros, scales_dtype):
    """Empty (qweight, scales, zeros or None) for 4-bit weights of w [N, K], as int4_mm and
    mxfp4_mm take them: [N, ceil(K/2)] bytes; int4's scales (and zeros) [ceil(K/group), N] of
    scales_dtype, row-major; MXFP4's uint8 exponents [N, ceil(K/32)] stored [ceil(K/32), N] and
    returned transposed, the layout mxfp4_mm reads without copying them first."""
    n, k = w.shape
    qweight = w.new_empty(n, (k + 1) // 2, dtype=torch.uint8)
    if format == "mxfp4":
        return qweight, w.new_empty(-(-k // MX_BLOCK), n, dtype=torch.uint8).t(), None
    scales = w.new_empty(-(-k // group), n, dtype=scales_dtype)
    return qweight, scales, torch.empty_like(scales) if zeros else None


def launch_quantize_w4(w, qweight, scales, zeros, format, group):
    """qweight, scales (and zeros) = w [N, K] quantised to 4 bits (new_quantize_w4_outputs' tensors)
    on w's device and current stream: gemmkit::quantize_int4 or quantize_mxfp4 on the views
    gemm_4bit_tensors makes (python/src/module.cpp, quantize_4bit_tensors), MXFP4's uint8 scales
    read as float8_e8m0fnu. Checked by check_quantize_w4."""
    if format == "mxfp4":
        scales = scales.view(E8M0)
    _C.quantize_4bit_tensors(w, qweight, scales, zeros, W4_FORMATS[format], group,
                             torch._C._cuda_getCurrentRawStream(w.get_device()))


def swiglu_output_shape(x, w, w_up):
    """[M, I] for x [M, K] and SwiGLU's weights: w and w_up [I, K] each, or w [2I, K] alone."""
    return (x.size(0), w.size(0) if w_up is not None else w.size(0) // 2)


def new_swiglu_output(x, w, w_up, out_dtype):
    """An empty [M, I] output (new_empty's cheapest form where the type is x's, as new_output)."""
    dtype = output_dtype(x, out_dtype)
    shape = swiglu_output_shape(x, w, w_up)
    return x.new_empty(*shape) if dtype == x.dtype else x.new_empty(*shape, dtype=dtype)


def launch_swiglu(x, w, w_up, interleaved, out, epilogue, epilogue_pairs, scale_d=None):
    """out [M, I] = the epilogue of acc = x @ gate^T and acc2 = x @ up^T, one dual GEMM on out's
    device and current stream; gate and up [I, K] are w and w_up, or the halves of w [2I, K]
    (w_up None): its first and last I rows, or (interleaved) its even and odd rows. The weights'
    rows are B's and B2's columns (K-major), read as they lie, their views made in C++
    (python/src/module.cpp, swiglu_tensors). scale_d: an e4m3 out's scales, as launch_gemm's."""
    _C.swiglu_tensors(x, w, w_up, interleaved, out, torch._C._cuda_getCurrentRawStream(out.get_device()), epilogue,
                      epilogue_pairs, scale_d)


def launch_scaled_swiglu(x, w, w_up, interleaved, out, scale_x, scale_gate, scale_up, mode_x, mode_w, epilogue,
                         epilogue_pairs, scale_d=None):
    """launch_swiglu for FP8 x and weights: acc = (x * its scales) @ (gate * scale_gate)^T and acc2
    the same with up and scale_up (GemmOptions::scale_b and scale_b2, mode_w), x's scales scale_x
    (mode_x); the gate's and up's scales each laid out as B's for B = gate^T or up^T, the halves of
    a combined w's split by swiglu_scales."""
    _C.swiglu_tensors(x, w, w_up, interleaved, out, torch._C._cuda_getCurrentRawStream(out.get_device()), epilogue,
                      epilogue_pairs, scale_d, MODES[mode_x], scale_x, MODES[mode_w], scale_gate, scale_up)


def swiglu_scales(scale_w, scale_up, mode, interleaved, rows, grouped=False):
    """(the gate's scales, the up's) of scaled_swiglu_mm's weights (`grouped`:
    scaled_grouped_swiglu_mm's, each expert's), each laid out as B's for B = gate^T or up^T
    (GemmOptions::scale_b and scale_b2): scale_w and scale_up as they are where w_up was given
    (scale_up not None). Else scale_w holds the scales of one w of `rows` (2I) rows laid out as
    B's for b = w.t() ([G, ...] grouped), its last dimension B's columns, w's rows: the gate's and
    the up's are views of it, the same single scale for both in mode 'tensor'; its first and last
    I columns, or (interleaved) its even and odd ones, where it has one a row of w (rowwise, block
    128x1, mx); its first and last I/128 where it has one a block of 128 rows (block 128x128),
    which the up's rows start on only where I is a multiple of 128 and w is not interleaved.
    ValueError otherwise, saying what to pass instead: the gate and up weights apart, each with
    its own scales."""
    if scale_up is not None:
        return scale_w, scale_up
    if mode == "tensor":
        return scale_w, scale_w
    half, cols, blocks = rows // 2, scale_w.size(-1) if scale_w.dim() else 1, -(-rows // 128)
    if cols == rows:  # one a row of w
        return (scale_w[..., 0::2], scale_w[..., 1::2]) if interleaved else (scale_w[..., :half], scale_w[..., half:])
    g, t = ("G, ", "w.transpose(-2, -1)") if grouped else ("", "w.t()")
    if mode == "block" and cols == blocks:
        instead = (f"expected the gate and up weights apart, w and w_up [{g}I, K], each quantised with its own scales "
                   "(scale_w and scale_up), or scales of one a row of w (mode 'rowwise', or block 128x1)")
        if interleaved:
            raise ValueError(f"scale_w: 128x128 blocks of an interleaved w [{g}2I, K], each block's rows alternating "
                             "gate and up, do not split into the gate's scales and the up's; " + instead)
        if half % 128:
            raise ValueError(f"scale_w: 128x128 blocks of a w [{g}2I, K] with I = {half}, not a multiple of 128: the "
                             f"up's rows start inside block {half // 128} of w's rows, so the scales do not split into "
                             "the gate's and the up's; " + instead)
        return scale_w[..., :half // 128], scale_w[..., half // 128:]
    raise ValueError(f"scale_w: shape {list(scale_w.shape)} in mode {mode!r} for a w [{g}2I, K] of 2I = {rows} rows; "
                     f"expected B's scales for b = {t}, their last dimension one a row of w, {rows} (rowwise, block "
                     f"128x1, mx), or one a block of 128 rows, {blocks} (block 128x128)")


_EPILOGUE_USES = {}  # text -> _C.epilogue_tensor_uses(text)


@torch.compiler.assume_constant_result  # traced once per text, not into: it calls the C++ parser
def epilogue_uses(text):
    """(name, index, output, reduce) for each tensor the epilogue's text names: inputs in order of
    first use, then outputs. index is 'n' (name[n]), 'm' (name[m]), 'mn' (name[m, n]) or ''
    (name[], one value a batch); reduce is 'sum' or 'amax' for a reduction's output (name[n] =
    sum(...)), else None. Parsed once per text; a text that does not parse raises ValueError
    naming the column."""
    uses = _EPILOGUE_USES.get(text)
    if uses is None:
        if not isinstance(text, str):
            raise TypeError(f"epilogue: expected the text form as a str, got {type(text).__name__}")
        uses = _EPILOGUE_USES[text] = _C.epilogue_tensor_uses(text)
    return uses


def epilogue_triples(text, names, tensors):
    """epilogue_pairs' triples from an operator's arguments: tensor names and tensors, each name's
    index taken from the text by name (the C++ API, too, finds tensors by name, in any order)."""
    index = {use[0]: use[1] for use in epilogue_uses(text)}
    return [(name, t, index[name]) for name, t in zip(names, tensors)]


class EpilogueDims(collections.namedtuple("EpilogueDims", "batch m n rows_shared unit")):
    """D's dimensions as an epilogue's tensors see them: `batch` batches (bmm's B, a grouped
    product's G; 1 for mm) of m x n (a contiguous grouped product: M_total rows that the groups
    share, `rows_shared`, so that name[m] has no batch); `unit` names a batch in errors ('batch'
    or 'group')."""
    __slots__ = ()


def epilogue_dims(a, b):
    """EpilogueDims of the product a @ b (mm, bmm, addmm, scaled_mm; a or b may be 2-D)."""
    shape = output_shape(a, b)
    return EpilogueDims(shape[0] if len(shape) == 3 else 1, shape[-2], shape[-1], False, "batch")


def grouped_epilogue_dims(a, b):
    """EpilogueDims of a grouped forward: a [M_total, K] (contiguous) or [G, max_m, K] (masked)
    with b [G, K, N]."""
    return EpilogueDims(b.size(0), a.size(-2), b.size(-1), a.dim() == 2, "group")


def wgrad_epilogue_dims(x, y, offs):
    """EpilogueDims of a grouped weight gradient, D [G, P, Q] for x [M_total, P], y [M_total, Q] and
    G group ends: each group's own P x Q (the tokens are contracted, so name[m] is one a row of P)."""
    return EpilogueDims(offs.size(0), x.size(1), y.size(1), False, "group")


def grouped_w4_epilogue_dims(x, w):
    """EpilogueDims of grouped_int4_mm's and grouped_mxfp4_mm's D: x's groups' rows (as
    grouped_epilogue_dims' a) and N, the experts' weights w [G, N, ceil(K/2)] bytes."""
    return EpilogueDims(w.size(0), x.size(-2), w.size(1), x.dim() == 2, "group")


def grouped_swiglu_epilogue_dims(x, w, w_up):
    """EpilogueDims of grouped_swiglu_mm's D: x's groups' rows (as grouped_epilogue_dims' a) and I
    columns, the experts' weights w and w_up as grouped_swiglu_output_shape takes them."""
    return EpilogueDims(w.size(0), x.size(-2), grouped_swiglu_output_shape(x, w, w_up)[-1], x.dim() == 2, "group")


def epilogue_pairs(text, tensors, dims=None):
    """(name, tensor, index) for each tensor the epilogue's text names, from the keyword arguments
    `tensors`, in its order, for launch_gemm: name[n] given as [N] or [batch, N] (also [1, N]),
    name[m] as [M] or [batch, M] (also [M, 1]), name[] as 0-d, [1] or [batch], name[m, n] and its
    outputs as D is; a reduction's outputs as its index reads (name[n] = sum(...): [N] summed over
    every batch, or [batch, N] one a batch), float32 and contiguous. 1-D vectors and scalars are
    viewed in C++ (python/src/module.cpp), batched vectors here. Raises ValueError for a name the
    text does not use and for one it uses and was not given, TypeError and ValueError naming a
    reduction's output of another dtype or not contiguous, and, given `dims` (D's EpilogueDims, or
    a function that gives them, called only for a text with scalars or reductions), ValueError
    naming a scalar or a reduction's output of a shape other than these (check_epilogue_shape)."""
    uses = epilogue_uses(text)
    if len(tensors) != len(uses) or not all(use[0] in tensors for use in uses):
        _refuse_epilogue_tensors(uses, tensors)
    pairs = []
    for name, index, output, reduce in uses:
        t = tensors[name]
        _check_cuda_tensor(t, name)
        if reduce is not None or index == "":
            _check_reduced(t, name, index, output, reduce, dims)
        if (index == "n" or index == "m") and t.dim() == 2 and t.size(0 if index == "n" else 1) != 1:
            t = t.unsqueeze(-2 if index == "n" else -1)  # a vector a batch
        pairs.append((name, t, index))
    return pairs


def _check_reduced(t, name, index, output, reduce, dims):
    """A scalar (name[]) or a reduction's output: float32 and contiguous where it is an output (the
    library zeroes it, then adds into it), and with `dims` of one of the shapes its index takes."""
    if output:
        if t.dtype != torch.float32:
            raise TypeError(f"{name}: dtype {t.dtype} for {_use_text(name, index, output, reduce)}; expected float32 "
                            "(a reduction's output)")
        if not t.is_contiguous():
            raise ValueError(f"{name}: strides {list(t.stride())} for shape {list(t.shape)}, not contiguous; expected "
                             f"a contiguous tensor for {_use_text(name, index, output, reduce)} (gemmkit zeroes it, "
                             "then adds into it)")
    if dims is not None:
        check_epilogue_shape(t, name, index, output, reduce, dims() if callable(dims) else dims)


def _use_text(name, index, output, reduce):
    """A tensor's use as the text spells it: bias[n], s[], pre[m, n] =, db[n] = sum(...)."""
    form = f"{name}[{'m, n' if index == 'mn' else index}]"
    if not output:
        return form
    return f"{form} = {reduce}(...)" if reduce else f"{form} ="


def _epilogue_shapes(index, dims):
    """(the shapes of a tensor used as name[n], name[m] or name[] (index 'n', 'm' or '') with
    one set of values for every batch, those with one a batch): as a user gives them (1-D vectors,
    0-d and 1-D scalars, [batch, N]) and as the C++ API takes them ([1, N], [batch, 1, N], ...)."""
    batch, m, n = dims.batch, dims.m, dims.n
    if index == "n":
        return ((n,), (1, n)), ((batch, n), (batch, 1, n))
    if index == "m":
        return ((m,), (m, 1)), (() if dims.rows_shared else ((batch, m), (batch, m, 1)))
    return ((), (1,), (1, 1)), ((batch,), (batch, 1, 1))


def check_epilogue_shape(t, name, index, output, reduce, dims):
    """ValueError naming a scalar (name[]) or a reduction's output whose shape is none that its
    index takes for D's EpilogueDims `dims` (_epilogue_shapes)."""
    shared, batched = _epilogue_shapes(index, dims)
    if t.shape in shared or t.shape in batched:
        return
    expected = " or ".join(str(list(shape)) if shape else "0-d" for shape in shared[:2])
    # (a contiguous grouped product's name[m] has no batch: its rows are every group's)
    if batched and (dims.batch > 1 or dims.unit == "group"):
        every = "summed" if reduce == "sum" else "the largest |x|" if reduce == "amax" else "one value"
        letter = "G" if dims.unit == "group" else "B"
        expected += (f" ({every} over every {dims.unit}), or {list(batched[0])} (one a {dims.unit}, "
                     f"{letter} = {dims.batch})")
    raise ValueError(f"{name}: shape {list(t.shape)} for {_use_text(name, index, output, reduce)}; expected "
                     f"{expected}")


def check_operator_shapes(text, names, tensors, dims):
    """check_epilogue_shape for each scalar and reduction's output among an epilogue operator's
    tensors (names and tensors as the operators take them): the fake implementations' check, so
    that a traced call meets the error the eager one does."""
    if not names:
        return
    uses = {use[0]: use for use in epilogue_uses(text)}
    for name, t in zip(names, tensors):
        _, index, output, reduce = uses[name]
        if reduce is not None or index == "":
            check_epilogue_shape(t, name, index, output, reduce, dims)


def operator_tensors(text, pairs):
    """(names, inputs, outputs) of epilogue_pairs' triples, as the epilogue operators take them:
    the names in the text's order, the tensors it reads, then those it writes (which the
    operators declare mutated, a reduction's too); epilogue_triples gives the triples back."""
    outputs = {use[0] for use in epilogue_uses(text) if use[2]}
    return ([name for name, _, _ in pairs], [t for name, t, _ in pairs if name not in outputs],
            [t for name, t, _ in pairs if name in outputs])


def _refuse_epilogue_tensors(uses, tensors):
    """The ValueError for keyword tensors that are not those the epilogue names."""
    for name in tensors:
        if not any(name == use[0] for use in uses):
            raise ValueError(f"{name}: not a tensor the epilogue names; expected "
                             + (", ".join(use[0] for use in uses) or "none (it names no tensor)"))
    for name, index, output, reduce in uses:
        if name not in tensors:
            raise ValueError(f"{name}: not given; the epilogue {'writes' if output else 'reads'} "
                             f"{_use_text(name, index, output, reduce)}, expected {name}=tensor")


def grouped_output_shape(a, b):
    """[M_total, N] for contiguous groups (a [M_total, K]), [G, max_m, N] for masked ones (a [G,
    max_m, K]); b is [G, K, N]."""
    return (*a.shape[:-1], b.size(-1))


def new_grouped_output(a, b, out_dtype):
    """An empty output for grouped a @ b (launch_grouped writes the rows no group owns only where
    asked to zero them)."""
    return a.new_empty(grouped_output_shape(a, b), dtype=output_dtype(a, out_dtype))


def wgrad_output_shape(x, y, offs):
    """[G, P, Q] for x [M_total, P], y [M_total, Q] and G group ends."""
    return (offs.size(0), x.size(1), y.size(1))


def launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, mode_a, mode_b, max_sms, zero_unowned=False,
                   epilogue="", epilogue_pairs=None, scale_d=None):
    """out = a @ b per group (`layout` "contiguous" or "masked", `sizes` the ends or counts, read
    by the kernel) on out's device and current stream, through a fused epilogue where one is
    given (as launch_gemm; scale_d an e4m3 out's scales); the rows no group owns, and their
    scales, are left as they are, or out's set to 0 where `zero_unowned` (gradients, where they
    must read 0). a and b are first copied where the kernel's TMA cannot read them as they lie;
    FP8 ones must be K-major (a's K and b's K contiguous), 16-bit ones may be either way."""
    fp8 = a.element_size() == 1
    a = tma_readable(a, (-1,) if fp8 else (-1, -2))
    b = tma_readable(b, (-2,) if fp8 else (-2, -1))
    _C.grouped_gemm_tensors(a, b, out, sizes.contiguous(), LAYOUTS[layout], False, zero_unowned, 1.0,
                            torch._C._cuda_getCurrentRawStream(out.get_device()), MODES[mode_a], scale_a,
                            MODES[mode_b], scale_b, max_sms, epilogue, epilogue_pairs, scale_d)


def grouped_swiglu_output_shape(x, w, w_up):
    """[M_total, I] for contiguous groups (x [M_total, K]), [G, max_m, I] for masked ones (x [G,
    max_m, K]); the experts' weights w and w_up [G, I, K] each, or w [G, 2I, K] alone."""
    return (*x.shape[:-1], w.size(1) if w_up is not None else w.size(1) // 2)


def new_grouped_swiglu_output(x, w, w_up, out_dtype):
    """An empty output for grouped_swiglu_mm (the rows no group owns are never written)."""
    return x.new_empty(grouped_swiglu_output_shape(x, w, w_up), dtype=output_dtype(x, out_dtype))


def launch_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, max_sms, epilogue, epilogue_pairs,
                          scale_d=None):
    """out = the epilogue (SWIGLU for the default) of acc = x_g @ gate_g^T and acc2 = x_g @ up_g^T
    for each group g's rows (`layout` and `sizes` as launch_grouped's), one grouped dual GEMM on
    out's device and current stream; gate and up [G, I, K] are w and w_up, or each expert's halves
    of w [G, 2I, K] (w_up None), as launch_swiglu's. The weights' views are made in C++
    (python/src/module.cpp, grouped_swiglu_tensors). The grouped kernel has no path for operands
    TMA cannot read: x is copied first as launch_grouped's a, and the weights where those views
    are not readable (swiglu_weights_readable). scale_d: an e4m3 out's scales, as launch_grouped's."""
    x = tma_readable(x, (-1, -2))
    w, w_up = swiglu_weights_readable(w, w_up)
    _C.grouped_swiglu_tensors(x, w, w_up, interleaved, out, sizes.contiguous(), LAYOUTS[layout], False,
                              torch._C._cuda_getCurrentRawStream(out.get_device()), max_sms, epilogue,
                              epilogue_pairs, scale_d)


def launch_scaled_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, scale_x, scale_gate, scale_up, mode_x,
                                 mode_w, max_sms, epilogue, epilogue_pairs, scale_d=None):
    """launch_grouped_swiglu for FP8 x and experts' weights, with x's scales (mode_x) and the gates'
    and ups' (mode_w) as launch_scaled_swiglu's, each batched by group or shared
    (scaled_grouped_mm's B scales as gemm.h's views). x is copied first where TMA cannot read it
    K-major, the weights as launch_grouped_swiglu's."""
    x = tma_readable(x, (-1,))
    w, w_up = swiglu_weights_readable(w, w_up)
    _C.grouped_swiglu_tensors(x, w, w_up, interleaved, out, sizes.contiguous(), LAYOUTS[layout], False,
                              torch._C._cuda_getCurrentRawStream(out.get_device()), max_sms, epilogue,
                              epilogue_pairs, scale_d, MODES[mode_x], scale_x, MODES[mode_w], scale_gate, scale_up)


def swiglu_weights_readable(w, w_up):
    """(w, w_up) as they are where their rows (K) are contiguous and TMA can read them: then so can
    it the B and B2 views grouped_swiglu_tensors makes (a half of each expert's rows, or every
    other row: whole rows apart); else copies with K contiguous and rows padded to 16 bytes (an odd
    K, a misaligned base, weights stored K x I)."""
    return tma_readable(w, (-1,)), None if w_up is None else tma_readable(w_up, (-1,))


def launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, epilogue="",
                         epilogue_pairs=None, scale_d=None):
    """out[g] = x_g^T y_g, x_g and y_g group g's rows by the ends in `offs`, on out's device and
    current stream (scales for FP8: x's as A's, y's as B's), through a fused epilogue where one is
    given (as launch_gemm; out [G, P, Q] is its D, scale_d an e4m3 out's scales [G, P,
    ceil(Q/128)]). The 16-bit kernel reads x's and y's rows (P and Q contiguous): copied first
    where they are not, or TMA cannot read them as they lie. FP8 x and y pass as they are: the
    library copies them into the layout its kernel reads."""
    if x.element_size() != 1:
        x, y = tma_readable(x, (-1,)), tma_readable(y, (-1,))
    _C.grouped_gemm_wgrad_tensors(x, y, out, offs.contiguous(), False, 1.0, 0.0, None,
                                  torch._C._cuda_getCurrentRawStream(out.get_device()), MODES[mode_a], scale_a,
                                  MODES[mode_b], scale_b, max_sms, epilogue, epilogue_pairs, scale_d)


def tma_readable(t, inner_dims):
    """t itself where TMA can read it: 16-byte-aligned data, and for one of `inner_dims` (-1 or
    -2) that dimension contiguous and every other one's stride a multiple of 16 bytes (rows not
    overlapping); else a copy with inner_dims[0] contiguous and rows padded to 16 bytes. The
    grouped kernels, unlike gemm(), have no path of their own for other operands."""
    if t.data_ptr() % 16 == 0 and any(_tma_strides(t, inner) for inner in inner_dims):
        return t
    rows = t if inner_dims[0] == -1 else t.transpose(-1, -2)
    unit = 16 // t.element_size()
    cols = rows.size(-1)
    copy = rows.new_empty((*rows.shape[:-1], -(-cols // unit) * unit))[..., :cols].copy_(rows)
    return copy if inner_dims[0] == -1 else copy.transpose(-1, -2)


def _tma_strides(t, inner):
    unit, outer = 16 // t.element_size(), -1 if inner == -2 else -2
    if t.size(inner) > 1 and t.stride(inner) != 1:
        return False
    if t.size(outer) > 1 and (t.stride(outer) % unit or t.stride(outer) < t.size(inner)):
        return False
    return t.dim() == 2 or t.size(0) == 1 or t.stride(0) % unit == 0


def launch_quantize(x, q, scales, block_rows, block_cols, power_of_two):
    _C.quantize_tensors(x, q, scales, block_rows, block_cols, power_of_two,
                        torch._C._cuda_getCurrentRawStream(x.get_device()))


def quantized_shapes(x, block_rows, block_cols):
    """The shapes of quantize's q and scales for x."""
    *batch, rows, cols = x.shape
    return x.shape, (*batch, -(-rows // block_rows), -(-cols // block_cols))


def new_quantize_scales(x, block_rows, block_cols, dtype):
    """quantize's empty scales for x. float32 scales of one row each (1x128 activations, rowwise)
    are stored row-minor, rows padded to a multiple of 4, [..., M, C] with strides (..., 1, ld):
    the layout torch's _scaled_mm takes for 1x128 scales and the one gemmkit's TMA kernel reads
    without copying them first."""
    shape = quantized_shapes(x, block_rows, block_cols)[1]
    if block_rows != 1 or dtype != torch.float32:
        return x.new_empty(shape, dtype=dtype)
    *batch, rows, cols = shape
    storage = x.new_empty((*batch, cols, -(-rows // 4) * 4), dtype=dtype)
    return storage[..., :rows].transpose(-1, -2)


# --- checks that also hold while torch.compile traces -----------------------------------------

def _check_cuda_tensor(tensor, name):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or an array with __dlpack__, got "
                        f"{type(tensor).__name__}")
    if not tensor.is_cuda:
        raise ValueError(f"{name}: on {tensor.device}; expected a CUDA tensor")


def check(tensor, name, dims):
    _check_cuda_tensor(tensor, name)
    if tensor.dim() not in dims:
        raise ValueError(f"{name}: {tensor.dim()} dimensions; expected " + " or ".join(map(str, dims)))
    if tensor.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not supported; expected bfloat16, float16, "
                        f"float8_e4m3fn or float8_e5m2 (float32 for outputs, c and scales)")


def check_sizes(sizes, name, groups, of="b"):
    """Group sizes (offs or counts): a 1-D int32 or int64 CUDA tensor of `groups` values (None:
    any number), G the first dimension of the operand named `of`."""
    _check_cuda_tensor(sizes, name)
    if sizes.dim() != 1:
        raise ValueError(f"{name}: {sizes.dim()} dimensions; expected 1 (one value a group)")
    if sizes.dtype not in SIZE_DTYPES:
        raise TypeError(f"{name}: dtype {sizes.dtype} is not supported; expected int32 or int64")
    if groups is not None and sizes.size(0) != groups:
        raise ValueError(f"{name}: {sizes.size(0)} values; expected one a group, G = {groups} ({of}'s first "
                         "dimension)")


def out_pair(out):
    """(out, scales) of an out= argument: a tensor (or None) without scales, or the pair (out,
    scales) an e4m3 output is written into, as such a call returns it."""
    if isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise ValueError(f"out: {len(out)} items; expected a tensor, or the pair (out, scales) of a "
                             "float8_e4m3fn output")
        return out[0], out[1]
    return out, None


def check_output(out, out_dtype, dims, scales=None):
    """out (None: one is made) and out_dtype (None: the default), which must agree; an e4m3 out
    comes with its scales (out=(out, scales)), float32 of scales_shape(out.shape)."""
    if out_dtype is not None and out_dtype not in OUT_DTYPES and out_dtype != QUANTIZED:
        raise TypeError(f"out_dtype: {out_dtype} is not supported; expected bfloat16, float16, float32 or "
                        "float8_e4m3fn (returned with its scales)")
    if out is None and scales is None:
        return
    check(out, "out", dims)
    if out_dtype is not None and out.dtype != out_dtype:
        raise ValueError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype}")
    if (out.dtype == QUANTIZED) != (scales is not None):
        raise ValueError("out: a float8_e4m3fn tensor without its scales; expected the pair out=(out, scales)"
                         if scales is None else f"out: the pair (out, scales) with out of dtype {out.dtype}; "
                         "expected scales only with a float8_e4m3fn out")
    if scales is not None:
        _check_cuda_tensor(scales, "out[1]")
        if scales.dtype != torch.float32:
            raise TypeError(f"out[1]: dtype {scales.dtype}; expected float32 (the scales of out)")
        if scales.shape != scales_shape(out.shape):
            raise ValueError(f"out[1]: shape {list(scales.shape)}; expected {list(scales_shape(out.shape))}, one "
                             f"scale a row for each 128 columns of out {list(out.shape)}")


def quantized(out, out_dtype):
    """Whether a call's output is e4m3, quantised in 1x128 blocks with its scales (out and
    out_dtype checked by check_output)."""
    return (out_dtype if out is None else out.dtype) == QUANTIZED


def x_scale_mode(x_scale, m, k):
    """The mode of x_scale, the scales of e4m3 x [M, K] (int4_mm's and mxfp4_mm's, W4A8; MXFP4 x's
    take mx alone, check_x_scale), by its dtype and shape: float32 'tensor' (one element),
    'rowwise' ([M, 1] or [M], one a row) or 'block' ([M, ceil(K/128)], 1x128 blocks);
    float8_e8m0fnu or uint8 exponents 'mx' ([M, ceil(K/32)], 1x32 blocks: MXFP8 or MXFP4); None
    for any other shape. Where two float32 modes fit (M = 1, or K <= 128) they scale alike."""
    return rows_scale_mode(x_scale, (m,), k)


def rows_scale_mode(x_scale, rows, k):
    """x_scale_mode over x's leading sizes `rows`, a tuple ((M,); a grouped x's (M_total,) or (G,
    max_m): grouped_x_scale_mode): float32 one element (tensor), rows + (1,) or rows (rowwise) or
    rows + (ceil(K/128),) (block); exponents rows + (ceil(K/32),) (mx)."""
    shape = tuple(x_scale.shape)
    if x_scale.dtype in X_SCALE_MX:
        return "mx" if shape == (*rows, -(-k // MX_BLOCK)) else None
    if x_scale.numel() == 1:
        return "tensor"
    if shape in ((*rows, 1), rows):
        return "rowwise"
    if shape == (*rows, -(-k // X_SCALE_BLOCK)):
        return "block"
    return None


def x_scale_rows(x, x_scale):
    """x_scale for x [..., K] (MXFP4 x: [..., K/2] bytes, x_k) as for x's rows [M, K]: [..., 1] as
    [M, 1] and [..., ceil(K/128)] as [M, ceil(K/128)], mx exponents [..., ceil(K/32)] as [M,
    ceil(K/32)] (a view where they can be, else a copy); others as given (check_w4 judges them)."""
    if x_scale is None or x.dim() == 2 or not isinstance(x_scale, torch.Tensor):
        return x_scale
    mx = x_scale.dtype in X_SCALE_MX
    if x_scale.numel() == 1 and not mx:  # one for all (an mx one is one row's, K <= 32)
        return x_scale
    lead, k = tuple(x.shape[:-1]), x_k(x)
    for cols in ((-(-k // MX_BLOCK),) if mx else (1, -(-k // X_SCALE_BLOCK))):
        if tuple(x_scale.shape) == (*lead, cols):
            return x_scale.reshape(-1, cols)
    return x_scale


def mx_groups(format, group, k):
    """Whether 4-bit weights of `format` with K = k have their scales in groups of 32 of K, as A's
    mx exponents need (gemm()'s rule, grouped_gemm's too): MXFP4's always; int4's with group 32
    where K > 32 (a group at least K is one scale a column)."""
    return format == "mxfp4" or (group == MX_BLOCK and k > MX_BLOCK)


def int4_groups(group, k):
    """The text naming int4 weights in groups of `group` with K = k, for the errors."""
    return f"int4 weights in groups of {group}" + (f", one covering all of K = {k}" if group >= k else "")


def mx_form(lead, sizes, k, kind="MXFP8"):
    """The text of x_scale's mx form for x's leading dimensions named `lead` ("...", "M_total", "G,
    max_m") of `sizes` (a list of their values; None: any, "..."), as the errors give it."""
    blocks = -(-k // MX_BLOCK)
    shape = f"[..., {blocks}]" if sizes is None else f"{sizes + [blocks]}"
    return f"float8_e8m0fnu or uint8 exponents [{lead}, ceil(K/32)] = {shape} (mx, {kind}: 2^(e - 127) per 32 of K)"


def check_x_scale_dtype(x_scale, format, group, k, forms, grouped=False):
    """x_scale's dtype for e4m3 x, K = k (check_x_scale, check_grouped_x_scale: `grouped`): float32,
    or mx exponents (X_SCALE_MX) against weights in groups of 32 of K alone (mx_groups);
    ValueError naming x_scale, the weights' groups and the expected forms (the text `forms()`
    gives) for exponents against other weights, TypeError for any other dtype."""
    mx = mx_groups(format, group, k)
    if x_scale.dtype in X_SCALE_MX and not mx:
        products = "grouped_mxfp4_mm, or grouped_int4_mm" if grouped else "mxfp4_mm, or int4_mm"
        raise ValueError(f"x_scale: dtype {x_scale.dtype}, mx exponents (MXFP8), against {int4_groups(group, k)}; "
                         f"expected mx exponents only against weights in groups of 32 of K ({products} with group=32 "
                         f"and K > 32), else float32 scales: {forms()}")
    if x_scale.dtype != torch.float32 and x_scale.dtype not in X_SCALE_MX:
        raise TypeError(f"x_scale: dtype {x_scale.dtype}; expected float32" +
                        (" (or float8_e8m0fnu or uint8 mx exponents)" if mx else ""))


def takes_x_scale(x, x_scale):
    """Whether x takes x_scale (e4m3 or MXFP4 x); for 16-bit x, ValueError naming x_scale where one
    is given (check_x_scale, check_grouped_x_scale)."""
    if x.dtype == W4A8_X or x.dtype in FP4_X:
        return True
    if x_scale is not None:
        raise ValueError(f"x_scale: given with {x.dtype} x; expected None (scales go with float8_e4m3fn x or MXFP4 x)")
    return False


def check_fp4_x_scale(x, x_scale, format, group, forms, grouped=False):
    """What MXFP4 activations x [..., K/2] (FP4_X) need, bar x_scale's shape (check_x_scale,
    check_grouped_x_scale: `grouped`): weights of `format` and `group` in groups of 32 of K
    (mx_groups: gemm() and grouped_gemm() take no others), and x_scale a CUDA tensor of mx
    exponents (X_SCALE_MX); ValueError naming group, or x_scale with its expected forms (the text
    `forms()` gives), TypeError for x_scale's dtype."""
    k = x_k(x)
    if not mx_groups(format, group, k):
        products = "grouped_mxfp4_mm, or grouped_int4_mm" if grouped else "mxfp4_mm, or int4_mm"
        raise ValueError(f"group: {group} with MXFP4 activations x ({x.dtype}, K = 2 * {x.size(-1)} = {k}), against "
                         f"{int4_groups(group, k)}; expected 32 with K > 32: MXFP4 x goes only with weights in groups "
                         f"of 32 of K ({products} with group=32)")
    if x_scale is None:
        raise ValueError(f"x_scale: None with MXFP4 activations x ({x.dtype}); expected their {forms()}")
    _check_cuda_tensor(x_scale, "x_scale")
    if x_scale.dtype not in X_SCALE_MX:
        raise TypeError(f"x_scale: dtype {x_scale.dtype} with MXFP4 activations x; expected float8_e8m0fnu or uint8 "
                        "(mx exponents, one per 32 of K)")


def check_x_scale(x, x_scale, format, group):
    """x_scale for x [M, K] (check_w4): None for 16-bit x; for e4m3 x float32 of a shape
    x_scale_mode knows, or, against weights of `format` and `group` in groups of 32 of K
    (mx_groups), float8_e8m0fnu or uint8 exponents [M, ceil(K/32)] (mx); for MXFP4 x [M, K/2]
    (FP4_X) those exponents alone, and the weights in groups of 32 of K (check_fp4_x_scale)."""
    if not takes_x_scale(x, x_scale):
        return
    packed = x.dtype in FP4_X
    k = x_k(x)
    exponents = mx_form("...", None, k, "MXFP4" if packed else "MXFP8")
    forms = exponents if packed else (
        f"one element (tensor), [..., 1] or [M] (one a row of x: rowwise) or [..., ceil(K/128)] = [..., "
        f"{-(-k // X_SCALE_BLOCK)}] (1x128 blocks), the leading dimensions x's" +
        (f"; or {exponents}" if mx_groups(format, group, k) else ""))
    if packed:
        check_fp4_x_scale(x, x_scale, format, group, lambda: forms)
    elif x_scale is None:
        raise ValueError(f"x_scale: None with float8_e4m3fn x; expected x's float32 scales: {forms}")
    else:
        _check_cuda_tensor(x_scale, "x_scale")
        check_x_scale_dtype(x_scale, format, group, k, lambda: forms)
    if x_scale_mode(x_scale, x.size(0), k) is None:
        raise ValueError(f"x_scale: shape {list(x_scale.shape)}; expected {forms}")


def check_w4(x, w, scales, zeros, format, group, x_scale=None):
    """The operands of a product with 4-bit weights (int4_mm, mxfp4_mm, torch.ops.gemmkit.w4_mm):
    x [M, K] bfloat16 or float16, or float8_e4m3fn with x_scale (check_x_scale), or MXFP4
    activations [M, K/2] bytes (FP4_X, the bytes along K contiguous) with mx x_scale; w the
    weights [N, ceil(K/2)] as bytes (W4_BYTES), named qweight (int4) or weight (mxfp4), the bytes
    along K contiguous; int4's scales [ceil(K/group), N] of x's dtype (e4m3 x: bfloat16 or float16)
    and zeros None or as the scales, `group` 32, a power of two from 64, or at least K; MXFP4's
    scales [N, ceil(K/32)] float8_e8m0fnu or uint8, no zeros, group 32. TypeError for a dtype,
    ValueError for anything else, naming the argument."""
    _check_w4_format(format)
    _check_cuda_tensor(x, "x")
    if x.dim() != 2:
        raise ValueError(f"x: {x.dim()} dimensions; expected 2, [M, K]")
    _check_w4_x(x)
    check_x_scale(x, x_scale, format, group)
    _check_w4_weights(x, w, scales, zeros, format, group)


def _check_w4_format(format):
    if format not in W4_FORMATS:
        raise ValueError(f"format: {format!r}; expected 'int4' or 'mxfp4'")


def _check_w4_x(x):
    """x's dtype, 16-bit, e4m3, or MXFP4 activations (FP4_X), whose bytes along K lie contiguous
    (check_w4, check_grouped_w4)."""
    if x.dtype in FP4_X:
        check_bytes_along_k(x, "x")
    elif x.dtype not in (torch.bfloat16, torch.float16, W4A8_X):
        raise TypeError(f"x: dtype {x.dtype} is not supported; expected bfloat16 or float16, or float8_e4m3fn with "
                        f"x_scale, or MXFP4 activations ({FP4_X_NAMES} [..., K/2]) with x_scale")


def check_bytes_along_k(t, name):
    """ValueError naming `name` unless the bytes of 4-bit codes t [..., ceil(K/2)] lie contiguous along
    K, as gemm() reads them (two codes a byte)."""
    if t.size(-1) > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: strides {list(t.stride())}; expected the bytes along K contiguous (stride 1)")


def _check_w4_weights(x, w, scales, zeros, format, group, grouped=False):
    """check_w4's checks of the weights, their scales and zero points for x [..., K] (checked):
    one matrix's, or (`grouped`) the experts' of grouped_w4_mm, each with G first (its w [G, N,
    ceil(K/2)] and scales [G, ...])."""
    int4 = format == "int4"
    w_name = "qweight" if int4 else "weight"
    packed = x.dtype in FP4_X
    fp8_x = x.dtype == W4A8_X or packed  # MXFP4 x is multiplied widened to e4m3
    k = x_k(x)
    _check_cuda_tensor(w, w_name)
    if w.dtype not in W4_BYTES[format]:
        raise TypeError(f"{w_name}: dtype {w.dtype} is not supported; expected "
                        + ("uint8, two 4-bit codes a byte along K" if int4 else
                           FP4_X_NAMES + ", two FP4 values a byte along K"))
    lead_text = "G, " if grouped else ""
    if w.dim() != 2 + grouped or w.size(-1) != (k + 1) // 2:
        raise ValueError(f"{w_name}: shape {list(w.shape)}; expected [{lead_text}N, ceil(K/2)] = [{lead_text}N, "
                         f"{(k + 1) // 2}] bytes for x's K = {k}" +
                         (f" (2 * x's {x.size(-1)} bytes: MXFP4 x has an even K)" if packed else ""))
    check_bytes_along_k(w, w_name)
    n, lead = w.size(-2), (w.size(0),) if grouped else ()
    _check_cuda_tensor(scales, "scales")
    check_w4_group(format, group, k)
    if int4:
        if fp8_x and scales.dtype not in W4_SCALE_DTYPES:
            raise TypeError(f"scales: dtype {scales.dtype}; expected bfloat16 or float16 with "
                            f"{'MXFP4' if packed else 'float8_e4m3fn'} x")
        if not fp8_x and scales.dtype != x.dtype:
            raise TypeError(f"scales: dtype {scales.dtype}; expected x's, {x.dtype}")
        shape, text = (*lead, -(-k // group), n), f"[{lead_text}ceil(K/{group}), N]"
    else:
        if scales.dtype not in (E8M0, torch.uint8):
            raise TypeError(f"scales: dtype {scales.dtype} is not supported; expected float8_e8m0fnu or uint8 "
                            "(exponents e, each scale 2^(e - 127))")
        shape, text = (*lead, n, -(-k // MX_BLOCK)), f"[{lead_text}N, ceil(K/32)]"
    if tuple(scales.shape) != shape:
        sizes = f"G = {lead[0]}, " if lead else ""
        raise ValueError(f"scales: shape {list(scales.shape)}; expected {text} = {list(shape)} for {sizes}K = {k}, "
                         f"N = {n}")
    if zeros is None:
        return
    if not int4:
        raise ValueError("zeros: given with MXFP4 weights; expected None (zero points are int4's)")
    _check_cuda_tensor(zeros, "zeros")
    if zeros.dtype != scales.dtype:
        raise TypeError(f"zeros: dtype {zeros.dtype}; expected the scales', {scales.dtype}")
    if zeros.shape != scales.shape:
        raise ValueError(f"zeros: shape {list(zeros.shape)}; expected the scales', {list(scales.shape)}")


def grouped_x_scale_mode(x_scale, x):
    """The mode of x_scale, the scales of e4m3 x of grouped rows (grouped_int4_mm's and
    grouped_mxfp4_mm's, W4A8; x [M_total, K] or [G, max_m, K]; MXFP4 x's [..., K/2] bytes, x_k),
    by its dtype and shape as x_scale_mode's over x's rows (rows_scale_mode): float32 'tensor' (one
    element), 'rowwise' (one a row of x: [M_total, 1] or [M_total], masked [G, max_m, 1] or [G,
    max_m]) or 'block' (x's rows by ceil(K/128): 1x128 blocks); float8_e8m0fnu or uint8 exponents
    'mx' (x's rows by ceil(K/32)); None for any other shape."""
    return rows_scale_mode(x_scale, tuple(x.shape[:-1]), x_k(x))


def check_grouped_x_scale(x, x_scale, format, group):
    """x_scale for grouped x (check_grouped_w4): None for 16-bit x; for e4m3 x float32, one for
    all, one a row or 1x128 blocks of x's rows, or, against weights of `format` and `group` in
    groups of 32 of K (mx_groups, as check_x_scale takes them), float8_e8m0fnu or uint8 exponents
    of x's rows by ceil(K/32) (grouped_x_scale_mode); for MXFP4 x [M_total, K/2] or [G, max_m,
    K/2] (FP4_X) those exponents alone, and the weights in groups of 32 of K (check_fp4_x_scale)."""
    if not takes_x_scale(x, x_scale):
        return
    packed, k = x.dtype in FP4_X, x_k(x)

    def forms():  # the text, made where an error needs it (not while torch.compile traces)
        rows, lead = list(x.shape[:-1]), "M_total" if x.dim() == 2 else "G, max_m"
        if packed:
            return mx_form(lead, rows, k, "MXFP4")
        mx = f"; or {mx_form(lead, rows, k)}" if mx_groups(format, group, k) else ""
        return (f"one element (tensor), one a row of x (rowwise), [{lead}, 1] or [{lead}] = {rows + [1]} or {rows}, "
                f"or 1x128 blocks of x's rows (block), [{lead}, ceil(K/128)] = {rows + [-(-k // X_SCALE_BLOCK)]}{mx}")
    if packed:
        check_fp4_x_scale(x, x_scale, format, group, forms, grouped=True)
    elif x_scale is None:
        raise ValueError(f"x_scale: None with float8_e4m3fn x; expected x's float32 scales: {forms()}")
    else:
        _check_cuda_tensor(x_scale, "x_scale")
        check_x_scale_dtype(x_scale, format, group, k, forms, grouped=True)
    if grouped_x_scale_mode(x_scale, x) is None:
        raise ValueError(f"x_scale: shape {list(x_scale.shape)}; expected {forms()}")


def check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale=None):
    """The operands of a grouped product with 4-bit weights (grouped_int4_mm, grouped_mxfp4_mm,
    torch.ops.gemmkit.grouped_w4_mm): x [M_total, K] with `sizes` the groups' cumulative row ends
    (layout 'contiguous'), or [G, max_m, K] with each group's row count ('masked'), bfloat16 or
    float16, or float8_e4m3fn with x_scale (check_grouped_x_scale), or MXFP4 activations, x's rows
    by K/2 bytes (FP4_X, the bytes along K contiguous) with mx x_scale; the experts' weights w [G, N,
    ceil(K/2)] as bytes and their scales (and int4's zeros) as check_w4 takes one matrix's, each
    with G first: int4's [G, ceil(K/group), N], MXFP4's [G, N, ceil(K/32)]; sizes 1-D int32 or
    int64, one a group. TypeError for a dtype, ValueError for anything else, naming the
    argument."""
    _check_w4_format(format)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r}; expected 'contiguous' or 'masked'")
    _check_cuda_tensor(x, "x")
    masked = layout == "masked"
    if x.dim() != 2 + masked:
        raise ValueError(f"x: {x.dim()} dimensions; expected " + ("3, [G, max_m, K] (masked groups, counts)" if masked
                                                                  else "2, [M_total, K] (contiguous groups, offs)"))
    _check_w4_x(x)
    check_grouped_x_scale(x, x_scale, format, group)
    _check_w4_weights(x, w, scales, zeros, format, group, grouped=True)
    w_name = "qweight" if format == "int4" else "weight"
    if masked and x.size(0) != w.size(0):
        raise ValueError(f"{w_name}: shape {list(w.shape)} has G = {w.size(0)} but x {list(x.shape)} has G = "
                         f"{x.size(0)}")
    check_sizes(sizes, "counts" if masked else "offs", w.size(0), of=w_name)


def check_w4_group(format, group, k):
    """ValueError unless `group` (an int) suits 4-bit weights of `format` with K = k, as gemm()
    takes them: int4 32, a power of two from 64, or at least K (one scale a column); MXFP4 32."""
    if format == "int4":
        if group < 1 or (group < k and (group < 32 or group & (group - 1))):
            raise ValueError(f"group: {group}; expected 32, a power of two from 64, or at least K = {k} (one scale a "
                             "column)")
    elif group != MX_BLOCK:
        raise ValueError(f"group: {group} with format 'mxfp4'; expected {MX_BLOCK} (MX blocks are 32 of K)")


def group_index(group):
    """`group` as an int, or TypeError naming it."""
    try:
        return operator.index(group)
    except TypeError:
        raise TypeError(f"group: {type(group).__name__}; expected an int, the K elements a scale covers") from None


def check_quantize_w4(w, format, group, zeros, scales_dtype):
    """The arguments of a 4-bit quantisation (quantize_int4, quantize_mxfp4,
    torch.ops.gemmkit.quantize_w4): w [N, K] bfloat16, float16 or float32 (torch.nn.Linear's
    layout, any strides); `group` as check_w4 takes it for `format`; int4's scales_dtype bfloat16
    or float16, MXFP4's uint8 and no zeros. TypeError for a dtype, ValueError for anything else,
    naming the argument."""
    if format not in W4_FORMATS:
        raise ValueError(f"format: {format!r}; expected 'int4' or 'mxfp4'")
    _check_cuda_tensor(w, "w")
    if w.dim() != 2:
        raise ValueError(f"w: {w.dim()} dimensions; expected 2, [N, K] (torch.nn.Linear's weight)")
    if w.dtype not in OUT_DTYPES:
        raise TypeError(f"w: dtype {w.dtype} is not supported; expected bfloat16, float16 or float32")
    check_w4_group(format, group, w.size(1))
    if format == "int4":
        if scales_dtype not in W4_SCALE_DTYPES:
            raise TypeError(f"scales_dtype: {scales_dtype} is not supported; expected torch.bfloat16 or "
                            "torch.float16 (int4_mm takes scales of x's dtype)")
        return
    if zeros:
        raise ValueError("zeros: True with format 'mxfp4'; expected False (zero points are int4's)")
    if scales_dtype != torch.uint8:
        raise TypeError(f"scales_dtype: {scales_dtype} with format 'mxfp4'; expected torch.uint8 (e8m0 exponents)")


def refuse_autograd_of_quantized(named):
    """RuntimeError naming the first of the (name, tensor) pairs `named` that autograd would track
    in a call with an e4m3 output, which has no gradient."""
    if torch.is_grad_enabled():
        for name, t in named:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise RuntimeError(f"{name}: requires grad, but a float8_e4m3fn output (out_dtype or out=) is not "
                                   "differentiable; expected inputs that do not require grad (or torch.no_grad())")


def refuse_autograd_of_fp8(function, named):
    """RuntimeError naming the first of the (name, tensor) pairs `named` that autograd would track
    in a call of `function`, an FP8 product without a gradient (scaled_swiglu_mm,
    scaled_grouped_swiglu_mm)."""
    if torch.is_grad_enabled():
        for name, t in named:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise RuntimeError(f"{name}: requires grad, but {function} (FP8 inputs) is not differentiable; "
                                   "expected inputs that do not require grad (or torch.no_grad())")


def differentiable_epilogue(epilogue, a, b, tensors, out=None, alpha=1.0, beta=0.0, c=None, scaled=False):
    """True where autograd tracks a product alpha * a @ b + beta * c through an epilogue (some
    input requires grad), which mm_epilogue's formula then differentiates: 16-bit operands, 2-D
    or batched (mm, bmm, addmm), no out=, a text without outputs. NotImplementedError, saying
    which, where a call it tracks is none of those."""
    if not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in (a, b, c, *tensors.values())):
        return False
    uses = epilogue_uses(epilogue)
    why = ("reductions (name[n] = sum(...))" if any(reduce for _, _, _, reduce in uses)
           else "outputs (name[m, n] = ...)" if any(output for _, _, output, _ in uses)
           else "FP8 inputs (scaled_mm)" if scaled or a.element_size() == 1 or b.element_size() == 1
           else "out=" if out is not None else None)
    if why:
        raise NotImplementedError(f"epilogue: no gradient flows through a fused epilogue with {why} yet; expected "
                                  "gemmkit.mm, bmm or addmm(..., epilogue=...) with inputs it reads, or "
                                  "torch.no_grad()")
    return True


def refuse_autograd_through_epilogue(*tensors):
    """Where a call with an epilogue is not direct: NotImplementedError if autograd would track
    it (no gradient flows through an epilogue yet)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise NotImplementedError("epilogue: no gradient flows through a fused epilogue yet; expected inputs "
                                  "that do not require grad (or torch.no_grad())")


def refuse_autograd_with_out(*tensors):
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError("out: gemmkit functions with out= do not support automatic differentiation, as "
                           "torch's; call them without out= or under torch.no_grad()")


def direct(*tensors, autograd=True):
    """True where torch has nothing to record for a call on `tensors` (None entries skipped):
    not tracing, no dispatch mode, plain tensors and, with `autograd`, none that autograd tracks."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False
    grad = autograd and torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN_TYPES or (grad and t.requires_grad)):
            return False
    return True


def eager(*tensors):
    """True where torch has nothing but autograd to record for a call on `tensors` (None entries
    skipped): not tracing, no dispatch mode or functorch transform, plain tensors. Such a call runs
    through _ops' Eager* autograd Functions rather than the operators, for less host time."""
    if (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack()
            or torch._C._are_functorch_transforms_active()):
        return False
    return all(t is None or type(t) in _PLAIN_TYPES for t in tensors)


def _mode_pair(mode):
    modes = (mode, mode) if isinstance(mode, str) else tuple(mode)
    for m in modes:
        if m not in MODES or m == "none":
            raise ValueError(f"mode: {m!r}; expected 'tensor', 'rowwise', 'block' or 'mx' (or a pair of them, "
                             f"A's and B's)")
    return modes


def _gemm(a, b, dims, scale_a=None, scale_b=None, modes=("none", "none"), out=None, out_dtype=None,
          alpha=1.0, beta=0.0, c=None, epilogue=None, tensors=None, out_scales=None):
    """The product of mm, bmm, addmm and scaled_mm (which has checked the scales), through the
    fused epilogue's text where one is given, its tensors from the dict `tensors`; (out, scales)
    for an e4m3 output (out_scales: those of a given out)."""
    check(a, "a", dims)
    check(b, "b", dims)
    if c is not None:
        check(c, "c", (2, 3))
    check_output(out, out_dtype, (2, 3), out_scales)
    alpha, beta = float(alpha), float(beta)
    if quantized(out, out_dtype):
        return _gemm_quantized(a, b, scale_a, scale_b, modes, out, out_scales, alpha, beta, c, epilogue, tensors or {})
    if epilogue is not None:
        return _gemm_epilogue(a, b, scale_a, scale_b, modes, epilogue, tensors, out, out_dtype, alpha, beta, c)
    if direct(a, b, c, scale_a, scale_b, out):
        if out is None:
            out = new_output(a, b, out_dtype)
        launch_gemm(a, b, out, scale_a, scale_b, *modes, alpha, beta, c)
        return out
    if out is None:
        if eager(a, b, c, scale_a, scale_b):
            return _ops.EagerGemm.apply(a, b, scale_a, scale_b, *modes, out_dtype, alpha, beta, c)
        return torch.ops.gemmkit.gemm(a, b, scale_a, scale_b, *modes, out_dtype, alpha, beta, c)
    refuse_autograd_with_out(a, b, c, out)
    torch.ops.gemmkit.gemm_out(a, b, out, scale_a, scale_b, *modes, alpha, beta, c)
    return out


def _gemm_quantized(a, b, scale_a, scale_b, modes, out, scales, alpha, beta, c, epilogue, tensors):
    """_gemm's product, through its epilogue where one is given, into an e4m3 output quantised in
    1x128 blocks: (out, scales), made where out is None. Launched directly, else through
    gemm_quantized, or gemm_out or gemm_epilogue into out or with the epilogue's outputs."""
    text = "" if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: epilogue_dims(a, b)) if text else []
    refuse_autograd_of_quantized((("a", a), ("b", b), ("c", c), *tensors.items()))
    if direct(a, b, c, scale_a, scale_b, out, scales, *(t for _, t, _ in pairs)):
        if out is None:
            out = new_output(a, b, QUANTIZED)
            scales = new_scales(out)
        launch_gemm(a, b, out, scale_a, scale_b, *modes, alpha, beta, c, text, pairs, scale_d=scales)
        return out, scales
    names, inputs, outputs = operator_tensors(text, pairs) if text else ([], [], [])
    if out is None and not outputs:
        return torch.ops.gemmkit.gemm_quantized(a, b, scale_a, scale_b, *modes, alpha, beta, c, text, names, inputs)
    if out is None:
        out = new_output(a, b, QUANTIZED)
        scales = new_scales(out)
    if text:
        torch.ops.gemmkit.gemm_epilogue(a, b, out, scale_a, scale_b, *modes, text, names, inputs, outputs, alpha, beta,
                                        c, scales)
    else:
        torch.ops.gemmkit.gemm_out(a, b, out, scale_a, scale_b, *modes, alpha, beta, c, scales)
    return out, scales


def _gemm_epilogue(a, b, scale_a, scale_b, modes, epilogue, tensors, out, out_dtype, alpha, beta, c):
    """_gemm's product through a fused epilogue (checked by _gemm): launched directly, through
    mm_epilogue where autograd tracks it (differentiable_epilogue), else through gemm_epilogue
    where torch traces or dispatches."""
    pairs = epilogue_pairs(epilogue, tensors, lambda: epilogue_dims(a, b))
    if differentiable_epilogue(epilogue, a, b, tensors, out=out, alpha=alpha, beta=beta, c=c,
                               scaled=scale_a is not None or scale_b is not None):
        names, inputs, _ = operator_tensors(epilogue, pairs)
        return torch.ops.gemmkit.mm_epilogue(a, b, epilogue, names, inputs, output_dtype(a, out_dtype), alpha, beta,
                                             c)
    if out is None:
        out = new_output(a, b, out_dtype)
    if direct(a, b, c, scale_a, scale_b, out, *(t for _, t, _ in pairs)):
        launch_gemm(a, b, out, scale_a, scale_b, *modes, alpha, beta, c, epilogue, pairs)
        return out
    torch.ops.gemmkit.gemm_epilogue(a, b, out, scale_a, scale_b, *modes, epilogue,
                                    *operator_tensors(epilogue, pairs), alpha, beta, c)
    return out


def refuse_stray_tensors(function, epilogue, tensors):
    """Keyword arguments beyond a function's own are an epilogue's tensors: a TypeError without
    one, as Python gives for an unknown keyword."""
    if epilogue is None and tensors:
        raise TypeError(f"{function}() got unexpected keyword arguments {', '.join(tensors)}; tensors are taken "
                        "only with epilogue=")


def _grouped(a, b, sizes, layout, scale_a=None, scale_b=None, modes=("none", "none"), out=None, out_dtype=None,
             max_sms=0, out_scales=None):
    """The product of grouped_mm's and scaled_grouped_mm's [G, K, N] cases (checked by them);
    (out, scales) for an e4m3 output."""
    check_output(out, out_dtype, (a.dim(),), out_scales)
    max_sms = int(max_sms)
    if quantized(out, out_dtype):
        return _grouped_quantized(a, b, sizes, layout, None, {}, out, out_scales, max_sms, scale_a, scale_b, modes)
    if direct(a, b, sizes, scale_a, scale_b, out):
        if out is None:
            out = new_grouped_output(a, b, out_dtype)
        launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, *modes, max_sms)
        return out
    if out is None:
        if eager(a, b, sizes, scale_a, scale_b):
            return _ops.EagerGroupedMm.apply(a, b, sizes, layout, scale_a, scale_b, *modes, out_dtype, max_sms, False)
        return torch.ops.gemmkit.grouped_mm(a, b, sizes, layout, scale_a, scale_b, *modes, out_dtype, max_sms, False)
    refuse_autograd_with_out(a, b, out)
    torch.ops.gemmkit.grouped_mm_out(a, b, sizes, out, layout, scale_a, scale_b, *modes, max_sms)
    return out


def _grouped_epilogue(a, b, sizes, layout, epilogue, tensors, out, out_dtype, max_sms, scale_a=None, scale_b=None,
                      modes=("none", "none"), out_scales=None):
    """The grouped forward of grouped_mm and scaled_grouped_mm (with its scales, checked) through a
    fused epilogue: launched directly, or through the operator where torch traces or dispatches
    (no autograd: inputs that require grad are refused); (out, scales) for an e4m3 output."""
    check_output(out, out_dtype, (a.dim(),), out_scales)
    max_sms = int(max_sms)
    if quantized(out, out_dtype):
        return _grouped_quantized(a, b, sizes, layout, epilogue, tensors, out, out_scales, max_sms, scale_a, scale_b,
                                  modes)
    pairs = epilogue_pairs(epilogue, tensors, lambda: grouped_epilogue_dims(a, b))
    if out is None:
        out = new_grouped_output(a, b, out_dtype)
    if direct(a, b, sizes, scale_a, scale_b, out, *(t for _, t, _ in pairs)):
        launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, *modes, max_sms, False, epilogue, pairs)
        return out
    refuse_autograd_through_epilogue(a, b, scale_a, scale_b, *tensors.values())
    torch.ops.gemmkit.grouped_mm_epilogue(a, b, sizes, out, layout, epilogue, *operator_tensors(epilogue, pairs),
                                          max_sms, scale_a, scale_b, *modes)
    return out


def _grouped_wgrad(x, y, offs, scale_a=None, scale_b=None, modes=("none", "none"), out=None, out_dtype=None,
                   max_sms=0, out_scales=None):
    """The weight gradient of grouped_mm and scaled_grouped_mm, x [M_total, P] and y [M_total, Q]
    (checked by them); (out, scales) for an e4m3 output."""
    check_output(out, out_dtype, (3,), out_scales)
    max_sms = int(max_sms)
    if quantized(out, out_dtype):
        return _grouped_wgrad_quantized(x, y, offs, None, {}, out, out_scales, max_sms, scale_a, scale_b, modes)
    if direct(x, y, offs, scale_a, scale_b, out):
        if out is None:
            out = x.new_empty(wgrad_output_shape(x, y, offs), dtype=output_dtype(x, out_dtype))
        launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, *modes, max_sms)
        return out
    if out is None:
        if eager(x, y, offs, scale_a, scale_b):
            return _ops.EagerGroupedWgrad.apply(x, y, offs, scale_a, scale_b, *modes, out_dtype, max_sms)
        return torch.ops.gemmkit.grouped_wgrad(x, y, offs, scale_a, scale_b, *modes, out_dtype, max_sms)
    refuse_autograd_with_out(x, y, out)
    torch.ops.gemmkit.grouped_wgrad_out(x, y, offs, out, scale_a, scale_b, *modes, max_sms)
    return out


def _grouped_wgrad_epilogue(x, y, offs, epilogue, tensors, out, out_dtype, max_sms, scale_a=None, scale_b=None,
                            modes=("none", "none"), out_scales=None):
    """_grouped_wgrad through a fused epilogue whose D is out [G, P, Q]: launched directly, or
    through the operator where torch traces or dispatches (no autograd: inputs that require grad
    are refused), as _grouped_epilogue."""
    check_output(out, out_dtype, (3,), out_scales)
    max_sms = int(max_sms)
    if quantized(out, out_dtype):
        return _grouped_wgrad_quantized(x, y, offs, epilogue, tensors, out, out_scales, max_sms, scale_a, scale_b,
                                        modes)
    pairs = epilogue_pairs(epilogue, tensors, lambda: wgrad_epilogue_dims(x, y, offs))
    if out is None:
        out = x.new_empty(wgrad_output_shape(x, y, offs), dtype=output_dtype(x, out_dtype))
    if direct(x, y, offs, scale_a, scale_b, out, *(t for _, t, _ in pairs)):
        launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, *modes, max_sms, epilogue, pairs)
        return out
    refuse_autograd_through_epilogue(x, y, scale_a, scale_b, *tensors.values())
    torch.ops.gemmkit.grouped_wgrad_epilogue(x, y, offs, out, epilogue, *operator_tensors(epilogue, pairs), max_sms,
                                             scale_a, scale_b, *modes)
    return out


def _grouped_quantized(a, b, sizes, layout, epilogue, tensors, out, scales, max_sms, scale_a, scale_b, modes):
    """The grouped forward, through its epilogue where one is given, into an e4m3 output quantised
    in 1x128 blocks: (out, scales), made where out is None (the rows no group owns, and their
    scales, undefined). Launched directly, else through grouped_mm_quantized, or grouped_mm_out or
    grouped_mm_epilogue into out or with the epilogue's outputs."""
    text = "" if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: grouped_epilogue_dims(a, b)) if text else []
    refuse_autograd_of_quantized((("a", a), ("b", b), *tensors.items()))
    if direct(a, b, sizes, scale_a, scale_b, out, scales, *(t for _, t, _ in pairs)):
        if out is None:
            out = new_grouped_output(a, b, QUANTIZED)
            scales = new_scales(out)
        launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, *modes, max_sms, False, text, pairs, scales)
        return out, scales
    names, inputs, outputs = operator_tensors(text, pairs) if text else ([], [], [])
    if out is None and not outputs:
        return torch.ops.gemmkit.grouped_mm_quantized(a, b, sizes, layout, text, names, inputs, max_sms, scale_a,
                                                      scale_b, *modes)
    if out is None:
        out = new_grouped_output(a, b, QUANTIZED)
        scales = new_scales(out)
    if text:
        torch.ops.gemmkit.grouped_mm_epilogue(a, b, sizes, out, layout, text, names, inputs, outputs, max_sms, scale_a,
                                              scale_b, *modes, scales)
    else:
        torch.ops.gemmkit.grouped_mm_out(a, b, sizes, out, layout, scale_a, scale_b, *modes, max_sms, scales)
    return out, scales


def _grouped_wgrad_quantized(x, y, offs, epilogue, tensors, out, scales, max_sms, scale_a, scale_b, modes):
    """The weight gradient [G, P, Q], through its epilogue where one is given, into an e4m3 output
    quantised in 1x128 blocks (scales [G, P, ceil(Q/128)]), as _grouped_quantized: through
    grouped_wgrad_quantized, grouped_wgrad_out or grouped_wgrad_epilogue where not launched
    directly. x and y are grouped_mm's a.t() and b."""
    text = "" if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: wgrad_epilogue_dims(x, y, offs)) if text else []
    refuse_autograd_of_quantized((("a", x), ("b", y), *tensors.items()))
    if direct(x, y, offs, scale_a, scale_b, out, scales, *(t for _, t, _ in pairs)):
        if out is None:
            out = x.new_empty(wgrad_output_shape(x, y, offs), dtype=QUANTIZED)
            scales = new_scales(out)
        launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, *modes, max_sms, text, pairs, scales)
        return out, scales
    names, inputs, outputs = operator_tensors(text, pairs) if text else ([], [], [])
    if out is None and not outputs:
        return torch.ops.gemmkit.grouped_wgrad_quantized(x, y, offs, text, names, inputs, max_sms, scale_a, scale_b,
                                                         *modes)
    if out is None:
        out = x.new_empty(wgrad_output_shape(x, y, offs), dtype=QUANTIZED)
        scales = new_scales(out)
    if text:
        torch.ops.gemmkit.grouped_wgrad_epilogue(x, y, offs, out, text, names, inputs, outputs, max_sms, scale_a,
                                                 scale_b, *modes, scales)
    else:
        torch.ops.gemmkit.grouped_wgrad_out(x, y, offs, out, scale_a, scale_b, *modes, max_sms, scales)
    return out, scales


def _group_sizes(a, b, offs, counts):
    """("contiguous" or "masked", the sizes) of grouped operands, checked: offs go with a 2-D a
    (cumulative row ends), counts with a 3-D one (rows of each group); one value a group of b;
    the contracted dimensions equal."""
    layout, name, sizes = _layout_of(a, offs, counts)
    if b.dim() == 2:  # the weight gradient: a [P, M_total], b [M_total, Q], any number of groups
        check_sizes(sizes, name, None)
        if a.size(1) != b.size(0):
            raise ValueError(f"b: shape {list(b.shape)} has {b.size(0)} rows but a {list(a.shape)} has "
                             f"M_total = {a.size(1)} columns; expected a [P, M_total] and b [M_total, Q]")
        return layout, sizes
    check_sizes(sizes, name, b.size(0))
    if a.dim() == 3 and a.size(0) != b.size(0):
        raise ValueError(f"b: shape {list(b.shape)} has G = {b.size(0)} but a {list(a.shape)} has G = {a.size(0)}")
    if a.size(-1) != b.size(1):
        raise ValueError(f"b: shape {list(b.shape)} has K = {b.size(1)} but a {list(a.shape)} has K = {a.size(-1)}; "
                         f"expected b [G, K, N]")
    return layout, sizes


def _layout_of(a, offs, counts, a_name="a", note=" (gemmkit.bmm multiplies whole batches)"):
    """(layout, the sizes' name, the sizes) of grouped rows: offs (cumulative row ends) with a 2-D
    a, contiguous groups; counts (rows of each group) with a 3-D one, masked groups; a named
    `a_name` in the errors, `note` closing that of missing counts."""
    if a.dim() == 2:
        if counts is not None:
            raise ValueError(f"counts: given with a 2-D {a_name}; expected offs (counts go with a 3-D {a_name}, "
                             "masked groups)")
        if offs is None:
            raise ValueError(f"offs: None; expected the groups' cumulative row ends (int32 or int64 [G]) for a 2-D "
                             f"{a_name}")
        return "contiguous", "offs", offs
    if offs is not None:
        raise ValueError(f"offs: given with a 3-D {a_name}; expected counts (offs go with a 2-D {a_name}, contiguous "
                         "groups)")
    if counts is None:
        raise ValueError(f"counts: None; expected each group's valid rows (int32 or int64 [G]) for a 3-D {a_name}"
                         + note)
    return "masked", "counts", counts


def _check_types(a, b, fp8):
    if fp8:
        if a.dtype not in FP8_DTYPES or b.dtype not in FP8_DTYPES:
            raise TypeError(f"a, b: dtypes {a.dtype} and {b.dtype}; expected float8_e4m3fn or float8_e5m2 each "
                            f"(16-bit inputs: grouped_mm)")
    elif a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise TypeError(f"a, b: dtypes {a.dtype} and {b.dtype}; expected both bfloat16 or both float16 (FP8 inputs: "
                        f"scaled_grouped_mm)")


def _grouped_scales(a, b, scale_a, scale_b, modes):
    """Scales as torch._scaled_grouped_mm lays them out, as gemm.h's views: a rowwise scale_a of
    one dimension less than a ([G, max_m] for masked groups) gets its K column back, a rowwise
    scale_b [G, N] becomes [G, 1, N] and a tensor-wise one of G values [G, 1, 1]. Others pass as
    they are (a 1-D rowwise scale_a [M_total] is read as a column)."""
    groups = b.size(0)
    if modes[0] == "rowwise" and a.dim() == 3 and scale_a.dim() == 2:
        scale_a = scale_a.unsqueeze(-1)
    if modes[1] == "rowwise" and scale_b.dim() == 2 and scale_b.size(0) == groups:
        scale_b = scale_b.unsqueeze(-2)
    elif modes[1] == "tensor" and scale_b.dim() == 1 and scale_b.size(0) == groups:
        scale_b = scale_b.view(groups, 1, 1)
    return scale_a, scale_b


def _wgrad_scales(a, b, sizes, scale_a, scale_b, modes):
    """The weight gradient's scales as torch._scaled_grouped_mm takes them with 2-D a [P, M_total]
    and b [M_total, Q], as gemm.h's views of A = a [P, M_total] and B = b with a group dimension:
    a rowwise scale_a [G*P] (torch's, group after group) or [G, P] becomes [G, P, 1], a rowwise
    scale_b [G*Q] or [G, Q] becomes [G, 1, Q], and tensor-wise ones of G values [G, 1, 1]. Others
    pass as they are (a single scale; rowwise [P] and [Q], shared by every group)."""
    groups, p, q = sizes.size(0), a.size(0), b.size(1)
    if modes[0] == "rowwise" and scale_a.shape in ((groups * p,), (groups, p)):
        scale_a = scale_a.view(groups, p, 1)
    elif modes[0] == "tensor" and scale_a.shape == (groups,):
        scale_a = scale_a.view(groups, 1, 1)
    if modes[1] == "rowwise" and scale_b.shape in ((groups * q,), (groups, q)):
        scale_b = scale_b.view(groups, 1, q)
    elif modes[1] == "tensor" and scale_b.shape == (groups,):
        scale_b = scale_b.view(groups, 1, 1)
    return scale_a, scale_b


# --- the public functions ---------------------------------------------------------------------

def mm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None, epilogue=None, **tensors):
    """alpha * a @ b + beta * c: a M x K, b K x N, c and out M x N, bfloat16 or float16 inputs.
    out is made if None, of out_dtype (by default the inputs' type; bfloat16, float16 or
    float32); c is read only when beta != 0 and may be out itself. Differentiable in a, b and c
    (without out=).

    out_dtype=torch.float8_e4m3fn quantises the output in 1x128 blocks as it is stored and
    returns (out, scales): out e4m3 M x N, scales float32 [M, ceil(N/128)], row-major, one per
    128 columns of a row (amax / 448, by quantize()'s rule), out times its block's scale the
    result to within e4m3's rounding: the pair quantize(result, mode="block") gives, which
    scaled_mm takes as a and scale_a in mode 'block' (and scaled_grouped_mm for grouped rows).
    out= takes that pair, (out, scales), to write into. Not differentiable: inputs that require
    grad are refused (RuntimeError).

    epilogue: a fused epilogue's text (README, "Fused epilogues"), e.g. "silu(acc + bias[n])",
    computed from the product before it is stored; each tensor it names is a keyword argument:
    name[n] a vector of N (a bias), name[m] one of M (a per-row scale), name[m, n] an M x N
    tensor, name[] a single value (0-d or [1]: a scale the device computed), and outputs it writes
    (name[m, n] = ...) M x N tensors written in place; bfloat16, float16 or float32, any strides.
    Reductions write one value a column, a row or the whole: name[n] = sum(x) (a bias gradient)
    into an [N] tensor, name[m] = amax(x) (the largest |x|) into [M], name[] = sum(x) or amax(x)
    into a 0-d or [1] one (name[n] = amax, name[m] = sum too); float32 and contiguous, zeroed by
    gemmkit before the kernel adds into them (sums may differ in their last bits from run to run).
    Differentiable in a, b, c and the tensors the text reads (torch.ops.gemmkit.mm_epilogue: the
    backward recomputes the product in float32 and differentiates the text evaluated by torch),
    except for texts with outputs or reductions and with out=, which refuse inputs that require
    grad (NotImplementedError)."""
    refuse_stray_tensors("mm", epilogue, tensors)
    (a, b, c, out_t, scales_t), kind = _arrays.to_torch(torch, (a, b, c, *out_pair(out)),
                                                        ("a", "b", "c", "out", "out[1]"))
    result = _gemm(a, b, (2,), out=out_t, out_dtype=out_dtype, alpha=alpha, beta=beta, c=c, epilogue=epilogue,
                   tensors=tensors, out_scales=scales_t)
    return _arrays.to_caller(result, kind, out)


def bmm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None, epilogue=None, **tensors):
    """mm over a batch: a B x M x K, b B x K x N, out B x M x N; a or b may be 2-D, shared by
    every batch. An epilogue's tensors (see mm) may have the batch too: name[n] [B, N], name[m]
    [B, M], name[] [B], name[m, n] [B, M, N]; without it they serve every batch. So do its
    reductions: [B, N], [B, M] or [B] one a batch; [N], [M], 0-d or [1] over every batch too.
    Differentiable as mm, through an epilogue too (a shared operand's or tensor's gradient is the
    sum over the batch). out_dtype=torch.float8_e4m3fn returns (out, scales) as mm's, scales [B,
    M, ceil(N/128)]."""
    refuse_stray_tensors("bmm", epilogue, tensors)
    (a, b, c, out_t, scales_t), kind = _arrays.to_torch(torch, (a, b, c, *out_pair(out)),
                                                        ("a", "b", "c", "out", "out[1]"))
    check(a, "a", (2, 3))
    check(b, "b", (2, 3))
    if a.dim() == 2 and b.dim() == 2:
        raise ValueError("a, b: both 2-D; expected at least one batch x rows x cols (or use mm)")
    result = _gemm(a, b, (2, 3), out=out_t, out_dtype=out_dtype, alpha=alpha, beta=beta, c=c, epilogue=epilogue,
                   tensors=tensors, out_scales=scales_t)
    return _arrays.to_caller(result, kind, out)


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, out=None, epilogue=None, **tensors):
    """beta * input + alpha * mat1 @ mat2, as torch.addmm: input broadcasts to M x N (a bias
    row of N is read with a row stride of 0, not copied). With an epilogue (see mm), acc is that
    sum. Differentiable as mm, through an epilogue too. out= may be the pair (out, scales) of an
    e4m3 output, as mm's."""
    refuse_stray_tensors("addmm", epilogue, tensors)
    (input, mat1, mat2, out_t, scales_t), kind = _arrays.to_torch(torch, (input, mat1, mat2, *out_pair(out)),
                                                                  ("input", "mat1", "mat2", "out", "out[1]"))
    check(input, "input", (0, 1, 2))
    check(mat1, "mat1", (2,))
    check(mat2, "mat2", (2,))
    c = input.expand(mat1.shape[0], mat2.shape[1]) if beta != 0 else None
    result = _gemm(mat1, mat2, (2,), out=out_t, alpha=alpha, beta=beta, c=c, epilogue=epilogue, tensors=tensors,
                   out_scales=scales_t)
    return _arrays.to_caller(result, kind, out)


def linear(input, weight, bias=None):
    """torch.nn.functional.linear on gemmkit: input @ weight.T + bias, with input [..., in_features]
    (any leading dimensions, 1-D too), weight [out_features, in_features] (nn.Linear's layout,
    read as it lies), bias [out_features] or None; input and weight both bfloat16 or both float16
    (bias of their type or float32) -> [..., out_features]. The leading dimensions are flattened
    into the rows of one product: a view where they can be, a copy (as torch's linear makes) where
    they cannot. Differentiable
    in all three; the weight's gradient comes out row-major, as the weight is stored, so torch
    accumulates it without a copy."""
    (input, weight, bias), kind = _arrays.to_torch(torch, (input, weight, bias), ("input", "weight", "bias"))
    _check_cuda_tensor(input, "input")
    if input.dim() == 0:
        raise ValueError("input: 0 dimensions; expected at least 1 ([..., in_features])")
    check(input, "input", (input.dim(),))
    check(weight, "weight", (2,))
    if input.size(-1) != weight.size(1):
        raise ValueError(f"weight: shape {list(weight.shape)} has in_features = {weight.size(1)} but input "
                         f"{list(input.shape)} has {input.size(-1)}; expected weight [out_features, in_features]")
    x = input.reshape(-1, input.size(-1))
    c = None
    if bias is not None:
        check(bias, "bias", (1,))
        if bias.size(0) != weight.size(0):
            raise ValueError(f"bias: shape {list(bias.shape)}; expected [out_features] = [{weight.size(0)}]")
        c = bias.expand(x.size(0), weight.size(0))
    out = _gemm(x, weight.t(), (2,), beta=0.0 if c is None else 1.0, c=c)
    return _arrays.to_caller(out.view(*input.shape[:-1], weight.size(0)), kind)


def swiglu_mm(x, w, w_up=None, *, interleaved=False, epilogue=None, out=None, out_dtype=None, **tensors):
    """SwiGLU's up-projection in one dual GEMM: silu(x @ gate.T) * (x @ up.T), both products
    from the same tiles of x in one kernel, neither stored. x [..., K] (leading dimensions
    flattened into M rows, as linear's) of bfloat16 or float16; weights of x's type in
    torch.nn.Linear's layout, read as they lie:
    - w [I, K] the gate weight and w_up [I, K] the up weight;
    - w [2I, K] alone: the gate's rows, then the up's (torch.cat((gate, up)), as fused gate-up
      checkpoints store them);
    - w [2I, K] with interleaved=True: rows alternating gate, up, gate, up (w[0::2] the gate).
    -> [..., I], of out_dtype (x's type by default; bfloat16, float16 or float32), or written
    into out ([..., I]).

    epilogue: the text computing D from acc (x @ gate.T) and acc2 (x @ up.T), which it must read
    (README, "Fused epilogues"), e.g. "silu(acc + bg[n]) * (acc2 + bu[n])"; None is SwiGLU,
    "silu(acc) * acc2". Its tensors are keyword arguments as mm takes them: name[n] [I], name[m]
    one a row of x (x.shape[:-1], or [M]), name[m, n] and outputs [..., I] (or [M, I]).

    Differentiable in x and the weights with the default epilogue (without out=): the backward
    recomputes both products in float32 and runs the gradients' products on gemmkit, each
    gradient in its input's layout (a combined w gets one [2I, K] gradient, its rows as w's). No
    gradient flows through another epilogue.

    out_dtype=torch.float8_e4m3fn returns (out, scales) as mm does: out [..., I] quantised in
    1x128 blocks, scales float32 [..., ceil(I/128)], the next FP8 product's a and block-mode
    scale_a (the down-projection's input); out= takes that pair. Not differentiable."""
    refuse_stray_tensors("swiglu_mm", epilogue, tensors)
    (x, w, w_up, out_t, scales_t), kind = _arrays.to_torch(torch, (x, w, w_up, *out_pair(out)),
                                                           ("x", "w", "w_up", "out", "out[1]"))
    _check_swiglu_operands(x, w, w_up, interleaved)
    interleaved = bool(interleaved)
    lead = x.shape[:-1]
    x2d = x if x.dim() == 2 else x.unsqueeze(0) if x.dim() == 1 else x.flatten(0, -2)  # a view where it can be
    rows, cols = swiglu_output_shape(x2d, w, w_up)
    check_output(out_t, out_dtype, (x.dim(),), scales_t)
    quantize = quantized(out_t, out_dtype)
    blocks = scales_shape((cols,))[0]
    out2d = scales2d = None
    if out_t is not None:
        if out_t.shape != (*lead, cols):
            raise ValueError(f"out: shape {list(out_t.shape)}; expected x's leading dimensions and I, "
                             f"{[*lead, cols]}")
        out2d = out_t if out_t.dim() == 2 else _rows_view(out_t, "out", rows, cols)
        if quantize:
            scales2d = scales_t if scales_t.dim() == 2 else _rows_view(scales_t, "out[1]", rows, blocks)
    text = SWIGLU if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors if x.dim() == 2 else _rows_of(text, tensors, lead, rows, cols),
                           lambda: EpilogueDims(1, rows, cols, False, "batch"))
    if not reads_acc2(text):
        raise ValueError(f"epilogue: {text!r} does not read acc2, the up projection's product; expected a text of "
                         f"acc (x @ gate.T) and acc2 (x @ up.T), e.g. {SWIGLU!r}")
    if quantize:
        refuse_autograd_of_quantized((("x", x), ("w", w), ("w_up", w_up), *tensors.items()))
    if direct(x2d, w, w_up, out2d, scales2d, *(t for _, t, _ in pairs)):
        if out2d is None:
            out2d = new_swiglu_output(x2d, w, w_up, out_dtype)
            scales2d = new_scales(out2d) if quantize else None
        launch_swiglu(x2d, w, w_up, interleaved, out2d, text, pairs, scales2d)
    else:
        default = text == SWIGLU
        if not default:
            refuse_autograd_through_epilogue(x, w, w_up, *tensors.values())
        names, inputs, outputs = operator_tensors(text, pairs)
        if out2d is None and not outputs:
            if quantize:
                out2d, scales2d = torch.ops.gemmkit.swiglu_mm_quantized(x2d, w, w_up, interleaved, text, names, inputs)
            elif default and eager(x2d, w, w_up):
                out2d = _ops.EagerSwiglu.apply(x2d, w, w_up, interleaved, text, names, inputs, out_dtype)
            else:
                out2d = torch.ops.gemmkit.swiglu_mm(x2d, w, w_up, interleaved, text, names, inputs, out_dtype)
        else:
            if out2d is None:
                out2d = new_swiglu_output(x2d, w, w_up, out_dtype)
                scales2d = new_scales(out2d) if quantize else None
            else:
                refuse_autograd_with_out(x, w, w_up, out_t)
            torch.ops.gemmkit.swiglu_mm_out(x2d, w, w_up, out2d, interleaved, text, names, inputs, outputs, scales2d)
    if out_t is not None:
        return _arrays.to_caller(out_t, kind, out)
    if x.dim() != 2:
        out2d = out2d.view(*lead, cols)
        scales2d = None if scales2d is None else scales2d.view(*lead, blocks)
    return _arrays.to_caller((out2d, scales2d) if quantize else out2d, kind)


def _check_swiglu_operands(x, w, w_up, interleaved):
    """swiglu_mm's x [..., K], and w [I, K] with w_up [I, K], or w [2I, K] alone: CUDA tensors,
    all bfloat16 or all float16, K agreeing."""
    _check_cuda_tensor(x, "x")
    if x.dim() == 0:
        raise ValueError("x: 0 dimensions; expected at least 1 ([..., K])")
    _check_swiglu_weights(x, w, w_up, interleaved, grouped=False)


def _check_swiglu_weights(x, w, w_up, interleaved, grouped, fp8=False):
    """x's dtype, and the weights of swiglu_mm (w [I, K] with w_up [I, K], or w [2I, K] alone) or,
    `grouped`, grouped_swiglu_mm's (each expert's: [G, I, K], [G, 2I, K]): CUDA tensors of x's
    dtype, bfloat16 or float16, K agreeing with x's. `fp8` (scaled_swiglu_mm's and
    scaled_grouped_swiglu_mm's): x float8_e4m3fn or float8_e5m2, and so the weights, w_up of w's
    type."""
    if fp8:
        if x.dtype not in FP8_DTYPES:
            raise TypeError(f"x: dtype {x.dtype} is not supported; expected float8_e4m3fn or float8_e5m2 (16-bit "
                            f"inputs: {'grouped_swiglu_mm' if grouped else 'swiglu_mm'})")
    elif x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"x: dtype {x.dtype} is not supported; expected bfloat16 or float16")
    g, rank, rows = ("G, ", 3, "second") if grouped else ("", 2, "first")
    combined = w_up is None
    rows_of = "each expert's gate and up rows" if grouped else "gate and up rows"
    shape = f"[{g}2I, K] ({rows_of})" if combined else f"[{g}I, K]"
    for t, name in ((w, "w"), (w_up, "w_up")):
        if t is None:
            continue
        _check_cuda_tensor(t, name)
        if t.dim() != rank:
            raise ValueError(f"{name}: {t.dim()} dimensions; expected {rank}, {shape}")
        if fp8:
            if t.dtype not in FP8_DTYPES:
                raise TypeError(f"{name}: dtype {t.dtype} is not supported; expected float8_e4m3fn or float8_e5m2 "
                                "(the weights quantised, their scales scale_w and scale_up)")
            if name == "w_up" and t.dtype != w.dtype:
                raise TypeError(f"w_up: dtype {t.dtype} differs from w's, {w.dtype}; expected the up "
                                f"weight{'s' if grouped else ''} of the gate's type")
        elif t.dtype != x.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from x's, {x.dtype}; expected the weights of x's type "
                            "(bfloat16 or float16)")
    if not combined:
        if interleaved:
            raise ValueError(f"interleaved: True with w_up given; expected one [{g}2I, K] weight w whose rows "
                             f"alternate gate, up (or interleaved=False with w and w_up each [{g}I, K])")
        if w_up.shape != w.shape:
            raise ValueError(f"w_up: shape {list(w_up.shape)} differs from w's {list(w.shape)}; expected both "
                             f"[{g}I, K] (the gate weight{'s' if grouped else ''} w, the up weight{'s' if grouped else ''} "
                             "w_up)")
    elif w.size(-2) % 2:
        raise ValueError(f"w: shape {list(w.shape)} has an odd {rows} dimension, {w.size(-2)}; expected [{g}2I, K]: "
                         f"the gate's rows then the up's "
                         f"({'alternating' if interleaved else f'or with w_up, each [{g}I, K]'})")
    if w.size(-1) != x.size(-1):
        raise ValueError(f"w: shape {list(w.shape)} has K = {w.size(-1)} but x {list(x.shape)} has K = {x.size(-1)}; "
                         f"expected w {shape}")


_READS_ACC2 = {}  # text -> whether it reads acc2


@torch.compiler.assume_constant_result
def reads_acc2(text):
    """Whether an epilogue's text (parsed by epilogue_uses) names acc2, a dual GEMM's second
    product."""
    reads = _READS_ACC2.get(text)
    if reads is None:
        reads = _READS_ACC2[text] = re.search(r"\bacc2\b", text) is not None
    return reads


def _rows_view(t, name, *shape):
    """t [..., cols] viewed as `shape`, [rows, cols] (or t [...] as [rows]), not copied (an output
    is written through it): a ValueError naming t where its strides do not allow it."""
    try:
        return t.view(*shape)
    except (RuntimeError, ValueError):  # (fake tensors raise the latter)
        raise ValueError(f"{name}: shape {list(t.shape)} with strides {list(t.stride())} cannot be viewed as "
                         f"{list(shape)} rows; expected leading dimensions that flatten without a copy") from None


def _rows_of(text, tensors, lead, rows, cols):
    """swiglu_mm's epilogue tensors of x's leading dimensions `lead` ([..., I], or [...] for
    name[m]) with those flattened into the product's M rows (a view for outputs, which are written
    in place, a reduction's name[m] = amax(...) among them; a reshape for inputs); others as they
    are."""
    flat = dict(tensors)
    for name, index, output, _ in epilogue_uses(text):
        t = tensors.get(name)
        if not isinstance(t, torch.Tensor):
            continue
        if index == "mn" and t.shape == (*lead, cols):
            flat[name] = _rows_view(t, name, rows, cols) if output else t.reshape(rows, cols)
        elif index == "m" and t.shape == lead:
            flat[name] = _rows_view(t, name, rows) if output else t.reshape(rows)
    return flat


def scaled_mm(a, b, scale_a, scale_b, *, mode="tensor", out=None, out_dtype=None, alpha=1.0, beta=0.0,
              c=None, epilogue=None, **tensors):
    """The FP8 product (a * its scales) @ (b * its scales): a [batch,] M x K and b [batch,] K x N
    of float8_e4m3fn or float8_e5m2, scaled in `mode` (one of 'tensor', 'rowwise', 'block', 'mx',
    or a pair, A's and B's), scales laid out as gemmkit/gemm.h says ([m block][k block] for A,
    [k block][n block] for B; a single scale may be 0-d, a rowwise one 1-D). Output bfloat16
    unless out_dtype or out says float16 or float32, or float8_e4m3fn: then (out, scales) as mm
    returns them, the next FP8 product's a and block-mode scale_a. Weights stored N x K and
    quantised by quantize() pass as b = q.t(), scale_b = scales.t(). Not differentiable. With an
    epilogue (see mm), acc is the scaled product (and beta * c)."""
    refuse_stray_tensors("scaled_mm", epilogue, tensors)
    names = ("a", "b", "scale_a", "scale_b", "c", "out", "out[1]")
    (a, b, scale_a, scale_b, c, out_t, scales_t), kind = _arrays.to_torch(
        torch, (a, b, scale_a, scale_b, c, *out_pair(out)), names)
    for t, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        check(t, name, (0, 1, 2, 3))
    result = _gemm(a, b, (2, 3), scale_a, scale_b, _mode_pair(mode), out_t, out_dtype, alpha, beta, c, epilogue,
                   tensors, scales_t)
    return _arrays.to_caller(result, kind, out)


def int4_mm(x, qweight, scales, zeros=None, *, group=128, out=None, out_dtype=None, x_scale=None):
    """x @ W.T for int4 weights W [N, K] (torch.nn.Linear's layout) with a scale, and optionally a
    zero point, per `group` K elements of a row (GPTQ's and AWQ's scheme): W[n, k] = (q - zero) *
    scale, q in 0..15 the code of qweight, scale = scales[k // group, n], zero = zeros[k // group,
    n], or 8 without zeros (symmetric). With FP8 activations (W4A8) the product is (x * x_scale)
    @ W.T; with MXFP4 activations (FP4 x FP4) it is X @ W.T, X[m, k] = v * 2^(e - 127) as
    mxfp4_mm's weights are worth, v the e2m1 value of x's code and e = x_scale[m, k // 32].
    - x [..., K] bfloat16 or float16, or float8_e4m3fn with x_scale; or, with group=32 (and K >
      32), MXFP4 activations with x_scale: x [..., K/2] of uint8 (or torch.float4_e2m1fn_x2, where
      this torch has it), two e2m1 codes a byte along K, the even k in the low nibble, as mxfp4_mm's
      weights (K = 2 * x.size(-1): even K only), the bytes of a row contiguous. The leading
      dimensions are flattened into the product's rows (a view where they can be, else a copy, as
      linear's).
    - x_scale: the scales of an e4m3 x, required with it (and None for 16-bit x): float32, one
      element (a 0-d tensor: per tensor), [..., 1] or [M] (one a row, per token: rowwise), or [...,
      ceil(K/128)] (one a row per 128 of K: 1x128 blocks, as quantize(x, 1, 128) returns them); or,
      with group=32 (and K > 32), float8_e8m0fnu or uint8 exponents e [..., ceil(K/32)], each
      scale 2^(e - 127) for 32 of K of a row (mx: MXFP8 activations, as quantize(x, mode="mx")
      returns them); MXFP4 x's, required, are such exponents alone. The leading dimensions are
      x's, flattened as x's are.
    - qweight uint8 [N, ceil(K/2)], two codes a byte along K, the even k in the low nibble (K is
      x's; for an odd K the last high nibble is not read); any row stride, the bytes of a row
      contiguous.
    - scales [ceil(K/group), N] of x's dtype (e4m3 and MXFP4 x: bfloat16 or float16), any
      strides: N-contiguous, as GPTQ and AWQ store them, is read as it lies, others are copied so
      first, on every call. zeros None, or the zero points as numbers (AWQ's), of the scales' shape
      and dtype.
    - group: the K elements a scale covers, 32, a power of two from 64, or at least K (one scale a
      column).
    -> [..., N] of x's dtype (e4m3 and MXFP4 x: bfloat16), or out_dtype's (bfloat16, float16 or
    float32); out= a [..., N] tensor to write (its leading dimensions must flatten without a copy),
    returned. Each weight is dequantised and rounded once to x's type, and the products summed in
    float32, as a 16-bit product of the dequantised weights would be; in decode (up to 32 rows of
    x) with groups of 64 or more, q - zero is multiplied instead (exact for integer zero points)
    and each group's sums scaled in float32. An e4m3 x is multiplied in FP8 as gemmkit.scaled_mm
    multiplies it, with the weights' q - zero, exact in e4m3, and their scales (and x's mx
    exponents) applied to each group's float32 sums; an MXFP4 x is first widened exactly to e4m3
    (a copy in scratch, each call) and multiplied so, with its exponents. Not differentiable: a
    call on inputs that require grad runs, but its backward raises RuntimeError (out= refuses
    them). A traced call is one operator, torch.ops.gemmkit.w4_mm (w4_mm_out with out=), format
    'int4', with x_scale as its keyword argument."""
    names = ("x", "qweight", "scales", "zeros", "out", "x_scale")
    (x, qweight, scales, zeros, out_t, x_scale), kind = _arrays.to_torch(
        torch, (x, qweight, scales, zeros, out, x_scale), names)
    result = _w4(x, qweight, scales, zeros, "int4", group_index(group), out_t, out_dtype, x_scale)
    return _arrays.to_caller(result, kind, out)


def mxfp4_mm(x, weight, scales, *, out=None, out_dtype=None, x_scale=None):
    """x @ W.T for MXFP4 weights W [N, K] (torch.nn.Linear's layout; gpt-oss's experts): W[n, k] =
    v * 2^(e - 127), v the OCP MX FP4 (e2m1) value of weight's code (0, 0.5, 1, 1.5, 2, 3, 4, 6
    and their negatives) and e = scales[n, k // 32], one exponent a block of 32 along K. With FP8
    activations (W4A8) the product is (x * x_scale) @ W.T; with MXFP4 activations (FP4 x FP4) X @
    W.T, X[m, k] = v * 2^(e - 127) likewise, e = x_scale[m, k // 32].
    - x [..., K] bfloat16 or float16, or float8_e4m3fn with x_scale (as int4_mm takes them, mx
      exponents [..., ceil(K/32)] included: MXFP8 activations against MXFP4 weights); or MXFP4
      activations x [..., K/2] packed as weight is, uint8 (or torch.float4_e2m1fn_x2), K = 2 *
      x.size(-1) (even K only), with x_scale float8_e8m0fnu or uint8 exponents [..., ceil(K/32)],
      required (as quantize_mxfp4 makes both from x [M, K]). The leading dimensions are flattened
      into the product's rows (a view where they can be, else a copy, as linear's).
    - weight [N, ceil(K/2)] of uint8 (or torch.float4_e2m1fn_x2, where this torch has it), two
      values a byte along K, the even k in the low nibble (K is x's); gpt-oss's blocks [N, K/32,
      16] flattened into [N, K/2] are this. Any row stride, the bytes of a row contiguous.
    - scales [N, ceil(K/32)] of float8_e8m0fnu or uint8 (gpt-oss's layout), any strides; read as
      their transpose, which is copied N-contiguous first, on every call, unless it lies so (scales
      stored [ceil(K/32), N] and passed transposed are read as they lie).
    -> [..., N] of x's dtype (e4m3 and MXFP4 x: bfloat16), or out_dtype's (bfloat16, float16 or
    float32); out= a [..., N] tensor to write (its leading dimensions must flatten without a copy),
    returned. Each weight is rounded once to x's type after scaling (exact unless the scale takes
    it out of that type's normal range), the products summed in float32. An e4m3 x is multiplied
    in FP8, with the weights' values, exact in e4m3, and each 32 of K's float32 sums scaled by its
    exponent (and by x's, for mx x_scale); an MXFP4 x is first widened exactly to e4m3 (a copy in
    scratch, each call) and multiplied so. Not differentiable: a call on inputs that require grad
    runs, but its backward raises RuntimeError (out= refuses them). A traced call is one operator,
    torch.ops.gemmkit.w4_mm (w4_mm_out with out=), format 'mxfp4', with x_scale as its keyword
    argument."""
    names = ("x", "weight", "scales", "out", "x_scale")
    (x, weight, scales, out_t, x_scale), kind = _arrays.to_torch(torch, (x, weight, scales, out, x_scale), names)
    result = _w4(x, weight, scales, None, "mxfp4", MX_BLOCK, out_t, out_dtype, x_scale)
    return _arrays.to_caller(result, kind, out)


def check_w4_output_types(out, out_dtype):
    """A 4-bit product's out_dtype and out= (either None): bfloat16, float16 or float32, and the
    same where both are given; out a CUDA tensor."""
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise TypeError(f"out_dtype: {out_dtype} is not supported; expected bfloat16, float16 or float32")
    if out is None:
        return
    _check_cuda_tensor(out, "out")
    if out.dtype not in OUT_DTYPES:
        raise TypeError(f"out: dtype {out.dtype} is not supported; expected bfloat16, float16 or float32")
    if out_dtype is not None and out.dtype != out_dtype:
        raise ValueError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype}")


def _w4(x, w, scales, zeros, format, group, out, out_dtype, x_scale=None):
    """int4_mm's and mxfp4_mm's product, x [..., K] (MXFP4 x: [..., K/2] bytes) flattened into
    rows (and x_scale with them): launched directly, else through w4_mm, or w4_mm_out into out (viewed as [M, N])."""
    _check_cuda_tensor(x, "x")
    if x.dim() == 0:
        raise ValueError("x: 0 dimensions; expected at least 1, [..., K]")
    rows = x.unsqueeze(0) if x.dim() == 1 else x.flatten(0, -2)
    x_scale = x_scale_rows(x, x_scale)
    check_w4(rows, w, scales, zeros, format, group, x_scale)
    check_w4_output_types(out, out_dtype)
    shape = (*x.shape[:-1], w.size(0))
    flat = None
    if out is not None:
        if tuple(out.shape) != shape:
            raise ValueError(f"out: shape {list(out.shape)}; expected x's leading dimensions and N, {list(shape)}")
        flat = _rows_view(out, "out", rows.size(0), w.size(0))
    if direct(rows, w, scales, zeros, out, x_scale):
        if out is not None:
            launch_w4(rows, w, scales, zeros, format, group, flat, x_scale)
            return out
        result = new_w4_output(rows, w, out_dtype)
        launch_w4(rows, w, scales, zeros, format, group, result, x_scale)
        return result if x.dim() == 2 else result.view(shape)
    if out is None:
        result = torch.ops.gemmkit.w4_mm(rows, w, scales, zeros, format, group, out_dtype, x_scale=x_scale)
        return result if x.dim() == 2 else result.view(shape)
    refuse_autograd_with_out(rows, scales, zeros, out, x_scale)
    torch.ops.gemmkit.w4_mm_out(rows, w, scales, zeros, flat, format, group, x_scale=x_scale)
    return out


def grouped_int4_mm(x, qweight, scales, offs=None, *, counts=None, zeros=None, group=128, x_scale=None, out=None,
                    out_dtype=None, max_sms=0, epilogue=None, **tensors):
    """int4_mm for mixture-of-experts layers: each group's (expert's) rows of x times its int4
    weights W_g [N, K], all in one launch, with grouped_mm's groups:
    - x [M_total, K] with offs [G], the groups' cumulative row ends (tokens sorted by expert; group
      g is rows offs[g-1] to offs[g]) -> [M_total, N]. Rows past offs[-1] are not written:
      undefined in a new output, as grouped_mm's.
    - x [G, max_m, K] with counts [G], each group's valid rows (masked groups, decode) -> [G,
      max_m, N]; rows past each count are not written.
    offs and counts are int32 or int64 CUDA tensors that the kernel reads: nothing waits for the
    host, a CUDA graph replays with whatever they hold then, and sizes out of range are clamped.
    The experts' weights as int4_mm takes one matrix's, each with G first: qweight uint8 [G, N,
    ceil(K/2)] (the bytes of a row contiguous), scales [G, ceil(K/group), N] of x's dtype (e4m3 x:
    bfloat16 or float16), zeros None or the zero points of the scales' shape and dtype, `group`
    32, a power of two from 64, or at least K. W_g[n, k] = (q - zero) * scale, scale =
    scales[g, k // group, n] (zero 8 without zeros).
    x is bfloat16 or float16, or float8_e4m3fn with x_scale (W4A8: (x * x_scale)_g @ W_g.T), its
    float32 scales one element (per tensor), one a row of x (per token): [M_total, 1] or
    [M_total], masked [G, max_m, 1] or [G, max_m], or 1x128 blocks of x's rows: [M_total,
    ceil(K/128)], masked [G, max_m, ceil(K/128)] (as quantize(x, mode="block") returns them).
    With group=32 and K > 32 (the weights in groups of 32 of K) x_scale may be mx exponents
    instead (A8W4 in MX: MXFP8 activations), float8_e8m0fnu or uint8 [M_total, ceil(K/32)] or
    masked [G, max_m, ceil(K/32)] (quantize(x, mode="mx")), each 2^(e - 127) for 32 of K of a
    row; refused, naming x_scale, against other groups.
    With group=32 and K > 32 x may also be MXFP4 activations (FP4 x FP4), as int4_mm takes them
    over x's rows: [M_total, K/2], masked [G, max_m, K/2], of uint8 (or torch.float4_e2m1fn_x2),
    two e2m1 codes a byte along K (K = 2 * x.size(-1): even K only), the bytes of a row
    contiguous, with x_scale required, their float8_e8m0fnu or uint8 exponents [M_total,
    ceil(K/32)], masked [G, max_m, ceil(K/32)]; refused, naming group, against other groups.
    -> x's dtype (e4m3 and MXFP4 x: bfloat16), or out_dtype's (bfloat16, float16 or float32); out=
    a tensor of the output's shape to write, returned. max_sms caps the SMs the kernel runs on (0:
    all of them). Each group's product is int4_mm's (its roundings and sums; MXFP4 x widened
    exactly to e4m3 first, a copy in scratch each call). Not differentiable: a call
    on inputs that require grad runs, but its backward raises RuntimeError (out= refuses them).
    A traced call is one operator, torch.ops.gemmkit.grouped_w4_mm (grouped_w4_mm_out with out=),
    format 'int4', with x_scale as its keyword argument.

    epilogue: a fused epilogue's text, its tensors keyword arguments, as grouped_mm's forward takes
    them (name[n] [G, N] or [N], name[m] [M_total] or masked [G, max_m], name[] [G] or 0-d,
    name[m, n] and outputs as out is; reductions count only the rows each group owns); no gradient
    flows through it. A traced call is one operator, torch.ops.gemmkit.grouped_w4_mm_epilogue. Not
    yet run on a GPU."""
    refuse_stray_tensors("grouped_int4_mm", epilogue, tensors)
    names = ("x", "qweight", "scales", "offs", "counts", "zeros", "x_scale", "out")
    (x, qweight, scales, offs, counts, zeros, x_scale, out_t), kind = _arrays.to_torch(
        torch, (x, qweight, scales, offs, counts, zeros, x_scale, out), names)
    result = _grouped_w4(x, qweight, scales, zeros, offs, counts, "int4", group_index(group), out_t, out_dtype,
                         x_scale, max_sms, epilogue, tensors)
    return _arrays.to_caller(result, kind, out)


def grouped_mxfp4_mm(x, weight, scales, offs=None, *, counts=None, x_scale=None, out=None, out_dtype=None,
                     max_sms=0, epilogue=None, **tensors):
    """mxfp4_mm for mixture-of-experts layers (gpt-oss's experts): each group's rows of x times its
    MXFP4 weights W_g [N, K], all in one launch, the groups (x [M_total, K] with offs, or [G,
    max_m, K] with counts), x and x_scale (W4A8: float32 scales, or mx exponents, MXFP4's blocks
    being 32 of K; or MXFP4 activations, FP4 x FP4, x [M_total, K/2] or [G, max_m, K/2] bytes of
    e2m1 codes with their exponents, as quantize_mxfp4 makes them), the output, out=, out_dtype,
    max_sms and a fused epilogue with its tensors as grouped_int4_mm takes them. The experts' weights as mxfp4_mm takes one matrix's,
    each with G first: weight [G, N, ceil(K/2)] of uint8 (or torch.float4_e2m1fn_x2), scales [G, N,
    ceil(K/32)] of float8_e8m0fnu or uint8 (gpt-oss's [E, N, K/32]), read as their transpose;
    W_g[n, k] = v * 2^(e - 127), e = scales[g, n, k // 32]. Each group's product is mxfp4_mm's.
    Not differentiable: a call on inputs that require grad runs, but its backward raises
    RuntimeError (out= refuses them). A traced call is one operator,
    torch.ops.gemmkit.grouped_w4_mm (grouped_w4_mm_out with out=), format 'mxfp4'."""
    refuse_stray_tensors("grouped_mxfp4_mm", epilogue, tensors)
    names = ("x", "weight", "scales", "offs", "counts", "x_scale", "out")
    (x, weight, scales, offs, counts, x_scale, out_t), kind = _arrays.to_torch(
        torch, (x, weight, scales, offs, counts, x_scale, out), names)
    result = _grouped_w4(x, weight, scales, None, offs, counts, "mxfp4", MX_BLOCK, out_t, out_dtype, x_scale,
                         max_sms, epilogue, tensors)
    return _arrays.to_caller(result, kind, out)


def _grouped_w4(x, w, scales, zeros, offs, counts, format, group, out, out_dtype, x_scale, max_sms, epilogue=None,
                tensors=None):
    """grouped_int4_mm's and grouped_mxfp4_mm's product: launched directly, else through
    grouped_w4_mm, or grouped_w4_mm_out into out; through a fused epilogue (`tensors` its
    keyword tensors), launched directly or through grouped_w4_mm_epilogue (no autograd)."""
    _check_cuda_tensor(x, "x")
    if x.dim() not in (2, 3):
        raise ValueError(f"x: {x.dim()} dimensions; expected 2, [M_total, K] with offs, or 3, [G, max_m, K] with "
                         "counts")
    layout, _, sizes = _layout_of(x, offs, counts, "x", "")
    check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    check_w4_output_types(out, out_dtype)
    max_sms = int(max_sms)
    if out is not None:
        shape = grouped_w4_output_shape(x, w)
        if tuple(out.shape) != shape:
            raise ValueError(f"out: shape {list(out.shape)}; expected x's rows and N, {list(shape)}")
    if epilogue is not None:
        pairs = epilogue_pairs(epilogue, tensors, lambda: grouped_w4_epilogue_dims(x, w))
        if out is None:
            out = new_grouped_w4_output(x, w, out_dtype)
        if direct(x, w, scales, zeros, sizes, out, x_scale, *(t for _, t, _ in pairs)):
            launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale, epilogue, pairs)
            return out
        refuse_autograd_through_epilogue(x, scales, zeros, x_scale, *tensors.values())
        torch.ops.gemmkit.grouped_w4_mm_epilogue(x, w, scales, zeros, sizes, out, layout, format, group, epilogue,
                                                 *operator_tensors(epilogue, pairs), max_sms, x_scale=x_scale)
        return out
    if direct(x, w, scales, zeros, sizes, out, x_scale):
        if out is None:
            out = new_grouped_w4_output(x, w, out_dtype)
        launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale)
        return out
    if out is None:
        return torch.ops.gemmkit.grouped_w4_mm(x, w, scales, zeros, sizes, layout, format, group, out_dtype, max_sms,
                                               x_scale=x_scale)
    refuse_autograd_with_out(x, scales, zeros, out, x_scale)
    torch.ops.gemmkit.grouped_w4_mm_out(x, w, scales, zeros, sizes, out, layout, format, group, max_sms,
                                        x_scale=x_scale)
    return out


def quantize_int4(w, *, group=128, zeros=False, scales_dtype=None):
    """(qweight, scales, zeros): weights w [N, K] (torch.nn.Linear's layout; bfloat16, float16 or
    float32, any strides, on the GPU) quantised to int4 in groups of `group` K elements of a row,
    exactly the inputs int4_mm(x, qweight, scales, zeros, group=group) takes: qweight uint8 [N,
    ceil(K/2)] (two codes a byte, the even k in the low nibble; an odd K's last high nibble 0),
    scales [ceil(K/group), N] of scales_dtype (bfloat16 or float16; by default w's dtype, bfloat16
    for float32 w), and the zero points as numbers of the scales' shape and dtype, or None.
    - zeros=False: symmetric (GPTQ's sym=True), scale = 2 amax / 15, q = rne(w / scale) + 8.
    - zeros=True: AWQ's (GPTQ's sym=False), scale = max(hi - lo, 1e-5) / 15 over the group's
      min lo and max hi, zero = rne(-lo / scale), q = rne(w / scale) + zero.
    Each in float32 with every operation rounded to nearest (rne: ties to even), the scale
    rounded to scales_dtype first and q computed from it, clamped to 0..15, so that int4_mm(x,
    ...) is x @ W.T for W = (q - zero) * scale, the dequantised weights. A group holding a NaN or
    an infinity gets a NaN scale, zero point 8 and every code 8. group: 32, a power of two from
    64, or at least K (one scale a row). gemmkit::quantize_int4 (gemmkit/quantize.h, which states
    every rule) on w's device and current stream. Not differentiable: the results never require
    grad. A traced call is one operator, torch.ops.gemmkit.quantize_w4, format 'int4'."""
    (w,), kind = _arrays.to_torch(torch, (w,), ("w",))
    group = group_index(group)
    if not isinstance(zeros, bool):
        raise TypeError(f"zeros: {type(zeros).__name__}; expected True or False (whether to compute zero points)")
    if scales_dtype is None:  # w's 16-bit type, which int4_mm's x then has
        scales_dtype = w.dtype if isinstance(w, torch.Tensor) and w.dtype in W4_SCALE_DTYPES else torch.bfloat16
    return _quantize_w4(w, "int4", group, zeros, scales_dtype, kind)


def quantize_mxfp4(w):
    """(weight, scales): weights w [N, K] (torch.nn.Linear's layout; bfloat16, float16 or float32,
    any strides, on the GPU) quantised to MXFP4 (OCP MX v1.0), exactly the inputs mxfp4_mm(x,
    weight, scales) takes: weight uint8 [N, ceil(K/2)] of e2m1 codes (two a byte, the even k in the
    low nibble; an odd K's last high nibble 0), scales uint8 [N, ceil(K/32)], the e8m0 exponent e of
    each block of 32 along K (scale 2^(e - 127); gpt-oss's layout). Per block, in float32, amax =
    max |w|: the shared exponent s = floor(log2(amax)) - 2 (0 for a block of zeros), clamped to
    [-127, 127] and stored as e = s + 127, and each value w / 2^s rounded to e2m1 to nearest, ties
    to even, saturating at +-6, the sign kept (-0 is code 8). A block holding a NaN or an infinity
    gets e = 255 (NaN) and every code 0. The scales are stored [ceil(K/32), N] and returned as their transpose (strides
    (1, N)), which mxfp4_mm reads without a copy (.contiguous() gives them row-major).
    gemmkit::quantize_mxfp4 (gemmkit/quantize.h) on w's device and current stream. Not
    differentiable: the results never require grad. A traced call is one operator,
    torch.ops.gemmkit.quantize_w4, format 'mxfp4'."""
    (w,), kind = _arrays.to_torch(torch, (w,), ("w",))
    weight, scales, _ = _quantize_w4(w, "mxfp4", MX_BLOCK, False, torch.uint8, kind)
    return weight, scales


def _quantize_w4(w, format, group, zeros, scales_dtype, kind):
    """quantize_int4's and quantize_mxfp4's (qweight, scales, zeros or None): launched directly,
    else through quantize_w4; in the caller's library (`kind`)."""
    check_quantize_w4(w, format, group, zeros, scales_dtype)
    if direct(w, autograd=False):
        results = new_quantize_w4_outputs(w, format, group, zeros, scales_dtype)
        launch_quantize_w4(w, *results, format, group)
    else:
        results = torch.ops.gemmkit.quantize_w4(w, format, group, zeros, scales_dtype)
    return _arrays.to_caller(tuple(results), kind)


def scaled_swiglu_mm(x, w, scale_x, scale_w, w_up=None, scale_up=None, *, mode="tensor", interleaved=False,
                     epilogue=None, out=None, out_dtype=None, **tensors):
    """swiglu_mm for FP8 inputs, in scaled_mm's terms: silu(X @ gate.T) * (X @ up.T), X = x * its
    scales and gate and up the weights times theirs, both products from the same tiles of x in one
    dual GEMM (GemmOptions::b2 with its scales, scale_b2), neither stored. x [M, K] of
    float8_e4m3fn or float8_e5m2 (leading dimensions flattened first, scale_x's with them); the
    weights FP8 too (w_up of w's type) in torch.nn.Linear's layout, read as they lie, as swiglu_mm
    takes them:
    - w [I, K] the gate weight with its scales scale_w, and w_up [I, K] the up weight with
      scale_up;
    - w [2I, K] alone with its one scale_w: the gate's rows, then the up's;
    - w [2I, K] with interleaved=True: rows alternating gate, up (w[0::2] the gate).
    `mode` is 'tensor', 'rowwise', 'block' or 'mx', or a pair (x's and the weights'). scale_x is
    scaled_mm's scale_a for a = x (tensor: one value; rowwise [M] or [M, 1]; block [M, ceil(K/128)]
    (1x128) or [ceil(M/128), ceil(K/128)]; mx [M, ceil(K/32)]); a weight's scales are scaled_mm's
    scale_b for b = w.t(): one quantised by quantize() as q [N, K] with scales [N/.., K/..] passes
    as w = q, scale_w = scales.t() (tensor: one value; rowwise [N] or [1, N]; block
    [ceil(K/128), ceil(N/128)] (128x128) or [ceil(K/128), N] (128x1); mx [ceil(K/32), N],
    float8_e8m0fnu), N being I, or 2I for a combined w. A combined w's scales are split into the
    gate's and the up's as views: their first and last I columns (even and odd ones interleaved),
    the one scale for both in mode 'tensor', the first and last I/128 column blocks of 128x128
    blocks. Those split only where the up's rows start on a block, I a multiple of 128 and w not
    interleaved: other combined weights raise ValueError, and pass as w and w_up, each quantised
    with its own scales. Float32 scales (mx: float8_e8m0fnu), any strides.
    -> [M, I], bfloat16 unless out_dtype or out says float16 or float32, or float8_e4m3fn: then
    (out, scales) as swiglu_mm returns them, the down-projection's a and block-mode scale_a; out=
    takes that pair.

    epilogue: the text computing D from acc and acc2, the gate's and the up's scaled products,
    which it must read, as swiglu_mm's; None is SwiGLU, "silu(acc) * acc2". Its tensors are
    keyword arguments: name[n] [I], name[m] [M], name[m, n] and outputs [M, I].

    Not differentiable: inputs that require grad are refused (RuntimeError). A traced call is one
    operator, torch.ops.gemmkit.scaled_swiglu_mm (scaled_swiglu_mm_out with out= or an epilogue's
    outputs, scaled_swiglu_mm_quantized for an e4m3 output), which takes the weights and their
    scales whole."""
    refuse_stray_tensors("scaled_swiglu_mm", epilogue, tensors)
    names = ("x", "w", "scale_x", "scale_w", "w_up", "scale_up", "out", "out[1]")
    (x, w, scale_x, scale_w, w_up, scale_up, out_t, scales_t), kind = _arrays.to_torch(
        torch, (x, w, scale_x, scale_w, w_up, scale_up, *out_pair(out)), names)
    _check_cuda_tensor(x, "x")
    if x.dim() != 2:
        raise ValueError(f"x: {x.dim()} dimensions; expected 2, [M, K] (leading dimensions flattened first, and "
                         "scale_x's with them)")
    _check_swiglu_weights(x, w, w_up, interleaved, grouped=False, fp8=True)
    _check_scaled_swiglu_scales(w_up, scale_x, scale_w, scale_up)
    interleaved, modes = bool(interleaved), _mode_pair(mode)
    scale_gate, scale_upv = swiglu_scales(scale_w, scale_up, modes[1], interleaved, w.size(0))
    check_output(out_t, out_dtype, (2,), scales_t)
    shape = swiglu_output_shape(x, w, w_up)
    if out_t is not None and out_t.shape != shape:
        raise ValueError(f"out: shape {list(out_t.shape)}; expected x's rows and I, {list(shape)}")
    text = SWIGLU if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: EpilogueDims(1, *shape, False, "batch"))
    if not reads_acc2(text):
        raise ValueError(f"epilogue: {text!r} does not read acc2, the up projection's product; expected a text of "
                         f"acc (x @ gate.T) and acc2 (x @ up.T), e.g. {SWIGLU!r}")
    refuse_autograd_of_fp8("scaled_swiglu_mm", (("x", x), ("w", w), ("scale_x", scale_x), ("scale_w", scale_w),
                                                ("w_up", w_up), ("scale_up", scale_up), *tensors.items()))
    quantize = quantized(out_t, out_dtype)
    if direct(x, w, w_up, scale_x, scale_w, scale_up, out_t, scales_t, *(t for _, t, _ in pairs)):
        if out_t is None:
            out_t = new_swiglu_output(x, w, w_up, out_dtype)
            scales_t = new_scales(out_t) if quantize else None
        launch_scaled_swiglu(x, w, w_up, interleaved, out_t, scale_x, scale_gate, scale_upv, *modes, text, pairs,
                             scales_t)
        return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)
    names, inputs, outputs = operator_tensors(text, pairs)
    operands = (x, w, w_up, scale_x, scale_w, scale_up, *modes, interleaved, text, names, inputs)
    if out_t is None and not outputs:
        if quantize:
            result = torch.ops.gemmkit.scaled_swiglu_mm_quantized(*operands)
        else:
            result = torch.ops.gemmkit.scaled_swiglu_mm(*operands, out_dtype)
        return _arrays.to_caller(result, kind)
    if out_t is None:
        out_t = new_swiglu_output(x, w, w_up, out_dtype)
        scales_t = new_scales(out_t) if quantize else None
    torch.ops.gemmkit.scaled_swiglu_mm_out(x, w, w_up, scale_x, scale_w, scale_up, out_t, *modes, interleaved, text,
                                           names, inputs, outputs, scales_t)
    return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)


def _check_scaled_swiglu_scales(w_up, scale_x, scale_w, scale_up):
    """The scales of scaled_swiglu_mm and scaled_grouped_swiglu_mm: CUDA tensors of at most 3
    dimensions, scale_up given with w_up and only then (a combined w's are split from scale_w)."""
    for t, name in ((scale_x, "scale_x"), (scale_w, "scale_w"), (scale_up, "scale_up")):
        if t is not None or name != "scale_up":
            check(t, name, (0, 1, 2, 3))
    if w_up is None and scale_up is not None:
        raise ValueError("scale_up: given without w_up; expected the up weight's scales only with w_up (a combined "
                         "w's, scale_w, are split into the gate's and the up's)")
    if w_up is not None and scale_up is None:
        raise ValueError("scale_up: None with w_up given; expected the up weight's scales, laid out as scale_w is "
                         "for w")


def grouped_mm(a, b, offs=None, *, counts=None, out=None, out_dtype=None, max_sms=0, epilogue=None, **tensors):
    """One product per group (mixture-of-experts expert) in one launch, as torch._grouped_mm
    (torch.nn.functional.grouped_mm) has them, with bfloat16 or float16 inputs:
    - a [M_total, K], b [G, K, N], offs [G]: the groups' cumulative row ends in a (group g is
      rows offs[g-1] to offs[g], offs[-1] read as 0) -> out [M_total, N], each group's rows of a
      times b[g]. An MoE layer's weights w [G, N, K] pass as b = w.transpose(-2, -1), not copied.
      Rows past offs[-1] are not written: undefined in a new out, as torch's are.
    - a [P, M_total], b [M_total, Q], offs over M_total -> out [G, P, Q], out[g] = a[:, rows of
      g] @ b[rows of g]: the weight gradient (a = x.t() for x [M_total, P]). An empty group gives
      zeros.
    - a [G, max_m, K], b [G, K, N], counts [G] (gemmkit's masked groups, not torch's): out [G,
      max_m, N], out[g, :counts[g]] = a[g, :counts[g]] @ b[g]; rows past each count are not
      written.
    - a [G, M, K], b [G, K, N], neither offs nor counts: out [G, M, N], every row of every group
      (torch's 3-D x 3-D case), run as bmm (no SM budget: max_sms must be 0).
    - a [G, M, K], b [K, N_total], offs over N_total (torch's 3-D x 2-D case): out [M, N_total],
      out[:, columns of g] = a[g] @ b[:, columns of g], run as the transposed contiguous case
      (b.t()'s rows grouped, a[g].t() each group's weight) and returned as that result's
      transpose (a column-major view; an out= given is filled by a copy). Columns past offs[-1]
      are not written. Differentiable as the contiguous case is; no epilogue.
    offs and counts are int32 or int64 CUDA tensors that the kernel reads: nothing waits for the
    host, and a CUDA graph replays with whatever they hold then. Sizes out of range (ends
    decreasing or past M_total, counts past max_m) are clamped. out is made if None, of out_dtype
    (by default the inputs' type; bfloat16, float16 or float32). The kernels read operands with
    TMA: those it cannot read as they lie (a base or stride not a multiple of 16 bytes, no
    contiguous dimension) are copied first, rows padded; so is, for the weight gradient, an a
    that is not the transpose of a row-major [M_total, P] tensor or a b that is not row-major.
    max_sms caps the SMs the kernel runs on (0: all of them). Differentiable in a and b (without
    out= or an epilogue), by gemmkit's grouped kernels; gradient rows that no group owns are 0.
    The weight gradient of masked groups is one batched product over all max_m rows of each
    group, the rows past each count zeroed first.

    out_dtype=torch.float8_e4m3fn returns (out, scales) as mm does, out quantised in 1x128 blocks
    and scales float32 of out's shape with ceil(N/128) columns: [M_total, ceil(N/128)] (the
    rows no group owns undefined in new ones, as out's), [G, max_m, ceil(N/128)] masked, [G, P,
    ceil(Q/128)] for the weight gradient, [G, M, ceil(N/128)] for whole batches; the forward's
    are scaled_grouped_mm's block-mode scale_a for out as its a (the MoE down-projection's
    input). out= takes the pair (out, scales). Not differentiable; not for the 3-D x 2-D case.

    epilogue: a fused epilogue's text as mm takes it, its tensors keyword arguments in D's
    orientation. The forward's (b [G, K, N]): name[n] one a group, [G, N] (or [N] for all groups),
    such as each expert's bias; name[m] one a row of a, [M_total] ([G, max_m] masked), such as
    each token's router weight; name[] one a group, [G] (or 0-d for all); name[m, n] and outputs as
    out is. Reductions (see mm) count only the rows each group owns: name[n] = sum(x) into [G, N]
    (each expert's bias gradient) or [N] (over every group), name[m] into [M_total] ([G, max_m]
    masked; rows no group owns hold 0), name[] into [G] or 0-d. The weight gradient's (2-D a and
    b; D = out [G, P, Q], acc 0 for an empty group): name[n] [G, Q] or [Q], name[m] [G, P] or [P]
    (the rows of each group's P x Q), name[] [G] or 0-d, name[m, n] and outputs [G, P, Q] ([P, Q]
    for an input every group reads); reductions into those. No gradient flows through either."""
    refuse_stray_tensors("grouped_mm", epilogue, tensors)
    names = ("a", "b", "offs", "counts", "out", "out[1]")
    (a, b, offs, counts, out_t, scales_t), kind = _arrays.to_torch(torch, (a, b, offs, counts, *out_pair(out)),
                                                                   names)
    check(a, "a", (2, 3))
    check(b, "b", (2, 3))
    if a.dim() == 3 and b.dim() == 2:  # torch's groups along N: the transposed contiguous case
        if epilogue is not None:
            raise ValueError("epilogue: given with a 3-D a and a 2-D b (groups along N); expected the forward of "
                             "a 2-D a, or 3-D a and b")
        # (its output is the transpose of the product the kernel writes: blocks of 128 rows, not columns)
        if quantized(out_t, out_dtype) or scales_t is not None:
            raise ValueError("out_dtype: float8_e4m3fn with a 3-D a and a 2-D b (groups along N); expected an "
                             "e4m3 output only for the other cases (1x128 blocks along the rows of out)")
        if counts is not None:
            raise ValueError("counts: given with a 3-D a and a 2-D b; expected offs over b's columns")
        if offs is None:
            raise ValueError("offs: None; expected the groups' cumulative column ends in b (int32 or int64 [G]) for "
                             "a 3-D a and a 2-D b")
        if out_t is not None:
            check_output(out_t, out_dtype, (2,))
            refuse_autograd_with_out(a, b, out_t)
        result = grouped_mm(b.t(), a.transpose(-2, -1), offs, out_dtype=out_dtype, max_sms=max_sms).t()
        if out_t is not None:
            result = out_t.copy_(result)
        return _arrays.to_caller(result, kind, out)
    _check_types(a, b, fp8=False)
    if a.dim() == 3 and offs is None and counts is None:  # torch's 3-D x 3-D: whole batches
        if int(max_sms) != 0:
            raise ValueError(f"max_sms: {max_sms} for 3-D a and b without offs or counts, which run as bmm; "
                             "expected 0 (no SM budget there)")
        result = _gemm(a, b, (3,), out=out_t, out_dtype=out_dtype, epilogue=epilogue, tensors=tensors,
                       out_scales=scales_t)
        return _arrays.to_caller(result, kind, out)
    layout, sizes = _group_sizes(a, b, offs, counts)
    if epilogue is not None:
        if b.dim() == 2:
            result = _grouped_wgrad_epilogue(a.t(), b, sizes, epilogue, tensors, out_t, out_dtype, max_sms,
                                             out_scales=scales_t)
        else:
            result = _grouped_epilogue(a, b, sizes, layout, epilogue, tensors, out_t, out_dtype, max_sms,
                                       out_scales=scales_t)
        return _arrays.to_caller(result, kind, out)
    if b.dim() == 2:
        result = _grouped_wgrad(a.t(), b, sizes, out=out_t, out_dtype=out_dtype, max_sms=max_sms, out_scales=scales_t)
    else:
        result = _grouped(a, b, sizes, layout, out=out_t, out_dtype=out_dtype, max_sms=max_sms, out_scales=scales_t)
    return _arrays.to_caller(result, kind, out)


def grouped_swiglu_mm(x, w, offs=None, *, counts=None, w_up=None, interleaved=False, epilogue=None, out=None,
                      out_dtype=None, max_sms=0, **tensors):
    """The mixture-of-experts up-projection as one grouped dual GEMM: each expert's rows of x
    times its gate and up weights, silu(x_g @ gate_g.T) * (x_g @ up_g.T), both products from the
    same tiles of x in one kernel, neither stored (swiglu_mm a group). The groups' rows as
    grouped_mm takes them:
    - x [M_total, K] with offs [G], the groups' cumulative row ends (tokens sorted by expert;
      group g is rows offs[g-1] to offs[g]) -> [M_total, I]. Rows past offs[-1] are not written:
      undefined in a new output, as grouped_mm's.
    - x [G, max_m, K] with counts [G], each group's valid rows (masked groups) -> [G, max_m, I];
      rows past each count are not written.
    offs and counts are int32 or int64 CUDA tensors that the kernel reads: nothing waits for the
    host, a CUDA graph replays with whatever they hold then, and sizes out of range are clamped.
    The experts' weights, of x's type (bfloat16 or float16), as torch.nn.Linear experts store
    them, read as they lie:
    - w [G, I, K] the gate weights and w_up [G, I, K] the up weights;
    - w [G, 2I, K] alone: each expert's gate rows, then its up rows;
    - w [G, 2I, K] with interleaved=True: each expert's rows alternating gate, up (w[:, 0::2] the
      gates).
    The output is of out_dtype (x's type by default; bfloat16, float16 or float32), or written
    into out. Operands TMA cannot read as they lie (a base or row stride not a multiple of 16
    bytes: an odd K, say) are copied first, rows padded, as grouped_mm's. max_sms caps the SMs
    the kernel runs on (0: all of them).

    epilogue: the text computing each output from acc (x_g @ gate_g.T) and acc2 (x_g @ up_g.T),
    which it must read (README, "Fused epilogues"); None is SwiGLU, "silu(acc) * acc2". Its
    tensors are keyword arguments as grouped_mm's epilogue takes them: name[n] one a group, [G, I]
    (or [I] for all groups), such as each expert's biases; name[m] one a row of x, [M_total] ([G,
    max_m] masked), such as each token's router weight; name[m, n] and outputs as out is.

    Differentiable in x and the weights with the default epilogue (without out=), as swiglu_mm:
    the backward recomputes both products in float32 as grouped products over the same groups and
    runs dx and the weight gradients on gemmkit's grouped kernels (grouped_wgrad for contiguous
    groups; for masked ones one batched product over every group's max_m rows, the rows past each
    count zeroed first, as grouped_mm's), each weight's gradient in its layout (a combined w gets
    one [G, 2I, K] gradient, its rows as w's); dx is row-major, its rows that no group owns 0, and
    the output's gradient is not read there. No gradient flows through another epilogue: where
    autograd would track such a call (an input that requires grad, outside torch.no_grad()) it
    raises NotImplementedError.

    out_dtype=torch.float8_e4m3fn returns (out, scales) as grouped_mm does: scales float32 of
    out's shape with ceil(I/128) columns, [M_total, ceil(I/128)] or [G, max_m, ceil(I/128)],
    undefined in the rows no group owns, as out's. They are the MoE down-projection's input as
    scaled_grouped_mm takes it, a and block-mode scale_a, with the same offs or counts; out=
    takes the pair. Not differentiable."""
    refuse_stray_tensors("grouped_swiglu_mm", epilogue, tensors)
    (x, w, offs, counts, w_up, out_t, scales_t), kind = _arrays.to_torch(
        torch, (x, w, offs, counts, w_up, *out_pair(out)), ("x", "w", "offs", "counts", "w_up", "out", "out[1]"))
    layout, sizes = _check_grouped_swiglu_operands(x, w, w_up, offs, counts, interleaved)
    interleaved, max_sms = bool(interleaved), int(max_sms)
    check_output(out_t, out_dtype, (x.dim(),), scales_t)
    if out_t is not None and out_t.shape != grouped_swiglu_output_shape(x, w, w_up):
        raise ValueError(f"out: shape {list(out_t.shape)}; expected x's rows and I, "
                         f"{list(grouped_swiglu_output_shape(x, w, w_up))}")
    text = SWIGLU if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: grouped_swiglu_epilogue_dims(x, w, w_up))
    if not reads_acc2(text):
        raise ValueError(f"epilogue: {text!r} does not read acc2, the up projection's product; expected a text of "
                         f"acc (x_g @ gate_g.T) and acc2 (x_g @ up_g.T), e.g. {SWIGLU!r}")
    quantize = quantized(out_t, out_dtype)
    if quantize:
        refuse_autograd_of_quantized((("x", x), ("w", w), ("w_up", w_up), *tensors.items()))
    if direct(x, w, w_up, sizes, out_t, scales_t, *(t for _, t, _ in pairs)):
        if out_t is None:
            out_t = new_grouped_swiglu_output(x, w, w_up, out_dtype)
            scales_t = new_scales(out_t) if quantize else None
        launch_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out_t, max_sms, text, pairs, scales_t)
        return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)
    default = text == SWIGLU
    if not default:
        _refuse_autograd("grouped_swiglu_mm", (("x", x), ("w", w), ("w_up", w_up), ("out", out_t),
                                               *tensors.items()))
    names, inputs, outputs = operator_tensors(text, pairs)
    if out_t is None and not outputs:
        if quantize:
            result = torch.ops.gemmkit.grouped_swiglu_mm_quantized(x, w, w_up, sizes, layout, interleaved, text, names,
                                                                   inputs, max_sms)
        elif default and eager(x, w, w_up, sizes):
            result = _ops.EagerGroupedSwiglu.apply(x, w, w_up, sizes, layout, interleaved, text, names, inputs,
                                                   out_dtype, max_sms)
        else:
            result = torch.ops.gemmkit.grouped_swiglu_mm(x, w, w_up, sizes, layout, interleaved, text, names, inputs,
                                                         out_dtype, max_sms)
        return _arrays.to_caller(result, kind)
    if out_t is None:
        out_t = new_grouped_swiglu_output(x, w, w_up, out_dtype)
        scales_t = new_scales(out_t) if quantize else None
    else:
        refuse_autograd_with_out(x, w, w_up, out_t)
    torch.ops.gemmkit.grouped_swiglu_mm_out(x, w, w_up, sizes, out_t, layout, interleaved, text, names, inputs,
                                            outputs, max_sms, scales_t)
    return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)


def _check_grouped_swiglu_operands(x, w, w_up, offs, counts, interleaved, fp8=False):
    """grouped_swiglu_mm's x [M_total, K] with offs or [G, max_m, K] with counts, and the experts'
    weights w [G, I, K] with w_up [G, I, K], or w [G, 2I, K] alone: CUDA tensors, all bfloat16
    or all float16 (`fp8`: FP8, as _check_swiglu_weights says), G and K agreeing. Returns (layout,
    sizes), as _group_sizes."""
    _check_cuda_tensor(x, "x")
    if x.dim() not in (2, 3):
        raise ValueError(f"x: {x.dim()} dimensions; expected 2, [M_total, K] with offs, or 3, [G, max_m, K] with "
                         "counts")
    _check_swiglu_weights(x, w, w_up, interleaved, grouped=True, fp8=fp8)
    layout, name, sizes = _layout_of(x, offs, counts, "x", "")
    check_sizes(sizes, name, w.size(0), of="w")
    if x.dim() == 3 and x.size(0) != w.size(0):
        raise ValueError(f"w: shape {list(w.shape)} has G = {w.size(0)} but x {list(x.shape)} has G = {x.size(0)}")
    return layout, sizes


def _refuse_autograd(function, named):
    """Where a call of a function with an epilogue other than the default (SWIGLU) is not direct:
    NotImplementedError naming the first of the (name, tensor) pairs `named` that autograd would
    track (its backward is the default epilogue's alone)."""
    if torch.is_grad_enabled():
        for name, t in named:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise NotImplementedError(f"{function}: {name} requires grad, but no gradient flows through "
                                          f"{function} with an epilogue other than the default, {SWIGLU!r}, yet; "
                                          "expected inputs that do not require grad (or torch.no_grad())")


def scaled_grouped_mm(a, b, scale_a, scale_b, offs=None, *, counts=None, mode="rowwise", out=None, out_dtype=None,
                      max_sms=0, epilogue=None, **tensors):
    """grouped_mm's cases for FP8 inputs (float8_e4m3fn or float8_e5m2, either in a and b), in
    torch._scaled_grouped_mm's argument order: (a * its scales) @ (b * its scales) per group.
    `mode` is 'tensor', 'rowwise' or 'block', or a pair (A's and B's). The forward: a [M_total, K]
    with offs or [G, max_m, K] with counts, b [G, K, N], both K-major (a's K and b's K
    contiguous; copied where not). A's scales cover a's rows, B's are one set a group:
    - rowwise: scale_a [M_total] ([G, max_m] masked) and scale_b [G, N], as torch's;
    - tensor: scale_a a single value, scale_b one a group [G] (or a single one for all);
    - block: scale_a [M_total, ceil(K/128)] (1x128 blocks), scale_b [G, ceil(K/128), ceil(N/128)]
      (128x128) or [G, ceil(K/128), N] (128x1), laid out like b, as scaled_mm's are.
    Weights w [G, N, K] quantised by quantize() pass as b = q.transpose(-2, -1) and scale_b =
    scales.transpose(-2, -1). The weight gradient: a [P, M_total] and b [M_total, Q] with offs
    over M_total -> out [G, P, Q], out[g] = (a_g * its scales) @ (b_g * its scales), a_g and b_g
    the group's columns of a and rows of b (an empty group gives zeros); any strides (the
    library copies them where its kernel needs). Its scales, one set a group: rowwise scale_a
    [G*P] (as torch's, group after group) or [G, P] and scale_b [G*Q] or [G, Q]; tensor a single
    value or [G] each. 'block' is the forward's only.
    Float32 scales, any strides (gemm.h's layouts, B's with a group dimension, are taken too).
    Output bfloat16 unless out_dtype or out says float16 or float32, or float8_e4m3fn: then
    (out, scales) as grouped_mm returns them. Not differentiable.

    epilogue: a fused epilogue's text computed from acc, the scaled product, with its tensors
    keyword arguments as grouped_mm takes them (the forward's: name[n] [G, N] one a group, or [N];
    name[m] [M_total], [G, max_m] masked; name[m, n] and outputs as out is), e.g. the MoE
    down-projection's router weight, epilogue="acc * route[m]", route=weights; reductions and the
    weight gradient's tensors as grouped_mm's."""
    refuse_stray_tensors("scaled_grouped_mm", epilogue, tensors)
    names = ("a", "b", "scale_a", "scale_b", "offs", "counts", "out", "out[1]")
    (a, b, scale_a, scale_b, offs, counts, out_t, scales_t), kind = _arrays.to_torch(
        torch, (a, b, scale_a, scale_b, offs, counts, *out_pair(out)), names)
    check(a, "a", (2, 3))
    check(b, "b", (2, 3) if a.dim() == 2 else (3,))
    for t, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        check(t, name, (0, 1, 2, 3))
    _check_types(a, b, fp8=True)
    layout, sizes = _group_sizes(a, b, offs, counts)
    modes = _mode_pair(mode)
    if b.dim() == 2:
        wrong = [m for m in modes if m in ("block", "mx")]
        if wrong:
            raise ValueError(f"mode: {wrong[0]!r}; expected 'tensor' or 'rowwise' for the weight gradient "
                             "(2-D a and b)")
        scale_a, scale_b = _wgrad_scales(a, b, sizes, scale_a, scale_b, modes)
        if epilogue is not None:
            result = _grouped_wgrad_epilogue(a.t(), b, sizes, epilogue, tensors, out_t, out_dtype, max_sms, scale_a,
                                             scale_b, modes, scales_t)
        else:
            result = _grouped_wgrad(a.t(), b, sizes, scale_a, scale_b, modes, out_t, out_dtype, max_sms, scales_t)
    else:
        if "mx" in modes:
            raise ValueError("mode: 'mx'; expected 'tensor', 'rowwise' or 'block' (grouped products take no MXFP8 "
                             "scales)")
        scale_a, scale_b = _grouped_scales(a, b, scale_a, scale_b, modes)
        if epilogue is not None:
            result = _grouped_epilogue(a, b, sizes, layout, epilogue, tensors, out_t, out_dtype, max_sms, scale_a,
                                       scale_b, modes, scales_t)
        else:
            result = _grouped(a, b, sizes, layout, scale_a, scale_b, modes, out_t, out_dtype, max_sms, scales_t)
    return _arrays.to_caller(result, kind, out)


def scaled_grouped_swiglu_mm(x, w, scale_x, scale_w, offs=None, *, counts=None, w_up=None, scale_up=None,
                             mode="rowwise", interleaved=False, epilogue=None, out=None, out_dtype=None, max_sms=0,
                             **tensors):
    """grouped_swiglu_mm for FP8 inputs (the MoE up-projection as one grouped dual GEMM), with
    scaled_grouped_mm's scales: each expert's rows of x times its gate and up weights,
    silu(X_g @ gate_g.T) * (X_g @ up_g.T), X = x * its scales and the weights times theirs. The
    groups' rows as grouped_swiglu_mm takes them: x [M_total, K] with offs [G] -> [M_total, I]
    (rows past offs[-1] not written), or x [G, max_m, K] with counts [G] -> [G, max_m, I] (rows
    past each count not written); x float8_e4m3fn or float8_e5m2. The experts' weights FP8 too
    (w_up of w's type), read as they lie: w [G, I, K] with scale_w and w_up [G, I, K] with
    scale_up; w [G, 2I, K] alone with its one scale_w, each expert's gate rows then its up rows, or
    (interleaved=True) alternating.
    `mode` is 'tensor', 'rowwise' or 'block', or a pair (x's and the weights'). scale_x is
    scaled_grouped_mm's scale_a (rowwise [M_total], [G, max_m] masked; tensor one value; block
    [M_total, ceil(K/128)] (1x128), [G, max_m, ceil(K/128)] masked); the weights' are its scale_b
    for b = w.transpose(-2, -1), one set a group: rowwise [G, N]; tensor [G] (or one for all);
    block [G, ceil(K/128), ceil(N/128)] (128x128) or [G, ceil(K/128), N] (128x1), N being I, or 2I
    for a combined w. Experts quantised by quantize() as q [G, N, K] with scales pass as w = q,
    scale_w = scales.transpose(-2, -1). A combined w's scales are split into the gate's and the
    up's as scaled_swiglu_mm's are (views of their halves, or even and odd columns; the one scale
    for both in mode 'tensor'), 128x128 blocks only where I is a multiple of 128 and w is not
    interleaved: ValueError otherwise (pass w and w_up, each with its own scales). Float32 scales,
    any strides. Output bfloat16 unless out_dtype or out says float16 or float32, or
    float8_e4m3fn: then (out, scales) as grouped_swiglu_mm returns them, the MoE
    down-projection's input as scaled_grouped_mm takes it; out= takes the pair. max_sms caps the
    SMs the kernel runs on (0: all of them).

    epilogue: the text computing each output from acc and acc2, the scaled products, which it
    must read, as grouped_swiglu_mm's; its tensors keyword arguments as grouped_swiglu_mm's
    (name[n] [G, I] or [I], name[m] [M_total] or [G, max_m], name[m, n] and outputs as out is).

    Not differentiable: inputs that require grad are refused (RuntimeError). A traced call is one
    operator, torch.ops.gemmkit.scaled_grouped_swiglu_mm (scaled_grouped_swiglu_mm_out with out=
    or an epilogue's outputs, scaled_grouped_swiglu_mm_quantized for an e4m3 output)."""
    refuse_stray_tensors("scaled_grouped_swiglu_mm", epilogue, tensors)
    names = ("x", "w", "scale_x", "scale_w", "offs", "counts", "w_up", "scale_up", "out", "out[1]")
    (x, w, scale_x, scale_w, offs, counts, w_up, scale_up, out_t, scales_t), kind = _arrays.to_torch(
        torch, (x, w, scale_x, scale_w, offs, counts, w_up, scale_up, *out_pair(out)), names)
    layout, sizes = _check_grouped_swiglu_operands(x, w, w_up, offs, counts, interleaved, fp8=True)
    _check_scaled_swiglu_scales(w_up, scale_x, scale_w, scale_up)
    interleaved, max_sms, modes = bool(interleaved), int(max_sms), _mode_pair(mode)
    if "mx" in modes:
        raise ValueError("mode: 'mx'; expected 'tensor', 'rowwise' or 'block' (grouped products take no MXFP8 "
                         "scales)")
    scale_x, scale_w, scale_up = _grouped_swiglu_scales(x, w, scale_x, scale_w, scale_up, modes)
    scale_gate, scale_upv = swiglu_scales(scale_w, scale_up, modes[1], interleaved, w.size(1), grouped=True)
    check_output(out_t, out_dtype, (x.dim(),), scales_t)
    shape = grouped_swiglu_output_shape(x, w, w_up)
    if out_t is not None and out_t.shape != shape:
        raise ValueError(f"out: shape {list(out_t.shape)}; expected x's rows and I, {list(shape)}")
    text = SWIGLU if epilogue is None else epilogue
    pairs = epilogue_pairs(text, tensors, lambda: grouped_swiglu_epilogue_dims(x, w, w_up))
    if not reads_acc2(text):
        raise ValueError(f"epilogue: {text!r} does not read acc2, the up projection's product; expected a text of "
                         f"acc (x_g @ gate_g.T) and acc2 (x_g @ up_g.T), e.g. {SWIGLU!r}")
    refuse_autograd_of_fp8("scaled_grouped_swiglu_mm", (("x", x), ("w", w), ("scale_x", scale_x),
                                                        ("scale_w", scale_w), ("w_up", w_up), ("scale_up", scale_up),
                                                        *tensors.items()))
    quantize = quantized(out_t, out_dtype)
    if direct(x, w, w_up, scale_x, scale_w, scale_up, sizes, out_t, scales_t, *(t for _, t, _ in pairs)):
        if out_t is None:
            out_t = new_grouped_swiglu_output(x, w, w_up, out_dtype)
            scales_t = new_scales(out_t) if quantize else None
        launch_scaled_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out_t, scale_x, scale_gate, scale_upv,
                                     *modes, max_sms, text, pairs, scales_t)
        return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)
    names, inputs, outputs = operator_tensors(text, pairs)
    operands = (x, w, w_up, scale_x, scale_w, scale_up, sizes, layout, *modes, interleaved, text, names, inputs)
    if out_t is None and not outputs:
        if quantize:
            result = torch.ops.gemmkit.scaled_grouped_swiglu_mm_quantized(*operands, max_sms)
        else:
            result = torch.ops.gemmkit.scaled_grouped_swiglu_mm(*operands, out_dtype, max_sms)
        return _arrays.to_caller(result, kind)
    if out_t is None:
        out_t = new_grouped_swiglu_output(x, w, w_up, out_dtype)
        scales_t = new_scales(out_t) if quantize else None
    torch.ops.gemmkit.scaled_grouped_swiglu_mm_out(x, w, w_up, scale_x, scale_w, scale_up, sizes, out_t, layout,
                                                   *modes, interleaved, text, names, inputs, outputs, max_sms,
                                                   scales_t)
    return _arrays.to_caller((out_t, scales_t) if quantize else out_t, kind, out)


def _grouped_swiglu_scales(x, w, scale_x, scale_w, scale_up, modes):
    """scaled_grouped_swiglu_mm's scales as scaled_grouped_mm lays them out, as gemm.h's views
    (_grouped_scales): a rowwise scale_x [G, max_m] of masked groups gets its K column back, the
    weights' rowwise [G, N] become [G, 1, N] and tensor-wise [G] [G, 1, 1]. Others pass as they
    are."""
    groups = w.size(0)

    def of_b(s):
        if s is not None and modes[1] == "rowwise" and s.dim() == 2 and s.size(0) == groups:
            return s.unsqueeze(-2)
        if s is not None and modes[1] == "tensor" and s.dim() == 1 and s.size(0) == groups:
            return s.view(groups, 1, 1)
        return s

    if modes[0] == "rowwise" and x.dim() == 3 and scale_x.dim() == 2:
        scale_x = scale_x.unsqueeze(-1)
    return scale_x, of_b(scale_w), of_b(scale_up)


_BLOCKS = {"tensor": None, "rowwise": None, "block": (1, 128), "mx": (1, 32)}


def quantize(x, dtype=None, mode="tensor", *, block=None, power_of_two=False):
    """(q, scales) with q * scales ~ x: x [batch,] rows x K (bfloat16, float16 or float32, K the
    contraction dimension, as activations M x K and weights N x K are stored), q of `dtype`
    (float8_e4m3fn by default, or float8_e5m2) in x's shape, one scale per block. The blocks of
    `mode`: 'tensor' the whole matrix, 'rowwise' a row (1 x K), 'block' 1 x 128 (pass
    block=(128, 128) for DeepSeek-V3's weights), 'mx' 1 x 32 with float8_e8m0fnu scales; `block`
    = (rows, cols) overrides. float32 scales are rounded up to powers of two with power_of_two.
    Those of blocks one row high come row-minor (strides (1, ld), ld the rows rounded up to 4, as
    torch's _scaled_mm takes 1x128 scales), which scaled_mm reads without a copy.
    The results go straight to scaled_mm: a = q, scale_a = scales, or for weights b = q.t(),
    scale_b = scales.t()."""
    (x,), kind = _arrays.to_torch(torch, (x,), ("x",))
    check(x, "x", (2, 3))
    if mode not in _BLOCKS:
        raise ValueError(f"mode: {mode!r}; expected 'tensor', 'rowwise', 'block' or 'mx'")
    if block is None:
        rows, cols = x.shape[-2:]
        block = _BLOCKS[mode] or ((max(rows, 1), max(cols, 1)) if mode == "tensor" else (1, max(cols, 1)))
    if len(block) != 2 or min(block) < 1:
        raise ValueError(f"block: {tuple(block)}; expected two sizes of at least 1, (rows, cols)")
    block_rows, block_cols = int(block[0]), int(block[1])
    dtype = torch.float8_e4m3fn if dtype is None else dtype
    scale_dtype = torch.float8_e8m0fnu if mode == "mx" else torch.float32
    if direct(x, autograd=False):
        q = x.new_empty(x.shape, dtype=dtype)
        scales = new_quantize_scales(x, block_rows, block_cols, scale_dtype)
        launch_quantize(x, q, scales, block_rows, block_cols, bool(power_of_two))
    else:
        q, scales = torch.ops.gemmkit.quantize(x, dtype, block_rows, block_cols, scale_dtype, bool(power_of_two))
    return _arrays.to_caller(q, kind), _arrays.to_caller(scales, kind)


from . import _ops  # noqa: E402,F401  (registers the operators, whose kernels are the launches above)
from ._checkpoints import int4_from_awq, int4_from_gptq, mxfp4_from_gpt_oss  # noqa: E402,F401  (gemmkit.*_from_*)
