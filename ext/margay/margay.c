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

void Init_margay_native(void) {
  VALUE mMargay = rb_define_module("Margay");
  VALUE mNative = rb_define_module_under(mMargay, "Native");
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
  /* glibc gives each thread that allocates under contention an arena of its
   * own and rarely returns their memory: a threaded server's RSS creeps up.
   * Two arenas, unless the user chose otherwise with MALLOC_ARENA_MAX. */
  if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
#endif
  rb_define_module_function(mNative, "child_subreaper", native_child_subreaper, 0);
  rb_define_module_function(mNative, "malloc_trim", native_malloc_trim, 0);
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
