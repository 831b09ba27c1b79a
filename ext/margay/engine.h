/*
 * engine.h - internal structures of the native engine (not a public API).
 *
 * Ownership: a connection is owned by exactly one thread at a time. The state
 * word (generation << 8 | state) is changed with compare-and-swap: an event
 * or the timeout sweeper claims an ARMED connection by swapping it to OWNED;
 * whoever wins owns it until it arms it again or closes it. Connection structs
 * are never freed while the engine lives (slots are reused by fd number), so a
 * stale event for an old generation is harmless: its CAS fails.
 */
#ifndef MARGAY_ENGINE_H
#define MARGAY_ENGINE_H

#include <ruby.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "ev.h"
#include "parser.h"
#include "margay.h"

/* ARMING: being handed back to the event loop (epoll_ctl in progress); an
 * event may claim it, the sweeper and detach_idle leave it alone. */
enum mg_state { MG_FREE = 0, MG_ARMED = 1, MG_OWNED = 2, MG_ARMING = 3 };

enum mg_phase {
  MG_PH_IDLE,    /* keep-alive, waiting for the first byte of a request */
  MG_PH_HEAD,    /* part of a request head received */
  MG_PH_BODY,    /* head parsed, receiving the body */
  MG_PH_APP,     /* complete request handed to Ruby */
  MG_PH_WRITE,   /* response queued, waiting for the socket to drain */
  MG_PH_LINGER   /* write side shut, discarding input before close */
};

/* Ruby strings the output queues point into (large response bodies are sent
 * from the app's string, not copied). The engine's GC mark function marks
 * every entry, which also pins it (it cannot move); entries are added with
 * the GVL and removed by whichever thread finishes the write, under the lock,
 * without calling Ruby. */
typedef struct {
  pthread_mutex_t lock;
  struct mg_pin { VALUE str; struct mg_seg *seg; } *entries;
  size_t len, cap;
} mg_pins;

/* One queued piece of output: bytes, or a file range sent with sendfile. */
typedef struct mg_seg {
  struct mg_seg *next;
  char *data;
  size_t len, off;
  size_t cap;          /* allocation size, for mg_buf_free */
  mg_pins *pins;       /* non-NULL: data points into a pinned Ruby string */
  size_t pin_index;
  int file_fd;         /* -1 for memory */
  int spill;           /* the file is the connection's spill file (the tail may grow) */
  off_t file_off;
  uint64_t file_left;
} mg_seg;

typedef struct mg_conn {
  _Atomic uint64_t state; /* gen << 8 | mg_state */
  int fd;
  int listener;           /* index into engine->listeners */
  int phase;
  int64_t deadline_ms;    /* monotonic; 0 = none */
  unsigned requests;      /* requests served on this connection */

  /* input */
  char *rbuf;
  size_t rlen, rcap;
  size_t scanned;         /* head bytes already known to contain no complete head */
  mg_request req;         /* valid from HEAD complete until the env is built */
  int head_done;

  /* body */
  int64_t body_left;      /* Content-Length bytes still to read; -1 chunked */
  mg_chunked chunked;
  char *bmem;
  size_t blen, bcap;
  int bfd;                /* tempfile once the body passes the memory threshold, else -1 */
  uint64_t btotal;
  int sent_continue;

  /* output */
  mg_seg *out_head, *out_tail;
  size_t out_bytes;       /* memory bytes queued */
  int out_broken;         /* a part could not be queued (no memory): flushing fails, the connection closes */
  int keep_alive;         /* decided when the response head is written */
  int resp_chunked;       /* streaming response with chunked framing */
  int resp_started;
  int64_t stream_left;    /* streamed bytes still owed to an announced content-length; -1 unknown */
  int spill_fd;           /* streamed output beyond response_buffer_limit goes to this tempfile */
  off_t spill_end;        /* bytes written to it */
  int head_request;       /* HEAD: no body bytes on the wire */
  int minor;

  struct sockaddr_storage peer;
  socklen_t peer_len;
} mg_conn;

typedef struct {
  int fd;
  int is_unix;
  VALUE server_name;  /* default SERVER_NAME (frozen String) */
  VALUE server_port;  /* default SERVER_PORT (frozen String) */
} mg_listener;

#define MG_MAX_LISTENERS 16

/* The engine's settings, in the order Ruby passes their values to
 * Engine.new (Margay::Native::Engine::SETTINGS lists the names). Their
 * defaults and validation live in one place only: Margay::Configuration. */
#define MG_ENGINE_SETTINGS(X)                                                                     \
  X(max_request_target) X(max_header_size) X(max_headers) X(max_body_size) X(body_buffer_size)  \
  X(max_chunk_extensions) X(header_timeout) X(body_timeout) X(keepalive_timeout) X(write_timeout) \
  X(max_keepalive_requests) X(response_buffer_limit) X(max_connections) X(tmpdir) X(event_backend)
#define MG_SETTING_INDEX(name) MG_SET_##name,
enum mg_setting { MG_ENGINE_SETTINGS(MG_SETTING_INDEX) MG_SETTINGS_COUNT };
#undef MG_SETTING_INDEX

typedef struct {
  size_t max_target, max_head, max_headers;
  uint64_t max_body;          /* UINT64_MAX: unlimited */
  size_t body_buffer_size;
  size_t max_chunk_ext;
  int64_t header_timeout_ms, body_timeout_ms, keepalive_timeout_ms, write_timeout_ms;
  unsigned max_keepalive_requests;
  size_t response_buffer_limit;
  int max_connections;
  char tmpdir[4096];
} mg_settings;

typedef struct mg_engine {
  mg_ev *ev;
  mg_settings cfg;
  mg_conn **conns;           /* indexed by fd, allocated lazily, freed with the engine */
  int max_fds;
  _Atomic int hiwater;       /* highest fd ever used + 1 */
  _Atomic int nconns;
  _Atomic int idle_waiters;  /* threads inside next_request */
  _Atomic int64_t all_busy_since_ms; /* when idle_waiters last dropped to 0 */
  _Atomic int stopping;      /* 1 graceful, 2 forced */
  _Atomic int listener_users; /* loop threads accepting or arming a listener */
  _Atomic uint64_t requests; /* completed request heads */
  _Atomic int accept_paused; /* listeners not armed (limit or EMFILE) */
  _Atomic int64_t resume_accept_ms;
  _Atomic int64_t next_sweep_ms;
  pthread_mutex_t sweep_lock;
  mg_pins pins;
  mg_listener listeners[MG_MAX_LISTENERS];
  int nlisteners;
  int wake_fd[2];            /* eventfd (both the same) or a pipe */
  VALUE env_template;        /* Hash duplicated for each request */
  VALUE board;               /* IdleBoard of the cluster, or nil */
  _Atomic int *board_slots;  /* its counters (shared memory), or NULL: see mg_board_count */
  int board_n, board_index;
  int detach_cursor;         /* where mg_detach_idle(pending_only) looks next (the caller holds the GVL) */
  int closed;
} mg_engine;

/* event data: listener marker or fd + generation */
#define MG_DATA_WAKE ((uint64_t)1 << 63)
#define MG_DATA_LISTENER ((uint64_t)1 << 62)
#define MG_GEN_MASK 0x3fffffffu
static inline uint64_t mg_conn_data(int fd, uint64_t gen) { return ((gen & MG_GEN_MASK) << 32) | (uint32_t)fd; }
static inline uint64_t mg_state_gen(uint64_t s) { return s >> 8; }
static inline int mg_state_st(uint64_t s) { return (int)(s & 0xff); }

int64_t mg_now_ms(void);

/* loop.c */
enum mg_wait_result { MG_WAIT_READY = 1, MG_WAIT_TIMEOUT = 2, MG_WAIT_STOP = 3, MG_WAIT_INTR = 4 };
typedef struct {
  mg_engine *e;
  mg_conn *conn;         /* in: connection to continue with (pipelined input); out: ready conn */
  int64_t idle_ms;       /* return MG_WAIT_TIMEOUT after this long without work; <0: never */
  int result;
} mg_wait_args;
void *mg_wait_nogvl(void *args);
void mg_conn_close(mg_engine *e, mg_conn *c);
int mg_conn_forget(mg_engine *e, mg_conn *c); /* out of the engine, fd left open; returns it */
void mg_conn_arm_read(mg_engine *e, mg_conn *c);
void mg_conn_after_response(mg_engine *e, mg_conn *c, int *continue_now);
int mg_conn_complete(mg_engine *e, mg_conn *c);  /* send queued response; 1: pipelined request buffered */
int mg_conn_continue(mg_engine *e, mg_conn *c);  /* frame buffered input; 1: request ready, 0: handed to the loop */
void mg_conn_consume_head(mg_conn *c);
int mg_conn_start(mg_engine *e, int fd, int li, const struct sockaddr *peer, socklen_t plen, int kept_alive);
int mg_detach_idle(mg_engine *e, int *out, int *kept_alive, int max, int pending_only);
/* The board's rows of counters, one counter per worker index in each. */
enum { MG_BOARD_WAITING, MG_BOARD_CONNS };

/* The counter of worker +i+ in +row+ on a board of +n+ slots (the one place
 * that knows the layout: row after row). */
static inline _Atomic int *mg_board_cell(_Atomic int *slots, int n, int row, int i) { return &slots[row * n + i]; }

/* Add +delta+ to this worker's counter in +row+ (nothing without a board). */
static inline void mg_board_count(mg_engine *e, int row, int delta) {
  if (e->board_slots) atomic_fetch_add(mg_board_cell(e->board_slots, e->board_n, row, e->board_index), delta);
}

int mg_board_others_waiting(const mg_engine *e); /* 0 without a board */
static inline int mg_board_others_idle(const mg_engine *e) { return mg_board_others_waiting(e) > 0; }
int mg_board_handoff_quota(const mg_engine *e); /* 0 without a board */
_Atomic int *mg_board_slots(VALUE board, int *n);
void mg_board_init(VALUE mNative);
int mg_conn_flush(mg_engine *e, mg_conn *c); /* 1 done, 0 would block, -1 error */
void mg_conn_queue(mg_conn *c, const char *data, size_t len);
void mg_conn_queue_owned(mg_conn *c, char *data, size_t len, size_t cap); /* data from mg_buf_alloc */
char *mg_buf_alloc(size_t size);
int mg_conn_queue_string(mg_engine *e, mg_conn *c, VALUE frozen_str); /* with the GVL; -1: no memory */
void mg_pins_mark(mg_pins *p);
void mg_buf_free(char *p, size_t size);
int mg_conn_queue_file(mg_conn *c, int fd, off_t off, uint64_t len); /* 0, or -1 (out of memory) */
void mg_conn_free_out(mg_conn *c);
int mg_open_tempfile(mg_engine *e); /* unlinked tempfile in cfg.tmpdir, or -1 */
int mg_conn_spill(mg_engine *e, mg_conn *c, const struct iovec *iov, int n); /* 0, or -1 with errno */
void mg_conn_reset_request(mg_conn *c);
void mg_engine_wake(mg_engine *e);
void mg_simple_response(mg_engine *e, mg_conn *c, int status);

/* env.c */
void mg_env_init(VALUE mNative);
VALUE mg_env_build(mg_engine *e, mg_conn *c);

/* response.c */
void mg_response_init(VALUE cEngine);
const char *mg_reason(int status);
size_t mg_date_header(char *out); /* "date: ...\r\n", returns length */

/* engine.c */
mg_engine *mg_engine_get(VALUE self);
mg_conn *mg_engine_conn_for_token(mg_engine *e, VALUE token); /* raises unless owned */
VALUE mg_conn_token(mg_conn *c);
extern VALUE mg_eClientGone, mg_eInvalidResponse;

#endif
