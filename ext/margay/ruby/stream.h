/*
 * ruby/stream.h - the Engine's methods for streamed responses.
 */
#ifndef MARGAY_RUBY_STREAM_H
#define MARGAY_RUBY_STREAM_H

#include <ruby.h>

/* Define Engine#stream_start, #stream_write, #stream_finish and #flush on +cEngine+. */
void mg_stream_init(VALUE cEngine);

#endif
