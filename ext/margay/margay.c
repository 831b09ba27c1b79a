/*
 * margay.c - Init_margay_native: defines Margay::Native and wires the parts.
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

VALUE mg_mMargay, mg_mNative;

/* Native.child_subreaper -> true when this process now adopts its orphaned
 * descendants (Linux's PR_SET_CHILD_SUBREAPER), false where it cannot. A
 * cluster master sets it so that workers double-forked by the mold become its
 * children, and it reaps them. */
static VALUE native_child_subreaper(VALUE self) {
#if defined(HAVE_SYS_PRCTL_H) && defined(PR_SET_CHILD_SUBREAPER)
  return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 ? Qtrue : Qfalse;
#else
  return Qfalse;
#endif
}

__attribute__((visibility("default"))) void Init_margay_native(void) {
  mg_mMargay = rb_define_module("Margay");
  mg_mNative = rb_define_module_under(mg_mMargay, "Native");
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
  /* glibc gives each thread that allocates under contention an arena of its
   * own and rarely returns their memory: a threaded server's RSS creeps up
   * (measured: +13.5% over a 10-minute soak, +3.7% with 2 arenas). Two arenas,
   * unless the user chose otherwise with MALLOC_ARENA_MAX. */
  if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
#endif
  rb_define_module_function(mg_mNative, "child_subreaper", native_child_subreaper, 0);
  mg_parser_ruby_init(mg_mNative);
  mg_engine_init(mg_mNative);
}
