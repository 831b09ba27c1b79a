/*
 * ruby/h2_priv.h - what the two halves of HTTP/2 streams for Ruby share, private to them:
 * ruby/h2.c (tokens, requests, heads, the response methods without bodies) and ruby/h2_body.c
 * (the bodies and their waits).
 */
#ifndef MARGAY_RUBY_H2_PRIV_H
#define MARGAY_RUBY_H2_PRIV_H

#include "ruby/h2.h"
#include "core/h2.h"
#include "ruby/head.h"

/* The app's head (validated by ruby/head.c as for HTTP/1.1) as HTTP/2 fields, plus
 * content-length when known and date on a final one (200 and up); submitted on the locked stream. Raises (the stream is
 * unlocked first) on an invalid response. */
typedef struct {
  mg_head h;
  mg_h2_nv nv[256];
  size_t n;
  char extra[160];
} h2_head;

/* The stream a token names: its connection's fd, its slot and sequence number (mg_h2_lock_stream's). */
void h2_token_parts(VALUE token, int *fd, int *slot, uint64_t *seq);
/* The stream a token names, locked, or NULL when it is stale. */
mg_h2_stream *h2_find_token(mg_engine *e, VALUE token, mg_conn **c);
/* The same, raising ClientGone when it is stale. */
mg_h2_stream *h2_lock_token(mg_engine *e, VALUE token, mg_conn **c);
/* The app's head into +hh+ (+body_len+: the body's length when known, else -1), closing +fd+
 * (if not -1) when it raises. */
void h2_head_build_protected(h2_head *hh, int status, VALUE headers, int64_t body_len, int fd);
/* Unlock +c+ (a stream's connection, locked) and raise ClientGone: the stream is gone. */
void h2_stream_gone(mg_engine *e, mg_conn *c);

#endif
