"""sec_ranks.py: one gpupool.Pool across 3 local MPI ranks (`python -m
gpupool SCRIPT`) against mpi4py.futures.MPIPoolExecutor, and 1 MiB items
against MPI's own point-to-point bandwidth, in the same run (issue 27)."""
import json
import os
import shutil
import subprocess

from common import HERE, log, pair_ratios, rotate, stats
from fmt import fmt_n
from peers import base_env, pip_install
from sec_python import python_env
from supervise import tree_job

# What a full run and a --quick run measure (about 130 s and 40 s on 2
# cores). chunks: MPIPoolExecutor.map's tuned chunk sizes ("auto": len /
# (4 x workers)); c1_n: its chunksize=1 run, on fewer items.
RANKS_FULL = dict(rounds=5, triv_n=10**6, c1_n=4000, ms_n=2000, mib_n=128,
                  p2p_n=512, p2p_passes=5, chunks="1000,10000,auto",
                  timeout_s=120)
RANKS_QUICK = dict(rounds=2, triv_n=10**5, c1_n=2000, ms_n=1000, mib_n=64,
                   p2p_n=256, p2p_passes=5, chunks="1000,10000,auto",
                   timeout_s=90)
RANKS_JOBS = [
    ("gpupool", 3, "gpupool.Pool(fake_gpus=1).map over 3 ranks: 3 workers, "
                   "one a rank, rank 0's included"),
    ("gpupool-mpi", 3, "the same job with GPUPOOL_RANKS_SHARE=0 (its 1 MiB "
                       "rows only): ranks 1-2 get theirs through MPI, as "
                       "ranks on other nodes do"),
    ("futures", 3, "MPIPoolExecutor.map, -np 3: rank 0 the master, "
                   "2 workers"),
    ("futures4", 4, "MPIPoolExecutor.map, -np 4: 3 workers, as many as "
                    "gpupool's"),
    ("p2p", 2, "mpi4py comm.Send/Recv of 1 MiB buffers, rank 0 to rank 1"),
]


def ranks_probe(py):
    """What py_ranks.py probe says under py, or None."""
    try:
        r = subprocess.run([py, os.path.join(HERE, "py_ranks.py"), "probe"],
                           capture_output=True, text=True, timeout=60,
                           cwd="/", env=base_env())
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[0]) if r.returncode == 0 and lines else None


def ranks_env(build, explicit, install, notes):
    """(python, probe) with gpupool's MPI process and mpi4py, or (None,
    why). With --install-peers, mpi4py is pip-installed into the bench's
    own venv (never into a given --python)."""
    if shutil.which("mpirun") is None:
        return None, "no mpirun"
    py, _, how = python_env(build, explicit, notes)
    if py is None:
        return None, how
    pr = ranks_probe(py)
    if not pr or not pr.get("gpupool"):
        return None, "%s: py_ranks.py probe failed" % py
    pr["how"] = how
    if not pr.get("main"):
        return None, "the gpupool %s imports has no __main__.py (no " \
                     "python -m gpupool)" % py
    if not pr.get("mpiproc"):
        return None, "the gpupool %s imports has no _mpiproc (built " \
                     "without MPI: libopenmpi-dev missing when it was " \
                     "pip-installed?)" % py
    for pkg in ("mpi4py", "numpy"):
        if not pr.get(pkg) and install and \
                os.path.dirname(os.path.dirname(py)).endswith("pyvenv"):
            log("ranks: pip install %s into %s" % (pkg, py))
            err = pip_install(py, pkg)
            pr = dict(ranks_probe(py) or pr, how=how)
            if err:
                notes.append("ranks: pip install %s failed: %s" % (pkg, err))
    if not pr.get("mpi4py"):
        notes.append("ranks: mpi4py not importable by %s: MPIPoolExecutor "
                     "and MPI's bandwidth not measured (--install-peers "
                     "installs it into the bench's venv)" % py)
    return py, pr


def job_argv(key, np_, py, rc, kinds):
    """The mpirun command line of one job."""
    argv = [shutil.which("mpirun"), "--oversubscribe", "-np", str(np_)]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    script = os.path.join(HERE, "py_ranks.py")
    k = ",".join(kinds)
    if key == "gpupool":
        return argv + [py, "-m", "gpupool", script, "gpupool",
                       str(rc["triv_n"]), str(rc["ms_n"]), str(rc["mib_n"]),
                       k]
    if key == "gpupool-mpi":
        # The whole job, as gpupool's: its trivial map's freed results
        # raise glibc's mmap threshold before the 1 MiB maps (README).
        return argv + [py, "-m", "gpupool", script, "gpupool",
                       str(rc["triv_n"]), str(rc["ms_n"]), str(rc["mib_n"]),
                       k]
    if key.startswith("futures"):
        return argv + [py, "-m", "mpi4py.futures", script, "futures",
                       str(rc["triv_n"]), str(rc["c1_n"]), str(rc["ms_n"]),
                       str(rc["mib_n"]), k, rc["chunks"]]
    return argv + [py, script, "p2p", str(1 << 20), str(rc["p2p_n"]),
                   str(rc["p2p_passes"])]


def by_row(key, lines):
    """A job's lines as {case: {row: line}}: rows gpupool, futures/CHUNK,
    futures4/CHUNK (trivial, ms), KEY/KIND (mib), p2p (the median pass),
    and futures*/best: the fastest tuned chunk size of the round."""
    out = {"trivial": {}, "ms": {}, "mib": {}, "p2p": {}, "layout": {}}
    for x in lines:
        c = x["case"]
        if key == "gpupool-mpi" and c != "mib":
            continue  # the gpupool job's rows carry those
        if c in ("trivial", "ms"):
            row = key if key == "gpupool" else "%s/%s" % (key, x["chunksize"])
        elif c == "mib":
            row = "%s/%s" % (key, x["kind"])
        else:
            row = key
        out[c].setdefault(row, []).append(x)
    for c, rows in out.items():
        for row, xs in rows.items():
            if c == "p2p":
                xs.sort(key=lambda x: x["mb_per_s"])
            rows[row] = xs[len(xs) // 2]
    tuned = [x for r, x in out["trivial"].items()
             if r.startswith(key + "/") and x["chunksize"] != 1]
    if tuned:
        out["trivial"][key + "/best"] = max(tuned,
                                            key=lambda x: x["items_per_s"])
    return out


def merged(rounds, case, metric):
    """{row: stats of metric} over rounds, and {row: stats of gpupool's
    figure over the row's, per round}."""
    rows = sorted({r for rd in rounds for r in rd[case]})
    vals, over = {}, {}
    g = "gpupool" if case != "mib" else None
    for row in rows:
        vals[row] = stats([rd[case].get(row, {}).get(metric)
                           for rd in rounds])
        if g and row != g:
            over[row] = pair_ratios([rd[case].get(g, {}) for rd in rounds],
                                    [rd[case].get(row, {}) for rd in rounds],
                                    metric)
    return vals, over


def summarise(rounds, rc, kinds, workers):
    """The section's record from each round's rows."""
    sec = {}
    for case, metric in (("trivial", "items_per_s"), ("ms", "items_per_s")):
        vals, over = merged(rounds, case, metric)
        sec[case] = {"rows": {r: {metric: v, "gpupool_over": over.get(r),
                                  "workers": workers.get(r.split("/")[0])}
                              for r, v in vals.items()}}
    sec["trivial"].update(n=rc["triv_n"], c1_n=rc["c1_n"])
    sec["ms"]["n"] = rc["ms_n"]
    for r, x in sec["ms"]["rows"].items():
        # items/s over what its workers could do at 1 ms an item.
        x["of_ideal"] = stats([rd["ms"][r]["items_per_s"] /
                               (1000.0 * rd["ms"][r]["workers"])
                               for rd in rounds if rd["ms"].get(r)])
    p2p = stats([rd["p2p"].get("p2p", {}).get("mb_per_s") for rd in rounds])
    mib = sec["mib"] = {"n": rc["mib_n"], "kinds": kinds, "p2p_n":
                        rc["p2p_n"], "p2p_mb_per_s": p2p, "rows": {},
                        "passes": next((x["passes"] for rd in rounds
                                        for x in rd["mib"].values()
                                        if x and x.get("passes")), None)}
    for kind in kinds:
        row = mib["rows"][kind] = {}
        for key in ("gpupool", "gpupool-mpi", "futures", "futures4"):
            xs = [rd["mib"].get("%s/%s" % (key, kind)) for rd in rounds]
            row[key] = {f: stats([x and x.get(f) for x in xs])
                        for f in ("mb_per_s", "mpi_mb_per_s",
                                  "items_over_mpi", "chunk",
                                  "first_mb_per_s")}
        # All items with sharing (the default: ranks 1-2 share rank 0's
        # host), and the part to ranks 1-2 without it, through MPI.
        for f, key in (("mb_per_s", "gpupool"),
                       ("mpi_mb_per_s", "gpupool-mpi")):
            row["%s_over_p2p" % f] = stats([
                rd["mib"]["%s/%s" % (key, kind)][f] /
                rd["p2p"]["p2p"]["mb_per_s"] for rd in rounds
                if rd["mib"].get("%s/%s" % (key, kind)) and
                rd["p2p"].get("p2p")])
    return sec


def ranks_section(cfg, build, work, res, notes, explicit=None,
                  install=False):
    """gpupool.Pool over 3 local ranks against MPIPoolExecutor, and 1 MiB
    items against MPI's bandwidth: each job a fresh mpirun, the jobs
    of a round in rotated order."""
    rc = RANKS_QUICK if res.get("quick") else RANKS_FULL
    py, probe = ranks_env(build, explicit, install, notes)
    if py is None:
        notes.append("ranks section skipped: " + probe)
        res["ranks_skipped"] = probe
        log("ranks: skipped: " + probe)
        return
    log("ranks: %s" % probe["how"])
    kinds = ["bytes"] + (["numpy"] if probe.get("numpy") else [])
    jobs = [j for j in RANKS_JOBS if j[0].startswith("gpupool") or
            probe["mpi4py"]]
    workers = {"gpupool": 3, "gpupool-mpi": 3, "futures": 2, "futures4": 3}
    load0 = os.getloadavg()
    rounds = []
    for rd in range(rc["rounds"]):
        log("ranks: trivial x %s, 1 ms x %s, 1 MiB x %d; round %d/%d" % (
            fmt_n(rc["triv_n"]), fmt_n(rc["ms_n"]), rc["mib_n"], rd + 1,
            rc["rounds"]))
        this = {"trivial": {}, "ms": {}, "mib": {}, "p2p": {}, "layout": {}}
        for key, np_, _ in rotate(jobs, rd):
            env = base_env()
            if key == "gpupool-mpi":
                env["GPUPOOL_RANKS_SHARE"] = "0"  # mpirun passes it on
            lines = tree_job("ranks", job_argv(key, np_, py, rc, kinds),
                             env, "/", rc["timeout_s"], notes,
                             "%s round %d" % (key, rd + 1))
            for c, rows in by_row(key, lines).items():
                this[c].update(rows)
        rounds.append(this)
    sec = res["ranks"] = summarise(rounds, rc, kinds, workers)
    sec.update(interpreter=py, probe=probe, config=rc, labels={
        k: lab for k, _, lab in jobs}, workers=workers,
        missing={} if probe["mpi4py"] else {
            "mpi4py": "not importable by %s" % py},
        layout=[rd["layout"].get("gpupool") for rd in rounds],
        load=[list(load0), list(os.getloadavg())])
