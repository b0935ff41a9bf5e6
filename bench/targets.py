"""targets.py: the targets of issue 4, each PASS, MISS or N/A (a target
whose inputs were not measured)."""
import functools
import re

from common import MIB, med, stats
from fmt import fmt_m, fmt_n, fmt_s, fmt_si
from sec_pool import pair_ratios_of


def targets(res, skipped):
    """Every target of the run, in the order the page lists them."""
    out = []
    if res.get("command_runner"):
        targets_cmd(out, res["command_runner"], skipped)
    if res.get("pool_map"):
        targets_pool(out, res["pool_map"])
    py = res.get("python")
    na = res.get("python_skipped")
    if py or na:
        targets_python(out, py, na)
        targets_warm(out, py, na)
    ck = py and py.get("checkpoint")
    if ck or na:
        targets_checkpoint(out, ck, na)
    if res.get("mpi"):
        targets_mpi(out, res["mpi"])
    if res.get("ranks") or res.get("ranks_skipped"):
        targets_ranks(out, res.get("ranks"), res.get("ranks_skipped"))
    if res.get("claims"):
        targets_claims(out, res["claims"])
    if res.get("integrations") or res.get("integrations_skipped"):
        targets_integrations(out, res.get("integrations"),
                             res.get("integrations_skipped"))
    return out


def add_target(out, name, st, op, limit, basis, fmt="%.2f",
               why_na=None, context=None, by="median"):
    """Appends to out one target: st, the figure's per-round values as
    common.stats() gives them (a bare number: a figure with one value),
    against limit (op "<=" or ">="), as the page shows it. PASS or MISS
    is decided on st[by] (the median, or "max" where every run must meet
    the limit); held counts the rounds whose own value meets it."""
    if isinstance(st, (int, float)):
        st = stats([st])
    value = st[by] if st else None
    meets = (lambda v: v <= limit) if op == "<=" else (lambda v: v >= limit)
    if value is None:
        status, held, n, spread = "N/A", None, 0, None
    else:
        status = "PASS" if meets(value) else "MISS"
        held = sum(1 for v in st["values"] if meets(v))
        n, spread = st["n"], [st["min"], st["max"]]
    out.append({"target": name, "op": op, "limit": limit,
                "value": value, "status": status, "basis": basis,
                "context": context, "spread": spread, "rounds": n,
                "held": held, "values": st["values"] if st else None,
                "shown": shown(fmt, value, spread) if value is not None
                else "not measured" + (": " + why_na if why_na else "")})


def shown(fmt, value, spread):
    """value as fmt writes it, then [min-max] of its rounds (numbers
    alone, without fmt's unit) when they differ: "5.10 ms [4.90-5.30]"."""
    text = fmt % value
    if spread and spread[0] != spread[1]:
        num = re.match(r"%[-+ #0]*[0-9]*(?:\.[0-9]+)?[a-zA-Z]", fmt).group()
        text += " [%s-%s]" % (num % spread[0], num % spread[1])
    return text


def targets_cmd(out, cr, skipped):
    """The command runners' targets."""
    add = functools.partial(add_target, out)
    t = cr["workloads"]["true"]
    g = t["runners"].get("gpupool-run")
    n = t["n"]
    add("gpupool-run wall <= 1.10x raw posix_spawn bound (%d x true)" % n,
        g and g["vs_raw"], "<=", 1.10,
        "median of per-round wall ratios gpupool-run/spawn4",
        why_na=skipped.get("gpupool-run"))
    p = t["runners"].get("parallel")
    add("gpupool-run >= 5x faster than GNU parallel (%d x true)" % n,
        p and p["gpupool_speedup"], ">=", 5.0,
        "median of per-round wall ratios parallel/gpupool-run",
        why_na=skipped.get("parallel") or skipped.get("gpupool-run"),
        context=p and p["vs_raw"] and
        "GNU parallel is %.2fx the raw bound here" % med(p["vs_raw"]))
    add("gpupool-run launch -> first task <= 5 ms",
        g and g["latency_ms"], "<=", 5.0,
        "median over the %d x true runs, ms" % n, fmt="%.2f ms",
        why_na=skipped.get("gpupool-run"))
    hwm = [v.get("master_hwm_kb") for v in
           cr["footprint"]["runners"].get("gpupool-run", {}).values()]
    hwm = [h for h in hwm if h]
    add("gpupool-run master peak RSS <= 4 MiB",
        stats([h / 1024 for h in hwm]), "<=", 4.0,
        "largest VmHWM of the master pid over the pile-up runs, MiB",
        fmt="%.2f MiB", why_na=skipped.get("gpupool-run"), by="max")


def targets_pool(out, pm):
    """pool_map's targets."""
    add = functools.partial(add_target, out)
    add("pool_map one-item round trip <= 1.2x raw pipe ping-pong",
        pm["roundtrip"]["pinned"]["pool_over_pipe"], "<=", 1.2,
        "median of per-block ratios, all on one CPU",
        context="%.2fx the raw socketpair ping-pong" %
        med(pm["roundtrip"]["pinned"]["pool_over_sock"]))
    top = str(max(int(k) for k in pm["trivial"]["by_n"]))
    m = pm["trivial"]["by_n"][top].get("map")
    g = pm["trivial"]["by_n"][top]["gpupool"]
    rb = pm["trivial"]["by_n"][top].get("raw-batch")
    for k, what in (("gpupool", "pool_map"),
                    ("gpupool-bufs", "gp_pool_map into the caller's "
                     "buffers")):
        m = pm["trivial"]["by_n"][top].get("map")
        g = pm["trivial"]["by_n"][top].get(k)
        if g is None:
            continue
        gm = pair_ratios_of(pm["trivial"], top, k, "map")
        grb = pair_ratios_of(pm["trivial"], top, k, "raw-batch")
        rb = pm["trivial"]["by_n"][top].get("raw-batch")
        add("%s trivial items >= 2x Pool.map (default chunks), N=%s"
            % (what, top), gm, ">=", 2.0,
            "median of per-round items/s ratios",
            context=m and "%s items/s against %s%s" % (
                fmt_si(g["items_per_s"]), fmt_si(m["items_per_s"]),
                "; %.2fx raw pipes with 1,024 items a message, %s "
                "items/s" % (med(grb), fmt_si(rb["items_per_s"]))
                if rb and grb else ""))
    mi = pm["payload"].get(str(MIB), {})
    for k, key, what in (
            ("gpupool", "gpupool_over_memcpy",
             "pool_map (a fresh malloc per result)"),
            ("gpupool-bufs", "bufs_over_memcpy",
             "gp_pool_map into the caller's buffers"),
            ("gpupool-view", "view_over_memcpy",
             "gp_pool_run, results read in done() where they lie")):
        add("%s: 1 MiB items echoed by 4 workers >= 0.15x memcpy "
            "bandwidth" % what, mi.get(key), ">=", 0.15,
            "median of per-round ratios of MB/s (each way) to "
            "memcpy MB/s of 1 MiB buffers, one thread", fmt="%.3f",
            why_na=None if mi.get(key) else "no 1 MiB run",
            context=mi.get("memcpy_gb_per_s") and
            mi["impls"].get(k) and "%.0f MB/s each way "
            "against memcpy %.1f GB/s" % (
                med(mi["impls"][k]["mb_per_s"]),
                med(mi["memcpy_gb_per_s"])))
    for order in ("given", "lpt"):
        s = pm["skewed"]["orders"][order]["impls"]["gpupool"]
        add("pool_map skewed makespan <= 1.05x greedy ideal (%s order)"
            % order, s["over_ideal"], "<=", 1.05,
            "median over rounds")


def targets_python(out, py, na):
    """The Python package's targets but the warm pool's and
    the checkpoints'; na: why none was measured, or None."""
    add = functools.partial(add_target, out)
    tr = py and py["trivial"]
    top = tr and str(max(int(k) for k in tr["by_n"]))
    bk, m = best_peer(tr and tr["by_n"][top])
    g = tr and tr["by_n"][top]["gpupool"]
    add("python: gpupool.Pool.map >= 1.5x the best of multiprocessing, "
        "ProcessPoolExecutor, loky, mpire (x*2, N=%s)" % (
            fmt_n(top) if top else "10^6"),
        m and m["gpupool_over"], ">=", 1.5,
        "median of per-round items/s ratios against the fastest peer",
        why_na=na, context=m and "%s items/s against %s (%s)" % (
            fmt_si(g["items_per_s"]), fmt_si(m["items_per_s"]),
            tr["labels"][bk]))
    rt = py and py["roundtrip"]["impls"]
    bk, p = best_peer(rt)
    add("python: one item in flight, gpupool >= 3x the best of "
        "ProcessPoolExecutor, Pool.apply, loky, mpire",
        p and p["gpupool_over"], ">=", 3.0,
        "median of per-round ratios of round trips/s against the "
        "fastest peer, gpupool's submit().result()", why_na=na,
        context=p and p["us"] and rt["gpupool"]["us"] and
        "%.0f us against %.0f us a round trip (%s)%s" % (
            med(rt["gpupool"]["us"]), med(p["us"]),
            py["roundtrip"]["labels"][bk],
            "; gpupool Pool.map(f, [x]): %.0f us, %.2fx PPE" % (
                med(rt["gpupool-map1"]["us"]),
                med(py["roundtrip"]["map1_over_ppe"]))
            if rt.get("gpupool-map1") and
            py["roundtrip"].get("map1_over_ppe") else "") + pinned_peer(
                py["roundtrip"].get("pinned")))
    st = py and py.get("start", {}).get("rows", {})
    for imp in ("none", "numpy", "jax"):
        r = st and st.get(imp)
        if st and not r:
            continue
        add("python: workers started clean: first result <= 1.2x "
            "loky's (4 workers, after import %s)" % imp,
            r and r.get("clean_vs_loky"),
            "<=", 1.2, "median of per-round ratios of the time from "
            "before the pool to the first result", why_na=na,
            context=r and r.get("loky") and "%.3f s against %.3f s%s" % (
                med(r["gpupool-clean"]["first_s"]),
                med(r["loky"]["first_s"]),
                "; forked: %.3f s" % med(r["gpupool-fork"]["first_s"])
                if r.get("gpupool-fork") else ""))
    targets_clean(out, py, na, top)


def pinned_peer(pn):
    """The context's words on the pinned round trips against the peer."""
    p = pn and pn.get("peer") and pn["impls"].get(pn["peer"])
    if not p or not p.get("gpupool_over"):
        return ""
    return "; all on one CPU: %.2fx (%.0f us against %.0f us)" % (
        med(p["gpupool_over"]), med(pn["impls"]["gpupool"]["us"]),
        med(p["us"]))


def targets_clean(out, py, na, top):
    """Workers started clean against forked ones: trivial items, and
    round trips judged all on one CPU (on 2 shared CPUs the free figure
    swings with where the scheduler puts the 3 busy threads; it is the
    context)."""
    tr = py and py["trivial"]["by_n"][top].get("gpupool-clean")
    add_target(out, "python: workers started clean within 10% of forked "
               "ones (items/s, trivial items)",
               tr and tr.get("gpupool_over"), "<=", 1.1,
               "median of per-round ratios forked / clean", fmt="%.2fx",
               why_na=na)
    rt = py and py["roundtrip"]
    pn = rt and rt.get("pinned")
    c = pn and pn["impls"].get("gpupool-clean")
    free = rt and rt["impls"].get("gpupool-clean")
    add_target(out, "python: workers started clean within 10% of forked "
               "ones (round trips/s, one item in flight, all on one CPU)",
               c and c.get("gpupool_over"), "<=", 1.1,
               "median of per-round ratios forked / clean, every process "
               "pinned to one CPU", fmt="%.2fx", why_na=na or (
                   rt and not pn and "no pinned round trips in this run"),
               context=c and free and free.get("gpupool_over") and
               "free (unpinned): %.2fx; CPU us a round trip pinned, "
               "forked / clean: caller %s / %s, workers %s / %s" % (
                   med(free["gpupool_over"]),
                   fmt_m(pn["impls"]["gpupool"]["caller_cpu_us"], "%.1f"),
                   fmt_m(c["caller_cpu_us"], "%.1f"),
                   fmt_m(pn["impls"]["gpupool"]["worker_cpu_us"], "%.1f"),
                   fmt_m(c["worker_cpu_us"], "%.1f")) + norand(pn))


def norand(pn):
    """The context's words on the pinned clean row run with address
    randomization off (the clean worker's code at the caller's
    addresses, as a forked worker's is)."""
    x = pn["impls"].get("gpupool-clean-norand")
    if not x or not x.get("gpupool_over"):
        return ""
    return "; clean with address randomization off: %.2fx%s" % (
        med(x["gpupool_over"]), "" if pn.get("norand_took") else
        " (**randomization was not turned off in every run**)")


def targets_warm(out, py, na):
    """The warm pool against a process per task."""
    add = functools.partial(add_target, out)
    wm = py and py["warm"]
    w = wm and wm["impls"].get("pool")
    add("python: warm pool's overhead <= 1.5x one set-up (%s)" % (
        "%d tasks, %g s set-up, 4 slots" % (wm["tasks"], wm["setup_s"])
        if wm else "100 tasks, 0.5 s set-up"),
        w and w["overhead_setups"], "<=", 1.5,
        "median over rounds of (wall - ideal work time) / set-up",
        fmt="%.2f set-ups", why_na=na,
        context=wm and "; ".join(
            "%s: %.1f set-ups" % (wm["labels"][k],
                                  med(x["overhead_setups"]))
            for k, x in wm["impls"].items()
            if k != "pool" and x["overhead_setups"]) +
        " (tasks x set-up / slots = %.1f set-ups)%s" % (
            wm["tasks"] / wm["slots"], "; %d CPUs: %d imports at once "
            "take at least %d set-ups of wall" % (
                wm["cpus"], wm["slots"], -(-wm["slots"] // wm["cpus"]))
            if wm.get("cpus") and wm["cpus"] < wm["slots"] and
            wm.get("setup", "").startswith("import") else ""))


def targets_checkpoint(out, ck, na):
    """checkpoint= against no checkpoint and multiprocessing."""
    add = functools.partial(add_target, out)
    k = ck and ck["kinds"]
    for kind in ("ms", "ms1"):
        row = k and k[kind]
        add("python: checkpoint= costs <= 10%% on 1 ms items (%s)" % (
            "default chunks" if kind == "ms" else "chunksize=1"),
            row and row["ckpt_cost"], "<=", 1.10,
            "median of per-round wall ratios with / without", why_na=na,
            fmt="%.3fx", context=row and "%s items/s with, %s without "
            "(N=%s)" % (fmt_si(row["impls"]["ckpt"]["items_per_s"]),
                        fmt_si(row["impls"]["plain"]["items_per_s"]),
                        fmt_n(row["n"])))
    row = k and k["trivial"]
    add("python: trivial items with checkpoint= >= multiprocessing "
        "Pool.map without (x*2, N=%s)" % fmt_n(row["n"] if row else
                                               10**6),
        row and row["ckpt_over_mp"], ">=", 1.0,
        "median of per-round items/s ratios", why_na=na, context=row and
        "%s items/s against %s; without a checkpoint %s (%.2fx the "
        "cost with)" % (
            fmt_si(row["impls"]["ckpt"]["items_per_s"]),
            fmt_si(row["impls"]["mp"]["items_per_s"]),
            fmt_si(row["impls"]["plain"]["items_per_s"]),
            med(row["ckpt_cost"]) or 0))
    row = k and k["read1"]
    add("python: reading %s one-item records <= 0.1x computing them "
        "(1 ms items, 4 workers)" % fmt_n(row["n"] if row else 10**6),
        row and row["read_over_compute"], "<=", 0.1,
        "median read time over N / (1 ms items/s with a checkpoint)",
        why_na=na, fmt="%.3fx", context=row and row["compute_s"] and
        "%.2f s to read, %.0f s to compute; peak RSS grew %.0f MiB "
        "(a plain map of %s trivial items: %.0f MiB)" % (
            med(row["impls"]["resume"]["secs"]), row["compute_s"],
            med(row["impls"]["resume"]["rss_growth_mib"]) or 0,
            fmt_n(k["trivial"]["n"]),
            med(k["trivial"]["impls"]["plain"]["rss_growth_mib"]) or 0))


def targets_mpi(out, mp):
    """Dispatch over MPI."""
    add = functools.partial(add_target, out)
    add("rank 0 dispatches >= 20,000 tasks/s over MPI (3 local ranks)",
        mp["mpi_per_s"], ">=", 20000.0,
        "median over rounds of null tasks run by ranks 1-2 per second",
        fmt="%.0f tasks/s", context="%s tasks/s in all, rank 0's own "
        "slots included" % fmt_si(mp["per_s"]))


def targets_ranks(out, rk, na):
    """One Pool across 3 local MPI ranks (issue 27); na: why the section
    was skipped, or None."""
    add = functools.partial(add_target, out)
    na = na or (rk and rk["missing"].get("mpi4py") and
                "mpi4py " + rk["missing"]["mpi4py"])
    tr = rk and rk["trivial"]["rows"]
    b, g = tr and tr.get("futures/best"), tr and tr.get("gpupool")
    f4, f1 = tr and tr.get("futures4/best"), tr and tr.get("futures/1")
    add("ranks: gpupool.Pool.map over 3 ranks >= 3x MPIPoolExecutor.map "
        "(-np 3, its best tuned chunksize), trivial items (x*2, N=%s)" % (
            fmt_n(rk["trivial"]["n"]) if rk else "10^6"),
        b and b["gpupool_over"], ">=", 3.0,
        "median of per-round items/s ratios; each round the executor's "
        "fastest of its tuned chunk sizes", why_na=na, context=b and
        "%s items/s against %s; gpupool 3 workers, the executor 2; "
        "against -np 4 (3 workers): %sx; against chunksize=1: %sx" % (
            fmt_si(g and g["items_per_s"]), fmt_si(b["items_per_s"]),
            fmt_m(f4 and f4["gpupool_over"]),
            fmt_m(f1 and f1["gpupool_over"], "%.0f")))
    targets_mib(out, rk and rk["mib"], na)


def targets_mib(out, mib, na):
    """1 MiB items over 3 local ranks against MPI's point-to-point
    bandwidth: all of them (rank 0's own worker's included; ranks 1-2
    read rank 0's out ring, by default, as ranks on its host do), and,
    in a job with sharing off, the part that went over MPI to ranks 1-2
    (what a multi-node user gets)."""
    for kind in (mib["kinds"] if mib else ["bytes"]):
        row = mib and mib["rows"][kind]
        g = row and row["gpupool"]
        m = (row and row.get("gpupool-mpi")) or {}
        p2p = mib and mib["p2p_mb_per_s"] and "MPI's %s MB/s" % fmt_s(
            mib["p2p_mb_per_s"], "%.0f")
        chunks = g and g.get("chunk") and ", chunks of %s" % fmt_m(
            g["chunk"], "%.0f")
        add_target(
            out, "ranks: 1 MiB items (%s) delivered to the workers of 3 "
            "ranks >= 0.5x MPI's point-to-point bandwidth" % kind,
            row and row["mb_per_s_over_p2p"], ">=", 0.5,
            "median of per-round ratios of item MB/s to comm.Send/Recv "
            "MB/s of 1 MiB buffers, rank 0 to rank 1", fmt="%.3f",
            why_na=na, context=row and p2p and
            "%s MB/s against %s%s; to ranks 1-2 (on rank 0's host, "
            "reading its ring): %s MB/s (%s of %d items); sharing off: %s "
            "MB/s" % (
                fmt_m(g["mb_per_s"], "%.0f"), p2p, chunks or "",
                fmt_m(g["mpi_mb_per_s"], "%.0f"),
                fmt_m(g["items_over_mpi"], "%.0f"), mib["n"],
                fmt_m(m.get("mb_per_s"), "%.0f")))
        add_target(
            out, "ranks: of 1 MiB items (%s), sharing off (as ranks on "
            "other nodes), the part over MPI to ranks 1-2 >= 0.25x MPI's "
            "point-to-point bandwidth" % kind,
            row and row["mpi_mb_per_s_over_p2p"], ">=", 0.25,
            "median of per-round ratios of the MB/s of the items that ran "
            "on ranks 1-2, in the job with GPUPOOL_RANKS_SHARE=0, to "
            "comm.Send/Recv MB/s of 1 MiB buffers, rank 0 to rank 1",
            fmt="%.3f", why_na=na, context=row and p2p and bool(m) and
            "%s MB/s over MPI (%s of %d items%s) against %s" % (
                fmt_m(m.get("mpi_mb_per_s"), "%.0f"),
                fmt_m(m.get("items_over_mpi"), "%.0f"), mib["n"],
                chunks or "", p2p))


def targets_claims(out, cl):
    """Host-wide claims: a run with the machine to itself (issue 34)."""
    add = functools.partial(add_target, out)
    c = cl["cost"]["cases"]
    a, o = c.get("alone"), c.get("others")
    add("claims: a GPU's claim + release <= 20 us (one claimer, alone in "
        "the table)", a and a["us"], "<=", 20.0,
        "median over blocks of %d claims and releases of one GPU, us" %
        cl["cost"]["iters"], fmt="%.2f us", why_na="bench_claim failed",
        context=a and "claim %.2f us, release %.2f us, CPU %.2f us%s" % (
            med(a["try_us"]), med(a["drop_us"]), med(a["cpu_us"]),
            "; with %d other processes' slots in the table: %.2f us" % (
                o["others"], med(o["us"])) if o else ""))
    t = cl["true"]
    on = t["runners"]["claims-on"]
    off = t["runners"]["claims-off"]
    add_ctx = off["vs_raw"] and on["vs_off"] and \
        "claims off: %.2fx; on / off: %.3fx; claims add %.1f us of CPU a " \
        "task" % (med(off["vs_raw"]), med(on["vs_off"]),
                  med(t["cpu_us_per_task_added"]) or 0)
    add("claims: gpupool-run with claims on (its own claims directory) "
        "wall <= 1.05x raw posix_spawn bound (%d x true)" % t["n"],
        on["vs_raw"], "<=", 1.05,
        "median of per-round wall ratios gpupool-run/spawn4",
        context=add_ctx)


def targets_integrations(out, it, na):
    """gpupool's Hydra launcher and joblib backend (issue 36); na: why
    the section was skipped, or None. A group whose gpupool side or peer
    was not measured is N/A, with the reason."""
    add = functools.partial(add_target, out)
    miss = (it or {}).get("missing", {})
    hy = it and it.get("hydra")
    n = hy["n"] if hy else 100
    r = hy and hy.get("gpupool_over_joblib")
    add("integrations: Hydra sweep of %d short jobs, gpupool launcher's "
        "overhead a job <= the joblib launcher's (4 workers)" % n,
        r, "<=", 1.0,
        "median of per-round ratios of launch() time, gpupool / joblib",
        fmt="%.2fx", why_na=na or miss.get("hydra/gpupool") or
        miss.get("hydra/joblib"), context=r and
        "%.1f ms against %.1f ms a job; gpupool's at most joblib's in %d "
        "of %d rounds" % (med(hy["impls"]["gpupool"]["per_job_ms"]),
                          med(hy["impls"]["joblib"]["per_job_ms"]),
                          hy["rounds_met"], r["n"]))
    jl = it and it.get("joblib")
    for work, label in (("trivial", "trivial items"), ("ms", "1 ms items")):
        row = jl and jl["work"][work]
        r = row and row.get("gpupool_over_loky")
        add("integrations: joblib Parallel(n_jobs=4), backend gpupool >= "
            "loky, items/s (%s x %s)" % (
                row["n"] if row else {"trivial": 10000, "ms": 1000}[work],
                label), r, ">=", 1.0,
            "median of per-round items/s ratios gpupool / loky",
            fmt="%.2fx", why_na=na or miss.get("joblib/gpupool") or
            miss.get("joblib/loky"), context=r and
            "%s items/s against %s; gpupool's at least loky's in %d of %d "
            "rounds%s" % (fmt_si(row["impls"]["gpupool"]["items_per_s"]),
                          fmt_si(row["impls"]["loky"]["items_per_s"]),
                          row["rounds_met"], r["n"], "" if work != "ms" else
                          "; Parallel looks for the next result every 10 "
                          "ms, %.1f%% of a call here" % (
                              1.0 / med(row["impls"]["loky"]["secs"]))))


def best_peer(impls):
    """(key, entry) of the peer gpupool leads by least (the fastest peer)
    among impls' non-gpupool entries with a ratio; (None, None) if none."""
    peers = [(med(v["gpupool_over"]), k, v) for k, v in (impls or {}).items()
             if not k.startswith("gpupool") and v.get("gpupool_over") and
             med(v["gpupool_over"]) is not None]
    if not peers:
        return None, None
    _, k, v = min(peers, key=lambda x: x[0])
    return k, v
