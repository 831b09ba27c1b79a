/*
 * core/engine.c - the engine's resources: sized for the process's descriptor
 * limit, the event backend, the connection table, the wake fd and the locks.
 * Opened and closed by ruby/engine.c (Engine#initialize, #close).
 */
#include "core/engine.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#ifdef HAVE_SYS_EVENTFD_H
#include <sys/eventfd.h>
#endif

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

/* An eventfd (both ends the same), or a non-blocking pipe. */
static int open_wake_fd(int fds[2]) {
#ifdef HAVE_EVENTFD
  fds[0] = fds[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fds[0] >= 0) return 0;
#endif
  if (pipe(fds) != 0) return -1;
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  }
  return 0;
}

static void close_wake_fd(int fds[2]) {
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0 && fds[1] != fds[0]) close(fds[1]);
  fds[0] = fds[1] = -1;
}

int mg_engine_open(mg_engine *e, int backend) {
  e->ev = mg_ev_new(backend, e->max_fds);
  if (!e->ev) return MG_OPEN_BACKEND;
  int failed = MG_OPEN_OK;
  e->conns = calloc((size_t)e->max_fds, sizeof *e->conns);
  if (!e->conns) failed = MG_OPEN_TABLE;
  else if (open_wake_fd(e->wake_fd) != 0) failed = MG_OPEN_WAKE_FD;
  else if (mg_ev_arm_persistent(e->ev, e->wake_fd[0], MG_DATA_WAKE) != 0) failed = MG_OPEN_ARM_WAKE;
  if (failed) {
    int saved = errno;
    close_wake_fd(e->wake_fd);
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
  e->stash_head = e->stash_len = e->stash_reserved = 0;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->standby_cond, &ca);
  pthread_condattr_destroy(&ca);
  mg_pins_init(&e->pins);
  return MG_OPEN_OK;
}

void mg_engine_close(mg_engine *e) {
  free(e->conns);
  e->conns = NULL;
  if (e->ev) { mg_ev_free(e->ev); e->ev = NULL; }
  close_wake_fd(e->wake_fd);
  pthread_mutex_destroy(&e->sweep_lock);
  pthread_mutex_destroy(&e->standby_lock);
  pthread_mutex_destroy(&e->stash_lock);
  pthread_cond_destroy(&e->standby_cond);
  mg_pins_destroy(&e->pins); /* every segment is gone with its connection */
}
