"""peers.py: the command runners measured against each other (gpupool-run,
the raw posix_spawn bound, xargs, GNU parallel, task-spooler, Python's
pools), how one runs on a tasks file, and how the measurement programs'
JSON lines are read."""
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

from common import HERE, NOTES, SLOTS, log, sh
from supervise import Sampler, kill_tree, reap_all


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
        # Host-wide claims on, as by default, in a claims directory of
        # its own: the machine to itself (issue 34), whatever else runs.
        runners.append(Runner(
            "gpupool-run", "gpupool-run --fake-gpus 4",
            lambda t: [gpr, "--fake-gpus", str(SLOTS), "--quiet", t],
            env={"GPUPOOL_CLAIMS": os.path.join(work, "claims")}))
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


def write_tasks(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def json_lines(argv, timeout=300, preexec=None, env=None):
    """The JSON lines a measurement program prints; [] (and a note) when it
    fails, so one broken measurement does not lose the others. env: its
    environment (default base_env())."""
    what = " ".join(os.path.basename(a) if i == 0 else a
                    for i, a in enumerate(argv))
    try:
        r = subprocess.run(argv, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=preexec,
                           env=env if env is not None else base_env())
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


def one(argv, preexec=None):
    x = json_lines(argv, preexec=preexec)
    return x[0] if x else {}


def pip_install(py, *pkgs):
    """pip install pkgs into interpreter py (the bench's own venv): None,
    or why it failed."""
    r = subprocess.run([py, "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", *pkgs],
                       capture_output=True, text=True, cwd="/")
    return None if r.returncode == 0 else (
        r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][-200:]


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


# The integrations section's peers (issue 36), as pip names them: Hydra and
# its joblib launcher, and joblib (whose "loky" backend is joblib's own copy,
# joblib.externals.loky: the loky package is not needed for it).
INTEGRATION_PEERS = ["hydra-core", "hydra-joblib-launcher", "joblib"]


def install_integration_peers(py, missing, notes):
    """--install-peers for the integrations section: pip installs the
    missing ones of INTEGRATION_PEERS into the bench's own venv, never
    into a given --python (a note says so). Returns whether any
    install ran."""
    if not missing:
        return False
    if not os.path.dirname(os.path.dirname(py)).endswith("pyvenv"):
        notes.append("integrations: %s not installed in %s; --install-"
                     "peers installs only into the bench's own venv" % (
                         ", ".join(missing), py))
        return False
    log("integrations: pip install %s into %s" % (" ".join(missing), py))
    err = pip_install(py, *missing)
    if err:
        notes.append("integrations: pip install %s failed: %s" % (
            " ".join(missing), err))
    return True
