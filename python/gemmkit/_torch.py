"""torch tensors in, gemmkit's C++ library underneath. Each tensor becomes a TensorView of its
data pointer, dtype, sizes and strides, so any strided view runs as it is, on the tensors'
device and that device's current stream.

A call reaches the launch (`launch_gemm`, `launch_quantize`) by one of two roads. Where torch has
something to record (torch.compile tracing, fake or other subclass tensors, a dispatch mode,
inputs that autograd tracks) it goes through the custom operators torch.ops.gemmkit.* (`_ops`),
whose CUDA kernels are these same launches. Otherwise it launches directly: torch's dispatcher
would only add host time. Arrays of other libraries come in through DLPack (`_arrays`).

Importing this module imports torch and registers the operators; gemmkit imports it on the first
use of one of its functions (or at once where torch is already loaded), not before.
"""

import torch

from . import _arrays
from . import _gemmkit as _C

DTYPES = {torch.bfloat16: _C.DType.bf16, torch.float16: _C.DType.f16, torch.float32: _C.DType.f32,
          torch.float8_e4m3fn: _C.DType.e4m3, torch.float8_e5m2: _C.DType.e5m2,
          torch.float8_e8m0fnu: _C.DType.ue8m0}
for _framework_dtype, _dtype in DTYPES.items():
    _C.register_dtype(_framework_dtype, _dtype)
MODES = {mode.name: mode for mode in (_C.ScaleMode.none, _C.ScaleMode.tensor, _C.ScaleMode.rowwise,
                                      _C.ScaleMode.block, _C.ScaleMode.mx)}
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


def launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c):
    """out = alpha * a @ b + beta * c on out's device and current stream (scales for FP8). The
    views are read in C++ (python/src/tensor_views.h); a single scale may have any shape, a 1-D
    one is a column of A's or a row of B's."""
    _C.gemm_tensors(a, b, out, alpha, beta, c, torch._C._cuda_getCurrentRawStream(out.get_device()),
                    MODES[mode_a], scale_a, MODES[mode_b], scale_b)


def launch_quantize(x, q, scales, block_rows, block_cols, power_of_two):
    _C.quantize_tensors(x, q, scales, block_rows, block_cols, power_of_two,
                        torch._C._cuda_getCurrentRawStream(x.get_device()))


def quantized_shapes(x, block_rows, block_cols):
    """The shapes of quantize's q and scales for x."""
    *batch, rows, cols = x.shape
    return x.shape, (*batch, -(-rows // block_rows), -(-cols // block_cols))


# --- checks that also hold while torch.compile traces -----------------------------------------

def check(tensor, name, dims):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor or an array with __dlpack__, got "
                        f"{type(tensor).__name__}")
    if not tensor.is_cuda:
        raise ValueError(f"{name}: on {tensor.device}; expected a CUDA tensor")
    if tensor.dim() not in dims:
        raise ValueError(f"{name}: {tensor.dim()} dimensions; expected " + " or ".join(map(str, dims)))
    if tensor.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not supported; expected bfloat16, float16, "
                        f"float8_e4m3fn or float8_e5m2 (float32 for outputs, c and scales)")


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


def _mode_pair(mode):
    modes = (mode, mode) if isinstance(mode, str) else tuple(mode)
    for m in modes:
        if m not in MODES or m == "none":
            raise ValueError(f"mode: {m!r}; expected 'tensor', 'rowwise', 'block' or 'mx' (or a pair of them, "
                             f"A's and B's)")
    return modes


def _gemm(a, b, dims, scale_a=None, scale_b=None, modes=("none", "none"), out=None, out_dtype=None,
          alpha=1.0, beta=0.0, c=None):
    """The product of mm, bmm, addmm and scaled_mm (which has checked the scales)."""
    check(a, "a", dims)
    check(b, "b", dims)
    if c is not None:
        check(c, "c", (2, 3))
    if out is not None:
        check(out, "out", (2, 3))
        if out_dtype is not None and out.dtype != out_dtype:
            raise ValueError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype}")
    alpha, beta = float(alpha), float(beta)
    if direct(a, b, c, scale_a, scale_b, out):
        if out is None:
            out = new_output(a, b, out_dtype)
        launch_gemm(a, b, out, scale_a, scale_b, *modes, alpha, beta, c)
        return out
    if out is None:
        return torch.ops.gemmkit.gemm(a, b, scale_a, scale_b, *modes, out_dtype, alpha, beta, c)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (a, b, c, out)):
        raise RuntimeError("out: gemmkit functions with out= do not support automatic differentiation, as "
                           "torch's; call them without out= or under torch.no_grad()")
    torch.ops.gemmkit.gemm_out(a, b, out, scale_a, scale_b, *modes, alpha, beta, c)
    return out


# --- the public functions ---------------------------------------------------------------------

def mm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None):
    """alpha * a @ b + beta * c: a M x K, b K x N, c and out M x N, bfloat16 or float16 inputs.
    out is made if None, of out_dtype (by default the inputs' type; bfloat16, float16 or
    float32); c is read only when beta != 0 and may be out itself. Differentiable in a, b and c
    (without out=)."""
    (a, b, c, out_t), kind = _arrays.to_torch(torch, (a, b, c, out), ("a", "b", "c", "out"))
    result = _gemm(a, b, (2,), out=out_t, out_dtype=out_dtype, alpha=alpha, beta=beta, c=c)
    return _arrays.to_caller(result, kind, out)


def bmm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None):
    """mm over a batch: a B x M x K, b B x K x N, out B x M x N; a or b may be 2-D, shared by
    every batch."""
    (a, b, c, out_t), kind = _arrays.to_torch(torch, (a, b, c, out), ("a", "b", "c", "out"))
    check(a, "a", (2, 3))
    check(b, "b", (2, 3))
    if a.dim() == 2 and b.dim() == 2:
        raise ValueError("a, b: both 2-D; expected at least one batch x rows x cols (or use mm)")
    result = _gemm(a, b, (2, 3), out=out_t, out_dtype=out_dtype, alpha=alpha, beta=beta, c=c)
    return _arrays.to_caller(result, kind, out)


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, out=None):
    """beta * input + alpha * mat1 @ mat2, as torch.addmm: input broadcasts to M x N (a bias
    row of N is read with a row stride of 0, not copied)."""
    (input, mat1, mat2, out_t), kind = _arrays.to_torch(torch, (input, mat1, mat2, out),
                                                        ("input", "mat1", "mat2", "out"))
    check(input, "input", (0, 1, 2))
    check(mat1, "mat1", (2,))
    check(mat2, "mat2", (2,))
    c = input.expand(mat1.shape[0], mat2.shape[1]) if beta != 0 else None
    return _arrays.to_caller(_gemm(mat1, mat2, (2,), out=out_t, alpha=alpha, beta=beta, c=c), kind, out)


def scaled_mm(a, b, scale_a, scale_b, *, mode="tensor", out=None, out_dtype=None, alpha=1.0, beta=0.0,
              c=None):
    """The FP8 product (a * its scales) @ (b * its scales): a [batch,] M x K and b [batch,] K x N
    of float8_e4m3fn or float8_e5m2, scaled in `mode` (one of 'tensor', 'rowwise', 'block', 'mx',
    or a pair, A's and B's), scales laid out as gemmkit/gemm.h says ([m block][k block] for A,
    [k block][n block] for B; a single scale may be 0-d, a rowwise one 1-D). Output bfloat16
    unless out_dtype or out says float16 or float32. Weights stored N x K and quantised by
    quantize() pass as b = q.t(), scale_b = scales.t(). Not differentiable."""
    names = ("a", "b", "scale_a", "scale_b", "c", "out")
    (a, b, scale_a, scale_b, c, out_t), kind = _arrays.to_torch(torch, (a, b, scale_a, scale_b, c, out), names)
    for t, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        check(t, name, (0, 1, 2, 3))
    result = _gemm(a, b, (2, 3), scale_a, scale_b, _mode_pair(mode), out_t, out_dtype, alpha, beta, c)
    return _arrays.to_caller(result, kind, out)


_BLOCKS = {"tensor": None, "rowwise": None, "block": (1, 128), "mx": (1, 32)}


def quantize(x, dtype=None, mode="tensor", *, block=None, power_of_two=False):
    """(q, scales) with q * scales ~ x: x [batch,] rows x K (bfloat16, float16 or float32, K the
    contraction dimension, as activations M x K and weights N x K are stored), q of `dtype`
    (float8_e4m3fn by default, or float8_e5m2) in x's shape, one scale per block. The blocks of
    `mode`: 'tensor' the whole matrix, 'rowwise' a row (1 x K), 'block' 1 x 128 (pass
    block=(128, 128) for DeepSeek-V3's weights), 'mx' 1 x 32 with float8_e8m0fnu scales; `block`
    = (rows, cols) overrides. float32 scales are rounded up to powers of two with power_of_two.
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
        q_shape, s_shape = quantized_shapes(x, block_rows, block_cols)
        q, scales = x.new_empty(q_shape, dtype=dtype), x.new_empty(s_shape, dtype=scale_dtype)
        launch_quantize(x, q, scales, block_rows, block_cols, bool(power_of_two))
    else:
        q, scales = torch.ops.gemmkit.quantize(x, dtype, block_rows, block_cols, scale_dtype, bool(power_of_two))
    return _arrays.to_caller(q, kind), _arrays.to_caller(scales, kind)


from . import _ops  # noqa: E402,F401  (registers the operators, whose kernels are the launches above)
