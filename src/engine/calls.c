/*
 * calls.c -- the plain mutex's script calls, KEYS and ARGV ready to send:
 * the acquire (and its short form for a first hold), the cancel, the
 * unlock (and its short form for a final release; its committing copy),
 * the decline of a hand-over, the request tombstone's key and TTL, and
 * what the acquire and unlock scripts' answers mean. What the blocking
 * mutex (kinds/mutex.c), the event-loop client (async/async_lock.c) and
 * the errand thread (client/errand.c) send, built in one place; no I/O.
 */
#include <string.h>

#include "engine/engine.h"

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

void dlock__req_tomb_key(dlock__sb *b, const char *name, const char *rid) {
  dlock__own_name(b, "dlock_tomb", name);
  dlock__sb_add(b, ":", 1);
  dlock__sb_add(b, rid, 32);
}

int dlock__acq_call_init(dlock__acq_call *k, const char *name, size_t name_len,
                         const char *field, size_t fl, int target,
                         int64_t lease, int queue, const dlock__wait *w) {
  dlock__sb_init(&k->q);
  dlock__sb_init(&k->dl);
  dlock__sb_init(&k->mk);
  dlock__sb_init(&k->tb);
  dlock__sb_init(&k->ch);
  dlock__sb_init(&k->gp);
  dlock__own_name(&k->q, "dlock_lock_queue", name);
  dlock__own_name(&k->dl, "dlock_lock_waits", name);
  dlock__own_name(&k->mk, "dlock_lock_granted", name);
  /* an attempt without a request id (none drawn yet) gets one that no
   * tombstone will ever name */
  dlock__req_tomb_key(&k->tb, name,
                      w->rid[0] ? w->rid : "00000000000000000000000000000000");
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
  const char *keys[5] = {name, k->q.p, k->dl.p, k->mk.p, k->tb.p};
  size_t klens[5] = {name_len, k->q.len, k->dl.len, k->mk.len, k->tb.len};
  const char *args[8] = {k->ls,    k->field,
                         k->ts,    queue ? "1" : "0",
                         k->entry, w->queued ? "1" : "0",
                         k->ds,    k->wid};
  size_t alens[8] = {lsl, fl, tsl, 1, k->el, 1, dsl, 16};
  memcpy(k->keys, keys, sizeof keys);
  memcpy(k->klens, klens, sizeof klens);
  memcpy(k->args, args, sizeof args);
  memcpy(k->alens, alens, sizeof alens);
  if (target == 1 && !queue && !w->queued) {
    const char *sk[3] = {name, k->mk.p, k->tb.p}, *sa[2] = {k->ls, k->field};
    size_t skl[3] = {name_len, k->mk.len, k->tb.len}, sal[2] = {lsl, fl};
    k->send =
        short_call(&k->sh, DLOCK__S_ACQUIRE_FIRST, 3, sk, skl, 2, sa, sal);
  } else {
    k->send = (dlock__call){DLOCK__S_ACQUIRE, 5,       8,       k->keys,
                            k->klens,         k->args, k->alens};
  }
  return k->q.oom || k->dl.oom || k->mk.oom || k->tb.oom
             ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : 0;
}

int dlock__cancel_call_init(dlock__acq_call *k, const char *name,
                            size_t name_len, const char *field, size_t fl,
                            int64_t lease, const dlock__wait *w,
                            const char *pub) {
  int rc = dlock__acq_call_init(k, name, name_len, field, fl, 1, lease, 0, w);
  dlock__prefix_name(&k->ch, "redisson_lock__channel", name);
  dlock__own_name(&k->gp, "dlock_grant__channel", name);
  const char *keys[6] = {name, k->q.p, k->dl.p, k->mk.p, k->ch.p, k->gp.p};
  size_t klens[6] = {name_len,  k->q.len,  k->dl.len,
                     k->mk.len, k->ch.len, k->gp.len};
  const char *args[4] = {k->field, k->entry, k->wid, pub};
  size_t alens[4] = {fl, k->el, 16, strlen(pub)};
  memcpy(k->ckeys, keys, sizeof keys);
  memcpy(k->cklens, klens, sizeof klens);
  memcpy(k->cargs, args, sizeof args);
  memcpy(k->calens, alens, sizeof alens);
  return rc || k->ch.oom || k->gp.oom
             ? dlock__fail(DLOCK_ENOMEM, "out of memory")
             : 0;
}

void dlock__acq_call_free(dlock__acq_call *k) {
  dlock__sb_free(&k->q);
  dlock__sb_free(&k->dl);
  dlock__sb_free(&k->mk);
  dlock__sb_free(&k->tb);
  dlock__sb_free(&k->ch);
  dlock__sb_free(&k->gp);
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
  const char *args[7] = {"0", k->ls, k->field, pub, k->es, k->rid, "0"};
  size_t alens[7] = {1, lsl, fl, strlen(pub), esl, 32, 1};
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

void dlock__rel_call_commit(dlock__rel_call *k, int64_t ttl) {
  size_t cl = dlock__fmt_i64(k->cs, ttl);
  k->args[6] = k->cs;
  k->alens[6] = cl;
  k->nargs = 7;
  k->send = (dlock__call){DLOCK__S_UNLOCK, 7,       7,       k->keys,
                          k->klens,        k->args, k->alens};
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

int dlock__acq_reply(int rc, redisReply *r, const char *name, int64_t *ttl) {
  long long v = 0;
  int nil = 0;
  if ((rc = dlock__take_int(rc, r, &v, &nil)) != 0)
    return rc;
  if (nil)
    return 1;
  if (v == -3)
    return dlock__reacquired_in_vain("lock", name);
  if (v == -4)
    return dlock__late_answer("lock", name);
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

int dlock__late_answer(const char *kind, const char *name) {
  return dlock__fail(DLOCK_EPROTO,
                     "%s '%s': an attempt found its own request's tombstone "
                     "(only a late copy should): the client's request ids "
                     "repeat?",
                     kind, name);
}

int dlock__reacquired_in_vain(const char *kind, const char *name) {
  return dlock__fail(DLOCK_ELOST,
                     "%s '%s': this thread's hold is gone (expired or "
                     "deleted) -- it was re-acquired in vain",
                     kind, name);
}
