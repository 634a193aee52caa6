"""torch.ops.gemmkit: gemmkit as torch custom operators, so that torch.compile traces it (the fake
implementations give output shapes without running anything), CUDA graphs capture it and
autograd differentiates it. Their CUDA kernels are _torch's launches. Imported by _torch, whose
functions (gemmkit.mm and the others) call these operators only where torch has something to
record. grouped_mm and grouped_wgrad (and their _out and _epilogue forms) are the grouped
products: the forward and input gradient, and the weight gradient, each with FP8 scales for
scaled_grouped_mm. An e4m3 output, quantised in 1x128 blocks, comes with its float32 scales
[..., M, ceil(N/128)] (_torch.new_scales): the *_quantized operators make and return both, and
the operators that write into out take them as scale_d (None for other outputs); none of them
has a gradient. scaled_swiglu_mm and scaled_grouped_swiglu_mm (and their _out and _quantized
forms) are the FP8 dual GEMMs, with the inputs' scales; they have no gradient either. w4_mm (and
w4_mm_out) is the product with 4-bit weights (int4_mm, mxfp4_mm), grouped_w4_mm (and
grouped_w4_mm_out, and grouped_w4_mm_epilogue through a fused epilogue) the grouped one
(grouped_int4_mm, grouped_mxfp4_mm); neither has a gradient.
quantize_w4 makes their inputs (quantize_int4, quantize_mxfp4), whose results never require
grad."""

import torch

from . import _torch as t
from ._epilogue_eval import evaluate

_lib = torch.library.Library("gemmkit", "DEF")  # noqa: TOR901  (kept for the process's life)
_lib.define("gemm(Tensor a, Tensor b, Tensor? scale_a, Tensor? scale_b, str mode_a, str mode_b, "
            "ScalarType? out_dtype, float alpha, float beta, Tensor? c) -> Tensor")
_lib.define("gemm_out(Tensor a, Tensor b, Tensor(a!) out, Tensor? scale_a, Tensor? scale_b, str mode_a, "
            "str mode_b, float alpha, float beta, Tensor? c, Tensor(c!)? scale_d=None) -> ()")
# out = the product through a fused epilogue; names: the tensors the text names, inputs (in
# order of first use) then outputs (written in place: a reduction's, name[n] = sum(...), zeroed
# and added into); no autograd.
_lib.define("gemm_epilogue(Tensor a, Tensor b, Tensor(a!) out, Tensor? scale_a, Tensor? scale_b, str mode_a, "
            "str mode_b, str epilogue, str[] names, Tensor[] inputs, Tensor(b!)[] outputs, float alpha, float beta, "
            "Tensor? c, Tensor(c!)? scale_d=None) -> ()")
# The same as a function of its inputs (no outputs of its own): D [batch,] M x N of out_dtype, acc
# = alpha * a @ b + beta * c (a or b may be 2-D, shared by a batch). gemmkit.mm, bmm and addmm call
# it where autograd tracks the call (its formula below), the torch.compile pass (_fusion) where it
# fuses.
_lib.define("mm_epilogue(Tensor a, Tensor b, str epilogue, str[] names, Tensor[] inputs, ScalarType out_dtype, "
            "float alpha, float beta, Tensor? c) -> Tensor")
# The grouped forward through a fused epilogue, as gemm_epilogue; FP8 a and b (scaled_grouped_mm)
# with their scales and modes.
_lib.define("grouped_mm_epilogue(Tensor a, Tensor b, Tensor sizes, Tensor(a!) out, str layout, str epilogue, "
            "str[] names, Tensor[] inputs, Tensor(b!)[] outputs, int max_sms, Tensor? scale_a=None, "
            "Tensor? scale_b=None, str mode_a=\"none\", str mode_b=\"none\", Tensor(c!)? scale_d=None) -> ()")
# zero_unowned: rows no group owns are set to 0 (gradients), else left undefined as torch's are.
_lib.define("grouped_mm(Tensor a, Tensor b, Tensor sizes, str layout, Tensor? scale_a, Tensor? scale_b, str mode_a, "
            "str mode_b, ScalarType? out_dtype, int max_sms, bool zero_unowned) -> Tensor")
_lib.define("grouped_mm_out(Tensor a, Tensor b, Tensor sizes, Tensor(a!) out, str layout, Tensor? scale_a, "
            "Tensor? scale_b, str mode_a, str mode_b, int max_sms, Tensor(c!)? scale_d=None) -> ()")
# The weight gradient x_g^T y_g: scale_a is x's scales (A = x^T), scale_b y's.
_lib.define("grouped_wgrad(Tensor x, Tensor y, Tensor offs, Tensor? scale_a, Tensor? scale_b, str mode_a, "
            "str mode_b, ScalarType? out_dtype, int max_sms) -> Tensor")
_lib.define("grouped_wgrad_out(Tensor x, Tensor y, Tensor offs, Tensor(a!) out, Tensor? scale_a, Tensor? scale_b, "
            "str mode_a, str mode_b, int max_sms, Tensor(c!)? scale_d=None) -> ()")
# The weight gradient into out [G, P, Q] through a fused epilogue, as grouped_mm_epilogue (no
# autograd); FP8 x and y with their scales and modes.
_lib.define("grouped_wgrad_epilogue(Tensor x, Tensor y, Tensor offs, Tensor(a!) out, str epilogue, str[] names, "
            "Tensor[] inputs, Tensor(b!)[] outputs, int max_sms, Tensor? scale_a=None, Tensor? scale_b=None, "
            "str mode_a=\"none\", str mode_b=\"none\", Tensor(c!)? scale_d=None) -> ()")
_lib.define("quantize(Tensor x, ScalarType dtype, int block_rows, int block_cols, ScalarType scale_dtype, "
            "bool power_of_two) -> (Tensor, Tensor)")
# SwiGLU's up-projection as one dual GEMM (gemmkit.swiglu_mm): [M, I] = the epilogue of acc = x
# @ gate^T and acc2 = x @ up^T, the gate and up weights w and w_up ([I, K] each), or the halves
# of w [2I, K] (w_up None; interleaved: its even and odd rows). The weights enter whole, so that
# autograd's gradient of a combined w is one [2I, K] product. Differentiable with the default
# epilogue (_torch.SWIGLU) alone; the epilogue's tensors as mm_epilogue's.
_lib.define("swiglu_mm(Tensor x, Tensor w, Tensor? w_up, bool interleaved, str epilogue, str[] names, "
            "Tensor[] inputs, ScalarType? out_dtype) -> Tensor")
# The same into out, with an epilogue's outputs (written in place, as gemm_epilogue's); no autograd.
_lib.define("swiglu_mm_out(Tensor x, Tensor w, Tensor? w_up, Tensor(a!) out, bool interleaved, str epilogue, "
            "str[] names, Tensor[] inputs, Tensor(b!)[] outputs, Tensor(c!)? scale_d=None) -> ()")
# mm_epilogue (alpha 1, no C) and swiglu_mm with the text's M x N outputs (name[m, n] = ...) made
# and returned beside D, [D, *outputs]: the functional form of the _out operators' outputs. Each
# output has D's shape, row-major, and its type in output_types, spelt as the text's casts are
# (bf16, f16, f32; a ScalarType[] reaches a Python kernel as ints); names are the inputs' then the
# outputs'. The torch.compile pass (_fusion) makes them in post-grad graphs, where autograd has
# run: they have no autograd formula.
_lib.define("mm_epilogue_outputs(Tensor a, Tensor b, str epilogue, str[] names, Tensor[] inputs, "
            "ScalarType out_dtype, str[] output_types) -> Tensor[]")
_lib.define("swiglu_mm_outputs(Tensor x, Tensor w, Tensor? w_up, bool interleaved, str epilogue, str[] names, "
            "Tensor[] inputs, ScalarType? out_dtype, str[] output_types) -> Tensor[]")
# The MoE up-projection as one grouped dual GEMM (gemmkit.grouped_swiglu_mm): each group's rows of
# x (`layout` and `sizes` as grouped_mm's) through the epilogue of acc = x_g @ gate_g^T and acc2 =
# x_g @ up_g^T, the experts' weights as swiglu_mm's with a group dimension first: w and w_up [G,
# I, K], or w [G, 2I, K] (w_up None). Rows no group owns are left undefined. The epilogue's
# tensors as grouped_mm_epilogue's. Differentiable in x and the weights with the default epilogue
# (_torch.SWIGLU) alone.
_lib.define("grouped_swiglu_mm(Tensor x, Tensor w, Tensor? w_up, Tensor sizes, str layout, bool interleaved, "
            "str epilogue, str[] names, Tensor[] inputs, ScalarType? out_dtype, int max_sms) -> Tensor")
# The same into out, with an epilogue's outputs (written in place, as swiglu_mm_out's).
_lib.define("grouped_swiglu_mm_out(Tensor x, Tensor w, Tensor? w_up, Tensor sizes, Tensor(a!) out, str layout, "
            "bool interleaved, str epilogue, str[] names, Tensor[] inputs, Tensor(b!)[] outputs, int max_sms, "
            "Tensor(c!)? scale_d=None) -> ()")
# The products above with an e4m3 output quantised in 1x128 blocks, made and returned with its
# scales, (out, scales): gemm's (epilogue "" for none; a or b may be 2-D, shared by a batch),
# swiglu_mm's, grouped_mm's forward ([M_total, N] or [G, max_m, N]) and weight gradient ([G, P,
# Q]), and grouped_swiglu_mm's, each through the epilogue the text gives, its tensors as the
# operators' above (inputs only: with outputs, the functions call the operators above with
# scale_d). No autograd: the functions refuse inputs that require grad.
_lib.define("gemm_quantized(Tensor a, Tensor b, Tensor? scale_a, Tensor? scale_b, str mode_a, str mode_b, "
            "float alpha, float beta, Tensor? c, str epilogue, str[] names, Tensor[] inputs) -> (Tensor, Tensor)")
_lib.define("swiglu_mm_quantized(Tensor x, Tensor w, Tensor? w_up, bool interleaved, str epilogue, str[] names, "
            "Tensor[] inputs) -> (Tensor, Tensor)")
_lib.define("grouped_mm_quantized(Tensor a, Tensor b, Tensor sizes, str layout, str epilogue, str[] names, "
            "Tensor[] inputs, int max_sms, Tensor? scale_a, Tensor? scale_b, str mode_a, str mode_b) "
            "-> (Tensor, Tensor)")
_lib.define("grouped_wgrad_quantized(Tensor x, Tensor y, Tensor offs, str epilogue, str[] names, Tensor[] inputs, "
            "int max_sms, Tensor? scale_a, Tensor? scale_b, str mode_a, str mode_b) -> (Tensor, Tensor)")
_lib.define("grouped_swiglu_mm_quantized(Tensor x, Tensor w, Tensor? w_up, Tensor sizes, str layout, bool interleaved, "
            "str epilogue, str[] names, Tensor[] inputs, int max_sms) -> (Tensor, Tensor)")
# The FP8 dual GEMMs (gemmkit.scaled_swiglu_mm, scaled_grouped_swiglu_mm): swiglu_mm and
# grouped_swiglu_mm (and their _out and _quantized forms) of FP8 x and weights with their scales,
# x's in mode_x and the weights' in mode_w: scale_x as scaled_mm's (scaled_grouped_mm's) scale_a,
# scale_w and scale_up as its scale_b for b = w.t() and w_up.t() (the grouped ones as gemm.h's
# views, [G, 1, N] rowwise, [G, 1, 1] tensor-wise); a combined w's one scale_w (scale_up None) is
# split into the gate's and the up's by the kernel (_torch.swiglu_scales). The weights and their
# scales enter whole. Not differentiable.
_lib.define("scaled_swiglu_mm(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, Tensor? scale_up, "
            "str mode_x, str mode_w, bool interleaved, str epilogue, str[] names, Tensor[] inputs, "
            "ScalarType? out_dtype) -> Tensor")
_lib.define("scaled_swiglu_mm_out(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, Tensor? scale_up, "
            "Tensor(a!) out, str mode_x, str mode_w, bool interleaved, str epilogue, str[] names, Tensor[] inputs, "
            "Tensor(b!)[] outputs, Tensor(c!)? scale_d=None) -> ()")
_lib.define("scaled_swiglu_mm_quantized(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, "
            "Tensor? scale_up, str mode_x, str mode_w, bool interleaved, str epilogue, str[] names, Tensor[] inputs) "
            "-> (Tensor, Tensor)")
_lib.define("scaled_grouped_swiglu_mm(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, "
            "Tensor? scale_up, Tensor sizes, str layout, str mode_x, str mode_w, bool interleaved, str epilogue, "
            "str[] names, Tensor[] inputs, ScalarType? out_dtype, int max_sms) -> Tensor")
_lib.define("scaled_grouped_swiglu_mm_out(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, "
            "Tensor? scale_up, Tensor sizes, Tensor(a!) out, str layout, str mode_x, str mode_w, bool interleaved, "
            "str epilogue, str[] names, Tensor[] inputs, Tensor(b!)[] outputs, int max_sms, "
            "Tensor(c!)? scale_d=None) -> ()")
_lib.define("scaled_grouped_swiglu_mm_quantized(Tensor x, Tensor w, Tensor? w_up, Tensor scale_x, Tensor scale_w, "
            "Tensor? scale_up, Tensor sizes, str layout, str mode_x, str mode_w, bool interleaved, str epilogue, "
            "str[] names, Tensor[] inputs, int max_sms) -> (Tensor, Tensor)")

# x [M, K] @ W^T for 4-bit weights W [N, K] (gemmkit.int4_mm, mxfp4_mm): w their [N, ceil(K/2)]
# bytes, format 'int4' (u4 codes with scales, and optional zeros, [ceil(K/group), N] of x's dtype)
# or 'mxfp4' (e2m1 values with exponents scales [N, ceil(K/32)], group 32, no zeros), checked by
# _torch.check_w4 (in the fake implementations too). An e4m3 x (W4A8) comes with x_scale, its mode
# read from its dtype and shape (_torch.x_scale_mode): float32 per tensor, per row ([M, 1] or [M])
# or per 1x128 block ([M, ceil(K/128)]), or, against weights in groups of 32 of K (mxfp4, int4
# with group 32), float8_e8m0fnu or uint8 exponents per 1x32 block ([M, ceil(K/32)], mx); int4's
# scales then bfloat16 or float16. Against those weights x may also be MXFP4 activations (FP4 x
# FP4), [M, K/2] bytes (uint8 or float4_e2m1fn_x2; K = 2 * x.size(1), _torch.x_k) with mx x_scale.
# [M, N] of out_dtype (None: x's; bfloat16 for e4m3 and MXFP4 x). Not differentiable: the
# backward raises.
_lib.define("w4_mm(Tensor x, Tensor w, Tensor scales, Tensor? zeros, str format, int group, ScalarType? out_dtype, "
            "Tensor? x_scale=None) -> Tensor")
_lib.define("w4_mm_out(Tensor x, Tensor w, Tensor scales, Tensor? zeros, Tensor(a!) out, str format, int group, "
            "Tensor? x_scale=None) -> ()")
# The grouped product with 4-bit weights (gemmkit.grouped_int4_mm, grouped_mxfp4_mm): x_g @ W_g^T
# for each group's rows of x, `layout` and `sizes` as grouped_mm's (x [M_total, K] with the ends,
# or [G, max_m, K] with the counts), the experts' weights W [G, N, K] as w4_mm's with G first: w
# [G, N, ceil(K/2)] bytes, int4's scales (and zeros) [G, ceil(K/group), N], MXFP4's [G, N,
# ceil(K/32)]; an e4m3 x with x_scale, its mode read from its dtype and shape over x's rows
# (_torch.grouped_x_scale_mode): float32 one for all, one a row ([M_total, 1] or [M_total];
# masked [G, max_m, 1] or [G, max_m]) or 1x128 blocks ([M_total, ceil(K/128)]; masked [G, max_m,
# ceil(K/128)]), or, against weights in groups of 32 of K (mxfp4, int4 with group 32),
# float8_e8m0fnu or uint8 exponents ([M_total, ceil(K/32)]; masked [G, max_m, ceil(K/32)], mx).
# Against those weights x may also be MXFP4 activations, [M_total, K/2] or [G, max_m, K/2] bytes
# (uint8 or float4_e2m1fn_x2; K = 2 * x.size(-1), _torch.x_k) with such exponents.
# Checked by _torch.check_grouped_w4 (in the fake implementations too). x's rows and N of out_dtype
# (None: x's; bfloat16 for e4m3 and MXFP4 x), the rows no group owns not written. Not differentiable: the
# backward raises.
_lib.define("grouped_w4_mm(Tensor x, Tensor w, Tensor scales, Tensor? zeros, Tensor sizes, str layout, str format, "
            "int group, ScalarType? out_dtype, int max_sms, Tensor? x_scale=None) -> Tensor")
_lib.define("grouped_w4_mm_out(Tensor x, Tensor w, Tensor scales, Tensor? zeros, Tensor sizes, Tensor(a!) out, "
            "str layout, str format, int group, int max_sms, Tensor? x_scale=None) -> ()")
# grouped_w4_mm_out through a fused epilogue (grouped_int4_mm, grouped_mxfp4_mm with epilogue=), its
# tensors as grouped_mm_epilogue's, checked as grouped_w4_mm's; no autograd.
_lib.define("grouped_w4_mm_epilogue(Tensor x, Tensor w, Tensor scales, Tensor? zeros, Tensor sizes, Tensor(a!) out, "
            "str layout, str format, int group, str epilogue, str[] names, Tensor[] inputs, Tensor(b!)[] outputs, "
            "int max_sms, Tensor? x_scale=None) -> ()")
# w4_mm's inputs from weights w [N, K] (bfloat16, float16 or float32; gemmkit.quantize_int4,
# quantize_mxfp4): (w's [N, ceil(K/2)] bytes, scales, zero points or None), format 'int4' (scales
# and zeros [ceil(K/group), N] of scales_dtype, bfloat16 or float16) or 'mxfp4' (group 32, no
# zeros, scales_dtype uint8: exponents [N, ceil(K/32)], stored [ceil(K/32), N] and returned
# transposed), checked by _torch.check_quantize_w4. Not differentiable: no result requires grad.
_lib.define("quantize_w4(Tensor w, str format, int group, bool zeros, ScalarType scales_dtype) "
            "-> (Tensor, Tensor, Tensor?)")


def _gemm(a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c):
    out = t.new_output(a, b, out_dtype)
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c)
    return out


def _gemm_out(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, scale_d=None):
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, scale_d=scale_d)


def _gemm_epilogue(a, b, out, scale_a, scale_b, mode_a, mode_b, epilogue, names, inputs, outputs, alpha, beta, c,
                   scale_d=None):
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue,
                  t.epilogue_triples(epilogue, names, [*inputs, *outputs]), scale_d=scale_d)


def _mm_epilogue(a, b, epilogue, names, inputs, out_dtype, alpha, beta, c):
    out = t.new_output(a, b, out_dtype)
    _gemm_epilogue(a, b, out, None, None, "none", "none", epilogue, names, inputs, [], alpha, beta, c)
    return out


def _grouped_mm_epilogue(a, b, sizes, out, layout, epilogue, names, inputs, outputs, max_sms, scale_a=None,
                         scale_b=None, mode_a="none", mode_b="none", scale_d=None):
    t.launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, mode_a, mode_b, max_sms, False, epilogue,
                     t.epilogue_triples(epilogue, names, [*inputs, *outputs]), scale_d)


def _grouped_mm(a, b, sizes, layout, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms, zero_unowned):
    out = t.new_grouped_output(a, b, out_dtype)
    t.launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, mode_a, mode_b, max_sms, zero_unowned)
    return out


def _grouped_mm_out(a, b, sizes, out, layout, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=None):
    t.launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=scale_d)


def _grouped_wgrad(x, y, offs, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms):
    out = x.new_empty(t.wgrad_output_shape(x, y, offs), dtype=t.output_dtype(x, out_dtype))
    t.launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms)
    return out


def _grouped_wgrad_out(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=None):
    t.launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=scale_d)


def _grouped_wgrad_epilogue(x, y, offs, out, epilogue, names, inputs, outputs, max_sms, scale_a=None, scale_b=None,
                            mode_a="none", mode_b="none", scale_d=None):
    t.launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, epilogue,
                           t.epilogue_triples(epilogue, names, [*inputs, *outputs]), scale_d)


def _quantize(x, dtype, block_rows, block_cols, scale_dtype, power_of_two):
    q, scales = x.new_empty(x.shape, dtype=dtype), t.new_quantize_scales(x, block_rows, block_cols, scale_dtype)
    t.launch_quantize(x, q, scales, block_rows, block_cols, power_of_two)
    return q, scales


def _swiglu_mm(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype):
    out = t.new_swiglu_output(x, w, w_up, out_dtype)
    t.launch_swiglu(x, w, w_up, interleaved, out, epilogue, t.epilogue_triples(epilogue, names, inputs))
    return out


def _swiglu_mm_out(x, w, w_up, out, interleaved, epilogue, names, inputs, outputs, scale_d=None):
    t.launch_swiglu(x, w, w_up, interleaved, out, epilogue, t.epilogue_triples(epilogue, names, [*inputs, *outputs]),
                    scale_d)


def _w4_mm(x, w, scales, zeros, format, group, out_dtype, x_scale=None):
    t.check_w4(x, w, scales, zeros, format, group, x_scale)
    out = t.new_w4_output(x, w, out_dtype)
    t.launch_w4(x, w, scales, zeros, format, group, out, x_scale)
    return out


def _w4_mm_out(x, w, scales, zeros, out, format, group, x_scale=None):
    t.check_w4(x, w, scales, zeros, format, group, x_scale)
    t.launch_w4(x, w, scales, zeros, format, group, out, x_scale)


def _grouped_w4_mm(x, w, scales, zeros, sizes, layout, format, group, out_dtype, max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    out = t.new_grouped_w4_output(x, w, out_dtype)
    t.launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale)
    return out


def _grouped_w4_mm_out(x, w, scales, zeros, sizes, out, layout, format, group, max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    t.launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale)


def _grouped_w4_mm_epilogue(x, w, scales, zeros, sizes, out, layout, format, group, epilogue, names, inputs, outputs,
                            max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    t.launch_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, out, max_sms, x_scale, epilogue,
                        t.epilogue_triples(epilogue, names, [*inputs, *outputs]))


def _quantize_w4(w, format, group, zeros, scales_dtype):
    t.check_quantize_w4(w, format, group, zeros, scales_dtype)
    results = t.new_quantize_w4_outputs(w, format, group, zeros, scales_dtype)
    t.launch_quantize_w4(w, *results, format, group)
    return results


OUTPUT_TYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}  # the *_outputs operators'


def _with_outputs(d, output_types):
    """[d, and an empty tensor of d's shape of each type in output_types]."""
    return [d, *(d.new_empty(d.shape, dtype=OUTPUT_TYPES[name]) for name in output_types)]


def _mm_epilogue_outputs(a, b, epilogue, names, inputs, out_dtype, output_types):
    d, *outputs = results = _with_outputs(t.new_output(a, b, out_dtype), output_types)
    _gemm_epilogue(a, b, d, None, None, "none", "none", epilogue, names, inputs, outputs, 1.0, 0.0, None)
    return results


def _swiglu_mm_outputs(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype, output_types):
    d, *outputs = results = _with_outputs(t.new_swiglu_output(x, w, w_up, out_dtype), output_types)
    _swiglu_mm_out(x, w, w_up, d, interleaved, epilogue, names, inputs, outputs)
    return results


def _grouped_swiglu_mm(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, out_dtype, max_sms):
    out = t.new_grouped_swiglu_output(x, w, w_up, out_dtype)
    t.launch_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, max_sms, epilogue,
                            t.epilogue_triples(epilogue, names, inputs))
    return out


def _grouped_swiglu_mm_out(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs, max_sms,
                           scale_d=None):
    t.launch_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, max_sms, epilogue,
                            t.epilogue_triples(epilogue, names, [*inputs, *outputs]), scale_d)


def _with_scales(out):
    """(out, empty scales for it): an e4m3 output of the *_quantized operators."""
    return out, t.new_scales(out)


def _triples(epilogue, names, inputs):
    """epilogue_triples of a *_quantized operator's text, None where it has none ("")."""
    return t.epilogue_triples(epilogue, names, inputs) if epilogue else None


def _gemm_quantized(a, b, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue, names, inputs):
    out, scales = _with_scales(t.new_output(a, b, t.QUANTIZED))
    t.launch_gemm(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue,
                  _triples(epilogue, names, inputs), scale_d=scales)
    return out, scales


def _swiglu_mm_quantized(x, w, w_up, interleaved, epilogue, names, inputs):
    out, scales = _with_scales(t.new_swiglu_output(x, w, w_up, t.QUANTIZED))
    t.launch_swiglu(x, w, w_up, interleaved, out, epilogue, t.epilogue_triples(epilogue, names, inputs), scales)
    return out, scales


def _grouped_mm_quantized(a, b, sizes, layout, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a, mode_b):
    out, scales = _with_scales(t.new_grouped_output(a, b, t.QUANTIZED))
    t.launch_grouped(a, b, sizes, layout, out, scale_a, scale_b, mode_a, mode_b, max_sms, False, epilogue,
                     _triples(epilogue, names, inputs), scales)
    return out, scales


def _grouped_wgrad_quantized(x, y, offs, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a, mode_b):
    out, scales = _with_scales(x.new_empty(t.wgrad_output_shape(x, y, offs), dtype=t.QUANTIZED))
    t.launch_grouped_wgrad(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, epilogue,
                           _triples(epilogue, names, inputs), scales)
    return out, scales


def _grouped_swiglu_mm_quantized(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, max_sms):
    out, scales = _with_scales(t.new_grouped_swiglu_output(x, w, w_up, t.QUANTIZED))
    t.launch_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, max_sms, epilogue,
                            t.epilogue_triples(epilogue, names, inputs), scales)
    return out, scales


def _scaled_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue,
                          triples, scale_d=None):
    """launch_scaled_swiglu with a combined w's scales split into the gate's and the up's."""
    scale_gate, scale_upv = t.swiglu_scales(scale_w, scale_up, mode_w, interleaved, w.size(0))
    t.launch_scaled_swiglu(x, w, w_up, interleaved, out, scale_x, scale_gate, scale_upv, mode_x, mode_w, epilogue,
                           triples, scale_d)


def _scaled_swiglu_mm(x, w, w_up, scale_x, scale_w, scale_up, mode_x, mode_w, interleaved, epilogue, names, inputs,
                      out_dtype):
    out = t.new_swiglu_output(x, w, w_up, out_dtype)
    _scaled_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue,
                          t.epilogue_triples(epilogue, names, inputs))
    return out


def _scaled_swiglu_mm_out(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue, names,
                          inputs, outputs, scale_d=None):
    _scaled_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue,
                          t.epilogue_triples(epilogue, names, [*inputs, *outputs]), scale_d)


def _scaled_swiglu_mm_quantized(x, w, w_up, scale_x, scale_w, scale_up, mode_x, mode_w, interleaved, epilogue, names,
                                inputs):
    out, scales = _with_scales(t.new_swiglu_output(x, w, w_up, t.QUANTIZED))
    _scaled_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue,
                          t.epilogue_triples(epilogue, names, inputs), scales)
    return out, scales


def _scaled_grouped_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                  interleaved, epilogue, triples, max_sms, scale_d=None):
    """launch_scaled_grouped_swiglu with a combined w's scales split into the gates' and the ups'."""
    scale_gate, scale_upv = t.swiglu_scales(scale_w, scale_up, mode_w, interleaved, w.size(1), grouped=True)
    t.launch_scaled_grouped_swiglu(x, w, w_up, interleaved, sizes, layout, out, scale_x, scale_gate, scale_upv, mode_x,
                                   mode_w, max_sms, epilogue, triples, scale_d)


def _scaled_grouped_swiglu_mm(x, w, w_up, scale_x, scale_w, scale_up, sizes, layout, mode_x, mode_w, interleaved,
                              epilogue, names, inputs, out_dtype, max_sms):
    out = t.new_grouped_swiglu_output(x, w, w_up, out_dtype)
    _scaled_grouped_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                  interleaved, epilogue, t.epilogue_triples(epilogue, names, inputs), max_sms)
    return out


def _scaled_grouped_swiglu_mm_out(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                  interleaved, epilogue, names, inputs, outputs, max_sms, scale_d=None):
    _scaled_grouped_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                  interleaved, epilogue, t.epilogue_triples(epilogue, names, [*inputs, *outputs]),
                                  max_sms, scale_d)


def _scaled_grouped_swiglu_mm_quantized(x, w, w_up, scale_x, scale_w, scale_up, sizes, layout, mode_x, mode_w,
                                        interleaved, epilogue, names, inputs, max_sms):
    out, scales = _with_scales(t.new_grouped_swiglu_output(x, w, w_up, t.QUANTIZED))
    _scaled_grouped_swiglu_launch(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                  interleaved, epilogue, t.epilogue_triples(epilogue, names, inputs), max_sms, scales)
    return out, scales


_lib.impl("gemm", _gemm, "CUDA")
_lib.impl("gemm_out", _gemm_out, "CUDA")
_lib.impl("gemm_epilogue", _gemm_epilogue, "CUDA")
_lib.impl("mm_epilogue", _mm_epilogue, "CUDA")
_lib.impl("grouped_mm_epilogue", _grouped_mm_epilogue, "CUDA")
_lib.impl("grouped_mm", _grouped_mm, "CUDA")
_lib.impl("grouped_mm_out", _grouped_mm_out, "CUDA")
_lib.impl("grouped_wgrad", _grouped_wgrad, "CUDA")
_lib.impl("grouped_wgrad_out", _grouped_wgrad_out, "CUDA")
_lib.impl("grouped_wgrad_epilogue", _grouped_wgrad_epilogue, "CUDA")
_lib.impl("quantize", _quantize, "CUDA")
_lib.impl("swiglu_mm", _swiglu_mm, "CUDA")
_lib.impl("swiglu_mm_out", _swiglu_mm_out, "CUDA")
_lib.impl("mm_epilogue_outputs", _mm_epilogue_outputs, "CUDA")
_lib.impl("swiglu_mm_outputs", _swiglu_mm_outputs, "CUDA")
_lib.impl("grouped_swiglu_mm", _grouped_swiglu_mm, "CUDA")
_lib.impl("grouped_swiglu_mm_out", _grouped_swiglu_mm_out, "CUDA")
_lib.impl("gemm_quantized", _gemm_quantized, "CUDA")
_lib.impl("swiglu_mm_quantized", _swiglu_mm_quantized, "CUDA")
_lib.impl("grouped_mm_quantized", _grouped_mm_quantized, "CUDA")
_lib.impl("grouped_wgrad_quantized", _grouped_wgrad_quantized, "CUDA")
_lib.impl("grouped_swiglu_mm_quantized", _grouped_swiglu_mm_quantized, "CUDA")
_lib.impl("scaled_swiglu_mm", _scaled_swiglu_mm, "CUDA")
_lib.impl("scaled_swiglu_mm_out", _scaled_swiglu_mm_out, "CUDA")
_lib.impl("scaled_swiglu_mm_quantized", _scaled_swiglu_mm_quantized, "CUDA")
_lib.impl("scaled_grouped_swiglu_mm", _scaled_grouped_swiglu_mm, "CUDA")
_lib.impl("scaled_grouped_swiglu_mm_out", _scaled_grouped_swiglu_mm_out, "CUDA")
_lib.impl("scaled_grouped_swiglu_mm_quantized", _scaled_grouped_swiglu_mm_quantized, "CUDA")
_lib.impl("w4_mm", _w4_mm, "CUDA")
_lib.impl("w4_mm_out", _w4_mm_out, "CUDA")
_lib.impl("grouped_w4_mm", _grouped_w4_mm, "CUDA")
_lib.impl("grouped_w4_mm_out", _grouped_w4_mm_out, "CUDA")
_lib.impl("grouped_w4_mm_epilogue", _grouped_w4_mm_epilogue, "CUDA")
_lib.impl("quantize_w4", _quantize_w4, "CUDA")


@torch.library.register_fake("gemmkit::gemm")
def _gemm_fake(a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c):
    return a.new_empty(t.output_shape(a, b), dtype=t.output_dtype(a, out_dtype))


@torch.library.register_fake("gemmkit::gemm_out")
def _gemm_out_fake(a, b, out, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, scale_d=None):
    return None


# The epilogue operators' fake implementations check the shapes of scalars (name[]) and of
# reductions' outputs (name[n] = sum(...)), which the kernels would (check_operator_shapes); the
# outputs, written in place, have no fake values of their own to make.

@torch.library.register_fake("gemmkit::gemm_epilogue")
def _gemm_epilogue_fake(a, b, out, scale_a, scale_b, mode_a, mode_b, epilogue, names, inputs, outputs, alpha, beta,
                        c, scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.epilogue_dims(a, b))


@torch.library.register_fake("gemmkit::mm_epilogue")
def _mm_epilogue_fake(a, b, epilogue, names, inputs, out_dtype, alpha, beta, c):
    t.check_operator_shapes(epilogue, names, inputs, t.epilogue_dims(a, b))
    return a.new_empty(t.output_shape(a, b), dtype=out_dtype)


@torch.library.register_fake("gemmkit::grouped_mm_epilogue")
def _grouped_mm_epilogue_fake(a, b, sizes, out, layout, epilogue, names, inputs, outputs, max_sms, scale_a=None,
                              scale_b=None, mode_a="none", mode_b="none", scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.grouped_epilogue_dims(a, b))


@torch.library.register_fake("gemmkit::grouped_mm")
def _grouped_mm_fake(a, b, sizes, layout, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms, zero_unowned):
    return a.new_empty(t.grouped_output_shape(a, b), dtype=t.output_dtype(a, out_dtype))


@torch.library.register_fake("gemmkit::grouped_mm_out")
def _grouped_mm_out_fake(a, b, sizes, out, layout, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=None):
    return None


@torch.library.register_fake("gemmkit::grouped_wgrad")
def _grouped_wgrad_fake(x, y, offs, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms):
    return x.new_empty(t.wgrad_output_shape(x, y, offs), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::grouped_wgrad_out")
def _grouped_wgrad_out_fake(x, y, offs, out, scale_a, scale_b, mode_a, mode_b, max_sms, scale_d=None):
    return None


@torch.library.register_fake("gemmkit::grouped_wgrad_epilogue")
def _grouped_wgrad_epilogue_fake(x, y, offs, out, epilogue, names, inputs, outputs, max_sms, scale_a=None,
                                 scale_b=None, mode_a="none", mode_b="none", scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.wgrad_epilogue_dims(x, y, offs))


@torch.library.register_fake("gemmkit::quantize")
def _quantize_fake(x, dtype, block_rows, block_cols, scale_dtype, power_of_two):
    return x.new_empty(x.shape, dtype=dtype), t.new_quantize_scales(x, block_rows, block_cols, scale_dtype)


def _swiglu_dims(x, w, w_up):
    return t.EpilogueDims(1, *t.swiglu_output_shape(x, w, w_up), False, "batch")


@torch.library.register_fake("gemmkit::swiglu_mm")
def _swiglu_mm_fake(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype):
    t.check_operator_shapes(epilogue, names, inputs, _swiglu_dims(x, w, w_up))
    return x.new_empty(t.swiglu_output_shape(x, w, w_up), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::swiglu_mm_out")
def _swiglu_mm_out_fake(x, w, w_up, out, interleaved, epilogue, names, inputs, outputs, scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], _swiglu_dims(x, w, w_up))


# The *_outputs operators' outputs are D's shape: a name the text reduces into is refused here, as
# the kernel's check would refuse it.

@torch.library.register_fake("gemmkit::mm_epilogue_outputs")
def _mm_epilogue_outputs_fake(a, b, epilogue, names, inputs, out_dtype, output_types):
    results = _with_outputs(a.new_empty(t.output_shape(a, b), dtype=out_dtype), output_types)
    t.check_operator_shapes(epilogue, names, [*inputs, *results[1:]], t.epilogue_dims(a, b))
    return results


@torch.library.register_fake("gemmkit::swiglu_mm_outputs")
def _swiglu_mm_outputs_fake(x, w, w_up, interleaved, epilogue, names, inputs, out_dtype, output_types):
    d = x.new_empty(t.swiglu_output_shape(x, w, w_up), dtype=t.output_dtype(x, out_dtype))
    results = _with_outputs(d, output_types)
    t.check_operator_shapes(epilogue, names, [*inputs, *results[1:]], _swiglu_dims(x, w, w_up))
    return results


@torch.library.register_fake("gemmkit::grouped_swiglu_mm")
def _grouped_swiglu_mm_fake(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, out_dtype, max_sms):
    t.check_operator_shapes(epilogue, names, inputs, t.grouped_swiglu_epilogue_dims(x, w, w_up))
    return x.new_empty(t.grouped_swiglu_output_shape(x, w, w_up), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::grouped_swiglu_mm_out")
def _grouped_swiglu_mm_out_fake(x, w, w_up, sizes, out, layout, interleaved, epilogue, names, inputs, outputs,
                                max_sms, scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.grouped_swiglu_epilogue_dims(x, w, w_up))


# The *_quantized operators' outputs: e4m3 D and its row-major float32 scales, as their kernels
# make them.

@torch.library.register_fake("gemmkit::gemm_quantized")
def _gemm_quantized_fake(a, b, scale_a, scale_b, mode_a, mode_b, alpha, beta, c, epilogue, names, inputs):
    t.check_operator_shapes(epilogue, names, inputs, t.epilogue_dims(a, b))
    return _with_scales(a.new_empty(t.output_shape(a, b), dtype=t.QUANTIZED))


@torch.library.register_fake("gemmkit::swiglu_mm_quantized")
def _swiglu_mm_quantized_fake(x, w, w_up, interleaved, epilogue, names, inputs):
    t.check_operator_shapes(epilogue, names, inputs, _swiglu_dims(x, w, w_up))
    return _with_scales(x.new_empty(t.swiglu_output_shape(x, w, w_up), dtype=t.QUANTIZED))


@torch.library.register_fake("gemmkit::grouped_mm_quantized")
def _grouped_mm_quantized_fake(a, b, sizes, layout, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a,
                               mode_b):
    t.check_operator_shapes(epilogue, names, inputs, t.grouped_epilogue_dims(a, b))
    return _with_scales(a.new_empty(t.grouped_output_shape(a, b), dtype=t.QUANTIZED))


@torch.library.register_fake("gemmkit::grouped_wgrad_quantized")
def _grouped_wgrad_quantized_fake(x, y, offs, epilogue, names, inputs, max_sms, scale_a, scale_b, mode_a, mode_b):
    t.check_operator_shapes(epilogue, names, inputs, t.wgrad_epilogue_dims(x, y, offs))
    return _with_scales(x.new_empty(t.wgrad_output_shape(x, y, offs), dtype=t.QUANTIZED))


@torch.library.register_fake("gemmkit::grouped_swiglu_mm_quantized")
def _grouped_swiglu_mm_quantized_fake(x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs, max_sms):
    t.check_operator_shapes(epilogue, names, inputs, t.grouped_swiglu_epilogue_dims(x, w, w_up))
    return _with_scales(x.new_empty(t.grouped_swiglu_output_shape(x, w, w_up), dtype=t.QUANTIZED))


# The FP8 dual GEMMs' outputs, as swiglu_mm's and grouped_swiglu_mm's.

@torch.library.register_fake("gemmkit::scaled_swiglu_mm")
def _scaled_swiglu_mm_fake(x, w, w_up, scale_x, scale_w, scale_up, mode_x, mode_w, interleaved, epilogue, names,
                           inputs, out_dtype):
    t.check_operator_shapes(epilogue, names, inputs, _swiglu_dims(x, w, w_up))
    return x.new_empty(t.swiglu_output_shape(x, w, w_up), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::scaled_swiglu_mm_out")
def _scaled_swiglu_mm_out_fake(x, w, w_up, scale_x, scale_w, scale_up, out, mode_x, mode_w, interleaved, epilogue,
                               names, inputs, outputs, scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], _swiglu_dims(x, w, w_up))


@torch.library.register_fake("gemmkit::scaled_swiglu_mm_quantized")
def _scaled_swiglu_mm_quantized_fake(x, w, w_up, scale_x, scale_w, scale_up, mode_x, mode_w, interleaved, epilogue,
                                     names, inputs):
    t.check_operator_shapes(epilogue, names, inputs, _swiglu_dims(x, w, w_up))
    return _with_scales(x.new_empty(t.swiglu_output_shape(x, w, w_up), dtype=t.QUANTIZED))


@torch.library.register_fake("gemmkit::scaled_grouped_swiglu_mm")
def _scaled_grouped_swiglu_mm_fake(x, w, w_up, scale_x, scale_w, scale_up, sizes, layout, mode_x, mode_w,
                                   interleaved, epilogue, names, inputs, out_dtype, max_sms):
    t.check_operator_shapes(epilogue, names, inputs, t.grouped_swiglu_epilogue_dims(x, w, w_up))
    return x.new_empty(t.grouped_swiglu_output_shape(x, w, w_up), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::scaled_grouped_swiglu_mm_out")
def _scaled_grouped_swiglu_mm_out_fake(x, w, w_up, scale_x, scale_w, scale_up, sizes, out, layout, mode_x, mode_w,
                                       interleaved, epilogue, names, inputs, outputs, max_sms, scale_d=None):
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.grouped_swiglu_epilogue_dims(x, w, w_up))


@torch.library.register_fake("gemmkit::scaled_grouped_swiglu_mm_quantized")
def _scaled_grouped_swiglu_mm_quantized_fake(x, w, w_up, scale_x, scale_w, scale_up, sizes, layout, mode_x, mode_w,
                                             interleaved, epilogue, names, inputs, max_sms):
    t.check_operator_shapes(epilogue, names, inputs, t.grouped_swiglu_epilogue_dims(x, w, w_up))
    return _with_scales(x.new_empty(t.grouped_swiglu_output_shape(x, w, w_up), dtype=t.QUANTIZED))


# The 4-bit weight products' outputs, [M, N] (grouped: x's rows and N); their arguments are
# checked as the kernels' are.

@torch.library.register_fake("gemmkit::w4_mm")
def _w4_mm_fake(x, w, scales, zeros, format, group, out_dtype, x_scale=None):
    t.check_w4(x, w, scales, zeros, format, group, x_scale)
    return x.new_empty(x.size(0), w.size(0), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::w4_mm_out")
def _w4_mm_out_fake(x, w, scales, zeros, out, format, group, x_scale=None):
    t.check_w4(x, w, scales, zeros, format, group, x_scale)


@torch.library.register_fake("gemmkit::grouped_w4_mm")
def _grouped_w4_mm_fake(x, w, scales, zeros, sizes, layout, format, group, out_dtype, max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    return x.new_empty(t.grouped_w4_output_shape(x, w), dtype=t.output_dtype(x, out_dtype))


@torch.library.register_fake("gemmkit::grouped_w4_mm_out")
def _grouped_w4_mm_out_fake(x, w, scales, zeros, sizes, out, layout, format, group, max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)


@torch.library.register_fake("gemmkit::grouped_w4_mm_epilogue")
def _grouped_w4_mm_epilogue_fake(x, w, scales, zeros, sizes, out, layout, format, group, epilogue, names, inputs,
                                 outputs, max_sms, x_scale=None):
    t.check_grouped_w4(x, w, scales, zeros, sizes, layout, format, group, x_scale)
    t.check_operator_shapes(epilogue, names, [*inputs, *outputs], t.grouped_w4_epilogue_dims(x, w))


@torch.library.register_fake("gemmkit::quantize_w4")
def _quantize_w4_fake(w, format, group, zeros, scales_dtype):
    t.check_quantize_w4(w, format, group, zeros, scales_dtype)
    return t.new_quantize_w4_outputs(w, format, group, zeros, scales_dtype)


# --- autograd ----------------------------------------------------------------------------------
# D = alpha * A B + beta * C gives dA = alpha * dD B^T, dB = alpha * A^T dD and dC = beta * dD,
# each computed by gemmkit (so a compiled backward runs gemmkit too). dD is taken in the inputs'
# type first, as torch's bfloat16 and float16 gradients are, since gemmkit multiplies 16-bit
# inputs. A 2-D operand shared by a batch gets the sum over the batch, as one product over the
# batch's rows. Each gradient comes out in the layout of its input (torch's layout contract for
# gradients: torch copies a leaf's gradient of other strides into the leaf's own, every step):
# a weight w passed as w.t() is column-major, so its gradient is computed transposed, at the
# same cost, and comes back to w row-major.

def _column_major(t):
    """True where t's last two dimensions hold its rows contiguous (t is the transpose of a
    row-major matrix, as a weight passed as w.t() is)."""
    return t.size(-2) > 1 and t.stride(-2) == 1 and (t.size(-1) == 1 or t.stride(-1) != 1)


def _product(x, y, out_dtype, alpha, beta=0.0, c=None):
    """The gradients' products (alpha * x @ y + beta * c): launched at once where torch has
    nothing to record (an eager backward pass), else through the operator (a traced or double
    backward; other devices' stand-in kernels in the tests)."""
    if x.is_cuda and t.direct(x, y, c):
        return _gemm(x, y, None, None, "none", "none", out_dtype, alpha, beta, c)
    return torch.ops.gemmkit.gemm(x, y, None, None, "none", "none", out_dtype, alpha, beta, c)


def _product_like(x, y, like, alpha):
    """alpha * x @ y in the dtype and layout of `like`, the input whose gradient it is: for a
    column-major `like`, the transpose of (y^T x^T), whose output gemmkit writes row-major."""
    if _column_major(like):
        return _product(y.transpose(-1, -2), x.transpose(-1, -2), like.dtype, alpha).transpose(-1, -2)
    return _product(x, y, like.dtype, alpha)

def _setup_context(ctx, inputs, output):
    a, b, scale_a, scale_b, mode_a, mode_b, out_dtype, alpha, beta, c = inputs
    ctx.fp8 = scale_a is not None or scale_b is not None or a.element_size() == 1
    ctx.alpha, ctx.beta = alpha, beta
    ctx.c_dtype = None if c is None else c.dtype
    ctx.c_shared = c is not None and c.dim() == 2 and output.dim() == 3
    ctx.save_for_backward(a, b)


def _grad_of_shared(grad, other, shared_is_a):
    """Sum over the batch of dD_i B_i^T (shared A) or A_i^T dD_i (shared B), as one product whose
    contraction runs over every batch entry's rows (N of them for A, M for B)."""
    batch, m, n = grad.shape
    if shared_is_a:  # [M, batch*N] x [batch*N, K]
        return grad.permute(1, 0, 2).reshape(m, batch * n), other.transpose(1, 2).reshape(batch * n, -1)
    return other.reshape(batch * m, -1).t(), grad.reshape(batch * m, n)  # [K, batch*M] x [batch*M, N]


def _operand_grads(g, a, b, alpha, needs_a, needs_b):
    """(dA, dB) of D = alpha * A B for D's gradient g (in the inputs' type), None where not needed,
    each in its operand's layout; a 2-D operand shared by a batch gets the sum over the batch."""
    grad_a = grad_b = None
    if needs_a:
        shared = a.dim() == 2 and g.dim() == 3
        grad_a = _product_like(*(_grad_of_shared(g, b, True) if shared else (g, b.transpose(-1, -2))), a, alpha)
    if needs_b:
        shared = b.dim() == 2 and g.dim() == 3
        grad_b = _product_like(*(_grad_of_shared(g, a, False) if shared else (a.transpose(-1, -2), g)), b, alpha)
    return grad_a, grad_b


def _backward(ctx, grad):
    if ctx.fp8 and any(ctx.needs_input_grad):
        raise RuntimeError("gemmkit: FP8 products (scaled_mm) are not differentiable")
    a, b = ctx.saved_tensors
    grad_c = None
    grad_a, grad_b = _operand_grads(grad.to(a.dtype), a, b, ctx.alpha, *ctx.needs_input_grad[:2])
    if ctx.needs_input_grad[9] and ctx.beta != 0:
        grad_c = grad.sum(0) if ctx.c_shared else grad
        grad_c = (grad_c if ctx.beta == 1 else grad_c * ctx.beta).to(ctx.c_dtype)
    return grad_a, grad_b, None, None, None, None, None, None, None, grad_c


torch.library.register_autograd("gemmkit::gemm", _backward, setup_context=_setup_context)


# A product through a fused epilogue, D = e(acc, tensors) with acc = alpha * P + beta * C and P =
# A B ([batch,] M x N; mm, bmm, addmm): the backward recomputes P (float32; float64 for the CPU
# stand-ins' double inputs), differentiates e evaluated by torch at acc (_epilogue_eval, the
# kernels' formulas) for dP, dC and the tensors' gradients (autograd sums those of operands shared
# by a batch), and multiplies dP out as gemm's backward does dD, each operand's gradient in its
# layout.

def _mm_epilogue_setup_context(ctx, inputs, output):
    a, b, epilogue, names, tensors, out_dtype, alpha, beta, c = inputs
    ctx.epilogue, ctx.names, ctx.alpha, ctx.beta = epilogue, names, alpha, beta
    ctx.save_for_backward(a, b, c, *tensors)


def epilogue_grads(text, names, product, tensors, grad, alpha=1.0, beta=0.0, c=None):
    """(dP, dC, [each tensor's gradient]) of D = the epilogue `text` of acc = alpha * P + beta * C,
    P the recomputed product `product` (float32 or wider), for D's gradient `grad`, in P's dtype;
    None for a tensor (or C) the value does not depend on, dP zero where D depends on nothing."""
    wide = product.dtype
    with torch.enable_grad():
        p = product.detach().requires_grad_()
        reads = [x.detach().to(wide).requires_grad_() for x in tensors]
        c_wide = None if c is None or beta == 0 else c.detach().to(wide).requires_grad_()
        acc = p if alpha == 1 else alpha * p
        if c_wide is not None:
            acc = acc + (c_wide if beta == 1 else beta * c_wide)
        value, _ = evaluate(text, acc, dict(zip(names, reads)))
        sources = [p, *([] if c_wide is None else [c_wide]), *reads]
        if value.requires_grad:  # not a text of numbers or steps (drelu) alone
            grads = list(torch.autograd.grad(value, sources, grad.to(wide), allow_unused=True))
        else:
            grads = [None] * len(sources)
    grad_p = torch.zeros_like(p) if grads[0] is None else grads[0]
    grad_c = grads.pop(1) if c_wide is not None else None
    return grad_p, grad_c, grads[1:]


def _mm_epilogue_backward(ctx, grad):
    a, b, c, *tensors = ctx.saved_tensors
    needs = ctx.needs_input_grad
    wide = torch.float64 if a.dtype == torch.float64 else torch.float32
    grad_p, grad_c, grads = epilogue_grads(ctx.epilogue, ctx.names, _product(a.detach(), b.detach(), wide, 1.0),
                                           tensors, grad, ctx.alpha, ctx.beta, c)
    grad_a, grad_b = _operand_grads(grad_p.to(a.dtype), a, b, 1.0, needs[0], needs[1])
    tensor_grads = [None if d is None else d.to(x.dtype) for d, x in zip(grads, tensors)]
    grad_c = grad_c.to(c.dtype) if grad_c is not None and needs[8] else None
    # torch matches the gradients to the inputs' structure, in which a list of names is one value
    # but an empty list a list.
    return grad_a, grad_b, None, None if ctx.names else [], tensor_grads, None, None, None, grad_c


torch.library.register_autograd("gemmkit::mm_epilogue", _mm_epilogue_backward, setup_context=_mm_epilogue_setup_context)


# Grouped products, out_g = a_g b_g per group g: da_g = dout_g b_g^T, a grouped product over the
# same groups (b^T [G, N, K] as B), and db_g = a_g^T dout_g, the weight gradient: grouped_wgrad
# for contiguous groups, each contracting over its own rows. Masked groups have no such kernel:
# their db is one batched product over every group's max_m rows, the rows past each count zeroed
# in a and dout first (they may hold anything, NaN included, which a zero factor would not
# cancel). Rows of da that no group owns are 0 (zero_unowned). db takes b's layout as dense
# gradients do: for weights w [G, N, K] passed as w.transpose(-2, -1) it is computed as dout_g^T
# a_g, [G, N, K] row-major, and comes back transposed. The weight gradient out_g = x_g^T y_g
# gives dx_g = y_g dout_g^T and dy_g = x_g dout_g: grouped products over its groups' rows,
# row-major (a grouped product split along its columns, which dx of a column-major x would
# need, has no kernel).

def _grouped_mm_setup_context(ctx, inputs, output):
    a, b, sizes, layout, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms, zero_unowned = inputs
    ctx.fp8 = a.element_size() == 1
    ctx.layout, ctx.max_sms = layout, max_sms
    ctx.save_for_backward(a, b, sizes)


def _grouped_product(a, b, sizes, layout, out_dtype, max_sms):
    """a @ b group by group, rows no group owns 0: the gradients' grouped products (launched as
    _product's)."""
    if a.is_cuda and t.direct(a, b, sizes):
        return _grouped_mm(a, b, sizes, layout, None, None, "none", "none", out_dtype, max_sms, True)
    return torch.ops.gemmkit.grouped_mm(a, b, sizes, layout, None, None, "none", "none", out_dtype, max_sms, True)


def _wgrad_product(x, y, sizes, out_dtype, max_sms):
    """x_g^T y_g over each group's rows (launched as _product's)."""
    if x.is_cuda and t.direct(x, y, sizes):
        return _grouped_wgrad(x, y, sizes, None, None, "none", "none", out_dtype, max_sms)
    return torch.ops.gemmkit.grouped_wgrad(x, y, sizes, None, None, "none", "none", out_dtype, max_sms)


def _weight_grad(a, grad, sizes, b, max_sms):
    """db_g = a_g^T dout_g over contiguous groups' own rows, in b's layout."""
    if _column_major(b):
        return _wgrad_product(grad, a, sizes, b.dtype, max_sms).transpose(-1, -2)
    return _wgrad_product(a, grad, sizes, b.dtype, max_sms)


def _masked_weight_grad(a, grad, counts, b):
    valid = (torch.arange(a.size(1), device=a.device) < counts.unsqueeze(1)).unsqueeze(-1)  # [G, max_m, 1]
    return _product_like(a.masked_fill(~valid, 0).transpose(1, 2), grad.masked_fill(~valid, 0), b, 1.0)


def _grouped_mm_backward(ctx, grad):
    if ctx.fp8 and any(ctx.needs_input_grad):
        raise RuntimeError("gemmkit: FP8 products (scaled_grouped_mm) are not differentiable")
    a, b, sizes = ctx.saved_tensors
    grad_a = grad_b = None
    g = grad.to(a.dtype)
    if ctx.needs_input_grad[0]:
        grad_a = _grouped_product(g, b.transpose(-1, -2), sizes, ctx.layout, a.dtype, ctx.max_sms)
    if ctx.needs_input_grad[1]:
        if ctx.layout == "contiguous":
            grad_b = _weight_grad(a, g, sizes, b, ctx.max_sms)
        else:
            grad_b = _masked_weight_grad(a, g, sizes, b)
    return grad_a, grad_b, None, None, None, None, None, None, None, None, None


def _grouped_wgrad_setup_context(ctx, inputs, output):
    x, y, offs, scale_a, scale_b, mode_a, mode_b, out_dtype, max_sms = inputs
    ctx.fp8 = x.element_size() == 1
    ctx.max_sms = max_sms
    ctx.save_for_backward(x, y, offs)


def _grouped_wgrad_backward(ctx, grad):
    if ctx.fp8 and any(ctx.needs_input_grad):
        raise RuntimeError("gemmkit: FP8 products (scaled_grouped_mm) are not differentiable")
    x, y, offs = ctx.saved_tensors
    grad_x = grad_y = None
    g = grad.to(x.dtype)
    if ctx.needs_input_grad[0]:
        grad_x = _grouped_product(y, g.transpose(-1, -2), offs, "contiguous", x.dtype, ctx.max_sms)
    if ctx.needs_input_grad[1]:
        grad_y = _grouped_product(x, g, offs, "contiguous", y.dtype, ctx.max_sms)
    return grad_x, grad_y, None, None, None, None, None, None, None


torch.library.register_autograd("gemmkit::grouped_mm", _grouped_mm_backward, setup_context=_grouped_mm_setup_context)
torch.library.register_autograd("gemmkit::grouped_wgrad", _grouped_wgrad_backward,
                                setup_context=_grouped_wgrad_setup_context)


# SwiGLU, D = silu(g) * u with g = x gate^T and u = x up^T ([M, I]; gate and up [I, K]): its
# backward recomputes g and u (float32 sums; the forward stored neither), then, in float32,
# du = dD silu(g) and dg = dD u silu'(g), silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g), both
# taken in x's type for the products dx = dg gate + du up, dgate = dg^T x and dup = du^T x. A
# combined w [2I, K] is one operand throughout: g and u are the halves (or the even and odd
# columns) of one product x w^T [M, 2I], and dg and du lie side by side (or interleaved) in one
# dh [M, 2I], so that dx = dh w and dw = dh^T x are a product each, dw in w's row order.
# Gradients take their inputs' layouts, as _backward's.

def _swiglu_setup_context(ctx, inputs, output):
    x, w, w_up, interleaved, epilogue, names, inputs_, out_dtype = inputs
    ctx.default = epilogue in ("", t.SWIGLU)
    ctx.interleaved = interleaved
    ctx.names, ctx.inputs = len(names), len(inputs_)
    ctx.save_for_backward(x, w, w_up)


def _sum_of_products_like(first, second, like, acc_dtype):
    """first[0] @ first[1] + second[0] @ second[1] in the dtype and layout of `like`, the first
    product kept in acc_dtype as the second's C (transposed throughout for a column-major `like`,
    as _product_like)."""
    transposed = _column_major(like)
    if transposed:
        first, second = [(y.transpose(-1, -2), x.transpose(-1, -2)) for x, y in (first, second)]
    partial = _product(*first, acc_dtype, 1.0)
    total = _product(*second, like.dtype, 1.0, 1.0, partial)
    return total.transpose(-1, -2) if transposed else total


def _gate_and_up(h, interleaved):
    """The gate's and the up's products from h, the product against a combined [2I, K] weight:
    its column halves, or its even and odd columns."""
    half = h.size(-1) // 2
    return (h[..., 0::2], h[..., 1::2]) if interleaved else (h[..., :half], h[..., half:])


def _as_combined_rows(dg, du, interleaved):
    """dg and du side by side (or interleaved) as a combined weight's rows lie: _gate_and_up's inverse."""
    return torch.stack((dg, du), -1).flatten(-2) if interleaved else torch.cat((dg, du), -1)


def _swiglu_derivatives(g, u, dy, dtype):
    """dg and du of D = silu(g) * u for D's gradient dy (float32 or wider), in `dtype`:
    silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g)."""
    s = torch.sigmoid(g)
    return (dy * u * s * (1 + g * (1 - s))).to(dtype), (dy * g * s).to(dtype)


def _swiglu_grads(ctx, grad):
    """(dx, dw, dw_up), None where not needed."""
    x, w, w_up = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if not any(needs[:3]):
        return None, None, None
    if not ctx.default:
        raise NotImplementedError(f"epilogue: no gradient flows through a fused epilogue yet but the default, "
                                  f"{t.SWIGLU!r}; expected inputs that do not require grad (or torch.no_grad())")
    acc = torch.float32 if x.element_size() == 2 else x.dtype  # float32 sums (the CPU stand-ins: double)
    combined = w_up is None
    if combined:
        g, u = _gate_and_up(_product(x, w.t(), acc, 1.0), ctx.interleaved)  # from [M, 2I]
    else:
        g, u = _product(x, w.t(), acc, 1.0), _product(x, w_up.t(), acc, 1.0)
    dg, du = _swiglu_derivatives(g, u, grad.to(acc), x.dtype)
    grad_x = grad_w = grad_up = None
    if combined:
        dh = _as_combined_rows(dg, du, ctx.interleaved)
        if needs[0]:
            grad_x = _product_like(dh, w, x, 1.0)
        if needs[1]:
            grad_w = _product_like(dh.t(), x, w, 1.0)
    else:
        if needs[0]:
            grad_x = _sum_of_products_like((dg, w), (du, w_up), x, acc)
        if needs[1]:
            grad_w = _product_like(dg.t(), x, w, 1.0)
        if needs[2]:
            grad_up = _product_like(du.t(), x, w_up, 1.0)
    return grad_x, grad_w, grad_up


def _swiglu_backward(ctx, grad):
    # The operator's lists take gradients of their structure: a list of tensors (an empty one
    # too, as names is without tensors) one a tensor, other lists None.
    return (*_swiglu_grads(ctx, grad), None, None, None if ctx.names else [], [None] * ctx.inputs, None)


def _eager_swiglu_backward(ctx, grad):
    return (*_swiglu_grads(ctx, grad), None, None, None, None, None)


torch.library.register_autograd("gemmkit::swiglu_mm", _swiglu_backward, setup_context=_swiglu_setup_context)


# The grouped SwiGLU, D_g = silu(g) * u with g = x_g gate_g^T and u = x_g up_g^T for each group g's
# rows: _swiglu_grads' formula group by group. The backward recomputes g and u (float32) as
# grouped products over the same groups (rows no group owns 0), takes dD as 0 in those rows (it
# may hold anything there, NaN included, the forward's rows being undefined), and forms dg and du
# as the dense backward does. dx_g = dg_g gate_g + du_g up_g is a grouped product (one, of dh
# [dg du] side by side or interleaved, for a combined w [G, 2I, K]; two summed in float32 for the
# pair), rows no group owns 0, row-major as grouped_mm's dx. The weight gradients dW_g = dh_g^T
# x_g ([G, 2I, K] for a combined w, in its row order; [G, I, K] each for the pair) are
# grouped_wgrad over contiguous groups' rows, and for masked groups one batched product over
# every group's max_m rows, the rows past each count zeroed first (as grouped_mm's); each in its
# weight's layout. Differentiable with the default epilogue alone; sizes get no gradient.

def _grouped_swiglu_setup_context(ctx, inputs, output):
    x, w, w_up, sizes, layout, interleaved, epilogue, names, inputs_, out_dtype, max_sms = inputs
    ctx.default = epilogue in ("", t.SWIGLU)
    ctx.layout, ctx.interleaved, ctx.max_sms = layout, interleaved, max_sms
    ctx.names, ctx.inputs = len(names), len(inputs_)
    ctx.save_for_backward(x, w, w_up, sizes)


def _owned_rows(x, sizes, layout):
    """Whether a group owns each row of x: [G, max_m, 1] (masked) or [M_total, 1] (contiguous, the
    rows before the last end, clamped as the kernel reads the ends)."""
    rows = torch.arange(x.size(-2), device=x.device)
    if layout == "masked":
        return (rows < sizes.unsqueeze(1)).unsqueeze(-1)
    if sizes.numel() == 0:
        return torch.zeros(x.size(0), 1, dtype=torch.bool, device=x.device)
    return (rows < sizes.amax()).unsqueeze(-1)


def _grouped_swiglu_weight_grad(dh, x, sizes, w, layout, max_sms):
    """dh_g^T x_g in w's dtype and layout."""
    if layout == "contiguous":
        return _weight_grad(dh, x, sizes, w, max_sms)
    return _masked_weight_grad(dh, x, sizes, w)


def _grouped_swiglu_grads(ctx, grad):
    """(dx, dw, dw_up), None where not needed."""
    x, w, w_up, sizes = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if not any(needs[:3]):
        return None, None, None
    if not ctx.default:
        raise NotImplementedError(f"epilogue: no gradient flows through grouped_swiglu_mm with an epilogue but the "
                                  f"default, {t.SWIGLU!r}, yet; expected inputs that do not require grad (or "
                                  "torch.no_grad())")
    acc = torch.float32 if x.element_size() == 2 else x.dtype  # float32 sums (the CPU stand-ins: double)
    layout, max_sms = ctx.layout, ctx.max_sms
    combined = w_up is None
    if combined:
        g, u = _gate_and_up(_grouped_product(x, w.transpose(-1, -2), sizes, layout, acc, max_sms), ctx.interleaved)
    else:
        g = _grouped_product(x, w.transpose(-1, -2), sizes, layout, acc, max_sms)
        u = _grouped_product(x, w_up.transpose(-1, -2), sizes, layout, acc, max_sms)
    dy = torch.where(_owned_rows(x, sizes, layout), grad.to(acc), 0.0)
    dg, du = _swiglu_derivatives(g, u, dy, x.dtype)
    grad_x = grad_w = grad_up = None
    if combined:
        dh = _as_combined_rows(dg, du, ctx.interleaved)
        if needs[0]:
            grad_x = _grouped_product(dh, w, sizes, layout, x.dtype, max_sms)
        if needs[1]:
            grad_w = _grouped_swiglu_weight_grad(dh, x, sizes, w, layout, max_sms)
    else:
        if needs[0]:
            partial = _grouped_product(dg, w, sizes, layout, acc, max_sms)
            grad_x = (partial + _grouped_product(du, w_up, sizes, layout, acc, max_sms)).to(x.dtype)
        if needs[1]:
            grad_w = _grouped_swiglu_weight_grad(dg, x, sizes, w, layout, max_sms)
        if needs[2]:
            grad_up = _grouped_swiglu_weight_grad(du, x, sizes, w_up, layout, max_sms)
    return grad_x, grad_w, grad_up


def _grouped_swiglu_backward(ctx, grad):
    # The lists' gradients as _swiglu_backward's.
    return (*_grouped_swiglu_grads(ctx, grad), None, None, None, None, None if ctx.names else [],
            [None] * ctx.inputs, None, None)


def _eager_grouped_swiglu_backward(ctx, grad):
    return (*_grouped_swiglu_grads(ctx, grad), None, None, None, None, None, None, None, None)


torch.library.register_autograd("gemmkit::grouped_swiglu_mm", _grouped_swiglu_backward,
                                setup_context=_grouped_swiglu_setup_context)


# The FP8 dual GEMMs have no gradient: their backward refuses, as gemm's does for FP8 products
# (gemmkit.scaled_swiglu_mm and scaled_grouped_swiglu_mm refuse inputs that require grad before
# they get here).

def _no_setup_context(ctx, inputs, output):
    pass


def _fp8_swiglu_backward(function):
    def backward(ctx, grad):
        raise RuntimeError(f"gemmkit: FP8 products ({function}) are not differentiable")
    return backward


torch.library.register_autograd("gemmkit::scaled_swiglu_mm", _fp8_swiglu_backward("scaled_swiglu_mm"),
                                setup_context=_no_setup_context)
torch.library.register_autograd("gemmkit::scaled_grouped_swiglu_mm", _fp8_swiglu_backward("scaled_grouped_swiglu_mm"),
                                setup_context=_no_setup_context)


# Products with 4-bit weights have no gradient either: a call on inputs that require grad runs,
# and its backward raises, naming the function (int4_mm or mxfp4_mm; grouped_int4_mm or
# grouped_mxfp4_mm), as scaled_mm's does for FP8 products; an e4m3 x and its x_scale (W4A8)
# likewise.

def _w4_setup_context(ctx, inputs, output):
    ctx.function = f"{inputs[4]}_mm"


def _grouped_w4_setup_context(ctx, inputs, output):
    ctx.function = f"grouped_{inputs[6]}_mm"


def _w4_backward(ctx, grad):
    raise RuntimeError(f"gemmkit: {ctx.function} (4-bit weights) is not differentiable; expected inputs that do not "
                       "require grad (or torch.no_grad())")


torch.library.register_autograd("gemmkit::w4_mm", _w4_backward, setup_context=_w4_setup_context)
torch.library.register_autograd("gemmkit::grouped_w4_mm", _w4_backward, setup_context=_grouped_w4_setup_context)


# Quantisation (FP8, and 4-bit weights) has no gradient: its results never require grad, traced as
# in eager (whose direct launch makes plain tensors). Without this they required grad with no
# backward, and torch.compile dropped x's gradient with only a warning.

def _quantize_setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(*(result for result in output if result is not None))  # zeros may be None


def _quantize_backward(operator):
    def backward(ctx, *grads):
        raise RuntimeError(f"gemmkit: {operator} is not differentiable")  # unreachable: no output requires grad
    return backward


torch.library.register_autograd("gemmkit::quantize", _quantize_backward("quantize"),
                                setup_context=_quantize_setup_context)
torch.library.register_autograd("gemmkit::quantize_w4", _quantize_backward("quantize_w4"),
                                setup_context=_quantize_setup_context)


# --- eager autograd ------------------------------------------------------------------------------
# Where nothing is being traced, autograd records gemmkit's products through these Functions
# rather than through the operators: the same kernels (the operators' CUDA implementations
# above) and the same formulas, without the dispatcher's autograd wrapper, which costs about
# 100 us of host time a call against 20 for torch's own products (H200): enough to make an eager
# training step of many small experts wait for the host. Their forward takes ctx and calls the
# setup itself: a Function with a separate setup_context has every call's arguments bound to
# forward's signature by inspect (about 30 us a call); these never run under functorch
# transforms (_torch.eager), which would need that form.

def _eager_function(name, kernel, setup_context, backward):
    def forward(ctx, *inputs):
        output = kernel(*inputs)
        setup_context(ctx, inputs, output)
        return output
    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


EagerGemm = _eager_function("EagerGemm", _gemm, _setup_context, _backward)
EagerGroupedMm = _eager_function("EagerGroupedMm", _grouped_mm, _grouped_mm_setup_context, _grouped_mm_backward)
EagerSwiglu = _eager_function("EagerSwiglu", _swiglu_mm, _swiglu_setup_context, _eager_swiglu_backward)
EagerGroupedWgrad = _eager_function("EagerGroupedWgrad", _grouped_wgrad, _grouped_wgrad_setup_context,
                                    _grouped_wgrad_backward)
EagerGroupedSwiglu = _eager_function("EagerGroupedSwiglu", _grouped_swiglu_mm, _grouped_swiglu_setup_context,
                                     _eager_grouped_swiglu_backward)
