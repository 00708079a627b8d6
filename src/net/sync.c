/*
 * sync.c -- replica sync: WAIT after every lock write (docs/sentinel.md).
 *
 * It owns c->sync (the master's replica count, cached) and the calling
 * thread's shortfall flag. The router (conn.c) asks dlock__sync_want before
 * a script that writes, pipelines `WAIT <n> <sync_timeout_ms>` right after
 * it on the same connection -- WAIT counts the replicas that acknowledged
 * every write of *that* connection so far, so it must follow the script
 * there -- and hands the answer to dlock__sync_done. A lock kind that just
 * acquired something reads dlock__sync_short and, on a shortfall, undoes
 * the acquisition and retries (DLOCK_ENOSYNC at the end: mutex.c, sem.c).
 *
 * WAIT's timeout is sync_timeout_ms, cut to what is left of the calling
 * public call's wait budget (conn.c: a timed lock never waits for replicas
 * past its budget), at least 1 ms.
 *
 * cfg.sync_replicas: 0 sends no WAIT; n > 0 waits for n; -1 for every
 * replica connected to the master, read from INFO replication (the
 * connected_slaves that are online: one still loading its first copy
 * cannot acknowledge, and gets every write with that copy). The count is cached
 * and read again when WAIT's answer differs from it, when the master changes
 * (sentinel.c resets it), and every DLOCK__SYNC_REFRESH_MS (engine.c's rule,
 * the async client's too), so replicas that attach later are waited for.
 *
 * WHAT IF INFO is refused (an ACL user without +info) or fails? The count
 * is taken as 0 (no WAIT) until the next refresh; the caller's call is not
 * failed for it and its message is left alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"
#include "client/client.h"

static _Thread_local int t_short;
static _Thread_local int t_off; /* dlock__sync_pause */
static _Thread_local char t_why[160];
static _Thread_local int t_wait_ms; /* the last WAIT's timeout (conn.c) */

void dlock__sync_waited(int ms) { t_wait_ms = ms; }

void dlock__sync_init(dlock__sync *s) {
  atomic_init(&s->replicas, -1);
  atomic_init(&s->checked_at, 0);
}

void dlock__sync_reset(void) {
  t_short = 0;
  t_wait_ms = 0;
}

int dlock__sync_short(const char **why) {
  if (why)
    *why = t_why;
  return t_short;
}

/* The replicas INFO replication lists as online (connected_slaves less
 * those still loading their first copy: they cannot acknowledge yet, and
 * have every write of the copy they get), or -1. */
int dlock__sync_parse_replicas(const redisReply *r) {
  if (!r || r->type != REDIS_REPLY_STRING) /* RESP2 */
    return -1;
  if (!strstr(r->str, "connected_slaves:"))
    return -1;
  int n = 0;
  for (const char *p = r->str; (p = strstr(p, "\nslave")) != NULL; p++) {
    const char *eol = strchr(p + 1, '\n');
    const char *st = strstr(p, ",state=online,");
    n += st && (!eol || st < eol);
  }
  return n;
}

/* The count of the master serving key: on a cluster each master has its
 * own (a shard whose master failed over may have no replica left), else
 * the client's one. */
static dlock__sync *sync_of(dlock_client *c, const char *key) {
  dlock__node *n = c->cl && key ? dlock__cluster_lookup(c, key) : NULL;
  return n ? &n->sync : &c->sync;
}

/* Reads the replica count of the master serving key now (one attempt, the
 * thread's message kept). Returns it (0 when unknown). */
static int refresh(dlock_client *c, const char *key) {
  dlock__sync *sy = sync_of(c, key);
  const char *av[2] = {"INFO", "replication"};
  size_t al[2] = {4, 11};
  dlock__cmd cmd = {c->cl ? key : NULL, NULL, 2, av, al, 1};
  redisReply *r = NULL;
  atomic_store(&sy->checked_at, dlock__now_ms());
  dlock__err_keep_begin();
  int rc = dlock__exec(c, &cmd, &r);
  dlock__err_keep_end();
  int n = rc == 0 ? dlock__sync_parse_replicas(r) : -1;
  if (r)
    freeReplyObject(r);
  if (n >= 0 || rc == DLOCK_EREDIS) /* refused (ACL): 0 until the next */
    atomic_store(&sy->replicas, n >= 0 ? n : 0);
  /* Not reached (a failover under way): unknown, asked again next time. */
  return n >= 0 ? n : 0;
}

void dlock__sync_pause(int off) { t_off = off; }

int dlock__sync_want(dlock_client *c, const char *key) {
  int want = t_off ? 0 : c->cfg.sync_replicas;
  if (want >= 0)
    return want;
  dlock__sync *sy = sync_of(c, key);
  int n = atomic_load(&sy->replicas);
  long long at = atomic_load(&sy->checked_at);
  long long now = dlock__now_ms();
  /* One thread refreshes a known count; an unknown one, every thread that
   * needs it (none may skip the WAIT for want of it). */
  if (n < 0 || (dlock__eng_sync_stale(at, now) &&
                atomic_compare_exchange_strong(&sy->checked_at, &at, now)))
    n = refresh(c, key);
  return n;
}

void dlock__sync_done(dlock_client *c, const char *key, int want,
                      long long acks) {
  /* The engine's verdict (dlock__eng_sync_verdict), the async client's
   * too. Replicas came or went (RECOUNT): the count is read again, and a
   * replica that left is not waited for. */
  int cfg = c->cfg.sync_replicas;
  int v = dlock__eng_sync_verdict(cfg, want, acks, -1);
  if (v == DLOCK__ENG_SYNC_RECOUNT)
    v = dlock__eng_sync_verdict(cfg, want, acks, refresh(c, key));
  if (v == DLOCK__ENG_SYNC_OK)
    return;
  t_short = 1;
  dlock__sync_why(t_why, sizeof t_why, acks, want, t_wait_ms,
                  c->cfg.sync_timeout_ms);
}
