"""sec_claims.py: what host-wide GPU claims cost a run that has the
machine to itself, and how runs started together share the GPUs
(issue 34): a claim and its release (bench_claim), N x true with claims
on and off against the raw bound, two sweeps at once, and a short run
beside a long sweep."""
import os
import threading
import time

from common import SLOTS, log, med, rotate, stats
from peers import Runner, base_env, json_lines, write_tasks
from sec_cmd import interleave, runner_figures
from supervise import kill_tree, reap_all


def claims_section(cfg, runners, build, work, res, notes):
    """res["claims"]: the four measurements, each in claims directories
    of its own under work."""
    gpr = os.path.join(build, "src", "cli", "gpupool-run")
    raw = [r for r in runners if r.name == "spawn4"]
    if not os.access(gpr, os.X_OK) or not raw:
        notes.append("claims not measured: gpupool-run not built at %s"
                     % gpr)
        return
    sec = res["claims"] = {}
    claim_cost(cfg, build, work, sec)
    claims_true(cfg, raw[0], gpr, build, work, sec, notes)
    two_sweeps(cfg, gpr, build, work, sec, notes)
    beside(cfg, gpr, build, work, sec, notes)


def claim_cost(cfg, build, work, sec):
    """bench_claim: claim + release of one GPU, alone in the table and
    with other processes' slots in it."""
    bc = os.path.join(build, "bench", "bench_claim")
    log("claims: claim + release, %d x %d" % (cfg["claim_blocks"],
                                              cfg["claim_iters"]))
    rows = json_lines([bc, os.path.join(work, "claims-cost"),
                       str(cfg["claim_iters"]), str(cfg["claim_blocks"])],
                      timeout=120)
    sec["cost"] = {"iters": cfg["claim_iters"], "cases": {}}
    for case in ("alone", "others"):
        rr = [x for x in rows if x["case"] == case]
        if rr:
            sec["cost"]["cases"][case] = {
                "others": rr[0]["others"],
                "us": stats([x["us"] for x in rr]),
                "try_us": stats([x["try_us"] for x in rr]),
                "drop_us": stats([x["drop_us"] for x in rr]),
                "cpu_us": stats([x["cpu_us"] for x in rr])}


def claims_true(cfg, raw, gpr, build, work, sec, notes):
    """N x true: gpupool-run with claims on (a private directory) and
    off, against the raw posix_spawn bound, interleaved."""
    stamp = os.path.join(build, "bench", "stamp")
    first = os.path.join(work, "claims-first.stamp")
    n = cfg["cmd_n"]
    on = Runner("claims-on", "gpupool-run --fake-gpus 4 (claims on)",
                lambda t: [gpr, "--fake-gpus", str(SLOTS), "--quiet", t],
                env={"GPUPOOL_CLAIMS": os.path.join(work, "claims-true")})
    off = Runner("claims-off", "gpupool-run --fake-gpus 4 --claims none",
                 lambda t: [gpr, "--claims", "none", "--fake-gpus",
                            str(SLOTS), "--quiet", t])
    rs = [raw, on, off]
    tasks = write_tasks(os.path.join(work, "claims-true.tasks"),
                        ["%s %s first" % (stamp, first)] +
                        ["true"] * (n - 1))
    runs = interleave(rs, tasks, cfg["claims_true_rounds"],
                      "claims: %d x true, on and off" % n, work, 120, notes,
                      stamp_file=first)
    t = sec["true"] = {"n": n, "rounds": cfg["claims_true_rounds"],
                       "labels": {r.name: r.label for r in rs},
                       "runners": {}}
    for r in rs:
        x = t["runners"][r.name] = runner_figures(
            runs[r.name], n, 0.0, runs["spawn4"], None)
        del x["gpupool_speedup"]
        x["vs_off"] = stats([a["wall_s"] / b["wall_s"] for a, b in zip(
            runs[r.name], runs["claims-off"])
            if a["wall_s"] and b["wall_s"]])
    # What claims add a task, in CPU: (on - off) / n, per round.
    t["cpu_us_per_task_added"] = stats([
        (a["cpu_s"] - b["cpu_s"]) / n * 1e6 for a, b in zip(
            runs["claims-on"], runs["claims-off"])
        if a["cpu_s"] is not None and b["cpu_s"] is not None])


def launch(argv, env, errpath):
    fa = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, errpath,
           os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
    return os.posix_spawn(argv[0], argv, env, file_actions=fa, setpgroup=0)


def together(jobs, claims, work, timeout_s):
    """Runs gpupool-run jobs [(name, tasks file, delay_s)] in one claims
    directory, each launched delay_s after the first: {name: {"wall_s"
    (from its own launch to its exit), "cpu_s" (its and its tasks' user +
    system time), "status"}}."""
    env = base_env()
    env["GPUPOOL_CLAIMS"] = claims
    reap_all()
    t0 = time.perf_counter()
    pids, start = {}, {}
    for name, argv, delay in sorted(jobs, key=lambda j: j[2]):
        d = t0 + delay - time.perf_counter()
        if d > 0:
            time.sleep(d)
        start[name] = time.perf_counter()
        pids[launch(argv, env, os.path.join(
            work, "claims-%s.stderr" % name))] = name
    timer = threading.Timer(timeout_s, lambda: [kill_tree(p) for p in pids])
    timer.start()
    out = {}
    while len(out) < len(pids):
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            break
        if pid in pids:
            name = pids[pid]
            out[name] = {"wall_s": time.perf_counter() - start[name],
                         "cpu_s": ru.ru_utime + ru.ru_stime,
                         "status": os.waitstatus_to_exitcode(status)}
    timer.cancel()
    reap_all()
    for name in pids.values():
        out.setdefault(name, {"wall_s": None, "cpu_s": None,
                              "status": None})
        if out[name]["status"] != 0:
            out[name]["wall_s"] = None
    return out


def sweep_tasks(build, work, name, n, ms):
    """n tasks of ms milliseconds that record when and on which GPU they
    ran, into a file of their own: (tasks file, record file)."""
    stamp = os.path.join(build, "bench", "stamp")
    rec = os.path.join(work, "claims-%s.rec" % name)
    if os.path.exists(rec):
        os.unlink(rec)
    return write_tasks(os.path.join(work, "claims-%s.tasks" % name),
                       ["%s %s %d %d" % (stamp, rec, i, ms)
                        for i in range(1, n + 1)]), rec


def records(rec):
    try:
        with open(rec) as f:
            return [(int(x[1]), int(x[2]), x[3]) for x in
                    (line.split() for line in f) if len(x) == 4]
    except OSError:
        return []


def clashes(a, b):
    """Pairs of a task of a and one of b that ran at once on one GPU."""
    return sum(1 for s1, e1, g1 in a for s2, e2, g2 in b
               if g1 == g2 and s1 < e2 and s2 < e1)


def two_sweeps(cfg, gpr, build, work, sec, notes):
    """Two sweeps of n x 10 ms started together in one claims directory,
    against one alone, interleaved round by round."""
    n, rounds = cfg["sweep_n"], cfg["sweep_rounds"]
    argv = [gpr, "--fake-gpus", str(SLOTS), "--quiet"]
    runs, bad = [], 0
    for k in range(rounds):
        log("claims: two sweeps of %d x 10 ms at once, round %d/%d" % (
            n, k + 1, rounds))
        x = {}
        for what in rotate(["alone", "pair"], k):
            d = os.path.join(work, "claims-sweep-%d-%s" % (k, what))
            if what == "alone":
                t, rec = sweep_tasks(build, work, "alone", n, 10)
                r = together([("alone", argv + [t], 0.0)], d, work, 120)
                x["alone"] = r["alone"]["wall_s"]
                x["alone_cpu"] = r["alone"]["cpu_s"]
                x["alone_ran"] = len(records(rec))
                continue
            ta, ra = sweep_tasks(build, work, "a", n, 10)
            tb, rb = sweep_tasks(build, work, "b", n, 10)
            r = together([("a", argv + [ta], 0.0), ("b", argv + [tb], 0.0)],
                         d, work, 120)
            x["a"], x["b"] = r["a"]["wall_s"], r["b"]["wall_s"]
            x["pair_cpu"] = [r["a"]["cpu_s"], r["b"]["cpu_s"]]
            a, b = records(ra), records(rb)
            x["ran"] = [len(a), len(b)]
            x["clashes"] = clashes(a, b)
        if None in (x["alone"], x["a"], x["b"]) or x["ran"] != [n, n]:
            bad += 1
            notes.append("claims: two sweeps, round %d: a run failed or "
                         "lost tasks (%s)" % (k + 1, x))
        runs.append(x)
    ok = [x for x in runs if None not in (x["alone"], x["a"], x["b"])]
    first = [min(x["a"], x["b"]) for x in ok]
    last = [max(x["a"], x["b"]) for x in ok]
    sec["sweeps"] = {
        "n": n, "task_ms": 10, "rounds": rounds, "failed_rounds": bad,
        "alone_s": stats([x["alone"] for x in ok]),
        "first_s": stats(first), "last_s": stats(last),
        "first_over_alone": stats([f / x["alone"]
                                   for f, x in zip(first, ok)]),
        "last_over_alone": stats([s / x["alone"] for s, x in zip(last, ok)]),
        "first_over_ideal": stats([f / (2 * x["alone"])
                                   for f, x in zip(first, ok)]),
        "last_over_ideal": stats([s / (2 * x["alone"])
                                  for s, x in zip(last, ok)]),
        "alone_cpu_s": stats([x["alone_cpu"] for x in ok]),
        "pair_cpu_s": stats([c for x in ok for c in x["pair_cpu"]]),
        "clashes": sum(x.get("clashes", 0) for x in runs),
        "values": runs}


def beside(cfg, gpr, build, work, sec, notes):
    """A short run started beside a long sweep (once the sweep holds
    every GPU) against the same short run alone."""
    nl, ns, delay = cfg["beside_long"], cfg["beside_short"], 0.1
    rounds = cfg["beside_rounds"]
    argv = [gpr, "--fake-gpus", str(SLOTS), "--quiet"]
    runs = []
    for k in range(rounds):
        log("claims: %d x 10 ms beside %d x 10 ms, round %d/%d" % (
            ns, nl, k + 1, rounds))
        x = {}
        for what in rotate(["alone", "beside"], k):
            d = os.path.join(work, "claims-beside-%d-%s" % (k, what))
            ts, rs = sweep_tasks(build, work, "short", ns, 10)
            if what == "alone":
                r = together([("short", argv + [ts], 0.0)], d, work, 60)
                x["alone"] = r["short"]["wall_s"]
                continue
            tl, rl = sweep_tasks(build, work, "long", nl, 10)
            r = together([("long", argv + [tl], 0.0),
                          ("short", argv + [ts], delay)], d, work, 120)
            x["short"], x["long"] = r["short"]["wall_s"], r["long"]["wall_s"]
            s, lg = records(rs), records(rl)
            x["ran"] = [len(s), len(lg)]
            x["clashes"] = clashes(s, lg)
            # Whether the short run ran inside the sweep, not after it.
            x["long_busy_after"] = bool(s and lg and
                                        max(e for _, e, _ in lg) >
                                        max(e for _, e, _ in s))
        if None in (x["alone"], x["short"], x["long"]) or \
                x["ran"] != [ns, nl]:
            notes.append("claims: short beside long, round %d: a run "
                         "failed or lost tasks (%s)" % (k + 1, x))
        runs.append(x)
    ok = [x for x in runs if None not in (x["alone"], x["short"],
                                          x["long"])]
    sec["beside"] = {
        "short": ns, "long": nl, "task_ms": 10, "delay_s": delay,
        "rounds": rounds,
        "alone_s": stats([x["alone"] for x in ok]),
        "short_s": stats([x["short"] for x in ok]),
        "long_s": stats([x["long"] for x in ok]),
        "short_over_alone": stats([x["short"] / x["alone"] for x in ok]),
        "short_in_tasks": stats([x["short"] / 0.010 for x in ok]),
        "inside_sweep": sum(1 for x in ok if x["long_busy_after"]),
        "clashes": sum(x.get("clashes", 0) for x in runs),
        "values": runs}


def claims_context(sec):
    """A line for the targets' context: claims off against the raw
    bound."""
    off = sec["true"]["runners"].get("claims-off")
    return off and med(off["vs_raw"]) and \
        "claims off: %.2fx the raw bound; on / off %.3fx" % (
            med(off["vs_raw"]),
            med(sec["true"]["runners"]["claims-on"]["vs_off"]))
