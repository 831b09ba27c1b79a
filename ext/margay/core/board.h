/*
 * core/board.h - the cluster's board of shared counters (Margay::Native::IdleBoard, made by the
 * master in memory every worker shares) as the engine sees it: its layout, the engine counting
 * its own waiting threads and connections into its slot, and what the others' counters say.
 */
#ifndef MARGAY_CORE_BOARD_H
#define MARGAY_CORE_BOARD_H

#include <stdatomic.h>
#include "core/engine.h"

/* The board's rows of counters, one counter per worker index in each (READY: 1 while the
 * worker's engine serves and neither drains nor stops; BUSY: its app threads in a request;
 * UNREAD: its clients taken in that no thread reached yet; BACKLOG and OLDEST_MS: its requests
 * waiting for a thread and the longest wait among them in ms, as of its last look, which its
 * main thread takes every 100 ms; WAITING_SINCE: the engine's clock, in ms modulo 2^32, when its
 * WAITING count last rose from 0), then one cell for the whole cluster: its drain flag, which
 * the master sets. */
enum { MG_BOARD_WAITING, MG_BOARD_CONNS, MG_BOARD_READY, MG_BOARD_BUSY, MG_BOARD_UNREAD, MG_BOARD_BACKLOG,
       MG_BOARD_OLDEST_MS, MG_BOARD_WAITING_SINCE, MG_BOARD_ROWS };

/* How long a worker must have had a thread waiting, without a break, before the others count
 * it as free (mg_board_others_waiting), in ms: under load each thread passes through the event
 * loop between two requests, for microseconds, and such a pass is no free thread. 2: at least
 * one whole millisecond on the ms clock. */
#define MG_BOARD_FREE_AFTER_MS 2

/* The ints a board of +n+ slots holds. */
static inline size_t mg_board_cells(int n) { return (size_t)MG_BOARD_ROWS * (size_t)n + 1; }

/* The counter of worker +i+ in +row+ on a board of +n+ slots (the one place
 * that knows the layout: row after row, then the drain flag). */
static inline _Atomic int *mg_board_cell(_Atomic int *slots, int n, int row, int i) { return &slots[row * n + i]; }
static inline _Atomic int *mg_board_drain_flag(_Atomic int *slots, int n) { return &slots[MG_BOARD_ROWS * n]; }

/* Set this worker's READY cell (nothing without a board). */
static inline void mg_board_ready(mg_engine *e, int ready) {
  if (e->board_slots) atomic_store(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_READY, e->board_index), ready);
}

/* Set this worker's counter in +row+ (nothing without a board). */
static inline void mg_board_set(mg_engine *e, int row, int value) {
  if (e->board_slots) atomic_store(mg_board_cell(e->board_slots, e->board_n, row, e->board_index), value);
}

/* Add +delta+ to this worker's counter in +row+ (nothing without a board). */
static inline void mg_board_count(mg_engine *e, int row, int delta) {
  if (e->board_slots) atomic_fetch_add(mg_board_cell(e->board_slots, e->board_n, row, e->board_index), delta);
}

/* A thread of this worker starts or stops waiting for work (nothing without a board): the
 * WAITING count, and when it rose from 0 (only the thread that raised it writes the time, before
 * it can leave again). */
static inline void mg_board_waiting(mg_engine *e, int delta) {
  if (!e->board_slots) return;
  int n = e->board_n, i = e->board_index;
  if (atomic_fetch_add(mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, i), delta) <= 0 && delta > 0)
    atomic_store(mg_board_cell(e->board_slots, n, MG_BOARD_WAITING_SINCE, i), (int)(uint32_t)mg_now_ms());
}

/* How many waiting threads the other workers count, of those that have had a thread waiting
 * for MG_BOARD_FREE_AFTER_MS or longer (0 without a board). */
int mg_board_others_waiting(const mg_engine *e);
/* How many of +queued+ connections waiting in a listener's backlog this worker should take so
 * that it holds no more than an even share of the serving workers' connections (0 without a
 * board). */
int mg_board_accept_share(const mg_engine *e, int queued);
/* How many idle connections this worker should hand to less loaded ones (0 without a board). */
int mg_board_handoff_quota(const mg_engine *e);
/* Whether some worker's READY cell is set and the cluster does not drain. */
int mg_board_any_ready(const mg_engine *e);
/* The workers whose READY cell is set, and the sum of their BUSY cells in *busy. */
int mg_board_ready_busy(const mg_engine *e, int *busy);

#endif
