/*
 * bglink.c -- a background thread's own connections: one link per node,
 * for the renewal thread (watchdog.c) and the errand thread (errand.c).
 *
 * Neither thread borrows the router's connections: a renewal must not
 * queue behind the commands of the caller's threads, and each thread's
 * waits are bounded by its own rules -- every wait of the renewal thread
 * far below a renewal period, every wait of both ending when the client is
 * freed (the I/O guard, link.c). A link is opened on first use with the
 * table's reply bound, kept while it works, dropped when it fails (the next
 * use reconnects, and says so once it succeeded), and replaced when a
 * Sentinel failover moved the master.
 */
#include <stdlib.h>
#include <string.h>

#include "net/net.h"
#include "client/client.h"

dlock__link *dlock__bg_link(dlock_client *c, dlock__bglinks *s,
                            dlock__node *node, dlock__bglink **out) {
  *out = NULL;
  int i = 0;
  while (i < s->n && s->v[i].node != node)
    i++;
  if (i == s->n) {
    if (s->n == s->cap) {
      int nc = s->cap ? s->cap * 2 : 4;
      dlock__bglink *nv = realloc(s->v, (size_t)nc * sizeof *nv);
      if (!nv) {
        dlock__fail(DLOCK_ENOMEM, "out of memory");
        return NULL;
      }
      s->v = nv;
      s->cap = nc;
    }
    s->v[s->n++] = (dlock__bglink){node, NULL, 0};
  }
  dlock__bglink *b = &s->v[i];
  *out = b;
  if (b->link && dlock__link_stale(c, b->link)) {
    dlock__link_free(b->link); /* Sentinel failover: follow */
    b->link = NULL;
  }
  if (!b->link) {
    if (dlock__link_open_ms(c, node->url, s->read_ms, &b->link))
      return NULL;
    if (b->failed) {
      b->failed = 0;
      dlock__stat_add(&c->stats, DLOCK__ST_RECONNECTS, 1);
      dlock__log(&c->cfg, DLOCK_LOG_INFO, NULL, "reconnect",
                 "%s connection reopened", s->who);
    }
  }
  return b->link;
}

void dlock__bg_drop(dlock_client *c, dlock__bglink *b) {
  if (!b)
    return;
  dlock__link_free(b->link);
  b->link = NULL;
  b->failed = 1;
  dlock__cluster_mark_stale(c); /* the master may have failed over */
}

void dlock__bg_close(dlock__bglinks *s) {
  for (int i = 0; i < s->n; i++)
    dlock__link_free(s->v[i].link);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

int dlock__bg_call(dlock_client *c, dlock__bglinks *s, const char *key,
                   int argc, const char **argv, const size_t *lens,
                   redisReply **out) {
  *out = NULL;
  dlock__node *node = c->cl ? dlock__cluster_lookup(c, key) : &c->node;
  dlock__bglink *b = NULL;
  dlock__link *l = node ? dlock__bg_link(c, s, node, &b) : NULL;
  if (!l) {
    int rc = atomic_load(&c->closing) ? DLOCK_ECLOSED : DLOCK_ECONN;
    dlock__bg_drop(c, b);
    if (!b && node)
      return DLOCK_ENOMEM;
    return rc;
  }
  dlock__sb sb;
  dlock__sb_init(&sb);
  dlock__resp_argv(&sb, argc, argv, lens);
  int rc = sb.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory") : 0;
  if (!rc && (dlock__link_send(l, sb.p, sb.len) != 0 ||
              !(*out = dlock__link_reply(l)))) {
    rc = dlock__link_fail(l, s->read_ms, s->who);
    if (atomic_load(&c->closing))
      rc = dlock__fail(DLOCK_ECLOSED, "client is closing");
    dlock__bg_drop(c, b);
  }
  if (!sb.oom) {
    dlock__stat_add(&c->stats, DLOCK__ST_COMMANDS, 1);
    dlock__stat_add(&c->stats, DLOCK__ST_ROUND_TRIPS, 1);
  }
  dlock__sb_free(&sb);
  if (*out && (*out)->type == REDIS_REPLY_ERROR &&
      (strncmp((*out)->str, "MOVED", 5) == 0 ||
       strncmp((*out)->str, "CLUSTERDOWN", 11) == 0 ||
       strncmp((*out)->str, "TRYAGAIN", 8) == 0 ||
       strncmp((*out)->str, "ASK", 3) == 0))
    dlock__cluster_mark_stale(c); /* the caller tries again later */
  if (*out && (*out)->type == REDIS_REPLY_ERROR && c->url.sentinel &&
      dlock__reply_reroutes((*out)->str, DLOCK__TOPO_SENTINEL))
    dlock__sentinel_invalidate(c, atomic_load(&c->sent.gen));
  return rc;
}
