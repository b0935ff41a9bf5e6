"""report.py: the results as markdown (results.md, and the page --publish
puts into docs/benchmarks.md)."""
import os
import shutil
import subprocess
import sys

from common import REPO, log, med
from fmt import fmt_bytes, fmt_m, fmt_n, fmt_s, fmt_si
from report_claims import md_claims
from report_integrations import md_integrations
from report_python import py_roundtrip_tables


def trivial_table(tr, absent):
    """The markdown rows of a trivial-items measurement: items/s and how
    much faster gpupool is, per implementation and N; absent where an
    implementation did not run at that N."""
    L = ["| implementation | " + " | ".join(
        "N=%s | gpupool faster by" % fmt_n(n) for n in tr["ns"]) + " |",
        "| --- |" + " --- | --- |" * len(tr["ns"])]
    for k, lab in tr["labels"].items():
        row = "| %s |" % lab
        for n in tr["ns"]:
            x = tr["by_n"].get(str(n), {}).get(k)
            row += (" %s | %s |" % (fmt_si(x["items_per_s"]),
                                    fmt_m(x["gpupool_over"]))
                    if x else " %s | |" % absent)
        L.append(row)
    return L


def markdown(res):
    """The page: results.md, and what --publish puts into
    docs/benchmarks.md."""
    L = md_head(res)
    if res.get("command_runner"):
        L += md_cmd(res["command_runner"])
    if res.get("pool_map"):
        L += md_pool(res["pool_map"])
    if res.get("python"):
        L += md_python(res["python"], res["config"])
    if res.get("mpi"):
        L += md_mpi(res["mpi"])
    if res.get("ranks"):
        L += md_ranks(res["ranks"])
    if res.get("claims"):
        L += md_claims(res["claims"])
    if res.get("integrations"):
        L += md_integrations(res["integrations"])
    L += md_notes(res["notes"])
    return tree_relative("\n".join(L))


def md_head(res):
    """The run's machine, command and targets."""
    L = []
    m, v, g = res["machine"], res["versions"], res["git"]
    L.append("Measured %s on %s (%d cores%s), %s, kernel %s; %s, %s, "
             "Python %s. Revision %s%s. Build: %s. Load average before/after:"
             " %s / %s.%s" % (
                 res["date"], m["cpu"], m["cores"],
                 ", " + m["virt"] if m.get("virt") else "", m["distro"],
                 m["kernel"], v.get("gpupool") or "gpupool ?", v.get("gcc"),
                 v["python"], (g["revision"] or "?")[:12],
                 " (+%d uncommitted paths)" % g["dirty_paths"]
                 if g["dirty_paths"] else "", res["build"]["buildtype"],
                 " ".join("%.2f" % x for x in res["load_before"]),
                 " ".join("%.2f" % x for x in res["load_after"]),
                 " **--quick run.**" if res["quick"] else ""))
    L.append("")
    L.append("Command: `%s`" % res["command"])
    L.append("")
    L.append("Figures are medians over interleaved rounds, [min-max] beside "
             "them; ratios are medians of per-round ratios.")
    L.append("")
    L.append("### Targets")
    L.append("")
    L.append("| target | measured [min-max] | rounds held | status | "
             "context |")
    L.append("| --- | --- | --- | --- | --- |")
    for t in res["targets"]:
        L.append("| %s | %s | %s | %s | %s |" % (
            t["target"], t["shown"], held_cell(t), status_cell(t),
            t.get("context") or ""))
    L.append("")
    L.append("Status: the median (for the master's peak RSS, the largest "
             "run) against the limit. Rounds held: in how many of the "
             "rounds the round's own figure met the limit. A PASS that "
             "did not hold in every round says so.")
    L.append("")
    return L


def held_cell(t):
    """rounds held of a target: "4/5", or "-" when not measured (a run
    before the harness counted them has no "held")."""
    return "%d/%d" % (t["held"], t["rounds"]) \
        if t.get("held") is not None else "-"


def status_cell(t):
    """**PASS**, **MISS** or **N/A**; a PASS held in fewer than all its
    rounds says so beside it."""
    cell = "**%s**" % t["status"]
    if t["status"] == "PASS" and t.get("held") is not None and \
            t["held"] < t["rounds"]:
        cell += ", not in every round"
    return cell


def md_cmd(cr):
    """The command runners' section."""
    labels = {k: x["label"] for k, x in cr["runners"].items()}
    return (md_cmd_workloads(cr, labels) + md_cmd_skewed(cr, labels) +
            md_cmd_footprint(cr, labels))


def md_cmd_workloads(cr, labels):
    """1000 x true and 1000 x sleep 0.01."""
    L = []
    for key, w in cr["workloads"].items():
        L.append("### Command runner: %s, 4 slots" % w["title"])
        L.append("")
        L.append("| runner | wall s | x raw bound | gpupool-run faster by"
                 " | CPU s | overhead ms/task | launch to 1st task ms |")
        L.append("| --- | --- | --- | --- | --- | --- | --- |")
        for name, x in w["runners"].items():
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                labels[name], fmt_s(x["wall_s"]), fmt_m(x["vs_raw"]),
                fmt_m(x["gpupool_speedup"]), fmt_m(x["cpu_s"]),
                fmt_m(x["overhead_ms_per_task"], "%.3f"),
                fmt_m(x["latency_ms"])))
        L.append("")
        L.append("Overhead per task = (wall - ideal) / N x 4, ideal = "
                 "%.2f s. Rounds: %d." % (w["ideal_s"], w["rounds"]))
        L.append("")
    return L


def md_cmd_skewed(cr, labels):
    """The skewed sleeps, given order and longest first."""
    L = []
    sk = cr["skewed"]
    L.append("### Command runner: %d skewed sleeps (sum %.2f s, longest "
             "%.2f s)" % (sk["n"], sk["total_s"], sk["max_s"]))
    L.append("")
    gi, lp = sk["orders"]["given"], sk["orders"]["lpt"]
    L.append("| runner | given order: makespan / ideal | longest first: "
             "makespan / ideal |")
    L.append("| --- | --- | --- |")
    for name in gi["runners"]:
        L.append("| %s | %s | %s |" % (
            labels[name], fmt_s(gi["runners"][name]["over_ideal"]),
            fmt_s(lp["runners"][name]["over_ideal"])))
    L.append("")
    L.append("Ideal: greedy list scheduling on 4 slots with no "
             "overhead, %.3f s given, %.3f s longest first. %s." % (
                 gi["ideal_s"], lp["ideal_s"], sk["dist"]))
    L.append("")
    return L


def md_cmd_footprint(cr, labels):
    """Pile-up and footprint, and the validation."""
    L = []
    fp = cr["footprint"]
    L.append("### Command runner: pile-up and footprint (%s)" %
             fp["task"])
    L.append("")
    hdr = "| runner |"
    sep = "| --- |"
    for nn in fp["ns"]:
        hdr += " N=%d: peak processes | RSS sum MiB | PSS sum MiB |" % nn
        sep += " --- | --- | --- |"
    L.append(hdr + " master peak RSS MiB |")
    L.append(sep + " --- |")
    for name, per in fp["runners"].items():
        row = "| %s |" % labels[name]
        hw = []
        for nn in fp["ns"]:
            x = per.get(str(nn), {})
            row += " %s | %s | %s |" % (
                x.get("peak_procs", "-"),
                "%.1f" % (x["peak_rss_kb"] / 1024)
                if x.get("peak_rss_kb") else "-",
                "%.1f" % (x["peak_pss_kb"] / 1024)
                if x.get("peak_pss_kb") else "-")
            if x.get("master_hwm_kb"):
                hw.append(x["master_hwm_kb"])
        L.append(row + " %s |" % ("%.2f" % (max(hw) / 1024) if hw
                                  else "-"))
    L.append("")
    L.append("Processes: the runner and everything under it (the "
             "harness is a child subreaper, so task-spooler's detached "
             "server and clients count). RSS sums count shared pages once"
             " per process; PSS divides them. Master: VmHWM of the "
             "runner's own pid (task-spooler: its server).")
    L.append("")
    bad = {k: x for k, x in cr["validation"].items() if not x["ok"]}
    L.append("Validation (%s): %s" % (
        "every runner ran each task once, at most 4 at a time, GPU-aware"
        " runners never gave one GPU to two running tasks",
        "all passed" if not bad else "; ".join(
            "%s: %s" % (k, ", ".join(x["problems"]))
            for k, x in bad.items())))
    L.append("")
    return L


def md_pool(pm):
    """pool_map's section."""
    return (md_pool_roundtrip(pm) + md_pool_trivial(pm) +
            md_pool_skewed(pm) + md_pool_payload(pm))


def md_pool_roundtrip(pm):
    """One item in flight against raw pipes and socketpairs."""
    L = []
    rt = pm["roundtrip"]
    L.append("### pool_map: one item in flight (round trip, us)")
    L.append("")
    L.append("| placement | raw pipe | raw socketpair | gpupool | "
             "gpupool / pipe | gpupool / socketpair |")
    L.append("| --- | --- | --- | --- | --- | --- |")
    for mode in ("pinned", "free"):
        x = rt[mode]
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            "all on one CPU" if mode == "pinned" else "scheduler's "
            "choice", fmt_s(x["raw_pipe_us"], "%.2f"),
            fmt_s(x["raw_sock_us"], "%.2f"), fmt_s(x["pool_us"], "%.2f"),
            fmt_m(x["pool_over_pipe"]), fmt_m(x["pool_over_sock"])))
    L.append("")
    L.append("All on one CPU: the process pinned to one CPU, the worker "
             "created with GP_POOL_NO_BIND so it keeps that affinity; "
             "this row is the software cost of each path and carries the"
             " target. Scheduler's choice: each block runs with both ends"
             " on one CPU (a few us) or on two (a cross-CPU wakeup, tens "
             "of us in a VM), so its medians and ratios are bimodal and "
             "only informative.")
    L.append("")
    return L


def md_pool_trivial(pm):
    """Trivial items against Python's pools."""
    L = []
    tr = pm["trivial"]
    L.append("### pool_map: trivial items (x * 2 on an int), 4 workers, "
             "items/s")
    L.append("")
    L += trivial_table(tr, "skipped")
    L.append("")
    sk = []
    for k, per in tr["skipped"].items():
        for n, why in per.items():
            sk.append("%s at N=%s (%s)" % (tr["labels"][k], fmt_n(n),
                                            why))
    if sk:
        L.append("Skipped: " + "; ".join(sk) + ".")
        L.append("")
    return L


def md_pool_skewed(pm):
    """Skewed item durations."""
    L = []
    s = pm["skewed"]
    L.append("### pool_map: %d skewed items (sum %.2f s, longest %.3f s)"
             % (s["n"], s["total_s"], s["max_s"]))
    L.append("")
    L.append("| implementation | given order: makespan / ideal | longest "
             "first: makespan / ideal |")
    L.append("| --- | --- | --- |")
    names = {"gpupool": "pool_map", "map": "Pool.map (default chunks)",
             "imap_unordered": "Pool.imap_unordered"}
    for k in s["orders"]["given"]["impls"]:
        L.append("| %s | %s | %s |" % (
            names[k], fmt_s(s["orders"]["given"]["impls"][k]
                            ["over_ideal"]),
            fmt_s(s["orders"]["lpt"]["impls"][k]["over_ideal"])))
    L.append("")
    L.append("Ideal: greedy list scheduling on 4 workers, %.3f s given, "
             "%.3f s longest first. %s." % (
                 s["orders"]["given"]["ideal_s"],
                 s["orders"]["lpt"]["ideal_s"], s["dist"]))
    L.append("")
    return L


def md_pool_payload(pm):
    """The payload sweep against memcpy."""
    L = []
    L.append("### pool_map: payload sweep (each item echoed back)")
    L.append("")
    L.append("| item size | N | pool_map items/s | pool_map MB/s | "
             "caller's buffers MB/s | views in done() MB/s | "
             "memcpy GB/s | pool_map x memcpy | "
             "caller's buffers x memcpy | views x memcpy | "
             "Pool.map items/s | Pool.map MB/s | pool_map faster by |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | "
             "--- | --- | --- | --- |")
    skipped = []
    for size, x in pm["payload"].items():
        g, mp_ = x["impls"]["gpupool"], x["impls"].get("map")
        gb = x["impls"].get("gpupool-bufs", {})
        gv = x["impls"].get("gpupool-view", {})
        L.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | "
                 "%s | %s | %s |" % (
            fmt_bytes(int(size)), x["n"], fmt_si(g["items_per_s"]),
            fmt_m(g["mb_per_s"], "%.1f"),
            fmt_m(gb.get("mb_per_s"), "%.1f"),
            fmt_m(gv.get("mb_per_s"), "%.1f"),
            fmt_m(x.get("memcpy_gb_per_s"), "%.1f"),
            fmt_m(x.get("gpupool_over_memcpy"), "%.3f"),
            fmt_m(x.get("bufs_over_memcpy"), "%.3f"),
            fmt_m(x.get("view_over_memcpy"), "%.3f"),
            fmt_si(mp_ and mp_["items_per_s"]),
            fmt_m(mp_ and mp_["mb_per_s"], "%.1f"),
            fmt_m(x["gpupool_over_map"])))
        if x.get("map_skipped"):
            skipped.append("Pool.map at %s (%s)" % (
                fmt_bytes(int(size)), x["map_skipped"]))
    L.append("")
    if skipped:
        L.append("Skipped: " + "; ".join(skipped) + ".")
        L.append("")
    L.append("MB/s: item bytes sent per second (10^6 B), each way. "
             "memcpy: this machine's `memcpy` of buffers of the item's "
             "size, one thread, the same two buffers each copy, warmed "
             "before the clock starts, run in the same rounds (see "
             "bench/README.md); x memcpy: the "
             "median of the per-round ratios of MB/s to "
             "memcpy MB/s. pool_map: each result a fresh malloc "
             "(its pages faulted in as it is copied); caller's "
             "buffers: gp_pool_map with GP_POOL_OUT_BUFFERS into "
             "buffers written once before the clock starts, as a "
             "pipeline that reuses its buffers has them; views in "
             "done(): gp_pool_run with GP_POOL_OUT_VIEW, each result "
             "compared in full with the input inside done(), where it "
             "lies, inside the clock; gp_pool_run streams one item a "
             "dispatch, so its small items are slow for that reason, "
             "not the view's. Items and "
             "results of 64 bytes or more travel through the worker's "
             "shared region, smaller ones through the pipe.")
    L.append("")
    return L


def md_python(py, cfg):
    """The Python package's section."""
    L = []
    L.append("### Python: gpupool.Pool against Python's pools, 4 workers")
    L.append("")
    pr = py["probe"]
    L.append("Interpreter: %s (Python %s), gpupool from %s; %s." % (
        py["interpreter"], pr.get("python"), pr.get("gpupool_file"),
        py["how"]) + (" Not measured: %s." % "; ".join(
            "%s (%s)" % kv for kv in py["missing"].items())
            if py["missing"] else ""))
    L.append("")
    tr = py["trivial"]
    L.append("#### Python: trivial items (x * 2 on an int), items/s")
    L.append("")
    L += trivial_table(tr, "-")
    L.append("")
    L.append("Each run is a fresh process that creates its pool, warms it"
             " up with a map of 64 items, then times one map of N items "
             "and checks the results. Default chunks: len / (4 x workers)"
             " items a message. Rounds: %d." % (
                 cfg["py_triv_rounds"]))
    L.append("")
    L += py_roundtrip_tables(py["roundtrip"], cfg)
    wm = py["warm"]
    L.append("#### Python: warm workers against a process per task (%d "
             "tasks, %g s set-up, %g s work, 4 slots)" % (
                 wm["tasks"], wm["setup_s"], wm["work_s"]))
    L.append("")
    L.append("| how | wall s | overhead s | overhead in set-ups |")
    L.append("| --- | --- | --- | --- |")
    for k, lab in wm["labels"].items():
        x = wm["impls"][k]
        L.append("| %s | %s | %s | %s |" % (
            lab, fmt_s(x["wall_s"], "%.2f"), fmt_s(x["overhead_s"],
                                                   "%.2f"),
            fmt_m(x["overhead_setups"], "%.1f")))
    L.append("")
    L.append("Overhead = wall - ideal, ideal = tasks x work / 4 = %.2f s "
             "(no set-up at all). Set-up once per worker costs %.2f s of "
             "wall (1 set-up); once per task, %.2f s (tasks x set-up / 4"
             " = %g set-ups). The set-up is `%s` (its cost measured in a "
             "fresh interpreter each run), standing for `import torch` + "
             "a CUDA context. Wall: from before the pool (or "
             "Manager, or gpupool-run) is created to after everything is "
             "reaped. Rounds: %d." % (
                 wm["ideal_s"], wm["setup_per_worker_s"],
                 wm["setup_per_task_s"], wm["tasks"] / wm["slots"],
                 wm.get("setup", "a sleep"),
                 cfg["py_warm_rounds"]))
    L.append("")
    L += py_payload_table(py.get("payload"), cfg)
    L += py_start_table(py.get("start"), cfg)
    L += py_checkpoint_table(py.get("checkpoint"), cfg)
    return L


def md_mpi(mp):
    """gpupool-run across MPI ranks."""
    L = []
    L.append("### gpupool-run across %d MPI ranks x %d fake GPUs: "
             "dispatch (%s null tasks)" % (mp["ranks"],
                                           mp["gpus_per_rank"],
                                           fmt_n(mp["n"])))
    L.append("")
    L.append("| tasks/s in all | tasks/s over MPI (ranks 1-%d) | "
             "s a round |" % (mp["ranks"] - 1))
    L.append("| --- | --- | --- |")
    L.append("| %s | %s | %s |" % (fmt_si(mp["per_s"]),
                                   fmt_si(mp["mpi_per_s"]),
                                   fmt_s(mp["secs"])))
    L.append("")
    L.append("bench_ranks: gpupool-run's own run (tasks file, windows, "
             "protocol, each rank's pool) with workers that answer each "
             "task at once; no joblog. A ceiling on dispatch, not a task "
             "rate (docs/cluster.md).")
    L.append("")
    return L


RANKS_HOW = {"gpupool": "gpupool Pool.map (default chunks)",
             "futures": "MPIPoolExecutor.map, -np 3",
             "futures4": "MPIPoolExecutor.map, -np 4"}


def ranks_rows(rk, case, n):
    """The items/s rows of one case of the ranks section."""
    L = []
    for row, x in sorted(rk[case]["rows"].items(),
                         key=lambda kv: (kv[0] != "gpupool", kv[0])):
        key, _, cs = row.partition("/")
        chunk = {"": "its default",
                 "auto": "len / %d" % (4 * x["workers"]),
                 "best": "the round's fastest of the above"}.get(cs, cs)
        if case == "trivial" and cs == "1":
            chunk += " (N=%s)" % fmt_n(rk["trivial"]["c1_n"])
        L.append("| %s | %d | %s | %s |%s %s |" % (
            RANKS_HOW[key], x["workers"], chunk, fmt_si(x["items_per_s"]),
            " %s |" % fmt_m(x["of_ideal"]) if case == "ms" else "",
            fmt_m(x["gpupool_over"])))
    return L


def mib_passes(mib):
    """How a job timed its 1 MiB maps, for md_ranks's notes."""
    if not mib.get("passes"):
        return "; the 1 MiB items once, as the other cases"
    return ("; the 1 MiB items are mapped %d times a job, as MPI "
            "Send/Recv's buffer is sent: the first untimed (its MB/s: "
            "*first map*, when the rings' pages and the workers' buffers "
            "are first taken), the figure the median of the other %d" % (
                mib["passes"] + 1, mib["passes"]))


def md_ranks(rk):
    """One Pool across 3 local MPI ranks against MPIPoolExecutor."""
    cfg, mib = rk["config"], rk["mib"]
    L = ["### One Pool across 3 MPI ranks (`python -m gpupool`) against "
         "mpi4py.futures", "",
         "Interpreter: %s (gpupool from %s; mpi4py %s). gpupool: "
         "`gpupool.Pool(fake_gpus=1)` over `mpirun -np 3`: a worker on "
         "every rank, rank 0's included, 3 in all. MPIPoolExecutor under "
         "`mpirun -np 3 python -m mpi4py.futures`: rank 0 is the master, "
         "2 workers; under `-np 4`, 3 workers, as many as gpupool's." % (
             rk["interpreter"], rk["probe"].get("gpupool_file"),
             rk["probe"].get("mpi4py") or "not installed"), "",
         "#### Ranks: trivial items (x * 2 on an int, N=%s), items/s" %
         fmt_n(rk["trivial"]["n"]), "",
         "| how | workers | chunk size | items/s | gpupool faster by |",
         "| --- | --- | --- | --- | --- |"]
    L += ranks_rows(rk, "trivial", rk["trivial"]["n"])
    L += ["", "#### Ranks: 1 ms items (time.sleep(0.001), N=%s), items/s"
          % fmt_n(rk["ms"]["n"]), "",
          "| how | workers | chunk size | items/s | of workers x 1000/s | "
          "gpupool faster by |", "| --- | --- | --- | --- | --- | --- |"]
    L += ranks_rows(rk, "ms", rk["ms"]["n"])
    L += ["", "#### Ranks: %d items of 1 MiB, each function returning its "
          "len(), MB/s of item bytes delivered" % mib["n"], "",
          "| items | gpupool | of it to ranks 1-2 (items) | gpupool's chunk "
          "| gpupool's first map | sharing off | of it over MPI (items) | "
          "MPIPoolExecutor -np 3 | -np 4 | MPI Send/Recv | gpupool / MPI | "
          "over MPI / MPI |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
          "| --- |"]
    for kind, x in mib["rows"].items():
        g, m = x["gpupool"], x.get("gpupool-mpi") or {}
        L.append("| %s | %s | %s (%s) | %s | %s | %s | %s (%s) | %s | %s | "
                 "%s | %s | %s |" % (
            kind, fmt_s(g["mb_per_s"], "%.0f"),
            fmt_s(g["mpi_mb_per_s"], "%.0f"),
            fmt_m(g["items_over_mpi"], "%.0f"),
            fmt_s(g.get("chunk"), "%.0f"),
            fmt_s(g.get("first_mb_per_s"), "%.0f"),
            fmt_s(m.get("mb_per_s"), "%.0f"),
            fmt_s(m.get("mpi_mb_per_s"), "%.0f"),
            fmt_m(m.get("items_over_mpi"), "%.0f"),
            fmt_s(x["futures"]["mb_per_s"], "%.0f"),
            fmt_s(x["futures4"]["mb_per_s"], "%.0f"),
            fmt_s(mib["p2p_mb_per_s"], "%.0f"),
            fmt_m(x["mb_per_s_over_p2p"], "%.3f"),
            fmt_m(x["mpi_mb_per_s_over_p2p"], "%.3f")))
    L += ["", "Each job is a fresh `mpirun --oversubscribe` (3 local ranks; "
          "MPI Send/Recv: 2), the jobs of a round in rotated order; each "
          "warms its pool up, then times one map per case and checks every "
          "result (bench/py_ranks.py)%s. MPIPoolExecutor's chunksize=1 (its "
          "default) runs on N=%s trivial items, the tuned sizes on all of "
          "them; its 1 MiB items go one a message (chunksize=1). gpupool's "
          "1 MiB function also returns the rank it ran on: *to ranks 1-2* "
          "is the MB/s of the items that ran there (the rest ran on rank "
          "0's own worker); the 3 ranks share a host, so by default ranks "
          "1-2 read those items where rank 0 pickled them, no MPI between; "
          "*sharing off* is a job of its own with GPUPOOL_RANKS_SHARE=0, "
          "where ranks 1-2 get theirs through MPI as ranks on other nodes "
          "do, and *over MPI* is the MB/s of those items (the target on "
          "it is what a user with several nodes gets); gpupool's chunk: the chunk size its default "
          "chunking chose for the map (items a message). MPI Send/Recv: mpi4py `comm.Send` of one 1 MiB "
          "buffer %d times, rank 0 to rank 1, the median of %d passes a "
          "job; ratios: medians of per-round ratios. MB/s: 10^6 B a "
          "second. Rounds: %d. Load average before/after the section: "
          "%s / %s." % (
              mib_passes(mib),
              fmt_n(cfg["c1_n"]), cfg["p2p_n"], cfg["p2p_passes"],
              cfg["rounds"], " ".join("%.2f" % x for x in rk["load"][0]),
              " ".join("%.2f" % x for x in rk["load"][1])), ""]
    return L


def md_notes(notes):
    """The run's notes."""
    L = []
    if notes:
        L.append("### Notes")
        L.append("")
        for n in notes:
            L.append("- " + n)
        L.append("")
    return L



def tree_relative(text):
    """Paths in the tree as paths from its root (build-bench/src/...): the
    page is published, and the machine that measured it has its own place
    for the tree (issue 21)."""
    return text.replace(REPO + os.sep, "")


def py_start_table(st, cfg):
    """The start-up rows: seconds to a ready pool and to its first
    result, after each import in the caller."""
    if not st or not st["rows"]:
        return []
    L = ["#### Python: start-up, 4 workers (seconds)", "",
         "| caller imported | pool | ready | first result | "
         "clean / loky | clean / forked |", "| --- | --- | --- | --- | "
         "--- | --- |"]
    for imp, row in st["rows"].items():
        for k, lab in st["labels"].items():
            if k not in row:
                continue
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                imp, lab, fmt_s(row[k]["startup_s"], "%.3f"),
                fmt_s(row[k]["first_s"], "%.3f"),
                fmt_m(row.get("clean_vs_loky")) if k == "gpupool-clean"
                else "", fmt_m(row.get("clean_vs_fork"))
                if k == "gpupool-clean" else ""))
    L += ["", "Each run is a fresh process: the import (numpy with a "
          "matrix product, so OpenBLAS's threads run; jax with one "
          "computation, so XLA runs: forked workers would hang, and are "
          "not measured), then the clock, around the pool's creation "
          "(ready: gpupool's returns when every worker is; loky starts "
          "its workers at the first submit) and submit(f, 1).result(). "
          "Ratios: medians of per-round ratios of the first result's "
          "time. Rounds: %d." % cfg["py_start_rounds"], ""]
    return L


def py_payload_table(pl, cfg):
    """The Python section's big items, as markdown lines ([] if none)."""
    if not pl:
        return []
    L = ["#### Python: big items echoed, MB/s each way", "",
         "| items | n | %s | %s | gpupool / Pool.map |" % (
             pl["labels"]["gpupool"], pl["labels"]["map"]),
         "| --- | --- | --- | --- | --- |"]
    for x in pl["rows"]:
        L.append("| %s of %s | %d | %s | %s | %s |" % (
            x["kind"], fmt_bytes(x["size"]), x["n"],
            fmt_s(x["impls"]["gpupool"]["mb_per_s"], "%.0f"),
            fmt_s(x["impls"]["map"]["mb_per_s"], "%.0f"),
            fmt_m(x["gpupool_over_map"])))
    L += ["", "Each run is a fresh process: the pool created and warmed up, "
          "n distinct items made (bytes, or numpy uint8 arrays), then one "
          "map of fn(x) = x timed; every result checked after. MB/s: item "
          "bytes (10^6 B) a second, each way. gpupool sends a numpy "
          "array's memory out of band (pickle protocol 5), copied once "
          "into the item each way (docs/python.md). Rounds: %d%s." % (
              cfg["py_payload_rounds"], "" if "numpy" in pl["kinds"] else
              "; numpy not importable (--install-peers installs it)"), ""]
    return L


def py_checkpoint_table(ck, cfg):
    """The Python section's checkpoint rows, as markdown lines."""
    if not ck:
        return []
    L = ["#### Python: map(..., checkpoint=PATH), 4 workers", "",
         "| workload | N | how | items/s | s | peak RSS growth MiB | "
         "file MB | wall / without |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, x in ck["kinds"].items():
        for k, v in x["impls"].items():
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                x["title"], fmt_n(x["n"]), ck["labels"][k],
                fmt_si(v["items_per_s"]), fmt_s(v["secs"], "%.3f"),
                fmt_m(v["rss_growth_mib"], "%.1f"),
                fmt_m(v["file_bytes"], "%.1f", 1e-6)
                if med(v["file_bytes"]) else "-",
                fmt_m(x.get("ckpt_cost"), "%.3f") if k == "ckpt" else ""))
    r1 = ck["kinds"].get("read1")
    L += ["", "Each run is a fresh process: the pool created and warmed up, "
          "then one map timed; every result checked. The checkpoint is a new"
          " file in a fresh directory of TMPDIR (synced when the map "
          "returns, and every second while it runs). *resume*: the "
          "checkpoint written first by a child process (not timed, and "
          "not in this process's heap), then the timed map reads every "
          "result from it and runs nothing. *read1*: %s records of one "
          "item each, written by the checkpoint's own writer as a map with "
          "chunksize=1 writes them; computing them at the 1 ms rate "
          "measured above with a checkpoint would take %s s. Peak RSS "
          "growth: over the timed call (what the returned list and the "
          "reading took). Wall / without: median of per-round ratios. "
          "Rounds: %d." % (
              fmt_n(r1["n"]) if r1 else "-", "%.0f" % r1["compute_s"]
              if r1 and r1.get("compute_s") else "-",
              cfg["py_ck_rounds"]), ""]
    return L


def publish(res, md, svg_path):
    """docs/benchmarks.md: replace what lies between the results markers;
    docs/benchmarks.svg: the plot."""
    doc = os.path.join(REPO, "docs", "benchmarks.md")
    shutil.copyfile(svg_path, os.path.join(REPO, "docs", "benchmarks.svg"))
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    with open(doc) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit("publish: %s has no %s ... %s markers" % (doc, begin,
                                                                   end))
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    body = "\n![gpupool benchmarks](benchmarks.svg)\n\n" + md + "\n"
    with open(doc, "w") as f:
        f.write(head + begin + "\n" + body + end + tail)
    log("published docs/benchmarks.md and docs/benchmarks.svg")
    # The docs quote this run: their figures follow it (bench/quotes.py).
    if subprocess.run([sys.executable, os.path.join(REPO, "bench",
                                                    "quotes.py"),
                       "--write", REPO]).returncode != 0:
        log("publish: some quoted figures are lost: see above")
