/*
 * scripts.c -- the Lua scripts of the reentrant mutex.
 *
 * Data layout (Redisson RLock, unchanged): hash KEYS[1] = lock name, field
 * "<uuid>:<tid>" = hold count, TTL = lease; unlock publishes "0" on
 * redisson_lock__channel:{name}. (Redisson's unlock latch key
 * redisson_unlock_latch:{name}:<request id> is not used: see below.)
 *
 * dlock's extension, invisible to Redisson clients: a FIFO of waiting dlock
 * threads in the list dlock_lock_queue:{name} (entries
 * "<uuid>:<tid>|<lease>|<wait id>", each with a deadline in the hash
 * dlock_lock_waits:{name}) so that an unlock can hand the lock directly to
 * the next waiter instead of waking every client. (Names containing '{' get
 * "dlock_lock_queue::<name>": see dlock__own_name.) HOW IT WORKS:
 *   - A waiter that is subscribed to its client's grant channel
 *     dlock_grant__channel:{name}:<uuid> joins the queue with the same script
 *     call that found the lock taken (no extra round trip).
 *   - The final unlock pops entries until PUBLISH to an entry's grant channel
 *     (payload "<tid>|<wait id>") reaches a subscriber (a dead client has
 *     none: it is skipped; so are entries whose deadline passed and entries
 *     of the unlocking thread), writes that waiter's field with count 1 and
 *     its lease, and returns. The lock
 *     never becomes free, so no herd forms and nobody retries in vain.
 *   - With no live waiter queued it deletes the key and publishes "0", which
 *     is what Redisson waiters (and dlock threads not yet queued) wait for.
 * WHAT IF a grant message is lost (pub/sub is at most once)? The waiter's
 * field is already set; its next attempt (TTL-bounded wait, or the retry
 * every waiter does after its subscriber reconnects) finds the field and
 * succeeds. WHAT IF the waiter gave up? Its cancel script removes the entry;
 * if the grant got there first, cancel reports the lock as held and the
 * waiter keeps it.
 *
 * Acquire is idempotent, so the router may retry it after a lost reply: it
 * writes the hold count the client expects (HSET to prior+1) instead of
 * incrementing blindly. Unlock is idempotent the same way, by state and
 * with no time window: it carries the count the client expects and writes
 * that count minus one (see the unlock script).
 */
#include <string.h>

#include "proto/proto.h"

static dlock__script g_core[DLOCK__S_COUNT_CORE] = {
    [DLOCK__S_ACQUIRE] =
        {"acquire",
         /* KEYS[1] lock, KEYS[2] queue, KEYS[3] queue deadlines, KEYS[4]
          * hand-over marker, KEYS[5] this attempt's tombstone
          * dlock_tomb:{name}:<request id>. ARGV[1] lease ms, ARGV[2] field,
          * ARGV[3] hold count after this acquire, ARGV[4] '1' = queue on
          * failure, ARGV[5] queue entry, ARGV[6] '1' = this wait may be
          * queued (leave the queue when the lock is taken), ARGV[7] how
          * long the entry may be handed the lock (ms, '0' = while the
          * client is subscribed), ARGV[8] wait id.
          * nil = held; -3 = our hold is gone; -4 = a late copy (its
          * tombstone exists: it does nothing); else the holder's PTTL. */
         DLOCK__LUA_TTL DLOCK__LUA_KIND
             /* A copy of an attempt the client has committed (it was sent more
              * than once and answered): it arrived late and must not act on a
              * later hold (safety round 4). */
             DLOCK__LUA_LATE(
                 "KEYS[5]",
                 "-4") "local function dequeue()\n"
                       "  if ARGV[6] == '1' then\n"
                       "    redis.call('lrem', KEYS[2], 0, ARGV[5])\n"
                       "    redis.call('hdel', KEYS[3], ARGV[8], 't' .. "
                       "ARGV[8])\n"
                       /* the deadlines hash (and the policy's fields "h",
                        * "t<wid>") lives only while the queue does */
                       "    if redis.call('llen', KEYS[2]) == 0 then\n"
                       "      redis.call('del', KEYS[3])\n"
                       "    end\n"
                       "  end\n"
                       "end\n"
                       "if redis.call('exists', KEYS[1]) == 0 then\n"
                       "  if ARGV[3] ~= '1' then return -3 end\n"
                       "  dequeue()\n"
                       "  redis.call('hset', KEYS[1], ARGV[2], '1')\n"
                       "  pexpire_new(KEYS[1], ARGV[1])\n"
                       "  return nil\n"
                       "end\n"
                       /* held by another kind of lock (a read-write lock, a
                        * semaphore): taken, never rewritten (issue 25.6). The
                        * key exists: kind_of's TYPE is not needed (HEXISTS
                        * raises WRONGTYPE for a non-hash) */
                       "if redis.call('hexists', KEYS[1], 'mode') == 1 then\n"
                       "  if ARGV[3] ~= '1' then return -3 end\n"
                       "  return busy_ttl(KEYS[1])\n"
                       "end\n"
                       /* ours: the TTL is extended, never shortened (a key's
                        * TTL never drops below what a live hold needs: a copy
                        * of an earlier acquire with a shorter lease cut a later
                        * hold's, issue 43), and the count only raised; a first
                        * hold (handed over to us, or a re-sent acquire) takes
                        * the hand-over as its own (its marker goes: no decline
                        * can undo it). The TTL is set before the count, so a
                        * refused PEXPIRE writes nothing */
                       "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
                       "  extend(KEYS[1], ARGV[1])\n"
                       "  if ARGV[3] == '1' then\n"
                       "    dequeue()\n"
                       "    redis.call('del', KEYS[4])\n"
                       "  end\n"
                       "  if tonumber(redis.call('hget', KEYS[1], ARGV[2])) <\n"
                       "      tonumber(ARGV[3]) then\n"
                       "    redis.call('hset', KEYS[1], ARGV[2], ARGV[3])\n"
                       "  end\n"
                       "  return nil\n"
                       "end\n"
                       "if ARGV[3] ~= '1' then return -3 end\n"
                       "if ARGV[4] == '1' then\n"
                       "  if not redis.call('lpos', KEYS[2], ARGV[5]) then\n"
                       "    redis.call('rpush', KEYS[2], ARGV[5])\n"
                       "    local t = redis.call('time')\n"
                       "    local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
                       "    local dl = 0\n"
                       "    if ARGV[7] ~= '0' then dl = now + "
                       "tonumber(ARGV[7]) end\n"
                       /* its deadline, and its enqueue time: the policy's age
                        */
                       "    redis.call('hset', KEYS[3], ARGV[8], dl, 't' .. "
                       "ARGV[8], now)\n"
                       "  end\n"
                       "  redis.call('pexpire', KEYS[2], 300000)\n"
                       "  redis.call('pexpire', KEYS[3], 300000)\n"
                       /* the queue's head in its slice (DLOCK__LUA_POLICY):
                        * attempt again when the slice ends (or the head comes
                        * of age, if that is sooner), whoever holds the lock
                        * then */
                       "  local h = redis.call('hget', KEYS[3], 'h')\n"
                       "  local hw, hs = nil, nil\n"
                       "  if h then hw, hs = string.match(h, '^(%x+)|(%d+)') "
                       "end\n"
                       "  if hw == ARGV[8] then\n"
                       "    local t = redis.call('time')\n"
                       "    local due = tonumber(hs) + " DLOCK__SLICE_MS "\n"
                       "    local e = redis.call('hget', KEYS[3], 't' .. "
                       "ARGV[8])\n"
                       "    if e and tonumber(e) + " DLOCK__STARVE_MS
                       " < due then\n"
                       "      due = tonumber(e) + " DLOCK__STARVE_MS "\n"
                       "    end\n"
                       "    local left = due + 1 - (t[1] * 1000 + "
                       "math.floor(t[2] / 1000))\n"
                       "    local p = redis.call('pttl', KEYS[1])\n"
                       "    if left > 0 and (p < 0 or left < p) then return "
                       "left end\n"
                       "    return p\n"
                       "  end\n"
                       "end\n"
                       "return redis.call('pttl', KEYS[1])\n",
         {0}},
    [DLOCK__S_UNLOCK] =
        {"unlock",
         /* KEYS[1] lock, KEYS[2] channel, KEYS[3] queue, KEYS[4] grant
          * channel prefix, KEYS[5] queue deadlines, KEYS[6] hand-over
          * marker. ARGV[1] '0', ARGV[2] lease for the remaining holds,
          * ARGV[3] field, ARGV[4] publish command, ARGV[5] the hold count
          * the client expects before this unlock (N), ARGV[6] its request
          * id; KEYS[7] its tombstone redisson_unlock_latch:{name}:<id>;
          * ARGV[7] (optional) > 0: this is a COMMITTING COPY -- write the
          * tombstone (PX ARGV[7]) with the release, so no copy of it can
          * act after this one (safety round 4: a copy that arrives after
          * the thread's next hold began must not release it).
          * nil = the field is gone, 0 = still held, 1 = released (or
          * handed over).
          * Idempotent by state, with no time window: a count below N means
          * a copy of this very unlock already ran (0, nothing changes); a
          * count of N or more becomes N - 1 (the count is written, like
          * the acquire's, never decremented blindly); N = 1 releases. A
          * copy of a final release that finds the field gone answers nil,
          * and the client, which knows whether it may have sent one
          * before, reads that as "released" (mutex.c rel_end). A final
          * release whose tombstone exists is a copy that arrived late,
          * after the release was committed: it changes nothing, final or
          * partial. The tombstone is written by a committing copy, or by
          * the client after a release it had to send more than once
          * (mutex.c rel_commit). */
         DLOCK__LUA_TTL DLOCK__LUA_HANDOVER DLOCK__LUA_POLICY DLOCK__LUA_LATE(
             "KEYS[7]", "(tonumber(ARGV[5]) > 1) and 0 or 1")
             DLOCK__LUA_COMMIT(
                 "KEYS[7]",
                 "ARGV[7]") "local want = tonumber(ARGV[5])\n"
                            "local n = tonumber(redis.call('hget', KEYS[1], "
                            "ARGV[3]))\n"
                            "if not n then return nil end\n"
                            "if n < want then return 0 end\n"
                            "if want > 1 then\n"
                            "  remaining_ttl(KEYS[1], ARGV[2])\n"
                            "  redis.call('hset', KEYS[1], ARGV[3], want - 1)\n"
                            "  return 0\n"
                            "end\n"
                            "redis.call('del', KEYS[1])\n"
                            "release(KEYS[1], KEYS[2], KEYS[3], KEYS[5], "
                            "KEYS[4], KEYS[6], "
                            "ARGV[3], ARGV[4])\n"
                            "return 1\n",
         {0}},
    [DLOCK__S_ACQUIRE_FIRST] =
        {"acquire_first",
         /* The acquire of the path taken most (issue 30: Redis work per
          * pair): a first hold (count 1) of a call that is not queued and
          * will not queue on failure -- the acquire script with ARGV[3] =
          * '1', ARGV[4] = ARGV[6] = '0', same answers, without the queue's
          * KEYS and ARGV. KEYS[1] lock, KEYS[2] hand-over marker, KEYS[3]
          * this attempt's tombstone. ARGV[1] lease ms, ARGV[2] field. nil
          * = held, -4 = a late copy (does nothing), else the holder's PTTL.
          * No helper functions: a closure made per call costs Redis time.
          * One EXISTS of lock and tombstone answers the common case. */
         "if redis.call('exists', KEYS[1], KEYS[3]) == 0 then\n"
         "  redis.call('hset', KEYS[1], ARGV[2], '1')\n"
         "  local r = redis.pcall('pexpire', KEYS[1], ARGV[1])\n"
         "  if type(r) == 'table' and r.err then\n"
         "    redis.call('del', KEYS[1])\n"
         "    error(r)\n"
         "  end\n"
         "  return nil\n"
         "end\n"
         /* past here the lock exists, or the tombstone does */
         DLOCK__LUA_LATE(
             "KEYS[3]",
             "-4") "if redis.call('hexists', KEYS[1], 'mode') == 1 then\n"
                   "  local p = redis.call('pttl', KEYS[1])\n"
                   "  if p < 0 then return 1000 end\n"
                   "  return p\n"
                   "end\n"
                   /* ours already: a re-sent acquire, or a hand-over to a wait
                    * that ended; it is this hold now (its marker goes). The TTL
                    * is extended, never shortened; the count (>= 1) stays */
                   "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
                   "  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"
                   "    redis.call('pexpire', KEYS[1], ARGV[1])\n"
                   "  end\n"
                   "  redis.call('del', KEYS[2])\n"
                   "  return nil\n"
                   "end\n"
                   "return redis.call('pttl', KEYS[1])\n",
         {0}},
    [DLOCK__S_UNLOCK_LAST] =
        {"unlock_last",
         /* The final release (the client expects count 1) of the path
          * taken most: the unlock script with ARGV[5] = '1', same answers,
          * with 4 KEYS and 2 ARGV instead of 7 and 6. KEYS[1] lock, KEYS[2]
          * channel, KEYS[3] queue, KEYS[4] tombstone. ARGV[1] field,
          * ARGV[2] publish command. One EXISTS of tombstone and queue
          * answers both questions of the common case (neither exists:
          * then HDEL of the field and PUBLISH, 3 commands in all);
          * only a queue needs the policy, whose other keys (deadlines,
          * grant channels, marker) share the queue's suffix after
          * "dlock_lock_queue" (dlock__own_name): built here, in the same
          * slot, and its functions are made only then. */
         "if redis.call('exists', KEYS[4], KEYS[3]) == 0 then\n"
         /* A mutex hash has one field, the holder's: removing it removes
          * the key (the full script's HGET + DEL in one command; a hash
          * with a second field, which no lock writes, keeps that one, where
          * the full script deleted the key). */
         "  if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then return nil end\n"
         "  redis.call(ARGV[2], KEYS[2], '0')\n"
         "  return 1\n"
         "end\n" DLOCK__LUA_LATE(
             "KEYS[4]",
             "1") "local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]))\n"
                  "if not n then return nil end\n"
                  "if n < 1 then return 0 end\n"
                  "redis.call('del', KEYS[1])\n"
                  "do\n" DLOCK__LUA_HANDOVER DLOCK__LUA_POLICY
                  "  local sfx = string.sub(KEYS[3], #'dlock_lock_queue' + 1)\n"
                  "  release(KEYS[1], KEYS[2], KEYS[3], 'dlock_lock_waits' .. "
                  "sfx,\n"
                  "    'dlock_grant__channel' .. sfx, 'dlock_lock_granted' .. "
                  "sfx,\n"
                  "    ARGV[1], ARGV[2])\n"
                  "end\n"
                  "return 1\n",
         {0}},
    [DLOCK__S_FORCE_UNLOCK] =
        {"force_unlock",
         /* KEYS[1] lock, KEYS[2] channel, KEYS[3] hand-over marker (it
          * goes with the hold it describes). ARGV[1] '0', ARGV[2] publish.
          * A key that is not a lock is refused, left alone. */
         DLOCK__LUA_FORCE_CHECK "if redis.call('del', KEYS[1]) == 1 then\n"
                                "  redis.call('del', KEYS[3])\n"
                                "  redis.call(ARGV[2], KEYS[2], ARGV[1])\n"
                                "  return 1\n"
                                "end\n"
                                "return 0\n",
         {0}},
    [DLOCK__S_RENEW] =
        {"renew",
         /* KEYS[i] lock; ARGV[1] lease; ARGV[i+1] field of KEYS[i].
          * Returns a string with one flag per key: '1' renewed, '0' gone.
          * Never creates. A key of another type (our hash was overwritten)
          * counts as gone and does not fail the rest of the batch: the
          * batch runs with redis.call (fast) and only if that raised an
          * error, again with redis.pcall (renewing twice is harmless). */
         DLOCK__LUA_TTL
         "local function run(call)\n"
         "  local r = {}\n"
         "  for i = 1, #KEYS do\n"
         "    if call('hexists', KEYS[i], ARGV[i + 1]) == 1 then\n"
         "      extend(KEYS[i], ARGV[1])\n"
         "      r[i] = '1'\n"
         "    else\n"
         "      r[i] = '0'\n"
         "    end\n"
         "  end\n"
         "  return table.concat(r)\n"
         "end\n"
         "local ok, res = pcall(run, redis.call)\n"
         "if ok then return res end\n"
         "return run(redis.pcall)\n",
         {0}},
    [DLOCK__S_CANCEL] =
        {"cancel",
         /* KEYS[1] lock, KEYS[2] queue, KEYS[3] queue deadlines, KEYS[4]
          * hand-over marker, KEYS[5] channel, KEYS[6] grant channel
          * prefix. ARGV[1] field, ARGV[2] entry, ARGV[3] wait id, ARGV[4]
          * publish command. Leaves the queue; 1 if the lock was handed to
          * us meanwhile (we keep it: the marker of this wait's hand-over
          * goes, so no decline can undo it). A LOCK LEFT FREE WITH LIVE
          * WAITERS IS TAKEN OR HANDED ON (safety round 4, issue 38.7): the
          * policy may have left the lock free and woken only this wait
          * (the queue's young head) -- a wait that ends without attempting
          * passes the free lock on as an unlock would, or the waiters
          * behind it sleep until the old holder's lease. */
         DLOCK__LUA_HANDOVER DLOCK__LUA_POLICY
         "redis.call('lrem', KEYS[2], 0, ARGV[2])\n"
         "redis.call('hdel', KEYS[3], ARGV[3], 't' .. ARGV[3])\n"
         "if redis.call('llen', KEYS[2]) == 0 then redis.call('del', KEYS[3]) "
         "end\n"
         "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"
         "  if redis.call('get', KEYS[4]) == ARGV[1] .. '|' .. ARGV[3] then\n"
         "    redis.call('del', KEYS[4])\n"
         "  end\n"
         "  return 1\n"
         "end\n"
         "if redis.call('exists', KEYS[1]) == 0 and\n"
         "    redis.call('llen', KEYS[2]) > 0 then\n"
         "  release(KEYS[1], KEYS[5], KEYS[2], KEYS[3], KEYS[6], KEYS[4],\n"
         "    ARGV[1], ARGV[4])\n"
         "end\n"
         "return 0\n",
         {0}},
    [DLOCK__S_DECLINE] =
        {"decline",
         /* The unlock's KEYS. ARGV[1] '0',
          * ARGV[2] field, ARGV[3] the marker the hand-over wrote
          * ("<field>|<wait id>"), ARGV[4] publish command. Gives back a lock
          * handed to a wait that had already ended, unless its thread took
          * it as its own since (then the marker is gone). 1 = given back
          * (passed on to the next live waiter, or freed), 0 = not ours to
          * give back. */
         DLOCK__LUA_HANDOVER DLOCK__LUA_POLICY
         /* A retry message ("<tid>|<wait id>|r", DLOCK__LUA_POLICY) that
          * reached no wait: the entry at the queue's head is that ended
          * wait's. It goes, and a free lock is passed on to the next
          * head as an unlock would (1). */
         "if redis.call('get', KEYS[6]) ~= ARGV[3] then\n"
         "  local wid = string.sub(ARGV[3], #ARGV[2] + 2)\n"
         "  local head = redis.call('lindex', KEYS[3], 0)\n"
         "  if not head or string.sub(head, 1, #ARGV[2] + 1) ~= ARGV[2] .. "
         "'|'\n"
         "      or string.sub(head, -#wid - 1) ~= '|' .. wid then\n"
         "    return 0\n"
         "  end\n"
         "  redis.call('lpop', KEYS[3])\n"
         "  redis.call('hdel', KEYS[5], wid, 't' .. wid)\n"
         "  if redis.call('llen', KEYS[3]) == 0 then redis.call('del', "
         "KEYS[5]) "
         "end\n"
         "  if redis.call('exists', KEYS[1]) == 0 then\n"
         "    release(KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[4], KEYS[6], "
         "ARGV[2], ARGV[4])\n"
         "  end\n"
         "  return 1\n"
         "end\n"
         "redis.call('del', KEYS[6])\n"
         "if redis.call('hget', KEYS[1], ARGV[2]) ~= '1' then return 0 end\n"
         "redis.call('hdel', KEYS[1], ARGV[2])\n"
         "if redis.call('exists', KEYS[1]) == 1 then return 1 end\n"
         "if handover(KEYS[1], KEYS[3], KEYS[5], KEYS[4], KEYS[6], ARGV[2], "
         "ARGV[4]) then\n"
         "  return 1\n"
         "end\n"
         "redis.call(ARGV[4], KEYS[2], ARGV[1])\n"
         "return 1\n",
         {0}},
    [DLOCK__S_STATUS] = {"status",
                         /* KEYS[1] lock: {pttl, {field, value, ...}} */
                         "return {redis.call('pttl', KEYS[1]), "
                         "redis.call('hgetall', KEYS[1])}\n",
                         {0},
                         1},
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_core(void) {
  for (int i = 0; i < DLOCK__S_COUNT_CORE; i++)
    dlock__script_init(&g_core[i]);
}

void dlock__script_init(dlock__script *s) {
  dlock__sha1_hex(s->body, strlen(s->body), s->sha);
}

const dlock__script *dlock__core_script(int id) {
  pthread_once(&g_once, init_core);
  return &g_core[id];
}
