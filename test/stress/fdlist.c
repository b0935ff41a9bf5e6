/* fdlist: print the fds this process was started with, one a line
 * (the fd used to read /proc/self/fd is left out). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

int
main(void)
{
	DIR		*d;
	struct dirent	*e;

	if ((d = opendir("/proc/self/fd")) == NULL) {
		perror("fdlist: /proc/self/fd");
		return 1;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		printf("%s\n", e->d_name);
	}
	closedir(d);
	return 0;
}
