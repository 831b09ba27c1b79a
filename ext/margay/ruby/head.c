/*
 * ruby/head.c - a Rack status and headers into an HTTP/1.1 response head (see ruby/head.h).
 * Runs with the GVL: it reads Ruby objects (and header values' to_s may run app code).
 */
#include "ruby/head.h"
#include "core/health.h"
#include "http/bytes.h"
#include "http/status.h"
#include "ruby/engine.h"
#include <ruby/encoding.h>
#include <ruby/re.h>
#include <string.h>

/* The calling thread's buffer for a response that fits it, lent to one head at a time (a fiber
 * that builds a head while another fiber of the thread holds it gets its own buffer). */
#define MG_HEAD_LOCAL 8192
static _Thread_local char local_buf[MG_HEAD_LOCAL];
static _Thread_local int local_lent;

static void head_free(mg_head *h) {
  if (h->local) local_lent = 0;
  else mg_buf_free(h->buf, h->cap);
  h->local = 0;
}

void mg_head_release(mg_head *h) {
  head_free(h);
  h->buf = NULL;
  h->cap = h->len = 0;
}

/* The builder's buffer is the thread's own while the response fits it; else it comes from
 * mg_buf_alloc and is handed to the connection's output queue as it is (no second copy):
 * callers reserve the body's size up front so that a large body is copied exactly once. */
void mg_rb_head_grow(mg_head *h, size_t need) {
  if (h->len + need <= h->cap) return;
  if (!h->cap && need <= MG_HEAD_LOCAL && !local_lent) {
    local_lent = 1;
    h->local = 1;
    h->buf = local_buf;
    h->cap = MG_HEAD_LOCAL;
    return;
  }
  size_t cap = h->cap ? h->cap : 1024;
  while (cap < h->len + need) cap *= 2;
  char *buf = mg_buf_alloc(cap);
  if (!buf) {
    mg_head_release(h);
    rb_raise(rb_eNoMemError, "response buffer of %zu bytes", cap);
  }
  if (h->len) memcpy(buf, h->buf, h->len);
  head_free(h);
  h->buf = buf;
  h->cap = cap;
}

void mg_rb_head_put(mg_head *h, const char *s, size_t n) {
  mg_rb_head_grow(h, n);
  memcpy(h->buf + h->len, s, n);
  h->len += n;
}

NORETURN(static void mg_rb_invalid(mg_head *h, const char *fmt, VALUE arg));
static void mg_rb_invalid(mg_head *h, const char *fmt, VALUE arg) {
  mg_head_release(h);
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

static void put_field(mg_head *h, VALUE name, VALUE value) {
  if (!RB_TYPE_P(value, T_STRING)) mg_rb_invalid(h, "header %" PRIsVALUE " value must be a String", name);
  const char *v = RSTRING_PTR(value);
  long vlen = RSTRING_LEN(value);
  for (long i = 0; i < vlen; i++) {
    unsigned char c = (unsigned char)v[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f) mg_rb_invalid(h, "header %" PRIsVALUE " value contains a control character (CR, LF or NUL)", name);
  }
  mg_rb_head_put(h, RSTRING_PTR(name), (size_t)RSTRING_LEN(name));
  mg_rb_head_put(h, ": ", 2);
  mg_rb_head_put(h, v, (size_t)vlen);
  mg_rb_head_put(h, "\r\n", 2);
}

static int64_t parse_length(mg_head *h, VALUE value) {
  if (!RB_TYPE_P(value, T_STRING)) mg_rb_invalid(h, "content-length must be a String of digits, got %" PRIsVALUE, value);
  const char *p = RSTRING_PTR(value);
  long n = RSTRING_LEN(value);
  if (n == 0 || n > 18) mg_rb_invalid(h, "invalid content-length %" PRIsVALUE, value);
  int64_t v = 0;
  for (long i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') mg_rb_invalid(h, "invalid content-length %" PRIsVALUE, value);
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

static int header_i(VALUE name, VALUE value, VALUE arg) {
  mg_head *h = (mg_head *)arg;
  if (!RB_TYPE_P(name, T_STRING)) mg_rb_invalid(h, "header names must be Strings, got %" PRIsVALUE, rb_inspect(name));
  const char *n = RSTRING_PTR(name);
  long nlen = RSTRING_LEN(name);
  if (nlen == 0) mg_rb_invalid(h, "empty header name%" PRIsVALUE, rb_str_new_cstr(""));
  if (nlen > 5 && memcmp(n, "rack.", 5) == 0) {
    if (nlen == 11 && memcmp(n, "rack.hijack", 11) == 0) h->hijack = value;
    if (nlen == 13 && memcmp(n, "rack.protocol", 13) == 0) h->protocol = value;
    return ST_CONTINUE; /* server-only headers never reach the client */
  }
  for (long i = 0; i < nlen; i++)
    if (!MG_IS(n[i], MG_C_TCHAR)) mg_rb_invalid(h, "invalid header name %" PRIsVALUE, rb_inspect(name));
  if (ieq(n, nlen, "content-length")) {
    if (RB_TYPE_P(value, T_ARRAY)) {
      if (RARRAY_LEN(value) != 1) mg_rb_invalid(h, "several content-length values: %" PRIsVALUE, rb_inspect(value));
      value = RARRAY_AREF(value, 0);
    }
    h->content_length = parse_length(h, value);
    return ST_CONTINUE; /* written by mg_rb_head_finish */
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

int mg_rb_status_of(VALUE status) {
  if (!RB_INTEGER_TYPE_P(status)) rb_raise(mg_eInvalidResponse, "status must be an Integer, got %" PRIsVALUE, rb_inspect(status));
  long s = NUM2LONG(status);
  if (s < 100 || s > 999) rb_raise(mg_eInvalidResponse, "status %ld is out of range", s);
  return (int)s;
}

typedef struct {
  mg_head *h;
  VALUE headers;
} fields_args;

static VALUE put_fields(VALUE p) {
  fields_args *a = (fields_args *)p;
  rb_hash_foreach(a->headers, header_i, (VALUE)a->h);
  return Qnil;
}

/* Status line and the app's fields. The fields are read under rb_protect: a header's inspect or
 * to_s is app code, and whatever it raises must not take the buffer with it. */
void mg_rb_head_begin(mg_head *h, int status, VALUE headers, size_t reserve) {
  if (!RB_TYPE_P(headers, T_HASH)) rb_raise(mg_eInvalidResponse, "headers must be a Hash, got %" PRIsVALUE, rb_obj_class(headers));
  memset(h, 0, sizeof *h);
  mg_rb_head_grow(h, 1024 + reserve);
  h->content_length = -1;
  h->hijack = Qnil;
  h->protocol = Qnil;
  h->strip_length = status < 200 || status == 204;
  char line[64];
  /* RFC 9110 6.2: answer with the highest 1.x version we conform to, also to 1.0 clients */
  int n = snprintf(line, sizeof line, "HTTP/1.1 %d %s\r\n", status, mg_reason(status));
  mg_rb_head_put(h, line, (size_t)n);
  fields_args a = {h, headers};
  int state = 0;
  rb_protect(put_fields, (VALUE)&a, &state);
  if (state) {
    mg_head_release(h); /* a no-op after mg_rb_invalid(), which released it before raising */
    rb_jump_tag(state);
  }
}

/* Framing, connection and date fields, then the empty line. body_len < 0: unknown (streamed). */
void mg_rb_head_finish(mg_engine *e, mg_head *h, mg_conn *c, int status, int64_t body_len) {
  char line[96];
  int n;
  if (!h->strip_length) {
    int64_t cl = h->content_length >= 0 ? h->content_length : body_len;
    if (cl >= 0 && !h->has_te) {
      if (!(status == 304 && h->content_length < 0)) {
        n = snprintf(line, sizeof line, "content-length: %lld\r\n", (long long)cl);
        mg_rb_head_put(h, line, (size_t)n);
      }
    } else if (!h->has_te && !mg_bodyless(status) && c->minor >= 1) {
      mg_rb_head_put(h, "transfer-encoding: chunked\r\n", 28);
      h->resp_chunked = 1;
    }
  }
  int framed = mg_bodyless(status) || c->head_request || h->resp_chunked || h->has_te ||
               h->content_length >= 0 || body_len >= 0;
  int keep = c->keep_alive && !h->app_close && framed && !mg_health_closing(e) &&
             c->requests + 1 < e->cfg.max_keepalive_requests && status != 101;
  c->keep_alive = keep;
  if (status != 101) {
    if (!keep) mg_rb_head_put(h, "connection: close\r\n", 19);
    else if (c->minor == 0) mg_rb_head_put(h, "connection: keep-alive\r\n", 24);
  } else {
    /* RFC 9110 7.8: a 101 names the new protocol in upgrade, and upgrade is
     * a connection option; the app's rack.protocol header names it when the
     * app wrote no upgrade field (Rack 3.1 SPEC) */
    if (!h->has_upgrade && RB_TYPE_P(h->protocol, T_STRING)) put_field(h, rb_str_new_cstr("upgrade"), h->protocol);
    mg_rb_head_put(h, "connection: upgrade\r\n", 21);
  }
  if (!h->has_date) {
    mg_rb_head_grow(h, 64);
    h->len += mg_date_header(h->buf + h->len);
  }
  mg_rb_head_put(h, "\r\n", 2);
}

/* Hand the built head (and body bytes appended to it) to the connection: the thread's own
 * buffer is written at once when nothing is queued before it (what the socket does not take is
 * copied into the queue), another buffer is queued as it is. */
void mg_head_queue(mg_conn *c, mg_head *h) {
  if (h->local) mg_out_send(&c->out, c->fd, &c->tls, h->buf, h->len);
  else if (h->len) { mg_out_queue_owned(&c->out, h->buf, h->len, h->cap); h->local = 0; h->buf = NULL; }
  mg_head_release(h);
}
