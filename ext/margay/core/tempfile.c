/*
 * core/tempfile.c - unlinked tempfiles (O_TMPFILE where the kernel has it, else mkstemp and
 * unlink): nothing is left behind in the directory, whatever happens to the process.
 */
#include "core/tempfile.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int mg_open_tempfile(const char *dir) {
  int fd = -1;
#ifdef O_TMPFILE
  fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
  if (fd < 0) {
    char path[4200];
    snprintf(path, sizeof path, "%s/margay-XXXXXX", dir);
    fd = mkstemp(path);
    if (fd < 0) return -1;
    unlink(path);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return fd;
}
