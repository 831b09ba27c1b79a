/*
 * core/tempfile.h - unlinked tempfiles: request bodies beyond body_buffer_size (core/input.c)
 * and streamed output beyond response_buffer_limit (the spill of core/output.c).
 */
#ifndef MARGAY_CORE_TEMPFILE_H
#define MARGAY_CORE_TEMPFILE_H

/* An unlinked, close-on-exec file open for reading and writing in directory +dir+, or -1. */
int mg_open_tempfile(const char *dir);

#include <stddef.h>
#include <sys/types.h>
/* Write all +len+ bytes of +p+ to +fd+ at offset +at+ (pwrite, again after a short write or
 * EINTR). 0, or -1 (an error, or no progress: a full disk). */
int mg_write_at(int fd, const char *p, size_t len, off_t at);
/* A request body being received (HTTP/1 and HTTP/2 alike): appended to memory (*mem, *len, *cap)
 * while it stays within +limit+ bytes, then moved to an unlinked tempfile in +dir+ (*fd, -1
 * until then) and appended there. 0, or -1 (no memory, the file failed). */
int mg_spool(const char *dir, size_t limit, char **mem, size_t *len, size_t *cap, int *fd, const char *data, size_t n);
/* Make room for +need+ bytes in *buf (realloc, doubling from +first+). 0, or -1. */
int mg_grow(char **buf, size_t *cap, size_t need, size_t first);

#endif
