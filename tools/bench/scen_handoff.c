/*
 * scen_handoff.c -- how long after an unlock returns does the next waiter,
 * in another process, hold the lock?
 *
 * Two processes take turns on one lock. In round r the holder waits until
 * the other process is queued behind it (announced in shared memory, then
 * its entry seen in the lock's wait queue), unlocks, and stores the
 * CLOCK_MONOTONIC time at which dlock_mutex_unlock returned; the waiter
 * stores the time at which its dlock_mutex_lock returned. Both clocks are
 * the same kernel clock, shared through an mmap'ed page. The holder of
 * round r becomes the waiter of round r+1 only after the hand-over, so its
 * own next attempt does not disturb the measured one.
 *
 * Hand-over latency = t_acquired - t_unlock_returned (negative when the
 * grant message beats the unlocker's own reply).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dlock.h"

#define SCEN "handoff"

typedef struct ho_shared {
  atomic_int ready;
  atomic_long waiting; /* the waiter of this round is inside lock() */
  atomic_long acquired;
  atomic_long stop_at; /* rounds from here on are not measured */
  atomic_long confirmed, unconfirmed;
  long rounds;
  int64_t deadline;
  char err[2][160];
  int64_t t[]; /* per round: call, returned, acquired */
} ho_shared;

typedef struct ho_arg {
  const bench_opts *o;
  ho_shared *sh;
  char name[96], queue[128];
} ho_arg;

#define T_CALL(sh, r) (sh)->t[(r)*3]
#define T_RET(sh, r) (sh)->t[(r)*3 + 1]
#define T_ACQ(sh, r) (sh)->t[(r)*3 + 2]

/* Waits (bounded) until *v >= want. 0 on success. */
static int wait_for(atomic_long *v, long want, int64_t limit_ns) {
  int64_t end = dlc_now_ns() + limit_ns;
  int spins = 0;
  while (atomic_load(v) < want) {
    if (dlc_now_ns() > end)
      return -1;
    if (++spins > 200)
      dlc_sleep_ns(20000);
  }
  return 0;
}

static void fail(ho_shared *sh, int i, const char *what, int rc) {
  snprintf(sh->err[i], sizeof sh->err[i], "%s: %s: %s", what,
           dlock_err_name(rc), dlock_last_error());
  atomic_store(&sh->stop_at, 0);
  _exit(1);
}

static void player(int i, void *p) {
  ho_arg *a = p;
  ho_shared *sh = a->sh;
  dlock_client *c = bench_client(a->o, 1, 0);
  dlock_mutex *m = NULL;
  if (dlock_mutex_new(c, a->name, &m))
    _exit(1);
  redisContext *r = bench_connect(a->o);
  const char *llen[2] = {"LLEN", a->queue};
  int rc;
  if (i == 0) {
    if ((rc = dlock_mutex_lock(m)) != 0)
      fail(sh, i, "first lock", rc);
    atomic_store(&sh->acquired, 0);
  }
  atomic_fetch_add(&sh->ready, 1);
  int fallback = 0;
  const int64_t step_limit = (int64_t)10e9;
  for (long rd = 1; rd <= sh->rounds; rd++) {
    if (rd % 2 == i) { /* waiter */
      if (wait_for(&sh->acquired, rd - 1, step_limit))
        _exit(1);
      int64_t stop = atomic_load(&sh->stop_at);
      if (rd >= stop)
        break;
      atomic_store(&sh->waiting, rd);
      rc = dlock_mutex_lock(m);
      int64_t t = dlc_now_ns();
      if (rc)
        fail(sh, i, "lock", rc);
      T_ACQ(sh, rd) = t;
      atomic_store(&sh->acquired, rd);
    } else { /* holder */
      if (rd >= atomic_load(&sh->stop_at))
        break;
      if (dlc_now_ns() > sh->deadline)
        atomic_store(&sh->stop_at, rd + 1); /* this last one still runs */
      if (wait_for(&sh->waiting, rd, step_limit))
        _exit(1);
      /* Is the waiter queued yet? */
      int queued = 0;
      if (!fallback) {
        int64_t end = dlc_now_ns() + 50000000LL;
        while (dlc_now_ns() < end) {
          redisReply *x = bench_cmd(r, 2, llen);
          queued = x->type == REDIS_REPLY_INTEGER && x->integer > 0;
          freeReplyObject(x);
          if (queued)
            break;
          dlc_sleep_ns(20000);
        }
      } else {
        dlc_sleep_ns(3000000);
      }
      if (queued) {
        atomic_fetch_add(&sh->confirmed, 1);
      } else {
        long u = atomic_fetch_add(&sh->unconfirmed, 1) + 1;
        if (u >= 5 && atomic_load(&sh->confirmed) == 0)
          fallback = 1; /* the queue key is not where we look */
      }
      T_CALL(sh, rd) = dlc_now_ns();
      rc = dlock_mutex_unlock(m);
      T_RET(sh, rd) = dlc_now_ns();
      if (rc)
        fail(sh, i, "unlock", rc);
      if (rd + 1 >= atomic_load(&sh->stop_at))
        break;
    }
  }
  /* Whoever holds the lock last lets it go. */
  if (dlock_mutex_unlock(m) != 0) {
    /* Not holding: fine. */
  }
  redisFree(r);
  dlock_mutex_free(m);
  dlock_client_free(c);
}

void scen_handoff(const bench_opts *o) {
  long rounds = o->handoff_rounds;
  bench_log("handoff: %ld hand-overs between 2 processes", rounds);
  size_t shsz = sizeof(ho_shared) + (size_t)(rounds + 2) * 3 * sizeof(int64_t);
  ho_shared *sh = bench_shm(shsz);
  sh->rounds = rounds;
  atomic_store(&sh->stop_at, rounds + 1);
  atomic_store(&sh->acquired, -1);
  sh->deadline = dlc_now_ns() + (int64_t)(o->quick ? 8e9 : 60e9);
  ho_arg a;
  a.o = o;
  a.sh = sh;
  snprintf(a.name, sizeof a.name, "%s:handoff", o->run_id);
  /* The library's wait queue (dlock_lock_queue:{name}, see
   * src/proto/scripts.c). */
  snprintf(a.queue, sizeof a.queue, "dlock_lock_queue:{%s}", a.name);
  int *pids = bench_fork(2, player, &a);
  int bad = bench_reap(pids, 2, sh->deadline + (int64_t)60e9);
  for (int i = 0; i < 2; i++)
    if (sh->err[i][0])
      bm_note("handoff process %d: %s", i, sh->err[i]);
  if (bad)
    bm_note("handoff: %d process(es) failed", bad);
  bench_samples h, full, unl;
  bs_init(&h);
  bs_init(&full);
  bs_init(&unl);
  long stop = atomic_load(&sh->stop_at);
  for (long r = 1; r <= rounds && r < stop; r++) {
    if (!T_ACQ(sh, r) || !T_RET(sh, r))
      continue;
    bs_add(&h, (double)(T_ACQ(sh, r) - T_RET(sh, r)) / 1e3);
    bs_add(&full, (double)(T_ACQ(sh, r) - T_CALL(sh, r)) / 1e3);
    bs_add(&unl, (double)(T_RET(sh, r) - T_CALL(sh, r)) / 1e3);
  }
  if ((long)h.n < rounds)
    bm_note("handoff: %zu of %ld rounds measured", h.n, rounds);
  long conf = atomic_load(&sh->confirmed), unc = atomic_load(&sh->unconfirmed);
  if (unc)
    bm_note("handoff: in %ld of %ld rounds the waiter was not seen in the "
            "queue before the unlock",
            unc, conf + unc);
  bm_put(SCEN, "rounds", "hand-overs measured", (double)h.n, "");
  bm_put(SCEN, "p50_us", "unlock returned -> other process holds, p50",
         bs_pct(&h, 50), "µs");
  bm_put(SCEN, "p99_us", "unlock returned -> other process holds, p99",
         bs_pct(&h, 99), "µs");
  bm_put(SCEN, "min_us", "unlock returned -> other process holds, min",
         bs_min(&h), "µs");
  bm_put(SCEN, "call_p50_us", "unlock called -> other process holds, p50",
         bs_pct(&full, 50), "µs");
  bm_put(SCEN, "unlock_p50_us", "unlock call duration, p50", bs_pct(&unl, 50),
         "µs");
  bs_free(&h);
  bs_free(&full);
  bs_free(&unl);
  bench_shm_free(sh, shsz);
}
