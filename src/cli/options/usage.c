/*
 * usage.c: gpupool-run's --help text, so that the options' parsing
 * (opts.c) stays short: our text in pieces, each followed by the lines of
 * the pool options of its block (the library's rows, gp_pool_opt_info():
 * the option, its metavar and its text, each line of it indented as the
 * text around it). check_input's help_and_man_page_agree keeps it and
 * gpupool-run(1) in step.
 */
#include <stdio.h>
#include <string.h>

#include "options/opts.h"

/* The lines of the pool options of group g, in row order. */
static void
pool_lines(int g, FILE *f)
{
	struct gp_opt_info	 in;
	const char		*p, *nl;
	char			 left[64];
	int			 i;

	for (i = 0; gp_pool_opt_info(i, &in) == 0; i++) {
		if (in.cli == NULL || in.group != g)
			continue;
		snprintf(left, sizeof(left), "%s%s%s", in.cli, in.arg ? " " :
		    "", in.arg ? in.arg : "");
		for (p = in.clihelp; p != NULL; p = nl ? nl + 1 : NULL) {
			nl = strchr(p, '\n');
			fprintf(f, "  %-20s %.*s\n", p == in.clihelp ? left :
			    "", nl ? (int)(nl - p) : (int)strlen(p), p);
		}
	}
}

static const struct piece {
	const char	*text;
	int		 group;		/* then its pool options' lines */
} usage[] = {
{
"usage: gpupool-run [OPTIONS] FILE\n"
"       gpupool-run [OPTIONS] -          (tasks from standard input)\n"
"       gpupool-run [OPTIONS] COMMAND ::: ARGS... [::: ARGS...]\n"
"       ... | gpupool-run [OPTIONS] COMMAND  (arguments from stdin, a line each)\n"
"       gpupool-run [OPTIONS] -a FILE [-a FILE]... COMMAND\n"
"       gpupool-run --show-gpus [--gpus LIST]\n"
"       gpupool-run --timeline FILE.svg --from-joblog LOG\n"
"\n"
"Runs each line of FILE, a shell command, on a free GPU slot: at most K\n"
"tasks at a time per GPU, each task seeing only its own GPU. Blank lines\n"
"and lines starting with # are skipped; a line ending in \\ continues on\n"
"the next. Tasks start as soon as their line is read, so a pipe works as\n"
"a queue. One word that is - or a file that is not a program is a tasks\n"
"file; anything else is COMMAND, whose arguments come from :::, ::::, -a\n"
"or, with none of them, standard input (as GNU parallel's).\n"
"\n"
"Argument grids, GNU parallel's way (options go before COMMAND):\n"
"  COMMAND ::: a b ::: x y   one task per row of the product (a x, a y,\n"
"                       b x, b y); :::: FILE takes the arguments from\n"
"                       FILE's lines; :::+ and ::::+ link to the source\n"
"                       before (same length) instead of crossing\n"
"                       (::::+ links every file after it; a ::: word is\n"
"                       cut at newlines, as parallel cuts it)\n"
"  In COMMAND: {} all of the row's arguments, {1} {2}... one, {-1} the\n"
"  last, {#} the task's number, {%} its slot from 1, {.} {/} {//} {/.}\n"
"  without extension, basename, dirname, both ({2.} {2/}...); each\n"
"  argument is shell-quoted. Without any, the arguments are appended.\n"
"  {= perl =} is refused.\n"
"  --colsep SEP         split each argument into columns {1} {2}...\n"
"                       at SEP (\\t: a TAB); , reads CSV (\"a,b\" is one)\n"
"  --header :           the first argument of each source names its\n"
"                       columns: --header : --colsep , train {lr} :::: p.csv\n"
"\n"
"GNU parallel's options, as it means them:\n"
"  -j N, -P N, --jobs N, --max-procs N\n"
"                       N slots in all, spread over the G GPUs (as Python's\n"
"                       processes=N): N a multiple of G is --per-gpu N/G; N\n"
"                       under G one slot on each of the first N GPUs\n"
"  -k, --keep-order     print each task's output in input order\n"
"  -N n, -n n, --max-replace-args n, --max-args n\n"
"                       n rows of the grid per task, {1}..{n}; -N0: insert\n"
"                       none; -N, as -X, repeats a word holding {} for each\n"
"                       value; with -m, -X: at most n per task\n"
"  -m, --xargs, -X      as many arguments (of one source) per task as fit\n"
"                       -s; -X repeats the word holding {} for each\n"
"  -s N, --max-chars N  the line length -m and -X fill (default 131071)\n"
"  -a FILE, --arg-file FILE  a source of arguments, a line each; alone,\n"
"                       with no COMMAND: FILE is a tasks file\n"
"  -d DELIM, --delimiter DELIM  arguments end at DELIM (\\n, \\t, \\0, \\xHH)\n"
"  -0, --null           arguments end at NUL (find -print0)\n"
"  -r, --no-run-if-empty  skip blank arguments; an empty source is no error\n"
"  -E STR, --eof STR    an argument STR ends its source\n"
"  --arg-sep SEP, --arg-file-sep SEP  SEP in place of ::: or ::::\n"
"  --link, --xapply     link every source, as :::+ does\n"
"  -q, --quote          quote each word of COMMAND as one shell word\n"
"  -v                   print each task's command on stdout before its\n"
"                       output (--verbose, -t: on stderr)\n"
"  --tagstring STR      --tag with STR, its replacement strings expanded\n"
"  --shell PATH         the shell of tasks that need one (default, as GNU\n"
"                       parallel's: $PARALLEL_SHELL, else the first shell\n"
"                       among gpupool-run's parents, else $SHELL, else\n"
"                       /bin/sh)\n",
GP_OPT_G_PARALLEL }, {
"  --retry-failed       run again what the joblog records as failed, with\n"
"                       its commands there (no tasks file or COMMAND)\n"
"  -u (--ungroup), --linebuffer, --lb (--line-buffer), --dryrun\n"
"  (--dry-run), --halt-on-error (--halt), --eta, --progress (--bar);\n"
"  --will-cite, --group: accepted, nothing to do. Its pipe, ssh, Perl and\n"
"  own replacement-string options are refused with the reason\n"
"  (gpupool-run(1), DIFFERENCES FROM GNU PARALLEL).\n"
"\n"
"GPUs and slots:\n",
GP_OPT_G_GPUS }, {
"  --per-gpu K          tasks at a time on each GPU (default 1)\n"
"  --mem SIZE           GPU memory each task needs on each of its GPUs:\n"
"                       20G, 1.5GiB, 512M (binary units)\n"
"  --gpus-per-task N    GPUs each task gets, close together (default 1)\n"
"  --threads cpus|no|N  each task's OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,\n"
"                       MKL_..., BLIS_..., VECLIB_..., NUMBA_..., NUMEXPR_...:\n"
"                       the CPUs it is bound to (cpus, the default), N, or\n"
"                       unset (no); one set in the environment is kept\n"
"  --fake-gpus N        N pretend GPUs (testing, machines without GPU);\n"
"                       also GPUPOOL_FAKE_GPUS=N; 0: the real GPUs only\n"
"  --show-gpus          print the GPUs and the cores their workers get\n"
"  --topology XML       place workers on this hwloc XML topology\n"
"  --fake-busids LIST   PCI bus ids of the fake GPUs, for --show-gpus\n"
"\n"
"Records and recovery:\n"
"  --joblog FILE        one line per attempt: GNU parallel's joblog plus\n"
"                       GPU, GPUMem (MiB), GPUUtil (%) and PeakRSS (KiB)\n"
"                       columns; FILE is rewritten unless --resume,\n"
"                       --resume-failed or +FILE (append)\n"
"  --resume             skip tasks the joblog already records (GNU\n"
"                       parallel's too; --results DIR alone also does)\n"
"  --resume-failed      skip only tasks it records as succeeded\n"
"  --wait-lock          wait while another run holds the joblog, the\n"
"                       tasks file or DIR (default: refuse, naming its pid)\n"
"  --retries N          run a failed task up to N more times (any GPU)\n"
"  --timeout DURATION   stop a task after DURATION: 90, 90s, 500ms, 15m,\n"
"                       1.5h, 2d (rounded up to the ms; 0: none); N%: N %\n"
"                       of the median runtime of the tasks that succeeded\n"
"                       before it started (none before the first)\n"
"  --grace DURATION     from SIGTERM to SIGKILL when stopping (default 5s)\n"
"  --halt POLICY        never (default); now,fail=N: after N failed tasks\n"
"                       stop running ones; soon,fail=N: let them finish;\n"
"                       fail=N%: N % of all the tasks; success=N, done=N:\n"
"                       after N succeeded or ended tasks (or N%)\n"
"  --delay DURATION     at least DURATION between two task starts (data\n"
"                       loading staggered), on all slots and ranks\n"
"\n"
"Output:\n"
"  --results DIR        write DIR/SEQ/stdout, stderr and exitval instead\n"
"                       of printing each task's output when it ends\n"
"                       (stdout.live and stderr.live while it runs)\n"
"  --line-buffer        print each task's output line by line as it comes\n"
"                       (lines of tasks never mix; default: a block per\n"
"                       task when it ends)\n"
"  --ungroup            print output bytes as they come (lines may mix)\n"
"  --tag                start each line a task prints with \"task N GPU G\"\n"
"                       (a grid's task: its arguments) and a TAB\n"
"  --bar                progress bar on stderr (default on a terminal)\n"
"  --quiet              no progress bar, notices or summary (not -q)\n"
"  --dry-run            print which task would run where; run nothing\n"
"  --timeline FILE.svg  at the end, draw each attempt on its GPU slot\n"
"  --from-joblog LOG    with --timeline: draw the run LOG records; run\n"
"                       nothing\n"
"  --version, --help\n"
"\n"
"Across nodes (with MPI):\n"
"  --rank-timeout DURATION  a rank silent this long is lost; its tasks\n"
"                       fail or, with --retries, run elsewhere (default 30s)\n"
"\n"
"Each task runs in a process group of its own, stdin /dev/null, with\n"
"  CUDA_VISIBLE_DEVICES  its GPU (the UUID when known)\n"
"  CUDA_DEVICE_ORDER     PCI_BUS_ID\n"
"  GPUPOOL_GPU           the GPU's index in this run, from 0\n"
"  GPUPOOL_SLOT          its slot, from 0 to GPUs x K - 1\n"
"  GPUPOOL_TASK          its number among FILE's tasks, from 1 (joblog Seq)\n"
"  GPUPOOL_ATTEMPT       1, then 2, ... when retried\n"
"  GPUPOOL_RANK          its MPI rank (0 on one machine)\n"
"  PARALLEL_SEQ, PARALLEL_JOBSLOT  GNU parallel's {#} and {%}\n"
"\n"
"GPU sharing (needs NVML, libnvidia-ml.so.1; without it every GPU counts\n"
"as free and nothing is measured):\n"
"  A GPU is busy when a compute process outside this run uses it, when\n"
"  others use more than --busy-pct of its memory, or when NVML cannot\n"
"  tell whose processes are on it (a container). --gpus free leaves busy\n"
"  GPUs out, and a GPU taken by someone mid-run gets no new task until it\n"
"  is free again; --show-gpus says why each GPU is usable or not.\n"
"  With --mem and --per-gpu K, a slot starts a task only while the needs\n"
"  of the tasks on that GPU plus what others use there fit its memory.\n"
"  A line may declare its own needs before its command, overriding --mem\n"
"  and --gpus-per-task:  [mem=20G gpus=2] torchrun --nproc_per_node 2 ...\n"
"  A task with N GPUs holds them alone: CUDA_VISIBLE_DEVICES lists their\n"
"  UUIDs, and its CPUs and memory are bound to the union of their NUMA\n"
"  nodes. The joblog's GPUMem and GPUUtil columns give each task's peak\n"
"  GPU memory (MiB) and mean utilisation (%); a task whose errors show a\n"
"  GPU out-of-memory error is reported so, and with --retries asks for\n"
"  more memory, at most what others leave free. A need no GPU here could\n"
"  ever meet fails at once; a long wait for a GPU is said.\n"
"\n"
"GPU claims (between runs, users and Python pools on one machine):\n"
"  a task starts on a GPU only while its run holds the GPU's claim,\n"
"  taken for the task and given back when it ends; the kernel drops the\n"
"  claims of a process that dies, even by SIGKILL. A GPU claimed by one\n"
"  run gets no task of another, unless both declared --mem and their\n"
"  sum fits it. Runs that wait are served in the order they came, so two\n"
"  sweeps started together share the GPUs, and a short run beside a long\n"
"  one ends in about its own time. A wait is said once, naming who holds\n"
"  the GPUs; --show-gpus lists every holder and waiter. Python's\n"
"  gpupool.claim() gives a script that is not a pool its turn.\n"
"\n"
"Exit status: 0 all succeeded; 1-100 the number of failed tasks; 101 more\n"
"than 100 failed (under --halt, GNU parallel's, fixed when it halts:\n"
"fail=1 the failing task's status, success= 0, N% the share that failed);\n"
"130, 143 or 129 after SIGINT, SIGTERM or SIGHUP; 255\n"
"any other error (a write error on standard output too). A first ^C\n"
"stops the running tasks (SIGTERM, SIGKILL after the grace period), a\n"
"second kills them at once.\n"
"\n"
"Across nodes, in a build with MPI: mpirun -np R gpupool-run ... or,\n"
"under Slurm, srun --mpi=pmix gpupool-run ..., one rank per node, each\n"
"with its node's GPUs (or the CUDA_VISIBLE_DEVICES Slurm gave it). Rank 0\n"
"reads FILE, hands tasks to ranks with free slots, writes the one joblog\n"
"(each task's host in its Host column) and prints output and summary.\n"
"See docs/cluster.md for an sbatch script and what a lost node costs.\n"
"\n"
"Examples:\n"
"  # A hyper-parameter sweep, one run per GPU at a time, on record:\n"
"  for lr in 0.1 0.01 0.001; do for bs in 32 64; do\n"
"    echo \"python train.py --lr $lr --batch $bs --out runs/$lr-$bs\"\n"
"  done; done > sweep.txt\n"
"  gpupool-run --joblog sweep.log --retries 1 sweep.txt\n"
"  # ...or the same sweep as a grid, no file needed:\n"
"  gpupool-run --joblog sweep.log python train.py --lr {1} --batch {2} \\\n"
"    --out runs/{1}-{2} ::: 0.1 0.01 0.001 ::: 32 64\n"
"\n"
"  # After a crash or ^C, run what the joblog does not record...\n"
"  gpupool-run --joblog sweep.log --resume sweep.txt\n"
"  # ...or also what failed:\n"
"  gpupool-run --joblog sweep.log --resume-failed sweep.txt\n"
"\n"
"  # Small jobs: 3 at a time on each of GPUs 0 and 1.\n"
"  gpupool-run --gpus 0,1 --per-gpu 3 evals.txt\n"
"\n"
"  # GNU parallel's way: one task per file found, 8 slots over the GPUs.\n"
"  find . -name '*.ckpt' | gpupool-run -j 8 -k python eval.py {} {.}.json\n"
"\n"
"  # A queue: each line appended to queue.txt runs when a slot is free.\n"
"  tail -n +1 -f queue.txt | gpupool-run --joblog queue.log -\n"
"\n"
"See gpupool-run(1) for the joblog format, signals and more.\n",
GP_OPT_G_NONE },
};

void
usage_print(FILE *f)
{
	size_t	 i;

	for (i = 0; i < sizeof(usage) / sizeof(usage[0]); i++) {
		fputs(usage[i].text, f);
		if (usage[i].group != GP_OPT_G_NONE)
			pool_lines(usage[i].group, f);
	}
}
