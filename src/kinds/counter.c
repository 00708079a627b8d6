/*
 * counter.c -- what the counting kinds (semaphore, latch) share: the
 * object (client, name, channel), request ids that make a counting script
 * count once however often it is re-sent, and the wait for a count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds/kinds.h"

static int chobj_init(dlock__chobj *o, dlock_client *c, const char *name,
                      const dlock__counter_kind *k) {
  memset(o, 0, sizeof *o);
  o->kind = k;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "%s name is NULL or empty", k->name);
  dlock__sb ch;
  dlock__sb_init(&ch);
  k->channel(&ch, name);
  size_t n = strlen(name);
  if (c->cl && !ch.oom &&
      dlock__key_slot(name, n) != dlock__key_slot(ch.p, ch.len)) {
    dlock__sb_free(&ch);
    return dlock__fail(DLOCK_EINVAL,
                       "%s '%s': on a cluster its key and its channel would "
                       "fall into different slots (CROSSSLOT): the channel "
                       "wraps the name in braces, so the name may contain "
                       "neither '{' nor '}'",
                       k->name, name);
  }
  char *buf = ch.oom ? NULL : dlock__malloc(n + 1 + ch.len + 1);
  if (buf) {
    memcpy(buf, name, n + 1);
    memcpy(buf + n + 1, ch.p, ch.len);
    buf[n + 1 + ch.len] = '\0';
    o->c = c;
    o->name = buf;
    o->name_len = n;
    o->channel = buf + n + 1;
    o->channel_len = ch.len;
    pthread_mutex_init(&o->once_mu, NULL);
    dlock__client_ref(c);
  }
  dlock__sb_free(&ch);
  return buf ? 0 : dlock__fail(DLOCK_ENOMEM, "out of memory");
}

int dlock__counter_new(dlock_client *c, const char *name,
                       const dlock__counter_kind *k, size_t size, void **out) {
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  dlock__chobj *o = dlock__calloc(1, size);
  if (!o)
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  int rc = chobj_init(o, c, name, k);
  if (rc) {
    free(o);
    return rc;
  }
  *out = o;
  return 0;
}

void dlock__counter_free(dlock__chobj *o) {
  if (!o)
    return;
  if (o->name) {
    pthread_mutex_destroy(&o->once_mu);
    dlock__client_unref(o->c);
  }
  free(o->name);
  free(o);
}

int dlock__counter_check(const dlock__chobj *o, const char *kind) {
  if (!o)
    return dlock__fail(DLOCK_EINVAL, "%s is NULL", kind);
  return dlock__client_check(o->c);
}

const dlock__store_ops *dlock__counter_store(const dlock__chobj *o) {
  return o ? o->c->store : NULL;
}

int dlock__counter_get(dlock__chobj *o, long long *v) {
  *v = 0;
  const char *argv[2] = {"GET", o->name};
  size_t lens[2] = {3, o->name_len};
  dlock__cmd cmd = {o->name, NULL, 2, argv, lens, 0};
  redisReply *r = NULL;
  int rc = dlock__exec(o->c, &cmd, &r);
  if (rc == 0 && r && r->type != REDIS_REPLY_NIL)
    rc = dlock__reply_int(r, v);
  freeReplyObject(r);
  return rc;
}

int dlock__counter_read(dlock__chobj *o, const char *kind, long long *v,
                        const char *vname) {
  int rc = dlock__counter_check(o, kind);
  if (rc)
    return rc;
  if (!v)
    return dlock__fail(DLOCK_EINVAL, "%s is NULL", vname);
  return dlock__counter_get(o, v);
}

static int ready_cb(void *o) {
  dlock__chobj *co = o;
  return co->kind->ready(co);
}

int dlock__counter_wait(dlock__chobj *o, long long wait_ms) {
  dlock__budget b;
  dlock__budget_start(&b, o->c, wait_ms);
  int r = o->kind->ready(o);
  if (r != 0)
    return r == 1 ? 0 : r;
  if (wait_ms == 0)
    return DLOCK_EBUSY;
  char what[300];
  snprintf(what, sizeof what, "%s '%.256s'", o->kind->name, o->name);
  void *note = dlock__note_wait(o->c, o->name, dlock__tid()); /* info key */
  r = dlock__sub_wait_check(o->c, o->channel, o->kind->wake_policy, &b,
                            o->kind->recheck_ms, NULL, ready_cb, o, what);
  dlock__note_wait_end(o->c, note);
  if (r == DLOCK_ETIMEDOUT || r == DLOCK_ECANCELED)
    dlock__stat_add(
        &o->c->stats,
        r == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
  return r;
}

static void once_key(dlock__sb *b, const char *name, const char *rid) {
  dlock__own_name(b, "dlock_once", name);
  dlock__sb_add(b, ":", 1);
  dlock__sb_add(b, rid, 32);
}

int dlock__once_begin(dlock__chobj *o, dlock__once *w) {
  dlock__request_id(w->rid);
  dlock__sb_init(&w->key);
  dlock__sb_init(&w->prev);
  char prev[33];
  dlock__mu_lock(&o->once_mu);
  memcpy(prev, o->once_prev, sizeof prev);
  o->once_prev[0] = '\0';
  dlock__mu_unlock(&o->once_mu);
  w->has_prev = prev[0] != '\0';
  once_key(&w->key, o->name, w->rid);
  if (w->has_prev)
    once_key(&w->prev, o->name, prev);
  if (w->key.oom || w->prev.oom) {
    dlock__sb_free(&w->key);
    dlock__sb_free(&w->prev);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  return 0;
}

int dlock__chobj_count(dlock__chobj *o, const struct dlock__script *sc,
                       int with_channel, int nargs, const char **args,
                       const size_t *alens) {
  dlock__once w;
  int rc = dlock__once_begin(o, &w);
  if (rc)
    return rc;
  const char *keys[4] = {o->name};
  size_t klens[4] = {o->name_len};
  int nk = 1;
  if (with_channel) {
    keys[nk] = o->channel;
    klens[nk++] = o->channel_len;
  }
  keys[nk] = w.key.p;
  klens[nk++] = w.key.len;
  if (w.has_prev) {
    keys[nk] = w.prev.p;
    klens[nk++] = w.prev.len;
  }
  const char *av[5];
  size_t al[5];
  for (int i = 0; i < nargs && i < 3; i++) {
    av[i] = args[i];
    al[i] = alens[i];
  }
  char ts[24];
  av[nargs] = ts;
  al[nargs] = dlock__fmt_i64(ts, o->c->once_ttl_ms);
  av[nargs + 1] = dlock__publish_cmd(o->c);
  al[nargs + 1] = strlen(av[nargs + 1]);
  redisReply *r = NULL;
  long long v = 0;
  /* Copies of it are sent only while the once key surely lives. */
  const dlock__send_how how = {0, 0, o->c->once_window_ms};
  rc = dlock__eval_how(o->c, sc, nk, keys, klens, nargs + 2, av, al, &how, &r);
  int sends = dlock__exec_sends();
  if (rc == 0)
    rc = dlock__reply_int(r, &v);
  freeReplyObject(r);
  /* The object's next change deletes this request's once key -- unless a
   * copy of it may still be on its way (sent more than once): then the
   * key is left to its TTL, which outlives every copy the client sent.
   * Issue 43: the router's own resend counted twice when the next change
   * deleted the key its late first copy was to find. */
  dlock__once_end(o, &w, rc == 0 && v == 1 && sends <= 1);
  return rc ? rc : v == 1;
}

void dlock__once_end(dlock__chobj *o, dlock__once *w, int stored) {
  if (stored) {
    /* A concurrent call may have recorded its own meanwhile; the one
     * overwritten here is left to its TTL. */
    dlock__mu_lock(&o->once_mu);
    memcpy(o->once_prev, w->rid, sizeof o->once_prev);
    dlock__mu_unlock(&o->once_mu);
  }
  dlock__sb_free(&w->key);
  dlock__sb_free(&w->prev);
}
