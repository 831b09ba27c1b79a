/*
 * ruby/fibers.h - Margay::Native::FiberWaits: a fiber-mode pool thread's private wait set
 * (the work is core/waits.c).
 */
#ifndef MARGAY_RUBY_FIBERS_H
#define MARGAY_RUBY_FIBERS_H

#include <ruby.h>

/* Define Margay::Native::FiberWaits under +mNative+. */
void mg_fibers_init(VALUE mNative);

#endif
