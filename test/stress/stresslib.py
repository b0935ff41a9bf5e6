"""Helpers shared by the gpupool stress tests (stress.py).

Only the standard library: meson is a Python program, so python3 is there
wherever the tests are built.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def log(*a):
    print(*a, flush=True)


def become_subreaper():
    """Orphans of anything we start are reparented to us, not to init: an
    orphan that survives a run then shows up as our child."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def stat(pid):
    """(state, ppid, starttime) of pid, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[19])


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def children(pid):
    """Direct children of pid (all its threads), from /proc."""
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        c = children(todo.pop())
        out += c
        todo += c
    return out


def alive(pid):
    st = stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def reap_all():
    """Reap whatever children of ours have exited (orphans we adopted)."""
    n = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return n
        if pid == 0:
            return n
        n += 1


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def assert_no_leftovers(what, wait=5.0):
    """No child of ours (adopted orphans included) is left, and none is a
    zombie; waits up to `wait` seconds for stragglers to go."""
    end = time.monotonic() + wait
    while True:
        reap_all()
        left = [(p, comm(p), stat(p)) for p in children(os.getpid())]
        if not left:
            return
        if time.monotonic() > end:
            raise Fail("%s: processes left behind (pid, comm, stat): %r"
                       % (what, left))
        time.sleep(0.05)


def parse_joblog(path):
    """Joblog lines as dicts; the header is checked; a torn last line (fewer
    than 10 fields) is returned separately."""
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", "replace")
    lines = data.split("\n")
    check(lines and lines[0].startswith("Seq\tHost\tStarttime"),
          "%s: bad joblog header %r" % (path, lines[:1]))
    recs, torn = [], []
    for i, line in enumerate(lines[1:]):
        if line == "":
            continue
        # Seq Host Starttime JobRuntime Send Receive Exitval Signal
        # Command GPU GPUMem GPUUtil: TABs in a command are escaped.
        f = line.split("\t")
        if len(f) < 12:
            torn.append(line)
            continue
        try:
            recs.append({"seq": int(f[0]), "host": f[1],
                         "start": float(f[2]),
                         "runtime": float(f[3]), "exit": int(f[6]),
                         "sig": int(f[7]), "cmd": f[8],
                         "gpu": f[9]})
        except ValueError:
            torn.append(line)
    return recs, torn


def ok(rec):
    return rec["exit"] == 0 and rec["sig"] == 0


def by_seq(recs):
    d = {}
    for r in recs:
        d.setdefault(r["seq"], []).append(r)
    return d


def run(cmd, timeout, input=None, **kw):
    """subprocess.run bounded by `timeout`, with `input` (bytes) on its
    standard input if given; on expiry the whole group is SIGKILLed and
    Fail raised (a hang is a failure, never a stuck CI)."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    p = subprocess.Popen(cmd, stdout=kw.pop("stdout", subprocess.PIPE),
                         stderr=kw.pop("stderr", subprocess.PIPE),
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Fail("hang: %r did not end within %ss" % (cmd, timeout))
    return p.returncode, out, err


def write_tasks(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(line + "\n")


def main(tests):
    """stress.py NAME GPUPOOL_RUN [HELPER_DIR]"""
    if len(sys.argv) < 3 or sys.argv[1] not in tests:
        sys.exit("usage: %s {%s} GPUPOOL_RUN [BUILD_DIR]"
                 % (sys.argv[0], "|".join(tests)))
    t0 = time.monotonic()
    try:
        args = [os.path.abspath(a) for a in sys.argv[2:]]
        rc = tests[sys.argv[1]](*args)
    except Fail as e:
        log("FAIL %s: %s" % (sys.argv[1], e))
        sys.exit(1)
    log("%s %s in %.1fs" % ("SKIP" if rc == 77 else "PASS", sys.argv[1],
                            time.monotonic() - t0))
    sys.exit(rc or 0)
