#!/usr/bin/env bash
# Builds and runs every test: CPU tests, NVRTC compiles of every kernel, the install check,
# and the GPU tests (which skip, and are reported as skipped, without an sm_90 GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build -j "$(nproc)" --output-on-failure
