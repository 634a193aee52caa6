"""python -m gemmkit.plot on committed bench results, dense and grouped: the PNG is written and is
a picture, with and without the optional summary keys (device, peak_tflops); a result of dense and
grouped rows with fused epilogues has every row drawn in each panel, each against its own
baseline, its fused time against the unfused one's, cuBLASLt's own epilogue's and its memory
floor; what is not a bench result is refused in one line; without matplotlib, one line says how to
get it. Needs matplotlib (skips without it), not torch or a GPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def plot(*args, hide=""):
    code = f"import sys; {hide}from gemmkit.plot import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)


def png_size(path):
    """(width, height) from a PNG's header; fails where the file is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_without_matplotlib_one_line_says_how_to_get_it(tmp_path):
    shown = plot(RESULTS / "small-h100-b53c2b1.json", "-o", tmp_path / "x.png",
                 hide="sys.modules['matplotlib'] = None; ")
    assert shown.returncode == 1
    assert shown.stderr == "gemmkit.plot needs matplotlib, which is not installed: pip install 'gemmkit[plot]'\n"
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("name", ["dense-large-h100-b53c2b1", "fp8-large-h100-ef4cc19",
                                  "python-dense-decode-h100-e1c84e0", "epilogue-h200-eb5d08d"])
def test_committed_results_are_drawn(tmp_path, name):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'gemmkit[plot]')")
    output = tmp_path / f"{name}.png"
    shown = plot(RESULTS / f"{name}.json", "-o", output)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"wrote {output}\n"
    width, height = png_size(output)
    records = len(json.loads((RESULTS / f"{name}.json").read_text())["records"])
    assert width >= 1000 and height >= 700 + 15 * records  # the bar panel grows with the shapes
    assert output.stat().st_size > 40_000  # drawn, not blank


def test_optional_summary_keys_add_roofs_and_the_device(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'gemmkit[plot]')")
    from gemmkit import plot as gp

    result = json.loads((RESULTS / "dense-decode-h100-b53c2b1.json").read_text())
    result["summary"].update(device="NVIDIA H100 80GB HBM3", peak_tflops={"bf16": 690.0, "e4m3": 1300.0})
    path = tmp_path / "with-peaks.json"
    path.write_text(json.dumps(result))
    shapes, summary = gp.load(path)
    assert gp.title_of(path, summary) == "gemmkit: with-peaks on NVIDIA H100 80GB HBM3"
    # intensity = FLOP / bytes from the record's own TFLOP/s and GB/s; the baseline's TFLOP/s is
    # the same FLOP over its time
    first, record = shapes[0], result["records"][0]
    assert first.intensity == pytest.approx(record["tflops"] * 1e3 / record["gbps"])
    assert first.baseline == pytest.approx(record["tflops"] * record["ours_us"] / record["baseline_us"])
    assert first.label == "1x2112x7168 NT bf16"
    shown = plot(path, "-o", tmp_path / "with-peaks.png")
    assert shown.returncode == 0, shown.stderr
    assert png_size(tmp_path / "with-peaks.png")[0] >= 1000


def test_a_grouped_result_is_drawn_against_its_own_baseline(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'gemmkit[plot]')")
    from gemmkit import plot as gp

    path = RESULTS / "moe-h200-1a6d597.json"
    grouped = json.loads(path.read_text())["grouped"]
    shapes, summary = gp.load(path)
    assert len(shapes) == len(grouped["records"]) and summary["baseline"] == "cuBLAS"
    assert summary["geomean_speedup"] == grouped["summary"]["speedup"]["geomean"]
    # intensity = FLOP (the record's TFLOP/s over gemmkit's time) / the record's bytes
    first, record = shapes[0], grouped["records"][0]
    assert first.label == "fwd G=8 32768x4096x7168 bf16 balanced"
    assert first.intensity == pytest.approx(record["tflops"] * 1e6 * record["ours_us"] / record["bytes"])
    assert first.speedup == pytest.approx(record["speedup"])
    timed = sum(1 for s in shapes if s.speedup)
    assert timed == grouped["summary"]["speedup"]["count"] < len(shapes)  # FP8 rows have no cuBLAS time
    output = tmp_path / "moe.png"
    shown = plot(path, "-o", output)
    assert shown.returncode == 0, shown.stderr
    assert png_size(output)[1] >= 700 + 15 * timed and output.stat().st_size > 40_000


def test_dense_and_grouped_epilogue_rows_are_all_drawn(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'gemmkit[plot]')")
    from gemmkit import plot as gp

    path = RESULTS / "epilogue-h200-ee5b403.json"  # gemmkit bench --suite epilogue: dense and grouped lines
    result = json.loads(path.read_text())
    dense, grouped = result["records"], result["grouped"]["records"]
    shapes, summary = gp.load(path)
    assert [s.grouped for s in shapes] == [False] * len(dense) + [True] * len(grouped)
    assert [s.against for s in shapes] == ["cuBLASLt"] * len(dense) + ["cuBLAS"] * len(grouped)
    assert summary["geomeans"] == {"dense": result["summary"]["geomean_speedup"],
                                   "grouped": result["grouped"]["summary"]["speedup"]["geomean"]}
    assert shapes[0].label == "4096x2112x7168 NT bf16 [silu(acc + bias[n])]"
    assert shapes[len(dense)].label == "fwd G=8 32768x4096x7168 bf16 balanced [silu(acc) * acc2]"
    # the floor: the row's bytes over the copy bandwidth, which for a grouped row the bench wrote too
    copy_gbps = summary["copy_gbps"]
    for s, record in zip(shapes[len(dense):], grouped):
        assert s.floor_us(copy_gbps) == pytest.approx(record["memory_us"])

    roofline, speedups, epilogues = gp.figure_of(path).axes
    points = {c.get_label(): len(c.get_offsets()) for c in roofline.collections}
    assert points == {"gemmkit, dense": len(dense), "cuBLASLt, dense": sum(1 for r in dense if r["baseline_us"]),
                      "gemmkit, grouped": len(grouped), "cuBLAS, grouped": sum(1 for r in grouped if r["baseline_us"])}
    timed = [s for s in shapes if s.speedup]
    assert len(speedups.patches) == len(timed) == len(dense) + len(grouped)
    assert sum(1 for bar in speedups.patches if bar.get_hatch()) == len(grouped)  # the grouped rows' bars
    assert sorted(t.get_text() for t in speedups.get_yticklabels()) == sorted(s.label for s in shapes)
    assert "over cuBLASLt (59 dense)" in speedups.get_title() and "over cuBLAS (7 grouped" in speedups.get_title()

    # every row with an epilogue and an unfused time: its fused time, cuBLASLt's own epilogue's where
    # timed, and its floor, each over the unfused time, on the row's line
    rows = gp.fused_rows(shapes)
    assert len(rows) == len(dense) + len(grouped)
    assert [t.get_text() for t in epilogues.get_yticklabels()] == [s.label for s in rows]
    drawn = {c.get_label(): c.get_offsets() for c in epilogues.collections}
    own = "cuBLASLt's own (GELU_BIAS, GELU_AUX_BIAS)"  # the names of the records that time one
    assert list(dict.fromkeys(r["baseline_epilogue"] for r in dense if r["baseline_fused_us"])) == [
        "GELU_BIAS", "GELU_AUX_BIAS"]
    floor = f"memory floor (bytes at {copy_gbps:,.0f} GB/s)"
    assert sorted(drawn) == sorted(["gemmkit fused", own, floor])
    assert len(drawn[own]) == sum(1 for r in dense if r["baseline_fused_us"]) > 0
    for name, time in [("gemmkit fused", lambda s: s.ours_us), (own, lambda s: s.baseline_fused_us),
                       (floor, lambda s: s.floor_us(copy_gbps))]:
        for x, y in drawn[name]:
            row = rows[int(y)]
            assert x == pytest.approx(time(row) / row.unfused_us), (name, row.label)
    assert len(drawn["gemmkit fused"]) == len(drawn[floor]) == len(rows)
    output = tmp_path / "epilogue.png"
    shown = plot(path, "-o", output)
    assert shown.returncode == 0, shown.stderr
    assert png_size(output)[1] >= 700 + 15 * (len(timed) + len(rows))  # the third panel grows with its rows


def test_what_is_not_a_bench_result_is_refused_in_one_line(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'gemmkit[plot]')")
    shown = plot(RESULTS / "chains-h100-b53c2b1.json", "-o", tmp_path / "x.png")
    assert shown.returncode == 1
    assert shown.stderr.startswith("gemmkit.plot: ") and "not a bench result" in shown.stderr
    assert shown.stderr.count("\n") == 1
    missing = plot(tmp_path / "none.json")
    assert missing.returncode == 1 and missing.stderr.startswith(f"gemmkit.plot: {tmp_path / 'none.json'}: ")
