/*
 * tls.c -- the TLS transport of a link (OpenSSL), for rediss:// URLs.
 *
 * A client whose URL is rediss:// makes one SSL_CTX (dlock__tls_ctx_new:
 * the trusted CAs, the client certificate, verification on or off) and
 * every link it opens runs a handshake over its connected socket
 * (dlock__tls_attach), after which the link's function table is this
 * file's: the router, the subscriber and the watchdog read and write
 * through it unchanged.
 *
 * THREADS. The shared (multiplexed) connection has writers and one reader
 * at a time working on it concurrently; one SSL object cannot be used by
 * two threads at once. So a TLS link's socket is non-blocking and every
 * SSL_read / SSL_write runs under the link's own mutex for one
 * non-blocking step; the waiting (poll, bounded by the link's timeouts)
 * happens outside it. A reader waiting for a reply never keeps a writer
 * from sending.
 *
 * SIGPIPE. OpenSSL's socket BIO writes with write(2), which raises SIGPIPE
 * on a connection the server closed (CLIENT KILL, a restart): the default
 * disposition kills the program. The session runs over this file's own
 * socket BIO instead, whose writes are send(MSG_NOSIGNAL) like the plain
 * transport's (link.c) -- an EPIPE error, never a signal. The library does
 * not touch signal dispositions: they are the application's.
 *
 * ERRORS are DLOCK_ETLS with the failed check in words: the certificate
 * verification error ("unable to get local issuer certificate", "Hostname
 * mismatch" with the name expected and the names the certificate holds),
 * or the server's alert (a client certificate it requires and did not
 * get).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "net/net.h"

typedef struct tls_state {
  SSL *ssl;
  pthread_mutex_t mu; /* one SSL call at a time */
} tls_state;

/* ---- the socket BIO -------------------------------------------------------
 * A source/sink BIO over a connected non-blocking socket (the fd is the
 * BIO's data), as OpenSSL's own except that it sends with MSG_NOSIGNAL. */

static int sock_fd(BIO *b) { return (int)(intptr_t)BIO_get_data(b); }

/* Sets b's retry flags from errno after a failed send/recv: EAGAIN and
 * EINTR are "try again", anything else an error (errno stays for
 * SSL_ERROR_SYSCALL). */
static void sock_retry(BIO *b, int writing) {
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    if (writing)
      BIO_set_retry_write(b);
    else
      BIO_set_retry_read(b);
  }
}

static int sock_write(BIO *b, const char *buf, int n) {
  BIO_clear_retry_flags(b);
  if (n <= 0)
    return 0;
  ssize_t w = send(sock_fd(b), buf, (size_t)n, MSG_NOSIGNAL);
  if (w < 0)
    sock_retry(b, 1);
  return (int)w;
}

static int sock_read(BIO *b, char *buf, int n) {
  BIO_clear_retry_flags(b);
  if (n <= 0)
    return 0;
  ssize_t r = recv(sock_fd(b), buf, (size_t)n, 0);
  if (r < 0)
    sock_retry(b, 0);
  else if (r == 0) /* the server closed the connection (ssl_want) */
    BIO_set_flags(b, BIO_FLAGS_IN_EOF);
  return (int)r;
}

static int sock_puts(BIO *b, const char *s) {
  return sock_write(b, s, (int)strlen(s));
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  switch (cmd) {
  case BIO_CTRL_FLUSH: /* nothing is buffered here */
  case BIO_CTRL_DUP:
    return 1;
  default:
    return 0;
  }
}

static int sock_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

/* The method: made once per process, never freed (one small block). */
static BIO_METHOD *g_sock_method;
static pthread_once_t g_sock_once = PTHREAD_ONCE_INIT;

static void sock_method_init(void) {
  BIO_METHOD *m =
      BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
  if (m &&
      (!BIO_meth_set_write(m, sock_write) || !BIO_meth_set_read(m, sock_read) ||
       !BIO_meth_set_puts(m, sock_puts) || !BIO_meth_set_ctrl(m, sock_ctrl) ||
       !BIO_meth_set_create(m, sock_create))) {
    BIO_meth_free(m);
    m = NULL;
  }
  g_sock_method = m;
}

/* A BIO over fd (not closed by the BIO: the link owns it), or NULL. */
static BIO *sock_bio(int fd) {
  pthread_once(&g_sock_once, sock_method_init);
  BIO *b = g_sock_method ? BIO_new(g_sock_method) : NULL;
  if (b)
    BIO_set_data(b, (void *)(intptr_t)fd);
  return b;
}

/* ---- the client's context ------------------------------------------------ */

const char *dlock__tls_err_text(char *buf, size_t n, int last) {
  unsigned long e = last ? ERR_peek_last_error() : ERR_get_error();
  if (!e)
    snprintf(buf, n, "%s", "no detail from OpenSSL");
  else
    ERR_error_string_n(e, buf, n);
  ERR_clear_error();
  return buf;
}

static int ctx_fail(SSL_CTX *ctx, const char *what, const char *path) {
  char e[200];
  dlock__tls_err_text(e, sizeof e, 0);
  SSL_CTX_free(ctx);
  return dlock__fail(DLOCK_ETLS, "TLS: %s '%s': %s", what, path ? path : "", e);
}

int dlock__tls_ctx_new(const dlock_config *cfg, void **out) {
  *out = NULL;
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx)
    return dlock__fail(DLOCK_ENOMEM, "TLS: cannot create a context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (cfg->tls_ca_file || cfg->tls_ca_dir) {
    if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca_file, cfg->tls_ca_dir) !=
        1)
      return ctx_fail(ctx, "cannot load the CA certificates",
                      cfg->tls_ca_file ? cfg->tls_ca_file : cfg->tls_ca_dir);
  } else if (!cfg->tls_truststore &&
             SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return ctx_fail(ctx, "cannot load the system's CA store", NULL);
  }
  if ((cfg->tls_cert_file != NULL) != (cfg->tls_key_file != NULL)) {
    SSL_CTX_free(ctx);
    return dlock__fail(
        DLOCK_EINVAL,
        "TLS: %s and %s go together (a client certificate needs its key)",
        dlock__config_key(cfg, offsetof(dlock_config, tls_cert_file),
                          "tls_cert_file"),
        dlock__config_key(cfg, offsetof(dlock_config, tls_key_file),
                          "tls_key_file"));
  }
  if (cfg->tls_cert_file) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert_file) != 1)
      return ctx_fail(ctx, "cannot load the client certificate",
                      cfg->tls_cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key_file, SSL_FILETYPE_PEM) !=
        1)
      return ctx_fail(ctx, "cannot load the client key", cfg->tls_key_file);
    if (SSL_CTX_check_private_key(ctx) != 1)
      return ctx_fail(ctx, "the client key does not match the certificate",
                      cfg->tls_key_file);
  }
  int rc = dlock__tls_load_pkcs12(ctx, cfg); /* pkcs12.c */
  if (rc) {
    SSL_CTX_free(ctx);
    return rc;
  }
  /* Only DLOCK_TLS_VERIFY_NONE turns the chain check off; CA_ONLY skips
   * the name alone (dlock__tls_attach). */
  SSL_CTX_set_verify(ctx,
                     cfg->tls_verify == DLOCK_TLS_VERIFY_NONE ? SSL_VERIFY_NONE
                                                              : SSL_VERIFY_PEER,
                     NULL);
  *out = ctx;
  return 0;
}

void dlock__tls_ctx_free(void *ctx) { SSL_CTX_free(ctx); }

/* ---- waiting on the non-blocking socket ---------------------------------- */

/* Waits until fd is ready for events, at most ms (0 = no bound). 0, or -1
 * with errno EAGAIN (timed out), ECANCELED (the thread's I/O guard saw its
 * client freed: link.c) or poll's error. */
static int wait_fd(int fd, short events, int ms) {
  int r = dlock__io_poll(fd, events, ms);
  if (r > 0)
    return 0;
  if (r == 0)
    errno = EAGAIN;
  else if (r == -2)
    errno = ECANCELED;
  return -1;
}

/* What an SSL call's failure asks for: 1 wait for reading, 2 for writing,
 * 0 the stream ended cleanly, -1 an error (errno set; the link's errstr
 * says what OpenSSL said). */
static int ssl_want(dlock__link *l, int ret) {
  tls_state *t = l->tls;
  int e = SSL_get_error(t->ssl, ret);
  if (e == SSL_ERROR_WANT_READ)
    return 1;
  if (e == SSL_ERROR_WANT_WRITE)
    return 2;
  if (e == SSL_ERROR_ZERO_RETURN)
    return 0;
  if (e == SSL_ERROR_SYSCALL) {
    ERR_clear_error();
    /* The socket's end without a close_notify (CLIENT KILL, a restart):
     * the stream ended, as for the plain transport -- not a TLS failure
     * (the BIO does not answer BIO_eof, so OpenSSL leaves it to us). */
    if (BIO_test_flags(SSL_get_rbio(t->ssl), BIO_FLAGS_IN_EOF))
      return 0;
    if (errno == 0)
      errno = ECONNRESET;
    return -1;
  }
  char buf[160];
  snprintf(l->errstr, sizeof l->errstr, "TLS: %s",
           dlock__tls_err_text(buf, sizeof buf, 0));
  l->tls_error = 1;
  errno = EPROTO;
  return -1;
}

/* One SSL_read or SSL_write of up to n bytes, waiting as it asks, bounded
 * by the link's timeout. Like recv/send: > 0, 0 (end; reads only), -1 with
 * errno. */
static ssize_t ssl_io(dlock__link *l, void *buf, size_t n, int writing) {
  tls_state *t = l->tls;
  int ms = writing ? l->write_ms : l->read_ms;
  int cap = n > INT32_MAX ? INT32_MAX : (int)n;
  for (;;) {
    dlock__mu_lock(&t->mu);
    ERR_clear_error();
    int r = writing ? SSL_write(t->ssl, buf, cap) : SSL_read(t->ssl, buf, cap);
    int want = r > 0 ? 3 : ssl_want(l, r);
    dlock__mu_unlock(&t->mu);
    if (want == 3)
      return r;
    if (want == 0 && writing) { /* a write never "ends": send's EPIPE */
      errno = EPIPE;
      return -1;
    }
    if (want <= 0)
      return want;
    if (wait_fd(l->fd, want == 1 ? POLLIN : POLLOUT, ms) != 0)
      return -1;
  }
}

static ssize_t tls_read(dlock__link *l, void *buf, size_t n) {
  return ssl_io(l, buf, n, 0);
}

static ssize_t tls_write(dlock__link *l, const void *buf, size_t n) {
  return ssl_io(l, (void *)buf, n, 1);
}

int dlock__tls_has_client_cert(const dlock__link *l) {
  tls_state *t = l->tls;
  return t && SSL_get_certificate(t->ssl) != NULL;
}

static size_t tls_pending(const dlock__link *l) {
  tls_state *t = l->tls;
  dlock__mu_lock(&t->mu);
  int p = SSL_pending(t->ssl);
  dlock__mu_unlock(&t->mu);
  return p > 0 ? (size_t)p : 0;
}

static void tls_close(dlock__link *l) {
  tls_state *t = l->tls;
  if (!t)
    return;
  /* No close_notify: it could block on a dead peer, and Redis does not
   * need one. */
  SSL_free(t->ssl);
  pthread_mutex_destroy(&t->mu);
  free(t);
  l->tls = NULL;
}

const dlock__link_ops dlock__tls_link_ops = {"tls", tls_read, tls_write,
                                             tls_pending, tls_close};

/* ---- the handshake --------------------------------------------------------
 */

/* What the verification refused, captured by the callback (one handshake
 * per thread at a time). */
static _Thread_local char t_verify_why[400];

static void cert_names(X509 *cert, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  GENERAL_NAMES *names =
      X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names) && len < n; i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
    char ip[64] = "";
    if (g->type == GEN_DNS)
      len +=
          (size_t)snprintf(buf + len, n - len, "%sDNS:%s", len ? ", " : "",
                           (const char *)ASN1_STRING_get0_data(g->d.dNSName));
    else if (g->type == GEN_IPADD && g->d.iPAddress->length == 4 &&
             inet_ntop(AF_INET, ASN1_STRING_get0_data(g->d.iPAddress), ip,
                       sizeof ip))
      len +=
          (size_t)snprintf(buf + len, n - len, "%sIP:%s", len ? ", " : "", ip);
  }
  GENERAL_NAMES_free(names);
  if (len == 0) {
    X509_NAME_oneline(X509_get_subject_name(cert), buf, (int)n);
  }
}

static int verify_cb(int ok, X509_STORE_CTX *st) {
  if (ok || t_verify_why[0])
    return ok;
  int e = X509_STORE_CTX_get_error(st);
  X509 *cert = X509_STORE_CTX_get_current_cert(st);
  char names[240] = "";
  if (cert)
    cert_names(cert, names, sizeof names);
  snprintf(t_verify_why, sizeof t_verify_why,
           "certificate verification failed: %s (certificate at depth %d: "
           "%s)",
           X509_verify_cert_error_string(e), X509_STORE_CTX_get_error_depth(st),
           names);
  return ok;
}

/* 1 if s is an IPv4 or IPv6 address literal. */
static int is_ip(const char *s) {
  unsigned char b[16];
  return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

/* The expected name: SNI (not for an address), and the host the
 * certificate must name when check_name. */
static int set_peer_name(SSL *ssl, const char *name, int check_name) {
  if (!is_ip(name) && SSL_set_tlsext_host_name(ssl, name) != 1)
    return -1;
  if (!check_name)
    return 0;
  if (is_ip(name))
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1 ? 0
                                                                         : -1;
  return SSL_set1_host(ssl, name) == 1 ? 0 : -1;
}

static int handshake_fail(dlock__link *l, const char *host, const char *name,
                          int port, int timed_out) {
  char e[200];
  if (timed_out)
    return dlock__fail(
        DLOCK_ETLS, "TLS handshake with %s:%d: no answer in time", host, port);
  if (t_verify_why[0])
    return dlock__fail(DLOCK_ETLS,
                       "TLS handshake with %s:%d refused the server: %s "
                       "(expected name '%s')",
                       host, port, t_verify_why, name);
  return dlock__fail(
      DLOCK_ETLS, "TLS handshake with %s:%d failed: %s", host, port,
      l->errstr[0] ? l->errstr : dlock__tls_err_text(e, sizeof e, 0));
}

/* A session of ctx over the connected socket fd (made non-blocking), its
 * writes without SIGPIPE (sock_bio), sending `name` as SNI and checking
 * the server as `verify` says. The one place both clients' sessions are
 * made (dlock__tls_attach, the event-loop client's dlock__tls_session).
 * NULL on failure, with *why set. */
static SSL *session_new(void *ctx, int fd, const char *name, int verify,
                        const char **why) {
  SSL *ssl = SSL_new(ctx);
  if (!ssl) {
    *why = "cannot create a session";
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  int chain = verify != DLOCK_TLS_VERIFY_NONE;
  int check_name = chain && verify != DLOCK_TLS_VERIFY_CA_ONLY;
  BIO *bio =
      fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? NULL : sock_bio(fd);
  if (bio)
    SSL_set_bio(ssl, bio, bio); /* the session owns it from here */
  if (!bio || set_peer_name(ssl, name, check_name) != 0) {
    SSL_free(ssl);
    *why = "cannot set up the session";
    return NULL;
  }
  if (chain)
    SSL_set_verify(ssl, SSL_VERIFY_PEER, verify_cb);
  t_verify_why[0] = '\0';
  return ssl;
}

int dlock__tls_attach(dlock__link *l, void *ctx, const char *host,
                      const char *name, int port, int verify, int timeout_ms) {
  tls_state *t = dlock__calloc(1, sizeof *t);
  if (!t)
    return dlock__fail(DLOCK_ENOMEM, "TLS: cannot create a session");
  const char *why = NULL;
  SSL *ssl = session_new(ctx, l->fd, name, verify, &why);
  if (!ssl) {
    free(t);
    return dlock__fail(DLOCK_ETLS, "TLS: %s for %s", why, name);
  }
  pthread_mutex_init(&t->mu, NULL);
  t->ssl = ssl;
  l->tls = t;
  l->ops = &dlock__tls_link_ops; /* from now on close frees the session */
  l->errstr[0] = '\0';
  for (;;) {
    ERR_clear_error();
    int r = SSL_connect(ssl);
    if (r == 1)
      return 0;
    int want = ssl_want(l, r);
    if (want == 0) {
      char what[300];
      snprintf(what, sizeof what, "TLS handshake with %s:%d", host, port);
      return dlock__tls_verdict(DLOCK__TLS_AT_HANDSHAKE, what, 1, 0, NULL,
                                NULL);
    }
    if (want < 0)
      return handshake_fail(l, host, name, port, 0);
    if (wait_fd(l->fd, want == 1 ? POLLIN : POLLOUT, timeout_ms) != 0)
      return handshake_fail(l, host, name, port, errno == EAGAIN);
  }
}

/* ---- the event-loop client's sessions (async_conn.c) --------------------
 * The same session, driven one non-blocking step at a time by the loop:
 * no mutex (one thread), no waiting here. */

int dlock__tls_session(void *ctx, int fd, const char *name, int verify,
                       void **out, char *why, size_t wn) {
  const char *w = NULL;
  *out = session_new(ctx, fd, name, verify, &w);
  if (!*out) {
    snprintf(why, wn, "TLS: %s for %s", w, name);
    return -1;
  }
  return 0;
}

void dlock__tls_session_free(void *ssl) { SSL_free(ssl); }

int dlock__tls_session_has_cert(void *ssl) {
  return SSL_get_certificate(ssl) != NULL;
}

int dlock__tls_step(void *ssl_, int op, void *buf, size_t n, char *why,
                    size_t wn) {
  SSL *ssl = ssl_;
  int cap = n > INT32_MAX ? INT32_MAX : (int)n;
  ERR_clear_error();
  errno = 0;
  int r = op == DLOCK__TLS_CONNECT ? SSL_connect(ssl)
          : op == DLOCK__TLS_READ  ? SSL_read(ssl, buf, cap)
                                   : SSL_write(ssl, buf, cap);
  if (r > 0)
    return r;
  int e = SSL_get_error(ssl, r);
  if (e == SSL_ERROR_WANT_READ)
    return DLOCK__TLS_WANT_READ;
  if (e == SSL_ERROR_WANT_WRITE)
    return DLOCK__TLS_WANT_WRITE;
  if (e == SSL_ERROR_ZERO_RETURN ||
      (e == SSL_ERROR_SYSCALL &&
       BIO_test_flags(SSL_get_rbio(ssl), BIO_FLAGS_IN_EOF))) {
    ERR_clear_error();
    snprintf(why, wn, "%s", "the server closed the connection");
    return 0;
  }
  if (e == SSL_ERROR_SYSCALL) {
    int en = errno ? errno : ECONNRESET;
    ERR_clear_error();
    snprintf(why, wn, "%s", strerror(en));
    return DLOCK__TLS_ERR_IO;
  }
  char buf2[200];
  if (op == DLOCK__TLS_CONNECT && t_verify_why[0])
    snprintf(why, wn, "refused the server: %s", t_verify_why);
  else
    snprintf(why, wn, "TLS: %s", dlock__tls_err_text(buf2, sizeof buf2, 0));
  return DLOCK__TLS_ERR_TLS;
}

size_t dlock__tls_session_pending(void *ssl) {
  int p = SSL_pending(ssl);
  return p > 0 ? (size_t)p : 0;
}
