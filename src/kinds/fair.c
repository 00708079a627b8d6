/*
 * fair.c -- the fair mutex: FIFO across all clients, Redisson RFairLock
 * layout (see docs/fair.md).
 *
 * DATA (exactly Redisson's, so Java and C waiters share one queue):
 *   hash  <name>                          field "<uuid>:<tid>" = hold count
 *   list  redisson_lock_queue:{name}      waiting fields, FIFO
 *   zset  redisson_lock_timeout:{name}    waiting field -> deadline (epoch ms)
 *   channel redisson_lock__channel:{name}:<uuid>:<tid>   one per waiter
 *
 * HOW IT WORKS. A blocking call joins the queue with its very first attempt
 * (ops.queue_first), so arrival order is the order in which first attempts
 * reach the server. Only the head of the queue -- or anyone when the queue
 * is empty -- may take a free lock. Unlock publishes "0" on the head's own
 * channel only; nobody else wakes. A waiter's deadline is the deadline of
 * the waiter in front of it (or the holder's TTL) plus its own wait budget
 * (300000 ms when it waits forever, Redisson's fairLockWaitTimeout). A head
 * whose deadline has passed is presumed dead and purged by whoever touches
 * the lock next, so a crashed waiter delays the queue by at most its
 * deadline. When a waiter takes the lock or gives up, the deadlines behind
 * it shrink by its wait budget (Redisson's arithmetic), never below now +
 * that budget and never above their own deadline (a leaver never extends
 * a dead waiter's hold on the queue).
 *
 * trylock and timedlock(0, ...) run the single-attempt script, which never
 * enqueues: they succeed only if the lock is free and the queue is empty
 * (or this thread is its head).
 *
 * dlock additions, invisible to Redisson clients (data effects unchanged):
 *   - when a dead head is purged, or a waiter leaves, while the lock is
 *     free, "0" is published on the new head's channel, so it does not
 *     sleep until its timer to notice it may go;
 *   - the acquire scripts return a wake-up hint instead of Redisson's
 *     estimate: the holder's PTTL, or, while the lock is free and someone
 *     else is the head, the time until that head could be purged (at most
 *     1 s), so a waiter never sleeps long past the moment it could proceed;
 *   - a reentrant acquire writes the hold count the client expects (HSET)
 *     instead of HINCRBY, so a retried call is idempotent, and reports a
 *     hold that vanished as DLOCK_ELOST;
 *   - unlocking a lock that expired returns DLOCK_ELOST (Redisson reports
 *     success) after the same effects (publish to the head).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kinds/kinds.h"

/* A dlock waiter's place in the queue lives this long after its last
 * attempt (its deadline in the timeout zset is now + FAIR_LIVE_MS, raised by
 * every attempt, and a waiting thread attempts at least every
 * FAIR_REFRESH_MS). A waiter that dies -- SIGKILL, a lost host -- therefore
 * holds the queue for at most FAIR_LIVE_MS, not for Redisson's
 * fairLockWaitTimeout (300 s) plus the holder's lease (issue 10). The
 * caller's own wait budget is enforced locally by the wait loop. */
#define FAIR_LIVE_MS 5000LL
#define FAIR_REFRESH_MS 1000LL

/* ---- scripts --------------------------------------------------------------
 * Shared Lua prelude. KEYS[1] lock, KEYS[2] queue, KEYS[3] timeout zset,
 * KEYS[4] channel prefix "redisson_lock__channel:{name}". */
#define FAIR_LUA_PRELUDE                                                       \
  DLOCK__LUA_TTL DLOCK__LUA_KIND                                               \
  "local function notify(pub, head)\n"                                         \
  "  redis.call(pub, KEYS[4] .. ':' .. head, '0')\n"                           \
  "end\n"                                                                      \
  /* Removes expired heads (or heads without a deadline); returns how many. */ \
  "local function purge(now)\n"                                                \
  "  local n = 0\n"                                                            \
  "  while true do\n"                                                          \
  "    local head = redis.call('lindex', KEYS[2], 0)\n"                        \
  "    if not head then break end\n"                                           \
  "    local s = redis.call('zscore', KEYS[3], head)\n"                        \
  "    if s and tonumber(s) > now then break end\n"                            \
  "    redis.call('lpop', KEYS[2])\n"                                          \
  "    redis.call('zrem', KEYS[3], head)\n"                                    \
  "    n = n + 1\n"                                                            \
  "  end\n"                                                                    \
  "  return n\n"                                                               \
  "end\n"                                                                      \
  /* After a purge: a free lock and a new head that is not the caller. */      \
  "local function wake_new_head(pub, me)\n"                                    \
  "  if redis.call('exists', KEYS[1]) == 0 then\n"                             \
  "    local head = redis.call('lindex', KEYS[2], 0)\n"                        \
  "    if head and head ~= me then notify(pub, head) end\n"                    \
  "  end\n"                                                                    \
  "end\n"                                                                      \
  /* Waiters behind one that leaves move up by its budget (Redisson's       */ \
  /* arithmetic), but never closer than `wait` from now (a live dlock       */ \
  /* waiter refreshes its deadline at least that often) -- nor later than   */ \
  /* they were: a dead waiter's deadline is never raised.                  */ \
  "local function shrink(rest, wait, now)\n"                                   \
  "  for i = 1, #rest do\n"                                                    \
  "    local old = redis.call('zscore', KEYS[3], rest[i])\n"                 \
  "    if old then\n"                                                          \
  "      old = tonumber(old)\n"                                                \
  "      local sc = old - wait\n"                                              \
  "      if sc < now + wait then sc = math.min(old, now + wait) end\n"         \
  "      redis.call('zadd', KEYS[3], sc, rest[i])\n"                           \
  "    end\n"                                                                  \
  "  end\n"                                                                    \
  "end\n"                                                                      \
  /* Tries to take or re-enter the lock: true = held. target = hold count  */  \
  /* after this acquire ('1' = first hold); -3 = our earlier hold is gone. */  \
  "local function take(field, lease, target, wait, now)\n"                     \
  /* held by another kind of lock: taken, never rewritten (issue 25.6) */    \
  "  local kd = kind_of(KEYS[1])\n"                                           \
  "  if kd ~= 'none' and kd ~= 'mutex' then\n"                               \
  "    if target ~= '1' then return -3 end\n"                                 \
  "    return false\n"                                                        \
  "  end\n"                                                                   \
  "  if target ~= '1' then\n"                                                  \
  "    local c = tonumber(redis.call('hget', KEYS[1], field))\n"               \
  "    if c then\n"                                                            \
  "      extend(KEYS[1], lease)\n"                                             \
  "      if c < tonumber(target) then\n"                                       \
  "        redis.call('hset', KEYS[1], field, target)\n"                       \
  "      end\n"                                                                \
  "      return true\n"                                                        \
  "    end\n"                                                                  \
  "    return -3\n"                                                            \
  "  end\n"                                                                    \
  "  if redis.call('exists', KEYS[1]) == 0 then\n"                             \
  "    local head = redis.call('lindex', KEYS[2], 0)\n"                        \
  "    if head and head ~= field then return false end\n"                      \
  "    if head then redis.call('lpop', KEYS[2]) end\n"                         \
  "    redis.call('zrem', KEYS[3], field)\n"                                   \
  "    shrink(redis.call('zrange', KEYS[3], 0, -1), wait, now)\n"              \
  "    redis.call('hset', KEYS[1], field, 1)\n"                                \
  "    pexpire_new(KEYS[1], lease)\n"                                          \
  "    return true\n"                                                          \
  "  end\n"                                                                    \
  "  if redis.call('hexists', KEYS[1], field) == 1 then\n"                     \
  /*   ours already: a retried call whose first reply was lost; the TTL is  */ \
  /*   extended, never shortened, the count (>= 1) stays (issue 43)         */ \
  "    extend(KEYS[1], lease)\n"                                               \
  "    redis.call('lrem', KEYS[2], 0, field)\n"                                \
  "    redis.call('zrem', KEYS[3], field)\n"                                   \
  "    return true\n"                                                          \
  "  end\n"                                                                    \
  "  return false\n"                                                           \
  "end\n"                                                                      \
  /* How long a waiter that failed may sleep before trying again. */          \
  "local function hint(now)\n"                                                 \
  "  local kd = kind_of(KEYS[1])\n"                                           \
  "  if kd ~= 'none' and kd ~= 'mutex' then return busy_ttl(KEYS[1]) end\n"   \
  "  local p = redis.call('pttl', KEYS[1])\n"                                  \
  "  if p >= -1 then return p end\n"                                           \
  "  local head = redis.call('lindex', KEYS[2], 0)\n"                          \
  "  local s = head and redis.call('zscore', KEYS[3], head)\n"                 \
  "  if s then return math.max(1, math.min(1000, tonumber(s) - now)) end\n"    \
  "  return 1\n"                                                               \
  "end\n"

static dlock__script g_acquire = {
    "fair_acquire",
    /* Waiting acquire. KEYS[5] this attempt's tombstone. ARGV[1] lease,
     * [2] field, [3] wait, [4] now (epoch ms), [5] hold count after this
     * acquire, [6] publish command. nil = held; -3 = our hold is gone; -4
     * a late copy (does nothing); else a wake-up hint (ms, -1 = none). On
     * failure the caller is enqueued (once) with deadline = (tail's
     * deadline, or the holder's PTTL from now) + wait. */
    FAIR_LUA_PRELUDE DLOCK__LUA_LATE(
        "KEYS[5]",
        "-4") "local now = tonumber(ARGV[4])\n"
              "local wait = tonumber(ARGV[3])\n"
              "if purge(now) > 0 then wake_new_head(ARGV[6], ARGV[2]) end\n"
              "local got = take(ARGV[2], ARGV[1], ARGV[5], wait, now)\n"
              "if got == true then return nil end\n"
              "if got == -3 then return -3 end\n"
              /* Join the queue, or keep our place alive: deadline = now + wait.
               */
              "local mine = redis.call('zscore', KEYS[3], ARGV[2])\n"
              "if not mine then\n"
              "  if redis.call('zadd', KEYS[3], now + wait, ARGV[2]) == 1 "
              "then\n"
              "    redis.call('rpush', KEYS[2], ARGV[2])\n"
              "  end\n"
              "elseif tonumber(mine) < now + wait then\n"
              "  redis.call('zadd', KEYS[3], now + wait, ARGV[2])\n"
              "end\n"
              "return hint(now)\n",
    {0}};

static dlock__script g_try = {
    "fair_try",
    /* Single attempt, never enqueues. KEYS[5] this attempt's tombstone.
     * ARGV[1] lease, [2] field, [3] now, [4] wait, [5] hold count after,
     * [6] publish command. Replies as fair_acquire. */
    FAIR_LUA_PRELUDE DLOCK__LUA_LATE(
        "KEYS[5]",
        "-4") "local now = tonumber(ARGV[3])\n"
              "if purge(now) > 0 then wake_new_head(ARGV[6], ARGV[2]) "
              "end\n"
              "local got = take(ARGV[2], ARGV[1], ARGV[5], "
              "tonumber(ARGV[4]), now)\n"
              "if got == true then return nil end\n"
              "if got == -3 then return -3 end\n"
              "return hint(now)\n",
    {0}};

static dlock__script g_cancel = {
    "fair_cancel",
    /* acquireFailed. ARGV[1] field, [2] wait, [3] publish command, [4] now
     * (epoch ms). Leaves the queue; the deadlines of the waiters behind
     * shrink by wait (not below now + wait, and never raised: a dead
     * waiter's deadline raised by every leaver in front of it kept the
     * queue blocked past the documented bound -- the simulator, issue 41).
     * Returns 1 if the caller holds
     * the lock after all, else 0. */
    FAIR_LUA_PRELUDE
    "local wait = tonumber(ARGV[2])\n"
    "local pos = redis.call('lpos', KEYS[2], ARGV[1])\n"
    "if pos then\n"
    "  shrink(redis.call('lrange', KEYS[2], pos + 1, -1), wait, "
    "tonumber(ARGV[4]))\n"
    "  redis.call('lrem', KEYS[2], 0, ARGV[1])\n"
    "end\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "wake_new_head(ARGV[3], ARGV[1])\n"
    "return redis.call('hexists', KEYS[1], ARGV[1])\n",
    {0}};

static dlock__script g_unlock = {
    "fair_unlock",
    /* ARGV[1] '0', [2] lease for remaining holds, [3] field, [4] now,
     * [5] publish command, [6] the hold count the client expects before
     * this unlock (N), [7] > 0: a committing copy (writes the tombstone,
     * PX [7]); KEYS[5] the unlock's tombstone (a copy that finds it is late
     * and changes nothing, final or partial: scripts.c's unlock). nil = not
     * owner (or expired), 0 = still held, 1 = released; the last release
     * publishes ARGV[1] on the head waiter's channel. Idempotent by state, as
     * the plain unlock (scripts.c): a count below N means a copy already ran; N
     * or more becomes N - 1. */
    FAIR_LUA_PRELUDE DLOCK__LUA_LATE("KEYS[5]", "(tonumber(ARGV[6]) > 1) and 0 "
                                                "or 1")
        DLOCK__LUA_COMMIT(
            "KEYS[5]",
            "ARGV[7]") "purge(tonumber(ARGV[4]))\n"
                       "if redis.call('exists', KEYS[1]) == 0 then\n"
                       "  local head = redis.call('lindex', KEYS[2], 0)\n"
                       "  if head then notify(ARGV[5], head) end\n"
                       "  return nil\n"
                       "end\n"
                       "local n = tonumber(redis.call('hget', KEYS[1], "
                       "ARGV[3]))\n"
                       "if not n then return nil end\n"
                       "local want = tonumber(ARGV[6])\n"
                       "if n < want then return 0 end\n"
                       "if want > 1 then\n"
                       "  redis.call('hset', KEYS[1], ARGV[3], want - 1)\n"
                       "  remaining_ttl(KEYS[1], ARGV[2])\n"
                       "  return 0\n"
                       "end\n"
                       "redis.call('del', KEYS[1])\n"
                       "local head = redis.call('lindex', KEYS[2], 0)\n"
                       "if head then notify(ARGV[5], head) end\n"
                       "return 1\n",
    {0}};

static dlock__script g_force = {
    "fair_force",
    /* ARGV[1] '0', [2] now, [3] publish command. 1 deleted, 0 none. */
    FAIR_LUA_PRELUDE DLOCK__LUA_FORCE_CHECK
    "purge(tonumber(ARGV[2]))\n"
    "if redis.call('del', KEYS[1]) == 1 then\n"
    "  local head = redis.call('lindex', KEYS[2], 0)\n"
    "  if head then notify(ARGV[3], head) end\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) {
  dlock__script_init(&g_acquire);
  dlock__script_init(&g_try);
  dlock__script_init(&g_cancel);
  dlock__script_init(&g_unlock);
  dlock__script_init(&g_force);
}

/* ---- helpers ------------------------------------------------------------- */

/* Wall clock, epoch ms: deadlines in the zset are compared with the `now`
 * of every client, Java ones included (System.currentTimeMillis()). */
static int64_t epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The four keys every fair script takes. */
typedef struct fair_keys {
  dlock__sb queue, timeout, channel, req;
  const char *keys[5];
  size_t klens[5];
} fair_keys;

static int fair_keys_init(dlock_mutex *m, fair_keys *k) {
  dlock__sb_init(&k->queue);
  dlock__sb_init(&k->timeout);
  dlock__sb_init(&k->channel);
  dlock__sb_init(&k->req);
  dlock__prefix_name(&k->queue, "redisson_lock_queue", m->name);
  dlock__prefix_name(&k->timeout, "redisson_lock_timeout", m->name);
  dlock__prefix_name(&k->channel, "redisson_lock__channel", m->name);
  k->keys[0] = m->name;
  k->klens[0] = m->name_len;
  k->keys[1] = k->queue.p;
  k->klens[1] = k->queue.len;
  k->keys[2] = k->timeout.p;
  k->klens[2] = k->timeout.len;
  k->keys[3] = k->channel.p;
  k->klens[3] = k->channel.len;
  k->keys[4] = NULL;
  k->klens[4] = 0;
  pthread_once(&g_once, init_scripts);
  if (k->queue.oom || k->timeout.oom || k->channel.oom)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  return 0;
}

static void fair_keys_free(fair_keys *k) {
  dlock__sb_free(&k->queue);
  dlock__sb_free(&k->timeout);
  dlock__sb_free(&k->channel);
  dlock__sb_free(&k->req);
}

/* fair_keys_init and KEYS[5], the key of request rid that binds the call
 * to it: its tombstone for an acquire (dlock__req_tomb_key), its unlock
 * latch for a release (dlock__unlock_latch_key), made by key_of. 0 or a
 * code (k freed on failure). */
static int fair_keys_init_req(dlock_mutex *m, fair_keys *k,
                              void (*key_of)(dlock__sb *, const char *,
                                             const char *),
                              const char *rid) {
  int rc = fair_keys_init(m, k);
  key_of(&k->req, m->name, rid);
  if (!rc && k->req.oom)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  if (rc) {
    fair_keys_free(k);
    return rc;
  }
  k->keys[4] = k->req.p;
  k->klens[4] = k->req.len;
  return 0;
}

/* The thread's last attempt was a reentrant one (target > 1): it never
 * enqueues, so a cancel after it must not report "held" (the hold it finds
 * is the older one, with its own count). */
static _Thread_local int tl_reentrant;

/* ---- ops ----------------------------------------------------------------- */

static void fair_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                          dlock__sb *grant) {
  (void)grant; /* no direct hand-over: the head's channel says "go" */
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(m->c, tid, field);
  dlock__prefix_name(channel, "redisson_lock__channel", m->name);
  dlock__sb_add(channel, ":", 1);
  dlock__sb_add(channel, field, fl);
}

static int fair_attempt(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                        int queue, int64_t wait_ms, int64_t *ttl,
                        uint64_t *token, const dlock__wait *w) {
  (void)token;
  fair_keys k;
  int rc = fair_keys_init_req(m, &k, dlock__req_tomb_key, w->rid);
  if (rc)
    return rc;
  (void)wait_ms; /* enforced by the wait loop; the queue uses FAIR_LIVE_MS */
  tl_reentrant = target > 1;
  const int64_t wait = FAIR_LIVE_MS;
  char field[DLOCK__FIELD_MAX], ls[24], ws[24], ns[24], ts[16];
  size_t fl = dlock__field(m->c, tid, field);
  int lsl = snprintf(ls, sizeof ls, "%lld", (long long)lease);
  int wsl = snprintf(ws, sizeof ws, "%lld", (long long)wait);
  int nsl = snprintf(ns, sizeof ns, "%lld", (long long)epoch_ms());
  int tsl = snprintf(ts, sizeof ts, "%d", target);
  const char *args[6] = {ls,
                         field,
                         queue ? ws : ns,
                         queue ? ns : ws,
                         ts,
                         dlock__publish_cmd(m->c)};
  size_t alens[6] = {(size_t)lsl,
                     fl,
                     (size_t)(queue ? wsl : nsl),
                     (size_t)(queue ? nsl : wsl),
                     (size_t)tsl,
                     strlen(dlock__publish_cmd(m->c))};
  redisReply *r = NULL;
  rc = dlock__eval(m->c, queue ? &g_acquire : &g_try, 5, k.keys, k.klens, 6,
                   args, alens, &r);
  fair_keys_free(&k);
  if (rc == 0 && !r)
    rc = dlock__fail(DLOCK_EPROTO, "no reply");
  if (rc == 0 && r && r->type == REDIS_REPLY_NIL) {
    freeReplyObject(r);
    return 1;
  }
  long long v = 0;
  if (rc == 0)
    rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  if (rc == 0 && v == -4)
    rc = dlock__late_answer("fair lock", m->name);
  if (rc == 0 && v == -3)
    rc = dlock__fail(DLOCK_ELOST,
                     "fair lock '%s': this thread's hold is gone (expired or "
                     "deleted) -- it was re-acquired in vain",
                     m->name);
  if (rc)
    return rc;
  *ttl = v;
  return 0;
}

static int fair_cancel(dlock_mutex *m, uint64_t tid, int64_t lease,
                       int64_t wait_ms, uint64_t *token, const dlock__wait *w) {
  (void)w;
  (void)lease;
  (void)token;
  (void)wait_ms;
  const int64_t wait = FAIR_LIVE_MS;
  if (tl_reentrant) {
    tl_reentrant = 0;
    return 0;
  }
  fair_keys k;
  int rc = fair_keys_init(m, &k);
  if (rc) {
    fair_keys_free(&k);
    return rc;
  }
  char field[DLOCK__FIELD_MAX], ws[24], ns[24];
  size_t fl = dlock__field(m->c, tid, field);
  int wsl = snprintf(ws, sizeof ws, "%lld", (long long)wait);
  int nsl = snprintf(ns, sizeof ns, "%lld", (long long)epoch_ms());
  const char *args[4] = {field, ws, dlock__publish_cmd(m->c), ns};
  size_t alens[4] = {fl, (size_t)wsl, strlen(dlock__publish_cmd(m->c)),
                     (size_t)nsl};
  redisReply *r = NULL;
  rc = dlock__eval(m->c, &g_cancel, 4, k.keys, k.klens, 4, args, alens, &r);
  fair_keys_free(&k);
  long long v = 0;
  rc = dlock__take_int(rc, r, &v, NULL);
  return rc ? rc : v == 1;
}

static int fair_release(dlock_mutex *m, uint64_t tid,
                        const dlock__eng_unlock *u) {
  dlock_client *c = m->c;
  fair_keys k;
  int rc = fair_keys_init_req(m, &k, dlock__unlock_latch_key, u->rid);
  if (rc)
    return rc;
  char field[DLOCK__FIELD_MAX], ls[24], ns[24], es[24], cs[24];
  size_t fl = dlock__field(c, tid, field);
  int lsl = snprintf(ls, sizeof ls, "%lld", (long long)u->lease);
  int nsl = snprintf(ns, sizeof ns, "%lld", (long long)epoch_ms());
  int esl = snprintf(es, sizeof es, "%d", u->expected);
  size_t csl =
      dlock__fmt_i64(cs, u->commit ? dlock__tombstone_ttl(&c->cfg) : 0);
  const char *args[7] = {"0", ls, field, ns, dlock__publish_cmd(m->c), es, cs};
  size_t alens[7] = {1,
                     (size_t)lsl,
                     fl,
                     (size_t)nsl,
                     strlen(dlock__publish_cmd(m->c)),
                     (size_t)esl,
                     csl};
  redisReply *r = NULL;
  rc = dlock__eval(c, &g_unlock, 5, k.keys, k.klens, 7, args, alens, &r);
  fair_keys_free(&k);
  if (rc || !r)
    return rc ? rc : dlock__fail(DLOCK_EPROTO, "no reply");
  if (r->type == REDIS_REPLY_NIL) {
    freeReplyObject(r);
    return DLOCK_ELOST;
  }
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  return rc ? rc : (v == 1 ? 1 : 0);
}

static int fair_force(dlock_mutex *m) {
  fair_keys k;
  int rc = fair_keys_init(m, &k);
  if (rc) {
    fair_keys_free(&k);
    return rc;
  }
  char ns[24];
  int nsl = snprintf(ns, sizeof ns, "%lld", (long long)epoch_ms());
  const char *args[3] = {"0", ns, dlock__publish_cmd(m->c)};
  size_t alens[3] = {1, (size_t)nsl, strlen(dlock__publish_cmd(m->c))};
  redisReply *r = NULL;
  rc = dlock__eval_once(m->c, &g_force, 4, k.keys, k.klens, 3, args, alens, &r);
  fair_keys_free(&k);
  long long v = 0;
  rc = dlock__take_int(rc, r, &v, NULL);
  return rc ? rc : (int)v;
}

const dlock__mutex_ops dlock__fair_ops = {
    "fair",         fair_attempt,     fair_release, fair_cancel, fair_channels,
    fair_force,     DLOCK__WAKE_LOCK, "",           1,           NULL,
    FAIR_REFRESH_MS};

int dlock_mutex_new_fair(dlock_client *c, const char *name, dlock_mutex **out) {
  return dlock__mutex_create(c, name, &dlock__fair_ops, out);
}
