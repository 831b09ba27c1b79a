/* margay.h - declarations shared by the Ruby-facing C files (not by parser.c). */
#ifndef MARGAY_H
#define MARGAY_H

#include <ruby.h>

extern VALUE mg_mMargay, mg_mNative;

/* parser_ruby.c: Margay::Native.parse_head and Margay::Native::ChunkedDecoder (test bindings) */
void mg_parser_ruby_init(VALUE mNative);
/* engine.c: Margay::Native::Engine */
void mg_engine_init(VALUE mNative);

#endif
