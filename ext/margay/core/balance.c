/*
 * core/balance.c - keep-alive balancing, the engine's side (see
 * core/balance.h). The Ruby side is Engine#detach_idle, #adopt,
 * #handoff_quota and #others_waiting (ruby/balance.c) and the cluster's
 * balancer, which moves the detached sockets between workers.
 */
#include "core/balance.h"
#include "core/conn.h"

/* Idle connections mg_balance_detach_idle(pending_only) looks into per call (a
 * MSG_PEEK and, if nothing waits, an epoll_ctl each): it runs every 5 ms while
 * the worker is saturated, so a worker holding thousands of idle connections
 * looks at them in turns (from where the previous call stopped) instead of
 * spending its time on them. */
#define PEEK_PER_CALL 64

/* Idle: keep-alive connections waiting for their next request and new ones
 * that have not sent their first (nothing buffered either way). Each leaves
 * the engine with its fd still open; its new worker runs the keep-alive
 * timeout, or the header timeout for a new one. */
int mg_balance_detach_idle(mg_engine *e, int *out, int *kept_alive, int max, int pending_only) {
  int n = 0, peeked = 0;
  int hw = atomic_load(&e->hiwater);
  int start = pending_only && hw > 0 ? e->detach_cursor % hw : 0;
  for (int i = 0; i < hw && n < max && peeked < PEEK_PER_CALL; i++) {
    int fd = (start + i) % hw;
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_ARMED || c->phase != MG_PH_IDLE || c->rlen != 0 || !mg_conn_movable(c)) continue;
    uint64_t owned = (mg_state_gen(s) << 8) | MG_OWNED;
    if (!atomic_compare_exchange_strong(&c->state, &s, owned)) continue;
    if (pending_only) {
      peeked++;
      e->detach_cursor = fd + 1;
      if (!mg_conn_has_pending_input(c)) {
        mg_conn_arm(e, c, MG_EV_IN); /* not now: back to the loop */
        continue;
      }
    }
    kept_alive[n] = c->requests > 0;
    out[n++] = mg_conn_forget(e, c);
  }
  return n;
}
