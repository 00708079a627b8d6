/*
 * sim_permits.c -- expirable permits (Redisson's RPermitExpirableSemaphore
 * layout, docs/permits.md) in the simulator: the scripts are the library's
 * own (permits_acquire, permits_release, permits_update_lease), their KEYS
 * and ARGV built as src/kinds/permits.c builds them, and its driver RE-STATED
 * (not run: it is threads, a condition variable and the router). It
 * MIRRORS src/kinds/permits.c:
 *   dlock_permits_acquire  an id drawn before the first send; try_once
 *                          (send time, expiry = now + lease, the reply:
 *                          'OK' taken, ':<expiry>' or nil not); the wait
 *                          (recheck_in: at most DLOCK__PERMITS_RECHECK_MS,
 *                          or until the earliest lease ends -- the
 *                          channel's messages are not modelled); the rule
 *                          of issue 38 item 5 (an answer at or past
 *                          dlock__eng_deadline(send, lease) is no permit:
 *                          late_answer gives it back, DLOCK_ELOST); wd_add
 *                          (lease_ms <= 0);
 *   dlock_permits_release  release_begin / release_end (the releases with
 *                          an unknown outcome, the renewal list's
 *                          `releasing`), and its verdicts;
 *   dlock_permits_update_lease  under renew_mu; nothing local changes until
 *                          the update is answered;
 *   renewer                every watchdog_timeout_ms / 3 all the object's
 *                          permits in one permits_update_lease, the router's
 *                          tries bounded by the earliest local deadline,
 *                          drop_unrenewed, wd_unlink, a retry after
 *                          min(1 s, period / 4) when unanswered.
 * The decision of item 5 is the engine's dlock__eng_in_time (linked): the
 * comparison permits.c makes with dlock__eng_deadline, written as the
 * mutex's. DLOCK_SIM_PUT_BACK=permit_late_answer takes it out here (the
 * library's put-back cannot be run: permits.c is not linked).
 *
 * Each client has one permits object (sim_client.po) and its renewer
 * (sim_client.pw, a thread with a connection of its own); its permit
 * threads (sim_client.pactors) each take, hold (sometimes updating the
 * lease), and release one permit at a time. Ids are 16 printable bytes,
 * not 16 random ones (sim_call's strings): the scripts treat them as
 * opaque members either way.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SET(dst, ...) snprintf((dst), SIM_STR, __VA_ARGS__)
#define NEVER_S "922337203685477" /* Redisson's nonExpirableTimeout */
#define RECHECK_MS 1000           /* DLOCK__PERMITS_RECHECK_MS */
#define BATCH (SIM_MAXK - 3)      /* ids per renewal here (RENEW_CHUNK) */

static void perm_op(sim_world *w, sim_actor *a);
static void perm_next(sim_world *w, sim_actor *a);
static void attempt(sim_world *w, sim_actor *a);
static void release_send(sim_world *w, sim_actor *a);
static void pw_arm(sim_world *w, sim_client *cl);

static sim_client *client_of(sim_world *w, const sim_actor *a) {
  return &w->clients[a->client];
}

static void trace(sim_world *w, const sim_actor *a, const char *what, int rc) {
  char wb[12];
  sim_trace(w, "c%d.%s permit %.8s %s rc=%d", a->client, sim_who(wb, a->idx),
            a->pm.id, what, rc);
}

/* ---- the calls, as permits.c builds them --------------------------------
 */

/* KEYS [count, set, channel] (eval_how order 0) or [count, channel, set]
 * (order 1: Redisson's release). */
static void keys(sim_call *c, int order) {
  SET(c->k[0], "%s", SIM_PERM_NAME);
  SET(c->k[order ? 2 : 1], "{%s}:timeout", SIM_PERM_NAME);
  SET(c->k[order ? 1 : 2], "redisson_sc:{%s}", SIM_PERM_NAME);
  c->nk = 3;
}

static void acquire_call(const sim_world *w, const sim_actor *a, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "permits_acquire";
  keys(c, 0);
  SET(c->a[0], "%lld", (long long)(w->now + a->pm.lease));
  SET(c->a[1], "%lld", (long long)w->now);
  SET(c->a[2], "%s", NEVER_S);
  SET(c->a[3], "PUBLISH");
  SET(c->a[4], "%s", a->pm.id);
  c->na = 5;
}

static void release_call(const sim_world *w, const sim_actor *a, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "permits_release";
  keys(c, 1);
  SET(c->a[0], "%s", a->pm.id);
  SET(c->a[1], "%lld", (long long)w->now);
  SET(c->a[2], "PUBLISH");
  c->na = 3;
}

/* renew(): ids[0..n) to expire `lease` from now. */
static void update_call(const sim_world *w, char (*ids)[SIM_PERM_ID], int n,
                        int64_t lease, int raise_only, sim_call *c) {
  memset(c, 0, sizeof *c);
  c->script = "permits_update_lease";
  keys(c, 0);
  /* '+': a renewal, which only raises (permits.c renew) */
  SET(c->a[0], "%s%lld", raise_only ? "+" : "", (long long)(w->now + lease));
  SET(c->a[1], "%lld", (long long)w->now);
  SET(c->a[2], "PUBLISH");
  for (int i = 0; i < n; i++)
    SET(c->a[3 + i], "%s", ids[i]);
  c->na = 3 + n;
}

/* ---- the object: its renewal list and releases in doubt ----------------
 */

static int wd_find(const sim_pobj *o, const char *id) {
  for (int i = 0; i < o->nwd; i++)
    if (strcmp(o->wd[i].id, id) == 0)
      return i;
  return -1;
}

/* wd_unlink: 1 when it was there and no release of it may have run. */
static int wd_unlink(sim_pobj *o, const char *id) {
  int i = wd_find(o, id);
  if (i < 0)
    return 0;
  int loss = !o->wd[i].releasing;
  o->wd[i] = o->wd[--o->nwd];
  return loss;
}

static void wd_add(sim_world *w, sim_client *cl, const sim_actor *a,
                   int64_t sent) {
  sim_pobj *o = &cl->po;
  if (o->nwd == SIM_PERM_WD) {
    sim_trace(w, "  ! permits object full: not renewed");
    return;
  }
  int i = o->nwd++;
  memset(&o->wd[i], 0, sizeof o->wd[i]);
  memcpy(o->wd[i].id, a->pm.id, SIM_PERM_ID);
  o->wd[i].actor = a->idx;
  o->wd[i].valid_until = dlock__eng_deadline(sent, w->cfg.wd_lease);
  o->wd[i].cap = -1;
  if (!o->started) { /* the renewer starts with the first such permit */
    o->started = 1;
    o->next = w->now + w->cfg.wd_lease / 3;
  }
  pw_arm(w, cl);
}

static int pend_find(const sim_pobj *o, const char *id) {
  for (int i = 0; i < o->npend; i++)
    if (strcmp(o->pend[i].id, id) == 0)
      return i;
  return -1;
}

static void pend_drop(sim_pobj *o, const char *id) {
  int i = pend_find(o, id);
  if (i < 0)
    return;
  memmove(&o->pend[i], &o->pend[i + 1],
          (size_t)(o->npend - i - 1) * sizeof o->pend[0]);
  o->npend--;
}

static void pend_add(sim_pobj *o, const char *id, int64_t first,
                     int64_t until) {
  if (pend_find(o, id) >= 0)
    return;
  if (o->npend == SIM_PERM_PEND)
    pend_drop(o, o->pend[0].id);
  memcpy(o->pend[o->npend].id, id, SIM_PERM_ID);
  o->pend[o->npend].first_sent = first;
  o->pend[o->npend].valid_until = until;
  o->npend++;
}

/* until, no later than the cap of o->wd[i] (permits.c: capped). */
static int64_t capped(const sim_pobj *o, int i, int64_t until) {
  return o->wd[i].cap >= 0 && o->wd[i].cap < until ? o->wd[i].cap : until;
}

/* The checker's view: is a's permit live by its local deadline? A
 * renewed one by the object's (gone from the list: not held), a fixed one
 * by the caller's (send + lease - margin); either no later than an update
 * to a shorter lease that is in flight or in doubt (the caller asked for
 * it: a careful caller counts from its send, as item 5's rule says). */
int64_t sim_pobj_until(const sim_client *cl, const sim_actor *a) {
  int64_t u = a->pm.until;
  if (a->pm.wd) {
    int i = wd_find(&cl->po, a->pm.id);
    u = i < 0 ? -1 : cl->po.wd[i].valid_until;
  }
  return a->pm.cap >= 0 && a->pm.cap < u ? a->pm.cap : u;
}

int sim_pobj_valid(const sim_client *cl, const sim_actor *a, int64_t now) {
  return a->pm.held && sim_pobj_until(cl, a) > now;
}

/* ---- the renewer (renewer(), drop_unrenewed, report_lost) --------------
 */

static void lost(sim_world *w, sim_client *cl, int actor, const char *why) {
  char wb[12];
  w->n_pm_lost++;
  sim_trace(w, "c%d.%s permit LOST (on_lock_lost): %s", (int)(cl - w->clients),
            sim_who(wb, actor), why);
}

static void drop_unrenewed(sim_world *w, sim_client *cl) {
  sim_pobj *o = &cl->po;
  for (int i = 0; i < o->nwd;) {
    if (o->wd[i].valid_until <= w->now) {
      if (!o->wd[i].releasing)
        lost(w, cl, o->wd[i].actor, "renewals failed until its deadline");
      o->wd[i] = o->wd[--o->nwd];
    } else {
      i++;
    }
  }
}

/* A renewal sent after a stale copy moved the expiry back, answered:
 * the server has its expiry again (the caller's cap is lifted). */
static void lift_cap(sim_world *w, sim_client *cl, int actor, int64_t sent) {
  (void)w;
  if (actor < SIM_PACTOR || actor - SIM_PACTOR >= cl->npactors)
    return;
  sim_actor *a = &cl->pactors[actor - SIM_PACTOR];
  if (a->pm.cap_at >= 0 && sent > a->pm.cap_at) {
    a->pm.cap = -1;
    a->pm.cap_at = -1;
  }
}

static void pw_done(sim_world *w, sim_actor *pw, int rc, const sim_rep *r,
                    int sends) {
  (void)sends;
  sim_client *cl = client_of(w, pw);
  sim_pobj *o = &cl->po;
  pw->route_until = 0;
  o->busy = 0;
  if (rc == 0 &&
      (r->type != RM_REPLY_STRING || (int)strlen(r->str) != o->nbatch))
    rc = DLOCK_EPROTO;
  int64_t period = w->cfg.wd_lease / 3;
  int64_t retry = period / 4 < 1000 ? period / 4 : 1000;
  o->next = rc == 0 ? o->batch_sent + period : w->now + retry;
  sim_trace(w, "c%d.pw permits renewed rc=%d (%d ids)", pw->client, rc,
            o->nbatch);
  for (int j = 0; rc == 0 && j < o->nbatch; j++) {
    int i = wd_find(o, o->batch[j]);
    if (r->str[j] == '0') { /* gone: still ours to renew? then lost */
      int actor = i >= 0 ? o->wd[i].actor : 0;
      if (wd_unlink(o, o->batch[j]))
        lost(w, cl, actor, "a renewal found it gone");
    } else if (i >= 0) {
      o->wd[i].valid_until =
          capped(o, i, dlock__eng_deadline(o->batch_sent, w->cfg.wd_lease));
      lift_cap(w, cl, o->wd[i].actor, o->batch_sent);
    }
  }
  pw_arm(w, cl);
}

static void pw_wake(sim_world *w, sim_actor *pw) {
  sim_client *cl = client_of(w, pw);
  sim_pobj *o = &cl->po;
  drop_unrenewed(w, cl);
  if (w->now < o->next || o->busy) { /* not due, or renew_mu taken */
    pw_arm(w, cl);
    return;
  }
  o->nbatch = 0;
  int64_t earliest = -1;
  for (int i = 0; i < o->nwd && o->nbatch < BATCH; i++) {
    memcpy(o->batch[o->nbatch++], o->wd[i].id, SIM_PERM_ID);
    if (earliest < 0 || o->wd[i].valid_until < earliest)
      earliest = o->wd[i].valid_until;
  }
  if (o->nbatch == 0) {
    o->next = w->now + w->cfg.wd_lease / 3;
    pw_arm(w, cl);
    return;
  }
  o->busy = 1;
  o->batch_sent = w->now;
  /* the router stops retrying at the earliest local deadline */
  pw->route_until = earliest > w->now ? earliest : w->now + 1;
  sim_call c;
  update_call(w, o->batch, o->nbatch, w->cfg.wd_lease, 1, &c);
  sim_route(w, pw, &c, pw_done);
}

/* The renewer sleeps until its next batch or the earliest local deadline
 * (a busy object: 1 ms, the mutex taken by an update). */
static void pw_arm(sim_world *w, sim_client *cl) {
  sim_pobj *o = &cl->po;
  /* a batch in flight re-arms at its end, an update at its own */
  if (!o->started || cl->pw.route_until || o->busy)
    return;
  int64_t at = o->next;
  for (int i = 0; i < o->nwd; i++)
    if (o->wd[i].valid_until < at)
      at = o->wd[i].valid_until;
  if (at <= w->now)
    at = w->now + 1;
  if (cl->pw.timer_tag && cl->pw.pm.deadline <= at &&
      cl->pw.pm.deadline > w->now)
    return; /* an earlier wake-up is armed */
  cl->pw.pm.deadline = at;
  sim_at_timer(w, &cl->pw, at, pw_wake);
}

/* ---- release (dlock_permits_release) -----------------------------------
 */

static void released(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                     int sends) {
  sim_pobj *o = &client_of(w, a)->po;
  long long v = 0;
  if (rc == 0 && r->type == RM_REPLY_INTEGER)
    v = r->integer;
  else if (rc == 0)
    rc = DLOCK_EREDIS;
  int64_t first = a->pm.rel_first, until = a->pm.rel_until;
  int64_t first_send = first >= 0 ? first : a->sent;
  if (rc == DLOCK_ECONN && sends > 0) { /* release_end */
    pend_add(o, a->pm.id, first_send, until);
  } else {
    pend_drop(o, a->pm.id);
    wd_unlink(o, a->pm.id);
  }
  if (rc == 0 && v != 1)
    rc =
        v == 0 && (sends > 1 || first >= 0) && (until < 0 || first_send < until)
            ? 0
            : DLOCK_ELOST;
  trace(w, a, "released", rc);
  if (rc == 0) { /* answered released: it never comes back (invariant 9) */
    a->pm.gone_ok = 1;
    w->n_pm_released++;
  }
  if (rc == DLOCK_ECONN && ++a->pm.rel_tries < 3 &&
      sim_chance(&w->prng, 700)) { /* the caller tries the release again */
    sim_at_timer(w, a, w->now + sim_between(&w->prng, 0, 500), release_send);
    return;
  }
  perm_next(w, a);
}

static void release_send(sim_world *w, sim_actor *a) {
  sim_pobj *o = &client_of(w, a)->po;
  int i = pend_find(o, a->pm.id), k = wd_find(o, a->pm.id);
  a->pm.rel_first = i >= 0 ? o->pend[i].first_sent : -1; /* release_begin */
  a->pm.rel_until = i >= 0   ? o->pend[i].valid_until
                    : k >= 0 ? o->wd[k].valid_until
                             : -1;
  if (k >= 0)
    o->wd[k].releasing = 1;
  if (strcmp(a->pm.gone, a->pm.id) != 0) { /* invariant 9 from this send */
    memcpy(a->pm.gone, a->pm.id, SIM_PERM_ID);
    a->pm.gone_ok = 0;
    a->pm.gone_ran = 0;
  }
  a->sent = w->now;
  sim_call c;
  release_call(w, a, &c);
  sim_route(w, a, &c, released);
}

static void release(sim_world *w, sim_actor *a) {
  a->pm.held = 0; /* the program leaves its critical section */
  a->pm.rel_tries = 0;
  release_send(w, a);
}

/* ---- update_lease -------------------------------------------------------
 */

static void updated(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                    int sends) {
  (void)sends;
  sim_client *cl = client_of(w, a);
  sim_pobj *o = &cl->po;
  o->busy = 0;
  a->pm.updating = 0;
  if (rc == 0 && (r->type != RM_REPLY_STRING || strlen(r->str) != 1))
    rc = DLOCK_EPROTO;
  int64_t l = a->pm.upd_lease, sent = a->pm.upd_sent;
  int gone = rc == 0 && r->str[0] == '0';
  if (rc == 0 && (a->pm.cap_at < 0 || sent > a->pm.cap_at)) {
    a->pm.cap = -1; /* answered: the new lease stands */
    a->pm.cap_at = -1;
  }
  if (rc == 0) {
    int k = wd_find(o, a->pm.id);
    if (gone || l > 0)
      wd_unlink(o, a->pm.id);
    else if (k >= 0)
      o->wd[k].valid_until =
          capped(o, k, dlock__eng_deadline(sent, w->cfg.wd_lease));
    if (!gone && l <= 0 && k < 0)
      wd_add(w, cl, a, sent);
    if (!gone) { /* the caller's view follows the confirmed lease */
      a->pm.wd = l <= 0;
      a->pm.until = l > 0 ? dlock__eng_deadline(sent, l) : -1;
    }
  } else if (a->pm.wd && l > 0 && wd_find(o, a->pm.id) >= 0) {
    /* permits.c's update_lease in doubt: the fixed lease may be set now or
     * by a late copy after any later renewal; the cap stays */
    int k = wd_find(o, a->pm.id);
    int64_t u = dlock__eng_deadline(sent, l);
    if (o->wd[k].cap < 0 || u < o->wd[k].cap)
      o->wd[k].cap = u;
    if (u < o->wd[k].valid_until)
      o->wd[k].valid_until = u;
  } else if (!a->pm.wd) {
    /* unknown: a careful caller of a fixed permit takes the shorter */
    int64_t u = dlock__eng_deadline(sent, l > 0 ? l : w->cfg.wd_lease);
    if (u < a->pm.until)
      a->pm.until = u;
    a->pm.cap = -1;
  } /* a renewed permit: renewed still, the library says; the careful
       caller keeps its cap (the object's deadline: invariant 7b) */
  trace(w, a, l > 0 ? "lease updated (fixed)" : "lease updated (watchdog)",
        gone ? DLOCK_ELOST : rc);
  pw_arm(w, cl); /* renew_mu is free again */
  if (gone) {    /* ELOST: the caller holds nothing */
    a->pm.held = 0;
    perm_next(w, a);
    return;
  }
  sim_at_timer(w, a, w->now + a->hold_ms / 2, release);
}

static void update(sim_world *w, sim_actor *a) {
  sim_pobj *o = &client_of(w, a)->po;
  if (o->busy) { /* renew_mu: a renewal batch is in flight */
    sim_at_timer(w, a, w->now + 1, update);
    return;
  }
  o->busy = 1;
  a->pm.updating = 1;
  a->pm.upd_lease =
      sim_chance(&w->prng, 500) ? sim_between(&w->prng, 150, 6000) : 0;
  a->pm.upd_sent = w->now;
  int64_t u = dlock__eng_deadline(
      w->now, a->pm.upd_lease > 0 ? a->pm.upd_lease : w->cfg.wd_lease);
  if (u < sim_pobj_until(client_of(w, a), a))
    a->pm.cap = u; /* from the send on, it may expire then */
  char ids[1][SIM_PERM_ID];
  memcpy(ids[0], a->pm.id, SIM_PERM_ID);
  sim_call c;
  update_call(w, ids, 1,
              a->pm.upd_lease > 0 ? a->pm.upd_lease : w->cfg.wd_lease,
              a->pm.upd_lease <= 0, &c);
  sim_route(w, a, &c, updated);
}

/* ---- acquire (dlock_permits_acquire) -----------------------------------
 */

/* late_answer: an answer past the local deadline is no permit -- given
 * back by the release (dlock_permits_release), the call ends ELOST. */
static void late_answer(sim_world *w, sim_actor *a) {
  w->n_pm_late++;
  trace(w, a, "answered past its lease: no permit, given back", DLOCK_ELOST);
  a->pm.rel_tries = 0;
  release_send(w, a);
}

/* The reported issue: an attempt of a wait answered 'OK' because an
 * EARLIER attempt's copy of the same call (same id) ran late and took the
 * permit, with that attempt's expiry; permits.c counts the lease from the
 * later send (try_once's a->sent), past the server's expiry. Seen here
 * through a probe of the server (the library cannot see it). Unless
 * --permit-strict, the send is taken as the earlier one (as a fix would:
 * the script answering the expiry it holds) and the case counted. */
static void earlier_copy(sim_world *w, sim_actor *a) {
  const char *argv[4] = {"ZSCORE", "{" SIM_PERM_NAME "}:timeout", a->pm.id,
                         NULL};
  sim_rep r;
  sim_probe(w, &r, argv);
  /* Gone already: this attempt's own take would still be there (its
   * expiry is its send + lease), so an earlier copy's took it and it has
   * expired and been reclaimed since -- no permit at all. */
  int64_t from = r.type == RM_REPLY_STRING
                     ? (int64_t)strtoll(r.str, NULL, 10) - a->pm.lease
                     : w->now - a->pm.lease;
  if (from >= a->pm.sent)
    return;
  w->n_pm_earlier++;
  trace(w, a,
        w->permit_strict ? "taken by an earlier attempt's late copy"
                         : "taken by an earlier attempt's late copy: "
                           "counted from its send (--permit-strict: not)",
        0);
  if (!w->permit_strict)
    a->pm.sent = from;
}

static void taken(sim_world *w, sim_actor *a) {
  earlier_copy(w, a);
  if (!w->put_back_late_permit &&
      !dlock__eng_in_time(a->pm.sent, a->pm.lease, w->now)) {
    late_answer(w, a);
    return;
  }
  /* invariant 8, checked by sim_check_permits: the report is in time */
  a->pm.late = w->now >= a->pm.sent + a->pm.lease
                   ? w->now - (a->pm.sent + a->pm.lease)
                   : -1;
  sim_client *cl = client_of(w, a);
  if (a->pm.wd)
    wd_add(w, cl, a, a->pm.sent);
  a->pm.until = a->pm.wd ? -1 : dlock__eng_deadline(a->pm.sent, a->pm.lease);
  a->pm.held = 1;
  w->n_pm_acquired++;
  trace(w, a, a->pm.wd ? "acquired (watchdog)" : "acquired (fixed)", 0);
  if (sim_chance(&w->prng, 250))
    sim_at_timer(w, a, w->now + a->hold_ms / 2, update);
  else
    sim_at_timer(w, a, w->now + a->hold_ms, release);
}

static void tried(sim_world *w, sim_actor *a, int rc, const sim_rep *r,
                  int sends) {
  (void)sends;
  a->pm.next_expiry = 0;
  int got = 0;
  if (rc == 0 && r->type == RM_REPLY_STRING && strcmp(r->str, "OK") == 0)
    got = 1;
  else if (rc == 0 && r->type == RM_REPLY_STRING && r->str[0] == ':')
    a->pm.next_expiry = (int64_t)strtod(r->str + 1, NULL);
  else if (rc == 0 && r->type != RM_REPLY_NIL)
    rc = DLOCK_EPROTO;
  if (got) {
    taken(w, a);
    return;
  }
  if (rc == 0 && a->wait_ms != 0 && w->now < a->pm.deadline) {
    int64_t ms = RECHECK_MS; /* recheck_in */
    if (a->pm.next_expiry > 0 && a->pm.next_expiry - w->now + 1 < ms)
      ms = a->pm.next_expiry - w->now + 1 < 1 ? 1
                                              : a->pm.next_expiry - w->now + 1;
    int64_t at = w->now + ms;
    sim_at_timer(w, a, at < a->pm.deadline ? at : a->pm.deadline, attempt);
    return;
  }
  trace(w, a, "acquire failed",
        rc ? rc : (a->wait_ms ? DLOCK_ETIMEDOUT : DLOCK_EBUSY));
  perm_next(w, a);
}

static void attempt(sim_world *w, sim_actor *a) {
  a->pm.sent = w->now; /* try_once: the send time of the last attempt */
  sim_call c;
  acquire_call(w, a, &c);
  sim_route(w, a, &c, tried);
}

static void draw_id(sim_world *w, char id[SIM_PERM_ID]) {
  static const char hx[] = "0123456789abcdef";
  uint64_t x = sim_rand(&w->prng);
  for (int i = 0; i < 16; i++)
    id[i] = hx[(x >> (4 * i)) & 15];
  id[16] = '\0';
}

static void perm_op(sim_world *w, sim_actor *a) {
  a->wait_ms = sim_chance(&w->prng, 300) ? 0 : sim_between(&w->prng, 50, 4000);
  a->pm.wd = sim_chance(&w->prng, 500);
  a->pm.lease = a->pm.wd ? w->cfg.wd_lease : sim_between(&w->prng, 150, 6000);
  a->hold_ms = sim_chance(&w->prng, 150) ? sim_between(&w->prng, 1000, 9000)
                                         : sim_between(&w->prng, 0, 600);
  a->pm.deadline = w->now + a->wait_ms;
  a->pm.late = -1;
  a->pm.cap = -1;
  a->pm.cap_at = -1;
  draw_id(w, a->pm.id);
  attempt(w, a);
}

/* The next operation of a permit thread (sim_op_end for them). */
static void perm_next(sim_world *w, sim_actor *a) {
  int64_t idle = sim_chance(&w->prng, 100) ? sim_between(&w->prng, 500, 5000)
                                           : sim_between(&w->prng, 0, 300);
  sim_at_timer(w, a, w->now + idle, perm_op);
}

void sim_perm_start(sim_world *w, sim_actor *a) {
  sim_at_timer(w, a, w->now + sim_between(&w->prng, 0, 50), perm_op);
}

/* The second reported issue: a late copy of a renewal (or of an update:
 * held on the wire, or slow and overtaken by its retry on a new
 * connection) sets the expiry its send computed, earlier than the one a
 * later renewal set -- permits_update_lease's ZADD never asks whether it
 * lowers -- and a held permit's expiry may end before its local deadline
 * (at once, or once the later renewal's answer arrives). Each such move
 * back is counted; unless --permit-strict, the holder's view is capped at
 * the new expiry until a renewal sent after it is answered (then
 * invariant 7 reports it). */
void sim_perm_before(sim_world *w, const sim_req *q) {
  if (!q->call.script || strcmp(q->call.script, "permits_update_lease") != 0)
    return;
  for (int i = 3; i < q->call.na; i++) {
    const char *argv[4] = {"ZSCORE", "{" SIM_PERM_NAME "}:timeout",
                           q->call.a[i], NULL};
    sim_rep r;
    sim_probe(w, &r, argv);
    w->pm_prev[i] = r.type == RM_REPLY_STRING ? atoll(r.str) : -1;
  }
}

static void late_update(sim_world *w, const sim_req *q, const sim_rep *r) {
  sim_actor *from = sim_actor_at(w, q->client, q->actor);
  long long expiry = atoll(q->call.a[0] + (q->call.a[0][0] == '+'));
  if (r->type != RM_REPLY_STRING || from->tag == q->tag)
    return; /* the sender's current try: what it asked for */
  if (q->call.a[0][0] == '+')
    return; /* a renewal only raises: nothing moved back */
  for (int i = 3; i < q->call.na && r->str[i - 3]; i++)
    for (int c = 0;
         c < w->nclients && r->str[i - 3] == '1' && w->pm_prev[i] > expiry; c++)
      for (int j = 0; j < w->clients[c].npactors; j++) {
        sim_actor *a = &w->clients[c].pactors[j];
        if (!a->pm.held || strcmp(a->pm.id, q->call.a[i]) != 0)
          continue;
        w->n_pm_lowered++;
        trace(w, a, "expiry moved back by a late renewal or update copy", 0);
        if (!w->permit_strict && (a->pm.cap < 0 || expiry < a->pm.cap))
          a->pm.cap = expiry;
        if (!w->permit_strict)
          a->pm.cap_at = w->now;
      }
}

/* A permit thread's copy ran on the server (sim_deliver): an acquire copy
 * of an id whose release was sent lets it back (invariant 9's exception),
 * counted when it took one -- a late copy re-takes a released permit that
 * nobody holds until its lease ends (under capacity, never over). */
void sim_perm_ran(sim_world *w, const sim_req *q, const sim_rep *r) {
  sim_actor *a = sim_actor_at(w, q->client, q->actor);
  if (q->call.script && strcmp(q->call.script, "permits_update_lease") == 0) {
    late_update(w, q, r);
    return;
  }
  if (a->idx == SIM_PW || !q->call.script ||
      strcmp(q->call.script, "permits_acquire") != 0 || !a->pm.gone[0] ||
      strcmp(q->call.a[4], a->pm.gone) != 0)
    return;
  a->pm.gone_ran = 1;
  if (r->type == RM_REPLY_STRING && strcmp(r->str, "OK") == 0) {
    w->n_pm_back++;
    sim_trace(w,
              "  ! c%d.p%d's late acquire copy took released permit %.8s "
              "again",
              q->client, q->actor - SIM_PACTOR, a->pm.gone);
  }
}
