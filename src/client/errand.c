/*
 * errand.c -- the errand thread: the background work of a client that is
 * neither a renewal nor a loss report, kept off the renewal path (issue
 * 38.6: "the renewal path does renewals and loss reports only").
 *
 * WHAT IT DOES, in this order of priority, one at a time:
 *   - DECLINES. A grant that reached no wait of this client (pubsub.c
 *     on_grant: the unlock handed the lock to a queue entry of a wait that
 *     had ended) is given back with the decline script, so the lock goes to
 *     the next live waiter. Sent without WAIT (a decline confirms nothing a
 *     replica must keep: if it is lost in a failover, the lock ends with the
 *     dead wait's lease, as when it is never sent), on this thread's own
 *     connection, at most DECLINE_TRIES times, a renewal retry interval
 *     apart; each try waits at most the connection's bounds.
 *   - CLUSTER MAP REFRESHES the renewal thread asks for (it never refreshes
 *     the map itself: a refresh may connect to an unreachable node).
 *   - THE CLIENT'S INFO KEY (clientinfo.c): written once the client asks
 *     for a lock, refreshed a renewal period after each write ends (one
 *     retry interval after a failure), brought forward when a hold lasted
 *     DLOCK__SINCE_AFTER_MS with its start unpublished or a published hold
 *     ended (at most one write per DLOCK__INFO_GAP_MS).
 *
 * ITS CONNECTIONS are its own (bglink.c), one per node, replies awaited at
 * most min(command_timeout_ms, watchdog_timeout_ms / 2); connects take the
 * client's connect_timeout_ms. So a master that swallows everything holds
 * this thread -- and the info key and declines behind it -- for that long,
 * never a renewal. Every wait of the thread also ends when the client is
 * freed (the I/O guard, link.c): dlock_client_free does not wait for it.
 *
 * Its state lives in c->er, guarded by the registry's mutex (reg.mu); it
 * sleeps on its own condition variable, which dlock__info_want / _soon /
 * _since_later, the decline poke and dlock__errand_refresh signal.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/client.h"

/* Tries of one decline (each: one send on the errand's connection). */
#define DECLINE_TRIES 3

/* A decline waiting for its next try. */
typedef struct er_decline {
  struct er_decline *next;
  dlock__decline *d;
  int tries;  /* sent so far */
  int64_t at; /* monotonic ms of its next try */
} er_decline;

typedef struct er_state {
  dlock__bglinks links;
  er_decline *pending;
  int64_t period, retry; /* the renewal period and retry interval */
} er_state;

/* ---- declines ------------------------------------------------------------ */

void dlock__errand_decline_poke(dlock_client *c) {
  dlock__mu_lock(&c->reg.mu);
  c->er.declines = 1;
  dlock__errand_wake(c);
  dlock__mu_unlock(&c->reg.mu);
}

/* Moves the declines the pub/sub thread queued to st->pending, due now
 * (reg.mu held, released meanwhile). */
static void take_declines(dlock_client *c, er_state *st) {
  c->er.declines = 0;
  dlock__mu_unlock(&c->reg.mu);
  dlock__mu_lock(&c->ps.mu);
  dlock__decline *d = c->ps.declines;
  c->ps.declines = NULL;
  dlock__mu_unlock(&c->ps.mu);
  int64_t now = dlock__now_ms();
  while (d) {
    dlock__decline *nx = d->next;
    er_decline *e = dlock__calloc(1, sizeof *e);
    if (!e) {
      free(d); /* out of memory: the lock ends with the wait's lease */
    } else {
      e->d = d;
      e->at = now;
      e->next = st->pending;
      st->pending = e;
    }
    d = nx;
  }
  dlock__mu_lock(&c->reg.mu);
}

/* One try of a decline on the errand's connection: 1 given back, 0
 * nothing to give back, or a negative code. */
static int decline_try(dlock_client *c, er_state *st, const dlock__decline *d) {
  char field[DLOCK__FIELD_MAX], nk[24];
  size_t fl = dlock__field(c, d->tid, field);
  dlock__rel_call k;
  int rc = dlock__decline_call_init(&k, d->name, strlen(d->name), field, fl,
                                    d->wid, dlock__publish_cmd(c));
  const dlock__script *s = dlock__core_script(DLOCK__S_DECLINE);
  const char *argv[3 + 7 + 4];
  size_t lens[3 + 7 + 4];
  int argc = 0;
  argv[argc] = "EVAL"; /* rare: no script cache to miss */
  lens[argc++] = 4;
  argv[argc] = s->body;
  lens[argc++] = strlen(s->body);
  argv[argc] = nk;
  lens[argc++] = dlock__fmt_i64(nk, k.nkeys);
  for (int i = 0; i < k.nkeys; i++, argc++) {
    argv[argc] = k.keys[i];
    lens[argc] = k.klens[i];
  }
  for (int i = 0; i < 4; i++, argc++) {
    argv[argc] = k.args[i];
    lens[argc] = k.alens[i];
  }
  redisReply *r = NULL;
  if (rc == 0)
    rc = dlock__bg_call(c, &st->links, d->name, argc, argv, lens, &r);
  dlock__rel_call_free(&k);
  if (rc == 0 && r->type == REDIS_REPLY_ERROR)
    rc = dlock__fail(DLOCK_EREDIS, "%s", r->str);
  long long v = 0;
  if (rc == 0)
    rc = dlock__reply_int(r, &v);
  if (r)
    freeReplyObject(r);
  return rc ? rc : v == 1;
}

/* Sends the declines that are due (reg.mu held, released meanwhile). 1 if
 * any was. A decline that failed is tried again st->retry later, up to
 * DECLINE_TRIES in all; then the lock it would have given back ends with
 * the lease of the wait it was handed to. */
static int send_declines(dlock_client *c, er_state *st) {
  int64_t now = dlock__now_ms();
  er_decline *due = NULL;
  for (er_decline **pp = &st->pending; *pp;) {
    er_decline *e = *pp;
    if (e->at <= now) {
      *pp = e->next;
      e->next = due;
      due = e;
    } else {
      pp = &e->next;
    }
  }
  if (!due)
    return 0;
  dlock__mu_unlock(&c->reg.mu);
  while (due) {
    er_decline *e = due;
    due = e->next;
    int rc = decline_try(c, st, e->d);
    e->tries++;
    int again = rc < 0 && rc != DLOCK_ECLOSED && e->tries < DECLINE_TRIES;
    if (rc >= 0)
      atomic_fetch_add(&c->er.declined, 1);
    if (!again && !atomic_load(&c->closing))
      dlock__log(&c->cfg, rc < 0 ? DLOCK_LOG_WARN : DLOCK_LOG_DEBUG, e->d->name,
                 "decline",
                 "declined a hand-over grant that reached no wait (it had "
                 "ended): %s",
                 rc == 1   ? "the lock was given back"
                 : rc == 0 ? "nothing to give back"
                           : dlock_last_error());
    if (again) {
      e->at = dlock__now_ms() + st->retry;
      e->next = st->pending;
      st->pending = e;
    } else {
      free(e->d);
      free(e);
    }
  }
  dlock__mu_lock(&c->reg.mu);
  return 1;
}

/* ---- the info key -------------------------------------------------------- */

/* dlock__info_write_via's sender: the errand's own link to the key's node,
 * without WAIT. */
static int info_send(dlock_client *c, void *arg, const char *key, int argc,
                     const char **argv, const size_t *lens) {
  er_state *st = arg;
  redisReply *r = NULL;
  int rc = dlock__bg_call(c, &st->links, key, argc, argv, lens, &r);
  if (rc == 0 && r->type == REDIS_REPLY_ERROR)
    rc = DLOCK_EREDIS; /* MOVED, CLUSTERDOWN, ...: bg_call marked the map */
  if (r)
    freeReplyObject(r);
  return rc;
}

/* Writes the client's info key when due (reg.mu held, released meanwhile).
 * 1 if it was due. The next write is due one period (after a failure: one
 * retry interval) after this one ENDS (issue 25.7). */
static int info_tick(dlock_client *c, er_state *st) {
  int64_t now = dlock__now_ms();
  if (c->er.info_at == 0 || now < c->er.info_at)
    return 0;
  /* Far ahead while it runs: not due again, and dlock__info_want (which
   * only starts a schedule that is not running) leaves it alone. */
  int64_t running = now + st->period + INT32_MAX;
  c->er.info_at = running;
  c->er.info_running = 1;
  c->er.info_dirty = 0; /* the write lists the holds of now */
  dlock__mu_unlock(&c->reg.mu);
  int rc = dlock__info_write_via(c, info_send, st);
  dlock__mu_lock(&c->reg.mu);
  c->er.info_running = 0;
  c->er.info_end = dlock__now_ms();
  if (c->er.info_at == running)
    c->er.info_at = c->er.info_end + (rc                 ? st->retry
                                      : c->er.info_dirty ? DLOCK__INFO_GAP_MS
                                                         : st->period);
  return 1;
}

/* The look at the holds' ages (dlock__info_since_later): a hold that has
 * lasted DLOCK__SINCE_AFTER_MS with its start unpublished makes the info
 * key due now; the next look is when the next such hold gets that old.
 * reg.mu held. */
static void since_tick(dlock_client *c) {
  int64_t now = dlock__now_ms();
  if (c->er.since_check == 0 || now < c->er.since_check)
    return;
  int64_t next = 0, later = 0; /* holds, and waits and permits */
  int due = dlock__holds_since_due(c, now, &next);
  if (dlock__notes_due(c, now, &later) | due)
    dlock__info_soon(c);
  c->er.since_check = !next || (later && later < next) ? later : next;
}

/* ---- the thread ---------------------------------------------------------- */

void dlock__errand_wake(dlock_client *c) {
  if (c->er.started) /* its condition variable goes with the thread */
    pthread_cond_signal(&c->er.cv);
}

void dlock__errand_refresh(dlock_client *c) {
  dlock__mu_lock(&c->reg.mu);
  if (!c->er.refresh) {
    c->er.refresh = 1;
    dlock__errand_wake(c);
  }
  dlock__mu_unlock(&c->reg.mu);
}

/* Sleeps until the next errand is due (reg.mu held). */
static void wait_next(dlock_client *c, const er_state *st) {
  int64_t now = dlock__now_ms(), due = c->er.info_at ? c->er.info_at : -1;
  if (c->er.since_check && (due < 0 || c->er.since_check < due))
    due = c->er.since_check;
  for (const er_decline *e = st->pending; e; e = e->next)
    if (due < 0 || e->at < due)
      due = e->at;
  if (due >= 0 && due <= now)
    return;
  if (due < 0 || due - now > st->period)
    due = now + st->period;
  struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, due - now);
  pthread_cond_timedwait(&c->er.cv, &c->reg.mu, &ts);
}

static void *er_main(void *arg) {
  dlock_client *c = arg;
  er_state st = {{0}, NULL, 0, 0};
  st.period =
      c->cfg.watchdog_timeout_ms / 3 > 0 ? c->cfg.watchdog_timeout_ms / 3 : 1;
  st.retry =
      st.period / 4 < 1000 ? (st.period / 4 > 0 ? st.period / 4 : 1) : 1000;
  int half = c->cfg.watchdog_timeout_ms / 2;
  st.links.read_ms = half > 0 && half < c->cfg.command_timeout_ms
                         ? half
                         : c->cfg.command_timeout_ms;
  st.links.who = "errand";
  dlock__io_guard(c->abort_pipe[0], 0, 0); /* freed: every wait ends */
  dlock__mu_lock(&c->reg.mu);
  while (!c->er.stop) {
    if (c->er.declines)
      take_declines(c, &st);
    if (send_declines(c, &st))
      continue;
    if (c->er.refresh && c->cl) {
      c->er.refresh = 0;
      dlock__mu_unlock(&c->reg.mu);
      dlock__err_keep_begin();
      (void)dlock__cluster_refresh(c);
      dlock__err_keep_end();
      dlock__mu_lock(&c->reg.mu);
      continue;
    }
    c->er.refresh = 0;
    since_tick(c);
    if (!info_tick(c, &st))
      wait_next(c, &st);
  }
  dlock__mu_unlock(&c->reg.mu);
  while (st.pending) {
    er_decline *nx = st.pending->next;
    free(st.pending->d);
    free(st.pending);
    st.pending = nx;
  }
  dlock__bg_close(&st.links);
  return NULL;
}

int dlock__errand_start(dlock_client *c) {
  if (dlock__cond_init_mono(&c->er.cv) != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot create a condition variable");
  dlock__mu_lock(&c->reg.mu);
  c->er.started = 1;
  dlock__mu_unlock(&c->reg.mu);
  if (dlock__thread_start(&c->er.thread, er_main, c) != 0) {
    dlock__mu_lock(&c->reg.mu);
    c->er.started = 0;
    dlock__mu_unlock(&c->reg.mu);
    pthread_cond_destroy(&c->er.cv);
    return dlock__fail(DLOCK_ENOMEM, "cannot start the errand thread");
  }
  return 0;
}

void dlock__errand_stop(dlock_client *c) {
  if (!c->er.started)
    return;
  dlock__mu_lock(&c->reg.mu);
  c->er.stop = 1;
  pthread_cond_signal(&c->er.cv);
  dlock__mu_unlock(&c->reg.mu);
  pthread_join(c->er.thread, NULL);
  /* A thread that exits holding a hold of this client later (holds.c) may
   * still ask for an info write: it finds the errand gone, not its cv. */
  dlock__mu_lock(&c->reg.mu);
  c->er.started = 0;
  dlock__mu_unlock(&c->reg.mu);
  pthread_cond_destroy(&c->er.cv);
}
