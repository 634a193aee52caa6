"""torch.ops.gemmkit: gemmkit as torch custom operators, so that torch.compile traces it (the fake
implementations give output shapes without running anything), CUDA graphs capture it and
autograd differentiates it. Their CUDA kernels are _torch's launches. Imported by _torch, whose
functions (gemmkit.mm and the others) call these operators only where torch has something to
record."""

import torch

from . import _torch as t

_lib = torch.library.Library("gemmkit", "DEF")  # noqa: TOR901  (kept for the process's life)
_lib.define("gemm(Tensor a, Tensor b, Tensor? scale_a, Tensor? scale_b, str mode_a, str mode_b, "
            "ScalarType? out_dtype, float alpha, float beta, Tensor? c) -> Tensor")
_lib.define("gemm_out(Tensor a, Tensor b, Tensor(a!) out, Tensor? scale_a, Tensor? scale_b, str mode_a, "
            "str mode_b, float alpha, float beta, Tensor? c) -> ()")
_lib.define("quantize(Tensor x, ScalarType dtype, int block_rows, int block_cols, ScalarType scale_dtype, "
            "bool power_of_two) -> (Tensor, Tensor)")


def _gemm(a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c):
    out = t.new_output(a, b, out_dtype)
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c)
    return out


def _gemm_out(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c):
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c)


def _quantize(x, dtype, block_rows, block_cols, scale_dtype, power_of_two):
    q_shape, s_shape = t.quantized_shapes(x, block_rows, block_cols)
    q, scales = x.new_empty(q_shape, dtype=dtype), x.new_empty(s_shape, dtype=scale_dtype)
    t.launch_quantize(x, q, scales, block_rows, block_cols, power_of_two)
    return q, scales


_lib.impl("gemm", _gemm, "CUDA")
_lib.impl("gemm_out", _gemm_out, "CUDA")
_lib.impl("quantize", _quantize, "CUDA")


@torch.library.register_fake("gemmkit::gemm")
def _gemm_fake(a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c):
    return a.new_empty(t.output_shape(a, b), dtype=t.output_dtype(a, out_dtype))


@torch.library.register_fake("gemmkit::gemm_out")
def _gemm_out_fake(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c):
    return None


@torch.library.register_fake("gemmkit::quantize")
def _quantize_fake(x, dtype, block_rows, block_cols, scale_dtype, power_of_two):
    q_shape, s_shape = t.quantized_shapes(x, block_rows, block_cols)
    return x.new_empty(q_shape, dtype=dtype), x.new_empty(s_shape, dtype=scale_dtype)


# --- autograd ----------------------------------------------------------------------------------
# D = alpha * A B + beta * C gives dA = alpha * dD B^T, dB = alpha * A^T dD and dC = beta * dD,
# each computed by gemmkit (so a compiled backward runs gemmkit too). dD is taken in the inputs'
# type first, as torch's bfloat16 and float16 gradients are, since gemmkit multiplies 16-bit
# inputs. A 2-D operand shared by a batch gets the sum over the batch, as one product over the
# batch's rows.

def _setup_context(ctx, inputs, output):
    a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c = inputs
    ctx.fp8 = scale_a is not None or scale_b is not None or a.dtype not in (torch.bfloat16, torch.float16)
    ctx.alpha, ctx.beta = alpha, beta
    ctx.c_dtype = None if c is None else c.dtype
    ctx.c_shared = c is not None and c.dim() == 2 and output.dim() == 3
    ctx.save_for_backward(a, b)


def _product(x, y, out_dtype, alpha):
    return torch.ops.gemmkit.gemm(x, y, None, None, "none", "none", out_dtype, alpha, 0.0, None)


def _grad_of_shared(grad, other, shared_is_a):
    """Sum over the batch of dD_i B_i^T (shared A) or A_i^T dD_i (shared B), as one product whose
    contraction runs over every batch entry's rows (N of them for A, M for B)."""
    batch, m, n = grad.shape
    if shared_is_a:  # [M, batch*N] x [batch*N, K]
        return grad.permute(1, 0, 2).reshape(m, batch * n), other.transpose(1, 2).reshape(batch * n, -1)
    return other.reshape(batch * m, -1).t(), grad.reshape(batch * m, n)  # [K, batch*M] x [batch*M, N]


def _backward(ctx, grad):
    if ctx.fp8 and any(ctx.needs_input_grad):
        raise RuntimeError("gemmkit: FP8 products (scaled_mm) are not differentiable")
    a, b = ctx.saved_tensors
    grad_a = grad_b = grad_c = None
    g = grad.to(a.dtype)
    if ctx.needs_input_grad[0]:
        if a.dim() == 2 and g.dim() == 3:
            grad_a = _product(*_grad_of_shared(g, b, True), a.dtype, ctx.alpha)
        else:
            grad_a = _product(g, b.transpose(-1, -2), a.dtype, ctx.alpha)
    if ctx.needs_input_grad[1]:
        if b.dim() == 2 and g.dim() == 3:
            grad_b = _product(*_grad_of_shared(g, a, False), b.dtype, ctx.alpha)
        else:
            grad_b = _product(a.transpose(-1, -2), g, b.dtype, ctx.alpha)
    if ctx.needs_input_grad[9] and ctx.beta != 0:
        grad_c = (grad.sum(0) if ctx.c_shared else grad) * ctx.beta
        grad_c = grad_c.to(ctx.c_dtype)
    return grad_a, grad_b, None, None, None, None, None, None, None, grad_c


torch.library.register_autograd("gemmkit::gemm", _backward, setup_context=_setup_context)
