/* The fenced mutex: Redisson RFencedLock layout, tokens strictly increasing
 * across processes and reentry, and a stalled holder's late write rejected
 * by a resource that checks tokens. */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "th.h"

static th_redis *g_r;

/* The protected resource: accepts a write only if its token is not lower
 * than the highest token it has accepted. 1 accepted, 0 rejected. */
static const char *RESOURCE_WRITE =
    "local cur = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if tonumber(ARGV[1]) < cur then return 0 end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "redis.call('set', KEYS[2], ARGV[2])\n"
    "return 1\n";

static int resource_write(redisContext *raw, uint64_t token, const char *data) {
  redisReply *r = redisCommand(raw, "EVAL %s 2 res:token res:data %llu %s",
                               RESOURCE_WRITE, (unsigned long long)token, data);
  int ok = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
  freeReplyObject(r);
  return ok;
}

static long long get_ll(th_redis *r, const char *key) {
  redisReply *x = th_cmd(r, "GET %s", key);
  long long v = x->type == REDIS_REPLY_STRING ? atoll(x->str) : -1;
  freeReplyObject(x);
  return v;
}

typedef struct tok_waiter {
  dlock_mutex *m;
  int rc;
  uint64_t token;
} tok_waiter;

static void *tok_waiter_main(void *arg) {
  tok_waiter *w = arg;
  w->rc = dlock_mutex_lock(w->m);
  if (w->rc == 0) {
    dlock_mutex_token(w->m, &w->token);
    dlock_mutex_unlock(w->m);
  }
  return NULL;
}

TH_CASE(tokens_layout_reentrancy) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_mutex *m, *m2, *plain;
  CHECK_OK(dlock_mutex_new_fenced(c, "fz", &m));
  CHECK_OK(dlock_mutex_new_fenced(c2, "fz", &m2));
  CHECK_OK(dlock_mutex_new(c, "fz", &plain));
  uint64_t tok = 0;
  CHECK_RC(dlock_mutex_token(m, &tok), DLOCK_EPERM);
  CHECK_RC(dlock_mutex_token(plain, &tok), DLOCK_ENOTSUP);
  CHECK_RC(dlock_mutex_token(m, NULL), DLOCK_EINVAL);

  CHECK_OK(dlock_mutex_lock(m));
  CHECK_OK(dlock_mutex_token(m, &tok));
  CHECK_EQ(tok, 1); /* the first token ever issued */
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fz}"), 1);
  CHECK_EQ(th_cmd_int(r, "PTTL redisson_lock_token:{fz}"), -1); /* no TTL */
  char owner[80];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  redisReply *h = th_cmd(r, "HGETALL fz");
  CHECK_EQ(h->elements, 2);
  CHECK_STR(h->element[0]->str, owner);
  CHECK_STR(h->element[1]->str, "1");
  freeReplyObject(h);

  CHECK_OK(dlock_mutex_lock(m)); /* reentry draws a new token */
  CHECK_OK(dlock_mutex_token(m, &tok));
  CHECK_EQ(tok, 2);
  CHECK_EQ(dlock_mutex_hold_count(m), 2);
  /* A failed attempt elsewhere draws none. */
  CHECK_RC(dlock_mutex_trylock(m2), DLOCK_EBUSY);
  CHECK_RC(dlock_mutex_timedlock(m2, 100, -1), DLOCK_ETIMEDOUT);
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fz}"), 2);
  CHECK_RC(dlock_mutex_unlock(m2), DLOCK_EPERM);

  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(dlock_mutex_token(m, &tok));
  CHECK_EQ(tok, 2); /* still held: the last token stays */
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_RC(dlock_mutex_token(m, &tok), DLOCK_EPERM);
  CHECK_EQ(th_cmd_int(r, "EXISTS fz"), 0);
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fz}"), 2); /* survives unlock */

  /* A waiter woken by the unlock's "0" gets the next token. */
  CHECK_OK(dlock_mutex_lock(m));
  tok_waiter w = {m2, -1, 0};
  pthread_t t;
  pthread_create(&t, NULL, tok_waiter_main, &w);
  th_sleep_ms(150);
  CHECK_OK(dlock_mutex_unlock(m));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK_EQ(w.token, 4);

  /* Fixed lease: expires; the next holder's token is higher; the stale
   * holder's unlock reports the loss. */
  CHECK_OK(dlock_mutex_timedlock(m, 0, 300));
  CHECK_OK(dlock_mutex_token(m, &tok));
  CHECK_EQ(tok, 5);
  long long pttl = th_cmd_int(r, "PTTL fz");
  CHECK_MSG(pttl > 0 && pttl <= 300, "pttl %lld", pttl);
  CHECK_OK(dlock_mutex_timedlock(m2, 2000, -1));
  uint64_t tok2 = 0;
  CHECK_OK(dlock_mutex_token(m2, &tok2));
  CHECK_EQ(tok2, 6);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  CHECK_EQ(dlock_mutex_force_unlock(m), 1);
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fz}"), 6);
  CHECK_RC(dlock_mutex_unlock(m2), DLOCK_ELOST);

  /* Plain and fenced objects share the lock; only fenced ones draw. */
  CHECK_OK(dlock_mutex_lock(plain));
  CHECK_RC(dlock_mutex_trylock(m2), DLOCK_EBUSY);
  CHECK_OK(dlock_mutex_unlock(plain));
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fz}"), 6);

  /* A hash-tagged name: redisson_lock_token:<name>. */
  dlock_mutex *mt;
  CHECK_OK(dlock_mutex_new_fenced(c, "x{t}y", &mt));
  CHECK_OK(dlock_mutex_lock(mt));
  CHECK_EQ(get_ll(r, "redisson_lock_token:x{t}y"), 1);
  CHECK_OK(dlock_mutex_unlock(mt));
  dlock_mutex_free(mt);
  dlock_mutex_free(plain);
  dlock_mutex_free(m);
  dlock_mutex_free(m2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* Issue 25.12: a fenced hold and a plain hold of the same name in one
 * thread share one hold record; the plain acquire carries no token and
 * must not erase the fenced hold's (old code: token 1 -> 0 after
 * lock(plain), still 0 after its unlock). */
TH_CASE(plain_reentry_keeps_the_fenced_token) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *f, *plain;
  CHECK_OK(dlock_mutex_new_fenced(c, "fp", &f));
  CHECK_OK(dlock_mutex_new(c, "fp", &plain));
  uint64_t tok = 0, t = 0;
  CHECK_OK(dlock_mutex_lock(f));
  CHECK_OK(dlock_mutex_token(f, &tok));
  CHECK(tok > 0);
  CHECK_OK(dlock_mutex_lock(plain)); /* reentrant: count 2 */
  CHECK_EQ(dlock_mutex_hold_count(f), 2);
  CHECK_OK(dlock_mutex_token(f, &t));
  CHECK_MSG(t == tok, "token %llu after a plain reentrant lock, was %llu",
            (unsigned long long)t, (unsigned long long)tok);
  CHECK_OK(dlock_mutex_unlock(plain));
  CHECK_OK(dlock_mutex_token(f, &t));
  CHECK_MSG(t == tok, "token %llu after the plain unlock, was %llu",
            (unsigned long long)t, (unsigned long long)tok);
  CHECK_OK(dlock_mutex_unlock(f));
  CHECK_RC(dlock_mutex_token(f, &t), DLOCK_EPERM);
  /* A new first hold taken plainly has no token of its own. */
  CHECK_OK(dlock_mutex_lock(plain));
  CHECK_OK(dlock_mutex_lock(f)); /* a fenced reentry draws a fresh one */
  CHECK_OK(dlock_mutex_token(f, &t));
  CHECK(t > tok);
  CHECK_OK(dlock_mutex_unlock(f));
  CHECK_OK(dlock_mutex_unlock(plain));
  dlock_mutex_free(plain);
  dlock_mutex_free(f);
  dlock_client_free(c);
}

TH_CASE_T(watchdog_renewal, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = 1000;
  cfg.retry_interval_ms = 100;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fenced(c, "fwd", &m));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_OK(dlock_mutex_lock(m));
  th_sleep_ms(2500);
  long long pttl = th_cmd_int(r, "PTTL fwd");
  CHECK_MSG(pttl > 0 && pttl <= 1000, "pttl %lld", pttl);
  CHECK_OK(dlock_mutex_unlock(m));
  th_sleep_ms(1500);
  CHECK_EQ(dlock_mutex_is_held(m), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS fwd"), 0);
  CHECK_EQ(get_ll(r, "redisson_lock_token:{fwd}"), 2);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- tokens across processes ----------------------------------------------
 */

#define TOK_PROCS 4
#define TOK_ITERS 25

static int token_proc(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fenced(c, "ftok", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  uint64_t mine_last = 0;
  for (int i = 0; i < TOK_ITERS; i++) {
    uint64_t t1 = 0, t2 = 0;
    if (dlock_mutex_lock(m) || dlock_mutex_token(m, &t1))
      return 11;
    if (dlock_mutex_lock(m) || dlock_mutex_token(m, &t2))
      return 12;
    if (t2 <= t1 || t1 <= mine_last)
      return 13;
    /* Across processes, in lock order: higher than every earlier token. */
    redisReply *r = redisCommand(raw, "GET ftok:last");
    unsigned long long last =
        r && r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    if (t1 <= last) {
      fprintf(stderr, "token %llu after %llu\n", (unsigned long long)t1, last);
      return 14;
    }
    freeReplyObject(
        redisCommand(raw, "SET ftok:last %llu", (unsigned long long)t2));
    mine_last = t2;
    if (dlock_mutex_unlock(m) || dlock_mutex_unlock(m))
      return 15;
  }
  redisFree(raw);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TH_CASE(tokens_increase_across_processes) {
  g_r = th_redis_new(0, NULL);
  pid_t p[TOK_PROCS];
  for (int i = 0; i < TOK_PROCS; i++)
    p[i] = th_fork(token_proc, NULL);
  for (int i = 0; i < TOK_PROCS; i++)
    CHECK_EQ(th_wait(p[i], 60000), 0);
  /* Every acquisition drew exactly one token: no gaps, no repeats. */
  CHECK_EQ(get_ll(g_r, "redisson_lock_token:{ftok}"),
           TOK_PROCS * TOK_ITERS * 2);
  CHECK_EQ(get_ll(g_r, "ftok:last"), TOK_PROCS * TOK_ITERS * 2);
}

/* ---- a stalled holder is fenced off ---------------------------------------
 */

static int lost_calls;
static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

static int stalled_holder_proc(void *arg) {
  (void)arg;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = 1000;
  cfg.retry_interval_ms = 100;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_mutex *m;
  if (dlock_mutex_new_fenced(c, "fstall", &m))
    return 10;
  uint64_t tok = 0;
  if (dlock_mutex_lock(m) || dlock_mutex_token(m, &tok))
    return 11;
  redisContext *raw = th_redis_raw(g_r);
  if (resource_write(raw, tok, "A1") != 1)
    return 12;
  freeReplyObject(
      redisCommand(raw, "SET fstall:a_token %llu", (unsigned long long)tok));
  /* Now the parent stops this process past the lease; a second holder
   * comes and goes. Wait for the parent's go after SIGCONT. */
  int64_t end = th_now_ms() + 30000;
  for (;;) {
    redisReply *r = redisCommand(raw, "EXISTS fstall:go");
    int go = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (go)
      break;
    if (th_now_ms() > end)
      return 13;
    th_sleep_ms(5);
  }
  /* The late write, with the stale token, believing it still holds. */
  int w = resource_write(raw, tok, "A2");
  int rc = dlock_mutex_unlock(m);
  redisFree(raw);
  if (w != 0)
    return 14; /* the resource must reject it */
  if (rc != DLOCK_ELOST)
    return 15;
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TH_CASE(stalled_holder_fenced_off) {
  g_r = th_redis_new(0, NULL);
  pid_t a = th_fork(stalled_holder_proc, NULL);
  int64_t end = th_now_ms() + 10000;
  while (get_ll(g_r, "fstall:a_token") < 0) {
    CHECK_MSG(th_now_ms() < end, "holder never took the lock");
    th_sleep_ms(5);
  }
  long long ta = get_ll(g_r, "fstall:a_token");
  CHECK_EQ(kill(a, SIGSTOP), 0); /* a GC pause, a swapped-out process... */
  int64_t stopped = th_now_ms();
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fenced(c, "fstall", &m));
  /* The lease (1 s watchdog) runs out while A is stopped; B gets in. */
  CHECK_OK(dlock_mutex_timedlock(m, 10000, -1));
  printf("second holder got the lock %lld ms after the stop\n",
         (long long)(th_now_ms() - stopped));
  uint64_t tb = 0;
  CHECK_OK(dlock_mutex_token(m, &tb));
  CHECK_MSG((long long)tb > ta, "B's token %llu, A's %lld",
            (unsigned long long)tb, ta);
  redisContext *raw = th_redis_raw(g_r);
  CHECK_EQ(resource_write(raw, tb, "B"), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(kill(a, SIGCONT), 0);
  freeReplyObject(redisCommand(raw, "SET fstall:go 1"));
  CHECK_EQ(th_wait(a, 20000), 0);
  redisReply *d = th_cmd(g_r, "GET res:data");
  CHECK_STR(d->str, "B"); /* A's late write was rejected */
  freeReplyObject(d);
  CHECK_EQ(get_ll(g_r, "res:token"), (long long)tb);
  redisFree(raw);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_MAIN()
