/*
 * core/loop.c - the event loop, run by every thread that waits in
 * Engine#next_request (leader/follower: no hand-off per request), without the
 * GVL except in mg_loop_try. A thread takes one event, does the I/O it calls
 * for (accept, read and parse, body framing, finishing a queued response,
 * lingering close), and returns to Ruby only with a complete request; the
 * same thread then runs the application.
 */
#include "core/loop.h"
#include "core/accept.h"
#include "core/board.h"
#include "core/h2.h"
#include "core/health.h"
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

/* Set while this thread holds the GVL in the loop (mg_loop_try, a fiber thread's look without
 * waiting): a TLS handshake is not done then (core/tls.h). hand_over: mg_loop_try's, whose
 * thread goes to mg_wait_nogvl next. */
static _Thread_local int gvl_held, deferred, hand_over;

void mg_loop_hold_gvl(int held) { gvl_held = held; deferred = 0; }

int mg_loop_deferred(void) { return deferred; }

/* A handshake's event taken with the GVL in mg_loop_try: the connection, still owned, waits in
 * the engine's handshakes for the next thread without the GVL (mg_wait_nogvl takes them before
 * anything else; mg_loop_try's own thread goes there next). Armed again instead, it would go to
 * the tail of the ready list, where the next thread to reach it may hold the GVL again: under
 * HTTP/2 the threads serve the queued streams first and reach the event set mostly through
 * mg_loop_try, one event per trip, so a client's Finished (and the requests it sent with it,
 * which its clock already counts) could go round the ready list for seconds. */
static void hand_over_handshake(mg_engine *e, mg_conn *c) {
  c->next_handshake = NULL;
  pthread_mutex_lock(&e->stash_lock);
  if (e->handshakes_tail) e->handshakes_tail->next_handshake = c;
  else e->handshakes = c;
  e->handshakes_tail = c;
  atomic_fetch_add(&e->nhandshakes, 1);
  pthread_mutex_unlock(&e->stash_lock);
}

static mg_conn *take_handshake(mg_engine *e) {
  if (atomic_load(&e->nhandshakes) == 0) return NULL;
  pthread_mutex_lock(&e->stash_lock);
  mg_conn *c = e->handshakes;
  if (c) {
    e->handshakes = c->next_handshake;
    if (!e->handshakes) e->handshakes_tail = NULL;
    c->next_handshake = NULL;
    atomic_fetch_sub(&e->nhandshakes, 1);
  }
  pthread_mutex_unlock(&e->stash_lock);
  return c;
}

/* The connection's event came: do what its phase calls for. */
static int handle_conn(mg_engine *e, mg_conn *c) {
  if (mg_conn_handshaking(c)) {
    /* Public-key work takes a millisecond or more: never with the GVL. mg_loop_try hands the
     * connection over to the next thread without it; fiber mode's look arms it again as it
     * waited, ready at once for its next wait without the GVL. */
    if (!gvl_held) return mg_input_handshake(e, c);
    if (hand_over) hand_over_handshake(e, c);
    else mg_conn_arm(e, c, c->tls.want_out ? MG_EV_OUT : MG_EV_IN);
    deferred = 1; /* the caller stops taking events and waits without the GVL */
    return MG_IN_DONE;
  }
  if (c->phase == MG_PH_H2) { mg_h2_event(e, c); return MG_IN_DONE; } /* its requests: e->h2_head */
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

/* Whether the request just framed on +c+ is one its client gave up on: the event that brought it
 * said the peer had closed its sending side, and the request has no body and nothing after it.
 * Such a request is not run, as in Puma (its closed_socket? check before the app): under
 * overload the clients that timed out, and a load generator's connections at the end of a run,
 * would otherwise cost a full app call each for an answer nobody reads, ahead of live clients.
 * Only a fresh read counts, and never on a connection that has pipelined (sent a request before
 * the previous one was framed, or filled a read): a client that pipelines requests and then
 * half-closes still gets every answer, however its bytes were split. */
static int abandoned(const mg_conn *c, uint32_t events, int fresh) {
  return fresh && !c->pipelines && (events & MG_EV_HUP) && c->btotal == 0 && c->rlen == c->req->head_len;
}

/* health_check_path: a GET or HEAD of it is answered here, never handed to the app nor counted
 * in its requests. Returns 1 when +c+ (a complete request) was such a probe: answered, and then
 * either with the loop again or holding its next pipelined request (*again). */
static int answer_probe(mg_engine *e, mg_conn *c, int *again) {
  const mg_request *r = c->req;
  *again = 0;
  if (!mg_health_is_probe(e, c->rbuf + r->method.off, r->method.len, c->rbuf + r->path.off, r->path.len)) return 0;
  atomic_fetch_sub(&e->requests, 1);
  c->keep_alive = c->keep_alive && !mg_health_closing(e) && c->requests + 1 < e->cfg.max_keepalive_requests;
  char buf[512];
  size_t n = mg_health_probe_answer(buf, sizeof buf, mg_health_ready(e), c->head_request, c->keep_alive, c->minor);
  mg_input_consume_head(c);
  mg_out_queue(&c->out, buf, n);
  *again = mg_conn_complete(e, c) && mg_input_continue(e, c);
  return 1;
}

/* Handle +c+ (just claimed for +events+, or taken from the handshakes handed over, events 0):
 * as mg_loop_dispatch. */
static int serve(mg_engine *e, mg_conn *c, uint32_t events, mg_conn **out) {
  mg_conn_reached(e, c);
  int fresh = (c->phase == MG_PH_IDLE && c->rlen == 0) || c->phase == MG_PH_HEAD;
  if (handle_conn(e, c) != MG_IN_READY) return 0;
  assert(mg_conn_owned(c) && c->phase == MG_PH_APP);
  if (abandoned(c, events, fresh)) {
    atomic_fetch_add(&e->abandoned, 1);
    atomic_fetch_sub(&e->requests, 1); /* counted when its head completed; it never ran */
    mg_conn_close(e, c);
    return 0;
  }
  if (e->cfg.health_path[0]) {
    int again;
    while (answer_probe(e, c, &again))
      if (!again) return 0;
  }
  if (!mg_timing_admit(e, c)) return 0;
  begin_turn(c);
  *out = c;
  return 1;
}

int mg_loop_dispatch(mg_engine *e, const mg_ev_event *ev, mg_conn **out) {
  if (ev->data & MG_DATA_WAKE) {
    mg_wake_drain(&e->wake);
    return 0;
  }
  if (ev->data & MG_DATA_LISTENER) {
    mg_conn *c = mg_accept_batch(e, (int)(ev->data & 0xff)); /* its first connection: at once (core/accept.c) */
    return c ? serve(e, c, 0, out) : 0; /* (a listener's events are not the connection's) */
  }
  int fd = (int)(uint32_t)ev->data;
  uint64_t gen = ev->data >> 32;
  if (fd < 0 || fd >= e->max_fds || !e->conns[fd]) return 0;
  mg_conn *c = e->conns[fd];
  uint64_t cur = atomic_load(&c->state);
  if ((mg_state_gen(cur) & MG_GEN_MASK) != (gen & MG_GEN_MASK) || !mg_conn_claim_armed(c, cur)) return 0;
  return serve(e, c, ev->events, out);
}

/* At most this many events beyond the first per wait go to the stash: two waits may be under
 * way at once (the poller's, and a thread's with the GVL in mg_loop_try), and the stash has
 * room for both. */
#define MG_FETCH (MG_STASH / 2)

int mg_loop_take(mg_engine *e, mg_ev_event *ev, int timeout_ms) {
  pthread_mutex_lock(&e->stash_lock);
  if (e->stash_len > 0) {
    *ev = e->stash[e->stash_head];
    e->stash_head = (e->stash_head + 1) % MG_STASH;
    e->stash_len--;
    pthread_mutex_unlock(&e->stash_lock);
    return 1;
  }
  int room = MG_STASH - e->stash_len - e->stash_reserved;
  if (room > MG_FETCH) room = MG_FETCH;
  e->stash_reserved += room;
  pthread_mutex_unlock(&e->stash_lock);
  mg_ev_event evs[1 + MG_FETCH];
  int n = mg_ev_wait_many(e->ev, evs, 1 + room, timeout_ms);
  if (n >= 1) *ev = evs[0];
  pthread_mutex_lock(&e->stash_lock);
  for (int i = 1; i < n; i++) e->stash[(e->stash_head + e->stash_len++) % MG_STASH] = evs[i];
  e->stash_reserved -= room;
  pthread_mutex_unlock(&e->stash_lock);
  return n > 1 ? 1 : n;
}

int mg_loop_stashed(mg_engine *e) {
  pthread_mutex_lock(&e->stash_lock);
  int n = e->stash_len;
  pthread_mutex_unlock(&e->stash_lock);
  return n;
}

void mg_loop_enter(mg_engine *e) {
  atomic_fetch_add(&e->idle_waiters, 1);
  mg_board_waiting(e, 1);
}

void mg_loop_leave(mg_engine *e) {
  mg_board_waiting(e, -1);
  if (atomic_fetch_sub(&e->idle_waiters, 1) == 1) atomic_store(&e->all_busy_since_ms, mg_now_ms());
}

/* At most this many events per mg_loop_try (each was ready, so each is quick). */
#define MG_TRY_EVENTS 64

int mg_loop_try(mg_engine *e, mg_conn **out, mg_h2_req **h2) {
  *out = NULL;
  if ((*h2 = mg_h2_take(e))) return 1;
  if (atomic_load(&e->pollers) || atomic_load(&e->gvl_waiters) || atomic_load(&e->stopping)) return 0;
  mg_loop_enter(e);
  mg_accept_early(e);
  int got = 0;
  int64_t now = mg_now_ms();
  if (now >= atomic_load(&e->next_sweep_ms)) mg_sweep(e, now);
  mg_loop_hold_gvl(1);
  hand_over = 1;
  for (int i = 0; i < MG_TRY_EVENTS && !got && !deferred; i++) {
    mg_ev_event ev;
    if (mg_loop_take(e, &ev, 0) != 1) break;
    /* The wake fd is level-triggered: left unread, it is the blocking wait's to see (a stop,
     * or an interrupted poller). */
    if (ev.data & MG_DATA_WAKE) break;
    got = mg_loop_dispatch(e, &ev, out);
    /* a stream an HTTP/2 connection just completed; not after a handshake handed over: this
     * thread does it first, without the GVL */
    if (!got && !deferred && (*h2 = mg_h2_take(e))) got = 1;
  }
  hand_over = 0;
  mg_loop_hold_gvl(0);
  if (got) atomic_store(&e->visit_us, mg_now_us());
  mg_loop_leave(e);
  return got;
}

void mg_loop_unblock(void *p) {
  mg_wait_args *a = p;
  mg_engine *e = a->e;
  atomic_store(&a->interrupted, 1);
  pthread_mutex_lock(&e->standby_lock);
  pthread_cond_broadcast(&e->standby_cond);
  pthread_mutex_unlock(&e->standby_lock);
  mg_engine_wake_poller(e);
}

/* After this long without a thread coming back to the loop, the watcher sleeps until the next
 * request taken from the poller wakes it (an idle server does not tick every MG_STANDBY_US). */
#define MG_WATCH_QUIET_US 100000

enum { WATCHER_NONE = 0, WATCHER_TICKING = 1, WATCHER_ASLEEP = 2 };

/* Stand by (another thread is the poller) for up to +timeout_ms+. The first standby is the
 * watcher: it looks again every MG_STANDBY_US while requests come and go, so that it takes the
 * poller's place once the threads out with requests stay away (busy in the app); after
 * MG_WATCH_QUIET_US without a request it sleeps like the others. */
static void stand_by(mg_engine *e, mg_wait_args *a, int timeout_ms) {
  pthread_mutex_lock(&e->standby_lock);
  if (!atomic_load(&a->interrupted)) {
    int watcher = atomic_load(&e->watcher) == WATCHER_NONE;
    int64_t wait_us = (int64_t)timeout_ms * 1000;
    if (watcher) {
      int64_t since = mg_now_us() - atomic_load(&e->visit_us);
      int asleep = atomic_load(&e->pollers) && since >= MG_WATCH_QUIET_US;
      atomic_store(&e->watcher, asleep ? WATCHER_ASLEEP : WATCHER_TICKING);
      if (!asleep && wait_us > MG_STANDBY_US) wait_us = MG_STANDBY_US;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (wait_us % 1000000) * 1000;
    ts.tv_sec += (time_t)(wait_us / 1000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    e->standbys++;
    pthread_cond_timedwait(&e->standby_cond, &e->standby_lock, &ts);
    e->standbys--;
    if (watcher) atomic_store(&e->watcher, WATCHER_NONE);
  }
  pthread_mutex_unlock(&e->standby_lock);
}

/* Signal one standby: to take the poller's place (+now+: the poller left without a request, a
 * timeout, a stop, an interrupt), or to become the watcher. */
static void signal_standby(mg_engine *e, int now) {
  if (now) atomic_store(&e->visit_us, 0);
  pthread_mutex_lock(&e->standby_lock);
  if (e->standbys) pthread_cond_signal(&e->standby_cond);
  pthread_mutex_unlock(&e->standby_lock);
}

/* The waiting thread leaves with a request: the standbys give it MG_STANDBY_US; a sleeping
 * watcher starts ticking (read unlocked: a stale look costs one tick). */
static void out_with_request(mg_engine *e, mg_wait_args *a) {
  atomic_store(&e->visit_us, mg_now_us());
  if (atomic_load(&e->watcher) == WATCHER_ASLEEP) signal_standby(e, 0);
  atomic_fetch_add(&e->gvl_waiters, 1);
  a->result = MG_WAIT_READY;
}

void *mg_wait_nogvl(void *p) {
  mg_wait_args *a = p;
  mg_engine *e = a->e;
  int64_t start = mg_now_ms();
  int stood_by = 0;
  mg_loop_enter(e);
  mg_accept_early(e);
  a->conn = NULL;
  a->h2req = NULL;
  for (;;) {
    /* a handshake a thread with the GVL took: first, its client waits (a step is short) */
    mg_conn *hs = take_handshake(e);
    if (hs) {
      if (serve(e, hs, 0, &a->conn)) { out_with_request(e, a); break; } /* a request sent with the Finished */
      continue;
    }
    if (atomic_load(&a->interrupted)) { a->result = MG_WAIT_INTR; break; }
    if ((a->h2req = mg_h2_take(e))) { /* HTTP/2 streams complete first: they were read already */
      atomic_fetch_add(&e->gvl_waiters, 1);
      a->result = MG_WAIT_READY;
      break;
    }
    int stopping = atomic_load(&e->stopping);
    if (stopping && atomic_load(&e->nconns) == 0) {
      mg_engine_wake(e); /* pass it on to the other waiting threads */
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
    /* A thread coming from Ruby takes a free poller's place; one that stood by only when no
     * thread came back to the loop for MG_STANDBY_US (or the poller left without a request). */
    int free_place = 0;
    if (stood_by && mg_now_us() - atomic_load(&e->visit_us) < MG_STANDBY_US) free_place = -1;
    if (free_place != 0 || !atomic_compare_exchange_strong(&e->pollers, &free_place, 1)) {
      stand_by(e, a, timeout);
      stood_by = 1;
      continue;
    }
    if (stood_by) { /* a standby took over: another becomes the watcher */
      stood_by = 0;
      signal_standby(e, 0);
    }
    mg_ev_event ev;
    int n = mg_loop_take(e, &ev, timeout);
    if (n < 0) { atomic_store(&e->pollers, 0); a->result = MG_WAIT_INTR; break; } /* EINTR: Ruby checks interrupts and calls again */
    if (n == 0) { atomic_store(&e->pollers, 0); continue; }
    /* Dispatched out of the poller's place (an accept batch or a read takes a while): a thread
     * coming back takes it meanwhile; standbys wait, this thread is not busy in the app. */
    atomic_store(&e->visit_us, mg_now_us());
    atomic_store(&e->pollers, 0);
    if (mg_loop_dispatch(e, &ev, &a->conn)) { out_with_request(e, a); break; }
  }
  /* Leaving without a request while nobody polls: a standby takes over at once. */
  if (a->result != MG_WAIT_READY && atomic_load(&e->pollers) == 0) signal_standby(e, 1);
  mg_loop_leave(e);
  return NULL;
}
