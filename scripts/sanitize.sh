#!/usr/bin/env bash
# Builds the CPU tests (gemmkit_cpu_tests, not the NVRTC compile tests) with AddressSanitizer
# and UndefinedBehaviorSanitizer in build-sanitize/ and runs them; any finding stops the run
# and fails the script. Extra arguments go to the test binary (e.g. --gtest_filter=Suite*).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH=/usr/local/cuda/bin:$PATH

# Every target gets the flags, through CMAKE_CXX_FLAGS and the linker flags. -O1 and a unity
# build (a few sources per compiler run: 1.9 against 2.5 minutes on two cores) keep the build
# and the run quick; Debug adds -g for the reports' line numbers. GCC warns of
# uninitialised values in libstdc++'s <regex> under the sanitizers, wrongly: those warnings are
# off. The sanitizers make GCC link with --no-as-needed, which would make the tests need
# libcuda.so.1 (linked as a stub, never called: driver functions are looked up at run time),
# and a machine without a GPU driver has none; --as-needed drops it again.
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 $sanitize -Wno-maybe-uninitialized" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitize -Wl,--as-needed" -DCMAKE_SHARED_LINKER_FLAGS="$sanitize -Wl,--as-needed" \
  -DGEMMKIT_BUILD_TOOLS=OFF -DGEMMKIT_BUILD_PYTHON=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build build-sanitize -j "$(nproc)" --target gemmkit_cpu_tests

# protect_shadow_gap=0: the CUDA driver maps memory at fixed addresses inside ASan's shadow gap,
# so on a machine with a GPU its initialisation fails unless the gap is left unprotected.
# LeakSanitizer stays on for gemmkit's code; allocations the CUDA driver and runtime keep for the
# life of the process (where a GPU is present) are not ours to free, and are suppressed.
printf 'leak:libcuda.so\nleak:libcudart.so\nleak:libnvrtc\n' >build-sanitize/lsan.supp
export ASAN_OPTIONS="protect_shadow_gap=0:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$PWD/build-sanitize/lsan.supp:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
# Kernels compiled by tests go to a cache of this build's own.
export GEMMKIT_CACHE_DIR="$PWD/build-sanitize/kernel-cache"
build-sanitize/tests/gemmkit_cpu_tests "$@"
