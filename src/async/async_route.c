/*
 * async_route.c -- where the event-loop client's data connections go.
 *
 * redis:// and rediss://: the URL's server (nothing to do here).
 * redis-cluster://: the master of each request's slot (the last section).
 *
 * redis-sentinel:// and rediss-sentinel://: the master the sentinels name,
 * found as sentinel.c finds it for the blocking client, but over one
 * non-blocking connection (async_conn.c) at a time:
 *
 *   for each sentinel, starting with the one that answered last:
 *     SENTINEL GET-MASTER-ADDR-BY-NAME <name>  -> host, port
 *     ROLE on host:port (the data nodes' credentials)
 *     -> "master": use it; a replica, or no answer: the next sentinel
 *   (the blocking client's round, one rule: ioverdict.c
 *   dlock__sentinel_turn); the data connection checks ROLE again in its
 *   handshake (async_conn.c): a server that is not the master any more
 *   sends us back here.
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

#include "async/async.h"

typedef struct dlock__aroute {
  dlock__aconn q; /* to the sentinel being asked */
  dlock__url qurl;
  int at;              /* the sentinel asked (or to ask first) */
  int asked;           /* sentinels asked in this round */
  char cand_host[256]; /* the master the sentinel at named, its ROLE asked */
  int cand_port;
  int busy; /* a round is under way */
  char *host;
  int port;
  int known;
  unsigned gen; /* increases when the address changes */
  dlock__sb why;
  dlock__aconn wq; /* the watcher's subscription */
  dlock__url wurl;
  int wat; /* the sentinel it listens to */
  int watching;
  /* redis-cluster:// (below): the masters seen, the slot map */
  struct anode **nodes;
  int nn, ncap;
  int16_t *owner; /* slot -> index in nodes, or -1 */
  int map_ok;     /* owner is a map a node gave */
  int sharded;    /* CLUSTER SHARDS answered: Redis 7, sharded pub/sub */
  int refreshing, cand, shards_try;
  int64_t tried_at;
  dlock__atimer refresh_t;
  dlock__areq *pend_head, *pend_tail; /* waiting for the map */
} dlock__aroute;

/* A cluster master: its command and subscriber connections. */
typedef struct anode {
  dlock__aconn cmd, sub;
  dlock__url url; /* the client's URL with this address (borrowed strings
                   * but host) */
  char host[256];
} anode;

static void refresh_fired(dlock__atimer *t);

static void watch_push(dlock__aconn *k, redisReply *r);
static void watch_ready(dlock__aconn *k);
static void watch_down(dlock__aconn *k, int err, const char *why);

int dlock__aroute_init(dlock_async *a) {
  if (!a->url.sentinel && !a->url.cluster)
    return 0;
  dlock__aroute *rt = dlock__calloc(1, sizeof *rt);
  if (!rt)
    return DLOCK_ENOMEM;
  if (a->url.cluster) {
    rt->owner = dlock__malloc(DLOCK__SLOTS * sizeof *rt->owner);
    if (!rt->owner) {
      free(rt);
      return DLOCK_ENOMEM;
    }
    for (int s = 0; s < DLOCK__SLOTS; s++)
      rt->owner[s] = -1;
    rt->refresh_t.fn = refresh_fired;
    rt->refresh_t.arg = a;
  }
  dlock__aconn_init(&rt->q, a, a->url.cluster ? "cluster" : "sentinel");
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
  dlock__aroute *rt = a->route;
  if (rt) {
    dlock__aconn_close(&rt->q);
    dlock__aconn_close(&rt->wq);
    for (int i = 0; i < rt->nn; i++) {
      dlock__aconn_close(&rt->nodes[i]->cmd);
      dlock__aconn_close(&rt->nodes[i]->sub);
    }
    dlock__async_untimer(a, &rt->refresh_t);
    while (rt->pend_head) {
      dlock__areq *r = rt->pend_head;
      rt->pend_head = r->next;
      if (r->drop)
        r->drop(r->arg);
      dlock__areq_free(r);
    }
    rt->pend_tail = NULL;
  }
}

void dlock__aroute_free(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (!rt)
    return;
  free(rt->host);
  dlock__sb_free(&rt->why);
  for (int i = 0; i < rt->nn; i++)
    free(rt->nodes[i]);
  free(rt->nodes);
  free(rt->owner);
  free(rt);
  a->route = NULL;
}

dlock__aconn *dlock__aroute_conn(dlock_async *a, dlock_async_watch *w) {
  (void)a;
  return ((dlock__awatch *)w)->k;
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

/* Sentinel rt->at's turn ended: addr_rc its answer, role_rc the ROLE of
 * the master it named (line: what went wrong, for the round's message).
 * The round's rule is the blocking client's (ioverdict.c
 * dlock__sentinel_turn): this master, the next sentinel, or the end. */
static void turn_end(dlock_async *a, int addr_rc, int role_rc,
                     const char *line) {
  dlock__aroute *rt = a->route;
  int n = a->url.n_sentinels;
  int v = dlock__sentinel_turn(addr_rc, role_rc, ++rt->asked, n);
  if (v == DLOCK__SENT_USE) {
    if (set_master(rt, rt->cand_host, rt->cand_port) != 0)
      round_end(a, DLOCK_ENOMEM, "out of memory");
    else
      round_end(a, 0, NULL);
    return;
  }
  const dlock__hostport *s = &a->url.sentinels[rt->at];
  char item[1000];
  snprintf(item, sizeof item, "%ssentinel %s:%d: %s", rt->asked > 1 ? "; " : "",
           s->host, s->port, line);
  dlock__sb_adds(&rt->why, item);
  rt->at = (rt->at + 1) % n; /* the next turn, or the next round, elsewhere */
  if (v == DLOCK__SENT_NEXT) {
    ask(a);
    return;
  }
  char msg[1500];
  snprintf(msg, sizeof msg, "no master '%s' found through %d sentinel%s (%s)",
           a->url.master_name, n, n == 1 ? "" : "s",
           rt->why.oom ? "out of memory" : rt->why.p);
  round_end(a, DLOCK_ECONN, msg);
}

static void role_done(dlock__areq *r, redisReply *reply, int err,
                      const char *why) {
  dlock_async *a = r->arg;
  dlock__aroute *rt = a->route;
  dlock__areq_free(r);
  char line[700] = "";
  int rc = err;
  if (err) {
    snprintf(line, sizeof line, "%s", why);
  } else if (reply->type == REDIS_REPLY_ERROR) {
    rc = DLOCK_EREDIS;
    snprintf(line, sizeof line, "ROLE: %s", reply->str);
  } else if (dlock__sentinel_role(reply)) {
    rc = DLOCK_ECONN;
    snprintf(line, sizeof line, "%s:%d says it is not a master (%s)",
             rt->cand_host, rt->cand_port, dlock__sentinel_role(reply));
  }
  if (reply)
    freeReplyObject(reply);
  dlock__aconn_close_socket(&rt->q);
  if (!a->closing)
    turn_end(a, 0, rc, line);
}

/* ROLE on the master sentinel rt->at named (the data nodes' credentials
 * and TLS), as sentinel.c's check_role: a sentinel that names a replica
 * (stale, or one that never saw the failover) is passed over in the same
 * round. Until io-stack D6 this client took the first answer, and a data
 * connection's ROLE that said "slave" sent it back to the same sentinel. */
static void ask_role(dlock_async *a) {
  dlock__aroute *rt = a->route;
  rt->qurl = a->url;
  rt->qurl.sentinel = 0;
  rt->qurl.db = 0;
  rt->qurl.host = rt->cand_host;
  rt->qurl.port = rt->cand_port;
  const char *av[1] = {"ROLE"};
  size_t al[1] = {4};
  dlock__areq *r = dlock__areq_cmd(1, av, al, role_done, a);
  if (!r) {
    round_end(a, DLOCK_ENOMEM, "out of memory");
    return;
  }
  r->no_retry = 1;
  r->raw = 1; /* the answer's errors are judged here */
  dlock__aconn_submit(&rt->q, r);
}

static void ask_done(dlock__areq *r, redisReply *reply, int err,
                     const char *why) {
  dlock_async *a = r->arg;
  dlock__aroute *rt = a->route;
  dlock__areq_free(r);
  char line[700];
  int rc = err;
  if (err)
    snprintf(line, sizeof line, "%s", why);
  else
    rc = dlock__sentinel_addr_reply(reply, a->url.master_name, rt->cand_host,
                                    sizeof rt->cand_host, &rt->cand_port, line,
                                    sizeof line);
  if (reply)
    freeReplyObject(reply);
  dlock__aconn_close_socket(&rt->q); /* the next question may go elsewhere */
  if (a->closing)
    return;
  if (rc == 0)
    ask_role(a);
  else
    turn_end(a, rc, 0, line);
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
  r->raw = 1; /* the answer's errors are judged here */
  dlock__aconn_submit(&rt->q, r);
}

int dlock__aroute_addr(dlock__aconn *k, char *why, size_t wn) {
  dlock_async *a = k->a;
  dlock__aroute *rt = a->route;
  (void)why;
  (void)wn;
  if (!rt || a->url.cluster)
    return 0; /* a cluster node's connection has its address */
  if (rt->known) {
    fill(rt, k);
    return 0;
  }
  start_round(a);
  return 1;
}

static void start_refresh(dlock_async *a);

void dlock__aroute_invalid(dlock__aconn *k) {
  dlock__aroute *rt = k->a->route;
  if (rt && k->a->url.cluster)
    start_refresh(k->a); /* a master gone: the map may have changed */
  else if (rt && k->gen == rt->gen)
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

/* ---- redis-cluster:// ------------------------------------------------------
 * The slot map as cluster.c reads it (dlock__cluster_parse: CLUSTER SHARDS,
 * CLUSTER SLOTS on servers before 7), asked over one non-blocking
 * connection of the known masters, then of the URL's seeds; one command
 * and one subscriber connection per master; requests sent to the master of
 * their first key's slot (the lock's keys share its hash tag). MOVED
 * updates the map, refreshes it and re-sends; ASK re-sends that request
 * alone to the importing node after ASKING (async_conn.c). A failed
 * connection refreshes the map, and the retry policy re-routes its
 * requests. Subscriptions go to the channel's slot's master, sharded
 * (SSUBSCRIBE) on Redis 7 as the blocking client's (pubsub.c), so both
 * clients' SPUBLISH reach them; a slot that moves ends them there
 * ("sunsubscribe"), and async_sub.c subscribes again on the new owner. */

/* The index of the master at host:port, made when first seen; -1 out of
 * memory. */
static int node_at(dlock_async *a, const char *host, int port) {
  dlock__aroute *rt = a->route;
  for (int i = 0; i < rt->nn; i++)
    if (rt->nodes[i]->url.port == port && strcmp(rt->nodes[i]->host, host) == 0)
      return i;
  if (rt->nn == rt->ncap) {
    int cap = rt->ncap ? rt->ncap * 2 : 8;
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *v is a pointer, as meant
    struct anode **v = realloc(rt->nodes, (size_t)cap * sizeof *v);
    if (!v)
      return -1;
    rt->nodes = v;
    rt->ncap = cap;
  }
  anode *n = dlock__calloc(1, sizeof *n);
  if (!n)
    return -1;
  snprintf(n->host, sizeof n->host, "%s", host);
  n->url = a->url;
  n->url.cluster = 0;
  n->url.host = n->host;
  n->url.port = port;
  n->url.db = 0;
  dlock__aconn_init(&n->cmd, a, "command");
  n->cmd.url = &n->url;
  n->cmd.data = n->cmd.cmdconn = 1;
  dlock__asub_conn_init(a, &n->sub);
  n->sub.url = &n->url;
  n->sub.data = 1;
  rt->nodes[rt->nn] = n;
  return rt->nn++;
}

typedef struct map_ctx {
  dlock_async *a;
  int16_t *map;
  int oom;
} map_ctx;

static int map_assign(void *p, long long lo, long long hi, const char *host,
                      int port) {
  map_ctx *x = p;
  if (lo < 0 || hi >= DLOCK__SLOTS || lo > hi || !host || !*host || port <= 0)
    return 0;
  int i = node_at(x->a, host, port);
  if (i < 0) {
    x->oom = 1;
    return -1;
  }
  for (long long s = lo; s <= hi; s++)
    x->map[s] = (int16_t)i;
  return 0;
}

static void pend(dlock__aroute *rt, dlock__areq *r) {
  r->next = NULL;
  if (rt->pend_tail)
    rt->pend_tail->next = r;
  else
    rt->pend_head = r;
  rt->pend_tail = r;
}

static void ask_map(dlock_async *a);

/* The refresh ended: the requests waiting for the map go (or are retried
 * under the retry policy when no node told it). */
static void map_end(dlock_async *a, int ok, const char *why) {
  dlock__aroute *rt = a->route;
  rt->refreshing = 0;
  dlock__areq *list = rt->pend_head;
  rt->pend_head = rt->pend_tail = NULL;
  while (list && !a->closing) {
    dlock__areq *r = list;
    list = r->next;
    r->next = NULL;
    if (ok)
      dlock__aroute_submit(a, r);
    else
      dlock__aconn_retry(&a->cmd, r, DLOCK_ECONN, why);
  }
  if (ok && !a->closing)
    dlock__asub_kick(a);
}

static void map_done(dlock__areq *r, redisReply *reply, int err,
                     const char *why) {
  dlock_async *a = r->arg;
  dlock__aroute *rt = a->route;
  dlock__areq_free(r);
  char line[600] = "";
  int got = 0;
  if (err) {
    snprintf(line, sizeof line, "%s", why);
  } else if (reply->type == REDIS_REPLY_ERROR && rt->shards_try) {
    freeReplyObject(reply); /* Redis < 7: CLUSTER SLOTS on the same node */
    rt->shards_try = 0;
    ask_map(a);
    return;
  } else if (reply->type != REDIS_REPLY_ARRAY) {
    snprintf(line, sizeof line, "not a cluster node: %s",
             reply->type == REDIS_REPLY_ERROR ? reply->str
                                              : "unexpected reply");
  } else {
    int16_t *map = dlock__malloc(DLOCK__SLOTS * sizeof *map);
    map_ctx x = {a, map, !map};
    for (int s = 0; map && s < DLOCK__SLOTS; s++)
      map[s] = -1;
    if (map)
      dlock__cluster_parse(reply, rt->shards_try, a->url.tls, rt->qurl.host,
                           map_assign, &x);
    for (int s = 0; map && !x.oom && s < DLOCK__SLOTS && !got; s++)
      got = map[s] >= 0;
    if (got) {
      memcpy(rt->owner, map, DLOCK__SLOTS * sizeof *map);
      rt->map_ok = 1;
      rt->sharded = rt->shards_try;
    } else {
      snprintf(line, sizeof line, "%s",
               x.oom ? "out of memory" : "it knows no master of any slot");
    }
    free(map);
  }
  if (reply)
    freeReplyObject(reply);
  dlock__aconn_close_socket(&rt->q);
  if (a->closing)
    return;
  if (got) {
    map_end(a, 1, NULL);
    return;
  }
  char item[800];
  snprintf(item, sizeof item, "%s%s:%d: %s", rt->why.len ? "; " : "",
           rt->qurl.host, rt->qurl.port, line);
  dlock__sb_adds(&rt->why, item);
  rt->cand++;
  rt->shards_try = 1;
  ask_map(a);
}

/* Asks candidate rt->cand (the known masters, then the seeds) for the
 * map; the end of the list ends the refresh with DLOCK_ECONN. */
static void ask_map(dlock_async *a) {
  dlock__aroute *rt = a->route;
  int c = rt->cand;
  if (c >= rt->nn + a->url.nseeds) {
    char msg[1500];
    snprintf(msg, sizeof msg, "no node of the cluster told its topology (%s)",
             rt->why.oom ? "out of memory"
             : rt->why.p ? rt->why.p
                         : "");
    map_end(a, 0, msg);
    return;
  }
  rt->qurl = a->url;
  rt->qurl.cluster = 0;
  rt->qurl.db = 0;
  if (c < rt->nn) {
    rt->qurl.host = rt->nodes[c]->host;
    rt->qurl.port = rt->nodes[c]->url.port;
  } else {
    rt->qurl.host = a->url.seed_hosts[c - rt->nn];
    rt->qurl.port = a->url.seed_ports[c - rt->nn];
  }
  const char *av[2] = {"CLUSTER", rt->shards_try ? "SHARDS" : "SLOTS"};
  size_t al[2] = {7, rt->shards_try ? 6u : 5u};
  dlock__areq *r = dlock__areq_cmd(2, av, al, map_done, a);
  if (!r) {
    map_end(a, 0, "out of memory");
    return;
  }
  r->no_retry = 1;
  r->raw = 1; /* the answer's errors are judged here */
  dlock__aconn_submit(&rt->q, r);
}

/* One refresh at a time, at most one per DLOCK__CLUSTER_MIN_REFRESH_MS
 * (cluster.c's bound: every failing call wants one during a failover). */
static void start_refresh(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (rt->refreshing || rt->refresh_t.slot || a->closing)
    return;
  int64_t now = dlock__async_now();
  if (rt->tried_at && now - rt->tried_at < DLOCK__CLUSTER_MIN_REFRESH_MS) {
    dlock__async_timer(a, &rt->refresh_t,
                       rt->tried_at + DLOCK__CLUSTER_MIN_REFRESH_MS);
    return;
  }
  rt->tried_at = now;
  rt->refreshing = 1;
  rt->cand = 0;
  rt->shards_try = 1;
  dlock__sb_reset(&rt->why);
  ask_map(a);
}

static void refresh_fired(dlock__atimer *t) { start_refresh(t->arg); }

void dlock__aroute_submit(dlock_async *a, dlock__areq *r) {
  dlock__aroute *rt = a->route;
  int i = -1;
  /* At least every DLOCK__CLUSTER_REFRESH_MS, as cluster.c: the map in
   * hand serves meanwhile. */
  if (rt->map_ok &&
      dlock__async_now() - rt->tried_at >= DLOCK__CLUSTER_REFRESH_MS)
    start_refresh(a);
  if (rt->map_ok) {
    if (r->slot >= 0)
      i = rt->owner[r->slot];
    for (int s = 0; r->slot < 0 && i < 0 && s < DLOCK__SLOTS; s++)
      i = rt->owner[s];
  }
  if (i >= 0) {
    dlock__aconn_enqueue(&rt->nodes[i]->cmd, r);
    return;
  }
  if (rt->map_ok) {
    /* The map names no master for the slot (a failover under way): a
     * failed try under the retry policy, the map read again meanwhile --
     * the blocking router's rule (no redirect is counted). */
    char why[200];
    snprintf(why, sizeof why, "no master of the cluster serves slot %d",
             r->slot);
    start_refresh(a);
    dlock__aconn_retry(&a->cmd, r, DLOCK_ECONN, why);
    return;
  }
  pend(rt, r);
  start_refresh(a);
}

void dlock__aroute_redirect(dlock_async *a, dlock__areq *r, unsigned slot,
                            const char *host, int port, int ask) {
  dlock__aroute *rt = a->route;
  int i = node_at(a, host, port);
  if (i < 0) {
    r->fn(r, NULL, DLOCK_ENOMEM, "out of memory");
    return;
  }
  /* One bound per try and one code (DLOCK_EREDIS: a loop does not heal),
   * the blocking router's (ioverdict.c); until io-stack D7 this client
   * allowed 16 per request, counted "no master" too, and said ECONN. */
  int rc = dlock__redirect_bound(&r->redirects,
                                 r->script ? r->script->name : "command");
  if (rc) {
    char why[400];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    r->fn(r, NULL, rc, why);
    return;
  }
  if (ask) {
    r->asking = 1;
    dlock__aconn_enqueue(&rt->nodes[i]->cmd, r);
    return;
  }
  rt->owner[slot] = (int16_t)i;
  start_refresh(a); /* more slots may have moved with it */
  dlock__aconn_enqueue(&rt->nodes[i]->cmd, r);
}

dlock__aconn *dlock__aroute_subconn(dlock_async *a, const char *ch, size_t n) {
  dlock__aroute *rt = a->route;
  if (!rt || !a->url.cluster)
    return &a->sub;
  int i = rt->map_ok ? rt->owner[dlock__key_slot(ch, n)] : -1;
  if (i < 0) {
    start_refresh(a);
    return NULL;
  }
  return &rt->nodes[i]->sub;
}

static int map_owner(const void *map, unsigned slot) {
  return ((const dlock__aroute *)map)->owner[slot];
}

int dlock__aroute_info_tags(const dlock_async *a, const char *key, size_t kl,
                            char (*tags)[8], int max) {
  const dlock__aroute *rt = a->route;
  if (!rt || !a->url.cluster || !rt->map_ok)
    return 0;
  char seen[DLOCK__CLUSTER_MAX_NODES] = {0};
  int masters = 0; /* those that own slots */
  for (int s = 0; s < DLOCK__SLOTS; s++) {
    int o = rt->owner[s];
    if (o >= 0 && o < DLOCK__CLUSTER_MAX_NODES && !seen[o]) {
      seen[o] = 1;
      masters++;
    }
  }
  return dlock__info_copy_tags(rt->owner[dlock__key_slot(key, kl)], masters - 1,
                               map_owner, rt, tags, max);
}

int dlock__aroute_sharded(const dlock_async *a) {
  return a->route && a->url.cluster && a->route->sharded;
}

const char *dlock__apublish(const dlock_async *a) {
  return dlock__aroute_sharded(a) ? "SPUBLISH" : "PUBLISH";
}

void dlock__aroute_start(dlock_async *a) {
  dlock__aroute *rt = a->route;
  if (rt && rt->q.head)
    dlock__aconn_start(&rt->q);
}
