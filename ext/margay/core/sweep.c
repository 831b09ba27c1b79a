/*
 * core/sweep.c - timeouts (see core/sweep.h). Runs from the loop: without the GVL, or in
 * mg_loop_try with it.
 */
#include "core/sweep.h"
#include "core/conn.h"
#include "core/h2.h"
#include "core/input.h"
#include "core/listeners.h"
#include <pthread.h>

#define RECLAIM_PER_SWEEP 64

static void expire(mg_engine *e, mg_conn *c) {
  switch (c->phase) {
  case MG_PH_HEAD:
  case MG_PH_BODY:
    mg_input_error(e, c, 408);
    break;
  default: /* idle keep-alive, stalled writer, lingering close */
    mg_conn_close(e, c);
  }
}

void mg_sweep(mg_engine *e, int64_t now) {
  if (pthread_mutex_trylock(&e->sweep_lock) != 0) return;
  atomic_store(&e->next_sweep_ms, now + MG_SWEEP_INTERVAL_MS);
  int stopping = atomic_load(&e->stopping);
  int hw = atomic_load(&e->hiwater);
  /* At the connection limit, make room for new clients by closing idle
   * connections (see below). */
  int reclaim = atomic_load(&e->accept_paused) == MG_PAUSED_AT_LIMIT ? RECLAIM_PER_SWEEP : 0;
  for (int fd = 0; fd < hw; fd++) {
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_ARMED) continue;
    /* (idle with bytes buffered, or with records its TLS session read ahead: requeued with a
     * pipelined request, core/loop.h, or armed to be served at once, mg_conn_arm; it is
     * served, also on stop, and expires by its deadline only) */
    int kept_alive = c->phase == MG_PH_IDLE && c->requests > 0 && c->rlen == 0 && !c->tls_held;
    /* connections that have sent nothing for 2 s since they were accepted (a
     * flood's, a browser's speculative preconnect) */
    int silent = c->phase == MG_PH_IDLE && c->requests == 0 && c->rlen == 0 && !c->tls_held &&
                 now - (c->deadline_ms - e->cfg.header_timeout_ms) >= 2000;
    /* On stop, idle keep-alive connections close at once; a connection that was
     * accepted but has not sent its first request yet is still answered if it
     * sends one within 2 s (it need not hold up the stop until header_timeout).
     * Not one whose client's request already waits in the kernel (its event is
     * on its way, or queued behind others): that request is in flight, it is
     * served (its response says connection: close). Closed, its client would
     * see a reset; a balancer that does not retry answers its client 502. */
    int idle_stop = stopping && (kept_alive || silent) && !mg_conn_has_pending_input(c);
    int forced = stopping == MG_STOP_FORCED;
    /* an HTTP/2 connection on a graceful stop: its GOAWAY, then it closes once its streams are
     * answered (core/h2.h) */
    int h2_stop = stopping && !forced && c->phase == MG_PH_H2 && !c->h2_goaway;
    /* at the limit: keep-alive connections idle for 1 s, and silent ones */
    int reclaimed = reclaim > 0 && ((kept_alive && now - (c->deadline_ms - e->cfg.keepalive_timeout_ms) >= 1000) || silent);
    if (!idle_stop && !forced && !reclaimed && !h2_stop && !(c->deadline_ms && now >= c->deadline_ms)) continue;
    uint64_t owned = (mg_state_gen(s) << 8) | MG_OWNED;
    if (!atomic_compare_exchange_strong(&c->state, &s, owned)) continue;
    if (reclaimed) reclaim--;
    if (forced || idle_stop || reclaimed) mg_conn_close(e, c);
    else if (h2_stop && !(c->deadline_ms && now >= c->deadline_ms)) mg_h2_event(e, c);
    else expire(e, c);
  }
  if (atomic_load(&e->accept_paused) == MG_PAUSED_NO_FDS && now >= atomic_load(&e->resume_accept_ms)) mg_listeners_resume(e);
  pthread_mutex_unlock(&e->sweep_lock);
}
