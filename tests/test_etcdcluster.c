/*
 * test_etcdcluster.c -- the etcd store on a real 3-member cluster (three
 * private etcd processes per case, tests/harness/th_etcd.h): what a CP
 * store gives that Redis replication cannot.
 *   - leader kill while held: one holder throughout, the session's
 *     keepalives resume through another member, nobody else acquires;
 *   - quorum loss: the holder is told at its local deadline, nobody
 *     acquires while the quorum is gone, a lease expires only after it is
 *     back, and then the lock is free again.
 * Tagged "slow etcd" (elections take seconds); SKIP (77) without etcd.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "th.h"
#include "th_etcd.h"

static _Atomic int g_lost_calls;
static _Atomic long long g_lost_at;
static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  atomic_store(&g_lost_at, (long long)th_now_ms());
  atomic_fetch_add(&g_lost_calls, 1);
}

static dlock_client *client(const char *url, int lease_ms, int lost) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.connect_timeout_ms = 500;
  cfg.command_timeout_ms = 1500 * th_timeout_mult();
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 200;
  if (lost)
    cfg.on_lock_lost = on_lost;
  return th_etcd_client(url, lease_ms, &cfg);
}

/* The members' endpoints with member `first` first: the client talks to it
 * until it fails. */
static const char *url_first(const dlc_etcd *m, int n, int first) {
  static char u[512];
  snprintf(u, sizeof u, "etcd://%s", m[first].ep);
  for (int i = 0; i < n; i++)
    if (i != first) {
      size_t l = strlen(u);
      snprintf(u + l, sizeof u - l, ",%s", m[i].ep);
    }
  return u;
}

TH_CASE_T(leader_kill_while_held_keeps_one_holder, 180, "slow etcd") {
  dlc_etcd *m = th_etcd_cluster(3);
  int leader = th_etcd_leader(m, 3, 20000 * th_timeout_mult());
  CHECK(leader >= 0);
  /* the holder talks to the leader: its connection dies with it. The lease
   * must outlast an election on this machine: make test-tsan at load saw
   * one take 3 s and more (votes rejected, terms 3..5), and with a 5 s
   * lease the other client got the lock 6.2 s after the kill -- so 5 s
   * times the build's multiplier. */
  int lease = 5000 * (int)th_timeout_mult();
  dlock_client *a = client(url_first(m, 3, leader), lease, 1);
  dlock_client *b = client(url_first(m, 3, (leader + 1) % 3), lease, 0);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(a, "ha", &ma));
  CHECK_OK(dlock_mutex_new(b, "ha", &mb));
  CHECK_OK(dlock_mutex_lock(ma));
  dlock_client_stats s0;
  CHECK_OK(dlock_client_stats(a, &s0));
  th_etcd_kill(&m[leader]);
  int64_t t0 = th_now_ms();
  int busy = 0, unreachable = 0;
  long long min_valid = 1LL << 40;
  /* nearly two leases long: the holder keeps the lock, nobody else gets it */
  while (th_now_ms() - t0 < 9 * lease / 5) {
    int rc = dlock_mutex_trylock(mb);
    CHECK_MSG(rc != 0, "a second holder %lld ms after the leader was killed",
              (long long)(th_now_ms() - t0));
    busy += rc == DLOCK_EBUSY;
    unreachable += rc == DLOCK_ECONN;
    long long v = 0;
    CHECK_OK(dlock_mutex_validity(ma, &v));
    if (v < min_valid)
      min_valid = v;
    th_sleep_ms(100);
  }
  CHECK_EQ(atomic_load(&g_lost_calls), 0);
  int nl = th_etcd_leader(m, 3, 20000 * th_timeout_mult());
  CHECK(nl >= 0 && nl != leader);
  dlock_client_stats s1;
  CHECK_OK(dlock_client_stats(a, &s1));
  long long v = 0;
  CHECK_OK(dlock_mutex_validity(ma, &v));
  printf("leader m%d killed; new leader m%d; holder kept the lock (validity "
         "never below %lld ms, now %lld ms; %llu keepalives since); B: %d "
         "busy, %d unreachable\n",
         leader + 1, nl + 1, min_valid, v,
         (unsigned long long)(s1.renewals_sent - s0.renewals_sent), busy,
         unreachable);
  CHECK(s1.renewals_sent > s0.renewals_sent + 3);
  CHECK(v > 1000);
  CHECK(busy > 0);
  CHECK_EQ(dlock_mutex_is_held(ma), 1);
  CHECK_OK(dlock_mutex_unlock(ma));
  CHECK_OK(dlock_mutex_timedlock(mb, 10000LL * th_timeout_mult(), -1));
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* B tries the lock in a loop while the quorum is gone: every try must
 * fail. */
static dlock_mutex *g_b_m;
static _Atomic int g_b_stop, g_b_tries, g_b_got;
static void *b_tries(void *arg) {
  (void)arg;
  while (!atomic_load(&g_b_stop)) {
    if (dlock_mutex_trylock(g_b_m) == 0)
      atomic_fetch_add(&g_b_got, 1);
    atomic_fetch_add(&g_b_tries, 1);
    th_sleep_ms(200);
  }
  return NULL;
}

/* A bare lease of ttl_s with a key under it, not kept alive (the harness's
 * own, through member i): its ID. */
static long long bare_lease(const dlc_etcd *m, int ttl_s, const char *key_b64) {
  char body[256], out[2048];
  snprintf(body, sizeof body, "{\"TTL\":%d}", ttl_s);
  CHECK_EQ(
      dlc_etcd_post(m->port, "/v3/lease/grant", body, out, sizeof out, 5000),
      200);
  const char *p = strstr(out, "\"ID\":\"");
  CHECK(p != NULL);
  long long id = atoll(p + 6);
  snprintf(body, sizeof body,
           "{\"key\":\"%s\",\"value\":\"eA==\",\"lease\":\"%lld\"}", key_b64,
           id);
  CHECK_EQ(dlc_etcd_post(m->port, "/v3/kv/put", body, out, sizeof out, 5000),
           200);
  return id;
}

TH_CASE_T(quorum_loss_tells_the_holder_and_lets_nobody_in, 240, "slow etcd") {
  dlc_etcd *m = th_etcd_cluster(3);
  CHECK(th_etcd_leader(m, 3, 20000 * th_timeout_mult()) >= 0);
  const char *url = th_etcd_url(m, 3, "");
  dlock_client *a = client(url, 4000, 1);
  dlock_client *b = client(url, 4000, 0);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(a, "q", &ma));
  CHECK_OK(dlock_mutex_new(b, "q", &mb));
  CHECK_OK(dlock_mutex_lock(ma));
  /* "bare/x" (YmFyZS94) under a 3 s lease nobody keeps alive */
  bare_lease(&m[0], 3, "YmFyZS94");
  long long v = 0;
  CHECK_OK(dlock_mutex_validity(ma, &v));
  g_b_m = mb;
  pthread_t bt;
  pthread_create(&bt, NULL, b_tries, NULL);
  int64_t t_kill = th_now_ms();
  th_etcd_kill(&m[1]);
  th_etcd_kill(&m[2]);
  /* no quorum: the holder (this thread) is told at its local deadline --
   * the last one its validity promised -- and B never gets in */
  long long deadline = t_kill + v;
  while (atomic_load(&g_lost_calls) == 0 &&
         th_now_ms() < t_kill + 30000LL * th_timeout_mult()) {
    long long left = 0;
    int64_t now = th_now_ms();
    if (dlock_mutex_validity(ma, &left) == 0 && left > 0)
      deadline = now + left;
    th_sleep_ms(2);
  }
  th_sleep_ms(3000); /* B keeps trying past the deadline */
  atomic_store(&g_b_stop, 1);
  pthread_join(bt, NULL);
  CHECK_EQ(atomic_load(&g_b_got), 0);
  CHECK_EQ(atomic_load(&g_lost_calls), 1);
  long long lost_at = atomic_load(&g_lost_at);
  printf("quorum lost; holder told %lld ms after (validity at the kill %lld "
         "ms, the last deadline it promised %lld ms after the kill: told "
         "%+lld ms from it); B refused %d times\n",
         lost_at - t_kill, v, deadline - t_kill, lost_at - deadline,
         atomic_load(&g_b_tries));
  /* told at its local deadline: not before, and no later than the lease
   * thread's look (under load, a few hundred ms) */
  CHECK_MSG(lost_at >= deadline - 10, "told %lld ms before its deadline",
            deadline - lost_at);
  CHECK_MSG(lost_at <= deadline + 500LL * th_timeout_mult(),
            "told %lld ms after its deadline", lost_at - deadline);
  long long valid = 0;
  CHECK_RC(dlock_mutex_validity(ma, &valid), DLOCK_ELOST);
  /* the bare lease is 3 s old and more: not expired without a quorum */
  CHECK_EQ(th_etcd_count(&m[0], 1, "bare/", 1), 1);
  th_etcd_restart(&m[1]);
  th_etcd_restart(&m[2]);
  CHECK(dlc_etcd_wait_ready(&m[0], 30000LL * th_timeout_mult()) == 0);
  int64_t t_back = th_now_ms();
  /* a new leader extends every lease (lessor.Promote): it is still there
   * right after the quorum is back, and expires later */
  CHECK_EQ(th_etcd_count(m, 3, "bare/", 0), 1);
  CHECK_OK(dlock_mutex_timedlock(mb, 30000LL * th_timeout_mult(), -1));
  printf("quorum back; B acquired %lld ms later\n",
         (long long)(th_now_ms() - t_back));
  int64_t end = th_now_ms() + 15000LL * th_timeout_mult();
  while (th_etcd_count(m, 3, "bare/", 0) != 0 && th_now_ms() < end)
    th_sleep_ms(100);
  CHECK_EQ(th_etcd_count(m, 3, "bare/", 0), 0);
  printf("the bare 3 s lease expired %lld ms after the quorum came back\n",
         (long long)(th_now_ms() - t_back));
  CHECK_RC(dlock_mutex_unlock(ma), DLOCK_ELOST);
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(a);
  dlock_client_free(b);
}

TH_MAIN()
