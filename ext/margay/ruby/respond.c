/*
 * ruby/respond.c - turning a Rack response into bytes on the wire. Runs with the
 * GVL (it reads Ruby objects) but never blocks: bytes are queued on the
 * connection and sent with non-blocking writes; what the socket does not take
 * at once is finished by the event loop while the Ruby thread moves on.
 * Invalid responses raise Margay::InvalidResponse before a byte is queued.
 */
#include "ruby/respond.h"
#include "core/conn.h"
#include "http/bytes.h"
#include "http/status.h"
#include "ruby/engine.h"
#include <ruby/encoding.h>
#include <ruby/fiber/scheduler.h>
#include <ruby/io.h>
#include <ruby/re.h>
#include <ruby/thread.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- validation and head building ---- */

typedef struct {
  char *buf;              /* from mg_buf_alloc */
  size_t len, cap;
  int has_date, app_close, has_te, resp_chunked;
  int64_t content_length; /* -1 when the app set none */
  int strip_length;       /* 1xx / 204: never send content-length */
  int has_upgrade;        /* the app wrote an upgrade field */
  VALUE hijack;           /* rack.hijack response header (partial hijack) */
  VALUE protocol;         /* rack.protocol response header (the upgrade's protocol) */
} head_builder;

static void hb_release(head_builder *h) {
  mg_buf_free(h->buf, h->cap);
  h->buf = NULL;
  h->cap = h->len = 0;
}

/* The builder's buffer comes from mg_buf_alloc and is handed to the
 * connection's output queue as it is (no second copy); callers reserve the
 * body's size up front so that a large body is copied exactly once. */
static void hb_grow(head_builder *h, size_t need) {
  if (h->len + need <= h->cap) return;
  size_t cap = h->cap ? h->cap : 1024;
  while (cap < h->len + need) cap *= 2;
  char *buf = mg_buf_alloc(cap);
  if (!buf) {
    hb_release(h);
    rb_raise(rb_eNoMemError, "response buffer of %zu bytes", cap);
  }
  if (h->len) memcpy(buf, h->buf, h->len);
  mg_buf_free(h->buf, h->cap);
  h->buf = buf;
  h->cap = cap;
}

static void hb_put(head_builder *h, const char *s, size_t n) {
  hb_grow(h, n);
  memcpy(h->buf + h->len, s, n);
  h->len += n;
}

NORETURN(static void invalid(head_builder *h, const char *fmt, VALUE arg));
static void invalid(head_builder *h, const char *fmt, VALUE arg) {
  hb_release(h);
  rb_raise(mg_eInvalidResponse, fmt, arg);
}

static int ieq(const char *a, long alen, const char *lower) {
  size_t n = strlen(lower);
  if ((size_t)alen != n) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = (char)(c + 32);
    if (c != lower[i]) return 0;
  }
  return 1;
}

static void put_field(head_builder *h, VALUE name, VALUE value) {
  if (!RB_TYPE_P(value, T_STRING)) invalid(h, "header %" PRIsVALUE " value must be a String", name);
  const char *v = RSTRING_PTR(value);
  long vlen = RSTRING_LEN(value);
  for (long i = 0; i < vlen; i++) {
    unsigned char c = (unsigned char)v[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f) invalid(h, "header %" PRIsVALUE " value contains a control character (CR, LF or NUL)", name);
  }
  hb_put(h, RSTRING_PTR(name), (size_t)RSTRING_LEN(name));
  hb_put(h, ": ", 2);
  hb_put(h, v, (size_t)vlen);
  hb_put(h, "\r\n", 2);
}

static int64_t parse_length(head_builder *h, VALUE value) {
  if (!RB_TYPE_P(value, T_STRING)) invalid(h, "content-length must be a String of digits, got %" PRIsVALUE, value);
  const char *p = RSTRING_PTR(value);
  long n = RSTRING_LEN(value);
  if (n == 0 || n > 18) invalid(h, "invalid content-length %" PRIsVALUE, value);
  int64_t v = 0;
  for (long i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') invalid(h, "invalid content-length %" PRIsVALUE, value);
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

static int header_i(VALUE name, VALUE value, VALUE arg) {
  head_builder *h = (head_builder *)arg;
  if (!RB_TYPE_P(name, T_STRING)) invalid(h, "header names must be Strings, got %" PRIsVALUE, rb_inspect(name));
  const char *n = RSTRING_PTR(name);
  long nlen = RSTRING_LEN(name);
  if (nlen == 0) invalid(h, "empty header name%" PRIsVALUE, rb_str_new_cstr(""));
  if (nlen > 5 && memcmp(n, "rack.", 5) == 0) {
    if (nlen == 11 && memcmp(n, "rack.hijack", 11) == 0) h->hijack = value;
    if (nlen == 13 && memcmp(n, "rack.protocol", 13) == 0) h->protocol = value;
    return ST_CONTINUE; /* server-only headers never reach the client */
  }
  for (long i = 0; i < nlen; i++)
    if (!MG_IS(n[i], MG_C_TCHAR)) invalid(h, "invalid header name %" PRIsVALUE, rb_inspect(name));
  if (ieq(n, nlen, "content-length")) {
    if (RB_TYPE_P(value, T_ARRAY)) {
      if (RARRAY_LEN(value) != 1) invalid(h, "several content-length values: %" PRIsVALUE, rb_inspect(value));
      value = RARRAY_AREF(value, 0);
    }
    h->content_length = parse_length(h, value);
    return ST_CONTINUE; /* written by finish_head */
  }
  if (ieq(n, nlen, "connection")) {
    VALUE v = RB_TYPE_P(value, T_ARRAY) ? rb_ary_join(value, rb_str_new_cstr(",")) : value;
    if (RB_TYPE_P(v, T_STRING) && rb_memsearch("close", 5, RSTRING_PTR(v), RSTRING_LEN(v), rb_ascii8bit_encoding()) >= 0)
      h->app_close = 1;
    return ST_CONTINUE; /* the server decides and writes connection */
  }
  if (ieq(n, nlen, "date")) h->has_date = 1;
  if (ieq(n, nlen, "upgrade")) h->has_upgrade = 1;
  if (ieq(n, nlen, "transfer-encoding")) {
    if (h->strip_length) return ST_CONTINUE;
    h->has_te = 1;
  }
  if (RB_TYPE_P(value, T_ARRAY)) {
    for (long i = 0; i < RARRAY_LEN(value); i++) put_field(h, name, RARRAY_AREF(value, i));
  } else {
    put_field(h, name, value);
  }
  return ST_CONTINUE;
}

static int status_of(VALUE status) {
  if (!RB_INTEGER_TYPE_P(status)) rb_raise(mg_eInvalidResponse, "status must be an Integer, got %" PRIsVALUE, rb_inspect(status));
  long s = NUM2LONG(status);
  if (s < 100 || s > 999) rb_raise(mg_eInvalidResponse, "status %ld is out of range", s);
  return (int)s;
}

static int bodyless(int status) { return status < 200 || status == 204 || status == 304; }

/* Status line and the app's fields. */
static void begin_head(head_builder *h, int status, VALUE headers, size_t reserve) {
  if (!RB_TYPE_P(headers, T_HASH)) rb_raise(mg_eInvalidResponse, "headers must be a Hash, got %" PRIsVALUE, rb_obj_class(headers));
  memset(h, 0, sizeof *h);
  hb_grow(h, 1024 + reserve);
  h->content_length = -1;
  h->hijack = Qnil;
  h->protocol = Qnil;
  h->strip_length = status < 200 || status == 204;
  char line[64];
  /* RFC 9110 6.2: answer with the highest 1.x version we conform to, also to 1.0 clients */
  int n = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\n", status, mg_reason(status));
  hb_put(h, line, (size_t)n);
  rb_hash_foreach(headers, header_i, (VALUE)h);
}

/* Framing, connection and date fields, then the empty line. body_len < 0: unknown (streamed). */
static void finish_head(mg_engine *e, head_builder *h, mg_conn *c, int status, int64_t body_len) {
  char line[96];
  int n;
  if (!h->strip_length) {
    int64_t cl = h->content_length >= 0 ? h->content_length : body_len;
    if (cl >= 0 && !h->has_te) {
      if (!(status == 304 && h->content_length < 0)) {
        n = snprintf(line, sizeof line, "content-length: %lld\r\n", (long long)cl);
        hb_put(h, line, (size_t)n);
      }
    } else if (!h->has_te && !bodyless(status) && c->minor >= 1) {
      hb_put(h, "transfer-encoding: chunked\r\n", 28);
      h->resp_chunked = 1;
    }
  }
  int framed = bodyless(status) || c->head_request || h->resp_chunked || h->has_te ||
               h->content_length >= 0 || body_len >= 0;
  int keep = c->keep_alive && !h->app_close && framed && !atomic_load(&e->stopping) &&
             c->requests + 1 < e->cfg.max_keepalive_requests && status != 101;
  c->keep_alive = keep;
  if (status != 101) {
    if (!keep) hb_put(h, "connection: close\r\n", 19);
    else if (c->minor == 0) hb_put(h, "connection: keep-alive\r\n", 24);
  } else {
    /* RFC 9110 7.8: a 101 names the new protocol in upgrade, and upgrade is
     * a connection option; the app's rack.protocol header names it when the
     * app wrote no upgrade field (Rack 3.1 SPEC) */
    if (!h->has_upgrade && RB_TYPE_P(h->protocol, T_STRING)) put_field(h, rb_str_new_cstr("upgrade"), h->protocol);
    hb_put(h, "connection: upgrade\r\n", 21);
  }
  if (!h->has_date) {
    hb_grow(h, 64);
    h->len += mg_date_header(h->buf + h->len);
  }
  hb_put(h, "\r\n", 2);
}

/* Hand the built head (and body bytes appended to it) to the connection. */
static void queue_head(mg_conn *c, head_builder *h) {
  if (h->len) mg_out_queue_owned(&c->out, h->buf, h->len, h->cap);
  else mg_buf_free(h->buf, h->cap);
  h->buf = NULL;
  h->cap = h->len = 0;
}

/* Body parts at least this large are sent from the Ruby string, not copied. */
#define MG_SHARE_STRING (64 * 1024)

/* Queue frozen string +str+ without copying it: the engine's pins hold it
 * (its mark function marks them, which also keeps the string from moving)
 * until the bytes are written. 0, or -1 (no memory). */
static int queue_string(mg_engine *e, mg_conn *c, VALUE str) {
  return mg_out_queue_pinned(&c->out, &e->pins, RSTRING_PTR(str), (size_t)RSTRING_LEN(str), (mg_ref)str);
}

/* After the whole response is queued: send, and either go on with a pipelined
 * request (returns the token) or hand the connection to the event loop. */
static VALUE complete(mg_engine *e, mg_conn *c) {
  if (c->stream_left > 0) c->keep_alive = 0; /* fewer bytes than announced: only closing frames it */
  return mg_conn_complete(e, c) ? mg_conn_token(c) : Qnil;
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

/* Engine#respond(token, status, headers, body_array) -> token to continue with, or nil */
static VALUE engine_respond(VALUE self, VALUE token, VALUE status, VALUE headers, VALUE body) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  int st = status_of(status);
  Check_Type(body, T_ARRAY);
  int64_t blen = 0, copied = 0;
  long nparts = RARRAY_LEN(body);
  for (long i = 0; i < nparts; i++) {
    VALUE part = RARRAY_AREF(body, i);
    if (!RB_TYPE_P(part, T_STRING)) rb_raise(mg_eInvalidResponse, "body parts must be Strings, got %" PRIsVALUE, rb_obj_class(part));
    blen += RSTRING_LEN(part);
    if (RSTRING_LEN(part) < MG_SHARE_STRING) copied += RSTRING_LEN(part);
  }
  head_builder h;
  begin_head(&h, st, headers, (size_t)copied);
  int send_body = !c->head_request && !bodyless(st);
  if (h.content_length >= 0 && send_body && !h.has_te && h.content_length != blen) {
    hb_release(&h);
    rb_raise(mg_eInvalidResponse, "content-length %lld does not match the body's %lld bytes",
             (long long)h.content_length, (long long)blen);
  }
  if (h.has_te) blen = -1;
  finish_head(e, &h, c, st, bodyless(st) ? -1 : blen);
  if (send_body && !body_unchanged(body, nparts, h.has_te ? -1 : blen)) {
    hb_release(&h);
    rb_raise(mg_eInvalidResponse, "the body array changed while its headers were read");
  }
  if (send_body) {
    for (long i = 0; i < nparts; i++) {
      VALUE part = RARRAY_AREF(body, i);
      if (RSTRING_LEN(part) < MG_SHARE_STRING) {
        hb_put(&h, RSTRING_PTR(part), (size_t)RSTRING_LEN(part));
        continue;
      }
      /* a large part is sent from the app's string itself: frozen (a later
       * change to the app's copy makes Ruby copy it, not us) and pinned */
      queue_head(c, &h);
      if (queue_string(e, c, rb_str_new_frozen(part)) != 0) rb_raise(rb_eNoMemError, "response queue");
      hb_grow(&h, 1024);
    }
  }
  queue_head(c, &h);
  c->resp_started = 1;
  c->stream_left = -1;
  return complete(e, c);
}

/* Engine#respond_file(token, status, headers, path) -> like #respond; false if the file cannot be opened */
static VALUE engine_respond_file(VALUE self, VALUE token, VALUE status, VALUE headers, VALUE path) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  int st = status_of(status);
  FilePathValue(path);
  /* O_NONBLOCK: a FIFO (or a device) named by to_path must not block every
   * Ruby thread while this one holds the GVL; only regular files are sent. */
  int fd = open(StringValueCStr(path), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Qfalse;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); return Qfalse; }
  head_builder h;
  int status_ok = 0;
  begin_head(&h, st, headers, 0);
  status_ok = h.content_length < 0 || h.content_length == (int64_t)sb.st_size;
  if (!status_ok || h.has_te) { hb_release(&h); close(fd); return Qfalse; } /* let the caller iterate the body */
  finish_head(e, &h, c, st, bodyless(st) ? -1 : (int64_t)sb.st_size);
  queue_head(c, &h);
  if (!c->head_request && !bodyless(st) && sb.st_size > 0) mg_out_queue_file(&c->out, fd, 0, (uint64_t)sb.st_size);
  else close(fd);
  c->resp_started = 1;
  c->stream_left = -1;
  return complete(e, c);
}

/* Engine#stream_start(token, status, headers) -> partial-hijack callable or nil */
static VALUE engine_stream_start(VALUE self, VALUE token, VALUE status, VALUE headers) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  int st = status_of(status);
  head_builder h;
  begin_head(&h, st, headers, 0);
  if (h.hijack != Qnil) {
    c->keep_alive = 0; /* the app takes the socket after the head ... */
    h.has_te = 1;      /* ... and frames its bytes itself: add no content-length or chunked */
  }
  finish_head(e, &h, c, st, h.hijack != Qnil || bodyless(st) ? -1 : h.content_length);
  c->resp_chunked = h.resp_chunked && !c->head_request;
  c->stream_left = (c->head_request || bodyless(st)) ? 0 : h.content_length;
  VALUE hijack = h.hijack;
  queue_head(c, &h);
  c->resp_started = 1;
  if (mg_out_flush(&c->out, c->fd) < 0) rb_raise(mg_eClientGone, "client went away");
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

/* Wait until the queue is under +limit+ bytes (wait_writable: the fiber, or the thread without
 * the GVL). A client that takes nothing for write_timeout is gone. */
static void drain_to(mg_engine *e, mg_conn *c, size_t limit) {
  int64_t deadline = mg_now_ms() + e->cfg.write_timeout_ms;
  for (;;) {
    int r = mg_out_flush(&c->out, c->fd);
    if (r < 0) rb_raise(mg_eClientGone, "client went away");
    if (r > 0 || c->out.bytes <= limit) return;
    int64_t left = deadline - mg_now_ms();
    if (left <= 0) rb_raise(mg_eClientGone, "write timeout: the client stopped reading");
    if (wait_writable(c->fd, (int)left)) deadline = mg_now_ms() + e->cfg.write_timeout_ms;
  }
}

/* Streamed output spilled to disk for one response before its thread waits. */
#define MG_SPILL_LIMIT ((off_t)1 << 30)

/* Engine#stream_write(token, string) */
static VALUE engine_stream_write(VALUE self, VALUE token, VALUE data) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  StringValue(data);
  size_t n = (size_t)RSTRING_LEN(data);
  if (c->head_request || n == 0) return Qnil;
  if (c->stream_left >= 0) {
    if ((int64_t)n > c->stream_left)
      rb_raise(mg_eInvalidResponse, "body is longer than its content-length (%ld more bytes)", (long)(n - (size_t)c->stream_left));
    c->stream_left -= (int64_t)n;
  }
  if (mg_out_flush(&c->out, c->fd) < 0) rb_raise(mg_eClientGone, "client went away");
  if (c->out.spill_fd >= 0 || c->out.bytes + n > e->cfg.response_buffer_limit) {
    /* The client is slower than the app: spill to a tempfile rather than hold
     * this thread, up to MG_SPILL_LIMIT per response (then wait for it). */
    if (c->out.spill_end + (off_t)n > MG_SPILL_LIMIT) drain_to(e, c, 0);
    char head[24];
    struct iovec iov[3] = {{head, 0}, {RSTRING_PTR(data), n}, {(char *)"\r\n", 0}};
    if (c->resp_chunked) {
      iov[0].iov_len = (size_t)snprintf(head, sizeof head, "%zx\r\n", n);
      iov[2].iov_len = 2;
    }
    if (c->out.spill_end + (off_t)n <= MG_SPILL_LIMIT && mg_out_spill(&c->out, e->cfg.tmpdir, iov, 3) == 0) return Qnil;
    drain_to(e, c, e->cfg.response_buffer_limit / 2); /* no tempfile: wait for the client instead */
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
  if (mg_out_flush(&c->out, c->fd) < 0) rb_raise(mg_eClientGone, "client went away");
  return Qnil;
}

/* Engine#stream_finish(token) -> token to continue with, or nil */
static VALUE engine_stream_finish(VALUE self, VALUE token) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  if (c->resp_chunked) mg_out_queue(&c->out, "0\r\n\r\n", 5);
  c->resp_chunked = 0;
  return complete(e, c);
}

/* Engine#flush(token): block until everything queued is written (streaming bodies' flush). */
static VALUE engine_flush(VALUE self, VALUE token) {
  mg_engine *e = mg_engine_get(self);
  drain_to(e, mg_engine_conn_for_token(e, token), 0);
  return Qnil;
}

/* Engine#early_hints(token, headers): a 103 response before the final one (HTTP/1.1 only). */
static VALUE engine_early_hints(VALUE self, VALUE token, VALUE headers) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  if (c->minor < 1 || c->resp_started) return Qfalse;
  head_builder h;
  begin_head(&h, 103, headers, 0);
  hb_put(&h, "\r\n", 2);
  queue_head(c, &h);
  if (mg_out_flush(&c->out, c->fd) < 0) rb_raise(mg_eClientGone, "client went away");
  return Qtrue;
}

/* Engine#response_started?(token) */
static VALUE engine_response_started(VALUE self, VALUE token) {
  mg_engine *e = mg_engine_get(self);
  return mg_engine_conn_for_token(e, token)->resp_started ? Qtrue : Qfalse;
}

void mg_respond_init(VALUE cEngine) {
  rb_define_method(cEngine, "respond", engine_respond, 4);
  rb_define_method(cEngine, "respond_file", engine_respond_file, 4);
  rb_define_method(cEngine, "stream_start", engine_stream_start, 3);
  rb_define_method(cEngine, "stream_write", engine_stream_write, 2);
  rb_define_method(cEngine, "stream_finish", engine_stream_finish, 1);
  rb_define_method(cEngine, "flush", engine_flush, 1);
  rb_define_method(cEngine, "early_hints", engine_early_hints, 2);
  rb_define_method(cEngine, "response_started?", engine_response_started, 1);
}
