#!/usr/bin/env python3
"""targets.py: the harness's targets carry their spread and the rounds in
which they held (issue 38), and the page shows them: a PASS decided on
the median but held in fewer than all rounds says so; a figure with one
value reads 1/1 or 0/1; the quotes the docs take from the Targets table
stay a number. Also the round trips' CPU reading (bench/py_gpupool.py):
a busy child is found among the descendants, and its CPU time grows. And
the 1 MiB items over ranks: the part over MPI is a target row of its own,
with MPI's spread and the chunk size the map used in its context. And the
pinned round trips' control row: its preexec turns address randomization
off where py_gpupool.py reads it back, and the clean-vs-forked target's
context quotes it (and says when it did not take).

    targets.py BENCH_DIR"""
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
from common import stats  # noqa: E402
from py_gpupool import aslr, cpu_ns, descendants  # noqa: E402
from py_ranks import watch_chunks  # noqa: E402
import quotes  # noqa: E402
from report import md_head  # noqa: E402
from sec_python import pin_norandom  # noqa: E402
from targets import add_target, targets_clean, targets_mib  # noqa: E402


def check(what, ok):
    if not ok:
        sys.exit("FAIL: " + what)


out = []
add_target(out, "a >= 1.0", stats([1.2, 0.9, 1.1, 1.05, 0.95]), ">=", 1.0,
           "b")
add_target(out, "b <= 5 ms", stats([4.5, 5.5, 6.0]), "<=", 5.0, "b",
           fmt="%.2f ms")
add_target(out, "rss <= 4 MiB", stats([3.0, 4.5, 3.9]), "<=", 4.0, "b",
           fmt="%.2f MiB", by="max")
add_target(out, "one >= 2", 2.5, ">=", 2.0, "b")
add_target(out, "none >= 2", None, ">=", 2.0, "b", why_na="no peer")
a, b, rss, one, na = out
check("status on the median", a["status"] == "PASS" and
      b["status"] == "MISS")
check("held counts the rounds that met the limit",
      (a["held"], a["rounds"], b["held"], b["rounds"]) == (3, 5, 1, 3))
check("spread is [min, max]", a["spread"] == [0.9, 1.2])
check("shown: median [min-max], the unit after the median",
      a["shown"] == "1.05 [0.90-1.20]" and
      b["shown"] == "5.50 ms [4.50-6.00]")
check("by max: a run over the limit is a MISS",
      rss["status"] == "MISS" and rss["value"] == 4.5 and rss["held"] == 2)
check("one value: 1/1, no spread", (one["held"], one["rounds"],
                                    one["shown"]) == (1, 1, "2.50"))
check("not measured: N/A, no count", na["status"] == "N/A" and
      na["held"] is None and na["shown"] == "not measured: no peer")

res = {"date": "d", "machine": {"cpu": "c", "cores": 2, "distro": "d",
                                "kernel": "k"},
       "versions": {"gcc": "g", "python": "3"}, "git": {"revision": "0",
                                                         "dirty_paths": 0},
       "build": {"buildtype": "release"}, "load_before": [0, 0, 0],
       "load_after": [0, 0, 0], "quick": False, "command": "c",
       "targets": out}
md = "\n".join(md_head(res))
check("the table's header", "| target | measured [min-max] | rounds held | "
      "status | context |" in md)
check("a PASS not held in every round says so",
      "| a >= 1.0 | 1.05 [0.90-1.20] | 3/5 | **PASS**, not in every round |"
      in md)
check("a MISS is a MISS", "| 5.50 ms [4.50-6.00] | 1/3 | **MISS** |" in md)
check("N/A has no count", "| not measured: no peer | - | **N/A** |" in md)
# docs quote the Targets table's measured cells: the median alone.
quotes.CELLS["t_a"] = ("Targets", "a >= 1.0", "measured", "first")
check("a quote of a measured cell is its median",
      quotes.cell(quotes.tables(md), "t_a") == "1.05")

# The round trips' CPU columns.
pid = os.fork()
if pid == 0:
    t = time.monotonic()
    while time.monotonic() - t < 0.3:
        pass
    os._exit(0)
check("descendants() finds a child", pid in descendants())
c0 = cpu_ns(pid)
time.sleep(0.15)
c1 = cpu_ns(pid)
os.waitpid(pid, 0)
check("cpu_ns() of a busy child grows (%s -> %s)" % (c0, c1),
      c0 is not None and c1 is not None and c1 > c0)
check("cpu_ns() of a reaped child is None", cpu_ns(pid) is None)

# 1 MiB items over ranks: both rows, the over-MPI one on its own figure,
# the sharing-off job's.
def st(*v):
    return stats(list(v))


mib = {"n": 128, "kinds": ["bytes"], "p2p_mb_per_s": st(3000, 9000, 6000),
       "rows": {"bytes": {
           "gpupool": {"mb_per_s": st(2000, 2500), "mpi_mb_per_s":
                       st(900, 1200), "items_over_mpi": st(60, 70),
                       "chunk": st(1, 1)},
           "gpupool-mpi": {"mb_per_s": st(1500, 1800), "mpi_mb_per_s":
                           st(700, 900), "items_over_mpi": st(50, 60)},
           "mb_per_s_over_p2p": st(0.4, 0.6, 0.55),
           "mpi_mb_per_s_over_p2p": st(0.2, 0.3, 0.1)}}}
out = []
targets_mib(out, mib, None)
check("two rows a kind", len(out) == 2)
allr, over = out
check("the over-MPI row is judged on its own ratio, >= 0.25",
      over["target"].startswith("ranks: of 1 MiB items (bytes), sharing "
                                "off (as ranks on other nodes), the part "
                                "over MPI to ranks 1-2 >= 0.25x") and
      over["value"] == 0.2 and over["status"] == "MISS" and
      (over["held"], over["rounds"]) == (1, 3))
check("its context: the sharing-off job's figures, MPI's spread and the "
      "chunk size (%s)" % over["context"],
      "MPI's 6000 [3000-9000] MB/s" in over["context"] and
      "chunks of 1" in over["context"] and
      over["context"].startswith("800 MB/s over MPI (55 of 128 items"))
check("the all-items row as before", allr["value"] == 0.55 and
      allr["status"] == "PASS")
out = []
targets_mib(out, None, "mpi4py not importable")
check("N/A without the section", [t["status"] for t in out] == ["N/A"] * 2)

# The pinned control row: randomization off, read back, quoted.
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    pin_norandom()()
    os.write(w, b"%d" % (aslr() is False))
    os._exit(0)
os.waitpid(pid, 0)
check("pin_norandom() turns randomization off, aslr() sees it",
      os.read(r, 8) == b"1" and aslr() is not False)


def rt_row(over, caller, worker):
    return {"gpupool_over": st(*over), "caller_cpu_us": st(*caller),
            "worker_cpu_us": st(*worker)}


def clean_target(took):
    pn = {"norand_took": took, "impls": {
        "gpupool": rt_row((1, 1), (24, 25), (7, 8)),
        "gpupool-clean": rt_row((1.2, 1.3), (27, 28), (9, 10)),
        "gpupool-clean-norand": rt_row((0.98, 1.02), (24, 25), (7, 8))}}
    rt = {"impls": {"gpupool-clean": rt_row((1.1, 1.3), (50, 52), (18, 19))},
          "pinned": pn}
    out = []
    targets_clean(out, {"trivial": {"by_n": {"1": {}}}, "roundtrip": rt},
                  None, "1")
    return out[1]


t = clean_target(True)
check("the target is judged on the clean row (%s)" % t["value"],
      t["value"] == 1.25 and t["status"] == "MISS")
check("its context quotes the control row (%s)" % t["context"],
      t["context"].endswith("; clean with address randomization off: 1.00x"))
check("and says when randomization stayed on",
      "not turned off in every run" in clean_target(False)["context"])


class FakePool:
    def _chunksize(self, n, first=None):
        return max(1, n // 12)


p = FakePool()
used = watch_chunks(p)
p._chunksize(128, b"x")
check("watch_chunks() sees the chunk size the pool computes", used == [10])
check("watch_chunks() of a pool without one: stays empty",
      watch_chunks(object()) == [])
print("ok: targets carry spread and rounds held; CPU read per process; "
      "the over-MPI row; the pinned control row")
