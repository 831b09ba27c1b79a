/*
 * ruby/engine.c - Margay::Native::Engine, the Ruby face of the native hot path.
 *
 * Ruby creates one Engine per server process, hands it listening fds, and
 * calls #next_request from each pool thread. The engine owns every client connection.
 *
 * This file: the Engine's lifecycle (new, listeners, start, stop, stats, close). Its settings
 * are ruby/settings.c, the requests Ruby holds ruby/request.c, the response methods
 * ruby/respond.c and ruby/stream.c, the cluster API ruby/balance.c; the work itself is core/.
 */
#include "ruby/engine.h"
#include "ruby/request.h"
#include "ruby/settings.h"
#include "ruby/tls.h"
#include "core/board.h"
#include "core/h2.h"
#include "core/health.h"
#include "core/listeners.h"
#include "core/timing.h"
#include <fcntl.h>
#include <math.h>

VALUE mg_eClientGone, mg_eInvalidResponse;

static void engine_release(mg_engine *e) {
  if (e->closed) return;
  e->closed = 1;
  mg_health_stop(e);
  mg_h2_flush_stop(e);
  mg_board_ready(e, 0);
  mg_conn_close_all(e);
  mg_engine_close(e);
  atomic_store(&e->metrics, NULL);
  if (e->own_metrics) { mg_text_unmap(e->own_metrics); e->own_metrics = NULL; }
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
  rb_gc_mark(rb->self); /* pins it: request envs are built with rb->self (compact_before_fork runs GC.compact) */
  rb_gc_mark(rb->hijack_class);
  rb_gc_mark(rb->hints_class);
  if (!rb->core.closed) mg_pins_each(&rb->core.pins, mark_ref); /* also pins them: they cannot move */
  for (int i = 0; i < rb->core.nlisteners; i++) {
    rb_gc_mark(rb->servers[i].server_name);
    rb_gc_mark(rb->servers[i].server_port);
    rb_gc_mark(rb->servers[i].tls);
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
  rb->core.wake = MG_WAKE_NONE;
  rb->core.health_wake = MG_WAKE_NONE;
  rb->env_template = Qnil;
  rb->board = Qnil;
  rb->self = obj;
  rb->hijack_class = rb->hints_class = Qnil;
  rb->core.closed = 1; /* until initialize succeeds */
  return obj;
}

mg_rb_engine *mg_rb_engine_get(VALUE self) {
  mg_rb_engine *rb = rb_check_typeddata(self, &engine_type);
  if (rb->core.closed) rb_raise(rb_eIOError, "engine is closed");
  return rb;
}

/* Engine.new(values, env_template_hash): +values+ holds one value per name
 * of Engine::SETTINGS, in that order (Margay::Configuration validated them;
 * nil where a setting means "no limit" or "derive it"). */
static VALUE engine_initialize(VALUE self, VALUE values, VALUE env_template) {
  mg_rb_engine *rb = rb_check_typeddata(self, &engine_type);
  mg_engine *e = &rb->core;
  Check_Type(values, T_ARRAY);
  Check_Type(env_template, T_HASH);
  mg_rb_settings_read(&e->cfg, values);
  e->cfg.max_connections = mg_rb_settings_max_connections(values, mg_engine_size(e));
  int kind = mg_rb_settings_backend(values);
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

/* Engine#add_listener(fd, unix?, server_name, server_port, tls = nil, http2 = false,
 * extended_connect = false) -> index; +http2+: HTTP/2 on this listener (ALPN h2 on TLS, the client
 * preface on plain TCP); +extended_connect+: its connections advertise
 * SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441); +tls+: a Native::TLSContext, and the listener's
 * connections speak TLS. */
static VALUE engine_add_listener(int argc, VALUE *argv, VALUE self) {
  VALUE fd, is_unix, name, port, tls, http2, connect;
  rb_scan_args(argc, argv, "43", &fd, &is_unix, &name, &port, &tls, &http2, &connect);
  mg_rb_engine *rb = mg_rb_engine_get(self);
  mg_engine *e = &rb->core;
  if (e->nlisteners >= MG_MAX_LISTENERS) rb_raise(rb_eArgError, "at most %d listeners", MG_MAX_LISTENERS);
  mg_listener *l = &e->listeners[e->nlisteners];
  mg_env_server *server = &rb->servers[e->nlisteners];
  l->fd = NUM2INT(fd);
  l->is_unix = RTEST(is_unix);
  server->server_name = rb_str_new_frozen(StringValue(name));
  server->server_port = rb_str_new_frozen(StringValue(port));
  l->tls = NIL_P(tls) ? NULL : mg_rb_tls_context(tls);
  l->h2 = RTEST(http2);
  l->h2_connect = l->h2 && RTEST(connect);
  if (l->h2 && !mg_h2_available()) rb_raise(rb_eArgError, "Margay was built without libnghttp2: no HTTP/2");
  if (l->h2 && atomic_load(&e->started) && mg_h2_flush_start(e) != 0)
    rb_sys_fail("Margay::Native::Engine#add_listener: HTTP/2 flusher thread");
  server->tls = tls;
  int flags = fcntl(l->fd, F_GETFL);
  if (flags < 0 || fcntl(l->fd, F_SETFL, flags | O_NONBLOCK) != 0) rb_sys_fail("Margay::Native::Engine#add_listener: fcntl");
  return INT2FIX(e->nlisteners++);
}

/* Engine#add_health_listener(fd, agent = false): a listener the engine's health thread serves
 * (GET /livez, /readyz, /metrics; agent: one HAProxy agent-check line per connection;
 * core/health.c), from #start until #close. Ruby keeps owning the fd. */
static VALUE engine_add_health_listener(int argc, VALUE *argv, VALUE self) {
  VALUE fd, agent;
  rb_scan_args(argc, argv, "11", &fd, &agent);
  mg_engine *e = mg_rb_engine_core(self);
  if (e->nhealth >= MG_MAX_HEALTH_LISTENERS) rb_raise(rb_eArgError, "at most %d health listeners", MG_MAX_HEALTH_LISTENERS);
  if (e->health_running) rb_raise(rb_eArgError, "add health listeners before #start");
  int f = NUM2INT(fd);
  int flags = fcntl(f, F_GETFL);
  if (flags < 0 || fcntl(f, F_SETFL, flags | O_NONBLOCK) != 0) rb_sys_fail("Margay::Native::Engine#add_health_listener: fcntl");
  e->health_agent[e->nhealth] = RTEST(agent);
  e->health_fds[e->nhealth++] = f;
  return self;
}

/* Engine#busy_threads=(n): the app threads in a request now (the agent's weight; in a cluster,
 * this worker's BUSY cell on the board). */
static VALUE engine_set_busy_threads(VALUE self, VALUE n) {
  mg_engine *e = mg_rb_engine_core(self);
  int busy = NUM2INT(n);
  atomic_store(&e->busy_threads, busy);
  if (e->board_slots) atomic_store(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_BUSY, e->board_index), busy);
  return n;
}

/* Engine#start: begin accepting on every listener; ready from now on (until #drain or #stop). */
static VALUE engine_start(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_listeners_start(e) != 0) rb_sys_fail("Margay::Native::Engine#start: arm listener");
  if (mg_health_start(e) != 0) rb_sys_fail("Margay::Native::Engine#start: health thread");
  for (int i = 0; i < e->nlisteners; i++)
    if (e->listeners[i].h2 && mg_h2_flush_start(e) != 0) rb_sys_fail("Margay::Native::Engine#start: HTTP/2 flusher thread");
  atomic_store(&e->started, 1);
  if (!atomic_load(&e->draining) && !atomic_load(&e->stopping)) mg_board_ready(e, 1);
  return self;
}

/* Engine#drain: not ready from now on (the health answers say 503), and every response closes
 * its connection; the listeners keep accepting and every request is served. Trap-safe. */
static VALUE engine_drain(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  atomic_store(&e->draining, 1);
  mg_board_ready(e, 0);
  return Qnil;
}

/* Engine#draining?: #drain was called, or the cluster drains (the board's flag). */
static VALUE engine_draining_p(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  return atomic_load(&e->draining) || (e->board_slots && atomic_load(mg_board_drain_flag(e->board_slots, e->board_n))) ? Qtrue : Qfalse;
}

/* Engine#metrics_text=(text): what GET /metrics on the health listener answers from now on (a
 * copy; at most 4 MiB). A cluster worker's engine writes the board's shared text. */
static VALUE engine_set_metrics_text(VALUE self, VALUE text) {
  mg_engine *e = mg_rb_engine_core(self);
  StringValue(text);
  mg_text *t = atomic_load(&e->metrics);
  if (!t) {
    if (!(t = mg_text_map())) rb_sys_fail("Margay::Native::Engine#metrics_text=: mmap");
    e->own_metrics = t;
    atomic_store(&e->metrics, t);
  }
  if (mg_text_set(t, RSTRING_PTR(text), (size_t)RSTRING_LEN(text)) != 0)
    rb_raise(rb_eArgError, "metrics text: at most %u bytes", MG_TEXT_CAP);
  return text;
}

/* Engine#stop(force = false): stop accepting; idle connections close at once,
 * others when their request is done (force: now). Safe from a trap handler.
 * On return no loop thread touches a listener fd again: Ruby may close them. */
static VALUE engine_stop(int argc, VALUE *argv, VALUE self) {
  VALUE force;
  rb_scan_args(argc, argv, "01", &force);
  mg_engine *e = mg_rb_engine_core(self);
  int level = RTEST(force) ? MG_STOP_FORCED : MG_STOP_GRACEFUL;
  int was = atomic_load(&e->stopping);
  if (was < level) atomic_store(&e->stopping, level);
  if (was == MG_RUNNING) mg_listeners_stop(e); /* later calls: the listeners may be closed (and their numbers reused) */
  if (was == MG_RUNNING && level == MG_STOP_GRACEFUL) mg_h2_stop_all(e);
  mg_board_ready(e, 0);
  atomic_store(&e->next_sweep_ms, 0);
  mg_engine_wake(e);
  return Qnil;
}

/* Engine#stopping?: whether #stop was called (graceful or forced). */
static VALUE engine_stopping_p(VALUE self) { return atomic_load(&mg_rb_engine_core(self)->stopping) ? Qtrue : Qfalse; }

/* A histogram (core/timing.h) as Ruby: {buckets: {le => cumulative count, ..., Infinity => count},
 * sum: seconds, count:}. */
static VALUE histogram_hash(mg_histogram *hist) {
  VALUE buckets = rb_hash_new();
  uint64_t n = 0;
  for (int i = 0; i <= MG_HIST_BUCKETS; i++) {
    n += atomic_load_explicit(&hist->buckets[i], memory_order_relaxed);
    rb_hash_aset(buckets, DBL2NUM(i < MG_HIST_BUCKETS ? mg_hist_bounds[i] : HUGE_VAL), ULL2NUM(n));
  }
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("buckets")), buckets);
  rb_hash_aset(h, ID2SYM(rb_intern("sum")), DBL2NUM((double)atomic_load(&hist->sum_ns) / 1e9));
  rb_hash_aset(h, ID2SYM(rb_intern("count")), ULL2NUM(n));
  return h;
}

/* Engine#stats -> {connections:, kept_alive:, waiting_threads:, requests:, abandoned:, max_connections:,
 * event_backend:, polling:, standing_by:, ready:, shed:, queue_time_seconds:,
 * request_duration_seconds:} (requests: heads read, less the abandoned, the shed and the
 * health_check_path probes; ready: what /readyz answers, core/health.h; shed: answered 503 for
 * waiting over queue_timeout; the two histograms: histogram_hash; abandoned:
 * requests not run because their client had closed its side first; kept_alive: the connections
 * kept alive after a response, waiting for or in their next request; polling and standing_by: of
 * the waiting threads, the one blocked in the event set and those standing by, core/loop.c) */
static VALUE engine_stats(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("connections")), INT2NUM(atomic_load(&e->nconns)));
  rb_hash_aset(h, ID2SYM(rb_intern("kept_alive")), INT2NUM(atomic_load(&e->kept_alive)));
  rb_hash_aset(h, ID2SYM(rb_intern("waiting_threads")), INT2NUM(atomic_load(&e->idle_waiters)));
  rb_hash_aset(h, ID2SYM(rb_intern("requests")), ULL2NUM(atomic_load(&e->requests)));
  rb_hash_aset(h, ID2SYM(rb_intern("abandoned")), ULL2NUM(atomic_load(&e->abandoned)));
  rb_hash_aset(h, ID2SYM(rb_intern("shed")), ULL2NUM(atomic_load(&e->shed)));
  rb_hash_aset(h, ID2SYM(rb_intern("queue_time_seconds")), histogram_hash(&e->queue_hist));
  rb_hash_aset(h, ID2SYM(rb_intern("request_duration_seconds")), histogram_hash(&e->duration_hist));
  rb_hash_aset(h, ID2SYM(rb_intern("max_connections")), INT2NUM(e->cfg.max_connections));
  rb_hash_aset(h, ID2SYM(rb_intern("event_backend")), rb_str_new_cstr(e->ev->ops->name));
  rb_hash_aset(h, ID2SYM(rb_intern("polling")), INT2NUM(atomic_load(&e->pollers)));
  pthread_mutex_lock(&e->standby_lock);
  int standbys = e->standbys;
  pthread_mutex_unlock(&e->standby_lock);
  rb_hash_aset(h, ID2SYM(rb_intern("standing_by")), INT2NUM(standbys));
  rb_hash_aset(h, ID2SYM(rb_intern("ready")), mg_health_ready(e) ? Qtrue : Qfalse);
  return h;
}

/* Engine#backlog -> requests accepted that wait for a thread (mg_timing_backlog: one look per
 * connection while every thread is busy; for the stats, not for every tick). */
static VALUE engine_backlog(VALUE self) { return INT2NUM(mg_timing_backlog(mg_rb_engine_core(self), NULL)); }

/* Engine#queue_look -> [requests waiting for a thread, the longest-waiting one's wait in ms]
 * (the same look as #backlog, and the kernel's stamp of each waiting request's first bytes);
 * a cluster worker's engine also writes both on the board, where GET /queue reads them. */
static VALUE engine_queue_look(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  int64_t oldest = 0;
  int n = mg_timing_backlog(e, &oldest);
  int64_t wait_ms = oldest > 0 ? (mg_wall_ns() - oldest) / 1000000 : 0;
  if (wait_ms < 0) wait_ms = 0;
  if (wait_ms > INT32_MAX) wait_ms = INT32_MAX;
  mg_board_set(e, MG_BOARD_BACKLOG, n);
  mg_board_set(e, MG_BOARD_OLDEST_MS, (int)wait_ms);
  return rb_ary_new_from_args(2, INT2NUM(n), LL2NUM(wait_ms));
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
  mg_settings_init(cEngine);
  rb_define_method(cEngine, "initialize", engine_initialize, 2);
  rb_define_method(cEngine, "add_listener", engine_add_listener, -1);
  rb_define_method(cEngine, "add_health_listener", engine_add_health_listener, -1);
  rb_define_method(cEngine, "busy_threads=", engine_set_busy_threads, 1);
  rb_define_method(cEngine, "start", engine_start, 0);
  rb_define_method(cEngine, "drain", engine_drain, 0);
  rb_define_method(cEngine, "draining?", engine_draining_p, 0);
  rb_define_method(cEngine, "metrics_text=", engine_set_metrics_text, 1);
  rb_define_method(cEngine, "stop", engine_stop, -1);
  rb_define_method(cEngine, "stopping?", engine_stopping_p, 0);
  rb_define_method(cEngine, "stats", engine_stats, 0);
  rb_define_method(cEngine, "backlog", engine_backlog, 0);
  rb_define_method(cEngine, "queue_look", engine_queue_look, 0);
  rb_define_method(cEngine, "close", engine_close, 0);
  mg_request_init(cEngine);
  return cEngine;
}
