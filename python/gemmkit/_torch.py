"""torch tensors in, gemmkit's C++ gemm underneath: each tensor becomes a TensorView of its
data pointer, dtype, sizes and strides, so any strided view runs as it is."""

from ._gemmkit import DType, TensorView, gemm

_DTYPES = None


def _dtype(tensor, name):
    global _DTYPES
    if _DTYPES is None:
        import torch

        _DTYPES = {torch.bfloat16: DType.bf16, torch.float16: DType.f16, torch.float32: DType.f32,
                   torch.float8_e4m3fn: DType.e4m3, torch.float8_e5m2: DType.e5m2}
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name}: dtype {tensor.dtype} is not supported; expected bfloat16, float16, "
                        f"float8_e4m3fn or float8_e5m2 (float32 for outputs and c)")
    return _DTYPES[tensor.dtype]


def _view(tensor, name, dims=(2, 3)):
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_cuda:
        raise ValueError(f"{name}: on {tensor.device}; expected a CUDA tensor")
    if tensor.dim() not in dims:
        raise ValueError(f"{name}: {tensor.dim()} dimensions; expected " +
                         " or ".join(f"{d}" for d in dims))
    dtype = _dtype(tensor, name)
    if tensor.dim() == 2:
        return TensorView.matrix(tensor.data_ptr(), dtype, *tensor.shape, *tensor.stride())
    return TensorView.batched(tensor.data_ptr(), dtype, *tensor.shape, *tensor.stride())


def _output(a, shape, out, out_dtype):
    import torch

    if out is not None:
        if out_dtype is not None and out.dtype != out_dtype:
            raise ValueError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype}")
        return out
    if out_dtype is None:  # the inputs' type, or bf16 for 8-bit inputs
        out_dtype = a.dtype if a.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    return torch.empty(shape, dtype=out_dtype, device=a.device)


def _run(va, vb, out, alpha, beta, c):
    import torch

    vd, vc = _view(out, "out"), None if c is None else _view(c, "c")
    gemm(va, vb, vd, float(alpha), float(beta), vc, torch.cuda.current_stream(out.device).cuda_stream)
    return out


def mm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None):
    """alpha * a @ b + beta * c: a M x K, b K x N, c and out M x N. out is made if None, of
    out_dtype (by default the inputs' type, bf16 for 8-bit inputs); c is read only when
    beta != 0 and may be out itself."""
    va, vb = _view(a, "a", (2,)), _view(b, "b", (2,))
    return _run(va, vb, _output(a, (a.shape[0], b.shape[1]), out, out_dtype), alpha, beta, c)


def bmm(a, b, *, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None):
    """mm over a batch: a B x M x K, b B x K x N, out B x M x N; a or b may be 2-D, shared by
    every batch."""
    va, vb = _view(a, "a"), _view(b, "b")
    if a.dim() == 2 and b.dim() == 2:
        raise ValueError("a, b: both 2-D; expected at least one batch x rows x cols (or use mm)")
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    return _run(va, vb, _output(a, (batch, a.shape[-2], b.shape[-1]), out, out_dtype), alpha, beta, c)


def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, out=None):
    """beta * input + alpha * mat1 @ mat2, as torch.addmm: input broadcasts to M x N (a bias
    row of N is read with a row stride of 0, not copied)."""
    import torch

    va, vb = _view(mat1, "mat1", (2,)), _view(mat2, "mat2", (2,))
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input: expected a torch.Tensor, got {type(input).__name__}")
    shape = (mat1.shape[0], mat2.shape[1])
    c = input.expand(shape) if beta != 0 else None
    return _run(va, vb, _output(mat1, shape, out, None), alpha, beta, c)
