/*
 * ruby/engine.h - Margay::Native::Engine: the Ruby object around the core engine.
 */
#ifndef MARGAY_RUBY_ENGINE_H
#define MARGAY_RUBY_ENGINE_H

#include <ruby.h>
#include "core/conn.h"
#include "core/engine.h"
#include "ruby/env.h"

/* The Engine object: the core engine plus what only Ruby reads or the GC must see. */
typedef struct {
  mg_engine core;                      /* first: core code gets &rb->core */
  VALUE env_template;                  /* Hash duplicated for each request */
  VALUE board;                         /* IdleBoard of the cluster (core.board_slots), or nil */
  VALUE self;                          /* the Engine object (marked by itself, so pinned) */
  VALUE hijack_class, hints_class;     /* Engine#request_objects's, or nil (ruby/env.h) */
  mg_env_server servers[MG_MAX_LISTENERS]; /* per listener */
} mg_rb_engine;

extern VALUE mg_eClientGone, mg_eInvalidResponse;

/* Define Margay::Native::Engine (and look up the error classes, defined in Ruby); returns it. */
VALUE mg_engine_init(VALUE mMargay, VALUE mNative);
/* The engine of +self+; raises IOError once it is closed. */
mg_rb_engine *mg_rb_engine_get(VALUE self);
static inline mg_engine *mg_rb_engine_core(VALUE self) { return &mg_rb_engine_get(self)->core; }

#endif
