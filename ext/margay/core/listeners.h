/*
 * core/listeners.h - when the listening sockets are armed: at start, after each accept batch,
 * paused at the connection limit or when out of descriptors, resumed, and disarmed for good by
 * a stop. Every use of a listener fd by the loop happens between mg_listeners_enter and
 * mg_listeners_leave, so that a stop can wait until none is under way.
 */
#ifndef MARGAY_CORE_LISTENERS_H
#define MARGAY_CORE_LISTENERS_H

#include <stdatomic.h>
#include "core/engine.h"

/* The counter goes up before `stopping` is looked at, and mg_listeners_stop sets
 * `stopping` before it looks at the counter. */
static inline void mg_listeners_enter(mg_engine *e) { atomic_fetch_add(&e->listener_users, 1); }
static inline void mg_listeners_leave(mg_engine *e) { atomic_fetch_sub(&e->listener_users, 1); }

/* Arm every listener for the first time. 0, or -1 with errno. */
int mg_listeners_start(mg_engine *e);
/* Arm listener +li+ again, unless the engine is stopping. */
void mg_listeners_arm(mg_engine *e, int li);
/* Arm every listener again if accepting was paused. */
void mg_listeners_resume(mg_engine *e);
/* After `stopping` was set: disarm every listener and wait until no loop thread uses one; then
 * no loop thread touches a listener fd again and Ruby may close them. */
void mg_listeners_stop(mg_engine *e);

#endif
