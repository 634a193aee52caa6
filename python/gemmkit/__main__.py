"""python -m gemmkit ARGS: the gemmkit command-line tool shipped in the package (info, verify,
bench against cuBLASLt, tune into the tuning database, quantize, compile), the same program as
the build's build/gemmkit. `python -m gemmkit.bench` times gemmkit against torch instead."""

import os
import sys
from pathlib import Path


def main():
    cli = Path(__file__).parent / "bin" / "gemmkit"
    if not cli.exists():
        sys.exit("gemmkit: this package was built without its command-line tool (CLI11 was not found when it "
                 "was built); install CLI11 (Debian: libcli11-dev) and reinstall")
    os.execv(cli, [str(cli), *sys.argv[1:]])


if __name__ == "__main__":
    main()
