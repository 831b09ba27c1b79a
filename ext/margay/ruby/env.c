/*
 * ruby/env.c - the Rack env for a parsed request head (runs with the GVL). Keys
 * are interned frozen strings, so building an env allocates only its values.
 */
#include "ruby/env.h"
#include "ruby/field_key.h"
#include "core/h2.h"
#include <ruby/encoding.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

static VALUE k_REQUEST_METHOD, k_PATH_INFO, k_QUERY_STRING, k_REQUEST_URI, k_SERVER_PROTOCOL,
    k_SERVER_NAME, k_SERVER_PORT, k_REMOTE_ADDR, k_CONTENT_LENGTH, k_CONTENT_TYPE, k_HTTP_HOST,
    k_HTTP_COOKIE, k_rack_input, k_queue_time, k_body_wait, k_HTTP_X_REQUEST_START,
    k_url_scheme, k_HTTPS, k_peercert, k_is_hijack, k_protocol, k_HTTP_UPGRADE, k_hijack, k_early_hints,
    k_response_finished;
static VALUE v_https, v_HTTP_2, v_HTTP_1_1, v_HTTP_1_0, v_port80, v_port443, v_localhost, v_star;
static VALUE cStringIO;
static ID id_for_fd, id_engine, id_token, id_env;

static VALUE interned(const char *s) {
  VALUE v = rb_interned_str_cstr(s);
  rb_gc_register_mark_object(v);
  return v;
}

static VALUE method_string(const char *p, size_t n) {
  static VALUE known[7];
  static const char *names[7] = {"GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"};
  for (int i = 0; i < 7; i++) {
    if (strlen(names[i]) == n && memcmp(names[i], p, n) == 0) {
      if (!known[i]) known[i] = interned(names[i]);
      return known[i];
    }
  }
  return rb_str_new(p, (long)n);
}

static VALUE span_str(const char *buf, mg_span s) { return rb_str_new(buf + s.off, s.len); }

/* An address as a new String. (Interned strings, rb_interned_str, were tried: on Ruby 3.1 one
 * kept in the env of an earlier request was seen replaced by another object for the same
 * address, with heap corruption in the same runs, so every request gets its own.) */
static VALUE addr_str(const char *s) { return rb_str_new_cstr(s); }

/* Whether field name +s+ is +want+ (lowercase, '-'; see remote_header in core/engine.h). A name
 * with '_' never matches: X_Forwarded_For cannot stand in for X-Forwarded-For (CVE-2024-45614). */
static int is_field(const char *b, mg_span s, const char *want) {
  return memchr(b + s.off, '_', s.len) == NULL && mg_span_ieq(b, s, want);
}

/* REMOTE_ADDR (docs/CONFIGURATION.md): a fixed value; else the last address of the configured
 * forwarding field (the one the nearest proxy added: every earlier one is the client's to
 * choose); else the PROXY line's address; else the socket's peer. */
static VALUE remote_addr(const mg_settings *cfg, mg_conn *c) {
  if (cfg->remote_value[0]) return addr_str(cfg->remote_value);
  if (cfg->remote_header[0]) {
    const mg_request *r = c->req;
    for (size_t i = r->nheaders; i-- > 0;) {
      if (!is_field(c->rbuf, r->headers[i].name, cfg->remote_header)) continue;
      char ip[MG_ADDR_MAX];
      if (mg_forwarded_last(c->rbuf + r->headers[i].value.off, r->headers[i].value.len, ip)) return addr_str(ip);
      break; /* the last line decides: an earlier one is no better than the socket */
    }
  }
  if (c->proxy_addr[0]) return addr_str(c->proxy_addr);
  return addr_str(mg_conn_peer_text(c));
}

/* rack.input for a request with a body (in memory, or in tempfile *bfd, which Ruby owns from
 * here: *bfd is -1 after); Qundef without one: the env keeps the template's shared empty input
 * (RequestHandler::EMPTY_INPUT). */
static VALUE body_input(int *bfd, const char *mem, size_t len) {
  if (*bfd >= 0) {
    VALUE io = rb_funcall(rb_cFile, id_for_fd, 2, INT2FIX(*bfd), rb_str_new_cstr("rb"));
    *bfd = -1; /* Ruby owns it now and closes it after the request */
    return io;
  }
  if (!len) return Qundef;
  if (!cStringIO) {
    cStringIO = rb_const_get(rb_cObject, rb_intern("StringIO"));
    rb_gc_register_mark_object(cStringIO);
  }
  VALUE str = rb_str_new(mem, (long)len);
  rb_enc_associate(str, rb_ascii8bit_encoding());
  return rb_class_new_instance(1, &str, cStringIO);
}

/* The env's own pairs, gathered before they go into the template's copy. Keys are interned: a
 * repeated field finds its earlier pair by identity (no hash lookup per field). */
typedef struct {
  VALUE *kv;
  long n; /* values used (2 per pair) */
} pairs;

static void put(pairs *p, VALUE key, VALUE value) {
  p->kv[p->n++] = key;
  p->kv[p->n++] = value;
}

/* The value already gathered for +key+, or NULL. */
static VALUE *find(pairs *p, VALUE key) {
  for (long i = 0; i < p->n; i += 2) if (p->kv[i] == key) return &p->kv[i + 1];
  return NULL;
}

/* A request field's pair (the pairs from index +fields+ on are the fields): a repeated field's
 * values joined with ", " (cookie crumbs with "; "), the last content-type kept. */
static void put_field(pairs *p, long fields, VALUE key, VALUE value) {
  pairs seen = {p->kv + fields, p->n - fields};
  VALUE *prev = find(&seen, key);
  if (prev && key != k_CONTENT_TYPE) {
    rb_str_cat(*prev, key == k_HTTP_COOKIE ? "; " : ", ", 2);
    rb_str_append(*prev, value);
  } else if (prev) {
    *prev = value; /* the last content-type wins */
  } else {
    put(p, key, value);
  }
}

/* A plain request's callables (mg_env_objects), allocated here with their instance variables
 * set: no Class#new and Ruby initialize per object (about 1,400 instructions each on Ruby 3.1),
 * no Ruby-level insert per entry. */
static void put_objects(pairs *p, VALUE env, mg_env_objects *o) {
  VALUE hijack = rb_obj_alloc(o->hijack_class);
  rb_ivar_set(hijack, id_engine, o->engine);
  rb_ivar_set(hijack, id_token, o->token);
  rb_ivar_set(hijack, id_env, env);
  VALUE hints = rb_obj_alloc(o->hints_class);
  rb_ivar_set(hints, id_engine, o->engine);
  rb_ivar_set(hints, id_token, o->token);
  put(p, k_hijack, hijack);
  put(p, k_early_hints, hints);
  put(p, k_response_finished, rb_ary_new());
  o->hijack = hijack;
}

/* The env: a copy of the template with the pairs and rack.input (Qundef: the template's); frees
 * the pairs' buffer (+tmp+, ALLOCV's). The pairs go in at once (rb_hash_bulk_insert): the table
 * grows once to its final size, where one rb_hash_aset per pair rebuilt it as it grew (about a
 * fifth of a hello-world request's instructions went to those inserts). The keys are frozen
 * strings, so each is stored as given, as rb_hash_aset would; a key already in the template
 * (rack.input, rack.url_scheme) gets the pair's value. */
static VALUE finish_env(VALUE env_template, pairs *p, VALUE input, VALUE tmp, mg_env_objects *o) {
  if (input != Qundef) put(p, k_rack_input, input);
  VALUE env = rb_hash_dup(env_template);
  if (o) put_objects(p, env, o);
  rb_hash_bulk_insert(p->n, p->kv, env);
  ALLOCV_END(tmp);
  return env;
}

/* SERVER_NAME and SERVER_PORT from a host[:port] authority. */
static void set_server(pairs *pp, const char *p, size_t n, int https) {
  size_t name_end = n;
  const char *port = NULL;
  size_t port_len = 0;
  if (n && p[0] == '[') {
    const char *close = memchr(p, ']', n);
    name_end = close ? (size_t)(close - p) + 1 : n;
    if (name_end < n && p[name_end] == ':') { port = p + name_end + 1; port_len = n - name_end - 1; }
  } else {
    const char *colon = memchr(p, ':', n);
    if (colon) { name_end = (size_t)(colon - p); port = colon + 1; port_len = n - name_end - 1; }
  }
  put(pp, k_SERVER_NAME, name_end ? rb_str_new(p, (long)name_end) : v_localhost);
  put(pp, k_SERVER_PORT, port_len ? rb_str_new(port, (long)port_len) : https ? v_port443 : v_port80);
}

/* The fixed pairs, the SERVER_* and CONTENT_LENGTH pairs and rack.input besides the fields. */
#define MG_ENV_FIXED_PAIRS 26

/* margay.queue_time (seconds from the first byte to a thread taking the request),
 * puma.request_body_wait (Puma's meaning: milliseconds from the head complete to the body
 * complete) and, with queue_time_header, X-Request-Start as nginx writes it (t=${msec}: the
 * arrival in seconds with 3 decimals) when the request has none. */
static void put_times(pairs *p, const mg_settings *cfg, int64_t arrival_ns, int64_t head_ns, int64_t ready_ns,
                      int64_t taken_ns) {
  int64_t queued = taken_ns - arrival_ns, body = ready_ns - head_ns; /* < 0: the clock was set back */
  put(p, k_queue_time, DBL2NUM(queued > 0 ? (double)queued / 1e9 : 0.0));
  put(p, k_body_wait, DBL2NUM(body > 0 ? (double)body / 1e6 : 0.0));
  if (cfg->queue_time_header && !find(p, k_HTTP_X_REQUEST_START)) {
    char t[40];
    int64_t ms = arrival_ns / 1000000;
    int n = snprintf(t, sizeof t, "t=%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
    put(p, k_HTTP_X_REQUEST_START, rb_str_new(t, n));
  }
}

/* A TLS connection's keys, as Puma sets them: rack.url_scheme and HTTPS "https", and the
 * client's certificate (DER here; Ruby makes it the OpenSSL::X509::Certificate Puma gives,
 * Server's request handler). */
static int put_tls(pairs *p, mg_conn *c) {
  put(p, k_url_scheme, v_https);
  put(p, k_HTTPS, v_https);
  unsigned char *der;
  long n = mg_tls_peer_der(&c->tls, &der);
  if (n > 0) {
    put(p, k_peercert, rb_str_new((const char *)der, n));
    mg_tls_free_der(der);
  }
  return n > 0;
}

VALUE mg_env_build(VALUE env_template, const mg_env_server *server, const mg_settings *cfg, mg_conn *c,
                   mg_env_objects *o) {
  const char *b = c->rbuf;
  mg_request *r = c->req;
  VALUE tmp = 0;
  pairs p = {ALLOCV_N(VALUE, tmp, 2 * (MG_ENV_FIXED_PAIRS + r->nheaders)), 0};

  put(&p, k_REQUEST_METHOD, method_string(b + r->method.off, r->method.len));
  if (r->target_form == MG_ASTERISK_FORM) put(&p, k_PATH_INFO, v_star);
  else if (r->path.len == 0) put(&p, k_PATH_INFO, rb_str_new_cstr("/"));
  else put(&p, k_PATH_INFO, span_str(b, r->path));
  put(&p, k_QUERY_STRING, r->query.len ? span_str(b, r->query) : rb_str_new(NULL, 0));
  put(&p, k_REQUEST_URI, span_str(b, r->target));
  put(&p, k_SERVER_PROTOCOL, r->minor ? v_HTTP_1_1 : v_HTTP_1_0);
  put(&p, k_REMOTE_ADDR, remote_addr(cfg, c));

  long fields = p.n;
  int plain = !NIL_P(o->hijack_class) && c->bfd < 0;
  for (size_t i = 0; i < r->nheaders; i++) {
    const char *name = b + r->headers[i].name.off;
    size_t nlen = r->headers[i].name.len;
    VALUE key;
    if (mg_span_ieq(b, r->headers[i].name, "content-length")) {
      continue; /* set below from the parsed, validated length */
    } else if (mg_span_ieq(b, r->headers[i].name, "content-type")) {
      key = k_CONTENT_TYPE;
    } else if (mg_span_ieq(b, r->headers[i].name, "transfer-encoding")) {
      continue; /* the body is de-chunked; CONTENT_LENGTH says its size */
    } else {
      key = mg_field_key(name, nlen);
      if (NIL_P(key)) continue;
      if (key == k_HTTP_UPGRADE) plain = 0;
    }
    put_field(&p, fields, key, span_str(b, r->headers[i].value));
  }
  if (r->content_length >= 0 || r->chunked) {
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", (unsigned long long)(r->chunked ? c->btotal : (uint64_t)r->content_length));
    put(&p, k_CONTENT_LENGTH, rb_str_new(num, n));
  }
  VALUE *host;
  if (r->authority.len) {
    VALUE authority = span_str(b, r->authority);
    if ((host = find(&p, k_HTTP_HOST))) *host = authority;
    else put(&p, k_HTTP_HOST, authority);
    int https = r->target.len > 5 && (b[r->target.off + 4] == 's' || b[r->target.off + 4] == 'S');
    set_server(&p, b + r->authority.off, r->authority.len, https);
  } else if (r->host.len) {
    set_server(&p, b + r->host.off, r->host.len, c->tls.ssl != NULL);
  } else {
    put(&p, k_SERVER_NAME, server->server_name);
    put(&p, k_SERVER_PORT, server->server_port);
  }
  put_times(&p, cfg, c->arrival_ns, c->head_ns, c->ready_ns, c->taken_ns);
  if (c->tls.ssl && put_tls(&p, c)) plain = 0;
  return finish_env(env_template, &p, body_input(&c->bfd, c->bmem, c->blen), tmp, plain ? o : NULL);
}

static VALUE h2_value(const mg_h2_req *q, int i) {
  return rb_str_new(q->buf + q->fields[i].value, q->fields[i].value_len);
}

static int h2_is(const mg_h2_req *q, const mg_h2_field *f, const char *lower) {
  return f->name_len == strlen(lower) && memcmp(q->buf + f->name, lower, f->name_len) == 0;
}

VALUE mg_env_build_h2(VALUE env_template, const mg_env_server *server, const mg_settings *cfg, mg_h2_req *q) {
  VALUE tmp = 0;
  pairs p = {ALLOCV_N(VALUE, tmp, 2 * (MG_ENV_FIXED_PAIRS + 4 + q->nfields)), 0};
  const mg_h2_field *m = &q->fields[q->method];
  put(&p, k_REQUEST_METHOD, method_string(q->buf + m->value, m->value_len));
  if (q->path >= 0) {
    const char *path = q->buf + q->fields[q->path].value;
    size_t n = q->fields[q->path].value_len;
    const char *hash = memchr(path, '#', n);
    if (hash) n = (size_t)(hash - path); /* a fragment is never the server's */
    const char *qm = memchr(path, '?', n);
    size_t plen = qm ? (size_t)(qm - path) : n;
    put(&p, k_PATH_INFO, plen ? rb_str_new(path, (long)plen) : rb_str_new_cstr("/"));
    put(&p, k_QUERY_STRING, qm ? rb_str_new(qm + 1, (long)(n - plen - 1)) : rb_str_new(NULL, 0));
    put(&p, k_REQUEST_URI, rb_str_new(path, (long)n));
  } else { /* CONNECT: :authority only */
    put(&p, k_PATH_INFO, rb_str_new(NULL, 0));
    put(&p, k_QUERY_STRING, rb_str_new(NULL, 0));
    put(&p, k_REQUEST_URI, rb_str_new(NULL, 0));
  }
  put(&p, k_SERVER_PROTOCOL, v_HTTP_2);
  VALUE remote = Qnil;
  if (cfg->remote_value[0]) remote = addr_str(cfg->remote_value);
  long fields = p.n;
  const char *host = NULL;
  size_t host_len = 0;
  for (size_t i = 0; i < q->nfields; i++) {
    const mg_h2_field *f = &q->fields[i];
    const char *name = q->buf + f->name;
    if (f->name_len && name[0] == ':') continue;
    if (NIL_P(remote) && cfg->remote_header[0] && f->name_len == strlen(cfg->remote_header) &&
        memcmp(name, cfg->remote_header, f->name_len) == 0) {
      char ip[MG_ADDR_MAX];
      if (mg_forwarded_last(q->buf + f->value, f->value_len, ip)) remote = addr_str(ip);
    }
    VALUE key;
    if (h2_is(q, f, "content-length")) continue; /* set below from the body's size */
    if (h2_is(q, f, "content-type")) key = k_CONTENT_TYPE;
    else {
      key = mg_field_key(name, f->name_len);
      if (NIL_P(key)) continue;
    }
    if (key == k_HTTP_HOST) { host = q->buf + f->value; host_len = f->value_len; }
    put_field(&p, fields, key, h2_value(q, (int)i));
  }
  if (NIL_P(remote)) remote = addr_str(q->remote);
  put(&p, k_REMOTE_ADDR, remote);
  int has_body = q->btotal > 0; /* or an empty one the client announced */
  for (size_t i = 0; !has_body && i < q->nfields; i++) has_body = h2_is(q, &q->fields[i], "content-length");
  if (has_body) {
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", (unsigned long long)q->btotal);
    put(&p, k_CONTENT_LENGTH, rb_str_new(num, n));
  }
  if (q->authority >= 0) {
    const mg_h2_field *a = &q->fields[q->authority];
    VALUE authority = h2_value(q, q->authority);
    VALUE *hv = find(&p, k_HTTP_HOST);
    if (hv) *hv = authority;
    else put(&p, k_HTTP_HOST, authority);
    set_server(&p, q->buf + a->value, a->value_len, q->tls);
  } else if (host) {
    set_server(&p, host, host_len, q->tls);
  } else {
    put(&p, k_SERVER_NAME, server->server_name);
    put(&p, k_SERVER_PORT, server->server_port);
  }
  put_times(&p, cfg, q->arrival_ns, q->head_ns, q->ready_ns, q->taken_ns);
  if (q->tls) {
    put(&p, k_url_scheme, v_https);
    put(&p, k_HTTPS, v_https);
    unsigned char *der;
    long n = mg_h2_req_peer_der(q, &der);
    if (n > 0) {
      put(&p, k_peercert, rb_str_new((const char *)der, n));
      mg_tls_free_der(der);
    }
  }
  if (q->protocol >= 0) put(&p, k_protocol, rb_ary_new_from_args(1, h2_value(q, q->protocol)));
  put(&p, k_is_hijack, Qfalse); /* no hijack on HTTP/2: the connection carries other streams */
  return finish_env(env_template, &p, body_input(&q->bfd, q->body, q->blen), tmp, NULL);
}

void mg_env_init(void) {
  k_REQUEST_METHOD = interned("REQUEST_METHOD");
  k_PATH_INFO = interned("PATH_INFO");
  k_QUERY_STRING = interned("QUERY_STRING");
  k_REQUEST_URI = interned("REQUEST_URI");
  k_SERVER_PROTOCOL = interned("SERVER_PROTOCOL");
  k_SERVER_NAME = interned("SERVER_NAME");
  k_SERVER_PORT = interned("SERVER_PORT");
  k_REMOTE_ADDR = interned("REMOTE_ADDR");
  k_CONTENT_LENGTH = interned("CONTENT_LENGTH");
  k_CONTENT_TYPE = interned("CONTENT_TYPE");
  k_HTTP_HOST = interned("HTTP_HOST");
  k_HTTP_COOKIE = interned("HTTP_COOKIE");
  k_rack_input = interned("rack.input");
  k_queue_time = interned("margay.queue_time");
  k_body_wait = interned("puma.request_body_wait");
  k_HTTP_X_REQUEST_START = interned("HTTP_X_REQUEST_START");
  v_HTTP_1_1 = interned("HTTP/1.1");
  v_HTTP_2 = interned("HTTP/2");
  k_is_hijack = interned("rack.hijack?");
  k_protocol = interned("rack.protocol");
  v_HTTP_1_0 = interned("HTTP/1.0");
  v_port80 = interned("80");
  v_port443 = interned("443");
  v_https = interned("https");
  k_url_scheme = interned("rack.url_scheme");
  k_HTTPS = interned("HTTPS");
  k_peercert = interned("puma.peercert");
  v_localhost = interned("localhost");
  v_star = interned("*");
  k_HTTP_UPGRADE = interned("HTTP_UPGRADE");
  k_hijack = interned("rack.hijack");
  k_early_hints = interned("rack.early_hints");
  k_response_finished = interned("rack.response_finished");
  id_for_fd = rb_intern("for_fd");
  id_engine = rb_intern("@engine");
  id_token = rb_intern("@token");
  id_env = rb_intern("@env");
  mg_field_key_init();
}
