"""One gpupool.Pool over every rank of an MPI job (issue 27).

Each test runs a small user script of python/tests/ranks/ as a user
would: `mpirun --oversubscribe -np 3 PYTHON -m gpupool SCRIPT` (3 local
ranks, 2 fake GPUs each), the single-node Slurm's srun, or no launcher.
The scripts write what they saw under $GP_DIR (out.json, and side files
their items append to when they start); the test reads them.

Every process of a job carries $GP_RANKS_MARK (a fresh token per test) in
its environment, so that what is left of a job, orphans included, is
found in /proc; each test ends by SIGKILLing whatever still carries its
token. Waits poll for a condition under a generous bound (WAIT): never a
sleep as the only synchronisation. Skips when mpirun is missing or the
installed package has no MPI process (gpupool/_mpiproc).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from test_checkpoint import covered  # item -> records covering it
from test_gpus import FAKE_NVML, needs_fake_nvml  # the build's fake NVML

import gpupool

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "test", "stress"))
from stresslib import children, comm, stat  # noqa: E402 (/proc, as mpi.py)

SCRIPTS = os.path.join(HERE, "ranks")
SLURM_SH = os.path.join(HERE, "..", "..", "test", "mpi", "slurm.sh")
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(gpupool.__file__)))
MPIPROC = os.path.join(os.path.dirname(os.path.abspath(gpupool.__file__)),
                       "_mpiproc")
PY = sys.executable
RANKS = 3
GPUS = 2
WAIT = 120      # seconds: a bound on a wait, never a pace
GONE = 15       # seconds: what a job may take to leave no process
LOST_END = 30   # seconds: from a rank's loss to the end of the job
HOST = socket.gethostname()


def mpirun(*extra):
    """mpirun for 3 local ranks; skips without mpirun or without the
    package's MPI process."""
    m = shutil.which("mpirun")
    if m is None:
        pytest.skip("mpirun not found (Debian: openmpi-bin)")
    if not os.path.exists(MPIPROC):
        pytest.skip("the installed gpupool has no MPI process (%s): it was "
                    "built without MPI (Debian: libopenmpi-dev)" % MPIPROC)
    cmd = [m, "--oversubscribe", "-np", str(RANKS)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd + list(extra)


def script(name, *args):
    return [PY, "-m", "gpupool", os.path.join(SCRIPTS, name)] + list(args)


# -- processes ---------------------------------------------------------------

def _read(path, mode="rb"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def environ(pid):
    e = _read("/proc/%d/environ" % pid)
    return e.split(b"\0") if e else []


def marked(token):
    """The live processes (not zombies) with GP_RANKS_MARK=token in their
    environment: (pid, comm, state)."""
    needle = ("GP_RANKS_MARK=%s" % token).encode()
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        pid = int(p)
        if needle in environ(pid):
            st = stat(pid)
            if st is not None and st[0] not in "ZX":
                out.append((pid, comm(pid), st[0]))
    return out


def wait_for(what, cond, proc=None, wait=WAIT):
    """Poll cond() until true; fail after `wait` s, or once proc ended."""
    end = time.monotonic() + wait
    while True:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            pytest.fail("the job ended (exit %s) before %s"
                        % (proc.returncode, what))
        if time.monotonic() > end:
            pytest.fail("no %s within %d s" % (what, wait))
        time.sleep(0.02)


def lines(path):
    """The whole lines of a side file, split into words."""
    d = _read(path, "r") or ""
    return [ln.split() for ln in d.split("\n")[:-1]]


class Job:
    """A test's directory, token and environment; run() and start() its
    commands in a session of their own."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gpupool-ranks.")
        self.token = uuid.uuid4().hex
        # None of gpupool's variables; a claims directory of the job's
        # own (usable by every user, as the default is): the ranks' pools
        # never wait for a pool another test of the session keeps.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("GPUPOOL_", "OMPI_", "PMIX_",
                                         "SLURM_"))}
        claims = self.path("claims")
        os.mkdir(claims)
        os.chmod(claims, 0o1777)
        self.env.update(GP_DIR=self.dir, GP_RANKS_MARK=self.token,
                        GPUPOOL_CLAIMS=claims, PYTHONPATH=PKG_DIR,
                        PYTHONUNBUFFERED="1")
        self.procs = []

    def path(self, name):
        return os.path.join(self.dir, name)

    def start(self, cmd):
        self.out = open(self.path("stdout"), "wb")
        self.err = open(self.path("stderr"), "wb")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.out,
                             stderr=self.err, env=self.env,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=WAIT):
        """Wait for p; (rc, stdout, stderr). A hang is a failure."""
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            left = marked(self.token)
            self.kill()
            pytest.fail("hang: %r did not end within %d s; its processes "
                        "then (pid, comm, state): %r; stdout: %s; stderr: "
                        "%s" % (p.args, timeout, left, self.stdout()[-1000:],
                                self.stderr()[-3000:]))
        self.out.close()
        self.err.close()
        return p.returncode, self.stdout(), self.stderr()

    def run(self, cmd, timeout=WAIT):
        return self.finish(self.start(cmd), timeout)

    def stdout(self):
        return (_read(self.path("stdout")) or b"").decode(errors="replace")

    def stderr(self):
        return (_read(self.path("stderr")) or b"").decode(errors="replace")

    def result(self):
        d = _read(self.path("out.json"), "r")
        assert d is not None, "the script wrote no out.json; stderr: %s" \
            % self.stderr()[-3000:]
        return json.loads(d)

    def no_leftovers(self, what, wait=GONE):
        """Within `wait` s, no process of the job is left anywhere."""
        end = time.monotonic() + wait
        while True:
            left = marked(self.token)
            if not left:
                return
            if time.monotonic() > end:
                pytest.fail("%s: processes left after %d s (pid, comm, "
                            "state): %r" % (what, wait, left))
            time.sleep(0.05)

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        for pid, _, _ in marked(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def job():
    j = Job()
    try:
        yield j
    finally:
        j.close()


def rank_pids(mp):
    """{rank: pid} of the Python ranks mpirun (pid mp) started: its
    children named python*, by OMPI_COMM_WORLD_RANK."""
    def find():
        out = {}
        for c in children(mp):
            if not (comm(c) or "").startswith("python"):
                continue
            for v in environ(c):
                if v.startswith(b"OMPI_COMM_WORLD_RANK="):
                    out[int(v.split(b"=")[1])] = c
        return out if len(out) == RANKS else None
    end = time.monotonic() + WAIT
    while True:
        r = find()
        if r:
            return r
        assert time.monotonic() < end, "mpirun's children: %r" % [
            (c, comm(c)) for c in children(mp)]
        time.sleep(0.02)


def running(path):
    """{rank: {pid}} of the runs recorded in a side file "i rank pid"."""
    out = {}
    for w in lines(path):
        out.setdefault(w[1], set()).add(int(w[2]))
    return out


def all_busy(path):
    """Every worker of every rank has started an item."""
    r = running(path)
    return len(r) == RANKS and all(len(v) == GPUS for v in r.values()) \
        and r


# -- the tests ---------------------------------------------------------------

def test_surfaces_over_three_ranks(job):
    """One Pool(fake_gpus=2) in a script under mpirun -np 3 spans the 3
    ranks: size() is 6; info() has 6 workers with "rank" and "host" keys,
    two per rank; map of 10^5 items returns x*x in order; every rank's
    workers (all 6) run items and see GPUPOOL_RANK (their rank's, as
    info() says) and GPUPOOL_RANKS=3; the initializer runs once in each
    of the 6 workers; imap, imap_unordered, submit, apply_async with its
    callback, starmap and map_async return the right values. The script's
    main part runs on rank 0 only (GPUPOOL_RANK=0 there); ranks 1 and 2
    import the script as __mp_main__; mpirun exits 0."""
    t = time.monotonic()
    rc, out, err = job.run(mpirun() + script("basic.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    print("basic.py: %.1f s; map of 10^5 items %.2f s"
          % (time.monotonic() - t, o["map_s"]))
    assert out.count("MAIN ran on rank") == 1 and "MAIN ran on rank 0" in \
        out, out
    assert (o["script_rank"], o["script_ranks"]) == ("0", "3")
    imports = {(w[0], w[1]) for w in lines(job.path("imports"))}
    assert {("__mp_main__", "1"), ("__mp_main__", "2")} <= imports, imports
    mains = [w[:2] for w in lines(job.path("imports")) if w[0] == "__main__"]
    assert mains == [["__main__", "0"]], imports
    assert o["size"] == RANKS * GPUS
    info = o["info"]
    assert len(info) == RANKS * GPUS, info
    assert sorted(w["rank"] for w in info) == [0, 0, 1, 1, 2, 2], info
    assert all(isinstance(w["rank"], int) and w["host"] == HOST
               for w in info), info
    assert o["map_len"] == 10 ** 5 and o["map_bad"] == [], o["map_bad"]
    assert o["where_order"]
    rank_of = {w["pid"]: str(w["rank"]) for w in info}
    seen = {}
    for rank, nranks, pid in o["where"]:
        assert nranks == str(RANKS)
        assert rank_of.get(pid) == rank, "worker %d saw GPUPOOL_RANK=%s; " \
            "info(): %r" % (pid, rank, info)
        seen.setdefault(rank, set()).add(pid)
    assert sorted(seen) == ["0", "1", "2"], seen
    assert set().union(*seen.values()) == set(rank_of), \
        "workers that ran items: %r; info(): %r" % (seen, info)
    init = lines(job.path("init"))
    assert sorted(int(w[2]) for w in init) == sorted(rank_of), \
        "initializer calls (tag, rank, pid): %r" % init
    assert all(rank_of[int(w[2])] == w[1] for w in init), init
    for k in ("imap", "imap_unordered", "submit", "apply_async",
              "callbacks", "starmap", "map_async"):
        assert o[k] is True, k


def test_worker_crash_on_rank_2(job):
    """A worker of rank 2 dies in an item (os._exit(3) in a map with
    return_exceptions=True, SIGKILL in a submit): only that item fails,
    with gpupool.WorkerCrashed (exit status 3, signal 9); every other
    result is right; the pool goes on, rank 2 (its worker replaced)
    included."""
    rc, out, err = job.run(mpirun() + script("crash.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    for kind, why in (("exit", ("exitcode", 3)), ("kill", ("signal", 9))):
        claim = _read(job.path("claim-" + kind), "r")
        assert claim, "no %s item ran on rank 2" % kind
        i = int(claim)
        bad = o[kind + "_bad"]
        assert [b[0] for b in bad] == [i], \
            "%s on rank 2 in item %d; failed: %r" % (kind, i, bad)
        _, name, crashed, msg, exitcode, sig = bad[0]
        assert crashed, bad
        assert {"exitcode": exitcode, "signal": sig}[why[0]] == why[1], bad
    assert o["after"] is True
    assert o["after_ranks"] == ["0", "1", "2"], o["after_ranks"]


def test_timeout_on_rank_2(job):
    """timeout= acts on the rank that runs the item: an item hanging on
    rank 2 under Pool(timeout=1) ends as gpupool.Timeout, alone (every
    other result is right), well before the hour it would sleep; the pool
    goes on, rank 2 (its worker replaced) included."""
    rc, out, err = job.run(mpirun() + script("timeout.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    claim = _read(job.path("claim"), "r")
    assert claim, "no item ran on rank 2"
    assert o["bad"] == [[int(claim), "Timeout", True]], o["bad"]
    assert o["secs"] < 60, o["secs"]
    assert o["after"] == ["0", "1", "2"], o["after"]
    job.no_leftovers("after the script")


@pytest.mark.parametrize("sig,retries", [("SIGKILL", 1), ("SIGKILL", 0),
                                         ("SIGSTOP", 1)])
def test_rank_lost_mid_map(job, sig, retries):
    """Rank 2's process SIGKILLed (dead) or SIGSTOPped (alive but silent)
    mid-map under mpirun --enable-recovery, Pool(retries=R,
    rank_timeout=2), while every worker of every rank runs an item.
    retries=1: the map completes with every result right, the items rank
    2 held run again on ranks 0 and 1 (and only those run twice), and
    the job says "rank 2 (HOST)" is lost. retries=0: the items rank 2
    held fail with gpupool.RankLost (a PoolError) whose message names
    "rank 2 (HOST)" and says it was lost; they did not run elsewhere;
    every other result is right. Either way the pool goes on with ranks 0
    and 1 (a later map runs there only), the script ends normally, and
    the job ends with it (mpirun exits 0 within 30 s of the signal)
    leaving no process, the stopped rank's included."""
    p = job.start(mpirun("--enable-recovery") +
                  script("ranklost.py", str(retries)))
    ranks = rank_pids(p.pid)
    busy = wait_for("every worker busy", lambda: all_busy(job.path("runs")),
                    p)
    os.kill(ranks[2], getattr(signal, sig))
    at_kill = lines(job.path("runs"))
    held = {int(w[0]) for w in at_kill if w[1] == "2"}
    with open(job.path("go"), "w"):
        pass
    t = time.monotonic()
    # The script is over some 3 s after the signal (rank_timeout, the
    # retries, a short map): the job ends with it.
    rc, out, err = job.finish(p, LOST_END)
    print("ended %.1f s after the %s, exit %d; workers %r"
          % (time.monotonic() - t, sig, rc, busy))
    assert "MAP ENDED" in out, err[-3000:]
    assert rc == 0, "mpirun: exit %d (the script ended normally): %s" \
        % (rc, err[-3000:])
    # Rank 0 ended the job without MPI_Abort's banner, the PMIx log
    # message that Open MPI 4.1's mpirun can crash on (exit -11 in CI).
    assert "MPI_ABORT was invoked" not in err, err[-3000:]
    o = job.result()
    assert "raised" not in o, o.get("raised")
    res = o["results"]
    assert len(res) == 60
    runs = {}
    for w in lines(job.path("runs")):
        runs.setdefault(int(w[0]), []).append(w[1])
    # Items rank 2 held but had not started yet never ran with retries=0.
    failed = {i for i, v in enumerate(res) if v != 3 * i}
    assert set(runs) | failed == set(range(60)), "items never run: %r" % (
        set(range(60)) - set(runs) - failed)
    later = [w for w in lines(job.path("runs"))[len(at_kill):]
             if w[1] == "2"]
    if sig == "SIGKILL":
        assert not later, "rank 2 ran items after the %s: %r" % (sig, later)
    else:
        # A stopped rank's workers are not stopped: they go on with the
        # items already handed to them (a batch), whose results never
        # reach rank 0; each of those runs again elsewhere.
        assert all(any(r != "2" for r in runs[int(w[0])]) for w in later), \
            "rank 2's late runs: %r; runs: %r" % (later, runs)
    if retries:
        assert res == [3 * i for i in range(60)], res
        assert "rank 2 (%s)" % HOST in out + err, err[-3000:]
        for i, rs in runs.items():
            assert len(rs) <= 2 and sum(r != "2" for r in rs) <= 1 and \
                (sig == "SIGSTOP" or all(r == "2" for r in rs[:-1])), \
                "item %d ran on ranks %r" % (i, rs)
        assert held <= {i for i, rs in runs.items()
                        if rs != ["2"] * len(rs)}, \
            "items held by rank 2 at its death: %r; runs: %r" % (held, runs)
    else:
        assert held and held <= failed, (held, failed)
        for i in failed:
            name, lost, poolerr, msg = res[i]
            assert lost and poolerr, res[i]
            assert "rank 2 (%s)" % HOST in msg and "lost" in msg, msg
            assert runs.get(i, []) in ([], ["2"]), \
                "failed item %d ran on %r" % (i, runs[i])
    assert len(o["after"]) == 300 and set(o["after"]) <= {"0", "1"}, \
        sorted(set(o["after"]))
    job.no_leftovers("after the job")


@pytest.mark.parametrize("to", ["rank 0", "mpirun", "mpirun's group"])
def test_ctrl_c(job, to):
    """SIGINT mid-map, while every worker of every rank runs an item that
    would never end. To rank 0's process: the script gets
    KeyboardInterrupt (it prints INTERRUPTED and exits 5), and mpirun
    exits 5, the script's status. To mpirun, or to its process group (a
    terminal's Ctrl-C): mpirun exits non-zero. Each time, within 15 s of
    the signal no process of the job (rank, MPI process, worker) is left
    on any rank."""
    p = job.start(mpirun() + script("sigint.py"))
    ranks = rank_pids(p.pid)
    busy = wait_for("every worker busy", lambda: all_busy(
        job.path("runs")), p)
    # What the leftover check looks for is there while the job runs.
    pids = {x[0] for x in marked(job.token)}
    workers = set().union(*busy.values())
    assert set(ranks.values()) | workers <= pids, (ranks, busy, pids)
    t = time.monotonic()
    if to == "rank 0":
        os.kill(ranks[0], signal.SIGINT)
    elif to == "mpirun":
        os.kill(p.pid, signal.SIGINT)
    else:
        os.killpg(p.pid, signal.SIGINT)
    rc, out, err = job.finish(p, GONE + 30)
    took = time.monotonic() - t
    job.no_leftovers("after SIGINT to %s" % to, max(1, GONE - took))
    print("SIGINT to %s: exit %d, nothing left %.1f s after it"
          % (to, rc, time.monotonic() - t))
    assert "MAP ENDED" not in out
    if to == "rank 0":
        assert "INTERRUPTED" in out, err[-3000:]
        assert rc == 5, "exit %d: %s" % (rc, err[-3000:])
    else:
        assert rc != 0, err[-3000:]
    assert took < GONE, "mpirun took %.1f s to end" % took


@pytest.mark.parametrize("victim", ["mpirun", "every process"])
def test_checkpoint_killed_then_rerun(job, victim):
    """map(..., checkpoint=PATH) over 3 ranks SIGKILLed midway (items from
    1000 of 2000 cannot end in that run): mpirun alone (the ranks then
    end by themselves), or every process of the job at once (as when the
    allocation dies: in-flight chunks are lost). No process of the job is
    left; PATH records some items, each once; the rerun completes with
    every result right, running every item not recorded (on every rank)
    and none of those recorded."""
    ck = job.path("ck")
    side = job.path("side")
    n = 2000
    p = job.start(mpirun() + script("ckpt.py", ck))
    ranks = rank_pids(p.pid)
    wait_for("300 items started", lambda: len(lines(side)) >= 300, p)
    if victim == "mpirun":
        p.kill()
    else:
        # Ranks first (rank 0 writes PATH), then whatever is left.
        first = [pid for _, pid in sorted(ranks.items())]
        end = time.monotonic() + WAIT
        while first or marked(job.token):
            assert time.monotonic() < end, marked(job.token)
            for pid in first or [x[0] for x in marked(job.token)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            first = []
            time.sleep(0.01)
    rc, out, err = job.finish(p)
    assert rc == -signal.SIGKILL or victim != "mpirun", rc
    job.no_leftovers("after mpirun was SIGKILLed")
    first = covered(ck)
    assert first and set(first.values()) == {1}, first
    assert len(first) < n
    before = len(lines(side))
    with open(job.path("go"), "w"):
        pass
    rc, out, err = job.run(mpirun() + script("ckpt.py", ck))
    assert rc == 0 and out == "done True\n", (rc, out, err[-3000:])
    again = lines(side)[before:]
    rerun = {int(w[0]) for w in again}
    assert not rerun & set(first), "recorded items ran again: %r" % sorted(
        rerun & set(first))[:20]
    assert rerun | set(first) == set(range(n)), "items never run: %r" % \
        sorted(set(range(n)) - rerun - set(first))[:20]
    assert {w[1] for w in again} == {"0", "1", "2"}
    assert covered(ck) == dict.fromkeys(range(n), 1)
    print("recorded before the kill: %d items; the rerun ran %d"
          % (len(first), len(rerun)))
    job.no_leftovers("after the rerun")


def test_srun(job):
    """Under the throwaway single-node Slurm (test/mpi/slurm.sh, as
    root): `srun -n 3 --mpi=pmix PYTHON -m gpupool SCRIPT` runs the map
    correctly across the 3 ranks: a pool of 6 workers, every result
    right, every rank's workers took part, the script on rank 0."""
    if os.geteuid() != 0:
        pytest.skip("the throwaway Slurm needs root")
    if not os.path.exists(MPIPROC):
        pytest.skip("the installed gpupool has no MPI process (%s)"
                    % MPIPROC)
    if not os.path.exists(SLURM_SH):
        pytest.skip("no %s (not run from the source tree)" % SLURM_SH)
    rc, out, err = job.run([SLURM_SH, "srun", "-n", str(RANKS),
                            "--mpi=pmix"] + script("small.py"))
    if rc == 77:
        pytest.skip("slurm.sh: %s" % err.strip())
    assert rc == 0, err[-3000:]
    o = job.result()
    assert (o["script_rank"], o["size"], o["ok"]) == ("0", 6, True), o
    assert o["ranks"] == ["0", "1", "2"] and o["nranks"] == ["3"], o
    job.no_leftovers("after srun")


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_big_items(job, method):
    """Items and results of 1 to 3 MiB (bytes, and numpy arrays where
    numpy is installed) cross ranks whole: every result of a map over 3
    ranks is its item reversed, and every rank ran some. On ranks 1 and 2
    the workers read an item that came through the in ring where MPI put
    it, on rank 0 where rank 0 pickled it, in its out ring (the pool's
    extern mapping, GP_REC_EXT): forked ones in the mapping they inherit,
    clean ones (spawn) mapping its memfd, read only either way."""
    job.env["GPUPOOL_START_METHOD"] = method
    rc, out, err = job.run(mpirun() + script("big.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    assert o["ok"], o
    assert o["ranks"] == ["0", "1", "2"], o
    assert o["ring_ro"] == [["0", "ro"], ["1", "ro"], ["2", "ro"]], o
    job.no_leftovers("after the script")


def _rings(job, mib, share=True):
    """ranks/ring.py with rings of mib MiB (None: the default): every
    result right, a retry after a crash included, and every ring empty
    at the end, rank 0's (its sends finished, the items it pickled there
    gone, the ranks that read them there done with them) and each other
    rank's (its extents given back, a canceled map's queue too). The 3
    ranks share a host: with rings and share, ranks 1-2 read the items
    rank 0 pickled in its out ring there (by reference), else MPI
    carries them."""
    job.env["GPUPOOL_TEST_RING_USED"] = "1"
    job.env["GPUPOOL_RANKS_SHARE"] = "1" if share else "0"
    if mib is not None:
        job.env["GPUPOOL_RANKS_RING"] = str(mib)
    rc, out, err = job.run(mpirun() + script("ring.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    assert o["echo"] and o["after"], o
    assert o["ranks"] == ["0", "1", "2"], o
    assert o["failed"] == "on rank 2", o
    assert os.path.exists(job.path("claim")), "no worker crashed on rank 2"
    assert o["rsize"] == (64 if mib is None else mib) << 20, o
    assert o["used0"] == 0, o
    # Rank 0 pickles a big chunk into its out ring and sends it from
    # there when the ring has room (2 MiB has for some 1-2 MiB items).
    assert (o["in_place"] > 0) == (mib != 0), o
    assert (o["by_ref"] > 0) == (mib != 0 and share), o
    # (The ranks' lines may interleave on mpirun's stderr.)
    used = dict(re.findall(r"gpupool: rank (\d+): ring used (\d+)", err))
    assert used == {"1": "0", "2": "0"}, err[-3000:]
    job.no_leftovers("after the script")


def test_rings_carry_big_items_and_are_given_back(job):
    _rings(job, None)


def test_small_rings_mix_rings_and_the_socket(job):
    """2 MiB rings: a 1-2 MiB item takes the ring when one has room and
    the socket when not, in one map."""
    _rings(job, 2)


def test_no_rings(job):
    _rings(job, 0)


def test_rings_through_mpi_when_not_shared(job):
    """GPUPOOL_RANKS_SHARE=0: ranks on rank 0's host get its big items
    through MPI, ring to ring, as ranks elsewhere do."""
    _rings(job, None, share=False)


def test_small_rings_through_mpi_when_not_shared(job):
    _rings(job, 2, share=False)


def test_ring0_is_mapped_only_when_it_is_rank_0s(tmp_path):
    """map_ring0() maps the memfd a ring_id() names, read only, and
    nothing else: a pid and fd that hold another file, another boot's
    ring, a pid not there, or sharing off all say False (the rank then
    gets its items through MPI)."""
    from gpupool import _gpupool, _link
    size = 1 << 16
    fd = os.memfd_create("gpupool-ring")
    os.ftruncate(fd, 2 * size)
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.fstat(fd)
        good = {"pid": os.getpid(), "fd": fd, "size": size,
                "boot": _link._boot_id(), "dev": st.st_dev,
                "ino": st.st_ino}
        bad = [dict(good, fd=other), dict(good, ino=st.st_ino + 1),
               dict(good, boot="another"), dict(good, pid=2 ** 22 + 1),
               dict(good, size=4 * size), None]
        for rid in bad:
            link = _link.Link()
            link.share = True
            assert not link.map_ring0(rid), rid
            assert link.ring0 is None
        link = _link.Link()
        assert not link.map_ring0(good)  # sharing off (share_on() no)
        link.share = True
        try:
            assert link.map_ring0(good)
            os.pwrite(fd, b"seen", 100)
            e = link.ref_extent(100, 4)
            assert bytes(e) == b"seen"
            with pytest.raises(TypeError):
                link.ring0[0:1] = b"x"  # read only
            del e
            assert link.ref_freed == [100]
            assert link.map_ring0(good) and not link.map_ring0(
                dict(good, ino=0))  # one ring0 a rank
        finally:
            _gpupool.ring_extern(None)
            link.close()
    finally:
        os.close(fd)
        os.close(other)


def test_ref_items_are_held_till_the_rank_is_done(monkeypatch):
    """Rank 0 keeps an item it sent by reference taken in its out ring,
    whatever else lets it go (its result came, its map ended), until
    that rank's REFFREE says the rank is done with it: only then can
    the ring give those bytes to another item."""
    from gpupool import _link
    size = 1 << 20
    fd = os.memfd_create("gpupool-ring")
    os.ftruncate(fd, 2 * size)
    link = _link.Link()
    link.ringfd = fd
    link._map_rings(fd, size)
    sent = []
    monkeypatch.setattr(link, "_frame", lambda *a: sent.append(a))
    try:
        item = link.arena(256 << 10)
        assert item is not None and link.is_arena(item)
        link.send_ref(2, item, 7, 41)
        t, peer, rec = sent[-1]
        pool, i, off, k = _link.REF.unpack(rec)
        assert (t, peer, pool, i, k) == (_link.TASKREF, 2, 7, 41, 256 << 10)
        del item  # the Cluster's last reference: its result came
        assert link.ring_used() > 0
        link._deliver([], _link.REFFREE, 1, _link._OFF.pack(off))
        assert link.ring_used() > 0  # another rank's word changes nothing
        link._deliver([], _link.REFFREE, 2, _link._OFF.pack(off))
        assert link.ring_used() == 0
        assert link.arena(256 << 10) is not None
    finally:
        link.ring = None
        link.close()


def test_bad_share_setting_is_said(job):
    """GPUPOOL_RANKS_SHARE other than 0 or 1: the job ends (255) saying
    why, before any script runs."""
    job.env["GPUPOOL_RANKS_SHARE"] = "yes"
    rc, out, err = job.run(mpirun() + script("ring.py"))
    assert rc == 255, err[-3000:]
    assert "GPUPOOL_RANKS_SHARE='yes': 1" in err, err[-3000:]
    assert not os.path.exists(job.path("out.json"))


def test_bad_ring_size_is_said(job):
    """GPUPOOL_RANKS_RING that is no number of MiB: the job ends (255)
    saying why, before any script runs."""
    job.env["GPUPOOL_RANKS_RING"] = "lots"
    rc, out, err = job.run(mpirun() + script("ring.py"))
    assert rc == 255, err[-3000:]
    assert "GPUPOOL_RANKS_RING='lots': not a number of MiB" in err, \
        err[-3000:]
    assert not os.path.exists(job.path("out.json"))
    job.no_leftovers("after the job")


@needs_fake_nvml
def test_busy_gpus_per_rank(job):
    """gpus="free" and its thresholds act on every rank, each on its own
    machine (a fake NVML state per rank): rank 0 has both GPUs free, rank
    1 has GPU 1 used by a process not ours, rank 2 has 2 of 8 GiB of each
    GPU used by others (25%). Pool(gpus="free", busy_pct=50) is 5 workers,
    rank 1's on fake0 only, and items run on those 5 and no other GPU;
    Pool(gpus="free") (10%) cannot start on rank 2: InitError naming rank
    2, its host and why, and nothing is left."""
    for r, state in enumerate([
            "gpu - - 8G 0 0\ngpu - - 8G 0 0\n",
            "gpu - - 8G 0 0\ngpu - - 8G 3G 50\nproc 1 1 3G\n",
            "gpu - - 8G 2G 0\ngpu - - 8G 2G 0\n"]):
        with open(job.path("nvml.%d" % r), "w") as f:
            f.write(state)
    job.env["GPUPOOL_NVML"] = FAKE_NVML
    rc, out, err = job.run(mpirun() + script("busy.py"))
    assert rc == 0, err[-3000:]
    o = job.result()
    mine = [["0", "fake0"], ["0", "fake1"], ["1", "fake0"], ["2", "fake0"],
            ["2", "fake1"]]
    assert o["free"]["size"] == 5, o
    assert o["free"]["workers"] == mine, o
    assert o["free"]["ran"] == mine, o
    s = o["strict"]
    assert s is not None and s["init"], o
    assert "rank 2 (%s)" % HOST in s["msg"] and "no free GPU" in s["msg"], s
    assert "others use 2.0 of 8.0 GiB" in s["msg"], s
    assert "rank 1" not in s["msg"], s
    job.no_leftovers("after the script")


def test_no_launcher(job):
    """Without a launcher, `PYTHON -m gpupool SCRIPT ARGS` runs SCRIPT here
    as __main__ with sys.argv [SCRIPT, ARGS...]: a Pool of this machine's
    2 fake GPUs, results right, GPUPOOL_RANK and GPUPOOL_RANKS unset in the
    script and its workers; the exit status is the script's."""
    s = os.path.join(SCRIPTS, "small.py")
    rc, out, err = job.run(script("small.py", "exit", "3"))
    assert rc == 3, err[-3000:]
    o = job.result()
    assert o["name"] == "__main__" and o["argv"] == [s, "exit", "3"], o
    assert (o["script_rank"], o["script_ranks"]) == (None, None), o
    assert (o["size"], o["ok"]) == (2, True), o
    assert o["ranks"] == ["None"] and o["nranks"] == ["None"], o
    job.no_leftovers("after the script")


def test_exit_status_under_mpirun(job):
    """mpirun's exit status is the script's: sys.exit(3) on rank 0 makes
    it 3, an uncaught exception 1 (with its traceback on stderr); no
    process is left."""
    rc, out, err = job.run(mpirun() + script("small.py", "exit", "3"))
    assert rc == 3, err[-3000:]
    assert job.result()["ok"] is True
    job.no_leftovers("after sys.exit(3)")
    rc, out, err = job.run(mpirun() + script("small.py", "raise"))
    assert rc == 1, err[-3000:]
    assert "RuntimeError: small.py raised on purpose" in err, err[-3000:]
    job.no_leftovers("after the exception")
