/*
 * outcome.c: what became of one attempt (struct attempt): read from the
 * worker's reply (struct task_reply and the bytes after it) when it sent
 * a whole one, else from what the pool says of the item (crashed, timed
 * out, canceled, never run) or from the loss of the rank it ran on; and
 * the one line that describes a failure in messages; and whether a
 * failed task ran out of GPU memory, by the messages the usual libraries
 * print. Pure: it reads the task and the run, changes neither and prints
 * nothing.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "master/master.h"

/* The worker's reply, when it sent a whole one: 1 (oc filled in from
 * it), else 0 (oc untouched). */
static int
from_reply(const struct gp_item *it, struct attempt *oc)
{
	struct task_reply	 rp;
	const char		*p;

	if (rp_reply_decode(it->out, it->outlen, &rp) < 0)
		return 0;
	oc->rp = rp;
	if ((rp.flags & R_STOPPED) && (rp.flags & R_NOSTART)) {
		oc->kind = K_NOTRUN;
		return 1;
	}
	p = (const char *)it->out + sizeof(rp);
	oc->out = p;
	oc->outlen = rp.outlen;
	oc->err = p + rp.outlen;
	oc->errlen = rp.errlen;
	oc->msg = p + rp.outlen + rp.errlen;
	oc->msglen = rp.msglen;
	oc->gpus = oc->msg + rp.msglen;
	oc->gpuslen = rp.gpuslen;
	oc->gpu_mem = rp.gpu_samples > 0 ? rp.gpu_mem : 0;
	oc->gpu_util = rp.gpu_samples > 0 ? rp.gpu_util : -1;
	oc->outcut = rp.outcut;
	oc->errcut = rp.errcut;
	oc->exitval = rp.exitval;
	oc->signal = rp.signal;
	oc->flags = rp.flags;
	oc->start = (double)rp.start_ns / 1e9;
	oc->runtime = (double)rp.run_ns / 1e9;
	/* Its results not written: failed, and not by its code. */
	if (rp.flags & R_NORESULT)
		oc->exitval = -1;
	if (rp.exitval == 0 && rp.signal == 0 &&
	    !(rp.flags & (R_TIMEDOUT | R_NOSTART | R_NORESULT)))
		oc->kind = K_OK;
	else if (rp.flags & R_STOPPED)
		oc->kind = K_STOPPED;
	else {
		oc->kind = K_FAILED;
		oc->oom = outcome_gpu_oom(oc->err, oc->errlen);
	}
	return 1;
}

/* Why the pool refused a task as too big (-E2BIG): what it needs and,
 * where the memory is the reason, the most a GPU here could ever give
 * (here: rank 0's GPUs are the ones this process can tell of). */
static void
too_big(const struct run *r, const struct task *t, struct attempt *oc)
{
	const struct gp_item	*it = &t->item;
	struct gp_gpu_state	 st;
	struct gp_need		 nd;
	uint64_t		 most = 0;
	size_t			 n;
	int			 g;

	need_for_item(r->o->mem, r->o->gpus_per_task, it, &nd);
	n = (size_t)snprintf(oc->why, sizeof(oc->why), "it needs more than "
	    "the GPUs here have: %d at once, %.1f GiB on each",
	    nd.gpus > 1 ? nd.gpus : 1, (double)nd.mem / (1u << 30));
	for (g = 0; t->rank == 0 && r->pool != NULL &&
	    g < gp_pool_gpus(r->pool); g++)
		if (gp_pool_gpu_state(r->pool, g, &st) == 0 &&
		    st.mem_usable > most)
			most = st.mem_usable;
	if (most > 0 && most < nd.mem && n < sizeof(oc->why))
		snprintf(oc->why + n, sizeof(oc->why) - n, "; at most %.1f GiB "
		    "of a GPU can ever be free", (double)most / (1u << 30));
}

/* No reply: what its rank's loss or the pool's status says became of
 * it. */
static void
no_reply(const struct run *r, const struct task *t, struct attempt *oc)
{
	const struct gp_item	*it = &t->item;

	oc->kind = K_FAILED;
	oc->signal = SIGKILL;
	if (t->lost) {
		snprintf(oc->why, sizeof(oc->why), "its rank %d (%s) was lost",
		    t->rank, r->peer[t->rank].host);
		return;
	}
	switch (it->status) {
	case GP_CANCELED:
		/* Killed with its worker (a second ^C), or never started. */
		oc->kind = it->attempts > 0 ? K_STOPPED : K_NOTRUN;
		break;
	case GP_NOTRUN:
		oc->kind = K_NOTRUN;
		break;
	case GP_CRASHED:
		if (it->code > 128)
			snprintf(oc->why, sizeof(oc->why), "its worker was "
			    "killed by signal %d", it->code - 128);
		else
			snprintf(oc->why, sizeof(oc->why), "its worker exited "
			    "with status %d", it->code);
		break;
	case GP_TIMEDOUT:
		oc->flags |= R_TIMEDOUT;
		snprintf(oc->why, sizeof(oc->why), "its worker did not stop "
		    "it in time and was killed");
		break;
	case GP_ERROR:
		if (it->code == -E2BIG)		/* gp_watch_place() */
			too_big(r, t, oc);
		else
			snprintf(oc->why, sizeof(oc->why), "%s",
			    gp_strerror(it->code));
		break;
	default:
		snprintf(oc->why, sizeof(oc->why), "its worker sent no result");
		break;
	}
}

void
outcome_read(const struct run *r, const struct task *t, struct attempt *oc)
{
	const struct gp_item	*it = &t->item;

	memset(oc, 0, sizeof(*oc));
	oc->timeout_ms = t->timeout_ms;
	oc->gpu_util = -1;	/* unknown, until a reply says */
	oc->worker = it->worker;
	oc->exitval = -1;
	oc->start = (double)t->real_ns / 1e9;
	oc->runtime = (double)(gp_now_ns() - t->mono_ns) / 1e9;
	if (!from_reply(it, oc))
		no_reply(r, t, oc);
}

/* A time limit as it was applied: to the ms under 10 s ("0.601s",
 * "1.5s", "2s"; a 0.6 s limit is not "1s"), else as out_fmt_secs() says it. */
static void
fmt_limit(char *buf, size_t len, uint64_t ms)
{
	char	 frac[8];
	size_t	 n;

	if (ms >= 10000) {
		out_fmt_secs(buf, len, (double)ms / 1000);
		return;
	}
	snprintf(frac, sizeof(frac), ".%03u", (unsigned)(ms % 1000));
	for (n = 3; n > 0 && frac[n] == '0'; n--)
		frac[n] = '\0';
	snprintf(buf, len, "%u%ss", (unsigned)(ms / 1000), n > 0 ? frac : "");
}

void
outcome_describe(const struct run *r, const struct attempt *oc, char *buf,
    size_t len)
{
	char	 tmo[32];
	size_t	 n;

	if (oc->flags & R_TIMEDOUT) {
		fmt_limit(tmo, sizeof(tmo), oc->timeout_ms ? oc->timeout_ms :
		    r->o->timeout_ms);
		snprintf(buf, len, "timed out after %s (%s)", tmo,
		    oc->signal ? strsignal(oc->signal) : "exited");
	} else if (oc->why[0])
		snprintf(buf, len, "%s", oc->why);
	else if (oc->msglen > 0)
		snprintf(buf, len, "%.*s", (int)oc->msglen, oc->msg);
	else if (oc->signal)
		snprintf(buf, len, "killed by signal %d (%s)", oc->signal,
		    strsignal(oc->signal));
	else
		snprintf(buf, len, "exit status %d", oc->exitval);
	if (oc->oom && (n = strlen(buf)) < len)
		snprintf(buf + n, len - n, ", GPU out of memory");
}

/*
 * What each library prints when a GPU allocation fails, as seen in
 * their users' reports (GitHub issues cited by repository and number):
 *   PyTorch	"torch.OutOfMemoryError: CUDA out of memory. Tried to
 *		allocate 4.22 GiB" (antgroup/echomimic_v2#115; before 2.5
 *		torch.cuda.OutOfMemoryError, pytorch/pytorch#16417; before
 *		1.13 "RuntimeError: CUDA out of memory.", pytorch/pytorch
 *		#59778); "RuntimeError: CUDA error: out of memory" when a
 *		kernel or library call fails (LBANN/lbann#129 prints the
 *		same from its own check)
 *   TensorFlow	"ResourceExhaustedError: OOM when allocating tensor with
 *		shape[...] ... device:GPU:0 by allocator GPU_0_bfc"
 *		(tensorflow/tensorflow#17669, tensorflow/models#7142); the
 *		same for host memory names device:CPU:0 and allocator cpu
 *		(tensorflow/tensorflow#45238), which is not ours
 *   JAX/XLA	"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED:
 *		Out of memory while trying to allocate 7406166528 bytes."
 *		(google-deepmind/alphafold#1023, sokrypton/ColabFold#65) or
 *		"... Out of memory allocating ..." (onpix/LLNeRF#9)
 *   CUDA	the driver API's name "CUDA_ERROR_OUT_OF_MEMORY: out of
 *		memory" (alphafold#197, from TensorFlow's cuda_driver.cc);
 *		the runtime's "cudaErrorMemoryAllocation: out of memory"
 *		(cupy/cupy#314); and cudaGetErrorString()'s bare "out of
 *		memory" in a program's own check: "GPUassert: out of memory
 *		mean.cu 377" (tromp/cuckoo#53), "CUDA Error: out of memory"
 *		(pjreddie/darknet#499), "CUDA error 2 in file ... out of
 *		memory" (AMReX-Codes/amrex#3189): counted only on a line
 *		that also says CUDA or GPU, any case
 *   cuBLAS	"CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling
 *		`cublasCreate(handle)`" (QwenLM/Qwen3#873)
 *   cuDNN	"Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED"
 *		(tensorflow/tensorflow#39989), "Error in CuDNN:
 *		CUDNN_STATUS_ALLOC_FAILED" (torch/torch7#780)
 * Python's MemoryError, "Cannot allocate memory" (ENOMEM) and
 * std::bad_alloc are the host's and are not matched.
 */
static const char *const oom_any[] = {
	"CUDA out of memory", "torch.OutOfMemoryError",
	"torch.cuda.OutOfMemoryError",
	"CUDA error: out of memory", "CUDA_ERROR_OUT_OF_MEMORY",
	"cudaErrorMemoryAllocation", "RESOURCE_EXHAUSTED: Out of memory",
	"CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
};

/* Matched on a line that names no host device. */
static const char *const oom_tf[] = {
	"OOM when allocating tensor", "ResourceExhaustedError",
};

/* Whether s[0..n) holds w, ASCII case ignored. */
static int
has_nocase(const char *s, size_t n, const char *w)
{
	size_t	 i, k = strlen(w);

	for (i = 0; i + k <= n; i++)
		if (strncasecmp(s + i, w, k) == 0)
			return 1;
	return 0;
}

/* The line of err[0..len) around offset at: *ls and its length. */
static size_t
line_at(const char *err, size_t len, size_t at, const char **ls)
{
	const char	*s = err + at, *e;

	while (s > err && s[-1] != '\n')
		s--;
	if ((e = memchr(err + at, '\n', len - at)) == NULL)
		e = err + len;
	*ls = s;
	return (size_t)(e - s);
}

/* Whether word is on a line of err that passes ok(line). */
static int
on_a_line(const char *err, size_t len, const char *word,
    int (*ok)(const char *, size_t))
{
	const char	*p = err, *ls;
	size_t		 k = strlen(word), ll;

	while ((p = memmem(p, len - (size_t)(p - err), word, k)) != NULL) {
		ll = line_at(err, len, (size_t)(p - err), &ls);
		if (ok(ls, ll))
			return 1;
		p += k;
	}
	return 0;
}

static int
names_no_host(const char *l, size_t n)
{
	return !has_nocase(l, n, "device:CPU") &&
	    !has_nocase(l, n, "MemoryError: Unable");
}

static int
names_gpu(const char *l, size_t n)
{
	return has_nocase(l, n, "CUDA") || has_nocase(l, n, "GPU");
}

int
outcome_gpu_oom(const char *err, size_t len)
{
	size_t	 i;

	if (err == NULL || len == 0)
		return 0;
	for (i = 0; i < sizeof(oom_any) / sizeof(oom_any[0]); i++)
		if (memmem(err, len, oom_any[i], strlen(oom_any[i])) != NULL)
			return 1;
	for (i = 0; i < sizeof(oom_tf) / sizeof(oom_tf[0]); i++)
		if (on_a_line(err, len, oom_tf[i], names_no_host))
			return 1;
	return on_a_line(err, len, "out of memory", names_gpu);
}

void
outcome_usage(struct gp_pool *pool, struct gp_item *it)
{
	struct gp_usage		 u;

	if (it->out != NULL && gp_pool_usage(pool, it->worker, &u) == 0)
		rp_reply_usage(it->out, it->outlen, &u);
}
