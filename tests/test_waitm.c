/*
 * test_waitm.c -- the wait machine (src/engine/waitm.c) on its own, no
 * server: every phase under every event, with made-up times and answers,
 * including a wake-up or a grant during an attempt, late and stray
 * events, the deadline on each path, the cancel's hand-over, riding out a
 * passing failure, and a stop. Both clients drive this one sequence
 * (kinds/mutex.c, async/async_lock.c).
 */
#include <string.h>

#include "engine/waitm.h"
#include "th.h"

/* A wait of wait_ms from t = 0 (deadline wait_ms, none when < 0). */
static dlock__wm wait_of(long long wait_ms, int prior, int64_t max_sleep,
                         int queue_first, int64_t ride_ms) {
  dlock__wm m;
  dlock__wm_init(&m, wait_ms, wait_ms >= 0 ? wait_ms : -1, prior, max_sleep,
                 queue_first, ride_ms);
  return m;
}

#define CHECK_ACT(a, k) CHECK_EQ((a).kind, DLOCK__WMA_##k)

/* A timed wait, not subscribed: attempt -> taken -> subscribe -> active ->
 * the queued attempt -> taken -> sleep -> a grant -> held by hand-over. */
TH_CASE(taken_subscribes_queues_then_a_grant_holds) {
  dlock__wm m = wait_of(5000, 0, 1000, 0, 0);
  CHECK(m.w.id != 0);
  dlock__wm_act a = dlock__wm_start(&m, 0, 0);
  CHECK_ACT(a, ATTEMPT);
  CHECK_EQ(a.target, 1);
  CHECK_EQ(a.queue, 0); /* not subscribed: nobody could hand it over */
  char rid1[33];
  memcpy(rid1, m.w.rid, sizeof rid1);
  CHECK_EQ(strlen(rid1), 32);
  a = dlock__wm_answer(&m, 0, 300, 0, 10);
  CHECK_ACT(a, SUBSCRIBE);
  CHECK_EQ(m.until, 310);
  a = dlock__wm_subscribed(&m, 1, 12);
  CHECK_ACT(a, ATTEMPT); /* active, not queued yet: queue now */
  CHECK_EQ(a.queue, 1);
  CHECK(m.w.queued);
  CHECK(strcmp(rid1, m.w.rid) != 0); /* a request id per attempt */
  a = dlock__wm_answer(&m, 0, 5000, 0, 20);
  CHECK_ACT(a, SLEEP);
  CHECK_EQ(a.until, 1020); /* the kind's longest sleep */
  CHECK(m.waited);
  a = dlock__wm_wake(&m, 1, 1, 400);
  CHECK_ACT(a, ATTEMPT); /* a grant makes an attempt, never a hold */
  CHECK_EQ(a.queue, 1);
  a = dlock__wm_answer(&m, 1, -1, 0, 405);
  CHECK_ACT(a, HELD);
  CHECK(m.handover);
  CHECK_EQ(m.phase, DLOCK__WM_DONE);
  CHECK_EQ(m.attempts, 3);
}

TH_CASE(trylock_taken_is_busy_and_never_queues) {
  dlock__wm m = wait_of(0, 0, 1000, 1, 100);
  CHECK_EQ(m.w.id, 0);
  dlock__wm_act a = dlock__wm_start(&m, 1, 0);
  CHECK_EQ(a.queue, 0); /* even a queue-first kind, even subscribed */
  a = dlock__wm_answer(&m, 0, 300, 0, 1);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_EBUSY);
  CHECK_EQ(a.why, DLOCK__WMW_BUSY);
  /* a try-lock never rides out a failure either */
  m = wait_of(0, 0, 0, 0, 100);
  (void)dlock__wm_start(&m, 0, 0);
  a = dlock__wm_answer(&m, DLOCK_ECONN, -1, 1, 1);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_ECONN);
  CHECK_EQ(a.why, DLOCK__WMW_FAILED);
}

/* Issue 38.1 by construction: a wake-up (or grant) that comes while an
 * attempt is in flight is answered by ONE more attempt after it, and then
 * it is spent: the next sleep is a sleep. */
TH_CASE(wake_during_attempt_costs_one_attempt_then_is_spent) {
  dlock__wm m = wait_of(-1, 0, 0, 0, 0);
  dlock__wm_act a = dlock__wm_start(&m, 1, 0); /* joined: queued at once */
  CHECK_EQ(a.queue, 1);
  a = dlock__wm_answer(&m, 0, 800, 0, 5);
  CHECK_ACT(a, SLEEP); /* joined: already subscribed */
  CHECK_EQ(a.until, 805);
  a = dlock__wm_wake(&m, 0, 1, 100);
  CHECK_ACT(a, ATTEMPT);
  a = dlock__wm_wake(&m, 1, 1, 101); /* a grant, during the attempt */
  CHECK_ACT(a, NONE);
  a = dlock__wm_wake(&m, 0, 1, 102); /* and a message: still one */
  CHECK_ACT(a, NONE);
  a = dlock__wm_answer(&m, 0, 800, 0, 110);
  CHECK_ACT(a, ATTEMPT); /* the one more attempt */
  a = dlock__wm_answer(&m, 0, 800, 0, 120);
  CHECK_ACT(a, SLEEP); /* spent: no third attempt */
  CHECK_EQ(a.until, 920);
  a = dlock__wm_wake(&m, 0, 1, 920);
  CHECK_ACT(a, ATTEMPT);
  a = dlock__wm_answer(&m, 1, -1, 0, 925);
  CHECK_ACT(a, HELD);
  CHECK(!m.handover); /* the grant's attempt found it taken: not ours */
}

TH_CASE(the_grant_counts_for_the_attempt_it_caused) {
  dlock__wm m = wait_of(-1, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 1, 0);
  (void)dlock__wm_answer(&m, 0, 800, 0, 5);
  (void)dlock__wm_wake(&m, 0, 1, 100);
  (void)dlock__wm_wake(&m, 1, 1, 101); /* during the attempt */
  dlock__wm_act a = dlock__wm_answer(&m, 0, 800, 0, 110);
  CHECK_ACT(a, ATTEMPT);
  a = dlock__wm_answer(&m, 1, -1, 0, 115);
  CHECK_ACT(a, HELD);
  CHECK(m.handover);
}

/* The deadline ends a wait at the first event past it, through the cancel
 * when an attempt may have queued it; the cancel's answers. */
TH_CASE(deadline_cancels_a_queued_wait_and_keeps_its_code) {
  dlock__wm m = wait_of(1000, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 1, 0);
  dlock__wm_act a = dlock__wm_answer(&m, 0, 5000, 0, 5);
  CHECK_ACT(a, SLEEP);
  CHECK_EQ(a.until, 1000); /* the deadline bounds the sleep */
  a = dlock__wm_wake(&m, 0, 1, 1000);
  CHECK_ACT(a, CANCEL); /* no attempt at the deadline */
  CHECK_EQ(m.attempts, 1);
  CHECK_ACT(dlock__wm_wake(&m, 1, 1, 1001), NONE); /* the cancel finds it */
  CHECK_ACT(dlock__wm_stop(&m, DLOCK_ECANCELED, 1002), NONE);
  a = dlock__wm_cancel_answer(&m, 0);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_ETIMEDOUT);
  CHECK_EQ(a.why, DLOCK__WMW_TIMED_OUT);
  CHECK(!m.w.queued);
}

TH_CASE(cancel_that_finds_a_hand_over_confirms_it) {
  dlock__wm m = wait_of(1000, 0, 0, 1, 0); /* queue-first (fair) */
  dlock__wm_act a = dlock__wm_start(&m, 0, 0);
  CHECK_EQ(a.queue, 1);
  a = dlock__wm_answer(&m, 0, 5000, 0, 1500); /* answered past it */
  CHECK_ACT(a, CANCEL);
  a = dlock__wm_cancel_answer(&m, 1);
  CHECK_ACT(a, ATTEMPT);
  CHECK_EQ(a.queue, 0); /* confirming: never queues */
  CHECK_EQ(m.phase, DLOCK__WM_CONFIRMING);
  a = dlock__wm_answer(&m, 1, -1, 0, 1510);
  CHECK_ACT(a, HELD);
  CHECK(m.handover);
  /* the confirming attempt finds it gone: the wait's own code */
  m = wait_of(1000, 0, 0, 1, 0);
  (void)dlock__wm_start(&m, 0, 0);
  (void)dlock__wm_answer(&m, 0, 5000, 0, 1500);
  (void)dlock__wm_cancel_answer(&m, 1);
  a = dlock__wm_answer(&m, DLOCK_ECONN, -1, 1, 1510);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_ETIMEDOUT);
}

/* Never queued (the subscription never confirmed): the deadline ends it
 * without a cancel. */
TH_CASE(deadline_of_a_wait_never_queued_ends_without_cancel) {
  dlock__wm m = wait_of(300, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 0, 0);
  dlock__wm_act a = dlock__wm_answer(&m, 0, 5000, 0, 5);
  CHECK_ACT(a, SUBSCRIBE);
  a = dlock__wm_subscribed(&m, 0, 6); /* confirmation to come */
  CHECK_ACT(a, SLEEP);
  CHECK_EQ(a.until, 300);
  a = dlock__wm_wake(&m, 0, 0, 301);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_ETIMEDOUT);
  /* ... and the confirmation, when it comes, wakes an attempt that queues */
  m = wait_of(300, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 0, 0);
  (void)dlock__wm_answer(&m, 0, 5000, 0, 5);
  (void)dlock__wm_subscribed(&m, 0, 6);
  a = dlock__wm_wake(&m, 0, 1, 50);
  CHECK_ACT(a, ATTEMPT);
  CHECK_EQ(a.queue, 1);
}

TH_CASE(failure_of_a_queued_wait_cancels_then_reports_it) {
  dlock__wm m = wait_of(-1, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 1, 0);
  dlock__wm_act a = dlock__wm_answer(&m, DLOCK_EREDIS, -1, 0, 5);
  CHECK_ACT(a, CANCEL);
  a = dlock__wm_cancel_answer(&m, DLOCK_ECONN); /* the cancel failed too */
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_EREDIS);
  CHECK_EQ(a.why, DLOCK__WMW_FAILED);
  /* the subscription's failure, queued */
  m = wait_of(-1, 0, 0, 1, 0);
  (void)dlock__wm_start(&m, 0, 0);
  (void)dlock__wm_answer(&m, 0, 50, 0, 5);
  a = dlock__wm_subscribed(&m, DLOCK_EAUTH, 6);
  CHECK_ACT(a, CANCEL);
  a = dlock__wm_cancel_answer(&m, 0);
  CHECK_EQ(a.rc, DLOCK_EAUTH);
  CHECK_EQ(a.why, DLOCK__WMW_SUB_FAILED);
}

/* A timed first hold rides out a passing failure (the server away): it
 * subscribes, sleeps ride_ms, attempts again; at the deadline it reports
 * that failure. Not a wait for ever, not a re-entry, not a failure that
 * will not pass. */
TH_CASE(timed_wait_rides_out_a_passing_failure) {
  dlock__wm m = wait_of(1000, 0, 5000, 0, 100);
  (void)dlock__wm_start(&m, 0, 0);
  dlock__wm_act a = dlock__wm_answer(&m, DLOCK_ECONN, -1, 1, 10);
  CHECK_ACT(a, SUBSCRIBE);
  CHECK(m.away);
  a = dlock__wm_subscribed(&m, 1, 11);
  CHECK_ACT(a, SLEEP); /* away: the pause first, even if active */
  CHECK_EQ(a.until, 110);
  a = dlock__wm_wake(&m, 0, 1, 110);
  CHECK_ACT(a, ATTEMPT);
  CHECK_EQ(a.queue, 1);
  a = dlock__wm_answer(&m, DLOCK_ECONN, -1, 1, 950);
  CHECK_ACT(a, SLEEP);
  CHECK_EQ(a.until, 1000);
  a = dlock__wm_wake(&m, 0, 1, 1000);
  CHECK_ACT(a, CANCEL); /* queued by the attempt at 110 */
  a = dlock__wm_cancel_answer(&m, DLOCK_ECONN);
  CHECK_EQ(a.rc, DLOCK_ECONN);
  CHECK_EQ(a.why, DLOCK__WMW_AWAY);
  /* the server answered meanwhile: away no more, a plain timeout */
  m = wait_of(1000, 0, 5000, 0, 100);
  (void)dlock__wm_start(&m, 0, 0);
  (void)dlock__wm_answer(&m, DLOCK_ECONN, -1, 1, 10);
  (void)dlock__wm_subscribed(&m, 0, 11);
  (void)dlock__wm_wake(&m, 0, 1, 110);
  a = dlock__wm_answer(&m, 0, 5000, 0, 120);
  CHECK_ACT(a, SLEEP);
  CHECK(!m.away);
  a = dlock__wm_wake(&m, 0, 1, 1000);
  a = dlock__wm_cancel_answer(&m, 0);
  CHECK_EQ(a.rc, DLOCK_ETIMEDOUT);
  /* not ridden: no deadline, a re-entry, a failure that does not pass */
  long long waits[3] = {-1, 1000, 1000};
  int priors[3] = {0, 1, 0}, passing[3] = {1, 1, 0};
  for (int i = 0; i < 3; i++) {
    m = wait_of(waits[i], priors[i], 0, 0, 100);
    (void)dlock__wm_start(&m, 0, 0);
    a = dlock__wm_answer(&m, DLOCK_ECONN, -1, passing[i], 10);
    CHECK_ACT(a, END);
    CHECK_EQ(a.rc, DLOCK_ECONN);
  }
}

TH_CASE(reentry_that_finds_the_hold_gone_ends_gone) {
  dlock__wm m = wait_of(1000, 2, 0, 0, 100);
  dlock__wm_act a = dlock__wm_start(&m, 1, 0);
  CHECK_EQ(a.target, 3);
  a = dlock__wm_answer(&m, DLOCK_ELOST, -1, 1, 5);
  CHECK_ACT(a, END); /* never a cancel, never ridden */
  CHECK_EQ(a.rc, DLOCK_ELOST);
  CHECK_EQ(a.why, DLOCK__WMW_GONE);
}

TH_CASE(stop_ends_at_the_next_step) {
  dlock__wm m = wait_of(-1, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 1, 0);
  (void)dlock__wm_answer(&m, 0, 100, 0, 5);
  dlock__wm_act a = dlock__wm_stop(&m, DLOCK_ECANCELED, 50);
  CHECK_ACT(a, CANCEL); /* sleeping and queued */
  a = dlock__wm_cancel_answer(&m, 0);
  CHECK_EQ(a.rc, DLOCK_ECANCELED);
  CHECK_EQ(a.why, DLOCK__WMW_STOPPED);
  /* during an attempt: after its answer -- unless it took the lock */
  m = wait_of(-1, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 0, 0);
  CHECK_ACT(dlock__wm_stop(&m, DLOCK_ECLOSED, 1), NONE);
  a = dlock__wm_answer(&m, 0, 100, 0, 5);
  CHECK_ACT(a, END);
  CHECK_EQ(a.rc, DLOCK_ECLOSED);
  m = wait_of(-1, 0, 0, 0, 0);
  (void)dlock__wm_start(&m, 0, 0);
  (void)dlock__wm_stop(&m, DLOCK_ECLOSED, 1);
  CHECK_ACT(dlock__wm_answer(&m, 1, -1, 0, 5), HELD);
  /* after the end: nothing */
  CHECK_ACT(dlock__wm_stop(&m, DLOCK_ECLOSED, 6), NONE);
  CHECK_ACT(dlock__wm_wake(&m, 1, 1, 7), NONE);
}

/* Sleep bounds: the holder's TTL (at least 1 ms), the kind's longest
 * sleep, the deadline; a key without TTL with no bound: a wake-up only. */
TH_CASE(sleep_bounds) {
  struct {
    int64_t ttl, max_sleep;
    long long wait_ms;
    int64_t until;
  } t[] = {
      {300, 0, -1, 310},    {0, 0, -1, 11},         {-1, 0, -1, -1},
      {-1, 1000, -1, 1010}, {5000, 1000, -1, 1010}, {5000, 1000, 500, 500},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    dlock__wm m = wait_of(t[i].wait_ms, 0, t[i].max_sleep, 0, 0);
    (void)dlock__wm_start(&m, 1, 0);
    dlock__wm_act a = dlock__wm_answer(&m, 0, t[i].ttl, 0, 10);
    CHECK_ACT(a, SLEEP);
    CHECK_MSG(a.until == t[i].until, "row %zu: until %lld, want %lld", i,
              (long long)a.until, (long long)t[i].until);
  }
}

/* Every phase x every event: which events are taken where (a stray one
 * is NONE, never a second attempt in flight). */
TH_CASE(no_event_puts_two_attempts_in_flight) {
  for (int seed = 1; seed <= 2000; seed++) {
    unsigned x = (unsigned)seed * 2654435761u;
    dlock__wm m = wait_of(seed % 3 ? 2000 : -1, 0, 500, seed % 5 == 0, 50);
    dlock__wm_act a = dlock__wm_start(&m, seed % 2, 0);
    int in_flight = 1; /* attempts or cancels under way */
    int64_t now = 0;
    for (int step = 0; step < 60 && m.phase != DLOCK__WM_DONE; step++) {
      x = x * 1103515245u + 12345u;
      now += (x >> 8) % 200;
      int ev = (int)((x >> 16) % 4);
      if (m.phase == DLOCK__WM_ATTEMPTING || m.phase == DLOCK__WM_CONFIRMING) {
        if (ev == 0) {
          int rcs[4] = {0, 1, DLOCK_ECONN, 0};
          a = dlock__wm_answer(&m, rcs[(x >> 20) % 4], 100, (x >> 22) & 1, now);
          in_flight = 0;
        } else if (ev == 1) {
          a = dlock__wm_stop(&m, DLOCK_ECANCELED, now);
        } else {
          a = dlock__wm_wake(&m, ev == 2, 1, now);
        }
        if (in_flight)
          CHECK_ACT(a, NONE);
      } else if (m.phase == DLOCK__WM_SUBSCRIBING) {
        a = dlock__wm_subscribed(&m, ev == 3 ? DLOCK_EAUTH : ev % 2, now);
      } else if (m.phase == DLOCK__WM_SLEEPING) {
        a = ev == 1 ? dlock__wm_stop(&m, DLOCK_ECANCELED, now)
                    : dlock__wm_wake(&m, ev == 2, 1, now);
      } else if (m.phase == DLOCK__WM_CANCELLING) {
        if (ev == 0) {
          a = dlock__wm_cancel_answer(&m, (int)((x >> 20) % 2));
          in_flight = 0;
        } else {
          a = dlock__wm_wake(&m, 1, 1, now);
          CHECK_ACT(a, NONE);
        }
      }
      if (a.kind == DLOCK__WMA_ATTEMPT || a.kind == DLOCK__WMA_CANCEL)
        in_flight = 1;
      /* HELD and END say the wait is over, and nothing else does */
      CHECK((a.kind == DLOCK__WMA_HELD || a.kind == DLOCK__WMA_END) ==
            (m.phase == DLOCK__WM_DONE));
    }
  }
}

TH_MAIN()
