/*
 * ref.c: a function of the program, named so that another process image
 * finds it: the module (executable or shared library) that holds it, by
 * its GNU build id (or, without one, the file's device and inode) and
 * path, and its offset there. An exec'd worker (exec.c) has the same
 * modules at other addresses: it finds each by what it is, never by
 * where the master had it, and a module it lacks is loaded by path only
 * when its build id or file is the master's. Both ends, no policy.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* What a module is: its build id, or the file's dev and ino. */
struct mod {
	uintptr_t	 base;
	uintptr_t	 lo, hi;	/* its mapped span */
	const char	*name;		/* "" for the executable */
	uint8_t		 id[GP_REF_IDMAX];
	uint32_t	 idlen;
	uint64_t	 dev, ino;
};

struct hunt {
	uintptr_t	 addr;		/* find the module holding this, or */
	const struct gp_ref *ref;	/* the module ref names */
	struct mod	 m;
	int		 found;
};

/* The build id in phdr's PT_NOTE segments ("GNU", NT_GNU_BUILD_ID). */
static void
build_id(const struct dl_phdr_info *info, struct mod *m)
{
	const ElfW(Phdr)	*ph;
	const uint8_t		*p, *end;
	const ElfW(Nhdr)	*n;
	size_t			 nsz, dsz;
	int			 i;

	m->idlen = 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		end = p + ph->p_memsz;
		while ((size_t)(end - p) >= sizeof(*n)) {
			n = (const ElfW(Nhdr) *)(const void *)p;
			nsz = (n->n_namesz + 3) & ~(size_t)3;
			dsz = (n->n_descsz + 3) & ~(size_t)3;
			if ((size_t)(end - p) - sizeof(*n) < nsz + dsz)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
			    memcmp(p + sizeof(*n), "GNU", 4) == 0 &&
			    n->n_descsz <= GP_REF_IDMAX) {
				memcpy(m->id, p + sizeof(*n) + nsz, n->n_descsz);
				m->idlen = n->n_descsz;
				return;
			}
			p += sizeof(*n) + nsz + dsz;
		}
	}
}

/* The file behind a module: the executable's is /proc/self/exe. */
static void
file_id(struct mod *m)
{
	struct stat	 st;

	m->dev = m->ino = 0;
	if (stat(m->name[0] != '\0' ? m->name : "/proc/self/exe", &st) == 0) {
		m->dev = (uint64_t)st.st_dev;
		m->ino = (uint64_t)st.st_ino;
	}
}

static void
span(const struct dl_phdr_info *info, struct mod *m)
{
	const ElfW(Phdr)	*ph;
	uintptr_t		 a;
	int			 i;

	m->lo = UINTPTR_MAX;
	m->hi = 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		a = info->dlpi_addr + ph->p_vaddr;
		if (a < m->lo)
			m->lo = a;
		if (a + ph->p_memsz > m->hi)
			m->hi = a + ph->p_memsz;
	}
}

static int
same(const struct mod *m, const struct gp_ref *r)
{
	/* The executable is a module of its own: only another executable
	 * can be it, and a library only a library. */
	if ((m->name[0] == '\0') != (r->path[0] == '\0'))
		return 0;
	if (r->idlen > 0 || m->idlen > 0)
		return m->idlen == r->idlen && memcmp(m->id, r->id,
		    r->idlen) == 0;
	return r->ino != 0 && m->dev == r->dev && m->ino == r->ino;
}

static int
visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct hunt	*h = arg;
	struct mod	 m = { 0 };

	(void)size;
	m.base = info->dlpi_addr;
	m.name = info->dlpi_name != NULL ? info->dlpi_name : "";
	span(info, &m);
	if (h->ref == NULL && (h->addr < m.lo || h->addr >= m.hi))
		return 0;
	build_id(info, &m);
	if (m.idlen == 0)
		file_id(&m);
	if (h->ref != NULL && !same(&m, h->ref))
		return 0;
	h->m = m;
	h->found = 1;
	return 1;
}

int
gp_ref_make(const void *fn, struct gp_ref *out)
{
	struct hunt	 h = { .addr = (uintptr_t)fn };
	size_t		 n;

	memset(out, 0, sizeof(*out));
	if (fn == NULL)
		return 0;
	dl_iterate_phdr(visit, &h);
	if (!h.found)
		return -ENOENT;
	n = strlen(h.m.name);
	if (n >= sizeof(out->path))
		return -ENAMETOOLONG;
	memcpy(out->path, h.m.name, n + 1);
	memcpy(out->id, h.m.id, h.m.idlen);
	out->idlen = h.m.idlen;
	out->dev = h.m.dev;
	out->ino = h.m.ino;
	out->off = (uint64_t)((uintptr_t)fn - h.m.base);
	out->set = 1;
	return 0;
}

void *
gp_ref_resolve(const struct gp_ref *r)
{
	struct hunt	 h = { .ref = r };

	if (!r->set)
		return NULL;
	dl_iterate_phdr(visit, &h);
	/* A library the program has not loaded: by its path, which must
	 * then be the file the master had (checked again after). */
	if (!h.found && r->path[0] != '\0' &&
	    dlopen(r->path, RTLD_NOW | RTLD_LOCAL) != NULL)
		dl_iterate_phdr(visit, &h);
	if (!h.found || h.m.base + r->off < h.m.lo ||
	    h.m.base + r->off >= h.m.hi)
		return NULL;
	return (void *)(h.m.base + (uintptr_t)r->off);
}

/* On the wire: {u64 off, dev, ino; u32 idlen, pathlen} + id + path. */
struct wire {
	uint64_t	 off, dev, ino;
	uint32_t	 idlen, pathlen;
};

int
gp_ref_put(struct gp_buf *b, const struct gp_ref *r)
{
	struct wire	 w = { r->off, r->dev, r->ino, r->idlen,
			     (uint32_t)strlen(r->path) };
	int		 rc;

	if ((rc = gp_buf_add(b, &w, sizeof(w))) < 0 ||
	    (rc = gp_buf_add(b, r->id, r->idlen)) < 0)
		return rc;
	return gp_buf_add(b, r->path, w.pathlen);
}

/* How many bytes the reference at pos takes on the wire (checked as
 * gp_ref_get() needs it); -EBADMSG when there is none. Two references
 * name the same function exactly when these bytes are the same. */
ssize_t
gp_ref_len(const uint8_t *pos, const uint8_t *end)
{
	struct wire	 w;
	size_t		 left = (size_t)(end - pos);

	if (left < sizeof(w))
		return -EBADMSG;
	memcpy(&w, pos, sizeof(w));
	left -= sizeof(w);
	if (w.idlen > GP_REF_IDMAX ||
	    w.pathlen >= sizeof(((struct gp_ref *)0)->path) ||
	    left < (size_t)w.idlen + w.pathlen)
		return -EBADMSG;
	return (ssize_t)(sizeof(w) + w.idlen + w.pathlen);
}

int
gp_ref_get(const uint8_t **pos, const uint8_t *end, struct gp_ref *r)
{
	struct wire	 w;

	memset(r, 0, sizeof(*r));
	if (gp_ref_len(*pos, end) < 0)
		return -EBADMSG;
	memcpy(&w, *pos, sizeof(w));
	*pos += sizeof(w);
	memcpy(r->id, *pos, w.idlen);
	memcpy(r->path, *pos + w.idlen, w.pathlen);
	*pos += w.idlen + w.pathlen;
	r->off = w.off;
	r->dev = w.dev;
	r->ino = w.ino;
	r->idlen = w.idlen;
	r->set = 1;
	return 0;
}

