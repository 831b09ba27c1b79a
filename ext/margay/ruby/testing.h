/*
 * ruby/testing.h - Ruby bindings of the pure-C HTTP units, for the tests and the fuzz seeds.
 */
#ifndef MARGAY_RUBY_TESTING_H
#define MARGAY_RUBY_TESTING_H

#include <ruby.h>

/* Define Margay::Native.parse_head and Margay::Native::ChunkedDecoder. */
void mg_testing_init(VALUE mNative);

#endif
