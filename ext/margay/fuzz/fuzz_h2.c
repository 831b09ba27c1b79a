/*
 * fuzz/fuzz_h2.c - libFuzzer harness of HTTP/2 frame input (core/h2*.c): the input, after the
 * client preface, is what a client sends on an h2c connection. The engine runs for real without
 * Ruby: a connection on one end of a socketpair, its events taken and dispatched by the loop
 * (core/loop.c) until none is left, every complete request answered as Ruby would (a head and a
 * body under the connection's lock), then the connection closed. Links core/, ev/, http/ and
 * libnghttp2 (rakelib/fuzz.rake); no TLS.
 */
#include "core/h2.h"
#include "core/loop.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static mg_engine engine;

static void setup(void) {
  mg_settings *s = &engine.cfg;
  s->max_target = 8192;
  s->max_head = 16384;
  s->max_headers = 100;
  s->max_body = 1 << 20;
  s->body_buffer_size = 4096; /* larger bodies go through a tempfile too */
  s->max_chunk_ext = 4096;
  s->header_timeout_ms = s->body_timeout_ms = s->keepalive_timeout_ms = s->write_timeout_ms = 10000;
  s->max_keepalive_requests = 1000;
  s->response_buffer_limit = 1 << 20;
  s->max_connections = 16;
  strcpy(s->tmpdir, "/tmp");
  s->max_threads = 1;
  mg_engine_size(&engine);
  engine.max_fds = engine.max_fds > 4096 ? 4096 : engine.max_fds;
  if (mg_engine_open(&engine, MG_EV_EPOLL) != MG_OPEN_OK) abort();
  engine.listeners[0].fd = -1;
  engine.listeners[0].h2 = 1;
  engine.listeners[0].h2_connect = 1; /* extended CONNECT: tunnels too */
  engine.nlisteners = 1;
}

/* What Ruby does with a request: read a tunnel's input so far, answer it (a head, a body, the end). */
static void answer(mg_h2_req *q) {
  mg_conn *c;
  mg_h2_stream *s = mg_h2_lock_stream(&engine, q->fd, q->slot, q->seq, &c);
  if (s) {
    char in[4096];
    while (mg_h2_tunnel_read(c, s, in, sizeof in) > 0) {}
    static const mg_h2_nv nv[] = {{"content-type", "text/plain", 12, 10}};
    if (mg_h2_respond_head(c, s, 200, nv, 1, 1) == 0 && mg_h2_write(c, s, "ok", 2) == 0) mg_h2_finish(c, s);
    mg_h2_unlock(&engine, c);
  }
  mg_h2_req_free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) { setup(); ready = 1; }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  if (write(sv[1], preface, sizeof preface - 1) < 0 || (size && write(sv[1], data, size) < 0)) {
    close(sv[0]);
    close(sv[1]);
    return 0;
  }
  shutdown(sv[1], SHUT_WR); /* the client is done: the connection ends once it is answered */
  struct sockaddr_un peer = {.sun_family = AF_UNIX};
  if (mg_conn_start(&engine, sv[0], 0, (struct sockaddr *)&peer, sizeof peer, 0) != 0) { close(sv[1]); return 0; }
  char sink[65536];
  for (int i = 0; i < 10000; i++) {
    while (read(sv[1], sink, sizeof sink) > 0) {} /* the client reads what it is sent */
    mg_h2_req *q;
    while ((q = mg_h2_take(&engine))) answer(q);
    mg_ev_event ev;
    if (mg_loop_take(&engine, &ev, 0) != 1) break;
    mg_conn *c;
    if (mg_loop_dispatch(&engine, &ev, &c)) mg_conn_close(&engine, c); /* HTTP/1: not this harness's */
  }
  mg_conn_close_all(&engine); /* what is still open (the loop gave up) */
  close(sv[1]);
  return 0;
}
