"""python -m gemmkit ARGS: the gemmkit command-line tool shipped in the package (info, verify,
bench against cuBLASLt, tune into the tuning database, quantize, compile), the same program as
the build's build/gemmkit. `python -m gemmkit.bench` times gemmkit against torch instead."""

import os
import sys
from pathlib import Path


def main():
    cli = Path(__file__).parent / "bin" / "gemmkit"
    if not cli.exists():  # every build installs it: only a damaged installation lacks it
        sys.exit(f"gemmkit: the command-line tool is missing from this installation ({cli}); reinstall gemmkit")
    os.execv(cli, [str(cli), *sys.argv[1:]])


if __name__ == "__main__":
    main()
