/*
 * core/timing.h - a request's times and the engine's histograms of them: when its first byte
 * arrived (the kernel's receive timestamp of the data, SO_TIMESTAMPNS, else the time the engine
 * read it), when its head and its whole body were in, when a thread took it (the app call
 * follows at once) and when its response was handed back; queue time and request duration
 * counted in fixed buckets with atomic adds, and load shedding (queue_timeout).
 */
#ifndef MARGAY_CORE_TIMING_H
#define MARGAY_CORE_TIMING_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* OpenTelemetry's default bucket bounds for HTTP server durations, in seconds (the last bucket,
 * +Inf, is the count). */
#define MG_HIST_BUCKETS 14
extern const double mg_hist_bounds[MG_HIST_BUCKETS];

/* Counts per bucket (not cumulative: the reader adds them up; their total is the count) and the
 * sum in nanoseconds. Observed by any thread, read by Engine#stats; a reader may see an
 * observation's bucket without its sum, never a torn number. */
typedef struct {
  _Atomic uint64_t buckets[MG_HIST_BUCKETS + 1];
  _Atomic uint64_t sum_ns;
} mg_histogram;

void mg_histogram_observe(mg_histogram *h, int64_t ns);

/* Wall-clock nanoseconds (CLOCK_REALTIME: the kernel's receive timestamps are on that clock). */
static inline int64_t mg_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Monotonic nanoseconds (durations). */
static inline int64_t mg_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Ask the kernel to stamp the data of every connection accepted from TCP listener +fd+ (the
 * accepted sockets inherit it). */
void mg_timing_listen(int fd);

/* recv(2) of a connection, with the time its data arrived in *rx_ns: the kernel's stamp of the
 * last segment read when it gave one, else now. */
ssize_t mg_timing_recv(int fd, void *buf, size_t len, int64_t *rx_ns);

struct mg_engine;
struct mg_conn;

/* A thread takes the complete request on +c+ (owned): its queue time is counted; returns 0 when
 * it waited longer than queue_timeout since it was complete (answered 503 and counted as shed:
 * the connection is answered and given back, the caller has nothing to run), else 1. */
int mg_timing_admit(struct mg_engine *e, struct mg_conn *c);

/* The response of +c+'s request was handed to the engine (or the request ended without one):
 * its duration since mg_timing_admit is counted. */
void mg_timing_done(struct mg_engine *e, struct mg_conn *c);

/* Requests this engine has accepted that wait for a thread (Puma's backlog): while no thread
 * waits in the event loop, the connections given back to it whose client sent bytes no thread
 * has read yet (FIONREAD), and those requeued with a pipelined request buffered; 0 without a
 * look while a thread waits (it takes what comes at once). Clients not accepted yet are in the
 * listeners' accept queues, not here. With +oldest_ns+, also when the longest-waiting of them
 * arrived (wall clock; the kernel's stamp of its first unread bytes; 0: none waits or none was
 * stamped). One ioctl per connection held (and a peek per waiting one), so it is for the stats
 * and a look every 100 ms, not for every request. */
int mg_timing_backlog(struct mg_engine *e, int64_t *oldest_ns);

#endif
