"""python -m gemmkit.bench's grouped rows end to end on an sm_90 GPU: a small suite of a dense line
and grouped lines of every OP, 16-bit and FP8, runs against torch in one process, prints the CLI's
tables and summaries and writes them to JSON; every row gemmkit runs has its times and floors, and
no output, ours or torch's, differs from the float64 products the bench checks them against.
Skips, saying so, without torch or an sm_90 GPU."""

import json
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch tests run on the GPU machine)")
from gpu_reference import skip_without_sm90  # noqa: E402

skip_without_sm90()

SUITE = """# a dense line beside grouped ones
256 128 64
grouped fwd 4 300 128 256 bf16 skew:3
grouped dgrad 4 300 128 256 bf16 zipf:1.2
grouped wgrad 4 300 128 256 bf16 random:2
grouped masked 4 24 128 256 bf16 random:1
grouped fwd 3 300 256 384 e4m3 rowwise balanced
grouped fwd 3 300 256 384 e4m3 block skew:2
grouped masked 3 16 256 384 e4m3 tensor balanced
grouped dgrad 3 300 256 384 e4m3 balanced
"""


def test_a_mixed_suite_runs_grouped_rows_against_torch(tmp_path):
    suite, out = tmp_path / "moe-tiny.txt", tmp_path / "out.json"
    suite.write_text(SUITE)
    shown = subprocess.run([sys.executable, "-m", "gemmkit.bench", "--suite", str(suite), "--json", str(out),
                            "--warmup", "1", "--runs", "3"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "torch us" in shown.stdout and "grouped summary: 7 rows run" in shown.stdout, shown.stdout
    assert "summary: 1 shape" in shown.stdout, shown.stdout

    results = json.loads(out.read_text())
    assert len(results["records"]) == 1
    rows = results["grouped"]["records"]
    assert [(r["op"], r["dtype"]) for r in rows] == [
        ("fwd", "bf16"), ("dgrad", "bf16"), ("wgrad", "bf16"), ("masked", "bf16"), ("fwd", "e4m3:bf16 rowwise"),
        ("fwd", "e4m3:bf16 block"), ("masked", "e4m3:bf16 tensor"), ("dgrad", "e4m3:bf16 tensor")]
    assert results["grouped"]["summary"]["baseline"] == "torch"
    for r in rows[:-1]:
        assert r["ours_us"] > 0 and r["dense_us"] > 0 and math.isfinite(r["roofline_fraction"]), r
        assert "differs" not in (r["note"] or ""), r
    assert rows[-1]["note"].startswith("not run: ") and rows[-1]["ours_us"] is None
    # torch 2.11 runs these on sm_90 as the rows ask: _grouped_mm, _scaled_grouped_mm rowwise.
    for r in rows[:3] + rows[4:5]:
        assert r["baseline_us"] > 0 and r["note"] is None, r
    assert "batched product" in rows[3]["note"]
    assert "rowwise scales of 1" in rows[5]["note"]
