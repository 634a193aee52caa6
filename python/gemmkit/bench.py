"""python -m gemmkit.bench: gemmkit against torch, in one process, on the same tensors.

The method is `gemmkit bench`'s, through the same C++ parts (gemmkit._gemmkit.bench): for each
problem of a suite, enough buffer sets to cycle past L2 (fresh random inputs, uniform in [-1, 1);
FP8 scales in [0.5, 2), mx ones powers of two), warm-up runs, then timed runs of both sides
alternating behind a spin kernel, each after an empty kernel it cannot overlap and between two
events, and their medians; a copy of the problem's bytes timed the same way. The tables, summary
lines and JSON are the CLI's, with torch in cuBLASLt's (and cuBLAS's) place:

  --baseline torch     torch.mm / torch.bmm for 16-bit inputs; torch._scaled_mm for FP8, in the
                       problem's scaling mode, or per-tensor on the same buffers (marked *) where
                       it refuses the mode (mx on Hopper, block at M = 1, ...); for grouped lines
                       torch._grouped_mm, or torch._scaled_grouped_mm (rowwise), as
                       _bench_grouped.py says; for 4-bit weights (gemmkit.int4_mm, mxfp4_mm)
                       torch._weight_int4pack_mm on the same int4 codes, scales and zero
                       points, or torch.mm on the MXFP4 weights dequantised (marked *), both
                       outputs checked once a line; for W4A8 (e4m3 activations) torch._scaled_mm
                       on e4m3 weights of the same shape (marked *: torch has no W4A8 GEMM), ours
                       alone checked, and no torch baseline where A's scales are mx (torch has no
                       MXFP8 GEMM on Hopper); as _bench_lowbit.py says. FP4 x FP4 lines
                       (e2m1 activations, `e2m1,w4:mxfp4`) are listed, not run: this runner
                       makes no MXFP4 activations for them yet (gemmkit bench times them)
  --baseline compiled  the same calls compiled by torch.compile(mode="max-autotune-no-cudagraphs"),
                       which autotunes Triton kernels against them (minutes per suite)

A suite's grouped lines (`grouped OP G M N K dtype [mode] dist`) run after its dense ones, with
the CLI's floors and their own table (_bench_grouped.py). Both sides run through their Python
entry points (gemmkit.mm, bmm, scaled_mm, grouped_mm, scaled_grouped_mm with out=), so the GPU
times include whatever those launch. Each problem's times are a line on stderr, under a progress
bar (count, problem in hand, time left) where stderr is a terminal. --overhead times host
microseconds per call instead, on one small problem, and splits gemmkit's into its layers.
--block times a training step of LLM blocks through torch's products and gemmkit's
(_bench_block.py).
"""

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

import gemmkit
from . import _gemmkit as _C
from ._progress import Progress

try:  # registers the operators too: python -m gemmkit.bench imported gemmkit before torch
    gemmkit._load_torch("python -m gemmkit.bench")
except ModuleNotFoundError as error:
    if __name__ == "__main__" and error.name == "torch":  # the command: one line, no traceback
        sys.exit(str(error))
    raise
import torch  # noqa: E402

from . import _bench_lowbit as lowbit  # noqa: E402
from ._bench_buffers import BufferSet, run_ours, uniform  # noqa: E402
from ._bench_block import SIZES, run_blocks  # noqa: E402
from ._bench_grouped import bench_grouped_row  # noqa: E402

bench = _C.bench
BASELINES = {"torch": "torch", "compiled": "torch.compile"}


def suite_path(name):
    """A suite file: the path as given, else one shipped with the package by name."""
    path = Path(name)
    if path.exists():
        return str(path)
    shipped = Path(__file__).parent / "suites" / f"{path.stem}.txt"
    if shipped.exists():
        return str(shipped)
    raise ValueError(f"--suite {name}: no such file, nor a shipped suite (" +
                     ", ".join(p.stem for p in sorted(shipped.parent.glob("*.txt"))) + ")")


# --- dense rows -----------------------------------------------------------------------------------------

def torch_function(p, per_tensor):
    """torch's call as a function of (a, b, scale_a, scale_b, out): torch._scaled_mm for FP8
    (per-tensor scales of 1 where asked), else torch.mm or torch.bmm, into out where the output
    type is the inputs' (torch writes a new tensor otherwise)."""
    if p.mode != _C.ScaleMode.none:
        one = torch.ones((), device="cuda")

        def scaled(a, b, sa, sb, out):
            if per_tensor:
                sa = sb = one
            return torch._scaled_mm(a, b, sa, sb, out_dtype=out.dtype, use_fast_accum=False)
        return scaled
    mm = torch.bmm if p.batch > 1 else torch.mm
    if p.out_dtype == p.in_dtype:
        return lambda a, b, sa, sb, out: mm(a, b, out=out)
    return lambda a, b, sa, sb, out: mm(a, b, out_dtype=out.dtype)


def torch_calls(p, pool):
    """torch's calls for problem p, ([(function of tensors, those of a buffer set, note)], why
    torch cannot run it at all or ""): the problem's own call first (note ""), then, for FP8 with
    finer scales, per-tensor scales on the same buffers; lines with 4-bit weights as
    _bench_lowbit.torch_calls says."""
    if p.w4:
        return lowbit.torch_calls(p, pool)
    fp8_finer = p.mode not in (_C.ScaleMode.none, _C.ScaleMode.tensor)

    def arguments(s):
        return s.a, s.b, getattr(s, "sa", None), getattr(s, "sb", None), s.d_torch
    return [(torch_function(p, per_tensor), arguments, "per-tensor stand-in" if per_tensor else "")
            for per_tensor in ((False, True) if fp8_finer else (False,))], ""


def baseline(p, pool, kind):
    """(launcher of a set index, note, why not the problem's own call) for torch's side, or
    (None, "", why) where torch cannot run it: the first of torch_calls that runs on set 0. The
    launcher keeps torch's output in the set's d_torch (a new tensor where torch writes one)."""
    calls, why = torch_calls(p, pool)
    for function, arguments, note in calls:
        if kind == "compiled":  # one compilation: every set has the same shapes and strides
            function = torch.compile(function, mode="max-autotune-no-cudagraphs", dynamic=False)

        def launch(i, function=function, arguments=arguments):
            s = pool[i]
            s.d_torch = function(*arguments(s))

        try:
            launch(0)
            torch.cuda.synchronize()
        except Exception as error:  # torch refuses the mode, layout or shape
            refusal = (f"{note}: " if note else "") + (str(error).strip().splitlines() or ["?"])[0]
            why = f"{why}; {refusal}" if why else refusal
            continue
        return launch, note, why
    return None, "", why


def config_of(p, s):
    if s.w4:  # as gemm_4bit_tensors views them (_torch.launch_w4)
        b = _C.packed_weight_view_of(s.w, p.b_dtype, p.k, "w")
        scales = s.scales.t() if lowbit.is_mxfp4(p) else s.scales
        zeros = None if s.zeros is None else _C.view_of(s.zeros, "zeros")
        scale_a = _C.scale_view_of(s.sa, "x_scale", True) if p.w4a8 else None
        return bench.chosen_config(_C.view_of(s.a, "a"), b, _C.view_of(s.d, "d"), mode_a=p.mode_a, scale_a=scale_a,
                                   mode_b=p.mode, scale_b=_C.view_of(scales, "scales"), group=p.group, zeros=zeros)
    views = [_C.view_of(t, n) for t, n in ((s.a, "a"), (s.b, "b"), (s.d, "d"))]
    if not s.fp8:
        return bench.chosen_config(*views)
    return bench.chosen_config(*views, p.mode, _C.scale_view_of(s.sa, "scale_a", True), p.mode,
                               _C.scale_view_of(s.sb, "scale_b", False))


def copy_launcher(total_bytes, sets):
    """A copy that moves total_bytes (half read, half written) per set, or None where half of
    the free memory does not hold them."""
    half = int(total_bytes / 2) // 16 * 16
    free, _ = torch.cuda.mem_get_info()
    if half == 0 or 2 * half * sets > free / 2:
        return None
    memory = torch.empty(sets, 2, half, dtype=torch.uint8, device="cuda")
    return lambda i: memory[i, 1].copy_(memory[i, 0])


def measure_copy_gbps(timer):
    free, _ = torch.cuda.mem_get_info()
    mib = 1 << 20
    half = min(1024 * mib, free // 4 // mib * mib)
    if half < 256 * mib:
        return math.nan
    copy = copy_launcher(2 * half, 1)
    return bench.copy_gbps(half, timer.median_us(1, [copy])[0]) if copy else math.nan


def shape_of(p):
    return f"{p.m}x{p.n}x{p.k}" + (f" x{p.batch}" if p.batch > 1 else "") + f" {p.layout} {p.type_spec}"


def bench_problem(p, timer, info, kind, say):
    """One suite problem's record; its lines go to say()."""
    name = BASELINES[kind]
    free, _ = torch.cuda.mem_get_info()
    sets = bench.buffer_set_count(p.bytes + (lowbit.torch_bytes(p) if p.w4 else 0), info["l2_bytes"], free)
    pool = [BufferSet(p) for _ in range(sets)]
    r = bench.BenchRecord()
    r.m, r.n, r.k, r.batch, r.layout, r.dtype = p.m, p.n, p.k, p.batch, p.layout, p.type_spec
    r.config = config_of(p, pool[0])
    launchers = [lambda i: run_ours(p, pool[i])]
    theirs, r.baseline_note, why = baseline(p, pool, kind)
    if theirs is not None:
        launchers.append(theirs)
    if why:
        instead = "timing it with per-tensor scales instead" if theirs else "no baseline"
        say(f"{name} cannot run {shape_of(p)} ({why}): {instead}")
    if p.w4:  # both outputs against float64 once, before timing: torch's conventions were read, not run
        run_ours(p, pool[0])
        # A W4A8 line's torch runs other weights (a stand-in): ours alone is checked.
        theirs_checked = theirs is not None and not p.w4a8
        outputs = {"ours": pool[0].d, name: pool[0].d_torch} if theirs_checked else {"ours": pool[0].d}
        for who, differs in lowbit.check(p, pool[0], outputs).items():
            say(f"{shape_of(p)}: {differs}")
            if who != "ours":  # torch's time is then not of this product: the note marks it
                r.baseline_note = f"{r.baseline_note}; {differs}" if r.baseline_note else differs
    medians = timer.median_us(sets, launchers)
    r.ours_us = medians[0]
    r.baseline_us = medians[1] if theirs is not None else math.nan
    copy = copy_launcher(p.bytes, sets)
    r.copy_us = timer.median_us(sets, [copy])[0] if copy else math.nan
    r.speedup = r.baseline_us / r.ours_us
    r.tflops = bench.gemm_tflops(p.m, p.n, p.k, p.batch, r.ours_us)
    r.gbps = p.bytes / (r.ours_us * 1e-6) / 1e9  # as the CLI's: 4-bit weights' scales and zeros included
    note = f" ({r.baseline_note})" if r.baseline_note else ""
    say(f"  {shape_of(p)} {r.config}: ours {r.ours_us:.1f} us, {name} {r.baseline_us:.1f} us{note}, "
        f"copy {r.copy_us:.1f} us ({sets} buffer sets)")
    return r


def run_suite(args, suite):
    device = torch.cuda.current_device()
    info = bench.device_info(device)
    stream = torch.cuda.Stream()
    name = BASELINES[args.baseline]
    with torch.cuda.stream(stream):
        timer = bench.GpuTimer(stream.cuda_stream, args.warmup, args.runs, info["sm_clock_khz"])
        copy_gbps = measure_copy_gbps(timer)
        print(f"device {device}: {info['name']}, {info['sm_count']} SMs, L2 {info['l2_bytes'] >> 20} MB; "
              f"{bench.format_copy_bandwidth(copy_gbps)}; {args.warmup} warm-up and {args.runs} timed runs per "
              f"problem, median; against {name} {torch.__version__}", flush=True)
        # A bar on a terminal, else the lines alone; the grouped lines after the dense ones, as the CLI.
        dense = [p for p in suite.dense if p.in_dtype != _C.DType.e2m1]
        for p in (p for p in suite.dense if p.in_dtype == _C.DType.e2m1):
            print(f"{suite.name}:{p.line}: {shape_of(p)} listed, not run: MXFP4 activations, which only gemmkit "
                  "bench times (this runner makes no MXFP4 x for them yet)", file=sys.stderr)
        progress = Progress(len(dense) + len(suite.grouped), sys.stderr)
        records, grouped = [], []
        for p in dense:
            progress.start(shape_of(p))
            records.append(bench_problem(p, timer, info, args.baseline, progress.print))
            progress.finish()
        for p in suite.grouped:
            r = bench.grouped_record(p)
            progress.start(bench.grouped_name(r))
            grouped.append(bench_grouped_row(p, r, timer, info, args.baseline == "compiled", name, progress.print))
            progress.finish()
        progress.close()
    # As the CLI prints them: each table and summary where the suite has such lines.
    summary = bench.summarize(records)
    if records:
        print(bench.format_table(records, copy_gbps, name), end="")
    if grouped:
        print(("\n" if records else "") + bench.format_grouped_table(grouped, copy_gbps, name), end="")
    if args.json:
        Path(args.json).write_text(bench.to_json(records, summary, copy_gbps, name, grouped) + "\n")
    if records:
        print(bench.format_summary(summary, name))
    if grouped:
        print(bench.format_grouped_summary(bench.summarize_grouped(grouped, copy_gbps), name))


# --- host overhead ----------------------------------------------------------------------------------

CALLS, REPEATS, WARMUP = 2000, 5, 100


def run_overhead(args):
    """Host microseconds per call: back-to-back calls with no synchronisation, on an idle stream
    (drained before and after each repeat), repeats of every row alternating. The rows take
    gemmkit.mm apart: torch's dispatcher (the custom operator), the binding that reads the tensors'
    views and calls the C++ entry point, the same with views built beforehand, and a binding call
    that does nothing."""
    m, n, k = (int(v) for v in args.overhead_shape.split(","))
    a = uniform((m, k), torch.bfloat16, False)
    b = uniform((k, n), torch.bfloat16, True)  # NT, as the CLI's --overhead
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    views = [_C.view_of(t, name) for t, name in ((a, "a"), (b, "b"), (d, "d"))]
    op = torch.ops.gemmkit.gemm.default
    none = _C.ScaleMode.none
    rows = {
        "torch.mm(a, b)": lambda: torch.mm(a, b),
        "gemmkit.mm(a, b)": lambda: gemmkit.mm(a, b),
        "torch.mm(a, b, out=d)": lambda: torch.mm(a, b, out=d),
        "gemmkit.mm(a, b, out=d)": lambda: gemmkit.mm(a, b, out=d),
        "torch.ops.gemmkit.gemm (dispatcher)": lambda: op(a, b, None, None, "none", "none", None, 1.0, 0.0, None),
        "_C.gemm_tensors (reading views + C++)": lambda: _C.gemm_tensors(a, b, d, 1.0, 0.0, None, stream.cuda_stream,
                                                                         none, None, none, None),
        "_C.gemm(views) (binding + C++)": lambda: _C.gemm(*views, 1.0, 0.0, None, stream.cuda_stream),
        "gemmkit.tuning_mode() (binding only)": _C.tuning_mode,
    }
    times = {row: [] for row in rows}
    with torch.cuda.stream(stream):
        for call in rows.values():
            for _ in range(WARMUP):
                call()
        for _ in range(REPEATS):
            for row, call in rows.items():
                stream.synchronize()
                start = time.perf_counter()
                for _ in range(CALLS):
                    call()
                times[row].append((time.perf_counter() - start) / CALLS * 1e6)
                stream.synchronize()
    shape = f"{m}x{n}x{k} NT bf16"
    print(f"device {torch.cuda.current_device()}: {torch.cuda.get_device_name()}; host microseconds per call, "
          f"{CALLS} back-to-back calls x {REPEATS} repeats per row; torch {torch.__version__}")
    width = max(map(len, rows))
    print(f"{'call':<{width}}  median us  min us  max us")
    for row, us in times.items():
        print(f"{row:<{width}}  {statistics.median(us):9.2f}  {min(us):6.2f}  {max(us):6.2f}")
    medians = {row: statistics.median(us) for row, us in times.items()}
    if args.json:
        Path(args.json).write_text(json.dumps({"overhead": {"shape": shape, "calls": CALLS, "repeats": REPEATS,
                                                            "median_us": medians}}, indent=2) + "\n")
    print(f"overhead: gemmkit.mm {medians['gemmkit.mm(a, b)']:.2f} us per call, torch.mm "
          f"{medians['torch.mm(a, b)']:.2f} us per call ({shape}, {CALLS} calls x {REPEATS}, median)")


def overhead_shape(text):
    """--overhead-shape's M,N,K, three positive integers; malformed, a usage error (exit 2)."""
    if not re.fullmatch(r"[0-9]+,[0-9]+,[0-9]+", text) or 0 in map(int, text.split(",")):
        raise argparse.ArgumentTypeError(f"expected M,N,K as three positive integers, got {text!r}")
    return text


def positive(text):
    """A count of at least 1; else a usage error (exit 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def check_writable(path):
    """Exits (status 1) where --json's `path` cannot be written, before a run that would then lose
    its results. Leaves the file as it was: an existing one is opened for appending and not
    written, a new one is created and removed."""
    path = Path(path)
    existed = path.is_symlink() or path.exists()
    try:
        path.open("a").close()
    except OSError as error:
        raise SystemExit(f"gemmkit.bench: cannot write --json {path} ({error.strerror})") from None
    if not existed:
        path.unlink()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m gemmkit.bench", description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 success; 1 the run could not be done (a suite file missing or wrong, a --json path "
               "that cannot be written, checked before the run, no sm_90 GPU, no torch, a CUDA error); 2 a usage "
               "error (an unknown option, a value missing or malformed)")
    parser.add_argument("--suite", default="dense-large", help="a suite file, or a shipped suite's name")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--baseline", choices=sorted(BASELINES), default="torch")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--overhead", action="store_true", help="host microseconds per call instead")
    parser.add_argument("--overhead-shape", type=overhead_shape, default="64,64,64",
                        help="M,N,K of the --overhead problem")
    block = parser.add_argument_group("training blocks", "--block times a training step (forward and backward) of "
                                      "LLM blocks through torch's products and through gemmkit's instead of a suite; "
                                      "--warmup counts warm-up steps there")
    block.add_argument("--block", nargs="+", choices=sorted(SIZES),
                       help="the blocks: mlp (Llama-3-8B), moe (Qwen3-30B-A3B-like)")
    block.add_argument("--modes", nargs="+", choices=["eager", "compiled"], default=["eager", "compiled"],
                       help="eager, under torch.compile, or both (default)")
    block.add_argument("--steps", type=positive, default=20, help="timed steps (median reported)")
    block.add_argument("--top", type=int, default=0, metavar="N", help="also list each step's N most costly kernels")
    for name, help_text in (("tokens", "rows of the input"), ("hidden", "model width"),
                            ("intermediate", "the MLP's or each expert's inner width"),
                            ("experts", "moe: experts"), ("top-k", "moe: experts per token")):
        block.add_argument(f"--{name}", type=positive, help=f"{help_text} (default: the block's own)")
    args = parser.parse_args(argv)
    if args.json:
        check_writable(args.json)
    try:  # a malformed suite or option is reported in one line, GPU or not
        suite = None if args.overhead or args.block else bench.load_bench_suite(suite_path(args.suite))
        lines = [*suite.dense, *(g.dense for g in suite.grouped)] if suite else []
        fused = next((p for p in lines if p.epilogue), None)
        if fused:
            raise ValueError(f"{suite.name}:{fused.line}: a line under `epilogue {fused.epilogue}`, which only "
                             "gemmkit bench times so far; expected a suite without epilogue lines")
        batched_w4 = next((p for p in lines if p.w4 and p.batch > 1), None)
        if batched_w4:
            raise ValueError(f"{suite.name}:{batched_w4.line}: 4-bit weights over a batch of {batched_w4.batch} "
                             f"({batched_w4.type_spec}), which only gemmkit bench times (gemmkit.int4_mm and mxfp4_mm "
                             "take one weight matrix); expected w4 lines without a batch")
        if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
            raise SystemExit("gemmkit.bench: needs an sm_90 GPU (H100, H200)")
        if args.block:
            rows = run_blocks(args)
            if args.json:
                Path(args.json).write_text(json.dumps({"blocks": rows}, indent=2) + "\n")
        else:
            run_overhead(args) if args.overhead else run_suite(args, suite)
    except (ValueError, RuntimeError) as error:
        raise SystemExit(f"gemmkit.bench: {error}") from None


if __name__ == "__main__":
    main()
