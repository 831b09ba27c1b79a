/*
 * core/tls.c - TLS with OpenSSL (see core/tls.h): a connection's session on its socket: the first
 * byte told apart from plain HTTP, the non-blocking handshake and record I/O, close_notify, the
 * peer's certificate. Runs without the GVL (the event loop) and with it (responses written from
 * a Ruby thread, the env's peer certificate). The contexts the sessions are made from are
 * core/tls_ctx.c's.
 */
#include "core/tls.h"
#include <errno.h>
#include <sys/socket.h>

#ifdef MG_HAVE_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

int mg_tls_available(void) { return 1; }

const char *mg_tls_library(void) { return OpenSSL_version(OPENSSL_VERSION); }

int mg_tls_alpn_h2(const mg_tls *t) {
  if (!t->ssl) return 0;
  const unsigned char *p;
  unsigned int n;
  SSL_get0_alpn_selected(t->ssl, &p, &n);
  return n == 2 && p[0] == 'h' && p[1] == '2';
}

/* What an SSL_* call that returned +r+ <= 0 means: EAGAIN (wait), 0 (a clean close by the
 * peer), or another errno and the session is dead. Reads the error queue at once: the next
 * call on this thread may be for another connection. */
static int classify(mg_tls *t, int r) {
  int saved = errno;
  int e = SSL_get_error(t->ssl, r);
  ERR_clear_error();
  t->want_out = e == SSL_ERROR_WANT_WRITE;
  switch (e) {
  case SSL_ERROR_WANT_READ:
  case SSL_ERROR_WANT_WRITE:
    return EAGAIN;
  case SSL_ERROR_ZERO_RETURN:
    return 0;
  case SSL_ERROR_SYSCALL:
    t->state = MG_TLS_FAILED;
    return saved ? saved : EPIPE;
  default:
    t->state = MG_TLS_FAILED;
    return EPROTO;
  }
}

int mg_tls_handshake(mg_tls *t, int fd) {
  if (t->state == MG_TLS_HELLO) {
    unsigned char first;
    ssize_t n = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? MG_TLS_WANT_IN : MG_TLS_FAIL;
    if (n == 0) return MG_TLS_FAIL;
    if (first != 0x16) return MG_TLS_PLAIN; /* a TLS handshake record starts with 22 */
    t->state = MG_TLS_HANDSHAKE;
  }
  ERR_clear_error();
  int r = SSL_do_handshake(t->ssl);
  t->want_out = 0;
  if (r == 1) { t->state = MG_TLS_OPEN; return MG_TLS_DONE; }
  int e = SSL_get_error(t->ssl, r);
  ERR_clear_error();
  if (e == SSL_ERROR_WANT_READ) return MG_TLS_WANT_IN;
  if (e == SSL_ERROR_WANT_WRITE) { t->want_out = 1; return MG_TLS_WANT_OUT; }
  t->state = MG_TLS_FAILED;
  return MG_TLS_FAIL;
}

ssize_t mg_tls_read(mg_tls *t, void *buf, size_t len) {
  if (t->state != MG_TLS_OPEN) { errno = EPIPE; return -1; }
  ERR_clear_error();
  t->want_out = 0;
  size_t n = 0;
  t->dry = 0;
  if (SSL_read_ex(t->ssl, buf, len, &n) == 1) return (ssize_t)n;
  int err = classify(t, 0);
  /* dry only when it waits for the socket's input: a read that must write first (a TLS 1.3
   * KeyUpdate answered while the socket is full) may leave whole records read ahead */
  t->dry = err == EAGAIN && !t->want_out;
  if (err == 0) return 0;
  errno = err;
  return -1;
}

ssize_t mg_tls_write(mg_tls *t, const void *buf, size_t len) {
  if (t->state != MG_TLS_OPEN) { errno = EPIPE; return -1; }
  ERR_clear_error();
  t->want_out = 0;
  size_t n = 0;
  if (SSL_write_ex(t->ssl, buf, len, &n) == 1) return (ssize_t)n;
  int err = classify(t, 0);
  errno = err ? err : EPIPE; /* a close_notify received: the peer reads no more */
  return -1;
}

int mg_tls_pending(const mg_tls *t) {
  if (!t->ssl || t->state != MG_TLS_OPEN) return 0;
  return SSL_pending(t->ssl) > 0 || (!t->dry && SSL_has_pending(t->ssl));
}

void mg_tls_shutdown(mg_tls *t) {
  if (!t->ssl || t->state != MG_TLS_OPEN || (SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN)) return;
  ERR_clear_error();
  SSL_shutdown(t->ssl); /* sends close_notify if the socket takes it; the peer's is not awaited */
  ERR_clear_error();
}

void mg_tls_free(mg_tls *t) {
  if (!t->ssl) return;
  SSL_free(t->ssl);
  t->ssl = NULL;
  t->state = MG_TLS_OFF;
}

long mg_tls_peer_der(const mg_tls *t, unsigned char **der) {
  *der = NULL;
  if (!t->ssl || t->state != MG_TLS_OPEN) return 0;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  X509 *cert = SSL_get0_peer_certificate(t->ssl);
#else
  X509 *cert = SSL_get_peer_certificate(t->ssl);
  X509_free(cert); /* the session keeps its own reference */
#endif
  if (!cert || SSL_get_verify_result(t->ssl) != X509_V_OK) return 0;
  int n = i2d_X509(cert, der);
  if (n <= 0) { ERR_clear_error(); *der = NULL; return 0; }
  return n;
}

void mg_tls_free_der(unsigned char *der) { OPENSSL_free(der); }

#else /* built without OpenSSL: no connection is ever TLS (core/tls_ctx.c makes no context) */

int mg_tls_available(void) { return 0; }
const char *mg_tls_library(void) { return ""; }

int mg_tls_handshake(mg_tls *t, int fd) { (void)t; (void)fd; return MG_TLS_FAIL; }
ssize_t mg_tls_read(mg_tls *t, void *buf, size_t len) { (void)t; (void)buf; (void)len; errno = EPIPE; return -1; }
ssize_t mg_tls_write(mg_tls *t, const void *buf, size_t len) { (void)t; (void)buf; (void)len; errno = EPIPE; return -1; }
int mg_tls_pending(const mg_tls *t) { (void)t; return 0; }
int mg_tls_alpn_h2(const mg_tls *t) { (void)t; return 0; }
void mg_tls_shutdown(mg_tls *t) { (void)t; }
void mg_tls_free(mg_tls *t) { t->ssl = NULL; t->state = MG_TLS_OFF; }
long mg_tls_peer_der(const mg_tls *t, unsigned char **der) { (void)t; *der = NULL; return 0; }
void mg_tls_free_der(unsigned char *der) { (void)der; }

#endif
