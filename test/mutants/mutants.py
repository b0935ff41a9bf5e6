"""The mutants mutate.py applies, one at a time: a line of the tree
changed the way a careless edit would, the invariant of docs/design.md
it breaks, and the tests that must then fail.

    name   unique, what the mutant does
    inv    the invariant's number in docs/design.md
    file   relative to the source root
    old    a fragment that occurs on exactly one line of file (ending it
           with a newline when it must end the line); replaced once
    new    what replaces it
    tests  meson test names, or "suite:NAME"
"""


def M(name, inv, file, old, new, *tests, timeout=1200):
    return {"name": name, "inv": inv, "file": file, "old": old, "new": new,
            "tests": list(tests), "timeout": timeout}


MUTANTS = [
    # 1. CUDA never in the master; workers select their GPU by UUID.
    M("gpu-visible-by-index", 1, "src/gpu.c",
      '"%s", r->dev[i].uuid[0] ? r->dev[i].uuid :',
      '"%d%.0s", i, r->dev[i].uuid[0] ? r->dev[i].uuid :', "check_probe"),
    M("probe-not-in-pci-order", 1, "src/gpu.c",
      '(void)setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);', "(void)0;",
      "check_probe"),
    M("worker-device-order-unset", 1, "src/worker.c",
      'setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) < 0)',
      'setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST", 1) < 0)', "check_probe"),
    # 2. fflush(NULL) before every fork; workers leave by _exit().
    M("no-fflush-before-fork", 2, "src/proc.c", "\tfflush(NULL);\n",
      "\t(void)0;\n", "check_host"),
    # 3. Worker start-up order.
    M("worker-keeps-host-handlers", 3, "src/wstart.c",
      "sa.sa_handler = (sig == SIGINT) ? SIG_IGN : SIG_DFL;",
      "sa.sa_handler = SIG_DFL; if (sig == SIGUSR1) continue;",
      "check_host"),
    M("worker-keeps-host-mask", 3, "src/wstart.c",
      "(void)sigprocmask(SIG_SETMASK, &none, NULL);", "(void)none;",
      "check_host"),
    M("worker-not-bound", 3, "src/worker.c", "\tbind_place(p, w, &rd);\n",
      "\t(void)bind_place;\n", "check_place"),
    M("worker-not-niced", 3, "src/wstart.c",
      "setpriority(PRIO_PROCESS, 0, p->o.nice) < 0", "0",
      "check_exec", "check_parallel"),
    M("execd-step-failure-lost", 3, "src/wstart.c",
      "else if (atomic_load(&w->shm->step) == (int)i + 1)", "else if (0)",
      "check_exec"),
    # 4. Every fd close-on-exec; the worker holds only its own.
    M("task-pipe-not-cloexec", 4, "src/proc.c",
      "if (pipe2(task, O_CLOEXEC) == -1)", "if (pipe2(task, 0) == -1)",
      "check_host", "check_cli"),
    M("worker-keeps-siblings-fds", 4, "src/proc.c", "\t\tclose_others(p);\n",
      "\t\t(void)close_others;\n", "check_host"),
    # 5. Signalled and reaped through the pidfd, by pid.
    M("signal-by-pid-not-pidfd", 5, "src/proc.c",
      "if (w->pidfd >= 0)\n", "if (0)\n", "check_faults_pidns"),
    # 6. Respawn within the budget; no respawn after init failure or
    #    3 failed starts in a row.
    M("failed-init-respawned", 6, "src/loop.c",
      "w->retired = 1;	/* it leaves; never respawned */", "(void)0;",
      "check_faults"),
    M("four-failed-starts-to-retire", 6, "src/internal.h",
      "#define GP_START_DEATHS_MAX	3", "#define GP_START_DEATHS_MAX	4",
      "check_faults"),
    M("failed-starts-not-in-a-row", 6, "src/loop.c",
      "w->start_deaths = 0;", "(void)0;", "check_faults"),
    M("respawn-budget-ignored", 6, "src/proc.c",
      "if (p->respawns == 0)", "if (p->respawns == -2)", "check_faults"),
    # 7. The library leaves the master's signals alone; EINTR handled.
    M("library-ignores-sigpipe", 7, "src/pool.c",
      "if (getpid() != p->master)\n",
      "signal(SIGPIPE, SIG_IGN); if (getpid() != p->master)\n",
      "check_host"),
    M("poll-eintr-fails-the-call", 7, "src/loop.c",
      "\t\t\tif (errno == EINTR)\n\t\t\t\tcontinue;".split("\n")[0] + "\n",
      "\t\t\tif (errno == EINTR && 0)\n", "check_host"),
    # 8. No worker outlives its master.
    M("no-pdeathsig", 8, "src/wstart.c",
      "(void)prctl(PR_SET_PDEATHSIG, GP_DEATH_SIG);", "(void)0;",
      "check_host"),
    M("workers-die-with-their-thread", 8, "src/wstart.c",
      "if (getppid() != death_master)", "if (1)", "check_host"),
    # 9. One status per item, in item order; max_msg before allocation.
    M("max-msg-not-enforced", 9, "src/msg.c", "if (hdr->len > max)",
      "if (hdr->len > max + 1)", "check_msg", "check_pool"),
    # 10. Deadlines are real: the stop at timeout_ms, the kill grace_ms on.
    M("timeout-doubled", 10, "src/loop.c",
      "t = started + (int64_t)p->o.timeout_ms * 1000000;",
      "t = started + (int64_t)p->o.timeout_ms * 2000000;", "check_faults"),
    M("grace-doubled", 10, "src/loop.c",
      "w->kill_at = now + (int64_t)p->o.grace_ms * 1000000;",
      "w->kill_at = now + (int64_t)p->o.grace_ms * 2000000;",
      "check_faults"),
    # 11. Across ranks every task runs where a slot is free.
    M("rank-window-one-task", 11, "src/cli/master/coord.c",
      "\t\treturn (size_t)p->nw;\n", "\t\treturn 1;\n", "skew"),
    # 12. A lost rank loses no task.
    M("silent-rank-never-lost", 12, "src/cli/master/coord.c",
      "if (r->peer[i].lost || r->peer[i].bye || !rank_silent(r, i))",
      "if (r->peer[i].lost || r->peer[i].bye || 1)", "rank-stopped"),
    M("abort-with-banner", 12, "src/cli/ranks/mpi_proc.c",
      "\tif (ompi_mpi_abort != NULL)\n", "\tif (0)\n", "rank-lost"),
    # 14. Each rank uses the GPUs it was given (an inherited list).
    M("given-ids-not-remapped", 14, "src/gpu.c", "\tif (inh == NULL) {\n",
      "\tif (1) {\n", "check_place", "rank-gpus"),
    # 15 (single-threaded forks) has no one-line mutant: breaking it takes
    # a thread started before a fork.
    # 16. One run per joblog.
    M("joblog-not-locked", 16, "src/cli/common/files.c",
      "if (fcntl(fd, F_OFD_SETLK, &fl) == 0)", "if (1)", "check_resume"),
    # 17. --results: the old exitval goes first, the new one last.
    M("old-exitval-kept", 17, "src/cli/worker/results.c",
      'what = "exitval";', 'what = ".none";', "check_results"),
    # 18. Resume's table of the Seqs present, sorted.
    M("resume-table-unsorted", 18, "src/cli/master/joblog.c",
      "qsort(j->ent, j->nent, sizeof(*j->ent), ent_cmp);", "(void)ent_cmp;",
      "check_extras", "check_resume"),
    # 19. gpupool-run stays killable, output bounded.
    M("output-backlog-unbounded", 19, "src/cli/master/output.c",
      "#define OUT_BACKLOG		(1u << 20)", "#define OUT_BACKLOG		(~0u >> 1)",
      "check_output", "check_live"),
    # 20. The code keeps its shape: err.c calls nothing of ours.
    M("err-calls-up", 20, "src/err.c", "va_start(ap, fmt);",
      "va_start(ap, fmt); (void)gp_now_ns();", "shape"),
    # 21. One call at a time per pool.
    M("second-call-not-refused", 21, "src/pool.c",
      "if (!__atomic_compare_exchange_n(&p->job, &(struct gp_job *){ NULL },",
      "if (0 && !__atomic_compare_exchange_n(&p->job, &(struct gp_job *){ NULL },",
      "check_threads"),
    # 22. A pool belongs to the process that created it.
    M("forked-child-uses-the-pool", 22, "src/pool.c",
      "if (getpid() != p->master)\n", "if (0)\n", "check_threads"),
    # 23. Reserved fields must be zero.
    M("reserved-fields-ignored", 23, "src/pool.c",
      "!gp_opts_zeroed(feed->reserved, sizeof(feed->reserved) /",
      "0 && !gp_opts_zeroed(feed->reserved, sizeof(feed->reserved) /",
      "check_pool"),
    M("opts-reserved-ignored", 23, "src/opts.c",
      "if (!gp_opts_zeroed(o->reserved, NELEM(o->reserved)))", "if (0)",
      "check_pool"),
    # 24. An item that ended badly is decided in one place.
    M("retries-off-by-one", 24, "src/job.c",
      "return it->attempts <= retries && !job->canceled;",
      "return it->attempts < retries && !job->canceled;", "check_job",
      "check_faults"),
    # 25. Every worker fork goes through the fork hook.
    M("fork-hook-not-in-child", 25, "src/proc.c",
      "p->o.fork_hook(GP_FORK_CHILD, p->o.fork_arg);", "(void)0;",
      "check_threads"),
    # 26. NVML only in the monitor child.
    M("nvml-path-ignored", 26, "src/nvml.c",
      'const char	*path = getenv("GPUPOOL_NVML");',
      'const char	*path = NULL;', "check_mon"),
    # 28. Declared memory never exceeds a GPU.
    M("fit-off-by-one", 28, "src/gate.c",
      "return used <= g->total && need <= g->total - used;",
      "return used <= g->total && need <= g->total - used + 1;",
      "check_gate", "check_watch"),
    # 29. A GPU seen busy gets no new item.
    M("busy-gpu-fits", 29, "src/gate.c",
      "if (g->held || (free_only && g->busy))", "if (g->held)",
      "check_gate", "check_watch"),
    # 27, 30. Multi-GPU items alone on their GPUs; the head holds the rest.
    M("waiting-head-dropped", 30, "src/dispatch.c",
      "\t\t\tif (bad == 0)\n", "\t\t\tif (bad == 0 && 0)\n", "check_feed"),
    M("held-gpu-fits", 27, "src/gate.c",
      "if (g->held || (free_only && g->busy))", "if (free_only && g->busy)",
      "check_gate", "check_watch"),
    # 31. No NVML means today's behaviour, said once.
    M("no-nvml-taken-as-a-sample", 31, "src/watch.c", "\tif (!s->ok) {\n",
      "\tif (0) {\n", "check_watch", "check_mon"),
    # 32. The monitor dies with the master.
    M("monitor-no-pdeathsig", 32, "src/mon.c",
      "gp_wstart_reset_signals(master, 1);",
      "gp_wstart_reset_signals(master, 0);", "check_mon"),
    # 33. An argument is one inert word.
    M("quote-not-escaped", 33, "src/cli/parallel/repl.c",
      "gp_buf_add(b, \"'\\\\''\", 4);", "gp_buf_add(b, \"'\", 1);",
      "check_repl", "check_grid"),
    # 34. Row N of the product, the first source slowest.
    M("grid-first-source-fastest", 34, "src/cli/parallel/grid.c",
      "for (i = g->nsrc - 1; i >= 0; i--) {",
      "for (i = 0; i < g->nsrc; i++) {", "check_grid"),
    # 36. --line-buffer: lines as they come, never mixed.
    M("line-buffer-holds-lines", 36, "src/cli/master/live.c",
      "if (e == d && k < LIVE_LINE_MAX)", "if (k < LIVE_LINE_MAX)",
      "check_live"),
    # 38. --results files published atomically, exitval last.
    M("results-not-renamed", 38, "src/cli/worker/results.c",
      'static const char *const final_name[] = { "stdout", "stderr", "exitval" };',
      'static const char *const final_name[] = { "stdout.live", "stderr", "exitval" };',
      "check_live", "check_results"),
    # 39. Starts at least --delay apart.
    M("delay-halved", 39, "src/cli/master/feed.c",
      "due = r->last_hand + (int64_t)r->o->delay_ms * 1000000;",
      "due = r->last_hand + (int64_t)r->o->delay_ms * 500000;",
      "check_extras"),
    # 40. --halt N% of all the tasks, at the boundary.
    M("halt-percent-strict", 40, "src/cli/master/feed.c",
      "return (double)*n >= halt_limit(r);",
      "return (double)*n > halt_limit(r);", "check_extras"),
    # 41. --timeout N% only after a success.
    M("timeout-percent-before-a-success", 41, "src/cli/common/median.c",
      "return m->nlo > 0 ? m->lo[0] : -1;", "return m->nlo > 0 ? m->lo[0] : 0.001;",
      "check_extras"),
    # 42. A timeline is drawn whatever ends the run, never half written.
    M("timeline-not-published", 42, "src/cli/master/timeline.c",
      "if (rc == 0 && rename(tl->tmp, tl->path) == -1)",
      "if (rc == 0 && 0)", "check_timeline"),
    # 43. Big bytes through the region, what does not fit through the pipe.
    M("data-plane-off", 43, "src/data.c",
      "if (w->reg == NULL || len < GP_SHM_MIN)", "if (1)", "check_data"),
    M("region-overflows-its-half", 43, "src/msg.c",
      "if (at > size || len > size - at)",
      "if (at > size || len > size - at + 64)", "check_data", "check_msg"),
    M("ring-recv-overlap", 43, "src/cli/ranks/ring.c",
      "at = r->ext[i].off + r->ext[i].len;",
      "at = r->ext[i].off + r->ext[i].len - RING_ALIGN;", "check_ring"),
    M("ring-free-skipped", 43, "src/cli/ranks/mpi_proc.c",
      "else if (frame_put(&mp->out, FR_RING_SENT, 0, &p->ring_off,",
      "else if (0 && frame_put(&mp->out, FR_RING_SENT, 0, &p->ring_off,",
      "pytest", timeout=1800),
    M("item-kept-past-its-result", 43, "python/gpupool/_ranks.py",
      "                key, it = it.key, None  # its bytes go now, whatever\n",
      "                key = it.key  # its bytes go now, whatever\n",
      "pytest", timeout=1800),
    M("extent-freed-early", 43, "python/gpupool/_ring.c",
      "\tself->tag = Py_NewRef(tag);\n",
      "\tself->tag = Py_NewRef(tag);\n\t(void)PyList_Append(freed, tag);\n",
      "pytest", timeout=1800),
    # 44. A batch's region bytes are placed from 0: a replacement (after a
    #     death mid-write) or the next batch never reads stale offsets.
    M("results-offset-kept-across-batches", 44, "src/dispatch.c",
      "\tw->roff = 0;\n", "\t(void)0;\n", "check_data"),
    # 45. One region per slot, mapped in its own worker only.
    M("worker-keeps-other-regions", 45, "src/data.c",
      "if (&p->w[i] != w && p->w[i].reg != NULL) {", "if (0) {",
      "check_data"),
    # 92. An item in the extern mapping is read where it lies, never past it.
    M("ext-offset-unchecked", 92, "src/data.c",
      "if (off > p->o.ext_len || len > p->o.ext_len - off)", "if (0)",
      "check_ext"),
    M("ext-items-copied", 92, "src/data.c",
      "if (b == 0 || len == 0 || a < b || a - b > p->o.ext_len ||",
      "if (1 || len == 0 || a < b || a - b > p->o.ext_len ||",
      "check_ext"),
    # 93. A wait spins a bounded while, and only after a short wait.
    M("spin-after-any-wait", 93, "src/io.c",
      "if (ms != 0 && *last >= 0 && *last < GP_SPIN_NS)", "if (ms != 0)",
      "check_msg"),
    M("spin-unbounded", 93, "src/io.c",
      "while ((r = poll(pfd, n, 0)) == 0 && gp_now_ns() < end)",
      "while ((r = poll(pfd, n, 0)) == 0)", "check_msg"),
    M("spin-wait-unmeasured", 93, "src/io.c",
      "*last = r > 0 ? gp_now_ns() - t0 : -1;", "*last = r > 0 ? 0 : -1;",
      "check_msg"),
    # 94. Rank 0's out ring, read in place by a rank on its host.
    M("ring0-identity-unchecked", 94, "python/gpupool/_link.py",
      '(st.st_dev, st.st_ino) != (rid["dev"], rid["ino"])', "False",
      "pytest", timeout=1800),
    M("ring0-of-another-boot", 94, "python/gpupool/_link.py",
      'or rid.get("boot") != _boot_id():', ":", "pytest", timeout=1800),
    M("ref-item-not-held", 94, "python/gpupool/_link.py",
      "self.refs.setdefault(peer, {})[off] = data",
      "self.refs.setdefault(peer, {})", "pytest", timeout=1800),
    M("reffree-never-sent", 94, "python/gpupool/_link.py",
      "        if self.ref_freed:\n", "        if False:\n", "pytest",
      timeout=1800),
    # 13. All ranks or none.
    M("run-before-every-rank-is-up", 13, "src/cli/master/coord.c",
      "all &= r->peer[i].hello && !r->peer[i].lost;", "all &= 1;",
      "start-fail"),
    # 35. A bad grid runs nothing.
    M("unequal-linked-sources-run", 35, "src/cli/parallel/grid.c",
      "} else if (s->nrow != lead->nrow) {", "} else if (0) {",
      "check_grid"),
    # 37. An unread stdout bounds live output.
    M("live-backlog-80-mib", 37, "src/cli/master/output.c",
      "return out_left(&r->oq) > OUT_BACKLOG ||",
      "return out_left(&r->oq) > 80 * OUT_BACKLOG ||", "check_live"),
    # 46. Results where the caller chose.
    M("callers-buffer-overrun", 46, "src/job.c",
      "if (job->outbufs && len > it->outlen) {", "if (0) {", "check_data"),
    # 51. A worker that starts clean keeps only its descriptors, bound
    #     before its exec.
    M("exec-keeps-host-fds", 51, "src/exec.c", "\tcloexec_all();\n",
      "\t(void)cloexec_all;\n", "check_exec"),
    M("exec-bound-after-nothing", 51, "src/exec.c",
      "\tgp_wstart_bind(p, w, &cpu_rc, &mem_rc);\n",
      "\tcpu_rc = mem_rc = 0;\n", "check_exec"),
    M("exec-opts-keep-paths", 51, "src/opts.c",
      "if (table[k].i.kind == K_GPUS || table[k].i.kind == K_PATH)",
      "if (table[k].i.kind == K_GPUS)", "check_exec"),
    # 52. Python: fork only where it is safe.
    M("cuda-context-forks", 52, "python/gpupool/_start.py",
      "    if cuda is not None:\n", "    if False:\n", "pytest",
      timeout=1800),
    # 53. Threads fitted to each worker's CPUs.
    M("loaded-libraries-not-fitted", 53, "src/wstart.c",
      "\tlimit_loaded(&f);\n", "\t(void)limit_loaded;\n",
      "check_exec"),
    # 47. Python: big objects round-trip as the kinds they were.
    M("python-buffer-kinds-swapped", 47, "python/gpupool/_buf.c",
      "\tif (d & 1)\n", "\tif (!(d & 1))\n", "pytest", timeout=1800),
    # 48. No need waits for ever unsaid.
    M("need-that-never-fits-waits", 48, "src/watch.c",
      "if (m > p->ngpus || (k > 1 && m > k) || !ever_fits(p, mem, m)) {",
      "if (m > p->ngpus || (k > 1 && m > k)) {", "check_gpus"),
    # 49. NVML's figures range-checked.
    M("utilisation-over-100-kept", 49, "src/gate.c",
      "if (mg->util < 0 || mg->util > 100)", "if (mg->util < 0)",
      "check_gate", "check_gpus"),
    # 50. An item's GPU figures are its own.
    M("snapshot-asked-before-counts", 50, "src/watch.c",
      "p->wt.busy[w->idx] = p->wt.mon.pending ? 2 : 1;",
      "p->wt.busy[w->idx] = 1;", "check_watch"),
    # 54. What parallel's documentation types runs as parallel does.
    M("noext-keeps-the-dot", 54, "src/cli/parallel/repl.c",
      "*n = (size_t)(dot - (s + *off));",
      "*n = (size_t)(dot - (s + *off)) + 1;", "parallel_diff", "check_repl"),
    # 55. A joblog resumed or refused, never taken for empty.
    M("parallels-joblog-lines-passed-over", 55, "src/cli/master/joblog.c",
      "if (k < (raw ? PARALLEL_NCOL : PARALLEL_NCOL + 1))",
      "if (k < PARALLEL_NCOL + 1)", "check_parallel"),
    # 56. -k prints in input order.
    M("keep-order-prints-as-it-ends", 56, "src/cli/master/order.c",
      "if (!r->o->keep_order || nth == r->ord.next)", "if (1)",
      "check_parallel"),
    # 57. Arguments from a pipe run as they come.
    M("piped-arguments-read-whole", 57, "src/cli/parallel/gridsrc.c",
      "if (rc == 0 && only && (S_ISFIFO(st.st_mode) ||",
      "if (rc == 0 && 0 && (S_ISFIFO(st.st_mode) ||", "check_parallel"),
    # 58. A checkpointed map: at least once, each result exactly once.
    M("checkpoint-records-terminates-kills", 58,
      "python/gpupool/_ckfile.py",
      "if status not in _RECORDED or stop.is_set():",
      "if status not in _RECORDED:", "pytest", timeout=1800),
    # 59. A record counts only for the same items; nothing lost.
    M("checkpoint-digest-unchecked", 59, "python/gpupool/_checkpoint.py",
      "if digest(self.items[start:end]) != r.digest:", "if False:",
      "pytest", timeout=1800),
    M("checkpoint-torn-tail-kept", 59, "python/gpupool/_ckfile.py",
      "if not self.readonly and self.end < self.size:", "if False:",
      "pytest", timeout=1800),
    # 60. Only the caller holds a checkpoint's lock.
    M("checkpoint-workers-keep-the-lock", 60,
      "python/gpupool/_ckfile.py",
      "os.register_at_fork(after_in_child=_close_in_child)", "pass",
      "pytest", timeout=1800),
    # 61. A Pool across ranks: each result once, and right.
    M("rank-lost-items-never-retried", 61, "python/gpupool/_ranks.py",
      "if it.tries < self.retries and not self.stop:", "if False:",
      "pytest", timeout=1800),
    M("rank-result-taken-twice", 61, "python/gpupool/_ranks.py",
      "it = self.out.pop(i, None)", "it = self.out.get(i)",
      "pytest", timeout=1800),
    # 62. No process left on any rank.
    M("ranks-finalize-after-a-loss", 62, "python/gpupool/_ranks.py",
      "how = C_END_LOST if self.lost else C_END", "how = C_END",
      "pytest", timeout=1800),
    # 64. Every rank makes the pool rank 0 makes, on its own machine.
    M("rank-pool-drops-thresholds", 64, "python/gpupool/_serve.py",
      'kw["ranks"] = False', 'kw["ranks"] = False; kw.pop("busy_pct", None)',
      "pytest", timeout=1800),
    # 65. The shell as parallel finds it, its arguments quoted for it.
    M("shell-parent-only", 65, "src/cli/options/popts.c",
      "for (hops = 0; pid > 0 && hops < SHELL_HOPS; hops++) {",
      "for (hops = 0; pid > 0 && hops < 1; hops++) {", "check_parallel"),
    M("shell-quoted-for-sh", 65, "src/cli/parallel/grid.c",
      "g->rflags = gc->ctx | repl_shell(gc->shell);",
      "g->rflags = gc->ctx;", "check_parallel"),
    # 66. --halt's exit status fixed when met.
    M("halt-status-counted-at-end", 66, "src/cli/master/run.c",
      "if (r->halt_rc >= 0)", "if (r->halt_rc >= 0 && !r->o->halt_pct)",
      "check_extras"),
    # 67. -N caps -m and -X; -N repeats the words holding {}.
    M("pack-cap-one-more", 67, "src/cli/parallel/grid.c",
      "g->packed - last >= (unsigned long)g->gc->per_task)) &&",
      "g->packed - last > (unsigned long)g->gc->per_task)) &&",
      "check_parallel"),
    M("n-no-context", 67, "src/cli/options/popts.c", "if (c == 'N')",
      "if (c == 'Q')", "check_parallel"),
    # 52. (amended) the main thread counts off the main thread.
    M("main-thread-not-counted", 52, "python/gpupool/_start.py",
      "if me is not main and main.is_alive():", "if False:", "pytest",
      timeout=1800),
    # 68. A call's failure or early end is its own.
    M("job-end-cancels-carried-submits", 68, "python/gpupool/_drive.py",
      "        if not self.subs:\n", "        if True:\n", "pytest",
      timeout=1800),
    # 69. Stopping the pool from a callback never waits for its thread.
    M("callback-terminate-waits-for-its-thread", 69,
      "python/gpupool/_pool.py", "return self._hand_over(self.terminate)",
      "pass", "pytest", timeout=2400),
    # 70. A pool that lost every worker keeps what it computed.
    M("lost-pool-raises-runtimeerror", 70, "python/gpupool/_drive.py",
      "                except _gpupool.NoWorkerError:\n",
      "                except _gpupool.InitError:\n", "pytest", timeout=1800),
    # 71. Clean workers: __main__'s top-level functions by name.
    M("main-never-by-name", 71, "python/gpupool/_task.py",
      "b, why = _byname.dumps(fn)", 'b, why = None, "mutant"',
      "pytest", timeout=1800),
    M("main-rerun-in-runpy-copy", 71, "python/gpupool/_spawn.py",
      "run_main(*main[0])", "spawn.prepare(dict(main))", "pytest",
      timeout=1800),
    M("by-name-code-unchecked", 71, "python/gpupool/_byname.py",
      "f.__code__.co_firstlineno == line and _crc(f.__code__) == crc",
      "True", "pytest", timeout=1800),
    # 72. By value where by name cannot; a stdin __main__ starts clean.
    M("stdin-main-run-again", 72, "python/gpupool/_start.py",
      'if path.startswith("<"):', "if False:", "pytest", timeout=1800),
    M("big-by-value-never-said", 72, "python/gpupool/_byname.py",
      "BIG = 1 << 20", "BIG = 1 << 30", "pytest", timeout=1800),
    # 74. What a Python item starts dies with its worker.
    M("worker-shares-callers-group", 74, "python/gpupool/_worker.c",
      "\tif (setpgid(0, 0) < 0) {\n", "\tif (0) {\n", "pytest", timeout=1800),
    M("worker-group-undeclared", 74, "python/gpupool/_worker.c",
      "\tgp_ctx_set_pgid(ctx, getpid());\n", "\t(void)0;\n", "pytest",
      timeout=1800),
    M("worker-stopped-by-tostop", 74, "python/gpupool/_worker.c",
      "sigs[] = { SIGTTOU, SIGTTIN, SIGPIPE, SIGXFSZ };",
      "sigs[] = { SIGURG, SIGURG, SIGPIPE, SIGXFSZ };", "pytest",
      timeout=1800),
    M("worker-dies-of-sigpipe", 74, "python/gpupool/_worker.c",
      "sigs[] = { SIGTTOU, SIGTTIN, SIGPIPE, SIGXFSZ };",
      "sigs[] = { SIGTTOU, SIGTTIN, SIGURG, SIGURG };", "pytest",
      timeout=1800),
    M("own-group-left-at-master-death", 74, "src/wstart.c",
      "(void)kill(getpgrp() == getpid() ? 0 : getpid(), SIGKILL);",
      "(void)kill(getpid(), SIGKILL);", "check_exec"),
    M("idle-worker-leaves-its-group", 74, "src/wstart.c",
      "\t\t(void)kill(0, SIGKILL);\n", "\t\t(void)0;\n", "check_exec"),
    # 51. (amended) an exec'd worker's channel is close-on-exec again.
    M("exec-worker-channel-inherited", 51, "src/exec.c",
      "\t(void)fcntl(fd[1], F_SETFD, FD_CLOEXEC);\n", "\t(void)0;\n",
      "check_exec"),
    # 75. A fork of the caller runs none of the pool's teardown.
    M("forks-take-the-parents-pool-for-theirs", 75,
      "python/gpupool/_pool.py", "return self._pid == os.getpid()",
      "return True",
      "pytest", timeout=1800),
    M("extension-never-counts-forks", 75, "python/gpupool/_call.c",
      "\tgpy_forks++;\n", "\t(void)0;\n", "pytest", timeout=1800),
    # 76. No two gpupools place work on one GPU at once.
    M("claims-ignore-whole-holds", 76, "src/claim.c", "\tif (whole)\n",
      "\tif (0)\n", "exclusive", "users"),
    M("claims-others-count-as-ours", 76, "src/claimtab.c",
      "s->group == gp_ct.group) ? S_OURS : S_OTHER;",
      "s->group == gp_ct.group) ? S_OURS : S_OURS;", "exclusive",
      "fairness"),
    # 77. A claim dies with its holder, and with nothing else.
    M("claims-dead-holders-live-on", 77, "src/claimtab.c",
      "return l.l_type != F_UNLCK;", "return 1;", "kill-handoff"),
    # 78. Waiters are served in the order they came.
    M("claims-queue-ignored", 78, "src/claim.c", "\t\tlast = best;\n",
      "\t\treturn;\n", "fifo", "fairness"),
    # 79. Claims that declare memory share while their sum fits.
    M("claims-declared-take-whole", 79, "src/claim.c",
      "return mem == 0 || gp_ct.g[g].total == 0 || mem >= gp_ct.g[g].total;",
      "return 1;", "shared-mem"),
    # 80. A process never waits for its own pools or its ancestors'.
    M("claims-ancestors-are-others", 80, "src/claimtab.c",
      "if (gp_ct.kin[i] == pid)", "if (0)", "check_threads"),
    # 81. A table that cannot be used never crashes a run.
    M("claims-table-followed", 81, "src/claimtab.c",
      "fd = open(gp_ct.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW |",
      "fd = open(gp_ct.path, O_RDWR | O_CLOEXEC |", "hostile"),
    # 82. The wheel runs where nothing was built, with its own hwloc alone.
    M("wheel-loads-the-machines-hwloc", 82, "src/topo.c",
      '"hwloc_gl,hwloc_opencl,hwloc_xml_libxml,hwloc_pci,hwloc_cuda,"',
      '"hwloc_gl,hwloc_opencl,hwloc_xml_libxml,hwloc_cuda,"', "bare"),
    # 83. MPI is the machine's, and its absence is named.
    M("wheel-carries-mpi", 83, ".ci/wheel",
      "--exclude 'libmpi.so.*' --exclude 'libmpich.so.*' \"$w\"/raw/*.whl",
      "\"$w\"/raw/*.whl", "bare"),
    M("missing-mpi-left-to-the-loader", 83, "src/cli/ranks/mpi_stub.c",
      "mpi_loadable(prog, err, errlen) == -1)", "0)", "bare"),
    M("python-missing-mpi-unnamed", 83, "python/gpupool/_link.py",
      "if rc == 127:", "if rc == 0:", "bare"),
    # 84. A clean worker inherits what spawn's processes do.
    M("clean-worker-without-authkey", 84, "python/gpupool/_start.py",
      'prep["authkey"] = bytes(prep["authkey"])', 'del prep["authkey"]',
      "pytest", timeout=1800),
    # 85. A submit starts on an idle worker at once.
    M("submit-call-ends-with-items-running", 85, "python/gpupool/_drive.py",
      "if (job is None and self.flying and", "if (False and",
      "pytest", timeout=1800),
    M("result-drives-with-others-queued", 85, "python/gpupool/_drive.py",
      "        if not only:\n", "        if False:\n", "pytest",
      timeout=1800),
    M("dispatcher-never-kicked", 85, "python/gpupool/_drive.py",
      "self._cv.wait(left)", "self._cv.wait()", "pytest", timeout=1800),
    M("lone-call-never-parks", 85, "python/gpupool/_drive.py",
      "p._parked = True  # _One", "pass  # _One", "pytest", timeout=1800),
    M("another-thread-not-counted", 85, "python/gpupool/_threads.py",
      "threading.active_count() == 1 + _ours",
      "threading.active_count() <= 2 + _ours", "pytest", timeout=1800),
    M("thread-count-lock-kept-in-a-fork", 85, "python/gpupool/_threads.py",
      "os.register_at_fork(after_in_child=_in_child)", "_in_child", "pytest",
      timeout=1800),
    # 86. A Hydra job fails alone, on a GPU of its own.
    M("hydra-jobs-numbered-per-batch", 86,
      "python/hydra_plugins/hydra_gpupool_launcher/_core.py",
      "futs = [pool.submit(_job, initial_job_idx + i, list(ov), blob, token)",
      "futs = [pool.submit(_job, i, list(ov), blob, token)", "pytest",
      timeout=1800),
    M("hydra-crash-ends-the-sweep", 86,
      "python/hydra_plugins/hydra_gpupool_launcher/_core.py",
      "                ret = _failed(launcher, initial_job_idx + i, ov,",
      "                raise\n                ret = _failed(launcher, i, ov,",
      "pytest", timeout=1800),
    # 87. joblib on gpupool runs as joblib says.
    M("joblib-abort-leaves-items-running", 87, "python/gpupool/joblib.py",
      "            pool.terminate()\n", "            pool.close()\n",
      "pytest", timeout=1800),
    # 88. The integrations weigh nothing on import gpupool.
    M("gpupool-imports-joblib", 88, "python/gpupool/__init__.py",
      "from . import _gpupool\n",
      "from . import _gpupool\nimport joblib  # noqa\n", "pytest",
      timeout=1800),
    # 89. A pool option is one row, the same in every front-end.
    M("python-row-keyword-unlisted", 89, "python/gpupool/_options.py",
      "for k in _ROWS if k not in named]",
      "for k in list(_ROWS)[:-1] if k not in named]", "pytest",
      timeout=1800),
    # 90. No item before the first sample; workers do not wait for it
    # when nothing in the plan reads it.
    M("first-sample-never-folded", 90, "src/pool.c",
      "\tgp_watch_first(p);\n", "\t(void)0;\n", "check_watch"),
    M("late-sample-sizes-not-claimed", 90, "src/pool.c",
      "\tgp_hold_sizes(p);\n", "\t(void)0;\n", "check_watch"),
    M("first-sample-before-the-workers", 90, "src/watch.c",
      "return !(p->o.flags & (GP_POOL_GPUS_FREE | GP_POOL_PLAN_ONLY)) &&",
      "return 0 && !(p->o.flags & GP_POOL_PLAN_ONLY) &&", "check_watch"),
    M("gpus-free-plans-without-the-sample", 90, "src/watch.c",
      "return !(p->o.flags & (GP_POOL_GPUS_FREE | GP_POOL_PLAN_ONLY)) &&",
      "return !(p->o.flags & GP_POOL_PLAN_ONLY) &&", "check_watch"),
    M("fake-gpus-monitored-for-nothing", 90, "src/watch.c",
      "if (!late(p) || (nv != NULL && *nv != '\\0'))",
      "if (1 || (nv != NULL && *nv != '\\0'))", "check_watch"),
    M("named-nvml-ignored-for-fake-gpus", 90, "src/watch.c",
      "if (!late(p) || (nv != NULL && *nv != '\\0'))",
      "if (!late(p))", "check_watch"),
    # 91. A topology from the cache is this system as the process may use
    # it, or is not used.
    M("cached-topology-not-this-system", 91, "src/topo.c",
      "rc = gp_topo_xml(out, buf, len, 1);",
      "rc = gp_topo_xml(out, buf, len, 0);", "check_tcache"),
    M("cache-key-not-compared", 91, "src/tcache.c",
      "memcmp(buf, c->key, klen) != 0 || buf[klen] != '\\n') {",
      "buf[klen] != '\\n') {", "check_tcache"),
    M("cache-affinity-not-in-key", 91, "src/tcache.c", "\taddcpus(&b);\n",
      "\t(void)addcpus;\n", "check_tcache"),
    M("cache-others-may-write", 91, "src/tcache.c",
      "return st->st_uid == geteuid() && (st->st_mode & 022) == 0;",
      "return st->st_uid == geteuid();", "check_tcache"),
]
