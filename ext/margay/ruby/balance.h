/*
 * ruby/balance.h - the Engine's cluster API (keep-alive balancing between workers).
 */
#ifndef MARGAY_RUBY_BALANCE_H
#define MARGAY_RUBY_BALANCE_H

#include <ruby.h>

/* Define Engine#detach_idle, #adopt, #publish_idle, #others_waiting, #handoff_quota and
 * #saturated_ms on +cEngine+. */
void mg_balance_init(VALUE cEngine);

#endif
