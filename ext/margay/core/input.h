/*
 * core/input.h - reading a connection's requests: the socket into its buffer, the head through
 * the parser, the body (Content-Length or chunked) into memory or a tempfile, and the errors
 * the engine answers itself. Runs without the GVL (ruby/request.c calls it for a pipelined
 * request with the GVL).
 */
#ifndef MARGAY_CORE_INPUT_H
#define MARGAY_CORE_INPUT_H

#include "core/conn.h"

enum mg_input_result {
  MG_IN_READY, /* a whole request is buffered: the connection goes to Ruby */
  MG_IN_AGAIN, /* more input is needed */
  MG_IN_DONE   /* the connection was handled (answered with an error, closed, or writing) */
};

/* Read what the socket has and frame it. MG_IN_AGAIN: re-armed for input. */
int mg_input_read(mg_engine *e, mg_conn *c);
/* Advance a TLS connection's handshake (without the GVL only); once complete, read as
 * mg_input_read. A client speaking plain HTTP gets a plain 400 saying the port speaks HTTPS. */
int mg_input_handshake(mg_engine *e, mg_conn *c);
/* Frame what is buffered (a pipelined request). 1: a request is ready; 0: handed to the loop. */
int mg_input_continue(mg_engine *e, mg_conn *c);
/* Answer +status+ with the engine's error page, then close (lingering). Output still pending
 * (an interim 100 Continue, possibly half written) stays queued ahead of it. */
void mg_input_error(mg_engine *e, mg_conn *c, int status);
/* Drop the head of the request Ruby took (its env is built); the body was read already. */
void mg_input_consume_head(mg_conn *c);

#endif
