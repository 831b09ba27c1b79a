/*
 * margay.c - Init_margay_native: defines Margay::Native and wires the parts.
 */
#include <ruby.h>
#include "margay.h"

VALUE mg_mMargay, mg_mNative;

__attribute__((visibility("default"))) void Init_margay_native(void) {
  mg_mMargay = rb_define_module("Margay");
  mg_mNative = rb_define_module_under(mg_mMargay, "Native");
  mg_parser_ruby_init(mg_mNative);
  mg_engine_init(mg_mNative);
}
