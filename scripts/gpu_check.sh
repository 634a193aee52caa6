#!/usr/bin/env bash
# On a GPU machine: build with every core, run every test (GPU and Python included; carry .whl/,
# see scripts/python_test.sh), benchmark suites against cuBLASLt, check the kernels' SASS, and
# print a short summary last.
# Logs go to $OUT (or build-gpu/logs). GEMMKIT_SUITES lists the suites to bench (default
# dense-large; empty for none; e.g. "dense-large fp8-large fp8-decode fp8-mx fp8-odd"), each into
# bench-SUITE.{txt,json}; GEMMKIT_BLOCKS the training blocks to time (python -m gemmkit.bench
# --block; none by default), into blocks.{txt,json}; GEMMKIT_COMMIT names the commit where the
# tree travels without .git; GEMMKIT_PYTHON=0 leaves the Python tests out (scripts/python_test.sh
# runs them alone, e.g. in a second call where one call's time cannot hold both).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${GEMMKIT_BUILD_DIR:-build-gpu}
out=${OUT:-$build/logs}
mkdir -p "$out"
export GEMMKIT_CACHE_DIR=${GEMMKIT_CACHE_DIR:-$PWD/$build/kernel-cache}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$out/device.txt" 2>&1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMMKIT_BUILD_TESTS=ON > "$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

# --no-tests=error: a build dir configured without the tests must not pass as a clean run.
ctest --test-dir "$build" -j 8 --output-on-failure --timeout 1200 --no-tests=error > "$out/tests.log" 2>&1
tests_rc=$?
# The Python package's tests, torch's included; without network they need .whl/ carried along.
python_rc=0
if [ "${GEMMKIT_PYTHON:-1}" != 0 ]; then
  scripts/python_test.sh > "$out/python-tests.log" 2>&1
  python_rc=$?
else
  echo "left out (GEMMKIT_PYTHON=0)" > "$out/python-tests.log"
fi

bench_rc=0
for suite in ${GEMMKIT_SUITES-dense-large}; do
  "$build/gemmkit" bench --suite "bench/suites/$suite.txt" --json "$out/bench-$suite.json" \
    > "$out/bench-$suite.txt" 2> "$out/bench-$suite.err" || bench_rc=1
done

# Training steps of LLM blocks through torch's products and gemmkit's (GEMMKIT_BLOCKS, e.g.
# "mlp moe"), with the wheel the Python tests installed.
blocks_rc=0
if [ -n "${GEMMKIT_BLOCKS:-}" ]; then
  PYTHONPATH=build/python/site python3 -m gemmkit.bench --block $GEMMKIT_BLOCKS --top 12 \
    --json "$out/blocks.json" > "$out/blocks.txt" 2>&1 || blocks_rc=1
fi

# Every cached kernel: HGMMA (16-bit) or QGMMA (8-bit) present in the TMA kernels, no local-memory
# traffic anywhere. One cuobjdump per kernel, on every core (one at a time took minutes).
sass_line() {
  local tmp sass
  tmp=$(mktemp)
  tail -c +33 "$1" > "$tmp"  # drop the cache entry's 32-byte header
  sass=$(cuobjdump -sass "$tmp" 2>&1)
  rm -f "$tmp"
  printf '%s: %s HGMMA+QGMMA, %s LDL/STL, function %s\n' "$(basename "$1")" "$(grep -cE "HGMMA|QGMMA" <<< "$sass")" \
    "$(grep -cE '\b(LDL|STL)\b' <<< "$sass")" "$(grep -m1 -oE 'Function : \S+' <<< "$sass")"
}
export -f sass_line
find "$GEMMKIT_CACHE_DIR" -maxdepth 1 -name '*.cubin' -print0 2>/dev/null |
  xargs -0 -r -P "$(nproc)" -I{} bash -c 'sass_line "$1"' _ {} | sort > "$out/sass.txt"

echo "== device: $(cat "$out/device.txt")"
echo "== commit: ${GEMMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
echo "== sass:"; cat "$out/sass.txt"
echo "== failed tests:"; grep -E '^\s+[0-9]+ - ' "$out/tests.log" | head -20
echo "== tests: $(grep -E 'tests passed|tests failed' "$out/tests.log" | tail -1) (exit $tests_rc)"
echo "== python tests: $(tail -1 "$out/python-tests.log") (exit $python_rc)"
if [ -n "${GEMMKIT_BLOCKS:-}" ]; then
  echo "== blocks (exit $blocks_rc):"; sed -n '/^block /,/^$/p' "$out/blocks.txt"; tail -3 "$out/blocks.txt"
fi
echo "== bench (exit $bench_rc):"
for suite in ${GEMMKIT_SUITES-dense-large}; do
  echo "-- $suite"; grep -E '^summary' "$out/bench-$suite.txt"; tail -2 "$out/bench-$suite.err"
done
[ $tests_rc -eq 0 ] && [ $python_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $blocks_rc -eq 0 ]
