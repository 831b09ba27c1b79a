/*
 * core/loop.h - the event loop, run without the GVL by every thread that waits in
 * Engine#next_request.
 */
#ifndef MARGAY_CORE_LOOP_H
#define MARGAY_CORE_LOOP_H

#include <stdint.h>
#include "core/conn.h"

enum mg_wait_result { MG_WAIT_READY = 1, MG_WAIT_TIMEOUT = 2, MG_WAIT_STOP = 3, MG_WAIT_INTR = 4 };

typedef struct {
  mg_engine *e;
  mg_conn *conn;         /* out: the connection with a complete request (MG_WAIT_READY), owned */
  int64_t idle_ms;       /* return MG_WAIT_TIMEOUT after this long without work; <0: never */
  int result;
} mg_wait_args;

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

/* Handle one event taken from the engine's event set (mg_ev_wait): a wake, a listener (accept),
 * or a connection (read, frame, finish a write, linger). Returns 1 with *out set to the owned
 * connection when that completed a request (this thread's turn on it begins), else 0. Without
 * the GVL. */
int mg_loop_dispatch(mg_engine *e, const mg_ev_event *ev, mg_conn **out);

/* Wait for events and handle them until a request is complete, the engine stops, +idle_ms+
 * pass, or a signal interrupts (for rb_thread_call_without_gvl2: +args+ is an mg_wait_args). */
void *mg_wait_nogvl(void *args);

#endif
