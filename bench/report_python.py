"""report_python.py: the Python section's round-trip tables, free and all
on one CPU, with the CPU a round trip takes in the caller and the
workers."""
from fmt import fmt_m, fmt_n, fmt_s, fmt_si


def py_roundtrip_tables(rt, cfg):
    """One item in flight, free and all on one CPU, with the CPU each
    round trip took in the caller and in the workers."""
    L = []
    pn = rt.get("pinned")
    for title, x in (("one item in flight (%s sequential round trips)" %
                      fmt_n(rt["n"]), rt),
                     ("round trips all on CPU %s (taskset -c %s: caller "
                      "and workers)" % ((pn["cpu"],) * 2) if pn else "",
                      pn)):
        if not x:
            continue  # a run from before the pinned variant
        L += ["#### Python: " + title, "",
              "| call | us a round trip | round trips/s | gpupool faster "
              "by | caller CPU us | workers CPU us |",
              "| --- | --- | --- | --- | --- | --- |"]
        for k, lab in x["labels"].items():
            v = x["impls"][k]
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                lab, fmt_s(v["us"], "%.0f"), fmt_si(v["per_s"]),
                fmt_m(v["gpupool_over"]),
                fmt_s(v.get("caller_cpu_us"), "%.1f"),
                fmt_s(v.get("worker_cpu_us"), "%.1f")))
        L.append("")
    L.append("gpupool faster by: median of per-round ratios against "
             "gpupool's submit().result(). CPU us: CPU time per round "
             "trip of the calling process (all its threads) and of its "
             "workers (all its descendants, summed), from the kernel's "
             "per-thread run time before and after the loop. Rounds: %d "
             "each." % cfg["py_rt_rounds"])
    if pn:
        L[-1] += (" All on one CPU: gpupool's two rows and the fastest peer"
                  " of the free rounds, every process pinned to CPU %d "
                  "(the workers inherit it)%s." % (
                      pn["cpu"], "" if pn.get("cpus") in ([pn["cpu"]], [])
                      else "; **some process could run on CPUs %s**" %
                      ",".join(map(str, pn["cpus"]))))
        if "gpupool-clean-norand" in pn["impls"]:
            L[-1] += (" The row with address randomization off (setarch -R "
                      "for every process of the run) is a control: on one "
                      "CPU a forked worker runs the interpreter's code at "
                      "the caller's addresses, so that what the core keeps "
                      "by virtual address (its branch predictors among "
                      "them) serves both, while a clean worker, placed "
                      "afresh by exec, does not; with a shared libpython "
                      "(this run's: %s) that alone costs it about 10-20 %% "
                      "more CPU per round trip for the same instructions "
                      "(bench/README.md)." % (
                          "yes" if pn.get("libpython_shared") else
                          "no" if pn.get("libpython_shared") is False
                          else "not recorded"))
    L.append("")
    return L
