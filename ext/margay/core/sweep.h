/*
 * core/sweep.h - the timeout sweep: every MG_SWEEP_INTERVAL_MS one waiting thread walks the
 * connection table and expires what is overdue (an unfinished head or body answers 408; an
 * idle, stalled or lingering connection closes), closes idle ones on stop, and makes room at
 * the connection limit.
 */
#ifndef MARGAY_CORE_SWEEP_H
#define MARGAY_CORE_SWEEP_H

#include <stdint.h>
#include "core/engine.h"

#define MG_SWEEP_INTERVAL_MS 250

/* Sweep, unless another thread is sweeping; +now+ is mg_now_ms(). */
void mg_sweep(mg_engine *e, int64_t now);

#endif
