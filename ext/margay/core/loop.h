/*
 * core/loop.h - the event loop, run by every thread that waits in Engine#next_request: without
 * the GVL, except mg_loop_try.
 */
#ifndef MARGAY_CORE_LOOP_H
#define MARGAY_CORE_LOOP_H

#include <stdint.h>
#include "core/conn.h"

enum mg_wait_result { MG_WAIT_READY = 1, MG_WAIT_TIMEOUT = 2, MG_WAIT_STOP = 3, MG_WAIT_INTR = 4 };

typedef struct {
  mg_engine *e;
  mg_conn *conn;         /* out: the connection with a complete request (MG_WAIT_READY), owned */
  struct mg_h2_req *h2req; /* out, in place of conn: an HTTP/2 stream's request (core/h2.h) */
  int64_t idle_ms;       /* return MG_WAIT_TIMEOUT after this long without work; <0: never */
  int result;
  _Atomic int interrupted; /* set by mg_loop_unblock (Ruby's unblocking function) */
} mg_wait_args;

/* How long the loop may go without a thread coming back to it (a request taken, or a thread
 * entering next_request) before a standing-by thread takes the poller's place: the threads
 * that are out with requests are then really busy in the app (or blocked in it). Shorter
 * than this, the thread that finishes its response finds the next request itself. */
#define MG_STANDBY_US 1000

/* How long a thread may keep the GVL while it takes request after request without blocking
 * (mg_loop_try): then it goes through the blocking wait once, so that a Ruby thread waiting
 * for the GVL (the supervisor's tick) gets it without waiting for Ruby's 100 ms timeslice. */
#define MG_GVL_TURN_US 2000

/* How long a thread may keep serving one connection's pipelined requests back to back: from
 * when it took the connection from the event loop. Beyond it the next request waits its turn
 * behind the other ready connections and the pending accepts (mg_loop_requeue), so a client
 * that pipelines slow requests cannot keep a thread while others wait; a client pipelining
 * fast requests still gets them served without an event-loop round trip for each. */
#define MG_TURN_MS 5

/* Whether this thread's turn on +c+ (which it owns) lasts: it took +c+ from the event loop
 * less than MG_TURN_MS ago, and still holds it in the same generation. */
int mg_loop_turn_left(const mg_conn *c);
/* Give up +c+ (owned, idle, its next request buffered): it goes to the back of the ready
 * list; the thread that reaches it frames the request. */
void mg_loop_requeue(mg_engine *e, mg_conn *c);

/* Take one event from the engine's set: the oldest in the engine's stash, else from the backend
 * (one epoll_wait takes up to MG_STASH / 2 more into the stash, for the next thread). 1, 0
 * (timeout) or -1 (errno). A second wait loop takes its events here, not with mg_ev_wait on
 * e->ev directly: events in the stash are otherwise seen only by the threads in this loop. */
int mg_loop_take(mg_engine *e, mg_ev_event *ev, int timeout_ms);
/* How many events were fetched by a wait and not taken yet. */
int mg_loop_stashed(mg_engine *e);
/* The calling thread counts as waiting for work (the pool's growth policy, the cluster board,
 * accept batches) from mg_loop_enter to mg_loop_leave: while it is in the loop, or in a
 * fiber thread's wait that would take a request. */
void mg_loop_enter(mg_engine *e);
void mg_loop_leave(mg_engine *e);

/* Handle one event taken from the engine's event set (mg_loop_take): a wake, a listener (accept),
 * or a connection (read, frame, finish a write, linger). Returns 1 with *out set to the owned
 * connection when that completed a request (this thread's turn on it begins), else 0. Without
 * the GVL. */
int mg_loop_dispatch(mg_engine *e, const mg_ev_event *ev, mg_conn **out);

/* With the GVL, never blocking: when no other thread is blocked in the event set
 * (it would take what is ready anyway) and none is back with a request waiting for the GVL,
 * take the events that are ready now, up to a bound, until one completes a request. Returns
 * 1 with *out set (owned, its turn begun) or *h2 set (an HTTP/2 stream's request, the other
 * NULL), else 0: nothing ready, or the blocking wait must decide (the engine stops). */
int mg_loop_try(mg_engine *e, mg_conn **out, struct mg_h2_req **h2);

/* Ruby's unblocking function for mg_wait_nogvl (rb_thread_call_without_gvl2's ubf, with the
 * same mg_wait_args): makes that thread return MG_WAIT_INTR, standing by or polling. */
void mg_loop_unblock(void *args);

/* Whether the calling thread holds the GVL while it dispatches (mg_loop_try sets it itself;
 * fiber mode's look without waiting, ruby/waits.c, around mg_waits_wait): TLS handshakes are
 * then left to a thread without it. */
void mg_loop_hold_gvl(int held);
/* Whether, since mg_loop_hold_gvl(1), this thread left a TLS handshake to a thread without the
 * GVL (re-armed, it is ready again at once: taking more events would take it again). */
int mg_loop_deferred(void);

/* A thread back from mg_wait_nogvl with MG_WAIT_READY holds the GVL again. */
static inline void mg_loop_got_gvl(mg_engine *e) { atomic_fetch_sub(&e->gvl_waiters, 1); }

/* Wait for events and handle them until a request is complete, the engine stops, +idle_ms+
 * pass, or a signal interrupts (for rb_thread_call_without_gvl2: +args+ is an mg_wait_args). */
void *mg_wait_nogvl(void *args);

#endif
