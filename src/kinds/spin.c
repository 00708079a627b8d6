/*
 * spin.c -- the spin lock (Redisson RSpinLock) and the mutex's spinning wait.
 *
 * LAYOUT: the reentrant mutex's (Redisson RLock): hash <name>, field
 * "<client id>:<thread id>" = hold count, TTL = lease. The acquire is the
 * plain mutex's script (scripts.c), sent without ever joining its wait
 * queue; so a spin lock, a dlock mutex and a Redisson RLock or RSpinLock of
 * one name exclude each other, and one thread's holds through any of them
 * count as one reentrant hold (one hold record, holds.c).
 *
 * NO PUB/SUB: a waiting call does not subscribe. It tries again after a
 * back-off sleep (Redisson's ExponentialBackOff with its defaults: the
 * first sleep 1 ms; each next one is the previous times 2 plus a random
 * number of ms in [0, fails) -- the jitter, fails counting the sleeps so far
 * -- and at most 128 ms). The unlock publishes nothing (as RSpinLock's) and
 * hands the lock to nobody: waiters of a pub/sub lock of the same name
 * (RLock, dlock_mutex) notice it free at their next timed retry (the
 * holder's TTL).
 *
 * FALLBACK: with cfg.spin_fallback set, a plain mutex whose SUBSCRIBE the
 * server refuses (an ACL without it, a proxy without pub/sub) waits this
 * way instead of failing with DLOCK_EAUTH; the client remembers it (its
 * later waits spin at once, its unlocks use the spin unlock, which then
 * still tries a PUBLISH of "0" -- with pcall, so a refusal is harmless --
 * for the pub/sub waiters of other clients).
 */
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* ---- back-off ------------------------------------------------------------ */

void dlock__backoff_init(dlock__backoff *b) {
  b->next = DLOCK__SPIN_INITIAL_MS;
  b->max = DLOCK__SPIN_MAX_MS;
  b->mult = DLOCK__SPIN_MULTIPLIER;
  b->fails = 0;
}

int64_t dlock__backoff_next(dlock__backoff *b) {
  if (b->next >= b->max)
    return b->max;
  int64_t result = b->next;
  b->fails++;
  int64_t jitter = (int64_t)(dlock__rand64() % (uint64_t)b->fails);
  b->next = b->next * b->mult + jitter;
  if (b->next > b->max)
    b->next = b->max;
  return result;
}

/* Sleeps until `until` (monotonic ms) in short slices, ending early when
 * the client closes or the wait is canceled. */
static void spin_sleep(const dlock__budget *b, int64_t until) {
  for (int i = 0; i < 1000; i++) {
    int64_t left = until - dlock__now_ms();
    if (left <= 0 || (b->c && atomic_load(&b->c->closing)) ||
        dlock__budget_canceled(b))
      return;
    dlock__sleep_ms(left < DLOCK__SPIN_SLICE_MS ? left : DLOCK__SPIN_SLICE_MS);
  }
}

int dlock__spin_wait(const dlock__budget *b, int (*round)(void *arg),
                     void *arg) {
  dlock__backoff bo;
  dlock__backoff_init(&bo);
  for (;;) {
    int64_t until =
        dlock__budget_clamp(b, dlock__now_ms() + dlock__backoff_next(&bo));
    spin_sleep(b, until);
    int rc = round(arg);
    if (rc != 0)
      return rc;
  }
}

/* ---- the fallback of the plain mutex --------------------------------- */

int dlock__spins(const dlock_mutex *m) {
  return m->ops->spin || (m->ops == &dlock__plain_ops &&
                          atomic_load(&m->c->spin_fell_back) != 0);
}

int dlock__spin_fall_back(dlock_mutex *m) {
  dlock_client *c = m->c;
  if (!c->cfg.spin_fallback || m->ops != &dlock__plain_ops)
    return 0;
  if (atomic_exchange(&c->spin_fell_back, 1) == 0)
    dlock__log(&c->cfg, DLOCK_LOG_WARN, m->name, "spin_fallback",
               "%s -- spin_fallback is set: from now on this client's "
               "mutexes wait by polling with back-off (up to %d ms between "
               "tries) instead of pub/sub, and their unlocks wake other "
               "clients' waiters only if PUBLISH is allowed (docs/spin.md)",
               dlock_last_error(), DLOCK__SPIN_MAX_MS);
  return 1;
}

int dlock__spin_unlock_refused(dlock_mutex *m, uint64_t tid, int rc) {
  dlock_client *c = m->c;
  const char *why = dlock_last_error();
  if (rc != DLOCK_EREDIS || !c->cfg.spin_fallback ||
      (!strstr(why, "NOPERM") && !strstr(why, "can't run this command") &&
       !strstr(why, "can't publish")))
    return rc;
  /* Redis 7.0 words a refusal inside a script "... can't run this command
   * ..." (the command) or "... can't publish to the channel ..." (the
   * channel); outside one, NOPERM. The final unlock deletes the key before
   * it publishes: when the field is gone, the refusal came after the
   * release (the PUBLISH), and the lock is released. When it is still
   * there, the refusal came first. */
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, tid, field);
  const char *av[3] = {"HEXISTS", m->name, field};
  size_t al[3] = {7, m->name_len, fl};
  dlock__cmd cmd = {m->name, NULL, 3, av, al, 0};
  redisReply *r = NULL;
  long long v = 1;
  dlock__err_keep_begin();
  int xr = dlock__exec(c, &cmd, &r);
  if (xr == 0 && dlock__reply_int(r, &v) != 0)
    v = 1;
  freeReplyObject(r);
  dlock__err_keep_end();
  if (xr != 0 || v != 0)
    return rc;
  dlock__spin_fall_back(m);
  return 1;
}

/* ---- scripts -------------------------------------------------------------
 */

static dlock__script g_unlock = {
    "spin_unlock",
    /* The plain unlock's KEYS and ARGV[1..6] (dlock__rel_call_init: lock,
     * channel, queue, grant prefix, deadlines, marker, tombstone; '0',
     * lease of the remaining holds, field, publish command, expected
     * count, request id), ARGV[7] '1' = try to wake pub/sub waiters with
     * "0" (a refused PUBLISH is ignored), '0' = publish nothing, ARGV[8]
     * > 0: a committing copy (writes the tombstone KEYS[7], PX ARGV[8]).
     * Idempotent by state as the plain unlock (scripts.c): nil = the field
     * is gone, 0 = still held, 1 = released; a copy that finds its
     * tombstone is late and changes nothing. */
    DLOCK__LUA_TTL DLOCK__LUA_LATE("KEYS[7]", "(tonumber(ARGV[5]) > 1) and 0 "
                                              "or 1")
        DLOCK__LUA_COMMIT(
            "KEYS[7]",
            "ARGV[8]") "local n = tonumber(redis.call('hget', KEYS[1], "
                       "ARGV[3]))\n"
                       "if not n then return nil end\n"
                       "local want = tonumber(ARGV[5])\n"
                       "if n < want then return 0 end\n"
                       "if want > 1 then\n"
                       "  remaining_ttl(KEYS[1], ARGV[2])\n"
                       "  redis.call('hset', KEYS[1], ARGV[3], want - 1)\n"
                       "  return 0\n"
                       "end\n"
                       "redis.call('del', KEYS[1])\n"
                       "if ARGV[7] == '1' then redis.pcall(ARGV[4], KEYS[2], "
                       "ARGV[1]) end\n"
                       "return 1\n",
    {0},
    0};

static dlock__script g_force = {
    "spin_force_unlock",
    /* KEYS[1] lock, KEYS[2] hand-over marker. Deletes, publishes nothing
     * (RSpinLock's forceUnlock). 1 deleted, 0 none. */
    DLOCK__LUA_FORCE_CHECK "if redis.call('del', KEYS[1]) == 1 then\n"
                           "  redis.call('del', KEYS[2])\n"
                           "  return 1\n"
                           "end\n"
                           "return 0\n",
    {0},
    0};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) {
  dlock__script_init(&g_unlock);
  dlock__script_init(&g_force);
}

int dlock__spin_release(dlock_mutex *m, uint64_t tid,
                        const dlock__eng_unlock *u, int wake) {
  pthread_once(&g_once, init_scripts);
  dlock_client *c = m->c;
  char field[DLOCK__FIELD_MAX], cs[24];
  size_t fl = dlock__field(c, tid, field);
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, m->name, m->name_len, field, fl, u->lease,
                                u->expected, u->rid, dlock__publish_cmd(c));
  const char *args[8];
  size_t alens[8];
  memcpy(args, k.args, 6 * sizeof *args);
  memcpy(alens, k.alens, 6 * sizeof *alens);
  args[6] = wake ? "1" : "0";
  alens[6] = 1;
  args[7] = cs;
  alens[7] = dlock__fmt_i64(cs, u->commit ? dlock__tombstone_ttl(&c->cfg) : 0);
  redisReply *r = NULL;
  if (!rc)
    rc =
        dlock__eval(c, &g_unlock, k.nkeys, k.keys, k.klens, 8, args, alens, &r);
  dlock__rel_call_free(&k);
  return dlock__rel_reply(rc, r);
}

int dlock__spin_force(dlock_mutex *m) {
  pthread_once(&g_once, init_scripts);
  dlock__sb mk;
  dlock__sb_init(&mk);
  dlock__own_name(&mk, "dlock_lock_granted", m->name);
  const char *keys[2] = {m->name, mk.p};
  size_t klens[2] = {m->name_len, mk.len};
  redisReply *r = NULL;
  int rc = mk.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                  : dlock__eval_once(m->c, &g_force, 2, keys, klens, 0, NULL,
                                     NULL, &r);
  dlock__sb_free(&mk);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  return rc ? rc : (int)v;
}

/* ---- the spin variant's ops ------------------------------------------- */

static int spin_attempt(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                        int queue, int64_t wait_ms, int64_t *ttl,
                        uint64_t *token, const dlock__wait *w) {
  (void)queue; /* never joins the wait queue: nobody hands it the lock */
  return dlock__plain_ops.attempt(m, tid, target, lease, 0, wait_ms, ttl, token,
                                  w);
}

static int spin_release(dlock_mutex *m, uint64_t tid,
                        const dlock__eng_unlock *u) {
  return dlock__spin_release(m, tid, u, 0);
}

static void spin_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                          dlock__sb *grant) {
  (void)tid;
  (void)grant;
  /* Never subscribed (ops.spin); named for completeness. */
  dlock__prefix_name(channel, "redisson_lock__channel", m->name);
}

const dlock__mutex_ops dlock__spin_ops = {"spin lock",
                                          spin_attempt,
                                          spin_release,
                                          NULL,
                                          spin_channels,
                                          dlock__spin_force,
                                          DLOCK__WAKE_LOCK,
                                          "",
                                          0,
                                          NULL,
                                          0,
                                          1};

int dlock_mutex_new_spin(dlock_client *c, const char *name, dlock_mutex **out) {
  return dlock__mutex_create(c, name, &dlock__spin_ops, out);
}
