/*
 * engine.c - Margay::Native::Engine, the Ruby face of the native hot path.
 *
 * Ruby creates one Engine per server process, hands it listening fds, and
 * calls #next_request from each pool thread. The engine owns every client
 * connection; a Ruby thread holds one only between #next_request returning
 * it and the response call (#respond, #respond_file, #stream_finish, #abort,
 * #hijack) that gives it back. Tokens name that hold: fd, generation and
 * request number, so a stale token raises instead of touching another request.
 */
#include "engine.h"
#include <errno.h>
#include <fcntl.h>
#include <ruby/thread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#ifdef HAVE_SYS_EVENTFD_H
#include <sys/eventfd.h>
#endif

VALUE mg_eClientGone, mg_eInvalidResponse;
static VALUE cEngine;
static ID id_timeout;

static void engine_release(mg_engine *e) {
  if (e->closed) return;
  e->closed = 1;
  if (e->conns) {
    for (int fd = 0; fd < e->max_fds; fd++) {
      mg_conn *c = e->conns[fd];
      if (!c) continue;
      if (mg_state_st(atomic_load(&c->state)) != MG_FREE) mg_conn_close(e, c);
      free(c->rbuf);
      free(c->bmem);
      free(c);
    }
    free(e->conns);
    e->conns = NULL;
  }
  if (e->ev) { mg_ev_free(e->ev); e->ev = NULL; }
  if (e->wake_fd[0] >= 0) close(e->wake_fd[0]);
  if (e->wake_fd[1] >= 0 && e->wake_fd[1] != e->wake_fd[0]) close(e->wake_fd[1]);
  e->wake_fd[0] = e->wake_fd[1] = -1;
  pthread_mutex_destroy(&e->sweep_lock);
  free(e->pins.entries); /* every segment is gone with its connection */
  e->pins.entries = NULL;
  e->pins.len = e->pins.cap = 0;
  pthread_mutex_destroy(&e->pins.lock);
}

static void engine_free(void *p) {
  mg_engine *e = p;
  engine_release(e);
  xfree(e);
}

static void engine_mark(void *p) {
  mg_engine *e = p;
  rb_gc_mark(e->env_template);
  rb_gc_mark(e->board);
  if (!e->closed) mg_pins_mark(&e->pins);
  for (int i = 0; i < e->nlisteners; i++) {
    rb_gc_mark(e->listeners[i].server_name);
    rb_gc_mark(e->listeners[i].server_port);
  }
}

static size_t engine_memsize(const void *p) {
  const mg_engine *e = p;
  return sizeof *e + (size_t)e->max_fds * sizeof(mg_conn *);
}

static const rb_data_type_t engine_type = {
  "Margay::Native::Engine",
  {engine_mark, engine_free, engine_memsize},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE engine_alloc(VALUE klass) {
  mg_engine *e;
  VALUE obj = TypedData_Make_Struct(klass, mg_engine, &engine_type, e);
  e->wake_fd[0] = e->wake_fd[1] = -1;
  e->env_template = Qnil;
  e->board = Qnil;
  e->closed = 1; /* until initialize succeeds */
  return obj;
}

mg_engine *mg_engine_get(VALUE self) {
  mg_engine *e = rb_check_typeddata(self, &engine_type);
  if (e->closed) rb_raise(rb_eIOError, "engine is closed");
  return e;
}

/* The value of setting +i+ from the array Engine.new was given. */
static VALUE setting(VALUE values, enum mg_setting i) { return RARRAY_AREF(values, i); }
static int64_t setting_ms(VALUE values, enum mg_setting i) { return (int64_t)(NUM2DBL(setting(values, i)) * 1000.0); }

/* Engine.new(values, env_template_hash): +values+ holds one value per name
 * of Engine::SETTINGS, in that order (Margay::Configuration validated them;
 * nil where a setting means "no limit" or "derive it"). */
static VALUE engine_initialize(VALUE self, VALUE values, VALUE env_template) {
  mg_engine *e = rb_check_typeddata(self, &engine_type);
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
  s->max_keepalive_requests = NUM2UINT(setting(values, MG_SET_max_keepalive_requests));
  s->response_buffer_limit = NUM2SIZET(setting(values, MG_SET_response_buffer_limit));
  VALUE tmp = setting(values, MG_SET_tmpdir);
  snprintf(s->tmpdir, sizeof s->tmpdir, "%s", StringValueCStr(tmp));

  struct rlimit rl;
  int max_fds = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) max_fds = (int)rl.rlim_cur;
  if (max_fds > (1 << 20)) max_fds = 1 << 20;
  if (max_fds < 64) max_fds = 64;
  e->max_fds = max_fds;
  /* keep some descriptors for the app (files, databases, logs) */
  int dflt_conns = max_fds > 256 ? max_fds - 64 : max_fds / 2;
  VALUE mc = setting(values, MG_SET_max_connections);
  s->max_connections = NIL_P(mc) || NUM2INT(mc) > dflt_conns ? dflt_conns : NUM2INT(mc);

  VALUE backend = setting(values, MG_SET_event_backend);
  int kind = MG_EV_AUTO;
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("poll")) kind = MG_EV_POLL;
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("epoll")) kind = MG_EV_EPOLL;
  e->ev = mg_ev_new(kind, max_fds);
  if (!e->ev) rb_sys_fail("Margay::Native::Engine#initialize: event backend");
  e->conns = calloc((size_t)max_fds, sizeof(mg_conn *));
  if (!e->conns) { mg_ev_free(e->ev); e->ev = NULL; rb_raise(rb_eNoMemError, "connection table"); }
#ifdef HAVE_EVENTFD
  e->wake_fd[0] = e->wake_fd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->wake_fd[0] < 0)
#endif
  {
    if (pipe(e->wake_fd) != 0) rb_sys_fail("Margay::Native::Engine#initialize: pipe");
    for (int i = 0; i < 2; i++) {
      fcntl(e->wake_fd[i], F_SETFL, fcntl(e->wake_fd[i], F_GETFL) | O_NONBLOCK);
      fcntl(e->wake_fd[i], F_SETFD, FD_CLOEXEC);
    }
  }
  pthread_mutex_init(&e->sweep_lock, NULL);
  pthread_mutex_init(&e->pins.lock, NULL);
  e->env_template = rb_hash_dup(env_template);
  rb_obj_freeze(e->env_template);
  e->closed = 0;
  if (mg_ev_arm_persistent(e->ev, e->wake_fd[0], MG_DATA_WAKE) != 0) rb_sys_fail("Margay::Native::Engine#initialize: arm wake fd");
  return self;
}

/* Engine#add_listener(fd, unix?, server_name, server_port) -> index */
static VALUE engine_add_listener(VALUE self, VALUE fd, VALUE is_unix, VALUE name, VALUE port) {
  mg_engine *e = mg_engine_get(self);
  if (e->nlisteners >= MG_MAX_LISTENERS) rb_raise(rb_eArgError, "at most %d listeners", MG_MAX_LISTENERS);
  mg_listener *l = &e->listeners[e->nlisteners];
  l->fd = NUM2INT(fd);
  l->is_unix = RTEST(is_unix);
  l->server_name = rb_str_new_frozen(StringValue(name));
  l->server_port = rb_str_new_frozen(StringValue(port));
  int flags = fcntl(l->fd, F_GETFL);
  if (flags < 0 || fcntl(l->fd, F_SETFL, flags | O_NONBLOCK) != 0) rb_sys_fail("Margay::Native::Engine#add_listener: fcntl");
  return INT2FIX(e->nlisteners++);
}

/* Engine#start: begin accepting on every listener. */
static VALUE engine_start(VALUE self) {
  mg_engine *e = mg_engine_get(self);
  for (int i = 0; i < e->nlisteners; i++)
    if (mg_ev_arm(e->ev, e->listeners[i].fd, MG_EV_IN, MG_DATA_LISTENER | (uint64_t)i) != 0)
      rb_sys_fail("Margay::Native::Engine#start: arm listener");
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

typedef struct { mg_engine *e; mg_conn *c; VALUE out; } build_args;

static VALUE build_request(VALUE p) {
  build_args *b = (build_args *)p;
  VALUE env = mg_env_build(b->e, b->c);
  mg_conn_consume_head(b->c);
  b->out = rb_assoc_new(mg_conn_token(b->c), env);
  return b->out;
}

static VALUE ready(mg_engine *e, mg_conn *c) {
  build_args b = {e, c, Qnil};
  int state = 0;
  rb_protect(build_request, (VALUE)&b, &state);
  if (state) { mg_conn_close(e, c); rb_jump_tag(state); }
  return b.out;
}

/*
 * Engine#next_request(continue_token = nil, idle_ms = nil)
 *   -> [token, env], :timeout (idle_ms passed without work), or nil (stopped)
 * Waits without the GVL. continue_token: the token #respond returned, when a
 * pipelined request is already buffered on that connection.
 */
static VALUE engine_next_request(int argc, VALUE *argv, VALUE self) {
  VALUE cont, idle;
  rb_scan_args(argc, argv, "02", &cont, &idle);
  mg_engine *e = mg_engine_get(self);
  if (!NIL_P(cont)) {
    mg_conn *c = conn_lookup(e, cont, MG_PH_IDLE);
    if (c && mg_conn_continue(e, c)) return ready(e, c);
  }
  mg_wait_args a = {e, NULL, NIL_P(idle) ? -1 : NUM2LL(idle), 0};
  for (;;) {
    a.result = MG_WAIT_INTR;
    rb_thread_call_without_gvl2(mg_wait_nogvl, &a, RUBY_UBF_IO, NULL);
    if (a.result == MG_WAIT_READY) return ready(e, a.conn);
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
  if (was == 0) { /* later calls: the listeners may be closed (and their numbers reused) */
    for (int i = 0; i < e->nlisteners; i++) mg_ev_disarm(e->ev, e->listeners[i].fd);
    while (atomic_load(&e->listener_users) > 0) sched_yield(); /* at most one accept4 each */
  }
  atomic_store(&e->next_sweep_ms, 0);
  mg_engine_wake(e);
  return Qnil;
}

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

/* Engine#detach_idle(max, pending_only) -> [[fd, kept_alive], ...]: idle
 * connections (see mg_detach_idle) leave the engine with their sockets open
 * (a saturated cluster worker hands them to another worker; nothing is lost:
 * unread bytes wait in the kernel). pending_only: just those whose client
 * has sent a request this engine has not read yet. */
static VALUE engine_detach_idle(VALUE self, VALUE max, VALUE pending_only) {
  mg_engine *e = mg_engine_get(self);
  int cap = NUM2INT(max);
  if (cap <= 0) return rb_ary_new();
  if (cap > 1024) cap = 1024;
  int fds[1024], kept[1024];
  int n = mg_detach_idle(e, fds, kept, cap, RTEST(pending_only));
  VALUE out = rb_ary_new_capa(n);
  for (int i = 0; i < n; i++) rb_ary_push(out, rb_assoc_new(INT2FIX(fds[i]), kept[i] ? Qtrue : Qfalse));
  return out;
}

/* Engine#adopt(fd, kept_alive): serve an idle connection handed over by
 * another worker (the engine owns the fd from now on): one that served a
 * request (kept_alive) or a new one that has not sent its first yet. */
static VALUE engine_adopt(VALUE self, VALUE fdv, VALUE kept_alive) {
  mg_engine *e = mg_engine_get(self);
  int fd = NUM2INT(fdv);
  if (fd < 0 || fd >= e->max_fds || atomic_load(&e->stopping)) { close(fd); return Qfalse; }
  struct sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  if (getpeername(fd, (struct sockaddr *)&peer, &plen) != 0) { close(fd); return Qfalse; }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) { close(fd); return Qfalse; }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  int is_unix = peer.ss_family == AF_UNIX;
  int li = 0;
  for (int i = 0; i < e->nlisteners; i++) if (e->listeners[i].is_unix == is_unix) { li = i; break; }
  if (!is_unix) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, RTEST(kept_alive)) == 0 ? Qtrue : Qfalse;
}

/* Engine#error_response(token, status): a plain-text error, then close. */
static VALUE engine_error_response(VALUE self, VALUE token, VALUE status) {
  mg_engine *e = mg_engine_get(self);
  mg_conn *c = mg_engine_conn_for_token(e, token);
  mg_simple_response(e, c, NUM2INT(status));
  c->resp_started = 1;
  mg_conn_complete(e, c);
  return Qnil;
}

static VALUE engine_stats(VALUE self) {
  mg_engine *e = mg_engine_get(self);
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("connections")), INT2NUM(atomic_load(&e->nconns)));
  rb_hash_aset(h, ID2SYM(rb_intern("waiting_threads")), INT2NUM(atomic_load(&e->idle_waiters)));
  rb_hash_aset(h, ID2SYM(rb_intern("requests")), ULL2NUM(atomic_load(&e->requests)));
  rb_hash_aset(h, ID2SYM(rb_intern("max_connections")), INT2NUM(e->cfg.max_connections));
  rb_hash_aset(h, ID2SYM(rb_intern("event_backend")), rb_str_new_cstr(e->ev->ops->name));
  return h;
}

static VALUE engine_waiting_threads(VALUE self) {
  return INT2NUM(atomic_load(&mg_engine_get(self)->idle_waiters));
}

/* Engine#saturated_ms: how long no thread has been waiting for work (0 while one is). */
static VALUE engine_saturated_ms(VALUE self) {
  mg_engine *e = mg_engine_get(self);
  if (atomic_load(&e->idle_waiters) > 0) return INT2FIX(0);
  int64_t d = mg_now_ms() - atomic_load(&e->all_busy_since_ms);
  return LL2NUM(d < 0 ? 0 : d);
}

/* Engine#publish_idle(board, index): count this engine's waiting threads
 * into slot +index+ of the cluster's IdleBoard (see board.c). Call before
 * #start. */
static VALUE engine_publish_idle(VALUE self, VALUE board, VALUE index) {
  mg_engine *e = mg_engine_get(self);
  int n, i = NUM2INT(index);
  _Atomic int *slots = mg_board_slots(board, &n);
  if (!slots || i < 0 || i >= n) rb_raise(rb_eIndexError, "no slot %d on the board", i);
  atomic_store(mg_board_cell(slots, n, MG_BOARD_WAITING, i), atomic_load(&e->idle_waiters));
  atomic_store(mg_board_cell(slots, n, MG_BOARD_CONNS, i), atomic_load(&e->nconns));
  e->board = board;
  e->board_n = n;
  e->board_index = i;
  e->board_slots = slots;
  return self;
}

/* Engine#handoff_quota: how many idle keep-alive connections this worker
 * should hand to less loaded workers (0 without a board). */
static VALUE engine_handoff_quota(VALUE self) {
  mg_engine *e = mg_engine_get(self);
  return INT2NUM(mg_board_handoff_quota(e));
}

/* Engine#others_waiting: how many threads the other workers of the cluster
 * have waiting for work (0 when there is no board). */
static VALUE engine_others_waiting(VALUE self) {
  return INT2NUM(mg_board_others_waiting(mg_engine_get(self)));
}

static VALUE engine_close(VALUE self) {
  mg_engine *e = rb_check_typeddata(self, &engine_type);
  engine_release(e);
  return Qnil;
}

void mg_engine_init(VALUE mNative) {
  cEngine = rb_define_class_under(mNative, "Engine", rb_cObject);
  rb_define_alloc_func(cEngine, engine_alloc);
  /* Every error class is defined once, in Ruby (lib/margay/errors.rb). */
  rb_require("margay/errors");
  mg_eClientGone = rb_const_get(mg_mMargay, rb_intern("ClientGone"));
  mg_eInvalidResponse = rb_const_get(mg_mMargay, rb_intern("InvalidResponse"));
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
  rb_define_method(cEngine, "abort", engine_abort, 1);
  rb_define_method(cEngine, "hijack", engine_hijack, 1);
  rb_define_method(cEngine, "error_response", engine_error_response, 2);
  rb_define_method(cEngine, "detach_idle", engine_detach_idle, 2);
  rb_define_method(cEngine, "adopt", engine_adopt, 2);
  rb_define_method(cEngine, "stats", engine_stats, 0);
  rb_define_method(cEngine, "waiting_threads", engine_waiting_threads, 0);
  rb_define_method(cEngine, "saturated_ms", engine_saturated_ms, 0);
  rb_define_method(cEngine, "close", engine_close, 0);
  rb_define_method(cEngine, "publish_idle", engine_publish_idle, 2);
  rb_define_method(cEngine, "others_waiting", engine_others_waiting, 0);
  rb_define_method(cEngine, "handoff_quota", engine_handoff_quota, 0);
  mg_board_init(mNative);
  mg_response_init(cEngine);
  mg_env_init(mNative);
}
