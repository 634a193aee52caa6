#!/usr/bin/env bash
# Builds the Python package once, as a wheel (build/python/dist), and runs tests/python twice:
#   1. in a fresh virtual environment (build/python/venv) that holds the wheel with its test and
#      plot extras and no torch, as a user without torch has it: import, version, the C++ API,
#      the errors that say how to get torch, the plot;
#   2. with the python3 on PATH and its torch, the wheel unpacked into build/python/site on
#      PYTHONPATH: the test files that need torch (they skip, saying so, without torch or an
#      sm_90 GPU).
# The wheel is built as `pip install .` builds it, in an isolated build environment, but with any
# nlohmann_json CMake package ignored, so that the road through the PyPI package's headers
# (cmake/dependencies.cmake) is the one tested, and so are pyproject.toml's build requirements. A
# new isolated environment makes scikit-build-core clear its CMake cache: each run builds anew
# (about 2.5 CPU-minutes). Packages come from .whl/ where it exists (carry it
# to a machine without network; fill it where there is one, for the GPU machines' Python 3.12:
#   python3 -m pip download -d .whl --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 scikit-build-core nanobind nlohmann-json pytest
# and add matplotlib to the list for the plot tests in the virtual environment), else from PyPI.
# Arguments go to both pytest runs (e.g. -k graph); each lists its 15 slowest tests, to plan
# shards by. GEMMKIT_PYTHON_SHARD=I/N runs the I-th of N shares of the torch run's test files
# (every Nth file from the I-th, in name order), the run without torch with the first: for GPU
# machines whose one call cannot hold the whole suite.
# Where GEMMKIT_TORCH_INSTALL is set (by .ci/run), the torch run first waits for the file
# $GEMMKIT_TORCH_INSTALL.status, the exit status of a torch install, and fails where that install
# did.
set -euo pipefail
cd "$(dirname "$0")/.."
shard=${GEMMKIT_PYTHON_SHARD:-1/1}
if ! [[ $shard =~ ^([1-9][0-9]*)/([1-9][0-9]*)$ ]] || [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
  echo "GEMMKIT_PYTHON_SHARD: $shard; expected I/N with 1 <= I <= N" >&2
  exit 2
fi
share=${BASH_REMATCH[1]} shares=${BASH_REMATCH[2]}
out=$PWD/build/python venv=$PWD/build/python/venv
if [ -d .whl ]; then source=(--no-index --find-links .whl); else source=(); fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

rm -rf "$venv" "$out/dist" "$out/site"
python3 -m venv "$venv"
"${pip[@]}" wheel --no-deps "${source[@]}" -w "$out/dist" \
  -Ccmake.define.CMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON .
wheel=$(echo "$out"/dist/gemmkit-*.whl)
extras=test,plot
if [ -d .whl ] && ! compgen -G ".whl/matplotlib-*" >/dev/null; then extras=test; fi
"${pip[@]}" install "${source[@]}" "$wheel[$extras]"
"${pip[@]}" install --no-deps --target "$out/site" "$wheel"
pythonpath=$out/site
if ! python3 -c "import pytest" 2>/dev/null; then
  "${pip[@]}" install "${source[@]}" --upgrade --target "$out/tools" pytest
  pythonpath+=:$out/tools
fi

# One pytest run of "${tests[@]}" by the command in the arguments. Exit 5 (no test collected)
# passes only where the script's arguments chose the tests and the other run found some.
failed=0 ran=0
run_pytest() {
  local name=$1 status=0
  shift
  echo "== python tests, $name"
  "$@" -m pytest -q -rs --durations=15 -p no:cacheprovider "${tests[@]}" "${args[@]}" || status=$?
  if [ "$status" -eq 5 ] && [ "${#args[@]}" -gt 0 ]; then
    echo "(none of these tests matches ${args[*]})"
  elif [ "$status" -ne 0 ]; then
    echo "python tests, $name: pytest exited with $status" >&2
    failed=1
  else
    ran=$((ran + 1))
  fi
}
args=("$@")
tests=(tests/python)
if [ "$share" -eq 1 ]; then run_pytest "without torch ($venv)" "$venv/bin/python"; fi
if [ -n "${GEMMKIT_TORCH_INSTALL:-}" ]; then  # .ci/run's torch install, begun in the background
  echo "== waiting for torch to be installed ($GEMMKIT_TORCH_INSTALL.log)"
  while [ ! -e "$GEMMKIT_TORCH_INSTALL.status" ]; do sleep 2; done
  if [ "$(cat "$GEMMKIT_TORCH_INSTALL.status")" != 0 ]; then
    cat "$GEMMKIT_TORCH_INSTALL.log" >&2
    echo "python tests: installing torch failed" >&2
    exit 1
  fi
fi
mapfile -t tests < <(grep -l 'importorskip("torch"' tests/python/test_*.py | awk -v i="$share" -v n="$shares" '(NR - i) % n == 0')
run_pytest "with the torch of $(command -v python3)" env PYTHONPATH="$pythonpath" python3
if [ "$failed" -eq 0 ] && [ "$ran" -eq 0 ]; then
  echo "python tests: no test matches ${args[*]}" >&2
  failed=1
fi
exit "$failed"
