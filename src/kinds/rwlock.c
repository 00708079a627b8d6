/*
 * rwlock.c -- the read-write lock, Redisson RReadWriteLock layout (see
 * docs/rwlock.md).
 *
 * DATA (exactly Redisson's):
 *   hash <name>: field "mode" = "read" | "write";
 *                field "<uuid>:<tid>"       = that thread's read hold count;
 *                field "<uuid>:<tid>:write" = the writer's hold count.
 *   string {name}:<uuid>:<tid>:rwlock_timeout:<n> = 1, TTL = lease of read
 *                hold n (n = 1..count), so a dead reader's holds age out.
 *   channel redisson_rwlock:{name}: "1" after a write release (every waiter
 *                retries), "0" after the last read release (one retries).
 *
 * HOW IT IS BUILT. A dlock_rwlock is two internal mutex objects on the same
 * name: one with the read ops, one with the write ops (field suffix
 * ":write"). Both reuse the shared wait loop, hold records and watchdog of
 * mutex.c: write holds are renewed by the batched renewal (it checks the
 * ":write" field); read holds by the `renew` hook below, which extends
 * every timeout key of the thread and keeps the hash alive. On top, the
 * rwlock keeps per thread the order of its holds (a small stack of 'R' and
 * 'W'), because dlock_rwlock_unlock has no mode argument: it releases the
 * most recent hold (LIFO).
 *
 * RULES. Many readers or one writer. Both reentrant. The writer may also
 * take read holds (write->read downgrade; dlock_rwlock_downgrade swaps its
 * top write hold for a read hold atomically w.r.t. other writers). A reader
 * asking for the write lock is refused at once with DLOCK_EDEADLK: two
 * readers doing so would wait for each other forever (Redisson refuses
 * upgrades too, by making the write attempt fail).
 *
 * dlock differences from Redisson's scripts (data effects compatible):
 *   - acquire writes the hold count the client expects (idempotent retry)
 *     and reports a reentrant acquire whose hold vanished as DLOCK_ELOST;
 *   - a write acquire by a thread holding a read hold on the name replies
 *     "deadlock" instead of the holder's TTL (caught even across objects);
 *   - the last write release that leaves the writer's own read holds
 *     (downgrade) publishes "1" so that waiting readers join at once;
 *   - a read release never shortens the hash TTL below the writer's lease,
 *     and the read renewal never shortens a TTL (another reader's, or a
 *     fixed lease of this thread's: it only extends, as every renewal);
 *   - a reentrant read acquire extends the thread's earlier timeout keys
 *     to its lease too: the client keeps one local deadline per thread
 *     and name (the latest hold's), so an earlier hold with a shorter
 *     lease must not die before it (a partial unlock deletes only the
 *     top hold's key; another reader's unlock then found no live key of
 *     the thread and deleted the lock under it -- found by make sim).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* ---- scripts ------------------------------------------------------------- */

/* The start of both acquire scripts (n = the hold count after the
 * acquire): a lock held by another kind of lock (a plain, fair or fenced
 * mutex, a semaphore) is taken, never rewritten (issue 25.6) -- its PTTL
 * for a first hold, else -3 (our hold is gone); else `mode` is the lock's
 * (nil: free). */
#define RW_KIND_AND_MODE                                                       \
  "local kd = kind_of(KEYS[1])\n"                                              \
  "if kd ~= 'none' and kd ~= 'rwlock' then\n"                                  \
  "  if n ~= 1 then return -3 end\n"                                           \
  "  return busy_ttl(KEYS[1])\n"                                               \
  "end\n"                                                                      \
  "local mode = redis.call('hget', KEYS[1], 'mode')\n"

/* any_live(prefix, c): whether any of a thread's read timeout keys
 * prefix:1..c still exists -- a count without one is no hold (both the
 * acquire and the renewal ask; found by make sim). */
#define RW_ANY_LIVE                                                            \
  "local function any_live(prefix, c)\n"                                       \
  "  for i = c, 1, -1 do\n"                                                    \
  "    if redis.call('exists', prefix .. ':' .. i) == 1 then return true "     \
  "end\n"                                                                      \
  "  end\n"                                                                    \
  "  return false\n"                                                           \
  "end\n"

static dlock__script g_rd_acquire = {
    "rw_read_acquire",
    /* KEYS[1] lock, KEYS[2] timeout prefix {name}:<uuid>:<tid>:rwlock_timeout,
     * KEYS[3] this attempt's tombstone. ARGV[1] lease, [2] read field, [3]
     * write field of the same thread, [4] hold count after this acquire.
     * nil = held; -3 = our hold is gone; -4 = a late copy (does nothing);
     * else the hash PTTL. */
    DLOCK__LUA_TTL DLOCK__LUA_KIND RW_ANY_LIVE DLOCK__LUA_LATE(
        "KEYS[3]",
        "-4") "local n = tonumber(ARGV[4])\n" RW_KIND_AND_MODE
              "if not mode then\n"
              "  if n ~= 1 then return -3 end\n"
              "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
              "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
              "  pexpire_new(KEYS[1], ARGV[1])\n"
              "  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])\n"
              "  return nil\n"
              "end\n"
              "if mode == 'read' or (mode == 'write' and "
              "redis.call('hexists', KEYS[1], ARGV[3]) == 1) then\n"
              "  local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"
              /* a count whose holds all died on the server (their timeout
               * keys expired -- the thread paused past its leases, its
               * hold reported lost -- while other readers kept the hash)
               * is no hold: a first hold is written afresh, a reentry
               * finds its hold gone. Else the next hold was built on the
               * dead count, its own earlier key missing (found by make
               * sim) */
              "  if c and not any_live(KEYS[2], c) then\n"
              "    redis.call('hdel', KEYS[1], ARGV[2])\n"
              "    c = nil\n"
              "  end\n"
              "  if n > 1 and not c then\n"
              "    return -3\n"
              "  end\n"
              /* a reentry whose earlier hold died on the server (its
               * timeout key expired: the answer of this acquire came
               * late) finds it gone, as the mutex does: the count field
               * outlives the key, and a later unlock would delete the
               * lock under the hold this one is built on. Keys below
               * n - 1 live at least as long (extended below) */
              "  if n > 1 and (not c or c < n) and redis.call('exists', "
              "KEYS[2] .. ':' .. (n - 1)) == 0 then\n"
              "    return -3\n"
              "  end\n"
              /* the count only rises, and a timeout key's TTL only grows (issue
               * 43: never below what a live hold needs) */
              "  if not c or c < n then redis.call('hset', KEYS[1], ARGV[2], "
              "n) end\n"
              "  local tk = KEYS[2] .. ':' .. n\n"
              "  if redis.call('pttl', tk) < tonumber(ARGV[1]) then\n"
              "    redis.call('set', tk, 1, 'px', ARGV[1])\n"
              "  end\n"
              /* the thread's earlier holds live at least as long: the
               * client keeps one local deadline for all its holds (the
               * latest), and a release of this one deletes its key -- an
               * earlier hold with a shorter lease must not be found dead
               * by another reader's unlock while the thread still holds
               * (found by the simulator: a writer got in) */
              "  for i = n - 1, 1, -1 do extend(KEYS[2] .. ':' .. i, ARGV[1]) "
              "end\n"
              "  local p = redis.call('pttl', KEYS[1])\n"
              "  redis.call('pexpire', KEYS[1], math.max(p, "
              "tonumber(ARGV[1])))\n"
              "  return nil\n"
              "end\n"
              "if n > 1 then return -3 end\n"
              "return redis.call('pttl', KEYS[1])\n",
    {0}};

static dlock__script g_rd_unlock = {
    "rw_read_unlock",
    /* KEYS[1] lock, [2] channel, [3] timeout prefix of the caller,
     * [4] key prefix {name}. ARGV[1] '0', [2] read field, [3] publish
     * command, [4] the read hold count the client expects before this
     * unlock (N), [5] > 0: a committing copy (writes the tombstone, PX
     * [5]); KEYS[5] the unlock's tombstone (a copy that finds it is late and
     * changes nothing: scripts.c's unlock). nil = not a reader, 0 = the
     * lock stays held (by us or others), 1 = the lock was freed. Idempotent by
     * state (scripts.c): a count below N means a copy of this unlock already
     * ran (nothing changes); N or more becomes N - 1, and the per-hold timeout
     * keys above N - 1 go. The hash TTL becomes the longest remaining read
     * hold; when no live hold remains (other readers' timeout keys
     * expired: dead clients) it is deleted. */
    DLOCK__LUA_LATE("KEYS[5]", "0") DLOCK__LUA_COMMIT(
        "KEYS[5]",
        "ARGV[5]") "local mode = redis.call('hget', KEYS[1], 'mode')\n"
                   "if not mode then\n"
                   "  redis.call(ARGV[3], KEYS[2], ARGV[1])\n"
                   "  return nil\n"
                   "end\n"
                   "local n = tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"
                   "if not n then return nil end\n"
                   "local want = tonumber(ARGV[4])\n"
                   "if n < want then return 0 end\n"
                   "local left = want - 1\n"
                   "if left == 0 then\n"
                   "  redis.call('hdel', KEYS[1], ARGV[2])\n"
                   "else\n"
                   "  redis.call('hset', KEYS[1], ARGV[2], left)\n"
                   "end\n"
                   "for i = n, want, -1 do redis.call('del', KEYS[3] .. ':' .. "
                   "i) end\n"
                   "if redis.call('hlen', KEYS[1]) > 1 then\n"
                   "  local maxt = -3\n"
                   "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"
                   "    local c = tonumber(redis.call('hget', KEYS[1], f))\n"
                   "    if c then\n"
                   "      for i = c, 1, -1 do\n"
                   "        local t = redis.call('pttl', KEYS[4] .. ':' .. f "
                   ".. "
                   "':rwlock_timeout:' .. i)\n"
                   "        if t > maxt then maxt = t end\n"
                   "      end\n"
                   "    end\n"
                   "  end\n"
                   "  if maxt > 0 then\n"
                   "    if mode == 'write' then\n"
                   "      maxt = math.max(maxt, redis.call('pttl', KEYS[1]))\n"
                   "    end\n"
                   "    redis.call('pexpire', KEYS[1], maxt)\n"
                   "    return 0\n"
                   "  end\n"
                   "  if mode == 'write' then return 0 end\n"
                   "end\n"
                   "redis.call('del', KEYS[1])\n"
                   "redis.call(ARGV[3], KEYS[2], ARGV[1])\n"
                   "return 1\n",
    {0}};

static dlock__script g_rd_renew = {
    "rw_read_renew",
    /* KEYS[1] lock, KEYS[2] timeout prefix. ARGV[1] lease, [2] read field.
     * 1 renewed (every timeout key of the thread, and the hash, at least to
     * the lease), 0 the thread holds no read lock (no count, or no live
     * timeout key under it). A TTL only grows: the
     * renewal of a hold that ended (sent before its unlock, run after the
     * thread's next hold of the name began: same field, same count) must
     * not cut that hold's longer fixed lease -- nor the fixed lease of a
     * hold under a renewed reentry. */
    DLOCK__LUA_TTL RW_ANY_LIVE "local c = tonumber(redis.call('hget', KEYS[1], "
                               "ARGV[2]))\n"
                               "if not c then return 0 end\n"
                               /* a count whose timeout keys all expired is no
                                * hold (the field outlives them while other
                                * readers keep the hash): 0, and the hold is
                                * lost -- "renewed" would raise the local
                                * deadline of a dead hold (found by make sim) */
                               "if not any_live(KEYS[2], c) then return 0 end\n"
                               "for i = c, 1, -1 do\n"
                               "  extend(KEYS[2] .. ':' .. i, ARGV[1])\n"
                               "end\n"
                               "extend(KEYS[1], ARGV[1])\n"
                               "return 1\n",
    {0}};

static dlock__script g_wr_acquire = {
    "rw_write_acquire",
    /* KEYS[1] lock, KEYS[2] this attempt's tombstone. ARGV[1] lease, [2]
     * write field, [3] hold count after this acquire, [4] the same thread's
     * read field. nil = held; -3 = our hold is gone; -4 = we hold a read
     * lock (upgrade refused); -5 = a late copy (does nothing); else the
     * hash PTTL. Reentry adds the lease to the remaining TTL (Redisson); a
     * first hold found ours already (a re-sent copy) only extends it. */
    DLOCK__LUA_TTL DLOCK__LUA_KIND DLOCK__LUA_LATE(
        "KEYS[2]",
        "-5") "local n = tonumber(ARGV[3])\n" RW_KIND_AND_MODE
              "if not mode then\n"
              "  if n ~= 1 then return -3 end\n"
              "  redis.call('hset', KEYS[1], 'mode', 'write')\n"
              "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
              "  pexpire_new(KEYS[1], ARGV[1])\n"
              "  return nil\n"
              "end\n"
              "local c = mode == 'write' and "
              "tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"
              "if c then\n"
              "  if c < n then\n"
              "    redis.call('hset', KEYS[1], ARGV[2], n)\n"
              "    redis.call('pexpire', KEYS[1], "
              "math.max(0, redis.call('pttl', KEYS[1])) + tonumber(ARGV[1]))\n"
              "  else\n"
              "    extend(KEYS[1], ARGV[1])\n"
              "  end\n"
              "  return nil\n"
              "end\n"
              "if n > 1 then return -3 end\n"
              "if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[4]) "
              "== 1 "
              "then\n"
              "  return -4\n"
              "end\n"
              "return redis.call('pttl', KEYS[1])\n",
    {0}};

static dlock__script g_wr_unlock = {
    "rw_write_unlock",
    /* KEYS[1] lock, [2] channel. ARGV[1] '1', [2] lease for the remaining
     * holds, [3] write field, [4] publish command, [5] the write hold count
     * the client expects before this unlock (N). nil = not the writer, 0 =
     * still held, 1 = released (the hash is deleted, or switched to mode
     * read when the writer keeps read holds). Idempotent by state
     * (scripts.c): below N a copy already ran; N or more becomes N - 1.
     * KEYS[3] the unlock's tombstone (a copy that finds it is late and
     * changes nothing: scripts.c's unlock); ARGV[6] > 0: a committing copy
     * (writes the tombstone, PX ARGV[6]). */
    DLOCK__LUA_TTL DLOCK__LUA_LATE("KEYS[3]", "(tonumber(ARGV[5]) > 1) and 0 "
                                              "or 1")
        DLOCK__LUA_COMMIT(
            "KEYS[3]",
            "ARGV[6]") "local mode = redis.call('hget', KEYS[1], 'mode')\n"
                       "if not mode then\n"
                       "  redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
                       "  return nil\n"
                       "end\n"
                       "if mode ~= 'write' then return nil end\n"
                       "local n = tonumber(redis.call('hget', KEYS[1], "
                       "ARGV[3]))\n"
                       "if not n then return nil end\n"
                       "local want = tonumber(ARGV[5])\n"
                       "if n < want then return 0 end\n"
                       "if want > 1 then\n"
                       "  redis.call('hset', KEYS[1], ARGV[3], want - 1)\n"
                       "  remaining_ttl(KEYS[1], ARGV[2])\n"
                       "  return 0\n"
                       "end\n"
                       "redis.call('hdel', KEYS[1], ARGV[3])\n"
                       "if redis.call('hlen', KEYS[1]) == 1 then\n"
                       "  redis.call('del', KEYS[1])\n"
                       "else\n"
                       "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
                       "end\n"
                       "redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
                       "return 1\n",
    {0}};

static dlock__script g_force = {
    "rw_force",
    /* KEYS[1] lock, KEYS[2] channel. ARGV[1] mode to delete ('read' or
     * 'write'), [2] message, [3] publish command. 1 deleted, 0 not in that
     * mode. */
    "if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call(ARGV[3], KEYS[2], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) {
  dlock__script_init(&g_rd_acquire);
  dlock__script_init(&g_rd_unlock);
  dlock__script_init(&g_rd_renew);
  dlock__script_init(&g_wr_acquire);
  dlock__script_init(&g_wr_unlock);
  dlock__script_init(&g_force);
}

/* ---- helpers ------------------------------------------------------------- */

/* "{name}:<uuid>:<tid>:rwlock_timeout" (RedissonReadLock's prefix). */
static void timeout_prefix_of(const char *name, const char *field, size_t fl,
                              dlock__sb *b) {
  dlock__sb_init(b);
  char tmp[DLOCK__FIELD_MAX];
  memcpy(tmp, field, fl);
  tmp[fl] = '\0';
  dlock__suffix_name(b, name, tmp);
  dlock__sb_adds(b, ":rwlock_timeout");
}

static void timeout_prefix(dlock_mutex *m, const char *field, size_t fl,
                           dlock__sb *b) {
  timeout_prefix_of(m->name, field, fl, b);
}

static void rw_channel(dlock_mutex *m, dlock__sb *b) {
  dlock__prefix_name(b, "redisson_rwlock", m->name);
}

static int int_reply(dlock_mutex *m, int rc, redisReply *r, long long *v,
                     int *nil) {
  *v = 0;
  int sent_ok = rc == 0 && r;
  rc = dlock__take_int(rc, r, v, nil);
  if (rc && sent_ok)
    return dlock__fail(rc, "read-write lock '%s': unexpected script reply",
                       m->name);
  return rc;
}

/* An unlock script's answer: 1 released, 0 holds remain, DLOCK_ELOST (nil:
 * not ours), or a negative code. */
static int unlock_answer(dlock_mutex *m, int rc, redisReply *r) {
  long long v;
  int nil;
  if ((rc = int_reply(m, rc, r, &v, &nil)) != 0)
    return rc;
  if (nil)
    return DLOCK_ELOST;
  return v == 1 ? 1 : 0;
}

static int lost_err(dlock_mutex *m, const char *kind) {
  return dlock__fail(DLOCK_ELOST,
                     "read-write lock '%s': this thread's %s hold is gone "
                     "(expired or deleted) -- it was re-acquired in vain",
                     m->name, kind);
}

/* An acquire script's answer: nil = held (1); -3 = a reentrant attempt
 * found the hold gone (DLOCK_ELOST); another value (*v) is the holder's
 * TTL (0, *ttl set) or a side's own code (< -2, 0 returned, *ttl untouched). */
static int attempt_answer(dlock_mutex *m, int rc, redisReply *r,
                          const char *side, long long *v, int64_t *ttl) {
  int nil;
  if ((rc = int_reply(m, rc, r, v, &nil)) != 0)
    return rc;
  if (nil)
    return 1;
  if (*v == -3)
    return lost_err(m, side);
  if (*v >= -2)
    *ttl = *v;
  return 0;
}

/* The arguments both sides' acquire scripts take: the thread's read and
 * write fields, the lease and the target hold count as text. */
typedef struct rw_args {
  char field[DLOCK__FIELD_MAX], wfield[DLOCK__FIELD_MAX], ls[24], ts[24];
  size_t fl, lsl, tsl;
} rw_args;

static void rw_args_init(dlock_mutex *m, uint64_t tid, int64_t lease,
                         int target, rw_args *a) {
  pthread_once(&g_once, init_scripts);
  a->fl = dlock__field(m->c, tid, a->field);
  memcpy(a->wfield, a->field, a->fl);
  memcpy(a->wfield + a->fl, ":write", 7);
  a->lsl = dlock__fmt_i64(a->ls, lease);
  a->tsl = dlock__fmt_i64(a->ts, target);
}

/* ---- read ops ------------------------------------------------------------ */

static void rd_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                        dlock__sb *grant) {
  (void)tid;
  (void)grant;
  rw_channel(m, channel);
}

static int rd_attempt(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                      int queue, int64_t wait_ms, int64_t *ttl, uint64_t *token,
                      const dlock__wait *w) {
  (void)queue, (void)wait_ms, (void)token;
  rw_args a;
  rw_args_init(m, tid, lease, target, &a);
  dlock__sb tp, tomb;
  dlock__sb_init(&tomb);
  timeout_prefix(m, a.field, a.fl, &tp);
  dlock__req_tomb_key(&tomb, m->name, w->rid);
  if (tp.oom || tomb.oom) {
    dlock__sb_free(&tp);
    dlock__sb_free(&tomb);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  const char *keys[3] = {m->name, tp.p, tomb.p};
  size_t klens[3] = {m->name_len, tp.len, tomb.len};
  const char *args[4] = {a.ls, a.field, a.wfield, a.ts};
  size_t alens[4] = {a.lsl, a.fl, a.fl + 6, a.tsl};
  redisReply *r = NULL;
  int rc = dlock__eval(m->c, &g_rd_acquire, 3, keys, klens, 4, args, alens, &r);
  dlock__sb_free(&tp);
  dlock__sb_free(&tomb);
  long long v;
  rc = attempt_answer(m, rc, r, "read", &v, ttl);
  return rc == 0 && v == -4 ? dlock__late_answer("read-write lock", m->name)
                            : rc;
}

static int rd_release(dlock_mutex *m, uint64_t tid,
                      const dlock__eng_unlock *u) {
  /* (u->lease unused: the hash TTL follows the remaining read holds) */
  dlock_client *c = m->c;
  pthread_once(&g_once, init_scripts);
  char field[DLOCK__FIELD_MAX], es[24], cs[24];
  size_t fl = dlock__field(c, tid, field);
  dlock__sb ch, tp, kp, tomb;
  dlock__sb_init(&ch);
  dlock__sb_init(&kp);
  dlock__sb_init(&tomb);
  dlock__unlock_latch_key(&tomb, m->name, u->rid);
  size_t csl =
      dlock__fmt_i64(cs, u->commit ? dlock__tombstone_ttl(&c->cfg) : 0);
  rw_channel(m, &ch);
  timeout_prefix(m, field, fl, &tp);
  if (strchr(m->name, '{')) {
    dlock__sb_adds(&kp, m->name);
  } else {
    dlock__sb_add(&kp, "{", 1);
    dlock__sb_adds(&kp, m->name);
    dlock__sb_add(&kp, "}", 1);
  }
  int esl = snprintf(es, sizeof es, "%d", u->expected);
  const char *keys[5] = {m->name, ch.p, tp.p, kp.p, tomb.p};
  size_t klens[5] = {m->name_len, ch.len, tp.len, kp.len, tomb.len};
  const char *args[5] = {"0", field, dlock__publish_cmd(m->c), es, cs};
  size_t alens[5] = {1, fl, strlen(dlock__publish_cmd(m->c)), (size_t)esl, csl};
  redisReply *r = NULL;
  int rc =
      ch.oom || tp.oom || kp.oom || tomb.oom
          ? dlock__fail(DLOCK_ENOMEM, "out of memory")
          : dlock__eval(c, &g_rd_unlock, 5, keys, klens, 5, args, alens, &r);
  dlock__sb_free(&ch);
  dlock__sb_free(&tp);
  dlock__sb_free(&kp);
  dlock__sb_free(&tomb);
  return unlock_answer(m, rc, r);
}

static int rd_renew(dlock_client *c, const char *name, size_t name_len,
                    uint64_t tid, int count) {
  (void)count; /* the server's count is authoritative */
  pthread_once(&g_once, init_scripts);
  char field[DLOCK__FIELD_MAX], ls[24];
  size_t fl = dlock__field(c, tid, field);
  dlock__sb tp;
  timeout_prefix_of(name, field, fl, &tp);
  if (tp.oom) {
    dlock__sb_free(&tp);
    return DLOCK_ENOMEM;
  }
  int lsl = snprintf(ls, sizeof ls, "%d", c->cfg.watchdog_timeout_ms);
  const char *keys[2] = {name, tp.p};
  size_t klens[2] = {name_len, tp.len};
  const char *args[2] = {ls, field};
  size_t alens[2] = {(size_t)lsl, fl};
  redisReply *r = NULL;
  /* No WAIT: a renewal confirms nothing new, and the watchdog renews the
   * read holds one after another -- a WAIT each, sitting out
   * sync_timeout_ms while replicas lag, starved them all (issue 25.7). */
  static const dlock__send_how how = {0, 1, 0};
  int rc =
      dlock__eval_how(c, &g_rd_renew, 2, keys, klens, 2, args, alens, &how, &r);
  dlock__sb_free(&tp);
  if (rc || !r) {
    freeReplyObject(r);
    return rc ? rc : DLOCK_EPROTO;
  }
  long long v = 0;
  int nil = r->type == REDIS_REPLY_NIL;
  rc = nil ? 0 : dlock__reply_int(r, &v);
  freeReplyObject(r);
  if (rc)
    return rc;
  return !nil && v == 1 ? 1 : 0;
}

static int force_mode(dlock_mutex *m, const char *mode, const char *msg) {
  pthread_once(&g_once, init_scripts);
  dlock__sb ch;
  dlock__sb_init(&ch);
  rw_channel(m, &ch);
  const char *keys[2] = {m->name, ch.p};
  size_t klens[2] = {m->name_len, ch.len};
  const char *args[3] = {mode, msg, dlock__publish_cmd(m->c)};
  redisReply *r = NULL;
  int rc = ch.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                  : dlock__eval_once(m->c, &g_force, 2, keys, klens, 3, args,
                                     NULL, &r);
  dlock__sb_free(&ch);
  long long v;
  int nil;
  if ((rc = int_reply(m, rc, r, &v, &nil)) != 0)
    return rc;
  return v == 1;
}

static int rd_force(dlock_mutex *m) { return force_mode(m, "read", "0"); }

/* ---- write ops ----------------------------------------------------------- */

static int wr_attempt(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                      int queue, int64_t wait_ms, int64_t *ttl, uint64_t *token,
                      const dlock__wait *w) {
  (void)queue, (void)wait_ms, (void)token;
  rw_args a;
  rw_args_init(m, tid, lease, target, &a);
  dlock__sb tomb;
  dlock__sb_init(&tomb);
  dlock__req_tomb_key(&tomb, m->name, w->rid);
  const char *keys[2] = {m->name, tomb.p};
  size_t klens[2] = {m->name_len, tomb.len};
  const char *args[4] = {a.ls, a.wfield, a.ts, a.field};
  size_t alens[4] = {a.lsl, a.fl + 6, a.tsl, a.fl};
  redisReply *r = NULL;
  int rc = tomb.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                    : dlock__eval(m->c, &g_wr_acquire, 2, keys, klens, 4, args,
                                  alens, &r);
  dlock__sb_free(&tomb);
  long long v;
  if ((rc = attempt_answer(m, rc, r, "write", &v, ttl)) != 0)
    return rc;
  if (v == -5)
    return dlock__late_answer("read-write lock", m->name);
  if (v != -4)
    return rc;
  return dlock__fail(DLOCK_EDEADLK,
                     "read-write lock '%s': this thread holds a read lock "
                     "on it; upgrading to a write lock is refused (it "
                     "could wait forever) -- release the read hold first",
                     m->name);
}

static int wr_release(dlock_mutex *m, uint64_t tid,
                      const dlock__eng_unlock *u) {
  dlock_client *c = m->c;
  pthread_once(&g_once, init_scripts);
  char field[DLOCK__FIELD_MAX], ls[24], es[24], cs[24];
  size_t fl = dlock__field(c, tid, field);
  memcpy(field + fl, ":write", 7);
  fl += 6;
  dlock__sb ch, tomb;
  dlock__sb_init(&ch);
  dlock__sb_init(&tomb);
  rw_channel(m, &ch);
  dlock__unlock_latch_key(&tomb, m->name, u->rid);
  int lsl = snprintf(ls, sizeof ls, "%lld", (long long)u->lease);
  int esl = snprintf(es, sizeof es, "%d", u->expected);
  size_t csl =
      dlock__fmt_i64(cs, u->commit ? dlock__tombstone_ttl(&c->cfg) : 0);
  const char *keys[3] = {m->name, ch.p, tomb.p};
  size_t klens[3] = {m->name_len, ch.len, tomb.len};
  const char *args[6] = {"1", ls, field, dlock__publish_cmd(m->c), es, cs};
  size_t alens[6] = {
      1, (size_t)lsl, fl, strlen(dlock__publish_cmd(m->c)), (size_t)esl, csl};
  redisReply *r = NULL;
  int rc = ch.oom || tomb.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                              : dlock__eval(c, &g_wr_unlock, 3, keys, klens, 6,
                                            args, alens, &r);
  dlock__sb_free(&ch);
  dlock__sb_free(&tomb);
  return unlock_answer(m, rc, r);
}

static int wr_force(dlock_mutex *m) { return force_mode(m, "write", "1"); }

static const dlock__mutex_ops rd_ops = {
    "rwlock-read", rd_attempt,       rd_release, NULL, rd_channels,
    rd_force,      DLOCK__WAKE_LOCK, "",         0,    rd_renew};

static const dlock__mutex_ops wr_ops = {
    "rwlock-write", wr_attempt,       wr_release, NULL, rd_channels,
    wr_force,       DLOCK__WAKE_LOCK, ":write",   0,    NULL};

/* ---- the rwlock object ----------------------------------------------------
 * Per thread: the kinds of its holds in acquisition order ('R' / 'W'). A
 * thread's record lives while it holds something through this object: it
 * is dropped when its last hold goes (released or lost), so the list is as
 * long as the number of threads holding the lock now (issue 26: 60k
 * short-lived threads left 60k records, each lookup walked them all). Only
 * the thread itself changes or drops its record. */

struct dlock_rwlock {
  dlock_client *c;
  dlock_mutex *rd, *wr;
  pthread_mutex_t mu;
  dlock__hold *stacks; /* per thread: modes of its holds, in order */
};

static dlock__hold *find_stack(dlock_rwlock *rw, uint64_t tid, int create) {
  return dlock__holdlist_find(&rw->stacks, tid, create);
}

/* Drops the thread's record when it holds nothing any more (rw->mu held). */
static void prune(dlock_rwlock *rw, dlock__hold *s) {
  if (s && s->nmodes == 0)
    dlock__holdlist_drop(&rw->stacks, s);
}

/* Records a new hold of kind (rw->mu held). */
static int push_kind(dlock_rwlock *rw, uint64_t tid, char kind) {
  dlock__hold *s = find_stack(rw, tid, 1);
  int rc = s ? dlock__hold_push_mode(s, kind) : DLOCK_ENOMEM;
  if (rc)
    prune(rw, s);
  return rc;
}

/* Forgets every hold of kind (the mutex layer dropped them: lost). */
static void drop_kind(dlock_rwlock *rw, uint64_t tid, char kind) {
  dlock__hold *s = find_stack(rw, tid, 0);
  if (!s)
    return;
  size_t j = 0;
  for (size_t i = 0; i < s->nmodes; i++)
    if (s->modes[i] != kind)
      s->modes[j++] = s->modes[i];
  s->nmodes = j;
  prune(rw, s);
}

static int count_kind(const dlock__hold *s, char kind) {
  int n = 0;
  for (size_t i = 0; s && i < s->nmodes; i++)
    n += s->modes[i] == kind;
  return n;
}

int dlock_rwlock_new(dlock_client *c, const char *name, dlock_rwlock **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  dlock_rwlock *rw = dlock__calloc(1, sizeof *rw);
  if (!rw)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  int rc = dlock__mutex_create(c, name, &rd_ops, &rw->rd);
  if (rc == 0)
    rc = dlock__mutex_create(c, name, &wr_ops, &rw->wr);
  if (rc == 0 && pthread_mutex_init(&rw->mu, NULL) != 0)
    rc = dlock__fail(DLOCK_ENOMEM, "cannot create a mutex");
  if (rc) {
    dlock_mutex_free(rw->rd);
    dlock_mutex_free(rw->wr);
    free(rw);
    return rc;
  }
  rw->c = c;
  *out = rw;
  return 0;
}

void dlock_rwlock_free(dlock_rwlock *rw) {
  if (!rw)
    return;
  dlock_mutex_free(rw->rd);
  dlock_mutex_free(rw->wr);
  dlock__holdlist_free(&rw->stacks);
  pthread_mutex_destroy(&rw->mu);
  free(rw);
}

/* Acquires through the read or write mutex and records the hold. */
static int acquire(dlock_rwlock *rw, char kind, long long wait_ms,
                   long long lease_ms) {
  dlock__clear_error();
  if (!rw)
    return dlock__fail(DLOCK_EINVAL, "rwlock is NULL");
  const uint64_t tid = dlock__tid();
  if (kind == 'W') {
    dlock__mu_lock(&rw->mu);
    dlock__hold *s = find_stack(rw, tid, 0);
    int reads = count_kind(s, 'R'), writes = count_kind(s, 'W');
    dlock__mu_unlock(&rw->mu);
    if (reads > 0 && writes == 0)
      return dlock__fail(DLOCK_EDEADLK,
                         "read-write lock '%s': this thread holds %d read "
                         "hold(s); upgrading to a write lock is refused (two "
                         "readers upgrading would wait for each other "
                         "forever) -- release the read holds first",
                         rw->rd->name, reads);
  }
  dlock_mutex *m = kind == 'R' ? rw->rd : rw->wr;
  int rc = dlock__mutex_acquire(m, wait_ms, lease_ms);
  dlock__mu_lock(&rw->mu);
  if (rc == 0 && push_kind(rw, tid, kind) != 0) {
    dlock__mu_unlock(&rw->mu);
    /* Cannot record it: give it back rather than hold it untracked. */
    dlock__mutex_release(m);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (rc == DLOCK_ELOST)
    drop_kind(rw, tid, kind);
  dlock__mu_unlock(&rw->mu);
  return rc;
}

int dlock_rwlock_rdlock(dlock_rwlock *rw) { return acquire(rw, 'R', -1, -1); }
int dlock_rwlock_tryrdlock(dlock_rwlock *rw) { return acquire(rw, 'R', 0, -1); }
int dlock_rwlock_timedrdlock(dlock_rwlock *rw, long long wait_ms,
                             long long lease_ms) {
  return acquire(rw, 'R', wait_ms, lease_ms);
}
int dlock_rwlock_wrlock(dlock_rwlock *rw) { return acquire(rw, 'W', -1, -1); }
int dlock_rwlock_trywrlock(dlock_rwlock *rw) { return acquire(rw, 'W', 0, -1); }
int dlock_rwlock_timedwrlock(dlock_rwlock *rw, long long wait_ms,
                             long long lease_ms) {
  return acquire(rw, 'W', wait_ms, lease_ms);
}

/* Releases one hold of kind and updates the stack: the top entry of that
 * kind when it is gone, every entry of it when the holds were lost. */
static int release_kind(dlock_rwlock *rw, uint64_t tid, char kind) {
  dlock_mutex *m = kind == 'R' ? rw->rd : rw->wr;
  int rc = dlock__mutex_release(m);
  dlock__mu_lock(&rw->mu);
  dlock__hold *s = find_stack(rw, tid, 0);
  if (rc == 0 && s) {
    for (size_t i = s->nmodes; i-- > 0;)
      if (s->modes[i] == kind) {
        memmove(s->modes + i, s->modes + i + 1, s->nmodes - i - 1);
        s->nmodes--;
        break;
      }
    prune(rw, s);
  } else if (rc == DLOCK_ELOST || rc == DLOCK_EPERM) {
    drop_kind(rw, tid, kind);
  }
  dlock__mu_unlock(&rw->mu);
  return rc;
}

int dlock_rwlock_unlock(dlock_rwlock *rw) {
  dlock__clear_error();
  if (!rw)
    return dlock__fail(DLOCK_EINVAL, "rwlock is NULL");
  const uint64_t tid = dlock__tid();
  dlock__mu_lock(&rw->mu);
  dlock__hold *s = find_stack(rw, tid, 0);
  char kind = 0;
  if (s && s->nmodes)
    kind = s->modes[s->nmodes - 1];
  dlock__mu_unlock(&rw->mu);
  if (!kind)
    return dlock__fail(DLOCK_EPERM,
                       "read-write lock '%s' is not held by this thread",
                       rw->rd->name);
  return release_kind(rw, tid, kind);
}

int dlock_rwlock_validity(dlock_rwlock *rw, long long *ms) {
  dlock__clear_error();
  if (ms)
    *ms = 0;
  if (!rw || !ms)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  /* Each side is a mutex of its own family (write, read) in the registry. */
  long long w = 0, r = 0;
  int rw_rc = dlock_mutex_validity(rw->wr, &w);
  int rd_rc = dlock_mutex_validity(rw->rd, &r);
  if (rw_rc == DLOCK_EPERM && rd_rc == DLOCK_EPERM)
    return dlock__fail(DLOCK_EPERM,
                       "read-write lock '%s' is not held by this thread",
                       rw->rd->name);
  if (rw_rc == DLOCK_ELOST || rd_rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST,
                       "read-write lock '%s': a %s hold of this thread is "
                       "lost or past its local deadline",
                       rw->rd->name, rw_rc == DLOCK_ELOST ? "write" : "read");
  if (rw_rc < 0 && rw_rc != DLOCK_EPERM)
    return rw_rc;
  if (rd_rc < 0 && rd_rc != DLOCK_EPERM)
    return rd_rc;
  *ms = rw_rc == 0 && (rd_rc != 0 || w < r) ? w : r;
  return 0;
}

int dlock_rwlock_downgrade(dlock_rwlock *rw, long long lease_ms) {
  dlock__clear_error();
  if (!rw)
    return dlock__fail(DLOCK_EINVAL, "rwlock is NULL");
  int rc0 = dlock__check_lease(lease_ms, "read-write lock", rw->rd->name);
  if (rc0)
    return rc0;
  const uint64_t tid = dlock__tid();
  dlock__mu_lock(&rw->mu);
  dlock__hold *s = find_stack(rw, tid, 0);
  char kind = 0;
  if (s && s->nmodes)
    kind = s->modes[s->nmodes - 1];
  dlock__mu_unlock(&rw->mu);
  if (kind != 'W')
    return dlock__fail(DLOCK_EPERM,
                       "read-write lock '%s': the calling thread's most "
                       "recent hold is not a write hold",
                       rw->rd->name);
  /* Read first (allowed: we are the writer), so no writer gets in. */
  int rc = dlock__mutex_acquire(rw->rd, 0, lease_ms);
  if (rc == DLOCK_EBUSY) {
    /* Another thread is the writer: our write hold is gone. Let the write
     * release confirm it (and drop the record). */
    rc = release_kind(rw, tid, 'W');
    return rc == DLOCK_ELOST || rc == 0
               ? dlock__fail(DLOCK_ELOST,
                             "read-write lock '%s': the write hold was lost "
                             "(another thread writes now)",
                             rw->rd->name)
               : rc;
  }
  if (rc) {
    if (rc == DLOCK_ELOST) {
      dlock__mu_lock(&rw->mu);
      drop_kind(rw, tid, 'R');
      dlock__mu_unlock(&rw->mu);
    }
    return rc;
  }
  rc = dlock__mutex_release(rw->wr);
  dlock__mu_lock(&rw->mu);
  s = find_stack(rw, tid, 0); /* still there: only this thread drops it */
  if (rc == 0 && s && s->nmodes) {
    s->modes[s->nmodes - 1] =
        'R'; /* the read hold takes the write hold's place */
  } else if (rc == DLOCK_ELOST || rc == DLOCK_EPERM) {
    drop_kind(rw, tid, 'W');
  }
  dlock__mu_unlock(&rw->mu);
  if (rc == 0)
    return 0;
  /* The write hold was lost (the exclusive section is over), or its release
   * failed and it stays recorded for another try: either way give the
   * fresh read hold back, so the thread's holds are as before the call. */
  dlock__err_keep_begin();
  (void)dlock__mutex_release(rw->rd);
  dlock__err_keep_end();
  return rc;
}
