/*
 * sim_actor.c -- one simulated thread of a simulated client: what the
 * blocking client's driver does around the engine, RE-STATED here (not run:
 * the drivers' own sequencing is threads and sockets; issue 40 would make
 * it sans-I/O so that the real one could be driven). It follows:
 *   src/kinds/mutex.c:
 *                 acq_begin (dlock__eng_reenter, settle first), attempt
 *                 (a request id per attempt, its send time), attempt_commit
 *                 / commit_attempt (an attempt answered after more than one
 *                 send is committed; an unknown one is owed), acquire_once
 *                 (late_answer: a first hold answered past its local
 *                 deadline is given back, dlock__eng_in_time), acquire (a
 *                 late answer tries again within the budget), record_hold
 *                 (dlock__hold_note), dlock__mutex_release (rel_begin /
 *                 rel_end, dlock__eng_commit_due and rel_commit), settle,
 *                 undo_acquisition;
 *   src/net/conn.c:
 *                 the router: a call is up to retry_attempts + 1 tries, each
 *                 a copy sent on the thread's connection and waited for
 *                 command_timeout_ms; a timeout closes the connection (its
 *                 copy may still arrive and run) and the next try waits
 *                 retry_interval_ms; no answer after the last: DLOCK_ECONN.
 * The fair lock's threads (sim_client.factors) run the same sequencing on
 * the fair scripts (sim_calls_fair.c) with its queue: attempt's queue_flag
 * (joined from the second attempt of a wait on), acquire_once's
 * leave_queue (fair_cancel when the wait ends queued, and the attempt that
 * confirms a lock found ours), FAIR_REFRESH_MS as the longest sleep.
 * Every decision about a hold is the REAL engine's (src/engine/engine.c,
 * linked): dlock__eng_wait_queue, _wait_end, _cancel_answer, _confirm_answer
 * too. What is not modelled: pub/sub wake-ups and grants (every wait sleeps
 * until the holder's TTL or the kind's longest sleep and attempts again;
 * the plain mutex's waits never queue), sync_replicas, the event-loop
 * client, watchdog leases on the fair lock.
 */
#include <string.h>

#include "sim.h"

static void op_start(sim_world *w, sim_actor *a);
static void acquire_begin(sim_world *w, sim_actor *a, int fresh);
static void unlock_begin(sim_world *w, sim_actor *a, int retry);
static void attempt(sim_world *w, sim_actor *a);

static void rid_from(sim_rng *g, char out[33]) {
  static const char hx[] = "0123456789abcdef";
  uint64_t x = sim_rand(g), y = sim_rand(g);
  for (int i = 0; i < 16; i++) {
    out[i] = hx[(x >> (4 * i)) & 15];
    out[16 + i] = hx[(y >> (4 * i)) & 15];
  }
  out[32] = '\0';
}

void sim_rid(sim_world *w, char out[33]) { rid_from(&w->rng, out); }

/* The actor's own stream (the fair lock threads': sim_world.frng). */
#define R(w, a) sim_rng_of((w), (a)->idx)

static void rid(sim_world *w, const sim_actor *a, char out[33]) {
  rid_from(R(w, a), out);
}

static void at_timer(sim_world *w, sim_actor *a, int64_t at, sim_step fn) {
  a->timer_tag = ++w->next_tag;
  a->on_timer = fn;
  sim_timer(w, a->client, a->idx, EV_TIMER, at, a->timer_tag);
}

void sim_at_timer(sim_world *w, sim_actor *a, int64_t at, sim_step fn) {
  at_timer(w, a, at, fn);
}

static void tr(sim_world *w, const sim_actor *a, const char *what, int rc) {
  char wb[12];
  sim_trace(w, "c%d.%s %s %s rc=%d (count %d, deadline %+lldms)", a->client,
            sim_who(wb, a->idx), sim_kind_name[a->kind], what, rc,
            a->rec[a->kind].count,
            (long long)(a->rec[a->kind].valid_until - w->now));
}

/* ---- the router -----------------------------------------------------------
 */

static void route_try(sim_world *w, sim_actor *a) {
  a->tag = ++w->next_tag;
  a->try_no++;
  a->sends++;
  sim_send(w, a->client, a->idx, &a->call, a->tag);
  int64_t to = w->now + w->cfg.cto;
  if (a->route_until > 0 && a->route_until < to)
    to = a->route_until > w->now ? a->route_until : w->now; /* the budget */
  sim_timer(w, a->client, a->idx, EV_TIMEOUT, to, a->tag);
}

void sim_route(sim_world *w, sim_actor *a, const sim_call *c, sim_done done) {
  a->call = *c;
  a->done = done;
  a->try_no = 0;
  a->sends = 0;
  route_try(w, a);
}

static void route_retry(sim_world *w, sim_actor *a) {
  if (a->route_until > 0 && w->now >= a->route_until) {
    a->done(w, a, DLOCK_ECONN, NULL, a->sends); /* the budget is spent */
    return;
  }
  route_try(w, a);
}

void sim_actor_event(sim_world *w, sim_actor *a, const sim_ev *e) {
  if (e->kind == EV_REPLY && e->tag == a->tag && a->tag) {
    a->tag = 0;
    a->done(w, a, 0, &e->rep, a->sends);
  } else if (e->kind == EV_TIMEOUT && e->tag == a->tag && a->tag) {
    a->tag = 0;
    a->conn++; /* the reply timeout closes the connection */
    a->conn_last_deliver = a->conn_last_reply = 0;
    int64_t next = w->now + w->cfg.retry_pause;
    if (a->try_no < w->cfg.tries &&
        (a->route_until <= 0 || next < a->route_until))
      at_timer(w, a, next, route_retry);
    else
      a->done(w, a, DLOCK_ECONN, NULL, a->sends);
  } else if (e->kind == EV_TIMER && e->tag == a->timer_tag) {
    a->timer_tag = 0;
    a->on_timer(w, a);
  }
}

/* ---- commits: tombstones written after the answer (best effort) --------- */

static void commit_next(sim_world *w, sim_actor *a);

static void commit_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                        int sends) {
  (void)sends;
  if (rc == 0 && r->type == RM_REPLY_ERROR)
    rc = DLOCK_EREDIS;
  a->commit_rc = a->commit_rc ? a->commit_rc : rc;
  commit_next(w, a);
}

static void commit_next(sim_world *w, sim_actor *a) {
  if (a->ncommit == 0) {
    a->after_commit(w, a);
    return;
  }
  a->ncommit--;
  sim_call c;
  sim_call_tomb(w, a->kind, a->commit_rid[a->ncommit],
                a->commit_rel[a->ncommit], &c);
  sim_route(w, a, &c, commit_done);
}

static void commit_add(sim_actor *a, const char *rid, int release) {
  memcpy(a->commit_rid[a->ncommit], rid, 33);
  a->commit_rel[a->ncommit++] = release;
}

/* ---- the record's lists -----------------------------------------------------
 */

static void forget(sim_world *w, sim_actor *a, int kind) {
  dlock__eng_forget(&a->rec[kind]);
  a->rec[kind].in_wd = 0; /* dlock__wd_remove */
  a->held[kind] = 0;
  (void)w;
}

/* rel_end: the release's answer applied to the record. */
static int rel_end(sim_world *w, sim_actor *a, int rc, int sends) {
  dlock__hold *h = &a->rec[a->kind];
  dlock__eng_rel_out o = dlock__eng_unlock_end(h, &a->u, rc, sends > 1, w->now);
  a->rel_forgot = o.action == DLOCK__ENG_REL_FORGET;
  if (o.action == DLOCK__ENG_REL_FORGET) {
    forget(w, a, a->kind);
    if (o.rc == 0 && !a->u.undo && a->kind == K_FAIR)
      w->n_fair_released++;
    else if (o.rc == 0 && !a->u.undo)
      w->n_released++;
  } else if (o.action == DLOCK__ENG_REL_ONE && dlock__hold_drop_one(h)) {
    h->in_wd = 0;
  }
  return o.rc;
}

/* ---- settle: a pending release's committing copy first ------------------ */

static void settle_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                        int sends) {
  (void)sends;
  int v = rc ? rc : sim_rel_answer(r);
  (void)rel_end(w, a, v, 2);
  a->settle_rc = dlock__eng_settle_end(&a->rec[a->kind], v);
  tr(w, a, "settled", a->settle_rc);
  a->after_settle(w, a);
}

static void settle(sim_world *w, sim_actor *a, sim_step then) {
  dlock__eng_settle_begin(&a->rec[a->kind], &a->u);
  a->after_settle = then;
  sim_call c;
  sim_call_release(w, a, a->kind, &a->u, &c);
  sim_route(w, a, &c, settle_done);
}

/* ---- the program: an operation is `want` holds, a stay, their unlocks --- */

static void op_end(sim_world *w, sim_actor *a) {
  a->want = 0;
  int64_t idle = sim_chance(R(w, a), 100) ? sim_between(R(w, a), 500, 5000)
                                          : sim_between(R(w, a), 0, 300);
  at_timer(w, a, w->now + idle, op_start);
}

void sim_op_end(sim_world *w, sim_actor *a) { op_end(w, a); }

static void unlock_all(sim_world *w, sim_actor *a) {
  if (a->held[a->kind] > 0)
    unlock_begin(w, a, 0);
  else
    op_end(w, a);
}

static void acquired_next(sim_world *w, sim_actor *a) {
  if (a->rec[a->kind].count < a->want)
    acquire_begin(w, a, 1);
  else
    unlock_all(w, a);
}

static void acq_fail_now(sim_world *w, sim_actor *a, int rc) {
  tr(w, a, "acquire failed", rc);
  a->acquiring = 0;
  a->leaving = 0;
  unlock_all(w, a);
}

static void recorded(sim_world *w, sim_actor *a);
static void undo(sim_world *w, sim_actor *a);

/* leave_queue's confirming attempt answered: held (the lock was handed
 * over after all) or the call's own error. */
static void confirmed(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                      int sends) {
  (void)sends;
  int64_t ttl = -1;
  int v = rc ? rc : sim_acq_answer(K_FAIR, r, &ttl);
  tr(w, a, "leave_queue: the confirming attempt", v);
  a->leaving = 0;
  if (dlock__eng_confirm_answer(v) != DLOCK__WAIT_HELD) {
    acq_fail_now(w, a, a->fail_rc);
  } else if (!dlock__eng_in_time(a->sent, a->lease, w->now)) {
    undo(w, a);
  } else {
    recorded(w, a);
  }
}

static void cancelled(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                      int sends) {
  (void)sends;
  int cr = rc ? rc : (r->type == RM_REPLY_INTEGER ? (int)r->integer : 0);
  a->wt.queued = 0;
  tr(w, a, "leave_queue: cancel", cr);
  if (dlock__eng_cancel_answer(cr) != DLOCK__WAIT_CONFIRM) {
    acq_fail_now(w, a, a->fail_rc);
    return;
  }
  rid(w, a, a->wt.rid); /* attempt(a, 1, 0): its own request id */
  a->sent = w->now;
  a->fair_queue = 0;
  sim_call c;
  sim_call_acquire(w, a, K_FAIR, 1, &c);
  sim_route(w, a, &c, confirmed);
}

/* acquire_once's end: a fair wait that may be queued leaves the queue
 * first (leave_queue: fair_cancel, and if the lock turns out to be ours,
 * one attempt that confirms it), on every end but a lost hold. */
static void acq_fail(sim_world *w, sim_actor *a, int rc) {
  if (a->kind != K_FAIR || a->prior > 0 || a->leaving ||
      dlock__eng_wait_end(rc, &a->wt) != DLOCK__WAIT_CANCEL) {
    acq_fail_now(w, a, rc);
    return;
  }
  a->leaving = 1;
  a->fail_rc = rc;
  w->n_fair_cancels++;
  sim_call c;
  sim_fair_cancel_call(a->field, w->now, &c);
  sim_route(w, a, &c, cancelled);
}

static void op_start(sim_world *w, sim_actor *a) {
  int r = (int)sim_between(R(w, a), 0, 99);
  a->kind = r < 45 ? K_MUTEX : (r < 70 ? K_READ : (r < 85 ? K_WRITE : K_SEM));
  if (a->idx >= SIM_FACTOR)
    a->kind = K_FAIR; /* a fair lock thread: the fair lock only */
  r = (int)sim_between(R(w, a), 0, 99);
  a->want = r < 70 ? 1 : (r < 95 ? 2 : 3);
  a->hold_ms = sim_chance(R(w, a), 150) ? sim_between(R(w, a), 1000, 9000)
                                        : sim_between(R(w, a), 0, 600);
  if (a->kind == K_SEM)
    sim_sem_start(w, a);
  else
    acquire_begin(w, a, 1);
}

void sim_actor_start(sim_world *w, sim_actor *a) {
  at_timer(w, a, w->now + sim_between(R(w, a), 0, 50), op_start);
}

/* ---- acquire ------------------------------------------------------------ */

static void recorded(sim_world *w, sim_actor *a) {
  a->leaving = 0;
  a->wt.queued = 0;
  dlock__hold *h = &a->rec[a->kind];
  dlock__hold_note(h, a->prior + 1, a->wd, a->lease, a->sent, 0);
  if (a->wd && !h->in_wd) {
    h->in_wd = 1; /* dlock__wd_add */
    h->retry_at = 0;
  }
  a->held[a->kind]++;
  a->acquiring = 0;
  if (a->kind == K_FAIR)
    w->n_fair_acquired++;
  else
    w->n_acquired++;
  tr(w, a, a->wd ? "acquired (watchdog)" : "acquired (fixed)", 0);
  if (a->idx < SIM_FACTOR) /* the fair threads' holds are never renewed */
    sim_wd_arm(w, a->client);
  if (h->count < a->want)
    at_timer(w, a, w->now + sim_between(R(w, a), 0, 200), acquired_next);
  else
    at_timer(w, a, w->now + a->hold_ms, unlock_all);
}

static void undo_end(sim_world *w, sim_actor *a) {
  int rc = a->commit_rc ? DLOCK_ECONN : a->undo_rc;
  (void)rel_end(w, a, rc, a->undo_sends);
  tr(w, a, "undone (late answer)", rc);
  w->n_lost_late++;
  int64_t left = a->wt.deadline - w->now;
  if (a->wait_ms == 0 || left <= 0)
    acq_fail(w, a, DLOCK_ELOST);
  else
    acquire_begin(w, a, 0); /* the wait goes on within its budget */
}

static void undo_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                      int sends) {
  a->undo_rc = rc ? rc : sim_rel_answer(r);
  a->undo_sends = sends;
  a->commit_rc = 0;
  a->ncommit = 0;
  if (dlock__eng_commit_due(&a->u, a->undo_rc, sends))
    commit_add(a, a->u.rid, 1);
  a->after_commit = undo_end;
  commit_next(w, a);
}

/* late_answer / undo_acquisition: the acquisition is given back. */
static void undo(sim_world *w, sim_actor *a) {
  dlock__eng_undo_begin(&a->rec[a->kind], a->prior,
                        a->prior > 0 ? -a->lease : a->lease, w->now, &a->u);
  rid(w, a, a->u.rid);
  sim_call c;
  sim_call_release(w, a, a->kind, &a->u, &c);
  sim_route(w, a, &c, undo_done);
}

/* The kind's longest sleep between attempts, its ops' max_sleep_ms: the
 * plain mutex's DLOCK__ENG_QUEUED_RECHECK_MS (mutex.c), the fair lock's
 * FAIR_REFRESH_MS (fair.c), none for the read-write sides (rwlock.c) --
 * the fair lock's was missing (0) until a 30-minute run found a fair
 * waiter sleeping 2.5 s past a free lock it headed (seed 1796681236093). */
static int64_t max_sleep(int kind) {
  return kind == K_MUTEX  ? DLOCK__ENG_QUEUED_RECHECK_MS
         : kind == K_FAIR ? SIM_FAIR_REFRESH_MS
                          : 0;
}

static void answered(sim_world *w, sim_actor *a) {
  int rc = a->acq_rc;
  if (rc == 1) {
    if (a->prior == 0 && !dlock__eng_in_time(a->sent, a->lease, w->now))
      undo(w, a);
    else
      recorded(w, a);
    return;
  }
  if (rc == DLOCK_ECONN && a->wait_ms > 0 && a->prior == 0) {
    a->ttl = w->cfg.retry_pause; /* rides_out: the wait goes on */
    rc = 0;
  }
  if (rc == DLOCK_ELOST)
    forget(w, a, a->kind);
  if (rc < 0) {
    acq_fail(w, a, rc);
    return;
  }
  if (a->wait_ms == 0) {
    acq_fail(w, a, DLOCK_EBUSY);
    return;
  }
  int64_t until = -1;
  int v = dlock__eng_wait_answer(0, a->ttl, a->wait_ms, &a->wt, w->now,
                                 max_sleep(a->kind), &until);
  if (v != DLOCK__WAIT_SLEEP) {
    acq_fail(w, a, DLOCK_ETIMEDOUT);
    return;
  }
  if (until < 0 || until > a->wt.deadline)
    until = a->wt.deadline;
  at_timer(w, a, until, attempt);
}

static void attempt_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                         int sends) {
  a->ttl = -1;
  a->acq_rc = rc ? rc : sim_acq_answer(a->kind, r, &a->ttl);
  if (a->acq_rc == DLOCK_EPROTO)
    sim_trace(w, "  ! an attempt found its own tombstone");
  /* attempt_commit */
  a->commit_rc = 0;
  a->ncommit = 0;
  if (!dlock__eng_answered(a->acq_rc)) {
    if (sends > 0)
      memcpy(a->owed, a->wt.rid, 33);
  } else {
    if (sends > 1)
      commit_add(a, a->wt.rid, 0);
    if (a->owed[0]) {
      commit_add(a, a->owed, 0);
      a->owed[0] = '\0';
    }
  }
  a->after_commit = answered;
  commit_next(w, a);
}

static void attempt(sim_world *w, sim_actor *a) {
  if (a->wait_ms > 0 && w->now >= a->wt.deadline && a->try_round > 0) {
    acq_fail(w, a, DLOCK_ETIMEDOUT);
    return;
  }
  a->try_round++;
  rid(w, a, a->wt.rid);
  a->sent = w->now;
  /* queue_flag: a fair wait joins the queue from its second attempt on
   * (first_attempt joins with the first only when the client is already
   * subscribed -- not modelled: its waits sleep, they are not woken) */
  a->fair_queue = a->kind == K_FAIR && a->prior == 0 &&
                  dlock__eng_wait_queue(a->wait_ms, a->try_round > 1, 0);
  a->wt.queued |= a->fair_queue;
  sim_call c;
  sim_call_acquire(w, a, a->kind, a->prior + 1, &c);
  sim_route(w, a, &c, attempt_done);
}

static void reentered(sim_world *w, sim_actor *a) {
  dlock__hold *h = &a->rec[a->kind];
  int gone = dlock__eng_reenter(h, a->started, &a->prior);
  if (gone == DLOCK__ENG_SETTLE) {
    sim_trace(w, "  ! a settled release is pending again");
    w->violation = 1;
    return;
  }
  if (gone) {
    forget(w, a, a->kind);
    acq_fail(w, a, DLOCK_ELOST);
    return;
  }
  a->try_round = 0;
  attempt(w, a);
}

static void settled_then_reenter(sim_world *w, sim_actor *a) {
  if (a->settle_rc)
    acq_fail(w, a, a->settle_rc);
  else
    reentered(w, a);
}

/* acq_begin: fresh = a new call (its budget starts), else the same call
 * again after a late answer (the budget carries on). */
static void acquire_begin(sim_world *w, sim_actor *a, int fresh) {
  if (fresh) {
    int r = (int)sim_between(R(w, a), 0, 99);
    a->wait_ms = r < 30 ? 0 : sim_between(R(w, a), 50, 4000);
    /* the fair lock's holds are fixed here: the client's watchdog renews
     * its lock threads' holds only (sim_wd.c) */
    a->wd = a->kind == K_FAIR ? 0 : sim_chance(R(w, a), 500);
    a->lease = a->wd ? w->cfg.wd_lease : sim_between(R(w, a), 150, 6000);
    a->started = w->now;
    a->wt.id = a->wait_ms != 0 ? (sim_rand(R(w, a)) | 1) : 0;
    a->wt.queued = 0;
    a->wt.deadline = w->now + a->wait_ms;
    a->owed[0] = '\0';
  }
  a->acquiring = 1;
  a->rel_ok[a->kind] = 0;
  int prior = 0;
  if (dlock__eng_reenter(&a->rec[a->kind], a->started, &prior) ==
      DLOCK__ENG_SETTLE)
    settle(w, a, settled_then_reenter);
  else
    reentered(w, a);
}

/* ---- unlock ---------------------------------------------------------------
 */

static void unlock_end(sim_world *w, sim_actor *a) {
  int rc = a->rel_rc;
  if (a->commit_rc)
    rc = DLOCK_ECONN; /* committed? unknown: the release stays pending */
  rc = rel_end(w, a, rc, a->rel_sends);
  tr(w, a, "unlocked", rc);
  /* the caller's final unlock answered "released" (checked: 4) */
  a->rel_ok[a->kind] = rc == 0 && a->rel_forgot;
  if (!dlock__eng_answered(rc) && !a->rel_retry && sim_chance(R(w, a), 500)) {
    unlock_begin(w, a, 1); /* the caller tries the unlock again */
    return;
  }
  if (rc == DLOCK_ELOST || rc == DLOCK_EPERM)
    a->held[a->kind] = 0;
  at_timer(w, a, w->now + sim_between(R(w, a), 0, 100), unlock_all);
}

static void unlock_done(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                        int sends) {
  a->rel_rc = rc ? rc : sim_rel_answer(r);
  a->rel_sends = sends;
  a->commit_rc = 0;
  a->ncommit = 0;
  if (dlock__eng_commit_due(&a->u, a->rel_rc, sends))
    commit_add(a, a->u.rid, 1);
  a->after_commit = unlock_end;
  commit_next(w, a);
}

static void unlock_send(sim_world *w, sim_actor *a) {
  if (a->settle_rc) { /* the pending release could not be settled */
    a->held[a->kind] = 0;
    at_timer(w, a, w->now + 1, unlock_all);
    return;
  }
  int rc =
      dlock__eng_unlock_begin(&a->rec[a->kind], w->now, w->cfg.wd_lease, &a->u);
  if (rc == DLOCK__ENG_SETTLE && !a->settled) {
    a->settled = 1; /* another release of the hold first */
    settle(w, a, unlock_send);
    return;
  }
  if (rc == DLOCK__ENG_SETTLE) {
    sim_trace(w, "  ! a settled release is pending again (unlock)");
    w->violation = 1;
    return;
  }
  if (rc == DLOCK_ELOST)
    forget(w, a, a->kind);
  if (rc) {
    tr(w, a, "unlock refused locally", rc);
    a->held[a->kind] = 0;
    at_timer(w, a, w->now + 1, unlock_all);
    return;
  }
  if (!a->u.resent)
    rid(w, a, a->u.rid); /* the engine drew one from its own PRNG */
  if (a->u.expected == 1)
    a->acq_ran[a->kind] = 0; /* acquire copies that run from now on */
  sim_call c;
  sim_call_release(w, a, a->kind, &a->u, &c);
  sim_route(w, a, &c, unlock_done);
}

static void unlock_begin(sim_world *w, sim_actor *a, int retry) {
  a->rel_retry = retry;
  a->rel_ok[a->kind] = 0;
  if (!retry && a->held[a->kind] > 0)
    a->held[a->kind]--; /* the program leaves this hold's critical section */
  a->settle_rc = 0;
  a->settled = 0;
  unlock_send(w, a);
}
