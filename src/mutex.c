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
 * gives the hold a fresh, provable deadline.
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
  /* How long the entry may be handed the lock: until the wait's deadline
   * (an entry left behind by a cancel that failed dies with it). */
  int64_t left = 0;
  if (w->deadline >= 0) {
    left = w->deadline - dlock__now_ms();
    if (left < 1)
      left = 1;
  }
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
                         int64_t latch_ttl_ms, const char *rid,
                         const char *prev_rid, const char *pub) {
  dlock__sb_init(&k->ch);
  dlock__sb_init(&k->latch);
  dlock__sb_init(&k->gp);
  dlock__sb_init(&k->prev);
  dlock__sb_init(&k->q);
  dlock__sb_init(&k->dl);
  dlock__sb_init(&k->mk);
  dlock__own_name(&k->q, "dlock_lock_queue", name);
  dlock__own_name(&k->dl, "dlock_lock_waits", name);
  dlock__own_name(&k->mk, "dlock_lock_granted", name);
  dlock__prefix_name(&k->ch, "redisson_lock__channel", name);
  dlock__unlock_latch_key(&k->latch, name, rid);
  if (prev_rid)
    dlock__unlock_latch_key(&k->prev, name, prev_rid);
  dlock__own_name(&k->gp, "dlock_grant__channel", name);
  memcpy(k->field, field, fl + 1);
  size_t lsl = dlock__fmt_i64(k->ls, lease);
  size_t ltl = dlock__fmt_i64(k->lt, latch_ttl_ms);
  const char *keys[8] = {name,    k->ch.p, k->latch.p, k->q.p,
                         k->gp.p, k->dl.p, k->mk.p,    k->prev.p};
  size_t klens[8] = {name_len,  k->ch.len, k->latch.len, k->q.len,
                     k->gp.len, k->dl.len, k->mk.len,    k->prev.len};
  const char *args[5] = {"0", k->ls, k->field, pub, k->lt};
  size_t alens[5] = {1, lsl, fl, strlen(pub), ltl};
  memcpy(k->keys, keys, sizeof keys);
  memcpy(k->klens, klens, sizeof klens);
  memcpy(k->args, args, sizeof args);
  memcpy(k->alens, alens, sizeof alens);
  k->nkeys = prev_rid ? 8 : 7;
  return k->ch.oom || k->latch.oom || k->gp.oom || k->prev.oom || k->q.oom ||
                 k->dl.oom || k->mk.oom
             ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : 0;
}

void dlock__rel_call_free(dlock__rel_call *k) {
  dlock__sb_free(&k->ch);
  dlock__sb_free(&k->latch);
  dlock__sb_free(&k->gp);
  dlock__sb_free(&k->prev);
  dlock__sb_free(&k->q);
  dlock__sb_free(&k->dl);
  dlock__sb_free(&k->mk);
}

int dlock__decline_call_init(dlock__rel_call *k, const char *name,
                             size_t name_len, const char *field, size_t fl,
                             const char *wid, const char *pub) {
  static const char no_rid[33] = "00000000000000000000000000000000";
  int rc = dlock__rel_call_init(k, name, name_len, field, fl, 0, 1, no_rid,
                                NULL, pub);
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
    rc = dlock__eval(m->c, dlock__core_script(DLOCK__S_ACQUIRE), 4, k.keys,
                     k.klens, 8, k.args, k.alens, &r);
  dlock__acq_call_free(&k);
  return dlock__acq_reply(rc, r, m->name, ttl);
}

static int plain_release(dlock_mutex *m, uint64_t tid, int64_t lease,
                         const char *rid, const char *prev_rid) {
  dlock_client *c = m->c;
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, tid, field);
  dlock__rel_call k;
  int rc = dlock__rel_call_init(&k, m->name, m->name_len, field, fl, lease,
                                c->latch_ttl_ms, rid, prev_rid,
                                dlock__publish_cmd(c));
  redisReply *r = NULL;
  if (!rc)
    rc = dlock__eval(c, dlock__core_script(DLOCK__S_UNLOCK), k.nkeys, k.keys,
                     k.klens, 5, k.args, k.alens, &r);
  dlock__rel_call_free(&k);
  return dlock__rel_reply(rc, r);
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
  h->count = 0;
  h->wd_count = 0;
  h->lost = 0;
  h->unlock_rid_count = 0;
  h->gen++;
  dlock__wd_remove(c, h);
  dlock__hold_put(c, h);
}

int64_t dlock__lease_margin(int64_t lease) { return lease / 100 + 2; }

void dlock__hold_note(dlock__hold *h, int target, int wd, int64_t lease,
                      int64_t sent, uint64_t token) {
  int64_t until = sent + lease - dlock__lease_margin(lease);
  if (h->count == 0) {
    h->gen++;
    h->unlock_rid_count = 0;
    h->wd_count = 0;
    h->fixed_bits = 0;
    h->lost = 0;
    h->renewed_at = sent;
    h->valid_until = until;
    h->since_ms = dlock__wall_ms();
  } else if (until > h->valid_until) {
    /* A reentrant acquire never shortens the key's TTL (scripts.c). */
    h->valid_until = until;
  }
  h->count = target;
  h->token = token;
  if (target >= 1 && target <= 64) {
    uint64_t bit = (uint64_t)1 << (target - 1);
    h->fixed_bits = wd ? h->fixed_bits & ~bit : h->fixed_bits | bit;
  }
  if (wd)
    h->wd_count++;
  else
    h->lease_ms = lease;
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
    dlock__info_soon(c); /* ... and since when it holds */
  dlock__hold_note(h, target, wd, lease, sent, token);
  if (wd)
    dlock__wd_add(c, h);
  pthread_mutex_unlock(&c->reg.mu);
  return 0;
}

/* 1 if the hold number idx+1 has a fixed lease (reg.mu held). */
static int hold_is_fixed(const dlock__hold *h, int idx) {
  return idx >= 64 || ((h->fixed_bits >> idx) & 1);
}

int dlock__hold_drop_one(dlock__hold *h) {
  if (!hold_is_fixed(h, h->count - 1) && h->wd_count > 0)
    h->wd_count--;
  h->count--;
  if (h->wd_count > h->count)
    h->wd_count = h->count;
  return h->wd_count == 0;
}

int64_t dlock__remaining_lease(const dlock__hold *h, int64_t wd_lease) {
  int idx = h->count - 1; /* the hold being released */
  int wd_left = h->wd_count - (hold_is_fixed(h, idx) ? 0 : 1);
  uint64_t below = idx >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << idx) - 1);
  int fixed_left = idx > 64 || (h->fixed_bits & below) != 0;
  if (!fixed_left)
    return wd_lease;
  int64_t l = h->lease_ms;
  if (wd_left > 0 && wd_lease > l)
    l = wd_lease;
  return -l;
}

/* A hold is valid while it is not reported lost and its local deadline has
 * not passed (reg.mu held). */
static int hold_valid(const dlock__hold *h, int64_t now) {
  return h && h->count > 0 && !h->lost && now < h->valid_until;
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
  dlock__sub *sub; /* joined wait entry, or NULL */
  int active;      /* its subscription is confirmed */
  int joined;      /* joined before the first attempt (queued with it) */
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
  if (rc == DLOCK_ETIMEDOUT)
    return dlock__fail(DLOCK_ETIMEDOUT,
                       "lock '%s' still held elsewhere after %lld ms",
                       a->m->name, a->b.wait_ms);
  return rc;
}

/* Checks the call and the thread's existing hold; fills a. 0 or a code. */
static int acq_begin(acq *a, dlock_mutex *m, long long wait_ms,
                     long long lease_ms) {
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
  dlock__budget_start(&a->b, c, wait_ms);
  a->w.deadline = a->b.deadline;
  if (wait_ms != 0)
    a->w.id = dlock__rand64() | 1;
  a->slot.wait_id = a->w.id;
  pthread_mutex_lock(&c->reg.mu);
  dlock__hold *h = find_hold(m, a->tid);
  a->prior = h ? h->count : 0;
  if (h && a->prior > 0 && !hold_valid(h, a->b.started)) {
    int was_lost = h->lost;
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
  int queue = a->b.wait_ms != 0 && m->ops->queue_first;
  if (a->b.wait_ms != 0 &&
      atomic_load_explicit(&a->c->ps.n_subs, memory_order_relaxed) > 0) {
    dlock__sb ch, gr;
    dlock__sb_init(&ch);
    dlock__sb_init(&gr);
    m->ops->channels(m, a->tid, &ch, &gr);
    if (!ch.oom && !gr.oom &&
        dlock__sub_join_active(a->c, ch.p, &a->slot, &a->sub)) {
      a->active = a->joined = 1;
      queue = 1;
    }
    dlock__sb_free(&ch);
    dlock__sb_free(&gr);
  }
  return attempt(a, a->prior + 1, queue);
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

/* Sleeps until a wake-up, the holder's TTL, the kind's longest sleep or
 * the deadline. 1 held (a grant, confirmed), 0 go on, or a code. */
static int sleep_once(acq *a) {
  int64_t now = dlock__now_ms();
  int64_t until = a->ttl >= 0 ? now + (a->ttl > 0 ? a->ttl : 1) : -1;
  int64_t max_sleep = a->m->ops->max_sleep_ms;
  if (max_sleep > 0 && (until < 0 || until > now + max_sleep))
    until = now + max_sleep;
  int granted = 0;
  dlock__sub_wait(a->c, a->sub, &a->slot, dlock__budget_clamp(&a->b, until),
                  &granted, &a->active);
  if (a->slot.failed) {
    char what[300];
    return dlock__sub_error(a->c, a->sub, lock_what(a->m, what, sizeof what));
  }
  if (!granted)
    return 0;
  /* The unlock script made us the owner (this wait's grant). Gone
   * already (the lease ran out before we could confirm): wait on. */
  return confirm_handover(a->m, a->tid, a->lease, a->sent, &a->sent);
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
  int rc = subscribe(a);
  if (rc)
    return rc;
  /* Joined early (already queued) or not yet subscribed: wait first. */
  int need_wait = a->joined || !a->active;
  for (;;) {
    if (need_wait) {
      if ((rc = wait_over(a)) != 0 || (rc = sleep_once(a)) != 0 ||
          (rc = wait_over(a)) != 0)
        return rc;
    }
    need_wait = 1;
    if ((rc = attempt(a, 1, a->active || a->m->ops->queue_first)) != 0)
      return rc;
  }
}

/* After a wait that ended without the lock: leaves the server's queue. If
 * the lock was handed to us meanwhile we keep it (1: the wait ended with
 * the lock held); the call's own error stays the one reported. */
static int leave_queue(acq *a) {
  if (!a->w.queued || !a->m->ops->cancel)
    return 0;
  dlock__err_keep_begin();
  int cr = a->m->ops->cancel(a->m, a->tid, a->lease, dlock__budget_left(&a->b),
                             &a->token, &a->w);
  int held = cr == 1 &&
             confirm_handover(a->m, a->tid, a->lease, a->sent, &a->sent) == 1;
  dlock__err_keep_end();
  return held;
}

/* Deletes the latch of the undo's unlock rid: the undo was answered on its
 * first send, so no copy of it can come later (the latch is not needed). */
static void drop_latch(dlock_mutex *m, const char *rid) {
  dlock__sb latch;
  dlock__sb_init(&latch);
  dlock__unlock_latch_key(&latch, m->name, rid);
  const char *av[2] = {"DEL", latch.p};
  size_t al[2] = {3, latch.len};
  dlock__cmd cmd = {latch.p, NULL, 2, av, al, 1};
  redisReply *r = NULL;
  if (!latch.oom && dlock__exec(m->c, &cmd, &r) == 0)
    freeReplyObject(r);
  dlock__sb_free(&latch);
}

/* The acquisition a just made was not confirmed by the replicas (sync.c):
 * gives it back with the kind's unlock (reentrant: the count goes back to
 * prior, the TTL is never shortened) and its latch, so nothing of it stays
 * behind. Returns DLOCK_ENOSYNC; a failed undo leaves the lease to end it. */
static int undo_unsynced(acq *a, const char *why) {
  char msg[200], rid[33];
  snprintf(msg, sizeof msg, "%s", why);
  dlock__request_id(rid);
  /* The latch of this lock's previous clean unlock goes with the undo, as
   * with any unlock (no key of the lock is left behind). */
  char prev[33];
  pthread_mutex_lock(&a->c->reg.mu);
  char *slot = dlock__lockent_prev_rid(a->m->e);
  memcpy(prev, slot, sizeof prev);
  slot[0] = '\0';
  pthread_mutex_unlock(&a->c->reg.mu);
  dlock__err_keep_begin();
  dlock__sync_pause(1);
  int64_t lease = a->prior > 0 ? -a->lease : a->lease;
  int rc = a->m->ops->release(a->m, a->tid, lease, rid, prev[0] ? prev : NULL);
  if (rc >= 0 && dlock__exec_sends() == 1)
    drop_latch(a->m, rid);
  if (rc < 0 && prev[0]) { /* the delete may not have run: keep it */
    pthread_mutex_lock(&a->c->reg.mu);
    if (!slot[0])
      memcpy(slot, prev, sizeof prev);
    pthread_mutex_unlock(&a->c->reg.mu);
  }
  dlock__sync_pause(0);
  dlock__err_keep_end();
  return dlock__fail(
      DLOCK_ENOSYNC, "lock '%s': %s; the acquisition was undone%s", a->m->name,
      msg, rc >= 0 ? "" : " (the undo failed: the lease ends it)");
}

static int acquire_once(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  acq a;
  memset(&a, 0, sizeof a);
  int rc = acq_begin(&a, m, wait_ms, lease_ms);
  if (rc)
    return rc;
  rc = first_attempt(&a);
  if (rc == 0 && wait_ms == 0)
    rc = dlock__fail(DLOCK_EBUSY, "lock '%s' is held elsewhere", m->name);
  else if (rc == 0)
    rc = wait_loop(&a);
  if (a.sub)
    dlock__sub_leave(a.c, a.sub, &a.slot);
  if (rc == DLOCK_ELOST) {
    pthread_mutex_lock(&a.c->reg.mu);
    dlock__hold *h = find_hold(m, a.tid);
    if (h)
      drop_hold(a.c, h);
    pthread_mutex_unlock(&a.c->reg.mu);
    return rc;
  }
  /* An attempt may have queued us before its reply was lost, or the wait
   * ended queued: leave the queue, so the lock is never handed to a thread
   * not waiting. (A first attempt of a reentrant hold never queues.) */
  if (rc < 0 && a.prior == 0 && leave_queue(&a))
    rc = 1;
  const char *why = NULL;
  if (rc == 1 && dlock__sync_short(&why))
    return undo_unsynced(&a, why);
  if (rc == 1)
    return record_hold(m, a.tid, a.prior + 1, a.wd, a.lease, a.sent, a.token);
  return rc;
}

/* An acquisition the replicas did not confirm (DLOCK_ENOSYNC, undone) is
 * tried again under the retry policy, as Redisson does. */
static int acquire(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  for (int i = 0;; i++) {
    int rc = acquire_once(m, wait_ms, lease_ms);
    if (rc != DLOCK_ENOSYNC || i >= m->c->cfg.retry_attempts)
      return rc;
    dlock__sleep_ms(m->c->cfg.retry_interval_ms);
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

/* Request ids are 32 hex chars; a hold keeps a pending one in 16 bytes. */
static void rid_from_hex(const char *hex, uint64_t out[2]) {
  out[0] = out[1] = 0;
  for (int i = 0; i < 32; i++) {
    char ch = hex[i];
    uint64_t d = (uint64_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10) & 15;
    out[i / 16] = (out[i / 16] << 4) | d;
  }
}

static void rid_to_hex(const uint64_t in[2], char out[33]) {
  static const char hx[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++)
    out[i] = hx[(in[i / 16] >> (4 * (15 - i % 16))) & 15];
  out[32] = '\0';
}

/* One unlock call: what its steps share. */
typedef struct rel {
  dlock__hold *h;
  uint32_t gen;    /* h's generation when the unlock began */
  int64_t lease;   /* remaining_ttl argument (dlock__remaining_lease) */
  char rid[33];    /* this unlock's request id */
  int reused;      /* rid is an earlier unknown-outcome unlock's */
  char prev[33];   /* the previous clean unlock's rid ("" none) */
  char *prev_slot; /* where the lock entry keeps it */
} rel;

/* Finds the thread's hold and prepares the unlock (reg.mu held). 0 or a
 * code (the hold is not there, or was lost: then it is dropped). */
static int rel_begin(dlock_mutex *m, uint64_t tid, rel *r) {
  dlock_client *c = m->c;
  dlock__hold *h = find_hold(m, tid);
  if (!h || h->count == 0)
    return dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                       m->name);
  if (h->lost) {
    int why = h->lost;
    drop_hold(c, h);
    return dlock__fail(DLOCK_ELOST, "lock '%s' was lost while held: %s",
                       m->name, dlock__lost_why(why));
  }
  r->h = h;
  r->gen = h->gen;
  r->lease = dlock__remaining_lease(h, c->cfg.watchdog_timeout_ms);
  /* A previous unlock at this count ended without a reply: send the same
   * request id, so that if it did run, its latch answers for it. */
  r->reused = h->unlock_rid_count > 0 && h->unlock_rid_count == h->count;
  if (r->reused)
    rid_to_hex(h->unlock_rid, r->rid);
  else
    dlock__request_id(r->rid);
  /* The key may vanish under a renewal batch in flight because of this very
   * unlock: not a loss to report (issue 10: spurious on_lock_lost). */
  h->releasing = 1;
  /* The latch of this lock's previous clean unlock goes with this one. */
  r->prev_slot = dlock__lockent_prev_rid(m->e);
  memcpy(r->prev, r->prev_slot, sizeof r->prev);
  r->prev_slot[0] = '\0';
  return 0;
}

/* One hold fewer after a confirmed release that leaves holds (reg.mu). */
static void drop_one(dlock_client *c, dlock__hold *h) {
  if (dlock__hold_drop_one(h))
    dlock__wd_remove(c, h);
}

/* Records the outcome rc of the release script (reg.mu held). Returns the
 * call's answer: rc itself for an unknown outcome (the record stays, to be
 * retried with the same request id), DLOCK_ELOST (message set) when the
 * hold was not ours any more, or 0. */
static int rel_end(dlock_mutex *m, rel *r, int rc) {
  dlock_client *c = m->c;
  dlock__hold *h = r->h;
  /* A reused rid had earlier copies whose arrival nobody can rule out. */
  int clean = (rc == 0 || rc == 1) && !r->reused && dlock__exec_sends() == 1;
  h->releasing = 0;
  /* Sent once and answered: no copy of it can arrive later, so its latch
   * is not needed past the next unlock. Otherwise it keeps its TTL (and a
   * prev whose delete may not have run is kept for the next one). */
  if (clean)
    memcpy(r->prev_slot, r->rid, 33);
  else if (r->prev[0] && !r->prev_slot[0])
    memcpy(r->prev_slot, r->prev, sizeof r->prev);
  /* Past the local deadline the hold was not ours for sure: whatever Redis
   * answered, the caller must treat the critical section as unprotected. */
  int mine = h->gen == r->gen;
  int expired = mine && dlock__now_ms() >= h->valid_until;
  if (rc < 0 && rc != DLOCK_ELOST && !expired) {
    if (mine) {
      rid_from_hex(r->rid, h->unlock_rid);
      h->unlock_rid_count = h->count;
    }
    return rc;
  }
  if (!mine) {
    dlock__hold_put(c, h);
  } else {
    h->unlock_rid_count = 0;
    expired |= h->lost;
    if (expired || rc == DLOCK_ELOST || rc == 1 || h->count <= 1)
      drop_hold(c, h);
    else
      drop_one(c, h);
  }
  if (rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s' was lost while held (expired, deleted or "
                       "taken)",
                       m->name);
  if (expired)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': its lease ran out before the unlock (local "
                       "deadline passed; another owner may have held it)",
                       m->name);
  return 0;
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
  rc = m->ops->release(m, tid, r.lease, r.rid, r.prev[0] ? r.prev : NULL);
  pthread_mutex_lock(&c->reg.mu);
  rc = rel_end(m, &r, rc);
  pthread_mutex_unlock(&c->reg.mu);
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
  int st = !h || h->count == 0 ? -1 : hold_valid(h, now);
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
