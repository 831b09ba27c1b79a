/*
 * ruby/respond.h - the Engine's response methods.
 */
#ifndef MARGAY_RUBY_RESPOND_H
#define MARGAY_RUBY_RESPOND_H

#include <ruby.h>

/* Define Engine#respond, #respond_file, #stream_start, #stream_write, #stream_finish, #flush,
 * #early_hints and #response_started? on +cEngine+. */
void mg_respond_init(VALUE cEngine);

#endif
