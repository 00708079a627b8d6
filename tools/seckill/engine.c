/* engine.c -- the code of every strategy of the lab: the naive Redis
 * locks written the way the background articles write them, dlock,
 * segmented, atomic and redlock, one purchase at a time (engine.h). Used
 * by dlock-seckill's workers and by dlock-stockd's HTTP threads. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"

/* A dlock wait is bounded by this slice and then repeated: a fair-lock
 * waiter that dies with its worker is skipped by the others once its
 * (short) deadline passes. A stopped run ends waits at once anyway
 * (sk_engine_cancel_waits from a watcher thread). */
#define SK_WAIT_SLICE_MS 1000
/* Strategy "permits": a buyer that finds no unit while reservations are
 * pending waits this long for one to come back, then looks again whether
 * any is still pending (a paid reservation announces nothing: without it
 * the sold-out answer would wait for a whole slice). */
#define SK_PERMITS_SLICE_MS 100

/* ---- small helpers ------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static int aborted(sk_eth *th) { return th->e->aborted && th->e->aborted(th); }

static void note_error(sk_eth *th, const char *fmt, ...) {
  if (!th->e->on_error)
    return;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  th->e->on_error(th, msg);
}

/* One command on the thread's own connection; reconnects once if the
 * connection broke. NULL (error noted) on failure or an error reply. */
static redisReply *cmd(sk_eth *th, const char *fmt, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (!th->rc) {
      char err[200];
      th->rc = dlc_redis_connect_key(th->e->url, th->e->k.stock, SK_CONNECT_S,
                                     SK_COMMAND_S, err, sizeof err);
      if (!th->rc) {
        note_error(th, "%s", err);
        return NULL;
      }
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(th->rc, fmt, ap);
    va_end(ap);
    if (!r) {
      note_error(th, "redis: %s", th->rc->errstr);
      redisFree(th->rc);
      th->rc = NULL;
      continue;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      note_error(th, "redis: %s", r->str);
      freeReplyObject(r);
      return NULL;
    }
    return r;
  }
  return NULL;
}

/* Reads an integer-valued string key: 1 and *v set, 0 if missing, -1 on
 * error. */
static int get_ll(sk_eth *th, const char *key, long long *v) {
  redisReply *r = cmd(th, "GET %s", key);
  if (!r)
    return -1;
  int rc = 0;
  if (r->type == REDIS_REPLY_STRING) {
    *v = strtoll(r->str, NULL, 10);
    rc = 1;
  }
  freeReplyObject(r);
  return rc;
}

/* A spinning naive lock backs off 0.5-2 ms between attempts. Returns 1
 * when the run was stopped. */
static int spin_wait(sk_eth *th) {
  if (aborted(th))
    return 1;
  dlc_sleep_us(500 + (long long)(rng_next(&th->rng) % 1500));
  return aborted(th);
}

static void business_work(sk_eth *th) {
  const sk_engine *e = th->e;
  long long lo = (long long)(e->work_min_ms * 1000.0);
  long long hi = (long long)(e->work_max_ms * 1000.0);
  long long us = lo;
  if (hi > lo)
    us += (long long)(rng_next(&th->rng) % (uint64_t)(hi - lo + 1));
  dlc_sleep_us(us);
}

static void killpoint(sk_eth *th, enum sk_killpoint kp) {
  if (th->e->killpoint)
    th->e->killpoint(th, kp);
}

static void seg_key(char *buf, size_t n, const char *base, long long seg,
                    long long nseg) {
  if (nseg > 1)
    snprintf(buf, n, "%s:%lld", base, seg);
  else
    snprintf(buf, n, "%s", base);
}

/* ---- the locks ------------------------------------------------------------
 * lock_*: 0 = held, SK_O_DEADLOCK = the run was stopped while waiting,
 * SK_O_ERROR = a call failed. unlock_*: 0 or -1 (counted as an error). */

static int lock_setnx(sk_eth *th, const char *key, int with_expire) {
  for (;;) {
    redisReply *r = cmd(th, "SETNX %s %s", key, th->token);
    if (!r)
      return SK_O_ERROR;
    int got = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (got) {
      if (with_expire) {
        killpoint(th, SK_KP_BETWEEN); /* a crash here: no expiry, ever */
        r = cmd(th, "PEXPIRE %s %lld", key, th->e->lease_ms);
        if (!r)
          return SK_O_ERROR;
        freeReplyObject(r);
      }
      return 0;
    }
    if (spin_wait(th))
      return SK_O_DEADLOCK;
  }
}

/* The "SETNX + GETSET" scheme: the value is the holder's expiry time
 * (wall clock, ms). A waiter that finds it in the past swaps in its own
 * expiry with GETSET; if the old value it got back is still in the past,
 * nobody beat it to the takeover and it holds the lock. */
static int lock_getset(sk_eth *th, const char *key) {
  long long lease = th->e->lease_ms;
  for (;;) {
    long long mine = dlc_wall_ms() + lease + 1;
    redisReply *r = cmd(th, "SETNX %s %lld", key, mine);
    if (!r)
      return SK_O_ERROR;
    int got = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (got)
      return 0;
    long long cur = 0;
    int have = get_ll(th, key, &cur);
    if (have < 0)
      return SK_O_ERROR;
    if (have == 1 && cur < dlc_wall_ms()) {
      mine = dlc_wall_ms() + lease + 1;
      r = cmd(th, "GETSET %s %lld", key, mine);
      if (!r)
        return SK_O_ERROR;
      int took = r->type == REDIS_REPLY_NIL ||
                 (r->type == REDIS_REPLY_STRING &&
                  strtoll(r->str, NULL, 10) < dlc_wall_ms());
      freeReplyObject(r);
      if (took)
        return 0;
    }
    if (have == 0)
      continue; /* released meanwhile: try SETNX again at once */
    if (spin_wait(th))
      return SK_O_DEADLOCK;
  }
}

static int lock_set_nx_px(sk_eth *th, const char *key) {
  for (;;) {
    redisReply *r =
        cmd(th, "SET %s %s NX PX %lld", key, th->token, th->e->lease_ms);
    if (!r)
      return SK_O_ERROR;
    int got = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (got)
      return 0;
    if (spin_wait(th))
      return SK_O_DEADLOCK;
  }
}

static const char owner_del_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

static int plain_del(sk_eth *th, const char *key) {
  redisReply *r = cmd(th, "DEL %s", key);
  if (!r)
    return -1;
  freeReplyObject(r);
  return 0;
}

/* dlock waits in slices so that a stopped run is noticed. */
static int lock_dlock(sk_eth *th, dlock_mutex *m) {
  for (;;) {
    if (aborted(th))
      return SK_O_DEADLOCK;
    int rc = dlock_mutex_timedlock(
        m, th->e->s->kind == SK_FAIR ? SK_FAIR_SLICE_MS : SK_WAIT_SLICE_MS, -1);
    if (rc == 0)
      return 0;
    if (rc == DLOCK_ECANCELED)
      return SK_O_DEADLOCK; /* the run was stopped */
    if (rc != DLOCK_ETIMEDOUT) {
      note_error(th, "dlock_mutex_timedlock: %s (%s)", dlock_err_name(rc),
                 dlock_last_error());
      return SK_O_ERROR;
    }
  }
}

static int unlock_dlock(sk_eth *th, dlock_mutex *m) {
  int rc = dlock_mutex_unlock(m);
  if (rc != 0) {
    note_error(th, "dlock_mutex_unlock: %s (%s)", dlock_err_name(rc),
               dlock_last_error());
    return -1;
  }
  return 0;
}

static int lock_redlock(sk_eth *th) {
  for (;;) {
    if (aborted(th))
      return SK_O_DEADLOCK;
    int rc = dlock_redlock_timedlock(th->e->rl, SK_WAIT_SLICE_MS, -1);
    if (rc == 0)
      return 0;
    if (rc == DLOCK_ECANCELED)
      return SK_O_DEADLOCK;
    if (rc != DLOCK_ETIMEDOUT && rc != DLOCK_EQUORUM && rc != DLOCK_EBUSY) {
      note_error(th, "dlock_redlock_timedlock: %s (%s)", dlock_err_name(rc),
                 dlock_last_error());
      return SK_O_ERROR;
    }
  }
}

/* Acquires the run's lock for segment `seg`. */
static int lock_acquire(sk_eth *th, long long seg) {
  sk_engine *e = th->e;
  char key[160];
  seg_key(key, sizeof key, e->k.lock, seg, e->segments);
  snprintf(th->token, sizeof th->token, "%d:%d:%llu", (int)getpid(), th->t,
           ++th->holds);
  switch (e->s->kind) {
  case SK_LOCAL:
    pthread_mutex_lock(&e->local);
    return 0;
  case SK_SETNX:
    return lock_setnx(th, key, 0);
  case SK_SETNX_EXPIRE:
    return lock_setnx(th, key, 1);
  case SK_GETSET:
    return lock_getset(th, key);
  case SK_SET_NX_PX:
  case SK_OWNER_LUA:
    return lock_set_nx_px(th, key);
  case SK_DLOCK:
  case SK_FAIR:
  case SK_SPIN:
  case SK_SEGMENTED:
  case SK_ETCD:
    return lock_dlock(th, e->m[seg]);
  case SK_REDLOCK:
    return lock_redlock(th);
  default:
    return 0;
  }
}

static int lock_release(sk_eth *th, long long seg) {
  sk_engine *e = th->e;
  char key[160];
  seg_key(key, sizeof key, e->k.lock, seg, e->segments);
  switch (e->s->kind) {
  case SK_LOCAL:
    pthread_mutex_unlock(&e->local);
    return 0;
  case SK_SETNX:
  case SK_SETNX_EXPIRE:
  case SK_GETSET:
  case SK_SET_NX_PX:
    return plain_del(th, key);
  case SK_OWNER_LUA: {
    /* 0 = the lease ran out and the key is gone or someone else's: the
     * naive code ignores it, as the articles' code does. */
    redisReply *r = cmd(th, "EVAL %s 1 %s %s", owner_del_lua, key, th->token);
    if (!r)
      return -1;
    freeReplyObject(r);
    return 0;
  }
  case SK_DLOCK:
  case SK_FAIR:
  case SK_SPIN:
  case SK_SEGMENTED:
  case SK_ETCD:
    return unlock_dlock(th, e->m[seg]);
  case SK_REDLOCK: {
    int rc = dlock_redlock_unlock(e->rl);
    if (rc != 0) {
      note_error(th, "dlock_redlock_unlock: %s (%s)", dlock_err_name(rc),
                 dlock_last_error());
      return -1;
    }
    return 0;
  }
  default:
    return 0;
  }
}

/* ---- one purchase request -------------------------------------------- */

/* The critical section for stock segment `seg` (0 unless segmented), the
 * lock (if any) already held: user check, read, check, work, write, order.
 * Returns an outcome, or -1: this segment is sold out, try the next. */
static int buy(sk_eth *th, long long seg, const char *uid) {
  const sk_engine *r = th->e;
  char stock[160];
  seg_key(stock, sizeof stock, r->k.stock, seg, r->segments);
  if (uid) {
    redisReply *x = cmd(th, "HEXISTS %s %s", r->k.users, uid);
    if (!x)
      return SK_O_ERROR;
    int bought = x->type == REDIS_REPLY_INTEGER && x->integer == 1;
    freeReplyObject(x);
    if (bought)
      return SK_O_DUPLICATE;
  }
  long long left = 0;
  int have = get_ll(th, stock, &left);
  if (have < 0)
    return SK_O_ERROR;
  killpoint(th, SK_KP_READ);
  if (have == 0 || left <= 0)
    return -1;
  business_work(th);
  redisReply *x = cmd(th, "SET %s %lld", stock, left - 1);
  if (!x)
    return SK_O_ERROR;
  freeReplyObject(x);
  x = cmd(th, "INCR %s", r->k.orders);
  if (!x)
    return SK_O_ERROR;
  freeReplyObject(x);
  if (uid) {
    x = cmd(th, "HINCRBY %s %s 1", r->k.users, uid);
    if (!x)
      return SK_O_ERROR;
    freeReplyObject(x);
  }
  return SK_O_ORDER;
}

static const char atomic_lua[] =
    "if ARGV[1] ~= '' and redis.call('hexists', KEYS[3], ARGV[1]) == 1 "
    "then return -1 end "
    "local s = tonumber(redis.call('get', KEYS[1]) or '0') "
    "if s <= 0 then return 0 end "
    "redis.call('decr', KEYS[1]) "
    "redis.call('incr', KEYS[2]) "
    "if ARGV[1] ~= '' then redis.call('hincrby', KEYS[3], ARGV[1], 1) end "
    "return 1";

static int request_atomic(sk_eth *th, const char *uid) {
  const sk_engine *r = th->e;
  redisReply *x = cmd(th, "EVAL %s 3 %s %s %s %s", atomic_lua, r->k.stock,
                      r->k.orders, r->k.users, uid ? uid : "");
  if (!x)
    return SK_O_ERROR;
  long long v = x->type == REDIS_REPLY_INTEGER ? x->integer : -2;
  freeReplyObject(x);
  if (v == -2)
    return SK_O_ERROR;
  if (v == -1)
    return SK_O_DUPLICATE;
  if (v == 0)
    return SK_O_SOLDOUT;
  killpoint(th, SK_KP_READ);
  business_work(th); /* the stock is reserved: the work needs no lock */
  return SK_O_ORDER;
}

/* ---- permits: reserve a unit, pay or time out ------------------------------
 * The stock key is the count key of a dlock_permits (Redisson's
 * RPermitExpirableSemaphore layout): each unit is a permit. A request
 * reserves one with a lease of --lease-ms (the payment window), does the
 * business work (the buyer pays), and then sells the unit with the script
 * below, which consumes the permit -- removes it from the timeout set
 * without giving it back to the count -- only while its reservation is
 * live. A reservation that expired (the buyer died, or paid too late) is
 * reclaimed into the count by the next permits call of anyone, so no unit
 * is sold twice and none is lost. */

static const char pay_lua[] =
    "local e = redis.call('zscore', KEYS[1], ARGV[1]) "
    "if not e or tonumber(e) <= tonumber(ARGV[2]) then return 0 end "
    "if ARGV[3] ~= '' and redis.call('hexists', KEYS[3], ARGV[3]) == 1 "
    "then return -1 end "
    "redis.call('zrem', KEYS[1], ARGV[1]) "
    "redis.call('incr', KEYS[2]) "
    "if ARGV[3] ~= '' then redis.call('hincrby', KEYS[3], ARGV[3], 1) end "
    "return 1";

/* Redisson's timeout set of the permits named k->stock (suffixName). */
static void timeout_key(char *buf, size_t n, const char *name) {
  if (strchr(name, '{'))
    snprintf(buf, n, "%s:timeout", name);
  else
    snprintf(buf, n, "{%s}:timeout", name);
}

/* One permit reserved into id: 0, or an outcome (sold out: no unit
 * available and none reserved that could come back). */
static int reserve(sk_eth *th, char *id) {
  dlock_permits *pm = th->e->pm;
  long long lease = th->e->lease_ms;
  for (;;) {
    if (aborted(th))
      return SK_O_DEADLOCK;
    int rc = dlock_permits_try_acquire(pm, lease, id);
    if (rc == 0)
      return 0;
    if (rc == DLOCK_EBUSY) {
      /* Sold out, unless reservations are pending: they may come back. */
      dlock_permit *list = NULL;
      size_t n = 0;
      rc = dlock_permits_list(pm, &list, &n, NULL);
      dlock_permits_list_free(list);
      if (rc >= 0 && n == 0)
        return SK_O_SOLDOUT;
      if (rc >= 0)
        rc = dlock_permits_acquire(pm, SK_PERMITS_SLICE_MS, lease, id);
      if (rc == 0)
        return 0;
      if (rc == DLOCK_ETIMEDOUT)
        continue;
    }
    if (rc == DLOCK_ECANCELED)
      return SK_O_DEADLOCK;
    if (rc == DLOCK_ELOST) /* the window closed before the answer came: */
      return SK_O_SOLDOUT; /* no reservation, the unit was given back */
    note_error(th, "dlock_permits: %s (%s)", dlock_err_name(rc),
               dlock_last_error());
    return SK_O_ERROR;
  }
}

static int request_permits(sk_eth *th, const char *uid) {
  const sk_engine *e = th->e;
  if (uid) {
    redisReply *x = cmd(th, "HEXISTS %s %s", e->k.users, uid);
    if (!x)
      return SK_O_ERROR;
    int bought = x->type == REDIS_REPLY_INTEGER && x->integer == 1;
    freeReplyObject(x);
    if (bought)
      return SK_O_DUPLICATE;
  }
  char id[DLOCK_PERMIT_ID_LEN + 1];
  long long t0 = dlc_now_us();
  int out = reserve(th, id);
  th->wait_us += dlc_now_us() - t0;
  if (out != 0)
    return out;
  killpoint(th, SK_KP_LOCKED); /* a dead buyer: its unit comes back */
  business_work(th);           /* the buyer pays */
  unsigned char raw[16];
  for (size_t i = 0; i < 16; i++) {
    unsigned v = 0;
    sscanf(id + 2 * i, "%2x", &v);
    raw[i] = (unsigned char)v;
  }
  char tz[160];
  timeout_key(tz, sizeof tz, e->k.stock);
  redisReply *x = cmd(th, "EVAL %s 3 %s %s %s %b %lld %s", pay_lua, tz,
                      e->k.orders, e->k.users, raw, (size_t)16,
                      (long long)dlc_wall_ms(), uid ? uid : "");
  if (!x)
    return SK_O_ERROR;
  long long v = x->type == REDIS_REPLY_INTEGER ? x->integer : -2;
  freeReplyObject(x);
  if (v == 1)
    return SK_O_ORDER;
  if (v == -1) { /* this user bought meanwhile: the unit goes back */
    int rc = dlock_permits_release(e->pm, id);
    if (rc != 0 && rc != DLOCK_ELOST && e->unlock_errors)
      atomic_fetch_add(e->unlock_errors, 1);
    return SK_O_DUPLICATE;
  }
  if (v == 0) /* paid too late: the reservation expired, the unit is back */
    return SK_O_SOLDOUT;
  return SK_O_ERROR;
}

/* Segmented: the segments whose stock is 0 now, one bit each, from one
 * MGET without a lock (a stock only goes down between resets, so 0 is
 * final for this request). Every request asks Redis, as in the other
 * strategies: a per-process cache of empty segments answered most
 * sold-out requests without any Redis call, in microseconds, which made
 * segmented's p50 print 0.00 ms. 0 (try every segment) when the read
 * fails. */
static uint64_t empty_segments(sk_eth *th) {
  const sk_engine *e = th->e;
  long long nseg = e->segments;
  char keys[SK_MAX_SEGMENTS][160];
  const char *argv[SK_MAX_SEGMENTS + 1] = {"MGET"};
  for (long long s = 0; s < nseg; s++) {
    seg_key(keys[s], sizeof keys[s], e->k.stock, s, nseg);
    argv[s + 1] = keys[s];
  }
  redisReply *x =
      th->rc ? redisCommandArgv(th->rc, (int)nseg + 1, argv, NULL) : NULL;
  uint64_t m = 0;
  if (x && x->type == REDIS_REPLY_ARRAY && x->elements == (size_t)nseg)
    for (long long s = 0; s < nseg; s++) {
      const redisReply *el = x->element[s];
      if (el->type == REDIS_REPLY_STRING && atoll(el->str) <= 0)
        m |= 1ULL << s;
    }
  if (x)
    freeReplyObject(x);
  return m;
}

int sk_engine_request(sk_eth *th, const char *uid, long long user) {
  sk_engine *e = th->e;
  th->wait_us = 0;
  if (e->s->kind == SK_ATOMIC)
    return request_atomic(th, uid);
  if (e->s->kind == SK_PERMITS)
    return request_permits(th, uid);
  if (e->s->kind == SK_NONE) {
    int out = buy(th, 0, uid);
    return out < 0 ? SK_O_SOLDOUT : out;
  }
  /* Segmented: start at a random segment (with a user: at the user's
   * segment, so one user's requests always meet at the same lock), move
   * on while segments are empty. */
  long long nseg = e->segments;
  long long start = 0;
  if (nseg > 1)
    start = uid ? user % nseg : (long long)(rng_next(&th->rng) % nseg);
  uint64_t empty = nseg > 1 ? empty_segments(th) : 0;
  for (long long i = 0; i < nseg; i++) {
    long long seg = (start + i) % nseg;
    if ((empty >> seg) & 1ULL)
      continue;
    long long t0 = dlc_now_us();
    int rc = lock_acquire(th, seg);
    th->wait_us += dlc_now_us() - t0;
    if (rc != 0)
      return rc;
    killpoint(th, SK_KP_LOCKED);
    int out = buy(th, seg, uid);
    if (lock_release(th, seg) != 0 && e->unlock_errors)
      atomic_fetch_add(e->unlock_errors, 1);
    if (out >= 0)
      return out;
  }
  return SK_O_SOLDOUT;
}

/* ---- the engine's life ------------------------------------------------- */

int sk_engine_uses_dlock(const sk_strategy *s) {
  return s->kind == SK_DLOCK || s->kind == SK_SEGMENTED || s->kind == SK_FAIR ||
         s->kind == SK_REDLOCK || s->kind == SK_SPIN || s->kind == SK_PERMITS ||
         s->kind == SK_ETCD;
}

static int setup_redlock(sk_engine *e, dlock_config *cfg, char *err,
                         size_t el) {
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++) {
    cfg->url = e->redlock_urls[i];
    int rc = dlock_client_new(cfg, &e->rlc[i]);
    if (rc != 0) {
      snprintf(err, el, "dlock_client_new(%s): %s", cfg->url,
               dlock_last_error());
      return -1;
    }
  }
  int rc = dlock_redlock_new(e->rlc, SK_REDLOCK_SERVERS, e->k.lock, &e->rl);
  if (rc != 0) {
    snprintf(err, el, "dlock_redlock_new: %s", dlock_err_name(rc));
    return -1;
  }
  return 0;
}

static int setup_dlock(sk_engine *e, char *err, size_t el) {
  enum sk_kind kind = e->s->kind;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = e->lock_url ? e->lock_url : e->url;
  cfg.watchdog_timeout_ms = (int)e->watchdog_ms;
  if (kind == SK_ETCD) /* etcd leases: whole seconds, at least 2 */
    cfg.watchdog_timeout_ms = e->watchdog_ms < 2000
                                  ? 2000
                                  : (int)((e->watchdog_ms + 999) / 1000 * 1000);
  cfg.on_lock_lost = e->on_lock_lost;
  cfg.on_lock_lost_arg = e->on_lock_lost_arg;
  if (e->threads > cfg.pool_size)
    cfg.pool_size = (int)(e->threads > 64 ? 64 : e->threads);
  if (kind == SK_REDLOCK)
    return setup_redlock(e, &cfg, err, el);
  if (kind == SK_ETCD && !e->lock_url) {
    snprintf(err, el,
             "the etcd strategy needs an etcd:// lock store (give "
             "dlock-seckill --etcd-url, or install etcd-server)");
    return -1;
  }
  int rc = dlock_client_new(&cfg, &e->dc);
  if (rc != 0) {
    snprintf(err, el, "dlock_client_new: %s (%s)", dlock_err_name(rc),
             dlock_last_error());
    return -1;
  }
  if (kind == SK_PERMITS) {
    rc = dlock_permits_new(e->dc, e->k.stock, &e->pm);
    if (rc != 0)
      snprintf(err, el, "dlock_permits_new: %s", dlock_err_name(rc));
    return rc ? -1 : 0;
  }
  for (long long s = 0; s < e->segments; s++) {
    char name[160];
    seg_key(name, sizeof name, e->k.lock, s, e->segments);
    rc = kind == SK_FAIR   ? dlock_mutex_new_fair(e->dc, name, &e->m[s])
         : kind == SK_SPIN ? dlock_mutex_new_spin(e->dc, name, &e->m[s])
                           : dlock_mutex_new(e->dc, name, &e->m[s]);
    if (rc != 0) {
      snprintf(err, el, "dlock_mutex_new: %s", dlock_err_name(rc));
      return -1;
    }
  }
  return 0;
}

int sk_engine_init(sk_engine *e, char *err, size_t errlen) {
  e->dc = NULL;
  e->rl = NULL;
  e->pm = NULL;
  memset(e->m, 0, sizeof e->m);
  memset(e->rlc, 0, sizeof e->rlc);
  if (e->segments < 1 || e->segments > SK_MAX_SEGMENTS) {
    snprintf(err, errlen, "segments must be 1 to %d", SK_MAX_SEGMENTS);
    return -1;
  }
  pthread_mutex_init(&e->local, NULL);
  if (sk_engine_uses_dlock(e->s) && setup_dlock(e, err, errlen) != 0) {
    sk_engine_free(e);
    return -1;
  }
  return 0;
}

void sk_engine_free(sk_engine *e) {
  for (long long s = 0; s < SK_MAX_SEGMENTS; s++) {
    dlock_mutex_free(e->m[s]);
    e->m[s] = NULL;
  }
  dlock_permits_free(e->pm);
  e->pm = NULL;
  dlock_client_free(e->dc);
  dlock_redlock_free(e->rl);
  e->dc = NULL;
  e->rl = NULL;
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++) {
    dlock_client_free(e->rlc[i]);
    e->rlc[i] = NULL;
  }
}

void sk_engine_cancel_waits(sk_engine *e) {
  if (e->dc)
    dlock_client_cancel_waits(e->dc);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    if (e->rlc[i])
      dlock_client_cancel_waits(e->rlc[i]);
}

void sk_eth_init(sk_eth *th, sk_engine *e, int t, uint64_t seed) {
  memset(th, 0, sizeof *th);
  th->e = e;
  th->t = t;
  th->rng = seed | 1;
}

void sk_eth_close(sk_eth *th) {
  if (th->rc)
    redisFree(th->rc);
  th->rc = NULL;
}

/* ---- the stock keys ------------------------------------------------------ */

static redisReply *scmd(redisContext *c, char *err, size_t el, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!r) {
    snprintf(err, el, "redis: %s", c->errstr);
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(err, el, "redis: %s", r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

int sk_stock_set(redisContext *c, const sk_keys *k, long long segments,
                 long long stock, char *err, size_t errlen) {
  long long base = stock / segments, extra = stock % segments;
  for (long long s = 0; s < segments; s++) {
    char key[160];
    seg_key(key, sizeof key, k->stock, s, segments);
    redisReply *x =
        scmd(c, err, errlen, "SET %s %lld", key, base + (s < extra ? 1 : 0));
    if (!x)
      return -1;
    freeReplyObject(x);
  }
  redisReply *x = scmd(c, err, errlen, "SET %s 0", k->orders);
  if (!x)
    return -1;
  freeReplyObject(x);
  x = scmd(c, err, errlen, "DEL %s", k->users);
  if (!x)
    return -1;
  freeReplyObject(x);
  /* Strategy "permits": reservations of an earlier sale are void. */
  char tz[160];
  timeout_key(tz, sizeof tz, k->stock);
  x = scmd(c, err, errlen, "DEL %s", tz);
  if (!x)
    return -1;
  freeReplyObject(x);
  return 0;
}

long long sk_permits_settle(const char *url, const sk_keys *k,
                            long long lease_ms, char *err, size_t errlen) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  dlock_client *c = NULL;
  dlock_permits *pm = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc == 0)
    rc = dlock_permits_new(c, k->stock, &pm);
  long long pending = -1;
  long long until = dlc_now_ms() + lease_ms + 5000;
  while (rc == 0) {
    long long avail = 0;
    /* Reclaims every expired reservation into the count (the stock). */
    rc = dlock_permits_available(pm, &avail);
    dlock_permit *list = NULL;
    size_t n = 0;
    if (rc == 0)
      rc = dlock_permits_list(pm, &list, &n, NULL);
    dlock_permits_list_free(list);
    if (rc < 0)
      break;
    rc = 0;
    pending = (long long)n;
    if (n == 0 || dlc_now_ms() >= until)
      break;
    dlc_sleep_ms(50);
  }
  if (rc < 0) {
    snprintf(err, errlen, "dlock_permits: %s (%s)", dlock_err_name(rc),
             dlock_last_error());
    pending = -1;
  }
  dlock_permits_free(pm);
  dlock_client_free(c);
  return pending;
}

static int get_num(redisContext *c, const char *key, long long *v, char *err,
                   size_t el) {
  redisReply *r = scmd(c, err, el, "GET %s", key);
  if (!r)
    return -1;
  *v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
  freeReplyObject(r);
  return 0;
}

int sk_stock_get(redisContext *c, const sk_keys *k, long long segments,
                 long long *stock, long long *orders, char *err,
                 size_t errlen) {
  *stock = 0;
  for (long long s = 0; s < segments; s++) {
    char key[160];
    long long v;
    seg_key(key, sizeof key, k->stock, s, segments);
    if (get_num(c, key, &v, err, errlen) != 0)
      return -1;
    *stock += v;
  }
  return get_num(c, k->orders, orders, err, errlen);
}
