/*
 * permits.c -- expirable permits, Redisson RPermitExpirableSemaphore
 * layout (see docs/permits.md).
 *
 * DATA (exactly Redisson's):
 *   <name>            string: the number of available permits. Missing: not
 *                     set, nothing can be taken.
 *   {name}:timeout    sorted set (Redisson's suffixName(name, "timeout")):
 *                     member = a taken permit's id, 16 raw bytes; score =
 *                     its expiry, ms since the epoch on the taker's wall
 *                     clock, or 922337203685477 for "never".
 *   redisson_sc:{name} channel: the new count, whenever a script adds
 *                     permits (release, reclaim of expired ones, set).
 * Users see an id as 32 lowercase hex digits.
 *
 * Every script that reads or takes permits first RECLAIMS the expired ones
 * (score <= now): removes them from the set, adds their number to the count
 * and publishes it -- what Redisson's scripts do, so permits of a dead
 * holder (C or Java) come back at the next call of anyone after its lease.
 *
 * RETRIES. A permit's id is drawn before the first send, and the acquire
 * script answers "taken" at once when the id is already in the set: a copy
 * re-sent by the retry policy after a lost reply never takes a second
 * permit. Release and update are idempotent by id, and an id is never
 * reused: a late copy can only release the permit it was sent for. A
 * release whose outcome is unknown (DLOCK_ECONN after a send) is
 * remembered: the caller's next release of that id is the same release,
 * and finding the permit gone then means released -- as an unlock's retry
 * (docs/errors.md), unless its first copy was sent after the permit's
 * local deadline (known for the permits this object renews).
 *
 * AN ANSWER AFTER THE LEASE IS NO PERMIT (issue 38.5). The lease counts
 * from the acquisition's send: an answer that arrives after send + lease -
 * margin (dlock__eng_deadline) may come after the server reclaimed the
 * permit for someone else. Such an acquisition gives the permit back at
 * once and answers DLOCK_ELOST.
 *
 * WAITING: one attempt first; then the thread joins the client's
 * subscription of the channel (DLOCK__WAKE_COUNT: a message "<n>" kicks at
 * most n waiting threads of the client) and attempts again after every
 * wake-up, at least every DLOCK__PERMITS_RECHECK_MS, and when the earliest
 * lease in the set ends (the failed attempt answers it, as Redisson's
 * ":<expiry>"), since an expiry publishes nothing until someone reclaims it.
 *
 * WATCHDOG. Permits taken with lease_ms <= 0 are kept in the object's
 * list; a thread of the object (started with its first such permit) renews
 * them all in one script every watchdog_timeout_ms / 3 with a new expiry of
 * now + watchdog_timeout_ms (retrying every period / 4 while Redis does not
 * answer). The renewal never re-creates a permit: one found gone leaves the
 * list and cfg.on_lock_lost runs with the object's name -- unless a
 * release of it may have run (its outcome unknown): then it just leaves
 * the list, as does one whose deadline passes meanwhile. Renewals are sent
 * without the sync WAIT (a renewal confirms nothing new; replicas that lag
 * never delay it: docs/guarantees.md), and the renewal thread's connects
 * and handshakes wait at most half a renewal period (the I/O guard,
 * link.c). update_lease leaves the list as it was until its own renewal
 * is confirmed: an update that failed does not stop the renewals.
 */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kinds/kinds.h"

#define DLOCK__PERMITS_RECHECK_MS 1000
/* Redisson's nonExpirableTimeout: the score of a permit without a lease. */
#define PERMIT_NEVER 922337203685477LL
#define PERMIT_NEVER_S "922337203685477"
/* Ids per renewal script. */
#define RENEW_CHUNK 256
/* Releases with an unknown outcome remembered per object (the oldest is
 * forgotten first: its retry then answers for itself). */
#define PENDING_MAX 32

typedef struct wd_permit {
  struct wd_permit *next;
  unsigned char raw[16];
  int releasing; /* a release of it may have run: gone is no loss */
  /* Local deadline (monotonic ms): the send time of the last confirmed
   * acquisition or renewal + the lease - margin (dlock__eng_deadline). The
   * server's expiry cannot come before it; after it, it may have. */
  int64_t valid_until;
  /* -1, or the local deadline of an update_lease to a fixed lease whose
   * outcome is unknown: a copy of it may still run and set that lease
   * after a later renewal, so valid_until never passes it (capped). */
  int64_t cap;
} wd_permit;

struct dlock_permits {
  dlock__chobj o; /* client, name, channel */
  char *timeout;  /* {name}:timeout */
  size_t timeout_len;
  /* Held by a renewal batch from its copy of the ids to its reply, and by
   * update_lease: a batch never overwrites a lease set meanwhile. */
  pthread_mutex_t renew_mu;
  pthread_mutex_t mu; /* guards the fields below */
  pthread_cond_t cv;  /* monotonic: the renewer's sleeps */
  wd_permit *wd;      /* permits renewed by the watchdog */
  /* Releases whose outcome is unknown, oldest first: the caller's next
   * release of the id is the same release (release_answer). */
  struct {
    unsigned char raw[16];
    int64_t first_sent;  /* monotonic ms of its first send */
    int64_t valid_until; /* the permit's local deadline then, -1 unknown */
  } pend[PENDING_MAX];
  int npend;
  int started, stop;
  pid_t started_pid;
  pthread_t thr;
};

/* Lua: reclaim(count, set, channel, now, publish, limit) -- expired permits
 * (score <= now; at most `limit` when given) leave the set and go back to
 * the count, which is published when positive. In chunks: unpack() of a
 * long list would overflow Lua's stack. */
#define LUA_RECLAIM                                                            \
  "local function reclaim(cnt, tz, ch, now, pub, limit)\n"                     \
  "  while true do\n"                                                          \
  "    local n = 1000\n"                                                       \
  "    if limit then n = math.min(n, limit) end\n"                             \
  "    if n <= 0 then return end\n"                                            \
  "    local ids = redis.call('zrangebyscore', tz, 0, now, 'limit', 0, n)\n"   \
  "    if #ids == 0 then return end\n"                                         \
  "    redis.call('zrem', tz, unpack(ids))\n"                                  \
  "    local v = redis.call('incrby', cnt, #ids)\n"                            \
  "    if v > 0 then redis.call(pub, ch, v) end\n"                             \
  "    if limit then limit = limit - #ids end\n"                               \
  "    if #ids < n then return end\n"                                          \
  "  end\n"                                                                    \
  "end\n"

static dlock__script g_acquire = {
    "permits_acquire",
    /* KEYS[1] count, [2] set, [3] channel. ARGV[1] expiry, [2] now, [3]
     * never, [4] publish, [5] raw id. 'OK' taken (also when a previous copy
     * of this call took it: its expiry is then raised to this copy's, never
     * lowered -- the caller counts its lease from this attempt's send, and
     * an earlier attempt's slow copy took it with an earlier expiry),
     * ':<score>' the earliest expiry of a taken permit with a lease, nil
     * nothing to wait for but a release. Redisson tryAcquire(1). */
    LUA_RECLAIM "local mine = redis.call('zscore', KEYS[2], ARGV[5])\n"
                "if mine then\n"
                "  if tonumber(mine) < tonumber(ARGV[1]) then\n"
                "    redis.call('zadd', KEYS[2], ARGV[1], ARGV[5])\n"
                "  end\n"
                "  return 'OK'\n"
                "end\n"
                "reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[4], 1)\n"
                "local v = redis.call('get', KEYS[1])\n"
                "if v and tonumber(v) >= 1 then\n"
                "  redis.call('decrby', KEYS[1], 1)\n"
                "  redis.call('zadd', KEYS[2], ARGV[1], ARGV[5])\n"
                "  local ttl = redis.call('pttl', KEYS[1])\n"
                "  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end\n"
                "  return 'OK'\n"
                "end\n"
                "local f = redis.call('zrange', KEYS[2], 0, 0, 'withscores')\n"
                "if f[1] and tonumber(f[2]) ~= tonumber(ARGV[3]) then\n"
                "  return ':' .. f[2]\n"
                "end\n"
                "return false\n",
    {0}};

static dlock__script g_release = {
    "permits_release",
    /* KEYS[1] count, [2] channel, [3] set. ARGV[1] raw id, [2] now, [3]
     * publish. 0 no such permit, 1 released, 2 released but found past its
     * lease. Redisson tryRelease(id). */
    "local e = redis.call('zscore', KEYS[3], ARGV[1])\n"
    "if not e then return 0 end\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "local v = redis.call('incrby', KEYS[1], 1)\n"
    "redis.call(ARGV[3], KEYS[2], v)\n"
    "if tonumber(e) <= tonumber(ARGV[2]) then return 2 end\n"
    "return 1\n",
    {0}};

static dlock__script g_update = {
    "permits_update_lease",
    /* KEYS[1] count, [2] set, [3] channel. ARGV[1] expiry ('+<expiry>': a
     * renewal, which only raises an expiry -- a late copy of an earlier
     * renewal must not cut a later one's, issue 38), [2] now, [3] publish,
     * [4..] raw ids. One '1' (updated) or '0' (gone) per id. Redisson
     * updateLeaseTime (sets the expiry); the watchdog's renewal. */
    LUA_RECLAIM "reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], nil)\n"
                "local e = ARGV[1]\n"
                "local up = string.sub(e, 1, 1) == '+'\n"
                "if up then e = string.sub(e, 2) end\n"
                "local out = {}\n"
                "for i = 4, #ARGV do\n"
                "  local s = redis.call('zscore', KEYS[2], ARGV[i])\n"
                "  if s then\n"
                "    if not up or tonumber(s) < tonumber(e) then\n"
                "      redis.call('zadd', KEYS[2], e, ARGV[i])\n"
                "    end\n"
                "    out[#out + 1] = '1'\n"
                "  else\n"
                "    out[#out + 1] = '0'\n"
                "  end\n"
                "end\n"
                "return table.concat(out)\n",
    {0}};

static dlock__script g_available = {
    "permits_available",
    /* KEYS[1] count, [2] set, [3] channel. ARGV[1] now, [2] publish.
     * Redisson availablePermits. */
    LUA_RECLAIM "reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], nil)\n"
                "local v = redis.call('get', KEYS[1])\n"
                "if not v then return 0 end\n"
                "return tonumber(v)\n",
    {0}};

static dlock__script g_try_set = {
    "permits_try_set",
    /* KEYS[1] count, [2] channel. ARGV[1] n, [2] publish. 1 set, 0 already
     * set. Redisson trySetPermits. */
    "if redis.call('get', KEYS[1]) then return 0 end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call(ARGV[2], KEYS[2], ARGV[1])\n"
    "return 1\n",
    {0}};

static dlock__script g_set = {
    "permits_set",
    /* KEYS[1] count, [2] channel, [3] set. ARGV[1] n, [2] publish. The
     * total (available + taken) becomes n. Redisson setPermits. */
    "local v = redis.call('get', KEYS[1])\n"
    "if not v then\n"
    "  redis.call('set', KEYS[1], ARGV[1])\n"
    "  redis.call(ARGV[2], KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "local total = redis.call('zcard', KEYS[3]) + tonumber(v)\n"
    "if total == tonumber(ARGV[1]) then return 0 end\n"
    "redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - total)\n"
    "redis.call(ARGV[2], KEYS[2], ARGV[1])\n"
    "return 1\n",
    {0}};

static dlock__script g_list = {
    "permits_list",
    /* KEYS[1] count, [2] set. {count or nil, {id, score, id, score...}}:
     * a read, nothing reclaimed. */
    "return {redis.call('get', KEYS[1]),\n"
    "        redis.call('zrange', KEYS[2], 0, -1, 'withscores')}\n",
    {0}};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_scripts(void) {
  dlock__script_init(&g_acquire);
  dlock__script_init(&g_release);
  dlock__script_init(&g_update);
  dlock__script_init(&g_available);
  dlock__script_init(&g_try_set);
  dlock__script_init(&g_set);
  dlock__script_init(&g_list);
}

static void channel_of(dlock__sb *b, const char *name) {
  dlock__prefix_name(b, "redisson_sc", name);
}

static int not_used(dlock__chobj *o) {
  (void)o;
  return DLOCK_ENOTSUP;
}

static const dlock__counter_kind g_kind = {"permits", channel_of,
                                           DLOCK__WAKE_COUNT,
                                           DLOCK__PERMITS_RECHECK_MS, not_used};

/* ---- ids ---------------------------------------------------------------- */

static void to_hex(const unsigned char raw[16], char out[33]) {
  static const char hx[] = "0123456789abcdef";
  for (size_t i = 0; i < 16; i++) {
    out[2 * i] = hx[raw[i] >> 4];
    out[2 * i + 1] = hx[raw[i] & 15];
  }
  out[32] = '\0';
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

static int from_hex(const char *id, unsigned char raw[16]) {
  if (!id)
    return dlock__fail(DLOCK_EINVAL, "permit id is NULL");
  if (strlen(id) != DLOCK_PERMIT_ID_LEN)
    return dlock__fail(DLOCK_EINVAL, "permit id '%.40s' is not %d hex digits",
                       id, DLOCK_PERMIT_ID_LEN);
  for (size_t i = 0; i < 16; i++) {
    int hi = hexval(id[2 * i]), lo = hexval(id[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return dlock__fail(DLOCK_EINVAL, "permit id '%.40s' is not hex", id);
    raw[i] = (unsigned char)(hi << 4 | lo);
  }
  return 0;
}

/* ---- the object --------------------------------------------------------- */

/* The store an etcd client's object is reached through (its own layout,
 * etcd_permits.c); NULL for a Redis client's (this file's) or NULL. */
static const dlock__store_ops *store_of(dlock_permits *p) {
  return dlock__counter_store(p ? &p->o : NULL);
}

int dlock_permits_new(dlock_client *c, const char *name, dlock_permits **out) {
  dlock__clear_error();
  if (!c) {
    if (out)
      *out = NULL;
    return dlock__fail(DLOCK_EINVAL, "client is NULL");
  }
  if (c->store) /* the etcd store: etcd_permits.c */
    return c->store->permits_new(c, name, out);
  dlock_permits *p = NULL;
  int rc =
      dlock__counter_new(c, name, &g_kind, sizeof(dlock_permits), (void **)&p);
  if (rc)
    return rc;
  dlock__sb t;
  dlock__sb_init(&t);
  dlock__suffix_name(&t, name, "timeout");
  if (!t.oom && c->cl &&
      dlock__key_slot(name, strlen(name)) != dlock__key_slot(t.p, t.len)) {
    dlock__sb_free(&t);
    dlock__counter_free(&p->o);
    return dlock__fail(DLOCK_EINVAL,
                       "permits '%s': on a cluster its keys would fall into "
                       "different slots (CROSSSLOT)",
                       name);
  }
  p->timeout = t.oom ? NULL : dlock__strndup(t.p, t.len);
  p->timeout_len = t.len;
  dlock__sb_free(&t);
  if (!p->timeout || pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p->timeout);
    dlock__counter_free(&p->o);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (pthread_mutex_init(&p->renew_mu, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    free(p->timeout);
    dlock__counter_free(&p->o);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (dlock__cond_init_mono(&p->cv) != 0) {
    pthread_mutex_destroy(&p->renew_mu);
    pthread_mutex_destroy(&p->mu);
    free(p->timeout);
    dlock__counter_free(&p->o);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  *out = p;
  return 0;
}

void dlock_permits_free(dlock_permits *p) {
  if (!p)
    return;
  if (store_of(p)) {
    store_of(p)->permits_free(p);
    return;
  }
  if (p->o.c->fork_gen == dlock__fork_gen())
    dlock__note_permit_end(p->o.c, p, NULL);
  dlock__mu_lock(&p->mu);
  int started = p->started;
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
  dlock__mu_unlock(&p->mu);
  /* In a fork child the renewer does not exist: nothing to join. */
  if (started && p->started_pid == getpid())
    pthread_join(p->thr, NULL);
  while (p->wd) {
    wd_permit *nx = p->wd->next;
    free(p->wd);
    p->wd = nx;
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->renew_mu);
  free(p->timeout);
  dlock__counter_free(&p->o);
}

static int check(dlock_permits *p) {
  dlock__clear_error();
  return dlock__counter_check(p ? &p->o : NULL, "permits");
}

/* The publish command as an argument. */
static const char *pub(dlock_permits *p, size_t *len) {
  const char *s = dlock__publish_cmd(p->o.c);
  *len = strlen(s);
  return s;
}

/* Runs sc with KEYS [count, set, channel] (order: 1 = [count, channel,
 * set], as Redisson's release and setPermits have them; 2 = [count, set]). */
static int eval_how(dlock_permits *p, const dlock__script *sc, int order,
                    int nargs, const char **args, const size_t *alens,
                    const dlock__send_how *how, redisReply **r) {
  pthread_once(&g_once, init_scripts);
  const char *keys[3] = {p->o.name, p->timeout, p->o.channel};
  size_t klens[3] = {p->o.name_len, p->timeout_len, p->o.channel_len};
  int nk = 3;
  if (order == 1) {
    keys[1] = p->o.channel;
    klens[1] = p->o.channel_len;
    keys[2] = p->timeout;
    klens[2] = p->timeout_len;
  } else if (order == 2) {
    nk = 2;
  }
  int rc =
      dlock__eval_how(p->o.c, sc, nk, keys, klens, nargs, args, alens, how, r);
  return dlock__explain_wrongtype(p->o.c, sc, rc, nk, keys, klens);
}

static int eval(dlock_permits *p, const dlock__script *sc, int order, int nargs,
                const char **args, const size_t *alens, redisReply **r) {
  static const dlock__send_how how = {0, 0, 0};
  return eval_how(p, sc, order, nargs, args, alens, &how, r);
}

static int64_t wd_lease(dlock_permits *p) {
  return p->o.c->cfg.watchdog_timeout_ms;
}

/* ---- the watchdog ------------------------------------------------------- */

/* Renews ids[0..n) to expire `lease` ms from now; gone[i] = 1 for each
 * found gone. With no_sync (the watchdog's renewals) without the WAIT of
 * sync_replicas. 0 or a negative code. */
static int renew(dlock_permits *p, unsigned char (*ids)[16], size_t n,
                 int64_t lease, char *gone, int no_sync, int raise_only) {
  const dlock__send_how how = {0, no_sync, 0};
  for (size_t at = 0; at < n; at += RENEW_CHUNK) {
    size_t k = n - at < RENEW_CHUNK ? n - at : RENEW_CHUNK;
    const char *args[3 + RENEW_CHUNK];
    size_t alens[3 + RENEW_CHUNK];
    char es[25], ns[24];
    int64_t now = dlock__wall_ms();
    args[0] = es;
    es[0] = '+'; /* a renewal: raises only (g_update) */
    alens[0] = dlock__fmt_i64(es + 1, now + lease) + 1;
    if (!raise_only) {
      args[0] = es + 1;
      alens[0]--;
    }
    args[1] = ns;
    alens[1] = dlock__fmt_i64(ns, now);
    args[2] = pub(p, &alens[2]);
    for (size_t i = 0; i < k; i++) {
      args[3 + i] = (const char *)ids[at + i];
      alens[3 + i] = 16;
    }
    redisReply *r = NULL;
    int rc = eval_how(p, &g_update, 0, (int)(3 + k), args, alens, &how, &r);
    if (rc == 0 && r && r->type == REDIS_REPLY_STRING && r->len == k)
      for (size_t i = 0; i < k; i++)
        gone[at + i] = (char)(r->str[i] == '0');
    else if (rc == 0)
      rc = dlock__fail(DLOCK_EPROTO, "permits '%s': unexpected renewal reply",
                       p->o.name);
    freeReplyObject(r);
    if (rc)
      return rc;
  }
  return 0;
}

/* until, no later than w's cap (the lease an update in doubt may set). */
static int64_t capped(const wd_permit *w, int64_t until) {
  return w->cap >= 0 && w->cap < until ? w->cap : until;
}

/* The renewed permit raw (mu held), or NULL. */
static wd_permit *wd_find(dlock_permits *p, const unsigned char raw[16]) {
  for (wd_permit *w = p->wd; w; w = w->next)
    if (memcmp(w->raw, raw, 16) == 0)
      return w;
  return NULL;
}

/* Removes raw from the renewed permits (mu held): 1 if it was there and
 * no release of it may have run (its end is a loss to report). */
static int wd_unlink(dlock_permits *p, const unsigned char raw[16]) {
  for (wd_permit **pp = &p->wd; *pp; pp = &(*pp)->next)
    if (memcmp((*pp)->raw, raw, 16) == 0) {
      wd_permit *w = *pp;
      int loss = !w->releasing;
      *pp = w->next;
      free(w);
      return loss;
    }
  return 0;
}

/* Runs cfg.on_lock_lost once per lost permit (mu held; released during the
 * callbacks). */
static void report_lost(dlock_permits *p, int gone, int unrenewed) {
  dlock_client *c = p->o.c;
  if (!c->cfg.on_lock_lost || gone + unrenewed == 0)
    return;
  dlock__mu_unlock(&p->mu);
  for (int k = 0; k < gone + unrenewed; k++) {
    dlock__fail(DLOCK_ELOST,
                k < gone ? "permits '%s': a renewal found a permit gone "
                           "(expired and reclaimed, or released elsewhere)"
                         : "permits '%s': renewals of a permit failed until "
                           "its lease ran out",
                p->o.name);
    dlock__callout_lost(&c->cfg, p->o.name);
  }
  dlock__mu_lock(&p->mu);
}

/* The permits past their local deadline leave the list (mu held): a
 * renewal that could not reach Redis in time cannot keep them, and another
 * client may reclaim them from now on. Returns how many. */
static int drop_unrenewed(dlock_permits *p, int64_t now) {
  int n = 0;
  for (wd_permit **pp = &p->wd; *pp;) {
    if ((*pp)->valid_until <= now) {
      wd_permit *w = *pp;
      *pp = w->next;
      n += !w->releasing; /* released, maybe: no loss to report */
      free(w);
    } else {
      pp = &(*pp)->next;
    }
  }
  return n;
}

static void *renewer(void *arg) {
  dlock_permits *p = arg;
  /* A renewal path: its connects and handshakes wait at most half a period
   * (the object may outlive its client: no abort pipe of the client's). */
  dlock__io_guard(-1, dlock__wd_wait_bound(&p->o.c->cfg), 1);
  int64_t lease = wd_lease(p);
  int64_t period = lease / 3;
  if (period < 1)
    period = 1;
  int64_t retry = period / 4 < 1000 ? period / 4 : 1000;
  if (retry < 1)
    retry = 1;
  int64_t next = dlock__now_ms() + period;
  dlock__mu_lock(&p->mu);
  for (;;) {
    for (;;) {
      int64_t now = dlock__now_ms(), wake = next;
      report_lost(p, 0, drop_unrenewed(p, now));
      for (wd_permit *w = p->wd; w; w = w->next)
        if (w->valid_until < wake)
          wake = w->valid_until;
      if (p->stop || now >= next)
        break;
      struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, wake - now);
      pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    if (p->stop)
      break;
    /* renew_mu before mu, as update_lease takes them. */
    dlock__mu_unlock(&p->mu);
    dlock__mu_lock(&p->renew_mu);
    dlock__mu_lock(&p->mu);
    size_t n = 0;
    int64_t earliest = -1;
    for (wd_permit *w = p->wd; w; w = w->next, n++)
      if (earliest < 0 || w->valid_until < earliest)
        earliest = w->valid_until;
    unsigned char(*ids)[16] = n ? dlock__malloc(n * 16) : NULL;
    char *gone = n ? dlock__calloc(n, 1) : NULL;
    if (n && (!ids || !gone)) {
      free(ids);
      free(gone);
      dlock__mu_unlock(&p->renew_mu);
      next = dlock__now_ms() + retry;
      continue;
    }
    size_t i = 0;
    for (wd_permit *w = p->wd; w; w = w->next)
      memcpy(ids[i++], w->raw, 16);
    dlock__mu_unlock(&p->mu);
    int64_t sent = dlock__now_ms();
    /* The router stops retrying at the earliest local deadline: past it
     * the permit is lost whatever a later renewal would say. */
    dlock__budget b;
    dlock__budget_start(&b, NULL, earliest > sent ? earliest - sent : 1);
    int rc = n ? renew(p, ids, n, lease, gone, 1, 1) : 0;
    dlock__call_deadline_reset();
    int lost = 0;
    dlock__mu_unlock(&p->renew_mu);
    dlock__mu_lock(&p->mu);
    next = rc == 0 ? sent + period : dlock__now_ms() + retry;
    for (size_t j = 0; rc == 0 && j < n; j++) {
      if (gone[j]) {
        /* Still ours to renew (not released meanwhile)? Then it is lost. */
        lost += wd_unlink(p, ids[j]);
        continue;
      }
      wd_permit *w = wd_find(p, ids[j]);
      if (w)
        w->valid_until = capped(w, dlock__eng_deadline(sent, lease));
    }
    free(ids);
    free(gone);
    report_lost(p, lost, 0);
  }
  dlock__mu_unlock(&p->mu);
  return NULL;
}

/* Adds raw to the renewed permits, starting the renewer: 0 or a code. */
static int wd_add(dlock_permits *p, const unsigned char raw[16], int64_t sent) {
  wd_permit *w = dlock__calloc(1, sizeof *w);
  if (!w)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  memcpy(w->raw, raw, 16);
  int64_t lease = wd_lease(p);
  w->valid_until = dlock__eng_deadline(sent, lease);
  w->cap = -1;
  dlock__mu_lock(&p->mu);
  int rc = 0;
  if (!p->started) {
    if (dlock__thread_start(&p->thr, renewer, p) != 0)
      rc = dlock__fail(DLOCK_ENOMEM,
                       "permits '%s': cannot start the "
                       "watchdog thread",
                       p->o.name);
    else {
      p->started = 1;
      p->started_pid = getpid();
    }
  }
  if (rc == 0) {
    w->next = p->wd;
    p->wd = w;
  } else {
    free(w);
  }
  dlock__mu_unlock(&p->mu);
  return rc;
}

/* ---- acquire ------------------------------------------------------------ */

typedef struct attempt {
  dlock_permits *p;
  unsigned char raw[16];
  int64_t lease;       /* ms, the watchdog's when wd */
  int64_t next_expiry; /* wall ms of the earliest lease in the set; 0 none */
  int64_t sent;        /* monotonic ms the last attempt was sent */
} attempt;

/* One attempt: 1 taken, 0 not, or a negative code. */
static int try_once(void *arg) {
  attempt *a = arg;
  char es[24], ns[24];
  a->sent = dlock__now_ms();
  int64_t now = dlock__wall_ms();
  const char *args[5];
  size_t alens[5];
  args[0] = es;
  alens[0] = dlock__fmt_i64(es, now + a->lease);
  args[1] = ns;
  alens[1] = dlock__fmt_i64(ns, now);
  args[2] = PERMIT_NEVER_S;
  alens[2] = strlen(PERMIT_NEVER_S);
  args[3] = pub(a->p, &alens[3]);
  args[4] = (const char *)a->raw;
  alens[4] = 16;
  redisReply *r = NULL;
  int rc = eval(a->p, &g_acquire, 0, 5, args, alens, &r);
  a->next_expiry = 0;
  if (rc == 0) {
    if (r && r->type == REDIS_REPLY_NIL)
      rc = 0;
    else if (r && r->type == REDIS_REPLY_STRING && r->len == 2 &&
             memcmp(r->str, "OK", 2) == 0)
      rc = 1;
    else if (r && r->type == REDIS_REPLY_STRING && r->len > 1 &&
             r->str[0] == ':') {
      a->next_expiry = (int64_t)strtod(r->str + 1, NULL);
      rc = 0;
    } else
      rc = dlock__fail(DLOCK_EPROTO, "permits '%s': unexpected acquire reply",
                       a->p->o.name);
  }
  freeReplyObject(r);
  return rc;
}

/* How long a waiter may sleep before its next attempt: the recheck
 * period, or less when a permit expires sooner. */
static int64_t recheck_in(void *arg) {
  const attempt *a = arg;
  int64_t ms = DLOCK__PERMITS_RECHECK_MS;
  if (a->next_expiry > 0) {
    int64_t d = a->next_expiry - dlock__wall_ms() + 1;
    if (d < 1)
      d = 1;
    if (d < ms)
      ms = d;
  }
  return ms;
}

/* The acquisition a made was answered after its local deadline (its send +
 * lease - margin): the server may have reclaimed the permit for someone
 * else already, so it is no permit -- given back now (issue 38.5: a reply
 * 1.5 s late for a 500 ms lease was a permit, and another client took the
 * same one). Returns DLOCK_ELOST. */
static int late_answer(dlock_permits *p, const attempt *a) {
  int64_t took = dlock__now_ms() - a->sent;
  char hex[33];
  to_hex(a->raw, hex);
  dlock__err_keep_begin();
  int rc = dlock_permits_release(p, hex);
  dlock__err_keep_end();
  return dlock__fail(DLOCK_ELOST,
                     "permits '%s': the acquisition was answered %lld ms "
                     "after it was sent, past its lease of %lld ms (less the "
                     "drift margin): the permit may have been reclaimed "
                     "meanwhile, so it is not held%s",
                     p->o.name, (long long)took, (long long)a->lease,
                     rc == 0 || rc == DLOCK_ELOST
                         ? "; it was given back"
                         : "; giving it back failed (it ends with its lease)");
}

int dlock_permits_acquire(dlock_permits *p, long long wait_ms,
                          long long lease_ms,
                          char id_out[DLOCK_PERMIT_ID_LEN + 1]) {
  int rc = check(p);
  if (rc)
    return rc;
  if (!id_out)
    return dlock__fail(DLOCK_EINVAL, "id_out is NULL");
  id_out[0] = '\0';
  if ((rc = dlock__check_lease(lease_ms, "permits", p->o.name)) != 0)
    return rc;
  if (store_of(p))
    return store_of(p)->permits_acquire(p, wait_ms, lease_ms, id_out);
  attempt a = {p, {0}, lease_ms > 0 ? lease_ms : wd_lease(p), 0, 0};
  if (dlock__random_bytes(a.raw, sizeof a.raw) != 0)
    return dlock__fail(DLOCK_ENOMEM, "permits '%s': no random bytes",
                       p->o.name);
  dlock__budget b;
  dlock__budget_start(&b, p->o.c, wait_ms);
  char what[300];
  snprintf(what, sizeof what, "permits '%.256s'", p->o.name);
  rc = try_once(&a);
  if (rc == 0) {
    if (wait_ms == 0)
      return dlock__fail(DLOCK_EBUSY, "permits '%s': no permit available",
                         p->o.name);
    void *note = dlock__note_wait(p->o.c, p->o.name, dlock__tid());
    rc = dlock__sub_wait_check(p->o.c, p->o.channel, DLOCK__WAKE_COUNT, &b,
                               DLOCK__PERMITS_RECHECK_MS, recheck_in, try_once,
                               &a, what);
    dlock__note_wait_end(p->o.c, note);
    if (rc == DLOCK_ETIMEDOUT)
      return dlock__fail(rc, "permits '%s': no permit within %lld ms",
                         p->o.name, wait_ms);
    if (rc)
      return rc;
  } else if (rc < 0) {
    return rc;
  }
  int64_t late = dlock__now_ms() - dlock__eng_deadline(a.sent, a.lease);
  if (late >= 0)
    return late_answer(p, &a);
  if (lease_ms <= 0 && (rc = wd_add(p, a.raw, a.sent)) != 0) {
    /* No renewal possible: give the permit back rather than let it lapse
     * while the caller believes it holds it. */
    dlock__err_keep_begin();
    char hex[33];
    to_hex(a.raw, hex);
    (void)dlock_permits_release(p, hex);
    dlock__err_keep_end();
    return rc;
  }
  to_hex(a.raw, id_out);
  dlock__note_permit(p->o.c, p, p->o.name, id_out); /* its info key */
  return 0;
}

int dlock_permits_try_acquire(dlock_permits *p, long long lease_ms,
                              char id_out[DLOCK_PERMIT_ID_LEN + 1]) {
  return dlock_permits_acquire(p, 0, lease_ms, id_out);
}

/* ---- release, update ---------------------------------------------------- */

/* Where raw is among the releases with an unknown outcome (mu held), or
 * -1. */
static int pend_find(const dlock_permits *p, const unsigned char raw[16]) {
  for (int i = 0; i < p->npend; i++)
    if (memcmp(p->pend[i].raw, raw, 16) == 0)
      return i;
  return -1;
}

/* Forgets raw's release with an unknown outcome, if any (mu held). */
static void pend_drop(dlock_permits *p, const unsigned char raw[16]) {
  int i = pend_find(p, raw);
  if (i < 0)
    return;
  memmove(&p->pend[i], &p->pend[i + 1],
          (size_t)(p->npend - i - 1) * sizeof p->pend[0]);
  p->npend--;
}

/* Remembers a release of raw whose outcome is unknown (mu held): its first
 * send, and the permit's local deadline then (-1 unknown). */
static void pend_add(dlock_permits *p, const unsigned char raw[16],
                     int64_t first_sent, int64_t valid_until) {
  if (pend_find(p, raw) >= 0)
    return;
  if (p->npend == PENDING_MAX)
    pend_drop(p, p->pend[0].raw);
  memcpy(p->pend[p->npend].raw, raw, 16);
  p->pend[p->npend].first_sent = first_sent;
  p->pend[p->npend].valid_until = valid_until;
  p->npend++;
}

/* Before a release of raw is sent (mu held): *first its earlier send with
 * an unknown outcome (-1 none) and *until the permit's local deadline (-1
 * unknown); a renewal that finds it gone from now on says nothing. */
static void release_begin(dlock_permits *p, const unsigned char raw[16],
                          int64_t *first, int64_t *until) {
  int i = pend_find(p, raw);
  wd_permit *w = wd_find(p, raw);
  *first = i >= 0 ? p->pend[i].first_sent : -1;
  *until = i >= 0 ? p->pend[i].valid_until : w ? w->valid_until : -1;
  if (w)
    w->releasing = 1;
}

/* After it (mu held): an outcome unknown (DLOCK_ECONN once something was
 * sent) is remembered, and the permit stays renewed (a renewal finding it
 * gone then is no loss); any other answer ends the permit's renewal and
 * what was remembered -- except a failure before anything was sent. */
static void release_end(dlock_permits *p, const unsigned char raw[16], int rc,
                        int sends, int64_t sent, int64_t until) {
  if (rc == DLOCK_ECONN && sends > 0) {
    pend_add(p, raw, sent, until);
  } else if (rc == 0 || sends > 0) {
    pend_drop(p, raw);
    wd_unlink(p, raw);
  } else {
    wd_permit *w = wd_find(p, raw);
    if (w && pend_find(p, raw) < 0)
      w->releasing = 0; /* nothing sent, nothing pending: as before */
  }
}

int dlock_permits_release(dlock_permits *p, const char *id) {
  int rc = check(p);
  if (rc)
    return rc;
  if (store_of(p))
    return store_of(p)->permits_release(p, id);
  unsigned char raw[16];
  if ((rc = from_hex(id, raw)) != 0)
    return rc;
  int64_t first, until;
  dlock__mu_lock(&p->mu);
  release_begin(p, raw, &first, &until);
  dlock__mu_unlock(&p->mu);
  dlock__note_permit_end(p->o.c, p, id);
  char ns[24];
  const char *args[3];
  size_t alens[3];
  args[0] = (const char *)raw;
  alens[0] = 16;
  args[1] = ns;
  alens[1] = dlock__fmt_i64(ns, dlock__wall_ms());
  args[2] = pub(p, &alens[2]);
  redisReply *r = NULL;
  int64_t sent = dlock__now_ms();
  rc = eval(p, &g_release, 1, 3, args, alens, &r);
  long long v = 0;
  rc = dlock__take_int(rc, r, &v, NULL);
  int sends = dlock__exec_sends();
  dlock__mu_lock(&p->mu);
  release_end(p, raw, rc, sends, first >= 0 ? first : sent, until);
  dlock__mu_unlock(&p->mu);
  if (rc)
    return rc;
  if (v == 1)
    return 0;
  /* A release that may have run before -- a copy the router re-sent, or a
   * release of this id whose outcome was unknown -- finds the permit gone:
   * that copy released it (docs/errors.md), unless it was first sent after
   * the permit's local deadline. */
  int64_t first_send = first >= 0 ? first : sent;
  if (v == 0 && (sends > 1 || first >= 0) && (until < 0 || first_send < until))
    return 0;
  if (v == 2)
    return dlock__fail(DLOCK_ELOST,
                       "permits '%s': permit %s was past its lease (given "
                       "back now)",
                       p->o.name, id);
  return dlock__fail(DLOCK_ELOST,
                     "permits '%s': no permit %s (released already, or "
                     "expired and reclaimed)",
                     p->o.name, id);
}

int dlock_permits_update_lease(dlock_permits *p, const char *id,
                               long long lease_ms) {
  int rc = check(p);
  if (rc)
    return rc;
  if (store_of(p))
    return store_of(p)->permits_update_lease(p, id, lease_ms);
  unsigned char raw[16];
  if ((rc = from_hex(id, raw)) != 0)
    return rc;
  if ((rc = dlock__check_lease(lease_ms, "permits", p->o.name)) != 0)
    return rc;
  /* Under renew_mu: a renewal batch never overwrites the lease set here.
   * The permit stays as it is -- renewed or not -- until the update is
   * confirmed: an update that failed stops no renewal (issue 38). */
  dlock__mu_lock(&p->renew_mu);
  char gone = 0;
  unsigned char ids[1][16];
  memcpy(ids[0], raw, 16);
  int64_t sent = dlock__now_ms();
  /* l <= 0 hands it to the watchdog: a renewal, raising only; l > 0 sets
   * the lease asked for (Redisson's updateLeaseTime), shorter too. */
  rc = renew(p, ids, 1, lease_ms > 0 ? lease_ms : wd_lease(p), &gone, 0,
             lease_ms <= 0);
  int renewed = 0;
  if (rc == 0) {
    dlock__mu_lock(&p->mu);
    wd_permit *w = wd_find(p, raw);
    renewed = w != NULL;
    if (gone || lease_ms > 0)
      wd_unlink(p, raw); /* gone, or a fixed lease now: no more renewals */
    else if (w)
      w->valid_until = capped(w, dlock__eng_deadline(sent, wd_lease(p)));
    dlock__mu_unlock(&p->mu);
    if (!gone && lease_ms <= 0 && !renewed)
      rc = wd_add(p, raw, sent);
  } else if (lease_ms > 0) {
    /* Its outcome unknown: the update may have run and set the fixed
     * lease on the server -- or a copy of it may run later, after a
     * renewal, and set it then (renewals only raise; this sets). A renewed
     * permit's local deadline is no later than that lease's from now on:
     * no renewal lifts the cap (the simulator found a renewal that did, and
     * the held copy that lowered the expiry under it afterwards). Else
     * another client could take the permit while this one still counts on
     * the renewed deadline (the loss is told at the cap). */
    dlock__mu_lock(&p->mu);
    wd_permit *w = wd_find(p, raw);
    int64_t until = dlock__eng_deadline(sent, lease_ms);
    if (w && (w->cap < 0 || until < w->cap))
      w->cap = until;
    if (w && until < w->valid_until) {
      w->valid_until = until;
      pthread_cond_signal(&p->cv); /* the renewer looks at it then */
    }
    dlock__mu_unlock(&p->mu);
  }
  dlock__mu_unlock(&p->renew_mu);
  if (rc)
    return rc;
  if (gone)
    return dlock__fail(DLOCK_ELOST,
                       "permits '%s': no permit %s (released, or expired)",
                       p->o.name, id);
  return 0;
}

/* ---- counts ------------------------------------------------------------- */

int dlock_permits_available(dlock_permits *p, long long *n) {
  int rc = check(p);
  if (rc)
    return rc;
  if (store_of(p))
    return store_of(p)->permits_available(p, n);
  if (!n)
    return dlock__fail(DLOCK_EINVAL, "n is NULL");
  *n = 0;
  char ns[24];
  const char *args[2];
  size_t alens[2];
  args[0] = ns;
  alens[0] = dlock__fmt_i64(ns, dlock__wall_ms());
  args[1] = pub(p, &alens[1]);
  redisReply *r = NULL;
  rc = eval(p, &g_available, 0, 2, args, alens, &r);
  return dlock__take_int(rc, r, n, NULL);
}

static int set_count(dlock_permits *p, const dlock__script *sc, int order,
                     long long permits, long long *v) {
  int rc = check(p);
  if (rc)
    return rc;
  if (permits < 0)
    return dlock__fail(DLOCK_EINVAL, "permits '%s': negative permits %lld",
                       p->o.name, permits);
  char ns[24];
  const char *args[2];
  size_t alens[2];
  args[0] = ns;
  alens[0] = dlock__fmt_i64(ns, permits);
  args[1] = pub(p, &alens[1]);
  redisReply *r = NULL;
  rc = eval(p, sc, order, 2, args, alens, &r);
  return dlock__take_int(rc, r, v, NULL);
}

int dlock_permits_try_set_permits(dlock_permits *p, long long permits) {
  long long v = 0;
  if (store_of(p)) {
    int rc = check(p);
    return rc ? rc : store_of(p)->permits_set(p, permits, 1);
  }
  int rc = set_count(p, &g_try_set, 1, permits, &v);
  if (rc)
    return rc;
  if (v != 1 && dlock__exec_sends() <= 1)
    return dlock__fail(DLOCK_EBUSY, "permits '%s' are already set", p->o.name);
  return 0;
}

int dlock_permits_set_permits(dlock_permits *p, long long permits) {
  long long v = 0;
  if (store_of(p)) {
    int rc = check(p);
    return rc ? rc : store_of(p)->permits_set(p, permits, 0);
  }
  return set_count(p, &g_set, 1, permits, &v);
}

/* ---- list --------------------------------------------------------------- */

int dlock_permits_list(dlock_permits *p, dlock_permit **out, size_t *n,
                       long long *available) {
  int rc = check(p);
  if (rc)
    return rc;
  if (store_of(p) && out && n)
    return store_of(p)->permits_list(p, out, n, available);
  if (!out || !n)
    return dlock__fail(DLOCK_EINVAL, "out or n is NULL");
  *out = NULL;
  *n = 0;
  if (available)
    *available = 0;
  redisReply *r = NULL;
  rc = eval(p, &g_list, 2, 0, NULL, NULL, &r);
  int shaped = rc == 0 && r && r->type == REDIS_REPLY_ARRAY &&
               r->elements >= 2 && r->element[1]->type == REDIS_REPLY_ARRAY &&
               r->element[1]->elements % 2 == 0;
  if (rc == 0 && !shaped)
    rc = dlock__fail(DLOCK_EPROTO, "permits '%s': unexpected list reply",
                     p->o.name);
  int set = shaped && r->element[0]->type == REDIS_REPLY_STRING;
  if (set) {
    char *end = NULL;
    long long v = strtoll(r->element[0]->str, &end, 10);
    if (r->element[0]->len == 0 || *end)
      rc = dlock__fail(DLOCK_EPROTO,
                       "permits '%s': the key holds '%.40s', not a count",
                       p->o.name, r->element[0]->str);
    else if (available)
      *available = v;
  }
  size_t k = rc == 0 && shaped ? r->element[1]->elements / 2 : 0;
  dlock_permit *list = k ? dlock__calloc(k, sizeof *list) : NULL;
  if (k && !list)
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  for (size_t i = 0; list && i < k; i++) { /* list: set iff rc == 0 && k */
    const redisReply *m = r->element[1]->element[2 * i];
    const redisReply *s = r->element[1]->element[2 * i + 1];
    if (m->type == REDIS_REPLY_STRING && m->len == 16)
      to_hex((const unsigned char *)m->str, list[i].id);
    else /* not a Redisson id: shown as far as it is text */
      snprintf(list[i].id, sizeof list[i].id, "%.*s",
               (int)(m->len < 32 ? m->len : 32), m->str ? m->str : "");
    long long e = s->str ? (long long)strtod(s->str, NULL) : 0;
    list[i].expires_at_ms = e >= PERMIT_NEVER ? -1 : e;
  }
  freeReplyObject(r);
  if (rc) {
    free(list);
    return rc;
  }
  *out = list;
  *n = k;
  return set;
}

void dlock_permits_list_free(dlock_permit *list) { free(list); }
