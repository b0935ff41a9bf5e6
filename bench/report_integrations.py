"""report_integrations.py: the integrations section's tables (issue 36:
the Hydra launcher, the joblib backend), for the page report.py writes."""
from fmt import fmt_m, fmt_n, fmt_s, fmt_si


def md_integrations(it):
    """gpupool's Hydra launcher and joblib backend against Hydra's joblib
    launcher and loky (issue 36)."""
    p = it["probe"]
    L = ["### Integrations: Hydra launcher and joblib backend", "",
         "Interpreter: %s (hydra-core %s, hydra-joblib-launcher %s, joblib "
         "%s). 4 workers everywhere; gpupool's on 4 fake GPUs, with a "
         "claims directory of the section's own." % (
             it["interpreter"], p.get("hydra") or "not installed",
             p.get("hydra_joblib_launcher_version") or "not installed",
             "%s with its loky %s" % (p["joblib"], p.get("loky"))
             if p.get("joblib") else "not installed"), ""]
    hy = it.get("hydra")
    if hy:
        L += ["#### Hydra: a sweep of %d jobs that return at once "
              "(`-m +x=range(0,%d)`)" % (hy["n"], hy["n"]), "",
              "| launcher | launch() s | overhead a job, ms | x joblib's | "
              "whole sweep s | workers seen | GPUs seen |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for k, lab in hy["labels"].items():
            x = hy["impls"][k]
            L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                lab, fmt_s(x["launch_s"]), fmt_s(x["per_job_ms"], "%.1f"),
                fmt_m(hy.get("gpupool_over_joblib"))
                if k == "gpupool" else "", fmt_s(x["sweep_s"], "%.2f"),
                ", ".join(str(w) for w in x["workers"]) or "-",
                ", ".join(x["gpus"]) or "-"))
        L += ["", "Each sweep is a fresh process (bench/py_hydra.py, the "
              "@hydra.main app itself, `hydra/job_logging=disabled "
              "hydra/hydra_logging=disabled`), the launchers of a round in "
              "rotated order; rounds: %d. launch() s: the time inside the "
              "launcher's launch() (its `_core.launch`, wrapped from the "
              "app): workers' start, every job and its JobReturn back. "
              "Overhead a job: launch() s / %d (the jobs do no work). "
              "Whole sweep: the @hydra.main call, which adds Hydra's own "
              "work in the parent (about 40 ms a job, the same for every "
              "launcher). x joblib's: median of per-round ratios. Every "
              "sweep is checked: %d JobReturns COMPLETED, in order, %d job "
              "directories." % (hy["rounds"], hy["n"], hy["n"], hy["n"]),
              ""]
    jl = it.get("joblib")
    if jl:
        L += ["#### joblib: `Parallel(n_jobs=4)`, items/s", "",
              "| backend | work | N | items/s | of 4 workers x 1000/s | "
              "gpupool faster by | first call (starts workers) s |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for work, row in jl["work"].items():
            for k, lab in jl["labels"].items():
                x = row["impls"][k]
                L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    lab, row["title"], fmt_n(row["n"]),
                    fmt_si(x["items_per_s"]),
                    fmt_m(x.get("of_ideal")) if work == "ms" else "",
                    fmt_m(row.get("gpupool_over_loky"))
                    if k != "gpupool" else "",
                    fmt_s(x["startup_s"])))
        L += ["", "Each figure is a fresh process (bench/py_joblib.py): "
              "`parallel_config(backend=B, n_jobs=4)`, a first call of 100 "
              "items, then %d timed calls of N items (their median), "
              "joblib's automatic batching, every result checked. The "
              "backends of a round in rotated order; rounds: %d. gpupool "
              "faster by: median of per-round ratios. 1 ms items sleep "
              "(at least 1 ms each), so 4 x 1000/s is the bound on any "
              "number of cores. While the next result is pending, "
              "Parallel sleeps 10 ms before it looks again (joblib's "
              "`_retrieve`, whatever the backend), so a call of 1 ms "
              "items ends on a 10 ms grid and the ratio moves in steps of "
              "a few percent." % (jl["calls"], jl["rounds"]), ""]
    L.append("Load average before/after the section: %s / %s." % (
        " ".join("%.2f" % x for x in it["load"][0]),
        " ".join("%.2f" % x for x in it["load"][1])))
    L.append("")
    return L
