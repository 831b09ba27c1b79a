/*
 * ruby/waits.h - Margay::Native::FiberWaits: a fiber-mode pool thread's private wait set
 * (the work is core/waits.c).
 */
#ifndef MARGAY_RUBY_WAITS_H
#define MARGAY_RUBY_WAITS_H

#include <ruby.h>
#include "core/conn.h"

/* Define Margay::Native::FiberWaits under +mNative+. */
void mg_waits_init(VALUE mNative);

/* Whether the calling thread is a fiber-mode thread of engine +e+ with room in its pending list:
 * a whole response may then be queued (not sent) and handed to mg_rb_waits_defer. */
int mg_rb_waits_can_defer(mg_engine *e);
/* Hand +c+ (owned, its whole response queued) to the calling thread's next wait, which sends it
 * without the GVL (after mg_rb_waits_can_defer said yes). */
void mg_rb_waits_defer(mg_conn *c);

#endif
