"""CPU stand-ins for gemmkit's kernels, so that the operators' autograd formulas run without a
GPU: registered as the operators' CPU kernels by conftest.py's `cpu_kernels` fixture. They compute
in double (float64 operands, float64 out_dtype) and write fresh row-major outputs, as gemmkit's
kernels do; a grouped output's rows that no group owns hold NaN unless asked for zeros
(zero_unowned), as an empty output may hold anything. An e4m3 output is quantised in 1x128 blocks
by quantize()'s rule (quantized_blocks). Imported after pytest.importorskip("torch"), which each
test file makes itself."""

import torch

from gemmkit._torch import output_dtype


def registered_on_cpu(kernels):
    """Registers each of `kernels` (a gemmkit operator's name: its function) as the operator's CPU
    kernel until the generator resumes: a fixture's `yield from registered_on_cpu({...})`."""
    lib = torch.library.Library("gemmkit", "IMPL")  # noqa: TOR901
    for name, kernel in kernels.items():
        lib.impl(name, kernel, "CPU")
    yield
    lib._destroy()


def quantized_blocks(value):
    """value [..., N] (double) as an e4m3 output holds it: (q, scales), scales float32 [...,
    ceil(N/128)], amax / 448 of each 1x128 block (1 for an all-zero one), q the block divided by
    its scale."""
    n = value.size(-1)
    blocks = -(-n // 128)
    amax = torch.nn.functional.pad(value, (0, 128 * blocks - n)).abs().unflatten(-1, (blocks, 128)).amax(-1)
    scales = torch.where(amax == 0, 1.0, amax / 448).float()
    q = value / scales.double().repeat_interleave(128, -1)[..., :n]
    return q.clamp(-448, 448).to(torch.float8_e4m3fn), scales


def store(out, value, scale_d):
    """value into out, quantised into out and scale_d where given (an e4m3 out)."""
    if scale_d is None:
        out.copy_(value)
    else:
        q, scales = quantized_blocks(value)
        out.copy_(q)
        scale_d.copy_(scales)


def group_rows(sizes, layout, rows):
    """(group, first row, end row) of each group, as the kernel reads `sizes` (clamped)."""
    if layout == "masked":
        return [(g, 0, min(count, rows)) for g, count in enumerate(sizes.tolist())]
    spans, start = [], 0
    for g, end in enumerate(sizes.tolist()):
        end = min(max(end, start), rows)
        spans.append((g, start, end))
        start = end
    return spans


def grouped_mm_stand_in(a, b, sizes, layout, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms, zero_unowned):
    fill = 0.0 if zero_unowned else float("nan")
    out = a.new_full((*a.shape[:-1], b.size(-1)), fill, dtype=output_dtype(a, out_dtype))
    for g, start, end in group_rows(sizes, layout, a.size(-2)):
        rows = (g, slice(start, end)) if layout == "masked" else (slice(start, end),)
        out[rows] = (a[rows].double() @ b[g].double()).to(out.dtype)
    return out


def wgrad_products(x, y, offs, scale_a, scale_b):
    """[G, P, Q] in double: each group's x_g^T y_g over its rows, x and y scaled as gemm.h's views
    say (x's scales [P, 1] or [1, 1], y's [1, Q] or [1, 1], with or without G first)."""
    out = x.new_empty(offs.size(0), x.size(1), y.size(1), dtype=torch.float64)
    for g, start, end in group_rows(offs, "contiguous", x.size(0)):
        sx = 1.0 if scale_a is None else scale_a[g] if scale_a.dim() == 3 else scale_a
        sy = 1.0 if scale_b is None else scale_b[g] if scale_b.dim() == 3 else scale_b
        out[g] = (x[start:end].double().t() * sx) @ (y[start:end].double() * sy)
    return out


def grouped_wgrad_stand_in(x, y, offs, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms):
    return wgrad_products(x, y, offs, scale_a, scale_b).to(output_dtype(x, out_dtype))


def grouped_wgrad_epilogue_stand_in(x, y, offs, out, epilogue, names, inputs, outputs, max_sms, scale_a=None,
                                    scale_b=None, mode_a="none", mode_b="none", scale_d=None):
    """D into out [G, P, Q] and each output in place, as gemm_epilogue_stand_in's, acc each group's
    x_g^T y_g (an empty group's 0)."""
    from gemmkit._epilogue_eval import evaluate
    written = names[len(inputs):]
    value, values = evaluate(epilogue, wgrad_products(x, y, offs, scale_a, scale_b),
                             {name: t.double() for name, t in zip(names, inputs)},
                             shapes={name: t.shape for name, t in zip(written, outputs)})
    store(out, value, scale_d)
    for name, t in zip(written, outputs):
        t.copy_(values[name])


def grouped_wgrad_quantized_stand_in(x, y, offs, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a, mode_b):
    assert not epilogue
    return quantized_blocks(wgrad_products(x, y, offs, scale_a, scale_b))


def grouped_mm_quantized_stand_in(a, b, sizes, layout, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a,
                                  mode_b):
    assert not epilogue
    return quantized_blocks(grouped_mm_stand_in(a, b, sizes, layout, None, None, "none", "none", torch.float64, 0,
                                                False))


def gemm_stand_in(a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c):
    out = alpha * (a.double() @ b.double())
    if beta != 0:
        out = out + beta * c.double()
    return out.contiguous().to(output_dtype(a, out_dtype))


def mm_epilogue_stand_in(a, b, epilogue, names, inputs, out_dtype, alpha, beta, c):
    from gemmkit._epilogue_eval import evaluate
    acc = alpha * (a.double() @ b.double())  # a batch, a 2-D operand shared by it, as torch.matmul's
    if beta != 0:
        acc = acc + beta * c.double()
    value, _ = evaluate(epilogue, acc, {name: t.double() for name, t in zip(names, inputs)})
    return value.contiguous().to(out_dtype)


def gemm_epilogue_stand_in(a, b, out, scale_a, scale_b, mode_a, mode_b, epilogue, names, inputs, outputs, alpha, beta,
                           c, scale_d=None):
    """D into out (quantised with scale_d) and each output in place, as the kernel writes them: a
    reduction's (name[n] = sum(...), ...) in its output's shape (its batch's, or summed over every
    batch)."""
    from gemmkit._epilogue_eval import evaluate
    acc = alpha * (a.double() @ b.double())
    if beta != 0:
        acc = acc + beta * c.double()
    written = names[len(inputs):]
    value, values = evaluate(epilogue, acc, {name: t.double() for name, t in zip(names, inputs)},
                             shapes={name: t.shape for name, t in zip(written, outputs)})
    store(out, value, scale_d)
    for name, t in zip(written, outputs):
        t.copy_(values[name])


def gemm_quantized_stand_in(a, b, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue, names, inputs):
    from gemmkit._epilogue_eval import evaluate
    acc = alpha * (a.double() @ b.double())
    if beta != 0:
        acc = acc + beta * c.double()
    if epilogue:
        acc, _ = evaluate(epilogue, acc, {name: t.double() for name, t in zip(names, inputs)})
    return quantized_blocks(acc)


STAND_INS = {"grouped_mm": grouped_mm_stand_in, "grouped_wgrad": grouped_wgrad_stand_in, "gemm": gemm_stand_in,
             "mm_epilogue": mm_epilogue_stand_in, "gemm_epilogue": gemm_epilogue_stand_in,
             "grouped_wgrad_epilogue": grouped_wgrad_epilogue_stand_in, "gemm_quantized": gemm_quantized_stand_in,
             "grouped_mm_quantized": grouped_mm_quantized_stand_in,
             "grouped_wgrad_quantized": grouped_wgrad_quantized_stand_in}
