/*
 * core/balance.h - keep-alive balancing across cluster workers, the engine's side: detaching
 * idle connections so that Ruby can hand them to a less loaded worker (how many: the board's
 * arithmetic, core/board.h).
 */
#ifndef MARGAY_CORE_BALANCE_H
#define MARGAY_CORE_BALANCE_H

#include "core/engine.h"

/* Detach up to +max+ idle connections (all idle ones, or with +pending_only+ those whose client
 * has sent a request the engine has not read yet): their fds, still open, go to +out+, and to
 * +kept_alive+ whether each had served a request. Returns how many. */
int mg_balance_detach_idle(mg_engine *e, int *out, int *kept_alive, int max, int pending_only);

#endif
