/* Smoke tests: the basic lock cycle and the Redis layout, from outside. */
#include "th.h"

#include <limits.h>
#include <pthread.h>

TH_CASE(lock_unlock_layout) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "smoke", &m));
  CHECK_OK(dlock_mutex_lock(m));
  char owner[128];
  CHECK_OK(dlock_mutex_owner(m, owner, sizeof owner));
  CHECK_EQ(strncmp(owner, dlock_client_id(c), 36), 0);
  redisReply *h = th_cmd(r, "HGETALL smoke");
  CHECK_EQ(h->elements, 2);
  CHECK_STR(h->element[0]->str, owner);
  CHECK_STR(h->element[1]->str, "1");
  freeReplyObject(h);
  long long pttl = th_cmd_int(r, "PTTL smoke");
  CHECK_MSG(pttl > 29000 && pttl <= 30000, "pttl %lld", pttl);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS smoke"), 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_EPERM);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

TH_MAIN()

static th_redis *g_r;

static int worker_counter(void *arg) {
  int iters = *(int *)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new(c, "ctr-lock", &m))
    return 10;
  redisContext *raw = th_redis_raw(g_r);
  for (int i = 0; i < iters; i++) {
    int rc = dlock_mutex_lock(m);
    if (rc) {
      fprintf(stderr, "lock: %s %s\n", dlock_err_name(rc), dlock_last_error());
      return 11;
    }
    redisReply *r = redisCommand(raw, "GET ctr");
    long v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
    freeReplyObject(r);
    r = redisCommand(raw, "SET ctr %ld", v + 1);
    freeReplyObject(r);
    if ((rc = dlock_mutex_unlock(m))) {
      fprintf(stderr, "unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      return 12;
    }
  }
  redisFree(raw);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return 0;
}

TH_CASE(contended_processes_smoke) {
  g_r = th_redis_new(0, NULL);
  int iters = 300;
  pid_t p[4];
  int64_t t0 = th_now_ms();
  for (int i = 0; i < 4; i++)
    p[i] = th_fork(worker_counter, &iters);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(th_wait(p[i], 60000), 0);
  redisReply *r = th_cmd(g_r, "GET ctr");
  CHECK_EQ(atol(r->str), 4 * iters);
  freeReplyObject(r);
  printf("%d acquisitions in %lld ms\n", 4 * iters,
         (long long)(th_now_ms() - t0));
}

/* Threads of one client and of other processes, with timeouts mixed in:
 * exercises queueing, hand-over, cancel and the subscription refcounts. */
typedef struct mix_arg {
  dlock_client *c;
  int iters;
  int timeouts;
  int errors;
} mix_arg;

static void *mix_thread(void *p) {
  mix_arg *a = p;
  dlock_mutex *m;
  if (dlock_mutex_new(a->c, "mix", &m))
    return NULL;
  redisContext *raw = th_redis_raw(g_r);
  for (int i = 0; i < a->iters; i++) {
    int rc =
        (i % 5 == 4) ? dlock_mutex_timedlock(m, 1, -1) : dlock_mutex_lock(m);
    if (rc == DLOCK_ETIMEDOUT) {
      __atomic_add_fetch(&a->timeouts, 1, __ATOMIC_RELAXED);
      continue;
    }
    if (rc) {
      fprintf(stderr, "lock: %s %s\n", dlock_err_name(rc), dlock_last_error());
      __atomic_add_fetch(&a->errors, 1, __ATOMIC_RELAXED);
      continue;
    }
    redisReply *r = redisCommand(raw, "GET mixctr");
    long v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
    freeReplyObject(r);
    r = redisCommand(raw, "SET mixctr %ld", v + 1);
    freeReplyObject(r);
    r = redisCommand(raw, "INCR mixok");
    freeReplyObject(r);
    if ((rc = dlock_mutex_unlock(m))) {
      fprintf(stderr, "unlock: %s %s\n", dlock_err_name(rc),
              dlock_last_error());
      __atomic_add_fetch(&a->errors, 1, __ATOMIC_RELAXED);
    }
  }
  redisFree(raw);
  dlock_mutex_free(m);
  return NULL;
}

static int mix_proc(void *arg) {
  (void)arg;
  mix_arg a = {th_client(g_r), 100, 0, 0};
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, mix_thread, &a);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  dlock_client_free(a.c);
  return a.errors ? 1 : 0;
}

TH_CASE(mixed_threads_processes_timeouts) {
  g_r = th_redis_new(0, NULL);
  pid_t p[3];
  for (int i = 0; i < 3; i++)
    p[i] = th_fork(mix_proc, NULL);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(th_wait(p[i], 90000), 0);
  redisReply *r = th_cmd(g_r, "GET mixok");
  long long ok = atoll(r->str);
  freeReplyObject(r);
  r = th_cmd(g_r, "GET mixctr");
  CHECK_EQ(atoll(r->str), ok);
  freeReplyObject(r);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS mix"), 0);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS dlock_lock_queue:{mix}"), 0);
  printf("%lld critical sections\n", ok);
}

typedef struct cancel_arg {
  dlock_client *c;
  int rc;
  int64_t ended;
} cancel_arg;

static void *cancel_waiter(void *p) {
  cancel_arg *a = p;
  dlock_mutex *m;
  dlock_mutex_new(a->c, "cancelme", &m);
  a->rc = dlock_mutex_lock(m);
  a->ended = th_now_ms();
  dlock_mutex_free(m);
  return NULL;
}

TH_CASE(cancel_waits_ends_a_blocked_lock) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *holder = th_client(r), *waiter = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(holder, "cancelme", &m));
  CHECK_OK(dlock_mutex_lock(m));
  cancel_arg a = {waiter, 1, 0};
  pthread_t t;
  pthread_create(&t, NULL, cancel_waiter, &a);
  th_sleep_ms(300); /* let it subscribe and queue */
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue:{cancelme}"), 1);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_client_cancel_waits(waiter));
  pthread_join(t, NULL);
  CHECK_EQ(a.rc, DLOCK_ECANCELED);
  CHECK_MSG(a.ended - t0 < 500, "cancel took %lld ms",
            (long long)(a.ended - t0));
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue:{cancelme}"), 0);
  /* The holder still holds; a later call on the waiter client works. */
  CHECK_EQ(dlock_mutex_is_locked(m), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(holder);
  dlock_client_free(waiter);
}

/* Sibling processes forked after the parent used the library must not draw
 * the same unlock request ids: a sibling's final unlock would find the
 * tombstone of another's (mutex.c dlock__unlock_tombstone) and release
 * nothing. */
static int lock_unlock_once(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  if (dlock_mutex_new(c, "fork-rid", &m))
    return 10;
  if (dlock_mutex_lock(m) || dlock_mutex_unlock(m))
    return 11;
  int locked = dlock_mutex_is_locked(m);
  dlock_mutex_free(m);
  dlock_client_free(c);
  return locked == 0 ? 0 : 12;
}

TH_CASE(forked_siblings_unlock_ids_differ) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "parent-lock", &m));
  CHECK_OK(dlock_mutex_lock(m)); /* draws from the parent's generator */
  CHECK_OK(dlock_mutex_unlock(m));
  /* The client's threads end here, so the forks below are single-threaded
   * (TSan refuses multi-threaded fork); the generator state stays. */
  dlock_mutex_free(m);
  dlock_client_free(c);
  for (int i = 0; i < 3; i++) {
    pid_t p = th_fork(lock_unlock_once, NULL);
    CHECK_EQ(th_wait(p, 20000), 0);
    CHECK_EQ(th_cmd_int(g_r, "EXISTS fork-rid"), 0);
  }
}

/* A wait budget too large to add to the clock means "forever" (no signed
 * overflow), for the plain and the fair mutex. */
typedef struct huge_arg {
  dlock_mutex *m;
  int rc;
} huge_arg;

static void *huge_wait(void *p) {
  huge_arg *a = p;
  a->rc = dlock_mutex_timedlock(a->m, LLONG_MAX, -1);
  if (a->rc == 0)
    a->rc = dlock_mutex_unlock(a->m);
  return NULL;
}

TH_CASE(huge_wait_budget_is_forever) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c1 = th_client(r), *c2 = th_client(r);
  for (int fair = 0; fair < 2; fair++) {
    dlock_mutex *a, *b;
    const char *name = fair ? "huge-fair" : "huge";
    CHECK_OK(fair ? dlock_mutex_new_fair(c1, name, &a)
                  : dlock_mutex_new(c1, name, &a));
    CHECK_OK(fair ? dlock_mutex_new_fair(c2, name, &b)
                  : dlock_mutex_new(c2, name, &b));
    CHECK_OK(dlock_mutex_lock(a));
    huge_arg arg = {b, 1};
    pthread_t t;
    pthread_create(&t, NULL, huge_wait, &arg);
    th_sleep_ms(150);
    CHECK_EQ(arg.rc, 1); /* still waiting, not failed at once */
    CHECK_OK(dlock_mutex_unlock(a));
    pthread_join(t, NULL);
    CHECK_OK(arg.rc);
    dlock_mutex_free(a);
    dlock_mutex_free(b);
  }
  dlock_client_free(c1);
  dlock_client_free(c2);
}
