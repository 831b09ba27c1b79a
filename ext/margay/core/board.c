/*
 * core/board.c - reading the other workers' counters on the board (see
 * core/board.h). Plain C: the event loop asks without the GVL.
 */
#include "core/board.h"

/* The board's memory is never unmapped: the loop may read it at any time. A worker whose
 * threads all serve passes each of them through the event loop between two requests, so its
 * WAITING count is positive for a few microseconds every few milliseconds: counted then, a
 * request handed over to it would find no free thread there, and wait behind that worker's own
 * queue after waiting in this one's (measured: 4 workers at 16 kept-alive clients each, the
 * requests handed over so were most of the slowest 1%). */
int mg_board_others_waiting(const mg_engine *e) {
  int sum = 0;
  uint32_t now = (uint32_t)mg_now_ms();
  for (int i = 0; e->board_slots && i < e->board_n; i++) {
    if (i == e->board_index) continue;
    int w = atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_WAITING, i));
    uint32_t since = (uint32_t)atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_WAITING_SINCE, i));
    if (w > 0 && now - since >= MG_BOARD_FREE_AFTER_MS) sum += w;
  }
  return sum;
}

/* The connections worker +i+ holds, or -1 when it is not serving (neither a thread waiting
 * nor a connection: a mold, or a gone worker). */
static int serving_conns(const mg_engine *e, int i) {
  int n = e->board_n;
  int c = atomic_load(mg_board_cell(e->board_slots, n, MG_BOARD_CONNS, i));
  if (c < 0) c = 0;
  return c == 0 && atomic_load(mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, i)) <= 0 ? -1 : c;
}

/* Serving workers and the connections they hold; this worker always counts. */
static void serving(const mg_engine *e, int *workers, int *conns) {
  *workers = *conns = 0;
  for (int i = 0; i < e->board_n; i++) {
    int c = serving_conns(e, i);
    if (c < 0 && i != e->board_index) continue;
    (*workers)++;
    *conns += c > 0 ? c : 0;
  }
}

int mg_board_accept_share(const mg_engine *e, int queued) {
  if (!e->board_slots || queued <= 0) return 0;
  int workers, conns;
  serving(e, &workers, &conns);
  int mine = atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_CONNS, e->board_index));
  int share = (conns + queued + workers - 1) / workers - (mine > 0 ? mine : 0);
  return share < 0 ? 0 : share > queued ? queued : share;
}

/* Half the gap to the least loaded other worker that is serving (it has a
 * thread waiting or a connection; a mold or a gone worker has neither), when
 * the gap is at least 2 and more than a sixteenth of this worker's connections.
 * Saturated workers serve their kept-alive clients in turns, so a worker with
 * 17 connections where another has 15 makes its clients wait 13 % longer for
 * as long as they stay: one connection moved evens it out. The other worker
 * then holds about as many, so it has no reason to hand them back. */
int mg_board_handoff_quota(const mg_engine *e) {
  if (!e->board_slots) return 0;
  int mine = atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_CONNS, e->board_index)), fewest = -1;
  for (int i = 0; i < e->board_n; i++) {
    if (i == e->board_index) continue;
    int conns = serving_conns(e, i);
    if (conns >= 0 && (fewest < 0 || conns < fewest)) fewest = conns;
  }
  if (fewest < 0) return 0;
  int gap = mine - fewest;
  return gap >= 2 && gap > mine / 16 ? gap / 2 : 0;
}

int mg_board_any_ready(const mg_engine *e) {
  if (!e->board_slots || atomic_load(mg_board_drain_flag(e->board_slots, e->board_n))) return 0;
  for (int i = 0; i < e->board_n; i++)
    if (atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_READY, i)) > 0) return 1;
  return 0;
}

int mg_board_ready_busy(const mg_engine *e, int *busy) {
  int ready = 0;
  *busy = 0;
  for (int i = 0; e->board_slots && i < e->board_n; i++) {
    if (atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_READY, i)) <= 0) continue;
    int b = atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_BUSY, i));
    ready++;
    *busy += b > 0 ? b : 0;
  }
  return ready;
}
