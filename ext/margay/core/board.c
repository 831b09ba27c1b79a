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

/* A saturated worker's clients wait about connections / rate (Little's law: each connection has
 * one request in the worker at a time); a worker with a thread waiting makes them wait for
 * nothing. Move connections so that the two waits come out equal: k such that
 * (mine - k) / my_rate = (conns + k) / rate. Rates within a quarter of each other count as equal
 * (a rate measured over half a second wanders that much; a moved client loses its place in
 * line, so moves on noise cost more than they give), and so do unknown rates: then it is half
 * the gap of connections. Only when this worker's clients wait at least 4/3 as long as the
 * other's (a quarter of its connections more, at equal rates) and at least 2 would move: the
 * other then has no reason to hand them back, unless the rates change. */
int mg_board_quota_for(int mine, int my_rate, int conns, int rate, int waiting) {
  if (conns < 0) conns = 0;
  if (mine <= 0) return 0;
  int64_t r1 = my_rate, r2 = rate;
  if (waiting > 0 || r1 <= 0 || r2 <= 0 || (4 * r1 < 5 * r2 && 4 * r2 < 5 * r1)) my_rate = rate = 1; /* counts alone */
  int64_t me = (int64_t)mine * rate, them = (int64_t)conns * my_rate; /* the waits, in one unit */
  if (3 * me < 4 * them) return 0;
  int64_t k = (me - them) / ((int64_t)my_rate + rate);
  return k >= 2 ? (int)k : 0;
}

/* The most connections this worker should move to any one other worker that is serving (it has
 * a thread waiting or a connection; a mold or a gone worker has neither). The master gives them
 * to the worker whose clients wait least (cluster/balancer.rb). */
int mg_board_handoff_quota(const mg_engine *e) {
  if (!e->board_slots) return 0;
  int n = e->board_n, me = e->board_index;
  _Atomic int *waiting = mg_board_cell(e->board_slots, n, MG_BOARD_WAITING, 0);
  _Atomic int *conns_of = mg_board_cell(e->board_slots, n, MG_BOARD_CONNS, 0);
  _Atomic int *rate_of = mg_board_cell(e->board_slots, n, MG_BOARD_RATE, 0);
  int mine = atomic_load(&conns_of[me]), my_rate = atomic_load(&rate_of[me]), best = 0;
  for (int i = 0; i < n; i++) {
    if (i == me) continue;
    int conns = atomic_load(&conns_of[i]), w = atomic_load(&waiting[i]);
    if (conns <= 0 && w <= 0) continue; /* not serving */
    int k = mg_board_quota_for(mine, my_rate, conns, atomic_load(&rate_of[i]), w);
    if (k > best) best = k;
  }
  return best;
}
