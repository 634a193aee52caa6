"""python -m gemmkit.plot RESULTS.json -o FILE.png: a bench result drawn as a picture.

RESULTS.json is what `gemmkit bench --json` or `python -m gemmkit.bench --json` writes, for a
dense suite or a grouped (MoE) one. The picture has two panels:

  roofline  TFLOP/s against arithmetic intensity (FLOP per byte the problem moves), log-log:
            gemmkit's and the baseline's point for every shape, under the copy bandwidth's roof
            (the summary's copy_gbps: at a row's intensity, its memory floor) and the compute
            roofs (its peak_tflops, per input type),
            or, where the result has no measured peak, a dashed line at the best TFLOP/s seen
  speedup   gemmkit over the baseline per shape, sorted, with a line at 1.0 (grouped rows
            without a baseline, such as FP8 ones against cuBLAS, are in the roofline only)

Needs matplotlib (`pip install 'gemmkit[plot]'`); gemmkit's other parts do not.
"""

import argparse
import json
import math
import sys
from pathlib import Path

NEEDS_MATPLOTLIB = "gemmkit.plot needs matplotlib, which is not installed: pip install 'gemmkit[plot]'"
OURS, FASTER, SLOWER, ROOF = "tab:blue", "tab:green", "tab:red", "black"


def _number(value):
    """value as a float, or None where it is absent or not finite (NaN is written as null)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


class Shape:
    """One row: its label, input type, intensity, both sides' TFLOP/s and gemmkit's speedup (None
    where unknown), from gemmkit's and the baseline's times, its TFLOP/s and the bytes it moves."""

    def __init__(self, label, dtype, ours_us, baseline_us, tflops, bytes_moved, speedup):
        self.dtype = dtype
        self.input_type = dtype.split(":")[0].split()[0]
        self.label = label
        self.ours = tflops
        self.intensity = self.baseline = None
        if ours_us and tflops and bytes_moved:
            flops = tflops * 1e12 * ours_us * 1e-6
            self.intensity = flops / bytes_moved
            if baseline_us:
                self.baseline = flops / (baseline_us * 1e-6) / 1e12
        self.speedup = speedup
        if self.speedup is None and ours_us and baseline_us:
            self.speedup = baseline_us / ours_us


def dense_shape(record):
    """A record of a dense suite: bytes moved from its GB/s over gemmkit's time."""
    batch = record.get("batch", 1)
    dtype = str(record["dtype"])
    label = (f"{record['m']}x{record['n']}x{record['k']}" + (f" x{batch}" if batch > 1 else "") +
             f" {record['layout']} {dtype}" + ("*" if record.get("baseline_note") else ""))
    ours_us, gbps = _number(record.get("ours_us")), _number(record.get("gbps"))
    return Shape(label, dtype, ours_us, _number(record.get("baseline_us")), _number(record.get("tflops")),
                 gbps * 1e9 * ours_us * 1e-6 if gbps and ours_us else None, _number(record.get("speedup")))


def grouped_shape(record):
    """A record of a grouped (MoE) suite: its bytes are in the record; its floor (the bytes over
    the copy bandwidth) is the roofline's bandwidth roof."""
    dtype = str(record["dtype"])
    label = (f"{record['op']} G={record['groups']} {record['rows']}x{record['n']}x{record['k']} {dtype} "
             f"{record['dist']}")
    return Shape(label, dtype, _number(record.get("ours_us")), _number(record.get("baseline_us")),
                 _number(record.get("tflops")), _number(record.get("bytes")), _number(record.get("speedup")))


def load(path):
    """(shapes, summary) of a bench result file, dense records or grouped ones (the summary's
    baseline and speedup geomean then the grouped part's); ValueError where it is not one."""
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None
    grouped = result.get("grouped") if isinstance(result, dict) else None
    grouped_records = grouped.get("records") if isinstance(grouped, dict) else None
    if not isinstance(result, dict) or not (result.get("records") or grouped_records):
        what = ", ".join(result) if isinstance(result, dict) else type(result).__name__
        raise ValueError(f"{path}: not a bench result with records (it has {what}); chain and overhead "
                         "results are not drawn")
    summary = dict(result.get("summary") or {})
    try:
        if result.get("records"):
            shapes = [dense_shape(record) for record in result["records"]]
        else:
            shapes = [grouped_shape(record) for record in grouped_records]
            grouped_summary = grouped.get("summary") or {}
            summary["baseline"] = grouped_summary.get("baseline") or summary.get("baseline")
            summary["geomean_speedup"] = (grouped_summary.get("speedup") or {}).get("geomean")
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a bench result: a record lacks {error}") from None
    return shapes, summary


def title_of(path, summary):
    """What the result is: suite (or the file's name), device and commit where the result tells."""
    words = [str(summary.get("suite") or Path(path).stem)]
    if summary.get("device"):
        words.append(f"on {summary['device']}")
    commit = summary.get("commit") or summary.get("git_commit")
    if commit:
        words.append(f"at {commit}")
    return "gemmkit: " + " ".join(words)


def draw_roofline(axes, shapes, summary, baseline):
    """Both sides' points per shape, joined by a thin line, under the bandwidth and compute roofs."""
    from matplotlib.ticker import FuncFormatter

    drawn = [s for s in shapes if s.intensity]
    if not drawn:
        axes.text(0.5, 0.5, "no record has TFLOP/s and GB/s", ha="center", transform=axes.transAxes)
        return
    x = [s.intensity for s in drawn]
    for s in drawn:
        if s.baseline:
            axes.plot([s.intensity] * 2, [s.ours, s.baseline], color="0.75", linewidth=0.8, zorder=1)
    axes.scatter(x, [s.ours for s in drawn], color=OURS, s=28, zorder=3, label="gemmkit")
    with_baseline = [s for s in drawn if s.baseline]
    if with_baseline:
        axes.scatter([s.intensity for s in with_baseline], [s.baseline for s in with_baseline], marker="x",
                     color="tab:orange", s=28, zorder=2, label=baseline)
    low, high = min(x) / 2, max(x) * 2
    axes.set_xlim(low, high)
    tops = [s.ours for s in drawn] + [s.baseline for s in with_baseline]
    peaks = {str(k): float(v) for k, v in (summary.get("peak_tflops") or {}).items() if _number(v)}
    copy_gbps = _number(summary.get("copy_gbps"))
    if copy_gbps:  # TFLOP/s that copy_gbps feeds at intensity i: copy_gbps * 1e9 * i / 1e12
        axes.plot([low, high], [copy_gbps * low / 1e3, copy_gbps * high / 1e3], color=ROOF, linewidth=1.2,
                  label=f"copy bandwidth {copy_gbps:,.0f} GB/s")
    if peaks:
        types = {s.input_type for s in drawn}  # the roofs of other types are dotted
        for name, peak in peaks.items():
            axes.axhline(peak, color="dimgray", linestyle="-." if name in types else ":", linewidth=1.0)
            axes.annotate(f"{name} peak {peak:,.0f} TFLOP/s", (low, peak), xytext=(4, 3),
                          textcoords="offset points", fontsize=8)
        tops += list(peaks.values())
    else:
        best = max(tops)
        axes.axhline(best, color=ROOF, linestyle="--", linewidth=0.9,
                     label=f"best observed {best:,.0f} TFLOP/s (no measured peak in the result)")
    bottom = min(s.ours for s in drawn) / 2
    axes.set_ylim(bottom, max(tops) * 1.6)
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axes.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    axes.set_ylabel("TFLOP/s")
    axes.grid(True, which="both", color="0.92", linewidth=0.6)
    axes.legend(loc="lower right", fontsize=8)


def draw_speedups(axes, shapes, summary, baseline):
    """A bar per shape of gemmkit over the baseline, sorted, slowest at the bottom."""
    timed = sorted((s for s in shapes if s.speedup), key=lambda s: s.speedup)
    if not timed:
        axes.text(0.5, 0.5, "no record has a baseline time", ha="center", transform=axes.transAxes)
        return
    rows = range(len(timed))
    axes.barh(rows, [s.speedup - 1 for s in timed], left=1, height=0.7,
              color=[FASTER if s.speedup >= 1 else SLOWER for s in timed])
    axes.axvline(1.0, color=ROOF, linewidth=1.0)
    axes.set_yticks(list(rows), [s.label for s in timed], fontsize=7 if len(timed) > 30 else 8)
    axes.set_ylim(-0.6, len(timed) - 0.4)
    geomean = _number(summary.get("geomean_speedup"))
    if geomean is None:
        geomean = math.exp(sum(math.log(s.speedup) for s in timed) / len(timed))
    axes.set_xlabel(f"speedup over {baseline} (baseline time / gemmkit time; > 1: gemmkit is faster)")
    note = "; * baseline timed with per-tensor scales" if any(s.label.endswith("*") for s in timed) else ""
    axes.set_title(f"per shape, geometric mean {geomean:.3f}x{note}", fontsize=10)
    low, high = min(timed[0].speedup, 1.0), max(timed[-1].speedup, 1.0)
    margin = (high - low) * 0.05 + 0.01
    axes.set_xlim(low - margin, high + margin)
    axes.grid(True, axis="x", color="0.92", linewidth=0.6)


def plot(path, output):
    """Draws the bench result at `path` into the image file `output` (its suffix picks the format).
    Raises ModuleNotFoundError without matplotlib, ValueError where `path` is no bench result."""
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("matplotlib"):
            raise
        raise ModuleNotFoundError(NEEDS_MATPLOTLIB, name="matplotlib") from None
    shapes, summary = load(path)
    baseline = str(summary.get("baseline") or "cuBLASLt")
    bar_rows = sum(1 for s in shapes if s.speedup)
    figure = Figure(figsize=(11, 6.5 + 0.2 * max(bar_rows, 10)), layout="constrained")
    top, bottom = figure.subplots(2, 1, height_ratios=[6.5, 0.2 * max(bar_rows, 10)])
    figure.suptitle(title_of(path, summary) + f", against {baseline}", fontsize=12)
    top.set_title("roofline", fontsize=10)
    draw_roofline(top, shapes, summary, baseline)
    draw_speedups(bottom, shapes, summary, baseline)
    figure.savefig(output, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m gemmkit.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a bench result (gemmkit bench --json, python -m gemmkit.bench --json)")
    parser.add_argument("-o", "--output", help="the image to write (PNG, SVG, PDF by its suffix); "
                                               "default: RESULTS with the suffix .png")
    args = parser.parse_args(argv)
    output = args.output or str(Path(args.results).with_suffix(".png"))
    try:
        plot(args.results, output)
    except (ModuleNotFoundError, ValueError, OSError) as error:
        if isinstance(error, ModuleNotFoundError) and error.name != "matplotlib":
            raise
        sys.exit(f"gemmkit.plot: {error}" if not isinstance(error, ModuleNotFoundError) else str(error))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
