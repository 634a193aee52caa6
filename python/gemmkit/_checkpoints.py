"""4-bit weights as checkpoints store them, turned into int4_mm's and mxfp4_mm's inputs.

Both pack eight 4-bit codes into an int32, the first in the low bits, but along different
dimensions, and neither is a strided view of a K x N matrix of codes that the kernels could read
as it lies (gemmkit/gemm.h wants K's codes adjacent, two a byte):
  GPTQ (AutoGPTQ): qweight [K/8, N], word (i, n) holding codes k = 8i .. 8i + 7 of column n;
               qzeros [G, N/8], word (g, j) holding the zero points of columns 8j .. 8j + 7, each
               stored minus one in AutoGPTQ's "v1" format (zero_offset=1; GPTQModel's v2: 0);
  AWQ:         qweight [K, N/8], word (k, j) holding columns 8j + ORDER[t] in nibble t (AWQ's
               interleaving for its fast dequantisation); qzeros [G, N/8] in the same order,
               without offset;
and scales [G, N] (float16 or bfloat16) in both, which int4_mm reads as they lie. gpt-oss's
MXFP4 tensors are mxfp4_mm's layout already but for their exponents, [N, K/32] with K's blocks
adjacent, which mxfp4_mm would copy N-contiguous on every call. These run once, when a checkpoint
is loaded, as plain torch operations on the tensors' device.
"""

import torch

from ._torch import check_w4_group, group_index

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the column of nibble t within its word
SCALE_DTYPES = (torch.bfloat16, torch.float16)


def int4_from_gptq(qweight, qzeros, scales, *, group=128, g_idx=None, zero_offset=1):
    """(qweight, scales, zeros or None) for int4_mm from a GPTQ checkpoint's tensors (AutoGPTQ's
    layout, see the module's text): qweight int32 [K/8, N] becomes uint8 [N, K/2] (the even k in
    the low nibble); scales [ceil(K/group), N] come back as they are; the zero points, qzeros int32
    [ceil(K/group), ceil(N/8)] stored minus `zero_offset` (1 for AutoGPTQ's v1 format, 0 for v2),
    as numbers of the scales' dtype, or None where every one is 8 (symmetric quantisation, which
    int4_mm runs faster without them). group: the checkpoint's group_size, K (or more) for its -1.
    g_idx, where the checkpoint has one, must map k to k // group: act-order checkpoints
    (desc_act) put K's rows in groups out of order, which int4_mm cannot read. TypeError for a
    dtype, ValueError for anything else, naming the argument."""
    _check_int32(qweight, "qweight")
    if qweight.dim() != 2:
        raise ValueError(f"qweight: {qweight.dim()} dimensions; expected 2, [K/8, N]")
    k, n = 8 * qweight.size(0), qweight.size(1)
    group = _checked_group(group, k)
    _check_scales_and_zeros(qzeros, scales, k, n, group)
    if not isinstance(zero_offset, int) or zero_offset not in (0, 1):
        raise ValueError(f"zero_offset: {zero_offset!r}; expected 1 (AutoGPTQ's v1 format) or 0 (v2)")
    if g_idx is not None:
        expected = torch.arange(k, device=g_idx.device) // group
        if g_idx.shape != (k,) or not torch.equal(g_idx.to(torch.int64), expected):
            raise ValueError(f"g_idx: not k // {group} for k in [0, {k}): an act-order checkpoint (desc_act), whose "
                             "groups are not contiguous along K; int4_mm takes groups of consecutive K only")
    codes = _nibbles(qweight).permute(1, 0, 2).reshape(n, k)  # [K/8, N, 8] -> [N, K]
    zeros = (_nibbles(qzeros).flatten(1)[:, :n] + zero_offset) & 15
    return _pack_rows(codes), scales, _zero_points(zeros, scales)


def int4_from_awq(qweight, qzeros, scales, *, group=128):
    """(qweight, scales, zeros) for int4_mm from an AWQ checkpoint's tensors (see the module's
    text): qweight int32 [K, N/8] becomes uint8 [N, K/2] (the even k in the low nibble); scales
    [ceil(K/group), N] come back as they are; the zero points, qzeros int32 [ceil(K/group), N/8],
    as numbers of the scales' dtype. N is the scales'. group: the checkpoint's q_group_size.
    TypeError for a dtype, ValueError for anything else, naming the argument."""
    _check_int32(qweight, "qweight")
    if qweight.dim() != 2:
        raise ValueError(f"qweight: {qweight.dim()} dimensions; expected 2, [K, N/8]")
    k = qweight.size(0)
    group = _checked_group(group, k)
    if scales.dim() != 2:
        raise ValueError(f"scales: {scales.dim()} dimensions; expected 2, [ceil(K/group), N]")
    n = scales.size(1)
    if qweight.size(1) != -(-n // 8):
        raise ValueError(f"qweight: shape {list(qweight.shape)}; expected [K, ceil(N/8)] = [{k}, {-(-n // 8)}] for "
                         f"the scales' N = {n}")
    _check_scales_and_zeros(qzeros, scales, k, n, group)
    in_order = list(AWQ_ORDER.index(column) for column in range(8))  # nibble of each column
    codes = _nibbles(qweight)[..., in_order].flatten(1)[:, :n].t()  # [K, N/8, 8] -> [N, K]
    zeros = _nibbles(qzeros)[..., in_order].flatten(1)[:, :n]
    return _pack_rows(codes), scales, zeros.to(scales.dtype)


def mxfp4_from_gpt_oss(blocks, scales):
    """(weight, scales) for mxfp4_mm from gpt-oss's MXFP4 tensors (its `*.blocks` and `*.scales`):
    blocks uint8 [..., N, K/32, 16], 32 FP4 values a block, two a byte, the even one in the low
    nibble, become weight [..., N, K/2] (a view where blocks is contiguous); scales [..., N, K/32]
    of uint8 or float8_e8m0fnu (exponents biased by 127) come back with their shape, dtype and
    values, stored N-contiguous (strides (..., 1, N)), which mxfp4_mm reads as they lie instead of
    copying them so on every call. Leading dimensions (gpt-oss's experts) are kept: [e] of both is
    expert e's. TypeError for a dtype, ValueError for a shape, naming the argument."""
    if not isinstance(blocks, torch.Tensor) or blocks.dtype != torch.uint8:
        raise TypeError(f"blocks: {getattr(blocks, 'dtype', type(blocks).__name__)}; expected a torch.Tensor of "
                        "uint8, two FP4 values a byte")
    if blocks.dim() < 3 or blocks.size(-1) != 16:
        raise ValueError(f"blocks: shape {list(blocks.shape)}; expected [..., N, K/32, 16], 16 bytes a block of 32")
    exponent_types = (torch.uint8, getattr(torch, "float8_e8m0fnu", torch.uint8))
    if not isinstance(scales, torch.Tensor) or scales.dtype not in exponent_types:
        raise TypeError(f"scales: {getattr(scales, 'dtype', type(scales).__name__)}; expected a torch.Tensor of "
                        "uint8 or float8_e8m0fnu exponents")
    if scales.shape != blocks.shape[:-1]:
        raise ValueError(f"scales: shape {list(scales.shape)}; expected blocks' [..., N, K/32] = "
                         f"{list(blocks.shape[:-1])}")
    weight = blocks.reshape(*blocks.shape[:-2], blocks.size(-2) * 16)
    return weight, scales.transpose(-1, -2).contiguous().transpose(-1, -2)


def _nibbles(words):
    """int32 words [..., W] as their eight 4-bit fields [..., W, 8], the low bits first."""
    shifts = torch.arange(0, 32, 4, device=words.device, dtype=torch.int32)
    return (words.unsqueeze(-1) >> shifts) & 15


def _pack_rows(codes):
    """codes [N, K] (0..15) as int4_mm's qweight, uint8 [N, ceil(K/2)]: two a byte along K, the
    even k in the low nibble (an odd K's last high nibble 0)."""
    codes = torch.nn.functional.pad(codes, (0, codes.size(1) % 2)).to(torch.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()


def _zero_points(zeros, scales):
    """Zero points [G, N] as numbers of the scales' dtype, or None where all are 8."""
    return None if bool((zeros == 8).all()) else zeros.to(scales.dtype)


def _check_int32(t, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {type(t).__name__}; expected a torch.Tensor of int32 words")
    if t.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {t.dtype}; expected torch.int32, eight 4-bit codes a word")


def _checked_group(group, k):
    """`group` as an int that int4_mm takes for K = k (a checkpoint's group size -1 is K)."""
    group = group_index(group)
    check_w4_group("int4", group, k)
    return group


def _check_scales_and_zeros(qzeros, scales, k, n, group):
    groups = -(-k // group)
    if not isinstance(scales, torch.Tensor) or scales.dtype not in SCALE_DTYPES:
        raise TypeError(f"scales: {getattr(scales, 'dtype', type(scales).__name__)}; expected a float16 or bfloat16 "
                        "tensor")
    if tuple(scales.shape) != (groups, n):
        raise ValueError(f"scales: shape {list(scales.shape)}; expected [ceil(K/group), N] = [{groups}, {n}] for "
                         f"K = {k}, group {group}")
    _check_int32(qzeros, "qzeros")
    if tuple(qzeros.shape) != (groups, -(-n // 8)):
        raise ValueError(f"qzeros: shape {list(qzeros.shape)}; expected [ceil(K/group), ceil(N/8)] = "
                         f"[{groups}, {-(-n // 8)}]")
