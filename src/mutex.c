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
 * HOLD RECORDS. Each lock object keeps, per thread, what that thread holds
 * through it: count, whether the watchdog renews it, the lease, a lost flag
 * set by the watchdog. Unlock consults the record first (DLOCK_EPERM without
 * a round trip). Records are kept for reuse until the object is freed, so a
 * renewal batch in flight never points at freed memory.
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
  dlock__prefix_name(grant, "dlock_grant__channel", m->name);
  dlock__sb_add(grant, ":", 1);
  dlock__sb_add(grant, m->c->id, DLOCK__UUID_LEN);
}

static int plain_attempt(dlock_mutex *m, uint64_t tid, int target,
                         int64_t lease, int queue, int64_t wait_ms,
                         int64_t *ttl, uint64_t *token) {
  (void)wait_ms;
  (void)token;
  dlock_client *c = m->c;
  dlock__sb qk;
  dlock__sb_init(&qk);
  dlock__prefix_name(&qk, "dlock_lock_queue", m->name);
  char field[DLOCK__FIELD_MAX], entry[DLOCK__FIELD_MAX + 24];
  size_t fl = dlock__field(c, tid, field);
  char ls[24], ts[24];
  size_t lsl = dlock__fmt_i64(ls, lease);
  size_t tsl = dlock__fmt_i64(ts, target);
  memcpy(entry, field, fl);
  entry[fl] = '|';
  size_t el = fl + 1 + dlock__fmt_i64(entry + fl + 1, lease);
  const char *keys[2] = {m->name, qk.p};
  size_t klens[2] = {m->name_len, qk.len};
  const char *args[5] = {ls, field, ts, queue ? "1" : "0", entry};
  size_t alens[5] = {lsl, fl, tsl, 1, el};
  redisReply *r = NULL;
  int rc = qk.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                  : dlock__eval(c, dlock__core_script(DLOCK__S_ACQUIRE), 2,
                                keys, klens, 5, args, alens, &r);
  dlock__sb_free(&qk);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  if (r->type == REDIS_REPLY_NIL) {
    freeReplyObject(r);
    return 1;
  }
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  if (rc)
    return rc;
  if (v == -3)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': this thread's hold is gone (expired or "
                       "deleted) -- it was re-acquired in vain",
                       m->name);
  *ttl = v;
  return 0;
}

static int plain_release(dlock_mutex *m, uint64_t tid, int64_t lease,
                         const char *rid) {
  dlock_client *c = m->c;
  dlock__sb ch, latch, qk, gp;
  dlock__sb_init(&ch);
  dlock__sb_init(&latch);
  dlock__sb_init(&qk);
  dlock__sb_init(&gp);
  dlock__prefix_name(&ch, "redisson_lock__channel", m->name);
  dlock__unlock_latch_key(&latch, m->name, rid);
  dlock__prefix_name(&qk, "dlock_lock_queue", m->name);
  dlock__prefix_name(&gp, "dlock_grant__channel", m->name);
  char field[DLOCK__FIELD_MAX];
  size_t fl = dlock__field(c, tid, field);
  char ls[24], lt[24];
  size_t lsl = dlock__fmt_i64(ls, lease);
  size_t ltl = dlock__fmt_i64(lt, c->latch_ttl_ms);
  const char *keys[5] = {m->name, ch.p, latch.p, qk.p, gp.p};
  size_t klens[5] = {m->name_len, ch.len, latch.len, qk.len, gp.len};
  const char *args[5] = {"0", ls, field, "PUBLISH", lt};
  size_t alens[5] = {1, lsl, fl, 7, ltl};
  redisReply *r = NULL;
  int rc = ch.oom || latch.oom || qk.oom || gp.oom
               ? dlock__fail(DLOCK_ENOMEM, "out of memory")
               : dlock__eval(c, dlock__core_script(DLOCK__S_UNLOCK), 5, keys,
                             klens, 5, args, alens, &r);
  dlock__sb_free(&ch);
  dlock__sb_free(&latch);
  dlock__sb_free(&qk);
  dlock__sb_free(&gp);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  if (r->type == REDIS_REPLY_NIL) {
    freeReplyObject(r);
    return DLOCK_ELOST;
  }
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  return rc ? rc : (v == 1 ? 1 : 0);
}

static int plain_cancel(dlock_mutex *m, uint64_t tid, int64_t lease,
                        int64_t wait_ms, uint64_t *token) {
  (void)wait_ms;
  (void)token;
  dlock_client *c = m->c;
  dlock__sb qk;
  dlock__sb_init(&qk);
  dlock__prefix_name(&qk, "dlock_lock_queue", m->name);
  char field[DLOCK__FIELD_MAX], entry[DLOCK__FIELD_MAX + 24];
  size_t fl = dlock__field(c, tid, field);
  memcpy(entry, field, fl);
  entry[fl] = '|';
  size_t el = fl + 1 + dlock__fmt_i64(entry + fl + 1, lease);
  const char *keys[2] = {m->name, qk.p};
  size_t klens[2] = {m->name_len, qk.len};
  const char *args[2] = {field, entry};
  size_t alens[2] = {fl, el};
  redisReply *r = NULL;
  int rc = qk.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                  : dlock__eval(c, dlock__core_script(DLOCK__S_CANCEL), 2, keys,
                                klens, 2, args, alens, &r);
  dlock__sb_free(&qk);
  if (rc || !r)
    return rc ? rc : DLOCK_EPROTO;
  long long v = 0;
  rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  return rc ? rc : v == 1;
}

static int plain_force(dlock_mutex *m) {
  dlock__sb ch;
  dlock__sb_init(&ch);
  dlock__prefix_name(&ch, "redisson_lock__channel", m->name);
  const char *keys[2] = {m->name, ch.p};
  size_t klens[2] = {m->name_len, ch.len};
  const char *args[2] = {"0", "PUBLISH"};
  redisReply *r = NULL;
  int rc = ch.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                  : dlock__eval(m->c, dlock__core_script(DLOCK__S_FORCE_UNLOCK),
                                2, keys, klens, 2, args, NULL, &r);
  dlock__sb_free(&ch);
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
  size_t n = strlen(name);
  dlock_mutex *m = dlock__malloc(sizeof *m + n + 1);
  if (!m)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  m->c = c;
  m->ops = ops;
  m->holds = NULL;
  m->name_len = n;
  memcpy(m->name, name, n + 1);
  *out = m;
  return 0;
}

int dlock_mutex_new(dlock_client *c, const char *name, dlock_mutex **out) {
  return dlock__mutex_create(c, name, &dlock__plain_ops, out);
}

void dlock_mutex_free(dlock_mutex *m) {
  if (!m)
    return;
  dlock_client *c = m->c;
  if (c->fork_gen == dlock__fork_gen()) {
    pthread_mutex_lock(&c->reg_mu);
    dlock__wd_quiesce(c);
    for (dlock__hold *h = m->holds; h; h = h->next)
      dlock__wd_remove(c, h);
    pthread_mutex_unlock(&c->reg_mu);
  }
  dlock__hold *h = m->holds;
  while (h) {
    dlock__hold *nx = h->next;
    free(h);
    h = nx;
  }
  free(m);
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
  for (dlock__hold *h = m->holds; h; h = h->next)
    if (h->tid == tid)
      return h;
  return NULL;
}

/* Forgets the thread's holds (reg_mu held). */
static void drop_hold(dlock_client *c, dlock__hold *h) {
  h->count = 0;
  h->wd_count = 0;
  h->lost = 0;
  h->gen++;
  dlock__wd_remove(c, h);
}

/* Records a successful acquisition (takes reg_mu). */
static int record_hold(dlock_mutex *m, uint64_t tid, int target, int wd,
                       int64_t lease, int64_t started, uint64_t token) {
  dlock_client *c = m->c;
  pthread_mutex_lock(&c->reg_mu);
  dlock__hold *h = find_hold(m, tid);
  if (!h) {
    h = dlock__calloc(1, sizeof *h);
    if (!h) {
      pthread_mutex_unlock(&c->reg_mu);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    h->tid = tid;
    h->m = m;
    h->next = m->holds;
    m->holds = h;
  }
  if (h->count == 0) {
    h->gen++;
    h->unlock_rid_count = 0;
    h->wd_count = 0;
    h->lost = 0;
    h->renewed_at = started;
  }
  h->count = target;
  h->token = token;
  if (wd) {
    h->wd_count++;
    dlock__wd_add(c, h);
  } else {
    h->lease_ms = lease;
  }
  pthread_mutex_unlock(&c->reg_mu);
  return 0;
}

int dlock__mutex_local_count(dlock_mutex *m) {
  dlock_client *c = m->c;
  pthread_mutex_lock(&c->reg_mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int n = h && !h->lost ? h->count : 0;
  pthread_mutex_unlock(&c->reg_mu);
  return n;
}

static int acquire(dlock_mutex *m, long long wait_ms, long long lease_ms) {
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  const uint64_t tid = dlock__tid();
  const int wd = lease_ms <= 0;
  const int64_t lease = wd ? c->cfg.watchdog_timeout_ms : lease_ms;
  const int64_t started = dlock__now_ms();

  pthread_mutex_lock(&c->reg_mu);
  dlock__hold *h = find_hold(m, tid);
  int prior = h ? h->count : 0;
  if (h && prior > 0 && h->lost) {
    drop_hold(c, h);
    pthread_mutex_unlock(&c->reg_mu);
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s': this thread's hold was lost (renewal "
                       "found it gone)",
                       m->name);
  }
  pthread_mutex_unlock(&c->reg_mu);

  int64_t ttl = -1;
  uint64_t token = 0;
  /* When this client is already subscribed to the lock (other local
   * waiters, or a lingering subscription), register as a waiter first and
   * join the server's queue with the very first attempt. */
  dlock__slot slot;
  dlock__sub *sub = NULL;
  int joined = 0;
  dlock__sb ch, gr;
  dlock__sb_init(&ch);
  dlock__sb_init(&gr);
  if (wait_ms != 0 &&
      atomic_load_explicit(&c->n_subs, memory_order_relaxed) > 0) {
    m->ops->channels(m, tid, &ch, &gr);
    if (!ch.oom && !gr.oom)
      joined = dlock__sub_join_active(c, ch.p, &slot, &sub);
  }
  int queue_now = wait_ms != 0 && (joined || m->ops->queue_first);
  rc = m->ops->attempt(m, tid, prior + 1, lease, queue_now, wait_ms, &ttl,
                       &token);
  if (rc == 1 || rc < 0 || wait_ms == 0) {
    if (joined)
      dlock__sub_leave(c, sub, &slot);
    dlock__sb_free(&ch);
    dlock__sb_free(&gr);
    if (rc < 0 && rc != DLOCK_ELOST && queue_now && prior == 0 &&
        m->ops->cancel) {
      /* The attempt may have queued us before its reply was lost: leave
       * the queue so the lock is never handed to a thread not waiting. */
      char keep[512];
      snprintf(keep, sizeof keep, "%s", dlock_last_error());
      if (m->ops->cancel(m, tid, lease, wait_ms, &token) == 1)
        return record_hold(m, tid, 1, wd, lease, started, token);
      dlock__fail(rc, "%s", keep);
    }
  }
  if (rc == 1)
    return record_hold(m, tid, prior + 1, wd, lease, started, token);
  if (rc == DLOCK_ELOST) {
    pthread_mutex_lock(&c->reg_mu);
    if ((h = find_hold(m, tid)) != NULL)
      drop_hold(c, h);
    pthread_mutex_unlock(&c->reg_mu);
    return rc;
  }
  if (rc < 0)
    return rc;
  if (wait_ms == 0)
    return dlock__fail(DLOCK_EBUSY, "lock '%s' is held elsewhere", m->name);

  /* Contended: wait for a hand-over or a wake-up. */
  const int64_t deadline =
      wait_ms < 0 || wait_ms > INT64_MAX - started ? -1 : started + wait_ms;
  int active = joined;
  if (!joined) {
    if (!ch.len)
      m->ops->channels(m, tid, &ch, &gr);
    if (ch.oom || gr.oom) {
      dlock__sb_free(&ch);
      dlock__sb_free(&gr);
      return dlock__fail(DLOCK_ENOMEM, "out of memory");
    }
    rc = dlock__sub_join(c, ch.p, gr.len ? gr.p : NULL, m->ops->wake_policy,
                         &slot, &sub, &active);
  }
  dlock__sb_free(&ch);
  dlock__sb_free(&gr);
  if (rc)
    return rc;
  /* Already queued (joined early): just wait. Otherwise wait for the
   * subscription unless it is already active. */
  int queued = queue_now, need_wait = joined || !active, held = 0;
  const unsigned cancel_gen = atomic_load(&c->cancel_gen);
  for (;;) {
    if (need_wait) {
      int64_t now = dlock__now_ms();
      int64_t until = ttl >= 0 ? now + (ttl > 0 ? ttl : 1) : -1;
      if (deadline >= 0 && (until < 0 || until > deadline))
        until = deadline;
      int granted = 0;
      dlock__sub_wait(c, sub, &slot, until, &granted, &active);
      if (granted) {
        held = 1;
        token = (uint64_t)slot.value;
        rc = 0;
        break;
      }
      if (atomic_load(&c->closing)) {
        rc = dlock__fail(DLOCK_ECLOSED, "client is closing");
        break;
      }
      if (atomic_load(&c->cancel_gen) != cancel_gen) {
        rc = dlock__fail(DLOCK_ECANCELED,
                         "wait for lock '%s' canceled by "
                         "dlock_client_cancel_waits()",
                         m->name);
        break;
      }
      if (deadline >= 0 && dlock__now_ms() >= deadline) {
        rc = dlock__fail(DLOCK_ETIMEDOUT,
                         "lock '%s' still held elsewhere after %lld ms",
                         m->name, wait_ms);
        break;
      }
    }
    need_wait = 1;
    int queue = active || m->ops->queue_first;
    int64_t left = deadline < 0 ? -1 : deadline - dlock__now_ms();
    int r = m->ops->attempt(m, tid, 1, lease, queue, left, &ttl, &token);
    queued |= queue;
    if (r == 1) {
      held = 1;
      rc = 0;
      break;
    }
    if (r < 0) {
      rc = r;
      break;
    }
  }
  dlock__sub_leave(c, sub, &slot);
  if (!held && queued && m->ops->cancel) {
    /* Leave the queue. If the lock was handed to us in the meantime we
     * keep it: the wait ended with the lock held. */
    char keep[512];
    snprintf(keep, sizeof keep, "%s", dlock_last_error());
    int64_t left = deadline < 0 ? -1 : deadline - dlock__now_ms();
    int cr = m->ops->cancel(m, tid, lease, left, &token);
    if (cr == 1) {
      held = 1;
      rc = 0;
    } else {
      dlock__fail(rc, "%s", keep);
    }
  }
  if (held)
    return record_hold(m, tid, 1, wd, lease, dlock__now_ms(), token);
  return rc;
}

int dlock__mutex_acquire(dlock_mutex *m, long long wait_ms,
                         long long lease_ms) {
  return acquire(m, wait_ms, lease_ms);
}

int dlock_mutex_lock(dlock_mutex *m) { return acquire(m, -1, -1); }
int dlock_mutex_trylock(dlock_mutex *m) { return acquire(m, 0, -1); }
int dlock_mutex_timedlock(dlock_mutex *m, long long wait_ms,
                          long long lease_ms) {
  return acquire(m, wait_ms, lease_ms);
}

int dlock_mutex_unlock(dlock_mutex *m) { return dlock__mutex_release(m); }

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

int dlock__mutex_release(dlock_mutex *m) {
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  dlock_client *c = m->c;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  const uint64_t tid = dlock__tid();
  pthread_mutex_lock(&c->reg_mu);
  dlock__hold *h = find_hold(m, tid);
  if (!h || h->count == 0) {
    pthread_mutex_unlock(&c->reg_mu);
    return dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                       m->name);
  }
  if (h->lost) {
    drop_hold(c, h);
    pthread_mutex_unlock(&c->reg_mu);
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s' was lost while held (renewal found it "
                       "gone: expired, deleted or taken)",
                       m->name);
  }
  int64_t lease = h->wd_count > 0 ? c->cfg.watchdog_timeout_ms : h->lease_ms;
  uint32_t gen = h->gen;
  /* A previous unlock at this count ended without a reply: send the same
   * request id, so that if it did run, its latch answers for it. */
  char rid[33];
  if (h->unlock_rid_count > 0 && h->unlock_rid_count == h->count)
    rid_to_hex(h->unlock_rid, rid);
  else
    dlock__request_id(rid);
  pthread_mutex_unlock(&c->reg_mu);

  rc = m->ops->release(m, tid, lease, rid);

  pthread_mutex_lock(&c->reg_mu);
  if (rc < 0 && rc != DLOCK_ELOST) {
    /* Unknown outcome after the retry policy: keep the record (renewal
     * continues) so the caller can try again -- with the same request id
     * (within the latch's lifetime, latch_ttl_ms). */
    if (h->gen == gen) {
      rid_from_hex(rid, h->unlock_rid);
      h->unlock_rid_count = h->count;
    }
    pthread_mutex_unlock(&c->reg_mu);
    return rc;
  }
  if (h->gen == gen)
    h->unlock_rid_count = 0;
  if (h->gen == gen) {
    if (rc == DLOCK_ELOST || rc == 1 || h->count <= 1) {
      drop_hold(c, h);
    } else {
      h->count--;
      if (h->wd_count > h->count)
        h->wd_count = h->count;
      if (h->wd_count == 0)
        dlock__wd_remove(c, h);
    }
  }
  pthread_mutex_unlock(&c->reg_mu);
  if (rc == DLOCK_ELOST)
    return dlock__fail(DLOCK_ELOST,
                       "lock '%s' was lost while held (expired, deleted or "
                       "taken)",
                       m->name);
  return 0;
}

int dlock_mutex_force_unlock(dlock_mutex *m) {
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  int rc = dlock__client_check(m->c);
  return rc ? rc : m->ops->force(m);
}

/* Runs a one-key command and returns its integer reply (or -2 for nil). */
static int simple_int(dlock_mutex *m, const char *verb, const char *arg,
                      size_t alen, long long *v) {
  dlock__clear_error();
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  int rc = dlock__client_check(m->c);
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
  long long v = 0;
  int rc = simple_int(m, "EXISTS", NULL, 0, &v);
  return rc ? rc : v > 0;
}

int dlock_mutex_is_held(dlock_mutex *m) {
  char field[DLOCK__FIELD_MAX];
  if (!m)
    return dlock__fail(DLOCK_EINVAL, "mutex is NULL");
  size_t fl = dlock__field(m->c, dlock__tid(), field);
  long long v = 0;
  int rc = simple_int(m, "HEXISTS", field, fl, &v);
  return rc ? rc : v > 0;
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
  pthread_mutex_lock(&c->reg_mu);
  dlock__hold *h = find_hold(m, dlock__tid());
  int held = h && h->count > 0;
  if (held)
    *token = h->token;
  pthread_mutex_unlock(&c->reg_mu);
  return held ? 0
              : dlock__fail(DLOCK_EPERM, "lock '%s' is not held by this thread",
                            m->name);
}
