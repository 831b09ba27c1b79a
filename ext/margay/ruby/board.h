/*
 * ruby/board.h - Margay::Native::IdleBoard, the cluster's shared counters (layout: core/board.h).
 */
#ifndef MARGAY_RUBY_BOARD_H
#define MARGAY_RUBY_BOARD_H

#include <ruby.h>

void mg_board_init(VALUE mNative);
/* The board's counters and their number of slots (*n), or NULL when it has none. Raises
 * TypeError unless +board+ is an IdleBoard. */
_Atomic int *mg_board_slots(VALUE board, int *n);
/* The board's metrics text (core/health.h). */
struct mg_text *mg_board_metrics(VALUE board);

#endif
