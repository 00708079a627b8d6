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
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "faultproxy.h"
#include "th.h"

#define CMD_MS 400
#define DELAY_MS 1200 /* past CMD_MS */

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
  return g;
}

/* Arms mode on the next command naming `name` and checks afterwards that
 * it fired (the operation really went through the fault). */
static void arm(rig *g, const char *name, int mode) {
  fp_arm(g->p, name, mode, DELAY_MS * th_timeout_mult());
}
static void fired(rig *g, int n) {
  CHECK_MSG(fp_wait_fired(g->p, n, 10000) == 0, "fault %d did not fire", n);
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

/* acquire and reentrant re-acquire: each counts once on the server. */
static void acquire_body(int multiplex) {
  rig g = rig_new(multiplex, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-acq-%s", g_mode_names[g_modes[i]]);
    dlock_mutex *m;
    CHECK_OK(dlock_mutex_new(g.c, name, &m));
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_EQ(dlock_mutex_hold_count(m), 1);
    arm(&g, name, g_modes[i]); /* reentrant */
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 2);
    CHECK_EQ(dlock_mutex_hold_count(m), 2);
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_EQ(exists(&g, name), 0);
    dlock_mutex_free(m);
  }
  CHECK_EQ(atomic_load(&g_lost), 0);
  dlock_client_free(g.c);
}
TH_CASE(acquire_and_reacquire_count_once) { acquire_body(1); }
TH_CASE(acquire_and_reacquire_count_once_pool) { acquire_body(0); }

/* unlock: a lost, late or cut reply of an unlock counts once and is not
 * reported as DLOCK_ELOST (the lock was ours until the unlock ran). */
static void unlock_body(int multiplex) {
  rig g = rig_new(multiplex, 0);
  int n = 0;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-unl-%s", g_mode_names[g_modes[i]]);
    dlock_mutex *m;
    CHECK_OK(dlock_mutex_new(g.c, name, &m));
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
    CHECK_OK(dlock_mutex_timedlock(m, 0, 30000));
    CHECK_EQ(hold_count(&g, name), 2);
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_mutex_unlock(m));
    fired(&g, ++n);
    CHECK_EQ(hold_count(&g, name), 1);
    arm(&g, name, g_modes[i]);
    CHECK_OK(dlock_mutex_unlock(m));
    fired(&g, ++n);
    CHECK_EQ(exists(&g, name), 0);
    CHECK_EQ(dlock_mutex_is_held(m), 0);
    dlock_mutex_free(m);
  }
  CHECK_EQ(atomic_load(&g_lost), 0);
  dlock_client_free(g.c);
}
TH_CASE(unlock_counts_once_and_is_not_lost) { unlock_body(1); }
TH_CASE(unlock_counts_once_and_is_not_lost_pool) { unlock_body(0); }

/* watchdog renewal: a renewal whose reply is lost, late or cut is not a
 * lost lock while a later renewal confirms it before the local deadline. */
TH_CASE_T(renewal_fault_is_not_a_lost_lock, 120, "slow") {
  int wd = 2400 * th_timeout_mult();
  rig g = rig_new(1, wd);
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "amb-ren-%s", g_mode_names[g_modes[i]]);
    dlock_mutex *m;
    CHECK_OK(dlock_mutex_new(g.c, name, &m));
    CHECK_OK(dlock_mutex_lock(m));
    arm(&g, name, g_modes[i]);
    fired(&g, i + 1);
    /* A full lease after the fault: renewals must have carried it on. */
    int64_t end = th_now_ms() + wd;
    while (th_now_ms() < end) {
      CHECK_EQ(dlock_mutex_is_held(m), 1);
      th_sleep_ms(50);
    }
    CHECK_EQ(hold_count(&g, name), 1);
    CHECK_MSG(th_cmd_int(g.r, "PTTL %s", name) > 0, "no TTL");
    CHECK_OK(dlock_mutex_unlock(m));
    CHECK_EQ(exists(&g, name), 0);
    dlock_mutex_free(m);
  }
  CHECK_EQ(atomic_load(&g_lost), 0);
  dlock_client_free(g.c);
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

TH_MAIN()
