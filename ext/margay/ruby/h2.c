/*
 * ruby/h2.c - HTTP/2 streams for Ruby: the token of a stream's request (a negative Integer, where
 * an HTTP/1 request's is positive), its [token, env], the head (validated as for HTTP/1.1 by
 * ruby/head.c, its fields sent lowercased, connection-specific ones dropped), and the Engine's
 * response methods for such a token (respond.c, stream.c and request.c hand them over) but the
 * bodies' (ruby/h2_body.c, with the one wait). Runs with the GVL and never blocks.
 */
#include "ruby/h2_priv.h"
#include "http/status.h"
#include "ruby/respond.h"
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* -(1 + (seq << 27 | slot << 20 | fd)): fd 20 bits, slot 7, seq 34 (a Fixnum). */
#define H2_FD_BITS 20
#define H2_SLOT_BITS 7
#define H2_SEQ_MASK ((1ULL << 34) - 1)

VALUE mg_rb_h2_token(const mg_h2_req *q) {
  uint64_t t = ((q->seq & H2_SEQ_MASK) << (H2_FD_BITS + H2_SLOT_BITS)) | ((uint64_t)q->slot << H2_FD_BITS) | (uint64_t)q->fd;
  return LL2NUM(-1 - (long long)t);
}

void h2_token_parts(VALUE token, int *fd, int *slot, uint64_t *seq) {
  uint64_t t = (uint64_t)(-1 - NUM2LL(token));
  *fd = (int)(t & ((1ULL << H2_FD_BITS) - 1));
  *slot = (int)((t >> H2_FD_BITS) & ((1ULL << H2_SLOT_BITS) - 1));
  *seq = t >> (H2_FD_BITS + H2_SLOT_BITS);
}

/* The stream a token names, locked, or NULL when it is stale. */
mg_h2_stream *h2_find_token(mg_engine *e, VALUE token, mg_conn **c) {
  int fd, slot;
  uint64_t seq;
  h2_token_parts(token, &fd, &slot, &seq);
  return mg_h2_lock_stream(e, fd, slot, seq, c);
}

/* The same, raising ClientGone when it is stale. */
mg_h2_stream *h2_lock_token(mg_engine *e, VALUE token, mg_conn **c) {
  mg_h2_stream *s = h2_find_token(e, token, c);
  if (!s) rb_raise(mg_eClientGone, "the HTTP/2 stream is gone (reset by the client, or its connection closed)");
  return s;
}

typedef struct { mg_rb_engine *rb; mg_h2_req *q; } build_args;

static VALUE build(VALUE p) {
  build_args *b = (build_args *)p;
  VALUE env = mg_env_build_h2(b->rb->env_template, &b->rb->servers[b->q->listener], &b->rb->core.cfg, b->q);
  return rb_assoc_new(mg_rb_h2_token(b->q), env);
}

VALUE mg_rb_h2_request(mg_rb_engine *rb, mg_h2_req *q, int *state) {
  build_args b = {rb, q};
  *state = 0;
  VALUE out = rb_protect(build, (VALUE)&b, state);
  mg_h2_req_free(q);
  return *state ? Qnil : out;
}

/* Fields that describe a connection, not a message (RFC 9113 8.2.2): never sent on HTTP/2. */
static int connection_specific(const char *n, size_t len) {
  static const char *names[] = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i]) == len && memcmp(names[i], n, len) == 0) return 1;
  return 0;
}

static void head_build(h2_head *hh, int status, VALUE headers, int64_t body_len) {
  mg_head *h = &hh->h;
  mg_rb_head_begin(h, status, headers, 0);
  if (RTEST(h->hijack)) {
    mg_head_release(h);
    rb_raise(mg_eInvalidResponse, "no hijack on HTTP/2 (rack.hijack? is false)");
  }
  hh->n = 0;
  char *p = memchr(h->buf, '\n', h->len) + 1, *end = h->buf + h->len;
  while (p < end) {
    char *colon = memchr(p, ':', (size_t)(end - p));
    char *eol = memchr(p, '\r', (size_t)(end - p));
    if (!colon || !eol) break;
    size_t nlen = (size_t)(colon - p);
    for (size_t i = 0; i < nlen; i++)
      if (p[i] >= 'A' && p[i] <= 'Z') p[i] = (char)(p[i] + 32);
    if (!connection_specific(p, nlen)) {
      if (hh->n >= sizeof hh->nv / sizeof hh->nv[0] - 2) {
        mg_head_release(h);
        rb_raise(mg_eInvalidResponse, "more than %d header fields", (int)(sizeof hh->nv / sizeof hh->nv[0] - 2));
      }
      hh->nv[hh->n++] = (mg_h2_nv){p, colon + 2, nlen, (size_t)(eol - colon - 2)};
    }
    p = eol + 2;
  }
  size_t used = 0;
  int64_t cl = h->content_length >= 0 ? h->content_length : body_len;
  if (status < 200) return; /* 103: the hints alone */
  if (!h->strip_length && cl >= 0 && !(status == 304 && h->content_length < 0)) {
    int k = snprintf(hh->extra, 24, "%lld", (long long)cl);
    hh->nv[hh->n++] = (mg_h2_nv){"content-length", hh->extra, 14, (size_t)k};
    used = (size_t)k + 1;
  }
  if (!h->has_date) {
    char line[64];
    size_t k = mg_date_header(line); /* "date: ...\r\n" */
    memcpy(hh->extra + used, line + 6, k - 8);
    hh->nv[hh->n++] = (mg_h2_nv){"date", hh->extra + used, 4, k - 8};
  }
}

typedef struct { h2_head *hh; int status; VALUE headers; int64_t body_len; } head_args;

static VALUE head_build_i(VALUE p) {
  head_args *a = (head_args *)p;
  head_build(a->hh, a->status, a->headers, a->body_len);
  return Qnil;
}

/* head_build, closing +fd+ (if not -1) when it raises. */
void h2_head_build_protected(h2_head *hh, int status, VALUE headers, int64_t body_len, int fd) {
  head_args a = {hh, status, headers, body_len};
  int state = 0;
  rb_protect(head_build_i, (VALUE)&a, &state);
  if (state) {
    if (fd >= 0) close(fd);
    rb_jump_tag(state);
  }
}

void h2_stream_gone(mg_engine *e, mg_conn *c) {
  mg_h2_unlock(e, c);
  rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
}

/* Engine#respond_file for a stream. */
VALUE mg_rb_h2_respond_file(mg_engine *e, VALUE token, VALUE status, VALUE headers, VALUE path) {
  int st = mg_rb_status_of(status);
  struct stat sb;
  int fd = mg_rb_open_file(path, &sb);
  if (fd < 0) return Qfalse;
  h2_head hh;
  h2_head_build_protected(&hh, st, headers, mg_bodyless(st) ? -1 : (int64_t)sb.st_size, fd);
  if (hh.h.content_length >= 0 && hh.h.content_length != (int64_t)sb.st_size) {
    mg_head_release(&hh.h);
    close(fd);
    return Qfalse; /* the caller iterates the body */
  }
  mg_conn *c;
  mg_h2_stream *s = h2_find_token(e, token, &c);
  if (!s) {
    mg_head_release(&hh.h);
    close(fd);
    rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
  }
  int body_follows = !mg_bodyless(st) && sb.st_size > 0 && !mg_h2_head_request(s);
  int r = mg_h2_respond_head(c, s, st, hh.nv, hh.n, body_follows);
  mg_head_release(&hh.h);
  if (r == 0 && body_follows) r = mg_h2_send_file(c, s, fd, (uint64_t)sb.st_size);
  else close(fd);
  if (r != 0) h2_stream_gone(e, c);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* Engine#stream_start for a stream: the head now, the body as it comes. Returns nil (no partial
 * hijack on HTTP/2). */
VALUE mg_rb_h2_stream_start(mg_engine *e, VALUE token, VALUE status, VALUE headers) {
  int st = mg_rb_status_of(status);
  h2_head hh;
  head_build(&hh, st, headers, -1);
  mg_conn *c;
  mg_h2_stream *s = h2_lock_token(e, token, &c);
  int r = mg_h2_respond_head(c, s, st, hh.nv, hh.n, !mg_bodyless(st));
  mg_head_release(&hh.h);
  if (r != 0) h2_stream_gone(e, c);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* +op+ on the stream +token+ names, a no-op once it is gone. Returns nil. */
static VALUE on_stream(mg_engine *e, VALUE token, void (*op)(mg_conn *, mg_h2_stream *)) {
  mg_conn *c;
  mg_h2_stream *s = h2_find_token(e, token, &c);
  if (!s) return Qnil;
  op(c, s);
  mg_h2_unlock(e, c);
  return Qnil;
}

static void finish_op(mg_conn *c, mg_h2_stream *s) { mg_h2_finish(c, s); }

/* Engine#stream_finish for a stream (a no-op once it is gone, or answered by a bodiless head). */
VALUE mg_rb_h2_stream_finish(mg_engine *e, VALUE token) { return on_stream(e, token, finish_op); }

VALUE mg_rb_h2_started(mg_engine *e, VALUE token) {
  mg_conn *c;
  mg_h2_stream *s = h2_lock_token(e, token, &c);
  int started = mg_h2_started(s);
  mg_h2_unlock(e, c);
  return started ? Qtrue : Qfalse;
}

/* Engine#error_response for a stream: the engine's error page, if no head went out yet; else the
 * stream is reset. */
VALUE mg_rb_h2_error_response(mg_engine *e, VALUE token, int status) {
  char page[512];
  size_t n = mg_status_page(page, sizeof page, status);
  char *body = strstr(page, "\r\n\r\n");
  size_t blen = body ? n - (size_t)(body + 4 - page) : 0;
  char code[8], len[24];
  snprintf(code, sizeof code, "%d", status);
  int ll = snprintf(len, sizeof len, "%zu", blen);
  mg_h2_nv nv[] = {{"content-type", "text/plain", 12, 10}, {"content-length", len, 14, (size_t)ll}};
  mg_conn *c;
  mg_h2_stream *s = h2_lock_token(e, token, &c);
  if (mg_h2_started(s)) {
    mg_h2_reset(c, s);
  } else {
    int follows = blen > 0 && !mg_h2_head_request(s);
    int r = mg_h2_respond_head(c, s, status, nv, 2, follows);
    if (r == 0 && follows) r = mg_h2_write(c, s, body + 4, blen);
    if (r == 0 && follows) mg_h2_finish(c, s);
  }
  mg_h2_unlock(e, c);
  return Qnil;
}

/* Engine#early_hints for a stream: a 103 HEADERS frame with +headers+ before the response (true),
 * or false once the response head went out. Raises ClientGone when the stream is gone. */
VALUE mg_rb_h2_early_hints(mg_engine *e, VALUE token, VALUE headers) {
  h2_head hh;
  head_build(&hh, 103, headers, -1);
  mg_conn *c;
  mg_h2_stream *s = h2_find_token(e, token, &c);
  if (!s) {
    mg_head_release(&hh.h);
    rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
  }
  int r = mg_h2_early_hints(c, s, hh.nv, hh.n);
  mg_head_release(&hh.h);
  if (r < 0) h2_stream_gone(e, c);
  mg_h2_unlock(e, c);
  return r == 0 ? Qtrue : Qfalse;
}

/* Engine#abort for a stream: reset it (a no-op once it is gone). */
VALUE mg_rb_h2_abort(mg_engine *e, VALUE token) { return on_stream(e, token, mg_h2_reset); }

void mg_rb_h2_init(VALUE mNative) {
  /* Margay::Native::H2: built with libnghttp2; NGHTTP2_VERSION: the one it runs with ("" without) */
  rb_define_const(mNative, "H2", mg_h2_available() ? Qtrue : Qfalse);
  rb_define_const(mNative, "NGHTTP2_VERSION", rb_obj_freeze(rb_str_new_cstr(mg_h2_library())));
}
