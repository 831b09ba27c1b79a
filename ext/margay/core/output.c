/*
 * core/output.c - the output queue: segments of memory (copied, or borrowed from a pinned owner
 * without copying), files sent with sendfile, and the spill tempfile of streamed bodies; flushing
 * them with non-blocking writev/sendfile. Used by the event loop (no GVL) and by ruby/respond.c and
 * ruby/stream.c (with it).
 */
#include "core/output.h"
#include "core/tempfile.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#ifdef HAVE_SYS_SENDFILE_H
#include <sys/sendfile.h>
#endif

static void queue_seg(mg_out *o, mg_seg *s) {
  s->next = NULL;
  if (o->tail) o->tail->next = s; else o->head = s;
  o->tail = s;
}

/* Output buffers. Large ones (whole response bodies) are mapped directly, so
 * that freeing them returns the memory to the system at once instead of
 * leaving the allocator holding fragmented heap. */
#define MG_BIG_BUFFER (256 * 1024)

char *mg_buf_alloc(size_t size) {
  if (size < MG_BIG_BUFFER) return malloc(size ? size : 1);
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void mg_buf_free(char *p, size_t size) {
  if (!p) return;
  if (size < MG_BIG_BUFFER) free(p);
  else munmap(p, size);
}

/* ---- pins ---- */

void mg_pins_init(mg_pins *p) {
  pthread_mutex_init(&p->lock, NULL);
  p->entries = NULL;
  p->len = p->cap = 0;
}

void mg_pins_destroy(mg_pins *p) {
  free(p->entries);
  p->entries = NULL;
  p->len = p->cap = 0;
  pthread_mutex_destroy(&p->lock);
}

void mg_pins_each(mg_pins *p, void (*fn)(mg_ref)) {
  pthread_mutex_lock(&p->lock);
  for (size_t i = 0; i < p->len; i++) fn(p->entries[i].ref);
  pthread_mutex_unlock(&p->lock);
}

static void unpin(mg_seg *s) {
  mg_pins *p = s->pins;
  pthread_mutex_lock(&p->lock);
  size_t i = s->pin_index, last = p->len - 1;
  if (i != last) {
    p->entries[i] = p->entries[last];
    p->entries[i].seg->pin_index = i;
  }
  p->len--;
  pthread_mutex_unlock(&p->lock);
}

static void free_seg(mg_seg *s) {
  if (s->file_fd >= 0) close(s->file_fd);
  if (s->pins) unpin(s); /* the bytes are the owner's: just let go of them */
  else mg_buf_free(s->data, s->cap);
  free(s);
}

/* ---- queueing ---- */

int mg_out_queue_pinned(mg_out *o, mg_pins *p, const char *data, size_t len, mg_ref ref) {
  mg_seg *s = calloc(1, sizeof *s);
  if (!s) return -1;
  pthread_mutex_lock(&p->lock);
  if (p->len == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    struct mg_pin *n = realloc(p->entries, cap * sizeof *n);
    if (!n) { pthread_mutex_unlock(&p->lock); free(s); return -1; }
    p->entries = n;
    p->cap = cap;
  }
  s->pins = p;
  s->pin_index = p->len;
  p->entries[p->len].ref = ref;
  p->entries[p->len].seg = s;
  p->len++;
  pthread_mutex_unlock(&p->lock);
  s->data = (char *)data; /* never written through: a pinned segment is only sent */
  s->len = len;
  s->file_fd = -1;
  queue_seg(o, s);
  o->bytes += s->len;
  return 0;
}

void mg_out_free(mg_out *o) {
  mg_seg *s = o->head;
  while (s) {
    mg_seg *n = s->next;
    free_seg(s);
    s = n;
  }
  o->head = o->tail = NULL;
  o->bytes = 0;
  o->broken = 0;
}

/* Out of memory while queueing: the response on the wire would miss bytes,
 * so the queue is marked and the next flush fails (the connection closes). */
static void queue_failed(mg_out *o) { o->broken = 1; }

void mg_out_queue_owned(mg_out *o, char *data, size_t len, size_t cap) {
  mg_seg *s = calloc(1, sizeof *s);
  if (!s) { mg_buf_free(data, cap); queue_failed(o); return; }
  s->data = data; s->len = len; s->cap = cap; s->off = 0; s->file_fd = -1; s->file_off = 0; s->file_left = 0;
  queue_seg(o, s);
  o->bytes += len;
}

void mg_out_queue(mg_out *o, const char *data, size_t len) {
  if (!len) return;
  char *copy = mg_buf_alloc(len);
  if (!copy) { queue_failed(o); return; }
  memcpy(copy, data, len);
  mg_out_queue_owned(o, copy, len, len);
}

void mg_out_send(mg_out *o, int fd, mg_tls *tls, const char *data, size_t len) {
  ssize_t w = 0;
  if (!o->head && !o->broken && !(tls && tls->ssl) && len) {
    do w = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w < 0) w = 0; /* the flush that follows meets the error again, or waits */
    o->sent += (uint64_t)w;
  }
  mg_out_queue(o, data + w, len - (size_t)w);
}

int mg_out_queue_file(mg_out *o, int fd, off_t off, uint64_t len) {
  mg_seg *s = calloc(1, sizeof *s);
  if (!s) { close(fd); queue_failed(o); return -1; }
  s->file_fd = fd; s->file_off = off; s->file_left = len;
  queue_seg(o, s);
  return 0;
}

/* Append streamed output to the spill file (an unlinked tempfile) instead of
 * memory: the Ruby thread never waits for a slow reader, memory stays
 * bounded, and the event loop sends the file with sendfile. */
int mg_out_spill(mg_out *o, const char *tmpdir, const struct iovec *iov, int n) {
  if (o->spill_fd < 0 && (o->spill_fd = mg_open_tempfile(tmpdir)) < 0) return -1;
  size_t total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  off_t at = o->spill_end;
  size_t done = 0;
  while (done < total) {
    struct iovec rest[4];
    int k = 0;
    size_t skip = done;
    for (int i = 0; i < n && k < 4; i++) {
      if (skip >= iov[i].iov_len) { skip -= iov[i].iov_len; continue; }
      rest[k].iov_base = (char *)iov[i].iov_base + skip;
      rest[k].iov_len = iov[i].iov_len - skip;
      skip = 0;
      k++;
    }
    ssize_t w = pwritev(o->spill_fd, rest, k, at + (off_t)done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1; /* 0: no progress (a full disk, say): give up rather than spin */
    done += (size_t)w;
  }
  o->spill_end = at + (off_t)total;
  mg_seg *t = o->tail;
  if (t && t->spill && t->file_off + (off_t)t->file_left == at) {
    t->file_left += total; /* still unsent and contiguous: grow it */
    return 0;
  }
  int fd = dup(o->spill_fd);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (mg_out_queue_file(o, fd, at, total) != 0) return -1;
  o->tail->spill = 1;
  return 0;
}

void mg_out_end_spill(mg_out *o) {
  if (o->spill_fd >= 0) { close(o->spill_fd); o->spill_fd = -1; }
  o->spill_end = 0;
}

/* ---- flushing ---- */

/* The socket took +w+ bytes of the memory segments at the head of the queue. */
static void consume(mg_out *o, size_t w) {
  o->bytes -= w;
  o->sent += w;
  while (w && o->head && o->head->file_fd < 0) {
    mg_seg *t = o->head;
    size_t avail = t->len - t->off;
    if (w < avail) { t->off += w; return; }
    w -= avail;
    o->head = t->next;
    if (!o->head) o->tail = NULL;
    free_seg(t);
  }
}

/* A write's result: 1 go on, 0 the socket is full, -1 an error. */
static int write_failed(void) {
  if (errno == EINTR) return 1;
  return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
}

static int flush_file(mg_out *o, int fd, mg_seg *s) {
  while (s->file_left) {
    size_t want = s->file_left > (1u << 20) ? (1u << 20) : (size_t)s->file_left;
    ssize_t n;
#ifdef HAVE_SENDFILE
    n = sendfile(fd, s->file_fd, &s->file_off, want);
    if (n < 0 && (errno == EINVAL || errno == ENOSYS))
#endif
    {
      char buf[65536];
      if (want > sizeof buf) want = sizeof buf;
      n = pread(s->file_fd, buf, want, s->file_off);
      if (n > 0) {
        ssize_t w = send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) s->file_off += w;
        n = w;
      } else if (n == 0) {
        return -1; /* the file shrank: the announced length can no longer be met */
      }
    }
    if (n < 0) {
      int r = write_failed();
      if (r == 1) continue;
      return r;
    }
    if (n == 0) return -1;
    s->file_left -= (uint64_t)n;
    o->sent += (uint64_t)n;
  }
  return 1;
}

/* A file through TLS: a record's worth read at the current offset and written; after EAGAIN
 * the retry reads the same bytes again (the offset moves only with what was written). */
static int flush_file_tls(mg_out *o, mg_tls *tls, mg_seg *s) {
  char buf[MG_OUT_RECORD];
  while (s->file_left) {
    size_t want = s->file_left > sizeof buf ? sizeof buf : (size_t)s->file_left;
    ssize_t n = pread(s->file_fd, buf, want, s->file_off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1; /* unreadable, or the file shrank */
    ssize_t w = mg_tls_write(tls, buf, (size_t)n);
    if (w < 0) {
      int r = write_failed();
      if (r == 1) continue;
      return r;
    }
    s->file_off += w;
    s->file_left -= (uint64_t)w;
    o->sent += (uint64_t)w;
  }
  return 1;
}

/* Through TLS: a large segment written from its own bytes, small ones copied together into one
 * record. */
static ssize_t write_memory_tls(mg_out *o, mg_tls *tls) {
  char buf[MG_OUT_RECORD];
  mg_seg *s = o->head;
  size_t len = s->len - s->off;
  if (len >= sizeof buf) return mg_tls_write(tls, s->data + s->off, len);
  len = 0;
  for (mg_seg *t = s; t && t->file_fd < 0 && len < sizeof buf; t = t->next) {
    size_t n = t->len - t->off;
    if (n > sizeof buf - len) n = sizeof buf - len;
    memcpy(buf + len, t->data + t->off, n);
    len += n;
  }
  return mg_tls_write(tls, buf, len);
}

/* Memory segments one sendmsg takes: an HTTP/2 answer is two or three (HEADERS, DATA), and a
 * batch of answers held for one write (core/h2_respond.c) may be dozens. */
#define MG_OUT_IOV 64

/* One write of the memory segments at the head of the queue: up to MG_OUT_IOV of them in one
 * sendmsg, or a record through TLS. */
static ssize_t write_memory(mg_out *o, int fd, mg_tls *tls) {
  if (tls) return write_memory_tls(o, tls);
  struct iovec iov[MG_OUT_IOV];
  int n = 0;
  for (mg_seg *t = o->head; t && t->file_fd < 0 && n < MG_OUT_IOV; t = t->next) {
    iov[n].iov_base = t->data + t->off;
    iov[n].iov_len = t->len - t->off;
    n++;
  }
  struct msghdr msg = {0};
  msg.msg_iov = iov;
  msg.msg_iovlen = (size_t)n;
  return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static int flush_memory(mg_out *o, int fd, mg_tls *tls) {
  while (o->head && o->head->file_fd < 0) {
    ssize_t w = write_memory(o, fd, tls);
    if (w < 0) {
      int r = write_failed();
      if (r == 1) continue;
      return r;
    }
    consume(o, (size_t)w);
  }
  return 1;
}

int mg_out_flush(mg_out *o, int fd, mg_tls *tls) {
  if (o->broken) { errno = ENOMEM; return -1; }
  if (tls && !tls->ssl) tls = NULL;
  while (o->head) {
    mg_seg *s = o->head;
    if (s->file_fd >= 0) {
      int r = tls ? flush_file_tls(o, tls, s) : flush_file(o, fd, s);
      if (r <= 0) return r;
      o->head = s->next;
      if (!o->head) o->tail = NULL;
      close(s->file_fd);
      free(s);
    } else {
      int r = flush_memory(o, fd, tls);
      if (r <= 0) return r;
    }
  }
  return 1;
}
