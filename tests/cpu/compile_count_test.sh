#!/bin/sh
# bench without a GPU compiles the suite's kernels: run twice on an empty kernel cache, the first
# run compiles every kernel, the second finds them all cached, and both count the same
# configurations. Skips (77) where a GPU is present, where bench would time the suite instead.
set -eu
gemmkit=$1
suite=$2
if "$gemmkit" --version | grep -q '^device '; then
  echo "a CUDA device is present: bench would time the suite"
  exit 77
fi
GEMMKIT_CACHE_DIR=$(mktemp -d)
export GEMMKIT_CACHE_DIR
trap 'rm -rf "$GEMMKIT_CACHE_DIR"' EXIT
pattern='s/.*compiled \([0-9]*\) kernels\{0,1\} for \([0-9]*\) configurations\{0,1\} (\([0-9]*\) w[ae][sr]e\{0,1\} cached).*/\1 \2 \3/p'
first=$("$gemmkit" bench --suite "$suite")
second=$("$gemmkit" bench --suite "$suite")
echo "$first"
echo "$second"
set -- $(echo "$first" | sed -n "$pattern") $(echo "$second" | sed -n "$pattern")
[ $# -eq 6 ] || { echo "FAIL: expected 'compiled N kernels for M configurations (K were cached)' twice"; exit 1; }
# First: N compiled, none cached. Second: none compiled, the same N cached, as many configurations.
[ "$3" -eq 0 ] && [ "$4" -eq 0 ] && [ "$6" -eq "$1" ] && [ "$5" -eq "$2" ] && [ "$1" -gt 0 ] && [ "$1" -le "$2" ] ||
  { echo "FAIL: counts do not add up"; exit 1; }
echo PASS
