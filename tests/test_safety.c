/*
 * test_safety.c -- one owner at a time under the interleavings of issue 9
 * (and the wait-path defects of issue 10): a holder cut off from Redis must
 * know it lost the lock before anyone else can take it; two objects of one
 * name are one reentrant lock; a grant or a queue entry of an ended wait
 * never hands the lock to a later one; names that differ only by braces do
 * not share dlock's keys; a cancel during the first attempt is not lost;
 * hold records do not pile up; no loss is reported for a lock that was
 * unlocked. Real redis-servers; the partition is a blackholing TCP proxy.
 */
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "kinds/kinds.h"
#include "th.h"
#include "th_drive.h"
#include "th_proxy.h"

static atomic_llong g_lost_at; /* monotonic ms of the first report */
static atomic_int g_lost_count;

static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  long long zero = 0;
  atomic_compare_exchange_strong(&g_lost_at, &zero, (long long)th_now_ms());
  atomic_fetch_add(&g_lost_count, 1);
}

static dlock_client *client_at(const char *url, int wd_ms, int cmd_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.retry_interval_ms = 100;
  cfg.retry_attempts = 1;
  if (wd_ms > 0)
    cfg.watchdog_timeout_ms = wd_ms;
  if (cmd_ms > 0)
    cfg.command_timeout_ms = cmd_ms;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_client_new: %s: %s", dlock_err_name(rc),
            dlock_last_error());
  return c;
}

/* client_at's configuration, for a th_drive of either client. */
static dlock_config cfg_at(const char *url, int wd_ms, int cmd_ms) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.retry_interval_ms = 100;
  cfg.retry_attempts = 1;
  if (wd_ms > 0)
    cfg.watchdog_timeout_ms = wd_ms;
  if (cmd_ms > 0)
    cfg.command_timeout_ms = cmd_ms;
  return cfg;
}

/* Another client polls with trylock until it gets the lock (then unlocks
 * it); done says it stopped. */
typedef struct grabber {
  dlock_mutex *m;
  int64_t cut, got;
  int unlock_rc;
  int done;
} grabber;

static void *grab_thread(void *arg) {
  grabber *g = arg;
  g->got = -1;
  while (th_now_ms() - g->cut < 30000LL * th_timeout_mult()) {
    int rc = dlock_mutex_trylock(g->m);
    if (rc == 0) {
      g->got = th_now_ms();
      g->unlock_rc = dlock_mutex_unlock(g->m);
      break;
    }
    if (rc != DLOCK_EBUSY)
      break;
    th_sleep_ms(2);
  }
  __atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* 9.1: a watchdog holder whose network path is blackholed right after it
 * locked. The other client polls until it gets the lock; by then the holder
 * must already have been told (on_lock_lost), and (blocking) its is_held
 * must answer 0 at once from the local deadline (the old code answered
 * ECONN after the command timeout, and reported the loss ~300 ms after the
 * other client took the lock). The hold is taken half a renewal period
 * after another one, so its deadline falls between two renewal ticks
 * (issue 26: the event-loop client looked at deadlines only at its ticks
 * and told the holder ~1 s after the other client acquired). Run by both
 * clients (th_drive.h). The event-loop client tells the holder on the
 * application's loop: when that loop itself did not turn for longer than
 * the drift margin at the deadline (a loaded machine deschedules the test
 * thread), the assumption "the holder runs" broke, not the library -- told
 * apart by how late the loop ran the timer that reported the loss. Returns
 * 1 for such a run (the case runs again), 0 when judged. */
static int told_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  dlock_config cfg = cfg_at(th_proxy_url(p), 6000, 1000);
  th_drive *d = th_drive_new(kind, &cfg);
  dlock_client *cb = th_client(r);
  grabber g = {0};
  CHECK_OK(dlock_mutex_new(cb, "part", &g.m));
  CHECK_OK(th_drive_lock(d, "phase", 1, 0, -1));
  th_drive_pump(d, 1000); /* half a period: a placement, not a wait */
  CHECK_OK(th_drive_lock(d, "part", 1, 0, -1));
  dlock_mutex *ma = th_drive_mutex(d, "part");
  long long left = 0;
  if (ma) {
    CHECK_OK(dlock_mutex_validity(ma, &left));
    CHECK_MSG(left > 4000 && left <= 6000 - 62, "validity %lld", left);
  }
  th_proxy_blackhole(p, 1);
  g.cut = th_now_ms();
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, grab_thread, &g), 0);
  th_drive_pump_until(d, &g.done, 40000LL * th_timeout_mult());
  pthread_join(t, NULL);
  long long lost_at = th_drive_lost_at(d, "part");
  printf("%s: holder told %lld ms after the cut, the other client acquired "
         "at %lld ms\n",
         th_drive_kind(d), lost_at ? lost_at - g.cut : -1LL,
         (long long)(g.got - g.cut));
  CHECK_MSG(g.got > 0, "the other client never acquired the expired lock");
  long long late = th_drive_lost_late(d, "part");
  if (lost_at > g.got && late > 0 && lost_at - late <= g.got) {
    printf("%s: the loop ran the loss timer %lld ms late (the test thread "
           "did not run): not judged\n",
           th_drive_kind(d), late);
    CHECK_OK(g.unlock_rc);
    dlock_mutex_free(g.m);
    th_drive_free(d);
    dlock_client_free(cb);
    return 1;
  }
  CHECK_MSG(lost_at > 0 && lost_at <= g.got,
            "%s: holder told at %lld ms after the cut, the other client "
            "acquired at %lld ms: two owners",
            th_drive_kind(d), lost_at ? lost_at - g.cut : -1LL,
            (long long)(g.got - g.cut));
  CHECK_OK(g.unlock_rc);
  if (ma) { /* the holder's own view, from the local deadline */
    int64_t t0 = th_now_ms();
    CHECK_EQ(dlock_mutex_is_held(ma), 0);
    CHECK_MSG(th_now_ms() - t0 < 500, "is_held asked the blackholed Redis");
    CHECK_RC(dlock_mutex_validity(ma, &left), DLOCK_ELOST);
    CHECK_EQ(left, 0);
  }
  CHECK_RC(th_drive_unlock(d, "part", 1), DLOCK_ELOST);
  dlock_mutex_free(g.m);
  th_drive_free(d);
  dlock_client_free(cb);
  return 0;
}

/* Up to 3 runs: one whose loop stalled at the deadline is not judged. */
static void told_case(int kind) {
  for (int i = 0; i < 3; i++)
    if (!told_body(kind))
      return;
  th_skip("the test thread stalled at the deadline in 3 runs of 3");
}

TH_CASE_T(partitioned_watchdog_holder_told_before_lock_is_taken_blocking, 180,
          "slow") {
  told_case(TH_DRIVE_BLOCKING);
}
TH_CASE_T(partitioned_watchdog_holder_told_before_lock_is_taken_async, 180,
          "slow") {
  told_case(TH_DRIVE_ASYNC);
}

/* Issue 25.8: a partial unlock (count 2 -> 1) in flight when the path is
 * cut. The owner still holds the lock after it, so the hold must stay
 * watched: the loss is reported at the local deadline, before another
 * client can take the lock (old code: the hold was marked "releasing" for
 * the unlock's whole retry span, the expiry thread skipped it, another
 * client acquired and on_lock_lost never ran). Run by both clients. */
static void partial_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  /* The unlock stays in flight (2 x 4 s command timeout) past the 6 s
   * lease. */
  dlock_config cfg = cfg_at(th_proxy_url(p), 6000, 4000);
  th_drive *d = th_drive_new(kind, &cfg);
  dlock_client *cb = th_client(r);
  grabber g = {0};
  CHECK_OK(dlock_mutex_new(cb, "partial", &g.m));
  /* Half a renewal period after another hold: its deadline falls between
   * two renewal ticks (as in told_body). */
  CHECK_OK(th_drive_lock(d, "phase", 1, 0, -1));
  th_drive_pump(d, 1000);
  CHECK_OK(th_drive_lock(d, "partial", 1, -1, -1));
  CHECK_OK(th_drive_lock(d, "partial", 1, -1, -1));
  th_proxy_blackhole(p, 1);
  g.cut = th_now_ms();
  g.got = -1;
  g.unlock_rc = -1;
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, grab_thread, &g), 0);
  int rc = th_drive_unlock(d, "partial", 1); /* 2 -> 1, never answered */
  int64_t back = th_now_ms();
  th_drive_pump_until(d, &g.done, 40000LL * th_timeout_mult());
  pthread_join(t, NULL);
  long long lost_at = th_drive_lost_at(d, "partial");
  printf("%s: partial unlock %s after %lld ms; holder told at %lld ms, the "
         "other client acquired at %lld ms\n",
         th_drive_kind(d), dlock_err_name(rc), (long long)(back - g.cut),
         lost_at ? lost_at - g.cut : -1LL,
         g.got > 0 ? (long long)(g.got - g.cut) : -1LL);
  CHECK_MSG(g.got > 0, "the other client never acquired the expired lock");
  CHECK_MSG(lost_at > 0 && lost_at <= g.got,
            "%s: holder told at %lld ms after the cut, the other client "
            "acquired at %lld ms: two owners",
            th_drive_kind(d), lost_at ? lost_at - g.cut : -1LL,
            (long long)(g.got - g.cut));
  CHECK_MSG(rc == DLOCK_ELOST || rc == DLOCK_ECONN, "unlock: %s",
            dlock_err_name(rc));
  th_proxy_blackhole(p, 0);
  dlock_mutex *ma = th_drive_mutex(d, "partial");
  if (ma)
    CHECK_EQ(dlock_mutex_is_held(ma), 0);
  CHECK_OK(g.unlock_rc);
  dlock_mutex_free(g.m);
  th_drive_free(d);
  dlock_client_free(cb);
}

TH_CASE_T(partial_unlock_in_flight_still_reports_loss_blocking, 120, "slow") {
  partial_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(partial_unlock_in_flight_still_reports_loss_async, 120, "slow") {
  partial_body(TH_DRIVE_ASYNC);
}

/* 9.1 with the server stopped (SIGSTOP) and a command timeout longer than
 * the lease: the renewal is stuck in the network for longer than the lease
 * is valid; the loss must be reported at the local deadline, not when the
 * stuck renewal gives up (old code: >= 1 s + 5 s after locking). */
TH_CASE_T(stopped_server_holder_told_at_local_deadline, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = client_at(r->url, 3000, 5000);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "stopped", &m));
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_mutex_lock(m));
  th_redis_pause(r);
  while (atomic_load(&g_lost_at) == 0 && th_now_ms() - t0 < 20000)
    th_sleep_ms(5);
  long long lost_at = atomic_load(&g_lost_at);
  th_redis_resume(r);
  CHECK_MSG(lost_at > 0, "never told");
  CHECK_MSG(lost_at - t0 >= 2900 && lost_at - t0 < 4500,
            "told %lld ms after locking (lease 3000 ms)", lost_at - t0);
  CHECK_EQ(dlock_mutex_is_held(m), 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* 9.1, fixed leases: validity counts down from the acquisition's send time;
 * past it is_held is 0 without asking Redis and unlock says ELOST. */
TH_CASE_T(fixed_lease_validity_ends_the_hold_locally, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  dlock_client *c = client_at(th_proxy_url(p), 0, 1000);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "fixed", &m));
  long long left = -1;
  CHECK_RC(dlock_mutex_validity(m, &left), DLOCK_EPERM);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_mutex_timedlock(m, 0, 1500));
  CHECK_OK(dlock_mutex_validity(m, &left));
  CHECK_MSG(left > 0 && left <= 1500 - 17, "validity %lld", left);
  th_proxy_blackhole(p, 1);
  /* Redis unreachable, hold still valid: answered from the record. */
  CHECK_EQ(dlock_mutex_is_held(m), 1);
  while (th_now_ms() - t0 < 1500)
    th_sleep_ms(10);
  int64_t t1 = th_now_ms();
  CHECK_EQ(dlock_mutex_is_held(m), 0);
  CHECK_MSG(th_now_ms() - t1 < 500, "is_held asked the blackholed Redis");
  CHECK_RC(dlock_mutex_validity(m, &left), DLOCK_ELOST);
  th_proxy_blackhole(p, 0);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* 9.2: lock(a), lock(b) on one name in one thread is one reentrant lock
 * held twice; unlock(b) must leave it held (old code: count 1 on the
 * server, and unlock(b) freed it while a still held it). */
TH_CASE(two_objects_one_name_are_one_reentrant_lock) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *other = th_client(r);
  dlock_mutex *a, *b, *o;
  CHECK_OK(dlock_mutex_new(c, "twice", &a));
  CHECK_OK(dlock_mutex_new(c, "twice", &b));
  CHECK_OK(dlock_mutex_new(other, "twice", &o));
  CHECK_OK(dlock_mutex_lock(a));
  CHECK_OK(dlock_mutex_timedlock(b, 0, 20000));
  CHECK_EQ(dlock_mutex_hold_count(a), 2);
  CHECK_OK(dlock_mutex_unlock(b));
  CHECK_EQ(dlock_mutex_hold_count(a), 1);
  CHECK_RC(dlock_mutex_trylock(o), DLOCK_EBUSY);
  CHECK_EQ(dlock_mutex_is_held(a), 1);
  /* Freeing b while a holds keeps a's hold (and its renewal). */
  dlock_mutex_free(b);
  CHECK_OK(dlock_mutex_unlock(a));
  CHECK_OK(dlock_mutex_trylock(o));
  CHECK_OK(dlock_mutex_unlock(o));
  dlock_mutex_free(a);
  dlock_mutex_free(o);
  dlock_client_free(c);
  dlock_client_free(other);
}

typedef struct waiter {
  dlock_mutex *m;
  long long wait_ms, lease_ms;
  char field[DLOCK__FIELD_MAX];
  atomic_int started, done, go;
  int rc, rc2;
} waiter;

static void *timed_waiter(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->started, 1);
  w->rc = dlock_mutex_timedlock(w->m, w->wait_ms, w->lease_ms);
  if (w->rc == 0)
    dlock_mutex_unlock(w->m);
  atomic_store(&w->done, 1);
  return NULL;
}

static void wait_flag(atomic_int *f, int64_t ms) {
  int64_t t0 = th_now_ms();
  while (!atomic_load(f)) {
    CHECK_MSG(th_now_ms() - t0 < ms, "timed out waiting for a thread");
    th_sleep_ms(2);
  }
}

/* timedlock; on success says so (started = 2), holds until go, unlocks
 * (rc2 = the unlock's code). */
static void *timed_waiter_holds(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->started, 1);
  w->rc = dlock_mutex_timedlock(w->m, w->wait_ms, w->lease_ms);
  if (w->rc == 0) {
    atomic_store(&w->started, 2);
    wait_flag(&w->go, 60000);
    w->rc2 = dlock_mutex_unlock(w->m);
  }
  atomic_store(&w->done, 1);
  return NULL;
}

/* 9.4: a grant that names another wait (an old one of the same thread) must
 * not wake this wait as the owner. The old code matched grants by thread
 * id only: timedlock returned 0 while another client held the lock. */
TH_CASE(grant_of_another_wait_is_not_a_grant) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = th_client(r), *cb = th_client(r);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(ca, "sg", &ma));
  CHECK_OK(dlock_mutex_new(cb, "sg", &mb));
  CHECK_OK(dlock_mutex_timedlock(mb, 0, 20000));
  waiter w = {.m = ma, .wait_ms = 2500, .lease_ms = -1};
  pthread_t t;
  pthread_create(&t, NULL, timed_waiter, &w);
  th_wait_llen(r, "dlock_lock_queue:{sg}", 1, 10000);
  const char *tid = strchr(w.field, ':') + 1;
  char ch[128];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{sg}:%s", dlock_client_id(ca));
  /* The old payload form, and the new one naming a wait that is not this. */
  freeReplyObject(th_cmd(r, "PUBLISH %s %s", ch, tid));
  char stale[64];
  snprintf(stale, sizeof stale, "%s|0000000000000001", tid);
  freeReplyObject(th_cmd(r, "PUBLISH %s %s", ch, stale));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ETIMEDOUT);
  CHECK_EQ(th_cmd_int(r, "HEXISTS sg %s", w.field), 0);
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

static void *two_waits(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->started, 1);
  /* A short wait with a 100 ms lease whose cancel will fail... */
  w->rc = dlock_mutex_timedlock(w->m, 1500, 100);
  atomic_store(&w->done, 1);
  wait_flag(&w->go, 30000);
  /* ...then a watchdog wait of the same thread. */
  w->rc2 = dlock_mutex_lock(w->m);
  atomic_store(&w->done, 2);
  wait_flag(&w->go, 30000);
  while (atomic_load(&w->go) < 2)
    th_sleep_ms(2);
  dlock_mutex_unlock(w->m);
  return NULL;
}

/* 9.5: a wait whose cancel failed (server stopped at its deadline) leaves
 * its queue entry. The same thread then waits again with the watchdog. The
 * unlock must not hand the lock to the old entry with its 100 ms lease
 * (old code: the later lock() returned with a 100 ms TTL and a third
 * client took the lock 250 ms later). */
TH_CASE_T(entry_of_an_ended_wait_never_gets_the_lock, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = client_at(r->url, 0, 300), *cb = th_client(r),
               *cc = th_client(r);
  dlock_mutex *ma, *mb, *mc;
  CHECK_OK(dlock_mutex_new(ca, "stale", &ma));
  CHECK_OK(dlock_mutex_new(cb, "stale", &mb));
  CHECK_OK(dlock_mutex_new(cc, "stale", &mc));
  CHECK_OK(dlock_mutex_timedlock(mb, 0, 60000));
  waiter w = {.m = ma};
  pthread_t t;
  pthread_create(&t, NULL, two_waits, &w);
  th_wait_llen(r, "dlock_lock_queue:{stale}", 1, 10000);
  th_redis_pause(r);
  wait_flag(&w.done, 30000);
  th_redis_resume(r);
  /* ETIMEDOUT; or ECONN when its once-a-second attempt of a queued wait
   * (engine.h DLOCK__ENG_QUEUED_RECHECK_MS) met the stopped server: the
   * wait ended while the server was away */
  CHECK_MSG(w.rc == DLOCK_ETIMEDOUT || w.rc == DLOCK_ECONN, "first wait: %s",
            dlock_err_name(w.rc));
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue:{stale}"), 1);
  atomic_store(&w.go, 1);
  th_wait_llen(r, "dlock_lock_queue:{stale}", 2, 10000);
  CHECK_OK(dlock_mutex_unlock(mb));
  int64_t t0 = th_now_ms();
  while (atomic_load(&w.done) != 2 && th_now_ms() - t0 < 10000)
    th_sleep_ms(2);
  CHECK_EQ(atomic_load(&w.done), 2);
  CHECK_OK(w.rc2);
  long long pttl = th_cmd_int(r, "PTTL stale");
  CHECK_MSG(pttl > 10000, "the watchdog hold got a %lld ms TTL", pttl);
  th_sleep_ms(400);
  CHECK_RC(dlock_mutex_trylock(mc), DLOCK_EBUSY);
  atomic_store(&w.go, 2);
  pthread_join(t, NULL);
  CHECK_OK(dlock_mutex_trylock(mc));
  CHECK_OK(dlock_mutex_unlock(mc));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_mutex_free(mc);
  dlock_client_free(ca);
  dlock_client_free(cb);
  dlock_client_free(cc);
}

static void *forever_waiter(void *arg) {
  waiter *w = arg;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->started, 1);
  w->rc = dlock_mutex_lock(w->m);
  atomic_store(&w->done, 1);
  return NULL;
}

/* A cancel that comes while the wait's attempt is in flight and failing
 * (a queued lock() rechecks once a second; Redis is stopped, the command
 * timeout is 3 s) ends the wait with DLOCK_ECANCELED, as dlock.h promises
 * for every wait blocked when dlock_client_cancel_waits() is called. The
 * old code returned the attempt's DLOCK_ECONN: which of the two came first
 * showed to the caller (CI saw it as a flaky
 * grant_to_an_ended_wait_is_given_back). */
TH_CASE_T(cancel_during_a_failing_attempt_reports_the_cancel, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = client_at(r->url, 0, 3000), *cb = th_client(r);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(ca, "midcancel", &ma));
  CHECK_OK(dlock_mutex_new(cb, "midcancel", &mb));
  CHECK_OK(dlock_mutex_timedlock(mb, 0, 60000));
  waiter g = {.m = ma};
  pthread_t tg;
  pthread_create(&tg, NULL, forever_waiter, &g);
  th_wait_llen(r, "dlock_lock_queue:{midcancel}", 1, 10000);
  th_redis_pause(r);
  /* the queued wait's recheck (DLOCK__ENG_QUEUED_RECHECK_MS after its
   * last attempt) is now in flight, and stays so for the command timeout */
  th_sleep_ms(1300);
  CHECK_EQ(atomic_load(&g.done), 0);
  CHECK_OK(dlock_client_cancel_waits(ca));
  wait_flag(&g.done, 60000);
  th_redis_resume(r);
  pthread_join(tg, NULL);
  CHECK_MSG(g.rc == DLOCK_ECANCELED, "the canceled wait: %s (%s)",
            dlock_err_name(g.rc), dlock_last_error());
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

/* 9.5: a lock() wait (no deadline) canceled while Redis is stopped: its
 * cancel fails and its queue entry stays. Another thread of the same client
 * then waits, so the client is still subscribed to its grant channel, and
 * the unlock hands the lock to the dead wait's entry. The old code left it
 * there for that wait's lease (the watchdog's 30 s): the live waiter timed
 * out with nobody holding the lock. Now the grant that reaches no wait is
 * declined, and the lock passes to the live waiter at once. */
TH_CASE_T(grant_to_an_ended_wait_is_given_back, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = client_at(r->url, 0, 300), *cb = th_client(r);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(ca, "ghost", &ma));
  CHECK_OK(dlock_mutex_new(cb, "ghost", &mb));
  CHECK_OK(dlock_mutex_timedlock(mb, 0, 60000));
  waiter g = {.m = ma};
  pthread_t tg;
  pthread_create(&tg, NULL, forever_waiter, &g);
  th_wait_llen(r, "dlock_lock_queue:{ghost}", 1, 10000);
  th_redis_pause(r);
  CHECK_OK(dlock_client_cancel_waits(ca));
  wait_flag(&g.done, 30000); /* its cancel failed: the server is stopped */
  th_redis_resume(r);
  pthread_join(tg, NULL);
  CHECK_RC(g.rc, DLOCK_ECANCELED);
  CHECK_EQ(th_cmd_int(r, "LLEN dlock_lock_queue:{ghost}"), 1);
  waiter w = {.m = ma, .wait_ms = 10000, .lease_ms = 60000};
  pthread_t tw;
  pthread_create(&tw, NULL, timed_waiter_holds, &w);
  th_wait_llen(r, "dlock_lock_queue:{ghost}", 2, 10000);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_mutex_unlock(mb));
  wait_flag(&w.started, 10000);
  while (atomic_load(&w.started) < 2 && !atomic_load(&w.done) &&
         th_now_ms() - t0 < 15000)
    th_sleep_ms(2);
  int64_t took = th_now_ms() - t0;
  printf("the live waiter: %s %lld ms after the unlock\n", dlock_err_name(w.rc),
         (long long)took);
  CHECK_OK(w.rc);
  /* The live waiter may run before the watchdog thread has read the
   * decline's reply (which counts it): wait for that. */
  int64_t t1 = th_now_ms();
  while (atomic_load(&ca->er.declined) < 1 && th_now_ms() - t1 < 10000)
    th_sleep_ms(2);
  CHECK_EQ(atomic_load(&ca->er.declined), 1);
  CHECK_EQ(th_cmd_int(r, "HEXISTS ghost %s", g.field), 0);
  CHECK_EQ(th_cmd_int(r, "HEXISTS ghost %s", w.field), 1);
  CHECK_EQ(th_cmd_int(r, "HLEN ghost"), 1);
  atomic_store(&w.go, 1);
  pthread_join(tw, NULL);
  CHECK_OK(w.rc2);
  CHECK_EQ(th_cmd_int(r, "EXISTS ghost"), 0);
  CHECK_OK(dlock_mutex_trylock(mb));
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

/* The decline never undoes a hold its thread took as its own: the state a
 * hand-over to an ended wait leaves (the field, count 1, and the marker
 * naming that wait) is adopted by the thread's next attempt, and a grant
 * for that wait arriving afterwards -- which reaches no wait -- changes
 * nothing. */
TH_CASE(decline_leaves_an_adopted_hand_over_alone) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *o = th_client(r);
  dlock_mutex *m, *mo;
  CHECK_OK(dlock_mutex_new(c, "adopt", &m));
  CHECK_OK(dlock_mutex_new(o, "adopt", &mo));
  char field[DLOCK__FIELD_MAX];
  CHECK_OK(dlock_mutex_owner(m, field, sizeof field));
  freeReplyObject(th_cmd(r, "HSET adopt %s 1", field));
  freeReplyObject(th_cmd(r, "PEXPIRE adopt 60000"));
  freeReplyObject(th_cmd(r,
                         "SET dlock_lock_granted:{adopt} %s|00000000000000ee "
                         "PX 60000",
                         field));
  CHECK_OK(dlock_mutex_trylock(m)); /* adopts the hand-over */
  CHECK_EQ(th_cmd_int(r, "EXISTS dlock_lock_granted:{adopt}"), 0);
  /* Another thread of c waits, so c is subscribed to its grant channel. */
  waiter w = {.m = m, .wait_ms = 20000, .lease_ms = 60000};
  pthread_t tw;
  pthread_create(&tw, NULL, timed_waiter_holds, &w);
  th_wait_llen(r, "dlock_lock_queue:{adopt}", 1, 10000);
  char ch[128], grant[64];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{adopt}:%s",
           dlock_client_id(c));
  snprintf(grant, sizeof grant, "%s|00000000000000ee", strchr(field, ':') + 1);
  CHECK_EQ(th_cmd_int(r, "PUBLISH %s %s", ch, grant), 1);
  /* The decline runs on c's watchdog thread: wait until it was answered. */
  int64_t t1 = th_now_ms();
  while (atomic_load(&c->er.declined) < 1 && th_now_ms() - t1 < 10000)
    th_sleep_ms(2);
  CHECK_EQ(atomic_load(&c->er.declined), 1);
  CHECK_EQ(th_cmd_int(r, "HEXISTS adopt %s", field), 1);
  CHECK_EQ(th_cmd_int(r, "HLEN adopt"), 1);
  CHECK_EQ(atomic_load(&w.started), 1); /* still waiting */
  CHECK_OK(dlock_mutex_unlock(m));      /* hands it to the waiting thread */
  int64_t t0 = th_now_ms();
  while (atomic_load(&w.started) < 2 && th_now_ms() - t0 < 10000)
    th_sleep_ms(2);
  CHECK_OK(w.rc);
  atomic_store(&w.go, 1);
  pthread_join(tw, NULL);
  CHECK_OK(dlock_mutex_trylock(mo));
  CHECK_OK(dlock_mutex_unlock(mo));
  dlock_mutex_free(m);
  dlock_mutex_free(mo);
  dlock_client_free(c);
  dlock_client_free(o);
}

typedef struct validity_waiter {
  waiter w;
  long long validity; /* dlock_mutex_validity right after the timedlock */
  int64_t at;         /* ... read at this monotonic ms */
} validity_waiter;

/* timedlock; on success reads its validity (started = 2), holds until go,
 * unlocks (rc2). */
static void *timed_waiter_validity(void *arg) {
  validity_waiter *v = arg;
  waiter *w = &v->w;
  dlock_mutex_owner(w->m, w->field, sizeof w->field);
  atomic_store(&w->started, 1);
  w->rc = dlock_mutex_timedlock(w->m, w->wait_ms, w->lease_ms);
  if (w->rc == 0) {
    v->at = th_now_ms();
    dlock_mutex_validity(w->m, &v->validity);
    atomic_store(&w->started, 2);
    wait_flag(&w->go, 60000);
    w->rc2 = dlock_mutex_unlock(w->m);
  }
  atomic_store(&w->done, 1);
  return NULL;
}

/* 25.1: a timed wait ends (its budget) while the lock stands handed to its
 * thread -- by a hand-over to an older wait of that thread whose cancel
 * never ran, with that wait's shorter lease (here 1.5 s; the grant was
 * lost, so only the state is there: the field, count 1, the marker naming
 * the old wait). The cancel finds the field. The old code recorded this
 * call's lease (10 s) from an earlier send: validity ~9 s while the key
 * expired 1.5 s after the hand-over and another client took it. The hold's
 * deadline must come from the server: the lock is taken as this call's own
 * (its lease), or not at all. */
TH_CASE(cancel_never_adopts_an_older_waits_lease) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = th_client(r), *cb = th_client(r), *cc = th_client(r);
  dlock_mutex *ma, *mb, *mc;
  CHECK_OK(dlock_mutex_new(ca, "oldlease", &ma));
  CHECK_OK(dlock_mutex_new(cb, "oldlease", &mb));
  CHECK_OK(dlock_mutex_new(cc, "oldlease", &mc));
  CHECK_OK(dlock_mutex_timedlock(mb, 0, 60000));
  validity_waiter v = {.w = {.m = ma, .wait_ms = 800, .lease_ms = 10000}};
  pthread_t t;
  pthread_create(&t, NULL, timed_waiter_validity, &v);
  th_wait_llen(r, "dlock_lock_queue:{oldlease}", 1, 10000);
  /* What the unlock writes when it hands the lock to the old wait
   * (00000000000000ee) of this thread, with that wait's 1.5 s lease. */
  int64_t handed = th_now_ms();
  freeReplyObject(th_cmd(r, "DEL oldlease"));
  freeReplyObject(th_cmd(r, "HSET oldlease %s 1", v.w.field));
  freeReplyObject(th_cmd(r, "PEXPIRE oldlease 1500"));
  freeReplyObject(
      th_cmd(r,
             "SET dlock_lock_granted:{oldlease} %s|00000000000000ee "
             "PX 1500",
             v.w.field));
  int64_t t0 = th_now_ms();
  while (atomic_load(&v.w.started) < 2 && !atomic_load(&v.w.done) &&
         th_now_ms() - t0 < 10000)
    th_sleep_ms(2);
  CHECK_MSG(th_now_ms() - handed < 1400,
            "too slow to judge (the handed lock's lease ran out first)");
  CHECK_OK(v.w.rc);
  long long pttl = th_cmd_int(r, "PTTL oldlease");
  int64_t read_at = th_now_ms();
  printf("timedlock(800, 10000) -> OK, validity %lld ms; the key's PTTL "
         "%lld ms\n",
         v.validity, pttl);
  /* The local deadline never outlasts the key. */
  CHECK_MSG(v.validity <= pttl + (read_at - v.at) + 5,
            "validity %lld ms but the key expires in %lld ms", v.validity,
            pttl);
  /* Past the old wait's lease, the lock is still this thread's alone. */
  while (th_now_ms() - handed < 1700)
    th_sleep_ms(5);
  CHECK_RC(dlock_mutex_trylock(mc), DLOCK_EBUSY);
  atomic_store(&v.w.go, 1);
  pthread_join(t, NULL);
  CHECK_OK(v.w.rc2);
  CHECK_OK(dlock_mutex_trylock(mc));
  CHECK_OK(dlock_mutex_unlock(mc));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb); /* its hold was overwritten: abandoned */
  dlock_mutex_free(mc);
  dlock_client_free(ca);
  dlock_client_free(cb);
  dlock_client_free(cc);
}

/* 9.5: a thread that holds the lock and still has an entry queued (it took
 * the lock by a retry, not by the hand-over) is never handed its own lock
 * back by its unlock. */
TH_CASE(unlock_never_hands_the_lock_to_its_own_thread) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r), *o = th_client(r);
  dlock_mutex *m, *mo;
  CHECK_OK(dlock_mutex_new(c, "self", &m));
  CHECK_OK(dlock_mutex_new(o, "self", &mo));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 20000));
  char field[DLOCK__FIELD_MAX];
  CHECK_OK(dlock_mutex_owner(m, field, sizeof field));
  /* Entries of this very thread, as a retry that took the lock without
   * leaving the queue would have left them (both entry formats), and a
   * live subscriber on its grant channel so a hand-over would succeed. */
  char ch[128];
  snprintf(ch, sizeof ch, "dlock_grant__channel:{self}:%s", dlock_client_id(c));
  redisContext *sub = th_redis_raw(r);
  redisReply *sr = redisCommand(sub, "SUBSCRIBE %s", ch);
  CHECK(sr != NULL);
  freeReplyObject(sr);
  freeReplyObject(
      th_cmd(r,
             "RPUSH dlock_lock_queue:{self} %s|20000|00000000000000ab "
             "%s|20000",
             field, field));
  freeReplyObject(th_cmd(r, "HSET dlock_lock_waits:{self} 00000000000000ab 0"));
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(th_cmd_int(r, "EXISTS self"), 0);
  CHECK_OK(dlock_mutex_trylock(mo));
  CHECK_OK(dlock_mutex_unlock(mo));
  redisFree(sub);
  dlock_mutex_free(m);
  dlock_mutex_free(mo);
  dlock_client_free(c);
  dlock_client_free(o);
}

/* 9.6: "x" and "{x}" are different locks; the unlock of "x" must not hand
 * "{x}" (held by someone else) to a waiter of "{x}". */
TH_CASE(braced_and_plain_names_do_not_share_dlock_keys) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = th_client(r), *cb = th_client(r), *cc = th_client(r);
  dlock_mutex *ax, *bx, *cx, *cplain;
  CHECK_OK(dlock_mutex_new(ca, "x", &ax));
  CHECK_OK(dlock_mutex_new(cb, "{x}", &bx));
  CHECK_OK(dlock_mutex_new(cc, "{x}", &cx));
  CHECK_OK(dlock_mutex_new(cc, "x", &cplain));
  CHECK_OK(dlock_mutex_timedlock(bx, 0, 20000));
  waiter w = {.m = cx, .wait_ms = 2500, .lease_ms = -1};
  pthread_t t;
  pthread_create(&t, NULL, timed_waiter, &w);
  /* Queued (under either naming rule). */
  int64_t t0 = th_now_ms();
  while (th_cmd_int(r, "LLEN dlock_lock_queue::{x}") +
             th_cmd_int(r, "LLEN dlock_lock_queue:{x}") <
         1) {
    CHECK_MSG(th_now_ms() - t0 < 10000, "the waiter never queued");
    th_sleep_ms(5);
  }
  CHECK_OK(dlock_mutex_timedlock(ax, 0, 20000));
  CHECK_OK(dlock_mutex_unlock(ax));
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ETIMEDOUT);
  char bfield[DLOCK__FIELD_MAX];
  CHECK_OK(dlock_mutex_owner(bx, bfield, sizeof bfield));
  CHECK_EQ(th_cmd_int(r, "HEXISTS {x} %s", bfield), 1);
  CHECK_OK(dlock_mutex_trylock(cplain)); /* "x" was left free */
  CHECK_OK(dlock_mutex_unlock(cplain));
  CHECK_OK(dlock_mutex_unlock(bx));
  dlock_mutex_free(ax);
  dlock_mutex_free(bx);
  dlock_mutex_free(cx);
  dlock_mutex_free(cplain);
  dlock_client_free(ca);
  dlock_client_free(cb);
  dlock_client_free(cc);
}

static void *blocking_locker(void *arg) {
  waiter *w = arg;
  atomic_store(&w->started, 1);
  w->rc = dlock_mutex_lock(w->m);
  if (w->rc == 0)
    dlock_mutex_unlock(w->m);
  atomic_store(&w->done, 1);
  return NULL;
}

/* Issue 10: a cancel that arrives while the first attempt is in flight
 * (writes paused on the server) ends the wait (old code: lock() blocked
 * for ever, the cancel generation was read after the first attempt). */
TH_CASE(cancel_during_first_attempt_is_not_lost) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = th_client(r), *cb = th_client(r);
  dlock_mutex *ma, *mb;
  CHECK_OK(dlock_mutex_new(ca, "firstcancel", &ma));
  CHECK_OK(dlock_mutex_new(cb, "firstcancel", &mb));
  CHECK_OK(dlock_mutex_lock(mb));
  freeReplyObject(th_cmd(r, "CLIENT PAUSE 1500 WRITE"));
  waiter w = {.m = ma};
  pthread_t t;
  pthread_create(&t, NULL, blocking_locker, &w);
  wait_flag(&w.started, 10000);
  th_sleep_ms(300); /* the first attempt is now held by the pause */
  CHECK_OK(dlock_client_cancel_waits(ca));
  int64_t t0 = th_now_ms();
  while (!atomic_load(&w.done) && th_now_ms() - t0 < 15000)
    th_sleep_ms(5);
  CHECK_MSG(atomic_load(&w.done), "lock() ignored the cancel");
  pthread_join(t, NULL);
  CHECK_RC(w.rc, DLOCK_ECANCELED);
  CHECK_OK(dlock_mutex_unlock(mb));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

static void *lock_unlock_once(void *arg) {
  dlock_mutex *m = arg;
  if (dlock_mutex_lock(m) == 0)
    dlock_mutex_unlock(m);
  return NULL;
}

/* Issue 10: hold records of threads that hold nothing are freed (old code:
 * one record per thread that ever locked, looked up linearly). CPU-bound:
 * 2.6 s plain, 16 s in the ASan build at load 45 on 2 cores; hence 120 s. */
TH_CASE_T(hold_records_do_not_outlive_their_holds, 120, "") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "many", &m));
  for (int i = 0; i < 3000; i++) {
    pthread_t t;
    pthread_create(&t, NULL, lock_unlock_once, m);
    pthread_join(t, NULL);
  }
  CHECK_EQ(dlock_client_hold_records(c), 0);
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_EQ(dlock_client_hold_records(c), 1);
  CHECK_OK(dlock_mutex_unlock(m));
  CHECK_EQ(dlock_client_hold_records(c), 0);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Bytes the process has allocated now: the sanitizer's allocator's count
 * when one runs (its malloc is not glibc's), else glibc's. */
size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

static size_t heap_in_use(void) {
  if (__sanitizer_get_current_allocated_bytes)
    return __sanitizer_get_current_allocated_bytes();
  return mallinfo2().uordblks;
}

typedef struct composite {
  dlock_rwlock *rw;
  dlock_multilock *ml;
  atomic_int fails;
} composite;

static void *composite_once(void *arg) {
  composite *x = arg;
  if (dlock_rwlock_rdlock(x->rw) || dlock_rwlock_unlock(x->rw) ||
      dlock_rwlock_wrlock(x->rw) || dlock_rwlock_unlock(x->rw) ||
      dlock_multilock_lock(x->ml) || dlock_multilock_unlock(x->ml))
    atomic_fetch_add(&x->fails, 1);
  return NULL;
}

static void composite_threads(composite *x, int n) {
  for (int i = 0; i < n; i++) {
    pthread_t t;
    pthread_create(&t, NULL, composite_once, x);
    pthread_join(t, NULL);
  }
}

/* Issue 26: the per-thread records of a read-write lock and a multilock
 * are dropped when the thread holds nothing through them (old code: one
 * record per thread that ever locked, never freed and searched linearly --
 * 2,000 threads left ~900 KB, 20,000 left 9 MB and doubled the latency of
 * every later lock+unlock). The heap after 2,000 short-lived threads that
 * each lock and unlock both kinds is what it was before them. CPU-bound:
 * 2.5 s plain, 7.4 s under ASan and 8.9 s under TSan on a loaded 2-core
 * box; hence 120 s. */
TH_CASE_T(composite_records_do_not_outlive_their_holds, 120, "") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m[2];
  composite x = {0};
  CHECK_OK(dlock_mutex_new(c, "cm0", &m[0]));
  CHECK_OK(dlock_mutex_new(c, "cm1", &m[1]));
  CHECK_OK(dlock_rwlock_new(c, "crw", &x.rw));
  CHECK_OK(dlock_multilock_new(m, 2, &x.ml));
  composite_threads(&x, 50); /* warm-up: buffers, caches, thread stacks */
  size_t before = heap_in_use();
  enum { N = 2000 };
  composite_threads(&x, N);
  size_t after = heap_in_use();
  CHECK_EQ(atomic_load(&x.fails), 0);
  long long grew = (long long)after - (long long)before;
  printf("heap after %d threads: %+lld bytes\n", N, grew);
  /* One record left per thread would be >= 100 bytes a thread and kind. */
  CHECK_MSG(grew < 64LL * 1024, "the heap grew by %lld bytes (%lld a thread)",
            grew, grew / N);
  /* A hold still alive keeps its record, and the objects still work. */
  CHECK_OK(dlock_rwlock_rdlock(x.rw));
  CHECK_RC(dlock_rwlock_wrlock(x.rw), DLOCK_EDEADLK);
  CHECK_OK(dlock_rwlock_unlock(x.rw));
  CHECK_OK(dlock_rwlock_wrlock(x.rw));
  CHECK_OK(dlock_rwlock_rdlock(x.rw));
  CHECK_OK(dlock_rwlock_unlock(x.rw));
  CHECK_OK(dlock_rwlock_unlock(x.rw));
  CHECK_RC(dlock_rwlock_unlock(x.rw), DLOCK_EPERM);
  CHECK_OK(dlock_multilock_lock(x.ml));
  CHECK_OK(dlock_multilock_lock(x.ml));
  CHECK_OK(dlock_multilock_unlock(x.ml));
  CHECK_OK(dlock_multilock_unlock(x.ml));
  CHECK_RC(dlock_multilock_unlock(x.ml), DLOCK_EPERM);
  CHECK_EQ(dlock_client_hold_records(c), 0);
  dlock_multilock_free(x.ml);
  dlock_rwlock_free(x.rw);
  dlock_mutex_free(m[0]);
  dlock_mutex_free(m[1]);
  dlock_client_free(c);
}

typedef struct churn {
  dlock_mutex *m;
  int fails;
  unsigned seed;
  char first[300]; /* what the first failed call said */
} churn;

static void churn_failed(churn *ch, const char *call, int rc, int64_t held) {
  if (ch->fails++ == 0)
    snprintf(ch->first, sizeof ch->first, "%s after %lld ms held: %s %s", call,
             (long long)held, dlock_err_name(rc), dlock_last_error());
}

static void *churn_thread(void *arg) {
  churn *ch = arg;
  for (int i = 0; i < 40; i++) {
    int rc = dlock_mutex_lock(ch->m);
    if (rc != 0) {
      churn_failed(ch, "lock", rc, 0);
      continue;
    }
    int64_t t0 = th_now_ms();
    th_sleep_ms((int64_t)(rand_r(&ch->seed) % 625));
    if ((rc = dlock_mutex_unlock(ch->m)) != 0)
      churn_failed(ch, "unlock", rc, th_now_ms() - t0);
  }
  return NULL;
}

/* Issue 10: a renewal that finds the key gone because this thread's unlock
 * just deleted it is not a loss (old code: 10 reports in 480 unlocks). The
 * replies come back through a proxy that holds them 40 ms, so the window
 * between the unlock running on the server and its thread hearing of it
 * is wide; holds last up to 625 ms, so a renewal (every 500 ms) falls into
 * that window often (the old code: 3-6 reports a run). The lease is 1.5 s:
 * with 600 ms (holds up to 250 ms), one call in one make test-stress run
 * failed without a loss report -- most likely an unlock whose reply came
 * past the local deadline under load (ELOST, a true answer, not this
 * case's subject); a failing call now prints its error. */
TH_CASE_T(no_loss_report_for_unlocked_locks, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  th_proxy_reply_delay(p, 40);
  dlock_client *c = client_at(th_proxy_url(p), 1500, 3000);
  enum { N = 6 };
  churn ch[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "churn%d", i);
    ch[i].fails = 0;
    ch[i].seed = (unsigned)i + 1;
    CHECK_OK(dlock_mutex_new(c, name, &ch[i].m));
    pthread_create(&t[i], NULL, churn_thread, &ch[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    dlock_mutex_free(ch[i].m);
  }
  CHECK_EQ(atomic_load(&g_lost_count), 0);
  for (int i = 0; i < N; i++)
    CHECK_MSG(ch[i].fails == 0, "thread %d: %d failed calls; the first: %s", i,
              ch[i].fails, ch[i].first);
  dlock_client_free(c);
}

/* Issue 10: an ACL user without SUBSCRIBE is told so when it has to wait
 * (old code: it waited silently until the holder's lease ran out). Its
 * single attempts still work. */
TH_CASE(acl_user_without_subscribe_is_told) {
  th_redis *r = th_redis_new(1, "user limited on >pw ~* &* +@all -subscribe\n");
  char url[160];
  snprintf(url, sizeof url, "redis://limited:pw@127.0.0.1:%d", r->port);
  dlock_client *ca = client_at(url, 0, 0), *cb = th_client(r);
  dlock_mutex *ma, *mb;
  dlock_sem *s;
  CHECK_OK(dlock_mutex_new(ca, "acl", &ma));
  CHECK_OK(dlock_mutex_new(cb, "acl", &mb));
  CHECK_OK(dlock_mutex_trylock(ma));
  CHECK_OK(dlock_mutex_unlock(ma));
  CHECK_OK(dlock_mutex_lock(mb));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_mutex_timedlock(ma, 20000, -1), DLOCK_EAUTH);
  CHECK_MSG(th_now_ms() - t0 < 10000, "took %lld ms",
            (long long)(th_now_ms() - t0));
  CHECK_MSG(strstr(dlock_last_error(), "SUBSCRIBE") &&
                strstr(dlock_last_error(), "NOPERM"),
            "message: %s", dlock_last_error());
  /* The same for the kinds without hand-over. */
  CHECK_OK(dlock_sem_new(ca, "acl-sem", &s));
  CHECK_RC(dlock_sem_timedwait(s, 20000), DLOCK_EAUTH);
  dlock_sem_free(s);
  CHECK_OK(dlock_mutex_unlock(mb));
  CHECK_OK(dlock_mutex_trylock(ma));
  CHECK_OK(dlock_mutex_unlock(ma));
  dlock_mutex_free(ma);
  dlock_mutex_free(mb);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

/* Sum of the calls of EVAL and EVALSHA the server has run. */
static long long script_calls(th_redis *r) {
  redisReply *x = th_cmd(r, "INFO commandstats");
  long long n = 0;
  for (const char *p = x->str; (p = strstr(p, "cmdstat_eval")) != NULL;) {
    const char *c = strstr(p, "calls=");
    if (c)
      n += atoll(c + 6);
    p += 12;
  }
  freeReplyObject(x);
  return n;
}

/* A client for a proxy that silences its connections: a call on a
 * silenced connection times out after 200 ms and is re-sent on a new one. */
static dlock_client *lossy_client(th_proxy *p) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = th_proxy_url(p);
  /* A lost reply costs one command timeout; the re-send's new connection
   * must pass its handshake within the same timeout, which 200 ms did not
   * always allow on a loaded machine (CI: "handshake: no reply within 200
   * ms"). A handshake that fails sends no script: the counts stay exact. */
  cfg.command_timeout_ms = 1000;
  cfg.retry_attempts = 4;
  cfg.retry_interval_ms = 20;
  dlock_client *c = NULL;
  int rc = dlock_client_new(&cfg, &c);
  if (rc)
    th_fail(__FILE__, __LINE__, "dlock_client_new: %s", dlock_last_error());
  return c;
}

/* 9.3: a semaphore post, a trywait, a latch count-down and an init whose
 * first copy runs on the server but whose reply is lost are re-sent by the
 * retry policy (two runs on the server) and must count once (old code:
 * 5 -> 7 on post, 7 -> 5 on trywait, a latch of 3 at 1 after one
 * count-down, and an init answered "already initialised" by its own
 * re-send). */
TH_CASE(lost_replies_count_once_in_semaphores_and_latches) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  dlock_client *cb = th_client(r), *cl = lossy_client(p);
  dlock_sem *s, *sl, *s2;
  dlock_latch *l, *ll;
  CHECK_OK(dlock_sem_new(cb, "once-sem", &s));
  CHECK_OK(dlock_sem_new(cl, "once-sem", &sl));
  CHECK_OK(dlock_sem_new(cl, "once-sem2", &s2));
  CHECK_OK(dlock_latch_new(cb, "once-latch", &l));
  CHECK_OK(dlock_latch_new(cl, "once-latch", &ll));
  CHECK_OK(dlock_sem_init(s, 5));
  CHECK_OK(dlock_latch_init(l, 3));
  /* Load the scripts through the proxy while replies still flow, so each
   * lossy call below is one EVALSHA per copy. */
  CHECK_OK(dlock_sem_post(sl));
  CHECK_OK(dlock_sem_trywait(sl));
  CHECK_EQ(th_get_ll(r, "once-sem"), 5);

  th_proxy_silence(p);
  long long before = script_calls(r);
  CHECK_OK(dlock_sem_post(sl));
  CHECK_EQ(script_calls(r) - before, 2); /* really re-sent */
  CHECK_EQ(th_get_ll(r, "once-sem"), 6);
  th_proxy_silence(p);
  CHECK_OK(dlock_sem_trywait(sl));
  CHECK_EQ(th_get_ll(r, "once-sem"), 5);
  th_proxy_silence(p);
  CHECK_OK(dlock_latch_count_down(ll));
  CHECK_EQ(th_get_ll(r, "once-latch"), 2);
  th_proxy_silence(p);
  CHECK_OK(dlock_sem_init(s2, 4));
  CHECK_EQ(th_get_ll(r, "once-sem2"), 4);
  /* Counting goes on normally afterwards. */
  CHECK_OK(dlock_latch_count_down(ll));
  CHECK_EQ(th_get_ll(r, "once-latch"), 1);
  CHECK_OK(dlock_sem_trywait(sl));
  CHECK_EQ(th_get_ll(r, "once-sem"), 4);
  dlock_sem_free(s2);
  dlock_sem_free(s);
  dlock_sem_free(sl);
  dlock_latch_free(l);
  dlock_latch_free(ll);
  dlock_client_free(cb);
  dlock_client_free(cl);
}

/* Issue 25.7: renewals never wait behind the client-info write. With a
 * replica that stopped acknowledging (SIGSTOP) and sync_replicas set, the
 * info key's write used to carry the WAIT and take sync_timeout_ms, be due
 * again at once and go first: no renewal ran and a watchdog hold of a
 * 1.5 s lease expired (old code: lost within the first 2 leases). */
TH_CASE_T(watchdog_renews_while_replicas_lag, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  th_redis *rep = th_replica_new(r);
  int mult = th_timeout_mult();
  atomic_store(&g_lost_count, 0);
  atomic_store(&g_lost_at, 0);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.watchdog_timeout_ms = 1500 * mult; /* a renewal every 500 ms */
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 1000 * mult; /* > the renewal period */
  cfg.command_timeout_ms = 1000 * mult;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(c, "lag-lock", &m));
  CHECK_OK(dlock_mutex_lock(m)); /* confirmed by the replica */
  /* Read holds have a renewal of their own (one script each): it must not
   * sit out a WAIT either. */
  enum { NRD = 3 };
  dlock_rwlock *rw[NRD];
  for (int i = 0; i < NRD; i++) {
    char name[32];
    snprintf(name, sizeof name, "lag-rw-%d", i);
    CHECK_OK(dlock_rwlock_new(c, name, &rw[i]));
    CHECK_OK(dlock_rwlock_rdlock(rw[i]));
  }
  th_redis_pause(rep);
  /* Two leases: without renewals the key is gone after one. */
  int64_t until = th_now_ms() + 2L * cfg.watchdog_timeout_ms;
  while (th_now_ms() < until && atomic_load(&g_lost_count) == 0)
    th_sleep_ms(50);
  CHECK_EQ(atomic_load(&g_lost_count), 0);
  long long pttl = th_cmd_int(r, "PTTL lag-lock");
  printf("PTTL after two leases: %lld ms\n", pttl);
  CHECK(pttl > 0);
  CHECK_EQ(th_cmd_int(r, "HLEN lag-lock"), 1);
  for (int i = 0; i < NRD; i++) {
    char name[32];
    snprintf(name, sizeof name, "lag-rw-%d", i);
    CHECK(th_cmd_int(r, "PTTL %s", name) > 0);
  }
  th_redis_resume(rep);
  for (int i = 0; i < NRD; i++) {
    CHECK_OK(dlock_rwlock_unlock(rw[i]));
    dlock_rwlock_free(rw[i]);
  }
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* Issue 25.3: a once key outlives every copy the router sends. Each send
 * with a WAIT behind it (sync_replicas) may take command_timeout +
 * sync_timeout_ms, which the old TTL, (command_timeout + retry_interval) x
 * (retry_attempts + 1), left out: a post whose first reply was held past
 * that was re-sent after its once key had expired and counted twice (old
 * code: the late post moved the count 2 -> 4). */
TH_CASE_T(once_keys_outlive_slow_resends, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  th_replica_new(r); /* WAIT answers at once, unless its reply is held */
  fp_proxy *p = fp_new(NULL, r->port);
  int mult = th_timeout_mult();
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  /* A re-send's new connection must pass its handshake within one command
   * timeout on a loaded machine (see lossy_client). */
  cfg.command_timeout_ms = 1000 * mult;
  cfg.connect_timeout_ms = 1000 * mult;
  cfg.retry_attempts = 2;
  cfg.retry_interval_ms = 50;
  /* A send with a WAIT behind it waits for its reply up to command +
   * sync timeout, longer than the old TTL (3150 ms) here. */
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = 3000 * mult;
  cfg.call_timeout_ms = 0; /* the whole policy: its subject, the re-send */
  dlock_client *c = th_client_cfg(r, &cfg), *cb = th_client(r);
  dlock_sem *s, *sb;
  CHECK_OK(dlock_sem_new(c, "late-sem", &s));
  CHECK_OK(dlock_sem_new(cb, "late-sem", &sb));
  CHECK_OK(dlock_sem_init(sb, 1));
  CHECK_OK(dlock_sem_post(s)); /* loads the scripts through the proxy */
  CHECK_EQ(th_get_ll(r, "late-sem"), 2);
  int64_t old_ttl = (int64_t)(cfg.command_timeout_ms + cfg.retry_interval_ms) *
                    (cfg.retry_attempts + 1);
  /* The first copy runs at once; its reply (and the WAIT's) is held past
   * the read timeout, so the router re-sends it on a new connection after
   * command_timeout + sync_timeout + retry_interval > the old TTL. */
  fp_arm(p, "late-sem", FP_DELAY,
         cfg.command_timeout_ms + cfg.sync_timeout_ms + 1000 * mult);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_sem_post(s));
  int64_t took = th_now_ms() - t0;
  printf("post took %lld ms (old once TTL %lld ms)\n", (long long)took,
         (long long)old_ttl);
  CHECK(took > old_ttl); /* the re-send came after the old TTL */
  CHECK_EQ(th_get_ll(r, "late-sem"), 3);           /* counted once */
  CHECK_EQ(fp_wait_fired(p, 1, 10000L * mult), 0); /* the delay was used */
  dlock_sem_free(s);
  dlock_sem_free(sb);
  dlock_client_free(c);
  dlock_client_free(cb);
}

/* Issue 25.3, by construction: the router sends no copy once the first
 * send is older than the once key's window, however the time passed. A
 * client process stopped (SIGSTOP: a long GC-like stall, a swapped-out
 * process) while it waits for a post's reply, until the post's once key
 * has expired, then resumed: its read times out and the retry policy
 * would re-send -- the router must refuse (DLOCK_ECONN, "not re-sent")
 * and the post counts once (old code: it re-sent and counted twice). */
typedef struct stall_arg {
  int fd[2]; /* the proxy's URL comes through it (made after the fork) */
  int mult;
} stall_arg;

static int stalled_post(void *arg) {
  stall_arg *a = arg;
  char url[128];
  size_t got = 0;
  ssize_t n;
  close(a->fd[1]);
  while (got < sizeof url - 1 &&
         (n = read(a->fd[0], url + got, sizeof url - 1 - got)) > 0)
    got += (size_t)n;
  url[got] = '\0';
  if (got == 0)
    return 4;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = url;
  cfg.command_timeout_ms = 1000 * a->mult; /* the parent stops us in it */
  cfg.connect_timeout_ms = 100 * a->mult;
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 50;
  cfg.sync_replicas = 0;
  cfg.call_timeout_ms = 0; /* the resend window decides, not the bound */
  dlock_client *c = NULL;
  dlock_sem *s = NULL;
  if (dlock_client_new(&cfg, &c) || dlock_sem_new(c, "stall-sem", &s))
    return 3;
  int rc = dlock_sem_post(s);
  printf("post in the stopped process: %s: %s\n", dlock_err_name(rc),
         dlock_last_error());
  fflush(stdout);
  dlock_sem_free(s);
  dlock_client_free(c);
  if (rc == DLOCK_ECONN && strstr(dlock_last_error(), "not re-sent"))
    return 0;
  return rc == 0 ? 1 : 2;
}

static long long once_keys(th_redis *r) {
  redisReply *x = th_cmd(r, "KEYS dlock_once*");
  long long n = x && x->type == REDIS_REPLY_ARRAY ? (long long)x->elements : -1;
  if (x)
    freeReplyObject(x);
  return n;
}

TH_CASE_T(router_stops_resending_when_once_key_may_be_gone, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  stall_arg a = {{fds[0], fds[1]}, th_timeout_mult()};
  pid_t w = th_fork(stalled_post, &a); /* before the proxy's threads */
  close(fds[0]);
  fp_proxy *p = fp_new(NULL, r->port);
  freeReplyObject(th_cmd(r, "SET stall-sem 1"));
  /* The post's reply is held far past its read timeout. */
  fp_arm(p, "stall-sem", FP_DELAY, 120000);
  const char *url = fp_url(p);
  CHECK_EQ(write(fds[1], url, strlen(url)), (long long)strlen(url));
  close(fds[1]);
  /* Stop the worker as soon as its post has run (it then waits up to one
   * command timeout, 1 s, for the reply the proxy holds). */
  int64_t until = th_now_ms() + 10000L * a.mult;
  while (th_get_ll(r, "stall-sem") != 2 && th_now_ms() < until)
    th_sleep_ms(5);
  CHECK_EQ(kill(w, SIGSTOP), 0);
  CHECK_EQ(th_get_ll(r, "stall-sem"), 2);
  CHECK_EQ(once_keys(r), 1);
  /* Until the post's once key has expired (its TTL, ~10 s here). */
  int64_t stopped = th_now_ms();
  until = stopped + 30000L * a.mult;
  while (once_keys(r) != 0 && th_now_ms() < until)
    th_sleep_ms(50);
  printf("once key expired %lld ms after the stop\n",
         (long long)(th_now_ms() - stopped));
  CHECK_EQ(once_keys(r), 0);
  CHECK_EQ(kill(w, SIGCONT), 0);
  CHECK_EQ(th_wait(w, 20000L * a.mult), 0); /* ECONN, "not re-sent" */
  CHECK_EQ(th_get_ll(r, "stall-sem"), 2);   /* counted once */
}

/* 9.3: the once keys of a busy object do not pile up: each change deletes
 * the previous one's, so 2,000 posts and acquisitions leave one. */
TH_CASE(once_keys_do_not_pile_up) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_sem *s;
  dlock_latch *l;
  CHECK_OK(dlock_sem_new(c, "pile", &s));
  CHECK_OK(dlock_latch_new(c, "pile-latch", &l));
  CHECK_OK(dlock_sem_init(s, 1));
  CHECK_OK(dlock_latch_init(l, 1000000));
  for (int i = 0; i < 1000; i++) {
    CHECK_OK(dlock_sem_trywait(s));
    CHECK_OK(dlock_sem_post(s));
    CHECK_OK(dlock_latch_count_down(l));
  }
  /* Failed attempts write nothing. */
  CHECK_OK(dlock_sem_trywait(s));
  CHECK_RC(dlock_sem_trywait(s), DLOCK_EBUSY);
  long long keys = th_cmd_int(r, "DBSIZE");
  /* pile, pile-latch, and the last change's once key of each object */
  CHECK_MSG(keys <= 4, "%lld keys left", keys);
  dlock_sem_free(s);
  dlock_latch_free(l);
  dlock_client_free(c);
}

/* Issue 26: force unlock deletes a hash only if every field is a holder's
 * "<client id>:<thread id>" (Redisson's RLock/RFairLock layout); a user's
 * hash, or a read-write lock's (field "mode"), is refused and left alone
 * (old code: deleted whatever hash was under the name). */
TH_CASE(force_unlock_refuses_hashes_that_are_not_locks) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  const char *uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  freeReplyObject(th_cmd(r, "HSET user name alice age 3"));
  freeReplyObject(th_cmd(r, "HSET mixed %s:7 1 note x", uuid));
  freeReplyObject(th_cmd(r, "HSET shortid 0f1e2d3c:7 1"));
  const char *refused[] = {"user", "mixed", "shortid", "rw"};
  dlock_rwlock *rw;
  CHECK_OK(dlock_rwlock_new(c, "rw", &rw));
  CHECK_OK(dlock_rwlock_rdlock(rw));
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    dlock_mutex *m[3];
    CHECK_OK(dlock_mutex_new(c, refused[i], &m[0]));
    CHECK_OK(dlock_mutex_new_fair(c, refused[i], &m[1]));
    CHECK_OK(dlock_mutex_new_fenced(c, refused[i], &m[2]));
    for (int k = 0; k < 3; k++) {
      CHECK_RC(dlock_mutex_force_unlock(m[k]), DLOCK_EREDIS);
      CHECK_MSG(strstr(dlock_last_error(), "not a lock") &&
                    strstr(dlock_last_error(), refused[i]),
                "%s, kind %d: %s", refused[i], k, dlock_last_error());
      dlock_mutex_free(m[k]);
    }
    redisReply *x = th_cmd(r, "EXISTS %s", refused[i]);
    CHECK_MSG(x->type == REDIS_REPLY_INTEGER && x->integer == 1,
              "'%s' was deleted", refused[i]);
    freeReplyObject(x);
  }
  printf("refused: %s\n", dlock_last_error());
  CHECK_OK(dlock_rwlock_unlock(rw));
  dlock_rwlock_free(rw);
  /* Locks are still deleted: Redisson's (a Java thread id), and dlock's
   * plain, fair and fenced ones. */
  freeReplyObject(th_cmd(r, "HSET redisson %s:9223372036854775807 2", uuid));
  dlock_mutex *rm;
  CHECK_OK(dlock_mutex_new(c, "redisson", &rm));
  CHECK_EQ(dlock_mutex_force_unlock(rm), 1);
  dlock_mutex_free(rm);
  for (int k = 0; k < 3; k++) {
    dlock_mutex *m;
    CHECK_OK(k == 0   ? dlock_mutex_new(c, "held", &m)
             : k == 1 ? dlock_mutex_new_fair(c, "held", &m)
                      : dlock_mutex_new_fenced(c, "held", &m));
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_OK(dlock_mutex_lock(m));
    CHECK_EQ(dlock_mutex_force_unlock(m), 1);
    CHECK_EQ(dlock_mutex_force_unlock(m), 0);
    CHECK_RC(dlock_mutex_unlock(m), DLOCK_ELOST);
    dlock_mutex_free(m);
  }
  dlock_client_free(c);
}

/* 9.3: a force unlock is sent at most once -- a re-send could delete a lock
 * that another owner took in between (old code: three runs). Force unlock
 * and is_locked refuse a key that is not a lock. */
TH_CASE(force_unlock_is_sent_once_and_only_to_locks) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  dlock_client *cb = th_client(r), *cl = lossy_client(p);
  dlock_mutex *mb, *ml;
  CHECK_OK(dlock_mutex_new(cb, "forced", &mb));
  CHECK_OK(dlock_mutex_new(cl, "forced", &ml));
  dlock_mutex *load;
  CHECK_OK(dlock_mutex_new(cl, "forced-load", &load));
  CHECK_EQ(dlock_mutex_force_unlock(load), 0); /* loads the script */
  dlock_mutex_free(load);
  CHECK_OK(dlock_mutex_lock(mb));
  /* cb's watchdog thread publishes the hold's start once it has lasted
   * 100 ms (an info write, a script call of its own): let it happen before
   * counting, the next one is a renewal period away. */
  char owner[128];
  CHECK_OK(dlock_mutex_owner(mb, owner, sizeof owner));
  long long since = 0;
  int64_t until = th_now_ms() + 5000L * th_timeout_mult();
  while (dlock_hold_since_query(cb, owner, "forced", &since) != 1 &&
         th_now_ms() < until)
    th_sleep_ms(10);
  CHECK_MSG(since > 0, "the hold's start was never published");
  th_proxy_silence(p);
  long long before = script_calls(r);
  CHECK_RC(dlock_mutex_force_unlock(ml), DLOCK_ECONN);
  CHECK_EQ(script_calls(r) - before, 1);
  CHECK_EQ(dlock_mutex_is_locked(ml), 0); /* it did run, once */

  dlock_mutex *ms, *mf;
  freeReplyObject(th_cmd(r, "SET notalock precious"));
  CHECK_OK(dlock_mutex_new(cb, "notalock", &ms));
  CHECK_OK(dlock_mutex_new_fair(cb, "notalock", &mf));
  CHECK_RC(dlock_mutex_force_unlock(ms), DLOCK_EREDIS);
  CHECK_MSG(strstr(dlock_last_error(), "not a lock"), "message: %s",
            dlock_last_error());
  CHECK_RC(dlock_mutex_force_unlock(mf), DLOCK_EREDIS);
  CHECK_RC(dlock_mutex_is_locked(ms), DLOCK_EREDIS);
  CHECK_MSG(strstr(dlock_last_error(), "not a lock"), "message: %s",
            dlock_last_error());
  redisReply *x = th_cmd(r, "GET notalock");
  CHECK_MSG(x->type == REDIS_REPLY_STRING && strcmp(x->str, "precious") == 0,
            "the string was touched");
  freeReplyObject(x);
  dlock_mutex_free(ms);
  dlock_mutex_free(mf);
  dlock_mutex_free(mb);
  dlock_mutex_free(ml);
  dlock_client_free(cb);
  dlock_client_free(cl);
}

/* 9.7: a lease Redis would refuse (or that overflows the local deadline)
 * is refused before anything is sent, in every kind (old code: the key was
 * written, PEXPIRE failed, and it stayed with no TTL and no owner). */
TH_CASE(lease_too_long_is_refused_before_sending) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m, *f, *fe;
  dlock_rwlock *rw;
  dlock_multilock *ml;
  dlock_redlock *rl;
  CHECK_OK(dlock_mutex_new(c, "long", &m));
  CHECK_OK(dlock_mutex_new_fair(c, "long-fair", &f));
  CHECK_OK(dlock_mutex_new_fenced(c, "long-fenced", &fe));
  CHECK_OK(dlock_rwlock_new(c, "long-rw", &rw));
  CHECK_OK(dlock_multilock_new(&m, 1, &ml));
  CHECK_OK(dlock_redlock_new(&c, 1, "long-rl", &rl));
  const long long bad[2] = {LLONG_MAX, DLOCK_LEASE_MAX_MS + 1};
  for (int i = 0; i < 2; i++) {
    CHECK_RC(dlock_mutex_timedlock(m, 0, bad[i]), DLOCK_EINVAL);
    CHECK_MSG(strstr(dlock_last_error(), "DLOCK_LEASE_MAX_MS"), "message: %s",
              dlock_last_error());
    CHECK_RC(dlock_mutex_timedlock(f, 0, bad[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_mutex_timedlock(fe, 0, bad[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_rwlock_timedrdlock(rw, 0, bad[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_rwlock_timedwrlock(rw, 0, bad[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_multilock_timedlock(ml, 0, bad[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_redlock_timedlock(rl, 0, bad[i]), DLOCK_EINVAL);
  }
  CHECK_EQ(th_cmd_int(r, "DBSIZE"), 0);
  /* The longest accepted lease works and is the key's TTL. */
  CHECK_OK(dlock_mutex_timedlock(m, 0, DLOCK_LEASE_MAX_MS));
  long long ttl = th_cmd_int(r, "PTTL long");
  CHECK_MSG(ttl > DLOCK_LEASE_MAX_MS - 60000, "PTTL %lld", ttl);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_redlock_free(rl);
  dlock_multilock_free(ml);
  dlock_rwlock_free(rw);
  dlock_mutex_free(fe);
  dlock_mutex_free(f);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* 9.7: an ACL user that may not PEXPIRE cannot take a lock of any kind, and
 * the failed acquire leaves no key behind (old code: the field was written,
 * PEXPIRE failed, the key stayed forever with PTTL -1). */
TH_CASE(acl_user_without_pexpire_leaves_no_key) {
  th_redis *r = th_redis_new(1, "user nopx on >pw ~* &* +@all -pexpire\n");
  char url[160];
  snprintf(url, sizeof url, "redis://nopx:pw@127.0.0.1:%d", r->port);
  dlock_client *c = client_at(url, 0, 0);
  dlock_mutex *m, *f, *fe;
  dlock_rwlock *rw;
  dlock_redlock *rl;
  CHECK_OK(dlock_mutex_new(c, "nopx", &m));
  CHECK_OK(dlock_mutex_new_fair(c, "nopx-fair", &f));
  CHECK_OK(dlock_mutex_new_fenced(c, "nopx-fenced", &fe));
  CHECK_OK(dlock_rwlock_new(c, "nopx-rw", &rw));
  CHECK_OK(dlock_redlock_new(&c, 1, "nopx-rl", &rl));
  CHECK_RC(dlock_mutex_trylock(m), DLOCK_EREDIS);
  CHECK_MSG(strstr(dlock_last_error(), "can't run this command"), "message: %s",
            dlock_last_error());
  CHECK_RC(dlock_mutex_timedlock(m, 0, 5000), DLOCK_EREDIS);
  CHECK_RC(dlock_mutex_trylock(f), DLOCK_EREDIS);
  CHECK_RC(dlock_mutex_trylock(fe), DLOCK_EREDIS);
  CHECK_RC(dlock_rwlock_tryrdlock(rw), DLOCK_EREDIS);
  CHECK_RC(dlock_rwlock_trywrlock(rw), DLOCK_EREDIS);
  int rc = dlock_redlock_trylock(rl);
  CHECK_MSG(rc != 0, "redlock acquired without PEXPIRE");
  const char *names[] = {"nopx", "nopx-fair", "nopx-fenced", "nopx-rw",
                         "nopx-rl"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    redisReply *x = th_cmd(r, "EXISTS %s", names[i]);
    CHECK_MSG(x->integer == 0, "'%s' was left behind (PTTL %lld)", names[i],
              th_cmd_int(r, "PTTL %s", names[i]));
    freeReplyObject(x);
  }
  dlock_redlock_free(rl);
  dlock_rwlock_free(rw);
  dlock_mutex_free(fe);
  dlock_mutex_free(f);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

/* 9.8: a reentrant acquire with a shorter lease, or a watchdog renewal of
 * a key that a longer fixed hold of the same thread needs, never shortens
 * the key's TTL (old code: lock() then timedlock(0, 200) cut the TTL to
 * 200 ms and another client took the lock; a watchdog renewal cut a 60 s
 * hold to the watchdog timeout). */
TH_CASE_T(reentrant_shorter_lease_never_shortens_the_ttl, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *ca = client_at(r->url, 3000, 0), *cb = th_client(r);
  const char *kinds[] = {"plain", "fair", "fenced"};
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "reent-%s", kinds[k]);
    dlock_mutex *ma, *mb;
    int (*mk)(dlock_client *, const char *, dlock_mutex **) =
        k == 0   ? dlock_mutex_new
        : k == 1 ? dlock_mutex_new_fair
                 : dlock_mutex_new_fenced;
    CHECK_OK(mk(ca, name, &ma));
    CHECK_OK(mk(cb, name, &mb));
    CHECK_OK(dlock_mutex_lock(ma));
    CHECK_OK(dlock_mutex_timedlock(ma, 0, 200));
    long long ttl = th_cmd_int(r, "PTTL %s", name);
    CHECK_MSG(ttl > 1000, "%s: PTTL %lld after the inner acquire", kinds[k],
              ttl);
    th_sleep_ms(400);
    CHECK_RC(dlock_mutex_trylock(mb), DLOCK_EBUSY);
    CHECK_OK(dlock_mutex_unlock(ma));
    CHECK_RC(dlock_mutex_trylock(mb), DLOCK_EBUSY); /* outer hold remains */
    CHECK_OK(dlock_mutex_unlock(ma));
    CHECK_OK(dlock_mutex_trylock(mb));
    CHECK_OK(dlock_mutex_unlock(mb));
    dlock_mutex_free(ma);
    dlock_mutex_free(mb);
  }
  /* A long fixed hold and an inner watchdog hold: renewals (every second)
   * keep the longer TTL. */
  dlock_mutex *m;
  CHECK_OK(dlock_mutex_new(ca, "reent-long", &m));
  CHECK_OK(dlock_mutex_timedlock(m, 0, 60000));
  CHECK_OK(dlock_mutex_lock(m));
  th_sleep_ms(2500);
  long long ttl = th_cmd_int(r, "PTTL reent-long");
  CHECK_MSG(ttl > 50000, "PTTL %lld after renewals", ttl);
  CHECK_OK(dlock_mutex_unlock(m));
  ttl = th_cmd_int(r, "PTTL reent-long");
  CHECK_MSG(ttl > 50000, "PTTL %lld after the inner unlock", ttl);
  CHECK_OK(dlock_mutex_unlock(m));
  dlock_mutex_free(m);
  dlock_client_free(ca);
  dlock_client_free(cb);
}

typedef struct {
  dlock_mutex *m;
  atomic_int *stop;
  long ops;
} killed_worker;

static void *killed_worker_main(void *arg) {
  killed_worker *w = arg;
  while (!atomic_load(w->stop)) {
    if (dlock_mutex_timedlock(w->m, 200, 5000) == 0) {
      (void)dlock_mutex_unlock(w->m);
      w->ops++;
    }
  }
  return NULL;
}

/* Issue 10: the server killing connections while 8 threads lock and
 * unlock must never raise SIGPIPE in the host (old code: the process died
 * of SIGPIPE, writes in dlock__write_all and hiredis). The harness ignores
 * SIGPIPE; this case restores the default, as most programs have it. */
TH_CASE_T(killed_connections_never_raise_sigpipe, 120, "slow") {
  signal(SIGPIPE, SIG_DFL);
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->url;
  cfg.retry_attempts = 5;
  cfg.retry_interval_ms = 5;
  dlock_client *c = NULL;
  CHECK_OK(dlock_client_new(&cfg, &c));
  enum { N = 8 };
  killed_worker w[N];
  pthread_t t[N];
  atomic_int stop = 0;
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "pipe%d", i % 3);
    w[i].stop = &stop;
    w[i].ops = 0;
    CHECK_OK(dlock_mutex_new(c, name, &w[i].m));
    pthread_create(&t[i], NULL, killed_worker_main, &w[i]);
  }
  redisContext *killer = th_redis_raw(r);
  int64_t end = th_now_ms() + 3000;
  int kills = 0;
  while (th_now_ms() < end) {
    redisReply *x = redisCommand(killer, "CLIENT KILL TYPE normal SKIPME yes");
    if (x)
      freeReplyObject(x);
    kills++;
    th_sleep_ms(10);
  }
  atomic_store(&stop, 1);
  long ops = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    ops += w[i].ops;
    dlock_mutex_free(w[i].m);
  }
  redisFree(killer);
  fprintf(stderr, "%d kills, %ld lock/unlock pairs, alive\n", kills, ops);
  CHECK_MSG(ops > 0, "no operation succeeded");
  dlock_client_free(c);
}

/* Issue 10: unlock latches piled up (old code: 5,000 lock/unlock cycles
 * left 5,000 latch keys alive for ~18 s each). Since issue 25.3 an unlock
 * is idempotent by state and writes no latch at all: only a final release
 * sent more than once leaves a tombstone (test_ambiguous.c). */
/* Unlock latch keys are never left behind (Redisson deletes its own; the
 * scripts write none: issue 26 saw 1,000 async pairs leave 1,000 alive for
 * 18 s). The mutex through both clients; the fair lock and the rwlock
 * (blocking only) too. */
static void latches_body(int kind) {
  th_redis *r = th_redis_new(0, NULL);
  th_drive *d = th_drive_at(kind, r->url);
  for (int i = 0; i < 5000; i++) {
    CHECK_OK(th_drive_lock(d, "latchy", 1, -1, -1));
    CHECK_OK(th_drive_unlock(d, "latchy", 1));
  }
  /* The lock is gone; at most the client's info key may be left. */
  CHECK_MSG(th_cmd_int(r, "DBSIZE") <= 1, "%s: %lld keys left",
            th_drive_kind(d), th_cmd_int(r, "DBSIZE"));
  if (kind == TH_DRIVE_BLOCKING) {
    dlock_client *c = th_client(r);
    dlock_mutex *f;
    dlock_rwlock *rw;
    CHECK_OK(dlock_mutex_new_fair(c, "latchy-fair", &f));
    CHECK_OK(dlock_rwlock_new(c, "latchy-rw", &rw));
    for (int i = 0; i < 300; i++) {
      CHECK_OK(dlock_mutex_lock(f));
      CHECK_OK(dlock_mutex_unlock(f));
      CHECK_OK(dlock_rwlock_wrlock(rw));
      CHECK_OK(dlock_rwlock_unlock(rw));
      CHECK_OK(dlock_rwlock_rdlock(rw));
      CHECK_OK(dlock_rwlock_unlock(rw));
    }
    dlock_rwlock_free(rw);
    dlock_mutex_free(f);
    dlock_client_free(c);
  }
  redisReply *x = th_cmd(r, "KEYS redisson_unlock_latch*");
  size_t n = x->elements;
  freeReplyObject(x);
  CHECK_MSG(n == 0, "%s: %zu unlock latch keys alive", th_drive_kind(d), n);
  th_drive_free(d);
}

TH_CASE(unlock_latches_do_not_pile_up_blocking) {
  latches_body(TH_DRIVE_BLOCKING);
}
TH_CASE(unlock_latches_do_not_pile_up_async) { latches_body(TH_DRIVE_ASYNC); }

/* Issue 10: a multilock unlock that fails on one member (its path cut) can
 * be retried and then releases that member (old code: the multilock
 * record was decremented first, the retry said EPERM and the member stayed
 * locked and renewed for ever). */
TH_CASE(failed_multilock_unlock_can_be_retried) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  dlock_client *cp = lossy_client(p), *cd = th_client(r);
  dlock_mutex *a, *b;
  dlock_multilock *ml;
  CHECK_OK(dlock_mutex_new(cd, "ml-direct", &a));
  CHECK_OK(dlock_mutex_new(cp, "ml-proxied", &b));
  dlock_mutex *mem[2] = {a, b};
  CHECK_OK(dlock_multilock_new(mem, 2, &ml));
  CHECK_OK(dlock_multilock_lock(ml));
  th_proxy_blackhole(p, 1);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_ECONN);
  CHECK_MSG(strstr(dlock_last_error(), "ml-proxied"), "message: %s",
            dlock_last_error());
  CHECK_EQ(th_cmd_int(r, "EXISTS ml-direct"), 0);
  CHECK_EQ(th_cmd_int(r, "EXISTS ml-proxied"), 1);
  th_proxy_blackhole(p, 0);
  CHECK_OK(dlock_multilock_unlock(ml));
  CHECK_EQ(th_cmd_int(r, "EXISTS ml-proxied"), 0);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_EPERM);
  /* And it can be taken again. */
  CHECK_OK(dlock_multilock_trylock(ml));
  CHECK_OK(dlock_multilock_unlock(ml));
  dlock_multilock_free(ml);
  dlock_mutex_free(a);
  dlock_mutex_free(b);
  dlock_client_free(cp);
  dlock_client_free(cd);
}

static void *lock_forever(void *arg) {
  (void)dlock_mutex_lock(arg);
  return NULL;
}

/* A process that waits for "forked-wait" (queued for hand-over), then forks
 * a child that lives on for 5 s without exec. */
static int forking_waiter(void *arg) {
  th_redis *r = arg;
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->url;
  cfg.watchdog_timeout_ms = 10000;
  dlock_client *c = NULL;
  dlock_mutex *m = NULL;
  if (dlock_client_new(&cfg, &c) || dlock_mutex_new(c, "forked-wait", &m))
    return 2;
  th_wait_key(r, "forked-go", 15000); /* the parent holds the lock */
  pthread_t t;
  pthread_create(&t, NULL, lock_forever, m);
  th_wait_llen(r, "dlock_lock_queue:{forked-wait}", 1, 10000);
  pid_t g = fork();
  if (g == 0) {
    sleep(5);
    _exit(0);
  }
  freeReplyObject(th_cmd(r, "SET forked 1"));
  sleep(60);
  return 0;
}

/* Issue 10: a waiting process that forked (no exec) and then died must not
 * be handed the lock: its child must not keep the subscriber connection
 * alive (old code: the child held the socket, the server saw a live
 * subscriber, and the lock went to the dead waiter for its lease). */
TH_CASE_T(forked_then_killed_waiter_is_not_handed_the_lock, 120, "slow") {
  th_redis *r = th_redis_new(0, NULL);
  /* Forked before this process has a client (threads): see th_fork. */
  pid_t w = th_fork(forking_waiter, r);
  dlock_client *ch = th_client(r), *cn = th_client(r);
  dlock_mutex *mh, *mn;
  CHECK_OK(dlock_mutex_new(ch, "forked-wait", &mh));
  CHECK_OK(dlock_mutex_new(cn, "forked-wait", &mn));
  CHECK_OK(dlock_mutex_lock(mh));
  freeReplyObject(th_cmd(r, "SET forked-go 1"));
  int64_t t0 = th_now_ms();
  while (th_get_ll(r, "forked") != 1 && th_now_ms() - t0 < 15000)
    th_sleep_ms(10);
  CHECK_EQ(th_get_ll(r, "forked"), 1);
  kill(w, SIGKILL);
  th_wait(w, 10000);
  /* The server must see the waiter's subscriber go. Its EOF can reach the
   * server's event loop after an unlock sent now (then the grant goes to
   * the dead waiter, a race no client can close), so wait for it, bounded:
   * with the old code the fork child kept the socket open for 5 s. */
  t0 = th_now_ms();
  size_t subs = 1;
  while (th_now_ms() - t0 < 3000) {
    redisReply *ch_list =
        th_cmd(r, "PUBSUB CHANNELS dlock_grant__channel:{forked-wait}:*");
    subs = ch_list->elements;
    freeReplyObject(ch_list);
    if (subs == 0)
      break;
    th_sleep_ms(10);
  }
  CHECK_MSG(subs == 0, "the dead waiter's subscriber outlived it by %lld ms",
            (long long)(th_now_ms() - t0));
  CHECK_OK(dlock_mutex_unlock(mh));
  /* Free within a moment, not after the dead waiter's 10 s lease. */
  t0 = th_now_ms();
  int rc;
  while ((rc = dlock_mutex_trylock(mn)) == DLOCK_EBUSY &&
         th_now_ms() - t0 < 3000)
    th_sleep_ms(20);
  CHECK_MSG(rc == 0, "lock still held %lld ms after the unlock (%s)",
            (long long)(th_now_ms() - t0), dlock_err_name(rc));
  CHECK_OK(dlock_mutex_unlock(mn));
  dlock_mutex_free(mh);
  dlock_mutex_free(mn);
  dlock_client_free(ch);
  dlock_client_free(cn);
}

/* Issue 10: a Redlock object used in a fork child answers DLOCK_EFORK (old
 * code: lock blocked, free joined a thread of the parent). */
static int redlock_in_child(void *arg) {
  dlock_redlock *rl = arg;
  if (dlock_redlock_trylock(rl) != DLOCK_EFORK)
    return 3;
  if (dlock_redlock_unlock(rl) != DLOCK_EFORK)
    return 4;
  dlock_redlock_free(rl); /* must return */
  return 0;
}

TH_CASE(redlock_in_fork_child_is_efork) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->url;
  cfg.watchdog_timeout_ms = 300; /* the renewal thread is busy */
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_redlock *rl;
  CHECK_OK(dlock_redlock_new(&c, 1, "rl-fork", &rl));
  CHECK_OK(dlock_redlock_lock(rl));
  pid_t p = th_fork(redlock_in_child, rl);
  CHECK_EQ(th_wait(p, 10000), 0);
  CHECK_OK(dlock_redlock_unlock(rl));
  dlock_redlock_free(rl);
  dlock_client_free(c);
}

/* Issue 10: dlock_redlock_free while a watchdog Redlock is held and its
 * renewal rounds have votes in flight (one master blackholed: its votes
 * take the command timeout). free must wait for every vote thread,
 * including those of a round the renewal thread started as it was being
 * stopped (old code: waited before joining it; ASan saw the vote threads
 * use the freed object). */
TH_CASE(redlock_free_waits_for_renewal_votes) {
  enum { N = 3 };
  th_redis *r[N];
  th_proxy *p = NULL;
  dlock_client *c[N];
  for (int i = 0; i < N; i++) {
    r[i] = th_redis_new(1, NULL);
    dlock_config cfg;
    dlock_config_init(&cfg);
    if (i == 0) {
      p = th_proxy_new(r[i]->port);
      cfg.url = th_proxy_url(p);
    } else {
      cfg.url = r[i]->url;
    }
    cfg.watchdog_timeout_ms = 90; /* renewal rounds every 30 ms */
    cfg.command_timeout_ms = 150;
    cfg.retry_attempts = 0;
    CHECK_OK(dlock_client_new(&cfg, &c[i]));
  }
  for (int k = 0; k < 12; k++) {
    dlock_redlock *rl;
    CHECK_OK(dlock_redlock_new(c, N, "rl-free", &rl));
    th_proxy_blackhole(p, 0);
    CHECK_OK(dlock_redlock_lock(rl));
    th_proxy_blackhole(p, 1);
    th_sleep_ms(20 + 7 * k);
    int64_t t0 = th_now_ms();
    dlock_redlock_free(rl);
    CHECK_MSG(th_now_ms() - t0 < 5000, "free took %lld ms",
              (long long)(th_now_ms() - t0));
  }
  th_proxy_blackhole(p, 0);
  for (int i = 0; i < N; i++)
    dlock_client_free(c[i]);
}

/* Issue 10: lock objects freed after their client, one of them holding a
 * watchdog lock: no read or write of freed memory (old code: ASan saw
 * dlock_mutex_free read the freed client and dlock__wd_remove write into
 * it). Calls on such objects answer DLOCK_ECLOSED. */
TH_CASE(objects_may_be_freed_after_their_client) {
  th_redis *r = th_redis_new(0, NULL);
  dlock_client *c = th_client(r);
  dlock_mutex *m, *f;
  dlock_rwlock *rw;
  dlock_sem *s;
  dlock_latch *l;
  CHECK_OK(dlock_mutex_new(c, "after", &m));
  CHECK_OK(dlock_mutex_new_fair(c, "after-fair", &f));
  CHECK_OK(dlock_rwlock_new(c, "after-rw", &rw));
  CHECK_OK(dlock_sem_new(c, "after-sem", &s));
  CHECK_OK(dlock_latch_new(c, "after-latch", &l));
  CHECK_OK(dlock_mutex_lock(m));
  CHECK_OK(dlock_mutex_timedlock(f, 0, 5000));
  CHECK_OK(dlock_rwlock_rdlock(rw));
  dlock_client_free(c);
  CHECK_RC(dlock_mutex_unlock(m), DLOCK_ECLOSED);
  CHECK_RC(dlock_mutex_trylock(f), DLOCK_ECLOSED);
  CHECK_RC(dlock_sem_post(s), DLOCK_ECLOSED);
  CHECK_RC(dlock_latch_count_down(l), DLOCK_ECLOSED);
  dlock_latch_free(l);
  dlock_mutex_free(m);
  dlock_rwlock_free(rw);
  dlock_sem_free(s);
  dlock_mutex_free(f);
}

/* 9.1 for Redlock: a watchdog Redlock whose path to two of its three masters
 * is blackholed right after locking. The other client (direct paths) gets
 * the majority once those keys expire; the holder must have been told
 * first (old code: a renewal round could wait lease/20 past the deadline). */
TH_CASE_T(partitioned_redlock_holder_told_before_majority_is_taken, 120,
          "slow") {
  enum { N = 3 };
  th_redis *r[N];
  th_proxy *p[N];
  dlock_client *ca[N], *cb[N];
  for (int i = 0; i < N; i++) {
    r[i] = th_redis_new(1, NULL);
    p[i] = th_proxy_new(r[i]->port);
    ca[i] = client_at(th_proxy_url(p[i]), 3000, 1000);
    cb[i] = th_client(r[i]);
  }
  dlock_redlock *a, *b;
  CHECK_OK(dlock_redlock_new(ca, N, "rlpart", &a));
  CHECK_OK(dlock_redlock_new(cb, N, "rlpart", &b));
  CHECK_OK(dlock_redlock_lock(a));
  th_proxy_blackhole(p[0], 1);
  th_proxy_blackhole(p[1], 1);
  int64_t cut = th_now_ms(), got = -1;
  while (th_now_ms() - cut < 30000) {
    int rc = dlock_redlock_trylock(b);
    if (rc == 0) {
      got = th_now_ms();
      break;
    }
    th_sleep_ms(2);
  }
  CHECK_MSG(got > 0, "the other client never got the majority");
  long long lost_at = atomic_load(&g_lost_at);
  CHECK_MSG(lost_at > 0 && lost_at <= got,
            "holder told at %lld ms after the cut, the other client acquired "
            "at %lld ms: two owners",
            lost_at ? lost_at - cut : -1LL, (long long)(got - cut));
  long long left = -1;
  CHECK_RC(dlock_redlock_validity(a, &left), DLOCK_ELOST);
  CHECK_OK(dlock_redlock_unlock(b));
  dlock_redlock_free(a);
  dlock_redlock_free(b);
  for (int i = 0; i < N; i++) {
    dlock_client_free(ca[i]);
    dlock_client_free(cb[i]);
  }
}

TH_MAIN()

/* A reentrant acquire in flight while its hold is lost. The holder (1 s
 * watchdog lease) re-enters with a fixed 30 s lease on a connection that
 * has gone silent: the re-entry runs on the server (the key's TTL becomes
 * 30 s, so the key stays this owner's throughout), its reply is dropped.
 * Then the server becomes unreachable, the renewals go unconfirmed, the
 * local deadline passes and the holder is told; the path comes back and
 * the re-entry's re-sent copy is answered "held" -- after the loss. That
 * answer must not revive the lost hold: the call answers DLOCK_ELOST. The
 * old code recorded it (count 2) and said OK for a hold it had reported
 * lost (the simulator found the shape, issue 41: a lost hold back on the
 * watchdog list). Both clients. */
typedef struct reviver {
  th_redis *r;
  th_proxy *p;
  th_drive *d;
  int ran, told;
} reviver;

static void *reviver_thread(void *arg) {
  reviver *v = arg;
  int64_t end = th_now_ms() + 20000LL * th_timeout_mult();
  while (th_now_ms() < end && th_cmd_int(v->r, "PTTL re") < 5000)
    th_sleep_ms(2);
  v->ran = th_cmd_int(v->r, "PTTL re") >= 5000;
  th_proxy_unreachable(v->p, 1);
  while (th_now_ms() < end && th_drive_lost_count(v->d) < 1)
    th_sleep_ms(5);
  v->told = th_drive_lost_count(v->d) >= 1;
  th_proxy_unreachable(v->p, 0);
  return NULL;
}

static void late_reentry_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  th_proxy *p = th_proxy_new(r->port);
  int64_t cto = 4000LL * th_timeout_mult();
  dlock_config cfg = cfg_at(th_proxy_url(p), 1000, (int)cto);
  cfg.sync_replicas = 0; /* no INFO before the re-entry: only the script */
  cfg.call_timeout_ms = (int)(3 * cto);
  th_drive *d = th_drive_new(kind, &cfg);
  /* the re-entry's script loaded (a NOSCRIPT answer dropped by the silent
   * path would stop the first copy from running) */
  CHECK_OK(th_drive_lock(d, "warm", 1, 0, -1));
  CHECK_OK(th_drive_lock(d, "warm", 1, 0, 30000));
  CHECK_OK(th_drive_unlock(d, "warm", 1));
  CHECK_OK(th_drive_unlock(d, "warm", 1));
  CHECK_OK(th_drive_lock(d, "re", 1, 0, -1));
  reviver v = {r, p, d, 0, 0};
  th_proxy_silence(p);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, reviver_thread, &v), 0);
  int rc = th_drive_lock(d, "re", 1, 0, 30000);
  pthread_join(t, NULL);
  printf("%s: re-entry answered %s (%s), %d loss report(s)\n", th_drive_kind(d),
         dlock_err_name(rc), rc ? th_drive_error(d) : "",
         th_drive_lost_count(d));
  CHECK_MSG(v.ran, "the re-entry never ran on the server");
  CHECK_MSG(v.told, "the holder was never told");
  CHECK_RC(rc, DLOCK_ELOST);
  th_drive_free(d);
}

TH_CASE_T(reentry_answered_after_the_loss_revives_nothing_blocking, 120,
          "slow") {
  late_reentry_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(reentry_answered_after_the_loss_revives_nothing_async, 120, "slow") {
  late_reentry_body(TH_DRIVE_ASYNC);
}
