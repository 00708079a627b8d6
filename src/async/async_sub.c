/*
 * async_sub.c -- the event-loop client's subscriber: one connection
 * (async_conn.c) and one entry per lock name with waiting calls, each
 * subscribed to the lock's two channels, as the blocking client's pubsub.c
 * does for its threads:
 *   redisson_lock__channel:{name}          "0" = free (Redisson's unlock)
 *   dlock_grant__channel:{name}:<client id> "<owner>|<wait id>" = the
 *                                          unlock handed the lock to that
 *                                          wait (scripts.c)
 * A message on the lock channel wakes waiting calls as the blocking
 * client's does (ioverdict.c dlock__sub_wakes): "0", Redisson's unlock,
 * ONE call (the oldest without a wake-up pending), "1" all (they attempt
 * again; the script's queue keeps the hand-over order); a grant or
 * a retry wakes the call it names (wait id and owner), and one that names
 * no waiting call is declined: the engine's rule (engine.h (e)), the
 * blocking client's too. An entry's subscription is
 * confirmed before its calls join the server's hand-over queue: the unlock
 * skips a queued waiter whose grant reaches no subscriber. An entry whose
 * last call left stays subscribed cfg.subscription_linger_ms (a call that
 * comes meanwhile joins the queue with its first attempt), then
 * UNSUBSCRIBE.
 *
 * WHAT IF the connection fails? Every entry goes back to unsubscribed and
 * its calls attempt again at once (a grant or a "0" sent meanwhile was
 * lost); the connection is reopened after the subscriber's back-off (50
 * ms, doubling up to retry_interval_ms: ioverdict.c dlock__sub_backoff)
 * for as long as calls wait, and each confirmed re-subscription wakes its
 * calls again -- the blocking subscriber's rules (pubsub.c). Until
 * io-stack D10 this client reopened after a fixed retry_interval_ms, woke
 * nobody until then, had no linger and woke every call on "0".
 */
#include <stdlib.h>
#include <string.h>

#include "async/async.h"

enum { SUB_IDLE, SUB_SUBSCRIBING, SUB_ACTIVE, SUB_UNSUBSCRIBING };

struct dlock__asub {
  dlock__asub *next, *prev; /* a->sub_list */
  dlock__aconn *k;          /* its connection (a->sub; a cluster node's) */
  int state;
  int confirms;       /* (un)subscribe confirmations still expected */
  int64_t idle_since; /* its last waiter left (the linger counts from it) */
  dlock__aop *w_head, *w_tail;
  dlock__sb ch, grant;
  size_t name_len;
  char name[];
};

static void entry_free(dlock_async *a, dlock__asub *s) {
  if (s->k)
    dlock__subq_forget(&s->k->subq, s);
  dlock__map_del(&a->subs, s->name, s->name_len);
  dlock__map_del(&a->chans, s->ch.p, s->ch.len);
  dlock__map_del(&a->chans, s->grant.p, s->grant.len);
  if (s->prev)
    s->prev->next = s->next;
  else
    a->sub_list = s->next;
  if (s->next)
    s->next->prev = s->prev;
  dlock__sb_free(&s->ch);
  dlock__sb_free(&s->grant);
  free(s);
}

static void send_cmd(dlock_async *a, dlock__asub *s, const char *verb) {
  /* A sharded cluster: SSUBSCRIBE / SUNSUBSCRIBE on the slot's master. */
  if (dlock__aroute_sharded(a))
    verb = verb[0] == 'S' ? "SSUBSCRIBE" : "SUNSUBSCRIBE";
  const char *av[3] = {verb, s->ch.p, s->grant.p};
  size_t al[3] = {strlen(verb), s->ch.len, s->grant.len};
  dlock__sb b;
  char buf[512];
  dlock__sb_init_buf(&b, buf, sizeof buf);
  dlock__resp_argv(&b, 3, av, al);
  if (!b.oom)
    dlock__aconn_write(s->k, b.p, b.len);
  dlock__sb_free(&b);
  s->confirms = 2;
  (void)dlock__subq_push(&s->k->subq, s); /* OOM: its refusal matches none */
}

/* Subscribes s now, or when the connection is ready. */
static void subscribe(dlock_async *a, dlock__asub *s) {
  dlock__aconn *k = dlock__aroute_subconn(a, s->ch.p, s->ch.len);
  s->state = SUB_IDLE;
  if (!k)
    return; /* the cluster's map is asked for: dlock__asub_kick */
  s->k = k;
  if (k->state != DLOCK__AC_READY) {
    dlock__aconn_start(k);
    return;
  }
  send_cmd(a, s, "SUBSCRIBE");
  s->state = SUB_SUBSCRIBING;
}

static dlock__asub *entry_new(dlock_async *a, const char *name) {
  size_t nl = strlen(name);
  dlock__asub *s = dlock__calloc(1, sizeof *s + nl + 1);
  if (!s)
    return NULL;
  memcpy(s->name, name, nl + 1);
  s->name_len = nl;
  dlock__sb_init(&s->ch);
  dlock__sb_init(&s->grant);
  dlock__prefix_name(&s->ch, "redisson_lock__channel", name);
  dlock__own_name(&s->grant, "dlock_grant__channel", name);
  dlock__sb_add(&s->grant, ":", 1);
  dlock__sb_add(&s->grant, a->id, DLOCK__UUID_LEN);
  s->next = a->sub_list;
  if (a->sub_list)
    a->sub_list->prev = s;
  a->sub_list = s;
  if (s->ch.oom || s->grant.oom ||
      dlock__map_put(&a->subs, s->name, nl, s) != 0 ||
      dlock__map_put(&a->chans, s->ch.p, s->ch.len, s) != 0 ||
      dlock__map_put(&a->chans, s->grant.p, s->grant.len, s) != 0) {
    entry_free(a, s);
    return NULL;
  }
  return s;
}

int dlock__asub_join(dlock_async *a, const char *name, dlock__aop *op,
                     dlock__asub **out) {
  dlock__asub *s = dlock__map_get(&a->subs, name, strlen(name));
  if (!s && !(s = entry_new(a, name)))
    return DLOCK_ENOMEM;
  op->wnext = NULL;
  op->wprev = s->w_tail;
  if (s->w_tail)
    s->w_tail->wnext = op;
  else
    s->w_head = op;
  s->w_tail = op;
  *out = s;
  if (s->state == SUB_ACTIVE)
    return 1;
  if (s->state == SUB_IDLE)
    subscribe(a, s);
  return 0; /* SUBSCRIBING, or UNSUBSCRIBING: subscribed again after it */
}

static void unlink_waiter(dlock__asub *s, dlock__aop *op) {
  if (op->wprev)
    op->wprev->wnext = op->wnext;
  else
    s->w_head = op->wnext;
  if (op->wnext)
    op->wnext->wprev = op->wprev;
  else
    s->w_tail = op->wprev;
  op->wnext = op->wprev = NULL;
}

/* s has no call left and is subscribed: it lingers until
 * subscription_linger_ms after its last call left (the sub_linger timer),
 * or unsubscribes now. */
static void linger(dlock_async *a, dlock__asub *s) {
  int64_t due;
  if (!dlock__sub_linger(s->idle_since, a->cfg.subscription_linger_ms,
                         dlock__async_now(), &due)) {
    send_cmd(a, s, "UNSUBSCRIBE");
    s->state = SUB_UNSUBSCRIBING;
  } else if (!a->sub_linger.slot || a->sub_linger.at > due) {
    dlock__async_timer(a, &a->sub_linger, due);
  }
}

static void linger_fired(dlock__atimer *t) {
  dlock_async *a = t->arg;
  for (dlock__asub *s = a->sub_list; s; s = s->next)
    if (s->state == SUB_ACTIVE && !s->w_head)
      linger(a, s);
}

void dlock__asub_leave(dlock_async *a, dlock__asub *s, dlock__aop *op) {
  unlink_waiter(s, op);
  if (s->w_head)
    return;
  s->idle_since = dlock__async_now();
  if (s->state == SUB_ACTIVE)
    linger(a, s);
  else if (s->state == SUB_IDLE)
    entry_free(a, s);
}

int dlock__asub_join_active(dlock_async *a, const char *name, dlock__aop *op,
                            dlock__asub **out) {
  dlock__asub *s = dlock__map_get(&a->subs, name, strlen(name));
  if (!s || s->state != SUB_ACTIVE)
    return 0;
  return dlock__asub_join(a, name, op, out);
}

/* ---- the connection's events
 * ------------------------------------------------- */

/* Wakes every call waiting on s (each attempts again). */
static void wake_all(dlock__asub *s) {
  for (dlock__aop *op = s->w_head, *nx; op; op = nx) {
    nx = op->wnext;
    dlock__aop_wake(op, 0);
  }
}

/* A message (p, n) on s's lock channel: wakes as many calls as the
 * blocking client's rule says (ioverdict.c dlock__sub_wakes: "0" one, "1"
 * all), the oldest first, skipping calls that have a wake-up pending (an
 * attempt will follow anyway) -- pubsub.c's kick_n. */
static void wake_some(dlock__asub *s, const char *p, size_t n) {
  int64_t k = dlock__sub_wakes(DLOCK__WAKE_LOCK, p, n);
  if (k < 0) {
    wake_all(s);
    return;
  }
  for (dlock__aop *op = s->w_head, *nx; op && k > 0; op = nx) {
    nx = op->wnext;
    if (!dlock__wm_wants_wake(&op->wm))
      continue;
    k--;
    dlock__aop_wake(op, 0); /* may end the call: nothing of it after this */
  }
}

static void decline_done(dlock__areq *r, redisReply *reply, int err,
                         const char *why) {
  (void)why;
  dlock__areq_free(r);
  long long v = 0;
  (void)dlock__take_int(err, reply, &v, NULL);
}

/* A grant or a retry g that no waiting call took (the engine's rule,
 * dlock__eng_grant_unclaimed): the call it names had ended and its cancel
 * could not leave the queue, so the unlock handed the lock (or the head's
 * wake-up) to a wait that no longer exists. The decline script gives the lock
 * back (to the next live waiter), unless the owner took it as its own
 * since, and drops a retried wait's entry from the queue's head. Not
 * repeated if it fails: the wait's lease then ends the hold. */
static void decline(dlock_async *a, dlock__asub *s, const dlock__grant *g) {
  size_t ol = g->owner_len;
  if (DLOCK__UUID_LEN + 2 + ol > DLOCK__FIELD_MAX)
    return;
  char field[DLOCK__FIELD_MAX];
  memcpy(field, a->id, DLOCK__UUID_LEN);
  field[DLOCK__UUID_LEN] = ':';
  memcpy(field + DLOCK__UUID_LEN + 1, g->owner, ol);
  size_t fl = DLOCK__UUID_LEN + 1 + ol;
  field[fl] = '\0';
  dlock__rel_call k;
  int rc = dlock__decline_call_init(&k, s->name, s->name_len, field, fl,
                                    g->wid_hex, dlock__apublish(a));
  dlock__areq *r = rc ? NULL
                      : dlock__areq_eval(dlock__core_script(DLOCK__S_DECLINE),
                                         k.nkeys, k.keys, k.klens, 4, k.args,
                                         k.alens, decline_done, NULL);
  dlock__rel_call_free(&k);
  if (r)
    dlock__aconn_submit(&a->cmd, r);
}

/* A message on s's grant channel: the engine says which waiting call it
 * names (dlock__eng_grant_verdict: its wait id and its owner), and that one
 * no call took is declined -- the blocking client's rule too (pubsub.c
 * on_grant). The call named attempts again for a RETRY and for a GRANTED
 * alike: this client has no granted fast path, the attempt finds the field
 * the hand-over wrote and confirms the hold (its lease from that attempt).
 * A malformed message is ignored. */
static void on_grant(dlock_async *a, dlock__asub *s, const char *p, size_t n) {
  dlock__grant g;
  if (!dlock__eng_grant_parse(p, n, &g))
    return;
  for (dlock__aop *op = s->w_head; op; op = op->wnext)
    if (op->h && dlock__eng_grant_verdict(&g, op->h->owner, op->wm.w.id) !=
                     DLOCK__GRANT_NONE) {
      dlock__aop_wake(op, 1); /* may end the call: nothing of s after this */
      return;
    }
  if (dlock__eng_grant_unclaimed(&g) == DLOCK__GRANT_DECLINE)
    decline(a, s, &g);
}

static void confirmed(dlock_async *a, dlock__asub *s, int sub) {
  if (s->state != (sub ? SUB_SUBSCRIBING : SUB_UNSUBSCRIBING) ||
      --s->confirms > 0)
    return;
  if (dlock__subq_head(&s->k->subq) == s) /* its command is answered */
    dlock__subq_pop(&s->k->subq);
  if (sub) {
    s->state = SUB_ACTIVE;
    if (!s->w_head) { /* its calls left meanwhile */
      linger(a, s);
      return;
    }
    for (dlock__aop *op = s->w_head; op; op = op->wnext)
      op->active = 1;
    wake_all(s);
  } else if (s->w_head) {
    subscribe(a, s);
  } else {
    entry_free(a, s);
  }
}

/* The server refused the oldest (UN)SUBSCRIBE in flight on k (err): its
 * entry alone is concerned -- one refused SUBSCRIBE fails its own waits,
 * never another lock's (until io-stack D5 every entry then subscribing, on
 * every connection, failed) -- and which refusals are transient is the
 * blocking client's list (ioverdict.c dlock__sub_refusal): one rule. */
static void refused(dlock_async *a, dlock__aconn *k, const char *err) {
  dlock__asub *s = dlock__subq_head(&k->subq);
  dlock__subq_pop(&k->subq);
  if (!s || s->k != k)
    return;
  int v = dlock__sub_refusal(s->state == SUB_SUBSCRIBING, err);
  if (v == DLOCK__SUBREF_IDLE) { /* an UNSUBSCRIBE refused */
    if (s->state == SUB_UNSUBSCRIBING) {
      s->state = SUB_IDLE;
      s->confirms = 0;
      if (s->w_head)
        subscribe(a, s);
      else
        entry_free(a, s);
    }
    return;
  }
  s->state = SUB_IDLE;
  s->confirms = 0;
  if (v == DLOCK__SUBREF_RETRY) {
    /* "not here, not now" (a slot moving, a failover, LOADING): subscribed
     * again shortly (MOVED: the map is asked for again); its waiters
     * meanwhile wake at the holder's TTL, as without a subscription. */
    if (strncmp(err, "MOVED", 5) == 0)
      dlock__aroute_invalid(k);
    dlock__async_timer(a, &a->sub_kick,
                       dlock__async_now() + DLOCK__SUB_RETRY_MS);
    return;
  }
  char why[300];
  snprintf(why, sizeof why, "the server refused the subscription: %s", err);
  while (s->w_head) {
    dlock__aop *op = s->w_head;
    unlink_waiter(s, op);
    dlock__aop_sub_failed(op, DLOCK_EAUTH, why);
  }
  entry_free(a, s);
}

static void on_push(dlock__aconn *k, redisReply *r) {
  dlock_async *a = k->a;
  if (r->type == REDIS_REPLY_ERROR) {
    refused(a, k, r->str);
    freeReplyObject(r);
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    freeReplyObject(r);
    return;
  }
  const char *kind = r->element[0]->str;
  if (strcmp(kind, "smessage") == 0 || strcmp(kind, "ssubscribe") == 0 ||
      strcmp(kind, "sunsubscribe") == 0)
    kind++; /* sharded: as the plain ones */
  const redisReply *ch = r->element[1];
  dlock__asub *s = dlock__map_get(&a->chans, ch->str, ch->len);
  if (s && s->k != k)
    s = NULL; /* a late reply from a connection it left */
  if (s && strcmp(kind, "unsubscribe") == 0 && s->state == SUB_ACTIVE) {
    /* Not asked for: the channel's slot moved to another master (the
     * cluster ends sharded subscriptions there). Subscribed again on the
     * new owner once the map says which; the waiters attempt again (a
     * message may have been lost meanwhile). */
    s->state = SUB_IDLE;
    s->confirms = 0;
    for (dlock__aop *op = s->w_head; op; op = op->wnext)
      op->active = 0;
    dlock__aroute_invalid(k);
    if (s->w_head)
      subscribe(a, s);
    else
      entry_free(a, s);
    freeReplyObject(r);
    return;
  }
  if (s && strcmp(kind, "message") == 0 &&
      r->element[2]->type == REDIS_REPLY_STRING) {
    if (ch->len == s->grant.len && memcmp(ch->str, s->grant.p, ch->len) == 0)
      on_grant(a, s, r->element[2]->str, r->element[2]->len);
    else
      wake_some(s, r->element[2]->str, r->element[2]->len);
  } else if (s && strcmp(kind, "subscribe") == 0) {
    confirmed(a, s, 1);
  } else if (s && strcmp(kind, "unsubscribe") == 0) {
    confirmed(a, s, 0);
  }
  freeReplyObject(r);
}

static void on_ready(dlock__aconn *k) {
  dlock_async *a = k->a;
  k->backoff = 0; /* connected: the next loss starts at 50 ms again */
  for (dlock__asub *s = a->sub_list; s; s = s->next)
    if (s->state == SUB_IDLE && s->w_head && s->k == k)
      subscribe(a, s);
}

static void on_down(dlock__aconn *k, int err, const char *why) {
  (void)err;
  (void)why;
  dlock_async *a = k->a;
  dlock__subq_reset(&k->subq); /* nothing is in flight any more */
  int left = 0;
  for (dlock__asub *s = a->sub_list, *nx; s; s = nx) {
    nx = s->next;
    if (s->k != k)
      continue;
    if (!s->w_head) {
      entry_free(a, s);
      continue;
    }
    left = 1;
    s->state = SUB_IDLE;
    s->confirms = 0;
    for (dlock__aop *op = s->w_head; op; op = op->wnext)
      op->active = 0;
  }
  if (!left)
    return;
  /* reopened after the back-off (on a cluster: the map is refreshed too) */
  dlock__async_timer(
      a, &k->reconnect,
      dlock__async_now() +
          dlock__sub_backoff(&k->backoff, a->cfg.retry_interval_ms));
  /* A grant or a "0" may have been lost: every call attempts at once (not
   * queued: not subscribed), as the blocking subscriber kicks its slots. */
  for (dlock__asub *s = a->sub_list, *nx; s; s = nx) {
    nx = s->next;
    if (s->k == k && s->state == SUB_IDLE)
      wake_all(s);
  }
}

void dlock__asub_conn_init(dlock_async *a, dlock__aconn *k) {
  dlock__aconn_init(k, a, "subscriber");
  k->on_push = on_push;
  k->on_ready = on_ready;
  k->on_down = on_down;
}

static void kick_fired(dlock__atimer *t) { dlock__asub_kick(t->arg); }

void dlock__asub_init(dlock_async *a) {
  dlock__asub_conn_init(a, &a->sub);
  a->sub_kick.fn = kick_fired;
  a->sub_kick.arg = a;
  a->sub_linger.fn = linger_fired;
  a->sub_linger.arg = a;
}

void dlock__asub_kick(dlock_async *a) {
  for (dlock__asub *s = a->sub_list; s; s = s->next)
    if (s->state == SUB_IDLE && s->w_head)
      subscribe(a, s);
}

void dlock__asub_close(dlock_async *a) {
  dlock__async_untimer(a, &a->sub_kick);
  dlock__async_untimer(a, &a->sub_linger);
  while (a->sub_list)
    entry_free(a, a->sub_list);
}
