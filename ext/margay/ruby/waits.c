/*
 * ruby/waits.c - Margay::Native::FiberWaits, the Ruby face of core/waits.c.
 *
 * One per fiber-mode pool thread (lib/margay/server/fiber_loop.rb), used only by that thread
 * except #poke, which any thread may call: it is how a fiber blocked on this thread is woken
 * from another one (Fiber::Scheduler#unblock). #wait is the thread's only blocking call: it
 * releases the GVL and returns what became ready, and possibly one request taken from the
 * engine's shared event set (the same dispatch a thread in Engine#next_request does).
 */
#include "ruby/waits.h"
#include "ruby/request.h"
#include "core/loop.h"
#include "core/waits.h"
#include <errno.h>
#include <ruby/thread.h>

/* --- Margay::Native::InFlight: the process's mg_waits_cap (max_in_flight) --------------- */

static const rb_data_type_t cap_type = {
  "Margay::Native::InFlight",
  {0, RUBY_TYPED_DEFAULT_FREE, 0},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE cap_alloc(VALUE klass) {
  mg_waits_cap *cap;
  VALUE obj = TypedData_Make_Struct(klass, mg_waits_cap, &cap_type, cap);
  atomic_store(&cap->count, 0);
  cap->max = 0;
  return obj;
}

static mg_waits_cap *cap_get(VALUE self) { return rb_check_typeddata(self, &cap_type); }

/* InFlight.new(max) */
static VALUE cap_initialize(VALUE self, VALUE max) {
  int m = NUM2INT(max);
  if (m < 1) rb_raise(rb_eArgError, "max_in_flight must be positive");
  cap_get(self)->max = m;
  return self;
}

/* #count: the requests in flight (claimed when taken by FiberWaits#wait). */
static VALUE cap_count(VALUE self) { return INT2FIX(atomic_load(&cap_get(self)->count)); }
static VALUE cap_max(VALUE self) { return INT2FIX(cap_get(self)->max); }

/* #leave: a request ended. Returns true when the cap was full before (threads may wait for room). */
static VALUE cap_leave(VALUE self) { return mg_waits_cap_release(cap_get(self)) ? Qtrue : Qfalse; }

/* --- Margay::Native::FiberWaits ------------------------------------------------------------ */

typedef struct {
  mg_waits *w;
  VALUE engine;
  VALUE cap;
} mg_rb_waits;

static void waits_mark(void *p) {
  rb_gc_mark(((mg_rb_waits *)p)->engine);
  rb_gc_mark(((mg_rb_waits *)p)->cap);
}

static _Thread_local mg_waits *mine;

static void waits_free(void *p) {
  mg_rb_waits *rw = p;
  if (mine == rw->w) mine = NULL;
  mg_waits_free(rw->w);
  xfree(rw);
}

static size_t waits_memsize(const void *p) { (void)p; return sizeof(mg_rb_waits); }

static const rb_data_type_t waits_type = {
  "Margay::Native::FiberWaits",
  {waits_mark, waits_free, waits_memsize},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE waits_alloc(VALUE klass) {
  mg_rb_waits *rw;
  VALUE obj = TypedData_Make_Struct(klass, mg_rb_waits, &waits_type, rw);
  rw->engine = Qnil;
  rw->cap = Qnil;
  return obj;
}

static mg_rb_waits *waits_get(VALUE self) {
  mg_rb_waits *rw = rb_check_typeddata(self, &waits_type);
  if (!rw->w) rb_raise(rb_eIOError, "fiber waits closed");
  return rw;
}

static ID id_stop;

/* mine: the calling thread's set (a fiber-mode thread's, from #initialize to #close), where its
 * fibers' whole responses go to be sent by its next wait, without the GVL. */

int mg_rb_waits_can_defer(mg_engine *e) {
  return mine && mg_waits_engine(mine) == e && mg_waits_pending(mine) < MG_WAITS_PENDING;
}

void mg_rb_waits_defer(mg_conn *c) {
  c->phase = MG_PH_WRITE; /* its token is stale now, as once a response is handed to the loop */
  mg_waits_defer(mine, c);
}

/* FiberWaits.new(engine, in_flight): a private wait set nesting +engine+'s event set, taking
 * requests under +in_flight+ (an InFlight). Raises NotImplementedError when the engine's
 * backend is not epoll (fiber mode needs it). */
static VALUE waits_initialize(VALUE self, VALUE engine, VALUE in_flight) {
  mg_rb_waits *rw = rb_check_typeddata(self, &waits_type);
  mg_engine *e = mg_rb_engine_core(engine);
  mg_waits_cap *cap = cap_get(in_flight);
  int shared = mg_ev_epoll_fd(e->ev);
  if (shared < 0)
    rb_raise(rb_eNotImpError, "fiber mode needs the epoll event backend (this engine uses %s)", e->ev->ops->name);
  rw->w = mg_waits_new(e, shared, cap);
  if (!rw->w) rb_sys_fail("Margay::Native::FiberWaits#initialize: epoll_create1/eventfd");
  RB_OBJ_WRITE(self, &rw->engine, engine);
  RB_OBJ_WRITE(self, &rw->cap, in_flight);
  mine = rw->w;
  return self;
}

/* #arm(fd, events) -> true, or false when +fd+ cannot be polled (a regular file: ready now).
 * +events+: IO::READABLE | IO::PRIORITY | IO::WRITABLE. One event, then disarmed. */
static VALUE waits_arm(VALUE self, VALUE fd, VALUE events) {
  mg_rb_waits *rw = waits_get(self);
  if (mg_waits_arm(rw->w, NUM2INT(fd), NUM2UINT(events)) == 0) return Qtrue;
  if (errno == EPERM) return Qfalse;
  rb_sys_fail("Margay::Native::FiberWaits#arm: epoll_ctl");
}

/* #disarm(fd): no waiter on +fd+ any more. */
static VALUE waits_disarm(VALUE self, VALUE fd) {
  mg_rb_waits *rw = waits_get(self);
  if (mg_waits_disarm(rw->w, NUM2INT(fd)) != 0) rb_sys_fail("Margay::Native::FiberWaits#disarm: epoll_ctl");
  return Qnil;
}

/* #poke: wake the owning thread's #wait (from any thread). */
static VALUE waits_poke(VALUE self) {
  mg_rb_waits *rw = rb_check_typeddata(self, &waits_type);
  if (rw->w) mg_waits_poke(rw->w);
  return Qnil;
}

static void waits_ubf(void *p) { mg_waits_poke(p); }

/*
 * #wait(timeout_ms, take, events, requests) -> :stop or nil
 * Waits (without the GVL unless +timeout_ms+ is 0) until a fiber's fd is ready, the mailbox is
 * poked, requests are taken, or +timeout_ms+ pass (nil: no limit). +take+: how many requests
 * it may take (0: none; nil: none, and no :stop either: the caller knows), each under a slot of
 * the InFlight claimed here (released by InFlight#leave when the request ends). +events+ (an Array, cleared) receives fd, events pairs, and -1, 0 when
 * the mailbox was poked; +requests+ (cleared) the [token, env] (or [token, env, hijack]:
 * Engine#request_objects) of each request taken. :stop:
 * the engine is stopping and holds no connection (whatever +take+ is, unless nil).
 */
static VALUE waits_wait(VALUE self, VALUE timeout_ms, VALUE take, VALUE out, VALUE requests) {
  mg_rb_waits *rw = waits_get(self);
  mg_rb_engine *rb = mg_rb_engine_get(rw->engine);
  Check_Type(out, T_ARRAY);
  Check_Type(requests, T_ARRAY);
  rb_ary_clear(out);
  rb_ary_clear(requests);
  mg_waits_args a;
  a.w = rw->w;
  a.timeout_ms = NIL_P(timeout_ms) ? -1 : NUM2LL(timeout_ms);
  a.report_stop = !NIL_P(take);
  a.take = NIL_P(take) ? 0 : NUM2INT(take);
  if (a.take < 0) a.take = 0;
  a.result = MG_WAITS_INTR;
  a.nready = 0;
  a.mailbox = 0;
  a.nconns = 0;
  a.look = a.timeout_ms == 0;
  if (a.look) {
    /* It cannot block: look with the GVL; the work found (sending the responses the fibers
     * queued, reading and parsing new requests) is done without it, beside the other threads. */
    mg_loop_hold_gvl(1);
    mg_waits_wait(&a);
    mg_loop_hold_gvl(0);
    if (a.result == MG_WAITS_DONE && ((a.shared && a.take) || mg_waits_pending(rw->w)))
      rb_thread_call_without_gvl2(mg_waits_work, &a, waits_ubf, rw->w);
  }
  else rb_thread_call_without_gvl2(mg_waits_wait, &a, waits_ubf, rw->w);
  for (int i = 0; i < a.nready; i++) {
    rb_ary_push(out, INT2FIX(a.ready[i].fd));
    rb_ary_push(out, INT2FIX(a.ready[i].events));
  }
  if (a.mailbox) {
    rb_ary_push(out, INT2FIX(-1));
    rb_ary_push(out, INT2FIX(0));
  }
  for (int i = 0; i < a.nconns; i++) {
    int state;
    VALUE request = mg_request_build(rb, a.conns[i], &state);
    if (state) {
      /* Only an interrupt gets here (ForceShutdown, Thread#kill: env building raises nothing
       * else); the thread unwinds without starting any of these requests, so every one taken
       * (those already built too) is closed, not left owned, and its slot released. */
      mg_rb_waits *cur = waits_get(self);
      rb_ary_clear(requests);
      for (int j = 0; j < a.nconns; j++) {
        mg_conn_close(&rb->core, a.conns[j]);
        mg_waits_cap_release(cap_get(cur->cap));
      }
      rb_jump_tag(state);
    }
    rb_ary_push(requests, request);
  }
  switch (a.result) {
  case MG_WAITS_STOP: return ID2SYM(id_stop);
  case MG_WAITS_INTR: if (!a.nconns) rb_thread_check_ints(); return Qnil;
  case MG_WAITS_FAIL: errno = a.err; rb_sys_fail("Margay::Native::FiberWaits#wait: epoll");
  default: return Qnil;
  }
}

/* #close: free the set (the thread is done with it). */
static VALUE waits_close(VALUE self) {
  mg_rb_waits *rw = rb_check_typeddata(self, &waits_type);
  if (mine == rw->w) mine = NULL;
  if (rw->w && !mg_rb_engine_core(rw->engine)->closed) mg_waits_finish(rw->w);
  mg_waits_free(rw->w);
  rw->w = NULL;
  return Qnil;
}

void mg_waits_init(VALUE mNative) {
  VALUE k = rb_define_class_under(mNative, "InFlight", rb_cObject);
  rb_define_alloc_func(k, cap_alloc);
  rb_define_method(k, "initialize", cap_initialize, 1);
  rb_define_method(k, "count", cap_count, 0);
  rb_define_method(k, "max", cap_max, 0);
  rb_define_method(k, "leave", cap_leave, 0);
  VALUE c = rb_define_class_under(mNative, "FiberWaits", rb_cObject);
  rb_define_alloc_func(c, waits_alloc);
  id_stop = rb_intern("stop");
  rb_define_method(c, "initialize", waits_initialize, 2);
  rb_define_method(c, "arm", waits_arm, 2);
  rb_define_method(c, "disarm", waits_disarm, 1);
  rb_define_method(c, "poke", waits_poke, 0);
  rb_define_method(c, "wait", waits_wait, 4);
  rb_define_method(c, "close", waits_close, 0);
}
