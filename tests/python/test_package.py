"""The installed package as a user without torch meets it: its version, and the one-line errors
that say how to get torch. Needs neither torch nor a GPU. Where torch is installed, the
subprocesses below hide it (None in sys.modules makes `import torch` fail as a missing module)."""

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gemmkit

ROOT = Path(__file__).resolve().parents[2]
HIDE_TORCH = "import sys; sys.modules['torch'] = None; "
NEEDS_TORCH = "needs torch, which is not installed: pip install 'gemmkit[torch]' (torch >= 2.11)"


def test_version_is_the_libraries_pyprojects_and_cmakes():
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    cmake = re.search(r"^project\(gemmkit VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text(), re.M)
    assert pyproject and cmake, "no version found in pyproject.toml or CMakeLists.txt"
    assert gemmkit.__version__ == gemmkit._gemmkit.version() == pyproject[1] == cmake[1]
    assert importlib.metadata.version("gemmkit") == gemmkit.__version__


def test_the_wheel_declares_and_ships_the_license():
    assert importlib.metadata.metadata("gemmkit")["License-Expression"] == "MIT"
    shipped = [f for f in importlib.metadata.files("gemmkit") if f.name == "LICENSE" and "licenses" in f.parts]
    assert len(shipped) == 1, importlib.metadata.files("gemmkit")
    assert shipped[0].read_text() == (ROOT / "LICENSE").read_text()


def test_git_commit_names_a_commit_or_nothing():
    assert re.fullmatch(r"([0-9a-f]{7,40}(\+dirty)?)?", gemmkit.__git_commit__), gemmkit.__git_commit__


def run_python(code, *args):
    return subprocess.run([sys.executable, "-c", HIDE_TORCH + code, *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", ["mm", "bmm", "addmm", "linear", "scaled_mm", "quantize", "grouped_mm",
                                  "scaled_grouped_mm"])
def test_torch_functions_without_torch_are_there_and_say_how_to_get_torch_when_called(name):
    # Found as attributes, by `from gemmkit import` and `import *`; each call raises
    # ModuleNotFoundError with the message.
    code = (f"import gemmkit\n"
            f"print(hasattr(gemmkit, {name!r}), {name!r} in dir(gemmkit), {name!r} in gemmkit.__all__)\n"
            f"from gemmkit import {name}\n"
            f"from gemmkit import *\n"
            f"for function in (gemmkit.{name}, {name}):\n"
            f"    try:\n        function(1, 2)\n    except ModuleNotFoundError as e:\n        print(e.name, e)\n"
            f"print(gemmkit.__version__, gemmkit.TensorView.__name__, gemmkit.gemm.__name__)")
    shown = run_python(code)
    assert shown.returncode == 0, shown.stderr
    expected = f"torch gemmkit.{name} {NEEDS_TORCH}"
    assert shown.stdout.splitlines() == ["True True True", expected, expected,
                                         f"{gemmkit.__version__} TensorView gemm"]


def test_help_lists_the_torch_functions_with_what_they_compute_without_torch():
    shown = run_python("import gemmkit, pydoc; print(pydoc.render_doc(gemmkit, renderer=pydoc.plaintext))")
    assert shown.returncode == 0, shown.stderr
    assert gemmkit._TORCH_FUNCTIONS["mm"].startswith("alpha * a @ b + beta * c")
    assert gemmkit._TORCH_FUNCTIONS["linear"].startswith("input @ weight.T + bias")
    for name, summary in gemmkit._TORCH_FUNCTIONS.items():
        # The module's description lists it; the FUNCTIONS section shows it with its summary.
        assert re.search(rf"^ +{name} +{re.escape(summary)}$", shown.stdout, re.M), (name, shown.stdout)
        assert re.search(rf"^ +{name}\(\*args, \*\*kwargs\)\n +{re.escape(summary)}\.$", shown.stdout, re.M), name
    assert "gemmkit.nn" in shown.stdout


def test_bench_without_torch_is_one_line_and_a_failure():
    shown = run_python("import runpy; runpy.run_module('gemmkit.bench', run_name='__main__')", "--suite", "small")
    assert shown.returncode == 1
    assert shown.stderr == f"python -m gemmkit.bench {NEEDS_TORCH}\n"
    imported = run_python("import gemmkit.bench")  # as a module it raises, for the importer to handle
    assert imported.returncode == 1 and imported.stderr.splitlines()[-1] == (
        f"ModuleNotFoundError: python -m gemmkit.bench {NEEDS_TORCH}")


class Stream:
    """What Progress writes to, a terminal or not."""

    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def suite_run(tty):
    from gemmkit._progress import Progress

    now = [0.0]
    stream = Stream(tty)
    progress = Progress(3, stream, clock=lambda: now[0])
    for shape, seconds in (("64x64x64 NT bf16", 10), ("128x64x64 NT bf16", 30), ("1x7168x2048 TN e4m3", 20)):
        progress.start(shape)
        now[0] += seconds
        progress.print(f"  {shape}: done")
        progress.finish()
    progress.close()
    return stream.text


def test_suite_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere():
    assert suite_run(tty=False) == ("  64x64x64 NT bf16: done\n  128x64x64 NT bf16: done\n"
                                    "  1x7168x2048 TN e4m3: done\n")
    shown = suite_run(tty=True)
    # The last state of the bottom line before each redraw: the shape in hand, the count done
    # and the time left (the mean time so far, times the problems left).
    states = [part for part in shown.split("\r\033[K") if part]
    assert states[:4] == ["[" + "." * 20 + "] 0/3 64x64x64 NT bf16", "  64x64x64 NT bf16: done\n",
                          "[" + "." * 20 + "] 0/3 64x64x64 NT bf16", "[######" + "." * 14 + "] 1/3, about 20 s left"]
    assert "[#############.......] 2/3 1x7168x2048 TN e4m3, about 20 s left" in states
    assert shown.endswith("[" + "#" * 20 + "] 3/3, about 0 s left\r\033[K")
