/*
 * ruby/engine.c - Margay::Native::Engine, the Ruby face of the native hot path.
 *
 * Ruby creates one Engine per server process, hands it listening fds, and
 * calls #next_request from each pool thread. The engine owns every client
 * connection; a Ruby thread holds one only between #next_request returning
 * it and the response call (#respond, #respond_file, #stream_finish, #abort,
 * #hijack) that gives it back. Tokens name that hold: fd, generation and
 * request number, so a stale token raises instead of touching another request.
 *
 * This file: the Engine's lifecycle (new, listeners, start, stop, close),
 * tokens and #next_request, the one method that waits without the GVL. The
 * response methods are ruby/respond.c and ruby/stream.c, the cluster API ruby/cluster.c; the
 * work itself is core/.
 */
#include "ruby/engine.h"
#include "core/input.h"
#include "core/listeners.h"
#include "core/loop.h"
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <ruby/thread.h>

VALUE mg_eClientGone, mg_eInvalidResponse;
static ID id_timeout;

static void engine_release(mg_engine *e) {
  if (e->closed) return;
  e->closed = 1;
  mg_conn_close_all(e);
  mg_engine_close(e);
}

static void engine_free(void *p) {
  mg_rb_engine *rb = p;
  engine_release(&rb->core);
  xfree(rb);
}

static void mark_ref(mg_ref ref) { rb_gc_mark((VALUE)ref); }

static void engine_mark(void *p) {
  mg_rb_engine *rb = p;
  rb_gc_mark(rb->env_template);
  rb_gc_mark(rb->board);
  if (!rb->core.closed) mg_pins_each(&rb->core.pins, mark_ref); /* also pins them: they cannot move */
  for (int i = 0; i < rb->core.nlisteners; i++) {
    rb_gc_mark(rb->servers[i].server_name);
    rb_gc_mark(rb->servers[i].server_port);
  }
}

static size_t engine_memsize(const void *p) {
  const mg_rb_engine *rb = p;
  return sizeof *rb + (size_t)rb->core.max_fds * sizeof(mg_conn *);
}

static const rb_data_type_t engine_type = {
  "Margay::Native::Engine",
  {engine_mark, engine_free, engine_memsize},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE engine_alloc(VALUE klass) {
  mg_rb_engine *rb;
  VALUE obj = TypedData_Make_Struct(klass, mg_rb_engine, &engine_type, rb);
  rb->core.wake_fd[0] = rb->core.wake_fd[1] = -1;
  rb->env_template = Qnil;
  rb->board = Qnil;
  rb->core.closed = 1; /* until initialize succeeds */
  return obj;
}

mg_rb_engine *mg_rb_engine_get(VALUE self) {
  mg_rb_engine *rb = rb_check_typeddata(self, &engine_type);
  if (rb->core.closed) rb_raise(rb_eIOError, "engine is closed");
  return rb;
}

/* The value of setting +i+ from the array Engine.new was given. */
static VALUE setting(VALUE values, enum mg_setting i) { return RARRAY_AREF(values, i); }
static int64_t setting_ms(VALUE values, enum mg_setting i) { return (int64_t)(NUM2DBL(setting(values, i)) * 1000.0); }

/* Copy String +v+ into out[cap], or raise naming +what+. */
static void copy_setting(char *out, size_t cap, VALUE v, const char *what) {
  StringValue(v);
  if ((size_t)RSTRING_LEN(v) >= cap || memchr(RSTRING_PTR(v), 0, (size_t)RSTRING_LEN(v)))
    rb_raise(rb_eArgError, "%s: at most %zu bytes, no NUL", what, cap - 1);
  memcpy(out, RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
  out[RSTRING_LEN(v)] = '\0';
}

/* The wire's rules and REMOTE_ADDR's source: supported_http_methods (:any or Strings),
 * remote_address (:socket, :localhost or a String), remote_address_header (nil or a field name),
 * proxy_protocol (nil or :v1). */
static void wire_settings(mg_settings *s, VALUE values) {
  VALUE m = setting(values, MG_SET_supported_http_methods);
  s->methods[0] = '\0';
  if (!SYMBOL_P(m)) {
    Check_Type(m, T_ARRAY);
    size_t at = 0;
    for (long i = 0; i < RARRAY_LEN(m); i++) {
      VALUE name = rb_ary_entry(m, i);
      StringValue(name);
      size_t n = (size_t)RSTRING_LEN(name);
      if (n == 0 || n > MG_MAX_METHOD || at + n + 2 > sizeof s->methods)
        rb_raise(rb_eArgError, "supported_http_methods: at most 64 names of 1..%d bytes", MG_MAX_METHOD);
      memcpy(s->methods + at, RSTRING_PTR(name), n);
      at += n;
      s->methods[at++] = ' ';
    }
    s->methods[at] = '\0';
  }
  VALUE ra = setting(values, MG_SET_remote_address);
  s->remote_value[0] = '\0';
  if (SYMBOL_P(ra) && SYM2ID(ra) == rb_intern("localhost")) snprintf(s->remote_value, sizeof s->remote_value, "127.0.0.1");
  else if (!SYMBOL_P(ra)) copy_setting(s->remote_value, sizeof s->remote_value, ra, "remote_address");
  VALUE rh = setting(values, MG_SET_remote_address_header);
  s->remote_header[0] = '\0';
  if (!NIL_P(rh)) {
    copy_setting(s->remote_header, sizeof s->remote_header, rh, "remote_address_header");
    for (char *p = s->remote_header; *p; p++) *p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
  }
  VALUE pp = setting(values, MG_SET_proxy_protocol);
  if (!NIL_P(pp) && !(SYMBOL_P(pp) && SYM2ID(pp) == rb_intern("v1")))
    rb_raise(rb_eArgError, "proxy_protocol: nil or :v1");
  s->proxy_protocol = !NIL_P(pp);
}

/* Engine.new(values, env_template_hash): +values+ holds one value per name
 * of Engine::SETTINGS, in that order (Margay::Configuration validated them;
 * nil where a setting means "no limit" or "derive it"). */
static VALUE engine_initialize(VALUE self, VALUE values, VALUE env_template) {
  mg_rb_engine *rb = rb_check_typeddata(self, &engine_type);
  mg_engine *e = &rb->core;
  Check_Type(values, T_ARRAY);
  Check_Type(env_template, T_HASH);
  if (RARRAY_LEN(values) != MG_SETTINGS_COUNT)
    rb_raise(rb_eArgError, "expected %d settings (Engine::SETTINGS), got %ld", MG_SETTINGS_COUNT, RARRAY_LEN(values));
  mg_settings *s = &e->cfg;
  s->max_target = NUM2SIZET(setting(values, MG_SET_max_request_target));
  s->max_head = NUM2SIZET(setting(values, MG_SET_max_header_size));
  s->max_headers = NUM2SIZET(setting(values, MG_SET_max_headers));
  if (s->max_headers > MG_MAX_HEADERS_HARD) s->max_headers = MG_MAX_HEADERS_HARD;
  VALUE mb = setting(values, MG_SET_max_body_size);
  s->max_body = NIL_P(mb) ? UINT64_MAX : NUM2ULL(mb);
  s->body_buffer_size = NUM2SIZET(setting(values, MG_SET_body_buffer_size));
  s->max_chunk_ext = NUM2SIZET(setting(values, MG_SET_max_chunk_extensions));
  s->header_timeout_ms = setting_ms(values, MG_SET_header_timeout);
  s->body_timeout_ms = setting_ms(values, MG_SET_body_timeout);
  s->keepalive_timeout_ms = setting_ms(values, MG_SET_keepalive_timeout);
  s->write_timeout_ms = setting_ms(values, MG_SET_write_timeout);
  /* Configuration checks these are positive; beyond what the engine can count they mean "no
   * smaller limit" (read wide and clamped, so a large value is never truncated). */
  unsigned long long mkr = NUM2ULL(setting(values, MG_SET_max_keepalive_requests));
  s->max_keepalive_requests = mkr > UINT_MAX ? UINT_MAX : (unsigned)mkr;
  s->response_buffer_limit = NUM2SIZET(setting(values, MG_SET_response_buffer_limit));
  VALUE tmp = setting(values, MG_SET_tmpdir);
  snprintf(s->tmpdir, sizeof s->tmpdir, "%s", StringValueCStr(tmp));
  wire_settings(s, values);

  int dflt_conns = mg_engine_size(e);
  VALUE mc = setting(values, MG_SET_max_connections);
  s->max_connections = NIL_P(mc) || NUM2LL(mc) > dflt_conns ? dflt_conns : (int)NUM2LL(mc);

  VALUE backend = setting(values, MG_SET_event_backend);
  int kind = MG_EV_AUTO;
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("poll")) kind = MG_EV_POLL;
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("epoll")) kind = MG_EV_EPOLL;
  switch (mg_engine_open(e, kind)) {
  case MG_OPEN_BACKEND: rb_sys_fail("Margay::Native::Engine#initialize: event backend");
  case MG_OPEN_TABLE: rb_raise(rb_eNoMemError, "connection table");
  case MG_OPEN_WAKE_FD: rb_sys_fail("Margay::Native::Engine#initialize: pipe");
  case MG_OPEN_ARM_WAKE: rb_sys_fail("Margay::Native::Engine#initialize: arm wake fd");
  }
  rb->env_template = rb_hash_dup(env_template);
  rb_obj_freeze(rb->env_template);
  e->closed = 0;
  return self;
}

/* Engine#add_listener(fd, unix?, server_name, server_port) -> index */
static VALUE engine_add_listener(VALUE self, VALUE fd, VALUE is_unix, VALUE name, VALUE port) {
  mg_rb_engine *rb = mg_rb_engine_get(self);
  mg_engine *e = &rb->core;
  if (e->nlisteners >= MG_MAX_LISTENERS) rb_raise(rb_eArgError, "at most %d listeners", MG_MAX_LISTENERS);
  mg_listener *l = &e->listeners[e->nlisteners];
  mg_env_server *server = &rb->servers[e->nlisteners];
  l->fd = NUM2INT(fd);
  l->is_unix = RTEST(is_unix);
  server->server_name = rb_str_new_frozen(StringValue(name));
  server->server_port = rb_str_new_frozen(StringValue(port));
  int flags = fcntl(l->fd, F_GETFL);
  if (flags < 0 || fcntl(l->fd, F_SETFL, flags | O_NONBLOCK) != 0) rb_sys_fail("Margay::Native::Engine#add_listener: fcntl");
  return INT2FIX(e->nlisteners++);
}

/* Engine#start: begin accepting on every listener. */
static VALUE engine_start(VALUE self) {
  if (mg_listeners_start(mg_engine_get(self)) != 0) rb_sys_fail("Margay::Native::Engine#start: arm listener");
  return self;
}

/* A token names one request on one connection: fd (20 bits: max_fds is at
 * most 2^20), the request's number on the connection (20 bits) and the
 * connection's generation (22 bits; it changes on every hand-back to the
 * event loop), 62 bits in all so that it stays a Fixnum. */
#define TOKEN_FD_BITS 20
#define TOKEN_REQ_BITS 20
#define TOKEN_GEN_MASK ((1ULL << 22) - 1)
#define TOKEN_REQ_MASK ((1ULL << TOKEN_REQ_BITS) - 1)

VALUE mg_conn_token(mg_conn *c) {
  uint64_t gen = mg_state_gen(atomic_load(&c->state)) & TOKEN_GEN_MASK;
  uint64_t t = (gen << (TOKEN_FD_BITS + TOKEN_REQ_BITS)) | (((uint64_t)c->requests & TOKEN_REQ_MASK) << TOKEN_FD_BITS) |
               (uint64_t)c->fd;
  return ULL2NUM(t);
}

/* The connection +token+ names, if its request still holds it: owned (by the
 * calling thread: no other owner can have the same generation and request),
 * and in +phase+ (the application's, or idle for a continue token). */
static mg_conn *conn_lookup(mg_engine *e, VALUE token, int phase) {
  uint64_t t = NUM2ULL(token);
  int fd = (int)(t & ((1ULL << TOKEN_FD_BITS) - 1));
  if (fd >= e->max_fds || !e->conns[fd]) return NULL;
  mg_conn *c = e->conns[fd];
  uint64_t s = atomic_load(&c->state);
  if (mg_state_st(s) != MG_OWNED || (mg_state_gen(s) & TOKEN_GEN_MASK) != (t >> (TOKEN_FD_BITS + TOKEN_REQ_BITS)) ||
      ((uint64_t)c->requests & TOKEN_REQ_MASK) != ((t >> TOKEN_FD_BITS) & TOKEN_REQ_MASK) || c->phase != phase)
    return NULL;
  return c;
}

mg_conn *mg_engine_conn_for_token(mg_engine *e, VALUE token) {
  mg_conn *c = conn_lookup(e, token, MG_PH_APP);
  if (!c) rb_raise(mg_eClientGone, "the connection is no longer held by this request");
  return c;
}

typedef struct { mg_rb_engine *rb; mg_conn *c; VALUE out; } build_args;

static VALUE build_request(VALUE p) {
  build_args *b = (build_args *)p;
  VALUE env = mg_env_build(b->rb->env_template, &b->rb->servers[b->c->listener], &b->rb->core.cfg, b->c);
  mg_input_consume_head(b->c);
  b->out = rb_assoc_new(mg_conn_token(b->c), env);
  return b->out;
}

/* [token, env] for the complete request on +c+ (owned by this thread). */
static VALUE ready(mg_rb_engine *rb, mg_conn *c) {
  assert(mg_conn_owned(c) && c->phase == MG_PH_APP);
  build_args b = {rb, c, Qnil};
  int state = 0;
  rb_protect(build_request, (VALUE)&b, &state);
  if (state) { mg_conn_close(&rb->core, c); rb_jump_tag(state); }
  return b.out;
}

/* When the calling thread last got the GVL back from the blocking wait: it takes ready work
 * without releasing the GVL (mg_loop_try) for at most MG_GVL_TURN_US after that. */
static _Thread_local int64_t gvl_since_us;

/*
 * Engine#next_request(continue_token = nil, idle_ms = nil)
 *   -> [token, env], :timeout (idle_ms passed without work), or nil (stopped)
 * Waits without the GVL. continue_token: the token #respond returned, when a
 * pipelined request is already buffered on that connection: it is served at once while the
 * thread's turn on the connection lasts (MG_TURN_MS since it took it from the event loop),
 * else requeued behind the other ready connections and pending accepts. Ready work is taken
 * first without releasing the GVL (for MG_GVL_TURN_US after the thread last waited).
 */
static VALUE engine_next_request(int argc, VALUE *argv, VALUE self) {
  VALUE cont, idle;
  rb_scan_args(argc, argv, "02", &cont, &idle);
  mg_rb_engine *rb = mg_rb_engine_get(self);
  mg_engine *e = &rb->core;
  if (!NIL_P(cont)) {
    /* A pipelined request is buffered: served at once while this thread's turn on the
     * connection lasts, else it goes behind the other ready connections (core/loop.h). */
    mg_conn *c = conn_lookup(e, cont, MG_PH_IDLE);
    if (c && !mg_loop_turn_left(c)) mg_loop_requeue(e, c);
    else if (c && mg_input_continue(e, c)) return ready(rb, c);
  }
  /* Ready work first, keeping the GVL: no hand-off, no wake of another thread (core/loop.h). */
  mg_conn *c;
  if (mg_now_us() - gvl_since_us < MG_GVL_TURN_US && mg_loop_try(e, &c)) return ready(rb, c);
  mg_wait_args a = {e, NULL, NIL_P(idle) ? -1 : NUM2LL(idle), 0, 0};
  for (;;) {
    a.result = MG_WAIT_INTR;
    atomic_store(&a.interrupted, 0);
    rb_thread_call_without_gvl2(mg_wait_nogvl, &a, mg_loop_unblock, &a);
    gvl_since_us = mg_now_us();
    if (a.result == MG_WAIT_READY) {
      mg_loop_got_gvl(e);
      return ready(rb, a.conn);
    }
    if (a.result == MG_WAIT_TIMEOUT) return ID2SYM(id_timeout);
    if (a.result == MG_WAIT_STOP) return Qnil;
    rb_thread_check_ints(); /* interrupted: signals, Thread#raise, or a closed engine */
    if (e->closed) return Qnil;
  }
}

/* Engine#stop(force = false): stop accepting; idle connections close at once,
 * others when their request is done (force: now). Safe from a trap handler.
 * On return no loop thread touches a listener fd again: Ruby may close them. */
static VALUE engine_stop(int argc, VALUE *argv, VALUE self) {
  VALUE force;
  rb_scan_args(argc, argv, "01", &force);
  mg_engine *e = mg_engine_get(self);
  int level = RTEST(force) ? 2 : 1;
  int was = atomic_load(&e->stopping);
  if (was < level) atomic_store(&e->stopping, level);
  if (was == 0) mg_listeners_stop(e); /* later calls: the listeners may be closed (and their numbers reused) */
  atomic_store(&e->next_sweep_ms, 0);
  mg_engine_wake(e);
  return Qnil;
}

/* Engine#stopping?: whether #stop was called (graceful or forced). */
static VALUE engine_stopping_p(VALUE self) { return atomic_load(&mg_engine_get(self)->stopping) ? Qtrue : Qfalse; }

/* Engine#abort(token): drop a connection whose response cannot be completed.
 * A no-op once the response was handed to the event loop (the token is stale
 * then: the connection may be another thread's by now). A continue token
 * (a pipelined request buffered, nobody else owns it) is dropped as well. */
static VALUE engine_abort(VALUE self, VALUE token) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = conn_lookup(e, token, MG_PH_APP);
  if (!c) c = conn_lookup(e, token, MG_PH_IDLE);
  if (c) mg_conn_close(e, c);
  return Qnil;
}

/* Engine#hijack(token) -> [fd, buffered_input]: the socket leaves the engine. */
static VALUE engine_hijack(VALUE self, VALUE token) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  VALUE rest = rb_str_new(c->rbuf, (long)c->rlen);
  int fd = mg_conn_forget(e, c);
  return rb_assoc_new(INT2FIX(fd), rest);
}

/* Engine#error_response(token, status): a plain-text error, then close. */
static VALUE engine_error_response(VALUE self, VALUE token, VALUE status) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  mg_conn_simple_response(c, NUM2INT(status));
  c->resp_started = 1;
  mg_conn_complete(e, c);
  return Qnil;
}

/* Engine#stats -> {connections:, waiting_threads:, requests:, abandoned:, max_connections:,
 * event_backend:, polling:, standing_by:} (requests: heads read, less the abandoned; abandoned:
 * requests not run because their client had closed its side first; polling and standing_by: of
 * the waiting threads, the one blocked in the event set and those standing by, core/loop.c) */
static VALUE engine_stats(VALUE self) {
  mg_engine *e = mg_engine_get(self);
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("connections")), INT2NUM(atomic_load(&e->nconns)));
  rb_hash_aset(h, ID2SYM(rb_intern("waiting_threads")), INT2NUM(atomic_load(&e->idle_waiters)));
  rb_hash_aset(h, ID2SYM(rb_intern("requests")), ULL2NUM(atomic_load(&e->requests)));
  rb_hash_aset(h, ID2SYM(rb_intern("abandoned")), ULL2NUM(atomic_load(&e->abandoned)));
  rb_hash_aset(h, ID2SYM(rb_intern("max_connections")), INT2NUM(e->cfg.max_connections));
  rb_hash_aset(h, ID2SYM(rb_intern("event_backend")), rb_str_new_cstr(e->ev->ops->name));
  rb_hash_aset(h, ID2SYM(rb_intern("polling")), INT2NUM(atomic_load(&e->pollers)));
  pthread_mutex_lock(&e->standby_lock);
  int standbys = e->standbys;
  pthread_mutex_unlock(&e->standby_lock);
  rb_hash_aset(h, ID2SYM(rb_intern("standing_by")), INT2NUM(standbys));
  return h;
}

/* Engine#close: close every connection and free the engine (after the threads are gone). */
static VALUE engine_close(VALUE self) {
  mg_rb_engine *rb = rb_check_typeddata(self, &engine_type);
  engine_release(&rb->core);
  return Qnil;
}

VALUE mg_engine_init(VALUE mMargay, VALUE mNative) {
  VALUE cEngine = rb_define_class_under(mNative, "Engine", rb_cObject);
  rb_define_alloc_func(cEngine, engine_alloc);
  /* Every error class is defined once, in Ruby (lib/margay/errors.rb). */
  rb_require("margay/errors");
  mg_eClientGone = rb_const_get(mMargay, rb_intern("ClientGone"));
  mg_eInvalidResponse = rb_const_get(mMargay, rb_intern("InvalidResponse"));
  rb_gc_register_mark_object(mg_eClientGone);
  rb_gc_register_mark_object(mg_eInvalidResponse);
#define MG_SETTING_NAME(name) ID2SYM(rb_intern(#name)),
  VALUE names[] = {MG_ENGINE_SETTINGS(MG_SETTING_NAME)};
#undef MG_SETTING_NAME
  rb_define_const(cEngine, "SETTINGS", rb_obj_freeze(rb_ary_new_from_values(MG_SETTINGS_COUNT, names)));
  id_timeout = rb_intern("timeout");
  rb_define_method(cEngine, "initialize", engine_initialize, 2);
  rb_define_method(cEngine, "add_listener", engine_add_listener, 4);
  rb_define_method(cEngine, "start", engine_start, 0);
  rb_define_method(cEngine, "next_request", engine_next_request, -1);
  rb_define_method(cEngine, "stop", engine_stop, -1);
  rb_define_method(cEngine, "stopping?", engine_stopping_p, 0);
  rb_define_method(cEngine, "abort", engine_abort, 1);
  rb_define_method(cEngine, "hijack", engine_hijack, 1);
  rb_define_method(cEngine, "error_response", engine_error_response, 2);
  rb_define_method(cEngine, "stats", engine_stats, 0);
  rb_define_method(cEngine, "close", engine_close, 0);
  return cEngine;
}
