"""sec_integrations.py: gpupool inside the tools people already drive their
runs with (issue 36): its Hydra launcher against Hydra's joblib launcher on
a sweep of short jobs, and its joblib backend against loky under joblib's
Parallel."""
import json
import os
import shutil
import subprocess

from common import HERE, log, pair_ratios, rotate, stats
from peers import INTEGRATION_PEERS, base_env, install_integration_peers
from sec_python import python_env
from supervise import tree_job

# What a full run and a --quick run measure (about 140 s and 30 s on 2
# cores). A Hydra sweep of 100 jobs is a fresh process of 7-18 s here,
# about 4 s of it Hydra's own work in the parent before launch().
INT_FULL = dict(hydra_n=100, hydra_rounds=5, jl_n={"trivial": 10000,
                                                   "ms": 1000},
                jl_calls=5, jl_rounds=5, timeout_s=300)
INT_QUICK = dict(hydra_n=100, hydra_rounds=1, jl_n={"trivial": 10000,
                                                    "ms": 1000},
                 jl_calls=3, jl_rounds=2, timeout_s=300)
WORKERS = 4
HYDRA = [
    ("gpupool", "gpupool launcher: hydra/launcher=gpupool "
                "hydra.launcher.fake_gpus=4"),
    ("joblib", "Hydra's joblib launcher: hydra/launcher=joblib "
               "hydra.launcher.n_jobs=4 (loky)"),
]
JOBLIB = [
    ("gpupool", "Parallel(n_jobs=4), backend \"gpupool\" (4 fake GPUs)"),
    ("loky", "Parallel(n_jobs=4), backend \"loky\" (joblib's default)"),
]
JOBLIB_WORK = [
    ("trivial", "trivial items (f returns its argument)"),
    ("ms", "1 ms items (time.sleep(0.001))"),
]


def int_job(argv, env, timeout_s, notes, what):
    """One driver's JSON line, or {} and a note (supervise.tree_job)."""
    lines = tree_job("integrations", argv, env, env["TMPDIR"], timeout_s,
                     notes, what)
    return lines[0] if lines else {}


def int_probe(py, env):
    """What py_hydra.py and py_joblib.py probe say under py, in one dict
    (hydra_* and the joblib side's keys), or None."""
    out = {}
    for script, prefix in (("py_hydra.py", "hydra_"), ("py_joblib.py", "")):
        try:
            r = subprocess.run([py, os.path.join(HERE, script), "probe"],
                               capture_output=True, text=True, timeout=60,
                               cwd=env["TMPDIR"], env=env)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
        if r.returncode != 0 or not lines:
            return None
        out.update({(prefix + k if k != "hydra" else k): v
                    for k, v in json.loads(lines[0]).items()})
    return out


def missing_peers(probe):
    """The pip names of INTEGRATION_PEERS py does not import."""
    have = {"hydra-core": probe.get("hydra"),
            "hydra-joblib-launcher": probe.get("hydra_joblib"),
            "joblib": probe.get("joblib")}
    return [p for p in INTEGRATION_PEERS if not have[p]]


def contenders(py, probe, notes):
    """{"hydra": [...], "joblib": [...]}: the keys of each group that can
    run, and {"GROUP/KEY": why} for those that cannot, each with a note.
    A group without gpupool's side is not run at all (nothing to compare
    it with); a missing peer only loses its row (its target is N/A)."""
    hint = " (--install-peers installs it into the bench's own venv)"
    why, said = {}, []
    if not probe.get("hydra"):
        said.append(("Hydra rows", "hydra-core not importable by %s%s" % (
            py, hint)))
        why["hydra/gpupool"] = why["hydra/joblib"] = said[-1][1]
    elif not probe.get("hydra_gpupool"):
        said.append(("Hydra rows", "the gpupool %s imports has no Hydra "
                     "launcher (hydra_plugins.hydra_gpupool_launcher)" % py))
        why["hydra/gpupool"] = said[-1][1]
    elif not probe.get("hydra_joblib"):
        said.append(("Hydra's joblib launcher", "hydra-joblib-launcher "
                     "not importable by %s%s" % (py, hint)))
        why["hydra/joblib"] = said[-1][1]
    if not probe.get("joblib"):
        said.append(("joblib rows", "joblib not importable by %s%s" % (
            py, hint)))
        why["joblib/gpupool"] = why["joblib/loky"] = said[-1][1]
    elif not probe.get("gpupool_joblib"):
        said.append(("joblib rows", "the gpupool %s imports has no "
                     "gpupool.joblib (%s)" % (
                         py, probe.get("gpupool_joblib_error"))))
        why["joblib/gpupool"] = said[-1][1]
    for what, w in said:
        notes.append("integrations: %s not measured: %s" % (what, w))
    run = {}
    for group, impls in (("hydra", HYDRA), ("joblib", JOBLIB)):
        keys = [k for k, _ in impls if "%s/%s" % (group, k) not in why]
        run[group] = keys if "gpupool" in keys else []
    return run, why


def hydra_rows(ic, py, env, keys, notes):
    """The Hydra sweeps: each a fresh process, the launchers of a round
    in rotated order."""
    runs = {k: [] for k in keys}
    for rd in range(ic["hydra_rounds"]):
        log("integrations: Hydra sweep of %d jobs, round %d/%d" % (
            ic["hydra_n"], rd + 1, ic["hydra_rounds"]))
        for k in rotate(keys, rd):
            d = os.path.join(env["TMPDIR"], "sweep-%s-%d" % (k, rd))
            runs[k].append(int_job(
                [py, os.path.join(HERE, "py_hydra.py"), "run", k,
                 str(ic["hydra_n"]), d], env, ic["timeout_s"], notes,
                "hydra %s round %d" % (k, rd + 1)))
            shutil.rmtree(d, ignore_errors=True)
    out = {"n": ic["hydra_n"], "rounds": ic["hydra_rounds"],
           "labels": {k: lab for k, lab in HYDRA if k in keys},
           "impls": {k: {f: stats([x.get(f) for x in v])
                         for f in ("launch_s", "per_job_ms", "sweep_s")}
                     for k, v in runs.items()}}
    for k, v in runs.items():
        out["impls"][k]["workers"] = sorted({x["workers"] for x in v
                                             if x.get("workers")})
        out["impls"][k]["gpus"] = sorted({g for x in v
                                          for g in x.get("gpus", [])})
    if "joblib" in runs:
        # gpupool's launch() time over joblib's, per round: <= 1 is the
        # target (the same jobs, so the same ratio per job).
        r = out["gpupool_over_joblib"] = pair_ratios(
            runs["gpupool"], runs["joblib"], "launch_s")
        out["rounds_met"] = r and sum(1 for x in r["values"] if x <= 1.0)
    return out


def joblib_rows(ic, py, env, keys, notes):
    """joblib's Parallel on each backend: per workload, each run a fresh
    process, the backends of a round in rotated order."""
    out = {"rounds": ic["jl_rounds"], "calls": ic["jl_calls"],
           "labels": {k: lab for k, lab in JOBLIB if k in keys}, "work": {}}
    for work, title in JOBLIB_WORK:
        n = ic["jl_n"][work]
        runs = {k: [] for k in keys}
        for rd in range(ic["jl_rounds"]):
            log("integrations: joblib, %s x %d, round %d/%d" % (
                work, n, rd + 1, ic["jl_rounds"]))
            for k in rotate(keys, rd):
                runs[k].append(int_job(
                    [py, os.path.join(HERE, "py_joblib.py"), "run", k, work,
                     str(n), str(ic["jl_calls"])], env, ic["timeout_s"],
                    notes, "joblib %s %s round %d" % (k, work, rd + 1)))
        row = out["work"][work] = {"title": title, "n": n, "impls": {
            k: {f: stats([x.get(f) for x in v])
                for f in ("items_per_s", "secs", "startup_s")}
            for k, v in runs.items()}}
        if work == "ms":
            # items/s over what 4 workers could do at 1 ms an item.
            for k, v in runs.items():
                row["impls"][k]["of_ideal"] = stats(
                    [x["items_per_s"] / (1000.0 * WORKERS) for x in v
                     if x.get("items_per_s")])
        if "loky" in runs:
            r = row["gpupool_over_loky"] = pair_ratios(
                runs["gpupool"], runs["loky"], "items_per_s")
            row["rounds_met"] = r and sum(1 for x in r["values"]
                                          if x >= 1.0)
    return out


def integrations_section(cfg, build, work, res, notes, explicit=None,
                         install=False):
    """gpupool's Hydra launcher and joblib backend against Hydra's joblib
    launcher and loky, under the python section's interpreter."""
    ic = INT_QUICK if res.get("quick") else INT_FULL
    py, _, how = python_env(build, explicit, notes)
    if py is None:
        notes.append("integrations section skipped: " + how)
        res["integrations_skipped"] = how
        log("integrations: skipped: " + how)
        return
    # A scratch directory and a claims table of the section's own: the
    # fake GPUs' pools never wait for anyone else's claims.
    tmp = os.path.join(work, "integrations")
    os.makedirs(tmp, exist_ok=True)
    env = base_env()
    env.update(GPUPOOL_CLAIMS=os.path.join(tmp, "claims"), TMPDIR=tmp)
    probe = int_probe(py, env)
    if probe and install and install_integration_peers(
            py, missing_peers(probe), notes):
        probe = int_probe(py, env)
    if not probe:
        why = "%s: py_hydra.py or py_joblib.py probe failed" % py
        notes.append("integrations section skipped: " + why)
        res["integrations_skipped"] = why
        return
    log("integrations: %s" % how)
    run, why = contenders(py, probe, notes)
    load0 = os.getloadavg()
    sec = res["integrations"] = {"interpreter": py, "how": how,
                                 "probe": probe, "config": ic,
                                 "workers": WORKERS, "missing": why}
    if run["hydra"]:
        sec["hydra"] = hydra_rows(ic, py, env, run["hydra"], notes)
    if run["joblib"]:
        sec["joblib"] = joblib_rows(ic, py, env, run["joblib"], notes)
    sec["load"] = [list(load0), list(os.getloadavg())]
