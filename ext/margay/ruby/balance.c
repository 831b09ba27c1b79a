/*
 * ruby/balance.c - the Engine's cluster API: what a cluster worker asks of
 * its engine to balance keep-alive connections with the other workers (with
 * the GVL; the work is core/balance.c and core/accept.c). A worker publishes
 * its counters on the master's IdleBoard, asks how loaded the others are,
 * detaches idle connections for the master to forward, and adopts those
 * forwarded to it.
 */
#include "ruby/balance.h"
#include "core/accept.h"
#include "core/balance.h"
#include "core/board.h"
#include "ruby/board.h"
#include "ruby/engine.h"

/* Engine#detach_idle(max, pending_only) -> [[fd, kept_alive], ...]: idle
 * connections (see mg_balance_detach_idle) leave the engine with their sockets open
 * (a saturated cluster worker hands them to another worker; nothing is lost:
 * unread bytes wait in the kernel). pending_only: just those whose client
 * has sent a request this engine has not read yet. */
static VALUE engine_detach_idle(VALUE self, VALUE max, VALUE pending_only) {
  mg_engine *e = mg_rb_engine_core(self);
  int cap = NUM2INT(max);
  if (cap <= 0) return rb_ary_new();
  if (cap > 1024) cap = 1024;
  int fds[1024], kept[1024];
  int n = mg_balance_detach_idle(e, fds, kept, cap, RTEST(pending_only));
  VALUE out = rb_ary_new_capa(n);
  for (int i = 0; i < n; i++) rb_ary_push(out, rb_assoc_new(INT2FIX(fds[i]), kept[i] ? Qtrue : Qfalse));
  return out;
}

/* Engine#adopt(fd, kept_alive) -> true, or false (the fd is closed): serve an
 * idle connection handed over by another worker (the engine owns the fd from
 * now on): one that served a request (kept_alive) or a new one that has not
 * sent its first yet. */
static VALUE engine_adopt(VALUE self, VALUE fd, VALUE kept_alive) {
  mg_engine *e = mg_rb_engine_core(self);
  return mg_accept_adopted(e, NUM2INT(fd), RTEST(kept_alive)) == 0 ? Qtrue : Qfalse;
}

/* Engine#saturated_ms: how long no thread has been waiting for work (0 while one is). */
static VALUE engine_saturated_ms(VALUE self) {
  mg_engine *e = mg_rb_engine_core(self);
  if (atomic_load(&e->idle_waiters) > 0) return INT2FIX(0);
  int64_t d = mg_now_ms() - atomic_load(&e->all_busy_since_ms);
  return LL2NUM(d < 0 ? 0 : d);
}

/* Engine#starved?: whether requests wait for a thread while none waits (mg_accept_starved): a
 * thread that just took a request asks, for the pool's on-demand growth. */
static VALUE engine_starved(VALUE self) {
  return mg_accept_starved(mg_rb_engine_core(self)) ? Qtrue : Qfalse;
}

/* Engine#publish_idle(board, index): count this engine's waiting threads and
 * connections into slot +index+ of the cluster's IdleBoard (ruby/board.c), and its readiness;
 * from now on its health answers are the cluster's (core/health.h). Call before #start. */
static VALUE engine_publish_idle(VALUE self, VALUE board, VALUE index) {
  mg_rb_engine *rb = mg_rb_engine_get(self);
  mg_engine *e = &rb->core;
  int n, i = NUM2INT(index);
  _Atomic int *slots = mg_board_slots(board, &n);
  if (!slots || i < 0 || i >= n) rb_raise(rb_eIndexError, "no slot %d on the board", i);
  atomic_store(mg_board_cell(slots, n, MG_BOARD_WAITING, i), atomic_load(&e->idle_waiters));
  atomic_store(mg_board_cell(slots, n, MG_BOARD_WAITING_SINCE, i), (int)(uint32_t)mg_now_ms());
  atomic_store(mg_board_cell(slots, n, MG_BOARD_CONNS, i), atomic_load(&e->nconns));
  atomic_store(mg_board_cell(slots, n, MG_BOARD_UNREAD, i), atomic_load(&e->unread));
  atomic_store(mg_board_cell(slots, n, MG_BOARD_READY, i), 0); /* ready once #start is called */
  atomic_store(&e->metrics, mg_board_metrics(board));
  rb->board = board; /* marked with the engine */
  e->board_n = n;
  e->board_index = i;
  e->board_slots = slots;
  return self;
}

/* Engine#handoff_quota: how many idle keep-alive connections this worker
 * should hand to less loaded workers (0 without a board). */
static VALUE engine_handoff_quota(VALUE self) {
  return INT2NUM(mg_board_handoff_quota(mg_rb_engine_core(self)));
}

/* Engine#others_waiting: how many threads the other workers of the cluster
 * have waiting for work, counting only workers that have had one waiting for 2 ms or more
 * (mg_board_others_waiting; 0 when there is no board). */
static VALUE engine_others_waiting(VALUE self) {
  return INT2NUM(mg_board_others_waiting(mg_rb_engine_core(self)));
}

void mg_balance_init(VALUE cEngine) {
  rb_define_method(cEngine, "detach_idle", engine_detach_idle, 2);
  rb_define_method(cEngine, "adopt", engine_adopt, 2);
  rb_define_method(cEngine, "saturated_ms", engine_saturated_ms, 0);
  rb_define_method(cEngine, "starved?", engine_starved, 0);
  rb_define_method(cEngine, "publish_idle", engine_publish_idle, 2);
  rb_define_method(cEngine, "others_waiting", engine_others_waiting, 0);
  rb_define_method(cEngine, "handoff_quota", engine_handoff_quota, 0);
}
