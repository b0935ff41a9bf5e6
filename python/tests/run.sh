#!/bin/sh
# The Python package's tests, as a user gets the package: this tree
# pip-installed into a venv of the build directory (BUILD/pyvenv, made
# once; pip fetches meson-python, meson and ninja from PyPI to build it),
# then pytest on python/tests against what was installed (with
# cloudpickle, an optional extra some tests need), and the example.
#
#	run.sh SRCROOT BUILDROOT
#
# Exit 77 (skipped) when this Python has no venv module (Debian:
# python3-venv; .ci/setup installs it).
set -eu
src=$1
venv=$2/pyvenv
if [ ! -x "$venv/bin/python" ]; then
	python3 -m venv --system-site-packages "$venv" 2>/dev/null || {
		echo "python3 -m venv failed (python3-venv missing?): skipped"
		exit 77
	}
fi
"$venv/bin/pip" install -q --disable-pip-version-check "$src" pytest cloudpickle
cd "$src"
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
# The example, as its docstring runs it: 100 jobs, each once.
n=$(GPUPOOL_FAKE_GPUS=4 "$venv/bin/python" examples/python_sweep.py |
    grep -c '^job .* ran on GPU [0-3] (CUDA_VISIBLE_DEVICES=fake[0-3])$')
[ "$n" = 100 ] || { echo "examples/python_sweep.py: $n of 100 jobs"; exit 1; }
echo "examples/python_sweep.py: 100 jobs ran"
