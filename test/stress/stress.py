#!/usr/bin/env python3
"""gpupool fault-injection and soak tests (issue 5). See README.md.

    stress.py TEST GPUPOOL_RUN [BUILD_DIR]

BUILD_DIR holds the helpers built by test/stress/meson.build (fdlist,
soak_map); tests that need one skip (exit 77) without it.
GPUPOOL_SOAK=1 makes the soak tests run their long variant.
"""
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stresslib import (Fail, check, log, become_subreaper, stat, comm,  # noqa
                       children, alive, reap_all, fd_count,
                       rss_kib, assert_no_leftovers, parse_joblog, ok,
                       by_seq, run, write_tasks, main)

SKIP = 77
SOAK = os.environ.get("GPUPOOL_SOAK", "") not in ("", "0")

# Tasks and gpupool-run get a clean environment for gpupool.
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith("GPUPOOL_") or k == "GPUPOOL_CLAIMS"}


def tmpdir(name):
    d = tempfile.mkdtemp(prefix="gpupool-stress-%s." % name)
    os.chmod(d, 0o755)
    return d


def one_line_error(err, what):
    """gpupool-run's promise: the reason is one line on stderr."""
    text = err.decode("utf-8", "replace").strip()
    lines = [line for line in text.split("\n") if line.strip()]
    check(len(lines) >= 1, "%s: no error message on stderr" % what)
    check(len(lines) == 1, "%s: error is not one line: %r" % (what, text))
    check(lines[0].startswith("gpupool-run:"),
          "%s: error does not name gpupool-run: %r" % (what, lines[0]))
    return lines[0]


# 1 ------------------------------------------------------------------------
def t_worker_kill(gr, *_):
    """10,000 `true` on 4 fake GPUs x 2 while random workers are SIGKILLed
    every ~50 ms: each task ends exactly once (succeeded, or failed after
    all its --retries), none lost, none duplicated, no process left."""
    become_subreaper()
    d = tmpdir("workerkill")
    n, retries, max_kills = 10000, 3, 200
    tasks, jl = os.path.join(d, "tasks"), os.path.join(d, "joblog")
    write_tasks(tasks, ["true"] * n)
    p = subprocess.Popen([gr, "--fake-gpus", "4", "--per-gpu", "2",
                          "--retries", str(retries), "--quiet",
                          "--grace", "1s", "--joblog", jl, tasks],
                         env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    rng = random.Random(int(os.environ.get("STRESS_SEED", "0")) or None)
    kills, t_end = 0, time.monotonic() + 150
    time.sleep(0.3)
    while p.poll() is None:
        check(time.monotonic() < t_end, "gpupool-run hangs under worker "
              "kills (%d kills so far)" % kills)
        # The respawn budget is 64 deaths per slot: stay well under it.
        if kills < max_kills:
            ws = children(p.pid)
            if ws:
                try:
                    os.kill(rng.choice(ws), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass
        time.sleep(rng.uniform(0.025, 0.075))
    err = p.stderr.read().decode("utf-8", "replace")
    rc = p.returncode
    log("gpupool-run rc=%d after %d worker kills; stderr: %s"
        % (rc, kills, err.strip()[-500:]))
    check(kills >= 20, "only %d kills: the run ended too fast to test" % kills)
    recs, torn = parse_joblog(jl)
    check(not torn, "torn joblog lines without a crash: %r" % torn[:3])
    seqs = by_seq(recs)
    check(set(seqs) == set(range(1, n + 1)), "lost tasks: %r; unknown: %r"
          % (sorted(set(range(1, n + 1)) - set(seqs))[:20],
             sorted(set(seqs) - set(range(1, n + 1)))[:20]))
    failed = retried = 0
    for s, rs in seqs.items():
        rs.sort(key=lambda r: r["start"])
        check(sum(ok(r) for r in rs) <= 1, "task %d succeeded twice: %r"
              % (s, rs))
        check(all(not ok(r) for r in rs[:-1]),
              "task %d has an attempt after its success: %r" % (s, rs))
        check(len(rs) <= retries + 1, "task %d ran %d times (retries %d)"
              % (s, len(rs), retries))
        for r in rs:
            check(ok(r) or (r["exit"] == -1 and r["sig"] == 9),
                  "task %d: a `true` failed other than by a worker kill: %r"
                  % (s, r))
        if not ok(rs[-1]):
            check(len(rs) == retries + 1, "task %d failed after %d attempts "
                  "without using its %d retries" % (s, len(rs), retries))
            failed += 1
        retried += len(rs) > 1
    want = 0 if failed == 0 else min(failed, 101)
    check(rc == want, "exit status %d, expected %d (failed tasks)"
          % (rc, want))
    log("%d tasks, %d retried, %d failed for good, %d worker kills"
        % (n, retried, failed, kills))
    check(retried >= 1, "no task was hit by a worker kill")
    assert_no_leftovers("after worker kills")
    shutil.rmtree(d)


# 2 ------------------------------------------------------------------------
def t_runner_kill(gr, *_):
    """gpupool-run SIGKILLed at random points, then --resume, 5 times, then
    a last --resume to the end: every task succeeded exactly once in the
    joblog; a task recorded before a run is never started again; no task
    process outlives a kill by more than the grace period (+ slack)."""
    become_subreaper()
    d = tmpdir("runnerkill")
    n, grace = 300, 1.0
    tasks, jl = os.path.join(d, "tasks"), os.path.join(d, "joblog")
    pidf = os.path.join(d, "pids")
    rng = random.Random(int(os.environ.get("STRESS_SEED", "0")) or None)
    # Each task notes "SEQ PID" (the shell then execs sleep: same pid).
    write_tasks(tasks, ['echo "$GPUPOOL_TASK $$" >> %s; exec sleep 0.%d'
                        % (pidf, rng.randint(1, 3)) for _ in range(n)])
    open(pidf, "w").close()
    argv = [gr, "--fake-gpus", "4", "--per-gpu", "2", "--quiet",
            "--grace", "%gs" % grace, "--joblog", jl, "--resume", tasks]

    def started():
        with open(pidf) as f:
            return [tuple(map(int, x.split())) for x in f if
                    len(x.split()) == 2]

    kills = 0
    for k in range(6):
        done_before = {r["seq"] for r in parse_joblog(jl)[0]} \
            if os.path.exists(jl) else set()
        nstarted = len(started())
        p = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        if k < 5:
            time.sleep(rng.uniform(0.1, 1.0))
            if p.poll() is not None:
                log("run %d ended before its kill" % k)
                continue
            os.kill(p.pid, signal.SIGKILL)
            kills += 1
            p.wait()
            mine = [pid for _, pid in started()[nstarted:]]
            # No task may outlive gpupool-run by more than the grace period.
            end = time.monotonic() + grace + 3.0
            while True:
                reap_all()
                left = [x for x in mine if alive(x) and
                        comm(x) in ("sh", "sleep")]
                if not left:
                    break
                if time.monotonic() > end:
                    raise Fail("kill %d: task processes alive %.1fs after "
                               "gpupool-run was SIGKILLed: %r" %
                               (k, grace + 3.0, left))
                time.sleep(0.05)
            assert_no_leftovers("after runner kill %d" % k, wait=grace + 3)
        else:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
                raise Fail("final --resume run hangs")
            check(p.returncode == 0, "final run: exit %d: %s" %
                  (p.returncode, p.stderr.read()[-500:]))
        rerun = [s for s, _ in started()[nstarted:] if s in done_before]
        check(not rerun, "run %d started tasks the joblog already recorded "
              "as done: %r" % (k, sorted(set(rerun))[:20]))
        recs, torn = parse_joblog(jl)
        log("run %d: %d tasks recorded, %d started in all, torn %d"
            % (k, len({r["seq"] for r in recs}), len(started()), len(torn)))
    check(kills >= 3, "only %d of 5 kills landed mid-run" % kills)
    recs, torn = parse_joblog(jl)
    seqs = by_seq(recs)
    check(set(seqs) == set(range(1, n + 1)), "lost tasks: %r"
          % sorted(set(range(1, n + 1)) - set(seqs))[:20])
    for s, rs in seqs.items():
        check(len(rs) == 1 and ok(rs[0]), "task %d: %r (want exactly one "
              "success)" % (s, rs))
    nst = len(started())
    check(nst >= n, "only %d task starts for %d tasks" % (nst, n))
    log("at-least-once: %d starts for %d tasks (%d re-runs of tasks that "
        "were running at a kill)" % (nst, n, nst - n))
    assert_no_leftovers("at the end")
    shutil.rmtree(d)


# 3 ------------------------------------------------------------------------
def t_timeout(gr, *_):
    """A SIGSTOPped task and one ignoring SIGTERM are ended by --timeout 1s
    --grace 1s (SIGKILL after the grace: Exitval -1, Signal 9), within a
    few seconds, and nothing of them is left."""
    become_subreaper()
    d = tmpdir("timeout")
    tasks, jl = os.path.join(d, "tasks"), os.path.join(d, "joblog")
    write_tasks(tasks, ["kill -STOP $$; sleep 100",
                        'trap "" TERM; sleep 100',
                        'trap "" TERM; kill -STOP $$; sleep 100',
                        "sleep 100"])
    t0 = time.monotonic()
    rc, out, err = run([gr, "--fake-gpus", "2", "--per-gpu", "2",
                        "--timeout", "1s", "--grace", "1s", "--joblog", jl,
                        tasks], 30, env=ENV)
    el = time.monotonic() - t0
    log("rc=%d in %.1fs; stderr: %s" % (rc, el, err.decode()[-400:]))
    check(rc == 4, "exit %d, expected 4 (4 failed tasks)" % rc)
    check(el < 10, "took %.1fs for a 1s timeout + 1s grace" % el)
    seqs = by_seq(parse_joblog(jl)[0])
    check(sorted(seqs) == [1, 2, 3, 4], "joblog seqs %r" % sorted(seqs))
    for s, want in ((1, 9), (2, 9), (3, 9), (4, 15)):
        r = seqs[s]
        check(len(r) == 1, "task %d: %d lines" % (s, len(r)))
        r = r[0]
        check(r["exit"] == -1 and r["sig"] == want,
              "task %d (%s): Exitval %d Signal %d, want -1 %d"
              % (s, r["cmd"], r["exit"], r["sig"], want))
        check(0.9 < r["runtime"] < 6, "task %d ran %.3fs" % (s, r["runtime"]))
    assert_no_leftovers("after timeouts", wait=3)
    shutil.rmtree(d)


# 4 ------------------------------------------------------------------------
def marker_task(d, n):
    mk = os.path.join(d, "ran")
    os.makedirs(mk, exist_ok=True)
    os.chmod(mk, 0o777)
    tasks = os.path.join(d, "tasks")
    write_tasks(tasks, ["touch %s/$GPUPOOL_TASK" % mk] * n)
    os.chmod(tasks, 0o644)
    return tasks, mk


def t_joblog_devfull(gr, *_):
    """--joblog /dev/full (also +/dev/full and with --resume): a one-line
    error, exit 255, and no task ran (nothing could record it)."""
    become_subreaper()
    d = tmpdir("devfull")
    tasks, mk = marker_task(d, 20)
    bad = []
    for jlarg in (["--joblog", "/dev/full"], ["--joblog", "+/dev/full"],
                  ["--resume", "--joblog", "/dev/full"]):
        for f in os.listdir(mk):
            os.unlink(os.path.join(mk, f))
        try:
            rc, out, err = run([gr, "--fake-gpus", "2", "--quiet"] + jlarg +
                               [tasks], 10, env=ENV)
        except Fail as e:
            bad.append(str(e))
            continue
        ran = sorted(os.listdir(mk), key=int)
        text = err.decode("utf-8", "replace").strip()
        log("%s: rc=%d, %d tasks ran: %s" % (" ".join(jlarg), rc, len(ran),
                                             text))
        if ran:
            bad.append("%s: %d tasks ran with nowhere to record them "
                       "(seqs %r)" % (" ".join(jlarg), len(ran), ran[:10]))
        if rc != 255:
            bad.append("%s: exit %d, want 255" % (" ".join(jlarg), rc))
        try:
            one_line_error(err, " ".join(jlarg))
        except Fail as e:
            bad.append(str(e))
    assert_no_leftovers("/dev/full")
    shutil.rmtree(d)
    check(not bad, "; ".join(bad))


def t_joblog_fills(gr, *_):
    """A joblog on a 64 KiB tmpfs (mounted when we are root and may mount;
    else skip) that fills mid-run: exit 255 with a clear joblog error, the
    run stops, and the only tasks that ran without a joblog line are those
    in flight when the write failed."""
    become_subreaper()
    d = tmpdir("fills")
    tasks, mk = marker_task(d, 1)
    # A joblog that fills up during the run.
    mnt = os.path.join(d, "tiny")
    os.mkdir(mnt)
    if os.geteuid() == 0 and subprocess.call(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "gpupool-stress",
             mnt], stderr=subprocess.DEVNULL) == 0:
        try:
            for f in os.listdir(mk):
                os.unlink(os.path.join(mk, f))
            # ~200 bytes a line: 64 KiB holds ~330 of 2000 lines.
            long_tasks = os.path.join(d, "tasks-long")
            write_tasks(long_tasks, ["touch %s/$GPUPOOL_TASK # %s"
                                     % (mk, "x" * 120)] * 2000)
            jl = os.path.join(mnt, "joblog")
            rc, out, err = run([gr, "--fake-gpus", "2", "--per-gpu", "2",
                                "--quiet", "--joblog", jl, long_tasks], 60, env=ENV)
            text = err.decode("utf-8", "replace").strip()
            log("tiny tmpfs: rc=%d: %s" % (rc, text[-300:]))
            check(rc == 255, "joblog on a full tmpfs: exit %d, want 255" % rc)
            check("joblog" in text and ("space" in text or "full" in text),
                  "no clear joblog error: %r" % text[-300:])
            recs, torn = parse_joblog(jl)
            recorded = {r["seq"] for r in recs}
            ran = {int(x) for x in os.listdir(mk)}
            extra = ran - recorded
            log("tiny tmpfs: %d recorded, %d ran, %d ran unrecorded"
                % (len(recorded), len(ran), len(extra)))
            # Only the tasks in flight at the failed write may be missing
            # (4 slots, and the one whose line did not fit).
            check(len(extra) <= 5, "%d tasks ran after the joblog filled "
                  "up and are not recorded: %r"
                  % (len(extra), sorted(extra)[:20]))
            check(len(ran) < 2000, "the run went on after the joblog was "
                  "full")
        finally:
            subprocess.call(["umount", "-l", mnt])
    else:
        log("tiny tmpfs: cannot mount: skip")
        shutil.rmtree(d)
        return SKIP
    assert_no_leftovers("disk full")
    shutil.rmtree(d)


def t_results_fills(gr, *_):
    """--results DIR on a full tmpfs (mounted when we are root and may
    mount; else skip): every exitval write fails with ENOSPC, so every task
    fails (joblog, exit status, stderr), and --resume, once there is room,
    runs again each task that has no exitval."""
    become_subreaper()
    d = tmpdir("resfull")
    mnt = os.path.join(d, "tiny")
    os.mkdir(mnt)
    if os.geteuid() != 0 or subprocess.call(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "gpupool-stress",
             mnt], stderr=subprocess.DEVNULL) != 0:
        log("tiny tmpfs: cannot mount: skip")
        shutil.rmtree(d)
        return SKIP
    try:
        res = os.path.join(mnt, "res")
        os.mkdir(res)
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError as e:
            check(e.errno == errno.ENOSPC, "filling: %r" % e)
        finally:
            os.close(fd)
        tasks = os.path.join(d, "tasks")
        write_tasks(tasks, ["true"] * 3)
        jl = os.path.join(d, "joblog")
        cmd = [gr, "--fake-gpus", "2", "--joblog", jl,
               "--results", res, tasks]
        rc, out, err = run(cmd, 60, env=ENV)
        text = err.decode("utf-8", "replace")
        log("full results dir: rc=%d: %s" % (rc, text.strip()[-300:]))
        check(rc == 3, "3 tasks without results: exit %d, want 3" % rc)
        check("No space left" in text, "ENOSPC not said: %r" % text[-300:])
        recs, torn = parse_joblog(jl)
        check(len(recs) == 3 and not any(ok(r) for r in recs),
              "the joblog records success: %r" % recs)
        os.unlink(filler)
        rc, out, err = run(cmd + ["--resume"], 60, env=ENV)
        log("resume with room: rc=%d" % rc)
        check(rc == 0, "resume: exit %d: %r" % (rc, err[-300:]))
        for seq in (1, 2, 3):
            with open(os.path.join(res, str(seq), "exitval")) as f:
                check(f.read() == "0\n", "task %d: no exitval" % seq)
        recs, torn = parse_joblog(jl)
        check(len(recs) == 6, "resume ran %d tasks, want 3" % (len(recs) - 3))
    finally:
        subprocess.call(["umount", "-l", mnt])
    assert_no_leftovers("results full")
    shutil.rmtree(d)


def t_results_unwritable(gr, *_):
    """--results that cannot be written: a file where the directory should
    be, a path under a file, and (as nobody via setpriv, since root ignores
    mode bits; or as ourselves when not root) a mode-0500 directory. Each:
    one-line error, exit 255, no task ran."""
    become_subreaper()
    d = tmpdir("results")
    os.chmod(d, 0o755)
    tasks, mk = marker_task(d, 10)
    afile = os.path.join(d, "afile")
    open(afile, "w").close()
    ro = os.path.join(d, "ro")
    os.mkdir(ro)
    os.chmod(ro, 0o500)
    cases = [("a file in place of the dir", [], afile),
             ("a path under a file", [], os.path.join(afile, "sub"))]
    if os.geteuid() == 0:
        if shutil.which("setpriv"):
            os.chown(ro, 65534, 65534)   # nobody's own 0500 dir
            nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup",
                      "--clear-groups", "--"]
            cases.append(("a 0500 dir, as nobody", nobody, ro))
            cases.append(("a new dir under a 0500 dir, as nobody", nobody,
                          os.path.join(ro, "new")))
        else:
            log("setpriv missing: 0500 case skipped (root ignores modes)")
    else:
        cases.append(("a 0500 dir", [], ro))
        cases.append(("a new dir under a 0500 dir", [],
                      os.path.join(ro, "new")))
    for what, pre, path in cases:
        for f in os.listdir(mk):
            os.unlink(os.path.join(mk, f))
        rc, out, err = run(pre + [gr, "--fake-gpus", "2", "--results", path,
                                  tasks], 30, env=ENV)
        line = one_line_error(err, what)
        log("%s: rc=%d: %s" % (what, rc, line))
        check(rc == 255, "%s: exit %d, want 255" % (what, rc))
        check(not os.listdir(mk), "%s: tasks ran" % what)
    os.chmod(ro, 0o700)
    assert_no_leftovers("results")
    shutil.rmtree(d)


# 5 ------------------------------------------------------------------------
def judge_limit(what, rc, err, jl, n):
    text = err.decode("utf-8", "replace").strip()
    check(rc >= 0, "%s: gpupool-run died of signal %d: %s"
          % (what, -rc, text[-300:]))
    if rc == 0:
        seqs = by_seq(parse_joblog(jl)[0])
        check(sorted(seqs) == list(range(1, n + 1)) and
              all(ok(r[-1]) for r in seqs.values()),
              "%s: exit 0 but the joblog is incomplete" % what)
        return "completed"
    if rc == 255:
        lines = [x for x in text.split("\n") if x.strip()]
        check(lines and lines[-1].startswith("gpupool-run:"),
              "%s: exit 255 without an error line: %r" % (what, text))
        return "error: " + lines[-1]
    # Some tasks failed (could not be spawned): they must be recorded so.
    seqs = by_seq(parse_joblog(jl)[0])
    failed = sum(1 for r in seqs.values() if not ok(r[-1]))
    check(1 <= rc <= 101 and rc == min(failed, 101),
          "%s: exit %d but %d tasks failed in the joblog: %s"
          % (what, rc, failed, text[-300:]))
    return "%d tasks failed (recorded)" % failed


def t_limits(gr, *_):
    """RLIMIT_NOFILE 32 (and 16, 64) and a small RLIMIT_NPROC (as nobody,
    where root's exemption does not apply): completion or a clear error,
    never a hang (60 s bound) or a crash."""
    become_subreaper()
    d = tmpdir("limits")
    os.chmod(d, 0o777)
    n = 40
    tasks = os.path.join(d, "tasks")
    write_tasks(tasks, ["sh -c 'exit 0'"] * n)
    os.chmod(tasks, 0o644)
    results = []
    for nofile in (16, 32, 64):
        for gpus, per in (("1", "1"), ("4", "2")):
            jl = os.path.join(d, "jl-nofile-%d-%s" % (nofile, gpus))
            what = "ulimit -n %d, %sx%s" % (nofile, gpus, per)
            rc, out, err = run(["prlimit", "--nofile=%d" % nofile, "--",
                                gr, "--fake-gpus", gpus, "--per-gpu", per,
                                "--quiet", "--joblog", jl, tasks], 60,
                               env=ENV)
            results.append((what, judge_limit(what, rc, err, jl, n)))
    if os.geteuid() == 0 and shutil.which("setpriv"):
        pre = ["setpriv", "--reuid=nobody", "--regid=nogroup",
               "--clear-groups", "--"]
    elif os.geteuid() != 0:
        pre = []   # our own user: other processes of ours count too
    else:
        pre = None
        log("nproc: skipped (root is exempt and setpriv is missing)")
    if pre is not None:
        for nproc in (1, 2, 4, 8, 12):
            jl = os.path.join(d, "jl-nproc-%d" % nproc)
            what = "nproc %d, 4x2" % nproc
            rc, out, err = run(pre + ["prlimit", "--nproc=%d" % nproc, "--",
                                      gr, "--fake-gpus", "4", "--per-gpu",
                                      "2", "--quiet", "--joblog", jl, tasks],
                               60, env=ENV)
            results.append((what, judge_limit(what, rc, err, jl, n)))
    for what, res in results:
        log("%-22s %s" % (what, res))
    assert_no_leftovers("limits")
    shutil.rmtree(d)


# 6 ------------------------------------------------------------------------
def flat(name, samples, abs_bound, what):
    """Samples after warm-up (first 20% dropped): max - first <= bound."""
    s = [x for x in samples if x is not None]
    check(len(s) >= 5, "%s: only %d samples of %s" % (what, len(s), name))
    w = s[len(s) // 5:]
    grow = max(w) - w[0]
    log("%s: %s first %d, last %d, min %d, max %d (growth %d, bound %d)"
        % (what, name, w[0], w[-1], min(w), max(w), grow, abs_bound))
    check(grow <= abs_bound, "%s: %s grew by %d (bound %d): %r"
          % (what, name, grow, abs_bound, s[::max(1, len(s) // 20)]))


def t_soak_cli(gr, *_):
    """Many `true` tasks on 8 fake GPUs x 2 (5,000; 100,000 with
    GPUPOOL_SOAK=1): the master's fd count, RSS and child count, sampled
    from /proc, stay flat; all tasks succeed; no zombie at the end."""
    become_subreaper()
    d = tmpdir("soakcli")
    n = 100000 if SOAK else 5000
    tasks, jl = os.path.join(d, "tasks"), os.path.join(d, "joblog")
    write_tasks(tasks, ["true"] * n)
    p = subprocess.Popen([gr, "--fake-gpus", "8", "--per-gpu", "2",
                          "--quiet", "--joblog", jl, tasks], env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    fds, rss, kids, zomb = [], [], [], 0
    t_end = time.monotonic() + (3600 if SOAK else 150)
    while p.poll() is None:
        check(time.monotonic() < t_end, "soak run hangs")
        fds.append(fd_count(p.pid))
        rss.append(rss_kib(p.pid))
        ks = children(p.pid)
        if ks:
            kids.append(len(ks))
        zomb = max(zomb, sum(1 for k in ks if (stat(k) or "?")[0] == "Z"))
        time.sleep(0.1)
    err = p.stderr.read().decode()
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, err[-300:]))
    flat("fds", fds, 0, "gpupool-run")
    flat("RSS KiB", rss, 1024, "gpupool-run")
    flat("children", kids, 0, "gpupool-run")
    check(max(kids) == 16, "gpupool-run had %d children, want 16 workers"
          % max(kids))
    seqs = by_seq(parse_joblog(jl)[0])
    check(len(seqs) == n and all(len(r) == 1 and ok(r[0])
                                 for r in seqs.values()),
          "not every task succeeded exactly once")
    assert_no_leftovers("soak")
    shutil.rmtree(d)


def t_soak_map(gr, bdir=None, *_):
    """pool_map soak (C helper soak_map): items x maps on one pool, fds,
    RSS and children sampled between maps by the helper itself."""
    exe = os.path.join(bdir or "", "soak_map")
    if not bdir or not os.access(exe, os.X_OK):
        log("soak_map helper not built: skip")
        return SKIP
    become_subreaper()
    items, maps = (1000000, 50) if SOAK else (100000, 20)
    env = dict(ENV, GPUPOOL_FAKE_GPUS="4")
    rc, out, err = run([exe, str(items), str(maps)],
                       7200 if SOAK else 150, env=env)
    log(out.decode().rstrip())
    check(rc == 0, "soak_map exit %d: %s" % (rc, err.decode()[-500:]))
    assert_no_leftovers("soak_map")


# 7 ------------------------------------------------------------------------
def t_fds_umask(gr, bdir=None, *_):
    """A task sees only fds 0, 1, 2 (exec'd directly and through sh, with
    and without --results and --joblog); the joblog and results files and
    dirs get the user's umask."""
    become_subreaper()
    fdlist = os.path.join(bdir or "", "fdlist")
    d = tmpdir("fds")
    tasks = os.path.join(d, "tasks")
    # sh's own fds (dash opens none), as the shell: bash, the one found
    # among the parents of a run under CI, execs a lone command, and
    # $$ is then ls, with the directory it reads open.
    env = dict(ENV, PARALLEL_SHELL="/bin/sh")
    lines = ["ls /proc/$$/fd"]
    if bdir and os.access(fdlist, os.X_OK):
        lines += [fdlist, "%s; true" % fdlist]  # direct exec, then via sh
    else:
        log("fdlist helper not built: only the shell variant")
    write_tasks(tasks, lines)
    for mask in (0o022, 0o027, 0o077):
        for extra in ([], ["--results", os.path.join(d, "res-%o" % mask)]):
            jl = os.path.join(d, "jl-%o-%d" % (mask, len(extra)))
            os.umask(mask)
            try:
                rc, out, err = run([gr, "--fake-gpus", "2", "--per-gpu",
                                    "2", "--quiet", "--joblog", jl] + extra +
                                   [tasks], 30, env=env)
            finally:
                os.umask(0o022)
            check(rc == 0, "umask %o %r: exit %d: %s" % (mask, extra, rc,
                                                        err.decode()))
            if extra:
                for s in range(1, len(lines) + 1):
                    with open(os.path.join(extra[1], str(s), "stdout")) as f:
                        fs = set(f.read().split())
                    check(fs == {"0", "1", "2"}, "--results, task %d (%s) "
                          "sees fds %r" % (s, lines[s - 1], sorted(fs)))
            else:
                # Every token printed by the tasks is an fd number.
                toks = out.decode().split()
                check(set(toks) <= {"0", "1", "2"}, "umask %o: a task sees "
                      "fds %r" % (mask, sorted(set(toks))))
                check(toks.count("0") == len(lines),
                      "a task's fd list is missing: %r" % out.decode())
            want_f, want_d = 0o666 & ~mask, 0o777 & ~mask
            got = os.stat(jl).st_mode & 0o7777
            check(got == want_f, "umask %o: joblog mode %o, want %o"
                  % (mask, got, want_f))
            if extra:
                res = extra[1]
                for dp, dn, fn in os.walk(res):
                    m = os.stat(dp).st_mode & 0o7777
                    check(m == want_d, "umask %o: dir %s mode %o, want %o"
                          % (mask, dp, m, want_d))
                    for f in fn:
                        m = os.stat(os.path.join(dp, f)).st_mode & 0o7777
                        check(m == want_f, "umask %o: %s/%s mode %o, want %o"
                              % (mask, dp, f, m, want_f))
            log("umask %03o %s: fds ok, modes ok" % (mask, extra[:1]))
    assert_no_leftovers("fds")
    shutil.rmtree(d)


TESTS = {
    "worker-kill": t_worker_kill,
    "runner-kill": t_runner_kill,
    "timeout": t_timeout,
    "joblog-devfull": t_joblog_devfull,
    "joblog-fills": t_joblog_fills,
    "results-unwritable": t_results_unwritable,
    "results-fills": t_results_fills,
    "limits": t_limits,
    "soak-cli": t_soak_cli,
    "soak-map": t_soak_map,
    "fds-umask": t_fds_umask,
}

if __name__ == "__main__":
    main(TESTS)
