/*
 * sem.c -- the counting semaphore, Redisson RSemaphore layout (see
 * docs/semaphore.md).
 *
 * DATA (exactly Redisson's): the string key <name> holds the number of
 * available permits as decimal text. No TTL. A missing key means "not
 * initialised": nothing can be acquired until dlock_sem_init (trySetPermits)
 * or dlock_sem_post (release) creates it.
 *
 * A call that changes the count (init, post, each acquire attempt) also
 * writes dlock_once:{name}:<request id> (dlock's own key, same slot; PX
 * the client's once TTL) so that a copy re-sent by the retry policy counts
 * once -- the router sends no copy once the key could have expired -- and
 * the next change of the same object deletes it (see dlock__once).
 *
 * CHANNEL redisson_sc:{name} (redisson_sc:name when the name contains '{').
 * Every script that adds permits publishes the new number of available
 * permits there as decimal digits: release publishes the value after its
 * INCRBY, trySetPermits publishes the initial count.
 *
 * WAITING: one attempt first; on failure the thread joins the client's
 * subscription for the channel (wake policy DLOCK__WAKE_COUNT: a message
 * "<n>" kicks at most n waiting threads of this client, so one post wakes
 * one waiter, not all). Once the subscription is confirmed every waiter is
 * kicked and re-checks, so a post between the failed attempt and the
 * SUBSCRIBE is never lost. Pub/sub is at most once (a reconnect, a killed
 * subscriber connection, a kicked waiter that gave up), so every wait is
 * also bounded by a periodic re-check every DLOCK__SEM_RECHECK_MS.
 *
 * ETCD: an etcd:// client's semaphore is etcd_sem.c's object (its own
 * layout: one key, compare-and-swap on its mod revision, waits by watch);
 * each public call below checks its arguments here, then dispatches
 * through the client's store ops table (client/store.h).
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* Longest a waiting thread sleeps without re-checking the permit count. */
#define DLOCK__SEM_RECHECK_MS 1000

struct dlock_sem {
  dlock__chobj o; /* client, name, channel */
};

/* Every script that changes the count runs once per call however often
 * the router re-sends it (dlock__once): KEYS "once" is set, with the TTL
 * ARGV "ttl", before the count changes, and a re-sent copy that finds it
 * returns 1 without counting again; KEYS "prev", when present, is the
 * previous change's once key, deleted. Each returns 1 = done (now or by an
 * earlier copy), 0 = nothing changed. */

static dlock__script g_try_acquire = {
    "sem_try_acquire",
    /* KEYS[1] permits, [2] once, [3] prev. ARGV[1] n, [2] ttl. 0 = not
     * enough permits (or no key). Redisson RSemaphore.tryAcquire. */
    "if KEYS[3] then redis.call('del', KEYS[3]) end\n"
    "if redis.call('exists', KEYS[2]) == 1 then return 1 end\n"
    "local v = redis.call('get', KEYS[1])\n"
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then\n"
    "  redis.call('set', KEYS[2], 1, 'px', ARGV[2])\n"
    "  redis.call('decrby', KEYS[1], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    {0}};

static dlock__script g_release = {
    "sem_release",
    /* KEYS[1] permits, [2] channel, [3] once, [4] prev. ARGV[1] n, [2]
     * ttl, [3] publish command. Publishes the new value. Redisson
     * RSemaphore.release. */
    "if KEYS[4] then redis.call('del', KEYS[4]) end\n"
    "if redis.call('exists', KEYS[3]) == 1 then return 1 end\n"
    "redis.call('set', KEYS[3], 1, 'px', ARGV[2])\n"
    "local v = redis.call('incrby', KEYS[1], ARGV[1])\n"
    "redis.call(ARGV[3], KEYS[2], v)\n"
    "return 1\n",
    {0}};

static dlock__script g_try_set = {
    "sem_try_set_permits",
    /* KEYS[1] permits, [2] channel, [3] once, [4] prev. ARGV[1] n, [2]
     * ttl, [3] publish command. 0 = already set. Redisson
     * RSemaphore.trySetPermits. */
    "if KEYS[4] then redis.call('del', KEYS[4]) end\n"
    "if redis.call('exists', KEYS[3]) == 1 then return 1 end\n"
    "if redis.call('get', KEYS[1]) == false then\n"
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[2])\n"
    "  redis.call('set', KEYS[1], ARGV[1])\n"
    "  redis.call(ARGV[3], KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) {
  dlock__script_init(&g_try_acquire);
  dlock__script_init(&g_release);
  dlock__script_init(&g_try_set);
}

static void channel_of(dlock__sb *b, const char *name) {
  dlock__prefix_name(b, "redisson_sc", name);
}

static int sem_ready(dlock__chobj *o);

static const dlock__counter_kind g_kind = {"semaphore", channel_of,
                                           DLOCK__WAKE_COUNT,
                                           DLOCK__SEM_RECHECK_MS, sem_ready};

/* The store an etcd client's object is reached through (its own layout,
 * etcd_sem.c); NULL for a Redis client's (this file's) or NULL. */
static const dlock__store_ops *store_of(dlock_sem *s) {
  return dlock__counter_store(s ? &s->o : NULL);
}

int dlock_sem_new(dlock_client *c, const char *name, dlock_sem **out) {
  dlock__clear_error();
  if (c && c->store) /* the etcd store: etcd_sem.c */
    return c->store->sem_new(c, name, out);
  return dlock__counter_new(c, name, &g_kind, sizeof(dlock_sem), (void **)out);
}

void dlock_sem_free(dlock_sem *s) {
  if (store_of(s))
    store_of(s)->sem_free(s);
  else
    dlock__counter_free(s ? &s->o : NULL);
}

static int check_sem(dlock_sem *s) {
  dlock__clear_error();
  return dlock__counter_check(s ? &s->o : NULL, "semaphore");
}

/* Runs one of the counting scripts with ARGV = [n, ttl] (dlock__chobj_count);
 * 1 done, 0 nothing changed, or a negative code. */
static int run(dlock_sem *s, const dlock__script *sc, int with_channel,
               long long n) {
  pthread_once(&g_once, init_scripts);
  char ns[24];
  const char *args[1] = {ns};
  size_t alens[1] = {dlock__fmt_i64(ns, n)};
  return dlock__chobj_count(&s->o, sc, with_channel, 1, args, alens);
}

int dlock_sem_init(dlock_sem *s, long long permits) {
  int rc = check_sem(s);
  if (rc)
    return rc;
  if (permits < 0)
    return dlock__fail(DLOCK_EINVAL, "semaphore '%s': negative permits %lld",
                       s->o.name, permits);
  if (store_of(s))
    return store_of(s)->sem_init(s, permits);
  if ((rc = run(s, &g_try_set, 1, permits)) < 0)
    return rc;
  if (rc != 1)
    return dlock__fail(DLOCK_EBUSY, "semaphore '%s' is already initialised",
                       s->o.name);
  return 0;
}

int dlock_sem_post(dlock_sem *s) {
  int rc = check_sem(s);
  if (rc)
    return rc;
  if (store_of(s))
    return store_of(s)->sem_post(s);
  rc = run(s, &g_release, 1, 1);
  return rc < 0 ? rc : 0;
}

int dlock_sem_value(dlock_sem *s, long long *v) {
  dlock__clear_error();
  if (store_of(s)) {
    int rc = dlock__counter_check(&s->o, "semaphore");
    if (rc == 0 && !v)
      rc = dlock__fail(DLOCK_EINVAL, "v is NULL");
    return rc ? rc : store_of(s)->sem_value(s, v);
  }
  return dlock__counter_read(s ? &s->o : NULL, "semaphore", v, "v");
}

/* One attempt: 1 acquired, 0 no permit, or a negative code. */
static int sem_ready(dlock__chobj *o) {
  return run((dlock_sem *)o, &g_try_acquire, 0, 1);
}

static int acquire(dlock_sem *s, long long wait_ms) {
  int rc = check_sem(s);
  if (rc)
    return rc;
  rc = store_of(s) ? store_of(s)->sem_wait(s, wait_ms)
                   : dlock__counter_wait(&s->o, wait_ms);
  if (rc == DLOCK_EBUSY)
    return dlock__fail(DLOCK_EBUSY, "semaphore '%s': no permit available",
                       s->o.name);
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(rc, "semaphore '%s': no permit within %lld ms",
                       s->o.name, wait_ms);
  return rc;
}

int dlock_sem_wait(dlock_sem *s) { return acquire(s, -1); }
int dlock_sem_trywait(dlock_sem *s) { return acquire(s, 0); }
int dlock_sem_timedwait(dlock_sem *s, long long wait_ms) {
  return acquire(s, wait_ms);
}
