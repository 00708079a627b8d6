/*
 * proto.h -- the wire layer (src/proto/): what the library says to Redis,
 * without saying it -- the Lua texts and the script table (scripts.c), the
 * names of keys and channels (names.c), URLs (url.c), and RESP encoding
 * and integer replies (resp.c). Above util (util/util.h); no connection,
 * no client.
 */
#ifndef DLOCK_PROTO_H
#define DLOCK_PROTO_H

#include <hiredis/hiredis.h>

#include "util/util.h"

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

void dlock__suffix_name(dlock__sb *b, const char *name, const char *suffix);

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

typedef struct dlock__script dlock__script;

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

/* Appends the RESP encoding of argv to b. */
void dlock__resp_argv(dlock__sb *b, int argc, const char **argv,
                      const size_t *lens);
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

/* The integer answer of a script run (rc, r from dlock__eval): frees r.
 * Returns rc when it failed, DLOCK_EPROTO (no reply / not an integer) or
 * 0 with *v set -- or, when nil is not NULL and the reply is nil, 0 with
 * *nil = 1. */
int dlock__take_int(int rc, redisReply *r, long long *v, int *nil);
/* Parses an integer reply; DLOCK_EPROTO otherwise. */
int dlock__reply_int(const redisReply *r, long long *v);

/* ---- Redis Cluster key slots (names.c) ---- */

#define DLOCK__SLOTS 16384
#define DLOCK__CLUSTER_MAX_NODES 512
/* The slot of key[0..len): CRC16 of its hash tag (or the whole key) mod
 * 16384. */
unsigned dlock__key_slot(const char *key, size_t len);
/* The part of key[0..len) that is hashed: between the first '{' and the
 * first '}' after it when that is not empty, else the whole key. */
void dlock__hash_part(const char *key, size_t len, const char **p, size_t *n);

/* Redisson's unlock latch key, redisson_unlock_latch:{name}:<rid>, used as
 * a tombstone: written (dlock__unlock_tombstone) only after a final
 * release that was sent more than once, so that a copy of it still in the
 * network cannot release the thread's next hold of the lock. */
void dlock__unlock_latch_key(dlock__sb *b, const char *name, const char *rid);

#endif
