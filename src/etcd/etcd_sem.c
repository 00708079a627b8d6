/*
 * etcd_sem.c -- the counting semaphore (dlock_sem_*) on etcd: the same
 * calls and error codes as the Redis store's Redisson RSemaphore layout
 * (sem.c), with etcd's own layout and guarantees (docs/etcd.md,
 * docs/semaphore.md).
 *
 * LAYOUT. One key K = <prefix><name>~sem, no lease. It lies OUTSIDE the
 * name's range <prefix><name>/ .. <prefix><name>0 ('~' sorts after both),
 * where a mutex of the same name keeps its keys (NAME/<lease hex>) and
 * reads them: the mutex's trylock compares that whole range empty, and its
 * lock reads only the oldest key of it, so a key of the semaphore's in
 * there -- NAME/~sem, say -- would make the mutex "held elsewhere" (the
 * permits' keys, NAME~permits/..., lie outside it for the same reason). No
 * mutex or permits key ends in "~sem" (theirs end in hex digits or "capacity"),
 * and K is no lock key to dlock_lock_names_query (its last segment is not hex).
 * A name with a
 * '/' ("a/b") lies in its parent's range ("a/"), as a mutex "a/b" does.
 * Its value is the number of available permits in decimal, followed --
 * when dlock wrote it -- by a space and the 32 hex digits of the request
 * id of the change ("3 9f0c..."); a value put by hand ("3") is read the
 * same. A MISSING KEY MEANS "not set", as on Redis: 0 permits, nothing can
 * be taken until dlock_sem_init or dlock_sem_post creates it.
 *
 * EVERY CHANGE IS A COMPARE-AND-SWAP: read K (its value and mod revision),
 * then one txn "K's mod revision is still the one read" (or, when K was
 * missing, "K's create revision is 0") -> put the new count; else the txn
 * answers K as it is now, and the caller decides again from that state.
 * init puts n if K is missing (else DLOCK_EBUSY), post adds 1 (creating K
 * at 1), an acquire takes 1 if the count is at least 1. No lock is held
 * anywhere; a failed compare means another change got in first.
 *
 * A LOST ANSWER. A request whose answer did not come back is sent again --
 * by the transport (a timeout, a broken connection, another member), and
 * by libcurl itself, unseen, when a kept-alive connection dies before any
 * answer. A copy compares with the same revision, so at most one copy
 * changes K; but if an earlier copy changed it, the last one reports a
 * failed compare, and deciding again from there would count twice (a post)
 * or take a second permit (an acquire). So a failed compare is never taken
 * at its word: the failure branch's K shows this call's request id (done),
 * or K changed exactly once since the state compared with (its version is
 * one more, same creation: that change is the one K shows, not this call's),
 * or else the first change after that state is looked up -- a watch of K
 * from its revision + 1 replays it from etcd's history -- and it was this
 * call's exactly when it carries this call's request id. Once K moved past
 * the revision a copy compares with, no copy still in flight can apply:
 * revisions are never reused. A call with no answer at all reads K the same
 * way; when etcd cannot be asked, or K did not change (a late copy may
 * still land), it ends with the transport's code (DLOCK_ECONN ...),
 * outcome unknown, as on Redis. A key deleted by hand while a call runs is
 * taken as it is found: what the call had changed went with it.
 *
 * WAITING. An acquire that finds no permit watches K from the revision of
 * the read + 1 (any change wakes it; no change is missed between the read
 * and the watch) and tries again, within its budget; it also looks again
 * every DLOCK__ENG_QUEUED_RECHECK_MS. Waiters are not ordered: the permit
 * goes to whichever compare-and-swap reaches etcd first.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/etcd_int.h"

/* Compare-and-swap rounds one call tries in a row (each failed round means
 * another client's change got in first). */
#define DLOCK__ESEM_ROUNDS 1000

typedef struct esem {
  dlock__chobj o; /* first: kind (g_kind), client, name */
  dlock__etcd *e;
  dlock__sb key; /* K */
} esem_t;

/* The kind mark of an etcd semaphore (never run as a counter). */
static const dlock__counter_kind g_kind = {"semaphore", NULL, 0, 0,
                                           dlock__etcd_no_counter};

static esem_t *of(dlock_sem *s) { return (esem_t *)(void *)s; }

int dlock__etcd_sem_new(dlock_client *c, const char *name, dlock_sem **out) {
  if (!out)
    return dlock__fail(DLOCK_EINVAL, "out is NULL");
  *out = NULL;
  int rc = dlock__client_check(c);
  if (rc)
    return rc;
  if (!name || !*name)
    return dlock__fail(DLOCK_EINVAL, "semaphore name is NULL or empty");
  esem_t *s = dlock__calloc(1, sizeof *s);
  size_t n = strlen(name);
  if (!s || !(s->o.name = dlock__strndup(name, n))) {
    free(s);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  s->o.kind = &g_kind;
  s->o.c = c;
  s->o.name_len = n;
  s->e = c->etcd;
  dlock__sb_init(&s->key);
  dlock__sb_add(&s->key, s->e->prefix, s->e->prefix_len);
  dlock__sb_add(&s->key, name, n);
  dlock__sb_adds(&s->key, "~sem");
  if (s->key.oom) {
    dlock__sb_free(&s->key);
    free(s->o.name);
    free(s);
    return dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  dlock__client_ref(c);
  *out = (dlock_sem *)(void *)s;
  return 0;
}

void dlock__etcd_sem_free(dlock_sem *ss) {
  esem_t *s = of(ss);
  dlock_client *c = s->o.c;
  dlock__sb_free(&s->key);
  free(s->o.name);
  free(s);
  dlock__client_unref(c);
}

/* ---- K's state --------------------------------------------------------- */

/* K as one read (or a txn's failure branch) saw it. */
typedef struct seen {
  int exists;
  long long count;
  int64_t mod, create; /* K's revisions (exists) */
  int64_t version;     /* K's puts since its creation (exists) */
  int64_t hrev;        /* the answer's header revision */
  char tag[33];        /* the request id in the value; "" none */
} seen_t;

/* Parses a value "<count>[ <32 hex>]" into st: 0, or -1 (not a number). */
static int parse_value(const char *v, seen_t *st) {
  char *end = NULL;
  st->tag[0] = '\0';
  if (!*v || *v == ' ')
    return -1;
  st->count = strtoll(v, &end, 10);
  if (end == v)
    return -1;
  if (*end == '\0')
    return 0;
  if (*end != ' ' || strlen(end + 1) != 32)
    return -1;
  memcpy(st->tag, end + 1, 33);
  return 0;
}

/* st from kvs (K's range answer, 0 or 1 kv) and the header revision. */
static int take_state(esem_t *s, json_object *range, int64_t hrev, seen_t *st) {
  dlock__etcd_kvs k;
  memset(st, 0, sizeof *st);
  st->hrev = hrev;
  int rc = dlock__etcd_kvs_parse(range, NULL, &k);
  if (rc)
    return rc;
  if (k.n >= 1) {
    st->exists = 1;
    st->mod = k.v[0].mod;
    st->create = k.v[0].create;
    st->version = k.v[0].version;
    if (parse_value(k.v[0].value, st) != 0)
      rc = dlock__fail(DLOCK_EPROTO,
                       "semaphore '%s': the key's value '%.40s' is not a "
                       "number",
                       s->o.name, k.v[0].value);
  }
  dlock__etcd_kvs_free(&k);
  return rc;
}

/* One linearizable read of K into st. 0 or a code. */
static int read_state(esem_t *s, seen_t *st) {
  dlock__sb b;
  dlock__sb_init(&b);
  dlock__sb_adds(&b, "{\"key\":\"");
  dlock__etcd_b64(&b, s->key.p, s->key.len);
  dlock__sb_adds(&b, "\"}");
  dlock__etcd_res res = {0};
  int rc = b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
                 : dlock__etcd_call(s->e, "/v3/kv/range", &b, DLOCK__ETCD_RETRY,
                                    &res);
  dlock__sb_free(&b);
  if (rc == 0)
    rc = take_state(s, res.json, dlock__etcd_rev(res.json), st);
  json_object_put(res.json);
  return rc;
}

/* ---- settling an answer that may have been lost ------------------------ */

/* Was the change of K right after revision from - 1 this call's (its value
 * tagged rid)? 1 yes, 0 no, or DLOCK_ECONN (etcd could not tell: no
 * answer, or the history compacted away). */
static int first_change_is(esem_t *s, int64_t from, const char *rid) {
  int64_t wait = s->o.c->cfg.command_timeout_ms > 0
                     ? s->o.c->cfg.command_timeout_ms
                     : 5000;
  json_object *ev = NULL;
  int rc = dlock__etcd_watch_first(s->e, s->key.p, s->key.len, from,
                                   dlock__now_ms() + wait, &ev);
  if (rc != 1) {
    if (rc == 0)
      rc = dlock__fail(DLOCK_ECONN,
                       "semaphore '%s': a change whose answer was lost could "
                       "not be settled (no history of revision %lld): its "
                       "outcome is unknown",
                       s->o.name, (long long)from);
    return rc;
  }
  json_object *t = dlock__etcd_get(ev, "type");
  int put = !t || strcmp(json_object_get_string(t), "PUT") == 0;
  json_object *kvs = json_object_new_array();
  json_object *wrap = json_object_new_object();
  seen_t st;
  memset(&st, 0, sizeof st);
  rc = 0;
  json_object *kv = dlock__etcd_get(ev, "kv");
  if (put && kv && kvs && wrap) {
    json_object_array_add(kvs, json_object_get(kv));
    json_object_object_add(wrap, "kvs", kvs);
    kvs = NULL;
    if (take_state(s, wrap, 0, &st) == 0 && st.exists)
      rc = strcmp(st.tag, rid) == 0;
  } else if (put && kv) {
    rc = dlock__fail(DLOCK_ENOMEM, "out of memory");
  }
  json_object_put(kvs);
  json_object_put(wrap);
  json_object_put(ev);
  return rc;
}

/* The compare-and-swap's answer was "not done", or no answer came (the
 * call's code rc; 0 for "not done"): was it done after all, by a copy
 * whose answer was lost? A failed compare is never taken at its word: libcurl
 * itself sends a request again, unseen, when a kept-alive connection dies
 * before any answer. 1 it was done, 0 not (*now is K, and no copy of this
 * call can change K any more), or a code (rc when etcd cannot tell). */
static int settle(esem_t *s, const seen_t *was, const char *rid, int rc,
                  seen_t *now) {
  if (rc != 0) { /* no answer at all: K as it is now */
    dlock__err_keep_begin();
    int r = read_state(s, now);
    dlock__err_keep_end();
    if (r != 0)
      return rc; /* etcd cannot be asked: the outcome is unknown */
  }
  if (now->exists && strcmp(now->tag, rid) == 0)
    return 1; /* K still shows this call's change */
  if (!now->exists || (was->exists && now->mod == was->mod))
    return rc; /* unchanged (a late copy may still come: unknown), or
                  deleted since (nothing of this call is left) */
  /* K changed once since `was`, and not by this call: K is that change */
  if (was->exists
          ? now->create == was->create && now->version == was->version + 1
          : now->version == 1)
    return 0;
  /* changed more than once: was the first change this call's? */
  int r = first_change_is(s, was->exists ? was->mod + 1 : now->create, rid);
  return r < 0 && rc ? rc : r;
}

/* Appends K's compare: its mod revision is was->mod, or K is missing. */
static void compare(esem_t *s, dlock__sb *b, const seen_t *was) {
  dlock__sb_adds(b, "{\"key\":\"");
  dlock__etcd_b64(b, s->key.p, s->key.len);
  if (was->exists) {
    dlock__sb_adds(b, "\",\"target\":\"MOD\",\"result\":\"EQUAL\","
                      "\"mod_revision\":");
    dlock__etcd_jint(b, was->mod);
  } else {
    dlock__sb_adds(b, "\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                      "\"create_revision\":");
    dlock__etcd_jint(b, 0);
  }
  dlock__sb_adds(b, "}");
}

/* The CAS txn: K is still `was` -> put "<v> <rid>"; else read K. */
static void cas_body(esem_t *s, dlock__sb *b, const seen_t *was, long long v,
                     const char *rid) {
  char val[64];
  int n = snprintf(val, sizeof val, "%lld %s", v, rid);
  dlock__sb_adds(b, "{\"compare\":[");
  compare(s, b, was);
  dlock__sb_adds(b, "],\"success\":[{\"request_put\":{\"key\":\"");
  dlock__etcd_b64(b, s->key.p, s->key.len);
  dlock__sb_adds(b, "\",\"value\":\"");
  dlock__etcd_b64(b, val, (size_t)n);
  dlock__sb_adds(b, "\"}}],\"failure\":[{\"request_range\":{\"key\":\"");
  dlock__etcd_b64(b, s->key.p, s->key.len);
  dlock__sb_adds(b, "\"}}]}");
}

/* The failure branch's range (responses[0].response_range). */
static json_object *fail_range(json_object *ans) {
  json_object *rs = dlock__etcd_get(ans, "responses");
  json_object *x = rs && json_object_is_type(rs, json_type_array) &&
                           json_object_array_length(rs) > 0
                       ? json_object_array_get_idx(rs, 0)
                       : NULL;
  return dlock__etcd_get(x, "response_range");
}

/* Sets K to v if it is still `was`: 1 done, 0 not (*now = K as it is), or
 * a code -- however often the transport sent the txn (see A LOST ANSWER).
 */
static int cas(esem_t *s, const seen_t *was, long long v, seen_t *now) {
  char rid[33];
  dlock__request_id(rid);
  dlock__sb b;
  dlock__sb_init(&b);
  cas_body(s, &b, was, v, rid);
  dlock__etcd_res res = {0};
  int rc =
      b.oom ? dlock__fail(DLOCK_ENOMEM, "out of memory")
            : dlock__etcd_call(s->e, "/v3/kv/txn", &b, DLOCK__ETCD_RETRY, &res);
  dlock__sb_free(&b);
  memset(now, 0, sizeof *now);
  if (rc) {
    json_object_put(res.json);
    if (res.sends < 1 || rc == DLOCK_ENOMEM || rc == DLOCK_EAUTH)
      return rc; /* no copy reached etcd */
    return settle(s, was, rid, rc, now);
  }
  int ok = json_object_get_boolean(dlock__etcd_get(res.json, "succeeded"));
  if (!ok)
    rc = take_state(s, fail_range(res.json), dlock__etcd_rev(res.json), now);
  json_object_put(res.json);
  if (rc || ok)
    return rc ? rc : 1;
  return settle(s, was, rid, 0, now);
}

/* ---- the calls ----------------------------------------------------------- */

int dlock__etcd_sem_init(dlock_sem *ss, long long permits) {
  esem_t *s = of(ss);
  seen_t was, now;
  memset(&was, 0, sizeof was); /* K missing: the only state init changes */
  int rc = cas(s, &was, permits, &now);
  if (rc < 0)
    return rc;
  if (rc == 0)
    return dlock__fail(DLOCK_EBUSY, "semaphore '%s' is already initialised",
                       s->o.name);
  return 0;
}

int dlock__etcd_sem_post(dlock_sem *ss) {
  esem_t *s = of(ss);
  seen_t st, now;
  int rc = read_state(s, &st);
  for (int i = 0; rc == 0 && i < DLOCK__ESEM_ROUNDS; i++) {
    if (st.exists && st.count == LLONG_MAX)
      return dlock__fail(DLOCK_EREDIS, "semaphore '%s': a post would overflow",
                         s->o.name);
    if ((rc = cas(s, &st, st.exists ? st.count + 1 : 1, &now)) != 0)
      return rc < 0 ? rc : 0;
    st = now;
  }
  if (rc)
    return rc;
  return dlock__fail(DLOCK_ECONN,
                     "semaphore '%s': %d changes by others in a row got in "
                     "before this post; nothing was added",
                     s->o.name, DLOCK__ESEM_ROUNDS);
}

int dlock__etcd_sem_value(dlock_sem *ss, long long *v) {
  seen_t st;
  *v = 0;
  int rc = read_state(of(ss), &st);
  if (rc == 0 && st.exists)
    *v = st.count;
  return rc;
}

/* Takes a permit if st shows one, again from K's newer state while others'
 * changes get in first: 1 taken, 0 none (*st is the state that had none),
 * or a code. */
static int take(esem_t *s, seen_t *st, const dlock__budget *b) {
  seen_t now;
  for (int i = 0; i < DLOCK__ESEM_ROUNDS; i++) {
    if (!st->exists || st->count < 1)
      return 0;
    int rc = cas(s, st, st->count - 1, &now);
    if (rc != 0)
      return rc;
    *st = now;
    if (i > 0 && b->wait_ms != 0 && dlock__budget_left(b) == 0)
      return 0; /* the caller words the timeout */
  }
  return 0;
}

int dlock__etcd_sem_wait(dlock_sem *ss, long long wait_ms) {
  esem_t *s = of(ss);
  dlock__budget b;
  dlock__budget_start(&b, s->o.c, wait_ms);
  char what[300];
  snprintf(what, sizeof what, "semaphore '%.256s'", s->o.name);
  seen_t st;
  int rc = read_state(s, &st);
  for (int round = 0; rc == 0 && round < 1000000; round++) {
    if ((rc = take(s, &st, &b)) != 0)
      break;
    if (wait_ms == 0)
      return DLOCK_EBUSY;
    if ((rc = dlock__budget_over(&b, what)) != 0)
      break;
    int64_t until = dlock__now_ms() + DLOCK__ENG_QUEUED_RECHECK_MS;
    until = dlock__budget_clamp(&b, until);
    rc = dlock__etcd_watch_wait(s->e, s->key.p, s->key.len, NULL, 0,
                                st.hrev + 1, 0, until, &b);
    if (rc >= 0)
      rc = read_state(s, &st);
  }
  if (rc == 0) /* the rounds ran out: the budget's answer */
    rc = wait_ms < 0 ? dlock__fail(DLOCK_ETIMEDOUT,
                                   "semaphore '%s': too many rounds", s->o.name)
                     : DLOCK_ETIMEDOUT;
  /* a wait cancelled while its attempt failed reports the cancel */
  rc = dlock__budget_end(&b, rc, what);
  if (rc == DLOCK_ETIMEDOUT || rc == DLOCK_ECANCELED)
    dlock__stat_add(
        &s->o.c->stats,
        rc == DLOCK_ETIMEDOUT ? DLOCK__ST_TIMEOUTS : DLOCK__ST_CANCELS, 1);
  return rc == 1 ? 0 : rc;
}
