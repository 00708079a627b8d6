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
 * internal lock waits until the lock is released (src/callout.c). */
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

TH_MAIN()
