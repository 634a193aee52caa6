#!/usr/bin/env bash
# Builds the Python package (pip install . into build/python/site) and runs its tests with the
# python3 on PATH, so with its torch where it has one (the torch tests skip, saying so, where it
# has not). nanobind, scikit-build-core and pytest go to build/python/tools: from .whl/ where it
# exists (carry it to a machine without network, filled where there is one by
# `python3 -m pip download -d .whl nanobind scikit-build-core pytest`), else from PyPI. Arguments
# go to pytest (e.g. -k graph).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$PWD/build/python/tools site=$PWD/build/python/site
pip=(python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --upgrade)
if [ -d .whl ]; then source=(--no-index --find-links .whl); else source=(); fi
"${pip[@]}" "${source[@]}" --target "$tools" nanobind scikit-build-core pytest
PYTHONPATH=$tools "${pip[@]}" --no-build-isolation --no-deps --target "$site" .
PYTHONPATH=$site:$tools python3 -m pytest -q -rs -p no:cacheprovider tests/python "$@"
