/*
 * test_renewal.c -- the renewal path does renewals and loss reports only,
 * and waits on nothing for long (issue 38, items 6 and 9, and the renewal
 * items found by reading): a master that swallows the client's info key
 * never costs a hold on another master; a connection cut while it is
 * being opened (the plain-or-TLS probe waits for an answer a plain Redis
 * never sends) holds no renewal, and no dlock_client_free; the first
 * renewal on a fresh server is no failure; a failed renewal is retried
 * within a quarter period by both clients; the WAIT behind a lock write
 * ends with the call's wait budget. Real redis-servers; faults by the
 * harness's proxies.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "th.h"
#include "th_cluster.h"
#include "th_drive.h"
#include "th_proxy.h"

static int64_t slow(void) { return th_timeout_mult(); }

static atomic_int g_lost;
static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  atomic_fetch_add(&g_lost, 1);
}

static atomic_int g_renew_failed, g_declines;
static void count_hook(void *arg, int level, const char *name,
                       const char *event, const char *msg) {
  (void)arg;
  (void)level;
  (void)name;
  if (strcmp(event, "decline") == 0) {
    atomic_fetch_add(&g_declines, 1);
    printf("decline: %s\n", msg);
  }
  if (strcmp(event, "renew_failed") == 0) {
    atomic_fetch_add(&g_renew_failed, 1);
    printf("renew_failed: %s\n", msg);
  }
}

/* The client's info key, "dlock_client:{<id>}". */
static void info_key(dlock_client *c, char *buf, size_t len) {
  snprintf(buf, len, "dlock_client:{%s}", dlock_client_id(c));
}

/* Polls (bounded) until key exists on r. */
static void wait_exists(th_redis *r, const char *key, int64_t ms) {
  int64_t end = th_now_ms() + ms * slow();
  while (th_cmd_int(r, "EXISTS %s", key) != 1) {
    CHECK_MSG(th_now_ms() < end, "%s never written", key);
    th_sleep_ms(10);
  }
}

/* Frees c and says how long it took (ms). */
static int64_t timed_free(dlock_client *c) {
  int64_t t0 = th_now_ms();
  dlock_client_free(c);
  return th_now_ms() - t0;
}

/* ---- 38.6: the info key's master unreachable ------------------------------
 */

/* Every node of cl announces the port of its own proxy (so clients reach
 * each master through it); waits until each node's CLUSTER SLOTS says so. */
static void announce_proxies(th_cluster *cl, th_proxy **px) {
  for (int i = 0; i < cl->n; i++) {
    int port = atoi(strrchr(th_proxy_url(px[i]), ':') + 1);
    redisReply *r =
        th_cmd(cl->node[i], "CONFIG SET cluster-announce-port %d", port);
    CHECK_MSG(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET: %s",
              r && r->str ? r->str : "no reply");
    freeReplyObject(r);
  }
  int64_t end = th_now_ms() + 30000 * slow();
  for (;;) {
    int real = 0;
    for (int i = 0; i < cl->n; i++) {
      redisReply *r = th_cmd(cl->node[i], "CLUSTER SLOTS");
      for (size_t s = 0; r && s < r->elements; s++) {
        long long p = r->element[s]->element[2]->element[1]->integer;
        for (int j = 0; j < cl->n; j++)
          real += p == cl->node[j]->port;
      }
      freeReplyObject(r);
    }
    if (real == 0)
      return;
    CHECK_MSG(th_now_ms() < end, "the nodes still announce their ports");
    th_sleep_ms(50);
  }
}

/* The index of the node whose proxy serves slot now (CLUSTER SLOTS names
 * the announced ports), or -1. */
static int proxied_master_of(th_cluster *cl, th_proxy **px, unsigned slot) {
  redisReply *r = th_cmd(cl->node[0], "CLUSTER SLOTS");
  int at = -1;
  for (size_t s = 0; r && s < r->elements && at < 0; s++) {
    redisReply *e = r->element[s];
    if (slot < e->element[0]->integer || slot > e->element[1]->integer)
      continue;
    long long p = e->element[2]->element[1]->integer;
    for (int j = 0; j < cl->n; j++)
      if (p == atoi(strrchr(th_proxy_url(px[j]), ':') + 1))
        at = j;
  }
  freeReplyObject(r);
  return at;
}

/* Issue 38.6: a cluster (3 masters: redis-cli's least); the master of the
 * client's info key
 * becomes unreachable (connects hang, open connections go silent) while
 * the client holds a watchdog lock on the OTHER master. At 7d6b26d the
 * watchdog thread wrote the info key itself, sat in the connect
 * (connect_timeout_ms, 10 s) and the healthy lock was reported lost at
 * its deadline (7.9 s seen). The renewals must go on for three leases;
 * and dlock_client_free must not wait for the thread in the connect. */
TH_CASE_T(info_master_unreachable_renewals_go_on, 240, "cluster slow") {
  th_cluster *cl = th_cluster_new(3, 0, 5000);
  th_proxy *px[3];
  for (int i = 0; i < 3; i++)
    px[i] = th_proxy_new(cl->node[i]->port);
  announce_proxies(cl, px);
  char url[256];
  snprintf(url, sizeof url,
           "redis-cluster://127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s",
           strrchr(th_proxy_url(px[0]), ':') + 1,
           strrchr(th_proxy_url(px[1]), ':') + 1,
           strrchr(th_proxy_url(px[2]), ':') + 1);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.watchdog_timeout_ms = (int)(3000 * slow());
  cfg.connect_timeout_ms = 10000;
  cfg.retry_interval_ms = 100;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(cl->node[0], &cfg);
  char key[128], name[64];
  info_key(c, key, sizeof key);
  int im = proxied_master_of(cl, px, th_cluster_slot(cl, key));
  CHECK(im >= 0 && im < 3);
  int n = 0, hm;
  do {
    snprintf(name, sizeof name, "healthy-%d", n++);
    hm = proxied_master_of(cl, px, th_cluster_slot(cl, name));
  } while (hm == im);
  printf("info key on node %d, lock '%s' on node %d\n", im, name, hm);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, name, &m));
  CHECK_OK(dlock_mutex_lock(m));
  wait_exists(cl->node[im], key, 5000);
  th_proxy_unreachable(px[im], 1);
  int64_t cut = th_now_ms(), lease = cfg.watchdog_timeout_ms;
  while (th_now_ms() - cut < 3 * lease && atomic_load(&g_lost) == 0)
    th_sleep_ms(20);
  long long pttl = th_cmd_int(cl->node[hm], "PTTL %s", name);
  printf("after %lld ms: lost %d, the lock's PTTL %lld ms (lease %lld)\n",
         (long long)(th_now_ms() - cut), atomic_load(&g_lost), pttl,
         (long long)lease);
  CHECK_MSG(atomic_load(&g_lost) == 0,
            "the lock on the healthy master was reported lost %lld ms after "
            "the info key's master became unreachable",
            (long long)(th_now_ms() - cut));
  CHECK_MSG(pttl > lease / 3, "the healthy lock is not renewed: PTTL %lld",
            pttl);
  int64_t took = timed_free(c);
  printf("dlock_client_free took %lld ms\n", (long long)took);
  CHECK_MSG(took < 1000 * slow(), "dlock_client_free took %lld ms",
            (long long)took);
  dlock_mutex_free(m);
  th_proxy_unreachable(px[im], 0);
}

/* ---- 38.9: a connection cut while it is being opened ---------------------
 */

/* A client through the fault proxy p: the watchdog timeout wd_ms, the
 * command and connect timeouts cmd_ms and 10 s. */
static dlock_client *proxied(fp_proxy *p, int wd_ms, int cmd_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.watchdog_timeout_ms = wd_ms;
  cfg.command_timeout_ms = cmd_ms;
  cfg.connect_timeout_ms = 10000;
  cfg.retry_interval_ms = 100;
  cfg.log_fn = count_hook;
  cfg.log_level = DLOCK_LOG_WARN;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  CHECK_MSG(rc == 0, "dlock_client_new: %s", dlock_last_error());
  return c;
}

/* Issue 38.9: CLIENT KILL of the background connections, and the first
 * one opened again is cut in its handshake (half a reply, then closed):
 * the client then probes whether the port speaks TLS -- a ClientHello, to
 * which a plain Redis (and the proxy) never answers. At 7d6b26d the
 * watchdog thread opened that connection (for the info key or a renewal)
 * and sat in the probe for connect_timeout_ms (10 s): renewals stalled and
 * the hold was lost at its deadline. Whichever background thread opens it
 * now, the renewals go on for three leases. */
TH_CASE_T(connection_cut_while_opened_never_stalls_renewals, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  int lease = (int)(3000 * slow());
  dlock_client *c = proxied(p, lease, 3000);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "probed", &m));
  CHECK_OK(dlock_mutex_lock(m));
  char key[128];
  info_key(c, key, sizeof key);
  wait_exists(r, key, 5000); /* the background connections are open */
  fp_arm(p, "PING", FP_CUT, 0);
  freeReplyObject(th_cmd(r, "CLIENT KILL TYPE normal"));
  int64_t cut = th_now_ms();
  while (th_now_ms() - cut < 3 * lease && atomic_load(&g_lost) == 0)
    th_sleep_ms(20);
  printf("fault fired %d time(s); lost %d after %lld ms; PTTL %lld\n",
         fp_fired(p), atomic_load(&g_lost), (long long)(th_now_ms() - cut),
         th_cmd_int(r, "PTTL probed"));
  CHECK_MSG(fp_fired(p) >= 1, "no connection was opened again");
  CHECK_MSG(atomic_load(&g_lost) == 0,
            "the hold was lost %lld ms after the cut: renewals stalled",
            (long long)(th_now_ms() - cut));
  CHECK_MSG(th_cmd_int(r, "PTTL probed") > lease / 3, "not renewed");
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Issue 38.9: dlock_client_free blocked ~9.7 s while a background thread
 * sat in the plain-or-TLS probe of a connection cut during its handshake
 * (connect_timeout_ms 10 s, a long lease: every wait of the renewal path
 * may be long). It returns at once now, whatever the thread waits for. */
TH_CASE_T(client_free_does_not_wait_for_a_probe, 120, "") {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_client *c = proxied(p, 60000, 10000);
  fp_arm(p, "PING", FP_CUT, 0); /* the first background connection */
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "freed", &m));
  CHECK_OK(dlock_mutex_lock(m)); /* the info key's write opens one */
  CHECK_OK(fp_wait_fired(p, 1, 5000 * slow()));
  th_sleep_ms(200); /* in the probe now */
  int64_t took = timed_free(c);
  printf("dlock_client_free took %lld ms\n", (long long)took);
  CHECK_MSG(took < 1000 * slow(), "dlock_client_free took %lld ms",
            (long long)took);
  dlock_mutex_free(m);
}

/* ---- found by reading: declines were sent on the renewal path -----------
 */

typedef struct waiter {
  dlock_client *c;
  int rc;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(w->c, "gd", &m));
  w->rc = dlock_mutex_lock(m); /* until dlock_client_cancel_waits */
  if (w->rc == 0)
    CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  return NULL;
}

/* A grant that reached no wait of the client (its wait ended, its cancel
 * lost) is given back with the decline script. At 7d6b26d the watchdog
 * thread sent it, through the router, with the WAIT of sync_replicas: with
 * the only replica stopped it sat out sync_timeout_ms (here longer than
 * the lease) and a watchdog hold of the client was lost. The errand
 * thread sends it now, without WAIT. */
TH_CASE_T(decline_never_holds_a_renewal, 120, "slow") {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *rep = th_replica_new(m);
  int lease = (int)(1500 * slow());
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = m->tcp_url;
  cfg.watchdog_timeout_ms = lease;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 4 * lease;
  cfg.command_timeout_ms = 5 * lease;
  cfg.on_lock_lost = on_lost;
  cfg.log_fn = count_hook;
  cfg.log_level = DLOCK_LOG_DEBUG;
  dlock_client *c = th_client_cfg(m, &cfg);
  dlock_config ocfg;
  dlock_config_init(&ocfg);
  ocfg.sync_replicas = 0;
  dlock_client *other = th_client_cfg(m, &ocfg);
  dlock_mutex *kept, *held;
  CHECK_OK(dlock_mutex_new(c, "kept", &kept));
  CHECK_OK(dlock_mutex_lock(kept));
  CHECK_OK(dlock_mutex_new(other, "gd", &held));
  CHECK_OK(dlock_mutex_timedlock(held, 0, 60000));
  /* A thread of c waits for gd: c listens on its grant channel. */
  waiter w = {c, 1};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
  char ch[128];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{gd}:%s", dlock_client_id(c));
  th_wait_numsub(m, ch, 1, 5000 * slow());
  th_redis_pause(rep);
  /* A grant for a thread of c that waits for nothing: declined. */
  freeReplyObject(th_cmd(m, "PUBLISH %s 987654|0123456789abcdef", ch));
  int64_t t0 = th_now_ms();
  while (th_now_ms() - t0 < 3 * lease && atomic_load(&g_lost) == 0)
    th_sleep_ms(20);
  printf("lost %d after %lld ms; 'kept' PTTL %lld (lease %d)\n",
         atomic_load(&g_lost), (long long)(th_now_ms() - t0),
         th_cmd_int(m, "PTTL kept"), lease);
  CHECK_MSG(atomic_load(&g_lost) == 0,
            "'kept' was lost %lld ms after the grant: the decline held the "
            "renewals",
            (long long)(th_now_ms() - t0));
  CHECK_MSG(atomic_load(&g_declines) == 1, "%d declines sent",
            atomic_load(&g_declines));
  th_redis_resume(rep);
  dlock_client_cancel_waits(c);
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  CHECK_OK(dlock_mutex_unlock(kept));
  CHECK_OK(dlock_mutex_unlock(held));
  dlock_mutex_free(kept);
  dlock_mutex_free(held);
  dlock_client_free(c);
  dlock_client_free(other);
}

/* ---- found by reading: NOSCRIPT is not a failed renewal -------------------
 */

/* The first renewal on a fresh server (and after SCRIPT FLUSH) found the
 * renew script missing: the blocking watchdog logged renew_failed "(no
 * answer)", counted it in renewals_failed and retried 250 ms later. It is
 * sent again as EVAL at once now, no failure. Run by both clients. */
static void noscript_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.watchdog_timeout_ms = (int)(1500 * slow());
  cfg.log_fn = count_hook;
  cfg.log_level = DLOCK_LOG_WARN;
  th_drive *d = th_drive_new(kind, &cfg);
  CHECK_OK(th_drive_lock(d, "fresh", 1, 0, -1));
  for (int round = 0; round < 2; round++) {
    if (round == 1)
      freeReplyObject(th_cmd(r, "SCRIPT FLUSH"));
    dlock_client_stats st;
    CHECK_OK(th_drive_stats(d, &st));
    unsigned long long sent0 = st.renewals_sent;
    int64_t end = th_now_ms() + 10000 * slow();
    while (st.renewals_sent < sent0 + 2 && th_now_ms() < end) {
      th_drive_pump(d, 20);
      CHECK_OK(th_drive_stats(d, &st));
    }
    printf("%s, %s: renewals sent %llu, failed %llu, renew_failed events %d\n",
           th_drive_kind(d), round ? "after SCRIPT FLUSH" : "fresh server",
           (unsigned long long)st.renewals_sent,
           (unsigned long long)st.renewals_failed,
           atomic_load(&g_renew_failed));
    CHECK_MSG(st.renewals_sent >= sent0 + 2, "no renewals");
    CHECK_EQ(st.renewals_failed, 0);
    CHECK_EQ(atomic_load(&g_renew_failed), 0);
  }
  CHECK_EQ(th_drive_lost_count(d), 0);
  CHECK_OK(th_drive_unlock(d, "fresh", 1));
  th_drive_free(d);
}

TH_CASE_T(first_renewal_after_script_flush_is_no_failure_blocking, 120,
          "slow") {
  noscript_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(first_renewal_after_script_flush_is_no_failure_async, 120, "slow") {
  noscript_body(TH_DRIVE_ASYNC);
}

/* ---- D3: a failed renewal is retried within a quarter period --------------
 */

/* The server is gone (connections refused at once): a renewal fails fast,
 * and the client tries again min(1 s, period / 4) later -- the blocking
 * watchdog did, the event-loop client waited for its next tick, a whole
 * period (2 tries before a 30 s lease's deadline instead of ~19). Counted
 * over one period after the first failed try: at least 3 tries. Both
 * clients. */
static void retry_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.watchdog_timeout_ms = (int)(4000 * slow());
  cfg.retry_attempts = 0;
  th_drive *d = th_drive_new(kind, &cfg);
  int64_t period = cfg.watchdog_timeout_ms / 3;
  CHECK_OK(th_drive_lock(d, "retried", 1, 0, -1));
  dlock_client_stats st;
  CHECK_OK(th_drive_stats(d, &st));
  unsigned long long s0 = st.renewals_sent;
  int64_t end = th_now_ms() + 3 * period;
  while (st.renewals_sent == s0 && th_now_ms() < end) { /* one renewal */
    th_drive_pump(d, 10);
    CHECK_OK(th_drive_stats(d, &st));
  }
  CHECK_MSG(st.renewals_sent > s0, "no renewal");
  th_redis_kill(r);
  s0 = st.renewals_sent;
  end = th_now_ms() + 3 * period;
  while (st.renewals_sent == s0 && th_now_ms() < end) { /* the first try */
    th_drive_pump(d, 10);
    CHECK_OK(th_drive_stats(d, &st));
  }
  CHECK_MSG(st.renewals_sent > s0, "no renewal after the kill");
  s0 = st.renewals_sent;
  int64_t t0 = th_now_ms();
  th_drive_pump(d, period);
  CHECK_OK(th_drive_stats(d, &st));
  unsigned long long tries = st.renewals_sent - s0;
  printf("%s: %llu renewal tries in %lld ms after the first failed one "
         "(period %lld ms, retry interval %lld ms)\n",
         th_drive_kind(d), tries, (long long)(th_now_ms() - t0),
         (long long)period, (long long)(period / 4 < 1000 ? period / 4 : 1000));
  CHECK_MSG(tries >= 3, "%s: %llu tries in a period", th_drive_kind(d), tries);
  th_drive_free(d);
}

TH_CASE_T(failed_renewal_retried_within_a_quarter_period_blocking, 120,
          "slow") {
  retry_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(failed_renewal_retried_within_a_quarter_period_async, 120, "slow") {
  retry_body(TH_DRIVE_ASYNC);
}

/* ---- 38: the WAIT after a lock write keeps the call's wait budget ---------
 */

/* A master whose only replica is stopped (SIGSTOP: it stays listed, WAIT
 * waits for it). A timed lock with sync_replicas 1 and a wait budget far
 * below sync_timeout_ms waited sync_timeout_ms per attempt (7.3 s seen for
 * a 2 s wait). The WAIT is bounded by what is left of the budget now: the
 * call ends within it (DLOCK_ENOSYNC: the replica did not confirm in
 * time), nothing left behind. Both clients. */
static void sync_budget_body(int kind) {
  th_redis *m = th_redis_new(1, "repl-diskless-sync-delay 0\n");
  th_redis *rep = th_replica_new(m);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = m->tcp_url;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = (int)(6000 * slow());
  cfg.command_timeout_ms = (int)(3000 * slow());
  cfg.retry_interval_ms = 100;
  th_drive *d = th_drive_new(kind, &cfg);
  CHECK_OK(th_drive_lock(d, "synced", 1, 1000, 30000));
  CHECK_OK(th_drive_unlock(d, "synced", 1));
  th_redis_pause(rep);
  long long wait = 800 * slow();
  int64_t t0 = th_now_ms();
  int rc = th_drive_lock(d, "synced", 1, wait, 30000);
  int64_t took = th_now_ms() - t0;
  printf("%s: timedlock(%lld ms) -> %s after %lld ms (sync_timeout_ms %d): "
         "%s\n",
         th_drive_kind(d), wait, dlock_err_name(rc), (long long)took,
         cfg.sync_timeout_ms, dlock_last_error());
  CHECK_MSG(rc == DLOCK_ENOSYNC || rc == DLOCK_ETIMEDOUT, "%s",
            dlock_err_name(rc));
  CHECK_MSG(took < wait + 700 * slow(), "%s: a %lld ms wait took %lld ms",
            th_drive_kind(d), wait, (long long)took);
  CHECK_EQ(th_cmd_int(m, "EXISTS synced"), 0);
  /* A waiting lock: the lock is held elsewhere (a client without replica
   * sync); every attempt's WAIT (an attempt queues: a write) keeps to what
   * is left of the budget, and so does the cancel at its end. */
  dlock_config ocfg;
  dlock_config_init(&ocfg);
  ocfg.sync_replicas = 0;
  dlock_client *other = th_client_cfg(m, &ocfg);
  dlock_mutex *held;
  CHECK_OK(dlock_mutex_new(other, "synced", &held));
  CHECK_OK(dlock_mutex_timedlock(held, 0, 30000));
  t0 = th_now_ms();
  rc = th_drive_lock(d, "synced", 1, wait, 30000);
  took = th_now_ms() - t0;
  printf("%s: timedlock(%lld ms) of a held lock -> %s after %lld ms: %s\n",
         th_drive_kind(d), wait, dlock_err_name(rc), (long long)took,
         dlock_last_error());
  CHECK_MSG(rc == DLOCK_ETIMEDOUT || rc == DLOCK_ENOSYNC, "%s",
            dlock_err_name(rc));
  CHECK_MSG(took < wait + 700 * slow(), "%s: a %lld ms wait took %lld ms",
            th_drive_kind(d), wait, (long long)took);
  th_redis_resume(rep);
  CHECK_OK(dlock_mutex_unlock(held));
  dlock_mutex_free(held);
  dlock_client_free(other);
  th_drive_free(d);
}

TH_CASE_T(sync_wait_keeps_the_wait_budget_blocking, 120, "slow") {
  sync_budget_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(sync_wait_keeps_the_wait_budget_async, 120, "slow") {
  sync_budget_body(TH_DRIVE_ASYNC);
}

TH_MAIN()

/* ---- a final unlock in flight does not make the watchdog hammer ----------
 */

/* The final unlock's reply is delayed on the wire (it ran: the key is
 * gone) while the watchdog keeps renewing: each renewal finds the key
 * gone, which is no loss while that unlock is in flight -- but the hold
 * stayed due, and the blocking watchdog renewed it again at once, round
 * trip after round trip, until the unlock answered (found by make sim).
 * Now such an answer is retried after the retry interval, as a failed
 * renewal is: a handful of renewals over the delay, on both clients. */
static void hammer_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.watchdog_timeout_ms = (int)(3000 * slow());
  cfg.command_timeout_ms = (int)(10000 * slow());
  th_drive *d = th_drive_new(kind, &cfg);
  int64_t period = cfg.watchdog_timeout_ms / 3;
  int64_t retry = period / 4 < 1000 ? period / 4 : 1000;
  CHECK_OK(th_drive_lock(d, "hammer", 1, 0, -1));
  dlock_client_stats st;
  CHECK_OK(th_drive_stats(d, &st));
  unsigned long long s0 = st.renewals_sent;
  int64_t end = th_now_ms() + 10 * period;
  while (st.renewals_sent < s0 + 2 && th_now_ms() < end) {
    th_drive_pump(d, 10);
    CHECK_OK(th_drive_stats(d, &st));
  }
  CHECK_MSG(st.renewals_sent >= s0 + 2, "no renewals");
  int delay = (int)(1500 * slow()); /* within the lease: the unlock is OK */
  fp_arm(p, "redisson_unlock_latch:{hammer}", FP_DELAY, delay);
  s0 = st.renewals_sent;
  int64_t t0 = th_now_ms();
  CHECK_OK(th_drive_unlock(d, "hammer", 1));
  int64_t took = th_now_ms() - t0;
  CHECK_OK(th_drive_stats(d, &st));
  unsigned long long n = st.renewals_sent - s0;
  printf("%s: %llu renewals while the unlock took %lld ms (retry interval "
         "%lld ms)\n",
         th_drive_kind(d), n, (long long)took, (long long)retry);
  CHECK_MSG(took >= delay - 50, "the unlock's reply was not delayed (%lld ms)",
            (long long)took);
  CHECK_MSG(n <= (unsigned long long)(took / retry + 4),
            "%s: %llu renewals in %lld ms", th_drive_kind(d), n,
            (long long)took);
  CHECK_EQ(atomic_load(&g_lost), 0);
  th_drive_free(d);
}

TH_CASE_T(final_unlock_in_flight_is_renewed_at_the_retry_pace_blocking, 120,
          "slow") {
  hammer_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(final_unlock_in_flight_is_renewed_at_the_retry_pace_async, 120,
          "slow") {
  hammer_body(TH_DRIVE_ASYNC);
}
