/*
 * core/tls.h - TLS with OpenSSL: one context per TLS listener (made once, before any fork, so
 * every worker of a cluster shares its session-ticket keys) and one session per connection,
 * driven non-blocking on the connection's socket. Without OpenSSL at build time (no
 * MG_HAVE_TLS) the same functions exist and mg_tls_available() is 0: a context cannot be made,
 * so no connection is ever TLS.
 *
 * Threads: a context is read-only once made (OpenSSL locks what it shares, the session cache),
 * but for its certificates, which mg_tls_ctx_reload swaps under a lock.
 * A session belongs to its connection and is used only by the connection's owner (core/conn.h),
 * which may be another thread for each event: every call clears OpenSSL's per-thread error
 * queue first and reads it right after. The handshake runs only without the GVL (core/loop.c).
 */
#ifndef MARGAY_CORE_TLS_H
#define MARGAY_CORE_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct mg_tls_ctx mg_tls_ctx;

/* A connection's TLS state: nothing (plain), or its session and how far it got. */
enum mg_tls_state {
  MG_TLS_OFF = 0,       /* a plain connection */
  MG_TLS_HELLO = 1,     /* no byte seen yet: the first decides (a handshake record, or plain HTTP) */
  MG_TLS_HANDSHAKE = 2, /* handshake under way */
  MG_TLS_OPEN = 3,      /* records flow */
  MG_TLS_FAILED = 4     /* a fatal error: no close_notify may follow */
};

typedef struct {
  void *ssl;   /* SSL *, or NULL */
  int state;   /* enum mg_tls_state */
  int want_out; /* the last handshake step or read waits for the socket to be writable (OpenSSL
                 * has bytes of its own to send: a session ticket, a key update), else readable */
  int dry;      /* the last read wanted more from the socket: what the session holds undecrypted
                 * (read ahead) is part of a record whose rest the socket will announce */
} mg_tls;

/* A certificate and its key for the clients that ask for +name+ by SNI: an exact host name
 * ("api.example.com") or a wildcard for one label ("*.example.com"). Files or PEM text, as the
 * listener's own. */
typedef struct {
  const char *name;
  const char *cert, *key, *cert_pem, *key_pem;
} mg_tls_sni;

/* What a context is made of (Puma's ssl_bind options, read by the Ruby side). Strings are
 * NUL-terminated; NULL: not given. */
typedef struct {
  const char *cert, *key;          /* PEM files (the certificate file may hold the chain) */
  const char *cert_pem, *key_pem;  /* the same as PEM text, in place of the files */
  const mg_tls_sni *sni;           /* more certificates, chosen by the client's SNI name; a name */
  size_t nsni;                     /* none of them matches (or none sent) gets cert/key */
  const char *key_password;        /* for an encrypted key */
  const char *ca;                  /* PEM file of the CAs that sign client certificates */
  int verify;                      /* 0 none, 1 peer (a certificate is checked when sent), 2 force_peer */
  unsigned long verify_flags;      /* X509_V_FLAG_* */
  const char *cipher_filter;       /* TLS 1.2 cipher list; NULL: ECDHE with AEAD only */
  const char *ciphersuites;        /* TLS 1.3 suites; NULL: OpenSSL's (all AEAD) */
  long cache_size;                 /* server session cache: <0 off, 0 OpenSSL's default size */
  long cache_timeout;              /* its entries' lifetime in seconds; 0: OpenSSL's default */
  int alpn_h2;                     /* offer ALPN h2 and http/1.1 (an http2 listener); else no ALPN */
} mg_tls_options;

/* 1 when built with OpenSSL. */
int mg_tls_available(void);
/* The OpenSSL version the extension runs with ("OpenSSL 3.0.19 ..."), or "" without it. */
const char *mg_tls_library(void);

/* A context with the house policy (docs/SECURITY.md "TLS"): TLS 1.2 and 1.3 only, no
 * compression, no renegotiation, the server's cipher order. NULL with a one-line reason in
 * +err+ (a file that cannot be read, a key that does not match the certificate...). */
mg_tls_ctx *mg_tls_ctx_new(const mg_tls_options *o, char *err, size_t errlen);
void mg_tls_ctx_free(mg_tls_ctx *ctx);
/* Read the certificates and keys of +o+ (its cert, key, sni; the rest is ignored) again and use
 * them for the handshakes that start from now on; sessions already open keep theirs. 0, or -1
 * with a one-line reason in +err+ and the certificates in use unchanged. Any thread, any time
 * (a handshake picks its certificate under a lock held for a few pointer copies). */
int mg_tls_ctx_reload(mg_tls_ctx *ctx, const mg_tls_options *o, char *err, size_t errlen);

/* Start a session on connected socket +fd+ (state HELLO). 0, or -1 (no memory). */
int mg_tls_begin(mg_tls *t, mg_tls_ctx *ctx, int fd);

enum mg_tls_step {
  MG_TLS_DONE = 0,      /* the handshake is complete */
  MG_TLS_WANT_IN = 1,   /* wait for the socket to be readable */
  MG_TLS_WANT_OUT = 2,  /* wait for it to be writable */
  MG_TLS_FAIL = -1,     /* the peer went away or the handshake failed: close */
  MG_TLS_PLAIN = -2     /* the first byte is not a TLS handshake record: plain HTTP, most likely */
};
/* Advance the handshake as far as the socket allows. Without the GVL only. */
int mg_tls_handshake(mg_tls *t, int fd);

/* Like recv/send on a non-blocking socket: bytes, 0 at the peer's close (read), or -1 with
 * errno (EAGAIN: wait for the socket; anything else: the session is dead). A write takes at
 * most one record's worth; after EAGAIN it must be retried with the same bytes at the start of
 * the buffer (the queue only grows at its tail, core/output.c). */
ssize_t mg_tls_read(mg_tls *t, void *buf, size_t len);
ssize_t mg_tls_write(mg_tls *t, const void *buf, size_t len);
/* Whether bytes wait inside the session that the socket's readiness does not show: decrypted
 * ones, or whole records read ahead and not decrypted yet (after a read that stopped short of
 * the socket's end). The part of a record not yet received is the socket's to announce. Every
 * session reads ahead (its context's setting): a read from the socket takes what it has, up to
 * MG_TLS_READ_AHEAD bytes, so records that came together (pipelined requests, a request sent
 * with the handshake's Finished, HTTP/2 frames) may wait here with the socket dry. Whoever
 * hands a connection back to epoll for input asks this first (mg_conn_arm). */
int mg_tls_pending(const mg_tls *t);
#define MG_TLS_READ_AHEAD 65536
/* Whether the client chose h2 by ALPN (only on a context made with alpn_h2). */
int mg_tls_alpn_h2(const mg_tls *t);
/* One non-blocking close_notify, when the session is open (best effort: never waits). */
void mg_tls_shutdown(mg_tls *t);
/* Free the session (state OFF afterwards). */
void mg_tls_free(mg_tls *t);
/* The client's certificate (DER) when it sent one and it was verified: its length, *der set
 * (free it with mg_tls_free_der); 0 when there is none. */
long mg_tls_peer_der(const mg_tls *t, unsigned char **der);
void mg_tls_free_der(unsigned char *der);

#endif
