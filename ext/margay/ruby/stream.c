/*
 * ruby/stream.c - streamed Rack responses (a body of unknown length, a callable body, partial
 * hijack): the head, then each part as it comes, chunked when HTTP/1.1 needs it. Bytes are
 * queued and sent with non-blocking writes; past response_buffer_limit they go to a tempfile so
 * that a slow client never holds the thread. Only stream.flush, a response past its 1 GiB spill,
 * and one that finds no tempfile to spill to wait for the client: in thread mode without the
 * GVL, under a fiber scheduler in the fiber.
 */
#include "ruby/stream.h"
#include "ruby/h2.h"
#include "core/conn.h"
#include "ruby/request.h"
#include "ruby/head.h"
#include "ruby/respond.h"
#include <ruby/fiber/scheduler.h>
#include <ruby/io.h>
#include <ruby/thread.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* Engine#stream_start(token, status, headers) -> partial-hijack callable or nil */
static VALUE engine_stream_start(VALUE self, VALUE token, VALUE status, VALUE headers) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_stream_start(e, token, status, headers);
  mg_conn *c = mg_rb_request_conn(e, token);
  int st = mg_rb_status_of(status);
  mg_head h;
  mg_rb_head_begin(&h, st, headers, 0);
  if (h.hijack != Qnil) {
    c->keep_alive = 0; /* the app takes the socket after the head ... */
    h.has_te = 1;      /* ... and frames its bytes itself: add no content-length or chunked */
  }
  mg_rb_head_finish(e, &h, c, st, h.hijack != Qnil || mg_bodyless(st) ? -1 : h.content_length);
  c->resp_chunked = h.resp_chunked && !c->head_request;
  c->stream_left = (c->head_request || mg_bodyless(st)) ? 0 : h.content_length;
  VALUE hijack = h.hijack;
  mg_head_queue(c, &h);
  c->resp_started = 1;
  mg_rb_respond_send(c);
  return hijack;
}

typedef struct { int fd; int timeout_ms; int result; } wait_writable_args;

static void *wait_writable_nogvl(void *p) {
  wait_writable_args *a = p;
  struct pollfd pfd = {a->fd, POLLOUT, 0};
  a->result = poll(&pfd, 1, a->timeout_ms);
  return NULL;
}

/* Wait up to +timeout_ms+ for +fd+ to take more bytes: > 0 when it may, 0 when the time ran out
 * (or a signal came). Under a fiber scheduler (fiber mode, and any app's own) the fiber waits
 * through it, so the thread's other fibers run meanwhile; otherwise the thread waits without the
 * GVL. */
static int wait_writable(int fd, int timeout_ms) {
  VALUE scheduler = rb_fiber_scheduler_current();
  if (scheduler != Qnil) {
    VALUE opts = rb_hash_new();
    rb_hash_aset(opts, ID2SYM(rb_intern("autoclose")), Qfalse); /* the engine owns the fd */
    VALUE args[2] = {INT2NUM(fd), opts};
    VALUE io = rb_funcallv_kw(rb_cIO, rb_intern("for_fd"), 2, args, RB_PASS_KEYWORDS);
    VALUE ready = rb_fiber_scheduler_io_wait(scheduler, io, INT2NUM(RUBY_IO_WRITABLE), rb_float_new(timeout_ms / 1000.0));
    return RTEST(ready) && !(FIXNUM_P(ready) && FIX2INT(ready) == 0);
  }
  wait_writable_args a = {fd, timeout_ms, 0};
  rb_thread_call_without_gvl(wait_writable_nogvl, &a, RUBY_UBF_IO, NULL);
  if (a.result < 0 && errno == EINTR) rb_thread_check_ints();
  return a.result > 0;
}

/* Wait until the memory queued is under +limit+ bytes, or with +limit+ 0 until everything queued
 * is written, the spilled tempfile's bytes too (wait_writable: the fiber, or the thread without
 * the GVL). A client that takes no byte for write_timeout is gone (progress is what the socket
 * took, not a wake-up: a wait that reports ready without the socket taking anything counts for
 * nothing). */
static void drain_to(mg_engine *e, mg_conn *c, size_t limit) {
  int64_t deadline = mg_now_ms() + e->cfg.write_timeout_ms;
  uint64_t sent = c->out.sent;
  for (;;) {
    int r = mg_rb_respond_send(c);
    if (r > 0 || (limit > 0 && c->out.bytes <= limit)) return; /* r > 0: the queue is empty */
    if (c->out.sent != sent) {
      sent = c->out.sent;
      deadline = mg_now_ms() + e->cfg.write_timeout_ms;
    }
    int64_t left = deadline - mg_now_ms();
    if (left <= 0) rb_raise(mg_eClientGone, "write timeout: the client stopped reading");
    wait_writable(c->fd, (int)left);
  }
}

/* Engine#stream_write(token, string) */
static VALUE engine_stream_write(VALUE self, VALUE token, VALUE data) {
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_stream_write(mg_rb_engine_core(self), token, data);
  mg_engine *e = mg_rb_engine_core(self);
  mg_conn *c = mg_rb_request_conn(e, token);
  StringValue(data);
  size_t n = (size_t)RSTRING_LEN(data);
  if (c->head_request || n == 0) return Qnil;
  if (c->stream_left >= 0) {
    if ((int64_t)n > c->stream_left)
      rb_raise(mg_eInvalidResponse, "body is longer than its content-length (%ld more bytes)", (long)(n - (size_t)c->stream_left));
    c->stream_left -= (int64_t)n;
  }
  mg_rb_respond_send(c);
  if (c->out.spill_fd >= 0 || c->out.bytes + n > e->cfg.response_buffer_limit) {
    /* The client is slower than the app: spill to a tempfile rather than hold this thread, up
     * to MG_SPILL_LIMIT per response. Past it, wait until the client took everything; without
     * a tempfile, until the memory queued is half the limit. Then queue in memory. */
    int room = c->out.spill_end + (off_t)n <= MG_SPILL_LIMIT;
    if (room) {
      char head[24];
      struct iovec iov[3] = {{head, 0}, {RSTRING_PTR(data), n}, {(char *)"\r\n", 0}};
      if (c->resp_chunked) {
        iov[0].iov_len = (size_t)snprintf(head, sizeof head, "%zx\r\n", n);
        iov[2].iov_len = 2;
      }
      if (mg_out_spill(&c->out, e->cfg.tmpdir, iov, 3) == 0) return Qnil;
    }
    drain_to(e, c, room ? e->cfg.response_buffer_limit / 2 : 0);
  }
  if (c->resp_chunked) {
    char *buf = mg_buf_alloc(n + 24);
    if (!buf) rb_raise(rb_eNoMemError, "response chunk");
    int h = snprintf(buf, 20, "%zx\r\n", n);
    memcpy(buf + h, RSTRING_PTR(data), n);
    memcpy(buf + h + n, "\r\n", 2);
    mg_out_queue_owned(&c->out, buf, (size_t)h + n + 2, n + 24);
  } else {
    mg_out_queue(&c->out, RSTRING_PTR(data), n);
  }
  mg_rb_respond_send(c);
  return Qnil;
}

/* Engine#stream_finish(token) -> token to continue with, or nil */
static VALUE engine_stream_finish(VALUE self, VALUE token) {
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_stream_finish(mg_rb_engine_core(self), token);
  mg_engine *e = mg_rb_engine_core(self);
  mg_conn *c = mg_rb_request_conn(e, token);
  if (c->resp_chunked) mg_out_queue(&c->out, "0\r\n\r\n", 5);
  c->resp_chunked = 0;
  return mg_respond_complete(e, c);
}

/* Engine#flush(token): block until everything queued is written (streaming bodies' flush). */
static VALUE engine_flush(VALUE self, VALUE token) {
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_flush(mg_rb_engine_core(self), token);
  mg_engine *e = mg_rb_engine_core(self);
  drain_to(e, mg_rb_request_conn(e, token), 0);
  return Qnil;
}

/* Engine#tunnel_read(token, maxlen): an HTTP/2 extended CONNECT's input (ruby/h2_body.c); nil for
 * an HTTP/1 request (its upgrades are read from the hijacked socket). */
static VALUE engine_tunnel_read(VALUE self, VALUE token, VALUE maxlen) {
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_tunnel_read(mg_rb_engine_core(self), token, maxlen);
  return Qnil;
}

void mg_stream_init(VALUE cEngine) {
  rb_define_method(cEngine, "stream_start", engine_stream_start, 3);
  rb_define_method(cEngine, "stream_write", engine_stream_write, 2);
  rb_define_method(cEngine, "stream_finish", engine_stream_finish, 1);
  rb_define_method(cEngine, "flush", engine_flush, 1);
  rb_define_method(cEngine, "tunnel_read", engine_tunnel_read, 2);
}
