#!/usr/bin/env bash
# Compares the generated code of every kernel the compile tests build (tests/compile/
# compile_cases.h, and the reference module) at a git revision against the working tree. Each
# side's cubins are compiled with NVRTC by tests/compile/kernel_cubins.cpp (the working tree's
# copy, linked with each side's library), and their SASS instruction counts (cuobjdump -sass,
# NOPs left out) compared kernel by kernel, a kernel being one compiled source. Prints every
# kernel whose count differs by more than 1%, then the totals; exits 1 if any does, or if a
# kernel compiled on one side only. Needs no GPU.
# Usage: scripts/sass_diff.sh [REV (default HEAD)] [THREADS (default nproc)]
# The working tree's library is built in BUILD (default build/), the revision's in a scratch
# directory. Environment: CUOBJDUMP (default: cuobjdump on PATH, else
# /usr/local/cuda/bin/cuobjdump), CUDA_HOME (default /usr/local/cuda), BASE_TREE=DIR (REV's
# sources unpacked there, for a machine without the git repository), KEEP=DIR keeps the cubins
# and counts in DIR (a second run with the same KEEP and REV compiles only the working tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-HEAD}
threads=${2:-$(nproc)}
cuda=${CUDA_HOME:-/usr/local/cuda}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo "$cuda/bin/cuobjdump")}
work=${KEEP:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

# $1: a source tree, $2: its build directory, $3: where its cubins and counts go.
cubins() {
  local tree=$1 build=$2 out=$3
  mkdir -p "$out/cubins"
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGEMMKIT_BUILD_TESTS=OFF -DGEMMKIT_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$build" --target gemmkit -j "$threads" >/dev/null
  g++ -std=c++20 -pthread -I"$root/tests/compile" -I"$tree" -I"$tree/src" -I"$tree/include" -I"$cuda/include" \
    "$root/tests/compile/kernel_cubins.cpp" "$build/libgemmkit.a" -L"$cuda/lib64" -lnvrtc -lcudart_static -ldl -lrt \
    -Wl,-rpath,"$cuda/lib64" -o "$out/kernel_cubins"
  "$out/kernel_cubins" "$out/cubins" "$threads"
  # "id label<TAB>instructions", one line per cubin (the reference module's: all its kernels').
  export cuobjdump
  cut -f1 "$out/cubins/index.tsv" | xargs -P "$threads" -I{} sh -c \
    '"$cuobjdump" -sass "$1.cubin" 2>/dev/null | grep -E "/\*[0-9a-f]+\*/" | grep -vc NOP > "$1.count" || true' _ "$out/cubins/{}"
  while IFS=$'\t' read -r id label; do
    printf '%s %s\t%s\n' "$id" "$label" "$(cat "$out/cubins/$id.count")"
  done < "$out/cubins/index.tsv" | sort -t $'\t' -k1,1 > "$out/counts.tsv"
  if ! awk -F'\t' '$2 == 0 {exit 1}' "$out/counts.tsv"; then
    echo "cuobjdump found no instructions in some of $out/cubins" >&2
    exit 2
  fi
}

# The revision's counts are kept in KEEP and reused, as that side does not change.
base="$work/base"
if [ ! -s "$base/counts.tsv" ]; then
  tree=${BASE_TREE:-$base.tree}
  if [ -z "${BASE_TREE:-}" ]; then
    rm -rf "$tree" && mkdir -p "$tree"
    git -C "$root" archive "$rev" | tar -x -C "$tree"
  fi
  echo "compiling $rev..." >&2
  cubins "$tree" "$base/build" "$base"
fi
echo "compiling the working tree..." >&2
cubins "$root" "${BUILD:-$root/build}" "$work/tree"

join -t $'\t' -a1 -a2 -e missing -o 0,1.2,2.2 "$base/counts.tsv" "$work/tree/counts.tsv" |
  awk -F'\t' -v rev="$rev" '
    { kernels++
      if ($2 == "missing" || $3 == "missing") { printf "only on one side: %s (%s: %s, tree: %s)\n", $1, rev, $2, $3; missing++; next }
      old += $2; new += $3
      if ($2 != $3) changed++
      d = ($3 - $2) / $2 * 100
      if (d > 1 || d < -1) { printf "%+.2f%%  %s: %d -> %d\n", d, $1, $2, $3; bad++ } }
    END { printf "%d kernels: %d unchanged, %d changed, %d of them by more than 1%%, %d on one side only; " \
                 "total %d -> %d instructions (%+.3f%%)\n", kernels, kernels - changed - missing, changed, bad, missing,
                 old, new, (new - old) / old * 100
          exit bad + missing > 0 }'
