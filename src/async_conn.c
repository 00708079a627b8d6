/*
 * async_conn.c -- one non-blocking connection of the event-loop client: the
 * connect and AUTH/SELECT handshake as a small state machine, pipelined
 * requests answered in order, the reply timeout, and the retry policy of
 * the blocking router (conn.c) driven by timers.
 *
 * STATES: IDLE -> CONNECTING (non-blocking connect(2), bounded by
 * connect_timeout_ms; the next address of the host on failure) ->
 * HANDSHAKE (AUTH or PING, then SELECT, written first; the requests queued
 * meanwhile are pipelined right behind them) -> READY. Any failure closes
 * the socket and goes back to IDLE; the next request (or, for the
 * subscriber, its reconnect timer) opens it again.
 *
 * REQUESTS keep their encoded bytes until their reply, so that a failed
 * connection can re-send them: every script of the library is safe to
 * repeat (as in the blocking router). A request whose connection failed is
 * re-sent retry_interval_ms later, at most retry_attempts times; then its
 * owner hears DLOCK_ECONN. Replies LOADING / BUSY / TRYAGAIN / MASTERDOWN
 * are retried the same way; NOSCRIPT is answered with EVAL at once.
 * A reply that does not come within command_timeout_ms of its send fails
 * the connection (and so every request on it), as the blocking
 * multiplexed connection does.
 *
 * The bytes go through the hiredis reader for the replies (as link.c) and
 * dlock__resp_argv for the requests. TLS is not supported here.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "async_internal.h"

static void timeout_fired(dlock__atimer *t);
static void reconnect_fired(dlock__atimer *t);

void dlock__aconn_init(dlock__aconn *k, dlock_async *a, const char *what) {
  memset(k, 0, sizeof *k);
  k->a = a;
  k->what = what;
  dlock__sb_init(&k->out);
  k->timeout.fn = timeout_fired;
  k->timeout.arg = k;
  k->reconnect.fn = reconnect_fired;
  k->reconnect.arg = k;
}

/* ---- requests ------------------------------------------------------------ */

/* Appends one bulk string of RESP. */
static void bulk(dlock__sb *b, const char *p, size_t n) {
  dlock__sb_add(b, "$", 1);
  dlock__sb_addu64(b, n);
  dlock__sb_add(b, "\r\n", 2);
  dlock__sb_add(b, p, n);
  dlock__sb_add(b, "\r\n", 2);
}

dlock__areq *dlock__areq_eval(const dlock__script *s, int nkeys,
                              const char **keys, const size_t *klens, int nargs,
                              const char **args, const size_t *alens,
                              dlock__areq_fn *fn, void *arg) {
  dlock__areq *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return NULL;
  dlock__sb b;
  char buf[1024];
  dlock__sb_init_buf(&b, buf, sizeof buf);
  char nk[24];
  dlock__sb_add(&b, "*", 1);
  dlock__sb_addu64(&b, (uint64_t)nkeys + (uint64_t)nargs + 3);
  dlock__sb_add(&b, "\r\n", 2);
  bulk(&b, "EVALSHA", 7);
  bulk(&b, s->sha, 40);
  bulk(&b, nk, dlock__fmt_i64(nk, nkeys));
  for (int i = 0; i < nkeys; i++)
    bulk(&b, keys[i], klens[i]);
  for (int i = 0; i < nargs; i++)
    bulk(&b, args[i], alens[i]);
  if (!b.oom && (r->cmd = dlock__malloc(b.len)) != NULL) {
    memcpy(r->cmd, b.p, b.len);
    r->len = b.len;
    r->script = s;
    r->fn = fn;
    r->arg = arg;
  }
  dlock__sb_free(&b);
  if (!r->cmd) {
    free(r);
    r = NULL;
  }
  return r;
}

void dlock__areq_free(dlock__areq *r) {
  if (!r)
    return;
  free(r->cmd);
  free(r);
}

/* r ends without an answer and without its callback (the client is being
 * freed): what it owns goes with it (issue 26: a renewal batch in flight
 * was leaked by dlock_async_free). */
static void req_drop(dlock__areq *r) {
  if (r->drop)
    r->drop(r->arg);
  dlock__areq_free(r);
}

/* Rewrites r as EVAL <body> (the server lost its script cache). */
static int to_eval(dlock__areq *r) {
  /* cmd = "*N\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n" + tail, where tail
   * starts with the number of keys. */
  const char *p = r->cmd;
  const char *sha_end = strstr(p, "\r\n$40\r\n");
  if (!sha_end)
    return -1;
  size_t tail_at = (size_t)(sha_end - p) + 7 + 40 + 2;
  const char *argc_end = strchr(p, '\n') + 1;
  const char *body = r->script->body;
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_add(&b, p, (size_t)(argc_end - p));
  dlock__sb_adds(&b, "$4\r\nEVAL\r\n$");
  dlock__sb_addu64(&b, strlen(body));
  dlock__sb_add(&b, "\r\n", 2);
  dlock__sb_adds(&b, body);
  dlock__sb_add(&b, "\r\n", 2);
  dlock__sb_add(&b, p + tail_at, r->len - tail_at);
  char *n = b.oom ? NULL : dlock__malloc(b.len);
  if (n) {
    memcpy(n, b.p, b.len);
    free(r->cmd);
    r->cmd = n;
    r->len = b.len;
    r->eval = 1;
  }
  dlock__sb_free(&b);
  return n ? 0 : -1;
}

/* ---- interest and the socket --------------------------------------------- */

/* The adapter could not watch the socket: the connection fails from the
 * timer (not from here, in the middle of a state change). */
static void hook_refused(dlock__aconn *k) {
  k->refused = 1;
  dlock__async_timer(k->a, &k->timeout, dlock__async_now());
}

static void want_read(dlock__aconn *k, int on) {
  dlock_async *a = k->a;
  if (!k->w || on == k->reading)
    return;
  if (on && a->hooks.add_read(a->hooks.data, k->w) != 0) {
    hook_refused(k);
    return;
  }
  if (!on)
    a->hooks.del_read(a->hooks.data, k->w);
  k->reading = on;
}

static void want_write(dlock__aconn *k, int on) {
  dlock_async *a = k->a;
  if (!k->w || on == k->writing)
    return;
  if (on && a->hooks.add_write(a->hooks.data, k->w) != 0) {
    hook_refused(k);
    return;
  }
  if (!on)
    a->hooks.del_write(a->hooks.data, k->w);
  k->writing = on;
}

static void close_socket(dlock__aconn *k) {
  dlock_async *a = k->a;
  if (k->w) {
    a->hooks.release(a->hooks.data, k->w);
    dlock__fd_untrack(k->w->fd);
    close(k->w->fd);
    free(k->w);
    k->w = NULL;
  }
  k->reading = k->writing = k->refused = 0;
  if (k->reader) {
    redisReaderFree(k->reader);
    k->reader = NULL;
  }
  dlock__sb_reset(&k->out);
  k->out_off = 0;
  k->hs_left = 0;
  k->state = DLOCK__AC_IDLE;
  dlock__async_untimer(a, &k->timeout);
}

static void free_addrs(dlock__aconn *k) {
  if (k->ai)
    freeaddrinfo(k->ai);
  k->ai = k->ai_at = NULL;
}

/* ---- failure and the retry policy -----------------------------------------
 */

static void retry_unlink(dlock__aconn *k, dlock__areq *r) {
  if (r->rprev)
    r->rprev->rnext = r->rnext;
  else
    k->retrying = r->rnext;
  if (r->rnext)
    r->rnext->rprev = r->rprev;
  r->rnext = r->rprev = NULL;
}

static void retry_fired(dlock__atimer *t) {
  dlock__areq *r = t->arg;
  retry_unlink(r->k, r);
  dlock__aconn_submit(r->k, r);
}

/* r failed with err (why): re-sent later, or ended when no attempt is
 * left. */
static void req_retry(dlock__aconn *k, dlock__areq *r, int err,
                      const char *why) {
  dlock_async *a = k->a;
  int left = a->cfg.retry_attempts > 0 ? a->cfg.retry_attempts : 0;
  if (r->no_retry || a->closing || r->tries++ >= left) {
    r->fn(r, NULL, err, why);
    return;
  }
  r->k = k;
  r->rprev = NULL;
  r->rnext = k->retrying;
  if (k->retrying)
    k->retrying->rprev = r;
  k->retrying = r;
  r->retry.fn = retry_fired;
  r->retry.arg = r;
  dlock__async_timer(a, &r->retry,
                     dlock__async_now() + a->cfg.retry_interval_ms);
}

/* Closes the connection; every request on it is retried (or, final, ends
 * with err at once). */
static void conn_fail(dlock__aconn *k, int err, const char *why, int final) {
  dlock_async *a = k->a;
  char msg[256];
  snprintf(msg, sizeof msg, "%s", why);
  if (!a->closing) /* observability (issue 27) */
    dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "disconnect",
               "connection lost: %s", msg);
  close_socket(k);
  free_addrs(k);
  dlock__areq *list = k->head;
  k->head = k->tail = k->unsent = NULL;
  while (list) {
    dlock__areq *r = list;
    list = r->next;
    r->next = NULL;
    if (a->closing) {
      req_drop(r);
      continue;
    }
    if (final)
      r->fn(r, NULL, err, msg);
    else
      req_retry(k, r, err, msg);
  }
  if (k->on_down && !a->closing)
    k->on_down(k, err, msg);
}

/* ---- connecting ------------------------------------------------------------
 */

static void connected(dlock__aconn *k);
static void try_next(dlock__aconn *k, const char *why);

/* Starts connect(2) to sa. 1 in progress, 0 connected, -1 failed (why). */
static int start_connect(dlock__aconn *k, int family, const struct sockaddr *sa,
                         socklen_t len, char *why, size_t wn) {
  dlock_async *a = k->a;
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(why, wn, "cannot open a socket: %s", strerror(errno));
    return -1;
  }
  int rc = connect(fd, sa, len);
  if (rc < 0 && errno != EINPROGRESS) {
    snprintf(why, wn, "%s", strerror(errno));
    close(fd);
    return -1;
  }
  k->w = dlock__calloc(1, sizeof *k->w);
  if (!k->w) {
    close(fd);
    snprintf(why, wn, "out of memory");
    return -1;
  }
  k->w->fd = fd;
  k->w->a = a;
  dlock__fd_track(fd);
  if (family != AF_UNIX) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return rc < 0 ? 1 : 0;
}

static void where(const dlock__aconn *k, char *buf, size_t n) {
  const dlock__url *u = &k->a->url;
  if (u->is_unix)
    snprintf(buf, n, "unix:%s", u->path);
  else
    snprintf(buf, n, "%s:%d", u->host, u->port);
}

static void connect_failed(dlock__aconn *k, const char *why) {
  char at[300], msg[512];
  where(k, at, sizeof at);
  snprintf(msg, sizeof msg, "cannot connect to %s: %s", at, why);
  conn_fail(k, DLOCK_ECONN, msg, 0);
}

/* Tries k->ai_at and the addresses after it. */
static void try_next(dlock__aconn *k, const char *why) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", why ? why : "no address");
  while (k->ai_at) {
    struct addrinfo *ai = k->ai_at;
    k->ai_at = ai->ai_next;
    int rc = start_connect(k, ai->ai_family, ai->ai_addr, ai->ai_addrlen, buf,
                           sizeof buf);
    if (rc == 0) {
      connected(k);
      return;
    }
    if (rc == 1) {
      k->state = DLOCK__AC_CONNECTING;
      want_write(k, 1);
      dlock__async_timer(k->a, &k->timeout,
                         dlock__async_now() + k->a->cfg.connect_timeout_ms);
      return;
    }
  }
  connect_failed(k, buf);
}

static void conn_open(dlock__aconn *k) {
  dlock_async *a = k->a;
  const dlock__url *u = &a->url;
  char why[256] = "";
  if (u->is_unix) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(u->path) >= sizeof sa.sun_path) {
      connect_failed(k, "socket path too long");
      return;
    }
    memcpy(sa.sun_path, u->path, strlen(u->path) + 1);
    int rc = start_connect(k, AF_UNIX, (struct sockaddr *)&sa, sizeof sa, why,
                           sizeof why);
    if (rc < 0) {
      connect_failed(k, why);
    } else if (rc == 0) {
      connected(k);
    } else {
      k->state = DLOCK__AC_CONNECTING;
      want_write(k, 1);
      dlock__async_timer(a, &k->timeout,
                         dlock__async_now() + a->cfg.connect_timeout_ms);
    }
    return;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", u->port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(u->host, port, &hints, &k->ai);
  if (g != 0) {
    k->ai = NULL;
    connect_failed(k, gai_strerror(g));
    return;
  }
  k->ai_at = k->ai;
  try_next(k, NULL);
}

/* AUTH (or PING: a server that wants a password says so at once), CLIENT
 * SETNAME and SELECT, as link.c's handshake sends them. */
static void handshake_bytes(dlock__aconn *k) {
  const dlock__url *u = &k->a->url;
  if (u->password) {
    const char *av[3] = {"AUTH", u->user ? u->user : u->password, u->password};
    size_t al[3] = {4, strlen(av[1]), strlen(u->password)};
    dlock__resp_argv(&k->out, u->user ? 3 : 2, av, al);
  } else {
    const char *av[1] = {"PING"};
    size_t al[1] = {4};
    dlock__resp_argv(&k->out, 1, av, al);
  }
  k->hs_n = 1;
  const char *name = k->a->conn_name;
  if (name) {
    const char *av[3] = {"CLIENT", "SETNAME", name};
    size_t al[3] = {6, 7, strlen(name)};
    dlock__resp_argv(&k->out, 3, av, al);
    k->hs_n++;
  }
  if (u->db) {
    char dbs[24];
    const char *av[2] = {"SELECT", dbs};
    size_t al[2] = {6, dlock__fmt_i64(dbs, u->db)};
    dlock__resp_argv(&k->out, 2, av, al);
    k->hs_n++;
  }
  k->hs_left = k->hs_n;
}

static void connected(dlock__aconn *k) {
  free_addrs(k);
  k->reader = redisReaderCreate();
  if (!k->reader) {
    conn_fail(k, DLOCK_ENOMEM, "out of memory", 1);
    return;
  }
  k->state = DLOCK__AC_HANDSHAKE;
  dlock__sb_reset(&k->out);
  k->out_off = 0;
  handshake_bytes(k);
  k->unsent = k->head;
  dlock__async_timer(k->a, &k->timeout,
                     dlock__async_now() + k->a->cfg.command_timeout_ms);
  want_read(k, 1);
  want_write(k, 1);
}

static void reconnect_fired(dlock__atimer *t) {
  dlock__aconn *k = t->arg;
  if (k->state == DLOCK__AC_IDLE && k->a->attached && !k->a->closing)
    conn_open(k);
}

void dlock__aconn_start(dlock__aconn *k) {
  if (k->state == DLOCK__AC_IDLE && k->a->attached && !k->reconnect.slot)
    dlock__async_timer(k->a, &k->reconnect, dlock__async_now());
}

/* ---- writing ---------------------------------------------------------------
 */

/* Moves the bytes of queued requests into out (READY or HANDSHAKE: they
 * are pipelined behind the handshake). */
static void take_unsent(dlock__aconn *k) {
  int64_t now = dlock__async_now();
  for (dlock__areq *r = k->unsent; r; r = r->next) {
    dlock__sb_add(&k->out, r->cmd, r->len);
    r->sent_at = now;
  }
  k->unsent = NULL;
  if (k->head && !k->timeout.slot)
    dlock__async_timer(k->a, &k->timeout,
                       k->head->sent_at + k->a->cfg.command_timeout_ms);
}

static void flush_out(dlock__aconn *k) {
  if (k->state != DLOCK__AC_HANDSHAKE && k->state != DLOCK__AC_READY)
    return;
  take_unsent(k);
  if (k->out.oom) {
    conn_fail(k, DLOCK_ENOMEM, "out of memory", 1);
    return;
  }
  while (k->out_off < k->out.len) {
    ssize_t n = send(k->w->fd, k->out.p + k->out_off, k->out.len - k->out_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n < 0) {
      char why[256];
      snprintf(why, sizeof why, "%s: %s", k->what, strerror(errno));
      conn_fail(k, DLOCK_ECONN, why, 0);
      return;
    }
    k->out_off += (size_t)n;
  }
  if (k->out_off == k->out.len) {
    dlock__sb_reset(&k->out);
    k->out_off = 0;
  }
  want_write(k, k->out.len > 0);
}

void dlock__aconn_submit(dlock__aconn *k, dlock__areq *r) {
  r->next = NULL;
  if (k->tail)
    k->tail->next = r;
  else
    k->head = r;
  k->tail = r;
  if (!k->unsent)
    k->unsent = r;
  if (k->state == DLOCK__AC_IDLE)
    dlock__aconn_start(k);
  else if (k->state != DLOCK__AC_CONNECTING)
    want_write(k, 1);
}

void dlock__aconn_write(dlock__aconn *k, const char *p, size_t n) {
  if (k->state != DLOCK__AC_READY)
    return;
  dlock__sb_add(&k->out, p, n);
  want_write(k, 1);
}

/* ---- reading ---------------------------------------------------------------
 */

static void handshake_reply(dlock__aconn *k, redisReply *r) {
  const dlock__url *u = &k->a->url;
  char why[400];
  int err = 0;
  int first = k->hs_left == k->hs_n, select = k->hs_left == 1 && u->db;
  /* A refused SETNAME (an ACL without +client) leaves the connection
   * unnamed: not a failure. */
  if (r->type == REDIS_REPLY_ERROR && (first || select)) {
    if (select) {
      err = DLOCK_EREDIS;
      snprintf(why, sizeof why, "SELECT %d refused: %s", u->db, r->str);
    } else {
      err = dlock__is_auth_error(r->str) || u->password ? DLOCK_EAUTH
                                                        : DLOCK_EREDIS;
      snprintf(why, sizeof why, "%s: %s",
               u->user       ? "AUTH with user and password"
               : u->password ? "AUTH with a password"
                             : "the server wants a password",
               r->str);
    }
  }
  freeReplyObject(r);
  if (err) {
    conn_fail(k, err, why, 1);
    return;
  }
  if (--k->hs_left == 0) {
    k->state = DLOCK__AC_READY;
    if (k->on_ready)
      k->on_ready(k);
  }
}

/* The reply of the request at the head. */
static void request_reply(dlock__aconn *k, redisReply *rep) {
  dlock__areq *r = k->head;
  k->head = r->next;
  if (!k->head)
    k->tail = NULL;
  r->next = NULL;
  /* The reply timer stays armed for the old head's due time: when it
   * fires, it re-arms itself for the head of then (timeout_fired). */
  if (rep->type == REDIS_REPLY_ERROR && r->script && !r->eval &&
      strncmp(rep->str, "NOSCRIPT", 8) == 0 && to_eval(r) == 0) {
    freeReplyObject(rep);
    dlock__aconn_submit(k, r);
    return;
  }
  if (rep->type == REDIS_REPLY_ERROR && dlock__retryable_reply(rep->str)) {
    char why[256];
    snprintf(why, sizeof why, "%s", rep->str);
    freeReplyObject(rep);
    req_retry(k, r, DLOCK_EREDIS, why);
    return;
  }
  r->fn(r, rep, 0, NULL);
}

/* Hands out every complete reply. 0, or -1 when the connection went (or
 * the client is closing): stop touching k. */
static int replies(dlock__aconn *k) {
  for (;;) {
    void *v = NULL;
    if (redisReaderGetReply(k->reader, &v) != REDIS_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s: protocol error: %s", k->what,
               k->reader->errstr);
      conn_fail(k, DLOCK_EPROTO, why, 1);
      return -1;
    }
    if (!v)
      return 0;
    redisReply *r = v;
    if (k->hs_left > 0)
      handshake_reply(k, r);
    else if (k->on_push)
      k->on_push(k, r);
    else if (k->head && k->head != k->unsent)
      request_reply(k, r);
    else {
      freeReplyObject(r);
      conn_fail(k, DLOCK_EPROTO, "reply without a request (protocol error)", 0);
      return -1;
    }
    if (k->a->closing || !k->reader)
      return -1;
  }
}

void dlock__aconn_readable(dlock__aconn *k) {
  if (!k->reader)
    return;
  char buf[65536];
  for (int i = 0; i < 8; i++) {
    ssize_t n = recv(k->w->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n <= 0) {
      char why[256];
      snprintf(why, sizeof why, "%s connection: %s", k->what,
               n == 0 ? "server closed the connection" : strerror(errno));
      conn_fail(k, DLOCK_ECONN, why, 0);
      return;
    }
    if (redisReaderFeed(k->reader, buf, (size_t)n) != REDIS_OK) {
      conn_fail(k, DLOCK_ENOMEM, "out of memory", 1);
      return;
    }
    if (replies(k) != 0)
      return;
    if ((size_t)n < sizeof buf)
      break;
  }
  if (k->state == DLOCK__AC_READY || k->state == DLOCK__AC_HANDSHAKE)
    flush_out(k);
}

void dlock__aconn_writable(dlock__aconn *k) {
  if (k->state != DLOCK__AC_CONNECTING) {
    flush_out(k);
    return;
  }
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(k->w->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
    soerr = errno;
  if (soerr == 0) {
    dlock__async_untimer(k->a, &k->timeout);
    connected(k);
    return;
  }
  close_socket(k);
  try_next(k, strerror(soerr));
}

static void timeout_fired(dlock__atimer *t) {
  dlock__aconn *k = t->arg;
  char why[256];
  if (k->refused) {
    snprintf(why, sizeof why,
             "%s: the event loop's adapter could not watch "
             "the socket",
             k->what);
    conn_fail(k, DLOCK_ENOMEM, why, 0);
    return;
  }
  if (k->state == DLOCK__AC_CONNECTING) {
    snprintf(why, sizeof why, "no connection within %d ms",
             k->a->cfg.connect_timeout_ms);
    close_socket(k);
    try_next(k, why);
    return;
  }
  int64_t now = dlock__async_now();
  dlock__areq *h = k->head != k->unsent ? k->head : NULL;
  int64_t due = h ? h->sent_at + k->a->cfg.command_timeout_ms : -1;
  if (k->hs_left > 0 || (h && due <= now)) {
    snprintf(why, sizeof why, "%s: no reply within %d ms", k->what,
             k->a->cfg.command_timeout_ms);
    conn_fail(k, DLOCK_ECONN, why, 0);
  } else if (h) {
    dlock__async_timer(k->a, &k->timeout, due);
  }
}

void dlock__aconn_close(dlock__aconn *k) {
  close_socket(k);
  free_addrs(k);
  dlock__async_untimer(k->a, &k->reconnect);
  while (k->head) {
    dlock__areq *r = k->head;
    k->head = r->next;
    req_drop(r);
  }
  k->tail = k->unsent = NULL;
  while (k->retrying) {
    dlock__areq *r = k->retrying;
    k->retrying = r->rnext;
    dlock__async_untimer(k->a, &r->retry);
    req_drop(r);
  }
  dlock__sb_free(&k->out);
}
