/*
 * async_lock.c -- dlock_async_lock and dlock_async_unlock: the calls, the
 * hold records of (name, owner), and the completions that run the callers'
 * callbacks.
 *
 * A call is the blocking mutex's acquire or release (mutex.c) cut into
 * steps that run from the loop. The scripts and their arguments are the
 * blocking mutex's (dlock__acq_call / dlock__rel_call), with the field
 * "<client id>:<owner>": an owner is what a thread is to the blocking
 * client.
 *
 * LOCK: one attempt. Taken elsewhere and allowed to wait: join the
 * subscription of the lock's channels (async_sub.c); once it is confirmed,
 * attempt again, joining the server's hand-over queue in the same script
 * call; then wait for a wake-up -- the unlock's grant for this wait (the
 * lock is ours: one more attempt confirms it and gives the hold a local
 * deadline from its send time), a "0" (free: attempt), the holder's TTL
 * (pub/sub is at most once: attempt), the deadline (leave the queue; if
 * the lock was handed to us meanwhile, keep it). What each answer means is
 * the engine's (engine.h (f)), and the order of the steps is the engine's
 * wait machine's (engine/waitm.h), as for the blocking client: this file
 * sends what it says and feeds it the answers, wake-ups and timers.
 *
 * ORDER: the calls of one (name, owner) run one at a time, in call order,
 * so a reentrant lock or an unlock always sees the count the earlier calls
 * left. Calls of different owners or names run concurrently.
 *
 * COMPLETION: a finished call goes on the done list; its callback runs
 * from the loop (async.c flushes the list when an entry point returns, or
 * from a zero-delay timer when the call finished inside an API call).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"

static void attempt(dlock__aop *op, int target, int queue);

/* ---- hold records ---------------------------------------------------------
 */

static size_t hold_key(const char *name, size_t nl, long long owner,
                       char *buf) {
  memcpy(buf, name, nl);
  buf[nl] = '\0';
  return nl + 1 + dlock__fmt_i64(buf + nl + 1, owner);
}

static dlock__ahold *hold_get(dlock_async *a, const char *name,
                              long long owner) {
  size_t nl = strlen(name);
  char stack[256];
  char *key = nl + 32 <= sizeof stack ? stack : dlock__malloc(nl + 32);
  if (!key)
    return NULL;
  size_t kl = hold_key(name, nl, owner, key);
  dlock__ahold *h = dlock__map_get(&a->holds, key, kl);
  if (!h && (h = dlock__calloc(1, sizeof *h + kl + 1)) != NULL) {
    memcpy(h->key, key, kl + 1);
    h->key_len = kl;
    h->name_len = nl;
    h->owner = owner;
    h->gen = ++a->hold_gen;
    h->fl = dlock__field_owner(a->id, owner, h->field);
    if (dlock__map_put(&a->holds, h->key, kl, h) != 0) {
      free(h);
      h = NULL;
    }
  }
  if (key != stack)
    free(key);
  return h;
}

/* Frees the record when nothing refers to it any more. */
static void hold_put(dlock_async *a, dlock__ahold *h) {
  if (h->h.count > 0 || h->busy || h->q_head || h->in_wd || h->h.unlock_pending)
    return;
  dlock__map_del(&a->holds, h->key, h->key_len);
  free(h);
}

/* Forgets the owner's holds (the record goes when no call uses it). */
static void drop_hold(dlock_async *a, dlock__ahold *h) {
  dlock__eng_forget(&h->h);
  dlock__awd_remove(a, h);
}

void dlock__ahold_lost(dlock_async *a, dlock__ahold *h) {
  h->h.lost = 1;
  dlock__awd_remove(a, h);
}

/* ---- completion ------------------------------------------------------------
 */

static void start(dlock__aop *op);

static void unlink_op(dlock__aop *op) {
  dlock_async *a = op->a;
  if (op->prev)
    op->prev->next = op->next;
  else
    a->ops = op->next;
  if (op->next)
    op->next->prev = op->prev;
  op->prev = op->next = NULL;
}

static void push_done(dlock__aop *op) {
  dlock_async *a = op->a;
  op->qnext = NULL;
  if (a->done_tail)
    a->done_tail->qnext = op;
  else
    a->done = op;
  a->done_tail = op;
  if (a->depth == 0)
    dlock__async_timer(a, &a->flush, dlock__async_now());
}

/* Ends op with rc (message fmt): its record's next call starts. */
__attribute__((format(printf, 3, 4))) static void
complete(dlock__aop *op, int rc, const char *fmt, ...) {
  dlock_async *a = op->a;
  op->rc = rc;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(op->msg, sizeof op->msg, fmt, ap);
  va_end(ap);
  dlock__async_untimer(a, &op->deadline_t);
  dlock__async_untimer(a, &op->ttl_t);
  dlock__async_untimer(a, &op->sync_t);
  if (op->sub)
    dlock__asub_leave(a, op->sub, op);
  op->sub = NULL;
  unlink_op(op);
  push_done(op);
  dlock__ahold *h = op->h;
  dlock__ainfo_ended(a, op, h);
  op->h = NULL;
  if (h->busy == op)
    h->busy = NULL;
  dlock__aop *next = h->q_head;
  if (next) {
    h->q_head = next->qnext;
    if (!h->q_head)
      h->q_tail = NULL;
    start(next);
  } else {
    hold_put(a, h);
  }
}

void dlock__async_flush(dlock_async *a) {
  while (a->done) {
    dlock__aop *op = a->done;
    a->done = op->qnext;
    if (!a->done)
      a->done_tail = NULL;
    if (op->rc)
      dlock__fail(op->rc, "%s", op->msg);
    else
      dlock__clear_error();
    dlock__callout_done(op->cb, op->rc, op->arg);
    free(op);
  }
}

void dlock__async_ops_close(dlock_async *a) {
  while (a->ops) {
    dlock__aop *op = a->ops;
    unlink_op(op);
    dlock__async_untimer(a, &op->deadline_t);
    dlock__async_untimer(a, &op->ttl_t);
    dlock__async_untimer(a, &op->sync_t);
    op->sub = NULL;
    op->h = NULL;
    op->rc = DLOCK_ECLOSED;
    snprintf(op->msg, sizeof op->msg,
             "dlock_async_free: the client closed before the call ended");
    push_done(op);
  }
  for (size_t i = 0; i < a->holds.nb; i++)
    for (dlock__map_ent *e = a->holds.b[i]; e; e = e->next)
      free(e->val);
}

/* ---- lock -------------------------------------------------------------------
 */

/* The call holds the lock now (the attempt sent at op->sent said so). */
static void late_answer(dlock__aop *op);

static void held(dlock__aop *op) {
  dlock__ahold *h = op->h;
  /* A first hold answered past its local deadline is no hold (the
   * engine's rule, mutex.c late_answer too): given back. */
  if (h->h.count == 0 &&
      !dlock__eng_in_time(op->sent, op->lease, dlock__async_now())) {
    late_answer(op);
    return;
  }
  int gone =
      dlock__eng_reenter_answer(&h->h, op->target - 1, dlock__async_now());
  if (gone) { /* lost while the re-entry was in flight: nothing revived */
    drop_hold(op->a, h);
    complete(op, DLOCK_ELOST,
             "lock '%s': owner %lld's hold was %s while this reentrant "
             "acquire was in flight",
             h->key, h->owner,
             gone == DLOCK__ENG_RAN_OUT ? "out of lease" : "lost");
    return;
  }
  dlock__stat_add(&op->a->stats,
                  h->h.count > 0 ? DLOCK__ST_REENTERED : DLOCK__ST_ACQUIRED, 1);
  dlock__hold_note(&h->h, op->target, op->wd, op->lease, op->sent, 0);
  if (op->wd)
    dlock__awd_add(op->a, h);
  complete(op, DLOCK_OK, "%s", "");
}

static void attempt_done(dlock__areq *r, redisReply *reply, int err,
                         const char *why);

static void run(dlock__aop *op, dlock__wm_act x);

static void cancel_done(dlock__areq *r, redisReply *reply, int err,
                        const char *why) {
  dlock__aop *op = r->arg;
  dlock__areq_free(r);
  (void)why;
  long long v = 0;
  int cr = dlock__take_int(err, reply, &v, NULL);
  op->in_flight = 0;
  /* The machine's step: a hand-over the cancel found is confirmed by one
   * more attempt, not queueing; else the wait ends with its own code. */
  run(op, dlock__wm_cancel_answer(&op->wm, cr ? cr : v == 1));
}

/* Sends the acquire script (target = the hold count after it; queue =
 * join the hand-over queue when taken; the attempt's request id is the
 * one the machine drew), or with cancel the cancel script (leave the
 * queue). 0, or DLOCK_ENOMEM with nothing sent. */
static int send_call(dlock__aop *op, int target, int queue, int cancel) {
  dlock__ahold *h = op->h;
  dlock__acq_call k;
  int rc = cancel
               ? dlock__cancel_call_init(&k, h->key, h->name_len, h->field,
                                         h->fl, op->lease, &op->wm.w,
                                         dlock__apublish(op->a))
               : dlock__acq_call_init(&k, h->key, h->name_len, h->field, h->fl,
                                      target, op->lease, queue, &op->wm.w);
  dlock__areq *r =
      rc ? NULL
      : cancel
          ? dlock__areq_eval(dlock__core_script(DLOCK__S_CANCEL), 6, k.ckeys,
                             k.cklens, 4, k.cargs, k.calens, cancel_done, op)
          : dlock__areq_eval_call(&k.send, attempt_done, op);
  dlock__acq_call_free(&k);
  if (!r)
    return DLOCK_ENOMEM;
  op->in_flight = 1;
  if (!cancel) {
    op->sent = dlock__async_now();
  }
  /* its WAIT's end */
  r->wait_until = op->wait_ms > 0 ? op->wm.w.deadline : 0;
  dlock__aconn_submit(&op->a->cmd, r);
  return 0;
}

/* The wait ended, not held (the machine's END): worded where the machine
 * decided it; an attempt's, the subscription's or a stop's message was
 * kept in op->msg when it happened. */
static void wait_ended(dlock__aop *op, const dlock__wm_act *x) {
  char msg[sizeof op->msg];
  switch (x->why) {
  case DLOCK__WMW_BUSY:
    complete(op, DLOCK_EBUSY, "lock '%s' is held elsewhere", op->h->key);
    return;
  case DLOCK__WMW_TIMED_OUT:
    dlock__stat_add(&op->a->stats, DLOCK__ST_TIMEOUTS, 1);
    complete(op, DLOCK_ETIMEDOUT,
             "lock '%s' still held elsewhere after %lld ms", op->h->key,
             op->wait_ms);
    return;
  case DLOCK__WMW_AWAY:
    complete(op, x->rc,
             "%.150s (lock '%.60s': still so when the wait of %lld ms ended)",
             op->away_why, op->h->key, op->wait_ms);
    return;
  case DLOCK__WMW_GONE:
    drop_hold(op->a, op->h);
    break;
  default:
    break;
  }
  memcpy(msg, op->msg, sizeof msg);
  complete(op, x->rc, "%s", msg);
}

/* Does what the wait machine says (engine/waitm.h): the one sequence of a
 * wait, the blocking client's too. */
static void run(dlock__aop *op, dlock__wm_act x) {
  dlock_async *a = op->a;
  int rc;
  switch (x.kind) {
  case DLOCK__WMA_ATTEMPT:
    attempt(op, x.target, x.queue);
    return;
  case DLOCK__WMA_SUBSCRIBE:
    rc = op->sub ? op->active : dlock__asub_join(a, op->h->key, op, &op->sub);
    if (rc == 1)
      op->active = 1;
    if (rc < 0)
      snprintf(op->msg, sizeof op->msg, "out of memory");
    run(op, dlock__wm_subscribed(&op->wm, rc, dlock__async_now()));
    return;
  case DLOCK__WMA_SLEEP:
    /* A wake-up at the deadline is the deadline timer's. */
    if (x.until >= 0 && (op->wm.w.deadline < 0 || x.until < op->wm.w.deadline))
      dlock__async_timer(a, &op->ttl_t, x.until);
    return;
  case DLOCK__WMA_CANCEL:
    if (send_call(op, 1, 0, 1) != 0)
      run(op, dlock__wm_cancel_answer(&op->wm, DLOCK_ENOMEM));
    return;
  case DLOCK__WMA_HELD:
    held(op);
    return;
  case DLOCK__WMA_END:
    wait_ended(op, &x);
    return;
  default: /* NONE: an answer in flight brings the next step */
    return;
  }
}

static void enosync(dlock__aop *op, int undone);

static void deadline_fired(dlock__atimer *t) {
  dlock__aop *op = t->arg;
  if (op->sync_t.slot) { /* pausing before a retry after DLOCK_ENOSYNC */
    enosync(op, 1);
    return;
  }
  dlock__aop_wake(op, 0);
}

static void ttl_fired(dlock__atimer *t) { dlock__aop_wake(t->arg, 0); }

void dlock__aop_wake(dlock__aop *op, int granted) {
  /* A wake-up that comes after the wait's deadline (the process was
   * paused, the timer not run yet) ends the wait as the deadline does:
   * the machine looks at the time first, as for the blocking client. */
  dlock__async_untimer(op->a, &op->ttl_t);
  run(op, dlock__wm_wake(&op->wm, granted, op->active, dlock__async_now()));
}

void dlock__aop_sub_failed(dlock__aop *op, int err, const char *why) {
  op->sub = NULL; /* the entry is gone */
  op->active = 0;
  snprintf(op->msg, sizeof op->msg, "lock '%.100s': %.140s", op->h->key, why);
  run(op, dlock__wm_sub_lost(&op->wm, err, dlock__async_now()));
}

/* ---- replica sync ------------------------------------------------------- */

static void lock_begin(dlock__aop *op);

/* The call ends with DLOCK_ENOSYNC: the replicas did not confirm its
 * acquisition, which was undone (or the undo failed: the lease ends it). */
static void enosync(dlock__aop *op, int undone) {
  complete(op, DLOCK_ENOSYNC, "lock '%s': %s; the acquisition was undone%s",
           op->h->key, op->sync_why,
           undone ? "" : " (the undo failed: the lease ends it)");
}

static void sync_fired(dlock__atimer *t) {
  dlock__aop *op = t->arg;
  lock_begin(op);
}

static void rel_send(dlock__aop *op,
                     void (*then)(dlock__aop *op, int rc, int sends),
                     int no_sync);

/* The undo answered (committed when it had to be): try again under the
 * retry policy within the call's wait budget, or end with DLOCK_ENOSYNC --
 * the engine's rule (dlock__eng_sync_retry), the blocking client's
 * (mutex.c) too. An undo whose outcome is unknown stays pending in the
 * record: the retry's lock_begin settles it first (issue 38.4). */
static void undo_finish(dlock__aop *op, int rc, int sends) {
  (void)sends;
  dlock_async *a = op->a;
  int undone = dlock__eng_answered(rc);
  (void)dlock__eng_unlock_end(&op->h->h, &op->u, rc, 1, dlock__async_now());
  /* Counted and told per undone acquisition, as mutex.c's undo_unsynced. */
  dlock__stat_add(&a->stats, DLOCK__ST_ENOSYNC, 1);
  dlock__log(&a->cfg, DLOCK_LOG_WARN, op->h->key, "enosync",
             "acquisition undone: %s", op->sync_why);
  int64_t now = dlock__async_now();
  int64_t pause = dlock__retry_pause(&a->cfg, op->sync_i, &op->sync_prev);
  int64_t left = op->wait_ms > 0 ? op->deadline - now : 0;
  /* As mutex.c's acquire: tried again even when the undo failed (the
   * retry settles it first; a retry that cannot reach the server ends
   * with that error). */
  if ((op->wait_ms > 0 && left <= 0) || a->closing ||
      !dlock__eng_sync_retry(op->sync_i, a->cfg.retry_attempts, op->wait_ms,
                             left, pause)) {
    enosync(op, undone);
    return;
  }
  op->sync_i++;
  dlock__async_timer(a, &op->sync_t, now + pause);
}

/* The acquisition the attempt made was not confirmed by the replicas
 * (async_conn.c: the engine's verdict on WAIT's answer): give it back with
 * the unlock script -- reentrant: the count goes back to target - 1, the
 * TTL never shortened -- without a WAIT, as mutex.c's undo_unsynced, bound
 * to it like every release (rel_send). The call leaves its subscription
 * and the queue state; a retry starts over. */
static void undo_unsynced(dlock__aop *op, const dlock__areq *r) {
  dlock_async *a = op->a;
  int want = r->wait_want;
  dlock__sync_why(op->sync_why, sizeof op->sync_why, r->acks, want, r->wait_ms,
                  a->cfg.sync_timeout_ms);
  dlock__async_untimer(a, &op->ttl_t);
  if (op->sub)
    dlock__asub_leave(a, op->sub, op);
  op->sub = NULL;
  op->active = 0; /* a retry is a new wait (lock_begin) */
  dlock__eng_undo_begin(&op->h->h, op->target - 1,
                        op->target > 1 ? -op->lease : op->lease,
                        dlock__async_now(), &op->u);
  rel_send(op, undo_finish, 1);
}

/* The late answer's give-back answered: the wait goes on while its budget
 * lasts, or the call ends with DLOCK_ELOST (op->msg says why). */
static void late_finish(dlock__aop *op, int rc, int sends) {
  (void)sends;
  int undone = dlock__eng_answered(rc);
  (void)dlock__eng_unlock_end(&op->h->h, &op->u, rc, 1, dlock__async_now());
  int64_t now = dlock__async_now();
  if (op->wait_ms != 0 && !op->a->closing &&
      (op->deadline < 0 || now < op->deadline)) {
    lock_begin(op); /* a new wait, within the call's budget */
    return;
  }
  char msg[sizeof op->msg + 96];
  snprintf(msg, sizeof msg, "%s%s", op->msg,
           undone ? ""
                  : " (the give-back's outcome is unknown: the owner's "
                    "next call on the lock settles it)");
  complete(op, DLOCK_ELOST, "%.*s", (int)sizeof op->msg - 1, msg);
}

/* A first hold answered past its local deadline (dlock__eng_in_time): it
 * may be over on the server, with another holder -- given back with a
 * bound release, as an undo. */
static void late_answer(dlock__aop *op) {
  int64_t took = dlock__async_now() - op->sent;
  dlock__log(&op->a->cfg, DLOCK_LOG_WARN, op->h->key, "late_answer",
             "an acquisition answered %lld ms after its send, past its lease "
             "of %lld ms: given back",
             (long long)took, (long long)op->lease);
  snprintf(op->msg, sizeof op->msg,
           "lock '%s': acquired, but the answer came %lld ms after the send, "
           "past the lease of %lld ms (it may have ended on the server, and "
           "another owner may hold the lock): given back",
           op->h->key, (long long)took, (long long)op->lease);
  dlock__eng_undo_begin(&op->h->h, op->target - 1, op->lease,
                        dlock__async_now(), &op->u);
  rel_send(op, late_finish, 1);
}

/* ---- request binding: tombstones --------------------------------------- */

/* SET key 1 PX <tombstone life>, routed by the key (on a cluster, to its
 * slot's master: the tombstone shares the lock's slot). */
static dlock__areq *tomb_req(dlock_async *a, const dlock__sb *key,
                             dlock__areq_fn *fn, void *arg) {
  char ts[24];
  size_t tl = dlock__fmt_i64(ts, dlock__tombstone_ttl(&a->cfg));
  const char *av[5] = {"SET", key->p, "1", "PX", ts};
  size_t al[5] = {3, key->len, 1, 2, tl};
  dlock__areq *r = key->oom ? NULL : dlock__areq_cmd(5, av, al, fn, arg);
  if (r)
    r->slot = (int)dlock__key_slot(key->p, key->len);
  return r;
}

static void commit_done(dlock__areq *r, redisReply *reply, int err,
                        const char *why) {
  dlock_async *a = r->arg;
  dlock__areq_free(r);
  if (err || !reply || reply->type == REDIS_REPLY_ERROR)
    dlock__log(&a->cfg, DLOCK_LOG_WARN, NULL, "commit_failed",
               "an acquire attempt sent more than once could not be "
               "committed (%s): a late copy of it may still re-create the "
               "key for one lease",
               err                   ? why
               : reply && reply->str ? reply->str
                                     : "no reply");
  if (reply)
    freeReplyObject(reply);
}

/* Commits acquire attempt rid of name (its tombstone), as mutex.c's
 * commit_attempt: best effort -- an acquire copy that acts late can at
 * worst re-create the key for one lease, never make a second holder nor
 * shorten a TTL. */
static void commit_attempt(dlock_async *a, const char *name, const char *rid) {
  dlock__sb key;
  dlock__sb_init(&key);
  dlock__req_tomb_key(&key, name, rid);
  dlock__areq *r = tomb_req(a, &key, commit_done, a);
  dlock__sb_free(&key);
  if (r)
    dlock__aconn_submit(&a->cmd, r);
}

/* The request binding rule for an attempt (mutex.c attempt_commit). */
static void attempt_commit(dlock__aop *op, int rc, int sends) {
  if (!dlock__eng_answered(rc)) {
    if (sends > 0)
      memcpy(op->owed, op->wm.w.rid, sizeof op->owed);
    return;
  }
  if (sends > 1)
    commit_attempt(op->a, op->h->key, op->wm.w.rid);
  if (op->owed[0]) {
    commit_attempt(op->a, op->h->key, op->owed);
    op->owed[0] = '\0';
  }
}

static void attempt_done(dlock__areq *r, redisReply *reply, int err,
                         const char *why) {
  dlock__aop *op = r->arg;
  int unsynced = !err && r->unsynced;
  op->in_flight = 0;
  int64_t ttl = -1;
  int rc = err ? dlock__fail(err, "%s", why)
               : dlock__acq_reply(0, reply, op->h->key, &ttl);
  attempt_commit(op, rc, r->sends);
  if (rc == 1 && unsynced) {
    undo_unsynced(op, r);
    dlock__areq_free(r);
    return;
  }
  dlock__areq_free(r);
  /* A failure's message is kept for the wait's end; one the server
   * recovers from is ridden out by a timed wait (the machine's rule). */
  int passing = rc < 0 && dlock__wm_passing(rc, dlock_last_error());
  if (rc < 0)
    snprintf(op->msg, sizeof op->msg, "%s", dlock_last_error());
  if (passing)
    snprintf(op->away_why, sizeof op->away_why, "%s", dlock_last_error());
  run(op, dlock__wm_answer(&op->wm, rc, ttl, passing, dlock__async_now()));
}

/* One acquire attempt (send_call). */
static void attempt(dlock__aop *op, int target, int queue) {
  op->target = target;
  if (send_call(op, target, queue, 0) != 0) {
    complete(op, DLOCK_ENOMEM, "out of memory");
    return;
  }
}

static void settle_start(dlock__aop *op);

static void lock_begin(dlock__aop *op) {
  dlock__ahold *h = op->h;
  int64_t now = dlock__async_now();
  int prior;
  int gone = dlock__eng_reenter(&h->h, now, &prior);
  if (gone == DLOCK__ENG_SETTLE) {
    /* A release of this hold is pending (its outcome unknown): nothing is
     * built on the count it may have changed until its committing copy
     * answered (safety round 4, issue 38.2); then lock_begin again. */
    settle_start(op);
    return;
  }
  if (gone) {
    int was_lost = gone != DLOCK__ENG_RAN_OUT;
    drop_hold(op->a, h);
    complete(op, DLOCK_ELOST,
             was_lost ? "lock '%s': owner %lld's hold was lost (renewal found "
                        "it gone)"
                      : "lock '%s': owner %lld's hold ran out of lease (its "
                        "local deadline passed)",
             h->key, h->owner);
    return;
  }
  if (!op->began) { /* a retry (DLOCK_ENOSYNC, a late answer): same budget */
    op->began = 1;
    op->deadline = op->wait_ms > 0 ? now + op->wait_ms : -1;
    if (op->wait_ms > 0)
      dlock__async_timer(op->a, &op->deadline_t, op->deadline);
  }
  /* Each try is a wait of the engine's machine (a new wait id), with the
   * plain mutex's longest sleep, riding out a server that is away within
   * a timed wait, as the blocking client's. */
  int64_t ride =
      op->a->cfg.retry_interval_ms > 10 ? op->a->cfg.retry_interval_ms : 10;
  dlock__wm_init(&op->wm, op->wait_ms, op->deadline, prior,
                 DLOCK__ENG_QUEUED_RECHECK_MS, 0, ride);
  /* A subscription of the name that is active (other calls wait, or it
   * lingers): the call registers as a waiter first and joins the queue
   * with this very attempt (mutex.c join_early). */
  if (op->wait_ms != 0 && !op->sub &&
      dlock__asub_join_active(op->a, h->key, op, &op->sub))
    op->active = 1;
  run(op, dlock__wm_start(&op->wm, op->sub && op->active, now));
}

/* ---- unlock -----------------------------------------------------------------
 */

/* ---- releases: the caller's unlock, an undo, a settle -------------------
 * One path for every release of a record (mutex.c's rel_* for the blocking
 * client): op->u says which it is. Its answer is COMMITTED when the engine
 * says so (dlock__eng_commit_due: sent more than once, not as a committing
 * copy -- a copy may still arrive): its tombstone is written and confirmed
 * before the answer counts; if that fails, the outcome counts as unknown.
 * Then op->rel_then runs with the final answer. */

static void rel_then(dlock__aop *op) {
  op->in_flight = 0;
  op->rel_then(op, op->rel_rc, op->rel_sends);
}

static void rel_tomb_done(dlock__areq *r, redisReply *reply, int err,
                          const char *why) {
  dlock__aop *op = r->arg;
  dlock__areq_free(r);
  if (err || !reply || reply->type == REDIS_REPLY_ERROR)
    op->rel_rc = dlock__fail(
        err ? err : DLOCK_EREDIS,
        "lock '%s': the unlock ran, but a copy of it sent earlier may still "
        "arrive and its tombstone could not be written (%.200s): the outcome "
        "counts as unknown -- retry the unlock",
        op->h->key,
        err                   ? why
        : reply && reply->str ? reply->str
                              : "no reply");
  if (reply)
    freeReplyObject(reply);
  rel_then(op);
}

static void rel_done(dlock__areq *r, redisReply *reply, int err,
                     const char *why) {
  dlock__aop *op = r->arg;
  op->rel_sends = r->sends;
  dlock__areq_free(r);
  op->rel_rc = err ? dlock__fail(err, "%s", why) : dlock__rel_reply(0, reply);
  if (dlock__eng_commit_due(&op->u, op->rel_rc, op->rel_sends)) {
    dlock_async *a = op->a;
    dlock__sb key;
    dlock__sb_init(&key);
    dlock__unlock_latch_key(&key, op->h->key, op->u.rid);
    dlock__areq *t = tomb_req(a, &key, rel_tomb_done, op);
    dlock__sb_free(&key);
    if (t) {
      dlock__aconn_submit(&a->cmd, t);
      return;
    }
    op->rel_rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  rel_then(op);
}

/* Sends op->u (no_sync: without the WAIT of replica sync, as every
 * release that is not the caller's: an undo, a settle); then(op, rc,
 * sends) runs with its final answer. */
static void rel_send(dlock__aop *op,
                     void (*then)(dlock__aop *op, int rc, int sends),
                     int no_sync) {
  dlock__ahold *h = op->h;
  dlock_async *a = op->a;
  op->rel_then = then;
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, h->key, h->name_len, h->field, h->fl,
                                op->u.lease, op->u.expected, op->u.rid,
                                dlock__apublish(a));
  if (!rc && op->u.commit)
    dlock__rel_call_commit(&k, dlock__tombstone_ttl(&a->cfg));
  dlock__areq *r = rc ? NULL : dlock__areq_eval_call(&k.send, rel_done, op);
  dlock__rel_call_free(&k);
  if (!r) {
    op->rel_rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
    op->rel_sends = 0;
    rel_then(op);
    return;
  }
  r->no_sync = no_sync;
  op->in_flight = 1;
  dlock__aconn_submit(&a->cmd, r);
}

/* What an answered (or unknown) release does to the record and the
 * counters (the blocking client's rel_end), for the unlock and a settle. */
static dlock__eng_rel_out rel_apply(dlock__aop *op, int rc, int sends) {
  dlock__ahold *h = op->h;
  dlock_async *a = op->a;
  int reported = h->h.lost; /* counted when the watchdog reported it */
  dlock__eng_rel_out o =
      dlock__eng_unlock_end(&h->h, &op->u, rc, sends > 1, dlock__async_now());
  if (o.action == DLOCK__ENG_REL_FORGET && !reported) {
    dlock__stat_add(&a->stats,
                    o.ran_out             ? DLOCK__ST_LOST_EXPIRED
                    : o.rc == DLOCK_ELOST ? DLOCK__ST_LOST_FORCED
                                          : DLOCK__ST_RELEASED,
                    1);
    /* the events the blocking client logs (mutex.c lost_expired and
     * lost_found) */
    if (o.ran_out)
      dlock__log(&a->cfg, DLOCK_LOG_WARN, h->key, "expired",
                 "expired: the hold's lease ran out before it was unlocked");
    else if (o.rc == DLOCK_ELOST)
      dlock__log(&a->cfg, DLOCK_LOG_ERROR, h->key, "lost",
                 "lost: the unlock found this owner's hold gone before its "
                 "lease ended (force-unlocked, deleted or taken by another "
                 "client)");
  }
  /* (REL_PUT: the record goes when its calls end, complete -> hold_put.) */
  if (o.action == DLOCK__ENG_REL_FORGET)
    drop_hold(a, h);
  else if (o.action == DLOCK__ENG_REL_ONE && dlock__hold_drop_one(&h->h))
    dlock__awd_remove(a, h);
  return o;
}

static void unlock_finish(dlock__aop *op, int rc, int sends) {
  dlock__eng_rel_out o = rel_apply(op, rc, sends);
  dlock__ahold *h = op->h;
  char why[DLOCK__ENG_WHY_LEN];
  if (o.rc == DLOCK_ELOST)
    complete(op, DLOCK_ELOST, "%s",
             dlock__eng_lost_why(&o, h->key, why, sizeof why));
  else if (o.rc < 0) /* outcome unknown: the retry is its committing copy */
    complete(op, o.rc, "%s", dlock_last_error());
  else
    complete(op, DLOCK_OK, "%s", "");
}

static void unlock_begin(dlock__aop *op);

/* The settle of a pending release answered: the call goes on (lock or
 * unlock, from the start), or ends when it is still unknown. */
static void settle_finish(dlock__aop *op, int rc, int sends) {
  char why[200];
  snprintf(why, sizeof why, "%s", dlock_last_error());
  rel_apply(op, rc, sends);
  if ((rc = dlock__eng_settle_end(&op->h->h, rc)) != 0) {
    complete(op, rc,
             "lock '%s': an earlier unlock of this hold has an unknown "
             "outcome and could not be settled (%s); nothing was sent for "
             "this %s",
             op->h->key, why, op->unlock ? "unlock" : "lock");
    return;
  }
  if (op->unlock)
    unlock_begin(op);
  else
    lock_begin(op);
}

/* Sends the committing copy of the record's pending release. */
static void settle_start(dlock__aop *op) {
  dlock__eng_settle_begin(&op->h->h, &op->u);
  rel_send(op, settle_finish, 1);
}

static void unlock_begin(dlock__aop *op) {
  dlock__ahold *h = op->h;
  dlock_async *a = op->a;
  int rc = dlock__eng_unlock_begin(&h->h, dlock__async_now(),
                                   a->cfg.watchdog_timeout_ms, &op->u);
  if (rc == DLOCK__ENG_SETTLE) { /* another release of the hold first */
    settle_start(op);
    return;
  }
  if (rc == DLOCK_EPERM) {
    complete(op, DLOCK_EPERM, "lock '%s' is not held by owner %lld", h->key,
             h->owner);
    return;
  }
  if (rc == DLOCK_ELOST) {
    drop_hold(a, h);
    complete(op, DLOCK_ELOST,
             "lock '%s' was lost while held (renewal found it gone, or its "
             "local deadline passed unrenewed)",
             h->key);
    return;
  }
  /* The count this unlock expects makes it idempotent by state; a retry
   * after DLOCK_ECONN is its committing copy, with the same request id
   * (the engine keeps it in the record): it counts once, and no earlier
   * copy can act after it (safety round 4). */
  rel_send(op, unlock_finish, 0);
}

/* ---- the calls
 * ---------------------------------------------------------------- */

static void start(dlock__aop *op) {
  op->h->busy = op;
  if (op->unlock)
    unlock_begin(op);
  else
    lock_begin(op);
}

static int queue_call(dlock_async *a, const char *name, long long owner,
                      dlock__aop *op) {
  dlock__ahold *h = hold_get(a, name, owner);
  if (!h) {
    free(op);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  op->a = a;
  op->h = h;
  op->deadline_t.fn = deadline_fired;
  op->deadline_t.arg = op;
  op->ttl_t.fn = ttl_fired;
  op->ttl_t.arg = op;
  op->sync_t.fn = sync_fired;
  op->sync_t.arg = op;
  op->next = a->ops;
  if (a->ops)
    a->ops->prev = op;
  a->ops = op;
  if (h->busy) {
    if (h->q_tail)
      h->q_tail->qnext = op;
    else
      h->q_head = op;
    h->q_tail = op;
  } else {
    start(op);
  }
  return 0;
}

static int check_call(dlock_async *a, const char *name, dlock_async_cb *cb) {
  dlock__clear_error();
  if (!a || !name || !cb)
    return dlock__fail(DLOCK_EINVAL, "NULL argument");
  if (!*name)
    return dlock__fail(DLOCK_EINVAL, "lock name is empty");
  if (a->closing)
    return dlock__fail(DLOCK_ECLOSED, "the client is being freed");
  return 0;
}

int dlock_async_lock(dlock_async *a, const char *name, long long owner,
                     long long wait_ms, long long lease_ms, dlock_async_cb *cb,
                     void *arg) {
  int rc = check_call(a, name, cb);
  if (rc || (rc = dlock__check_lease(lease_ms, "lock", name)) != 0)
    return rc;
  dlock__aop *op = dlock__calloc(1, sizeof *op);
  if (!op)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  op->cb = cb;
  op->arg = arg;
  op->wait_ms = wait_ms;
  op->wd = lease_ms <= 0;
  op->lease = op->wd ? a->cfg.watchdog_timeout_ms : lease_ms;
  dlock__ainfo_want(a, op); /* who holds and waits: async_info.c */
  return queue_call(a, name, owner, op);
}

int dlock_async_unlock(dlock_async *a, const char *name, long long owner,
                       dlock_async_cb *cb, void *arg) {
  int rc = check_call(a, name, cb);
  if (rc)
    return rc;
  dlock__aop *op = dlock__calloc(1, sizeof *op);
  if (!op)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  op->cb = cb;
  op->arg = arg;
  op->unlock = 1;
  return queue_call(a, name, owner, op);
}
