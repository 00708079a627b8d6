/*
 * async_wd.c -- the event-loop client's watchdog: a loop timer that renews
 * every watchdog hold every watchdog_timeout_ms / 3, in pipelined batches
 * of the blocking watchdog's renew script (one EVALSHA per chunk of holds,
 * all chunks written at once), and reports lost holds to cfg.on_lock_lost
 * on the loop.
 *
 * A hold is lost when a renewal finds its field gone (deleted, expired,
 * taken), or when its local deadline -- the send time of the last confirmed
 * acquisition or renewal + lease - margin -- passes before a renewal is
 * confirmed (the server cannot be reached). A renewal that finds the key
 * gone during the hold's own final unlock is not a loss. Both rules are the
 * engine's (engine.c: dlock__eng_renew_answer, dlock__eng_expiry), as for
 * the blocking client's watchdog.
 *
 * DEADLINES ON TIME. Besides the renewal tick, a second loop timer
 * (loss_timer) is armed at the engine's next local deadline whenever that
 * comes before the next tick: a hold taken between two ticks whose
 * renewals go unanswered is reported lost AT its deadline -- before the key
 * can expire on the server and another client take it -- not at the tick
 * after it (up to a third of the lease later; issue 26).
 *
 * RETRIES ON TIME. A renewal that got no answer (the engine's RETRY) is
 * tried again min(1 s, period / 4) later by a third timer (wd_retry), as
 * the blocking watchdog does -- not at the next tick, a whole period later
 * (research io-stack D3: 2 tries before a 30 s lease's deadline instead of
 * ~19). Only the holds whose renewal failed are sent again.
 *
 * Replies find their holds again by key and generation: a hold released,
 * or released and taken again, while its renewal was in flight is not
 * touched by that renewal's answer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"

#define WD_CHUNK 128

typedef struct wd_item {
  uint64_t gen;  /* the record's */
  uint32_t hgen; /* the hold's (dlock__hold.gen) */
  size_t key_off, key_len;
} wd_item;

typedef struct wd_batch {
  dlock_async *a;
  int64_t sent;
  size_t n;
  char *keys;
  wd_item items[];
} wd_batch;

static void tick(dlock__atimer *t);

static int64_t period(const dlock_async *a) {
  int64_t p = a->cfg.watchdog_timeout_ms / 3;
  return p > 0 ? p : 1;
}

/* The retry interval of a failed renewal: min(1 s, period / 4), as the
 * blocking watchdog's. */
static int64_t retry_in(const dlock_async *a) {
  int64_t r = period(a) / 4;
  return r < 1 ? 1 : r > 1000 ? 1000 : r;
}

static void retry_fire(dlock__atimer *t);

/* Arms the retry timer for `at` unless it is armed sooner. */
static void arm_retry(dlock_async *a, int64_t at) {
  if (a->wd_retry.slot && a->wd_retry.at <= at)
    return;
  a->wd_retry.fn = retry_fire;
  a->wd_retry.arg = a;
  dlock__async_timer(a, &a->wd_retry, at);
}

static void loss_fire(dlock__atimer *t);

/* Arms the deadline timer for `at` when that comes before the next tick
 * (the tick looks at every deadline itself) and before the timer's time. */
static void arm_loss(dlock_async *a, int64_t at) {
  if (a->wd_timer.slot && at >= a->wd_timer.at)
    return;
  if (a->loss_timer.slot && a->loss_timer.at <= at)
    return;
  a->loss_timer.fn = loss_fire;
  a->loss_timer.arg = a;
  dlock__async_timer(a, &a->loss_timer, at);
}

void dlock__awd_add(dlock_async *a, dlock__ahold *h) {
  if (h->in_wd)
    return;
  h->in_wd = 1;
  h->wd_prev = NULL;
  h->wd_next = a->wd_head;
  if (a->wd_head)
    a->wd_head->wd_prev = h;
  a->wd_head = h;
  if (!a->wd_timer.slot) {
    a->wd_timer.fn = tick;
    a->wd_timer.arg = a;
    dlock__async_timer(a, &a->wd_timer, dlock__async_now() + period(a));
  }
  /* Rare: a deadline before the next tick (an acquisition whose reply took
   * most of the lease). One comparison otherwise. */
  if (h->h.valid_until < a->wd_timer.at)
    arm_loss(a, h->h.valid_until);
}

void dlock__awd_remove(dlock_async *a, dlock__ahold *h) {
  if (!h->in_wd)
    return;
  if (h->wd_prev)
    h->wd_prev->wd_next = h->wd_next;
  else
    a->wd_head = h->wd_next;
  if (h->wd_next)
    h->wd_next->wd_prev = h->wd_prev;
  h->wd_prev = h->wd_next = NULL;
  h->in_wd = 0;
  if (!a->wd_head) {
    dlock__async_untimer(a, &a->wd_timer);
    dlock__async_untimer(a, &a->loss_timer);
    dlock__async_untimer(a, &a->wd_retry);
  }
}

void dlock__awd_close(dlock_async *a) {
  dlock__async_untimer(a, &a->wd_timer);
  dlock__async_untimer(a, &a->loss_timer);
  dlock__async_untimer(a, &a->wd_retry);
  a->wd_head = NULL;
}

/* Marks h lost and appends its name to names (NUL-separated). */
static void lose(dlock_async *a, dlock__ahold *h, dlock__sb *names) {
  dlock__stat_add(&a->stats,
                  dlock__async_now() >= h->h.valid_until
                      ? DLOCK__ST_LOST_UNREACHABLE
                      : DLOCK__ST_LOST_KEY_GONE,
                  1);
  dlock__sb_add(names, h->key, h->name_len + 1);
  dlock__ahold_lost(a, h);
}

/* Calls on_lock_lost for every name (after the records were updated: the
 * callback may unlock, which frees records). */
static void report(dlock_async *a, dlock__sb *names) {
  for (size_t at = 0; at < names->len && !a->closing;) {
    const char *name = names->p + at;
    at += strlen(name) + 1;
    dlock__log(&a->cfg, DLOCK_LOG_ERROR, name, "lost",
               "lost: a renewal found its key gone, or renewals failed until "
               "its lease ran out");
    dlock__callout_lost(&a->cfg, name);
  }
  dlock__sb_free(names);
}

static void batch_done(dlock__areq *r, redisReply *reply, int err,
                       const char *why) {
  (void)why;
  wd_batch *b = r->arg;
  dlock_async *a = b->a;
  dlock__areq_free(r);
  a->wd_batches--;
  dlock__sb names;
  dlock__sb_init(&names);
  int ok =
      !err && reply && reply->type == REDIS_REPLY_STRING && reply->len == b->n;
  dlock__stat_add(&a->stats, DLOCK__ST_RENEWALS_SENT, b->n);
  if (!ok) {
    dlock__stat_add(&a->stats, DLOCK__ST_RENEWALS_FAILED, b->n);
    dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "renew_failed",
               "renewal of %zu holds failed: %s", b->n,
               why && *why ? why : "unexpected reply");
  }
  int64_t now = dlock__async_now();
  for (size_t i = 0; i < b->n; i++) {
    const wd_item *it = &b->items[i];
    dlock__ahold *h =
        dlock__map_get(&a->holds, b->keys + it->key_off, it->key_len);
    if (!h || h->gen != it->gen || h->h.gen != it->hgen || !h->in_wd)
      continue;
    /* No answer: the tick is the retry (RETRY), the deadline timer the
     * loss; the engine decides as for the blocking watchdog. */
    switch (dlock__eng_renew_answer(&h->h, ok, ok && reply->str[i] == '1',
                                    b->sent, a->cfg.watchdog_timeout_ms, now)) {
    case DLOCK__ENG_LOST:
      lose(a, h, &names);
      break;
    case DLOCK__ENG_END_QUIET:
      dlock__awd_remove(a, h);
      break;
    case DLOCK__ENG_RETRY:
      h->h.retry_at = now + retry_in(a);
      arm_retry(a, h->h.retry_at);
      break;
    default:
      break;
    }
  }
  if (reply)
    freeReplyObject(reply);
  free(b->keys);
  free(b);
  report(a, &names);
}

/* A batch whose request was dropped unanswered (the client is freed). */
static void batch_drop(void *arg) {
  wd_batch *b = arg;
  b->a->wd_batches--;
  free(b->keys);
  free(b);
}

/* One EVALSHA of the renew script for holds[0..n). */
static void send_chunk(dlock_async *a, dlock__ahold **holds, size_t n,
                       int64_t now) {
  wd_batch *b = dlock__calloc(1, sizeof *b + n * sizeof b->items[0]);
  size_t klen = 0;
  for (size_t i = 0; i < n; i++)
    klen += holds[i]->key_len + 1;
  char *keys = b ? dlock__malloc(klen) : NULL;
  const char *kv[WD_CHUNK], *av[WD_CHUNK + 1];
  size_t kl[WD_CHUNK], al[WD_CHUNK + 1];
  char lease[24];
  av[0] = lease;
  al[0] = dlock__fmt_i64(lease, a->cfg.watchdog_timeout_ms);
  size_t off = 0;
  for (size_t i = 0; keys && i < n; i++) {
    dlock__ahold *h = holds[i];
    memcpy(keys + off, h->key, h->key_len + 1);
    b->items[i] = (wd_item){h->gen, h->h.gen, off, h->key_len};
    off += h->key_len + 1;
    kv[i] = h->key;
    kl[i] = h->name_len;
    av[i + 1] = h->field;
    al[i + 1] = h->fl;
  }
  dlock__areq *r =
      keys ? dlock__areq_eval(dlock__core_script(DLOCK__S_RENEW), (int)n, kv,
                              kl, (int)n + 1, av, al, batch_done, b)
           : NULL;
  if (!r) { /* out of memory: the next tick tries again */
    free(keys);
    free(b);
    return;
  }
  b->a = a;
  b->sent = now;
  b->n = n;
  b->keys = keys;
  r->no_retry = 1; /* the next tick is the retry */
  r->drop = batch_drop;
  a->wd_batches++;
  dlock__aconn_submit(&a->cmd, r);
}

/* The engine's expiry verdict for every renewed hold at now: lost ones are
 * marked and named in names, ended ones leave the list; the rest are
 * renewed with renew 1, those whose failed renewal is due for its retry
 * with renew 2 (none with 0). Returns the next deadline (or far). */
static int64_t look(dlock_async *a, int64_t now, dlock__sb *names, int renew) {
  int64_t next = INT64_MAX;
  dlock__ahold *chunk[WD_CHUNK];
  size_t n = 0;
  for (dlock__ahold *h = a->wd_head, *nx; h; h = nx) {
    nx = h->wd_next;
    switch (dlock__eng_expiry(&h->h, now, &next)) {
    case DLOCK__ENG_LOST:
      lose(a, h, names);
      continue;
    case DLOCK__ENG_END_QUIET:
      dlock__awd_remove(a, h);
      continue;
    default:
      break;
    }
    if (!renew || (renew == 2 && (!h->h.retry_at || h->h.retry_at > now)))
      continue;
    h->h.retry_at = 0; /* its answer sets the next one */
    chunk[n++] = h;
    /* A cluster's keys are in many slots: one hold per renewal (a batch
     * would be CROSSSLOT). */
    if (n == WD_CHUNK || a->url.cluster) {
      send_chunk(a, chunk, n, now);
      n = 0;
    }
  }
  if (n)
    send_chunk(a, chunk, n, now);
  return next;
}

/* One round of the watchdog's timers at now: every hold looked at with
 * renew (look: 1 the tick, 0 a deadline, 2 the retries), the timers that
 * follow armed, the losses reported. */
static void wd_round(dlock_async *a, int renew) {
  int64_t now = dlock__async_now();
  dlock__sb names;
  dlock__sb_init(&names);
  int64_t next = look(a, now, &names, renew);
  int64_t loss_before = INT64_MAX; /* the tick looks at later deadlines */
  if (renew == 1 && a->wd_head) {
    dlock__async_timer(a, &a->wd_timer, now + period(a));
    loss_before = a->wd_timer.at;
  }
  if (renew == 2) {
    int64_t again = INT64_MAX;
    for (dlock__ahold *h = a->wd_head; h; h = h->wd_next)
      if (h->h.retry_at && h->h.retry_at < again)
        again = h->h.retry_at;
    if (a->wd_head && again < INT64_MAX)
      arm_retry(a, again);
  }
  if (a->wd_head && next < loss_before)
    arm_loss(a, next);
  report(a, &names);
}

static void tick(dlock__atimer *t) { wd_round(t->arg, 1); }

/* A local deadline is due (or a final unlock was settling): the engine's
 * verdict for each hold now; the timer follows the next deadline. */
static void loss_fire(dlock__atimer *t) { wd_round(t->arg, 0); }

/* Failed renewals are due for their retry: those holds are renewed again
 * (the others wait for their tick); the timer follows the next retry. */
static void retry_fire(dlock__atimer *t) { wd_round(t->arg, 2); }
