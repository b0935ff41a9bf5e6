"""supervise.py: every runner is a descendant of this process.
We are a child subreaper, so what runners leave behind (task-spooler's
server, its per-job clients) is re-parented to us, counted in the
process tree while it lives, reaped by us (its CPU time lands in
RUSAGE_CHILDREN), and never outlives a run unseen."""
import ctypes
import json
import os
import signal
import subprocess
import threading
import time


def become_subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0    # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def proc_table():
    """{pid: (ppid, state, rss_pages, comm, cpu_ticks)} for every process
    (cpu_ticks: its user + system time, in clock ticks)."""
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
                     s[s.index(b"(") + 1:r].decode(errors="replace"),
                     int(f[11]) + int(f[12]))
    return t


def descendants(table, root):
    kids = {}
    for pid, (ppid, *_) in table.items():
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


def tree_job(section, argv, env, cwd, timeout_s, notes, what):
    """The JSON lines a job prints, run in a session of its own; [] and a
    note (section: what) when it fails, hangs (its whole tree killed) or
    leaves a process behind (killed)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=cwd, start_new_session=True)
    try:
        so, se = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(p.pid)
        so, se = p.communicate()
        notes.append("%s: %s: killed after %d s; stderr: %s" % (
            section, what, timeout_s, se.strip()[-300:]))
        reap_all()
        return []
    left = reap_all()
    if left:
        notes.append("%s: %s: %d processes outlived it (killed)" % (
            section, what, len(left)))
    lines = [json.loads(x) for x in so.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        notes.append("%s: %s: exit %d: %s" % (section, what, p.returncode,
                                              se.strip()[-300:]))
        return []
    return lines
