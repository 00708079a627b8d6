/* The semaphore: Redisson RSemaphore layout, exactly N holders across
 * processes, trywait/timedwait bounds, pub/sub wake-up (also after the
 * subscriber connection is killed), cancellation. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/time.h>
#include <unistd.h>

#include "th.h"

static th_redis *g_r;

/* ---- N permits admit exactly N holders across processes ------------------ */

#define ADMIT_PERMITS 2
#define ADMIT_PROCS 4
#define ADMIT_THREADS 2 /* per process, sharing the process's client */
#define ADMIT_ROUNDS 4

/* INCR the holder count and raise the recorded maximum, atomically. */
static const char *ENTER =
    "local v = redis.call('incr', KEYS[1])\n"
    "local m = tonumber(redis.call('get', KEYS[2]) or '0')\n"
    "if v > m then redis.call('set', KEYS[2], v) end\n"
    "return v\n";

typedef struct admit_arg {
  dlock_sem *s;
  int rc;
} admit_arg;

static void *admit_thread(void *arg) {
  admit_arg *a = arg;
  redisContext *raw = th_redis_raw(g_r);
  a->rc = 0;
  for (int i = 0; i < ADMIT_ROUNDS && a->rc == 0; i++) {
    int rc = dlock_sem_timedwait(a->s, 30000);
    if (rc) {
      fprintf(stderr, "wait: %s %s\n", dlock_err_name(rc), dlock_last_error());
      a->rc = 11;
      break;
    }
    redisReply *r = redisCommand(raw, "EVAL %s 2 admit:cur admit:max", ENTER);
    freeReplyObject(r);
    usleep(40000);
    r = redisCommand(raw, "DECR admit:cur");
    freeReplyObject(r);
    r = redisCommand(raw, "INCR admit:total");
    freeReplyObject(r);
    if ((rc = dlock_sem_post(a->s))) {
      fprintf(stderr, "post: %s %s\n", dlock_err_name(rc), dlock_last_error());
      a->rc = 12;
    }
  }
  redisFree(raw);
  return NULL;
}

static int admit_worker(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_sem *s;
  if (dlock_sem_new(c, "admit", &s))
    return 10;
  admit_arg a[ADMIT_THREADS];
  pthread_t t[ADMIT_THREADS];
  for (int i = 0; i < ADMIT_THREADS; i++) {
    a[i].s = s;
    pthread_create(&t[i], NULL, admit_thread, &a[i]);
  }
  int rc = 0;
  for (int i = 0; i < ADMIT_THREADS; i++) {
    pthread_join(t[i], NULL);
    if (a[i].rc)
      rc = a[i].rc;
  }
  dlock_sem_free(s);
  dlock_client_free(c);
  return rc;
}

TH_CASE(n_permits_admit_exactly_n_processes) {
  g_r = th_redis_new(0, NULL);
  /* Fork before this process creates a client (single-threaded fork). The
   * workers wait on a semaphore that does not exist yet. */
  pid_t p[ADMIT_PROCS];
  for (int i = 0; i < ADMIT_PROCS; i++)
    p[i] = th_fork(admit_worker, NULL);
  dlock_client *c = th_client(g_r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c, "admit", &s));
  th_wait_numsub(g_r, "redisson_sc:{admit}", ADMIT_PROCS, 10000);
  CHECK_OK(dlock_sem_init(s, ADMIT_PERMITS));
  for (int i = 0; i < ADMIT_PROCS; i++)
    CHECK_EQ(th_wait(p[i], 60000), 0);
  CHECK_EQ(th_get_ll(g_r, "admit:total"),
           ADMIT_PROCS * ADMIT_THREADS * ADMIT_ROUNDS);
  CHECK_EQ(th_get_ll(g_r, "admit:cur"), 0);
  CHECK_EQ(th_get_ll(g_r, "admit:max"), ADMIT_PERMITS);
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, ADMIT_PERMITS);
  dlock_sem_free(s);
  dlock_client_free(c);
}

/* ---- single-call semantics ----------------------------------------------- */

TH_CASE(init_trywait_post_value) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_sem *s;
  CHECK_RC(dlock_sem_new(c, "", &s), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_OK(dlock_sem_new(c, "tw", &s));
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  /* Not initialised: nothing can be acquired. */
  CHECK_RC(dlock_sem_trywait(s), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_init(s, -1), DLOCK_EINVAL);
  CHECK_OK(dlock_sem_init(s, 2));
  CHECK_RC(dlock_sem_init(s, 5), DLOCK_EBUSY);
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 2);
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_OK(dlock_sem_timedwait(s, 0));
  CHECK_RC(dlock_sem_trywait(s), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_timedwait(s, 0), DLOCK_EBUSY);
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 1);
  CHECK_OK(dlock_sem_wait(s));
  /* init(0) on a fresh name: set, but empty. */
  dlock_sem *z;
  CHECK_OK(dlock_sem_new(c, "zero", &z));
  CHECK_OK(dlock_sem_init(z, 0));
  CHECK_RC(dlock_sem_init(z, 0), DLOCK_EBUSY);
  CHECK_RC(dlock_sem_trywait(z), DLOCK_EBUSY);
  /* post on a missing key creates it (Redisson release). */
  dlock_sem *p;
  CHECK_OK(dlock_sem_new(c, "fresh", &p));
  CHECK_OK(dlock_sem_post(p));
  CHECK_OK(dlock_sem_value(p, &v));
  CHECK_EQ(v, 1);
  CHECK_RC(dlock_sem_init(p, 3), DLOCK_EBUSY);
  /* NULL arguments. */
  CHECK_RC(dlock_sem_wait(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_post(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_sem_value(s, NULL), DLOCK_EINVAL);
  dlock_sem_free(NULL);
  dlock_sem_free(s);
  dlock_sem_free(z);
  dlock_sem_free(p);
  dlock_client_free(c);
}

TH_CASE(timedwait_bounds) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c, "tb", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_sem_timedwait(s, 300), DLOCK_ETIMEDOUT);
  int64_t el = th_now_ms() - t0;
  CHECK_MSG(el >= 300 && el < 5000, "timedwait(300) took %lld ms",
            (long long)el);
  /* Longer than the re-check interval: still ends on time, not early. */
  t0 = th_now_ms();
  CHECK_RC(dlock_sem_timedwait(s, 1500), DLOCK_ETIMEDOUT);
  el = th_now_ms() - t0;
  CHECK_MSG(el >= 1500 && el < 6000, "timedwait(1500) took %lld ms",
            (long long)el);
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(s);
  dlock_client_free(c);
}

/* ---- waiting threads ----------------------------------------------------- */

typedef struct waiter {
  dlock_client *c;
  const char *name;
  long long wait_ms;
  int rc;
  int64_t done_at;
  char msg[256];
} waiter;

static atomic_int g_done;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  dlock_sem *s;
  w->rc = dlock_sem_new(w->c, w->name, &s);
  if (w->rc == 0) {
    w->rc = dlock_sem_timedwait(s, w->wait_ms);
    snprintf(w->msg, sizeof w->msg, "%s", dlock_last_error());
    dlock_sem_free(s);
  }
  w->done_at = th_now_ms();
  atomic_fetch_add(&g_done, 1);
  return NULL;
}

TH_CASE(post_wakes_waiter_before_recheck) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c2, "pw", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  for (int round = 0; round < 3; round++) {
    waiter w = {c, "pw", 20000, -100, 0, ""};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    th_wait_numsub(r, "redisson_sc:{pw}", 1, 10000);
    /* The waiter re-checked when its subscription was confirmed and now
     * sleeps up to the 1 s re-check interval: only the message can wake it
     * within a few hundred ms. */
    th_sleep_ms(50);
    int64_t t0 = th_now_ms();
    CHECK_OK(dlock_sem_post(s));
    pthread_join(t, NULL);
    CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
    int64_t lat = w.done_at - t0;
    printf("round %d: waiter woke %lld ms after the post\n", round,
           (long long)lat);
    CHECK_MSG(lat < 800, "woke %lld ms after the post (re-check, not pub/sub)",
              (long long)lat);
    th_sleep_ms(50);
  }
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(s);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* Script calls (EVAL + EVALSHA) the server has run so far. */
static long long script_calls(th_redis *r) {
  redisReply *x = th_cmd(r, "INFO commandstats");
  long long n = 0;
  const char *keys[2] = {"cmdstat_eval:calls=", "cmdstat_evalsha:calls="};
  for (int i = 0; i < 2; i++) {
    const char *p = x->type == REDIS_REPLY_STRING ? strstr(x->str, keys[i]) : 0;
    if (p)
      n += atoll(p + strlen(keys[i]));
  }
  freeReplyObject(x);
  return n;
}

/* One post with several waiters of one client: one waiter is woken (one
 * acquire attempt reaches the server, not one per waiter) and gets the
 * permit; the rest keep waiting until more posts come. */
TH_CASE(one_post_wakes_one_waiter) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c2, "opw", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  /* Load the release script, so the post below is one call (no NOSCRIPT
   * round). */
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_trywait(s));
  enum { NW = 5 };
  waiter w[NW];
  pthread_t t[NW];
  atomic_store(&g_done, 0);
  for (int i = 0; i < NW; i++) {
    w[i] = (waiter){c, "opw", 20000, -100, 0, ""};
    pthread_create(&t[i], NULL, waiter_main, &w[i]);
  }
  th_wait_numsub(r, "redisson_sc:{opw}", 1, 10000);
  /* Every waiter re-checked once the subscription was confirmed; wait until
   * those attempts are done (the count stops moving), well within the 1 s
   * re-check interval. */
  long long before = script_calls(r);
  for (int i = 0; i < 20; i++) {
    th_sleep_ms(20);
    long long now = script_calls(r);
    if (now == before)
      break;
    before = now;
  }
  CHECK_OK(dlock_sem_post(s));
  int64_t end = th_now_ms() + 5000;
  while (atomic_load(&g_done) < 1 && th_now_ms() < end)
    th_sleep_ms(5);
  th_sleep_ms(100);
  long long attempts = script_calls(r) - before - 1; /* minus the post */
  printf("one post, %d waiters: %lld acquire attempts\n", NW, attempts);
  CHECK_EQ(atomic_load(&g_done), 1);
  CHECK_MSG(attempts >= 1 && attempts <= 2,
            "%lld attempts after one post (wake-all would be %d)", attempts,
            NW);
  for (int i = 1; i < NW; i++)
    CHECK_OK(dlock_sem_post(s));
  for (int i = 0; i < NW; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(w[i].rc == 0, "waiter %d: %s %s", i, dlock_err_name(w[i].rc),
              w[i].msg);
  }
  CHECK_EQ(atomic_load(&g_done), NW);
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  dlock_sem_free(s);
  dlock_client_free(c);
  dlock_client_free(c2);
}

static redisReply *read_msg(redisContext *sub) {
  redisReply *m = NULL;
  if (redisGetReply(sub, (void **)&m) != REDIS_OK || !m)
    th_fail(__FILE__, __LINE__, "no pub/sub message within 5 s");
  if (m->type != REDIS_REPLY_ARRAY || m->elements != 3)
    th_fail(__FILE__, __LINE__, "not a pub/sub message");
  return m;
}

TH_CASE(layout_and_messages) {
  th_redis *r = th_redis_new(0, NULL);
  redisContext *sub = th_redis_raw(r);
  struct timeval tv = {5, 0};
  redisSetTimeout(sub, tv);
  redisReply *x =
      redisCommand(sub, "SUBSCRIBE redisson_sc:{lay} redisson_sc:a{b}");
  freeReplyObject(x);
  x = NULL;
  redisGetReply(sub, (void **)&x); /* second subscribe confirmation */
  freeReplyObject(x);
  dlock_client *c = th_client(r);
  dlock_sem *s, *b;
  CHECK_OK(dlock_sem_new(c, "lay", &s));
  CHECK_OK(dlock_sem_new(c, "a{b}", &b));
  CHECK_OK(dlock_sem_init(s, 3));
  x = read_msg(sub);
  CHECK_STR(x->element[0]->str, "message");
  CHECK_STR(x->element[1]->str, "redisson_sc:{lay}");
  CHECK_STR(x->element[2]->str, "3");
  freeReplyObject(x);
  redisReply *g = th_cmd(r, "TYPE lay");
  CHECK_STR(g->str, "string");
  freeReplyObject(g);
  g = th_cmd(r, "GET lay");
  CHECK_STR(g->str, "3");
  freeReplyObject(g);
  CHECK_EQ(th_cmd_int(r, "PTTL lay"), -1);
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_OK(dlock_sem_trywait(s));
  g = th_cmd(r, "GET lay");
  CHECK_STR(g->str, "1");
  freeReplyObject(g);
  CHECK_OK(dlock_sem_post(s)); /* publishes the new value */
  x = read_msg(sub);
  CHECK_STR(x->element[1]->str, "redisson_sc:{lay}");
  CHECK_STR(x->element[2]->str, "2");
  freeReplyObject(x);
  /* A name with braces keeps them and gets no extra ones. */
  CHECK_OK(dlock_sem_post(b));
  x = read_msg(sub);
  CHECK_STR(x->element[1]->str, "redisson_sc:a{b}");
  CHECK_STR(x->element[2]->str, "1");
  freeReplyObject(x);
  g = th_cmd(r, "GET a{b}");
  CHECK_STR(g->str, "1");
  freeReplyObject(g);
  /* A Redisson-style writer (plain SET) is understood. */
  freeReplyObject(th_cmd(r, "SET lay 7"));
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 7);
  redisFree(sub);
  dlock_sem_free(s);
  dlock_sem_free(b);
  dlock_client_free(c);
}

TH_CASE(pubsub_killed_while_waiting) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c2, "pk", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  for (int round = 0; round < 2; round++) {
    waiter w = {c, "pk", 20000, -100, 0, ""};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    th_wait_numsub(r, "redisson_sc:{pk}", 1, 10000);
    long long killed = th_cmd_int(r, "CLIENT KILL TYPE pubsub");
    CHECK_MSG(killed >= 1, "killed %lld subscriber connections", killed);
    if (round == 1)
      th_wait_numsub(r, "redisson_sc:{pk}", 1, 10000); /* after resubscribe */
    /* round 0: the post may come while nobody listens. */
    CHECK_OK(dlock_sem_post(s));
    pthread_join(t, NULL);
    CHECK_MSG(w.rc == 0, "round %d waiter: %s %s", round, dlock_err_name(w.rc),
              w.msg);
  }
  dlock_sem_free(s);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* Permits that appear without a message (a writer that does not publish)
 * are found by the periodic re-check. */
TH_CASE(recheck_without_message) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  freeReplyObject(th_cmd(r, "SET rc 0"));
  waiter w = {c, "rc", 10000, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_sc:{rc}", 1, 10000);
  th_sleep_ms(100);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(r, "SET rc 1"));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  printf("found %lld ms after the silent SET\n", (long long)(w.done_at - t0));
  CHECK_EQ(th_cmd_int(r, "EXISTS rc"), 1);
  dlock_client_free(c);
}

/* A budget too large to add to the clock waits like "forever" (no signed
 * overflow: UBSan in the ASan build checks). */
TH_CASE(huge_budget_is_forever) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c2, "hb", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  waiter w = {c, "hb", LLONG_MAX, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_sc:{hb}", 1, 10000);
  th_sleep_ms(50);
  CHECK_OK(dlock_sem_post(s));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  dlock_sem_free(s);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* A Redisson client's release (INCRBY + PUBLISH of the new value on
 * redisson_sc:{name}), sent raw, wakes a dlock waiter through pub/sub. */
TH_CASE(redisson_release_wakes_waiter) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  freeReplyObject(th_cmd(r, "SET rr 0"));
  waiter w = {c, "rr", 20000, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_sc:{rr}", 1, 10000);
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(r, "EVAL %s 2 rr redisson_sc:{rr} 1 PUBLISH",
                         "local value = redis.call('incrby', KEYS[1], "
                         "ARGV[1]); redis.call(ARGV[2], KEYS[2], value);"));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  long long lat = w.done_at - t0;
  printf("woke %lld ms after the raw release\n", lat);
  CHECK_MSG(lat < 800, "woke %lld ms after (re-check, not pub/sub)", lat);
  CHECK_EQ(th_cmd_int(r, "EXISTS rr"), 1);
  dlock_client_free(c);
}

TH_CASE(cancel_waits) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c, "cw", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  waiter w = {c, "cw", -1, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_sc:{cw}", 1, 10000);
  th_sleep_ms(50);
  CHECK_OK(dlock_client_cancel_waits(c));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  /* No permit was taken; the client still works. */
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_EQ(v, 0);
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_timedwait(s, 1000));
  dlock_sem_free(s);
  dlock_client_free(c);
}

TH_MAIN()
