/*
 * ruby/h2_body.c - the bodies of HTTP/2 streams' responses (see ruby/h2.h, ruby/h2_priv.h):
 * Engine#respond's array (over response_buffer_limit written to a tempfile and sent as a file),
 * Engine#stream_write's parts (past it, to the stream's spill tempfile), Engine#flush, and the
 * one wait they may need: for a flush, or at the connection's response_buffer_limit when no
 * tempfile takes the rest (without the GVL, 1 ms at a time, reading the client's input when no
 * loop thread does; write_timeout without progress resets the stream). With the GVL otherwise.
 */
#include "ruby/h2_priv.h"
#include "core/tempfile.h"
#include <ruby/thread.h>
#include <time.h>
#include <unistd.h>

typedef struct { mg_engine *e; int fd, slot; uint64_t seq; int ms; } await_args;

static void *await_nogvl(void *p) {
  await_args *a = p;
  mg_h2_await(a->e, a->fd, a->slot, a->seq, a->ms);
  return NULL;
}

/* Wait up to +ms+ (without the GVL) for the client of the stream +token+ names, reading what it
 * sends when no loop thread does (mg_h2_await); then the thread's interrupts. */
static void await_client(mg_engine *e, VALUE token, int ms) {
  await_args a = {.e = e, .ms = ms};
  h2_token_parts(token, &a.fd, &a.slot, &a.seq);
  rb_thread_call_without_gvl(await_nogvl, &a, RUBY_UBF_IO, NULL);
  rb_thread_check_ints();
}

static size_t stream_backlog(mg_conn *c, mg_h2_stream *s) { (void)c; return mg_h2_backlog(s); }
static size_t conn_queued(mg_conn *c, mg_h2_stream *s) { (void)s; return mg_h2_queued(c); }

/* Wait (without the GVL, 1 ms at a time) until +what+ of the stream's token (its backlog, or its
 * connection's queued bytes) is at most +limit+; write_timeout bounds the wait without progress
 * (MG_H2_MIN_PROGRESS bytes taken, as for the connection: windows opened a byte at a time are
 * none): the stream is reset and ClientGone raised. The waiting thread reads what its client sends
 * meanwhile when no loop thread does (mg_h2_await): no thread may be free to read the window the
 * wait is for. */
static void drain_to(mg_engine *e, VALUE token, size_t limit, size_t (*what)(mg_conn *, mg_h2_stream *)) {
  int64_t deadline = mg_now_ms() + e->cfg.write_timeout_ms;
  size_t last = (size_t)-1; /* the backlog when progress was last seen */
  for (;;) {
    mg_conn *c;
    mg_h2_stream *s = h2_lock_token(e, token, &c);
    size_t backlog = what(c, s);
    if (backlog <= limit) { mg_h2_unlock(e, c); return; }
    if (last == (size_t)-1 || backlog > last) last = backlog; /* the first look, or more queued */
    if (backlog + MG_H2_MIN_PROGRESS <= last) { last = backlog; deadline = mg_now_ms() + e->cfg.write_timeout_ms; }
    if (mg_now_ms() > deadline) {
      mg_h2_reset(c, s);
      mg_h2_unlock(e, c);
      rb_raise(mg_eClientGone, "the HTTP/2 client read nothing for write_timeout");
    }
    mg_h2_unlock(e, c);
    await_client(e, token, 1);
  }
}

/* The connection's cap on body bytes queued in memory (response_buffer_limit, at least 16 KiB). */
static size_t conn_cap(const mg_engine *e) {
  return e->cfg.response_buffer_limit > 16384 ? e->cfg.response_buffer_limit : 16384;
}

/* Queue the String +data+'s bytes on the locked stream +*s+ (of +token+) as the connection's cap
 * allows: at the cap, unlock and wait for the client to take MG_H2_MIN_PROGRESS bytes (each wait
 * is one write_timeout's progress), then lock again (+*c+, +*s+ updated). Raises ClientGone (unlocked) when the stream goes or the wait times out. */
static void write_capped(mg_engine *e, VALUE token, mg_conn **c, mg_h2_stream **s, VALUE data) {
  size_t cap = conn_cap(e), off = 0;
  for (;;) {
    size_t len = (size_t)RSTRING_LEN(data); /* read again after each wait: the GVL was released */
    if (off >= len) return;
    size_t queued = mg_h2_queued(*c);
    if (queued >= cap) {
      mg_h2_unlock(e, *c);
      drain_to(e, token, cap - MG_H2_MIN_PROGRESS, conn_queued); /* room for a frame's worth, not a byte */
      *s = h2_lock_token(e, token, c);
      continue;
    }
    size_t n = len - off < cap - queued ? len - off : cap - queued;
    if (mg_h2_write(*c, *s, RSTRING_PTR(data) + off, n) != 0) h2_stream_gone(e, *c);
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
    size_t len = (size_t)RSTRING_LEN(part);
    if (mg_write_at(fd, RSTRING_PTR(part), len, at) != 0) { close(fd); return -1; } /* the disk is full: memory it is */
    at += (off_t)len;
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
  h2_head_build_protected(&hh, st, headers, mg_bodyless(st) ? -1 : blen, spill);
  if (!mg_bodyless(st) && hh.h.content_length >= 0 && hh.h.content_length != blen) {
    mg_head_release(&hh.h);
    if (spill >= 0) close(spill);
    rb_raise(mg_eInvalidResponse, "content-length %lld does not match the body's %lld bytes",
             (long long)hh.h.content_length, (long long)blen);
  }
  mg_conn *c;
  mg_h2_stream *s = h2_find_token(e, token, &c); /* nothing below runs app code */
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
    if (r != 0) h2_stream_gone(e, c);
    mg_h2_unlock(e, c);
    return Qnil;
  }
  if (r != 0) h2_stream_gone(e, c);
  for (long i = 0; body_follows && i < RARRAY_LEN(body); i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (RB_TYPE_P(part, T_STRING)) write_capped(e, token, &c, &s, part);
  }
  if (r == 0 && body_follows) r = mg_h2_finish(c, s);
  if (r != 0) h2_stream_gone(e, c);
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
  mg_h2_stream *s = h2_lock_token(e, token, &c);
  if (mg_h2_spilled(s) > 0 || mg_h2_queued(c) + n > conn_cap(e)) {
    int room = mg_h2_spilled(s) + n <= (uint64_t)MG_SPILL_LIMIT;
    if (room && mg_h2_spill(c, s, RSTRING_PTR(data), n) == 0) { mg_h2_unlock(e, c); return Qnil; }
    if (mg_h2_spill_left(s) > 0) { /* what is in memory goes out before the file: let the file go first */
      mg_h2_unlock(e, c);
      drain_to(e, token, 0, stream_backlog);
      s = h2_lock_token(e, token, &c);
    }
  }
  write_capped(e, token, &c, &s, data);
  mg_h2_unlock(e, c);
  return Qnil;
}

/* Wait on c->h2_input (c->h2_lock held) for at most 50 ms: a tunnel's bytes, its end, or its stream
 * gone. Without the GVL; the caller looks at interrupts after unlocking. */
static void *wait_input(void *p) {
  mg_conn *c = p;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 50 * 1000000L;
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(&c->h2_input, &c->h2_lock, &ts);
  return NULL;
}

/* Engine#tunnel_read for a stream: up to +maxlen+ bytes the client sent on its extended CONNECT's
 * tunnel (a String), nil once the client ended its side, or false when none came within 50 ms
 * (the caller looks at its own deadline and calls again). ClientGone when the stream is gone.
 * While a thread waits in the loop, it reads the client's bytes and signals h2_input; with none
 * (every thread in the app), the reading thread reads them itself (mg_h2_await). */
VALUE mg_rb_h2_tunnel_read(mg_engine *e, VALUE token, VALUE maxlen) {
  long max = NUM2LONG(maxlen);
  if (max <= 0 || max > 65536) max = 65536;
  VALUE str = rb_str_buf_new(max);
  mg_conn *c;
  mg_h2_stream *s = h2_lock_token(e, token, &c);
  ssize_t n = mg_h2_tunnel_read(c, s, RSTRING_PTR(str), (size_t)max);
  if (n < 0) {
    if (atomic_load(&e->idle_waiters) > 0) {
      rb_thread_call_without_gvl(wait_input, c, RUBY_UBF_IO, NULL);
      mg_h2_unlock(e, c);
      rb_thread_check_ints();
    } else {
      mg_h2_unlock(e, c);
      await_client(e, token, 50);
    }
    s = h2_lock_token(e, token, &c);
    n = mg_h2_tunnel_read(c, s, RSTRING_PTR(str), (size_t)max);
  }
  mg_h2_unlock(e, c); /* sends the WINDOW_UPDATE for what was read */
  if (n < 0) return Qfalse;
  if (n == 0) return Qnil;
  rb_str_set_len(str, n);
  return str;
}

/* Engine#flush for a stream: wait until the client took its body's bytes, in memory and spilled. */
VALUE mg_rb_h2_flush(mg_engine *e, VALUE token) {
  drain_to(e, token, 0, stream_backlog);
  return Qnil;
}
