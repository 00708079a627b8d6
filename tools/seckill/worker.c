/* worker.c -- one worker process (a "service instance"): --threads threads
 * each take the next request of this worker's share and handle it with the
 * run's strategy. The naive schemes talk to Redis with plain hiredis, the
 * way the articles write them; dlock, segmented, fair and redlock use the
 * public dlock API. Everything here runs in a forked child: the dlock
 * client is created here, after fork, and never crosses one. */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlock.h"
#include "seckill.h"

/* A dlock wait is bounded by this slice and then repeated: a fair-lock
 * waiter that dies with its worker is skipped by the others once its
 * (short) deadline passes. A stopped run ends waits at once anyway
 * (dlock_client_cancel_waits from the watcher thread). */
#define SK_WAIT_SLICE_MS 1000

typedef struct sk_proc {
  const sk_run *r;
  const sk_opts *o;
  sk_shared *sh;
  int w;
  long long first, count;
  atomic_llong next;       /* next request offset in this worker's share */
  atomic_llong completed;  /* requests finished by this worker */
  atomic_int kill_claimed; /* --kill-holder: the one victim request */
  long long kill_after;
  pthread_mutex_t local; /* strategy "local" */
  dlock_client *dc;
  dlock_mutex *m[SK_MAX_SEGMENTS];
  dlock_client *rlc[SK_REDLOCK_SERVERS];
  dlock_redlock *rl;
  atomic_int threads_left; /* the watcher stops when this reaches 0 */
} sk_proc;

typedef struct sk_thread {
  sk_proc *p;
  int t;
  redisContext *rc;
  uint64_t rng;
  char token[96]; /* owner id of the current hold */
  unsigned long long holds;
} sk_thread;

/* ---- small helpers ------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static int aborted(const sk_thread *th) {
  return atomic_load(&th->p->sh->abort) != 0;
}

static void note_error(sk_thread *th, const char *fmt, ...) {
  sk_shared *sh = th->p->sh;
  int exp = 0;
  if (!atomic_compare_exchange_strong(&sh->errmsg_claimed, &exp, 1))
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sh->errmsg, sizeof sh->errmsg, fmt, ap);
  va_end(ap);
}

/* One command on the thread's own connection; reconnects once if the
 * connection broke. NULL (error noted) on failure or an error reply. */
static redisReply *cmd(sk_thread *th, const char *fmt, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (!th->rc) {
      char err[200];
      th->rc = dlc_redis_connect(th->p->o->url, SK_CONNECT_S, SK_COMMAND_S, err,
                                 sizeof err);
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
static int get_ll(sk_thread *th, const char *key, long long *v) {
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
static int spin_wait(sk_thread *th) {
  if (aborted(th))
    return 1;
  dlc_sleep_us(500 + (long long)(rng_next(&th->rng) % 1500));
  return aborted(th);
}

static void business_work(sk_thread *th) {
  const sk_opts *o = th->p->o;
  long long lo = (long long)(o->work_min_ms * 1000.0);
  long long hi = (long long)(o->work_max_ms * 1000.0);
  long long us = lo;
  if (hi > lo)
    us += (long long)(rng_next(&th->rng) % (uint64_t)(hi - lo + 1));
  dlc_sleep_us(us);
}

/* --kill-holder: the victim worker (number 0), once it has finished a
 * tenth of its share, stops at its strategy's kill point and tells the
 * parent, which kills it with SIGKILL. Bounded: it goes on after 5 s. */
static void killpoint(sk_thread *th, enum sk_killpoint kp) {
  sk_proc *p = th->p;
  if (!p->o->kill_holder || p->w != 0 || kp != p->r->s->killpoint)
    return;
  if (atomic_load(&p->completed) < p->kill_after)
    return;
  int exp = 0;
  if (!atomic_compare_exchange_strong(&p->kill_claimed, &exp, 1))
    return;
  atomic_store(&p->sh->victim_at_killpoint, 1);
  for (int i = 0; i < 500 && !aborted(th); i++)
    dlc_sleep_us(10000);
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

static int lock_setnx(sk_thread *th, const char *key, int with_expire) {
  for (;;) {
    redisReply *r = cmd(th, "SETNX %s %s", key, th->token);
    if (!r)
      return SK_O_ERROR;
    int got = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (got) {
      if (with_expire) {
        killpoint(th, SK_KP_BETWEEN); /* a crash here: no expiry, ever */
        r = cmd(th, "PEXPIRE %s %lld", key, th->p->o->lease_ms);
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
static int lock_getset(sk_thread *th, const char *key) {
  long long lease = th->p->o->lease_ms;
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

static int lock_set_nx_px(sk_thread *th, const char *key) {
  for (;;) {
    redisReply *r =
        cmd(th, "SET %s %s NX PX %lld", key, th->token, th->p->o->lease_ms);
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

static int plain_del(sk_thread *th, const char *key) {
  redisReply *r = cmd(th, "DEL %s", key);
  if (!r)
    return -1;
  freeReplyObject(r);
  return 0;
}

/* dlock waits in slices so that a stopped run is noticed. */
static int lock_dlock(sk_thread *th, dlock_mutex *m) {
  for (;;) {
    if (aborted(th))
      return SK_O_DEADLOCK;
    int rc = dlock_mutex_timedlock(
        m, th->p->r->s->kind == SK_FAIR ? SK_FAIR_SLICE_MS : SK_WAIT_SLICE_MS,
        -1);
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

static int unlock_dlock(sk_thread *th, dlock_mutex *m) {
  int rc = dlock_mutex_unlock(m);
  if (rc != 0) {
    note_error(th, "dlock_mutex_unlock: %s (%s)", dlock_err_name(rc),
               dlock_last_error());
    return -1;
  }
  return 0;
}

static int lock_redlock(sk_thread *th) {
  for (;;) {
    if (aborted(th))
      return SK_O_DEADLOCK;
    int rc = dlock_redlock_timedlock(th->p->rl, SK_WAIT_SLICE_MS, -1);
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
static int lock_acquire(sk_thread *th, long long seg) {
  sk_proc *p = th->p;
  char key[160];
  seg_key(key, sizeof key, p->r->k.lock, seg, p->r->segments);
  snprintf(th->token, sizeof th->token, "%d:%d:%llu", (int)getpid(), th->t,
           ++th->holds);
  switch (p->r->s->kind) {
  case SK_LOCAL:
    pthread_mutex_lock(&p->local);
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
  case SK_SEGMENTED:
    return lock_dlock(th, p->m[seg]);
  case SK_REDLOCK:
    return lock_redlock(th);
  default:
    return 0;
  }
}

static int lock_release(sk_thread *th, long long seg) {
  sk_proc *p = th->p;
  char key[160];
  seg_key(key, sizeof key, p->r->k.lock, seg, p->r->segments);
  switch (p->r->s->kind) {
  case SK_LOCAL:
    pthread_mutex_unlock(&p->local);
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
  case SK_SEGMENTED:
    return unlock_dlock(th, p->m[seg]);
  case SK_REDLOCK: {
    int rc = dlock_redlock_unlock(p->rl);
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

/* Segmented: the segments whose stock is 0 now, one bit each, from one
 * MGET without a lock (a stock only goes down, so 0 is final). Every
 * request asks Redis, as in the other strategies: the old per-process
 * cache of empty segments answered most sold-out requests without any
 * Redis call, in microseconds, which made segmented's p50 print 0.00 ms.
 * 0 (try every segment) when the read fails. */
static uint64_t empty_segments(sk_thread *th) {
  const sk_run *r = th->p->r;
  long long nseg = r->segments;
  char keys[SK_MAX_SEGMENTS][160];
  const char *argv[SK_MAX_SEGMENTS + 1] = {"MGET"};
  for (long long s = 0; s < nseg; s++) {
    seg_key(keys[s], sizeof keys[s], r->k.stock, s, nseg);
    argv[s + 1] = keys[s];
  }
  redisReply *x =
      th->rc ? redisCommandArgv(th->rc, (int)nseg + 1, argv, NULL) : NULL;
  uint64_t m = 0;
  if (x && x->type == REDIS_REPLY_ARRAY && x->elements == (size_t)nseg)
    for (long long s = 0; s < nseg; s++) {
      const redisReply *e = x->element[s];
      if (e->type == REDIS_REPLY_STRING && atoll(e->str) <= 0)
        m |= 1ULL << s;
    }
  if (x)
    freeReplyObject(x);
  return m;
}

/* The critical section for stock segment `seg` (0 unless segmented), the
 * lock (if any) already held: user check, read, check, work, write, order.
 * Returns an outcome, or -1: this segment is sold out, try the next. */
static int buy(sk_thread *th, long long seg, const char *uid) {
  const sk_run *r = th->p->r;
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

static int request_atomic(sk_thread *th, const char *uid) {
  const sk_run *r = th->p->r;
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

static int request(sk_thread *th, long long idx) {
  sk_proc *p = th->p;
  const sk_run *r = p->r;
  char uidbuf[32];
  const char *uid = NULL;
  long long user = 0;
  if (p->o->users > 0) {
    /* the same request number is the same user in every strategy */
    user = (long long)(mix64((uint64_t)idx) % (uint64_t)p->o->users);
    snprintf(uidbuf, sizeof uidbuf, "u%lld", user);
    uid = uidbuf;
  }
  if (r->s->kind == SK_ATOMIC)
    return request_atomic(th, uid);
  if (r->s->kind == SK_NONE) {
    int out = buy(th, 0, uid);
    return out < 0 ? SK_O_SOLDOUT : out;
  }
  /* Segmented: start at a random segment (with --users: at the user's
   * segment, so one user's requests always meet at the same lock), move
   * on while segments are empty. */
  long long nseg = r->segments;
  long long start = 0;
  if (nseg > 1)
    start = uid ? user % nseg : (long long)(rng_next(&th->rng) % nseg);
  uint64_t empty = nseg > 1 ? empty_segments(th) : 0;
  for (long long i = 0; i < nseg; i++) {
    long long seg = (start + i) % nseg;
    if ((empty >> seg) & 1ULL)
      continue;
    int rc = lock_acquire(th, seg);
    if (rc != 0)
      return rc;
    killpoint(th, SK_KP_LOCKED);
    int out = buy(th, seg, uid);
    if (lock_release(th, seg) != 0)
      atomic_fetch_add(&p->sh->unlock_errors, 1);
    if (out >= 0)
      return out;
  }
  return SK_O_SOLDOUT;
}

/* ---- threads and the process ------------------------------------------ */

/* Ends the dlock waits of this worker once the parent stops the run, and
 * keeps ending them (a thread may start a wait just after a cancel) until
 * every request thread is gone. */
static void *watcher_main(void *arg) {
  sk_proc *p = arg;
  int cancelling = 0;
  while (atomic_load(&p->threads_left) > 0) {
    if (atomic_load(&p->sh->abort))
      cancelling = 1;
    if (cancelling) {
      if (p->dc)
        dlock_client_cancel_waits(p->dc);
      for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
        if (p->rlc[i])
          dlock_client_cancel_waits(p->rlc[i]);
    }
    dlc_sleep_us(cancelling ? 20000 : 10000);
  }
  return NULL;
}

static void *thread_main(void *arg) {
  sk_thread *th = arg;
  sk_proc *p = th->p;
  sk_shared *sh = p->sh;
  char err[200];
  th->rc =
      dlc_redis_connect(p->o->url, SK_CONNECT_S, SK_COMMAND_S, err, sizeof err);
  if (!th->rc)
    note_error(th, "%s", err);
  atomic_fetch_add(&sh->ready, 1);
  for (int i = 0; i < 60000 && !atomic_load(&sh->go); i++) {
    if (atomic_load(&sh->abort))
      break;
    dlc_sleep_us(1000);
  }
  while (atomic_load(&sh->go) && !aborted(th)) {
    long long i = atomic_fetch_add(&p->next, 1);
    if (i >= p->count)
      break;
    long long idx = p->first + i;
    long long t0 = dlc_now_us();
    int out = request(th, idx);
    long long t1 = dlc_now_us();
    sh->lat_us[idx] =
        (uint32_t)(t1 - t0 > 0xffffffffLL ? 0xffffffffLL : t1 - t0);
    sh->outcome[idx] = (uint8_t)out;
    atomic_fetch_add(&sh->done, 1);
    atomic_fetch_add(&p->completed, 1);
    if (out != SK_O_DEADLOCK) {
      long long prev = atomic_load(&sh->last_end_us);
      while (prev < t1 &&
             !atomic_compare_exchange_weak(&sh->last_end_us, &prev, t1)) {
      }
    }
  }
  if (th->rc)
    redisFree(th->rc);
  atomic_fetch_sub(&p->threads_left, 1);
  return NULL;
}

void sk_request_range(const sk_opts *o, int w, long long *first,
                      long long *count) {
  long long base = o->requests / o->procs, extra = o->requests % o->procs;
  *count = base + (w < extra ? 1 : 0);
  *first = w * base + (w < extra ? w : extra);
}

static int setup_dlock(sk_proc *p, char *err, size_t el) {
  const sk_opts *o = p->o;
  enum sk_kind kind = p->r->s->kind;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = o->url;
  cfg.watchdog_timeout_ms = (int)o->watchdog_ms;
  if (o->threads > cfg.pool_size)
    cfg.pool_size = (int)(o->threads > 64 ? 64 : o->threads);
  if (kind == SK_REDLOCK) {
    for (int i = 0; i < SK_REDLOCK_SERVERS; i++) {
      cfg.url = o->redlock_urls[i];
      int rc = dlock_client_new(&cfg, &p->rlc[i]);
      if (rc != 0) {
        snprintf(err, el, "dlock_client_new(%s): %s", cfg.url,
                 dlock_last_error());
        return -1;
      }
    }
    int rc =
        dlock_redlock_new(p->rlc, SK_REDLOCK_SERVERS, p->r->k.lock, &p->rl);
    if (rc != 0) {
      snprintf(err, el, "dlock_redlock_new: %s", dlock_err_name(rc));
      return -1;
    }
    return 0;
  }
  int rc = dlock_client_new(&cfg, &p->dc);
  if (rc != 0) {
    snprintf(err, el, "dlock_client_new: %s (%s)", dlock_err_name(rc),
             dlock_last_error());
    return -1;
  }
  for (long long s = 0; s < p->r->segments; s++) {
    char name[160];
    seg_key(name, sizeof name, p->r->k.lock, s, p->r->segments);
    rc = kind == SK_FAIR ? dlock_mutex_new_fair(p->dc, name, &p->m[s])
                         : dlock_mutex_new(p->dc, name, &p->m[s]);
    if (rc != 0) {
      snprintf(err, el, "dlock_mutex_new: %s", dlock_err_name(rc));
      return -1;
    }
  }
  return 0;
}

static void teardown_dlock(sk_proc *p) {
  for (long long s = 0; s < p->r->segments; s++)
    dlock_mutex_free(p->m[s]);
  dlock_client_free(p->dc);
  dlock_redlock_free(p->rl);
  for (int i = 0; i < SK_REDLOCK_SERVERS; i++)
    dlock_client_free(p->rlc[i]);
}

void sk_worker_main(const sk_run *r, int w) {
  static sk_proc p; /* one per process */
  memset(&p, 0, sizeof p);
  p.r = r;
  p.o = r->o;
  p.sh = r->sh;
  p.w = w;
  sk_request_range(r->o, w, &p.first, &p.count);
  /* the victim stops at its kill point after a couple of requests: early
   * enough that lock-free schemes still have stock to reserve */
  p.kill_after = p.count / 10 < 2 ? p.count / 10 : 2;
  pthread_mutex_init(&p.local, NULL);
  signal(SIGPIPE, SIG_IGN);
  enum sk_kind kind = r->s->kind;
  int uses_dlock = kind == SK_DLOCK || kind == SK_SEGMENTED ||
                   kind == SK_FAIR || kind == SK_REDLOCK;
  char err[256] = "";
  if (uses_dlock && setup_dlock(&p, err, sizeof err) != 0) {
    sk_thread dummy = {.p = &p};
    note_error(&dummy, "%s", err);
    /* count the threads as ready so the parent does not wait for them;
     * every request of this worker stays pending -> reported */
    atomic_fetch_add(&p.sh->ready, (int)r->o->threads);
    teardown_dlock(&p);
    _exit(3);
  }
  int nt = (int)r->o->threads;
  sk_thread *ths = calloc((size_t)nt, sizeof *ths);
  pthread_t *tid = calloc((size_t)nt, sizeof *tid);
  if (!ths || !tid)
    _exit(4);
  int started = 0;
  atomic_store(&p.threads_left, nt);
  pthread_t wtid;
  int have_watcher = pthread_create(&wtid, NULL, watcher_main, &p) == 0;
  for (int t = 0; t < nt; t++) {
    ths[t].p = &p;
    ths[t].t = t;
    ths[t].rng = mix64(((uint64_t)getpid() << 20) ^ (uint64_t)t ^
                       (uint64_t)dlc_now_us()) |
                 1;
    if (pthread_create(&tid[t], NULL, thread_main, &ths[t]) != 0) {
      atomic_fetch_add(&p.sh->ready, nt - t);
      atomic_fetch_sub(&p.threads_left, nt - t);
      break;
    }
    started++;
  }
  for (int t = 0; t < started; t++)
    pthread_join(tid[t], NULL);
  if (have_watcher)
    pthread_join(wtid, NULL);
  if (uses_dlock)
    teardown_dlock(&p);
  free(ths);
  free(tid);
  _exit(0);
}
