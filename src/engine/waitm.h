/*
 * waitm.h -- the wait machine: the ONE sequence of a waiting acquire call
 * (attempt -> join the subscription -> sleep -> wake -> attempt ... ->
 * cancel -> confirm), which both clients drive (issue 40). engine.h (f)
 * says what one answer means; this machine says what is done next, with
 * the wait's whole state in one record, so no flag of the wait lives in a
 * driver.
 *
 * Sans-I/O: it sends nothing, sleeps nowhere, reads no clock (every event
 * brings `now`, monotonic ms) and takes no lock (its record is the calling
 * thread's, or the loop's). A driver feeds it events and does what the
 * action it returns says:
 *
 *   event                               action(s) it may answer
 *   dlock__wm_start                     ATTEMPT
 *   dlock__wm_answer (attempt answered) HELD, END, ATTEMPT, SUBSCRIBE,
 *                                       SLEEP, CANCEL
 *   dlock__wm_subscribed                ATTEMPT, SLEEP, CANCEL, END
 *   dlock__wm_wake (a message, a grant  ATTEMPT, CANCEL, END, NONE (an
 *     for this wait, a timer)             attempt is in flight: it is
 *                                         attempted again after it)
 *   dlock__wm_stop (cancelled, closing) CANCEL, END, NONE (after the
 *                                         attempt in flight)
 *   dlock__wm_cancel_answer             ATTEMPT (confirming), END
 *
 * The rules it sequences, once for both clients:
 *   - ONE ATTEMPT AT A TIME: a wake-up that comes while an attempt (or the
 *     join) is under way is remembered and answered by one more attempt
 *     after it; a wake-up is consumed by the attempt it causes (issue
 *     38.1: a grant flag that outlived its attempt granted a later sleep);
 *   - a grant never makes a hold by itself: the attempt it causes does;
 *   - the wait's deadline ends it at the first event past it, never by
 *     another attempt; a timed wait rides out a passing failure (the
 *     server away: ride_ms > 0) until then, and then reports that failure;
 *   - every end while an attempt may have queued the wait runs the cancel
 *     script first, and a hand-over the cancel found is confirmed by one
 *     more attempt, not queueing; the wait's own code stays the answer
 *     otherwise (dlock__eng_wait_end, _cancel_answer, _confirm_answer);
 *   - an attempt joins the hand-over queue by dlock__eng_wait_queue.
 * What stays the drivers': how an attempt, a cancel and a subscription are
 * sent, who sleeps and who wakes (a thread on a condition variable, a
 * loop's timer), what a hold is once HELD (mutex.c / async_lock.c: replica
 * sync, the late-answer rule, the record), and the wording of an END.
 *
 * Thread-safety: none; a record is used by one thread at a time.
 */
#ifndef DLOCK_ENGINE_WAITM_H
#define DLOCK_ENGINE_WAITM_H

#include <stdint.h>

#include "engine/engine.h"

/* Where a wait is. */
enum {
  DLOCK__WM_NEW = 0,     /* not started */
  DLOCK__WM_ATTEMPTING,  /* an attempt is in flight */
  DLOCK__WM_SUBSCRIBING, /* the driver is joining the lock's subscription */
  DLOCK__WM_SLEEPING,    /* waiting for a wake-up, or until m->until */
  DLOCK__WM_CANCELLING,  /* the cancel script is in flight */
  DLOCK__WM_CONFIRMING,  /* the attempt that confirms a hand-over the
                            cancel found is in flight */
  DLOCK__WM_DONE         /* HELD or END was said */
};

/* What the driver does next. */
enum {
  DLOCK__WMA_NONE = 0,  /* nothing: an answer is awaited */
  DLOCK__WMA_ATTEMPT,   /* send the acquire script: target, queue; the
                           wait's id, deadline and the attempt's request
                           id (drawn now) are in m->w */
  DLOCK__WMA_SUBSCRIBE, /* join the lock's subscription, then tell
                           dlock__wm_subscribed */
  DLOCK__WMA_SLEEP,     /* sleep until `until` (-1: until a wake-up), or
                           until a wake-up; then dlock__wm_wake */
  DLOCK__WMA_CANCEL,    /* send the cancel script (leave the queue) */
  DLOCK__WMA_HELD,      /* the call holds the lock: the attempt sent last
                           said so (m->handover: it came by a hand-over) */
  DLOCK__WMA_END        /* the wait ends, not held: rc, why */
};

/* Why a wait ended (END), for the driver's words. */
enum {
  DLOCK__WMW_BUSY = 1,   /* a try-lock found the lock taken: DLOCK_EBUSY */
  DLOCK__WMW_TIMED_OUT,  /* its deadline passed: DLOCK_ETIMEDOUT */
  DLOCK__WMW_AWAY,       /* its deadline passed while the server was away:
                            rc is that failure's (m->away_rc) */
  DLOCK__WMW_FAILED,     /* an attempt failed with rc (its message) */
  DLOCK__WMW_GONE,       /* a re-entry found the hold gone: DLOCK_ELOST;
                            the driver forgets the record */
  DLOCK__WMW_SUB_FAILED, /* the subscription failed with rc */
  DLOCK__WMW_STOPPED     /* dlock__wm_stop's rc (cancelled, closing) */
};

typedef struct dlock__wm_act {
  int kind;      /* DLOCK__WMA_* */
  int target;    /* ATTEMPT: the hold count after it */
  int queue;     /* ATTEMPT: join the hand-over queue when taken */
  int64_t until; /* SLEEP: monotonic ms, -1 none */
  int rc;        /* END: the call's code */
  int why;       /* END: DLOCK__WMW_* */
} dlock__wm_act;

/* One waiting acquire call. Fields are read by drivers; only the
 * dlock__wm_* functions write them. */
typedef struct dlock__wm {
  dlock__wait w;       /* id, queued, deadline, the attempt's rid */
  long long wait_ms;   /* 0 try-lock, < 0 no deadline */
  int prior;           /* the owner's hold count before the call */
  int64_t max_sleep;   /* the kind's longest sleep (0 none) */
  int queue_first;     /* the kind queues from the first attempt */
  int64_t ride_ms;     /* > 0: a timed first hold rides out a passing
                          failure, attempting again after this long */
  int phase;           /* DLOCK__WM_* */
  int active;          /* the subscription is confirmed */
  int joined;          /* active before the first attempt */
  int subscribed;      /* SUBSCRIBE was said: the driver holds a join */
  int woken;           /* a wake-up came during the attempt or the join */
  int grant;           /* ... and it was a grant for this wait */
  int att_grant;       /* the attempt in flight answers a grant */
  int stop_rc;         /* a stop that came during an attempt (0 none) */
  int stop_why;        /* ... DLOCK__WMW_STOPPED or _SUB_FAILED */
  int away;            /* the last attempt met a passing failure */
  int away_rc;         /* ... its code */
  int handover;        /* the lock came by a hand-over (counters) */
  int waited;          /* the lock was taken: the call waited (counters) */
  int end_rc, end_why; /* the wait's own end, kept while it cancels */
  int64_t until;       /* the next sleep's end (from the last answer) */
  unsigned attempts;   /* attempts sent */
} dlock__wm;

/* Sets up a wait: wait_ms as the call's, deadline (monotonic ms, -1
 * none), prior, the kind's max_sleep and queue_first, ride_ms (0: no
 * riding out). Draws the wait id for a call that may wait. */
void dlock__wm_init(dlock__wm *m, long long wait_ms, int64_t deadline,
                    int prior, int64_t max_sleep, int queue_first,
                    int64_t ride_ms);
/* The first attempt: `active` = the driver joined an active subscription
 * of the lock first (the attempt queues with it). Returns ATTEMPT. */
dlock__wm_act dlock__wm_start(dlock__wm *m, int active, int64_t now);
/* The attempt in flight answered rc (dlock__acq_reply's: 1 held, 0 taken
 * with ttl, DLOCK_ELOST, another code < 0); passing = rc is a failure the
 * server recovers from (connection refused or timed out, a failover's
 * refusal: dlock__retryable_reply). */
dlock__wm_act dlock__wm_answer(dlock__wm *m, int rc, int64_t ttl, int passing,
                               int64_t now);
/* The join SUBSCRIBE asked for: result 1 active now, 0 confirmation to
 * come (a wake with active = 1 brings it), < 0 failed with that code. */
dlock__wm_act dlock__wm_subscribed(dlock__wm *m, int result, int64_t now);
/* A wake-up: a message on the lock's channel, a grant for this wait
 * (granted), the subscription confirmed or lost, or the sleep's timer.
 * active = the subscription is confirmed now (its next attempt queues). */
dlock__wm_act dlock__wm_wake(dlock__wm *m, int granted, int active,
                             int64_t now);
/* 1 when a wake-up would make an attempt the wait does not have coming
 * already: sleeping, or attempting with no wake-up remembered. A message
 * that wakes N waiters skips the others (pubsub.c kick_n, async_sub.c
 * wake_some). */
int dlock__wm_wants_wake(const dlock__wm *m);
/* The subscription failed after the join (a refusal, rc): ends the wait
 * now while it sleeps (CANCEL when queued, else END SUB_FAILED), after
 * the answer while an attempt is in flight (NONE now). */
dlock__wm_act dlock__wm_sub_lost(dlock__wm *m, int rc, int64_t now);
/* The call ends with rc (DLOCK_ECANCELED, DLOCK_ECLOSED) at the next step:
 * now when nothing is in flight (CANCEL when it may be queued, else END),
 * else after the answer in flight (NONE now). */
dlock__wm_act dlock__wm_stop(dlock__wm *m, int rc, int64_t now);
/* The cancel script answered cr (1 the lock was handed to this wait, 0
 * not, < 0 failed): ATTEMPT (confirming, not queueing) or END with the
 * wait's own code. */
dlock__wm_act dlock__wm_cancel_answer(dlock__wm *m, int cr);

/* The riding-out rule on its own, for a wait without pub/sub (spin.c's
 * rounds, which dlock__wm_answer does not see): rc a try's answer,
 * passing as dlock__wm_answer's. Returns 1 when a failure is ridden out
 * (recorded: m->away, m->away_rc), else 0; an answer (rc >= 0) ends the
 * riding out. */
int dlock__wm_ride(dlock__wm *m, int rc, int passing);
/* 1 when an attempt's failure rc is one the server recovers from -- a
 * connection refused, broken or timed out (DLOCK_ECONN), or a refusal
 * dlock__retryable_reply names (LOADING, READONLY, MASTERDOWN, ...: msg is
 * the call's message) -- which a timed wait rides out (dlock__wm_answer's
 * passing). */
int dlock__wm_passing(int rc, const char *msg);

#endif
