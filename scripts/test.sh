#!/usr/bin/env bash
# Builds and runs every test: CPU tests, NVRTC compiles of every kernel, the install check,
# the GPU tests (which skip, and are reported as skipped, without an sm_90 GPU), and the Python
# package's tests (scripts/python_test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build -j "$(nproc)" --output-on-failure
scripts/python_test.sh
