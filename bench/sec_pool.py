"""sec_pool.py: pool_map against Python's pools: one item in flight,
trivial items, skewed items, the payload sweep against memcpy."""
import os
import statistics
import sys

from common import (HERE, PSKEW, SLOTS, greedy, log, med, pair_ratios,
                    pareto, rotate, stats)
from peers import json_lines, one


def pin_first_cpu():
    cpu = min(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {cpu})


def pool_section(cfg, build, work, res, notes):
    """res["pool_map"]: bench_pool's measurements against py_pool.py's."""
    bp = os.path.join(build, "bench", "bench_pool")
    pyp = [sys.executable, os.path.join(HERE, "py_pool.py")]
    sec = res["pool_map"] = {"workers": SLOTS}
    pool_roundtrip(cfg, bp, sec)
    pool_trivial(cfg, bp, pyp, sec)
    pool_skewed(cfg, bp, pyp, work, sec)
    pool_payload(cfg, bp, pyp, sec)


def pool_roundtrip(cfg, bp, sec):
    """One item in flight: blocks of round trips, raw pipe / raw socketpair
    / pool interleaved inside one process; pinned to one CPU (the worker
    keeps that affinity: GP_POOL_NO_BIND), and free."""
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


def pool_trivial(cfg, bp, pyp, sec):
    """Trivial items: x * 2 on an int."""
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


def pool_skewed(cfg, bp, pyp, work, sec):
    """Skewed item durations, given order and longest first."""
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


def pool_payload(cfg, bp, pyp, sec):
    """Payload sweep: echo SIZE bytes; this machine's memcpy of SIZE bytes
    in the same rounds, so each round gives pool_map's share of it."""
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
    """Per-round items/s ratios of implementation a to b at N=n in a
    trivial-items measurement, as stats() (None when either did not
    run)."""
    x = tr["by_n"][n]
    if a not in x or b not in x:
        return None
    if a == "gpupool":
        return x[b]["gpupool_over"]
    ga, gb = x[a]["gpupool_over"], x[b]["gpupool_over"]
    # gpupool / b over gpupool / a, round by round.
    if not ga or not gb:
        return None
    va, vb = ga.get("values") or [], gb.get("values") or []
    return stats([q / p for p, q in zip(va, vb) if p and q])


def memcpy_n(bp, size, seconds=0.3):
    """How many memcpys of size bytes take about seconds here: a short
    probe (64 MiB copied) gives the rate."""
    n = max(1, 2 ** 26 // size)
    x = one([bp, "memcpy", str(size), str(n)])
    bps = (x.get("mb_per_s") or 0) * 1e6
    return max(4, min(10 ** 9, int(seconds * bps / size))) if bps else n
