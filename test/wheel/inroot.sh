#!/bin/sh
# Inside the bare root (test/wheel/bare.sh enters it): nothing to build
# with is here; the wheel is installed from /wheels alone and used as the
# README says.
#
#	inroot.sh WORKDIR WHEEL [SDIST]
set -eu
cd "$1"
whl=$2
sdist=${3:-}
fail() { echo "FAIL: $*"; exit 1; }

# Bare: no compiler, no meson, no hwloc, no MPI, no CUDA.
for c in cc gcc clang meson ninja pkg-config mpirun nvcc; do
	! command -v "$c" >/dev/null || fail "$c is in the bare root"
done
! ls /usr/lib/*/libhwloc* /usr/lib/*/libmpi* /usr/lib/*/libcuda* \
    /usr/local/cuda >/dev/null 2>&1 || fail "hwloc, MPI or CUDA in the bare root"
echo "bare: no compiler, meson, pkg-config, libhwloc, MPI or CUDA"

# pip install of the wheel, without network.
python3 -m venv /v
/v/bin/pip install -q --disable-pip-version-check --no-index \
    --find-links /wheels "$whl"
PATH=/v/bin:$PATH
export PATH
echo "installed: $(pip list --disable-pip-version-check 2>/dev/null |
    grep -E '^(gpupool|cloudpickle) ' | tr -s ' ' | paste -sd, -)"

# The README's Python quick start.
out=$(GPUPOOL_FAKE_GPUS=2 python -c "import gpupool; print(gpupool.map(abs, [-1, -2]))")
[ "$out" = "[1, 2]" ] || fail "quick start printed '$out'"
echo "quick start: $out"
python python_sweep.py >sweep.out 2>sweep.err ||
    { cat sweep.err; fail "examples/python_sweep.py"; }
[ "$(grep -c '^job ' sweep.out)" = 100 ] || fail "python_sweep.py: not 100 jobs"
# The CUDA runtime is in the wheel: it looked for a driver.
grep -q "no CUDA driver on this machine" sweep.err ||
    { cat sweep.err; fail "the wheel has no CUDA runtime"; }
echo "python_sweep.py: 100 jobs on $(sed -n 's/.*GPU \([0-9]*\) .*/\1/p' \
    sweep.out | sort -u | wc -l) fake GPUs ($(head -1 sweep.err))"

# A clean start: workers exec'd, not forked.
python - <<'PY' || fail "a clean Pool"
import os, gpupool
def where(x):
    return x * 2, os.getpid()
if __name__ == "__main__":
    with gpupool.Pool(2, fake_gpus=2, start_method="spawn") as p:
        assert p.start_method == "spawn", p.start_method
        out = p.map(where, range(8))
    assert [r for r, _ in out] == [x * 2 for x in range(8)], out
    print("clean Pool: 8 items on %d workers started clean"
          % len({pid for _, pid in out}))
PY
python -m gpupool --help >/dev/null || fail "python -m gpupool --help"

# gpupool-run from the wheel: the C program, a sweep on fake GPUs.
[ -x /v/bin/gpupool-run ] || fail "no gpupool-run in the venv's bin"
sed -i 's|examples/train.sh|sh train.sh|' sweep.txt
gpupool-run --fake-gpus 4 --joblog sweep.log sweep.txt >run.out 2>run.err ||
    { cat run.err; fail "gpupool-run sweep.txt"; }
[ "$(tail -n +2 sweep.log | awk '$7 == 0' | wc -l)" = 16 ] ||
    { cat sweep.log; fail "gpupool-run: not 16 tasks that succeeded"; }
echo "gpupool-run: 16 tasks on 4 fake GPUs, joblog complete"
gpupool-run --version | head -1

# Placement with the wheel's hwloc (no plugins here): as on the build
# machine, on a topology file and on this machine's own PCI devices.
gpupool-run --show-gpus --fake-gpus 4 --topology nvidiaDGX2.xml \
    --fake-busids "$(cat dgx-busids)" 2>/dev/null | head -5 >got-dgx2
diff expect-dgx2 got-dgx2 || fail "DGX-2 placement differs from the build's"
gpupool-run --show-gpus --fake-gpus 2 --fake-busids "$(cat pci-busids)" \
    2>/dev/null | head -3 >got-sys
diff expect-sys got-sys || fail "sysfs placement differs from the build's"
echo "placement: as the Debian build's (DGX-2 topology, this machine's PCI)"

# No MPI here: asked for, it is named, once.
if OMPI_COMM_WORLD_SIZE=2 PMIX_RANK=0 gpupool-run --fake-gpus 2 sweep.txt \
    >mpi.out 2>&1; then
	fail "gpupool-run under a launcher's variables, without MPI, ran"
fi
grep -q "needs the machine's MPI library libmpi" mpi.out ||
    { cat mpi.out; fail "no word of the MPI library"; }
echo "MPI asked for: $(cat mpi.out)"
if OMPI_COMM_WORLD_SIZE=2 PMIX_RANK=0 python -m gpupool python_sweep.py \
    >mpipy.out 2>&1; then
	fail "python -m gpupool under a launcher's variables, without MPI, ran"
fi
grep -q "MPI library libmpi" mpipy.out ||
    { cat mpipy.out; fail "python -m gpupool: no word of the MPI library"; }
echo "MPI asked for (Python): $(grep -m1 'MPI library' mpipy.out)"

# The sdist here (no compiler): one message, no traceback.
[ -n "$sdist" ] || exit 0
if /v/bin/pip install --disable-pip-version-check --no-index \
    --find-links /wheels "$sdist" >sdist.out 2>&1; then
	fail "the sdist built without a compiler"
fi
grep -q "no C compiler found" sdist.out || { cat sdist.out; fail "sdist: no clear message"; }
! grep -q Traceback sdist.out || { cat sdist.out; fail "sdist: a traceback"; }
echo "sdist without a compiler: $(grep -m1 -o 'no C compiler found.*' sdist.out)"
