/*
 * mutex.c -- the reentrant mutex (Redisson RLock layout): hold records, the
 * wait loop shared by all mutex variants, and the plain variant's scripts.
 *
 * THE FAST PATH is one script call to lock and one to unlock; nothing is
 * subscribed unless the first attempt fails.
 *
 * THE WAIT LOOP (see scripts.c for the server side):
 *   1. The first attempt fails -> join the client's subscription entry for
 *      this lock (one per lock name per client, shared by its waiters).
 *   2. Once the subscription is confirmed, attempt again, this time joining
 *      the server-side wait queue on failure, in the same script call.
 *   3. Sleep until: the lock is handed over to this thread (grant message:
 *      it holds the lock; one attempt -- the server's answer -- confirms
 *      it, never the grant alone), a "0" says the lock is
 *      free (retry), the holder's TTL runs out (retry: pub/sub is at most
 *      once), or the caller's wait budget ends (leave the queue; if the lock
 *      was handed over meanwhile, keep it).
 *   What each answer means -- sleep until when, time out, leave the queue,
 *   keep a hand-over the cancel found, join the queue -- is the engine's
 *   (engine.h (f)), and the order of these steps is the engine's wait
 *   machine (engine/waitm.h): this file's drive() does what it says, as
 *   async_lock.c's run() does for the event-loop client.
 *
 * HOLD RECORDS (holds.c). The client keeps, per lock name and thread, what
 * that thread holds: count, whether the watchdog renews it, the lease, the
 * local deadline, a lost flag. Two objects of one name share the record, so
 * they are one reentrant lock. Unlock consults the record first (DLOCK_EPERM
 * without a round trip).
 *
 * WAITS ARE NAMED. Every waiting call draws a random wait id; its queue entry
 * and the grant that answers it carry the id, so a grant or an entry of an
 * ended wait is never taken for a later wait of the same thread. A hand-over
 * is confirmed by one more attempt, whose answer is the server's (its lease
 * counted from that send; with replica sync its WAIT, as a direct
 * acquisition: a shortfall gives it back, DLOCK_ENOSYNC) -- never by
 * elapsed time: a grant that outlived its hand-over (the waiter paused
 * across it) made a later sleep return "held" while another client held
 * the lock (issue 38.1). A wake-up is consumed by the wake it causes. A
 * hold that the cancel of an ended wait finds is taken by one more attempt
 * too: it may be a hand-over to an older wait of the thread, with that
 * wait's lease.
 *
 * THE BUDGET bounds the call: the retries after DLOCK_ENOSYNC spend what is
 * left of it (trylock: none), and a timed wait outlives a server that is
 * away (a failover) until it ends, whatever the retry policy (the wait
 * machine's rule, engine/waitm.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

/* ---- plain variant: scripts ---------------------------------------------- */

static void plain_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                           dlock__sb *grant) {
  (void)tid;
  dlock__prefix_name(channel, "redisson_lock__channel", m->name);
  dlock__own_name(grant, "dlock_grant__channel", m->name);
  dlock__sb_add(grant, ":", 1);
  dlock__sb_add(grant, m->c->id, DLOCK__UUID_LEN);
}

/* ---- tombstones of requests sent twice (the calls: engine/calls.c) ----- */

int dlock__commit_tomb(dlock_client *c, const char *key, size_t klen) {
  char ts[24];
  size_t tl = dlock__fmt_i64(ts, dlock__tombstone_ttl(&c->cfg));
  const char *av[5] = {"SET", key, "1", "PX", ts};
  size_t al[5] = {3, klen, 1, 2, tl};
  dlock__cmd cmd = {key, NULL, 5, av, al, 0};
  redisReply *r = NULL;
  int rc = dlock__exec(c, &cmd, &r);
  if (rc == 0 && (!r || r->type == REDIS_REPLY_ERROR))
    rc = dlock__fail(DLOCK_EREDIS, "SET of the tombstone %.200s: %s", key,
                     r && r->str ? r->str : "no reply");
  freeReplyObject(r);
  return rc;
}

/* Commits release rid of lock name: its tombstone written and confirmed
 * (a copy of it sent before may still be on its way). 0 or the failure. */
static int rel_commit(dlock_client *c, const char *name, const char *rid) {
  dlock__sb key;
  dlock__sb_init(&key);
  dlock__unlock_latch_key(&key, name, rid);
  int rc = key.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                   : dlock__commit_tomb(c, key.p, key.len);
  dlock__sb_free(&key);
  return rc;
}

static int plain_attempt(dlock_mutex *m, uint64_t tid, int target,
                         int64_t lease, int queue, int64_t wait_ms,
                         int64_t *ttl, uint64_t *token, const dlock__wait *w) {
  (void)wait_ms;
  (void)token;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(m->c, tid, field);
  dlock__acq_call k;
  int rc = dlock__acq_call_init(&k, m->name, m->name_len, field, fl, target,
                                lease, queue, w);
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval_call(m->c, &k.send, &r);
  dlock__acq_call_free(&k);
  return dlock__acq_reply(rc, r, m->name, ttl);
}

static int plain_release(dlock_mutex *m, uint64_t tid,
                         const dlock__eng_unlock *u) {
  dlock_client *c = m->c;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, tid, field);
  if (atomic_load(&c->spin_fell_back)) /* no pub/sub: spin.c */
    return dlock__spin_release(m, tid, u, 1);
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, m->name, m->name_len, field, fl, u->lease,
                                u->expected, u->rid, dlock__publish_cmd(c));
  if (!rc && u->commit)
    dlock__rel_call_commit(&k, dlock__tombstone_ttl(&c->cfg));
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval_call(c, &k.send, &r);
  dlock__rel_call_free(&k);
  rc = dlock__rel_reply(rc, r);
  return rc < 0 && u->expected == 1 ? dlock__spin_unlock_refused(m, tid, rc)
                                    : rc;
}

static int plain_cancel(dlock_mutex *m, uint64_t tid, int64_t lease,
                        int64_t wait_ms, uint64_t *token,
                        const dlock__wait *w) {
  (void)wait_ms;
  (void)token;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(m->c, tid, field);
  dlock__acq_call k;
  int rc = dlock__cancel_call_init(&k, m->name, m->name_len, field, fl, lease,
                                   w, dlock__publish_cmd(m->c));
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval(m->c, dlock__core_script(DLOCK__S_CANCEL), 6, k.ckeys,
                     k.cklens, 4, k.cargs, k.calens, &r);
  dlock__acq_call_free(&k);
  long long v = 0;
  rc = dlock__take_int(rc, r, &v, NULL);
  return rc ? rc : v == 1;
}

static int plain_force(dlock_mutex *m) {
  if (atomic_load(&m->c->spin_fell_back)) /* no pub/sub: spin.c */
    return dlock__spin_force(m);
  dlock__sb ch, mk;
  dlock__sb_init(&ch);
  dlock__sb_init(&mk);
  dlock__prefix_name(&ch, "redisson_lock__channel", m->name);
  dlock__own_name(&mk, "dlock_lock_granted", m->name);
  const char *keys[3] = {m->name, ch.p, mk.p};
  size_t klens[3] = {m->name_len, ch.len, mk.len};
  const char *args[2] = {"0", dlock__publish_cmd(m->c)};
  redisReply *r = NULL;
  int rc =
      ch.oom || mk.oom
          ? dlock__fail(DLOCK_ENOMEM, "out of memory")
          : dlock__eval_once(m->c, dlock__core_script(DLOCK__S_FORCE_UNLOCK), 3,
                             keys, klens, 2, args, NULL, &r);
  dlock__sb_free(&ch);
  dlock__sb_free(&mk);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  return rc ? rc : (int)v;
}

const dlock__mutex_ops dlock__plain_ops = {"mutex",
                                           plain_attempt,
                                           plain_release,
                                           plain_cancel,
                                           plain_channels,
                                           plain_force,
                                           DLOCK__WAKE_LOCK,
                                           "",
                                           0,
                                           NULL,
                                           DLOCK__ENG_QUEUED_RECHECK_MS};

/* ---- objects --------------------------------------------------------------
 */

int dlock__mutex_create(dlock_client *c, const char *name,
                        const dlock__mutex_ops *ops, dlock_mutex **out) {
  dlock__clear_error();
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "lock name is NULL or empty");
  if ((rc = dlock__cluster_name_check(c, name, ops->kind_name)) != 0)
    return rc;
  size_t n = strlen(name);
  dlock_mutex *m = dlock__malloc(sizeof *m + n + 1);
  if (!m)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  m->c = c;
  m->ops = ops;
  m->name_len = n;
  memcpy(m->name, name, n + 1);
  if (c->store && (rc = c->store->kind_check(c, ops, name)) != 0) {
    free(m);
    return rc;
  }
  if ((rc = dlock__reg_attach(c, name, n, ops, &m->e)) != 0) {
    free(m);
    return rc;
  }
  if (c->store && (rc = c->store->mutex_attach(m)) != 0) {
    dlock__reg_detach(c, m->e);
    free(m);
    return rc;
  }
  dlock__client_ref(c);
  *out = m;
  return 0;
}

int dlock_mutex_new(dlock_client *c, const char *name, dlock_mutex **out) {
  return dlock__mutex_create(c, name, &dlock__plain_ops, out);
}

void dlock_mutex_free(dlock_mutex *m) {
  if (!m)
    return;
  /* In a fork child the registry's mutex may have been held by a parent
   * thread at fork time: leave it alone (the client's free releases it). */
  dlock_client *c = m->c;
  if (c->store && c->fork_gen == dlock__fork_gen())
    c->store->mutex_detach(m);
  if (c->fork_gen == dlock__fork_gen())
    dlock__reg_detach(c, m->e);
  free(m);
  dlock__client_unref(c);
}

const char *dlock_mutex_name(const dlock_mutex *m) { return m ? m->name : ""; }

int dlock_mutex_owner(const dlock_mutex *m, char *buf, size_t len) {
  dlock__clear_error();
  if (!m || !buf)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(m->c, dlock__tid(), field);
  if (len < fl + 1)
    return dlock__fail(DLOCK_EINVAL, "buffer too small (%zu bytes needed)",
                       fl + 1);
  memcpy(buf, field, fl + 1);
  return 0;
}

static dlock__hold *find_hold(dlock_mutex *m, uint64_t tid) {
  return dlock__hold_find(m->e, tid);
}

/* Forgets the thread's holds and frees the record (reg.mu held). */
static void drop_hold(dlock_client *c, dlock__hold *h) {
  dlock__eng_forget(h);
  dlock__wd_remove(c, h);
  dlock__hold_put(c, h);
}

/* ---- counters and log events of holds (stats.c, log.c) ---- */

/* A hold found gone on the server by this thread's own call (an unlock or
 * a reentrant acquire) before its local deadline, with no loss reported:
 * deleted or taken by someone else (force unlock, an operator's DEL). */
static void lost_found(dlock_client *c, const char *name, const char *by) {
  dlock__stat_add(&c->stats, DLOCK__ST_LOST_FORCED, 1);
  dlock__log(&c->cfg, DLOCK_LOG_ERROR, name, "lost",
             "lost: %s found this thread's hold gone before its lease ended "
             "(force-unlocked, deleted or taken by another client)",
             by);
}

/* A hold with a fixed lease whose local deadline passed before its unlock
 * (or the thread's next acquire of it): the lease ended it. */
static void lost_expired(dlock_client *c, const char *name) {
  dlock__stat_add(&c->stats, DLOCK__ST_LOST_EXPIRED, 1);
  dlock__log(&c->cfg, DLOCK_LOG_WARN, name, "expired",
             "expired: the hold's lease ran out before it was unlocked");
}

/* Records a successful acquisition (takes reg.mu). sent = monotonic time
 * the acquiring command (or the confirmation of a hand-over) was sent: the
 * key's TTL started after it, so sent + lease - margin is a local deadline
 * the server's expiry cannot precede. */
static int record_hold(dlock_mutex *m, uint64_t tid, int target, int wd,
                       int64_t lease, int64_t sent, uint64_t token) {
  dlock_client *c = m->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_get(m->e, tid);
  if (!h) {
    dlock__mu_unlock(&c->reg.mu);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (h->count == 0 && tid == dlock__tid())
    dlock__thread_note(c); /* thread exit: see holds.c */
  dlock__info_want(c);     /* a holder says who it is: clientinfo.c */
  if (h->count == 0)
    dlock__info_since_later(c); /* ... and since when, if it lasts */
  int gone = dlock__eng_reenter_answer(h, target - 1, dlock__now_ms());
  if (gone) { /* lost while the re-entry was in flight: nothing revived */
    if (gone == DLOCK__ENG_RAN_OUT)
      lost_expired(c, m->name);
    drop_hold(c, h);
    dlock__mu_unlock(&c->reg.mu);
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': the hold was %s while this reentrant "
                       "acquire was in flight",
                       m->name,
                       gone == DLOCK__ENG_RAN_OUT ? "out of lease" : "lost");
  }
  dlock__hold_note(h, target, wd, lease, sent, token);
  if (wd)
    dlock__wd_add(c, h);
  dlock__mu_unlock(&c->reg.mu);
  return 0;
}

int dlock__mutex_local_count(dlock_mutex *m) {
  dlock_client *c = m->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int n = h && !h->lost ? h->count : 0;
  dlock__mu_unlock(&c->reg.mu);
  return n;
}

/* One acquire call: what its steps share. */
typedef struct acq {
  dlock_mutex *m;
  dlock_client *c;
  uint64_t tid;
  int wd;        /* taken with the watchdog */
  int64_t lease; /* ms */
  int prior;     /* the thread's hold count before the call */
  dlock__budget b;
  /* The wait: its state and its sequence are the engine's wait machine
   * (engine/waitm.h); this driver sends what it says and sleeps. */
  dlock__wm wm;
  int64_t ttl;    /* the holder's PTTL from the last attempt; -1 unknown */
  uint64_t token; /* fenced locks */
  int64_t sent;   /* send time of the attempt that decides the hold */
  dlock__slot slot;
  dlock__sub *sub;    /* joined wait entry, or NULL */
  char away_why[512]; /* the message of the passing failure ridden out */
  /* An attempt whose outcome is unknown and that may have been sent: its
   * request is committed after the call's next answer ("" none). */
  char owed[33];
} acq;

/* "lock 'name'" for messages. */
static const char *lock_what(const dlock_mutex *m, char *buf, size_t n) {
  snprintf(buf, n, "lock '%.250s'", m->name);
  return buf;
}

/* Why a spinning wait must end now (the budget's verdict, worded), or 0. */
static int wait_over(const acq *a) {
  char what[300];
  int rc = dlock__budget_over(&a->b, lock_what(a->m, what, sizeof what));
  if (rc == DLOCK_ETIMEDOUT && a->wm.away)
    return dlock__fail(a->wm.away_rc,
                       "%s (lock '%s': still so when the wait of %lld "
                       "ms ended)",
                       a->away_why, a->m->name, a->b.wait_ms);
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "lock '%s' still held elsewhere after %lld ms",
                       a->m->name, a->b.wait_ms);
  return rc;
}

static int settle(dlock_mutex *m, uint64_t tid, const char *op);

/* Checks the call and the thread's existing hold; fills a. b: the call's
 * budget, started here when b->c is NULL (the first try of the call), else
 * carried on (a retry after DLOCK_ENOSYNC spends what is left of it). 0 or
 * a code. */
static int acq_begin(acq *a, dlock_mutex *m, long long wait_ms,
                     long long lease_ms, dlock__budget *b) {
  if (!m) { /* the code spelt out: the analyzer cannot see dlock__fail's */
    (void)dlock__fail(DLOCK_EINVAL, "mutex is NULL");
    return DLOCK_EINVAL;
  }
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc || (rc = dlock__check_lease(lease_ms, "lock", m->name)) != 0)
    return rc;
  memset(a, 0, sizeof *a);
  a->m = m;
  a->c = c;
  a->tid = dlock__tid();
  a->wd = lease_ms <= 0;
  a->lease = a->wd ? c->cfg.watchdog_timeout_ms : lease_ms;
  a->ttl = -1;
  if (b->c) {
    a->b = *b;
  } else {
    dlock__budget_start(&a->b, c, wait_ms);
    *b = a->b;
  }
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, a->tid);
  int gone = dlock__eng_reenter(h, a->b.started, &a->prior);
  if (gone == DLOCK__ENG_SETTLE) {
    /* A release of this hold is pending (its outcome unknown): nothing is
     * built on the count it may have changed until its committing copy
     * answered (safety round 4, issue 38.2). */
    dlock__mu_unlock(&c->reg.mu);
    if ((rc = settle(m, a->tid, "lock")) != 0)
      return rc;
    dlock__mu_lock(&c->reg.mu);
    h = find_hold(m, a->tid);
    gone = dlock__eng_reenter(h, a->b.started, &a->prior);
  }
  if (gone == DLOCK__ENG_SETTLE) { /* settled, and pending again: cannot be */
    dlock__mu_unlock(&c->reg.mu);
    dlock__never("a settled release is pending again");
  }
  if (gone) {
    int was_lost = gone == DLOCK__ENG_RAN_OUT ? 0 : gone;
    if (!was_lost)
      lost_expired(c, m->name);
    drop_hold(c, h);
    dlock__mu_unlock(&c->reg.mu);
    if (was_lost)
      return dlock__fail(DLOCK_ELOST,
                         "lock '%s': this thread's hold was lost: %s", m->name,
                         dlock__lost_why(was_lost));
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': this thread's hold ran out of lease (its "
                       "local deadline passed)",
                       m->name);
  }
  dlock__mu_unlock(&c->reg.mu);
  /* A timed first hold rides out a server that is away (a failover),
   * attempting again after retry_interval_ms (at least 10 ms). */
  int64_t ride = c->cfg.retry_interval_ms > 10 ? c->cfg.retry_interval_ms : 10;
  dlock__wm_init(&a->wm, wait_ms, a->b.deadline, a->prior, m->ops->max_sleep_ms,
                 m->ops->queue_first, ride);
  a->slot.wait_id = a->wm.w.id;
  return 0;
}

/* One unlock call: the engine's view of it (request id, expected count,
 * send time) and the record. */
typedef struct rel {
  dlock__hold *h;
  dlock__eng_unlock u;
} rel;

/* Finds the thread's hold and prepares the unlock (reg.mu held). 0 or a
 * code (the hold is not there, or was lost: then it is dropped). */
static int rel_begin(dlock_mutex *m, uint64_t tid, rel *r) {
  dlock_client *c = m->c;
  dlock__hold *h = find_hold(m, tid);
  int rc = dlock__eng_unlock_begin(h, dlock__now_ms(),
                                   c->cfg.watchdog_timeout_ms, &r->u);
  if (rc == DLOCK__ENG_SETTLE)
    return rc; /* another release is pending: the caller settles it */
  if (rc == DLOCK_EPERM)
    return dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                       m->name);
  if (rc == DLOCK_ELOST) {
    int why = h->lost;
    drop_hold(c, h);
    return dlock__fail(DLOCK_ELOST, "lock '%s' was lost while held: %s",
                       m->name, dlock__lost_why(why));
  }
  r->h = h;
  return 0;
}

/* Records the outcome rc of the release script (reg.mu held); sends = how
 * often the router sent it. Returns the call's answer (the engine's
 * dlock__eng_unlock_end): rc itself for an unknown outcome (the record
 * stays, and remembers that an unlock at this count may have run),
 * DLOCK_ELOST (message set) when the hold was not ours any more, or 0. */
static int rel_end(dlock_mutex *m, rel *r, int rc, int sends) {
  dlock_client *c = m->c;
  dlock__hold *h = r->h;
  int reported = h->lost; /* counted and logged when it was reported */
  dlock__eng_rel_out o =
      dlock__eng_unlock_end(h, &r->u, rc, sends > 1, dlock__now_ms());
  if (o.action == DLOCK__ENG_REL_FORGET && !reported) {
    if (o.ran_out)
      lost_expired(c, m->name);
    else if (o.rc == DLOCK_ELOST)
      lost_found(c, m->name, "the unlock");
    else
      dlock__stat_add(&c->stats, DLOCK__ST_RELEASED, 1);
  }
  if (o.action == DLOCK__ENG_REL_PUT)
    dlock__hold_put(c, h);
  else if (o.action == DLOCK__ENG_REL_FORGET)
    drop_hold(c, h);
  else if (o.action == DLOCK__ENG_REL_ONE && dlock__hold_drop_one(h))
    dlock__wd_remove(c, h);
  char why[DLOCK__ENG_WHY_LEN];
  if (o.rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST, "%s",
                       dlock__eng_lost_why(&o, m->name, why, sizeof why));
  return o.rc;
}

/* Commits acquire attempt rid of lock m (its tombstone written): a copy of
 * it sent before may still arrive. Best effort: an acquire copy that acts
 * late can at worst re-create the key for one lease (availability), never
 * make a second holder nor shorten a TTL (the scripts only extend and
 * raise). */
static void commit_attempt(dlock_mutex *m, const char *rid) {
  dlock__sb key;
  dlock__sb_init(&key);
  dlock__req_tomb_key(&key, m->name, rid);
  dlock__err_keep_begin();
  if (!key.oom && dlock__commit_tomb(m->c, key.p, key.len) != 0)
    dlock__log(&m->c->cfg, DLOCK_LOG_WARN, m->name, "commit_failed",
               "an acquire attempt sent more than once could not be "
               "committed (%s): a late copy of it may still re-create the "
               "key for one lease",
               dlock_last_error());
  dlock__err_keep_end();
  dlock__sb_free(&key);
}

/* The rule of request binding for an acquire attempt (docs/guarantees.md,
 * "Rules"): answered after more than one send -> committed now; an unknown
 * outcome that may have been sent -> owed, committed after the call's next
 * answer (the server answers again by then). */
static void attempt_commit(acq *a, int rc, int sends) {
  if (!dlock__eng_answered(rc)) {
    if (sends > 0)
      memcpy(a->owed, a->wm.w.rid, sizeof a->owed);
    return;
  }
  if (sends > 1)
    commit_attempt(a->m, a->wm.w.rid);
  if (a->owed[0]) {
    commit_attempt(a->m, a->owed);
    a->owed[0] = '\0';
  }
}

/* Settles the pending release of (m, tid): sends its committing copy and
 * applies the answer to the record. 0 when settled (whatever it found),
 * else the failure (the release stays pending), worded for `op`. */
static int settle(dlock_mutex *m, uint64_t tid, const char *op) {
  dlock_client *c = m->c;
  dlock__eng_unlock u;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, tid);
  if (!h || !h->unlock_pending) {
    dlock__mu_unlock(&c->reg.mu);
    return 0;
  }
  dlock__eng_settle_begin(h, &u);
  dlock__mu_unlock(&c->reg.mu);
  dlock__err_keep_begin();
  int rc = m->ops->release(m, tid, &u);
  dlock__err_keep_end();
  char why[300];
  snprintf(why, sizeof why, "%s", dlock_last_error());
  rel r = {h, u};
  dlock__mu_lock(&c->reg.mu);
  (void)rel_end(m, &r, rc, 2);
  rc = dlock__eng_settle_end(find_hold(m, tid), rc);
  dlock__mu_unlock(&c->reg.mu);
  if (rc == 0)
    return 0;
  return dlock__fail(rc,
                     "%s '%s': an earlier unlock of this hold has an unknown "
                     "outcome and could not be settled (%s); nothing was "
                     "sent for this %s",
                     op, m->name, why, op);
}

/* One attempt (target = the hold count after it; queue = join the
 * server's wait queue if the lock is taken) with the request id the wait
 * machine drew for it. 1 held, 0 taken, < 0. */
static int attempt(acq *a, int target, int queue) {
  int64_t left = a->b.wait_ms == 0 ? 0 : dlock__budget_left(&a->b);
  a->sent = dlock__now_ms();
  int rc = a->m->ops->attempt(a->m, a->tid, target, a->lease, queue, left,
                              &a->ttl, &a->token, &a->wm.w);
  attempt_commit(a, rc, dlock__exec_sends());
  return rc;
}

/* Before the first attempt: when this client is already subscribed to the
 * lock (other local waiters, or a lingering subscription), the call
 * registers as a waiter first and joins the server's queue with that very
 * attempt. 1 joined. */
static int join_early(acq *a) {
  dlock_mutex *m = a->m;
  if (a->b.wait_ms == 0 || dlock__spins(m) ||
      atomic_load_explicit(&a->c->ps.n_subs, memory_order_relaxed) == 0)
    return 0;
  dlock__sb ch, gr;
  dlock__sb_init(&ch);
  dlock__sb_init(&gr);
  m->ops->channels(m, a->tid, &ch, &gr);
  int joined = !ch.oom && !gr.oom &&
               dlock__sub_join_active(a->c, ch.p, &a->slot, &a->sub);
  dlock__sb_free(&ch);
  dlock__sb_free(&gr);
  return joined;
}

/* SUBSCRIBE: joins the lock's subscription entry; the machine's event: 1
 * active, 0 confirmation to come, or the failure. */
static int subscribe(acq *a) {
  /* A waiter says who it is (clientinfo.c) -- from here, not from the
   * first attempt: a call that never waits nor holds (a failed trylock,
   * an acquisition undone for DLOCK_ENOSYNC) leaves no info key behind. */
  dlock__mu_lock(&a->c->reg.mu);
  dlock__info_want(a->c);
  dlock__mu_unlock(&a->c->reg.mu);
  if (a->sub)
    return a->wm.active;
  dlock__sb ch, gr;
  dlock__sb_init(&ch);
  dlock__sb_init(&gr);
  a->m->ops->channels(a->m, a->tid, &ch, &gr);
  int active = 0;
  int rc = ch.oom || gr.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                            : dlock__sub_join(a->c, ch.p, gr.len ? gr.p : NULL,
                                              a->m->ops->wake_policy, &a->slot,
                                              &a->sub, &active);
  dlock__sb_free(&ch);
  dlock__sb_free(&gr);
  return rc ? rc : active;
}

/* One try of a wait without pub/sub (dlock__spin_wait, spin.c): never
 * queued (nobody hands the lock over). 1 held, 0 go on, or a code. */
static int spin_round(void *arg) {
  acq *a = arg;
  if (atomic_load(&a->c->closing) || dlock__budget_canceled(&a->b))
    return wait_over(a);
  dlock__request_id(a->wm.w.rid); /* this attempt's: its copies are bound */
  int rc = attempt(a, 1, 0);
  if (rc == 1)
    return rc;
  /* the wait machine's riding-out rule: until the budget ends */
  if (dlock__wm_ride(&a->wm, rc,
                     rc < 0 && dlock__wm_passing(rc, dlock_last_error())))
    snprintf(a->away_why, sizeof a->away_why, "%s", dlock_last_error());
  else if (rc < 0)
    return rc;
  return wait_over(a);
}

/* A wait without pub/sub, from its second attempt (a spinning kind, or
 * one whose SUBSCRIBE was refused: dlock__spin_fall_back). 1 held, or the
 * code it ends with. */
static int spin(acq *a) {
  if (a->sub)
    dlock__sub_leave(a->c, a->sub, &a->slot);
  a->sub = NULL;
  return dlock__spin_wait(&a->b, spin_round, a);
}

/* The call was cancelled or the client closes (the budget's verdict,
 * worded), or 0; its deadline is the machine's. */
static int stopped(const acq *a) {
  char what[300];
  int rc = dlock__budget_over(&a->b, lock_what(a->m, what, sizeof what));
  return rc == DLOCK_ETIMEDOUT ? 0 : rc;
}

/* SLEEP: until a wake-up, `until` or a stop; what ended it is the
 * machine's next event. A kind whose SUBSCRIBE was refused spins instead
 * (dlock__spin_fall_back): HELD, or its end as a stop. */
static dlock__wm_act sleep_step(acq *a, int64_t until) {
  int rc = stopped(a);
  int granted = 0, active = a->wm.active;
  if (rc == 0)
    dlock__sub_wait(a->c, a->sub, &a->slot, until, &granted, &active);
  if (rc == 0 && a->slot.failed) {
    char what[300];
    rc = dlock__sub_error(a->c, a->sub, lock_what(a->m, what, sizeof what));
    if (rc == DLOCK_EAUTH && dlock__spin_fall_back(a->m)) {
      rc = spin(a); /* SUBSCRIBE refused: the spin lock's waits */
      if (rc == 1)
        return (dlock__wm_act){.kind = DLOCK__WMA_HELD};
      return dlock__wm_stop(&a->wm, rc, dlock__now_ms());
    }
    return dlock__wm_sub_lost(&a->wm, rc, dlock__now_ms());
  }
  if (rc == 0)
    rc = stopped(a);
  if (rc)
    return dlock__wm_stop(&a->wm, rc, dlock__now_ms());
  return dlock__wm_wake(&a->wm, granted, active, dlock__now_ms());
}

/* The attempt the machine asked for, and its answer as the next event. */
static dlock__wm_act attempt_step(acq *a, const dlock__wm_act *x) {
  int rc = attempt(a, x->target, x->queue);
  int passing = rc < 0 && dlock__wm_passing(rc, dlock_last_error());
  if (passing)
    snprintf(a->away_why, sizeof a->away_why, "%s", dlock_last_error());
  return dlock__wm_answer(&a->wm, rc, a->ttl, passing, dlock__now_ms());
}

/* CANCEL: leaves the server's queue (the cancel script may pass a free
 * lock on, or find the lock handed to this wait: the machine confirms it).
 * The call's own error stays the one reported. */
static dlock__wm_act cancel_step(acq *a) {
  if (!a->m->ops->cancel) /* a kind whose scripts keep no queue */
    return dlock__wm_cancel_answer(&a->wm, 0);
  dlock__err_keep_begin();
  int cr = a->m->ops->cancel(a->m, a->tid, a->lease, dlock__budget_left(&a->b),
                             &a->token, &a->wm.w);
  dlock__err_keep_end();
  return dlock__wm_cancel_answer(&a->wm, cr);
}

/* The code a wait ended with (END), worded where the machine decided it;
 * an attempt's, the subscription's or a stop's message was set when it
 * happened (kept through the cancel). */
static int end_code(const acq *a, const dlock__wm_act *x) {
  switch (x->why) {
  case DLOCK__WMW_BUSY:
    return dlock__fail(DLOCK_EBUSY, "lock '%s' is held elsewhere", a->m->name);
  case DLOCK__WMW_TIMED_OUT:
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "lock '%s' still held elsewhere after %lld ms",
                       a->m->name, a->b.wait_ms);
  case DLOCK__WMW_AWAY:
    return dlock__fail(x->rc,
                       "%s (lock '%s': still so when the wait of %lld ms "
                       "ended)",
                       a->away_why, a->m->name, a->b.wait_ms);
  default:
    return x->rc;
  }
}

/* Drives the wait machine from the calling thread: sends what it says,
 * sleeps on the subscription slot, feeds back each answer and wake-up.
 * 1 held, or the code the wait ended with. */
static int drive(acq *a) {
  void *note = NULL; /* the info key's wait entry, once the call waits */
  dlock__wm_act x = dlock__wm_start(&a->wm, join_early(a), dlock__now_ms());
  int rc = 0;
  for (;;) {
    if (x.kind == DLOCK__WMA_ATTEMPT) {
      x = attempt_step(a, &x);
    } else if (x.kind == DLOCK__WMA_SUBSCRIBE) {
      if (!note)
        note = dlock__note_wait(a->c, a->m->name, a->tid);
      if (dlock__spins(a->m)) {
        rc = spin(a);
        break;
      }
      int r = subscribe(a);
      x = dlock__wm_subscribed(&a->wm, r, dlock__now_ms());
    } else if (x.kind == DLOCK__WMA_SLEEP) {
      x = sleep_step(a, x.until);
    } else if (x.kind == DLOCK__WMA_CANCEL) {
      x = cancel_step(a);
    } else {
      rc = x.kind == DLOCK__WMA_HELD ? 1 : end_code(a, &x);
      break;
    }
  }
  if (note) {
    char what[300];
    rc = dlock__budget_end(&a->b, rc, lock_what(a->m, what, sizeof what));
    dlock__note_wait_end(a->c, note);
  }
  return rc;
}

/* Gives back the acquisition a just made (the count goes back to prior, or
 * the key goes), bound to it like any release: its copies are committed,
 * and an unknown outcome stays pending -- the retry, or the thread's next
 * call, settles it before anything is built on the count (safety round 4,
 * issue 38.4: the late copy of an undo released the retried acquisition).
 * 1 when the server answered it, 0 when its outcome is unknown. The
 * thread's error message is kept. */
static int undo_acquisition(acq *a) {
  dlock_client *c = a->c;
  dlock__err_keep_begin();
  dlock__sync_pause(1);
  rel r;
  memset(&r, 0, sizeof r);
  dlock__mu_lock(&c->reg.mu);
  r.h = dlock__hold_get(a->m->e, a->tid);
  if (r.h)
    dlock__eng_undo_begin(r.h, a->prior, a->prior > 0 ? -a->lease : a->lease,
                          dlock__now_ms(), &r.u);
  dlock__mu_unlock(&c->reg.mu);
  int rc = r.h ? a->m->ops->release(a->m, a->tid, &r.u)
               : dlock__fail(DLOCK_ENOMEM, "out of memory");
  int sends = dlock__exec_sends();
  if (r.h && dlock__eng_commit_due(&r.u, rc, sends) &&
      rel_commit(c, a->m->name, r.u.rid) != 0)
    rc = DLOCK_ECONN; /* a copy may still act: pending */
  int undone = dlock__eng_answered(rc);
  if (r.h) {
    dlock__mu_lock(&c->reg.mu);
    rel_end(a->m, &r, rc, sends);
    dlock__mu_unlock(&c->reg.mu);
  }
  dlock__sync_pause(0);
  dlock__err_keep_end();
  return undone;
}

static const char *const undo_unknown =
    " (the undo's outcome is unknown: the thread's next call on the lock "
    "settles it; else the lease ends it)";

/* The acquisition a just made was not confirmed by the replicas (sync.c):
 * gives it back (undo_acquisition). Returns DLOCK_ENOSYNC. */
static int undo_unsynced(acq *a, const char *why) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s", why);
  int undone = undo_acquisition(a);
  dlock__stat_add(&a->c->stats, DLOCK__ST_ENOSYNC, 1);
  dlock__log(&a->c->cfg, DLOCK_LOG_WARN, a->m->name, "enosync",
             "acquisition undone: %s", msg);
  return dlock__fail(DLOCK_ENOSYNC,
                     "lock '%s': %s; the acquisition was undone%s", a->m->name,
                     msg, undone ? "" : undo_unknown);
}

/* A first hold answered past its local deadline (dlock__eng_in_time): it
 * may be over on the server already, with another holder -- no hold. Gives
 * it back; DLOCK__ENG_LATE (the message says why) for acquire() to try
 * again within the budget, or end with DLOCK_ELOST. */
static int late_answer(acq *a) {
  int64_t took = dlock__now_ms() - a->sent;
  int undone = undo_acquisition(a);
  dlock__log(&a->c->cfg, DLOCK_LOG_WARN, a->m->name, "late_answer",
             "an acquisition answered %lld ms after its send, past its lease "
             "of %lld ms: given back",
             (long long)took, (long long)a->lease);
  (void)dlock__fail(DLOCK_ELOST,
                    "lock '%s': acquired, but the answer came %lld ms after "
                    "the send, past the lease of %lld ms (it may have ended "
                    "on the server, and another owner may hold the lock): "
                    "given back%s",
                    a->m->name, (long long)took, (long long)a->lease,
                    undone ? "" : undo_unknown);
  return DLOCK__ENG_LATE;
}

/* A successful acquire call (its hold recorded). */
static void count_acquired(const acq *a) {
  dlock__stats *s = &a->c->stats;
  if (a->prior > 0) {
    dlock__stat_add(s, DLOCK__ST_REENTERED, 1);
    return;
  }
  int64_t waited =
      dlock__stat_acquired(s, a->wm.handover, a->wm.waited, a->b.started);
  if (dlock__log_on(&a->c->cfg, DLOCK_LOG_DEBUG))
    dlock__log(
        &a->c->cfg, DLOCK_LOG_DEBUG, a->m->name, "acquired",
        "acquired %s%s (lease %lld ms%s, waited %lld ms)",
        a->wm.handover ? "by hand-over" : "directly",
        a->m->ops->field_suffix && a->m->ops->field_suffix[0] ? " (write)" : "",
        (long long)a->lease, a->wd ? ", watchdog" : "", (long long)waited);
}

static int acquire_once(dlock_mutex *m, long long wait_ms, long long lease_ms,
                        dlock__budget *b) {
  acq a;
  memset(&a, 0, sizeof a);
  int rc = acq_begin(&a, m, wait_ms, lease_ms, b);
  if (rc)
    return rc;
  /* The wait machine sequences the call (attempt, subscribe, sleep, wake,
   * cancel, confirm): on every end while it may be queued it leaves the
   * queue, so the lock is never handed to a thread not waiting. */
  rc = drive(&a);
  if (a.sub)
    dlock__sub_leave(a.c, a.sub, &a.slot);
  if (rc == DLOCK_ELOST) {
    dlock__mu_lock(&a.c->reg.mu);
    dlock__hold *h = find_hold(m, a.tid);
    if (h && h->count > 0 && !h->lost)
      lost_found(a.c, m->name, "a reentrant acquire");
    if (h)
      drop_hold(a.c, h);
    dlock__mu_unlock(&a.c->reg.mu);
    return rc;
  }
  const char *why = NULL;
  if (rc == 1 && dlock__sync_short(&why))
    return undo_unsynced(&a, why);
  if (rc == 1 && a.prior == 0 &&
      !dlock__eng_in_time(a.sent, a.lease, dlock__now_ms()))
    return late_answer(&a);
  if (rc == 1 && (rc = record_hold(m, a.tid, a.prior + 1, a.wd, a.lease, a.sent,
                                   a.token)) == 0)
    count_acquired(&a);
  return rc;
}

/* An acquisition the replicas did not confirm (DLOCK_ENOSYNC, undone) is
 * tried again under the retry policy, as Redisson does -- within the
 * call's wait budget: a trylock (wait_ms 0) is one attempt, a timed call
 * tries again only while its budget outlasts the pause (each try spends
 * what is left of it), a call that waits for ever has the whole policy. */
static int check_mutex(dlock_mutex *m);

static int acquire(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  if (!m)
    return check_mutex(m); /* DLOCK_EINVAL */
  if (m->c->store)         /* the etcd store: etcd_lock.c */
    return m->c->store->acquire(m, wait_ms, lease_ms);
  dlock__budget b;
  b.c = NULL; /* started by the first try */
  int64_t prev = 0;
  for (int i = 0;; i++) {
    int rc = acquire_once(m, wait_ms, lease_ms, &b);
    if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED)
      dlock__stat_add(
          &m->c->stats,
          rc == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
    if (rc == 0)
      dlock__clear_error(); /* not the text of an undone earlier try */
    if (rc == DLOCK__ENG_LATE) {
      /* an acquisition answered too late, given back: the wait goes on
       * while its budget lasts (a try-lock ends) */
      if (wait_ms == 0 || (wait_ms > 0 && dlock__budget_left(&b) <= 0) ||
          dlock__budget_canceled(&b) || atomic_load(&m->c->closing))
        return DLOCK_ELOST;
      i--;
      continue;
    }
    if (rc != DLOCK_ENOSYNC)
      return rc;
    /* The engine's rule (dlock__eng_sync_retry), the async client's too. */
    int64_t pause = dlock__retry_pause(&m->c->cfg, i, &prev);
    if (!dlock__eng_sync_retry(i, m->c->cfg.retry_attempts, wait_ms,
                               wait_ms > 0 ? dlock__budget_left(&b) : 0,
                               pause) ||
        dlock__budget_canceled(&b) || atomic_load(&m->c->closing))
      return rc;
    dlock__sleep_ms(pause);
  }
}

int dlock__mutex_acquire(dlock_mutex *m, long long wait_ms,
                         long long lease_ms) {
  return acquire(m, wait_ms, lease_ms);
}

int dlock_mutex_lock(dlock_mutex *m) {
  dlock__clear_error();
  return acquire(m, -1, -1);
}

int dlock_mutex_trylock(dlock_mutex *m) {
  dlock__clear_error();
  return acquire(m, 0, -1);
}

int dlock_mutex_timedlock(dlock_mutex *m, long long wait_ms,
                          long long lease_ms) {
  dlock__clear_error();
  return acquire(m, wait_ms, lease_ms);
}

int dlock_mutex_unlock(dlock_mutex *m) {
  dlock__clear_error();
  return dlock__mutex_release(m);
}

int dlock__mutex_release(dlock_mutex *m) {
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  if (m->c->store)
    return m->c->store->release(m);
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  const uint64_t tid = dlock__tid();
  rel r;
  memset(&r, 0, sizeof r);
  dlock__mu_lock(&c->reg.mu);
  rc = rel_begin(m, tid, &r);
  dlock__mu_unlock(&c->reg.mu);
  if (rc == DLOCK__ENG_SETTLE) { /* another release of the hold first */
    if ((rc = settle(m, tid, "unlock")) != 0)
      return rc;
    dlock__mu_lock(&c->reg.mu);
    rc = rel_begin(m, tid, &r);
    dlock__mu_unlock(&c->reg.mu);
    if (rc == DLOCK__ENG_SETTLE)
      dlock__never("a settled release is pending again");
  }
  if (rc)
    return rc;
  rc = m->ops->release(m, tid, &r.u);
  int sends = dlock__exec_sends();
  /* Sent more than once and answered: a copy may still be on its way --
   * the release counts once it is committed (its tombstone confirmed);
   * until then it stays pending (safety round 4, issue 38.3). */
  if (dlock__eng_commit_due(&r.u, rc, sends)) {
    int cr = rel_commit(c, m->name, r.u.rid);
    if (cr)
      rc = dlock__fail(cr,
                       "lock '%s': the unlock ran, but a copy of it sent "
                       "earlier may still arrive and its tombstone could not "
                       "be written (%.200s): the outcome counts as unknown "
                       "-- retry the unlock",
                       m->name, dlock_last_error());
  }
  dlock__mu_lock(&c->reg.mu);
  rc = rel_end(m, &r, rc, sends);
  dlock__mu_unlock(&c->reg.mu);
  return rc;
}

/* The prologue of a public call on m: clears the error, checks m and its
 * client. */
static int check_mutex(dlock_mutex *m) {
  dlock__clear_error();
  if (!m) {
    (void)dlock__fail(DLOCK_EINVAL, "mutex is NULL");
    return DLOCK_EINVAL; /* a literal: the analyzer sees no way on */
  }
  return dlock__client_check(m->c);
}

int dlock_mutex_force_unlock(dlock_mutex *m) {
  int rc = check_mutex(m);
  if (rc == 0 && m->c->store)
    return m->c->store->force_unlock(m);
  return rc ? rc : m->ops->force(m);
}

/* Runs a one-key command and returns its integer reply (or -2 for nil). */
static int simple_int(dlock_mutex *m, const char *verb, const char *arg,
                      size_t alen, long long *v) {
  int rc = check_mutex(m);
  if (rc)
    return rc;
  const char *argv[3] = {verb, m->name, arg};
  size_t lens[3] = {strlen(verb), m->name_len, alen};
  dlock__cmd cmd = {m->name, NULL, arg ? 3 : 2, argv, lens, 0};
  redisReply *r = NULL;
  if ((rc = dlock__exec(m->c, &cmd, &r)) != 0 || !r)
    return rc ? rc : DLOCK_EPROTO;
  if (r->type == REDIS_REPLY_NIL) {
    *v = 0;
    rc = 0;
  } else {
    rc = dlock__reply_int(r, v);
  }
  freeReplyObject(r);
  return rc;
}

int dlock_mutex_is_locked(dlock_mutex *m) {
  int rc = check_mutex(m);
  if (rc)
    return rc;
  if (m->c->store)
    return m->c->store->is_locked(m);
  /* TYPE, not EXISTS: a key of another type under the name is not a lock,
   * and saying "locked" would hide the mistake. */
  const char *argv[2] = {"TYPE", m->name};
  size_t lens[2] = {4, m->name_len};
  dlock__cmd cmd = {m->name, NULL, 2, argv, lens, 0};
  redisReply *r = NULL;
  if ((rc = dlock__exec(m->c, &cmd, &r)) != 0 || !r)
    return rc ? rc : DLOCK_EPROTO;
  if (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING)
    rc = dlock__fail(DLOCK_EPROTO, "TYPE: unexpected reply");
  else if (strcmp(r->str, "hash") == 0)
    rc = 1;
  else if (strcmp(r->str, "none") == 0)
    rc = 0;
  else
    rc = dlock__fail(DLOCK_EREDIS,
                     "WRONGTYPE '%s' is a %s, not a lock (wrong name?)",
                     m->name, r->str);
  freeReplyObject(r);
  return rc;
}

/* The calling thread's local view of its hold on m: -1 no record, 0 the
 * record says it is lost or past its local deadline, 1 valid. */
static int local_state(dlock_mutex *m, int64_t *left) {
  dlock_client *c = m->c;
  int64_t now = dlock__now_ms();
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int st = !h || h->count == 0 ? -1 : dlock__eng_valid(h, now);
  if (left)
    *left = st == 1 ? h->valid_until - now : 0;
  dlock__mu_unlock(&c->reg.mu);
  return st;
}

int dlock_mutex_is_held(dlock_mutex *m) {
  char field[DLOCK__FIELD_MAX];
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  int rc = dlock__client_check(m->c);
  if (rc)
    return rc;
  /* A hold past its local deadline is not held, whatever Redis would say:
   * another client may own the key already, or will any moment. */
  int st = local_state(m, NULL);
  if (st == 0)
    return 0;
  if (m->c->store)
    return m->c->store->is_held(m);
  size_t fl = dlock__field(m->c, dlock__tid(), field);
  const char *sfx = m->ops->field_suffix ? m->ops->field_suffix : "";
  size_t sl = strlen(sfx);
  memcpy(field + fl, sfx, sl + 1);
  long long v = 0;
  rc = simple_int(m, "HEXISTS", field, fl + sl, &v);
  if (rc == DLOCK_ECONN && st == 1) {
    /* Redis cannot be asked; the local deadline has not passed, so the
     * key cannot have expired yet: held. */
    dlock__clear_error();
    return 1;
  }
  return rc ? rc : v > 0;
}

int dlock_mutex_validity(dlock_mutex *m, long long *ms) {
  dlock__clear_error();
  if (ms)
    *ms = 0;
  if (!m || !ms)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  int rc = dlock__client_check(m->c);
  if (rc)
    return rc;
  int64_t left = 0;
  int st = local_state(m, &left);
  if (st < 0)
    return dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                       m->name);
  *ms = left;
  if (st == 0)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': this thread's hold is lost or past its "
                       "local deadline",
                       m->name);
  return 0;
}

int dlock_mutex_hold_count(dlock_mutex *m) {
  char field[DLOCK__FIELD_MAX];
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  if (m->c->store) {
    int rc = check_mutex(m);
    return rc ? rc : m->c->store->hold_count(m);
  }
  size_t fl = dlock__field(m->c, dlock__tid(), field);
  long long v = 0;
  int rc = simple_int(m, "HGET", field, fl, &v);
  return rc ? rc : (int)v;
}

int dlock_mutex_ttl(dlock_mutex *m, long long *ttl_ms) {
  if (!ttl_ms)
    return dlock__fail(DLOCK_EINVAL, "ttl_ms is NULL");
  if (m && m->c->store) {
    int rc = check_mutex(m);
    return rc ? rc : m->c->store->ttl(m, ttl_ms);
  }
  return simple_int(m, "PTTL", NULL, 0, ttl_ms);
}

int dlock_mutex_token(dlock_mutex *m, uint64_t *token) {
  dlock__clear_error();
  if (!m || !token)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (m->ops != &dlock__fenced_ops)
    return dlock__fail(DLOCK_ENOTSUP, "lock '%s' is not a fenced mutex",
                       m->name);
  dlock_client *c = m->c;
  dlock__mu_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int held = h && h->count > 0;
  if (held)
    *token = h->token;
  dlock__mu_unlock(&c->reg.mu);
  return held ? 0
              : dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                            m->name);
}
