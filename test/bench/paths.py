#!/usr/bin/env python3
"""paths.py: the benchmark page bench/run.py publishes names files in the
tree by their path from its root, never by the absolute path of the
machine that measured it (issue 21). Renders a minimal results record
whose version and interpreter strings hold absolute paths in the tree,
as `gpupool-run --version` and the Python section give them."""
import importlib.util
import os
import sys

run_py = sys.argv[1]
spec = importlib.util.spec_from_file_location("bench_run", run_py)
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
repo = run.REPO
mpi = os.path.join(repo, "build-bench", "src", "cli", "gpupool-run-mpi")
venv = os.path.join(repo, "build-bench", "pyvenv")
res = {
    "date": "2026-01-01 00:00 UTC", "quick": True,
    "command": "python3 bench/run.py --quick",
    "machine": {"cpu": "cpu", "cores": 2, "virt": None, "distro": "d",
                "kernel": "k"},
    "versions": {"gpupool": "gpupool-run 0.1.0 (libgpupool 0.1.0, MPI "
                            "runs use %s)" % mpi, "gcc": "gcc",
                 "python": "3.11"},
    "git": {"revision": "0" * 40, "dirty_paths": 0},
    "build": {"buildtype": "release"},
    "load_before": [0, 0, 0], "load_after": [0, 0, 0],
    "targets": [], "notes": ["venv %s" % venv], "config": run.QUICK,
}
md = run.markdown(res)
bad = [line for line in md.splitlines() if repo + os.sep in line]
if bad:
    sys.exit("absolute paths of this machine in the page:\n" +
             "\n".join(bad))
for want in ("MPI runs use build-bench/src/cli/gpupool-run-mpi",
             "venv build-bench/pyvenv"):
    if want not in md:
        sys.exit("'%s' not in the page:\n%s" % (want, md))
print("ok: no absolute path of the tree in the page")
