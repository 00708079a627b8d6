/*
 * fenced.c -- the fenced mutex: a reentrant mutex whose every successful
 * acquisition, reentrant ones included, draws a fencing token from
 * INCR redisson_lock_token:{name} (Redisson RFencedLock layout; see
 * docs/fenced.md).
 *
 * DATA: the RLock hash <name> (field "<uuid>:<tid>" = hold count, TTL =
 * lease) plus the counter redisson_lock_token:{name} (plain string, no TTL,
 * never reset by unlock). The first token ever issued is 1.
 *
 * WAITING is Redisson's plain behaviour, not the plain dlock mutex's direct
 * hand-over: unlock deletes the key and publishes "0" on
 * redisson_lock__channel:{name}; one waiting thread per client wakes and
 * retries, and the winner's acquire script issues its token. A token is
 * therefore always issued by the script that writes the holder's field,
 * in the same atomic step. The unlock and force-unlock scripts are the
 * plain mutex's (same hash, same channel): a fenced unlock still hands the
 * lock to plain dlock mutex waiters queued on the same name, as a plain
 * unlock would.
 *
 * WHAT A TOKEN PROTECTS AGAINST: a holder that stalls (GC pause, SIGSTOP,
 * swapped out, slow network) past its lease, while another client takes the
 * lock, and then writes to the shared resource believing it still holds
 * the lock. The lock cannot stop that late write; the resource can, if it
 * remembers the highest token it has accepted and rejects writes carrying
 * a lower one. Without that check in the resource the token protects
 * nothing.
 */
#include <stdio.h>
#include <string.h>

#include "kinds/kinds.h"

static dlock__script g_acquire = {
    "fenced_acquire",
    /* KEYS[1] lock, KEYS[2] token counter, KEYS[3] this attempt's
     * tombstone. ARGV[1] lease ms, ARGV[2] field, ARGV[3] hold count after
     * this acquire ('1' = first hold). {1, token} = held; {0, pttl} = held
     * elsewhere; {-3, 0} = our earlier hold is gone; {-4, 0} = a late copy
     * (does nothing). The count is written, not incremented, and only
     * raised; a copy that finds the count already there (a re-sent
     * acquire) draws no new token but answers the newest one -- the
     * holder's token is the newest issued (issue 43: a late copy drew one
     * for a later hold). */
    DLOCK__LUA_TTL DLOCK__LUA_KIND DLOCK__LUA_LATE("KEYS[3]", "{-4, 0}")
    /* held by another kind of lock: taken, never rewritten (issue 25.6) */
    "local kd = kind_of(KEYS[1])\n"
    "if kd ~= 'none' and kd ~= 'mutex' then\n"
    "  if ARGV[3] ~= '1' then return {-3, 0} end\n"
    "  return {0, busy_ttl(KEYS[1])}\n"
    "end\n"
    /* ours: the TTL is extended, never shortened; the TTL is set before
     * the count */
    "local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"
    "if c then\n"
    "  extend(KEYS[1], ARGV[1])\n"
    "  if c >= tonumber(ARGV[3]) then\n"
    "    return {1, tonumber(redis.call('get', KEYS[2]) or '0')}\n"
    "  end\n"
    "  redis.call('hset', KEYS[1], ARGV[2], ARGV[3])\n"
    "  return {1, redis.call('incr', KEYS[2])}\n"
    "end\n"
    "if ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  pexpire_new(KEYS[1], ARGV[1])\n"
    "  return {1, redis.call('incr', KEYS[2])}\n"
    "end\n"
    "if ARGV[3] ~= '1' then return {-3, 0} end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) { dlock__script_init(&g_acquire); }

static void fenced_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                            dlock__sb *grant) {
  (void)tid;
  (void)grant; /* no direct hand-over: "0" on the lock channel */
  dlock__prefix_name(channel, "redisson_lock__channel", m->name);
}

static int fenced_attempt(dlock_mutex *m, uint64_t tid, int target,
                          int64_t lease, int queue, int64_t wait_ms,
                          int64_t *ttl, uint64_t *token, const dlock__wait *w) {
  (void)queue;
  (void)wait_ms;
  pthread_once(&g_once, init_scripts);
  dlock__sb tk, tomb;
  dlock__sb_init(&tk);
  dlock__sb_init(&tomb);
  dlock__prefix_name(&tk, "redisson_lock_token", m->name);
  dlock__req_tomb_key(&tomb, m->name, w->rid);
  if (tk.oom || tomb.oom) {
    dlock__sb_free(&tk);
    dlock__sb_free(&tomb);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  char field[DLOCK__FIELD_MAX], ls[24], ts[16];
  size_t fl = dlock__field(m->c, tid, field);
  int lsl = snprintf(ls, sizeof ls, "%lld", (long long)lease);
  int tsl = snprintf(ts, sizeof ts, "%d", target);
  const char *keys[3] = {m->name, tk.p, tomb.p};
  size_t klens[3] = {m->name_len, tk.len, tomb.len};
  const char *args[3] = {ls, field, ts};
  size_t alens[3] = {(size_t)lsl, fl, (size_t)tsl};
  redisReply *r = NULL;
  int rc = dlock__eval(m->c, &g_acquire, 3, keys, klens, 3, args, alens, &r);
  dlock__sb_free(&tk);
  dlock__sb_free(&tomb);
  if (rc || !r)
    return rc ? rc : dlock__fail(DLOCK_EPROTO, "no reply");
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    freeReplyObject(r);
    return dlock__fail(DLOCK_EPROTO, "fenced lock '%s': unexpected reply",
                       m->name);
  }
  long long what = r->element[0]->integer, v = r->element[1]->integer;
  freeReplyObject(r);
  if (what == 1) {
    if (v <= 0)
      return dlock__fail(DLOCK_EPROTO,
                         "fenced lock '%s': token counter returned %lld",
                         m->name, v);
    *token = (uint64_t)v;
    return 1;
  }
  if (what == -3)
    return dlock__reacquired_in_vain("fenced lock", m->name);
  if (what == -4)
    return dlock__late_answer("fenced lock", m->name);
  *ttl = v;
  return 0;
}

/* Unlock and force-unlock are RLock's (Redisson's RFencedLock inherits
 * them): the plain variant's scripts. */
static int fenced_release(dlock_mutex *m, uint64_t tid,
                          const dlock__eng_unlock *u) {
  return dlock__plain_ops.release(m, tid, u);
}

static int fenced_force(dlock_mutex *m) { return dlock__plain_ops.force(m); }

const dlock__mutex_ops dlock__fenced_ops = {"fenced",
                                            fenced_attempt,
                                            fenced_release,
                                            NULL,
                                            fenced_channels,
                                            fenced_force,
                                            DLOCK__WAKE_LOCK,
                                            "",
                                            0,
                                            NULL};

int dlock_mutex_new_fenced(dlock_client *c, const char *name,
                           dlock_mutex **out) {
  return dlock__mutex_create(c, name, &dlock__fenced_ops, out);
}
