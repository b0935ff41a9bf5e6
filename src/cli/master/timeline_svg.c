/*
 * timeline_svg.c: the timeline's drawing, an SVG any browser shows: a
 * row per slot (or per host and GPU), a bar per attempt coloured by its
 * outcome over a light row (idle time shows as gaps), a <title> on each
 * bar for the browser's tooltip, a time axis and a legend. It must stay
 * small at 10^5 attempts: at most TL_BARS bars are drawn one by one, the
 * widest, and none under a pixel wide; the others are merged, per lane
 * and pixel column, into a density strip coloured by the worst outcome
 * there and shaded by how busy the column was. Everything taken from
 * the run or the joblog (commands, hosts, GPU ids) is escaped: the file
 * is well-formed XML whatever bytes a command holds.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "master/master.h"

#define WIDTH		1000	/* px, the whole picture */
#define PLOT_X		190	/* where the time axis starts */
#define PLOT_W		(WIDTH - PLOT_X - 20)
#define TOP		58	/* the first row's top */
#define ROW_GAP		4
#define LANES_MAX	64	/* sub-rows per row, at most */
#define CMD_MAX		200	/* bytes of a command in a title */
#define STRIPS_MAX	6000	/* runs of merged columns, at most */
#define IDLE_FILL	"#eceff1"

static const char *const kind_fill[TL_NKIND] = {
	"#43a047", "#fbc02d", "#9e9e9e", "#8e24aa", "#fb8c00", "#e53935",
};
static const char *const kind_name[TL_NKIND] = {
	"ok", "retried", "not started", "killed by signal", "timed out",
	"failed",
};

struct geo {
	double		 t0, t1;	/* epoch s: first start, last end */
	double		 px;		/* px per second */
	double		 thr;		/* bars this wide are drawn alone */
	int		 lane_h;
	int		*row_y;		/* per row: its top */
	int		*order;		/* rows, in drawing order */
	int		 y_end;		/* below the last row */
	int		 merged;	/* some attempts are in a strip */
	unsigned long	 ntasks;
	unsigned long	 nkind[TL_NKIND];
};

/* The length of a valid UTF-8 sequence at s that XML allows, else 0. */
static size_t
utf8_len(const unsigned char *s)
{
	unsigned	 cp;
	size_t		 n, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)	/* a NUL ends it too */
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 ||
	    cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff) ||
	    cp == 0xfffe || cp == 0xffff)
		return 0;
	return n;
}

/* s as XML text, cut after about max bytes ("..." then): markup
 * characters as entities; control bytes, which XML forbids even as
 * references, and bytes that are not UTF-8 as \xNN. */
static void
put_text(FILE *f, const char *s, size_t max)
{
	const unsigned char	*p = (const unsigned char *)s;
	size_t			 n, out = 0;

	for (; *p != '\0'; p += n, out += n) {
		if (out >= max) {
			fputs("...", f);
			return;
		}
		n = 1;
		if (*p == '&')
			fputs("&amp;", f);
		else if (*p == '<')
			fputs("&lt;", f);
		else if (*p == '>')
			fputs("&gt;", f);
		else if (*p == '"')
			fputs("&quot;", f);
		else if ((*p < 0x20 && *p != '\t' && *p != '\n') ||
		    *p == 0x7f || (n = utf8_len(p)) == 0) {
			fprintf(f, "\\x%02x", *p);
			n = 1;
		} else
			fwrite(p, 1, n, f);
	}
}

/* "GPU 0", "GPU fake1", or a UUID as nvidia-smi -L shortens it
 * ("GPU-8f2a3b4c..." at max 12); "GPUs 0,1" for several. */
static void
put_gpu(FILE *f, const char *gpu, size_t max)
{
	if (strncmp(gpu, "GPU-", 4) == 0 || strncmp(gpu, "MIG-", 4) == 0)
		put_text(f, gpu, max);
	else {
		fputs(strchr(gpu, ',') != NULL ? "GPUs " : "GPU ", f);
		put_text(f, gpu, 24);
	}
}

struct bar_order {
	const struct tl_bar	*bar;
	int			 rows;	/* by row and lane, not Seq */
};

/* By Seq, or by row and lane; then by start, and by index (qsort() is
 * not stable). */
static int
bar_cmp(const void *a, const void *b, void *arg)
{
	const struct bar_order	*o = arg;
	size_t			 i = *(const size_t *)a, j = *(const size_t *)b;
	const struct tl_bar	*x = &o->bar[i], *y = &o->bar[j];
	unsigned long		 kx = o->rows ? (unsigned long)x->row : x->seq;
	unsigned long		 ky = o->rows ? (unsigned long)y->row : y->seq;

	if (kx != ky)
		return kx < ky ? -1 : 1;
	if (o->rows && x->lane != y->lane)
		return x->lane < y->lane ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return i < j ? -1 : i > j;
}

static void
bar_sort(const struct timeline *tl, size_t *idx, int rows)
{
	struct bar_order	 o = { tl->bar, rows };

	qsort_r(idx, tl->nbar, sizeof(*idx), bar_cmp, &o);
}

static int
row_cmp(const void *a, const void *b, void *arg)
{
	const struct tl_row	*row = arg;
	const struct tl_row	*x = &row[*(const int *)a];
	const struct tl_row	*y = &row[*(const int *)b];
	int			 c;

	if ((c = strverscmp(x->host, y->host)) != 0)
		return c;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return strverscmp(x->gpu, y->gpu);
}

/* Attempt numbers, tasks counted, and a failure followed by another
 * attempt of its task is "retried"; idx is a scratch array. */
static void
classify(struct timeline *tl, struct geo *g, size_t *idx)
{
	struct tl_bar	*b, *next;
	size_t		 i;

	bar_sort(tl, idx, 0);
	for (i = 0; i < tl->nbar; i++) {
		b = &tl->bar[idx[i]];
		next = i + 1 < tl->nbar ? &tl->bar[idx[i + 1]] : NULL;
		b->attempt = i > 0 && tl->bar[idx[i - 1]].seq == b->seq ?
		    tl->bar[idx[i - 1]].attempt + 1 : 1;
		if (b->attempt == 1)
			g->ntasks++;
		if (b->kind != TL_OK && next != NULL && next->seq == b->seq)
			b->kind = TL_RETRIED;
		g->nkind[b->kind]++;
	}
}

/* Spread each row's attempts over lanes, so that none overlaps another
 * in its lane (a joblog's GPU with several slots; clock steps), the
 * earliest free lane first; past LANES_MAX, the lane free the soonest. */
static void
lanes(struct timeline *tl, size_t *idx)
{
	double		 end[LANES_MAX];
	struct tl_bar	*b;
	size_t		 i;
	int		 l, row = -1, n = 0, best;

	for (i = 0; i < tl->nbar; i++)
		tl->bar[i].lane = 0;
	bar_sort(tl, idx, 1);
	for (i = 0; i < tl->nbar; i++) {
		b = &tl->bar[idx[i]];
		if (b->row != row) {
			row = b->row;
			n = 0;
		}
		for (l = 0, best = 0; l < n && end[l] > b->start + 1e-6; l++)
			if (end[l] < end[best])
				best = l;
		if (l == n && n < LANES_MAX)
			n++;
		else if (l == n)
			l = best;
		end[l] = b->start + b->runtime;
		b->lane = l;
		if (tl->row[row].lanes < n)
			tl->row[row].lanes = n;
	}
	/* Drawn by row and lane from here on. */
	bar_sort(tl, idx, 1);
}

static int
dbl_desc(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return x > y ? -1 : x < y;
}

/* The scale, the rows' places and the narrowest bar drawn alone: a
 * pixel, or more when over TL_BARS are that wide. 0 or -ENOMEM. */
static int
layout(struct timeline *tl, struct geo *g)
{
	double	*w;
	size_t	 i, wide = 0;
	int	 k, y, lanes_all = 0;

	g->t0 = tl->nbar ? tl->bar[0].start : 0;
	g->t1 = g->t0;
	for (i = 0; i < tl->nbar; i++) {
		if (tl->bar[i].start < g->t0)
			g->t0 = tl->bar[i].start;
		if (tl->bar[i].start + tl->bar[i].runtime > g->t1)
			g->t1 = tl->bar[i].start + tl->bar[i].runtime;
	}
	if (g->t1 - g->t0 < 1e-3)
		g->t1 = g->t0 + 1e-3;
	g->px = PLOT_W / (g->t1 - g->t0);
	for (k = 0; k < tl->nrow; k++) {
		g->order[k] = k;
		lanes_all += tl->row[k].lanes;
	}
	qsort_r(g->order, (size_t)tl->nrow, sizeof(int), row_cmp, tl->row);
	g->lane_h = lanes_all <= 48 ? 14 : lanes_all <= 200 ? 6 : 3;
	for (k = 0, y = TOP; k < tl->nrow; k++) {
		g->row_y[g->order[k]] = y;
		y += tl->row[g->order[k]].lanes * g->lane_h + ROW_GAP;
	}
	g->y_end = y;
	g->thr = 1.0;
	if ((w = malloc((tl->nbar + 1) * sizeof(*w))) == NULL)
		return -ENOMEM;
	for (i = 0; i < tl->nbar; i++)
		if ((w[wide] = tl->bar[i].runtime * g->px) >= 1.0)
			wide++;
	if (wide > TL_BARS) {
		qsort(w, wide, sizeof(*w), dbl_desc);
		g->thr = nextafter(w[TL_BARS], INFINITY);
	}
	free(w);
	return 0;
}

/* A time as the axis and the titles write it: from the run's start. */
static void
fmt_t(char *buf, size_t len, double s, double step)
{
	if (step < 1)	/* as many decimals as the step needs, up to 3 */
		snprintf(buf, len, "%.*fs", step >= 0.1 ? 1 : step >= 0.01 ?
		    2 : 3, s);
	else
		out_fmt_secs(buf, len, s);
}

static void
put_head(FILE *f, const struct timeline *tl, const struct geo *g)
{
	char			 when[64], dur[32], key[64];
	time_t			 t0 = (time_t)g->t0;
	struct tm		 tm;
	int			 k, x;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
	    "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
	    "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
	    "fill=\"#fff\"/>\n", WIDTH, g->y_end + 40, WIDTH, g->y_end + 40);
	when[0] = '\0';
	if (tl->nbar > 0 && localtime_r(&t0, &tm) != NULL)
		strftime(when, sizeof(when), ", from %Y-%m-%d %H:%M:%S %Z",
		    &tm);
	fmt_t(dur, sizeof(dur), g->t1 - g->t0, g->t1 - g->t0);
	fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"13\" "
	    "font-weight=\"bold\">gpupool-run: %zu attempt%s of %lu task%s "
	    "on %d row%s%s, %s", tl->nbar, tl->nbar == 1 ? "" : "s",
	    g->ntasks, g->ntasks == 1 ? "" : "s", tl->nrow,
	    tl->nrow == 1 ? "" : "s", when, dur);
	if (tl->source != NULL) {
		fputs(" (joblog ", f);
		put_text(f, tl->source, CMD_MAX);
		fputs(")", f);
	}
	fputs("</text>\n", f);
	fprintf(f, "<g class=\"legend\"><rect x=\"10\" y=\"28\" width=\"10\" "
	    "height=\"10\" fill=\"%s\"/><text x=\"24\" y=\"37\">idle</text>\n",
	    IDLE_FILL);
	for (k = 0, x = 60; k < TL_NKIND; k++) {
		if (k == TL_NOSTART && g->nkind[k] == 0)
			continue;
		snprintf(key, sizeof(key), "%s %lu", kind_name[k],
		    g->nkind[k]);
		fprintf(f, "<rect class=\"key\" x=\"%d\" y=\"28\" width=\"10\" "
		    "height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"37\">%s"
		    "</text>\n", x, kind_fill[k], x + 14, key);
		x += 14 + 6 * (int)strlen(key) + 18;
	}
	if (g->merged)
		fprintf(f, "<text x=\"%d\" y=\"37\" fill=\"#555\">narrow "
		    "attempts merged: paler = idler, marks = worst failure</text>\n", x);
	fputs("</g>\n", f);
}

/* A row's band, its label and, for its attempts, nothing yet. */
static void
put_rows(FILE *f, const struct timeline *tl, const struct geo *g)
{
	const struct tl_row	*r;
	int			 k, h;

	fputs("<g class=\"rows\">\n", f);
	for (k = 0; k < tl->nrow; k++) {
		r = &tl->row[g->order[k]];
		h = r->lanes * g->lane_h;
		fprintf(f, "<rect class=\"row\" x=\"%d\" y=\"%d\" width=\"%d\" "
		    "height=\"%d\" fill=\"%s\"/>", PLOT_X, g->row_y[g->order[k]],
		    PLOT_W, h, IDLE_FILL);
		fprintf(f, "<text class=\"label\" x=\"%d\" y=\"%d\" "
		    "text-anchor=\"end\">", PLOT_X - 6,
		    g->row_y[g->order[k]] + h / 2 + 4);
		if (strcmp(r->host, ":") != 0) {
			put_text(f, r->host, 16);
			fputs(" ", f);
			if (r->slot >= 0)	/* two ranks may share a host */
				fprintf(f, "r%d ", r->rank);
		}
		put_gpu(f, r->gpu, 12);
		if (r->slot >= 0)
			fprintf(f, " slot %d", r->slot);
		fputs("</text>\n", f);
	}
	fputs("</g>\n", f);
}

/* The time axis: ticks every 1, 2, 5, 10, 15 or 30 units of a scale
 * that gives at most 8 of them (past a week: 1, 2, 5, 10... weeks),
 * and a faint line down each. */
static void
put_axis(FILE *f, const struct geo *g)
{
	static const double	 steps[] = { 0.001, 0.002, 0.005, 0.01, 0.02,
	    0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900,
	    1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800 };
	double			 d = g->t1 - g->t0, step = steps[0], t;
	char			 lab[32];
	size_t			 i, n;
	int			 x;

	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((step = steps[i]) * 8 >= d)
			break;
	for (i = 0; step * 8 < d && isfinite(d); i++)
		step *= i % 3 == 1 ? 2.5 : 2;
	fprintf(f, "<g class=\"axis\" stroke=\"#999\"><line x1=\"%d\" "
	    "y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n<g class=\"ticks\">\n",
	    PLOT_X, g->y_end + 2, PLOT_X + PLOT_W, g->y_end + 2);
	for (t = 0; isfinite(d) && t <= d + step * 1e-9; t += step) {
		x = PLOT_X + (int)lround(t * g->px);
		fmt_t(lab, sizeof(lab), t, step);
		/* "2h", "5m" rather than "2h00m", "5m00s". */
		if ((n = strlen(lab)) > 3 && strcmp(lab + n - 3, "00m") == 0)
			lab[n - 3] = '\0';
		else if (n > 3 && strcmp(lab + n - 3, "00s") == 0)
			lab[n - 3] = '\0';
		fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
		    "stroke=\"#bbb\" stroke-width=\"0.5\"/><text x=\"%d\" "
		    "y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, TOP - 2,
		    x, g->y_end + 6, x, g->y_end + 18, lab);
	}
	fprintf(f, "</g>\n<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
	    "fill=\"#555\">time from the first start</text>\n",
	    PLOT_X + PLOT_W, g->y_end + 32);
}

/* One attempt's bar, with its tooltip. */
static void
put_bar(FILE *f, const struct timeline *tl, const struct geo *g,
    const struct tl_bar *b)
{
	char	 at[32], rt[32];
	double	 x = PLOT_X + (b->start - g->t0) * g->px;

	fmt_t(at, sizeof(at), b->start - g->t0, b->start - g->t0 < 60 ?
	    0.01 : 1);
	fmt_t(rt, sizeof(rt), b->runtime, b->runtime < 60 ? 0.01 : 1);
	fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
	    "height=\"%d\" fill=\"%s\"><title>task %lu", x,
	    g->row_y[b->row] + b->lane * g->lane_h + 1, b->runtime * g->px,
	    g->lane_h - 2, kind_fill[b->kind], b->seq);
	if (b->attempt > 1 || b->kind == TL_RETRIED)
		fprintf(f, " attempt %u", b->attempt);
	fprintf(f, ": %s", kind_name[b->kind]);
	if (b->signal != 0)
		fprintf(f, ", signal %d", b->signal);
	else if (b->exitval != 0)
		fprintf(f, ", exit status %d", b->exitval);
	fputs("\n", f);
	put_gpu(f, b->gpu, 160);
	if (strcmp(tl->row[b->row].host, ":") != 0) {
		fputs(" on ", f);
		put_text(f, tl->row[b->row].host, 64);
	}
	fprintf(f, ", started at +%s, ran %s\n", at, rt);
	put_text(f, b->cmd, CMD_MAX);
	fputs("</title></rect>\n", f);
}

/* One lane's merged attempts, per column of cw pixels: how busy it was,
 * the worst outcome other than ok there, and how many attempts of each
 * kind started in it. */
struct strip {
	int		 cw, ncol;
	double		*busy;		/* pixels of work */
	signed char	*worst;		/* -1: none failed */
	unsigned	*cnt;		/* [kind * ncol + column] */
	int		 used;
};

static void
strip_add(struct strip *s, const struct geo *g, const struct tl_bar *b)
{
	double	 x0 = (b->start - g->t0) * g->px / s->cw;
	double	 x1 = x0 + b->runtime * g->px / s->cw, ov;
	int	 c, c0, c1;

	c0 = (int)floor(x0);
	c1 = (int)ceil(x1) - 1;
	c0 = c0 < 0 ? 0 : c0 >= s->ncol ? s->ncol - 1 : c0;
	c1 = c1 < c0 ? c0 : c1 >= s->ncol ? s->ncol - 1 : c1;
	for (c = c0; c <= c1; c++) {
		ov = fmin(x1, c + 1) - fmax(x0, c);
		s->busy[c] += ov > 0 ? ov : 1e-9;
		if (b->kind != TL_OK && s->worst[c] < b->kind)
			s->worst[c] = (signed char)b->kind;
	}
	s->cnt[b->kind * s->ncol + c0]++;
	s->used = 1;
}

/* Shade 1 to 4 of column c, by how busy it was; 0: idle. */
static int
level(const struct strip *s, int c)
{
	return s->busy[c] <= 0 ? 0 : (int)ceil(fmin(s->busy[c], 1) * 4);
}

/* A run of columns [c, e) at y, h high: a rect and its title, which
 * counts the attempts that started there (of every kind, or with marks
 * only those that did not succeed). */
static void
strip_run(FILE *f, const struct strip *s, const struct geo *g, int c,
    int e, int y, int h, const char *fill, int lv, int marks)
{
	unsigned long	 n;
	char		 a[32], b[32];
	int		 j, k, any = 0;

	fmt_t(a, sizeof(a), c * s->cw / g->px, s->cw / g->px);
	fmt_t(b, sizeof(b), e * s->cw / g->px, s->cw / g->px);
	fprintf(f, "<rect class=\"strip\" x=\"%d\" y=\"%d\" width=\"%d\" "
	    "height=\"%d\" fill=\"%s\"", PLOT_X + c * s->cw, y,
	    (e - c) * s->cw, h, fill);
	if (lv < 4)
		fprintf(f, " fill-opacity=\"%.2f\"", 0.25 * lv);
	fprintf(f, "><title>+%s to +%s:", a, b);
	for (k = marks ? TL_RETRIED : TL_OK; k < TL_NKIND; k++) {
		for (n = 0, j = c; j < e; j++)
			n += s->cnt[k * s->ncol + j];
		if (n > 0)
			fprintf(f, "%s %lu %s", any++ ? "," : "", n,
			    kind_name[k]);
	}
	fprintf(f, "%s</title></rect>\n", any ? "" : " attempts started "
	    "before");
}

/* The lane's strip at y, h high: runs of columns alike in how busy they
 * were, in the colour of "ok", and below, runs alike in their worst
 * outcome other than ok; then empty for the next lane. With f NULL,
 * only counts the runs. Returns how many. */
static size_t
strip_put(FILE *f, struct strip *s, const struct geo *g, int y, int h)
{
	size_t	 n = 0;
	int	 c, e, mh = h > 6 ? h * 2 / 5 : h / 2;

	for (c = 0; c < s->ncol; c = e) {
		for (e = c + 1; e < s->ncol && level(s, e) == level(s, c); e++)
			;
		if (level(s, c) > 0 && ++n && f != NULL)
			strip_run(f, s, g, c, e, y + 1, h - 2 - mh,
			    kind_fill[TL_OK], level(s, c), 0);
	}
	for (c = 0; c < s->ncol; c = e) {
		for (e = c + 1; e < s->ncol && s->worst[e] == s->worst[c]; e++)
			;
		if (s->worst[c] >= 0 && ++n && f != NULL)
			strip_run(f, s, g, c, e, y + h - 1 - mh, mh,
			    kind_fill[s->worst[c]], 4, 1);
	}
	memset(s->busy, 0, (size_t)s->ncol * sizeof(*s->busy));
	memset(s->worst, -1, (size_t)s->ncol);
	memset(s->cnt, 0, TL_NKIND * (size_t)s->ncol * sizeof(*s->cnt));
	s->used = 0;
	return n;
}

/* The strips, lane by lane (idx: by row and lane), or with f NULL, how
 * many runs they would take. */
static size_t
put_strips(FILE *f, const struct timeline *tl, const struct geo *g,
    const size_t *idx, struct strip *s)
{
	const struct tl_bar	*b;
	size_t			 i, n = 0;

	for (i = 0; i < tl->nbar; i++) {
		b = &tl->bar[idx[i]];
		if (b->runtime * g->px < g->thr)
			strip_add(s, g, b);
		if (s->used && (i + 1 == tl->nbar ||
		    tl->bar[idx[i + 1]].row != b->row ||
		    tl->bar[idx[i + 1]].lane != b->lane))
			n += strip_put(f, s, g, g->row_y[b->row] +
			    b->lane * g->lane_h, g->lane_h);
	}
	return n;
}

/* The strips in columns wide enough for at most STRIPS_MAX runs, then
 * the bars. */
static void
put_attempts(FILE *f, const struct timeline *tl, struct geo *g,
    const size_t *idx, struct strip *s)
{
	size_t	 i;

	while (s->cw < 64 && put_strips(NULL, tl, g, idx, s) > STRIPS_MAX) {
		s->cw *= 2;
		s->ncol = (PLOT_W + s->cw - 1) / s->cw;
	}
	fputs("<g class=\"strips\">\n", f);
	(void)put_strips(f, tl, g, idx, s);
	/* A thin white edge tells attempts end to end apart. */
	fputs("</g>\n<g class=\"bars\" stroke=\"#fff\" "
	    "stroke-width=\"0.5\">\n", f);
	for (i = 0; i < tl->nbar; i++)
		if (tl->bar[idx[i]].runtime * g->px >= g->thr)
			put_bar(f, tl, g, &tl->bar[idx[i]]);
	fputs("</g>\n", f);
}

int
timeline_svg_draw(FILE *f, struct timeline *tl)
{
	struct geo	 g;
	struct strip	 s = { .cw = 1, .ncol = PLOT_W };
	size_t		*idx, i;
	int		 rc = -ENOMEM;

	memset(&g, 0, sizeof(g));
	idx = malloc((tl->nbar + 1) * sizeof(*idx));
	g.row_y = calloc((size_t)tl->nrow + 1, sizeof(int));
	g.order = calloc((size_t)tl->nrow + 1, sizeof(int));
	s.busy = calloc(PLOT_W, sizeof(*s.busy));
	s.worst = malloc(PLOT_W);
	s.cnt = calloc(TL_NKIND * PLOT_W, sizeof(*s.cnt));
	if (idx == NULL || g.row_y == NULL || g.order == NULL ||
	    s.busy == NULL || s.worst == NULL || s.cnt == NULL)
		goto out;
	memset(s.worst, -1, PLOT_W);
	for (i = 0; i < tl->nbar; i++)
		idx[i] = i;
	classify(tl, &g, idx);
	lanes(tl, idx);
	if (layout(tl, &g) < 0)
		goto out;
	for (i = 0; i < tl->nbar; i++)
		g.merged |= tl->bar[i].runtime * g.px < g.thr;
	put_head(f, tl, &g);
	put_rows(f, tl, &g);
	put_axis(f, &g);
	put_attempts(f, tl, &g, idx, &s);
	fputs("</svg>\n", f);
	rc = ferror(f) ? -EIO : 0;
out:
	free(idx);
	free(g.row_y);
	free(g.order);
	free(s.busy);
	free(s.worst);
	free(s.cnt);
	return rc;
}
