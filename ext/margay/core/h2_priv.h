/*
 * core/h2_priv.h - what the three parts of the HTTP/2 engine share, private to them: the session
 * and stream structs and the helpers one part calls in another. core/h2.c has the session (its
 * setup, the socket, events, the limits' callbacks), core/h2_req.c the streams' requests (the
 * callbacks that build them, the engine's queue), core/h2_respond.c the response side (the calls
 * Ruby threads make under the connection's h2_lock, and the body nghttp2 frames). Only with
 * libnghttp2 (MG_HAVE_H2).
 */
#ifndef MARGAY_CORE_H2_PRIV_H
#define MARGAY_CORE_H2_PRIV_H

#include "core/h2.h"
#include <nghttp2/nghttp2.h>

enum { ST_FREE = 0, ST_RECV, ST_APP, ST_ANSWERED };

struct mg_h2_stream {
  uint64_t seq;          /* 0: a free slot */
  int32_t id;
  int state;
  mg_h2_req *req;        /* while its request is received (then the engine's queue owns it) */
  size_t field_bytes;    /* the header list's size as RFC 9113 counts it (name + value + 32) */
  int head_request;
  int started;           /* the response head was submitted */
  /* the response body: bytes waiting to be framed, then a file's (a file body, or the tempfile a
   * streamed body spills to past the connection's cap, which grows while the app writes) */
  char *out;
  size_t olen, ooff, ocap;
  int ofd;
  off_t opos;            /* the file's next byte to frame */
  uint64_t oleft;        /* its bytes after opos (a spill file's end is opos + oleft) */
  int eof;               /* no more bytes will come */
  int deferred;          /* nghttp2 was told to wait for bytes (resume when some come) */
  int64_t taken_mono_ns; /* when a thread took its request (the duration histogram), or 0 */
  int untaken;           /* its request waits in the engine's queue for a thread */
  /* an extended CONNECT (RFC 8441): the app got the request at the end of its headers; the
   * client's DATA wait here for the app's reads, bounded by the stream's window, which is given
   * back as the app reads (the connection's window at once: a tunnel never holds the others) */
  int tunnel;
  char *in;
  size_t ilen, ioff, icap;
  int in_eof;            /* the client ended its side */
};

typedef struct mg_h2 {
  nghttp2_session *s;
  mg_engine *e;
  mg_conn *c;
  mg_h2_stream slots[MG_H2_SLOTS];
  int in_app;            /* streams handed to Ruby and not answered yet */
  int untaken;           /* ... of them, those whose request no thread has taken yet */
  int ended;             /* a response call completed a stream's answer (mg_h2_unlock's to see) */
  int receiving;         /* streams whose request is not complete */
  int dead;              /* the socket failed or the peer left: close */
  int calm;              /* a limit was passed: GOAWAY ENHANCE_YOUR_CALM, then close */
  int continuations;     /* CONTINUATION frames of the header block being received */
  int empties;           /* frames in a row that carried nothing (CVE-2019-9518) */
  size_t queued;         /* response body bytes waiting in its streams' memory for the client */
  int waiting;           /* output waits for the client (socket or flow control) */
  uint64_t body_sent;    /* response body bytes framed (the client's windows let them go) */
  uint64_t sent_seen, body_seen; /* c->out.sent and body_sent when progress was last seen */
  int64_t progress_ms;   /* ... and when */
  double resets;         /* the rapid-reset bucket */
  int64_t resets_ms;
} mg_h2;

/* ---- core/h2.c ---- */
/* The stream with nghttp2's id +id+ on this session, or NULL. */
mg_h2_stream *h2_stream_of(mg_h2 *h, int32_t id);
/* Free what a stream holds and make its slot free (its request, if not queued, and its body). */
void h2_stream_clear(mg_h2 *h, mg_h2_stream *st);
/* Write what is queued and what the session has to send, as far as the socket takes it:
 * 1 all sent, 0 the socket is full, -1 it failed. */
int h2_pump(mg_h2 *h);
/* Move what the session has to send into c->out, up to MG_H2_OUT_BATCH: the bytes, or -1. */
ssize_t h2_frame(mg_h2 *h);
/* Whether response bytes wait in the streams (in memory, or a file's rest) for the client. */
int h2_backlogged(const mg_h2 *h);
static inline int h2_out_pending(const mg_conn *c) { return c->out.head != NULL; }

/* ---- core/h2_respond.c ---- */
/* Answer the stream +st+ (its request complete or taken, not answered yet) from the engine: a
 * plain-text +status+ with +body+ (none for HEAD), cache-control: no-store, and +extra+ (a
 * lowercased field, or NULL). Under h2_lock. 0, or -1. */
int h2_answer(mg_h2 *h, mg_h2_stream *st, int status, const mg_h2_nv *extra, const char *body, size_t blen);

/* ---- core/h2_flush.c ---- */
/* +c+'s answers are held from now (c->h2_held_ns set, under h2_lock): in the flusher's list. */
void h2_flush_list(mg_engine *e, mg_conn *c);

/* ---- core/h2_req.c: nghttp2's callbacks that build a stream's request ---- */
int h2_on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud);
int h2_on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                 const uint8_t *value, size_t vlen, uint8_t flags, void *ud);
int h2_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud);
/* The stream +id+'s request is complete (END_STREAM): queue it for Ruby. 0, or a callback error. */
int h2_request_done(mg_h2 *h, int32_t id);
/* The stream +id+'s headers ended without END_STREAM: an extended CONNECT (:method CONNECT with
 * :protocol) becomes a tunnel, queued for Ruby now. 0, or a callback error. */
int h2_headers_done(mg_h2 *h, int32_t id);
/* The client ended the stream +id+: its request is complete, or its tunnel's input ends. */
int h2_stream_ended(mg_h2 *h, int32_t id);

#endif
