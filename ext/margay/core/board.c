/*
 * core/board.c - reading the other workers' counters on the board (see
 * core/board.h). Plain C: the event loop asks without the GVL.
 */
#include "core/board.h"

/* The board's memory is never unmapped: the loop may read it at any time. */
int mg_board_others_waiting(const mg_engine *e) {
  int sum = 0;
  for (int i = 0; e->board_slots && i < e->board_n; i++) {
    int w = i == e->board_index ? 0 : atomic_load(mg_board_cell(e->board_slots, e->board_n, MG_BOARD_WAITING, i));
    if (w > 0) sum += w;
  }
  return sum;
}

/* Serving workers (a thread waiting or a connection; a mold or a gone worker has neither) and
 * the connections they hold; this worker always counts. */
static void serving(const mg_engine *e, int *workers, int *conns) {
  int n = e->board_n;
  *workers = *conns = 0;
  for (int i = 0; i < n; i++) {
    int c = atomic_load(mg_board_cell(e->board_slots, n, MG_BOARD_CONNS, i));
    if (c < 0) c = 0;
    if (i != e->board_index && c == 0 && atomic_load(mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, i)) <= 0) continue;
    (*workers)++;
    *conns += c;
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
 * the gap is at least a quarter of this worker's connections and at least 4.
 * The other worker then holds about as many, so it has no reason to hand them
 * back. */
int mg_board_handoff_quota(const mg_engine *e) {
  if (!e->board_slots) return 0;
  int n = e->board_n;
  _Atomic int *waiting = mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, 0);
  _Atomic int *conns_of = mg_board_cell(e->board_slots, n, MG_BOARD_CONNS, 0);
  int mine = atomic_load(&conns_of[e->board_index]), fewest = -1;
  for (int i = 0; i < n; i++) {
    if (i == e->board_index) continue;
    int conns = atomic_load(&conns_of[i]);
    if (conns < 0) conns = 0;
    if (conns == 0 && atomic_load(&waiting[i]) <= 0) continue; /* not serving */
    if (fewest < 0 || conns < fewest) fewest = conns;
  }
  if (fewest < 0) return 0;
  int gap = mine - fewest;
  return gap >= 4 && gap >= mine / 4 ? gap / 2 : 0;
}
