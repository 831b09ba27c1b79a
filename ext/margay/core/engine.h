/*
 * core/engine.h - the engine: its settings, listeners, connection table and the counters its
 * threads share, and opening and closing its resources. Everything under core/ works on this
 * struct without Ruby (with or without the GVL); ruby/engine.c embeds it in the
 * Margay::Native::Engine object.
 *
 * Ownership: a connection is owned by exactly one thread at a time (see core/conn.h). Connection
 * structs are never freed while the engine lives (slots are reused by fd number).
 */
#ifndef MARGAY_CORE_ENGINE_H
#define MARGAY_CORE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "core/output.h"
#include "core/timing.h"
#include "ev/ev.h"
#include "ev/wake.h"

/* The engine's settings, in the order Ruby passes their values to
 * Engine.new (Margay::Native::Engine::SETTINGS lists the names). Their
 * defaults and validation live in one place only: Margay::Configuration. */
#define MG_ENGINE_SETTINGS(X)                                                                     \
  X(max_request_target) X(max_header_size) X(max_headers) X(max_body_size) X(body_buffer_size)  \
  X(max_chunk_extensions) X(header_timeout) X(body_timeout) X(keepalive_timeout) X(write_timeout) \
  X(max_keepalive_requests) X(response_buffer_limit) X(max_connections) X(tmpdir) X(event_backend) \
  X(supported_http_methods) X(remote_address) X(remote_address_header) X(proxy_protocol)           \
  X(health_check_path) X(max_threads) X(queue_timeout) X(queue_time_header)
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
  /* the wire's rules (docs/SECURITY.md) and where REMOTE_ADDR comes from */
  char methods[64 * 21 + 1];  /* supported_http_methods, each name and one space; "": any token */
  int proxy_protocol;         /* 1: each connection starts with a PROXY v1 line (http/proxy.h) */
  char remote_value[256];     /* REMOTE_ADDR of every request when not "" (remote_address) */
  char remote_header[256];    /* REMOTE_ADDR from this field when not "": lowercase, '_' as '-' */
  char health_path[256];      /* health_check_path: the engine answers GET/HEAD of it; "": off */
  int max_threads;            /* the app's threads: the agent's capacity (core/health.c) */
  int64_t queue_timeout_ns;   /* shed a request complete longer ago than this when taken; 0: never */
  int queue_time_header;      /* add X-Request-Start (the arrival) to an env without one */
} mg_settings;

typedef struct {
  int fd;
  int is_unix;
  struct mg_tls_ctx *tls;     /* its connections speak TLS (core/tls.h), or NULL */
  int h2;                     /* HTTP/2 (core/h2.h): ALPN h2 on TLS, a client preface on plain */
  int h2_connect;             /* its extended CONNECT (RFC 8441): SETTINGS_ENABLE_CONNECT_PROTOCOL */
} mg_listener;

#define MG_MAX_LISTENERS 16
#define MG_MAX_HEALTH_LISTENERS 4

struct mg_text;
struct mg_h2_req;

struct mg_conn;

/* Engine#stop's level (it only rises). */
enum mg_stopping { MG_RUNNING = 0, MG_STOP_GRACEFUL = 1, MG_STOP_FORCED = 2 };
/* Why accepting is paused: the connection limit (resumed when a connection leaves) or out of
 * descriptors (resumed by the sweep after resume_accept_ms). */
enum mg_accept_paused { MG_ACCEPTING = 0, MG_PAUSED_AT_LIMIT = 1, MG_PAUSED_NO_FDS = 2 };

typedef struct mg_engine {
  mg_ev *ev;
  mg_settings cfg;
  struct mg_conn **conns;    /* indexed by fd, allocated lazily, freed with the engine */
  int max_fds;
  _Atomic int hiwater;       /* highest fd ever used + 1 */
  _Atomic int nconns;
  _Atomic int idle_waiters;  /* threads inside next_request */
  _Atomic int unread;        /* connections taken in that no thread has reached yet (core/conn.h) */
  _Atomic int kept_alive;    /* connections kept alive after a response (or adopted so) (core/conn.h) */
  _Atomic int64_t all_busy_since_ms; /* when idle_waiters last dropped to 0 */
  _Atomic int stopping;      /* enum mg_stopping */
  _Atomic int listener_users; /* loop threads accepting or arming a listener */
  _Atomic uint64_t requests; /* completed request heads, less the abandoned ones (core/loop.c) */
  _Atomic uint64_t abandoned; /* requests not run: the client closed its side first (core/loop.c) */
  _Atomic uint64_t shed;      /* requests answered 503 for waiting over queue_timeout (core/timing.c) */
  mg_histogram queue_hist, duration_hist; /* core/timing.h */
  _Atomic int accept_paused; /* enum mg_accept_paused: why the listeners are not armed */
  _Atomic int64_t resume_accept_ms;
  _Atomic int64_t early_accept_us; /* when mg_accept_early last looked at the backlogs */
  _Atomic int64_t next_sweep_ms;
  pthread_mutex_t sweep_lock;
  mg_pins pins;              /* owners of the response bytes queued without a copy */
  mg_listener listeners[MG_MAX_LISTENERS];
  int nlisteners;
  mg_wake wake;              /* wakes the thread blocked in the event set */
  _Atomic int *board_slots;  /* the cluster's shared counters (core/board.h), or NULL */
  int board_n, board_index;
  int detach_cursor;         /* where mg_balance_detach_idle(pending_only) looks next (the caller holds the GVL) */
  int closed;                /* until opened, and once closed (ruby/engine.c raises IOError then) */
  /* The fast path (core/loop.c): at most one thread blocks in the event set at a
   * time (the poller); the other waiting threads stand by on standby_cond, and one of them
   * (the watcher) takes the poller's place only when no thread came back to the loop for
   * MG_STANDBY_US: a fast app's thread finds the next request itself, without waking another
   * thread and handing the GVL over. */
  _Atomic int pollers;         /* 0 or 1: a thread in (or about to enter) a blocking mg_ev_wait */
  _Atomic int64_t visit_us;    /* when a thread last entered or left the loop (0: promote now) */
  _Atomic int gvl_waiters;     /* threads back from the loop with a request, before the GVL */
  pthread_mutex_t standby_lock;
  pthread_cond_t standby_cond; /* CLOCK_MONOTONIC */
  int standbys;                /* under standby_lock */
  /* Events taken from the kernel by one wait beyond the one the waiting thread handles
   * (MG_STASH at most, oldest first): the next thread in the loop takes them before it asks
   * the kernel again. One epoll_wait serves several requests; each event's fd stays disarmed
   * (one-shot) until it is handled, exactly as in the kernel's ready list. */
#define MG_STASH 16
  pthread_mutex_t stash_lock;
  mg_ev_event stash[MG_STASH];
  int stash_head, stash_len;   /* under stash_lock */
  int stash_reserved;          /* room promised to waits under way, under stash_lock */
  /* TLS handshakes whose event a thread holding the GVL took (mg_loop_try), oldest first: owned,
   * they wait here for the next thread without it, which takes them before anything else
   * (mg_wait_nogvl), rather than going back to the tail of the ready list (core/loop.c). */
  struct mg_conn *handshakes, *handshakes_tail; /* under stash_lock, linked by mg_conn.next_handshake */
  _Atomic int nhandshakes;     /* their number, read without the lock */
  _Atomic int watcher;         /* the standby that ticks (core/loop.c), changed under standby_lock */
  /* Health (core/health.h): readiness is started, not draining and not stopping (in a
   * cluster, the board's view); the health listeners are served by their own thread. */
  _Atomic int started;         /* Engine#start was called */
  _Atomic int draining;        /* Engine#drain: not ready, every response closes its connection */
  int health_fds[MG_MAX_HEALTH_LISTENERS];
  int health_agent[MG_MAX_HEALTH_LISTENERS]; /* 1: an agent listener (one HAProxy agent-check line) */
  int nhealth;
  _Atomic int busy_threads;    /* app threads in a request, stored by Ruby's supervisor tick */
  int health_running;          /* the health thread runs (joined by mg_health_stop) */
  pthread_t health_thread;
  mg_wake health_wake;         /* tells the health thread to end */
  _Atomic(struct mg_text *) metrics; /* what GET /metrics answers (NULL: 404) */
  struct mg_text *own_metrics; /* this engine's own text (single mode), unmapped at close */
  /* HTTP/2 streams whose request is complete, oldest first (core/h2.h): a connection's streams
   * are taken by any thread in the loop, not by the one that read them. */
  pthread_mutex_t h2_lock;
  struct mg_h2_req *h2_head, *h2_tail; /* under h2_lock */
  _Atomic int h2_ready;        /* their number, read without the lock */
  /* The HTTP/2 flusher (core/h2_flush.c): connections whose answers are held for one write,
   * written by the flusher thread once the oldest has waited MG_H2_HOLD_NS. */
  pthread_mutex_t flush_lock;
  pthread_cond_t flush_cond;   /* CLOCK_MONOTONIC */
  struct mg_conn *flush_head, *flush_tail; /* under flush_lock, linked by mg_conn.h2_flush_next */
  int flush_idle;              /* the flusher waits with no deadline (under flush_lock) */
  int flush_stop;              /* told to end (under flush_lock) */
  _Atomic int flush_running;   /* the flusher runs: answers may be held (joined by mg_h2_flush_stop) */
  pthread_t flush_thread;
} mg_engine;

/* Event data: the wake fd, a listener (its index in the low bits), or a connection
 * (core/conn.h: fd and generation). */
#define MG_DATA_WAKE ((uint64_t)1 << 63)
#define MG_DATA_LISTENER ((uint64_t)1 << 62)

/* Set e->max_fds from the process's descriptor limit; returns the most connections the
 * engine should hold, leaving descriptors for the application (files, databases, logs). */
int mg_engine_size(mg_engine *e);

enum mg_open_result { MG_OPEN_OK, MG_OPEN_BACKEND, MG_OPEN_TABLE, MG_OPEN_WAKE_FD, MG_OPEN_ARM_WAKE };
/* Open the event backend of kind +backend+ (MG_EV_*), the connection table, the wake fd and
 * the locks for e->max_fds descriptors. MG_OPEN_OK, or the step that failed (errno set;
 * nothing is left open). */
int mg_engine_open(mg_engine *e, int backend);
/* Close what mg_engine_open opened; the connections are gone already (mg_conn_close_all). */
void mg_engine_close(mg_engine *e);

/* The engine's clock: monotonic milliseconds. */
static inline int64_t mg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The engine's fine clock: monotonic microseconds. */
static inline int64_t mg_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Wake the thread blocked in the event set (the wake fd is level-triggered: the next poller
 * sees it when none is blocked now). */
static inline void mg_engine_wake_poller(mg_engine *e) { mg_wake_signal(&e->wake); }

/* Wake every thread waiting in the event loop: the poller and the standbys (a stop). */
static inline void mg_engine_wake(mg_engine *e) {
  mg_engine_wake_poller(e);
  pthread_mutex_lock(&e->standby_lock);
  pthread_cond_broadcast(&e->standby_cond);
  pthread_mutex_unlock(&e->standby_lock);
}

#endif
