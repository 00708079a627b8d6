/*
 * conn.c -- connections, the per-node pool, and the router.
 *
 * Every Redis command of the library goes through dlock__exec. It is the one
 * place that knows which node serves a key (today: the single standalone
 * node; Sentinel and Cluster plug in here: slot routing, MOVED/ASK), owns the
 * retry policy, turns NOSCRIPT into an EVAL on the same connection, and maps
 * failures to DLOCK_E* codes with a detail message.
 *
 * Connections are blocking hiredis contexts with the client's timeouts. An
 * API thread borrows one from the node's pool for one command and returns it;
 * the calling thread does its own I/O, so an uncontended call costs exactly
 * one round trip with no thread hand-off.
 *
 * RETRIES. Every script of the library is safe to repeat (acquire writes an
 * absolute hold count, unlock has its latch, renew and reads are
 * idempotent), so any command is retried after a connection error, a
 * timeout, or a transient server state (LOADING, BUSY, TRYAGAIN,
 * MASTERDOWN), up to cfg.retry_attempts times, cfg.retry_interval_ms apart.
 * A failure on a pooled connection that was idle (typically: the server
 * restarted) first drops the idle ones and retries at once on a fresh
 * connection, without counting as an attempt.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static struct timeval ms_tv(int ms) {
  struct timeval tv = {ms / 1000, (suseconds_t)(ms % 1000) * 1000};
  return tv;
}

static int is_auth_error(const char *s) {
  return strncmp(s, "NOAUTH", 6) == 0 || strncmp(s, "WRONGPASS", 9) == 0 ||
         strstr(s, "invalid password") || strstr(s, "invalid username") ||
         strstr(s, "without any password configured") ||
         strstr(s, "AUTH <password> called");
}

static int ctx_error(redisContext *ctx, int timeout_ms, const char *what) {
  if (ctx->err == REDIS_ERR_IO &&
      (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT))
    return dlock__fail(DLOCK_ECONN, "%s: no reply within %d ms", what,
                       timeout_ms);
  if (ctx->err == REDIS_ERR_EOF)
    return dlock__fail(DLOCK_ECONN, "%s: server closed the connection", what);
  return dlock__fail(DLOCK_ECONN, "%s: %s", what,
                     ctx->errstr[0] ? ctx->errstr : strerror(errno));
}

int dlock__connect(dlock_client *c, const dlock__url *url, redisContext **out) {
  *out = NULL;
  struct timeval ct = ms_tv(c->cfg.connect_timeout_ms);
  redisContext *ctx = url->is_unix
                          ? redisConnectUnixWithTimeout(url->path, ct)
                          : redisConnectWithTimeout(url->host, url->port, ct);
  int conn_errno = errno;
  if (!ctx)
    return dlock__fail(DLOCK_ENOMEM, "out of memory creating a connection");
  if (ctx->err) {
    int rc;
    if (ctx->err == REDIS_ERR_IO &&
        (conn_errno == EMFILE || conn_errno == ENFILE))
      /* Not the server's fault: say so (the CLI used to report it as
       * "cannot reach Redis"). */
      rc = dlock__fail(DLOCK_ECONN,
                       "cannot open a socket: too many open files (%s; "
                       "see ulimit -n)",
                       conn_errno == EMFILE ? "this process's limit"
                                            : "the system's limit");
    else if (url->is_unix)
      rc = dlock__fail(DLOCK_ECONN, "cannot connect to unix:%s: %s", url->path,
                       ctx->errstr);
    else
      rc = dlock__fail(DLOCK_ECONN, "cannot connect to %s:%d: %s", url->host,
                       url->port, ctx->errstr);
    redisFree(ctx);
    return rc;
  }
  /* Not inherited by programs the application execs (hiredis 0.14 opens
   * sockets without SOCK_CLOEXEC). */
  fcntl(ctx->fd, F_SETFD, fcntl(ctx->fd, F_GETFD) | FD_CLOEXEC);
  dlock__fd_track(ctx->fd);
  redisSetTimeout(ctx, ms_tv(c->cfg.command_timeout_ms));
  redisReply *r = NULL;
  if (url->password) {
    const char *av[3] = {"AUTH", url->user ? url->user : url->password,
                         url->password};
    size_t al[3] = {4, strlen(av[1]), strlen(url->password)};
    r = dlock__ctx_cmd(ctx, url->user ? 3 : 2, av, al);
  } else {
    /* No credentials: a PING tells at once whether the server wants some,
     * so a missing password is reported at connect time too. */
    const char *av[1] = {"PING"};
    size_t al[1] = {4};
    r = dlock__ctx_cmd(ctx, 1, av, al);
  }
  if (!r) {
    int rc = ctx_error(ctx, c->cfg.command_timeout_ms, "handshake");
    dlock__ctx_free(ctx);
    return rc;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    int rc =
        is_auth_error(r->str) || url->password
            ? dlock__fail(DLOCK_EAUTH, "authentication refused: %s", r->str)
            : dlock__fail(DLOCK_EREDIS, "%s", r->str);
    freeReplyObject(r);
    dlock__ctx_free(ctx);
    return rc;
  }
  freeReplyObject(r);
  if (url->db) {
    char dbs[24];
    const char *av[2] = {"SELECT", dbs};
    size_t al[2] = {6, dlock__fmt_i64(dbs, url->db)};
    r = dlock__ctx_cmd(ctx, 2, av, al);
    if (!r || r->type == REDIS_REPLY_ERROR) {
      int rc = r ? dlock__fail(DLOCK_EREDIS, "SELECT %d refused: %s", url->db,
                               r->str)
                 : ctx_error(ctx, c->cfg.command_timeout_ms, "SELECT");
      if (r)
        freeReplyObject(r);
      dlock__ctx_free(ctx);
      return rc;
    }
    freeReplyObject(r);
  }
  *out = ctx;
  return 0;
}

/* ---- the pool ----------------------------------------------------------- */

int dlock__node_init(dlock__node *n, dlock_client *c, const dlock__url *url,
                     int max) {
  memset(n, 0, sizeof *n);
  n->c = c;
  n->url = url;
  n->max = max > 0 ? max : 1;
  n->use_mux = c->cfg.multiplex != 0;
  if (pthread_mutex_init(&n->mu, NULL) != 0)
    return DLOCK_ENOMEM;
  if (pthread_cond_init(&n->cv, NULL) != 0)
    goto fail_cv;
  if (pthread_mutex_init(&n->mux.mu, NULL) != 0)
    goto fail_mux_mu;
  if (pthread_cond_init(&n->mux.state_cv, NULL) != 0)
    goto fail_mux_cv;
  return 0;
fail_mux_cv:
  pthread_mutex_destroy(&n->mux.mu);
fail_mux_mu:
  pthread_cond_destroy(&n->cv);
fail_cv:
  pthread_mutex_destroy(&n->mu);
  return DLOCK_ENOMEM;
}

void dlock__node_free_memory(dlock__node *n) {
  for (dlock__conn *k = n->idle; k;) {
    dlock__conn *nx = k->next;
    dlock__ctx_free(k->ctx);
    free(k);
    k = nx;
  }
  n->idle = NULL;
  if (n->mux.ctx)
    dlock__ctx_free(n->mux.ctx);
  n->mux.ctx = NULL;
}

void dlock__node_destroy(dlock__node *n) {
  dlock__node_free_memory(n);
  pthread_cond_destroy(&n->mux.state_cv);
  pthread_mutex_destroy(&n->mux.mu);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
}

/* Borrows a connection; *fresh = 1 if it was just created. */
static int pool_get(dlock__node *n, dlock__conn **out, int *fresh) {
  *fresh = 0;
  pthread_mutex_lock(&n->mu);
  for (;;) {
    if (n->idle) {
      dlock__conn *k = n->idle;
      n->idle = k->next;
      pthread_mutex_unlock(&n->mu);
      *out = k;
      return 0;
    }
    if (n->total < n->max)
      break;
    pthread_cond_wait(&n->cv, &n->mu);
  }
  n->total++;
  pthread_mutex_unlock(&n->mu);
  dlock__conn *k = dlock__malloc(sizeof *k);
  int rc = k ? dlock__connect(n->c, n->url, &k->ctx)
             : dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (rc != 0 || !k || !k->ctx) {
    free(k);
    if (rc == 0)
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    pthread_mutex_lock(&n->mu);
    n->total--;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    return rc;
  }
  k->next = NULL;
  *fresh = 1;
  *out = k;
  return 0;
}

static void pool_put(dlock__node *n, dlock__conn *k) {
  pthread_mutex_lock(&n->mu);
  k->next = n->idle;
  n->idle = k;
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
}

/* Drops a broken connection; with all_idle, also every idle one (they most
 * likely broke the same way, e.g. a server restart). */
static void pool_drop(dlock__node *n, dlock__conn *k, int all_idle) {
  dlock__conn *stale = NULL;
  pthread_mutex_lock(&n->mu);
  n->total--;
  if (all_idle) {
    stale = n->idle;
    for (dlock__conn *s = stale; s; s = s->next)
      n->total--;
    n->idle = NULL;
  }
  pthread_cond_broadcast(&n->cv);
  pthread_mutex_unlock(&n->mu);
  dlock__ctx_free(k->ctx);
  free(k);
  while (stale) {
    dlock__conn *nx = stale->next;
    dlock__ctx_free(stale->ctx);
    free(stale);
    stale = nx;
  }
}

static int mux_connect(dlock__node *n, int *fresh);

int dlock__node_warm(dlock__node *n) {
  if (n->use_mux) {
    int fresh = 0;
    return mux_connect(n, &fresh);
  }
  dlock__conn *k;
  int fresh;
  int rc = pool_get(n, &k, &fresh);
  if (rc == 0)
    pool_put(n, k);
  return rc;
}

/* ---- the multiplexed connection ------------------------------------------
 *
 * All API threads of a client share one connection per node. A thread
 * writes its encoded command itself, under mux.mu, and appends itself to
 * the FIFO of requests waiting for a reply (Redis answers in order). One
 * thread at a time is the reader: it reads replies outside the lock and
 * hands each to the request at the head of the FIFO, waking its thread;
 * when its own reply has come it passes the reader role to the new head.
 * Concurrent commands thus leave in the same write bursts and come back in
 * the same reads -- Redis does one read and one write for many of them --
 * while a lone thread still does exactly one write and one read.
 *
 * WHAT IF a write fails? The connection is marked broken and shut down; the
 * reader (or the writer itself, when nobody reads) fails every request in
 * the FIFO with DLOCK_ECONN and closes it; dlock__exec then applies the
 * retry policy to each request as if it had used a connection of its own.
 * WHAT IF Redis stops answering? The reader's read times out after
 * command_timeout_ms and fails the whole FIFO the same way.
 */
struct dlock__mreq {
  dlock__mreq *next;
  pthread_cond_t *cv;
  redisReply *reply;
  int done;
  int err;       /* DLOCK_E* when done without a reply */
  int timed_out; /* the read timed out */
  int fresh;     /* the connection was opened for this request */
  char msg[192];
};

static _Thread_local pthread_cond_t t_mux_cv;
static _Thread_local int t_mux_cv_ready;

static pthread_cond_t *thread_cv(void) {
  if (!t_mux_cv_ready) {
    if (pthread_cond_init(&t_mux_cv, NULL) != 0)
      return NULL;
    t_mux_cv_ready = 1;
  }
  return &t_mux_cv;
}

/* Connects the shared connection if there is none. Called without mux.mu. */
static int mux_connect(dlock__node *n, int *fresh) {
  dlock__mux *m = &n->mux;
  pthread_mutex_lock(&m->mu);
  int have = m->ctx != NULL;
  pthread_mutex_unlock(&m->mu);
  if (have)
    return 0;
  redisContext *ctx = NULL;
  int rc = dlock__connect(n->c, n->url, &ctx);
  if (rc)
    return rc;
  pthread_mutex_lock(&m->mu);
  if (m->ctx == NULL) {
    m->ctx = ctx;
    m->gen++;
    *fresh = 1;
    ctx = NULL;
  }
  pthread_mutex_unlock(&m->mu);
  if (ctx)
    dlock__ctx_free(ctx); /* another thread connected meanwhile */
  return 0;
}

/* Fails every queued request and closes the connection. mux.mu held. */
static void mux_fail_all(dlock__mux *m, dlock__mreq *self, int timed_out,
                         const char *why) {
  for (dlock__mreq *h = m->head; h;) {
    dlock__mreq *nx = h->next;
    h->done = 1;
    h->err = DLOCK_ECONN;
    h->timed_out = timed_out;
    snprintf(h->msg, sizeof h->msg, "%s", why);
    if (h != self)
      pthread_cond_signal(h->cv);
    h = nx;
  }
  m->head = m->tail = NULL;
  if (m->ctx)
    dlock__ctx_free(m->ctx);
  m->ctx = NULL;
  m->broken = 0;
  pthread_cond_broadcast(&m->state_cv);
}

/* Reads replies until req has one. mux.mu held, m->reader set by caller. */
static void mux_read(dlock__node *n, dlock__mreq *req) {
  dlock__mux *m = &n->mux;
  while (!req->done) {
    redisContext *ctx = m->ctx;
    pthread_mutex_unlock(&m->mu);
    void *r = NULL;
    int st = redisGetReply(ctx, &r);
    int err_no = errno;
    pthread_mutex_lock(&m->mu);
    if (st != REDIS_OK || !m->head) {
      if (r)
        freeReplyObject(r);
      char why[160];
      int timed_out = st != REDIS_OK && ctx->err == REDIS_ERR_IO &&
                      (err_no == EAGAIN || err_no == EWOULDBLOCK);
      if (st == REDIS_OK)
        snprintf(why, sizeof why, "reply without a request (protocol error)");
      else if (timed_out)
        snprintf(why, sizeof why, "no reply within %d ms",
                 n->c->cfg.command_timeout_ms);
      else if (ctx->err == REDIS_ERR_EOF)
        snprintf(why, sizeof why, "server closed the connection");
      else
        snprintf(why, sizeof why, "%s",
                 ctx->errstr[0] ? ctx->errstr : strerror(err_no));
      mux_fail_all(m, req, timed_out, why);
      break;
    }
    dlock__mreq *h = m->head;
    m->head = h->next;
    if (!m->head)
      m->tail = NULL;
    h->reply = r;
    h->done = 1;
    if (h != req)
      pthread_cond_signal(h->cv);
  }
  m->reader = 0;
  /* A writer marked the connection broken (and shut it down) while this
   * thread read, and this thread's own reply came in before the shutdown:
   * nobody else would close it, and new requests wait for ever on
   * state_cv (issue 10: all threads hung under CLIENT KILL). */
  if (m->broken)
    mux_fail_all(m, NULL, 0, "connection broken by a failed write");
  if (m->head)
    pthread_cond_signal(m->head->cv); /* the next reader */
}

int dlock__write_all(int fd, const char *p, size_t len) {
  while (len) {
    /* send(MSG_NOSIGNAL), not write(2): a write to a socket the server
     * closed must fail with EPIPE, not raise SIGPIPE in the host. */
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* One command on the shared connection. Returns the reply, or NULL with
 * req->err set (DLOCK_ECONN / DLOCK_ENOMEM) and req->msg telling why. */
static redisReply *mux_roundtrip(dlock__node *n, const dlock__sb *b,
                                 dlock__mreq *req) {
  dlock__mux *m = &n->mux;
  memset(req, 0, sizeof *req);
  if (b->oom || !(req->cv = thread_cv())) {
    req->err = DLOCK_ENOMEM;
    snprintf(req->msg, sizeof req->msg, "out of memory");
    return NULL;
  }
  int fresh = 0;
  for (;;) {
    int rc = mux_connect(n, &fresh);
    if (rc) {
      req->err = rc;
      snprintf(req->msg, sizeof req->msg, "%s", dlock_last_error());
      return NULL;
    }
    pthread_mutex_lock(&m->mu);
    while (m->broken)
      pthread_cond_wait(&m->state_cv, &m->mu);
    if (m->ctx)
      break;
    pthread_mutex_unlock(&m->mu); /* closed meanwhile: connect again */
  }
  req->fresh = fresh;
  if (dlock__write_all(m->ctx->fd, b->p, b->len) != 0) {
    int e = errno;
    int timed_out = e == EAGAIN || e == EWOULDBLOCK;
    req->err = DLOCK_ECONN;
    req->timed_out = timed_out;
    snprintf(req->msg, sizeof req->msg, "%s",
             timed_out ? "write timed out" : strerror(e));
    if (m->reader) {
      /* Wake the reader; it fails the queue and closes the connection. */
      m->broken = 1;
      shutdown(m->ctx->fd, SHUT_RDWR);
    } else {
      mux_fail_all(m, req, timed_out, req->msg);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
  }
  if (m->tail)
    m->tail->next = req;
  else
    m->head = req;
  m->tail = req;
  while (!req->done) {
    if (!m->reader && m->head == req) {
      m->reader = 1;
      mux_read(n, req);
      break;
    }
    pthread_cond_wait(req->cv, &m->mu);
  }
  pthread_mutex_unlock(&m->mu);
  return req->reply;
}

/* ---- the router --------------------------------------------------------- */

static dlock__node *route(dlock_client *c, const char *key) {
  (void)key; /* standalone: one node serves every key */
  return &c->node;
}

static int retryable_reply(const char *s) {
  return strncmp(s, "LOADING", 7) == 0 || strncmp(s, "BUSY", 4) == 0 ||
         strncmp(s, "TRYAGAIN", 8) == 0 || strncmp(s, "MASTERDOWN", 10) == 0;
}

/* RESP encoding of argv into b. hiredis's own formatter goes through sds
 * printf-style helpers and costs several thousand instructions per command;
 * this is a few hundred. */
void dlock__resp_argv(dlock__sb *b, int argc, const char **argv,
                      const size_t *lens) {
  dlock__sb_add(b, "*", 1);
  dlock__sb_addu64(b, (uint64_t)argc);
  dlock__sb_add(b, "\r\n", 2);
  for (int i = 0; i < argc; i++) {
    dlock__sb_add(b, "$", 1);
    dlock__sb_addu64(b, lens[i]);
    dlock__sb_add(b, "\r\n", 2);
    dlock__sb_add(b, argv[i], lens[i]);
    dlock__sb_add(b, "\r\n", 2);
  }
}

/* hiredis writes with write(2), which raises SIGPIPE on a socket the server
 * closed. dlock writes every byte itself (dlock__write_all: send with
 * MSG_NOSIGNAL) and uses hiredis only to format and to read. On failure
 * ctx->err/errstr are set as hiredis would. */
void dlock__ctx_free(redisContext *ctx) {
  if (!ctx)
    return;
  dlock__fd_untrack(ctx->fd);
  redisFree(ctx);
}

static int ctx_send(redisContext *ctx, const char *p, size_t len) {
  if (dlock__write_all(ctx->fd, p, len) == 0)
    return 0;
  int e = errno;
  ctx->err = REDIS_ERR_IO;
  snprintf(ctx->errstr, sizeof ctx->errstr, "%s", strerror(e));
  errno = e;
  return -1;
}

redisReply *dlock__ctx_cmd(redisContext *ctx, int argc, const char **argv,
                           const size_t *lens) {
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__resp_argv(&b, argc, argv, lens);
  redisReply *r = NULL;
  if (b.oom) {
    ctx->err = REDIS_ERR_OOM;
    snprintf(ctx->errstr, sizeof ctx->errstr, "out of memory");
  } else if (ctx_send(ctx, b.p, b.len) == 0) {
    void *v = NULL;
    if (redisGetReply(ctx, &v) == REDIS_OK)
      r = v;
  }
  dlock__sb_free(&b);
  return r;
}

static redisReply *roundtrip(redisContext *ctx, const dlock__sb *b) {
  if (b->oom)
    return NULL; /* ctx->err stays 0: the caller reports DLOCK_ENOMEM */
  if (ctx_send(ctx, b->p, b->len) != 0)
    return NULL;
  void *r = NULL;
  if (redisGetReply(ctx, &r) != REDIS_OK)
    return NULL;
  return r;
}

/* One command: on ctx (a pooled connection), or on the node's shared
 * connection when ctx is NULL (then req tells why it failed). */
static redisReply *send_cmd(dlock__node *n, redisContext *ctx,
                            const dlock__cmd *cmd, dlock__mreq *req) {
  dlock__sb b;
  char buf[1024];
  dlock__sb_init_buf(&b, buf, sizeof buf);
  dlock__resp_argv(&b, cmd->argc, cmd->argv, cmd->argvlen);
  redisReply *r = ctx   ? roundtrip(ctx, &b)
                  : req ? mux_roundtrip(n, &b, req)
                        : NULL;
  if (r && cmd->script && r->type == REDIS_REPLY_ERROR &&
      strncmp(r->str, "NOSCRIPT", 8) == 0) {
    /* The server lost its script cache (SCRIPT FLUSH, restart): send the
     * body once; EVAL also caches it for the next EVALSHA. */
    freeReplyObject(r);
    const char *a01[2] = {"EVAL", cmd->script->body};
    size_t l01[2] = {4, strlen(cmd->script->body)};
    dlock__sb_reset(&b);
    dlock__sb_add(&b, "*", 1);
    dlock__sb_addu64(&b, (uint64_t)cmd->argc);
    dlock__sb_add(&b, "\r\n", 2);
    for (int i = 0; i < cmd->argc; i++) {
      const char *a = i < 2 ? a01[i] : cmd->argv[i];
      size_t l = i < 2 ? l01[i] : cmd->argvlen[i];
      dlock__sb_add(&b, "$", 1);
      dlock__sb_addu64(&b, l);
      dlock__sb_add(&b, "\r\n", 2);
      dlock__sb_add(&b, a, l);
      dlock__sb_add(&b, "\r\n", 2);
    }
    r = ctx ? roundtrip(ctx, &b) : req ? mux_roundtrip(n, &b, req) : NULL;
  }
  dlock__sb_free(&b);
  return r;
}

static _Thread_local int t_sends;

int dlock__exec_sends(void) { return t_sends; }

int dlock__exec(dlock_client *c, const dlock__cmd *cmd, redisReply **out) {
  *out = NULL;
  t_sends = 0;
  dlock__node *n = route(c, cmd->key);
  int attempts =
      cmd->no_retry
          ? 1
          : 1 + (c->cfg.retry_attempts > 0 ? c->cfg.retry_attempts : 0);
  int stale_retry_used = 0;
  int rc = DLOCK_ECONN;
  if (n->use_mux) {
    for (int i = 0;;) {
      dlock__mreq req;
      t_sends++;
      redisReply *r = send_cmd(n, NULL, cmd, &req);
      if (!r) {
        if (req.err != DLOCK_ECONN)
          return dlock__fail(req.err, "%s", req.msg);
        rc = dlock__fail(DLOCK_ECONN, "%s: %s", cmd->argv[0], req.msg);
        /* As with the pool below: a connection that was in use before and
         * broke without a timeout most likely died while idle. */
        if (!req.fresh && !req.timed_out && !stale_retry_used &&
            cmd->no_retry < 2) {
          stale_retry_used = 1;
          continue;
        }
      } else if (r->type == REDIS_REPLY_ERROR) {
        if (retryable_reply(r->str)) {
          rc = dlock__fail(DLOCK_EREDIS, "%s", r->str);
          freeReplyObject(r);
        } else {
          rc = is_auth_error(r->str)
                   ? dlock__fail(DLOCK_EAUTH, "authentication required: %s",
                                 r->str)
                   : dlock__fail(DLOCK_EREDIS, "%s", r->str);
          freeReplyObject(r);
          return rc;
        }
      } else {
        *out = r;
        return 0;
      }
      if (++i >= attempts)
        return rc;
      if (atomic_load(&c->closing))
        return dlock__fail(DLOCK_ECLOSED, "client is closing");
      dlock__sleep_ms(c->cfg.retry_interval_ms);
    }
  }
  for (int i = 0;;) {
    dlock__conn *k = NULL;
    int fresh = 0;
    rc = pool_get(n, &k, &fresh);
    if (rc == DLOCK_EAUTH || rc == DLOCK_EREDIS || rc == DLOCK_ENOMEM)
      return rc;
    if (rc == 0 && k) {
      t_sends++;
      redisReply *r = send_cmd(n, k->ctx, cmd, NULL);
      if (!r) {
        int timed_out = k->ctx->err == REDIS_ERR_IO &&
                        (errno == EAGAIN || errno == EWOULDBLOCK);
        rc = k->ctx->err
                 ? ctx_error(k->ctx, c->cfg.command_timeout_ms, cmd->argv[0])
                 : dlock__fail(DLOCK_ENOMEM, "out of memory");
        /* A reused connection that broke without timing out most likely
         * died while idle (server restart, CLIENT KILL): try a fresh one at
         * once. A timeout is real trouble and waits like any failure. */
        int eof_on_idle = !fresh && !timed_out;
        pool_drop(n, k, 1);
        if (rc == DLOCK_ENOMEM)
          return rc;
        if (eof_on_idle && !stale_retry_used && cmd->no_retry < 2) {
          stale_retry_used = 1;
          continue;
        }
      } else if (r->type == REDIS_REPLY_ERROR) {
        if (retryable_reply(r->str)) {
          rc = dlock__fail(DLOCK_EREDIS, "%s", r->str);
          freeReplyObject(r);
          pool_put(n, k);
        } else {
          rc = is_auth_error(r->str)
                   ? dlock__fail(DLOCK_EAUTH, "authentication required: %s",
                                 r->str)
                   : dlock__fail(DLOCK_EREDIS, "%s", r->str);
          freeReplyObject(r);
          pool_put(n, k);
          return rc;
        }
      } else {
        pool_put(n, k);
        *out = r;
        return 0;
      }
    }
    if (++i >= attempts)
      return rc;
    if (atomic_load(&c->closing))
      return dlock__fail(DLOCK_ECLOSED, "client is closing");
    dlock__sleep_ms(c->cfg.retry_interval_ms);
  }
}

static int eval_cmd(dlock_client *c, const dlock__script *s, int nkeys,
                    const char **keys, const size_t *klens, int nargs,
                    const char **args, const size_t *alens, int no_retry,
                    redisReply **out) {
  enum { STACK = 24 };
  const char *av_stack[STACK];
  size_t al_stack[STACK];
  int argc = 3 + nkeys + nargs;
  const char **av =
      argc <= STACK ? av_stack : dlock__calloc((size_t)argc, sizeof *av);
  size_t *al =
      argc <= STACK ? al_stack : dlock__calloc((size_t)argc, sizeof *al);
  if (!av || !al) {
    if (av != av_stack)
      free(av);
    if (al != al_stack)
      free(al);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  char nk[24];
  size_t nkl = dlock__fmt_i64(nk, nkeys);
  av[0] = "EVALSHA";
  al[0] = 7;
  av[1] = s->sha;
  al[1] = 40;
  av[2] = nk;
  al[2] = nkl;
  for (int i = 0; i < nkeys; i++) {
    av[3 + i] = keys[i];
    al[3 + i] = klens ? klens[i] : strlen(keys[i]);
  }
  for (int i = 0; i < nargs; i++) {
    av[3 + nkeys + i] = args[i];
    al[3 + nkeys + i] = alens ? alens[i] : strlen(args[i]);
  }
  dlock__cmd cmd = {nkeys ? keys[0] : NULL, s, argc, av, al, no_retry};
  int rc = dlock__exec(c, &cmd, out);
  if (av != av_stack)
    free(av);
  if (al != al_stack)
    free(al);
  return rc;
}

int dlock__eval(dlock_client *c, const dlock__script *s, int nkeys,
                const char **keys, const size_t *klens, int nargs,
                const char **args, const size_t *alens, redisReply **out) {
  return eval_cmd(c, s, nkeys, keys, klens, nargs, args, alens, 0, out);
}

int dlock__eval_once(dlock_client *c, const dlock__script *s, int nkeys,
                     const char **keys, const size_t *klens, int nargs,
                     const char **args, const size_t *alens, redisReply **out) {
  return eval_cmd(c, s, nkeys, keys, klens, nargs, args, alens, 2, out);
}
