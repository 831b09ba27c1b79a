/*
 * margay.c - Init_margay_native: defines Margay::Native and wires the units.
 *
 *   http/   pure HTTP (parser, chunked decoder, status lines): no Ruby, fuzzed
 *   ev/     the event backends (epoll, poll)
 *   core/   the engine: no Ruby at all (so it may run without the GVL)
 *   ruby/   the Ruby classes around them (with the GVL, released at three waits)
 */
#include <ruby.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef HAVE_SYS_PRCTL_H
#include <sys/prctl.h>
#endif
#include "margay.h"
#include "ruby/board.h"
#include "ruby/balance.h"
#include "ruby/engine.h"
#include "ruby/env.h"
#include "ruby/waits.h"
#include "ruby/respond.h"
#include "ruby/stream.h"
#include "ruby/testing.h"
#include "ruby/h2.h"
#include "ruby/tls.h"

/* Native.child_subreaper -> true when this process now adopts its orphaned
 * descendants (Linux's PR_SET_CHILD_SUBREAPER), false where it cannot. A
 * cluster master sets it so that workers double-forked by the mold become its
 * children, and it reaps them. */
static VALUE native_child_subreaper(VALUE self) {
  (void)self;
#if defined(HAVE_SYS_PRCTL_H) && defined(PR_SET_CHILD_SUBREAPER)
  return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? Qtrue : Qfalse;
#else
  return Qfalse;
#endif
}

/* Native.malloc_trim -> true when glibc returned free heap memory to the
 * system, false when there was none to return, nil without glibc. The mold
 * (and a preloading master) call it after the full GCs before forking: freed
 * malloc memory that stays mapped would be copied into no child, but counts
 * in the template's RSS for as long as it lives. */
static VALUE native_malloc_trim(VALUE self) {
  (void)self;
#if defined(__GLIBC__)
  return malloc_trim(0) ? Qtrue : Qfalse;
#else
  return Qnil;
#endif
}

/* Native.malloc_arenas(n) -> true when glibc's arena limit is now +n+, false
 * where there is none to set (not glibc) or MALLOC_ARENA_MAX chose it. The
 * Launcher calls it first, before any thread allocates: glibc fixes the limit
 * the first time a thread needs an arena. A thread with an arena of its own
 * never allocates in the main arena, which after a fork holds the template's
 * heap: a block it took there would copy the shared page it lands on. */
static VALUE native_malloc_arenas(VALUE self, VALUE n) {
  (void)self;
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
  int arenas = NUM2INT(n);
  if (arenas < 1) rb_raise(rb_eArgError, "malloc_arenas: %d is not a positive number of arenas", arenas);
  if (getenv("MALLOC_ARENA_MAX")) return Qfalse;
  return mallopt(M_ARENA_MAX, arenas) ? Qtrue : Qfalse;
#else
  (void)n;
  return Qfalse;
#endif
}

void Init_margay_native(void) {
  VALUE mMargay = rb_define_module("Margay");
  VALUE mNative = rb_define_module_under(mMargay, "Native");
  rb_define_module_function(mNative, "child_subreaper", native_child_subreaper, 0);
  rb_define_module_function(mNative, "malloc_trim", native_malloc_trim, 0);
  rb_define_module_function(mNative, "malloc_arenas", native_malloc_arenas, 1);
  mg_testing_init(mNative);
  VALUE cEngine = mg_engine_init(mMargay, mNative);
  mg_board_init(mNative);
  mg_respond_init(cEngine);
  mg_stream_init(cEngine);
  mg_balance_init(cEngine);
  mg_env_init();
  mg_waits_init(mNative);
  mg_tls_init(mNative);
  mg_rb_h2_init(mNative);
}
