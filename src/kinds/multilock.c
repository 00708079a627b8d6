/*
 * multilock.c -- all of N mutexes, all-or-nothing (Redisson RedissonMultiLock
 * semantics; docs/multilock.md).
 *
 * The members are ordinary dlock_mutex objects (plain, fair or fenced, on
 * any clients/servers); each one keeps its own Redis layout: the RLock hash
 * under exactly its own name. This file only orders the calls:
 *
 *   1. One pass over the members in array order, one attempt each
 *      (dlock__mutex_acquire with wait 0). A member that is already held
 *      from an earlier step of this call is skipped.
 *   2. A busy member ends the pass: every member taken in this call is
 *      released (so no partial hold is ever left while waiting), then the
 *      thread waits for that member alone with its own timed acquire and the
 *      remaining budget. Once it has it, a new pass tries all the others.
 *      The thread never waits while holding another member, so two
 *      multi-locks over the same mutexes in any order cannot deadlock.
 *   3. Any other error, or the budget running out, releases every member
 *      taken in this call before returning.
 *
 * The object's own record (per thread: how many times it holds the
 * multi-lock) decides DLOCK_EPERM on unlock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

struct dlock_multilock {
  size_t n;
  dlock_mutex **locks;
  pthread_mutex_t mu;
  /* Per thread: count, and in marks the members an unlock that could not
   * release every one (e.g. DLOCK_ECONN on one) did release or found lost,
   * so the caller's retry releases only the rest. A record lives while
   * its thread holds the multilock: the unlock of its last hold drops it,
   * so the list is as long as the number of threads holding it now
   * (issue 26). Only the thread itself changes or drops its record. */
  dlock__hold *holds;
};

int dlock_multilock_new(dlock_mutex **locks, size_t n, dlock_multilock **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  if (!locks || n == 0)
    return dlock__fail(DLOCK_EINVAL, "no member locks");
  for (size_t i = 0; i < n; i++) {
    if (!locks[i])
      return dlock__fail(DLOCK_EINVAL, "member %zu is NULL", i);
    for (size_t j = 0; j < i; j++)
      if (locks[j] == locks[i])
        return dlock__fail(DLOCK_EINVAL,
                           "member %zu is the same object as member %zu", i, j);
  }
  dlock_multilock *ml = dlock__calloc(1, sizeof *ml);
  if (!ml)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  ml->locks = dlock__calloc(n, sizeof(dlock_mutex *));
  if (!ml->locks) {
    free(ml);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  memcpy(ml->locks, locks, n * sizeof(dlock_mutex *));
  ml->n = n;
  pthread_mutex_init(&ml->mu, NULL);
  *out = ml;
  return 0;
}

void dlock_multilock_free(dlock_multilock *ml) {
  if (!ml)
    return;
  dlock__holdlist_free(&ml->holds);
  pthread_mutex_destroy(&ml->mu);
  free(ml->locks);
  free(ml);
}

/* The calling thread's record (ml->mu held); created if create. */
static dlock__hold *find_hold(dlock_multilock *ml, uint64_t tid, int create) {
  return dlock__holdlist_find(&ml->holds, tid, create);
}

/* Releases the members marked in taken[], last first; keeps the caller's
 * error message. */
static void release_taken(dlock_multilock *ml, unsigned char *taken) {
  dlock__err_keep_begin();
  for (size_t i = ml->n; i-- > 0;) {
    if (taken[i]) {
      (void)dlock__mutex_release(ml->locks[i]);
      taken[i] = 0;
    }
  }
  dlock__err_keep_end();
}

/* Shorthands: wait for ever, or not at all; the watchdog keeps the lease. */
int dlock_multilock_lock(dlock_multilock *ml) {
  return dlock_multilock_timedlock(ml, -1, -1);
}

/* One attempt on member i. An acquisition the replicas did not confirm
 * (DLOCK_ENOSYNC, undone) is tried again under the retry policy within the
 * multilock's budget b, as a mutex call does (mutex.c): never for a
 * trylock, while the budget outlasts the pause for a timed call. */
static int member_try(dlock_multilock *ml, size_t i, long long wait_ms,
                      long long lease_ms, const dlock__budget *b) {
  dlock_client *c = ml->locks[i]->c;
  int64_t prev = 0;
  for (int k = 0;; k++) {
    int rc = dlock__mutex_acquire(ml->locks[i], 0, lease_ms);
    if (rc != DLOCK_ENOSYNC)
      return rc;
    int64_t pause = dlock__retry_pause(&c->cfg, k, &prev);
    if (!dlock__eng_sync_retry(k, c->cfg.retry_attempts, wait_ms,
                               wait_ms > 0 ? dlock__budget_left(b) : 0,
                               pause) ||
        atomic_load(&c->closing))
      return rc;
    dlock__sleep_ms(pause);
  }
}

int dlock_multilock_trylock(dlock_multilock *ml) {
  return dlock_multilock_timedlock(ml, 0, -1);
}

int dlock_multilock_timedlock(dlock_multilock *ml, long long wait_ms,
                              long long lease_ms) {
  dlock__clear_error();
  if (!ml)
    return dlock__fail(DLOCK_EINVAL, "multilock is NULL");
  if (lease_ms > DLOCK_LEASE_MAX_MS)
    return dlock__check_lease(lease_ms, "multilock",
                              ml->n ? ml->locks[0]->name : "");
  /* Time alone: each member's wait checks its own client's cancels. */
  dlock__budget b;
  dlock__budget_start(&b, NULL, wait_ms);
  unsigned char *taken = dlock__calloc(ml->n, 1);
  if (!taken)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  int rc = 0;
  /* Bounded by the wait budget (or forever for lock()); each iteration
   * either holds all members or waits for one. */
  for (;;) {
    size_t busy = ml->n;
    for (size_t i = 0; i < ml->n; i++) {
      if (taken[i])
        continue;
      rc = member_try(ml, i, wait_ms, lease_ms, &b);
      if (rc == 0) {
        taken[i] = 1;
        continue;
      }
      if (rc == DLOCK_EBUSY)
        busy = i;
      break;
    }
    if (rc == 0)
      break;
    release_taken(ml, taken);
    if (rc != DLOCK_EBUSY)
      break;
    const char *bname = dlock_mutex_name(ml->locks[busy]);
    if (wait_ms == 0) {
      rc = dlock__fail(DLOCK_EBUSY,
                       "multilock member %zu ('%s') is held "
                       "elsewhere",
                       busy, bname);
      break;
    }
    int64_t left = dlock__budget_left(&b);
    if (left == 0) {
      rc = dlock__fail(DLOCK_ETIMEDOUT,
                       "multilock: member %zu ('%s') still held elsewhere "
                       "after %lld ms",
                       busy, bname, wait_ms);
      break;
    }
    /* Wait for the busy member alone (nothing else held), keep it, and try
     * the others again. */
    rc = dlock__mutex_acquire(ml->locks[busy], left, lease_ms);
    if (rc == DLOCK_ETIMEDOUT) {
      rc = dlock__fail(DLOCK_ETIMEDOUT,
                       "multilock: member %zu ('%s') still held elsewhere "
                       "after %lld ms",
                       busy, bname, wait_ms);
      break;
    }
    if (rc != 0)
      break;
    taken[busy] = 1;
  }
  if (rc == 0) {
    dlock__mu_lock(&ml->mu);
    dlock__hold *h = find_hold(ml, dlock__tid(), 1);
    if (h)
      h->count++;
    dlock__mu_unlock(&ml->mu);
    if (!h) {
      release_taken(ml, taken);
      rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
  }
  free(taken);
  return rc;
}

int dlock_multilock_unlock(dlock_multilock *ml) {
  dlock__clear_error();
  if (!ml)
    return dlock__fail(DLOCK_EINVAL, "multilock is NULL");
  dlock__mu_lock(&ml->mu);
  dlock__hold *h = find_hold(ml, dlock__tid(), 0);
  int held = h && h->count > 0;
  if (held && !h->marks)
    h->marks = dlock__calloc(ml->n, 1);
  int oom = held && !h->marks;
  dlock__mu_unlock(&ml->mu);
  if (!held)
    return dlock__fail(DLOCK_EPERM, "multilock is not held by this thread");
  if (oom)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  /* Release every member not released yet, even if one fails; report the
   * worst: a lost member (ELOST) first, else the first other error. A
   * member whose release failed otherwise (its outcome unknown) keeps its
   * hold, and so does the multilock: the caller may call unlock again. */
  int lost = 0, other = 0;
  size_t lost_i = 0, other_i = 0;
  char other_msg[512] = "";
  for (size_t i = ml->n; i-- > 0;) {
    if (h->marks[i])
      continue;
    int rc = dlock__mutex_release(ml->locks[i]);
    if (rc == 0 || rc == DLOCK_ELOST)
      h->marks[i] = 1;
    if (rc == DLOCK_ELOST && !lost) {
      lost = rc;
      lost_i = i;
    } else if (rc != 0 && rc != DLOCK_ELOST && !other) {
      other = rc;
      other_i = i;
      snprintf(other_msg, sizeof other_msg, "%s", dlock_last_error());
    }
  }
  if (!other) {
    dlock__mu_lock(&ml->mu);
    if (--h->count == 0)
      dlock__holdlist_drop(&ml->holds, h);
    else
      memset(h->marks, 0, ml->n);
    dlock__mu_unlock(&ml->mu);
  }
  if (other)
    return dlock__fail(other,
                       "multilock member %zu ('%s'): %s (the multilock is "
                       "still held: call unlock again to release the rest)",
                       other_i, dlock_mutex_name(ml->locks[other_i]),
                       other_msg);
  if (lost)
    return dlock__fail(DLOCK_ELOST,
                       "multilock member %zu ('%s') was lost while held "
                       "(expired, deleted or taken); the others are released",
                       lost_i, dlock_mutex_name(ml->locks[lost_i]));
  return 0;
}
