"""report_claims.py: the claims section's tables (issue 34), for the page
report.py writes."""
from fmt import fmt_m, fmt_s


def md_claims(cl):
    """Host-wide GPU claims (issue 34)."""
    return (md_claims_cost(cl["cost"]) + md_claims_true(cl["true"]) +
            md_claims_sweeps(cl["sweeps"]) + md_claims_beside(cl["beside"]))


def md_claims_cost(c):
    """bench_claim: a claim and its release."""
    L = ["### Host-wide GPU claims: a claim and its release (us)", "",
         "| claims table | claim + release | claim (gp_claim_try) | "
         "release (gp_claim_drop) | CPU |",
         "| --- | --- | --- | --- | --- |"]
    for case, x in c["cases"].items():
        L.append("| %s | %s | %s | %s | %s |" % (
            "alone" if case == "alone" else
            "%d other processes' slots (8 held, %d waiting)" % (
                x["others"], x["others"] - 8),
            fmt_s(x["us"], "%.2f"), fmt_s(x["try_us"], "%.2f"),
            fmt_s(x["drop_us"], "%.2f"), fmt_s(x["cpu_us"], "%.2f")))
    L.append("")
    L.append("`bench/bench_claim`: one process claims GPU fake0 and gives "
             "it back, blocks of %d, through the claims table gpupool-run "
             "takes a claim per task from (a directory of its own). Other "
             "processes' slots: one child holds fake1-fake8, two queue "
             "for all 8. CPU: the thread's CPU time an iteration (the "
             "wall includes any wait for a CPU on a busy machine)." %
             c["iters"])
    L.append("")
    return L


def md_claims_true(t):
    """N x true with claims on and off against the raw bound."""
    L = ["### Host-wide GPU claims: N=%d true tasks, claims on and off, "
         "4 slots" % t["n"], "",
         "| runner | wall s | x raw bound | x claims off | CPU s | "
         "launch to 1st task ms |", "| --- | --- | --- | --- | --- | --- |"]
    for name, x in t["runners"].items():
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            t["labels"][name], fmt_s(x["wall_s"]), fmt_m(x["vs_raw"]),
            fmt_m(x["vs_off"], "%.3f"), fmt_m(x["cpu_s"]),
            fmt_m(x["latency_ms"])))
    L.append("")
    L.append("Rounds: %d, interleaved. Claims on: a claims directory of "
             "the run's own (GPUPOOL_CLAIMS), a claim per task. CPU that "
             "claims add a task ((on - off) / N, per round): %s us." % (
                 t["rounds"], fmt_s(t["cpu_us_per_task_added"], "%.1f")))
    L.append("")
    return L


def md_claims_sweeps(s):
    """Two sweeps started together."""
    L = ["### Host-wide GPU claims: two sweeps at once (%d x %d ms each, "
         "4 fake GPUs)" % (s["n"], s["task_ms"]), "",
         "| run | wall s | x one sweep alone | x ideal (2x alone) | "
         "CPU s a run |", "| --- | --- | --- | --- | --- |",
         "| one sweep alone | %s | 1.00 | 0.50 | %s |" % (
             fmt_s(s["alone_s"]), fmt_s(s["alone_cpu_s"], "%.2f")),
         "| two at once: the first to finish | %s | %s | %s | %s |" % (
             fmt_s(s["first_s"]), fmt_s(s["first_over_alone"], "%.2f"),
             fmt_s(s["first_over_ideal"], "%.2f"),
             fmt_s(s["pair_cpu_s"], "%.2f")),
         "| two at once: the last to finish | %s | %s | %s | |" % (
             fmt_s(s["last_s"]), fmt_s(s["last_over_alone"], "%.2f"),
             fmt_s(s["last_over_ideal"], "%.2f")), ""]
    L.append("Both started at once in one claims directory, `gpupool-run "
             "--fake-gpus 4` each (a claim per task); the alone run in "
             "the same round. CPU: a run's own and its tasks' user + "
             "system time (two at once: each of the two). Rounds: %d. "
             "Tasks of the two runs that ran at once on one GPU: %d (each "
             "task records when and on which GPU it ran)." % (
                 s["rounds"], s["clashes"]))
    L.append("")
    return L


def md_claims_beside(b):
    """A short run beside a long sweep."""
    L = ["### Host-wide GPU claims: %d tasks beside a %d-task sweep "
         "(%d ms each)" % (b["short"], b["long"], b["task_ms"]), "",
         "| run | wall s | x alone | in %d ms tasks |" % b["task_ms"],
         "| --- | --- | --- | --- |",
         "| %d tasks alone | %s | 1.00 | %s |" % (
             b["short"], fmt_s(b["alone_s"]),
             fmt_m(b["alone_s"], "%.1f", 1000.0 / b["task_ms"])),
         "| %d tasks beside the sweep | %s | %s | %s |" % (
             b["short"], fmt_s(b["short_s"]),
             fmt_s(b["short_over_alone"], "%.2f"),
             fmt_m(b["short_s"], "%.1f", 1000.0 / b["task_ms"])),
         "| the %d-task sweep | %s | | |" % (b["long"], fmt_s(b["long_s"])),
         ""]
    L.append("The short run starts %.1f s after the sweep (which then "
             "holds every GPU), in its claims directory; wall from its own"
             " launch. It finished while the sweep still ran in %d of %d "
             "rounds; tasks of the two at once on one GPU: %d." % (
                 b["delay_s"], b["inside_sweep"], b["rounds"],
                 b["clashes"]))
    L.append("")
    return L
