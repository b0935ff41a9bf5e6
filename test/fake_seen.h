/*
 * fake_seen.h: how many snapshots have read a state of the fake NVML
 * (fake_nvml.c) marked "mark WORD": each reading of its state file
 * appends the state's mark and a newline to $GP_FAKE_NVML_SEEN. A
 * snapshot is asked for only once the master has the one before, so a
 * mark's second line means the master has a snapshot of that state, and
 * its third one asked for after anything the test did before writing it
 * (check_mon.c, check_watch.c, check_gpus.c).
 */
#ifndef GP_FAKE_SEEN_H
#define GP_FAKE_SEEN_H

#include <stdio.h>
#include <string.h>

/* The lines of log that are mark; 0 when log cannot be read. */
static inline int
fake_seen(const char *log, const char *mark)
{
	char	 line[128];
	size_t	 n = strlen(mark);
	FILE	*f = fopen(log, "re");
	int	 k = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		k += strncmp(line, mark, n) == 0 && line[n] == '\n';
	fclose(f);
	return k;
}

#endif /* GP_FAKE_SEEN_H */
