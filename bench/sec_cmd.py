"""sec_cmd.py: the command runners' section: validation, throughput on
1000 x true and sleep, skewed sleeps, pile-up and footprint."""
import os

from common import SLOTS, greedy, log, pareto, ratio_stats, rotate, stats
from peers import run_runner, write_tasks


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
    """res["command_runner"]: every runner validated, then the throughput
    workloads, the skewed sleeps and the pile-up."""
    sec = res["command_runner"] = {
        "slots": SLOTS, "runners": {r.name: {"label": r.label,
                                             "note": r.note}
                                    for r in runners}}
    log("command runners: validation")
    sec["validation"] = validate(runners, build, work, cfg["val_n"])
    cmd_workloads(cfg, runners, build, work, sec, notes)
    cmd_skewed(cfg, runners, work, sec, notes)
    cmd_footprint(cfg, runners, work, sec)


def cmd_workloads(cfg, runners, build, work, sec, notes):
    """Throughput workloads. The first task records its start time."""
    stamp = os.path.join(build, "bench", "stamp")
    first = os.path.join(work, "first.stamp")
    n = cfg["cmd_n"]
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
        runs = interleave(runners, tasks, rounds, "command runners: " +
                          title, work, max(120, 30 * ideal), notes,
                          stamp_file=first)
        w = sec["workloads"][key] = {"title": title, "n": n,
                                     "task_s": task_s, "ideal_s": ideal,
                                     "rounds": rounds, "runners": {}}
        for r in runners:
            w["runners"][r.name] = runner_figures(
                runs[r.name], n, ideal, runs["spawn4"],
                runs.get("gpupool-run"))


def interleave(runners, tasks, rounds, title, work, timeout_s, notes,
               stamp_file=None):
    """Every runner on tasks once a round, in an order rotated by one each
    round: {name: [one run a round]}, a failed run's figures None (and
    a note)."""
    runs = {r.name: [] for r in runners}
    for k in range(rounds):
        log("%s, round %d/%d" % (title, k + 1, rounds))
        for r in rotate(runners, k):
            x = run_runner(r, tasks, work, timeout_s, stamp_file=stamp_file)
            if x["status"] != 0:
                notes.append("%s on %s, round %d: exit %s %s" % (
                    r.name, title, k + 1, x["status"],
                    x.get("stderr", "").strip()[-200:]))
                x["wall_s"] = x["cpu_s"] = x["latency_ms"] = None
            runs[r.name].append(x)
    return runs


def runner_figures(rr, n, ideal, raw, gpr):
    """One runner's figures over its runs rr of n tasks (ideal: the wall
    with no overhead), against the raw bound's runs and gpupool-run's of
    the same rounds."""
    walls = [x["wall_s"] for x in rr]
    return {
        "wall_s": stats(walls),
        "cpu_s": stats([x["cpu_s"] for x in rr]),
        "cpu_ms_per_task": stats([x["cpu_s"] and x["cpu_s"] / n * 1e3
                                  for x in rr]),
        "overhead_ms_per_task": stats(
            [wl and (wl - ideal) / n * SLOTS * 1e3 for wl in walls]),
        "latency_ms": stats([x.get("latency_ms") for x in rr]),
        "vs_raw": ratio_stats(rr, raw, "wall_s"),
        "gpupool_speedup": ratio_stats(rr, gpr, "wall_s"),
    }


def cmd_skewed(cfg, runners, work, sec, notes):
    """Skewed: 100 heavy-tailed sleeps, given order and longest first."""
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


def cmd_footprint(cfg, runners, work, sec):
    """Pile-up and footprint, sampled in a pass of their own (the sampler
    costs CPU; no time from this pass is reported)."""
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
