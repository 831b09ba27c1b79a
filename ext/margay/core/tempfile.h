/*
 * core/tempfile.h - unlinked tempfiles: request bodies beyond body_buffer_size (core/input.c)
 * and streamed output beyond response_buffer_limit (the spill of core/output.c).
 */
#ifndef MARGAY_CORE_TEMPFILE_H
#define MARGAY_CORE_TEMPFILE_H

/* An unlinked, close-on-exec file open for reading and writing in directory +dir+, or -1. */
int mg_open_tempfile(const char *dir);

#endif
