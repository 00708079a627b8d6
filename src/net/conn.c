/*
 * conn.c -- connections, the per-node pool, and the router.
 *
 * Every Redis command of the library goes through dlock__exec. It is the one
 * place that knows which node serves a key (the single standalone node,
 * or on a cluster the slot's master: cluster.c's map, MOVED and ASK
 * redirects followed here without counting as retries), owns the
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
 * MASTERDOWN, CLUSTERDOWN, READONLY), up to cfg.retry_attempts times,
 * the pauses of the retry delay policy apart (dlock__retry_pause:
 * cfg.retry_interval_ms, or cfg.retry_delay's jitter) -- but never past the
 * deadline of a call with a finite wait budget (dlock__call_deadline): a
 * timedlock of 1000 ms against a dead server returns after about 1000 ms, not
 * after the whole retry policy -- nor past cfg.call_timeout_ms of the first
 * send (dlock__call_bound_over: a trylock against a stalled server answers
 * after one reply timeout). A failure on a pooled connection that was idle
 * (typically: the server restarted) first drops the idle ones and retries at
 * once on a fresh connection, without counting as an attempt. A counting script
 * (semaphore, latch: counter.c) is safe to repeat only while its once key
 * lives, so it carries a resend window (dlock__cmd.resend_window_ms, from
 * dlock__once_ttl): no copy of it is sent -- retry, reconnect-and-resend or
 * redirect -- once the window since its first send is over, however the time
 * went (slow connects, WAIT, redirects, a stalled process); the key outlives
 * the window by the longest one send can take.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/net.h"
#include "client/client.h"

/* ---- observability: connection events (log.c, stats.c) ------------------ */

/* Where n is, for log lines: host:port, the socket path, or the master of
 * a Sentinel URL. */
static void node_where(const dlock__node *n, char *buf, size_t len) {
  const dlock__url *u = n->url;
  if (u->is_unix)
    snprintf(buf, len, "%s", u->path ? u->path : "?");
  else if (u->sentinel)
    snprintf(buf, len, "the master of '%s'",
             u->master_name ? u->master_name : "?");
  else
    snprintf(buf, len, "%s:%d", u->host ? u->host : "?", u->port);
}

int dlock__node_up(dlock__node *n) {
  return atomic_load_explicit(&n->up, memory_order_relaxed);
}

/* A command connection of n was made: counted as a reconnect when one
 * failed before; logged (connect / reconnect). */
static void node_connected(dlock__node *n) {
  dlock_client *c = n->c;
  atomic_store_explicit(&n->up, 1, memory_order_relaxed);
  int again = atomic_exchange(&n->dropped, 0);
  if (again)
    dlock__stat_add(&c->stats, DLOCK__ST_RECONNECTS, 1);
  int level = again ? DLOCK_LOG_INFO : DLOCK_LOG_DEBUG;
  if (!dlock__log_on(&c->cfg, level))
    return;
  char where[300];
  node_where(n, where, sizeof where);
  dlock__log(&c->cfg, level, NULL, again ? "reconnect" : "connect",
             "%s to %s (connection name '%s')",
             again ? "reconnected" : "connected", where,
             c->conn_name ? c->conn_name : "");
}

/* A command connection of n failed and was closed (why: how). Any lock
 * may be held: the line is logged by the next disc_flush on this thread,
 * once no lock is held (a hook may call dlock_client_stats). */
static _Thread_local char t_disc[512];
static _Thread_local dlock__node *t_disc_node;

static void node_dropped(dlock__node *n, const char *why) {
  atomic_store_explicit(&n->up, 0, memory_order_relaxed);
  atomic_store(&n->dropped, 1);
  snprintf(t_disc, sizeof t_disc, "%s", why);
  t_disc_node = n;
}

/* Logs the disconnect node_dropped noted on this thread (no lock held). */
static void disc_flush(void) {
  dlock__node *n = t_disc_node;
  if (!n)
    return;
  t_disc_node = NULL;
  dlock_client *c = n->c;
  if (atomic_load(&c->closing) || !dlock__log_on(&c->cfg, DLOCK_LOG_WARN))
    return;
  char where[300];
  node_where(n, where, sizeof where);
  dlock__log(&c->cfg, DLOCK_LOG_WARN, NULL, "disconnect",
             "connection to %s lost: %s", where, t_disc);
}

/* ---- the pool ----------------------------------------------------------- */

int dlock__node_init(dlock__node *n, dlock_client *c, const dlock__url *url,
                     int max) {
  memset(n, 0, sizeof *n);
  n->c = c;
  n->url = url;
  n->max = max > 0 ? max : 1;
  n->use_mux = c->cfg.multiplex != 0;
  dlock__sync_init(&n->sync);
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
    dlock__link_free(k->link);
    free(k);
    k = nx;
  }
  n->idle = NULL;
  dlock__link_free(n->mux.link);
  n->mux.link = NULL;
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
  dlock__mu_lock(&n->mu);
  for (;;) {
    if (n->idle) {
      dlock__conn *k = n->idle;
      n->idle = k->next;
      if (dlock__link_stale(n->c, k->link)) {
        /* made for a master that was replaced (Sentinel failover) */
        n->total--;
        dlock__mu_unlock(&n->mu);
        dlock__link_free(k->link);
        free(k);
        dlock__mu_lock(&n->mu);
        continue;
      }
      dlock__mu_unlock(&n->mu);
      *out = k;
      return 0;
    }
    if (n->total < n->max)
      break;
    pthread_cond_wait(&n->cv, &n->mu);
  }
  n->total++;
  dlock__mu_unlock(&n->mu);
  dlock__conn *k = dlock__malloc(sizeof *k);
  int rc = k ? dlock__link_open(n->c, n->url, &k->link)
             : dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (rc != 0 || !k || !k->link) {
    free(k);
    if (rc == 0) { /* never 0 here: the caller would use an unset *out */
      dlock__fail(DLOCK_ENOMEM, "out of memory");
      rc = DLOCK_ENOMEM;
    }
    dlock__mu_lock(&n->mu);
    n->total--;
    pthread_cond_signal(&n->cv);
    dlock__mu_unlock(&n->mu);
    return rc;
  }
  k->next = NULL;
  *fresh = 1;
  *out = k;
  node_connected(n);
  return 0;
}

static void pool_put(dlock__node *n, dlock__conn *k) {
  dlock__mu_lock(&n->mu);
  k->next = n->idle;
  n->idle = k;
  pthread_cond_signal(&n->cv);
  dlock__mu_unlock(&n->mu);
}

/* Drops a broken connection; with all_idle, also every idle one (they most
 * likely broke the same way, e.g. a server restart). */
static void pool_drop(dlock__node *n, dlock__conn *k, int all_idle) {
  dlock__conn *stale = NULL;
  dlock__mu_lock(&n->mu);
  n->total--;
  if (all_idle) {
    stale = n->idle;
    for (dlock__conn *s = stale; s; s = s->next)
      n->total--;
    n->idle = NULL;
  }
  pthread_cond_broadcast(&n->cv);
  dlock__mu_unlock(&n->mu);
  dlock__link_free(k->link);
  free(k);
  while (stale) {
    dlock__conn *nx = stale->next;
    dlock__link_free(stale->link);
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
  int err;           /* DLOCK_E* when done without a reply */
  int timed_out;     /* the read timed out */
  int fresh;         /* the connection was opened for this request */
  int want;          /* replies expected: 2 when a WAIT follows (sync.c) */
  int wait_ms;       /* that WAIT's timeout */
  redisReply *extra; /* the WAIT's reply */
  char msg[512];     /* as dlock_last_error()'s: no message cut short */
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
  dlock__mu_lock(&m->mu);
  int have = m->link != NULL;
  dlock__mu_unlock(&m->mu);
  if (have)
    return 0;
  dlock__link *l = NULL;
  int rc = dlock__link_open(n->c, n->url, &l);
  if (rc)
    return rc;
  dlock__mu_lock(&m->mu);
  int made = m->link == NULL;
  if (made) {
    m->link = l;
    m->gen++;
    *fresh = 1;
    l = NULL;
  }
  dlock__mu_unlock(&m->mu);
  dlock__link_free(l); /* another thread connected meanwhile */
  if (made)
    node_connected(n);
  return 0;
}

/* Fails every queued request and closes the connection. mux.mu held. */
static void mux_fail_all(dlock__mux *m, dlock__mreq *self, int timed_out,
                         const char *why) {
  for (dlock__mreq *h = m->head; h;) {
    dlock__mreq *nx = h->next;
    if (h->reply) { /* the first of two replies: the pair failed */
      freeReplyObject(h->reply);
      h->reply = NULL;
    }
    h->done = 1;
    h->err = DLOCK_ECONN;
    h->timed_out = timed_out;
    snprintf(h->msg, sizeof h->msg, "%s", why);
    if (h != self)
      pthread_cond_signal(h->cv);
    h = nx;
  }
  m->head = m->tail = NULL;
  if (m->link) /* logged by mux_roundtrip, once mux.mu is released */
    node_dropped((dlock__node *)((char *)m - offsetof(dlock__node, mux)), why);
  dlock__link_free(m->link);
  m->link = NULL;
  m->broken = 0;
  pthread_cond_broadcast(&m->state_cv);
}

/* Why l failed, in the words of the router's messages. */
static void link_why(const dlock__link *l, int timeout_ms, char *buf,
                     size_t n) {
  if (l->err == DLOCK__LINK_TIMEOUT)
    snprintf(buf, n, "no reply within %d ms", timeout_ms);
  else
    snprintf(buf, n, "%s", l->errstr);
}

/* Reads replies until req has one. mux.mu held, m->reader set by caller.
 * Each read waits at most the reply timeout of the request at the head
 * (dlock__reply_timeout: a WAIT behind it adds its own), set by the reader
 * alone, under mux.mu, and read by its own reads outside it: until io-stack
 * D11 a writer set cto + sync_timeout_ms for good (every later read of the
 * shared connection waited that long) and wrote l->read_ms under mux.mu
 * while the reader read it outside (a data race, TLS's ssl_io). */
static void mux_read(dlock__node *n, dlock__mreq *req) {
  dlock__mux *m = &n->mux;
  while (!req->done) {
    dlock__link *l = m->link;
    const dlock__mreq *hd = m->head;
    int ms = (int)dlock__reply_timeout(n->c->cfg.command_timeout_ms,
                                       hd && hd->want > 1 ? hd->wait_ms : 0);
    if (l->read_ms != ms)
      dlock__link_set_read_timeout(l, ms);
    dlock__mu_unlock(&m->mu);
    redisReply *r = dlock__link_reply(l);
    dlock__mu_lock(&m->mu);
    if (!r || !m->head) {
      char why[200];
      if (r)
        snprintf(why, sizeof why, "reply without a request (protocol error)");
      else
        link_why(l, n->c->cfg.command_timeout_ms, why, sizeof why);
      int timed_out = !r && l->err == DLOCK__LINK_TIMEOUT;
      if (r)
        freeReplyObject(r);
      mux_fail_all(m, req, timed_out, why);
      break;
    }
    dlock__mreq *h = m->head;
    if (h->want > 1 && !h->reply) {
      h->reply = r; /* its WAIT's reply comes next */
      continue;
    }
    m->head = h->next;
    if (!m->head)
      m->tail = NULL;
    if (h->want > 1)
      h->extra = r;
    else
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

/* ---- one send of a command, on either kind of connection ----------------- */

/* The outcome of one send (router.c's retry loop judges it). */
typedef struct attempt {
  redisReply *reply; /* NULL: failed, err says how */
  int err;           /* DLOCK_E* when reply is NULL */
  int connecting;    /* failed before anything was written (msg is whole) */
  int sent;          /* bytes of the command may have reached the server */
  int fresh;         /* the connection was opened for this attempt */
  int timed_out;     /* no reply within the command timeout */
  int with_wait;     /* a WAIT follows the command (sync.c) */
  int wait_ms;       /* its timeout (wait_ms_now) */
  redisReply *wait_reply;
  char msg[512]; /* as dlock_last_error()'s */
} attempt;

static void attempt_fail(attempt *a, int err, const char *msg) {
  a->reply = NULL;
  a->err = err;
  snprintf(a->msg, sizeof a->msg, "%s", msg);
}

/* Encoded command b on the shared connection (a->fresh set once). */
static redisReply *mux_roundtrip_locked(dlock__node *n, const dlock__sb *b,
                                        attempt *a);
static redisReply *mux_roundtrip(dlock__node *n, void *unused,
                                 const dlock__sb *b, attempt *a) {
  (void)unused;
  redisReply *r = mux_roundtrip_locked(n, b, a);
  disc_flush(); /* a disconnect met on the way, now that no lock is held */
  return r;
}

static redisReply *mux_roundtrip_locked(dlock__node *n, const dlock__sb *b,
                                        attempt *a) {
  dlock__mux *m = &n->mux;
  dlock__mreq req;
  memset(&req, 0, sizeof req);
  if (b->oom || !(req.cv = thread_cv())) {
    attempt_fail(a, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  for (;;) {
    int rc = mux_connect(n, &a->fresh);
    if (rc) {
      a->connecting = 1;
      attempt_fail(a, rc, dlock_last_error());
      return NULL;
    }
    dlock__mu_lock(&m->mu);
    while (m->broken)
      pthread_cond_wait(&m->state_cv, &m->mu);
    if (m->link && dlock__link_stale(n->c, m->link)) {
      /* The master was replaced (Sentinel): requests in flight fail and
       * are retried; this one connects to the new master. */
      if (m->reader) {
        m->broken = 1;
        shutdown(m->link->fd, SHUT_RDWR);
      } else {
        mux_fail_all(m, NULL, 0, "the master changed (Sentinel failover)");
      }
      dlock__mu_unlock(&m->mu);
      continue;
    }
    if (m->link)
      break;
    dlock__mu_unlock(&m->mu); /* closed meanwhile: connect again */
  }
  if (a->with_wait) { /* its reads may take the WAIT's timeout longer */
    req.want = 2;
    req.wait_ms = a->wait_ms;
  }
  a->sent = 1;
  if (dlock__link_send_shared(m->link, b->p, b->len) != 0) {
    a->sent = m->link->wrote > 0; /* nothing written: it never arrived */
    a->timed_out = m->link->werr == DLOCK__LINK_TIMEOUT;
    attempt_fail(a, DLOCK_ECONN,
                 a->timed_out ? "write timed out" : m->link->werrstr);
    if (m->reader) {
      /* Wake the reader; it fails the queue and closes the connection. */
      m->broken = 1;
      shutdown(m->link->fd, SHUT_RDWR);
    } else {
      mux_fail_all(m, &req, a->timed_out, a->msg);
    }
    dlock__mu_unlock(&m->mu);
    return NULL;
  }
  if (m->tail)
    m->tail->next = &req;
  else
    m->head = &req;
  m->tail = &req;
  while (!req.done) {
    if (!m->reader && m->head == &req) {
      m->reader = 1;
      mux_read(n, &req);
      break;
    }
    pthread_cond_wait(req.cv, &m->mu);
  }
  dlock__mu_unlock(&m->mu);
  if (!req.reply) {
    a->timed_out = req.timed_out;
    attempt_fail(a, req.err, req.msg);
  }
  a->wait_reply = req.extra;
  return req.reply;
}

/* Encoded command b on a pooled connection. */
static redisReply *pool_roundtrip(dlock__node *n, void *conn,
                                  const dlock__sb *b, attempt *a) {
  dlock__link *l = ((dlock__conn *)conn)->link;
  if (b->oom) {
    attempt_fail(a, DLOCK_ENOMEM, "out of memory");
    return NULL;
  }
  a->sent = 1;
  redisReply *r = NULL;
  if (dlock__link_send(l, b->p, b->len) == 0)
    r = dlock__link_reply(l);
  else
    a->sent = l->wrote > 0; /* nothing written: it never arrived */
  if (r && a->with_wait) {
    /* WAIT may take its timeout before it answers. */
    int cto = n->c->cfg.command_timeout_ms;
    dlock__link_set_read_timeout(l, (int)dlock__reply_timeout(cto, a->wait_ms));
    a->wait_reply = dlock__link_reply(l);
    dlock__link_set_read_timeout(l, cto);
    if (!a->wait_reply) {
      freeReplyObject(r);
      r = NULL;
    }
  }
  if (!r) {
    char why[200];
    link_why(l, n->c->cfg.command_timeout_ms, why, sizeof why);
    a->timed_out = l->err == DLOCK__LINK_TIMEOUT;
    attempt_fail(a,
                 l->err == DLOCK__LINK_OOM   ? DLOCK_ENOMEM
                 : l->err == DLOCK__LINK_TLS ? DLOCK_ETLS
                                             : DLOCK_ECONN,
                 why);
  }
  return r;
}

typedef redisReply *roundtrip_fn(dlock__node *n, void *conn, const dlock__sb *b,
                                 attempt *a);

/* Counts one send that went out: its command (and the WAIT behind it) and
 * the round trip. */
static void count_send(dlock_client *c, const attempt *a) {
  if (!a->sent)
    return;
  dlock__stat_add(&c->stats, DLOCK__ST_COMMANDS, 1 + (a->with_wait != 0));
  dlock__stat_add(&c->stats, DLOCK__ST_ROUND_TRIPS, 1);
}

/* The timeout of the WAIT pipelined behind a send of cmd now:
 * sync_timeout_ms, cut to what is left of the calling public call's wait
 * budget (dlock__call_deadline) -- a timed lock spent sync_timeout_ms per
 * attempt past its budget (issue 38: 7.3 s for a 2 s wait) -- and at least
 * 1 ms (WAIT's 0 waits for ever). Told to sync.c for its message. */
static int wait_ms_now(const dlock__cmd *cmd) {
  int64_t ms = cmd->sync_timeout_ms;
  int64_t dl = dlock__call_deadline();
  if (dl >= 0 && dl - dlock__now_ms() < ms)
    ms = dl - dlock__now_ms();
  if (ms < 1)
    ms = 1;
  dlock__sync_waited((int)ms);
  return (int)ms;
}

/* RESP of cmd into b; with eval, EVAL and the script's body in place of
 * EVALSHA and its digest (the router's answer to NOSCRIPT); a WAIT of
 * wait_ms behind it when cmd asks for one. */
static void encode_cmd(dlock__sb *b, const dlock__cmd *cmd, int eval,
                       int wait_ms) {
  dlock__sb_reset(b);
  dlock__sb_add(b, "*", 1);
  dlock__sb_addu64(b, (uint64_t)cmd->argc);
  dlock__sb_add(b, "\r\n", 2);
  for (int i = 0; i < cmd->argc; i++) {
    const char *s = cmd->argv[i];
    size_t l = cmd->argvlen[i];
    if (eval && i < 2) {
      s = i == 0 ? "EVAL" : cmd->script->body;
      l = strlen(s);
    }
    dlock__sb_add(b, "$", 1);
    dlock__sb_addu64(b, l);
    dlock__sb_add(b, "\r\n", 2);
    dlock__sb_add(b, s, l);
    dlock__sb_add(b, "\r\n", 2);
  }
  if (cmd->wait_replicas > 0) { /* pipelined on the same connection */
    char nr[24], ms[24];
    const char *av[3] = {"WAIT", nr, ms};
    size_t al[3] = {4, dlock__fmt_i64(nr, cmd->wait_replicas), 0};
    al[2] = dlock__fmt_i64(ms, wait_ms);
    dlock__resp_argv(b, 3, av, al);
  }
}

/* One command over rt; a NOSCRIPT reply is answered with EVAL on the same
 * connection (the server lost its script cache: SCRIPT FLUSH, restart;
 * EVAL also caches the script for the next EVALSHA). */
static void send_cmd(dlock__node *n, roundtrip_fn *rt, void *conn,
                     const dlock__cmd *cmd, attempt *a) {
  dlock__sb b;
  char buf[1024];
  dlock__sb_init_buf(&b, buf, sizeof buf);
  a->with_wait = cmd->wait_replicas > 0;
  a->wait_ms = a->with_wait ? wait_ms_now(cmd) : 0;
  encode_cmd(&b, cmd, 0, a->wait_ms);
  redisReply *r = rt(n, conn, &b, a);
  count_send(n->c, a);
  if (r && cmd->script && r->type == REDIS_REPLY_ERROR &&
      strncmp(r->str, "NOSCRIPT", 8) == 0) {
    freeReplyObject(r);
    if (a->wait_reply)
      freeReplyObject(a->wait_reply);
    a->wait_reply = NULL;
    if (a->with_wait)
      a->wait_ms = wait_ms_now(cmd);
    encode_cmd(&b, cmd, 1, a->wait_ms);
    r = rt(n, conn, &b, a);
    count_send(n->c, a);
  }
  a->reply = r;
  dlock__sb_free(&b);
}

/* One send on a connection of the node: its shared one, or a pooled one
 * (borrowed, then returned, or dropped when it failed). */
static void node_send(dlock__node *n, const dlock__cmd *cmd, attempt *a) {
  memset(a, 0, sizeof *a);
  if (n->use_mux) {
    send_cmd(n, mux_roundtrip, NULL, cmd, a);
    return;
  }
  dlock__conn *k = NULL;
  int rc = pool_get(n, &k, &a->fresh);
  if (rc || !k) {
    a->connecting = 1;
    attempt_fail(a, rc, dlock_last_error());
    return;
  }
  send_cmd(n, pool_roundtrip, k, cmd, a);
  if (a->reply) {
    pool_put(n, k);
  } else {
    /* A failure most likely broke the idle ones too (server restart). */
    node_dropped(n, a->msg);
    pool_drop(n, k, 1);
    disc_flush();
  }
}

/* ---- the router --------------------------------------------------------- */

/* The node serving key: the only one of a standalone client, the slot's
 * master of a cluster client (NULL when none is known). */
static dlock__node *route(dlock_client *c, const char *key) {
  return c->cl ? dlock__cluster_route(c, key) : &c->node;
}

int dlock__parse_redirect(const char *s, const char *verb, unsigned *slot,
                          char *host, size_t cap, int *port) {
  size_t vl = strlen(verb);
  if (strncmp(s, verb, vl) != 0 || s[vl] != ' ')
    return 0;
  char *end;
  unsigned long sl = strtoul(s + vl + 1, &end, 10);
  if (*end != ' ' || sl >= DLOCK__SLOTS)
    return 0;
  const char *addr = end + 1, *colon = strrchr(addr, ':');
  if (!colon || (size_t)(colon - addr) >= cap || colon == addr)
    return 0;
  long p = strtol(colon + 1, &end, 10);
  if (*end || p <= 0 || p > 65535)
    return 0;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  *slot = (unsigned)sl;
  *port = (int)p;
  return 1;
}

static _Thread_local int t_sends;

int dlock__exec_sends(void) { return t_sends; }

enum { FINAL, RETRY, RETRY_NOW };

/* The client's topology, for the shared verdicts (ioverdict.h). */
static int topo_of(const dlock_client *c) {
  return c->cl             ? DLOCK__TOPO_CLUSTER
         : c->url.sentinel ? DLOCK__TOPO_SENTINEL
                           : DLOCK__TOPO_PLAIN;
}

/* Judges one attempt: FINAL (*rc is the answer, *out set on success),
 * RETRY (*rc is the error to return if no attempt is left) or RETRY_NOW
 * (a connection that was idle before broke without timing out -- it most
 * likely died while idle: server restart, CLIENT KILL -- so a fresh one is
 * tried at once, without counting as an attempt; once per call). */
static int judge(dlock_client *c, const dlock__cmd *cmd, attempt *a,
                 int *stale_used, redisReply **out, int *rc) {
  redisReply *r = a->reply;
  if (r && r->type != REDIS_REPLY_ERROR) {
    *out = r;
    *rc = 0;
    return FINAL;
  }
  if (r) {
    /* What the error means is one rule for both clients (ioverdict.c): a
     * refusal retried, or the call's answer with its message. */
    int reroute = 0;
    int v = dlock__reply_verdict(r->str, topo_of(c),
                                 cmd->script ? cmd->script->name : NULL, rc,
                                 &reroute);
    if (reroute && c->url.sentinel)
      /* The node we took for the master is a replica now (READONLY,
       * MASTERDOWN): ask the sentinels again. */
      dlock__sentinel_invalidate(c, atomic_load(&c->sent.gen));
    freeReplyObject(r);
    return v == DLOCK__REPLY_RETRY ? RETRY : FINAL;
  }
  if (a->err != DLOCK_ECONN) {
    *rc = dlock__fail(a->err, "%s", a->msg);
    return FINAL;
  }
  *rc = a->connecting
            ? dlock__fail(DLOCK_ECONN, "%s", a->msg)
            : dlock__fail(DLOCK_ECONN, "%s: %s", cmd->argv[0], a->msg);
  /* A connection that was there before and broke without timing out: sent
   * again at once, once, uncounted (ioverdict.c, the event-loop client's
   * rule too). */
  if (dlock__resend_now(!a->connecting && !a->fresh, a->timed_out,
                        cmd->no_retry, stale_used))
    return RETRY_NOW;
  return RETRY;
}

/* cmd on node n after an ASK: ASKING and the command written together on a
 * connection of its own (a shared one could put another thread's command
 * between them), both replies read; NOSCRIPT answered with EVAL. */
static void ask_send(dlock__node *n, const dlock__cmd *cmd, attempt *a) {
  memset(a, 0, sizeof *a);
  a->fresh = 1;
  dlock__link *l;
  int rc = dlock__link_open(n->c, n->url, &l);
  if (rc) {
    a->connecting = 1;
    attempt_fail(a, rc, dlock_last_error());
    return;
  }
  dlock__sb b, one;
  dlock__sb_init(&b);
  dlock__sb_init(&one);
  redisReply *r = NULL;
  for (int eval = 0; eval < 2 && !r; eval++) {
    dlock__sb_reset(&b);
    dlock__sb_adds(&b, "*1\r\n$6\r\nASKING\r\n");
    encode_cmd(&one, cmd, eval, cmd->wait_replicas > 0 ? wait_ms_now(cmd) : 0);
    dlock__sb_add(&b, one.p, one.len);
    a->sent = 1;
    redisReply *ok = b.oom || dlock__link_send(l, b.p, b.len) != 0
                         ? NULL
                         : dlock__link_reply(l);
    r = ok ? dlock__link_reply(l) : NULL;
    dlock__stat_add(&n->c->stats, DLOCK__ST_COMMANDS,
                    2 + (cmd->wait_replicas > 0));
    dlock__stat_add(&n->c->stats, DLOCK__ST_ROUND_TRIPS, 1);
    if (ok)
      freeReplyObject(ok);
    if (r && cmd->wait_replicas > 0 &&
        !(a->wait_reply = dlock__link_reply(l))) {
      freeReplyObject(r); /* the WAIT pipelined behind it got no answer */
      r = NULL;
    }
    if (!r) {
      char why[200];
      link_why(l, n->c->cfg.command_timeout_ms, why, sizeof why);
      a->timed_out = l->err == DLOCK__LINK_TIMEOUT;
      attempt_fail(a, b.oom ? DLOCK_ENOMEM : DLOCK_ECONN, why);
      break;
    }
    if (cmd->script && !eval && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "NOSCRIPT", 8) == 0) {
      freeReplyObject(r);
      r = NULL;
      if (a->wait_reply)
        freeReplyObject(a->wait_reply);
      a->wait_reply = NULL;
    }
  }
  a->reply = r;
  dlock__sb_free(&b);
  dlock__sb_free(&one);
  dlock__link_free(l);
}

/* A MOVED or ASK reply r on a cluster client: the node to send to next
 * (*ask set for ASK; a MOVED updates the slot map). NULL: no redirect. */
static dlock__node *redirect(dlock_client *c, const redisReply *r, int *ask) {
  *ask = 0;
  if (!c->cl || !r || r->type != REDIS_REPLY_ERROR)
    return NULL;
  unsigned slot;
  char host[256];
  int port;
  int moved =
      dlock__parse_redirect(r->str, "MOVED", &slot, host, sizeof host, &port);
  if (!moved && !(*ask = dlock__parse_redirect(r->str, "ASK", &slot, host,
                                               sizeof host, &port)))
    return NULL;
  dlock__node *to = dlock__cluster_node_at(c, host, port);
  if (to && moved)
    dlock__cluster_moved(c, slot, to);
  if (to)
    dlock__log(&c->cfg, moved ? DLOCK_LOG_INFO : DLOCK_LOG_DEBUG, NULL,
               "redirect", "%s: slot %u served by %s:%d, followed",
               moved ? "MOVED" : "ASK", slot, host, port);
  return to;
}

/* A retry of a command with a WAIT waits for the replica count of the
 * master it goes to now (after a failover: the new one's, not a count that
 * makes WAIT sit out sync_timeout_ms on every send). */
static void retarget_wait(dlock_client *c, dlock__cmd *cmd) {
  int sends = t_sends; /* dlock__sync_want may run INFO through here */
  cmd->wait_replicas = dlock__sync_want(c, cmd->key);
  t_sends = sends;
  if (cmd->wait_replicas == 0 && cmd->acks)
    *cmd->acks = -2; /* no WAIT sent: nothing to judge */
}

/* The WAIT's answer of an attempt into *cmd->acks (freed). */
static void take_acks(const dlock__cmd *cmd, attempt *a) {
  if (!a->wait_reply)
    return;
  if (cmd->acks)
    *cmd->acks = a->wait_reply->type == REDIS_REPLY_INTEGER
                     ? a->wait_reply->integer
                     : -1;
  freeReplyObject(a->wait_reply);
  a->wait_reply = NULL;
}

/* One send of cmd: to n (NULL: no master is known for its slot), after an
 * ASK together with ASKING. The WAIT's answer goes to cmd->acks. */
static void send_attempt(dlock__node *n, int ask, const dlock__cmd *cmd,
                         attempt *a) {
  if (!n) {
    memset(a, 0, sizeof *a);
    a->connecting = 1;
    attempt_fail(a, DLOCK_ECONN, dlock_last_error());
  } else if (ask) {
    ask_send(n, cmd, a);
  } else {
    node_send(n, cmd, a);
  }
  take_acks(cmd, a);
}

/* After a send: 1 when a cluster redirect says where to send next (*n and
 * *ask set; the command did not run: not a send, not a retry), 0 when the
 * reply is to be judged, or a negative code: a redirect loop, or a cluster
 * node behind a redis:// URL. */
static int redirected(dlock_client *c, const dlock__cmd *cmd, attempt *a,
                      dlock__node **n, int *ask, int *redirects) {
  dlock__node *to = redirect(c, a->reply, ask);
  if (to) {
    freeReplyObject(a->reply);
    /* one bound per try, one code, for both clients (ioverdict.c) */
    int rc = dlock__redirect_bound(redirects, cmd->script ? cmd->script->name
                                                          : cmd->argv[0]);
    if (rc)
      return rc;
    *n = to;
    return 1;
  }
  return 0; /* (a redirect on a redis:// URL: judge's verdict says so) */
}

/* 1 when cmd has a resend window (dlock__cmd.resend_window_ms), a copy of
 * it may have run (t_sends), and the window that began at first is over:
 * no copy may be sent any more. *rc then says so (DLOCK_ECONN, the outcome
 * unknown), after the last error when there was one. */
static int resend_closed(const dlock__cmd *cmd, int64_t first, int *rc) {
  if (cmd->resend_window_ms <= 0 || t_sends == 0)
    return 0;
  int64_t gone = dlock__now_ms() - first;
  if (gone < cmd->resend_window_ms)
    return 0;
  char last[200];
  snprintf(last, sizeof last, "%s", dlock_last_error());
  *rc = dlock__fail(DLOCK_ECONN,
                    "%s%snot re-sent %lld ms after its first send: a copy "
                    "sent now might run after its once key expired and "
                    "count twice (the outcome is unknown)",
                    last, last[0] ? "; " : "", (long long)gone);
  return 1;
}

/* A re-send under the retry policy (after pause_ms): counted and logged
 * with the failure that caused it (the thread's message). */
static void retry_note(dlock_client *c, const dlock__cmd *cmd, int64_t pause_ms,
                       int attempt_no, int attempts) {
  dlock__stat_add(&c->stats, DLOCK__ST_RETRIES, 1);
  if (!dlock__log_on(&c->cfg, DLOCK_LOG_WARN))
    return;
  const char *what = cmd->script ? cmd->script->name : cmd->argv[0];
  if (pause_ms > 0)
    dlock__log(&c->cfg, DLOCK_LOG_WARN, cmd->key, "retry",
               "%s failed (%s); retry %d of %d, the next in %lld ms", what,
               dlock_last_error(), attempt_no - 1, attempts - 1,
               (long long)pause_ms);
  else
    dlock__log(&c->cfg, DLOCK_LOG_WARN, cmd->key, "retry",
               "%s failed (%s); re-sent at once on a new connection", what,
               dlock_last_error());
}

int dlock__exec(dlock_client *c, const dlock__cmd *cmd_in, redisReply **out) {
  *out = NULL;
  t_sends = 0;
  if (c->etcd) /* a Redis-only path reached on an etcd client (etcd.h) */
    return dlock__etcd_notsup("this call", "it needs a Redis server");
  dlock__cmd retry_cmd = *cmd_in;
  const dlock__cmd *cmd = cmd_in;
  dlock__node *n = route(c, cmd->key);
  int attempts =
      cmd->no_retry
          ? 1
          : 1 + (c->cfg.retry_attempts > 0 ? c->cfg.retry_attempts : 0);
  int stale_used = 0, redirects = 0, ask = 0;
  int64_t first = dlock__now_ms(); /* the first send starts now */
  int64_t prev_pause = 0;          /* the retry delay policy's state */
  int64_t tried_at = first;        /* when the last attempt began */
  for (int i = 0;;) {
    attempt a;
    int closed_rc;
    if (resend_closed(cmd, first, &closed_rc))
      return closed_rc; /* every send after the first is checked here */
    if (cmd_in->wait_replicas > 0 && (i > 0 || stale_used)) {
      retarget_wait(c, &retry_cmd);
      cmd = &retry_cmd;
    }
    send_attempt(n, ask, cmd, &a);
    int rc = redirected(c, cmd, &a, &n, &ask, &redirects);
    if (rc < 0)
      return rc;
    if (rc == 1)
      continue;
    /* A send counts as a copy that may act unless the server answered it
     * without running it (LOADING, BUSY, TRYAGAIN, ...: refused), as the
     * event-loop client counts (async_conn.c not_run). */
    t_sends += a.sent && !(a.reply && a.reply->type == REDIS_REPLY_ERROR &&
                           dlock__retryable_reply(a.reply->str));
    int verdict = judge(c, cmd, &a, &stale_used, out, &rc);
    if (verdict == FINAL)
      return rc;
    if (verdict == RETRY_NOW) {
      retry_note(c, cmd, 0, i + 1, attempts);
      continue;
    }
    if (++i >= attempts)
      return rc;
    if (atomic_load(&c->closing))
      return dlock__fail(DLOCK_ECLOSED, "client is closing");
    int64_t pause = dlock__retry_pause(&c->cfg, i - 1, &prev_pause);
    /* The call's wait budget (dlock__call_deadline) ends its retries too,
     * and cuts the pause: one rule for both clients (ioverdict.c); so does
     * call_timeout_ms, when the next attempt could not end within it. */
    if (!dlock__retry_verdict(i, attempts, dlock__call_deadline(),
                              dlock__now_ms(), &pause) ||
        dlock__call_bound_over(&c->cfg, first, pause,
                               dlock__now_ms() - tried_at))
      return rc;
    retry_note(c, cmd, pause, i + 1, attempts);
    dlock__cluster_mark_stale(c); /* failover, CLUSTERDOWN, READONLY */
    redirects = 0;          /* a bound per attempt: the attempts are bounded */
    dlock__io_pause(pause); /* a background thread's ends at free */
    tried_at = dlock__now_ms();
    if (c->cl)
      n = route(c, cmd->key);
  }
}

static int eval_cmd(dlock_client *c, const dlock__script *s, int nkeys,
                    const char **keys, const size_t *klens, int nargs,
                    const char **args, const size_t *alens,
                    const dlock__send_how *how, redisReply **out) {
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
  long long acks = -1;
  dlock__cmd cmd = {nkeys ? keys[0] : NULL, s, argc, av, al, how->no_retry};
  cmd.resend_window_ms = how->resend_window_ms;
  dlock__sync_reset();
  if (!s->readonly && !how->no_sync &&
      (cmd.wait_replicas = dlock__sync_want(c, cmd.key)) > 0) {
    cmd.sync_timeout_ms = c->cfg.sync_timeout_ms;
    cmd.acks = &acks;
  }
  int rc = dlock__exec(c, &cmd, out);
  int sends = t_sends; /* the TYPE look-ups must not count */
  rc = dlock__explain_wrongtype(c, s, rc, nkeys, keys, klens);
  t_sends = sends;
  if (rc == 0 && cmd.wait_replicas > 0 && acks != -2)
    dlock__sync_done(c, cmd.key, cmd.wait_replicas, acks);
  if (av != av_stack)
    free(av);
  if (al != al_stack)
    free(al);
  return rc;
}

int dlock__eval_call(dlock_client *c, const dlock__call *k, redisReply **out) {
  return dlock__eval(c, dlock__core_script(k->script), k->nkeys, k->keys,
                     k->klens, k->nargs, k->args, k->alens, out);
}

int dlock__eval(dlock_client *c, const dlock__script *s, int nkeys,
                const char **keys, const size_t *klens, int nargs,
                const char **args, const size_t *alens, redisReply **out) {
  static const dlock__send_how how = {0, 0, 0};
  return eval_cmd(c, s, nkeys, keys, klens, nargs, args, alens, &how, out);
}

int dlock__eval_how(dlock_client *c, const dlock__script *s, int nkeys,
                    const char **keys, const size_t *klens, int nargs,
                    const char **args, const size_t *alens,
                    const dlock__send_how *how, redisReply **out) {
  return eval_cmd(c, s, nkeys, keys, klens, nargs, args, alens, how, out);
}

int dlock__eval_once(dlock_client *c, const dlock__script *s, int nkeys,
                     const char **keys, const size_t *klens, int nargs,
                     const char **args, const size_t *alens, redisReply **out) {
  static const dlock__send_how how = {2, 0, 0};
  return eval_cmd(c, s, nkeys, keys, klens, nargs, args, alens, &how, out);
}
