/*
 * core/engine.c - the engine's resources: sized for the process's descriptor
 * limit, the event backend, the connection table, the wake fd and the locks.
 * Opened and closed by ruby/engine.c (Engine#initialize, #close).
 */
#include "core/engine.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

int mg_engine_size(mg_engine *e) {
  struct rlimit rl;
  int max_fds = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) max_fds = (int)rl.rlim_cur;
  if (max_fds > (1 << 20)) max_fds = 1 << 20;
  if (max_fds < 64) max_fds = 64;
  e->max_fds = max_fds;
  /* keep some descriptors for the app (files, databases, logs) */
  return max_fds > 256 ? max_fds - 64 : max_fds / 2;
}

int mg_engine_open(mg_engine *e, int backend) {
  e->ev = mg_ev_new(backend, e->max_fds);
  if (!e->ev) return MG_OPEN_BACKEND;
  int failed = MG_OPEN_OK;
  e->conns = calloc((size_t)e->max_fds, sizeof *e->conns);
  if (!e->conns) failed = MG_OPEN_TABLE;
  else if (mg_wake_open(&e->wake) != 0) failed = MG_OPEN_WAKE_FD;
  else if (mg_ev_arm_persistent(e->ev, e->wake.rd, MG_DATA_WAKE) != 0) failed = MG_OPEN_ARM_WAKE;
  if (failed) {
    int saved = errno;
    mg_wake_close(&e->wake);
    free(e->conns);
    e->conns = NULL;
    mg_ev_free(e->ev);
    e->ev = NULL;
    errno = saved;
    return failed;
  }
  pthread_mutex_init(&e->sweep_lock, NULL);
  pthread_mutex_init(&e->standby_lock, NULL);
  pthread_mutex_init(&e->stash_lock, NULL);
  pthread_mutex_init(&e->h2_lock, NULL);
  e->h2_head = e->h2_tail = NULL;
  atomic_store(&e->h2_ready, 0);
  e->stash_head = e->stash_len = e->stash_reserved = 0;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->standby_cond, &ca);
  pthread_cond_init(&e->flush_cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&e->flush_lock, NULL);
  e->flush_head = e->flush_tail = NULL;
  e->flush_idle = e->flush_stop = 0;
  atomic_store(&e->flush_running, 0);
  mg_pins_init(&e->pins);
  return MG_OPEN_OK;
}

void mg_engine_close(mg_engine *e) {
  free(e->conns);
  e->conns = NULL;
  if (e->ev) { mg_ev_free(e->ev); e->ev = NULL; }
  mg_wake_close(&e->wake);
  pthread_mutex_destroy(&e->sweep_lock);
  pthread_mutex_destroy(&e->standby_lock);
  pthread_mutex_destroy(&e->stash_lock);
  pthread_mutex_destroy(&e->h2_lock);
  pthread_cond_destroy(&e->standby_cond);
  pthread_mutex_destroy(&e->flush_lock);
  pthread_cond_destroy(&e->flush_cond);
  mg_pins_destroy(&e->pins); /* every segment is gone with its connection */
}
