/*
 * core/tls.c - TLS with OpenSSL (see core/tls.h): the context and its policy, the non-blocking
 * handshake and record I/O on a connection's socket, close_notify. Runs without the GVL
 * (the event loop) and with it (responses written from a Ruby thread, the env's peer
 * certificate); the context is made with it.
 */
#include "core/tls.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifdef MG_HAVE_TLS
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

struct mg_tls_ctx {
  SSL_CTX *ctx;
};

/* TLS 1.2's suites when none is configured: ephemeral ECDH key exchange and AEAD ciphers only
 * (no CBC, no RSA key exchange, no DHE). TLS 1.3's are all AEAD with ephemeral keys. */
#define MG_TLS12_CIPHERS                                                                        \
  "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"   \
  "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

int mg_tls_available(void) { return 1; }

const char *mg_tls_library(void) { return OpenSSL_version(OPENSSL_VERSION); }

/* The reason for +what+ failing: OpenSSL's last error (the queue is emptied). */
static void fail(char *err, size_t errlen, const char *what) {
  unsigned long code = 0, last;
  while ((last = ERR_get_error()) != 0) code = last;
  char reason[256] = "";
  if (code) ERR_error_string_n(code, reason, sizeof reason);
  snprintf(err, errlen, "%s%s%s", what, code ? ": " : "", reason);
}

static int password_cb(char *buf, int size, int rwflag, void *userdata) {
  (void)rwflag;
  const char *pw = userdata;
  if (!pw) return 0;
  size_t n = strlen(pw);
  if (n > (size_t)size) n = (size_t)size;
  memcpy(buf, pw, n);
  return (int)n;
}

/* The certificate (and the chain after it) from PEM text. */
static int use_cert_pem(SSL_CTX *ctx, const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (!bio) return 0;
  X509 *cert = PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL);
  int ok = cert && SSL_CTX_use_certificate(ctx, cert) == 1;
  X509_free(cert);
  X509 *ca;
  while (ok && (ca = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
    ok = SSL_CTX_add0_chain_cert(ctx, ca) == 1;
    if (!ok) X509_free(ca);
  }
  if (ok) ERR_clear_error(); /* the end of the text reads as "no start line" */
  BIO_free(bio);
  return ok;
}

static int use_key_pem(SSL_CTX *ctx, const char *pem, const char *password) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  if (!bio) return 0;
  EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, password_cb, (void *)password);
  int ok = key && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  BIO_free(bio);
  return ok;
}

static int load_identity(SSL_CTX *ctx, const mg_tls_options *o, char *err, size_t errlen) {
  char what[512];
  if (o->cert_pem ? !use_cert_pem(ctx, o->cert_pem) : SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1) {
    snprintf(what, sizeof what, "cannot use the certificate %s", o->cert_pem ? "(cert_pem)" : o->cert);
    fail(err, errlen, what);
    return 0;
  }
  if (o->key_pem ? !use_key_pem(ctx, o->key_pem, o->key_password)
                 : SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1) {
    snprintf(what, sizeof what, "cannot use the key %s", o->key_pem ? "(key_pem)" : o->key);
    fail(err, errlen, what);
    return 0;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    fail(err, errlen, "the key does not match the certificate");
    return 0;
  }
  return 1;
}

static int load_verify(SSL_CTX *ctx, const mg_tls_options *o, char *err, size_t errlen) {
  if (o->ca) {
    char what[512];
    snprintf(what, sizeof what, "cannot read the CA file %s", o->ca);
    if (SSL_CTX_load_verify_locations(ctx, o->ca, NULL) != 1) { fail(err, errlen, what); return 0; }
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->ca);
    if (!names) { fail(err, errlen, what); return 0; }
    SSL_CTX_set_client_CA_list(ctx, names);
  }
  if (o->verify) {
    int mode = SSL_VERIFY_PEER | (o->verify == 2 ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0);
    SSL_CTX_set_verify(ctx, mode, NULL);
  }
  if (o->verify_flags) X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), o->verify_flags);
  return 1;
}

/* ALPN on an http2 listener: h2 when the client offers it, else http/1.1 (when offered); a
 * client offering neither goes on without ALPN (HTTP/1.1). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  (void)ssl; (void)arg;
  static const unsigned char ours[] = "\x02h2\x08http/1.1";
  unsigned char *chosen;
  if (SSL_select_next_proto(&chosen, outlen, ours, sizeof ours - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

int mg_tls_alpn_h2(const mg_tls *t) {
  if (!t->ssl) return 0;
  const unsigned char *p;
  unsigned int n;
  SSL_get0_alpn_selected(t->ssl, &p, &n);
  return n == 2 && p[0] == 'h' && p[1] == '2';
}

mg_tls_ctx *mg_tls_ctx_new(const mg_tls_options *o, char *err, size_t errlen) {
  ERR_clear_error();
  mg_tls_ctx *t = calloc(1, sizeof *t);
  SSL_CTX *ctx = t ? SSL_CTX_new(TLS_server_method()) : NULL;
  if (!ctx) { fail(err, errlen, "cannot make a TLS context"); free(t); return NULL; }
  t->ctx = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  /* A write takes what one record carries and may be retried from a moved buffer (the output
   * queue coalesces anew each time); an idle connection keeps no record buffers. */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_default_passwd_cb(ctx, password_cb);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)o->key_password); /* used while loading only */
  static const unsigned char sid_ctx[] = "margay";
  SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
  if (o->cache_size < 0) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    if (o->cache_size > 0) SSL_CTX_sess_set_cache_size(ctx, o->cache_size);
    if (o->cache_timeout > 0) SSL_CTX_set_timeout(ctx, o->cache_timeout);
  }
  const char *ciphers = o->cipher_filter ? o->cipher_filter : MG_TLS12_CIPHERS;
  int ok = SSL_CTX_set_cipher_list(ctx, ciphers) == 1;
  if (!ok) fail(err, errlen, "ssl_cipher_filter names no usable cipher");
  if (ok && o->ciphersuites && SSL_CTX_set_ciphersuites(ctx, o->ciphersuites) != 1) {
    fail(err, errlen, "ssl_ciphersuites names no usable TLS 1.3 suite");
    ok = 0;
  }
  ok = ok && load_identity(ctx, o, err, errlen) && load_verify(ctx, o, err, errlen);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
  if (ok && o->alpn_h2) SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  if (!ok) { mg_tls_ctx_free(t); return NULL; }
  return t;
}

void mg_tls_ctx_free(mg_tls_ctx *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx); /* sessions hold their own reference: it goes with the last of them */
  free(t);
}

int mg_tls_begin(mg_tls *t, mg_tls_ctx *ctx, int fd) {
  ERR_clear_error();
  SSL *ssl = SSL_new(ctx->ctx);
  if (!ssl || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    ERR_clear_error();
    return -1;
  }
  SSL_set_accept_state(ssl);
  t->ssl = ssl;
  t->state = MG_TLS_HELLO;
  t->want_out = 0;
  return 0;
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
  if (SSL_read_ex(t->ssl, buf, len, &n) == 1) return (ssize_t)n;
  int err = classify(t, 0);
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

int mg_tls_pending(const mg_tls *t) { return t->ssl && t->state == MG_TLS_OPEN && SSL_pending(t->ssl) > 0; }

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

#else /* built without OpenSSL: no context can be made, so no connection is ever TLS */

struct mg_tls_ctx {
  int unused;
};

int mg_tls_available(void) { return 0; }
const char *mg_tls_library(void) { return ""; }

mg_tls_ctx *mg_tls_ctx_new(const mg_tls_options *o, char *err, size_t errlen) {
  (void)o;
  snprintf(err, errlen, "Margay was built without OpenSSL");
  return NULL;
}

void mg_tls_ctx_free(mg_tls_ctx *ctx) { (void)ctx; }
int mg_tls_begin(mg_tls *t, mg_tls_ctx *ctx, int fd) { (void)t; (void)ctx; (void)fd; return -1; }
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
