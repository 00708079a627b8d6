/*
 * etcd_permits.c -- expirable permits (dlock_permits_*) on etcd: the same
 * calls as the Redis store's RPermitExpirableSemaphore layout, with etcd's
 * own layout and guarantees (docs/etcd.md).
 *
 * LAYOUT. Under B = <prefix><name>~permits/ -- outside the range of a
 * mutex of the same name (<prefix><name>/ .. <prefix><name>0: its trylock
 * compares that range empty and its waiters read the oldest key in it;
 * under <name>/ the permits made that mutex "held elsewhere"):
 *   B capacity      the number of permits (the total): missing = not set,
 *                   nothing can be taken;
 *   B p/<id>        one key per permit taken or asked for, <id> its 32 hex
 *                   digits, under a lease: the client's session lease (a
 *                   watchdog permit, renewed with the session) or a lease of
 *                   its own (lease_ms > 0: whole seconds, at least 2 s).
 * A permit key HOLDS while fewer than `capacity` permit keys are older
 * (create revision): the first `capacity` keys hold, the rest wait in
 * create-revision order (FIFO), each watching the range B for any change
 * (a permit given back or expired, the capacity set) and looking again.
 * So "at most capacity holders" is one linearizable read's verdict, and a
 * holder that dies gives its permit back when its lease ends.
 *
 * WHAT DIFFERS FROM REDIS. Expiry is the server's lease clock, not the
 * clients' wall clocks. available = capacity - permit keys (waiting ones
 * too, never below 0). A watchdog permit lives with the session: freeing
 * the object deletes its watchdog permits (the session would keep them for
 * ever); a lost session, or its local deadline passing unrenewed, is
 * reported through on_lock_lost with the object's name, as on Redis.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

/* A permit this object took. */
typedef struct eperm {
  struct eperm *next;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  int64_t lease;     /* its own lease; 0: the session's (watchdog) */
  uint32_t sess_gen; /* the session it was taken under (watchdog) */
  int told;          /* its loss was reported */
} eperm;

typedef struct dlock__etcd_permits {
  dlock__chobj o; /* first: kind (g_kind), client, name */
  dlock__etcd *e;
  pthread_mutex_t mu; /* list */
  dlock__sb base, cap, pfx, pend;
  eperm *list;
  struct dlock__etcd_permits *next; /* e's registry (e->mu) */
} ep_t;

/* The kind mark of an etcd permits object (never run as a counter). */
static const dlock__counter_kind g_kind = {"permits", NULL, 0, 0,
                                           dlock__etcd_no_counter};

static ep_t *of(dlock_permits *p) { return (ep_t *)(void *)p; }

int dlock__etcd_permits_new(dlock_client *c, const char *name,
                            dlock_permits **out) {
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "permits name is NULL or empty");
  ep_t *p = dlock__calloc(1, sizeof *p);
  size_t n = strlen(name);
  if (!p || !(p->o.name = dlock__strndup(name, n)) ||
      pthread_mutex_init(&p->mu, NULL) != 0) {
    if (p)
      free(p->o.name);
    free(p);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  p->o.kind = &g_kind;
  p->o.c = c;
  p->o.name_len = n;
  p->e = c->etcd;
  dlock__sb *s[4] = {&p->base, &p->cap, &p->pfx, &p->pend};
  for (int i = 0; i < 4; i++) {
    dlock__sb_init(s[i]);
    dlock__sb_add(s[i], p->e->prefix, p->e->prefix_len);
    dlock__sb_add(s[i], name, n);
    dlock__sb_adds(s[i], "~permits/");
  }
  dlock__sb_adds(&p->cap, "capacity");
  dlock__sb_adds(&p->pfx, "p/");
  dlock__sb_adds(&p->pend, "p0");
  dlock__client_ref(c);
  dlock__mu_lock(&p->e->mu);
  p->next = p->e->permits;
  p->e->permits = p;
  dlock__mu_unlock(&p->e->mu);
  *out = (dlock_permits *)(void *)p;
  return 0;
}

/* ---- requests ------------------------------------------------------------ */

static void key_of(ep_t *p, const char *id, dlock__sb *k) {
  dlock__sb_reset(k);
  dlock__sb_add(k, p->pfx.p, p->pfx.len);
  dlock__sb_add(k, id, DLOCK_PERMIT_ID_LEN);
}

/* The reads of a look: the capacity, the permit keys by create revision. */
static void reads(ep_t *p, dlock__sb *b) {
  dlock__sb_adds(b, "{\"request_range\":{\"key\":\"");
  dlock__etcd_b64(b, p->cap.p, p->cap.len);
  dlock__sb_adds(b, "\"}},{\"request_range\":{\"key\":\"");
  dlock__etcd_b64(b, p->pfx.p, p->pfx.len);
  dlock__sb_adds(b, "\",\"range_end\":\"");
  dlock__etcd_b64(b, p->pend.p, p->pend.len);
  dlock__sb_adds(b,
                 "\",\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\"}}");
}

/* One look's answer. */
typedef struct look {
  int ok;            /* the compare held */
  int set;           /* the capacity key exists */
  long long cap;     /* its value */
  int64_t hrev;      /* header revision */
  dlock__etcd_kvs k; /* the permit keys */
} look_t;

static json_object *resp_range(json_object *ans, size_t i) {
  json_object *rs = dlock__etcd_get(ans, "responses");
  json_object *x = rs && json_object_is_type(rs, json_type_array) &&
                           json_object_array_length(rs) > i
                       ? json_object_array_get_idx(rs, i)
                       : NULL;
  return dlock__etcd_get(x, "response_range");
}

/* A txn with compare cmp (JSON, may be empty), puts (JSON ops followed by
 * a comma, may be empty), then the reads at responses[np], [np + 1]. */
static int txn_look(ep_t *p, const char *cmp, const dlock__sb *puts, int np,
                    look_t *l) {
  memset(l, 0, sizeof *l);
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, "{\"compare\":[");
  dlock__sb_adds(&b, cmp);
  dlock__sb_adds(&b, "],\"success\":[");
  if (puts)
    dlock__sb_add(&b, puts->p, puts->len);
  reads(p, &b);
  dlock__sb_adds(&b, "]}");
  dlock__etcd_res res = {0};
  int rc =
      b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
            : dlock__etcd_call(p->e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  l->ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
  l->hrev = dlock__etcd_rev(res.json);
  if (l->ok) {
    dlock__etcd_kvs cap;
    rc = dlock__etcd_kvs_parse(resp_range(res.json, (size_t)np), NULL, &cap);
    if (rc == 0 && cap.n == 1) {
      l->set = 1;
      l->cap = strtoll(cap.v[0].value, NULL, 10);
    }
    dlock__etcd_kvs_free(&cap);
    if (rc == 0)
      rc = dlock__etcd_kvs_parse(resp_range(res.json, (size_t)np + 1), NULL,
                                 &l->k);
  }
  json_object_put(res.json);
  return rc;
}

/* Appends a compare "key's create revision `op` rev" (op EQUAL/GREATER). */
static void compare(dlock__sb *b, const dlock__sb *k, const char *op,
                    int64_t rev) {
  dlock__sb_adds(b, "{\"key\":\"");
  dlock__etcd_b64(b, k->p, k->len);
  dlock__sb_adds(b, "\",\"target\":\"CREATE\",\"result\":\"");
  dlock__sb_adds(b, op);
  dlock__sb_adds(b, "\",\"create_revision\":");
  dlock__etcd_jint(b, rev);
  dlock__sb_adds(b, "}");
}

/* Appends a put of key k (value: this client's id) under lease. */
static void put_op(ep_t *p, dlock__sb *b, const dlock__sb *k, int64_t lease) {
  dlock__sb_adds(b, "{\"request_put\":{\"key\":\"");
  dlock__etcd_b64(b, k->p, k->len);
  dlock__sb_adds(b, "\",\"value\":\"");
  dlock__etcd_b64(b, p->o.c->id, DLOCK__UUID_LEN);
  dlock__sb_adds(b, "\",\"lease\":");
  dlock__etcd_jint(b, lease);
  dlock__sb_adds(b, "}},");
}

/* Deletes key k (best effort, the wait's end). */
static void drop(ep_t *p, const dlock__sb *k, int64_t own_lease) {
  dlock__err_keep_begin();
  dlock__call_deadline_reset();
  if (own_lease) {
    (void)dlock__etcd_revoke(p->e, own_lease);
  } else {
    dlock__sb b;
    dlock__sb_init(&b);
    dlock__sb_adds(&b, "{\"key\":\"");
    dlock__etcd_b64(&b, k->p, k->len);
    dlock__sb_adds(&b, "\"}");
    dlock__etcd_res res = {0};
    if (!b.oom && dlock__etcd_call(p->e, "/v3/kv/deleterange", &b,
                                   DLOCK__ETCD_RETRY, &res) == 0)
      json_object_put(res.json);
    dlock__sb_free(&b);
  }
  dlock__err_keep_end();
}

/* ---- acquire --------------------------------------------------------------
 */

typedef struct pacq {
  ep_t *p;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  dlock__sb key;
  int64_t lease; /* own lease, 0: the session's */
  int64_t sent;  /* own lease: its grant's send (its local deadline's base) */
  int64_t rev;   /* our key's create revision */
  dlock__etcd_session s;
  look_t l;
} pacq;

/* The create found our key there already: an earlier copy of the same
 * txn made it -- its answer was lost and the transport sent it again --
 * for the id is this acquisition's own (32 random hex digits). The key is
 * ours: its create revision is read with the look (one permit, counted
 * once, as the Redis store's re-sent acquisitions). */
static int made_already(pacq *a) {
  ep_t *p = a->p;
  dlock__sb cmp;
  dlock__sb_init(&cmp);
  compare(&cmp, &a->key, "GREATER", 0);
  dlock__etcd_kvs_free(&a->l.k);
  int rc = cmp.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                   : txn_look(p, cmp.p, NULL, 0, &a->l);
  dlock__sb_free(&cmp);
  for (size_t i = 0; rc == 0 && a->l.ok && i < a->l.k.n; i++)
    if (a->l.k.v[i].klen == a->key.len &&
        memcmp(a->l.k.v[i].key, a->key.p, a->key.len) == 0)
      a->rev = a->l.k.v[i].create;
  if (rc == 0 && !a->rev) /* gone again meanwhile: its lease ended */
    rc = dlock__fail(DLOCK_ELOST,
                     "permits '%s': permit %s was made by an earlier copy "
                     "of the request and is gone already (its lease ended)",
                     p->o.name, a->id);
  return rc;
}

/* Makes our key (under the session, or a fresh own lease) and looks. */
static int make_key(pacq *a, long long lease_ms) {
  ep_t *p = a->p;
  int rc = dlock__etcd_session_get(p->e, &a->s);
  if (rc)
    return rc;
  if (lease_ms > 0) {
    int64_t ttl = 0;
    if ((rc = dlock__etcd_grant(p->e, lease_ms / 1000, &a->lease, &ttl,
                                &a->sent)) != 0)
      return rc;
  }
  dlock__sb cmp, puts;
  dlock__sb_init(&cmp);
  dlock__sb_init(&puts);
  compare(&cmp, &a->key, "EQUAL", 0);
  put_op(p, &puts, &a->key, a->lease ? a->lease : a->s.id);
  dlock__etcd_kvs_free(&a->l.k);
  rc = cmp.oom || puts.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                           : txn_look(p, cmp.p, &puts, 1, &a->l);
  dlock__sb_free(&cmp);
  dlock__sb_free(&puts);
  if (rc == 0 && !a->l.ok)
    return made_already(a);
  if (rc == 0)
    a->rev = a->l.hrev;
  return rc;
}

/* Our place: 0.. among the permit keys, -1 gone. */
static int place(const pacq *a) {
  for (size_t i = 0; i < a->l.k.n; i++)
    if (a->l.k.v[i].create == a->rev)
      return (int)i;
  return -1;
}

/* Looks again after a wake-up: 0 (a->l set; our key may be gone). */
static int relook(pacq *a) {
  dlock__sb cmp;
  dlock__sb_init(&cmp);
  compare(&cmp, &a->key, "EQUAL", a->rev);
  dlock__etcd_kvs_free(&a->l.k);
  int rc = cmp.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                   : txn_look(a->p, cmp.p, NULL, 0, &a->l);
  dlock__sb_free(&cmp);
  return rc;
}

/* The wait: 1 held, or a code. */
static int wait_permit(pacq *a, long long wait_ms, long long lease_ms,
                       const dlock__budget *b, const char *what) {
  ep_t *p = a->p;
  for (int round = 0; round < 1000000; round++) {
    int pos = place(a);
    if (pos >= 0 && a->l.set && pos < a->l.cap)
      return 1;
    if (wait_ms == 0)
      return dlock__fail(DLOCK_EBUSY, "permits '%s': no permit available",
                         p->o.name);
    int rc = dlock__budget_over(b, what);
    if (rc == DLOCK_ETIMEDOUT)
      return dlock__fail(rc, "permits '%s': no permit within %lld ms",
                         p->o.name, wait_ms);
    if (rc)
      return rc;
    if (pos < 0) { /* our key's lease ended while it waited: again */
      a->lease = 0;
      if ((rc = make_key(a, lease_ms)) != 0)
        return rc;
      continue;
    }
    int64_t until = dlock__now_ms() + DLOCK__ENG_QUEUED_RECHECK_MS;
    until = dlock__budget_clamp(b, until);
    rc = dlock__etcd_watch_wait(p->e, p->base.p, p->base.len, p->pend.p,
                                p->pend.len, a->l.hrev + 1, 0, until, b);
    if (rc < 0 || (rc = relook(a)) != 0)
      return rc;
  }
  return dlock__fail(DLOCK_ETIMEDOUT, "permits '%s': too many rounds",
                     p->o.name);
}

static void random_id(char id[DLOCK_PERMIT_ID_LEN + 1]) {
  dlock__request_id(id); /* 32 lowercase hex */
}

/* The permit was answered past its own lease (less the drift margin),
 * counted from its grant's send: etcd may have revoked the lease and given
 * the permit to someone else already, so it is no permit (the Redis
 * store's rule, issue 38.5). DLOCK_ELOST; the caller drops the key and
 * its lease. */
static int late_answer(ep_t *p, const pacq *a, long long lease_ms) {
  return dlock__fail(DLOCK_ELOST,
                     "permits '%s': the acquisition was answered %lld ms "
                     "after its lease was granted, past its lease of %lld ms "
                     "(less the drift margin): the permit may have expired "
                     "meanwhile, so it is not held; it is given back",
                     p->o.name, (long long)(dlock__now_ms() - a->sent),
                     lease_ms);
}

int dlock__etcd_permits_acquire(dlock_permits *pp, long long wait_ms,
                                long long lease_ms,
                                char id_out[DLOCK_PERMIT_ID_LEN + 1]) {
  ep_t *p = of(pp);
  if (lease_ms > 0 && (lease_ms < 2000 || lease_ms % 1000))
    return dlock__fail(DLOCK_EINVAL,
                       "permits '%s': a lease on etcd is whole seconds of at "
                       "least 2 s (got %lld ms)",
                       p->o.name, lease_ms);
  pacq a;
  memset(&a, 0, sizeof a);
  a.p = p;
  random_id(a.id);
  dlock__sb_init(&a.key);
  key_of(p, a.id, &a.key);
  dlock__budget b;
  dlock__budget_start(&b, p->o.c, wait_ms);
  char what[300];
  snprintf(what, sizeof what, "permits '%.256s'", p->o.name);
  int rc = a.key.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                     : make_key(&a, lease_ms);
  if (rc == 0)
    rc = wait_permit(&a, wait_ms, lease_ms, &b, what);
  if (rc == 1 && a.lease &&
      dlock__now_ms() >= dlock__eng_deadline(a.sent, lease_ms))
    rc = late_answer(p, &a, lease_ms);
  eperm *ep = rc == 1 ? dlock__calloc(1, sizeof *ep) : NULL;
  if (rc == 1 && !ep) {
    (void)dlock__fail(DLOCK_ENOMEM, "out of memory");
    rc = DLOCK_ENOMEM;
  }
  if (rc == 1 && ep) {
    memcpy(ep->id, a.id, sizeof ep->id);
    ep->lease = a.lease;
    ep->sess_gen = a.s.gen;
    dlock__mu_lock(&p->mu);
    ep->next = p->list;
    p->list = ep;
    dlock__mu_unlock(&p->mu);
    memcpy(id_out, a.id, sizeof a.id);
    rc = 0;
  } else if (a.rev || a.lease) {
    drop(p, &a.key, a.lease); /* the wait's key goes */
  }
  dlock__etcd_kvs_free(&a.l.k);
  dlock__sb_free(&a.key);
  return rc;
}

/* ---- release, update, set, read --------------------------------------------
 */

/* id as 32 lowercase hex digits into out: 0 or DLOCK_EINVAL. */
static int norm_id(const char *id, char out[DLOCK_PERMIT_ID_LEN + 1]) {
  if (!id || strlen(id) != DLOCK_PERMIT_ID_LEN)
    return dlock__fail(DLOCK_EINVAL, "permit id must be 32 hex digits");
  for (int i = 0; i < DLOCK_PERMIT_ID_LEN; i++) {
    char ch = id[i];
    if (ch >= 'A' && ch <= 'F')
      ch = (char)(ch - 'A' + 'a');
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
      return dlock__fail(DLOCK_EINVAL, "permit id '%.40s' is not hex", id);
    out[i] = ch;
  }
  out[DLOCK_PERMIT_ID_LEN] = '\0';
  return 0;
}

/* Takes the object's record of permit id off its list: its own lease, or
 * 0 (a watchdog permit, or one this object did not take). */
static int64_t unlist(ep_t *p, const char *id) {
  int64_t lease = 0;
  dlock__mu_lock(&p->mu);
  for (eperm **pp = &p->list; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, id) == 0) {
      eperm *x = *pp;
      *pp = x->next;
      lease = x->lease;
      free(x);
      break;
    }
  dlock__mu_unlock(&p->mu);
  return lease;
}

int dlock__etcd_permits_release(dlock_permits *pp, const char *id) {
  ep_t *p = of(pp);
  char nid[DLOCK_PERMIT_ID_LEN + 1];
  int rc = norm_id(id, nid);
  if (rc)
    return rc;
  int64_t own = unlist(p, nid);
  dlock__sb k, b;
  dlock__sb_init(&k);
  dlock__sb_init(&b);
  key_of(p, nid, &k);
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, k.p, k.len);
  dlock__sb_adds(&b, "\"}");
  dlock__etcd_res res = {0};
  rc = k.oom || b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                      : dlock__etcd_call(p->e, "/v3/kv/deleterange", &b,
                                         DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&k);
  dlock__sb_free(&b);
  if (rc)
    return rc;
  int64_t deleted = dlock__etcd_int(res.json, "deleted");
  json_object_put(res.json);
  if (own) { /* its lease has nothing left to keep */
    dlock__err_keep_begin();
    (void)dlock__etcd_revoke(p->e, own);
    dlock__err_keep_end();
  }
  /* a copy re-sent after the first one's answer was lost finds it gone */
  if (deleted == 0 && res.sends <= 1)
    return dlock__fail(DLOCK_ELOST,
                       "permits '%s': no permit %s (released already, or its "
                       "lease ended)",
                       p->o.name, nid);
  return 0;
}

int dlock__etcd_permits_update_lease(dlock_permits *pp, const char *id,
                                     long long lease_ms) {
  ep_t *p = of(pp);
  char nid[DLOCK_PERMIT_ID_LEN + 1];
  int rc = norm_id(id, nid);
  if (rc)
    return rc;
  if (lease_ms > 0 && (lease_ms < 2000 || lease_ms % 1000))
    return dlock__fail(DLOCK_EINVAL,
                       "permits '%s': a lease on etcd is whole seconds of at "
                       "least 2 s (got %lld ms)",
                       p->o.name, lease_ms);
  dlock__etcd_session s;
  int64_t lease = 0, ttl = 0, sent = 0;
  if ((rc = dlock__etcd_session_get(p->e, &s)) != 0 ||
      (lease_ms > 0 &&
       (rc = dlock__etcd_grant(p->e, lease_ms / 1000, &lease, &ttl, &sent))))
    return rc;
  dlock__sb k, cmp, puts;
  dlock__sb_init(&k);
  dlock__sb_init(&cmp);
  dlock__sb_init(&puts);
  key_of(p, nid, &k);
  compare(&cmp, &k, "GREATER", 0); /* it exists */
  put_op(p, &puts, &k, lease ? lease : s.id);
  look_t l;
  rc = k.oom || cmp.oom || puts.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                                    : txn_look(p, cmp.p, &puts, 1, &l);
  dlock__etcd_kvs_free(&l.k);
  dlock__sb_free(&k);
  dlock__sb_free(&cmp);
  dlock__sb_free(&puts);
  if (rc == 0 && !l.ok)
    rc = dlock__fail(DLOCK_ELOST, "permits '%s': no permit %s (expired?)",
                     p->o.name, nid);
  int64_t old = rc == 0 ? unlist(p, nid) : 0;
  eperm *ep = rc == 0 ? dlock__calloc(1, sizeof *ep) : NULL;
  if (ep) {
    memcpy(ep->id, nid, sizeof ep->id);
    ep->lease = lease;
    ep->sess_gen = s.gen;
    dlock__mu_lock(&p->mu);
    ep->next = p->list;
    p->list = ep;
    dlock__mu_unlock(&p->mu);
  }
  dlock__err_keep_begin();
  if (old) /* the key is on the new lease now */
    (void)dlock__etcd_revoke(p->e, old);
  if (rc && lease)
    (void)dlock__etcd_revoke(p->e, lease);
  dlock__err_keep_end();
  return rc;
}

int dlock__etcd_permits_set(dlock_permits *pp, long long permits,
                            int only_new) {
  ep_t *p = of(pp);
  if (permits < 0)
    return dlock__fail(DLOCK_EINVAL, "permits must be >= 0");
  char v[24];
  snprintf(v, sizeof v, "%lld", permits);
  dlock__sb cmp, puts;
  dlock__sb_init(&cmp);
  dlock__sb_init(&puts);
  if (only_new)
    compare(&cmp, &p->cap, "EQUAL", 0);
  dlock__sb_adds(&puts, "{\"request_put\":{\"key\":\"");
  dlock__etcd_b64(&puts, p->cap.p, p->cap.len);
  dlock__sb_adds(&puts, "\",\"value\":\"");
  dlock__etcd_b64(&puts, v, strlen(v));
  dlock__sb_adds(&puts, "\"}},");
  look_t l;
  int rc = cmp.oom || puts.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                               : txn_look(p, cmp.p ? cmp.p : "", &puts, 1, &l);
  dlock__etcd_kvs_free(&l.k);
  dlock__sb_free(&cmp);
  dlock__sb_free(&puts);
  if (rc == 0 && !l.ok)
    return dlock__fail(DLOCK_EBUSY, "permits '%s' are already set", p->o.name);
  return rc;
}

int dlock__etcd_permits_available(dlock_permits *pp, long long *n) {
  if (!n)
    return dlock__fail(DLOCK_EINVAL, "n is NULL");
  look_t l;
  int rc = txn_look(of(pp), "", NULL, 0, &l);
  *n = 0;
  if (rc == 0 && l.set && l.cap > (long long)l.k.n)
    *n = l.cap - (long long)l.k.n;
  dlock__etcd_kvs_free(&l.k);
  return rc;
}

static int by_expiry(const void *x, const void *y) {
  long long a = ((const dlock_permit *)x)->expires_at_ms;
  long long b = ((const dlock_permit *)y)->expires_at_ms;
  if (a < 0)
    a = 1LL << 62;
  if (b < 0)
    b = 1LL << 62;
  return a < b ? -1 : a > b;
}

/* The wall-clock expiry of lease id: now + its TTL left; -1 no lease. */
static long long expiry_of(ep_t *p, int64_t id, int64_t now_wall) {
  if (!id)
    return -1;
  char body[64];
  snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", (long long)id);
  dlock__etcd_res res = {0};
  if (dlock__etcd_calls(p->e, "/v3/lease/timetolive", body, DLOCK__ETCD_RETRY,
                        &res) != 0)
    return -1;
  int64_t t = dlock__etcd_int(res.json, "TTL");
  json_object_put(res.json);
  return now_wall + (t > 0 ? t * 1000 : 0);
}

int dlock__etcd_permits_list(dlock_permits *pp, dlock_permit **out, size_t *n,
                             long long *available) {
  ep_t *p = of(pp);
  *out = NULL;
  *n = 0;
  look_t l;
  int rc = txn_look(p, "", NULL, 0, &l);
  if (rc)
    return rc;
  dlock_permit *v = l.k.n ? dlock__calloc(l.k.n, sizeof *v) : NULL;
  if (l.k.n && !v) {
    dlock__etcd_kvs_free(&l.k);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  int64_t now = dlock__wall_ms();
  for (size_t i = 0; i < l.k.n; i++) {
    const char *slash = strrchr(l.k.v[i].key, '/');
    snprintf(v[i].id, sizeof v[i].id, "%s", slash ? slash + 1 : "");
    /* one read per lease: a watchdog permit's is the session's */
    long long at = -2;
    for (size_t j = 0; j < i && at == -2; j++)
      if (l.k.v[j].lease == l.k.v[i].lease)
        at = v[j].expires_at_ms;
    v[i].expires_at_ms = at != -2 ? at : expiry_of(p, l.k.v[i].lease, now);
  }
  if (l.k.n > 1)
    qsort(v, l.k.n, sizeof *v, by_expiry);
  if (available)
    *available =
        l.set && l.cap > (long long)l.k.n ? l.cap - (long long)l.k.n : 0;
  *out = v;
  *n = l.k.n;
  rc = l.set;
  dlock__etcd_kvs_free(&l.k);
  return rc;
}

/* ---- the object's end, and losses -------------------------------------------
 */

void dlock__etcd_permits_free(dlock_permits *pp) {
  ep_t *p = of(pp);
  dlock__etcd *e = p->e;
  dlock_client *c = p->o.c;
  dlock__mu_lock(&e->mu);
  for (ep_t **q = &e->permits; *q; q = &(*q)->next)
    if (*q == p) {
      *q = p->next;
      break;
    }
  dlock__mu_unlock(&e->mu);
  /* watchdog permits live with the session: they go with the object */
  while (p->list) {
    eperm *x = p->list;
    p->list = x->next;
    if (!x->lease && !atomic_load(&c->closing) &&
        c->fork_gen == dlock__fork_gen()) {
      dlock__sb k;
      dlock__sb_init(&k);
      key_of(p, x->id, &k);
      drop(p, &k, 0);
      dlock__sb_free(&k);
    }
    free(x);
  }
  dlock__sb_free(&p->base);
  dlock__sb_free(&p->cap);
  dlock__sb_free(&p->pfx);
  dlock__sb_free(&p->pend);
  pthread_mutex_destroy(&p->mu);
  free(p->o.name);
  free(p);
  dlock__client_unref(c);
}

void dlock__etcd_permits_tick(dlock__etcd *e, int64_t now, int64_t *next,
                              dlock__lost_note **lost) {
  int64_t deadline = dlock__eng_deadline(e->s.ok_sent, e->s.ttl_ms);
  for (ep_t *p = e->permits; p; p = p->next) {
    dlock__mu_lock(&p->mu);
    int why = 0;
    for (eperm *x = p->list; x; x = x->next) {
      if (x->lease || x->told)
        continue;
      if (x->sess_gen != e->s.gen || !e->s.id) {
        why = DLOCK__LOST_GONE;
      } else if (now >= deadline) {
        why = DLOCK__LOST_UNRENEWED;
      } else {
        if (deadline < *next)
          *next = deadline;
        continue;
      }
      x->told = 1;
    }
    dlock__mu_unlock(&p->mu);
    if (why)
      dlock__lost_add(lost, p->o.name, why);
  }
}
