/* The count-down latch: Redisson RCountDownLatch layout, waiters in several
 * processes wake at zero, timedawait bounds, count, init rules, pub/sub
 * wake-up (also after the subscriber connection is killed), cancellation. */
#include <limits.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#include "th.h"

static th_redis *g_r;

/* ---- waiters in several processes -----------------------------------------
 */

#define PROCS 4
#define COUNT 3

static int await_worker(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_latch *l;
  if (dlock_latch_new(c, "gate", &l))
    return 10;
  int rc = dlock_latch_timedawait(l, 30000);
  if (rc) {
    fprintf(stderr, "await: %s %s\n", dlock_err_name(rc), dlock_last_error());
    return 11;
  }
  /* Record when it woke relative to the count-downs. */
  redisContext *raw = th_redis_raw(g_r);
  redisReply *r = redisCommand(raw, "GET downs");
  long long downs = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
  freeReplyObject(r);
  r = redisCommand(raw, "INCR woke");
  freeReplyObject(r);
  redisFree(raw);
  long long n = -1;
  rc = dlock_latch_count(l, &n);
  dlock_latch_free(l);
  dlock_client_free(c);
  if (rc || n != 0)
    return 12;
  return downs == COUNT ? 0 : 13;
}

TH_CASE(waiters_across_processes_wake_at_zero) {
  g_r = th_redis_new(0, NULL);
  /* Set the latch with a raw command (this process has no client yet, so
   * the fork below is single-threaded), then fork the waiters. */
  freeReplyObject(th_cmd(g_r, "SET gate %d", COUNT));
  pid_t p[PROCS];
  for (int i = 0; i < PROCS; i++)
    p[i] = th_fork(await_worker, NULL);
  dlock_client *c = th_client(g_r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c, "gate", &l));
  th_wait_numsub(g_r, "redisson_countdownlatch__channel__{gate}", PROCS, 10000);
  for (int i = 0; i < COUNT; i++) {
    th_sleep_ms(100);
    CHECK_EQ(th_get_ll(g_r, "woke"), -1); /* nobody passed a closed latch */
    long long n = -1;
    CHECK_OK(dlock_latch_count(l, &n));
    CHECK_EQ(n, COUNT - i);
    freeReplyObject(th_cmd(g_r, "INCR downs"));
    CHECK_OK(dlock_latch_count_down(l));
  }
  for (int i = 0; i < PROCS; i++)
    CHECK_EQ(th_wait(p[i], 30000), 0);
  CHECK_EQ(th_get_ll(g_r, "woke"), PROCS);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS gate"), 0);
  dlock_latch_free(l);
  dlock_client_free(c);
}

/* ---- single-call semantics ----------------------------------------------- */

TH_CASE(init_count_timedawait) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_latch *l;
  CHECK_RC(dlock_latch_new(c, "", &l), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_OK(dlock_latch_new(c, "lt", &l));
  long long n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 0);
  CHECK_RC(dlock_latch_init(l, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_init(l, -3), DLOCK_EINVAL);
  CHECK_OK(dlock_latch_init(l, 2));
  CHECK_RC(dlock_latch_init(l, 2), DLOCK_EBUSY);
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 2);
  CHECK_EQ(th_cmd_int(r, "PTTL lt"), -1);
  CHECK_RC(dlock_latch_timedawait(l, 0), DLOCK_ETIMEDOUT);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_timedawait(l, 300), DLOCK_ETIMEDOUT);
  int64_t el = th_now_ms() - t0;
  CHECK_MSG(el >= 300 && el < 5000, "timedawait(300) took %lld ms",
            (long long)el);
  t0 = th_now_ms();
  CHECK_RC(dlock_latch_timedawait(l, 1300), DLOCK_ETIMEDOUT);
  el = th_now_ms() - t0;
  CHECK_MSG(el >= 1300 && el < 6000, "timedawait(1300) took %lld ms",
            (long long)el);
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS lt"), 0);
  CHECK_OK(dlock_latch_timedawait(l, 0));
  CHECK_OK(dlock_latch_await(l));
  /* Open again: it can be set again (Redisson trySetCount). */
  CHECK_OK(dlock_latch_init(l, 1));
  CHECK_OK(dlock_latch_count_down(l));
  /* Counting down an open latch leaves nothing behind. */
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_EQ(th_cmd_int(r, "EXISTS lt"), 0);
  CHECK_RC(dlock_latch_await(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_count(l, NULL), DLOCK_EINVAL);
  dlock_latch_free(NULL);
  dlock_latch_free(l);
  dlock_client_free(c);
}

TH_CASE(await_absent_returns_at_once) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c, "never-set", &l));
  CHECK_OK(dlock_latch_await(l));
  CHECK_OK(dlock_latch_timedawait(l, 5000));
  /* It did not even subscribe. */
  redisReply *x =
      th_cmd(r, "PUBSUB NUMSUB redisson_countdownlatch__channel__{never-set}");
  CHECK_EQ(x->element[1]->integer, 0);
  freeReplyObject(x);
  dlock_latch_free(l);
  dlock_client_free(c);
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
  freeReplyObject(
      redisCommand(sub, "SUBSCRIBE redisson_countdownlatch__channel__{lay} "
                        "redisson_countdownlatch__channel__{a{b}}"));
  redisReply *x = NULL;
  redisGetReply(sub, (void **)&x); /* second confirmation */
  freeReplyObject(x);
  dlock_client *c = th_client(r);
  dlock_latch *l, *b;
  CHECK_OK(dlock_latch_new(c, "lay", &l));
  CHECK_OK(dlock_latch_new(c, "a{b}", &b));
  CHECK_OK(dlock_latch_init(l, 2));
  x = read_msg(sub);
  CHECK_STR(x->element[1]->str, "redisson_countdownlatch__channel__{lay}");
  CHECK_STR(x->element[2]->str, "1"); /* new count set */
  freeReplyObject(x);
  redisReply *g = th_cmd(r, "TYPE lay");
  CHECK_STR(g->str, "string");
  freeReplyObject(g);
  CHECK_EQ(th_get_ll(r, "lay"), 2);
  CHECK_OK(dlock_latch_count_down(l)); /* 1: no message */
  CHECK_EQ(th_get_ll(r, "lay"), 1);
  CHECK_OK(dlock_latch_count_down(l)); /* 0: "0", key deleted */
  x = read_msg(sub);
  CHECK_STR(x->element[1]->str, "redisson_countdownlatch__channel__{lay}");
  CHECK_STR(x->element[2]->str, "0");
  freeReplyObject(x);
  CHECK_EQ(th_cmd_int(r, "EXISTS lay"), 0);
  /* Braces in the name: Redisson still wraps it. */
  CHECK_OK(dlock_latch_init(b, 1));
  x = read_msg(sub);
  CHECK_STR(x->element[1]->str, "redisson_countdownlatch__channel__{a{b}}");
  CHECK_STR(x->element[2]->str, "1");
  freeReplyObject(x);
  CHECK_EQ(th_get_ll(r, "a{b}"), 1);
  /* A Redisson-style writer (plain SET) is understood. */
  freeReplyObject(th_cmd(r, "SET lay 5"));
  long long n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 5);
  redisFree(sub);
  dlock_latch_free(l);
  dlock_latch_free(b);
  dlock_client_free(c);
}

/* ---- concurrent count-downs from several processes ------------------------
 */

#define CD_PROCS 4
#define CD_EACH 5

static int count_down_worker(void *arg) {
  (void)arg;
  dlock_client *c = th_client(g_r);
  dlock_latch *l;
  if (dlock_latch_new(c, "many", &l))
    return 10;
  int rc = 0;
  for (int i = 0; i < CD_EACH && rc == 0; i++)
    rc = dlock_latch_count_down(l);
  if (rc)
    fprintf(stderr, "count_down: %s %s\n", dlock_err_name(rc),
            dlock_last_error());
  dlock_latch_free(l);
  dlock_client_free(c);
  return rc ? 11 : 0;
}

/* Count-downs racing from several processes reach zero exactly once: one
 * "0" message, the key gone, the waiter released. */
TH_CASE(concurrent_count_downs_from_processes) {
  g_r = th_redis_new(0, NULL);
  freeReplyObject(th_cmd(g_r, "SET many %d", CD_PROCS * CD_EACH));
  redisContext *sub = th_redis_raw(g_r);
  struct timeval tv = {5, 0};
  redisSetTimeout(sub, tv);
  freeReplyObject(
      redisCommand(sub, "SUBSCRIBE redisson_countdownlatch__channel__{many}"));
  pid_t p[CD_PROCS];
  for (int i = 0; i < CD_PROCS; i++)
    p[i] = th_fork(count_down_worker, NULL);
  dlock_client *c = th_client(g_r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c, "many", &l));
  CHECK_OK(dlock_latch_timedawait(l, 20000));
  for (int i = 0; i < CD_PROCS; i++)
    CHECK_EQ(th_wait(p[i], 30000), 0);
  CHECK_EQ(th_cmd_int(g_r, "EXISTS many"), 0);
  redisReply *x = read_msg(sub);
  CHECK_STR(x->element[2]->str, "0");
  freeReplyObject(x);
  /* No second "0": the next message is the PING's reply. */
  redisAppendCommand(sub, "PING");
  x = NULL;
  CHECK(redisGetReply(sub, (void **)&x) == REDIS_OK && x);
  CHECK(x->type == REDIS_REPLY_ARRAY && x->elements >= 1);
  CHECK_STR(x->element[0]->str, "pong");
  freeReplyObject(x);
  redisFree(sub);
  dlock_latch_free(l);
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

static void *waiter_main(void *arg) {
  waiter *w = arg;
  dlock_latch *l;
  w->rc = dlock_latch_new(w->c, w->name, &l);
  if (w->rc == 0) {
    w->rc = dlock_latch_timedawait(l, w->wait_ms);
    snprintf(w->msg, sizeof w->msg, "%s", dlock_last_error());
    dlock_latch_free(l);
  }
  w->done_at = th_now_ms();
  return NULL;
}

TH_CASE(count_down_wakes_all_threads_before_recheck) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c2, "cd", &l));
  CHECK_OK(dlock_latch_init(l, 1));
  enum { NW = 3 };
  waiter w[NW];
  pthread_t t[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (waiter){c, "cd", 20000, -100, 0, ""};
    pthread_create(&t[i], NULL, waiter_main, &w[i]);
  }
  th_wait_numsub(r, "redisson_countdownlatch__channel__{cd}", 1, 10000);
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_latch_count_down(l));
  for (int i = 0; i < NW; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(w[i].rc == 0, "waiter %d: %s %s", i, dlock_err_name(w[i].rc),
              w[i].msg);
    long long lat = w[i].done_at - t0;
    printf("waiter %d woke %lld ms after the count-down\n", i, lat);
    CHECK_MSG(lat < 800, "woke %lld ms after (re-check, not pub/sub)", lat);
  }
  dlock_latch_free(l);
  dlock_client_free(c);
  dlock_client_free(c2);
}

TH_CASE(pubsub_killed_while_waiting) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c2, "pk", &l));
  for (int round = 0; round < 2; round++) {
    CHECK_OK(dlock_latch_init(l, 1));
    waiter w = {c, "pk", 20000, -100, 0, ""};
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    th_wait_numsub(r, "redisson_countdownlatch__channel__{pk}", 1, 10000);
    long long killed = th_cmd_int(r, "CLIENT KILL TYPE pubsub");
    CHECK_MSG(killed >= 1, "killed %lld subscriber connections", killed);
    if (round == 1) /* after the resubscribe; round 0: while nobody listens */
      th_wait_numsub(r, "redisson_countdownlatch__channel__{pk}", 1, 10000);
    CHECK_OK(dlock_latch_count_down(l));
    pthread_join(t, NULL);
    CHECK_MSG(w.rc == 0, "round %d waiter: %s %s", round, dlock_err_name(w.rc),
              w.msg);
  }
  dlock_latch_free(l);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* A latch opened without a message (a raw DEL) is found by the periodic
 * re-check. */
TH_CASE(recheck_without_message) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  freeReplyObject(th_cmd(r, "SET rc 2"));
  waiter w = {c, "rc", 10000, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_countdownlatch__channel__{rc}", 1, 10000);
  th_sleep_ms(100);
  int64_t t0 = th_now_ms();
  freeReplyObject(th_cmd(r, "DEL rc"));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  printf("found %lld ms after the silent DEL\n", (long long)(w.done_at - t0));
  dlock_client_free(c);
}

/* A budget too large to add to the clock waits like "forever" (no signed
 * overflow: UBSan in the ASan build checks). */
TH_CASE(huge_budget_is_forever) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *c2 = th_client(r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c2, "hb", &l));
  CHECK_OK(dlock_latch_init(l, 1));
  waiter w = {c, "hb", LLONG_MAX, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_countdownlatch__channel__{hb}", 1, 10000);
  th_sleep_ms(50);
  CHECK_OK(dlock_latch_count_down(l));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  dlock_latch_free(l);
  dlock_client_free(c);
  dlock_client_free(c2);
}

/* A Redisson client's countDown (DECR, DEL at zero, PUBLISH "0" on the
 * latch channel), sent raw, wakes a dlock waiter through pub/sub. */
TH_CASE(redisson_count_down_wakes_waiter) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  freeReplyObject(th_cmd(r, "SET rd 1"));
  waiter w = {c, "rd", 20000, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_countdownlatch__channel__{rd}", 1, 10000);
  th_sleep_ms(50);
  int64_t t0 = th_now_ms();
  freeReplyObject(
      th_cmd(r, "EVAL %s 2 rd redisson_countdownlatch__channel__{rd} 0 PUBLISH",
             "local v = redis.call('decr', KEYS[1]); if v <= 0 then "
             "redis.call('del', KEYS[1]) end; if v == 0 then "
             "redis.call(ARGV[2], KEYS[2], ARGV[1]) end;"));
  pthread_join(t, NULL);
  CHECK_MSG(w.rc == 0, "waiter: %s %s", dlock_err_name(w.rc), w.msg);
  long long lat = w.done_at - t0;
  printf("woke %lld ms after the raw count-down\n", lat);
  CHECK_MSG(lat < 800, "woke %lld ms after (re-check, not pub/sub)", lat);
  dlock_client_free(c);
}

TH_CASE(cancel_waits) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c, "cw", &l));
  CHECK_OK(dlock_latch_init(l, 1));
  waiter w = {c, "cw", -1, -100, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  th_wait_numsub(r, "redisson_countdownlatch__channel__{cw}", 1, 10000);
  th_sleep_ms(50);
  CHECK_OK(dlock_client_cancel_waits(c));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  long long n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_EQ(n, 1);
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_timedawait(l, 1000));
  dlock_latch_free(l);
  dlock_client_free(c);
}

TH_MAIN()
