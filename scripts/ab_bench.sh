#!/usr/bin/env bash
# On a GPU machine: what a change moved. Benches suites with a build of another revision and with
# this tree, on the same GPU in one run, alternating (base, new, base, new), and prints each pass's
# summary line. Usage: scripts/ab_bench.sh BASE_SRC [SUITE ...]
#   BASE_SRC: a source tree of the revision to compare against, e.g. made here by
#             `mkdir .base && git archive REV | tar -x -C .base` (carried to the GPU machine).
#   SUITE:    a file name under bench/suites without .txt, or `chains` for the bench/chains files
#             at M = 1 and 8; default: dense-large fp8-large dense-decode small chains.
# GEMMKIT_AB_PASSES sets the number of passes (default 2).
# Builds BASE_SRC into build-base and this tree into build-gpu with every core (kept where they
# exist); JSON and logs go to $OUT (or build-gpu/logs) as ab-SUITE-{base,new}-PASS.{json,txt}.
set -uo pipefail
cd "$(dirname "$0")/.."
base_src=$(realpath "${1:?usage: scripts/ab_bench.sh BASE_SRC [SUITE ...]}"); shift
suites=${*:-dense-large fp8-large dense-decode small chains}
out=${OUT:-build-gpu/logs}
mkdir -p "$out"

build() {  # source tree, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMMKIT_BUILD_TESTS=OFF > "$out/configure-$(basename "$2").log" 2>&1 &&
    cmake --build "$2" -j "$(nproc)" --target gemmkit_cli > "$out/build-$(basename "$2").log" 2>&1
}
build "$base_src" "$PWD/build-base" || { tail -20 "$out/build-build-base.log"; exit 1; }
build "$PWD" "$PWD/build-gpu" || { tail -20 "$out/build-build-gpu.log"; exit 1; }

# Each side keeps a kernel cache of its own: the two generate different sources.
run() {  # side, suite, pass
  local cli=build-gpu/gemmkit; [ "$1" = base ] && cli=build-base/gemmkit
  local args=(--suite "bench/suites/$2.txt")
  [ "$2" = chains ] && args=(--chain bench/chains/*-m1.txt bench/chains/*-m8.txt)
  local start=$SECONDS
  GEMMKIT_CACHE_DIR=$PWD/build-$1-cache "$cli" bench "${args[@]}" --json "$out/ab-$2-$1-$3.json" \
    > "$out/ab-$2-$1-$3.txt" 2>&1
  printf '%-12s %-4s pass %s (%3d s): %s\n' "$2" "$1" "$3" $((SECONDS - start)) \
    "$(grep -E '^summary' "$out/ab-$2-$1-$3.txt" | tail -1)"
}
for suite in $suites; do
  for pass in $(seq "${GEMMKIT_AB_PASSES:-2}"); do
    run base "$suite" "$pass"
    run new "$suite" "$pass"
  done
done
