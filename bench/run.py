#!/usr/bin/env python3
"""gpupool's benchmark harness: gpupool-run and pool_map against what people
use instead, on the same work, on this machine, in one run.

    python3 bench/run.py [--quick] [--install-peers] [--out DIR]
                         [--build DIR] [--no-build] [--publish]
                         [--sections cmd,pool,mpi,python] [--python PY]

Writes DIR/results.json (machine, versions, git revision, every figure with
median, min and max over repeats), DIR/results.md (tables, targets with
PASS/MISS) and DIR/results.svg (the plot). DIR defaults to bench/results/
(git-ignored). --publish also copies the table and the plot into
docs/benchmarks.md and docs/benchmarks.svg. See bench/README.md for what
each figure measures and how.

Every comparison is a ratio of runs interleaved in the same pass (each
round runs every contender once, in a rotated order), and the median of
the per-round ratios is quoted. Peers that are not installed are skipped
with a note; --install-peers installs the Debian ones first (GNU parallel,
task-spooler) with apt-get, and the Python ones (loky, mpire, numpy, and
scipy for the warm rows' real import) with pip into the bench's venv.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SLOTS = 4
MIB = 1024 * 1024

# What a full run and a --quick run measure. A full run takes about 8 minutes
# on 2 cores, --quick under a minute.
FULL = dict(
    cmd_n=1000, true_rounds=5, sleep_rounds=3,
    skew_xm=0.010, skew_cap=1.0, skew_rounds=3,
    fp_ns=(100, 1000), val_n=24,
    pp_procs=3, pp_blocks=10, pp_n=2000,
    triv_ns=(10**4, 10**5, 10**6), triv_rounds=3, triv_budget_s=8.0,
    pskew_rounds=5,
    payloads=((16, 100000), (4096, 20000), (MIB, 256), (16 * MIB, 32),
              (64 * MIB, 16)), payload_rounds=3, payload_py_s=10.0,
    mpi_n=200000, mpi_rounds=5,
    py_ns=(10**5, 10**6), py_triv_rounds=3, py_rt_n=2000, py_rt_rounds=5,
    py_warm=(100, "scipy.stats", 0.5, 0.1), py_warm_rounds=3,
    py_payloads=((MIB, 128), (16 * MIB, 16)), py_payload_rounds=3,
    py_start_rounds=5,
    py_ck={"trivial": 10**6, "ms": 4000, "ms1": 4000, "read1": 10**6},
    py_ck_rounds=3,
)
QUICK = dict(
    cmd_n=200, true_rounds=2, sleep_rounds=1,
    skew_xm=0.002, skew_cap=0.2, skew_rounds=1,
    fp_ns=(100,), val_n=12,
    pp_procs=1, pp_blocks=5, pp_n=2000,
    triv_ns=(10**4, 10**5, 10**6), triv_rounds=2, triv_budget_s=1.0,
    pskew_rounds=2,
    payloads=((16, 20000), (4096, 5000), (MIB, 64), (16 * MIB, 16)),
    payload_rounds=1, payload_py_s=5.0,
    mpi_n=50000, mpi_rounds=3,
    py_ns=(10**5,), py_triv_rounds=2, py_rt_n=500, py_rt_rounds=2,
    py_warm=(20, "scipy.stats", 0.2, 0.05), py_warm_rounds=2,
    py_payloads=((MIB, 32), (16 * MIB, 4)), py_payload_rounds=2,
    py_start_rounds=2,
    py_ck={"trivial": 10**5, "ms": 1000, "ms1": 1000, "read1": 10**5},
    py_ck_rounds=2,
)

# Pareto(alpha 1.5) item durations for pool_map's skewed set (5 ms scale,
# capped at 0.5 s, as bench_pool's own set), 100 items, seed 42.
PSKEW = dict(n=100, xm=0.005, cap=0.5, seed=42)

T0 = time.monotonic()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr,
          flush=True)


def stats(values):
    v = [x for x in values if x is not None]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v),
            "n": len(v), "values": v}


def rotate(seq, k):
    k %= len(seq) if seq else 1
    return list(seq[k:]) + list(seq[:k])


def sh(argv, **kw):
    """Output of a short command, or None."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                           **kw)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return None


def first_line(s):
    return s.splitlines()[0].strip() if s else None


def greedy(d, w=SLOTS):
    """Greedy list scheduling of durations d, in order, on w machines."""
    load = [0.0] * w
    for x in d:
        i = load.index(min(load))
        load[i] += x
    return max(load)


def pareto(n, xm, cap, seed, ndigits=None):
    r = random.Random(seed)
    d = [min(cap, xm * r.paretovariate(1.5)) for _ in range(n)]
    return [round(x, ndigits) for x in d] if ndigits else d


# ---------------------------------------------------------------------------
# Processes: every runner is a descendant of this process. We are a child
# subreaper, so what runners leave behind (task-spooler's server, its
# per-job clients) is re-parented to us, counted in the process tree while
# it lives, reaped by us (its CPU time lands in RUSAGE_CHILDREN), and never
# outlives a run unseen.

def become_subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0    # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def proc_table():
    """{pid: (ppid, state, rss_pages, comm)} for every process."""
    t = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                s = f.read()
        except OSError:
            continue
        r = s.rindex(b")")
        f = s[r + 2:].split()
        t[int(d)] = (int(f[1]), f[0], int(f[21]),
                     s[s.index(b"(") + 1:r].decode(errors="replace"))
    return t


def descendants(table, root):
    kids = {}
    for pid, (ppid, _, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = [], list(kids.get(root, ()))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(kids.get(p, ()))
    return out


def read_kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def reap_all(deadline_s=10.0):
    """Reap every child; SIGKILL (by pid) what is still alive after
    deadline_s. Returns the pids that had to be killed."""
    killed, t_end = [], time.monotonic() + deadline_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid != 0:
            continue
        if time.monotonic() > t_end:
            for p in descendants(proc_table(), os.getpid()):
                try:
                    os.kill(p, signal.SIGKILL)
                    killed.append(p)
                except OSError:
                    pass
            t_end = time.monotonic() + 5
        time.sleep(0.001)


class Sampler(threading.Thread):
    """Samples this process's descendants while a runner runs: live
    processes, summed RSS and PSS, and the master's VmHWM."""

    def __init__(self, master_pid, find_master=None, pss_every=3):
        super().__init__(daemon=True)
        self.master_pid = master_pid
        self.find_master = find_master
        self.pss_every = pss_every
        self.stop = threading.Event()
        self.peak_procs = self.peak_rss = self.peak_pss = 0
        self.hwm_kb = None
        self.samples = 0

    def run(self):
        me, page_kb = os.getpid(), os.sysconf("SC_PAGE_SIZE") // 1024
        while not self.stop.is_set():
            table = proc_table()
            live = [p for p in descendants(table, me)
                    if table[p][1] != b"Z"]
            if self.find_master is not None and self.master_pid is None:
                self.master_pid = self.find_master(live)
            if self.master_pid is not None:
                h = read_kb("/proc/%d/status" % self.master_pid, "VmHWM:")
                if h is not None:
                    self.hwm_kb = max(self.hwm_kb or 0, h)
            self.peak_procs = max(self.peak_procs, len(live))
            self.peak_rss = max(self.peak_rss,
                                sum(table[p][2] for p in live) * page_kb)
            if self.samples % self.pss_every == 0 or \
                    len(live) >= self.peak_procs:
                pss = sum(read_kb("/proc/%d/smaps_rollup" % p, "Pss:") or 0
                          for p in live)
                self.peak_pss = max(self.peak_pss, pss)
            self.samples += 1
            self.stop.wait(0.002)


# ---------------------------------------------------------------------------
# Command runners.

class Runner:
    def __init__(self, name, label, argv, env=None, gpu_aware=True,
                 note=None, master=None, setup=None, cleanup=None):
        self.name, self.label = name, label
        self.argv = argv                  # tasks path -> argv
        self.env = env or {}
        self.gpu_aware = gpu_aware
        self.note = note
        self.master = master              # live pids -> master pid
        self.setup, self.cleanup = setup, cleanup


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "GPUPOOL_", "TS_", "PARALLEL"))}
    env["LC_ALL"] = "C"
    return env


def tsp_master(live):
    """task-spooler's server: the process started by our `tsp -S N`."""
    for p in live:
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                if f.read().split(b"\0")[:2] == [b"tsp", b"-S"]:
                    return p
        except OSError:
            pass
    return None


def make_runners(build, work, notes):
    runners, skipped = [], []
    spawn4 = os.path.join(build, "bench", "spawn4")
    runners.append(Runner(
        "spawn4", "raw posix_spawn bound",
        lambda t: [spawn4, "-j", str(SLOTS), t],
        note="bench/spawn4.c: posix_spawn /bin/sh -c LINE, 4 in flight, "
             "waitpid; CUDA_VISIBLE_DEVICES=slot; nothing else"))
    gpr = os.path.join(build, "src", "cli", "gpupool-run")
    if os.access(gpr, os.X_OK):
        runners.append(Runner(
            "gpupool-run", "gpupool-run --fake-gpus 4",
            lambda t: [gpr, "--fake-gpus", str(SLOTS), "--quiet", t]))
    else:
        skipped.append(("gpupool-run", "not built at %s" % gpr))
    xargs = shutil.which("xargs")
    if xargs and "process-slot-var" in (sh([xargs, "--help"]) or ""):
        runners.append(Runner(
            "xargs", "xargs -P4",
            lambda t: [xargs, "-P", str(SLOTS),
                       "--process-slot-var=CUDA_VISIBLE_DEVICES",
                       "-d", "\\n", "-n", "1", "-a", t, "/bin/sh", "-c"],
            note="GNU xargs -P4 -n1 sh -c, GPU from --process-slot-var"))
    else:
        skipped.append(("xargs", "GNU xargs with --process-slot-var not "
                                 "found"))
    par = shutil.which("parallel")
    if par and "GNU parallel" in (sh([par, "--version"]) or ""):
        runners.append(Runner(
            "parallel", "GNU parallel -j4",
            lambda t: [par, "-j", str(SLOTS),
                       "CUDA_VISIBLE_DEVICES=$(({%}-1)) {=uq=}", "::::", t],
            env={"PARALLEL_SHELL": "/bin/sh"},
            note="parallel -j4 'CUDA_VISIBLE_DEVICES=$(({%}-1)) {=uq=}' "
                 ":::: FILE, PARALLEL_SHELL=/bin/sh"))
    else:
        skipped.append(("parallel", "GNU parallel not installed "
                                    "(--install-peers: apt-get install "
                                    "parallel)"))
    tsp = shutil.which("tsp")
    if tsp:
        tdir = os.path.join(work, "tsp")

        def tsp_setup(r):
            shutil.rmtree(tdir, ignore_errors=True)
            os.makedirs(tdir)

        runners.append(Runner(
            "tsp", "task-spooler -S 4",
            lambda t: ["/bin/sh", os.path.join(HERE, "tsp-run.sh"), t],
            env={"TS_SOCKET": os.path.join(tdir, "sock"), "TMPDIR": tdir,
                 "TS_SLOTS": str(SLOTS)},
            gpu_aware=False, master=tsp_master, setup=tsp_setup,
            cleanup=lambda r: shutil.rmtree(tdir, ignore_errors=True),
            note="bench/tsp-run.sh: one `tsp sh -c LINE` per task, then "
                 "tsp -w; private TS_SOCKET and TMPDIR, TS_SLOTS=4. "
                 "Debian's task-spooler sets no GPU"))
    else:
        skipped.append(("tsp", "task-spooler not installed "
                               "(--install-peers: apt-get install "
                               "task-spooler)"))
    py = sys.executable
    pyr = os.path.join(HERE, "py_runners.py")
    runners.append(Runner(
        "py-semaphore", "Process per task + Semaphore(4)",
        lambda t: [py, pyr, "semaphore", t],
        note="bench/py_runners.py: a Process per task, all started, each "
             "in Semaphore(4), GPU from a Manager().list()"))
    runners.append(Runner(
        "py-pool", "Pool(4).map",
        lambda t: [py, pyr, "pool", t],
        note="bench/py_runners.py: Pool(processes=4).map, default chunks, "
             "GPU from the worker index"))
    for name, why in skipped:
        notes.append("skipped %s: %s" % (name, why))
    return runners, dict(skipped)


def run_runner(r, tasks, work, timeout_s, stamp_file=None, sample=False):
    """Run one runner on a tasks file: wall, CPU, exit status, and, when
    asked, launch-to-first-task latency and the sampled footprint."""
    if r.setup:
        r.setup(r)
    if stamp_file and os.path.exists(stamp_file):
        os.unlink(stamp_file)
    reap_all()
    env = base_env()
    env.update(r.env)
    argv = r.argv(tasks)
    errpath = os.path.join(work, "%s.stderr" % r.name)
    fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, errpath,
           os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    launch_ns = time.time_ns()
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa, setpgroup=0)
    sampler = None
    if sample:
        sampler = Sampler(None if r.master else pid, r.master)
        sampler.start()
    timer = threading.Timer(timeout_s, lambda: kill_tree(pid))
    timer.start()
    _, status, _ = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    timer.cancel()
    killed = reap_all()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if sampler:
        sampler.stop.set()
        sampler.join()
    if r.cleanup:
        r.cleanup(r)
    res = {"wall_s": wall,
           "cpu_s": (ru1.ru_utime - ru0.ru_utime) +
                    (ru1.ru_stime - ru0.ru_stime),
           "status": os.waitstatus_to_exitcode(status)}
    if killed:
        res["killed"] = len(killed)
    if res["status"] != 0:
        try:
            with open(errpath) as f:
                res["stderr"] = f.read()[-400:]
        except OSError:
            pass
    if stamp_file:
        try:
            with open(stamp_file) as f:
                res["latency_ms"] = (int(f.read().split()[1]) -
                                     launch_ns) / 1e6
        except (OSError, IndexError, ValueError):
            res["latency_ms"] = None
    if sampler:
        res.update(peak_procs=sampler.peak_procs,
                   peak_rss_kb=sampler.peak_rss,
                   peak_pss_kb=sampler.peak_pss,
                   master_hwm_kb=sampler.hwm_kb, samples=sampler.samples)
    return res


def kill_tree(pid):
    """Timeout: SIGKILL the runner's group and every descendant, by pid."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for p in descendants(proc_table(), os.getpid()):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def write_tasks(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def validate(runners, build, work, n):
    """Each runner on n tasks of 30 ms that record when and where they ran:
    every task ran once, at most 4 at a time, no two at once on a GPU."""
    stamp = os.path.join(build, "bench", "stamp")
    out = {}
    for r in runners:
        rec = os.path.join(work, "validate-%s.txt" % r.name)
        if os.path.exists(rec):
            os.unlink(rec)
        tasks = write_tasks(os.path.join(work, "validate.tasks"),
                            ["%s %s %d 30" % (stamp, rec, i)
                             for i in range(1, n + 1)])
        res = run_runner(r, tasks, work, 60)
        v = {"status": res["status"]}
        try:
            with open(rec) as f:
                rows = [line.split() for line in f if line.strip()]
        except OSError:
            rows = []
        tags = sorted(int(x[0]) for x in rows)
        v["ran_each_once"] = tags == list(range(1, n + 1))
        ev = sorted([(int(x[1]), 1) for x in rows] +
                    [(int(x[2]), -1) for x in rows], key=lambda e: (e[0], e[1]))
        cur = peak = 0
        for _, d in ev:
            cur += d
            peak = max(peak, cur)
        v["max_concurrent"] = peak
        clash = 0
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                if int(a[1]) < int(b[2]) and int(b[1]) < int(a[2]) and \
                        a[3] == b[3]:
                    clash += 1
        gpus = sorted(set(x[3] for x in rows))
        v["gpus_seen"] = gpus
        v["gpu_clashes"] = clash if r.gpu_aware else None
        problems = []
        if res["status"] != 0:
            problems.append("exit status %d" % res["status"])
        if not v["ran_each_once"]:
            problems.append("tasks ran %d times for %d" % (len(tags), n))
        if peak > SLOTS:
            problems.append("%d tasks at once" % peak)
        if r.gpu_aware and clash:
            problems.append("%d overlapping pairs shared a GPU" % clash)
        if r.gpu_aware and (gpus == ["-"] or len(gpus) != SLOTS):
            problems.append("GPU ids seen: %s" % " ".join(gpus))
        v["ok"] = not problems
        v["problems"] = problems
        out[r.name] = v
        log("  validate %-13s %s (max %d at once, GPUs %s)" % (
            r.name, "ok" if v["ok"] else "; ".join(problems), peak,
            ",".join(gpus)))
    return out


def cmd_section(cfg, runners, build, work, res, notes):
    stamp = os.path.join(build, "bench", "stamp")
    first = os.path.join(work, "first.stamp")
    n = cfg["cmd_n"]
    sec = res["command_runner"] = {
        "slots": SLOTS, "runners": {r.name: {"label": r.label,
                                             "note": r.note}
                                    for r in runners}}
    log("command runners: validation")
    sec["validation"] = validate(runners, build, work, cfg["val_n"])

    # Throughput workloads. The first task records its start time.
    workloads = [
        ("true", "%d x true" % n, cfg["true_rounds"], 0.0,
         ["%s %s first" % (stamp, first)] + ["true"] * (n - 1)),
        ("sleep", "%d x sleep 0.01" % n, cfg["sleep_rounds"], 0.01,
         ["%s %s first 10" % (stamp, first)] + ["sleep 0.01"] * (n - 1)),
    ]
    sec["workloads"] = {}
    for key, title, rounds, task_s, lines in workloads:
        tasks = write_tasks(os.path.join(work, key + ".tasks"), lines)
        ideal = n * task_s / SLOTS
        runs = {r.name: [] for r in runners}
        for k in range(rounds):
            log("command runners: %s, round %d/%d" % (title, k + 1, rounds))
            for r in rotate(runners, k):
                x = run_runner(r, tasks, work, max(120, 30 * ideal),
                               stamp_file=first)
                if x["status"] != 0:
                    notes.append("%s on %s, round %d: exit %s %s" % (
                        r.name, title, k + 1, x["status"],
                        x.get("stderr", "").strip()[-200:]))
                    x["wall_s"] = x["cpu_s"] = x["latency_ms"] = None
                runs[r.name].append(x)
        w = sec["workloads"][key] = {"title": title, "n": n,
                                     "task_s": task_s, "ideal_s": ideal,
                                     "rounds": rounds, "runners": {}}
        for r in runners:
            rr = runs[r.name]
            walls = [x["wall_s"] for x in rr]
            w["runners"][r.name] = {
                "wall_s": stats(walls),
                "cpu_s": stats([x["cpu_s"] for x in rr]),
                "cpu_ms_per_task": stats([x["cpu_s"] and x["cpu_s"] / n * 1e3
                                          for x in rr]),
                "overhead_ms_per_task": stats(
                    [wl and (wl - ideal) / n * SLOTS * 1e3 for wl in walls]),
                "latency_ms": stats([x.get("latency_ms") for x in rr]),
                "vs_raw": ratio_stats(rr, runs["spawn4"], "wall_s"),
                "gpupool_speedup": ratio_stats(
                    rr, runs.get("gpupool-run"), "wall_s"),
            }

    # Skewed: 100 heavy-tailed sleeps, given order and longest first.
    d = pareto(100, cfg["skew_xm"], cfg["skew_cap"], 42, 3)
    orders = {"given": d, "lpt": sorted(d, reverse=True)}
    sk = sec["skewed"] = {
        "n": len(d), "durations_s": d, "total_s": sum(d), "max_s": max(d),
        "dist": "Pareto(alpha 1.5) x %g s, capped at %g s, seed 42, "
                "rounded to 1 ms" % (cfg["skew_xm"], cfg["skew_cap"]),
        "orders": {}}
    for order, dd in orders.items():
        tasks = write_tasks(os.path.join(work, "skew-%s.tasks" % order),
                            ["sleep %.3f" % x for x in dd])
        ideal = greedy(dd)
        runs = {r.name: [] for r in runners}
        for k in range(cfg["skew_rounds"]):
            log("command runners: skewed (%s order), round %d/%d" % (
                order, k + 1, cfg["skew_rounds"]))
            for r in rotate(runners, k):
                x = run_runner(r, tasks, work, 120)
                if x["status"] != 0:
                    x["wall_s"] = None
                    notes.append("%s on skewed %s: exit %s" % (
                        r.name, order, x["status"]))
                runs[r.name].append(x)
        sk["orders"][order] = {
            "ideal_s": ideal,
            "runners": {r.name: {
                "makespan_s": stats([x["wall_s"] for x in runs[r.name]]),
                "over_ideal": stats([x["wall_s"] and x["wall_s"] / ideal
                                     for x in runs[r.name]])}
                for r in runners}}

    # Pile-up and footprint, sampled in a pass of their own (the sampler
    # costs CPU; no time from this pass is reported).
    fp = sec["footprint"] = {"task": "sleep 0.01", "ns": list(cfg["fp_ns"]),
                             "runners": {r.name: {} for r in runners}}
    for nn in cfg["fp_ns"]:
        tasks = write_tasks(os.path.join(work, "fp-%d.tasks" % nn),
                            ["sleep 0.01"] * nn)
        log("command runners: pile-up and footprint, N=%d" % nn)
        for r in runners:
            x = run_runner(r, tasks, work, 120, sample=True)
            fp["runners"][r.name][str(nn)] = {
                k: x.get(k) for k in ("peak_procs", "peak_rss_kb",
                                      "peak_pss_kb", "master_hwm_kb",
                                      "samples", "status")}


def ratio_stats(a_runs, b_runs, key):
    """Per-round ratios a/b of interleaved runs."""
    if not b_runs:
        return None
    v = []
    for a, b in zip(a_runs, b_runs):
        if a.get(key) and b.get(key):
            v.append(a[key] / b[key])
    return stats(v)


# ---------------------------------------------------------------------------
# pool_map against Python's pools.

def pin_first_cpu():
    cpu = min(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {cpu})


NOTES = []     # main() points this at the run's notes


def json_lines(argv, timeout=300, preexec=None):
    """The JSON lines a measurement program prints; [] (and a note) when it
    fails, so one broken measurement does not lose the others."""
    what = " ".join(os.path.basename(a) if i == 0 else a
                    for i, a in enumerate(argv))
    try:
        r = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=preexec,
                           env=base_env())
    except subprocess.TimeoutExpired:
        NOTES.append("%s: killed after %d s" % (what, timeout))
        return []
    except OSError as e:
        NOTES.append("%s: %s" % (what, e))
        return []
    if r.returncode != 0:
        NOTES.append("%s: exit %d: %s" % (what, r.returncode,
                                          r.stderr.strip()[-300:]))
        return []
    return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


def one(argv):
    x = json_lines(argv)
    return x[0] if x else {}


def pair_ratios(a, b, key):
    """Per-round ratios a/b over runs that both produced key."""
    return stats([x[key] / y[key] for x, y in zip(a, b)
                  if x.get(key) and y.get(key)])


def pool_section(cfg, build, work, res, notes):
    bp = os.path.join(build, "bench", "bench_pool")
    pyp = [sys.executable, os.path.join(HERE, "py_pool.py")]
    sec = res["pool_map"] = {"workers": SLOTS}

    # One item in flight: blocks of round trips, raw pipe / raw socketpair /
    # pool interleaved inside one process; pinned to one CPU (the worker
    # keeps that affinity: GP_POOL_NO_BIND), and free.
    log("pool_map: one-item round trips")
    pp = sec["roundtrip"] = {"n_per_block": cfg["pp_n"]}
    for mode in ("pinned", "free"):
        blocks = []
        for k in range(cfg["pp_procs"]):
            if mode == "pinned":
                blocks += json_lines([bp, "pingpong", str(cfg["pp_n"]),
                                      str(cfg["pp_blocks"]), "nobind"],
                                     preexec=pin_first_cpu())
            else:
                blocks += json_lines([bp, "pingpong", str(cfg["pp_n"]),
                                      str(cfg["pp_blocks"])])
        pp[mode] = {
            "raw_pipe_us": stats([b["raw_pipe_us"] for b in blocks]),
            "raw_sock_us": stats([b["raw_sock_us"] for b in blocks]),
            "pool_us": stats([b["pool_us"] for b in blocks]),
            "pool_over_pipe": stats([b["pool_us"] / b["raw_pipe_us"]
                                     for b in blocks]),
            "pool_over_sock": stats([b["pool_us"] / b["raw_sock_us"]
                                     for b in blocks]),
        }

    # Trivial items: x * 2 on an int.
    impls = [
        ("gpupool", "pool_map", lambda n: [bp, "trivial", str(n)]),
        ("gpupool-bufs", "gp_pool_map, results in the caller's buffers",
         lambda n: [bp, "trivial", str(n), "bufs"]),
        ("raw-batch", "raw pipes, 1024 a message",
         lambda n: [bp, "raw-batch", str(n), "1024"]),
        ("raw-1", "raw pipes, 1 a message",
         lambda n: [bp, "raw-batch", str(n), "1"]),
        ("map", "Pool.map (default chunks)",
         lambda n: pyp + ["trivial", "map", str(n)]),
        ("map1", "Pool.map chunksize=1",
         lambda n: pyp + ["trivial", "map1", str(n)]),
        ("imap_unordered", "Pool.imap_unordered",
         lambda n: pyp + ["trivial", "imap_unordered", str(n)]),
        ("ppe", "ProcessPoolExecutor.map",
         lambda n: pyp + ["trivial", "ppe", str(n)]),
    ]
    tr = sec["trivial"] = {"labels": {k: lab for k, lab, _ in impls},
                           "ns": list(cfg["triv_ns"]), "by_n": {},
                           "skipped": {}}
    rate = {}
    for n in cfg["triv_ns"]:
        runs = {k: [] for k, _, _ in impls}
        todo = []
        for k, _, argv in impls:
            if k in rate and n / rate[k] > cfg["triv_budget_s"]:
                tr["skipped"].setdefault(k, {})[str(n)] = \
                    "~%.0f s a run at the rate measured at the N below" % (
                        n / rate[k])
                continue
            todo.append((k, argv))
        for rd in range(cfg["triv_rounds"]):
            log("pool_map: trivial N=%d, round %d/%d" % (
                n, rd + 1, cfg["triv_rounds"]))
            for k, argv in rotate(todo, rd):
                runs[k].append(one(argv(n)))
        for k, _ in todo:
            ok = [x["items_per_s"] for x in runs[k] if x.get("items_per_s")]
            rate[k] = statistics.median(ok) if ok else 1e-9
        g = runs["gpupool"]
        tr["by_n"][str(n)] = {
            k: {"items_per_s": stats([x.get("items_per_s")
                                      for x in runs[k]]),
                "gpupool_over": pair_ratios(g, runs[k], "items_per_s")
                if k != "gpupool" else None}
            for k, _ in todo}

    # Skewed item durations, given order and longest first.
    d = pareto(PSKEW["n"], PSKEW["xm"], PSKEW["cap"], PSKEW["seed"])
    sk = sec["skewed"] = {
        "n": len(d), "total_s": sum(d), "max_s": max(d),
        "dist": "Pareto(alpha 1.5) x 5 ms, capped at 0.5 s, seed 42",
        "orders": {}}
    impls = [("gpupool", lambda f: [bp, "skewed", f]),
             ("map", lambda f: pyp + ["skewed", "map", f]),
             ("imap_unordered", lambda f: pyp + ["skewed", "imap_unordered",
                                                 f])]
    for order, dd in (("given", d), ("lpt", sorted(d, reverse=True))):
        f = os.path.join(work, "pskew-%s.txt" % order)
        with open(f, "w") as fh:
            fh.write("\n".join(repr(x) for x in dd) + "\n")
        ideal = greedy(dd)
        runs = {k: [] for k, _ in impls}
        for rd in range(cfg["pskew_rounds"]):
            log("pool_map: skewed (%s order), round %d/%d" % (
                order, rd + 1, cfg["pskew_rounds"]))
            for k, argv in rotate(impls, rd):
                runs[k].append(one(argv(f)).get("makespan_s"))
        sk["orders"][order] = {
            "ideal_s": ideal,
            "impls": {k: {"makespan_s": stats(v),
                          "over_ideal": stats([x and x / ideal for x in v])}
                      for k, v in runs.items()}}

    # Payload sweep: echo SIZE bytes; this machine's memcpy of SIZE bytes in
    # the same rounds, so each round gives pool_map's share of it.
    pl = sec["payload"] = {}
    map_mbps = None
    for size, n in cfg["payloads"]:
        mc_n = memcpy_n(bp, size)
        argvs = {"gpupool": [bp, "payload", str(size), str(n)],
                 "gpupool-bufs": [bp, "payload", str(size), str(n), "bufs"],
                 "gpupool-view": [bp, "payload", str(size), str(n), "view"],
                 "map": pyp + ["payload", "map", str(size), str(n)],
                 "memcpy": [bp, "memcpy", str(size), str(mc_n)]}
        skip = None
        if map_mbps and n * size / (map_mbps * 1e6) > cfg["payload_py_s"]:
            skip = "~%.0f s a run at the rate measured at the size below" \
                % (n * size / (map_mbps * 1e6))
            del argvs["map"]
        runs = {k: [] for k in argvs}
        for rd in range(cfg["payload_rounds"]):
            log("pool_map: payload %d B x %d, round %d/%d" % (
                size, n, rd + 1, cfg["payload_rounds"]))
            for k in rotate(list(argvs), rd):
                runs[k].append(one(argvs[k]))
        mb = {k: stats([x.get("mb_per_s") for x in v])
              for k, v in runs.items()}
        if "map" in runs:
            map_mbps = med(mb["map"])
        pl[str(size)] = {
            "n": n, "memcpy_n": mc_n, "map_skipped": skip,
            "impls": {k: {"items_per_s": stats([x.get("items_per_s")
                                                for x in v]),
                          "mb_per_s": mb[k]}
                      for k, v in runs.items() if k != "memcpy"},
            "memcpy_gb_per_s": stats([x.get("gb_per_s")
                                      for x in runs["memcpy"]]),
            "gpupool_over_memcpy": pair_ratios(runs["gpupool"],
                                               runs["memcpy"], "mb_per_s"),
            "bufs_over_memcpy": pair_ratios(runs["gpupool-bufs"],
                                            runs["memcpy"], "mb_per_s"),
            "view_over_memcpy": pair_ratios(runs["gpupool-view"],
                                            runs["memcpy"], "mb_per_s"),
            "gpupool_over_map": pair_ratios(runs["gpupool"],
                                            runs.get("map", []),
                                            "items_per_s")}


def pair_ratios_of(tr, n, a, b):
    """Median per-round items/s ratio of implementation a to b at N=n in
    a trivial-items measurement (None when either did not run)."""
    x = tr["by_n"][n]
    if a not in x or b not in x:
        return None
    if a == "gpupool":
        return med(x[b]["gpupool_over"])
    ga, gb = x[a]["gpupool_over"], x[b]["gpupool_over"]
    # gpupool / b over gpupool / a, round by round.
    if not ga or not gb:
        return None
    va, vb = ga.get("values") or [], gb.get("values") or []
    r = [q / p for p, q in zip(va, vb) if p and q]
    return statistics.median(r) if r else None


def memcpy_n(bp, size, seconds=0.3):
    """How many memcpys of size bytes take about seconds here: a short
    probe (64 MiB copied) gives the rate."""
    n = max(1, 2 ** 26 // size)
    x = one([bp, "memcpy", str(size), str(n)])
    bps = (x.get("mb_per_s") or 0) * 1e6
    return max(4, min(10 ** 9, int(seconds * bps / size))) if bps else n


# ---------------------------------------------------------------------------
# The Python package gpupool against Python's pools (issue 11).

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
        r = subprocess.run([py, "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", pkg],
                           capture_output=True, text=True, cwd="/")
        p = py_probe(py) if r.returncode == 0 else None
        if p and p.get(pkg):
            probe[pkg] = p[pkg]
            return True
        notes.append("python: pip install %s failed: %s" % (pkg, (
            r.stderr.strip().splitlines() or ["?"])[-1][-200:]))
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
    r1, m1 = ck["kinds"]["read1"], ck["kinds"]["ms1"]
    rate = med(m1["impls"]["ckpt"]["items_per_s"])
    secs = med(r1["impls"]["resume"]["secs"])
    r1["compute_s"] = r1["n"] / rate if rate else None
    r1["read_over_compute"] = secs / r1["compute_s"] \
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

    def have(k):
        return k not in sec["missing"]

    # 1. Trivial items.
    impls = [(k, lab) for k, lab in PY_TRIVIAL if have(k)]
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

    # 2. One item in flight.
    impls = [(k, lab) for k, lab in PY_ROUNDTRIP if have(k)]
    n = cfg["py_rt_n"]
    rt = sec["roundtrip"] = {"labels": dict(impls), "n": n, "impls": {}}
    runs = {k: [] for k, _ in impls}
    for rd in range(cfg["py_rt_rounds"]):
        log("python: one item in flight x %d, round %d/%d" % (
            n, rd + 1, cfg["py_rt_rounds"]))
        for k, _ in rotate(impls, rd):
            runs[k].append(one(helper + ["roundtrip", k, str(n)]))
    g = runs["gpupool"]
    rt["impls"] = {k: {"us": stats([x.get("us") for x in v]),
                       "per_s": stats([x.get("per_s") for x in v]),
                       "gpupool_over": pair_ratios(g, v, "per_s")
                       if k != "gpupool" else None}
                   for k, v in runs.items()}
    if "gpupool-map1" in runs and "ppe" in runs:
        rt["map1_over_ppe"] = pair_ratios(runs["gpupool-map1"], runs["ppe"],
                                          "per_s")

    # 3. Warm workers against a process per task. The set-up is a real
    # heavy import (scipy.stats, about 0.3-1 s cold) when py has it, else
    # a sleep standing for one.
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


def mpi_section(cfg, build, work, res, notes):
    """gpupool-run across 3 local MPI ranks x 2 fake GPUs: how many null
    tasks a second rank 0 dispatches (bench_ranks: gpupool-run's own code,
    workers that answer at once). No peer: nothing else does this."""
    br = os.path.join(build, "bench", "bench_ranks")
    mpirun = shutil.which("mpirun")
    if not os.path.exists(br) or mpirun is None:
        notes.append("MPI dispatch not measured: %s" % (
            "no mpirun" if mpirun is None else
            "bench_ranks not built (a build without MPI)"))
        return
    argv = [mpirun, "--oversubscribe", "-np", "3"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    log("gpupool-run over 3 MPI ranks: %d null tasks x %d rounds" % (
        cfg["mpi_n"], cfg["mpi_rounds"]))
    runs = json_lines(argv + [br, str(cfg["mpi_n"]), "2",
                              str(cfg["mpi_rounds"])])
    if not runs:
        return
    res["mpi"] = {"ranks": 3, "gpus_per_rank": 2, "n": cfg["mpi_n"],
                  "per_s": stats([x["per_s"] for x in runs]),
                  "mpi_per_s": stats([x["mpi_per_s"] for x in runs]),
                  "secs": stats([x["secs"] for x in runs])}


# ---------------------------------------------------------------------------
# Targets (issue #4). A target whose inputs were not measured is N/A.

def med(s):
    return s["median"] if s else None


def targets(res, skipped):
    out = []

    def add(name, value, op, limit, basis, fmt="%.2f", why_na=None,
            context=None):
        if value is None:
            status = "N/A"
        else:
            status = "PASS" if (value <= limit if op == "<=" else
                                value >= limit) else "MISS"
        out.append({"target": name, "op": op, "limit": limit,
                    "value": value, "status": status, "basis": basis,
                    "context": context,
                    "shown": (fmt % value) if value is not None else
                    "not measured" + (": " + why_na if why_na else "")})

    cr = res.get("command_runner")
    if cr:
        t = cr["workloads"]["true"]
        g = t["runners"].get("gpupool-run")
        n = t["n"]
        add("gpupool-run wall <= 1.10x raw posix_spawn bound (%d x true)" % n,
            g and med(g["vs_raw"]), "<=", 1.10,
            "median of per-round wall ratios gpupool-run/spawn4",
            why_na=skipped.get("gpupool-run"))
        p = t["runners"].get("parallel")
        add("gpupool-run >= 5x faster than GNU parallel (%d x true)" % n,
            p and med(p["gpupool_speedup"]), ">=", 5.0,
            "median of per-round wall ratios parallel/gpupool-run",
            why_na=skipped.get("parallel") or skipped.get("gpupool-run"),
            context=p and p["vs_raw"] and
            "GNU parallel is %.2fx the raw bound here" % med(p["vs_raw"]))
        add("gpupool-run launch -> first task <= 5 ms",
            g and med(g["latency_ms"]), "<=", 5.0,
            "median over the %d x true runs, ms" % n, fmt="%.2f ms",
            why_na=skipped.get("gpupool-run"))
        hwm = [v.get("master_hwm_kb") for v in
               cr["footprint"]["runners"].get("gpupool-run", {}).values()]
        hwm = [h for h in hwm if h]
        add("gpupool-run master peak RSS <= 4 MiB",
            max(hwm) / 1024 if hwm else None, "<=", 4.0,
            "largest VmHWM of the master pid over the pile-up runs, MiB",
            fmt="%.2f MiB", why_na=skipped.get("gpupool-run"))
    pm = res.get("pool_map")
    if pm:
        add("pool_map one-item round trip <= 1.2x raw pipe ping-pong",
            med(pm["roundtrip"]["pinned"]["pool_over_pipe"]), "<=", 1.2,
            "median of per-block ratios, all on one CPU",
            context="%.2fx the raw socketpair ping-pong" %
            med(pm["roundtrip"]["pinned"]["pool_over_sock"]))
        top = str(max(int(k) for k in pm["trivial"]["by_n"]))
        m = pm["trivial"]["by_n"][top].get("map")
        g = pm["trivial"]["by_n"][top]["gpupool"]
        rb = pm["trivial"]["by_n"][top].get("raw-batch")
        for k, what in (("gpupool", "pool_map"),
                        ("gpupool-bufs", "gp_pool_map into the caller's "
                         "buffers")):
            m = pm["trivial"]["by_n"][top].get("map")
            g = pm["trivial"]["by_n"][top].get(k)
            if g is None:
                continue
            gm = pair_ratios_of(pm["trivial"], top, k, "map")
            grb = pair_ratios_of(pm["trivial"], top, k, "raw-batch")
            rb = pm["trivial"]["by_n"][top].get("raw-batch")
            add("%s trivial items >= 2x Pool.map (default chunks), N=%s"
                % (what, top), gm, ">=", 2.0,
                "median of per-round items/s ratios",
                context=m and "%s items/s against %s%s" % (
                    fmt_si(g["items_per_s"]), fmt_si(m["items_per_s"]),
                    "; %.2fx raw pipes with 1,024 items a message, %s "
                    "items/s" % (grb, fmt_si(rb["items_per_s"]))
                    if rb and grb else ""))
        mi = pm["payload"].get(str(MIB), {})
        for k, key, what in (
                ("gpupool", "gpupool_over_memcpy",
                 "pool_map (a fresh malloc per result)"),
                ("gpupool-bufs", "bufs_over_memcpy",
                 "gp_pool_map into the caller's buffers"),
                ("gpupool-view", "view_over_memcpy",
                 "gp_pool_run, results read in done() where they lie")):
            add("%s: 1 MiB items echoed by 4 workers >= 0.15x memcpy "
                "bandwidth" % what, med(mi.get(key)), ">=", 0.15,
                "median of per-round ratios of MB/s (each way) to "
                "memcpy MB/s of 1 MiB buffers, one thread", fmt="%.3f",
                why_na=None if mi.get(key) else "no 1 MiB run",
                context=mi.get("memcpy_gb_per_s") and
                mi["impls"].get(k) and "%.0f MB/s each way "
                "against memcpy %.1f GB/s" % (
                    med(mi["impls"][k]["mb_per_s"]),
                    med(mi["memcpy_gb_per_s"])))
        for order in ("given", "lpt"):
            s = pm["skewed"]["orders"][order]["impls"]["gpupool"]
            add("pool_map skewed makespan <= 1.05x greedy ideal (%s order)"
                % order, med(s["over_ideal"]), "<=", 1.05,
                "median over rounds")
    py = res.get("python")
    if py or res.get("python_skipped"):
        na = res.get("python_skipped")
        tr = py and py["trivial"]
        top = tr and str(max(int(k) for k in tr["by_n"]))
        bk, m = best_peer(tr and tr["by_n"][top])
        g = tr and tr["by_n"][top]["gpupool"]
        add("python: gpupool.Pool.map >= 1.5x the best of multiprocessing, "
            "ProcessPoolExecutor, loky, mpire (x*2, N=%s)" % (
                fmt_n(top) if top else "10^6"),
            m and med(m["gpupool_over"]), ">=", 1.5,
            "median of per-round items/s ratios against the fastest peer",
            why_na=na, context=m and "%s items/s against %s (%s)" % (
                fmt_si(g["items_per_s"]), fmt_si(m["items_per_s"]),
                tr["labels"][bk]))
        rt = py and py["roundtrip"]["impls"]
        bk, p = best_peer(rt)
        add("python: one item in flight, gpupool >= 3x the best of "
            "ProcessPoolExecutor, Pool.apply, loky, mpire",
            p and med(p["gpupool_over"]), ">=", 3.0,
            "median of per-round ratios of round trips/s against the "
            "fastest peer, gpupool's submit().result()", why_na=na,
            context=p and p["us"] and rt["gpupool"]["us"] and
            "%.0f us against %.0f us a round trip (%s)%s" % (
                med(rt["gpupool"]["us"]), med(p["us"]),
                py["roundtrip"]["labels"][bk],
                "; gpupool Pool.map(f, [x]): %.0f us, %.2fx PPE" % (
                    med(rt["gpupool-map1"]["us"]),
                    med(py["roundtrip"]["map1_over_ppe"]))
                if rt.get("gpupool-map1") and
                py["roundtrip"].get("map1_over_ppe") else ""))
        st = py and py.get("start", {}).get("rows", {})
        for imp in ("none", "numpy", "jax"):
            r = st and st.get(imp)
            if st and not r:
                continue
            add("python: workers started clean: first result <= 1.2x "
                "loky's (4 workers, after import %s)" % imp,
                r and r.get("clean_vs_loky") and med(r["clean_vs_loky"]),
                "<=", 1.2, "median of per-round ratios of the time from "
                "before the pool to the first result", why_na=na,
                context=r and r.get("loky") and "%.3f s against %.3f s%s" % (
                    med(r["gpupool-clean"]["first_s"]),
                    med(r["loky"]["first_s"]),
                    "; forked: %.3f s" % med(r["gpupool-fork"]["first_s"])
                    if r.get("gpupool-fork") else ""))
        for key, label in (("trivial", "items/s, trivial items"),
                           ("roundtrip", "round trips/s, one item in "
                            "flight")):
            x = py and (py[key]["by_n"][top] if key == "trivial" else
                        py[key]["impls"])
            c = x and x.get("gpupool-clean")
            add("python: workers started clean within 10%% of forked "
                "ones (%s)" % label,
                c and c.get("gpupool_over") and med(c["gpupool_over"]),
                "<=", 1.1, "median of per-round ratios forked / clean",
                fmt="%.2fx", why_na=na)
        wm = py and py["warm"]
        w = wm and wm["impls"].get("pool")
        add("python: warm pool's overhead <= 1.5x one set-up (%s)" % (
            "%d tasks, %g s set-up, 4 slots" % (wm["tasks"], wm["setup_s"])
            if wm else "100 tasks, 0.5 s set-up"),
            w and med(w["overhead_setups"]), "<=", 1.5,
            "median over rounds of (wall - ideal work time) / set-up",
            fmt="%.2f set-ups", why_na=na,
            context=wm and "; ".join(
                "%s: %.1f set-ups" % (wm["labels"][k],
                                      med(x["overhead_setups"]))
                for k, x in wm["impls"].items()
                if k != "pool" and x["overhead_setups"]) +
            " (tasks x set-up / slots = %.1f set-ups)%s" % (
                wm["tasks"] / wm["slots"], "; %d CPUs: %d imports at once "
                "take at least %d set-ups of wall" % (
                    wm["cpus"], wm["slots"], -(-wm["slots"] // wm["cpus"]))
                if wm.get("cpus") and wm["cpus"] < wm["slots"] and
                wm.get("setup", "").startswith("import") else ""))
    ck = py and py.get("checkpoint")
    if ck or res.get("python_skipped"):
        na = res.get("python_skipped")
        k = ck and ck["kinds"]
        for kind in ("ms", "ms1"):
            row = k and k[kind]
            add("python: checkpoint= costs <= 10%% on 1 ms items (%s)" % (
                "default chunks" if kind == "ms" else "chunksize=1"),
                row and med(row["ckpt_cost"]), "<=", 1.10,
                "median of per-round wall ratios with / without", why_na=na,
                fmt="%.3fx", context=row and "%s items/s with, %s without "
                "(N=%s)" % (fmt_si(row["impls"]["ckpt"]["items_per_s"]),
                            fmt_si(row["impls"]["plain"]["items_per_s"]),
                            fmt_n(row["n"])))
        row = k and k["trivial"]
        add("python: trivial items with checkpoint= >= multiprocessing "
            "Pool.map without (x*2, N=%s)" % fmt_n(row["n"] if row else
                                                   10**6),
            row and med(row["ckpt_over_mp"]), ">=", 1.0,
            "median of per-round items/s ratios", why_na=na, context=row and
            "%s items/s against %s; without a checkpoint %s (%.2fx the "
            "cost with)" % (
                fmt_si(row["impls"]["ckpt"]["items_per_s"]),
                fmt_si(row["impls"]["mp"]["items_per_s"]),
                fmt_si(row["impls"]["plain"]["items_per_s"]),
                med(row["ckpt_cost"]) or 0))
        row = k and k["read1"]
        add("python: reading %s one-item records <= 0.1x computing them "
            "(1 ms items, 4 workers)" % fmt_n(row["n"] if row else 10**6),
            row and row["read_over_compute"], "<=", 0.1,
            "median read time over N / (1 ms items/s with a checkpoint)",
            why_na=na, fmt="%.3fx", context=row and row["compute_s"] and
            "%.2f s to read, %.0f s to compute; peak RSS grew %.0f MiB "
            "(a plain map of %s trivial items: %.0f MiB)" % (
                med(row["impls"]["resume"]["secs"]), row["compute_s"],
                med(row["impls"]["resume"]["rss_growth_mib"]) or 0,
                fmt_n(k["trivial"]["n"]),
                med(k["trivial"]["impls"]["plain"]["rss_growth_mib"]) or 0))
    mp = res.get("mpi")
    if mp:
        add("rank 0 dispatches >= 20,000 tasks/s over MPI (3 local ranks)",
            med(mp["mpi_per_s"]), ">=", 20000.0,
            "median over rounds of null tasks run by ranks 1-2 per second",
            fmt="%.0f tasks/s", context="%s tasks/s in all, rank 0's own "
            "slots included" % fmt_si(mp["per_s"]))
    return out


# ---------------------------------------------------------------------------
# Machine, versions, build.

def machine_info():
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    distro = None
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    mem = read_kb("/proc/meminfo", "MemTotal:")
    virt = first_line(sh(["systemd-detect-virt"]))
    return {"cpu": cpu, "cores": os.cpu_count(),
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "kernel": platform.release(), "distro": distro,
            "mem_gib": round(mem / MIB, 1) if mem else None,
            "virt": virt if virt and virt != "none" else None,
            "hostname": platform.node()}


def versions(build, runners):
    v = {"python": platform.python_version(),
         "glibc": os.confstr("CS_GNU_LIBC_VERSION")}
    gpr = os.path.join(build, "src", "cli", "gpupool-run")
    v["gpupool"] = first_line(sh([gpr, "--version"])) if \
        os.access(gpr, os.X_OK) else None
    if v["gpupool"] is None:
        try:
            with open(os.path.join(REPO, "include", "gpupool.h")) as f:
                for line in f:
                    if "#define GP_VERSION" in line:
                        v["gpupool"] = "libgpupool " + line.split()[2]
        except OSError:
            pass
    v["gcc"] = first_line(sh(["gcc", "--version"]))
    v["meson"] = first_line(sh(["meson", "--version"]))
    v["xargs"] = first_line(sh(["xargs", "--version"]))
    v["parallel"] = first_line(sh(["parallel", "--version"])) if \
        shutil.which("parallel") else None
    v["tsp"] = first_line(sh(["tsp", "-V"])) if shutil.which("tsp") else None
    v["dash"] = None
    dpkg = sh(["dpkg-query", "-W", "-f", "${Version}", "dash"])
    if dpkg and "no packages" not in dpkg:
        v["dash"] = "dash " + dpkg
    return v


def git_info():
    rev = first_line(sh(["git", "-C", REPO, "rev-parse", "HEAD"]))
    st = sh(["git", "-C", REPO, "status", "--porcelain"])
    return {"revision": rev,
            "describe": first_line(sh(["git", "-C", REPO, "log", "-1",
                                       "--format=%h %s"])),
            "dirty_paths": len(st.splitlines()) if st else 0}


def build_info(build):
    bt = None
    try:
        with open(os.path.join(build, "meson-info",
                               "intro-buildoptions.json")) as f:
            for o in json.load(f):
                if o.get("name") == "buildtype":
                    bt = o.get("value")
    except (OSError, ValueError):
        pass
    return {"dir": build, "buildtype": bt}


def do_build(build):
    if not os.path.exists(os.path.join(build, "build.ninja")):
        log("meson setup %s (release)" % build)
        subprocess.run(["meson", "setup", build, REPO,
                        "-Dbuildtype=release"], check=True,
                       stdout=subprocess.DEVNULL)
    targets_ = ["bench/bench_pool", "bench/spawn4", "bench/stamp"]
    r = subprocess.run(["ninja", "-C", build] + targets_ +
                       ["src/cli/gpupool-run"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        log("ninja: gpupool-run did not build; building the rest")
        subprocess.run(["ninja", "-C", build] + targets_, check=True,
                       stdout=subprocess.DEVNULL)
    # Only in a build with MPI.
    subprocess.run(["ninja", "-C", build, "bench/bench_ranks"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def best_peer(impls):
    """(key, entry) of the peer gpupool leads by least (the fastest peer)
    among impls' non-gpupool entries with a ratio; (None, None) if none."""
    peers = [(med(v["gpupool_over"]), k, v) for k, v in (impls or {}).items()
             if not k.startswith("gpupool") and v.get("gpupool_over") and
             med(v["gpupool_over"]) is not None]
    if not peers:
        return None, None
    _, k, v = min(peers, key=lambda x: x[0])
    return k, v


def install_peers(notes):
    argv = ["apt-get", "install", "-y", "parallel", "task-spooler"]
    if os.geteuid() != 0:
        argv = ["sudo", "-n"] + argv
    log(" ".join(argv))
    r = subprocess.run(argv, capture_output=True, text=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if r.returncode != 0:
        notes.append("--install-peers failed (exit %d): %s" % (
            r.returncode, r.stderr.strip()[-300:]))


# ---------------------------------------------------------------------------
# Reports.

def fmt_s(s, f="%.3f", scale=1.0):
    if not s:
        return "-"
    if s["n"] == 1:
        return f % (s["median"] * scale)
    return (f + " [" + f + "-" + f + "]") % (
        s["median"] * scale, s["min"] * scale, s["max"] * scale)


def fmt_m(s, f="%.2f", scale=1.0):
    return f % (s["median"] * scale) if s else "-"


def trivial_table(tr, absent):
    """The markdown rows of a trivial-items measurement: items/s and how
    much faster gpupool is, per implementation and N; absent where an
    implementation did not run at that N."""
    L = ["| implementation | " + " | ".join(
        "N=%s | gpupool faster by" % fmt_n(n) for n in tr["ns"]) + " |",
        "| --- |" + " --- | --- |" * len(tr["ns"])]
    for k, lab in tr["labels"].items():
        row = "| %s |" % lab
        for n in tr["ns"]:
            x = tr["by_n"].get(str(n), {}).get(k)
            row += (" %s | %s |" % (fmt_si(x["items_per_s"]),
                                    fmt_m(x["gpupool_over"]))
                    if x else " %s | |" % absent)
        L.append(row)
    return L


def markdown(res):
    L = []
    m, v, g = res["machine"], res["versions"], res["git"]
    L.append("Measured %s on %s (%d cores%s), %s, kernel %s; %s, %s, "
             "Python %s. Revision %s%s. Build: %s. Load average before/after:"
             " %s / %s.%s" % (
                 res["date"], m["cpu"], m["cores"],
                 ", " + m["virt"] if m.get("virt") else "", m["distro"],
                 m["kernel"], v.get("gpupool") or "gpupool ?", v.get("gcc"),
                 v["python"], (g["revision"] or "?")[:12],
                 " (+%d uncommitted paths)" % g["dirty_paths"]
                 if g["dirty_paths"] else "", res["build"]["buildtype"],
                 " ".join("%.2f" % x for x in res["load_before"]),
                 " ".join("%.2f" % x for x in res["load_after"]),
                 " **--quick run.**" if res["quick"] else ""))
    L.append("")
    L.append("Command: `%s`" % res["command"])
    L.append("")
    L.append("Figures are medians over interleaved rounds, [min-max] beside "
             "them; ratios are medians of per-round ratios.")
    L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | measured | status | context |")
    L.append("| --- | --- | --- | --- |")
    for t in res["targets"]:
        L.append("| %s | %s | **%s** | %s |" % (
            t["target"], t["shown"], t["status"], t.get("context") or ""))
    L.append("")
    cr = res.get("command_runner")
    if cr:
        labels = {k: x["label"] for k, x in cr["runners"].items()}
        for key, w in cr["workloads"].items():
            L.append("### Command runner: %s, 4 slots" % w["title"])
            L.append("")
            L.append("| runner | wall s | x raw bound | gpupool-run faster by"
                     " | CPU s | overhead ms/task | launch to 1st task ms |")
            L.append("| --- | --- | --- | --- | --- | --- | --- |")
            for name, x in w["runners"].items():
                L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    labels[name], fmt_s(x["wall_s"]), fmt_m(x["vs_raw"]),
                    fmt_m(x["gpupool_speedup"]), fmt_m(x["cpu_s"]),
                    fmt_m(x["overhead_ms_per_task"], "%.3f"),
                    fmt_m(x["latency_ms"])))
            L.append("")
            L.append("Overhead per task = (wall - ideal) / N x 4, ideal = "
                     "%.2f s. Rounds: %d." % (w["ideal_s"], w["rounds"]))
            L.append("")
        sk = cr["skewed"]
        L.append("### Command runner: %d skewed sleeps (sum %.2f s, longest "
                 "%.2f s)" % (sk["n"], sk["total_s"], sk["max_s"]))
        L.append("")
        gi, lp = sk["orders"]["given"], sk["orders"]["lpt"]
        L.append("| runner | given order: makespan / ideal | longest first: "
                 "makespan / ideal |")
        L.append("| --- | --- | --- |")
        for name in gi["runners"]:
            L.append("| %s | %s | %s |" % (
                labels[name], fmt_s(gi["runners"][name]["over_ideal"]),
                fmt_s(lp["runners"][name]["over_ideal"])))
        L.append("")
        L.append("Ideal: greedy list scheduling on 4 slots with no "
                 "overhead, %.3f s given, %.3f s longest first. %s." % (
                     gi["ideal_s"], lp["ideal_s"], sk["dist"]))
        L.append("")
        fp = cr["footprint"]
        L.append("### Command runner: pile-up and footprint (%s)" %
                 fp["task"])
        L.append("")
        hdr = "| runner |"
        sep = "| --- |"
        for nn in fp["ns"]:
            hdr += " N=%d: peak processes | RSS sum MiB | PSS sum MiB |" % nn
            sep += " --- | --- | --- |"
        L.append(hdr + " master peak RSS MiB |")
        L.append(sep + " --- |")
        for name, per in fp["runners"].items():
            row = "| %s |" % labels[name]
            hw = []
            for nn in fp["ns"]:
                x = per.get(str(nn), {})
                row += " %s | %s | %s |" % (
                    x.get("peak_procs", "-"),
                    "%.1f" % (x["peak_rss_kb"] / 1024)
                    if x.get("peak_rss_kb") else "-",
                    "%.1f" % (x["peak_pss_kb"] / 1024)
                    if x.get("peak_pss_kb") else "-")
                if x.get("master_hwm_kb"):
                    hw.append(x["master_hwm_kb"])
            L.append(row + " %s |" % ("%.2f" % (max(hw) / 1024) if hw
                                      else "-"))
        L.append("")
        L.append("Processes: the runner and everything under it (the "
                 "harness is a child subreaper, so task-spooler's detached "
                 "server and clients count). RSS sums count shared pages once"
                 " per process; PSS divides them. Master: VmHWM of the "
                 "runner's own pid (task-spooler: its server).")
        L.append("")
        bad = {k: x for k, x in cr["validation"].items() if not x["ok"]}
        L.append("Validation (%s): %s" % (
            "every runner ran each task once, at most 4 at a time, GPU-aware"
            " runners never gave one GPU to two running tasks",
            "all passed" if not bad else "; ".join(
                "%s: %s" % (k, ", ".join(x["problems"]))
                for k, x in bad.items())))
        L.append("")
    pm = res.get("pool_map")
    if pm:
        rt = pm["roundtrip"]
        L.append("### pool_map: one item in flight (round trip, us)")
        L.append("")
        L.append("| placement | raw pipe | raw socketpair | gpupool | "
                 "gpupool / pipe | gpupool / socketpair |")
        L.append("| --- | --- | --- | --- | --- | --- |")
        for mode in ("pinned", "free"):
            x = rt[mode]
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                "all on one CPU" if mode == "pinned" else "scheduler's "
                "choice", fmt_s(x["raw_pipe_us"], "%.2f"),
                fmt_s(x["raw_sock_us"], "%.2f"), fmt_s(x["pool_us"], "%.2f"),
                fmt_m(x["pool_over_pipe"]), fmt_m(x["pool_over_sock"])))
        L.append("")
        L.append("All on one CPU: the process pinned to one CPU, the worker "
                 "created with GP_POOL_NO_BIND so it keeps that affinity; "
                 "this row is the software cost of each path and carries the"
                 " target. Scheduler's choice: each block runs with both ends"
                 " on one CPU (a few us) or on two (a cross-CPU wakeup, tens "
                 "of us in a VM), so its medians and ratios are bimodal and "
                 "only informative.")
        L.append("")
        tr = pm["trivial"]
        L.append("### pool_map: trivial items (x * 2 on an int), 4 workers, "
                 "items/s")
        L.append("")
        L += trivial_table(tr, "skipped")
        L.append("")
        sk = []
        for k, per in tr["skipped"].items():
            for n, why in per.items():
                sk.append("%s at N=%s (%s)" % (tr["labels"][k], fmt_n(n),
                                                why))
        if sk:
            L.append("Skipped: " + "; ".join(sk) + ".")
            L.append("")
        s = pm["skewed"]
        L.append("### pool_map: %d skewed items (sum %.2f s, longest %.3f s)"
                 % (s["n"], s["total_s"], s["max_s"]))
        L.append("")
        L.append("| implementation | given order: makespan / ideal | longest "
                 "first: makespan / ideal |")
        L.append("| --- | --- | --- |")
        names = {"gpupool": "pool_map", "map": "Pool.map (default chunks)",
                 "imap_unordered": "Pool.imap_unordered"}
        for k in s["orders"]["given"]["impls"]:
            L.append("| %s | %s | %s |" % (
                names[k], fmt_s(s["orders"]["given"]["impls"][k]
                                ["over_ideal"]),
                fmt_s(s["orders"]["lpt"]["impls"][k]["over_ideal"])))
        L.append("")
        L.append("Ideal: greedy list scheduling on 4 workers, %.3f s given, "
                 "%.3f s longest first. %s." % (
                     s["orders"]["given"]["ideal_s"],
                     s["orders"]["lpt"]["ideal_s"], s["dist"]))
        L.append("")
        L.append("### pool_map: payload sweep (each item echoed back)")
        L.append("")
        L.append("| item size | N | pool_map items/s | pool_map MB/s | "
                 "caller's buffers MB/s | views in done() MB/s | "
                 "memcpy GB/s | pool_map x memcpy | "
                 "caller's buffers x memcpy | views x memcpy | "
                 "Pool.map items/s | Pool.map MB/s | pool_map faster by |")
        L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | "
                 "--- | --- | --- | --- |")
        skipped = []
        for size, x in pm["payload"].items():
            g, mp_ = x["impls"]["gpupool"], x["impls"].get("map")
            gb = x["impls"].get("gpupool-bufs", {})
            gv = x["impls"].get("gpupool-view", {})
            L.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | "
                     "%s | %s | %s |" % (
                fmt_bytes(int(size)), x["n"], fmt_si(g["items_per_s"]),
                fmt_m(g["mb_per_s"], "%.1f"),
                fmt_m(gb.get("mb_per_s"), "%.1f"),
                fmt_m(gv.get("mb_per_s"), "%.1f"),
                fmt_m(x.get("memcpy_gb_per_s"), "%.1f"),
                fmt_m(x.get("gpupool_over_memcpy"), "%.3f"),
                fmt_m(x.get("bufs_over_memcpy"), "%.3f"),
                fmt_m(x.get("view_over_memcpy"), "%.3f"),
                fmt_si(mp_ and mp_["items_per_s"]),
                fmt_m(mp_ and mp_["mb_per_s"], "%.1f"),
                fmt_m(x["gpupool_over_map"])))
            if x.get("map_skipped"):
                skipped.append("Pool.map at %s (%s)" % (
                    fmt_bytes(int(size)), x["map_skipped"]))
        L.append("")
        if skipped:
            L.append("Skipped: " + "; ".join(skipped) + ".")
            L.append("")
        L.append("MB/s: item bytes sent per second (10^6 B), each way. "
                 "memcpy: this machine's `memcpy` of buffers of the item's "
                 "size, one thread, the same two buffers each copy, warmed "
                 "before the clock starts, run in the same rounds (see "
                 "bench/README.md); x memcpy: the "
                 "median of the per-round ratios of MB/s to "
                 "memcpy MB/s. pool_map: each result a fresh malloc "
                 "(its pages faulted in as it is copied); caller's "
                 "buffers: gp_pool_map with GP_POOL_OUT_BUFFERS into "
                 "buffers written once before the clock starts, as a "
                 "pipeline that reuses its buffers has them; views in "
                 "done(): gp_pool_run with GP_POOL_OUT_VIEW, each result "
                 "compared in full with the input inside done(), where it "
                 "lies, inside the clock; gp_pool_run streams one item a "
                 "dispatch, so its small items are slow for that reason, "
                 "not the view's. Items and "
                 "results of 64 bytes or more travel through the worker's "
                 "shared region, smaller ones through the pipe.")
        L.append("")
    py = res.get("python")
    if py:
        L.append("### Python: gpupool.Pool against Python's pools, 4 workers")
        L.append("")
        pr = py["probe"]
        L.append("Interpreter: %s (Python %s), gpupool from %s; %s." % (
            py["interpreter"], pr.get("python"), pr.get("gpupool_file"),
            py["how"]) + (" Not measured: %s." % "; ".join(
                "%s (%s)" % kv for kv in py["missing"].items())
                if py["missing"] else ""))
        L.append("")
        tr = py["trivial"]
        L.append("#### Python: trivial items (x * 2 on an int), items/s")
        L.append("")
        L += trivial_table(tr, "-")
        L.append("")
        L.append("Each run is a fresh process that creates its pool, warms it"
                 " up with a map of 64 items, then times one map of N items "
                 "and checks the results. Default chunks: len / (4 x workers)"
                 " items a message. Rounds: %d." % (
                     res["config"]["py_triv_rounds"]))
        L.append("")
        rt = py["roundtrip"]
        L.append("#### Python: one item in flight (%s sequential round trips)"
                 % fmt_n(rt["n"]))
        L.append("")
        L.append("| call | us a round trip | round trips/s | "
                 "gpupool faster by |")
        L.append("| --- | --- | --- | --- |")
        for k, lab in rt["labels"].items():
            x = rt["impls"][k]
            L.append("| %s | %s | %s | %s |" % (
                lab, fmt_s(x["us"], "%.0f"), fmt_si(x["per_s"]),
                fmt_m(x["gpupool_over"])))
        L.append("")
        L.append("gpupool faster by: median of per-round ratios against "
                 "gpupool's submit().result(). Rounds: %d." % (
                     res["config"]["py_rt_rounds"]))
        L.append("")
        wm = py["warm"]
        L.append("#### Python: warm workers against a process per task (%d "
                 "tasks, %g s set-up, %g s work, 4 slots)" % (
                     wm["tasks"], wm["setup_s"], wm["work_s"]))
        L.append("")
        L.append("| how | wall s | overhead s | overhead in set-ups |")
        L.append("| --- | --- | --- | --- |")
        for k, lab in wm["labels"].items():
            x = wm["impls"][k]
            L.append("| %s | %s | %s | %s |" % (
                lab, fmt_s(x["wall_s"], "%.2f"), fmt_s(x["overhead_s"],
                                                       "%.2f"),
                fmt_m(x["overhead_setups"], "%.1f")))
        L.append("")
        L.append("Overhead = wall - ideal, ideal = tasks x work / 4 = %.2f s "
                 "(no set-up at all). Set-up once per worker costs %.2f s of "
                 "wall (1 set-up); once per task, %.2f s (tasks x set-up / 4"
                 " = %g set-ups). The set-up is `%s` (its cost measured in a "
                 "fresh interpreter each run), standing for `import torch` + "
                 "a CUDA context. Wall: from before the pool (or "
                 "Manager, or gpupool-run) is created to after everything is "
                 "reaped. Rounds: %d." % (
                     wm["ideal_s"], wm["setup_per_worker_s"],
                     wm["setup_per_task_s"], wm["tasks"] / wm["slots"],
                     wm.get("setup", "a sleep"),
                     res["config"]["py_warm_rounds"]))
        L.append("")
        L += py_payload_table(py.get("payload"), res["config"])
        L += py_start_table(py.get("start"), res["config"])
        L += py_checkpoint_table(py.get("checkpoint"), res["config"])
    mp = res.get("mpi")
    if mp:
        L.append("### gpupool-run across %d MPI ranks x %d fake GPUs: "
                 "dispatch (%s null tasks)" % (mp["ranks"],
                                               mp["gpus_per_rank"],
                                               fmt_n(mp["n"])))
        L.append("")
        L.append("| tasks/s in all | tasks/s over MPI (ranks 1-%d) | "
                 "s a round |" % (mp["ranks"] - 1))
        L.append("| --- | --- | --- |")
        L.append("| %s | %s | %s |" % (fmt_si(mp["per_s"]),
                                       fmt_si(mp["mpi_per_s"]),
                                       fmt_s(mp["secs"])))
        L.append("")
        L.append("bench_ranks: gpupool-run's own run (tasks file, windows, "
                 "protocol, each rank's pool) with workers that answer each "
                 "task at once; no joblog. A ceiling on dispatch, not a task "
                 "rate (docs/cluster.md).")
        L.append("")
    if res["notes"]:
        L.append("### Notes")
        L.append("")
        for n in res["notes"]:
            L.append("- " + n)
        L.append("")
    return tree_relative("\n".join(L))


def tree_relative(text):
    """Paths in the tree as paths from its root (build-bench/src/...): the
    page is published, and the machine that measured it has its own place
    for the tree (issue 21)."""
    return text.replace(REPO + os.sep, "")


def fmt_n(n):
    n = int(n)
    e = len(str(n)) - 1
    return "10^%d" % e if n == 10 ** e else str(n)


def py_start_table(st, cfg):
    """The start-up rows: seconds to a ready pool and to its first
    result, after each import in the caller."""
    if not st or not st["rows"]:
        return []
    L = ["#### Python: start-up, 4 workers (seconds)", "",
         "| caller imported | pool | ready | first result | "
         "clean / loky | clean / forked |", "| --- | --- | --- | --- | "
         "--- | --- |"]
    for imp, row in st["rows"].items():
        for k, lab in st["labels"].items():
            if k not in row:
                continue
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                imp, lab, fmt_s(row[k]["startup_s"], "%.3f"),
                fmt_s(row[k]["first_s"], "%.3f"),
                fmt_m(row.get("clean_vs_loky")) if k == "gpupool-clean"
                else "", fmt_m(row.get("clean_vs_fork"))
                if k == "gpupool-clean" else ""))
    L += ["", "Each run is a fresh process: the import (numpy with a "
          "matrix product, so OpenBLAS's threads run; jax with one "
          "computation, so XLA runs: forked workers would hang, and are "
          "not measured), then the clock, around the pool's creation "
          "(ready: gpupool's returns when every worker is; loky starts "
          "its workers at the first submit) and submit(f, 1).result(). "
          "Ratios: medians of per-round ratios of the first result's "
          "time. Rounds: %d." % cfg["py_start_rounds"], ""]
    return L


def py_payload_table(pl, cfg):
    """The Python section's big items, as markdown lines ([] if none)."""
    if not pl:
        return []
    L = ["#### Python: big items echoed, MB/s each way", "",
         "| items | n | %s | %s | gpupool / Pool.map |" % (
             pl["labels"]["gpupool"], pl["labels"]["map"]),
         "| --- | --- | --- | --- | --- |"]
    for x in pl["rows"]:
        L.append("| %s of %s | %d | %s | %s | %s |" % (
            x["kind"], fmt_bytes(x["size"]), x["n"],
            fmt_s(x["impls"]["gpupool"]["mb_per_s"], "%.0f"),
            fmt_s(x["impls"]["map"]["mb_per_s"], "%.0f"),
            fmt_m(x["gpupool_over_map"])))
    L += ["", "Each run is a fresh process: the pool created and warmed up, "
          "n distinct items made (bytes, or numpy uint8 arrays), then one "
          "map of fn(x) = x timed; every result checked after. MB/s: item "
          "bytes (10^6 B) a second, each way. gpupool sends a numpy "
          "array's memory out of band (pickle protocol 5), copied once "
          "into the item each way (docs/python.md). Rounds: %d%s." % (
              cfg["py_payload_rounds"], "" if "numpy" in pl["kinds"] else
              "; numpy not importable (--install-peers installs it)"), ""]
    return L


def py_checkpoint_table(ck, cfg):
    """The Python section's checkpoint rows, as markdown lines."""
    if not ck:
        return []
    L = ["#### Python: map(..., checkpoint=PATH), 4 workers", "",
         "| workload | N | how | items/s | s | peak RSS growth MiB | "
         "file MB | wall / without |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, x in ck["kinds"].items():
        for k, v in x["impls"].items():
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                x["title"], fmt_n(x["n"]), ck["labels"][k],
                fmt_si(v["items_per_s"]), fmt_s(v["secs"], "%.3f"),
                fmt_m(v["rss_growth_mib"], "%.1f"),
                fmt_m(v["file_bytes"], "%.1f", 1e-6)
                if med(v["file_bytes"]) else "-",
                fmt_m(x.get("ckpt_cost"), "%.3f") if k == "ckpt" else ""))
    r1 = ck["kinds"].get("read1")
    L += ["", "Each run is a fresh process: the pool created and warmed up, "
          "then one map timed; every result checked. The checkpoint is a new"
          " file in a fresh directory of TMPDIR (synced when the map "
          "returns, and every second while it runs). *resume*: the "
          "checkpoint written first by a child process (not timed, and "
          "not in this process's heap), then the timed map reads every "
          "result from it and runs nothing. *read1*: %s records of one "
          "item each, written by the checkpoint's own writer as a map with "
          "chunksize=1 writes them; computing them at the 1 ms rate "
          "measured above with a checkpoint would take %s s. Peak RSS "
          "growth: over the timed call (what the returned list and the "
          "reading took). Wall / without: median of per-round ratios. "
          "Rounds: %d." % (
              fmt_n(r1["n"]) if r1 else "-", "%.0f" % r1["compute_s"]
              if r1 and r1.get("compute_s") else "-",
              cfg["py_ck_rounds"]), ""]
    return L


def fmt_si(s):
    if not s:
        return "-"
    x = s["median"]
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return "%.2f%s" % (x / div, unit)
    return "%.1f" % x


def fmt_bytes(b):
    for unit, div in (("MiB", MIB), ("KiB", 1024)):
        if b >= div and b % div == 0:
            return "%d %s" % (b // div, unit)
    return "%d B" % b


# ---------------------------------------------------------------------------
# The plot: panels of grouped horizontal bars, drawn with matplotlib when it
# is installed, else written as SVG by hand.

SHADES = {"gpupool-run": ("#b2182b", "#e0705a", "#f6b89c"),
          "spawn4": ("#4d4d4d", "#8c8c8c", "#c4c4c4"),
          None: ("#2166ac", "#4d97c8", "#9ecae1")}


def color_for(key, series_index):
    s = SHADES.get(key, SHADES[None])
    return s[min(series_index, len(s) - 1)]


def trivial_panel(title, tr):
    """A plot panel of a trivial-items measurement (pool_map's or the
    Python section's): items/s per implementation, one bar per N."""
    ns = [str(n) for n in tr["ns"]]
    return {"title": title,
            "unit": "items/s (log, higher is better)", "log": True,
            "series": ["N=%s" % fmt_n(n) for n in ns],
            "rows": [(lab_, [med((tr["by_n"].get(n, {}).get(k) or {})
                                 .get("items_per_s")) for n in ns],
                      "gpupool-run" if k == "gpupool" else
                      ("spawn4" if k.startswith("raw") else k))
                     for k, lab_ in tr["labels"].items()]}


def panels(res):
    """What the plot shows: a list of panels of grouped horizontal bars.
    rows: (label, value or [value per series], colour key)."""
    P = []
    cr = res.get("command_runner")
    if cr:
        lab = {k: x["label"] for k, x in cr["runners"].items()}
        names = list(lab)
        t = cr["workloads"]["true"]
        s = cr["workloads"]["sleep"]
        P.append({"title": "%s: wall / raw posix_spawn bound" % t["title"],
                  "unit": "x (lower is better)", "ref": 1.0,
                  "rows": [(lab[k], med(t["runners"][k]["vs_raw"]), k)
                           for k in names]})
        P.append({"title": "%s: CPU per task" % t["title"],
                  "unit": "ms user+sys, runner and tasks (lower is better)",
                  "rows": [(lab[k], med(t["runners"][k]["cpu_ms_per_task"]),
                            k) for k in names]})
        P.append({"title": "%s: overhead per task" % s["title"],
                  "unit": "ms, (wall - ideal) / N x 4 (lower is better)",
                  "rows": [(lab[k], med(s["runners"][k]
                                        ["overhead_ms_per_task"]), k)
                           for k in names]})
        P.append({"title": "launch -> first task starts",
                  "unit": "ms (lower is better)", "ref": 5.0,
                  "rows": [(lab[k], med(t["runners"][k]["latency_ms"]), k)
                           for k in names]})
        sk = cr["skewed"]["orders"]
        P.append({"title": "%d skewed tasks: makespan / ideal" %
                           cr["skewed"]["n"],
                  "unit": "x greedy list-scheduling ideal (1 = ideal)",
                  "ref": 1.0, "series": ["given order", "longest first"],
                  "rows": [(lab[k], [med(sk["given"]["runners"][k]
                                         ["over_ideal"]),
                                     med(sk["lpt"]["runners"][k]
                                         ["over_ideal"])], k)
                           for k in names]})
        fp = cr["footprint"]
        ns = [str(n) for n in fp["ns"]]
        P.append({"title": "pile-up: peak live processes",
                  "unit": "processes, runner's whole tree (log)",
                  "log": True, "series": ["N=%s" % n for n in ns],
                  "rows": [(lab[k], [fp["runners"][k].get(n, {})
                                     .get("peak_procs") for n in ns], k)
                           for k in names]})
        P.append({"title": "pile-up: peak memory (PSS sum)",
                  "unit": "MiB, runner's whole tree (log)", "log": True,
                  "series": ["N=%s" % n for n in ns],
                  "rows": [(lab[k], [(fp["runners"][k].get(n, {})
                                      .get("peak_pss_kb") or 0) / 1024 or None
                                     for n in ns], k) for k in names]})
        P.append({"title": "runner's own peak RSS (VmHWM)",
                  "unit": "MiB (lower is better)", "ref": 4.0,
                  "rows": [(lab[k], max([x.get("master_hwm_kb") or 0 for x in
                                         fp["runners"][k].values()]) / 1024
                            or None, k) for k in names]})
    pm = res.get("pool_map")
    if pm:
        P.append(trivial_panel("pool_map: trivial items (x*2), 4 workers",
                               pm["trivial"]))
        rt = pm["roundtrip"]
        P.append({"title": "pool_map: one item in flight, round trip",
                  "unit": "us (lower is better)",
                  "series": ["all on one CPU", "scheduler's choice"],
                  "rows": [(lab_, [med(rt["pinned"][k]), med(rt["free"][k])],
                            key) for k, lab_, key in (
                      ("raw_pipe_us", "raw pipe ping-pong", "spawn4"),
                      ("raw_sock_us", "raw socketpair ping-pong", "spawn4"),
                      ("pool_us", "pool_map (gp_pool_run, 1 worker)",
                       "gpupool-run"))]})
        sk = pm["skewed"]["orders"]
        names = {"gpupool": "pool_map", "map": "Pool.map (default chunks)",
                 "imap_unordered": "Pool.imap_unordered"}
        P.append({"title": "pool_map: %d skewed items: makespan / ideal" %
                           pm["skewed"]["n"],
                  "unit": "x greedy list-scheduling ideal (1 = ideal)",
                  "ref": 1.0, "series": ["given order", "longest first"],
                  "rows": [(names[k], [med(sk["given"]["impls"][k]
                                           ["over_ideal"]),
                                       med(sk["lpt"]["impls"][k]
                                           ["over_ideal"])],
                            "gpupool-run" if k == "gpupool" else k)
                           for k in sk["given"]["impls"]]})
        pl = pm["payload"]
        sizes = list(pl)
        P.append({"title": "pool_map: payload echoed, 4 workers",
                  "unit": "MB/s each way (log, higher is better)",
                  "log": True,
                  "series": [fmt_bytes(int(z)) for z in sizes],
                  "rows": [("pool_map", [med(pl[z]["impls"]["gpupool"]
                                             ["mb_per_s"]) for z in sizes],
                            "gpupool-run"),
                           ("gp_pool_map, caller's buffers",
                            [med(pl[z]["impls"].get("gpupool-bufs", {})
                                 .get("mb_per_s")) for z in sizes], "xargs"),
                           ("gp_pool_run, views in done()",
                            [med(pl[z]["impls"].get("gpupool-view", {})
                                 .get("mb_per_s")) for z in sizes],
                            "parallel"),
                           ("Pool.map (default chunks)",
                            [med(pl[z]["impls"].get("map", {})
                                 .get("mb_per_s")) for z in sizes], "map"),
                           ("memcpy (one thread)",
                            [(med(pl[z].get("memcpy_gb_per_s")) or 0) * 1e3
                             or None for z in sizes], "spawn4")]})
        if any(x.get("gpupool_over_memcpy") for x in pl.values()):
            P.append({"title": "pool_map: payload echoed / memcpy bandwidth",
                      "unit": "x memcpy of the same size (dashed: 0.15 at "
                              "1 MiB)", "ref": 0.15,
                      "rows": [(fmt_bytes(int(z)),
                                med(pl[z].get("gpupool_over_memcpy")),
                                "gpupool-run") for z in sizes]})
    py = res.get("python")
    if py:
        P.append(trivial_panel("Python: trivial items (x*2), 4 workers",
                               py["trivial"]))
        rt = py["roundtrip"]
        P.append({"title": "Python: one item in flight, round trip",
                  "unit": "us (lower is better)",
                  "rows": [(lab_, med(rt["impls"][k]["us"]),
                            "gpupool-run" if k.startswith("gpupool") else k)
                           for k, lab_ in rt["labels"].items()]})
        wm = py["warm"]
        P.append({"title": "Python: %d tasks, %g s set-up each, 4 slots" % (
                     wm["tasks"], wm["setup_s"]),
                  "unit": "overhead s = wall - ideal (dashed: 1.5 set-ups)",
                  "ref": 1.5 * wm["setup_s"],
                  "rows": [(lab_, med(wm["impls"][k]["overhead_s"]),
                            "gpupool-run" if k in ("pool", "run") else k)
                           for k, lab_ in wm["labels"].items()]})
        ck = py.get("checkpoint")
        if ck:
            kinds = [k for k in ("trivial", "ms", "ms1") if k in ck["kinds"]]
            P.append({"title": "Python: map with checkpoint= / without",
                      "unit": "x wall (dashed: 1.10; lower is better)",
                      "ref": 1.10,
                      "rows": [(ck["kinds"][k]["title"],
                                med(ck["kinds"][k].get("ckpt_cost")),
                                "gpupool-run") for k in kinds]})
        pl = py.get("payload")
        if pl:
            P.append({"title": "Python: big items echoed, 4 workers",
                      "unit": "MB/s each way (higher is better)",
                      "series": ["%s of %s" % (x["kind"],
                                               fmt_bytes(x["size"]))
                                 for x in pl["rows"]],
                      "rows": [(lab_, [med(x["impls"][k]["mb_per_s"])
                                       for x in pl["rows"]],
                                "gpupool-run" if k == "gpupool" else k)
                               for k, lab_ in pl["labels"].items()]})
    mp = res.get("mpi")
    if mp:
        P.append({"title": "gpupool-run, %d MPI ranks: dispatch" %
                           mp["ranks"],
                  "unit": "null tasks/s (higher is better)", "ref": 20000.0,
                  "rows": [("in all (rank 0's slots too)", med(mp["per_s"]),
                            "gpupool-run"),
                           ("over MPI (ranks 1-%d)" % (mp["ranks"] - 1),
                            med(mp["mpi_per_s"]), "gpupool-run")]})
    return P


def plot(res, path):
    P = panels(res)
    try:
        if os.environ.get("GPUPOOL_BENCH_SVG"):
            raise ImportError("GPUPOOL_BENCH_SVG is set")
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        svg_plot(res, P, path)
        return "hand-written SVG (matplotlib not importable)"
    plt.rcParams.update({"font.size": 8, "svg.fonttype": "none",
                         "svg.hashsalt": "gpupool-bench"})
    cols = 4
    rows = (len(P) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.2 * rows),
                             squeeze=False)
    for ax, p in zip(axes.flat, P):
        series = p.get("series", [None])
        labels = [r[0] for r in p["rows"]][::-1]
        h = 0.8 / len(series)
        vals_all = []
        for si, sname in enumerate(series):
            vals, colors, ys = [], [], []
            for i, r in enumerate(p["rows"][::-1]):
                v = r[1][si] if isinstance(r[1], list) else r[1]
                if not v:
                    continue
                vals.append(v)
                colors.append(color_for(r[2], si))
                ys.append(i - (si - (len(series) - 1) / 2) * h)
            vals_all += vals
            bars = ax.barh(ys, vals, height=h * 0.92, color=colors,
                           label=sname)
            for b, v in zip(bars, vals):
                ax.text(b.get_width(), b.get_y() + b.get_height() / 2,
                        " " + short(v), va="center", fontsize=6.5)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.set_title(p["title"], fontsize=8.5, loc="left")
        ax.set_xlabel(p["unit"], fontsize=7)
        if p.get("log"):
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(ticker.LogLocator(base=10))
            ax.xaxis.set_major_formatter(ticker.FuncFormatter(
                lambda v, _: short(v)))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
            if vals_all:
                ax.set_xlim(min(vals_all) / 2, max(vals_all) * 6)
        else:
            ax.set_xlim(0, max(vals_all + [p.get("ref") or 0]) * 1.22
                        if vals_all else 1)
        if p.get("ref"):
            ax.axvline(p["ref"], color="#333333", lw=0.7, ls="--")
        if series[0] is not None:
            ax.legend(fontsize=6.5, loc="best", framealpha=0.8)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    for ax in list(axes.flat)[len(P):]:
        ax.axis("off")
    m = res["machine"]
    fig.suptitle("gpupool against the alternatives - %s, %d cores, %s - %s%s"
                 "   (red: gpupool, grey: raw lower bounds, blue: others; "
                 "dashed: target or ideal)" % (
                     m["cpu"], m["cores"], m["distro"], res["date"],
                     " (--quick)" if res["quick"] else ""), fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return "matplotlib " + matplotlib.__version__


def short(v):
    if v < 0.1:
        return "%.3f" % v
    if v >= 1e6:
        return "%.1fM" % (v / 1e6)
    if v >= 1e4:
        return "%.0fk" % (v / 1e3)
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def svg_plot(res, P, path):
    """The same panels, as plain SVG, for machines without matplotlib."""
    import math
    cols, pw, ph, left = 4, 420, 300, 175
    rows = (len(P) + cols - 1) // cols
    W, H = cols * pw, rows * ph + 40
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="10">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>']
    m = res["machine"]
    o.append('<text x="10" y="22" font-size="14">gpupool against the '
             'alternatives - %s, %d cores, %s - %s%s (red: gpupool, grey: raw '
             'lower bounds, blue: others; dashed: target or ideal)</text>' % (
                 esc(m["cpu"]), m["cores"], esc(m["distro"]), res["date"],
                 " (--quick)" if res["quick"] else ""))
    for i, p in enumerate(P):
        x0, y0 = (i % cols) * pw, 40 + (i // cols) * ph
        o.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (
            x0 + 10, y0 + 14, esc(p["title"])))
        o.append('<text x="%d" y="%d" fill="#555">%s</text>' % (
            x0 + left, y0 + ph - 12, esc(p["unit"])))
        series = p.get("series", [None])
        vals = [v for r in p["rows"] for v in
                (r[1] if isinstance(r[1], list) else [r[1]]) if v]
        if not vals:
            continue
        vmax = max(vals + [p.get("ref") or 0])
        log_ = p.get("log")
        lo = 10 ** math.floor(math.log10(min(vals))) if log_ else 0
        span = pw - left - 60

        def X(v):
            if log_:
                return span * (math.log10(v) - math.log10(lo)) / max(
                    1e-9, math.log10(vmax * 1.05) - math.log10(lo))
            return span * v / (vmax * 1.05)
        n = len(p["rows"])
        rowh = (ph - 50) / n
        bh = rowh * 0.8 / len(series)
        for ri, r in enumerate(p["rows"]):
            y = y0 + 24 + ri * rowh
            o.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (
                x0 + left - 4, y + rowh / 2 + 3, esc(r[0])))
            for si in range(len(series)):
                v = r[1][si] if isinstance(r[1], list) else r[1]
                if not v:
                    continue
                by = y + rowh * 0.1 + si * bh
                o.append('<rect x="%d" y="%.1f" width="%.1f" height="%.1f" '
                         'fill="%s"/>' % (x0 + left, by, max(1, X(v)),
                                          bh * 0.92, color_for(r[2], si)))
                o.append('<text x="%.1f" y="%.1f" font-size="8">%s%s</text>'
                         % (x0 + left + X(v) + 3, by + bh * 0.7, short(v),
                            "" if series[0] is None else " (%s)" %
                            esc(series[si])))
        if p.get("ref"):
            rx = x0 + left + X(p["ref"])
            o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" '
                     'stroke="#333" stroke-dasharray="3,2"/>' % (
                         rx, y0 + 20, rx, y0 + ph - 28))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def publish(res, md, svg_path):
    """docs/benchmarks.md: replace what lies between the results markers;
    docs/benchmarks.svg: the plot."""
    doc = os.path.join(REPO, "docs", "benchmarks.md")
    shutil.copyfile(svg_path, os.path.join(REPO, "docs", "benchmarks.svg"))
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    with open(doc) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit("publish: %s has no %s ... %s markers" % (doc, begin,
                                                                   end))
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    body = "\n![gpupool benchmarks](benchmarks.svg)\n\n" + md + "\n"
    with open(doc, "w") as f:
        f.write(head + begin + "\n" + body + end + tail)
    log("published docs/benchmarks.md and docs/benchmarks.svg")
    # The docs quote this run: their figures follow it (bench/quotes.py).
    if subprocess.run([sys.executable, os.path.join(REPO, "bench",
                                                    "quotes.py"),
                       "--write", REPO]).returncode != 0:
        log("publish: some quoted figures are lost: see above")


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller N and fewer rounds: under a minute")
    ap.add_argument("--install-peers", action="store_true",
                    help="apt-get install -y parallel task-spooler first")
    ap.add_argument("--out", default=os.path.join(HERE, "results"),
                    help="output directory (default bench/results)")
    ap.add_argument("--build", default=os.path.join(REPO, "build-bench"),
                    help="meson build directory (default build-bench/; "
                         "set up with -Dbuildtype=release if missing)")
    ap.add_argument("--no-build", action="store_true",
                    help="use --build as it is; do not run meson/ninja")
    ap.add_argument("--sections", default="cmd,pool,mpi,python",
                    help="some of cmd, pool, mpi, python (default: all)")
    ap.add_argument("--python", metavar="PYTHON",
                    default=os.environ.get("GPUPOOL_BENCH_PYTHON"),
                    help="python section: an interpreter that imports "
                         "gpupool (default: $GPUPOOL_BENCH_PYTHON, else "
                         "pip install this tree into BUILD/pyvenv)")
    ap.add_argument("--publish", action="store_true",
                    help="copy the table and plot into docs/benchmarks.*")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only redraw results.md and the plot from a "
                         "results.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    md_path = os.path.join(a.out, "results.md")
    svg_path = os.path.join(a.out, "results.svg")
    if a.render:
        with open(a.render) as f:
            res = json.load(f)
        res["plot"] = plot(res, svg_path)
        md = markdown(res)
        with open(md_path, "w") as f:
            f.write(md)
        if a.publish:
            publish(res, md, svg_path)
        return 0

    cfg = QUICK if a.quick else FULL
    build = os.path.abspath(a.build)
    notes = NOTES
    if not become_subreaper():
        notes.append("could not become a child subreaper: detached "
                     "processes (task-spooler's server) are not counted")
    if a.install_peers:
        install_peers(notes)
    if not a.no_build:
        do_build(build)
    if build_info(build)["buildtype"] not in ("release", None):
        notes.append("the build in %s is %s, not release" % (
            build, build_info(build)["buildtype"]))
    work = tempfile.mkdtemp(prefix="gpupool-bench-")
    res = {"schema": 1, "quick": a.quick,
           "command": "python3 bench/run.py" + " ".join(
               [""] + [x for x in sys.argv[1:]]),
           "date": datetime.datetime.now().astimezone().strftime(
               "%Y-%m-%d %H:%M %Z"),
           "machine": machine_info(), "git": git_info(),
           "build": build_info(build), "config": cfg,
           "load_before": list(os.getloadavg()), "notes": notes}
    sections = a.sections.split(",")
    try:
        runners, skipped = make_runners(build, work, notes)
        res["versions"] = versions(build, runners)
        res["peers"] = {r.name: {"status": "ran", "label": r.label,
                                 "note": r.note} for r in runners}
        res["peers"].update({k: {"status": "skipped", "note": v}
                             for k, v in skipped.items()})
        if "cmd" in sections:
            cmd_section(cfg, runners, build, work, res, notes)
        if "pool" in sections:
            pool_section(cfg, build, work, res, notes)
        if "mpi" in sections:
            mpi_section(cfg, build, work, res, notes)
        if "python" in sections:
            python_section(cfg, build, work, res, notes, a.python,
                           a.install_peers)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = list(os.getloadavg())
    res["duration_s"] = round(time.monotonic() - T0, 1)
    res["targets"] = targets(res, skipped)
    res["plot"] = plot(res, svg_path)
    md = markdown(res)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(md_path, "w") as f:
        f.write(md)
    print(md)
    print()
    for t in res["targets"]:
        print("%-4s  %-70s %s%s" % (t["status"], t["target"], t["shown"],
                                    "  (%s)" % t["context"]
                                    if t.get("context") else ""))
    log("done in %.0f s: %s" % (res["duration_s"], a.out))
    if a.publish:
        publish(res, md, svg_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
