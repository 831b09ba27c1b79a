/*
 * core/conn.h - a client connection and its lifecycle: taken in, armed, answered, lingering,
 * closed or handed over.
 *
 * Ownership: a connection is owned by exactly one thread at a time. The state
 * word (generation << 8 | state) is changed with compare-and-swap: an event
 * or the timeout sweeper claims an ARMED connection by swapping it to OWNED;
 * whoever wins owns it until it arms it again or closes it. Connection structs
 * are never freed while the engine lives (slots are reused by fd number), so a
 * stale event for an old generation is harmless: its CAS fails.
 */
#ifndef MARGAY_CORE_CONN_H
#define MARGAY_CORE_CONN_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include "core/engine.h"
#include "core/output.h"
#include "core/tls.h"
#include "http/chunked.h"
#include "http/parser.h"
#include "http/proxy.h"

/* ARMING: being handed back to the event loop (epoll_ctl in progress); an
 * event may claim it, the sweeper and detach_idle leave it alone. */
enum mg_state { MG_FREE = 0, MG_ARMED = 1, MG_OWNED = 2, MG_ARMING = 3 };

enum mg_phase {
  MG_PH_IDLE,    /* keep-alive, waiting for the first byte of a request */
  MG_PH_HEAD,    /* part of a request head received */
  MG_PH_BODY,    /* head parsed, receiving the body */
  MG_PH_APP,     /* complete request handed to Ruby */
  MG_PH_WRITE,   /* response queued, waiting for the socket to drain */
  MG_PH_LINGER,  /* write side shut, discarding input before close */
  MG_PH_H2       /* an HTTP/2 session (core/h2.h): its streams are the requests */
};

typedef struct mg_conn {
  _Atomic uint64_t state; /* gen << 8 | mg_state */
  int fd;
  int listener;           /* index into engine->listeners */
  int phase;
  int64_t deadline_ms;    /* monotonic; 0 = none */
  unsigned requests;      /* requests served on this connection */
  int unread;             /* accepted (or adopted) and not reached by a thread yet: counted in
                           * the engine's unread (core/accept.c) */
  int kept_alive;         /* kept alive after a response (or adopted so): counted in the
                           * engine's kept_alive (core/accept.c) */

  /* input */
  char *rbuf;
  size_t rlen, rcap;
  size_t scanned;         /* head bytes already known to contain no complete head */
  mg_request *req;        /* the parsed head (core/spare.h), valid from HEAD complete until the
                           * env is built; taken at the first parse, given back when idle */
  int head_done;
  /* times (core/timing.h): wall-clock ns, except taken_mono_ns */
  int64_t rx_ns;          /* when the data of the latest read arrived */
  int64_t arrival_ns;     /* the request's first bytes */
  int64_t head_ns;        /* its head complete */
  int64_t ready_ns;       /* its body complete: the request is ready for a thread */
  int64_t taken_ns;       /* a thread took it */
  int64_t taken_mono_ns;  /* the same, monotonic; 0 once its duration is counted */
  int pipelines;          /* this client has sent a request before the previous one was framed (or
                           * filled a read): its requests are never taken for abandoned (loop.c) */
  int tls_held;           /* armed last with input its TLS session holds (mg_conn_arm): not idle,
                           * whatever its phase says (the sweep, the backlog count) */

  /* body */
  int64_t body_left;      /* Content-Length bytes still to read; -1 chunked */
  mg_chunked chunked;
  char *bmem;
  size_t blen, bcap;
  int bfd;                /* tempfile once the body passes the memory threshold, else -1 */
  uint64_t btotal;
  int sent_continue;

  /* output */
  mg_out out;
  int keep_alive;         /* decided when the response head is written */
  int resp_chunked;       /* streaming response with chunked framing */
  int resp_started;
  int64_t stream_left;    /* streamed bytes still owed to an announced content-length; -1 unknown */
  int head_request;       /* HEAD: no body bytes on the wire */
  int minor;

  mg_tls tls;             /* a TLS listener's connection: its session (core/tls.h); else OFF */

  /* HTTP/2 (core/h2.h): the session, and the lock that guards it and the socket's I/O while it
   * is set (Ruby threads answer streams while a loop thread owns the connection) */
  struct mg_h2 *h2;
  pthread_mutex_t h2_lock;
  pthread_cond_t h2_input; /* with h2_lock: a tunnel's bytes or end came, or the session ended */
  uint64_t h2_seq;        /* streams' sequence on this struct, never reset: stale tokens fail */
  _Atomic int h2_kick;    /* a response call left output, or the session must end (mg_h2_kick) */
  int h2_goaway;          /* the session sent its GOAWAY for a stop (read by the sweep) */
  /* answers held for one write (core/h2_respond.c): when the oldest was framed (monotonic ns), 0
   * while none is held; set and cleared under h2_lock, read by the flusher without it */
  _Atomic int64_t h2_held_ns;
  struct mg_conn *h2_flush_next; /* in the engine's flush list (core/h2_flush.c), under its flush_lock */
  int h2_flush_listed;    /* ... it is in that list (under flush_lock) */
  struct mg_conn *next_handshake; /* in the engine's handshakes left by a thread with the GVL */

  struct sockaddr_storage peer;
  socklen_t peer_len;
  /* proxy_protocol: the PROXY v1 line is read once, before the first request (never on a
   * kept-alive connection), and its address is every request's REMOTE_ADDR */
  int proxy_pending;      /* the next bytes must be the PROXY line */
  char proxy_addr[MG_ADDR_MAX]; /* the source address it gave; "": none (UNKNOWN) */
  char peer_text[MG_ADDR_MAX];  /* the peer's address as text, formatted by its first env; "": not yet */
} mg_conn;

/* Event data of a connection: its fd and generation (see MG_DATA_* in core/engine.h). */
#define MG_GEN_MASK 0x3fffffffu
static inline uint64_t mg_conn_data(int fd, uint64_t gen) { return ((gen & MG_GEN_MASK) << 32) | (uint32_t)fd; }
static inline uint64_t mg_state_gen(uint64_t s) { return s >> 8; }
static inline int mg_state_st(uint64_t s) { return (int)(s & 0xff); }

/* Whether +c+ may be handed to another worker: not once a PROXY line gave it an address (the
 * adopting worker would not know it; the line is read only once), nor a TLS connection (its
 * session lives in this process's memory). */
static inline int mg_conn_movable(const mg_conn *c) { return c->proxy_addr[0] == '\0' && c->tls.state == MG_TLS_OFF; }
/* Whether +c+'s TLS handshake is still to be done (only without the GVL: core/loop.c). */
static inline int mg_conn_handshaking(const mg_conn *c) {
  return c->tls.state == MG_TLS_HELLO || c->tls.state == MG_TLS_HANDSHAKE;
}

/* The socket's peer as text, formatted once per connection (into c->peer_text); an IPv4 client
 * of a dual-stack listener as IPv4 (::ffff:1.2.3.4 is 1.2.3.4, as Puma gives it). */
const char *mg_conn_peer_text(mg_conn *c);

/* Whether the client of idle connection +c+ has sent bytes the engine has not read yet (its
 * next request, waiting in the kernel: a MSG_PEEK). Input its TLS session holds is not asked
 * here (the caller may not own +c+): a connection armed with such input is marked tls_held. */
int mg_conn_has_pending_input(const mg_conn *c);

/* Whether the calling thread may touch +c+: it must own it (checked in debug builds). */
static inline int mg_conn_owned(mg_conn *c) { return mg_state_st(atomic_load(&c->state)) == MG_OWNED; }

/* Claim +c+ as an event does: from +s+ (its state as the caller read it), when ARMED or ARMING, to
 * OWNED in the same generation. 1 when the calling thread won it (the state had not moved since). */
static inline int mg_conn_claim_armed(mg_conn *c, uint64_t s) {
  int st = mg_state_st(s);
  return (st == MG_ARMED || st == MG_ARMING) &&
         atomic_compare_exchange_strong(&c->state, &s, (mg_state_gen(s) << 8) | MG_OWNED);
}

/* Take charge of connected socket +fd+ (from listener +li+): a new connection
 * (the header timeout runs) or one adopted from another worker (+kept_alive+:
 * an idle keep-alive connection, the keep-alive timeout runs). Returns 0, or
 * -1 if it was closed. */
int mg_conn_start(mg_engine *e, int fd, int li, const struct sockaddr *peer, socklen_t plen, int kept_alive);
/* A thread reached it (its first event), or it leaves the engine: it no longer counts as waiting
 * unread. The owner calls it. */
void mg_conn_reached(mg_engine *e, mg_conn *c);
/* Hand the connection back to the event loop, waiting for +events+ (MG_EV_IN/OUT). Waiting for
 * input while its TLS session holds decrypted bytes (the socket's readiness does not show
 * them) or must first send bytes of its own, it waits for output instead: a socket that can
 * take bytes is ready at once, and the reading phases read whatever the event. */
void mg_conn_arm(mg_engine *e, mg_conn *c, uint32_t events);
/* Take the connection out of the engine and return its fd, still open (a TLS session is
 * freed without a close_notify). */
int mg_conn_forget(mg_engine *e, mg_conn *c);
/* Close it (an open TLS session sends its close_notify first, if the socket takes it). */
void mg_conn_close(mg_engine *e, mg_conn *c);
/* Close every connection and free its struct: the engine closes (no loop thread runs). */
void mg_conn_close_all(mg_engine *e);
/* Close +c+ (owned, its output all sent) lingering: the write side shut, what the client still
 * sends read and discarded for a while, so that its unread input does not turn the close into a
 * reset that destroys the last bytes sent before the client read them. */
void mg_conn_begin_close(mg_engine *e, mg_conn *c);
/* Discard what a lingering connection's client still sends; close at EOF. */
void mg_conn_linger(mg_engine *e, mg_conn *c);
/* Forget the request just answered (its buffers stay for a pipelined next one). */
void mg_conn_reset_request(mg_conn *c);
/* +c+ holds no input (rlen 0): its read buffer and parsed head go back to this thread's spares
 * (core/spare.h), its body buffer is freed. An idle connection holds none of them. */
void mg_conn_release_buffers(mg_conn *c);
/* Queue the engine's own error page for +status+; the connection closes after it. */
void mg_conn_simple_response(mg_conn *c, int status);
/* Send the queued response; the event loop finishes what the socket does not
 * take now. Returns 1 when a pipelined request is already buffered (the caller
 * frames it), else 0 (the connection is with the event loop, or closed). */
int mg_conn_complete(mg_engine *e, mg_conn *c);

#endif
