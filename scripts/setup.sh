#!/usr/bin/env bash
# Installs what the build needs and is missing (Debian/Ubuntu packages). Does nothing on a
# machine that already has everything, e.g. the GPU machines, which have no network. For the
# developers' CMake tree and tests only: `pip install .` needs none of these packages (it takes
# nlohmann-json from PyPI, see cmake/dependencies.cmake, and CMake and Ninja where missing).
set -euo pipefail
missing=()
# True when a CMake package config for $1 sits in any usual prefix.
have_cmake_package() {
  local dir
  for dir in /usr/share/cmake /usr/lib/cmake /usr/lib/*/cmake /usr/local/lib/cmake /usr/local/share/cmake \
             /usr/local/lib/*/cmake; do
    [ -d "$dir/$1" ] && return 0
  done
  return 1
}
have_cmake_package nlohmann_json || missing+=(nlohmann-json3-dev)
have_cmake_package GTest || missing+=(libgtest-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "setup: the CUDA 13 toolkit is required" >&2; exit 1; }
