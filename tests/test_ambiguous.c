/*
 * test_ambiguous.c -- ambiguous replies (issue 17): a command that ran but
 * whose reply was lost with its connection, a reply delayed past the
 * command timeout, a reply cut mid-way. The fault proxy
 * (tests/faultproxy) puts one such fault on exactly one command of each
 * operation -- acquire, reentrant re-acquire, unlock, watchdog renewal,
 * force unlock, semaphore acquire/release, latch count-down, the fenced
 * acquire, both rwlock sides -- and a separate raw connection to the real
 * redis-server checks the state the operation left: each counts exactly
 * once, and nothing is reported lost that was not.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "faultproxy.h"
#include "th.h"
#include "th_drive.h"
#include "th_kind.h"

#define CMD_MS 400
#define DELAY_MS 1200 /* past CMD_MS */
/* The bound of waiting for a delayed reply to count as fired: the proxy
 * counts it when it passes the reply on, after the whole delay -- so the
 * delay, then slack. A fixed 10 s was shorter than a 3 s delay scaled by
 * make test-valgrind's timeout multiplier (4): "fault did not fire" in all
 * five caller-retry cases there. */
#define FIRED_WITHIN(delay_ms)                                                 \
  ((int64_t)(delay_ms) + 10000LL * th_timeout_mult())

static const int g_modes[] = {FP_LOSE, FP_DELAY, FP_CUT};
static const char *const g_mode_names[] = {"", "lose", "delay", "cut"};
static atomic_int g_lost;

static void on_lost(const char *name, void *arg) {
  (void)name;
  (void)arg;
  atomic_fetch_add(&g_lost, 1);
}

typedef struct rig {
  th_redis *r;
  fp_proxy *p;
  dlock_client *c;
  th_drive *d; /* rig_drive: the case body runs on either client */
} rig;

static rig rig_new(int multiplex, int wd_ms) {
  rig g;
  g.r = th_redis_new(1, NULL);
  g.p = fp_new(NULL, g.r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(g.p);
  cfg.command_timeout_ms = CMD_MS * th_timeout_mult();
  cfg.retry_attempts = 3;
  cfg.retry_interval_ms = 50;
  cfg.multiplex = multiplex;
  if (wd_ms)
    cfg.watchdog_timeout_ms = wd_ms;
  cfg.on_lock_lost = on_lost;
  g.c = th_client_cfg(g.r, &cfg);
  g.d = NULL;
  return g;
}

/* rig_new's server, proxy and configuration, with a th_drive of kind
 * instead of a client (its loss reports: th_drive_lost_count). */
static rig rig_drive(int kind, int multiplex, int wd_ms) {
  rig g;
  g.r = th_redis_new(1, NULL);
  g.p = fp_new(NULL, g.r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(g.p);
  cfg.command_timeout_ms = CMD_MS * th_timeout_mult();
  cfg.retry_attempts = 3;
  cfg.retry_interval_ms = 50;
  cfg.multiplex = multiplex;
  if (wd_ms)
    cfg.watchdog_timeout_ms = wd_ms;
  g.c = NULL;
  g.d = th_drive_new(kind, &cfg);
  return g;
}

/* Arms mode on the next command naming `name` and checks afterwards that
 * it fired (the operation really went through the fault). */
static void arm(rig *g, const char *name, int mode) {
  fp_arm(g->p, name, mode, DELAY_MS * th_timeout_mult());
}
static void fired(rig *g, int n) {
  if (g->d) { /* the client runs while we wait (async: its loop) */
    int64_t end = th_now_ms() + 10000LL * th_timeout_mult();
    while (fp_fired(g->p) < n && th_now_ms() < end)
      th_drive_pump(g->d, 5);
    CHECK_MSG(fp_fired(g->p) >= n, "fault %d did not fire", n);
    return;
  }
  CHECK_MSG(
      fp_wait_fired(g->p, n, FIRED_WITHIN(DELAY_MS * th_timeout_mult())) == 0,
      "fault %d did not fire", n);
}

/* The one hold count in the lock hash `name` ("" when the key is gone or
 * holds another number of fields). */
static long long hold_count(rig *g, const char *name) {
  redisReply *x = th_cmd(g->r, "HVALS %s", name);
  long long v = -1;
  if (x->type == REDIS_REPLY_ARRAY && x->elements == 1)
    v = atoll(x->element[0]->str);
  else if (x->type == REDIS_REPLY_ARRAY && x->elements == 0)
    v = 0;
  freeReplyObject(x);
  return v;
}

static long long exists(rig *g, const char *key) {
  return th_cmd_int(g->r, "EXISTS %s", key);
}

/* acquire and reentrant re-acquire: each counts once on the server. Run
 * by both clients (th_drive.h); _pool: the blocking client's pool. */
static void acquire_body(int kind, int multiplex) {
  rig g = rig_drive(kind, multiplex, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-acq-%s", g_mode_names[g_modes[i]]);
    dlock_mutex *m = th_drive_mutex(g.d, name); /* blocking: its record */
    arm(&g, name, g_modes[i]);
    CHECK_OK(th_drive_lock(g.d, name, 1, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 1);
    if (m)
      CHECK_EQ(dlock_mutex_hold_count(m), 1);
    arm(&g, name, g_modes[i]); /* reentrant */
    CHECK_OK(th_drive_lock(g.d, name, 1, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 2);
    if (m)
      CHECK_EQ(dlock_mutex_hold_count(m), 2);
    CHECK_OK(th_drive_unlock(g.d, name, 1));
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_OK(th_drive_unlock(g.d, name, 1));
    CHECK_EQ(exists(&g, name), 0);
  }
  CHECK_EQ(th_drive_lost_count(g.d), 0);
  th_drive_free(g.d);
}
TH_CASE(acquire_and_reacquire_count_once_blocking) {
  acquire_body(TH_DRIVE_BLOCKING, 1);
}
TH_CASE(acquire_and_reacquire_count_once_pool) {
  acquire_body(TH_DRIVE_BLOCKING, 0);
}
TH_CASE(acquire_and_reacquire_count_once_async) {
  acquire_body(TH_DRIVE_ASYNC, 1);
}

/* unlock: a lost, late or cut reply of an unlock counts once and is not
 * reported as DLOCK_ELOST (the lock was ours until the unlock ran). Run by
 * both clients. */
static void unlock_body(int kind, int multiplex) {
  rig g = rig_drive(kind, multiplex, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-unl-%s", g_mode_names[g_modes[i]]);
    CHECK_OK(th_drive_lock(g.d, name, 1, 0, 30000));
    CHECK_OK(th_drive_lock(g.d, name, 1, 0, 30000));
    CHECK_EQ(hold_count(&g, name), 2);
    arm(&g, name, g_modes[i]);
    CHECK_OK(th_drive_unlock(g.d, name, 1));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 1);
    arm(&g, name, g_modes[i]);
    CHECK_OK(th_drive_unlock(g.d, name, 1));
    fired(&g, ++n);
    CHECK_EQ(exists(&g, name), 0);
    dlock_mutex *m = th_drive_mutex(g.d, name);
    if (m)
      CHECK_EQ(dlock_mutex_is_held(m), 0);
    CHECK_RC(th_drive_unlock(g.d, name, 1), DLOCK_EPERM);
  }
  CHECK_EQ(th_drive_lost_count(g.d), 0);
  th_drive_free(g.d);
}
TH_CASE(unlock_counts_once_and_is_not_lost_blocking) {
  unlock_body(TH_DRIVE_BLOCKING, 1);
}
TH_CASE(unlock_counts_once_and_is_not_lost_pool) {
  unlock_body(TH_DRIVE_BLOCKING, 0);
}
TH_CASE(unlock_counts_once_and_is_not_lost_async) {
  unlock_body(TH_DRIVE_ASYNC, 1);
}

/* watchdog renewal: a renewal whose reply is lost, late or cut is not a
 * lost lock while a later renewal confirms it before the local deadline.
 * Run by both clients. */
static void renewal_body(int kind) {
  int wd = 2400 * th_timeout_mult();
  rig g = rig_drive(kind, 1, wd);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-ren-%s", g_mode_names[g_modes[i]]);
    CHECK_OK(th_drive_lock(g.d, name, 1, -1, -1));
    dlock_mutex *m = th_drive_mutex(g.d, name);
    arm(&g, name, g_modes[i]);
    fired(&g, i + 1);
    /* A full lease after the fault: renewals must have carried it on. */
    int64_t end = th_now_ms() + wd;
    while (th_now_ms() < end) {
      if (m)
        CHECK_EQ(dlock_mutex_is_held(m), 1);
      CHECK_EQ(th_drive_lost_count(g.d), 0);
      th_drive_pump(g.d, 50);
    }
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_MSG(th_cmd_int(g.r, "PTTL %s", name) > 0, "no TTL");
    CHECK_OK(th_drive_unlock(g.d, name, 1));
    CHECK_EQ(exists(&g, name), 0);
  }
  CHECK_EQ(th_drive_lost_count(g.d), 0);
  th_drive_free(g.d);
}
TH_CASE_T(renewal_fault_is_not_a_lost_lock_blocking, 120, "slow") {
  renewal_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(renewal_fault_is_not_a_lost_lock_async, 120, "slow") {
  renewal_body(TH_DRIVE_ASYNC);
}

/* force unlock: sent once (never re-sent: a second copy could delete a
 * lock another owner took in between); the lock is gone, and the call says
 * OK or DLOCK_ECONN ("unknown"). */
TH_CASE(force_unlock_is_sent_once_under_faults) {
  rig g = rig_new(1, 0);
  dlock_client *owner = th_client(g.r); /* direct, not through the proxy */
  /* Load the script first: the EVALSHA that finds no script and the EVAL
   * that follows are not two copies of one command. */
  dlock_mutex *w;
  CHECK_OK(dlock_mutex_new(g.c, "amb-frc-warm", &w));
  CHECK_OK(dlock_mutex_force_unlock(w));
  dlock_mutex_free(w);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-frc-%s", g_mode_names[g_modes[i]]);
    dlock_mutex *om, *m;
    CHECK_OK(dlock_mutex_new(owner, name, &om));
    CHECK_OK(dlock_mutex_new(g.c, name, &m));
    CHECK_OK(dlock_mutex_timedlock(om, 0, 30000));
    arm(&g, name, g_modes[i]);
    int rc = dlock_mutex_force_unlock(m);
    fired(&g, i + 1);
    CHECK_MSG(rc == DLOCK_OK || rc == DLOCK_ECONN, "force unlock: %s: %s",
              dlock_err_name(rc), dlock_last_error());
    printf("force unlock under %s: %s %s\n", g_mode_names[g_modes[i]],
           dlock_err_name(rc), rc ? dlock_last_error() : "");
    CHECK_EQ(fp_count(g.p), 1); /* the one copy */
    CHECK_EQ(exists(&g, name), 0);
    CHECK_RC(dlock_mutex_unlock(om), DLOCK_ELOST); /* really was taken */
    dlock_mutex_free(om);
    dlock_mutex_free(m);
  }
  dlock_client_free(owner);
  dlock_client_free(g.c);
}

/* semaphore acquire and release, latch count-down: each changes the count
 * by exactly one. */
TH_CASE(semaphore_and_latch_count_once) {
  rig g = rig_new(1, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-sem-%s", g_mode_names[g_modes[i]]);
    dlock_sem *s;
    CHECK_OK(dlock_sem_new(g.c, name, &s));
    CHECK_OK(dlock_sem_init(s, 3));
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_sem_trywait(s));
    fired(&g, ++n);
    CHECK_EQ(th_get_ll(g.r, name), 2);
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_sem_post(s));
    fired(&g, ++n);
    CHECK_EQ(th_get_ll(g.r, name), 3);
    dlock_sem_free(s);

    snprintf(name, sizeof name, "amb-lat-%s", g_mode_names[g_modes[i]]);
    dlock_latch *l;
    CHECK_OK(dlock_latch_new(g.c, name, &l));
    CHECK_OK(dlock_latch_init(l, 3));
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_latch_count_down(l));
    fired(&g, ++n);
    CHECK_EQ(th_get_ll(g.r, name), 2);
    dlock_latch_free(l);
  }
  dlock_client_free(g.c);
}

/* fenced acquire: counts once, and the holder's token is the newest issued
 * (a re-sent copy may skip one, never hand out an older one). */
TH_CASE(fenced_acquire_counts_once_with_newest_token) {
  rig g = rig_new(1, 0);
  dlock_client *other = th_client(g.r);
  for (int i = 0; i < 3; i++) {
    char name[32], tkey[64];
    snprintf(name, sizeof name, "amb-fen-%s", g_mode_names[g_modes[i]]);
    snprintf(tkey, sizeof tkey, "redisson_lock_token:{%s}", name);
    dlock_mutex *m, *om;
    CHECK_OK(dlock_mutex_new_fenced(g.c, name, &m));
    CHECK_OK(dlock_mutex_new_fenced(other, name, &om));
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
    fired(&g, i + 1);
    uint64_t tok, tok2;
    CHECK_OK(dlock_mutex_token(m, &tok));
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_EQ((long long)tok, th_get_ll(g.r, tkey));
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_EQ(exists(&g, name), 0);
    CHECK_OK(dlock_mutex_timedlock(om, 0, 30000));
    CHECK_OK(dlock_mutex_token(om, &tok2));
    CHECK_MSG(tok2 > tok, "token %llu after %llu", (unsigned long long)tok2,
              (unsigned long long)tok);
    CHECK_OK(dlock_mutex_unlock(om));
    dlock_mutex_free(m);
    dlock_mutex_free(om);
  }
  dlock_client_free(other);
  dlock_client_free(g.c);
}

/* rwlock: a read hold and a write hold, acquired and released through
 * faults, each count once. */
TH_CASE(rwlock_sides_count_once) {
  rig g = rig_new(1, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-rw-%s", g_mode_names[g_modes[i]]);
    dlock_rwlock *rw;
    CHECK_OK(dlock_rwlock_new(g.c, name, &rw));
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_rwlock_timedrdlock(rw, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(th_cmd_int(g.r, "HLEN %s", name), 2); /* mode + our field */
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_rwlock_unlock(rw));
    fired(&g, ++n);
    CHECK_EQ(exists(&g, name), 0);
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_rwlock_timedwrlock(rw, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(th_cmd_int(g.r, "HLEN %s", name), 2);
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_rwlock_unlock(rw));
    fired(&g, ++n);
    CHECK_EQ(exists(&g, name), 0);
    dlock_rwlock_free(rw);
  }
  CHECK_EQ(atomic_load(&g_lost), 0);
  dlock_client_free(g.c);
}

/* ---- issue 25.3: unlock idempotent by state, with no time window --------
 * The old unlock latch lived (command_timeout + retry_interval) x
 * (retry_attempts + 1); a copy of an unlock that ran after it expired
 * counted again. Each case below makes a copy run, or the caller retry,
 * well past that window, on a count-2 hold of every reentrant kind. */

/* The kinds (tests/harness/th_kind.h): a holder of each, its lock with a
 * 30 s lease. */
static int holder_lock(th_holder *h, long long wait_ms) {
  return th_holder_lock(h, wait_ms, 30000);
}

/* Arms FP_DELAY for the next request naming the lock's "{name}" -- the
 * unlock's channel and keys carry it in braces. Not the bare name: the
 * client-info write lists "since:<tid>:<name>" for each hold and, sent
 * whenever the errand thread comes to it, took the armed fault under
 * valgrind (the unlock then went through: "the re-send came after
 * 193 ms", "returned OK, expected ECONN"). */
static void arm_unlock(fp_proxy *p, const char *name, int delay_ms) {
  char match[64];
  snprintf(match, sizeof match, "{%s}", name);
  fp_arm(p, match, FP_DELAY, delay_ms);
}

/* The old latch's life for a configuration: how long its window was. */
static int64_t old_latch_ms(const dlock_config *cfg) {
  return ((int64_t)cfg->command_timeout_ms + cfg->retry_interval_ms) *
         (cfg->retry_attempts + 1);
}

static long long exists_r(th_redis *r, const char *key) {
  return th_cmd_int(r, "EXISTS %s", key);
}

static long long tombstones(th_redis *r, const char *name) {
  redisReply *x = th_cmd(r, "KEYS redisson_unlock_latch:{%s}:*", name);
  long long n = (long long)x->elements;
  freeReplyObject(x);
  return n;
}

/* The count-2 hold that must stay at 1, and the final release, checked
 * from outside: another client cannot take the lock while one hold is
 * left, and can once the last is released. */
static void check_one_left(th_redis *r, th_holder *h, dlock_client *other,
                           const char *name) {
  long long n = th_count_of(r, name);
  CHECK_MSG(n == 1,
            "%s '%s': hold count %lld in Redis after one (re-sent) unlock "
            "of two holds",
            th_kind_name(h->kind), name, n);
  if (h->m)
    CHECK_EQ(dlock_mutex_hold_count(h->m), 1);
  th_holder o = th_holder_new(other, h->kind, name);
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_holder_unlock(h));
  CHECK_EQ(exists_r(r, name), 0);
  CHECK_OK(th_holder_try_excluded(&o));
  CHECK_OK(th_holder_unlock(&o));
  th_holder_free(&o);
}

/* The caller retries: an unlock of a count-2 hold whose reply was lost
 * (the router does not re-send: retry_attempts 0) returns DLOCK_ECONN; the
 * caller calls unlock again well after the old latch's window. It counts
 * once. Then the final release the same way: the retry finds the hold
 * gone and says OK (that copy released it); each retry is a committing
 * copy, which leaves its release's tombstone for any copy still on its way. Old
 * code: the retry released the lock (count 2 -> 0), another client took it, the
 * last unlock said DLOCK_EPERM. */
static void caller_retry_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.command_timeout_ms = CMD_MS * th_timeout_mult();
  cfg.retry_attempts = 0;
  cfg.retry_interval_ms = 50;
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  char name[40];
  snprintf(name, sizeof name, "amb-retry-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  CHECK_OK(holder_lock(&h, 0));
  CHECK_OK(holder_lock(&h, 0));
  CHECK_EQ(th_count_of(r, name), 2);
  arm_unlock(p, name, 3000 * th_timeout_mult());
  CHECK_RC(th_holder_unlock(&h), DLOCK_ECONN);
  CHECK_MSG(fp_wait_fired(p, 1, FIRED_WITHIN(3000 * th_timeout_mult())) == 0,
            "fault did not fire");
  CHECK_EQ(th_count_of(r, name), 1); /* it ran */
  /* Past the old latch's life, twice over: a scenario, not a wait. */
  th_sleep_ms(2 * old_latch_ms(&cfg) + 200);
  int rc = th_holder_unlock(&h);
  CHECK_MSG(rc == DLOCK_OK, "retried unlock: %s %s", dlock_err_name(rc),
            dlock_last_error());
  long long n = th_count_of(r, name);
  CHECK_MSG(n == 1, "%s: hold count %lld after a retried unlock of 2 holds",
            th_kind_name(kind), n);
  if (h.m)
    CHECK_EQ(dlock_mutex_hold_count(h.m), 1);
  th_holder o = th_holder_new(other, kind, name);
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  /* The final release, its reply lost, retried by the caller. */
  arm_unlock(p, name, 3000 * th_timeout_mult());
  CHECK_RC(th_holder_unlock(&h), DLOCK_ECONN);
  CHECK_MSG(fp_wait_fired(p, 2, FIRED_WITHIN(3000 * th_timeout_mult())) == 0,
            "fault did not fire");
  CHECK_EQ(exists_r(r, name), 0);
  th_sleep_ms(2 * old_latch_ms(&cfg) + 200);
  rc = th_holder_unlock(&h);
  CHECK_MSG(rc == DLOCK_OK, "retried final unlock: %s %s", dlock_err_name(rc),
            dlock_last_error());
  /* one per committed release (safety round 4): the partial unlock's
   * retry and the final one's, each written by its committing copy */
  CHECK_EQ(tombstones(r, name), 2);
  CHECK_RC(th_holder_unlock(&h), DLOCK_EPERM); /* nothing left to unlock */
  CHECK_OK(th_holder_try_excluded(&o));
  CHECK_OK(th_holder_unlock(&o));
  th_holder_free(&o);
  CHECK_EQ(atomic_load(&g_lost), 0);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}
/* caller_retry_body's scenario for the plain mutex, run by both clients
 * (th_drive.h): the retried unlock keeps its count and request id (the
 * engine keeps them in the record), and the retried final release leaves
 * its tombstone. */
static void caller_retry_drive(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.command_timeout_ms = CMD_MS * th_timeout_mult();
  cfg.retry_attempts = 0;
  cfg.retry_interval_ms = 50;
  th_drive *d = th_drive_new(kind, &cfg);
  dlock_client *other = th_client(r);
  const char *name = "amb-retry-mutex";
  CHECK_OK(th_drive_lock(d, name, 1, 0, 30000));
  CHECK_OK(th_drive_lock(d, name, 1, 0, 30000));
  CHECK_EQ(th_count_of(r, name), 2);
  arm_unlock(p, name, 3000 * th_timeout_mult());
  CHECK_RC(th_drive_unlock(d, name, 1), DLOCK_ECONN);
  CHECK_MSG(fp_wait_fired(p, 1, FIRED_WITHIN(3000 * th_timeout_mult())) == 0,
            "fault did not fire");
  CHECK_EQ(th_count_of(r, name), 1); /* it ran */
  /* Past the old latch's life, twice over: a scenario, not a wait. */
  th_drive_pump(d, 2 * old_latch_ms(&cfg) + 200);
  int rc = th_drive_unlock(d, name, 1);
  CHECK_MSG(rc == DLOCK_OK, "%s: retried unlock: %s %s", th_drive_kind(d),
            dlock_err_name(rc), dlock_last_error());
  long long n = th_count_of(r, name);
  CHECK_MSG(n == 1, "%s: hold count %lld after a retried unlock of 2 holds",
            th_drive_kind(d), n);
  dlock_mutex *m = th_drive_mutex(d, name);
  if (m)
    CHECK_EQ(dlock_mutex_hold_count(m), 1);
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  /* The final release, its reply lost, retried by the caller. */
  arm_unlock(p, name, 3000 * th_timeout_mult());
  CHECK_RC(th_drive_unlock(d, name, 1), DLOCK_ECONN);
  CHECK_MSG(fp_wait_fired(p, 2, FIRED_WITHIN(3000 * th_timeout_mult())) == 0,
            "fault did not fire");
  CHECK_EQ(exists_r(r, name), 0);
  th_drive_pump(d, 2 * old_latch_ms(&cfg) + 200);
  rc = th_drive_unlock(d, name, 1);
  CHECK_MSG(rc == DLOCK_OK, "%s: retried final unlock: %s %s", th_drive_kind(d),
            dlock_err_name(rc), dlock_last_error());
  /* One tombstone per committed release (safety round 4), written by the
   * committing copy itself: the partial unlock's retry and the final's. */
  CHECK_MSG(tombstones(r, name) == 2, "%s: %lld tombstones", th_drive_kind(d),
            tombstones(r, name));
  CHECK_RC(th_drive_unlock(d, name, 1), DLOCK_EPERM); /* nothing left */
  CHECK_OK(th_holder_try_excluded(&o));
  CHECK_OK(th_holder_unlock(&o));
  th_holder_free(&o);
  CHECK_EQ(th_drive_lost_count(d), 0);
  th_drive_free(d);
  dlock_client_free(other);
}
TH_CASE(unlock_retried_by_caller_late_counts_once_mutex_blocking) {
  caller_retry_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(unlock_retried_by_caller_late_counts_once_mutex_async) {
  caller_retry_drive(TH_DRIVE_ASYNC);
}
TH_CASE(unlock_retried_by_caller_late_counts_once_fair) {
  caller_retry_body(TH_K_FAIR);
}
TH_CASE(unlock_retried_by_caller_late_counts_once_read) {
  caller_retry_body(TH_K_READ);
}
TH_CASE(unlock_retried_by_caller_late_counts_once_write) {
  caller_retry_body(TH_K_WRITE);
}

/* The router re-sends late: with a replica, each unlock carries a WAIT,
 * and the router waits command_timeout + sync_timeout for its reply --
 * which the old latch's life left out. The first copy runs and its reply
 * is held past that; the router's re-send runs after the old window
 * ended. It counts once: one hold is left and another client cannot take
 * the lock. Old code: the late copy found no latch and decremented again
 * (2 -> 0), and the call said OK. */
static void router_late_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  th_redis *rep = th_replica_new(r);
  (void)rep;
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.command_timeout_ms = CMD_MS * th_timeout_mult();
  cfg.retry_attempts = 1;
  cfg.retry_interval_ms = 50;
  cfg.sync_timeout_ms = 3 * (int)old_latch_ms(&cfg);
  cfg.call_timeout_ms = 0; /* the whole policy: the re-send comes late */
  cfg.on_lock_lost = on_lost;
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  char name[40];
  snprintf(name, sizeof name, "amb-late-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  CHECK_OK(holder_lock(&h, 0));
  CHECK_OK(holder_lock(&h, 0));
  CHECK_EQ(th_count_of(r, name), 2);
  arm_unlock(p, name, cfg.command_timeout_ms + cfg.sync_timeout_ms + 2000);
  int64_t t0 = th_now_ms();
  int rc = th_holder_unlock(&h);
  int64_t took = th_now_ms() - t0;
  printf("%s: unlock %s after %lld ms (old window %lld ms)\n",
         th_kind_name(kind), dlock_err_name(rc), (long long)took,
         (long long)old_latch_ms(&cfg));
  CHECK_MSG(rc == DLOCK_OK, "unlock: %s %s", dlock_err_name(rc),
            dlock_last_error());
  CHECK_MSG(took > old_latch_ms(&cfg), "the re-send came after %lld ms",
            (long long)took);
  check_one_left(r, &h, other, name);
  CHECK_EQ(atomic_load(&g_lost), 0);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}
TH_CASE(unlock_resent_by_router_late_counts_once_mutex) {
  router_late_body(TH_K_MUTEX);
}
TH_CASE(unlock_resent_by_router_late_counts_once_fair) {
  router_late_body(TH_K_FAIR);
}
TH_CASE(unlock_resent_by_router_late_counts_once_read) {
  router_late_body(TH_K_READ);
}
TH_CASE(unlock_resent_by_router_late_counts_once_write) {
  router_late_body(TH_K_WRITE);
}

TH_MAIN()
