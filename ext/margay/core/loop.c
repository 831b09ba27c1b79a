/*
 * core/loop.c - the event loop, run without the GVL by every thread that
 * waits in Engine#next_request (leader/follower: no hand-off per request). A
 * thread takes one event, does the I/O it calls for (accept, read and parse,
 * body framing, finishing a queued response, lingering close), and returns to
 * Ruby only with a complete request; the same thread then runs the
 * application.
 */
#include "core/loop.h"
#include "core/accept.h"
#include "core/board.h"
#include "core/input.h"
#include "core/sweep.h"
#include <unistd.h>

/* The connection this thread last took from the event loop, and when: its turn. While the turn
 * lasts (MG_TURN_MS) the thread serves the connection's pipelined requests back to back;
 * after that each one goes through the event loop (mg_loop_requeue). Thread-local: a turn
 * belongs to the thread that took the connection (every thread that runs the loop is a Ruby
 * thread, one native thread each). */
static _Thread_local struct {
  const mg_conn *c;
  uint64_t gen;
  int64_t since_ms;
} turn;

static void begin_turn(mg_conn *c) {
  turn.c = c;
  turn.gen = mg_state_gen(atomic_load(&c->state));
  turn.since_ms = mg_now_ms();
}

int mg_loop_turn_left(const mg_conn *c) {
  return turn.c == c && turn.gen == mg_state_gen(atomic_load(&c->state)) && mg_now_ms() - turn.since_ms < MG_TURN_MS;
}

/* Armed for writing, which a socket that just took a whole response is at once: the kernel
 * queues the event at the tail of the ready list, behind every connection and listener that
 * became ready before, and whichever thread reaches it frames the buffered request
 * (handle_conn). A client that does not read its responses is not served more until it does
 * (its socket is not writable then); write_timeout bounds that wait. */
void mg_loop_requeue(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c) && c->phase == MG_PH_IDLE && c->rlen > 0);
  c->deadline_ms = mg_now_ms() + e->cfg.write_timeout_ms;
  mg_conn_arm(e, c, MG_EV_OUT);
}

/* The connection's event came: do what its phase calls for. */
static int handle_conn(mg_engine *e, mg_conn *c) {
  switch (c->phase) {
  case MG_PH_WRITE:
    c->deadline_ms = mg_now_ms() + e->cfg.write_timeout_ms;
    /* the rest of the response, then a pipelined request if one is buffered */
    return mg_conn_complete(e, c) && mg_input_continue(e, c) ? MG_IN_READY : MG_IN_DONE;
  case MG_PH_LINGER:
    mg_conn_linger(e, c);
    return MG_IN_DONE;
  case MG_PH_IDLE:
    /* Idle with bytes buffered: only a connection requeued with its next pipelined request
     * (mg_loop_requeue; input.c leaves the idle phase as soon as it frames a byte). */
    if (c->rlen > 0) return mg_input_continue(e, c) ? MG_IN_READY : MG_IN_DONE;
    return mg_input_read(e, c);
  default:
    return mg_input_read(e, c);
  }
}

int mg_loop_dispatch(mg_engine *e, const mg_ev_event *ev, mg_conn **out) {
  if (ev->data & MG_DATA_WAKE) {
    uint64_t v;
    ssize_t r = read(e->wake_fd[0], &v, sizeof v);
    (void)r;
    return 0;
  }
  mg_conn *c;
  if (ev->data & MG_DATA_LISTENER) {
    c = mg_accept_batch(e, (int)(ev->data & 0xff)); /* its first connection: at once (core/accept.c) */
    if (!c) return 0;
  } else {
    int fd = (int)(uint32_t)ev->data;
    uint64_t gen = ev->data >> 32;
    if (fd < 0 || fd >= e->max_fds || !e->conns[fd]) return 0;
    c = e->conns[fd];
    uint64_t cur = atomic_load(&c->state);
    int st = mg_state_st(cur);
    if ((mg_state_gen(cur) & MG_GEN_MASK) != (gen & MG_GEN_MASK) || (st != MG_ARMED && st != MG_ARMING)) return 0;
    uint64_t expect = cur;
    if (!atomic_compare_exchange_strong(&c->state, &expect, (mg_state_gen(cur) << 8) | MG_OWNED)) return 0;
  }
  if (handle_conn(e, c) != MG_IN_READY) return 0;
  assert(mg_conn_owned(c) && c->phase == MG_PH_APP);
  begin_turn(c);
  *out = c;
  return 1;
}

void *mg_wait_nogvl(void *p) {
  mg_wait_args *a = p;
  mg_engine *e = a->e;
  int64_t start = mg_now_ms();
  atomic_fetch_add(&e->idle_waiters, 1);
  mg_board_count(e, MG_BOARD_WAITING, 1);
  a->conn = NULL;
  for (;;) {
    int stopping = atomic_load(&e->stopping);
    if (stopping && atomic_load(&e->nconns) == 0) {
      mg_engine_wake(e); /* pass it on to the next waiting thread */
      a->result = MG_WAIT_STOP;
      break;
    }
    int64_t now = mg_now_ms();
    if (now >= atomic_load(&e->next_sweep_ms)) mg_sweep(e, now);
    int timeout = MG_SWEEP_INTERVAL_MS;
    if (a->idle_ms >= 0) {
      int64_t left = start + a->idle_ms - now;
      if (left <= 0) { a->result = MG_WAIT_TIMEOUT; break; }
      if (left < timeout) timeout = (int)left;
    }
    mg_ev_event ev;
    int n = mg_ev_wait(e->ev, &ev, timeout);
    if (n < 0) { a->result = MG_WAIT_INTR; break; } /* EINTR: Ruby checks interrupts and calls again */
    if (n == 0) continue;
    if (mg_loop_dispatch(e, &ev, &a->conn)) { a->result = MG_WAIT_READY; break; }
  }
  mg_board_count(e, MG_BOARD_WAITING, -1);
  if (atomic_fetch_sub(&e->idle_waiters, 1) == 1) atomic_store(&e->all_busy_since_ms, mg_now_ms());
  return NULL;
}
