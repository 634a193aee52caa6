"""python -m gemmkit.plot RESULTS.json -o FILE.png: a bench result drawn as a picture.

RESULTS.json is what `gemmkit bench --json` or `python -m gemmkit.bench --json` writes, for a
dense suite, a grouped (MoE) one, or one with lines of both (`--suite epilogue`), whose rows are
drawn together, grouped ones as diamonds (and, beside dense ones, with hatched bars), each row
against its part's baseline (the result's; the grouped part's: cuBLAS's grouped GEMM or torch).
The picture has two panels, and a third where rows have a fused epilogue (its text in their
labels):

  roofline   TFLOP/s against arithmetic intensity (FLOP per byte the problem moves), log-log:
             gemmkit's and the baseline's point for every shape, under the copy bandwidth's roof
             (the summary's copy_gbps: at a row's intensity, its memory floor) and the compute
             roofs (its peak_tflops, per input type),
             or, where the result has no measured peak, a dashed line at the best TFLOP/s seen
  speedup    gemmkit over the baseline per shape, sorted, with a line at 1.0 (grouped rows
             without a baseline, such as FP8 ones against cuBLAS, are in the roofline only)
  epilogues  per shape with a fused epilogue, sorted, each time over our unfused GEMM's (a line
             at 1.0): gemmkit's fused time, the baseline's own fused epilogue's where the record
             has it (cuBLASLt's GELU_BIAS, say), and the row's memory floor (the bytes it moves,
             as the roofline counts them, over the copy bandwidth)

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
    where unknown), from gemmkit's and the baseline's times, its TFLOP/s and the bytes it moves;
    `grouped` for a grouped line's row and `against` the baseline it is timed against. A row with
    a fused epilogue has its text, our unfused GEMM's time and, where the baseline has a fused
    epilogue of its own that computes the text, that epilogue's name and time."""

    def __init__(self, label, dtype, ours_us, baseline_us, tflops, bytes_moved, speedup, against, grouped=False,
                 epilogue=None, unfused_us=None, baseline_fused_us=None, baseline_epilogue=None):
        self.dtype = dtype
        self.input_type = dtype.split(":")[0].split()[0]
        self.label = label
        self.ours_us, self.bytes = ours_us, bytes_moved
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
        self.against, self.grouped = against, grouped
        self.epilogue, self.unfused_us = epilogue or None, unfused_us
        self.baseline_fused_us, self.baseline_epilogue = baseline_fused_us, baseline_epilogue

    def floor_us(self, copy_gbps):
        """The memory floor: the bytes the row moves at the copy bandwidth (as the roofline's
        bandwidth roof is, at the row's intensity); None where either is unknown."""
        return self.bytes / copy_gbps / 1e3 if self.bytes and copy_gbps else None


def _epilogue_label(record):
    """A label's " [TEXT]" for a record with a fused epilogue, as the bench's summaries name its
    rows."""
    return f" [{record['epilogue']}]" if record.get("epilogue") else ""


def dense_shape(record, against):
    """A record of a dense suite: bytes moved from its GB/s over gemmkit's time."""
    batch = record.get("batch", 1)
    dtype = str(record["dtype"])
    label = (f"{record['m']}x{record['n']}x{record['k']}" + (f" x{batch}" if batch > 1 else "") +
             f" {record['layout']} {dtype}" + _epilogue_label(record) + ("*" if record.get("baseline_note") else ""))
    ours_us, gbps = _number(record.get("ours_us")), _number(record.get("gbps"))
    return Shape(label, dtype, ours_us, _number(record.get("baseline_us")), _number(record.get("tflops")),
                 gbps * 1e9 * ours_us * 1e-6 if gbps and ours_us else None, _number(record.get("speedup")), against,
                 epilogue=record.get("epilogue"), unfused_us=_number(record.get("unfused_us")),
                 baseline_fused_us=_number(record.get("baseline_fused_us")),
                 baseline_epilogue=record.get("baseline_epilogue"))


def grouped_shape(record, against):
    """A record of a grouped (MoE) suite: its bytes are in the record; its floor (the bytes over
    the copy bandwidth) is the roofline's bandwidth roof."""
    dtype = str(record["dtype"])
    label = (f"{record['op']} G={record['groups']} {record['rows']}x{record['n']}x{record['k']} {dtype} "
             f"{record['dist']}" + _epilogue_label(record) + ("*" if record.get("baseline_note") else ""))
    return Shape(label, dtype, _number(record.get("ours_us")), _number(record.get("baseline_us")),
                 _number(record.get("tflops")), _number(record.get("bytes")), _number(record.get("speedup")), against,
                 grouped=True, epilogue=record.get("epilogue"), unfused_us=_number(record.get("unfused_us")))


def load(path):
    """(shapes, summary) of a bench result file: its dense records, then its grouped ones, each
    shape against its part's baseline. The summary is the result's, with `geomeans` the geometric
    mean speedup of each part ({"dense": ..., "grouped": ...}, where the result gives one); for a
    result of grouped records alone, its baseline and geomean_speedup are the grouped part's.
    ValueError where the file is not a bench result."""
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
    summary["geomeans"] = {}
    try:
        against = summary.get("baseline") or "cuBLASLt"
        shapes = [dense_shape(record, against) for record in result.get("records") or []]
        if shapes:
            summary["geomeans"]["dense"] = _number(summary.get("geomean_speedup"))
        if grouped_records:
            grouped_summary = grouped.get("summary") or {}
            against = grouped_summary.get("baseline") or summary.get("baseline") or "cuBLAS"
            geomean = (grouped_summary.get("speedup") or {}).get("geomean")
            summary["geomeans"]["grouped"] = _number(geomean)
            if not shapes:
                summary["baseline"], summary["geomean_speedup"] = against, geomean
            shapes += [grouped_shape(record, against) for record in grouped_records]
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


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _plain_log_axis(axis):
    """Ticks of a log axis written as plain numbers (0.5, 2), minor ones unlabelled."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))


def _parts(shapes):
    """(grouped, the shapes of that part) for the dense part, then the grouped one, where present."""
    return [(grouped, part) for grouped in (False, True) if (part := [s for s in shapes if s.grouped == grouped])]


def draw_roofline(axes, shapes, summary):
    """Both sides' points per shape, joined by a thin line, under the bandwidth and compute roofs;
    grouped rows' as diamonds and pluses, each part's baseline named."""
    drawn = [s for s in shapes if s.intensity]
    if not drawn:
        axes.text(0.5, 0.5, "no record has TFLOP/s and GB/s", ha="center", transform=axes.transAxes)
        return
    x = [s.intensity for s in drawn]
    for s in drawn:
        if s.baseline:
            axes.plot([s.intensity] * 2, [s.ours, s.baseline], color="0.75", linewidth=0.8, zorder=1)
    parts = _parts(drawn)
    for grouped, part in parts:
        which = (", grouped" if grouped else ", dense") if len(parts) > 1 else ""
        axes.scatter([s.intensity for s in part], [s.ours for s in part], marker="D" if grouped else "o",
                     color=OURS, s=22 if grouped else 28, zorder=3, label="gemmkit" + which)
        timed = [s for s in part if s.baseline]
        if timed:
            axes.scatter([s.intensity for s in timed], [s.baseline for s in timed], marker="+" if grouped else "x",
                         color="tab:purple" if grouped else "tab:orange", s=36 if grouped else 28, zorder=2,
                         label=timed[0].against + which)
    with_baseline = [s for s in drawn if s.baseline]
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
    _plain_log_axis(axes.xaxis)
    _plain_log_axis(axes.yaxis)
    axes.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    axes.set_ylabel("TFLOP/s")
    axes.grid(True, which="both", color="0.92", linewidth=0.6)
    axes.legend(loc="lower right", fontsize=8)


def draw_speedups(axes, shapes, summary):
    """A bar per shape of gemmkit over its baseline, sorted, slowest at the bottom; where the
    result has dense and grouped rows, the grouped rows' bars hatched and each part's geometric
    mean over its own baseline in the title."""
    timed = sorted((s for s in shapes if s.speedup), key=lambda s: s.speedup)
    if not timed:
        axes.text(0.5, 0.5, "no record has a baseline time", ha="center", transform=axes.transAxes)
        return
    parts = _parts(timed)
    means = []
    for grouped, part in parts:
        rows = [i for i, s in enumerate(timed) if s.grouped == grouped]
        hatched = {"hatch": "//", "edgecolor": "black", "linewidth": 0.4} if grouped and len(parts) > 1 else {}
        axes.barh(rows, [s.speedup - 1 for s in part], left=1, height=0.7,
                  color=[FASTER if s.speedup >= 1 else SLOWER for s in part], **hatched)
        geomean = summary.get("geomeans", {}).get("grouped" if grouped else "dense")
        if geomean is None:
            geomean = _geomean([s.speedup for s in part])
        kind = "grouped, hatched" if grouped else "dense"
        means.append(f"{geomean:.3f}x" if len(parts) == 1 else f"{geomean:.3f}x over {part[0].against} "
                                                               f"({len(part)} {kind})")
    axes.axvline(1.0, color=ROOF, linewidth=1.0)
    axes.set_yticks(range(len(timed)), [s.label for s in timed], fontsize=7 if len(timed) > 30 else 8)
    axes.set_ylim(-0.6, len(timed) - 0.4)
    against = timed[0].against if len(parts) == 1 else "each row's baseline"
    axes.set_xlabel(f"speedup over {against} (baseline time / gemmkit time; > 1: gemmkit is faster)")
    note = ("; * the baseline ran a stand-in (per-tensor scales, or another product of the shape: the "
            "bench table's notes)" if any(s.label.endswith("*") for s in timed) else "")
    axes.set_title(f"per shape, geometric mean {', and '.join(means)}{note}", fontsize=10, wrap=True)
    low, high = min(timed[0].speedup, 1.0), max(timed[-1].speedup, 1.0)
    margin = (high - low) * 0.05 + 0.01
    axes.set_xlim(low - margin, high + margin)
    axes.grid(True, axis="x", color="0.92", linewidth=0.6)


def fused_rows(shapes):
    """The rows with a fused epilogue and our unfused time, sorted by fused over unfused."""
    return sorted((s for s in shapes if s.epilogue and s.ours_us and s.unfused_us),
                  key=lambda s: s.ours_us / s.unfused_us)


def draw_epilogues(axes, shapes, summary):
    """A row per shape with a fused epilogue, each time over our unfused GEMM's: gemmkit's fused
    time, the baseline's own fused epilogue's where the record has one, and the memory floor (the
    bytes the row moves over the copy bandwidth)."""
    rows = fused_rows(shapes)
    y = range(len(rows))
    axes.axvline(1.0, color=ROOF, linewidth=1.0, label="our unfused GEMM")
    fused = [s.ours_us / s.unfused_us for s in rows]
    axes.scatter(fused, y, color=OURS, s=22, zorder=3, label="gemmkit fused")
    own = [(i, s) for i, s in enumerate(rows) if s.baseline_fused_us]
    if own:
        names = ", ".join(dict.fromkeys(s.baseline_epilogue or "fused" for _, s in own))
        axes.scatter([s.baseline_fused_us / s.unfused_us for _, s in own], [i for i, _ in own], marker="x",
                     color="tab:orange", s=28, zorder=2, label=f"{own[0][1].against}'s own ({names})")
    copy_gbps = _number(summary.get("copy_gbps"))
    floors = [(i, s.floor_us(copy_gbps) / s.unfused_us) for i, s in enumerate(rows) if s.floor_us(copy_gbps)]
    if floors:
        axes.scatter([f for _, f in floors], [i for i, _ in floors], marker="|", color=ROOF, s=80, zorder=2,
                     label=f"memory floor (bytes at {copy_gbps:,.0f} GB/s)")
    axes.set_yticks(list(y), [s.label for s in rows], fontsize=7 if len(rows) > 30 else 8)
    axes.set_ylim(-0.6, len(rows) - 0.4)
    axes.set_xscale("log")
    _plain_log_axis(axes.xaxis)
    axes.set_xlabel("time over our unfused GEMM's (log; < 1 faster than the unfused GEMM)")
    axes.set_title(f"fused epilogues, per shape: fused over unfused, geometric mean {_geomean(fused):.3f}x",
                   fontsize=10)
    axes.grid(True, axis="x", which="both", color="0.92", linewidth=0.6)
    axes.legend(loc="best", fontsize=8)


def figure_of(path):
    """The matplotlib Figure of the bench result at `path`: the roofline, the speedups and, where
    rows have a fused epilogue, their times against the unfused GEMM's. Raises
    ModuleNotFoundError without matplotlib, ValueError where `path` is no bench result."""
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("matplotlib"):
            raise
        raise ModuleNotFoundError(NEEDS_MATPLOTLIB, name="matplotlib") from None
    shapes, summary = load(path)
    heights = [6.5, 0.2 * max(sum(1 for s in shapes if s.speedup), 10)]
    fused = len(fused_rows(shapes))
    if fused:
        heights.append(0.2 * max(fused, 10))
    figure = Figure(figsize=(11, sum(heights)), layout="constrained")
    panels = figure.subplots(len(heights), 1, height_ratios=heights)
    against = [part[0].against for _, part in _parts(shapes)]
    grouped_against = f" (grouped rows: {against[1]})" if len(against) > 1 and against[1] != against[0] else ""
    figure.suptitle(title_of(path, summary) + f", against {against[0]}{grouped_against}", fontsize=12)
    panels[0].set_title("roofline", fontsize=10)
    draw_roofline(panels[0], shapes, summary)
    draw_speedups(panels[1], shapes, summary)
    if fused:
        draw_epilogues(panels[2], shapes, summary)
    return figure


def plot(path, output):
    """Draws the bench result at `path` into the image file `output` (its suffix picks the format).
    Raises ModuleNotFoundError without matplotlib, ValueError where `path` is no bench result."""
    figure_of(path).savefig(output, dpi=110)


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
