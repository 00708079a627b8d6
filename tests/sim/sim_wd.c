/*
 * sim_wd.c -- a simulated client's watchdog and expiry threads, RE-STATED
 * from src/client/watchdog.c (not run):
 *   wait_due  wakes when the oldest watchdog hold is one period old
 *             (period = watchdog_timeout_ms / 3) or due for a retry;
 *   collect   takes every hold at least half a period old (or due for its
 *             retry), with its generation;
 *   renew_due sends what it collected: the standard holds (mutex, write
 *             side) in one `renew`, each read hold's `rw_read_renew`, on the
 *             watchdog's own connection, each answer waited for at most
 *             dlock__wd_wait_bound (half a period, at most
 *             command_timeout_ms); between collect and send the thread may
 *             be descheduled -- THE GAP the simulator stretches: a renewal
 *             collected for a hold can be sent after that hold ended and
 *             the same thread's next hold of the name began;
 *   apply     one send time for the batch; a hold released meanwhile (off
 *             the list, or another generation) is skipped; else the
 *             engine's dlock__eng_renew_answer; RETRY after min(1 s,
 *             period / 4);
 *   exp_main  the expiry thread: dlock__eng_expiry at every deadline.
 */
#include <string.h>

#include "sim.h"

static int64_t period(const sim_world *w) { return w->cfg.wd_lease / 3; }

static int64_t retry_ms(const sim_world *w) {
  return period(w) / 4 < 1000 ? period(w) / 4 : 1000;
}

/* exp_main: holds past their deadline are lost (or end quietly). */
static void expire(sim_world *w, sim_client *cl, int64_t *next) {
  for (int i = 0; i < cl->nactors; i++)
    for (int k = 0; k < K_COUNT; k++) {
      dlock__hold *h = &cl->actors[i].rec[k];
      if (!h->in_wd || h->count == 0)
        continue;
      int v = dlock__eng_expiry(h, w->now, next);
      if (v == DLOCK__ENG_LOST || v == DLOCK__ENG_END_QUIET) {
        h->in_wd = 0;
        sim_trace(w, "c%d.t%d %s watchdog hold %s", (int)(cl - w->clients), i,
                  sim_kind_name[k],
                  v == DLOCK__ENG_LOST ? "LOST (deadline passed)"
                                       : "ends quietly");
      }
    }
}

void sim_wd_arm(sim_world *w, int client) {
  sim_client *cl = &w->clients[client];
  int64_t next = INT64_MAX;
  expire(w, cl, &next);
  for (int i = 0; i < cl->nactors && !cl->wd_busy; i++)
    for (int k = 0; k < K_COUNT; k++) {
      const dlock__hold *h = &cl->actors[i].rec[k];
      if (!h->in_wd || h->count == 0)
        continue;
      int64_t d = h->retry_at ? h->retry_at : h->renewed_at + period(w);
      if (d < next)
        next = d;
    }
  if (next == INT64_MAX)
    return;
  /* A hold back on the list with its deadline passed and its loss noted
   * (a reentrant acquire answered after the hold was reported lost) keeps
   * the expiry thread's next deadline in the past: the library's exp_main
   * then loops without sleeping until a renewal moves it. Here: 1 ms. */
  if (next <= w->now)
    next = w->now + 1;
  if (cl->wd_next >= w->now && cl->wd_next <= next)
    return; /* an earlier wake-up is armed */
  cl->wd_next = next;
  cl->wd_wake_tag = ++w->next_tag;
  sim_timer(w, client, -1, EV_WD, next, cl->wd_wake_tag);
}

static void collect(sim_world *w, sim_client *cl) {
  cl->wd_n = 0;
  for (int i = 0; i < cl->nactors; i++)
    for (int k = 0; k < K_COUNT; k++) {
      dlock__hold *h = &cl->actors[i].rec[k];
      if (!h->in_wd || h->count == 0 || cl->wd_n == 16)
        continue;
      int ready = h->retry_at ? w->now >= h->retry_at
                              : w->now - h->renewed_at >= period(w) / 2;
      if (!ready)
        continue;
      sim_wd_item *it = &cl->wd_items[cl->wd_n++];
      memset(it, 0, sizeof *it);
      it->h = h;
      it->gen = h->gen;
      it->kind = k;
      it->actor = i;
      it->flag = 2;
    }
}

static void wake(sim_world *w, int client) {
  sim_client *cl = &w->clients[client];
  cl->wd_next = -1;
  if (cl->wd_busy) {
    sim_wd_arm(w, client);
    return;
  }
  collect(w, cl);
  if (cl->wd_n == 0) {
    sim_wd_arm(w, client);
    return;
  }
  cl->wd_busy = 1;
  /* the gap between collect and send: mostly none; sometimes the thread
   * is descheduled, or blocked on the connection, for a while */
  int64_t gap = sim_chance(&w->rng, 60) ? sim_between(&w->rng, 50, 4000) : 0;
  sim_trace(w, "c%d.wd collects %d holds%s", client, cl->wd_n,
            gap ? " (and stalls before sending)" : "");
  cl->wd_send_tag = ++w->next_tag;
  sim_timer(w, client, -1, EV_WD_SEND, w->now + gap, cl->wd_send_tag);
  sim_wd_arm(w, client); /* the expiry thread's next deadline */
}

static void send_batch(sim_world *w, int client) {
  sim_client *cl = &w->clients[client];
  cl->wd_sent_at = w->now;
  cl->wd_pending = 0;
  sim_wd_item std[16];
  int nstd = 0;
  uint64_t std_tag = ++w->next_tag;
  for (int i = 0; i < cl->wd_n; i++) {
    sim_wd_item *it = &cl->wd_items[i];
    if (it->kind == K_READ) {
      sim_call c;
      sim_call_read_renew(w, &cl->actors[it->actor], &c);
      it->tag = ++w->next_tag;
      sim_send(w, client, -1, &c, it->tag);
      cl->wd_pending++;
    } else {
      it->tag = std_tag;
      std[nstd++] = *it;
    }
  }
  if (nstd) {
    sim_call c;
    sim_call_renew(w, cl, std, nstd, &c);
    sim_send(w, client, -1, &c, std_tag);
    cl->wd_pending++;
  }
  int64_t bound = period(w) / 2 < w->cfg.cto ? period(w) / 2 : w->cfg.cto;
  cl->wd_timeout_tag = ++w->next_tag;
  sim_timer(w, client, -1, EV_TIMEOUT, w->now + bound, cl->wd_timeout_tag);
}

static void apply(sim_world *w, int client) {
  sim_client *cl = &w->clients[client];
  int64_t next = INT64_MAX;
  expire(w, cl, &next); /* the expiry thread ran at every deadline */
  for (int i = 0; i < cl->wd_n; i++) {
    sim_wd_item *it = &cl->wd_items[i];
    dlock__hold *h = it->h;
    if (!h->in_wd || h->gen != it->gen || h->count == 0)
      continue; /* released meanwhile: the reply says nothing about it */
    int v = dlock__eng_renew_answer(h, it->flag != 2, it->flag == 1,
                                    cl->wd_sent_at, w->cfg.wd_lease, w->now);
    if (v == DLOCK__ENG_END_QUIET || v == DLOCK__ENG_LOST)
      h->in_wd = 0;
    else if (v == DLOCK__ENG_RETRY)
      h->retry_at = w->now + retry_ms(w);
    if (v != DLOCK__ENG_KEEP)
      sim_trace(w, "c%d.t%d %s renewal: %s", client, it->actor,
                sim_kind_name[it->kind],
                v == DLOCK__ENG_LOST    ? "LOST"
                : v == DLOCK__ENG_RETRY ? "retry"
                                        : "ends quietly");
  }
  cl->wd_busy = 0;
  cl->wd_n = 0;
  cl->wd_timeout_tag = 0;
  sim_wd_arm(w, client);
}

static void reply(sim_world *w, int client, const sim_ev *e) {
  sim_client *cl = &w->clients[client];
  if (!cl->wd_busy || !cl->wd_timeout_tag)
    return;
  int matched = 0;
  for (int i = 0; i < cl->wd_n; i++) {
    sim_wd_item *it = &cl->wd_items[i];
    if (it->tag != e->tag)
      continue;
    matched = 1;
    if (it->kind == K_READ) {
      it->flag = e->rep.type == RM_REPLY_INTEGER && e->rep.integer == 1;
    } else {
      /* the batch's flags, in the order of its standard items */
      int pos = 0;
      for (int j = 0; j < i; j++)
        pos += cl->wd_items[j].tag == e->tag;
      it->flag = e->rep.type == RM_REPLY_STRING &&
                 pos < (int)strlen(e->rep.str) && e->rep.str[pos] == '1';
    }
  }
  if (matched && --cl->wd_pending == 0)
    apply(w, client);
}

void sim_wd_event(sim_world *w, int client, const sim_ev *e) {
  sim_client *cl = &w->clients[client];
  if (e->kind == EV_WD && e->tag == cl->wd_wake_tag)
    wake(w, client);
  else if (e->kind == EV_WD_SEND && e->tag == cl->wd_send_tag)
    send_batch(w, client);
  else if (e->kind == EV_REPLY)
    reply(w, client, e);
  else if (e->kind == EV_TIMEOUT && e->tag == cl->wd_timeout_tag &&
           cl->wd_busy) {
    cl->wd_conn++; /* the link is closed; unanswered items stay 2 */
    cl->wd_last_deliver = cl->wd_last_reply = 0;
    apply(w, client);
  }
}
