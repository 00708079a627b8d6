/*
 * link.c -- one connection to one Redis server: the transport seam.
 *
 * Every byte the library exchanges with Redis goes through a dlock__link:
 * the pooled and multiplexed connections of the router (conn.c), the
 * subscriber (pubsub.c) and the watchdog's renewal connection
 * (watchdog.c). A link is a socket plus a function table for reading and
 * writing it (dlock__link_ops: plain TCP and unix sockets here; TLS plugs
 * in as a second table), and a hiredis RESP reader. Only the reader and
 * freeReplyObject are taken from hiredis: their API is the same in 0.14
 * and 1.x, so the library builds on both.
 *
 * A link is blocking with timeouts (SO_RCVTIMEO / SO_SNDTIMEO) for the
 * calling thread's I/O; the subscriber clears the timeouts and polls the
 * socket instead (dlock__link_pending tells what a transport holds that
 * poll cannot see). Writes never raise SIGPIPE (send with MSG_NOSIGNAL).
 *
 * dlock__link_open also does the handshake every connection needs: AUTH
 * (ACL user or the default user) or a PING that tells at once whether the
 * server wants a password, CLIENT SETNAME (the client's connection name, so
 * CLIENT LIST names it) and SELECT, written together: one round trip.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/net.h"
#include "client/client.h"

/* ---- the plain transport (TCP and unix sockets) ------------------------- */

static ssize_t plain_read(dlock__link *l, void *buf, size_t n) {
  for (;;) {
    ssize_t r = recv(l->fd, buf, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    return r;
  }
}

static ssize_t plain_write(dlock__link *l, const void *buf, size_t n) {
  for (;;) {
    /* send(MSG_NOSIGNAL), not write(2): a write to a socket the server
     * closed must fail with EPIPE, not raise SIGPIPE in the host. */
    ssize_t w = send(l->fd, buf, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    return w;
  }
}

static size_t plain_pending(const dlock__link *l) {
  (void)l;
  return 0;
}

static void plain_close(dlock__link *l) { (void)l; }

const dlock__link_ops dlock__plain_link_ops = {"plain", plain_read, plain_write,
                                               plain_pending, plain_close};

/* ---- the background I/O guard -------------------------------------------
 * A client's background thread (renewal, errand, Sentinel watcher, a
 * permits renewer) declares its client's abort pipe and, for the renewal
 * path, a bound: every wait of that thread on a socket polls the pipe as
 * well, and the waits of opening a link (connect, probe, TLS and Redis
 * handshakes) are cut to the bound. Other threads pay nothing for it: their
 * reads do not poll (a link open polls the pipe of its client for its own
 * duration, connects being rare). */
static _Thread_local int t_abort_fd = -1;
static _Thread_local int t_bound_ms;
static _Thread_local int t_nowait;

void dlock__io_guard(int abort_fd, int bound_ms, int nowait) {
  t_abort_fd = abort_fd;
  t_bound_ms = bound_ms > 0 ? bound_ms : 0;
  t_nowait = nowait;
}

int dlock__io_guard_fd(void) { return t_abort_fd; }

int dlock__io_guard_nowait(void) { return t_nowait; }

/* ms cut to the guard's bound (ms <= 0: the bound, if any). */
static int bounded(int ms) {
  if (t_bound_ms > 0 && (ms <= 0 || ms > t_bound_ms))
    return t_bound_ms;
  return ms;
}

int dlock__io_poll(int fd, short events, int ms) {
  int64_t until = ms > 0 ? dlock__now_ms() + ms : -1;
  for (;;) {
    int left = -1;
    if (until >= 0) {
      int64_t l = until - dlock__now_ms();
      if (l <= 0)
        return 0;
      left = (int)l;
    }
    struct pollfd p[2] = {{fd, events, 0}, {t_abort_fd, POLLIN, 0}};
    int r = poll(p, t_abort_fd >= 0 ? 2 : 1, left);
    if (r < 0 && errno != EINTR)
      return -1;
    if (r > 0 && t_abort_fd >= 0 && p[1].revents)
      return -2;
    if (r > 0)
      return 1;
  }
}

void dlock__io_pause(int64_t ms) {
  if (t_abort_fd < 0 || ms <= 0) {
    dlock__sleep_ms(ms);
    return;
  }
  struct pollfd p = {t_abort_fd, POLLIN, 0};
  int64_t until = dlock__now_ms() + ms;
  for (int64_t left = ms; left > 0; left = until - dlock__now_ms())
    if (poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left) != 0 &&
        (p.revents || errno != EINTR))
      return;
}

/* ---- errors ---------------------------------------------------------------
 */

/* Records why the link failed: kind and text. Returns -1. */
static int link_err(dlock__link *l, int kind, const char *what) {
  l->err = kind;
  snprintf(l->errstr, sizeof l->errstr, "%s", what);
  return -1;
}

static int link_errno(dlock__link *l, int e) {
  if (l->tls_error) {
    l->tls_error = 0;
    l->err = DLOCK__LINK_TLS; /* errstr was set by the transport */
    return -1;
  }
  if (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT)
    return link_err(l, DLOCK__LINK_TIMEOUT, "timed out");
  return link_err(l, DLOCK__LINK_IO, strerror(e));
}

/* A TLS failure after the handshake. With TLS 1.3 a server that requires a
 * client certificate refuses it only after the client's handshake is done:
 * the alert arrives with the first reply. */
static int tls_fail(const dlock__link *l, const char *what) {
  return dlock__tls_verdict(DLOCK__TLS_AT_LATER, what, 0,
                            dlock__tls_has_client_cert(l), l->errstr, NULL);
}

int dlock__link_fail(const dlock__link *l, int timeout_ms, const char *what) {
  switch (l->err) {
  case DLOCK__LINK_TIMEOUT:
    return dlock__fail(DLOCK_ECONN, "%s: no reply within %d ms", what,
                       timeout_ms);
  case DLOCK__LINK_EOF:
    return dlock__fail(DLOCK_ECONN, "%s: server closed the connection", what);
  case DLOCK__LINK_OOM:
    return dlock__fail(DLOCK_ENOMEM, "%s: out of memory", what);
  case DLOCK__LINK_PROTO:
    return dlock__fail(DLOCK_EPROTO, "%s: %s", what, l->errstr);
  case DLOCK__LINK_TLS:
    return tls_fail(l, what);
  default:
    return dlock__fail(DLOCK_ECONN, "%s: %s", what, l->errstr);
  }
}

/* ---- connecting --------------------------------------------------------- */

static void set_timeout(int fd, int opt, int ms) {
  struct timeval tv = {ms / 1000, (suseconds_t)(ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

void dlock__link_set_timeout(dlock__link *l, int read_ms, int write_ms) {
  l->read_ms = read_ms > 0 ? read_ms : 0;
  l->write_ms = write_ms > 0 ? write_ms : 0;
  set_timeout(l->fd, SO_RCVTIMEO, read_ms > 0 ? read_ms : 0);
  set_timeout(l->fd, SO_SNDTIMEO, write_ms > 0 ? write_ms : 0);
}

void dlock__link_set_read_timeout(dlock__link *l, int read_ms) {
  l->read_ms = read_ms > 0 ? read_ms : 0;
  set_timeout(l->fd, SO_RCVTIMEO, l->read_ms);
}

/* connect(2) bounded by timeout_ms. 0, or -1 with errno. */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t len,
                          int timeout_ms) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -1;
  int rc = connect(fd, sa, len);
  if (rc < 0 && errno != EINPROGRESS)
    return -1;
  if (rc < 0) {
    int pr = dlock__io_poll(fd, POLLOUT, timeout_ms > 0 ? timeout_ms : 1000);
    if (pr <= 0) {
      errno = pr == 0 ? ETIMEDOUT : pr == -2 ? ECANCELED : errno;
      return -1;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
      return -1;
    if (soerr) {
      errno = soerr;
      return -1;
    }
  }
  return fcntl(fd, F_SETFL, fl);
}

/* A connected socket to url, or -1 with *msg (static text or strerror). */
static int open_socket(const dlock__url *url, int timeout_ms, const char **msg,
                       int *err_no) {
  *err_no = 0;
  if (url->is_unix) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(url->path) >= sizeof sa.sun_path) {
      *msg = "socket path too long";
      return -1;
    }
    memcpy(sa.sun_path, url->path, strlen(url->path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 &&
        connect_within(fd, (struct sockaddr *)&sa, sizeof sa, timeout_ms) == 0)
      return fd;
    *err_no = errno;
    *msg = strerror(errno);
    if (fd >= 0)
      close(fd);
    return -1;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", url->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(url->host, port, &hints, &res);
  if (g != 0) {
    *msg = gai_strerror(g);
    if (g == EAI_SYSTEM) {
      *err_no = errno;
      *msg = strerror(errno);
    }
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      *err_no = errno;
      continue;
    }
    if (connect_within(fd, a->ai_addr, a->ai_addrlen, timeout_ms) == 0)
      break;
    *err_no = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *msg = strerror(*err_no ? *err_no : ECONNREFUSED);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int connect_error(const dlock__url *url, const char *msg, int err_no) {
  if (err_no == EMFILE || err_no == ENFILE)
    /* Not the server's fault: say so (the CLI used to report it as
     * "cannot reach Redis"). */
    return dlock__fail(DLOCK_ECONN,
                       "cannot open a socket: too many open files (%s; "
                       "see ulimit -n)",
                       err_no == EMFILE ? "this process's limit"
                                        : "the system's limit");
  if (url->is_unix)
    return dlock__fail(DLOCK_ECONN, "cannot connect to unix:%s: %s", url->path,
                       msg);
  return dlock__fail(DLOCK_ECONN, "cannot connect to %s:%d: %s", url->host,
                     url->port, msg);
}

/* The first command on a link failed. Over TLS 1.3 a server that wants a
 * client certificate we did not send refuses only after our handshake is
 * done: its alert comes with the first reply -- or, when our command
 * reaches it after it closed, a reset that discards the alert. Either way
 * the caller hears what most likely happened. */
static int first_reply_failed(const dlock__link *l, int timeout_ms) {
  int closed =
      l->err == DLOCK__LINK_EOF ||
      (l->err == DLOCK__LINK_IO && dlock__io_closed_by_peer(l->errstr));
  int rc =
      l->ops == &dlock__tls_link_ops && l->err != DLOCK__LINK_TLS
          ? dlock__tls_verdict(DLOCK__TLS_AT_FIRST_REPLY, "handshake", closed,
                               dlock__tls_has_client_cert(l), NULL, l->errstr)
          : 0; /* (TLS's own refusal: dlock__link_fail says it) */
  return rc ? rc : dlock__link_fail(l, timeout_ms, "handshake");
}

/* The handshake's commands, written at once (one round trip): AUTH (or
 * PING), CLIENT SETNAME when the link has a name, SELECT when db != 0. */
static void handshake_bytes(dlock__sb *b, const dlock__url *url,
                            const char *name) {
  if (url->password) {
    const char *av[3] = {"AUTH", url->user ? url->user : url->password,
                         url->password};
    size_t al[3] = {4, strlen(av[1]), strlen(url->password)};
    dlock__resp_argv(b, url->user ? 3 : 2, av, al);
  } else {
    /* No credentials: a PING tells at once whether the server wants some,
     * so a missing password is reported at connect time too. */
    const char *av[1] = {"PING"};
    size_t al[1] = {4};
    dlock__resp_argv(b, 1, av, al);
  }
  if (name) {
    const char *av[3] = {"CLIENT", "SETNAME", name};
    size_t al[3] = {6, 7, strlen(name)};
    dlock__resp_argv(b, 3, av, al);
  }
  if (url->db) {
    char dbs[24];
    const char *av[2] = {"SELECT", dbs};
    size_t al[2] = {6, dlock__fmt_i64(dbs, url->db)};
    dlock__resp_argv(b, 2, av, al);
  }
}

static int auth_refused(const dlock__url *url, const char *err) {
  return dlock__is_auth_error(err) || url->password
             ? dlock__fail(DLOCK_EAUTH, "%s: %s",
                           url->user       ? "AUTH with user and password"
                           : url->password ? "AUTH with a password"
                                           : "the server wants a password",
                           err)
             : dlock__fail(DLOCK_EREDIS, "%s", err);
}

/* AUTH (or PING), CLIENT SETNAME and SELECT on a fresh link, pipelined.
 * Every reply is read (the link stays in step); the first failure counts.
 * A refused SETNAME (an ACL without +client, an old Sentinel) is no
 * failure: the link is only unnamed. */
static int handshake(dlock__link *l, const dlock__url *url, const char *name,
                     int timeout_ms) {
  dlock__sb b;
  dlock__sb_init(&b);
  handshake_bytes(&b, url, name);
  int rc = 0;
  if (b.oom)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  else if (dlock__link_send(l, b.p, b.len) != 0)
    rc = first_reply_failed(l, timeout_ms);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  int n = 1 + (name != NULL) + (url->db != 0);
  for (int i = 0; i < n; i++) {
    redisReply *r = dlock__link_reply(l);
    if (!r)
      return rc       ? rc
             : i == 0 ? first_reply_failed(l, timeout_ms)
                      : dlock__link_fail(l, timeout_ms,
                                         i == n - 1 && url->db ? "SELECT"
                                                               : "handshake");
    int select = url->db && i == n - 1;
    if (r->type == REDIS_REPLY_ERROR && rc == 0) {
      if (i == 0)
        rc = auth_refused(url, r->str);
      else if (select)
        rc =
            dlock__fail(DLOCK_EREDIS, "SELECT %d refused: %s", url->db, r->str);
    }
    freeReplyObject(r);
  }
  return rc;
}

static int open_url(dlock_client *c, const dlock__url *url, int reply_ms,
                    dlock__link **out);

int dlock__link_open(dlock_client *c, const dlock__url *url,
                     dlock__link **out) {
  return dlock__link_open_ms(c, url, c->cfg.command_timeout_ms, out);
}

int dlock__link_open_ms(dlock_client *c, const dlock__url *url, int reply_ms,
                        dlock__link **out) {
  *out = NULL;
  if (!url->sentinel)
    return open_url(c, url, reply_ms, out);
  /* Sentinel: connect to the master as last discovered (sentinel.c); one
   * that refuses makes the next connection ask the sentinels again. */
  dlock__url target;
  char host[256];
  unsigned gen = 0;
  int rc = dlock__sentinel_target(c, &target, host, sizeof host, &gen);
  if (rc == 0 && (rc = open_url(c, &target, reply_ms, out)) == DLOCK_ECONN)
    dlock__sentinel_invalidate(c, gen);
  if (rc == 0 && *out)
    (*out)->addr_gen = gen;
  return rc;
}

/* ---- a redis:// URL that points at a TLS port ---------------------------- */

/* A TLS ClientHello (TLS 1.2 record, no extensions), enough for any TLS
 * server to answer with a handshake record (0x16) or an alert (0x15),
 * both followed by the version's major byte 0x03; a RESP server reads it
 * as an unfinished inline command and says nothing. */
const unsigned char dlock__tls_client_hello[52] = {
    0x16, 0x03, 0x01, 0x00, 0x2f, /* record: handshake, 47 bytes */
    0x01, 0x00, 0x00, 0x2b,       /* ClientHello, 43 bytes */
    0x03, 0x03,                   /* TLS 1.2 */
    0,    0,    0,    0,    0,    0,    0, 0,
    0,    0,    0,    0,    0,    0,    0, 0, /* random */
    0,    0,    0,    0,    0,    0,    0, 0,
    0,    0,    0,    0,    0,    0,    0, 0, /* ... */
    0x00,                                     /* no session id */
    0x00, 0x04, 0xc0, 0x2f, 0x13, 0x01,       /* 2 cipher suites */
    0x01, 0x00};                              /* compression: none */

const size_t dlock__tls_client_hello_len = sizeof dlock__tls_client_hello;

/* Whether the server at url answers a ClientHello like a TLS server, on a
 * connection of its own, within timeout_ms. */
static int speaks_tls(const dlock__url *url, int timeout_ms) {
  const char *msg = NULL;
  int err_no = 0;
  int fd = open_socket(url, timeout_ms, &msg, &err_no);
  if (fd < 0)
    return 0;
  unsigned char b[2];
  size_t got = 0;
  int64_t until = dlock__now_ms() + (timeout_ms > 0 ? timeout_ms : 1000);
  if (send(fd, dlock__tls_client_hello, sizeof dlock__tls_client_hello,
           MSG_NOSIGNAL) == (ssize_t)sizeof dlock__tls_client_hello) {
    while (got < sizeof b) {
      /* A plain Redis never answers: the whole wait is spent then (cut to
       * the guard's bound, and ended by the client's abort pipe). */
      int64_t left = until - dlock__now_ms();
      if (left <= 0 || dlock__io_poll(fd, POLLIN, (int)left) <= 0)
        break;
      ssize_t n = recv(fd, b + got, sizeof b - got, 0);
      if (n <= 0)
        break;
      got += (size_t)n;
    }
  }
  close(fd);
  return got == sizeof b && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03;
}

/* A plain connection whose first command was answered by a close, a reset
 * or bytes that are not RESP is what a TLS-only port does to plaintext
 * (redis-server with tls-port: "wrong version number", then it closes):
 * if a ClientHello gets a TLS answer, say so instead of retrying. */
static int plain_to_tls_port(const dlock__link *l, const dlock__url *url,
                             int timeout_ms) {
  if (url->tls || url->is_unix || l->ops != &dlock__plain_link_ops)
    return 0;
  int odd = l->err == DLOCK__LINK_EOF || l->err == DLOCK__LINK_PROTO ||
            (l->err == DLOCK__LINK_IO && strstr(l->errstr, "reset"));
  return odd && speaks_tls(url, timeout_ms);
}

/* The link of a socket to url, handshaken: 0 and *out, or a code. Every
 * wait (TLS handshake, handshake replies, the probe of a TLS-only port) is
 * cut to the thread's guard bound; the caller polls the abort pipe. */
static int open_on(dlock_client *c, const dlock__url *url, int fd,
                   redisReader *rd, int reply_ms, dlock__link **out) {
  dlock__link *l = dlock__calloc(1, sizeof *l);
  if (!l) {
    close(fd);
    redisReaderFree(rd);
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  }
  int conn_ms = bounded(c->cfg.connect_timeout_ms);
  l->ops = &dlock__plain_link_ops;
  l->fd = fd;
  l->reader = rd;
  dlock__fd_track(fd);
  dlock__link_set_timeout(l, reply_ms, c->cfg.command_timeout_ms);
  int rc = 0;
  if (url->tls) {
    const char *name =
        c->cfg.tls_server_name ? c->cfg.tls_server_name : url->host;
    rc = dlock__tls_attach(l, c->tls_ctx, url->host, name, url->port,
                           c->cfg.tls_verify, conn_ms);
  }
  if (rc == 0)
    rc = handshake(l, url, c->conn_name, reply_ms);
  if (rc == DLOCK_ECONN && plain_to_tls_port(l, url, conn_ms))
    rc = dlock__fail(DLOCK_ETLS,
                     "the server at %s:%d speaks TLS: use rediss:// "
                     "(rediss-cluster://, rediss-sentinel://), not redis://",
                     url->host, url->port);
  if (rc) {
    dlock__link_free(l);
    return rc;
  }
  *out = l;
  return 0;
}

static int open_url(dlock_client *c, const dlock__url *url, int reply_ms,
                    dlock__link **out) {
  *out = NULL;
  /* The open polls the client's abort pipe (dlock_client_free) whatever
   * thread opens it; a guarded thread's own pipe stays. */
  int saved = t_abort_fd;
  if (saved < 0)
    t_abort_fd = c->abort_pipe[0];
  redisReader *rd = redisReaderCreate();
  int rc = 0;
  if (!rd) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  } else {
    const char *msg = NULL;
    int err_no = 0;
    int fd =
        open_socket(url, bounded(c->cfg.connect_timeout_ms), &msg, &err_no);
    if (fd < 0) {
      redisReaderFree(rd);
      rc = err_no == ECANCELED ? dlock__fail(DLOCK_ECLOSED, "client is closing")
                               : connect_error(url, msg, err_no);
    } else {
      rc = open_on(c, url, fd, rd, bounded(reply_ms), out);
    }
  }
  t_abort_fd = saved;
  return rc;
}

void dlock__link_free(dlock__link *l) {
  if (!l)
    return;
  l->ops->close(l);
  dlock__fd_untrack(l->fd);
  close(l->fd);
  redisReaderFree(l->reader);
  free(l);
}

/* ---- I/O -------------------------------------------------------------- */

/* Writes all of p: 0, or -1 with *err_no (errno of the failed write).
 * l->wrote counts what was handed to the transport (its writers only:
 * sends are serialized by the caller). */
static int send_all(dlock__link *l, const char *p, size_t len, int *err_no) {
  l->wrote = 0;
  while (len) {
    ssize_t w = l->ops->write(l, p, len);
    if (w < 0) {
      *err_no = errno;
      return -1;
    }
    p += w;
    len -= (size_t)w;
    l->wrote += (size_t)w;
  }
  return 0;
}

int dlock__link_send(dlock__link *l, const char *p, size_t len) {
  int e = 0;
  return send_all(l, p, len, &e) == 0 ? 0 : link_errno(l, e);
}

int dlock__link_send_shared(dlock__link *l, const char *p, size_t len) {
  int e = 0;
  if (send_all(l, p, len, &e) == 0)
    return 0;
  /* Only the write side's own record: the thread reading this link owns
   * err/errstr (and the transport's tls_error) meanwhile. */
  int timeout = e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT;
  l->werr = timeout ? DLOCK__LINK_TIMEOUT : DLOCK__LINK_IO;
  snprintf(l->werrstr, sizeof l->werrstr, "%s",
           timeout ? "timed out" : strerror(e));
  return -1;
}

int dlock__link_read(dlock__link *l) {
  char buf[16384];
  if (t_abort_fd >= 0 && l->ops->pending(l) == 0) {
    /* A guarded thread: its wait ends when the client is freed too. */
    int pr = dlock__io_poll(l->fd, POLLIN, l->read_ms);
    if (pr == 0)
      return link_err(l, DLOCK__LINK_TIMEOUT, "timed out");
    if (pr == -2)
      return link_err(l, DLOCK__LINK_IO, "client is closing");
    if (pr < 0)
      return link_errno(l, errno);
  }
  ssize_t n = l->ops->read(l, buf, sizeof buf);
  if (n == 0)
    return link_err(l, DLOCK__LINK_EOF, "server closed the connection");
  if (n < 0)
    return link_errno(l, errno);
  if (redisReaderFeed(l->reader, buf, (size_t)n) != REDIS_OK)
    return link_err(l, DLOCK__LINK_OOM, "out of memory");
  return 0;
}

int dlock__link_next(dlock__link *l, redisReply **out) {
  void *r = NULL;
  *out = NULL;
  if (redisReaderGetReply(l->reader, &r) != REDIS_OK)
    return link_err(l, DLOCK__LINK_PROTO,
                    l->reader->errstr[0] ? l->reader->errstr
                                         : "protocol error");
  *out = r;
  return 0;
}

redisReply *dlock__link_reply(dlock__link *l) {
  redisReply *r = NULL;
  for (;;) {
    if (dlock__link_next(l, &r) != 0)
      return NULL;
    if (r)
      return r;
    if (dlock__link_read(l) != 0)
      return NULL;
  }
}

size_t dlock__link_pending(const dlock__link *l) { return l->ops->pending(l); }

redisReply *dlock__link_cmd(dlock__link *l, int argc, const char **argv,
                            const size_t *lens) {
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__resp_argv(&b, argc, argv, lens);
  redisReply *r = NULL;
  if (b.oom)
    link_err(l, DLOCK__LINK_OOM, "out of memory");
  else if (dlock__link_send(l, b.p, b.len) == 0)
    r = dlock__link_reply(l);
  dlock__sb_free(&b);
  return r;
}
