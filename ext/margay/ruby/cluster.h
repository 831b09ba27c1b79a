/*
 * ruby/cluster.h - the Engine's cluster API (keep-alive balancing between workers).
 */
#ifndef MARGAY_RUBY_CLUSTER_H
#define MARGAY_RUBY_CLUSTER_H

#include <ruby.h>

/* Define Engine#detach_idle, #adopt, #publish_idle, #others_waiting, #handoff_quota and
 * #saturated_ms on +cEngine+. */
void mg_cluster_init(VALUE cEngine);

#endif
