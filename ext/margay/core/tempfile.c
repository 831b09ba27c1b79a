/*
 * core/tempfile.c - unlinked tempfiles (O_TMPFILE where the kernel has it, else mkstemp and
 * unlink): nothing is left behind in the directory, whatever happens to the process.
 */
#include "core/tempfile.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
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

int mg_write_at(int fd, const char *p, size_t len, off_t at) {
  for (size_t done = 0; done < len;) {
    ssize_t n = pwrite(fd, p + done, len - done, at + (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

int mg_grow(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : first;
  while (c < need) c *= 2;
  char *m = realloc(*buf, c);
  if (!m) return -1;
  *buf = m;
  *cap = c;
  return 0;
}

int mg_spool(const char *dir, size_t limit, char **mem, size_t *len, size_t *cap, int *fd, const char *data, size_t n) {
  if (!n) return 0;
  if (*fd < 0 && *len + n > limit) {
    int f = mg_open_tempfile(dir);
    if (f < 0) return -1;
    *fd = f;
    if (*len && write(f, *mem, *len) != (ssize_t)*len) return -1;
    *len = 0;
  }
  if (*fd >= 0) {
    while (n) {
      ssize_t w = write(*fd, data, n);
      if (w < 0) { if (errno == EINTR) continue; return -1; }
      data += w;
      n -= (size_t)w;
    }
    return 0;
  }
  if (mg_grow(mem, cap, *len + n, 4096) != 0) return -1;
  memcpy(*mem + *len, data, n);
  *len += n;
  return 0;
}
