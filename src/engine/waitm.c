/*
 * waitm.c -- the wait machine (waitm.h): the one sequence of a waiting
 * acquire call, for both clients. It owns the wait's state (phase, the
 * queue flag, the wake-up remembered during an attempt, the riding out of
 * a passing failure, the code kept while the cancel runs) and turns each
 * event into the next action; engine.c's wait verdicts say what each
 * answer means.
 */
#include <string.h>

#include "engine/waitm.h"

static dlock__wm_act act(int kind) {
  dlock__wm_act a;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  a.until = -1;
  return a;
}

void dlock__wm_init(dlock__wm *m, long long wait_ms, int64_t deadline,
                    int prior, int64_t max_sleep, int queue_first,
                    int64_t ride_ms) {
  memset(m, 0, sizeof *m);
  m->wait_ms = wait_ms;
  m->w.id = wait_ms != 0 ? dlock__eng_wait_id() : 0;
  m->w.deadline = deadline;
  m->prior = prior;
  m->max_sleep = max_sleep;
  m->queue_first = queue_first;
  m->ride_ms = ride_ms;
  m->until = -1;
}

static int queue_flag(const dlock__wm *m) {
  return dlock__eng_wait_queue(m->wait_ms, m->active, m->queue_first);
}

/* Sends an attempt: it answers for every wake-up seen so far (a wake-up
 * is consumed by the attempt it causes, issue 38.1), and may queue the
 * wait from its send on (its answer can be lost). */
static dlock__wm_act attempt(dlock__wm *m, int phase, int target, int queue) {
  dlock__wm_act a = act(DLOCK__WMA_ATTEMPT);
  m->phase = phase;
  m->woken = 0;
  m->att_grant = m->grant; /* a grant seen so far is this attempt's */
  m->grant = 0;
  m->w.queued |= queue;
  dlock__request_id(m->w.rid); /* this attempt's: its copies are bound */
  m->attempts++;
  a.target = target;
  a.queue = queue;
  return a;
}

static dlock__wm_act done(dlock__wm *m, int rc, int why) {
  dlock__wm_act a = act(DLOCK__WMA_END);
  m->phase = DLOCK__WM_DONE;
  a.rc = rc;
  a.why = why;
  return a;
}

/* The wait ends with rc: through the cancel while an attempt may have
 * queued it (dlock__eng_wait_end), keeping rc for the cancel's end. */
static dlock__wm_act end_with(dlock__wm *m, int rc, int why) {
  switch (dlock__eng_wait_end(rc, &m->w)) {
  case DLOCK__WAIT_GONE:
    return done(m, DLOCK_ELOST, DLOCK__WMW_GONE);
  case DLOCK__WAIT_CANCEL:
    m->end_rc = rc;
    m->end_why = why;
    m->phase = DLOCK__WM_CANCELLING;
    return act(DLOCK__WMA_CANCEL);
  default:
    return done(m, rc, why);
  }
}

/* The deadline passed: timed out, or the passing failure it rode out. */
static dlock__wm_act timed_out(dlock__wm *m) {
  return m->away ? end_with(m, m->away_rc, DLOCK__WMW_AWAY)
                 : end_with(m, DLOCK_ETIMEDOUT, DLOCK__WMW_TIMED_OUT);
}

static int past_deadline(const dlock__wm *m, int64_t now) {
  return m->w.deadline >= 0 && now >= m->w.deadline;
}

/* SLEEP until m->until (set by the last answer) or a wake-up. */
static dlock__wm_act sleep_until(dlock__wm *m) {
  dlock__wm_act a = act(DLOCK__WMA_SLEEP);
  m->phase = DLOCK__WM_SLEEPING;
  a.until = m->until;
  return a;
}

/* The lock is taken and the wait goes on: join the subscription first,
 * then an attempt for a wake-up that came meanwhile, else sleep. */
static dlock__wm_act wait_on(dlock__wm *m) {
  m->waited = 1; /* contended: past its first attempt (counters) */
  if (!m->subscribed) {
    m->subscribed = 1;
    m->phase = DLOCK__WM_SUBSCRIBING;
    return act(DLOCK__WMA_SUBSCRIBE);
  }
  if (m->woken)
    return attempt(m, DLOCK__WM_ATTEMPTING, 1, queue_flag(m));
  return sleep_until(m);
}

dlock__wm_act dlock__wm_start(dlock__wm *m, int active, int64_t now) {
  (void)now;
  if (m->phase != DLOCK__WM_NEW)
    dlock__never("a wait started twice");
  m->active = m->joined = m->subscribed = m->wait_ms != 0 && active;
  return attempt(m, DLOCK__WM_ATTEMPTING, m->prior + 1,
                 dlock__eng_wait_queue(m->wait_ms, m->joined, m->queue_first));
}

/* A failure a timed first hold outlives (the server away: a failover). */
int dlock__wm_ride(dlock__wm *m, int rc, int passing) {
  if (rc >= 0) {
    m->away = 0; /* the server answered */
    return 0;
  }
  if (!passing || rc == DLOCK_ELOST || m->ride_ms <= 0 || m->wait_ms <= 0 ||
      m->prior != 0)
    return 0;
  m->away = 1;
  m->away_rc = rc;
  return 1;
}

dlock__wm_act dlock__wm_answer(dlock__wm *m, int rc, int64_t ttl, int passing,
                               int64_t now) {
  if (m->phase == DLOCK__WM_CONFIRMING) {
    if (dlock__eng_confirm_answer(rc) != DLOCK__WAIT_HELD)
      return done(m, m->end_rc, m->end_why);
    m->phase = DLOCK__WM_DONE;
    m->handover = 1;
    return act(DLOCK__WMA_HELD);
  }
  if (m->phase != DLOCK__WM_ATTEMPTING)
    dlock__never("an attempt's answer with no attempt in flight");
  if (rc == 1) {
    m->phase = DLOCK__WM_DONE;
    m->handover |= m->att_grant;
    return act(DLOCK__WMA_HELD);
  }
  if (m->stop_rc)
    return end_with(m, m->stop_rc, m->stop_why);
  if (dlock__wm_ride(m, rc, passing)) {
    rc = 0; /* taken, for now: attempt again after ride_ms */
    ttl = m->ride_ms;
  }
  int64_t until = -1;
  switch (dlock__eng_wait_answer(rc, ttl, m->wait_ms, &m->w, now, m->max_sleep,
                                 &until)) {
  case DLOCK__WAIT_BUSY:
    return done(m, DLOCK_EBUSY, DLOCK__WMW_BUSY);
  case DLOCK__WAIT_SLEEP:
    m->until = until;
    return wait_on(m);
  default: /* GONE, TIMED_OUT, FAILED, CANCEL: the wait ends */
    return rc < 0 ? end_with(m, rc, DLOCK__WMW_FAILED) : timed_out(m);
  }
}

dlock__wm_act dlock__wm_subscribed(dlock__wm *m, int result, int64_t now) {
  if (m->phase != DLOCK__WM_SUBSCRIBING)
    dlock__never("a subscription's answer for a wait not joining");
  if (result < 0)
    return end_with(m, result, DLOCK__WMW_SUB_FAILED);
  if (m->stop_rc)
    return end_with(m, m->stop_rc, m->stop_why);
  if (result == 1)
    m->active = 1;
  /* Active now and not queued yet, or woken meanwhile: attempt at once
   * (it joins the queue); else sleep -- the confirmation wakes it. */
  if (m->woken || (m->active && !m->joined && !m->away))
    return attempt(m, DLOCK__WM_ATTEMPTING, 1, queue_flag(m));
  if (past_deadline(m, now))
    return timed_out(m);
  return sleep_until(m);
}

dlock__wm_act dlock__wm_wake(dlock__wm *m, int granted, int active,
                             int64_t now) {
  m->active = active != 0;
  switch (m->phase) {
  case DLOCK__WM_ATTEMPTING:
  case DLOCK__WM_SUBSCRIBING:
    m->woken = 1; /* one more attempt after the one under way */
    m->grant |= granted;
    return act(DLOCK__WMA_NONE);
  case DLOCK__WM_SLEEPING:
    if (past_deadline(m, now))
      return timed_out(m); /* a wake-up at or past the deadline ends it */
    m->grant |= granted;
    return attempt(m, DLOCK__WM_ATTEMPTING, 1, queue_flag(m));
  default: /* not started, cancelling (the cancel finds a hand-over), or
              over: nothing */
    return act(DLOCK__WMA_NONE);
  }
}

int dlock__wm_wants_wake(const dlock__wm *m) {
  return m->phase == DLOCK__WM_SLEEPING ||
         ((m->phase == DLOCK__WM_ATTEMPTING ||
           m->phase == DLOCK__WM_SUBSCRIBING) &&
          !m->woken);
}

/* The call ends with rc (why: STOPPED or SUB_FAILED) at its next step. */
static dlock__wm_act stop(dlock__wm *m, int rc, int why) {
  switch (m->phase) {
  case DLOCK__WM_ATTEMPTING:
  case DLOCK__WM_SUBSCRIBING:
    if (!m->stop_rc) {
      m->stop_rc = rc;
      m->stop_why = why;
    }
    return act(DLOCK__WMA_NONE);
  case DLOCK__WM_SLEEPING:
    return end_with(m, rc, why);
  default: /* cancelling or confirming: the wait's own end comes */
    return act(DLOCK__WMA_NONE);
  }
}

dlock__wm_act dlock__wm_stop(dlock__wm *m, int rc, int64_t now) {
  (void)now;
  return stop(m, rc, DLOCK__WMW_STOPPED);
}

dlock__wm_act dlock__wm_sub_lost(dlock__wm *m, int rc, int64_t now) {
  (void)now;
  return stop(m, rc, DLOCK__WMW_SUB_FAILED);
}

int dlock__wm_passing(int rc, const char *msg) {
  return rc == DLOCK_ECONN ||
         (rc == DLOCK_EREDIS && msg && dlock__retryable_reply(msg));
}

dlock__wm_act dlock__wm_cancel_answer(dlock__wm *m, int cr) {
  if (m->phase != DLOCK__WM_CANCELLING)
    dlock__never("a cancel's answer for a wait not cancelling");
  m->w.queued = 0;
  if (dlock__eng_cancel_answer(cr) == DLOCK__WAIT_CONFIRM)
    return attempt(m, DLOCK__WM_CONFIRMING, 1, 0);
  return done(m, m->end_rc, m->end_why);
}
