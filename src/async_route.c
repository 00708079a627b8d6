/*
 * async_route.c -- where the event-loop client's data connections go.
 *
 * redis:// and rediss://: the URL's server (nothing to do here).
 *
 * redis-sentinel:// and rediss-sentinel://: the master the sentinels name,
 * found as sentinel.c finds it for the blocking client, but over one
 * non-blocking connection (async_conn.c) at a time:
 *
 *   for each sentinel, starting with the one that answered last:
 *     SENTINEL GET-MASTER-ADDR-BY-NAME <name>  -> host, port
 *   then the data connection itself checks ROLE in its handshake
 *   (async_conn.c): a server that is not the master sends us back here.
 *
 * A connection that needs the address while nobody knows it waits in
 * RESOLVING; the round's end answers every waiting one (the address, or
 * DLOCK_ECONN listing what each sentinel said: the requests are retried by
 * the connection's retry policy). The address is forgotten
 * (dlock__aroute_invalid) when a connection made for it fails, its ROLE is
 * not "master" or it answers READONLY: the next connection asks again.
 * When a round finds another master than before, the connections still
 * open to the old one are dropped (their requests retried on the new).
 *
 * THE WATCHER (sentinel.c's watcher thread, as a connection): once a
 * master is known, one connection to a sentinel subscribes to
 * +switch-master and +promoted-slave. +switch-master for our name moves
 * the client to the new address at once; +promoted-slave (seconds
 * earlier, while the old master may still take writes) makes it ask the
 * sentinels again. After each subscription it asks once, since a switch
 * may have happened while nobody listened. When that sentinel fails the
 * watcher moves to the next, retry_interval_ms later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async_internal.h"

typedef struct dlock__aroute {
  dlock__aconn q; /* to the sentinel being asked */
  dlock__url qurl;
  int at;    /* the sentinel asked (or to ask first) */
  int asked; /* sentinels asked in this round */
  int busy;  /* a round is under way */
  char *host;
  int port;
  int known;
  unsigned gen; /* increases when the address changes */
  dlock__sb why;
  dlock__aconn wq; /* the watcher's subscription */
  dlock__url wurl;
  int wat; /* the sentinel it listens to */
  int watching;
} dlock__aroute;

static void watch_push(dlock__aconn *k, redisReply *r);
static void watch_ready(dlock__aconn *k);
static void watch_down(dlock__aconn *k, int err, const char *why);

int dlock__aroute_init(dlock_async *a) {
  if (!a->url.sentinel)
    return 0;
  dlock__aroute *rt = dlock__calloc(1, sizeof *rt);
  if (!rt)
    return DLOCK_ENOMEM;
  dlock__aconn_init(&rt->q, a, "sentinel");
  rt->q.url = &rt->qurl;
  dlock__aconn_init(&rt->wq, a, "sentinel watcher");
  rt->wq.url = &rt->wurl;
  rt->wq.on_push = watch_push;
  rt->wq.on_ready = watch_ready;
  rt->wq.on_down = watch_down;
  rt->gen = 1;
  dlock__sb_init(&rt->why);
  a->route = rt;
  return 0;
}

void dlock__aroute_close(dlock_async *a) {
  if (a->route) {
    dlock__aconn_close(&a->route->q);
    dlock__aconn_close(&a->route->wq);
  }
}

void dlock__aroute_free(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (!rt)
    return;
  free(rt->host);
  dlock__sb_free(&rt->why);
  free(rt);
  a->route = NULL;
}

dlock__aconn *dlock__aroute_conn(dlock_async *a, dlock_async_watch *w) {
  if (!a->route)
    return NULL;
  return a->route->q.w == w    ? &a->route->q
         : a->route->wq.w == w ? &a->route->wq
                               : NULL;
}

/* k's address: the known master. */
static void fill(dlock__aroute *rt, dlock__aconn *k) {
  snprintf(k->host, sizeof k->host, "%s", rt->host);
  k->at.sentinel = 0;
  k->at.host = k->host;
  k->at.port = rt->port;
  k->gen = rt->gen;
}

static void ask(dlock_async *a);
static void watch_start(dlock_async *a);

/* Sentinel i's URL: its address, the sentinels' credentials, the client's
 * TLS setting (sentinel.c's sentinel_url). Borrowed strings. */
static void sentinel_url(const dlock_async *a, int i, dlock__url *u) {
  const dlock__hostport *s = &a->url.sentinels[i];
  memset(u, 0, sizeof *u);
  u->tls = a->url.tls;
  u->host = s->host;
  u->port = s->port;
  u->user = a->url.sentinel_user;
  u->password = a->url.sentinel_password;
}

/* Every connection waiting for the address gets it (or err with why);
 * connections to an old master are dropped. */
static void apply(dlock_async *a, int err, const char *why) {
  dlock__aroute *rt = a->route;
  dlock__aconn *ks[2] = {&a->cmd, &a->sub};
  for (int i = 0; i < 2 && !a->closing; i++) {
    dlock__aconn *k = ks[i];
    if (k->state == DLOCK__AC_RESOLVING) {
      if (!err)
        fill(rt, k);
      dlock__aconn_resolved(k, err, why);
    } else if (!err && k->state != DLOCK__AC_IDLE && k->gen != rt->gen) {
      char msg[400];
      snprintf(msg, sizeof msg, "%s connection: the master moved to %s:%d",
               k->what, rt->host, rt->port);
      dlock__aconn_drop(k, msg);
    }
  }
}

/* The round ended. */
static void round_end(dlock_async *a, int err, const char *why) {
  a->route->busy = 0;
  apply(a, err, why);
  if (!err && !a->closing)
    watch_start(a);
}

static void start_round(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (rt->busy)
    return;
  rt->busy = 1;
  rt->asked = 0;
  dlock__sb_reset(&rt->why);
  ask(a);
}

/* host:port is the master now (a new address is a new generation). 0 or
 * DLOCK_ENOMEM. */
static int set_master(dlock__aroute *rt, const char *host, int port) {
  if (!rt->host || strcmp(rt->host, host) != 0 || rt->port != port) {
    char *h = dlock__strdup(host);
    if (!h)
      return DLOCK_ENOMEM;
    free(rt->host);
    rt->host = h;
    rt->port = port;
    rt->gen++;
  }
  rt->known = 1;
  return 0;
}

static void ask_done(dlock__areq *r, redisReply *reply, int err,
                     const char *why) {
  dlock_async *a = r->arg;
  dlock__aroute *rt = a->route;
  dlock__areq_free(r);
  char line[700], host[256] = "";
  int port = 0;
  if (err)
    snprintf(line, sizeof line, "%s", why);
  else if (dlock__sentinel_addr_reply(reply, a->url.master_name, host,
                                      sizeof host, &port, line,
                                      sizeof line) != 0)
    host[0] = '\0';
  if (reply)
    freeReplyObject(reply);
  dlock__aconn_close_socket(&rt->q); /* the next question may go elsewhere */
  if (a->closing)
    return;
  if (host[0]) {
    if (set_master(rt, host, port) != 0)
      round_end(a, DLOCK_ENOMEM, "out of memory");
    else
      round_end(a, 0, NULL);
    return;
  }
  const dlock__hostport *s = &a->url.sentinels[rt->at];
  char item[1000];
  snprintf(item, sizeof item, "%ssentinel %s:%d: %s", rt->asked ? "; " : "",
           s->host, s->port, line);
  dlock__sb_adds(&rt->why, item);
  int n = a->url.n_sentinels;
  if (++rt->asked < n) {
    rt->at = (rt->at + 1) % n;
    ask(a);
    return;
  }
  char msg[1500];
  snprintf(msg, sizeof msg, "no master '%s' found through %d sentinel%s (%s)",
           a->url.master_name, n, n == 1 ? "" : "s",
           rt->why.oom ? "out of memory" : rt->why.p);
  rt->at = (rt->at + 1) % n; /* the next round starts elsewhere */
  round_end(a, DLOCK_ECONN, msg);
}

/* SENTINEL GET-MASTER-ADDR-BY-NAME on sentinel rt->at (its address, the
 * sentinels' credentials, the client's TLS setting). */
static void ask(dlock_async *a) {
  dlock__aroute *rt = a->route;
  sentinel_url(a, rt->at, &rt->qurl);
  const char *av[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME",
                       a->url.master_name};
  size_t al[3] = {8, 23, strlen(a->url.master_name)};
  dlock__areq *r = dlock__areq_cmd(3, av, al, ask_done, a);
  if (!r) {
    round_end(a, DLOCK_ENOMEM, "out of memory");
    return;
  }
  r->no_retry = 1;
  dlock__aconn_submit(&rt->q, r);
}

int dlock__aroute_addr(dlock__aconn *k, char *why, size_t wn) {
  dlock_async *a = k->a;
  dlock__aroute *rt = a->route;
  (void)why;
  (void)wn;
  if (!rt)
    return 0;
  if (rt->known) {
    fill(rt, k);
    return 0;
  }
  start_round(a);
  return 1;
}

void dlock__aroute_invalid(dlock__aconn *k) {
  dlock__aroute *rt = k->a->route;
  if (rt && k->gen == rt->gen)
    rt->known = 0;
}

/* ---- the watcher ---------------------------------------------------------
 */

static void watch_start(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (rt->watching)
    return;
  rt->watching = 1;
  rt->wat = rt->at; /* the sentinel that answered */
  sentinel_url(a, rt->wat, &rt->wurl);
  dlock__aconn_start(&rt->wq);
}

static void watch_ready(dlock__aconn *k) {
  const char *av[3] = {"SUBSCRIBE", "+switch-master", "+promoted-slave"};
  size_t al[3] = {9, 14, 15};
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__resp_argv(&b, 3, av, al);
  if (!b.oom)
    dlock__aconn_write(k, b.p, b.len);
  dlock__sb_free(&b);
}

static void watch_down(dlock__aconn *k, int err, const char *why) {
  (void)err;
  (void)why;
  dlock_async *a = k->a;
  dlock__aroute *rt = a->route;
  rt->wat = (rt->wat + 1) % a->url.n_sentinels;
  sentinel_url(a, rt->wat, &rt->wurl);
  dlock__async_timer(a, &k->reconnect,
                     dlock__async_now() + a->cfg.retry_interval_ms);
}

/* "+switch-master" payload "<name> <old ip> <old port> <new ip> <new
 * port>"; "+promoted-slave" payload "slave <ip:port> <ip> <port> @ <name>
 * <ip> <port>" (sentinel.c's on_switch / on_promoted). */
static void watch_message(dlock_async *a, const char *ch, const char *p) {
  dlock__aroute *rt = a->route;
  const char *name = a->url.master_name;
  if (strcmp(ch, "+switch-master") == 0) {
    char nh[256];
    int np;
    if (dlock__sentinel_switch_msg(p, name, nh, sizeof nh, &np) &&
        set_master(rt, nh, np) == 0)
      apply(a, 0, NULL);
    return;
  }
  if (!dlock__sentinel_promoted_msg(p, name))
    return;
  /* The promoted replica answers as a master now; the sentinels name it
   * from now on: ask them (and ROLE checks it). */
  rt->known = 0;
  start_round(a);
}

static void watch_push(dlock__aconn *k, redisReply *r) {
  dlock_async *a = k->a;
  if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
      r->element[0]->type == REDIS_REPLY_STRING &&
      r->element[1]->type == REDIS_REPLY_STRING) {
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING)
      watch_message(a, r->element[1]->str, r->element[2]->str);
    else if (strcmp(kind, "subscribe") == 0 &&
             r->element[2]->type == REDIS_REPLY_INTEGER &&
             r->element[2]->integer == 2)
      start_round(a); /* a switch may have happened while nobody listened */
  }
  freeReplyObject(r);
}
