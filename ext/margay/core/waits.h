/*
 * core/waits.h - a fiber-mode thread's private wait set.
 *
 * Ruby fibers cannot move between threads, so each fiber-mode pool thread waits in an epoll
 * set of its own. It holds three kinds of registration:
 *   - the engine's shared epoll set, nested and level-triggered: "the loop has work" (a
 *     connection or listener is ready). Enabled only while the thread may take a request;
 *   - the fds its fibers wait on, one-shot, tagged with the fd;
 *   - a mailbox (an eventfd): the one cross-thread case, a fiber of this thread unblocked from
 *     another thread (or a wait to interrupt).
 * One wait without the GVL returns a batch: the fds that became ready, whether the mailbox was
 * poked, and the complete requests taken from the shared set with mg_loop_dispatch (no more
 * than the thread has room for).
 * No Ruby here: core/ never includes ruby.h.
 */
#ifndef MARGAY_CORE_WAITS_H
#define MARGAY_CORE_WAITS_H

#include <stdatomic.h>
#include <stdint.h>
#include "core/conn.h"

/* The events of a fiber's wait, with the values of Ruby's IO::READABLE, PRIORITY and WRITABLE;
 * MG_WAITS_ERR in a result: an error or hang-up (every awaited event is then reported). */
enum { MG_WAITS_IN = 1, MG_WAITS_PRI = 2, MG_WAITS_OUT = 4, MG_WAITS_ERR = 8 };
/* At most this many fd events, and requests, per wait. */
#define MG_WAITS_BATCH 64
#define MG_WAITS_TAKE 16
/* At most this many responses queued by a thread's fibers for its next wait to send. */
#define MG_WAITS_PENDING 64

typedef struct mg_waits mg_waits;

/* The process's requests in flight in fiber mode, against max_in_flight: a slot is claimed
 * here (atomically, shared by every thread's set) before a request is taken, and released when
 * the request's fiber ends (mg_waits_cap_release), so several threads never pass the cap. */
typedef struct {
  _Atomic int count;
  int max;
} mg_waits_cap;

/* Claim one slot: 1, or 0 when count is at max. */
int mg_waits_cap_claim(mg_waits_cap *cap);
/* Release one slot. Returns 1 when the cap was full before (a thread may be parked for room). */
int mg_waits_cap_release(mg_waits_cap *cap);

typedef struct {
  int fd;
  uint32_t events; /* MG_WAITS_* */
} mg_waits_ready;

enum { MG_WAITS_DONE = 0, MG_WAITS_STOP = 1, MG_WAITS_INTR = 2, MG_WAITS_FAIL = 3 };

typedef struct {
  mg_waits *w;
  int64_t timeout_ms; /* in: return after this long without an event; <0: no limit of its own */
  int take;           /* in: how many requests it may take from the shared set (0: none; at most
                         MG_WAITS_TAKE), each claiming a slot of the cap first */
  int report_stop;    /* in: return MG_WAITS_STOP when the engine stops (whatever take is) */
  int look;           /* in: with the GVL (timeout 0): neither send the pending responses nor take
                         requests, only say whether the shared set has work (shared); then
                         mg_waits_work without the GVL does both */
  int shared;         /* out (look): the shared set has work for a thread that may take */
  int result;         /* out: MG_WAITS_DONE, STOP (stopping, no connection left: when report_stop),
                         INTR (a signal: Ruby checks interrupts), FAIL (errno in err) */
  int err;
  int mailbox;        /* out: the mailbox was poked */
  int nready;         /* out */
  mg_waits_ready ready[MG_WAITS_BATCH];
  int nconns;         /* out */
  mg_conn *conns[MG_WAITS_TAKE]; /* out: connections with a complete request, owned by this thread */
} mg_waits_args;

/* A private set for a thread of engine +e+, nesting +shared_fd+ (mg_ev_epoll_fd), taking
 * requests under +cap+ (shared by the process's sets, outlives them). NULL with errno set on
 * failure (ENOSYS: no epoll). */
mg_waits *mg_waits_new(mg_engine *e, int shared_fd, mg_waits_cap *cap);
void mg_waits_free(mg_waits *w);
/* Wake this fd's waiter once for +events+ (MG_WAITS_IN|PRI|OUT). 0, or -1 with errno (EPERM:
 * the fd cannot be polled, a regular file: it is always ready). */
int mg_waits_arm(mg_waits *w, int fd, uint32_t events);
/* Forget +fd+ (its last waiter gave up). */
int mg_waits_disarm(mg_waits *w, int fd);
/* Poke the mailbox: from any thread, with or without the GVL (also the wait's unblock function). */
void mg_waits_poke(mg_waits *w);
/* Wait as +args+ (an mg_waits_args) says: without the GVL, or with it when it cannot block
 * (timeout_ms 0, look set). Sends the pending responses first (unless look). */
void *mg_waits_wait(void *args);
/* After a look (mg_waits_wait with look set), without the GVL: send the pending responses, then
 * take requests when the look found the shared set ready (args->shared) and args->take allows. */
void *mg_waits_work(void *args);
/* Queue connection +c+ (owned, its whole response queued) to be completed by the thread's next
 * wait, without the GVL (mg_conn_complete; a pipelined request is requeued to the loop).
 * 0 when the list is full: the caller completes it itself. */
int mg_waits_defer(mg_waits *w, mg_conn *c);
/* The engine the set belongs to. */
mg_engine *mg_waits_engine(const mg_waits *w);
/* How many connections wait in the pending list. */
int mg_waits_pending(const mg_waits *w);
/* Complete every pending connection now (a wait does it; also when the thread is done). */
void mg_waits_finish(mg_waits *w);

#endif
