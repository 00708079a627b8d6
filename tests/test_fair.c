/* The fair mutex: Redisson RFairLock layout, FIFO across processes,
 * trylock never overtakes the queue, dead waiters skipped after their
 * deadline, deadline arithmetic on timeout. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "th.h"

static th_redis *g_r;

static long long epoch_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long raw_int(redisContext *raw, const char *fmt, const char *a) {
  redisReply *r = redisCommand(raw, fmt, a);
  long long v = -999;
  if (r && r->type == REDIS_REPLY_INTEGER)
    v = r->integer;
  else if (r && r->type == REDIS_REPLY_STRING)
    v = atoll(r->str);
  else if (r && r->type == REDIS_REPLY_NIL)
    v = 0;
  freeReplyObject(r);
  return v;
}

/* In a worker: polls until `key` exists (bounded). Workers are forked
 * before the parent creates its client (TSan cannot follow a fork of a
 * process with threads), so they wait for the parent's go. */
static int wait_key(redisContext *raw, const char *key, int64_t ms) {
  int64_t end = th_now_ms() + ms;
  while (raw_int(raw, "EXISTS %s", key) != 1) {
    if (th_now_ms() > end)
      return -1;
    th_sleep_ms(2);
  }
  return 0;
}

typedef struct waiter {
  dlock_mutex *m;
  long long wait_ms;
  int rc;
  int64_t elapsed;
  char owner[80];
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->owner, sizeof w->owner);
  int64_t t0 = th_now_ms();
  w->rc = w->wait_ms < 0 ? dlock_mutex_lock(w->m)
                         : dlock_mutex_timedlock(w->m, w->wait_ms, -1);
  w->elapsed = th_now_ms() - t0;
  if (w->rc == 0)
    dlock_mutex_unlock(w->m);
  return NULL;
}

static void *unlock_other_thread(void *arg) {
  int rc = dlock_mutex_unlock(arg);
  return (void *)(intptr_t)rc;
}

TH_CASE(layout_reentrancy_owner) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_mutex *m, *m2;
  CHECK_OK(dlock_mutex_new_fair(c, "fl", &m));
  CHECK_OK(dlock_mutex_new_fair(c2, "fl", &m2));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_OK(dlock_mutex_lock(m)); /* reentrant */
  char owner[80];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  redisReply *h = th_cmd(r, "HGETALL fl");
  CHECK_EQ(h->elements, 2);
  CHECK_STR(h->element[0]->str, owner);
  CHECK_STR(h->element[1]->str, "2");
  freeReplyObject(h);
  long long pttl = th_cmd_int(r, "PTTL fl");
  CHECK_MSG(pttl > 29000 && pttl <= 30000, "pttl %lld", pttl);
  CHECK_EQ(dlock_mutex_hold_count(m), 2);

  /* Other client: trylock fails at once and does not queue; a timed wait
   * queues, times out, and leaves the queue. */
  CHECK_RC(dlock_mutex_trylock(m2), DLOCK_EBUSY);
  CHECK_RC(dlock_mutex_timedlock(m2, 0, 5000), DLOCK_EBUSY);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_queue:{fl}"), 0);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_timedlock(m2, 300, -1), DLOCK_ETIMEDOUT);
  int64_t el = th_now_ms() - t0;
  CHECK_MSG(el >= 290 && el < 1500, "timed wait took %lld ms", (long long)el);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_queue:{fl}"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_timeout:{fl}"), 0);

  /* Owner-only unlock. */
  pthread_t t;
  void *trc;
  pthread_create(&t, NULL, unlock_other_thread, m);
  pthread_join(t, &trc);
  CHECK_EQ((intptr_t)trc, DLOCK_EPERM);
  CHECK_RC(dlock_mutex_unlock(m2), DLOCK_EPERM);

  /* A blocked waiter: queue entry, deadline and its own channel. */
  waiter w = {m2, -1, -1, 0, ""};
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_llen(r, "redisson_lock_queue:{fl}", 1, 5000);
  long long now = epoch_ms();
  h = th_cmd(r, "LRANGE redisson_lock_queue:{fl} 0 -1");
  CHECK_EQ(h->elements, 1);
  char wfield[80];
  snprintf(wfield, sizeof wfield, "%s", h->element[0]->str);
  freeReplyObject(h);
  CHECK_EQ(strncmp(wfield, dlock_client_id(c2), 36), 0);
  h = th_cmd(r, "ZSCORE redisson_lock_timeout:{fl} %s", wfield);
  CHECK(h->type == REDIS_REPLY_STRING);
  long long score = atoll(h->str);
  freeReplyObject(h);
  /* deadline = now + 5000: a dlock waiter keeps its place alive by
   * refreshing it every second (not Redisson's PTTL + 300000). */
  CHECK_MSG(score > now + 2500 && score <= now + 5000 + 100,
            "score %lld now %lld", score, now);
  char ch[160];
  snprintf(ch, sizeof ch, "redisson_lock__channel:{fl}:%s", wfield);
  int64_t end = th_now_ms() + 5000;
  for (;;) {
    h = th_cmd(r, "PUBSUB CHANNELS redisson_lock__channel:*");
    int found = 0, shared = 0;
    for (size_t i = 0; i < h->elements; i++) {
      found |= strcmp(h->element[i]->str, ch) == 0;
      /* (the timed wait's own channel above may still linger) */
      shared |= strcmp(h->element[i]->str, "redisson_lock__channel:{fl}") == 0;
    }
    freeReplyObject(h);
    if (found) {
      CHECK_EQ(shared, 0); /* no shared lock channel for the fair lock */
      break;
    }
    CHECK_MSG(th_now_ms() < end, "channel %s never subscribed", ch);
    th_sleep_ms(5);
  }

  CHECK_OK(dlock_mutex_unlock(m));
  h = th_cmd(r, "HGET fl %s", owner);
  CHECK_STR(h->str, "1");
  freeReplyObject(h);
  CHECK_OK(dlock_mutex_unlock(m)); /* publishes to the waiter's channel */
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  CHECK_MSG(w.elapsed < 3000, "waiter took %lld ms", (long long)w.elapsed);
  CHECK_EQ(th_cmd_int(r, "EXISTS fl"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_queue:{fl}"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_timeout:{fl}"), 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_EPERM);

  /* Force unlock. */
  CHECK_OK(dlock_mutex_lock(m2));
  CHECK_EQ(dlock_mutex_force_unlock(m), 1);
  CHECK_EQ(dlock_mutex_force_unlock(m), 0);
  CHECK_RC(dlock_mutex_unlock(m2), DLOCK_ELOST);
  /* A hash-tagged name keeps its braces in the derived keys. */
  dlock_mutex *mt;
  CHECK_OK(dlock_mutex_new_fair(c, "a{tag}b", &mt));
  CHECK_OK(dlock_mutex_lock(mt));
  w = (waiter){NULL, -1, -1, 0, ""};
  CHECK_OK(dlock_mutex_new_fair(c2, "a{tag}b", &w.m));
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_llen(r, "redisson_lock_queue:a{tag}b", 1, 5000);
  CHECK_EQ(th_cmd_int(r, "ZCARD redisson_lock_timeout:a{tag}b"), 1);
  CHECK_OK(dlock_mutex_unlock(mt));
  pthread_join(t, NULL);
  CHECK_OK(w.rc);
  dlock_mutex_free(w.m);
  dlock_mutex_free(mt);
  dlock_mutex_free(m);
  dlock_mutex_free(m2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TH_CASE_T(lease_and_watchdog, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  /* The leases scale with the build's speed (valgrind on a loaded machine:
   * the renewals of a fixed 1 s lease came too late, PTTL -2). */
  long long mult = th_timeout_mult(), wd = 1000 * mult, fixed = 400 * mult;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = (int)wd;
  cfg.retry_interval_ms = 100;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fair(c, "fw", &m));
  /* Watchdog: held well past the lease. */
  CHECK_OK(dlock_mutex_lock(m));
  th_sleep_ms(2500 * mult);
  long long pttl = th_cmd_int(r, "PTTL fw");
  CHECK_MSG(pttl > 0 && pttl <= wd, "pttl %lld", pttl);
  CHECK_EQ(dlock_mutex_is_held(m), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS fw"), 0);
  /* Fixed lease: not renewed, expires; the unlock then reports it. */
  CHECK_OK(dlock_mutex_timedlock(m, 0, fixed));
  pttl = th_cmd_int(r, "PTTL fw");
  CHECK_MSG(pttl > 0 && pttl <= fixed, "pttl %lld", pttl);
  th_sleep_ms(fixed + 300 * mult);
  CHECK_EQ(th_cmd_int(r, "EXISTS fw"), 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  /* Reentrant with mixed leases: the partial unlock resets the TTL to the
   * watchdog lease. */
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 20000));
  CHECK_OK(dlock_mutex_unlock(m));
  pttl = th_cmd_int(r, "PTTL fw");
  CHECK_MSG(pttl > 0 && pttl <= wd, "pttl %lld", pttl);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- FIFO across processes ------------------------------------------------
 */

#define FIFO_PROCS 5
#define FIFO_THREADS 2
enum { FIFO_N = FIFO_PROCS * FIFO_THREADS };

typedef struct fifo_thr {
  dlock_mutex *m;
  int idx;
  int rc;
} fifo_thr;

static void *fifo_thread(void *arg) {
  fifo_thr *ft = arg;
  redisContext *raw = th_redis_raw(g_r);
  char owner[80];
  dlock_mutex_owner(ft->m, owner, sizeof owner);
  char idx[16];
  snprintf(idx, sizeof idx, "%d", ft->idx);
  freeReplyObject(redisCommand(raw, "HSET fifo:owners %s %s", idx, owner));
  if (wait_key(raw, "fifo:go", 20000)) {
    ft->rc = 19;
    redisFree(raw);
    return NULL;
  }
  /* Arrive exactly idx-th: wait until idx waiters are queued. */
  int64_t end = th_now_ms() + 20000;
  while (raw_int(raw, "LLEN %s", "redisson_lock_queue:{fifo}") != ft->idx) {
    if (th_now_ms() > end) {
      ft->rc = 20;
      redisFree(raw);
      return NULL;
    }
    th_sleep_ms(2);
  }
  int rc = dlock_mutex_lock(ft->m);
  if (rc) {
    fprintf(stderr, "waiter %d: %s %s\n", ft->idx, dlock_err_name(rc),
            dlock_last_error());
    ft->rc = 21;
    redisFree(raw);
    return NULL;
  }
  freeReplyObject(redisCommand(raw, "RPUSH fifo:served %s", idx));
  th_sleep_ms(15);
  ft->rc = dlock_mutex_unlock(ft->m) ? 22 : 0;
  redisFree(raw);
  return NULL;
}

static int fifo_proc(void *arg) {
  int p = *(int *)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fair(c, "fifo", &m))
    return 10;
  pthread_t t[FIFO_THREADS];
  fifo_thr ft[FIFO_THREADS];
  for (int i = 0; i < FIFO_THREADS; i++) {
    ft[i] = (fifo_thr){m, p + FIFO_PROCS * i, -1};
    pthread_create(&t[i], NULL, fifo_thread, &ft[i]);
  }
  int rc = 0;
  for (int i = 0; i < FIFO_THREADS; i++) {
    pthread_join(t[i], NULL);
    if (ft[i].rc && !rc)
      rc = ft[i].rc;
  }
  dlock_mutex_free(m);
  dlock_client_free(c);
  return rc;
}

/* Competes with trylock / timedlock(0) until every waiter was served. */
static int trylock_proc(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fair(c, "fifo", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  if (wait_key(raw, "fifo:go", 20000))
    return 14;
  long tries = 0, wins = 0;
  int64_t end = th_now_ms() + 30000;
  for (;;) {
    long long served = raw_int(raw, "LLEN %s", "fifo:served");
    if (served - wins >= FIFO_N)
      break;
    if (th_now_ms() > end)
      return 11;
    int rc =
        tries % 2 ? dlock_mutex_trylock(m) : dlock_mutex_timedlock(m, 0, 5000);
    tries++;
    if (rc == 0) {
      wins++;
      freeReplyObject(redisCommand(raw, "RPUSH fifo:served T"));
      dlock_mutex_unlock(m);
    } else if (rc != DLOCK_EBUSY) {
      fprintf(stderr, "trylock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      return 12;
    }
    th_sleep_ms(1);
  }
  printf("trylock process: %ld attempts, %ld won (after the queue)\n", tries,
         wins);
  redisFree(raw);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return tries > 20 ? 0 : 13;
}

TH_CASE(fifo_across_processes) {
  g_r = th_redis_new(0, NULL);
  int ids[FIFO_PROCS];
  pid_t p[FIFO_PROCS];
  for (int i = 0; i < FIFO_PROCS; i++) {
    ids[i] = i;
    p[i] = th_fork(fifo_proc, &ids[i]);
  }
  pid_t tp = th_fork(trylock_proc, NULL);
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fair(c, "fifo", &m));
  CHECK_OK(dlock_mutex_lock(m));
  freeReplyObject(th_cmd(g_r, "SET fifo:go 1"));
  th_wait_llen(g_r, "redisson_lock_queue:{fifo}", FIFO_N, 30000);
  /* The queue holds the waiters in arrival order. */
  redisReply *q = th_cmd(g_r, "LRANGE redisson_lock_queue:{fifo} 0 -1");
  CHECK_EQ(q->elements, FIFO_N);
  for (int i = 0; i < FIFO_N; i++) {
    redisReply *o = th_cmd(g_r, "HGET fifo:owners %d", i);
    CHECK_STR(q->element[i]->str, o->str);
    freeReplyObject(o);
  }
  freeReplyObject(q);
  CHECK_EQ(th_cmd_int(g_r, "ZCARD redisson_lock_timeout:{fifo}"), FIFO_N);
  th_sleep_ms(100); /* the trylock process hammers a held lock */
  CHECK_OK(dlock_mutex_unlock(m));
  for (int i = 0; i < FIFO_PROCS; i++)
    CHECK_EQ(th_wait(p[i], 60000), 0);
  CHECK_EQ(th_wait(tp, 60000), 0);
  redisReply *s = th_cmd(g_r, "LRANGE fifo:served 0 -1");
  CHECK_MSG(s->elements >= FIFO_N, "%zu served", s->elements);
  for (int i = 0; i < FIFO_N; i++) {
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    CHECK_STR(s->element[i]->str, want); /* FIFO; no trylock in between */
  }
  for (size_t i = FIFO_N; i < s->elements; i++)
    CHECK_STR(s->element[i]->str, "T");
  freeReplyObject(s);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS redisson_lock_queue:{fifo}"), 0);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS redisson_lock_timeout:{fifo}"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- a dead waiter is skipped after its deadline ---------------------------
 */

static int dead_waiter_proc(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fair(c, "fdead", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  if (wait_key(raw, "fdead:go_a", 20000))
    return 12;
  dlock_mutex_timedlock(m, 1500, -1); /* killed while waiting */
  return 11;
}

static int forever_waiter_proc(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fair(c, "fever", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  if (wait_key(raw, "fever:go", 20000)) /* the parent holds it */
    return 12;
  dlock_mutex_lock(m); /* killed while waiting */
  return 11;
}

/* Issue 10: a waiter that waits forever and is SIGKILLed holds the queue
 * for seconds, not for Redisson's 300 s + the holder's lease (the old code
 * kept every later fair waiter out for minutes). */
TH_CASE_T(killed_forever_waiter_holds_queue_seconds, 120, "slow") {
  g_r = th_redis_new(0, NULL);
  /* Forked before this process has a client (threads): see th_fork. */
  pid_t a = th_fork(forever_waiter_proc, NULL);
  dlock_client *c = th_client(g_r), *c2 = th_client(g_r);
  dlock_mutex *m, *m2;
  CHECK_OK(dlock_mutex_new_fair(c, "fever", &m));
  CHECK_OK(dlock_mutex_new_fair(c2, "fever", &m2));
  CHECK_OK(dlock_mutex_lock(m)); /* watchdog: 30 s PTTL */
  freeReplyObject(th_cmd(g_r, "SET fever:go 1"));
  th_wait_llen(g_r, "redisson_lock_queue:{fever}", 1, 10000);
  kill(a, SIGKILL);
  CHECK_EQ(th_wait(a, 5000), -SIGKILL);
  int64_t killed = th_now_ms();
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_OK(dlock_mutex_timedlock(m2, 20000, -1));
  int64_t waited = th_now_ms() - killed;
  printf("a later waiter got the lock %lld ms after the dead one died\n",
         (long long)waited);
  CHECK_MSG(waited < 8000, "waited %lld ms", (long long)waited);
  CHECK_OK(dlock_mutex_unlock(m2));
  dlock_mutex_free(m);
  dlock_mutex_free(m2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

static int live_waiter_proc(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new_fair(c, "fdead", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  if (wait_key(raw, "fdead:go_b", 20000))
    return 13;
  int rc = dlock_mutex_timedlock(m, 15000, -1);
  if (rc) {
    fprintf(stderr, "live waiter: %s %s\n", dlock_err_name(rc),
            dlock_last_error());
    return 11;
  }
  freeReplyObject(redisCommand(raw, "SET fdead:acquired_at %lld", epoch_ms()));
  redisFree(raw);
  if (dlock_mutex_unlock(m))
    return 12;
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TH_CASE_T(dead_waiter_skipped, 120, "slow") {
  g_r = th_redis_new(0, NULL);
  pid_t a = th_fork(dead_waiter_proc, NULL);
  pid_t b = th_fork(live_waiter_proc, NULL);
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new_fair(c, "fdead", &m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 2000));
  freeReplyObject(th_cmd(g_r, "SET fdead:go_a 1"));
  th_wait_llen(g_r, "redisson_lock_queue:{fdead}", 1, 10000);
  kill(a, SIGKILL);
  CHECK_EQ(th_wait(a, 5000), -SIGKILL);
  redisReply *q = th_cmd(g_r, "LRANGE redisson_lock_queue:{fdead} 0 -1");
  CHECK_EQ(q->elements, 1);
  redisReply *z = th_cmd(g_r, "ZSCORE redisson_lock_timeout:{fdead} %s",
                         q->element[0]->str);
  long long dead_deadline = atoll(z->str);
  freeReplyObject(z);
  freeReplyObject(q);
  freeReplyObject(th_cmd(g_r, "SET fdead:go_b 1"));
  th_wait_llen(g_r, "redisson_lock_queue:{fdead}", 2, 10000);
  CHECK_OK(dlock_mutex_unlock(m)); /* "0" goes to the dead head's channel */
  /* Until the dead head's deadline, the live waiter must not get in. */
  while (epoch_ms() < dead_deadline - 150) {
    CHECK_EQ(th_cmd_int(g_r, "EXISTS fdead"), 0);
    CHECK_EQ(th_cmd_int(g_r, "EXISTS fdead:acquired_at"), 0);
    th_sleep_ms(20);
  }
  CHECK_EQ(th_wait(b, 20000), 0);
  redisReply *at = th_cmd(g_r, "GET fdead:acquired_at");
  long long acquired = atoll(at->str);
  freeReplyObject(at);
  printf("dead head's deadline %lld, live waiter acquired %+lld ms after\n",
         dead_deadline, acquired - dead_deadline);
  CHECK_MSG(acquired >= dead_deadline - 50 && acquired < dead_deadline + 1500,
            "acquired at %lld, deadline %lld", acquired, dead_deadline);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS redisson_lock_queue:{fdead}"), 0);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS redisson_lock_timeout:{fdead}"), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* ---- deadlines: Redisson's arithmetic on enqueue, timeout, acquire ---------
 */

static long long zscore(th_redis *r, const char *member) {
  redisReply *z = th_cmd(r, "ZSCORE redisson_lock_timeout:{fdrift} %s", member);
  long long v = z->type == REDIS_REPLY_STRING ? atoll(z->str) : -1;
  freeReplyObject(z);
  return v;
}

TH_CASE(timeout_leaves_queue_deadlines) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_mutex *m, *m2;
  CHECK_OK(dlock_mutex_new_fair(c, "fdrift", &m));
  CHECK_OK(dlock_mutex_new_fair(c2, "fdrift", &m2));
  CHECK_OK(dlock_mutex_lock(m));
  waiter w[3] = {
      {m2, 20000, -1, 0, ""}, {m2, 800, -1, 0, ""}, {m2, 20000, -1, 0, ""}};
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    pthread_create(&t[i], NULL, waiter_main, &w[i]);
    th_wait_llen(r, "redisson_lock_queue:{fdrift}", i + 1, 5000);
  }
  /* Each deadline = its last attempt + 5000 ms (kept alive every second). */
  long long now = epoch_ms();
  for (int i = 0; i < 3; i++) {
    long long sc = zscore(r, w[i].owner);
    CHECK_MSG(sc > now + 2500 && sc <= now + 5100, "score %lld now %lld", sc,
              now);
  }
  /* The 800 ms waiter times out and leaves; the others keep their order. */
  pthread_join(t[1], NULL);
  CHECK_RC(w[1].rc, DLOCK_ETIMEDOUT);
  CHECK_MSG(w[1].elapsed >= 790 && w[1].elapsed < 2000, "elapsed %lld",
            (long long)w[1].elapsed);
  redisReply *q = th_cmd(r, "LRANGE redisson_lock_queue:{fdrift} 0 -1");
  CHECK_EQ(q->elements, 2);
  CHECK_STR(q->element[0]->str, w[0].owner);
  CHECK_STR(q->element[1]->str, w[2].owner);
  freeReplyObject(q);
  CHECK_EQ(zscore(r, w[1].owner), -1);
  /* Those behind never move closer than 5 s from now (they are alive). */
  now = epoch_ms();
  CHECK_MSG(zscore(r, w[2].owner) > now + 2500, "score %lld now %lld",
            zscore(r, w[2].owner), now);
  /* Unlock: the head takes it (the rest move up by its wait), then the
   * last one. */
  CHECK_OK(dlock_mutex_unlock(m));
  pthread_join(t[0], NULL);
  pthread_join(t[2], NULL);
  CHECK_OK(w[0].rc);
  CHECK_OK(w[2].rc);
  CHECK_EQ(th_cmd_int(r, "EXISTS fdrift"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_queue:{fdrift}"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS redisson_lock_timeout:{fdrift}"), 0);
  dlock_mutex_free(m);
  dlock_mutex_free(m2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* Who holds and who waits (issue 18): the holder's client info key (host,
 * pid, program, start time; TTL = the watchdog timeout) and the fair queue,
 * head first, each waiter's client named too. */
static int info_of(dlock_client *c, const char *owner, dlock_client_info *in,
                   int64_t ms) {
  int64_t end = th_now_ms() + ms;
  int rc;
  while ((rc = dlock_client_info_query(c, owner, in)) == 0 && th_now_ms() < end)
    th_sleep_ms(10); /* written by the watchdog thread, shortly after */
  return rc;
}

TH_CASE(status_names_holder_and_waiters) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r), *c2 = th_client(g_r);
  redisContext *raw = th_redis_raw(g_r);
  dlock_mutex *m, *o;
  CHECK_OK(dlock_mutex_new_fair(c, "who", &m));
  CHECK_OK(dlock_mutex_new_fair(c2, "who", &o));
  dlock_client_info in;
  CHECK_EQ(dlock_client_info_query(c, dlock_client_id(c), &in), 0);
  CHECK_RC(dlock_client_info_query(c, "short", &in), DLOCK_EINVAL);
  char **w = (char **)1;
  size_t n = 9;
  CHECK_OK(dlock_fair_waiters_query(c, "who", &w, &n));
  CHECK(w == NULL && n == 0);
  long long t0 = epoch_ms();
  CHECK_OK(dlock_mutex_lock(m));
  char owner[80];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  CHECK_EQ(info_of(c2, owner, &in, 5000), 1);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  CHECK_STR(in.host, host);
  CHECK_EQ(in.pid, getpid());
  CHECK_STR(in.program, "test_fair");
  CHECK(in.started_ms > t0 - 60000 && in.started_ms <= t0);
  char key[80];
  snprintf(key, sizeof key, "dlock_client:{%s}", dlock_client_id(c));
  long long ttl = raw_int(raw, "PTTL %s", key);
  CHECK_MSG(ttl > 0 && ttl <= 30000, "info key TTL %lld", ttl);
  /* A waiter on the other client joins the queue. */
  waiter wt = {o, 10000, -1, 0, ""};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, waiter_main, &wt), 0);
  int64_t end = th_now_ms() + 5000;
  while (raw_int(raw, "LLEN %s", "redisson_lock_queue:{who}") < 1 &&
         th_now_ms() < end)
    th_sleep_ms(5);
  CHECK_OK(dlock_fair_waiters_query(c, "who", &w, &n));
  CHECK_EQ(n, 1);
  CHECK_STR(w[0], wt.owner);
  CHECK_EQ(info_of(c, w[0], &in, 5000), 1);
  CHECK_EQ(in.pid, getpid());
  dlock_fair_waiters_free(w, n);
  dlock_fair_waiters_free(NULL, 0);
  CHECK_OK(dlock_mutex_unlock(m));
  pthread_join(t, NULL);
  CHECK_OK(wt.rc);
  /* A key of another type: an error, not a crash. */
  redisReply *x = th_cmd(g_r, "SET %s %s", "redisson_lock_queue:{str}", "x");
  freeReplyObject(x);
  CHECK_RC(dlock_fair_waiters_query(c, "str", &w, &n), DLOCK_EREDIS);
  CHECK(w == NULL && n == 0);
  dlock_mutex_free(m);
  dlock_mutex_free(o);
  redisFree(raw);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TH_MAIN()
