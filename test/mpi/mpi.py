#!/usr/bin/env python3
"""gpupool-run across MPI ranks on this machine (issue 6), suite 'mpi'.

    mpi.py TEST GPUPOOL_RUN PROBE

Each test starts `mpirun --oversubscribe -np 3` ranks of gpupool-run, each
with its own 2 fake GPUs, on tasks that run PROBE (test/cli/probe.c), which
records where and when it ran. Skips (77) without mpirun.
"""
import fcntl
import os
import random
import signal
import shutil
import subprocess
import threading
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "stress"))
from stresslib import (Fail, check, log, become_subreaper,  # noqa: E402
                       assert_no_leftovers, parse_joblog, ok, by_seq, run,
                       write_tasks, children, comm, main)

SKIP = 77
RANKS = 3
GPUS = 2            # fake GPUs per rank
ENV = {k: v for k, v in os.environ.items()
       if not k.startswith("GPUPOOL_") or k == "GPUPOOL_CLAIMS"}


def mpirun(*extra):
    m = shutil.which("mpirun")
    if m is None:
        return None
    cmd = [m, "--oversubscribe", "-np", str(RANKS)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return cmd + list(extra)


def tmpdir(name):
    d = tempfile.mkdtemp(prefix="gpupool-mpi-%s." % name)
    return d


def records(path):
    """probe's E lines: dicts of seq, cvd, slot, gpu, attempt, start, end
    (monotonic ns), rank."""
    out = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[0] != "E":
                continue
            out.append({"seq": int(w[1]), "cvd": w[2], "slot": int(w[3]),
                        "gpu": int(w[4]), "attempt": int(w[5]),
                        "start": int(w[6]), "end": int(w[7]),
                        "rank": int(w[8])})
    return out


def started(path):
    with open(path) as f:
        return sum(1 for line in f if line.startswith("B "))


def exclusive(recs):
    """No two tasks on one (rank, slot) at once; each slot on the GPU its
    number says; at most GPUS tasks at a time on a rank."""
    slots = {}
    for r in recs:
        check(r["cvd"] == "fake%d" % r["gpu"] and r["slot"] % GPUS ==
              r["gpu"], "task %d ran on slot %d with CUDA_VISIBLE_DEVICES "
              "%s (GPU %d)" % (r["seq"], r["slot"], r["cvd"], r["gpu"]))
        slots.setdefault((r["rank"], r["slot"]), []).append(r)
    for key, rs in slots.items():
        rs.sort(key=lambda r: r["start"])
        for a, b in zip(rs, rs[1:]):
            check(b["start"] >= a["end"], "rank %d slot %d: tasks %d and "
                  "%d overlap" % (key[0], key[1], a["seq"], b["seq"]))
    ev = sorted([(r["start"], 1, r["rank"]) for r in recs] +
                [(r["end"], -1, r["rank"]) for r in recs])
    now = {}
    for _, d, rank in ev:
        now[rank] = now.get(rank, 0) + d
        check(now[rank] <= GPUS, "rank %d ran %d tasks at once on %d "
              "slots" % (rank, now[rank], GPUS))
    return slots


def once(jl, n):
    """Every Seq 1..n has exactly one successful record."""
    recs, torn = parse_joblog(jl)
    check(not torn, "torn joblog lines: %r" % torn[:3])
    seqs = by_seq(recs)
    for s in range(1, n + 1):
        good = [r for r in seqs.get(s, []) if ok(r)]
        check(len(good) == 1, "task %d has %d successful records"
              % (s, len(good)))
    check(set(seqs) <= set(range(1, n + 1)), "joblog has unknown tasks")
    return recs


def gr_cmd(gr, *args):
    return [gr, "--fake-gpus", str(GPUS)] + list(args)


def t_exactly_once(gr, probe):
    """600 tasks over 3 ranks x 2 fake GPUs: each runs once, on one rank,
    every rank runs some, the joblog has one line per task with the host
    in its Host column, slots are exclusive, tasks see GPUPOOL_RANK and no
    MPI wire-up variable."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("once")
    n = 600
    log_ = os.path.join(d, "rec")
    write_tasks(os.path.join(d, "t"),
                ["%s record %s 0" % (probe, log_)] * (n - 1) +
                ["env | grep -c -E '^(OMPI|PMIX|PMI|OPAL)_' > %s/mpienv;"
                 " echo $GPUPOOL_RANK > %s/rank; true" % (d, d)])
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl", d + "/t"),
                       120, env=ENV)
    check(rc == 0, "exit %d: %s" % (rc, err.decode()[-2000:]))
    check(b"%d ok, 0 failed" % n in err, "summary: %r" % err[-500:])
    recs = records(log_)
    check(sorted(r["seq"] for r in recs) == list(range(1, n)),
          "probe records: %d, not each task once" % len(recs))
    per = {}
    for r in recs:
        per[r["rank"]] = per.get(r["rank"], 0) + 1
    check(sorted(per) == list(range(RANKS)), "ranks that ran tasks: %r"
          % per)
    exclusive(recs)
    jl = once(d + "/jl", n)
    check(len(jl) == n, "%d joblog lines for %d tasks" % (len(jl), n))
    host = os.uname().nodename
    check(all(r["host"] == host for r in jl), "Host column: %r"
          % {r["host"] for r in jl})
    with open(d + "/mpienv") as f:
        check(f.read().strip() == "0", "a task saw MPI's variables")
    log("ran per rank: %r" % per)
    shutil.rmtree(d)
    return 0


def greedy(durs, slots):
    """The makespan of greedy list scheduling: each task, in order, on the
    slot that frees first, with no overhead at all."""
    free = [0.0] * slots
    for d in durs:
        free[free.index(min(free))] += d
    return max(free)


def t_skew(gr, probe):
    """60 skewed tasks (Pareto, fixed seed; every third one of the 20
    longest) on 6 slots over 3 ranks: rank 0 keeps every slot on every
    rank busy while tasks wait, so short tasks are not queued behind long
    ones. The makespan (first start to last end, as the tasks saw them)
    is within 10% of greedy list scheduling of the same durations in the
    same order on 6 slots with no overhead (4.7 s): the 10% is what
    dispatch, the MPI round trips and the spawns may cost in all, some 50
    ms a task. Each rank runs GPUS tasks at once, from its first ones on."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("skew")
    rnd = random.Random(6)
    durs = sorted((min(0.2 * rnd.paretovariate(1.5), 6.0)
                   for _ in range(60)), reverse=True)
    # Dealt out in turn (static round robin), the long ones would all go
    # to one rank and leave the others idle for seconds while they wait.
    durs = [durs[i // 3] if i % 3 == 0 else durs[20 + i - i // 3 - 1]
            for i in range(60)]
    durs = [int(s * 1000) / 1000 for s in durs]     # as the tasks sleep
    log_ = os.path.join(d, "rec")
    write_tasks(os.path.join(d, "t"), ["%s record %s %d" %
                (probe, log_, int(s * 1000)) for s in durs])
    rc, out, err = run(m + gr_cmd(gr, "--quiet", d + "/t"), 120, env=ENV)
    check(rc == 0, "exit %d: %s" % (rc, err.decode()[-2000:]))
    recs = records(log_)
    check(len(recs) == len(durs), "%d records" % len(recs))
    exclusive(recs)
    # A window of fewer tasks than slots leaves a slot idle for good.
    for rank in range(RANKS):
        ev = sorted([(r["start"], 1) for r in recs if r["rank"] == rank] +
                    [(r["end"], -1) for r in recs if r["rank"] == rank])
        now = most = 0
        for _, inc in ev:
            now += inc
            most = max(most, now)
        check(most == GPUS, "rank %d never ran %d tasks at once"
              % (rank, GPUS))
        # From the start its window is one task per slot: every slot
        # starts one before any of the rank's tasks ends (each runs 0.2 s
        # or more), not one slot at a time.
        mine = [r for r in recs if r["rank"] == rank]
        starts = sorted(r["start"] for r in mine)
        check(starts[GPUS - 1] < min(r["end"] for r in mine),
              "rank %d: slot %d started only after a task of its ended"
              % (rank, GPUS))
    ideal = greedy(durs, RANKS * GPUS)
    span = (max(r["end"] for r in recs) - min(r["start"] for r in recs)) / 1e9
    log("makespan %.3f s, greedy list scheduling %.3f s (%.3fx; sum %.2f s)"
        % (span, ideal, span / ideal, sum(durs)))
    check(span <= 1.1 * ideal, "makespan %.3f s: over 1.1x greedy list "
          "scheduling of the durations, %.3f s" % (span, ideal))
    shutil.rmtree(d)
    return 0


def rank_pids(mp):
    """The gpupool-run ranks mpirun started (its children), by rank."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        kids = [p for p in children(mp) if comm(p) in ("gpupool-run",
                                                        "gpupool-run-mpi")]
        if len(kids) == RANKS:
            return kids
        time.sleep(0.05)
    raise Fail("mpirun's children: %r" % children(mp))


def rank_of(pid):
    """A rank's number from its environment; a rank caught in its exec of
    gpupool-run-mpi shows none for a moment, so look again."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for v in f.read().split(b"\0"):
                if v.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(v.split(b"=")[1])
        time.sleep(0.02)
    raise Fail("no rank in the environment of %d" % pid)


def kill_midway(cmd, d, when, pick, sig=signal.SIGKILL):
    """Start cmd, wait until `when` tasks started, send sig to what pick()
    chooses among (mpirun pid, {rank: pid}); returns (rc, err)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    ranks = {rank_of(pid): pid for pid in rank_pids(p.pid)}
    end = time.monotonic() + 60
    while not (os.path.exists(d + "/rec") and started(d + "/rec") >= when):
        check(time.monotonic() < end and p.poll() is None,
              "the run ended or stalled before %d tasks started" % when)
        time.sleep(0.02)
    victim = pick(p.pid, ranks)
    log("sending signal %d to pid %d" % (sig, victim))
    os.kill(victim, sig)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Fail("the run did not end after the kill")
    return p.returncode, err


def tasks(d, probe, n, ms):
    write_tasks(d + "/t", ["%s record %s/rec %d" % (probe, d, ms)] * n)


def kill_run(gr, probe, name, pick, extra=(), args=(), sig=signal.SIGKILL):
    """60 tasks of 0.2 s with a joblog, the victim pick() chooses sent sig
    (SIGKILL) once 20 have started. Returns (mpirun command, dir, rc,
    stderr), or None without mpirun."""
    m = mpirun(*extra)
    if m is None:
        return None
    become_subreaper()
    d = tmpdir(name)
    tasks(d, probe, 60, 200)
    cmd = m + gr_cmd(gr, "--joblog", d + "/jl", *args) + [d + "/t"]
    rc, err = kill_midway(cmd, d, 20, pick, sig)
    return m, d, rc, err.decode()


def t_resume(gr, probe):
    """The whole run (mpirun) SIGKILLed mid-run: no rank, worker or task
    survives; the joblog is whole; --resume runs exactly what it lacks."""
    k = kill_run(gr, probe, "resume", lambda mp, ranks: mp)
    if k is None:
        return SKIP
    m, d, rc, err = k
    n = 60
    check(rc == -signal.SIGKILL, "mpirun: %d" % rc)
    assert_no_leftovers("after mpirun was killed", wait=15)
    recs, torn = parse_joblog(d + "/jl")
    first = {r["seq"] for r in recs if ok(r)}
    check(0 < len(first) < n, "%d tasks recorded before the kill"
          % len(first))
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl", "--resume",
                       d + "/t"), 120, env=ENV)
    check(rc == 0, "resume: exit %d: %s" % (rc, err.decode()[-2000:]))
    recs, torn = parse_joblog(d + "/jl")
    check(len(torn) <= 1, "torn lines: %r" % torn)
    seqs = by_seq(recs)
    check(sorted(seqs) == list(range(1, n + 1)), "tasks in the joblog: %d"
          % len(seqs))
    for s in first:
        check(len(seqs[s]) == 1, "task %d recorded before the kill ran "
              "again" % s)
    check(sum(1 for r in recs if ok(r)) == n, "not every task succeeded")
    assert_no_leftovers("after the resumed run")
    shutil.rmtree(d)
    return 0


def resume_failed(m, gr, d):
    """After kill_run(): --resume-failed completes the run, each of its 60
    tasks succeeding exactly once."""
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl",
                       "--resume-failed", d + "/t"), 120, env=ENV)
    check(rc == 0, "resume: exit %d: %s" % (rc, err.decode()[-2000:]))
    once(d + "/jl", 60)
    shutil.rmtree(d)


def t_rank_killed(gr, probe):
    """Rank 2 SIGKILLed mid-run under the default mpirun: the job ends
    with a non-zero status and no process left, the joblog is whole, and
    --resume-failed completes it with each task succeeding exactly once."""
    k = kill_run(gr, probe, "rankkill", lambda mp, ranks: ranks[2])
    if k is None:
        return SKIP
    m, d, rc, err = k
    check(rc != 0, "mpirun exited 0 after a rank was killed")
    assert_no_leftovers("after rank 2 was killed", wait=15)
    resume_failed(m, gr, d)
    return 0


def t_rank_lost(gr, probe, sig=signal.SIGKILL):
    """Rank 2 SIGKILLed under `mpirun --enable-recovery` (the job goes
    on): rank 0 writes it off after --rank-timeout, its running tasks are
    failed attempts run again on the other ranks (--retries 1), the run
    completes (every task succeeds exactly once), and the job ends."""
    k = kill_run(gr, probe, "ranklost", lambda mp, ranks: ranks[2],
                 extra=["--enable-recovery"],
                 args=["--retries", "1", "--rank-timeout", "2s"], sig=sig)
    if k is None:
        return SKIP
    m, d, rc, err = k
    # Open MPI 4.1's mpirun --enable-recovery exits 0 whatever the ranks
    # do: the summary says how the run went.
    check("rank 2 (" in err and "is lost" in err, "no word of the lost "
          "rank: %s" % err[-2000:])
    check("60 ok, 0 failed" in err, "summary: %s" % err[-1500:])
    # Ended without MPI_Abort's banner, the PMIx log message Open MPI
    # 4.1's mpirun can crash on (mpi_proc.c's mp_abort).
    check("MPI_ABORT was invoked" not in err, "the job ended by "
          "MPI_Abort's banner: %s" % err[-1500:])
    recs = once(d + "/jl", 60)
    lost = [r for r in recs if not ok(r)]
    check(lost and all(r["sig"] == signal.SIGKILL for r in lost),
          "the lost rank's tasks: %r" % lost)
    assert_no_leftovers("after the run")
    shutil.rmtree(d)
    return 0


def t_rank_stopped(gr, probe):
    """As rank-lost, with rank 2 SIGSTOPped: alive but silent. It is
    written off all the same, and the job still ends (rank 0 has the
    launcher end it, stopped rank included) with no process left."""
    return t_rank_lost(gr, probe, signal.SIGSTOP)


def t_stdin_halt(gr, probe):
    """Tasks from a pipe reach every rank; --halt now,fail=1 on rank 0
    stops the tasks running on every rank (recorded as stopped) and
    starts nothing new."""
    m = mpirun()
    if m is None:
        return SKIP
    become_subreaper()
    d = tmpdir("stdin")
    lines = "".join("%s record %s/rec 30\n" % (probe, d) for _ in range(90))
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl", "-"), 120,
                       input=lines.encode(), env=ENV)
    check(rc == 0, "stdin: exit %d: %s" % (rc, err.decode()[-2000:]))
    recs = records(d + "/rec")
    check(len(recs) == 90 and {r["rank"] for r in recs} ==
          set(range(RANKS)), "stdin: %d tasks, ranks %r"
          % (len(recs), {r["rank"] for r in recs}))
    exclusive(recs)
    os.unlink(d + "/rec")
    # Task 4 fails after 0.5 s; the others run 3 s: when it fails, tasks
    # run on every rank, and they must be stopped, not waited for.
    write_tasks(d + "/t", ["%s record %s/rec %d %d" % (probe, d,
                500 if i == 4 else 3000, 1 if i == 4 else 0)
                for i in range(1, 31)])
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl2", "--halt",
                       "now,fail=1", d + "/t"), 60, env=ENV)
    check(rc == 1, "halt: exit %d: %s" % (rc, err.decode()[-2000:]))
    recs, torn = parse_joblog(d + "/jl2")
    stopped = [r for r in recs if r["sig"] == signal.SIGTERM]
    check(len(stopped) == 5 and all(r["runtime"] < 2 for r in stopped),
          "halt: the 5 others were not stopped at once: %r" % recs)
    check(len(recs) == 6, "halt: tasks kept starting: %r" % recs)
    assert_no_leftovers("after --halt")
    shutil.rmtree(d)
    return 0


def t_timeout_retries(gr, probe):
    """--timeout and --retries across ranks: 24 tasks that fail their
    first attempt and succeed on the second, wherever it runs, and two
    that outlive --timeout 1s twice. Exit 2 (two failed); the joblog has
    each attempt once: a failure then a success, or two timeouts (Signal
    15, about a second each); retries ran on more than one rank."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("timeout")
    lines = []
    for i in range(1, 27):
        if i in (5, 17):
            lines.append("%s record %s/rec 30000" % (probe, d))
        else:
            lines.append("echo $GPUPOOL_RANK $GPUPOOL_TASK $GPUPOOL_ATTEMPT"
                         " >> %s/att; exec %s flaky %s 1" % (d, probe, d))
    write_tasks(d + "/t", lines)
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl", "--timeout",
                       "1s", "--grace", "1s", "--retries", "1", d + "/t"),
                       120, env=ENV)
    check(rc == 2, "exit %d: %s" % (rc, err.decode()[-2000:]))
    recs, torn = parse_joblog(d + "/jl")
    seqs = by_seq(recs)
    check(sorted(seqs) == list(range(1, 27)), "tasks: %r" % sorted(seqs))
    for s, rs in seqs.items():
        check(len(rs) == 2, "task %d: %d attempts recorded" % (s, len(rs)))
        if s in (5, 17):
            check(all(r["exit"] == -1 and r["sig"] == signal.SIGTERM and
                      0.9 < r["runtime"] < 5 for r in rs),
                  "task %d did not time out twice: %r" % (s, rs))
        else:
            check(sorted(r["exit"] for r in rs) == [0, 1],
                  "task %d: exits %r" % (s, [r["exit"] for r in rs]))
    with open(d + "/att") as f:
        att = [w.split() for w in f]
    second = {int(r) for r, _, a in att if a == "2"}
    check(len(second) > 1, "retries ran on ranks %r only" % second)
    shutil.rmtree(d)
    return 0


def mpmd(m, *apps):
    """mpirun's MPMD form of the command m: one rank per argv in apps."""
    cmd = [a for a in m if a not in ("-np", str(RANKS))]
    for i, app in enumerate(apps):
        cmd += ([":"] if i else []) + ["-np", "1"] + app
    return cmd


def t_start_fail(gr, probe):
    """One rank cannot create its pool (a missing --topology, through mpirun's
    MPMD form): nothing runs, the joblog is not created, exit 255, and the
    reason names the rank."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("startfail")
    tasks(d, probe, 10, 10)
    good = gr_cmd(gr, "--joblog", d + "/jl", d + "/t")
    bad = gr_cmd(gr, "--topology", d + "/no.xml", "--joblog", d + "/jl",
                 d + "/t")
    rc, out, err = run(mpmd(m, good, good, bad), 60, env=ENV)
    err = err.decode()
    check(rc == 255, "exit %d: %s" % (rc, err[-2000:]))
    check("rank 2 could not start" in err, "reason: %s" % err[-2000:])
    check(not os.path.exists(d + "/rec"), "a task ran")
    check(not os.path.exists(d + "/jl"), "the joblog was created")
    # Several processes of a launcher that cannot talk (srun without
    # --mpi=pmix) would each run every task: refused.
    env = dict(ENV, SLURM_STEP_NUM_TASKS="3")
    rc, out, err = run(gr_cmd(gr, "--joblog", d + "/jl", d + "/t"), 60,
                       env=env)
    check(rc == 255 and b"one of 3 processes" in err,
          "without wire-up: exit %d: %s" % (rc, err.decode()))
    check(not os.path.exists(d + "/rec"), "a task ran without wire-up")
    shutil.rmtree(d)
    return 0


def t_rank_gpus(gr, probe):
    """Each rank uses the GPUs it was given: ranks 0 and 1 inherit
    CUDA_VISIBLE_DEVICES=0,1 and 2,3 (as Slurm sets it per node) and are
    given --gpus 0,1, which means the elements of their own list; rank 2
    has fake GPUs. Tasks see their rank's GPUs only, one per slot."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("rankgpus")
    tasks(d, probe, 60, 20)
    cmd = mpmd(m, ["-x", "CUDA_VISIBLE_DEVICES=0,1", gr, "--gpus", "0,1",
                   d + "/t"],
               ["-x", "CUDA_VISIBLE_DEVICES=2,3", gr, "--gpus", "0,1",
                d + "/t"],
               gr_cmd(gr, d + "/t"))
    rc, out, err = run(cmd, 120, env=ENV)
    check(rc == 0, "exit %d: %s" % (rc, err.decode()[-2000:]))
    recs = records(d + "/rec")
    check(sorted(r["seq"] for r in recs) == list(range(1, 61)),
          "%d records" % len(recs))
    want = {0: {"0", "1"}, 1: {"2", "3"}, 2: {"fake0", "fake1"}}
    seen = {}
    for r in recs:
        seen.setdefault(r["rank"], set()).add(r["cvd"])
        check(r["cvd"] == sorted(want[r["rank"]])[r["gpu"]],
              "task %d on rank %d GPU %d saw CUDA_VISIBLE_DEVICES=%s"
              % (r["seq"], r["rank"], r["gpu"], r["cvd"]))
    check(seen == want, "GPUs seen per rank: %r" % seen)
    shutil.rmtree(d)
    return 0


def t_srun(gr, probe):
    """Under a real single-node Slurm (test/mpi/slurm.sh, as root, skipped
    without it): srun -n 3 --mpi=pmix gpupool-run runs every task once,
    on all three ranks, one joblog. srun may exit 0 when a launch fails:
    the ranks are counted from what the tasks saw."""
    if os.geteuid() != 0 or shutil.which("srun", path=os.environ.get(
            "PATH", "") + ":/usr/sbin:/sbin") is None:
        log("needs root and Slurm (slurmctld, slurmd, munge)")
        return SKIP
    d = tmpdir("srun")
    n = 120
    tasks(d, probe, n, 20)
    rc, out, err = run([os.path.join(here, "slurm.sh"), "srun", "-n",
                        str(RANKS), "--mpi=pmix"] +
                       gr_cmd(gr, "--joblog", d + "/jl", d + "/t"), 120,
                       env=ENV)
    if rc == SKIP:
        log(err.decode().strip())
        return SKIP
    check(rc == 0, "exit %d: %s" % (rc, err.decode()[-2000:]))
    recs = records(d + "/rec")
    check(sorted(r["seq"] for r in recs) == list(range(1, n + 1)),
          "%d task records, not each task once" % len(recs))
    check({r["rank"] for r in recs} == set(range(RANKS)),
          "ranks that ran tasks: %r" % {r["rank"] for r in recs})
    exclusive(recs)
    once(d + "/jl", n)
    shutil.rmtree(d)
    return 0


def threads(pid):
    """How many threads pid has (0 when it is gone)."""
    try:
        return len(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return 0


def busy_workers(rank_pid):
    """The children of a rank's process that run a task (have a child):
    its workers, while every slot is busy."""
    return {w for w in children(rank_pid) if children(w)}


def t_worker_killed(gr, probe):
    """A worker of rank 1 SIGKILLed mid-task: the process that forks every
    rank's workers, the first and the replacement, has exactly one thread
    (MPI's threads live elsewhere: gpupool.h wants pools created, and
    workers forked, single-threaded); the worker is replaced, its task
    runs again (--retries 1), and each task succeeds exactly once.
    Tasks hold their slots until the test creates a file, so the kill
    finds every slot busy and the replacement is seen at work."""
    m = mpirun()
    if m is None:
        return SKIP
    become_subreaper()
    d = tmpdir("workerkill")
    n = 30
    write_tasks(d + "/t", ["%s record %s/rec 0; while [ ! -e %s/go ]; do "
                           "sleep 0.02; done" % (probe, d, d)] * n)
    cmd = m + gr_cmd(gr, "--joblog", d + "/jl", "--retries", "1",
                     d + "/t")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=ENV, start_new_session=True)
    most = {}

    def wait_for(what, cond):
        end = time.monotonic() + 60
        while True:
            for pid in ranks.values():
                most[pid] = max(most.get(pid, 0), threads(pid))
            if cond():
                return
            check(time.monotonic() < end and p.poll() is None,
                  "the run ended or stalled before %s" % what)
            time.sleep(0.02)

    try:
        ranks = {rank_of(pid): pid for pid in rank_pids(p.pid)}
        slots = RANKS * GPUS
        wait_for("every slot ran a task", lambda: os.path.exists(
            d + "/rec") and started(d + "/rec") >= slots and all(
            len(busy_workers(pid)) == GPUS for pid in ranks.values()))
        old = busy_workers(ranks[1])
        victim = sorted(old)[0]
        log("rank 1 (pid %d): workers %r; SIGKILL to %d"
            % (ranks[1], sorted(old), victim))
        os.kill(victim, signal.SIGKILL)
        wait_for("rank 1 replaced its worker", lambda: len(
            busy_workers(ranks[1]) - old) == 1 and len(
            busy_workers(ranks[1])) == GPUS)
        new = busy_workers(ranks[1]) - old
        log("replacement: %r" % new)
        with open(d + "/go", "w"):
            pass
        out, err = p.communicate(timeout=120)
    except (Fail, subprocess.TimeoutExpired):
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    err = err.decode()
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, err[-2000:]))
    check("%d ok, 0 failed" % n in err, "summary: %s" % err[-1000:])
    check(all(most[pid] == 1 for pid in ranks.values()), "threads in the "
          "process that forks the workers, by rank: %r"
          % {r: most[pid] for r, pid in ranks.items()})
    recs = once(d + "/jl", n)
    bad = [r for r in recs if not ok(r)]
    check(len(bad) == 1 and bad[0]["sig"] == signal.SIGKILL,
          "the killed worker's task: %r" % bad)
    assert_no_leftovers("after the run")
    shutil.rmtree(d)
    return 0


def t_mpi_killed(gr, probe):
    """Rank 1's MPI process (gpupool-run's child that makes its MPI calls)
    SIGKILLed mid-run: rank 1 says so once, stops its tasks and exits 255,
    the launcher ends the job with no process left, and --resume-failed
    completes it with each task succeeding exactly once."""
    def pick(mp, ranks):
        kids = [c for c in children(ranks[1]) if comm(c) == "gpupool-mpi"]
        check(len(kids) == 1, "rank 1's MPI process: %r" % kids)
        return kids[0]
    k = kill_run(gr, probe, "mpikill", pick)
    if k is None:
        return SKIP
    m, d, rc, err = k
    check(rc != 0, "mpirun exited 0 after rank 1's MPI process was killed")
    check(err.count("(rank 1): MPI: its process") == 1, "rank 1 did not "
          "say once that its MPI process is gone: %s" % err[-2000:])
    assert_no_leftovers("after rank 1's MPI process was killed", wait=15)
    resume_failed(m, gr, d)
    return 0


def t_stuck_mpi_signal(gr, probe):
    """Rank 0's MPI process stops reading (SIGSTOP: as when MPI blocks it
    in a receive from a hung peer) while rank 0 hands tasks to the other
    ranks, more bytes of them than the socket between the two holds, so
    rank 0 waits to send. A SIGTERM to rank 0 is acted on then (it says
    so), not once its MPI process reads again. After SIGCONT the run ends
    with no process left. Tasks come from a pipe, so that they reach rank
    0 only once its MPI process is stopped; 20 quick ones first show that
    the run has started (rank 0 starts none before every rank's hello)."""
    m = mpirun()
    if m is None:
        return SKIP
    become_subreaper()
    d = tmpdir("stuckmpi")
    quick = 20
    # Under 128 KiB: one argument of sh -c.
    big = "true #%s\n" % ("x" * 120000)
    p = subprocess.Popen(m + gr_cmd(gr, "--rank-timeout", "600s", "-"),
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=open(d + "/err", "wb"), env=ENV,
                         start_new_session=True)
    mpi = None

    def wait_for(what, cond):
        end = time.monotonic() + 60
        while not cond():
            check(time.monotonic() < end and p.poll() is None,
                  "the run ended or stalled before %s" % what)
            time.sleep(0.02)

    def said(s):
        with open(d + "/err") as f:
            return s in f.read()

    def sending(pid):
        # In frame_send()'s poll(2) (ppoll on arm64), with no timeout, on
        # the socket (and the signalfd): the pool's loop polls more fds.
        try:
            with open("/proc/%d/syscall" % pid) as f:
                w = f.read().split()
        except OSError:
            return False
        return len(w) > 3 and int(w[2], 16) <= 2 and (
            w[0] == "7" and int(w[3], 16) & 0xffffffff == 0xffffffff or
            w[0] == "73" and w[3] == "0x0")

    def feed():
        try:
            p.stdin.write(big.encode() * 10)
            p.stdin.close()
        except OSError:
            pass    # the run stopped reading

    try:
        ranks = {rank_of(pid): pid for pid in rank_pids(p.pid)}
        p.stdin.write(("%s record %s/rec 0\n" % (probe, d)).encode() *
                      quick)
        p.stdin.flush()
        wait_for("the quick tasks to run", lambda:
                 os.path.exists(d + "/rec") and
                 len(records(d + "/rec")) == quick)
        kids = [c for c in children(ranks[0]) if comm(c) == "gpupool-mpi"]
        check(len(kids) == 1, "rank 0's MPI process: %r" % kids)
        mpi = kids[0]
        os.kill(mpi, signal.SIGSTOP)
        threading.Thread(target=feed, daemon=True).start()
        wait_for("rank 0 to wait to send tasks", lambda: sending(ranks[0]))
        log("rank 0 (pid %d) waits to send; SIGTERM" % ranks[0])
        os.kill(ranks[0], signal.SIGTERM)
        wait_for("rank 0 to act on SIGTERM", lambda: said("got SIGTERM"))
        os.kill(mpi, signal.SIGCONT)
        p.wait(timeout=120)
    except (Fail, subprocess.TimeoutExpired):
        with open(d + "/err") as f:
            log("stderr: %s" % f.read()[-2000:])
        if mpi is not None:
            os.kill(mpi, signal.SIGCONT)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    with open(d + "/err") as f:
        err = f.read()
    check(p.returncode != 0, "mpirun exited 0 after rank 0's SIGTERM")
    check(err.count("got SIGTERM: stopping") == 1, "stderr: %s"
          % err[-2000:])
    assert_no_leftovers("after the run", wait=15)
    shutil.rmtree(d)
    return 0


def t_results(gr, probe):
    """--results DIR over 3 ranks: only rank 0 locks DIR (the ranks of one
    run would lock one another out), every task runs exactly once, every
    rank runs some, and DIR/SEQ/ holds each task's stdout, stderr and
    exitval."""
    m = mpirun()
    if m is None:
        return SKIP
    d = tmpdir("results")
    n = 60
    write_tasks(d + "/t", ["%s record %s/rec 0; echo out $GPUPOOL_TASK; "
                           "echo err $GPUPOOL_TASK >&2" % (probe, d)] * n)
    rc, out, err = run(m + gr_cmd(gr, "--joblog", d + "/jl", "--results",
                       d + "/res", d + "/t"), 120, env=ENV)
    check(rc == 0, "exit %d: %s" % (rc, err.decode()[-2000:]))
    recs = records(d + "/rec")
    check(sorted(r["seq"] for r in recs) == list(range(1, n + 1)),
          "probe records: %d, not each task once" % len(recs))
    check({r["rank"] for r in recs} == set(range(RANKS)),
          "ranks that ran tasks: %r" % {r["rank"] for r in recs})
    once(d + "/jl", n)
    for s in range(1, n + 1):
        for name, want in (("stdout", "out %d\n" % s),
                           ("stderr", "err %d\n" % s), ("exitval", "0\n")):
            path = "%s/res/%d/%s" % (d, s, name)
            check(os.path.exists(path), "no %s" % path)
            with open(path) as f:
                got = f.read()
            check(got == want, "%s: %r, not %r" % (path, got, want))
    shutil.rmtree(d)
    return 0


def holds(pid, path):
    """Whether process pid has a descriptor on path (stat, never open:
    the caller may hold a POSIX lock on it, which any close drops)."""
    want = os.stat(path)
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
            return True
    return False


def t_wait_lock(gr, probe):
    """--wait-lock under mpirun while another process holds the joblog:
    rank 0 waits with the run's signals blocked (under MPI they are from
    the start), and a signal still ends the wait and the job: SIGTERM to
    rank 0, then SIGTERM to the whole process group (as scancel sends
    it). Each time the job ends, no task runs, the joblog is untouched,
    no process is left."""
    m = mpirun()
    if m is None:
        return SKIP
    become_subreaper()
    d = tmpdir("waitlock")
    tasks(d, probe, 10, 10)
    jl = d + "/jl"
    with open(jl, "w") as f:
        f.write("Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\t"
                "Exitval\tSignal\tCommand\tGPU\n")
    size = os.stat(jl).st_size
    holder = open(jl, "a")
    fcntl.lockf(holder, fcntl.LOCK_EX)   # a POSIX lock: it conflicts
    try:
        for to in ("rank 0", "the group"):
            p = subprocess.Popen(m + gr_cmd(gr, "--joblog", jl,
                                 "--wait-lock", d + "/t"),
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=ENV,
                                 start_new_session=True)
            try:
                ranks = {rank_of(pid): pid for pid in rank_pids(p.pid)}
                end = time.monotonic() + 60
                while not holds(ranks[0], jl):
                    check(time.monotonic() < end and p.poll() is None,
                          "rank 0 did not get to the joblog's lock")
                    time.sleep(0.02)
                log("rank 0 (pid %d) waits for the lock; SIGTERM to %s"
                    % (ranks[0], to))
                if to == "rank 0":
                    os.kill(ranks[0], signal.SIGTERM)
                else:
                    os.killpg(p.pid, signal.SIGTERM)
                out, err = p.communicate(timeout=60)
            except (Fail, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                raise Fail("SIGTERM to %s did not end the wait" % to)
            err = err.decode()
            check(p.returncode != 0, "SIGTERM to %s: exit 0" % to)
            if to == "rank 0":
                check("got SIGTERM while waiting for joblog" in err,
                      "SIGTERM to rank 0: %s" % err[-2000:])
            check(not os.path.exists(d + "/rec"), "a task ran")
            check(os.stat(jl).st_size == size, "the joblog was written")
            assert_no_leftovers("after SIGTERM to %s" % to, wait=15)
    finally:
        holder.close()
    shutil.rmtree(d)
    return 0


TESTS = {
    "exactly-once": t_exactly_once,
    "skew": t_skew,
    "resume": t_resume,
    "rank-killed": t_rank_killed,
    "rank-lost": t_rank_lost,
    "rank-stopped": t_rank_stopped,
    "stdin-halt": t_stdin_halt,
    "timeout-retries": t_timeout_retries,
    "start-fail": t_start_fail,
    "rank-gpus": t_rank_gpus,
    "worker-killed": t_worker_killed,
    "mpi-killed": t_mpi_killed,
    "stuck-mpi-signal": t_stuck_mpi_signal,
    "srun": t_srun,
    "results": t_results,
    "wait-lock": t_wait_lock,
}

if __name__ == "__main__":
    main(TESTS)
