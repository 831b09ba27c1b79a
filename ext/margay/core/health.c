/*
 * core/health.c - health answered by the engine (see core/health.h). The health thread polls
 * the health listeners and its own few connections with poll(2): one request per connection,
 * answered and closed, every exchange bounded in bytes and time. No Ruby, no GVL.
 */
#include "core/health.h"
#include "core/board.h"
#include "http/parser.h"
#include "http/status.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

struct mg_text {
  _Atomic uint64_t seq;
  _Atomic size_t len;
  size_t cap;
  char data[];
};

mg_text *mg_text_map(void) {
  void *m = mmap(NULL, sizeof(mg_text) + MG_TEXT_CAP, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  mg_text *t = m;
  t->cap = MG_TEXT_CAP;
  return t;
}

void mg_text_unmap(mg_text *t) { munmap(t, sizeof(mg_text) + t->cap); }

int mg_text_set(mg_text *t, const char *s, size_t n) {
  if (n > t->cap) return -1;
  uint64_t seq = atomic_load(&t->seq);
  atomic_store(&t->seq, seq | 1); /* odd: being written */
  atomic_thread_fence(memory_order_seq_cst);
  memcpy(t->data, s, n);
  atomic_store(&t->len, n);
  atomic_thread_fence(memory_order_seq_cst);
  atomic_store(&t->seq, (seq | 1) + 1);
  return 0;
}

char *mg_text_copy(mg_text *t, size_t *n) {
  for (int tries = 0; tries < 100; tries++) {
    uint64_t before = atomic_load(&t->seq);
    if (before == 0) return NULL;
    if (before & 1) { usleep(100); continue; }
    size_t len = atomic_load(&t->len);
    char *out = malloc(len ? len : 1);
    if (!out) return NULL;
    memcpy(out, t->data, len);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&t->seq) == before) { *n = len; return out; }
    free(out);
  }
  return NULL;
}

int mg_health_ready(const mg_engine *e) {
  if (e->board_slots) return mg_board_any_ready(e);
  return atomic_load(&e->started) && !atomic_load(&e->draining) && !atomic_load(&e->stopping);
}

int mg_health_closing(const mg_engine *e) {
  if (atomic_load(&e->draining) || atomic_load(&e->stopping)) return 1;
  return e->board_slots && atomic_load(mg_board_drain_flag(e->board_slots, e->board_n));
}

#define TEXT_PLAIN "text/plain"
#define PROMETHEUS_TEXT "text/plain; version=0.0.4; charset=utf-8" /* the text exposition format */

/* The status line and fields of an answer with a body of +blen+ bytes; connection: close unless
 * keep_alive. Returns the head's length (0 when it does not fit). */
static size_t answer_head(char *out, size_t cap, int status, const char *ctype, const char *extra, size_t blen,
                          int keep_alive, int minor) {
  char date[64];
  size_t dlen = mg_date_header(date);
  const char *conn = !keep_alive ? "connection: close\r\n" : minor == 0 ? "connection: keep-alive\r\n" : "";
  int n = snprintf(out, cap,
                   "HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %zu\r\n"
                   "cache-control: no-store\r\n%s%s%.*s\r\n",
                   status, mg_reason(status), ctype, blen, extra, conn, (int)dlen, date);
  return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

/* A small plain-text answer, whole (no body for HEAD). */
static size_t answer(char *out, size_t cap, int status, const char *extra, const char *body, size_t blen,
                     int head, int keep_alive, int minor) {
  size_t len = answer_head(out, cap, status, TEXT_PLAIN, extra, blen, keep_alive, minor);
  if (len && !head && len + blen <= cap) {
    memcpy(out + len, body, blen);
    len += blen;
  }
  return len;
}

size_t mg_health_probe_answer(char *out, size_t cap, int ready, int head, int keep_alive, int minor) {
  return ready ? answer(out, cap, 200, "", "ready\n", 6, head, keep_alive, minor)
               : answer(out, cap, 503, "", "not ready\n", 10, head, keep_alive, minor);
}

int mg_health_is_probe(const mg_engine *e, const char *method, size_t mlen, const char *path, size_t plen) {
  const char *want = e->cfg.health_path;
  size_t wlen = strlen(want);
  if (!wlen || plen != wlen || memcmp(path, want, wlen) != 0) return 0;
  return (mlen == 3 && memcmp(method, "GET", 3) == 0) || (mlen == 4 && memcmp(method, "HEAD", 4) == 0);
}

/* ---- the health thread ---- */

#define HC_MAX 64             /* connections served at once; a new one evicts the oldest */
#define HC_HEAD 8192          /* a request head longer than this: 431 */
#define HC_TIMEOUT_MS 5000    /* a whole exchange, request to close */
#define HC_LINGER_MS 1000     /* after the answer, what the client still sends is discarded */

typedef struct {
  int fd;                     /* -1: free */
  int64_t deadline_ms;
  size_t rlen;
  char *out;                  /* the answer, malloc'd; NULL before it */
  size_t olen, opos;
  int lingering;              /* answered, write side shut: reading until EOF */
  int64_t since_ms;           /* accepted: the oldest gives way when all are taken */
  char *rbuf;                 /* HC_HEAD bytes, malloc'd */
} hconn;

static void hc_close(hconn *h) {
  close(h->fd);
  h->fd = -1;
  free(h->out);
  h->out = NULL;
  free(h->rbuf);
  h->rbuf = NULL;
}

/* What the health listener answers to the request in h->rbuf (parsed as +r+ by +st+). */
static void hc_route(mg_engine *e, hconn *h, long st, const mg_request *r) {
  char small[1024];
  size_t n;
  if (st < 0) {
    n = mg_status_page(small, sizeof small, (int)-st);
  } else {
    const char *m = h->rbuf + r->method.off, *p = h->rbuf + r->path.off;
    size_t ml = r->method.len, pl = r->path.len;
    int head = ml == 4 && memcmp(m, "HEAD", 4) == 0;
    int get = ml == 3 && memcmp(m, "GET", 3) == 0;
#define IS(s) (pl == sizeof s - 1 && memcmp(p, s, sizeof s - 1) == 0)
    if (!get && !head) {
      n = answer(small, sizeof small, 405, "allow: GET, HEAD\r\n", "Method Not Allowed\n", 19, 0, 0, 1);
    } else if (IS("/livez")) {
      n = answer(small, sizeof small, 200, "", "ok\n", 3, head, 0, 1);
    } else if (IS("/readyz")) {
      n = mg_health_probe_answer(small, sizeof small, mg_health_ready(e), head, 0, 1);
    } else if (IS("/metrics")) {
      mg_text *t = atomic_load(&e->metrics);
      size_t tl = 0;
      char *text = t ? mg_text_copy(t, &tl) : NULL;
      if (text) {
        n = answer_head(small, sizeof small, 200, PROMETHEUS_TEXT, "", tl, 0, 1);
        h->out = malloc(n + tl);
        if (h->out) {
          memcpy(h->out, small, n);
          if (!head) memcpy(h->out + n, text, tl);
          h->olen = n + (head ? 0 : tl);
          h->opos = 0;
        }
        free(text);
        if (!h->out) hc_close(h);
        return;
      }
      n = answer(small, sizeof small, 404, "", "no metrics yet\n", 15, head, 0, 1);
    } else {
      n = answer(small, sizeof small, 404, "", "Not Found\n", 10, head, 0, 1);
    }
#undef IS
  }
  h->out = malloc(n ? n : 1);
  if (!h->out) { hc_close(h); return; }
  memcpy(h->out, small, n);
  h->olen = n;
  h->opos = 0;
}

/* Write what the socket takes; once all is out, shut the write side and linger. */
static void hc_write(hconn *h) {
  while (h->opos < h->olen) {
    ssize_t w = send(h->fd, h->out + h->opos, h->olen - h->opos, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) { h->opos += (size_t)w; continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    hc_close(h);
    return;
  }
  shutdown(h->fd, SHUT_WR);
  h->lingering = 1;
  h->deadline_ms = mg_now_ms() + HC_LINGER_MS;
}

static void hc_read(mg_engine *e, hconn *h, mg_request *req) {
  char sink[4096];
  for (;;) {
    char *dst = h->lingering || h->out ? sink : h->rbuf + h->rlen;
    size_t room = h->lingering || h->out ? sizeof sink : HC_HEAD - h->rlen;
    ssize_t n = recv(h->fd, dst, room, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) { hc_close(h); return; } /* EOF or error: a half-sent request is not answered */
    if (h->lingering || h->out) continue;
    h->rlen += (size_t)n;
    mg_limits lim = {2048, HC_HEAD, 64, NULL};
    long st = mg_parse_head(h->rbuf, h->rlen, &lim, req);
    if (st == 0 && h->rlen < HC_HEAD) continue;
    if (st == 0) st = -431;
    hc_route(e, h, st, req);
    if (h->fd >= 0) hc_write(h);
    return;
  }
}

/* Accept what is waiting, up to HC_MAX per call. With every slot taken the oldest connection
 * gives way: clients that connect and say nothing cannot keep a probe out for long. */
static void hc_accept(int lfd, hconn *hs) {
  for (int taken = 0; taken < HC_MAX; taken++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return; /* EAGAIN: another worker took it, or none left; EMFILE: the backlog keeps it */
    hconn *h = NULL;
    for (int i = 0; i < HC_MAX; i++) {
      if (hs[i].fd < 0) { h = &hs[i]; break; }
      if (!h || hs[i].since_ms < h->since_ms) h = &hs[i];
    }
    if (h->fd >= 0) hc_close(h);
    h->rbuf = malloc(HC_HEAD);
    if (!h->rbuf) { close(fd); return; }
    h->fd = fd;
    h->rlen = 0;
    h->out = NULL;
    h->olen = h->opos = 0;
    h->lingering = 0;
    h->since_ms = mg_now_ms();
    h->deadline_ms = h->since_ms + HC_TIMEOUT_MS;
  }
}

static void *health_main(void *arg) {
  mg_engine *e = arg;
  hconn *hs = calloc(HC_MAX, sizeof *hs);
  mg_request *req = malloc(sizeof *req);
  if (!hs || !req) { free(hs); free(req); return NULL; }
  for (int i = 0; i < HC_MAX; i++) hs[i].fd = -1;
  struct pollfd pf[1 + MG_MAX_HEALTH_LISTENERS + HC_MAX];
  int slot[HC_MAX];
  for (;;) {
    int np = 0;
    pf[np++] = (struct pollfd){e->health_wake.rd, POLLIN, 0};
    int64_t now = mg_now_ms(), next = now + 1000;
    for (int i = 0; i < HC_MAX; i++)
      if (hs[i].fd >= 0 && hs[i].deadline_ms < next) next = hs[i].deadline_ms;
    int first_listener = np;
    for (int i = 0; i < e->nhealth; i++) pf[np++] = (struct pollfd){e->health_fds[i], POLLIN, 0};
    int last_listener = np, nslots = 0;
    for (int i = 0; i < HC_MAX; i++) {
      if (hs[i].fd < 0) continue;
      short ev = hs[i].out && !hs[i].lingering ? POLLOUT : POLLIN;
      slot[nslots++] = i;
      pf[np++] = (struct pollfd){hs[i].fd, ev, 0};
    }
    int timeout = next > now ? (int)(next - now) : 0;
    int r = poll(pf, (nfds_t)np, timeout);
    if (r < 0 && errno != EINTR) break;
    if (pf[0].revents) break; /* told to end */
    for (int k = last_listener; r > 0 && k < np; k++) {
      hconn *h = &hs[slot[k - last_listener]];
      if (!pf[k].revents || h->fd != pf[k].fd) continue;
      if (pf[k].events & POLLOUT) hc_write(h);
      else hc_read(e, h, req);
    }
    /* last: an accepted connection may take the slot (and fd number) of one polled above */
    for (int k = first_listener; r > 0 && k < last_listener; k++)
      if (pf[k].revents & POLLIN) hc_accept(pf[k].fd, hs);
    now = mg_now_ms();
    for (int i = 0; i < HC_MAX; i++)
      if (hs[i].fd >= 0 && hs[i].deadline_ms <= now) hc_close(&hs[i]);
  }
  for (int i = 0; i < HC_MAX; i++)
    if (hs[i].fd >= 0) hc_close(&hs[i]);
  free(hs);
  free(req);
  return NULL;
}

int mg_health_start(mg_engine *e) {
  if (e->nhealth == 0 || e->health_running) return 0;
  if (mg_wake_open(&e->health_wake) != 0) return -1;
  int err = pthread_create(&e->health_thread, NULL, health_main, e);
  if (err) {
    mg_wake_close(&e->health_wake);
    errno = err;
    return -1;
  }
  e->health_running = 1;
  return 0;
}

void mg_health_stop(mg_engine *e) {
  if (!e->health_running) return;
  mg_wake_signal(&e->health_wake);
  pthread_join(e->health_thread, NULL);
  mg_wake_close(&e->health_wake);
  e->health_running = 0;
}
