/*
 * ruby/respond.h - the Engine's methods for whole responses.
 */
#ifndef MARGAY_RUBY_RESPOND_H
#define MARGAY_RUBY_RESPOND_H

#include <ruby.h>
#include "core/conn.h"
#include "core/engine.h"

/* Define Engine#respond, #respond_file, #early_hints and #response_started? on +cEngine+. */
void mg_respond_init(VALUE cEngine);

/* Send what the socket of +c+ takes now, without blocking: 1 when nothing is left queued, 0 when
 * some is (the loop or a wait finishes it). Raises Margay::ClientGone when the client is gone. */
int mg_rb_respond_send(mg_conn *c);

/* After a whole response is queued: send, and either go on with a pipelined request (returns
 * its token) or hand the connection to the event loop (nil). */
VALUE mg_respond_complete(mg_engine *e, mg_conn *c);

#include <sys/stat.h>
/* A body's to_path opened for sending (read-only, never blocking on a FIFO): its fd and *sb, or
 * -1 when it cannot be opened or is no regular file (the caller then iterates the body). */
int mg_rb_open_file(VALUE path, struct stat *sb);

#endif
