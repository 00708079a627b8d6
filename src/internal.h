/*
 * internal.h -- what the library's source files share. Nothing here is API.
 *
 * Architecture (docs/design.md has the long version):
 *
 *   API threads --> router (dlock__exec) --> node --> pool of blocking
 *                    one place that knows       hiredis connections
 *                    which node serves a key
 *
 *   pubsub thread:   one subscriber connection per client; wakes waiting
 *                    threads (slots) on grant / "0" / "1" messages.
 *   watchdog thread: renews every watchdog hold of the client in pipelined
 *                    batches on its own connections; reports lost locks;
 *                    nothing else (the renewal path).
 *   expiry thread:   declares a hold lost at its local deadline.
 *   errand thread:   the client's info key, declines, cluster map
 *                    refreshes: bookkeeping kept off the renewal path.
 *
 *   engine (engine.c, engine.h): the hold decisions this client and the
 *                    event-loop client share -- local deadlines, request
 *                    ids, reentrancy. No I/O; both clients call it.
 *   I/O verdicts (ioverdict.c, ioverdict.h): the rules both clients' I/O
 *                    stacks share -- error replies, redirects, retries,
 *                    TLS failures, Sentinel rounds, subscriptions.
 *
 * Naming: public names dlock_, internal non-static names dlock__.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "dlock.h"
#include "ioverdict.h"

#define DLOCK__UUID_LEN 36
/* "<uuid>:<tid>" with tid up to 20 digits, plus ":write" and NUL. */
#define DLOCK__FIELD_MAX 72

/* ---- errors (error.c) --------------------------------------------------- */

/* When a message of `wanted` bytes (vsnprintf's answer) did not fit in
 * buf[size], ends it at a word boundary with " ..." (error.c). */
void dlock__cut_at_word(char *buf, size_t size, int wanted);
/* Sets the calling thread's detail message and returns err. */
int dlock__fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Only a public entry point clears the message: internal steps set it
 * (dlock__fail) or leave it. */
void dlock__clear_error(void);
/* Between begin and end (they nest) the calling thread's message is frozen:
 * a clean-up after a failure (leaving a wait queue, giving back what was
 * taken) cannot replace the message of the error the call returns. */
void dlock__err_keep_begin(void);
void dlock__err_keep_end(void);
/* Called with the rc of a script run over keys (keys[0]: the object's
 * name): when the server refused it with WRONGTYPE, looks up the TYPE of
 * each key and replaces the message (which quoted the script's hash) with
 * one that names the object, the key and what that key holds. Returns rc. */
typedef struct dlock__script dlock__script;
int dlock__explain_wrongtype(dlock_client *c, const dlock__script *s, int rc,
                             int nkeys, const char **keys, const size_t *klens);
/* The WRONGTYPE message's parts, for both clients: "the key 'k' holds a
 * string value" for key k of TYPE type appended to msg at *n (cap bytes;
 * "" and "none" add nothing), and the message itself (DLOCK_EREDIS, set)
 * for script s's object named k0, held being what was appended ("": "a
 * key"). */
void dlock__wrongtype_key(char *msg, size_t cap, size_t *n, const char *k,
                          size_t kl, const char *type);
int dlock__wrongtype_fail(const dlock__script *s, const char *k0, size_t k0l,
                          const char *held);

/* ---- utilities (clock.c random.c sha1.c process.c strbuf.c) ------------ */

int64_t dlock__now_ms(void); /* monotonic */
/* ---- log hook (log.c) ---------------------------------------------------
 * dlock__log passes one event to cfg->log_fn (level <= cfg->log_level), or,
 * when no hook is set, to stderr if the environment's DLOCK_LOG asks for
 * that level. name may be NULL. Any thread. dlock__log_on says whether an
 * event of that level would go anywhere (to skip costly formatting). */
int dlock__log_on(const dlock_config *cfg, int level);
void dlock__log(const dlock_config *cfg, int level, const char *name,
                const char *event, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Delivers one formatted event now (the hook or stderr); dlock__log calls
 * it, or callout.c when the thread's last internal lock is released. */
void dlock__log_emit(const dlock_config *cfg, int level, const char *name,
                     const char *event, const char *msg);

/* ---- callouts (callout.c): no user callback under an internal lock ----
 * Every internal mutex is taken and released through dlock__mu_lock /
 * dlock__mu_trylock / dlock__mu_unlock (they count the locks this thread
 * holds); a log event raised under one is kept (dlock__log_keep returns 1)
 * and delivered when the thread's last lock is released; on_lock_lost and
 * async completions go through dlock__callout_lost / _done, which abort if
 * the thread holds a lock. dlock__never reports a broken invariant and
 * aborts. */
void dlock__mu_lock(pthread_mutex_t *m);
int dlock__mu_trylock(pthread_mutex_t *m); /* 0 taken, else EBUSY */
void dlock__mu_unlock(pthread_mutex_t *m);
int dlock__mu_depth(void);
int dlock__log_keep(const dlock_config *cfg, int level, const char *name,
                    const char *event, const char *msg);
void dlock__callout_lost(const dlock_config *cfg, const char *name);
void dlock__callout_done(void (*cb)(int, void *), int rc, void *arg);
_Noreturn void dlock__never(const char *what);

/* ---- counters (stats.c): dlock_client_stats's fields, one relaxed atomic
 * each, indexed by dlock__stat. dlock__stat_add(&c->stats, DLOCK__ST_X, 1)
 * from any thread. Gauges (holds, connected) are read at query time. */
typedef enum dlock__stat {
  DLOCK__ST_ACQUIRED,
  DLOCK__ST_ACQUIRED_DIRECT,
  DLOCK__ST_ACQUIRED_HANDOVER,
  DLOCK__ST_REENTERED,
  DLOCK__ST_RELEASED,
  DLOCK__ST_WAITS,
  DLOCK__ST_WAIT_HIST0, /* 8 buckets: dlock__stat_wait() fills them */
  DLOCK__ST_WAIT_HIST7 = DLOCK__ST_WAIT_HIST0 + 7,
  DLOCK__ST_WAIT_MS_TOTAL,
  DLOCK__ST_WAIT_MS_MAX, /* a maximum, not a sum */
  DLOCK__ST_TIMEOUTS,
  DLOCK__ST_CANCELS,
  DLOCK__ST_RENEWALS_SENT,
  DLOCK__ST_RENEWALS_FAILED,
  DLOCK__ST_LOST_KEY_GONE,
  DLOCK__ST_LOST_UNREACHABLE,
  DLOCK__ST_LOST_THREAD_EXIT,
  DLOCK__ST_LOST_FORCED,
  DLOCK__ST_RECONNECTS,
  DLOCK__ST_RETRIES,
  DLOCK__ST_ENOSYNC,
  DLOCK__ST_COMMANDS,
  DLOCK__ST_ROUND_TRIPS,
  DLOCK__ST_LOST_EXPIRED,
  DLOCK__ST_COUNT
} dlock__stat;
typedef struct dlock__stats {
  _Atomic(uint64_t) v[DLOCK__ST_COUNT];
} dlock__stats;
static inline void dlock__stat_add(dlock__stats *s, dlock__stat k, uint64_t n) {
  atomic_fetch_add_explicit(&s->v[k], n, memory_order_relaxed);
}
/* One wait of wait_ms ended with an acquisition: waits, histogram, total,
 * maximum. */
void dlock__stat_wait(dlock__stats *s, int64_t wait_ms);
/* A first hold taken (reentry is not counted here): acquired, by hand-over
 * or directly; when the call waited (since monotonic ms started), its
 * wait too. Returns the wait in ms (0: it did not wait). */
int64_t dlock__stat_acquired(dlock__stats *s, int handover, int waited,
                             int64_t started);

int64_t dlock__wall_ms(void); /* CLOCK_REALTIME, ms since the epoch */
int64_t dlock__now_us(void);  /* monotonic */
void dlock__sleep_ms(int64_t ms);
/* The clock's time ms from now, for pthread_cond_timedwait (pass the clock
 * the condition variable was made with). */
struct timespec dlock__abstime(clockid_t clk, int64_t ms);
/* Initialises *cv to time its waits on CLOCK_MONOTONIC (pass
 * dlock__abstime(CLOCK_MONOTONIC, ms) to pthread_cond_timedwait): every
 * timed wait of the library is on that clock, so a step of the wall clock
 * neither stalls nor hurries it. 0, or -1 (cannot initialise). */
int dlock__cond_init_mono(pthread_cond_t *cv);
/* Fills buf with n cryptographically random bytes (getrandom). */
int dlock__random_bytes(void *buf, size_t n);
/* Fast per-thread PRNG (seeded from getrandom). */
uint64_t dlock__rand64(void);
void dlock__rand_reset_thread(void); /* after fork(): reseed on next use */
void dlock__uuid4(char out[DLOCK__UUID_LEN + 1]);
/* SHA1 of data as 40 lowercase hex chars + NUL. */
void dlock__sha1_hex(const char *data, size_t len, char out[41]);
/* Per-process thread id: a counter, never reused, assigned on first use. */
uint64_t dlock__tid(void);
/* Fork generation: increases in every child after fork(). */
unsigned dlock__fork_gen(void);
void *dlock__malloc(size_t n);
void *dlock__calloc(size_t n, size_t m);
char *dlock__strdup(const char *s);
char *dlock__strndup(const char *s, size_t n);

/* A string builder with inline storage; never fails silently: on OOM it
 * sets oom and keeps the old contents. */
typedef struct dlock__sb {
  char *p;
  size_t len, cap;
  int oom;
  int heap; /* p was malloc'ed */
  char inl[192];
} dlock__sb;
void dlock__sb_init(dlock__sb *b);
/* Starts with the caller's buffer (e.g. on its stack) instead of inl. */
void dlock__sb_init_buf(dlock__sb *b, char *buf, size_t cap);
void dlock__sb_free(dlock__sb *b);
void dlock__sb_reset(dlock__sb *b);
void dlock__sb_add(dlock__sb *b, const char *s, size_t n);
void dlock__sb_adds(dlock__sb *b, const char *s);
void dlock__sb_addu64(dlock__sb *b, uint64_t v);
void dlock__sb_addi64(dlock__sb *b, int64_t v);
/* Decimal text of v into buf (>= 21 bytes), NUL-terminated; returns the
 * length. snprintf costs ~700 instructions per number on the hot path. */
size_t dlock__fmt_i64(char *buf, int64_t v);

/* DLOCK_EINVAL (with a message naming what) when lease_ms is above
 * DLOCK_LEASE_MAX_MS, else 0. Every entry point that takes a lease calls
 * it before sending anything. */
int dlock__check_lease(long long lease_ms, const char *what, const char *name);

/* Lua functions for the scripts that set a lock key's TTL; a script that
 * uses them starts with this text.
 * - pexpire_new(k, ms): the TTL of a key this script just created. If
 *   Redis refuses the PEXPIRE (an ACL user without +pexpire, a value it
 *   rejects) the key is deleted again and the error raised, so no key is
 *   ever left without a TTL (issue 9.7). The HSET before it stays the
 *   script's first write, where Redis checks maxmemory.
 * - extend(k, ms): the TTL becomes ms unless it is longer already. A key's
 *   TTL never drops below what a live hold of it needs (issue 9.8): a
 *   reentrant acquire or renewal with a shorter lease keeps the longer TTL.
 * - remaining_ttl(k, l): for an unlock that leaves holds (l from
 *   dlock__remaining_lease): l > 0 sets the TTL to l (only watchdog holds
 *   remain: their lease is exact), l < 0 extends it to -l (fixed holds
 *   remain too), 0 leaves it. */
#define DLOCK__LUA_TTL                                                         \
  "local function pexpire_new(k, ms)\n"                                        \
  "  local r = redis.pcall('pexpire', k, ms)\n"                                \
  "  if type(r) == 'table' and r.err then\n"                                   \
  "    redis.call('del', k)\n"                                                 \
  "    error(r)\n"                                                             \
  "  end\n"                                                                    \
  "end\n"                                                                      \
  "local function extend(k, ms)\n"                                             \
  "  if redis.call('pttl', k) < tonumber(ms) then\n"                           \
  "    redis.call('pexpire', k, ms)\n"                                         \
  "  end\n"                                                                    \
  "end\n"                                                                      \
  "local function remaining_ttl(k, l)\n"                                       \
  "  l = tonumber(l)\n"                                                        \
  "  if l > 0 then redis.call('pexpire', k, l)\n"                              \
  "  elseif l < 0 then extend(k, -l) end\n"                                    \
  "end\n"

/* SAFETY ROUND 4's binding of a request to the hold it was for (docs/
 * guarantees.md, "Rules"): every script that changes a lock carries the
 * tombstone key of its own request (its request id drawn by
 * dlock__request_id: dlock_tomb:{name}:<rid> for an acquire attempt,
 * Redisson's redisson_unlock_latch:{name}:<rid> for a release) and does
 * nothing when it exists -- a copy that arrived after the client committed
 * the request (sent it more than once, had an answer, wrote the
 * tombstone). DLOCK__LUA_LATE(k, a): return a when tombstone k exists
 * (first, before anything is read or written). DLOCK__LUA_COMMIT(k, t):
 * a committing copy (t, an ARGV, > 0) writes its own tombstone with PX t
 * in the same script as its effect. tests/docs/rules_check.py checks that
 * every acquire and release script of src/ uses them. */
#define DLOCK__LUA_LATE(k, a)                                                  \
  "if redis.call('exists', " k ") == 1 then return " a " end\n"
#define DLOCK__LUA_COMMIT(k, t)                                                \
  "if " t " and " t " ~= '0' then redis.call('set', " k ", '1', 'px', " t      \
  ") end\n"

/* The first lines of a mutex variant's force-unlock script (plain, fenced,
 * fair): it deletes KEYS[1] only if it is such a lock or nothing. A key of
 * another type is refused with a WRONGTYPE error; a hash whose fields are
 * not all "<client id>:<thread id>" -- Redisson's RLock/RFairLock layout:
 * a 36-character UUID, ':', a decimal thread id -- with a NOTALOCK error
 * naming the first such field (issue 26: a user's hash under the name was
 * deleted; a read-write lock's hash, with its "mode" field, is refused as
 * well: it has its own force unlock). Defines t, the key's type. */
#define DLOCK__LUA_FORCE_CHECK                                                 \
  "local t = redis.call('type', KEYS[1])['ok']\n"                              \
  "if t ~= 'hash' and t ~= 'none' then\n"                                      \
  "  return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. t ..\n"   \
  "    ', not a lock; force unlock refused')\n"                                \
  "end\n"                                                                      \
  "if t == 'hash' then\n"                                                      \
  "  local x = '%x%x%x%x'\n"                                                   \
  "  local pat = '^' .. x .. x .. '%-' .. x .. '%-' .. x .. '%-' .. x ..\n"    \
  "    '%-' .. x .. x .. x .. ':%d+$'\n"                                       \
  "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"                    \
  "    if not string.find(f, pat) then\n"                                      \
  "      return redis.error_reply('NOTALOCK ' .. KEYS[1] .. ' is a hash but "  \
  "'\n"                                                                        \
  "        .. 'not a lock: its field \\'' ..\n"                                \
  "        string.gsub(string.sub(f, 1, 80), '%c', '?') ..\n"                  \
  "        '\\' is not <client id>:<thread id>; force unlock refused')\n"      \
  "    end\n"                                                                  \
  "  end\n"                                                                    \
  "end\n"

/* The direct hand-over, shared by the unlock and decline scripts (lock,
 * queue, queue deadlines, grant channel prefix, marker, self, publish): pops
 * queue entries "<field>|<lease>|<wait id>" until a grant published to the
 * entry's client reaches a subscriber, writes that field with count 1 and
 * the entry's lease, and records the hand-over in the marker (the field and
 * the wait id, TTL = the lease). Skips entries whose deadline passed and
 * entries of `self`. Returns true if it handed the lock over. */
#define DLOCK__LUA_HANDOVER                                                    \
  "local function handover(lock, q, waits, gp, marker, self, pub)\n"           \
  "  local now = nil\n"                                                        \
  "  while true do\n"                                                          \
  "    local w = redis.call('lpop', q)\n"                                      \
  "    if not w then\n"                                                        \
  "      redis.call('del', waits)\n"                                           \
  "      return false\n"                                                       \
  "    end\n"                                                                  \
  "    local owner, lease, wid = string.match(w, '^(.+)|(%d+)|(%x+)$')\n"      \
  "    local dl = wid and redis.call('hget', waits, wid)\n"                    \
  "    if wid then redis.call('hdel', waits, wid, 't' .. wid) end\n"           \
  "    local live = dl and owner ~= self\n"                                    \
  "    if live and dl ~= '0' then\n"                                           \
  "      if not now then\n"                                                    \
  "        local t = redis.call('time')\n"                                     \
  "        now = t[1] * 1000 + math.floor(t[2] / 1000)\n"                      \
  "      end\n"                                                                \
  "      live = tonumber(dl) > now\n"                                          \
  "    end\n"                                                                  \
  "    local sep = live and string.find(owner, ':', 1, true)\n"                \
  "    if sep and redis.call(pub, gp .. ':' .. string.sub(owner, 1, sep - "    \
  "1),\n"                                                                      \
  "        string.sub(owner, sep + 1) .. '|' .. wid) > 0 then\n"               \
  "      redis.call('hset', lock, owner, 1)\n"                                 \
  "      redis.call('pexpire', lock, lease)\n"                                 \
  "      redis.call('set', marker, owner .. '|' .. wid, 'px', lease)\n"        \
  "      if redis.call('llen', q) == 0 then redis.call('del', waits) end\n"    \
  "      return true\n"                                                        \
  "    end\n"                                                                  \
  "  end\n"                                                                    \
  "end\n"

/* The default policy of the final unlock (issue 30), Go's sync.Mutex
 * normal/starvation modes in the unlock script (lock, Redisson channel,
 * queue, queue deadlines, grant channel prefix, marker, self, publish).
 * Two clocks decide, both kept in the queue's deadlines hash:
 *   - the head's slice: DLOCK__SLICE_MS (or DLOCK__SLICE_N barging
 *     unlocks) from the first unlock that finds it at the head ("h" =
 *     "<wait id>|<ms>|<count>");
 *   - the head's age: how long it has waited since it joined the queue
 *     ("t<wait id>" = its enqueue time, server ms, written by the acquire
 *     script that queued it).
 * While the head is in its slice and younger than DLOCK__STARVE_MS (normal
 * mode) the lock is freed: the releaser, or any arrival, takes it directly
 * with its next attempt (barging, no cross-process hand-off). The slice's
 * first unlock wakes the head (a retry message "<tid>|<wait id>|r" on its
 * grant channel: it attempts at once, and again when its slice ends, so a
 * lock left free is taken) and publishes "0" when the channel has more
 * subscribers than the queue has entries plus the releaser's client (so
 * someone listens who is not queued: a Redisson waiter, a dlock waiter not
 * yet queued) -- dlock's queued waiters are not woken in a herd; later
 * unlocks of the slice wake nobody. The count ends a slice early on a fast
 * machine, so every process gets the same number of acquisitions a round.
 * Once the slice is over, or the head has waited DLOCK__STARVE_MS in all
 * (starvation mode), the lock goes straight to the head (handover). The
 * age bounds every wait (Go: a waiter that waited 1 ms in all), whatever
 * the number of waiters ahead; the slices alone would allow one slice per
 * waiter ahead. An empty queue: the lock is freed and "0" published. A
 * head whose deadline passed or whose client is gone is never waited for:
 * handover skips it. An entry with no "t" field (queued by an older
 * client) has no age: its slice alone decides. */
#ifndef DLOCK__SLICE_MS /* a -D overrides them for measurements */
#define DLOCK__SLICE_MS "6"
#endif
#ifndef DLOCK__SLICE_N
#define DLOCK__SLICE_N "12"
#endif
#ifndef DLOCK__STARVE_MS
#define DLOCK__STARVE_MS "20"
#endif
#define DLOCK__LUA_POLICY                                                      \
  "local function release(lock, ch, q, waits, gp, marker, self, pub)\n"        \
  "  local head = redis.call('lindex', q, 0)\n"                                \
  "  if not head then\n"                                                       \
  "    redis.call(pub, ch, '0')\n"                                             \
  "    return\n"                                                               \
  "  end\n"                                                                    \
  "  local owner, wid = string.match(head, '^(.+)|%d+|(%x+)$')\n"              \
  "  local t = redis.call('time')\n"                                           \
  "  local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"                      \
  "  local mine = wid and owner ~= self\n"                                     \
  "  local h = mine and redis.call('hget', waits, 'h')\n"                      \
  "  local hw, hs, hn = nil, nil, nil\n"                                       \
  "  if h then hw, hs, hn = string.match(h, '^(%x+)|(%d+)|(%d+)$') end\n"      \
  "  local e = mine and redis.call('hget', waits, 't' .. wid)\n"               \
  "  local young = mine and (not e or\n"                                       \
  "    now - tonumber(e) < " DLOCK__STARVE_MS ")\n"                            \
  "  if young and hw ~= wid then\n"                                            \
  "    local dl = redis.call('hget', waits, wid)\n"                            \
  "    local sep = string.find(owner, ':', 1, true)\n"                         \
  "    if dl and sep and (dl == '0' or tonumber(dl) > now) then\n"             \
  "      redis.call('hset', waits, 'h', wid .. '|' .. now .. '|0')\n"          \
  "      if redis.call(pub, gp .. ':' .. string.sub(owner, 1, sep - 1),\n"     \
  "          string.sub(owner, sep + 1) .. '|' .. wid .. '|r') > 0 then\n"     \
  "        local ns = redis.pcall('pubsub', pub == 'SPUBLISH' and\n"           \
  "          'shardnumsub' or 'numsub', ch)\n"                                 \
  "        ns = not ns.err and ns[2]\n"                                        \
  "        if not ns or ns > #redis.call('lrange', q, 0, ns - 1) + 1 then\n"   \
  "          redis.call(pub, ch, '0')\n"                                       \
  "        end\n"                                                              \
  "        return\n"                                                           \
  "      end\n"                                                                \
  "    end\n"                                                                  \
  "  elseif young and now - tonumber(hs) < " DLOCK__SLICE_MS " and\n"          \
  "      tonumber(hn) < " DLOCK__SLICE_N " then\n"                             \
  "    redis.call('hset', waits, 'h', wid .. '|' .. hs .. '|' .. (hn + 1))\n"  \
  "    return\n"                                                               \
  "  end\n"                                                                    \
  "  if not handover(lock, q, waits, gp, marker, self, pub) then\n"            \
  "    redis.call(pub, ch, '0')\n"                                             \
  "  end\n"                                                                    \
  "end\n"

/* One name, one kind (issue 25.6): every acquire script checks the shape
 * of the key before it writes, so a name held by one kind of lock refuses
 * every other kind instead of being rewritten. The shapes: a mutex hash
 * (plain, fair, fenced, Redlock: only "<uuid>:<tid>" fields), a read-write
 * lock hash (it has the field "mode"). A key of another type (a
 * semaphore's or latch's string, any other data) is no lock: Redis's own
 * WRONGTYPE error, DLOCK_EREDIS naming the key (error.c), as before.
 * - kind_of(k): 'none', 'mutex' or 'rwlock'; raises WRONGTYPE for a key
 *   that is no hash.
 * - busy_ttl(k): what a refused acquire answers, the holder's PTTL -- so a
 *   waiting call waits as for any holder (1000 for a hash without a TTL,
 *   which no lock leaves: waits re-check once a second). */
#define DLOCK__LUA_KIND                                                        \
  "local function kind_of(k)\n"                                                \
  "  local t = redis.call('type', k)['ok']\n"                                  \
  "  if t == 'none' then return t end\n"                                       \
  "  if redis.call('hexists', k, 'mode') == 1 then return 'rwlock' end\n"      \
  "  return 'mutex'\n"                                                         \
  "end\n"                                                                      \
  "local function busy_ttl(k)\n"                                               \
  "  local p = redis.call('pttl', k)\n"                                        \
  "  if p < 0 then return 1000 end\n"                                          \
  "  return p\n"                                                               \
  "end\n"

/* Redisson naming rules (RedissonObject.prefixName / suffixName):
 * prefix_name(p, n) = p ":{" n "}", or p ":" n when n already contains '{'.
 * suffix_name(n, s) = "{" n "}:" s, or n ":" s when n contains '{'. */
void dlock__prefix_name(dlock__sb *b, const char *prefix, const char *name);
/* dlock's own keys and channels (hand-over queue, grant channel): like
 * prefix_name but never ambiguous -- a name without '{' is wrapped,
 * p ":{" n "}", a name with one is appended after a double colon, p "::" n,
 * so "x" and "{x}" get different keys (Redisson's rule gives both
 * p ":{x}"). The hash tag, hence the cluster slot, is the lock key's. */
void dlock__own_name(dlock__sb *b, const char *prefix, const char *name);
/* The name back from dlock__own_name(prefix, name) = key[0..len): 0 (name
 * appended to *name) or -1 (not such a key, or out of memory). */
int dlock__own_name_back(const char *prefix, const char *key, size_t len,
                         dlock__sb *name);

typedef struct dlock__chobj dlock__chobj;

/* What distinguishes the counting kinds (semaphore, latch): an ops table,
 * as the mutex variants have (counter.c runs the common parts). */
typedef struct dlock__counter_kind {
  const char *name; /* "semaphore", "latch": messages */
  void (*channel)(dlock__sb *b, const char *name);
  int wake_policy;    /* DLOCK__WAKE_COUNT / DLOCK__WAKE_ALL */
  int64_t recheck_ms; /* longest sleep without a check (pub/sub is lossy) */
  /* One check of the waited-for condition (a permit taken, the latch
   * open): 1 done, 0 not yet, or a negative code. */
  int (*ready)(dlock__chobj *o);
} dlock__counter_kind;

/* The part of a counting kind that is a client, a name and one pub/sub
 * channel: the first member of dlock_sem and dlock_latch. Name and channel
 * share one allocation. */
struct dlock__chobj {
  const dlock__counter_kind *kind;
  dlock_client *c;
  char *name;
  size_t name_len;
  char *channel;
  size_t channel_len;
  /* Request id of this object's last state change whose reply came back
   * ("" = none): its once key is no longer needed and is deleted by the
   * next change (see dlock__once_begin). */
  pthread_mutex_t once_mu;
  char once_prev[33];
};
/* Allocates size bytes (a struct whose first member is a dlock__chobj),
 * checks c and name (messages name k->name), copies name and builds the
 * channel. 0 and *out, or DLOCK_EINVAL / DLOCK_EFORK / DLOCK_ENOMEM with
 * nothing left to free. The object holds a reference on c. */
int dlock__counter_new(dlock_client *c, const char *name,
                       const dlock__counter_kind *k, size_t size, void **out);
/* Frees what dlock__counter_new made (NULL accepted). */
void dlock__counter_free(dlock__chobj *o);
/* The prologue of a public call: DLOCK_EINVAL ("<kind> is NULL") or the
 * client's check. */
int dlock__counter_check(const dlock__chobj *o, const char *kind);
/* The public read of a count: dlock__counter_check, v checked (message
 * names vname), then dlock__counter_get. */
int dlock__counter_read(dlock__chobj *o, const char *kind, long long *v,
                        const char *vname);
/* GET of the count as an integer (absent: 0). 0 or a code. */
int dlock__counter_get(dlock__chobj *o, long long *v);
/* The wait of a counting kind: checks ready() at once, then (wait_ms != 0)
 * subscribes and checks after every wake-up until done or the budget
 * ends. 0 done; DLOCK_EBUSY (no wait, not ready) or DLOCK_ETIMEDOUT with
 * no message (the caller words them); another code with its message. */
int dlock__counter_wait(dlock__chobj *o, long long wait_ms);

/* Request ids that make a counting script (semaphore acquire/release,
 * latch count-down) count once however often the router re-sends it. The
 * script gets KEYS "once" = dlock_once:{name}:<rid> (the name's hash tag,
 * so one slot), set with PX once_ttl_ms when the script changes the count
 * -- before it changes it, so a failing SET leaves nothing half done --
 * and a re-sent copy that finds it returns without counting again; the
 * router sends no copy past once_window_ms after the first (dlock__cmd's
 * resend_window_ms), so every copy it sends finds the key. Each
 * call also deletes the once key of the object's previous completed change
 * (KEYS "prev", present when has_prev), so a busy object keeps about one
 * such key, not one per call. Used by one call on one thread; begin fills
 * w (0 or DLOCK_ENOMEM), end records the outcome and frees w. */
typedef struct dlock__once {
  char rid[33];
  dlock__sb key;  /* this call's once key */
  dlock__sb prev; /* the previous change's once key, when has_prev */
  int has_prev;
} dlock__once;
int dlock__once_begin(dlock__chobj *o, dlock__once *w);
/* stored = the reply came back and says the script stored its once key
 * (it changed the count): the key is no longer needed by a re-send and
 * becomes the object's "previous", deleted by the next change. */
void dlock__once_end(dlock__chobj *o, dlock__once *w, int stored);
struct dlock__script;
/* Runs a counting script of o once (dlock__once): KEYS = [name, (channel
 * when with_channel,) once, (prev)], ARGV = args[0..nargs) (nargs <= 3)
 * then the once key's TTL. The script returns 1 when it changed the count
 * (now or by an earlier copy), 0 when nothing changed; so does this, or a
 * negative code. */
int dlock__chobj_count(dlock__chobj *o, const struct dlock__script *sc,
                       int with_channel, int nargs, const char **args,
                       const size_t *alens);
void dlock__suffix_name(dlock__sb *b, const char *name, const char *suffix);

/* A tiny string-keyed hash map (chaining); keys are borrowed. */
typedef struct dlock__map_ent {
  struct dlock__map_ent *next;
  const char *key;
  size_t klen;
  uint64_t hash;
  void *val;
} dlock__map_ent;
typedef struct dlock__map {
  dlock__map_ent **b;
  size_t nb, n;
} dlock__map;
int dlock__map_init(dlock__map *m, size_t nb);
void dlock__map_free(dlock__map *m);
void *dlock__map_get(const dlock__map *m, const char *key, size_t klen);
int dlock__map_put(dlock__map *m, const char *key, size_t klen, void *val);
void *dlock__map_del(dlock__map *m, const char *key, size_t klen);

/* ---- config (client.c) ------------------------------------------------- */

/* 0 if cfg carries the layout record dlock_config_init_sized writes (size:
 * the bytes the caller's header gives the struct, at least the record), else
 * DLOCK_EINVAL with why in the thread's message. */
int dlock__config_check_record(const dlock_config *cfg, size_t size);
/* *out = the caller's config (sized by its own layout record) checked and
 * completed as dlock_client_new does it: 0, or DLOCK_EINVAL / DLOCK_ENOTSUP
 * with the message set. NULL in: all defaults. Strings stay borrowed. */
int dlock__config_resolve(const dlock_config *in, dlock_config *out);
/* How long an unlock latch must live: past every retry of its unlock. */
int64_t dlock__latch_ttl(const dlock_config *cfg);
/* The longest one send of a command can take (connect, handshake, the
 * reply, and the WAIT behind it when cfg.sync_replicas is set). */
int64_t dlock__send_max(const dlock_config *cfg);
/* A counting script's once key (counter.c): its copies are sent within
 * *window ms of the first send (the whole retry policy: every attempt's
 * send_max and pause, and the immediate reconnect-and-resend), and the
 * key lives that window + send_max + a margin (the return value), so a
 * copy that reaches the server within send_max of being sent finds it. */
int64_t dlock__once_ttl(const dlock_config *cfg, int64_t *window);
/* The lowest value dlock_client_new accepts for the int field of
 * dlock_config at byte offset off; INT_MIN for a field without a bound. */
int dlock__config_int_min(size_t off);
/* The pause before retry n (0: the first retry) under cfg's retry delay
 * policy (retry_delay, dlock.h). *prev carries the previous pause between
 * the calls of one retry loop (decorrelated jitter needs it; start it at
 * 0); NULL: none. Any thread. */
int64_t dlock__retry_pause(const dlock_config *cfg, int n, int64_t *prev);
/* The longest pause dlock__retry_pause can return for cfg. */
int64_t dlock__retry_pause_max(const dlock_config *cfg);

/* ---- config files (config.c) -------------------------------------------- */

/* Passes the Redisson settings the file(s) loaded into cfg accepted but
 * ignore to log's hook, one "config_ignored" event (INFO) each. A config
 * that was not loaded from a file: nothing. Called by dlock_client_new and
 * dlock_async_new. */
void dlock__config_log_ignored(const dlock_config *cfg,
                               const dlock_config *log);
/* The name of the setting at byte offset off of cfg for messages: the YAML
 * key it came from when a config file set it, else c_name. */
const char *dlock__config_key(const dlock_config *cfg, size_t off,
                              const char *c_name);

/* ---- URL (url.c) -------------------------------------------------------- */

/* The highest database number a URL may select. */
#define DLOCK__DB_MAX 1000000

typedef struct dlock__hostport {
  char *host;
  int port;
} dlock__hostport;

typedef struct dlock__url {
  int is_unix;
  int tls;    /* rediss:// */
  char *host; /* TCP */
  int port;
  char *path; /* unix */
  char *user, *password;
  int db;
  /* redis-cluster://: the seed nodes (host/port above is the first). */
  int cluster;
  int nseeds;
  char **seed_hosts;
  int *seed_ports;
  /* redis-sentinel:// and rediss-sentinel:// (sentinel.c): host and port
   * above stay unset (the master is asked for); user, password and db are
   * the data nodes'. */
  int sentinel;
  int n_sentinels;
  dlock__hostport *sentinels;
  char *master_name;
  char *sentinel_user, *sentinel_password;
  /* etcd:// and etcds:// (the etcd store, etcd.h): the endpoints, tried in
   * turn; the key prefix ("" none, else ending in '/'); user and password
   * above are etcd's. etcd_tls: 1 for ?tls=1, 2 for etcds:// (tls above
   * stays 0: no SSL_CTX is made, libcurl reads the tls_* files). */
  int etcd;
  int etcd_tls;
  int n_endpoints;
  dlock__hostport *endpoints;
  char *prefix;
} dlock__url;
int dlock__url_parse(const char *url, dlock__url *out);
void dlock__url_free(dlock__url *u);

/* ---- scripts (scripts.c) ------------------------------------------------ */

struct dlock__script {
  const char *name;
  const char *body;
  char sha[41];
  int readonly; /* writes nothing: no WAIT after it (sync.c) */
};

enum {
  DLOCK__S_ACQUIRE,
  DLOCK__S_UNLOCK,
  DLOCK__S_FORCE_UNLOCK,
  DLOCK__S_RENEW,
  DLOCK__S_CANCEL,
  DLOCK__S_DECLINE,
  DLOCK__S_STATUS,
  DLOCK__S_ACQUIRE_FIRST, /* the acquire's common case, fewer KEYS/ARGV */
  DLOCK__S_UNLOCK_LAST,   /* the unlock's common case, fewer KEYS/ARGV */
  DLOCK__S_COUNT_CORE
};
/* Scripts registered by other modules (lock family) go through
 * dlock__script_init on a static dlock__script. */
void dlock__script_init(dlock__script *s);
const dlock__script *dlock__core_script(int id);

/* ---- links: one connection to one server (link.c) ---------------------- */

typedef struct dlock__link dlock__link;

/* The transport of a link: how bytes go over its socket (plain TCP and
 * unix sockets; TLS is a second table). read/write behave like recv/send
 * on the link's socket (> 0 bytes, 0 end of stream, -1 with errno: EAGAIN
 * when a timeout or a non-blocking socket stopped it). pending: bytes the
 * transport has decoded and buffered, which poll(2) on the socket cannot
 * see. close frees the transport's state (not the socket). */
typedef struct dlock__link_ops {
  const char *name;
  ssize_t (*read)(dlock__link *l, void *buf, size_t n);
  ssize_t (*write)(dlock__link *l, const void *buf, size_t n);
  size_t (*pending)(const dlock__link *l);
  void (*close)(dlock__link *l);
} dlock__link_ops;

extern const dlock__link_ops dlock__plain_link_ops;
extern const dlock__link_ops dlock__tls_link_ops;

/* ---- TLS (tls.c) ---- */
/* The client's TLS context from cfg's tls_* fields (CA file/dir or the
 * system store, client certificate and key, verification): 0 and *out, or
 * DLOCK_ETLS (a file that does not load, with OpenSSL's reason) /
 * DLOCK_EINVAL / DLOCK_ENOMEM. */
int dlock__tls_ctx_new(const dlock_config *cfg, void **out);
/* pkcs12.c: loads cfg's PKCS12 stores (tls_truststore, tls_keystore) into
 * the SSL_CTX ctx. 0, DLOCK_ETLS (unreadable, wrong password...) or
 * DLOCK_EINVAL (a Java keystore: the message says how to convert it). */
int dlock__tls_load_pkcs12(void *ctx, const dlock_config *cfg);
/* A store's file name: path without Redisson's file: / file:// prefix. */
const char *dlock__store_path(const char *path);
/* 1 with *kind "JKS" / "JCEKS" when the n bytes at b start a Java keystore
 * (which OpenSSL cannot read), else 0. */
int dlock__store_java_kind(const unsigned char *b, size_t n, const char **kind);
/* "KEY 'PATH' is a Java keystore (KIND) ...: convert it ... keytool ..."
 * into buf. */
int dlock__store_java_hint(char *buf, size_t len, const char *key,
                           const char *path, const char *kind);
void dlock__tls_ctx_free(void *ctx);
/* OpenSSL's queued error in words into buf (the oldest, with last the
 * newest; "no detail from OpenSSL" when none), the queue cleared. */
const char *dlock__tls_err_text(char *buf, size_t n, int last);
/* 1 if the TLS link l presents a client certificate. */
int dlock__tls_has_client_cert(const dlock__link *l);
/* Runs the TLS handshake on l's connected socket to host:port (bounded by
 * timeout_ms), sending `name` as SNI (unless an address) and checking the
 * server as dlock_config.tls_verify `verify` says (the chain unless
 * DLOCK_TLS_VERIFY_NONE; the name too unless also DLOCK_TLS_VERIFY_CA_ONLY);
 * from then on l uses dlock__tls_link_ops. 0, or DLOCK_ETLS with the failed
 * check in words (the caller frees l either way). */
int dlock__tls_attach(dlock__link *l, void *ctx, const char *host,
                      const char *name, int port, int verify, int timeout_ms);

/* The event-loop client's sessions (async_conn.c): the same context,
 * socket BIO (no SIGPIPE) and checks as dlock__tls_attach, driven one
 * non-blocking step at a time. dlock__tls_session: 0 and *out (an SSL
 * over fd, made non-blocking), or -1 with why. dlock__tls_step runs one
 * SSL_connect (op CONNECT: > 0 when done), SSL_read or SSL_write of up to
 * n bytes: > 0 bytes, 0 the stream ended, or a DLOCK__TLS_* below (why
 * says what failed for the ERR_ ones). */
enum {
  DLOCK__TLS_CONNECT,
  DLOCK__TLS_READ,
  DLOCK__TLS_WRITE,
  DLOCK__TLS_WANT_READ = -1,
  DLOCK__TLS_WANT_WRITE = -2,
  DLOCK__TLS_ERR_IO = -3, /* the socket failed */
  DLOCK__TLS_ERR_TLS = -4 /* TLS refused (verification, alert): ETLS */
};
int dlock__tls_session(void *ctx, int fd, const char *name, int verify,
                       void **out, char *why, size_t wn);
void dlock__tls_session_free(void *ssl);
/* 1 when the session offers a client certificate (tls_cert_file). */
int dlock__tls_session_has_cert(void *ssl);
int dlock__tls_step(void *ssl, int op, void *buf, size_t n, char *why,
                    size_t wn);
/* Decoded bytes buffered in the session (poll cannot see them). */
size_t dlock__tls_session_pending(void *ssl);

/* A minimal TLS ClientHello (link.c): a TLS-only port answers it with a
 * TLS record. What both clients probe a plain URL's odd server with. */
extern const unsigned char dlock__tls_client_hello[52];
extern const size_t dlock__tls_client_hello_len;

/* Why a link's last operation failed (dlock__link.err). */
enum {
  DLOCK__LINK_OK,
  DLOCK__LINK_IO,      /* the socket failed (errstr says how) */
  DLOCK__LINK_EOF,     /* the server closed the connection */
  DLOCK__LINK_TIMEOUT, /* no progress within the link's timeout */
  DLOCK__LINK_PROTO,   /* the bytes were not RESP */
  DLOCK__LINK_OOM,
  DLOCK__LINK_TLS /* the TLS layer failed (errstr says how): DLOCK_ETLS */
};

/* Used by one thread at a time (the pool lends it out; the multiplexed
 * connection has one reader and serialises writers). */
struct dlock__link {
  const dlock__link_ops *ops;
  int fd;
  void *tls; /* the transport's state, when it has one */
  redisReader *reader;
  int err; /* DLOCK__LINK_*: the last failure */
  char errstr[192];
  /* The last failure of dlock__link_send_shared: a writer's record apart
   * from err/errstr, which the thread reading the link writes meanwhile. */
  int werr;
  char werrstr[192];
  int read_ms, write_ms; /* timeouts (0 = none), for transports that poll */
  int tls_error;         /* the transport's last failure was TLS's own */
  unsigned addr_gen;     /* Sentinel: the master generation it was made for */
  /* Bytes the last dlock__link_send handed to the transport: 0 after a
   * failed send means the command cannot have reached the server. */
  size_t wrote;
};

/* Connects to url with the client's timeouts (connect_timeout_ms, then
 * command_timeout_ms for every read and write), then AUTH (or PING) and
 * SELECT. 0 and *out (free with dlock__link_free), or DLOCK_ECONN /
 * DLOCK_EAUTH / DLOCK_EREDIS / DLOCK_ENOMEM with the message set. */
int dlock__link_open(dlock_client *c, const dlock__url *url, dlock__link **out);
/* The same with replies (the handshake's, and later ones) awaited at most
 * reply_ms instead of command_timeout_ms (the watchdog's links: a renewal
 * must be answered while its lease runs). */
int dlock__link_open_ms(dlock_client *c, const dlock__url *url, int reply_ms,
                        dlock__link **out);

/* ---- the background I/O guard (link.c) -----------------------------------
 * dlock_client_free must not wait for a background thread stuck in the
 * network, and the renewal path must not wait on it longer than a renewal
 * can afford (issue 38.6, 38.9). A background thread of a client (the
 * renewal and errand threads, the Sentinel watcher, a permits renewer)
 * calls dlock__io_guard once, at its start: from then on each of its waits
 * on a socket -- connect, the plain-or-TLS probe, the TLS handshake, every
 * read, the router's retry pauses -- also ends when abort_fd (the client's
 * abort pipe, written by dlock_client_free) becomes readable; with
 * bound_ms > 0, the connect, probe, TLS handshake and handshake replies of
 * every link it opens wait at most bound_ms; with nowait, it never waits
 * for another thread's cluster map refresh (cluster.c). A link open by any
 * thread polls its client's abort pipe for the open's duration; other
 * threads' reads are unchanged (no extra poll on the hot path). */
void dlock__io_guard(int abort_fd, int bound_ms, int nowait);
int dlock__io_guard_fd(void); /* the calling thread's abort fd, or -1 */
int dlock__io_guard_nowait(void);
/* poll(2) of fd for events and of the guard's abort fd, at most ms (<= 0:
 * no bound), EINTR retried: 1 ready, 0 timed out, -2 aborted, -1 failed
 * (errno). */
int dlock__io_poll(int fd, short events, int ms);
/* Sleeps ms, or less when the guard's abort fd becomes readable. */
void dlock__io_pause(int64_t ms);
/* Closes the socket (untracking it: see dlock__fd_track) and frees l.
 * Accepts NULL. */
void dlock__link_free(dlock__link *l);
/* Read and write timeouts of the socket; 0 = none (block, or poll first). */
void dlock__link_set_timeout(dlock__link *l, int read_ms, int write_ms);
/* The read timeout alone; on a shared connection only its reader may call
 * it (it reads l->read_ms outside the connection's mutex: conn.c
 * mux_read). */
void dlock__link_set_read_timeout(dlock__link *l, int read_ms);
/* Writes all of p. 0, or -1 with l->err set. */
int dlock__link_send(dlock__link *l, const char *p, size_t len);
/* The same on a link another thread reads at the same time (the router's
 * shared connection: writers hold its mutex, the reader does not): 0, or
 * -1 with l->werr / l->werrstr set, never l->err (issue 26: TSan saw the
 * two threads write l->err at once while connections were killed). */
int dlock__link_send_shared(dlock__link *l, const char *p, size_t len);
/* One read from the socket into the reader. 0, or -1 with l->err set. */
int dlock__link_read(dlock__link *l);
/* The next complete reply already read, without I/O: 0 with *out (NULL
 * when none is complete), or -1 (protocol error, l->err set). */
int dlock__link_next(dlock__link *l, redisReply **out);
/* The next reply, reading as needed; NULL with l->err set on failure. */
redisReply *dlock__link_reply(dlock__link *l);
/* Bytes the transport holds that poll(2) cannot see (read them first). */
size_t dlock__link_pending(const dlock__link *l);
/* One command: written, then its reply read. NULL with l->err set. */
redisReply *dlock__link_cmd(dlock__link *l, int argc, const char **argv,
                            const size_t *lens);
/* Sets the thread's message for l's failure of `what` and returns the
 * code: DLOCK_ECONN ("no reply within timeout_ms ms", "server closed the
 * connection", the socket's error), DLOCK_EPROTO or DLOCK_ENOMEM. */
int dlock__link_fail(const dlock__link *l, int timeout_ms, const char *what);
/* 1 if the server's error reply s means missing or wrong credentials. */
int dlock__is_auth_error(const char *s);

/* ---- nodes and the router (conn.c) -------------------------------------- */

typedef struct dlock__conn {
  struct dlock__conn *next;
  dlock__link *link;
} dlock__conn;

/* A request waiting in a multiplexed connection (conn.c). */
typedef struct dlock__mreq dlock__mreq;

/* One connection shared by all API threads, commands pipelined: whoever
 * submits writes its command at once; one thread at a time (the reader)
 * reads replies in order and hands each to its waiting thread. */
typedef struct dlock__mux {
  pthread_mutex_t mu;
  pthread_cond_t state_cv;  /* a broken connection was closed */
  dlock__link *link;        /* NULL: not connected */
  unsigned gen;             /* increases with every new link */
  int reader;               /* a thread is reading replies */
  int broken;               /* a write failed; the reader closes the link */
  dlock__mreq *head, *tail; /* written, waiting for their replies */
} dlock__mux;

/* The replica count of the master as cfg.sync_replicas = -1 needs it. */
typedef struct dlock__sync {
  atomic_int replicas;     /* online replicas; -1 unknown */
  atomic_llong checked_at; /* monotonic ms of the last INFO */
} dlock__sync;

typedef struct dlock__node {
  dlock_client *c;
  const dlock__url *url;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dlock__conn *idle;
  int total;
  int max;
  int use_mux; /* cfg.multiplex */
  dlock__mux mux;
  dlock__sync sync; /* a cluster master's replica count (sync.c) */
  /* Observability (conn.c): up = the command connection is open (a gauge
   * dlock_client_stats reads without a lock); dropped = a connection
   * failed, the next one made is a reconnect. */
  atomic_int up;
  atomic_int dropped;
} dlock__node;
/* 1 if the command connection of n is up (dlock_client_stats). */
int dlock__node_up(dlock__node *n);

/* One command. argv[0..argc) with lengths. When script is set, argv[0] and
 * argv[1] are filled in by the router (EVALSHA sha, or EVAL body after a
 * NOSCRIPT). key routes the command; NULL means "any node". */
typedef struct dlock__cmd {
  const char *key;
  const dlock__script *script;
  int argc;
  const char **argv;
  const size_t *argvlen;
  /* 0: the retry policy. 1: one attempt, but a pooled connection found
   * dead on use is replaced once (Redlock votes, idempotent). 2: sent at
   * most once, whatever happens (force unlock). */
  int no_retry;
  /* > 0: WAIT for this many replicas is pipelined after the command on
   * the same connection (sync.c); its answer goes to *acks. */
  int wait_replicas;
  int sync_timeout_ms; /* WAIT's timeout */
  long long *acks;
  /* > 0: no copy is sent more than this many ms after the first send
   * started (the retry policy ends there with the last error): a counting
   * script's once key (counter.c) lives longer than this by the longest
   * one send can take, so every copy the router sends finds it. */
  int64_t resend_window_ms;
} dlock__cmd;

/* pthread_create that returns once the new thread runs fn: the thread's
 * start-up (the C library's and a sanitizer's allocations) is over, so a
 * fork() right after dlock_client_new cannot copy an allocator lock that a
 * starting thread held (issue 9.9: a fork child hung in ASan's allocator).
 * 0 or the pthread_create error. */
int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* A lock object's reference on its client (see dlock_client.refs). */
void dlock__client_ref(dlock_client *c);
void dlock__client_unref(dlock_client *c);

/* How many times the calling thread's last dlock__exec sent its command
 * (1 = no re-send: no other copy of it exists). */
int dlock__exec_sends(void);
/* 1 if the server's error reply s is a transient state the retry policy
 * retries (LOADING, BUSY, TRYAGAIN, MASTERDOWN). */
int dlock__retryable_reply(const char *s);
/* Runs cmd with the retry policy; *out gets the reply (freeReplyObject).
 * Error replies become DLOCK_EREDIS (text in dlock_last_error), except the
 * ones the router handles (NOSCRIPT, LOADING, BUSY, TRYAGAIN). */
int dlock__exec(dlock_client *c, const dlock__cmd *cmd, redisReply **out);
/* The set of the library's sockets, released in fork children (process.c):
 * track after a connection is made, untrack before it is closed. */
void dlock__fd_track(int fd);
void dlock__fd_untrack(int fd);
/* Appends the RESP encoding of argv to b. */
void dlock__resp_argv(dlock__sb *b, int argc, const char **argv,
                      const size_t *lens);
/* Convenience for scripts: keys then args. */
int dlock__eval(dlock_client *c, const dlock__script *s, int nkeys,
                const char **keys, const size_t *klens, int nargs,
                const char **args, const size_t *alens, redisReply **out);
/* dlock__eval sent at most once (no_retry 2), for scripts whose second run
 * could do harm (force unlock: a retry could delete a lock that another
 * client took in between). A connection error or timeout leaves the
 * outcome unknown (DLOCK_ECONN). A NOSCRIPT reply (nothing ran) is still
 * answered with EVAL. */
int dlock__eval_once(dlock_client *c, const dlock__script *s, int nkeys,
                     const char **keys, const size_t *klens, int nargs,
                     const char **args, const size_t *alens, redisReply **out);
/* How dlock__eval_how sends a script: no_retry as dlock__cmd's; no_sync
 * 1 sends no WAIT after it even with cfg.sync_replicas (bookkeeping and
 * renewals: nothing a replica must confirm, and a WAIT would make them
 * sit out sync_timeout_ms when replicas lag); resend_window_ms as
 * dlock__cmd's. */
typedef struct dlock__send_how {
  int no_retry;
  int no_sync;
  int64_t resend_window_ms;
} dlock__send_how;
int dlock__eval_how(dlock_client *c, const dlock__script *s, int nkeys,
                    const char **keys, const size_t *klens, int nargs,
                    const char **args, const size_t *alens,
                    const dlock__send_how *how, redisReply **out);
/* The node of url with at most max pooled connections: 0 or DLOCK_ENOMEM.
 * Connections are made on first use (or by dlock__node_warm). */
int dlock__node_init(dlock__node *n, dlock_client *c, const dlock__url *url,
                     int max);
void dlock__node_destroy(dlock__node *n);
/* In a forked child: frees the node's connections, touches no mutex. */
void dlock__node_free_memory(dlock__node *n);
/* Establishes one pooled connection now (non-lazy client creation). */
int dlock__node_warm(dlock__node *n);

/* ---- Redis Cluster (cluster.c) ------------------------------------------- */

#define DLOCK__SLOTS 16384
#define DLOCK__CLUSTER_MAX_NODES 512
/* The slot map is refreshed at least this often (ms). */
#define DLOCK__CLUSTER_REFRESH_MS 5000
/* ... and at most once per this many ms. */
#define DLOCK__CLUSTER_MIN_REFRESH_MS 50

typedef struct dlock__cnode dlock__cnode;

/* The topology of a redis-cluster:// client: nodes[0..n) are every master
 * seen (never freed before the client), owner[slot] the index of the
 * slot's master or -1. */
typedef struct dlock__cluster {
  pthread_mutex_t mu;         /* node creation */
  pthread_mutex_t refresh_mu; /* one refresh at a time */
  dlock__cnode *nodes[DLOCK__CLUSTER_MAX_NODES];
  atomic_int n;
  _Atomic int16_t owner[DLOCK__SLOTS];
  atomic_int stale;             /* refresh before the next lookup */
  atomic_int sharded;           /* the servers have SSUBSCRIBE/SPUBLISH (7+) */
  atomic_uint epoch;            /* bumped by every change of the map */
  _Atomic int64_t refreshed_at; /* monotonic ms; 0 never */
  int64_t tried_at;             /* last round of questions (refresh_mu) */
} dlock__cluster;

/* Walks a CLUSTER SHARDS (shards = 1; tls picks the tls-port) or CLUSTER
 * SLOTS reply (an empty ip is `asked`, the node that answered), calling
 * fn(ctx, lo, hi, host, port) for each master's slot range. 0, or fn's
 * non-zero. Pure: both clients' maps are filled through it. */
typedef int dlock__slots_fn(void *ctx, long long lo, long long hi,
                            const char *host, int port);
int dlock__cluster_parse(const redisReply *r, int shards, int tls,
                         const char *asked, dlock__slots_fn *fn, void *ctx);
/* "MOVED <slot> <host>:<port>" / "ASK ..." (verb): 1 with slot, host
 * (cap bytes) and port, else 0 (conn.c; both clients). */
int dlock__parse_redirect(const char *s, const char *verb, unsigned *slot,
                          char *host, size_t cap, int *port);
/* The slot of key[0..len): CRC16 of its hash tag (or the whole key) mod
 * 16384. */
unsigned dlock__key_slot(const char *key, size_t len);
/* On a cluster client: DLOCK_EINVAL (message naming kind and name) when
 * the keys and channels derived from name would not share one slot (a
 * name with '{' but no valid hash tag). Else 0. The counting kinds compare
 * their key's and channel's slots themselves (counter.c). */
int dlock__cluster_name_check(const dlock_client *c, const char *name,
                              const char *kind);
/* c->cl for a redis-cluster:// URL (no I/O): 0 or DLOCK_ENOMEM. */
int dlock__cluster_init(dlock_client *c);
/* Frees the topology and its nodes (closing their connections unless
 * forked). NULL c->cl accepted. */
void dlock__cluster_destroy(dlock_client *c, int forked);
/* Asks the known masters, then the seeds, for the slot map. 0 or
 * DLOCK_ECONN / DLOCK_ENOMEM (the old map is kept). */
int dlock__cluster_refresh(dlock_client *c);
/* The master serving key (NULL: any), refreshing the map first when it is
 * stale; NULL with the message set when no master is known. */
dlock__node *dlock__cluster_route(dlock_client *c, const char *key);
/* The master serving key as the map says now (no refresh); NULL if none. */
dlock__node *dlock__cluster_lookup(dlock_client *c, const char *key);
/* "SPUBLISH" on a cluster with sharded pub/sub, else "PUBLISH": the
 * publish command the scripts are given. */
const char *dlock__publish_cmd(const dlock_client *c);
/* The node at host:port, made when missing (redirect targets); NULL on
 * OOM or a full table. */
dlock__node *dlock__cluster_node_at(dlock_client *c, const char *host,
                                    int port);
/* A MOVED reply: slot now belongs to `to`; the map is refreshed soon. */
void dlock__cluster_moved(dlock_client *c, unsigned slot, dlock__node *to);
void dlock__cluster_mark_stale(dlock_client *c);
/* The distinct masters owning slots, up to max into out; returns how many
 * there are. */
int dlock__cluster_masters(dlock_client *c, dlock__node **out, int max);
/* ---- Sentinel (sentinel.c) ---------------------------------------------- */

/* Where a redis-sentinel:// client's master is. mu guards host/port/known;
 * gen changes whenever the address changes (links made for an older gen
 * are stale: conn.c, pubsub.c and watchdog.c drop them). The watcher
 * thread listens for +switch-master on one sentinel at a time. */
typedef struct dlock__sentinel {
  pthread_mutex_t mu;
  pthread_mutex_t disc_mu; /* one discovery at a time */
  char *host;              /* the last master found; NULL: none yet */
  int port;
  int known; /* host is current (0: ask the sentinels again) */
  int next;  /* the sentinel to ask first */
  atomic_uint gen;
  atomic_int stop;
  int pipe[2]; /* wakes the watcher */
  pthread_t thread;
  int started;
} dlock__sentinel;

/* The mutexes (a no-op for other URLs): 0 or DLOCK_ENOMEM. */
int dlock__sentinel_init(dlock_client *c);
/* The watcher thread (sentinel clients only): 0 or DLOCK_ENOMEM. */
int dlock__sentinel_start(dlock_client *c);
void dlock__sentinel_stop(dlock_client *c);
/* forked: in a fork child (touches no mutex). */
void dlock__sentinel_destroy(dlock_client *c, int forked);
/* link_open's hook: for a sentinel URL, *target = url with the current
 * master's host and port (host copied into buf) and *gen its generation;
 * discovers the master first when unknown. 0, or DLOCK_ECONN (no sentinel
 * named a master that says it is one: the message lists why per sentinel)
 * / DLOCK_ENOMEM. */
int dlock__sentinel_target(dlock_client *c, dlock__url *target, char *buf,
                           size_t n, unsigned *gen);
/* The master of generation gen failed (refused a connection, answered
 * READONLY): the next target asks the sentinels again. */
void dlock__sentinel_invalidate(dlock_client *c, unsigned gen);
/* The pure parts, shared with the event-loop client (async_route.c):
 * - SENTINEL GET-MASTER-ADDR-BY-NAME's reply: 0 with host (n bytes) and
 *   port, or DLOCK_EREDIS (an error reply) / DLOCK_ECONN (no such master)
 *   with why;
 * - ROLE's reply: NULL when "master", else what it is instead;
 * - a +switch-master payload: 1 with the new address when it names `name`;
 * - a +promoted-slave payload: 1 when it names `name`. */
int dlock__sentinel_addr_reply(const redisReply *r, const char *name,
                               char *host, size_t n, int *port, char *why,
                               size_t wn);
const char *dlock__sentinel_role(const redisReply *r);
int dlock__sentinel_switch_msg(const char *payload, const char *name,
                               char *host, size_t n, int *port);
int dlock__sentinel_promoted_msg(const char *payload, const char *name);
/* 1 if l was made for a master that is no longer the master. */
int dlock__link_stale(dlock_client *c, const dlock__link *l);
/* A redis:// URL at a Sentinel's port (hints.c): on l, whose server just
 * refused a data command as unknown, asks SENTINEL MASTERS (by the
 * monotonic deadline): DLOCK_EREDIS with "this is a Sentinel: use
 * redis-sentinel://<where>/<master>" when it is one, else 0. */
int dlock__sentinel_port_hint(dlock__link *l, const char *where,
                              int64_t deadline);
/* The same for the router's rc (a script refused as an unknown command on
 * a redis:// client): the new code and message, or rc as it was. */
int dlock__explain_sentinel_port(dlock_client *c, int rc);

/* ---- replica sync (sync.c) ---------------------------------------------- */

void dlock__sync_init(dlock__sync *s);
/* How many replicas the next write on key's master must wait for (0: send
 * no WAIT). May ask INFO replication (its failure is not the caller's: 0).
 * On a cluster each master's count is its own (dlock__node.sync). */
int dlock__sync_want(dlock_client *c, const char *key);
/* Judges WAIT's answer (acks, or -1 for an error reply) after a write that
 * waited for want: sets the thread's shortfall flag (dlock__sync_short)
 * when fewer replicas confirmed than required. */
void dlock__sync_done(dlock_client *c, const char *key, int want,
                      long long acks);
/* The replicas INFO replication's reply lists as online, or -1. */
int dlock__sync_parse_replicas(const redisReply *r);
/* off = 1: the calling thread's writes send no WAIT until off = 0 (the
 * undo of an unconfirmed acquisition: nothing to confirm). */
void dlock__sync_pause(int off);
/* Clears the calling thread's shortfall flag (every eval does first). */
void dlock__sync_reset(void);
/* The router sent a WAIT with this timeout (ms) on the calling thread:
 * sync_timeout_ms, or less when the call's wait budget ends sooner. */
void dlock__sync_waited(int ms);
/* 1 if the calling thread's last eval was a write the replicas did not
 * confirm in time (cfg.sync_timeout_ms); its message in *why. */
int dlock__sync_short(const char **why);

/* ---- client ------------------------------------------------------------- */

typedef struct dlock__slot dlock__slot;
typedef struct dlock__sub dlock__sub;
typedef struct dlock__hold dlock__hold;
typedef struct dlock__mutex_ops dlock__mutex_ops;

/* The pub/sub side of a client (pubsub.c): one subscriber connection and
 * thread, the wait entries by channel. dlock__pubsub_init makes the mutex,
 * maps and wake pipe; dlock__pubsub_start the thread; _stop joins it and
 * wakes every waiter; _destroy frees the rest. */
typedef struct dlock__pubsub {
  pthread_mutex_t mu;
  dlock__map subs;   /* shared channel -> dlock__sub */
  atomic_int n_subs; /* entries in subs (a lock-free hint) */
  dlock__map grants; /* grant channel -> dlock__sub */
  /* The time (ms) by which the thread looks at the entries again, -1 =
   * only when poked (set by the thread under mu): a waiter that leaves an
   * entry pokes it only if its linger would end before that. */
  int64_t wake_at;
  dlock__sub *list;
  /* Grants that reached no wait (its thread gave up and its cancel could
   * not leave the queue): the errand thread sends their declines. */
  struct dlock__decline *declines;
  int pipe[2]; /* wakes the thread (also from a signal handler) */
  pthread_t thread;
  int started;
  int connected;
} dlock__pubsub;

/* The hold registry (holds.c): one entry per lock name and family with
 * live objects, each with its per-thread hold records. mu also guards the
 * watchdog's lists (dlock__watchdog) and every dlock__hold. */
typedef struct dlock__registry {
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* monotonic clock: the watchdog's sleeps */
  dlock__map locks;   /* dlock__lockent by (family, name) */
  dlock__hold *grave; /* freed holds a renewal batch may still see */
} dlock__registry;

/* Renewal and local deadlines (watchdog.c): the holds the watchdog renews,
 * its thread and the expiry thread. Guarded by the registry's mutex. */
typedef struct dlock__watchdog {
  dlock__hold *head; /* holds renewed by the watchdog */
  size_t count;
  int busy; /* a renewal batch is in flight */
  int stop;
  pthread_t thread;
  int started;
  pthread_cond_t exp_cv;
  pthread_t exp_thread;
  int exp_started;
  int64_t exp_wake_at; /* when the expiry thread looks next */
} dlock__watchdog;

/* The errand thread (errand.c): everything a client does in the background
 * that is neither a renewal nor a loss report -- the info key, declines,
 * cluster map refreshes the renewal thread asks for -- on connections of
 * its own. Guarded by the registry's mutex. */
typedef struct dlock__errand {
  pthread_t thread;
  int started, stop;
  pthread_cond_t cv; /* monotonic: its sleeps (with reg.mu) */
  /* The client's info key (clientinfo.c): monotonic ms of its next write;
   * 0 until the client's first hold asks for it. */
  int64_t info_at;
  int info_running;     /* a write is in flight (info_tick) */
  int info_dirty;       /* a hold began since the last write started */
  int64_t info_end;     /* monotonic ms the last write ended */
  int64_t since_check;  /* monotonic ms of the next look at hold ages (0:
                           none; dlock__info_since_later) */
  int declines;         /* the pub/sub thread queued declines (dlock__pubsub) */
  int refresh;          /* the renewal thread asks for a cluster map refresh */
  atomic_uint declined; /* declines answered by Redis (for tests) */
} dlock__errand;

struct dlock_client {
  dlock_config cfg;
  char *url_str;
  dlock__url url;
  char id[DLOCK__UUID_LEN + 1];
  unsigned fork_gen;
  atomic_int closing;
  /* The caller's reference plus one per lock object: objects may be freed
   * after the client (dlock_client_free stops threads and connections;
   * the memory goes with the last reference). */
  atomic_int refs;
  atomic_uint cancel_gen;    /* bumped by dlock_client_cancel_waits */
  atomic_int spin_fell_back; /* SUBSCRIBE refused: mutexes spin (spin.c) */
  dlock__node node;   /* standalone: the only node. The router picks it. */
  dlock__stats stats; /* dlock_client_stats's counters (stats.c) */
  dlock__cluster *cl; /* redis-cluster://: the masters; else NULL */
  void *tls_ctx;      /* SSL_CTX of a rediss:// client, else NULL */
  char *tls_name;     /* copy of cfg.tls_server_name */
  char *conn_name;    /* CLIENT SETNAME of every link; NULL: none (own copy) */
  int64_t latch_ttl_ms;
  int64_t once_ttl_ms;    /* dlock__once_ttl: PX of a once key */
  int64_t once_window_ms; /* its copies' resend window (dlock__cmd) */
  int64_t started_ms;     /* wall clock, ms since the epoch: for the info key */
  struct dlock__note *notes; /* waits, permits for the info key (reg.mu) */

  dlock__pubsub ps;    /* waiting for locks (pubsub.c) */
  dlock__registry reg; /* the hold registry (holds.c) */
  dlock__watchdog wd;  /* renewal and local deadlines (watchdog.c) */
  dlock__errand er;    /* info key, declines, map refreshes (errand.c) */
  /* dlock_client_free writes [1]; every background wait polls [0]
   * (dlock__io_guard): -1 when not made. */
  int abort_pipe[2];

  dlock__sentinel sent; /* redis-sentinel:// master discovery (sentinel.c) */
  dlock__sync sync;     /* replica sync: WAIT after writes (sync.c) */
  /* etcd:// (the etcd store, etcd.h): its state; NULL for a Redis client.
   * Then node, cl, sent, sync, wd and the pub/sub thread are unused. */
  struct dlock__etcd *etcd;
};

/* ---- the client's info key (clientinfo.c) ------------------------------
 * "dlock_client:{<client id>}", a hash: host, pid, program, started (ms since
 * the epoch). Written by the errand thread from the client's first hold
 * on, every renewal period, with the watchdog timeout as TTL: it expires
 * with the client. dlock_client_info_query reads it. */
/* Asks the errand thread to write the key now if it never did (reg_mu
 * held). */
void dlock__info_want(dlock_client *c);
/* Writes the key, sent by send(c, arg, key, argc, argv, lens) -- an EVAL
 * of the write script, routed by key (the errand thread's own connection,
 * without WAIT). send returns 0 or a negative code. The key also carries
 * "conn_name" (the client's connection name) for dlock status. No lock
 * held; one attempt. 0 or a negative code. */
typedef int dlock__info_send_fn(dlock_client *c, void *arg, const char *key,
                                int argc, const char **argv,
                                const size_t *lens);
int dlock__info_write_via(dlock_client *c, dlock__info_send_fn *send,
                          void *arg);

/* The info key is written again soon (reg.mu held) -- at once, or
 * DLOCK__INFO_GAP_MS after the previous write ended: a published hold
 * start ended (clientinfo.c). */
#define DLOCK__INFO_GAP_MS 100
void dlock__info_soon(dlock_client *c);
/* A hold's start is published (since:<tid>:<name> in the info key, for
 * "dlock status") once the hold has lasted this long: short holds -- the
 * uncontended lock+unlock of a busy client -- never cost an info write. */
#define DLOCK__SINCE_AFTER_MS 100
/* A hold began (reg.mu held): the errand thread looks at the holds'
 * ages DLOCK__SINCE_AFTER_MS from now, unless a look is due already. */
void dlock__info_since_later(dlock_client *c);
/* The errand thread's look (reg.mu held): 1 when some current hold has
 * lasted DLOCK__SINCE_AFTER_MS and its start is unpublished (write the info
 * key now); *next = when the next unpublished hold gets that old, or 0. */
int dlock__holds_since_due(dlock_client *c, int64_t now, int64_t *next);
/* The holds c has now (dlock_client_stats's gauge): records of a thread
 * holding the lock, not lost, before their local deadline. Takes reg.mu. */
int64_t dlock__holds_now(dlock_client *c);
/* The info key lists at most this many holds (since:<tid>:<name>). */
#define DLOCK__INFO_HOLDS_MAX 512
/* Appends "since:<tid>:<name>\0<wall ms>\0" for each current hold of c
 * that has lasted DLOCK__SINCE_AFTER_MS (or was published before) to b (at
 * most DLOCK__INFO_HOLDS_MAX), marking them published; returns how many.
 * Takes reg.mu. */
int dlock__holds_since(dlock_client *c, dlock__sb *b);

/* The rest of the info key (clientnotes.c, issue 39): when the client
 * checked in, its waits (wait:<tid>:<name> = wall ms the wait began), the
 * permits it took (permit:<id> = "<wall ms>|<name>") and the kind of its
 * locks no key shows (kind:<name>). A note is made with no Redis traffic
 * and published, like a hold's start, once it has lasted
 * DLOCK__SINCE_AFTER_MS. Each takes reg.mu unless it says otherwise. */
typedef struct dlock__note dlock__note;
/* A wait of thread tid for `name` begins: a handle for _end (NULL: OOM,
 * not noted; _end accepts it). */
void *dlock__note_wait(dlock_client *c, const char *name, uint64_t tid);
void dlock__note_wait_end(dlock_client *c, void *note);
/* Permit `id` (32 hex) of `name` taken through object obj / given back (by
 * id; id NULL: every permit noted for obj, which is being freed). */
void dlock__note_permit(dlock_client *c, const void *obj, const char *name,
                        const char *id);
void dlock__note_permit_end(dlock_client *c, const void *obj, const char *id);
/* The watchdog's look (reg.mu held), as dlock__holds_since_due. */
int dlock__notes_due(dlock_client *c, int64_t now, int64_t *next);
/* Appends the pairs above ("field\0value\0") to b, marking the notes
 * published; returns how many pairs. */
int dlock__info_extra(dlock_client *c, dlock__sb *b);
/* Client teardown (no mutex: also in a fork child). */
void dlock__notes_free(dlock_client *c);
/* A Cluster client's copies of its info key, one on every master but the
 * one its key lives on: "dlock_client:{<tag>}:<client id>", a short tag
 * hashing to a slot of that master, so a tool names the client's holds
 * on the masters that answer when that one does not. argv is the write
 * as sent by send (argv[3] the key; replaced for each copy and restored).
 * Best effort: failures are ignored. */
void dlock__info_copies(dlock_client *c, dlock__info_send_fn *send, void *arg,
                        int argc, const char **argv, size_t *lens);
/* The info key's write script (clientinfo.c), for the event-loop client's
 * writer (async_info.c). */
const dlock__script *dlock__info_script(void);

/* The connection name for a config's client_name (clientinfo.c): NULL gives
 * "dlock:<program>:<host>:<pid>", "" none; the bytes Redis refuses in a
 * name become '_'. *out: malloc'd (the caller frees it) or NULL for none.
 * 0 or DLOCK_ENOMEM. */
int dlock__conn_name(const char *configured, char **out);

/* Checks that c may be used by this process; returns 0 or DLOCK_EFORK /
 * DLOCK_ECLOSED / DLOCK_EINVAL. */
int dlock__client_check(const dlock_client *c);

/* ---- the wait budget (wait.c) -------------------------------------------- */

/* When a waiting call must stop: its deadline and the cancel generation
 * it began under. One per call, on the caller's stack; c may be NULL (a
 * budget of time alone). */
typedef struct dlock__budget {
  dlock_client *c;
  long long wait_ms;   /* as the caller gave it: -1 forever, 0 no wait */
  int64_t started;     /* monotonic ms */
  int64_t deadline;    /* monotonic ms; -1 none */
  unsigned cancel_gen; /* c->cancel_gen when the call began */
} dlock__budget;
void dlock__budget_start(dlock__budget *b, dlock_client *c, long long wait_ms);
/* The deadline (monotonic ms) of the calling thread's current public call
 * when its wait budget is finite and positive, else -1: the router stops
 * retrying there. Public entry points reset it (dlock__clear_error). */
int64_t dlock__call_deadline(void);
void dlock__call_deadline_reset(void);
/* The bound of one command's retries (dlock_config.call_timeout_ms): 1 when
 * a re-send after `pause` ms that may take next_ms (0: it fails at once,
 * command_timeout_ms: the last attempt got no reply) would end past the
 * bound counted from `first` (monotonic ms of the first send); the thread's
 * message then says so. 0: send it (or no bound). */
int dlock__call_bound_over(const dlock_config *cfg, int64_t first,
                           int64_t pause, int64_t next_ms);
/* Milliseconds left: -1 no deadline, 0 spent. */
int64_t dlock__budget_left(const dlock__budget *b);
/* until (monotonic ms, -1 none) brought back to the deadline if past it. */
int64_t dlock__budget_clamp(const dlock__budget *b, int64_t until);
/* 1 if dlock_client_cancel_waits() was called since the budget began. */
int dlock__budget_canceled(const dlock__budget *b);
/* Why the wait must end now, or 0: DLOCK_ECLOSED (the client is closing),
 * DLOCK_ECANCELED (message names `what`), DLOCK_ETIMEDOUT with no message
 * (the caller words it: only it knows what was still missing). */
int dlock__budget_over(const dlock__budget *b, const char *what);
/* The code a wait that ended without the lock reports: a failure (a lost
 * connection, a server error, a timeout) after dlock_client_cancel_waits()
 * was called since the wait began is reported as DLOCK_ECANCELED, the
 * failure named in the message (dlock.h: every thread blocked in a wait
 * returns DLOCK_ECANCELED), so which of the two came first never shows.
 * rc >= 0, DLOCK_ECLOSED and DLOCK_ELOST pass as they are. */
int dlock__budget_end(const dlock__budget *b, int rc, const char *what);

/* ---- pub/sub waiting (pubsub.c) ----------------------------------------- */

/* A thread waiting for a lock. Lives on the waiter's stack; guarded by
 * c->sub_mu. */
struct dlock__slot {
  dlock__slot *next, *prev;
  pthread_cond_t cv;
  uint64_t tid;
  uint64_t wait_id; /* set by the caller before joining; grants name it */
  int granted;      /* the unlock script handed the lock to this thread */
  int kicked;       /* retry now: "0" message, subscription (re)activated */
  int failed;       /* the server refused the subscription (sub_error) */
  int all;          /* woken by a "1" (wake-all) message */
  int64_t value;    /* payload of the last message (semaphore permits) */
};

enum {
  DLOCK__SUB_IDLE,
  DLOCK__SUB_SUBSCRIBING,
  DLOCK__SUB_ACTIVE,
  DLOCK__SUB_UNSUBSCRIBING,
  DLOCK__SUB_FAILED /* SUBSCRIBE refused (ACL); retried when refs drop to 0 */
};

/* Wake policy for messages on the shared channel. */
enum {
  DLOCK__WAKE_LOCK, /* "0": one waiter, "1": all (Redisson LockPubSub) */
  DLOCK__WAKE_ALL,  /* any message wakes every waiter (latch) */
  DLOCK__WAKE_COUNT /* message = permits available: wake that many */
};

struct dlock__sub {
  dlock__sub *next_all;
  char *channel;       /* shared channel */
  char *grant_channel; /* per-client grant channel, or NULL */
  int wake_policy;
  int state;
  int refs;         /* waiting threads */
  int confirms;     /* (un)subscribe confirmations still expected */
  int conn;         /* the subscriber connection it is on (pubsub.c), or -1 */
  int64_t retry_at; /* a transient refusal: subscribe again from then */
  int64_t idle_since;
  char *error;        /* the server's refusal, when FAILED */
  dlock__slot *slots; /* FIFO */
  dlock__slot *slots_tail;
};

/* Joins the wait entry for (channel, grant_channel), subscribing if needed;
 * registers slot. *active tells whether the subscription is confirmed. */
int dlock__sub_join(dlock_client *c, const char *channel,
                    const char *grant_channel, int wake_policy,
                    dlock__slot *slot, dlock__sub **out, int *active);
/* Joins only if an active subscription for channel already exists (another
 * local waiter, or a lingering one): then the caller may join the server's
 * queue with its very first attempt. Returns 1 if joined, 0 if not. */
int dlock__sub_join_active(dlock_client *c, const char *channel,
                           dlock__slot *slot, dlock__sub **out);
/* Waits (c->sub_mu taken inside) until the slot is granted/kicked or the
 * monotonic deadline (ms; <0 = none) passes. Returns 1 if woken, 0 on
 * timeout. *active is the subscription state on return. */
int dlock__sub_wait(dlock_client *c, dlock__sub *s, dlock__slot *slot,
                    int64_t until_ms, int *granted, int *active);
void dlock__sub_leave(dlock_client *c, dlock__sub *s, dlock__slot *slot);
/* After a wait returned with slot->failed: sets the thread's error message
 * (the channel and the server's refusal, e.g. an ACL user without SUBSCRIBE)
 * and returns DLOCK_EAUTH. `what` names the waited-for object. */
int dlock__sub_error(dlock_client *c, dlock__sub *s, const char *what);
/* The wait of the kinds without hand-over (semaphore, latch): subscribes to
 * channel, then calls check(arg) -- 1 done, 0 not yet, < 0 error -- after
 * every wake-up and at least every recheck_ms (pub/sub is at most once;
 * recheck_fn(arg), when not NULL, gives that bound anew before each sleep:
 * the permits' next expiry), until it is done or the budget b (started
 * before the caller's first check) says stop. Returns 0, check's error, or
 * dlock__budget_over's answer (DLOCK_ETIMEDOUT with no message: the caller
 * words it). */
int dlock__sub_wait_check(dlock_client *c, const char *channel, int wake_policy,
                          const dlock__budget *b, int64_t recheck_ms,
                          int64_t (*recheck_fn)(void *), int (*check)(void *),
                          void *arg, const char *what);
/* The mutex and maps: 0 or DLOCK_ENOMEM (nothing left to undo). */
int dlock__pubsub_init(dlock__pubsub *ps);
/* Frees what _init made; forked: in a fork child (the mutex is left). */
void dlock__pubsub_destroy(dlock__pubsub *ps, int forked);
/* The wake pipe and the subscriber thread: 0 or DLOCK_ENOMEM (undone). */
int dlock__pubsub_start(dlock_client *c);
/* Joins the thread, wakes every waiter (they answer DLOCK_ECLOSED), closes
 * the pipe. Safe after a failed or no start. */
void dlock__pubsub_stop(dlock_client *c);

/* ---- the hold registry (holds.c) ----------------------------------------- */

/* One lock name and family (mutex / write / read) with live objects of this
 * client: the per-thread hold records of that lock. Guarded by c->reg_mu. */
typedef struct dlock__lockent dlock__lockent;

/* Finds or creates the entry of (ops' family, name) and counts one more
 * object on it. 0 or DLOCK_ENOMEM. Takes reg_mu. */
int dlock__reg_attach(dlock_client *c, const char *name, size_t name_len,
                      const dlock__mutex_ops *ops, dlock__lockent **out);
/* One object fewer; the last one forgets the entry's holds (renewal stops)
 * and frees the entry. Takes reg_mu. */
void dlock__reg_detach(dlock_client *c, dlock__lockent *e);
const char *dlock__lockent_name(const dlock__lockent *e, size_t *len);
const dlock__mutex_ops *dlock__lockent_ops(const dlock__lockent *e);
/* The thread's record, or NULL (reg_mu held). */
dlock__hold *dlock__hold_find(dlock__lockent *e, uint64_t tid);
/* The thread's record, created when missing; NULL only on OOM (reg_mu). */
dlock__hold *dlock__hold_get(dlock__lockent *e, uint64_t tid);
/* Whether thread tid holds a mutex (plain, fair, fenced) or either side of
 * a read-write lock of that name on c (any family; takes reg_mu). */
int dlock__reg_thread_holds(dlock_client *c, const char *name, size_t len,
                            uint64_t tid);
/* Frees the record if it holds nothing and has nothing pending (reg_mu
 * held); a renewal batch in flight defers the free to the watchdog. */
void dlock__hold_put(dlock_client *c, dlock__hold *h);
void dlock__hold_grave_empty(dlock_client *c); /* reg_mu held */
/* The registry's mutex and condition variable: 0 or DLOCK_ENOMEM (nothing
 * left to undo). The map of entries is made on first use. */
int dlock__registry_init(dlock__registry *r);
/* Destroys them (not in a fork child: forked). The entries and records go
 * with dlock__holds_destroy. */
void dlock__registry_destroy(dlock__registry *r, int forked);
/* A composite object's list of hold records (one per thread; the object's
 * own mutex held): the thread's record, created when missing and create
 * is set (NULL only on OOM or when absent). */
dlock__hold *dlock__holdlist_find(dlock__hold **list, uint64_t tid, int create);
/* Unlinks h from the list and frees it (the object's own mutex held). A
 * composite object drops a thread's record as soon as the thread holds
 * nothing through it, so its list is as long as the number of threads
 * holding it now, not of the threads that ever did (issue 26). */
void dlock__holdlist_drop(dlock__hold **list, dlock__hold *h);
/* Frees every record of the list. */
void dlock__holdlist_free(dlock__hold **list);
/* Appends mode to h->modes: 0 or DLOCK_ENOMEM. */
int dlock__hold_push_mode(dlock__hold *h, char mode);
/* Frees one record and what it owns (modes, marks). */
void dlock__hold_free(dlock__hold *h);
/* Client teardown: frees every record (and the registry when no object is
 * left). Touches no mutex (also used in a fork child). */
void dlock__holds_destroy(dlock_client *c);

/* ---- holds and the watchdog (watchdog.c) -------------------------------- */

/* Why a hold was lost (dlock__hold.lost); dlock__lost_why says it. */
enum {
  DLOCK__LOST_GONE = 1,       /* a renewal found the key gone or taken */
  DLOCK__LOST_UNRENEWED = 2,  /* renewals failed until the deadline passed */
  DLOCK__LOST_THREAD_EXIT = 3 /* the holding thread exited holding it */
};
/* The reason as a phrase ("a renewal found ..."); any value. */
const char *dlock__lost_why(int lost);

/* What this process knows about one thread's holds on one lock name.
 * Guarded by c->reg_mu. */
struct dlock__hold {
  dlock__hold *next;              /* in the entry's list (or the grave) */
  dlock__hold *wd_prev, *wd_next; /* in c->wd_head while renewed */
  uint64_t tid;
  uint32_t gen;
  int count;
  int wd_count; /* holds taken with the watchdog */
  int in_wd;
  int lost;         /* 0, or why the hold was lost: DLOCK__LOST_* */
  int64_t lease_ms; /* lease of the most recent explicit acquisition */
  /* Bit i set: hold number i+1 (in acquisition order) has a fixed lease;
   * clear: the watchdog. Holds are released last first, so an unlock knows
   * what remains (dlock__remaining_lease). Holds past 64 count as fixed. */
  uint64_t fixed_bits;
  /* A RELEASE WHOSE OUTCOME IS UNKNOWN (no reply; or answered, but a copy
   * sent before it may still be on its way and its tombstone could not be
   * written): the count it expected (0: none). Safety round 4's rule: it
   * is PENDING -- a copy of it may still arrive and act -- until a
   * committing copy of it (the script writes its tombstone with its effect,
   * so no copy of it can act after that) is answered. The record's next
   * operation sends that copy first (dlock__eng_reenter and
   * dlock__eng_unlock_begin say DLOCK__ENG_SETTLE); a caller's unlock at
   * the same count IS that copy. A pending release outlives the hold it
   * was for (dlock__eng_forget keeps it; holds.c keeps the record): it is
   * an obligation, not a hold. */
  int unlock_pending;
  int pend_undo;          /* the undo of an acquisition (DLOCK_ENOSYNC) */
  int64_t pend_lease;     /* its lease argument (remaining_ttl) */
  uint64_t unlock_rid[2]; /* its request id (32 hex digits) */
  /* Monotonic ms the final release (in flight, or pending as above) was
   * first sent: if that was before valid_until, its outcome can still be
   * "released", and no loss is reported for the hold (watchdog.c). */
  int64_t release_sent;
  int64_t renewed_at;  /* monotonic ms: last acquire or confirmed renewal */
  int64_t fail_logged; /* monotonic ms a failed renewal was last logged */
  int64_t since_ms;    /* wall clock ms of the acquisition that began the hold
                          (count 0 -> 1): the info key's since:<tid>:<name> */
  int64_t since_at;    /* the same moment, monotonic ms */
  int since_pub;       /* since_ms went out with an info write */
  /* Local deadline (monotonic ms): send time of the last confirmed
   * acquisition or renewal + lease - dlock__lease_margin(lease). Past it the
   * hold is lost whatever Redis says later (watchdog.c's expiry thread
   * reports watchdog holds at that moment). */
  int64_t valid_until;
  int64_t retry_at; /* after a failed renewal: retry not before this */
  uint64_t token;   /* fenced locks */
  /* The final unlock (count 1) is in flight: a key found gone is not a
   * loss while dlock__release_may_have_run says so. A partial unlock
   * (count > 1) never sets it: the thread still holds the lock. */
  int releasing;
  dlock__lockent *e; /* the lock: its name and family */
  /* Read-write lock: the modes of the thread's holds in acquisition order
   * ('R' / 'W'), modes[0..nmodes). */
  char *modes;
  size_t nmodes, modes_cap;
  /* Multilock: the members an unfinished unlock released (one byte each),
   * so a retry releases only the rest; NULL = no unlock in progress. */
  unsigned char *marks;
};

/* The decisions about a hold both clients share (engine.c). */
#include "engine.h"
/* The etcd store's seam (etcd_*.c). */
#include "etcd.h"

void dlock__wd_add(dlock_client *c, dlock__hold *h);    /* reg_mu held */
void dlock__wd_remove(dlock_client *c, dlock__hold *h); /* reg_mu held */
/* Waits until no renewal batch is in flight (reg_mu held). */
void dlock__wd_quiesce(dlock_client *c);
/* Losses to report: a list built with reg_mu held (dlock__lost_add copies
 * name; out of memory drops the note), then dlock__lost_report (reg_mu
 * held; released while cfg.on_lock_lost runs, with dlock_last_error() set
 * to the reason on the calling thread) frees it. */
typedef struct dlock__lost_note dlock__lost_note;
void dlock__lost_add(dlock__lost_note **list, const char *name, int why);
void dlock__lost_report(dlock_client *c, dlock__lost_note *list);
/* Notes (once per client) that the calling thread holds a lock of c, so
 * that if it exits still holding locks their renewal stops and each is
 * reported lost (DLOCK__LOST_THREAD_EXIT). reg_mu may be held. Best
 * effort: out of memory skips the note. */
void dlock__thread_note(dlock_client *c);
int dlock__watchdog_start(dlock_client *c);
void dlock__watchdog_stop(dlock_client *c);
/* The renewal path's bound on every wait on the network (watchdog.c): a
 * connect, the plain-or-TLS probe, a handshake, a renewal's reply wait at
 * most min(command_timeout_ms, connect_timeout_ms, watchdog_timeout_ms /
 * 6) -- half a renewal period -- so no wait spends more than that of the
 * three periods a hold's deadline allows. At least 1. */
int dlock__wd_wait_bound(const dlock_config *cfg);

/* The errand thread (errand.c): started after the watchdog; stopped by
 * dlock_client_free, at once whatever it waits for (its waits poll the
 * client's abort pipe). */
int dlock__errand_start(dlock_client *c);
void dlock__errand_stop(dlock_client *c);
/* The renewal thread asks for a cluster map refresh (no lock held): the
 * errand thread does it, so the renewal path never waits for one. */
void dlock__errand_refresh(dlock_client *c);
/* Wakes the errand thread if it runs (reg.mu held). */
void dlock__errand_wake(dlock_client *c);

/* ---- a background thread's own connections (bglink.c) --------------------
 * One link per node, opened on first use with the thread's reply bound,
 * kept until it fails (then the next use reconnects, logged "reconnect"
 * once it succeeds), followed to a new master after a Sentinel failover.
 * Used by one thread. */
typedef struct dlock__bglink {
  dlock__node *node;
  dlock__link *link; /* or NULL */
  int failed;        /* the last link failed: the next one is a reconnect */
} dlock__bglink;
typedef struct dlock__bglinks {
  dlock__bglink *v;
  int n, cap;
  int read_ms;     /* replies awaited at most this long */
  const char *who; /* "watchdog", "errand": log lines */
} dlock__bglinks;
/* The link to node, connected when missing: NULL on failure (message set;
 * *out then names the entry, or is NULL when out of memory). */
dlock__link *dlock__bg_link(dlock_client *c, dlock__bglinks *s,
                            dlock__node *node, dlock__bglink **out);
/* The entry's link failed: closed, the next use reconnects; the cluster
 * map is marked stale (the master may have moved). */
void dlock__bg_drop(dlock_client *c, dlock__bglink *b);
/* Closes every link and frees the table. */
void dlock__bg_close(dlock__bglinks *s);
/* One command (argv) on the link to key's node (its slot's master on a
 * cluster, as the map says now, without refreshing it): *out the reply (an
 * error reply included). 0, DLOCK_ECONN (no master known, connection
 * failed: the link is dropped), DLOCK_ECLOSED, DLOCK_ENOMEM. */
int dlock__bg_call(dlock_client *c, dlock__bglinks *s, const char *key,
                   int argc, const char **argv, const size_t *lens,
                   redisReply **out);

/* Writes "<uuid>:<tid>" into buf (>= DLOCK__FIELD_MAX). Returns length. */
size_t dlock__field(const dlock_client *c, uint64_t tid, char *buf);
/* "<id>:<owner>" (owner in signed decimal, as Redisson writes a thread id)
 * into buf (>= DLOCK__FIELD_MAX); id is a client id (36 chars). Returns
 * the length. */
size_t dlock__field_owner(const char *id, long long owner, char *buf);
/* The hash tags of a Cluster client's info key copies (names.c; the copy
 * is "dlock_client:{<tag>}:<client id>"), the ONE rule both clients'
 * writers follow and the tools' readers expect: short hex tags "0", "1",
 * ... in turn, each taken when its slot's master (owner_of(map, slot): an
 * index < DLOCK__CLUSTER_MAX_NODES, or -1) has none yet and is not `own`
 * (the master of the key itself), until `want` tags (the other masters)
 * or max. Returns how many tags[i] (NUL-terminated) were written. */
#define DLOCK__INFO_COPIES_MAX 64
int dlock__info_copy_tags(int own, int want,
                          int (*owner_of)(const void *map, unsigned slot),
                          const void *map, char (*tags)[8], int max);

/* ---- lock objects (mutex.c) --------------------------------------------- */

/* One waiting acquire call (mutex.c's wait loop) as the scripts see it. */
typedef struct dlock__wait {
  uint64_t id;      /* names this wait in queue entries and grants; 0 none */
  int queued;       /* an attempt of this wait may have left a queue entry */
  int64_t deadline; /* monotonic ms the wait ends; -1 never */
  /* The request id of the attempt being sent (32 hex; drawn per attempt by
   * dlock__request_id): its tombstone dlock_tomb:{name}:<rid>
   * (dlock__req_tomb_key) is KEYS of the acquire scripts, which do nothing
   * once it exists -- written by the client after an attempt it had to
   * send more than once (safety round 4: a late copy of an acquire). */
  char rid[33];
} dlock__wait;

/* What distinguishes the mutex variants (plain, fair, fenced). The wait
 * loop, the hold records and the watchdog are shared (mutex.c). */
typedef struct dlock__mutex_ops {
  const char *kind_name;
  /* One acquire attempt. target = the thread's hold count after it; queue =
   * join the wait queue on failure (only when subscribed); wait_ms = the
   * caller's wait budget (fair lock deadlines; -1 forever). Returns 1 held
   * (*token set by fenced locks), 0 taken elsewhere (*ttl = holder's PTTL),
   * or a negative code (DLOCK_ELOST: a reentrant acquire found our hold
   * gone). w: the wait this attempt belongs to (never NULL; id 0 for a
   * single attempt). */
  int (*attempt)(dlock_mutex *m, uint64_t tid, int target, int64_t lease,
                 int queue, int64_t wait_ms, int64_t *ttl, uint64_t *token,
                 const dlock__wait *w);
  /* Releases one hold: 1 released, 0 holds remain, DLOCK_ELOST if Redis
   * says we are not the owner, or a negative code. expected = the thread's
   * hold count before this unlock as the client knows it: the script writes
   * expected - 1 if the server's count is at least that, and changes
   * nothing if it is lower (a copy of this unlock already ran), so any
   * number of copies count once. DLOCK_ELOST from a final release
   * (expected 1) that may have been sent before is read as "released" by
   * the caller (mutex.c rel_end). u: the release (engine.h): u->lease the
   * remaining holds' lease, u->expected, u->rid (32 hex) its request id --
   * a copy changes nothing once its tombstone
   * redisson_unlock_latch:{name}:<rid> exists -- and u->commit: a
   * committing copy, which writes that tombstone with its effect. */
  int (*release)(dlock_mutex *m, uint64_t tid, const dlock__eng_unlock *u);
  /* Leaves the wait queue after giving up: 1 if the lock was handed to us
   * meanwhile (*token set), 0 if not, or a negative code. May be NULL. */
  int (*cancel)(dlock_mutex *m, uint64_t tid, int64_t lease, int64_t wait_ms,
                uint64_t *token, const dlock__wait *w);
  /* The channel(s) a waiting thread subscribes to; grant may stay empty
   * (no direct hand-over). */
  void (*channels)(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                   dlock__sb *grant);
  /* Force unlock: 1 deleted, 0 none, or a negative code. */
  int (*force)(dlock_mutex *m);
  int wake_policy;
  /* Appended to "<uuid>:<tid>" in the hash field ("" or ":write"); the
   * watchdog's batched renewal checks this field. */
  const char *field_suffix;
  /* 1: a waiting call joins the server-side queue with its very first
   * attempt, before it is subscribed (fair lock: arrival order is the order
   * of first attempts). 0: only once subscribed (direct hand-over needs a
   * live subscriber). */
  int queue_first;
  /* Custom renewal for holds whose lease lives in more than the hash (read
   * locks). Called on the watchdog thread without locks held; returns 1
   * renewed, 0 gone (lost), or a negative code (retried). NULL: the batched
   * hash-field renewal. */
  int (*renew)(dlock_client *c, const char *name, size_t name_len, uint64_t tid,
               int count);
  /* > 0: a waiting thread attempts again at least this often (its attempt
   * keeps its place in the queue alive: fair locks). 0: only on wake-ups
   * and when the holder's TTL runs out. */
  int64_t max_sleep_ms;
  /* 1: a waiting call never subscribes; it attempts again after back-off
   * sleeps (the spin lock, spin.c). */
  int spin;
} dlock__mutex_ops;

struct dlock_mutex {
  dlock_client *c;
  const dlock__mutex_ops *ops;
  dlock__lockent *e; /* its entry in the client's hold registry */
  size_t name_len;
  char name[];
};

extern const dlock__mutex_ops dlock__plain_ops;
extern const dlock__mutex_ops dlock__fair_ops;
extern const dlock__mutex_ops dlock__fenced_ops;
extern const dlock__mutex_ops dlock__spin_ops;

/* ---- waiting without pub/sub (spin.c) ----------------------------------
 * Redisson's ExponentialBackOff defaults: the first sleep 1 ms, each next
 * one the previous x2 plus a jitter of [0, fails) ms, at most 128 ms. */
#define DLOCK__SPIN_INITIAL_MS 1
#define DLOCK__SPIN_MAX_MS 128
#define DLOCK__SPIN_MULTIPLIER 2
#define DLOCK__SPIN_SLICE_MS 20 /* a sleep looks at cancel/close this often */
typedef struct dlock__backoff {
  int64_t next, max;
  int mult, fails;
} dlock__backoff;
void dlock__backoff_init(dlock__backoff *b);
/* The next sleep in ms (Redisson's ExponentialBackOffPolicy). */
int64_t dlock__backoff_next(dlock__backoff *b);
/* Sleeps a back-off period (ended early by a cancel or the client
 * closing; never past b's deadline), then calls round(arg); again while it
 * returns 0. Returns round's first non-zero answer (1 held, or a code):
 * round checks the budget (mutex.c spin_round). */
int dlock__spin_wait(const dlock__budget *b, int (*round)(void *arg),
                     void *arg);
/* 1 when m waits by spinning: a spin lock, or a plain mutex of a client
 * that fell back (dlock__spin_fall_back). */
int dlock__spins(const dlock_mutex *m);
/* The server refused the SUBSCRIBE of a wait on m (its error is the
 * thread's last): 1 when the wait goes on by spinning instead
 * (cfg.spin_fallback, a plain mutex; the client remembers it and the first
 * time says so through the log hook, event "spin_fallback"), else 0. */
int dlock__spin_fall_back(dlock_mutex *m);
/* The spin unlock (the plain unlock's arguments; wake = also try a PUBLISH
 * of "0", a refusal ignored): as dlock__mutex_ops.release. */
int dlock__spin_release(dlock_mutex *m, uint64_t tid,
                        const dlock__eng_unlock *u, int wake);
/* A plain final unlock failed with rc: when cfg.spin_fallback is set, the
 * server refused a permission (NOPERM) and the thread's field is gone --
 * the PUBLISH after the release was refused -- falls back as
 * dlock__spin_fall_back does and returns 1 (released); else rc. */
int dlock__spin_unlock_refused(dlock_mutex *m, uint64_t tid, int rc);
/* Force unlock without PUBLISH: 1 deleted, 0 none, or a negative code. */
int dlock__spin_force(dlock_mutex *m);

/* Creates a mutex object with the given ops (variants call this). */
int dlock__mutex_create(dlock_client *c, const char *name,
                        const dlock__mutex_ops *ops, dlock_mutex **out);
/* The shared acquire/release paths (what dlock_mutex_timedlock/unlock do),
 * for lock kinds built from mutex objects with their own ops (rwlock). */
int dlock__mutex_acquire(dlock_mutex *m, long long wait_ms, long long lease_ms);
int dlock__mutex_release(dlock_mutex *m);
/* The calling thread's recorded hold count on m (no Redis traffic). */
int dlock__mutex_local_count(dlock_mutex *m);
/* The integer answer of a script run (rc, r from dlock__eval): frees r.
 * Returns rc when it failed, DLOCK_EPROTO (no reply / not an integer) or
 * 0 with *v set -- or, when nil is not NULL and the reply is nil, 0 with
 * *nil = 1. */
int dlock__take_int(int rc, redisReply *r, long long *v, int *nil);
/* DLOCK_ELOST with "<kind> '<name>': this thread's hold is gone ... it was
 * re-acquired in vain" (a reentrant attempt found the hold gone). */
int dlock__reacquired_in_vain(const char *kind, const char *name);
/* A live attempt found its own request's tombstone (-4: the scripts' answer
 * to a late copy), which only the client writes after the attempt ended:
 * DLOCK_EPROTO, "cannot happen", named. */
int dlock__late_answer(const char *kind, const char *name);
/* Writes tombstone key[0..klen) (SET key 1 PX dlock__tombstone_ttl) and
 * waits for the answer, under the retry policy: the commit of a request
 * that was sent more than once (safety round 4). 0, or the failure. Any
 * thread without an internal lock. */
int dlock__commit_tomb(dlock_client *c, const char *key, size_t klen);
/* Parses an integer reply; DLOCK_EPROTO otherwise. */
int dlock__reply_int(const redisReply *r, long long *v);

/* The calls of the plain mutex's scripts, KEYS and ARGV ready to send:
 * what the blocking mutex (mutex.c) and the event-loop client (async_lock.c)
 * both send, built in one place. */
/* A script call as sent: which core script, and views of its KEYS and
 * ARGV (pointing into the call structure below that owns them). */
typedef struct dlock__call {
  int script; /* DLOCK__S_* */
  int nkeys, nargs;
  const char **keys;
  const size_t *klens;
  const char **args;
  const size_t *alens;
} dlock__call;
/* dlock__eval / dlock__areq_eval of such a call (conn.c, async_conn.c). */
int dlock__eval_call(dlock_client *c, const dlock__call *k, redisReply **out);

/* The KEYS and ARGV of a call's short form (acquire_first, unlock_last:
 * at most 4 and 2), owned by the call structure its view points into. */
typedef struct dlock__short_argv {
  const char *keys[4], *args[2];
  size_t klens[4], alens[2];
} dlock__short_argv;

typedef struct dlock__acq_call {
  /* the queue, its deadlines, the hand-over marker, the attempt's
   * tombstone; the channel and grant channel prefix (cancel only) */
  dlock__sb q, dl, mk, tb, ch, gp;
  char field[DLOCK__FIELD_MAX], entry[DLOCK__FIELD_MAX + 48], wid[17];
  char ls[24], ts[24], ds[24];
  size_t fl, el;
  /* acquire: lock, queue, deadlines, marker, tombstone */
  const char *keys[5];
  size_t klens[5];
  const char *args[8]; /* acquire's ARGV (scripts.c) */
  size_t alens[8];
  /* cancel: lock, queue, deadlines, marker, channel, grant prefix; ARGV
   * field, entry, wait id, publish command (dlock__cancel_call_init) */
  const char *ckeys[6];
  size_t cklens[6];
  const char *cargs[4];
  size_t calens[4];
  /* The acquire as sent: DLOCK__S_ACQUIRE_FIRST (KEYS lock, marker,
   * tombstone; ARGV lease, field: in sh) for a first hold (target 1) of a
   * call that is not queued and does not queue on failure -- the common
   * case, with half the Redis work of the acquire script's KEYS and ARGV --
   * else DLOCK__S_ACQUIRE with keys and args above. */
  dlock__call send;
  dlock__short_argv sh;
} dlock__acq_call;
/* The acquire call of `field` on lock `name`: target = the hold count after
 * it, queue = join the wait queue on failure, w = the wait (its id names
 * the queue entry; its deadline bounds the entry's life; its rid is the
 * attempt's request id). 0 or DLOCK_ENOMEM; free with dlock__acq_call_free
 * either way. */
int dlock__acq_call_init(dlock__acq_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int target,
                         int64_t lease, int queue, const dlock__wait *w);
/* The same, and the cancel script's KEYS and ARGV (ckeys, cargs): pub =
 * the publish command (a cancel may pass a free lock on). */
int dlock__cancel_call_init(dlock__acq_call *k, const char *name,
                            size_t name_len, const char *field, size_t fl,
                            int64_t lease, const dlock__wait *w,
                            const char *pub);
void dlock__acq_call_free(dlock__acq_call *k);
/* The tombstone of request rid on lock name: dlock_tomb:{name}:<rid>
 * (dlock__own_name; one slot with the lock). */
void dlock__req_tomb_key(dlock__sb *b, const char *name, const char *rid);
/* The acquire script's answer (rc, r from the eval; r is freed): 1 held,
 * 0 taken elsewhere (*ttl = the holder's PTTL), DLOCK_ELOST (a reentrant
 * acquire found the hold gone) or another negative code. */
int dlock__acq_reply(int rc, redisReply *r, const char *name, int64_t *ttl);

typedef struct dlock__rel_call {
  dlock__sb ch, gp, q, dl, mk, tomb;
  char field[DLOCK__FIELD_MAX], ls[24], es[24], cs[24], rid[33];
  char mark[DLOCK__FIELD_MAX + 18]; /* decline: "<field>|<wait id>" */
  int nkeys;                        /* 7 */
  int nargs;                        /* 6; 7 for a committing copy */
  const char *keys[7];
  size_t klens[7];
  const char *args[7];
  size_t alens[7];
  /* The unlock as sent: DLOCK__S_UNLOCK_LAST (KEYS lock, channel, queue,
   * tombstone; ARGV field, publish: in sh) for a final
   * release (expected 1), the common case, else DLOCK__S_UNLOCK with keys
   * and args above (the decline and spin scripts use those too). */
  dlock__call send;
  dlock__short_argv sh;
} dlock__rel_call;
/* The unlock call of `field` on lock `name`: lease = the remaining holds'
 * (dlock__remaining_lease), expected = the hold count before this unlock
 * (the script writes expected - 1: idempotent by state, scripts.c), rid =
 * this unlock's request id (32 hex; its tombstone is KEYS[7]), pub = the
 * publish command (dlock__publish_cmd). 0 or DLOCK_ENOMEM; free with
 * dlock__rel_call_free either way. */
int dlock__rel_call_init(dlock__rel_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int64_t lease,
                         int expected, const char *rid, const char *pub);
/* Redisson's unlock latch key, redisson_unlock_latch:{name}:<rid>, used as
 * a tombstone: written (dlock__unlock_tombstone) only after a final
 * release that was sent more than once, so that a copy of it still in the
 * network cannot release the thread's next hold of the lock. */
void dlock__unlock_latch_key(dlock__sb *b, const char *name, const char *rid);
/* How long a tombstone lives: past any copy still in the network. */
int64_t dlock__tombstone_ttl(const dlock_config *cfg);
/* Writes the tombstone of final release rid on lock name (one command,
 * the router's retries; best effort: a failure is ignored). Blocking; any
 * thread without reg_mu. */
void dlock__unlock_tombstone(dlock_client *c, const char *name,
                             const char *rid);
/* Makes k a COMMITTING COPY of its release: the full unlock script with
 * ARGV[7] = ttl, which writes the release's tombstone (PX ttl) with its
 * effect, so no copy of it can act afterwards (safety round 4). */
void dlock__rel_call_commit(dlock__rel_call *k, int64_t ttl);
void dlock__rel_call_free(dlock__rel_call *k);

/* A grant that reached no wait of this client: the unlock handed the lock
 * to a queue entry whose wait had already ended (its cancel could not reach
 * Redis). The pub/sub thread queues one (dlock__pubsub.declines), the
 * errand thread sends it (errand.c: the decline script, without WAIT, on
 * its own connection, a few times at most). */
typedef struct dlock__decline {
  struct dlock__decline *next;
  uint64_t tid; /* the thread of the ended wait */
  char wid[17]; /* its wait id, 16 hex digits */
  char name[];  /* the lock */
} dlock__decline;
/* The decline script's call for the hand-over of lock `name` to `field`'s
 * wait `wid` (16 hex digits): k->keys as the unlock's (k->nkeys of them),
 * k->args[0..3] its ARGV. 0 or DLOCK_ENOMEM; free with dlock__rel_call_free
 * either way. */
int dlock__decline_call_init(dlock__rel_call *k, const char *name,
                             size_t name_len, const char *field, size_t fl,
                             const char *wid, const char *pub);
/* Wakes the errand thread to send the queued declines (pubsub.c, with
 * neither reg.mu nor ps.mu held). */
void dlock__errand_decline_poke(dlock_client *c);
/* The unlock script's answer (r is freed): 1 released (or handed over),
 * 0 holds remain, DLOCK_ELOST (not the owner), or another negative code. */
int dlock__rel_reply(int rc, redisReply *r);

#endif
