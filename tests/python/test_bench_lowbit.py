"""python -m gemmkit.bench's lines with 4-bit weights (bench/suites/lowbit.txt): gemmkit.int4_mm
against torch._weight_int4pack_mm on the same codes, scales and zero points, gemmkit.mxfp4_mm
against torch.mm on the weights dequantised, W4A8 (e4m3 activations) against torch._scaled_mm on
e4m3 weights of the shape, a stand-in, and A8W4 in MX (mx exponents) against nothing of torch's
(gemmkit/_bench_lowbit.py). Without a GPU: the lines
as the bench reads them, its refusals (batched w4 lines; the lines torch's int4 kernel cannot run,
and why), both sides' operands built on the CPU, and torch's CPU int4 kernel on them against a
float64 product of the weights as gemmkit reads them, which proves the scales_and_zeros layout,
the zero convention and the groups, and that the wrong ones fail the bench's check. That torch's
CUDA kernel reads the repacked bytes so (the even k in the high nibble) only a GPU run proves: on
an sm_90 GPU (those tests skip, saying so, elsewhere) torch's CUDA int4 product against the same
check, then int4, int4 with zero points, MXFP4 and a line torch refuses, end to end, with both
times in the JSON, and W4A8 lines likewise. Needs torch; skips, saying so, without it."""

import json
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")

from gemmkit import DType, ScaleMode  # noqa: E402
from gemmkit import _bench_lowbit as lowbit  # noqa: E402
from gemmkit import bench as python_bench  # noqa: E402
from gemmkit._bench_buffers import BufferSet  # noqa: E402
from gemmkit._gemmkit import bench  # noqa: E402

SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not SM90, reason="no sm_90 GPU")
BF16, U8, E4M3 = torch.bfloat16, torch.uint8, torch.float8_e4m3fn


def lines(tmp_path, text):
    """The dense lines of a suite holding `text`."""
    suite = tmp_path / "w4.txt"
    suite.write_text(text)
    return bench.load_bench_suite(str(suite)).dense


def line(tmp_path, text):
    return lines(tmp_path, text)[0]


def run_bench(*args):
    return subprocess.run([sys.executable, "-m", "gemmkit.bench", *args], capture_output=True, text=True)


def gemmkit_weights(p, s):
    """W [N, K] in double as int4_mm's docstring states it, written apart from _bench_lowbit: the
    code of W[n, k] in byte k // 2 of row n, the even k in the low nibble; (q - zero) * scale, zero
    8 without zeros; for MXFP4 the e2m1 value (sign bit 3) times 2^(e - 127)."""
    k = torch.arange(p.k)
    q = (s.w[:, k // 2].long() >> (4 * (k % 2))) & 15
    if p.b_dtype == DType.e2m1:
        magnitude = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)[q & 7]
        return torch.where(q >= 8, -magnitude, magnitude) * torch.exp2(s.scales.view(U8)[:, k // 32].double() - 127)
    scale = s.scales.double()[k // p.group].t()
    zero = 8.0 if s.zeros is None else s.zeros.double()[k // p.group].t()
    return (q.double() - zero) * scale


# --- without a GPU -----------------------------------------------------------------------------------

def test_the_lowbit_suite_reads_as_the_cli_writes_it():
    suite = bench.load_bench_suite(python_bench.suite_path("lowbit"))
    assert len(suite.dense) == 84 and len(suite.grouped) == 24
    # Its grouped rows (gemmkit bench's only: python -m gemmkit.bench lists them, not run) hold
    # 4-bit weights as its dense lines do.
    assert all(g.dense.w4 and g.op in ("fwd", "masked") for g in suite.grouped)
    seen = set()
    for p in suite.dense:
        assert p.w4 and p.batch == 1 and p.layout == "NT" and p.out_dtype == DType.bf16, p.type_spec
        seen.add(p.type_spec)
        if p.in_dtype == DType.e2m1:  # FP4 x FP4: A packed and scaled as MXFP4 weights are, M x K
            assert (p.b_dtype, p.mode, p.mode_a, p.group) == (DType.e2m1, ScaleMode.mx, ScaleMode.mx, 32), p.type_spec
            packed = (p.m + p.n) * (p.k // 2 + -(-p.k // 32))  # codes and an exponent per 32 of K, a row
            assert p.bytes == packed + p.m * p.n * 2
            continue
        if p.w4a8:  # e4m3 A, a byte an element, scaled per token or by mx exponents (left out of the bytes)
            assert (p.in_dtype, p.zeros) == (DType.e4m3, False), p.type_spec
            assert p.mode_a in (ScaleMode.rowwise, ScaleMode.mx), p.type_spec
            if p.b_dtype == DType.e2m1:  # MXFP4: a ue8m0 byte per 32 of K
                assert (p.mode, p.group) == (ScaleMode.mx, 32), p.type_spec
                scale_bytes = -(-p.k // 32) * p.n
            else:  # A's mx exponents (A8W4 in MX) against int4 in groups of 32
                group = 32 if p.mode_a == ScaleMode.mx else 128
                assert (p.b_dtype, p.mode, p.group) == (DType.u4, ScaleMode.group, group), p.type_spec
                scale_bytes = -(-p.k // group) * p.n * 2
            assert p.bytes == p.m * p.k + p.n * p.k // 2 + scale_bytes + p.m * p.n * 2
            continue
        assert p.in_dtype == DType.bf16 and p.mode_a == ScaleMode.none, p.type_spec
        if p.type_spec == "bf16,w4:mxfp4":
            assert (p.b_dtype, p.mode, p.group, p.zeros) == (DType.e2m1, ScaleMode.mx, 32, False)
            scale_bytes = -(-p.k // 32) * p.n
        else:
            assert (p.b_dtype, p.mode, p.group) == (DType.u4, ScaleMode.group, 128)
            assert p.zeros == p.type_spec.endswith("z")
            scale_bytes = -(-p.k // 128) * p.n * 2 * (2 if p.zeros else 1)
            assert lowbit.int4_refusal(p) == "", p.type_spec  # torch runs every int4 line of the suite
        # What the copy yardstick moves and GB/s counts: A, the packed codes, scales, zeros and D.
        assert p.bytes == p.m * p.k * 2 + p.n * p.k // 2 + scale_bytes + p.m * p.n * 2
    assert seen == {"bf16,w4:int4g128", "bf16,w4:int4g128z", "bf16,w4:mxfp4", "e4m3,w4:int4g128 rowwise",
                    "e4m3,w4:mxfp4 rowwise", "e4m3,w4:mxfp4 mx", "e4m3,w4:int4g32 mx", "e2m1,w4:mxfp4 mx"}


def test_batched_w4_lines_are_refused_in_one_line(tmp_path):
    suite = tmp_path / "batched.txt"
    suite.write_text("64 64 64\n1 4096 4096 NT bf16,w4:int4g128 2\n")
    shown = run_bench("--suite", str(suite))
    assert shown.returncode == 1
    assert shown.stderr == (f"gemmkit.bench: {suite}:2: 4-bit weights over a batch of 2 (bf16,w4:int4g128), which "
                            "only gemmkit bench times (gemmkit.int4_mm and mxfp4_mm take one weight matrix); expected "
                            "w4 lines without a batch\n")


@pytest.mark.skipif(SM90, reason="with an sm_90 GPU the suite runs (test_w4_lines_run_against_torch)")
def test_w4_lines_pass_the_suite_checks(tmp_path):
    suite = tmp_path / "lowbit.txt"
    suite.write_text("64 64 64\n1 4096 4096 NT bf16,w4:int4g128\n1 2880 2880 NT bf16,w4:mxfp4\n")
    shown = run_bench("--suite", str(suite))
    assert (shown.returncode, shown.stderr) == (1, "gemmkit.bench: needs an sm_90 GPU (H100, H200)\n")


def test_the_lines_torch_int4_kernel_cannot_run_say_why(tmp_path):
    name = "torch._weight_int4pack_mm"
    refused = lines(tmp_path, """4 256 256 NT f16,w4:int4g128
4 256 256 NT bf16,w4:int4g128:f32
4 256 256 TT bf16,w4:int4g128
4 256 1024 NT bf16,w4:int4g512
4 256 320 NT bf16,w4:int4g128
4 260 256 NT bf16,w4:int4g64z
4 8 96 NT bf16,w4:int4g32z
4 256 512 NT bf16,w4:int4g256
""")
    assert [lowbit.int4_refusal(p) for p in refused] == [
        f"{name} takes bf16 activations only", f"{name} writes bf16 only",
        f"{name} takes A row-major (contiguous), not stored transposed",
        f"{name} takes groups of 32, 64, 128 or 256, not 512", f"{name} takes K a multiple of the group, not K = 320",
        f"{name} takes N a multiple of 8, not N = 260", "", ""]
    p = refused[0]
    assert lowbit.torch_calls(p, [BufferSet(p, device="cpu")]) == ([], f"{name} takes bf16 activations only")
    # tinygemm packs 8, 4 or 2 k-tiles of 16: the most that K is a multiple of.
    assert [lowbit.inner_k_tiles(k) for k in (4096, 2880, 192, 96)] == [8, 4, 4, 2]


@pytest.mark.parametrize("spec", ["bf16,w4:int4g64z", "f16,w4:int4g128:f32", "bf16,w4:mxfp4"])
def test_w4_buffer_sets_hold_the_weights_as_gemmkit_takes_them(tmp_path, spec):
    p = line(tmp_path, f"3 40 200 TT {spec}\n")
    s = BufferSet(p, device="cpu")
    a_dtype = torch.float16 if spec.startswith("f16") else BF16
    assert s.w4 and not s.fp8 and not hasattr(s, "b")
    assert s.a.shape == (3, 200) and s.a.dtype == a_dtype and s.a.stride() == (1, 3)  # TT: A stored transposed
    assert bool(s.a.abs().max() <= 1)
    assert s.w.shape == (40, 100) and s.w.dtype == U8
    assert s.d.shape == (3, 40) and s.d.dtype == (torch.float32 if spec.endswith(":f32") else a_dtype)
    assert bool(s.d.isnan().all())
    if p.b_dtype == DType.e2m1:
        assert s.scales.shape == (40, 7) and s.scales.dtype == torch.float8_e8m0fnu and s.zeros is None
        assert set(s.scales.view(U8).unique().tolist()) <= {125, 126, 127, 128}  # 2^-2 .. 2^1
        return
    groups = -(-200 // p.group)
    assert s.scales.shape == (groups, 40) and s.scales.dtype == a_dtype
    assert bool((s.scales >= 0.5).all() and (s.scales <= 2).all())
    if p.zeros:
        assert s.zeros.shape == s.scales.shape and s.zeros.dtype == a_dtype
        assert set(s.zeros.unique().tolist()) <= set(map(float, range(16)))
    else:
        assert s.zeros is None


def test_the_bytes_for_torch_cuda_are_torch_testings_packing(tmp_path):
    p = line(tmp_path, "2 16 128 NT bf16,w4:int4g32\n")
    s = BufferSet(p, device="cpu")
    codes = lowbit.codes(s.w, p.k)
    k = torch.arange(p.k)
    assert torch.equal(codes.long(), (s.w[:, k // 2].long() >> (4 * (k % 2))) & 15)  # the even k in the low nibble
    # torch 2.11's torch.testing._internal.common_quantization._group_quantize_tensor packs codes
    # [N, K] so for any device but the CPU, for _convert_weight_to_int4pack:
    torch_packing = (codes.int()[::, ::2] << 4 | codes.int()[::, 1::2]).to(U8)
    assert torch.equal(lowbit.tinygemm_bytes(s.w), torch_packing)


def test_scales_and_zeros_are_torch_int4_kernels_pairs(tmp_path):
    p = line(tmp_path, "2 24 256 NT bf16,w4:int4g64z\n")
    s = BufferSet(p, device="cpu")
    pairs = lowbit.tinygemm_scales_and_zeros(s.scales, s.zeros)
    assert pairs.shape == (4, 24, 2) and pairs.dtype == BF16 and pairs.is_contiguous()
    assert torch.equal(pairs[..., 0], s.scales)
    assert torch.equal(pairs[..., 1], ((8 - s.zeros.double()) * s.scales.double()).to(BF16))
    symmetric = lowbit.tinygemm_scales_and_zeros(s.scales, None)
    assert torch.equal(symmetric[..., 0], s.scales) and not symmetric[..., 1].any()


def torch_cpu_product(p, s):
    """torch's output for w4 line p on CPU set s, through the bench's own calls."""
    (function, arguments, note), = lowbit.torch_calls(p, [s])[0]
    return function(*arguments(s)), note


@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("zeros", [False, True])
def test_torch_cpu_int4_kernel_on_the_bench_operands_matches_float64(tmp_path, group, zeros):
    p = line(tmp_path, f"5 32 512 NT bf16,w4:int4g{group}{'z' if zeros else ''}\n")
    torch.manual_seed(group + zeros)
    s = BufferSet(p, device="cpu")
    assert torch.equal(lowbit.exact_weights(p, s, list(range(p.n)))[0], gemmkit_weights(p, s))
    out, note = torch_cpu_product(p, s)
    assert note == "" and out.shape == (5, 32) and out.dtype == BF16
    assert lowbit.check(p, s, {"torch": out}) == {}
    # The check fails the conventions the bench does not use: the nibbles as gemmkit stores them
    # (the CPU kernel's codes read from the swapped bytes), and a zero of z * scale.
    swapped = torch._convert_weight_to_int4pack_for_cpu(lowbit.codes(lowbit.tinygemm_bytes(s.w), p.k).int(), 8)
    wrong = lowbit.int4_product(s.a, swapped, group, s.torch_scales)
    assert list(lowbit.check(p, s, {"torch": wrong})) == ["torch"]
    if zeros:
        other_zero = torch.stack((s.scales, s.zeros * s.scales), -1).contiguous()
        wrong = lowbit.int4_product(s.a, s.torch_w, group, other_zero)
        assert lowbit.check(p, s, {"torch": wrong})["torch"].startswith("torch differs from a float64 product")


def test_mxfp4_lines_run_torch_mm_on_the_dequantised_weights(tmp_path):
    p = line(tmp_path, "4 16 96 NT bf16,w4:mxfp4\n")
    s = BufferSet(p, device="cpu")
    exact = gemmkit_weights(p, s)
    assert torch.equal(lowbit.exact_weights(p, s, list(range(p.n)))[0], exact)
    out, note = torch_cpu_product(p, s)
    assert note == lowbit.MXFP4_NOTE
    assert s.torch_w.dtype == BF16 and torch.equal(s.torch_w.double(), exact)  # exact in bf16
    assert out is s.d_torch and lowbit.check(p, s, {"torch": out}) == {}
    assert list(lowbit.check(p, s, {"ours": -out})) == ["ours"]
    f16 = line(tmp_path, "4 16 96 NT f16,w4:mxfp4\n")  # (an f32 output, torch.mm's out_dtype, is CUDA's only)
    s = BufferSet(f16, device="cpu")
    out, _ = torch_cpu_product(f16, s)
    assert s.torch_w.dtype == out.dtype == torch.float16
    assert lowbit.check(f16, s, {"torch": out}) == {}


@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
def test_w4a8_buffer_sets_hold_e4m3_activations_their_scales_and_bf16_group_scales(tmp_path, mode):
    p = line(tmp_path, f"3 40 300 NT e4m3,w4:int4g128z {mode}\n")
    s = BufferSet(p, device="cpu")
    assert s.w4 and not s.fp8 and p.w4a8 and p.mode_a == getattr(ScaleMode, mode)
    assert s.a.shape == (3, 300) and s.a.dtype == E4M3 and bool(s.a.float().abs().max() <= 1)
    shape, strides = {"tensor": ((), ()), "rowwise": ((3, 1), (1, 1)), "block": ((3, 3), (1, 3))}[mode]
    assert s.sa.shape == shape and s.sa.stride() == strides and s.sa.dtype == torch.float32  # block: M-contiguous
    assert bool((s.sa >= 0.5).all() and (s.sa <= 2).all())
    assert s.w.shape == (40, 150) and s.scales.shape == s.zeros.shape == (3, 40)
    assert s.scales.dtype == s.zeros.dtype == BF16
    assert s.d.dtype == BF16 and bool(s.d.isnan().all())


@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
def test_w4a8_lines_time_torch_scaled_mm_on_e4m3_weights_as_a_stand_in(tmp_path, mode):
    p = line(tmp_path, f"4 48 384 NT e4m3,w4:int4g128 {mode}\n")
    s = BufferSet(p, device="cpu")
    calls, why = lowbit.torch_calls(p, [s])
    assert why == ""
    assert [note for _, _, note in calls] == [lowbit.W4A8_NOTE] + (
        [] if mode == "tensor" else [f"{lowbit.W4A8_NOTE}, per-tensor scales"])
    assert s.torch_w.shape == (48, 384) and s.torch_w.dtype == E4M3
    assert s.torch_sb.shape == {"tensor": (), "rowwise": (1, 48), "block": (3, 1)}[mode]
    assert lowbit.torch_bytes(p) == 48 * 384  # its e4m3 weights
    function, arguments, _ = calls[-1]  # per-tensor (torch's CPU _scaled_mm takes no other scales)
    a, w, *_ = arguments(s)
    assert a is s.a and w is s.torch_w
    out = function(*arguments(s))
    assert out.shape == (4, 48) and out.dtype == BF16


@pytest.mark.parametrize("mode", ["tensor", "rowwise", "block"])
def test_the_check_of_w4a8_lines_multiplies_x_by_its_scales(tmp_path, mode):
    p = line(tmp_path, f"5 32 300 NT e4m3,w4:int4g128z {mode}\n")
    torch.manual_seed(7)
    s = BufferSet(p, device="cpu")
    x = s.a.double()
    scale = s.sa.double().reshape(()) if mode == "tensor" else s.sa.double()
    x_scaled = x * (scale.repeat_interleave(128, 1)[:, :p.k] if mode == "block" else scale)
    exact = x_scaled @ gemmkit_weights(p, s).t()
    assert lowbit.check(p, s, {"ours": exact.to(BF16)}) == {}
    unscaled = (x @ gemmkit_weights(p, s).t()).to(BF16)
    assert list(lowbit.check(p, s, {"ours": unscaled})) == ["ours"]


@pytest.mark.parametrize("spec", ["e4m3,w4:mxfp4", "e4m3,w4:int4g32z"])
def test_a8w4_mx_buffer_sets_hold_the_exponents_and_torch_runs_nothing(tmp_path, spec):
    p = line(tmp_path, f"3 40 300 NT {spec} mx\n")
    s = BufferSet(p, device="cpu")
    assert s.w4 and p.w4a8 and p.mode_a == ScaleMode.mx and p.group == 32
    assert s.a.shape == (3, 300) and s.a.dtype == E4M3
    # One exponent a row per 32 of K (ceil(300/32) = 10), 2^-2 .. 2^1, as FP8 mx lines' A has them.
    assert s.sa.shape == (3, 10) and s.sa.dtype == torch.float8_e8m0fnu and s.sa.is_contiguous()
    assert set(s.sa.view(U8).unique().tolist()) <= {125, 126, 127, 128}
    # torch has no MXFP8 GEMM on Hopper (nor a W4A8 one): no calls, the reason said, no bytes of its own.
    assert lowbit.torch_calls(p, [s]) == ([], lowbit.W4A8_MX_WHY)
    assert lowbit.torch_bytes(p) == 0


def test_the_check_of_a8w4_mx_lines_scales_x_per_32_of_k(tmp_path):
    p = line(tmp_path, "5 32 300 NT e4m3,w4:mxfp4 mx\n")
    torch.manual_seed(11)
    s = BufferSet(p, device="cpu")
    k = torch.arange(p.k)
    x_scaled = s.a.double() * torch.exp2(s.sa.view(U8)[:, k // 32].double() - 127)
    exact = x_scaled @ gemmkit_weights(p, s).t()
    assert lowbit.check(p, s, {"ours": exact.to(BF16)}) == {}
    unscaled = (s.a.double() @ gemmkit_weights(p, s).t()).to(BF16)
    assert list(lowbit.check(p, s, {"ours": unscaled})) == ["ours"]


def test_a8w4_mx_lines_name_the_groups_they_need(tmp_path):
    with pytest.raises(ValueError, match=r"w4\.txt:1: scaling mode 'mx' for the e4m3 activations of "
                                         r"'e4m3,w4:int4g128' against weights in groups of 128 \(mx exponents go with "
                                         r"weights in groups of 32 of K: mxfp4, int4g32\); expected"):
        line(tmp_path, "16 8192 8192 NT e4m3,w4:int4g128 mx\n")


# --- on an sm_90 GPU -----------------------------------------------------------------------------

@needs_sm90
@pytest.mark.parametrize("k", [4096, 192, 96])  # 8, 4 and 2 k-tiles packed together
@pytest.mark.parametrize("spec", ["bf16,w4:int4g32", "bf16,w4:int4g32z"])
def test_torch_cuda_int4_kernel_reads_the_repacked_weights(tmp_path, k, spec):
    p = line(tmp_path, f"40 136 {k} NT {spec}\n")
    s = BufferSet(p)
    (function, arguments, _), = lowbit.torch_calls(p, [s])[0]
    out = function(*arguments(s))
    assert out.shape == (40, 136) and out.dtype == BF16
    assert lowbit.check(p, s, {"torch": out}) == {}


@needs_sm90
def test_w4_lines_run_against_torch(tmp_path):
    suite, out = tmp_path / "lowbit-tiny.txt", tmp_path / "out.json"
    suite.write_text("""16 4096 4096 NT bf16,w4:int4g128
1 4096 4096 NT bf16,w4:int4g128z
16 5760 2880 NT bf16,w4:mxfp4
4 256 256 NT f16,w4:int4g128
4 256 256 NT f16,w4:mxfp4:f32
""")
    shown = run_bench("--suite", str(suite), "--json", str(out), "--warmup", "1", "--runs", "3")
    assert shown.returncode == 0, shown.stderr
    assert "differs" not in shown.stderr, shown.stderr
    assert ("torch cannot run 4x256x256 NT f16,w4:int4g128 (torch._weight_int4pack_mm takes bf16 activations "
            "only): no baseline") in shown.stderr
    assert f"* torch us: {lowbit.MXFP4_NOTE}" in shown.stdout, shown.stdout
    records = json.loads(out.read_text())["records"]
    assert [r["dtype"] for r in records] == ["bf16,w4:int4g128", "bf16,w4:int4g128z", "bf16,w4:mxfp4",
                                             "f16,w4:int4g128", "f16,w4:mxfp4:f32"]
    for r in records:
        assert r["ours_us"] > 0 and math.isfinite(r["gbps"]) and r["config"], r
    for r in records[:2]:
        assert r["baseline_us"] > 0 and r["baseline_note"] is None, r
    for r in records[2], records[4]:
        assert r["baseline_us"] > 0 and r["baseline_note"] == lowbit.MXFP4_NOTE, r
    assert records[3]["baseline_us"] is None


@needs_sm90
def test_w4a8_lines_run_against_torch_scaled_mm(tmp_path):
    suite, out = tmp_path / "lowbit-w4a8.txt", tmp_path / "out.json"
    suite.write_text("""16 4096 4096 NT e4m3,w4:int4g128
1 4096 4096 NT e4m3,w4:int4g128z
64 4096 4096 NT e4m3,w4:int4g128 block
4 256 256 NT e4m3,w4:int4g128:f32 tensor
""")
    shown = run_bench("--suite", str(suite), "--json", str(out), "--warmup", "1", "--runs", "3")
    assert shown.returncode == 0, shown.stderr
    assert "differs" not in shown.stderr, shown.stderr
    records = json.loads(out.read_text())["records"]
    assert [r["dtype"] for r in records] == ["e4m3,w4:int4g128 rowwise", "e4m3,w4:int4g128z rowwise",
                                             "e4m3,w4:int4g128 block", "e4m3,w4:int4g128:f32 tensor"]
    for r in records:
        assert r["ours_us"] > 0 and math.isfinite(r["gbps"]) and r["config"], r
        assert r["baseline_us"] > 0 and r["baseline_note"].startswith(lowbit.W4A8_NOTE), r


@needs_sm90
def test_a8w4_mx_lines_run_without_a_torch_baseline(tmp_path):
    suite, out = tmp_path / "lowbit-mx.txt", tmp_path / "out.json"
    suite.write_text("""16 5760 2880 NT e4m3,w4:mxfp4 mx
1 4096 4096 NT e4m3,w4:int4g32z mx
""")
    shown = run_bench("--suite", str(suite), "--json", str(out), "--warmup", "1", "--runs", "3")
    assert shown.returncode == 0, shown.stderr
    assert "differs" not in shown.stderr, shown.stderr  # ours is checked against float64
    for shape in ("16x5760x2880 NT e4m3,w4:mxfp4 mx", "1x4096x4096 NT e4m3,w4:int4g32z mx"):
        assert f"torch cannot run {shape} ({lowbit.W4A8_MX_WHY}): no baseline" in shown.stderr, shown.stderr
    records = json.loads(out.read_text())["records"]
    assert [r["dtype"] for r in records] == ["e4m3,w4:mxfp4 mx", "e4m3,w4:int4g32z mx"]
    for r in records:
        assert r["ours_us"] > 0 and math.isfinite(r["gbps"]) and r["config"], r
        assert r["baseline_us"] is None and r["baseline_note"] is None, r
