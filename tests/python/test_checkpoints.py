"""gemmkit.int4_from_gptq and gemmkit.int4_from_awq: GPTQ's and AWQ's int32-packed checkpoints as
int4_mm's inputs; gemmkit.mxfp4_from_gpt_oss: gpt-oss's MXFP4 tensors as mxfp4_mm's. On the CPU
(they are torch operations on any device): the words of the C++ reference's packing tests
(tests/cpu/lowbit_test.cpp, Int4Packing) unpacked to the codes they were packed from; random codes
and zero points packed here as each format's text states and unpacked back, N not a multiple of 8
and K odd after the conversion; symmetric zero points returned as None; act-order g_idx refused;
gpt-oss's blocks flattened and its exponents' values kept, stored N-contiguous per expert; the
argument errors. On an sm_90 GPU: int4_mm on the converted weights against the double product of
the checkpoint's own dequantisation, and mxfp4_mm on gpt-oss's converted tensors equal to it on
them as they are. Needs torch; skips, saying so, without it."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import gemmkit  # noqa: E402

I32, U8, BF16, F16 = torch.int32, torch.uint8, torch.bfloat16, torch.float16
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")


def words(nibbles):
    """int32 words [..., W] from their eight 4-bit fields [..., W, 8], the first in the low bits
    (bit 31 set gives a negative int32, as checkpoints hold them)."""
    value = sum(nibbles[..., t].to(torch.int64) << (4 * t) for t in range(8))
    return torch.where(value >= 2 ** 31, value - 2 ** 32, value).to(I32)


def gptq_pack(codes, zeros, zero_offset=1):
    """AutoGPTQ's qweight [K/8, N] and qzeros [G, ceil(N/8)] of codes [N, K] and zero points [N, G]."""
    n, k = codes.shape
    qweight = words(codes.t().reshape(k // 8, 8, n).permute(0, 2, 1))
    padded = torch.nn.functional.pad(zeros.t(), (0, -n % 8))  # [G, N rounded up to 8]
    qzeros = words(((padded - zero_offset) & 15).reshape(padded.size(0), -1, 8))
    return qweight, qzeros


def awq_pack(codes, zeros):
    """AWQ's qweight [K, ceil(N/8)] and qzeros [G, ceil(N/8)]: nibble t of word j holds column
    8j + AWQ_ORDER[t]."""
    def along_n(m):  # [rows, N] -> words [rows, ceil(N/8)]
        m = torch.nn.functional.pad(m, (0, -m.size(1) % 8)).reshape(m.size(0), -1, 8)
        return words(m[..., list(AWQ_ORDER)])
    return along_n(codes.t()), along_n(zeros.t())


def bytes_of(codes):
    """int4_mm's qweight of codes [N, K]: uint8 [N, ceil(K/2)], the even k in the low nibble."""
    codes = torch.nn.functional.pad(codes, (0, codes.size(1) % 2))
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(U8)


def random_case(n, k, group, seed):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k), generator=generator, dtype=torch.int64)
    zeros = torch.randint(0, 16, (n, -(-k // group)), generator=generator, dtype=torch.int64)
    scales = (torch.rand(-(-k // group), n, generator=generator) + 0.5).to(F16)
    return codes, zeros, scales


def test_the_reference_packings_words_unpack_to_their_codes():
    # tests/cpu/lowbit_test.cpp's pattern: 8 x 8, code (col + k) % 16 at column col, zero point col.
    codes = (torch.arange(8)[:, None] + torch.arange(8)[None, :]) % 16
    scales = torch.full((1, 8), 0.25, dtype=F16)
    qweight = torch.tensor([[0x76543210, 0x87654321 - 2 ** 32, 0x98765432 - 2 ** 32, 0xA9876543 - 2 ** 32,
                             0xBA987654 - 2 ** 32, 0xCBA98765 - 2 ** 32, 0xDCBA9876 - 2 ** 32, 0xEDCBA987 - 2 ** 32]],
                           dtype=I32)
    qzeros = torch.tensor([[0x6543210F]], dtype=I32)  # zero - 1: AutoGPTQ's v1
    q, s, z = gemmkit.int4_from_gptq(qweight, qzeros, scales, group=8 * 4)
    assert torch.equal(q, bytes_of(codes)) and s is scales
    assert torch.equal(z, torch.arange(8, dtype=F16)[None, :])
    awq_words = torch.tensor([[0x75316420], [0x86427531 - 2 ** 32]], dtype=I32)  # k = 0, 1
    q, _, z = gemmkit.int4_from_awq(awq_words, torch.tensor([[0x75316420]], dtype=I32), scales[:, :8], group=32)
    assert torch.equal(q, bytes_of(codes[:, :2]))
    assert torch.equal(z, torch.arange(8, dtype=F16)[None, :])


@pytest.mark.parametrize("n,k,group", [(8, 64, 32), (20, 256, 64), (13, 128, 128), (24, 96, 96)])
@pytest.mark.parametrize("zero_offset", [1, 0])
def test_gptq_round_trip(n, k, group, zero_offset):
    codes, zeros, scales = random_case(n, k, group, seed=n + k)
    qweight, qzeros = gptq_pack(codes, zeros, zero_offset)
    q, s, z = gemmkit.int4_from_gptq(qweight, qzeros, scales, group=group, zero_offset=zero_offset)
    assert q.dtype == U8 and q.shape == (n, k // 2) and q.is_contiguous()
    assert torch.equal(q, bytes_of(codes))
    assert s is scales
    assert z.dtype == F16 and torch.equal(z, zeros.t().to(F16))


@pytest.mark.parametrize("n,k,group", [(8, 64, 32), (20, 256, 64), (13, 129, 128), (24, 96, 96)])
def test_awq_round_trip(n, k, group):
    codes, zeros, scales = random_case(n, k, group, seed=2 * n + k)
    qweight, qzeros = awq_pack(codes, zeros)
    q, s, z = gemmkit.int4_from_awq(qweight, qzeros, scales, group=group)
    assert q.dtype == U8 and q.shape == (n, (k + 1) // 2)
    assert torch.equal(q, bytes_of(codes))
    assert s is scales and torch.equal(z, zeros.t().to(F16))


def test_symmetric_gptq_comes_back_without_zero_points():
    codes, _, scales = random_case(16, 64, 32, seed=5)
    eights = torch.full((16, 2), 8, dtype=torch.int64)
    q, _, z = gemmkit.int4_from_gptq(*gptq_pack(codes, eights), scales, group=32)
    assert z is None and torch.equal(q, bytes_of(codes))


def test_act_order_is_refused_and_a_trivial_g_idx_taken():
    codes, zeros, scales = random_case(8, 64, 32, seed=6)
    qweight, qzeros = gptq_pack(codes, zeros)
    in_order = torch.arange(64, dtype=I32) // 32
    gemmkit.int4_from_gptq(qweight, qzeros, scales, group=32, g_idx=in_order)
    with pytest.raises(ValueError, match="g_idx: .*act-order"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales, group=32, g_idx=in_order.flip(0))


def test_errors_name_the_argument():
    codes, zeros, scales = random_case(16, 64, 32, seed=7)
    qweight, qzeros = gptq_pack(codes, zeros)
    with pytest.raises(TypeError, match="qweight: dtype torch.int64"):
        gemmkit.int4_from_gptq(qweight.long(), qzeros, scales, group=32)
    with pytest.raises(TypeError, match="qzeros: dtype"):
        gemmkit.int4_from_gptq(qweight, qzeros.to(U8), scales, group=32)
    with pytest.raises(TypeError, match="scales: torch.float32"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales.float(), group=32)
    with pytest.raises(ValueError, match=r"scales: shape \[2, 16\]; expected \[ceil\(K/group\), N\] = \[1, 16\]"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales, group=64)
    with pytest.raises(ValueError, match="group: 48"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales, group=48)
    with pytest.raises(TypeError, match="group: float"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales, group=32.0)
    with pytest.raises(ValueError, match="qzeros: shape"):
        gemmkit.int4_from_gptq(qweight, qzeros[:1], scales, group=32)
    with pytest.raises(ValueError, match="zero_offset"):
        gemmkit.int4_from_gptq(qweight, qzeros, scales, group=32, zero_offset=2)
    with pytest.raises(ValueError, match="qweight: 1 dimensions"):
        gemmkit.int4_from_gptq(qweight.flatten(), qzeros, scales, group=32)
    awq_weight, awq_zeros = awq_pack(codes, zeros)
    with pytest.raises(ValueError, match=r"qweight: shape \[64, 1\]; expected \[K, ceil\(N/8\)\] = \[64, 3\]"):
        gemmkit.int4_from_awq(awq_weight[:, :1], awq_zeros, torch.ones(2, 24, dtype=F16), group=32)


@needs_sm90
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_converted_checkpoints_multiply_as_they_dequantise(dtype):
    n, k, group = 72, 512, 128
    codes, zeros, scales = random_case(n, k, group, seed=11)
    scales = (scales.float() / 64).to(dtype)
    x = torch.randn(5, k, device="cuda").to(dtype)
    index = torch.arange(k) // group
    expected_w = (codes.double() - zeros.double()[:, index]) * scales.double()[index].t()
    for convert, packed in ((gemmkit.int4_from_gptq, gptq_pack(codes, zeros)), (gemmkit.int4_from_awq, awq_pack(codes, zeros))):
        q, s, z = convert(*(t.cuda() for t in packed), scales.cuda(), group=group)
        d = gemmkit.int4_mm(x, q, s, z, group=group)
        ref = x.double() @ expected_w.cuda().t()
        bound = (x.double().abs() @ expected_w.abs().cuda().t()) * 2.0 ** -7 + 1e-3
        assert ((d.double() - ref).abs() <= bound).all(), convert.__name__


def gpt_oss_case(experts, n, k, seed, exponents=U8):
    """gpt-oss's blocks [E, N, K/32, 16] (random bytes: every FP4 code) and scales [E, N, K/32]
    (exponents 2^-3 .. 2^2)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (experts, n, k // 32, 16), generator=generator, dtype=torch.int64).to(U8)
    scales = torch.randint(124, 130, (experts, n, k // 32), generator=generator, dtype=torch.int64).to(U8)
    return blocks, scales.view(exponents)


@pytest.mark.parametrize("exponents", [U8] + ([torch.float8_e8m0fnu] if hasattr(torch, "float8_e8m0fnu") else []))
def test_gpt_oss_blocks_flatten_and_exponents_come_back_n_contiguous(exponents):
    experts, n, k = 3, 40, 192
    blocks, scales = gpt_oss_case(experts, n, k, seed=5, exponents=exponents)
    weight, stored = gemmkit.mxfp4_from_gpt_oss(blocks, scales)
    assert weight.dtype == U8 and weight.shape == (experts, n, k // 2)
    for e in range(experts):  # row n's bytes: its blocks in K's order
        assert torch.equal(weight[e], blocks[e].reshape(n, k // 2))
    assert weight.data_ptr() == blocks.data_ptr()  # a view of contiguous blocks
    assert stored.dtype == exponents and stored.shape == scales.shape
    assert torch.equal(stored.view(U8), scales.view(U8))
    assert stored[1].stride() == (1, n)  # one expert's [N, K/32], N-contiguous as mxfp4_mm reads it
    weight2, stored2 = gemmkit.mxfp4_from_gpt_oss(blocks[0], scales[0])  # one expert, no leading dimension
    assert weight2.shape == (n, k // 2) and stored2.stride() == (1, n)


def test_gpt_oss_errors_name_the_argument():
    blocks, scales = gpt_oss_case(1, 8, 64, seed=6)
    with pytest.raises(TypeError, match="blocks"):
        gemmkit.mxfp4_from_gpt_oss(blocks.to(I32), scales)
    with pytest.raises(ValueError, match="blocks"):
        gemmkit.mxfp4_from_gpt_oss(blocks.reshape(1, 8, 4, 8), scales)
    with pytest.raises(TypeError, match="scales"):
        gemmkit.mxfp4_from_gpt_oss(blocks, scales.to(F16))
    with pytest.raises(ValueError, match="scales"):
        gemmkit.mxfp4_from_gpt_oss(blocks, scales[..., :1])


@needs_sm90
def test_gpt_oss_converted_multiplies_as_it_lies():
    n, k = 264, 1024
    blocks, scales = gpt_oss_case(2, n, k, seed=7)
    weight, stored = gemmkit.mxfp4_from_gpt_oss(blocks.cuda(), scales.cuda())
    x = torch.randn(5, k, device="cuda").to(BF16)
    for e in range(2):  # the checkpoint's layout (exponents copied each call) gives the same bits
        as_it_lies = gemmkit.mxfp4_mm(x, blocks[e].cuda().reshape(n, k // 2), scales[e].cuda())
        assert torch.equal(gemmkit.mxfp4_mm(x, weight[e], stored[e]), as_it_lies)
