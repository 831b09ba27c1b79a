/*
 * ruby/waits.h - Margay::Native::FiberWaits: a fiber-mode pool thread's private wait set
 * (the work is core/waits.c).
 */
#ifndef MARGAY_RUBY_WAITS_H
#define MARGAY_RUBY_WAITS_H

#include <ruby.h>

/* Define Margay::Native::FiberWaits under +mNative+. */
void mg_waits_init(VALUE mNative);

#endif
