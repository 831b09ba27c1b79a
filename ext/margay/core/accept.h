/*
 * core/accept.h - taking in client sockets: the batches a listener has queued (without the
 * GVL), and idle connections another worker hands over (Engine#adopt).
 */
#ifndef MARGAY_CORE_ACCEPT_H
#define MARGAY_CORE_ACCEPT_H

#include "core/engine.h"

struct mg_conn;
/* Accept what listener +li+ has queued (its event came), then arm it again. Returns the first
 * connection accepted, owned by the caller (who handles it as if its event had come), or NULL
 * (none, another thread took it, or a cluster worker holds older unread clients: then it
 * waits its turn in the ready list). */
struct mg_conn *mg_accept_batch(mg_engine *e, int li);
/* A cluster worker's share of its TCP listeners' backlogs, taken by a thread back from a
 * request before it looks for work (at most every millisecond per worker; nothing in a single
 * process). */
void mg_accept_early(mg_engine *e);
/* Whether requests wait for a thread while none waits: clients taken in and not reached yet,
 * events fetched and not handled yet, or clients in a TCP listener's backlog (the pool's
 * on-demand growth asks; with the GVL or without). */
int mg_accept_starved(mg_engine *e);
/* Serve connected socket +fd+ handed over by another worker (the engine owns it from now on):
 * one that served a request (+kept_alive+) or a new one. 0, or -1 (the fd is closed). */
int mg_accept_adopted(mg_engine *e, int fd, int kept_alive);

#endif
