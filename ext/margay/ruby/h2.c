/*
 * ruby/h2.c - HTTP/2 streams for Ruby: the token of a stream's request (a negative Integer, where
 * an HTTP/1 request's is positive), its [token, env], and the Engine's response methods for such
 * a token (respond.c, stream.c and request.c hand them over). The head is validated as for
 * HTTP/1.1 (ruby/head.c) and its fields sent lowercased, connection-specific ones dropped.
 * Runs with the GVL; never blocks but in flush and while the connection's queued body bytes are at
 * response_buffer_limit (a client that takes nothing: write_timeout ends the wait).
 */
#include "ruby/h2.h"
#include "core/h2.h"
#include "core/tempfile.h"
#include "http/status.h"
#include "ruby/head.h"
#include "ruby/respond.h"
#include <ruby/thread.h>
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

/* The stream a token names, locked, or NULL when it is stale. */
static mg_h2_stream *find_token(mg_engine *e, VALUE token, mg_conn **c) {
  uint64_t t = (uint64_t)(-1 - NUM2LL(token));
  int fd = (int)(t & ((1ULL << H2_FD_BITS) - 1));
  int slot = (int)((t >> H2_FD_BITS) & ((1ULL << H2_SLOT_BITS) - 1));
  return mg_h2_lock_stream(e, fd, slot, t >> (H2_FD_BITS + H2_SLOT_BITS), c);
}

/* The same, raising ClientGone when it is stale. */
static mg_h2_stream *lock_token(mg_engine *e, VALUE token, mg_conn **c) {
  mg_h2_stream *s = find_token(e, token, c);
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

/* The app's head (validated by ruby/head.c as for HTTP/1.1) as HTTP/2 fields, plus
 * content-length when known and date on a final one (200 and up); submitted on the locked stream. Raises (the stream is
 * unlocked first) on an invalid response. */
typedef struct {
  mg_head h;
  mg_h2_nv nv[256];
  size_t n;
  char extra[160];
} h2_head;

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
static void head_build_protected(h2_head *hh, int status, VALUE headers, int64_t body_len, int fd) {
  head_args a = {hh, status, headers, body_len};
  int state = 0;
  rb_protect(head_build_i, (VALUE)&a, &state);
  if (state) {
    if (fd >= 0) close(fd);
    rb_jump_tag(state);
  }
}

static void stream_gone(mg_engine *e, mg_conn *c) {
  mg_h2_unlock(e, c);
  rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
}

static void *nap(void *p) {
  (void)p;
  usleep(1000);
  return NULL;
}

static size_t stream_backlog(mg_conn *c, mg_h2_stream *s) { (void)c; return mg_h2_backlog(s); }
static size_t conn_queued(mg_conn *c, mg_h2_stream *s) { (void)s; return mg_h2_queued(c); }

/* Wait (without the GVL, 1 ms at a time) until +what+ of the stream's token (its backlog, or its
 * connection's queued bytes) is at most +limit+; write_timeout bounds the wait without progress:
 * the stream is reset and ClientGone raised. */
static void drain_to(mg_engine *e, VALUE token, size_t limit, size_t (*what)(mg_conn *, mg_h2_stream *)) {
  int64_t deadline = mg_now_ms() + e->cfg.write_timeout_ms;
  size_t last = (size_t)-1;
  for (;;) {
    mg_conn *c;
    mg_h2_stream *s = lock_token(e, token, &c);
    size_t backlog = what(c, s);
    if (backlog <= limit) { mg_h2_unlock(e, c); return; }
    if (backlog < last) { last = backlog; deadline = mg_now_ms() + e->cfg.write_timeout_ms; }
    if (mg_now_ms() > deadline) {
      mg_h2_reset(c, s);
      mg_h2_unlock(e, c);
      rb_raise(mg_eClientGone, "the HTTP/2 client read nothing for write_timeout");
    }
    mg_h2_unlock(e, c);
    rb_thread_call_without_gvl(nap, NULL, RUBY_UBF_IO, NULL);
    rb_thread_check_ints();
  }
}

/* The connection's cap on body bytes queued in memory (response_buffer_limit, at least 16 KiB). */
static size_t conn_cap(const mg_engine *e) {
  return e->cfg.response_buffer_limit > 16384 ? e->cfg.response_buffer_limit : 16384;
}

/* Queue the String +data+'s bytes on the locked stream +*s+ (of +token+) as the connection's cap
 * allows: at the cap, unlock and wait for the client to take some, then lock again (+*c+, +*s+
 * updated). Raises ClientGone (unlocked) when the stream goes or the wait times out. */
static void write_capped(mg_engine *e, VALUE token, mg_conn **c, mg_h2_stream **s, VALUE data) {
  size_t cap = conn_cap(e), off = 0;
  for (;;) {
    size_t len = (size_t)RSTRING_LEN(data); /* read again after each wait: the GVL was released */
    if (off >= len) return;
    size_t queued = mg_h2_queued(*c);
    if (queued >= cap) {
      mg_h2_unlock(e, *c);
      drain_to(e, token, cap - 1, conn_queued);
      *s = lock_token(e, token, c);
      continue;
    }
    size_t n = len - off < cap - queued ? len - off : cap - queued;
    if (mg_h2_write(*c, *s, RSTRING_PTR(data) + off, n) != 0) stream_gone(e, *c);
    off += n;
  }
}

/* The body array's +blen+ bytes in an unlinked tempfile, or -1 (the caller keeps them in memory). */
static int spill_body(mg_engine *e, VALUE body, int64_t blen) {
  int fd = mg_open_tempfile(e->cfg.tmpdir);
  if (fd < 0) return -1;
  off_t at = 0;
  for (long i = 0; i < RARRAY_LEN(body); i++) {
    VALUE part = RARRAY_AREF(body, i);
    const char *p = RSTRING_PTR(part);
    size_t left = (size_t)RSTRING_LEN(part);
    while (left > 0) {
      ssize_t n = pwrite(fd, p, left, at);
      if (n <= 0) { close(fd); return -1; } /* the disk is full: memory it is */
      p += n;
      left -= (size_t)n;
      at += n;
    }
  }
  if (at != blen) { close(fd); return -1; }
  return fd;
}

/* Engine#respond for a stream: the head, then the body array's bytes (waiting at the connection's
 * cap: write_capped). A body over the cap goes to a tempfile first, sent as a file: the thread
 * never waits for a slow reader (as HTTP/1.1 spills). Returns nil. */
VALUE mg_rb_h2_respond(mg_engine *e, VALUE token, VALUE status, VALUE headers, VALUE body) {
  int st = mg_rb_status_of(status);
  Check_Type(body, T_ARRAY);
  int64_t blen = 0;
  for (long i = 0; i < RARRAY_LEN(body); i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (!RB_TYPE_P(part, T_STRING)) rb_raise(mg_eInvalidResponse, "body parts must be Strings, got %" PRIsVALUE, rb_obj_class(part));
    blen += RSTRING_LEN(part);
  }
  /* written before the head is built: what header values' to_s may do to the body comes after */
  int spill = !mg_bodyless(st) && (size_t)blen > conn_cap(e) ? spill_body(e, body, blen) : -1;
  h2_head hh;
  head_build_protected(&hh, st, headers, mg_bodyless(st) ? -1 : blen, spill);
  if (!mg_bodyless(st) && hh.h.content_length >= 0 && hh.h.content_length != blen) {
    mg_head_release(&hh.h);
    if (spill >= 0) close(spill);
    rb_raise(mg_eInvalidResponse, "content-length %lld does not match the body's %lld bytes",
             (long long)hh.h.content_length, (long long)blen);
  }
  mg_conn *c;
  mg_h2_stream *s = find_token(e, token, &c); /* nothing below runs app code */
  if (!s) {
    mg_head_release(&hh.h);
    if (spill >= 0) close(spill);
    rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
  }
  int body_follows = !mg_bodyless(st) && blen > 0 && !mg_h2_head_request(s);
  int r = mg_h2_respond_head(c, s, st, hh.nv, hh.n, body_follows);
  mg_head_release(&hh.h);
  if (spill >= 0) {
    if (r == 0 && body_follows) r = mg_h2_send_file(c, s, spill, (uint64_t)blen); /* the stream owns it */
    else close(spill);
    if (r != 0) stream_gone(e, c);
    mg_h2_unlock(e, c);
    return Qnil;
  }
  if (r != 0) stream_gone(e, c);
  for (long i = 0; body_follows && i < RARRAY_LEN(body); i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (RB_TYPE_P(part, T_STRING)) write_capped(e, token, &c, &s, part);
  }
  if (r == 0 && body_follows) r = mg_h2_finish(c, s);
  if (r != 0) stream_gone(e, c);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* Engine#respond_file for a stream. */
VALUE mg_rb_h2_respond_file(mg_engine *e, VALUE token, VALUE status, VALUE headers, VALUE path) {
  int st = mg_rb_status_of(status);
  struct stat sb;
  int fd = mg_rb_open_file(path, &sb);
  if (fd < 0) return Qfalse;
  h2_head hh;
  head_build_protected(&hh, st, headers, mg_bodyless(st) ? -1 : (int64_t)sb.st_size, fd);
  if (hh.h.content_length >= 0 && hh.h.content_length != (int64_t)sb.st_size) {
    mg_head_release(&hh.h);
    close(fd);
    return Qfalse; /* the caller iterates the body */
  }
  mg_conn *c;
  mg_h2_stream *s = find_token(e, token, &c);
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
  if (r != 0) stream_gone(e, c);
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
  mg_h2_stream *s = lock_token(e, token, &c);
  int r = mg_h2_respond_head(c, s, st, hh.nv, hh.n, !mg_bodyless(st));
  mg_head_release(&hh.h);
  if (r != 0) stream_gone(e, c);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* Engine#stream_write for a stream: queued for the stream (flow control is nghttp2's). Past the
 * connection's cap the bytes go to the stream's spill file rather than hold the thread for a slow
 * reader, as HTTP/1.1 spills (ruby/stream.c), up to MG_SPILL_LIMIT per response; past that, or
 * without a tempfile, the call waits until the spill file is sent, then queues in memory, waiting
 * at the cap (write_capped). */
VALUE mg_rb_h2_stream_write(mg_engine *e, VALUE token, VALUE data) {
  StringValue(data);
  size_t n = (size_t)RSTRING_LEN(data);
  mg_conn *c;
  mg_h2_stream *s = lock_token(e, token, &c);
  if (mg_h2_spilled(s) > 0 || mg_h2_queued(c) + n > conn_cap(e)) {
    int room = mg_h2_spilled(s) + n <= (uint64_t)MG_SPILL_LIMIT;
    if (room && mg_h2_spill(c, s, RSTRING_PTR(data), n) == 0) { mg_h2_unlock(e, c); return Qnil; }
    if (mg_h2_spill_left(s) > 0) { /* what is in memory goes out before the file: let the file go first */
      mg_h2_unlock(e, c);
      drain_to(e, token, 0, stream_backlog);
      s = lock_token(e, token, &c);
    }
  }
  write_capped(e, token, &c, &s, data);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* +op+ on the stream +token+ names, a no-op once it is gone. Returns nil. */
static VALUE on_stream(mg_engine *e, VALUE token, void (*op)(mg_conn *, mg_h2_stream *)) {
  mg_conn *c;
  mg_h2_stream *s = find_token(e, token, &c);
  if (!s) return Qnil;
  op(c, s);
  mg_h2_unlock(e, c);
  return Qnil;
}

static void finish_op(mg_conn *c, mg_h2_stream *s) { mg_h2_finish(c, s); }

/* Engine#stream_finish for a stream (a no-op once it is gone, or answered by a bodiless head). */
VALUE mg_rb_h2_stream_finish(mg_engine *e, VALUE token) { return on_stream(e, token, finish_op); }

VALUE mg_rb_h2_flush(mg_engine *e, VALUE token) {
  drain_to(e, token, 0, stream_backlog);
  return Qnil;
}

VALUE mg_rb_h2_started(mg_engine *e, VALUE token) {
  mg_conn *c;
  mg_h2_stream *s = lock_token(e, token, &c);
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
  mg_h2_stream *s = lock_token(e, token, &c);
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
  mg_h2_stream *s = find_token(e, token, &c);
  if (!s) {
    mg_head_release(&hh.h);
    rb_raise(mg_eClientGone, "the HTTP/2 stream is gone");
  }
  int r = mg_h2_early_hints(c, s, hh.nv, hh.n);
  mg_head_release(&hh.h);
  if (r < 0) stream_gone(e, c);
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
