"""sec_python.py: the Python package gpupool against Python's pools
(issue 11)."""
import ctypes
import json
import os
import subprocess
import sys
import time

from common import HERE, REPO, SLOTS, log, med, pair_ratios, rotate, sh, stats
from fmt import fmt_bytes, fmt_n
from peers import base_env, one, pip_install
from sec_pool import pin_first_cpu


PY_TRIVIAL = [
    ("gpupool", "gpupool.Pool.map (default chunks)"),
    ("gpupool-clean", "gpupool.Pool.map, workers started clean"),
    ("map", "multiprocessing Pool.map (default chunks)"),
    ("ppe", "ProcessPoolExecutor.map (chunksize=1000)"),
    ("loky", "loky executor .map (chunksize=1000)"),
    ("mpire", "mpire WorkerPool.map (default chunks)"),
]
PY_ROUNDTRIP = [
    ("gpupool", "gpupool Pool.submit(f, x).result()"),
    ("gpupool-map1", "gpupool Pool.map(f, [x])"),
    ("gpupool-clean", "gpupool Pool.submit(f, x).result(), started clean"),
    ("ppe", "ProcessPoolExecutor.submit(f, x).result()"),
    ("apply", "multiprocessing Pool.apply(f, (x,))"),
    ("loky", "loky executor .submit(f, x).result()"),
    ("mpire", "mpire WorkerPool.apply(f, (x,))"),
]
# The pinned variant's control row: clean workers, every process of the
# run with address randomization off (setarch -R), so that a clean
# worker's interpreter lies at the caller's addresses as a forked one's
# does (see python_roundtrip).
PY_NORAND = ("gpupool-clean-norand", "gpupool Pool.submit(f, x).result(), "
             "started clean, address randomization off (setarch -R)")
PY_WARM = [
    ("pool", "gpupool.Pool(initializer=setup).map(chunksize=1)"),
    ("run", "gpupool-run, one python3 -c per task"),
    ("semaphore", "Process per task + Semaphore(4) + Manager().list()"),
]
PY_START = [
    ("gpupool-fork", "gpupool.Pool(), forked workers"),
    ("gpupool-clean", "gpupool.Pool(), workers started clean"),
    ("loky", "loky get_reusable_executor(4)"),
]
# What the caller imported before the pool: nothing, numpy (OpenBLAS's
# threads started: fork stays safe), jax (XLA running: fork hangs, so
# forked workers are not measured).
PY_START_IMPORTS = ["none", "numpy", "jax"]
PY_PAYLOAD = [
    ("gpupool", "gpupool.Pool.map (default chunks)"),
    ("map", "multiprocessing Pool.map (default chunks)"),
]
# Checkpoints (issue 26): each workload's contenders, interleaved.
PY_CK = [
    ("trivial", "x * 2 on an int, default chunks",
     ["plain", "ckpt", "resume", "mp"]),
    ("ms", "time.sleep(0.001), default chunks", ["plain", "ckpt"]),
    ("ms1", "time.sleep(0.001), chunksize=1 (a record per item)",
     ["plain", "ckpt"]),
    ("read1", "a checkpoint of one-item records, read back", ["resume"]),
]
PY_CK_LABELS = {
    "plain": "gpupool Pool.map, no checkpoint",
    "ckpt": "gpupool Pool.map, checkpoint= a new file",
    "resume": "gpupool Pool.map, every result read from its checkpoint",
    "mp": "multiprocessing Pool.map, no checkpoint",
}
PY_STAMP_PATHS = ["pyproject.toml", "meson.build", "meson_options.txt",
                  "python", "src", "include"]


def py_probe(py):
    """What py_gpupool.py peers says under interpreter py, or None."""
    try:
        r = subprocess.run([py, os.path.join(HERE, "py_gpupool.py"),
                            "peers"], capture_output=True, text=True,
                           timeout=60, cwd="/", env=base_env())
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[0]) if lines else None


def py_tree_stamp():
    """Identifies the package's sources as they are in this tree: the
    committed blobs of its paths plus any uncommitted change."""
    import hashlib
    h = hashlib.sha1()
    for argv in (["git", "-C", REPO, "ls-files", "-s", "--"],
                 ["git", "-C", REPO, "diff", "HEAD", "--"],
                 ["git", "-C", REPO, "ls-files", "-o", "--exclude-standard",
                  "--"]):
        h.update((sh(argv + PY_STAMP_PATHS) or "").encode())
    return h.hexdigest()


def python_env(build, explicit, notes):
    """An interpreter that imports gpupool: (python, probe, how), or
    (None, None, why). Order: --python / GPUPOOL_BENCH_PYTHON; a venv in
    the build dir with the package pip-installed from this tree (kept
    between runs while the package's sources do not change); a gpupool
    this interpreter can already import."""
    if explicit:
        p = py_probe(explicit)
        if p:
            return explicit, p, "given interpreter %s" % explicit
        return None, None, "--python %s cannot import gpupool" % explicit
    why = []
    if os.path.exists(os.path.join(REPO, "pyproject.toml")):
        venv = os.path.join(build, "pyvenv")
        py = os.path.join(venv, "bin", "python")
        stamp_file = os.path.join(venv, "gpupool-bench-stamp")
        stamp = py_tree_stamp()
        try:
            with open(stamp_file) as f:
                cached = f.read().strip() == stamp
        except OSError:
            cached = False
        p = py_probe(py) if cached else None
        if p:
            return py, p, "venv %s (cached, sources unchanged)" % venv
        log("python: pip install %s into %s" % (REPO, venv))
        t0 = time.monotonic()
        r = None
        if not os.path.exists(py):
            r = subprocess.run([sys.executable, "-m", "venv",
                                "--system-site-packages", venv],
                               capture_output=True, text=True)
        if r is None or r.returncode == 0:
            # Without build isolation when the venv has the build backend
            # (no network needed); else pip fetches it.
            nbi = subprocess.run([py, "-c", "import mesonpy"],
                                 capture_output=True).returncode == 0
            argv = [py, "-m", "pip", "install", "-q",
                    "--disable-pip-version-check"]
            argv += ["--no-build-isolation"] if nbi else []
            try:
                r = subprocess.run(argv + [REPO], capture_output=True,
                                   text=True, timeout=600, cwd="/")
            except subprocess.TimeoutExpired:
                r = None
        p = py_probe(py) if r is not None and r.returncode == 0 else None
        if p:
            with open(stamp_file, "w") as f:
                f.write(stamp + "\n")
            return py, p, "venv %s, pip install%s of this tree (%.0f s)" % (
                venv, " --no-build-isolation" if nbi else "",
                time.monotonic() - t0)
        why.append("pip install of this tree into a venv failed: %s" % (
            "timed out" if r is None else
            (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            [-200:]))
    else:
        why.append("no pyproject.toml in this tree")
    p = py_probe(sys.executable)
    if p:
        notes.append("python: %s; measured the gpupool that %s imports "
                     "(%s), which may not be this tree's" % (
                         "; ".join(why), sys.executable, p["gpupool_file"]))
        return sys.executable, p, "already importable: %s" % (
            p["gpupool_file"])
    return None, None, "; ".join(why + ["%s cannot import gpupool" %
                                        sys.executable])


def py_have(py, probe, install, notes, pkg, what):
    """Whether py imports pkg (loky, mpire, numpy, scipy: the probe says);
    with --install-peers, pip installs it first into the bench's own venv
    (never into a given interpreter). what: what goes unmeasured
    without it, for the note."""
    if probe.get(pkg):
        return True
    if install and os.path.dirname(os.path.dirname(py)).endswith("pyvenv"):
        log("python: pip install %s into %s" % (pkg, py))
        err = pip_install(py, pkg)
        p = py_probe(py) if err is None else None
        if p and p.get(pkg):
            probe[pkg] = p[pkg]
            return True
        notes.append("python: pip install %s failed: %s" % (pkg, err or (
            "installed, but %s does not import it" % py)))
        return False
    notes.append("python: %s not importable by %s: %s not measured "
                 "(--install-peers installs it into the bench's venv)" % (
                     pkg, py, what))
    return False


def python_payload(cfg, helper, sec, kinds):
    """Big items: gpupool.Pool.map against multiprocessing Pool.map
    echoing the same items, interleaved rounds."""
    pl = sec["payload"] = {"labels": dict(PY_PAYLOAD), "kinds": kinds,
                           "rows": []}
    for kind in kinds:
        for size, n in cfg["py_payloads"]:
            runs = {k: [] for k, _ in PY_PAYLOAD}
            for rd in range(cfg["py_payload_rounds"]):
                log("python: %s of %s x %d, round %d/%d" % (
                    kind, fmt_bytes(size), n, rd + 1,
                    cfg["py_payload_rounds"]))
                for k, _ in rotate(PY_PAYLOAD, rd):
                    runs[k].append(one(helper + ["payload", k, kind,
                                                 str(size), str(n)]))
            pl["rows"].append({
                "kind": kind, "size": size, "n": n,
                "impls": {k: {"mb_per_s": stats([x.get("mb_per_s")
                                                 for x in v])}
                          for k, v in runs.items()},
                "gpupool_over_map": pair_ratios(runs["gpupool"],
                                                runs["map"], "mb_per_s")})


def python_start(cfg, helper, sec, imports):
    """Pool start-up and first-item latency: forked and clean workers and
    loky's, after each import, interleaved rounds."""
    st = sec["start"] = {"labels": dict(PY_START), "rows": {}}
    if "loky" in sec["missing"]:
        st["labels"].pop("loky")
    for imp in imports:
        impls = [(k, lab) for k, lab in PY_START
                 if k in st["labels"] and not (imp == "jax" and
                                               k == "gpupool-fork")]
        runs = {k: [] for k, _ in impls}
        for rd in range(cfg["py_start_rounds"]):
            log("python: start-up after import %s, round %d/%d" % (
                imp, rd + 1, cfg["py_start_rounds"]))
            for k, _ in rotate(impls, rd):
                runs[k].append(one(helper + ["start", k, imp]))
        row = st["rows"][imp] = {
            k: {"startup_s": stats([x.get("startup_s") for x in v]),
                "first_s": stats([x.get("first_s") for x in v])}
            for k, v in runs.items()}
        # Clean workers' first item, in times loky's and the fork's.
        if "loky" in runs:
            row["clean_vs_loky"] = pair_ratios(
                runs["gpupool-clean"], runs["loky"], "first_s")
        if "gpupool-fork" in runs:
            row["clean_vs_fork"] = pair_ratios(
                runs["gpupool-clean"], runs["gpupool-fork"], "first_s")


def python_checkpoint(cfg, helper, sec):
    """map(..., checkpoint=PATH) against the same map without one, and
    a checkpoint read back instead of run."""
    ck = sec["checkpoint"] = {"labels": dict(PY_CK_LABELS), "kinds": {}}
    for kind, title, impls in PY_CK:
        n = cfg["py_ck"][kind]
        runs = {k: [] for k in impls}
        for rd in range(cfg["py_ck_rounds"]):
            log("python: checkpoint, %s x %s, round %d/%d" % (
                kind, fmt_n(n), rd + 1, cfg["py_ck_rounds"]))
            for k in rotate(impls, rd):
                runs[k].append(one(helper + ["checkpoint", kind, k, str(n)]))
        row = ck["kinds"][kind] = {"title": title, "n": n, "impls": {
            k: {f: stats([x.get(f) for x in v]) for f in (
                "items_per_s", "secs", "rss_growth_mib", "file_bytes")}
            for k, v in runs.items()}}
        if "ckpt" in runs:
            # Wall with a checkpoint over wall without: 1.10 is 10 %.
            row["ckpt_cost"] = pair_ratios(runs["plain"], runs["ckpt"],
                                           "items_per_s")
        if "mp" in runs:
            row["ckpt_over_mp"] = pair_ratios(runs["ckpt"], runs["mp"],
                                              "items_per_s")
    # Reading n one-item records against running n such 1 ms items at
    # the rate measured with a checkpoint.
    # Each round's read time over the compute time of the median rate.
    r1, m1 = ck["kinds"]["read1"], ck["kinds"]["ms1"]
    rate = med(m1["impls"]["ckpt"]["items_per_s"])
    secs = r1["impls"]["resume"]["secs"]
    r1["compute_s"] = r1["n"] / rate if rate else None
    r1["read_over_compute"] = stats([
        x / r1["compute_s"] for x in secs["values"]]) \
        if secs and r1["compute_s"] else None


def python_section(cfg, build, work, res, notes, explicit=None,
                   install=False):
    py, probe, how = python_env(build, explicit, notes)
    if py is None:
        notes.append("python section skipped: " + how)
        res["python_skipped"] = how
        log("python: skipped: " + how)
        return
    log("python: %s" % how)
    helper = [py, os.path.join(HERE, "py_gpupool.py")]
    sec = res["python"] = {"workers": SLOTS, "interpreter": py, "how": how,
                           "probe": probe, "missing": {}}
    for peer in ("loky", "mpire"):
        if not py_have(py, probe, install, notes, peer, "its rows"):
            sec["missing"][peer] = "not importable by %s" % py

    # 1. Trivial items; 2. one item in flight; 3. warm workers.
    python_trivial(cfg, helper, sec)
    python_roundtrip(cfg, helper, sec)
    python_warm(cfg, build, helper, sec, py, probe, install, notes)

    # 4. Big items.
    python_payload(cfg, helper, sec, ["bytes"] + (
        ["numpy"] if py_have(py, probe, install, notes, "numpy",
                             "big numpy items") else []))

    # 5. Start-up and first item, forked and clean, against loky.
    imports = [i for i in PY_START_IMPORTS if i == "none" or py_have(
        py, probe, install, notes, i, "the start-up rows after import %s"
        % i)]
    python_start(cfg, helper, sec, imports)

    # 6. Checkpoints.
    python_checkpoint(cfg, helper, sec)


def python_trivial(cfg, helper, sec):
    """Trivial items."""
    impls = [(k, lab) for k, lab in PY_TRIVIAL if k not in sec["missing"]]
    tr = sec["trivial"] = {"labels": dict(impls), "ns": list(cfg["py_ns"]),
                           "by_n": {}}
    for n in cfg["py_ns"]:
        runs = {k: [] for k, _ in impls}
        for rd in range(cfg["py_triv_rounds"]):
            log("python: trivial N=%d, round %d/%d" % (
                n, rd + 1, cfg["py_triv_rounds"]))
            for k, _ in rotate(impls, rd):
                runs[k].append(one(helper + ["trivial", k, str(n)]))
        g = runs["gpupool"]
        tr["by_n"][str(n)] = {
            k: {"items_per_s": stats([x.get("items_per_s") for x in v]),
                "startup_s": stats([x.get("startup_s") for x in v]),
                "gpupool_over": pair_ratios(g, v, "items_per_s")
                if k != "gpupool" else None}
            for k, v in runs.items()}


def python_roundtrip(cfg, helper, sec):
    """One item in flight, free and then pinned (rt["pinned"]): every
    process on the first CPU this one may use (as `taskset -c 0`),
    gpupool's forked and clean rows and the fastest peer of the free
    rounds, and the clean row again with address randomization off: on
    one CPU, caller and worker take turns on the same core, and a forked
    worker runs the interpreter's code at the caller's addresses while a
    clean one (exec'd, so placed afresh) does not; with a shared
    libpython (pyenv, the python Docker images) that costs the clean
    side 10-20 % more CPU per round trip for the same instructions. The
    control row says how much of the gap is that."""
    impls = [(k, lab) for k, lab in PY_ROUNDTRIP if k not in sec["missing"]]
    n = cfg["py_rt_n"]
    rt = sec["roundtrip"] = {"labels": dict(impls), "n": n}
    rt["impls"], runs = roundtrip_rounds(cfg, helper, impls, "")
    if "gpupool-map1" in runs and "ppe" in runs:
        rt["map1_over_ppe"] = pair_ratios(runs["gpupool-map1"], runs["ppe"],
                                          "per_s")
    peers = [(med(x["gpupool_over"]), k) for k, x in rt["impls"].items()
             if not k.startswith("gpupool") and med(x["gpupool_over"])]
    pin = [(k, lab) for k, lab in impls if k in (
        "gpupool", "gpupool-clean", min(peers)[1] if peers else None)]
    if "gpupool-clean" in dict(pin):
        pin.append(PY_NORAND)
    cpu = min(os.sched_getaffinity(0))
    rt["pinned"] = {"labels": dict(pin), "cpu": cpu,
                    "peer": min(peers)[1] if peers else None,
                    "libpython_shared": sec["probe"].get("libpython_shared")}
    rt["pinned"]["impls"], runs = roundtrip_rounds(
        cfg, helper, pin, ", all on CPU %d" % cpu, pin_first_cpu(),
        {PY_NORAND[0]: pin_norandom()})
    if PY_NORAND[0] in runs:
        # whether personality() took: each run reports its own
        rt["pinned"]["norand_took"] = all(
            x.get("aslr") is False for x in runs[PY_NORAND[0]])
    # Any process of a pinned run that could run elsewhere (a pool that
    # set its workers' affinity itself).
    rt["pinned"]["cpus"] = sorted({c for v in runs.values() for x in v
                                   for c in x.get("cpus", [])})


def pin_norandom():
    """pin_first_cpu(), and the process (and what it starts: the
    personality is inherited across fork and exec) with address
    randomization off, as setarch -R."""
    pin, personality = pin_first_cpu(), ctypes.CDLL(None).personality
    personality.argtypes, personality.restype = [ctypes.c_ulong], ctypes.c_int

    def pre():
        pin()
        cur = personality(0xffffffff)  # asks, changes nothing
        personality((cur if cur >= 0 else 0) | 0x0040000)
    return pre


def roundtrip_rounds(cfg, helper, impls, what, preexec=None, preexecs=None):
    """Rounds of sequential round trips of impls, in rotated order: each
    impl's figures over the rounds, and the runs. preexecs: an impl's own
    preexec, instead of preexec."""
    n = cfg["py_rt_n"]
    runs = {k: [] for k, _ in impls}
    for rd in range(cfg["py_rt_rounds"]):
        log("python: one item in flight x %d%s, round %d/%d" % (
            n, what, rd + 1, cfg["py_rt_rounds"]))
        for k, _ in rotate(impls, rd):
            runs[k].append(one(helper + ["roundtrip", k, str(n)],
                               preexec=(preexecs or {}).get(k, preexec)))
    g = runs["gpupool"]
    return {k: dict({f: stats([x.get(f) for x in v]) for f in (
        "us", "per_s", "caller_cpu_us", "worker_cpu_us")},
        gpupool_over=pair_ratios(g, v, "per_s") if k != "gpupool" else None)
        for k, v in runs.items()}, runs


def python_warm(cfg, build, helper, sec, py, probe, install, notes):
    """Warm workers against a process per task. The set-up is a real
    heavy import (scipy.stats, about 0.3-1 s cold) when py has it, else
    a sleep standing for one."""
    tasks, module, setup_s, work_s = cfg["py_warm"]
    setup = module if py_have(py, probe, install, notes, module.split(".")[0],
                              "the warm rows' real import (a %g s sleep "
                              "stands for it)" % setup_s) else repr(setup_s)
    gpr = os.path.join(build, "src", "cli", "gpupool-run")
    impls = list(PY_WARM)
    if not os.access(gpr, os.X_OK):
        impls = [x for x in impls if x[0] != "run"]
        sec["missing"]["run"] = "gpupool-run not built in %s" % build
        notes.append("python: warm workers: gpupool-run not built, its "
                     "row not measured")
    wm = sec["warm"] = {
        "labels": dict(impls), "tasks": tasks, "slots": SLOTS,
        "setup": ("import " + module) if setup == module else
        "time.sleep(%g)" % setup_s, "setup_s": setup_s, "work_s": work_s,
        "cpus": len(os.sched_getaffinity(0)),
        "ideal_s": tasks * work_s / SLOTS,
        "setup_per_worker_s": setup_s,
        "setup_per_task_s": tasks * setup_s / SLOTS, "impls": {}}
    runs = {k: [] for k, _ in impls}
    for rd in range(cfg["py_warm_rounds"]):
        log("python: warm workers, %d tasks x set-up %s, round %d/%d" % (
            tasks, setup, rd + 1, cfg["py_warm_rounds"]))
        for k, _ in rotate(impls, rd):
            runs[k].append(one(helper + ["warm", k, str(tasks), setup,
                                         repr(work_s), gpr]))
    # What one set-up costs, as each run measured it (an import: in a
    # fresh interpreter, before its clock).
    ss = [x["setup_s"] for v in runs.values() for x in v
          if x.get("setup_s")]
    setup_s = wm["setup_s"] = stats(ss)["median"] if ss else setup_s
    wm["setup_per_worker_s"] = setup_s
    wm["setup_per_task_s"] = tasks * setup_s / SLOTS
    wm["impls"] = {k: {"wall_s": stats([x.get("wall_s") for x in v]),
                       "overhead_s": stats([x.get("overhead_s") for x in v]),
                       "overhead_setups": stats(
                           [x["overhead_s"] / x["setup_s"] for x in v
                            if x.get("overhead_s") is not None and
                            x.get("setup_s")])}
                   for k, v in runs.items()}
    if "run" in runs:
        wm["pool_faster_than_run"] = pair_ratios(runs["run"], runs["pool"],
                                                 "wall_s")
    wm["pool_faster_than_semaphore"] = pair_ratios(
        runs["semaphore"], runs["pool"], "wall_s")

