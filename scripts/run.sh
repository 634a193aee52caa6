#!/usr/bin/env bash
# The main job: install what is missing, build, and run `gemmkit bench` on the default suite.
# Without a GPU the bench says so, JIT-compiles the kernels it would launch, and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/gemmkit bench --suite bench/suites/dense-large.txt "$@"
