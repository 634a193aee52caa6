#!/usr/bin/env bash
# On a GPU machine: Nsight Compute profiles of our kernel and cuBLASLt's on a few shapes, to see
# which kernel cuBLASLt picks and where each spends its time. Assumes scripts/gpu_check.sh (or
# a build into build-gpu) ran first. Usage: scripts/profile.sh "M N K" ["M N K" ...]
# Clocks are left as the card has them (--clock-control none). Output under $OUT or build-gpu/logs.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${GEMMKIT_BUILD_DIR:-build-gpu}
out=${OUT:-$build/logs}
mkdir -p "$out"
for shape in "$@"; do
  name=$(tr ' ' x <<< "$shape")
  echo "$shape NT bf16" > "$out/profile-$name.txt"
  ncu --clock-control none --kernel-name regex:'^(gemmkit_gemm|nvjet|sm90|cutlass)' --launch-count 4 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section LaunchStats --section Occupancy --section WarpStateStats --csv --page details \
    "$build/gemmkit" bench --suite "$out/profile-$name.txt" --warmup 1 --runs 20 \
    > "$out/ncu-$name.csv" 2> "$out/ncu-$name.err"
  echo "== $shape"
  grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Cluster Size|Grid Size|Registers Per Thread)"' \
    "$out/ncu-$name.csv" | awk -F'","' '{printf "%-60.60s %-28s %s\n", $5, $(NF-2), $NF}' | tr -d '"'
done
