/*
 * core/output.h - an output queue drained into a socket: segments of memory (copied, or borrowed
 * from a caller's pinned string), files sent with sendfile, and the spill tempfile of streamed
 * bodies; through a TLS session (core/tls.h) when the connection has one. It knows nothing of connections or Ruby: the engine embeds one per connection.
 */
#ifndef MARGAY_CORE_OUTPUT_H
#define MARGAY_CORE_OUTPUT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "core/tls.h"

/* An opaque handle on whatever owns the bytes of a pinned segment (a frozen Ruby String: the
 * Ruby side stores it here and marks it; core only keeps and drops it). */
typedef uintptr_t mg_ref;

/* The owners of the memory that queued segments borrow. Entries are added by the owner's side
 * (with the GVL), removed by whichever thread finishes the write, under the lock. */
typedef struct mg_pins {
  pthread_mutex_t lock;
  struct mg_pin { mg_ref ref; struct mg_seg *seg; } *entries;
  size_t len, cap;
} mg_pins;

/* One queued piece of output: bytes, or a file range sent with sendfile. */
typedef struct mg_seg {
  struct mg_seg *next;
  char *data;
  size_t len, off;
  size_t cap;          /* allocation size, for mg_buf_free */
  mg_pins *pins;       /* non-NULL: data is borrowed from a pinned owner */
  size_t pin_index;
  int file_fd;         /* -1 for memory */
  int spill;           /* the file is the queue's spill file (the tail may grow) */
  off_t file_off;
  uint64_t file_left;
} mg_seg;

typedef struct {
  mg_seg *head, *tail;
  size_t bytes;        /* memory bytes queued */
  uint64_t sent;       /* bytes the socket has taken so far (progress, for write timeouts) */
  int broken;          /* a part could not be queued (no memory): flushing fails */
  int spill_fd;        /* streamed output beyond the memory limit goes to this tempfile, or -1 */
  off_t spill_end;     /* bytes written to it */
} mg_out;

/* Output buffers; large ones are mapped, so freeing them returns the memory at once. */
char *mg_buf_alloc(size_t size);
void mg_buf_free(char *p, size_t size);

/* Queue a copy of data[0..len). */
void mg_out_queue(mg_out *o, const char *data, size_t len);
/* Queue +data+ from mg_buf_alloc (of +cap+ bytes) itself; the queue frees it. */
void mg_out_queue_owned(mg_out *o, char *data, size_t len, size_t cap);
/* Write data[0..len) to socket +fd+ at once when nothing is queued and it is not a TLS session
 * (one non-blocking send), and queue a copy of what the socket did not take. */
void mg_out_send(mg_out *o, int fd, mg_tls *tls, const char *data, size_t len);
/* Queue +len+ bytes of file +fd+ from +off+; the queue closes fd. 0, or -1 (no memory). */
int mg_out_queue_file(mg_out *o, int fd, off_t off, uint64_t len);
/* Queue data[0..len) without copying: +ref+ owns it and is entered into +pins+ until the bytes
 * are written or dropped. 0, or -1 (no memory; nothing queued). */
int mg_out_queue_pinned(mg_out *o, mg_pins *pins, const char *data, size_t len, mg_ref ref);
/* Streamed output spilled to disk for one response (HTTP/1.1 or an HTTP/2 stream) before its
 * thread waits for the client. */
#define MG_SPILL_LIMIT ((off_t)1 << 30)
/* Append iov[0..n) to the spill file (an unlinked tempfile in +tmpdir+, made on first use) and
 * queue it. 0, or -1 with errno. */
int mg_out_spill(mg_out *o, const char *tmpdir, const struct iovec *iov, int n);
/* Close the spill file (queued segments hold their own descriptors). */
void mg_out_end_spill(mg_out *o);

/* Write what the socket +fd+ takes without blocking: 1 all sent, 0 it would block, -1 error.
 * With +tls+ (an open session on +fd+) the bytes go through it: memory segments coalesced into
 * records of up to MG_OUT_RECORD bytes, files read with pread and written as records. */
int mg_out_flush(mg_out *o, int fd, mg_tls *tls);
#define MG_OUT_RECORD 16384
/* Drop everything queued. */
void mg_out_free(mg_out *o);

void mg_pins_init(mg_pins *p);
void mg_pins_destroy(mg_pins *p); /* every segment that borrowed is gone */
/* Call +fn+ for each owner of borrowed bytes (under the lock: +fn+ must not queue). */
void mg_pins_each(mg_pins *p, void (*fn)(mg_ref));

#endif
