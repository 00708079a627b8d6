/*
 * admin.c -- <dlock/admin.h>: operators' reads on the client's masters.
 *
 * An admin object borrows a client for what the client already knows how
 * to do -- parse every URL form, hold a TLS context, log in, find the
 * Sentinel master (sentinel.c), keep a Cluster's slot map (cluster.c) --
 * and opens connections of its own (dlock__link_open_ms: link.c), one per
 * call in flight per master, kept idle for the next call. It never sends
 * on the client's lock connections: a scan of a big keyspace cannot delay
 * a lock call or a renewal.
 *
 * NODES. A table of the masters named so far (name "host:port" or a unix
 * socket's path -> the URL to connect to: the client's own, a Sentinel
 * master's address with the client's credentials, a cluster node's URL).
 * Entries are never removed while the object lives (a name that is no
 * longer a master still connects to that server), so a name handed out
 * stays valid.
 *
 * DEADLINES. A call's timeout covers the login of a new connection (its
 * reply) and every reply, each read given only the time left; a call past
 * its deadline closes its connection (the late replies must not meet the
 * next call). Nothing is retried: a tool decides what a failed node means.
 *
 * SENTINEL PORTS. A redis:// URL at a Sentinel's port connects and logs in
 * fine, then every data command is unknown to it; the first such refusal
 * asks the server SENTINEL MASTERS, and a Sentinel's answer turns the
 * call's result into "this is a Sentinel: use redis-sentinel://" with the
 * master names it monitors (dlock__sentinel_port_hint, also used by
 * error.c for the lock calls).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dlock/admin.h"
#include "async/async.h"
#include "etcd/etcd.h"

typedef struct alink {
  struct alink *next;
  dlock__link *l;
} alink;

typedef struct anode {
  char name[300];
  char host[256]; /* the URL's host when it is the node's own copy */
  dlock__url url; /* borrowed pointers, but host (see above) */
  alink *idle;
} anode;

struct dlock_admin {
  dlock_client *c;
  pthread_mutex_t mu; /* the table and the idle lists */
  anode **nodes;
  size_t n, cap;
};

int dlock_admin_new(dlock_client *c, dlock_admin **out) {
  dlock__clear_error();
  if (out)
    *out = NULL;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  if (c->etcd)
    return dlock__fail(DLOCK_ENOTSUP,
                       "admin reads a Redis keyspace; on etcd use "
                       "dlock_status_query and dlock_fair_waiters_query");
  dlock_admin *a = dlock__calloc(1, sizeof *a);
  if (!a)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    free(a);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  a->c = c;
  *out = a;
  return 0;
}

void dlock_admin_free(dlock_admin *a) {
  if (!a)
    return;
  int child = a->c->fork_gen != dlock__fork_gen();
  for (size_t i = 0; i < a->n; i++) {
    for (alink *k = a->nodes[i]->idle; k;) {
      alink *nx = k->next;
      if (!child)
        dlock__link_free(k->l);
      free(k);
      k = nx;
    }
    free(a->nodes[i]);
  }
  free(a->nodes);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* ---- the table of masters --------------------------------------------------
 */

/* The name of a URL's server: "host:port", or the socket's path. */
static void url_name(const dlock__url *u, char *buf, size_t len) {
  if (!u)
    snprintf(buf, len, "?");
  else if (u->is_unix)
    snprintf(buf, len, "%s", u->path ? u->path : "?");
  else
    snprintf(buf, len, "%s:%d", u->host ? u->host : "?", u->port);
}

/* The entry named like u's server, made (with a copy of u) when missing.
 * a->mu held. NULL on OOM. */
static anode *node_put(dlock_admin *a, const dlock__url *u) {
  char name[300];
  url_name(u, name, sizeof name);
  for (size_t i = 0; i < a->n; i++)
    if (strcmp(a->nodes[i]->name, name) == 0)
      return a->nodes[i];
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 8;
    anode **v = realloc(a->nodes, cap * sizeof(anode *));
    if (!v)
      return NULL;
    a->nodes = v;
    a->cap = cap;
  }
  anode *nd = dlock__calloc(1, sizeof *nd);
  if (!nd)
    return NULL;
  snprintf(nd->name, sizeof nd->name, "%s", name);
  nd->url = *u;
  if (!u->is_unix) {
    snprintf(nd->host, sizeof nd->host, "%s", u->host ? u->host : "");
    nd->url.host = nd->host;
  }
  a->nodes[a->n++] = nd;
  return nd;
}

static anode *node_find(dlock_admin *a, const char *name) {
  for (size_t i = 0; i < a->n; i++)
    if (strcmp(a->nodes[i]->name, name) == 0)
      return a->nodes[i];
  return NULL;
}

/* One line of CLUSTER NODES: when it is a master the cluster marked failed
 * ("fail" or "fail?") that still has slots, its host (cap bytes) and port:
 * 1, else 0. */
static int failed_master_line(const char *line, char *host, size_t cap,
                              int *port) {
  char addr[300], flags[200];
  int used = 0;
  if (sscanf(line, "%*s %299s %199s %*s %*s %*s %*s %*s %n", addr, flags,
             &used) != 2 ||
      !strstr(flags, "master") || !strstr(flags, "fail") || !used ||
      !line[used] || line[used] == '\n')
    return 0;
  char *at = strchr(addr, '@');
  if (at)
    *at = '\0';
  char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || (size_t)(colon - addr) >= cap)
    return 0;
  *port = atoi(colon + 1);
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  return *port > 0;
}

/* The masters the cluster marked failed that still own slots (a paused or
 * dead one: the slot map leaves them out), asked of the master via, are
 * appended to out[k..max) (hosts in hosts[]): a tool names them as failed
 * instead of leaving their slots out unsaid. Returns the new count. */
static int failed_masters(dlock_client *c, const dlock__url *via,
                          dlock__url *out, char (*hosts)[256], int k, int max) {
  dlock__link *l = NULL;
  if (dlock__link_open(c, via, &l) != 0)
    return k;
  const char *argv[2] = {"CLUSTER", "NODES"};
  size_t lens[2] = {7, 5};
  redisReply *r = dlock__link_cmd(l, 2, argv, lens);
  for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL;
       p && *p && k < max; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    int port, dup = 0;
    if (!failed_master_line(p, hosts[k], sizeof hosts[k], &port))
      continue;
    for (int i = 0; i < k && !dup; i++)
      dup = out[i].port == port && out[i].host &&
            strcmp(out[i].host, hosts[k]) == 0;
    if (dup)
      continue;
    out[k] = *via;
    out[k].host = hosts[k];
    out[k].port = port;
    k++;
  }
  if (r)
    freeReplyObject(r);
  dlock__link_free(l);
  return k;
}

/* The masters now into out[0..max): their URLs (a Sentinel master's in
 * hosts[i]). Returns how many, or a negative code. */
static int masters_now(dlock_client *c, dlock__url *out, char (*hosts)[256],
                       int max) {
  if (c->url.sentinel) {
    unsigned gen = 0;
    int rc =
        dlock__sentinel_target(c, &out[0], hosts[0], sizeof hosts[0], &gen);
    return rc ? rc : 1;
  }
  if (!c->cl) {
    out[0] = c->url;
    return 1;
  }
  dlock__cluster_mark_stale(c);
  int rc = dlock__cluster_refresh(c);
  if (rc)
    return rc;
  dlock__node **v = dlock__calloc((size_t)max, sizeof(dlock__node *));
  if (!v)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  int n = dlock__cluster_masters(c, v, max);
  if (n > max)
    n = max;
  for (int i = 0; i < n; i++)
    out[i] = *v[i]->url;
  free(v);
  if (n == 0)
    return dlock__fail(DLOCK_ECONN, "no master of the cluster serves slots");
  return failed_masters(c, &out[0], out, hosts, n, max);
}

void dlock_admin_nodes_free(char **nodes, size_t n) {
  for (size_t i = 0; nodes && i < n; i++)
    free(nodes[i]);
  free(nodes);
}

int dlock_admin_nodes(dlock_admin *a, char ***nodes, size_t *n) {
  dlock__clear_error();
  if (nodes)
    *nodes = NULL;
  if (n)
    *n = 0;
  if (!a || !nodes || !n)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  int rc = dlock__client_check(a->c);
  if (rc)
    return rc;
  enum { MAX = DLOCK__CLUSTER_MAX_NODES };
  dlock__url *us = dlock__calloc(MAX, sizeof *us);
  char(*hosts)[256] = dlock__calloc(MAX, sizeof *hosts);
  char **v = dlock__calloc(MAX, sizeof(char *));
  if (!us || !hosts || !v) {
    free(us);
    free(hosts);
    free(v);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  int k = masters_now(a->c, us, hosts, MAX);
  dlock__mu_lock(&a->mu);
  for (int i = 0; i < k; i++) {
    anode *nd = node_put(a, &us[i]);
    if (!nd || !(v[i] = dlock__strdup(nd->name))) {
      dlock_admin_nodes_free(v, (size_t)i);
      v = NULL;
      k = dlock__fail(DLOCK_ENOMEM, "out of memory");
      break;
    }
  }
  dlock__mu_unlock(&a->mu);
  free(us);
  free(hosts);
  if (k < 0) {
    free(v);
    return k;
  }
  *nodes = v;
  *n = (size_t)k;
  return 0;
}

int dlock_admin_node_of(dlock_admin *a, const char *key, char *buf,
                        size_t len) {
  dlock__clear_error();
  if (buf && len)
    buf[0] = '\0';
  if (!a || !key || !buf || len < 2)
    return dlock__fail(DLOCK_EINVAL, "NULL argument or no room");
  int rc = dlock__client_check(a->c);
  if (rc)
    return rc;
  if (a->c->url.sentinel || !a->c->cl) {
    char **v = NULL;
    size_t n = 0;
    if ((rc = dlock_admin_nodes(a, &v, &n)) != 0)
      return rc;
    if (n == 0 || !v) /* never: one master or a failure */
      return dlock__fail(DLOCK_ECONN, "no master");
    snprintf(buf, len, "%s", v[0]);
    dlock_admin_nodes_free(v, n);
    return 0;
  }
  dlock__node *nd = dlock__cluster_lookup(a->c, key);
  if (!nd && dlock__cluster_refresh(a->c) == 0)
    nd = dlock__cluster_lookup(a->c, key);
  if (!nd)
    return DLOCK_ECONN; /* the message is lookup's */
  dlock__mu_lock(&a->mu);
  anode *an = node_put(a, nd->url);
  if (an)
    snprintf(buf, len, "%s", an->name);
  dlock__mu_unlock(&a->mu);
  return an ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory");
}

/* ---- replies ---------------------------------------------------------------
 */

void dlock_reply_free(dlock_reply *r) {
  if (!r)
    return;
  for (size_t i = 0; r->element && i < r->elements; i++)
    dlock_reply_free(r->element[i]);
  free(r->element);
  free(r->str);
  free(r);
}

/* A deep copy of hiredis's reply, or NULL on OOM. */
static dlock_reply *copy_reply(const redisReply *r) {
  dlock_reply *d = dlock__calloc(1, sizeof *d);
  if (!d)
    return NULL;
  int t = r->type;
  d->type = t == REDIS_REPLY_STRING    ? DLOCK_REPLY_STRING
            : t == REDIS_REPLY_ARRAY   ? DLOCK_REPLY_ARRAY
            : t == REDIS_REPLY_INTEGER ? DLOCK_REPLY_INTEGER
            : t == REDIS_REPLY_STATUS  ? DLOCK_REPLY_STATUS
            : t == REDIS_REPLY_ERROR   ? DLOCK_REPLY_ERROR
                                       : DLOCK_REPLY_NIL;
  d->integer = t == REDIS_REPLY_INTEGER ? r->integer : 0;
  if (r->str && (t == REDIS_REPLY_STRING || t == REDIS_REPLY_STATUS ||
                 t == REDIS_REPLY_ERROR)) {
    d->len = r->len;
    if (!(d->str = dlock__malloc(r->len + 1))) {
      free(d);
      return NULL;
    }
    memcpy(d->str, r->str, r->len);
    d->str[r->len] = '\0';
  }
  if (t == REDIS_REPLY_ARRAY && r->elements) {
    if (!(d->element = dlock__calloc(r->elements, sizeof(dlock_reply *)))) {
      dlock_reply_free(d);
      return NULL;
    }
    for (size_t i = 0; i < r->elements; i++, d->elements++)
      if (!(d->element[i] = copy_reply(r->element[i]))) {
        dlock_reply_free(d);
        return NULL;
      }
  }
  return d;
}

/* ---- what may be sent
 * -------------------------------------------------------- */

static int word_in(const char *w, size_t wl, const char *const *list) {
  for (size_t i = 0; list[i]; i++)
    if (strlen(list[i]) == wl && strncasecmp(w, list[i], wl) == 0)
      return 1;
  return 0;
}

/* 0 when cmd is one of the reads admin.h lists, else DLOCK_EINVAL. */
static int check_read(const dlock_admin_cmd *cmd) {
  static const char *const reads[] = {
      "SCAN",     "TYPE",   "EXISTS", "PTTL",     "TTL",    "GET",
      "GETRANGE", "STRLEN", "HGET",   "HGETALL",  "HLEN",   "HEXISTS",
      "HKEYS",    "LRANGE", "LLEN",   "LINDEX",   "ZRANGE", "ZRANGEBYSCORE",
      "ZCARD",    "ZSCORE", "SCARD",  "SMEMBERS", "PING",   "TIME",
      "INFO",     "DBSIZE", "ROLE",   NULL};
  static const char *const pubsub[] = {"CHANNELS", "NUMSUB", "SHARDCHANNELS",
                                       "SHARDNUMSUB", NULL};
  static const char *const cluster[] = {"SHARDS", "SLOTS", "NODES",
                                        "INFO",   "MYID",  NULL};
  static const char *const memory[] = {"USAGE", NULL};
  if (!cmd || cmd->argc < 1 || !cmd->argv || !cmd->argv[0])
    return dlock__fail(DLOCK_EINVAL, "an empty command");
  const char *w = cmd->argv[0];
  size_t wl = cmd->argvlen ? cmd->argvlen[0] : strlen(w);
  if (word_in(w, wl, reads))
    return 0;
  const char *const *sub =
      word_in(w, wl, (const char *const[]){"PUBSUB", NULL})    ? pubsub
      : word_in(w, wl, (const char *const[]){"CLUSTER", NULL}) ? cluster
      : word_in(w, wl, (const char *const[]){"MEMORY", NULL})  ? memory
                                                               : NULL;
  if (sub && cmd->argc >= 2 && cmd->argv[1] &&
      word_in(cmd->argv[1],
              cmd->argvlen ? cmd->argvlen[1] : strlen(cmd->argv[1]), sub))
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "'%.*s' is not one of the reads dlock_admin_run sends "
                     "(dlock/admin.h)",
                     (int)(wl > 64 ? 64 : wl), w);
}

/* ---- one call
 * ---------------------------------------------------------------- */

/* An idle connection to nd, or a new one whose login must answer within
 * left_ms. 0 and *out, or a code with the message set. */
static int link_take(dlock_admin *a, anode *nd, int64_t left_ms,
                     dlock__link **out) {
  dlock__mu_lock(&a->mu);
  alink *k = nd->idle;
  if (k)
    nd->idle = k->next;
  dlock__mu_unlock(&a->mu);
  if (k) {
    *out = k->l;
    free(k);
    return 0;
  }
  int ms = left_ms > INT32_MAX ? INT32_MAX : (int)(left_ms > 0 ? left_ms : 1);
  int rc = dlock__link_open_ms(a->c, &nd->url, ms, out);
  if (rc && !strstr(dlock_last_error(), nd->name)) {
    char m[400];
    snprintf(m, sizeof m, "%s", dlock_last_error());
    dlock__fail(rc, "%s: %s", nd->name, m);
  }
  return rc;
}

static void link_give(dlock_admin *a, anode *nd, dlock__link *l) {
  alink *k = dlock__malloc(sizeof *k);
  if (!k) {
    dlock__link_free(l);
    return;
  }
  k->l = l;
  dlock__mu_lock(&a->mu);
  k->next = nd->idle;
  nd->idle = k;
  dlock__mu_unlock(&a->mu);
}

/* The next reply on l by the monotonic deadline into *out: 0, or a code
 * with the message set (a timeout: "no reply within timeout_ms ms"). */
static int reply_by(dlock__link *l, const char *node, int64_t deadline,
                    long long timeout_ms, redisReply **out) {
  for (;;) {
    if (dlock__link_next(l, out) != 0)
      break;
    if (*out)
      return 0;
    int64_t left = deadline - dlock__now_ms();
    if (left <= 0)
      return dlock__fail(DLOCK_ECONN, "%s: no reply within %lld ms", node,
                         timeout_ms);
    int ms = left > INT32_MAX ? INT32_MAX : (int)left;
    dlock__link_set_timeout(l, ms, ms);
    if (dlock__link_read(l) != 0)
      break;
  }
  if (l->err == DLOCK__LINK_TIMEOUT)
    return dlock__fail(DLOCK_ECONN, "%s: no reply within %lld ms", node,
                       timeout_ms);
  return dlock__fail(l->err == DLOCK__LINK_TLS   ? DLOCK_ETLS
                     : l->err == DLOCK__LINK_OOM ? DLOCK_ENOMEM
                                                 : DLOCK_ECONN,
                     "%s: %s", node, l->errstr);
}

/* RESP of cmds[0..n) into b: 0 or DLOCK_EINVAL. */
static int encode(dlock__sb *b, const dlock_admin_cmd *cmds, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t lens[64];
    const dlock_admin_cmd *cm = &cmds[i];
    if (!cm->argvlen && cm->argc > 64)
      return dlock__fail(DLOCK_EINVAL,
                         "a command of more than 64 arguments needs argvlen");
    for (int j = 0; !cm->argvlen && j < cm->argc; j++)
      lens[j] = strlen(cm->argv[j]);
    dlock__resp_argv(b, cm->argc, (const char **)cm->argv,
                     cm->argvlen ? cm->argvlen : lens);
  }
  return b->oom ? dlock__fail(DLOCK_ENOMEM, "out of memory") : 0;
}

/* Sends cmds and reads their n replies into rs[] (hiredis's). 0, or a
 * code (rs[] freed). */
static int roundtrip(dlock__link *l, const char *node,
                     const dlock_admin_cmd *cmds, size_t n, int64_t deadline,
                     long long timeout_ms, redisReply **rs) {
  dlock__sb b;
  dlock__sb_init(&b);
  int rc = encode(&b, cmds, n);
  int64_t left = deadline - dlock__now_ms();
  int ms = left > INT32_MAX ? INT32_MAX : (int)(left > 1 ? left : 1);
  dlock__link_set_timeout(l, ms, ms);
  if (rc == 0 && dlock__link_send(l, b.p, b.len) != 0)
    rc = dlock__fail(DLOCK_ECONN, "%s: %s", node,
                     l->err == DLOCK__LINK_TIMEOUT ? "write timed out"
                                                   : l->errstr);
  dlock__sb_free(&b);
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = reply_by(l, node, deadline, timeout_ms, &rs[i]);
  for (size_t i = 0; rc && i < n; i++) {
    if (rs[i])
      freeReplyObject(rs[i]);
    rs[i] = NULL;
  }
  return rc;
}

/* 1 when some reply refuses a command as unknown (a Sentinel does that to
 * every data command). */
static int unknown_command(redisReply **rs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (rs[i] && rs[i]->type == REDIS_REPLY_ERROR &&
        strncmp(rs[i]->str, "ERR unknown command", 19) == 0)
      return 1;
  return 0;
}

int dlock_admin_run(dlock_admin *a, const char *node,
                    const dlock_admin_cmd *cmds, size_t n, long long timeout_ms,
                    dlock_reply **replies) {
  dlock__clear_error();
  for (size_t i = 0; replies && i < n; i++)
    replies[i] = NULL;
  if (!a || !node || !cmds || !n || !replies)
    return dlock__fail(DLOCK_EINVAL, "NULL argument or no command");
  int rc = dlock__client_check(a->c);
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = check_read(&cmds[i]);
  if (rc)
    return rc;
  if (timeout_ms <= 0)
    timeout_ms = a->c->cfg.command_timeout_ms;
  int64_t deadline = dlock__now_ms() + timeout_ms;
  dlock__mu_lock(&a->mu);
  anode *nd = node_find(a, node);
  dlock__mu_unlock(&a->mu);
  if (!nd)
    return dlock__fail(DLOCK_EINVAL,
                       "'%s' is no master dlock_admin_nodes named", node);
  redisReply **rs = dlock__calloc(n, sizeof(redisReply *));
  if (!rs)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  dlock__link *l = NULL;
  rc = link_take(a, nd, deadline - dlock__now_ms(), &l);
  if (rc == 0)
    rc = roundtrip(l, nd->name, cmds, n, deadline, timeout_ms, rs);
  if (rc == 0 && !a->c->url.sentinel && !a->c->cl && unknown_command(rs, n))
    rc = dlock__sentinel_port_hint(l, nd->name, deadline);
  for (size_t i = 0; i < n && rc == 0; i++)
    if (!(replies[i] = copy_reply(rs[i])))
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    if (rs[i])
      freeReplyObject(rs[i]);
    if (rc && replies[i]) {
      dlock_reply_free(replies[i]);
      replies[i] = NULL;
    }
  }
  free(rs);
  if (l && rc == 0)
    link_give(a, nd, l);
  else
    dlock__link_free(l);
  return rc;
}
