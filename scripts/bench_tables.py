#!/usr/bin/env python3
"""Markdown for BENCHMARKS.md from the JSON that `gemmkit bench --json` writes.

    scripts/bench_tables.py FILE.json ...      # one section per file, in the order given
    scripts/bench_tables.py --newest           # the newest result of each suite and device in bench/results

Each section names the suite, device, commit (both read from the file name,
SUITE-DEVICE-COMMIT[-TAG].json, as bench/results names them), the date the file was committed,
the command that produces such a file, and then the summary line and the table as `gemmkit bench`
prints them, table first (src/bench/report.cpp: same columns, same number formats, same alignment). Suite results
(`records`, and `grouped` for a suite's grouped rows), chain results (`chains`, from
`bench --chain`) and host overhead (`overhead`, from `bench --overhead --json`) are recognised by
their keys. Plain-text files (such as a saved
`bench --overhead` output) are copied as they are.

Run it from the repository root (it reads bench/results and asks git for dates). Standard
library only. To refresh BENCHMARKS.md after a run: copy the JSON into bench/results
under that naming scheme, commit it, and paste this script's output for it into the suite's
section.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

RESULTS = "bench/results"
DEVICES = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}
# Suites in the order BENCHMARKS.md lists them; "chains" are `bench --chain` results.
SUITES = ["dense-large", "small", "medium", "dense-decode", "unaligned", "unaligned-d", "fp8-large",
          "fp8-decode", "fp8-mx", "fp8-odd", "lowbit", "chain-gemms", "chains", "moe", "moe-decode", "overhead"]
NAME = re.compile(r"^(?P<suite>.+?)-(?P<device>h100|h200)-(?P<commit>[0-9a-f]{7})(?:-(?P<tag>[A-Za-z0-9-]+))?\.(?:json|txt)$")
# Result files of a suite's ordinary run (not experiments, forced configs or partial runs).
PLAIN_TAG = re.compile(r"^(pass\d|run\d|gpu-check|untuned)$")


def num(fmt, v):
    """printf-style formatting; a missing or non-finite value prints as '-' (report.cpp's num)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt % v


def ratio(a, b):
    ok = all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (a, b))
    return a / b if ok else None


def align(rows, left):
    """Columns padded to their widths, two spaces apart; left(c) for text columns (report.cpp)."""
    width = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [(r[c].ljust(width[c]) if left(c) else r[c].rjust(width[c])) for c in range(len(r))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"


def shape_name(r):
    s = f"{r['m']}x{r['n']}x{r['k']}"
    return s + (f"x{r['batch']}" if r.get("batch", 1) > 1 else "")


def summary_line(s, noun):
    baseline = s.get("baseline", "cuBLASLt")
    count = s.get("count", 0)
    if count == 0:
        return f"summary: no {noun}s with a {baseline} baseline"
    stand_ins = s.get("stand_ins", 0)
    extra = f" ({stand_ins} of them against a stand-in)" if stand_ins else ""
    worst = s.get("worst_shape", s.get("worst_chain"))
    return (f"summary: {count} {noun}{'' if count == 1 else 's'}, geomean speedup "
            f"{num('%.2fx', s.get('geomean_speedup'))} over {baseline}{extra}, worst "
            f"{num('%.2fx', s.get('worst_speedup'))} at {worst}")


def suite_table(data):
    s = data["summary"]
    baseline = s.get("baseline", "cuBLASLt")
    copy = s.get("copy_gbps")
    # Lines with 4-bit weights carry the dense GEMMs of their shape (report.h, dense16_us and on).
    dense = any(r.get("dense16_us") is not None for r in data["records"])
    rows = [["shape", "layout", "dtype", "ours us", baseline + " us", "speedup"] +
            (["16-bit us", "fp8 us", baseline + "-fp8 us"] if dense else []) +
            ["TFLOP/s", "GB/s", "%copy", "%copy@size", "config"]]
    notes = []
    for r in data["records"]:
        note = r.get("baseline_note")
        if note and note not in notes:
            notes.append(note)
        fraction = r.get("copy_fraction")
        if fraction is None and copy:
            fraction = ratio(r.get("gbps"), copy)
        sized = r.get("sized_copy_fraction")
        if sized is None:
            sized = ratio(r.get("copy_us"), r.get("ours_us"))
        rows.append([shape_name(r), r["layout"], r["dtype"], num("%.2f", r.get("ours_us")),
                     num("%.2f", r.get("baseline_us")) + ("*" if note else ""), num("%.2fx", r.get("speedup"))] +
                    ([num("%.2f", r.get(k)) for k in ("dense16_us", "fp8_us", "fp8_baseline_us")] if dense else []) +
                    [num("%.1f", r.get("tflops")), num("%.1f", r.get("gbps")),
                     num("%.1f", None if fraction is None else 100 * fraction),
                     num("%.1f", None if sized is None else 100 * sized), r.get("config", "")])
    config = len(rows[0]) - 1
    table = align(rows, lambda c: c < 3 or c == config)
    for note in notes:
        table += f"* {baseline} us: {note}\n"
    copy_line = (f"copy bandwidth {copy:.0f} GB/s (device-to-device, read + write)" if copy
                 else "copy bandwidth unknown")
    return copy_line, table, summary_line(s, "shape")


def grouped_table(data):
    """A suite's grouped rows: format_grouped_table and format_grouped_summary of report.cpp."""
    grouped = data["grouped"]
    rows = [["op", "G", "MxNxK", "dtype", "dist", "ours us", "TFLOP/s", "dense us", "memory us", "roofline",
             "cuBLAS us", "speedup", "note"]]
    notes = []
    for r in grouped["records"]:
        note = r.get("note")
        if note and note not in notes:
            notes.append(note)
        rows.append([r["op"], str(r["groups"]), f"{r['m']}x{r['n']}x{r['k']}", r["dtype"], r["dist"],
                     num("%.2f", r.get("ours_us")), num("%.1f", r.get("tflops")), num("%.2f", r.get("dense_us")),
                     num("%.2f", r.get("memory_us")), num("%.2f", r.get("roofline_fraction")),
                     num("%.2f", r.get("baseline_us")), num("%.2fx", r.get("speedup")),
                     f"[{notes.index(note) + 1}]" if note else ""])
    table = align(rows, lambda c: c == 0 or 2 <= c <= 4 or c == 12)
    table += "".join(f"[{i + 1}] {note}\n" for i, note in enumerate(notes))

    def line(r, which, what, fmt):
        if r["count"] == 0:
            return f"grouped summary: no rows{which}"
        return (f"grouped summary: {r['count']} row{'' if r['count'] == 1 else 's'}{which}, geomean {what} "
                f"{num(fmt, r.get('geomean'))}, worst {num(fmt, r.get('worst'))} at {r['worst_row']}")

    s = grouped["summary"]
    summary = (line(s["roofline"], " run", "roofline fraction", "%.2f") + "\n" +
               line(s["speedup"], f" with a {s['baseline']} baseline", "speedup", "%.2fx"))
    return table, summary


def chain_table(data):
    rows = [["chain", "GEMMs", "MB", "ours us", "cuBLASLt us", "speedup", "ours %copy", "cuBLASLt %copy"]]
    for c in data["chains"]:
        ours_copy = ratio(c.get("copy_us"), c.get("ours_us"))
        base_copy = ratio(c.get("copy_us"), c.get("baseline_us"))
        rows.append([c["name"], str(c["gemms"]), num("%.1f", c["bytes"] / 1e6), num("%.2f", c.get("ours_us")),
                     num("%.2f", c.get("baseline_us")), num("%.2fx", ratio(c.get("baseline_us"), c.get("ours_us"))),
                     num("%.1f", None if ours_copy is None else 100 * ours_copy),
                     num("%.1f", None if base_copy is None else 100 * base_copy)])
    return None, align(rows, lambda c: c == 0), summary_line(data["summary"], "chain")


def overhead_text(data):
    o = data["overhead"]
    line = (f"overhead: ours {num('%.2f', o.get('ours_us'))} us per call, cuBLASLt {num('%.2f', o.get('baseline_us'))} "
            f"us per call, bare launch {num('%.2f', o.get('bare_us'))} us per call; ours - bare "
            f"{num('%.2f', o.get('ours_minus_bare_us'))} us, ours / cuBLASLt {num('%.2fx', o.get('ours_over_baseline'))} "
            f"({o.get('shape')}, {o.get('calls')} calls x {o.get('repeats')}, median)")
    return None, None, line


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def committed_date(path):
    """The date the result file was first committed (the day of the run, near enough)."""
    return git("log", "--diff-filter=A", "--format=%cs", "-1", "--", path) or "uncommitted"


def command_for(suite, data):
    if "chains" in data:
        files = " ".join(f"bench/chains/{c['name']}.txt" for c in data["chains"])
        return f"build/gemmkit bench --chain {files} --json out.json"
    if "overhead" in data:
        return "build/gemmkit bench --overhead --json out.json"
    if suite == "overhead":
        return "build/gemmkit bench --overhead"
    return f"build/gemmkit bench --suite {suite} --json out.json"


def section(path, level, heading="suite"):
    base = os.path.basename(path)
    m = NAME.match(base)
    suite, device, commit, tag = (m["suite"], m["device"], m["commit"], m["tag"]) if m else (base, None, None, None)
    title = suite if heading == "suite" or not device else f"{device.upper()}, {commit}"
    out = [f"{'#' * level} {title}" + (f" ({tag})" if tag else ""), ""]
    facts = []
    if device:
        facts.append(f"device: {DEVICES[device]}")
    if commit:
        facts.append(f"commit: {commit}")
    facts.append(f"date: {committed_date(path)}")
    facts.append(f"raw: `{path}`")
    if path.endswith(".txt"):
        command = [f"`{command_for(suite, {})}`", ""] if suite == "overhead" else []
        out += ["; ".join(facts), "", *command, "```", open(path).read().rstrip("\n"), "```", ""]
        return "\n".join(out)
    data = json.load(open(path))
    if "records" in data:
        copy_line, table, summary = suite_table(data)
        if "grouped" in data:  # after the dense rows; a suite of grouped lines only has none
            grouped, grouped_summary = grouped_table(data)
            table = table + "\n" + grouped if data["records"] else grouped
            summary = summary + "\n" + grouped_summary if data["records"] else grouped_summary
    elif "chains" in data:
        copy_line, table, summary = chain_table(data)
    elif "overhead" in data:
        copy_line, table, summary = overhead_text(data)
    else:
        raise SystemExit(f"{path}: neither bench records, chains nor overhead")
    if copy_line:
        facts.append(copy_line)
    out += ["; ".join(facts), "", f"`{command_for(suite, data)}`", "", "```"]
    if table:
        out.append(table.rstrip("\n"))
    out += [summary, "```", ""]
    return "\n".join(out)


def newest(results=RESULTS):
    """The newest plain result of each suite and device: latest committed, then latest commit."""
    best = {}
    for base in sorted(os.listdir(results)):
        m = NAME.match(base)
        if not m or (m["tag"] and not PLAIN_TAG.match(m["tag"])) or m["suite"] not in SUITES:
            continue
        path = os.path.join(results, base)
        added = git("log", "--diff-filter=A", "--format=%ct", "-1", "--", path) or "9999999999"
        made = git("show", "-s", "--format=%ct", m["commit"]) or "0"
        # The first pass of a commit's run before its later passes.
        key = (int(added), int(made), m["tag"] is None, -int(m["tag"][-1]) if m["tag"] and m["tag"][-1].isdigit() else 0)
        slot = (m["suite"], m["device"])
        if slot not in best or key > best[slot][0]:
            best[slot] = (key, path)
    order = {s: i for i, s in enumerate(SUITES)}
    return [best[k][1] for k in sorted(best, key=lambda k: (order[k[0]], k[1]))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="bench JSON (or saved text) files")
    parser.add_argument("--newest", action="store_true", help="the newest result per suite and device in bench/results")
    parser.add_argument("--level", type=int, default=3, help="markdown heading level of each section (default 3)")
    parser.add_argument("--heading", choices=["suite", "device"], default="suite",
                        help="title each section by its suite (default) or by its device and commit")
    args = parser.parse_args()
    files = args.files + (newest() if args.newest else [])
    if not files:
        parser.error("give result files or --newest")
    for path in files:
        sys.stdout.write(section(path, args.level, args.heading) + "\n")


if __name__ == "__main__":
    main()
