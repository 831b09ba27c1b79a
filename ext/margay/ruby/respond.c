/*
 * ruby/respond.c - whole Rack responses into bytes on the wire: a body array, a file
 * (sendfile), an early hints head. Runs with the GVL (it reads Ruby objects) but never blocks:
 * bytes are queued on the connection and sent with non-blocking writes; what the socket does not
 * take at once is finished by the event loop while the Ruby thread moves on. Invalid responses
 * raise Margay::InvalidResponse before a byte is queued. Streamed responses: ruby/stream.c.
 */
#include "ruby/respond.h"
#include "core/conn.h"
#include "ruby/request.h"
#include "ruby/h2.h"
#include "ruby/head.h"
#include "ruby/waits.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Body parts at least this large are sent from the Ruby string, not copied. */
#define MG_SHARE_STRING (64 * 1024)

/* Queue frozen string +str+ without copying it: the engine's pins hold it
 * (its mark function marks them, which also keeps the string from moving)
 * until the bytes are written. 0, or -1 (no memory). */
static int queue_string(mg_engine *e, mg_conn *c, VALUE str) {
  return mg_out_queue_pinned(&c->out, &e->pins, RSTRING_PTR(str), (size_t)RSTRING_LEN(str), (mg_ref)str);
}

int mg_rb_respond_send(mg_conn *c) {
  int r = mg_out_flush(&c->out, c->fd, &c->tls);
  if (r < 0) rb_raise(mg_eClientGone, "client went away");
  return r;
}

/* After the whole response is queued: send, and either go on with a pipelined
 * request (returns the token) or hand the connection to the event loop. */
VALUE mg_respond_complete(mg_engine *e, mg_conn *c) {
  if (c->stream_left > 0) c->keep_alive = 0; /* fewer bytes than announced: only closing frames it */
  mg_timing_done(e, c);
  return mg_conn_complete(e, c) ? mg_request_token(c) : Qnil;
}

/* Header values are converted with to_s and inspected, which runs app code
 * that could shrink the body array or change its strings: look again before
 * sending (nothing runs app code after this check). */
static int body_unchanged(VALUE body, long nparts, int64_t blen) {
  if (RARRAY_LEN(body) != nparts) return 0;
  int64_t total = 0;
  for (long i = 0; i < nparts; i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (!RB_TYPE_P(part, T_STRING)) return 0;
    total += RSTRING_LEN(part);
  }
  return blen < 0 || total == blen;
}

/* Engine#respond(token, status, headers, body_array) -> token to continue with, or nil; false
 * (nothing sent) when +headers+ has a rack.hijack field: the caller hijacks (the body is
 * ignored then, as the SPEC says, so its parts are checked after the fields). The request
 * handler asks no Hash lookup of its own for that field per response. */
static VALUE engine_respond(VALUE self, VALUE token, VALUE status, VALUE headers, VALUE body) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_respond(e, token, status, headers, body);
  mg_conn *c = mg_rb_request_conn(e, token);
  int st = mg_rb_status_of(status);
  Check_Type(body, T_ARRAY);
  int64_t blen = 0, copied = 0;
  long nparts = RARRAY_LEN(body);
  VALUE bad = Qundef;
  for (long i = 0; i < nparts; i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (!RB_TYPE_P(part, T_STRING)) { bad = part; break; }
    blen += RSTRING_LEN(part);
    if (RSTRING_LEN(part) < MG_SHARE_STRING) copied += RSTRING_LEN(part);
  }
  mg_head h;
  mg_rb_head_begin(&h, st, headers, (size_t)copied);
  if (h.hijack != Qnil) {
    mg_head_release(&h);
    return Qfalse;
  }
  if (bad != Qundef) {
    mg_head_release(&h);
    rb_raise(mg_eInvalidResponse, "body parts must be Strings, got %" PRIsVALUE, rb_obj_class(bad));
  }
  int send_body = !c->head_request && !mg_bodyless(st);
  if (h.content_length >= 0 && send_body && !h.has_te && h.content_length != blen) {
    mg_head_release(&h);
    rb_raise(mg_eInvalidResponse, "content-length %lld does not match the body's %lld bytes",
             (long long)h.content_length, (long long)blen);
  }
  if (h.has_te) blen = -1;
  mg_rb_head_finish(e, &h, c, st, mg_bodyless(st) ? -1 : blen);
  if (send_body && !body_unchanged(body, nparts, h.has_te ? -1 : blen)) {
    mg_head_release(&h);
    rb_raise(mg_eInvalidResponse, "the body array changed while its headers were read");
  }
  /* In a fiber-mode thread a response of copied parts is queued, not sent: the thread's next
   * wait sends it without the GVL (with those of the other fibers that answered meanwhile). */
  int defer = (!send_body || copied == blen) && mg_rb_waits_can_defer(e);
  if (send_body) {
    for (long i = 0; i < nparts; i++) {
      VALUE part = RARRAY_AREF(body, i);
      if (RSTRING_LEN(part) < MG_SHARE_STRING) {
        mg_rb_head_put(&h, RSTRING_PTR(part), (size_t)RSTRING_LEN(part));
        continue;
      }
      /* a large part is sent from the app's string itself: frozen (a later
       * change to the app's copy makes Ruby copy it, not us) and pinned */
      mg_head_queue(c, &h);
      if (queue_string(e, c, rb_str_new_frozen(part)) != 0) rb_raise(rb_eNoMemError, "response queue");
      mg_rb_head_grow(&h, 1024);
    }
  }
  if (defer) {
    mg_out_queue(&c->out, h.buf, h.len);
    mg_head_release(&h);
  } else {
    mg_head_queue(c, &h);
  }
  c->resp_started = 1;
  c->stream_left = -1;
  if (!defer) return mg_respond_complete(e, c);
  mg_timing_done(e, c);
  mg_rb_waits_defer(c);
  return Qnil;
}

int mg_rb_open_file(VALUE path, struct stat *sb) {
  FilePathValue(path);
  /* O_NONBLOCK: a FIFO (or a device) named by to_path must not block every
   * Ruby thread while this one holds the GVL; only regular files are sent. */
  int fd = open(StringValueCStr(path), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return -1;
  if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) { close(fd); return -1; }
  return fd;
}

/* Engine#respond_file(token, status, headers, path) -> like #respond; false if the file cannot be opened */
static VALUE engine_respond_file(VALUE self, VALUE token, VALUE status, VALUE headers, VALUE path) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_respond_file(e, token, status, headers, path);
  mg_conn *c = mg_rb_request_conn(e, token);
  int st = mg_rb_status_of(status);
  struct stat sb;
  int fd = mg_rb_open_file(path, &sb);
  if (fd < 0) return Qfalse;
  mg_head h;
  int status_ok = 0;
  mg_rb_head_begin(&h, st, headers, 0);
  status_ok = h.content_length < 0 || h.content_length == (int64_t)sb.st_size;
  if (!status_ok || h.has_te) { mg_head_release(&h); close(fd); return Qfalse; } /* let the caller iterate the body */
  mg_rb_head_finish(e, &h, c, st, mg_bodyless(st) ? -1 : (int64_t)sb.st_size);
  mg_head_queue(c, &h);
  if (!c->head_request && !mg_bodyless(st) && sb.st_size > 0) mg_out_queue_file(&c->out, fd, 0, (uint64_t)sb.st_size);
  else close(fd);
  c->resp_started = 1;
  c->stream_left = -1;
  return mg_respond_complete(e, c);
}

/* Engine#early_hints(token, headers): a 103 response before the final one (on HTTP/1.1, and on an
 * HTTP/2 stream as a HEADERS frame: ruby/h2.c); false when the response began, or on HTTP/1.0. */
static VALUE engine_early_hints(VALUE self, VALUE token, VALUE headers) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_early_hints(e, token, headers);
  mg_conn *c = mg_rb_request_conn(e, token);
  if (c->minor < 1 || c->resp_started) return Qfalse;
  mg_head h;
  mg_rb_head_begin(&h, 103, headers, 0);
  mg_rb_head_put(&h, "\r\n", 2);
  mg_head_queue(c, &h);
  mg_rb_respond_send(c);
  return Qtrue;
}

/* Engine#response_started?(token) */
static VALUE engine_response_started(VALUE self, VALUE token) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_started(e, token);
  return mg_rb_request_conn(e, token)->resp_started ? Qtrue : Qfalse;
}

void mg_respond_init(VALUE cEngine) {
  rb_define_method(cEngine, "respond", engine_respond, 4);
  rb_define_method(cEngine, "respond_file", engine_respond_file, 4);
  rb_define_method(cEngine, "early_hints", engine_early_hints, 2);
  rb_define_method(cEngine, "response_started?", engine_response_started, 1);
}
