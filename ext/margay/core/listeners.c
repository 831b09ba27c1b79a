/*
 * core/listeners.c - arming the listening sockets (see core/listeners.h).
 */
#include "core/listeners.h"
#include <sched.h>

int mg_listeners_start(mg_engine *e) {
  for (int i = 0; i < e->nlisteners; i++) {
    if (!e->listeners[i].is_unix) mg_timing_listen(e->listeners[i].fd);
    if (mg_ev_arm(e->ev, e->listeners[i].fd, MG_EV_IN, MG_DATA_LISTENER | (uint64_t)i) != 0) return -1;
  }
  return 0;
}

/* Engine#stop sets stopping before it disarms the listeners, so looking again
 * after arming closes the race with a concurrent stop: either this thread sees
 * the flag and disarms, or its arm came first and the stop's disarm undoes it.
 * Without this a stopping worker could keep accepting for as long as clients
 * keep coming. */
void mg_listeners_arm(mg_engine *e, int li) {
  mg_listeners_enter(e);
  if (!atomic_load(&e->stopping)) {
    int fd = e->listeners[li].fd;
    mg_ev_arm(e->ev, fd, MG_EV_IN, MG_DATA_LISTENER | (uint64_t)li);
    if (atomic_load(&e->stopping)) mg_ev_disarm(e->ev, fd);
  }
  mg_listeners_leave(e);
}

void mg_listeners_resume(mg_engine *e) {
  int paused = atomic_exchange(&e->accept_paused, MG_ACCEPTING);
  if (paused)
    for (int i = 0; i < e->nlisteners; i++) mg_listeners_arm(e, i);
}

void mg_listeners_stop(mg_engine *e) {
  for (int i = 0; i < e->nlisteners; i++) mg_ev_disarm(e->ev, e->listeners[i].fd);
  while (atomic_load(&e->listener_users) > 0) sched_yield(); /* at most one accept4 each */
}
