#!/usr/bin/env bash
# On a GPU machine: gemmkit's grouped GEMMs and DeepGEMM's on the same shapes, in one call (issue
# 46's comparison). Usage: scripts/deepgemm_moe.sh KIT_DIR
#   KIT_DIR: the DeepGEMM kit (run.sh, bench.py, its source tarball; ../shared/peers/deepgemm
#            beside a developer's checkout), copied into a folder git ignores and carried along,
#            since only the repository travels to the GPU machine.
# Builds the CLI into build-gpu, installs DeepGEMM (its run.sh, ~90 s, while ours runs), benches
# moe.txt's balanced forward rows (contiguous and masked, bf16 and FP8 block), then times
# DeepGEMM's grouped kernels on the same shapes. Output in $OUT (or build-gpu/logs):
# moe-balanced.{txt,json} and deepgemm.jsonl (one line a case; its README says what they hold).
set -uo pipefail
cd "$(dirname "$0")/.."
kit=$(realpath "${1:?usage: scripts/deepgemm_moe.sh KIT_DIR}")
out=${OUT:-build-gpu/logs}
mkdir -p "$out"
export GEMMKIT_CACHE_DIR=${GEMMKIT_CACHE_DIR:-$PWD/build-gpu/kernel-cache}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" --target gemmkit > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
bash "$kit/run.sh" --ops none > /dev/null 2> "$out/deepgemm-install.log" &  # installs only
install=$!
grep -E '^grouped (fwd|masked) .* balanced$' bench/suites/moe.txt | grep -Ev 'tensor|skew|zipf' > "$out/moe-balanced-suite.txt"
build-gpu/gemmkit bench --suite "$out/moe-balanced-suite.txt" --json "$out/moe-balanced.json" > "$out/moe-balanced.txt" 2>&1
wait $install || { tail -5 "$out/deepgemm-install.log"; exit 1; }
bash "$kit/run.sh" --warm 8 --ops m_grouped_fp8_gemm_nt_contiguous,m_grouped_fp8_gemm_nt_masked,m_grouped_bf16_gemm_nt_contiguous,m_grouped_bf16_gemm_nt_masked \
  > "$out/deepgemm.jsonl" 2> "$out/deepgemm.err"
grep -E '^(fwd|masked)' "$out/moe-balanced.txt"
cut -c1-160 "$out/deepgemm.jsonl"
