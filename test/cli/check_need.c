/*
 * check_need.c: the CLI's front pieces for shared GPUs, with no process
 * run: what a task line declares ("[mem=20G gpus=2] cmd", src/cli/
 * need.c), the sizes --mem takes, the GPU options (opts.c) and the
 * pool's from the library's rows (--help's lines among them), which
 * stderr shows a GPU out-of-memory error (outcome.c). The joblog's own
 * tests are check_joblog.c's.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"
#include "check_main.h"

#define GiB	(1ull << 30)

START_TEST(tag_gives_needs_and_command)
{
	static const struct {
		const char	*line;
		uint64_t	 mem;
		int		 gpus;
		const char	*cmd;
	} t[] = {
		{ "[mem=20G gpus=2] python train.py", 20 * GiB, 2,
		    "python train.py" },
		{ "[gpus=4\tmem=1.5GiB]\t\tcmd a", 3 * GiB / 2, 4, "cmd a" },
		{ "  [mem=512M ]  x", 512ull << 20, 0, "x" },
		{ "[gpus=1]x", 0, 1, "x" },
		{ "[mem=0] true", 0, 0, "true" },
		{ "[mem=2T] [ -f x ] && y", 2ull << 40, 0, "[ -f x ] && y" },
	};
	struct task_need	 nd;
	char			 err[256];
	size_t			 i;
	int			 off;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		err[0] = '\0';
		off = need_parse(t[i].line, &nd, err, sizeof(err));
		ck_assert_msg(off > 0, "'%s': %d %s", t[i].line, off, err);
		ck_assert_str_eq(t[i].line + off, t[i].cmd);
		ck_assert_uint_eq(nd.mem, t[i].mem);
		ck_assert_int_eq(nd.gpus, t[i].gpus);
	}
}
END_TEST

/* Shell syntax that starts with '[' is a command, not a tag. */
START_TEST(shell_brackets_are_commands)
{
	static const char *const cmd[] = {
		"[ -f x ] && echo y", "[[ $a == b ]] && c", "[a-z]* x",
		"[Mem=1G] x", "[=1] x", "[] x", "python [mem=1G]", "", "  ",
		"[mem x",
	};
	struct task_need	 nd;
	char			 err[64];
	size_t			 i;

	for (i = 0; i < sizeof(cmd) / sizeof(cmd[0]); i++) {
		nd.mem = 1;
		nd.gpus = 1;
		ck_assert_msg(need_parse(cmd[i], &nd, err, sizeof(err)) == 0,
		    "'%s' read as a tag", cmd[i]);
		ck_assert_uint_eq(nd.mem, 0);
		ck_assert_int_eq(nd.gpus, 0);
	}
}
END_TEST

START_TEST(bad_tags_say_why)
{
	static const struct {
		const char	*line, *why;
	} t[] = {
		{ "[foo=1] x", "unknown key 'foo' in task options "
		    "(mem=SIZE, gpus=N)" },
		{ "[mem=1G foo=2] x", "unknown key 'foo'" },
		{ "[mem=1G gpus] x", "'gpus' needs a value" },
		{ "[mem=] x", "'mem' needs a value" },
		{ "[mem=20] x", "bad value '20' for mem= in task options: "
		    "needs a unit, e.g. 20G" },
		{ "[mem=20X] x", "bad value '20X' for mem=" },
		{ "[gpus=0] x", "bad value '0' for gpus= in task options: "
		    "not a GPU count (1 to 1024)" },
		{ "[gpus=1025] x", "not a GPU count" },
		{ "[gpus=-1] x", "not a GPU count" },
		{ "[mem=1G mem=2G] x", "'mem' given twice" },
		{ "[mem=1G x", "no ']' closing the task options" },
		{ "[mem=1G]", "task options but no command" },
		{ "[gpus=2]  \t", "task options but no command" },
	};
	struct task_need	 nd;
	char			 err[256];
	size_t			 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(need_parse(t[i].line, &nd, err, sizeof(err)),
		    -EINVAL);
		ck_assert_msg(strstr(err, t[i].why) != NULL, "'%s': '%s', "
		    "not '%s'", t[i].line, err, t[i].why);
	}
}
END_TEST

START_TEST(sizes_are_binary_with_a_unit)
{
	static const struct {
		const char	*s;
		uint64_t	 v;
	} ok[] = {
		{ "20G", 20 * GiB }, { "20GiB", 20 * GiB }, { "20GB", 20 * GiB },
		{ "20Gi", 20 * GiB }, { "20g", 20 * GiB }, { "1.5G", 3 * GiB / 2 },
		{ "512M", 512ull << 20 }, { "64K", 64ull << 10 },
		{ "1T", 1ull << 40 }, { "1024T", 1ull << 50 }, { "0", 0 },
		{ "0G", 0 }, { "0.5K", 512 }, { "0.0001K", 1 }, { ".5G", GiB / 2 },
	};
	static const char *const bad[] = {
		"", "G", "20", "1.5", "-1G", "+1G", "1e3G", "0x10G", "20 G",
		"20GiBs", "20Gb", "20P", "inf", "nan", "1.2.3G", "20B", ".G",
	};
	const char	*why;
	uint64_t	 v;
	size_t		 i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(gp_parse_size(ok[i].s, strlen(ok[i].s), &v,
		    &why) == 0, "'%s' refused: %s", ok[i].s, why);
		ck_assert_msg(v == ok[i].v, "'%s' is %llu", ok[i].s,
		    (unsigned long long)v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		ck_assert_msg(gp_parse_size(bad[i], strlen(bad[i]), &v,
		    &why) < 0, "'%s' taken", bad[i]);
		ck_assert_ptr_nonnull(why);
	}
	ck_assert_int_eq(gp_parse_size("20", 2, &v, &why), -EINVAL);
	ck_assert_str_eq(why, "needs a unit, e.g. 20G");
	ck_assert_int_eq(gp_parse_size("1025T", 5, &v, &why), -ERANGE);
	/* Only n bytes are read: "20G" of "20GX". */
	ck_assert_int_eq(gp_parse_size("20GX", 3, &v, &why), 0);
	ck_assert_uint_eq(v, 20 * GiB);
}
END_TEST

/* opts_parse() on args, its stderr in err (errlen bytes). */
static int
parse(struct opts *o, const char *const *args, char *err, size_t errlen)
{
	char	*argv[16], path[] = "/tmp/check_need.XXXXXX";
	int	 argc = 0, fd, saved, rc;
	ssize_t	 n;

	argv[argc++] = (char *)"gpupool-run";
	while (*args != NULL)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;
	ck_assert_int_ge(fd = mkstemp(path), 0);
	unlink(path);
	saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	optind = 0;
	rc = opts_parse(argc, argv, o);
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, err, errlen - 1, 0);
	err[n > 0 ? n : 0] = '\0';
	close(fd);
	return rc;
}

START_TEST(gpu_options)
{
	struct opts	 o;
	char		 err[512];

	ck_assert_int_eq(parse(&o, (const char *[]){ "-", NULL }, err,
	    sizeof(err)), 0);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_GPUS_FREE), 0);
	ck_assert_int_eq(o.pool.busy_pct, 0);
	ck_assert_uint_eq(o.mem, 0);
	ck_assert_int_eq(o.gpus_per_task, 0);
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "free",
	    "--wait-free", "--busy-pct", "25", "--mem", "1.5G",
	    "--gpus-per-task", "2", "-", NULL }, err, sizeof(err)), 0);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_GPUS_FREE), 1);
	ck_assert_ptr_null(o.pool.gpus);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_WAIT_FREE), 1);
	ck_assert_int_eq(o.pool.busy_pct, 25);
	ck_assert_uint_eq(o.mem, 3 * GiB / 2);
	ck_assert_int_eq(o.gpus_per_task, 2);
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "free:0,2",
	    "-", NULL }, err, sizeof(err)), 0);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_GPUS_FREE), 1);
	ck_assert_str_eq(o.pool.gpus, "0,2");
	/* The last --gpus wins, as a whole. */
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "free",
	    "--gpus", "1", "-", NULL }, err, sizeof(err)), 0);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_GPUS_FREE), 0);
	ck_assert_str_eq(o.pool.gpus, "1");
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "freedom",
	    "-", NULL }, err, sizeof(err)), 0);
	ck_assert_int_eq(!!(o.pool.flags & GP_POOL_GPUS_FREE), 0);
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "free",
	    "--show-gpus", NULL }, err, sizeof(err)), 0);
	ck_assert_int_eq(o.show_gpus, 1);
	ck_assert_int_eq(parse(&o, (const char *[]){ "--gpus", "free",
	    "--busy-util", "60", "-", NULL }, err, sizeof(err)), 0);
	ck_assert_uint_eq(o.pool.busy_util, 60);
}
END_TEST

START_TEST(gpu_option_errors)
{
	static const struct {
		const char	*args[6], *why;
	} t[] = {
		{ { "--gpus", "free:", "-" }, "--gpus: empty GPU list after "
		    "'free:'" },
		{ { "--wait-free", "-" }, "--wait-free needs --gpus free" },
		{ { "--gpus", "0", "--wait-free", "-" }, "--wait-free needs "
		    "--gpus free" },
		{ { "--busy-pct", "20", "-" }, "--busy-pct needs --gpus free" },
		{ { "--busy-util", "20", "-" }, "--busy-util needs --gpus "
		    "free" },
		{ { "--gpus", "free", "--busy-util", "0", "-" }, "--busy-util: "
		    "'0' is not a percentage (1 to 100)" },
		{ { "--gpus", "free", "--busy-pct", "0", "-" }, "--busy-pct: "
		    "'0' is not a percentage (1 to 100)" },
		{ { "--gpus", "free", "--busy-pct", "101", "-" }, "'101' is "
		    "not a percentage" },
		{ { "--mem", "20", "-" }, "--mem: bad size '20': needs a unit, "
		    "e.g. 20G" },
		{ { "--mem", "lots", "-" }, "--mem: bad size 'lots': not a "
		    "size" },
		{ { "--gpus-per-task", "0", "-" }, "--gpus-per-task: '0' is "
		    "not a GPU count (1 to 1024)" },
		{ { "--gpus-per-task", "2x", "-" }, "'2x' is not a GPU count" },
	};
	struct opts	 o;
	char		 err[512];
	size_t		 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		ck_assert_int_eq(parse(&o, t[i].args, err, sizeof(err)), -1);
		ck_assert_msg(strstr(err, t[i].why) != NULL, "'%s', not '%s'",
		    err, t[i].why);
	}
}
END_TEST

/* gpupool-run --help's text, malloc'd. */
static char *
help_text(void)
{
	struct opts	 o;
	char		 path[] = "/tmp/check_need.XXXXXX", *b;
	int		 fd, saved, rc;
	ssize_t		 n;

	ck_assert_int_ge(fd = mkstemp(path), 0);
	unlink(path);
	saved = dup(STDOUT_FILENO);
	dup2(fd, STDOUT_FILENO);
	optind = 0;
	rc = opts_parse(2, (char *[]){ (char *)"gpupool-run",
	    (char *)"--help", NULL }, &o);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	ck_assert_int_eq(rc, 1);
	b = calloc(1, 65536);
	n = pread(fd, b, 65535, 0);
	ck_assert_int_gt(n, 0);
	close(fd);
	return b;
}

START_TEST(help_says_how_gpus_are_shared)
{
	char	*b = help_text();

	ck_assert_ptr_nonnull(strstr(b, "GPU sharing"));
	ck_assert_ptr_nonnull(strstr(b, "--busy-pct"));	/* what is busy */
	ck_assert_ptr_nonnull(strstr(b, "--per-gpu K, a slot"));
	ck_assert_ptr_nonnull(strstr(b, "[mem=20G gpus=2]"));
	ck_assert_ptr_nonnull(strstr(b, "CUDA_VISIBLE_DEVICES lists their"));
	ck_assert_ptr_nonnull(strstr(b, "union"));
	free(b);
}
END_TEST

/* The pool options gpupool-run spells are the library's rows
 * (gp_pool_opt_info()): each in --help, in its block, with its text;
 * none among GNU parallel's options popts.c refuses, which getopt would
 * never let it see (a row added with such a spelling fails here). */
START_TEST(pool_options_come_from_the_rows)
{
	struct gp_opt_info	 in;
	char			*b = help_text(), want[128];
	const char		*at, *nl;
	int			 i, n = 0;

	for (i = 0; gp_pool_opt_info(i, &in) == 0; i++) {
		if (in.cli == NULL)
			continue;
		n++;
		ck_assert_msg(popt_refused(in.cli) == 0, "%s", in.cli);
		snprintf(want, sizeof(want), "\n  %s%s%s", in.cli, in.arg ?
		    " " : "", in.arg ? in.arg : "");
		ck_assert_msg((at = strstr(b, want)) != NULL, "%s", want);
		nl = strchr(in.clihelp, '\n');
		snprintf(want, sizeof(want), " %.*s\n", nl ? (int)(nl -
		    in.clihelp) : (int)strlen(in.clihelp), in.clihelp);
		ck_assert_msg(strstr(at, want) == at + 23, "%s: %s",
		    in.cli, want);
		ck_assert_msg(at > strstr(b, in.group == GP_OPT_G_GPUS ?
		    "\nGPUs and slots:\n" : "\nGNU parallel's options"),
		    "%s", in.cli);
	}
	ck_assert_int_ge(n, 7);
	/* The GPUs block's rows print together, before --per-gpu. */
	ck_assert(strstr(b, "\n  --claim-timeout SECS stop (exit 255)") <
	    strstr(b, "\n  --per-gpu K"));
	ck_assert(strstr(b, "\n  --shell PATH") < strstr(b, "\n  --nice N"));
	ck_assert(strstr(b, "\n  --nice N") < strstr(b, "\n  --retry-failed"));
	free(b);
}
END_TEST

/* Real-looking stderr of failed tasks: a GPU out of memory... */
static const char *const oom[] = {
	"Traceback (most recent call last):\n  File \"train.py\", line 9\n"
	"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.22 "
	"GiB. GPU 0 has a total capacity of 15.69 GiB of which 3.71 GiB is "
	"free.\n",
	"torch.cuda.OutOfMemoryError: oops\n",
	"RuntimeError: CUDA out of memory. Tried to allocate 92.00 MiB (GPU "
	"0; 1.96 GiB total capacity)\n",
	"RuntimeError: CUDA error: out of memory\nCUDA kernel errors might "
	"be asynchronously reported\n",
	"tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM "
	"when allocating tensor with shape[16,112,112,147] and type float on "
	"/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n",
	"W op_kernel.cc:1202] OP_REQUIRES failed at tile_ops.cc:123 : "
	"Resource exhausted: OOM when allocating tensor with shape[16,1] on "
	"/job:localhost/replica:0/task:0/device:GPU:0\n",
	"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of "
	"memory while trying to allocate 7406166528 bytes.\n",
	"E cuda_driver.cc:764] failed to alloc 2740606464 bytes; result: "
	"CUDA_ERROR_OUT_OF_MEMORY: out of memory\n",
	"cupy.cuda.runtime.CUDARuntimeError: cudaErrorMemoryAllocation: out "
	"of memory\n",
	"starting\nGPUassert: out of memory mean.cu 377\n",
	"    0 CUDA Error: out of memory\ndarknet: ./src/cuda.c:36: "
	"check_error: Assertion `0' failed.\n",
	"RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
	"`cublasCreate(handle)`\n",
	"E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create "
	"cudnn handle: CUDNN_STATUS_ALLOC_FAILED\n",
};

/* ...and not. */
static const char *const not_oom[] = {
	"", "Traceback (most recent call last):\nMemoryError\n",
	"numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.00 "
	"GiB for an array with shape (1024, 1024, 768)\n",
	"bash: fork: Cannot allocate memory\n",
	"fatal: Out of memory, malloc failed (tried to allocate 1048576 "
	"bytes)\n",
	"terminate called after throwing an instance of 'std::bad_alloc'\n",
	"W op_kernel.cc:1763] OP_REQUIRES failed at cast_op.cc:109 : Resource "
	"exhausted: OOM when allocating tensor with shape[1,559,512,3] and "
	"type float on /job:localhost/replica:0/task:0/device:CPU:0 by "
	"allocator cpu\n",
	"GPU 0: warming up\nmalloc: out of memory\n",
	"RuntimeError: CUDA error: device-side assert triggered\n",
	"loss=nan at step 30 (GPU 1)\n",
};

START_TEST(oom_is_seen_in_stderr)
{
	char	 buf[4096];
	size_t	 i, n;

	for (i = 0; i < sizeof(oom) / sizeof(oom[0]); i++)
		ck_assert_msg(outcome_gpu_oom(oom[i], strlen(oom[i])),
		    "missed: %s", oom[i]);
	for (i = 0; i < sizeof(not_oom) / sizeof(not_oom[0]); i++)
		ck_assert_msg(!outcome_gpu_oom(not_oom[i], strlen(not_oom[i])),
		    "false OOM: %s", not_oom[i]);
	ck_assert_int_eq(outcome_gpu_oom(NULL, 0), 0);
	/* Found in a stream's middle, and only in the bytes given (the
	 * stream is not NUL-terminated). */
	n = (size_t)snprintf(buf, sizeof(buf), "%s%s%s", not_oom[1], oom[9],
	    not_oom[3]);
	ck_assert_int_eq(outcome_gpu_oom(buf, n), 1);
	ck_assert_int_eq(outcome_gpu_oom(oom[0], 20), 0);
}
END_TEST

/* A worker's reply for exit status ev with stderr err, as t's result. */
static void
reply(struct task *t, int ev, const char *err)
{
	struct task_reply	 rp;
	size_t			 n = strlen(err);

	memset(t, 0, sizeof(*t));
	memset(&rp, 0, sizeof(rp));
	rp.exitval = ev;
	rp.errlen = n;
	t->item.outlen = sizeof(rp) + n;
	ck_assert_ptr_nonnull(t->item.out = malloc(t->item.outlen));
	rp_reply_encode(t->item.out, &rp);
	memcpy((char *)t->item.out + sizeof(rp), err, n);
}

/* A failed attempt whose stderr shows it is recorded and described as
 * out of GPU memory; a task that succeeded is not, whatever it said. */
START_TEST(oom_attempt_is_described)
{
	struct task	 t;
	struct attempt	 oc;
	char		 buf[160];

	reply(&t, 1, oom[2]);
	outcome_read(NULL, &t, &oc);
	ck_assert_int_eq(oc.kind, K_FAILED);
	ck_assert_int_eq(oc.oom, 1);
	outcome_describe(NULL, &oc, buf, sizeof(buf));
	ck_assert_str_eq(buf, "exit status 1, GPU out of memory");
	free(t.item.out);
	reply(&t, 1, not_oom[1]);
	outcome_read(NULL, &t, &oc);
	ck_assert_int_eq(oc.oom, 0);
	outcome_describe(NULL, &oc, buf, sizeof(buf));
	ck_assert_str_eq(buf, "exit status 1");
	free(t.item.out);
	reply(&t, 0, oom[2]);
	outcome_read(NULL, &t, &oc);
	ck_assert_int_eq(oc.kind, K_OK);
	ck_assert_int_eq(oc.oom, 0);
	free(t.item.out);
}
END_TEST

int
main(void)
{
	Suite	*s = suite_create("need");
	TCase	*tc = tcase_create("need");

	tcase_add_test(tc, tag_gives_needs_and_command);
	tcase_add_test(tc, shell_brackets_are_commands);
	tcase_add_test(tc, bad_tags_say_why);
	tcase_add_test(tc, sizes_are_binary_with_a_unit);
	tcase_add_test(tc, gpu_options);
	tcase_add_test(tc, gpu_option_errors);
	tcase_add_test(tc, help_says_how_gpus_are_shared);
	tcase_add_test(tc, pool_options_come_from_the_rows);
	tcase_add_test(tc, oom_is_seen_in_stderr);
	tcase_add_test(tc, oom_attempt_is_described);
	suite_add_tcase(s, tc);
	return gp_check_run(s);
}
