/*
 * core/tls_ctx.c - a TLS listener's context (see core/tls.h): the policy (TLS 1.2+, ECDHE with
 * AEAD, no compression or renegotiation; client CAs, session cache, ALPN), its certificates (the
 * default and the SNI ones, a set swapped under a lock by a reload and picked per full handshake
 * by the client's SNI name), and a connection's session made from it. The context is made and
 * reloaded with the GVL; its callbacks run in handshakes, without it. core/tls.c drives the
 * sessions.
 */
#include "core/tls.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef MG_HAVE_TLS
#include <pthread.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

struct identities;

struct mg_tls_ctx {
  SSL_CTX *ctx;
  struct identities *ids; /* the certificates; swapped under identities_lock */
};

/* TLS 1.2's suites when none is configured: ephemeral ECDH key exchange and AEAD ciphers only
 * (no CBC, no RSA key exchange, no DHE). TLS 1.3's are all AEAD with ephemeral keys. */
#define MG_TLS12_CIPHERS                                                                        \
  "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"   \
  "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

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

/* One certificate with its chain and key; +name+ NULL for the listener's own (the default). */
typedef struct {
  char *name; /* lower case; "*.example.com" matches one label */
  X509 *cert;
  STACK_OF(X509) *chain;
  EVP_PKEY *key;
} identity;

/* The certificates of a context: [0] the default, then the SNI ones. Never changed once made:
 * a reload makes a new set and swaps it in. */
struct identities {
  size_t n;
  identity id[];
};

static void identities_free(struct identities *set) {
  if (!set) return;
  for (size_t i = 0; i < set->n; i++) {
    free(set->id[i].name);
    X509_free(set->id[i].cert);
    sk_X509_pop_free(set->id[i].chain, X509_free);
    EVP_PKEY_free(set->id[i].key);
  }
  free(set);
}

/* A PEM file (+file+) or PEM text (+pem+) as a BIO. */
static BIO *pem_bio(const char *file, const char *pem) {
  return pem ? BIO_new_mem_buf(pem, -1) : BIO_new_file(file, "r");
}

/* The certificate and the chain after it. */
static int read_cert(identity *id, const char *file, const char *pem) {
  BIO *bio = pem_bio(file, pem);
  if (!bio) return 0;
  id->cert = PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL);
  id->chain = sk_X509_new_null();
  int ok = id->cert && id->chain;
  X509 *ca;
  while (ok && (ca = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
    ok = sk_X509_push(id->chain, ca) > 0;
    if (!ok) X509_free(ca);
  }
  if (ok) ERR_clear_error(); /* the end of the text reads as "no start line" */
  BIO_free(bio);
  return ok;
}

static int read_key(identity *id, const char *file, const char *pem, const char *password) {
  BIO *bio = pem_bio(file, pem);
  if (!bio) return 0;
  id->key = PEM_read_bio_PrivateKey(bio, NULL, password_cb, (void *)password);
  BIO_free(bio);
  return id->key != NULL;
}

/* identity +id+ from files or PEM text; +label+ names it in an error ("" or " for NAME"). */
static int read_identity(identity *id, const char *cert, const char *cert_pem, const char *key, const char *key_pem,
                         const char *password, const char *label, char *err, size_t errlen) {
  char what[640];
  if (!read_cert(id, cert, cert_pem)) {
    snprintf(what, sizeof what, "cannot use the certificate%s %s", label, cert_pem ? "(cert_pem)" : cert);
    fail(err, errlen, what);
    return 0;
  }
  if (!read_key(id, key, key_pem, password)) {
    snprintf(what, sizeof what, "cannot use the key%s %s", label, key_pem ? "(key_pem)" : key);
    fail(err, errlen, what);
    return 0;
  }
  if (X509_check_private_key(id->cert, id->key) != 1) {
    snprintf(what, sizeof what, "the key does not match the certificate%s", label);
    fail(err, errlen, what);
    return 0;
  }
  return 1;
}

/* A host name as SNI carries it, or "*." and one: letters, digits, "-" and ".", lower-cased. */
static char *sni_name(const char *name) {
  size_t n = strlen(name), start = strncmp(name, "*.", 2) == 0 ? 2 : 0;
  if (n <= start || n > 253) return NULL;
  char *out = malloc(n + 1);
  if (!out) return NULL;
  for (size_t i = 0; i <= n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (i >= start && i < n && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) {
      free(out);
      return NULL;
    }
    out[i] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
  }
  return out;
}

static struct identities *read_identities(const mg_tls_options *o, char *err, size_t errlen) {
  struct identities *set = calloc(1, sizeof *set + (1 + o->nsni) * sizeof(identity));
  if (!set) { snprintf(err, errlen, "no memory"); return NULL; }
  set->n = 1 + o->nsni;
  if (!read_identity(&set->id[0], o->cert, o->cert_pem, o->key, o->key_pem, o->key_password, "", err, errlen))
    goto fail;
  for (size_t i = 0; i < o->nsni; i++) {
    const mg_tls_sni *s = &o->sni[i];
    char label[300];
    snprintf(label, sizeof label, " for %s", s->name ? s->name : "?");
    set->id[i + 1].name = s->name ? sni_name(s->name) : NULL;
    if (!set->id[i + 1].name) { snprintf(err, errlen, "bad SNI host name%s", label + 4); goto fail; }
    if (!read_identity(&set->id[i + 1], s->cert, s->cert_pem, s->key, s->key_pem, o->key_password, label, err, errlen))
      goto fail;
  }
  return set;
fail:
  identities_free(set);
  return NULL;
}

/* The identity for SNI name +host+ (NULL: none sent): an exact name first, then a wildcard for
 * its first label, else the default. */
static const identity *pick(const struct identities *set, const char *host) {
  if (!host) return &set->id[0];
  const char *dot = strchr(host, '.');
  for (size_t i = 1; i < set->n; i++)
    if (strcasecmp(set->id[i].name, host) == 0) return &set->id[i];
  if (dot && dot != host)
    for (size_t i = 1; i < set->n; i++)
      if (set->id[i].name[0] == '*' && strcasecmp(set->id[i].name + 1, dot) == 0) return &set->id[i];
  return &set->id[0];
}

/* One lock for the certificate sets of every context: taken for a few pointer copies per full
 * handshake and a swap per reload. Held across fork() by nobody: the child of a process whose
 * loop thread was inside a handshake would find it locked forever. */
static pthread_mutex_t identities_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void lock_identities(void) { pthread_mutex_lock(&identities_lock); }
static void unlock_identities(void) { pthread_mutex_unlock(&identities_lock); }
static void register_atfork(void) { pthread_atfork(lock_identities, unlock_identities, unlock_identities); }

/* Every full handshake, once the ClientHello is read (its SNI name known) and before the cipher
 * is chosen: this session gets the certificate of that name, from the set in use now. A resumed
 * session sends none and does not come here. */
static int cert_cb(SSL *ssl, void *arg) {
  mg_tls_ctx *t = arg;
  const char *host = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  SSL_certs_clear(ssl); /* none of the context's (an RSA one left beside an ECDSA pick) */
  lock_identities();
  const identity *id = pick(t->ids, host);
  int ok = SSL_use_cert_and_key(ssl, id->cert, id->key, id->chain, 1) == 1; /* references, no copies */
  unlock_identities();
  return ok;
}

/* The client's SNI name is acknowledged whatever it is (an unknown name gets the default
 * certificate, no alert). */
static int servername_cb(SSL *ssl, int *alert, void *arg) {
  (void)ssl; (void)alert; (void)arg;
  return SSL_TLSEXT_ERR_OK;
}

int mg_tls_ctx_reload(mg_tls_ctx *t, const mg_tls_options *o, char *err, size_t errlen) {
  ERR_clear_error();
  struct identities *set = read_identities(o, err, errlen);
  if (!set) return -1;
  lock_identities();
  struct identities *old = t->ids;
  t->ids = set;
  unlock_identities();
  identities_free(old); /* the sessions that use its certificates hold their own references */
  return 0;
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

mg_tls_ctx *mg_tls_ctx_new(const mg_tls_options *o, char *err, size_t errlen) {
  ERR_clear_error();
  if (errlen) err[0] = '\0';
  mg_tls_ctx *t = calloc(1, sizeof *t);
  SSL_CTX *ctx = t ? SSL_CTX_new(TLS_server_method()) : NULL;
  if (!ctx) { fail(err, errlen, "cannot make a TLS context"); free(t); return NULL; }
  t->ctx = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  /* A write takes what one record carries and may be retried from a moved buffer (the output
   * queue coalesces anew each time); an idle connection keeps no record buffers. */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  /* Every session reads ahead: one read takes what the socket has (up to MG_TLS_READ_AHEAD
   * bytes), where OpenSSL otherwise reads each record's 5-byte header and then its body. The
   * records it holds undecrypted are input epoll does not announce: mg_tls_pending. */
  SSL_CTX_set_default_read_buffer_len(ctx, MG_TLS_READ_AHEAD);
  SSL_CTX_set_read_ahead(ctx, 1);
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
  ok = ok && (t->ids = read_identities(o, err, errlen)) != NULL && load_verify(ctx, o, err, errlen);
  /* The default certificate on the context too, so that it is complete on its own; each full
   * handshake takes its own from the set in use (cert_cb). */
  ok = ok && SSL_CTX_use_cert_and_key(ctx, t->ids->id[0].cert, t->ids->id[0].key, t->ids->id[0].chain, 1) == 1;
  if (!ok && !err[0]) fail(err, errlen, "cannot use the certificate");
  SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
  if (ok) {
    pthread_once(&atfork_once, register_atfork);
    SSL_CTX_set_cert_cb(ctx, cert_cb, t);
    SSL_CTX_set_tlsext_servername_callback(ctx, servername_cb);
  }
  if (ok && o->alpn_h2) SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  if (!ok) { mg_tls_ctx_free(t); return NULL; }
  return t;
}

void mg_tls_ctx_free(mg_tls_ctx *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx); /* sessions hold their own reference: it goes with the last of them */
  identities_free(t->ids);
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
  t->dry = 0;
  return 0;
}

#else /* built without OpenSSL: no context can be made, so no connection is ever TLS */

struct mg_tls_ctx {
  int unused;
};

mg_tls_ctx *mg_tls_ctx_new(const mg_tls_options *o, char *err, size_t errlen) {
  (void)o;
  snprintf(err, errlen, "Margay was built without OpenSSL");
  return NULL;
}

void mg_tls_ctx_free(mg_tls_ctx *ctx) { (void)ctx; }
int mg_tls_ctx_reload(mg_tls_ctx *ctx, const mg_tls_options *o, char *err, size_t errlen) {
  (void)ctx; (void)o;
  snprintf(err, errlen, "Margay was built without OpenSSL");
  return -1;
}
int mg_tls_begin(mg_tls *t, mg_tls_ctx *ctx, int fd) { (void)t; (void)ctx; (void)fd; return -1; }

#endif
