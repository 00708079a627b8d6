/*
 * wait.c -- the wait budget: when a waiting call must stop.
 *
 * Every call that may wait (mutex and its variants, rwlock sides,
 * multilock, semaphore, latch, Redlock) starts a dlock__budget when it
 * begins and asks it, after every wake-up and before every attempt,
 * whether to go on. The budget is the one place that decides the three
 * ways a wait ends without the lock: the client is closing
 * (DLOCK_ECLOSED), dlock_client_cancel_waits() was called at any time
 * since the call began (DLOCK_ECANCELED), or the caller's wait budget is
 * spent (DLOCK_ETIMEDOUT) -- and, through dlock__budget_end, the code of a
 * wait that a failure ended after a cancel (DLOCK_ECANCELED, never the
 * failure's: a cancel and an attempt in flight race, the answer does not). It
 * holds no thread and no lock: the event-loop client drives the same budget
 * from timers.
 */
#include <stdint.h>
#include <stdio.h>

#include "client/client.h"

void dlock__budget_start(dlock__budget *b, dlock_client *c, long long wait_ms) {
  b->c = c;
  b->wait_ms = wait_ms;
  b->started = dlock__now_ms();
  /* A budget too large to add to the clock is "forever". */
  b->deadline = wait_ms < 0 || wait_ms > INT64_MAX - b->started
                    ? -1
                    : b->started + wait_ms;
  /* Read before the first attempt: a cancel that comes while it is in
   * flight must end the call too (it kicks no waiter: none is registered
   * yet). */
  b->cancel_gen = c ? atomic_load(&c->cancel_gen) : 0;
  dlock__call_deadline_set(wait_ms > 0 ? b->deadline : -1);
}

int64_t dlock__budget_left(const dlock__budget *b) {
  if (b->deadline < 0)
    return -1;
  int64_t left = b->deadline - dlock__now_ms();
  return left > 0 ? left : 0;
}

int64_t dlock__budget_clamp(const dlock__budget *b, int64_t until) {
  if (b->deadline >= 0 && (until < 0 || until > b->deadline))
    return b->deadline;
  return until;
}

int dlock__budget_canceled(const dlock__budget *b) {
  return b->c && atomic_load(&b->c->cancel_gen) != b->cancel_gen;
}

int dlock__budget_over(const dlock__budget *b, const char *what) {
  if (b->c && atomic_load(&b->c->closing))
    return dlock__fail(DLOCK_ECLOSED, "client is closing");
  if (dlock__budget_canceled(b))
    return dlock__fail(DLOCK_ECANCELED,
                       "wait for %s canceled by dlock_client_cancel_waits()",
                       what);
  if (b->deadline >= 0 && dlock__now_ms() >= b->deadline)
    return DLOCK_ETIMEDOUT;
  return 0;
}

int dlock__budget_end(const dlock__budget *b, int rc, const char *what) {
  if (rc >= 0 || rc == DLOCK_ECANCELED || rc == DLOCK_ECLOSED ||
      rc == DLOCK_ELOST || !dlock__budget_canceled(b))
    return rc;
  char last[400];
  snprintf(last, sizeof last, "%s", dlock_last_error());
  return dlock__fail(DLOCK_ECANCELED,
                     "wait for %s canceled by dlock_client_cancel_waits() "
                     "(it ended %s%s%s)",
                     what, dlock_err_name(rc), last[0] ? ": " : "", last);
}
