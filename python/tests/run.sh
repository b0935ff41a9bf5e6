#!/bin/sh
# The Python package's tests, as a user gets the package, twice:
#
#   bare: this tree pip-installed without its dependencies (no
#     cloudpickle: functions travel by name only) into BUILD/pyvenv-bare,
#     with pytest alone;
#   full: installed with its dependencies (cloudpickle) and its extras
#     hydra, joblib and optuna (as pip install 'gpupool[hydra,joblib,optuna]'
#     gives them) into BUILD/pyvenv-full, with numpy, pandas,
#     threadpoolctl, jax[cpu], scikit-learn, hydra-joblib-launcher and
#     pytest-timeout beside it, then the core files once more with workers
#     that start clean, then the example;
#   hydra: installed with hydra-optuna-sweeper into BUILD/pyvenv-hydra,
#     for the launcher's tests and the Optuna sweep through it: that
#     sweeper pins optuna below 3, which the full venv's optuna example
#     (optuna 4 and later's journal storage) cannot share a venv with.
#
#	run.sh SRCROOT BUILDROOT
#
# Each venv is made once (pip fetches meson-python, meson and ninja from
# PyPI to build the package). The interpreter is the first of python3 and
# /usr/bin/python3 whose test package has CPython's pool and futures tests
# (test_cpython.py runs them; Debian: libpython3.11-testsuite); pytest
# reports every skipped case with its reason (-rs), and a case skips only
# where a package cannot be installed. Exit 77 (skipped) when Python has
# no venv module (Debian: python3-venv; .ci/setup installs it).
set -eu
src=$1
build=$2
# meson test's setups point XDG_CACHE_HOME into the build (gpupool's
# topology cache, src/tcache.c): pip keeps its own cache where it was.
[ -n "${HOME:-}" ] && export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}"
py=python3
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import test._test_multiprocessing, test.test_concurrent_futures' \
	    2>/dev/null; then
		py=$p
		break
	fi
done
mkvenv() {
	[ -x "$1/bin/python" ] && return 0
	"$py" -m venv "$1" 2>/dev/null || {
		echo "$py -m venv failed (python3-venv missing?): skipped"
		exit 77
	}
}
run_pytest() {
	echo "== pytest in $1 ($2)"
	(cd "$src" && "$1/bin/python" -m pytest -q -rs -p no:cacheprovider \
	    python/tests)
}

bare=$build/pyvenv-bare
mkvenv "$bare"
"$bare/bin/pip" install -q --disable-pip-version-check --no-deps \
    --force-reinstall "$src"
"$bare/bin/pip" install -q --disable-pip-version-check pytest
if "$bare/bin/python" -c 'import cloudpickle' 2>/dev/null; then
	echo "pyvenv-bare has cloudpickle: not bare"
	exit 1
fi
run_pytest "$bare" "no cloudpickle"

full=$build/pyvenv-full
mkvenv "$full"
# With its dependencies, as pip install . gives it (cloudpickle).
# With its dependencies and extras, as pip install 'gpupool[...]' gives
# them (cloudpickle; hydra-core, joblib, optuna).
"$full/bin/pip" install -q --disable-pip-version-check --force-reinstall \
    "$src[hydra,joblib,optuna]"
"$full/bin/pip" install -q --disable-pip-version-check pytest
# Real libraries the tests use where installed: each is tried alone, so
# one that cannot be installed here (no wheel for this platform) leaves
# the others, and the cases that need it skip, with the reason shown.
for pkg in numpy pandas threadpoolctl 'jax[cpu]' scikit-learn \
    hydra-joblib-launcher pytest-timeout; do
	"$full/bin/pip" install -q --disable-pip-version-check "$pkg" ||
	    echo "run.sh: $pkg cannot be installed here: its cases skip"
done
run_pytest "$full" "cloudpickle, hydra, joblib, optuna, numpy, pandas, threadpoolctl, jax, scikit-learn"

# Third, the core files again with every pool's workers started clean
# (GPUPOOL_START_METHOD=spawn: the default where start_method is not
# given), in the full venv: what a forked worker does, a clean one must.
echo "== pytest in $full (workers start clean)"
(cd "$src" && GPUPOOL_START_METHOD=spawn "$full/bin/python" -m pytest -q \
    -rs -p no:cacheprovider python/tests/test_core.py \
    python/tests/test_api.py python/tests/test_compat.py \
    python/tests/test_buffers.py python/tests/test_timeouts.py \
    python/tests/test_gpus.py python/tests/test_isolation.py \
    python/tests/test_forks.py)

# The example, as its docstring runs it: 100 jobs, each once.
n=$(cd "$src" && GPUPOOL_FAKE_GPUS=4 "$full/bin/python" examples/python_sweep.py |
    grep -c '^job .* ran on rank 0, GPU [0-3] (CUDA_VISIBLE_DEVICES=fake[0-3])$')
[ "$n" = 100 ] || { echo "examples/python_sweep.py: $n of 100 jobs"; exit 1; }
echo "examples/python_sweep.py: 100 jobs ran"

# The Hydra launcher under hydra-optuna-sweeper's pins (optuna 2.10):
# its suites again and the Optuna sweep of examples/hydra_sweep.
hydra=$build/pyvenv-hydra
mkvenv "$hydra"
"$hydra/bin/pip" install -q --disable-pip-version-check --force-reinstall \
    "$src[hydra]"
"$hydra/bin/pip" install -q --disable-pip-version-check pytest \
    hydra-optuna-sweeper
echo "== pytest in $hydra (hydra-optuna-sweeper)"
(cd "$src" && "$hydra/bin/python" -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_hydra_launcher.py)
