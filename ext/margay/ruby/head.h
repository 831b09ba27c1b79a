/*
 * ruby/head.h - a Rack status and headers into an HTTP/1.1 response head: validation (Rack 3
 * SPEC: names, values, content-length), framing (content-length or chunked), the keep-alive
 * decision, connection and date fields. Used by the whole responses (ruby/respond.c) and the
 * streamed ones (ruby/stream.c).
 */
#ifndef MARGAY_RUBY_HEAD_H
#define MARGAY_RUBY_HEAD_H

#include <ruby.h>
#include "core/conn.h"
#include "core/engine.h"

/* A head being built, in the calling thread's buffer (written at once by mg_head_queue), or when
 * that is lent or too small in one from mg_buf_alloc that goes to the connection's output queue
 * as it is (no second copy); a caller may append body bytes to it. */
typedef struct {
  char *buf;              /* the thread's buffer, or from mg_buf_alloc */
  size_t len, cap;
  int local;              /* buf is the thread's buffer */
  int has_date, app_close, has_te, resp_chunked;
  int64_t content_length; /* -1 when the app set none */
  int strip_length;       /* 1xx / 204: never send content-length */
  int has_upgrade;        /* the app wrote an upgrade field */
  VALUE hijack;           /* rack.hijack response header (partial hijack) */
  VALUE protocol;         /* rack.protocol response header (the upgrade's protocol) */
} mg_head;

/* The status as an int 100..999; raises Margay::InvalidResponse otherwise. */
int mg_rb_status_of(VALUE status);
/* Whether a response with +status+ has no body (1xx, 204, 304). */
static inline int mg_bodyless(int status) { return status < 200 || status == 204 || status == 304; }

/* Start +h+: the status line and the app's fields from +headers+, with +reserve+ bytes of room
 * for what the caller appends. Raises Margay::InvalidResponse, or what app code inside it raised
 * (a header name's inspect, a connection value's to_s), having freed the buffer. */
void mg_rb_head_begin(mg_head *h, int status, VALUE headers, size_t reserve);
/* Framing, connection and date fields, then the empty line; decides c->keep_alive.
 * body_len < 0: unknown (streamed). */
void mg_rb_head_finish(mg_engine *e, mg_head *h, mg_conn *c, int status, int64_t body_len);
/* Hand the built head (and what was appended) to the connection's output queue. */
void mg_head_queue(mg_conn *c, mg_head *h);
/* Append bytes; make room for +need+ more; free the buffer (after an error). */
void mg_rb_head_put(mg_head *h, const char *s, size_t n);
void mg_rb_head_grow(mg_head *h, size_t need);
void mg_head_release(mg_head *h);

#endif
