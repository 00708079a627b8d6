/*
 * test_late.c -- safety round 4 (issues 38 and 43): the construction rules
 * of docs/guarantees.md ("Rules"), each shown by the scenario that broke
 * it at 7d6b26d, on both clients where the kind exists there:
 *   - no callback under an internal lock (a log hook that calls back);
 *   - no command whose outcome is unknown acts on a later hold (late
 *     copies of unlocks, undos and acquires, held on the wire by the fault
 *     proxy's FP_HOLD and delivered after the client retried);
 *   - a wake-up is consumed by the attempt it was for; "held" comes from a
 *     server answer;
 *   - a lock left free with live waiters is taken or handed on.
 * A second client connected directly (or a raw connection) judges.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "th.h"
#include "th_drive.h"
#include "th_kind.h"

#define CMD_MS                                                                 \
  300 /* the client's command timeout: the held copy waits more                \
       */

static int64_t mult(void) { return th_timeout_mult(); }

/* How long the proxy holds a copy on the wire: well past the command
 * timeout (the client gives up and goes on), then it runs. */
static int hold_ms(void) { return (int)(1500 * mult()); }

/* A client (its configuration) through proxy p: short command timeout,
 * `retries` router re-sends. */
static dlock_config through(fp_proxy *p, int retries) {
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = fp_url(p);
  cfg.command_timeout_ms = (int)(CMD_MS * mult());
  cfg.retry_attempts = retries;
  cfg.retry_interval_ms = 50;
  return cfg;
}

/* "redisson_unlock_latch:{name}": in every release of name, and only in
 * releases (their tombstone key) -- what a fault is armed on. */
static const char *rel_match(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "redisson_unlock_latch:{%s}", name);
  return buf;
}
/* The first acquire attempt of name: armed before anything names the
 * lock (no hold yet, so no client info write lists it either). */
static const char *acq_match(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s", name);
  return buf;
}

/* Waits (bounded) until the proxy delivered n held copies and they ran. */
static void delivered(fp_proxy *p, int n, th_drive *d) {
  int64_t end = th_now_ms() + hold_ms() + 15000 * mult();
  while (fp_fired(p) < n && th_now_ms() < end) {
    if (d)
      th_drive_pump(d, 10);
    else
      th_sleep_ms(10);
  }
  CHECK_MSG(fp_fired(p) >= n, "the held copy %d was not delivered", n);
  CHECK_MSG(fp_late_noscript(p) == 0,
            "a held copy met NOSCRIPT (it did not run): load the scripts "
            "first");
}

/* Loads the scripts a kind sends (first and reentrant acquire, partial
 * and final release) on the server of r, with a name of its own: a held
 * EVALSHA delivered late must run, not meet NOSCRIPT. Through a client of
 * its own, connected directly with the default timeouts: the case's client
 * goes through the proxy with a command timeout short enough for a held
 * copy to outlast it, and its first calls (connect, NOSCRIPT, EVAL) missed
 * that bound at load 25 -- the warm-up is not what the case is about. The
 * script cache is the server's; the event-loop client sends the same
 * scripts as the blocking client's plain mutex. */
static void warm_at(th_redis *r, int kind) {
  dlock_client *c = th_client(r);
  char name[48];
  snprintf(name, sizeof name, "late-warm-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  CHECK_OK(th_holder_unlock(&h));
  CHECK_OK(th_holder_unlock(&h));
  th_holder_free(&h);
  dlock_client_free(c);
}

/* ---- a log hook that calls back into the library ------------------------- */

static th_drive *_Atomic g_hook_drive;
static atomic_int g_hook_calls;

static void calling_hook(void *arg, int level, const char *name,
                         const char *event, const char *msg) {
  (void)arg;
  (void)level;
  (void)name;
  (void)event;
  (void)msg;
  th_drive *d = atomic_load(&g_hook_drive);
  if (!d)
    return;
  dlock_client_stats st;
  CHECK_OK(th_drive_stats(d, &st));
  atomic_fetch_add(&g_hook_calls, 1);
}

/* Issue 38.8: the log hook ran under the client's registry mutex; a hook
 * that calls dlock_client_stats (callable from any thread at any time, the
 * header says) deadlocked inside dlock_mutex_unlock when the unlock found
 * the hold gone (its "lost" event). Now every event raised under an
 * internal lock waits until the lock is released (src/util/callout.c). */
static void hook_calls_back_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.log_fn = calling_hook;
  cfg.log_level = DLOCK_LOG_DEBUG;
  th_drive *d = th_drive_new(kind, &cfg);
  atomic_store(&g_hook_drive, d);
  CHECK_OK(th_drive_lock(d, "hooked", 1, 0, 30000));
  freeReplyObject(th_cmd(r, "DEL hooked"));
  /* the unlock finds the hold gone: lost, logged, the hook runs */
  CHECK_EQ(th_drive_unlock(d, "hooked", 1), DLOCK_ELOST);
  CHECK_MSG(atomic_load(&g_hook_calls) > 0, "the hook never ran (%s)",
            th_drive_kind(d));
  /* and a loss reported by the renewal path, with the hook calling back */
  CHECK_OK(th_drive_lock(d, "hooked2", 1, 0, -1));
  freeReplyObject(th_cmd(r, "DEL hooked2"));
  int64_t end = th_now_ms() + 30000LL * th_timeout_mult();
  while (th_drive_lost_count(d) == 0 && th_now_ms() < end)
    th_drive_pump(d, 20);
  CHECK_MSG(th_drive_lost_count(d) > 0, "the loss was not reported (%s)",
            th_drive_kind(d));
  atomic_store(&g_hook_drive, NULL);
  th_drive_free(d);
}

TH_CASE_T(hook_calls_back_into_the_library_blocking, 120, "slow") {
  hook_calls_back_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(hook_calls_back_into_the_library_async, 120, "slow") {
  hook_calls_back_body(TH_DRIVE_ASYNC);
}

/* ---- late copies of releases -------------------------------------------- */

/* Issue 38.2 / 43: the final unlock is held on the wire past the command
 * timeout (DLOCK_ECONN, no router re-send); the same thread locks again;
 * then the held copy runs. At 7d6b26d the lock was a re-entry (count 2)
 * and the late copy (count >= expected) deleted the hash: another client
 * acquired while the first still held it. Now the lock settles the
 * pending unlock first (its committing copy writes its tombstone): the
 * late copy changes nothing. Every kind that holds a name. */
static void relock_after_econn_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, kind);
  char name[48], m[96];
  snprintf(name, sizeof name, "late-relock-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  th_holder o = th_holder_new(other, kind, name);
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  fp_arm_hold(p, rel_match(name, m, sizeof m), hold_ms(), 1);
  CHECK_RC(th_holder_unlock(&h), DLOCK_ECONN);
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  delivered(p, 1, NULL);
  CHECK_MSG(th_count_of(r, name) >= 1,
            "%s: the late copy of the unlock released the new hold",
            th_kind_name(kind));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  long long left = 0;
  CHECK_OK(th_holder_validity(&h, &left));
  CHECK(left > 10000);
  CHECK_OK(th_holder_unlock(&h));
  CHECK_OK(th_holder_try_excluded(&o)); /* one unlock frees it */
  CHECK_OK(th_holder_unlock(&o));
  th_holder_free(&o);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}

TH_CASE(relock_after_econn_unlock_mutex) {
  relock_after_econn_body(TH_K_MUTEX);
}
TH_CASE(relock_after_econn_unlock_fair) { relock_after_econn_body(TH_K_FAIR); }
TH_CASE(relock_after_econn_unlock_fenced) {
  relock_after_econn_body(TH_K_FENCED);
}
TH_CASE(relock_after_econn_unlock_spin) { relock_after_econn_body(TH_K_SPIN); }
TH_CASE(relock_after_econn_unlock_read) { relock_after_econn_body(TH_K_READ); }
TH_CASE(relock_after_econn_unlock_write) {
  relock_after_econn_body(TH_K_WRITE);
}

/* The same on both clients (the plain mutex; th_drive.h). */
static void relock_after_econn_drive(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  dlock_client *other = th_client(r);
  const char *name = "late-relock-drive";
  char m[96];
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  fp_arm_hold(p, rel_match(name, m, sizeof m), hold_ms(), 1);
  CHECK_RC(th_drive_unlock(d, name, 1), DLOCK_ECONN);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  delivered(p, 1, d);
  CHECK_MSG(th_count_of(r, name) == 1,
            "%s: the late copy of the unlock released the new hold",
            th_drive_kind(d));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_drive_unlock(d, name, 1));
  CHECK_OK(th_holder_try_excluded(&o));
  CHECK_OK(th_holder_unlock(&o));
  CHECK_EQ(th_drive_lost_count(d), 0);
  th_holder_free(&o);
  th_drive_free(d);
  dlock_client_free(other);
}
TH_CASE(relock_after_econn_unlock_blocking) {
  relock_after_econn_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(relock_after_econn_unlock_async) {
  relock_after_econn_drive(TH_DRIVE_ASYNC);
}

/* A final unlock unanswered (pending), then the hold's local deadline
 * passes; the thread locks again and the settling copy goes unanswered
 * too. The blocking client took that copy's verdict (ELOST: the hold ran
 * out) for "settled" while the record still owed the release, and aborted
 * ("a settled release is pending again": tls.killed_tls_connections_*
 * under ASan on a loaded machine). Now a settle is judged by the record's
 * state (the engine's dlock__eng_settle_end): the lock ends DLOCK_ECONN,
 * still pending, and the next one, answered, settles it and takes the
 * lock. On both clients. */
static void settle_unanswered_drive(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  const char *name = "late-settle-expired";
  char m[96];
  const long long lease = 1000 * mult();
  CHECK_OK(th_drive_lock(d, name, 1, 0, lease));
  fp_arm_hold(p, rel_match(name, m, sizeof m), hold_ms(), 2);
  CHECK_RC(th_drive_unlock(d, name, 1), DLOCK_ECONN);
  th_sleep_ms(lease + 100); /* past the hold's local deadline */
  CHECK_RC(th_drive_lock(d, name, 1, 0, 20000), DLOCK_ECONN);
  delivered(p, 2, d);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  CHECK_EQ(th_count_of(r, name), 1);
  CHECK_OK(th_drive_unlock(d, name, 1));
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", name), 0);
  th_drive_free(d);
}
TH_CASE(unanswered_settle_of_an_expired_hold_stays_pending_blocking) {
  settle_unanswered_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(unanswered_settle_of_an_expired_hold_stays_pending_async) {
  settle_unanswered_drive(TH_DRIVE_ASYNC);
}

/* Issue 38.3 / 43: the first copy of the final unlock is held; the caller's
 * retry (or the router's re-send) is answered; a tombstone written after
 * it (a SET) is held too; the thread locks again; the first copy runs. At
 * 7d6b26d that tombstone was a separate best-effort write whose failure
 * was dropped: the late copy released the new hold. Now the retry is a
 * committing copy (its tombstone written with its effect), and a router
 * re-send is committed before the unlock counts -- if that cannot be
 * written, the unlock is pending (DLOCK_ECONN) and the next lock settles
 * it first. retries: 0 = the caller retries after DLOCK_ECONN, 1 = the
 * router re-sends. */
static void committed_unlock_body(int kind, int retries) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, retries);
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, kind);
  char name[48], m[96];
  snprintf(name, sizeof name, "late-commit-%s-%d", th_kind_name(kind), retries);
  th_holder h = th_holder_new(c, kind, name);
  th_holder o = th_holder_new(other, kind, name);
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  rel_match(name, m, sizeof m);
  fp_hold(p, "EVALSHA", m, (int)(2500 * mult()), 1);
  fp_hold(p, "SET", m, (int)(2500 * mult()), retries + 1); /* every copy */
  if (retries == 0) {
    CHECK_RC(th_holder_unlock(&h), DLOCK_ECONN);
    CHECK_OK(th_holder_unlock(&h)); /* the caller's retry */
  } else {
    int rc = th_holder_unlock(&h); /* the router's re-send answered */
    CHECK_MSG(rc == DLOCK_OK || rc == DLOCK_ECONN, "unlock: %s",
              dlock_err_name(rc));
  }
  CHECK_EQ(th_count_of(r, name), 0);
  CHECK_OK(th_holder_lock(&h, 0, 20000)); /* a new first hold */
  delivered(p, 1, NULL);
  th_sleep_ms(200 * mult()); /* the tombstone's SET too, if one was held */
  CHECK_MSG(th_count_of(r, name) == 1,
            "%s: the late first copy of an unlock released a later hold",
            th_kind_name(kind));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_holder_unlock(&h));
  th_holder_free(&o);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}
TH_CASE(committed_unlock_caller_retry_mutex) {
  committed_unlock_body(TH_K_MUTEX, 0);
}
TH_CASE(committed_unlock_caller_retry_fair) {
  committed_unlock_body(TH_K_FAIR, 0);
}
TH_CASE(committed_unlock_caller_retry_fenced) {
  committed_unlock_body(TH_K_FENCED, 0);
}
TH_CASE(committed_unlock_caller_retry_read) {
  committed_unlock_body(TH_K_READ, 0);
}
TH_CASE(committed_unlock_caller_retry_write) {
  committed_unlock_body(TH_K_WRITE, 0);
}
TH_CASE(committed_unlock_router_resend_mutex) {
  committed_unlock_body(TH_K_MUTEX, 1);
}
TH_CASE(committed_unlock_router_resend_fair) {
  committed_unlock_body(TH_K_FAIR, 1);
}
TH_CASE(committed_unlock_router_resend_fenced) {
  committed_unlock_body(TH_K_FENCED, 1);
}
TH_CASE(committed_unlock_router_resend_read) {
  committed_unlock_body(TH_K_READ, 1);
}
TH_CASE(committed_unlock_router_resend_write) {
  committed_unlock_body(TH_K_WRITE, 1);
}

/* The router re-send case on both clients (the event-loop client wrote
 * its tombstone fire-and-forget, first to slot 0's master on a cluster). */
static void committed_unlock_drive(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 1);
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  dlock_client *other = th_client(r);
  const char *name = "late-commit-drive";
  char m[96];
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  rel_match(name, m, sizeof m);
  fp_hold(p, "EVALSHA", m, (int)(2500 * mult()), 1);
  fp_hold(p, "SET", m, (int)(2500 * mult()), 2); /* the SET and its re-send */
  int rc = th_drive_unlock(d, name, 1);
  CHECK_MSG(rc == DLOCK_OK || rc == DLOCK_ECONN, "%s: unlock: %s",
            th_drive_kind(d), dlock_err_name(rc));
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  delivered(p, 1, d);
  th_drive_pump(d, 200 * mult());
  CHECK_MSG(th_count_of(r, name) == 1,
            "%s: the late first copy of an unlock released a later hold",
            th_drive_kind(d));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_drive_unlock(d, name, 1));
  th_holder_free(&o);
  th_drive_free(d);
  dlock_client_free(other);
}
TH_CASE(committed_unlock_router_resend_blocking) {
  committed_unlock_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(committed_unlock_router_resend_async) {
  committed_unlock_drive(TH_DRIVE_ASYNC);
}

/* ---- late copies of acquires ---- */

/* Issue 43: an acquire with a 1.5 s lease whose first copy is held 1 s; the
 * router's re-send takes the lock; the thread unlocks and locks again with
 * a 20 s lease; then the first copy runs. At 7d6b26d it found the thread's
 * field and set the key's TTL back to 1.5 s (another client acquired while
 * the holder's validity said 16 s), and on a fenced lock drew a token newer
 * than the holder's. Now the attempt is committed (its tombstone) after its
 * answer, and an acquire copy that finds its own field only extends the
 * TTL. */
static void late_acquire_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 2);
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, kind);
  char name[48], m[96];
  snprintf(name, sizeof name, "late-acq-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  th_holder o = th_holder_new(other, kind, name);
  fp_arm_hold(p, acq_match(name, m, sizeof m), (int)(1000 * mult()), 1);
  CHECK_OK(th_holder_lock(&h, 0, 1500 * mult()));
  CHECK_OK(th_holder_unlock(&h));
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  uint64_t tok = 0;
  if (kind == TH_K_FENCED)
    CHECK_OK(dlock_mutex_token(h.m, &tok));
  delivered(p, 1, NULL);
  long long pttl = th_cmd_int(r, "PTTL %s", name);
  CHECK_MSG(pttl > 15000,
            "%s: a late acquire copy cut the new hold's TTL to %lld ms",
            th_kind_name(kind), pttl);
  if (kind == TH_K_FENCED) {
    char tk[96];
    snprintf(tk, sizeof tk, "redisson_lock_token:{%s}", name);
    CHECK_EQ(th_get_ll(r, tk), (long long)tok); /* the holder's is newest */
  }
  th_sleep_ms(1600 * mult()); /* past the late copy's lease */
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_holder_unlock(&h));
  CHECK_EQ(th_count_of(r, name), 0); /* and no key re-created */
  th_holder_free(&o);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}
TH_CASE_T(late_acquire_copy_never_cuts_ttl_mutex, 120, "slow") {
  late_acquire_body(TH_K_MUTEX);
}
TH_CASE_T(late_acquire_copy_never_cuts_ttl_fair, 120, "slow") {
  late_acquire_body(TH_K_FAIR);
}
TH_CASE_T(late_acquire_copy_never_cuts_ttl_fenced, 120, "slow") {
  late_acquire_body(TH_K_FENCED);
}
TH_CASE_T(late_acquire_copy_never_cuts_ttl_write, 120, "slow") {
  late_acquire_body(TH_K_WRITE);
}

/* Issue 43, "not yet tried": a late first-acquire copy that arrives after
 * the hold it was for ended re-created the key -- a hold nobody knows of,
 * blocking others for its lease. The committed attempt's copy does
 * nothing. */
static void late_acquire_after_release_drive(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 2);
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  const char *name = "late-acq-recreate";
  char m[96];
  fp_arm_hold(p, acq_match(name, m, sizeof m), (int)(1000 * mult()), 1);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 30000));
  CHECK_OK(th_drive_unlock(d, name, 1));
  delivered(p, 1, d);
  CHECK_MSG(th_cmd_int(r, "EXISTS %s", name) == 0,
            "%s: a late acquire copy re-created the released key",
            th_drive_kind(d));
  th_drive_free(d);
}
TH_CASE(late_acquire_copy_never_recreates_blocking) {
  late_acquire_after_release_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(late_acquire_copy_never_recreates_async) {
  late_acquire_after_release_drive(TH_DRIVE_ASYNC);
}

/* ---- waiters paused across their hand-over ---- */

/* A waiting process: waits for the key "<name>:go:<id>", then
 * timedlock(name, wait_ms, lease_ms) on its client kind (th_drive.h:
 * blocking or async), writes the monotonic time of the answer to
 * "<name>:t:<id>" and exits with -rc (0: it got the lock; it then holds it
 * until its lease ends). */
typedef struct waiter {
  th_redis *r;
  const char *name;
  int kind, id;
  long long wait_ms, lease_ms;
} waiter;

static int waiter_main(void *arg) {
  const waiter *w = arg;
  char go[96], t[96];
  snprintf(go, sizeof go, "%s:go:%d", w->name, w->id);
  snprintf(t, sizeof t, "%s:t:%d", w->name, w->id);
  th_wait_key(w->r, go, 30000 * mult());
  th_drive *d = th_drive_at(w->kind, w->r->tcp_url);
  int rc = th_drive_lock(d, w->name, 1, w->wait_ms, w->lease_ms);
  freeReplyObject(th_cmd(w->r, "SET %s %lld", t, (long long)th_now_ms()));
  _exit(-rc);
}

static void go(th_redis *r, const char *name, int id) {
  freeReplyObject(th_cmd(r, "SET %s:go:%d 1", name, id));
}

/* SIGSTOP pid and wait (bounded) until it is stopped. */
static void stop(pid_t pid) {
  CHECK(kill(pid, SIGSTOP) == 0);
  char path[64], st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (int i = 0; i < 1000 && st != 'T'; i++) { /* bounded: 10 s */
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%*d %*s %c", &st) != 1)
      st = 0;
    if (f)
      fclose(f);
    if (st != 'T')
      th_sleep_ms(10);
  }
  CHECK_MSG(st == 'T', "process %d did not stop", (int)pid);
}

/* Issue 38.1: B queues with a 1 s lease and is paused (SIGSTOP, as a GC
 * pause or a swapped-out process would be); A unlocks and hands the lock
 * to B; B's hand-over expires unclaimed; C takes the lock with a 20 s
 * lease; B resumes. At 7d6b26d the grant flag set before the pause stayed
 * set: after one confirmation found the hold gone, B attempted (C's TTL),
 * slept -- and the flag woke it at once, and "the last attempt was sent
 * less than lease/4 ago" answered held with no round trip: B's timedlock
 * returned OK while C held the lock. A wake-up is now consumed by the
 * wake it caused, and "held" comes from the server's answer. */
static void paused_waiter_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  waiter w = {r, "late-paused", kind, 1, 6000 * mult(), 1000};
  pid_t b = th_fork(waiter_main, &w);
  dlock_client *ca = th_client(r), *cc = th_client(r);
  th_holder a = th_holder_new(ca, TH_K_MUTEX, w.name);
  th_holder c = th_holder_new(cc, TH_K_MUTEX, w.name);
  CHECK_OK(th_holder_lock(&a, 0, 30000));
  go(r, w.name, 1);
  const char *q = "dlock_lock_queue:{late-paused}";
  th_wait_llen(r, q, 1, 10000 * mult());
  stop(b);
  /* B's entry made old (past the policy's age): the unlock hands it over */
  redisReply *x = th_cmd(r, "LINDEX %s 0", q);
  CHECK(x->type == REDIS_REPLY_STRING);
  freeReplyObject(th_cmd(r, "HSET dlock_lock_waits:{late-paused} t%s %lld",
                         strrchr(x->str, '|') + 1, th_server_ms(r) - 60000));
  freeReplyObject(x);
  CHECK_OK(th_holder_unlock(&a)); /* handed to the paused B */
  CHECK_EQ(th_cmd_int(r, "HLEN %s", w.name), 1);
  int64_t end = th_now_ms() + 5000 * mult();
  while (th_cmd_int(r, "EXISTS %s", w.name) == 1 && th_now_ms() < end)
    th_sleep_ms(20); /* B's 1 s hand-over runs out */
  /* C's lease outlasts all of B's wait (6 s times the multiplier): a fixed
   * 20 s did not under valgrind's multiplier 4, and B rightly took the
   * lock once C's lease had run out (its timedlock said OK). */
  CHECK_OK(th_holder_lock(&c, 0, w.wait_ms + 14000 * mult()));
  CHECK(kill(b, SIGCONT) == 0);
  int st = th_wait(b, 30000 * mult());
  CHECK_MSG(st != 0,
            "%s: the paused waiter's timedlock said OK while another "
            "client held the lock",
            kind == TH_DRIVE_ASYNC ? "async" : "blocking");
  CHECK_EQ(st, -DLOCK_ETIMEDOUT);
  CHECK_EQ(th_cmd_int(r, "HLEN %s", w.name), 1); /* C's, still */
  long long left = 0;
  CHECK_OK(th_holder_validity(&c, &left));
  CHECK_OK(th_holder_unlock(&c));
  th_holder_free(&a);
  th_holder_free(&c);
  dlock_client_free(ca);
  dlock_client_free(cc);
}
TH_CASE_T(paused_waiter_is_not_granted_by_a_stale_wake_up_blocking, 120,
          "slow") {
  paused_waiter_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(paused_waiter_is_not_granted_by_a_stale_wake_up_async, 120, "slow") {
  paused_waiter_body(TH_DRIVE_ASYNC);
}

/* Issue 38.7: the queue's head is younger than the slice, so the unlock
 * leaves the lock free and wakes only that head (a retry); the head is
 * paused and its wait's deadline passes; it resumes and its wait ends
 * without attempting. At 7d6b26d its cancel removed its entry and left the
 * lock free: C, queued behind it, got the lock only when A's lease would
 * have ended (about 20 s). A lock left free with live waiters is taken or
 * handed on by whoever ends the chain: the cancel passes it on. */
static void free_lock_with_waiter_body(int kind, int kill_head) {
  th_redis *r = th_redis_new(1, NULL);
  waiter wb = {r, "late-free", kind, 1, 1500 * mult(), 30000};
  waiter wc = {r, "late-free", TH_DRIVE_BLOCKING, 2, 40000 * mult(), 5000};
  pid_t b = th_fork(waiter_main, &wb), cpid = th_fork(waiter_main, &wc);
  dlock_client *ca = th_client(r);
  th_holder a = th_holder_new(ca, TH_K_MUTEX, wb.name);
  CHECK_OK(th_holder_lock(&a, 0, 20000));
  const char *q = "dlock_lock_queue:{late-free}";
  go(r, wb.name, 1);
  th_wait_llen(r, q, 1, 10000 * mult());
  go(r, wc.name, 2);
  th_wait_llen(r, q, 2, 10000 * mult());
  stop(b);
  /* B's entry made young: the unlock leaves the lock free for it */
  redisReply *x = th_cmd(r, "LINDEX %s 0", q);
  CHECK(x->type == REDIS_REPLY_STRING);
  const char *wid = strrchr(x->str, '|') + 1;
  freeReplyObject(th_cmd(r, "HSET dlock_lock_waits:{late-free} t%s %lld", wid,
                         th_server_ms(r) + 60000));
  freeReplyObject(x);
  CHECK_OK(th_holder_unlock(&a));
  CHECK_EQ(th_cmd_int(r, "EXISTS %s", wb.name), 0); /* left free */
  th_sleep_ms(1700 * mult()); /* B's deadline passes while it is paused */
  int64_t t0 = th_now_ms();
  if (kill_head) { /* a head that never acts: only the backstop is left */
    CHECK(kill(b, SIGKILL) == 0);
    CHECK_EQ(th_wait(b, 30000 * mult()), -SIGKILL);
  } else {
    CHECK(kill(b, SIGCONT) == 0);
    CHECK_EQ(th_wait(b, 30000 * mult()), -DLOCK_ETIMEDOUT);
  }
  int st = th_wait(cpid, 60000 * mult());
  CHECK_MSG(st == 0, "C: %s", dlock_err_name(-st));
  long long tc = th_get_ll(r, "late-free:t:2");
  CHECK_MSG(tc - t0 < 3000 * mult(),
            "C got the free lock %lld ms after the paused head's wait "
            "ended (%s head)",
            tc - t0, kind == TH_DRIVE_ASYNC ? "async" : "blocking");
  th_holder_free(&a);
  dlock_client_free(ca);
}
TH_CASE_T(free_lock_with_a_live_waiter_is_passed_on_blocking, 120, "slow") {
  free_lock_with_waiter_body(TH_DRIVE_BLOCKING, 0);
}
TH_CASE_T(free_lock_with_a_live_waiter_is_passed_on_async, 120, "slow") {
  free_lock_with_waiter_body(TH_DRIVE_ASYNC, 0);
}
/* The head killed instead (it never attempts, never cancels): the waiters
 * behind it attempt again within DLOCK__ENG_QUEUED_RECHECK_MS (engine.h)
 * and one takes the free lock. At 7d6b26d C slept until A's lease would
 * have ended. C here is a blocking client; the head's kind does not
 * matter, both are run. */
TH_CASE_T(free_lock_behind_a_killed_head_is_taken_blocking, 120, "slow") {
  free_lock_with_waiter_body(TH_DRIVE_BLOCKING, 1);
}
TH_CASE_T(free_lock_behind_a_killed_head_is_taken_async, 120, "slow") {
  free_lock_with_waiter_body(TH_DRIVE_ASYNC, 1);
}

/* ---- the undo of an acquisition the replicas did not confirm ---- */

/* Issue 38.4: sync_replicas 1, the replica paused: the acquisition is
 * undone (DLOCK_ENOSYNC) and the undo is held on the wire (its outcome
 * unknown); the replica resumes; the thread locks again; the undo's copy
 * runs. At 7d6b26d the undo carried a fresh id and no tombstone even when
 * re-sent: its late copy released the retried acquisition (A held with 17
 * s left while another client acquired). The undo is now bound like any
 * release: pending, settled before the next acquisition. */
static void late_undo_body(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  th_redis *rep = th_replica_new(r);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = (int)(300 * mult());
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  dlock_client *other = th_client(r);
  const char *name = "late-undo";
  char m[96];
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  th_redis_pause(rep);
  rel_match(name, m, sizeof m);
  fp_hold(p, "EVALSHA", m, (int)(2500 * mult()), 1);
  CHECK_RC(th_drive_lock(d, name, 1, 0, 20000), DLOCK_ENOSYNC);
  th_redis_resume(rep);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  delivered(p, 1, d);
  CHECK_MSG(th_count_of(r, name) == 1,
            "%s: the late copy of an undo released the next acquisition",
            th_drive_kind(d));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_drive_unlock(d, name, 1));
  th_holder_free(&o);
  th_drive_free(d);
  dlock_client_free(other);
}
/* The same on every blocking kind: the undo is the kind's release, bound
 * on the path every mutex kind shares (mutex.c undo_unsynced). */
static void late_undo_kind_body(int kind) {
  th_redis *r = th_redis_new(1, NULL);
  th_redis *rep = th_replica_new(r);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = (int)(300 * mult());
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, kind);
  char name[48], m[96];
  snprintf(name, sizeof name, "late-undo-%s", th_kind_name(kind));
  th_holder h = th_holder_new(c, kind, name);
  th_holder o = th_holder_new(other, kind, name);
  th_redis_pause(rep);
  fp_hold(p, "EVALSHA", rel_match(name, m, sizeof m), (int)(2500 * mult()), 1);
  CHECK_RC(th_holder_lock(&h, 0, 20000), DLOCK_ENOSYNC);
  th_redis_resume(rep);
  CHECK_OK(th_holder_lock(&h, 0, 20000));
  delivered(p, 1, NULL);
  CHECK_MSG(th_count_of(r, name) >= 1,
            "%s: the late copy of an undo released the next acquisition",
            th_kind_name(kind));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_holder_unlock(&h));
  th_holder_free(&o);
  th_holder_free(&h);
  dlock_client_free(other);
  dlock_client_free(c);
}
TH_CASE_T(late_undo_copy_never_releases_the_next_hold_fair, 120, "slow") {
  late_undo_kind_body(TH_K_FAIR);
}
TH_CASE_T(late_undo_copy_never_releases_the_next_hold_fenced, 120, "slow") {
  late_undo_kind_body(TH_K_FENCED);
}
TH_CASE_T(late_undo_copy_never_releases_the_next_hold_read, 120, "slow") {
  late_undo_kind_body(TH_K_READ);
}
TH_CASE_T(late_undo_copy_never_releases_the_next_hold_write, 120, "slow") {
  late_undo_kind_body(TH_K_WRITE);
}

TH_CASE_T(late_undo_copy_never_releases_the_next_hold_blocking, 120, "slow") {
  late_undo_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(late_undo_copy_never_releases_the_next_hold_async, 120, "slow") {
  late_undo_body(TH_DRIVE_ASYNC);
}

/* ---- Redlock: a late copy on one master ---- */

/* Issue 43, "not yet tried": a Redlock unlock whose release votes on two
 * of three masters are held on the wire (the votes time out; the unlock
 * answers); the thread locks again (the two masters still had its field:
 * it takes them as its own); then the held release copies run. At
 * 7d6b26d they deleted the new hold on both masters: another client then
 * took a majority while the first still held the Redlock. An acquire vote
 * now writes the last release round's tombstone before it acts, so no copy
 * of that release can act after it. */
TH_CASE(late_release_copy_on_redlock_masters) {
  th_redis *m[3];
  fp_proxy *p[2];
  dlock_client *ca[3], *cb[3];
  for (int i = 0; i < 3; i++) {
    m[i] = th_redis_new(1, NULL);
    if (i < 2) {
      p[i] = fp_new(NULL, m[i]->port);
      dlock_config cfg = through(p[i], 0);
      ca[i] = th_client_cfg(m[i], &cfg);
    } else {
      ca[i] = th_client(m[i]);
    }
    cb[i] = th_client(m[i]);
  }
  dlock_redlock *a, *b, *w;
  CHECK_OK(dlock_redlock_new(ca, 3, "late-rl-warm", &w)); /* scripts loaded */
  CHECK_OK(dlock_redlock_timedlock(w, 0, 20000));
  CHECK_OK(dlock_redlock_unlock(w));
  dlock_redlock_free(w);
  CHECK_OK(dlock_redlock_new(ca, 3, "late-rl", &a));
  CHECK_OK(dlock_redlock_new(cb, 3, "late-rl", &b));
  CHECK_OK(dlock_redlock_timedlock(a, 0, 20000));
  for (int i = 0; i < 2; i++) /* the release's channel: only releases */
    fp_hold(p[i], "EVALSHA", "redisson_lock__channel:{late-rl}", hold_ms(), 1);
  (void)dlock_redlock_unlock(a); /* two release votes time out */
  /* (a master whose vote thread is still ending counts as busy for a
   * moment: a short wait) */
  CHECK_OK(dlock_redlock_timedlock(a, 3000 * mult(), 20000));
  for (int i = 0; i < 2; i++)
    delivered(p[i], 1, NULL);
  /* the hold keeps its quorum (a master whose vote of the release was
   * still ending may not have voted: there the late copy deletes what
   * remained of the old hold, which is right) */
  long long held = 0;
  for (int i = 0; i < 3; i++)
    held += th_cmd_int(m[i], "EXISTS late-rl");
  CHECK_MSG(held >= 2,
            "late release copies left the new hold on %lld of 3 "
            "masters",
            held);
  CHECK_RC(dlock_redlock_trylock(b), DLOCK_EBUSY);
  long long left = 0;
  CHECK_OK(dlock_redlock_validity(a, &left));
  CHECK_OK(dlock_redlock_unlock(a));
  CHECK_OK(dlock_redlock_trylock(b));
  CHECK_OK(dlock_redlock_unlock(b));
  dlock_redlock_free(a);
  dlock_redlock_free(b);
  for (int i = 0; i < 3; i++) {
    dlock_client_free(ca[i]);
    dlock_client_free(cb[i]);
  }
}

/* ---- multilock members ---- */

/* Issue 43, "not yet tried": a multilock's member unlocks through the
 * mutex path. Member a's release is held (DLOCK_ECONN: the multilock
 * stays held); the caller's retry releases the rest; the thread takes the
 * multilock again; then a's first copy runs. At 7d6b26d it released the
 * new hold of a. */
TH_CASE(late_member_release_of_a_multilock) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, TH_K_MUTEX);
  dlock_mutex *ms[2], *oa;
  CHECK_OK(dlock_mutex_new(c, "late-ml-a", &ms[0]));
  CHECK_OK(dlock_mutex_new(c, "late-ml-b", &ms[1]));
  CHECK_OK(dlock_mutex_new(other, "late-ml-a", &oa));
  dlock_multilock *ml;
  CHECK_OK(dlock_multilock_new(ms, 2, &ml));
  CHECK_OK(dlock_multilock_timedlock(ml, 0, 20000));
  fp_hold(p, "EVALSHA", "redisson_unlock_latch:{late-ml-a}", hold_ms(), 1);
  /* (at 7d6b26d a tombstone SET followed the retry: held too) */
  fp_hold(p, "SET", "redisson_unlock_latch:{late-ml-a}", hold_ms(), 1);
  CHECK_RC(dlock_multilock_unlock(ml), DLOCK_ECONN);
  CHECK_OK(dlock_multilock_unlock(ml)); /* the retry: a's committing copy */
  CHECK_OK(dlock_multilock_timedlock(ml, 0, 20000));
  delivered(p, 1, NULL);
  CHECK_MSG(th_count_of(r, "late-ml-a") == 1,
            "a late copy of a member's release released its new hold");
  CHECK_RC(dlock_mutex_trylock(oa), DLOCK_EBUSY);
  CHECK_OK(dlock_multilock_unlock(ml));
  dlock_multilock_free(ml);
  dlock_mutex_free(oa);
  dlock_mutex_free(ms[0]);
  dlock_mutex_free(ms[1]);
  dlock_client_free(other);
  dlock_client_free(c);
}

/* Issue 38.4, second part: after an acquisition undone for DLOCK_ENOSYNC
 * and a retry that succeeded within the same call, dlock_last_error()
 * still held the undone try's text (the header says it is empty after a
 * success). */
typedef struct resumer {
  th_redis *rep;
  int64_t after_ms;
} resumer;
static void *resume_later(void *arg) {
  resumer *x = arg;
  th_sleep_ms(x->after_ms);
  th_redis_resume(x->rep);
  return NULL;
}
static void enosync_retry_body(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  th_redis *rep = th_replica_new(r);
  dlock_config cfg;
  dlock_config_init(&cfg);
  cfg.url = r->tcp_url;
  cfg.sync_replicas = 1;
  cfg.sync_timeout_ms = (int)(200 * mult());
  cfg.retry_attempts = 20;
  cfg.retry_interval_ms = (int)(100 * mult());
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  th_redis_pause(rep);
  resumer x = {rep, 300 * mult()};
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, resume_later, &x), 0);
  int rc = th_drive_lock(d, "late-enosync", 1, 10000 * mult(), 20000);
  const char *msg = dlock_last_error();
  pthread_join(t, NULL);
  CHECK_OK(rc);
  dlock_client_stats st;
  CHECK_OK(th_drive_stats(d, &st));
  CHECK_MSG(st.enosync >= 1,
            "%s: no acquisition was undone (replica "
            "not paused in time?)",
            th_drive_kind(d));
  CHECK_MSG(msg[0] == '\0', "%s: after a successful retry: '%s'",
            th_drive_kind(d), msg);
  CHECK_OK(th_drive_unlock(d, "late-enosync", 1));
  th_drive_free(d);
}
TH_CASE_T(last_error_empty_after_a_retry_past_enosync_blocking, 120, "slow") {
  enosync_retry_body(TH_DRIVE_BLOCKING);
}
TH_CASE_T(last_error_empty_after_a_retry_past_enosync_async, 120, "slow") {
  enosync_retry_body(TH_DRIVE_ASYNC);
}

/* ---- a pending release outlives its object ---- */

/* The unlock is held on the wire (DLOCK_ECONN); the caller frees the mutex
 * object and makes a new one of the name, which locks; then the held copy
 * runs. A pending release is an obligation of the (client, name, thread),
 * not of an object: the new object's lock settles it first. */
TH_CASE(pending_release_outlives_its_object) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  warm_at(r, TH_K_MUTEX);
  const char *name = "late-obj";
  char m[96];
  dlock_mutex *a, *o;
  CHECK_OK(dlock_mutex_new(c, name, &a));
  CHECK_OK(dlock_mutex_new(other, name, &o));
  CHECK_OK(dlock_mutex_timedlock(a, 0, 20000));
  fp_hold(p, "EVALSHA", rel_match(name, m, sizeof m), hold_ms(), 1);
  CHECK_RC(dlock_mutex_unlock(a), DLOCK_ECONN);
  dlock_mutex_free(a);
  CHECK_OK(dlock_mutex_new(c, name, &a));
  CHECK_OK(dlock_mutex_timedlock(a, 0, 20000));
  delivered(p, 1, NULL);
  CHECK_MSG(th_count_of(r, name) == 1,
            "the late copy of the old object's unlock released the new "
            "object's hold");
  CHECK_RC(dlock_mutex_trylock(o), DLOCK_EBUSY);
  CHECK_OK(dlock_mutex_unlock(a));
  CHECK_OK(dlock_mutex_trylock(o));
  CHECK_OK(dlock_mutex_unlock(o));
  dlock_mutex_free(a);
  dlock_mutex_free(o);
  dlock_client_free(other);
  dlock_client_free(c);
}

/* ---- an acquisition answered after its lease ---- */

typedef struct taker {
  th_redis *r;
  th_holder *o;
  const char *name;
  int rc;
} taker;

/* B: waits until A's key came and went (its 500 ms lease), then takes the
 * lock for 20 s. */
static void *take_after_expiry(void *arg) {
  taker *t = arg;
  int64_t end = th_now_ms() + 10000 * mult();
  while (th_cmd_int(t->r, "EXISTS %s", t->name) == 0 && th_now_ms() < end)
    th_sleep_ms(5);
  while (th_cmd_int(t->r, "EXISTS %s", t->name) == 1 && th_now_ms() < end)
    th_sleep_ms(5);
  t->rc = th_holder_lock(t->o, 0, 20000);
  return NULL;
}

/* Issue 38.5's rule, for the locks (the soak's wire adversary found it on
 * the event-loop client): A's acquire with a 500 ms lease is answered 1.5
 * s late (its reply held); meanwhile the key expired and B took the lock.
 * At 7d6b26d A's call answered OK -- two holders, A's local deadline in
 * the past. A first hold answered past its local deadline is no hold:
 * given back (B's hold untouched), DLOCK_ELOST for a try-lock. */
static void late_answer_body(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  cfg.command_timeout_ms = (int)(5000 * mult()); /* late, not lost */
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  dlock_client *other = th_client(r);
  const char *name = "late-answer";
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  taker t = {r, &o, name, -1};
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, take_after_expiry, &t), 0);
  fp_arm(p, name, FP_DELAY, (int)(1500 * mult()));
  int rc = th_drive_lock(d, name, 1, 0, 500);
  pthread_join(th, NULL);
  CHECK_OK(t.rc); /* B holds */
  CHECK_MSG(rc != DLOCK_OK,
            "%s: an acquisition answered past its lease said OK while "
            "another client held the lock",
            th_drive_kind(d));
  CHECK_RC(rc, DLOCK_ELOST);
  CHECK_EQ(th_count_of(r, name), 1); /* B's, untouched by the give-back */
  char field[160];
  th_drive_field(d, name, 1, field, sizeof field);
  CHECK_EQ(th_cmd_int(r, "HEXISTS %s %s", name, field), 0); /* not A's */
  th_holder_free(&o);
  th_drive_free(d);
  dlock_client_free(other);
}
TH_CASE(acquisition_answered_past_its_lease_is_no_hold_blocking) {
  late_answer_body(TH_DRIVE_BLOCKING);
}
TH_CASE(acquisition_answered_past_its_lease_is_no_hold_async) {
  late_answer_body(TH_DRIVE_ASYNC);
}

/* Two copies of the final unlock held (the first long), the third
 * answered: the release was sent three times; its commit must cover the
 * first copy's late delivery after the owner locked again (the soak's
 * tomb-copy shape). */
static void two_held_copies_drive(int dk) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 3);
  th_drive *d = th_drive_new(dk, &cfg);
  warm_at(r, TH_K_MUTEX);
  dlock_client *other = th_client(r);
  const char *name = "late-two-held";
  char m[96];
  th_holder o = th_holder_new(other, TH_K_MUTEX, name);
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  rel_match(name, m, sizeof m);
  fp_hold(p, "EVALSHA", m, (int)(2500 * mult()), 2);
  CHECK_OK(th_drive_unlock(d, name, 1));
  CHECK_OK(th_drive_lock(d, name, 1, 0, 20000));
  delivered(p, 2, d);
  CHECK_MSG(th_count_of(r, name) == 1,
            "%s: a late copy of a thrice-sent unlock released a later hold",
            th_drive_kind(d));
  CHECK_RC(th_holder_try_excluded(&o), DLOCK_EBUSY);
  CHECK_OK(th_drive_unlock(d, name, 1));
  th_holder_free(&o);
  th_drive_free(d);
  dlock_client_free(other);
}
TH_CASE(two_held_copies_of_an_unlock_blocking) {
  two_held_copies_drive(TH_DRIVE_BLOCKING);
}
TH_CASE(two_held_copies_of_an_unlock_async) {
  two_held_copies_drive(TH_DRIVE_ASYNC);
}

/* ---- counts changed by the library's own re-send ---- */

/* Issue 43: post #1's first copy held 1 s, the router's re-send counted it
 * and the call returned; the next post deleted post #1's once key, so the
 * held copy counted again (3 after 2 posts). A once key now stays while a
 * copy of its request may still arrive. The latch the same way. */
TH_CASE(router_resend_counts_once_semaphore_and_latch) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 2);
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_sem *s;
  CHECK_OK(dlock_sem_new(c, "late-sem", &s));
  CHECK_OK(dlock_sem_init(s, 0));
  fp_arm_hold(p, "dlock_once:{late-sem}", (int)(1000 * mult()), 1);
  CHECK_OK(dlock_sem_post(s));
  CHECK_OK(dlock_sem_post(s));
  delivered(p, 1, NULL);
  long long v = -1;
  CHECK_OK(dlock_sem_value(s, &v));
  CHECK_MSG(v == 2, "2 posts from 0 left %lld permits", v);
  dlock_latch *l;
  CHECK_OK(dlock_latch_new(c, "late-latch", &l));
  CHECK_OK(dlock_latch_init(l, 3));
  fp_arm_hold(p, "dlock_once:{late-latch}", (int)(1000 * mult()), 1);
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_count_down(l));
  delivered(p, 2, NULL);
  CHECK_OK(dlock_latch_count(l, &v));
  CHECK_MSG(v == 1, "2 count-downs from 3 left %lld", v);
  dlock_latch_free(l);
  dlock_sem_free(s);
  dlock_client_free(c);
}

TH_MAIN()

/* Found by the Sentinel soak (issue 38): the watchdog's renewal of a read
 * hold is sent after the hold ended (the watchdog collected it, then sat
 * on its batch), and runs once the same thread's next read hold of the
 * name began -- same field, same count, so it matched. At 94726a9 the read
 * renewal set every timeout key of the thread to the watchdog lease:
 * the next hold's fixed 60 s lease became 1.5 s on the server, another
 * reader's unlock then found no live read hold and deleted the lock, and
 * a writer took it while the reader's validity still said held. A renewal
 * only extends now (rules_check: "extends only" scripts write through
 * DLOCK__LUA_TTL's extend). Here the renewal is held on the wire and
 * delivered after the unlock and the next lock. (The event-loop client
 * has no read-write lock.) */
TH_CASE(late_read_renewal_never_cuts_the_next_read_hold) {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  cfg.watchdog_timeout_ms = (int)(1500 * mult());
  dlock_client *c = th_client_cfg(r, &cfg), *other = th_client(r);
  dlock_rwlock *rw, *o;
  CHECK_OK(dlock_rwlock_new(c, "late-rdrenew", &rw));
  CHECK_OK(dlock_rwlock_new(other, "late-rdrenew", &o));
  char me[80];
  {
    dlock_mutex *m;
    CHECK_OK(dlock_mutex_new(c, "x", &m));
    CHECK_OK(dlock_mutex_owner(m, me, sizeof me));
    dlock_mutex_free(m);
  }
  char tk[160];
  snprintf(tk, sizeof tk, "{late-rdrenew}:%s:rwlock_timeout", me);
  /* a first renewal loads the script (a held copy must run, not meet
   * NOSCRIPT) */
  CHECK_OK(dlock_rwlock_rdlock(rw));
  fp_count_reset(p, tk);
  int64_t end = th_now_ms() + 20000 * mult();
  while (fp_count(p) < 1 && th_now_ms() < end)
    th_sleep_ms(10);
  CHECK_MSG(fp_count(p) >= 1, "no read renewal was sent");
  th_sleep_ms(100);
  CHECK_OK(dlock_rwlock_unlock(rw));
  /* the next renewal of the next watchdog hold is held on the wire */
  CHECK_OK(dlock_rwlock_rdlock(rw));
  fp_hold(p, "EVALSHA", tk, hold_ms(), 1);
  fp_count_reset(p, tk);
  end = th_now_ms() + 20000 * mult();
  while (fp_count(p) < 1 && th_now_ms() < end)
    th_sleep_ms(10);
  CHECK_MSG(fp_count(p) >= 1, "no read renewal was sent");
  CHECK_OK(dlock_rwlock_unlock(rw));
  CHECK_OK(dlock_rwlock_timedrdlock(rw, 0, 60000));
  delivered(p, 1, NULL);
  char key[200];
  snprintf(key, sizeof key, "PTTL %s:1", tk);
  long long ttl = th_cmd_int(r, key);
  CHECK_MSG(ttl > 30000,
            "the late renewal cut the next hold's 60 s lease to %lld ms", ttl);
  /* another reader comes and goes once the watchdog lease is over */
  th_sleep_ms(cfg.watchdog_timeout_ms + 300);
  CHECK_OK(dlock_rwlock_tryrdlock(o));
  CHECK_OK(dlock_rwlock_unlock(o));
  long long left = 0;
  CHECK_OK(dlock_rwlock_validity(rw, &left));
  CHECK(left > 10000);
  CHECK_RC(dlock_rwlock_trywrlock(o), DLOCK_EBUSY);
  CHECK_OK(dlock_rwlock_unlock(rw));
  CHECK_OK(dlock_rwlock_trywrlock(o));
  CHECK_OK(dlock_rwlock_unlock(o));
  dlock_rwlock_free(o);
  dlock_rwlock_free(rw);
  dlock_client_free(other);
  dlock_client_free(c);
}

/* ---- a permit's renewal only raises its expiry ---- */

/* The expiry of the only permit in name's set (ms since the epoch), or -1. */
static long long permit_expiry(th_redis *r, const char *name) {
  redisReply *x = th_cmd(r, "ZRANGE {%s}:timeout 0 -1 WITHSCORES", name);
  long long e = x && x->elements == 2 ? atoll(x->element[1]->str) : -1;
  freeReplyObject(x);
  return e;
}

/* A watchdog permit's renewal held on the wire past the command timeout:
 * the renewal's retry runs meanwhile and sets a later expiry; then the held
 * copy runs. It must not move the expiry back below the retry's (the
 * holder's local deadline counts from the retry's send, so another client
 * could take the permit while it still holds it). The old script's plain
 * ZADD moved it back by the time between the two sends (the simulator's
 * finding, issue 41: seed 1, 52.2 s simulated). Blocking client: the
 * event-loop client has no permits. */
TH_CASE_T(late_permit_renewal_never_lowers_the_expiry, 120, "slow") {
  th_redis *r = th_redis_new(1, NULL);
  fp_proxy *p = fp_new(NULL, r->port);
  dlock_config cfg = through(p, 0);
  cfg.watchdog_timeout_ms = (int)(6000 * mult());
  dlock_client *c = th_client_cfg(r, &cfg);
  dlock_permits *pm;
  CHECK_OK(dlock_permits_new(c, "late-pm", &pm));
  CHECK_OK(dlock_permits_try_set_permits(pm, 1));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permits_try_acquire(pm, -1, id));
  /* one renewal first: its script is loaded (a held copy must run) */
  long long e0 = permit_expiry(r, "late-pm"), e = e0;
  int64_t end = th_now_ms() + 3 * cfg.watchdog_timeout_ms;
  while (e <= e0 && th_now_ms() < end) {
    th_sleep_ms(10);
    e = permit_expiry(r, "late-pm");
  }
  CHECK_MSG(e > e0, "no renewal within %d ms", 3 * cfg.watchdog_timeout_ms);
  fp_hold(p, "EVALSHA", "{late-pm}:timeout", hold_ms(), 1);
  long long seen = e;
  end = th_now_ms() + 3 * cfg.watchdog_timeout_ms + hold_ms();
  while (fp_fired(p) < 1 && th_now_ms() < end) {
    long long now = permit_expiry(r, "late-pm");
    if (now > seen)
      seen = now;
    th_sleep_ms(5);
  }
  long long after = permit_expiry(r, "late-pm");
  delivered(p, 1, NULL);
  printf("expiry: %lld before the held copy ran, %lld after (%+lld ms)\n", seen,
         after, after - seen);
  CHECK_MSG(after >= seen,
            "a late renewal copy moved the permit's expiry back by %lld ms",
            seen - after);
  CHECK_OK(dlock_permits_release(pm, id));
  dlock_permits_free(pm);
  dlock_client_free(c);
}
