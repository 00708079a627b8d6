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
 * re-sent after the retry delay policy's pause (dlock__retry_pause), at most
 * retry_attempts times; then its owner hears DLOCK_ECONN. Replies LOADING /
 * BUSY / TRYAGAIN / MASTERDOWN are retried the same way; NOSCRIPT is answered
 * with EVAL at once. A reply that does not come within command_timeout_ms of
 * its send fails the connection (and so every request on it), as the blocking
 * multiplexed connection does.
 *
 * The bytes go through the hiredis reader for the replies (as link.c) and
 * dlock__resp_argv for the requests.
 *
 * TLS (rediss://): after connect(2) comes the TLS state, SSL_connect one
 * non-blocking step per readable/writable event (tls.c makes the session:
 * the client's context, its socket BIO that writes with MSG_NOSIGNAL, the
 * name checks of cfg.tls_verify); then every read and write goes through
 * SSL_read / SSL_write, WANT_READ / WANT_WRITE becoming the interest given
 * to the loop. A plain connection to a TLS-only port (reset or closed
 * before the first handshake reply) is probed with a ClientHello on a
 * connection of its own, as link.c does: a TLS answer fails the requests
 * with DLOCK_ETLS ("use rediss://") instead of retrying.
 *
 * SENTINEL (redis-sentinel://): the address comes from async_route.c
 * (RESOLVING until the sentinels named the master); the handshake ends
 * with ROLE, and a server that is not a master, a READONLY reply or a lost
 * connection make the route ask the sentinels again. cfg.sync_replicas:
 * every script (they all write) is followed by WAIT on the same
 * connection; its reply is held until WAIT's answer comes.
 *
 * CLUSTER (redis-cluster://): a request submitted to the command
 * connection goes to its slot's master's (async_route.c); MOVED and ASK
 * replies hand it back to the route, an ASK'd request is preceded by
 * ASKING (whose +OK is skipped).
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

#include "async/async.h"

static void timeout_fired(dlock__atimer *t);
static void tls_step(dlock__aconn *k);
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

dlock__areq *dlock__areq_eval_call(const dlock__call *k, dlock__areq_fn *fn,
                                   void *arg) {
  return dlock__areq_eval(dlock__core_script(k->script), k->nkeys, k->keys,
                          k->klens, k->nargs, k->args, k->alens, fn, arg);
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
    r->slot = nkeys > 0 ? (int)dlock__key_slot(keys[0], klens[0]) : -1;
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

dlock__areq *dlock__areq_cmd(int argc, const char **argv, const size_t *lens,
                             dlock__areq_fn *fn, void *arg) {
  dlock__areq *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return NULL;
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__resp_argv(&b, argc, argv, lens);
  if (!b.oom && (r->cmd = dlock__malloc(b.len)) != NULL) {
    memcpy(r->cmd, b.p, b.len);
    r->len = b.len;
    r->fn = fn;
    r->arg = arg;
  }
  dlock__sb_free(&b);
  if (!r->cmd) {
    free(r);
    r = NULL;
  }
  if (r)
    r->slot = -1;
  return r;
}

void dlock__areq_free(dlock__areq *r) {
  if (!r)
    return;
  if (r->held)
    freeReplyObject(r->held);
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

/* Gives (on) or takes back one interest in k's socket from the adapter:
 * *given says whether it has it, add and del are its hooks. */
static void want(dlock__aconn *k, int on, int *given,
                 int (*add)(void *, dlock_async_watch *),
                 void (*del)(void *, dlock_async_watch *)) {
  void *data = k->a->hooks.data;
  if (!k->w || on == *given)
    return;
  if (on && add(data, k->w) != 0) {
    hook_refused(k);
    return;
  }
  if (!on)
    del(data, k->w);
  *given = on;
}

static void want_read(dlock__aconn *k, int on) {
  want(k, on, &k->reading, k->a->hooks.add_read, k->a->hooks.del_read);
}

static void want_write(dlock__aconn *k, int on) {
  want(k, on, &k->writing, k->a->hooks.add_write, k->a->hooks.del_write);
}

static void close_socket(dlock__aconn *k) {
  dlock_async *a = k->a;
  if (k->ssl) {
    dlock__tls_session_free(k->ssl); /* no close_notify: see tls.c */
    k->ssl = NULL;
  }
  if (k->w) {
    a->hooks.release(a->hooks.data, k->w);
    dlock__fd_untrack(k->w->fd);
    close(k->w->fd);
    free(k->w); /* the dlock__awatch */
    k->w = NULL;
  }
  k->reading = k->writing = k->refused = k->ssl_rw = k->answered = 0;
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

static void resend(dlock__aconn *k, dlock__areq *r);

static void retry_fired(dlock__atimer *t) {
  dlock__areq *r = t->arg;
  retry_unlink(r->k, r);
  resend(r->k, r);
}

/* r failed with err (why): re-sent later, or ended when no attempt is
 * left. */
static void req_retry(dlock__aconn *k, dlock__areq *r, int err,
                      const char *why) {
  dlock_async *a = k->a;
  int left = a->cfg.retry_attempts > 0 ? a->cfg.retry_attempts : 0;
  int64_t now = dlock__async_now();
  int64_t pause = dlock__retry_pause(&a->cfg, r->tries, &r->pause);
  /* The tries left and the call's wait budget (r->wait_until) decide, the
   * pause cut to what is left of the budget: the blocking router's rule
   * (ioverdict.c). Until io-stack D2 this client ran the whole policy: a
   * 1 s lock at a dead server answered after 3 x retry_interval_ms. */
  if (a->closing || !dlock__retry_verdict(
                        ++r->tries, r->no_retry ? 1 : 1 + left,
                        r->wait_until > 0 ? r->wait_until : -1, now, &pause)) {
    r->fn(r, NULL, err, why);
    return;
  }
  r->k = k;
  r->redirects = 0; /* a bound per try (dlock__redirect_bound) */
  r->rprev = NULL;
  r->rnext = k->retrying;
  if (k->retrying)
    k->retrying->rprev = r;
  k->retrying = r;
  r->retry.fn = retry_fired;
  r->retry.arg = r;
  dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "retry",
             "try %d of %d failed (%s); the next in %lld ms", r->tries,
             left + 1, why ? why : "", (long long)pause);
  dlock__async_timer(a, &r->retry, now + pause);
}

void dlock__aconn_retry(dlock__aconn *k, dlock__areq *r, int err,
                        const char *why) {
  req_retry(k, r, err, why);
}

/* r goes again at once, to where its connection's requests go. */
static void resend(dlock__aconn *k, dlock__areq *r) {
  if (k->a->url.cluster && k->cmdconn)
    dlock__aroute_submit(k->a, r); /* the map may have changed */
  else
    dlock__aconn_enqueue(k, r);
}

/* Closes the connection; every request on it is retried (or, final, ends
 * with err at once). A connection that was ready before and broke without
 * timing out most likely died while idle (a restart, CLIENT KILL): each
 * request on it is sent again at once on a new connection, once, without
 * counting a try -- the blocking router's rule (ioverdict.c
 * dlock__resend_now); until io-stack D9 this client paused
 * retry_interval_ms for it. Not for a request written behind the
 * handshake: the connection was made for it. */
static void conn_fail_how(dlock__aconn *k, int err, const char *why, int final,
                          int timed_out) {
  dlock_async *a = k->a;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", why);
  if (!a->closing) /* observability (issue 27) */
    dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "disconnect",
               "connection lost: %s", msg);
  if (k->data && k->state != DLOCK__AC_RESOLVING && !a->closing)
    dlock__aroute_invalid(k); /* Sentinel: the master may have moved */
  int was_ready = k->state == DLOCK__AC_READY;
  k->probe = 0;
  close_socket(k);
  free_addrs(k);
  dlock__areq *list = k->head;
  k->head = k->tail = k->unsent = NULL;
  while (list) {
    dlock__areq *r = list;
    list = r->next;
    r->next = NULL;
    if (r->held) { /* the WAIT's answer did not come: sent again whole */
      freeReplyObject(r->held);
      r->held = NULL;
    }
    if (a->closing) {
      req_drop(r);
      continue;
    }
    int established = was_ready && !(r->counted && r->behind_hs);
    if (final)
      r->fn(r, NULL, err, msg);
    else if (err == DLOCK_ECONN &&
             dlock__resend_now(established, timed_out, r->no_retry,
                               &r->resent_now)) {
      dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "retry",
                 "%s; re-sent at once on a new connection", msg);
      resend(k, r);
    } else {
      req_retry(k, r, err, msg);
    }
  }
  if (k->on_down && !a->closing)
    k->on_down(k, err, msg);
}

static void conn_fail(dlock__aconn *k, int err, const char *why, int final) {
  conn_fail_how(k, err, why, final, 0);
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
  dlock__awatch *aw = dlock__calloc(1, sizeof *aw);
  if (!aw) {
    close(fd);
    snprintf(why, wn, "out of memory");
    return -1;
  }
  aw->k = k;
  k->w = &aw->w;
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
  const dlock__url *u = &k->at;
  if (u->is_unix)
    snprintf(buf, n, "unix:%s", u->path);
  else
    snprintf(buf, n, "%s:%d", u->host, u->port);
}

static void connect_failed(dlock__aconn *k, const char *why) {
  char at[300], msg[600];
  where(k, at, sizeof at);
  /* a long reason is cut short: the message is for people */
  if (snprintf(msg, sizeof msg, "cannot connect to %s: %s", at, why) >=
      (int)sizeof msg)
    memcpy(msg + sizeof msg - 4, "...", 4);
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
  char why[512] = "";
  k->at = k->url ? *k->url : a->url;
  if (k->at.host) {
    snprintf(k->host, sizeof k->host, "%s", k->at.host);
    k->at.host = k->host;
  }
  int rc = k->data ? dlock__aroute_addr(k, why, sizeof why) : 0;
  if (rc == 1) {
    k->state = DLOCK__AC_RESOLVING;
    return;
  }
  if (rc < 0) {
    conn_fail(k, DLOCK_ECONN, why, 0);
    return;
  }
  dlock__aconn_resolved(k, 0, NULL);
}

void dlock__aconn_resolved(dlock__aconn *k, int err, const char *why) {
  dlock_async *a = k->a;
  const dlock__url *u = &k->at;
  k->state = DLOCK__AC_IDLE;
  if (err) {
    conn_fail(k, err, why, 0);
    return;
  }
  if (u->is_unix) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(u->path) >= sizeof sa.sun_path) {
      connect_failed(k, "socket path too long");
      return;
    }
    memcpy(sa.sun_path, u->path, strlen(u->path) + 1);
    char why2[256] = "";
    int rc = start_connect(k, AF_UNIX, (struct sockaddr *)&sa, sizeof sa, why2,
                           sizeof why2);
    if (rc < 0) {
      connect_failed(k, why2);
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
 * SETNAME and SELECT, as link.c's handshake sends them; then, on a
 * Sentinel client's data connection, ROLE (it must say "master", as
 * sentinel.c checks), and, with sync_replicas -1 on the command
 * connection, INFO replication (the replicas WAIT waits for). */
static void handshake_bytes(dlock__aconn *k) {
  const dlock__url *u = &k->at;
  dlock_async *a = k->a;
  k->hs_n = 0;
  if (u->password) {
    const char *av[3] = {"AUTH", u->user ? u->user : u->password, u->password};
    size_t al[3] = {4, strlen(av[1]), strlen(u->password)};
    dlock__resp_argv(&k->out, u->user ? 3 : 2, av, al);
  } else {
    const char *av[1] = {"PING"};
    size_t al[1] = {4};
    dlock__resp_argv(&k->out, 1, av, al);
  }
  k->hs_kind[k->hs_n++] = 'A';
  const char *name = a->conn_name;
  if (name) {
    const char *av[3] = {"CLIENT", "SETNAME", name};
    size_t al[3] = {6, 7, strlen(name)};
    dlock__resp_argv(&k->out, 3, av, al);
    k->hs_kind[k->hs_n++] = 'N';
  }
  if (u->db) {
    char dbs[24];
    const char *av[2] = {"SELECT", dbs};
    size_t al[2] = {6, dlock__fmt_i64(dbs, u->db)};
    dlock__resp_argv(&k->out, 2, av, al);
    k->hs_kind[k->hs_n++] = 'S';
  }
  if (k->data && a->url.sentinel) {
    const char *av[1] = {"ROLE"};
    size_t al[1] = {4};
    dlock__resp_argv(&k->out, 1, av, al);
    k->hs_kind[k->hs_n++] = 'R';
  }
  if (k->cmdconn && a->cfg.sync_replicas < 0) {
    const char *av[2] = {"INFO", "replication"};
    size_t al[2] = {4, 11};
    dlock__resp_argv(&k->out, 2, av, al);
    k->hs_kind[k->hs_n++] = 'I';
  }
  k->hs_left = k->hs_n;
}

/* The TCP (or unix) connection is up: TLS first when the URL says so, or
 * the probe's ClientHello, or the handshake. */
static void connected(dlock__aconn *k) {
  free_addrs(k);
  if (k->probe) {
    k->state = DLOCK__AC_HANDSHAKE;
    dlock__sb_reset(&k->out);
    k->out_off = 0;
    dlock__sb_add(&k->out, (const char *)dlock__tls_client_hello,
                  dlock__tls_client_hello_len);
    dlock__async_timer(k->a, &k->timeout,
                       dlock__async_now() + k->a->cfg.connect_timeout_ms);
    want_read(k, 1);
    want_write(k, 1);
    return;
  }
  if (k->at.tls && !k->ssl) {
    dlock_async *a = k->a;
    char why[300];
    const char *name = a->tls_name ? a->tls_name : k->at.host;
    if (dlock__tls_session(a->tls_ctx, k->w->fd, name, a->cfg.tls_verify,
                           &k->ssl, why, sizeof why) != 0) {
      conn_fail(k, DLOCK_ETLS, why, 1);
      return;
    }
    k->state = DLOCK__AC_TLS;
    dlock__async_timer(a, &k->timeout,
                       dlock__async_now() + a->cfg.connect_timeout_ms);
    tls_step(k);
    return;
  }
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

/* A rediss:// connection failed `at` (ioverdict.c dlock__tls_verdict, the
 * blocking client's rule too): TLS's doing -- a handshake that failed, a
 * certificate refused, a client certificate the server wants, a close
 * right after the handshake without one -- ends its requests with
 * DLOCK_ETLS at once; anything else is an ordinary failure, retried. Until
 * io-stack D8 such failures after the handshake were retried through the
 * whole policy, without the hint. 1 when it was TLS's. */
static int tls_failed(dlock__aconn *k, int at, int closed, const char *tls_err,
                      const char *detail) {
  char what[400];
  if (at == DLOCK__TLS_AT_HANDSHAKE)
    snprintf(what, sizeof what, "TLS handshake with %s:%d", k->at.host,
             k->at.port);
  else
    snprintf(what, sizeof what, "%s connection to %s:%d", k->what, k->at.host,
             k->at.port);
  int cert = k->ssl && dlock__tls_session_has_cert(k->ssl);
  if (dlock__tls_verdict(at, what, closed, cert, tls_err, detail) == 0)
    return 0;
  char msg[600];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  conn_fail(k, DLOCK_ETLS, msg, 1);
  return 1;
}

/* One step of SSL_connect; on success the handshake of Redis follows. */
static void tls_step(dlock__aconn *k) {
  char why[400];
  int r = dlock__tls_step(k->ssl, DLOCK__TLS_CONNECT, NULL, 0, why, sizeof why);
  if (r > 0) {
    dlock__async_untimer(k->a, &k->timeout);
    want_write(k, 0);
    connected(k);
    return;
  }
  if (r == DLOCK__TLS_WANT_READ || r == DLOCK__TLS_WANT_WRITE) {
    want_read(k, r == DLOCK__TLS_WANT_READ);
    want_write(k, r == DLOCK__TLS_WANT_WRITE);
    return;
  }
  tls_failed(k, DLOCK__TLS_AT_HANDSHAKE, r == 0,
             r == DLOCK__TLS_ERR_TLS ? why : NULL, why);
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

static void info_done(dlock__areq *r, redisReply *reply, int err,
                      const char *why) {
  dlock__aconn *k = r->arg;
  (void)why;
  dlock__areq_free(r);
  int n = err ? -1 : dlock__sync_parse_replicas(reply);
  if (reply)
    freeReplyObject(reply);
  /* Refused (an ACL user without +info): 0 until the next read, as
   * sync.c's; not reached: the count stays, read again next time. */
  if (n >= 0 || (!err && reply))
    k->sync_n = n > 0 ? n : 0;
  else
    k->sync_at = 0;
}

/* sync_replicas -1: the replica count is read again (INFO replication,
 * pipelined before the first unsent script) when the engine says it is
 * stale (dlock__eng_sync_stale: every DLOCK__SYNC_REFRESH_MS, as the
 * blocking client's sync.c) or a WAIT's answer differed from it -- so
 * replicas that attach later are waited for, and one that left is not. */
static void sync_refresh(dlock__aconn *k, int64_t now) {
  if (k->a->cfg.sync_replicas >= 0 || !k->cmdconn || !k->unsent ||
      k->state != DLOCK__AC_READY)
    return;
  int scripts = 0;
  for (dlock__areq *r = k->unsent; r && !scripts; r = r->next)
    scripts = r->script && !r->no_sync;
  if (!scripts || (!k->sync_recount && !dlock__eng_sync_stale(k->sync_at, now)))
    return;
  dlock__sb b;
  dlock__sb_init(&b);
  const char *av[2] = {"INFO", "replication"};
  size_t al[2] = {4, 11};
  dlock__resp_argv(&b, 2, av, al);
  dlock__areq *r = b.oom ? NULL : dlock__calloc(1, sizeof *r);
  if (r && (r->cmd = dlock__malloc(b.len)) != NULL) {
    memcpy(r->cmd, b.p, b.len);
    r->len = b.len;
    r->slot = -1;
    r->no_retry = 1;
    r->raw = 1; /* refused: the count is 0 (info_done) */
    r->fn = info_done;
    r->arg = k;
    dlock__areq *p = NULL;
    for (dlock__areq *q = k->head; q != k->unsent; q = q->next)
      p = q;
    r->next = k->unsent;
    if (p)
      p->next = r;
    else
      k->head = r;
    k->unsent = r;
    k->sync_at = now;
    k->sync_recount = 0;
  } else {
    free(r);
  }
  dlock__sb_free(&b);
}

/* The replicas a script's write waits for (cfg.sync_replicas; -1: those
 * the command connection's INFO counted), or 0 for no WAIT. The same
 * scripts as the blocking client's (sync.c): every lock write but the
 * watchdog's renewals. */
static int sync_want(dlock__aconn *k, const dlock__areq *r) {
  int n = k->a->cfg.sync_replicas;
  /* Renewals go without WAIT, as the blocking watchdog's (replicas that
   * lag never delay a renewal: docs/guarantees.md). */
  if (!r->script || !k->cmdconn || n == 0 || r->no_sync ||
      r->script == dlock__core_script(DLOCK__S_RENEW))
    return 0;
  return n > 0 ? n : k->sync_n;
}

/* Moves the bytes of queued requests into out (READY or HANDSHAKE: they
 * are pipelined behind the handshake), each script followed by its WAIT
 * when cfg.sync_replicas asks for one (sync.c's rule: WAIT counts the
 * acknowledgements of this connection's writes, so it follows the script
 * on the same connection). */
static void take_unsent(dlock__aconn *k) {
  int64_t now = dlock__async_now();
  sync_refresh(k, now);
  for (dlock__areq *r = k->unsent; r; r = r->next) {
    r->unsynced = 0;
    r->ask_pending = r->asking; /* ASK: ASKING right before it */
    r->asking = 0;
    r->out_start = k->out.len;
    r->counted = 0;
    r->behind_hs = k->state == DLOCK__AC_HANDSHAKE;
    if (r->ask_pending)
      dlock__sb_adds(&k->out, "*1\r\n$6\r\nASKING\r\n");
    dlock__sb_add(&k->out, r->cmd, r->len);
    r->sent_at = now;
    r->wait_want = sync_want(k, r);
    r->waits = r->wait_want > 0;
    if (r->waits) {
      /* sync_timeout_ms, cut to what is left of the call's wait budget (a
       * timed lock never waits for replicas past it: issue 38), at least
       * 1 ms (WAIT's 0 waits for ever) -- the blocking router's rule. */
      int64_t w = k->a->cfg.sync_timeout_ms;
      if (r->wait_until > 0 && r->wait_until - now < w)
        w = r->wait_until - now;
      r->wait_ms = w < 1 ? 1 : (int)w;
      char nr[24], ms[24];
      const char *av[3] = {"WAIT", nr, ms};
      size_t al[3] = {4, dlock__fmt_i64(nr, r->wait_want),
                      dlock__fmt_i64(ms, r->wait_ms)};
      dlock__resp_argv(&k->out, 3, av, al);
    }
  }
  k->unsent = NULL;
  if (k->head && !k->timeout.slot)
    dlock__async_timer(
        k->a, &k->timeout,
        k->head->sent_at +
            dlock__reply_timeout(k->a->cfg.command_timeout_ms,
                                 k->head->waits ? k->head->wait_ms : 0));
}

/* send(2), or SSL_write on a TLS connection: > 0 bytes, -2 would block,
 * -1 failed (why). */
static ssize_t io_send(dlock__aconn *k, const char *p, size_t n, char *why,
                       size_t wn, char *tls_err, size_t tn) {
  tls_err[0] = '\0';
  if (k->ssl) {
    char e[300];
    int r =
        dlock__tls_step(k->ssl, DLOCK__TLS_WRITE, (void *)p, n, e, sizeof e);
    if (r > 0)
      return r;
    if (r == DLOCK__TLS_WANT_WRITE || r == DLOCK__TLS_WANT_READ)
      return -2; /* WANT_READ: the readable event writes again */
    if (r == DLOCK__TLS_ERR_TLS)
      snprintf(tls_err, tn, "%s", e);
    snprintf(why, wn, "%s: %s", k->what, r == 0 ? "broken pipe" : e);
    return -1;
  }
  for (;;) {
    ssize_t w = send(k->w->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return -2;
    if (w < 0) {
      snprintf(why, wn, "%s: %s", k->what, strerror(errno));
      return -1;
    }
    return w;
  }
}

/* A send the server answered without running it (NOSCRIPT, a redirect, a
 * refusal such as LOADING): it is no copy that can act later. */
static void not_run(dlock__areq *r) {
  if (r->counted) {
    r->counted = 0;
    r->sends--;
  }
}

/* The requests whose first byte is written now count a send (r->sends:
 * a copy that may reach the server). */
static void count_sends(dlock__aconn *k) {
  for (dlock__areq *r = k->head; r && r != k->unsent; r = r->next)
    if (!r->counted && r->out_start < k->out_off) {
      r->counted = 1;
      r->sends++;
    }
}

static void flush_out(dlock__aconn *k) {
  if (k->state != DLOCK__AC_HANDSHAKE && k->state != DLOCK__AC_READY)
    return;
  if (!k->probe)
    take_unsent(k);
  if (k->out.oom) {
    conn_fail(k, DLOCK_ENOMEM, "out of memory", 1);
    return;
  }
  while (k->out_off < k->out.len) {
    char why[400], etls[300];
    ssize_t n = io_send(k, k->out.p + k->out_off, k->out.len - k->out_off, why,
                        sizeof why, etls, sizeof etls);
    if (n == -2)
      break;
    /* Before the first reply a write fails as the read does when the
     * server closed right after the TLS handshake (a client certificate
     * it wants): the same verdict (a loaded client writes again before it
     * reads the reset: "command: Connection reset by peer", ECONN). */
    if (n < 0 && k->ssl && !k->answered &&
        tls_failed(k, DLOCK__TLS_AT_FIRST_REPLY, dlock__io_closed_by_peer(why),
                   etls[0] ? etls : NULL, why))
      return;
    if (n < 0) {
      conn_fail(k, DLOCK_ECONN, why, 0);
      return;
    }
    k->out_off += (size_t)n;
    count_sends(k);
  }
  if (k->out_off == k->out.len) {
    dlock__sb_reset(&k->out);
    k->out_off = 0;
  }
  want_write(k, k->out.len > 0 || k->ssl_rw);
}

void dlock__aconn_submit(dlock__aconn *k, dlock__areq *r) {
  if (k == &k->a->cmd && k->a->url.cluster) {
    dlock__aroute_submit(k->a, r); /* the slot's master */
    return;
  }
  dlock__aconn_enqueue(k, r);
}

void dlock__aconn_enqueue(dlock__aconn *k, dlock__areq *r) {
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
  else if (k->state == DLOCK__AC_HANDSHAKE || k->state == DLOCK__AC_READY)
    want_write(k, 1);
}

void dlock__aconn_write(dlock__aconn *k, const char *p, size_t n) {
  if (k->state != DLOCK__AC_READY)
    return;
  dlock__sb_add(&k->out, p, n);
  want_write(k, 1);
}

void dlock__aconn_drop(dlock__aconn *k, const char *why) {
  if (k->state != DLOCK__AC_IDLE && k->state != DLOCK__AC_RESOLVING)
    conn_fail(k, DLOCK_ECONN, why, 0);
}

/* ---- reading ---------------------------------------------------------------
 */

static void handshake_reply(dlock__aconn *k, redisReply *r) {
  const dlock__url *u = &k->at;
  char why[600];
  int err = 0;
  char kind = k->hs_kind[k->hs_n - k->hs_left];
  /* A refused SETNAME (an ACL without +client) leaves the connection
   * unnamed, a refused INFO leaves the replica count 0 (sync.c's rule):
   * not failures. */
  if (r->type == REDIS_REPLY_ERROR && kind == 'S') {
    err = DLOCK_EREDIS;
    snprintf(why, sizeof why, "SELECT %d refused: %s", u->db, r->str);
  } else if (r->type == REDIS_REPLY_ERROR && kind == 'A') {
    err = dlock__is_auth_error(r->str) || u->password ? DLOCK_EAUTH
                                                      : DLOCK_EREDIS;
    snprintf(why, sizeof why, "%s: %s",
             u->user       ? "AUTH with user and password"
             : u->password ? "AUTH with a password"
                           : "the server wants a password",
             r->str);
  } else if (kind == 'R' && dlock__sentinel_role(r)) {
    /* Not (or no longer) the master: the sentinels are asked again and
     * the requests retried (sentinel.c's check_role). */
    snprintf(why, sizeof why, "%s:%d says it is not a master (%s)", u->host,
             u->port, dlock__sentinel_role(r));
    freeReplyObject(r);
    dlock__aroute_invalid(k);
    conn_fail(k, DLOCK_ECONN, why, 0);
    return;
  } else if (kind == 'I') {
    int n = dlock__sync_parse_replicas(r);
    k->sync_n = n > 0 ? n : 0;
    k->sync_at = dlock__async_now();
    k->sync_recount = 0;
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

/* The client's topology, for the shared verdicts (ioverdict.h). */
static int topo_of(const dlock_async *a) {
  return a->url.cluster    ? DLOCK__TOPO_CLUSTER
         : a->url.sentinel ? DLOCK__TOPO_SENTINEL
                           : DLOCK__TOPO_PLAIN;
}

/* The first key of r's EVALSHA/EVAL (its object's name), read back from
 * the encoded command: 1 with *p, *n, or 0. */
static int req_key0(const dlock__areq *r, const char **p, size_t *n) {
  const char *s = r->cmd, *end = r->cmd + r->len;
  const char *nl = memchr(s, '\n', r->len);
  for (int i = 0; nl && i < 4; i++) { /* verb, sha or body, numkeys, key */
    s = nl + 1;
    if (s >= end || *s != '$')
      return 0;
    long long l = strtoll(s + 1, NULL, 10);
    nl = memchr(s, '\n', (size_t)(end - s));
    if (!nl || l < 0 || l > end - (nl + 1))
      return 0;
    *p = nl + 1;
    *n = (size_t)l;
    nl = nl + 1 + l + 1; /* the data's \r\n: its \n */
    if (nl >= end)
      return i == 3;
  }
  return nl != NULL;
}

/* TYPE's answer for a script refused with WRONGTYPE: r's message names
 * the key and what it holds, as the blocking client's
 * (dlock__explain_wrongtype; one message, error.c). */
static void wrongtype_done(dlock__areq *t, redisReply *reply, int err,
                           const char *why) {
  (void)why;
  dlock__areq *r = t->arg;
  dlock__areq_free(t);
  char type[32] = "", held[300] = "";
  if (!err && reply &&
      (reply->type == REDIS_REPLY_STATUS || reply->type == REDIS_REPLY_STRING))
    snprintf(type, sizeof type, "%s", reply->str);
  if (reply)
    freeReplyObject(reply);
  const char *k0 = "";
  size_t kl = 0, n = 0;
  (void)req_key0(r, &k0, &kl);
  dlock__wrongtype_key(held, sizeof held, &n, k0, kl, type);
  int rc = dlock__wrongtype_fail(r->script, k0, kl, held);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  r->fn(r, NULL, rc, msg);
}

static void wrongtype_drop(void *arg) { req_drop(arg); }

/* r was refused with WRONGTYPE: asks its first key's TYPE, then ends r
 * (0), or -1 when it cannot ask (r ends with the server's text). */
static int explain_wrongtype(dlock_async *a, dlock__areq *r) {
  const char *k0;
  size_t kl;
  if (!r->script || !req_key0(r, &k0, &kl))
    return -1;
  const char *av[2] = {"TYPE", k0};
  size_t al[2] = {4, kl};
  dlock__areq *t = dlock__areq_cmd(2, av, al, wrongtype_done, r);
  if (!t)
    return -1;
  t->slot = r->slot;
  t->raw = 1;
  t->drop = wrongtype_drop;
  dlock__aconn_submit(&a->cmd, t);
  return 0;
}

/* An error reply to r (NOSCRIPT aside): what it means is the blocking
 * router's rule too (ioverdict.c dlock__reply_verdict) -- a redirect
 * followed, a refusal retried (after the master or the slot map is found
 * again when the node is not the one to serve), or the call's answer:
 * DLOCK_EREDIS with the server's text (an ACL's NOPERM says what to
 * grant, a MOVED on a redis:// URL to use redis-cluster://), DLOCK_EAUTH.
 * Until then every such reply reached the call as a reply and ended as
 * DLOCK_EPROTO, "unexpected reply type" (research io-stack D1). */
static void reply_error(dlock__aconn *k, dlock__areq *r, redisReply *rep) {
  dlock_async *a = k->a;
  int rc = 0, reroute = 0;
  int v = dlock__reply_verdict(
      rep->str, topo_of(a), r->script ? r->script->name : NULL, &rc, &reroute);
  char why[512];
  snprintf(why, sizeof why, "%s", dlock_last_error());
  char rh[256];
  unsigned rslot;
  int rport, ask = v == DLOCK__REPLY_ASK;
  if ((v == DLOCK__REPLY_MOVED || ask) &&
      dlock__parse_redirect(rep->str, ask ? "ASK" : "MOVED", &rslot, rh,
                            sizeof rh, &rport)) {
    /* The slot moved (MOVED: the map learns it) or is moving (ASK: this
     * request alone goes there, after ASKING). */
    freeReplyObject(rep);
    not_run(r);
    dlock__aroute_redirect(a, r, rslot, rh, rport, ask);
    return;
  }
  if (v == DLOCK__REPLY_RETRY && reroute && a->url.sentinel && k->data) {
    /* A master turned replica (failover), or a replica that lost its
     * master: ask the sentinels again, and send it to the master. */
    snprintf(why, sizeof why, "%s:%d: %s", k->at.host, k->at.port, rep->str);
    freeReplyObject(rep);
    not_run(r);
    dlock__aroute_invalid(k);
    req_retry(k, r, rc, why);
    conn_fail(k, DLOCK_ECONN, why, 0);
    return;
  }
  freeReplyObject(rep);
  if (v == DLOCK__REPLY_RETRY) {
    if (reroute && a->url.cluster)
      dlock__aroute_invalid(k); /* a failover: the map is asked for again */
    not_run(r); /* LOADING, BUSY, TRYAGAIN, ...: refused, not run */
    req_retry(k, r, rc, why);
    return;
  }
  if (strncmp(why, "WRONGTYPE", 9) == 0 && explain_wrongtype(a, r) == 0)
    return;
  r->fn(r, NULL, rc, why);
}

/* The reply of the request at the head (or of its WAIT). */
static void request_reply(dlock__aconn *k, redisReply *rep) {
  dlock__areq *r = k->head;
  if (r->ask_pending) { /* ASKING's +OK */
    r->ask_pending = 0;
    freeReplyObject(rep);
    return;
  }
  if (r->waits && !r->held) {
    r->held = rep; /* its WAIT's answer comes next */
    return;
  }
  k->head = r->next;
  if (!k->head)
    k->tail = NULL;
  r->next = NULL;
  if (r->held) {
    /* rep is WAIT's: the acknowledgements, judged by the engine's rule
     * (dlock__eng_sync_verdict, the blocking client's too). A shortfall is
     * not the request's failure -- the write was made -- but the caller's
     * to undo (async_lock.c: r->unsynced). sync_replicas -1 and the count
     * changed: it is read again before the next script, and this answer
     * judged by the count known now (at least what WAIT counted). */
    int cfg = k->a->cfg.sync_replicas;
    r->acks = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    int v = dlock__eng_sync_verdict(cfg, r->wait_want, r->acks, -1);
    if (v == DLOCK__ENG_SYNC_RECOUNT) {
      k->sync_recount = 1;
      if (r->acks > k->sync_n)
        k->sync_n = (int)r->acks;
      v = dlock__eng_sync_verdict(cfg, r->wait_want, r->acks, k->sync_n);
    }
    r->unsynced = v != DLOCK__ENG_SYNC_OK;
    freeReplyObject(rep);
    rep = r->held;
    r->held = NULL;
  }
  /* The reply timer stays armed for the old head's due time: when it
   * fires, it re-arms itself for the head of then (timeout_fired). */
  if (rep->type == REDIS_REPLY_ERROR && r->script && !r->eval &&
      strncmp(rep->str, "NOSCRIPT", 8) == 0 && to_eval(r) == 0) {
    freeReplyObject(rep);
    not_run(r);
    dlock__aconn_submit(k, r);
    return;
  }
  if (rep->type == REDIS_REPLY_ERROR && !r->raw) {
    reply_error(k, r, rep);
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
    k->answered = 1;
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

/* recv(2), or SSL_read: > 0 bytes, 0 the end, -2 nothing now, -1 failed
 * (why; *etls for TLS's own refusal). */
static ssize_t io_recv(dlock__aconn *k, char *buf, size_t n, char *why,
                       size_t wn, int *etls) {
  *etls = 0;
  if (k->ssl) {
    char e[300];
    int r = dlock__tls_step(k->ssl, DLOCK__TLS_READ, buf, n, e, sizeof e);
    k->ssl_rw = r == DLOCK__TLS_WANT_WRITE;
    if (r > 0)
      return r;
    if (r == DLOCK__TLS_WANT_READ || r == DLOCK__TLS_WANT_WRITE)
      return -2;
    if (r == 0)
      return 0;
    *etls = r == DLOCK__TLS_ERR_TLS;
    snprintf(why, wn, "%s", e);
    return -1;
  }
  for (;;) {
    ssize_t r = recv(k->w->fd, buf, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return -2;
    if (r < 0)
      snprintf(why, wn, "%s", strerror(errno));
    return r;
  }
}

/* A plain connection to a TCP port that reset or closed it before the
 * first reply of the handshake, or answered bytes that are not RESP: what
 * a TLS-only port does (link.c's plain_to_tls_port). The same address is
 * probed with a ClientHello; the requests wait meanwhile. 1 if probing. */
static int start_probe(dlock__aconn *k, const char *why) {
  if (k->probe || k->ssl || k->at.tls || k->at.is_unix || k->answered ||
      k->state != DLOCK__AC_HANDSHAKE)
    return 0;
  snprintf(k->probe_why, sizeof k->probe_why, "%s", why);
  close_socket(k);
  k->probe = 1;
  dlock__aconn_resolved(k, 0, NULL);
  return 1;
}

/* The probe's answer: TLS (0x15 alert / 0x16 handshake, version 3.x)
 * makes the requests fail with DLOCK_ETLS; else the first failure stands
 * and they are retried. */
static void probe_end(dlock__aconn *k, const unsigned char *b, size_t n) {
  char msg[600];
  int tls = n >= 2 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 0x03;
  if (tls) {
    snprintf(msg, sizeof msg,
             "the server at %s:%d speaks TLS: use rediss:// "
             "(rediss-cluster://, rediss-sentinel://), not redis://",
             k->at.host, k->at.port);
    conn_fail(k, DLOCK_ETLS, msg, 1);
  } else {
    snprintf(msg, sizeof msg, "%s", k->probe_why);
    conn_fail(k, DLOCK_ECONN, msg, 0);
  }
}

static void probe_read(dlock__aconn *k) {
  unsigned char b[2];
  ssize_t n = recv(k->w->fd, b, sizeof b, MSG_DONTWAIT | MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (n == 1)
    return; /* the second byte comes */
  probe_end(k, b, n > 0 ? (size_t)n : 0);
}

void dlock__aconn_readable(dlock__aconn *k) {
  if (k->probe && k->state == DLOCK__AC_HANDSHAKE) {
    probe_read(k);
    return;
  }
  if (k->state == DLOCK__AC_TLS) {
    tls_step(k);
    return;
  }
  if (!k->reader)
    return;
  char buf[65536];
  /* TLS: until SSL_read wants the socket (decoded bytes buffered in the
   * session are invisible to the loop). */
  int cap = k->ssl ? 1024 : 8;
  for (int i = 0; i < cap; i++) {
    char why[400] = "";
    int etls = 0;
    ssize_t n = io_recv(k, buf, sizeof buf, why, sizeof why, &etls);
    if (n == -2)
      break;
    if (n <= 0) {
      char msg[600];
      snprintf(msg, sizeof msg, "%s connection: %s", k->what,
               n == 0 ? "server closed the connection" : why);
      if (!k->answered && k->data && !etls && start_probe(k, msg))
        return;
      int closed = n == 0 || dlock__io_closed_by_peer(why);
      if (k->ssl && tls_failed(k,
                               k->answered ? DLOCK__TLS_AT_LATER
                                           : DLOCK__TLS_AT_FIRST_REPLY,
                               closed, etls ? why : NULL,
                               n == 0 ? "server closed the connection" : why))
        return;
      conn_fail(k, DLOCK_ECONN, msg, 0);
      return;
    }
    if (redisReaderFeed(k->reader, buf, (size_t)n) != REDIS_OK) {
      conn_fail(k, DLOCK_ENOMEM, "out of memory", 1);
      return;
    }
    if (replies(k) != 0)
      return;
    if (!k->ssl && (size_t)n < sizeof buf)
      break;
  }
  if (k->state == DLOCK__AC_READY || k->state == DLOCK__AC_HANDSHAKE)
    flush_out(k);
}

void dlock__aconn_writable(dlock__aconn *k) {
  if (k->state == DLOCK__AC_TLS) {
    tls_step(k);
    return;
  }
  if (k->state != DLOCK__AC_CONNECTING) {
    if (k->ssl_rw) { /* SSL_read wanted to write: it runs again */
      k->ssl_rw = 0;
      dlock__aconn_readable(k);
      if (k->state != DLOCK__AC_READY && k->state != DLOCK__AC_HANDSHAKE)
        return;
    }
    flush_out(k);
    return;
  }
  int soerr = 0;
  socklen_t sl = sizeof soerr;
  if (getsockopt(k->w->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
    soerr = errno;
  if (soerr == 0) {
    dlock__async_untimer(k->a, &k->timeout);
    want_write(k, 0);
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
  if (k->probe && k->state == DLOCK__AC_HANDSHAKE) {
    probe_end(k, NULL, 0);
    return;
  }
  if (k->state == DLOCK__AC_CONNECTING) {
    snprintf(why, sizeof why, "no connection within %d ms",
             k->a->cfg.connect_timeout_ms);
    close_socket(k);
    try_next(k, why);
    return;
  }
  if (k->state == DLOCK__AC_TLS) {
    tls_failed(k, DLOCK__TLS_AT_HANDSHAKE, 0, NULL, "no answer in time");
    return;
  }
  int64_t now = dlock__async_now();
  dlock__areq *h = k->head != k->unsent ? k->head : NULL;
  int64_t due =
      h ? h->sent_at + dlock__reply_timeout(k->a->cfg.command_timeout_ms,
                                            h->waits ? h->wait_ms : 0)
        : -1;
  if (k->hs_left > 0 || (h && due <= now)) {
    snprintf(why, sizeof why, "%s: no reply within %d ms", k->what,
             k->a->cfg.command_timeout_ms);
    conn_fail_how(k, DLOCK_ECONN, why, 0, 1);
  } else if (h) {
    dlock__async_timer(k->a, &k->timeout, due);
  }
}

void dlock__aconn_close_socket(dlock__aconn *k) {
  close_socket(k);
  free_addrs(k);
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
  dlock__subq_free(&k->subq);
}
