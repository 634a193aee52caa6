"""The package without torch or a GPU: import, the C++ API's views, errors as Python exceptions
carrying the C++ message, and the command lines' checks (the Python bench's where torch is
installed)."""

import itertools
import json
import math
import subprocess
import sys

import pytest

import gemmkit
from gemmkit import DType, ScaleMode, TensorView


def test_import_leaves_torch_alone():
    code = "import sys, gemmkit; assert 'torch' not in sys.modules, 'import gemmkit imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_misuse_raises_value_error_naming_the_argument():
    a = TensorView.matrix(0x1000, DType.bf16, 4, 3, 3, 1)
    b = TensorView.matrix(0x2000, DType.bf16, 5, 2, 2, 1)  # 5 rows where A has K = 3
    d = TensorView.matrix(0x3000, DType.bf16, 4, 2, 2, 1)
    with pytest.raises(ValueError, match=r"^B: shape \[5, 2\] has 5 rows but A \[4, 3\] has K = 3"):
        gemmkit.gemm(a, b, d)
    with pytest.raises(ValueError, match=r"^options.c: beta is 0.5.* but no C was given"):
        gemmkit.gemm(a, TensorView.matrix(0x2000, DType.bf16, 3, 2, 2, 1), d, beta=0.5)


def test_pointers_that_are_not_device_memory_are_refused():
    a = TensorView.matrix(0x1000, DType.bf16, 4, 3, 3, 1)
    b = TensorView.matrix(0x2000, DType.bf16, 3, 2, 2, 1)
    d = TensorView.matrix(0x3000, DType.bf16, 4, 2, 2, 1)
    # Without a GPU the device lookup fails first (RuntimeError); with one, D's pointer, the
    # first checked, is refused (ValueError). Either way nothing runs.
    with pytest.raises((RuntimeError, ValueError)) as error:
        gemmkit.gemm(a, b, d)
    if error.type is RuntimeError:
        # require_device's message: no driver, a driver too old, or no device visible.
        assert str(error.value).startswith(("no NVIDIA driver found", "no CUDA device", "the NVIDIA driver supports"))
    else:
        assert str(error.value) == "D: pointer 0x3000 is not device memory; expected device memory"


class FrameworkDType:
    """A framework's dtype object, as the *_tensors bindings compare them: by identity."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class Tensor:
    """What the *_tensors bindings read of a framework tensor: dtype, shape, stride(), data_ptr()."""

    def __init__(self, dtype, shape, strides, data=0x1000):
        self.dtype, self.shape, self.strides, self.data = dtype, shape, strides, data

    def stride(self):
        return self.strides

    def data_ptr(self):
        return self.data


def test_grouped_bindings_read_group_sizes_and_check_shapes():
    from gemmkit import _gemmkit

    bf16, int32, int64, int16 = (FrameworkDType(name) for name in ("bf16", "int32", "int64", "int16"))
    _gemmkit.register_dtype(bf16, DType.bf16)
    _gemmkit.register_size_dtype(int32, False)
    _gemmkit.register_size_dtype(int64, True)
    a, d = Tensor(bf16, (8, 16), (16, 1)), Tensor(bf16, (8, 8), (8, 1))
    b = Tensor(bf16, (2, 16, 8), (128, 8, 1))
    none, contiguous, masked = ScaleMode.none, _gemmkit.GroupLayout.contiguous, _gemmkit.GroupLayout.masked

    def grouped(b, sizes, layout=contiguous):
        _gemmkit.grouped_gemm_tensors(a, b, d, sizes, layout, False, False, 1.0, 0, none, None, none, None, 0)

    # The checks on the host come before any look at the device: these raise without a GPU.
    with pytest.raises(TypeError, match="^offs: dtype int16 is not supported; expected int32 or int64$"):
        grouped(b, Tensor(int16, (2,), (1,)))
    with pytest.raises(TypeError, match="^counts: dtype int16 is not supported"):
        grouped(b, Tensor(int16, (2,), (1,)), masked)
    with pytest.raises(ValueError, match=r"^offs: 2 dimensions; expected 1 \(one value a group\)$"):
        grouped(b, Tensor(int32, (1, 2), (2, 1)))
    with pytest.raises(ValueError, match=r"^offs: stride 2; expected 1 \(values one after another\)$"):
        grouped(b, Tensor(int64, (2,), (2,)))
    with pytest.raises(ValueError, match=r"^B: shape \[15, 8\] has 15 rows but A \[8, 16\] has K = 16"):
        grouped(Tensor(bf16, (2, 15, 8), (120, 8, 1)), Tensor(int64, (2,), (1,)))
    with pytest.raises(ValueError, match=r"^B: shape \[3, 16, 8\]; expected \[G, K, N\] with G = sizes.count = 2"):
        grouped(Tensor(bf16, (3, 16, 8), (128, 8, 1)), Tensor(int32, (2,), (1,)))
    with pytest.raises(ValueError, match=r"^A: shape \[8, 16\]; expected \[G, max_m, K\] with G = 2"):
        grouped(b, Tensor(int32, (2,), (1,)), masked)
    with pytest.raises(ValueError, match=r"^d: shape \[3, 16, 16\]; expected \[G, P, Q\] = \[2, 16, 16\]$"):
        _gemmkit.grouped_gemm_wgrad_tensors(a, a, Tensor(bf16, (3, 16, 16), (256, 16, 1)), Tensor(int32, (2,), (1,)),
                                            False, 1.0, 0.0, None, 0, none, None, none, None, 0)


def test_the_cli_ships_with_the_package():
    shown = subprocess.run([sys.executable, "-m", "gemmkit", "--help"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    for command in ("bench", "tune", "verify", "info"):
        assert command in shown.stdout
    wrong = subprocess.run([sys.executable, "-m", "gemmkit", "bench", "--suite", "/no/such/suite.txt"],
                           capture_output=True, text=True)
    assert wrong.returncode == 1 and "/no/such/suite.txt" in wrong.stderr


def bench(*args):
    """python -m gemmkit.bench with `args`, its output captured."""
    return subprocess.run([sys.executable, "-m", "gemmkit.bench", *args], capture_output=True, text=True)


def test_the_python_bench_checks_its_arguments_before_it_runs(tmp_path):
    pytest.importorskip("torch")  # the bench imports it; no GPU needed
    # A --json path that cannot be written: exit 1 and one line, before the suite is read or a GPU
    # looked for; an existing file is left as it was, a new one not made.
    shown = bench("--suite", "/no/such/suite.txt", "--json", str(tmp_path / "no-such-dir" / "x.json"))
    assert (shown.returncode, shown.stderr) == (1, f"gemmkit.bench: cannot write --json {tmp_path}/no-such-dir/x.json "
                                                   "(No such file or directory)\n")
    (tmp_path / "old.json").write_text("old\n")
    for name in ("old.json", "new.json"):
        shown = bench("--suite", "/no/such/suite.txt", "--json", str(tmp_path / name))
        assert shown.returncode == 1 and "/no/such/suite.txt" in shown.stderr, shown.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["old.json"]
    assert (tmp_path / "old.json").read_text() == "old\n"
    # Usage errors: exit 2, as the help says.
    for wrong in (["--frob"], ["--runs", "x"], ["--overhead", "--overhead-shape", "64,64"],
                  ["--overhead", "--overhead-shape", "64,0,64"], ["--block", "attention"],
                  ["--block", "moe", "--steps", "0"], ["--block", "moe", "--modes", "lazy"]):
        shown = bench(*wrong)
        assert shown.returncode == 2 and "usage: python -m gemmkit.bench" in shown.stderr, (wrong, shown.stderr)
    shown = bench("--help")
    words = " ".join(shown.stdout.split())  # as argparse wrapped them
    assert shown.returncode == 0 and "exit status: 0 success; 1 the run" in words and "; 2 a usage error" in words


def test_tuning_mode_round_trips():
    before = gemmkit.tuning_mode()
    try:
        for mode in (gemmkit.TuningMode.off, gemmkit.TuningMode.online, gemmkit.TuningMode.database):
            gemmkit.set_tuning_mode(mode)
            assert gemmkit.tuning_mode() == mode
        for name in ("off", "online", "database"):  # by name, as GEMMKIT_TUNING and the README spell them
            gemmkit.set_tuning_mode(name)
            assert gemmkit.tuning_mode() == gemmkit.TuningMode[name]
        for wrong in ("fast", "Online", "__doc__", ""):
            with pytest.raises(ValueError, match=f"^mode: '{wrong}'; expected 'off', 'database' or 'online'$"):
                gemmkit.set_tuning_mode(wrong)
        assert gemmkit.tuning_mode() == gemmkit.TuningMode.database
        with pytest.raises(TypeError):
            gemmkit.set_tuning_mode(None)
    finally:
        gemmkit.set_tuning_mode(before)


def test_views_of_the_cpp_quick_start():
    row = TensorView.row_major(0x1000, DType.bf16, 4, 3)
    col = TensorView.col_major(0x2000, DType.f16, 4, 3)
    assert (row.data, row.dtype, row.shape, row.strides) == (0x1000, DType.bf16, [4, 3], [3, 1])
    assert (col.data, col.dtype, col.shape, col.strides) == (0x2000, DType.f16, [4, 3], [1, 4])


def test_scratch_allocator_takes_both_callables_or_neither():
    with pytest.raises(TypeError, match="both allocate and release, or neither"):
        gemmkit._gemmkit.set_scratch_allocator(lambda nbytes, stream: 0, None)


def test_quantize_views_checks_its_arguments():
    x = TensorView.matrix(0x1000, DType.bf16, 4, 256, 256, 1)
    q = TensorView.matrix(0x2000, DType.e4m3, 4, 256, 256, 1)
    scales = TensorView.matrix(0x3000, DType.f32, 4, 3, 3, 1)  # 2 blocks of 128 a row, not 3
    with pytest.raises(ValueError, match="^scales: "):
        gemmkit.quantize_views(x, q, scales, 1, 128)


def test_the_bench_reads_suites_and_reports_like_the_cli(tmp_path):
    from gemmkit._gemmkit import bench

    suite = tmp_path / "s.txt"
    suite.write_text("# two problems\n4096 2112 7168 NT e4m3 block\n1 7168 2048 TN bf16:f32 4\n")
    first, second = bench.load_bench_suite(str(suite)).dense
    assert (first.m, first.n, first.k, first.layout, first.mode) == (4096, 2112, 7168, "NT", ScaleMode.block)
    assert first.type_spec == "e4m3:bf16 block" and first.b_dtype == DType.e4m3
    assert (second.batch, second.out_dtype, second.type_spec) == (4, DType.f32, "bf16:f32")
    suite.write_text("4096 2112\n")
    with pytest.raises(ValueError, match=r"s.txt:1: "):
        bench.load_bench_suite(str(suite))

    r = bench.BenchRecord()
    r.m, r.n, r.k, r.layout, r.dtype, r.config = 64, 32, 16, "NT", "bf16", "tma"
    r.ours_us, r.baseline_us, r.speedup = 2.0, 3.0, 1.5
    summary = bench.summarize([r])
    assert "torch us" in bench.format_table([r], 3000.0, "torch").splitlines()[0]
    assert bench.format_summary(summary, "torch") == ("summary: 1 shape, geomean speedup 1.50x over torch, worst "
                                                      "1.50x at 64x32x16 NT bf16")
    assert '"baseline": "torch"' in bench.to_json([r], summary, 3000.0, "torch")


def test_the_bench_reads_grouped_lines_as_the_cli(tmp_path):
    from gemmkit._gemmkit import bench

    suite = tmp_path / "moe.txt"
    suite.write_text("4096 2112 7168\n"
                     "grouped fwd 8 1000 256 512 bf16 skew:10\n"
                     "grouped masked 4 64 256 512 e4m3 rowwise random:3\n"
                     "grouped wgrad 4 1000 256 512 e4m3 block balanced\n")
    lines = bench.load_bench_suite(str(suite))
    assert len(lines.dense) == 1 and len(lines.grouped) == 3
    fwd, masked, wgrad = lines.grouped
    assert (fwd.op, fwd.groups, fwd.m, fwd.n, fwd.k, fwd.dist) == ("fwd", 8, 1000, 256, 512, "skew:10")
    assert fwd.rows == bench.split_rows(8, 1000, "skew:10") and sum(fwd.rows) == 1000
    # The dense GEMM of every group's rows: M_total x N x K NT, the line's types and number.
    assert (fwd.dense.m, fwd.dense.n, fwd.dense.k, fwd.dense.layout, fwd.dense.line) == (1000, 256, 512, "NT", 2)
    assert bench.group_size_values(fwd) == list(itertools.accumulate(fwd.rows))  # int32 ends, torch's offs
    assert masked.dense.type_spec == "e4m3:bf16 rowwise" and masked.dense.mode == ScaleMode.rowwise
    assert masked.rows == bench.masked_rows(4, 64, "random:3") == bench.group_size_values(masked)
    assert (wgrad.dense.m, wgrad.dense.n, wgrad.dense.k, wgrad.dense.layout) == (256, 512, 1000, "TN")
    assert bench.grouped_record(wgrad).note.startswith("not run: grouped_gemm_wgrad takes tensor or rowwise scales")

    r = bench.grouped_record(fwd)
    assert bench.grouped_name(r) == "fwd G=8 1000x256x512 bf16 skew:10" and r.note == ""
    assert (r.rows, r.bytes) == (1000, fwd.bytes) and math.isnan(r.ours_us)
    assert bench.grouped_set_bytes(fwd) > fwd.bytes  # the dense floor's own weights too
    suite.write_text("grouped fwd 8 1000 256 512 bf16 zipf\n")
    with pytest.raises(ValueError, match=r"moe.txt:1: unknown distribution 'zipf'"):
        bench.load_bench_suite(str(suite))


@pytest.mark.parametrize("groups,total,dist", [(1, 7, "balanced"), (8, 32768, "skew:10"), (128, 16384, "zipf:1.2"),
                                               (5, 3, "random:1"), (1024, 1000, "zipf:0")])
def test_group_sizes_come_from_the_clis_distributions(groups, total, dist):
    from gemmkit._gemmkit import bench

    rows = bench.split_rows(groups, total, dist)
    assert len(rows) == groups and sum(rows) == total and min(rows) >= 0
    if dist.startswith("zipf"):
        assert rows == sorted(rows, reverse=True)
    counts = bench.masked_rows(groups, 64, dist)
    assert len(counts) == groups and max(counts) == 64 and min(counts) >= 0
    assert bench.split_rows(groups, total, dist) == rows  # the same line, the same sizes


def test_group_sizes_refuse_what_the_cli_refuses():
    from gemmkit._gemmkit import bench

    assert bench.split_rows(4, 8, "skew:3") == [4, 2, 1, 1]  # 4 and 4/3 each; the row left to group 1
    with pytest.raises(ValueError, match="^dist: skew ratio '0' is too small"):
        bench.split_rows(4, 100, "skew:0")
    with pytest.raises(ValueError, match="^groups: expected at least 1"):
        bench.masked_rows(0, 64, "balanced")


def test_the_grouped_report_names_torch():
    from gemmkit._gemmkit import bench

    r = bench.GroupedRecord()
    r.op, r.groups, r.m, r.n, r.k, r.dtype, r.dist = "fwd", 8, 32768, 4096, 7168, "bf16", "balanced"
    r.rows, r.bytes, r.ours_us, r.dense_us, r.baseline_us = 32768, 1.2e9, 4000.0, 3000.0, 5000.0
    r.note = "torch: rowwise scales of 1 on the same FP8 buffers"
    table = bench.format_grouped_table([r], 3000.0, "torch").splitlines()
    assert "torch us" in table[0] and table[1].endswith("[1]") and table[2] == f"[1] {r.note}"
    summary = bench.summarize_grouped([r], 3000.0)
    assert (summary.roofline.count, summary.roofline.geomean, summary.speedup.geomean) == (1, 0.75, 1.25)
    assert "1 row with a torch baseline, geomean speedup 1.25x" in bench.format_grouped_summary(summary, "torch")
    written = json.loads(bench.to_json([], bench.summarize([]), 3000.0, "torch", [r]))
    assert written["grouped"]["summary"]["baseline"] == "torch"
    assert written["grouped"]["records"][0]["roofline_fraction"] == 0.75 and written["records"] == []
    assert "grouped" not in json.loads(bench.to_json([], bench.summarize([]), 3000.0, "torch"))
