/* Expirable permits (dlock_permits, Redisson RPermitExpirableSemaphore
 * layout): acquire / release / update_lease / available / set, a permit
 * taken by one process and released by another by its id, permits written
 * by raw commands as Redisson's Java scripts write them, a SIGKILLed
 * holder's permit back within its lease, the watchdog keeping a permit
 * past its lease (and letting it go with its holder), waiters woken by a
 * release; and under faults (issue 38: a late acquisition is no permit, a
 * release or an update whose outcome is unknown, renewals with replicas
 * that stopped). Real redis-server processes only; faults by the fault
 * proxy (tests/faultproxy) and SIGSTOP. */
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faultproxy.h"
#include "th.h"

static th_redis *g_r;

static dlock_permits *open_permits(dlock_client *c, const char *name) {
  dlock_permits *p = NULL;
  CHECK_OK(dlock_permits_new(c, name, &p));
  return p;
}

static long long avail(dlock_permits *p) {
  long long n = -99;
  CHECK_OK(dlock_permits_available(p, &n));
  return n;
}

/* The 16 raw bytes of a hex id. */
static void raw_of(const char *hex, unsigned char raw[16]) {
  for (size_t i = 0; i < 16; i++) {
    unsigned v = 0;
    CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
    raw[i] = (unsigned char)v;
  }
}

/* ZSCORE of a raw id in the timeout set, -1 if absent. */
static long long zscore(const char *set, const char *hex) {
  unsigned char raw[16];
  raw_of(hex, raw);
  redisReply *r = th_cmd(g_r, "ZSCORE %s %b", set, raw, (size_t)16);
  CHECK(r);
  long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
  freeReplyObject(r);
  return v;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TH_CASE(acquire_release_update_available) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "pa");
  char id1[DLOCK_PERMIT_ID_LEN + 1], id2[DLOCK_PERMIT_ID_LEN + 1],
      id3[DLOCK_PERMIT_ID_LEN + 1];
  /* Not set: nothing to take. */
  dlock_permit *none = NULL;
  size_t nn = 9;
  CHECK_RC(dlock_permits_list(p, &none, &nn, NULL), 0);
  CHECK(none == NULL && nn == 0);
  CHECK_RC(dlock_permits_try_acquire(p, 10000, id1), DLOCK_EBUSY);
  CHECK_EQ(avail(p), 0);
  CHECK_OK(dlock_permits_try_set_permits(p, 2));
  CHECK_RC(dlock_permits_try_set_permits(p, 5), DLOCK_EBUSY);
  CHECK_EQ(avail(p), 2);
  int64_t t0 = wall_ms();
  CHECK_OK(dlock_permits_try_acquire(p, 60000, id1));
  CHECK_OK(dlock_permits_acquire(p, 1000, 60000, id2));
  CHECK_EQ(strlen(id1), DLOCK_PERMIT_ID_LEN);
  CHECK(strcmp(id1, id2) != 0);
  CHECK_RC(dlock_permits_try_acquire(p, 60000, id3), DLOCK_EBUSY);
  CHECK_RC(dlock_permits_acquire(p, 200, 60000, id3), DLOCK_ETIMEDOUT);
  CHECK_EQ(avail(p), 0);
  /* The layout: count key, {name}:timeout with raw ids scored by expiry. */
  CHECK_EQ(th_get_ll(g_r, "pa"), 0);
  CHECK_EQ(th_cmd_int(g_r, "ZCARD {pa}:timeout"), 2);
  long long e1 = zscore("{pa}:timeout", id1);
  CHECK_MSG(e1 >= t0 + 60000 && e1 <= wall_ms() + 60000, "expiry %lld", e1);
  dlock_permit *list = NULL;
  size_t n = 0;
  long long a = -1;
  CHECK_RC(dlock_permits_list(p, &list, &n, &a), 1);
  CHECK_EQ(n, 2);
  CHECK_EQ(a, 0);
  CHECK(strcmp(list[0].id, id1) == 0 || strcmp(list[1].id, id1) == 0);
  CHECK_EQ(list[0].expires_at_ms, zscore("{pa}:timeout", list[0].id));
  dlock_permits_list_free(list);

  /* update_lease: a short lease now; the permit comes back after it. */
  int64_t s = th_now_ms();
  CHECK_OK(dlock_permits_update_lease(p, id2, 300));
  CHECK(zscore("{pa}:timeout", id2) <= wall_ms() + 300);
  CHECK_OK(dlock_permits_acquire(p, 5000LL * th_timeout_mult(), 60000, id3));
  CHECK_MSG(th_now_ms() - s >= 290, "took %lld ms",
            (long long)(th_now_ms() - s));
  CHECK_RC(dlock_permits_release(p, id2), DLOCK_ELOST); /* reclaimed */
  CHECK_RC(dlock_permits_update_lease(p, id2, 1000), DLOCK_ELOST);

  CHECK_OK(dlock_permits_release(p, id1));
  CHECK_EQ(avail(p), 1);
  CHECK_RC(dlock_permits_release(p, id1), DLOCK_ELOST);
  CHECK_RC(dlock_permits_release(p, "xyz"), DLOCK_EINVAL);
  CHECK_EQ(zscore("{pa}:timeout", id1), -1);

  /* setPermits: the total becomes n, whatever is taken (id3 is). */
  CHECK_OK(dlock_permits_set_permits(p, 5));
  CHECK_EQ(avail(p), 4);
  CHECK_OK(dlock_permits_set_permits(p, 5));
  CHECK_EQ(avail(p), 4);
  CHECK_OK(dlock_permits_set_permits(p, 1));
  CHECK_EQ(avail(p), 0);
  CHECK_RC(dlock_permits_try_acquire(p, 1000, id1), DLOCK_EBUSY);
  CHECK_OK(dlock_permits_release(p, id3));
  CHECK_EQ(avail(p), 1);
  CHECK_RC(dlock_permits_set_permits(p, -1), DLOCK_EINVAL);
  /* A string that is no count is not listed as permits. */
  freeReplyObject(th_cmd(g_r, "SET notcount x"));
  dlock_permits *q = open_permits(c, "notcount");
  CHECK_RC(dlock_permits_list(q, &list, &n, NULL), DLOCK_EPROTO);
  dlock_permits_free(q);
  dlock_permits_free(p);
  dlock_client_free(c);
}

/* ---- one process takes, another releases --------------------------------*/

static int g_pipe[2];

static int release_worker(void *arg) {
  (void)arg;
  char id[DLOCK_PERMIT_ID_LEN + 1] = {0};
  if (read(g_pipe[0], id, DLOCK_PERMIT_ID_LEN) != DLOCK_PERMIT_ID_LEN)
    return 2;
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "px");
  int rc = dlock_permits_release(p, id);
  dlock_permits_free(p);
  dlock_client_free(c);
  return rc == 0 ? 0 : 3;
}

TH_CASE(permit_taken_by_one_process_released_by_another) {
  g_r = th_redis_new(0, NULL);
  CHECK(pipe(g_pipe) == 0);
  pid_t w = th_fork(release_worker, NULL);
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "px");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, 60000, id));
  CHECK_EQ(avail(p), 0);
  CHECK(write(g_pipe[1], id, DLOCK_PERMIT_ID_LEN) == DLOCK_PERMIT_ID_LEN);
  CHECK_EQ(th_wait(w, 30000), 0);
  CHECK_EQ(avail(p), 1);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_free(c);
}

/* ---- Redisson's layout, written by raw commands -------------------------*/

/* What Redisson's RPermitExpirableSemaphore.tryAcquire(1) script does with
 * a raw 16-byte id and an absolute expiry (no reclaim: none expired). */
static void java_acquire(const char *name, const unsigned char raw[16],
                         long long expiry) {
  redisReply *r = th_cmd(
      g_r,
      "EVAL %s 3 %s {%s}:timeout redisson_sc:{%s} 1 %lld %lld "
      "922337203685477 PUBLISH %b",
      "local value = redis.call('get', KEYS[1]); "
      "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then "
      "redis.call('decrby', KEYS[1], ARGV[1]); "
      "for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); "
      "end; return 'OK'; end; return nil;",
      name, name, name, expiry, (long long)wall_ms(), raw, (size_t)16);
  CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "OK") == 0);
  freeReplyObject(r);
}

/* Redisson's tryRelease(id) script: 1 released. */
static long long java_release(const char *name, const unsigned char raw[16]) {
  redisReply *r = th_cmd(
      g_r, "EVAL %s 3 %s redisson_sc:{%s} {%s}:timeout %b 1 %lld PUBLISH",
      "local expire = redis.call('zscore', KEYS[3], ARGV[1]);"
      "local removed = redis.call('zrem', KEYS[3], ARGV[1]);"
      "if tonumber(removed) ~= 1 then return 0; end;"
      "local value = redis.call('incrby', KEYS[1], ARGV[2]); "
      "redis.call(ARGV[4], KEYS[2], value); "
      "if tonumber(expire) <= tonumber(ARGV[3]) then return 0; end;"
      "return 1;",
      name, name, name, raw, (size_t)16, (long long)wall_ms());
  CHECK(r && r->type == REDIS_REPLY_INTEGER);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

TH_CASE(redisson_layout_permits_visible_and_releasable) {
  g_r = th_redis_new(0, NULL);
  freeReplyObject(th_cmd(g_r, "SET pj 4")); /* Java's trySetPermits(4) */
  const unsigned char a[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2,  3,  4,
                               5,    6,    7,    8,    9, 10, 11, 0xff};
  const unsigned char b[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                               0,    0,    0,    0,    0,    0,    0,    0};
  const unsigned char x[16] = {0xaa, 0xbb, 0, 1, 2, 3, 4, 5,
                               6,    7,    8, 9, 0, 0, 0, 0x11};
  java_acquire("pj", a, (long long)wall_ms() + 60000);
  java_acquire("pj", b, 922337203685477LL);        /* no lease */
  java_acquire("pj", x, (long long)wall_ms() - 1); /* already expired */
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "pj");
  dlock_permit *list = NULL;
  size_t n = 0;
  CHECK_RC(dlock_permits_list(p, &list, &n, NULL), 1);
  CHECK_EQ(n, 3);
  /* Earliest expiry first: x (expired), a, then b (never). */
  CHECK_STR(list[0].id, "aabb0001020304050607080900000011");
  CHECK_STR(list[1].id, "deadbeef0102030405060708090a0bff");
  CHECK_STR(list[2].id, "0123456789abcdef0000000000000000");
  CHECK_EQ(list[2].expires_at_ms, -1);
  dlock_permits_list_free(list);
  /* The expired Java permit is reclaimed by the C side's next call. */
  CHECK_EQ(avail(p), 2);
  CHECK_EQ(th_cmd_int(g_r, "ZCARD {pj}:timeout"), 2);
  /* The C side releases a Java permit by its hex id (either case). */
  CHECK_OK(dlock_permits_release(p, "DEADBEEF0102030405060708090A0BFF"));
  CHECK_EQ(avail(p), 3);
  CHECK_OK(
      dlock_permits_update_lease(p, "0123456789abcdef0000000000000000", 60000));
  /* A C permit is released by Java's script with its raw id. */
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, 60000, id));
  unsigned char raw[16];
  raw_of(id, raw);
  CHECK_EQ(avail(p), 2);
  CHECK_EQ(java_release("pj", raw), 1);
  CHECK_EQ(avail(p), 3);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_free(c);
}

/* ---- a dead holder ------------------------------------------------------*/

static long long g_lease;

/* Takes a permit (lease g_lease; <= 0 the watchdog), says so, sleeps. */
static int holder_worker(void *arg) {
  (void)arg;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = 1500;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_permits *p = open_permits(c, "pk");
  char id[DLOCK_PERMIT_ID_LEN + 1];
  if (dlock_permits_try_acquire(p, g_lease, id) != 0)
    return 2;
  if (write(g_pipe[1], id, DLOCK_PERMIT_ID_LEN) != DLOCK_PERMIT_ID_LEN)
    return 3;
  for (int i = 0; i < 600; i++)
    th_sleep_ms(100);
  return 4;
}

/* A holder (lease `lease`, watchdog when <= 0) is SIGKILLed; its permit
 * must come back `back_ms` after its acquisition, not much earlier nor
 * later, to a waiter in this process. */
static void killed_holder(long long lease, long long back_ms) {
  g_r = th_redis_new(0, NULL);
  freeReplyObject(th_cmd(g_r, "SET pk 1"));
  CHECK(pipe(g_pipe) == 0);
  g_lease = lease;
  pid_t w = th_fork(holder_worker, NULL);
  char id[DLOCK_PERMIT_ID_LEN + 1] = {0};
  CHECK_EQ(read(g_pipe[0], id, DLOCK_PERMIT_ID_LEN), DLOCK_PERMIT_ID_LEN);
  int64_t taken = th_now_ms(); /* at most this late */
  long long exp = zscore("{pk}:timeout", id);
  CHECK_MSG(exp > 0, "no permit %s", id);
  CHECK_EQ(kill(w, SIGKILL), 0);
  CHECK_EQ(th_wait(w, 10000), -SIGKILL);
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "pk");
  char mine[DLOCK_PERMIT_ID_LEN + 1];
  long long slack = 2000LL * th_timeout_mult();
  CHECK_OK(dlock_permits_acquire(p, back_ms + slack, 60000, mine));
  int64_t got = th_now_ms();
  CHECK_MSG(wall_ms() >= exp, "taken at %lld before the expiry %lld",
            (long long)wall_ms(), exp);
  CHECK_MSG(got - taken <= back_ms + slack, "came back after %lld ms",
            (long long)(got - taken));
  CHECK_EQ(zscore("{pk}:timeout", id), -1);
  CHECK_OK(dlock_permits_release(p, mine));
  dlock_permits_free(p);
  dlock_client_free(c);
}

TH_CASE_T(killed_holder_permit_back_within_lease, 120, "slow") {
  killed_holder(1500, 1500);
}

TH_CASE_T(killed_watchdog_holder_permit_back_after_watchdog_timeout, 120,
          "slow") {
  killed_holder(-1, 1500);
}

TH_CASE_T(watchdog_keeps_permit_past_lease, 120, "slow") {
  g_r = th_redis_new(0, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = 1500;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_client *c2 = th_client(g_r);
  dlock_permits *p = open_permits(c, "pw");
  dlock_permits *p2 = open_permits(c2, "pw");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  long long first = zscore("{pw}:timeout", id);
  /* Three leases: without renewal the permit would be reclaimed. */
  int64_t until = th_now_ms() + 4500;
  while (th_now_ms() < until) {
    CHECK_RC(dlock_permits_try_acquire(p2, 60000, other), DLOCK_EBUSY);
    th_sleep_ms(100);
  }
  long long now_exp = zscore("{pw}:timeout", id);
  CHECK_MSG(now_exp > first && now_exp > wall_ms(), "expiry %lld (first %lld)",
            now_exp, first);
  /* Moved to a fixed lease, it is no longer renewed. */
  CHECK_OK(dlock_permits_update_lease(p, id, 400));
  CHECK_OK(dlock_permits_acquire(p2, 3000LL * th_timeout_mult(), 60000, other));
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  CHECK_OK(dlock_permits_release(p2, other));
  /* A watchdog permit released is gone for good. */
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  CHECK_OK(dlock_permits_release(p, id));
  CHECK_EQ(avail(p2), 1);
  dlock_permits_free(p);
  dlock_permits_free(p2);
  dlock_client_free(c);
  dlock_client_free(c2);
}

static atomic_llong g_lost_at; /* th_now_ms() of the on_lock_lost call */

static void on_lost(const char *name, void *arg) {
  (void)arg;
  if (strcmp(name, "pl") == 0)
    atomic_store(&g_lost_at, th_now_ms());
}

/* Redis stops answering (SIGSTOP) while a watchdog permit is held: the
 * renewals fail, and the permit is reported lost once its lease may have
 * run out on the server -- not before (the server cannot expire it
 * earlier), and not much later (the local deadline, not the end of the
 * retries, decides). */
TH_CASE_T(watchdog_permit_lost_when_redis_stops_answering, 120, "slow") {
  g_r = th_redis_new(0, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.watchdog_timeout_ms = 1500;
  cfg.command_timeout_ms = 300;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(g_r, &cfg);
  dlock_permits *p = open_permits(c, "pl");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  th_redis_pause(g_r);
  int64_t limit = t0 + 1500 + 3000LL * th_timeout_mult();
  while (atomic_load(&g_lost_at) == 0 && th_now_ms() < limit)
    th_sleep_ms(10);
  long long at = atomic_load(&g_lost_at);
  th_redis_resume(g_r);
  CHECK_MSG(at > 0, "no loss reported within %lld ms", (long long)(limit - t0));
  /* The acquisition was sent after t0: its local deadline is at least the
   * lease - its margin (17 ms) after t0. */
  CHECK_MSG(at - t0 >= 1400,
            "reported lost %lld ms after the acquisition (lease 1500)",
            (long long)(at - t0));
  /* The permit is no longer renewed: it expires and another takes it. */
  dlock_client *c2 = th_client(g_r);
  dlock_permits *p2 = open_permits(c2, "pl");
  char other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_acquire(p2, 5000LL * th_timeout_mult(), 60000, other));
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  CHECK_OK(dlock_permits_release(p2, other));
  dlock_permits_free(p2);
  dlock_client_free(c2);
  dlock_permits_free(p);
  dlock_client_free(c);
}

/* ---- waiters ------------------------------------------------------------*/

typedef struct waiter {
  dlock_permits *p;
  int rc;
  int64_t done_at;
  char id[DLOCK_PERMIT_ID_LEN + 1];
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  w->rc = dlock_permits_acquire(w->p, 20000, 60000, w->id);
  w->done_at = th_now_ms();
  return NULL;
}

TH_CASE(waiters_woken_on_release) {
  g_r = th_redis_new(0, NULL);
  dlock_client *c = th_client(g_r);
  dlock_permits *p = open_permits(c, "pq");
  CHECK_OK(dlock_permits_try_set_permits(p, 2));
  char a[DLOCK_PERMIT_ID_LEN + 1], b[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, 60000, a));
  CHECK_OK(dlock_permits_try_acquire(p, 60000, b));
  /* One waiter per client: two subscribers on the server = both waiters
   * failed their first attempt and sleep on the channel. */
  dlock_client *wc[2];
  waiter w[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    wc[i] = th_client(g_r);
    w[i] = (waiter){open_permits(wc[i], "pq"), -99, 0, {0}};
    CHECK(pthread_create(&t[i], NULL, wait_thread, &w[i]) == 0);
  }
  th_wait_numsub(g_r, "redisson_sc:{pq}", 2, 5000LL * th_timeout_mult());
  int64_t rel = th_now_ms();
  CHECK_OK(dlock_permits_release(p, a));
  /* A release wakes a waiter well before the once-a-second re-check. */
  int64_t until = rel + 5000LL * th_timeout_mult();
  while (th_now_ms() < until && th_cmd_int(g_r, "ZCARD {pq}:timeout") != 2)
    th_sleep_ms(5);
  int64_t took = th_now_ms() - rel;
  CHECK_MSG(took < 800, "the release woke no waiter for %lld ms",
            (long long)took);
  CHECK_OK(dlock_permits_release(p, b));
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    CHECK_OK(w[i].rc);
  }
  CHECK(strcmp(w[0].id, w[1].id) != 0);
  CHECK_EQ(avail(p), 0);
  CHECK_OK(dlock_permits_release(p, w[0].id));
  CHECK_OK(dlock_permits_release(p, w[1].id));
  CHECK_EQ(avail(p), 2);
  for (int i = 0; i < 2; i++) {
    dlock_permits_free(w[i].p);
    dlock_client_free(wc[i]);
  }
  dlock_permits_free(p);
  dlock_client_free(c);
}

/* ---- under faults (issue 38) --------------------------------------------*/

static atomic_int g_lost_n;

static atomic_llong g_first_lost_at; /* th_now_ms() of its first call */

static void count_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  long long none = 0;
  atomic_compare_exchange_strong(&g_first_lost_at, &none,
                                 (long long)th_now_ms());
  atomic_fetch_add(&g_lost_n, 1);
}

/* A client of g_r through the fault proxy fp. */
static dlock_client *proxied(fp_proxy *fp, int cmd_ms, int retries, int wd_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(fp);
  cfg.command_timeout_ms = cmd_ms;
  cfg.retry_attempts = retries;
  cfg.retry_interval_ms = 100;
  if (wd_ms > 0)
    cfg.watchdog_timeout_ms = wd_ms;
  cfg.on_lock_lost = count_lost;
  return th_client_cfg(g_r, &cfg);
}

/* Issue 38.5: try_acquire(lease 500) whose reply took 1.5 s returned OK;
 * another client then took the only permit too (the first one's lease had
 * run out on the server), and the first one's release said ELOST. The
 * lease counts from the send: an answer that comes after send + lease -
 * margin is no permit -- DLOCK_ELOST, the permit given back at once. */
TH_CASE(late_acquire_reply_is_no_permit) {
  g_r = th_redis_new(1, NULL);
  fp_proxy *fp = fp_new(NULL, g_r->port);
  dlock_client *a = proxied(fp, (int)(5000 * th_timeout_mult()), 0, 0);
  dlock_client *b = th_client(g_r);
  dlock_permits *pa = open_permits(a, "late"), *pb = open_permits(b, "late");
  CHECK_OK(dlock_permits_try_set_permits(pb, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  fp_arm(fp, "late", FP_DELAY, 1500);
  int64_t t0 = th_now_ms();
  int rc = dlock_permits_try_acquire(pa, 500, id);
  printf("try_acquire(lease 500) answered after %lld ms: %s: %s\n",
         (long long)(th_now_ms() - t0), dlock_err_name(rc), dlock_last_error());
  CHECK_EQ(fp_fired(fp), 1);
  CHECK_RC(rc, DLOCK_ELOST);
  CHECK_MSG(strstr(dlock_last_error(), "lease"), "%s", dlock_last_error());
  CHECK_STR(id, "");
  /* Given back: the other client takes the only permit, and no permit of
   * the late call is left in the set. */
  CHECK_EQ(avail(pb), 1);
  CHECK_OK(dlock_permits_try_acquire(pb, 60000, other));
  CHECK_EQ(th_cmd_int(g_r, "ZCARD {late}:timeout"), 1);
  CHECK_OK(dlock_permits_release(pb, other));
  dlock_permits_free(pa);
  dlock_permits_free(pb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Found by reading (issue 38): a release whose reply was lost
 * (its reply came after the command timeout, DLOCK_ECONN: the policy
 * allows no retry) had run; the caller's retry
 * then answered DLOCK_ELOST. As an unlock's (docs/errors.md, "Unlock: the
 * caller may retry"): a release that may have run before and finds the
 * permit gone means released. */
TH_CASE(release_retried_after_econn_is_released) {
  g_r = th_redis_new(1, NULL);
  fp_proxy *fp = fp_new(NULL, g_r->port);
  int cmd_ms = (int)(500 * th_timeout_mult());
  dlock_client *a = proxied(fp, cmd_ms, 0, 0);
  dlock_permits *p = open_permits(a, "rel");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, 60000, id));
  fp_arm(fp, "rel", FP_DELAY, 3 * cmd_ms);
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ECONN);
  CHECK_OK(fp_wait_fired(fp, 1, 5000 * th_timeout_mult()));
  CHECK_EQ(th_get_ll(g_r, "rel"), 1); /* the first copy released it */
  int rc = dlock_permits_release(p, id);
  printf("the caller's retry: %s (%s)\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_OK);
  CHECK_EQ(avail(p), 1); /* released once */
  /* A release that never ran before answers for itself. */
  CHECK_RC(dlock_permits_release(p, id), DLOCK_ELOST);
  dlock_permits_free(p);
  dlock_client_free(a);
}

/* Found by reading (issue 38): update_lease took a watchdog permit off the
 * renewals before its own renewal was confirmed; when that failed
 * (DLOCK_ECONN) the permit was renewed no more, and expired with no
 * on_lock_lost: another client took it. It stays renewed now until an
 * update is confirmed. */
TH_CASE_T(update_lease_econn_keeps_the_watchdog, 120, "slow") {
  g_r = th_redis_new(1, NULL);
  fp_proxy *fp = fp_new(NULL, g_r->port);
  int lease = (int)(1500 * th_timeout_mult());
  int cmd_ms = (int)(500 * th_timeout_mult());
  dlock_client *a = proxied(fp, cmd_ms, 0, lease);
  dlock_client *b = th_client(g_r);
  dlock_permits *p = open_permits(a, "upd"), *pb = open_permits(b, "upd");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  fp_arm(fp, "upd", FP_DELAY, 3 * cmd_ms);
  CHECK_RC(dlock_permits_update_lease(p, id, -1), DLOCK_ECONN);
  int64_t t0 = th_now_ms();
  while (th_now_ms() - t0 < 3 * lease) {
    int rc = dlock_permits_try_acquire(pb, 60000, other);
    CHECK_MSG(rc == DLOCK_EBUSY,
              "the other client's try_acquire %lld ms after the failed "
              "update: %s (on_lock_lost ran %d times)",
              (long long)(th_now_ms() - t0), dlock_err_name(rc),
              atomic_load(&g_lost_n));
    th_sleep_ms(50);
  }
  CHECK_EQ(atomic_load(&g_lost_n), 0);
  CHECK_OK(dlock_permits_release(p, id));
  dlock_permits_free(p);
  dlock_permits_free(pb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Found by reading (issue 38): permit renewals were sent with the WAIT of
 * sync_replicas; with the only replica stopped each renewal sat out
 * sync_timeout_ms (here longer than the lease) and the permit was
 * reported lost and then expired. Renewals never wait for replicas
 * (docs/guarantees.md). */
TH_CASE_T(permit_renewals_do_not_wait_for_replicas, 120, "slow") {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *rep = th_replica_new(m);
  int lease = (int)(1500 * th_timeout_mult());
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = m->tcp_url;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 2 * lease;
  cfg.command_timeout_ms = 3 * lease;
  cfg.watchdog_timeout_ms = lease;
  cfg.on_lock_lost = count_lost;
  dlock_client *a = th_client_cfg(m, &cfg);
  dlock_config ocfg;
  dlock_config_init(&ocfg);
  ocfg.sync_replicas = 0;
  dlock_client *b = th_client_cfg(m, &ocfg);
  dlock_permits *p = open_permits(a, "rs"), *pb = open_permits(b, "rs");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  th_redis_pause(rep);
  int64_t t0 = th_now_ms();
  while (th_now_ms() - t0 < 3 * lease) {
    int rc = dlock_permits_try_acquire(pb, 60000, other);
    CHECK_MSG(rc == DLOCK_EBUSY && atomic_load(&g_lost_n) == 0,
              "%lld ms after the replica stopped: the other client's "
              "try_acquire %s, on_lock_lost ran %d times",
              (long long)(th_now_ms() - t0), dlock_err_name(rc),
              atomic_load(&g_lost_n));
    th_sleep_ms(50);
  }
  th_redis_resume(rep);
  CHECK_OK(dlock_permits_release(p, id));
  dlock_permits_free(p);
  dlock_permits_free(pb);
  dlock_client_free(a);
  dlock_client_free(b);
}

TH_MAIN()

/* update_lease to a shorter fixed lease on a watchdog permit, whose reply
 * is held past the command timeout after it ran (DLOCK_ECONN): the server
 * has the shorter lease now. The holder must be told (on_lock_lost) at
 * that lease's local deadline -- when another client can take the permit.
 * The old code kept the watchdog's deadline (6 s) and heard of it only at
 * the next renewal, after the other client had taken the permit. */
TH_CASE_T(update_lease_econn_shorter_lease_told_first, 120, "slow") {
  g_r = th_redis_new(1, NULL);
  fp_proxy *fp = fp_new(NULL, g_r->port);
  int wd = (int)(6000 * th_timeout_mult());
  int cmd_ms = (int)(500 * th_timeout_mult());
  int shorter = (int)(600 * th_timeout_mult());
  atomic_store(&g_lost_n, 0);
  atomic_store(&g_first_lost_at, 0);
  dlock_client *a = proxied(fp, cmd_ms, 0, wd);
  dlock_client *b = th_client(g_r);
  dlock_permits *p = open_permits(a, "upd2"), *pb = open_permits(b, "upd2");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  fp_arm(fp, "upd2", FP_DELAY, 3 * cmd_ms);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_update_lease(p, id, shorter), DLOCK_ECONN);
  int64_t got = -1;
  while (th_now_ms() - t0 < 3LL * wd && got < 0) {
    int rc = dlock_permits_try_acquire(pb, 60000, other);
    if (rc == 0)
      got = th_now_ms();
    else
      CHECK_RC(rc, DLOCK_EBUSY);
    th_sleep_ms(10);
  }
  long long lost_at = atomic_load(&g_first_lost_at);
  printf("the other client took the permit %lld ms after the update; the "
         "holder was told %lld ms after it\n",
         (long long)(got - t0), lost_at ? lost_at - (long long)t0 : -1LL);
  CHECK_MSG(got > 0, "the other client never got the permit");
  /* Told at the shorter lease's local deadline (its margin is 8 ms x the
   * multiplier: how late the renewer thread runs on a loaded machine is
   * not judged against the other client), long before the next renewal
   * (a third of the watchdog lease after the acquisition) would have found
   * the permit gone -- when the old code told it, if at all. */
  CHECK_MSG(lost_at > 0 && lost_at - t0 < shorter + wd / 6,
            "told at %lld ms (the shorter lease: %d ms), the other client "
            "took it at %lld ms",
            lost_at ? lost_at - (long long)t0 : -1LL, shorter,
            (long long)(got - t0));
  CHECK_OK(dlock_permits_release(pb, other));
  dlock_permits_free(p);
  dlock_permits_free(pb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* Found by the simulator (seed 1796684453086): update_lease to a fixed
 * lease on a watchdog permit timed out with its request held on the wire
 * (DLOCK_ECONN, outcome unknown); the renewer's next renewal raised the
 * permit's local deadline (the old code lifted the lower one there); then
 * the held copy ran and set the fixed lease -- under the deadline the
 * holder counted on. Another client took the permit at the fixed lease's
 * end while the holder heard nothing until a renewal found it gone. An
 * update in doubt caps the deadline for good: the loss is told at the
 * fixed lease's local deadline, whatever renewals said since. */
TH_CASE_T(update_lease_in_doubt_caps_later_renewals, 120, "slow") {
  g_r = th_redis_new(1, NULL);
  fp_proxy *fp = fp_new(NULL, g_r->port);
  int m = th_timeout_mult();
  /* renewals at wd / 3 = 3 s; the held copy runs 0.8 s after the first,
   * the fixed lease ends 1.5 s before the second */
  int wd = 9000 * m, cmd_ms = 300 * m, fixed = 4500 * m, hold = 3800 * m;
  atomic_store(&g_lost_n, 0);
  atomic_store(&g_first_lost_at, 0);
  dlock_client *a = proxied(fp, cmd_ms, 0, wd);
  dlock_client *b = th_client(g_r);
  dlock_permits *p = open_permits(a, "upd3"), *pb = open_permits(b, "upd3");
  CHECK_OK(dlock_permits_try_set_permits(p, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1], other[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(p, -1, id));
  /* loads the update script: a held EVALSHA must find it */
  CHECK_OK(dlock_permits_update_lease(p, id, -1));
  /* the next EVALSHA naming upd3 is the update below: held, then run */
  fp_hold(fp, "EVALSHA", "upd3", hold, 1);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_permits_update_lease(p, id, fixed), DLOCK_ECONN);
  CHECK_MSG(fp_wait_fired(fp, 1, 4LL * wd) == 0 && fp_late_noscript(fp) == 0,
            "the held update never ran on the server");
  long long ran = th_now_ms() - t0;
  int64_t got = -1;
  while (th_now_ms() - t0 < 3LL * wd && got < 0) {
    int rc = dlock_permits_try_acquire(pb, 60000, other);
    if (rc == 0)
      got = th_now_ms();
    else
      CHECK_RC(rc, DLOCK_EBUSY);
    th_sleep_ms(10);
  }
  long long lost_at = atomic_load(&g_first_lost_at);
  printf("the held update ran %lld ms after its send; the other client took "
         "the permit at %lld ms; the holder was told at %lld ms (the fixed "
         "lease: %d ms, renewals every %d ms)\n",
         ran, (long long)(got - t0), lost_at ? lost_at - (long long)t0 : -1LL,
         fixed, wd / 3);
  CHECK_MSG(got > 0, "the other client never got the permit");
  /* Told at the fixed lease's local deadline -- a renewal ran at wd / 3
   * and raised the deadline the old code kept; it heard of the loss only
   * from the renewal after that (2 wd / 3), after the other client took
   * the permit. */
  CHECK_MSG(lost_at > 0 && lost_at - t0 < fixed + wd / 12,
            "told at %lld ms (the fixed lease: %d ms), the other client took "
            "it at %lld ms",
            lost_at ? lost_at - (long long)t0 : -1LL, fixed,
            (long long)(got - t0));
  CHECK_OK(dlock_permits_release(pb, other));
  dlock_permits_free(p);
  dlock_permits_free(pb);
  dlock_client_free(a);
  dlock_client_free(b);
}
