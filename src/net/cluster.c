/*
 * cluster.c -- Redis Cluster: which master serves a key.
 *
 * Owns the key slot (CRC16 of the key's hash tag, modulo 16384, as Redis
 * computes it), the check that every key and channel a lock name derives
 * falls into the lock key's slot, the node table (one dlock__node per
 * master, made on first sight and kept until the client goes, so a pointer
 * to one never dangles), the slot map, and its refresh from CLUSTER SHARDS
 * (Redis 7) or CLUSTER SLOTS (older servers).
 *
 * The map is read without a lock (one atomic per slot); it changes when a
 * MOVED reply names a new owner, and when it is refreshed: at first use, on
 * MOVED, after a connection error or a CLUSTERDOWN / READONLY reply (the
 * router marks it stale), and at least every DLOCK__CLUSTER_REFRESH_MS. One
 * thread refreshes at a time; the others keep using the map they have, or
 * wait for it -- except the renewal thread, which never waits for a
 * refresh (the errand thread refreshes for it: errand.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"
#include "client/client.h"

/* ---- slots ----------------------------------------------------------------
 * (a key's slot is proto/names.c's, dlock__key_slot) */

int dlock__cluster_name_check(const dlock_client *c, const char *name,
                              const char *kind) {
  if (!c->cl)
    return 0;
  if (!strchr(name, '{')) {
    /* Derived names wrap it in braces, "prefix:{" name "}": a '}' inside
     * ends that tag early (or empties it), so they hash differently from
     * the lock key, which has no tag at all. */
    if (!strchr(name, '}'))
      return 0;
    return dlock__fail(DLOCK_EINVAL,
                       "%s '%s': on a cluster its keys and channels would "
                       "fall into different slots (CROSSSLOT): a name with "
                       "'}' but no '{' is wrapped in braces in its derived "
                       "names, and the '}' ends that hash tag early; drop "
                       "the '}' or give the name a hash tag, '{tag}'",
                       kind, name);
  }
  /* Derived names are "prefix:" name (Redisson's rule for a name with a
   * '{'), whose tag is the name's own only when the name has a valid one. */
  const char *p;
  size_t n, len = strlen(name);
  dlock__hash_part(name, len, &p, &n);
  if (p != name || n != len)
    return 0;
  return dlock__fail(DLOCK_EINVAL,
                     "%s '%s': on a cluster its keys and channels would fall "
                     "into different slots (CROSSSLOT): a name with '{' must "
                     "carry a valid hash tag, '{tag}' with something between "
                     "the braces",
                     kind, name);
}

/* ---- the node table --------------------------------------------------------
 */

struct dlock__cnode {
  dlock__node node;
  dlock__url url; /* host and port of the master; credentials as the seed's */
};

static dlock__cnode *cnode_new(dlock_client *c, const char *host, int port) {
  dlock__cnode *cn = dlock__calloc(1, sizeof *cn);
  if (!cn)
    return NULL;
  cn->url.host = dlock__strdup(host);
  cn->url.port = port;
  cn->url.tls = c->url.tls;
  cn->url.user = c->url.user ? dlock__strdup(c->url.user) : NULL;
  cn->url.password = c->url.password ? dlock__strdup(c->url.password) : NULL;
  if (!cn->url.host || (c->url.user && !cn->url.user) ||
      (c->url.password && !cn->url.password) ||
      dlock__node_init(&cn->node, c, &cn->url, c->cfg.pool_size) != 0) {
    dlock__url_free(&cn->url);
    free(cn);
    return NULL;
  }
  return cn;
}

/* Index of the node at host:port, made when missing; -1 when the table is
 * full or memory ran out. cl->mu held. */
static int node_index(dlock_client *c, const char *host, int port) {
  dlock__cluster *cl = c->cl;
  int n = atomic_load(&cl->n);
  for (int i = 0; i < n; i++)
    if (cl->nodes[i]->url.port == port &&
        strcmp(cl->nodes[i]->url.host, host) == 0)
      return i;
  if (n >= DLOCK__CLUSTER_MAX_NODES)
    return -1;
  dlock__cnode *cn = cnode_new(c, host, port);
  if (!cn)
    return -1;
  cl->nodes[n] = cn;
  atomic_store(&cl->n, n + 1);
  return n;
}

dlock__node *dlock__cluster_node_at(dlock_client *c, const char *host,
                                    int port) {
  dlock__mu_lock(&c->cl->mu);
  int i = node_index(c, host, port);
  dlock__mu_unlock(&c->cl->mu);
  return i < 0 ? NULL : &c->cl->nodes[i]->node;
}

int dlock__cluster_init(dlock_client *c) {
  if (!c->url.cluster)
    return 0;
  dlock__cluster *cl = dlock__calloc(1, sizeof *cl);
  if (!cl)
    return DLOCK_ENOMEM;
  if (pthread_mutex_init(&cl->mu, NULL) != 0) {
    free(cl);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (pthread_mutex_init(&cl->refresh_mu, NULL) != 0) {
    pthread_mutex_destroy(&cl->mu);
    free(cl);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  for (int i = 0; i < DLOCK__SLOTS; i++)
    atomic_init(&cl->owner[i], -1);
  atomic_init(&cl->stale, 1);
  c->cl = cl;
  return 0;
}

void dlock__cluster_destroy(dlock_client *c, int forked) {
  dlock__cluster *cl = c->cl;
  if (!cl)
    return;
  int n = atomic_load(&cl->n);
  for (int i = 0; i < n; i++) {
    if (forked)
      dlock__node_free_memory(&cl->nodes[i]->node);
    else
      dlock__node_destroy(&cl->nodes[i]->node);
    dlock__url_free(&cl->nodes[i]->url);
    free(cl->nodes[i]);
  }
  if (!forked) {
    pthread_mutex_destroy(&cl->mu);
    pthread_mutex_destroy(&cl->refresh_mu);
  }
  free(cl);
  c->cl = NULL;
}

int dlock__cluster_masters(dlock_client *c, dlock__node **out, int max) {
  dlock__cluster *cl = c->cl;
  int n = atomic_load(&cl->n), k = 0;
  char seen[DLOCK__CLUSTER_MAX_NODES] = {0};
  for (int s = 0; s < DLOCK__SLOTS; s++) {
    int o = atomic_load_explicit(&cl->owner[s], memory_order_relaxed);
    if (o >= 0 && o < n && !seen[o]) {
      seen[o] = 1;
      if (k < max)
        out[k] = &cl->nodes[o]->node;
      k++;
    }
  }
  return k;
}

/* ---- the topology, from the servers ----------------------------------------
 */

/* The value of field name in a flat [k, v, k, v, ...] array, or NULL. */
static const redisReply *field(const redisReply *m, const char *name) {
  if (!m || m->type != REDIS_REPLY_ARRAY)
    return NULL;
  for (size_t i = 0; i + 1 < m->elements; i += 2)
    if (m->element[i]->type == REDIS_REPLY_STRING &&
        strcmp(m->element[i]->str, name) == 0)
      return m->element[i + 1];
  return NULL;
}

static int is_str(const redisReply *r, const char *s) {
  return r && r->type == REDIS_REPLY_STRING && strcmp(r->str, s) == 0;
}

/* Assigns slots [lo, hi] to the master host:port in map. cl->mu held. */
static int assign(dlock_client *c, int16_t *map, long long lo, long long hi,
                  const char *host, int port) {
  if (lo < 0 || hi >= DLOCK__SLOTS || lo > hi || !host || !*host || port <= 0)
    return 0;
  int i = node_index(c, host, port);
  if (i < 0)
    return -1;
  for (long long s = lo; s <= hi; s++)
    map[s] = (int16_t)i;
  return 0;
}

/* The master of one CLUSTER SHARDS shard: its address, or NULL. */
static const redisReply *shard_master(const redisReply *shard, int tls,
                                      long long *port) {
  const redisReply *nodes = field(shard, "nodes");
  for (size_t j = 0;
       nodes && nodes->type == REDIS_REPLY_ARRAY && j < nodes->elements; j++) {
    const redisReply *nd = nodes->element[j];
    const redisReply *p = field(nd, tls ? "tls-port" : "port");
    const redisReply *ip = field(nd, "ip");
    if (!is_str(field(nd, "role"), "master") ||
        is_str(field(nd, "health"), "fail") || !p ||
        p->type != REDIS_REPLY_INTEGER || !ip || ip->type != REDIS_REPLY_STRING)
      continue;
    *port = p->integer;
    return ip;
  }
  return NULL;
}

static int parse_shards(const redisReply *r, int tls, dlock__slots_fn *fn,
                        void *ctx) {
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *slots = field(r->element[i], "slots");
    long long port = 0;
    const redisReply *ip = shard_master(r->element[i], tls, &port);
    if (!slots || slots->type != REDIS_REPLY_ARRAY || !ip)
      continue;
    for (size_t k = 0; k + 1 < slots->elements; k += 2)
      if (slots->element[k]->type == REDIS_REPLY_INTEGER &&
          slots->element[k + 1]->type == REDIS_REPLY_INTEGER &&
          fn(ctx, slots->element[k]->integer, slots->element[k + 1]->integer,
             ip->str, (int)port) != 0)
        return -1;
  }
  return 0;
}

/* CLUSTER SLOTS: [[lo, hi, [ip, port, id...], replicas...], ...]; an empty
 * ip means the node that answered (asked). */
static int parse_slots(const redisReply *r, const char *asked,
                       dlock__slots_fn *fn, void *ctx) {
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
      continue;
    const char *ip = e->element[2]->element[0]->str;
    if (fn(ctx, e->element[0]->integer, e->element[1]->integer,
           *ip ? ip : asked, (int)e->element[2]->element[1]->integer) != 0)
      return -1;
  }
  return 0;
}

int dlock__cluster_parse(const redisReply *r, int shards, int tls,
                         const char *asked, dlock__slots_fn *fn, void *ctx) {
  return shards ? parse_shards(r, tls, fn, ctx)
                : parse_slots(r, asked, fn, ctx);
}

typedef struct assign_ctx {
  dlock_client *c;
  int16_t *map;
} assign_ctx;

static int assign_fn(void *p, long long lo, long long hi, const char *host,
                     int port) {
  assign_ctx *x = p;
  return assign(x->c, x->map, lo, hi, host, port);
}

/* Asks the server at u for the topology into map: 1 if it answered with a
 * map covering some slot, 0 if not (message set), -1 out of memory. */
static int ask_topology(dlock_client *c, const dlock__url *u, int16_t *map) {
  dlock__link *l;
  if (dlock__link_open(c, u, &l) != 0)
    return 0;
  const char *av[2] = {"CLUSTER", "SHARDS"};
  size_t al[2] = {7, 6};
  redisReply *r = dlock__link_cmd(l, 2, av, al);
  int shards = 1;
  if (r && r->type == REDIS_REPLY_ARRAY)
    atomic_store(&c->cl->sharded, 1);      /* Redis 7: SSUBSCRIBE, SPUBLISH */
  if (r && r->type == REDIS_REPLY_ERROR) { /* Redis < 7 */
    freeReplyObject(r);
    av[1] = "SLOTS";
    al[1] = 5;
    r = dlock__link_cmd(l, 2, av, al);
    shards = 0;
  }
  if (!r) {
    dlock__link_fail(l, c->cfg.command_timeout_ms, "CLUSTER SHARDS");
    dlock__link_free(l);
    return 0;
  }
  dlock__link_free(l);
  int rc = 0;
  if (r->type == REDIS_REPLY_ARRAY) {
    for (int s = 0; s < DLOCK__SLOTS; s++)
      map[s] = -1;
    dlock__mu_lock(&c->cl->mu);
    assign_ctx x = {c, map};
    rc = dlock__cluster_parse(r, shards, c->url.tls, u->host, assign_fn, &x);
    dlock__mu_unlock(&c->cl->mu);
    for (int s = 0; rc == 0 && s < DLOCK__SLOTS; s++)
      if (map[s] >= 0)
        rc = 1;
    if (rc == 0)
      dlock__fail(DLOCK_ECONN, "%s:%d knows no master of any slot", u->host,
                  u->port);
  } else {
    dlock__fail(DLOCK_ECONN, "%s:%d: not a cluster node: %s", u->host, u->port,
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
  }
  freeReplyObject(r);
  return rc;
}

/* The addresses to ask, in order: the masters the map knows, then the
 * seeds of the URL. */
static int candidates(dlock_client *c, dlock__url *out, int max) {
  dlock__node *m[DLOCK__CLUSTER_MAX_NODES];
  int k = dlock__cluster_masters(c, m, DLOCK__CLUSTER_MAX_NODES), n = 0;
  for (int i = 0; i < k && i < DLOCK__CLUSTER_MAX_NODES && n < max; i++)
    out[n++] = *m[i]->url;
  for (int i = 0; i < c->url.nseeds && n < max; i++) {
    out[n] = c->url;
    out[n].host = c->url.seed_hosts[i];
    out[n].port = c->url.seed_ports[i];
    n++;
  }
  return n;
}

int dlock__cluster_refresh(dlock_client *c) {
  dlock__cluster *cl = c->cl;
  unsigned epoch = atomic_load(&cl->epoch);
  if (dlock__io_guard_nowait()) {
    /* The renewal thread never waits for another thread's refresh (its
     * connects may take connect_timeout_ms): it keeps the map it has. */
    if (dlock__mu_trylock(&cl->refresh_mu) != 0)
      return 0;
  } else {
    dlock__mu_lock(&cl->refresh_mu);
  }
  int64_t now = dlock__now_ms();
  if (atomic_load(&cl->epoch) != epoch || /* another thread just did it */
      now - cl->tried_at < DLOCK__CLUSTER_MIN_REFRESH_MS) {
    /* At most one round of questions per interval: during a failover
     * every failing call wants one, and the answer changes only when the
     * cluster has decided. */
    dlock__mu_unlock(&cl->refresh_mu);
    return 0;
  }
  cl->tried_at = now;
  enum { MAXC = 96 };
  dlock__url *cand = dlock__calloc(MAXC, sizeof *cand);
  int16_t *map = dlock__malloc(DLOCK__SLOTS * sizeof *map);
  int rc = cand && map ? 0 : DLOCK_ENOMEM;
  int n = rc ? 0 : candidates(c, cand, MAXC), got = 0;
  for (int i = 0; i < n && !got && !atomic_load(&c->closing); i++) {
    got = ask_topology(c, &cand[i], map);
  }
  if (got == 1) {
    for (int s = 0; s < DLOCK__SLOTS; s++)
      atomic_store_explicit(&cl->owner[s], map[s], memory_order_relaxed);
    atomic_store(&cl->stale, 0);
    atomic_store(&cl->refreshed_at, dlock__now_ms());
    atomic_fetch_add(&cl->epoch, 1);
  } else if (rc == 0) {
    char last[256];
    snprintf(last, sizeof last, "%s", dlock_last_error());
    rc = got < 0 ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                 : dlock__fail(DLOCK_ECONN,
                               "no node of the cluster told its topology "
                               "(last: %s)",
                               last);
  }
  dlock__mu_unlock(&cl->refresh_mu);
  free(cand);
  free(map);
  return rc;
}

void dlock__cluster_moved(dlock_client *c, unsigned slot, dlock__node *to) {
  dlock__cluster *cl = c->cl;
  int n = atomic_load(&cl->n);
  for (int i = 0; i < n; i++)
    if (&cl->nodes[i]->node == to) {
      atomic_store(&cl->owner[slot & (DLOCK__SLOTS - 1)], (int16_t)i);
      break;
    }
  atomic_fetch_add(&cl->epoch, 1);
  atomic_store(&cl->stale, 1);
}

dlock__node *dlock__cluster_route(dlock_client *c, const char *key) {
  dlock__cluster *cl = c->cl;
  int64_t now = dlock__now_ms(), at = atomic_load(&cl->refreshed_at);
  if (atomic_load(&cl->stale) || now - at > DLOCK__CLUSTER_REFRESH_MS) {
    if (at == 0 || atomic_load(&cl->stale))
      dlock__cluster_refresh(c); /* errors: the lookup below fails */
    else if (dlock__mu_trylock(&cl->refresh_mu) == 0) {
      /* Periodic: one caller refreshes, the others go on. */
      dlock__mu_unlock(&cl->refresh_mu);
      dlock__cluster_refresh(c);
    }
  }
  return dlock__cluster_lookup(c, key);
}

dlock__node *dlock__cluster_lookup(dlock_client *c, const char *key) {
  dlock__cluster *cl = c->cl;
  unsigned slot = key ? dlock__key_slot(key, strlen(key)) : 0;
  int o = atomic_load_explicit(&cl->owner[slot], memory_order_relaxed);
  if (o < 0 && !key) { /* any master will do */
    for (int s = 0; s < DLOCK__SLOTS && o < 0; s++)
      o = atomic_load_explicit(&cl->owner[s], memory_order_relaxed);
  }
  if (o < 0 || o >= atomic_load(&cl->n)) {
    atomic_store(&cl->stale, 1); /* e.g. a failover in progress: ask again */
    char last[256];
    snprintf(last, sizeof last, "%s", dlock_last_error());
    dlock__fail(DLOCK_ECONN, "no master of the cluster serves slot %u%s%s",
                slot, *last ? ": " : "", last);
    return NULL;
  }
  return &cl->nodes[o]->node;
}

void dlock__cluster_mark_stale(dlock_client *c) {
  if (c->cl)
    atomic_store(&c->cl->stale, 1);
}

const char *dlock__publish_cmd(const dlock_client *c) {
  return c->cl && atomic_load(&c->cl->sharded) ? "SPUBLISH" : "PUBLISH";
}
