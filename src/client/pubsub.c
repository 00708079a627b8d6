/*
 * pubsub.c -- the subscriber thread and the wait slots of waiting threads.
 *
 * One subscriber connection per client. For every lock name some thread of
 * this client waits on, the client holds ONE subscription entry (shared by
 * all its waiting threads, dropped when none is left, or after
 * cfg.subscription_linger_ms): the lock's Redisson channel and, for the
 * mutex, this client's grant channel for that lock.
 *
 * Waiting threads register a slot (on their own stack) in the entry's FIFO
 * and sleep on the slot's condition variable. Messages wake slots:
 *   grant channel, <tid>|<wid>    -> exactly that wait: it now holds the
 *                                     lock (the unlock script handed it over)
 *   grant channel, <tid>|<wid>|r  -> that wait retries (the lock was freed:
 *                                     the head of the queue, issue 30)
 *   either, naming no waiting wait -> declined (the engine's rule for both
 *                                     clients: engine.h (e), on_grant)
 *   lock channel "0"              -> one thread retries (Redisson semantics)
 *   lock channel "1"              -> every thread retries (read unlock)
 * When a subscription becomes active, and after every reconnect (messages
 * may have been lost meanwhile, pub/sub is at most once), every slot of the
 * entry is kicked so its thread retries at once. Slots never wait longer
 * than the TTL their last attempt returned, so a lost message costs at most
 * one TTL, never a hang.
 *
 * Only this thread touches the subscriber connection; entries and slots are
 * guarded by c->ps.mu. API threads poke the thread through a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"

static void poke(dlock_client *c) {
  if (c->ps.pipe[1] >= 0) {
    char b = 1;
    ssize_t r = write(c->ps.pipe[1], &b, 1);
    (void)r; /* a full pipe already means "wake up" */
  }
}

static void slot_signal(dlock__slot *sl) { pthread_cond_signal(&sl->cv); }

static void kick_all(dlock__sub *s) {
  for (dlock__slot *sl = s->slots; sl; sl = sl->next) {
    sl->kicked = 1;
    slot_signal(sl);
  }
}

static void kick_n(dlock__sub *s, int64_t n) {
  for (dlock__slot *sl = s->slots; sl && n > 0; sl = sl->next) {
    if (sl->kicked || sl->granted)
      continue;
    sl->kicked = 1;
    slot_signal(sl);
    n--;
  }
}

static int slot_init(dlock__slot *slot) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&slot->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (rc != 0)
    return dlock__fail(DLOCK_ENOMEM, "cannot create a condition variable");
  slot->next = slot->prev = NULL; /* wait_id is the caller's */
  slot->granted = slot->kicked = slot->all = slot->failed = 0;
  slot->value = 0;
  slot->tid = dlock__tid();
  return 0;
}

/* Appends slot to s's FIFO (ps.mu held). Returns 1 if s had no waiter. */
static int slot_link(dlock__sub *s, dlock__slot *slot) {
  slot->prev = s->slots_tail;
  if (s->slots_tail)
    s->slots_tail->next = slot;
  else
    s->slots = slot;
  s->slots_tail = slot;
  return s->refs++ == 0;
}

int dlock__sub_join_active(dlock_client *c, const char *channel,
                           dlock__slot *slot, dlock__sub **out) {
  if (atomic_load_explicit(&c->ps.n_subs, memory_order_relaxed) == 0)
    return 0;
  dlock__mu_lock(&c->ps.mu);
  dlock__sub *s = dlock__map_get(&c->ps.subs, channel, strlen(channel));
  int ok = s && s->state == DLOCK__SUB_ACTIVE;
  if (ok && slot_init(slot) != 0)
    ok = 0;
  if (ok) {
    slot_link(s, slot);
    *out = s;
  }
  dlock__mu_unlock(&c->ps.mu);
  return ok;
}

int dlock__sub_join(dlock_client *c, const char *channel,
                    const char *grant_channel, int wake_policy,
                    dlock__slot *slot, dlock__sub **out, int *active) {
  int rc = slot_init(slot);
  if (rc)
    return rc;

  dlock__mu_lock(&c->ps.mu);
  dlock__sub *s = dlock__map_get(&c->ps.subs, channel, strlen(channel));
  int need_poke = 0;
  if (!s) {
    s = dlock__calloc(1, sizeof *s);
    if (s) {
      s->channel = dlock__strdup(channel);
      s->grant_channel = grant_channel ? dlock__strdup(grant_channel) : NULL;
    }
    if (!s || !s->channel || (grant_channel && !s->grant_channel) ||
        dlock__map_put(&c->ps.subs, s->channel, strlen(s->channel), s) != 0) {
      dlock__mu_unlock(&c->ps.mu);
      if (s) {
        free(s->channel);
        free(s->grant_channel);
        free(s);
      }
      pthread_cond_destroy(&slot->cv);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    if (s->grant_channel && dlock__map_put(&c->ps.grants, s->grant_channel,
                                           strlen(s->grant_channel), s) != 0) {
      dlock__map_del(&c->ps.subs, s->channel, strlen(s->channel));
      dlock__mu_unlock(&c->ps.mu);
      free(s->channel);
      free(s->grant_channel);
      free(s);
      pthread_cond_destroy(&slot->cv);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    s->wake_policy = wake_policy;
    s->state = DLOCK__SUB_IDLE;
    s->conn = -1;
    s->next_all = c->ps.list;
    c->ps.list = s;
    atomic_fetch_add(&c->ps.n_subs, 1);
  }
  need_poke = slot_link(s, slot);
  *active = s->state == DLOCK__SUB_ACTIVE;
  slot->failed = s->state == DLOCK__SUB_FAILED;
  *out = s;
  dlock__mu_unlock(&c->ps.mu);
  if (need_poke)
    poke(c);
  return 0;
}

int dlock__sub_wait(dlock_client *c, dlock__sub *s, dlock__slot *slot,
                    int64_t until_ms, int *granted, int *active) {
  dlock__mu_lock(&c->ps.mu);
  while (!slot->granted && !slot->kicked && !slot->failed &&
         !atomic_load(&c->closing)) {
    if (until_ms >= 0) {
      int64_t now = dlock__now_ms();
      if (now >= until_ms)
        break;
      struct timespec ts = dlock__abstime(CLOCK_MONOTONIC, until_ms - now);
      pthread_cond_timedwait(&slot->cv, &c->ps.mu, &ts);
    } else {
      pthread_cond_wait(&slot->cv, &c->ps.mu);
    }
  }
  int woke = slot->granted || slot->kicked || slot->failed;
  *granted = slot->granted;
  /* A wake-up is consumed by the wake it caused (issue 38.1: a grant flag
   * set before a pause outlived the hand-over and woke every later sleep
   * of the wait at once): the attempt that follows answers for it. */
  slot->granted = 0;
  slot->kicked = 0;
  *active = s->state == DLOCK__SUB_ACTIVE;
  dlock__mu_unlock(&c->ps.mu);
  return woke;
}

void dlock__sub_leave(dlock_client *c, dlock__sub *s, dlock__slot *slot) {
  dlock__mu_lock(&c->ps.mu);
  if (slot->prev)
    slot->prev->next = slot->next;
  else
    s->slots = slot->next;
  if (slot->next)
    slot->next->prev = slot->prev;
  else
    s->slots_tail = slot->prev;
  int poke_it = 0;
  if (--s->refs == 0) {
    /* The thread unsubscribes after the linger: it must look again by
     * then. Already due to look earlier (the usual case when one thread
     * locks and unlocks in a loop, each lock joining the lingering entry):
     * no poke -- a wake-up of the thread per acquisition otherwise. */
    s->idle_since = dlock__now_ms();
    int64_t due = s->idle_since + c->cfg.subscription_linger_ms;
    poke_it = c->ps.wake_at < 0 || c->ps.wake_at > due;
  }
  dlock__mu_unlock(&c->ps.mu);
  pthread_cond_destroy(&slot->cv);
  if (poke_it)
    poke(c);
}

/* ---- the subscriber thread ----------------------------------------------
 *
 * One subscriber connection per node that serves a channel some thread
 * waits on: the only node of a standalone client; on a cluster, the master
 * owning the channel's slot (a channel embeds its lock's hash tag, so the
 * lock channel and the grant channel of one lock share it), subscribed with
 * SSUBSCRIBE when the servers have sharded pub/sub (Redis 7), so the unlock
 * scripts' SPUBLISH reaches it and PUBLISH-style receiver counts stay
 * exact. A slot that moves makes its master drop the subscription
 * ("sunsubscribe" without a request): the waiters are kicked (they re-check
 * at once) and the subscription is made again on the new owner. */

typedef struct ps_conn {
  dlock__node *node; /* whose address it connects to */
  dlock__link *link; /* or NULL */
  int64_t next_connect_at;
  int64_t backoff;
  /* (UN)SUBSCRIBE commands written and not yet fully confirmed, in order:
   * an error reply answers the oldest (replies come in command order) --
   * the queue both clients keep (ioverdict.c dlock__subq). */
  dlock__subq sent;
  dlock__sb out; /* commands not yet written (flush_out) */
  int wanted;    /* a subscription waits for this connection */
  int failed;    /* it was lost: the next one made is a reconnect */
} ps_conn;

typedef struct ps_state {
  ps_conn *conns;
  int n, cap;
  int refresh; /* the cluster's map is stale: refresh it (outside ps.mu) */
} ps_state;

/* Forgets s in every queue of commands in flight (it is being freed). */
static void sent_forget(ps_state *ps, const dlock__sub *s) {
  for (int i = 0; ps && i < ps->n; i++) {
    ps_conn *pc = &ps->conns[i];
    dlock__subq_forget(&pc->sent, s);
  }
}

static void free_sub(dlock_client *c, ps_state *ps, dlock__sub *s) {
  sent_forget(ps, s);
  dlock__map_del(&c->ps.subs, s->channel, strlen(s->channel));
  atomic_fetch_sub(&c->ps.n_subs, 1);
  if (s->grant_channel)
    dlock__map_del(&c->ps.grants, s->grant_channel, strlen(s->grant_channel));
  free(s->channel);
  free(s->grant_channel);
  free(s->error);
  free(s);
}

static int sharded(const dlock_client *c) {
  return c->cl && atomic_load(&c->cl->sharded);
}

static void append_sub_cmd(dlock_client *c, ps_conn *pc, int subscribe,
                           dlock__sub *s) {
  const char *verb = sharded(c) ? (subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                                : (subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
  const char *argv[3] = {verb, s->channel, s->grant_channel};
  size_t lens[3] = {strlen(verb), strlen(s->channel),
                    s->grant_channel ? strlen(s->grant_channel) : 0};
  dlock__resp_argv(&pc->out, s->grant_channel ? 3 : 2, argv, lens);
  s->confirms = s->grant_channel ? 2 : 1;
  (void)dlock__subq_push(&pc->sent, s); /* OOM: its refusal matches none */
}

/* The connection to node, made (unconnected) when missing; -1 on OOM. */
static int conn_for(ps_state *ps, dlock__node *node) {
  for (int i = 0; i < ps->n; i++)
    if (ps->conns[i].node == node)
      return i;
  if (ps->n == ps->cap) {
    int nc = ps->cap ? ps->cap * 2 : 4;
    ps_conn *nv = realloc(ps->conns, (size_t)nc * sizeof *nv);
    if (!nv)
      return -1;
    ps->conns = nv;
    ps->cap = nc;
  }
  ps_conn *pc = &ps->conns[ps->n];
  memset(pc, 0, sizeof *pc);
  pc->node = node;
  pc->backoff = 0; /* dlock__sub_backoff: 50 ms first */
  dlock__sb_init(&pc->out);
  return ps->n++;
}

/* A subscription that wants to be made: on the connection of the node
 * serving its channel, once that is connected. ps.mu held. */
static void want_sub(dlock_client *c, ps_state *ps, dlock__sub *s,
                     int64_t now) {
  if (s->retry_at > now)
    return;
  dlock__node *node = c->cl ? dlock__cluster_lookup(c, s->channel) : &c->node;
  int i = node ? conn_for(ps, node) : -1;
  if (i < 0) {
    ps->refresh = c->cl != NULL;
    return;
  }
  ps_conn *pc = &ps->conns[i];
  pc->wanted = 1;
  if (!pc->link)
    return;
  append_sub_cmd(c, pc, 1, s);
  s->conn = i;
  s->state = DLOCK__SUB_SUBSCRIBING;
}

/* Brings subscriptions in line with what waiters want. ps.mu held.
 * Returns the next time (ms) it must run again (a linger, a retry), or -1. */
static int64_t reconcile(dlock_client *c, ps_state *ps) {
  int64_t next = -1, now = dlock__now_ms();
  for (int i = 0; i < ps->n; i++)
    ps->conns[i].wanted = 0;
  dlock__sub **pp = &c->ps.list;
  while (*pp) {
    dlock__sub *s = *pp;
    ps_conn *pc = s->conn >= 0 ? &ps->conns[s->conn] : NULL;
    if (s->refs > 0 && s->state == DLOCK__SUB_IDLE) {
      want_sub(c, ps, s, now);
      if (s->state == DLOCK__SUB_IDLE && s->retry_at > now &&
          (next < 0 || s->retry_at < next))
        next = s->retry_at;
    } else if (s->refs == 0 && s->state == DLOCK__SUB_ACTIVE) {
      int64_t due;
      if (!dlock__sub_linger(s->idle_since, c->cfg.subscription_linger_ms, now,
                             &due) &&
          pc && pc->link) {
        append_sub_cmd(c, pc, 0, s);
        s->state = DLOCK__SUB_UNSUBSCRIBING;
      } else if (next < 0 || due < next) {
        next = due;
      }
    } else if (s->refs == 0 && s->state == DLOCK__SUB_FAILED) {
      s->state = DLOCK__SUB_IDLE; /* the next waiter tries again */
      continue;
    } else if (s->refs == 0 && s->state == DLOCK__SUB_IDLE) {
      *pp = s->next_all;
      free_sub(c, ps, s);
      continue;
    }
    if (pc && s->state != DLOCK__SUB_IDLE)
      pc->wanted = 1;
    pp = &s->next_all;
  }
  return next;
}

/* s lost its subscription (connection gone, slot moved): its waiters
 * re-check at once -- messages may have been lost -- and it is made again
 * when the next reconcile finds where. ps.mu held. */
static void sub_reset(dlock__sub *s) {
  s->state = DLOCK__SUB_IDLE;
  s->confirms = 0;
  s->conn = -1;
  kick_all(s);
}

static void on_disconnect(dlock_client *c, ps_state *ps, int i) {
  ps_conn *pc = &ps->conns[i];
  if (pc->link) {
    pc->failed = 1;
    if (!atomic_load(&c->closing))
      dlock__log(&c->cfg, DLOCK_LOG_WARN, NULL, "disconnect",
                 "subscriber connection lost: %s",
                 pc->link->errstr[0] ? pc->link->errstr : "closed");
    dlock__link_free(pc->link);
    pc->link = NULL;
  }
  dlock__sb_reset(&pc->out);
  pc->out.oom = 0;
  dlock__mu_lock(&c->ps.mu);
  dlock__subq_reset(&pc->sent);
  for (dlock__sub *s = c->ps.list; s; s = s->next_all)
    if (s->conn == i)
      sub_reset(s);
  dlock__mu_unlock(&c->ps.mu);
  /* On a cluster the node may have failed over: look again. */
  ps->refresh = c->cl != NULL;
  dlock__cluster_mark_stale(c);
  /* 50 ms, doubling up to retry_interval_ms: the event-loop client's
   * subscriber too (ioverdict.c) */
  pc->next_connect_at =
      dlock__now_ms() +
      dlock__sub_backoff(&pc->backoff, c->cfg.retry_interval_ms);
}

/* The server refused the oldest (UN)SUBSCRIBE in flight on pc: for
 * SUBSCRIBE (e.g. an ACL user without +subscribe or without the channel),
 * its waiters learn it now instead of waiting out a lease in silence; a
 * transient refusal is retried shortly. ps.mu held. */
static void on_refused(dlock_client *c, ps_state *ps, ps_conn *pc,
                       const redisReply *r) {
  dlock__sub *s = dlock__subq_head(&pc->sent);
  dlock__subq_pop(&pc->sent);
  if (!s)
    return;
  /* Which refusals are transient is one rule for both clients
   * (ioverdict.c dlock__sub_refusal). */
  int v = dlock__sub_refusal(s->state == DLOCK__SUB_SUBSCRIBING, r->str);
  if (s->state == DLOCK__SUB_SUBSCRIBING && v == DLOCK__SUBREF_RETRY) {
    sub_reset(s);
    s->retry_at = dlock__now_ms() + DLOCK__SUB_RETRY_MS;
    ps->refresh = c->cl != NULL;
  } else if (s->state == DLOCK__SUB_SUBSCRIBING) {
    s->state = DLOCK__SUB_FAILED;
    free(s->error);
    s->error = dlock__strndup(r->str, r->len);
    for (dlock__slot *sl = s->slots; sl; sl = sl->next) {
      sl->failed = 1;
      slot_signal(sl);
    }
  } else if (s->state == DLOCK__SUB_UNSUBSCRIBING) {
    s->state = DLOCK__SUB_IDLE;
  }
  s->confirms = 0;
}

/* A message on s's grant channel. What it is and which wait takes it is
 * the engine's decision (engine.h (e), one rule for both clients):
 *   GRANTED  "<tid>|<wait id>" names this slot's wait: the unlock handed it
 *            the lock; the thread wakes and attempts (the wait machine):
 *            the server's answer confirms it;
 *   RETRY    "<tid>|<wait id>|r" names it: the lock was freed and the wait
 *            is the head, woken while young (DLOCK__LUA_POLICY): kick it;
 *   NONE     for every slot -- no wait of that id, including a grant or a
 *            retry for an older wait of a thread that waits again: that
 *            wait ended (its cancel could not leave the queue), so the lock
 *            was handed, or the head's wake-up sent, to a wait that no longer
 *            exists -- DECLINE: queue a decline (the errand thread sends
 *            it; the script does nothing if the thread took the lock as its
 *            own meanwhile, else gives it back to the next live waiter).
 * A malformed message is ignored. Returns 1 if a decline was queued.
 * ps.mu held. */
static int on_grant(dlock_client *c, dlock__sub *s, const char *p, size_t pl) {
  dlock__grant g;
  if (!dlock__eng_grant_parse(p, pl, &g))
    return 0;
  for (dlock__slot *sl = s->slots; sl; sl = sl->next) {
    int v = dlock__eng_grant_verdict(&g, (long long)sl->tid, sl->wait_id);
    if (v == DLOCK__GRANT_NONE)
      continue;
    if (v == DLOCK__GRANT_GRANTED)
      sl->granted = 1;
    else
      sl->kicked = 1;
    slot_signal(sl);
    return 0;
  }
  if (dlock__eng_grant_unclaimed(&g) != DLOCK__GRANT_DECLINE)
    return 0;
  /* The lock's name from the grant channel, own_name(name) ":" <uuid>. */
  size_t gl = strlen(s->grant_channel);
  dlock__sb name;
  dlock__sb_init(&name);
  dlock__decline *d = NULL;
  if (gl > DLOCK__UUID_LEN + 1 &&
      dlock__own_name_back("dlock_grant__channel", s->grant_channel,
                           gl - DLOCK__UUID_LEN - 1, &name) == 0 &&
      (d = dlock__malloc(sizeof *d + name.len + 1)) != NULL) {
    /* a thread id is never negative: such an owner names no field of
     * this client, and the decline script answers 0 */
    d->tid = (uint64_t)g.owner_id;
    memcpy(d->wid, g.wid_hex, sizeof d->wid);
    memcpy(d->name, name.p, name.len);
    d->name[name.len] = '\0';
    d->next = c->ps.declines;
    c->ps.declines = d;
  }
  dlock__sb_free(&name);
  return d != NULL;
}

/* A message on a shared channel: wakes waiters by s's policy. */
static void on_message(dlock__sub *s, const redisReply *m) {
  /* how many is one rule for both clients (ioverdict.c) */
  int64_t n = dlock__sub_wakes(s->wake_policy, m->str, m->len);
  if (n < 0) {
    for (dlock__slot *sl = s->slots; sl; sl = sl->next)
      sl->all = 1;
    kick_all(s);
  } else {
    kick_n(s, n);
  }
}

/* "subscribe"/"ssubscribe" (what = 1), "unsubscribe"/"sunsubscribe" (2),
 * "message"/"smessage" (3), else 0. */
static int push_kind(const char *k) {
  if (*k == 's' && strcmp(k, "subscribe") != 0)
    k++;
  return strcmp(k, "subscribe") == 0     ? 1
         : strcmp(k, "unsubscribe") == 0 ? 2
         : strcmp(k, "message") == 0     ? 3
                                         : 0;
}

/* A confirmation or an unsolicited sunsubscribe (the slot moved away: the
 * server dropped the subscription) for s on pc. ps.mu held. */
static void on_confirm(dlock_client *c, ps_state *ps, ps_conn *pc,
                       dlock__sub *s, int kind) {
  if (kind == 1 && s->state == DLOCK__SUB_SUBSCRIBING) {
    if (--s->confirms == 0) {
      s->state = DLOCK__SUB_ACTIVE;
      kick_all(s); /* now they can queue for a direct hand-over */
      if (dlock__subq_head(&pc->sent) == s)
        dlock__subq_pop(&pc->sent);
    }
  } else if (kind == 2 && s->state == DLOCK__SUB_UNSUBSCRIBING) {
    if (--s->confirms == 0) {
      s->state = DLOCK__SUB_IDLE; /* reconcile frees or resubscribes */
      s->conn = -1;
      if (dlock__subq_head(&pc->sent) == s)
        dlock__subq_pop(&pc->sent);
    }
  } else if (kind == 2 && s->state == DLOCK__SUB_ACTIVE) {
    sub_reset(s);
    ps->refresh = c->cl != NULL;
    dlock__cluster_mark_stale(c);
  }
}

static void on_reply(dlock_client *c, ps_state *ps, int ci, redisReply *r) {
  ps_conn *pc = &ps->conns[ci];
  if (r->type == REDIS_REPLY_ERROR) {
    dlock__mu_lock(&c->ps.mu);
    on_refused(c, ps, pc, r);
    dlock__mu_unlock(&c->ps.mu);
    return;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING)
    return;
  int kind = push_kind(r->element[0]->str);
  const char *ch = r->element[1]->str;
  size_t chl = r->element[1]->len;
  dlock__mu_lock(&c->ps.mu);
  int is_grant = 0, declined = 0;
  dlock__sub *s = dlock__map_get(&c->ps.subs, ch, chl);
  if (!s) {
    s = dlock__map_get(&c->ps.grants, ch, chl);
    is_grant = s != NULL;
  }
  if (s && (kind == 1 || kind == 2) && (s->conn == ci || s->conn < 0))
    on_confirm(c, ps, pc, s, kind);
  else if (s && kind == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
    if (is_grant)
      declined = on_grant(c, s, r->element[2]->str, r->element[2]->len);
    else
      on_message(s, r->element[2]);
  }
  dlock__mu_unlock(&c->ps.mu);
  if (declined)
    dlock__errand_decline_poke(c);
}

/* Writes the queued (UN)SUBSCRIBEs (never SIGPIPE: dlock__write_all). */
static int flush_out(ps_conn *pc) {
  if (pc->out.oom)
    return -1;
  int rc = pc->out.len ? dlock__link_send(pc->link, pc->out.p, pc->out.len) : 0;
  dlock__sb_reset(&pc->out);
  return rc;
}

int dlock_client_cancel_waits(dlock_client *c) {
  if (!c)
    return DLOCK_EINVAL;
  /* Async-signal-safe: an atomic add and a write(2) to the pipe. The
   * pub/sub thread does the waking. */
  atomic_fetch_add(&c->cancel_gen, 1);
  poke(c);
  return 0;
}

/* Connects connection i (when a subscription wants it and the back-off
 * allows). */
static void ps_connect(dlock_client *c, ps_state *ps, int i) {
  ps_conn *pc = &ps->conns[i];
  dlock__link *l;
  if (dlock__link_open(c, pc->node->url, &l) != 0) {
    on_disconnect(c, ps, i);
    return;
  }
  /* Reads are driven by poll, so a plain read never waits; the timeout
   * bounds a TLS record that arrived in part (the rest never coming
   * would otherwise hold this thread, and dlock_client_free with it). */
  dlock__link_set_timeout(l, c->cfg.command_timeout_ms,
                          c->cfg.command_timeout_ms);
  pc->link = l;
  pc->backoff = 0; /* dlock__sub_backoff: 50 ms first */
  if (pc->failed) {
    pc->failed = 0;
    dlock__stat_add(&c->stats, DLOCK__ST_RECONNECTS, 1);
    dlock__log(&c->cfg, DLOCK_LOG_INFO, NULL, "reconnect",
               "subscriber connection reopened");
  }
}

/* Reads what connection i has and handles every complete reply. 0, or -1
 * when the connection failed (already handled). */
static int ps_read(dlock_client *c, ps_state *ps, int i) {
  do {
    dlock__link *l = ps->conns[i].link;
    if (dlock__link_read(l) != 0) {
      on_disconnect(c, ps, i);
      return -1;
    }
    for (;;) {
      redisReply *rep;
      if (dlock__link_next(l, &rep) != 0) {
        on_disconnect(c, ps, i);
        return -1;
      }
      if (!rep)
        break;
      on_reply(c, ps, i, rep);
      freeReplyObject(rep);
    }
  } while (dlock__link_pending(ps->conns[i].link) > 0);
  return 0;
}

/* A dlock_client_cancel_waits() since the last look kicks every waiter. */
static void ps_cancels(dlock_client *c, unsigned *seen) {
  unsigned cg = atomic_load(&c->cancel_gen);
  if (cg == *seen)
    return;
  *seen = cg;
  dlock__mu_lock(&c->ps.mu);
  for (dlock__sub *s = c->ps.list; s; s = s->next_all)
    kick_all(s);
  dlock__mu_unlock(&c->ps.mu);
}

/* How long poll may sleep: until the next timed event of reconcile, or
 * the next connect attempt of a wanted connection; -1 = no bound. */
static int ps_poll_timeout(const ps_state *ps, int64_t due) {
  int64_t now = dlock__now_ms(), t = -1;
  if (due >= 0)
    t = due > now ? due - now : 0;
  for (int i = 0; i < ps->n; i++)
    if (!ps->conns[i].link && ps->conns[i].wanted) {
      int64_t at = ps->conns[i].next_connect_at;
      int64_t d = at > now ? at - now : 0;
      if (t < 0 || d < t)
        t = d;
    }
  if (ps->refresh && (t < 0 || t > 100))
    t = 100;
  return t > INT32_MAX ? INT32_MAX : (int)t;
}

/* One round of connection upkeep: the cluster's map refreshed when a
 * subscription found it stale, wanted connections made, queued commands
 * written. Returns reconcile's next due time. */
static int64_t ps_upkeep(dlock_client *c, ps_state *ps) {
  if (ps->refresh) {
    ps->refresh = 0;
    dlock__cluster_refresh(c);
  }
  dlock__mu_lock(&c->ps.mu);
  int64_t due = reconcile(c, ps);
  c->ps.wake_at = due;
  dlock__mu_unlock(&c->ps.mu);
  int64_t now = dlock__now_ms();
  int connected = 0;
  for (int i = 0; i < ps->n; i++)
    if (!ps->conns[i].link && ps->conns[i].wanted &&
        now >= ps->conns[i].next_connect_at) {
      ps_connect(c, ps, i);
      connected |= ps->conns[i].link != NULL;
    }
  if (connected) { /* subscribe on the new connections at once */
    dlock__mu_lock(&c->ps.mu);
    due = reconcile(c, ps);
    c->ps.wake_at = due;
    dlock__mu_unlock(&c->ps.mu);
  }
  for (int i = 0; i < ps->n; i++)
    if (ps->conns[i].link && flush_out(&ps->conns[i]) != 0)
      on_disconnect(c, ps, i);
  return due;
}

static void ps_free(ps_state *ps) {
  for (int i = 0; i < ps->n; i++) {
    dlock__link_free(ps->conns[i].link);
    dlock__subq_free(&ps->conns[i].sent);
    dlock__sb_free(&ps->conns[i].out);
  }
  free(ps->conns);
}

static void *ps_main(void *arg) {
  dlock_client *c = arg;
  ps_state ps = {NULL, 0, 0, 0};
  unsigned seen_cancel = atomic_load(&c->cancel_gen);
  enum { MAXFD = 64 };
  while (!atomic_load(&c->closing)) {
    ps_cancels(c, &seen_cancel);
    for (int i = 0; i < ps.n; i++)
      if (ps.conns[i].link && dlock__link_stale(c, ps.conns[i].link))
        on_disconnect(c, &ps, i); /* Sentinel failover: follow the master */
    int64_t due = ps_upkeep(c, &ps);
    struct pollfd pf[MAXFD + 1];
    int map[MAXFD + 1], nf = 1;
    pf[0] = (struct pollfd){c->ps.pipe[0], POLLIN, 0};
    for (int i = 0; i < ps.n && nf <= MAXFD; i++)
      if (ps.conns[i].link) {
        pf[nf] = (struct pollfd){ps.conns[i].link->fd, POLLIN, 0};
        map[nf++] = i;
      }
    int pr = poll(pf, (nfds_t)nf, ps_poll_timeout(&ps, due));
    if (pr < 0 && errno != EINTR)
      dlock__sleep_ms(10);
    if (pr <= 0)
      continue;
    if (pf[0].revents) {
      char buf[64];
      while (read(c->ps.pipe[0], buf, sizeof buf) > 0) {
      }
    }
    for (int k = 1; k < nf; k++)
      if (pf[k].revents && ps.conns[map[k]].link)
        ps_read(c, &ps, map[k]);
  }
  ps_free(&ps);
  return NULL;
}

int dlock__sub_error(dlock_client *c, dlock__sub *s, const char *what) {
  dlock__mu_lock(&c->ps.mu);
  int rc = s->grant_channel
               ? dlock__fail(DLOCK_EAUTH,
                             "waiting for %s needs SUBSCRIBE on '%s' and '%s', "
                             "which the server refused: %s",
                             what, s->channel, s->grant_channel,
                             s->error ? s->error : "(no reason given)")
               : dlock__fail(DLOCK_EAUTH,
                             "waiting for %s needs SUBSCRIBE on '%s', which "
                             "the server refused: %s",
                             what, s->channel,
                             s->error ? s->error : "(no reason given)");
  dlock__mu_unlock(&c->ps.mu);
  return rc;
}

int dlock__pubsub_init(dlock__pubsub *ps) {
  memset(ps, 0, sizeof *ps);
  ps->pipe[0] = ps->pipe[1] = -1;
  ps->wake_at = -1;
  if (pthread_mutex_init(&ps->mu, NULL) != 0)
    goto fail;
  if (dlock__map_init(&ps->subs, 64) != 0)
    goto fail_mu;
  if (dlock__map_init(&ps->grants, 64) != 0)
    goto fail_subs;
  return 0;
fail_subs:
  dlock__map_free(&ps->subs);
fail_mu:
  pthread_mutex_destroy(&ps->mu);
fail:
  return dlock__fail(DLOCK_ENOMEM, "out of memory");
}

void dlock__pubsub_destroy(dlock__pubsub *ps, int forked) {
  dlock__map_free(&ps->subs);
  dlock__map_free(&ps->grants);
  while (ps->declines) {
    dlock__decline *d = ps->declines;
    ps->declines = d->next;
    free(d);
  }
  if (!forked) /* in a fork child it may be a copy of a locked one */
    pthread_mutex_destroy(&ps->mu);
}

static void close_pipe(dlock__pubsub *ps) {
  for (int i = 0; i < 2; i++)
    if (ps->pipe[i] >= 0) {
      close(ps->pipe[i]);
      ps->pipe[i] = -1;
    }
}

int dlock__pubsub_start(dlock_client *c) {
  if (pipe(c->ps.pipe) != 0) {
    c->ps.pipe[0] = c->ps.pipe[1] = -1;
    return dlock__fail(DLOCK_ENOMEM, "pipe: %s", strerror(errno));
  }
  for (int i = 0; i < 2; i++) {
    fcntl(c->ps.pipe[i], F_SETFL, fcntl(c->ps.pipe[i], F_GETFL) | O_NONBLOCK);
    fcntl(c->ps.pipe[i], F_SETFD, FD_CLOEXEC);
  }
  if (dlock__thread_start(&c->ps.thread, ps_main, c) != 0) {
    close_pipe(&c->ps);
    return dlock__fail(DLOCK_ENOMEM, "cannot start the pub/sub thread");
  }
  c->ps.started = 1;
  return 0;
}

void dlock__pubsub_stop(dlock_client *c) {
  atomic_store(&c->closing, 1);
  if (c->ps.started) {
    poke(c);
    pthread_join(c->ps.thread, NULL);
    c->ps.started = 0;
  }
  dlock__mu_lock(&c->ps.mu);
  for (dlock__sub *s = c->ps.list; s; s = s->next_all)
    kick_all(s);
  dlock__sub *s = c->ps.list;
  c->ps.list = NULL;
  dlock__mu_unlock(&c->ps.mu);
  while (s) {
    dlock__sub *nx = s->next_all;
    if (s->refs == 0)
      free_sub(c, NULL, s);
    s = nx;
  }
  close_pipe(&c->ps);
}

int dlock__sub_wait_check(dlock_client *c, const char *channel, int wake_policy,
                          const dlock__budget *b, int64_t recheck_ms,
                          int64_t (*recheck_fn)(void *), int (*check)(void *),
                          void *arg, const char *what) {
  dlock__slot slot;
  slot.wait_id = 0;
  dlock__sub *sub = NULL;
  int active = 0;
  int rc = dlock__sub_join(c, channel, NULL, wake_policy, &slot, &sub, &active);
  if (rc || !sub)
    return rc ? rc : DLOCK_ENOMEM;
  /* Already subscribed (another waiter of this client): a message may have
   * come between the caller's first check and the join, so check at once.
   * Otherwise the confirmation of the SUBSCRIBE kicks us. */
  int need_wait = !active;
  for (;;) {
    if (need_wait) {
      int64_t until = dlock__budget_clamp(
          b, dlock__now_ms() + (recheck_fn ? recheck_fn(arg) : recheck_ms));
      int granted = 0;
      /* A cancel that came before the join kicked no slot of ours. */
      if (!dlock__budget_canceled(b))
        dlock__sub_wait(c, sub, &slot, until, &granted, &active);
      if (slot.failed) {
        rc = dlock__sub_error(c, sub, what);
        break;
      }
      if ((rc = dlock__budget_over(b, what)) != 0 && rc != DLOCK_ETIMEDOUT)
        break;
    }
    need_wait = 1;
    int r = check(arg);
    if (r != 0) {
      rc = r == 1 ? 0 : r;
      break;
    }
    if ((rc = dlock__budget_over(b, what)) != 0)
      break;
  }
  dlock__sub_leave(c, sub, &slot);
  return dlock__budget_end(b, rc, what);
}
