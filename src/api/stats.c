/*
 * stats.c -- the client's counters (dlock_client_stats,
 * dlock_async_stats): one relaxed atomic per field in the client
 * (dlock__stats, bumped where the event happens: util/counters.c), copied
 * field by field into the caller's struct, with the gauges (holds,
 * connected) read at query time.
 */
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "async/async.h"
#include "etcd/etcd.h"

#define STATS_MAGIC 0x444c5354u /* "DLST" */
#define STATS_SIZE_MAX 4096u

/* Where each counter lands in dlock_client_stats. */
static const size_t g_off[DLOCK__ST_COUNT] = {
    [DLOCK__ST_ACQUIRED] = offsetof(dlock_client_stats, acquired),
    [DLOCK__ST_ACQUIRED_DIRECT] = offsetof(dlock_client_stats, acquired_direct),
    [DLOCK__ST_ACQUIRED_HANDOVER] =
        offsetof(dlock_client_stats, acquired_handover),
    [DLOCK__ST_REENTERED] = offsetof(dlock_client_stats, reentered),
    [DLOCK__ST_RELEASED] = offsetof(dlock_client_stats, released),
    [DLOCK__ST_WAITS] = offsetof(dlock_client_stats, waits),
    [DLOCK__ST_WAIT_HIST0] = offsetof(dlock_client_stats, wait_hist[0]),
    [DLOCK__ST_WAIT_HIST0 + 1] = offsetof(dlock_client_stats, wait_hist[1]),
    [DLOCK__ST_WAIT_HIST0 + 2] = offsetof(dlock_client_stats, wait_hist[2]),
    [DLOCK__ST_WAIT_HIST0 + 3] = offsetof(dlock_client_stats, wait_hist[3]),
    [DLOCK__ST_WAIT_HIST0 + 4] = offsetof(dlock_client_stats, wait_hist[4]),
    [DLOCK__ST_WAIT_HIST0 + 5] = offsetof(dlock_client_stats, wait_hist[5]),
    [DLOCK__ST_WAIT_HIST0 + 6] = offsetof(dlock_client_stats, wait_hist[6]),
    [DLOCK__ST_WAIT_HIST7] = offsetof(dlock_client_stats, wait_hist[7]),
    [DLOCK__ST_WAIT_MS_TOTAL] = offsetof(dlock_client_stats, wait_ms_total),
    [DLOCK__ST_WAIT_MS_MAX] = offsetof(dlock_client_stats, wait_ms_max),
    [DLOCK__ST_TIMEOUTS] = offsetof(dlock_client_stats, timeouts),
    [DLOCK__ST_CANCELS] = offsetof(dlock_client_stats, cancels),
    [DLOCK__ST_RENEWALS_SENT] = offsetof(dlock_client_stats, renewals_sent),
    [DLOCK__ST_RENEWALS_FAILED] = offsetof(dlock_client_stats, renewals_failed),
    [DLOCK__ST_LOST_KEY_GONE] = offsetof(dlock_client_stats, lost_key_gone),
    [DLOCK__ST_LOST_UNREACHABLE] =
        offsetof(dlock_client_stats, lost_unreachable),
    [DLOCK__ST_LOST_THREAD_EXIT] =
        offsetof(dlock_client_stats, lost_thread_exit),
    [DLOCK__ST_LOST_FORCED] = offsetof(dlock_client_stats, lost_forced),
    [DLOCK__ST_RECONNECTS] = offsetof(dlock_client_stats, reconnects),
    [DLOCK__ST_RETRIES] = offsetof(dlock_client_stats, retries),
    [DLOCK__ST_ENOSYNC] = offsetof(dlock_client_stats, enosync),
    [DLOCK__ST_COMMANDS] = offsetof(dlock_client_stats, commands),
    [DLOCK__ST_ROUND_TRIPS] = offsetof(dlock_client_stats, round_trips),
    [DLOCK__ST_LOST_EXPIRED] = offsetof(dlock_client_stats, lost_expired),
};

/* The command connections are up: the only node's, or on a cluster every
 * master's (that owns slots) that this client has talked to. */
static int32_t connected_now(dlock_client *c) {
  if (c->etcd)
    return dlock__etcd_connected(c);
  if (!c->cl)
    return dlock__node_up(&c->node);
  dlock__node *m[DLOCK__CLUSTER_MAX_NODES];
  int n = dlock__cluster_masters(c, m, DLOCK__CLUSTER_MAX_NODES);
  if (n > DLOCK__CLUSTER_MAX_NODES)
    n = DLOCK__CLUSTER_MAX_NODES;
  int up = 0;
  for (int i = 0; i < n; i++) {
    if (atomic_load(&m[i]->dropped))
      return 0; /* its connection failed and was not made again */
    up |= dlock__node_up(m[i]);
  }
  return up; /* masters never talked to yet do not count */
}

/* The counters of s into full (its layout record written). */
static void take(const dlock__stats *s, dlock_client_stats *full, size_t size) {
  memset(full, 0, sizeof *full);
  full->abi_magic = STATS_MAGIC;
  full->abi_size = (uint32_t)size;
  for (int k = 0; k < DLOCK__ST_COUNT; k++) {
    uint64_t v = atomic_load_explicit(&s->v[k], memory_order_relaxed);
    memcpy((unsigned char *)full + g_off[k], &v, sizeof v);
  }
}

/* Writes what fits of full into the caller's size bytes. */
static void give(dlock_client_stats *st, const dlock_client_stats *full,
                 size_t size) {
  memset(st, 0, size);
  memcpy(st, full, size < sizeof *full ? size : sizeof *full);
}

/* The arguments of a stats call (its name `call`): 0, or DLOCK_EINVAL
 * when one is NULL or size is not a struct size. */
static int check_args(const char *call, int null, size_t size) {
  if (null || size < 8 || size > STATS_SIZE_MAX) {
    (void)dlock__fail(DLOCK_EINVAL,
                      "%s: NULL argument or a struct size of %zu bytes (use "
                      "the %s macro)",
                      call, size, call);
    return DLOCK_EINVAL; /* a literal: the analyzer sees no way on */
  }
  return 0;
}

int dlock_client_stats_sized(dlock_client *c, dlock_client_stats *st,
                             size_t size) {
  int rc = check_args("dlock_client_stats", !c || !st, size);
  if (rc)
    return rc;
  dlock_client_stats full;
  take(&c->stats, &full, size);
  full.holds = (uint64_t)dlock__holds_now(c);
  full.connected = connected_now(c);
  give(st, &full, size);
  return 0;
}

int dlock_async_stats_sized(dlock_async *a, dlock_client_stats *st,
                            size_t size) {
  int rc = check_args("dlock_async_stats", !a || !st, size);
  if (rc)
    return rc;
  dlock_client_stats full;
  take(&a->stats, &full, size);
  int64_t now = dlock__now_ms();
  for (size_t i = 0; a->holds.b && i < a->holds.nb; i++)
    for (dlock__map_ent *e = a->holds.b[i]; e; e = e->next) {
      const dlock__ahold *h = e->val;
      full.holds += h->h.count > 0 && !h->h.lost && now < h->h.valid_until;
    }
  full.connected = a->cmd.state == DLOCK__AC_READY;
  give(st, &full, size);
  return 0;
}
