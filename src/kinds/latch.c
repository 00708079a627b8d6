/*
 * latch.c -- the count-down latch, Redisson RCountDownLatch layout (see
 * docs/latch.md).
 *
 * DATA (exactly Redisson's): the string key <name> holds the remaining
 * count as decimal text. No TTL. The key is deleted when the count reaches
 * zero, so "absent" and "zero" are the same state: an await on a latch that
 * was never set (or already opened) returns at once.
 *
 * init and count-down also write dlock_once:{name}:<request id> (dlock's
 * own key, same slot; PX the client's once TTL) so that a copy re-sent by
 * the retry policy counts once -- the router sends no copy once the key
 * could have expired -- and the next change of the same object deletes it
 * (see dlock__once).
 *
 * CHANNEL redisson_countdownlatch__channel__{name} (always with the braces,
 * as Redisson builds it). Messages: "0" when a count-down reaches zero,
 * "1" when a new count is set (trySetCount).
 *
 * WAITING: check the count; if it is above zero, join the client's
 * subscription for the channel (wake policy DLOCK__WAKE_ALL: any message
 * wakes every waiting thread of this client; each re-reads the count). Once
 * the subscription is confirmed every waiter is kicked and re-checks, so a
 * count-down to zero between the first check and the SUBSCRIBE is never
 * missed. Pub/sub is at most once, so every wait is also bounded by a
 * re-check every DLOCK__LATCH_RECHECK_MS.
 */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* Longest a waiting thread sleeps without re-reading the count. */
#define DLOCK__LATCH_RECHECK_MS 1000

struct dlock_latch {
  dlock__chobj o; /* client, name, channel */
};

/* Both scripts run once per call however often the router re-sends them
 * (dlock__once, as the semaphore's): KEYS[3] "once" is set with the TTL
 * ARGV[3] before anything changes, and a re-sent copy that finds it returns
 * 1 at once; KEYS[4], when present, is the previous change's once key,
 * deleted. */

static dlock__script g_try_set = {
    "latch_try_set_count",
    /* KEYS[1] count, [2] channel, [3] once, [4] prev. ARGV[1] message
     * ("1"), [2] count, [3] ttl, [4] publish command. 1 = set (now or by an
     * earlier copy), 0 = already set. Redisson RCountDownLatch.trySetCount. */
    "if KEYS[4] then redis.call('del', KEYS[4]) end\n"
    "if redis.call('exists', KEYS[3]) == 1 then return 1 end\n"
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('set', KEYS[3], 1, 'px', ARGV[3])\n"
    "  redis.call('set', KEYS[1], ARGV[2])\n"
    "  redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    {0}};

static dlock__script g_count_down = {
    "latch_count_down",
    /* KEYS[1] count, [2] channel, [3] once, [4] prev. ARGV[1] message
     * ("0"), [2] unused, [3] ttl, [4] publish command. Returns 1. Redisson
     * RCountDownLatch.countDown. */
    "if KEYS[4] then redis.call('del', KEYS[4]) end\n"
    "if redis.call('exists', KEYS[3]) == 1 then return 1 end\n"
    "redis.call('set', KEYS[3], 1, 'px', ARGV[3])\n"
    "local v = redis.call('decr', KEYS[1])\n"
    "if v <= 0 then redis.call('del', KEYS[1]) end\n"
    "if v == 0 then redis.call(ARGV[4], KEYS[2], ARGV[1]) end\n"
    "return 1\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void channel_of(dlock__sb *b, const char *name) {
  /* Redisson writes this one with braces always, also around a name that
   * already has them. */
  dlock__sb_adds(b, "redisson_countdownlatch__channel__{");
  dlock__sb_adds(b, name);
  dlock__sb_adds(b, "}");
}

static int latch_ready(dlock__chobj *o);

static const dlock__counter_kind g_kind = {
    "latch", channel_of, DLOCK__WAKE_ALL, DLOCK__LATCH_RECHECK_MS, latch_ready};

int dlock_latch_new(dlock_client *c, const char *name, dlock_latch **out) {
  dlock__clear_error();
  if (out && c && c->etcd)
    *out = NULL;
  if (c && c->etcd)
    return dlock__etcd_notsup("the count-down latch (dlock_latch)",
                              "use a redis:// client");
  return dlock__counter_new(c, name, &g_kind, sizeof(dlock_latch),
                            (void **)out);
}

void dlock_latch_free(dlock_latch *l) { dlock__counter_free(l ? &l->o : NULL); }

static int check_latch(dlock_latch *l) {
  dlock__clear_error();
  return dlock__counter_check(l ? &l->o : NULL, "latch");
}

static void init_scripts(void) {
  dlock__script_init(&g_try_set);
  dlock__script_init(&g_count_down);
}

/* Runs one of the scripts with ARGV = [msg, count, ttl]
 * (dlock__chobj_count); 1 done, 0 nothing changed, or a negative code. */
static int run(dlock_latch *l, const dlock__script *sc, const char *msg,
               long long count) {
  pthread_once(&g_once, init_scripts);
  char cs[24];
  const char *args[2] = {msg, cs};
  size_t alens[2] = {strlen(msg), dlock__fmt_i64(cs, count)};
  return dlock__chobj_count(&l->o, sc, 1, 2, args, alens);
}

int dlock_latch_init(dlock_latch *l, long long count) {
  int rc = check_latch(l);
  if (rc)
    return rc;
  if (count <= 0)
    return dlock__fail(DLOCK_EINVAL, "latch '%s': count %lld is not positive",
                       l->o.name, count);
  if ((rc = run(l, &g_try_set, "1", count)) < 0)
    return rc;
  if (rc != 1)
    return dlock__fail(DLOCK_EBUSY, "latch '%s' is already set", l->o.name);
  return 0;
}

int dlock_latch_count_down(dlock_latch *l) {
  int rc = check_latch(l);
  if (rc)
    return rc;
  rc = run(l, &g_count_down, "0", 0);
  return rc < 0 ? rc : 0;
}

int dlock_latch_count(dlock_latch *l, long long *n) {
  dlock__clear_error();
  return dlock__counter_read(l ? &l->o : NULL, "latch", n, "n");
}

/* 1 open (count absent or <= 0), 0 closed, or a negative code. */
static int latch_ready(dlock__chobj *o) {
  long long n = 0;
  int rc = dlock__counter_get(o, &n);
  return rc ? rc : n <= 0;
}

int dlock_latch_timedawait(dlock_latch *l, long long wait_ms) {
  int rc = check_latch(l);
  if (rc)
    return rc;
  rc = dlock__counter_wait(&l->o, wait_ms);
  if (rc == DLOCK_EBUSY)
    return dlock__fail(DLOCK_ETIMEDOUT, "latch '%s' is not open", l->o.name);
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(rc, "latch '%s' still closed after %lld ms", l->o.name,
                       wait_ms);
  return rc;
}

int dlock_latch_await(dlock_latch *l) { return dlock_latch_timedawait(l, -1); }
