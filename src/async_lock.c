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
 * the engine's (engine.h (f)), as for the blocking client's wait loop: a
 * call that ends queued for any reason leaves the queue first.
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

#include "async_internal.h"

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
  if (h->h.count > 0 || h->busy || h->q_head || h->in_wd)
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
    op->cb(op->rc, op->arg);
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
static void held(dlock__aop *op) {
  dlock__ahold *h = op->h;
  dlock__stat_add(&op->a->stats,
                  h->h.count > 0 ? DLOCK__ST_REENTERED : DLOCK__ST_ACQUIRED, 1);
  dlock__hold_note(&h->h, op->target, op->wd, op->lease, op->sent, 0);
  if (op->wd)
    dlock__awd_add(op->a, h);
  complete(op, DLOCK_OK, "%s", "");
}

static void attempt_done(dlock__areq *r, redisReply *reply, int err,
                         const char *why);

/* Ends the wait with the code and message wait_end kept in op->rc and
 * op->msg (not held). */
static void end_kept(dlock__aop *op) {
  char msg[sizeof op->msg];
  memcpy(msg, op->msg, sizeof msg);
  if (op->rc == DLOCK_ETIMEDOUT)
    dlock__stat_add(&op->a->stats, DLOCK__ST_TIMEOUTS, 1);
  complete(op, op->rc, "%s", msg);
}

static void cancel_done(dlock__areq *r, redisReply *reply, int err,
                        const char *why) {
  dlock__aop *op = r->arg;
  dlock__areq_free(r);
  (void)why;
  long long v = 0;
  int cr = dlock__take_int(err, reply, &v, NULL);
  op->in_flight = 0;
  op->w.queued = 0;
  /* The engine's verdict on the cancel's answer (mutex.c's leave_queue
   * follows it too): handed to us before the cancel -> one more attempt,
   * not queueing, confirms it (attempt_done asks dlock__eng_confirm_answer
   * while op->cancelling); else the wait ends with its own code. */
  if (dlock__eng_cancel_answer(cr ? cr : v == 1) == DLOCK__WAIT_CONFIRM) {
    attempt(op, 1, 0);
    return;
  }
  end_kept(op);
}

/* Sends the acquire script (target = the hold count after it; queue =
 * join the hand-over queue when taken), or with cancel the cancel script
 * (leave the queue). 0, or DLOCK_ENOMEM with nothing sent. */
static int send_call(dlock__aop *op, int target, int queue, int cancel) {
  dlock__ahold *h = op->h;
  dlock__acq_call k;
  int rc = dlock__acq_call_init(&k, h->key, h->name_len, h->field, h->fl,
                                target, op->lease, queue, &op->w);
  dlock__areq *r =
      rc ? NULL
      : cancel
          ? dlock__areq_eval(dlock__core_script(DLOCK__S_CANCEL), 4, k.keys,
                             k.klens, 3, k.cargs, k.calens, cancel_done, op)
          : dlock__areq_eval_call(&k.send, attempt_done, op);
  dlock__acq_call_free(&k);
  if (!r)
    return DLOCK_ENOMEM;
  op->in_flight = 1;
  op->sent = dlock__async_now();
  dlock__aconn_submit(&op->a->cmd, r);
  return 0;
}

/* The wait ends without the lock with rc (why: its message): the engine
 * says whether it leaves the server's queue first (dlock__eng_wait_end:
 * on every end while it may be queued, as the blocking client; until
 * issue 26 only when the deadline passed). The code and message are kept
 * in op->rc / op->msg until the cancel answered (cancel_done). */
static void wait_end(dlock__aop *op, int rc, const char *why) {
  op->rc = rc;
  snprintf(op->msg, sizeof op->msg, "%s", why);
  int v = dlock__eng_wait_end(rc, &op->w);
  if (v == DLOCK__WAIT_GONE)
    drop_hold(op->a, op->h);
  if (v == DLOCK__WAIT_CANCEL && !op->cancelling) {
    op->cancelling = 1;
    if (send_call(op, 1, 0, 1) == 0)
      return;
  }
  op->w.queued = 0;
  end_kept(op);
}

/* The wait ran out (its deadline). */
static void timed_out(dlock__aop *op) {
  char why[sizeof op->msg];
  snprintf(why, sizeof why, "lock '%s' still held elsewhere after %lld ms",
           op->h->key, op->wait_ms);
  wait_end(op, DLOCK_ETIMEDOUT, why);
}

static void enosync(dlock__aop *op, int undone);

static void deadline_fired(dlock__atimer *t) {
  dlock__aop *op = t->arg;
  op->expired = 1;
  if (op->sync_t.slot) /* pausing before a retry after DLOCK_ENOSYNC */
    enosync(op, 1);
  else if (!op->in_flight)
    timed_out(op);
}

static void ttl_fired(dlock__atimer *t) { dlock__aop_wake(t->arg); }

void dlock__aop_wake(dlock__aop *op) {
  if (op->cancelling || op->expired)
    return;
  if (op->in_flight) {
    op->again = 1;
    return;
  }
  dlock__async_untimer(op->a, &op->ttl_t);
  attempt(op, 1, dlock__eng_wait_queue(op->wait_ms, op->active, 0));
}

void dlock__aop_sub_failed(dlock__aop *op, int err, const char *why) {
  op->sub = NULL; /* the entry is gone */
  if (op->in_flight) {
    op->expired = 1; /* ends with the reply of the attempt in flight */
    return;
  }
  char msg[sizeof op->msg];
  snprintf(msg, sizeof msg, "lock '%s': %s", op->h->key, why);
  wait_end(op, err, msg); /* queued: leaves the queue first */
}

/* The lock is taken elsewhere: wait (the engine's verdict: SLEEP until
 * `until`, -1 for a wake-up message only). */
static void taken(dlock__aop *op, int64_t until) {
  dlock_async *a = op->a;
  if (!op->sub) {
    int rc = dlock__asub_join(a, op->h->key, op, &op->sub);
    if (rc < 0) {
      complete(op, rc, "out of memory");
      return;
    }
    if (rc == 0)
      return; /* the confirmed subscription wakes it */
    op->active = 1;
    op->again = 1;
  }
  if (op->again) {
    op->again = 0;
    attempt(op, 1, dlock__eng_wait_queue(op->wait_ms, op->active, 0));
    return;
  }
  /* A wake-up at the deadline is the deadline timer's (it ends the wait
   * without one more attempt, as the blocking client's sleep does). */
  if (until >= 0 && (op->w.deadline < 0 || until < op->w.deadline))
    dlock__async_timer(a, &op->ttl_t, until);
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

/* The undo answered: try again under the retry policy within the call's
 * wait budget, or end with DLOCK_ENOSYNC -- the engine's rule
 * (dlock__eng_sync_retry), the blocking client's (mutex.c) too. */
static void undo_done(dlock__areq *r, redisReply *reply, int err,
                      const char *why) {
  dlock__aop *op = r->arg;
  int resent = r->tries > 0;
  dlock__areq_free(r);
  dlock_async *a = op->a;
  op->in_flight = 0;
  int rc = err ? dlock__fail(err, "%s", why) : dlock__rel_reply(0, reply);
  if (rc == DLOCK_ELOST && op->target == 1 && resent)
    rc = 1; /* a copy of this release found what an earlier one left */
  /* Counted and told per undone acquisition, as mutex.c's undo_unsynced. */
  dlock__stat_add(&a->stats, DLOCK__ST_ENOSYNC, 1);
  dlock__log(&a->cfg, DLOCK_LOG_WARN, op->h->key, "enosync",
             "acquisition undone: %s", op->sync_why);
  int64_t now = dlock__async_now();
  int64_t pause = dlock__retry_pause(&a->cfg, op->sync_i, &op->sync_prev);
  int64_t left = op->wait_ms > 0 ? op->w.deadline - now : 0;
  /* As mutex.c's acquire: tried again even when the undo failed (its
   * lease ends what it left; a retry that cannot reach the server ends
   * with that error). */
  if (op->expired || a->closing ||
      !dlock__eng_sync_retry(op->sync_i, a->cfg.retry_attempts, op->wait_ms,
                             left, pause)) {
    enosync(op, rc >= 0);
    return;
  }
  op->sync_i++;
  dlock__async_timer(a, &op->sync_t, now + pause);
}

/* The acquisition the attempt made was not confirmed by the replicas
 * (async_conn.c: the engine's verdict on WAIT's answer): give it back with
 * the unlock script -- reentrant: the count goes back to target - 1, the
 * TTL never shortened -- without a WAIT, as mutex.c's undo_unsynced. The
 * call leaves its subscription and the queue state; a retry starts over. */
static void undo_unsynced(dlock__aop *op, const dlock__areq *r) {
  dlock_async *a = op->a;
  dlock__ahold *h = op->h;
  int want = r->wait_want;
  if (r->acks < 0)
    snprintf(op->sync_why, sizeof op->sync_why,
             "WAIT failed (an ACL user without +wait?): the write's "
             "replication is unconfirmed");
  else
    snprintf(op->sync_why, sizeof op->sync_why,
             "%lld of %d replica%s confirmed the write within %d ms "
             "(sync_timeout_ms)",
             r->acks, want, want == 1 ? "" : "s", a->cfg.sync_timeout_ms);
  dlock__async_untimer(a, &op->ttl_t);
  if (op->sub)
    dlock__asub_leave(a, op->sub, op);
  op->sub = NULL;
  op->active = op->again = 0;
  op->w.queued = 0;
  char rid[33];
  dlock__request_id(rid);
  int64_t lease = op->target > 1 ? -op->lease : op->lease;
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, h->key, h->name_len, h->field, h->fl, lease,
                                op->target, rid, dlock__apublish(a));
  dlock__areq *u = rc ? NULL : dlock__areq_eval_call(&k.send, undo_done, op);
  dlock__rel_call_free(&k);
  if (!u) {
    enosync(op, 0);
    return;
  }
  u->no_sync = 1;
  op->in_flight = 1;
  dlock__aconn_submit(&a->cmd, u);
}

static void attempt_done(dlock__areq *r, redisReply *reply, int err,
                         const char *why) {
  dlock__aop *op = r->arg;
  int unsynced = !err && r->unsynced;
  op->in_flight = 0;
  int64_t ttl = -1;
  int rc = err ? dlock__fail(err, "%s", why)
               : dlock__acq_reply(0, reply, op->h->key, &ttl);
  if (rc == 1 && unsynced) {
    undo_unsynced(op, r);
    dlock__areq_free(r);
    return;
  }
  dlock__areq_free(r);
  if (op->cancelling) {
    /* The attempt that confirms a hand-over the cancel found: the
     * engine's verdict (mutex.c's leave_queue too) -- held, or the wait
     * ends with its own code, whatever this attempt met. */
    if (dlock__eng_confirm_answer(rc) == DLOCK__WAIT_HELD)
      held(op);
    else
      end_kept(op);
    return;
  }
  if (rc == 0 && op->expired) { /* the deadline fired while in flight */
    timed_out(op);
    return;
  }
  /* The engine's verdict on the answer (mutex.c's wait loop follows it
   * too). No longest sleep: the event-loop client has only plain locks. */
  int64_t until = -1;
  switch (dlock__eng_wait_answer(rc, ttl, op->wait_ms, &op->w,
                                 dlock__async_now(), 0, &until)) {
  case DLOCK__WAIT_HELD:
    held(op);
    break;
  case DLOCK__WAIT_BUSY:
    complete(op, DLOCK_EBUSY, "lock '%s' is held elsewhere", op->h->key);
    break;
  case DLOCK__WAIT_SLEEP:
    taken(op, until);
    break;
  default: /* GONE, TIMED_OUT, FAILED, CANCEL: the wait ends */
    if (rc == 0)
      timed_out(op);
    else
      wait_end(op, rc, dlock_last_error());
    break;
  }
}

/* One acquire attempt (send_call). */
static void attempt(dlock__aop *op, int target, int queue) {
  op->target = target;
  if (send_call(op, target, queue, 0) != 0) {
    complete(op, DLOCK_ENOMEM, "out of memory");
    return;
  }
  op->w.queued |= queue;
}

static void lock_begin(dlock__aop *op) {
  dlock__ahold *h = op->h;
  int64_t now = dlock__async_now();
  int prior;
  int gone = dlock__eng_reenter(&h->h, now, &prior);
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
  if (op->sync_i == 0) { /* not a retry after DLOCK_ENOSYNC: same budget */
    if (op->wait_ms != 0)
      op->w.id = dlock__eng_wait_id();
    op->w.deadline = op->wait_ms > 0 ? now + op->wait_ms : -1;
    if (op->wait_ms > 0)
      dlock__async_timer(op->a, &op->deadline_t, op->w.deadline);
  }
  /* Not subscribed yet: the engine's rule says no queue (the plain lock
   * does not queue from the first attempt). */
  attempt(op, prior + 1, dlock__eng_wait_queue(op->wait_ms, 0, 0));
}

/* ---- unlock -----------------------------------------------------------------
 */

static void tomb_done(dlock__areq *r, redisReply *reply, int err,
                      const char *why) {
  (void)err;
  (void)why;
  dlock__areq_free(r);
  if (reply)
    freeReplyObject(reply);
}

static void resp_bulk(dlock__sb *b, const char *p, size_t n) {
  dlock__sb_add(b, "$", 1);
  dlock__sb_addu64(b, n);
  dlock__sb_add(b, "\r\n", 2);
  dlock__sb_add(b, p, n);
  dlock__sb_add(b, "\r\n", 2);
}

/* The tombstone of a final release sent more than once (the engine says
 * when): SET redisson_unlock_latch:{name}:<rid> 1 PX <life>, as the blocking
 * client's dlock__unlock_tombstone, so that a copy still in the network
 * cannot release the owner's next hold. Best effort: sent once, its answer
 * ignored. */
static void tomb_send(dlock_async *a, const dlock__ahold *h, const char *rid) {
  dlock__sb key, b;
  dlock__sb_init(&key);
  dlock__sb_init(&b);
  dlock__unlock_latch_key(&key, h->key, rid);
  char ts[24];
  size_t tl = dlock__fmt_i64(ts, dlock__tombstone_ttl(&a->cfg));
  dlock__sb_add(&b, "*5\r\n", 4);
  resp_bulk(&b, "SET", 3);
  resp_bulk(&b, key.p ? key.p : "", key.len);
  resp_bulk(&b, "1", 1);
  resp_bulk(&b, "PX", 2);
  resp_bulk(&b, ts, tl);
  dlock__areq *r = key.oom || b.oom ? NULL : dlock__calloc(1, sizeof *r);
  if (r && (r->cmd = dlock__malloc(b.len)) != NULL) {
    memcpy(r->cmd, b.p, b.len);
    r->len = b.len;
    r->fn = tomb_done;
    dlock__aconn_submit(&a->cmd, r);
  } else {
    free(r);
  }
  dlock__sb_free(&key);
  dlock__sb_free(&b);
}

static void unlock_done(dlock__areq *r, redisReply *reply, int err,
                        const char *why) {
  dlock__aop *op = r->arg;
  int resent = r->tries > 0; /* the retry policy sent it more than once */
  dlock__areq_free(r);
  dlock__ahold *h = op->h;
  dlock_async *a = op->a;
  int rc = err ? dlock__fail(err, "%s", why) : dlock__rel_reply(0, reply);
  int reported = h->h.lost; /* counted when the watchdog reported it */
  dlock__eng_rel_out o =
      dlock__eng_unlock_end(&h->h, &op->u, rc, resent, dlock__async_now());
  if (o.tombstone)
    tomb_send(a, h, op->u.rid);
  if (o.action == DLOCK__ENG_REL_FORGET && !reported)
    dlock__stat_add(&a->stats,
                    o.ran_out             ? DLOCK__ST_LOST_EXPIRED
                    : o.rc == DLOCK_ELOST ? DLOCK__ST_LOST_FORCED
                                          : DLOCK__ST_RELEASED,
                    1);
  /* (REL_PUT, holds of a newer generation, cannot happen here: the calls
   * of one record run one at a time.) */
  if (o.action == DLOCK__ENG_REL_FORGET)
    drop_hold(a, h);
  else if (o.action == DLOCK__ENG_REL_ONE && dlock__hold_drop_one(&h->h))
    dlock__awd_remove(a, h);
  if (o.rc == DLOCK_ELOST && !o.expired)
    complete(op, DLOCK_ELOST,
             "lock '%s' was lost while held (expired, deleted or taken)",
             h->key);
  else if (o.rc == DLOCK_ELOST)
    complete(op, DLOCK_ELOST,
             "lock '%s': its lease ran out before the unlock (local deadline "
             "passed; another owner may have held it)",
             h->key);
  else if (o.rc < 0) /* outcome unknown: the retry is its second copy */
    complete(op, o.rc, "%s", dlock_last_error());
  else
    complete(op, DLOCK_OK, "%s", "");
}

static void unlock_begin(dlock__aop *op) {
  dlock__ahold *h = op->h;
  dlock_async *a = op->a;
  int rc = dlock__eng_unlock_begin(&h->h, dlock__async_now(),
                                   a->cfg.watchdog_timeout_ms, &op->u);
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
  /* The count this unlock expects makes it idempotent by state, and a
   * retry after DLOCK_ECONN carries the same request id (the engine keeps
   * it in the record): it counts once (issue 26). */
  dlock__rel_call k;
  rc = dlock__rel_call_init(&k, h->key, h->name_len, h->field, h->fl,
                            op->u.lease, op->u.expected, op->u.rid,
                            dlock__apublish(a));
  dlock__areq *r = rc ? NULL : dlock__areq_eval_call(&k.send, unlock_done, op);
  dlock__rel_call_free(&k);
  if (!r) {
    h->h.releasing = 0;
    complete(op, DLOCK_ENOMEM, "out of memory");
    return;
  }
  op->in_flight = 1;
  dlock__aconn_submit(&a->cmd, r);
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
