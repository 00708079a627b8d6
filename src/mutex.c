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
 *      it holds the lock, no further round trip), a "0" says the lock is
 *      free (retry), the holder's TTL runs out (retry: pub/sub is at most
 *      once), or the caller's wait budget ends (leave the queue; if the lock
 *      was handed over meanwhile, keep it).
 *   What each answer means -- sleep until when, time out, leave the queue,
 *   keep a hand-over the cancel found, join the queue -- is the engine's
 *   (engine.h (f)): async_lock.c asks the same functions.
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
 * is confirmed against the local deadline: when the last attempt that saw the
 * lock taken is older than a quarter of the lease, one renewal round trip
 * gives the hold a fresh, provable deadline. With replica sync it is
 * confirmed by one more attempt instead (a write with its WAIT, as a direct
 * acquisition: a shortfall gives it back, DLOCK_ENOSYNC). A hold that the
 * cancel of an ended wait finds is taken by one more attempt too: it may be
 * a hand-over to an older wait of the thread, with that wait's lease.
 *
 * THE BUDGET bounds the call: the retries after DLOCK_ENOSYNC spend what is
 * left of it (trylock: none), and a timed wait outlives a server that is
 * away (a failover) until it ends, whatever the retry policy (rides_out).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int dlock__reply_int(const redisReply *r, long long *v) {
  *v = 0;
  if (r && r->type == REDIS_REPLY_INTEGER) {
    *v = r->integer;
    return 0;
  }
  if (r && r->type == REDIS_REPLY_STRING) {
    char *end;
    *v = strtoll(r->str, &end, 10);
    if (end != r->str && *end == '\0')
      return 0;
  }
  return dlock__fail(DLOCK_EPROTO, "unexpected reply type %d",
                     r ? r->type : -1);
}

/* ---- plain variant: scripts ---------------------------------------------- */

static void plain_channels(dlock_mutex *m, uint64_t tid, dlock__sb *channel,
                           dlock__sb *grant) {
  (void)tid;
  dlock__prefix_name(channel, "redisson_lock__channel", m->name);
  dlock__own_name(grant, "dlock_grant__channel", m->name);
  dlock__sb_add(grant, ":", 1);
  dlock__sb_add(grant, m->c->id, DLOCK__UUID_LEN);
}

/* ---- the plain scripts' calls (shared with the event-loop client) ------ */

/* "<field>|<lease>|<wait id>" and the wait id (16 hex digits). */
static size_t queue_entry(const char *field, size_t fl, int64_t lease,
                          uint64_t wait_id, char *entry, char wid[17]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++)
    wid[i] = hx[(wait_id >> (4 * (15 - i))) & 15];
  wid[16] = '\0';
  memcpy(entry, field, fl);
  size_t el = fl;
  entry[el++] = '|';
  el += dlock__fmt_i64(entry + el, lease);
  entry[el++] = '|';
  memcpy(entry + el, wid, 17);
  return el + 16;
}

/* A call's short form: its nk KEYS and na ARGV (with their lengths) copied
 * into s, and the view of them that is sent. */
static dlock__call short_call(dlock__short_argv *s, int script, int nk,
                              const char *const *k, const size_t *kl, int na,
                              const char *const *a, const size_t *al) {
  memcpy(s->keys, k, (size_t)nk * sizeof *k);
  memcpy(s->klens, kl, (size_t)nk * sizeof *kl);
  memcpy(s->args, a, (size_t)na * sizeof *a);
  memcpy(s->alens, al, (size_t)na * sizeof *al);
  return (dlock__call){script, nk, na, s->keys, s->klens, s->args, s->alens};
}

int dlock__acq_call_init(dlock__acq_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int target,
                         int64_t lease, int queue, const dlock__wait *w) {
  dlock__sb_init(&k->q);
  dlock__sb_init(&k->dl);
  dlock__sb_init(&k->mk);
  dlock__own_name(&k->q, "dlock_lock_queue", name);
  dlock__own_name(&k->dl, "dlock_lock_waits", name);
  dlock__own_name(&k->mk, "dlock_lock_granted", name);
  memcpy(k->field, field, fl + 1);
  k->fl = fl;
  k->el = queue_entry(field, fl, lease, w->id, k->entry, k->wid);
  size_t lsl = dlock__fmt_i64(k->ls, lease);
  size_t tsl = dlock__fmt_i64(k->ts, target);
  /* How long the entry may be handed the lock: the engine's rule (an
   * entry left behind by a cancel that failed dies with the wait). The
   * clock is read only for a wait with a deadline (the fast path's lock
   * has none). */
  int64_t left =
      dlock__eng_entry_ttl(w->deadline, w->deadline >= 0 ? dlock__now_ms() : 0);
  size_t dsl = dlock__fmt_i64(k->ds, left);
  const char *keys[4] = {name, k->q.p, k->dl.p, k->mk.p};
  size_t klens[4] = {name_len, k->q.len, k->dl.len, k->mk.len};
  const char *args[8] = {k->ls,    k->field,
                         k->ts,    queue ? "1" : "0",
                         k->entry, w->queued ? "1" : "0",
                         k->ds,    k->wid};
  size_t alens[8] = {lsl, fl, tsl, 1, k->el, 1, dsl, 16};
  memcpy(k->keys, keys, sizeof keys);
  memcpy(k->klens, klens, sizeof klens);
  memcpy(k->args, args, sizeof args);
  memcpy(k->alens, alens, sizeof alens);
  /* The cancel script's ARGV: field, entry, wait id. */
  k->cargs[0] = k->field;
  k->cargs[1] = k->entry;
  k->cargs[2] = k->wid;
  k->calens[0] = fl;
  k->calens[1] = k->el;
  k->calens[2] = 16;
  if (target == 1 && !queue && !w->queued) {
    const char *sk[2] = {name, k->mk.p}, *sa[2] = {k->ls, k->field};
    size_t skl[2] = {name_len, k->mk.len}, sal[2] = {lsl, fl};
    k->send =
        short_call(&k->sh, DLOCK__S_ACQUIRE_FIRST, 2, sk, skl, 2, sa, sal);
  } else {
    k->send = (dlock__call){DLOCK__S_ACQUIRE, 4,       8,       k->keys,
                            k->klens,         k->args, k->alens};
  }
  return k->q.oom || k->dl.oom || k->mk.oom
             ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : 0;
}

void dlock__acq_call_free(dlock__acq_call *k) {
  dlock__sb_free(&k->q);
  dlock__sb_free(&k->dl);
  dlock__sb_free(&k->mk);
}

int dlock__rel_call_init(dlock__rel_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int64_t lease,
                         int expected, const char *rid, const char *pub) {
  dlock__sb_init(&k->ch);
  dlock__sb_init(&k->tomb);
  memcpy(k->rid, rid, 32);
  k->rid[32] = '\0';
  dlock__unlock_latch_key(&k->tomb, name, k->rid);
  dlock__sb_init(&k->gp);
  dlock__sb_init(&k->q);
  dlock__sb_init(&k->dl);
  dlock__sb_init(&k->mk);
  dlock__own_name(&k->q, "dlock_lock_queue", name);
  dlock__own_name(&k->dl, "dlock_lock_waits", name);
  dlock__own_name(&k->mk, "dlock_lock_granted", name);
  dlock__prefix_name(&k->ch, "redisson_lock__channel", name);
  dlock__own_name(&k->gp, "dlock_grant__channel", name);
  memcpy(k->field, field, fl + 1);
  size_t lsl = dlock__fmt_i64(k->ls, lease);
  size_t esl = dlock__fmt_i64(k->es, expected);
  const char *keys[7] = {name,    k->ch.p, k->q.p,   k->gp.p,
                         k->dl.p, k->mk.p, k->tomb.p};
  size_t klens[7] = {name_len,  k->ch.len, k->q.len,   k->gp.len,
                     k->dl.len, k->mk.len, k->tomb.len};
  const char *args[6] = {"0", k->ls, k->field, pub, k->es, k->rid};
  size_t alens[6] = {1, lsl, fl, strlen(pub), esl, 32};
  memcpy(k->keys, keys, sizeof keys);
  memcpy(k->klens, klens, sizeof klens);
  memcpy(k->args, args, sizeof args);
  memcpy(k->alens, alens, sizeof alens);
  k->nkeys = 7;
  k->nargs = 6;
  if (expected == 1) {
    const char *sk[4] = {name, k->ch.p, k->q.p, k->tomb.p};
    size_t skl[4] = {name_len, k->ch.len, k->q.len, k->tomb.len};
    const char *sa[2] = {k->field, pub};
    size_t sal[2] = {fl, alens[3]};
    k->send = short_call(&k->sh, DLOCK__S_UNLOCK_LAST, 4, sk, skl, 2, sa, sal);
  } else {
    k->send = (dlock__call){DLOCK__S_UNLOCK, 7,       6,       k->keys,
                            k->klens,        k->args, k->alens};
  }
  return k->ch.oom || k->gp.oom || k->q.oom || k->dl.oom || k->mk.oom ||
                 k->tomb.oom
             ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : 0;
}

void dlock__rel_call_free(dlock__rel_call *k) {
  dlock__sb_free(&k->ch);
  dlock__sb_free(&k->gp);
  dlock__sb_free(&k->q);
  dlock__sb_free(&k->dl);
  dlock__sb_free(&k->mk);
  dlock__sb_free(&k->tomb);
}

int64_t dlock__tombstone_ttl(const dlock_config *cfg) {
  /* Far past the retry policy: a copy still in the network (a reply
   * timeout closed its connection before the server read it) arrives
   * within seconds; a minute at least. */
  int64_t t = ((int64_t)cfg->command_timeout_ms + dlock__retry_pause_max(cfg)) *
              (cfg->retry_attempts + 1) * 4;
  return t < 60000 ? 60000 : t;
}

void dlock__unlock_tombstone(dlock_client *c, const char *name,
                             const char *rid) {
  dlock__sb key;
  dlock__sb_init(&key);
  dlock__unlock_latch_key(&key, name, rid);
  char ts[24];
  size_t tl = dlock__fmt_i64(ts, dlock__tombstone_ttl(&c->cfg));
  const char *av[5] = {"SET", key.p, "1", "PX", ts};
  size_t al[5] = {3, key.len, 1, 2, tl};
  dlock__cmd cmd = {key.p, NULL, 5, av, al, 0};
  redisReply *r = NULL;
  dlock__err_keep_begin();
  if (!key.oom && dlock__exec(c, &cmd, &r) == 0)
    freeReplyObject(r);
  dlock__err_keep_end();
  dlock__sb_free(&key);
}

int dlock__decline_call_init(dlock__rel_call *k, const char *name,
                             size_t name_len, const char *field, size_t fl,
                             const char *wid, const char *pub) {
  static const char no_rid[33] = "00000000000000000000000000000000";
  int rc =
      dlock__rel_call_init(k, name, name_len, field, fl, 0, 1, no_rid, pub);
  memcpy(k->mark, field, fl);
  k->mark[fl] = '|';
  memcpy(k->mark + fl + 1, wid, 17);
  k->args[0] = "0";
  k->alens[0] = 1;
  k->args[1] = k->field;
  k->alens[1] = fl;
  k->args[2] = k->mark;
  k->alens[2] = fl + 17;
  k->args[3] = pub;
  k->alens[3] = strlen(pub);
  return rc;
}

int dlock__decline_send(dlock_client *c, const dlock__decline *d) {
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, d->tid, field);
  dlock__rel_call k;
  int rc = dlock__decline_call_init(&k, d->name, strlen(d->name), field, fl,
                                    d->wid, dlock__publish_cmd(c));
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval(c, dlock__core_script(DLOCK__S_DECLINE), k.nkeys, k.keys,
                     k.klens, 4, k.args, k.alens, &r);
  dlock__rel_call_free(&k);
  long long v = 0;
  rc = dlock__take_int(rc, r, &v, NULL);
  return rc ? rc : v == 1;
}

int dlock__acq_reply(int rc, redisReply *r, const char *name, int64_t *ttl) {
  long long v = 0;
  int nil = 0;
  if ((rc = dlock__take_int(rc, r, &v, &nil)) != 0)
    return rc;
  if (nil)
    return 1;
  if (v == -3)
    return dlock__reacquired_in_vain("lock", name);
  *ttl = v;
  return 0;
}

int dlock__rel_reply(int rc, redisReply *r) {
  long long v = 0;
  int nil = 0;
  if ((rc = dlock__take_int(rc, r, &v, &nil)) != 0)
    return rc;
  return nil ? DLOCK_ELOST : (v == 1 ? 1 : 0);
}

int dlock__reacquired_in_vain(const char *kind, const char *name) {
  return dlock__fail(DLOCK_ELOST,
                     "%s '%s': this thread's hold is gone (expired or "
                     "deleted) -- it was re-acquired in vain",
                     kind, name);
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

static int plain_release(dlock_mutex *m, uint64_t tid, int64_t lease,
                         int expected, const char *rid) {
  dlock_client *c = m->c;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, tid, field);
  if (atomic_load(&c->spin_fell_back)) /* no pub/sub: spin.c */
    return dlock__spin_release(m, tid, lease, expected, rid, 1);
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, m->name, m->name_len, field, fl, lease,
                                expected, rid, dlock__publish_cmd(c));
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval_call(c, &k.send, &r);
  dlock__rel_call_free(&k);
  rc = dlock__rel_reply(rc, r);
  return rc < 0 && expected == 1 ? dlock__spin_unlock_refused(m, tid, rc) : rc;
}

static int plain_cancel(dlock_mutex *m, uint64_t tid, int64_t lease,
                        int64_t wait_ms, uint64_t *token,
                        const dlock__wait *w) {
  (void)wait_ms;
  (void)token;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(m->c, tid, field);
  dlock__acq_call k;
  int rc =
      dlock__acq_call_init(&k, m->name, m->name_len, field, fl, 1, lease, 0, w);
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval(m->c, dlock__core_script(DLOCK__S_CANCEL), 4, k.keys,
                     k.klens, 3, k.cargs, k.calens, &r);
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
                                           NULL};

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
  if ((rc = dlock__reg_attach(c, name, n, ops, &m->e)) != 0) {
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
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = dlock__hold_get(m->e, tid);
  if (!h) {
    pthread_mutex_unlock(&c->reg.mu);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  if (h->count == 0 && tid == dlock__tid())
    dlock__thread_note(c); /* thread exit: see holds.c */
  dlock__info_want(c);     /* a holder says who it is: clientinfo.c */
  if (h->count == 0)
    dlock__info_since_later(c); /* ... and since when, if it lasts */
  dlock__hold_note(h, target, wd, lease, sent, token);
  if (wd)
    dlock__wd_add(c, h);
  pthread_mutex_unlock(&c->reg.mu);
  return 0;
}

int dlock__mutex_local_count(dlock_mutex *m) {
  dlock_client *c = m->c;
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int n = h && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->reg.mu);
  return n;
}

/* Confirms a hold the server handed to this thread while it waited (a
 * grant, or a cancel that found the lock ours): the hand-over happened
 * after `base` (the send time of an attempt that found the lock taken), so
 * base + lease bounds the key's TTL from below. When base is too old for
 * that bound to be useful, renew once and use the renewal's send time.
 * Returns 1 held (*sent set), 0 the hold is not there, or a negative code. */
static int confirm_handover(dlock_mutex *m, uint64_t tid, int64_t lease,
                            int64_t base, int64_t *sent) {
  int64_t now = dlock__now_ms();
  if (now - base <= lease / 4) {
    *sent = base;
    return 1;
  }
  char field[DLOCK__FIELD_MAX], ls[24];
  size_t fl = dlock__field(m->c, tid, field);
  const char *sfx = m->ops->field_suffix ? m->ops->field_suffix : "";
  size_t sl = strlen(sfx);
  if (fl + sl >= sizeof field)
    return dlock__fail(DLOCK_EINVAL, "field too long");
  memcpy(field + fl, sfx, sl + 1);
  size_t lsl = dlock__fmt_i64(ls, lease);
  const char *keys[1] = {m->name};
  size_t klens[1] = {m->name_len};
  const char *args[2] = {ls, field};
  size_t alens[2] = {lsl, fl + sl};
  redisReply *r = NULL;
  int rc = dlock__eval(m->c, dlock__core_script(DLOCK__S_RENEW), 1, keys, klens,
                       2, args, alens, &r);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  int ok = r->type == REDIS_REPLY_STRING && r->len == 1;
  int held = ok && r->str[0] == '1';
  freeReplyObject(r);
  if (!ok)
    return dlock__fail(DLOCK_EPROTO, "lock '%s': unexpected renewal reply",
                       m->name);
  *sent = now;
  return held;
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
  dlock__wait w;
  int64_t ttl;    /* the holder's PTTL from the last attempt; -1 unknown */
  uint64_t token; /* fenced locks */
  int64_t sent;   /* send time of the attempt that decides the hold */
  dlock__slot slot;
  dlock__sub *sub;    /* joined wait entry, or NULL */
  int active;         /* its subscription is confirmed */
  int joined;         /* joined before the first attempt (queued with it) */
  int away;           /* the last attempt met a passing failure (rides_out) */
  char away_why[512]; /* ... and its message */
  int waited;         /* the call entered the wait loop (counters) */
  int handover;       /* the lock came by a hand-over grant (counters) */
} acq;

/* "lock 'name'" for messages. */
static const char *lock_what(const dlock_mutex *m, char *buf, size_t n) {
  snprintf(buf, n, "lock '%.250s'", m->name);
  return buf;
}

/* Why a wait must end now (the budget's verdict, worded), or 0. */
static int wait_over(const acq *a) {
  char what[300];
  int rc = dlock__budget_over(&a->b, lock_what(a->m, what, sizeof what));
  if (rc == DLOCK_ETIMEDOUT && a->away)
    return dlock__fail(a->away,
                       "%s (lock '%s': still so when the wait of %lld "
                       "ms ended)",
                       a->away_why, a->m->name, a->b.wait_ms);
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "lock '%s' still held elsewhere after %lld ms",
                       a->m->name, a->b.wait_ms);
  return rc;
}

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
  a->w.deadline = a->b.deadline;
  if (wait_ms != 0)
    a->w.id = dlock__eng_wait_id();
  a->slot.wait_id = a->w.id;
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, a->tid);
  int gone = dlock__eng_reenter(h, a->b.started, &a->prior);
  if (gone) {
    int was_lost = gone == DLOCK__ENG_RAN_OUT ? 0 : gone;
    if (!was_lost)
      lost_expired(c, m->name);
    drop_hold(c, h);
    pthread_mutex_unlock(&c->reg.mu);
    if (was_lost)
      return dlock__fail(DLOCK_ELOST,
                         "lock '%s': this thread's hold was lost: %s", m->name,
                         dlock__lost_why(was_lost));
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': this thread's hold ran out of lease (its "
                       "local deadline passed)",
                       m->name);
  }
  pthread_mutex_unlock(&c->reg.mu);
  return 0;
}

/* One attempt of the call (target = the hold count after it); queue = join
 * the server's wait queue if the lock is taken. 1 held, 0 taken, < 0. */
static int attempt(acq *a, int target, int queue) {
  int64_t left = a->b.wait_ms == 0 ? 0 : dlock__budget_left(&a->b);
  a->sent = dlock__now_ms();
  int rc = a->m->ops->attempt(a->m, a->tid, target, a->lease, queue, left,
                              &a->ttl, &a->token, &a->w);
  a->w.queued |= queue;
  return rc;
}

/* The first attempt. When this client is already subscribed to the lock
 * (other local waiters, or a lingering subscription), it registers as a
 * waiter first and joins the server's queue with this very attempt. */
static int first_attempt(acq *a) {
  dlock_mutex *m = a->m;
  if (a->b.wait_ms != 0 && !dlock__spins(m) &&
      atomic_load_explicit(&a->c->ps.n_subs, memory_order_relaxed) > 0) {
    dlock__sb ch, gr;
    dlock__sb_init(&ch);
    dlock__sb_init(&gr);
    m->ops->channels(m, a->tid, &ch, &gr);
    if (!ch.oom && !gr.oom &&
        dlock__sub_join_active(a->c, ch.p, &a->slot, &a->sub))
      a->active = a->joined = 1;
    dlock__sb_free(&ch);
    dlock__sb_free(&gr);
  }
  return attempt(
      a, a->prior + 1,
      dlock__eng_wait_queue(a->b.wait_ms, a->joined, m->ops->queue_first));
}

/* Whether the wait's next attempt joins the hand-over queue (the engine's
 * rule, the event-loop client's too). */
static int queue_flag(const acq *a) {
  return dlock__eng_wait_queue(a->b.wait_ms, a->active, a->m->ops->queue_first);
}

/* Subscribes for the wait (unless first_attempt joined already). */
static int subscribe(acq *a) {
  if (a->sub)
    return 0;
  dlock__sb ch, gr;
  dlock__sb_init(&ch);
  dlock__sb_init(&gr);
  a->m->ops->channels(a->m, a->tid, &ch, &gr);
  int rc = ch.oom || gr.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                            : dlock__sub_join(a->c, ch.p, gr.len ? gr.p : NULL,
                                              a->m->ops->wake_policy, &a->slot,
                                              &a->sub, &a->active);
  dlock__sb_free(&ch);
  dlock__sb_free(&gr);
  return rc;
}

/* A failure that a waiting call outlives: the server away for a while (a
 * connection refused or timed out, no master found through the sentinels
 * during a failover, a failover's READONLY, LOADING or MASTERDOWN). A call
 * with a finite wait budget that holds nothing keeps trying -- each try
 * resolves the master again, and the subscriber reconnects and subscribes
 * again by itself -- until the budget ends, and then reports the failure
 * (wait_over). Records it and returns 1, or 0 (the call ends with rc). */
static int rides_out(acq *a, int rc) {
  if (a->b.wait_ms <= 0 || a->prior > 0)
    return 0;
  if (rc != DLOCK_ECONN &&
      (rc != DLOCK_EREDIS || !dlock__retryable_reply(dlock_last_error())))
    return 0;
  a->away = rc;
  snprintf(a->away_why, sizeof a->away_why, "%s", dlock_last_error());
  /* the next try after a wake-up (the subscription made again) or this */
  a->ttl = a->c->cfg.retry_interval_ms > 10 ? a->c->cfg.retry_interval_ms : 10;
  return 1;
}

/* Sleeps until a wake-up, the holder's TTL, the kind's longest sleep or
 * the deadline -- the engine's verdict on the last answer (taken, a->ttl)
 * at the time of the sleep (dlock__eng_wait_answer), the event-loop
 * client's too. 1 held (a grant, confirmed), 0 go on, or a code. */
static int sleep_once(acq *a) {
  int64_t until = -1;
  if (dlock__eng_wait_answer(0, a->ttl, a->b.wait_ms, &a->w, dlock__now_ms(),
                             a->m->ops->max_sleep_ms,
                             &until) != DLOCK__WAIT_SLEEP) {
    int rc = wait_over(a); /* the deadline passed */
    return rc ? rc
              : dlock__fail(DLOCK_ETIMEDOUT,
                            "lock '%s' still held elsewhere after %lld ms",
                            a->m->name, a->b.wait_ms);
  }
  int granted = 0;
  dlock__sub_wait(a->c, a->sub, &a->slot, until, &granted, &a->active);
  if (a->slot.failed) {
    char what[300];
    return dlock__sub_error(a->c, a->sub, lock_what(a->m, what, sizeof what));
  }
  if (!granted)
    return 0;
  a->handover = 1;
  /* The unlock script made us the owner (this wait's grant). With replica
   * sync the hand-over is confirmed like a direct acquisition: by a write
   * with a WAIT behind it -- one more attempt, which finds the field and
   * takes the lock as this call's own (the unlocker's WAIT covered its
   * connection, not this one; acquire_once undoes a shortfall). Without
   * it (or with no replica to wait for: a plain server pays nothing), by
   * the local deadline (confirm_handover). Gone already (the lease ran out
   * before we could confirm): wait on. */
  if (dlock__sync_want(a->c, a->m->name) > 0)
    return attempt(a, 1, queue_flag(a));
  return confirm_handover(a->m, a->tid, a->lease, a->sent, &a->sent);
}

/* One try of a wait without pub/sub (dlock__spin_wait, spin.c): never
 * queued (nobody hands the lock over). 1 held, 0 go on, or a code. */
static int spin_round(void *arg) {
  acq *a = arg;
  if (atomic_load(&a->c->closing) || dlock__budget_canceled(&a->b))
    return wait_over(a);
  int rc = attempt(a, 1, 0);
  if (rc == 1 || (rc < 0 && !rides_out(a, rc)))
    return rc;
  if (rc == 0)
    a->away = 0; /* the server answered: taken */
  return wait_over(a);
}

/* The contended part: waits for a hand-over or a wake-up, then attempts
 * again. 1 held, or a negative code. */
static int wait_loop(acq *a) {
  /* A waiter says who it is (clientinfo.c) -- from here, not from the
   * first attempt: a call that never waits nor holds (a failed trylock,
   * an acquisition undone for DLOCK_ENOSYNC) leaves no info key behind. */
  pthread_mutex_lock(&a->c->reg.mu);
  dlock__info_want(a->c);
  pthread_mutex_unlock(&a->c->reg.mu);
  a->waited = 1;
  int rc = subscribe(a);
  if (rc)
    return rc;
  /* Joined early (already queued), not yet subscribed, or the first
   * attempt failed: wait first. */
  for (int wait = a->joined || !a->active || a->away;; wait = 1) {
    /* The budget's verdict ends the call as it is (never ridden out). */
    if (wait && (rc = wait_over(a)) != 0)
      return rc;
    rc = wait ? sleep_once(a) : 0;
    if (rc == DLOCK_EAUTH && a->slot.failed && dlock__spin_fall_back(a->m)) {
      dlock__sub_leave(a->c, a->sub, &a->slot); /* SUBSCRIBE refused */
      a->sub = NULL;
      return dlock__spin_wait(&a->b, spin_round, a);
    }
    if (rc == 0 && wait && (rc = wait_over(a)) != 0)
      return rc;
    if (rc == 0)
      rc = attempt(a, 1, queue_flag(a));
    if (rc == 0)
      a->away = 0; /* the server answered: taken */
    else if (rc == 1 || !rides_out(a, rc))
      return rc;
  }
}

/* After a wait that ended without the lock: leaves the server's queue. If
 * the lock was handed to us meanwhile we keep it (1: the wait ended with
 * the lock held); the call's own error stays the one reported. The hold
 * found may be a hand-over to an older wait of this thread whose cancel
 * never ran, with that wait's (shorter) lease: its deadline is never this
 * call's lease counted from an earlier send. One more attempt takes the
 * lock as this call's own -- its lease from the attempt's send time, and
 * with replica sync its WAIT -- or finds it gone (expired meanwhile). */
static int leave_queue(acq *a) {
  dlock__err_keep_begin();
  int cr = a->m->ops->cancel(a->m, a->tid, a->lease, dlock__budget_left(&a->b),
                             &a->token, &a->w);
  a->w.queued = 0;
  /* The engine's verdicts on the cancel's answer and on the attempt that
   * confirms a hand-over it found (the event-loop client's too): the
   * call's own error stays the one reported otherwise. */
  int held = dlock__eng_cancel_answer(cr) == DLOCK__WAIT_CONFIRM &&
             dlock__eng_confirm_answer(attempt(a, 1, 0)) == DLOCK__WAIT_HELD;
  dlock__err_keep_end();
  a->handover |= held;
  return held;
}

/* The acquisition a just made was not confirmed by the replicas (sync.c):
 * gives it back with the kind's unlock (reentrant: the count goes back to
 * prior, the TTL is never shortened), so nothing of it stays behind. Returns
 * DLOCK_ENOSYNC; a failed undo leaves the lease to end it. */
static int undo_unsynced(acq *a, const char *why) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s", why);
  dlock__err_keep_begin();
  dlock__sync_pause(1);
  int64_t lease = a->prior > 0 ? -a->lease : a->lease;
  /* The count after the acquisition being undone: the script writes prior
   * (or releases), however often it is sent. */
  char rid[33];
  dlock__request_id(rid);
  int rc = a->m->ops->release(a->m, a->tid, lease, a->prior + 1, rid);
  if (rc == DLOCK_ELOST && a->prior == 0 && dlock__exec_sends() > 1)
    rc = 1; /* a copy of this release found what an earlier one left */
  dlock__sync_pause(0);
  dlock__err_keep_end();
  dlock__stat_add(&a->c->stats, DLOCK__ST_ENOSYNC, 1);
  dlock__log(&a->c->cfg, DLOCK_LOG_WARN, a->m->name, "enosync",
             "acquisition undone: %s", msg);
  return dlock__fail(
      DLOCK_ENOSYNC, "lock '%s': %s; the acquisition was undone%s", a->m->name,
      msg, rc >= 0 ? "" : " (the undo failed: the lease ends it)");
}

/* A successful acquire call (its hold recorded). */
static void count_acquired(const acq *a) {
  dlock__stats *s = &a->c->stats;
  if (a->prior > 0) {
    dlock__stat_add(s, DLOCK__ST_REENTERED, 1);
    return;
  }
  dlock__stat_add(s, DLOCK__ST_ACQUIRED, 1);
  dlock__stat_add(
      s, a->handover ? DLOCK__ST_ACQUIRED_HANDOVER : DLOCK__ST_ACQUIRED_DIRECT,
      1);
  int64_t waited = 0;
  if (a->waited) {
    waited = dlock__now_ms() - a->b.started;
    dlock__stat_wait(s, waited);
  }
  if (dlock__log_on(&a->c->cfg, DLOCK_LOG_DEBUG))
    dlock__log(
        &a->c->cfg, DLOCK_LOG_DEBUG, a->m->name, "acquired",
        "acquired %s%s (lease %lld ms%s, waited %lld ms)",
        a->handover ? "by hand-over" : "directly",
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
  rc = first_attempt(&a);
  if (rc < 0 && rides_out(&a, rc))
    rc = 0; /* wait (subscribed) and try again */
  int64_t until;
  if (rc == 0 && dlock__eng_wait_answer(0, a.ttl, wait_ms, &a.w, a.sent, 0,
                                        &until) == DLOCK__WAIT_BUSY)
    rc = dlock__fail(DLOCK_EBUSY, "lock '%s' is held elsewhere", m->name);
  else if (rc == 0) {
    void *note = dlock__note_wait(a.c, m->name, a.tid); /* the info key */
    rc = dlock__spins(m) ? dlock__spin_wait(&a.b, spin_round, &a)
                         : wait_loop(&a);
    dlock__note_wait_end(a.c, note);
  }
  if (a.sub)
    dlock__sub_leave(a.c, a.sub, &a.slot);
  if (rc == DLOCK_ELOST) {
    pthread_mutex_lock(&a.c->reg.mu);
    dlock__hold *h = find_hold(m, a.tid);
    if (h && h->count > 0 && !h->lost)
      lost_found(a.c, m->name, "a reentrant acquire");
    if (h)
      drop_hold(a.c, h);
    pthread_mutex_unlock(&a.c->reg.mu);
    return rc;
  }
  /* An attempt may have queued us before its reply was lost, or the wait
   * ended queued: leave the queue, so the lock is never handed to a thread
   * not waiting -- on every end, the engine's rule (dlock__eng_wait_end).
   * (A first attempt of a reentrant hold never queues.) */
  if (rc < 0 && a.prior == 0 && a.m->ops->cancel &&
      dlock__eng_wait_end(rc, &a.w) == DLOCK__WAIT_CANCEL && leave_queue(&a))
    rc = 1;
  const char *why = NULL;
  if (rc == 1 && dlock__sync_short(&why))
    return undo_unsynced(&a, why);
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
static int acquire(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  dlock__budget b;
  b.c = NULL; /* started by the first try */
  int64_t prev = 0;
  for (int i = 0;; i++) {
    int rc = acquire_once(m, wait_ms, lease_ms, &b);
    if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED)
      dlock__stat_add(
          &m->c->stats,
          rc == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
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

/* One unlock call: the engine's view of it (request id, expected count,
 * send time) and the record. */
typedef struct rel {
  dlock__hold *h;
  dlock__eng_unlock u;
  int tombstone; /* a final release sent more than once: write its tomb */
} rel;

/* Finds the thread's hold and prepares the unlock (reg.mu held). 0 or a
 * code (the hold is not there, or was lost: then it is dropped). */
static int rel_begin(dlock_mutex *m, uint64_t tid, rel *r) {
  dlock_client *c = m->c;
  dlock__hold *h = find_hold(m, tid);
  int rc = dlock__eng_unlock_begin(h, dlock__now_ms(),
                                   c->cfg.watchdog_timeout_ms, &r->u);
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
  r->tombstone = o.tombstone;
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
  if (o.rc == DLOCK_ELOST && !o.expired)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s' was lost while held (expired, deleted or "
                       "taken)",
                       m->name);
  if (o.rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': its lease ran out before the unlock (local "
                       "deadline passed; another owner may have held it)",
                       m->name);
  return o.rc;
}

int dlock__mutex_release(dlock_mutex *m) {
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  const uint64_t tid = dlock__tid();
  rel r;
  memset(&r, 0, sizeof r);
  pthread_mutex_lock(&c->reg.mu);
  rc = rel_begin(m, tid, &r);
  pthread_mutex_unlock(&c->reg.mu);
  if (rc)
    return rc;
  rc = m->ops->release(m, tid, r.u.lease, r.u.expected, r.u.rid);
  int sends = dlock__exec_sends();
  pthread_mutex_lock(&c->reg.mu);
  rc = rel_end(m, &r, rc, sends);
  pthread_mutex_unlock(&c->reg.mu);
  if (r.tombstone)
    dlock__unlock_tombstone(c, m->name, r.u.rid);
  return rc;
}

/* The prologue of a public call on m: clears the error, checks m and its
 * client. */
static int check_mutex(dlock_mutex *m) {
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  return dlock__client_check(m->c);
}

int dlock_mutex_force_unlock(dlock_mutex *m) {
  int rc = check_mutex(m);
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
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int st = !h || h->count == 0 ? -1 : dlock__eng_valid(h, now);
  if (left)
    *left = st == 1 ? h->valid_until - now : 0;
  pthread_mutex_unlock(&c->reg.mu);
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
  size_t fl = dlock__field(m->c, dlock__tid(), field);
  long long v = 0;
  int rc = simple_int(m, "HGET", field, fl, &v);
  return rc ? rc : (int)v;
}

int dlock_mutex_ttl(dlock_mutex *m, long long *ttl_ms) {
  if (!ttl_ms)
    return dlock__fail(DLOCK_EINVAL, "ttl_ms is NULL");
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
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int held = h && h->count > 0;
  if (held)
    *token = h->token;
  pthread_mutex_unlock(&c->reg.mu);
  return held ? 0
              : dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                            m->name);
}
